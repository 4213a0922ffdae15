/* Every refusal of the models layer: each key or value it does not build
 * gives REEL_E_UNSUPPORTED (a malformed one REEL_E_INVALID_ARG) with the key
 * named in the message, never a model that ignores it; the limits a config
 * puts on a plan's max_context (sliding windows, dynamic rope); and a
 * checkpoint that disagrees with its config (a tensor missing, of another
 * dtype or shape, or one the model would leave unread). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/models/fixture.h"

/* A valid config of model_type with `extra` (",\"key\": value" pairs)
 * added; a base key that extra names is left out (the parser refuses
 * duplicate keys). sizes: the size keys instead of the base ones. */
static char *config_with(const char *model_type, const char *extra, const char *sizes)
{
    static const char *const base[][2] = {
        {"hidden_size", "64"}, {"num_hidden_layers", "2"}, {"num_attention_heads", "4"},
        {"num_key_value_heads", "2"}, {"intermediate_size", "96"}, {"vocab_size", "128"},
        {"hidden_act", "\"silu\""}, {"rms_norm_eps", "1e-05"}, {"torch_dtype", "\"bfloat16\""},
    };
    char *s = malloc(2048);
    int n = snprintf(s, 2048, "{\"model_type\": \"%s\"%s%s", model_type, extra, sizes ? sizes : "");
    for (size_t i = sizes ? 6 : 0; i < sizeof base / sizeof base[0]; i++) {
        char key[48];
        snprintf(key, sizeof key, "\"%s\"", base[i][0]);
        if (!strstr(extra, key))
            n += snprintf(s + n, 2048 - (size_t)n, ", %s: %s", key, base[i][1]);
    }
    snprintf(s + n, 2048 - (size_t)n, "}");
    return s;
}

static reel_ctx *ctx;

static void setup(void)
{
    reel_ctx_opts o = REEL_CTX_OPTS_INIT;
    o.backend = REEL_BACKEND_HOST;
    cr_assert_eq(reel_ctx_create(&o, &ctx), REEL_OK);
}

static void teardown(void) { reel_ctx_destroy(ctx); }

/* Parsing model_type + extra fails with st and a message naming key. */
static void refused(const char *model_type, const char *extra, reel_status st, const char *key)
{
    char *json = config_with(model_type, extra, NULL);
    reel_model *m = (reel_model *)1;
    reel_status got = reel_model_parse(ctx, json, 0, &m);
    cr_expect_eq(got, st, "%s %s: %s, want %s (%s)", model_type, extra, reel_status_str(got), reel_status_str(st),
                 reel_ctx_last_error(ctx));
    cr_expect_null(m, "%s: *out must be NULL on failure", extra);
    cr_expect(strstr(reel_ctx_last_error(ctx), key) != NULL, "%s %s: the message does not name \"%s\": %s",
              model_type, extra, key, reel_ctx_last_error(ctx));
    free(json);
}

static reel_model *accepted(const char *model_type, const char *extra)
{
    char *json = config_with(model_type, extra, NULL);
    reel_model *m = NULL;
    cr_assert_eq(reel_model_parse(ctx, json, 0, &m), REEL_OK, "%s %s: %s", model_type, extra,
                 reel_ctx_last_error(ctx));
    free(json);
    return m;
}

Test(models_refusals, keys_the_layer_does_not_build_are_refused_by_name, .init = setup, .fini = teardown)
{
    refused("gemma", "", REEL_E_UNSUPPORTED, "model_type");
    refused("llama", ", \"hidden_act\": \"gelu\"", REEL_E_UNSUPPORTED, "hidden_act");
    refused("qwen2", ", \"hidden_act\": \"gelu_pytorch_tanh\"", REEL_E_UNSUPPORTED, "hidden_act");
    refused("llama", ", \"mlp_bias\": true", REEL_E_UNSUPPORTED, "mlp_bias");
    refused("llama", ", \"partial_rotary_factor\": 0.5", REEL_E_UNSUPPORTED, "partial_rotary_factor");
    refused("mistral", ", \"quantization_config\": {\"quant_method\": \"awq\", \"bits\": 4}", REEL_E_UNSUPPORTED,
            "quantization_config");
    refused("qwen3", ", \"torch_dtype\": \"float8_e4m3fn\"", REEL_E_UNSUPPORTED, "torch_dtype");
}

