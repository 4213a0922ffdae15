/* Hugging Face Llama-family checkpoints for the demo model (see hf.h). */
#include "hf.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ---- config.json ---------------------------------------------------------- */

/* An integer key in [lo, hi]; absent (or null) gives def, or fails when
 * def < 0 (required). */
static int get_int(const json_t *root, const char *key, long long lo, long long hi, long long def, int *out,
                   const char *path, char *err, size_t n)
{
    const json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) {
        if (def < 0) {
            snprintf(err, n, "%s: no \"%s\" (an integer)", path, key);
            return -1;
        }
        *out = (int)def;
        return 0;
    }
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi) {
        snprintf(err, n, "%s: \"%s\" wants an integer in [%lld, %lld]", path, key, lo, hi);
        return -1;
    }
    *out = (int)json_integer_value(v);
    return 0;
}

static int get_float(const json_t *root, const char *key, double def, float *out, const char *path, char *err,
                     size_t n)
{
    const json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) {
        *out = (float)def;
        return 0;
    }
    if (!json_is_number(v) || !(json_number_value(v) > 0.0) || json_number_value(v) > 1e30) {
        snprintf(err, n, "%s: \"%s\" wants a positive number", path, key);
        return -1;
    }
    *out = (float)json_number_value(v);
    return 0;
}

static int get_bool(const json_t *root, const char *key, bool def, bool *out, const char *path, char *err,
                    size_t n)
{
    const json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) {
        *out = def;
        return 0;
    }
    if (!json_is_boolean(v)) {
        snprintf(err, n, "%s: \"%s\" wants true or false", path, key);
        return -1;
    }
    *out = json_is_true(v);
    return 0;
}

/* Keys whose other values change the model in ways reel does not build. */
static int check_supported(const json_t *root, const char *type, const char *path, char *err, size_t n)
{
    const json_t *v = json_object_get(root, "hidden_act");
    if (v && !(json_is_string(v) && strcmp(json_string_value(v), "silu") == 0)) {
        snprintf(err, n, "%s: \"hidden_act\" must be \"silu\" (reel builds silu-gated MLPs only)", path);
        return -1;
    }
    v = json_object_get(root, "rope_scaling");
    if (v && !json_is_null(v)) {
        const json_t *rt = json_is_object(v) ? json_object_get(v, "rope_type") : NULL;
        if (!rt) rt = json_is_object(v) ? json_object_get(v, "type") : NULL;
        if (!(json_is_string(rt) && strcmp(json_string_value(rt), "default") == 0)) {
            snprintf(err, n, "%s: \"rope_scaling\" is set; reel builds plain rotary embeddings only (null or "
                             "rope_type \"default\")", path);
            return -1;
        }
    }
    v = json_object_get(root, "partial_rotary_factor");
    if (v && !json_is_null(v) && !(json_is_number(v) && json_number_value(v) == 1.0)) {
        snprintf(err, n, "%s: \"partial_rotary_factor\" other than 1 is not supported", path);
        return -1;
    }
    v = json_object_get(root, "mlp_bias");
    if (json_is_true(v)) {
        snprintf(err, n, "%s: \"mlp_bias\": true is not supported", path);
        return -1;
    }
    bool sliding = strcmp(type, "qwen2") == 0 ? json_is_true(json_object_get(root, "use_sliding_window"))
                   : strcmp(type, "mistral") == 0
                       ? (json_object_get(root, "sliding_window") && !json_is_null(json_object_get(root, "sliding_window")))
                       : false;
    if (sliding) {
        snprintf(err, n, "%s: sliding-window attention is not supported", path);
        return -1;
    }
    return 0;
}

static int parse_dtype(const json_t *root, reel_dtype *dt, const char *path, char *err, size_t n)
{
    const json_t *v = json_object_get(root, "torch_dtype");
    if (!v || json_is_null(v)) v = json_object_get(root, "dtype"); /* newer transformers */
    if (!v || json_is_null(v)) {
        *dt = REEL_F32;
        return 0;
    }
    const char *s = json_is_string(v) ? json_string_value(v) : "";
    if (strcmp(s, "bfloat16") == 0) *dt = REEL_BF16;
    else if (strcmp(s, "float16") == 0) *dt = REEL_F16;
    else if (strcmp(s, "float32") == 0) *dt = REEL_F32;
    else {
        snprintf(err, n, "%s: \"torch_dtype\" must be bfloat16, float16 or float32", path);
        return -1;
    }
    return 0;
}

