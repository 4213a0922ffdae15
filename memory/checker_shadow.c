/* The checker's shadow memory, per address space: for each stream, its
 * history as disjoint byte ranges (its last writes in one map, its last
 * reads in another), each map a treap ordered by address whose nodes carry
 * the largest clock below them; and the cover, which names for each byte the
 * maps that may hold it (checker_internal.h).
 *
 * An access looks only in the maps the cover names over its bytes, and in
 * each only for the entries it is not ordered after: a subtree whose largest
 * clock the access's clock of that stream covers is skipped whole. So a read
 * ordered after a stream's history costs the same however much of it lies
 * under it (a KV cache read over t slots written by t ops, on a stream that
 * waited for the writer: O(1), not O(t)). A write cuts the bytes it covers out
 * of the entries it is ordered after (one search per entry it meets; each was
 * entered once) and enters itself; what it is not ordered after stays, and is
 * reported. What the host has passed goes when a write meets it, and all of it
 * when the records or the entries double (reel_chk_collect). */
#include <stdlib.h>
#include <string.h>

#include "core/grow.h"
#include "core/halloc.h"
#include "memory/checker_internal.h"
#include "core/err.h"

#define CHK_COLLECT_MIN 8192    /* new records between collections, at least */
#define CHK_SWEEP_MIN 1024      /* entries that start a collection, at least */

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

/* A new node, counted in *count; 0 when out of memory. May move c->ent. */
static uint32_t reel_chk_ent(reel_checker *c, size_t *count, uint64_t lo, uint64_t hi, int32_t rec, uint64_t clock)
{
    uint32_t n = c->ent_free;
    if (n) {
        c->ent_free = c->ent[n].left;
    } else {
        if (c->nent >= UINT32_MAX || !reel_grow((void **)&c->ent, &c->capent, c->nent + 2, sizeof *c->ent))
            return 0;
        if (c->nent == 0)
            c->ent[c->nent++] = (chk_ent){ 0 };     /* index 0 is "none" */
        n = (uint32_t)c->nent++;
    }
    c->ent[n] = (chk_ent){ .lo = lo, .hi = hi, .clock = clock, .maxclock = clock, .rec = rec,
                           .prio = reel_chk_prio(c) };
    (*count)++;
    return n;
}

static void reel_chk_release(reel_checker *c, size_t *count, uint32_t x)
{
    c->ent[x].left = c->ent_free;
    c->ent_free = x;
    (*count)--;
}

/* Node 0 ("none") has maxclock 0, so a missing child counts for nothing. */
static inline void reel_chk_pull(chk_ent *E, uint32_t t)
{
    uint64_t m = E[t].clock, l = E[E[t].left].maxclock, r = E[E[t].right].maxclock;
    m = l > m ? l : m;
    E[t].maxclock = r > m ? r : m;
}

/* *l: the entries starting before key, *r: the others. */
static void reel_chk_split(chk_ent *E, uint32_t t, uint64_t key, uint32_t *l, uint32_t *r)
{
    if (!t) {
        *l = *r = 0;
    } else if (E[t].lo < key) {
        reel_chk_split(E, E[t].right, key, &E[t].right, r);
        reel_chk_pull(E, t);
        *l = t;
    } else {
        reel_chk_split(E, E[t].left, key, l, &E[t].left);
        reel_chk_pull(E, t);
        *r = t;
    }
}

/* Every entry of a before every entry of b. */
static uint32_t reel_chk_join(chk_ent *E, uint32_t a, uint32_t b)
{
    if (!a || !b)
        return a ? a : b;
    if (E[a].prio > E[b].prio) {
        E[a].right = reel_chk_join(E, E[a].right, b);
        reel_chk_pull(E, a);
        return a;
    }
    E[b].left = reel_chk_join(E, a, E[b].left);
    reel_chk_pull(E, b);
    return b;
}

static uint32_t reel_chk_put(chk_ent *E, uint32_t t, uint32_t x)
{
    if (!t)
        return x;
    if (E[x].prio > E[t].prio) {
        reel_chk_split(E, t, E[x].lo, &E[x].left, &E[x].right);
        reel_chk_pull(E, x);
        return x;
    }
    if (E[x].lo < E[t].lo)
        E[t].left = reel_chk_put(E, E[t].left, x);
    else
        E[t].right = reel_chk_put(E, E[t].right, x);
    reel_chk_pull(E, t);
    return t;
}

