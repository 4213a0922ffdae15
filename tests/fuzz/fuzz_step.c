/* libFuzzer target: one small model on the host backend, built once: paged
 * attention beside a top-k with a page table, stepped with random step
 * metadata (token counts, query starts, positions, slots with duplicates
 * and -1, context lengths, block tables, strides) and random top-k inputs
 * (scores with ties, NaN and infinities, row lengths, page tables with
 * entries that map past INT32_MAX, negative ones, or none set).
 * After every refused step both KV caches are bitwise what they were (the
 * k cache is bound to memory of ours, the v cache is read back) and a
 * known-good step still gives the known-good outputs: a refusal, whichever
 * op or check it comes from, changes nothing. An accepted step's top-k
 * rows are what reel.h says they are (a reference here). Every non-OK
 * status leaves a message. */
#include <math.h>

#include "fuzz.h"

FZ_ASAN_DEFAULTS
FZ_UBSAN_DEFAULTS

enum { H = 2, HKV = 1, DH = 4, BS = 4, NBLK = 8, QW = H * DH, KW = HKV * DH, MAXT = 96 };
enum { CACHE_ELEMS = NBLK * BS * HKV * DH };
/* top-k: scores [T, TN], lengths [T], page table [T, TP] of pages of TPS
 * (TP * TPS covers TN with a page to spare: page 3 maps no candidate), k TK.
 * Page size 3: INT32_MAX = 3 * 715827882 + 1, so an entry of 715827882
 * maps offsets 0 and 1 of its page to at most INT32_MAX and offset 2 past it. */
enum { TN = 8, TP = 4, TPS = 3, TK = 4 };
#define EDGE_PAGE 715827882

static reel_ctx *ctx;
static reel_plan *plan;
static float kcache[CACHE_ELEMS]; /* bound to state "k_cache" */
static float good_out[3 * QW];
static int32_t good_top[3 * TK];
static float q_in[MAXT * QW], k_in[MAXT * KW], v_in[MAXT * KW];
static float sc_in[MAXT * TN];
static int32_t len_in[MAXT], pt_in[MAXT * TP];

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

/* The top-k inputs of rows rows from sc_in, len_in, pt_in; the page table
 * left unset with no_pt (the step must then be refused). */
static void set_topk(int rows, int no_pt)
{
    if (FZ_CHECK(ctx, reel_plan_set_input(plan, "scores", sc_in, rows)) != REEL_OK ||
        FZ_CHECK(ctx, reel_plan_set_input(plan, "lengths", len_in, rows)) != REEL_OK ||
        (!no_pt && FZ_CHECK(ctx, reel_plan_set_input(plan, "page_table", pt_in, rows)) != REEL_OK))
        FZ_FAIL("set_input of %d top-k rows: %s", rows, reel_ctx_last_error(ctx));
}

/* Default top-k rows: ties, one NaN, all of each row, pages (t + j) % 8. */
static void topk_pattern(int rows)
{
    for (int t = 0; t < rows; t++) {
        for (int j = 0; j < TN; j++)
            sc_in[t * TN + j] = (t * 5 + j * 3) % 7 == 6 ? NAN : (float)((t * 5 + j * 3) % 7) - 2.0f;
        len_in[t] = TN - t % 3;
        for (int j = 0; j < TP; j++)
            pt_in[t * TP + j] = (t + j) % 8;
    }
}

/* Top-k's page transform of candidate i of row t, as reel.h documents it
 * (page_table[i / ps] * ps + i % ps). A negative entry is an unmapped page:
 * its candidates give -1 (ops/host/topk.c and the step's host check; reel.h
 * only says that -1 stays -1). Past INT32_MAX: *bad, the step must fail. */
static int64_t page_of(int t, int64_t i, int *bad)
{
    int32_t e = pt_in[t * TP + i / TPS];
    *bad = 0;
    if (e < 0)
        return -1;
    int64_t r = (int64_t)e * TPS + i % TPS;
    *bad = r > INT32_MAX;
    return r;
}

/* Removes one v from the first *n values of a (their order changes); 0 if absent. */
static int take(int64_t *a, int *n, int64_t v)
{
    for (int i = 0; i < *n; i++)
        if (a[i] == v) {
            a[i] = a[--*n];
            return 1;
        }
    return 0;
}

/* An accepted step's top-k row t against reel.h: candidates are j <
 * min(length, N) whose score is not NaN; the k best are selected, the row
 * padded with -1 past the candidates, each index paged. Equal scores may
 * come in any order, and which of several equal scores at the cut is kept
 * is not said either: every candidate scoring above the k-th best must be
 * there (paged), the rest of the selection must be paged candidates scoring
 * exactly the k-th best, then -1s. Compared as multisets. */
