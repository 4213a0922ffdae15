/* The checker's shadow memory: per address space, a treap of disjoint byte
 * ranges with their access history. An access splits the ranges it touches
 * at its bounds, checks each piece against the writes and reads kept there,
 * records itself, and joins neighbours whose history became equal. History
 * the host has passed is dropped as it is met, and all of it, with the
 * records nothing points to any more, when the records double
 * (reel_chk_collect): a run that synchronizes keeps what its unfinished
 * work touched, not what it ever did. */
#include <string.h>

#include "core/grow.h"
#include "core/halloc.h"
#include "memory/checker_internal.h"
#include "core/err.h"

#define CHK_COLLECT_MIN 65536

static chk_space *reel_chk_space(reel_checker *c, uint32_t id)
{
    for (size_t i = 0; i < c->nsp; i++)
        if (c->sp[i].id == id)
            return &c->sp[i];
    if (!reel_grow((void **)&c->sp, &c->capsp, c->nsp + 1, sizeof *c->sp))
        return NULL;
    chk_space *s = &c->sp[c->nsp++];
    memset(s, 0, sizeof *s);
    s->id = id;
    return s;
}

/* ---- the treap ----------------------------------------------------------- */

static uint32_t reel_chk_prio(reel_checker *c)
{
    uint64_t x = c->rng ? c->rng : 0x2545f4914f6cdd1dull;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    c->rng = x;
    return (uint32_t)(x >> 32);
}

/* A new node [lo, hi) with no history; 0 when out of memory. May move c->seg. */
static uint32_t reel_chk_node(reel_checker *c, uint64_t lo, uint64_t hi)
{
    uint32_t n = c->seg_free;
    if (n) {
        c->seg_free = c->seg[n].left;
    } else {
        if (c->nseg == 0)
            c->nseg = 1;    /* index 0 is "none" */
        if (c->nseg >= UINT32_MAX || !reel_grow((void **)&c->seg, &c->capseg, c->nseg + 1, sizeof *c->seg) ||
            !reel_grow((void **)&c->hist, &c->caphist, c->nseg + 1, sizeof *c->hist))
            return 0;
        n = (uint32_t)c->nseg++;
    }
    chk_seg *g = &c->seg[n];
    g->lo = lo;
    g->hi = hi;
    g->left = g->right = 0;
    g->prio = reel_chk_prio(c);
    memset(&c->hist[n], 0xff, sizeof c->hist[n]);
    return n;
}

static void reel_chk_split(chk_seg *S, uint32_t t, uint64_t key, uint32_t *l, uint32_t *r)
{
    if (!t) {
        *l = *r = 0;
    } else if (S[t].lo < key) {
        reel_chk_split(S, S[t].right, key, &S[t].right, r);
        *l = t;
    } else {
        reel_chk_split(S, S[t].left, key, l, &S[t].left);
        *r = t;
    }
}

static uint32_t reel_chk_join(chk_seg *S, uint32_t a, uint32_t b)
{
    if (!a || !b)
        return a ? a : b;
    if (S[a].prio > S[b].prio) {
        S[a].right = reel_chk_join(S, S[a].right, b);
        return a;
    }
    S[b].left = reel_chk_join(S, a, S[b].left);
    return b;
}

static uint32_t reel_chk_put(chk_seg *S, uint32_t t, uint32_t x)
{
    if (!t)
        return x;
    if (S[x].prio > S[t].prio) {
        reel_chk_split(S, t, S[x].lo, &S[x].left, &S[x].right);
        return x;
    }
    if (S[x].lo < S[t].lo)
        S[t].left = reel_chk_put(S, S[t].left, x);
    else
        S[t].right = reel_chk_put(S, S[t].right, x);
    return t;
}

static uint32_t reel_chk_take(chk_seg *S, uint32_t t, uint64_t key)
{
    if (S[t].lo == key)
        return reel_chk_join(S, S[t].left, S[t].right);
    if (key < S[t].lo)
        S[t].left = reel_chk_take(S, S[t].left, key);
    else
        S[t].right = reel_chk_take(S, S[t].right, key);
    return t;
}

static void reel_chk_insert(reel_checker *c, chk_space *sp, uint32_t x)
{
    sp->root = reel_chk_put(c->seg, sp->root, x);
    sp->n++;
}

static void reel_chk_erase(reel_checker *c, chk_space *sp, uint32_t x)
{
    sp->root = reel_chk_take(c->seg, sp->root, c->seg[x].lo);
    sp->n--;
    c->seg[x].left = c->seg_free;
    c->seg_free = x;
}

/* The first range ending past addr, 0 if none. */
static uint32_t reel_chk_after(const reel_checker *c, const chk_space *sp, uint64_t addr)
{
    uint32_t t = sp->root, best = 0;
    while (t) {
        if (c->seg[t].hi > addr) {
            best = t;
            t = c->seg[t].left;
        } else {
            t = c->seg[t].right;
        }
    }
    return best;
}