Test(models_refusals, rope_types_and_keys_the_layer_does_not_build_are_refused_by_name, .init = setup,
     .fini = teardown)
{
    refused("llama", ", \"rope_scaling\": {\"rope_type\": \"longrope\", \"short_factor\": [1], \"long_factor\": [1]}",
            REEL_E_UNSUPPORTED, "rope_scaling.rope_type");
    refused("llama", ", \"rope_scaling\": {\"type\": \"su\", \"factor\": 2.0}", REEL_E_UNSUPPORTED,
            "rope_scaling.type");
    refused("llama", ", \"rope_scaling\": {\"rope_type\": \"ntk\", \"factor\": 2.0}", REEL_E_UNSUPPORTED,
            "rope_scaling.rope_type");
    /* a key a rope type does not read is not ignored */
    refused("llama", ", \"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": 2.0, \"beta_fast\": 32}",
            REEL_E_UNSUPPORTED, "rope_scaling.beta_fast");
    refused("llama", ", \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 1.0, "
            "\"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192, \"mscale\": 1.0}",
            REEL_E_UNSUPPORTED, "rope_scaling.mscale");
    refused("qwen3", ", \"rope_parameters\": {\"rope_type\": \"yarn\", \"factor\": 4.0, \"short_factor\": [1]}",
            REEL_E_UNSUPPORTED, "rope_parameters.short_factor");
    refused("llama", ", \"rope_parameters\": {\"rope_type\": \"default\", \"partial_rotary_factor\": 0.25}",
            REEL_E_UNSUPPORTED, "rope_parameters.partial_rotary_factor");
}

Test(models_refusals, malformed_values_are_invalid_arguments_naming_the_key, .init = setup, .fini = teardown)
{
    refused("llama", ", \"rope_scaling\": {\"rope_type\": \"llama3\"}", REEL_E_INVALID_ARG, "rope_scaling.factor");
    refused("llama", ", \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0, \"high_freq_factor\": 4.0, "
            "\"original_max_position_embeddings\": 8192}", REEL_E_INVALID_ARG, "rope_scaling.low_freq_factor");
    refused("llama", ", \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 4.0, "
            "\"high_freq_factor\": 1.0, \"original_max_position_embeddings\": 8192}", REEL_E_INVALID_ARG,
            "high_freq_factor");
    refused("llama", ", \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 1.0, "
            "\"high_freq_factor\": 4.0}", REEL_E_INVALID_ARG, "rope_scaling.original_max_position_embeddings");
    refused("llama", ", \"rope_scaling\": {\"type\": \"linear\"}", REEL_E_INVALID_ARG, "rope_scaling.factor");
    refused("llama", ", \"rope_scaling\": {\"rope_type\": \"dynamic\", \"factor\": -2}", REEL_E_INVALID_ARG,
            "rope_scaling.factor");
    refused("llama", ", \"rope_scaling\": \"llama3\"", REEL_E_INVALID_ARG, "rope_scaling");
    refused("llama", ", \"rope_theta\": \"big\"", REEL_E_INVALID_ARG, "rope_theta");
    refused("llama", ", \"tie_word_embeddings\": 1", REEL_E_INVALID_ARG, "tie_word_embeddings");
    refused("llama", ", \"attention_bias\": \"no\"", REEL_E_INVALID_ARG, "attention_bias");
    refused("qwen2", ", \"use_sliding_window\": \"yes\"", REEL_E_INVALID_ARG, "use_sliding_window");
    refused("qwen3", ", \"head_dim\": 15", REEL_E_INVALID_ARG, "head_dim");
    refused("llama", ", \"num_key_value_heads\": 3", REEL_E_INVALID_ARG, "num_key_value_heads");
    char *json = config_with("llama", "", ", \"num_hidden_layers\": 2, \"num_attention_heads\": 4, "
                                          "\"intermediate_size\": 96, \"vocab_size\": 128");
    reel_model *m = NULL;
    cr_expect_eq(reel_model_parse(ctx, json, 0, &m), REEL_E_INVALID_ARG);
    cr_expect(strstr(reel_ctx_last_error(ctx), "hidden_size") != NULL, "%s", reel_ctx_last_error(ctx));
    free(json);
    cr_expect_eq(reel_model_parse(ctx, "{\"model_type\": \"llama\", \"model_type\": \"qwen2\"}", 0, &m),
                 REEL_E_INVALID_ARG, "duplicate keys");
    cr_expect_eq(reel_model_parse(ctx, "[1, 2]", 0, &m), REEL_E_INVALID_ARG);
}

