/* L7 models/: the one Llama-family decoder of the tree (Llama, Mistral,
 * Qwen2, Qwen3 differ only in the switches of model_cfg): its checkpoint
 * tensors, the parameters of a (pipeline stage's) graph, and the graph. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/halloc.h"
#include "core/opts.h"
#include "core/abi.h"
#include "graph/builder.h"
#include "models/model.h"
#include "reel/parallel.h"
#include "reel/comm.h"

/* ---- checkpoint tensors ------------------------------------------------------ */

/* Suffixes of a layer's tensors after "model.layers.<i>.", by kind. */
static const char *const layer_suffix[MT_LAYER_KINDS] = {
    [MT_IN_NORM] = "input_layernorm.weight",
    [MT_Q] = "self_attn.q_proj.weight",
    [MT_K] = "self_attn.k_proj.weight",
    [MT_V] = "self_attn.v_proj.weight",
    [MT_QB] = "self_attn.q_proj.bias",
    [MT_KB] = "self_attn.k_proj.bias",
    [MT_VB] = "self_attn.v_proj.bias",
    [MT_QN] = "self_attn.q_norm.weight",
    [MT_KN] = "self_attn.k_norm.weight",
    [MT_O] = "self_attn.o_proj.weight",
    [MT_OB] = "self_attn.o_proj.bias",
    [MT_POST_NORM] = "post_attention_layernorm.weight",
    [MT_GATE] = "mlp.gate_proj.weight",
    [MT_UP] = "mlp.up_proj.weight",
    [MT_DOWN] = "mlp.down_proj.weight",
    [MT_ROUTER] = "mlp.gate.weight",
    [MT_QA] = "self_attn.q_a_proj.weight",
    [MT_QA_NORM] = "self_attn.q_a_layernorm.weight",
    [MT_QBP] = "self_attn.q_b_proj.weight",
    [MT_KVA] = "self_attn.kv_a_proj_with_mqa.weight",
    [MT_KVA_NORM] = "self_attn.kv_a_layernorm.weight",
    [MT_KVB] = "self_attn.kv_b_proj.weight",
    [MT_ROUTER_BIAS] = "mlp.gate.e_score_correction_bias",
    [MT_SH_GATE] = "mlp.shared_experts.gate_proj.weight",
    [MT_SH_UP] = "mlp.shared_experts.up_proj.weight",
    [MT_SH_DOWN] = "mlp.shared_experts.down_proj.weight",
};

/* The experts' names: "mlp.experts.<e>.gate_proj.weight" (Qwen3-MoE) or
 * "block_sparse_moe.experts.<e>.w1.weight" (Mixtral: w1 gate, w3 up, w2
 * down), j 0 gate, 1 up, 2 down. */
static void expert_name(const model_cfg *c, int l, int e, int j, char *buf, size_t len)
{
    static const char *const qwen[3] = {"gate_proj", "up_proj", "down_proj"}, *const mix[3] = {"w1", "w3", "w2"};
    if (c->family == REEL_MODEL_MIXTRAL)
        snprintf(buf, len, "model.layers.%d.block_sparse_moe.experts.%d.%s.weight", l, e, mix[j]);
    else
        snprintf(buf, len, "model.layers.%d.mlp.experts.%d.%s.weight", l, e, qwen[j]);
}

static const char *router_suffix(const model_cfg *c)
{
    return c->family == REEL_MODEL_MIXTRAL ? "block_sparse_moe.gate.weight" : "mlp.gate.weight";
}

int model_tensor_index(const reel_model *m, int layer, int kind)
{
    if (layer < 0)
        return kind >= 0 && kind < MT_GLOBAL_KINDS ? m->tidx[kind] : -1;
    if (layer >= m->c.layers || kind < 0 || kind >= MT_LAYER_KINDS)
        return -1;
    return m->tidx[MT_GLOBAL_KINDS + layer * MT_LAYER_KINDS + kind];
}

static void push(reel_model *m, int *slot, const char *name, int64_t d0, int64_t d1, int layer)
{
    model_tensor *t = &m->t[m->nt];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ndim = d1 ? 2 : 1;
    t->dims[0] = d0;
    t->dims[1] = d1;
    t->layer = layer;
    *slot = m->nt++;
}

