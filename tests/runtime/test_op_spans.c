/* Op spans by device timers (the CUDA backend's path, reel_plan_trace_ops):
 * an eager step records each op once, in order on its stream, inside the
 * step; a replayed step records none. Parameterized over backends
 * (REEL_TEST_BACKEND): on the host backend the plan is compiled to take the
 * timer path (reel_plan_debug.dev_spans), in the gpu suite it is CUDA's own. */
#include <criterion/criterion.h>
#include <string.h>

#include "runtime/plan.h"
#include "tests/core/opts.h"

static reel_ctx *ctx;
static void setup(void)
{
    cr_assert_eq(reel_ctx_create(reel_test_ctx_opts(reel_test_backend()), &ctx), REEL_OK,
                 "backend '%s' is not available", reel_backend_name(reel_test_backend()));
}
static void teardown(void) { reel_ctx_destroy(ctx); }

/* x -> add -> mul -> rmsnorm -> softmax: four nodes on stream 0. */
static reel_plan *chain(bool capture)
{
    reel_graph *g;
    cr_assert_eq(reel_graph_create(ctx, &g), REEL_OK);
    int64_t d[2] = {REEL_DIM_TOKENS, 256}, wd[1] = {256};
    reel_tensor x = reel_input(g, "x", REEL_F32, 2, d);
    static float w[256];
    for (int i = 0; i < 256; i++)
        w[i] = 1.0f;
    reel_tensor wt = reel_param(g, "w", REEL_F32, 1, wd);
    reel_param_bind(g, wt, w);
    reel_tensor a = reel_add(g, x, x);
    reel_tensor m = reel_mul(g, a, x);
    reel_output(g, "y", reel_softmax(g, reel_rmsnorm(g, m, wt, 1e-5f)));
    cr_assert_eq(reel_graph_status(g), REEL_OK, "%s", reel_ctx_last_error(ctx));
    reel_compile_opts o = REEL_COMPILE_OPTS_INIT;
    o.num_buckets = 1;
    o.buckets[0] = 8;
    o.no_capture = !capture;
    o.no_fuse = 1;
    reel_plan_debug dbg = {.not_capturable_node = -1, .dev_spans = true};
    reel_plan *p = NULL;
    cr_assert_eq(reel_compile_debug(g, &o, &dbg, &p), REEL_OK, "%s", reel_ctx_last_error(ctx));
    reel_graph_destroy(g);
    return p;
}

static void step(reel_plan *p, int32_t n)
{
    float x[8 * 256];
    for (int i = 0; i < 8 * 256; i++)
        x[i] = (float)(i % 17) * 0.1f;
    cr_assert_eq(reel_plan_set_input(p, "x", x, n), REEL_OK, "%s", reel_ctx_last_error(ctx));
    reel_step_info s = { REEL_STEP_INFO_HEAD, .num_tokens = n};
    cr_assert_eq(reel_step(p, &s), REEL_OK, "%s", reel_ctx_last_error(ctx));
}

static double mono_us(void) { return reel_now_ms() * 1e3; }

Test(op_spans, an_eager_step_times_each_op_once_in_order, .init = setup, .fini = teardown)
{
    reel_plan *p = chain(false);
    reel_plan_stats st = REEL_PLAN_STATS_INIT;
    cr_assert_eq(reel_plan_stats_get(p, &st), REEL_OK);
    cr_assert_eq(reel_plan_trace_ops(p, 1), REEL_OK, "%s", reel_ctx_last_error(ctx));
    for (int rep = 0; rep < 3; rep++) {
        double t0 = mono_us();
        step(p, 5);
        double t1 = mono_us();
        reel_op_span sp[16] = { REEL_OP_SPAN_INIT };
        int n = 0;
        cr_assert_eq(reel_plan_take_op_spans(p, sp, 16, &n), REEL_OK, "%s", reel_ctx_last_error(ctx));
        cr_assert_eq(n, st.num_nodes, "step %d: %d spans for %d ops", rep, n, st.num_nodes);
        for (int i = 0; i < n; i++) {
            cr_assert_eq(sp[i].node, i, "span %d names node %d", i, sp[i].node);
            cr_assert_eq(sp[i].stream, 0);
            cr_assert(sp[i].start_us <= sp[i].end_us, "node %d: start %.1f after end %.1f", i, sp[i].start_us,
                      sp[i].end_us);
            if (i > 0)
                cr_assert(sp[i].start_us >= sp[i - 1].end_us - 1.0, "node %d starts before node %d ends", i,
                          i - 1);
        }
        /* Placed on the host clock inside the step (1 ms of slack for the
         * device clock's rounding). */
        cr_assert(sp[n - 1].end_us <= t1 + 1.0 && sp[0].start_us >= t0 - 1000.0,
                  "spans %.1f..%.1f outside the step %.1f..%.1f", sp[0].start_us, sp[n - 1].end_us, t0, t1);
    }
    cr_assert_eq(reel_plan_trace_ops(p, 0), REEL_OK);
    step(p, 3);
    int n = -1;
    cr_assert_eq(reel_plan_take_op_spans(p, NULL, 0, &n), REEL_OK);
    cr_assert_eq(n, 0, "spans recorded with tracing off");
    reel_plan_destroy(p);
}

Test(op_spans, a_replayed_step_records_none, .init = setup, .fini = teardown)
{
    reel_plan *p = chain(true);
    cr_assert_eq(reel_plan_trace_ops(p, 1), REEL_OK, "%s", reel_ctx_last_error(ctx));
    step(p, 8);
    reel_plan_stats st = REEL_PLAN_STATS_INIT;
    cr_assert_eq(reel_plan_stats_get(p, &st), REEL_OK);
    cr_assert_eq(st.replays, 1, "the step was not replayed");
    int n = -1;
    reel_op_span sp[16] = { REEL_OP_SPAN_INIT };
    cr_assert_eq(reel_plan_take_op_spans(p, sp, 16, &n), REEL_OK, "%s", reel_ctx_last_error(ctx));
    cr_assert_eq(n, 0, "a replay recorded %d op spans", n);
    reel_plan_destroy(p);
}
