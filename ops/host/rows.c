/* Host reference kernels over the last dim of each row: rmsnorm, softmax and
 * argmax. Each row is reduced in float32 in ascending index order (so the
 * result is deterministic) before any output of that row is written, so out
 * may alias x. */
#include <math.h>
#include <string.h>

#include "ops/host/host_ops.h"
#include "ops/host/kern.h"

/* Row t of x ([rows, d] of dtype xd) normalized into out: the one formula
 * of rmsnorm, add_rmsnorm and rmsnorm_heads (ops/host/head_norm.c), so the
 * fused pair rounds as the unfused (kern.h). */
void reel_hk_rms_row(const void *x, reel_dtype xd, const void *w, reel_dtype wd, void *out, reel_dtype od,
                     int64_t t, int64_t d, float eps)
{
    float ss = 0.0f;
    for (int64_t i = 0; i < d; i++) {
        float v = reel_load(x, xd, t * d + i);
        ss += v * v;
    }
    float r = 1.0f / sqrtf(ss / (float)d + eps);
    for (int64_t i = 0; i < d; i++) {
        float v = reel_load(x, xd, t * d + i);
        reel_store(out, od, t * d + i, v * r * reel_load(w, wd, i));
    }
}

void reel_host_rmsnorm(const void *args)
{
    const reel_launch *l = args;
    const reel_shape *xs = &l->in_shape[0];
    int64_t d = reel_shape_last(xs);
    if (d <= 0)
        return;
    int64_t nrows = reel_hk_numel(xs, l->rows) / d;
    for (int64_t t = 0; t < nrows; t++)
        reel_hk_rms_row(l->in[0], xs->dtype, l->in[1], l->in_shape[1].dtype, l->out[0], l->out_shape[0].dtype, t, d,
                        l->attrs->rmsnorm.eps);
}

/* Subtracting the row max keeps exp() in range. A row holding NaN or +inf,
 * or only -inf, has no defined softmax and gives NaN (as torch does). */
void reel_host_softmax(const void *args)
{
    const reel_launch *l = args;
    const reel_shape *xs = &l->in_shape[0];
    reel_dtype xd = xs->dtype, od = l->out_shape[0].dtype;
    int64_t n = reel_shape_last(xs);
    if (n <= 0)
        return;
    int64_t nrows = reel_hk_numel(xs, l->rows) / n;
    for (int64_t t = 0; t < nrows; t++) {
        const int64_t at = t * n;
        float m = -INFINITY;
        for (int64_t i = 0; i < n; i++) {
            float v = reel_load(l->in[0], xd, at + i);
            if (v > m) /* NaN propagates through the sum below */
                m = v;
        }
        float s = 0.0f;
        for (int64_t i = 0; i < n; i++)
            s += expf(reel_load(l->in[0], xd, at + i) - m);
        for (int64_t i = 0; i < n; i++)
            reel_store(l->out[0], od, at + i, expf(reel_load(l->in[0], xd, at + i) - m) / s);
    }
}

/* Lowest index of the row's maximum; NaN never wins; an all-NaN row gives 0. */
void reel_host_argmax(const void *args)
{
    const reel_launch *l = args;
    const reel_shape *xs = &l->in_shape[0];
    reel_dtype xd = xs->dtype;
    int64_t n = reel_shape_last(xs);
    int32_t *out = l->out[0];
    if (n <= 0)
        return;
    int64_t nrows = reel_hk_numel(xs, l->rows) / n;
    for (int64_t t = 0; t < nrows; t++) {
        int64_t best = -1;
        float bv = 0.0f;
        for (int64_t i = 0; i < n; i++) {
            float v = reel_load(l->in[0], xd, t * n + i);
            if (isnan(v))
                continue;
            if (best < 0 || v > bv) {
                best = i;
                bv = v;
            }
        }
        out[t] = best < 0 ? 0 : (int32_t)best;
    }
}

/* add_rmsnorm: sum = a + b stored in the storage dtype, then the rmsnorm of
 * the stored sum (loaded back, so the rounding is the unfused pair's). Row
 * t of the sum is written before it is read: out[0] may alias a. */
void reel_host_add_rmsnorm(const void *args)
{
    const reel_launch *l = args;
    const reel_shape *as = &l->in_shape[0];
    reel_dtype ad = as->dtype, bd = l->in_shape[1].dtype, wd = l->in_shape[2].dtype;
    reel_dtype sd = l->out_shape[0].dtype, od = l->out_shape[1].dtype;
    int64_t d = reel_shape_last(as);
    if (d <= 0)
        return;
    int64_t nrows = reel_hk_numel(as, l->rows) / d;
    for (int64_t t = 0; t < nrows; t++) {
        for (int64_t i = 0; i < d; i++)
            reel_store(l->out[0], sd, t * d + i,
                       reel_load(l->in[0], ad, t * d + i) + reel_load(l->in[1], bd, t * d + i));
        reel_hk_rms_row(l->out[0], sd, l->in[2], wd, l->out[1], od, t, d, l->attrs->rmsnorm.eps);
    }
}

/* view_cols as a copy (where it is not fused into its producer). */
void reel_host_view_cols(const void *args)
{
    const reel_launch *l = args;
    const reel_shape *xs = &l->in_shape[0];
    size_t es = reel_dtype_size(xs->dtype);
    int64_t n = reel_shape_last(xs), c = l->attrs->view.col, w = l->attrs->view.ncols;
    int64_t nrows = n > 0 ? reel_hk_numel(xs, l->rows) / n : 0;
    for (int64_t t = 0; t < nrows; t++)
        memcpy((char *)l->out[0] + (size_t)(t * w) * es, (const char *)l->in[0] + (size_t)(t * n + c) * es,
               (size_t)w * es);
}
