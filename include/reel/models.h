/*
 * reel: model definitions from Hugging Face checkpoints (the models layer,
 * models/, docs/models.md).
 *
 *     reel_model *m;
 *     reel_model_open(ctx, "Llama-3.1-8B", &m);         // config.json and safetensors
 *     reel_model_info info = REEL_MODEL_INFO_INIT;
 *     reel_model_info_get(m, &info);                     // layers, heads, ..., family
 *     reel_model_opts o = REEL_MODEL_OPTS_INIT;
 *     o.num_buckets = 3;  o.buckets[0] = 1;  o.buckets[1] = 8;  o.buckets[2] = 64;
 *     o.max_context = 8192;  o.max_seqs = 64;
 *     reel_plan *p;
 *     reel_model_compile(m, &o, NULL, &p);               // graph, plan, weights written
 *     reel_model_close(m);                               // the plan holds its own copy
 *     reel_plan_set_input(p, REEL_MODEL_INPUT_TOKENS, ids, n);
 *     reel_step(p, &step);                               // paged KV cache, as reel.h says
 *     reel_plan_output(p, REEL_MODEL_OUTPUT_NEXT, &next, &rows);
 *
 * What loads: model_type "llama" (Llama 1, 2, 3.x), "mistral", "qwen2"
 * (Qwen2, Qwen2.5) and "qwen3" (Qwen3 dense), each from its own
 * config.json keys with transformers' defaults, and transformers' tensor
 * names; rope_scaling "linear", "dynamic" (up to its original length),
 * "yarn" and "llama3" computed as transformers' modeling_rope_utils
 * computes them; q/k/v (and o) biases, Qwen3's per-head q_norm and k_norm,
 * tied or untied embeddings; bf16, f16 or f32 weights. A key or value the
 * layer does not build (a sliding window that is on below the plan's
 * max_context, an activation other than silu, an unknown rope type or
 * rope_scaling key, MLP biases, a quantization config, ...) is refused with
 * the key named: REEL_E_UNSUPPORTED; a malformed value (a missing size, a
 * string where a number belongs): REEL_E_INVALID_ARG.
 *
 * The graph: tokens [T] i32 -> embedding -> per layer { rmsnorm, one q/k/v
 * projection (the checkpoint's three weights, and biases, stacked into one
 * parameter) split by reel_view_cols, Qwen3's per-head norms, rope, paged
 * attention over the states "l<i>.k_cache" and "l<i>.v_cache"
 * ([num_blocks, block_size, kv_heads, head_dim], the model's dtype), the o
 * projection, residual, rmsnorm, gate and up as one projection,
 * silu_and_mul, down, residual } -> rmsnorm -> lm head -> argmax. Weights
 * keep transformers' [out, in] layout (matmuls with w_transposed). Each
 * layer's output is named "l<i>.out", the lm head's "logits".
 *
 * Errors: open and parse write to ctx; build to the graph's context (the
 * graph's sticky error, as every builder call); bind and compile to the
 * plan's. A model is read-only after open: several threads may build and
 * bind from it at once (pipeline stages); close it after the last bind.
 */
#ifndef REEL_MODELS_H
#define REEL_MODELS_H

#include <stddef.h>
#include <stdint.h>

#include "reel/reel.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct reel_model reel_model;

/* The graph's input and outputs. */
#define REEL_MODEL_INPUT_TOKENS "tokens"
#define REEL_MODEL_OUTPUT_NEXT "next_token"
#define REEL_MODEL_OUTPUT_LOGITS "logits"
/* With reel_model_opts.sample: each token row's sampling parameters and
 * random stream (reel_sample's params and rng). */
#define REEL_MODEL_INPUT_SAMPLE_PARAMS "sample_params"
#define REEL_MODEL_INPUT_SAMPLE_RNG "sample_rng"

typedef enum reel_model_family {
    REEL_MODEL_LLAMA = 0,  /* model_type "llama": Llama 1, 2, 3.x */
    REEL_MODEL_MISTRAL,    /* "mistral" */
    REEL_MODEL_QWEN2,      /* "qwen2": Qwen2, Qwen2.5 (q/k/v biases) */
    REEL_MODEL_QWEN3,      /* "qwen3": Qwen3 dense (q_norm, k_norm) */
    REEL_MODEL_QWEN3_MOE,  /* "qwen3_moe": Qwen3 attention, softmax-routed experts */
    REEL_MODEL_MIXTRAL,    /* "mixtral": Mistral attention, 8 experts, top-2 renormalized */
    REEL_MODEL_DEEPSEEK_V3, /* "deepseek_v3" (and Kimi K2's "kimi_k2"): multi-head latent attention,
                              sigmoid-routed grouped experts with shared experts */
    REEL_MODEL_FAMILY_COUNT
} reel_model_family;
/* The family's model_type ("llama", ...); NULL out of range. */
const char *reel_model_family_name(reel_model_family f);

