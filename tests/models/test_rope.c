/* The rope of every scaling type against transformers' formulas
 * (modeling_rope_utils: _compute_default_rope_parameters,
 * _compute_linear_scaling_rope_parameters, _compute_dynamic_ntk_parameters,
 * _compute_yarn_parameters, _compute_llama3_parameters), written out in
 * float64 in tests/models/fixture.c: every inverse frequency and the
 * attention factor, from configs parsed by the library. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tests/models/fixture.h"

/* A Llama config.json of head dim hd with rope_scaling `rope` (JSON text
 * or "null"), rope_theta theta and max_position_embeddings max_pos. */
static reel_model *parse(int hd, double theta, int max_pos, const char *rope)
{
    char json[1024];
    snprintf(json, sizeof json,
             "{\"model_type\": \"llama\", \"hidden_size\": %d, \"num_hidden_layers\": 1, \"num_attention_heads\": 4, "
             "\"num_key_value_heads\": 1, \"intermediate_size\": 64, \"vocab_size\": 64, \"rope_theta\": %.17g, "
             "\"max_position_embeddings\": %d, \"rope_scaling\": %s}",
             4 * hd, theta, max_pos, rope);
    reel_model *m = NULL;
    cr_assert_eq(reel_model_parse(NULL, json, 0, &m), REEL_OK, "%s: %s", rope, reel_ctx_last_error(NULL));
    return m;
}

static void check(const char *what, int hd, double theta, int max_pos, const char *rope, const tf_rope *rp,
                  reel_rope_type type)
{
    reel_model *m = parse(hd, theta, max_pos, rope);
    double got[256], want[256], attn, want_attn;
    cr_assert_eq(reel_model_rope(m, got, hd / 2, &attn), REEL_OK);
    tf_inv_freq(rp, hd, theta, max_pos, want, &want_attn);
    for (int i = 0; i < hd / 2; i++)
        cr_expect(fabs(got[i] - want[i]) <= 1e-13 * fabs(want[i]), "%s: inv_freq[%d] = %.17g, transformers %.17g",
                  what, i, got[i], want[i]);
    cr_expect(fabs(attn - want_attn) <= 1e-14, "%s: attention factor %.17g, transformers %.17g", what, attn,
              want_attn);
    reel_model_info in = REEL_MODEL_INFO_INIT;
    cr_assert_eq(reel_model_info_get(m, &in), REEL_OK);
    cr_expect_eq(in.rope_type, (int)type, "%s", what);
    cr_expect(in.rope_factor == (rp->type ? rp->factor : 1.0) && in.rope_attention_factor == attn, "%s", what);
    /* the factor alone, and a wrong count refused */
    double a2 = 0;
    cr_expect_eq(reel_model_rope(m, NULL, 0, &a2), REEL_OK);
    cr_expect_eq(a2, attn);
    cr_expect_eq(reel_model_rope(m, got, hd / 2 + 1, NULL), REEL_E_INVALID_ARG);
    reel_model_close(m);
}

#define R(...) ((tf_rope){__VA_ARGS__})

Test(models_rope, default_rope_is_theta_to_the_minus_2i_over_d)
{
    check("default", 128, 500000.0, 8192, "null", &R(NULL, 1, 0, 0, 0, -1, 0, 0, 0, 0, -1), REEL_ROPE_DEFAULT);
    check("rope_type default", 64, 10000.0, 2048, "{\"rope_type\": \"default\"}",
          &R(NULL, 1, 0, 0, 0, -1, 0, 0, 0, 0, -1), REEL_ROPE_DEFAULT);
}

Test(models_rope, llama3_matches_transformers_for_llama_3_1_and_3_2)
{
    check("llama3 (3.1 8B)", 128, 500000.0, 131072,
          "{\"factor\": 8.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, "
          "\"original_max_position_embeddings\": 8192, \"rope_type\": \"llama3\"}",
          &R("llama3", 8.0, 1.0, 4.0, 8192, -1, 0, 0, 0, 0, -1), REEL_ROPE_LLAMA3);
    check("llama3 (3.2 1B)", 64, 500000.0, 131072,
          "{\"factor\": 32.0, \"high_freq_factor\": 4.0, \"low_freq_factor\": 1.0, "
          "\"original_max_position_embeddings\": 8192, \"rope_type\": \"llama3\"}",
          &R("llama3", 32.0, 1.0, 4.0, 8192, -1, 0, 0, 0, 0, -1), REEL_ROPE_LLAMA3);
}

Test(models_rope, the_llama3_table_has_all_three_bands)
{
    /* 3.1's parameters: high frequencies kept, low ones divided by the factor, the middle smoothed */
    reel_model *m = parse(128, 500000.0, 131072,
                          "{\"factor\": 8.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, "
                          "\"original_max_position_embeddings\": 8192, \"rope_type\": \"llama3\"}");
    double got[64], attn;
    cr_assert_eq(reel_model_rope(m, got, 64, &attn), REEL_OK);
    int kept = 0, divided = 0, smoothed = 0;
    for (int i = 0; i < 64; i++) {
        double f = 1.0 / pow(500000.0, (2.0 * i) / 128), wl = 2 * M_PI / f;
        if (wl < 8192.0 / 4)
            kept += got[i] == f;
        else if (wl > 8192.0)
            divided += fabs(got[i] - f / 8) <= 1e-15 * f;
        else
            smoothed += got[i] < f && got[i] > f / 8;
    }
    cr_expect(kept > 0 && divided > 0 && smoothed > 0, "bands: %d kept, %d divided, %d smoothed", kept, divided,
              smoothed);
    cr_expect_eq(kept + divided + smoothed, 64);
    reel_model_close(m);
}

