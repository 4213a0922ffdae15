/* L7 models/: config.json of the four families, with transformers' defaults
 * for each (LlamaConfig, MistralConfig, Qwen2Config, Qwen3Config). A key
 * whose value changes the model is read and either built or refused with
 * its name; keys that change nothing at inference (token ids, dropout,
 * initializer_range, use_cache, pretraining_tp, ...) are not read. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "models/model.h"

typedef struct rd {
    const json_t *root;
    const char *label;   /* "DIR/config.json" */
    reel_err *err;
} rd;

#define BIG (1 << 24)

static const json_t *get(const json_t *o, const char *key)
{
    const json_t *v = json_object_get(o, key);
    return v && !json_is_null(v) ? v : NULL;
}

/* An integer in [lo, hi]; absent or null: def, or required when !has_def. */
static reel_status get_int(const rd *r, const json_t *o, const char *prefix, const char *key, long long lo,
                           long long hi, bool has_def, long long def, int *out)
{
    *out = (int)def;   /* set on every path: callers read it only on success */
    const json_t *v = get(o, key);
    if (!v) {
        if (!has_def)
            return reel_seterr(r->err, REEL_E_INVALID_ARG, "%s: no \"%s%s\" (an integer)", r->label, prefix, key);
        *out = (int)def;
        return REEL_OK;
    }
    /* transformers writes some sizes as 8192.0 */
    double d = json_is_integer(v) ? (double)json_integer_value(v) : json_is_real(v) ? json_real_value(v) : NAN;
    if (!(d == floor(d)) || d < (double)lo || d > (double)hi)
        return reel_seterr(r->err, REEL_E_INVALID_ARG, "%s: \"%s%s\" wants an integer in [%lld, %lld]", r->label,
                           prefix, key, lo, hi);
    *out = (int)d;
    return REEL_OK;
}

/* A finite number in (0, 1e30] (or [0, 1e30] with zero_ok); absent or null: def, or
 * required when def is NAN. */
static reel_status get_num(const rd *r, const json_t *o, const char *prefix, const char *key, double def,
                           bool zero_ok, double *out)
{
    *out = def;        /* set on every path: callers read it only on success */
    const json_t *v = get(o, key);
    if (!v) {
        if (isnan(def))
            return reel_seterr(r->err, REEL_E_INVALID_ARG, "%s: no \"%s%s\" (a number)", r->label, prefix, key);
        *out = def;
        return REEL_OK;
    }
    double d = json_is_number(v) ? json_number_value(v) : NAN;
    if (!isfinite(d) || d < 0 || (d == 0 && !zero_ok) || d > 1e30)
        return reel_seterr(r->err, REEL_E_INVALID_ARG, "%s: \"%s%s\" wants a number in %s0, 1e30]", r->label,
                           prefix, key, zero_ok ? "[" : "(");
    *out = d;
    return REEL_OK;
}

static reel_status get_bool(const rd *r, const json_t *o, const char *prefix, const char *key, bool def, bool *out)
{
    *out = def;        /* set on every path: callers read it only on success */
    const json_t *v = get(o, key);
    if (!v) {
        *out = def;
        return REEL_OK;
    }
    if (!json_is_boolean(v))
        return reel_seterr(r->err, REEL_E_INVALID_ARG, "%s: \"%s%s\" wants true or false", r->label, prefix, key);
    *out = json_is_true(v);
    return REEL_OK;
}

#define TRY REEL_TRY

/* ---- the family and its defaults ------------------------------------------ */

typedef struct family_def {
    const char *type;
    reel_model_family family;
    int max_pos;          /* max_position_embeddings' default */
    int head_dim;         /* head_dim's default (0: hidden / heads) */
    bool attention_bias;  /* reads attention_bias (q, k, v and o biases) */
    bool qkv_bias;        /* q, k, v biases always (Qwen2) */
    bool qk_norm;
    bool mlp_bias;        /* reads mlp_bias */
    int moe;              /* MOE_NONE, MOE_QWEN3, MOE_MIXTRAL: which keys say the experts */
} family_def;

