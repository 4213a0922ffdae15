/* Hugging Face Llama-family checkpoints for the demo model (model.h):
 * config.json to a model_config, the checkpoint's tensors into a plan, and
 * the demo's seeded weights saved as such a checkpoint directory.
 *
 * Accepted: model_type "llama" and "qwen2" (q/k/v biases), hidden_act silu,
 * no rope_scaling, no sliding window, no MLP bias; dtype bf16, f16 or f32.
 * Anything else is refused with a message naming the key. */
#ifndef REEL_TOOLS_HF_H
#define REEL_TOOLS_HF_H

#include <stddef.h>

#include "model.h"
#include "reel/safetensors.h"

/* Reads DIR/config.json into the model fields of m (layers, hidden, heads,
 * kv heads, head dim, ffn, vocab, dtype, rope theta, eps, biases, tied
 * embeddings) and sets m->hf; the KV-cache fields are left alone. 0 ok,
 * -1 with the reason in err. */
int hf_load_config(const char *dir, model_config *m, char *err, size_t err_len);

/* Writes stage `stage`'s weights of an hf model from the checkpoint. */
reel_status hf_write_weights(reel_plan *p, const model_config *m, const reel_safetensors *ck, int stage,
                             int nstages);

/* Saves the seeded weights of the demo model m (m->hf false) as a Hugging
 * Face checkpoint directory: DIR/config.json and DIR/model.safetensors,
 * weights transposed to [out, in], gate_up split into gate_proj and
 * up_proj. Loaded back (hf_load_config, hf_write_weights) it computes the
 * same function (on the host backend, the same bits). DIR is created if
 * missing. 0 ok, -1 with the reason in err. */
int hf_save_seeded(reel_ctx *ctx, const model_config *m, const char *dir, char *err, size_t err_len);

#endif
