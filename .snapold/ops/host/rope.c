/* Host reference kernel: neox-style rotary embedding. In each head, dims i
 * and i + rot_dim/2 (i < rot_dim/2) rotate by pos * theta^(-2i/rot_dim);
 * dims from rot_dim on pass through. The angle and its sine and cosine are
 * computed in double: float32 angles lose ~1e-4 rad at positions in the
 * thousands, and the cost is per pair, not per MAC. Each pair is read before
 * it is written, so out may alias x. */
#include <math.h>

#include "ops/host/host_ops.h"
#include "ops/host/kern.h"

void reel_hk_rope_head(const void *x, reel_dtype xd, int64_t xat, void *out, reel_dtype od, int64_t oat, int64_t hd,
                       int64_t half, double theta, int32_t pos)
{
    for (int64_t i = 0; i < half; i++) {
        double ang = (double)pos * pow(theta, -2.0 * (double)i / (double)(2 * half));
        float c = (float)cos(ang), s = (float)sin(ang);
        float x1 = reel_load(x, xd, xat + i), x2 = reel_load(x, xd, xat + half + i);
        reel_store(out, od, oat + i, x1 * c - x2 * s);
        reel_store(out, od, oat + half + i, x2 * c + x1 * s);
    }
    for (int64_t i = 2 * half; i < hd; i++)
        reel_store(out, od, oat + i, reel_load(x, xd, xat + i));
}

void reel_host_rope(const void *args)
{
    const reel_launch *l = args;
    const reel_shape *xs = &l->in_shape[0];
    reel_dtype xd = xs->dtype, od = l->out_shape[0].dtype;
    const int32_t *pos = l->in[1];
    int64_t hd = l->attrs->rope.head_dim, half = l->attrs->rope.rot_dim / 2;
    double theta = l->attrs->rope.theta;
    int64_t row = reel_shape_last(xs);
    if (row <= 0 || hd <= 0)
        return;
    int64_t nrows = reel_hk_numel(xs, l->rows) / row, nheads = row / hd;
    for (int64_t t = 0; t < nrows; t++)
        for (int64_t h = 0; h < nheads; h++)
            reel_hk_rope_head(l->in[0], xd, t * row + h * hd, l->out[0], od, t * row + h * hd, hd, half, theta, pos[t]);
}