enum { MOE_NONE, MOE_QWEN3, MOE_MIXTRAL, MOE_DEEPSEEK };

static const family_def families[] = {
    {"llama", REEL_MODEL_LLAMA, 2048, 0, true, false, false, true, MOE_NONE},
    {"mistral", REEL_MODEL_MISTRAL, 4096 * 32, 0, false, false, false, false, MOE_NONE},
    {"qwen2", REEL_MODEL_QWEN2, 32768, 0, false, true, false, false, MOE_NONE},
    {"qwen3", REEL_MODEL_QWEN3, 32768, 128, true, false, true, false, MOE_NONE},
    {"qwen3_moe", REEL_MODEL_QWEN3_MOE, 32768, 128, true, false, true, false, MOE_QWEN3},
    {"mixtral", REEL_MODEL_MIXTRAL, 4096 * 32, 0, false, false, false, false, MOE_MIXTRAL},
    {"deepseek_v3", REEL_MODEL_DEEPSEEK_V3, 4096, 0, false, false, false, false, MOE_DEEPSEEK},
    {"kimi_k2", REEL_MODEL_DEEPSEEK_V3, 4096, 0, false, false, false, false, MOE_DEEPSEEK},
};

static reel_status read_dtype(const rd *r, model_cfg *c)
{
    const json_t *v = get(r->root, "torch_dtype");
    const char *key = "torch_dtype";
    if (!v) {
        v = get(r->root, "dtype"); /* newer transformers */
        key = "dtype";
    }
    c->dtype = REEL_F32;
    c->dtype_given = v != NULL;
    if (!v)
        return REEL_OK;
    const char *s = json_is_string(v) ? json_string_value(v) : "";
    if (strcmp(s, "bfloat16") == 0)
        c->dtype = REEL_BF16;
    else if (strcmp(s, "float16") == 0)
        c->dtype = REEL_F16;
    else if (strcmp(s, "float32") == 0)
        c->dtype = REEL_F32;
    else
        return reel_seterr(r->err, json_is_string(v) ? REEL_E_UNSUPPORTED : REEL_E_INVALID_ARG,
                           "%s: \"%s\" is %s%s%s; reel builds bfloat16, float16 or float32 models", r->label, key,
                           json_is_string(v) ? "\"" : "(not a string)", json_is_string(v) ? s : "",
                           json_is_string(v) ? "\"" : "");
    return REEL_OK;
}

/* Keys whose values change the model and are not built. */
static reel_status refuse_unbuilt(const rd *r, const family_def *f)
{
    const json_t *v = get(r->root, "hidden_act");
    if (v && !(json_is_string(v) && strcmp(json_string_value(v), "silu") == 0))
        return reel_seterr(r->err, REEL_E_UNSUPPORTED,
                           "%s: \"hidden_act\" is %s%s%s; reel builds silu-gated MLPs only (\"silu\")", r->label,
                           json_is_string(v) ? "\"" : "", json_is_string(v) ? json_string_value(v) : "not a string",
                           json_is_string(v) ? "\"" : "");
    v = get(r->root, "partial_rotary_factor");
    if (v && !(json_is_number(v) && json_number_value(v) == 1.0))
        return reel_seterr(r->err, REEL_E_UNSUPPORTED,
                           "%s: \"partial_rotary_factor\" other than 1 is not built (rope over the whole head only)",
                           r->label);
    if (f->mlp_bias) {
        bool b = false;
        TRY(get_bool(r, r->root, "", "mlp_bias", false, &b));
        if (b)
            return reel_seterr(r->err, REEL_E_UNSUPPORTED, "%s: \"mlp_bias\": true is not built (MLPs without biases "
                               "only)", r->label);
    }
    if (get(r->root, "quantization_config"))
        return reel_seterr(r->err, REEL_E_UNSUPPORTED, "%s: \"quantization_config\": quantized checkpoints are not "
                           "built (bf16, f16 or f32 weights only)", r->label);
    return REEL_OK;
}

