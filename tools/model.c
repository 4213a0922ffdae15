/* The demo transformer: graph declaration and seeded weights (see model.h). */
#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int model_head_dim(const model_config *c) { return c->head_dim > 0 ? c->head_dim : c->hidden / c->heads; }

double model_flop_per_token(const model_config *c)
{
    double h = c->hidden, kv = (double)c->kv_heads * model_head_dim(c), f = c->ffn;
    double layer = h * h + 2.0 * h * kv + h * h + h * 2.0 * f + f * h;
    return 2.0 * ((double)c->layers * layer + h * c->vocab);
}

int model_config_resolve(model_config *c, char *err, size_t err_len)
{
    if (c->kv_heads == 0) c->kv_heads = c->heads;
    if (c->ffn == 0) c->ffn = 2 * c->hidden;
    const char *bad = NULL;
    if (c->layers < 1) bad = "--layers must be >= 1";
    else if (c->hidden < 2 || c->heads < 1) bad = "--hidden and --heads must be positive";
    else if (c->head_dim < 0 || (!c->hf && c->head_dim != 0)) bad = "head_dim must be positive (and is set by a checkpoint only)";
    else if (c->head_dim == 0 && c->hidden % c->heads != 0) bad = "--hidden must be a multiple of --heads";
    else if (model_head_dim(c) % 2 != 0) bad = "--hidden / --heads (the head dim) must be even for rope";
    else if (c->kv_heads < 1 || c->heads % c->kv_heads != 0) bad = "heads must be a multiple of kv heads";
    else if (c->vocab < 2) bad = "--vocab must be >= 2";
    else if (c->block_size < 1 || c->num_blocks < 1) bad = "block size and block count must be positive";
    else if (c->dtype != REEL_F32 && c->dtype != REEL_F16 && c->dtype != REEL_BF16)
        bad = "--dtype must be f32, f16 or bf16";
    if (bad) snprintf(err, err_len, "%s", bad);
    return bad ? -1 : 0;
}

/* ---- graph ---------------------------------------------------------------- */

static reel_tensor weight(reel_graph *g, const model_config *c, const char *name, int ndim, int64_t d0,
                          int64_t d1)
{
    int64_t dims[2] = {d0, d1};
    reel_tensor t = reel_param(g, name, c->dtype, ndim, dims);
    if (t.id != 0) reel_param_defer(g, t);
    return t;
}

static reel_tensor layer(reel_graph *g, const model_config *c, int i, reel_tensor h, reel_tensor pos)
{
    char n[64];
    const int64_t D = c->hidden, Dh = model_head_dim(c), KV = (int64_t)c->kv_heads * Dh;
#define W2(suffix, a, b) (snprintf(n, sizeof n, "l%d." suffix, i), weight(g, c, n, 2, (a), (b)))
#define W1(suffix, a) (snprintf(n, sizeof n, "l%d." suffix, i), weight(g, c, n, 1, (a), 0))
    reel_tensor x = reel_rmsnorm(g, h, W1("attn_norm", D), c->eps);
    reel_tensor q = reel_matmul(g, x, W2("wq", D, D), false);
    reel_tensor k = reel_matmul(g, x, W2("wk", D, KV), false);
    reel_tensor v = reel_matmul(g, x, W2("wv", D, KV), false);
    q = reel_rope(g, q, pos, (int)Dh, (int)Dh, c->rope_theta);
    k = reel_rope(g, k, pos, (int)Dh, (int)Dh, c->rope_theta);
    int64_t cache_dims[4] = {c->num_blocks, c->block_size, c->kv_heads, Dh};
    snprintf(n, sizeof n, "l%d.k_cache", i);
    reel_tensor kc = reel_state(g, n, c->dtype, 4, cache_dims);
    snprintf(n, sizeof n, "l%d.v_cache", i);
    reel_tensor vc = reel_state(g, n, c->dtype, 4, cache_dims);
    reel_attn_params ap = { REEL_ATTN_PARAMS_HEAD, c->heads, c->kv_heads, (int)Dh, c->block_size, 0.0f};
    reel_tensor a = reel_paged_attention(g, q, k, v, kc, vc, &ap);
    h = reel_add(g, h, reel_matmul(g, a, W2("wo", D, D), false));
    x = reel_rmsnorm(g, h, W1("ffn_norm", D), c->eps);
    reel_tensor gu = reel_matmul(g, x, W2("w_gate_up", D, 2 * (int64_t)c->ffn), false);
    reel_tensor f = reel_silu_and_mul(g, gu);
    h = reel_add(g, h, reel_matmul(g, f, W2("w_down", c->ffn, D), false));
#undef W1
#undef W2
    snprintf(n, sizeof n, "l%d.out", i);
    reel_set_name(g, h, n);
    return h;
}

