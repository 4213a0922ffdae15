/* The static memory planner: offsets for every buffer of a multi-stream
 * schedule in one arena.
 *
 * Lifetimes live on the partial order, not on the schedule's line: two
 * buffers may share bytes only when every access of one strictly happens
 * before every access of the other (reel_hb). When allowed, a pair that is
 * merely earlier in the schedule can be ordered by a new event edge from the
 * earlier buffer's last accesses to the later buffer's producer; edges only
 * go forward in the schedule, so the relation stays acyclic and consistent
 * with it, and nothing relies on timing.
 *
 * Offsets: greedy best-fit into the gaps left by conflicting buffers already
 * placed (XLA heap simulator / TFLite greedy-by-size), run over several
 * orderings and with and without new edges; the smallest arena wins, then
 * the fewest edges. */
#include "memory/planner.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/csr.h"
#include "core/halloc.h"
#include "memory/hb.h"
#include "memory/planner_internal.h"
#include "core/err.h"

enum { REL_FREE = 0, REL_SOFT, REL_HARD, REL_INPLACE, REL_INPLACE_SOFT };

typedef struct reel_pl_nb {
    int other;
    unsigned char rel;
} reel_pl_nb;

typedef struct reel_pl_buf {
    size_t size;        /* rounded up to the alignment; 0 = not placed */
    int first, last;    /* schedule positions of the first and last access */
    int prod;
    bool dom;           /* the producer happens before every other access */
    int nb0, nnb;       /* slice of the neighbour array */
} reel_pl_buf;

typedef struct reel_pl_iv {
    size_t lo, hi;
} reel_pl_iv;

typedef struct reel_pl_run {
    int *order;         /* placement order */
    int n, mode;        /* buffers placed; mode % 3: 0 no edges, 1 edges to
                           stay low, 2 edges freely; mode >= 3: pull in-place
                           partners */
    int crit;           /* position in order whose placement reached the arena */
    size_t *off;
    size_t arena;
    int ne, cap;
    int *from, *to;
} reel_pl_run;

typedef struct reel_pl {
    const reel_mem_problem *p;
    reel_hb hb;
    reel_pl_buf *b;
    reel_pl_nb *nb;         /* CSR over buffers */
    bool *placed;
    reel_pl_iv *ivs;        /* scratch, one per neighbour */
    bool edges;             /* this run may add edges */
    bool eager_edges;       /* ...wherever they let bytes be shared, not
                               only where they keep the arena from growing */
    bool pull_inplace;      /* place in-place partners right after a buffer */
    int *work;              /* scratch worklist of buffers */
    reel_pl_run *run;       /* offsets and edges of the run in progress */
    size_t top;
    size_t npairs;          /* pairs in the conflict graph */
} reel_pl;

/* ---- problem checks and per-buffer facts ---------------------------------- */

static reel_status reel_pl_check(const reel_mem_problem *p)
{
    if (p->nnodes < 0 || p->nbufs < 0 || (p->nbufs > 0 && !p->bufs))
        return REEL_E_INVALID_ARG;
    if (p->alignment & (p->alignment - 1))
        return REEL_E_INVALID_ARG;
    for (int i = 0; i < p->nbufs; i++) {
        const reel_mem_buf *b = &p->bufs[i];
        if (b->nacc < 1 || !b->acc || b->inplace_src < -1 || b->inplace_src >= p->nbufs ||
            b->inplace_src == i)
            return REEL_E_INVALID_ARG;
        for (int k = 0; k < b->nacc; k++)
            if (b->acc[k] < b->acc[0] || b->acc[k] >= p->nnodes)
                return REEL_E_INVALID_ARG;
    }
    return REEL_OK;
}

size_t reel_mem_align_size(size_t size, size_t align)
{
    if (align <= 1)
        return size;
    if (size > SIZE_MAX - (align - 1))
        return 0;
    return (size + align - 1) & ~(align - 1);
}

static int reel_pl_last(const reel_mem_buf *b)
{
    int m = b->acc[0];
    for (int k = 1; k < b->nacc; k++)
        if (b->acc[k] > m)
            m = b->acc[k];
    return m;
}

static bool reel_pl_dominates(const reel_hb *hb, const reel_mem_buf *b)
{
    for (int k = 1; k < b->nacc; k++)
        if (b->acc[k] != b->acc[0] && !reel_hb_before(hb, b->acc[0], b->acc[k]))
            return false;
    return true;
}

/* Every access of a strictly happens before every access of b. */
bool reel_mem_ordered(const reel_hb *hb, const reel_mem_buf *a, const reel_mem_buf *b)
{
    for (int i = 0; i < a->nacc; i++)
        for (int j = 0; j < b->nacc; j++)
            if (!reel_hb_before(hb, a->acc[i], b->acc[j]))
                return false;
    return true;
}


/* 1: dst may take src's bytes at its producer p (src's last access is p,
 * src's other accesses happen before p, dst's others after it); 0: not yet
 * ordered, but src's other accesses come earlier in the schedule, so edges
 * to p would make it so; -1: never. */
int reel_mem_inplace_ok(const reel_hb *hb, const reel_mem_buf *src, const reel_mem_buf *dst)
{
    int p = dst->acc[0];
    if (reel_pl_last(src) != p || !reel_pl_dominates(hb, dst))
        return -1;
    for (int k = 0; k < src->nacc; k++)
        if (src->acc[k] != p && !reel_hb_before(hb, src->acc[k], p))
            return 0;
    return 1;
}

static int reel_pl_inplace(const reel_pl *pl, int src, int dst)
{
    int r = reel_mem_inplace_ok(&pl->hb, &pl->p->bufs[src], &pl->p->bufs[dst]);
    if (r > 0)
        return REL_INPLACE;
    return r == 0 && pl->p->allow_new_edges ? REL_INPLACE_SOFT : REL_HARD;
}

/* The relation of a pair that is not ordered either way (in-place, soft or
 * hard). */