/* Builds m with max_context ctx_len: the status, and the key in the message. */
static void build(reel_model *m, int ctx_len, reel_status want, const char *key)
{
    reel_graph *g = NULL;
    cr_assert_eq(reel_graph_create(ctx, &g), REEL_OK);
    reel_model_opts o = REEL_MODEL_OPTS_INIT;
    o.max_context = ctx_len;
    o.max_seqs = 1;
    reel_status st = reel_model_build(m, g, &o);
    cr_expect_eq(st, want, "max_context %d: %s (%s)", ctx_len, reel_status_str(st), reel_ctx_last_error(ctx));
    if (key)
        cr_expect(strstr(reel_ctx_last_error(ctx), key) != NULL, "max_context %d: the message does not name %s: %s",
                  ctx_len, key, reel_ctx_last_error(ctx));
    cr_expect_eq(reel_graph_status(g), want, "the graph keeps the refusal");
    reel_graph_destroy(g);
}

Test(models_refusals, a_sliding_window_that_is_on_limits_max_context_naming_its_key, .init = setup,
     .fini = teardown)
{
    /* Mistral v0.1: a window of 4096; MistralConfig's default when the key is absent is 4096 too */
    reel_model *m = accepted("mistral", ", \"sliding_window\": 4096");
    build(m, 4096, REEL_OK, NULL);
    build(m, 4097, REEL_E_UNSUPPORTED, "sliding_window");
    reel_model_close(m);
    m = accepted("mistral", "");
    build(m, 8192, REEL_E_UNSUPPORTED, "sliding_window");
    reel_model_close(m);
    m = accepted("mistral", ", \"sliding_window\": null"); /* v0.2, v0.3: off */
    build(m, 32768, REEL_OK, NULL);
    reel_model_close(m);
    /* Qwen2/3: on only with use_sliding_window, for the layers from max_window_layers on */
    m = accepted("qwen2", ", \"use_sliding_window\": true, \"sliding_window\": 1024, \"max_window_layers\": 1");
    build(m, 1024, REEL_OK, NULL);
    build(m, 2048, REEL_E_UNSUPPORTED, "use_sliding_window");
    reel_model_close(m);
    m = accepted("qwen2", ", \"use_sliding_window\": true, \"sliding_window\": 1024, \"max_window_layers\": 2");
    build(m, 8192, REEL_OK, NULL); /* no layer slides */
    reel_model_close(m);
    m = accepted("qwen3", ", \"use_sliding_window\": false, \"sliding_window\": 1024, \"max_window_layers\": 0");
    build(m, 8192, REEL_OK, NULL);
    reel_model_close(m);
    m = accepted("qwen3", ", \"use_sliding_window\": true, \"sliding_window\": 512, "
                          "\"layer_types\": [\"full_attention\", \"sliding_attention\"]");
    build(m, 1024, REEL_E_UNSUPPORTED, "use_sliding_window");
    reel_model_close(m);
    refused("qwen3", ", \"use_sliding_window\": true, \"layer_types\": [\"full_attention\", \"chunked_attention\"]",
            REEL_E_UNSUPPORTED, "layer_types");
    refused("qwen3", ", \"layer_types\": [\"full_attention\"]", REEL_E_INVALID_ARG, "layer_types");
}

