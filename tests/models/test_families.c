/* Each family's checkpoint on the host backend: config.json as the real
 * checkpoints have it (tests/models/fixture.c), small seeded weights
 * written by the test under transformers' names, opened, its shape read
 * back, built, bound and stepped (a prompt, then greedy decode steps), and
 * the logits against a float64 forward pass written from transformers'
 * modeling code with transformers' rope tables: f32 weights within 2e-4 of
 * the logits' scale, bf16 (the real configs' dtype) within 4%. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/models/fixture.h"

#define PROMPT 24
#define GEN 4

static reel_ctx *host(void)
{
    reel_ctx_opts o = REEL_CTX_OPTS_INIT;
    o.backend = REEL_BACKEND_HOST;
    reel_ctx *ctx = NULL;
    cr_assert_eq(reel_ctx_create(&o, &ctx), REEL_OK);
    return ctx;
}

static float load(const void *p, reel_dtype dt, size_t i)
{
    if (dt == REEL_F32)
        return ((const float *)p)[i];
    uint32_t u = (uint32_t)((const uint16_t *)p)[i] << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* The plans of these tests: buckets 1 and 4, 64 tokens of context, two
 * sequences, nb blocks of bs tokens. */
static reel_model_opts small_opts(int bs, int nb)
{
    reel_model_opts o = REEL_MODEL_OPTS_INIT;
    o.num_buckets = 2;
    o.buckets[0] = 1;
    o.buckets[1] = 4;
    o.max_context = 64;
    o.max_seqs = 2;
    o.block_size = bs;
    o.num_blocks = nb;
    return o;
}

/* Opens dir, checks what reel_model_info says against f, compiles, runs
 * the prompt and then GEN decode steps, each fed the argmax of the row
 * before; tokens[PROMPT + GEN] (the prompt, then the fed tokens) and
 * logits[PROMPT + GEN][vocab] (a row per token) come back. */
