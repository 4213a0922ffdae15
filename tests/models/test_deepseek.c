/* DeepSeek V3 (model_type deepseek_v3, kimi_k2) on the host backend: the
 * config.json of tests/models/fixture.c (DeepSeek-V3's, and Moonlight's
 * with a full q projection and rotate_half's rope pairs, shrunk), seeded
 * weights under transformers' names, opened, its shape read back, compiled
 * in strict mode (every step a replay), and stepped: a prompt, greedy
 * decode steps, then a mixed step in which the first sequence decodes once
 * more while a second one prefills every token the first has seen. The
 * logits of every position against a float64 forward pass written from
 * transformers' DeepseekV3 modeling code (the latent attention in its
 * non-absorbed form, the grouped sigmoid router): f32 weights within 2e-4
 * of the logits' scale, bf16 within 4%; a decode step's row against the
 * prefill's row of its position; the greedy tokens against the
 * reference's argmax. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/models/fixture.h"

#define PROMPT 9
#define GEN 4
#define N (PROMPT + GEN)          /* the first sequence's tokens after its decode steps */
#define NR (N + 1)                /* after the mixed step: the reference's length */
#define BS 4                      /* tokens a cache block */
#define NB ((NR + BS - 1) / BS)   /* blocks a sequence */

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

static const mfam *family(const char *name)
{
    for (int i = 0; i < mf_nfamilies; i++)
        if (strcmp(mf_families[i].name, name) == 0)
            return &mf_families[i];
    cr_assert_fail("no family %s", name);
    return NULL;
}

/* reel_model_info of f's model in dtype dt (has_weights: opened from a
 * checkpoint), and the tensors it reads. */
static void check_info(const reel_model *m, const mfam *f, reel_dtype dt, bool has_weights)
{
    const mfds *ds = f->ds;
    reel_model_info in = REEL_MODEL_INFO_INIT;
    cr_assert_eq(reel_model_info_get(m, &in), REEL_OK);
    cr_expect_eq(in.family, (int)REEL_MODEL_DEEPSEEK_V3, "%s", f->name);
    cr_expect_str_eq(reel_model_family_name((reel_model_family)in.family), "deepseek_v3");
    cr_expect(in.layers == f->layers && in.hidden == f->hidden && in.heads == f->heads && in.ffn == f->ffn &&
                  in.vocab == f->vocab && in.head_dim == ds->qk_rope,
              "%s: shape %d %d %d %d %d, head_dim %d", f->name, in.layers, in.hidden, in.heads, in.ffn, in.vocab,
              in.head_dim);
    cr_expect(!in.tied && !in.qkv_bias && !in.o_bias && !in.qk_norm, "%s", f->name);
    cr_expect(in.dtype == dt && in.has_weights == has_weights, "%s", f->name);
    cr_expect(in.rms_norm_eps == f->eps && in.rope_theta == f->theta && in.max_position_embeddings == f->max_pos,
              "%s: eps %g theta %g max_pos %d", f->name, in.rms_norm_eps, in.rope_theta, in.max_position_embeddings);
    cr_expect(in.rope_type == (int)f->rope_type && in.rope_factor == (f->rope.type ? f->rope.factor : 1.0), "%s",
              f->name);
    cr_expect(in.kv_lora_rank == ds->kv_lora && in.q_lora_rank == ds->q_lora && in.qk_nope_head_dim == ds->qk_nope &&
                  in.qk_rope_head_dim == ds->qk_rope && in.v_head_dim == ds->v_dim,
              "%s: kv_lora_rank %d q_lora_rank %d qk_nope %d qk_rope %d v %d", f->name, in.kv_lora_rank,
              in.q_lora_rank, in.qk_nope_head_dim, in.qk_rope_head_dim, in.v_head_dim);
    cr_expect(in.experts == f->experts && in.experts_per_token == f->topk && in.expert_ffn == f->moe_ffn &&
                  in.moe_layers == f->layers - ds->first_dense && in.shared_expert_ffn == ds->n_shared * f->moe_ffn,
              "%s: experts %d, %d a token, ffn %d, %d layers, shared ffn %d", f->name, in.experts,
              in.experts_per_token, in.expert_ffn, in.moe_layers, in.shared_expert_ffn);
    /* the latent cache: one row of L + R a token and layer */
    uint64_t kvb = (uint64_t)f->layers * (uint64_t)(ds->kv_lora + ds->qk_rope) * reel_dtype_size(dt);
    cr_expect_eq(in.kv_bytes_per_token, kvb, "%s: kv_bytes_per_token %llu", f->name,
                 (unsigned long long)in.kv_bytes_per_token);
    cr_expect(in.active_param_bytes > 0 && in.active_param_bytes < in.param_bytes, "%s", f->name);
    /* the embedding; a layer's norms, q (q_a, its norm, q_b; or q_proj),
     * kv_a, its norm, kv_b, o; the dense MLP's 3, or the router, its bias,
     * 3 an expert and the shared experts' 3; the final norm, the lm head */
    int want = 3;
    for (int l = 0; l < f->layers; l++)
        want += 6 + (ds->q_lora ? 3 : 1) + (l < ds->first_dense ? 3 : 2 + 3 * f->experts + 3);
    cr_expect_eq(reel_model_tensor_count(m), want, "%s", f->name);
}