/* Whether an entry of subtree t overlaps [lo, hi). */
static bool reel_chk_overlaps(const chk_ent *E, uint32_t t, uint64_t lo, uint64_t hi)
{
    while (t) {
        if (E[t].hi <= lo)
            t = E[t].right;
        else if (E[t].lo >= hi)
            t = E[t].left;
        else
            return true;
    }
    return false;
}

/* The entries of subtree t in order, appended to c->walk from *k. */
static bool reel_chk_list(reel_checker *c, uint32_t t, size_t *k)
{
    if (!t)
        return true;
    if (!reel_chk_list(c, c->ent[t].left, k))
        return false;
    if (!reel_grow((void **)&c->walk, &c->capwalk, *k + 1, sizeof *c->walk))
        return false;
    c->walk[(*k)++] = t;
    return reel_chk_list(c, c->ent[t].right, k);
}

/* A treap of the k entries c->walk[0..k) (in order, disjoint), keeping their
 * priorities: a Cartesian tree built with a stack in O(k). c->walk must hold
 * 2k. */
static uint32_t reel_chk_build(reel_checker *c, size_t k)
{
    chk_ent *E = c->ent;
    uint32_t *stack = c->walk + k;
    size_t depth = 0;
    for (size_t i = 0; i < k; i++) {
        uint32_t x = c->walk[i], last = 0;
        E[x].right = 0;
        while (depth && E[stack[depth - 1]].prio < E[x].prio) {
            last = stack[--depth];
            reel_chk_pull(E, last);     /* nothing is added below it any more */
        }
        E[x].left = last;
        if (depth)
            E[stack[depth - 1]].right = x;
        stack[depth++] = x;
    }
    while (depth) {                     /* the right spine, from the bottom */
        reel_chk_pull(E, stack[depth - 1]);
        if (depth == 1)
            return stack[0];
        depth--;
    }
    return 0;
}

/* ---- history ------------------------------------------------------------- */

/* Adds entry x, not ordered before the access, to c->conf over [lo, hi). */
static bool reel_chk_conflict(reel_checker *c, uint32_t x, uint64_t lo, uint64_t hi, int phase, int slot)
{
    if (!reel_grow((void **)&c->conf, &c->capconf, c->nconf + 1, sizeof *c->conf))
        return false;
    const chk_ent *e = &c->ent[x];
    c->conf[c->nconf++] = (chk_conf){ .lo = e->lo > lo ? e->lo : lo, .hi = e->hi < hi ? e->hi : hi, .rec = e->rec,
                                      .phase = (int16_t)phase, .slot = (int16_t)slot };
    return true;
}

/* Adds to c->conf the entries of subtree t (stream slot `slot`) over [lo, hi)
 * that an access whose clock of that stream is v is not ordered after. */
static bool reel_chk_find(reel_checker *c, uint32_t t, uint64_t lo, uint64_t hi, uint64_t v, int phase, int slot)
{
    if (!t || c->ent[t].maxclock <= v)
        return true;
    const chk_ent *e = &c->ent[t];      /* the search moves no entry */
    if (e->lo > lo && !reel_chk_find(c, e->left, lo, hi, v, phase, slot))
        return false;                   /* left of e: entries ending by e->lo */
    if (e->clock > v && e->lo < hi && e->hi > lo && !reel_chk_conflict(c, t, lo, hi, phase, slot))
        return false;
    return e->hi >= hi || reel_chk_find(c, e->right, lo, hi, v, phase, slot);
}

/* Reports in the order the bytes come, a byte's writes before its reads,
 * streams in slot order: per op, the first report of each pair is the one
 * its first conflicting byte gives. */
static int reel_chk_conf_cmp(const void *a, const void *b)
{
    const chk_conf *x = a, *y = b;
    if (x->lo != y->lo)
        return x->lo < y->lo ? -1 : 1;
    if (x->phase != y->phase)
        return x->phase < y->phase ? -1 : 1;
    return (x->slot > y->slot) - (x->slot < y->slot);
}

/* The first entry of subtree t that ends after addr, 0 if none. */
static uint32_t reel_chk_first_after(const chk_ent *E, uint32_t t, uint64_t addr)
{
    uint32_t best = 0;
    while (t) {
        if (E[t].hi > addr) {
            best = t;
            t = E[t].left;
        } else {
            t = E[t].right;
        }
    }
    return best;
}

