/* Ops on several streams: same results as one stream, in replay and eager,
 * across many steps (the host backend really runs streams concurrently). */
#include <criterion/criterion.h>
#include <string.h>

#include "reel/reel.h"
#include "backend/host/host.h"
#include "backend/ctx.h"
#include "runtime/plan.h"
#include "tests/core/opts.h"

static reel_ctx *ctx;
static void setup(void) { cr_assert_eq(reel_ctx_create(reel_test_ctx_opts(REEL_BACKEND_HOST), &ctx), REEL_OK); }
static void teardown(void) { reel_ctx_destroy(ctx); }

/* Two branches (x*w1 -> rmsnorm 'normed', x*w2 -> softmax) joined by add,
 * then argmax; with streams, the softmax branch runs on stream 1 and the
 * norm on stream 2. */
static reel_plan *branches_ex(bool streams, bool capture, bool check, const reel_plan_debug *dbg, float *w1,
                              float *w2, float *nw)
{
    reel_graph *g;
    cr_assert_eq(reel_graph_create(ctx, &g), REEL_OK);
    reel_tensor x = reel_input(g, "x", REEL_F32, 2, (int64_t[]){REEL_DIM_TOKENS, 32});
    reel_tensor p1 = reel_param(g, "w1", REEL_F32, 2, (int64_t[]){32, 32});
    reel_tensor p2 = reel_param(g, "w2", REEL_F32, 2, (int64_t[]){32, 32});
    reel_tensor pn = reel_param(g, "nw", REEL_F32, 1, (int64_t[]){32});
    reel_param_bind(g, p1, w1);
    reel_param_bind(g, p2, w2);
    reel_param_bind(g, pn, nw);
    reel_tensor a = reel_matmul(g, x, p1, false), b = reel_matmul(g, x, p2, false);
    reel_tensor an = reel_rmsnorm(g, a, pn, 1e-5f), bs = reel_softmax(g, b);
    reel_set_name(g, an, "normed");
    reel_tensor s = reel_add(g, an, bs);
    if (streams) {
        cr_assert_eq(reel_set_stream(g, b, 1), REEL_OK);
        cr_assert_eq(reel_set_stream(g, bs, 1), REEL_OK);
        cr_assert_eq(reel_set_stream(g, an, 2), REEL_OK);
    }
    reel_output(g, "sum", s);
    reel_output(g, "best", reel_argmax(g, s));
    reel_compile_opts o = REEL_COMPILE_OPTS_INIT;
    o.num_buckets = 3;
    memcpy(o.buckets, (int32_t[]){2, 4, 8}, 3 * sizeof(int32_t));
    o.no_capture = !capture;
    o.check_hazards = check;
    reel_plan_debug none = {.not_capturable_node = -1};
    reel_plan *p;
    cr_assert_eq(reel_compile_debug(g, &o, dbg ? dbg : &none, &p), REEL_OK, "%s", reel_ctx_last_error(ctx));
    reel_graph_destroy(g);
    return p;
}

static reel_plan *branches(bool streams, bool capture, float *w1, float *w2, float *nw)
{
    return branches_ex(streams, capture, false, NULL, w1, w2, nw);
}

Test(streams, a_graph_forked_over_three_streams_matches_one_stream, .init = setup, .fini = teardown)
{
    float w1[32 * 32], w2[32 * 32], nw[32], x[16 * 32];
    for (int i = 0; i < 32 * 32; i++) {
        w1[i] = (float)((i * 37) % 11) / 11.f - 0.5f;
        w2[i] = (float)((i * 13) % 7) / 7.f - 0.5f;
    }
    for (int i = 0; i < 32; i++)
        nw[i] = 1.f + i / 64.f;
    reel_host_set_jitter(ctx->be, 200, 5);
    reel_plan *one = branches(false, true, w1, w2, nw), *rep = branches(true, true, w1, w2, nw),
              *eag = branches(true, false, w1, w2, nw);
    reel_plan_stats st = REEL_PLAN_STATS_INIT;
    reel_plan_stats_get(rep, &st);
    cr_assert_eq(st.num_streams, 3);
    for (int step = 0; step < 30; step++) {
        int32_t n = 1 + step % 12;
        for (int i = 0; i < n * 32; i++)
            x[i] = (float)(((i + step) * 7919) % 101) / 50.f - 1.f;
        reel_plan *ps[3] = {one, rep, eag};
        const void *out[3];
        for (int k = 0; k < 3; k++) {
            reel_step_info s = { REEL_STEP_INFO_HEAD, .num_tokens = n};
            cr_assert_eq(reel_plan_set_input(ps[k], "x", x, n), REEL_OK);
            cr_assert_eq(reel_step(ps[k], &s), REEL_OK, "%s", reel_ctx_last_error(ctx));
            cr_assert_eq(reel_plan_output(ps[k], "sum", &out[k], NULL), REEL_OK);
        }
        cr_assert_eq(memcmp(out[0], out[1], (size_t)n * 32 * 4), 0, "step %d: multi-stream replay differs", step);
        cr_assert_eq(memcmp(out[0], out[2], (size_t)n * 32 * 4), 0, "step %d: multi-stream eager differs", step);
    }
    reel_host_set_jitter(ctx->be, 0, 0);
    reel_plan_destroy(one);
    reel_plan_destroy(rep);
    reel_plan_destroy(eag);
}

