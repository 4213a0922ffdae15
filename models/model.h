/* Internal (L7 models/): a model as the layer holds it. config.c reads
 * config.json into a model_cfg (the families' keys and refusals), rope.c
 * computes the rope's inverse frequencies from it, llama.c declares the
 * decoder and lists its tensors and parameters, model.c is the public
 * surface (include/reel/models.h). Calls go model.c -> llama.c -> rope.c
 * and model.c -> config.c, rope.c; rope.c and config.c call nothing of the
 * folder. */
#ifndef REEL_MODELS_MODEL_H
#define REEL_MODELS_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "core/err.h"
#include "reel/models.h"
#include "reel/safetensors.h"

/* What config.json says, resolved with the family's defaults. */
typedef struct model_cfg {
    reel_model_family family;
    int layers, hidden, heads, kv_heads, head_dim, ffn, vocab;
    reel_dtype dtype;
    bool dtype_given;           /* torch_dtype (or dtype) was in the config */
    bool tied, qkv_bias, o_bias, qk_norm;
    double eps, theta;
    int32_t max_pos;            /* max_position_embeddings */
    /* rope_scaling (or rope_parameters) */
    reel_rope_type rope;
    double factor;              /* 1 without scaling */
    double low_freq_factor, high_freq_factor;  /* llama3 */
    int32_t orig_max_pos;       /* rope_scaling's original_max_position_embeddings (0: absent) */
    double beta_fast, beta_slow, mscale, mscale_all_dim, attention_factor; /* yarn (attention_factor < 0:
                                                                              computed) */
    bool truncate;              /* yarn */
    /* Mixture of experts (experts 0: dense). A layer has experts unless
     * it is in mlp_only_layers or (l + 1) % sparse_step != 0; the others
     * have the dense MLP of ffn. */
    int experts, topk, moe_ffn, sparse_step;
    bool norm_topk;
    /* DeepSeek V3 (family REEL_MODEL_DEEPSEEK_V3): multi-head latent
     * attention (head_dim is then qk_rope_dim, the rope's), and the MoE's
     * sigmoid router with groups, its scaling, the shared experts' ffn
     * (shared_ffn 0: none) and the dense layers before the first MoE one. */
    bool mla, rope_interleave;
    int q_lora, kv_lora, qk_nope, qk_rope, v_dim;
    int n_group, topk_group, shared_ffn, first_dense;
    double routed_scaling;
    uint64_t mlp_only[64];      /* bit l: layer l is dense (mlp_only_layers; layers <= 4096) */
    /* The largest max_context a plan may have, and the key that says so. */
    int32_t context_limit;      /* INT32_MAX: none */
    char limit_key[64];
    char limit_why[200];
} model_cfg;

/* Reads a config.json object; label names it in messages ("DIR/config.json").
 * REEL_E_INVALID_ARG for a malformed value, REEL_E_UNSUPPORTED for a key or
 * value the layer does not build; the message names the key. */
reel_status model_cfg_read(const void *json_root, const char *label, model_cfg *c, reel_err *err);

/* Layer l has routed experts. */
static inline bool model_layer_moe(const model_cfg *c, int l)
{
    return c->experts > 0 && !(c->mlp_only[l / 64] >> (l % 64) & 1) && (l + 1) % c->sparse_step == 0 &&
           l >= c->first_dense;
}

/* The rope's inverse frequencies [head_dim / 2] (double, transformers'
 * formulas for c->rope) and its attention factor. */
void model_rope_inv_freq(const model_cfg *c, double *inv_freq, double *attention_factor);
/* The graph rotates with a table (reel_rope_freq) rather than reel_rope's theta. */
bool model_rope_uses_table(const model_cfg *c);

/* Checkpoint tensors, in checkpoint order (llama.c). */
typedef struct model_tensor {
    char name[96];
    int ndim;
    int64_t dims[2];
    int layer;                  /* -1: not a layer's */
    bool f32_ok;                /* float32 in the checkpoint too, whatever the model's dtype (a
                                   router's choice bias): its parameter is float32 */
} model_tensor;