/* A Hugging Face Llama decoder layer: weights [out, in], HF's names. */
static reel_tensor hf_layer(reel_graph *g, const model_config *c, int i, reel_tensor h, reel_tensor pos)
{
    char n[96];
    const int64_t D = c->hidden, Dh = model_head_dim(c), Q = (int64_t)c->heads * Dh, KV = (int64_t)c->kv_heads * Dh;
#define HW(suffix, a, b, nd) (snprintf(n, sizeof n, "model.layers.%d." suffix, i), weight(g, c, n, (nd), (a), (b)))
#define PROJ(x, suffix, out, in, bias)                                                   \
    (tmp = reel_matmul(g, (x), HW(suffix ".weight", (out), (in), 2), true),              \
     (bias) ? reel_add(g, tmp, HW(suffix ".bias", (out), 0, 1)) : tmp)
    reel_tensor tmp;
    reel_tensor x = reel_rmsnorm(g, h, HW("input_layernorm.weight", D, 0, 1), c->eps);
    /* q, k and v as one projection (the checkpoint's three weights, and
     * biases, written into one parameter: hf_write_weights) split by views:
     * one kernel on the GPU, and no copies (docs/fusion.md). */
    reel_tensor qkv = PROJ(x, "self_attn.qkv_proj", Q + 2 * KV, D, c->qkv_bias);
    reel_tensor q = reel_view_cols(g, qkv, 0, Q);
    reel_tensor k = reel_view_cols(g, qkv, Q, KV);
    reel_tensor v = reel_view_cols(g, qkv, Q + KV, KV);
    q = reel_rope(g, q, pos, (int)Dh, (int)Dh, c->rope_theta);
    k = reel_rope(g, k, pos, (int)Dh, (int)Dh, c->rope_theta);
    int64_t cache_dims[4] = {c->num_blocks, c->block_size, c->kv_heads, Dh};
    snprintf(n, sizeof n, "l%d.k_cache", i);
    reel_tensor kc = reel_state(g, n, c->dtype, 4, cache_dims);
    snprintf(n, sizeof n, "l%d.v_cache", i);
    reel_tensor vc = reel_state(g, n, c->dtype, 4, cache_dims);
    reel_attn_params ap = { REEL_ATTN_PARAMS_HEAD, c->heads, c->kv_heads, (int)Dh, c->block_size, 0.0f};
    reel_tensor a = reel_paged_attention(g, q, k, v, kc, vc, &ap);
    h = reel_add(g, h, PROJ(a, "self_attn.o_proj", D, Q, c->o_bias));
    x = reel_rmsnorm(g, h, HW("post_attention_layernorm.weight", D, 0, 1), c->eps);
    reel_tensor gu = reel_matmul(g, x, HW("mlp.gate_up_proj.weight", 2 * (int64_t)c->ffn, D, 2), true);
    reel_tensor f = reel_silu_and_mul(g, gu);
    h = reel_add(g, h, reel_matmul(g, f, HW("mlp.down_proj.weight", D, c->ffn, 2), true));
#undef PROJ
#undef HW
    snprintf(n, sizeof n, "l%d.out", i);
    reel_set_name(g, h, n);
    return h;
}

void model_stage_layers(const model_config *c, int stage, int nstages, int *first, int *last)
{
    int base = c->layers / nstages, extra = c->layers % nstages;
    *first = stage * base + (stage < extra ? stage : extra);
    *last = *first + base + (stage < extra ? 1 : 0);
}

/* Stage `stage` of `nstages`: the first embeds the tokens, the last has the
 * head; the hidden state (the residual stream) goes to the next stage by a
 * send inside the graph, and the last stage's tokens come back to the first
 * the same way, so every stage's step is one replay. One stage: the model. */