int hf_load_config(const char *dir, model_config *m, char *err, size_t n)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    json_error_t je;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        snprintf(err, n, "%s: %s (line %d)", path, je.text, je.line);
        return -1;
    }
    int rc = -1;
    const json_t *mt = json_object_get(root, "model_type");
    const char *type = json_is_string(mt) ? json_string_value(mt) : "";
    model_config c = *m;
    const long long big = 1 << 24;
    if (!json_is_object(root)) {
        snprintf(err, n, "%s: not a JSON object", path);
    } else if (strcmp(type, "llama") != 0 && strcmp(type, "qwen2") != 0 && strcmp(type, "mistral") != 0) {
        snprintf(err, n, "%s: \"model_type\" must be llama, qwen2 or mistral (a Llama-family decoder)", path);
    } else if (check_supported(root, type, path, err, n) == 0 &&
               get_int(root, "hidden_size", 2, big, -1, &c.hidden, path, err, n) == 0 &&
               get_int(root, "num_hidden_layers", 1, 1024, -1, &c.layers, path, err, n) == 0 &&
               get_int(root, "num_attention_heads", 1, 4096, -1, &c.heads, path, err, n) == 0 &&
               get_int(root, "num_key_value_heads", 1, 4096, c.heads, &c.kv_heads, path, err, n) == 0 &&
               get_int(root, "intermediate_size", 1, big, -1, &c.ffn, path, err, n) == 0 &&
               get_int(root, "vocab_size", 2, big, -1, &c.vocab, path, err, n) == 0 &&
               get_int(root, "head_dim", 2, 4096, c.hidden / c.heads, &c.head_dim, path, err, n) == 0 &&
               get_float(root, "rope_theta", 10000.0, &c.rope_theta, path, err, n) == 0 &&
               get_float(root, "rms_norm_eps", 1e-6, &c.eps, path, err, n) == 0 &&
               get_bool(root, "tie_word_embeddings", false, &c.tied, path, err, n) == 0 &&
               get_bool(root, "attention_bias", false, &c.o_bias, path, err, n) == 0 &&
               parse_dtype(root, &c.dtype, path, err, n) == 0) {
        c.hf = true;
        c.qkv_bias = c.o_bias || strcmp(type, "qwen2") == 0;
        if (c.head_dim % 2 != 0) {
            snprintf(err, n, "%s: the head dim (%d) must be even for rotary embeddings", path, c.head_dim);
        } else {
            *m = c;
            rc = 0;
        }
    }
    json_decref(root);
    return rc;
}

/* ---- weights from a checkpoint -------------------------------------------- */

static reel_status put(reel_plan *p, const reel_safetensors *ck, const char *name)
{
    const char *one[1] = {name};
    return reel_safetensors_write_param(ck, p, name, 1, one);
}

reel_status hf_write_weights(reel_plan *p, const model_config *m, const reel_safetensors *ck, int stage,
                             int nstages)
{
    int first, last;
    model_stage_layers(m, stage, nstages, &first, &last);
    bool head = stage == nstages - 1;
    reel_status st = REEL_OK;
    if (stage == 0 || (head && m->tied)) st = put(p, ck, "model.embed_tokens.weight");
    char a[128], b[128], c[128];
    for (int i = first; i < last && st == REEL_OK; i++) {
        static const char *const one[] = {"input_layernorm.weight", "self_attn.o_proj.weight",
                                          "post_attention_layernorm.weight", "mlp.down_proj.weight"};
        for (size_t j = 0; j < sizeof one / sizeof one[0] && st == REEL_OK; j++) {
            snprintf(a, sizeof a, "model.layers.%d.%s", i, one[j]);
            st = put(p, ck, a);
        }
        /* q_proj, k_proj and v_proj (weights, and biases where the model
         * has them) one after the other in the fused qkv_proj parameter. */
        static const char *const kinds[2] = {"weight", "bias"};
        for (int kd = 0; kd < (m->qkv_bias ? 2 : 1) && st == REEL_OK; kd++) {
            char q[128], k[128], v[128];
            snprintf(a, sizeof a, "model.layers.%d.self_attn.qkv_proj.%s", i, kinds[kd]);
            snprintf(q, sizeof q, "model.layers.%d.self_attn.q_proj.%s", i, kinds[kd]);
            snprintf(k, sizeof k, "model.layers.%d.self_attn.k_proj.%s", i, kinds[kd]);
            snprintf(v, sizeof v, "model.layers.%d.self_attn.v_proj.%s", i, kinds[kd]);
            const char *qkv[3] = {q, k, v};
            st = reel_safetensors_write_param(ck, p, a, 3, qkv);
        }
        if (m->o_bias && st == REEL_OK) {
            snprintf(a, sizeof a, "model.layers.%d.self_attn.o_proj.bias", i);
            st = put(p, ck, a);
        }
        if (st != REEL_OK) break;
        snprintf(a, sizeof a, "model.layers.%d.mlp.gate_up_proj.weight", i);
        snprintf(b, sizeof b, "model.layers.%d.mlp.gate_proj.weight", i);
        snprintf(c, sizeof c, "model.layers.%d.mlp.up_proj.weight", i);
        const char *parts[2] = {b, c};
        st = reel_safetensors_write_param(ck, p, a, 2, parts);
    }
    if (head && st == REEL_OK) st = put(p, ck, "model.norm.weight");
    if (head && !m->tied && st == REEL_OK) st = put(p, ck, "lm_head.weight");
    return st;
}

