/* CUDA kernels: add and mul (b of a's shape, or a row of a's last dim
 * broadcast), silu_and_mul, embedding. Element i of an output depends only
 * on element i of its input (add, mul: out may alias a). 16-byte loads and
 * stores where pointers and widths allow; these ops are bandwidth-bound.
 * All honour programmatic dependent launch (pdl_wait before any access). */
#include "ops/cuda/common.cuh"
#include "ops/cuda/impls.h"

namespace reel_cu {

struct add_op {
    __device__ __forceinline__ float operator()(float a, float b) const { return a + b; }
};
struct mul_op {
    __device__ __forceinline__ float operator()(float a, float b) const { return a * b; }
};

/* nb == n: b has a's shape; else b is a row of nb elements repeated. */
template <typename T, typename F>
__global__ void binary_kernel(const T *a, const T *b, T *out, int64_t n, int64_t nb, F f, bool pdl)
{
    pdl_wait(pdl);
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        out[i] = from_f<T>(f(to_f(a[i]), to_f(b[nb == n ? i : i % nb])));
    pdl_trigger(pdl);
}

/* The same over packs of 16 bytes: n and nb are multiples of the pack. */
template <typename T, typename F>
__global__ void binary_kernel_vec(const pack<T> *a, const pack<T> *b, pack<T> *out, int64_t npk, int64_t nbpk,
                                  F f, bool pdl)
{
    pdl_wait(pdl);
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < npk; i += stride) {
        pack<T> x = a[i], y = b[nbpk == npk ? i : i % nbpk], r;
#pragma unroll
        for (int j = 0; j < pack<T>::n; j++)
            r.v[j] = from_f<T>(f(to_f(x.v[j]), to_f(y.v[j])));
        out[i] = r;
    }
    pdl_trigger(pdl);
}

template <typename T, typename F>
static cudaError_t binary_launch(const reel_launch *l, cudaStream_t st, int64_t n, int64_t nb, F f)
{
    const int threads = 256;
    const int pk = pack<T>::n;
    bool vec = aligned16(l->in[0]) && aligned16(l->in[1]) && aligned16(l->out[0]) && n % pk == 0 && nb % pk == 0;
    if (vec)
        return launch(binary_kernel_vec<T, F>, grid_for(n / pk, threads), threads, 0, st, l->pdl,
                      (const pack<T> *)l->in[0], (const pack<T> *)l->in[1], (pack<T> *)l->out[0], n / pk,
                      nb / pk, f);
    return launch(binary_kernel<T, F>, grid_for(n, threads), threads, 0, st, l->pdl, (const T *)l->in[0],
                  (const T *)l->in[1], (T *)l->out[0], n, nb, f);
}

template <typename F> static reel_status binary(reel_backend *be, const reel_launch *l, F f, const char *name)
{
    int64_t n = lead(&l->in_shape[0], l->rows) * row_numel(&l->in_shape[0]);
    int64_t nb = lead(&l->in_shape[1], l->rows) * row_numel(&l->in_shape[1]);
    if (n <= 0 || nb <= 0)
        return REEL_OK;
    cudaStream_t st = reel_cuda_stream_handle(l->stream);
    cudaError_t e = cudaSuccess;
    REEL_CU_DISPATCH(l->in_shape[0].dtype, e = binary_launch<T>(l, st, n, nb, f));
    return REEL_CU_LAUNCHED_E(be, name, e);
}

static reel_status add_launch(reel_backend *be, const reel_launch *l)
{
    return binary(be, l, add_op(), "cuda.add");
}

static reel_status mul_launch(reel_backend *be, const reel_launch *l)
{
    return binary(be, l, mul_op(), "cuda.mul");
}

static bool use_binary(REEL_CU_USE_ARGS) { return nin >= 2 && same_float_dtype(in, 2, out, 1); }

/* silu(x[t, i]) * x[t, F + i], the host's formula: a / (1 + exp(-a)) * b. */
template <typename T>
__global__ void silu_and_mul_kernel(const T *x, T *out, int64_t rows, int64_t f, bool pdl)
{
    pdl_wait(pdl);
    int64_t n = rows * f, stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        int64_t t = i / f, c = i - t * f;
        float a = to_f(x[t * 2 * f + c]), b = to_f(x[t * 2 * f + f + c]);
        out[i] = from_f<T>(a / (1.0f + expf(-a)) * b);
    }
    pdl_trigger(pdl);
}

template <typename T>
__global__ void silu_and_mul_kernel_vec(const pack<T> *x, pack<T> *out, int64_t rows, int64_t fpk,
                                        bool pdl)
{
    pdl_wait(pdl);
    int64_t n = rows * fpk, stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        int64_t t = i / fpk, c = i - t * fpk;
        pack<T> ga = x[t * 2 * fpk + c], up = x[t * 2 * fpk + fpk + c], r;
#pragma unroll
        for (int j = 0; j < pack<T>::n; j++) {
            float a = to_f(ga.v[j]), b = to_f(up.v[j]);
            r.v[j] = from_f<T>(a / (1.0f + expf(-a)) * b);
        }
        out[i] = r;
    }
    pdl_trigger(pdl);
}