/* ---- sliding windows -------------------------------------------------------- */

static void set_limit(model_cfg *c, int32_t limit, const char *key, const char *why)
{
    if (limit >= c->context_limit)
        return;
    c->context_limit = limit;
    snprintf(c->limit_key, sizeof c->limit_key, "%s", key);
    snprintf(c->limit_why, sizeof c->limit_why, "%s", why);
}

/* A sliding window of W tokens changes nothing while every context is at
 * most W (a token attends to the W before it, itself included): plans up to
 * W are built, longer ones refused. */
static reel_status read_sliding(const rd *r, model_cfg *c)
{
    char why[200];
    int w = 0;
    if (c->family == REEL_MODEL_MISTRAL || c->family == REEL_MODEL_MIXTRAL) {
        /* MistralConfig: sliding_window 4096 when absent; null turns it off.
         * MixtralConfig: none when absent. */
        const json_t *v = json_object_get(r->root, "sliding_window");
        if ((v && json_is_null(v)) || (!v && c->family == REEL_MODEL_MIXTRAL))
            return REEL_OK;
        TRY(get_int(r, r->root, "", "sliding_window", 1, INT32_MAX, true, 4096, &w));
        snprintf(why, sizeof why, "a sliding window of %d tokens (%s) is not built, so a plan's max_context may "
                 "not pass it", w, c->family == REEL_MODEL_MISTRAL ? "4096 when absent; null turns it off"
                                                                   : "null or absent turns it off");
        set_limit(c, w, "sliding_window", why);
        return REEL_OK;
    }
    if (c->family != REEL_MODEL_QWEN2 && c->family != REEL_MODEL_QWEN3 && c->family != REEL_MODEL_QWEN3_MOE)
        return REEL_OK; /* LlamaConfig has no sliding window */
    bool use = false;
    TRY(get_bool(r, r->root, "", "use_sliding_window", false, &use));
    int mwl = 28;
    TRY(get_int(r, r->root, "", "max_window_layers", 0, 1 << 20, true, 28, &mwl));
    const json_t *lt = get(r->root, "layer_types");
    int sliding_layers = 0;
    if (lt) {
        if (!json_is_array(lt) || (int)json_array_size(lt) != c->layers)
            return reel_seterr(r->err, REEL_E_INVALID_ARG, "%s: \"layer_types\" wants a list of %d strings (one a "
                               "layer)", r->label, c->layers);
        for (size_t i = 0; i < json_array_size(lt); i++) {
            const json_t *e = json_array_get(lt, i);
            const char *s = json_is_string(e) ? json_string_value(e) : "";
            if (strcmp(s, "sliding_attention") == 0)
                sliding_layers++;
            else if (strcmp(s, "full_attention") != 0)
                return reel_seterr(r->err, REEL_E_UNSUPPORTED, "%s: \"layer_types\"[%zu] is not \"full_attention\" or "
                                   "\"sliding_attention\"", r->label, i);
        }
    } else {
        sliding_layers = c->layers > mwl ? c->layers - mwl : 0;
    }
    if (!use || !sliding_layers)
        return REEL_OK;
    const json_t *v = json_object_get(r->root, "sliding_window");
    if (v && json_is_null(v))
        return REEL_OK;
    TRY(get_int(r, r->root, "", "sliding_window", 1, INT32_MAX, true, 4096, &w));
    snprintf(why, sizeof why, "sliding-window attention (%d of %d layers, a window of %d tokens) is not built, so a "
             "plan's max_context may not pass the window", sliding_layers, c->layers, w);
    set_limit(c, w, "use_sliding_window", why);
    return REEL_OK;
}

/* ---- rope_scaling ------------------------------------------------------------- */

static const char *const rope_names[REEL_ROPE_TYPE_COUNT] = {"default", "linear", "dynamic", "yarn", "llama3"};

