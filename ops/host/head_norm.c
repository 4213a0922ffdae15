/* Host reference kernel: RMSNorm over each head's slice (reel_rmsnorm_heads,
 * Qwen3's q_norm and k_norm). x [T, H * Dh] is H rows of Dh per token, each
 * normalized with the weight [Dh] by rmsnorm's own formula (rows.c), so a
 * head here rounds exactly as an rmsnorm row of Dh would. Rows are read
 * before they are written, so out may alias x. */
#include "ops/host/host_ops.h"
#include "ops/host/kern.h"

void reel_host_rmsnorm_heads(const void *args)
{
    const reel_launch *l = args;
    const reel_shape *xs = &l->in_shape[0];
    int64_t d = l->in_shape[1].dims[0];
    if (d <= 0)
        return;
    int64_t nrows = reel_hk_numel(xs, l->rows) / d;
    for (int64_t t = 0; t < nrows; t++)
        reel_hk_rms_row(l->in[0], xs->dtype, l->in[1], l->in_shape[1].dtype, l->out[0], l->out_shape[0].dtype, t, d,
                        l->attrs->rmsnorm.eps);
}
