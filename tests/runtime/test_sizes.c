/* What compile asks of the machine: the step region holds only what the
 * plan's ops read, and a host allocation the machine cannot give is refused
 * at once, naming the tensor, instead of being committed page by page until
 * the OOM killer ends the process. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "runtime/plan.h"
#include "ops/op.h"
#include "tests/core/opts.h"

static reel_ctx *ctx;
static void setup(void) { cr_assert_eq(reel_ctx_create(reel_test_ctx_opts(REEL_BACKEND_HOST), &ctx), REEL_OK); }
static void teardown(void) { reel_ctx_destroy(ctx); }

#define HAS(s) cr_assert(strstr(reel_ctx_last_error(ctx), (s)) != NULL, "message '%s' lacks '%s'", reel_ctx_last_error(ctx), (s))

static reel_graph *one_add(void)
{
    reel_graph *g;
    cr_assert_eq(reel_graph_create(ctx, &g), REEL_OK);
    int64_t d[] = {REEL_DIM_TOKENS, 4};
    reel_tensor a = reel_input(g, "a", REEL_F32, 2, d), b = reel_input(g, "b", REEL_F32, 2, d);
    cr_assert_eq(reel_output(g, "sum", reel_add(g, a, b)), REEL_OK);
    return g;
}

Test(sizes, a_plan_without_paged_attention_gets_no_block_tables_whatever_the_limits, .init = setup,
     .fini = teardown)
{
    reel_graph *g = one_add();
    reel_compile_opts o = REEL_COMPILE_OPTS_INIT;
    o.max_context = 1 << 24; /* block tables at these limits: 4 TiB */
    o.max_seqs = 1 << 16;
    reel_plan *p = NULL;
    cr_assert_eq(reel_compile(g, &o, &p), REEL_OK, "%s", reel_ctx_last_error(ctx));
    reel_plan_stats st = REEL_PLAN_STATS_INIT;
    cr_assert_eq(reel_plan_stats_get(p, &st), REEL_OK);
    /* Error word and the inputs and positions of 64 tokens. */
    cr_assert_lt(st.static_bytes, 8192, "static region of %zu bytes for one add", st.static_bytes);
    float x[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    cr_assert_eq(reel_plan_set_input(p, "a", x, 3), REEL_OK);
    cr_assert_eq(reel_plan_set_input(p, "b", x, 3), REEL_OK);
    reel_step_info s = { REEL_STEP_INFO_HEAD, .num_tokens = 3};
    cr_assert_eq(reel_step(p, &s), REEL_OK, "%s", reel_ctx_last_error(ctx));
    const float *sum;
    int64_t rows;
    cr_assert_eq(reel_plan_output(p, "sum", (const void **)&sum, &rows), REEL_OK);
    cr_assert_eq(rows, 3);
    cr_assert_eq(sum[11], 24.f);
    /* The overflow layout (a step past the largest bucket) is sized the same way. */
    float y[100 * 4] = {0};
    cr_assert_eq(reel_plan_set_input(p, "a", y, 100), REEL_OK);
    cr_assert_eq(reel_plan_set_input(p, "b", y, 100), REEL_OK);
    s.num_tokens = 100;
    cr_assert_eq(reel_step(p, &s), REEL_OK, "%s", reel_ctx_last_error(ctx));
    cr_assert_eq(reel_plan_last_fallback(p), REEL_FALLBACK_TOKENS_OVER_LIMIT);
    reel_plan_destroy(p);
    reel_graph_destroy(g);
}

Test(sizes, a_plan_with_paged_attention_still_gets_its_block_tables, .init = setup, .fini = teardown)
{
    reel_graph *g;
    cr_assert_eq(reel_graph_create(ctx, &g), REEL_OK);
    int64_t tok[] = {REEL_DIM_TOKENS, 4}, cd[] = {8, 4, 1, 4};
    reel_tensor q = reel_input(g, "q", REEL_F32, 2, tok);
    reel_attn_params ap = { REEL_ATTN_PARAMS_HEAD, .num_heads = 1, .num_kv_heads = 1, .head_dim = 4, .block_size = 4};
    reel_tensor o = reel_paged_attention(g, q, q, q, reel_state(g, "kc", REEL_F32, 4, cd),
                                         reel_state(g, "vc", REEL_F32, 4, cd), &ap);
    cr_assert_eq(reel_output(g, "o", o), REEL_OK, "%s", reel_ctx_last_error(ctx));
    reel_compile_opts co = REEL_COMPILE_OPTS_INIT;
    co.max_context = 4096;
    co.max_seqs = 16;
    reel_plan *p = NULL;
    cr_assert_eq(reel_compile(g, &co, &p), REEL_OK, "%s", reel_ctx_last_error(ctx));
    reel_plan_stats st = REEL_PLAN_STATS_INIT;
    cr_assert_eq(reel_plan_stats_get(p, &st), REEL_OK);
    cr_assert_geq(st.static_bytes, 16 * 1024 * 4, "block tables of 16 x 1024 entries in %zu bytes", st.static_bytes);
    reel_plan_destroy(p);
    reel_graph_destroy(g);
}