/* rope_scaling's rope_type (rope_parameters' in newer configs). */
typedef enum reel_rope_type {
    REEL_ROPE_DEFAULT = 0, /* none, null or "default": theta^(-2i/d) */
    REEL_ROPE_LINEAR,      /* "linear": the default's inv_freq / factor */
    REEL_ROPE_DYNAMIC,     /* "dynamic": NTK by the sequence's length; the default's frequencies up to
                              the original length, so plans are refused past it */
    REEL_ROPE_YARN,        /* "yarn": ramp between interpolation and extrapolation, and an
                              attention factor on cos and sin */
    REEL_ROPE_LLAMA3,      /* "llama3": Llama 3.1's smoothed low/high frequency bands */
    REEL_ROPE_TYPE_COUNT
} reel_rope_type;
/* "default", "linear", ... (rope_type's values); NULL out of range. */
const char *reel_rope_type_name(reel_rope_type t);

/* A model's shape, as its config.json gives it. A result struct: fill with
 * REEL_MODEL_INFO_INIT, the library writes up to its size. */
#define REEL_MODEL_INFO_MAGIC REEL_MAGIC('r', 'm', 'd', 'i')
typedef struct reel_model_info {
    size_t size;               /* sizeof(reel_model_info) of the caller's header */
    int version;               /* REEL_VERSION_NUMBER of the caller's header */
    uint32_t magic;            /* REEL_MODEL_INFO_MAGIC */
    int family;                /* a reel_model_family */
    int layers, hidden, heads, kv_heads, head_dim, ffn, vocab;
    int tied;                  /* the lm head is embed_tokens (tie_word_embeddings) */
    reel_dtype dtype;          /* of every weight and of the KV cache */
    int qkv_bias, o_bias;      /* q/k/v projections and the o projection have biases */
    int qk_norm;               /* per-head RMSNorm of q and k before rope (Qwen3) */
    double rms_norm_eps, rope_theta;
    int rope_type;             /* a reel_rope_type */
    double rope_factor;        /* rope_scaling's factor (1 without scaling) */
    double rope_attention_factor; /* cos and sin are multiplied by it (yarn; 1 elsewhere) */
    int32_t max_position_embeddings;
    int32_t max_context;       /* the largest max_context a plan may have (a sliding window's
                                  size, dynamic rope's original length); INT32_MAX: no limit */
    uint64_t param_bytes;      /* every weight the model reads */
    uint64_t kv_bytes_per_token; /* K and V of one token in all layers */
    int has_weights;           /* opened from a checkpoint (reel_model_open), not a config alone */
    /* Appended in 0.2 (mixture of experts; 0 for a dense model): */
    int experts;               /* routed experts per MoE layer */
    int experts_per_token;     /* num_experts_per_tok */
    int expert_ffn;            /* an expert's intermediate size */
    int moe_layers;            /* layers with experts (the others have the dense MLP of ffn) */
    uint64_t active_param_bytes; /* the weights one token reads: param_bytes less the experts it
                                    does not use */
    /* Appended in 0.2 (multi-head latent attention, DeepSeek V3; 0 elsewhere): */
    int kv_lora_rank;          /* the latent's width L (the cache holds L + qk_rope_head_dim a token) */
    int q_lora_rank;           /* q's low-rank width (0: a full q projection) */
    int qk_nope_head_dim, qk_rope_head_dim, v_head_dim;
    int shared_expert_ffn;     /* the shared experts' intermediate size (0: none) */
} reel_model_info;
#define REEL_MODEL_INFO_HEAD REEL_STRUCT_HEAD(reel_model_info, REEL_MODEL_INFO_MAGIC)
#define REEL_MODEL_INFO_INIT REEL_STRUCT_INIT(reel_model_info, REEL_MODEL_INFO_MAGIC)

/* What to build: the plan's buckets and limits, the KV cache, the outputs,
 * the pipeline stage. Options follow reel.h's rule: REEL_MODEL_OPTS_INIT
 * leaves each undefined, the library's default. */