/* Keys each rope type reads besides rope_type (and type, its old name). */
static const char *const rope_keys[REEL_ROPE_TYPE_COUNT][9] = {
    [REEL_ROPE_DEFAULT] = {NULL},
    [REEL_ROPE_LINEAR] = {"factor", NULL},
    [REEL_ROPE_DYNAMIC] = {"factor", "original_max_position_embeddings", NULL},
    [REEL_ROPE_YARN] = {"factor", "attention_factor", "beta_fast", "beta_slow", "mscale", "mscale_all_dim",
                        "original_max_position_embeddings", "truncate", NULL},
    [REEL_ROPE_LLAMA3] = {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings", NULL},
};

/* A number of yarn's that Python reads as `x or default`: null, absent or 0 give def. */
static reel_status get_or(const rd *r, const json_t *o, const char *prefix, const char *key, double def, double *out)
{
    TRY(get_num(r, o, prefix, key, def, true, out));
    if (*out == 0)
        *out = def;
    return REEL_OK;
}

static reel_status read_rope(const rd *r, model_cfg *c)
{
    const char *where = "rope_parameters"; /* transformers 5's name; it may carry rope_theta */
    const json_t *o = get(r->root, where);
    if (!o) {
        where = "rope_scaling";
        o = get(r->root, where);
    }
    c->rope = REEL_ROPE_DEFAULT;
    c->factor = 1.0;
    if (!o)
        return REEL_OK;
    char prefix[40];
    snprintf(prefix, sizeof prefix, "%s.", where);
    if (!json_is_object(o))
        return reel_seterr(r->err, REEL_E_INVALID_ARG, "%s: \"%s\" wants an object or null", r->label, where);
    const json_t *t = get(o, "rope_type");
    const char *tkey = "rope_type";
    if (!t) {
        t = get(o, "type");
        tkey = "type";
    }
    const char *type = "default";
    if (t) {
        if (!json_is_string(t))
            return reel_seterr(r->err, REEL_E_INVALID_ARG, "%s: \"%s%s\" wants a string", r->label, prefix, tkey);
        type = json_string_value(t);
    }
    int k = 0;
    while (k < REEL_ROPE_TYPE_COUNT && strcmp(type, rope_names[k]) != 0)
        k++;
    if (k == REEL_ROPE_TYPE_COUNT)
        return reel_seterr(r->err, REEL_E_UNSUPPORTED, "%s: \"%s%s\" is \"%.40s\"; reel builds default, linear, "
                           "dynamic, yarn and llama3", r->label, prefix, tkey, type);
    c->rope = (reel_rope_type)k;
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)o, key, val) {
        bool known = strcmp(key, "rope_type") == 0 || strcmp(key, "type") == 0;
        if (strcmp(where, "rope_parameters") == 0)
            known = known || strcmp(key, "rope_theta") == 0 || strcmp(key, "partial_rotary_factor") == 0;
        for (int i = 0; !known && rope_keys[k][i]; i++)
            known = strcmp(key, rope_keys[k][i]) == 0;
        if (!known)
            return reel_seterr(r->err, REEL_E_UNSUPPORTED, "%s: \"%s%s\" is not read by rope_type \"%s\"; reel "
                               "refuses what it would not build", r->label, prefix, key, type);
    }
    if (strcmp(where, "rope_parameters") == 0) {
        TRY(get_num(r, o, prefix, "rope_theta", c->theta, false, &c->theta));
        const json_t *p = get(o, "partial_rotary_factor");
        if (p && !(json_is_number(p) && json_number_value(p) == 1.0))
            return reel_seterr(r->err, REEL_E_UNSUPPORTED, "%s: \"%spartial_rotary_factor\" other than 1 is not "
                               "built", r->label, prefix);
    }
    if (c->rope == REEL_ROPE_DEFAULT)
        return REEL_OK;
    TRY(get_num(r, o, prefix, "factor", NAN, false, &c->factor));
    int orig = 0;
    TRY(get_int(r, o, prefix, "original_max_position_embeddings", 1, INT32_MAX, c->rope != REEL_ROPE_LLAMA3, 0,
                &orig));
    c->orig_max_pos = orig;
    char why[200];
    switch (c->rope) {
    case REEL_ROPE_DYNAMIC: {
        /* transformers changes the frequencies only once a sequence passes
         * the original length; up to it they are the default ones. */
        int32_t lim = c->max_pos;
        if (orig > 0 && orig < lim)
            lim = orig;
        snprintf(why, sizeof why, "rope_type \"dynamic\" rescales the frequencies past %d positions (%s), which a "
                 "captured graph cannot do; up to it they are the default ones", lim,
                 lim == c->max_pos ? "max_position_embeddings" : "original_max_position_embeddings");
        char kname[64];
        snprintf(kname, sizeof kname, "%srope_type", prefix);
        set_limit(c, lim, kname, why);
        break;
    }
    case REEL_ROPE_YARN: {
        bool tr = true;
        TRY(get_num(r, o, prefix, "attention_factor", -1.0, true, &c->attention_factor));
        TRY(get_or(r, o, prefix, "beta_fast", 32.0, &c->beta_fast));
        TRY(get_or(r, o, prefix, "beta_slow", 1.0, &c->beta_slow));
        TRY(get_num(r, o, prefix, "mscale", 0.0, true, &c->mscale));
        TRY(get_num(r, o, prefix, "mscale_all_dim", 0.0, true, &c->mscale_all_dim));
        TRY(get_bool(r, o, prefix, "truncate", true, &tr));
        c->truncate = tr;
        break;
    }
    case REEL_ROPE_LLAMA3:
        TRY(get_num(r, o, prefix, "low_freq_factor", NAN, false, &c->low_freq_factor));
        TRY(get_num(r, o, prefix, "high_freq_factor", NAN, false, &c->high_freq_factor));
        if (!(c->high_freq_factor > c->low_freq_factor))
            return reel_seterr(r->err, REEL_E_INVALID_ARG, "%s: \"%shigh_freq_factor\" (%g) must be greater than "
                               "\"%slow_freq_factor\" (%g)", r->label, prefix, c->high_freq_factor, prefix,
                               c->low_freq_factor);
        break;
    default:
        break;
    }
    return REEL_OK;
}

