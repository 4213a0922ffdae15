/* Host reference kernel: combines P partial attention results per (token,
 * head) by their log-sum-exp. An lse of +inf or NaN is normalized to -inf
 * (an empty partial); with max m over the partials, weight w_p =
 * exp(lse_p - m), out = sum_p w_p out_p / sum_p w_p, lse = m + log(sum w).
 * A partial of weight exactly 0 is skipped, not multiplied, so a NaN in an
 * empty partial's output cannot leak; a row with every partial empty gives
 * (0, -inf) explicitly rather than exp(-inf - -inf) = NaN. */
#include <math.h>

#include "ops/host/host_ops.h"
#include "ops/host/kern.h"

/* Partials whose weights are kept on the stack; more are recomputed. */
enum { REEL_HK_LSE_MAXP = 64 };

static inline float reel_hk_lse_norm(float v)
{
    return (isnan(v) || v == INFINITY) ? -INFINITY : v;
}

typedef struct reel_hk_lse {
    const reel_launch *l;
    reel_dtype od, xd;
    int64_t np, h, dh;
} reel_hk_lse;

static float reel_hk_lse_weight(const reel_hk_lse *c, int64_t t, int64_t p, int64_t hh, float mx)
{
    const float *lses = c->l->in[1];
    return expf(reel_hk_lse_norm(lses[(t * c->np + p) * c->h + hh]) - mx);
}

static void reel_hk_lse_head(const reel_hk_lse *c, int64_t t, int64_t hh)
{
    const reel_launch *l = c->l;
    const float *lses = l->in[1];
    float *lse_out = l->out[1];
    int64_t oat = (t * c->h + hh) * c->dh;
    float mx = -INFINITY;
    for (int64_t p = 0; p < c->np; p++) {
        float v = reel_hk_lse_norm(lses[(t * c->np + p) * c->h + hh]);
        if (v > mx)
            mx = v;
    }
    if (mx == -INFINITY) {
        reel_hk_zero(l->out[0], c->od, oat, c->dh);
        lse_out[t * c->h + hh] = -INFINITY;
        return;
    }
    float w[REEL_HK_LSE_MAXP];
    float sum = 0.0f;
    for (int64_t p = 0; p < c->np; p++) {
        float wp = reel_hk_lse_weight(c, t, p, hh, mx);
        if (p < REEL_HK_LSE_MAXP)
            w[p] = wp;
        sum += wp;
    }
    for (int64_t d = 0; d < c->dh; d++) {
        float acc = 0.0f;
        for (int64_t p = 0; p < c->np; p++) {
            float wp = p < REEL_HK_LSE_MAXP ? w[p] : reel_hk_lse_weight(c, t, p, hh, mx);
            if (wp == 0.0f)
                continue;
            acc += wp * reel_load(l->in[0], c->xd, ((t * c->np + p) * c->h + hh) * c->dh + d);
        }
        reel_store(l->out[0], c->od, oat + d, acc / sum);
    }
    lse_out[t * c->h + hh] = mx + logf(sum);
}

void reel_host_lse_combine(const void *args)
{
    const reel_launch *l = args;
    const reel_shape *os = &l->in_shape[0];
    reel_hk_lse c = {
        .l = l, .xd = os->dtype, .od = l->out_shape[0].dtype,
        .np = os->ndim > 1 ? os->dims[1] : 1, .h = l->attrs->lse.num_heads,
    };
    if (c.h <= 0)
        return;
    c.dh = reel_shape_last(os) / c.h;
    int64_t nrows = reel_shape_lead(os, l->rows);
    for (int64_t t = 0; t < nrows; t++)
        for (int64_t hh = 0; hh < c.h; hh++)
            reel_hk_lse_head(&c, t, hh);
}