reel_status model_tensors_make(reel_model *m, reel_err *err)
{
    const model_cfg *c = &m->c;
    const int64_t D = c->hidden, Dh = c->head_dim, Q = (int64_t)c->heads * Dh, KV = (int64_t)c->kv_heads * Dh;
    const int64_t F = c->ffn, V = c->vocab;
    size_t nidx = MT_GLOBAL_KINDS + (size_t)c->layers * MT_LAYER_KINDS;
    m->t = reel_hcalloc(3 + (size_t)c->layers * (MT_LAYER_KINDS + 3 * (size_t)c->experts), sizeof *m->t);
    m->tidx = reel_halloc(nidx * sizeof *m->tidx);
    if (!m->t || !m->tidx)
        return reel_seterr(err, REEL_E_OOM, "model: out of host memory for the tensor table");
    for (size_t i = 0; i < nidx; i++)
        m->tidx[i] = -1;
    push(m, &m->tidx[MT_EMBED], "model.embed_tokens.weight", V, D, -1);
    for (int l = 0; l < c->layers; l++) {
        const bool moe = model_layer_moe(c, l), mla = c->mla;
        const int64_t Fd = moe ? 0 : F; /* a layer with experts has no dense MLP */
        /* MLA: q heads of nope + rope, one latent of L + rope, values of v */
        const int64_t H = c->heads, Dq = (int64_t)c->qk_nope + c->qk_rope, L = c->kv_lora;
        const int64_t Qm = H * Dq, Fs = moe ? c->shared_ffn : 0;
        /* [out, in] per kind; 0: absent from this model */
        const int64_t shape[MT_LAYER_KINDS][2] = {
            [MT_IN_NORM] = {D, 0}, [MT_Q] = {mla ? (c->q_lora ? 0 : Qm) : Q, D}, [MT_K] = {mla ? 0 : KV, D},
            [MT_V] = {mla ? 0 : KV, D},
            [MT_QB] = {c->qkv_bias ? Q : 0, 0}, [MT_KB] = {c->qkv_bias ? KV : 0, 0},
            [MT_VB] = {c->qkv_bias ? KV : 0, 0}, [MT_QN] = {c->qk_norm ? Dh : 0, 0},
            [MT_KN] = {c->qk_norm ? Dh : 0, 0}, [MT_O] = {D, mla ? H * c->v_dim : Q},
            [MT_OB] = {c->o_bias ? D : 0, 0},
            [MT_POST_NORM] = {D, 0}, [MT_GATE] = {Fd, D}, [MT_UP] = {Fd, D}, [MT_DOWN] = {Fd ? D : 0, Fd},
            [MT_ROUTER] = {moe ? c->experts : 0, D},
            [MT_QA] = {mla ? c->q_lora : 0, D}, [MT_QA_NORM] = {mla ? c->q_lora : 0, 0},
            [MT_QBP] = {mla && c->q_lora ? Qm : 0, c->q_lora}, [MT_KVA] = {mla ? L + c->qk_rope : 0, D},
            [MT_KVA_NORM] = {mla ? L : 0, 0}, [MT_KVB] = {mla ? H * ((int64_t)c->qk_nope + c->v_dim) : 0, L},
            [MT_ROUTER_BIAS] = {moe && c->family == REEL_MODEL_DEEPSEEK_V3 ? c->experts : 0, 0},
            [MT_SH_GATE] = {Fs, D}, [MT_SH_UP] = {Fs, D}, [MT_SH_DOWN] = {Fs ? D : 0, Fs},
        };
        for (int k = 0; k < MT_LAYER_KINDS; k++) {
            if (!shape[k][0] || k == MT_EXPERTS)
                continue;
            char n[96];
            snprintf(n, sizeof n, "model.layers.%d.%s", l, k == MT_ROUTER ? router_suffix(c) : layer_suffix[k]);
            push(m, &m->tidx[MT_GLOBAL_KINDS + l * MT_LAYER_KINDS + k], n, shape[k][0], shape[k][1], l);
            m->t[m->nt - 1].f32_ok = k == MT_ROUTER_BIAS;
        }
        for (int e = 0; moe && e < c->experts; e++) {
            const int64_t Fe = c->moe_ffn;
            const int64_t es[3][2] = {{Fe, D}, {Fe, D}, {D, Fe}};
            for (int j = 0; j < 3; j++) {
                char n[96];
                int slot;
                expert_name(c, l, e, j, n, sizeof n);
                push(m, &slot, n, es[j][0], es[j][1], l);
                if (e == 0 && j == 0)
                    m->tidx[MT_GLOBAL_KINDS + l * MT_LAYER_KINDS + MT_EXPERTS] = slot;
            }
        }
    }
    push(m, &m->tidx[MT_NORM], "model.norm.weight", D, 0, -1);
    if (!c->tied)
        push(m, &m->tidx[MT_LM_HEAD], "lm_head.weight", V, D, -1);
    return REEL_OK;
}

/* ---- options ------------------------------------------------------------------ */

