/* CUDA lse_combine, and DCP's lse_rescale and lse_pack: the host
 * references' definitions (ops/host/lse_combine.c). The combine: P partial
 * attention results per (token, head) combined by their log-sum-exp, from
 * two tensors or packed in one: an lse of +inf or NaN counts as -inf (an empty partial);
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
 * all threads hold the same sum. Partial p of (t, hh): outputs at
 * (t * np + p) * ostride + hh * dh of outs, lse at (t * np + p) * lstride +
 * hh of lses (packed: the same buffer past the outputs). */
template <typename TI, typename TO>
__global__ void lse_combine_kernel(const TI *outs, const float *lses, TO *out, float *lse_out, int64_t np,
                                   int64_t h, int64_t dh, int64_t ostride, int64_t lstride)
{
    int64_t t = blockIdx.x, hh = blockIdx.y;
    const float *lrow = lses + t * np * lstride + hh;
    TO *orow = out + (t * h + hh) * dh;
    float mx = -INFINITY;
    for (int64_t p = 0; p < np; p++)
        mx = fmaxf(mx, lse_norm(lrow[p * lstride]));
    if (mx == -INFINITY) {
        for (int64_t d = threadIdx.x; d < dh; d += blockDim.x)
            orow[d] = from_f<TO>(0.0f);
        if (threadIdx.x == 0)
            lse_out[t * h + hh] = -INFINITY;
        return;
    }
    float sum = 0.0f;
    for (int64_t p = 0; p < np; p++)
        sum += expf(lse_norm(lrow[p * lstride]) - mx);
    if (threadIdx.x == 0)
        lse_out[t * h + hh] = mx + logf(sum);
    for (int64_t d = threadIdx.x; d < dh; d += blockDim.x) {
        float acc = 0.0f;
        for (int64_t p = 0; p < np; p++) {
            float w = expf(lse_norm(lrow[p * lstride]) - mx);
            if (w == 0.0f)
                continue;
            acc += w * to_f(outs[(t * np + p) * ostride + hh * dh + d]);
        }
        orow[d] = from_f<TO>(acc / sum);
    }
}

static reel_status lse_combine_launch(reel_backend *be, const reel_launch *l)
{
    const reel_shape *os = &l->in_shape[0];
    int64_t np = os->ndim > 1 ? os->dims[1] : 1, h = l->attrs->lse.num_heads;
    int64_t nrows = lead(os, l->rows), w = last_dim(os);
    if (h <= 0 || nrows <= 0 || np <= 0)
        return REEL_OK;
    cudaStream_t st = reel_cuda_stream_handle(l->stream);
    dim3 grid((unsigned)nrows, (unsigned)h);
    if (l->attrs->lse.packed) { /* float32 partials, outputs then lses, into out_dtype */
        int64_t dh = w / h - 1;
        const float *in = (const float *)l->in[0];
        REEL_CU_DISPATCH(l->out_shape[0].dtype,
                         (lse_combine_kernel<float, T><<<grid, row_threads(dh, 256), 0, st>>>(
                             in, in + h * dh, (T *)l->out[0], (float *)l->out[1], np, h, dh, w, w)));
        return REEL_CU_LAUNCHED(be, "cuda.lse_combine");
    }
    int64_t dh = w / h;
    REEL_CU_DISPATCH(os->dtype, (lse_combine_kernel<T, T><<<grid, row_threads(dh, 256), 0, st>>>(
                                    (const T *)l->in[0], (const float *)l->in[1], (T *)l->out[0],
                                    (float *)l->out[1], np, h, dh, w, h)));
    return REEL_CU_LAUNCHED(be, "cuda.lse_combine");
}

static bool use_lse(REEL_CU_USE_ARGS)
{
    bool fits = a->lse.num_heads > 0 && a->lse.num_heads <= 65535 && in[0].ndim == 3 && in[0].dims[0] <= 0x7fffffffLL &&
                out[1].dtype == REEL_F32;
    if (a->lse.packed)
        return fits && in[0].dtype == REEL_F32 && out[0].dtype == a->lse.out_dtype;
    return fits && nin >= 2 && same_float_dtype(in, 1, out, 1) && in[1].dtype == REEL_F32;
}

/* lse_rescale (ops/host/lse_combine.c): one block per (token, head); every
 * thread computes the max, the sum and this rank's weight over the ranks'
 * lses in rank order (the host's order, the same on every rank), and
 * scales its dims; weight exactly 0 writes 0 (a NaN output of an empty
 * shard does not leak). */