/* Removes the entry starting at key from subtree t (it is there). */
static uint32_t reel_chk_take(chk_ent *E, uint32_t t, uint64_t key)
{
    if (E[t].lo == key)
        return reel_chk_join(E, E[t].left, E[t].right);
    if (key < E[t].lo)
        E[t].left = reel_chk_take(E, E[t].left, key);
    else
        E[t].right = reel_chk_take(E, E[t].right, key);
    reel_chk_pull(E, t);
    return t;
}

/* Cuts [lo, hi) out of the entries of map *root whose clock is at most v
 * (those a write is ordered after); the others stay whole and, with phase
 * at least 0, go to c->conf (phase and slot as in chk_conf), and *kept is
 * set. An entry the host has passed (clock at most dead) goes whole, so a
 * pool's leftover tail of a larger block goes with the next block there.
 * One search per entry met: a write meets few, and each it removes was
 * entered once. */
static bool reel_chk_cut(reel_checker *c, chk_space *sp, uint32_t *root, uint64_t lo, uint64_t hi, uint64_t v,
                         uint64_t dead, int phase, int slot, bool *kept)
{
    uint64_t at = lo;
    uint32_t e;
    while (at < hi && (e = reel_chk_first_after(c->ent, *root, at)) && c->ent[e].lo < hi) {
        chk_ent *x = &c->ent[e];
        if (x->clock > v) {             /* unordered: reported, kept */
            *kept = true;
            if (phase >= 0 && !reel_chk_conflict(c, e, lo, hi, phase, slot))
                return false;
            at = x->hi;
        } else if (x->clock > dead && x->lo < lo && x->hi > hi) {
            /* around [lo, hi): its tail becomes an entry of its own */
            uint32_t tail = reel_chk_ent(c, &sp->n, hi, x->hi, x->rec, x->clock);
            if (!tail)
                return false;
            c->ent[e].hi = lo;
            *root = reel_chk_put(c->ent, *root, tail);
            return true;
        } else if (x->clock > dead && x->lo < lo) {
            x->hi = lo;                 /* its head stays */
        } else if (x->clock > dead && x->hi > hi) {
            x->lo = hi;                 /* its tail stays; nothing lies between */
            return true;
        } else {
            *root = reel_chk_take(c->ent, *root, x->lo);
            reel_chk_release(c, &sp->n, e);
        }
    }
    return true;
}

/* Enters [lo, hi) -> rec into map *root, cutting what its own stream had
 * there (with cut set; all of it is ordered before). */
static bool reel_chk_enter(reel_checker *c, chk_space *sp, uint32_t *root, uint64_t lo, uint64_t hi, int32_t rec,
                           bool cut)
{
    bool kept = false;
    if (cut && !reel_chk_cut(c, sp, root, lo, hi, UINT64_MAX, c->vc[0][c->rec[rec].stream], -1, 0, &kept))
        return false;
    uint32_t x = reel_chk_ent(c, &sp->n, lo, hi, rec, c->rec[rec].clock);
    if (!x)
        return false;
    *root = reel_chk_put(c->ent, *root, x);
    return true;
}

/* ---- the cover ----------------------------------------------------------- */

#define CHK_W(t) (1ull << (t))
#define CHK_R(t) (1ull << (32 + (t)))

/* The maps the cover subtree t names over any byte of [lo, hi); *whole is
 * set to the range that holds all of [lo, hi), if one does. */
static uint64_t reel_chk_cover_get(const chk_ent *E, uint32_t t, uint64_t lo, uint64_t hi, uint32_t *whole)
{
    while (t && (E[t].hi <= lo || E[t].lo >= hi))
        t = E[t].hi <= lo ? E[t].right : E[t].left;
    if (!t)
        return 0;
    if (E[t].lo <= lo && E[t].hi >= hi)
        *whole = t;
    uint64_t m = E[t].maps;
    if (E[t].lo > lo)
        m |= reel_chk_cover_get(E, E[t].left, lo, hi, whole);
    if (E[t].hi < hi)
        m |= reel_chk_cover_get(E, E[t].right, lo, hi, whole);
    return m;
}

