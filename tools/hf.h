/* The seeded demo model saved as a Hugging Face checkpoint directory
 * (`reel demo --save-model DIR`). Checkpoints are read by the library's
 * models layer (include/reel/models.h; tools/model.c's model_open_dir). */
#ifndef REEL_TOOLS_HF_H
#define REEL_TOOLS_HF_H

#include <stddef.h>

#include "model.h"
#include "reel/safetensors.h"

/* Saves the seeded weights of the demo model m (m->hf false) as a Hugging
 * Face Llama checkpoint directory: DIR/config.json (model_toy_config_json)
 * and DIR/model.safetensors, every tensor the library's model reads, in its
 * order, with transformers' names and [out, in] layout
 * (model_seeded_tensor). Loaded back it computes the same function (on the
 * host backend, the same bits). DIR is created if missing. 0 ok, -1 with
 * the reason in err. */
int hf_save_seeded(reel_ctx *ctx, const model_config *m, const char *dir, char *err, size_t err_len);

#endif