Test(models_refusals, dynamic_rope_limits_max_context_to_its_original_length, .init = setup, .fini = teardown)
{
    reel_model *m = accepted("llama", ", \"max_position_embeddings\": 2048, \"rope_scaling\": "
                                      "{\"rope_type\": \"dynamic\", \"factor\": 2.0}");
    build(m, 2048, REEL_OK, NULL);
    build(m, 2049, REEL_E_UNSUPPORTED, "rope_scaling.rope_type");
    reel_model_info in = REEL_MODEL_INFO_INIT;
    cr_assert_eq(reel_model_info_get(m, &in), REEL_OK);
    cr_expect_eq(in.max_context, 2048);
    reel_model_close(m);
    /* the other scaled ropes put no limit */
    m = accepted("llama", ", \"max_position_embeddings\": 2048, \"rope_scaling\": "
                          "{\"rope_type\": \"linear\", \"factor\": 2.0}");
    build(m, 65536, REEL_OK, NULL);
    reel_model_close(m);
}

Test(models_refusals, options_out_of_range_are_refused_naming_them, .init = setup, .fini = teardown)
{
    reel_model *m = accepted("llama", "");
    reel_graph *g = NULL;
    reel_model_opts o = REEL_MODEL_OPTS_INIT;
    o.stage = 2;
    o.num_stages = 2;
    cr_assert_eq(reel_graph_create(ctx, &g), REEL_OK);
    cr_expect_eq(reel_model_build(m, g, &o), REEL_E_INVALID_ARG);
    cr_expect(strstr(reel_ctx_last_error(ctx), "num_stages") != NULL, "%s", reel_ctx_last_error(ctx));
    reel_graph_destroy(g);
    o = (reel_model_opts)REEL_MODEL_OPTS_INIT;
    o.num_stages = 3; /* more stages than the 2 layers */
    cr_assert_eq(reel_graph_create(ctx, &g), REEL_OK);
    cr_expect_eq(reel_model_build(m, g, &o), REEL_E_INVALID_ARG);
    reel_graph_destroy(g);
    /* DCP outside the validated subset (issue 46) */
    struct { int size, rank, il, stages; reel_status want; const char *named; } dcp[] = {
        {3, 0, 1, 1, REEL_E_UNSUPPORTED, "dcp_size 3"},
        {2, 2, 1, 1, REEL_E_INVALID_ARG, "dcp_rank 2"},
        {2, 0, 3, 1, REEL_E_UNSUPPORTED, "dcp_interleave (3)"},
        {2, 0, 1, 2, REEL_E_UNSUPPORTED, "one stage"},
    };
    for (size_t i = 0; i < sizeof dcp / sizeof dcp[0]; i++) {
        o = (reel_model_opts)REEL_MODEL_OPTS_INIT;
        o.dcp_size = dcp[i].size, o.dcp_rank = dcp[i].rank, o.dcp_interleave = dcp[i].il;
        o.num_stages = dcp[i].stages;
        cr_assert_eq(reel_graph_create(ctx, &g), REEL_OK);
        cr_expect_eq(reel_model_build(m, g, &o), dcp[i].want, "dcp case %zu: %s", i, reel_ctx_last_error(ctx));
        cr_expect(strstr(reel_ctx_last_error(ctx), dcp[i].named) != NULL, "%s", reel_ctx_last_error(ctx));
        reel_graph_destroy(g);
    }
    o = (reel_model_opts)REEL_MODEL_OPTS_INIT;
    o.cp_size = 2, o.dcp_size = 2;
    cr_assert_eq(reel_graph_create(ctx, &g), REEL_OK);
    cr_expect_eq(reel_model_build(m, g, &o), REEL_E_UNSUPPORTED);
    cr_expect(strstr(reel_ctx_last_error(ctx), "CP over 2 ranks with DCP") != NULL, "%s", reel_ctx_last_error(ctx));
    reel_graph_destroy(g);
    o.cp_size = 5, o.dcp_size = 1;
    cr_assert_eq(reel_graph_create(ctx, &g), REEL_OK);
    cr_expect_eq(reel_model_build(m, g, &o), REEL_E_UNSUPPORTED);
    cr_expect(strstr(reel_ctx_last_error(ctx), "cp_size 5") != NULL, "%s", reel_ctx_last_error(ctx));
    reel_graph_destroy(g);
    reel_model_opts bad = {0}; /* not initialised */
    cr_assert_eq(reel_graph_create(ctx, &g), REEL_OK);
    cr_expect_eq(reel_model_build(m, g, &bad), REEL_E_VERSION);
    cr_expect(strstr(reel_ctx_last_error(ctx), "REEL_MODEL_OPTS_INIT") != NULL, "%s", reel_ctx_last_error(ctx));
    reel_graph_destroy(g);
    reel_model_close(m);
}