/* The rows of a run: seq0[p] the first sequence's logits at position p
 * (the prompt's, then one a decode step, the last in the mixed step),
 * seq1[p] the second sequence's prefill of the same tokens in the mixed
 * step; tok the prompt, then the tokens fed (each the argmax of the row
 * before). */
typedef struct ds_run {
    int32_t tok[NR];
    double *seq0, *seq1;   /* [NR][vocab] */
} ds_run;

/* One step of nseq sequences (query_start qs): sets the tokens, steps,
 * copies the logits' rows into rows[T][vocab] and checks each next token
 * is its row's argmax. */
static void step(reel_ctx *ctx, reel_plan *p, const mfam *f, const int32_t *tok, int T, int nseq, const int32_t *qs,
                 const int32_t *pos, const int32_t *slots, const int32_t *lens, const int32_t *tables, double *rows,
                 int32_t *next)
{
    reel_step_info si = {REEL_STEP_INFO_HEAD, .num_tokens = T, .num_seqs = nseq, .query_start = qs,
                         .positions = pos, .slot_mapping = slots, .context_lens = lens, .block_tables = tables,
                         .block_table_stride = NB};
    cr_assert_eq(reel_plan_set_input(p, REEL_MODEL_INPUT_TOKENS, tok, T), REEL_OK);
    cr_assert_eq(reel_step(p, &si), REEL_OK, "%s: %s", f->name, reel_ctx_last_error(ctx));
    const void *out, *nx;
    int64_t nrows, re;
    reel_dtype odt;
    cr_assert_eq(reel_plan_output_desc(p, REEL_MODEL_OUTPUT_LOGITS, &odt, &re), REEL_OK);
    cr_assert_eq(re, f->vocab);
    cr_assert_eq(reel_plan_output(p, REEL_MODEL_OUTPUT_LOGITS, &out, &nrows), REEL_OK);
    cr_assert_eq(nrows, T);
    cr_assert_eq(reel_plan_output(p, REEL_MODEL_OUTPUT_NEXT, &nx, &nrows), REEL_OK);
    cr_assert_eq(nrows, T);
    for (int r = 0; r < T; r++) {
        double *row = rows + (size_t)r * f->vocab;
        int best = 0;
        for (int i = 0; i < f->vocab; i++) {
            row[i] = load(out, odt, (size_t)r * f->vocab + i);
            if (row[i] > row[best])
                best = i;
        }
        next[r] = ((const int32_t *)nx)[r];
        cr_expect_eq(next[r], best, "%s: next_token %d of row %d is not its argmax %d", f->name, next[r], r, best);
    }
}

/* Opens dir (f in dtype dt), checks its info, compiles (capture: strict,
 * every step a replay of bucket 1 or 16; else every step eager) and runs
 * the steps of ds_run. */