/* ---- DeepSeek V3 ------------------------------------------------------------------ */

/* A string key that must have one value (absent: that value). */
static reel_status want_str(const rd *r, const char *key, const char *only, const char *what)
{
    const json_t *v = get(r->root, key);
    if (v && !(json_is_string(v) && strcmp(json_string_value(v), only) == 0))
        return reel_seterr(r->err, json_is_string(v) ? REEL_E_UNSUPPORTED : REEL_E_INVALID_ARG,
                           "%s: \"%s\" is %s%.40s%s; reel builds %s (\"%s\")", r->label, key,
                           json_is_string(v) ? "\"" : "", json_is_string(v) ? json_string_value(v) : "not a string",
                           json_is_string(v) ? "\"" : "", what, only);
    return REEL_OK;
}

/* DeepseekV3Config's attention: kv_lora_rank, q_lora_rank (null: a full q
 * projection), qk_nope_head_dim, qk_rope_head_dim, v_head_dim,
 * rope_interleave. transformers sets head_dim to qk_rope_head_dim (the
 * rope's width); a config.json saying otherwise is refused. */
static reel_status read_mla(const rd *r, model_cfg *c)
{
    const json_t *root = r->root;
    c->mla = true;
    TRY(get_int(r, root, "", "kv_lora_rank", 1, 65536, true, 512, &c->kv_lora));
    const json_t *ql = json_object_get(root, "q_lora_rank");
    if (ql && json_is_null(ql))
        c->q_lora = 0;
    else
        TRY(get_int(r, root, "", "q_lora_rank", 1, 65536, true, 1536, &c->q_lora));
    TRY(get_int(r, root, "", "qk_nope_head_dim", 1, 4096, true, 128, &c->qk_nope));
    TRY(get_int(r, root, "", "qk_rope_head_dim", 2, 4096, true, 64, &c->qk_rope));
    TRY(get_int(r, root, "", "v_head_dim", 1, 4096, true, 128, &c->v_dim));
    TRY(get_bool(r, root, "", "rope_interleave", true, &c->rope_interleave));
    if (c->qk_rope % 2 != 0)
        return reel_seterr(r->err, REEL_E_INVALID_ARG, "%s: \"qk_rope_head_dim\" %d is odd: rope rotates pairs",
                           r->label, c->qk_rope);
    if (get(root, "head_dim") && c->head_dim != c->qk_rope)
        return reel_seterr(r->err, REEL_E_UNSUPPORTED, "%s: \"head_dim\" %d is not \"qk_rope_head_dim\" %d, as "
                           "transformers sets it for DeepSeek V3", r->label, c->head_dim, c->qk_rope);
    c->head_dim = c->qk_rope;
    bool ab = false;
    TRY(get_bool(r, root, "", "attention_bias", false, &ab));
    if (ab)
        return reel_seterr(r->err, REEL_E_UNSUPPORTED, "%s: \"attention_bias\": true is not built for multi-head "
                           "latent attention", r->label);
    return REEL_OK;
}