reel_status model_opts_resolve(const reel_model *m, const reel_model_opts *in, model_opts *o, reel_err *err)
{
    reel_model_opts u = REEL_MODEL_OPTS_INIT;
    if (in)
        REEL_TRY(reel_struct_load(&u, in, &reel_abi_model_opts, err));
    memset(o, 0, sizeof *o);
    o->num_buckets = reel_opt_int(u.num_buckets, 0);
    if (o->num_buckets < 0 || o->num_buckets > REEL_MAX_BUCKETS)
        return reel_seterr(err, REEL_E_INVALID_ARG, "model options: num_buckets %d is outside 0..%d", o->num_buckets,
                           REEL_MAX_BUCKETS);
    memcpy(o->buckets, u.buckets, sizeof o->buckets);
    o->max_context = reel_opt_int(u.max_context, 4096);
    o->max_seqs = reel_opt_int(u.max_seqs, 64);
    o->block_size = reel_opt_int(u.block_size, 16);
    if (o->max_context < 1 || o->max_seqs < 1 || o->block_size < 1)
        return reel_seterr(err, REEL_E_INVALID_ARG, "model options: max_context %d, max_seqs %d and block_size %d "
                           "must be positive", o->max_context, o->max_seqs, o->block_size);
    int64_t per_seq = ((int64_t)o->max_context + o->block_size - 1) / o->block_size;
    int64_t blocks = u.num_blocks == REEL_UNDEF_INT ? per_seq * o->max_seqs : u.num_blocks;
    if (blocks < 1 || blocks > INT32_MAX)
        return reel_seterr(err, REEL_E_INVALID_ARG, "model options: num_blocks %lld must be in [1, %d]%s",
                           (long long)blocks, INT32_MAX, u.num_blocks == REEL_UNDEF_INT ? " (max_seqs x the blocks "
                           "of max_context)" : "");
    o->num_blocks = (int32_t)blocks;
    o->logits = reel_opt_int(u.logits, 0) != 0;
    o->separate_qkv = reel_opt_int(u.separate_qkv, 0) != 0;
    o->sample = reel_opt_int(u.sample, 0) != 0;
    o->stage = reel_opt_int(u.stage, 0);
    o->num_stages = reel_opt_int(u.num_stages, 1);
    if (o->num_stages < 1 || o->num_stages > m->c.layers || o->stage < 0 || o->stage >= o->num_stages)
        return reel_seterr(err, REEL_E_INVALID_ARG, "model options: stage %d of num_stages %d: want 0 <= stage < "
                           "num_stages <= the model's %d layers", o->stage, o->num_stages, m->c.layers);
    if (o->max_context > m->c.context_limit)
        return reel_seterr(err, REEL_E_UNSUPPORTED, "model: max_context %d is past %d, where \"%s\" of config.json "
                           "puts the limit: %s", o->max_context, m->c.context_limit, m->c.limit_key, m->c.limit_why);
    o->dcp_size = reel_opt_int(u.dcp_size, 1);
    o->dcp_rank = reel_opt_int(u.dcp_rank, 0);
    o->dcp_interleave = reel_opt_int(u.dcp_interleave, 1);
    int n = o->dcp_size, il = o->dcp_interleave;
    if (n != 1 && n != 2 && n != 4 && n != 8)
        return reel_seterr(err, REEL_E_UNSUPPORTED, "model options: dcp_size %d is not 1, 2, 4 or 8", n);
    if (o->dcp_rank < 0 || o->dcp_rank >= n)
        return reel_seterr(err, REEL_E_INVALID_ARG, "model options: dcp_rank %d of dcp_size %d", o->dcp_rank, n);
    if (n > 1 && (m->c.heads % n != 0 || o->num_stages > 1 || il < 1 || (il & (il - 1)) || o->block_size % il))
        return reel_seterr(err, REEL_E_UNSUPPORTED,
                           "model options: DCP over %d ranks needs num_attention_heads (%d) a multiple of it, one stage "
                           "(num_stages %d) and dcp_interleave (%d) a power of two dividing block_size (%d)",
                           n, m->c.heads, o->num_stages, il, o->block_size);
    o->cp_size = reel_opt_int(u.cp_size, 1);
    if (o->cp_size != 1 && o->cp_size != 2 && o->cp_size != 4 && o->cp_size != 8)
        return reel_seterr(err, REEL_E_UNSUPPORTED, "model options: cp_size %d is not 1, 2, 4 or 8", o->cp_size);
    if (o->cp_size > 1 && m->c.mla)
        return reel_seterr(err, REEL_E_UNSUPPORTED, "model options: CP (cp_size %d) over multi-head latent attention "
                           "is not built; DeepSeek V3 models build with cp_size 1", o->cp_size);
    if (o->cp_size > 1 && (n > 1 || o->num_stages > 1))
        return reel_seterr(err, REEL_E_UNSUPPORTED, "model options: CP over %d ranks with DCP (dcp_size %d) or "
                           "pipeline stages (num_stages %d) is outside the validated subset", o->cp_size, n,
                           o->num_stages);
    return REEL_OK;
}

void model_stage_range(const reel_model *m, const model_opts *o, int *first, int *last)
{
    int base = m->c.layers / o->num_stages, extra = m->c.layers % o->num_stages;
    *first = o->stage * base + (o->stage < extra ? o->stage : extra);
    *last = *first + base + (o->stage < extra ? 1 : 0);
}

/* ---- parameters ---------------------------------------------------------------- */

