/* Plans on the GPU (replay == eager for every op is tests/runtime/test_replay.c,
 * run on CUDA as gpu_replay): a context past the limit falls back eagerly
 * with the same result; a
 * kernel inside a graph refuses a context past its limit; programmatic
 * dependent launch changes no bit. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/runtime/opgraphs.h"
#include "runtime/plan.h"
#include "tests/core/opts.h"

static reel_ctx *ctx;

static void setup(void)
{
    cr_assert_eq(reel_ctx_create(reel_test_ctx_opts(REEL_BACKEND_CUDA), &ctx), REEL_OK);
}

static void teardown(void) { reel_ctx_destroy(ctx); }

static void same_output(reel_plan *a, reel_plan *b, const char *name, const char *what, int32_t n)
{
    const void *da, *db;
    int64_t ra, rb, re;
    reel_dtype dt;
    cr_assert_eq(reel_plan_output(a, name, &da, &ra), REEL_OK, "%s", reel_ctx_last_error(ctx));
    cr_assert_eq(reel_plan_output(b, name, &db, &rb), REEL_OK, "%s", reel_ctx_last_error(ctx));
    cr_assert_eq(ra, n);
    cr_assert_eq(rb, n);
    cr_assert_eq(reel_plan_output_desc(a, name, &dt, &re), REEL_OK);
    cr_assert(memcmp(da, db, (size_t)(ra * re) * reel_dtype_size(dt)) == 0, "%s n=%d output '%s': bits differ",
              what, n, name);
}

static reel_compile_opts opts_buckets(int nb, const int32_t *b)
{
    reel_compile_opts o = REEL_COMPILE_OPTS_INIT;
    o.num_buckets = nb;
    memcpy(o.buckets, b, (size_t)nb * sizeof *b);
    return o;
}

static reel_plan *compile_attention(og_graph *og, int32_t max_context, const reel_plan_debug *dbg)
{
    reel_compile_opts o = opts_buckets(2, (int32_t[]){4, 8});
    o.max_context = max_context;
    cr_assert_eq(og_build(ctx, OG_ATTENTION, REEL_F32, 7, og), REEL_OK, "%s", reel_ctx_last_error(ctx));
    reel_plan *p = NULL;
    reel_status st = dbg ? reel_compile_debug(og->g, &o, dbg, &p) : reel_compile(og->g, &o, &p);
    cr_assert_eq(st, REEL_OK, "%s", reel_ctx_last_error(ctx));
    return p;
}

static void attention_step(reel_plan *p, int32_t n, int32_t ctx_len, reel_fallback want)
{
    og_step s;
    cr_assert_eq(og_make_step(p, OG_ATTENTION, REEL_F32, n, 99 + n, ctx_len, &s), REEL_OK);
    cr_assert_eq(reel_step(p, &s.info), REEL_OK, "%s", reel_ctx_last_error(ctx));
    cr_assert_eq(reel_plan_last_fallback(p), want, "got '%s', want '%s'",
                 reel_fallback_str(reel_plan_last_fallback(p)), reel_fallback_str(want));
}

Test(gpu_plan, a_context_over_the_limit_runs_eagerly_and_matches_a_larger_plan, .init = setup, .fini = teardown)
{
    og_graph ga, gb;
    reel_plan *a = compile_attention(&ga, 32, NULL), *b = compile_attention(&gb, 64, NULL);
    attention_step(a, 6, 20, REEL_FALLBACK_NONE);
    attention_step(b, 6, 20, REEL_FALLBACK_NONE);
    same_output(a, b, "y", "attention within the limit", 6);
    attention_step(a, 6, 60, REEL_FALLBACK_CONTEXT_OVER_LIMIT);
    attention_step(b, 6, 60, REEL_FALLBACK_NONE);
    same_output(a, b, "y", "attention over the limit", 6);
    reel_plan_stats st = REEL_PLAN_STATS_INIT;
    reel_plan_stats_get(a, &st);
    cr_assert_eq(st.eager_by_reason[REEL_FALLBACK_CONTEXT_OVER_LIMIT], 1);
    reel_plan_destroy(a);
    reel_plan_destroy(b);
    og_free(&ga);
    og_free(&gb);
}

Test(gpu_plan, a_kernel_inside_a_graph_refuses_a_context_past_its_limit, .init = setup, .fini = teardown)
{
    og_graph ga;
    reel_plan_debug dbg = {.skip_dispatch_guard = true, .not_capturable_node = -1};
    reel_plan *a = compile_attention(&ga, 32, &dbg);
    og_step s;
    cr_assert_eq(og_make_step(a, OG_ATTENTION, REEL_F32, 6, 5, 60, &s), REEL_OK);
    cr_assert_eq(reel_step(a, &s.info), REEL_E_LIMIT, "%s", reel_ctx_last_error(ctx));
    cr_assert_eq(reel_plan_last_fallback(a), REEL_FALLBACK_NONE, "the step replayed past the dispatcher");
    attention_step(a, 6, 20, REEL_FALLBACK_NONE); /* the plan stays usable */
    reel_plan_destroy(a);
    og_free(&ga);
}

