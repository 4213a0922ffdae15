/* Host reference kernels: elementwise add and mul (b of a's shape, or a row
 * of a's last dim broadcast over the rest) and silu_and_mul. Element i of
 * the output depends only on element i of a, so out may alias a. */
#include <math.h>

#include "ops/host/host_ops.h"
#include "ops/host/kern.h"

typedef float (*reel_hk_binop)(float a, float b);

static float reel_hk_addf(float a, float b) { return a + b; }
static float reel_hk_mulf(float a, float b) { return a * b; }

static void reel_hk_binary(const reel_launch *l, reel_hk_binop f)
{
    const reel_shape *as = &l->in_shape[0], *bs = &l->in_shape[1];
    reel_dtype ad = as->dtype, bd = bs->dtype, od = l->out_shape[0].dtype;
    int64_t n = reel_hk_numel(as, l->rows);
    int64_t nb = reel_hk_numel(bs, l->rows);
    /* Same element count: b has a's shape. Otherwise b is a broadcast row. */
    if (nb == n) {
        for (int64_t i = 0; i < n; i++)
            reel_store(l->out[0], od, i, f(reel_load(l->in[0], ad, i), reel_load(l->in[1], bd, i)));
        return;
    }
    if (nb <= 0)
        return;
    for (int64_t i = 0; i < n; i++)
        reel_store(l->out[0], od, i, f(reel_load(l->in[0], ad, i), reel_load(l->in[1], bd, i % nb)));
}

void reel_host_add(const void *args)
{
    reel_hk_binary(args, reel_hk_addf);
}

void reel_host_mul(const void *args)
{
    reel_hk_binary(args, reel_hk_mulf);
}

/* silu(a) * b for the two halves of each row; out row t never overlaps the
 * unread part of x (rows are walked in ascending order), so out may alias x. */
void reel_host_silu_and_mul(const void *args)
{
    const reel_launch *l = args;
    const reel_shape *xs = &l->in_shape[0];
    reel_dtype xd = xs->dtype, od = l->out_shape[0].dtype;
    int64_t two_f = reel_shape_last(xs);
    int64_t f = two_f / 2;
    int64_t nrows = reel_hk_numel(xs, l->rows) / (two_f > 0 ? two_f : 1);
    for (int64_t t = 0; t < nrows; t++) {
        for (int64_t i = 0; i < f; i++) {
            float a = reel_load(l->in[0], xd, t * two_f + i);
            float b = reel_load(l->in[0], xd, t * two_f + f + i);
            float s = a / (1.0f + expf(-a));
            reel_store(l->out[0], od, t * f + i, s * b);
        }
    }
}
