/* Replay == eager, bitwise, for every op, dtype and bucket (padded buckets
 * included), and replay runs no executor dispatch. Parameterized over
 * backends (REEL_TEST_BACKEND): host here, CUDA in the gpu suite. */
#include <criterion/criterion.h>
#include <string.h>

#include "tests/runtime/opgraphs.h"
#include "tests/core/opts.h"

static reel_ctx *ctx;
static void setup(void)
{
    cr_assert_eq(reel_ctx_create(reel_test_ctx_opts(reel_test_backend()), &ctx), REEL_OK,
                 "backend '%s' is not available", reel_backend_name(reel_test_backend()));
}
static void teardown(void) { reel_ctx_destroy(ctx); }

static size_t out_bytes(reel_plan *p, const char *name, const void **d)
{
    int64_t rows = 0;
    cr_assert_eq(reel_plan_output(p, name, d, &rows), REEL_OK, "%s", reel_ctx_last_error(ctx));
    return (size_t)rows;
}

static void compare_outputs(reel_plan *a, reel_plan *b, int kind, reel_dtype dt, int32_t n)
{
    const char *outs[2] = {"y", kind == OG_LSE ? "lse" : kind == OG_ATTENTION_ROPE ? "kr" : NULL};
    for (int o = 0; o < 2 && outs[o]; o++) {
        const void *da, *db;
        size_t ra = out_bytes(a, outs[o], &da), rb = out_bytes(b, outs[o], &db);
        cr_assert_eq(ra, (size_t)n);
        cr_assert_eq(rb, (size_t)n);
        reel_dtype odt;
        int64_t re;
        cr_assert_eq(reel_plan_output_desc(a, outs[o], &odt, &re), REEL_OK);
        size_t row = (size_t)re * reel_dtype_size(odt);
        cr_assert(memcmp(da, db, row * (size_t)n) == 0, "%s %s n=%d output '%s': replay != eager", og_name(kind),
                  reel_dtype_name(dt), n, outs[o]);
    }
}

static void check_kind(int kind)
{
    reel_dtype dts[3] = {REEL_F32, REEL_F16, REEL_BF16};
    for (int d = 0; d < 3; d++) {
        og_graph ga, gb;
        cr_assert_eq(og_build(ctx, kind, dts[d], 42, &ga), REEL_OK, "%s", reel_ctx_last_error(ctx));
        cr_assert_eq(og_build(ctx, kind, dts[d], 42, &gb), REEL_OK);
        reel_compile_opts o = REEL_COMPILE_OPTS_INIT;
        o.num_buckets = 4;
        memcpy(o.buckets, (int32_t[]){1, 2, 4, 8}, 4 * sizeof(int32_t));
        reel_plan *pa, *pb;
        cr_assert_eq(reel_compile(ga.g, &o, &pa), REEL_OK, "%s: %s", og_name(kind), reel_ctx_last_error(ctx));
        o.no_capture = true;
        cr_assert_eq(reel_compile(gb.g, &o, &pb), REEL_OK, "%s", reel_ctx_last_error(ctx));
        reel_plan_stats s0 = REEL_PLAN_STATS_INIT;
        reel_plan_stats_get(pa, &s0);
        cr_assert_eq(s0.graphs_captured, 4, "%s: %llu graphs captured", og_name(kind),
                     (unsigned long long)s0.graphs_captured);
        for (int32_t n = 1; n <= 8; n++) {
            og_step sa, sb;
            cr_assert_eq(og_make_step(pa, kind, dts[d], n, 1000 + n, 20 + n, &sa), REEL_OK);
            cr_assert_eq(og_make_step(pb, kind, dts[d], n, 1000 + n, 20 + n, &sb), REEL_OK);
            cr_assert_eq(reel_step(pa, &sa.info), REEL_OK, "%s n=%d: %s", og_name(kind), n, reel_ctx_last_error(ctx));
            cr_assert_eq(reel_plan_last_fallback(pa), REEL_FALLBACK_NONE);
            cr_assert_eq(reel_step(pb, &sb.info), REEL_OK, "%s", reel_ctx_last_error(ctx));
            cr_assert_eq(reel_plan_last_fallback(pb), REEL_FALLBACK_NO_BUCKET);
            compare_outputs(pa, pb, kind, dts[d], n);
        }
        reel_plan_stats s1 = REEL_PLAN_STATS_INIT;
        reel_plan_stats_get(pa, &s1);
        cr_assert_eq(s1.replays, 8);
        cr_assert_eq(s1.op_dispatches, s0.op_dispatches, "replay went back through the executor");
        reel_plan_destroy(pa);
        reel_plan_destroy(pb);
        og_free(&ga);
        og_free(&gb);
    }
}

#define REPLAY_TEST(k, name) \
    Test(replay, name##_equals_eager_bitwise_in_every_bucket, .init = setup, .fini = teardown) { check_kind(k); }
REPLAY_TEST(OG_EMBEDDING, embedding)
REPLAY_TEST(OG_MATMUL, matmul)
REPLAY_TEST(OG_MATMUL_T, matmul_transposed)
REPLAY_TEST(OG_ADD, add)
REPLAY_TEST(OG_ADD_ROW, add_row_broadcast)
REPLAY_TEST(OG_MUL, mul)
REPLAY_TEST(OG_RMSNORM, rmsnorm)
REPLAY_TEST(OG_SILU, silu_and_mul)
REPLAY_TEST(OG_ROPE, rope)
REPLAY_TEST(OG_SOFTMAX, softmax)
REPLAY_TEST(OG_ARGMAX, argmax)
REPLAY_TEST(OG_ATTENTION, paged_attention)
REPLAY_TEST(OG_TOPK, topk)
REPLAY_TEST(OG_TOPK_PAGED, topk_with_page_transform)
REPLAY_TEST(OG_LSE, lse_combine)
REPLAY_TEST(OG_ATTENTION_ROPE, paged_attention_rope)
REPLAY_TEST(OG_SAMPLE, sample)