static void run(reel_ctx *ctx, const mfam *f, reel_dtype dt, const char *dir, int32_t *tokens, double *logits,
                bool capture)
{
    reel_model *m = NULL;
    cr_assert_eq(reel_model_open(ctx, dir, &m), REEL_OK, "%s: %s", f->name, reel_ctx_last_error(ctx));
    reel_model_info in = REEL_MODEL_INFO_INIT;
    cr_assert_eq(reel_model_info_get(m, &in), REEL_OK);
    cr_expect_eq(in.family, (int)f->family, "%s", f->name);
    cr_expect(in.layers == f->layers && in.hidden == f->hidden && in.heads == f->heads &&
                  in.kv_heads == f->kv_heads && in.head_dim == f->head_dim && in.ffn == f->ffn &&
                  in.vocab == f->vocab,
              "%s: shape %d %d %d %d %d %d %d", f->name, in.layers, in.hidden, in.heads, in.kv_heads, in.head_dim,
              in.ffn, in.vocab);
    cr_expect(in.tied == f->tied && in.qkv_bias == f->qkv_bias && in.o_bias == f->o_bias && in.qk_norm == f->qk_norm,
              "%s: tied %d qkv_bias %d o_bias %d qk_norm %d", f->name, in.tied, in.qkv_bias, in.o_bias, in.qk_norm);
    cr_expect(in.dtype == dt && in.has_weights, "%s", f->name);
    cr_expect(in.rms_norm_eps == f->eps && in.rope_theta == f->theta && in.max_position_embeddings == f->max_pos,
              "%s: eps %g theta %g max_pos %d", f->name, in.rms_norm_eps, in.rope_theta, in.max_position_embeddings);
    cr_expect_eq(in.rope_type, (int)f->rope_type, "%s: rope %d", f->name, in.rope_type);
    int expected_tensors = 1 + f->layers * (9 + (f->qkv_bias ? 3 : 0) + (f->qk_norm ? 2 : 0) + (f->o_bias ? 1 : 0)) +
                           1 + (f->tied ? 0 : 1);
    int moe_layers = 0;
    for (int l = 0; l < f->layers; l++)
        if (mf_layer_moe(f, l)) { /* a router and 3 a expert for the dense MLP's 3 */
            expected_tensors += 1 + 3 * f->experts - 3;
            moe_layers++;
        }
    cr_expect(in.experts == f->experts && in.experts_per_token == f->topk && in.moe_layers == moe_layers &&
                  in.expert_ffn == (f->experts ? f->moe_ffn : 0),
              "%s: experts %d, %d a token, ffn %d, %d layers", f->name, in.experts, in.experts_per_token,
              in.expert_ffn, in.moe_layers);
    cr_expect(f->experts ? in.active_param_bytes < in.param_bytes : in.active_param_bytes == in.param_bytes, "%s",
              f->name);
    cr_expect_eq(reel_model_tensor_count(m), expected_tensors, "%s", f->name);
    uint64_t kvb = 2ull * f->layers * f->kv_heads * f->head_dim * reel_dtype_size(dt);
    cr_expect_eq(in.kv_bytes_per_token, kvb, "%s", f->name);

    const int N = PROMPT + GEN, bs = 4, nb = (N + bs - 1) / bs;
    reel_model_opts o = small_opts(bs, nb);
    o.logits = 1;
    reel_compile_opts co = REEL_COMPILE_OPTS_INIT;
    co.no_capture = !capture;
    reel_plan *p = NULL;
    cr_assert_eq(reel_model_compile(m, &o, &co, &p), REEL_OK, "%s: %s", f->name, reel_ctx_last_error(ctx));
    reel_model_close(m); /* the plan holds its own copy of the weights */
    int32_t pos[PROMPT], slots[PROMPT], table[16];
    for (int i = 0; i < nb; i++)
        table[i] = i;
    for (int i = 0; i < PROMPT; i++) {
        tokens[i] = (int32_t)((i * 37 + 11) % f->vocab);
        pos[i] = slots[i] = i;
    }
    for (int k = 0; k <= GEN; k++) {
        int T = k == 0 ? PROMPT : 1;
        const int32_t *tok = k == 0 ? tokens : &tokens[PROMPT + k - 1];
        int32_t p0 = k == 0 ? 0 : PROMPT + k - 1, qs[2] = {0, T}, len = p0 + T;
        if (k > 0)
            pos[0] = slots[0] = p0;
        reel_step_info si = {REEL_STEP_INFO_HEAD, .num_tokens = T, .num_seqs = 1, .query_start = qs, .positions = pos,
                             .slot_mapping = slots, .context_lens = &len, .block_tables = table,
                             .block_table_stride = nb};
        cr_assert_eq(reel_plan_set_input(p, REEL_MODEL_INPUT_TOKENS, tok, T), REEL_OK);
        cr_assert_eq(reel_step(p, &si), REEL_OK, "%s: %s", f->name, reel_ctx_last_error(ctx));
        const void *out;
        int64_t rows, re;
        reel_dtype odt;
        cr_assert_eq(reel_plan_output_desc(p, REEL_MODEL_OUTPUT_LOGITS, &odt, &re), REEL_OK);
        cr_assert_eq(re, f->vocab);
        cr_assert_eq(reel_plan_output(p, REEL_MODEL_OUTPUT_LOGITS, &out, &rows), REEL_OK);
        cr_assert_eq(rows, T);
        for (int r = 0; r < T; r++)
            for (int i = 0; i < f->vocab; i++)
                logits[(size_t)(p0 + r) * f->vocab + i] = load(out, odt, (size_t)r * f->vocab + i);
        const void *nx;
        cr_assert_eq(reel_plan_output(p, REEL_MODEL_OUTPUT_NEXT, &nx, &rows), REEL_OK);
        int32_t next = ((const int32_t *)nx)[rows - 1];
        const double *row = logits + (size_t)(p0 + T - 1) * f->vocab;
        int best = 0;
        for (int i = 1; i < f->vocab; i++)
            if (row[i] > row[best])
                best = i;
        cr_expect_eq(next, best, "%s: next_token %d is not the argmax %d of its row", f->name, next, best);
        if (k < GEN)
            tokens[PROMPT + k] = next;
    }
    reel_plan_destroy(p);
}

