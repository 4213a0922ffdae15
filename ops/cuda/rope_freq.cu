/* CUDA kernel: rotary embedding from a table of inverse frequencies
 * (reel_rope_freq, reel_rope_freq_part; host: ops/host/rope_freq.c). In each
 * head, pair i (i < R/2) of the rotated range [o, o + R) is dims
 * (o + i, o + R/2 + i), or (o + 2i, o + 2i + 1) when interleaved, and
 * rotates by pos * inv_freq[i], the cosine and sine times the attention
 * factor; dims outside the range pass through. As on the host the
 * angle, its cosine and sine and their products with the factor are double,
 * rounded to float once, and the rotation is rope.cuh's formula (float products and
 * sums one by one, no fused multiply-add). One thread owns both elements of
 * a pair and reads them before writing, so out may alias x. Honours
 * programmatic dependent launch. */
#include "ops/cuda/common.cuh"
#include "ops/cuda/impls.h"
#include "ops/cuda/rope.cuh"

namespace reel_cu {

/* Work item w of a head: w < half rotates pair w; the rest copy the
 * pass-through dims, those before the range then those after it. 32-bit
 * indices when the tensor fits. */
template <typename T, typename I>
__global__ void rope_freq_kernel(const T *x, const int32_t *pos, const float *inv_freq, T *out, I nrows, I nheads,
                                 I hd, I half, I ro, bool il, double scale, bool pdl)
{
    pdl_start(pdl);
    I per_head = hd - half;
    I n = nrows * nheads * per_head, stride = (I)gridDim.x * blockDim.x;
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        I w = i % per_head, th = i / per_head;
        I t = th / nheads;
        I at = th * hd;
        if (w < half) {
            double ang = (double)pos[t] * (double)inv_freq[w];
            float c = (float)(cos(ang) * scale), s = (float)(sin(ang) * scale);
            I d1 = at + ro + (il ? 2 * w : w), d2 = d1 + (il ? (I)1 : half);
            float x1 = to_f(x[d1]), x2 = to_f(x[d2]);
            out[d1] = from_f<T>(__fsub_rn(__fmul_rn(x1, c), __fmul_rn(x2, s)));
            out[d2] = from_f<T>(__fadd_rn(__fmul_rn(x2, c), __fmul_rn(x1, s)));
        } else {
            I p = w - half, d = at + (p < ro ? p : p + 2 * half);
            out[d] = x[d];
        }
    }
}

template <typename T>
static cudaError_t rope_freq_run(const reel_launch *l, cudaStream_t st, int64_t nrows, int64_t nheads, int64_t hd,
                                 int64_t half, int64_t row)
{
    const int threads = 256;
    int64_t n = nrows * nheads * (hd - half);
    double scale = l->attrs->rope_freq.scale;
    int64_t ro = l->attrs->rope_freq.rot_offset;
    bool il = l->attrs->rope_freq.interleaved;
    const T *x = (const T *)l->in[0];
    const int32_t *pos = (const int32_t *)l->in[1];
    const float *f = (const float *)l->in[2];
    T *o = (T *)l->out[0];
    if (nrows * row <= INT32_MAX)
        return launch(rope_freq_kernel<T, uint32_t>, grid_for(n, threads), threads, 0, st, l->pdl, x, pos, f, o,
                      (uint32_t)nrows, (uint32_t)nheads, (uint32_t)hd, (uint32_t)half, (uint32_t)ro, il, scale);
    return launch(rope_freq_kernel<T, int64_t>, grid_for(n, threads), threads, 0, st, l->pdl, x, pos, f, o, nrows,
                  nheads, hd, half, ro, il, scale);
}

static reel_status rope_freq_launch(reel_backend *be, const reel_launch *l)
{
    const reel_shape *xs = &l->in_shape[0];
    int64_t hd = l->attrs->rope_freq.head_dim, half = l->attrs->rope_freq.rot_dim / 2;
    int64_t row = last_dim(xs);
    if (row <= 0 || hd <= 0)
        return REEL_OK;
    int64_t nrows = lead(xs, l->rows) * row_numel(xs) / row, nheads = row / hd;
    if (nrows * nheads * (hd - half) <= 0)
        return REEL_OK;
    cudaStream_t st = reel_cuda_stream_handle(l->stream);
    cudaError_t e = cudaSuccess;
    REEL_CU_DISPATCH(xs->dtype, e = rope_freq_run<T>(l, st, nrows, nheads, hd, half, row));
    return REEL_CU_LAUNCHED_E(be, "cuda.rope_freq", e);
}

static bool use_rope_freq(REEL_CU_USE_ARGS)
{
    return nin >= 3 && same_float_dtype(in, 1, out, 1) && in[1].dtype == REEL_I32 && in[2].dtype == REEL_F32 &&
           a->rope_freq.head_dim > 0 && a->rope_freq.rot_dim > 0 && a->rope_freq.rot_offset >= 0 &&
           a->rope_freq.rot_dim <= a->rope_freq.head_dim - a->rope_freq.rot_offset;
}

} /* namespace reel_cu */

REEL_CU_IMPL(reel_cu_rope_freq_impl, "cuda.rope_freq", REEL_OP_ROPE_FREQ, 10, true, true, reel_cu::use_rope_freq,
             reel_cu::rope_freq_launch);
