/* The planner's linear-time parts against the quadratic references they
 * replace: happens-before as forward clocks against plain reachability, the
 * conflict pairs found by the sweep against every pair, the node bound in one
 * pass against the per-node scan, and whole plans with and without the
 * exhaustive reference (which must be identical, offsets and edges alike). */
#include <criterion/criterion.h>

#include "core/halloc.h"
#include "memory/hb.h"
#include "memory/planner_internal.h"
#include "tests/memory/pgen.h"

static pg_problem G;
static pg_reach R;

/* Random lifetimes, not shaped like a model: nodes on random streams,
 * random forward edges (cross-stream ones ordering some pairs, none others),
 * buffers with random accesses at or after their producer (some on other
 * streams, some on the producer's node again), zero sizes and in-place hints. */
static void random_lifetimes(pg_problem *g, uint64_t seed, int nnodes, int nstreams, int nbufs, int edge_pct)
{
    uint64_t s = seed;
    pg_init(g, nnodes);
    for (int v = 0; v < nnodes; v++)
        g->stream[v] = pg_rand(&s, nstreams);
    int want = nnodes * edge_pct / 100;
    for (int e = 0; e < want && g->p.nedges < PG_MAX_EDGES; e++) {
        int u = pg_rand(&s, nnodes - 1);
        int v = u + 1 + pg_rand(&s, nnodes - 1 - u < 24 ? nnodes - 1 - u : 24);
        pg_edge(g, u, v);
    }
    for (int b = 0; b < nbufs; b++) {
        int prod = pg_rand(&s, nnodes);
        size_t size = pg_rand(&s, 10) == 0 ? 0 : pg_size(&s);
        int x = pg_buf(g, prod, size);
        int nacc = pg_rand(&s, 6);
        for (int k = 0; k < nacc && prod + 1 < nnodes; k++) {
            int span = pg_rand(&s, 3) == 0 ? nnodes - prod : (nnodes - prod < 12 ? nnodes - prod : 12);
            g->acc[x][g->bufs[x].nacc++] = prod + pg_rand(&s, span);
        }
    }
    for (int b = 0; b < nbufs; b++)
        if (pg_rand(&s, 4) == 0) {
            int src = pg_rand(&s, nbufs);
            if (src != b)
                g->bufs[b].inplace_src = src;
        }
    g->p.allow_new_edges = pg_rand(&s, 2) == 0;
}

Test(planner_linear, happens_before_matches_reachability_on_random_schedules)
{
    for (int seed = 1; seed <= 60; seed++) {
        if (seed % 2)
            pg_random(&G, (uint64_t)seed, 60 + seed * 3, 1 + seed % 4, 20);
        else
            random_lifetimes(&G, (uint64_t)seed, 50 + seed * 4, 1 + seed % 5, 40, 30 + seed % 3 * 40);
        reel_hb hb;
        cr_assert_eq(reel_hb_build(&hb, G.p.nnodes, G.p.stream, G.p.nedges, G.p.edge_from, G.p.edge_to, 0, NULL,
                                   NULL),
                     REEL_OK);
        pg_reach_build(&R, &G.p, 0, NULL, NULL);
        for (int u = 0; u < G.p.nnodes; u++)
            for (int v = 0; v < G.p.nnodes; v++)
                cr_assert_eq(reel_hb_before(&hb, u, v), R.r[u][v], "seed %d: %d before %d: clocks %d, search %d",
                             seed, u, v, reel_hb_before(&hb, u, v), R.r[u][v]);
        reel_hb_free(&hb);
    }
}

typedef struct pairs {
    int *i, *j;
    unsigned char *rel;
    size_t n;
} pairs;

static pairs conflicts(bool exhaustive)
{
    pairs c;
    G.p.exhaustive = exhaustive;
    cr_assert_eq(reel_mem_conflicts(&G.p, &c.i, &c.j, &c.rel, &c.n), REEL_OK);
    G.p.exhaustive = false;
    return c;
}

static void pairs_free(pairs *c)
{
    reel_hfree(c->i);
    reel_hfree(c->j);
    reel_hfree(c->rel);
}

static void expect_same_conflicts(const char *what, int seed)
{
    pairs all = conflicts(true), fast = conflicts(false);
    cr_assert_eq(fast.n, all.n, "%s %d: %zu pairs by the sweep, %zu by all pairs", what, seed, fast.n, all.n);
    for (size_t k = 0; k < all.n; k++)
        cr_assert(fast.i[k] == all.i[k] && fast.j[k] == all.j[k] && fast.rel[k] == all.rel[k],
                  "%s %d: pair %zu is (%d, %d) rel %d by the sweep, (%d, %d) rel %d by all pairs", what, seed, k,
                  fast.i[k], fast.j[k], fast.rel[k], all.i[k], all.j[k], all.rel[k]);
    pairs_free(&all);
    pairs_free(&fast);
}