static void run(reel_ctx *ctx, const mfam *f, reel_dtype dt, const char *dir, bool capture, ds_run *r)
{
    reel_model *m = NULL;
    cr_assert_eq(reel_model_open(ctx, dir, &m), REEL_OK, "%s: %s", f->name, reel_ctx_last_error(ctx));
    check_info(m, f, dt, true);
    reel_model_opts o = REEL_MODEL_OPTS_INIT;
    o.num_buckets = 2;
    o.buckets[0] = 1;
    o.buckets[1] = 16;
    o.max_context = 64;
    o.max_seqs = 2;
    o.block_size = BS;
    o.num_blocks = 2 * NB;
    o.logits = 1;
    reel_compile_opts co = REEL_COMPILE_OPTS_INIT;
    co.no_capture = !capture;
    co.strict = capture;
    reel_plan *p = NULL;
    cr_assert_eq(reel_model_compile(m, &o, &co, &p), REEL_OK, "%s: %s", f->name, reel_ctx_last_error(ctx));
    reel_model_close(m); /* the plan holds its own copy of the weights */
    /* sequence 0 on blocks 0 .., sequence 1 on blocks NB ..: slot = block * BS + offset */
    int32_t tables[2][NB];
    for (int i = 0; i < NB; i++)
        tables[0][i] = i, tables[1][i] = NB + i;
    int32_t pos[1 + NR], slots[1 + NR], next[1 + NR], qs[3], lens[2], tok[1 + NR];
    const size_t V = (size_t)f->vocab;
    double *rows = malloc((1 + NR) * V * sizeof *rows);
    cr_assert_not_null(rows);
    for (int i = 0; i < PROMPT; i++)
        r->tok[i] = (int32_t)((i * 37 + 11) % f->vocab), pos[i] = slots[i] = i;
    /* the prompt, then GEN decode steps, each fed the token before */
    for (int k = 0; k <= GEN; k++) {
        int T = k == 0 ? PROMPT : 1, p0 = k == 0 ? 0 : PROMPT + k - 1;
        if (k > 0)
            pos[0] = slots[0] = p0;
        qs[0] = 0, qs[1] = T, lens[0] = p0 + T;
        step(ctx, p, f, r->tok + p0, T, 1, qs, pos, slots, lens, &tables[0][0], rows, next);
        memcpy(r->seq0 + (size_t)p0 * V, rows, (size_t)T * V * sizeof *rows);
        r->tok[PROMPT + k] = next[T - 1];
    }
    /* the mixed step: sequence 0 decodes tok[N] at position N while
     * sequence 1 prefills tok[0 .. N] */
    tok[0] = r->tok[N], pos[0] = N, slots[0] = N;
    for (int i = 0; i < NR; i++)
        tok[1 + i] = r->tok[i], pos[1 + i] = i, slots[1 + i] = NB * BS + i;
    qs[0] = 0, qs[1] = 1, qs[2] = 1 + NR, lens[0] = lens[1] = NR;
    step(ctx, p, f, tok, 1 + NR, 2, qs, pos, slots, lens, &tables[0][0], rows, next);
    memcpy(r->seq0 + (size_t)N * V, rows, V * sizeof *rows);
    memcpy(r->seq1, rows + V, (size_t)NR * V * sizeof *rows);
    free(rows);
    reel_plan_destroy(p);
}

static double max_abs(const double *a, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++)
        m = fmax(m, fabs(a[i]));
    return m;
}

/* The largest |a - b| over rows [n][v], and its row. */
static double max_diff(const double *a, const double *b, int n, int v, int *at)
{
    double m = 0;
    for (int r = 0; r < n; r++)
        for (int i = 0; i < v; i++)
            if (fabs(a[(size_t)r * v + i] - b[(size_t)r * v + i]) > m) {
                m = fabs(a[(size_t)r * v + i] - b[(size_t)r * v + i]);
                *at = r;
            }
    return m;
}

/* f's logits (weights in dt, the choice biases in bias_dt) against the
 * float64 reference within rtol of their scale at every position of both
 * sequences; a decode step's row within twin of the prefill's; every fed
 * token the reference's argmax (or within the tolerance of it). In f32:
 * what the check can tell apart (the rope's pair order, its scaling, yarn's
 * mscale in the softmax scale, the choice bias) misses by more, and eager
 * steps give the replayed bits. */
