/* Bad input to compile and step: a status, a message naming the culprit,
 * nothing lost (the plan keeps working). */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "tests/runtime/opgraphs.h"
#include "tests/core/opts.h"

static reel_ctx *ctx;
static void setup(void) { cr_assert_eq(reel_ctx_create(reel_test_ctx_opts(REEL_BACKEND_HOST), &ctx), REEL_OK); }
static void teardown(void) { reel_ctx_destroy(ctx); }

#define HAS(s) cr_assert(strstr(reel_ctx_last_error(ctx), (s)) != NULL, "message '%s' lacks '%s'", reel_ctx_last_error(ctx), (s))

static reel_plan *attention_plan(og_graph *og)
{
    reel_compile_opts o = REEL_COMPILE_OPTS_INIT;
    o.num_buckets = 1;
    o.buckets[0] = 8;
    o.max_context = 64;
    cr_assert_eq(og_build(ctx, OG_ATTENTION, REEL_F32, 3, og), REEL_OK);
    reel_plan *p;
    cr_assert_eq(reel_compile(og->g, &o, &p), REEL_OK, "%s", reel_ctx_last_error(ctx));
    return p;
}

Test(step_errors, compile_options_follow_the_option_struct_rule, .init = setup, .fini = teardown)
{
    og_graph og;
    cr_assert_eq(og_build(ctx, OG_ADD, REEL_F32, 3, &og), REEL_OK);
    reel_plan *p = NULL;
    /* Another minor version with a struct of a known size: accepted. */
    reel_compile_opts o = REEL_COMPILE_OPTS_INIT;
    o.version = REEL_VERSION_NUMBER + 100;
    cr_assert_eq(reel_compile(og.g, &o, &p), REEL_OK, "%s", reel_ctx_last_error(ctx));
    reel_plan_stats st = REEL_PLAN_STATS_INIT;
    cr_assert_eq(reel_plan_stats_get(p, &st), REEL_OK);
    cr_assert_eq(st.num_buckets, 7); /* num_buckets undefined: the default buckets */
    reel_plan_destroy(p);
    p = NULL;
    /* A newer header's larger struct: refused, with both sizes named. */
    struct { reel_compile_opts o; int newer_option; } big = {REEL_COMPILE_OPTS_INIT, 1};
    big.o.size = sizeof big;
    cr_assert_eq(reel_compile(og.g, &big.o, &p), REEL_E_VERSION);
    cr_assert_null(p);
    HAS("knows");
    og_free(&og);
}

Test(step_errors, bad_compile_options_are_refused_with_the_value, .init = setup, .fini = teardown)
{
    og_graph og;
    cr_assert_eq(og_build(ctx, OG_ADD, REEL_F32, 3, &og), REEL_OK);
    reel_compile_opts o = REEL_COMPILE_OPTS_INIT;
    reel_plan *p = NULL;
    o.num_buckets = 2;
    o.buckets[0] = 8;
    o.buckets[1] = 4;
    cr_assert_eq(reel_compile(og.g, &o, &p), REEL_E_INVALID_ARG);
    HAS("ascending");
    o = (reel_compile_opts)REEL_COMPILE_OPTS_INIT;
    o.max_context = 0;
    cr_assert_eq(reel_compile(og.g, &o, &p), REEL_E_INVALID_ARG);
    HAS("max_context");
    o = (reel_compile_opts)REEL_COMPILE_OPTS_INIT;
    o.version = 99999; /* major 9 */
    cr_assert_eq(reel_compile(og.g, &o, &p), REEL_E_VERSION);
    cr_assert_null(p);
    cr_assert_eq(reel_compile(og.g, NULL, &p), REEL_OK);
    reel_plan_destroy(p);
    og_free(&og);
}