/* DeepseekV3Config's experts: n_routed_experts (null: every layer dense),
 * num_experts_per_tok, moe_intermediate_size, n_shared_experts,
 * routed_scaling_factor, n_group, topk_group, norm_topk_prob,
 * first_k_dense_replace; the original checkpoints' scoring_func,
 * topk_method and moe_layer_freq must say what transformers builds. */
static reel_status read_deepseek_moe(const rd *r, model_cfg *c)
{
    const json_t *root = r->root;
    TRY(want_str(r, "scoring_func", "sigmoid", "sigmoid routing"));
    TRY(want_str(r, "topk_method", "noaux_tc", "the bias-corrected group top-k"));
    int freq = 1;
    TRY(get_int(r, root, "", "moe_layer_freq", 1, 4096, true, 1, &freq));
    if (freq != 1)
        return reel_seterr(r->err, REEL_E_UNSUPPORTED, "%s: \"moe_layer_freq\" %d is not built (1: every layer "
                           "from first_k_dense_replace on has experts, as transformers builds it)", r->label, freq);
    const json_t *ne = json_object_get(root, "n_routed_experts");
    if (ne && json_is_null(ne))
        c->experts = 0;
    else
        TRY(get_int(r, root, "", "n_routed_experts", 1, REEL_MOE_MAX_EXPERTS, true, 256, &c->experts));
    TRY(get_int(r, root, "", "num_experts_per_tok", 1, REEL_MOE_MAX_TOPK, true, 8, &c->topk));
    TRY(get_int(r, root, "", "moe_intermediate_size", 1, BIG, true, 2048, &c->moe_ffn));
    int shared = 1;
    TRY(get_int(r, root, "", "n_shared_experts", 0, 64, true, 1, &shared));
    c->shared_ffn = shared * c->moe_ffn;
    TRY(get_num(r, root, "", "routed_scaling_factor", 2.5, false, &c->routed_scaling));
    TRY(get_int(r, root, "", "n_group", 1, REEL_MOE_MAX_EXPERTS, true, 8, &c->n_group));
    TRY(get_int(r, root, "", "topk_group", 1, REEL_MOE_MAX_EXPERTS, true, 4, &c->topk_group));
    TRY(get_bool(r, root, "", "norm_topk_prob", true, &c->norm_topk));
    TRY(get_int(r, root, "", "first_k_dense_replace", 0, 4096, true, 3, &c->first_dense));
    if (c->experts == 0)
        return REEL_OK;
    if (c->topk > c->experts)
        return reel_seterr(r->err, REEL_E_INVALID_ARG, "%s: \"num_experts_per_tok\" %d is more than the %d experts",
                           r->label, c->topk, c->experts);
    if (c->experts % c->n_group != 0 || c->topk_group > c->n_group ||
        c->topk > c->topk_group * (c->experts / c->n_group) || (c->n_group > 1 && c->experts / c->n_group < 2))
        return reel_seterr(r->err, REEL_E_INVALID_ARG,
                           "%s: \"n_group\" %d must divide \"n_routed_experts\" %d into groups of at least 2, "
                           "\"topk_group\" %d be at most n_group, and \"num_experts_per_tok\" %d fit the kept groups",
                           r->label, c->n_group, c->experts, c->topk_group, c->topk);
    return REEL_OK;
}