#define REEL_MODEL_OPTS_MAGIC REEL_MAGIC('r', 'm', 'd', 'o')
typedef struct reel_model_opts {
    size_t size;               /* sizeof(reel_model_opts) of the caller's header */
    int version;               /* REEL_VERSION_NUMBER of the caller's header */
    uint32_t magic;            /* REEL_MODEL_OPTS_MAGIC */
    int num_buckets;                      /* undefined or 0: reel_compile's default */
    int32_t buckets[REEL_MAX_BUCKETS];    /* ascending token counts to capture */
    int32_t max_context;                  /* per-sequence context limit; undefined: 4096. Past the
                                             model's own limit (reel_model_info.max_context):
                                             REEL_E_UNSUPPORTED naming the key */
    int32_t max_seqs;                     /* sequences per step; undefined: 64 */
    int32_t block_size;                   /* tokens per KV cache block; undefined: 16 */
    int32_t num_blocks;                   /* blocks of each layer's K and V cache; undefined:
                                             max_seqs * ceil(max_context / block_size) */
    int logits;                           /* nonzero: also output REEL_MODEL_OUTPUT_LOGITS
                                             [T, vocab]; undefined: no */
    int stage, num_stages;                /* pipeline stage `stage` of `num_stages` (undefined: 0
                                             of 1): layers split evenly, earlier stages one more;
                                             the hidden state goes to the next stage and the next
                                             tokens back to stage 0 by reel_send/reel_recv inside
                                             the graphs (compile stage s with rank s's
                                             communicator) */
    int separate_qkv;                     /* nonzero: q, k and v as three matmuls, their
                                             checkpoint tensors as parameters (for comparing);
                                             undefined: one stacked projection */
    int sample;                           /* nonzero: the next token is reel_sample's over the
                                             logits, each row's parameters and random stream
                                             from the inputs REEL_MODEL_INPUT_SAMPLE_PARAMS
                                             [T, REEL_SAMPLE_PARAMS] f32 and
                                             REEL_MODEL_INPUT_SAMPLE_RNG [T, REEL_SAMPLE_RNG]
                                             int32 (of the last stage's plan); undefined: argmax */
    /* Appended in 0.2 (issue 46). */
    int dcp_size, dcp_rank;               /* decode context parallel: the KV cache sharded by tokens
                                             over dcp_size ranks (reel_dcp_attention, parallel.h),
                                             this plan rank dcp_rank; every rank the whole model,
                                             its attention the heads' gathered result. Compile with
                                             the group's communicator (base->comm). In {1, 2, 4, 8},
                                             dividing num_attention_heads, one stage; undefined: 1 */
    int dcp_interleave;                   /* global position t on rank (t / I) % N; a power of two
                                             dividing block_size; undefined: 1 */
    int cp_size;                          /* context parallel: each step's tokens split over cp_size
                                             ranks, every rank the whole model and a replica of the
                                             cache (reel_cp_attention); compile with the group's
                                             communicator. In {1, 2, 4, 8}, one stage, not with DCP;
                                             undefined: 1 */
} reel_model_opts;
#define REEL_MODEL_OPTS_INIT                                                                               \
    { sizeof(reel_model_opts), REEL_VERSION_NUMBER, REEL_MODEL_OPTS_MAGIC, REEL_UNDEF_INT, {0},             \
      REEL_UNDEF_INT, REEL_UNDEF_INT, REEL_UNDEF_INT, REEL_UNDEF_INT, REEL_UNDEF_INT, REEL_UNDEF_INT,          \
      REEL_UNDEF_INT, REEL_UNDEF_INT, REEL_UNDEF_INT, REEL_UNDEF_INT, REEL_UNDEF_INT, REEL_UNDEF_INT,          \
      REEL_UNDEF_INT }
#define REEL_MODEL_OPTS_HEAD REEL_STRUCT_HEAD(reel_model_opts, REEL_MODEL_OPTS_MAGIC)

/* One checkpoint tensor the model reads (a result struct, as
 * reel_model_info). */
#define REEL_MODEL_TENSOR_MAGIC REEL_MAGIC('r', 'm', 'd', 't')
typedef struct reel_model_tensor {
    size_t size;               /* sizeof(reel_model_tensor) of the caller's header */
    int version;               /* REEL_VERSION_NUMBER of the caller's header */
    uint32_t magic;            /* REEL_MODEL_TENSOR_MAGIC */
    const char *name;          /* transformers' name ("model.layers.0.self_attn.q_proj.weight");
                                  owned by the model */
    reel_dtype dtype;          /* the model's */
    int ndim;                  /* 1 or 2 */
    int64_t dims[2];           /* [out, in] for a projection */
    int layer;                 /* its layer; -1: the embedding, the final norm, the lm head */
} reel_model_tensor;
#define REEL_MODEL_TENSOR_HEAD REEL_STRUCT_HEAD(reel_model_tensor, REEL_MODEL_TENSOR_MAGIC)
#define REEL_MODEL_TENSOR_INIT REEL_STRUCT_INIT(reel_model_tensor, REEL_MODEL_TENSOR_MAGIC)