template <typename T>
static cudaError_t silu_and_mul_run(const reel_launch *l, cudaStream_t st, int64_t rows, int64_t f)
{
    const int threads = 256;
    const int pk = pack<T>::n;
    if (aligned16(l->in[0]) && aligned16(l->out[0]) && f % pk == 0)
        return launch(silu_and_mul_kernel_vec<T>, grid_for(rows * f / pk, threads), threads, 0, st, l->pdl,
                      (const pack<T> *)l->in[0], (pack<T> *)l->out[0], rows, f / pk);
    return launch(silu_and_mul_kernel<T>, grid_for(rows * f, threads), threads, 0, st, l->pdl,
                  (const T *)l->in[0], (T *)l->out[0], rows, f);
}

static reel_status silu_and_mul_launch(reel_backend *be, const reel_launch *l)
{
    const reel_shape *xs = &l->in_shape[0];
    int64_t two_f = last_dim(xs), f = two_f / 2;
    int64_t rows = two_f > 0 ? lead(xs, l->rows) * row_numel(xs) / two_f : 0;
    if (rows <= 0 || f <= 0)
        return REEL_OK;
    cudaStream_t st = reel_cuda_stream_handle(l->stream);
    cudaError_t e = cudaSuccess;
    REEL_CU_DISPATCH(xs->dtype, e = silu_and_mul_run<T>(l, st, rows, f));
    return REEL_CU_LAUNCHED_E(be, "cuda.silu_and_mul", e);
}

static bool use_unary(REEL_CU_USE_ARGS) { return nin >= 1 && same_float_dtype(in, 1, out, 1); }

/* One block per token: the row of the table, copied bit for bit as words W
 * (the table and output share a dtype), or zeros for an id outside [0, V). */
template <typename W>
__global__ void embedding_kernel(const W *table, const int32_t *ids, W *out, int64_t v, int64_t words,
                                 bool pdl)
{
    pdl_wait(pdl);
    int64_t t = blockIdx.x;
    int64_t id = ids[t];
    bool ok = id >= 0 && id < v;
    W *o = out + t * words;
    const W *src = table + (ok ? id : 0) * words;
    for (int64_t i = threadIdx.x; i < words; i += blockDim.x) {
        if (ok) {
            o[i] = src[i];
        } else {
            W z;
            memset(&z, 0, sizeof z);
            o[i] = z;
        }
    }
    pdl_trigger(pdl);
}

static reel_status embedding_launch(reel_backend *be, const reel_launch *l)
{
    const reel_shape *ts = &l->in_shape[0];
    int64_t v = lead(ts, l->rows), d = row_numel(ts);
    int64_t n = lead(&l->in_shape[1], l->rows);
    size_t row_bytes = (size_t)d * reel_dtype_size(ts->dtype);
    if (n <= 0 || row_bytes == 0)
        return REEL_OK;
    cudaStream_t st = reel_cuda_stream_handle(l->stream);
    const int32_t *ids = (const int32_t *)l->in[1];
    bool a16 = aligned16(l->in[0]) && aligned16(l->out[0]) && row_bytes % 16 == 0;
    bool a4 = ((uintptr_t)l->in[0] % 4 == 0) && ((uintptr_t)l->out[0] % 4 == 0) && row_bytes % 4 == 0;
    if (n > 0x7fffffffLL)
        return reel_seterr(be->ctx, REEL_E_LIMIT, "cuda.embedding: %lld tokens exceed one grid", (long long)n);
    cudaError_t e;
    if (a16) {
        int64_t w = (int64_t)(row_bytes / 16);
        e = launch(embedding_kernel<uint4>, (unsigned)n, row_threads(w, 256), 0, st, l->pdl,
                   (const uint4 *)l->in[0], ids, (uint4 *)l->out[0], v, w);
    } else if (a4) {
        int64_t w = (int64_t)(row_bytes / 4);
        e = launch(embedding_kernel<uint32_t>, (unsigned)n, row_threads(w, 256), 0, st, l->pdl,
                   (const uint32_t *)l->in[0], ids, (uint32_t *)l->out[0], v, w);
    } else {
        int64_t w = (int64_t)(row_bytes / 2);
        e = launch(embedding_kernel<uint16_t>, (unsigned)n, row_threads(w, 256), 0, st, l->pdl,
                   (const uint16_t *)l->in[0], ids, (uint16_t *)l->out[0], v, w);
    }
    return REEL_CU_LAUNCHED_E(be, "cuda.embedding", e);
}

static bool use_embedding(REEL_CU_USE_ARGS)
{
    return nin >= 2 && same_float_dtype(in, 1, out, 1) && in[1].dtype == REEL_I32;
}

} /* namespace reel_cu */

REEL_CU_IMPL(reel_cu_add_impl, "cuda.add", REEL_OP_ADD, 10, true, true,
             reel_cu::use_binary, reel_cu::add_launch);
REEL_CU_IMPL(reel_cu_mul_impl, "cuda.mul", REEL_OP_MUL, 10, true, true,
             reel_cu::use_binary, reel_cu::mul_launch);
REEL_CU_IMPL(reel_cu_silu_and_mul_impl, "cuda.silu_and_mul", REEL_OP_SILU_AND_MUL, 10, true, false,
             reel_cu::use_unary, reel_cu::silu_and_mul_launch);
REEL_CU_IMPL(reel_cu_embedding_impl, "cuda.embedding", REEL_OP_EMBEDDING, 10, true, false,
             reel_cu::use_embedding, reel_cu::embedding_launch);