/* ---- saving the seeded model ---------------------------------------------- */

#define TRY(expr)                            \
    do {                                     \
        reel_status try_st_ = (expr);        \
        if (try_st_ != REEL_OK) return try_st_; \
    } while (0)

typedef struct saver {
    const model_config *m;
    reel_st_entry *e;
    int64_t (*dims)[2];
    void **bufs;
    int n, cap;
} saver;

/* Appends a tensor [rows, cols] (cols 0: [rows]) with its own copy of data,
 * transposed when asked; the copy is filled by the caller through *out. */
static reel_status add(saver *s, const char *name, int64_t rows, int64_t cols, void **out)
{
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 64;
        reel_st_entry *e = realloc(s->e, (size_t)cap * sizeof *e);
        if (e) s->e = e;
        int64_t (*d)[2] = realloc(s->dims, (size_t)cap * sizeof *d);
        if (d) s->dims = d;
        void **b = realloc(s->bufs, (size_t)cap * sizeof *b);
        if (b) s->bufs = b;
        if (!e || !d || !b) return REEL_E_OOM;
        s->cap = cap;
    }
    size_t es = reel_dtype_size(s->m->dtype), bytes = (size_t)(rows * (cols ? cols : 1)) * es;
    char *nm = strdup(name);
    void *buf = malloc(bytes ? bytes : 1);
    if (!nm || !buf) {
        free(nm);
        free(buf);
        return REEL_E_OOM;
    }
    s->dims[s->n][0] = rows;
    s->dims[s->n][1] = cols;
    s->bufs[s->n] = buf;
    s->e[s->n] = (reel_st_entry){ REEL_ST_ENTRY_HEAD, nm, s->m->dtype, cols ? 2 : 1, NULL, buf};
    s->n++;
    *out = buf;
    return REEL_OK;
}

/* dst [cols][rows] = src[rows][cols]^T over columns c0 .. c0+nc-1. */
static void transpose(void *dst, const void *src, int64_t rows, int64_t cols, int64_t c0, int64_t nc, size_t es)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < nc; c++)
            memcpy((char *)dst + ((size_t)(c * rows + r)) * es, (const char *)src + ((size_t)(r * cols + c0 + c)) * es,
                   es);
}