static void check_model(const mfam *f, reel_dtype dt, reel_dtype bias_dt, double rtol, double twin)
{
    reel_ctx *ctx = host();
    const char *d = mf_tmpdir();
    char dir[96];
    snprintf(dir, sizeof dir, "%s", d);
    mweights w;
    mf_write_bias(f, dt, bias_dt, 0x5eed + (uint64_t)f->vocab, dir, &w);
    const int V = f->vocab;
    const size_t nl = (size_t)NR * V;
    ds_run r = {.seq0 = calloc(nl, sizeof(double)), .seq1 = calloc(nl, sizeof(double))};
    double *want = calloc(nl, sizeof *want), *other = calloc(nl, sizeof *other);
    cr_assert(r.seq0 && r.seq1 && want && other);
    run(ctx, f, dt, dir, true, &r);
    double inv[32], attn;
    tf_inv_freq(&f->rope, f->ds->qk_rope, f->theta, f->max_pos, inv, &attn);
    mf_reference(f, &w, r.tok, NR, inv, attn, dt, want);
    const char *dn = reel_dtype_name(dt);
    double scale = max_abs(want, nl);
    int at0 = 0, at1 = 0, att = 0;
    double e0 = max_diff(r.seq0, want, NR, V, &at0), e1 = max_diff(r.seq1, want, NR, V, &at1);
    cr_expect(e0 <= rtol * scale, "%s (%s): the prompt's and decode steps' logits differ from the float64 reference "
              "by %.3g of their scale %.3g at position %d (tolerance %.3g)", f->name, dn, e0 / scale, scale, at0, rtol);
    cr_expect(e1 <= rtol * scale, "%s (%s): the mixed step's prefill differs from the float64 reference by %.3g of "
              "the scale at position %d (tolerance %.3g)", f->name, dn, e1 / scale, at1, rtol);
    double et = max_diff(r.seq0, r.seq1, NR, V, &att);
    cr_expect(et <= twin * scale, "%s (%s): the decode step at position %d differs from the prefill's row by %.3g of "
              "the scale (tolerance %.3g)", f->name, dn, att, et / scale, twin);
    /* the greedy tokens: the reference's argmax, or as good within the tolerance */
    for (int p = PROMPT - 1; p < N; p++) {
        const double *row = want + (size_t)p * V;
        int best = 0;
        for (int i = 1; i < V; i++)
            if (row[i] > row[best])
                best = i;
        cr_expect(row[r.tok[p + 1]] >= row[best] - 2 * rtol * scale, "%s (%s): greedy token %d at position %d, the "
                  "reference's argmax %d is better by %.3g of the scale", f->name, dn, r.tok[p + 1], p + 1, best,
                  (row[best] - row[r.tok[p + 1]]) / scale);
    }
    if (dt == REEL_F32) {
        /* the check sees each of these: a reference without it misses */
        int at;
        double miss;
        mfam g = *f;
        mfds gd = *f->ds;
        g.ds = &gd;
        gd.rope_interleave = !gd.rope_interleave;
        mf_reference(&g, &w, r.tok, NR, inv, attn, dt, other);
        miss = max_diff(r.seq0, other, NR, V, &at);
        cr_expect(miss > 4 * rtol * scale, "%s: the other rope pair order misses by only %.3g of the scale", f->name,
                  miss / scale);
        if (f->rope.type) {
            tf_rope plain = {NULL, 1, 0, 0, 0, -1, 0, 0, 0, 0, -1};
            double inv0[32], attn0;
            tf_inv_freq(&plain, f->ds->qk_rope, f->theta, f->max_pos, inv0, &attn0);
            mf_reference(f, &w, r.tok, NR, inv0, attn0, dt, other);
            miss = max_diff(r.seq0, other, NR, V, &at);
            cr_expect(miss > 4 * rtol * scale, "%s: the unscaled rope misses by only %.3g of the scale", f->name,
                      miss / scale);
            g = *f;
            g.rope.mscale_all_dim = 0; /* the softmax scale without yarn's mscale^2 */
            mf_reference(&g, &w, r.tok, NR, inv, attn, dt, other);
            miss = max_diff(r.seq0, other, NR, V, &at);
            cr_expect(miss > 4 * rtol * scale, "%s: the softmax scale without mscale^2 misses by only %.3g of the "
                      "scale", f->name, miss / scale);
        }
        /* the choice bias zeroed (w is not read after this): other experts chosen */
        for (int i = 0; i < w.n; i++)
            if (strstr(w.name[i], "e_score_correction_bias"))
                memset(w.v[i], 0, (size_t)f->experts * sizeof(double));
        mf_reference(f, &w, r.tok, NR, inv, attn, dt, other);
        miss = max_diff(r.seq0, other, NR, V, &at);
        cr_expect(miss > 4 * rtol * scale, "%s: the router without its choice bias misses by only %.3g of the scale",
                  f->name, miss / scale);
        /* replay and eager give the same bits */
        ds_run e = {.seq0 = calloc(nl, sizeof(double)), .seq1 = calloc(nl, sizeof(double))};
        cr_assert(e.seq0 && e.seq1);
        run(ctx, f, dt, dir, false, &e);
        cr_expect(!memcmp(e.tok, r.tok, sizeof r.tok) && !memcmp(e.seq0, r.seq0, nl * sizeof(double)) &&
                      !memcmp(e.seq1, r.seq1, nl * sizeof(double)),
                  "%s: eager steps differ from replayed ones", f->name);
        free(e.seq0), free(e.seq1);
    }
    free(r.seq0), free(r.seq1), free(want), free(other);
    mf_weights_free(&w);
    mf_rmdir(dir);
    reel_ctx_destroy(ctx);
}

