/* The models layer's test fixture (see fixture.h). */
#include "tests/models/fixture.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ---- the families, as their config.json says ----------------------------------- */

#define NO_ROPE {NULL, 1, 0, 0, 0, -1, 0, 0, 0, 0, -1}

const mfam mf_families[] = {
    {"Llama-3.2-1B",
     "{\"architectures\": [\"LlamaForCausalLM\"], \"attention_bias\": false, \"attention_dropout\": 0.0, "
     "\"bos_token_id\": 128000, \"eos_token_id\": 128001, \"head_dim\": 16, \"hidden_act\": \"silu\", "
     "\"hidden_size\": 128, \"initializer_range\": 0.02, \"intermediate_size\": 192, "
     "\"max_position_embeddings\": 131072, \"mlp_bias\": false, \"model_type\": \"llama\", "
     "\"num_attention_heads\": 8, \"num_hidden_layers\": 2, \"num_key_value_heads\": 2, \"pretraining_tp\": 1, "
     "\"rms_norm_eps\": 1e-05, \"rope_scaling\": {\"factor\": 32.0, \"high_freq_factor\": 4.0, "
     "\"low_freq_factor\": 1.0, \"original_max_position_embeddings\": 8192, \"rope_type\": \"llama3\"}, "
     "\"rope_theta\": 500000.0, \"tie_word_embeddings\": true, \"torch_dtype\": \"%s\", "
     "\"transformers_version\": \"4.45.0.dev0\", \"use_cache\": true, \"vocab_size\": 256}",
     REEL_MODEL_LLAMA, 2, 128, 8, 2, 16, 192, 256, true, false, false, false, 1e-5, 500000.0, 131072,
     REEL_ROPE_LLAMA3, {"llama3", 32.0, 1.0, 4.0, 8192, -1, 0, 0, 0, 0, -1}, MF_DENSE},
    {"Llama-3.1-8B",
     "{\"architectures\": [\"LlamaForCausalLM\"], \"attention_bias\": false, \"attention_dropout\": 0.0, "
     "\"bos_token_id\": 128000, \"eos_token_id\": 128001, \"hidden_act\": \"silu\", \"hidden_size\": 128, "
     "\"initializer_range\": 0.02, \"intermediate_size\": 224, \"max_position_embeddings\": 131072, "
     "\"mlp_bias\": false, \"model_type\": \"llama\", \"num_attention_heads\": 8, \"num_hidden_layers\": 2, "
     "\"num_key_value_heads\": 2, \"pretraining_tp\": 1, \"rms_norm_eps\": 1e-05, \"rope_scaling\": "
     "{\"factor\": 8.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, "
     "\"original_max_position_embeddings\": 8192, \"rope_type\": \"llama3\"}, \"rope_theta\": 500000.0, "
     "\"tie_word_embeddings\": false, \"torch_dtype\": \"%s\", \"transformers_version\": \"4.43.0.dev0\", "
     "\"use_cache\": true, \"vocab_size\": 320}",
     REEL_MODEL_LLAMA, 2, 128, 8, 2, 16, 224, 320, false, false, false, false, 1e-5, 500000.0, 131072,
     REEL_ROPE_LLAMA3, {"llama3", 8.0, 1.0, 4.0, 8192, -1, 0, 0, 0, 0, -1}, MF_DENSE},
    {"Mistral-7B-v0.3",
     "{\"architectures\": [\"MistralForCausalLM\"], \"attention_dropout\": 0.0, \"bos_token_id\": 1, "
     "\"eos_token_id\": 2, \"hidden_act\": \"silu\", \"hidden_size\": 64, \"initializer_range\": 0.02, "
     "\"intermediate_size\": 160, \"max_position_embeddings\": 32768, \"model_type\": \"mistral\", "
     "\"num_attention_heads\": 4, \"num_hidden_layers\": 2, \"num_key_value_heads\": 1, \"rms_norm_eps\": 1e-05, "
     "\"rope_theta\": 1000000.0, \"sliding_window\": null, \"tie_word_embeddings\": false, "
     "\"torch_dtype\": \"%s\", \"transformers_version\": \"4.42.0.dev0\", \"use_cache\": true, "
     "\"vocab_size\": 384}",
     REEL_MODEL_MISTRAL, 2, 64, 4, 1, 16, 160, 384, false, false, false, false, 1e-5, 1e6, 32768,
     REEL_ROPE_DEFAULT, NO_ROPE, MF_DENSE},
    {"Qwen2.5-0.5B",
     "{\"architectures\": [\"Qwen2ForCausalLM\"], \"attention_dropout\": 0.0, \"bos_token_id\": 151643, "
     "\"eos_token_id\": 151643, \"hidden_act\": \"silu\", \"hidden_size\": 112, \"initializer_range\": 0.02, "
     "\"intermediate_size\": 160, \"max_position_embeddings\": 32768, \"max_window_layers\": 24, "
     "\"model_type\": \"qwen2\", \"num_attention_heads\": 14, \"num_hidden_layers\": 2, "
     "\"num_key_value_heads\": 2, \"rms_norm_eps\": 1e-06, \"rope_theta\": 1000000.0, \"sliding_window\": 32768, "
     "\"tie_word_embeddings\": true, \"torch_dtype\": \"%s\", \"transformers_version\": \"4.40.1\", "
     "\"use_cache\": true, \"use_sliding_window\": false, \"vocab_size\": 256}",
     REEL_MODEL_QWEN2, 2, 112, 14, 2, 8, 160, 256, true, true, false, false, 1e-6, 1e6, 32768,
     REEL_ROPE_DEFAULT, NO_ROPE, MF_DENSE},
    {"Qwen3-0.6B",
     "{\"architectures\": [\"Qwen3ForCausalLM\"], \"attention_bias\": false, \"attention_dropout\": 0.0, "
     "\"bos_token_id\": 151643, \"eos_token_id\": 151645, \"head_dim\": 32, \"hidden_act\": \"silu\", "
     "\"hidden_size\": 64, \"initializer_range\": 0.02, \"intermediate_size\": 96, "
     "\"max_position_embeddings\": 40960, \"max_window_layers\": 28, \"model_type\": \"qwen3\", "
     "\"num_attention_heads\": 4, \"num_hidden_layers\": 2, \"num_key_value_heads\": 2, \"rms_norm_eps\": 1e-06, "
     "\"rope_scaling\": null, \"rope_theta\": 1000000, \"sliding_window\": null, \"tie_word_embeddings\": true, "
     "\"torch_dtype\": \"%s\", \"transformers_version\": \"4.51.0\", \"use_cache\": true, "
     "\"use_sliding_window\": false, \"vocab_size\": 256}",
     REEL_MODEL_QWEN3, 2, 64, 4, 2, 32, 96, 256, true, false, false, true, 1e-6, 1e6, 40960, REEL_ROPE_DEFAULT,
     NO_ROPE, MF_DENSE},
    /* Qwen3 with the long-context rope Qwen's model cards give */
    {"Qwen3-0.6B-yarn",
     "{\"architectures\": [\"Qwen3ForCausalLM\"], \"attention_bias\": false, \"attention_dropout\": 0.0, "
     "\"bos_token_id\": 151643, \"eos_token_id\": 151645, \"head_dim\": 32, \"hidden_act\": \"silu\", "
     "\"hidden_size\": 64, \"initializer_range\": 0.02, \"intermediate_size\": 96, "
     "\"max_position_embeddings\": 131072, \"max_window_layers\": 28, \"model_type\": \"qwen3\", "
     "\"num_attention_heads\": 4, \"num_hidden_layers\": 2, \"num_key_value_heads\": 2, \"rms_norm_eps\": 1e-06, "
     "\"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4.0, \"original_max_position_embeddings\": 32768}, "
     "\"rope_theta\": 1000000, \"sliding_window\": null, \"tie_word_embeddings\": true, \"torch_dtype\": \"%s\", "
     "\"transformers_version\": \"4.51.0\", \"use_cache\": true, \"use_sliding_window\": false, "
     "\"vocab_size\": 256}",
     REEL_MODEL_QWEN3, 2, 64, 4, 2, 32, 96, 256, true, false, false, true, 1e-6, 1e6, 131072, REEL_ROPE_YARN,
     {"yarn", 4.0, 0, 0, 32768, -1, 0, 0, 0, 0, -1}, MF_DENSE},
    /* Llama 2 with linear rope scaling under the old key "type", no kv heads (MHA) */
    {"Llama-2-linear",
     "{\"architectures\": [\"LlamaForCausalLM\"], \"bos_token_id\": 1, \"eos_token_id\": 2, "
     "\"hidden_act\": \"silu\", \"hidden_size\": 64, \"initializer_range\": 0.02, \"intermediate_size\": 172, "
     "\"max_position_embeddings\": 16384, \"model_type\": \"llama\", \"num_attention_heads\": 4, "
     "\"num_hidden_layers\": 2, \"pretraining_tp\": 1, \"rms_norm_eps\": 1e-05, "
     "\"rope_scaling\": {\"type\": \"linear\", \"factor\": 4.0}, \"tie_word_embeddings\": false, "
     "\"torch_dtype\": \"%s\", \"transformers_version\": \"4.31.0\", \"use_cache\": true, \"vocab_size\": 256}",
     REEL_MODEL_LLAMA, 2, 64, 4, 4, 16, 172, 256, false, false, false, false, 1e-5, 10000.0, 16384,
     REEL_ROPE_LINEAR, {"linear", 4.0, 0, 0, 0, -1, 0, 0, 0, 0, -1}, MF_DENSE},
    /* Llama with attention_bias and dynamic NTK scaling (served up to its length) */
    {"Llama-dynamic-bias",
     "{\"architectures\": [\"LlamaForCausalLM\"], \"attention_bias\": true, \"hidden_act\": \"silu\", "
     "\"hidden_size\": 64, \"intermediate_size\": 128, \"max_position_embeddings\": 4096, "
     "\"model_type\": \"llama\", \"num_attention_heads\": 4, \"num_hidden_layers\": 2, "
     "\"num_key_value_heads\": 2, \"rms_norm_eps\": 1e-06, \"rope_scaling\": {\"rope_type\": \"dynamic\", "
     "\"factor\": 2.0}, \"rope_theta\": 10000.0, \"tie_word_embeddings\": false, \"torch_dtype\": \"%s\", "
     "\"vocab_size\": 256}",
     REEL_MODEL_LLAMA, 2, 64, 4, 2, 16, 128, 256, false, true, true, false, 1e-6, 10000.0, 4096,
     REEL_ROPE_DYNAMIC, {"dynamic", 2.0, 0, 0, 0, -1, 0, 0, 0, 0, -1}, MF_DENSE},
    /* Qwen3-30B-A3B's config (128 experts, 8 a token, norm_topk_prob) shrunk
     * to 16 experts of 4 a token; layer 1 in mlp_only_layers (dense, the
     * intermediate_size), as Qwen3-MoE configs allow. */
    {"Qwen3-30B-A3B",
     "{\"architectures\": [\"Qwen3MoeForCausalLM\"], \"attention_bias\": false, \"attention_dropout\": 0.0, "
     "\"bos_token_id\": 151643, \"decoder_sparse_step\": 1, \"eos_token_id\": 151645, \"head_dim\": 16, "
     "\"hidden_act\": \"silu\", \"hidden_size\": 64, \"initializer_range\": 0.02, \"intermediate_size\": 96, "
     "\"max_position_embeddings\": 40960, \"max_window_layers\": 48, \"mlp_only_layers\": [1], "
     "\"model_type\": \"qwen3_moe\", \"moe_intermediate_size\": 24, \"norm_topk_prob\": true, "
     "\"num_attention_heads\": 8, \"num_experts\": 16, \"num_experts_per_tok\": 4, \"num_hidden_layers\": 3, "
     "\"num_key_value_heads\": 2, \"output_router_logits\": false, \"rms_norm_eps\": 1e-06, "
     "\"rope_scaling\": null, \"rope_theta\": 1000000.0, \"router_aux_loss_coef\": 0.001, "
     "\"sliding_window\": null, \"tie_word_embeddings\": false, \"torch_dtype\": \"%s\", "
     "\"transformers_version\": \"4.51.0\", \"use_cache\": true, \"use_sliding_window\": false, "
     "\"vocab_size\": 256}",
     REEL_MODEL_QWEN3_MOE, 3, 64, 8, 2, 16, 96, 256, false, false, false, true, 1e-6, 1e6, 40960,
     REEL_ROPE_DEFAULT, NO_ROPE, 16, 4, 24, true, 1, 1, false, NULL},
    /* Mixtral-8x7B-v0.1's config shrunk: 8 experts, 2 a token, always
     * renormalized. */
    {"Mixtral-8x7B",
     "{\"architectures\": [\"MixtralForCausalLM\"], \"attention_dropout\": 0.0, \"bos_token_id\": 1, "
     "\"eos_token_id\": 2, \"hidden_act\": \"silu\", \"hidden_size\": 64, \"initializer_range\": 0.02, "
     "\"intermediate_size\": 48, \"max_position_embeddings\": 32768, \"model_type\": \"mixtral\", "
     "\"num_attention_heads\": 4, \"num_experts_per_tok\": 2, \"num_hidden_layers\": 2, "
     "\"num_key_value_heads\": 2, \"num_local_experts\": 8, \"output_router_logits\": false, "
     "\"rms_norm_eps\": 1e-05, \"rope_theta\": 1000000.0, \"router_aux_loss_coef\": 0.02, "
     "\"sliding_window\": null, \"tie_word_embeddings\": false, \"torch_dtype\": \"%s\", "
     "\"transformers_version\": \"4.36.0.dev0\", \"use_cache\": true, \"vocab_size\": 256}",
     REEL_MODEL_MIXTRAL, 2, 64, 4, 2, 16, 48, 256, false, false, false, false, 1e-5, 1e6, 32768,
     REEL_ROPE_DEFAULT, NO_ROPE, 8, 2, 48, true, 1, -1, true, NULL},
    /* DeepSeek-V3's config.json (deepseek-ai/DeepSeek-V3; its quantization_config
     * left out, as the bf16 conversions have it) shrunk: 3 layers, the first
     * dense; 16 experts in 4 groups keeping 2, 4 a token, a shared expert;
     * q through q_lora_rank, yarn rope of factor 40 (mscale_all_dim: the
     * softmax scale), interleaved rope pairs (rope_interleave's default). */
    {"DeepSeek-V3",
     "{\"architectures\": [\"DeepseekV3ForCausalLM\"], \"attention_bias\": false, \"attention_dropout\": 0.0, "
     "\"auto_map\": {\"AutoConfig\": \"configuration_deepseek.DeepseekV3Config\", \"AutoModel\": "
     "\"modeling_deepseek.DeepseekV3Model\", \"AutoModelForCausalLM\": \"modeling_deepseek.DeepseekV3ForCausalLM\"}, "
     "\"aux_loss_alpha\": 0.001, \"bos_token_id\": 0, \"eos_token_id\": 1, \"ep_size\": 1, "
     "\"first_k_dense_replace\": 1, \"hidden_act\": \"silu\", \"hidden_size\": 64, \"initializer_range\": 0.02, "
     "\"intermediate_size\": 96, \"kv_lora_rank\": 32, \"max_position_embeddings\": 163840, "
     "\"model_type\": \"deepseek_v3\", \"moe_intermediate_size\": 24, \"moe_layer_freq\": 1, \"n_group\": 4, "
     "\"n_routed_experts\": 16, \"n_shared_experts\": 1, \"norm_topk_prob\": true, \"num_attention_heads\": 4, "
     "\"num_experts_per_tok\": 4, \"num_hidden_layers\": 3, \"num_key_value_heads\": 4, "
     "\"num_nextn_predict_layers\": 1, \"pretraining_tp\": 1, \"q_lora_rank\": 24, \"qk_nope_head_dim\": 16, "
     "\"qk_rope_head_dim\": 8, \"rms_norm_eps\": 1e-06, \"rope_scaling\": {\"beta_fast\": 32, \"beta_slow\": 1, "
     "\"factor\": 40, \"mscale\": 1.0, \"mscale_all_dim\": 1.0, \"original_max_position_embeddings\": 4096, "
     "\"type\": \"yarn\"}, \"rope_theta\": 10000, \"routed_scaling_factor\": 2.5, \"scoring_func\": \"sigmoid\", "
     "\"seq_aux\": true, \"tie_word_embeddings\": false, \"topk_group\": 2, \"topk_method\": \"noaux_tc\", "
     "\"torch_dtype\": \"%s\", \"transformers_version\": \"4.33.1\", \"use_cache\": true, \"v_head_dim\": 16, "
     "\"vocab_size\": 256}",
     REEL_MODEL_DEEPSEEK_V3, 3, 64, 4, 4, 8, 96, 256, false, false, false, false, 1e-6, 10000.0, 163840,
     REEL_ROPE_YARN, {"yarn", 40.0, 0, 0, 4096, -1, 32, 1, 1.0, 1.0, -1}, 16, 4, 24, true, 1, -1, false,
     &(const mfds){24, 32, 16, 8, 16, true, 4, 2, 1, 1, 2.5}},
    /* Moonlight-16B-A3B's config (a deepseek_v3 checkpoint with q_lora_rank
     * null: one q_proj; no rope scaling; n_group 1: no groups; 2 shared
     * experts) shrunk, with rope_interleave false (DeepseekV3Config's key:
     * rotate_half's pairs) and a v_head_dim other than qk_nope_head_dim. */
    {"Moonlight-16B-A3B-halves",
     "{\"architectures\": [\"DeepseekV3ForCausalLM\"], \"attention_bias\": false, \"attention_dropout\": 0.0, "
     "\"aux_loss_alpha\": 0.001, \"bos_token_id\": 163584, \"eos_token_id\": 163585, \"ep_size\": 1, "
     "\"first_k_dense_replace\": 1, \"hidden_act\": \"silu\", \"hidden_size\": 64, \"initializer_range\": 0.02, "
     "\"intermediate_size\": 112, \"kv_lora_rank\": 32, \"max_position_embeddings\": 8192, "
     "\"model_type\": \"deepseek_v3\", \"moe_intermediate_size\": 24, \"moe_layer_freq\": 1, \"n_group\": 1, "
     "\"n_routed_experts\": 16, \"n_shared_experts\": 2, \"norm_topk_prob\": true, \"num_attention_heads\": 4, "
     "\"num_experts_per_tok\": 4, \"num_hidden_layers\": 3, \"num_key_value_heads\": 4, "
     "\"num_nextn_predict_layers\": 0, \"pretraining_tp\": 1, \"q_lora_rank\": null, \"qk_nope_head_dim\": 16, "
     "\"qk_rope_head_dim\": 8, \"rms_norm_eps\": 1e-05, \"rope_interleave\": false, \"rope_scaling\": null, "
     "\"rope_theta\": 50000.0, \"routed_scaling_factor\": 2.446, \"scoring_func\": \"sigmoid\", \"seq_aux\": true, "
     "\"tie_word_embeddings\": false, \"topk_group\": 1, \"topk_method\": \"noaux_tc\", \"torch_dtype\": \"%s\", "
     "\"transformers_version\": \"4.48.2\", \"use_cache\": true, \"v_head_dim\": 12, \"vocab_size\": 256}",
     REEL_MODEL_DEEPSEEK_V3, 3, 64, 4, 4, 8, 112, 256, false, false, false, false, 1e-5, 50000.0, 8192,
     REEL_ROPE_DEFAULT, NO_ROPE, 16, 4, 24, true, 1, -1, false, &(const mfds){0, 32, 16, 8, 12, false, 1, 1, 2, 1, 2.446}},
};
const int mf_nfamilies = (int)(sizeof mf_families / sizeof mf_families[0]);

