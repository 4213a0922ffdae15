/* CUDA kernels: add and mul (b of a's shape, or a row of a's last dim
 * broadcast), silu_and_mul, embedding. Element i of an output depends only
 * on element i of its input (add, mul: out may alias a). Tensors of up to
 * small_numel elements run one element per thread with 32-bit indices;
 * larger ones a grid-stride loop over 16-byte packs where pointers and
 * widths allow (these ops are bandwidth-bound), with 32-bit indices while
 * the count fits. Every path computes each element with the same float32
 * expression, so they give the same bits. All honour programmatic dependent
 * launch (pdl_start before any access). */
#include "ops/cuda/common.cuh"
#include "ops/cuda/impls.h"

namespace reel_cu {

struct add_op {
    __device__ __forceinline__ float operator()(float a, float b) const { return a + b; }
};
struct mul_op {
    __device__ __forceinline__ float operator()(float a, float b) const { return a * b; }
};

/* f on one element, or on each element of a pack. */
template <typename T, typename F> __device__ __forceinline__ T apply2(T x, T y, F f)
{
    return from_f<T>(f(to_f(x), to_f(y)));
}

template <typename T, typename F> __device__ __forceinline__ pack<T> apply2(pack<T> x, pack<T> y, F f)
{
    pack<T> r;
#pragma unroll
    for (int j = 0; j < pack<T>::n; j++)
        r.v[j] = from_f<T>(f(to_f(x.v[j]), to_f(y.v[j])));
    return r;
}

/* Small tensors: one element per thread. BCAST: b is a row of nb elements
 * repeated (else nb == n). */
template <typename T, typename F, bool BCAST>
__global__ void binary_small_kernel(const T *a, const T *b, T *out, uint32_t n, uint32_t nb, F f, bool pdl)
{
    pdl_start(pdl);
    uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        out[i] = apply2(a[i], b[BCAST ? i % nb : i], f);
}

/* Larger ones: a grid-stride loop over units U (elements, or packs of 16
 * bytes when n and nb are multiples of the pack), indexed by I. */
template <typename U, typename I, typename F, bool BCAST>
__global__ void binary_kernel(const U *a, const U *b, U *out, I n, I nb, F f, bool pdl)
{
    pdl_start(pdl);
    I stride = (I)gridDim.x * blockDim.x;
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        out[i] = apply2(a[i], b[BCAST ? i % nb : i], f);
}

/* n units: 32-bit indices while i + stride cannot wrap (grid_for caps the
 * grid at 2^28 threads). */
template <typename U, typename F, bool BCAST>
static cudaError_t binary_grid(const reel_launch *l, cudaStream_t st, int64_t n, int64_t nb, F f)
{
    const int threads = 256;
    const U *a = (const U *)l->in[0], *b = (const U *)l->in[1];
    U *o = (U *)l->out[0];
    if (n <= INT32_MAX)
        return launch(binary_kernel<U, uint32_t, F, BCAST>, grid_for(n, threads), threads, 0, st, l->pdl, a, b, o,
                      (uint32_t)n, (uint32_t)nb, f);
    return launch(binary_kernel<U, int64_t, F, BCAST>, grid_for(n, threads), threads, 0, st, l->pdl, a, b, o, n, nb,
                  f);
}

template <typename T, typename F, bool BCAST>
static cudaError_t binary_run(reel_backend *be, const reel_launch *l, cudaStream_t st, int64_t n, int64_t nb, F f)
{
    const int threads = 256;
    const int pk = pack<T>::n;
    if (n <= small_numel(be))
        return launch(binary_small_kernel<T, F, BCAST>, grid_for(n, threads), threads, 0, st, l->pdl,
                      (const T *)l->in[0], (const T *)l->in[1], (T *)l->out[0], (uint32_t)n, (uint32_t)nb, f);
    bool vec = aligned16(l->in[0]) && aligned16(l->in[1]) && aligned16(l->out[0]) && n % pk == 0 && nb % pk == 0;
    if (vec)
        return binary_grid<pack<T>, F, BCAST>(l, st, n / pk, nb / pk, f);
    return binary_grid<T, F, BCAST>(l, st, n, nb, f);
}

template <typename F> static reel_status binary(reel_backend *be, const reel_launch *l, F f, const char *name)
{
    int64_t n = lead(&l->in_shape[0], l->rows) * row_numel(&l->in_shape[0]);
    int64_t nb = lead(&l->in_shape[1], l->rows) * row_numel(&l->in_shape[1]);
    if (n <= 0 || nb <= 0)
        return REEL_OK;
    cudaStream_t st = reel_cuda_stream_handle(l->stream);
    cudaError_t e = cudaSuccess;
    if (nb == n) {
        REEL_CU_DISPATCH(l->in_shape[0].dtype, e = (binary_run<T, F, false>(be, l, st, n, nb, f)));
    } else {
        REEL_CU_DISPATCH(l->in_shape[0].dtype, e = (binary_run<T, F, true>(be, l, st, n, nb, f)));
    }
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

/* silu(a) * b, the host's formula: a / (1 + exp(-a)) * b. */
struct silu_mul_op {
    __device__ __forceinline__ float operator()(float a, float b) const { return a / (1.0f + expf(-a)) * b; }
};

/* Small tensors: one output element per thread; row t of x is [gate | up],
 * 2f wide. 2n fits in 32 bits (n <= small_numel). */
template <typename T>
__global__ void silu_and_mul_small_kernel(const T *x, T *out, uint32_t n, uint32_t f, bool pdl)
{
    pdl_start(pdl);
    uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        uint32_t t = i / f, c = i - t * f;
        out[i] = apply2(x[2 * t * f + c], x[2 * t * f + f + c], silu_mul_op());
    }
}

/* Larger ones: a grid-stride loop over units U (fu per output row), indexed
 * by I (32 bits when 2n fits). */
template <typename U, typename I>
__global__ void silu_and_mul_kernel(const U *x, U *out, I n, I fu, bool pdl)
{
    pdl_start(pdl);
    I stride = (I)gridDim.x * blockDim.x;
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        I t = i / fu, c = i - t * fu;
        out[i] = apply2(x[2 * t * fu + c], x[2 * t * fu + fu + c], silu_mul_op());
    }
}

