/* libFuzzer target: one small paged-attention model on the host backend,
 * built once, stepped with random step metadata (token counts, query starts,
 * positions, slots with duplicates and -1, context lengths, block tables,
 * strides). After every refused step both KV caches are bitwise what they
 * were (the k cache is bound to memory of ours, the v cache is read back)
 * and a known-good step still gives the known-good output. Every non-OK
 * status leaves a message. */
#include "fuzz.h"

FZ_ASAN_DEFAULTS
FZ_UBSAN_DEFAULTS

enum { H = 2, HKV = 1, DH = 4, BS = 4, NBLK = 8, QW = H * DH, KW = HKV * DH, MAXT = 96 };
enum { CACHE_ELEMS = NBLK * BS * HKV * DH };

static reel_ctx *ctx;
static reel_plan *plan;
static float kcache[CACHE_ELEMS]; /* bound to state "k_cache" */
static float good_out[3 * QW];
static float q_in[MAXT * QW], k_in[MAXT * KW], v_in[MAXT * KW];

static void pattern(void)
{
    for (int i = 0; i < CACHE_ELEMS; i++)
        kcache[i] = 0.25f * (float)(i % 13) - 1.0f;
    float v[CACHE_ELEMS];
    for (int i = 0; i < CACHE_ELEMS; i++)
        v[i] = 0.5f * (float)(i % 7) - 1.5f;
    if (FZ_CHECK(ctx, reel_plan_write_state(plan, "v_cache", v, sizeof v)) != REEL_OK)
        FZ_FAIL("write_state v_cache: %s", reel_ctx_last_error(ctx));
}

static void set_inputs(int rows)
{
    if (FZ_CHECK(ctx, reel_plan_set_input(plan, "q", q_in, rows)) != REEL_OK ||
        FZ_CHECK(ctx, reel_plan_set_input(plan, "k", k_in, rows)) != REEL_OK ||
        FZ_CHECK(ctx, reel_plan_set_input(plan, "v", v_in, rows)) != REEL_OK)
        FZ_FAIL("set_input of %d rows: %s", rows, reel_ctx_last_error(ctx));
}

/* One sequence, a fresh prefill of 3 tokens into block 2: its output reads
 * only what it writes, so it is the same whatever the caches held. */
static void good_step(float *out)
{
    int32_t qs[2] = {0, 3}, pos[3] = {0, 1, 2}, slot[3] = {8, 9, 10}, lens[1] = {3}, bt[4] = {2, 5, 6, 7};
    reel_step_info s = { REEL_STEP_INFO_HEAD, .num_tokens = 3, .num_seqs = 1, .query_start = qs, .positions = pos, .slot_mapping = slot,
                        .context_lens = lens, .block_tables = bt, .block_table_stride = 4};
    set_inputs(3);
    if (FZ_CHECK(ctx, reel_step(plan, &s)) != REEL_OK)
        FZ_FAIL("the known-good step failed: %s", reel_ctx_last_error(ctx));
    const void *o;
    int64_t rows;
    if (FZ_CHECK(ctx, reel_plan_output(plan, "out", &o, &rows)) != REEL_OK || rows != 3)
        FZ_FAIL("the known-good step's output: %s", reel_ctx_last_error(ctx));
    memcpy(out, o, sizeof good_out);
}

static void cleanup(void)
{
    reel_plan_destroy(plan);
    reel_ctx_destroy(ctx);
}

static void init(void)
{
    reel_ctx_opts co = REEL_CTX_OPTS_INIT;
    co.backend = REEL_BACKEND_HOST;
    if (reel_ctx_create(&co, &ctx) != REEL_OK)
        FZ_FAIL("context: %s", reel_ctx_last_error(NULL));
    reel_graph *g;
    reel_graph_create(ctx, &g);
    int64_t qd[] = {REEL_DIM_TOKENS, QW}, kd[] = {REEL_DIM_TOKENS, KW}, cd[] = {NBLK, BS, HKV, DH};
    reel_tensor q = reel_input(g, "q", REEL_F32, 2, qd), k = reel_input(g, "k", REEL_F32, 2, kd);
    reel_tensor v = reel_input(g, "v", REEL_F32, 2, kd);
    reel_tensor kc = reel_state(g, "k_cache", REEL_F32, 4, cd), vc = reel_state(g, "v_cache", REEL_F32, 4, cd);
    reel_attn_params ap = { REEL_ATTN_PARAMS_HEAD, .num_heads = H, .num_kv_heads = HKV, .head_dim = DH, .block_size = BS};
    reel_output(g, "out", reel_paged_attention(g, q, k, v, kc, vc, &ap));
    reel_compile_opts o = REEL_COMPILE_OPTS_INIT;
    o.num_buckets = 3;
    o.buckets[0] = 1;
    o.buckets[1] = 4;
    o.buckets[2] = 16;
    o.max_context = 16;
    o.max_seqs = 4;
    if (reel_compile(g, &o, &plan) != REEL_OK)
        FZ_FAIL("compile: %s", reel_ctx_last_error(ctx));
    reel_graph_destroy(g);
    if (reel_plan_bind_state(plan, "k_cache", kcache, sizeof kcache) != REEL_OK)
        FZ_FAIL("bind_state: %s", reel_ctx_last_error(ctx));
    for (int i = 0; i < MAXT * QW; i++)
        q_in[i] = 0.125f * (float)((i * 7) % 17) - 1.0f;
    for (int i = 0; i < MAXT * KW; i++) {
        k_in[i] = 0.1f * (float)((i * 5) % 11) - 0.5f;
        v_in[i] = 0.2f * (float)((i * 3) % 9) - 0.8f;
    }
    pattern();
    good_step(good_out);
    atexit(cleanup);
}