static int reel_pl_relation_unordered(const reel_pl *pl, int i, int j)
{
    const reel_mem_problem *p = pl->p;
    const reel_pl_buf *bi = &pl->b[i], *bj = &pl->b[j];
    int r = REL_HARD;
    if (p->bufs[j].inplace_src == i)
        r = reel_pl_inplace(pl, i, j);
    if (r == REL_HARD && p->bufs[i].inplace_src == j)
        r = reel_pl_inplace(pl, j, i);
    if (r != REL_HARD)
        return r;
    if (p->allow_new_edges &&
        ((bi->last < bj->prod && bj->dom) || (bj->last < bi->prod && bi->dom)))
        return REL_SOFT;
    return REL_HARD;
}

static int reel_pl_relation(const reel_pl *pl, int i, int j)
{
    const reel_mem_problem *p = pl->p;
    const reel_pl_buf *bi = &pl->b[i], *bj = &pl->b[j];
    if ((bi->last < bj->first && reel_mem_ordered(&pl->hb, &p->bufs[i], &p->bufs[j])) ||
        (bj->last < bi->first && reel_mem_ordered(&pl->hb, &p->bufs[j], &p->bufs[i])))
        return REL_FREE;
    return reel_pl_relation_unordered(pl, i, j);
}

/* ---- the conflict graph --------------------------------------------------- */

typedef struct reel_pl_pair {
    int i, j;
    unsigned char rel;
} reel_pl_pair;

typedef struct reel_pl_pairs_out {
    reel_pl_pair *v;
    size_t n, cap;
} reel_pl_pairs_out;

static reel_status reel_pl_push(reel_pl_pairs_out *o, int i, int j, int rel)
{
    if (o->n == o->cap) {
        size_t cap = o->cap ? 2 * o->cap : 1024;
        reel_pl_pair *nv = reel_hrealloc(o->v, cap * sizeof *nv);
        if (!nv)
            return REEL_E_OOM;
        o->v = nv;
        o->cap = cap;
    }
    o->v[o->n++] = (reel_pl_pair){ i, j, (unsigned char)rel };
    return REEL_OK;
}

/* The reference: every pair of placed buffers, in (i, j) order. */
static reel_status reel_pl_pairs_all(const reel_pl *pl, reel_pl_pairs_out *o)
{
    for (int i = 0; i < pl->p->nbufs; i++) {
        if (!pl->b[i].size)
            continue;
        for (int j = i + 1; j < pl->p->nbufs; j++) {
            if (!pl->b[j].size)
                continue;
            int r = reel_pl_relation(pl, i, j);
            if (r != REL_FREE)
                REEL_TRY(reel_pl_push(o, i, j, r));
        }
    }
    return REEL_OK;
}

static int reel_pl_pair_cmp(const void *pa, const void *pb)
{
    const reel_pl_pair *a = pa, *b = pb;
    if (a->i != b->i)
        return a->i < b->i ? -1 : 1;
    return a->j < b->j ? -1 : a->j > b->j ? 1 : 0;
}

/* Placed buffers sorted by key (counting sort over 0..n, stable in index
 * order); returns how many. */
static int reel_pl_sort_by(const reel_pl *pl, const int *key, int n, int *cnt, int *out)
{
    int nb = pl->p->nbufs, m = 0;
    memset(cnt, 0, ((size_t)n + 2) * sizeof *cnt);
    for (int i = 0; i < nb; i++)
        if (pl->b[i].size && key[i] <= n) {
            cnt[key[i] + 1]++;
            m++;
        }
    reel_csr_offsets(cnt, n + 1);
    for (int i = 0; i < nb; i++)
        if (pl->b[i].size && key[i] <= n)
            out[cnt[key[i]]++] = i;
    return m;
}

/* Pairs whose schedule spans [first, last] intersect: never ordered, since
 * happens-before implies schedule order. A sweep in order of first access
 * over the buffers still live: each one scanned is either a pair or drops
 * out, so the work is the output plus the buffers. */
static reel_status reel_pl_pairs_overlap(const reel_pl *pl, const int *byfirst, int m, int *live,
                                         reel_pl_pairs_out *o)
{
    int nlive = 0;
    for (int k = 0; k < m; k++) {
        int j = byfirst[k], keep = 0;
        for (int q = 0; q < nlive; q++) {
            int i = live[q];
            if (pl->b[i].last < pl->b[j].first)
                continue;
            live[keep++] = i;
            REEL_TRY(reel_pl_push(o, i < j ? i : j, i < j ? j : i, 0));
        }
        nlive = keep;
        live[nlive++] = j;
    }
    return REEL_OK;
}

/* Per-buffer summaries over the forward clocks, [nbufs][S] each:
 * after[a][t]: the first node of stream t that every access of a happens
 * before (max over the accesses of their clocks); amin[b][t]: b's first
 * access on stream t (n if none). Every access of a happens before every
 * access of b exactly when amin[b][t] >= after[a][t] for every t. */
static void reel_pl_summaries(const reel_pl *pl, int *after, int *amin)
{
    const reel_hb *hb = &pl->hb;
    int S = hb->nstreams, n = hb->n;
    for (int a = 0; a < pl->p->nbufs; a++) {
        const reel_mem_buf *b = &pl->p->bufs[a];
        int *af = after + (size_t)a * (size_t)S, *am = amin + (size_t)a * (size_t)S;
        for (int t = 0; t < S; t++) {
            af[t] = 0;
            am[t] = n;
        }
        for (int k = 0; k < b->nacc; k++) {
            int u = b->acc[k];
            for (int t = 0; t < S; t++)
                if (reel_hb_next(hb, u, t) > af[t])
                    af[t] = reel_hb_next(hb, u, t);
            if (u < am[hb->sid[u]])
                am[hb->sid[u]] = u;
        }
    }
}

/* Pairs a before b in the schedule (last(a) < first(b)) that happens-before
 * does not order: b has an access on some stream t before after[a][t]. Per
 * stream, buffers by their first access on it; for a, the ones in
 * (last(a), after[a][t]) are all unordered pairs or overlaps (found by the
 * sweep), so the scan costs the output times the streams. A pair found on
 * several streams is kept on the first. */
