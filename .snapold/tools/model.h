/* A small decoder-only transformer declared through the public reel API.
 *
 * Shared by `reel demo` (and later `reel check` and the benchmarks) so that
 * every tool runs the same model. Weights are deterministic pseudo-random
 * numbers from a seed: parameters are declared deferred, and written into the
 * compiled plan with model_write_weights, one tensor at a time, so the tool
 * never holds a second copy of the whole model.
 *
 * Graph (per step, T tokens):
 *   tokens [T] -> embedding -> L x { rmsnorm, q/k/v matmul, rope (q, k),
 *   paged attention over states "l<i>.k_cache"/"l<i>.v_cache", o matmul,
 *   residual add, rmsnorm, gate_up matmul, silu_and_mul, down matmul,
 *   residual add } -> rmsnorm -> lm head matmul -> argmax -> "next_token" [T]
 */
#ifndef REEL_TOOLS_MODEL_H
#define REEL_TOOLS_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

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
    /* A Hugging Face Llama-family checkpoint's model (tools/hf.c fills these
     * from config.json): weights [out, in] as HF stores them (matmuls with
     * w_transposed), named as HF writes them, gate_proj and up_proj stacked
     * into one parameter "model.layers.<i>.mlp.gate_up_proj.weight". */
    bool hf;
    int head_dim;        /* 0: hidden / heads */
    bool qkv_bias;       /* q/k/v projections have biases (Qwen2, attention_bias) */
    bool o_bias;         /* the output projection has one (attention_bias) */
    bool tied;           /* lm_head is embed_tokens (tie_word_embeddings) */
    bool logits_output;  /* also output "logits" [T, vocab] (MODEL_OUTPUT_LOGITS) */
} model_config;

#define MODEL_CONFIG_INIT                                                                                  \
    { .layers = 4, .hidden = 256, .heads = 4, .vocab = 1024, .dtype = REEL_BF16, .block_size = 16, .num_blocks = 256, \
      .rope_theta = 10000.0f, .eps = 1e-5f, .seed = 1 }

/* Input and output names of the graph. */
#define MODEL_INPUT_TOKENS "tokens"
#define MODEL_OUTPUT_NEXT "next_token"
#define MODEL_OUTPUT_LOGITS "logits"

/* Fills the 0 defaults (kv_heads, ffn) and checks that the shapes agree;
 * on failure writes a message naming the option into err. */
int model_config_resolve(model_config *c, char *err, size_t err_len);
int model_head_dim(const model_config *c);
/* Multiply-adds times two (flop) of one token through the model's matmuls:
 * the q/k/v, o, gate_up and down projections of each layer, and the lm head.
 * Attention over the context comes on top. For a resolved config. */
double model_flop_per_token(const model_config *c);

/* Declares the model into a new graph of ctx. On failure *out is NULL and
 * reel_ctx_last_error(ctx) says why. The caller owns the graph. */
reel_status model_build(reel_ctx *ctx, const model_config *c, reel_graph **out);

/* Writes every weight of the model (generated from c->seed) into the plan. */
reel_status model_write_weights(reel_plan *p, const model_config *c);

/* Pipeline parallelism: stage `stage` of `nstages` holds layers
 * [first, last) (split as evenly as possible, earlier stages one more). The
 * first stage embeds the tokens and outputs next_token; the hidden state
 * travels to the next stage, and the last stage's tokens back to the first,
 * as send/recv nodes inside each stage's graph (compile each with its
 * rank's communicator, rank = stage). Each weight has the values it has in
 * the one-stage model, so every stage count gives the same tokens. */
void model_stage_layers(const model_config *c, int stage, int nstages, int *first, int *last);
reel_status model_build_stage(reel_ctx *ctx, const model_config *c, int stage, int nstages, reel_graph **out);
reel_status model_write_stage_weights(reel_plan *p, const model_config *c, int stage, int nstages);

/* The seeded weights of c (the demo layout, c->hf false), one tensor at a
 * time: each is generated into a buffer of the tensor's size and handed
 * to fn with its name, dims [rows, cols] (cols 0: a vector) and dtype
 * c->dtype, in the order model_write_weights writes them. Stops at the
 * first status fn returns other than REEL_OK. */
typedef reel_status (*model_tensor_fn)(void *arg, const char *name, int64_t rows, int64_t cols, const void *data);
reel_status model_each_seeded(const model_config *c, model_tensor_fn fn, void *arg);

/* Bytes of all weights, and of the KV cache (all layers, K and V). */
uint64_t model_weight_bytes(const model_config *c);
uint64_t model_kv_bytes(const model_config *c);

/* Storage conversion from float32 (round to nearest even). */
uint16_t model_f32_to_bf16(float f);
uint16_t model_f32_to_f16(float f);

#endif