static double max_abs(const double *a, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++)
        m = fmax(m, fabs(a[i]));
    return m;
}

static double max_diff(const double *a, const double *b, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++)
        m = fmax(m, fabs(a[i] - b[i]));
    return m;
}

static void check_family(const mfam *f, reel_dtype dt, double rtol)
{
    reel_ctx *ctx = host();
    const char *d = mf_tmpdir();
    char dir[96];
    snprintf(dir, sizeof dir, "%s", d);
    mweights w;
    mf_write(f, dt, 0x5eed + (uint64_t)f->vocab, dir, &w, NULL, NULL);
    const int N = PROMPT + GEN;
    int32_t tokens[PROMPT + GEN];
    size_t nl = (size_t)N * f->vocab;
    double *got = calloc(nl, sizeof *got), *want = calloc(nl, sizeof *want), *other = calloc(nl, sizeof *other);
    run(ctx, f, dt, dir, tokens, got, true);
    double inv[256], attn;
    tf_inv_freq(&f->rope, f->head_dim, f->theta, f->max_pos, inv, &attn);
    mf_reference(f, &w, tokens, N, inv, attn, dt, want);
    double scale = max_abs(want, nl), err = max_diff(got, want, nl);
    cr_expect(err <= rtol * scale, "%s (%s): logits differ from the float64 reference by %.3g of their scale %.3g "
              "(tolerance %.3g)", f->name, reel_dtype_name(dt), err / scale, scale, rtol);
    /* the test can tell the rope apart: the unscaled one misses by more */
    if (dt == REEL_F32 && f->rope.type && strcmp(f->rope.type, "dynamic") != 0) {
        tf_rope plain = {NULL, 1, 0, 0, 0, -1, 0, 0, 0, 0, -1};
        double inv0[256], attn0;
        tf_inv_freq(&plain, f->head_dim, f->theta, f->max_pos, inv0, &attn0);
        mf_reference(f, &w, tokens, N, inv0, attn0, dt, other);
        double miss = max_diff(got, other, nl);
        cr_expect(miss > 4 * rtol * scale, "%s: the unscaled rope's logits are as close (%.3g of the scale) as the "
                  "%s rope's (%.3g): the check cannot see the table", f->name, miss / scale, f->rope.type,
                  err / scale);
    }
    /* replay and eager give the same bits */
    if (dt == REEL_F32) {
        int32_t t2[PROMPT + GEN];
        run(ctx, f, dt, dir, t2, other, false);
        cr_expect(!memcmp(t2, tokens, sizeof t2) && !memcmp(other, got, nl * sizeof *got),
                  "%s: eager steps differ from replayed ones", f->name);
    }
    free(got), free(want), free(other);
    mf_weights_free(&w);
    mf_rmdir(dir);
    reel_ctx_destroy(ctx);
}

static const mfam *family(const char *name)
{
    for (int i = 0; i < mf_nfamilies; i++)
        if (strcmp(mf_families[i].name, name) == 0)
            return &mf_families[i];
    cr_assert_fail("no family %s", name);
    return NULL;
}