static reel_status reel_pl_pairs_unordered(const reel_pl *pl, const int *after, const int *amin, int *cnt,
                                           int *key, int *bys, int *bys0, reel_pl_pairs_out *o)
{
    int nb = pl->p->nbufs, S = pl->hb.nstreams, n = pl->hb.n;
    for (int t = 0; t < S; t++) {
        for (int i = 0; i < nb; i++)
            key[i] = amin[(size_t)i * (size_t)S + (size_t)t];
        int *list = bys + (size_t)t * (size_t)nb;
        bys0[t] = reel_pl_sort_by(pl, key, n - 1, cnt, list);
    }
    for (int a = 0; a < nb; a++) {
        const reel_pl_buf *ba = &pl->b[a];
        const int *af = after + (size_t)a * (size_t)S;
        if (!ba->size)
            continue;
        for (int t = 0; t < S; t++) {
            const int *list = bys + (size_t)t * (size_t)nb;
            int lo = 0, hi = bys0[t];
            while (lo < hi) {       /* the first with amin[.][t] > last(a) */
                int mid = lo + (hi - lo) / 2;
                if (amin[(size_t)list[mid] * (size_t)S + (size_t)t] > ba->last)
                    hi = mid;
                else
                    lo = mid + 1;
            }
            for (int k = lo; k < bys0[t]; k++) {
                int b = list[k];
                const int *bm = amin + (size_t)b * (size_t)S;
                if (bm[t] >= af[t])
                    break;
                if (pl->b[b].first <= ba->last)
                    continue;       /* spans intersect: the sweep has it */
                bool earlier = false;
                for (int u = 0; u < t && !earlier; u++)
                    earlier = bm[u] < af[u];
                if (!earlier)
                    REEL_TRY(reel_pl_push(o, a < b ? a : b, a < b ? b : a, 0));
            }
        }
    }
    return REEL_OK;
}

/* Every pair of placed buffers that is not ordered either way, in (i, j)
 * order with its relation, without looking at the pairs that are: the spans
 * that intersect, then those apart in the schedule but not ordered. */
static reel_status reel_pl_pairs_fast(const reel_pl *pl, reel_pl_pairs_out *o)
{
    int nb = pl->p->nbufs, S = pl->hb.nstreams, n = pl->hb.n;
    size_t cells = (size_t)nb * (size_t)S + 1;
    reel_status st = REEL_E_OOM;
    int *cnt = reel_halloc(((size_t)n + 3) * sizeof *cnt);
    int *key = reel_halloc(((size_t)nb + 1) * sizeof *key);
    int *order = reel_halloc(((size_t)nb + 1) * sizeof *order);
    int *live = reel_halloc(((size_t)nb + 1) * sizeof *live);
    int *after = reel_halloc(cells * sizeof *after);
    int *amin = reel_halloc(cells * sizeof *amin);
    int *bys = reel_halloc(cells * sizeof *bys);
    int *bys0 = reel_halloc(((size_t)S + 1) * sizeof *bys0);
    if (!cnt || !key || !order || !live || !after || !amin || !bys || !bys0)
        goto done;
    for (int i = 0; i < nb; i++)
        key[i] = pl->b[i].first;
    int m = reel_pl_sort_by(pl, key, n - 1, cnt, order);
    st = reel_pl_pairs_overlap(pl, order, m, live, o);
    if (st != REEL_OK)
        goto done;
    reel_pl_summaries(pl, after, amin);
    st = reel_pl_pairs_unordered(pl, after, amin, cnt, key, bys, bys0, o);
    if (st != REEL_OK)
        goto done;
    if (o->n > 1)
        qsort(o->v, o->n, sizeof *o->v, reel_pl_pair_cmp);
    for (size_t k = 0; k < o->n; k++)
        o->v[k].rel = (unsigned char)reel_pl_relation_unordered(pl, o->v[k].i, o->v[k].j);
done:
    reel_hfree(cnt);
    reel_hfree(key);
    reel_hfree(order);
    reel_hfree(live);
    reel_hfree(after);
    reel_hfree(amin);
    reel_hfree(bys);
    reel_hfree(bys0);
    return st;
}

static reel_status reel_pl_pairs(const reel_pl *pl, reel_pl_pair **out, size_t *count)
{
    reel_pl_pairs_out o = { 0 };
    reel_status st = pl->p->exhaustive ? reel_pl_pairs_all(pl, &o) : reel_pl_pairs_fast(pl, &o);
    if (st != REEL_OK) {
        reel_hfree(o.v);
        return st;
    }
    *out = o.v;
    *count = o.n;
    return REEL_OK;
}

static reel_status reel_pl_graph(reel_pl *pl)
{
    reel_pl_pair *pairs = NULL;
    size_t np = 0;
    REEL_TRY(reel_pl_pairs(pl, &pairs, &np));
    pl->npairs = np;
    int nb = pl->p->nbufs;
    int *cur = reel_hcalloc((size_t)nb + 2, sizeof *cur);
    pl->nb = reel_halloc((2 * np + 1) * sizeof *pl->nb);
    pl->ivs = reel_halloc((2 * np + 1) * sizeof *pl->ivs);
    if (!cur || !pl->nb || !pl->ivs) {
        reel_hfree(cur);
        reel_hfree(pairs);
        return REEL_E_OOM;
    }
    /* Neighbours of each buffer, CSR (core/csr.h; values are pairs). */
    for (size_t k = 0; k < np; k++) {
        cur[pairs[k].i + 1]++;
        cur[pairs[k].j + 1]++;
    }
    reel_csr_offsets(cur, nb);
    for (int i = 0; i < nb; i++) {
        pl->b[i].nb0 = cur[i];
        pl->b[i].nnb = cur[i + 1] - cur[i];
    }
    for (size_t k = 0; k < np; k++) {
        pl->nb[cur[pairs[k].i]++] = (reel_pl_nb){ pairs[k].j, pairs[k].rel };
        pl->nb[cur[pairs[k].j]++] = (reel_pl_nb){ pairs[k].i, pairs[k].rel };
    }
    reel_hfree(cur);
    reel_hfree(pairs);
    return REEL_OK;
}

/* ---- orderings ------------------------------------------------------------ */