/* A chain of adds on one stream: with PDL every kernel but the first may
 * start early and waits on its producer; results must not change. */
static reel_plan *compile_chain(bool pdl, bool no_capture, int len, float *bias)
{
    reel_graph *g;
    cr_assert_eq(reel_graph_create(ctx, &g), REEL_OK);
    int64_t d[2] = {REEL_DIM_TOKENS, 256}, bd[1] = {256};
    reel_tensor x = reel_input(g, "x", REEL_F32, 2, d);
    for (int i = 0; i < len; i++) {
        char name[16];
        snprintf(name, sizeof name, "b%d", i);
        reel_tensor b = reel_param(g, name, REEL_F32, 1, bd);
        reel_param_bind(g, b, bias + i * 256);
        x = i % 2 ? reel_add(g, x, b) : reel_mul(g, x, b);
    }
    reel_output(g, "y", x);
    reel_compile_opts o = opts_buckets(2, (int32_t[]){4, 16});
    o.pdl = pdl;
    o.no_capture = no_capture;
    reel_plan *p;
    cr_assert_eq(reel_compile(g, &o, &p), REEL_OK, "%s", reel_ctx_last_error(ctx));
    reel_graph_destroy(g);
    return p;
}

Test(gpu_plan, programmatic_dependent_launch_leaves_every_bit_unchanged, .init = setup, .fini = teardown)
{
    const int len = 40;
    float *bias = malloc(sizeof(float) * 256 * len), *x = malloc(sizeof(float) * 256 * 16);
    uint64_t r = 5;
    for (int i = 0; i < 256 * len; i++)
        bias[i] = 0.5f + (float)(og_rand(&r) % 1000) / 1000.0f;
    for (int i = 0; i < 256 * 16; i++)
        x[i] = (float)(og_rand(&r) % 2000) / 1000.0f - 1.0f;
    reel_plan *plain = compile_chain(false, false, len, bias), *pdl = compile_chain(true, false, len, bias);
    reel_plan *eager = compile_chain(true, true, len, bias);
    for (int32_t n = 3; n <= 16; n += 13) {
        reel_plan *ps[3] = {plain, pdl, eager};
        for (int i = 0; i < 3; i++) {
            cr_assert_eq(reel_plan_set_input(ps[i], "x", x, n), REEL_OK, "%s", reel_ctx_last_error(ctx));
            reel_step_info s = { REEL_STEP_INFO_HEAD, .num_tokens = n};
            cr_assert_eq(reel_step(ps[i], &s), REEL_OK, "%s", reel_ctx_last_error(ctx));
        }
        same_output(plain, pdl, "y", "pdl graph", n);
        same_output(plain, eager, "y", "pdl eager", n);
    }
    reel_plan_destroy(plain);
    reel_plan_destroy(pdl);
    reel_plan_destroy(eager);
    free(bias);
    free(x);
}