char *mf_config(const mfam *f, reel_dtype dt)
{
    const char *s = dt == REEL_BF16 ? "bfloat16" : dt == REEL_F16 ? "float16" : "float32";
    size_t n = strlen(f->config) + 32;
    char *out = malloc(n);
    cr_assert_not_null(out);
    snprintf(out, n, f->config, s);
    return out;
}

/* ---- transformers' rope (modeling_rope_utils), float64 ---------------------------- */

static double get_mscale(double scale, double mscale)
{
    if (scale <= 1)
        return 1.0;
    return 0.1 * mscale * log(scale) + 1.0;
}

static double find_correction_dim(double num_rotations, int dim, double base, double max_position_embeddings)
{
    return (dim * log(max_position_embeddings / (num_rotations * 2 * M_PI))) / (2 * log(base));
}

void tf_inv_freq(const tf_rope *rp, int dim, double theta, int max_pos, double *inv, double *attn)
{
    const int half = dim / 2;
    const char *type = rp->type ? rp->type : "default";
    /* _compute_default_rope_parameters */
    for (int i = 0; i < half; i++)
        inv[i] = 1.0 / pow(theta, (double)(2 * i) / dim);
    *attn = 1.0;
    if (strcmp(type, "linear") == 0) {
        for (int i = 0; i < half; i++)
            inv[i] /= rp->factor;
    } else if (strcmp(type, "dynamic") == 0) {
        /* seq_len = max(seq_len, max_position_embeddings) = max_position_embeddings */
        double seq_len = max_pos, factor = rp->factor;
        double base = theta * pow((factor * seq_len / max_pos) - (factor - 1), (double)dim / (dim - 2));
        for (int i = 0; i < half; i++)
            inv[i] = 1.0 / pow(base, (double)(2 * i) / dim);
    } else if (strcmp(type, "llama3") == 0) {
        double factor = rp->factor, low_freq_factor = rp->low_freq_factor, high_freq_factor = rp->high_freq_factor;
        double old_context_len = rp->orig_max_pos;
        double low_freq_wavelen = old_context_len / low_freq_factor;
        double high_freq_wavelen = old_context_len / high_freq_factor;
        for (int i = 0; i < half; i++) {
            double wavelen = 2 * M_PI / inv[i];
            double inv_freq_llama = wavelen > low_freq_wavelen ? inv[i] / factor : inv[i];
            double smooth_factor = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
            double smoothed = (1 - smooth_factor) * inv_freq_llama / factor + smooth_factor * inv_freq_llama;
            bool is_medium = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
            inv[i] = is_medium ? smoothed : inv_freq_llama;
        }
    } else if (strcmp(type, "yarn") == 0) {
        double base = theta, factor = rp->factor;
        double original_max_position_embeddings = rp->orig_max_pos ? rp->orig_max_pos : max_pos;
        double attention_factor = rp->attention_factor;
        if (attention_factor < 0) {
            if (rp->mscale && rp->mscale_all_dim)
                attention_factor = get_mscale(factor, rp->mscale) / get_mscale(factor, rp->mscale_all_dim);
            else
                attention_factor = get_mscale(factor, 1);
        }
        double beta_fast = rp->beta_fast ? rp->beta_fast : 32, beta_slow = rp->beta_slow ? rp->beta_slow : 1;
        double low = find_correction_dim(beta_fast, dim, base, original_max_position_embeddings);
        double high = find_correction_dim(beta_slow, dim, base, original_max_position_embeddings);
        if (rp->truncate != 0) {
            low = floor(low);
            high = ceil(high);
        }
        low = fmax(low, 0);
        high = fmin(high, dim - 1);
        if (low == high)
            high += 0.001;
        for (int i = 0; i < half; i++) {
            double pos_freqs = pow(base, (double)(2 * i) / dim);
            double inv_freq_extrapolation = 1.0 / pos_freqs, inv_freq_interpolation = 1.0 / (factor * pos_freqs);
            double ramp = fmin(fmax((i - low) / (high - low), 0), 1);
            double inv_freq_extrapolation_factor = 1 - ramp;
            inv[i] = inv_freq_interpolation * (1 - inv_freq_extrapolation_factor) +
                     inv_freq_extrapolation * inv_freq_extrapolation_factor;
        }
        *attn = attention_factor;
    }
}