/* ---- mixture of experts ------------------------------------------------------------ */

/* Qwen3MoeConfig (num_experts, num_experts_per_tok, moe_intermediate_size,
 * norm_topk_prob, decoder_sparse_step, mlp_only_layers) and MixtralConfig
 * (num_local_experts, num_experts_per_tok; always renormalized). Keys of
 * training only (router_aux_loss_coef, output_router_logits,
 * router_jitter_noise) are not read. */
static reel_status read_moe(const rd *r, const family_def *f, model_cfg *c)
{
    c->sparse_step = 1;
    if (f->moe == MOE_NONE)
        return REEL_OK;
    const json_t *root = r->root;
    if (f->moe == MOE_DEEPSEEK)
        return read_deepseek_moe(r, c);
    if (f->moe == MOE_MIXTRAL) {
        TRY(get_int(r, root, "", "num_local_experts", 1, REEL_MOE_MAX_EXPERTS, true, 8, &c->experts));
        TRY(get_int(r, root, "", "num_experts_per_tok", 1, REEL_MOE_MAX_TOPK, true, 2, &c->topk));
        c->moe_ffn = c->ffn;
        c->norm_topk = true;
    } else {
        TRY(get_int(r, root, "", "num_experts", 0, REEL_MOE_MAX_EXPERTS, true, 128, &c->experts));
        TRY(get_int(r, root, "", "num_experts_per_tok", 1, REEL_MOE_MAX_TOPK, true, 8, &c->topk));
        TRY(get_int(r, root, "", "moe_intermediate_size", 1, BIG, true, 768, &c->moe_ffn));
        TRY(get_bool(r, root, "", "norm_topk_prob", false, &c->norm_topk));
        TRY(get_int(r, root, "", "decoder_sparse_step", 1, 4096, true, 1, &c->sparse_step));
        const json_t *ml = get(root, "mlp_only_layers");
        if (ml && !json_is_array(ml))
            return reel_seterr(r->err, REEL_E_INVALID_ARG, "%s: \"mlp_only_layers\" wants a list of layer indices",
                               r->label);
        for (size_t i = 0; ml && i < json_array_size(ml); i++) {
            const json_t *e = json_array_get(ml, i);
            if (!json_is_integer(e) || json_integer_value(e) < 0 || json_integer_value(e) >= c->layers)
                return reel_seterr(r->err, REEL_E_INVALID_ARG, "%s: \"mlp_only_layers\"[%zu] wants a layer index in "
                                   "[0, %d]", r->label, i, c->layers - 1);
            int l = (int)json_integer_value(e);
            c->mlp_only[l / 64] |= 1ull << (l % 64);
        }
        if (c->experts == 0)
            return REEL_OK; /* transformers builds every layer dense */
    }
    if (c->topk > c->experts)
        return reel_seterr(r->err, REEL_E_INVALID_ARG, "%s: \"num_experts_per_tok\" %d is more than the %d experts",
                           r->label, c->topk, c->experts);
    return REEL_OK;
}

/* ---- the whole config ---------------------------------------------------------- */