struct reel_model {
    reel_ctx *ctx;
    model_cfg c;
    reel_safetensors *ck;       /* NULL: a config alone */
    double *inv_freq;           /* [head_dim / 2] */
    float *inv_freq_f32;        /* what the graph's table holds */
    double attn_factor;
    model_tensor *t;
    int nt;
    int *tidx;                  /* [3 + layers * MT_LAYER_KINDS]: index into t, -1 absent */
};

/* The tensors of a model (llama.c). */
enum { MT_EMBED, MT_NORM, MT_LM_HEAD, MT_GLOBAL_KINDS };
enum {
    MT_IN_NORM, MT_Q, MT_K, MT_V, MT_QB, MT_KB, MT_VB, MT_QN, MT_KN, MT_O, MT_OB, MT_POST_NORM, MT_GATE, MT_UP,
    MT_DOWN, MT_ROUTER, MT_EXPERTS,
    /* DeepSeek V3: q's low-rank pair and its norm, the latent's projection
     * and norm, kv_b_proj, the router's choice bias, the shared experts */
    MT_QA, MT_QA_NORM, MT_QBP, MT_KVA, MT_KVA_NORM, MT_KVB, MT_ROUTER_BIAS, MT_SH_GATE, MT_SH_UP, MT_SH_DOWN,
    MT_LAYER_KINDS
};
/* MT_EXPERTS is the first expert's gate; expert e's gate, up and down are
 * m->t[that + 3e + 0, 1, 2] (pushed together). */
/* Index into m->t of a global (layer -1) or a layer's tensor kind; -1 when the model has none. */
int model_tensor_index(const reel_model *m, int layer, int kind);
/* Fills m->t, m->nt, m->tidx from m->c. */
reel_status model_tensors_make(reel_model *m, reel_err *err);

/* The options, resolved (undefined -> defaults) and checked against the
 * model; err gets the message naming the option or the config key. */
typedef struct model_opts {
    int num_buckets;
    int32_t buckets[REEL_MAX_BUCKETS];
    int32_t max_context, max_seqs, block_size, num_blocks;
    bool logits, separate_qkv, sample;
    int stage, num_stages;
    int dcp_size, dcp_rank, dcp_interleave; /* 1, 0, 1: no DCP */
    int cp_size;                 /* 1: no CP */
} model_opts;
reel_status model_opts_resolve(const reel_model *m, const reel_model_opts *in, model_opts *o, reel_err *err);
/* Layers [first, last) of a stage. */
void model_stage_range(const reel_model *m, const model_opts *o, int *first, int *last);

/* One parameter of a stage's graph: its name, shape, dtype and the
 * checkpoint tensors stacked into it (none: the rope table). */
typedef struct model_param {
    char name[96];
    reel_dtype dtype;
    int ndim;
    int64_t dims[2];
    int nparts;
    int part[3];                /* indices into m->t (nparts <= 3) */
    /* An expert stack (nexp > 0): part i is m->t[exp_base + 3 * (i / nek)
     * + ek[i % nek]], nparts = nexp * nek (gate and up of each expert in
     * turn: ek {0, 1}; down: ek {2}). */
    int exp_base, nexp, nek, ek[2];
} model_param;
/* Index into m->t of part i of p. */
static inline int model_param_part(const model_param *p, int i)
{
    return p->nexp > 0 ? p->exp_base + 3 * (i / p->nek) + p->ek[i % p->nek] : p->part[i];
}
/* The stage's parameters in graph order (allocated with reel_hcalloc; the
 * caller frees *out with reel_hfree). */
reel_status model_params(const reel_model *m, const model_opts *o, model_param **out, int *n, reel_err *err);
/* Builds the stage's graph into g (llama.c). */
reel_status model_graph(const reel_model *m, reel_graph *g, const model_opts *o);

#endif