Test(step_errors, unset_missing_or_misshapen_inputs_are_named, .init = setup, .fini = teardown)
{
    og_graph og;
    cr_assert_eq(og_build(ctx, OG_ADD, REEL_F32, 3, &og), REEL_OK);
    reel_plan *p;
    cr_assert_eq(reel_compile(og.g, NULL, &p), REEL_OK);
    float x[64] = {0};
    reel_step_info s = { REEL_STEP_INFO_HEAD, .num_tokens = 4};
    cr_assert_eq(reel_step(p, &s), REEL_E_INVALID_USAGE);
    HAS("was not set");
    cr_assert_eq(reel_plan_set_input(p, "nope", x, 4), REEL_E_NOT_FOUND);
    HAS("'nope'");
    cr_assert_eq(reel_plan_set_input(p, "x", x, 4), REEL_OK);
    cr_assert_eq(reel_plan_set_input(p, "b", x, 3), REEL_OK);
    cr_assert_eq(reel_step(p, &s), REEL_E_INVALID_ARG);
    HAS("'b' has 3 rows");
    const void *d;
    cr_assert_eq(reel_plan_output(p, "y", &d, NULL), REEL_E_INVALID_USAGE);
    cr_assert_eq(reel_plan_output(p, "zz", &d, NULL), REEL_E_NOT_FOUND);
    s.num_tokens = 0;
    cr_assert_eq(reel_step(p, &s), REEL_E_INVALID_ARG);
    HAS("num_tokens");
    cr_assert_eq(reel_step(p, NULL), REEL_E_INVALID_ARG);
    /* Nothing lost: a good step still works. */
    s.num_tokens = 4;
    cr_assert_eq(reel_plan_set_input(p, "b", x, 4), REEL_OK);
    cr_assert_eq(reel_step(p, &s), REEL_OK, "%s", reel_ctx_last_error(ctx));
    reel_plan_destroy(p);
    og_free(&og);
}

Test(step_errors, bad_sequence_metadata_is_refused_before_any_kernel_runs, .init = setup, .fini = teardown)
{
    og_graph og;
    reel_plan *p = attention_plan(&og);
    reel_plan_stats before = REEL_PLAN_STATS_INIT, after = REEL_PLAN_STATS_INIT;
    reel_plan_stats_get(p, &before);
    size_t kv = (size_t)OG_BLOCKS * OG_BLOCK * OG_KV_HEADS * OG_HEAD_DIM * sizeof(float);
    float *cache = malloc(kv);
    og_step s;
    cr_assert_eq(og_make_step(p, OG_ATTENTION, REEL_F32, 6, 1, 20, &s), REEL_OK);
    s.bt[0] = OG_BLOCKS; /* past the cache */
    cr_assert_eq(reel_step(p, &s.info), REEL_E_INVALID_ARG);
    HAS("block table");
    cr_assert_eq(og_make_step(p, OG_ATTENTION, REEL_F32, 6, 1, 20, &s), REEL_OK);
    s.slot[2] = OG_BLOCKS * OG_BLOCK;
    cr_assert_eq(reel_step(p, &s.info), REEL_E_INVALID_ARG);
    HAS("slot");
    cr_assert_eq(og_make_step(p, OG_ATTENTION, REEL_F32, 6, 1, 20, &s), REEL_OK);
    s.pos[0] = 500;
    cr_assert_eq(reel_step(p, &s.info), REEL_E_INVALID_ARG);
    HAS("position 500");
    cr_assert_eq(og_make_step(p, OG_ATTENTION, REEL_F32, 6, 1, 20, &s), REEL_OK);
    s.qs[1] = 7;
    cr_assert_eq(reel_step(p, &s.info), REEL_E_INVALID_ARG);
    cr_assert_eq(og_make_step(p, OG_ATTENTION, REEL_F32, 6, 1, 20, &s), REEL_OK);
    s.info.block_tables = NULL;
    cr_assert_eq(reel_step(p, &s.info), REEL_E_INVALID_ARG);
    HAS("block_tables");
    cr_assert_eq(og_make_step(p, OG_ATTENTION, REEL_F32, 6, 1, 20, &s), REEL_OK);
    s.info.block_table_stride = 2;
    cr_assert_eq(reel_step(p, &s.info), REEL_E_INVALID_ARG);
    HAS("block_table_stride");
    /* Nothing ran: no step counted, no dispatch, the KV cache untouched. */
    reel_plan_stats_get(p, &after);
    cr_assert_eq(after.steps, before.steps);
    cr_assert_eq(after.op_dispatches, before.op_dispatches);
    cr_assert_eq(reel_plan_read_state(p, "k_cache", cache, kv), REEL_OK);
    for (size_t i = 0; i < kv / sizeof(float); i++)
        cr_assert_eq(cache[i], 0.f, "k_cache written by a refused step");
    free(cache);
    cr_assert_eq(og_make_step(p, OG_ATTENTION, REEL_F32, 6, 1, 20, &s), REEL_OK);
    cr_assert_eq(reel_step(p, &s.info), REEL_OK, "%s", reel_ctx_last_error(ctx));
    reel_plan_destroy(p);
    og_free(&og);
}