reel_status model_build_stage(reel_ctx *ctx, const model_config *c, int stage, int nstages, reel_graph **out)
{
    reel_graph *g = NULL;
    *out = NULL;
    reel_status st = reel_graph_create(ctx, &g);
    if (st != REEL_OK) return st;
    int first, last;
    model_stage_layers(c, stage, nstages, &first, &last);
    int64_t tok_dims[1] = {REEL_DIM_TOKENS}, h_dims[2] = {REEL_DIM_TOKENS, c->hidden};
    reel_tensor ids = {0}, h;
    if (stage == 0) ids = reel_input(g, MODEL_INPUT_TOKENS, REEL_I32, 1, tok_dims);
    reel_tensor pos = reel_positions(g);
    reel_tensor embed = {0};
    if (stage == 0 || (c->hf && c->tied && stage == nstages - 1))
        embed = weight(g, c, c->hf ? "model.embed_tokens.weight" : "embed", 2, c->vocab, c->hidden);
    if (stage == 0) {
        h = reel_embedding(g, embed, ids);
    } else {
        h = reel_recv(g, "hidden_in", c->dtype, 2, h_dims, stage - 1);
    }
    for (int i = first; i < last; i++) h = c->hf ? hf_layer(g, c, i, h, pos) : layer(g, c, i, h, pos);
    if (stage < nstages - 1) {
        reel_send(g, h, stage + 1);
    } else {
        reel_tensor logits;
        if (c->hf) {
            h = reel_rmsnorm(g, h, weight(g, c, "model.norm.weight", 1, c->hidden, 0), c->eps);
            reel_tensor head = c->tied ? embed : weight(g, c, "lm_head.weight", 2, c->vocab, c->hidden);
            logits = reel_matmul(g, h, head, true);
        } else {
            h = reel_rmsnorm(g, h, weight(g, c, "final_norm", 1, c->hidden, 0), c->eps);
            logits = reel_matmul(g, h, weight(g, c, "lm_head", 2, c->hidden, c->vocab), false);
        }
        reel_set_name(g, logits, "logits");
        if (c->logits_output) reel_output(g, MODEL_OUTPUT_LOGITS, logits);
        reel_tensor next = reel_argmax(g, logits);
        if (nstages == 1) reel_output(g, MODEL_OUTPUT_NEXT, next);
        else reel_send(g, next, 0);
    }
    /* Built last, so it is issued after the stage's own send. */
    if (stage == 0 && nstages > 1)
        reel_output(g, MODEL_OUTPUT_NEXT, reel_recv(g, "next_in", REEL_I32, 1, tok_dims, nstages - 1));
    st = reel_graph_status(g);
    if (st != REEL_OK) goto fail;
    *out = g;
    return REEL_OK;
fail:
    reel_graph_destroy(g);
    return st;
}

reel_status model_build(reel_ctx *ctx, const model_config *c, reel_graph **out)
{
    return model_build_stage(ctx, c, 0, 1, out);
}

/* ---- weights -------------------------------------------------------------- */

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Each tensor's stream depends on the seed and its name only, so adding a
 * tensor or reordering the writes never changes another tensor's values. */
static uint64_t name_seed(uint64_t seed, const char *name)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (const char *s = name; *s; s++) h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
    uint64_t st = seed ^ h;
    return splitmix64(&st);
}

uint16_t model_f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

uint16_t model_f32_to_f16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds to >= 65520: inf */
    if (a < 0x38800000u) {                                    /* subnormal or zero in f16 */
        float m = fabsf(f) * 16777216.0f;                     /* units of 2^-24 */
        return (uint16_t)(sign | (uint16_t)nearbyintf(m));
    }
    uint32_t r = a + 0xfffu + ((a >> 13) & 1u) - (112u << 23);
    return (uint16_t)(sign | (uint16_t)(r >> 13));
}

static void store(void *dst, size_t i, reel_dtype dt, float v)
{
    if (dt == REEL_F32) ((float *)dst)[i] = v;
    else if (dt == REEL_BF16) ((uint16_t *)dst)[i] = model_f32_to_bf16(v);
    else ((uint16_t *)dst)[i] = model_f32_to_f16(v);
}

/* Where the seeded tensors go: written into a plan, or handed to a callback. */
typedef struct sink {
    reel_plan *p;
    model_tensor_fn fn;
    void *arg;
} sink;