/* The last range of subtree t that starts before addr, 0 if none. */
static uint32_t reel_chk_last_before(const chk_ent *E, uint32_t t, uint64_t addr)
{
    uint32_t best = 0;
    while (t) {
        if (E[t].lo < addr) {
            best = t;
            t = E[t].right;
        } else {
            t = E[t].left;
        }
    }
    return best;
}

/* Makes [lo, hi) of sp's cover name maps (none: no range there), the ranges
 * around it keeping what they named outside it. A range that already names
 * maps there grows over [lo, hi) (a KV cache read over the slots so far
 * takes in the slot just written); a new one joins a neighbour naming the
 * same. One search per range met. */
static bool reel_chk_cover_set(reel_checker *c, chk_space *sp, uint64_t lo, uint64_t hi, uint64_t maps)
{
    uint32_t own = 0, e;
    uint64_t at = lo;
    while (at < hi && (e = reel_chk_first_after(c->ent, sp->cover, at)) && c->ent[e].lo < hi) {
        chk_ent *x = &c->ent[e];
        if (maps && x->maps == maps && !own) {
            own = e;                    /* nothing is left in [lo, its lo) */
            x->lo = x->lo < lo ? x->lo : lo;
            at = x->hi;
        } else if (x->lo < lo && x->hi > hi) {
            uint32_t tail = reel_chk_ent(c, &sp->ncover, hi, x->hi, -1, x->maps);
            if (!tail)
                return false;
            c->ent[e].hi = lo;          /* around [lo, hi): its tail is a range of its own */
            sp->cover = reel_chk_put(c->ent, sp->cover, tail);
            break;
        } else if (x->lo < lo) {
            x->hi = lo;
        } else if (x->hi > hi) {
            x->lo = hi;
            break;
        } else {
            sp->cover = reel_chk_take(c->ent, sp->cover, x->lo);
            reel_chk_release(c, &sp->ncover, e);
        }
    }
    if (!maps)
        return true;
    chk_ent *E = c->ent;
    uint32_t next = reel_chk_first_after(E, sp->cover, hi);
    bool join_next = next && E[next].lo == hi && E[next].maps == maps;
    if (!own) {
        uint32_t prev = reel_chk_last_before(E, sp->cover, lo);
        if (prev && E[prev].hi == lo && E[prev].maps == maps)
            own = prev;
    }
    if (own && join_next) {             /* one range from own through next */
        E[own].hi = E[next].hi;
        sp->cover = reel_chk_take(E, sp->cover, E[next].lo);
        reel_chk_release(c, &sp->ncover, next);
    } else if (own) {
        E[own].hi = E[own].hi > hi ? E[own].hi : hi;
    } else if (join_next) {
        E[next].lo = lo;
    } else {
        uint32_t x = reel_chk_ent(c, &sp->ncover, lo, hi, -1, maps);
        if (!x)
            return false;
        sp->cover = reel_chk_put(c->ent, sp->cover, x);
    }
    return true;
}

/* Names over each range of sp's cover only the maps with an entry there,
 * drops the ranges left naming none and joins equal neighbours: what the
 * cover names again follows the history kept (after a collection dropped
 * what the host passed), so a run that touches ever new bytes keeps a cover
 * as small as its history. */
static bool reel_chk_cover_refine(reel_checker *c, chk_space *sp)
{
    size_t k = 0;
    if (!reel_chk_list(c, sp->cover, &k) || !reel_grow((void **)&c->walk, &c->capwalk, 2 * k, sizeof *c->walk))
        return false;
    chk_ent *E = c->ent;
    size_t keep = 0;
    for (size_t i = 0; i < k; i++) {
        uint32_t x = c->walk[i], p = keep ? c->walk[keep - 1] : 0;
        uint64_t m = 0;
        for (int t = 1; t < c->ns; t++) {
            if ((E[x].maps & CHK_W(t)) && reel_chk_overlaps(E, sp->root[0][t], E[x].lo, E[x].hi))
                m |= CHK_W(t);
            if ((E[x].maps & CHK_R(t)) && reel_chk_overlaps(E, sp->root[1][t], E[x].lo, E[x].hi))
                m |= CHK_R(t);
        }
        if (m && p && E[p].hi == E[x].lo && E[p].maps == m) {
            E[p].hi = E[x].hi;
            m = 0;
        }
        if (!m) {
            reel_chk_release(c, &sp->ncover, x);
        } else {
            E[x].maps = m;
            c->walk[keep++] = x;
        }
    }
    sp->cover = reel_chk_build(c, keep);
    return true;
}