static reel_plan *branches_dbg(const reel_plan_debug *dbg, float *w1, float *w2, float *nw)
{
    return branches_ex(true, true, true, dbg, w1, w2, nw);
}

Test(streams, a_multi_stream_plan_runs_clean_under_the_hazard_checker, .init = setup, .fini = teardown)
{
    static float w1[32 * 32], w2[32 * 32], nw[32], x[16 * 32];
    reel_plan_debug dbg = {.not_capturable_node = -1};
    reel_plan *p = branches_dbg(&dbg, w1, w2, nw);
    for (int step = 0; step < 12; step++) {
        int32_t n = 1 + step % 10; /* replays and overflow steps */
        reel_step_info s = { REEL_STEP_INFO_HEAD, .num_tokens = n};
        cr_assert_eq(reel_plan_set_input(p, "x", x, n), REEL_OK);
        cr_assert_eq(reel_step(p, &s), REEL_OK, "%s", reel_ctx_last_error(ctx));
    }
    reel_plan_stats st = REEL_PLAN_STATS_INIT;
    reel_plan_stats_get(p, &st);
    cr_assert_eq(st.hazards, 0);
    cr_assert_gt(st.replays, 0);
    cr_assert_gt(st.eager_steps, 0);
    reel_plan_destroy(p);
}

Test(streams, a_missing_cross_stream_edge_is_reported_with_both_ops, .init = setup, .fini = teardown)
{
    static float w1[32 * 32], w2[32 * 32], nw[32], x[16 * 32];
    reel_plan_debug dbg = {.not_capturable_node = -1, .drop_waits_of = 4 + 1}; /* the add */
    reel_plan *p = branches_dbg(&dbg, w1, w2, nw);
    reel_step_info s = { REEL_STEP_INFO_HEAD, .num_tokens = 3};
    cr_assert_eq(reel_plan_set_input(p, "x", x, 3), REEL_OK);
    cr_assert_eq(reel_step(p, &s), REEL_E_HAZARD);
    const char *m = reel_ctx_last_error(ctx);
    cr_assert(strstr(m, "RAW") != NULL, "%s", m);
    cr_assert(strstr(m, "add") != NULL && strstr(m, "rmsnorm") != NULL, "%s", m);
    cr_assert(strstr(m, "normed") != NULL, "the allocation is named: %s", m);
    reel_plan_stats st = REEL_PLAN_STATS_INIT;
    reel_plan_stats_get(p, &st);
    cr_assert_gt(st.hazards, 0);
    reel_plan_destroy(p);
}

/* Every launch of every bucket marks exactly its parameter inputs
 * (reel_launch.in_param), whichever stream the node is on: a kernel
 * launched programmatically may read those before its wait (the CUDA
 * skinny matmul's weights), so no other input may carry the bit. */
Test(streams, launches_mark_exactly_their_parameter_inputs, .init = setup, .fini = teardown)
{
    float w1[32 * 32] = {0}, w2[32 * 32] = {0}, nw[32] = {0};
    reel_plan *p = branches(true, true, w1, w2, nw);
    int marked = 0;
    for (int b = 0; b < p->nbuckets; b++)
        for (int i = 0; i < p->nnodes; i++) {
            const reel_node *n = &p->nodes[i];
            const reel_launch *l = &p->bucket[b].launches[i];
            for (int k = 0; k < REEL_OP_MAX_IN; k++) {
                const bool param = k < n->nin && n->in[k] && p->tensors[n->in[k]].kind == REEL_T_PARAM;
                cr_assert_eq((l->in_param >> k & 1u) != 0, param, "bucket %d node %d input %d", b, i, k);
                marked += param;
            }
            cr_assert_eq(l->in_param >> REEL_OP_MAX_IN, 0u);
        }
    cr_assert_eq(marked, 3 * p->nbuckets, "w1, w2 and nw in each bucket");
    reel_plan_destroy(p);
}