Test(models_deepseek, deepseek_v3_with_q_lora_yarn_and_expert_groups_matches_float64_in_f32_and_bf16)
{
    check_model(family("DeepSeek-V3"), REEL_F32, REEL_F32, 2e-4, 1e-5);
    check_model(family("DeepSeek-V3"), REEL_BF16, REEL_F32, 0.04, 0.01);
}

Test(models_deepseek, a_full_q_projection_and_rotate_half_rope_without_groups_matches_float64_in_f32_and_bf16)
{
    check_model(family("Moonlight-16B-A3B-halves"), REEL_F32, REEL_F32, 2e-4, 1e-5);
    check_model(family("Moonlight-16B-A3B-halves"), REEL_BF16, REEL_F32, 0.04, 0.01);
}

/* The choice bias as the model's bf16 (not what the real checkpoints have,
 * but what a conversion may write): widened to float32 at bind. */
Test(models_deepseek, a_bf16_choice_bias_is_widened_at_bind_and_matches_float64)
{
    check_model(family("DeepSeek-V3"), REEL_BF16, REEL_BF16, 0.04, 0.01);
}

/* A choice bias neither float32 nor the model's dtype is refused, naming it. */
Test(models_deepseek, a_choice_bias_of_another_dtype_is_refused_naming_it)
{
    const mfam *f = family("DeepSeek-V3");
    reel_ctx *ctx = host();
    const char *d = mf_tmpdir();
    char dir[96];
    snprintf(dir, sizeof dir, "%s", d);
    mweights w;
    mf_write_bias(f, REEL_F32, REEL_BF16, 3, dir, &w);
    reel_model *m = (reel_model *)1;
    cr_expect_eq(reel_model_open(ctx, dir, &m), REEL_E_DTYPE, "%s", reel_ctx_last_error(ctx));
    cr_expect_null(m);
    cr_expect(strstr(reel_ctx_last_error(ctx), "model.layers.1.mlp.gate.e_score_correction_bias") != NULL, "%s",
              reel_ctx_last_error(ctx));
    mf_weights_free(&w);
    mf_rmdir(dir);
    reel_ctx_destroy(ctx);
}

/* From config.json alone: the shape of both fixtures, and Kimi K2's
 * model_type (its config: DeepSeek V3's with 384 experts in one group,
 * yarn of factor 32; shrunk) as the same family. */