/* Reports c->conf, the conflicts of access rec, in the order of
 * reel_chk_conf_cmp. */
static reel_status reel_chk_report_all(reel_checker *c, uint32_t space, int32_t rec, bool write)
{
    if (c->nconf > 1)
        qsort(c->conf, c->nconf, sizeof *c->conf, reel_chk_conf_cmp);
    for (size_t i = 0; i < c->nconf; i++) {
        const chk_conf *x = &c->conf[i];
        reel_hazard_kind k = x->phase ? REEL_HAZARD_WAR : write ? REEL_HAZARD_WAW : REEL_HAZARD_RAW;
        REEL_TRY(reel_chk_report(c, k, space, x->lo, x->hi, x->rec, rec));
    }
    return REEL_OK;
}

static void reel_chk_free_tree(reel_checker *c, size_t *count, uint32_t t)
{
    while (t) {
        reel_chk_free_tree(c, count, c->ent[t].left);
        uint32_t right = c->ent[t].right;
        reel_chk_release(c, count, t);
        t = right;
    }
}

/* The root of map kind (0 writes, 1 reads) of stream slot t, emptied first
 * when the host has passed all of it - a loop that syncs every step finds
 * the last step's history so at its first access. */
static uint32_t *reel_chk_map(reel_checker *c, chk_space *sp, int kind, int t)
{
    uint32_t *root = &sp->root[kind][t];
    if (*root && c->ent[*root].maxclock <= c->vc[0][t]) {
        reel_chk_free_tree(c, &sp->n, *root);
        *root = 0;
    }
    return root;
}

reel_status reel_chk_access(reel_checker *c, uint32_t space, uint64_t lo, uint64_t hi, int32_t rec, int s)
{
    chk_space *sp = reel_chk_space(c, space);
    if (!sp)
        return REEL_E_OOM;
    const uint64_t *v = c->vc[s];
    uint32_t whole = 0;
    uint64_t in = reel_chk_cover_get(c->ent, sp->cover, lo, hi, &whole), maps = 0;
    c->nconf = 0;
    if (!c->rec[rec].write) {
        for (int t = 1; t < c->ns; t++)
            if ((in & CHK_W(t)) && !reel_chk_find(c, *reel_chk_map(c, sp, 0, t), lo, hi, v[t], 0, t))
                return REEL_E_OOM;
        REEL_TRY(reel_chk_report_all(c, space, rec, false));
        /* the host's own access is passed at once: checked, never kept */
        if (s && !reel_chk_enter(c, sp, reel_chk_map(c, sp, 1, s), lo, hi, rec, in & CHK_R(s)))
            return REEL_E_OOM;
        maps = in | (s ? CHK_R(s) : 0);
    } else {
        /* what the write is ordered after goes, what it is not is reported */
        for (int t = 1; t < c->ns; t++) {
            bool kw = false, kr = false;
            if (((in & CHK_W(t)) && !reel_chk_cut(c, sp, reel_chk_map(c, sp, 0, t), lo, hi, v[t], c->vc[0][t], 0, t,
                                                   &kw)) ||
                ((in & CHK_R(t)) && !reel_chk_cut(c, sp, reel_chk_map(c, sp, 1, t), lo, hi, v[t], c->vc[0][t], 1, t,
                                                   &kr)))
                return REEL_E_OOM;
            maps |= (kw ? CHK_W(t) : 0) | (kr ? CHK_R(t) : 0);
        }
        REEL_TRY(reel_chk_report_all(c, space, rec, true));
        if (s && !reel_chk_enter(c, sp, reel_chk_map(c, sp, 0, s), lo, hi, rec, false))
            return REEL_E_OOM;
        maps |= s ? CHK_W(s) : 0;
    }
    if (maps == in && (whole || !in))
        return REEL_OK;
    if (whole && maps && c->ent[whole].lo == lo && c->ent[whole].hi == hi) {
        c->ent[whole].maps = maps;      /* the range is the access's own */
        return REEL_OK;
    }
    return reel_chk_cover_set(c, sp, lo, hi, maps) ? REEL_OK : REEL_E_OOM;
}