/* A checkpoint of family f with a tensor added or left out: open's status
 * and the tensor named. */
static void bad_checkpoint(const char *extra, const char *drop, reel_status want, const char *named)
{
    const mfam *f = &mf_families[3]; /* Qwen2.5: biases */
    const char *d = mf_tmpdir();
    char dir[96];
    snprintf(dir, sizeof dir, "%s", d);
    mweights w;
    mf_write(f, REEL_BF16, 7, dir, &w, extra, drop);
    reel_model *m = (reel_model *)1;
    reel_status st = reel_model_open(ctx, dir, &m);
    cr_expect_eq(st, want, "extra %s, drop %s: %s (%s)", extra, drop, reel_status_str(st), reel_ctx_last_error(ctx));
    cr_expect_null(m);
    cr_expect(strstr(reel_ctx_last_error(ctx), named) != NULL, "the message does not name %s: %s", named,
              reel_ctx_last_error(ctx));
    mf_weights_free(&w);
    mf_rmdir(dir);
}

Test(models_refusals, a_checkpoint_that_disagrees_with_its_config_is_refused_naming_the_tensor, .init = setup,
     .fini = teardown)
{
    bad_checkpoint("model.layers.0.mlp.up_proj.bias", NULL, REEL_E_UNSUPPORTED, "model.layers.0.mlp.up_proj.bias");
    bad_checkpoint("model.layers.0.self_attn.q_norm.weight", NULL, REEL_E_UNSUPPORTED, "q_norm");
    bad_checkpoint("model.layers.2.input_layernorm.weight", NULL, REEL_E_UNSUPPORTED, "model.layers.2.");
    bad_checkpoint(NULL, "model.layers.1.self_attn.k_proj.bias", REEL_E_NOT_FOUND, "model.layers.1.self_attn.k_proj.bias");
    /* allowed beside it: a stored lm head of tied embeddings, rotary buffers */
    const mfam *f = &mf_families[3];
    const char *d = mf_tmpdir();
    char dir[96];
    snprintf(dir, sizeof dir, "%s", d);
    mweights w;
    mf_write(f, REEL_BF16, 7, dir, &w, "model.layers.0.self_attn.rotary_emb.inv_freq", NULL);
    reel_model *m = NULL;
    cr_expect_eq(reel_model_open(ctx, dir, &m), REEL_OK, "%s", reel_ctx_last_error(ctx));
    reel_model_close(m);
    mf_weights_free(&w);
    mf_rmdir(dir);
}

Test(models_refusals, a_tensor_of_another_dtype_or_shape_is_refused_naming_it, .init = setup, .fini = teardown)
{
    const mfam *f = &mf_families[4]; /* Qwen3: its config says bfloat16 */
    const char *d = mf_tmpdir();
    char dir[96], path[160];
    snprintf(dir, sizeof dir, "%s", d);
    mweights w;
    mf_write(f, REEL_F32, 9, dir, &w, NULL, NULL);
    char *cfg = mf_config(f, REEL_BF16); /* the config says bf16, the file holds f32 */
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *fp = fopen(path, "w");
    fputs(cfg, fp);
    fclose(fp);
    free(cfg);
    reel_model *m = NULL;
    cr_expect_eq(reel_model_open(ctx, dir, &m), REEL_E_DTYPE, "%s", reel_ctx_last_error(ctx));
    cr_expect(strstr(reel_ctx_last_error(ctx), "model.embed_tokens.weight") != NULL, "%s", reel_ctx_last_error(ctx));
    /* a head_dim that disagrees with the q projection: a shape */
    cfg = mf_config(f, REEL_F32);
    char *at = strstr(cfg, "\"head_dim\": 32");
    cr_assert_not_null(at);
    memcpy(at, "\"head_dim\": 16", 14);
    fp = fopen(path, "w");
    fputs(cfg, fp);
    fclose(fp);
    free(cfg);
    cr_expect_eq(reel_model_open(ctx, dir, &m), REEL_E_SHAPE, "%s", reel_ctx_last_error(ctx));
    cr_expect(strstr(reel_ctx_last_error(ctx), "q_proj.weight") != NULL, "%s", reel_ctx_last_error(ctx));
    mf_weights_free(&w);
    mf_rmdir(dir);
}