enum { ORD_SIZE, ORD_LIFE, ORD_FIRST, ORD_AREA, ORD_CONFLICT, ORD_SIZE_FIRST, ORD_COUNT };
#ifndef REEL_PL_RANDOM_ORDERS
#define REEL_PL_RANDOM_ORDERS 16
#endif
/* Refinement budget: placements times (buffers + conflicts), and a cap. */
#ifndef REEL_PL_REFINE_WORK
#define REEL_PL_REFINE_WORK ((size_t)1 << 24)
#endif
#ifndef REEL_PL_REFINE_MAX
#define REEL_PL_REFINE_MAX 256
#endif

typedef struct reel_pl_key {
    double k1, k2;
    int idx;
} reel_pl_key;

static int reel_pl_key_cmp(const void *pa, const void *pb)
{
    const reel_pl_key *a = pa, *b = pb;
    if (a->k1 != b->k1)
        return a->k1 > b->k1 ? -1 : 1;
    if (a->k2 != b->k2)
        return a->k2 > b->k2 ? -1 : 1;
    return a->idx - b->idx;
}

static double reel_pl_conflict_weight(const reel_pl *pl, int i)
{
    double w = (double)pl->b[i].size;
    for (int k = 0; k < pl->b[i].nnb; k++) {
        const reel_pl_nb *n = &pl->nb[pl->b[i].nb0 + k];
        if (n->rel == REL_HARD || (!pl->edges && n->rel != REL_FREE))
            w += (double)pl->b[n->other].size;
    }
    return w;
}

static void reel_pl_key_of(const reel_pl *pl, int ord, int i, reel_pl_key *k)
{
    const reel_pl_buf *b = &pl->b[i];
    double size = (double)b->size, life = (double)(b->last - b->first + 1);
    k->idx = i;
    switch (ord) {
    case ORD_SIZE: k->k1 = size; k->k2 = life; break;
    case ORD_LIFE: k->k1 = life; k->k2 = size; break;
    case ORD_FIRST: k->k1 = -(double)b->first; k->k2 = size; break;
    case ORD_AREA: k->k1 = size * life; k->k2 = size; break;
    case ORD_CONFLICT: k->k1 = reel_pl_conflict_weight(pl, i); k->k2 = size; break;
    case ORD_SIZE_FIRST: k->k1 = size; k->k2 = -(double)b->first; break;
    default: {
        /* perturbed size order: a deterministic hash of (ordering, buffer)
         * scales each size by up to +-25% to escape ties and bad luck */
        uint64_t z = ((uint64_t)ord << 32 | (uint32_t)i) * 0x9e3779b97f4a7c15ull;
        z = (z ^ (z >> 29)) * 0xbf58476d1ce4e5b9ull;
        z ^= z >> 32;
        k->k1 = size * (0.75 + 0.5 * (double)(z & 0xffff) / 65536.0);
        k->k2 = life;
        break;
    }
    }
}

static reel_status reel_pl_order(reel_pl *pl, int ord, int *order, int *n_out)
{
    int nb = pl->p->nbufs, n = 0;
    reel_pl_key *keys = reel_halloc(((size_t)nb + 1) * sizeof *keys);
    if (!keys)
        return REEL_E_OOM;
    for (int i = 0; i < nb; i++)
        if (pl->b[i].size)
            reel_pl_key_of(pl, ord, i, &keys[n++]);
    if (n > 1)
        qsort(keys, (size_t)n, sizeof *keys, reel_pl_key_cmp);
    for (int k = 0; k < n; k++)
        order[k] = keys[k].idx;
    *n_out = n;
    reel_hfree(keys);
    return REEL_OK;
}

/* ---- placement ------------------------------------------------------------ */

/* Whether a placed neighbour's bytes are off limits (exact in-place offsets
 * are handled by reel_pl_fits). soft_ok: new edges may order the pair. */
static bool reel_pl_blocks(const reel_pl *pl, int rel, bool soft_ok)
{
    if (rel == REL_SOFT)
        return !(pl->edges && soft_ok);
    return rel != REL_FREE;
}

static int reel_pl_iv_cmp(const void *pa, const void *pb)
{
    const reel_pl_iv *a = pa, *b = pb;
    return a->lo < b->lo ? -1 : a->lo > b->lo ? 1 : 0;
}

/* Best fit among the gaps between blocking neighbours: the smallest gap that
 * holds the buffer (the space up to the current top counts as a gap), else
 * the end of the highest blocking interval. */
static size_t reel_pl_best_fit(reel_pl *pl, int x, bool soft_ok)
{
    const reel_pl_buf *bx = &pl->b[x];
    const size_t *off = pl->run->off;
    int n = 0;
    for (int k = 0; k < bx->nnb; k++) {
        const reel_pl_nb *nb = &pl->nb[bx->nb0 + k];
        if (pl->placed[nb->other] && reel_pl_blocks(pl, nb->rel, soft_ok))
            pl->ivs[n++] = (reel_pl_iv){ off[nb->other], off[nb->other] + pl->b[nb->other].size };
    }
    if (n > 1)
        qsort(pl->ivs, (size_t)n, sizeof *pl->ivs, reel_pl_iv_cmp);
    size_t end = 0, best = SIZE_MAX, best_gap = SIZE_MAX;
    for (int k = 0; k < n; k++) {
        size_t gap = pl->ivs[k].lo > end ? pl->ivs[k].lo - end : 0;
        if (gap >= bx->size && gap < best_gap) {
            best = end;
            best_gap = gap;
        }
        if (pl->ivs[k].hi > end)
            end = pl->ivs[k].hi;
    }
    if (pl->top > end && pl->top - end >= bx->size && pl->top - end < best_gap)
        best = end;
    return best == SIZE_MAX ? end : best;
}

/* Whether x fits at offset o given every placed neighbour. */
static bool reel_pl_fits(const reel_pl *pl, int x, size_t o, bool soft_ok)
{
    const reel_pl_buf *bx = &pl->b[x];
    const size_t *off = pl->run->off;
    for (int k = 0; k < bx->nnb; k++) {
        const reel_pl_nb *nb = &pl->nb[bx->nb0 + k];
        int y = nb->other;
        if (!pl->placed[y] || off[y] >= o + bx->size || o >= off[y] + pl->b[y].size)
            continue;
        bool soft = pl->edges && soft_ok;
        bool ok = (nb->rel == REL_SOFT && soft) ||
                  (nb->rel == REL_INPLACE && off[y] == o) ||
                  (nb->rel == REL_INPLACE_SOFT && off[y] == o && soft);
        if (!ok)
            return false;
    }
    return true;
}

