/* Host reference kernels of the LSE combine and of DCP's two exchanges.
 *
 * lse_combine: P partial attention results per (token, head) combined by
 * their log-sum-exp. An lse of +inf or NaN is normalized to -inf (an empty
 * partial); with max m over the partials, weight w_p = exp(lse_p - m),
 * out = sum_p w_p out_p / sum_p w_p, lse = m + log(sum w). A partial of
 * weight exactly 0 is skipped, not multiplied, so a NaN in an empty
 * partial's output cannot leak; a row with every partial empty gives
 * (0, -inf) explicitly rather than exp(-inf - -inf) = NaN. Partials come
 * as two tensors (outs, lses) or packed in one float32 tensor, each
 * partial's outputs then its lses (what DCP's all-to-all carries).
 *
 * lse_rescale: this rank's term of the same sum, w_r out_r / sum_q w_q,
 * from every rank's lse (all-gathered), so that a reduce-scatter of the
 * terms over heads gives the combine; and the combined lse of this rank's
 * heads. lse_pack: the packed layout of lse_combine, chunked by the rank
 * whose heads each piece is. */
#include <math.h>

#include "ops/host/host_ops.h"
#include "ops/host/kern.h"

/* Partials whose weights are kept on the stack; more are recomputed. */
enum { REEL_HK_LSE_MAXP = 64 };

static inline float reel_hk_lse_norm(float v)
{
    return (isnan(v) || v == INFINITY) ? -INFINITY : v;
}

/* Where partial p of token t, head hh lives: its outputs at element
 * (t * np + p) * ostride + hh * dh of outs, its lse at element
 * (t * np + p) * lstride + hh of lses (the same buffer, past the outputs,
 * when packed). */
typedef struct reel_hk_lse {
    const reel_launch *l;
    reel_dtype od, xd;
    int64_t np, h, dh, ostride, lstride;
    const float *lses;
} reel_hk_lse;

static float reel_hk_lse_at(const reel_hk_lse *c, int64_t t, int64_t p, int64_t hh)
{
    return reel_hk_lse_norm(c->lses[(t * c->np + p) * c->lstride + hh]);
}

static void reel_hk_lse_head(const reel_hk_lse *c, int64_t t, int64_t hh)
{
    const reel_launch *l = c->l;
    float *lse_out = l->out[1];
    int64_t oat = (t * c->h + hh) * c->dh;
    float mx = -INFINITY;
    for (int64_t p = 0; p < c->np; p++) {
        float v = reel_hk_lse_at(c, t, p, hh);
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
        float wp = expf(reel_hk_lse_at(c, t, p, hh) - mx);
        if (p < REEL_HK_LSE_MAXP)
            w[p] = wp;
        sum += wp;
    }
    for (int64_t d = 0; d < c->dh; d++) {
        float acc = 0.0f;
        for (int64_t p = 0; p < c->np; p++) {
            float wp = p < REEL_HK_LSE_MAXP ? w[p] : expf(reel_hk_lse_at(c, t, p, hh) - mx);
            if (wp == 0.0f)
                continue;
            acc += wp * reel_load(l->in[0], c->xd, (t * c->np + p) * c->ostride + hh * c->dh + d);
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
    int64_t w = reel_shape_last(os);
    if (l->attrs->lse.packed) {
        c.dh = w / c.h - 1;
        c.ostride = c.lstride = w;
        c.lses = (const float *)l->in[0] + c.h * c.dh;
    } else {
        c.dh = w / c.h;
        c.ostride = w;
        c.lstride = c.h;
        c.lses = l->in[1];
    }
    int64_t nrows = reel_shape_lead(os, l->rows);
    for (int64_t t = 0; t < nrows; t++)
        for (int64_t hh = 0; hh < c.h; hh++)
            reel_hk_lse_head(&c, t, hh);
}

void reel_host_lse_rescale(const void *args)
{
    const reel_launch *l = args;
    int64_t h = l->attrs->dcp.num_heads, n = l->attrs->dcp.nranks, r = l->attrs->dcp.rank, hr = h / n;
    int64_t dh = reel_shape_last(&l->in_shape[0]) / h;
    reel_dtype xd = l->in_shape[0].dtype;
    const float *lses = l->in[1];
    float *lse_out = l->out[1];
    for (int64_t t = 0; t < l->rows; t++)
        for (int64_t hh = 0; hh < h; hh++) {
            const float *row = lses + t * n * h + hh; /* rank q's lse at row[q * h] */
            float mx = -INFINITY;
            for (int64_t q = 0; q < n; q++)
                mx = fmaxf(mx, reel_hk_lse_norm(row[q * h]));
            float sum = 0.0f, wr = 0.0f;
            if (mx != -INFINITY)
                for (int64_t q = 0; q < n; q++) {
                    float wq = expf(reel_hk_lse_norm(row[q * h]) - mx);
                    sum += wq;
                    if (q == r)
                        wr = wq;
                }
            int64_t at = (t * h + hh) * dh;
            for (int64_t d = 0; d < dh; d++) /* weight exactly 0: 0, even for a NaN output */
                reel_store(l->out[0], xd, at + d, wr == 0.0f ? 0.0f : wr * reel_load(l->in[0], xd, at + d) / sum);
            if (hh / hr == r)
                lse_out[t * hr + hh % hr] = mx == -INFINITY ? -INFINITY : mx + logf(sum);
        }
}

void reel_host_lse_pack(const void *args)
{
    const reel_launch *l = args;
    int64_t h = l->attrs->dcp.num_heads, n = l->attrs->dcp.nranks, hr = h / n;
    int64_t dh = reel_shape_last(&l->in_shape[0]) / h, w = hr * dh + hr;
    reel_dtype xd = l->in_shape[0].dtype;
    const float *lse = l->in[1];
    float *out = l->out[0];
    for (int64_t t = 0; t < l->rows; t++)
        for (int64_t q = 0; q < n; q++) {
            float *chunk = out + (t * n + q) * w;
            for (int64_t i = 0; i < hr * dh; i++)
                chunk[i] = reel_load(l->in[0], xd, t * h * dh + q * hr * dh + i);
            for (int64_t i = 0; i < hr; i++)
                chunk[hr * dh + i] = lse[t * h + q * hr + i];
        }
}
