/* Eager fallback: every reason is counted, results match replay, strict mode
 * refuses, and both guards hold (dispatcher and kernel). */
#include <criterion/criterion.h>
#include <string.h>

#include "tests/runtime/opgraphs.h"
#include "runtime/plan.h"
#include "tests/core/opts.h"

static reel_ctx *ctx;
static void setup(void) { cr_assert_eq(reel_ctx_create(reel_test_ctx_opts(REEL_BACKEND_HOST), &ctx), REEL_OK); }
static void teardown(void) { reel_ctx_destroy(ctx); }

static reel_compile_opts opts_buckets(int nb, const int32_t *b)
{
    reel_compile_opts o = REEL_COMPILE_OPTS_INIT;
    o.num_buckets = nb;
    memcpy(o.buckets, b, (size_t)nb * sizeof *b);
    o.max_context = 32;
    return o;
}

static reel_plan *compile_kind(og_graph *og, int kind, const reel_compile_opts *o, const reel_plan_debug *dbg)
{
    cr_assert_eq(og_build(ctx, kind, REEL_F32, 7, og), REEL_OK, "%s", reel_ctx_last_error(ctx));
    reel_plan *p = NULL;
    reel_status st = dbg ? reel_compile_debug(og->g, o, dbg, &p) : reel_compile(og->g, o, &p);
    cr_assert_eq(st, REEL_OK, "%s", reel_ctx_last_error(ctx));
    return p;
}

static void step_ok(reel_plan *p, int kind, int32_t n, int32_t ctx_len, reel_fallback want)
{
    og_step s;
    cr_assert_eq(og_make_step(p, kind, REEL_F32, n, 99 + n, ctx_len, &s), REEL_OK);
    cr_assert_eq(reel_step(p, &s.info), REEL_OK, "%s", reel_ctx_last_error(ctx));
    cr_assert_eq(reel_plan_last_fallback(p), want, "n=%d: got '%s', want '%s'", n,
                 reel_fallback_str(reel_plan_last_fallback(p)), reel_fallback_str(want));
}

static void same_output(reel_plan *a, reel_plan *b, const char *name)
{
    const void *da, *db;
    int64_t ra, rb, re;
    reel_dtype dt;
    cr_assert_eq(reel_plan_output(a, name, &da, &ra), REEL_OK);
    cr_assert_eq(reel_plan_output(b, name, &db, &rb), REEL_OK);
    cr_assert_eq(ra, rb);
    reel_plan_output_desc(a, name, &dt, &re);
    cr_assert(memcmp(da, db, (size_t)(ra * re) * reel_dtype_size(dt)) == 0, "eager result differs");
}

Test(fallback, tokens_over_the_largest_bucket_run_eagerly_with_the_same_result, .init = setup, .fini = teardown)
{
    og_graph ga, gb;
    reel_compile_opts small = opts_buckets(2, (int32_t[]){2, 4}), big = opts_buckets(1, (int32_t[]){16});
    reel_plan *a = compile_kind(&ga, OG_MATMUL, &small, NULL), *b = compile_kind(&gb, OG_MATMUL, &big, NULL);
    step_ok(a, OG_MATMUL, 11, 1, REEL_FALLBACK_TOKENS_OVER_LIMIT);
    step_ok(b, OG_MATMUL, 11, 1, REEL_FALLBACK_NONE);
    same_output(a, b, "y");
    step_ok(a, OG_MATMUL, 3, 1, REEL_FALLBACK_NONE); /* back to replay after an overflow step */
    reel_plan_stats st = REEL_PLAN_STATS_INIT;
    reel_plan_stats_get(a, &st);
    cr_assert_eq(st.eager_by_reason[REEL_FALLBACK_TOKENS_OVER_LIMIT], 1);
    cr_assert_eq(st.replays, 1);
    cr_assert_eq(st.steps, 2);
    reel_plan_destroy(a);
    reel_plan_destroy(b);
    og_free(&ga);
    og_free(&gb);
}

Test(fallback, context_over_limit_runs_eagerly_and_matches_a_larger_plan, .init = setup, .fini = teardown)
{
    og_graph ga, gb;
    reel_compile_opts o = opts_buckets(2, (int32_t[]){4, 8}), big = o;
    big.max_context = 64;
    reel_plan *a = compile_kind(&ga, OG_ATTENTION, &o, NULL), *b = compile_kind(&gb, OG_ATTENTION, &big, NULL);
    step_ok(a, OG_ATTENTION, 6, 20, REEL_FALLBACK_NONE);
    step_ok(b, OG_ATTENTION, 6, 20, REEL_FALLBACK_NONE);
    same_output(a, b, "y");
    step_ok(a, OG_ATTENTION, 6, 60, REEL_FALLBACK_CONTEXT_OVER_LIMIT);
    step_ok(b, OG_ATTENTION, 6, 60, REEL_FALLBACK_NONE);
    same_output(a, b, "y");
    reel_plan_stats st = REEL_PLAN_STATS_INIT;
    reel_plan_stats_get(a, &st);
    cr_assert_eq(st.eager_by_reason[REEL_FALLBACK_CONTEXT_OVER_LIMIT], 1);
    reel_plan_destroy(a);
    reel_plan_destroy(b);
    og_free(&ga);
    og_free(&gb);
}