static const int32_t tok_tab[] = {0, 1, 2, 3, 4, 5, 8, 16, 17, 33, MAXT, -1, INT32_MAX, 1 << 20, 7, 6};
static const int32_t val_tab[] = {0, 1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, -1, -2, INT32_MAX, INT32_MIN,
                                  NBLK - 1, NBLK, NBLK * BS - 1, NBLK * BS, 12, 6, 1 << 20, 64};

/* An array of n values from the bytes: each byte a small value, or (top bit)
 * an entry of val_tab. NULL for n past what a caller could mean. */
static int32_t *arr(fz *f, int64_t n)
{
    if (n <= 0 || n > 1 << 16)
        return NULL;
    int32_t *a = malloc((size_t)n * sizeof(int32_t));
    for (int64_t i = 0; i < n; i++) {
        uint8_t b = fz_u8(f);
        a[i] = b & 0x80 ? val_tab[b % (sizeof val_tab / sizeof val_tab[0])] : (int32_t)(b & 0x3f) - 1;
    }
    return a;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!plan)
        init();
    fz f = {data, size, 0};
    pattern();
    int nsteps = 1 + fz_u8(&f) % 4;
    for (int st = 0; st < nsteps && !fz_done(&f); st++) {
        reel_step_info s = { REEL_STEP_INFO_HEAD };
        uint8_t b = fz_u8(&f);
        s.num_tokens = b & 0x80 ? tok_tab[b % 16] : b % 20;
        b = fz_u8(&f);
        s.num_seqs = b & 0x80 ? tok_tab[b % 16] : b % 6;
        b = fz_u8(&f);
        s.block_table_stride = b & 0x80 ? val_tab[b % (sizeof val_tab / sizeof val_tab[0])] : b % 8;
        uint8_t nulls = fz_u8(&f);
        /* arrays as long as the metadata says (a caller passing less is out of contract) */
        int32_t *qs = nulls & 1 ? NULL : arr(&f, (int64_t)s.num_seqs + 1);
        int32_t *pos = nulls & 2 ? NULL : arr(&f, s.num_tokens);
        int32_t *slot = nulls & 4 ? NULL : arr(&f, s.num_tokens);
        int32_t *lens = nulls & 8 ? NULL : arr(&f, s.num_seqs);
        int64_t stride = s.block_table_stride > 0 ? s.block_table_stride : 1;
        int32_t *bt = nulls & 16 ? NULL : arr(&f, (int64_t)s.num_seqs * stride);
        s.query_start = qs;
        s.positions = pos;
        s.slot_mapping = slot;
        s.context_lens = lens;
        s.block_tables = bt;
        if (s.num_tokens >= 1 && s.num_tokens <= MAXT)
            set_inputs(s.num_tokens);
        /* caches before the step */
        float kb[CACHE_ELEMS], vb[CACHE_ELEMS], va[CACHE_ELEMS];
        memcpy(kb, kcache, sizeof kb);
        if (FZ_CHECK(ctx, reel_plan_read_state(plan, "v_cache", vb, sizeof vb)) != REEL_OK)
            FZ_FAIL("read_state: %s", reel_ctx_last_error(ctx));
        reel_status rs = FZ_CHECK(ctx, reel_step(plan, &s));
        if (rs == REEL_OK) {
            const void *o;
            int64_t rows;
            if (FZ_CHECK(ctx, reel_plan_output(plan, "out", &o, &rows)) == REEL_OK) {
                if (rows != s.num_tokens)
                    FZ_FAIL("output has %lld rows after a step of %d tokens", (long long)rows, s.num_tokens);
                volatile float sum = 0; /* every row readable */
                for (int64_t i = 0; i < rows * QW; i++)
                    sum += ((const float *)o)[i];
                (void)sum;
            }
        } else {
            reel_plan_read_state(plan, "v_cache", va, sizeof va);
            if (memcmp(kb, kcache, sizeof kb) != 0)
                FZ_FAIL("k_cache changed by a step refused with %s: %s", reel_status_str(rs), reel_ctx_last_error(ctx));
            if (memcmp(vb, va, sizeof va) != 0)
                FZ_FAIL("v_cache changed by a step refused with %s: %s", reel_status_str(rs), reel_ctx_last_error(ctx));
            float out[3 * QW];
            good_step(out);
            if (memcmp(out, good_out, sizeof out) != 0)
                FZ_FAIL("the known-good step's output changed after a step refused with %s", reel_status_str(rs));
        }
        free(qs);
        free(pos);
        free(slot);
        free(lens);
        free(bt);
    }
    return 0;
}
