/* The memory budget at compile (runtime/budget.c): a plan whose parts
 * together exceed what the backend can give is refused with REEL_E_OOM
 * before anything is allocated, naming the parts, each of which alone would
 * fit; a plan that fits compiles and reports the same parts. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "reel/reel.h"
#include "tests/core/opts.h"

static reel_ctx *ctx;

static void setup(void) { cr_assert_eq(reel_ctx_create(reel_test_ctx_opts(REEL_BACKEND_HOST), &ctx), REEL_OK); }
static void teardown(void) { reel_ctx_destroy(ctx); }

/* The sum of each state's rows picked by the token ids, with n states of
 * `each` bytes (f32, 4 columns). */
static reel_graph *states_graph(int n, size_t each)
{
    reel_graph *g;
    cr_assert_eq(reel_graph_create(ctx, &g), REEL_OK);
    int64_t d[1] = {REEL_DIM_TOKENS};
    reel_tensor ids = reel_input(g, "ids", REEL_I32, 1, d);
    reel_tensor y = {0};
    for (int i = 0; i < n; i++) {
        char name[16];
        snprintf(name, sizeof name, "s%d", i);
        int64_t sd[2] = {(int64_t)(each / 16), 4};
        reel_tensor e = reel_embedding(g, reel_state(g, name, REEL_F32, 2, sd), ids);
        y = i ? reel_add(g, y, e) : e;
    }
    cr_assert_eq(reel_output(g, "y", y), REEL_OK, "%s", reel_ctx_last_error(ctx));
    return g;
}

Test(budget, the_memory_query_answers_on_the_host_backend, .init = setup, .fini = teardown)
{
    size_t avail = 0, total = 0;
    cr_assert_eq(reel_ctx_memory(ctx, &avail, &total), REEL_OK);
    cr_assert_gt(avail, 0);
    cr_assert_geq(total, avail);
    cr_assert_eq(reel_ctx_memory(ctx, NULL, &total), REEL_E_INVALID_ARG);
    cr_assert(strstr(reel_ctx_last_error(ctx), "avail"), "%s", reel_ctx_last_error(ctx));
}

Test(budget, states_that_fit_alone_but_not_together_are_refused_before_allocating, .init = setup, .fini = teardown)
{
    size_t avail, total;
    cr_assert_eq(reel_ctx_memory(ctx, &avail, &total), REEL_OK);
    size_t each = (avail / 5 * 2) & ~(size_t)15;   /* 40% each: three are 120% */
    reel_graph *g = states_graph(3, each);
    reel_plan *p = (reel_plan *)1;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    reel_status st = reel_compile(g, NULL, &p);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    cr_assert_eq(st, REEL_E_OOM, "%s", reel_ctx_last_error(ctx));
    cr_assert_null(p);
    const char *msg = reel_ctx_last_error(ctx);
    cr_assert(strstr(msg, "states") && strstr(msg, "available") && strstr(msg, "'s0'"), "%s", msg);
    double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    cr_assert_lt(s, 1.0, "refused after %.2f s: it allocated first", s);
    reel_graph_destroy(g);
}

Test(budget, a_plan_that_fits_compiles_and_reports_its_parts, .init = setup, .fini = teardown)
{
    reel_graph *g = states_graph(2, (size_t)1 << 20);
    reel_plan *p = NULL;
    cr_assert_eq(reel_compile(g, NULL, &p), REEL_OK, "%s", reel_ctx_last_error(ctx));
    reel_plan_memory m = REEL_PLAN_MEMORY_INIT;
    cr_assert_eq(reel_plan_memory_get(p, &m), REEL_OK);
    cr_assert_eq(m.state_bytes, (size_t)2 << 20);
    reel_plan_destroy(p);
    reel_graph_destroy(g);
}

Test(budget, the_estimate_is_what_compile_takes_and_allocates_nothing, .init = setup, .fini = teardown)
{
    reel_graph *g = states_graph(2, (size_t)1 << 20);
    reel_plan_memory e = REEL_PLAN_MEMORY_INIT, m = REEL_PLAN_MEMORY_INIT;
    cr_assert_eq(reel_compile_estimate(g, NULL, &e), REEL_OK, "%s", reel_ctx_last_error(ctx));
    reel_plan *p = NULL;
    cr_assert_eq(reel_compile(g, NULL, &p), REEL_OK, "%s", reel_ctx_last_error(ctx));
    cr_assert_eq(reel_plan_memory_get(p, &m), REEL_OK);
    cr_assert_eq(e.num_buckets, m.num_buckets);
    cr_assert_eq(e.param_bytes, m.param_bytes);
    cr_assert_eq(e.state_bytes, m.state_bytes);
    cr_assert_eq(e.arena_bytes, m.arena_bytes);
    cr_assert_eq(e.static_bytes, m.static_bytes);
    cr_assert_eq(e.pinned_bytes, m.pinned_bytes);
    for (int b = 0; b < e.num_buckets; b++)
        cr_assert_eq(e.bucket_arena_bytes[b], m.bucket_arena_bytes[b]);
    reel_plan_destroy(p);
    reel_graph_destroy(g);

    /* A plan no machine holds is estimated at once: nothing is allocated. */
    g = states_graph(3, (size_t)1 << 42);
    cr_assert_eq(reel_compile_estimate(g, NULL, &e), REEL_OK, "%s", reel_ctx_last_error(ctx));
    cr_assert_eq(e.state_bytes, (size_t)3 << 42);
    cr_assert_eq(reel_compile_estimate(g, NULL, NULL), REEL_E_INVALID_ARG);
    reel_graph_destroy(g);
}