/* Uniform in [center - scale, center + scale]. */
static reel_status write_one(const sink *k, const model_config *c, const char *name, int64_t rows, int64_t cols,
                             float center, float scale)
{
    size_t n = (size_t)(rows * (cols ? cols : 1));
    size_t bytes = n * reel_dtype_size(c->dtype);
    void *buf = malloc(bytes);
    if (!buf) return REEL_E_OOM;
    uint64_t s = name_seed(c->seed, name);
    for (size_t i = 0; i < n; i++) {
        double u = (double)(splitmix64(&s) >> 11) * (1.0 / 9007199254740992.0);
        store(buf, i, c->dtype, center + scale * (float)(2.0 * u - 1.0));
    }
    reel_status st = k->p ? reel_plan_write_param(k->p, name, buf, bytes) : k->fn(k->arg, name, rows, cols, buf);
    free(buf);
    return st;
}

/* Scale sqrt(3 / fan_in) gives unit variance of a matmul's outputs. */
static float fan_in_scale(int64_t fan_in) { return sqrtf(3.0f / (float)fan_in); }

static reel_status write_seeded(const sink *k, const model_config *c, int stage, int nstages)
{
    int first, last;
    model_stage_layers(c, stage, nstages, &first, &last);
    const int64_t D = c->hidden, Dh = model_head_dim(c), KV = (int64_t)c->kv_heads * Dh, F = c->ffn;
    char n[64];
    reel_status st = stage == 0 ? write_one(k, c, "embed", c->vocab, D, 0.0f, 1.0f) : REEL_OK;
    for (int i = first; i < last && st == REEL_OK; i++) {
        struct { const char *suffix; int64_t rows, cols; float center, scale; } w[] = {
            {"attn_norm", D, 0, 1.0f, 0.1f},
            {"wq", D, D, 0.0f, fan_in_scale(D)},
            {"wk", D, KV, 0.0f, fan_in_scale(D)},
            {"wv", D, KV, 0.0f, fan_in_scale(D)},
            {"wo", D, D, 0.0f, fan_in_scale(D)},
            {"ffn_norm", D, 0, 1.0f, 0.1f},
            {"w_gate_up", D, 2 * F, 0.0f, fan_in_scale(D)},
            {"w_down", F, D, 0.0f, fan_in_scale(F)},
        };
        for (size_t j = 0; j < sizeof w / sizeof w[0] && st == REEL_OK; j++) {
            snprintf(n, sizeof n, "l%d.%s", i, w[j].suffix);
            st = write_one(k, c, n, w[j].rows, w[j].cols, w[j].center, w[j].scale);
        }
    }
    if (stage < nstages - 1) return st;
    if (st == REEL_OK) st = write_one(k, c, "final_norm", D, 0, 1.0f, 0.1f);
    if (st == REEL_OK) st = write_one(k, c, "lm_head", D, c->vocab, 0.0f, fan_in_scale(D));
    return st;
}

reel_status model_write_stage_weights(reel_plan *p, const model_config *c, int stage, int nstages)
{
    sink k = {.p = p};
    return write_seeded(&k, c, stage, nstages);
}

reel_status model_each_seeded(const model_config *c, model_tensor_fn fn, void *arg)
{
    sink k = {.fn = fn, .arg = arg};
    return write_seeded(&k, c, 0, 1);
}

reel_status model_write_weights(reel_plan *p, const model_config *c) { return model_write_stage_weights(p, c, 0, 1); }

uint64_t model_weight_bytes(const model_config *c)
{
    const uint64_t D = (uint64_t)c->hidden, Dh = (uint64_t)model_head_dim(c), KV = (uint64_t)c->kv_heads * Dh;
    const uint64_t Q = (uint64_t)c->heads * Dh, F = (uint64_t)c->ffn, V = (uint64_t)c->vocab;
    uint64_t per_layer = 2 * D + 2 * D * Q + 2 * D * KV + D * 2 * F + F * D;
    if (c->hf && c->qkv_bias) per_layer += Q + 2 * KV;
    if (c->hf && c->o_bias) per_layer += D;
    uint64_t elems = V * D + (uint64_t)c->layers * per_layer + D + (c->hf && c->tied ? 0 : D * V);
    return elems * reel_dtype_size(c->dtype);
}

uint64_t model_kv_bytes(const model_config *c)
{
    uint64_t per = (uint64_t)c->num_blocks * (uint64_t)c->block_size * (uint64_t)c->kv_heads *
                   (uint64_t)model_head_dim(c) * reel_dtype_size(c->dtype);
    return 2 * per * (uint64_t)c->layers;
}