Test(fallback, sequences_over_limit_run_eagerly, .init = setup, .fini = teardown)
{
    og_graph ga;
    reel_compile_opts o = opts_buckets(1, (int32_t[]){8});
    o.max_seqs = 2;
    reel_plan *a = compile_kind(&ga, OG_ATTENTION, &o, NULL);
    step_ok(a, OG_ATTENTION, 8, 20, REEL_FALLBACK_SEQS_OVER_LIMIT); /* 5 sequences */
    step_ok(a, OG_ATTENTION, 2, 20, REEL_FALLBACK_NONE);
    reel_plan_destroy(a);
    og_free(&ga);
}

Test(fallback, a_plan_without_graphs_counts_no_bucket, .init = setup, .fini = teardown)
{
    og_graph ga;
    reel_compile_opts o = opts_buckets(1, (int32_t[]){4});
    o.no_capture = true;
    reel_plan *a = compile_kind(&ga, OG_ADD, &o, NULL);
    step_ok(a, OG_ADD, 3, 1, REEL_FALLBACK_NO_BUCKET);
    step_ok(a, OG_ADD, 9, 1, REEL_FALLBACK_TOKENS_OVER_LIMIT);
    reel_plan_stats st = REEL_PLAN_STATS_INIT;
    reel_plan_stats_get(a, &st);
    cr_assert_eq(st.graphs_captured, 0);
    cr_assert_eq(st.eager_by_reason[REEL_FALLBACK_NO_BUCKET], 1);
    reel_plan_destroy(a);
    og_free(&ga);
}

Test(fallback, an_op_that_cannot_be_captured_makes_every_step_eager, .init = setup, .fini = teardown)
{
    og_graph ga;
    reel_compile_opts o = opts_buckets(2, (int32_t[]){2, 4});
    reel_plan_debug dbg = {.not_capturable_node = 0};
    reel_plan *a = compile_kind(&ga, OG_SOFTMAX, &o, &dbg);
    step_ok(a, OG_SOFTMAX, 2, 1, REEL_FALLBACK_OP_NOT_CAPTURABLE);
    reel_plan_destroy(a);
    og_free(&ga);
    o.strict = true;
    og_graph gb;
    cr_assert_eq(og_build(ctx, OG_SOFTMAX, REEL_F32, 7, &gb), REEL_OK);
    reel_plan *b = NULL;
    cr_assert_eq(reel_compile_debug(gb.g, &o, &dbg, &b), REEL_E_UNSUPPORTED);
    cr_assert_null(b);
    cr_assert(strstr(reel_ctx_last_error(ctx), "softmax") != NULL, "%s", reel_ctx_last_error(ctx));
    og_free(&gb);
}

Test(fallback, a_failed_capture_falls_back_for_that_bucket_only, .init = setup, .fini = teardown)
{
    og_graph ga;
    reel_compile_opts o = opts_buckets(3, (int32_t[]){1, 2, 4});
    reel_plan_debug dbg = {.fail_capture_mask = 1u << 1, .not_capturable_node = -1};
    reel_plan *a = compile_kind(&ga, OG_RMSNORM, &o, &dbg);
    step_ok(a, OG_RMSNORM, 1, 1, REEL_FALLBACK_NONE);
    step_ok(a, OG_RMSNORM, 2, 1, REEL_FALLBACK_CAPTURE_FAILED);
    step_ok(a, OG_RMSNORM, 3, 1, REEL_FALLBACK_NONE);
    reel_plan_stats st = REEL_PLAN_STATS_INIT;
    reel_plan_stats_get(a, &st);
    cr_assert_eq(st.graphs_captured, 2);
    reel_plan_destroy(a);
    og_free(&ga);
    /* Strict: the failed capture is a compile error with the message. */
    o.strict = true;
    og_graph gb;
    cr_assert_eq(og_build(ctx, OG_RMSNORM, REEL_F32, 7, &gb), REEL_OK);
    reel_plan *b = NULL;
    cr_assert_eq(reel_compile_debug(gb.g, &o, &dbg, &b), REEL_E_BACKEND);
    cr_assert(strstr(reel_ctx_last_error(ctx), "capture") != NULL, "%s", reel_ctx_last_error(ctx));
    og_free(&gb);
}

