/* The demo's model: the library's Llama (models.h) with a checkpoint's or
 * seeded weights (see model.h). */
#include "model.h"

#include <jansson.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int model_head_dim(const model_config *c) { return c->head_dim > 0 ? c->head_dim : c->hidden / c->heads; }

double model_flop_per_token(const model_config *c)
{
    double h = c->hidden, q = (double)c->heads * model_head_dim(c), kv = (double)c->kv_heads * model_head_dim(c);
    double f = c->ffn;
    double layer = h * q + 2.0 * h * kv + q * h + h * 2.0 * f + f * h;
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

/* ---- the seeded toy's tensors ------------------------------------------- */

/* Scale sqrt(3 / fan_in) gives unit variance of a matmul's outputs. */
static float fan_in_scale(int64_t fan_in) { return sqrtf(3.0f / (float)fan_in); }

/* A tensor of the toy's own layout ([in, out], gate and up side by side):
 * its shape and the uniform range [center - scale, center + scale] its
 * values are drawn from (a stream of the seed and its name). */
typedef struct toy_tensor {
    char name[32];
    int64_t rows, cols; /* cols 0: a vector */
    float center, scale;
} toy_tensor;

/* The toy tensor and the columns [c0, c0 + nc) of it that HF tensor `name`
 * is, transposed (a vector: copied). false for a name the toy lacks. */
static bool toy_source(const model_config *c, const char *name, toy_tensor *t, int64_t *c0, int64_t *nc)
{
    const int64_t D = c->hidden, Dh = model_head_dim(c), KV = (int64_t)c->kv_heads * Dh, F = c->ffn, V = c->vocab;
    int layer = -1, used = 0;
    char suffix[64] = "";
    memset(t, 0, sizeof *t);
    *c0 = 0;
    if (sscanf(name, "model.layers.%d.%n", &layer, &used) == 1 && used > 0)
        snprintf(suffix, sizeof suffix, "%s", name + used);
    static const struct {
        const char *hf, *toy;
        int rows, cols; /* 0 D, 1 KV, 2 2F, 3 F, -1 none */
        bool norm;
        int fan_in;     /* 0 D, 3 F */
        int half;       /* gate (0) or up (1) columns of w_gate_up; -1 all */
    } map[] = {
        {"input_layernorm.weight", "attn_norm", 0, -1, true, 0, -1},
        {"self_attn.q_proj.weight", "wq", 0, 0, false, 0, -1},
        {"self_attn.k_proj.weight", "wk", 0, 1, false, 0, -1},
        {"self_attn.v_proj.weight", "wv", 0, 1, false, 0, -1},
        {"self_attn.o_proj.weight", "wo", 0, 0, false, 0, -1},
        {"post_attention_layernorm.weight", "ffn_norm", 0, -1, true, 0, -1},
        {"mlp.gate_proj.weight", "w_gate_up", 0, 2, false, 0, 0},
        {"mlp.up_proj.weight", "w_gate_up", 0, 2, false, 0, 1},
        {"mlp.down_proj.weight", "w_down", 3, 0, false, 3, -1},
    };
    const int64_t ext[4] = {D, KV, 2 * F, F};
    if (layer >= 0) {
        for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
            if (strcmp(suffix, map[i].hf) != 0)
                continue;
            snprintf(t->name, sizeof t->name, "l%d.%s", layer, map[i].toy);
            t->rows = ext[map[i].rows];
            t->cols = map[i].cols < 0 ? 0 : ext[map[i].cols];
            t->center = map[i].norm ? 1.0f : 0.0f;
            t->scale = map[i].norm ? 0.1f : fan_in_scale(ext[map[i].fan_in]);
            *c0 = map[i].half == 1 ? F : 0;
            *nc = map[i].half >= 0 ? F : t->cols;
            return true;
        }
        return false;
    }
    if (strcmp(name, "model.embed_tokens.weight") == 0)
        *t = (toy_tensor){"embed", V, D, 0.0f, 1.0f};
    else if (strcmp(name, "model.norm.weight") == 0)
        *t = (toy_tensor){"final_norm", D, 0, 1.0f, 0.1f};
    else if (strcmp(name, "lm_head.weight") == 0)
        *t = (toy_tensor){"lm_head", D, V, 0.0f, fan_in_scale(D)};
    else
        return false;
    *nc = t->cols;
    return true;
}