#define FAMILY_TEST(id, name)                                           \
    Test(models, id##_loads_and_matches_float64_in_f32_and_bf16)       \
    {                                                                   \
        check_family(family(name), REEL_F32, 2e-4);                    \
        check_family(family(name), REEL_BF16, 0.04);                   \
    }

FAMILY_TEST(llama_3_2_1b_with_llama3_rope_and_tied_embeddings, "Llama-3.2-1B")
FAMILY_TEST(llama_3_1_8b_with_llama3_rope, "Llama-3.1-8B")
FAMILY_TEST(mistral_7b_v0_3, "Mistral-7B-v0.3")
FAMILY_TEST(qwen2_5_0_5b_with_qkv_biases_and_gqa_7, "Qwen2.5-0.5B")
FAMILY_TEST(qwen3_0_6b_with_qk_norms_and_an_explicit_head_dim, "Qwen3-0.6B")
FAMILY_TEST(qwen3_with_yarn_rope, "Qwen3-0.6B-yarn")
FAMILY_TEST(llama_2_with_linear_rope_under_the_old_type_key, "Llama-2-linear")
FAMILY_TEST(llama_with_attention_bias_and_dynamic_rope, "Llama-dynamic-bias")
FAMILY_TEST(qwen3_moe_with_16_experts_4_a_token_and_a_dense_layer, "Qwen3-30B-A3B")
FAMILY_TEST(mixtral_with_8_experts_2_a_token, "Mixtral-8x7B")

/* A model parsed from config.json alone builds and compiles; its plan waits
 * for reel_model_bind_source, and reel_model_bind says so. */
Test(models, a_config_alone_compiles_and_asks_for_a_source_of_weights)
{
    const mfam *f = family("Qwen3-0.6B");
    reel_ctx *ctx = host();
    char *cfg = mf_config(f, REEL_F32);
    reel_model *m = NULL;
    cr_assert_eq(reel_model_parse(ctx, cfg, 0, &m), REEL_OK, "%s", reel_ctx_last_error(ctx));
    free(cfg);
    reel_model_info in = REEL_MODEL_INFO_INIT;
    cr_assert_eq(reel_model_info_get(m, &in), REEL_OK);
    cr_expect_eq(in.has_weights, 0);
    reel_plan *p = NULL;
    reel_model_opts o = REEL_MODEL_OPTS_INIT;
    o.max_context = 32;
    o.max_seqs = 1;
    cr_assert_eq(reel_model_compile(m, &o, NULL, &p), REEL_OK, "%s", reel_ctx_last_error(ctx));
    cr_expect_eq(reel_model_bind(m, p, &o), REEL_E_INVALID_USAGE);
    cr_expect(strstr(reel_ctx_last_error(ctx), "reel_model_bind_source") != NULL, "%s", reel_ctx_last_error(ctx));
    reel_plan_destroy(p);
    reel_model_close(m);
    reel_ctx_destroy(ctx);
}

/* Node ops of plan p with op name `op`. */
static int count_ops(const reel_plan *p, const char *op)
{
    reel_plan_stats st = REEL_PLAN_STATS_INIT;
    cr_assert_eq(reel_plan_stats_get(p, &st), REEL_OK);
    int n = 0;
    for (int i = 0; i < st.num_nodes; i++) {
        reel_node_info ni = REEL_NODE_INFO_INIT;
        cr_assert_eq(reel_plan_node_info(p, i, &ni), REEL_OK);
        n += strcmp(ni.op, op) == 0;
    }
    return n;
}

/* f32 weights from a hash of the tensor's name: norms near 1, the rest small. */
static reel_status hashed(void *user, const reel_model_tensor *t, void *dst, size_t bytes)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (const char *c = t->name; *c; c++)
        h = (h ^ (uint8_t)*c) * 0x100000001b3ull;
    bool norm = strstr(t->name, "norm") != NULL;
    float *f = dst;
    for (size_t i = 0; i < bytes / sizeof *f; i++) {
        h = h * 6364136223846793005ull + 1442695040888963407ull;
        float u = (float)(h >> 40) / (float)(1 << 24) - 0.5f;
        f[i] = norm ? 1.0f + 0.5f * u : 0.4f * u;
    }
    (void)user;
    return REEL_OK;
}