/* ---- collection ---------------------------------------------------------- */

/* Drops the entries of a map the host has passed (clock at most dead); with
 * mark set, marks the records of the others in c->remap. */
static bool reel_chk_sweep(reel_checker *c, chk_space *sp, uint32_t *root, uint64_t dead, bool mark)
{
    size_t k = 0;
    if (!reel_chk_list(c, *root, &k) || !reel_grow((void **)&c->walk, &c->capwalk, 2 * k, sizeof *c->walk))
        return false;
    size_t keep = 0;
    for (size_t i = 0; i < k; i++) {
        uint32_t x = c->walk[i];
        if (c->ent[x].clock <= dead) {
            reel_chk_release(c, &sp->n, x);
        } else {
            if (mark)
                c->remap[c->ent[x].rec] = 1;
            c->walk[keep++] = x;
        }
    }
    *root = reel_chk_build(c, keep);
    return true;
}

/* Sweeps every map, refines the covers that doubled since they last were,
 * and sets when the entries next call for this. */
static bool reel_chk_sweep_all(reel_checker *c, bool mark)
{
    size_t ents = 0;
    for (size_t i = 0; i < c->nsp; i++) {
        chk_space *sp = &c->sp[i];
        for (int t = 0; t < c->ns; t++)
            for (int kind = 0; kind < 2; kind++)
                if (!reel_chk_sweep(c, sp, &sp->root[kind][t], c->vc[0][t], mark))
                    return false;
        /* each range of the cover was made by an access */
        if (sp->ncover >= sp->cover_at) {
            if (!reel_chk_cover_refine(c, sp))
                return false;
            sp->cover_at = 2 * sp->ncover > CHK_SWEEP_MIN ? 2 * sp->ncover : CHK_SWEEP_MIN;
        }
        ents += sp->n;
    }
    c->sweep_at = 2 * ents > CHK_SWEEP_MIN ? 2 * ents : CHK_SWEEP_MIN;
    return true;
}

static void reel_chk_renumber(reel_checker *c, uint32_t t)
{
    for (; t; t = c->ent[t].right) {
        reel_chk_renumber(c, c->ent[t].left);
        c->ent[t].rec = c->remap[c->ent[t].rec];
    }
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
    if (!reel_chk_sweep_all(c, true))
        return REEL_E_OOM;
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
    for (size_t i = 0; i < c->nsp; i++)
        for (int t = 0; t < c->ns; t++)
            for (int kind = 0; kind < 2; kind++)
                reel_chk_renumber(c, c->sp[i].root[kind][t]);
    for (size_t i = 0; i < c->nal; i++) {
        reel_chk_move(c, &c->al[i].rec);
        reel_chk_move(c, &c->al[i].free_rec);
    }
    c->nrec = n;
    /* the next collection: at least half as many new records as there are
     * live ones (and CHK_COLLECT_MIN), and not before the array is full, so
     * a run that keeps most of its records (a KV cache no host sync passes)
     * holds 1.5x to 2x them, and one that keeps few holds no more than the
     * array it has */
    c->collect_at = n + (n / 2 > CHK_COLLECT_MIN ? n / 2 : CHK_COLLECT_MIN);
    /* Give back what a burst of history left. */
    if (c->caprec > 2 * c->collect_at) {
        chk_rec *r = reel_hrealloc(c->rec, c->collect_at * sizeof *r);
        if (r) {
            c->rec = r;
            c->caprec = c->collect_at;
        }
    }
    return REEL_OK;
}

reel_status reel_chk_maintain(reel_checker *c)
{
    /* the record array nearly full (an op adds a record an access) */
    if (c->nrec >= c->collect_at && c->nrec >= c->caprec - c->caprec / 8)
        return reel_chk_collect(c);
    size_t ents = 0;
    for (size_t i = 0; i < c->nsp; i++)
        ents += c->sp[i].n;
    if (ents >= c->sweep_at && !reel_chk_sweep_all(c, false))
        return REEL_E_OOM;
    return REEL_OK;
}

size_t reel_chk_shadow_bytes(const reel_checker *c)
{
    return c->capsp * sizeof *c->sp + c->capent * sizeof *c->ent + c->capwalk * sizeof *c->walk +
           c->capconf * sizeof *c->conf + c->caprec * sizeof *c->rec + c->capremap * sizeof *c->remap;
}
