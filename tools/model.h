/* The demo's model: a Llama-family decoder built by the library's models
 * layer (include/reel/models.h, the one Llama definition of the tree), with
 * either a Hugging Face checkpoint's weights (model_open_dir) or
 * deterministic pseudo-random ones from a seed (the seeded toy: its shape
 * from the options, written as a Llama config.json and parsed by the
 * library; its weights generated one tensor at a time into the plan through
 * reel_model_bind_source, so the tool never holds a second copy of the
 * whole model).
 *
 * Graph (per step, T tokens; models.h): tokens [T] -> embedding -> L x {
 * rmsnorm, one q/k/v matmul split by views, rope (q, k), paged attention
 * over states "l<i>.k_cache"/"l<i>.v_cache", o matmul, residual add,
 * rmsnorm, gate_up matmul, silu_and_mul, down matmul, residual add } ->
 * rmsnorm -> lm head matmul -> argmax -> "next_token" [T]
 */
#ifndef REEL_TOOLS_MODEL_H
#define REEL_TOOLS_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "reel/models.h"
#include "reel/reel.h"

typedef struct model_config {
    int layers;
    int hidden;
    int heads;      /* query heads; head_dim = hidden / heads */
    int kv_heads;   /* 0: same as heads */
    int ffn;        /* 0: 2 * hidden (the gate_up matmul is [hidden, 2 * ffn]) */
    int vocab;
    reel_dtype dtype;
    int block_size; /* tokens per KV cache block */
    int num_blocks; /* blocks in each layer's K and V cache */
    float rope_theta;
    float eps;
    uint64_t seed;
    /* A Hugging Face checkpoint's model (model_open_dir fills these from
     * the library's reel_model_info). */
    bool hf;
    int head_dim;        /* 0: hidden / heads */
    bool qkv_bias;       /* q/k/v projections have biases (Qwen2, attention_bias) */
    bool o_bias;         /* the output projection has one (attention_bias) */
    bool tied;           /* lm_head is embed_tokens (tie_word_embeddings) */
    bool logits_output;  /* also output "logits" [T, vocab] (MODEL_OUTPUT_LOGITS) */
    /* Appended for the models layer (issue 43). */
    int family;          /* a reel_model_family (the toy: llama) */
    bool qk_norm;        /* per-head q and k norms (Qwen3) */
    int rope_type;       /* a reel_rope_type */
    int max_context;     /* the plan's, checked against a checkpoint's limits (sliding
                            windows, dynamic rope); 0: not checked */
    bool sample;         /* the next token by reel_sample (inputs MODEL_INPUT_SAMPLE_*), not argmax */
    int dcp_size, dcp_rank; /* decode context parallel over dcp_size ranks (0, 1: none) */
    int cp_size;            /* context parallel over cp_size ranks (0, 1: none) */
} model_config;

#define MODEL_CONFIG_INIT                                                                                  \
    { .layers = 4, .hidden = 256, .heads = 4, .vocab = 1024, .dtype = REEL_BF16, .block_size = 16, .num_blocks = 256, \
      .rope_theta = 10000.0f, .eps = 1e-5f, .seed = 1 }

/* Input and output names of the graph. */
#define MODEL_INPUT_TOKENS REEL_MODEL_INPUT_TOKENS
#define MODEL_OUTPUT_NEXT REEL_MODEL_OUTPUT_NEXT
#define MODEL_OUTPUT_LOGITS REEL_MODEL_OUTPUT_LOGITS

/* Fills the 0 defaults (kv_heads, ffn) and checks that the shapes agree;
 * on failure writes a message naming the option into err. */
int model_config_resolve(model_config *c, char *err, size_t err_len);
int model_head_dim(const model_config *c);
/* Multiply-adds times two (flop) of one token through the model's matmuls:
 * the q/k/v, o, gate_up and down projections of each layer, and the lm head.
 * Attention over the context comes on top. For a resolved config. */
double model_flop_per_token(const model_config *c);

/* The library's model of c: the seeded toy's config (c->hf false; its
 * weights come from model_write_stage_with). ctx takes the messages (NULL:
 * the thread's). The caller closes it (reel_model_close). */
reel_status model_open(reel_ctx *ctx, const model_config *c, reel_model **out);
/* A Hugging Face checkpoint directory: its model, and c's model fields
 * (shape, dtype, biases, tied, family, rope) from it, c->hf set; the
 * KV-cache fields are left alone. */
reel_status model_open_dir(reel_ctx *ctx, const char *dir, model_config *c, reel_model **out);
/* The seeded toy's config.json (a Llama), as model_open parses it and
 * --save-model writes it; malloc'd, the caller frees it. NULL: out of memory. */
char *model_toy_config_json(const model_config *c);

/* Pipeline parallelism: stage `stage` of `nstages` (layers split as evenly
 * as possible, earlier stages one more; reel_model_opts). The first stage
 * embeds the tokens and outputs next_token; the hidden state travels to the
 * next stage, and the last stage's tokens back to the first, as send/recv
 * nodes inside each stage's graph (compile each with its rank's
 * communicator, rank = stage). Each weight has the values it has in the
 * one-stage model, so every stage count gives the same tokens. */
/* Builds stage `stage` of mm into a new graph of ctx. On failure *out is
 * NULL and reel_ctx_last_error(ctx) says why. The caller owns the graph. */
reel_status model_build_stage_with(const reel_model *mm, reel_ctx *ctx, const model_config *c, int stage, int nstages,
                                   reel_graph **out);
/* Writes the stage's weights into the plan: the checkpoint's (c->hf), or
 * the seeded ones generated from c->seed. */
reel_status model_write_stage_with(const reel_model *mm, reel_plan *p, const model_config *c, int stage, int nstages);

/* The seeded toy without a model at hand (tests, benchmarks): each opens
 * the toy's model, does its work and closes it. */
reel_status model_build(reel_ctx *ctx, const model_config *c, reel_graph **out);
reel_status model_build_stage(reel_ctx *ctx, const model_config *c, int stage, int nstages, reel_graph **out);
reel_status model_write_weights(reel_plan *p, const model_config *c);
reel_status model_write_stage_weights(reel_plan *p, const model_config *c, int stage, int nstages);

/* Seeded tensor t of the toy c (transformers' name and layout, c->dtype)
 * into dst (bytes of it): the toy's generator (each tensor's stream depends
 * on the seed and its name in the toy's own layout only: embed, l<i>.wq ...)
 * transposed into [out, in]; gate_proj and up_proj are the halves of
 * l<i>.w_gate_up. What the plan and --save-model's checkpoint both get. */
reel_status model_seeded_tensor(const model_config *c, const reel_model_tensor *t, void *dst, size_t bytes);

/* Bytes of the KV cache (all layers, K and V). */
uint64_t model_kv_bytes(const model_config *c);

/* Storage conversion from float32 (round to nearest even). */
uint16_t model_f32_to_bf16(float f);
uint16_t model_f32_to_f16(float f);

#endif