/* The parameter kinds of a layer, in graph order. */
enum { P_IN_NORM, P_QKV, P_QKV_B, P_Q, P_K, P_V, P_QB, P_KB, P_VB, P_QN, P_KN, P_QA, P_QA_NORM, P_QBP, P_KVA,
       P_KVA_NORM, P_KVB, P_O, P_OB, P_POST_NORM, P_GATE_UP, P_DOWN, P_ROUTER, P_ROUTER_BIAS, P_EXP_GATE_UP,
       P_EXP_DOWN, P_SH_GATE_UP, P_SH_DOWN, P_LAYER_KINDS };

/* Appends layer l's expert stack: every expert's gate and up (down: false)
 * or every expert's down, stacked along dim 0 as reel_moe_ffn reads them. */
static void add_experts(const reel_model *m, model_param *out, int *n, int l, bool gate_up)
{
    int base = model_tensor_index(m, l, MT_EXPERTS);
    if (base < 0)
        return;
    const model_cfg *c = &m->c;
    model_param *p = &out[(*n)++];
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "model.layers.%d.experts.%s.weight", l, gate_up ? "gate_up_proj" : "down_proj");
    p->dtype = c->dtype;
    p->ndim = 2;
    p->exp_base = base;
    p->nexp = c->experts;
    p->nek = gate_up ? 2 : 1;
    p->ek[0] = gate_up ? 0 : 2;
    p->ek[1] = 1;
    p->nparts = p->nexp * p->nek;
    p->dims[0] = (int64_t)c->experts * (gate_up ? 2 * (int64_t)c->moe_ffn : (int64_t)c->hidden);
    p->dims[1] = gate_up ? c->hidden : c->moe_ffn;
}

/* Appends parameter `name` made of the given tensor kinds of layer l
 * (stacked along dim 0); skipped when the model lacks the first part. */
static void add_param(const reel_model *m, model_param *out, int *n, int l, const char *name, int nparts,
                      const int *kinds)
{
    int idx[3];
    for (int i = 0; i < nparts; i++)
        if ((idx[i] = model_tensor_index(m, l, kinds[i])) < 0)
            return;
    model_param *p = &out[(*n)++];
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", name);
    p->dtype = m->c.dtype;
    const model_tensor *t0 = &m->t[idx[0]];
    p->ndim = t0->ndim;
    p->dims[1] = t0->dims[1];
    for (int i = 0; i < nparts; i++) {
        p->part[i] = idx[i];
        p->dims[0] += m->t[idx[i]].dims[0];
    }
    p->nparts = nparts;
}

/* The name of layer l's parameter of kind k (the one tensor's, or the
 * stacked parameter's). */
static void layer_param(const reel_model *m, const model_opts *o, model_param *out, int *n, int l, int k)
{
    char name[96];
#define ONE(kind)                                                                                                 \
    do {                                                                                                          \
        int t_ = model_tensor_index(m, l, (kind));                                                                \
        if (t_ >= 0)                                                                                              \
            add_param(m, out, n, l, m->t[t_].name, 1, (int[]){(kind)});                                           \
    } while (0)
    switch (k) {
    case P_IN_NORM: ONE(MT_IN_NORM); break;
    case P_QKV:
    case P_QKV_B:
        if (o->separate_qkv || m->c.mla)
            break;
        snprintf(name, sizeof name, "model.layers.%d.self_attn.qkv_proj.%s", l, k == P_QKV ? "weight" : "bias");
        add_param(m, out, n, l, name, 3, k == P_QKV ? (int[]){MT_Q, MT_K, MT_V} : (int[]){MT_QB, MT_KB, MT_VB});
        break;
    case P_Q: if (o->separate_qkv || m->c.mla) ONE(MT_Q); break;
    case P_K: if (o->separate_qkv) ONE(MT_K); break;
    case P_V: if (o->separate_qkv) ONE(MT_V); break;
    case P_QB: if (o->separate_qkv) ONE(MT_QB); break;
    case P_KB: if (o->separate_qkv) ONE(MT_KB); break;
    case P_VB: if (o->separate_qkv) ONE(MT_VB); break;
    case P_QN: ONE(MT_QN); break;
    case P_KN: ONE(MT_KN); break;
    case P_O: ONE(MT_O); break;
    case P_OB: ONE(MT_OB); break;
    case P_POST_NORM: ONE(MT_POST_NORM); break;
    case P_GATE_UP:
        snprintf(name, sizeof name, "model.layers.%d.mlp.gate_up_proj.weight", l);
        add_param(m, out, n, l, name, 2, (int[]){MT_GATE, MT_UP});
        break;
    case P_DOWN: ONE(MT_DOWN); break;
    case P_ROUTER: ONE(MT_ROUTER); break;
    case P_QA: ONE(MT_QA); break;
    case P_QA_NORM: ONE(MT_QA_NORM); break;
    case P_QBP: ONE(MT_QBP); break;
    case P_KVA: ONE(MT_KVA); break;
    case P_KVA_NORM: ONE(MT_KVA_NORM); break;
    case P_KVB: ONE(MT_KVB); break;
    case P_ROUTER_BIAS:
        ONE(MT_ROUTER_BIAS);
        if (*n > 0 && model_tensor_index(m, l, MT_ROUTER_BIAS) >= 0)
            out[*n - 1].dtype = REEL_F32; /* reel_moe_route reads it as float32 */
        break;
    case P_SH_GATE_UP:
        snprintf(name, sizeof name, "model.layers.%d.mlp.shared_experts.gate_up_proj.weight", l);
        add_param(m, out, n, l, name, 2, (int[]){MT_SH_GATE, MT_SH_UP});
        break;
    case P_SH_DOWN: ONE(MT_SH_DOWN); break;
    case P_EXP_GATE_UP: add_experts(m, out, n, l, true); break;
    case P_EXP_DOWN: add_experts(m, out, n, l, false); break;
    default: break;
    }
#undef ONE
}