Test(planner_linear, conflict_pairs_by_the_sweep_match_all_pairs_on_random_lifetimes)
{
    for (int seed = 1; seed <= 300; seed++) {
        int streams = 1 + seed % 5, edges = (seed / 5) % 4 * 40;
        random_lifetimes(&G, (uint64_t)seed * 7919, 20 + seed % 200, streams, 10 + seed % 150, edges);
        expect_same_conflicts("random lifetimes", seed);
    }
}

Test(planner_linear, conflict_pairs_by_the_sweep_match_all_pairs_on_dags_chains_and_layers)
{
    for (int seed = 1; seed <= 60; seed++) {
        pg_random(&G, (uint64_t)seed, 40 + seed * 6, 1 + seed % 4, seed % 3 * 40);
        G.p.allow_new_edges = seed % 2;
        expect_same_conflicts("random DAG", seed);
    }
    pg_chain(&G, 3, 400);
    expect_same_conflicts("chain", 3);
    pg_decode_layers(&G, 8, 4, 256, 512, 1024);
    G.p.allow_new_edges = true;
    expect_same_conflicts("decode layers", 8);
}

static size_t node_bound(bool exhaustive)
{
    G.p.exhaustive = exhaustive;
    size_t b = reel_mem_node_bound(&G.p);
    G.p.exhaustive = false;
    return b;
}

Test(planner_linear, node_bound_in_one_pass_matches_the_per_node_scan)
{
    for (int seed = 1; seed <= 200; seed++) {
        if (seed % 2)
            pg_random(&G, (uint64_t)seed, 30 + seed * 2, 1 + seed % 4, 60);
        else
            random_lifetimes(&G, (uint64_t)seed, 20 + seed, 1 + seed % 3, 10 + seed, 50);
        size_t all = node_bound(true), fast = node_bound(false);
        cr_assert_eq(fast, all, "seed %d: node bound %zu in one pass, %zu by the scan", seed, fast, all);
    }
}

static void expect_same_plan(const char *what, int seed)
{
    reel_mem_plan a, b;
    G.p.exhaustive = true;
    cr_assert_eq(reel_mem_plan_compute(&G.p, &a), REEL_OK);
    G.p.exhaustive = false;
    cr_assert_eq(reel_mem_plan_compute(&G.p, &b), REEL_OK);
    cr_assert_eq(b.arena, a.arena, "%s %d: arena %zu, reference %zu", what, seed, b.arena, a.arena);
    cr_assert_eq(b.lower_bound, a.lower_bound);
    cr_assert_eq(b.node_bound, a.node_bound, "%s %d", what, seed);
    cr_assert_eq(b.nconflicts, a.nconflicts, "%s %d", what, seed);
    cr_assert_eq(b.nnew_edges, a.nnew_edges, "%s %d: %d edges, reference %d", what, seed, b.nnew_edges,
                 a.nnew_edges);
    for (int k = 0; k < a.nnew_edges; k++)
        cr_assert(b.new_from[k] == a.new_from[k] && b.new_to[k] == a.new_to[k], "%s %d: edge %d", what, seed, k);
    for (int i = 0; i < G.p.nbufs; i++)
        cr_assert_eq(b.offsets[i], a.offsets[i], "%s %d: buffer %d at %zu, reference %zu", what, seed, i,
                     b.offsets[i], a.offsets[i]);
    int x, y;
    cr_assert_eq(reel_mem_plan_verify(&G.p, &b, &x, &y), REEL_OK, "%s %d: %d vs %d", what, seed, x, y);
    reel_mem_plan_free(&a);
    reel_mem_plan_free(&b);
}

Test(planner_linear, plans_are_identical_with_and_without_the_exhaustive_reference)
{
    for (int seed = 1; seed <= 24; seed++) {
        pg_random(&G, (uint64_t)seed, 60 + seed * 8, 1 + seed % 4, seed % 2 * 50);
        G.p.allow_new_edges = seed % 3 != 0;
        expect_same_plan("random DAG", seed);
    }
    for (int seed = 1; seed <= 24; seed++) {
        random_lifetimes(&G, (uint64_t)seed * 31, 40 + seed * 3, 1 + seed % 4, 30 + seed * 2, 60);
        expect_same_plan("random lifetimes", seed);
    }
    pg_decode_layers(&G, 6, 8, 512, 1024, 2048);
    G.p.allow_new_edges = true;
    expect_same_plan("decode layers", 6);
}
