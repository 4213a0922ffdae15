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
    int32_t stream;         /* slot */
    bool write;
} chk_rec;

/* A byte range with the same access history, kept as a node of a treap
 * (ordered by lo, heap-ordered by prio) of one address space. Per stream: the
 * last write that no later write of these bytes is ordered after, and the
 * last read that no later write is ordered after. Whatever is not kept
 * happens before something kept, so a conflict with it implies one with what
 * is kept. Records the host has passed are dropped: everything issued later
 * follows them. A range with no history is not kept at all. */
typedef struct chk_seg {
    uint64_t lo, hi;
    uint32_t left, right, prio;     /* node indices, 0: none */
} chk_seg;

/* The history of node i is hist[i]: apart from the nodes, so that a walk
 * down the treap touches 32 bytes per node. */
typedef struct chk_hist {
    int32_t w[CHK_S];
    int32_t r[CHK_S];
} chk_hist;

typedef struct chk_space {
    uint32_t id;
    uint32_t root;
    size_t n;               /* ranges kept */
} chk_space;

typedef struct chk_alloc {
    uint32_t space;
    uint64_t lo, hi;
    const char *desc;
    int32_t rec, free_rec;  /* the alloc (while live) and the free records */
    uint32_t live_pos;      /* index in the live list while live */
    uint32_t gen;           /* how often the entry was reused: the id's high half */
    uint32_t next_freed;    /* the next freed entry, oldest first; UINT32_MAX: none */
    bool live;
} chk_alloc;

/* Freed allocations kept so that a later use or free of their id names the
 * op that freed them; past this many the oldest entry is reused, and its old
 * id is refused as one freed long ago. */
#define CHK_KEEP_FREED 65536

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
    size_t strbytes;
    /* access records; compacted when they double (reel_chk_collect) */
    chk_rec *rec;
    size_t nrec, caprec, collect_at;
    int32_t *remap;
    size_t capremap;
    /* shadow memory, one per address space; range nodes of all spaces in one
     * pool (index 0 unused), free ones chained through .left */
    chk_space *sp;
    size_t nsp, capsp;
    chk_seg *seg;
    chk_hist *hist;
    size_t nseg, capseg, caphist;
    uint32_t seg_free;
    uint32_t *walk;         /* scratch for in-order walks */
    size_t capwalk;
    uint64_t rng;
    /* allocations: live and recently freed ones (id: gen << 32 | index + 1),
     * the freed ones in a queue, and the live ones */
    chk_alloc *al;
    size_t nal, capal;
    uint32_t freed_head, freed_tail;
    size_t nfreed;
    size_t *live;
    size_t nlive, caplive;
    /* reports */
    reel_hazard *rep;
    size_t nrep, caprep, total;
    size_t step_first;      /* first report of the current step */
    size_t step_total;      /* hazards found before the current step */
    size_t op_first;        /* first report of the op being checked */
};

/* Whether record r happens before the current point of every stream: the
 * host's clock, since all work issued from now on follows the host. */
static inline bool reel_chk_dead(const reel_checker *c, int32_t r)
{
    return c->rec[r].clock <= c->vc[0][c->rec[r].stream];
}

/* The checker's copy of s ("" for NULL); NULL when out of memory. */
const char *reel_chk_intern(reel_checker *c, const char *s);
/* Whether record r happens before the current point of stream slot s. */
static inline bool reel_chk_before(const reel_checker *c, const chk_rec *r, int s)
{
    return r->clock <= c->vc[s][r->stream];
}
/* Records a hazard between records a (earlier) and b over [lo, hi); within
 * one op, one report per pair of ops, kind and run of adjacent bytes. */
reel_status reel_chk_report(reel_checker *c, reel_hazard_kind k, uint32_t space,
                            uint64_t lo, uint64_t hi, int32_t a, int32_t b);
/* After an op: joins its reports of one pair that became adjacent. */
void reel_chk_report_close(reel_checker *c);
/* Checks and records access record rec (of stream slot s) over [lo, hi). */
reel_status reel_chk_access(reel_checker *c, uint32_t space, uint64_t lo, uint64_t hi, int32_t rec, int s);
/* Drops history the host has passed, joins equal neighbours and compacts
 * the records. Between ops only (record indices move). */
reel_status reel_chk_collect(reel_checker *c);
/* Host bytes held by the shadow memory. */
size_t reel_chk_shadow_bytes(const reel_checker *c);

#endif