Test(step_errors, a_deferred_parameter_must_be_written_before_a_step, .init = setup, .fini = teardown)
{
    reel_graph *g;
    cr_assert_eq(reel_graph_create(ctx, &g), REEL_OK);
    reel_tensor x = reel_input(g, "x", REEL_F32, 2, (int64_t[]){REEL_DIM_TOKENS, 4});
    reel_tensor w = reel_param(g, "w", REEL_F32, 1, (int64_t[]){4});
    cr_assert_eq(reel_param_defer(g, w), REEL_OK);
    reel_output(g, "y", reel_mul(g, x, w));
    reel_plan *p;
    cr_assert_eq(reel_compile(g, NULL, &p), REEL_OK, "%s", reel_ctx_last_error(ctx));
    reel_graph_destroy(g);
    float xs[8] = {1, 2, 3, 4, 5, 6, 7, 8}, ws[4] = {2, 2, 2, 2};
    reel_step_info s = { REEL_STEP_INFO_HEAD, .num_tokens = 2};
    cr_assert_eq(reel_plan_set_input(p, "x", xs, 2), REEL_OK);
    cr_assert_eq(reel_step(p, &s), REEL_E_UNBOUND);
    HAS("'w'");
    cr_assert_eq(reel_plan_write_param(p, "w", ws, 12), REEL_E_INVALID_ARG);
    cr_assert_eq(reel_plan_write_param(p, "w", ws, sizeof ws), REEL_OK);
    cr_assert_eq(reel_step(p, &s), REEL_OK, "%s", reel_ctx_last_error(ctx));
    const void *d;
    int64_t rows;
    cr_assert_eq(reel_plan_output(p, "y", &d, &rows), REEL_OK);
    cr_assert_eq(rows, 2);
    for (int i = 0; i < 8; i++)
        cr_assert_eq(((const float *)d)[i], xs[i] * 2);
    reel_plan_destroy(p);
}

Test(step_errors, state_reads_and_writes_check_name_and_size, .init = setup, .fini = teardown)
{
    og_graph og;
    reel_plan *p = attention_plan(&og);
    size_t bytes = (size_t)OG_BLOCKS * OG_BLOCK * OG_KV_HEADS * OG_HEAD_DIM * 4;
    float *buf = calloc(1, bytes);
    cr_assert_eq(reel_plan_read_state(p, "k_cache", buf, bytes - 4), REEL_E_INVALID_ARG);
    cr_assert_eq(reel_plan_read_state(p, "nope", buf, bytes), REEL_E_NOT_FOUND);
    og_step s;
    cr_assert_eq(og_make_step(p, OG_ATTENTION, REEL_F32, 4, 1, 20, &s), REEL_OK);
    cr_assert_eq(reel_step(p, &s.info), REEL_OK, "%s", reel_ctx_last_error(ctx));
    cr_assert_eq(reel_plan_read_state(p, "k_cache", buf, bytes), REEL_OK);
    /* The written slot holds the token's k row (nonzero random data). */
    int32_t slot = s.slot[0];
    float sum = 0;
    for (int i = 0; i < OG_KV_HEADS * OG_HEAD_DIM; i++)
        sum += buf[(size_t)slot * OG_KV_HEADS * OG_HEAD_DIM + i] * buf[(size_t)slot * OG_KV_HEADS * OG_HEAD_DIM + i];
    cr_assert_gt(sum, 0.f);
    free(buf);
    reel_plan_destroy(p);
    og_free(&og);
}

Test(step_errors, options_not_made_with_the_initializer_are_refused, .init = setup, .fini = teardown)
{
    og_graph og;
    cr_assert_eq(og_build(ctx, OG_ADD, REEL_F32, 3, &og), REEL_OK);
    reel_compile_opts o = {.strict = true};
    reel_plan *p = NULL;
    cr_assert_eq(reel_compile(og.g, &o, &p), REEL_E_VERSION);
    HAS("REEL_COMPILE_OPTS_INIT");
    cr_assert_null(p);
    og_free(&og);
}

Test(step_errors, a_plan_without_attention_ignores_sequence_arrays, .init = setup, .fini = teardown)
{
    og_graph og;
    cr_assert_eq(og_build(ctx, OG_ADD, REEL_F32, 3, &og), REEL_OK);
    reel_plan *p;
    cr_assert_eq(reel_compile(og.g, NULL, &p), REEL_OK);
    float x[64] = {1};
    cr_assert_eq(reel_plan_set_input(p, "x", x, 4), REEL_OK);
    cr_assert_eq(reel_plan_set_input(p, "b", x, 4), REEL_OK);
    reel_step_info s = { REEL_STEP_INFO_HEAD, .num_tokens = 4, .num_seqs = 3}; /* arrays NULL */
    cr_assert_eq(reel_step(p, &s), REEL_OK, "%s", reel_ctx_last_error(ctx));
    cr_assert_eq(reel_plan_last_fallback(p), REEL_FALLBACK_NONE);
    reel_plan_destroy(p);
    og_free(&og);
}
