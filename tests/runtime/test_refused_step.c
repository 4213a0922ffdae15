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

/* Paged attention (cache "ka"/"va": 4 blocks of 8) first, then a top-k
 * with a page table: a page table the top-k would refuse inside the graph
 * came after the attention stored its token (issue 49's finding). */
enum { TK_N = 64, TK_K = 4, TK_PS = 8, TK_P = TK_N / TK_PS };
static const char *const kv_names[2] = {"ka", "va"};
static const size_t kv_bytes = 4 * 8 * D * sizeof(float);

static reel_plan *attention_topk_plan(bool strict, bool computed_pages)
{
    reel_graph *g;
    cr_assert_eq(reel_graph_create(ctx, &g), REEL_OK);
    int64_t tok[] = {REEL_DIM_TOKENS, D}, sc[] = {REEL_DIM_TOKENS, TK_N}, ln[] = {REEL_DIM_TOKENS};
    int64_t pg[] = {REEL_DIM_TOKENS, TK_P}, cd[] = {4, 8, 1, D};
    reel_tensor q = reel_input(g, "q", REEL_F32, 2, tok), k = reel_input(g, "k", REEL_F32, 2, tok);
    reel_tensor v = reel_input(g, "v", REEL_F32, 2, tok);
    reel_tensor kc = reel_state(g, "ka", REEL_F32, 4, cd), vc = reel_state(g, "va", REEL_F32, 4, cd);
    reel_attn_params pa = { REEL_ATTN_PARAMS_HEAD, .num_heads = 1, .num_kv_heads = 1, .head_dim = D, .block_size = 8};
    reel_tensor attn = reel_paged_attention(g, q, k, v, kc, vc, &pa);
    reel_tensor pages = reel_input(g, "pages", REEL_I32, 2, pg);
    if (computed_pages) { /* a page table the graph computes (here a top-k's): the host cannot check it */
        int64_t ps[] = {REEL_DIM_TOKENS, 2 * TK_P};
        reel_tensor pscores = reel_input(g, "page_scores", REEL_F32, 2, ps);
        pages = reel_topk(g, pscores, reel_input(g, "page_lengths", REEL_I32, 1, ln), (reel_tensor){0}, TK_P, 0);
    }
    reel_tensor idx = reel_topk(g, reel_input(g, "scores", REEL_F32, 2, sc), reel_input(g, "lengths", REEL_I32, 1, ln),
                                pages, TK_K, TK_PS);
    reel_set_name(g, idx, "picked");
    cr_assert_eq(reel_output(g, "attn", attn), REEL_OK, "%s", reel_ctx_last_error(ctx));
    cr_assert_eq(reel_output(g, "idx", idx), REEL_OK, "%s", reel_ctx_last_error(ctx));
    reel_compile_opts o = REEL_COMPILE_OPTS_INIT;
    o.num_buckets = 1;
    o.buckets[0] = 4;
    o.max_context = 16;
    o.max_seqs = 2;
    o.strict = strict;
    reel_plan *p = NULL;
    reel_status st = reel_compile(g, &o, &p);
    reel_graph_destroy(g);
    if (computed_pages) {
        cr_assert_eq(st, REEL_E_UNSUPPORTED, "%s", reel_ctx_last_error(ctx));
        return NULL;
    }
    cr_assert_eq(st, REEL_OK, "%s", reel_ctx_last_error(ctx));
    return p;
}

/* One token's inputs: scores 0..63 (the best are the last columns), the
 * row's length, its page table. */
static void topk_inputs(reel_plan *p, int32_t length, const int32_t pages[TK_P])
{
    float x[D] = {1, 2, 3, 4}, scores[TK_N];
    for (int i = 0; i < TK_N; i++)
        scores[i] = (float)i;
    cr_assert_eq(reel_plan_set_input(p, "q", x, 1), REEL_OK);
    cr_assert_eq(reel_plan_set_input(p, "k", x, 1), REEL_OK);
    cr_assert_eq(reel_plan_set_input(p, "v", x, 1), REEL_OK);
    cr_assert_eq(reel_plan_set_input(p, "scores", scores, 1), REEL_OK);
    cr_assert_eq(reel_plan_set_input(p, "lengths", &length, 1), REEL_OK);
    cr_assert_eq(reel_plan_set_input(p, "pages", pages, 1), REEL_OK);
}

static void fill_kv(reel_plan *p, float *saved[2])
{
    for (int c = 0; c < 2; c++) {
        saved[c] = malloc(kv_bytes);
        for (size_t i = 0; i < kv_bytes / sizeof(float); i++)
            saved[c][i] = 10.0f * (float)c + (float)i + 0.25f;
        cr_assert_eq(reel_plan_write_state(p, kv_names[c], saved[c], kv_bytes), REEL_OK);
    }
}

