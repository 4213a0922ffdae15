/* L7 models/: the public surface (include/reel/models.h): open a checkpoint
 * directory or parse a config, check the checkpoint against the model, say
 * the model's shape, build, bind and compile. */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "backend/ctx.h"
#include "core/abi.h"
#include "core/dtype.h"
#include "core/halloc.h"
#include "core/opts.h"
#include "graph/builder.h"
#include "models/model.h"
#include "runtime/plan.h"

static const char *const family_names[REEL_MODEL_FAMILY_COUNT] = {"llama", "mistral", "qwen2", "qwen3",
                                                                        "qwen3_moe", "mixtral", "deepseek_v3"};
static const char *const rope_type_names[REEL_ROPE_TYPE_COUNT] = {"default", "linear", "dynamic", "yarn", "llama3"};

const char *reel_model_family_name(reel_model_family f)
{
    return (int)f >= 0 && f < REEL_MODEL_FAMILY_COUNT ? family_names[f] : NULL;
}

const char *reel_rope_type_name(reel_rope_type t)
{
    return (int)t >= 0 && t < REEL_ROPE_TYPE_COUNT ? rope_type_names[t] : NULL;
}

static reel_err *err_of(reel_ctx *ctx) { return ctx ? &ctx->err : NULL; }

void reel_model_close(reel_model *m)
{
    if (!m)
        return;
    reel_safetensors_close(m->ck);
    reel_hfree(m->inv_freq);
    reel_hfree(m->inv_freq_f32);
    reel_hfree(m->t);
    reel_hfree(m->tidx);
    reel_hfree(m);
}

/* The model of a parsed config.json: tensors, rope table. */
static reel_status model_new(reel_ctx *ctx, const json_t *root, const char *label, reel_model **out)
{
    reel_err *err = err_of(ctx);
    reel_model *m = reel_hcalloc(1, sizeof *m);
    if (!m)
        return reel_seterr(err, REEL_E_OOM, "model: out of host memory");
    m->ctx = ctx;
    reel_status st = model_cfg_read(root, label, &m->c, err);
    if (st == REEL_OK)
        st = model_tensors_make(m, err);
    if (st == REEL_OK) {
        int half = m->c.head_dim / 2;
        m->inv_freq = reel_hcalloc((size_t)half, sizeof *m->inv_freq);
        m->inv_freq_f32 = reel_hcalloc((size_t)half, sizeof *m->inv_freq_f32);
        if (!m->inv_freq || !m->inv_freq_f32)
            st = reel_seterr(err, REEL_E_OOM, "model: out of host memory");
    }
    if (st != REEL_OK) {
        reel_model_close(m);
        return st;
    }
    model_rope_inv_freq(&m->c, m->inv_freq, &m->attn_factor);
    for (int i = 0; i < m->c.head_dim / 2; i++)
        m->inv_freq_f32[i] = (float)m->inv_freq[i];
    *out = m;
    return REEL_OK;
}