/* The compiler fuses reel_rope into the attention op; reel_rope_freq (the
 * scaled ropes) stays its own op, and fusing or not changes no bit. */
Test(models, scaled_ropes_stay_their_own_ops_and_the_fusion_changes_no_bits)
{
    reel_ctx *ctx = host();
    for (int fi = 0; fi < mf_nfamilies; fi++) {
        const mfam *f = &mf_families[fi];
        char *cfg = mf_config(f, REEL_F32);
        reel_model *m = NULL;
        cr_assert_eq(reel_model_parse(ctx, cfg, 0, &m), REEL_OK, "%s", reel_ctx_last_error(ctx));
        free(cfg);
        reel_model_opts o = REEL_MODEL_OPTS_INIT;
        o.num_buckets = 1;
        o.buckets[0] = 8;
        o.max_context = 32;
        o.max_seqs = 1;
        o.block_size = 4;
        o.num_blocks = 8;
        o.logits = 1;
        reel_compile_opts unfused = REEL_COMPILE_OPTS_INIT;
        unfused.no_fuse = 1;
        reel_plan *p[2] = {NULL, NULL};
        cr_assert_eq(reel_model_compile(m, &o, NULL, &p[0]), REEL_OK, "%s", reel_ctx_last_error(ctx));
        cr_assert_eq(reel_model_compile(m, &o, &unfused, &p[1]), REEL_OK, "%s", reel_ctx_last_error(ctx));
        /* MLA rotates a range of each head: rope_freq whatever the rope type */
        bool table = f->ds || f->rope_type == REEL_ROPE_LINEAR || f->rope_type == REEL_ROPE_YARN ||
                     f->rope_type == REEL_ROPE_LLAMA3;
        cr_expect_eq(count_ops(p[0], "rope_freq"), table ? 2 * f->layers : 0, "%s", f->name);
        cr_expect_eq(count_ops(p[0], "rope"), 0, "%s: reel_rope fuses into attention", f->name);
        cr_expect_eq(count_ops(p[1], table ? "rope_freq" : "rope"), 2 * f->layers, "%s unfused", f->name);
        cr_expect_eq(count_ops(p[0], "rmsnorm_heads"), f->qk_norm ? 2 * f->layers : 0, "%s", f->name);
        int32_t tok[6] = {1, 7, 3, 9, 2, 5}, pos[6] = {0, 1, 2, 3, 4, 5}, table_ids[8] = {0, 1, 2, 3, 4, 5, 6, 7};
        int32_t qs[2] = {0, 6}, len = 6;
        reel_step_info si = {REEL_STEP_INFO_HEAD, .num_tokens = 6, .num_seqs = 1, .query_start = qs,
                             .positions = pos, .slot_mapping = pos, .context_lens = &len,
                             .block_tables = table_ids, .block_table_stride = 8};
        const void *out[2];
        int64_t rows;
        for (int k = 0; k < 2; k++) {
            cr_assert_eq(reel_model_bind_source(m, p[k], &o, hashed, NULL), REEL_OK, "%s", reel_ctx_last_error(ctx));
            cr_assert_eq(reel_plan_set_input(p[k], REEL_MODEL_INPUT_TOKENS, tok, 6), REEL_OK);
            cr_assert_eq(reel_step(p[k], &si), REEL_OK, "%s: %s", f->name, reel_ctx_last_error(ctx));
            cr_assert_eq(reel_plan_output(p[k], REEL_MODEL_OUTPUT_LOGITS, &out[k], &rows), REEL_OK);
        }
        cr_expect(!memcmp(out[0], out[1], (size_t)rows * (size_t)f->vocab * sizeof(float)),
                  "%s: fused and unfused logits differ", f->name);
        reel_plan_destroy(p[0]);
        reel_plan_destroy(p[1]);
        reel_model_close(m);
    }
    reel_ctx_destroy(ctx);
}

