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

/* One entry of one stream's history in one address space: the bytes
 * [lo, hi) were last written (or, in the reads' map, last read) on that
 * stream by record rec, at the stream's clock `clock`. Writes keep, per
 * stream, the last write of each byte that no later write of it is ordered
 * after; reads the last read that no later write is ordered after. Whatever
 * is not kept happens before something kept, so a conflict with it implies
 * one with what is kept. Records the host has passed are dropped: everything
 * issued later follows them.
 *
 * A map is a treap of disjoint entries ordered by lo, heap-ordered by prio;
 * maxclock is the largest clock in the node's subtree. An access is ordered
 * after an entry of stream t exactly when the entry's clock is at most the
 * access's clock of t, so a search for the entries it is not ordered after
 * skips every subtree whose maxclock says it is ordered after all of it:
 * an access ordered after a stream's whole history pays nothing for its
 * size (docs/memory.md, "What it keeps"). */
typedef struct chk_ent {
    uint64_t lo, hi;
    union {
        uint64_t clock;
        uint64_t maps;      /* a node of a space's cover (chk_space.cover) */
    };
    uint64_t maxclock;
    int32_t rec;
    uint32_t left, right, prio;     /* entry indices, 0: none */
} chk_ent;

/* An entry an access is not ordered after, over the bytes both touch. */
typedef struct chk_conf {
    uint64_t lo, hi;
    int32_t rec;
    int16_t phase;          /* 0: a write, 1: a read (WAR) */
    int16_t slot;
} chk_conf;

/* A space's cover is a treap of the same nodes: disjoint ranges, each naming
 * the maps (bit t: the writes of stream slot t, bit 32 + t: its reads) that
 * may hold entries over it; a map not named over a byte has no entry there,
 * and a byte under no range has none at all. So an access looks only in the
 * maps named over its bytes, however many streams there are. Where an access
 * went, the cover becomes one range (a read's naming what all of it named,
 * which may be more than is there, never less), joined with a neighbour
 * naming the same: a KV cache that one stream writes slot by slot and
 * another reads whole is a range or two a layer. A collection names again
 * only what is there once the cover has doubled (cover_at). */
typedef struct chk_space {
    uint32_t id;
    size_t n;                       /* entries kept, every stream's */
    size_t ncover;                  /* ranges of the cover */
    size_t cover_at;                /* ranges at which a collection refines it */
    uint32_t root[2][CHK_S];        /* per stream slot: [0] writes, [1] reads */
    uint32_t cover;
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
    /* access records; compacted when they grew by half the live ones
     * (reel_chk_maintain, reel_chk_collect) */
    chk_rec *rec;
    size_t nrec, caprec, collect_at;
    size_t sweep_at;        /* entries (chk_space.n, all spaces) that start a sweep */
    int32_t *remap;
    size_t capremap;
    /* shadow memory, per address space and stream; the entries of every map
     * in one pool (index 0 unused), free ones chained through .left */
    chk_space *sp;
    size_t nsp, capsp;
    chk_ent *ent;
    size_t nent, capent;
    uint32_t ent_free;
    uint32_t *walk;         /* scratch for in-order walks and rebuilds */
    size_t capwalk;
    chk_conf *conf;         /* scratch: the conflicts of the access being checked */
    size_t nconf, capconf;
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

/* The checker's copy of s ("" for NULL); NULL when out of memory. */
const char *reel_chk_intern(reel_checker *c, const char *s);
/* Records a hazard between records a (earlier) and b over [lo, hi); within
 * one op, one report per pair of ops, kind and run of adjacent bytes. */
reel_status reel_chk_report(reel_checker *c, reel_hazard_kind k, uint32_t space,
                            uint64_t lo, uint64_t hi, int32_t a, int32_t b);
/* After an op: joins its reports of one pair that became adjacent. */
void reel_chk_report_close(reel_checker *c);
/* Checks and records access record rec (of stream slot s) over [lo, hi). */
reel_status reel_chk_access(reel_checker *c, uint32_t space, uint64_t lo, uint64_t hi, int32_t rec, int s);
/* Drops history the host has passed and compacts the records. Between ops
 * only (record indices move). */
reel_status reel_chk_collect(reel_checker *c);
/* Between ops: a collection when the records have grown by half as many as
 * were live (at least 8192) and fill their array; else, when the entries
 * have doubled, drops what the host has passed from them. */
reel_status reel_chk_maintain(reel_checker *c);
/* Host bytes held by the shadow memory. */
size_t reel_chk_shadow_bytes(const reel_checker *c);

#endif
