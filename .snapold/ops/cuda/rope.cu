/* CUDA kernel: neox-style rotary embedding. In each head, dims i and
 * i + rot_dim/2 (i < rot_dim/2) rotate by pos * theta^(-2i/rot_dim); dims
 * from rot_dim on pass through. As on the host, the angle and its sine and
 * cosine are computed in double (float angles lose ~1e-4 rad at positions in
 * the thousands). One thread owns both elements of a pair and reads them
 * before writing, so out may alias x. Honours programmatic dependent launch. */
#include "ops/cuda/common.cuh"
#include "ops/cuda/rope.cuh"
#include "ops/cuda/impls.h"

namespace reel_cu {

/* Work item w of a head: w < half rotates the pair (w, w + half); the rest
 * copy the pass-through dims rot_dim .. head_dim-1. One item per thread
 * (grid_for covers up to 2^28 items), indexed by I: 32 bits whenever the
 * tensor's element count fits, which is every decode step. */
template <typename T, typename I>
__global__ void rope_kernel(const T *x, const int32_t *pos, T *out, I nrows, I nheads, I hd, I half, double theta,
                            bool pdl)
{
    pdl_start(pdl);
    I per_head = hd - half;
    I n = nrows * nheads * per_head, stride = (I)gridDim.x * blockDim.x;
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        I w = i % per_head, th = i / per_head;
        I t = th / nheads;
        I at = th * hd; /* rows are nheads * hd wide */
        rope_item<T, I>(x + at, out + at, w, half, theta, pos[t]);
    }
}

template <typename T>
static cudaError_t rope_run(const reel_launch *l, cudaStream_t st, int64_t nrows, int64_t nheads, int64_t hd,
                            int64_t half, int64_t row)
{
    const int threads = 256;
    int64_t n = nrows * nheads * (hd - half);
    double theta = l->attrs->rope.theta;
    const T *x = (const T *)l->in[0];
    const int32_t *pos = (const int32_t *)l->in[1];
    T *o = (T *)l->out[0];
    if (nrows * row <= INT32_MAX)
        return launch(rope_kernel<T, uint32_t>, grid_for(n, threads), threads, 0, st, l->pdl, x, pos, o,
                      (uint32_t)nrows, (uint32_t)nheads, (uint32_t)hd, (uint32_t)half, theta);
    return launch(rope_kernel<T, int64_t>, grid_for(n, threads), threads, 0, st, l->pdl, x, pos, o, nrows, nheads,
                  hd, half, theta);
}

static reel_status rope_launch(reel_backend *be, const reel_launch *l)
{
    const reel_shape *xs = &l->in_shape[0];
    int64_t hd = l->attrs->rope.head_dim, half = l->attrs->rope.rot_dim / 2;
    int64_t row = last_dim(xs);
    if (row <= 0 || hd <= 0)
        return REEL_OK;
    int64_t nrows = lead(xs, l->rows) * row_numel(xs) / row, nheads = row / hd;
    if (nrows * nheads * (hd - half) <= 0)
        return REEL_OK;
    cudaStream_t st = reel_cuda_stream_handle(l->stream);
    cudaError_t e = cudaSuccess;
    REEL_CU_DISPATCH(xs->dtype, e = rope_run<T>(l, st, nrows, nheads, hd, half, row));
    return REEL_CU_LAUNCHED_E(be, "cuda.rope", e);
}

static bool use_rope(REEL_CU_USE_ARGS)
{
    return nin >= 2 && same_float_dtype(in, 1, out, 1) && in[1].dtype == REEL_I32 && a->rope.head_dim > 0 &&
           a->rope.rot_dim >= 0 && a->rope.rot_dim <= a->rope.head_dim;
}

} /* namespace reel_cu */

REEL_CU_IMPL(reel_cu_rope_impl, "cuda.rope", REEL_OP_ROPE, 10, true, true,
             reel_cu::use_rope, reel_cu::rope_launch);