static void check_topk_row(int t, const int32_t *row)
{
    const float *sc = sc_in + t * TN;
    int64_t len = len_in[t] < 0 ? 0 : len_in[t] > TN ? TN : len_in[t];
    int cand[TN], nc = 0;
    for (int j = 0; j < len; j++)
        if (!isnan(sc[j]))
            cand[nc++] = j;
    for (int a = 1; a < nc; a++) /* best first */
        for (int b = a; b > 0 && sc[cand[b]] > sc[cand[b - 1]]; b--) {
            int x = cand[b];
            cand[b] = cand[b - 1];
            cand[b - 1] = x;
        }
    int nsel = nc < TK ? nc : TK;
    int64_t got[TK], tie[TN];
    int ngot = TK, ntie = 0;
    for (int i = 0; i < TK; i++)
        got[i] = row[i];
    float cut = nsel ? sc[cand[nsel - 1]] : 0.0f;
    int above = 0;
    for (int c = 0; c < nc; c++) {
        int bad;
        int64_t v = page_of(t, cand[c], &bad);
        if (c < nsel && sc[cand[c]] > cut) {
            above++;
            if (bad)
                FZ_FAIL("top-k row %d: candidate %d (score %g, selected) maps past INT32_MAX (page entry %d), and "
                        "the step was accepted", t, cand[c], (double)sc[cand[c]], pt_in[t * TP + cand[c] / TPS]);
            if (!take(got, &ngot, v))
                FZ_FAIL("top-k row %d: candidate %d (score %g) must be selected as %lld; the row is "
                        "{%d, %d, %d, %d}", t, cand[c], (double)sc[cand[c]], (long long)v, row[0], row[1], row[2],
                        row[3]);
        } else if (sc[cand[c]] == cut && !bad) {
            tie[ntie++] = v;
        }
    }
    for (int i = nsel; i < TK; i++)
        if (!take(got, &ngot, -1))
            FZ_FAIL("top-k row %d has %d candidates, so at least %d entries of -1; the row is {%d, %d, %d, %d}",
                    t, nc, TK - nsel, row[0], row[1], row[2], row[3]);
    /* what is left: nsel - above entries among the ties at the cut */
    for (int i = 0; i < ngot; i++)
        if (!take(tie, &ntie, got[i]))
            FZ_FAIL("top-k row %d: entry %lld is no candidate scoring the k-th best (%g) left to select; the row "
                    "is {%d, %d, %d, %d}", t, (long long)got[i], (double)cut, row[0], row[1], row[2], row[3]);
    if (ngot != nsel - above)
        FZ_FAIL("top-k row %d: %d entries at the cut, %d expected", t, ngot, nsel - above);
}

/* Reads the outputs of an accepted step of rows tokens: out (copied to
 * out_copy when not NULL) and top (to top_copy), each with rows rows. */
static void read_outputs(int64_t rows, float *out_copy, int32_t *top_copy)
{
    const void *o, *tk;
    int64_t r1, r2;
    if (FZ_CHECK(ctx, reel_plan_output(plan, "out", &o, &r1)) != REEL_OK ||
        FZ_CHECK(ctx, reel_plan_output(plan, "top", &tk, &r2)) != REEL_OK)
        FZ_FAIL("outputs of an accepted step: %s", reel_ctx_last_error(ctx));
    if (r1 != rows || r2 != rows)
        FZ_FAIL("outputs have %lld and %lld rows after a step of %lld tokens", (long long)r1, (long long)r2,
                (long long)rows);
    volatile float sum = 0; /* every row readable */
    for (int64_t i = 0; i < rows * QW; i++)
        sum += ((const float *)o)[i];
    (void)sum;
    if (out_copy)
        memcpy(out_copy, o, (size_t)rows * QW * sizeof(float));
    if (top_copy)
        memcpy(top_copy, tk, (size_t)rows * TK * sizeof(int32_t));
}

/* One sequence, a fresh prefill of 3 tokens into block 2: its output reads
 * only what it writes, so it is the same whatever the caches held; its
 * top-k rows are the pattern's. */
static void good_step(float *out, int32_t *top)
{
    int32_t qs[2] = {0, 3}, pos[3] = {0, 1, 2}, slot[3] = {8, 9, 10}, lens[1] = {3}, bt[4] = {2, 5, 6, 7};
    reel_step_info s = { REEL_STEP_INFO_HEAD, .num_tokens = 3, .num_seqs = 1, .query_start = qs, .positions = pos, .slot_mapping = slot,
                        .context_lens = lens, .block_tables = bt, .block_table_stride = 4};
    set_inputs(3);
    topk_pattern(3);
    set_topk(3, 0);
    if (FZ_CHECK(ctx, reel_step(plan, &s)) != REEL_OK)
        FZ_FAIL("the known-good step failed: %s", reel_ctx_last_error(ctx));
    read_outputs(3, out, top);
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
    int64_t sd[] = {REEL_DIM_TOKENS, TN}, ld[] = {REEL_DIM_TOKENS}, pd[] = {REEL_DIM_TOKENS, TP};
    reel_tensor sc = reel_input(g, "scores", REEL_F32, 2, sd), ln = reel_input(g, "lengths", REEL_I32, 1, ld);
    reel_tensor pt = reel_input(g, "page_table", REEL_I32, 2, pd);
    reel_output(g, "top", reel_topk(g, sc, ln, pt, TK, TPS));
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
    good_step(good_out, good_top);
    for (int t = 0; t < 3; t++)
        check_topk_row(t, good_top + t * TK);
    atexit(cleanup);
}

