/* Sizes and step metadata at the edges of what a caller can pass: token
 * rows so wide that bytes overflow, query_start that runs past num_tokens,
 * contexts near INT32_MAX. A status or a correct step, never a read past
 * the caller's arrays, a wrapped size or an overflowed limit. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "tests/runtime/opgraphs.h"
#include "tests/core/opts.h"

static reel_ctx *ctx;
static void setup(void) { cr_assert_eq(reel_ctx_create(reel_test_ctx_opts(REEL_BACKEND_HOST), &ctx), REEL_OK); }
static void teardown(void) { reel_ctx_destroy(ctx); }

#define HAS(s) cr_assert(strstr(reel_ctx_last_error(ctx), (s)) != NULL, "message '%s' lacks '%s'", reel_ctx_last_error(ctx), (s))

/* n int32s that end where an inaccessible page begins: a read past them
 * faults instead of passing unnoticed. */
static int32_t *guarded(size_t n, void **map)
{
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    char *m = mmap(NULL, 2 * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(m, MAP_FAILED);
    cr_assert_eq(mprotect(m + pg, pg, PROT_NONE), 0);
    *map = m;
    return (int32_t *)(m + pg) - n;
}

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

Test(step_bounds, query_start_past_num_tokens_is_refused_before_positions_are_read_past_it, .init = setup,
     .fini = teardown)
{
    og_graph og;
    reel_plan *p = attention_plan(&og);
    og_step s;
    cr_assert_eq(og_make_step(p, OG_ATTENTION, REEL_F32, 4, 1, 20, &s), REEL_OK); /* sets q, k, v */
    void *map;
    int32_t *pos = guarded(4, &map);
    for (int t = 0; t < 4; t++)
        pos[t] = t;
    /* Sequence 0 claims tokens 0..39 of a 4-token step; query_start ends at 4. */
    int32_t qs[3] = {0, 40, 4}, lens[2] = {40, 20}, slots[4] = {-1, -1, -1, -1};
    reel_step_info bad = { REEL_STEP_INFO_HEAD, .num_tokens = 4, .num_seqs = 2, .query_start = qs, .positions = pos,
                          .slot_mapping = slots, .context_lens = lens, .block_tables = s.bt,
                          .block_table_stride = 16};
    cr_assert_eq(reel_step(p, &bad), REEL_E_INVALID_ARG);
    HAS("query_start");
    /* Nothing lost: the inputs are still set and a good step runs. */
    cr_assert_eq(reel_step(p, &s.info), REEL_OK, "%s", reel_ctx_last_error(ctx));
    munmap(map, 2 * (size_t)sysconf(_SC_PAGESIZE));
    reel_plan_destroy(p);
    og_free(&og);
}

Test(step_bounds, a_context_whose_block_count_overflows_int32_is_refused_by_the_stride_check, .init = setup,
     .fini = teardown)
{
    og_graph og;
    reel_plan *p = attention_plan(&og);
    og_step s;
    cr_assert_eq(og_make_step(p, OG_ATTENTION, REEL_F32, 1, 1, 20, &s), REEL_OK);
    int32_t qs[2] = {0, 1}, lens[1] = {INT32_MAX}, pos[1] = {0}, slots[1] = {-1};
    reel_step_info bad = { REEL_STEP_INFO_HEAD, .num_tokens = 1, .num_seqs = 1, .query_start = qs, .positions = pos,
                          .slot_mapping = slots, .context_lens = lens, .block_tables = s.bt,
                          .block_table_stride = 16};
    cr_assert_eq(reel_step(p, &bad), REEL_E_INVALID_ARG);
    HAS("block_table_stride");
    cr_assert_eq(reel_step(p, &s.info), REEL_OK, "%s", reel_ctx_last_error(ctx));
    reel_plan_destroy(p);
    og_free(&og);
}

/* Blocks of 2^16 slots: a context just under INT32_MAX needs 2^15 blocks,
 * and 2^15 blocks of 2^16 slots is 2^31, one past INT32_MAX. */
Test(step_bounds, a_context_near_int32_max_in_large_blocks_runs_eagerly_instead_of_being_refused, .init = setup,
     .fini = teardown)
{
    enum { BS = 1 << 16, NBT = 1 << 15 };
    reel_graph *g;
    cr_assert_eq(reel_graph_create(ctx, &g), REEL_OK);
    int64_t row[2] = {REEL_DIM_TOKENS, 2}, cd[4] = {1, BS, 1, 2};
    reel_attn_params ap = { REEL_ATTN_PARAMS_HEAD, 1, 1, 2, BS, 1.f};
    reel_tensor q = reel_input(g, "q", REEL_F32, 2, row), k = reel_input(g, "k", REEL_F32, 2, row),
                v = reel_input(g, "v", REEL_F32, 2, row);
    reel_tensor y = reel_paged_attention(g, q, k, v, reel_state(g, "k_cache", REEL_F32, 4, cd),
                                         reel_state(g, "v_cache", REEL_F32, 4, cd), &ap);
    cr_assert_eq(reel_output(g, "y", y), REEL_OK, "%s", reel_ctx_last_error(ctx));
    reel_compile_opts o = REEL_COMPILE_OPTS_INIT;
    o.num_buckets = 1;
    o.buckets[0] = 1;
    o.max_seqs = 1;
    reel_plan *p;
    cr_assert_eq(reel_compile(g, &o, &p), REEL_OK, "%s", reel_ctx_last_error(ctx));
    reel_graph_destroy(g);
    float qv[2] = {1, 0}, kv[2] = {2, 0}, vv[2] = {3, 4};
    cr_assert_eq(reel_plan_set_input(p, "q", qv, 1), REEL_OK);
    cr_assert_eq(reel_plan_set_input(p, "k", kv, 1), REEL_OK);
    cr_assert_eq(reel_plan_set_input(p, "v", vv, 1), REEL_OK);
    int32_t *bt = calloc(NBT, sizeof *bt); /* every entry block 0 */
    int32_t qs[2] = {0, 1}, lens[1] = {INT32_MAX - 100}, pos[1] = {0}, slots[1] = {0};
    reel_step_info s = { REEL_STEP_INFO_HEAD, .num_tokens = 1, .num_seqs = 1, .query_start = qs, .positions = pos,
                        .slot_mapping = slots, .context_lens = lens, .block_tables = bt,
                        .block_table_stride = NBT};
    cr_assert_eq(reel_step(p, &s), REEL_OK, "%s", reel_ctx_last_error(ctx));
    cr_assert_eq(reel_plan_last_fallback(p), REEL_FALLBACK_CONTEXT_OVER_LIMIT);
    const void *out;
    cr_assert_eq(reel_plan_output(p, "y", &out, NULL), REEL_OK);
    /* The token attends to itself only (position 0): its own v. */
    cr_assert_eq(((const float *)out)[0], 3.f);
    cr_assert_eq(((const float *)out)[1], 4.f);
    free(bt);
    reel_plan_destroy(p);
}

/* 16 rows of 2^58 + 1 f32 wrap to 64 bytes: the arena was that small and
 * the warm-up's kernel ran over it. */
Test(step_bounds, a_token_row_too_wide_for_64_bit_sizes_is_refused_at_compile, .init = setup, .fini = teardown)
{
    reel_graph *g;
    cr_assert_eq(reel_graph_create(ctx, &g), REEL_OK);
    int64_t d[2] = {REEL_DIM_TOKENS, ((int64_t)1 << 58) + 1};
    reel_tensor x = reel_input(g, "x", REEL_F32, 2, d), b = reel_input(g, "b", REEL_F32, 2, d);
    cr_assert_eq(reel_output(g, "y", reel_add(g, x, b)), REEL_OK, "%s", reel_ctx_last_error(ctx));
    reel_compile_opts o = REEL_COMPILE_OPTS_INIT;
    o.num_buckets = 1;
    o.buckets[0] = 16;
    reel_plan *p = NULL;
    cr_assert_eq(reel_compile(g, &o, &p), REEL_E_INVALID_ARG);
    cr_assert_null(p);
    HAS("'x'");
    HAS("per token row");
    reel_graph_destroy(g);
}
