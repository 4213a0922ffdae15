/* A KV cache bound to caller memory and shared by two plans: a step on one
 * plan sees what the other wrote, exactly as one plan would; the captured
 * graphs are re-captured and swapped (counted in stats). */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "tests/runtime/opgraphs.h"
#include "tests/core/opts.h"

static reel_ctx *ctx;
static void setup(void) { cr_assert_eq(reel_ctx_create(reel_test_ctx_opts(REEL_BACKEND_HOST), &ctx), REEL_OK); }
static void teardown(void) { reel_ctx_destroy(ctx); }

static reel_plan *plan(og_graph *og, int nb, const int32_t *buckets)
{
    reel_compile_opts o = REEL_COMPILE_OPTS_INIT;
    o.num_buckets = nb;
    memcpy(o.buckets, buckets, (size_t)nb * sizeof *buckets);
    o.max_context = 64;
    cr_assert_eq(og_build(ctx, OG_ATTENTION, REEL_F32, 11, og), REEL_OK);
    reel_plan *p;
    cr_assert_eq(reel_compile(og->g, &o, &p), REEL_OK, "%s", reel_ctx_last_error(ctx));
    return p;
}

static const void *step(reel_plan *p, int32_t n, uint64_t seed, int32_t ctx_len)
{
    og_step s;
    const void *y;
    cr_assert_eq(og_make_step(p, OG_ATTENTION, REEL_F32, n, seed, ctx_len, &s), REEL_OK);
    cr_assert_eq(reel_step(p, &s.info), REEL_OK, "%s", reel_ctx_last_error(ctx));
    cr_assert_eq(reel_plan_output(p, "y", &y, NULL), REEL_OK);
    return y;
}

Test(bind_state, two_plans_sharing_a_kv_cache_match_one_plan, .init = setup, .fini = teardown)
{
    og_graph ga, gb, gc;
    reel_plan *a = plan(&ga, 1, (int32_t[]){8}), *b = plan(&gb, 2, (int32_t[]){1, 2}),
              *c = plan(&gc, 3, (int32_t[]){1, 2, 8});
    size_t bytes = (size_t)OG_BLOCKS * OG_BLOCK * OG_KV_HEADS * OG_HEAD_DIM * sizeof(float);
    float *kc = calloc(1, bytes), *vc = calloc(1, bytes);
    cr_assert_eq(reel_plan_bind_state(a, "k_cache", kc, bytes - 4), REEL_E_INVALID_ARG);
    cr_assert_eq(reel_plan_bind_state(a, "nope", kc, bytes), REEL_E_NOT_FOUND);
    cr_assert_eq(reel_plan_bind_state(a, "k_cache", kc, bytes), REEL_OK, "%s", reel_ctx_last_error(ctx));
    cr_assert_eq(reel_plan_bind_state(a, "v_cache", vc, bytes), REEL_OK);
    cr_assert_eq(reel_plan_bind_state(b, "k_cache", kc, bytes), REEL_OK);
    cr_assert_eq(reel_plan_bind_state(b, "v_cache", vc, bytes), REEL_OK);
    step(a, 6, 1, 20);               /* prefill chunk and decodes through plan a */
    step(c, 6, 1, 20);
    const void *yb = step(b, 1, 2, 21); /* one decode through plan b reads a's writes */
    const void *yc = step(c, 1, 2, 21);
    cr_assert_eq(memcmp(yb, yc, OG_HEADS * OG_HEAD_DIM * sizeof(float)), 0, "plan b did not see plan a's cache");
    reel_plan_stats st = REEL_PLAN_STATS_INIT;
    reel_plan_stats_get(b, &st);
    cr_assert_eq(st.graph_updates + st.graph_reinstantiations, 4, "2 binds x 2 buckets re-captured");
    cr_assert_eq(reel_plan_last_fallback(b), REEL_FALLBACK_NONE);
    reel_plan_destroy(a);
    reel_plan_destroy(b);
    reel_plan_destroy(c);
    free(kc);
    free(vc);
    og_free(&ga);
    og_free(&gb);
    og_free(&gc);
}
