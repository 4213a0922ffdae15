/* The models layer's test fixture (tests/models): the families' config.json
 * as the real checkpoints have them (their keys and values; layers, hidden,
 * heads, ffn and vocab shrunk), seeded weights under transformers' names
 * written with reel_safetensors_save, transformers' rope formulas
 * (modeling_rope_utils) in float64, and a float64 forward pass of the
 * decoder written from transformers' modeling code, independent of the
 * library's. */
#ifndef REEL_TESTS_MODELS_FIXTURE_H
#define REEL_TESTS_MODELS_FIXTURE_H

#include <stdbool.h>
#include <stdint.h>

#include "reel/models.h"
#include "reel/safetensors.h"

/* rope_scaling as the test reads it back (the keys it wrote). */
typedef struct tf_rope {
    const char *type;             /* NULL: none */
    double factor, low_freq_factor, high_freq_factor;
    int orig_max_pos;             /* 0: absent */
    double attention_factor;      /* < 0: absent */
    double beta_fast, beta_slow;  /* 0: absent */
    double mscale, mscale_all_dim;/* 0: absent */
    int truncate;                 /* -1: absent */
} tf_rope;

/* transformers' inv_freq [dim / 2] and attention factor for rope rp
 * (ROPE_INIT_FUNCTIONS[rope_type], in float64; dynamic: at seq_len <=
 * max_position_embeddings, where transformers runs it). */
void tf_inv_freq(const tf_rope *rp, int dim, double theta, int max_pos, double *inv, double *attn);

/* One family: its config.json (printf format; %s is torch_dtype) and what
 * reel_model_info must say. */
typedef struct mfam {
    const char *name;
    const char *config;
    reel_model_family family;
    int layers, hidden, heads, kv_heads, head_dim, ffn, vocab;
    bool tied, qkv_bias, o_bias, qk_norm;
    double eps, theta;
    int max_pos;
    reel_rope_type rope_type;
    tf_rope rope;
    /* Mixture of experts (experts 0: dense): the experts of a layer, the
     * choices per token, an expert's intermediate size, renormalized
     * weights, every sparse_step-th layer with experts but mlp_only (-1:
     * none); moe_names: Mixtral's (block_sparse_moe, w1/w3/w2) or Qwen3-MoE's
     * (mlp.gate, mlp.experts.<e>.gate_proj). */
    int experts, topk, moe_ffn;
    bool norm_topk;
    int sparse_step, mlp_only;
    bool mixtral_names;
    const struct mfds *ds;        /* DeepSeek V3's attention and experts; NULL elsewhere */
} mfam;
#define MF_DENSE 0, 0, 0, false, 1, -1, false, NULL
/* DeepSeek V3 (family REEL_MODEL_DEEPSEEK_V3; head_dim is qk_rope): the
 * latent attention's sizes (q_lora 0: q_proj, as q_lora_rank null), the
 * rope's pair order, and the experts' groups, shared experts (n_shared x
 * moe_ffn), routed scaling and the dense layers below first_dense. */
typedef struct mfds {
    int q_lora, kv_lora, qk_nope, qk_rope, v_dim;
    bool rope_interleave;
    int n_group, topk_group, n_shared, first_dense;
    double routed_scaling;
} mfds;
/* Layer l of f has experts. */
bool mf_layer_moe(const mfam *f, int l);

extern const mfam mf_families[];
extern const int mf_nfamilies;

/* Seeded weights of a family in float64 (the values the dtype holds). */
typedef struct mweights {
    int n;
    char (*name)[96];
    reel_dtype *dt;               /* as written */
    int *ndim;
    int64_t (*dims)[2];
    double **v;
} mweights;

/* The config text of f with torch_dtype dt (malloc'd). */
char *mf_config(const mfam *f, reel_dtype dt);
/* Writes dir/config.json and dir/model.safetensors (dir is created) of f
 * in dtype dt, from a seed; fills w with the values written. extra: one
 * more tensor (a name and a vector length) the model does not read, or
 * NULL. drop: a tensor to leave out, or NULL. */
void mf_write(const mfam *f, reel_dtype dt, uint64_t seed, const char *dir, mweights *w, const char *extra,
              const char *drop);
/* mf_write with DeepSeek's router choice biases (mlp.gate.e_score_correction_bias)
 * in bias_dt: mf_write writes them in float32, as the real checkpoints have
 * them whatever the model's dtype. */
void mf_write_bias(const mfam *f, reel_dtype dt, reel_dtype bias_dt, uint64_t seed, const char *dir, mweights *w);
void mf_weights_free(mweights *w);
/* A float64 forward pass of f over tokens[0..n) of one sequence at
 * positions 0..n-1: logits [n][vocab] (DeepSeek V3: transformers'
 * DeepseekV3Model, the latent attention in its non-absorbed form: per-head
 * keys and values up-projected from the latent). inv and attn: the rope
 * to use (DeepSeek: over qk_rope dims); dt:
 * the model's dtype, to which the routers' logits are rounded (as the
 * model's linear layer gives them: the experts chosen are then the model's;
 * any other value keeps them in float64). */
void mf_reference(const mfam *f, const mweights *w, const int32_t *tokens, int n, const double *inv, double attn,
                  reel_dtype dt, double *logits);

/* A fresh directory under /tmp (static buffer) and its removal. */
const char *mf_tmpdir(void);
void mf_rmdir(const char *dir);

#endif
