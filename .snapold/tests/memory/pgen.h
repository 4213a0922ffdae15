/* Test helpers for the planner: seeded random multi-stream DAG problems, a
 * decode-shaped transformer layer, an independent reachability oracle and a
 * plain linear-order greedy allocator to compare against. */
#ifndef REEL_TESTS_MEMORY_PGEN_H
#define REEL_TESTS_MEMORY_PGEN_H

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "memory/planner.h"

#define PG_MAX_NODES 512
#define PG_MAX_BUFS 1024
#define PG_MAX_ACC 16
#define PG_MAX_EDGES 4096

typedef struct pg_problem {
    reel_mem_problem p;
    int stream[PG_MAX_NODES];
    int efrom[PG_MAX_EDGES], eto[PG_MAX_EDGES];
    reel_mem_buf bufs[PG_MAX_BUFS];
    int acc[PG_MAX_BUFS][PG_MAX_ACC];
} pg_problem;

static inline uint64_t pg_next(uint64_t *s)
{
    /* splitmix64: a seeded, portable sequence */
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline int pg_rand(uint64_t *s, int n) { return (int)(pg_next(s) % (uint64_t)n); }

static inline void pg_init(pg_problem *g, int nnodes)
{
    memset(g, 0, sizeof *g);
    g->p.nnodes = nnodes;
    g->p.stream = g->stream;
    g->p.edge_from = g->efrom;
    g->p.edge_to = g->eto;
    g->p.bufs = g->bufs;
    g->p.alignment = 256;
}

/* Adds a buffer produced at node prod; returns its index. */
static inline int pg_buf(pg_problem *g, int prod, size_t size)
{
    int b = g->p.nbufs++;
    g->bufs[b].size = size;
    g->bufs[b].acc = g->acc[b];
    g->bufs[b].inplace_src = -1;
    g->acc[b][0] = prod;
    g->bufs[b].nacc = 1;
    return b;
}

static inline void pg_edge(pg_problem *g, int from, int to)
{
    for (int e = 0; e < g->p.nedges; e++)
        if (g->efrom[e] == from && g->eto[e] == to)
            return;
    g->efrom[g->p.nedges] = from;
    g->eto[g->p.nedges] = to;
    g->p.nedges++;
}

/* Node n reads buffer b: an access plus the data-dependency edge. */
static inline void pg_read(pg_problem *g, int n, int b)
{
    g->acc[b][g->bufs[b].nacc++] = n;
    if (g->acc[b][0] != n)
        pg_edge(g, g->acc[b][0], n);
}

static inline int pg_last(const pg_problem *g, int b)
{
    int m = g->acc[b][0];
    for (int k = 1; k < g->bufs[b].nacc; k++)
        if (g->acc[b][k] > m)
            m = g->acc[b][k];
    return m;
}

/* In-place hints the way an elementwise op gives them: the output may take
 * the bytes of its largest input that dies at its producer. */
static inline void pg_inplace_hints(pg_problem *g, int prob_pct, uint64_t *s)
{
    for (int b = 0; b < g->p.nbufs; b++) {
        int prod = g->acc[b][0], best = -1;
        for (int a = 0; a < g->p.nbufs; a++) {
            if (a == b || pg_last(g, a) != prod || g->acc[a][0] == prod)
                continue;
            bool taken = false;
            for (int c = 0; c < g->p.nbufs; c++)
                taken |= g->bufs[c].inplace_src == a;
            if (!taken && (best < 0 || g->bufs[a].size > g->bufs[best].size))
                best = a;
        }
        if (best >= 0 && pg_rand(s, 100) < prob_pct)
            g->bufs[b].inplace_src = best;
    }
}

static inline size_t pg_size(uint64_t *s)
{
    static const size_t menu[] = { 256, 1024, 4096, 16384, 65536, 262144, 1048576 };
    size_t base = menu[pg_rand(s, 7)];
    return base * (size_t)(1 + pg_rand(s, 4)) - (size_t)pg_rand(s, 2) * 64;
}

/* A random DAG of nnodes ops over nstreams streams: each op reads one to
 * three recent buffers (the oldest unread one first, so no output is dead)
 * and writes one; streams switch now and then (every cross-stream read is an
 * edge); a final join on stream 0 reads what is still unread. */
static inline void pg_random(pg_problem *g, uint64_t seed, int nnodes, int nstreams, int inplace_pct)
{
    uint64_t s = seed;
    pg_init(g, nnodes);
    int cur = 0, unread = 0;     /* buffers before `unread` have been read */
    for (int n = 0; n < nnodes - 1; n++) {
        if (pg_rand(&s, 100) < 35)
            cur = pg_rand(&s, nstreams);
        g->stream[n] = cur;
        int nin = g->p.nbufs ? 1 + pg_rand(&s, 3) : 0;
        while (unread < g->p.nbufs && g->bufs[unread].nacc > 1)
            unread++;
        if (nin && unread < g->p.nbufs && g->p.nbufs - unread > 4)
            pg_read(g, n, unread);
        for (int k = 0; k < nin; k++) {
            int window = g->p.nbufs < 8 ? g->p.nbufs : 8;
            int b = g->p.nbufs - 1 - pg_rand(&s, window);
            if (g->bufs[b].nacc < PG_MAX_ACC - 1 && pg_last(g, b) != n)
                pg_read(g, n, b);
        }
        pg_buf(g, n, pg_size(&s));
    }
    int join = nnodes - 1;
    g->stream[join] = 0;
    for (int b = 0; b < g->p.nbufs; b++)
        if (g->bufs[b].nacc == 1)
            pg_read(g, join, b);
    pg_inplace_hints(g, inplace_pct, &s);
}

/* A single-stream chain: each op reads the previous buffer and may take its
 * bytes; the last op reads the result out. */
static inline void pg_chain(pg_problem *g, uint64_t seed, int nnodes)
{
    uint64_t s = seed;
    pg_init(g, nnodes);
    for (int n = 0; n < nnodes - 1; n++) {
        int b = pg_buf(g, n, pg_size(&s));
        if (n > 0) {
            pg_read(g, n, b - 1);
            g->bufs[b].inplace_src = b - 1;
        }
    }
    pg_read(g, nnodes - 1, g->p.nbufs - 1);
}

/* Decode-shaped transformer layers (T tokens, hidden D, MLP F, vocabulary V
 * or no lm head when 0, heads of size 128): attention projections on stream 0, the KV path on stream 1,
 * joined before attention; residual adds take their input's bytes. */
static inline void pg_decode_layers(pg_problem *g, int layers, size_t T, size_t D, size_t F, size_t V)
{
    pg_init(g, 0);
    int n = 0;
#define PG_NODE(st) (g->stream[n] = (st), n++)
    int x = pg_buf(g, PG_NODE(0), T * D * 2);                 /* embedding */
    for (int l = 0; l < layers; l++) {
        int nn = PG_NODE(0);
        int h = pg_buf(g, nn, T * D * 2); pg_read(g, nn, x);           /* rmsnorm */
        int nq = PG_NODE(0);
        int q = pg_buf(g, nq, T * D * 2); pg_read(g, nq, h);           /* q proj */
        int nk = PG_NODE(1);
        int k = pg_buf(g, nk, T * D / 4 * 2); pg_read(g, nk, h);       /* k proj (GQA) */
        int nv = PG_NODE(1);
        int v = pg_buf(g, nv, T * D / 4 * 2); pg_read(g, nv, h);       /* v proj */
        int nr = PG_NODE(0);
        int qr = pg_buf(g, nr, T * D * 2); pg_read(g, nr, q);          /* rope q */
        g->bufs[qr].inplace_src = q;
        int nkr = PG_NODE(1);
        int kr = pg_buf(g, nkr, T * D / 4 * 2); pg_read(g, nkr, k);    /* rope k */
        g->bufs[kr].inplace_src = k;
        int nc = PG_NODE(1);
        pg_read(g, nc, kr); pg_read(g, nc, v);                         /* kv cache write */
        int na = PG_NODE(0);
        int att = pg_buf(g, na, T * D * 2); pg_read(g, na, qr);        /* attention */
        pg_edge(g, nc, na);                                            /* join: cache written */
        int lse = pg_buf(g, na, T * (D / 128) * 4);
        int no = PG_NODE(0);
        int o = pg_buf(g, no, T * D * 2); pg_read(g, no, att); pg_read(g, no, lse);
        int nres = PG_NODE(0);
        int r1 = pg_buf(g, nres, T * D * 2); pg_read(g, nres, x); pg_read(g, nres, o);
        g->bufs[r1].inplace_src = x;
        int nn2 = PG_NODE(0);
        int h2 = pg_buf(g, nn2, T * D * 2); pg_read(g, nn2, r1);
        int ng = PG_NODE(0);
        int gu = pg_buf(g, ng, T * F * 2 * 2); pg_read(g, ng, h2);     /* gate+up */
        int ns = PG_NODE(0);
        int act = pg_buf(g, ns, T * F * 2); pg_read(g, ns, gu);        /* silu*mul */
        g->bufs[act].inplace_src = gu;
        int nd = PG_NODE(0);
        int dn = pg_buf(g, nd, T * D * 2); pg_read(g, nd, act);        /* down */
        int nres2 = PG_NODE(0);
        x = pg_buf(g, nres2, T * D * 2); pg_read(g, nres2, r1); pg_read(g, nres2, dn);
        g->bufs[x].inplace_src = r1;
    }
    if (V) {                                                    /* lm head */
        int nf = PG_NODE(0);
        int logits = pg_buf(g, nf, T * V * 4); pg_read(g, nf, x);
        x = logits;
    }
    int out = PG_NODE(0);
    pg_read(g, out, x);
#undef PG_NODE
    g->p.nnodes = n;
}

/* ---- an independent oracle: plain reachability by search ----------------- */

typedef struct pg_reach {
    int n;
    bool r[PG_MAX_NODES][PG_MAX_NODES];   /* r[u][v]: u strictly before v */
} pg_reach;

static inline void pg_reach_build(pg_reach *R, const reel_mem_problem *p, int ne2, const int *f2, const int *t2)
{
    memset(R, 0, sizeof *R);
    R->n = p->nnodes;
    for (int v = 0; v < p->nnodes; v++) {
        /* direct predecessors of v, then close over them (they come earlier) */
        for (int u = v - 1; u >= 0; u--)
            if (p->stream[u] == p->stream[v]) {
                R->r[u][v] = true;
                break;
            }
        for (int e = 0; e < p->nedges; e++)
            if (p->edge_to[e] == v)
                R->r[p->edge_from[e]][v] = true;
        for (int e = 0; e < ne2; e++)
            if (t2[e] == v)
                R->r[f2[e]][v] = true;
        for (int u = v - 1; u >= 0; u--)
            if (R->r[u][v])
                for (int w = 0; w < u; w++)
                    if (R->r[w][u])
                        R->r[w][v] = true;
    }
}

static inline bool pg_all_before(const pg_reach *R, const reel_mem_buf *a, const reel_mem_buf *b)
{
    for (int i = 0; i < a->nacc; i++)
        for (int j = 0; j < b->nacc; j++)
            if (!R->r[a->acc[i]][b->acc[j]])
                return false;
    return true;
}

static inline bool pg_inplace_valid(const pg_reach *R, const reel_mem_buf *src, const reel_mem_buf *dst)
{
    int p = dst->acc[0], last = src->acc[0];
    for (int k = 0; k < src->nacc; k++)
        last = src->acc[k] > last ? src->acc[k] : last;
    if (last != p)
        return false;
    for (int k = 0; k < src->nacc; k++)
        if (src->acc[k] != p && !R->r[src->acc[k]][p])
            return false;
    for (int k = 1; k < dst->nacc; k++)
        if (dst->acc[k] != p && !R->r[p][dst->acc[k]])
            return false;
    return true;
}

/* Counts overlapping pairs of buffers that are neither ordered nor a valid
 * in-place pair at the same offset. */
static inline int pg_oracle_violations(const reel_mem_problem *p, const size_t *off, int ne2, const int *f2, const int *t2)
{
    static pg_reach R;   /* large; tests run one at a time per process */
    pg_reach_build(&R, p, ne2, f2, t2);
    int bad = 0;
    for (int i = 0; i < p->nbufs; i++)
        for (int j = i + 1; j < p->nbufs; j++) {
            const reel_mem_buf *a = &p->bufs[i], *b = &p->bufs[j];
            if (!a->size || !b->size || off[i] >= off[j] + b->size || off[j] >= off[i] + a->size)
                continue;
            if (pg_all_before(&R, a, b) || pg_all_before(&R, b, a))
                continue;
            if (off[i] == off[j] && ((b->inplace_src == i && pg_inplace_valid(&R, a, b)) ||
                                     (a->inplace_src == j && pg_inplace_valid(&R, b, a))))
                continue;
            bad++;
        }
    return bad;
}

/* ---- the plain linear-order greedy (a well-known C graph allocator's way) -- */

/* Walks the schedule as one line: allocates each buffer first-fit at its
 * producer, frees it after its last access. Ignores streams. Returns the
 * arena; offsets in off. */
static inline size_t pg_linear_greedy(const reel_mem_problem *p, size_t *off)
{
    size_t top = 0;
    static bool live[PG_MAX_BUFS];
    memset(live, 0, sizeof live);
    for (int n = 0; n < p->nnodes; n++) {
        for (int b = 0; b < p->nbufs; b++) {
            if (p->bufs[b].acc[0] != n || !p->bufs[b].size)
                continue;
            size_t sz = (p->bufs[b].size + p->alignment - 1) & ~(p->alignment - 1);
            size_t o = 0;
            for (bool moved = true; moved;) {
                moved = false;
                for (int c = 0; c < p->nbufs; c++) {
                    size_t csz = (p->bufs[c].size + p->alignment - 1) & ~(p->alignment - 1);
                    if (live[c] && o < off[c] + csz && off[c] < o + sz) {
                        o = off[c] + csz;
                        moved = true;
                    }
                }
            }
            off[b] = o;
            live[b] = true;
            top = o + sz > top ? o + sz : top;
        }
        for (int b = 0; b < p->nbufs; b++) {
            int last = p->bufs[b].acc[0];
            for (int k = 1; k < p->bufs[b].nacc; k++)
                last = p->bufs[b].acc[k] > last ? p->bufs[b].acc[k] : last;
            if (last == n)
                live[b] = false;
        }
    }
    return top;
}

#endif
