/* Internal (L2): the hazard checker's state, shared by its files. */
#ifndef REEL_MEMORY_CHECKER_INTERNAL_H
#define REEL_MEMORY_CHECKER_INTERNAL_H

#include "core/err.h"
#include "reel/memory.h"

#define CHK_S (REEL_CHECK_MAX_STREAMS + 1)   /* clock slots; slot 0 is the host */
#define CHK_MAX_REPORTS 65536

/* One access, or an alloc / free: who, when (its stream's clock), what. */
typedef struct chk_rec {
    uint64_t clock;
    uint64_t seq;
    int64_t step;
    const char *op, *alloc;
    int stream;             /* slot */
    bool write;
} chk_rec;

/* A byte range with the same access history: the last write and, since
 * then, the last read on each stream (the earlier reads of a stream are
 * ordered before its last one, so one per stream suffices). */
typedef struct chk_seg {
    uint64_t lo, hi;
    int64_t w;
    int64_t r[CHK_S];
} chk_seg;

typedef struct chk_space {
    uint32_t id;
    chk_seg *seg;           /* sorted, disjoint */
    size_t n, cap;
} chk_space;

typedef struct chk_alloc {
    uint32_t space;
    uint64_t lo, hi;
    const char *desc;
    int64_t rec, free_rec;
    bool live;
} chk_alloc;

struct reel_checker {
    reel_err *err;
    int64_t step;
    uint64_t seq;
    /* streams: caller keys and vector clocks */
    int ns;
    uint64_t skey[CHK_S];
    uint64_t vc[CHK_S][CHK_S];
    /* events: caller keys (open addressing) and the clock of the last record */
    uint64_t *ekey;
    int64_t *eslot;         /* index into evc, -1 empty */
    size_t ecap, ne;
    uint64_t (*evc)[CHK_S];
    bool *erec;
    /* interned strings */
    char **str;
    size_t strcap, nstr;
    /* access records */
    chk_rec *rec;
    size_t nrec, caprec;
    /* shadow memory, one per address space */
    chk_space *sp;
    size_t nsp, capsp;
    /* allocations: all of them (id - 1), and the live ones */
    chk_alloc *al;
    size_t nal, capal;
    size_t *live;
    size_t nlive, caplive;
    /* reports */
    reel_hazard *rep;
    size_t nrep, caprep, total;
    size_t step_first;      /* first report of the current step */
    size_t step_total;      /* hazards found before the current step */
    size_t op_first;        /* first report of the op being checked */
};

/* The checker's copy of s ("" for NULL); NULL when out of memory. */
const char *reel_chk_intern(reel_checker *c, const char *s);
/* Whether record r happens before the current point of stream slot s. */
static inline bool reel_chk_before(const reel_checker *c, const chk_rec *r, int s)
{
    return r->clock <= c->vc[s][r->stream];
}
/* Records a hazard between records a (earlier) and b over [lo, hi); one
 * report per pair of ops and kind, its range widened. */
reel_status reel_chk_report(reel_checker *c, reel_hazard_kind k, uint32_t space,
                            uint64_t lo, uint64_t hi, int64_t a, int64_t b);
/* Checks and records access record rec (of stream slot s) over [lo, hi). */
reel_status reel_chk_access(reel_checker *c, uint32_t space, uint64_t lo, uint64_t hi, int64_t rec, int s);

#endif
