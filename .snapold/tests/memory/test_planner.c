/* The static planner: safety on multi-stream DAGs (checked by an independent
 * reachability oracle), arena against the lower bound, in-place reuse. */
#include <criterion/criterion.h>
#include <stdio.h>

#include "memory/planner.h"
#include "tests/memory/pgen.h"

static pg_problem G;

static void plan_ok(const reel_mem_problem *p, reel_mem_plan *plan)
{
    cr_assert_eq(reel_mem_plan_compute(p, plan), REEL_OK);
    int a, b;
    cr_assert_eq(reel_mem_plan_verify(p, plan, &a, &b), REEL_OK, "verify: %d vs %d", a, b);
    cr_assert_eq(pg_oracle_violations(p, plan->offsets, plan->nnew_edges, plan->new_from, plan->new_to), 0);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double bound_of(const reel_mem_problem *p, size_t lb)
{
    size_t nb = reel_mem_node_bound(p);
    return (double)(nb > lb ? nb : lb);
}

Test(planner, never_overlaps_unordered_live_buffers_on_random_multistream_dags)
{
    for (uint64_t seed = 1; seed <= 150; seed++) {
        for (int edges = 0; edges < 2; edges++) {
            pg_random(&G, seed, 20 + (int)(seed % 7) * 25, 1 + (int)(seed % 4), 70);
            G.p.allow_new_edges = edges;
            reel_mem_plan plan;
            plan_ok(&G.p, &plan);
            cr_assert_geq(plan.arena, plan.lower_bound);
            if (!edges)
                cr_assert_eq(plan.nnew_edges, 0);
            for (int e = 0; e < plan.nnew_edges; e++)
                cr_assert_lt(plan.new_from[e], plan.new_to[e], "new edges go forward in the schedule");
            reel_mem_plan_free(&plan);
        }
    }
}


Test(planner, stays_within_5_percent_of_the_lower_bound_on_random_multistream_dags)
{
    enum { N = 200 };
    double r_edges[N], r_point[N], r_plain[N], r_linear[N];
    int unsafe_linear = 0, nedges = 0;
    static size_t off[PG_MAX_BUFS];
    for (int i = 0; i < N; i++) {
        uint64_t seed = 1000 + (uint64_t)i;
        pg_random(&G, seed, 40 + (i % 8) * 50, 1 + i % 4, 70);
        reel_mem_plan plan;
        G.p.allow_new_edges = true;
        plan_ok(&G.p, &plan);
        double bound = bound_of(&G.p, plan.lower_bound);
        r_edges[i] = (double)plan.arena / bound;
        r_point[i] = (double)plan.arena / (double)plan.lower_bound;
        nedges += plan.nnew_edges;
        cr_expect_leq(r_edges[i], 1.05, "seed %llu: arena %zu bound %.0f (point bound %zu)",
                      (unsigned long long)seed, plan.arena, bound, plan.lower_bound);
        reel_mem_plan_free(&plan);
        G.p.allow_new_edges = false;
        plan_ok(&G.p, &plan);
        r_plain[i] = (double)plan.arena / bound;
        size_t lin = pg_linear_greedy(&G.p, off);
        r_linear[i] = (double)lin / bound;
        unsafe_linear += pg_oracle_violations(&G.p, off, 0, NULL, NULL) > 0;
        reel_mem_plan_free(&plan);
    }
    qsort(r_edges, N, sizeof(double), cmp_double);
    qsort(r_point, N, sizeof(double), cmp_double);
    qsort(r_plain, N, sizeof(double), cmp_double);
    qsort(r_linear, N, sizeof(double), cmp_double);
    fprintf(stderr, "planner corpus (%d random DAGs, 1-4 streams), arena / max(point, node bound):\n"
            "  with new edges:    min %.4f median %.4f p90 %.4f max %.4f (%d edges added)\n"
            "  (vs point bound):  min %.4f median %.4f p90 %.4f max %.4f\n"
            "  without new edges: min %.4f median %.4f p90 %.4f max %.4f\n"
            "  linear greedy:     min %.4f median %.4f p90 %.4f max %.4f (unsafe on %d DAGs)\n",
            N, r_edges[0], r_edges[N / 2], r_edges[N * 9 / 10], r_edges[N - 1], nedges,
            r_point[0], r_point[N / 2], r_point[N * 9 / 10], r_point[N - 1],
            r_plain[0], r_plain[N / 2], r_plain[N * 9 / 10], r_plain[N - 1],
            r_linear[0], r_linear[N / 2], r_linear[N * 9 / 10], r_linear[N - 1], unsafe_linear);
    cr_assert_leq(r_edges[N - 1], 1.05);
    cr_assert_lt(r_edges[N / 2], r_linear[N / 2], "reel beats the linear greedy at the median");
    cr_assert_gt(unsafe_linear, 0, "the linear greedy shares bytes across unordered streams");
}

Test(planner, plans_single_stream_chains_exactly_at_the_lower_bound)
{
    for (uint64_t seed = 1; seed <= 50; seed++) {
        pg_chain(&G, seed, 2 + (int)(seed % 40));
        reel_mem_plan plan;
        plan_ok(&G.p, &plan);
        cr_assert_eq(plan.arena, plan.lower_bound, "seed %llu", (unsigned long long)seed);
        reel_mem_plan_free(&plan);
    }
}

Test(planner, plans_decode_transformer_layers_within_2_percent_of_the_lower_bound)
{
    static const size_t T[] = { 1, 2, 4, 8, 16, 32 };
    for (int i = 0; i < 12; i++) {
        pg_decode_layers(&G, 24, T[i % 6], 4096, 14336, i < 6 ? 32000 : 0);
        G.p.allow_new_edges = true;
        reel_mem_plan plan;
        plan_ok(&G.p, &plan);
        double bound = bound_of(&G.p, plan.lower_bound);
        double r = (double)plan.arena / bound;
        fprintf(stderr, "decode layers T=%zu: arena %zu point bound %zu node bound %zu ratio %.4f "
                "(%.4f vs point bound) edges %d\n", T[i % 6], plan.arena, plan.lower_bound,
                reel_mem_node_bound(&G.p), r, (double)plan.arena / (double)plan.lower_bound,
                plan.nnew_edges);
        cr_assert_leq(r, 1.02);
        reel_mem_plan_free(&plan);
    }
}

Test(planner, keeps_buffers_on_unordered_streams_apart_without_new_edges)
{
    /* two streams, no edge between them: nothing may share */
    pg_init(&G, 4);
    int st[] = { 0, 1, 0, 1 };
    memcpy(G.stream, st, sizeof st);
    int a = pg_buf(&G, 0, 4096), b = pg_buf(&G, 1, 4096);
    pg_read(&G, 2, a);
    int c = pg_buf(&G, 2, 4096);
    pg_read(&G, 3, b);
    (void)c;
    reel_mem_plan plan;
    plan_ok(&G.p, &plan);
    cr_assert_eq(plan.arena, 3 * 4096);
    reel_mem_plan_free(&plan);
}

Test(planner, adds_an_edge_to_reuse_bytes_across_streams_when_allowed)
{
    /* a (stream 0) dies at node 1; b is produced on stream 1 at node 2 */
    pg_init(&G, 4);
    int st[] = { 0, 0, 1, 1 };
    memcpy(G.stream, st, sizeof st);
    int a = pg_buf(&G, 0, 8192);
    pg_read(&G, 1, a);
    int b = pg_buf(&G, 2, 8192);
    pg_read(&G, 3, b);
    G.p.allow_new_edges = true;
    reel_mem_plan plan;
    plan_ok(&G.p, &plan);
    cr_assert_eq(plan.arena, 8192);
    cr_assert_eq(plan.nnew_edges, 1);
    cr_assert_eq(plan.new_from[0], 1);
    cr_assert_eq(plan.new_to[0], 2);
    reel_mem_plan_free(&plan);
    G.p.allow_new_edges = false;
    plan_ok(&G.p, &plan);
    cr_assert_eq(plan.arena, 2 * 8192);
    reel_mem_plan_free(&plan);
}

Test(planner, reuses_an_input_in_place_only_when_it_dies_at_the_consumer)
{
    pg_init(&G, 3);
    int a = pg_buf(&G, 0, 4096);
    pg_read(&G, 1, a);
    int b = pg_buf(&G, 1, 4096);
    G.bufs[b].inplace_src = a;
    pg_read(&G, 2, b);
    reel_mem_plan plan;
    plan_ok(&G.p, &plan);
    cr_assert_eq(plan.offsets[a], plan.offsets[b]);
    cr_assert_eq(plan.arena, 4096);
    reel_mem_plan_free(&plan);
    pg_read(&G, 2, a);      /* a now lives past b's producer */
    plan_ok(&G.p, &plan);
    cr_assert_eq(plan.arena, 2 * 4096);
    reel_mem_plan_free(&plan);
}

Test(planner, verify_reports_the_pair_that_overlaps_without_order)
{
    pg_init(&G, 4);
    int st[] = { 0, 1, 0, 1 };
    memcpy(G.stream, st, sizeof st);
    int a = pg_buf(&G, 0, 4096), b = pg_buf(&G, 1, 4096);
    pg_read(&G, 2, a);
    pg_read(&G, 3, b);
    size_t off[2] = { 0, 0 };
    reel_mem_plan bad = { .offsets = off, .arena = 4096 };
    int x, y;
    cr_assert_eq(reel_mem_plan_verify(&G.p, &bad, &x, &y), REEL_E_HAZARD);
    cr_assert_eq(x, a);
    cr_assert_eq(y, b);
    /* the edge from a's last access to b's producer makes the overlap safe,
     * but b's producer (node 1) comes before a's last access (node 2) */
    int f = 2, t = 3;
    bad.nnew_edges = 1;
    bad.new_from = &f;
    bad.new_to = &t;
    cr_assert_eq(reel_mem_plan_verify(&G.p, &bad, &x, &y), REEL_E_HAZARD);
}

Test(planner, verify_reports_a_removed_plan_edge)
{
    for (uint64_t seed = 1; seed <= 200; seed++) {
        pg_random(&G, seed, 60, 3, 70);
        G.p.allow_new_edges = true;
        reel_mem_plan plan;
        plan_ok(&G.p, &plan);
        if (plan.nnew_edges == 0) {
            reel_mem_plan_free(&plan);
            continue;
        }
        plan.nnew_edges--;      /* drop the last edge the plan relies on */
        int a, b;
        reel_status st = reel_mem_plan_verify(&G.p, &plan, &a, &b);
        int bad = pg_oracle_violations(&G.p, plan.offsets, plan.nnew_edges, plan.new_from, plan.new_to);
        cr_assert_eq(st == REEL_E_HAZARD, bad > 0, "verify and the oracle agree (seed %llu)",
                     (unsigned long long)seed);
        plan.nnew_edges++;
        reel_mem_plan_free(&plan);
        if (bad)
            return;
    }
    cr_assert_fail("no plan edge in the corpus was needed");
}

Test(planner, refuses_malformed_problems)
{
    reel_mem_plan plan;
    cr_assert_eq(reel_mem_plan_compute(NULL, &plan), REEL_E_INVALID_ARG);
    pg_init(&G, 3);
    int a = pg_buf(&G, 1, 64);
    pg_read(&G, 2, a);
    G.acc[a][1] = 0;        /* accessed before its producer */
    cr_assert_eq(reel_mem_plan_compute(&G.p, &plan), REEL_E_INVALID_ARG);
    G.acc[a][1] = 2;
    G.efrom[0] = 2;         /* an edge backwards in the schedule */
    G.eto[0] = 1;
    cr_assert_eq(reel_mem_plan_compute(&G.p, &plan), REEL_E_INVALID_ARG);
    G.efrom[0] = 1;
    G.eto[0] = 2;
    G.bufs[a].inplace_src = a;
    cr_assert_eq(reel_mem_plan_compute(&G.p, &plan), REEL_E_INVALID_ARG);
    G.bufs[a].inplace_src = -1;
    G.p.alignment = 48;
    cr_assert_eq(reel_mem_plan_compute(&G.p, &plan), REEL_E_INVALID_ARG);
    G.p.alignment = 64;
    cr_assert_eq(reel_mem_plan_compute(&G.p, &plan), REEL_OK);
    reel_mem_plan_free(&plan);
}

Test(planner, gives_zero_sized_buffers_offset_zero_and_no_bytes)
{
    pg_init(&G, 2);
    int a = pg_buf(&G, 0, 0);
    pg_read(&G, 1, a);
    reel_mem_plan plan;
    plan_ok(&G.p, &plan);
    cr_assert_eq(plan.offsets[a], 0);
    cr_assert_eq(plan.arena, 0);
    reel_mem_plan_free(&plan);
}