/* The KV cache sized from a fraction of memory: the blocks it gives compile
 * and a plan with one block more than the memory allows is what the budget
 * refuses; the figures are those of the plan's own memory. */
Test(models, the_kv_cache_is_sized_from_a_fraction_of_memory)
{
    const mfam *f = family("Qwen3-0.6B");
    reel_ctx *ctx = host();
    char *cfg = mf_config(f, REEL_F32);
    reel_model *m = NULL;
    cr_assert_eq(reel_model_parse(ctx, cfg, 0, &m), REEL_OK, "%s", reel_ctx_last_error(ctx));
    free(cfg);
    reel_model_opts o = REEL_MODEL_OPTS_INIT;
    o.max_context = 64;
    o.max_seqs = 2;
    int32_t blocks = 0;
    int64_t tokens = 0;
    cr_assert_eq(reel_model_kv_blocks(m, &o, NULL, 0.0, &blocks, &tokens), REEL_E_INVALID_ARG);
    cr_assert_eq(reel_model_kv_blocks(m, &o, NULL, 1e-9, &blocks, &tokens), REEL_E_OOM);
    cr_assert(strstr(reel_ctx_last_error(ctx), "less than one block"), "%s", reel_ctx_last_error(ctx));
    size_t avail, total;
    cr_assert_eq(reel_ctx_memory(ctx, &avail, &total), REEL_OK);
    /* a share of 2 MiB past the model: a handful of blocks, exactly computable */
    reel_model_info in = REEL_MODEL_INFO_INIT;
    cr_assert_eq(reel_model_info_get(m, &in), REEL_OK);
    cr_assert_eq(reel_model_kv_blocks(m, &o, NULL, 0.5, &blocks, &tokens), REEL_OK, "%s", reel_ctx_last_error(ctx));
    cr_assert_gt(blocks, 0);
    cr_assert_eq(tokens, (int64_t)blocks * 16, "blocks of the default 16 tokens");
    uint64_t per_block = in.kv_bytes_per_token * 16;
    double share = 0.5 * (double)total < (double)avail ? 0.5 * (double)total : (double)avail;
    cr_assert_leq((double)blocks * (double)per_block, share, "the cache alone fits the share");
    cr_assert_gt((double)(blocks + 1) * (double)per_block + (double)in.param_bytes, share - (double)(64 << 20),
                 "one block more would not fit (within the plan's other bytes)");
    reel_model_close(m);
    reel_ctx_destroy(ctx);
}

/* A sampled generation of `n` tokens from family f's checkpoint in dir:
 * the prompt, then one token at a time, each row drawing from the seed's
 * stream at its position (temperature 0: greedy). */