static const int32_t tok_tab[] = {0, 1, 2, 3, 4, 5, 8, 16, 17, 33, MAXT, -1, INT32_MAX, 1 << 20, 7, 6};
static const int32_t val_tab[] = {0, 1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, -1, -2, INT32_MAX, INT32_MIN,
                                  NBLK - 1, NBLK, NBLK * BS - 1, NBLK * BS, 12, 6, 1 << 20, 64};
static const float score_tab[] = {0.0f, 1.0f, -1.0f, 2.0f, 1.0f, 0.5f, -0.0f, NAN, -INFINITY, INFINITY,
                                  1e30f, -1e30f, 1e-45f, 3.0f, 1.0f, 2.0f};
static const int32_t len_tab[] = {0, 1, 2, 3, 4, 5, 6, 7, TN, TN + 1, -1, INT32_MIN, INT32_MAX, TN, TN, 3};
/* Page entries: near INT32_MAX / TPS (EDGE_PAGE maps offsets 0, 1 and not 2),
 * past it, negative (-1 and others). */
static const int32_t page_tab[] = {EDGE_PAGE, EDGE_PAGE + 1, EDGE_PAGE - 1, INT32_MAX, INT32_MIN, -1, -2,
                                   1 << 29, 1 << 30, 0, 7, 1 << 20};

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

/* The top-k inputs of a step of rows tokens: a mode byte (bit 0 scores,
 * bit 1 lengths, bit 2 the page table from the bytes, else the pattern;
 * bit 3 the page table left unset); then the bytes the mode asks for. Page
 * entries: small (-1..62) or (top bit) from page_tab. Returns the mode. */
static uint8_t topk_inputs(fz *f, int rows)
{
    uint8_t m = fz_u8(f);
    topk_pattern(rows);
    for (int i = 0; m & 1 && i < rows * TN; i++)
        sc_in[i] = FZ_PICK(f, score_tab);
    for (int i = 0; m & 2 && i < rows; i++)
        len_in[i] = FZ_PICK(f, len_tab);
    for (int i = 0; m & 4 && i < rows * TP; i++) {
        uint8_t b = fz_u8(f);
        pt_in[i] = b & 0x80 ? page_tab[b % (sizeof page_tab / sizeof page_tab[0])] : (int32_t)(b & 0x3f) - 1;
    }
    return m;
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
        int rows = s.num_tokens >= 1 && s.num_tokens <= MAXT ? s.num_tokens : 0;
        uint8_t tm = topk_inputs(&f, rows);
        if (rows) {
            set_inputs(rows);
            set_topk(rows, tm & 8);
        }
        /* caches before the step */
        float kb[CACHE_ELEMS], vb[CACHE_ELEMS], va[CACHE_ELEMS];
        memcpy(kb, kcache, sizeof kb);
        if (FZ_CHECK(ctx, reel_plan_read_state(plan, "v_cache", vb, sizeof vb)) != REEL_OK)
            FZ_FAIL("read_state: %s", reel_ctx_last_error(ctx));
        reel_status rs = FZ_CHECK(ctx, reel_step(plan, &s));
        if (rs == REEL_OK) {
            int32_t top[MAXT * TK];
            if (!rows || (tm & 8))
                FZ_FAIL("a step of %d tokens was accepted without all its inputs set", s.num_tokens);
            read_outputs(rows, NULL, top);
            for (int t = 0; t < rows; t++)
                check_topk_row(t, top + t * TK);
        } else {
            reel_plan_read_state(plan, "v_cache", va, sizeof va);
            if (memcmp(kb, kcache, sizeof kb) != 0)
                FZ_FAIL("k_cache changed by a step refused with %s: %s", reel_status_str(rs), reel_ctx_last_error(ctx));
            if (memcmp(vb, va, sizeof va) != 0)
                FZ_FAIL("v_cache changed by a step refused with %s: %s", reel_status_str(rs), reel_ctx_last_error(ctx));
            float out[3 * QW];
            int32_t top[3 * TK];
            good_step(out, top);
            if (memcmp(out, good_out, sizeof out) != 0)
                FZ_FAIL("the known-good step's output changed after a step refused with %s", reel_status_str(rs));
            if (memcmp(top, good_top, sizeof top) != 0)
                FZ_FAIL("the known-good step's top-k changed after a step refused with %s", reel_status_str(rs));
        }
        free(qs);
        free(pos);
        free(slot);
        free(lens);
        free(bt);
    }
    return 0;
}