Test(models_refusals, a_directory_without_config_or_weights_is_not_found, .init = setup, .fini = teardown)
{
    const char *d = mf_tmpdir();
    char dir[96], path[160];
    snprintf(dir, sizeof dir, "%s", d);
    reel_model *m = NULL;
    cr_expect_eq(reel_model_open(ctx, dir, &m), REEL_E_NOT_FOUND, "%s", reel_ctx_last_error(ctx));
    cr_expect(strstr(reel_ctx_last_error(ctx), "config.json") != NULL, "%s", reel_ctx_last_error(ctx));
    char *cfg = mf_config(&mf_families[0], REEL_BF16);
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *fp = fopen(path, "w");
    fputs(cfg, fp);
    fclose(fp);
    free(cfg);
    cr_expect_eq(reel_model_open(ctx, dir, &m), REEL_E_NOT_FOUND, "%s", reel_ctx_last_error(ctx));
    cr_expect(strstr(reel_ctx_last_error(ctx), "model.safetensors") != NULL, "%s", reel_ctx_last_error(ctx));
    mf_rmdir(dir);
}

/* The experts' keys: out of what the MoE kernels hold, or inconsistent,
 * refused by name; model types of other MoE families refused as such. */
Test(models_refusals, expert_keys_outside_the_kernels_are_refused_by_name, .init = setup, .fini = teardown)
{
    refused("qwen3_moe", ", \"num_experts\": 600", REEL_E_INVALID_ARG, "num_experts");
    refused("qwen3_moe", ", \"num_experts\": 8, \"num_experts_per_tok\": 9", REEL_E_INVALID_ARG,
            "num_experts_per_tok");
    refused("qwen3_moe", ", \"num_experts_per_tok\": 17", REEL_E_INVALID_ARG, "num_experts_per_tok");
    refused("qwen3_moe", ", \"mlp_only_layers\": [2]", REEL_E_INVALID_ARG, "mlp_only_layers");
    refused("qwen3_moe", ", \"mlp_only_layers\": 1", REEL_E_INVALID_ARG, "mlp_only_layers");
    refused("qwen3_moe", ", \"decoder_sparse_step\": 0", REEL_E_INVALID_ARG, "decoder_sparse_step");
    refused("qwen3_moe", ", \"moe_intermediate_size\": 0", REEL_E_INVALID_ARG, "moe_intermediate_size");
    refused("mixtral", ", \"num_local_experts\": 513", REEL_E_INVALID_ARG, "num_local_experts");
    refused("mixtral", ", \"num_local_experts\": 2, \"num_experts_per_tok\": 3", REEL_E_INVALID_ARG,
            "num_experts_per_tok");
    refused("deepseek_v2", "", REEL_E_UNSUPPORTED, "model_type");
    refused("qwen2_moe", "", REEL_E_UNSUPPORTED, "model_type");
    /* num_experts 0: transformers builds every layer dense */
    reel_model *m = accepted("qwen3_moe", ", \"num_experts\": 0");
    reel_model_info in = REEL_MODEL_INFO_INIT;
    cr_assert_eq(reel_model_info_get(m, &in), REEL_OK);
    cr_expect_eq(in.moe_layers, 0);
    cr_expect_eq(in.active_param_bytes, in.param_bytes);
    reel_model_close(m);
    /* decoder_sparse_step 2: layers 1, 3, ... have experts */
    m = accepted("qwen3_moe", ", \"num_experts\": 4, \"num_experts_per_tok\": 2, \"decoder_sparse_step\": 2");
    cr_assert_eq(reel_model_info_get(m, &in), REEL_OK);
    cr_expect_eq(in.moe_layers, 1);
    cr_expect_eq(in.experts, 4);
    reel_model_close(m);
}