/* ---- weights --------------------------------------------------------------------- */

static uint64_t mix(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint16_t to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static double from_bf16(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void add(mweights *w, const char *name, int64_t d0, int64_t d1, double lo, double hi, uint64_t *s,
                reel_dtype dt)
{
    int k = w->n++;
    w->name = realloc(w->name, (size_t)w->n * sizeof *w->name);
    w->ndim = realloc(w->ndim, (size_t)w->n * sizeof *w->ndim);
    w->dims = realloc(w->dims, (size_t)w->n * sizeof *w->dims);
    w->v = realloc(w->v, (size_t)w->n * sizeof *w->v);
    w->dt = realloc(w->dt, (size_t)w->n * sizeof *w->dt);
    cr_assert(w->name && w->ndim && w->dims && w->v && w->dt);
    snprintf(w->name[k], sizeof w->name[k], "%s", name);
    w->dt[k] = dt;
    w->ndim[k] = d1 ? 2 : 1;
    w->dims[k][0] = d0;
    w->dims[k][1] = d1;
    size_t n = (size_t)(d0 * (d1 ? d1 : 1));
    w->v[k] = malloc(n * sizeof(double));
    cr_assert_not_null(w->v[k]);
    for (size_t i = 0; i < n; i++) {
        double u = (double)(mix(s) >> 11) * (1.0 / 9007199254740992.0);
        float f = (float)(lo + (hi - lo) * u);
        w->v[k][i] = dt == REEL_BF16 ? from_bf16(to_bf16(f)) : (double)f;
    }
}

static const double *find(const mweights *w, const char *name)
{
    for (int i = 0; i < w->n; i++)
        if (strcmp(w->name[i], name) == 0)
            return w->v[i];
    return NULL;
}

static const double *lw(const mweights *w, int l, const char *suffix)
{
    char n[128];
    snprintf(n, sizeof n, "model.layers.%d.%s", l, suffix);
    const double *v = find(w, n);
    cr_assert_not_null(v, "no weight %s", n);
    return v;
}

void mf_weights_free(mweights *w)
{
    for (int i = 0; i < w->n; i++)
        free(w->v[i]);
    free(w->name);
    free(w->ndim);
    free(w->dims);
    free(w->v);
    free(w->dt);
    memset(w, 0, sizeof *w);
}

/* A DeepSeek V3 layer's tensors under transformers' names (DeepseekV3Attention,
 * DeepseekV3MoE with its DeepseekV3TopkRouter, or DeepseekV3MLP below
 * first_k_dense_replace); the router's choice bias in bias_dt. */
static void add_deepseek_layer(const mfam *f, int l, reel_dtype dt, reel_dtype bias_dt, uint64_t *s, mweights *w)
{
    const mfds *ds = f->ds;
    const int64_t D = f->hidden, H = f->heads, Dq = (int64_t)ds->qk_nope + ds->qk_rope, L = ds->kv_lora;
    const int64_t Vh = (int64_t)H * ds->v_dim, Fe = f->moe_ffn, Fs = (int64_t)ds->n_shared * f->moe_ffn, F = f->ffn;
    const double sD = sqrt(3.0 / D), sL = sqrt(3.0 / L), sV = sqrt(3.0 / Vh);
    char n[128];
#define L_(suffix) (snprintf(n, sizeof n, "model.layers.%d.%s", l, suffix), n)
    add(w, L_("input_layernorm.weight"), D, 0, 0.5, 1.5, s, dt);
    if (ds->q_lora) {
        add(w, L_("self_attn.q_a_proj.weight"), ds->q_lora, D, -sD, sD, s, dt);
        add(w, L_("self_attn.q_a_layernorm.weight"), ds->q_lora, 0, 0.5, 1.5, s, dt);
        double sq = sqrt(3.0 / ds->q_lora);
        add(w, L_("self_attn.q_b_proj.weight"), H * Dq, ds->q_lora, -sq, sq, s, dt);
    } else {
        add(w, L_("self_attn.q_proj.weight"), H * Dq, D, -sD, sD, s, dt);
    }
    add(w, L_("self_attn.kv_a_proj_with_mqa.weight"), L + ds->qk_rope, D, -sD, sD, s, dt);
    add(w, L_("self_attn.kv_a_layernorm.weight"), L, 0, 0.5, 1.5, s, dt);
    add(w, L_("self_attn.kv_b_proj.weight"), H * ((int64_t)ds->qk_nope + ds->v_dim), L, -sL, sL, s, dt);
    add(w, L_("self_attn.o_proj.weight"), D, Vh, -sV, sV, s, dt);
    add(w, L_("post_attention_layernorm.weight"), D, 0, 0.5, 1.5, s, dt);
    if (!mf_layer_moe(f, l)) {
        add(w, L_("mlp.gate_proj.weight"), F, D, -sD, sD, s, dt);
        add(w, L_("mlp.up_proj.weight"), F, D, -sD, sD, s, dt);
        add(w, L_("mlp.down_proj.weight"), D, F, -sqrt(3.0 / F), sqrt(3.0 / F), s, dt);
        return;
    }
    /* router logits of about unit size: sigmoid scores spread over (0, 1);
     * a choice bias that reorders them */
    add(w, L_("mlp.gate.weight"), f->experts, D, -2 * sD, 2 * sD, s, dt);
    add(w, L_("mlp.gate.e_score_correction_bias"), f->experts, 0, -0.25, 0.25, s, bias_dt);
    const double sE = sqrt(3.0 / Fe), sS = sqrt(3.0 / Fs);
    static const char *const pn[3] = {"gate_proj", "up_proj", "down_proj"};
    for (int e = 0; e < f->experts; e++) {
        for (int j = 0; j < 3; j++) {
            char en[96];
            snprintf(en, sizeof en, "mlp.experts.%d.%s.weight", e, pn[j]);
            if (j < 2)
                add(w, L_(en), Fe, D, -sD, sD, s, dt);
            else
                add(w, L_(en), D, Fe, -sE, sE, s, dt);
        }
    }
    add(w, L_("mlp.shared_experts.gate_proj.weight"), Fs, D, -sD, sD, s, dt);
    add(w, L_("mlp.shared_experts.up_proj.weight"), Fs, D, -sD, sD, s, dt);
    add(w, L_("mlp.shared_experts.down_proj.weight"), D, Fs, -sS, sS, s, dt);
#undef L_
}

static void write_model(const mfam *f, reel_dtype dt, reel_dtype bias_dt, uint64_t seed, const char *dir, mweights *w,
                        const char *extra, const char *drop);

void mf_write(const mfam *f, reel_dtype dt, uint64_t seed, const char *dir, mweights *w, const char *extra,
              const char *drop)
{
    write_model(f, dt, REEL_F32, seed, dir, w, extra, drop);
}

void mf_write_bias(const mfam *f, reel_dtype dt, reel_dtype bias_dt, uint64_t seed, const char *dir, mweights *w)
{
    write_model(f, dt, bias_dt, seed, dir, w, NULL, NULL);
}

static void write_model(const mfam *f, reel_dtype dt, reel_dtype bias_dt, uint64_t seed, const char *dir, mweights *w,
                        const char *extra, const char *drop)
{
    memset(w, 0, sizeof *w);
    mkdir(dir, 0777);
    uint64_t s = seed;
    const int64_t D = f->hidden, Dh = f->head_dim, Q = (int64_t)f->heads * Dh, KV = (int64_t)f->kv_heads * Dh;
    const int64_t F = f->ffn, V = f->vocab;
    const double sD = sqrt(3.0 / D), sQ = sqrt(3.0 / Q), sF = sqrt(3.0 / F);
    char n[128];
    add(w, "model.embed_tokens.weight", V, D, -1, 1, &s, dt);
    for (int l = 0; l < f->layers; l++) {
        if (f->ds) {
            add_deepseek_layer(f, l, dt, bias_dt, &s, w);
            continue;
        }
#define L(suffix) (snprintf(n, sizeof n, "model.layers.%d.%s", l, suffix), n)
        add(w, L("input_layernorm.weight"), D, 0, 0.5, 1.5, &s, dt);
        add(w, L("self_attn.q_proj.weight"), Q, D, -sD, sD, &s, dt);
        add(w, L("self_attn.k_proj.weight"), KV, D, -sD, sD, &s, dt);
        add(w, L("self_attn.v_proj.weight"), KV, D, -sD, sD, &s, dt);
        if (f->qkv_bias) {
            add(w, L("self_attn.q_proj.bias"), Q, 0, -0.5, 0.5, &s, dt);
            add(w, L("self_attn.k_proj.bias"), KV, 0, -0.5, 0.5, &s, dt);
            add(w, L("self_attn.v_proj.bias"), KV, 0, -0.5, 0.5, &s, dt);
        }
        if (f->qk_norm) {
            add(w, L("self_attn.q_norm.weight"), Dh, 0, 0.5, 1.5, &s, dt);
            add(w, L("self_attn.k_norm.weight"), Dh, 0, 0.5, 1.5, &s, dt);
        }
        add(w, L("self_attn.o_proj.weight"), D, Q, -sQ, sQ, &s, dt);
        if (f->o_bias)
            add(w, L("self_attn.o_proj.bias"), D, 0, -0.5, 0.5, &s, dt);
        add(w, L("post_attention_layernorm.weight"), D, 0, 0.5, 1.5, &s, dt);
        if (mf_layer_moe(f, l)) {
            const int64_t Fe = f->moe_ffn;
            const double sE = sqrt(3.0 / Fe);
            add(w, L(f->mixtral_names ? "block_sparse_moe.gate.weight" : "mlp.gate.weight"), f->experts, D, -4 * sD,
                4 * sD, &s, dt);
            for (int e = 0; e < f->experts; e++) {
                char en[96];
                const char *const *pn = f->mixtral_names ? (const char *const[]){"w1", "w3", "w2"}
                                                        : (const char *const[]){"gate_proj", "up_proj", "down_proj"};
                for (int j = 0; j < 3; j++) {
                    snprintf(en, sizeof en, "%s.experts.%d.%s.weight", f->mixtral_names ? "block_sparse_moe" : "mlp",
                             e, pn[j]);
                    if (j < 2)
                        add(w, L(en), Fe, D, -sD, sD, &s, dt);
                    else
                        add(w, L(en), D, Fe, -sE, sE, &s, dt);
                }
            }
        } else {
            add(w, L("mlp.gate_proj.weight"), F, D, -sD, sD, &s, dt);
            add(w, L("mlp.up_proj.weight"), F, D, -sD, sD, &s, dt);
            add(w, L("mlp.down_proj.weight"), D, F, -sF, sF, &s, dt);
        }
#undef L
    }
    add(w, "model.norm.weight", D, 0, 0.5, 1.5, &s, dt);
    if (!f->tied)
        add(w, "lm_head.weight", V, D, -sD, sD, &s, dt);
    if (extra)
        add(w, extra, 8, 0, -1, 1, &s, dt);
    /* the file: in dt, from the values (exact in dt) */
    reel_st_entry *e = calloc((size_t)w->n, sizeof *e);
    void **bufs = calloc((size_t)w->n, sizeof *bufs);
    int ne = 0;
    for (int i = 0; i < w->n; i++) {
        if (drop && strcmp(drop, w->name[i]) == 0)
            continue;
        size_t cnt = (size_t)(w->dims[i][0] * (w->ndim[i] == 2 ? w->dims[i][1] : 1));
        bufs[i] = malloc(cnt * 4);
        for (size_t j = 0; j < cnt; j++) {
            if (w->dt[i] == REEL_BF16)
                ((uint16_t *)bufs[i])[j] = to_bf16((float)w->v[i][j]);
            else
                ((float *)bufs[i])[j] = (float)w->v[i][j];
        }
        e[ne++] = (reel_st_entry){REEL_ST_ENTRY_HEAD, w->name[i], w->dt[i], w->ndim[i], w->dims[i], bufs[i]};
    }
    char path[512];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    cr_assert_eq(reel_safetensors_save(NULL, path, e, ne), REEL_OK, "%s", reel_ctx_last_error(NULL));
    for (int i = 0; i < w->n; i++)
        free(bufs[i]);
    free(bufs);
    free(e);
    snprintf(path, sizeof path, "%s/config.json", dir);
    char *cfg = mf_config(f, dt);
    FILE *fp = fopen(path, "w");
    cr_assert_not_null(fp);
    fputs(cfg, fp);
    fclose(fp);
    free(cfg);
}

/* ---- a float64 forward pass (transformers' LlamaModel, Qwen2Model, Qwen3Model) --- */

static void rmsnorm(const double *x, const double *w, int n, double eps, double *out)
{
    double ss = 0;
    for (int i = 0; i < n; i++)
        ss += x[i] * x[i];
    double r = 1.0 / sqrt(ss / n + eps);
    for (int i = 0; i < n; i++)
        out[i] = x[i] * r * w[i];
}

/* y[out] = x[in] W^T (+ b), W [out, in] */
static void linear(const double *x, const double *W, const double *b, int in, int out, double *y)
{
    for (int o = 0; o < out; o++) {
        double s = b ? b[o] : 0;
        for (int i = 0; i < in; i++)
            s += x[i] * W[(size_t)o * in + i];
        y[o] = s;
    }
}

/* rotate_half's pairing (i, i + d/2): apply_rotary_pos_emb */
static void rope(double *x, int hd, int pos, const double *inv, double attn)
{
    for (int i = 0; i < hd / 2; i++) {
        double c = cos(pos * inv[i]) * attn, s = sin(pos * inv[i]) * attn;
        double a = x[i], b = x[i + hd / 2];
        x[i] = a * c - b * s;
        x[i + hd / 2] = b * c + a * s;
    }
}

bool mf_layer_moe(const mfam *f, int l)
{
    return f->experts > 0 && l != f->mlp_only && (l + 1) % f->sparse_step == 0 && (!f->ds || l >= f->ds->first_dense);
}

/* transformers' Qwen3MoeSparseMoeBlock / MixtralSparseMoeBlock: the router's
 * logits (rounded to the model's dtype by round_router, as its linear gives
 * them), softmax, the top k (equal scores: the lower expert), renormalized
 * when the config says, each chosen expert's SwiGLU MLP weighted. */
static void moe_mlp(const mfam *f, const mweights *w, int l, const double *x, double *out,
                    double (*round_router)(double))
{
    const int D = f->hidden, E = f->experts, Fe = f->moe_ffn;
    const char *pre = f->mixtral_names ? "block_sparse_moe" : "mlp";
    char n[128];
    double lg[64], p[64], g[256], u[256], y[256];
    cr_assert(E <= 64 && Fe <= 256 && D <= 256);
    snprintf(n, sizeof n, "%s.gate.weight", pre);
    linear(x, lw(w, l, n), NULL, D, E, lg);
    double mx = -INFINITY, sum = 0;
    for (int e = 0; e < E; e++)
        mx = fmax(mx, lg[e] = round_router(lg[e]));
    for (int e = 0; e < E; e++)
        sum += (p[e] = exp(lg[e] - mx));
    int chosen[16];
    double wt[16], wsum = 0;
    for (int j = 0; j < f->topk; j++) {
        int best = -1;
        for (int e = 0; e < E; e++) {
            bool taken = false;
            for (int i = 0; i < j; i++)
                taken |= chosen[i] == e;
            if (!taken && (best < 0 || lg[e] > lg[best]))
                best = e;
        }
        chosen[j] = best;
        wsum += (wt[j] = p[best] / sum);
    }
    for (int i = 0; i < D; i++)
        out[i] = 0;
    for (int j = 0; j < f->topk; j++) {
        const char *const *pn = f->mixtral_names ? (const char *const[]){"w1", "w3", "w2"}
                                                : (const char *const[]){"gate_proj", "up_proj", "down_proj"};
        snprintf(n, sizeof n, "%s.experts.%d.%s.weight", pre, chosen[j], pn[0]);
        linear(x, lw(w, l, n), NULL, D, Fe, g);
        snprintf(n, sizeof n, "%s.experts.%d.%s.weight", pre, chosen[j], pn[1]);
        linear(x, lw(w, l, n), NULL, D, Fe, u);
        for (int i = 0; i < Fe; i++)
            g[i] = g[i] / (1.0 + exp(-g[i])) * u[i];
        snprintf(n, sizeof n, "%s.experts.%d.%s.weight", pre, chosen[j], pn[2]);
        linear(g, lw(w, l, n), NULL, Fe, D, y);
        double c = f->norm_topk ? wt[j] / wsum : wt[j];
        for (int i = 0; i < D; i++)
            out[i] += c * y[i];
    }
}

/* transformers' DeepseekV3MoE: DeepseekV3TopkRouter (logits rounded by
 * round_router, sigmoid scores, choice = score + e_score_correction_bias;
 * a group's score the sum of its two best choices, the topk_group best
 * groups kept (equal: the lower group), the other experts' choices
 * masked_fill'ed to 0.0; the top k by choice, equal choices to the lower
 * expert; weights the chosen scores, not the choices, over their sum +
 * 1e-20 with norm_topk_prob, times routed_scaling_factor), the routed
 * experts' SwiGLU MLPs weighted, plus the shared experts' MLP of
 * n_shared x moe_intermediate_size. */
static void deepseek_moe(const mfam *f, const mweights *w, int l, const double *x, double *out,
                         double (*round_router)(double))
{
    const mfds *ds = f->ds;
    const int D = f->hidden, E = f->experts, Fe = f->moe_ffn, Fs = ds->n_shared * f->moe_ffn;
    const int G = ds->n_group, gs = E / G;
    double sc[64], ch[64], gsum[64], g[256], u[256], y[256];
    bool kept[64] = {false};
    cr_assert(E <= 64 && Fe <= 256 && Fs <= 256 && D <= 256 && f->topk <= 16);
    linear(x, lw(w, l, "mlp.gate.weight"), NULL, D, E, sc);
    const double *bias = lw(w, l, "mlp.gate.e_score_correction_bias");
    for (int e = 0; e < E; e++) {
        sc[e] = 1.0 / (1.0 + exp(-round_router(sc[e])));
        ch[e] = sc[e] + bias[e];
    }
    for (int gi = 0; gi < G; gi++) {
        double a = -INFINITY, b = -INFINITY;
        for (int e = gi * gs; e < (gi + 1) * gs; e++) {
            if (ch[e] > a)
                b = a, a = ch[e];
            else if (ch[e] > b)
                b = ch[e];
        }
        gsum[gi] = a + b;
    }
    for (int r = 0; r < ds->topk_group; r++) {
        int best = -1;
        for (int gi = 0; gi < G; gi++)
            if (!kept[gi] && (best < 0 || gsum[gi] > gsum[best]))
                best = gi;
        kept[best] = true;
    }
    for (int e = 0; e < E; e++)
        if (!kept[e / gs])
            ch[e] = 0.0;
    int chosen[16];
    double wt[16], wsum = 0;
    for (int j = 0; j < f->topk; j++) {
        int best = -1;
        for (int e = 0; e < E; e++) {
            bool taken = false;
            for (int i = 0; i < j; i++)
                taken |= chosen[i] == e;
            if (!taken && (best < 0 || ch[e] > ch[best]))
                best = e;
        }
        chosen[j] = best;
        wsum += (wt[j] = sc[best]);
    }
    char n[128];
    for (int i = 0; i < D; i++)
        out[i] = 0;
    for (int j = 0; j < f->topk; j++) {
        snprintf(n, sizeof n, "mlp.experts.%d.gate_proj.weight", chosen[j]);
        linear(x, lw(w, l, n), NULL, D, Fe, g);
        snprintf(n, sizeof n, "mlp.experts.%d.up_proj.weight", chosen[j]);
        linear(x, lw(w, l, n), NULL, D, Fe, u);
        for (int i = 0; i < Fe; i++)
            g[i] = g[i] / (1.0 + exp(-g[i])) * u[i];
        snprintf(n, sizeof n, "mlp.experts.%d.down_proj.weight", chosen[j]);
        linear(g, lw(w, l, n), NULL, Fe, D, y);
        double c = (f->norm_topk ? wt[j] / (wsum + 1e-20) : wt[j]) * ds->routed_scaling;
        for (int i = 0; i < D; i++)
            out[i] += c * y[i];
    }
    linear(x, lw(w, l, "mlp.shared_experts.gate_proj.weight"), NULL, D, Fs, g);
    linear(x, lw(w, l, "mlp.shared_experts.up_proj.weight"), NULL, D, Fs, u);
    for (int i = 0; i < Fs; i++)
        g[i] = g[i] / (1.0 + exp(-g[i])) * u[i];
    linear(g, lw(w, l, "mlp.shared_experts.down_proj.weight"), NULL, Fs, D, y);
    for (int i = 0; i < D; i++)
        out[i] += y[i];
}

/* DeepSeek's rope of R dims at pos: apply_rotary_pos_emb_interleave (the
 * pairs de-interleaved, x[2i] to i and x[2i + 1] to i + R/2, then
 * rotate_half; the result stays in that order) or apply_rotary_pos_emb. */
static void deepseek_rope(double *x, int R, int pos, const double *inv, double attn, bool interleave)
{
    if (interleave) {
        double t[64];
        cr_assert(R <= 64);
        for (int i = 0; i < R / 2; i++) {
            t[i] = x[2 * i];
            t[i + R / 2] = x[2 * i + 1];
        }
        memcpy(x, t, (size_t)R * sizeof *x);
    }
    rope(x, R, pos, inv, attn);
}

/* transformers' DeepseekV3Model: DeepseekV3Attention (non-absorbed: q from
 * q_b_proj(q_a_layernorm(q_a_proj(x))) or q_proj(x), heads of nope | rope;
 * kv_a_proj_with_mqa(x) = latent | k_rot, each head's k_nope | v from
 * kv_b_proj(kv_a_layernorm(latent)), k_rot shared by the heads; rope on
 * q_rot and k_rot; scaling (nope + rope)^-0.5 times yarn_get_mscale(factor,
 * mscale_all_dim)^2 when rope_scaling has mscale_all_dim; eager causal
 * softmax; o_proj), then DeepseekV3MoE from first_k_dense_replace on, else
 * DeepseekV3MLP. */
static void deepseek_forward(const mfam *f, const mweights *w, const int32_t *tokens, int n, const double *inv,
                             double attn, double (*round_router)(double), double *logits)
{
    const mfds *ds = f->ds;
    const int D = f->hidden, H = f->heads, nope = ds->qk_nope, R = ds->qk_rope, Dq = nope + R, L = ds->kv_lora;
    const int Vd = ds->v_dim, KVB = nope + Vd, F = f->ffn, V = f->vocab, QL = ds->q_lora;
    double scaling = 1.0 / sqrt((double)Dq);
    if (f->rope.type && f->rope.mscale_all_dim != 0) {
        double m = get_mscale(f->rope.factor, f->rope.mscale_all_dim);
        scaling *= m * m;
    }
    double *h = calloc((size_t)n * D, sizeof *h), *x = calloc((size_t)D, sizeof *x);
    double *q = calloc((size_t)n * H * Dq, sizeof *q), *k = calloc((size_t)n * H * Dq, sizeof *k);
    double *v = calloc((size_t)n * H * Vd, sizeof *v), *a = calloc((size_t)H * Vd, sizeof *a);
    double *qa = calloc((size_t)(QL ? QL : 1), sizeof *qa), *kva = calloc((size_t)(L + R), sizeof *kva);
    double *kvb = calloc((size_t)H * KVB, sizeof *kvb), *o = calloc((size_t)D, sizeof *o);
    double *g = calloc((size_t)F, sizeof *g), *u = calloc((size_t)F, sizeof *u), *sc = calloc((size_t)n, sizeof *sc);
    cr_assert(h && x && q && k && v && a && qa && kva && kvb && o && g && u && sc);
    const double *E = find(w, "model.embed_tokens.weight");
    for (int t = 0; t < n; t++)
        memcpy(h + (size_t)t * D, E + (size_t)tokens[t] * D, (size_t)D * sizeof *h);
    for (int l = 0; l < f->layers; l++) {
        for (int t = 0; t < n; t++) {
            double *qt = q + (size_t)t * H * Dq, *kt = k + (size_t)t * H * Dq, *vt = v + (size_t)t * H * Vd;
            rmsnorm(h + (size_t)t * D, lw(w, l, "input_layernorm.weight"), D, f->eps, x);
            if (QL) {
                linear(x, lw(w, l, "self_attn.q_a_proj.weight"), NULL, D, QL, qa);
                rmsnorm(qa, lw(w, l, "self_attn.q_a_layernorm.weight"), QL, f->eps, qa);
                linear(qa, lw(w, l, "self_attn.q_b_proj.weight"), NULL, QL, H * Dq, qt);
            } else {
                linear(x, lw(w, l, "self_attn.q_proj.weight"), NULL, D, H * Dq, qt);
            }
            linear(x, lw(w, l, "self_attn.kv_a_proj_with_mqa.weight"), NULL, D, L + R, kva);
            rmsnorm(kva, lw(w, l, "self_attn.kv_a_layernorm.weight"), L, f->eps, kva);
            linear(kva, lw(w, l, "self_attn.kv_b_proj.weight"), NULL, L, H * KVB, kvb);
            deepseek_rope(kva + L, R, t, inv, attn, ds->rope_interleave);
            for (int hh = 0; hh < H; hh++) {
                deepseek_rope(qt + hh * Dq + nope, R, t, inv, attn, ds->rope_interleave);
                memcpy(kt + hh * Dq, kvb + hh * KVB, (size_t)nope * sizeof *kt);
                memcpy(kt + hh * Dq + nope, kva + L, (size_t)R * sizeof *kt);
                memcpy(vt + hh * Vd, kvb + hh * KVB + nope, (size_t)Vd * sizeof *vt);
            }
        }
        for (int t = 0; t < n; t++) {
            for (int hh = 0; hh < H; hh++) {
                const double *qh = q + (size_t)t * H * Dq + hh * Dq;
                double m = -INFINITY, sum = 0;
                for (int j = 0; j <= t; j++) {
                    double s = 0;
                    for (int i = 0; i < Dq; i++)
                        s += qh[i] * k[(size_t)j * H * Dq + hh * Dq + i];
                    sc[j] = s * scaling;
                    m = fmax(m, sc[j]);
                }
                for (int j = 0; j <= t; j++)
                    sum += (sc[j] = exp(sc[j] - m));
                for (int i = 0; i < Vd; i++) {
                    double s = 0;
                    for (int j = 0; j <= t; j++)
                        s += sc[j] / sum * v[(size_t)j * H * Vd + hh * Vd + i];
                    a[hh * Vd + i] = s;
                }
            }
            linear(a, lw(w, l, "self_attn.o_proj.weight"), NULL, H * Vd, D, o);
            double *ht = h + (size_t)t * D;
            for (int i = 0; i < D; i++)
                ht[i] += o[i];
            rmsnorm(ht, lw(w, l, "post_attention_layernorm.weight"), D, f->eps, x);
            if (mf_layer_moe(f, l)) {
                deepseek_moe(f, w, l, x, o, round_router);
            } else {
                linear(x, lw(w, l, "mlp.gate_proj.weight"), NULL, D, F, g);
                linear(x, lw(w, l, "mlp.up_proj.weight"), NULL, D, F, u);
                for (int i = 0; i < F; i++)
                    g[i] = g[i] / (1.0 + exp(-g[i])) * u[i];
                linear(g, lw(w, l, "mlp.down_proj.weight"), NULL, F, D, o);
            }
            for (int i = 0; i < D; i++)
                ht[i] += o[i];
        }
    }
    for (int t = 0; t < n; t++) {
        rmsnorm(h + (size_t)t * D, find(w, "model.norm.weight"), D, f->eps, x);
        linear(x, find(w, "lm_head.weight"), NULL, D, V, logits + (size_t)t * V);
    }
    free(h), free(x), free(q), free(k), free(v), free(a), free(qa), free(kva), free(kvb), free(o), free(g), free(u);
    free(sc);
}

static double keep(double v) { return v; }
static double to_f32(double v) { return (float)v; }
static double to_bf16_d(double v) { return from_bf16(to_bf16((float)v)); }

void mf_reference(const mfam *f, const mweights *w, const int32_t *tokens, int n, const double *inv, double attn,
                  reel_dtype dt, double *logits)
{
    double (*round_router)(double) = dt == REEL_BF16 ? to_bf16_d : dt == REEL_F32 ? to_f32 : keep;
    if (f->ds) {
        deepseek_forward(f, w, tokens, n, inv, attn, round_router, logits);
        return;
    }
    const int D = f->hidden, H = f->heads, Hk = f->kv_heads, Dh = f->head_dim, F = f->ffn, V = f->vocab;
    const int Q = H * Dh, KV = Hk * Dh;
    double *h = calloc((size_t)n * D, sizeof *h), *x = calloc((size_t)D, sizeof *x);
    double *q = calloc((size_t)n * Q, sizeof *q), *k = calloc((size_t)n * KV, sizeof *k);
    double *v = calloc((size_t)n * KV, sizeof *v), *a = calloc((size_t)Q, sizeof *a), *o = calloc((size_t)D, sizeof *o);
    double *g = calloc((size_t)F, sizeof *g), *u = calloc((size_t)F, sizeof *u), *sc = calloc((size_t)n, sizeof *sc);
    const double *E = find(w, "model.embed_tokens.weight");
    for (int t = 0; t < n; t++)
        memcpy(h + (size_t)t * D, E + (size_t)tokens[t] * D, (size_t)D * sizeof *h);
    for (int l = 0; l < f->layers; l++) {
        for (int t = 0; t < n; t++) {
            rmsnorm(h + (size_t)t * D, lw(w, l, "input_layernorm.weight"), D, f->eps, x);
            linear(x, lw(w, l, "self_attn.q_proj.weight"), f->qkv_bias ? lw(w, l, "self_attn.q_proj.bias") : NULL, D,
                   Q, q + (size_t)t * Q);
            linear(x, lw(w, l, "self_attn.k_proj.weight"), f->qkv_bias ? lw(w, l, "self_attn.k_proj.bias") : NULL, D,
                   KV, k + (size_t)t * KV);
            linear(x, lw(w, l, "self_attn.v_proj.weight"), f->qkv_bias ? lw(w, l, "self_attn.v_proj.bias") : NULL, D,
                   KV, v + (size_t)t * KV);
            for (int hh = 0; hh < H; hh++) {
                double *qh = q + (size_t)t * Q + hh * Dh;
                if (f->qk_norm) /* Qwen3: q_norm over the head, before rope */
                    rmsnorm(qh, lw(w, l, "self_attn.q_norm.weight"), Dh, f->eps, qh);
                rope(qh, Dh, t, inv, attn);
            }
            for (int hh = 0; hh < Hk; hh++) {
                double *kh = k + (size_t)t * KV + hh * Dh;
                if (f->qk_norm)
                    rmsnorm(kh, lw(w, l, "self_attn.k_norm.weight"), Dh, f->eps, kh);
                rope(kh, Dh, t, inv, attn);
            }
        }
        for (int t = 0; t < n; t++) {
            for (int hh = 0; hh < H; hh++) {
                int kvh = hh / (H / Hk);
                const double *qh = q + (size_t)t * Q + hh * Dh;
                double m = -INFINITY, sum = 0;
                for (int j = 0; j <= t; j++) {
                    double s = 0;
                    for (int i = 0; i < Dh; i++)
                        s += qh[i] * k[(size_t)j * KV + kvh * Dh + i];
                    sc[j] = s / sqrt((double)Dh);
                    m = fmax(m, sc[j]);
                }
                for (int j = 0; j <= t; j++)
                    sum += (sc[j] = exp(sc[j] - m));
                for (int i = 0; i < Dh; i++) {
                    double s = 0;
                    for (int j = 0; j <= t; j++)
                        s += sc[j] / sum * v[(size_t)j * KV + kvh * Dh + i];
                    a[hh * Dh + i] = s;
                }
            }
            linear(a, lw(w, l, "self_attn.o_proj.weight"), f->o_bias ? lw(w, l, "self_attn.o_proj.bias") : NULL, Q, D,
                   o);
            double *ht = h + (size_t)t * D;
            for (int i = 0; i < D; i++)
                ht[i] += o[i];
            rmsnorm(ht, lw(w, l, "post_attention_layernorm.weight"), D, f->eps, x);
            if (mf_layer_moe(f, l)) {
                moe_mlp(f, w, l, x, o, round_router);
            } else {
                linear(x, lw(w, l, "mlp.gate_proj.weight"), NULL, D, F, g);
                linear(x, lw(w, l, "mlp.up_proj.weight"), NULL, D, F, u);
                for (int i = 0; i < F; i++)
                    g[i] = g[i] / (1.0 + exp(-g[i])) * u[i];
                linear(g, lw(w, l, "mlp.down_proj.weight"), NULL, F, D, o);
            }
            for (int i = 0; i < D; i++)
                ht[i] += o[i];
        }
    }
    const double *head = f->tied ? E : find(w, "lm_head.weight");
    for (int t = 0; t < n; t++) {
        rmsnorm(h + (size_t)t * D, find(w, "model.norm.weight"), D, f->eps, x);
        linear(x, head, NULL, D, V, logits + (size_t)t * V);
    }
    free(h), free(x), free(q), free(k), free(v), free(a), free(o), free(g), free(u), free(sc);
}

const char *mf_tmpdir(void)
{
    static char d[64];
    snprintf(d, sizeof d, "/tmp/reel-models-XXXXXX");
    cr_assert_not_null(mkdtemp(d));
    return d;
}

void mf_rmdir(const char *dir)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_expect_eq(system(cmd), 0);
}
