/* CUDA lse_combine: P partial attention results per (token, head) combined
 * by their log-sum-exp, the host reference's identity (ops/host/
 * lse_combine.c): an lse of +inf or NaN counts as -inf (an empty partial);
 * with m the max, w_p = exp(lse_p - m), out = sum_p w_p out_p / sum_p w_p,
 * lse = m + log(sum w); a partial of weight exactly 0 is skipped, not
 * multiplied, so a NaN in an empty partial's output cannot leak; a row with
 * every partial empty gives (0, -inf) explicitly.
 * One block per (token, head); each thread owns dims. */
#include "ops/cuda/common.cuh"
#include "ops/cuda/impls.h"

namespace reel_cu {

__device__ __forceinline__ float lse_norm(float v) { return (isnan(v) || v == INFINITY) ? -INFINITY : v; }

/* Every thread computes the max and the weights itself (the lses of one
 * (token, head) are a few broadcast loads), so no shared memory and no
 * barrier; each sums the weights in partial order, as the host does, so
 * all threads hold the same sum. */
template <typename T>
__global__ void lse_combine_kernel(const T *outs, const float *lses, T *out, float *lse_out, int64_t np,
                                   int64_t h, int64_t dh)
{
    int64_t t = blockIdx.x, hh = blockIdx.y;
    const float *lrow = lses + t * np * h + hh;
    T *orow = out + (t * h + hh) * dh;
    float mx = -INFINITY;
    for (int64_t p = 0; p < np; p++)
        mx = fmaxf(mx, lse_norm(lrow[p * h]));
    if (mx == -INFINITY) {
        for (int64_t d = threadIdx.x; d < dh; d += blockDim.x)
            orow[d] = from_f<T>(0.0f);
        if (threadIdx.x == 0)
            lse_out[t * h + hh] = -INFINITY;
        return;
    }
    float sum = 0.0f;
    for (int64_t p = 0; p < np; p++)
        sum += expf(lse_norm(lrow[p * h]) - mx);
    if (threadIdx.x == 0)
        lse_out[t * h + hh] = mx + logf(sum);
    for (int64_t d = threadIdx.x; d < dh; d += blockDim.x) {
        float acc = 0.0f;
        for (int64_t p = 0; p < np; p++) {
            float w = expf(lse_norm(lrow[p * h]) - mx);
            if (w == 0.0f)
                continue;
            acc += w * to_f(outs[((t * np + p) * h + hh) * dh + d]);
        }
        orow[d] = from_f<T>(acc / sum);
    }
}

static reel_status lse_combine_launch(reel_backend *be, const reel_launch *l)
{
    const reel_shape *os = &l->in_shape[0];
    int64_t np = os->ndim > 1 ? os->dims[1] : 1, h = l->attrs->lse.num_heads;
    int64_t nrows = lead(os, l->rows);
    if (h <= 0 || nrows <= 0 || np <= 0)
        return REEL_OK;
    int64_t dh = last_dim(os) / h;
    cudaStream_t st = reel_cuda_stream_handle(l->stream);
    dim3 grid((unsigned)nrows, (unsigned)h);
    int threads = row_threads(dh, 256);
    REEL_CU_DISPATCH(os->dtype, (lse_combine_kernel<T><<<grid, threads, 0, st>>>(
                                    (const T *)l->in[0], (const float *)l->in[1], (T *)l->out[0],
                                    (float *)l->out[1], np, h, dh)));
    return REEL_CU_LAUNCHED(be, "cuda.lse_combine");
}

static bool use_lse(REEL_CU_USE_ARGS)
{
    return nin >= 2 && same_float_dtype(in, 1, out, 1) && in[1].dtype == REEL_F32 && out[1].dtype == REEL_F32 &&
           a->lse.num_heads > 0 && a->lse.num_heads <= 65535 && in[0].ndim == 3 &&
           in[0].dims[0] <= 0x7fffffffLL;
}

} /* namespace reel_cu */

REEL_CU_IMPL(reel_cu_lse_combine_impl, "cuda.lse_combine", REEL_OP_LSE_COMBINE, 10, false, false,
             reel_cu::use_lse, reel_cu::lse_combine_launch);