#define ROPE_PARAM "rope.inv_freq"

reel_status model_params(const reel_model *m, const model_opts *o, model_param **out, int *n, reel_err *err)
{
    int first, last;
    model_stage_range(m, o, &first, &last);
    bool head = o->stage == o->num_stages - 1;
    model_param *p = reel_hcalloc(4 + (size_t)(last - first) * P_LAYER_KINDS, sizeof *p);
    if (!p)
        return reel_seterr(err, REEL_E_OOM, "model: out of host memory for the parameter list");
    int k = 0;
    if (o->stage == 0 || (head && m->c.tied))
        add_param(m, p, &k, -1, "model.embed_tokens.weight", 1, (int[]){MT_EMBED});
    if (model_rope_uses_table(&m->c) && last > first) {
        model_param *r = &p[k++];
        snprintf(r->name, sizeof r->name, ROPE_PARAM);
        r->dtype = REEL_F32;
        r->ndim = 1;
        r->dims[0] = m->c.head_dim / 2;
    }
    for (int l = first; l < last; l++)
        for (int kind = 0; kind < P_LAYER_KINDS; kind++)
            layer_param(m, o, p, &k, l, kind);
    if (head) {
        add_param(m, p, &k, -1, "model.norm.weight", 1, (int[]){MT_NORM});
        if (!m->c.tied)
            add_param(m, p, &k, -1, "lm_head.weight", 1, (int[]){MT_LM_HEAD});
    }
    *out = p;
    *n = k;
    return REEL_OK;
}

/* ---- the graph ------------------------------------------------------------------- */

typedef struct gb {
    const reel_model *m;
    const model_opts *o;
    reel_graph *g;
    const model_param *p;
    int np;
    reel_tensor *t;          /* [np] the graph's parameter tensors */
} gb;

/* The parameter called name, declared deferred on first use. An invalid
 * handle (the graph records why) when the model has none. */
static reel_tensor param(gb *b, const char *name)
{
    for (int i = 0; i < b->np; i++) {
        if (strcmp(b->p[i].name, name) != 0)
            continue;
        if (!b->t[i].id) {
            b->t[i] = reel_param(b->g, name, b->p[i].dtype, b->p[i].ndim, b->p[i].dims);
            if (b->t[i].id)
                reel_param_defer(b->g, b->t[i]);
        }
        return b->t[i];
    }
    reel_graph_fail(b->g, REEL_E_INTERNAL, "model: no parameter '%s' in the stage's list", name);
    return (reel_tensor){0};
}

static reel_tensor lparam(gb *b, int l, const char *suffix)
{
    char n[96];
    snprintf(n, sizeof n, "model.layers.%d.%s", l, suffix);
    return param(b, n);
}

/* x times a projection [out, in] (transformers' layout), plus its bias. */
static reel_tensor proj(gb *b, reel_tensor x, int l, const char *what, bool bias)
{
    char n[48];
    snprintf(n, sizeof n, "%s.weight", what);
    reel_tensor y = reel_matmul(b->g, x, lparam(b, l, n), true);
    if (bias) {
        snprintf(n, sizeof n, "%s.bias", what);
        y = reel_add(b->g, y, lparam(b, l, n));
    }
    return y;
}

static reel_tensor rope(gb *b, reel_tensor x, reel_tensor pos, reel_tensor table)
{
    const model_cfg *c = &b->m->c;
    if (table.id)
        return reel_rope_freq(b->g, x, pos, table, c->head_dim, (float)b->m->attn_factor);
    return reel_rope(b->g, x, pos, c->head_dim, c->head_dim, (float)c->theta);
}

/* DeepSeek's softmax scale: 1/sqrt(nope + rope), times yarn's mscale^2 of
 * mscale_all_dim (transformers' DeepseekV3Attention). */
static float mla_scale(const model_cfg *c)
{
    double s = 1.0 / sqrt((double)c->qk_nope + (double)c->qk_rope);
    if (c->rope != REEL_ROPE_DEFAULT && c->mscale_all_dim != 0 && c->factor > 1.0) {
        double ms = 0.1 * c->mscale_all_dim * log(c->factor) + 1.0;
        s *= ms * ms;
    }
    return (float)s;
}