Test(models_rope, linear_divides_the_default_frequencies)
{
    check("linear", 128, 10000.0, 16384, "{\"type\": \"linear\", \"factor\": 4.0}",
          &R("linear", 4.0, 0, 0, 0, -1, 0, 0, 0, 0, -1), REEL_ROPE_LINEAR);
}

Test(models_rope, dynamic_is_the_default_up_to_the_original_length)
{
    check("dynamic", 128, 10000.0, 4096, "{\"rope_type\": \"dynamic\", \"factor\": 2.0}",
          &R("dynamic", 2.0, 0, 0, 0, -1, 0, 0, 0, 0, -1), REEL_ROPE_DYNAMIC);
    reel_model *m = parse(128, 10000.0, 4096, "{\"rope_type\": \"dynamic\", \"factor\": 2.0}");
    reel_model_info in = REEL_MODEL_INFO_INIT;
    cr_assert_eq(reel_model_info_get(m, &in), REEL_OK);
    cr_expect_eq(in.max_context, 4096, "dynamic rope limits plans to max_position_embeddings");
    reel_model_close(m);
}

Test(models_rope, yarn_matches_transformers_with_each_of_its_keys)
{
    check("yarn (Qwen3's long context)", 128, 1e6, 131072,
          "{\"rope_type\": \"yarn\", \"factor\": 4.0, \"original_max_position_embeddings\": 32768}",
          &R("yarn", 4.0, 0, 0, 32768, -1, 0, 0, 0, 0, -1), REEL_ROPE_YARN);
    check("yarn without original length", 64, 10000.0, 4096, "{\"rope_type\": \"yarn\", \"factor\": 8.0}",
          &R("yarn", 8.0, 0, 0, 0, -1, 0, 0, 0, 0, -1), REEL_ROPE_YARN);
    check("yarn with mscale and mscale_all_dim (DeepSeek's)", 64, 10000.0, 163840,
          "{\"rope_type\": \"yarn\", \"factor\": 40.0, \"mscale\": 0.707, \"mscale_all_dim\": 1.0, "
          "\"original_max_position_embeddings\": 4096, \"beta_fast\": 32, \"beta_slow\": 1}",
          &R("yarn", 40.0, 0, 0, 4096, -1, 32, 1, 0.707, 1.0, -1), REEL_ROPE_YARN);
    check("yarn with attention_factor", 128, 1e6, 65536,
          "{\"rope_type\": \"yarn\", \"factor\": 2.0, \"attention_factor\": 1.25, \"beta_fast\": 16.0, "
          "\"beta_slow\": 2.0}",
          &R("yarn", 2.0, 0, 0, 0, 1.25, 16, 2, 0, 0, -1), REEL_ROPE_YARN);
    check("yarn without truncation", 128, 150000.0, 131072,
          "{\"rope_type\": \"yarn\", \"factor\": 32.0, \"original_max_position_embeddings\": 4096, "
          "\"truncate\": false, \"beta_fast\": 32.0, \"beta_slow\": 1.0}",
          &R("yarn", 32.0, 0, 0, 4096, -1, 32, 1, 0, 0, 0), REEL_ROPE_YARN);
    check("yarn of factor 1 (no attention factor)", 64, 10000.0, 4096, "{\"rope_type\": \"yarn\", \"factor\": 1.0}",
          &R("yarn", 1.0, 0, 0, 0, -1, 0, 0, 0, 0, -1), REEL_ROPE_YARN);
}

Test(models_rope, rope_parameters_of_newer_configs_carry_rope_theta)
{
    char json[512];
    snprintf(json, sizeof json,
             "{\"model_type\": \"llama\", \"hidden_size\": 512, \"num_hidden_layers\": 1, \"num_attention_heads\": 4, "
             "\"intermediate_size\": 64, \"vocab_size\": 64, \"max_position_embeddings\": 131072, "
             "\"rope_parameters\": {\"rope_type\": \"llama3\", \"rope_theta\": 500000.0, \"factor\": 8.0, "
             "\"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192}}");
    reel_model *m = NULL;
    cr_assert_eq(reel_model_parse(NULL, json, 0, &m), REEL_OK, "%s", reel_ctx_last_error(NULL));
    double got[64], want[64], a, wa;
    cr_assert_eq(reel_model_rope(m, got, 64, &a), REEL_OK);
    tf_inv_freq(&R("llama3", 8.0, 1.0, 4.0, 8192, -1, 0, 0, 0, 0, -1), 128, 500000.0, 131072, want, &wa);
    for (int i = 0; i < 64; i++)
        cr_expect(fabs(got[i] - want[i]) <= 1e-13 * want[i], "inv_freq[%d]", i);
    reel_model_close(m);
}