template <typename T>
__global__ void lse_rescale_kernel(const T *x, const float *lses, T *y, float *lse_out, int64_t h, int64_t n,
                                   int64_t r, int64_t dh)
{
    const int64_t t = blockIdx.x, hh = blockIdx.y, hr = h / n;
    const float *row = lses + t * n * h + hh;
    float mx = -INFINITY;
    for (int64_t q = 0; q < n; q++)
        mx = fmaxf(mx, lse_norm(row[q * h]));
    float sum = 0.0f, wr = 0.0f;
    if (mx != -INFINITY)
        for (int64_t q = 0; q < n; q++) {
            float wq = expf(lse_norm(row[q * h]) - mx);
            sum += wq;
            if (q == r)
                wr = wq;
        }
    const int64_t at = (t * h + hh) * dh;
    for (int64_t d = threadIdx.x; d < dh; d += blockDim.x)
        y[at + d] = from_f<T>(wr == 0.0f ? 0.0f : wr * to_f(x[at + d]) / sum);
    if (threadIdx.x == 0 && hh / hr == r)
        lse_out[t * hr + hh % hr] = mx == -INFINITY ? -INFINITY : mx + logf(sum);
}

static reel_status lse_rescale_launch(reel_backend *be, const reel_launch *l)
{
    int64_t h = l->attrs->dcp.num_heads, dh = last_dim(&l->in_shape[0]) / h;
    if (l->rows <= 0)
        return REEL_OK;
    cudaStream_t st = reel_cuda_stream_handle(l->stream);
    dim3 grid((unsigned)l->rows, (unsigned)h);
    REEL_CU_DISPATCH(l->in_shape[0].dtype,
                     (lse_rescale_kernel<T><<<grid, row_threads(dh, 256), 0, st>>>(
                         (const T *)l->in[0], (const float *)l->in[1], (T *)l->out[0], (float *)l->out[1], h,
                         l->attrs->dcp.nranks, l->attrs->dcp.rank, dh)));
    return REEL_CU_LAUNCHED(be, "cuda.lse_rescale");
}

/* lse_pack: one block per (token, destination rank): its heads' outputs as
 * float32, then their lses. */
template <typename T>
__global__ void lse_pack_kernel(const T *x, const float *lse, float *y, int64_t h, int64_t n, int64_t dh)
{
    const int64_t t = blockIdx.x, q = blockIdx.y, hr = h / n, w = hr * dh + hr;
    float *chunk = y + (t * n + q) * w;
    const T *src = x + t * h * dh + q * hr * dh;
    for (int64_t i = threadIdx.x; i < hr * dh; i += blockDim.x)
        chunk[i] = to_f(src[i]);
    for (int64_t i = threadIdx.x; i < hr; i += blockDim.x)
        chunk[hr * dh + i] = lse[t * h + q * hr + i];
}

static reel_status lse_pack_launch(reel_backend *be, const reel_launch *l)
{
    int64_t h = l->attrs->dcp.num_heads, n = l->attrs->dcp.nranks, dh = last_dim(&l->in_shape[0]) / h;
    if (l->rows <= 0)
        return REEL_OK;
    cudaStream_t st = reel_cuda_stream_handle(l->stream);
    dim3 grid((unsigned)l->rows, (unsigned)n);
    REEL_CU_DISPATCH(l->in_shape[0].dtype,
                     (lse_pack_kernel<T><<<grid, row_threads(h / n * dh, 256), 0, st>>>(
                         (const T *)l->in[0], (const float *)l->in[1], (float *)l->out[0], h, n, dh)));
    return REEL_CU_LAUNCHED(be, "cuda.lse_pack");
}

static bool use_dcp(REEL_CU_USE_ARGS)
{
    return nin >= 2 && same_float_dtype(in, 1, out, 0) && in[1].dtype == REEL_F32 && a->dcp.num_heads > 0 &&
           a->dcp.num_heads <= 65535 && a->dcp.nranks > 0 && in[0].dims[0] <= 0x7fffffffLL;
}

} /* namespace reel_cu */

REEL_CU_IMPL(reel_cu_lse_combine_impl, "cuda.lse_combine", REEL_OP_LSE_COMBINE, 10, false, false,
             reel_cu::use_lse, reel_cu::lse_combine_launch);
REEL_CU_IMPL(reel_cu_lse_rescale_impl, "cuda.lse_rescale", REEL_OP_LSE_RESCALE, 10, false, false,
             reel_cu::use_dcp, reel_cu::lse_rescale_launch);
REEL_CU_IMPL(reel_cu_lse_pack_impl, "cuda.lse_pack", REEL_OP_LSE_PACK, 10, false, false, reel_cu::use_dcp,
             reel_cu::lse_pack_launch);