/* The range ending exactly at addr, 0 if none. */
static uint32_t reel_chk_ending_at(const reel_checker *c, const chk_space *sp, uint64_t addr)
{
    uint32_t t = sp->root, best = 0;
    while (t) {
        if (c->seg[t].hi <= addr) {
            best = t;
            t = c->seg[t].right;
        } else {
            t = c->seg[t].left;
        }
    }
    return best && c->seg[best].hi == addr ? best : 0;
}

/* ---- history ------------------------------------------------------------- */

/* Drops what the host has passed from node i; true when nothing is left. */
static bool reel_chk_clean(const reel_checker *c, uint32_t i)
{
    chk_hist *g = &c->hist[i];
    bool empty = true;
    for (int t = 0; t < c->ns; t++) {
        if (g->w[t] >= 0 && reel_chk_dead(c, g->w[t]))
            g->w[t] = -1;
        if (g->r[t] >= 0 && reel_chk_dead(c, g->r[t]))
            g->r[t] = -1;
        empty = empty && g->w[t] < 0 && g->r[t] < 0;
    }
    return empty;
}

/* Whether node b starts where node a ends, with the same history. */
static bool reel_chk_same(const reel_checker *c, uint32_t a, uint32_t b)
{
    const chk_hist *x = &c->hist[a], *y = &c->hist[b];
    size_t bytes = (size_t)c->ns * sizeof x->w[0];
    return c->seg[a].hi == c->seg[b].lo && memcmp(x->w, y->w, bytes) == 0 && memcmp(x->r, y->r, bytes) == 0;
}

static reel_status reel_chk_piece(reel_checker *c, uint32_t space, uint32_t gi, int32_t rec, int s)
{
    chk_hist *g = &c->hist[gi];
    const chk_rec *me = &c->rec[rec];
    uint64_t lo = c->seg[gi].lo, hi = c->seg[gi].hi;
    reel_chk_clean(c, gi);
    for (int t = 0; t < c->ns; t++) {
        if (g->w[t] < 0)
            continue;
        if (!reel_chk_before(c, &c->rec[g->w[t]], s))
            REEL_TRY(reel_chk_report(c, me->write ? REEL_HAZARD_WAW : REEL_HAZARD_RAW, space, lo, hi, g->w[t], rec));
        else if (me->write)
            g->w[t] = -1;       /* ordered before this write: implied by it */
    }
    if (!me->write) {
        g->r[s] = rec;
        return REEL_OK;
    }
    for (int t = 0; t < c->ns; t++) {
        if (g->r[t] < 0)
            continue;
        if (!reel_chk_before(c, &c->rec[g->r[t]], s))
            REEL_TRY(reel_chk_report(c, REEL_HAZARD_WAR, space, lo, hi, g->r[t], rec));
        else
            g->r[t] = -1;
    }
    g->w[s] = rec;
    return REEL_OK;
}

/* Splits node g at addr (strictly inside it): g keeps [lo, addr); returns
 * the node of [addr, hi), 0 when out of memory. */
static uint32_t reel_chk_cut(reel_checker *c, chk_space *sp, uint32_t g, uint64_t addr)
{
    uint32_t n = reel_chk_node(c, addr, c->seg[g].hi);
    if (!n)
        return 0;
    c->hist[n] = c->hist[g];
    c->seg[g].hi = addr;
    reel_chk_insert(c, sp, n);
    return n;
}

reel_status reel_chk_access(reel_checker *c, uint32_t space, uint64_t lo, uint64_t hi, int32_t rec, int s)
{
    chk_space *sp = reel_chk_space(c, space);
    if (!sp)
        return REEL_E_OOM;
    uint32_t prev = reel_chk_ending_at(c, sp, lo);
    if (prev && reel_chk_clean(c, prev)) {
        reel_chk_erase(c, sp, prev);
        prev = 0;
    }
    uint64_t pos = lo;
    while (pos < hi) {
        uint32_t g = reel_chk_after(c, sp, pos);
        if (!g || c->seg[g].lo > pos) {     /* a gap up to the next range or hi */
            uint64_t end = g && c->seg[g].lo < hi ? c->seg[g].lo : hi;
            if (!(g = reel_chk_node(c, pos, end)))
                return REEL_E_OOM;
            reel_chk_insert(c, sp, g);
        } else if (c->seg[g].lo < pos && !(g = reel_chk_cut(c, sp, g, pos))) {
            return REEL_E_OOM;
        }
        if (c->seg[g].hi > hi && !reel_chk_cut(c, sp, g, hi))
            return REEL_E_OOM;
        REEL_TRY(reel_chk_piece(c, space, g, rec, s));
        pos = c->seg[g].hi;
        if (reel_chk_clean(c, g)) {         /* the host's own access: passed at once */
            reel_chk_erase(c, sp, g);
            prev = 0;
        } else if (prev && reel_chk_same(c, prev, g)) {
            c->seg[prev].hi = c->seg[g].hi;
            reel_chk_erase(c, sp, g);
        } else {
            prev = g;
        }
    }
    uint32_t next = prev ? reel_chk_after(c, sp, hi) : 0;
    if (next && c->seg[next].lo == hi) {
        if (reel_chk_clean(c, next))
            reel_chk_erase(c, sp, next);
        else if (reel_chk_same(c, prev, next)) {
            c->seg[prev].hi = c->seg[next].hi;
            reel_chk_erase(c, sp, next);
        }
    }
    return REEL_OK;
}