/* Multi-head latent attention, absorbed (include/reel/reel.h): q through
 * its low-rank pair (or one projection), its rope dims rotated; the latent
 * normed and its rope key rotated, both cached as one row; W_UK folded into
 * q and W_UV applied to the attended latents, both from kv_b_proj; then
 * o_proj. */
static reel_tensor mla_attn(gb *b, int l, reel_tensor x, reel_tensor pos, reel_tensor table)
{
    const model_cfg *c = &b->m->c;
    reel_graph *g = b->g;
    const int H = c->heads, nope = c->qk_nope, R = c->qk_rope, L = c->kv_lora, Dq = nope + R;
    const float eps = (float)c->eps, af = (float)b->m->attn_factor;
    reel_tensor q;
    if (c->q_lora) {
        reel_tensor qa = reel_matmul(g, x, lparam(b, l, "self_attn.q_a_proj.weight"), true);
        qa = reel_rmsnorm(g, qa, lparam(b, l, "self_attn.q_a_layernorm.weight"), eps);
        q = reel_matmul(g, qa, lparam(b, l, "self_attn.q_b_proj.weight"), true);
    } else {
        q = reel_matmul(g, x, lparam(b, l, "self_attn.q_proj.weight"), true);
    }
    q = reel_rope_freq_part(g, q, pos, table, Dq, nope, c->rope_interleave, af);
    reel_tensor kva = reel_matmul(g, x, lparam(b, l, "self_attn.kv_a_proj_with_mqa.weight"), true);
    reel_tensor lat = reel_rmsnorm(g, reel_view_cols(g, kva, 0, L), lparam(b, l, "self_attn.kv_a_layernorm.weight"),
                                   eps);
    reel_tensor kpe = reel_rope_freq_part(g, reel_view_cols(g, kva, L, R), pos, table, R, 0, c->rope_interleave, af);
    reel_tensor kvb = lparam(b, l, "self_attn.kv_b_proj.weight");
    reel_tensor qlat = reel_head_matmul(g, q, 0, kvb, 0, nope, true, H);
    char n[48];
    snprintf(n, sizeof n, "l%d.kv_cache", l);
    int64_t cache_dims[3] = {b->o->num_blocks, b->o->block_size, (int64_t)L + R};
    reel_tensor cache = reel_state(g, n, c->dtype, 3, cache_dims);
    reel_mla_params mp = REEL_MLA_PARAMS_INIT;
    mp.num_heads = H;
    mp.latent_dim = L;
    mp.rope_dim = R;
    mp.block_size = b->o->block_size;
    mp.scale = mla_scale(c);
    reel_tensor olat;
    if (b->o->dcp_size > 1) {
        /* DCP: this rank's heads attend over every rank's shard of the
         * latent cache; the heads' latents gathered for W_UV */
        const int N = b->o->dcp_size, r = b->o->dcp_rank, hr = H / N;
        reel_dcp_layout d = {REEL_DCP_LAYOUT_HEAD, .nranks = N, .rank = r, .interleave = b->o->dcp_interleave,
                             .exchange = REEL_DCP_ALL_TO_ALL};
        reel_tensor ql = reel_view_cols(g, qlat, (int64_t)r * hr * L, (int64_t)hr * L);
        reel_tensor qr = reel_view_cols(g, q, (int64_t)r * hr * Dq, (int64_t)hr * Dq), part = {0}, lse = {0};
        reel_dcp_mla_attention(g, ql, qr, lat, kpe, cache, &mp, &d, &part, &lse);
        olat = reel_all_gather(g, part, 1, N);
    } else {
        olat = reel_mla_attention(g, qlat, q, lat, kpe, cache, &mp);
    }
    reel_tensor o = reel_head_matmul(g, olat, 0, kvb, nope, c->v_dim, false, H);
    return reel_matmul(g, o, lparam(b, l, "self_attn.o_proj.weight"), true);
}

/* DeepSeek V3's MoE block: the sigmoid router with its choice bias and
 * groups over logits in the model's dtype, the routed experts, plus the
 * shared experts' MLP (transformers' DeepseekV3MoE: routed + shared). */
static reel_tensor deepseek_moe(gb *b, int l, reel_tensor x)
{
    const model_cfg *c = &b->m->c;
    reel_graph *g = b->g;
    reel_tensor logits = reel_matmul(g, x, lparam(b, l, "mlp.gate.weight"), true);
    reel_moe_params mp = REEL_MOE_PARAMS_INIT;
    mp.num_experts = c->experts;
    mp.top_k = c->topk;
    mp.scoring = REEL_MOE_SIGMOID;
    mp.renormalize = c->norm_topk;
    mp.n_group = c->n_group;
    mp.topk_group = c->topk_group;
    mp.routed_scaling = (float)c->routed_scaling;
    reel_tensor ids = {0}, w = {0};
    reel_moe_route(g, logits, lparam(b, l, "mlp.gate.e_score_correction_bias"), &mp, &ids, &w);
    reel_tensor y = reel_moe_ffn(g, x, ids, w, lparam(b, l, "experts.gate_up_proj.weight"),
                                 lparam(b, l, "experts.down_proj.weight"), c->experts);
    if (c->shared_ffn > 0) {
        reel_tensor f = reel_silu_and_mul(g, reel_matmul(g, x, lparam(b, l, "mlp.shared_experts.gate_up_proj.weight"),
                                                         true));
        y = reel_add(g, y, reel_matmul(g, f, lparam(b, l, "mlp.shared_experts.down_proj.weight"), true));
    }
    return y;
}