/* DeepSeek V3's keys at values the layer does not build (the original
 * checkpoints' scoring_func, topk_method and moe_layer_freq; attention
 * biases; a head_dim other than the rope's) refused by name, malformed
 * ones invalid; DCP and CP over its latent attention refused naming the
 * option, pipeline stages built. */
Test(models_refusals, deepseek_v3_keys_and_options_it_does_not_build_are_refused_by_name, .init = setup,
     .fini = teardown)
{
    refused("deepseek_v3", ", \"scoring_func\": \"softmax\"", REEL_E_UNSUPPORTED, "scoring_func");
    refused("kimi_k2", ", \"scoring_func\": \"softmax\"", REEL_E_UNSUPPORTED, "scoring_func");
    refused("deepseek_v3", ", \"topk_method\": \"greedy\"", REEL_E_UNSUPPORTED, "topk_method");
    refused("deepseek_v3", ", \"topk_method\": \"group_limited_greedy\"", REEL_E_UNSUPPORTED, "topk_method");
    refused("deepseek_v3", ", \"moe_layer_freq\": 2", REEL_E_UNSUPPORTED, "moe_layer_freq");
    refused("deepseek_v3", ", \"attention_bias\": true", REEL_E_UNSUPPORTED, "attention_bias");
    refused("deepseek_v3", ", \"head_dim\": 32", REEL_E_UNSUPPORTED, "head_dim"); /* qk_rope_head_dim 64 */
    refused("deepseek_v3", ", \"qk_rope_head_dim\": 16, \"head_dim\": 128", REEL_E_UNSUPPORTED, "head_dim");
    refused("deepseek_v3", ", \"scoring_func\": 1", REEL_E_INVALID_ARG, "scoring_func");
    refused("deepseek_v3", ", \"qk_rope_head_dim\": 7", REEL_E_INVALID_ARG, "qk_rope_head_dim");
    refused("deepseek_v3", ", \"kv_lora_rank\": 0", REEL_E_INVALID_ARG, "kv_lora_rank");
    refused("deepseek_v3", ", \"n_routed_experts\": 16, \"n_group\": 3", REEL_E_INVALID_ARG, "n_group");
    refused("deepseek_v3", ", \"n_routed_experts\": 16, \"n_group\": 4, \"topk_group\": 5", REEL_E_INVALID_ARG,
            "topk_group");
    refused("deepseek_v3", ", \"n_routed_experts\": 4, \"num_experts_per_tok\": 5", REEL_E_INVALID_ARG,
            "num_experts_per_tok");
    /* what the refusals leave: the values transformers builds */
    reel_model *m = accepted("deepseek_v3", ", \"scoring_func\": \"sigmoid\", \"topk_method\": \"noaux_tc\", "
                                            "\"moe_layer_freq\": 1, \"attention_bias\": false, \"head_dim\": 64, "
                                            "\"first_k_dense_replace\": 1");
    struct { int dcp, cp, stages; reel_status want; const char *named; } o[] = {
        {2, 1, 1, REEL_OK, NULL}, /* DCP over MLA builds (reel_dcp_mla_attention) */
        {1, 2, 1, REEL_E_UNSUPPORTED, "cp_size 2"},
        {1, 1, 2, REEL_OK, NULL},
    };
    for (size_t i = 0; i < sizeof o / sizeof o[0]; i++) {
        reel_model_opts mo = REEL_MODEL_OPTS_INIT;
        mo.max_context = 64;
        mo.max_seqs = 1;
        mo.dcp_size = o[i].dcp, mo.cp_size = o[i].cp, mo.num_stages = o[i].stages;
        reel_graph *g = NULL;
        cr_assert_eq(reel_graph_create(ctx, &g), REEL_OK);
        reel_status st = reel_model_build(m, g, &mo);
        cr_expect_eq(st, o[i].want, "case %zu: %s (%s)", i, reel_status_str(st), reel_ctx_last_error(ctx));
        if (o[i].named)
            cr_expect(strstr(reel_ctx_last_error(ctx), o[i].named) != NULL, "case %zu: the message does not name "
                      "%s: %s", i, o[i].named, reel_ctx_last_error(ctx));
        reel_graph_destroy(g);
    }
    reel_model_close(m);
}