Test(models_deepseek, the_info_says_the_latent_attention_and_kimi_k2_is_the_same_family)
{
    reel_ctx *ctx = host();
    const char *names[] = {"DeepSeek-V3", "Moonlight-16B-A3B-halves"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const mfam *f = family(names[i]);
        char *cfg = mf_config(f, REEL_BF16);
        reel_model *m = NULL;
        cr_assert_eq(reel_model_parse(ctx, cfg, 0, &m), REEL_OK, "%s: %s", f->name, reel_ctx_last_error(ctx));
        free(cfg);
        check_info(m, f, REEL_BF16, false);
        reel_model_close(m);
    }
    const char *kimi =
        "{\"architectures\": [\"DeepseekV3ForCausalLM\"], \"attention_bias\": false, \"attention_dropout\": 0.0, "
        "\"aux_loss_alpha\": 0.001, \"bos_token_id\": 163584, \"eos_token_id\": 163585, \"first_k_dense_replace\": 1, "
        "\"hidden_act\": \"silu\", \"hidden_size\": 64, \"initializer_range\": 0.02, \"intermediate_size\": 96, "
        "\"kv_lora_rank\": 32, \"max_position_embeddings\": 131072, \"model_type\": \"kimi_k2\", "
        "\"moe_intermediate_size\": 16, \"moe_layer_freq\": 1, \"n_group\": 1, \"n_routed_experts\": 24, "
        "\"n_shared_experts\": 1, \"norm_topk_prob\": true, \"num_attention_heads\": 4, \"num_experts_per_tok\": 8, "
        "\"num_hidden_layers\": 2, \"num_key_value_heads\": 4, \"num_nextn_predict_layers\": 0, "
        "\"pretraining_tp\": 1, \"q_lora_rank\": 24, \"qk_nope_head_dim\": 16, \"qk_rope_head_dim\": 8, "
        "\"rms_norm_eps\": 1e-06, \"rope_scaling\": {\"beta_fast\": 1.0, \"beta_slow\": 1.0, \"factor\": 32.0, "
        "\"mscale\": 1.0, \"mscale_all_dim\": 1.0, \"original_max_position_embeddings\": 4096, \"type\": \"yarn\"}, "
        "\"rope_theta\": 50000.0, \"routed_scaling_factor\": 2.827, \"scoring_func\": \"sigmoid\", \"seq_aux\": true, "
        "\"tie_word_embeddings\": false, \"topk_group\": 1, \"topk_method\": \"noaux_tc\", "
        "\"torch_dtype\": \"bfloat16\", \"transformers_version\": \"4.48.3\", \"use_cache\": true, "
        "\"v_head_dim\": 16, \"vocab_size\": 256}";
    reel_model *m = NULL;
    cr_assert_eq(reel_model_parse(ctx, kimi, 0, &m), REEL_OK, "%s", reel_ctx_last_error(ctx));
    reel_model_info in = REEL_MODEL_INFO_INIT;
    cr_assert_eq(reel_model_info_get(m, &in), REEL_OK);
    cr_expect_eq(in.family, (int)REEL_MODEL_DEEPSEEK_V3);
    cr_expect(in.experts == 24 && in.experts_per_token == 8 && in.moe_layers == 1 && in.kv_lora_rank == 32 &&
                  in.q_lora_rank == 24 && in.rope_type == REEL_ROPE_YARN && in.rope_factor == 32.0,
              "experts %d, %d a token, %d layers, kv_lora_rank %d, q_lora_rank %d, rope %d x%g", in.experts,
              in.experts_per_token, in.moe_layers, in.kv_lora_rank, in.q_lora_rank, in.rope_type, in.rope_factor);
    reel_model_close(m);
    reel_ctx_destroy(ctx);
}

/* ---- DCP over the latent cache ------------------------------------------------ */

#include "tests/parallel/ranks.h"

enum { DCP_STEPS = 1 + GEN };

/* One rank of a DCP world (n 1: the plain model): the prompt, then GEN
 * decode steps of fixed tokens; the logits of every row into out. Each
 * rank's cache holds its own pages (its block table the same local ids);
 * context lengths and positions are global. No asserts off the test's
 * thread: the status and message go to the world. */
typedef struct dcp_job {
    const char *dir;
    int n, interleave;
    float *out[RK_MAX];   /* [N][vocab] */
    int vocab;
} dcp_job;