static void sample_run(reel_ctx *ctx, const mfam *f, const char *dir, float temp, uint64_t seed, int n, int32_t *out)
{
    reel_model *m = NULL;
    cr_assert_eq(reel_model_open(ctx, dir, &m), REEL_OK, "%s: %s", f->name, reel_ctx_last_error(ctx));
    const int bs = 4, nb = (PROMPT + n + bs - 1) / bs;
    reel_model_opts o = small_opts(bs, nb);
    o.sample = 1;
    reel_plan *p = NULL;
    cr_assert_eq(reel_model_compile(m, &o, NULL, &p), REEL_OK, "%s: %s", f->name, reel_ctx_last_error(ctx));
    reel_model_close(m);
    int32_t tok[PROMPT], pos[PROMPT], slots[PROMPT], table[16], rng[PROMPT][REEL_SAMPLE_RNG];
    float par[PROMPT][REEL_SAMPLE_PARAMS];
    for (int i = 0; i < nb; i++)
        table[i] = i;
    for (int i = 0; i < PROMPT; i++)
        tok[i] = (int32_t)((i * 37 + 11) % f->vocab), pos[i] = slots[i] = i;
    for (int k = 0; k < n; k++) {
        int T = k == 0 ? PROMPT : 1;
        int32_t p0 = k == 0 ? 0 : PROMPT + k - 1, qs[2] = {0, T}, len = p0 + T;
        if (k > 0)
            pos[0] = slots[0] = p0, tok[0] = out[k - 1];
        for (int r = 0; r < T; r++) {
            par[r][REEL_SAMPLE_TEMPERATURE] = temp;
            par[r][REEL_SAMPLE_TOP_P] = 0.95f;
            par[r][REEL_SAMPLE_MIN_P] = 0.0f;
            par[r][REEL_SAMPLE_TOP_K] = 0.0f;
            rng[r][0] = (int32_t)(uint32_t)seed, rng[r][1] = (int32_t)(uint32_t)(seed >> 32);
            rng[r][2] = len, rng[r][3] = 0;
        }
        reel_step_info si = {REEL_STEP_INFO_HEAD, .num_tokens = T, .num_seqs = 1, .query_start = qs, .positions = pos,
                             .slot_mapping = slots, .context_lens = &len, .block_tables = table,
                             .block_table_stride = nb};
        cr_assert_eq(reel_plan_set_input(p, REEL_MODEL_INPUT_TOKENS, tok, T), REEL_OK);
        cr_assert_eq(reel_plan_set_input(p, REEL_MODEL_INPUT_SAMPLE_PARAMS, par, T), REEL_OK);
        cr_assert_eq(reel_plan_set_input(p, REEL_MODEL_INPUT_SAMPLE_RNG, rng, T), REEL_OK);
        cr_assert_eq(reel_step(p, &si), REEL_OK, "%s: %s", f->name, reel_ctx_last_error(ctx));
        const void *nx;
        int64_t rows;
        cr_assert_eq(reel_plan_output(p, REEL_MODEL_OUTPUT_NEXT, &nx, &rows), REEL_OK);
        out[k] = ((const int32_t *)nx)[rows - 1];
        cr_assert(out[k] >= 0 && out[k] < f->vocab, "%s: token %d", f->name, out[k]);
    }
    reel_plan_destroy(p);
}

/* Every family samples through the graph: the same seed gives the same
 * tokens twice, another seed others, temperature 0 the greedy tokens. */
Test(models, every_family_samples_and_a_seed_repeats_its_tokens)
{
    const char *names[] = {"Llama-3.1-8B", "Mistral-7B-v0.3", "Qwen2.5-0.5B", "Qwen3-0.6B"};
    reel_ctx *ctx = host();
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const mfam *f = family(names[i]);
        const char *dir = mf_tmpdir();
        mweights w;
        mf_write(f, REEL_F32, 0x5eed + (uint64_t)f->vocab, dir, &w, NULL, NULL);
        enum { N = 12 };
        int32_t a[N], b[N], c[N], g[N], t[PROMPT + GEN];
        sample_run(ctx, f, dir, 8.0f, 1, N, a);
        sample_run(ctx, f, dir, 8.0f, 1, N, b);
        sample_run(ctx, f, dir, 8.0f, 2, N, c);
        sample_run(ctx, f, dir, 0.0f, 1, GEN + 1, g);
        cr_expect_arr_eq(a, b, sizeof a, "%s: the same seed gave other tokens", f->name);
        cr_expect_arr_neq(a, c, sizeof a, "%s: two seeds gave the same %d tokens", f->name, N);
        double *logits = malloc(sizeof(double) * (PROMPT + GEN) * (size_t)f->vocab);
        run(ctx, f, REEL_F32, dir, t, logits, true);
        free(logits);
        cr_expect_arr_eq(g, t + PROMPT, sizeof(int32_t) * GEN, "%s: temperature 0 is not greedy", f->name);
        mf_weights_free(&w);
        mf_rmdir(dir);
    }
    reel_ctx_destroy(ctx);
}
