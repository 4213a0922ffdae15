/* CUDA kernel: RMSNorm over each head's slice (reel_rmsnorm_heads, Qwen3's
 * q_norm and k_norm; host: ops/host/head_norm.c). x [T, H * Dh] is T * H
 * rows of Dh, a warp each (head dims are 64 to 256: a block per row would
 * idle most of its threads). A lane sums the squares of its elements in
 * order, warp_sum's fixed tree adds the lanes, and out = (x * r) * w as
 * rmsnorm computes it, so the same launch gives the same bits. Each lane
 * writes only elements it read itself, so out may alias x. Honours
 * programmatic dependent launch. */
#include "ops/cuda/common.cuh"
#include "ops/cuda/impls.h"

namespace reel_cu {

constexpr int HN_ROWS = 8; /* rows (warps) a block */

template <typename T>
__global__ void rmsnorm_heads_kernel(const T *x, const T *w, T *out, int64_t nrows, int64_t d, float eps, bool pdl)
{
    pdl_start(pdl);
    const int64_t row = (int64_t)blockIdx.x * HN_ROWS + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (row >= nrows) /* the whole warp: warp_sum's mask stays full */
        return;
    const T *xr = x + row * d;
    T *orow = out + row * d;
    float ss = 0.0f;
    for (int64_t i = lane; i < d; i += 32) {
        float v = to_f(xr[i]);
        ss += v * v;
    }
    ss = warp_sum(ss);
    const float r = 1.0f / sqrtf(ss / (float)d + eps);
    for (int64_t i = lane; i < d; i += 32)
        orow[i] = from_f<T>(to_f(xr[i]) * r * to_f(w[i]));
}

static reel_status rmsnorm_heads_launch(reel_backend *be, const reel_launch *l)
{
    const reel_shape *xs = &l->in_shape[0];
    int64_t d = l->in_shape[1].dims[0];
    int64_t nrows = d > 0 ? lead(xs, l->rows) * row_numel(xs) / d : 0;
    if (nrows <= 0)
        return REEL_OK;
    cudaStream_t st = reel_cuda_stream_handle(l->stream);
    unsigned blocks = (unsigned)((nrows + HN_ROWS - 1) / HN_ROWS);
    cudaError_t e = cudaSuccess;
    REEL_CU_DISPATCH(xs->dtype, e = launch(rmsnorm_heads_kernel<T>, blocks, HN_ROWS * 32, 0, st, l->pdl,
                                           (const T *)l->in[0], (const T *)l->in[1], (T *)l->out[0], nrows, d,
                                           l->attrs->rmsnorm.eps));
    return REEL_CU_LAUNCHED_E(be, "cuda.rmsnorm_heads", e);
}

static bool use_rmsnorm_heads(REEL_CU_USE_ARGS)
{
    return nin >= 2 && same_float_dtype(in, 2, out, 1) && in[1].ndim == 1 && in[1].dims[0] > 0;
}

} /* namespace reel_cu */

REEL_CU_IMPL(reel_cu_rmsnorm_heads_impl, "cuda.rmsnorm_heads", REEL_OP_RMSNORM_HEADS, 10, true, true,
             reel_cu::use_rmsnorm_heads, reel_cu::rmsnorm_heads_launch);