/* Opens the Hugging Face checkpoint directory dir: dir/config.json (jansson)
 * and the safetensors there (reel_safetensors_open: model.safetensors or a
 * sharded index). Checks everything before returning: the config's keys
 * (the refusals above, naming the key), then every tensor the model reads
 * (present, the config's dtype, its shape) and no tensor it would leave
 * unread (a bias or norm its config does not call for, a layer past
 * num_hidden_layers; lm_head.weight beside tied embeddings and rotary
 * inv_freq buffers are allowed). Without torch_dtype (or dtype) the model
 * takes the embedding's dtype. On failure *out is NULL and ctx's message
 * names the file, key or tensor. */
reel_status reel_model_open(reel_ctx *ctx, const char *dir, reel_model **out);
/* A model from config.json's text alone (len bytes; 0: a NUL-terminated
 * string), without weights: it builds graphs and says its shape; its
 * weights come from reel_model_bind_source. Without torch_dtype: f32. */
reel_status reel_model_parse(reel_ctx *ctx, const char *json, size_t len, reel_model **out);
/* Unmaps the checkpoint. NULL is accepted. */
void reel_model_close(reel_model *m);

/* Fills out (REEL_MODEL_INFO_INIT) up to its size. */
reel_status reel_model_info_get(const reel_model *m, reel_model_info *out);
/* The rope's inverse frequencies (n = head_dim / 2 of them, computed in
 * double by transformers' formulas for the model's rope type) and the
 * attention factor; the graph rotates with their float32 values (or, for
 * default and dynamic rope, reel_rope's own theta^(-2i/d)). inv_freq may be
 * NULL (n 0) for the factor alone. REEL_E_INVALID_ARG when n is not
 * head_dim / 2. */
reel_status reel_model_rope(const reel_model *m, double *inv_freq, int n, double *attention_factor);
/* The checkpoint tensors the model reads, in the order a checkpoint lists
 * them: the embedding, each layer's, the final norm, the lm head (untied). */
int reel_model_tensor_count(const reel_model *m);
/* The i-th; REEL_E_NOT_FOUND out of range. */
reel_status reel_model_tensor_get(const reel_model *m, int i, reel_model_tensor *out);

/* Adds the model to g (a new graph of any context: a pipeline stage's has
 * its own) for opts (NULL: defaults): the graph of the header's comment,
 * with its parameters deferred (reel_model_bind writes them). Refuses, on
 * the graph, a max_context past the model's limit and options out of range
 * (naming them). Returns the graph's status. */
reel_status reel_model_build(const reel_model *m, reel_graph *g, const reel_model_opts *opts);
/* Writes the weights of the stage opts names into p, a plan compiled from
 * reel_model_build's graph with the same opts, straight from the mapped
 * checkpoint (q, k and v, and gate and up, part by part into their stacked
 * parameters). REEL_E_INVALID_USAGE for a model without weights. */
reel_status reel_model_bind(const reel_model *m, reel_plan *p, const reel_model_opts *opts);
/* Weights from the caller instead: fn fills dst (bytes of it) with tensor t
 * (transformers' name and layout, the model's dtype), for every tensor of
 * the stage, in tensor order. A status other than REEL_OK from fn stops
 * the bind and is returned (the message names the tensor). */
typedef reel_status (*reel_model_source_fn)(void *user, const reel_model_tensor *t, void *dst, size_t bytes);
reel_status reel_model_bind_source(const reel_model *m, reel_plan *p, const reel_model_opts *opts,
                                   reel_model_source_fn fn, void *user);
/* reel_model_build on a graph of the model's context, reel_compile with
 * base's options (NULL: defaults) but opts' buckets, max_context and
 * max_seqs, then reel_model_bind when the model has weights (a config-only
 * model's plan waits for reel_model_bind_source). The graph is destroyed
 * before returning. On failure *out is NULL. */
reel_status reel_model_compile(const reel_model *m, const reel_model_opts *opts, const reel_compile_opts *base,
                               reel_plan **out);
/* The KV cache that fits: the blocks of opts' block size (num_blocks
 * ignored) a plan of the model can have within `fraction` (0, 1] of the
 * backend's memory, as vLLM's gpu_memory_utilization: min(fraction x total,
 * what is available now; reel_ctx_memory), less the plan without its cache
 * (parameters, the arena, the step region, the streams' workspaces, and on
 * the host backend the pinned staging: reel_compile_estimate, nothing
 * allocated), over the bytes of one block in every layer (K and V). Sets
 * *blocks and *tokens (blocks x block size; either may be NULL). REEL_E_OOM,
 * naming the figures, when not even one block fits; REEL_E_INVALID_ARG for a
 * fraction outside (0, 1]. Graph memory (unknown before capture) is not
 * counted: leave it room in the fraction. */
reel_status reel_model_kv_blocks(const reel_model *m, const reel_model_opts *opts, const reel_compile_opts *base,
                                 double fraction, int32_t *blocks, int64_t *tokens);

#ifdef __cplusplus
}
#endif

#endif /* REEL_MODELS_H */