static void dcp_body(rk_world *w, int r, void *arg)
{
    dcp_job *j = arg;
    reel_ctx *ctx = w->ctx[r];
    reel_model *m = NULL;
    reel_plan *p = NULL;
    reel_status st = reel_model_open(ctx, j->dir, &m);
    reel_model_opts o = REEL_MODEL_OPTS_INIT;
    o.num_buckets = 2;
    o.buckets[0] = 1;
    o.buckets[1] = 16;
    o.max_context = 64;
    o.max_seqs = 1;
    o.block_size = BS;
    o.num_blocks = NB;
    o.logits = 1;
    o.dcp_size = j->n;
    o.dcp_rank = r;
    o.dcp_interleave = j->interleave;
    reel_compile_opts co = REEL_COMPILE_OPTS_INIT;
    co.strict = true;
    co.comm = j->n > 1 ? w->comm[r] : NULL;
    if (st == REEL_OK)
        st = reel_model_compile(m, &o, &co, &p);
    reel_model_close(m);
    int32_t table[NB], tok[N], pos[N], slots[N], qs[2], len;
    for (int i = 0; i < NB; i++)
        table[i] = i;
    for (int i = 0; i < N; i++)
        tok[i] = (int32_t)((i * 37 + 11) % j->vocab), pos[i] = i, slots[i] = i;
    for (int k = 0; st == REEL_OK && k < DCP_STEPS; k++) {
        int T = k == 0 ? PROMPT : 1, p0 = k == 0 ? 0 : PROMPT + k - 1;
        qs[0] = 0, qs[1] = T, len = p0 + T;
        reel_step_info si = {REEL_STEP_INFO_HEAD, .num_tokens = T, .num_seqs = 1, .query_start = qs,
                             .positions = pos + p0, .slot_mapping = slots + p0, .context_lens = &len,
                             .block_tables = table, .block_table_stride = NB};
        st = reel_plan_set_input(p, REEL_MODEL_INPUT_TOKENS, tok + p0, T);
        if (st == REEL_OK)
            st = reel_step(p, &si);
        const void *out = NULL;
        int64_t rows = 0;
        if (st == REEL_OK)
            st = reel_plan_output(p, REEL_MODEL_OUTPUT_LOGITS, &out, &rows);
        if (st == REEL_OK)
            memcpy(j->out[r] + (size_t)p0 * j->vocab, out, (size_t)T * j->vocab * sizeof(float));
    }
    w->st[r] = st;
    if (st != REEL_OK)
        snprintf(w->msg[r], sizeof w->msg[r], "%s", reel_ctx_last_error(ctx));
    reel_plan_destroy(p);
}

static void dcp_world(dcp_job *j)
{
    rk_world w;
    cr_assert_eq(rk_open(&w, j->n, 0), REEL_OK);
    for (int r = 0; r < j->n; r++) {
        j->out[r] = calloc((size_t)N * j->vocab, sizeof(float));
        cr_assert_not_null(j->out[r]);
    }
    rk_run(&w, dcp_body, j);
    for (int r = 0; r < j->n; r++)
        cr_assert_eq(w.st[r], REEL_OK, "DCP %d ranks, rank %d: %s", j->n, r, w.msg[r]);
    rk_close(&w);
}

/* DCP over 2 and 4 ranks (interleave 1 and the block size), the exchange
 * all-to-all: every rank's logits equal the plain model's within f32
 * rounding (the combine adds the shards' partials in another order). */
Test(models_deepseek, dcp_over_2_and_4_ranks_gives_the_one_rank_logits)
{
    const mfam *f = family("DeepSeek-V3");
    const char *dir = mf_tmpdir();
    mweights w;
    mf_write(f, REEL_F32, 7, dir, &w, NULL, NULL);
    dcp_job one = {.dir = dir, .n = 1, .interleave = 1, .vocab = f->vocab};
    dcp_world(&one);
    double scale = 0;
    for (size_t i = 0; i < (size_t)N * f->vocab; i++)
        scale = fmax(scale, fabs(one.out[0][i]));
    const int cases[][2] = {{2, 1}, {2, BS}, {4, 1}, {4, BS}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        dcp_job j = {.dir = dir, .n = cases[c][0], .interleave = cases[c][1], .vocab = f->vocab};
        dcp_world(&j);
        for (int r = 0; r < j.n; r++) {
            double worst = 0;
            for (size_t i = 0; i < (size_t)N * f->vocab; i++)
                worst = fmax(worst, fabs((double)j.out[r][i] - one.out[0][i]));
            cr_expect(worst <= 1e-5 * scale, "DCP %d ranks, interleave %d, rank %d: logits differ by %g of %g",
                      j.n, j.interleave, r, worst, scale);
            free(j.out[r]);
        }
    }
    free(one.out[0]);
    mf_weights_free(&w);
    mf_rmdir(dir);
}
