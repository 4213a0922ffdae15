/* A step that returns an error leaves every state tensor as it was: step
 * metadata is checked against the geometry of every paged-attention op
 * before anything runs, not against one cache standing for all. Runs on the
 * backend REEL_TEST_BACKEND names (tests/gpu registers the CUDA run). */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "tests/core/opts.h"

static reel_ctx *ctx;
static void setup(void)
{
    cr_assert_eq(reel_ctx_create(reel_test_ctx_opts(reel_test_backend()), &ctx), REEL_OK,
                 "backend '%s' is not available", reel_backend_name(reel_test_backend()));
}
static void teardown(void) { reel_ctx_destroy(ctx); }

#define HAS(s) cr_assert(strstr(reel_ctx_last_error(ctx), (s)) != NULL, "message '%s' lacks '%s'", reel_ctx_last_error(ctx), (s))

enum { D = 4 };
/* Cache "b" (10 blocks of 1 slot) is written first, cache "a" (4 blocks of
 * 8 slots) second: an entry valid for b and past a is what reached the
 * kernels before. */
static const char *const caches[4] = {"kb", "vb", "ka", "va"};
static const int64_t cache_blocks[4] = {10, 10, 4, 4}, cache_bs[4] = {1, 1, 8, 8};

static size_t cache_bytes(int c) { return (size_t)cache_blocks[c] * cache_bs[c] * D * sizeof(float); }

static reel_plan *two_cache_plan(void)
{
    reel_graph *g;
    cr_assert_eq(reel_graph_create(ctx, &g), REEL_OK);
    int64_t tok[] = {REEL_DIM_TOKENS, D};
    reel_tensor q = reel_input(g, "q", REEL_F32, 2, tok), k = reel_input(g, "k", REEL_F32, 2, tok);
    reel_tensor v = reel_input(g, "v", REEL_F32, 2, tok);
    reel_tensor st[4];
    for (int c = 0; c < 4; c++) {
        int64_t d[] = {cache_blocks[c], cache_bs[c], 1, D};
        st[c] = reel_state(g, caches[c], REEL_F32, 4, d);
    }
    reel_attn_params pb = { REEL_ATTN_PARAMS_HEAD, .num_heads = 1, .num_kv_heads = 1, .head_dim = D, .block_size = 1};
    reel_attn_params pa = { REEL_ATTN_PARAMS_HEAD, .num_heads = 1, .num_kv_heads = 1, .head_dim = D, .block_size = 8};
    reel_tensor ob = reel_paged_attention(g, q, k, v, st[0], st[1], &pb);
    reel_tensor oa = reel_paged_attention(g, q, k, v, st[2], st[3], &pa);
    reel_set_name(g, ob, "attn_b");
    reel_set_name(g, oa, "attn_a");
    cr_assert_eq(reel_output(g, "out", reel_add(g, ob, oa)), REEL_OK, "%s", reel_ctx_last_error(ctx));
    reel_compile_opts o = REEL_COMPILE_OPTS_INIT;
    o.num_buckets = 1;
    o.buckets[0] = 4;
    o.max_context = 8;
    o.max_seqs = 2;
    reel_plan *p;
    cr_assert_eq(reel_compile(g, &o, &p), REEL_OK, "%s", reel_ctx_last_error(ctx));
    reel_graph_destroy(g);
    float x[D] = {1, 2, 3, 4};
    cr_assert_eq(reel_plan_set_input(p, "q", x, 1), REEL_OK);
    cr_assert_eq(reel_plan_set_input(p, "k", x, 1), REEL_OK);
    cr_assert_eq(reel_plan_set_input(p, "v", x, 1), REEL_OK);
    return p;
}

/* Every cache filled with a pattern (so that a write of any value shows). */
static void fill_caches(reel_plan *p, float *saved[4])
{
    for (int c = 0; c < 4; c++) {
        size_t n = cache_bytes(c) / sizeof(float);
        saved[c] = malloc(cache_bytes(c));
        for (size_t i = 0; i < n; i++)
            saved[c][i] = 100.0f * (float)c + (float)i + 0.5f;
        cr_assert_eq(reel_plan_write_state(p, caches[c], saved[c], cache_bytes(c)), REEL_OK);
    }
}

static void caches_unchanged(reel_plan *p, float *saved[4])
{
    for (int c = 0; c < 4; c++) {
        float *now = malloc(cache_bytes(c));
        cr_assert_eq(reel_plan_read_state(p, caches[c], now, cache_bytes(c)), REEL_OK);
        cr_assert(memcmp(now, saved[c], cache_bytes(c)) == 0, "state '%s' changed by a refused step", caches[c]);
        free(now);
        free(saved[c]);
    }
}

Test(refused_step, a_block_entry_valid_for_one_cache_and_past_another_is_refused_before_any_write,
     .init = setup, .fini = teardown)
{
    reel_plan *p = two_cache_plan();
    float *saved[4];
    fill_caches(p, saved);
    /* Context 3, one new token at position 2 into slot 2 (inside both
     * caches). Entry 0 is block 5: cache b has 10 blocks, cache a only 4. */
    int32_t qs[2] = {0, 1}, pos[1] = {2}, slot[1] = {2}, lens[1] = {3}, bt[8] = {5, 1, 2, 0, 0, 0, 0, 0};
    reel_step_info s = { REEL_STEP_INFO_HEAD, .num_tokens = 1, .num_seqs = 1, .query_start = qs, .positions = pos, .slot_mapping = slot,
                        .context_lens = lens, .block_tables = bt, .block_table_stride = 8};
    cr_assert_eq(reel_step(p, &s), REEL_E_INVALID_ARG, "%s", reel_ctx_last_error(ctx));
    HAS("block table");
    HAS("attn_a");
    caches_unchanged(p, saved);
    /* The plan is still usable: a step valid for both caches runs. */
    bt[0] = 3;
    cr_assert_eq(reel_step(p, &s), REEL_OK, "%s", reel_ctx_last_error(ctx));
    reel_plan_destroy(p);
}

Test(refused_step, a_slot_inside_one_cache_and_past_another_is_refused_before_any_write, .init = setup,
     .fini = teardown)
{
    reel_plan *p = two_cache_plan();
    float *saved[4];
    fill_caches(p, saved);
    /* Slot 20: cache a has 32 slots, cache b 10. */
    int32_t qs[2] = {0, 1}, pos[1] = {2}, slot[1] = {20}, lens[1] = {3}, bt[8] = {3, 1, 2, 0, 0, 0, 0, 0};
    reel_step_info s = { REEL_STEP_INFO_HEAD, .num_tokens = 1, .num_seqs = 1, .query_start = qs, .positions = pos, .slot_mapping = slot,
                        .context_lens = lens, .block_tables = bt, .block_table_stride = 8};
    cr_assert_eq(reel_step(p, &s), REEL_E_INVALID_ARG, "%s", reel_ctx_last_error(ctx));
    HAS("slot");
    HAS("attn_b");
    caches_unchanged(p, saved);
    reel_plan_destroy(p);
}