/* The toy tensor's values, as the toy has always drawn them. */
static void toy_generate(const model_config *c, const toy_tensor *t, void *buf)
{
    size_t n = (size_t)(t->rows * (t->cols ? t->cols : 1));
    uint64_t s = name_seed(c->seed, t->name);
    for (size_t i = 0; i < n; i++) {
        double u = (double)(splitmix64(&s) >> 11) * (1.0 / 9007199254740992.0);
        store(buf, i, c->dtype, t->center + t->scale * (float)(2.0 * u - 1.0));
    }
}

/* The last toy tensor generated: gate and up are two halves of one. */
typedef struct toy_cache {
    const model_config *c;
    char name[32];
    void *buf;
} toy_cache;

static reel_status seeded(toy_cache *k, const reel_model_tensor *t, void *dst, size_t bytes)
{
    const model_config *c = k->c;
    toy_tensor tt;
    int64_t c0, nc;
    size_t es = reel_dtype_size(c->dtype);
    if (!toy_source(c, t->name, &tt, &c0, &nc))
        return REEL_E_NOT_FOUND;
    bool vec = tt.cols == 0, same = strcmp(t->name, "model.embed_tokens.weight") == 0;
    size_t want = (size_t)(vec || same ? tt.rows * (vec ? 1 : tt.cols) : tt.rows * nc) * es;
    if (want != bytes || t->dtype != c->dtype)
        return REEL_E_SHAPE;
    if (strcmp(k->name, tt.name) != 0) {
        free(k->buf);
        k->buf = malloc((size_t)(tt.rows * (vec ? 1 : tt.cols)) * es);
        k->name[0] = 0;
        if (!k->buf)
            return REEL_E_OOM;
        toy_generate(c, &tt, k->buf);
        snprintf(k->name, sizeof k->name, "%s", tt.name);
    }
    if (vec || same) { /* a vector, or the table ([V, D] in both layouts) */
        memcpy(dst, k->buf, bytes);
        return REEL_OK;
    }
    /* dst [nc][rows] = columns c0 .. c0 + nc - 1 of [rows][cols], transposed */
    for (int64_t r = 0; r < tt.rows; r++)
        for (int64_t j = 0; j < nc; j++)
            memcpy((char *)dst + (size_t)(j * tt.rows + r) * es,
                   (const char *)k->buf + (size_t)(r * tt.cols + c0 + j) * es, es);
    return REEL_OK;
}

reel_status model_seeded_tensor(const model_config *c, const reel_model_tensor *t, void *dst, size_t bytes)
{
    toy_cache k = {.c = c};
    reel_status st = seeded(&k, t, dst, bytes);
    free(k.buf);
    return st;
}

static reel_status seeded_fn(void *user, const reel_model_tensor *t, void *dst, size_t bytes)
{
    return seeded(user, t, dst, bytes);
}

/* ---- the library's model -------------------------------------------------- */

static const char *torch_dtype(reel_dtype dt)
{
    return dt == REEL_BF16 ? "bfloat16" : dt == REEL_F16 ? "float16" : "float32";
}

char *model_toy_config_json(const model_config *c)
{
    json_t *j = json_pack("{s:[s],s:s,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:f,s:f,s:b,s:s,s:s,s:i,s:b,s:b,s:f}",
                          "architectures", "LlamaForCausalLM", "model_type", "llama", "hidden_size", c->hidden,
                          "intermediate_size", c->ffn, "num_attention_heads", c->heads, "num_hidden_layers",
                          c->layers, "num_key_value_heads", c->kv_heads, "vocab_size", c->vocab, "head_dim",
                          model_head_dim(c), "rms_norm_eps", (double)c->eps, "rope_theta", (double)c->rope_theta,
                          "tie_word_embeddings", 0, "torch_dtype", torch_dtype(c->dtype), "hidden_act", "silu",
                          "max_position_embeddings", 4096, "attention_bias", 0, "mlp_bias", 0,
                          "initializer_range", 0.02);
    char *text = j ? json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
    json_decref(j);
    return text;
}

reel_status model_open(reel_ctx *ctx, const model_config *c, reel_model **out)
{
    *out = NULL;
    if (c->hf)
        return REEL_E_INVALID_USAGE; /* a checkpoint's model comes from model_open_dir */
    char *json = model_toy_config_json(c);
    if (!json)
        return REEL_E_OOM;
    reel_status st = reel_model_parse(ctx, json, 0, out);
    free(json);
    return st;
}