static void kv_unchanged(reel_plan *p, float *saved[2], const char *what)
{
    for (int c = 0; c < 2; c++) {
        float *now = malloc(kv_bytes);
        cr_assert_eq(reel_plan_read_state(p, kv_names[c], now, kv_bytes), REEL_OK);
        cr_assert(memcmp(now, saved[c], kv_bytes) == 0, "%s: state '%s' changed by a refused step", what,
                  kv_names[c]);
        free(now);
    }
}

/* Sequence 0: context 3, one new token at position 2 into slot 2 (block 0);
 * the arrays hold a second and third sequence of no new token, for a step
 * past max_seqs. */
#define ONE_TOKEN_STEP(name, lens_v)                                                                             \
    int32_t qs[4] = {0, 1, 1, 1}, pos[1] = {2}, slot[1] = {2}, lens[3] = {lens_v, 1, 1};                          \
    int32_t bt[6] = {0, 1, 2, 3, 0, 0};                                                                          \
    reel_step_info name = { REEL_STEP_INFO_HEAD, .num_tokens = 1, .num_seqs = 1, .query_start = qs,               \
                            .positions = pos, .slot_mapping = slot, .context_lens = lens, .block_tables = bt,     \
                            .block_table_stride = 2}

Test(refused_step, a_topk_page_past_int32_after_a_kv_write_is_refused_before_launch, .init = setup,
     .fini = teardown)
{
    reel_plan *p = attention_topk_plan(false, false);
    float *saved[2];
    fill_kv(p, saved);
    ONE_TOKEN_STEP(s, 3);
    /* Page 7 (columns 56..63, the best scores) maps past INT32_MAX. */
    int32_t pages[TK_P] = {0, 1, 2, 3, 4, 5, 6, INT32_MAX / TK_PS + 1};
    topk_inputs(p, TK_N, pages);
    cr_assert_eq(reel_step(p, &s), REEL_E_LIMIT, "%s", reel_ctx_last_error(ctx));
    HAS("picked");
    HAS("INT32_MAX");
    HAS("before launch");
    kv_unchanged(p, saved, "top-k page past INT32_MAX");
    /* The same table with the row's length short of page 7: no candidate
     * reads the bad entry, and the step runs (the check is exact, not a
     * refusal of every odd table). */
    topk_inputs(p, 56, pages);
    cr_assert_eq(reel_step(p, &s), REEL_OK, "%s", reel_ctx_last_error(ctx));
    const int32_t *idx;
    int64_t rows;
    cr_assert_eq(reel_plan_output(p, "idx", (const void **)&idx, &rows), REEL_OK);
    int32_t want[TK_K] = {55, 54, 53, 52}; /* page 6 maps to itself */
    for (int i = 0; i < TK_K; i++) {
        bool found = false;
        for (int j = 0; j < TK_K; j++)
            found |= idx[j] == want[i];
        cr_assert(found, "index %d missing from the top-k", want[i]);
    }
    /* Page 7 mapped so that its last column lands on INT32_MAX itself:
     * accepted. */
    pages[7] = INT32_MAX / TK_PS;
    topk_inputs(p, TK_N, pages);
    cr_assert_eq(reel_step(p, &s), REEL_OK, "%s", reel_ctx_last_error(ctx));
    free(saved[0]);
    free(saved[1]);
    reel_plan_destroy(p);
}

Test(refused_step, a_topk_page_table_the_graph_computes_is_refused_at_compile, .init = setup, .fini = teardown)
{
    cr_assert_null(attention_topk_plan(false, true));
    HAS("page table");
    HAS("not a graph input");
}

Test(refused_step, every_metadata_refusal_leaves_the_caches_bit_for_bit, .init = setup, .fini = teardown)
{
    reel_plan *p = attention_topk_plan(true, false);
    float *saved[2];
    fill_kv(p, saved);
    int32_t pages[TK_P] = {0, 1, 2, 3, 4, 5, 6, 7};
    static const char *const what[] = {"position outside the context", "slot outside the cache",
                                       "block entry outside the cache", "context past max_context (strict)",
                                       "sequences past max_seqs (strict)", "query_start past num_tokens"};
    static const reel_status want[] = {REEL_E_INVALID_ARG, REEL_E_INVALID_ARG, REEL_E_INVALID_ARG,
                                       REEL_E_FALLBACK, REEL_E_FALLBACK, REEL_E_INVALID_ARG};
    for (int c = 0; c < 6; c++) {
        ONE_TOKEN_STEP(s, 3);
        switch (c) {
        case 0: pos[0] = 3; break;
        case 1: slot[0] = 32; break;
        case 2: bt[0] = 4; break;
        case 3: lens[0] = 17; s.block_table_stride = 4; break;
        case 4: s.num_seqs = 3; break;
        case 5: qs[1] = 2; break;
        }
        topk_inputs(p, TK_N, pages);
        cr_assert_eq(reel_step(p, &s), want[c], "%s: %s", what[c], reel_ctx_last_error(ctx));
        kv_unchanged(p, saved, what[c]);
    }
    free(saved[0]);
    free(saved[1]);
    reel_plan_destroy(p);
}