reel_status model_cfg_read(const void *json_root, const char *label, model_cfg *c, reel_err *err)
{
    const json_t *root = json_root;
    rd r = {root, label, err};
    memset(c, 0, sizeof *c);
    c->context_limit = INT32_MAX;
    if (!json_is_object(root))
        return reel_seterr(err, REEL_E_INVALID_ARG, "%s: not a JSON object", label);
    const json_t *mt = get(root, "model_type");
    if (!mt || !json_is_string(mt))
        return reel_seterr(err, REEL_E_INVALID_ARG, "%s: no \"model_type\" string", label);
    const family_def *f = NULL;
    for (size_t i = 0; i < sizeof families / sizeof families[0]; i++)
        if (strcmp(json_string_value(mt), families[i].type) == 0)
            f = &families[i];
    if (!f)
        return reel_seterr(err, REEL_E_UNSUPPORTED, "%s: \"model_type\" is \"%.40s\"; reel builds llama, mistral, "
                           "qwen2, qwen3, qwen3_moe, mixtral, deepseek_v3 and kimi_k2", label, json_string_value(mt));
    c->family = f->family;
    TRY(refuse_unbuilt(&r, f));
    TRY(get_int(&r, root, "", "num_hidden_layers", 1, 4096, false, 0, &c->layers));
    TRY(get_int(&r, root, "", "hidden_size", 2, BIG, false, 0, &c->hidden));
    TRY(get_int(&r, root, "", "num_attention_heads", 1, 4096, false, 0, &c->heads));
    TRY(get_int(&r, root, "", "num_key_value_heads", 1, 4096, true, c->heads, &c->kv_heads));
    TRY(get_int(&r, root, "", "intermediate_size", 1, BIG, false, 0, &c->ffn));
    TRY(get_int(&r, root, "", "vocab_size", 2, BIG, false, 0, &c->vocab));
    int hd_def = f->head_dim ? f->head_dim : c->hidden / c->heads;
    TRY(get_int(&r, root, "", "head_dim", 2, 4096, true, hd_def, &c->head_dim));
    TRY(get_int(&r, root, "", "max_position_embeddings", 1, INT32_MAX, true, f->max_pos, &c->max_pos));
    TRY(get_num(&r, root, "", "rms_norm_eps", 1e-6, false, &c->eps));
    TRY(get_num(&r, root, "", "rope_theta", 10000.0, false, &c->theta));
    TRY(get_bool(&r, root, "", "tie_word_embeddings", false, &c->tied));
    bool ab = false;
    if (f->attention_bias)
        TRY(get_bool(&r, root, "", "attention_bias", false, &ab));
    c->qkv_bias = ab || f->qkv_bias;
    c->o_bias = ab;
    c->qk_norm = f->qk_norm;
    TRY(read_dtype(&r, c));
    if (!f->head_dim && !get(root, "head_dim") && c->hidden % c->heads != 0 && f->moe != MOE_DEEPSEEK)
        return reel_seterr(err, REEL_E_INVALID_ARG, "%s: \"hidden_size\" %d is not a multiple of "
                           "\"num_attention_heads\" %d (and no \"head_dim\")", label, c->hidden, c->heads);
    if (c->heads % c->kv_heads != 0)
        return reel_seterr(err, REEL_E_INVALID_ARG, "%s: \"num_attention_heads\" %d is not a multiple of "
                           "\"num_key_value_heads\" %d", label, c->heads, c->kv_heads);
    if (f->moe == MOE_DEEPSEEK)
        TRY(read_mla(&r, c));
    if (c->head_dim % 2 != 0)
        return reel_seterr(err, REEL_E_INVALID_ARG, "%s: the head dim (\"head_dim\" or hidden_size / "
                           "num_attention_heads) is %d, odd: rope rotates pairs", label, c->head_dim);
    TRY(read_rope(&r, c));
    TRY(read_sliding(&r, c));
    TRY(read_moe(&r, f, c));
    return REEL_OK;
}