/* The one-kernel decode's arrival counters (ops/op.h): a word per (token,
 * kv head, head group of 16) for min(REEL_ATTN_ONE_KERNEL_ROWS, the largest
 * bucket) tokens, at most REEL_ATTN_CNT_MAX_WORDS; a stream's set. */
/* One paged attention op of heads over kv_heads heads of 4 (blocks of 4,
 * a cache of 8 blocks), f32, its output "o"; k is also v. */
static reel_graph *attn_graph(int heads, int kv_heads)
{
    reel_graph *g;
    cr_assert_eq(reel_graph_create(ctx, &g), REEL_OK);
    int64_t qd[] = {REEL_DIM_TOKENS, heads * 4}, kd[] = {REEL_DIM_TOKENS, kv_heads * 4}, cd[] = {8, 4, kv_heads, 4};
    reel_attn_params ap = { REEL_ATTN_PARAMS_HEAD, .num_heads = heads, .num_kv_heads = kv_heads, .head_dim = 4, .block_size = 4};
    reel_tensor k = reel_input(g, "k", REEL_F32, 2, kd);
    reel_tensor o = reel_paged_attention(g, reel_input(g, "q", REEL_F32, 2, qd), k, k,
                                         reel_state(g, "kc", REEL_F32, 4, cd), reel_state(g, "vc", REEL_F32, 4, cd), &ap);
    cr_assert_eq(reel_output(g, "o", o), REEL_OK, "%s", reel_ctx_last_error(ctx));
    return g;
}

static int32_t counter_words(int heads, int kv_heads, int32_t largest_bucket)
{
    reel_graph *g = attn_graph(heads, kv_heads);
    reel_compile_opts co = REEL_COMPILE_OPTS_INIT;
    co.num_buckets = 2;
    co.buckets[0] = 1, co.buckets[1] = largest_bucket;
    co.max_context = 32;
    co.max_seqs = 4;
    co.no_capture = true;
    reel_plan *p = NULL;
    cr_assert_eq(reel_compile(g, &co, &p), REEL_OK, "%s", reel_ctx_last_error(ctx));
    int32_t words = p->attn_cnt_words;
    reel_plan_destroy(p);
    reel_graph_destroy(g);
    return words;
}

Test(sizes, the_attention_counters_follow_the_largest_bucket_up_to_the_one_kernel_limit, .init = setup,
     .fini = teardown)
{
    cr_assert_eq(counter_words(16, 16, 8), 8 * 16, "8 tokens of 16 kv heads");
    cr_assert_eq(counter_words(16, 16, 64), REEL_ATTN_ONE_KERNEL_ROWS * 16, "the one-kernel limit, not the bucket");
    cr_assert_eq(counter_words(64, 2, 16), 16 * 2 * 2, "two kv heads of 32 heads: two head groups each");
    /* 256 kv heads: 32 tokens would need 8192 words; 16 tokens fit the cap */
    cr_assert_eq(counter_words(256, 256, 64), REEL_ATTN_CNT_MAX_WORDS);
}

/* A timeout bounds what a regression would cost the machine: before, this
 * state was committed page by page (zero fill) until the OOM killer came. */
Test(sizes, a_host_state_larger_than_physical_memory_is_refused_at_compile_naming_it, .init = setup,
     .fini = teardown, .timeout = 3)
{
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    cr_assert(pages > 0 && page > 0);
    int64_t phys = (int64_t)pages * page;
    reel_graph *g = one_add();
    int64_t d[] = {2 * (phys / (4 * 1024)) + 1024, 1024}; /* twice the machine, f32 */
    reel_state(g, "huge_kv", REEL_F32, 2, d);
    cr_assert_eq(reel_graph_status(g), REEL_OK, "%s", reel_ctx_last_error(ctx));
    reel_plan *p = NULL;
    cr_assert_eq(reel_compile(g, NULL, &p), REEL_E_OOM, "%s", reel_ctx_last_error(ctx));
    cr_assert_null(p);
    HAS("huge_kv");
    HAS("physical memory");
    reel_graph_destroy(g);
}