/* silu_and_mul is out of place only: its impl does not declare inplace_ok, so
 * no plan aliases its output onto its input (a column-batched in-place kernel
 * measured 2x to 3.2x slower on an H200, bench/results/chain_h200_2026-11-30_72a2a27.md). */
template <typename U>
static cudaError_t silu_and_mul_grid(const reel_launch *l, cudaStream_t st, int64_t rows, int64_t fu)
{
    const int threads = 256;
    const U *x = (const U *)l->in[0];
    U *o = (U *)l->out[0];
    int64_t n = rows * fu;
    if (n <= INT32_MAX)
        return launch(silu_and_mul_kernel<U, uint32_t>, grid_for(n, threads), threads, 0, st, l->pdl, x, o,
                      (uint32_t)n, (uint32_t)fu);
    return launch(silu_and_mul_kernel<U, int64_t>, grid_for(n, threads), threads, 0, st, l->pdl, x, o, n, fu);
}

template <typename T>
static cudaError_t silu_and_mul_run(reel_backend *be, const reel_launch *l, cudaStream_t st, int64_t rows, int64_t f)
{
    const int threads = 256;
    const int pk = pack<T>::n;
    bool vec = aligned16(l->in[0]) && aligned16(l->out[0]) && f % pk == 0;
    if (rows * f <= small_numel(be))
        return launch(silu_and_mul_small_kernel<T>, grid_for(rows * f, threads), threads, 0, st, l->pdl,
                      (const T *)l->in[0], (T *)l->out[0], (uint32_t)(rows * f), (uint32_t)f);
    return vec ? silu_and_mul_grid<pack<T>>(l, st, rows, f / pk) : silu_and_mul_grid<T>(l, st, rows, f);
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
    REEL_CU_DISPATCH(xs->dtype, e = silu_and_mul_run<T>(be, l, st, rows, f));
    return REEL_CU_LAUNCHED_E(be, "cuda.silu_and_mul", e);
}

static bool use_unary(REEL_CU_USE_ARGS) { return nin >= 1 && same_float_dtype(in, 1, out, 1); }

/* One block per token: the row of the table, copied bit for bit as words W
 * (the table and output share a dtype), or zeros for an id outside [0, V). */
template <typename W>
__global__ void embedding_kernel(const W *table, const int32_t *ids, W *out, int64_t v, int64_t words,
                                 bool pdl)
{
    pdl_start(pdl);
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
        return reel_seterr(be->err, REEL_E_LIMIT, "cuda.embedding: %lld tokens exceed one grid", (long long)n);
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