Test(fallback, strict_mode_refuses_a_step_past_a_limit_and_names_it, .init = setup, .fini = teardown)
{
    og_graph ga;
    reel_compile_opts o = opts_buckets(2, (int32_t[]){4, 8});
    o.strict = true;
    reel_plan *a = compile_kind(&ga, OG_ATTENTION, &o, NULL);
    og_step s;
    cr_assert_eq(og_make_step(a, OG_ATTENTION, REEL_F32, 6, 5, 60, &s), REEL_OK);
    cr_assert_eq(reel_step(a, &s.info), REEL_E_FALLBACK);
    cr_assert(strstr(reel_ctx_last_error(ctx), "context over limit") != NULL, "%s", reel_ctx_last_error(ctx));
    cr_assert(strstr(reel_ctx_last_error(ctx), "context 32") != NULL, "%s", reel_ctx_last_error(ctx));
    cr_assert_eq(og_make_step(a, OG_ATTENTION, REEL_F32, 12, 5, 20, &s), REEL_OK);
    cr_assert_eq(reel_step(a, &s.info), REEL_E_FALLBACK);
    cr_assert(strstr(reel_ctx_last_error(ctx), "tokens over limit") != NULL, "%s", reel_ctx_last_error(ctx));
    cr_assert_eq(og_make_step(a, OG_ATTENTION, REEL_F32, 6, 5, 20, &s), REEL_OK);
    cr_assert_eq(reel_step(a, &s.info), REEL_OK, "%s", reel_ctx_last_error(ctx));
    reel_plan_destroy(a);
    og_free(&ga);
}

Test(fallback, a_kernel_inside_a_graph_refuses_a_context_past_its_limit, .init = setup, .fini = teardown)
{
    og_graph ga;
    reel_compile_opts o = opts_buckets(1, (int32_t[]){8});
    reel_plan_debug dbg = {.skip_dispatch_guard = true, .not_capturable_node = -1};
    reel_plan *a = compile_kind(&ga, OG_ATTENTION, &o, &dbg);
    og_step s;
    cr_assert_eq(og_make_step(a, OG_ATTENTION, REEL_F32, 6, 5, 60, &s), REEL_OK);
    cr_assert_eq(reel_step(a, &s.info), REEL_E_LIMIT);
    cr_assert_eq(reel_plan_last_fallback(a), REEL_FALLBACK_NONE, "the step replayed past the dispatcher");
    cr_assert(strstr(reel_ctx_last_error(ctx), "paged_attention") != NULL, "%s", reel_ctx_last_error(ctx));
    /* The plan stays usable. */
    cr_assert_eq(og_make_step(a, OG_ATTENTION, REEL_F32, 6, 5, 20, &s), REEL_OK);
    cr_assert_eq(reel_step(a, &s.info), REEL_OK, "%s", reel_ctx_last_error(ctx));
    reel_plan_destroy(a);
    og_free(&ga);
}

Test(fallback, eager_steps_dispatch_every_node_and_replays_none, .init = setup, .fini = teardown)
{
    og_graph ga;
    reel_compile_opts o = opts_buckets(1, (int32_t[]){4});
    reel_plan *a = compile_kind(&ga, OG_ADD, &o, NULL);
    reel_plan_stats s0 = REEL_PLAN_STATS_INIT, s1 = REEL_PLAN_STATS_INIT, s2 = REEL_PLAN_STATS_INIT;
    reel_plan_stats_get(a, &s0);
    step_ok(a, OG_ADD, 4, 1, REEL_FALLBACK_NONE);
    reel_plan_stats_get(a, &s1);
    step_ok(a, OG_ADD, 5, 1, REEL_FALLBACK_TOKENS_OVER_LIMIT);
    reel_plan_stats_get(a, &s2);
    cr_assert_eq(s1.op_dispatches, s0.op_dispatches);
    cr_assert_eq(s2.op_dispatches, s1.op_dispatches + (uint64_t)s2.num_nodes);
    reel_plan_destroy(a);
    og_free(&ga);
}

Test(fallback, overflow_steps_take_their_arena_from_the_workspace_and_trim_returns_it, .init = setup, .fini = teardown)
{
    og_graph ga;
    reel_compile_opts o = opts_buckets(1, (int32_t[]){2});
    reel_plan *a = compile_kind(&ga, OG_MATMUL, &o, NULL);
    reel_plan_stats st = REEL_PLAN_STATS_INIT;
    reel_plan_stats_get(a, &st);
    cr_assert_eq(st.workspace_bytes, 0);
    step_ok(a, OG_MATMUL, 9, 1, REEL_FALLBACK_TOKENS_OVER_LIMIT);
    reel_plan_stats_get(a, &st);
    cr_assert_gt(st.workspace_bytes, 0);
    cr_assert_geq(st.workspace_peak, (size_t)9 * 24 * 4);
    step_ok(a, OG_MATMUL, 30, 1, REEL_FALLBACK_TOKENS_OVER_LIMIT); /* grows: the old block is freed */
    cr_assert_eq(reel_plan_trim(a), REEL_OK);
    reel_plan_stats_get(a, &st);
    cr_assert_eq(st.workspace_bytes, 0);
    step_ok(a, OG_MATMUL, 7, 1, REEL_FALLBACK_TOKENS_OVER_LIMIT); /* allocates again */
    step_ok(a, OG_MATMUL, 2, 1, REEL_FALLBACK_NONE);
    reel_plan_destroy(a);
    og_free(&ga);
}