/* ---- collection ---------------------------------------------------------- */

/* The nodes of a space in order, into c->walk; false when out of memory. */
static bool reel_chk_walk(reel_checker *c, const chk_space *sp)
{
    if (!reel_grow((void **)&c->walk, &c->capwalk, 2 * sp->n + 1, sizeof *c->walk))
        return false;
    uint32_t *stack = c->walk + sp->n, *out = c->walk;
    size_t depth = 0, k = 0;
    uint32_t t = sp->root;
    while (t || depth) {
        while (t) {
            stack[depth++] = t;
            t = c->seg[t].left;
        }
        t = stack[--depth];
        out[k++] = t;
        t = c->seg[t].right;
    }
    return true;
}

/* Rebuilds a space's treap from the k nodes in c->walk (in order), keeping
 * their priorities: a Cartesian tree built with a stack, in O(k). */
static void reel_chk_rebuild(reel_checker *c, chk_space *sp, size_t k)
{
    chk_seg *S = c->seg;
    uint32_t *stack = c->walk + k;
    size_t depth = 0;
    for (size_t i = 0; i < k; i++) {
        uint32_t x = c->walk[i], last = 0;
        S[x].left = S[x].right = 0;
        while (depth && S[stack[depth - 1]].prio < S[x].prio)
            last = stack[--depth];
        S[x].left = last;
        if (depth)
            S[stack[depth - 1]].right = x;
        stack[depth++] = x;
    }
    sp->root = depth ? stack[0] : 0;
    sp->n = k;
}

static void reel_chk_mark(reel_checker *c, int32_t *r)
{
    if (*r >= 0)
        c->remap[*r] = 1;
}

static void reel_chk_move(const reel_checker *c, int32_t *r)
{
    if (*r >= 0)
        *r = c->remap[*r];
}

reel_status reel_chk_collect(reel_checker *c)
{
    if (!reel_grow((void **)&c->remap, &c->capremap, c->nrec + 1, sizeof *c->remap))
        return REEL_E_OOM;
    memset(c->remap, 0, c->nrec * sizeof *c->remap);
    for (size_t i = 0; i < c->nsp; i++) {
        chk_space *sp = &c->sp[i];
        if (!reel_chk_walk(c, sp))
            return REEL_E_OOM;
        size_t k = 0;
        for (size_t j = 0; j < sp->n; j++) {
            uint32_t x = c->walk[j];
            chk_hist *g = &c->hist[x];
            bool drop = reel_chk_clean(c, x);
            if (!drop && k && reel_chk_same(c, c->walk[k - 1], x)) {
                c->seg[c->walk[k - 1]].hi = c->seg[x].hi;
                drop = true;
            }
            if (drop) {
                c->seg[x].left = c->seg_free;
                c->seg_free = x;
                continue;
            }
            for (int t = 0; t < c->ns; t++) {
                reel_chk_mark(c, &g->w[t]);
                reel_chk_mark(c, &g->r[t]);
            }
            c->walk[k++] = x;
        }
        reel_chk_rebuild(c, sp, k);
    }
    for (size_t i = 0; i < c->nal; i++) {
        reel_chk_mark(c, &c->al[i].rec);
        reel_chk_mark(c, &c->al[i].free_rec);
    }
    size_t n = 0;
    for (size_t i = 0; i < c->nrec; i++) {
        if (!c->remap[i])
            continue;
        c->remap[i] = (int32_t)n;
        c->rec[n++] = c->rec[i];
    }
    for (size_t i = 0; i < c->nsp; i++) {
        chk_space *sp = &c->sp[i];
        if (!reel_chk_walk(c, sp))
            return REEL_E_OOM;
        for (size_t j = 0; j < sp->n; j++) {
            chk_hist *g = &c->hist[c->walk[j]];
            for (int t = 0; t < c->ns; t++) {
                reel_chk_move(c, &g->w[t]);
                reel_chk_move(c, &g->r[t]);
            }
        }
    }
    for (size_t i = 0; i < c->nal; i++) {
        reel_chk_move(c, &c->al[i].rec);
        reel_chk_move(c, &c->al[i].free_rec);
    }
    c->nrec = n;
    c->collect_at = 2 * n > CHK_COLLECT_MIN ? 2 * n : CHK_COLLECT_MIN;
    /* Give back what a burst of history left: the records, and the node pool
     * when most of it is free. */
    if (c->caprec > 2 * c->collect_at) {
        chk_rec *r = reel_hrealloc(c->rec, c->collect_at * sizeof *r);
        if (r) {
            c->rec = r;
            c->caprec = c->collect_at;
        }
    }
    return REEL_OK;
}

size_t reel_chk_shadow_bytes(const reel_checker *c)
{
    return c->capsp * sizeof *c->sp + c->capseg * sizeof *c->seg + c->caphist * sizeof *c->hist +
           c->capwalk * sizeof *c->walk +
           c->caprec * sizeof *c->rec + c->capremap * sizeof *c->remap;
}
