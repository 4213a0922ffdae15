/* Host reference kernel: rotary embedding from a table of inverse
 * frequencies (reel_rope_freq, reel_rope_freq_part). In each head, pair i
 * (i < R/2, R = rot_dim) of the rotated range [o, o + R) (o = rot_offset)
 * is dims (o + i, o + R/2 + i), or (o + 2i, o + 2i + 1) when interleaved,
 * and rotates by pos * inv_freq[i], its cosine and sine multiplied by the
 * attention factor `scale`; dims outside the range pass through. As in the
 * rope op (rope.c) the angle, its sine and cosine, and their products with
 * the factor are computed in double and rounded to float once; the rotation
 * is float32. Each pair is read before it is written, so out may alias x. */
#include <math.h>

#include "ops/host/host_ops.h"
#include "ops/host/kern.h"

void reel_host_rope_freq(const void *args)
{
    const reel_launch *l = args;
    const reel_shape *xs = &l->in_shape[0];
    reel_dtype xd = xs->dtype, od = l->out_shape[0].dtype;
    const int32_t *pos = l->in[1];
    const float *inv_freq = l->in[2];
    int64_t hd = l->attrs->rope_freq.head_dim, half = l->attrs->rope_freq.rot_dim / 2;
    int64_t ro = l->attrs->rope_freq.rot_offset;
    bool il = l->attrs->rope_freq.interleaved;
    double scale = l->attrs->rope_freq.scale;
    int64_t row = reel_shape_last(xs);
    if (row <= 0 || hd <= 0)
        return;
    int64_t nrows = reel_hk_numel(xs, l->rows) / row, nheads = row / hd;
    for (int64_t t = 0; t < nrows; t++) {
        for (int64_t h = 0; h < nheads; h++) {
            int64_t at = t * row + h * hd;
            for (int64_t i = 0; i < half; i++) {
                double ang = (double)pos[t] * (double)inv_freq[i];
                float c = (float)(cos(ang) * scale), s = (float)(sin(ang) * scale);
                int64_t d1 = at + ro + (il ? 2 * i : i), d2 = d1 + (il ? 1 : half);
                float x1 = reel_load(l->in[0], xd, d1), x2 = reel_load(l->in[0], xd, d2);
                reel_store(l->out[0], od, d1, x1 * c - x2 * s);
                reel_store(l->out[0], od, d2, x2 * c + x1 * s);
            }
            for (int64_t i = 0; i < hd; i++)
                if (i < ro || i >= ro + 2 * half)
                    reel_store(l->out[0], od, at + i, reel_load(l->in[0], xd, at + i));
        }
    }
}