/* The best offset for x: best fit, or an in-place partner's offset when it
 * does not raise the arena more. Returns the arena top it leads to. */
static size_t reel_pl_choose(reel_pl *pl, int x, bool soft_ok, size_t *o_out)
{
    const reel_pl_buf *bx = &pl->b[x];
    size_t o = reel_pl_best_fit(pl, x, soft_ok);
    size_t top = o + bx->size > pl->top ? o + bx->size : pl->top;
    for (int k = 0; k < bx->nnb; k++) {
        const reel_pl_nb *nb = &pl->nb[bx->nb0 + k];
        if (!pl->placed[nb->other] || (nb->rel != REL_INPLACE && nb->rel != REL_INPLACE_SOFT))
            continue;
        size_t c = pl->run->off[nb->other];
        size_t t = c + bx->size > pl->top ? c + bx->size : pl->top;
        if (t <= top && reel_pl_fits(pl, x, c, soft_ok)) {
            o = c;
            top = t;
            break;
        }
    }
    *o_out = o;
    return top;
}

/* ---- new edges ------------------------------------------------------------ */

static reel_status reel_pl_add_edge(reel_pl *pl, int u, int v)
{
    reel_pl_run *r = pl->run;
    for (int e = 0; e < r->ne; e++)   /* already implied by an added edge */
        if ((r->from[e] == u || reel_hb_before(&pl->hb, u, r->from[e])) &&
            (r->to[e] == v || reel_hb_before(&pl->hb, r->to[e], v)))
            return REEL_OK;
    if (r->ne == r->cap) {
        int cap = r->cap ? 2 * r->cap : 16;
        int *f = reel_hrealloc(r->from, (size_t)cap * sizeof *f);
        if (!f)
            return REEL_E_OOM;
        r->from = f;
        int *t = reel_hrealloc(r->to, (size_t)cap * sizeof *t);
        if (!t)
            return REEL_E_OOM;
        r->to = t;
        r->cap = cap;
    }
    r->from[r->ne] = u;
    r->to[r->ne] = v;
    r->ne++;
    return REEL_OK;
}

/* Orders every access of buffer e before node p: one edge from the last
 * unordered access of e on each stream (earlier ones follow by stream order). */
static reel_status reel_pl_order_before(reel_pl *pl, int e, int p)
{
    const reel_mem_buf *b = &pl->p->bufs[e];
    const int *stream = pl->p->stream;
    for (int k = 0; k < b->nacc; k++) {
        int a = b->acc[k];
        if (a == p || reel_hb_before(&pl->hb, a, p))
            continue;
        bool later = false;
        for (int m = 0; m < b->nacc && !later; m++)
            later = stream[b->acc[m]] == stream[a] &&
                    (b->acc[m] > a || (b->acc[m] == a && m < k)) && b->acc[m] != p;
        if (!later)
            REEL_TRY(reel_pl_add_edge(pl, a, p));
    }
    return REEL_OK;
}

/* x was placed overlapping soft neighbours: add the edges that order them. */
static reel_status reel_pl_edges_for(reel_pl *pl, int x)
{
    const reel_pl_buf *bx = &pl->b[x];
    const size_t *off = pl->run->off;
    for (int k = 0; k < bx->nnb; k++) {
        const reel_pl_nb *nb = &pl->nb[bx->nb0 + k];
        int y = nb->other;
        if (!pl->placed[y] || off[y] >= off[x] + bx->size || off[x] >= off[y] + pl->b[y].size)
            continue;
        if (nb->rel != REL_SOFT && nb->rel != REL_INPLACE_SOFT)
            continue;
        const reel_pl_buf *by = &pl->b[y];
        bool y_first = nb->rel == REL_SOFT ? (by->last < bx->prod && bx->dom) : by->last == bx->prod;
        REEL_TRY(y_first ? reel_pl_order_before(pl, y, bx->prod) : reel_pl_order_before(pl, x, by->prod));
    }
    return REEL_OK;
}

static reel_status reel_pl_set(reel_pl *pl, int x, size_t o, size_t top, bool soft)
{
    pl->run->off[x] = o;
    pl->placed[x] = true;
    pl->top = top;
    return soft ? reel_pl_edges_for(pl, x) : REEL_OK;
}

/* Places the unplaced in-place partners of x (and theirs) at x's offset
 * while they fit without raising the arena: a chain of in-place ops then
 * shares its bytes before larger buffers take the space around it. */
static reel_status reel_pl_pull(reel_pl *pl, int x)
{
    int n = 0;
    pl->work[n++] = x;
    while (n > 0) {
        int y = pl->work[--n];
        const reel_pl_buf *by = &pl->b[y];
        for (int k = 0; k < by->nnb; k++) {
            const reel_pl_nb *nb = &pl->nb[by->nb0 + k];
            int z = nb->other;
            bool soft = nb->rel == REL_INPLACE_SOFT;
            if (pl->placed[z] || (nb->rel != REL_INPLACE && !(soft && pl->edges)))
                continue;
            size_t o = pl->run->off[y];
            if (o + pl->b[z].size > pl->top || !reel_pl_fits(pl, z, o, soft))
                continue;
            REEL_TRY(reel_pl_set(pl, z, o, pl->top, soft));
            pl->work[n++] = z;
        }
    }
    return REEL_OK;
}

static reel_status reel_pl_place(reel_pl *pl, int x)
{
    size_t o1, o2;
    size_t top1 = reel_pl_choose(pl, x, false, &o1);
    bool soft = false;
    if (pl->eager_edges) {
        top1 = reel_pl_choose(pl, x, true, &o1);
        soft = true;
    } else if (pl->edges && top1 > pl->top) {
        size_t top2 = reel_pl_choose(pl, x, true, &o2);
        if (top2 < top1) {
            o1 = o2;
            top1 = top2;
            soft = true;
        }
    }
    REEL_TRY(reel_pl_set(pl, x, o1, top1, soft));
    return pl->pull_inplace ? reel_pl_pull(pl, x) : REEL_OK;
}