reel_status model_open_dir(reel_ctx *ctx, const char *dir, model_config *c, reel_model **out)
{
    reel_status st = reel_model_open(ctx, dir, out);
    if (st != REEL_OK)
        return st;
    reel_model_info in = REEL_MODEL_INFO_INIT;
    st = reel_model_info_get(*out, &in);
    if (st != REEL_OK) {
        reel_model_close(*out);
        *out = NULL;
        return st;
    }
    c->layers = in.layers;
    c->hidden = in.hidden;
    c->heads = in.heads;
    c->kv_heads = in.kv_heads;
    c->head_dim = in.head_dim;
    c->ffn = in.ffn;
    c->vocab = in.vocab;
    c->dtype = in.dtype;
    c->rope_theta = (float)in.rope_theta;
    c->eps = (float)in.rms_norm_eps;
    c->qkv_bias = in.qkv_bias;
    c->o_bias = in.o_bias;
    c->tied = in.tied;
    c->qk_norm = in.qk_norm;
    c->family = in.family;
    c->rope_type = in.rope_type;
    c->hf = true;
    return REEL_OK;
}

static reel_model_opts opts_of(const model_config *c, int stage, int nstages)
{
    reel_model_opts o = REEL_MODEL_OPTS_INIT;
    o.block_size = c->block_size;
    o.num_blocks = c->num_blocks;
    if (c->max_context > 0)
        o.max_context = c->max_context;
    o.logits = c->logits_output;
    o.sample = c->sample;
    o.stage = stage;
    o.num_stages = nstages;
    if (c->dcp_size > 1) {
        o.dcp_size = c->dcp_size;
        o.dcp_rank = c->dcp_rank;
    }
    if (c->cp_size > 1)
        o.cp_size = c->cp_size;
    return o;
}

reel_status model_build_stage_with(const reel_model *mm, reel_ctx *ctx, const model_config *c, int stage, int nstages,
                                   reel_graph **out)
{
    reel_graph *g = NULL;
    *out = NULL;
    reel_status st = reel_graph_create(ctx, &g);
    if (st != REEL_OK)
        return st;
    reel_model_opts o = opts_of(c, stage, nstages);
    st = reel_model_build(mm, g, &o);
    if (st != REEL_OK) {
        reel_graph_destroy(g);
        return st;
    }
    *out = g;
    return REEL_OK;
}

reel_status model_write_stage_with(const reel_model *mm, reel_plan *p, const model_config *c, int stage, int nstages)
{
    reel_model_opts o = opts_of(c, stage, nstages);
    if (c->hf)
        return reel_model_bind(mm, p, &o);
    toy_cache k = {.c = c};
    reel_status st = reel_model_bind_source(mm, p, &o, seeded_fn, &k);
    free(k.buf);
    return st;
}

reel_status model_build_stage(reel_ctx *ctx, const model_config *c, int stage, int nstages, reel_graph **out)
{
    reel_model *mm = NULL;
    *out = NULL;
    reel_status st = model_open(ctx, c, &mm);
    if (st == REEL_OK)
        st = model_build_stage_with(mm, ctx, c, stage, nstages, out);
    reel_model_close(mm);
    return st;
}

reel_status model_build(reel_ctx *ctx, const model_config *c, reel_graph **out)
{
    return model_build_stage(ctx, c, 0, 1, out);
}

reel_status model_write_stage_weights(reel_plan *p, const model_config *c, int stage, int nstages)
{
    reel_model *mm = NULL;
    reel_status st = model_open(NULL, c, &mm);
    if (st == REEL_OK)
        st = model_write_stage_with(mm, p, c, stage, nstages);
    reel_model_close(mm);
    return st;
}

reel_status model_write_weights(reel_plan *p, const model_config *c) { return model_write_stage_weights(p, c, 0, 1); }

uint64_t model_kv_bytes(const model_config *c)
{
    uint64_t per = (uint64_t)c->num_blocks * (uint64_t)c->block_size * (uint64_t)c->kv_heads *
                   (uint64_t)model_head_dim(c) * reel_dtype_size(c->dtype);
    return 2 * per * (uint64_t)c->layers;
}