reel_status reel_model_parse(reel_ctx *ctx, const char *json, size_t len, reel_model **out)
{
    if (out)
        *out = NULL;
    if (!json || !out)
        return reel_seterr(err_of(ctx), REEL_E_INVALID_ARG, "reel_model_parse: json and out must not be NULL");
    json_error_t je;
    json_t *root = json_loadb(json, len ? len : strlen(json), JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return reel_seterr(err_of(ctx), REEL_E_INVALID_ARG, "config.json: %s (line %d, column %d)", je.text, je.line,
                           je.column);
    reel_status st = model_new(ctx, root, "config.json", out);
    json_decref(root);
    return st;
}

/* ---- the checkpoint against the model ----------------------------------------- */

static const char *shape_str(int ndim, const int64_t *d, char *buf, size_t n)
{
    if (ndim == 1)
        snprintf(buf, n, "[%lld]", (long long)d[0]);
    else if (ndim == 2)
        snprintf(buf, n, "[%lld, %lld]", (long long)d[0], (long long)d[1]);
    else
        snprintf(buf, n, "(%d dims)", ndim);
    return buf;
}

static bool ends_with(const char *s, const char *sfx)
{
    size_t a = strlen(s), b = strlen(sfx);
    return a >= b && strcmp(s + a - b, sfx) == 0;
}

/* Every tensor the model reads is there at its shape and dtype; nothing
 * the model would leave unread is. */
static reel_status check_checkpoint(reel_model *m, const char *dir)
{
    reel_err *err = err_of(m->ctx);
    const model_cfg *c = &m->c;
    if (!c->dtype_given) { /* no torch_dtype: the embedding's */
        reel_st_tensor e = REEL_ST_TENSOR_INIT;
        if (reel_safetensors_find(m->ck, "model.embed_tokens.weight", &e) == REEL_OK && e.dtype != REEL_DTYPE_COUNT &&
            e.dtype != REEL_I32)
            m->c.dtype = e.dtype;
    }
    char a[64], b[64];
    for (int i = 0; i < m->nt; i++) {
        const model_tensor *t = &m->t[i];
        reel_st_tensor s = REEL_ST_TENSOR_INIT;
        if (reel_safetensors_find(m->ck, t->name, &s) != REEL_OK)
            return reel_seterr(err, REEL_E_NOT_FOUND, "%s: no tensor '%s', which a %s model of this config.json "
                               "reads (%s %s)", dir, t->name, family_names[c->family], reel_dtype_name(c->dtype),
                               shape_str(t->ndim, t->dims, a, sizeof a));
        bool shape_ok = s.ndim == t->ndim && s.dims[0] == t->dims[0] && (t->ndim == 1 || s.dims[1] == t->dims[1]);
        if (!shape_ok || (s.dtype != c->dtype && !(t->f32_ok && s.dtype == REEL_F32)))
            return reel_seterr(err, !shape_ok ? REEL_E_SHAPE : REEL_E_DTYPE, "%s: tensor '%s' is %s %s; the model "
                               "(config.json) wants %s %s", s.file, t->name, s.dtype_name,
                               shape_str(s.ndim, s.dims, a, sizeof a), reel_dtype_name(c->dtype),
                               shape_str(t->ndim, t->dims, b, sizeof b));
    }
    for (int i = 0, n = reel_safetensors_count(m->ck); i < n; i++) {
        reel_st_tensor s = REEL_ST_TENSOR_INIT;
        if (reel_safetensors_tensor(m->ck, i, &s) != REEL_OK)
            continue;
        bool read = false;
        for (int j = 0; j < m->nt && !read; j++)
            read = strcmp(m->t[j].name, s.name) == 0;
        /* tied: a stored copy of the table is not read; rotary buffers are derived */
        if (read || (c->tied && strcmp(s.name, "lm_head.weight") == 0) || ends_with(s.name, "rotary_emb.inv_freq"))
            continue;
        return reel_seterr(err, REEL_E_UNSUPPORTED, "%s: tensor '%s' is not read by a %s model of this config.json "
                           "(%d layers%s%s%s%s): reel refuses to leave a weight unused (a key of config.json that "
                           "says it is missing or wrong?)", s.file, s.name, family_names[c->family], c->layers,
                           c->qkv_bias ? ", q/k/v biases" : "", c->o_bias ? ", o bias" : "",
                           c->qk_norm ? ", q/k norms" : "", c->tied ? ", tied embeddings" : "");
    }
    return REEL_OK;
}

reel_status reel_model_open(reel_ctx *ctx, const char *dir, reel_model **out)
{
    if (out)
        *out = NULL;
    reel_err *err = err_of(ctx);
    if (!dir || !out)
        return reel_seterr(err, REEL_E_INVALID_ARG, "reel_model_open: dir and out must not be NULL");
    size_t n = strlen(dir) + 16;
    char *path = reel_halloc(n);
    if (!path)
        return reel_seterr(err, REEL_E_OOM, "model: out of host memory");
    snprintf(path, n, "%s/config.json", dir);
    json_error_t je;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    reel_status st = REEL_OK;
    if (!root)
        st = reel_seterr(err, je.line < 0 || strstr(je.text, "unable to open") ? REEL_E_NOT_FOUND : REEL_E_INVALID_ARG,
                         "%s: %s (line %d)", path, je.text, je.line);
    reel_model *m = NULL;
    if (st == REEL_OK)
        st = model_new(ctx, root, path, &m);
    json_decref(root);
    if (st == REEL_OK && (st = reel_safetensors_open(ctx, dir, &m->ck)) != REEL_OK)
        reel_err_prefix(err, st, "model %s", dir);
    if (st == REEL_OK)
        st = check_checkpoint(m, dir);
    reel_hfree(path);
    if (st != REEL_OK) {
        reel_model_close(m);
        return st;
    }
    *out = m;
    return REEL_OK;
}

/* ---- what the model is ------------------------------------------------------------ */

reel_status reel_model_info_get(const reel_model *m, reel_model_info *out)
{
    if (!m)
        return reel_seterr(NULL, REEL_E_INVALID_ARG, "reel_model_info_get: NULL model");
    const model_cfg *c = &m->c;
    reel_model_info full = REEL_MODEL_INFO_INIT;
    full.family = c->family;
    full.layers = c->layers;
    full.hidden = c->hidden;
    full.heads = c->heads;
    full.kv_heads = c->kv_heads;
    full.head_dim = c->head_dim;
    full.ffn = c->ffn;
    full.vocab = c->vocab;
    full.tied = c->tied;
    full.dtype = c->dtype;
    full.qkv_bias = c->qkv_bias;
    full.o_bias = c->o_bias;
    full.qk_norm = c->qk_norm;
    full.rms_norm_eps = c->eps;
    full.rope_theta = c->theta;
    full.rope_type = c->rope;
    full.rope_factor = c->factor;
    full.rope_attention_factor = m->attn_factor;
    full.max_position_embeddings = c->max_pos;
    full.max_context = c->context_limit;
    uint64_t elems = 0;
    for (int i = 0; i < m->nt; i++)
        elems += (uint64_t)m->t[i].dims[0] * (uint64_t)(m->t[i].ndim == 2 ? m->t[i].dims[1] : 1);
    full.param_bytes = elems * reel_dtype_size(c->dtype);
    full.kv_bytes_per_token =
        c->mla ? (uint64_t)c->layers * ((uint64_t)c->kv_lora + (uint64_t)c->qk_rope) * reel_dtype_size(c->dtype)
               : 2ull * (uint64_t)c->layers * (uint64_t)c->kv_heads * (uint64_t)c->head_dim * reel_dtype_size(c->dtype);
    if (c->mla) {
        full.kv_lora_rank = c->kv_lora;
        full.q_lora_rank = c->q_lora;
        full.qk_nope_head_dim = c->qk_nope;
        full.qk_rope_head_dim = c->qk_rope;
        full.v_head_dim = c->v_dim;
    }
    full.shared_expert_ffn = c->experts > 0 ? c->shared_ffn : 0;
    full.has_weights = m->ck != NULL;
    full.experts = c->experts;
    full.experts_per_token = c->experts > 0 ? c->topk : 0;
    full.expert_ffn = c->experts > 0 ? c->moe_ffn : 0;
    uint64_t unused = 0; /* expert weights one token does not read */
    for (int l = 0; l < c->layers; l++) {
        if (!model_layer_moe(c, l))
            continue;
        full.moe_layers++;
        unused += (uint64_t)(c->experts - c->topk) * 3ull * (uint64_t)c->moe_ffn * (uint64_t)c->hidden;
    }
    full.active_param_bytes = full.param_bytes - unused * reel_dtype_size(c->dtype);
    return reel_struct_fill(out, &full, &reel_abi_model_info, err_of(m->ctx));
}

reel_status reel_model_rope(const reel_model *m, double *inv_freq, int n, double *attention_factor)
{
    if (!m)
        return reel_seterr(NULL, REEL_E_INVALID_ARG, "reel_model_rope: NULL model");
    int half = m->c.head_dim / 2;
    if (inv_freq ? n != half : n != 0)
        return reel_seterr(err_of(m->ctx), REEL_E_INVALID_ARG, "reel_model_rope: n is %d; the model has head_dim / 2 "
                           "= %d frequencies (n 0 with inv_freq NULL: the factor alone)", n, half);
    for (int i = 0; inv_freq && i < half; i++)
        inv_freq[i] = m->inv_freq[i];
    if (attention_factor)
        *attention_factor = m->attn_factor;
    return REEL_OK;
}

int reel_model_tensor_count(const reel_model *m) { return m ? m->nt : 0; }

static reel_model_tensor tensor_info(const reel_model *m, int i)
{
    reel_model_tensor t = REEL_MODEL_TENSOR_INIT;
    t.name = m->t[i].name;
    t.dtype = m->c.dtype;
    t.ndim = m->t[i].ndim;
    t.dims[0] = m->t[i].dims[0];
    t.dims[1] = m->t[i].dims[1];
    t.layer = m->t[i].layer;
    return t;
}

reel_status reel_model_tensor_get(const reel_model *m, int i, reel_model_tensor *out)
{
    if (!m)
        return reel_seterr(NULL, REEL_E_INVALID_ARG, "reel_model_tensor_get: NULL model");
    if (i < 0 || i >= m->nt)
        return reel_seterr(err_of(m->ctx), REEL_E_NOT_FOUND, "reel_model_tensor_get: tensor %d of %d", i, m->nt);
    reel_model_tensor t = tensor_info(m, i);
    return reel_struct_fill(out, &t, &reel_abi_model_tensor, err_of(m->ctx));
}

/* ---- build, bind, compile ---------------------------------------------------------- */

reel_status reel_model_build(const reel_model *m, reel_graph *g, const reel_model_opts *opts)
{
    if (!g)
        return reel_seterr(m ? err_of(m->ctx) : NULL, REEL_E_INVALID_ARG, "reel_model_build: NULL graph");
    if (!m)
        return reel_graph_fail(g, REEL_E_INVALID_ARG, "reel_model_build: NULL model");
    if (g->err != REEL_OK)
        return g->err;
    model_opts o;
    reel_err *gerr = err_of(g->ctx);
    reel_status st = model_opts_resolve(m, opts, &o, gerr);
    if (st != REEL_OK) {
        char msg[REEL_ERRMSG_MAX];
        reel_err_copy(gerr, msg, sizeof msg);
        return reel_graph_fail(g, st, "%s", msg);
    }
    return model_graph(m, g, &o);
}

/* A float32 parameter of one tensor that the checkpoint (or the source)
 * may hold in the model's dtype: widened on the way. */
static reel_status bind_f32(const reel_model *m, reel_plan *p, const model_param *pp, reel_model_source_fn fn,
                            void *user)
{
    reel_err *err = p->err;
    int idx = model_param_part(pp, 0);
    int64_t n = pp->dims[0] * (pp->ndim == 2 ? pp->dims[1] : 1);
    const void *src;
    reel_dtype sdt;
    char *own = NULL;
    if (!fn) {
        reel_st_tensor s = REEL_ST_TENSOR_INIT;
        REEL_TRY(reel_safetensors_find(m->ck, m->t[idx].name, &s));
        if (s.dtype == REEL_F32)
            return reel_plan_write_param(p, pp->name, s.data, (size_t)n * sizeof(float));
        src = s.data;
        sdt = s.dtype;
    } else {
        reel_model_tensor t = tensor_info(m, idx);
        size_t tb = (size_t)n * reel_dtype_size(m->c.dtype);
        own = reel_halloc(tb ? tb : 1);
        if (!own)
            return reel_seterr(err, REEL_E_OOM, "reel_model_bind_source: out of host memory for '%s'", pp->name);
        reel_status st = fn(user, &t, own, tb);
        if (st != REEL_OK) {
            reel_hfree(own);
            return reel_seterr(err, st, "reel_model_bind_source: the source gave %s for tensor '%s'",
                               reel_status_str(st), t.name);
        }
        src = own;
        sdt = m->c.dtype;
    }
    float *f = reel_halloc((size_t)n * sizeof *f + 1);
    reel_status st;
    if (!f) {
        st = reel_seterr(err, REEL_E_OOM, "reel_model_bind: out of host memory for '%s'", pp->name);
    } else {
        for (int64_t i = 0; i < n; i++)
            f[i] = reel_load(src, sdt, i);
        st = reel_plan_write_param(p, pp->name, f, (size_t)n * sizeof *f);
    }
    reel_hfree(f);
    reel_hfree(own);
    return st;
}

/* The weights of the stage: from the checkpoint (fn NULL) or from fn. */
static reel_status bind(const reel_model *m, reel_plan *p, const reel_model_opts *opts, reel_model_source_fn fn,
                        void *user)
{
    if (!p)
        return reel_seterr(m ? err_of(m->ctx) : NULL, REEL_E_INVALID_ARG, "reel_model_bind: NULL plan");
    reel_err *err = p->err;
    if (!m)
        return reel_seterr(err, REEL_E_INVALID_ARG, "reel_model_bind: NULL model");
    if (!fn && !m->ck)
        return reel_seterr(err, REEL_E_INVALID_USAGE, "reel_model_bind: the model was parsed from a config alone "
                           "and has no weights: write them with reel_model_bind_source");
    model_opts o;
    REEL_TRY(model_opts_resolve(m, opts, &o, err));
    model_param *ps = NULL;
    int np = 0;
    REEL_TRY(model_params(m, &o, &ps, &np, err));
    reel_status st = REEL_OK;
    for (int i = 0; i < np && st == REEL_OK; i++) {
        const model_param *pp = &ps[i];
        if (pp->nparts == 0) { /* the rope table */
            st = reel_plan_write_param(p, pp->name, m->inv_freq_f32, (size_t)pp->dims[0] * sizeof(float));
            continue;
        }
        if (pp->dtype != m->c.dtype) { /* a float32 parameter of one tensor (a router's choice bias) */
            st = bind_f32(m, p, pp, fn, user);
            continue;
        }
        if (!fn) {
            const char **names = reel_halloc((size_t)pp->nparts * sizeof *names);
            if (!names) {
                st = reel_seterr(err, REEL_E_OOM, "reel_model_bind: out of host memory for '%s'", pp->name);
                break;
            }
            for (int k = 0; k < pp->nparts; k++)
                names[k] = m->t[model_param_part(pp, k)].name;
            st = reel_safetensors_write_param(m->ck, p, pp->name, pp->nparts, names);
            reel_hfree(names);
            continue;
        }
        size_t es = reel_dtype_size(pp->dtype);
        size_t bytes = (size_t)pp->dims[0] * (size_t)(pp->ndim == 2 ? pp->dims[1] : 1) * es;
        char *buf = reel_halloc(bytes ? bytes : 1);
        if (!buf) {
            st = reel_seterr(err, REEL_E_OOM, "reel_model_bind_source: out of host memory for '%s' (%zu bytes)",
                             pp->name, bytes);
            break;
        }
        size_t at = 0;
        for (int k = 0; k < pp->nparts && st == REEL_OK; k++) {
            reel_model_tensor t = tensor_info(m, model_param_part(pp, k));
            size_t tb = (size_t)t.dims[0] * (size_t)(t.ndim == 2 ? t.dims[1] : 1) * es;
            st = fn(user, &t, buf + at, tb);
            if (st != REEL_OK)
                reel_seterr(err, st, "reel_model_bind_source: the source gave %s for tensor '%s'",
                            reel_status_str(st), t.name);
            at += tb;
        }
        if (st == REEL_OK)
            st = reel_plan_write_param(p, pp->name, buf, bytes);
        reel_hfree(buf);
    }
    reel_hfree(ps);
    return st;
}

reel_status reel_model_bind(const reel_model *m, reel_plan *p, const reel_model_opts *opts)
{
    return bind(m, p, opts, NULL, NULL);
}

reel_status reel_model_bind_source(const reel_model *m, reel_plan *p, const reel_model_opts *opts,
                                   reel_model_source_fn fn, void *user)
{
    if (!fn)
        return reel_seterr(p ? p->err : m ? err_of(m->ctx) : NULL, REEL_E_INVALID_ARG,
                           "reel_model_bind_source: NULL source");
    return bind(m, p, opts, fn, user);
}

/* The model's options resolved, and the compile options a plan of them
 * takes: base's (NULL: defaults), with the model options' buckets and limits. */
static reel_status compile_opts_of(const reel_model *m, const reel_model_opts *opts, const reel_compile_opts *base,
                                   model_opts *o, reel_compile_opts *co, reel_err *err)
{
    REEL_TRY(model_opts_resolve(m, opts, o, err));
    *co = (reel_compile_opts)REEL_COMPILE_OPTS_INIT;
    if (base)
        REEL_TRY(reel_struct_load(co, base, &reel_abi_compile_opts, err));
    co->num_buckets = o->num_buckets;
    memcpy(co->buckets, o->buckets, sizeof co->buckets);
    co->max_context = o->max_context;
    co->max_seqs = o->max_seqs;
    return REEL_OK;
}

reel_status reel_model_compile(const reel_model *m, const reel_model_opts *opts, const reel_compile_opts *base,
                               reel_plan **out)
{
    if (out)
        *out = NULL;
    if (!m || !out)
        return reel_seterr(m ? err_of(m->ctx) : NULL, REEL_E_INVALID_ARG, "reel_model_compile: model and out must "
                           "not be NULL");
    reel_err *err = err_of(m->ctx);
    model_opts o;
    reel_compile_opts co;
    REEL_TRY(compile_opts_of(m, opts, base, &o, &co, err));
    reel_graph *g = NULL;
    reel_status st = reel_graph_create(m->ctx, &g);
    if (st == REEL_OK && (st = reel_model_build(m, g, opts)) != REEL_OK)
        reel_err_prefix(err, st, "building the model's graph");
    reel_plan *p = NULL;
    if (st == REEL_OK)
        st = reel_compile(g, &co, &p);
    reel_graph_destroy(g);
    if (st == REEL_OK && m->ck && (st = reel_model_bind(m, p, opts)) != REEL_OK)
        reel_err_prefix(p->err, st, "writing the model's weights");
    if (st != REEL_OK) {
        reel_plan_destroy(p);
        return st;
    }
    *out = p;
    return REEL_OK;
}

/* What a plan of the model with `nblocks` blocks would take, allocating
 * nothing: parameters and states, and the rest (the arena, the step
 * region, workspaces; pinned staging where it is the same memory). */
static reel_status estimate(const reel_model *m, const reel_model_opts *opts, const reel_compile_opts *co,
                            int32_t nblocks, size_t *tensors, size_t *rest)
{
    reel_model_opts mo = REEL_MODEL_OPTS_INIT;
    if (opts)
        REEL_TRY(reel_struct_load(&mo, opts, &reel_abi_model_opts, err_of(m->ctx)));
    mo.num_blocks = nblocks;
    reel_graph *g = NULL;
    reel_status st = reel_graph_create(m->ctx, &g);
    if (st == REEL_OK)
        st = reel_model_build(m, g, &mo);
    reel_plan_memory e = REEL_PLAN_MEMORY_INIT;
    if (st == REEL_OK)
        st = reel_compile_estimate(g, co, &e);
    reel_graph_destroy(g);
    REEL_TRY(st);
    *tensors = e.param_bytes + e.state_bytes;
    *rest = e.device_bytes + (reel_ctx_backend(m->ctx) == REEL_BACKEND_HOST ? e.pinned_bytes : 0);
    return REEL_OK;
}

reel_status reel_model_kv_blocks(const reel_model *m, const reel_model_opts *opts, const reel_compile_opts *base,
                                 double fraction, int32_t *blocks, int64_t *tokens)
{
    if (!m)
        return reel_seterr(NULL, REEL_E_INVALID_ARG, "reel_model_kv_blocks: the model is NULL");
    reel_err *err = err_of(m->ctx);
    if (!(fraction > 0.0 && fraction <= 1.0))
        return reel_seterr(err, REEL_E_INVALID_ARG, "reel_model_kv_blocks: fraction %g outside (0, 1]", fraction);
    model_opts o;
    reel_compile_opts co;
    REEL_TRY(compile_opts_of(m, opts, base, &o, &co, err));
    /* one block and two: what a block costs in every layer, and the rest */
    size_t t1, r1, t2, r2;
    REEL_TRY(estimate(m, opts, &co, 1, &t1, &r1));
    REEL_TRY(estimate(m, opts, &co, 2, &t2, &r2));
    size_t per_block = t2 - t1, fixed = t1 - per_block + (r1 > r2 ? r1 : r2);
    size_t avail, total;
    REEL_TRY(reel_ctx_memory(m->ctx, &avail, &total));
    double share = fraction * (double)total;
    size_t budget = share < (double)avail ? (size_t)share : avail;
    if (per_block == 0 || budget < fixed + per_block)
        return reel_seterr(err, REEL_E_OOM, "reel_model_kv_blocks: %.3g of %zu bytes (%zu available now) leaves "
                           "%zu bytes after the plan's %zu without its cache: less than one block of %d tokens "
                           "(%zu bytes in all layers)", fraction, total, avail,
                           budget > fixed ? budget - fixed : 0, fixed, o.block_size, per_block);
    size_t n = (budget - fixed) / per_block;
    if (n > (size_t)INT32_MAX)
        n = INT32_MAX;
    if (blocks)
        *blocks = (int32_t)n;
    if (tokens)
        *tokens = (int64_t)n * o.block_size;
    return REEL_OK;
}