/* ---- runs ----------------------------------------------------------------- */

static void reel_pl_run_free(reel_pl_run *r)
{
    reel_hfree(r->order);
    reel_hfree(r->off);
    reel_hfree(r->from);
    reel_hfree(r->to);
    memset(r, 0, sizeof *r);
}

static reel_status reel_pl_run_alloc(const reel_pl *pl, reel_pl_run *r)
{
    size_t nb1 = (size_t)pl->p->nbufs + 1;
    r->order = reel_hcalloc(nb1, sizeof *r->order);
    r->off = reel_hcalloc(nb1, sizeof *r->off);
    return r->order && r->off ? REEL_OK : REEL_E_OOM;
}

/* Places r->order[0..n) in r->mode. */
static reel_status reel_pl_do_run(reel_pl *pl, reel_pl_run *r)
{
    size_t nb1 = (size_t)pl->p->nbufs + 1;
    pl->edges = r->mode % 3 > 0;
    pl->eager_edges = r->mode % 3 > 1;
    pl->pull_inplace = r->mode >= 3;
    pl->run = r;
    pl->top = 0;
    r->ne = 0;
    r->crit = 0;
    memset(r->off, 0, nb1 * sizeof *r->off);
    memset(pl->placed, 0, nb1 * sizeof *pl->placed);
    for (int k = 0; k < r->n; k++) {
        size_t before = pl->top;
        if (pl->placed[r->order[k]])
            continue;
        REEL_TRY(reel_pl_place(pl, r->order[k]));
        if (pl->top > before)
            r->crit = k;
    }
    r->arena = pl->top;
    return REEL_OK;
}

static bool reel_pl_better(const reel_pl_run *a, const reel_pl_run *b)
{
    return a->arena < b->arena || (a->arena == b->arena && a->ne < b->ne);
}

static void reel_pl_swap(reel_pl_run *a, reel_pl_run *b)
{
    reel_pl_run t = *a;
    *a = *b;
    *b = t;
}

/* Iterated greedy: the buffer whose placement set the arena moves to a
 * random earlier place in the order, and the order is placed again; equal
 * arenas are accepted too so the search can drift off a plateau. Bounded by
 * work, not time, so plans are deterministic. */
static reel_status reel_pl_refine(reel_pl *pl, size_t bound, reel_pl_run *best, reel_pl_run *cur)
{
    size_t work = (size_t)pl->p->nbufs + 1;
    for (int i = 0; i < pl->p->nbufs; i++)
        work += (size_t)pl->b[i].nnb;
    size_t iters = REEL_PL_REFINE_WORK / work;
    uint64_t rng = 0x2545f4914f6cdd1dull;
    iters = iters > REEL_PL_REFINE_MAX ? REEL_PL_REFINE_MAX : iters;
    for (size_t it = 0; it < iters && best->arena > bound && best->crit > 0; it++) {
        memcpy(cur->order, best->order, (size_t)best->n * sizeof *cur->order);
        cur->n = best->n;
        cur->mode = best->mode;
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        int c = best->crit, j = (int)((rng >> 8) % (uint64_t)c);
        if (rng & 1) {
            int x = cur->order[c];      /* the buffer that set the arena goes earlier */
            memmove(cur->order + j + 1, cur->order + j, (size_t)(c - j) * sizeof *cur->order);
            cur->order[j] = x;
        } else {
            int t = cur->order[j];      /* or two buffers before it trade places */
            int m = (int)((rng >> 40) % (uint64_t)c);
            cur->order[j] = cur->order[m];
            cur->order[m] = t;
        }
        REEL_TRY(reel_pl_do_run(pl, cur));
        if (cur->arena < best->arena || (cur->arena == best->arena && cur->ne <= best->ne))
            reel_pl_swap(best, cur);
    }
    return REEL_OK;
}

/* Runs every ordering, without and (when allowed) with new edges, then
 * refines the best; the best run ends in *best. bound: a lower bound, to
 * stop early. */
static reel_status reel_pl_search(reel_pl *pl, size_t bound, reel_pl_run *best)
{
    reel_pl_run cur = { 0 };
    reel_status st = reel_pl_run_alloc(pl, best);
    if (st == REEL_OK)
        st = reel_pl_run_alloc(pl, &cur);
    if (st != REEL_OK)
        goto fail;
    best->arena = SIZE_MAX;
    for (int mode = 0; mode < 6; mode++) {
        if (mode % 3 && !pl->p->allow_new_edges)
            continue;
        for (int ord = 0; ord < ORD_COUNT + REEL_PL_RANDOM_ORDERS; ord++) {
            cur.mode = mode;
            st = reel_pl_order(pl, ord, cur.order, &cur.n);
            if (st == REEL_OK)
                st = reel_pl_do_run(pl, &cur);
            if (st != REEL_OK)
                goto fail;
            if (reel_pl_better(&cur, best))
                reel_pl_swap(best, &cur);
            if (best->arena <= bound && best->ne == 0)
                goto done;
        }
    }
    st = reel_pl_refine(pl, bound, best, &cur);
    if (st != REEL_OK)
        goto fail;
done:
    reel_pl_run_free(&cur);
    return REEL_OK;
fail:
    reel_pl_run_free(&cur);
    reel_pl_run_free(best);
    return st;
}

/* ---- lower bound ---------------------------------------------------------- */

size_t reel_mem_lower_bound(const reel_mem_problem *p)
{
    if (p->nnodes < 2)
        return 0;
    /* Live bytes at the point between positions i and i+1: buffers with
     * first <= i < last. Added at first, removed at last. */
    size_t *add = reel_hcalloc((size_t)p->nnodes, sizeof *add);
    size_t *sub = reel_hcalloc((size_t)p->nnodes, sizeof *sub);
    size_t live = 0, peak = 0;
    if (!add || !sub)
        goto done;
    for (int i = 0; i < p->nbufs; i++) {
        const reel_mem_buf *b = &p->bufs[i];
        size_t sz = reel_mem_align_size(b->size, p->alignment);
        int last = reel_pl_last(b);
        if (!sz || last <= b->acc[0])
            continue;
        add[b->acc[0]] += sz;
        sub[last] += sz;
    }
    for (int i = 0; i + 1 < p->nnodes; i++) {
        live = live + add[i] - sub[i];
        if (live > peak)
            peak = live;
    }
done:
    reel_hfree(add);
    reel_hfree(sub);
    return peak;
}

