/* Internal (L2): the CUDA backend's one rope formula, shared by the rope
 * op (rope.cu) and paged attention's fused rope (attention.cu), so both
 * give the same bits. Neox style: in a head of hd elements, work item
 * w < half rotates the pair (w, w + half) by pos * theta^(-2w/(2 half)),
 * angle, sine and cosine in double; items from half on copy the
 * pass-through dims 2 half .. hd-1. The pair is read before it is written,
 * so out may alias x. The float products and sums are rounded one by one
 * (no fused multiply-add), as the host backend computes them. */
#ifndef REEL_OPS_CUDA_ROPE_CUH
#define REEL_OPS_CUDA_ROPE_CUH

#include "ops/cuda/common.cuh"

namespace reel_cu {

/* The cosine and sine of pair w's angle at pos: they depend on (pos, w)
 * only, so a kernel rotating many heads of one token computes them once. */
__device__ __forceinline__ double rope_freq(int32_t w, int32_t half, double theta)
{
    return pow(theta, -2.0 * (double)w / (double)(2 * half));
}

__device__ __forceinline__ void rope_cs(int32_t w, int32_t half, double theta, int32_t pos, float *c, float *s)
{
    double ang = (double)pos * rope_freq(w, half, theta);
    *c = (float)cos(ang);
    *s = (float)sin(ang);
}

/* Item w of a head with pair w's cosine c and sine s (unused past half). */
template <typename T, typename I>
__device__ __forceinline__ void rope_apply(const T *x, T *out, I w, I half, float c, float s)
{
    if (w < half) {
        float x1 = to_f(x[w]), x2 = to_f(x[half + w]);
        out[w] = from_f<T>(__fsub_rn(__fmul_rn(x1, c), __fmul_rn(x2, s)));
        out[half + w] = from_f<T>(__fadd_rn(__fmul_rn(x2, c), __fmul_rn(x1, s)));
    } else {
        I d = 2 * half + (w - half);
        out[d] = x[d];
    }
}

template <typename T, typename I>
__device__ __forceinline__ void rope_item(const T *x, T *out, I w, I half, double theta, int32_t pos)
{
    float c = 0.0f, s = 0.0f;
    if (w < half)
        rope_cs((int32_t)w, (int32_t)half, theta, pos, &c, &s);
    rope_apply<T, I>(x, out, w, half, c, s);
}

} /* namespace reel_cu */

#endif