static reel_tensor layer(gb *b, int l, reel_tensor h, reel_tensor pos, reel_tensor table)
{
    const model_cfg *c = &b->m->c;
    reel_graph *g = b->g;
    const int64_t Dh = c->head_dim, Q = (int64_t)c->heads * Dh, KV = (int64_t)c->kv_heads * Dh;
    const float eps = (float)c->eps;
    reel_tensor x = reel_rmsnorm(g, h, lparam(b, l, "input_layernorm.weight"), eps);
    char n[48];
    if (c->mla) {
        h = reel_add(g, h, mla_attn(b, l, x, pos, table));
        x = reel_rmsnorm(g, h, lparam(b, l, "post_attention_layernorm.weight"), eps);
        if (model_layer_moe(c, l)) {
            h = reel_add(g, h, deepseek_moe(b, l, x));
        } else {
            reel_tensor f = reel_silu_and_mul(g, reel_matmul(g, x, lparam(b, l, "mlp.gate_up_proj.weight"), true));
            h = reel_add(g, h, reel_matmul(g, f, lparam(b, l, "mlp.down_proj.weight"), true));
        }
        snprintf(n, sizeof n, "l%d.out", l);
        reel_set_name(g, h, n);
        return h;
    }
    reel_tensor q, k, v;
    if (b->o->separate_qkv) {
        q = proj(b, x, l, "self_attn.q_proj", c->qkv_bias);
        k = proj(b, x, l, "self_attn.k_proj", c->qkv_bias);
        v = proj(b, x, l, "self_attn.v_proj", c->qkv_bias);
    } else {
        /* q, k and v as one projection (the checkpoint's three weights, and
         * biases, stacked into one parameter) split by views: one kernel on
         * the GPU and no copies (docs/fusion.md) */
        reel_tensor qkv = proj(b, x, l, "self_attn.qkv_proj", c->qkv_bias);
        q = reel_view_cols(g, qkv, 0, Q);
        k = reel_view_cols(g, qkv, Q, KV);
        v = reel_view_cols(g, qkv, Q + KV, KV);
    }
    if (c->qk_norm) { /* Qwen3: RMSNorm of each head of q and k, before rope */
        q = reel_rmsnorm_heads(g, q, lparam(b, l, "self_attn.q_norm.weight"), eps);
        k = reel_rmsnorm_heads(g, k, lparam(b, l, "self_attn.k_norm.weight"), eps);
    }
    q = rope(b, q, pos, table);
    k = rope(b, k, pos, table);
    int64_t cache_dims[4] = {b->o->num_blocks, b->o->block_size, c->kv_heads, Dh};
    snprintf(n, sizeof n, "l%d.k_cache", l);
    reel_tensor kc = reel_state(g, n, c->dtype, 4, cache_dims);
    snprintf(n, sizeof n, "l%d.v_cache", l);
    reel_tensor vc = reel_state(g, n, c->dtype, 4, cache_dims);
    reel_attn_params ap = {REEL_ATTN_PARAMS_HEAD, c->heads, c->kv_heads, (int)Dh, b->o->block_size, 0.0f};
    reel_tensor a;
    if (b->o->dcp_size > 1) {
        /* DCP: this rank's heads attend over every rank's shard of the
         * cache; the heads' results gathered for o_proj */
        const int N = b->o->dcp_size, r = b->o->dcp_rank;
        reel_dcp_layout d = {REEL_DCP_LAYOUT_HEAD, .nranks = N, .rank = r, .interleave = b->o->dcp_interleave,
                             .exchange = REEL_DCP_ALL_TO_ALL};
        reel_tensor mine = reel_view_cols(g, q, (int64_t)r * (Q / N), Q / N), part = {0}, lse = {0};
        reel_dcp_attention(g, mine, k, v, kc, vc, &ap, &d, &part, &lse);
        a = reel_all_gather(g, part, 1, N);
    } else if (b->o->cp_size > 1) {
        /* CP: every rank's keys and values of the step written into each
         * rank's replica, then this rank's tokens attend */
        a = reel_cp_attention(g, q, k, v, kc, vc, &ap, b->o->cp_size);
    } else {
        a = reel_paged_attention(g, q, k, v, kc, vc, &ap);
    }
    h = reel_add(g, h, proj(b, a, l, "self_attn.o_proj", c->o_bias));
    x = reel_rmsnorm(g, h, lparam(b, l, "post_attention_layernorm.weight"), eps);
    if (model_layer_moe(c, l)) {
        /* The router's logits in the model's dtype, softmax in f32 inside
         * the route (transformers' Mixtral and Qwen3-MoE blocks). */
        reel_tensor logits = reel_matmul(g, x, lparam(b, l, router_suffix(c)), true);
        reel_moe_params mp = REEL_MOE_PARAMS_INIT;
        mp.num_experts = c->experts;
        mp.top_k = c->topk;
        mp.scoring = REEL_MOE_SOFTMAX;
        mp.renormalize = c->norm_topk;
        reel_tensor ids = {0}, w = {0};
        reel_moe_route(g, logits, (reel_tensor){0}, &mp, &ids, &w);
        h = reel_add(g, h, reel_moe_ffn(g, x, ids, w, lparam(b, l, "experts.gate_up_proj.weight"),
                                        lparam(b, l, "experts.down_proj.weight"), c->experts));
    } else {
        reel_tensor f = reel_silu_and_mul(g, reel_matmul(g, x, lparam(b, l, "mlp.gate_up_proj.weight"), true));
        h = reel_add(g, h, reel_matmul(g, f, lparam(b, l, "mlp.down_proj.weight"), true));
    }
    snprintf(n, sizeof n, "l%d.out", l);
    reel_set_name(g, h, n);
    return h;
}