/* The reference node bound: at each node, every buffer scanned. */
static size_t reel_pl_node_demand(const reel_mem_problem *p, const reel_hb *hb, int v, bool *taken)
{
    size_t sum = 0;
    for (int i = 0; i < p->nbufs; i++) {
        const reel_mem_buf *b = &p->bufs[i];
        if (b->acc[0] <= v && reel_pl_last(b) >= v)
            sum += reel_mem_align_size(b->size, p->alignment);
    }
    for (int i = 0; i < p->nbufs; i++) {
        const reel_mem_buf *d = &p->bufs[i];
        int s = d->inplace_src;
        if (d->acc[0] != v || s < 0 || taken[s])
            continue;
        int ok = reel_mem_inplace_ok(hb, &p->bufs[s], d);
        if (ok == 1 || (ok == 0 && p->allow_new_edges)) {
            size_t a = reel_mem_align_size(d->size, p->alignment);
            size_t c = reel_mem_align_size(p->bufs[s].size, p->alignment);
            sum -= a < c ? a : c;
            taken[s] = true;
        }
    }
    return sum;
}

static size_t reel_pl_node_bound_all(const reel_mem_problem *p, const reel_hb *hb)
{
    bool *taken = reel_hcalloc((size_t)p->nbufs + 1, sizeof *taken);
    size_t peak = 0;
    for (int v = 0; taken && v < p->nnodes; v++) {
        size_t d = reel_pl_node_demand(p, hb, v, taken);
        peak = d > peak ? d : peak;
    }
    reel_hfree(taken);
    return peak;
}

/* The same sums in one pass: the bytes live at node v as a running sum
 * (added at the first access, removed after the last), then the in-place
 * pairs of the buffers produced at v, in index order as the reference takes
 * them. 0 when out of memory, as the reference. */
static size_t reel_pl_node_bound_fast(const reel_mem_problem *p, const reel_hb *hb)
{
    int n = p->nnodes, nb = p->nbufs;
    size_t *add = reel_hcalloc((size_t)n + 1, sizeof *add);
    size_t *sub = reel_hcalloc((size_t)n + 1, sizeof *sub);
    int *start = reel_hcalloc((size_t)n + 2, sizeof *start);
    int *prod = reel_halloc(((size_t)nb + 1) * sizeof *prod);
    int *idx = reel_halloc(((size_t)nb + 1) * sizeof *idx);
    int *byprod = reel_halloc(((size_t)nb + 1) * sizeof *byprod);
    bool *taken = reel_hcalloc((size_t)nb + 1, sizeof *taken);
    size_t live = 0, peak = 0;
    if (!add || !sub || !start || !prod || !idx || !byprod || !taken)
        goto done;
    for (int i = 0; i < nb; i++) {
        const reel_mem_buf *b = &p->bufs[i];
        size_t sz = reel_mem_align_size(b->size, p->alignment);
        add[b->acc[0]] += sz;
        sub[reel_pl_last(b)] += sz;
        prod[i] = b->acc[0];
        idx[i] = i;
    }
    reel_csr_count(start, prod, nb);
    reel_csr_offsets(start, n);
    reel_csr_place(start, prod, idx, nb, byprod);
    reel_csr_restore(start, n);
    for (int v = 0; v < n; v++) {
        live += add[v];
        size_t sum = live;
        for (int k = start[v]; k < start[v + 1]; k++) {
            const reel_mem_buf *d = &p->bufs[byprod[k]];
            int s = d->inplace_src;
            if (s < 0 || taken[s])
                continue;
            int ok = reel_mem_inplace_ok(hb, &p->bufs[s], d);
            if (ok == 1 || (ok == 0 && p->allow_new_edges)) {
                size_t a = reel_mem_align_size(d->size, p->alignment);
                size_t c = reel_mem_align_size(p->bufs[s].size, p->alignment);
                sum -= a < c ? a : c;
                taken[s] = true;
            }
        }
        peak = sum > peak ? sum : peak;
        live -= sub[v];
    }
done:
    reel_hfree(add);
    reel_hfree(sub);
    reel_hfree(start);
    reel_hfree(prod);
    reel_hfree(idx);
    reel_hfree(byprod);
    reel_hfree(taken);
    return peak;
}

static size_t reel_pl_node_bound(const reel_mem_problem *p, const reel_hb *hb)
{
    return p->exhaustive ? reel_pl_node_bound_all(p, hb) : reel_pl_node_bound_fast(p, hb);
}

size_t reel_mem_node_bound(const reel_mem_problem *p)
{
    if (!p || reel_pl_check(p) != REEL_OK)
        return 0;
    reel_hb hb;
    if (reel_hb_build(&hb, p->nnodes, p->stream, p->nedges, p->edge_from, p->edge_to, 0, NULL, NULL))
        return 0;
    size_t peak = reel_pl_node_bound(p, &hb);
    reel_hb_free(&hb);
    return peak;
}

/* ---- public entry points -------------------------------------------------- */

static reel_status reel_pl_init(reel_pl *pl, const reel_mem_problem *p)
{
    memset(pl, 0, sizeof *pl);
    pl->p = p;
    REEL_TRY(reel_hb_build(&pl->hb, p->nnodes, p->stream, p->nedges, p->edge_from, p->edge_to,
                           0, NULL, NULL));
    size_t nb1 = (size_t)p->nbufs + 1;
    pl->b = reel_hcalloc(nb1, sizeof *pl->b);
    pl->placed = reel_hcalloc(nb1, sizeof *pl->placed);
    pl->work = reel_hcalloc(nb1, sizeof *pl->work);
    if (!pl->b || !pl->placed || !pl->work)
        return REEL_E_OOM;
    for (int i = 0; i < p->nbufs; i++) {
        const reel_mem_buf *b = &p->bufs[i];
        reel_pl_buf *q = &pl->b[i];
        q->size = reel_mem_align_size(b->size, p->alignment);
        if (b->size && !q->size)
            return REEL_E_INVALID_ARG;      /* rounding overflowed */
        q->prod = q->first = b->acc[0];
        q->last = reel_pl_last(b);
        q->dom = reel_pl_dominates(&pl->hb, b);
    }
    return reel_pl_graph(pl);
}

