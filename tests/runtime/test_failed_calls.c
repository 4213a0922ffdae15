/* A call that fails part way leaves the plan consistent and usable: a step
 * that fails after its upload leaves no work in flight, a failed growth of
 * the output buffer keeps the old one described, a strict bind_state whose
 * re-capture fails still re-captures every other bucket. Failures are
 * injected through the plan's debug hooks, set after compile. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "tests/runtime/opgraphs.h"
#include "runtime/plan.h"
#include "tests/core/opts.h"

static reel_ctx *ctx;
static void setup(void) { cr_assert_eq(reel_ctx_create(reel_test_ctx_opts(REEL_BACKEND_HOST), &ctx), REEL_OK); }
static void teardown(void) { reel_ctx_destroy(ctx); }

/* Nodes in schedule order: 0 matmul (stream 0), 1 matmul (stream 1),
 * 2 rmsnorm (stream 2), 3 softmax (stream 1), 4 add (stream 0). */
static reel_plan *branches(float *w1, float *w2, float *nw)
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
    reel_tensor s = reel_add(g, an, bs);
    reel_set_stream(g, b, 1);
    reel_set_stream(g, bs, 1);
    reel_set_stream(g, an, 2);
    reel_output(g, "sum", s);
    reel_compile_opts o = REEL_COMPILE_OPTS_INIT;
    o.num_buckets = 2;
    memcpy(o.buckets, (int32_t[]){4, 8}, 2 * sizeof(int32_t));
    o.check_hazards = true;
    reel_plan *p;
    cr_assert_eq(reel_compile(g, &o, &p), REEL_OK, "%s", reel_ctx_last_error(ctx));
    reel_graph_destroy(g);
    return p;
}

Test(failed_calls, a_step_failing_mid_issue_leaves_no_work_in_flight, .init = setup, .fini = teardown)
{
    static float w1[32 * 32], w2[32 * 32], nw[32], x[16 * 32];
    reel_plan *p = branches(w1, w2, nw);
    reel_step_info s = { REEL_STEP_INFO_HEAD, .num_tokens = 9}; /* past the buckets: the same overflow layout every time */
    cr_assert_eq(reel_plan_set_input(p, "x", x, 9), REEL_OK);
    cr_assert_eq(reel_step(p, &s), REEL_OK, "%s", reel_ctx_last_error(ctx));
    /* The softmax on stream 1 fails after the matmul on stream 1 read x:
     * nothing joins stream 1 back. */
    p->dbg.fail_launch_of = 3 + 1;
    cr_assert_eq(reel_plan_set_input(p, "x", x, 9), REEL_OK);
    cr_assert_eq(reel_step(p, &s), REEL_E_BACKEND);
    cr_assert(strstr(reel_ctx_last_error(ctx), "softmax") != NULL, "%s", reel_ctx_last_error(ctx));
    p->dbg.fail_launch_of = 0;
    /* The next upload overwrites x: ordered after that read only if the
     * failed step drained its streams. */
    cr_assert_eq(reel_step(p, &s), REEL_OK, "%s", reel_ctx_last_error(ctx));
    reel_plan_stats st = REEL_PLAN_STATS_INIT;
    reel_plan_stats_get(p, &st);
    cr_assert_eq(st.hazards, 0);
    cr_assert_eq(st.steps, 2);
    reel_plan_destroy(p);
}

static reel_plan *lse_plan(og_graph *og)
{
    reel_compile_opts o = REEL_COMPILE_OPTS_INIT;
    o.num_buckets = 1;
    o.buckets[0] = 4;
    cr_assert_eq(og_build(ctx, OG_LSE, REEL_F32, 5, og), REEL_OK);
    reel_plan *p;
    cr_assert_eq(reel_compile(og->g, &o, &p), REEL_OK, "%s", reel_ctx_last_error(ctx));
    return p;
}