/* The stage's graph. The first stage embeds the tokens; the hidden state
 * (the residual stream) goes to the next stage by a send inside the graph
 * and the last stage's tokens come back to the first the same way, so every
 * stage's step is one replay. One stage: the model. */
static reel_status stage_graph(gb *b)
{
    const model_cfg *c = &b->m->c;
    const model_opts *o = b->o;
    reel_graph *g = b->g;
    int first, last;
    model_stage_range(b->m, o, &first, &last);
    const int S = o->num_stages, s = o->stage;
    int64_t tok_dims[1] = {REEL_DIM_TOKENS}, h_dims[2] = {REEL_DIM_TOKENS, c->hidden};
    reel_tensor ids = {0}, h, embed = {0}, table = {0};
    if (s == 0)
        ids = reel_input(g, REEL_MODEL_INPUT_TOKENS, REEL_I32, 1, tok_dims);
    reel_tensor pos = reel_positions(g);
    if (s == 0 || (c->tied && s == S - 1))
        embed = param(b, "model.embed_tokens.weight");
    if (model_rope_uses_table(c) && last > first)
        table = param(b, ROPE_PARAM);
    h = s == 0 ? reel_embedding(g, embed, ids) : reel_recv(g, "hidden_in", c->dtype, 2, h_dims, s - 1);
    for (int l = first; l < last; l++)
        h = layer(b, l, h, pos, table);
    if (s < S - 1) {
        reel_send(g, h, s + 1);
    } else {
        h = reel_rmsnorm(g, h, param(b, "model.norm.weight"), (float)c->eps);
        reel_tensor logits = reel_matmul(g, h, c->tied ? embed : param(b, "lm_head.weight"), true);
        reel_set_name(g, logits, "logits");
        if (o->logits)
            reel_output(g, REEL_MODEL_OUTPUT_LOGITS, logits);
        reel_tensor next;
        if (o->sample) {
            int64_t pd[2] = {REEL_DIM_TOKENS, REEL_SAMPLE_PARAMS}, rd[2] = {REEL_DIM_TOKENS, REEL_SAMPLE_RNG};
            next = reel_sample(g, logits, reel_input(g, REEL_MODEL_INPUT_SAMPLE_PARAMS, REEL_F32, 2, pd),
                               reel_input(g, REEL_MODEL_INPUT_SAMPLE_RNG, REEL_I32, 2, rd));
        } else {
            next = reel_argmax(g, logits);
        }
        if (S == 1)
            reel_output(g, REEL_MODEL_OUTPUT_NEXT, next);
        else
            reel_send(g, next, 0);
    }
    /* built last, so it is issued after the stage's own send */
    if (s == 0 && S > 1)
        reel_output(g, REEL_MODEL_OUTPUT_NEXT, reel_recv(g, "next_in", REEL_I32, 1, tok_dims, S - 1));
    return reel_graph_status(g);
}

reel_status model_graph(const reel_model *m, reel_graph *g, const model_opts *o)
{
    gb b = {.m = m, .o = o, .g = g};
    model_param *p = NULL;
    int np = 0;
    reel_status st = model_params(m, o, &p, &np, NULL);
    if (st != REEL_OK)
        return reel_graph_fail(g, st, "%s", "model: out of host memory for the parameter list");
    b.p = p;
    b.np = np;
    b.t = reel_hcalloc((size_t)np + 1, sizeof *b.t);
    if (!b.t) {
        reel_hfree(p);
        return reel_graph_fail(g, REEL_E_OOM, "model: out of host memory");
    }
    st = stage_graph(&b);
    reel_hfree(b.t);
    reel_hfree(p);
    return st;
}
