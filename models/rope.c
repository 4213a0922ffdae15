/* L7 models/: the rope's inverse frequencies and attention factor, as
 * transformers' modeling_rope_utils computes them (ROPE_INIT_FUNCTIONS:
 * _compute_default_rope_parameters, _compute_linear_scaling_rope_parameters,
 * _compute_dynamic_ntk_parameters, _compute_yarn_parameters,
 * _compute_llama3_parameters), in double where transformers computes in
 * float32; dim is the head dim (partial_rotary_factor 1, the only one built).
 * docs/decisions.md, "Rope scaling as a table". */
#include <math.h>

#include "models/model.h"

bool model_rope_uses_table(const model_cfg *c)
{
    /* MLA rotates a range of each head, which only reel_rope_freq_part does */
    return c->mla || c->rope == REEL_ROPE_LINEAR || c->rope == REEL_ROPE_YARN || c->rope == REEL_ROPE_LLAMA3;
}

/* yarn's get_mscale */
static double yarn_mscale(double scale, double mscale)
{
    return scale <= 1.0 ? 1.0 : 0.1 * mscale * log(scale) + 1.0;
}

/* yarn's find_correction_dim: the dimension whose wavelength makes
 * num_rotations turns over max_pos positions. */
static double yarn_correction_dim(double num_rotations, int dim, double base, double max_pos)
{
    return ((double)dim * log(max_pos / (num_rotations * 2.0 * M_PI))) / (2.0 * log(base));
}

static void yarn(const model_cfg *c, double *inv, double *attn)
{
    const int dim = c->head_dim, half = dim / 2;
    const double base = c->theta, factor = c->factor;
    /* newer transformers: factor as given; original_max_position_embeddings
     * (or max_position_embeddings) for the correction range */
    const double orig = c->orig_max_pos > 0 ? (double)c->orig_max_pos : (double)c->max_pos;
    if (c->attention_factor >= 0)
        *attn = c->attention_factor;
    else if (c->mscale != 0 && c->mscale_all_dim != 0)
        *attn = yarn_mscale(factor, c->mscale) / yarn_mscale(factor, c->mscale_all_dim);
    else
        *attn = yarn_mscale(factor, 1.0);
    double low = yarn_correction_dim(c->beta_fast, dim, base, orig);
    double high = yarn_correction_dim(c->beta_slow, dim, base, orig);
    if (c->truncate) {
        low = floor(low);
        high = ceil(high);
    }
    if (low < 0)
        low = 0;
    if (high > dim - 1)
        high = dim - 1;
    if (low == high)
        high += 0.001; /* linear_ramp_factor's guard against a singularity */
    for (int i = 0; i < half; i++) {
        double pos_freq = pow(base, (double)(2 * i) / (double)dim);
        double extrapolation = 1.0 / pos_freq, interpolation = 1.0 / (factor * pos_freq);
        double ramp = ((double)i - low) / (high - low);
        ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
        double extrapolation_factor = 1.0 - ramp;
        inv[i] = interpolation * (1.0 - extrapolation_factor) + extrapolation * extrapolation_factor;
    }
}

static void llama3(const model_cfg *c, double *inv)
{
    const int half = c->head_dim / 2;
    const double factor = c->factor, lo = c->low_freq_factor, hi = c->high_freq_factor;
    const double old_len = (double)c->orig_max_pos;
    const double low_freq_wavelen = old_len / lo, high_freq_wavelen = old_len / hi;
    for (int i = 0; i < half; i++) {
        double f = inv[i], wavelen = 2.0 * M_PI / f;
        double llama = wavelen > low_freq_wavelen ? f / factor : f;
        if (!(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen)) {
            double smooth = (old_len / wavelen - lo) / (hi - lo);
            llama = (1.0 - smooth) * llama / factor + smooth * llama;
        }
        inv[i] = llama;
    }
}

void model_rope_inv_freq(const model_cfg *c, double *inv, double *attention_factor)
{
    const int dim = c->head_dim, half = dim / 2;
    *attention_factor = 1.0;
    /* _compute_default_rope_parameters: 1 / base^(2i / dim) */
    for (int i = 0; i < half; i++)
        inv[i] = 1.0 / pow(c->theta, (double)(2 * i) / (double)dim);
    switch (c->rope) {
    case REEL_ROPE_LINEAR:
        for (int i = 0; i < half; i++)
            inv[i] /= c->factor;
        break;
    case REEL_ROPE_DYNAMIC:
        /* up to the original length (the plan's limit) the base is rope_theta:
         * base * ((factor * L / max) - (factor - 1))^(dim / (dim - 2)) at L = max */
        break;
    case REEL_ROPE_YARN:
        yarn(c, inv, attention_factor);
        break;
    case REEL_ROPE_LLAMA3:
        llama3(c, inv);
        break;
    default:
        break;
    }
}