static void reel_pl_fini(reel_pl *pl)
{
    reel_hb_free(&pl->hb);
    reel_hfree(pl->b);
    reel_hfree(pl->nb);
    reel_hfree(pl->placed);
    reel_hfree(pl->work);
    reel_hfree(pl->ivs);
}

reel_status reel_mem_plan_compute(const reel_mem_problem *p, reel_mem_plan *out)
{
    if (!out)
        return REEL_E_INVALID_ARG;
    memset(out, 0, sizeof *out);
    if (!p)
        return REEL_E_INVALID_ARG;
    REEL_TRY(reel_pl_check(p));
    reel_pl pl;
    reel_pl_run best = { 0 };
    size_t lb = reel_mem_lower_bound(p), nbound = 0;
    reel_status st = reel_pl_init(&pl, p);
    if (st == REEL_OK) {
        nbound = reel_pl_node_bound(p, &pl.hb);
        st = reel_pl_search(&pl, lb > nbound ? lb : nbound, &best);
    }
    size_t npairs = pl.npairs;
    reel_pl_fini(&pl);
    if (st != REEL_OK)
        return st;
    reel_hfree(best.order);
    out->offsets = best.off;
    out->arena = best.arena;
    out->lower_bound = lb;
    out->node_bound = nbound;
    out->nconflicts = npairs;
    out->nnew_edges = best.ne;
    out->new_from = best.from;
    out->new_to = best.to;
    return REEL_OK;
}

reel_status reel_mem_conflicts(const reel_mem_problem *p, int **pi, int **pj, unsigned char **rel, size_t *n)
{
    if (!p || !pi || !pj || !rel || !n)
        return REEL_E_INVALID_ARG;
    *pi = *pj = NULL;
    *rel = NULL;
    *n = 0;
    REEL_TRY(reel_pl_check(p));
    reel_pl pl;
    reel_status st = reel_pl_init(&pl, p);
    if (st == REEL_OK) {
        /* the CSR lists every pair twice: keep each from its smaller end */
        size_t np = pl.npairs, k = 0;
        *pi = reel_halloc((np + 1) * sizeof **pi);
        *pj = reel_halloc((np + 1) * sizeof **pj);
        *rel = reel_halloc(np + 1);
        if (!*pi || !*pj || !*rel)
            st = REEL_E_OOM;
        for (int i = 0; st == REEL_OK && i < p->nbufs; i++)
            for (int q = 0; q < pl.b[i].nnb; q++) {
                const reel_pl_nb *nb = &pl.nb[pl.b[i].nb0 + q];
                if (nb->other <= i)
                    continue;
                (*pi)[k] = i;
                (*pj)[k] = nb->other;
                (*rel)[k++] = nb->rel;
            }
        *n = k;
    }
    reel_pl_fini(&pl);
    if (st != REEL_OK) {
        reel_hfree(*pi);
        reel_hfree(*pj);
        reel_hfree(*rel);
        *pi = *pj = NULL;
        *rel = NULL;
        *n = 0;
    }
    return st;
}

void reel_mem_plan_free(reel_mem_plan *plan)
{
    if (!plan)
        return;
    reel_hfree(plan->offsets);
    reel_hfree(plan->new_from);
    reel_hfree(plan->new_to);
    memset(plan, 0, sizeof *plan);
}

/* Overlap in bytes of two buffers as planned (raw sizes: the bytes used). */
static bool reel_pl_overlap(const reel_mem_problem *p, const reel_mem_plan *plan, int i, int j)
{
    size_t oi = plan->offsets[i], oj = plan->offsets[j];
    size_t si = p->bufs[i].size, sj = p->bufs[j].size;
    return si && sj && oi < oj + sj && oj < oi + si;
}

static bool reel_pl_pair_ok(const reel_hb *hb, const reel_mem_problem *p, const reel_mem_plan *plan,
                            int i, int j)
{
    const reel_mem_buf *a = &p->bufs[i], *b = &p->bufs[j];
    if (reel_mem_ordered(hb, a, b) || reel_mem_ordered(hb, b, a))
        return true;
    if (plan->offsets[i] != plan->offsets[j])
        return false;
    return (b->inplace_src == i && reel_mem_inplace_ok(hb, a, b) == 1) ||
           (a->inplace_src == j && reel_mem_inplace_ok(hb, b, a) == 1);
}

/* Besides overlaps (REEL_E_HAZARD), a buffer outside the arena or off the
 * alignment is reported as REEL_E_INTERNAL with *a == *b == that buffer. */
reel_status reel_mem_plan_verify(const reel_mem_problem *p, const reel_mem_plan *plan, int *a, int *b)
{
    int da, db;
    a = a ? a : &da;
    b = b ? b : &db;
    *a = *b = -1;
    if (!p || !plan || (p->nbufs > 0 && !plan->offsets) || plan->nnew_edges < 0)
        return REEL_E_INVALID_ARG;
    REEL_TRY(reel_pl_check(p));
    size_t align = p->alignment ? p->alignment : 1;
    for (int i = 0; i < p->nbufs; i++) {
        if (p->bufs[i].size && (plan->offsets[i] % align ||
                                plan->offsets[i] + p->bufs[i].size > plan->arena)) {
            *a = *b = i;
            return REEL_E_INTERNAL;
        }
    }
    reel_hb hb;
    REEL_TRY(reel_hb_build(&hb, p->nnodes, p->stream, p->nedges, p->edge_from, p->edge_to,
                           plan->nnew_edges, plan->new_from, plan->new_to));
    reel_status st = REEL_OK;
    for (int i = 0; i < p->nbufs && st == REEL_OK; i++)
        for (int j = i + 1; j < p->nbufs; j++)
            if (reel_pl_overlap(p, plan, i, j) && !reel_pl_pair_ok(&hb, p, plan, i, j)) {
                *a = i;
                *b = j;
                st = REEL_E_HAZARD;
                break;
            }
    reel_hb_free(&hb);
    return st;
}