/* The process's own limits count too: RLIMIT_DATA lowered (in this test's
 * process only) below a state that the machine could give. */
Test(sizes, a_host_state_past_rlimit_data_is_refused_at_compile_naming_the_limit, .init = setup, .fini = teardown,
     .timeout = 10)
{
#if defined(__SANITIZE_ADDRESS__)
    cr_skip_test("ASan maps its own memory under the lowered limit");
#else
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    int64_t phys = (int64_t)pages * page, state = (int64_t)1 << 30;
    if (phys < 4 * state)
        cr_skip_test("the machine has less than 4 GiB: the state would be refused for physical memory");
    struct rlimit rl;
    cr_assert_eq(getrlimit(RLIMIT_DATA, &rl), 0);
    if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < (rlim_t)state)
        cr_skip_test("RLIMIT_DATA is already below the state");
    reel_graph *g = one_add();
    int64_t d[] = {state / (4 * 1024), 1024};
    reel_state(g, "big_kv", REEL_F32, 2, d);
    rl.rlim_cur = (rlim_t)state / 2;
    cr_assert_eq(setrlimit(RLIMIT_DATA, &rl), 0);
    reel_plan *p = NULL;
    cr_assert_eq(reel_compile(g, NULL, &p), REEL_E_OOM, "%s", reel_ctx_last_error(ctx));
    HAS("big_kv");
    HAS("RLIMIT_DATA");
    reel_graph_destroy(g);
#endif
}

/* The split-KV workspace (ops/op.h) is an activation of the plan: every
 * bucket's layout places it, [REEL_ATTN_SPLIT_SLOTS, H*Dh + H] float32
 * whatever the bucket's tokens, and a step under the hazard checker (which
 * sees each node's outputs as its writes) is clean. */
Test(sizes, the_attention_workspace_is_a_planned_activation_of_every_bucket, .init = setup, .fini = teardown)
{
    enum { H = 2, HKV = 1, DH = 4, BS = 4 }; /* attn_graph's head dim and block size */
    reel_graph *g = attn_graph(H, HKV);
    reel_compile_opts co = REEL_COMPILE_OPTS_INIT;
    co.num_buckets = 2;
    co.buckets[0] = 1, co.buckets[1] = 8;
    co.max_context = 16;
    co.max_seqs = 2;
    co.check_hazards = 1;
    reel_plan *p = NULL;
    cr_assert_eq(reel_compile(g, &co, &p), REEL_OK, "%s", reel_ctx_last_error(ctx));
    const size_t ws = (size_t)REEL_ATTN_SPLIT_SLOTS * (H * DH + H) * sizeof(float);
    for (int b = 0; b < 2; b++) {
        int found = 0;
        reel_placement pl = REEL_PLACEMENT_INIT;
        for (int i = 0; reel_plan_placement(p, b, i, &pl) == REEL_OK; i++)
            if (pl.bytes == ws) {
                found++;
                /* no node reads it: it lives exactly while its op runs */
                cr_assert_eq(pl.first, pl.last, "bucket %d: the workspace lives at its op (%d .. %d)", b,
                             pl.first, pl.last);
                cr_assert_eq(pl.stream, 0);
            }
        cr_assert_eq(found, 1, "bucket %d: one placement of %zu bytes (the workspace)", b, ws);
    }
    /* Two sequences' decode tokens at contexts 5 and 9 (bucket 8), checked. */
    float q[2 * H * DH], kv[2 * HKV * DH];
    for (int i = 0; i < 2 * H * DH; i++)
        q[i] = (float)(i % 7) * 0.25f - 0.5f;
    for (int i = 0; i < 2 * HKV * DH; i++)
        kv[i] = (float)(i % 5) * 0.5f - 1.0f;
    cr_assert_eq(reel_plan_set_input(p, "q", q, 2), REEL_OK);
    cr_assert_eq(reel_plan_set_input(p, "k", kv, 2), REEL_OK);
    int32_t qs[] = {0, 1, 2}, pos[] = {4, 8}, slots[] = {1 * BS, 6 * BS}, ctxl[] = {5, 9};
    int32_t tables[] = {0, 1, 2, 3, 4, 5, 6, 7};
    reel_step_info s = { REEL_STEP_INFO_HEAD, .num_tokens = 2, .num_seqs = 2, .query_start = qs, .positions = pos, .slot_mapping = slots,
                        .context_lens = ctxl, .block_tables = tables, .block_table_stride = 4};
    cr_assert_eq(reel_step(p, &s), REEL_OK, "%s", reel_ctx_last_error(ctx));
    reel_plan_destroy(p);
    reel_graph_destroy(g);
}