static reel_status save_one(void *arg, const char *name, int64_t rows, int64_t cols, const void *data)
{
    saver *s = arg;
    size_t es = reel_dtype_size(s->m->dtype);
    int layer = -1;
    char suffix[32] = "", hf[128];
    if (sscanf(name, "l%d.%31s", &layer, suffix) != 2) layer = -1;
    void *buf;
    if (layer < 0) {
        bool vec = cols == 0;
        const char *to = strcmp(name, "embed") == 0 ? "model.embed_tokens.weight"
                         : strcmp(name, "final_norm") == 0 ? "model.norm.weight"
                                                           : "lm_head.weight";
        bool tr = strcmp(name, "lm_head") == 0; /* [D, V] -> [V, D] */
        TRY(add(s, to, tr ? cols : rows, tr ? rows : cols, &buf));
        if (tr) transpose(buf, data, rows, cols, 0, cols, es);
        else memcpy(buf, data, (size_t)(rows * (vec ? 1 : cols)) * es);
        return REEL_OK;
    }
    static const struct { const char *from, *to; } map[] = {
        {"attn_norm", "input_layernorm.weight"}, {"ffn_norm", "post_attention_layernorm.weight"},
        {"wq", "self_attn.q_proj.weight"},       {"wk", "self_attn.k_proj.weight"},
        {"wv", "self_attn.v_proj.weight"},       {"wo", "self_attn.o_proj.weight"},
        {"w_down", "mlp.down_proj.weight"},
    };
    if (strcmp(suffix, "w_gate_up") == 0) { /* [D, 2F] -> gate [F, D], up [F, D] */
        int64_t f = cols / 2;
        snprintf(hf, sizeof hf, "model.layers.%d.mlp.gate_proj.weight", layer);
        TRY(add(s, hf, f, rows, &buf));
        transpose(buf, data, rows, cols, 0, f, es);
        snprintf(hf, sizeof hf, "model.layers.%d.mlp.up_proj.weight", layer);
        TRY(add(s, hf, f, rows, &buf));
        transpose(buf, data, rows, cols, f, f, es);
        return REEL_OK;
    }
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
        if (strcmp(suffix, map[i].from) != 0) continue;
        snprintf(hf, sizeof hf, "model.layers.%d.%s", layer, map[i].to);
        if (cols == 0) {
            TRY(add(s, hf, rows, 0, &buf));
            memcpy(buf, data, (size_t)rows * es);
        } else { /* [in, out] -> [out, in] */
            TRY(add(s, hf, cols, rows, &buf));
            transpose(buf, data, rows, cols, 0, cols, es);
        }
        return REEL_OK;
    }
    return REEL_E_INTERNAL;
}

static const char *torch_dtype(reel_dtype dt)
{
    return dt == REEL_BF16 ? "bfloat16" : dt == REEL_F16 ? "float16" : "float32";
}

static int save_config(const model_config *m, const char *dir, char *err, size_t n)
{
    json_t *c = json_pack("{s:[s],s:s,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:f,s:f,s:b,s:s,s:s,s:i,s:b,s:b,s:f}",
                          "architectures", "LlamaForCausalLM", "model_type", "llama", "hidden_size", m->hidden,
                          "intermediate_size", m->ffn, "num_attention_heads", m->heads, "num_hidden_layers",
                          m->layers, "num_key_value_heads", m->kv_heads, "vocab_size", m->vocab, "head_dim",
                          model_head_dim(m), "rms_norm_eps", (double)m->eps, "rope_theta", (double)m->rope_theta,
                          "tie_word_embeddings", 0, "torch_dtype", torch_dtype(m->dtype), "hidden_act", "silu",
                          "max_position_embeddings", 4096, "attention_bias", 0, "mlp_bias", 0,
                          "initializer_range", 0.02);
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    int rc = c ? json_dump_file(c, path, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : -1;
    json_decref(c);
    if (rc != 0) snprintf(err, n, "%s: cannot write", path);
    return rc;
}

int hf_save_seeded(reel_ctx *ctx, const model_config *m, const char *dir, char *err, size_t n)
{
    if (m->hf) {
        snprintf(err, n, "--save-model saves the seeded demo model, not a loaded checkpoint");
        return -1;
    }
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
        snprintf(err, n, "%s: cannot create the directory: %s", dir, strerror(errno));
        return -1;
    }
    saver s = {.m = m};
    reel_status st = model_each_seeded(m, save_one, &s);
    int rc = 0;
    if (st != REEL_OK) {
        snprintf(err, n, "generating the seeded weights: %s", reel_status_str(st));
        rc = -1;
    }
    for (int i = 0; i < s.n; i++) s.e[i].dims = s.dims[i]; /* s.dims moved as it grew */
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (rc == 0 && reel_safetensors_save(ctx, path, s.e, s.n) != REEL_OK) {
        snprintf(err, n, "%s", reel_ctx_last_error(ctx));
        rc = -1;
    }
    if (rc == 0) rc = save_config(m, dir, err, n);
    for (int i = 0; i < s.n; i++) {
        free((char *)s.e[i].name);
        free(s.bufs[i]);
    }
    free(s.e);
    free(s.dims);
    free(s.bufs);
    return rc;
}