Test(failed_calls, a_failed_output_buffer_growth_keeps_the_old_buffer_described, .init = setup, .fini = teardown)
{
    og_graph ga, gb;
    reel_plan *a = lse_plan(&ga), *b = lse_plan(&gb);
    og_step s;
    a->dbg.fail_out_rows = 5; /* pinned memory for more rows than the buckets' runs out */
    cr_assert_eq(og_make_step(a, OG_LSE, REEL_F32, 20, 1, 1, &s), REEL_OK);
    cr_assert_eq(reel_step(a, &s.info), REEL_E_OOM);
    cr_assert_eq(a->out_cap_rows, 4);
    for (int o = 0; o < a->noutputs; o++) {
        const reel_shape *sh = &a->tensors[a->outputs[o].tensor].shape;
        cr_assert_leq(a->out_off[o] + reel_shape_bytes(sh, a->out_cap_rows), a->out_bytes,
                      "output '%s' lies past the output buffer", a->outputs[o].name);
    }
    /* Replay still downloads into the buffer it has, with the right data. */
    for (int k = 0; k < 2; k++) {
        reel_plan *p = k ? b : a;
        cr_assert_eq(og_make_step(p, OG_LSE, REEL_F32, 4, 2, 1, &s), REEL_OK);
        cr_assert_eq(reel_step(p, &s.info), REEL_OK, "%s", reel_ctx_last_error(ctx));
    }
    const void *da, *db;
    cr_assert_eq(reel_plan_output(a, "lse", &da, NULL), REEL_OK);
    cr_assert_eq(reel_plan_output(b, "lse", &db, NULL), REEL_OK);
    cr_assert_eq(memcmp(da, db, 4 * OG_HEADS * sizeof(float)), 0);
    reel_plan_destroy(a);
    reel_plan_destroy(b);
    og_free(&ga);
    og_free(&gb);
}

Test(failed_calls, a_strict_bind_state_whose_recapture_fails_still_recaptures_the_other_buckets, .init = setup,
     .fini = teardown)
{
    og_graph og;
    reel_compile_opts o = REEL_COMPILE_OPTS_INIT;
    o.num_buckets = 2;
    memcpy(o.buckets, (int32_t[]){1, 8}, 2 * sizeof(int32_t));
    o.max_context = 64;
    o.strict = true;
    cr_assert_eq(og_build(ctx, OG_ATTENTION, REEL_F32, 11, &og), REEL_OK);
    reel_plan *p;
    cr_assert_eq(reel_compile(og.g, &o, &p), REEL_OK, "%s", reel_ctx_last_error(ctx));
    size_t bytes = (size_t)OG_BLOCKS * OG_BLOCK * OG_KV_HEADS * OG_HEAD_DIM * sizeof(float);
    float *kc = calloc(1, bytes);
    p->dbg.fail_capture_mask = 1u << 1; /* the 8-token bucket's re-capture fails */
    cr_assert_eq(reel_plan_bind_state(p, "k_cache", kc, bytes), REEL_E_BACKEND);
    /* The 1-token bucket replays against the bound cache, not the freed one. */
    og_step s;
    cr_assert_eq(og_make_step(p, OG_ATTENTION, REEL_F32, 1, 3, 20, &s), REEL_OK);
    cr_assert_eq(reel_step(p, &s.info), REEL_OK, "%s", reel_ctx_last_error(ctx));
    cr_assert_eq(reel_plan_last_fallback(p), REEL_FALLBACK_NONE);
    float sum = 0;
    for (int i = 0; i < OG_KV_HEADS * OG_HEAD_DIM; i++) {
        float v = kc[(size_t)s.slot[0] * OG_KV_HEADS * OG_HEAD_DIM + i];
        sum += v * v;
    }
    cr_assert_gt(sum, 0.f, "the replay wrote k somewhere else than the bound cache");
    /* The failed bucket never replays its old graph: strict refuses it. */
    cr_assert_eq(og_make_step(p, OG_ATTENTION, REEL_F32, 6, 4, 20, &s), REEL_OK);
    cr_assert_eq(reel_step(p, &s.info), REEL_E_FALLBACK);
    cr_assert(strstr(reel_ctx_last_error(ctx), "capture failed") != NULL, "%s", reel_ctx_last_error(ctx));
    reel_plan_destroy(p);
    free(kc);
    og_free(&og);
}
