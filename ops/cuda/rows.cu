/* CUDA kernels over the last dim of each row: rmsnorm, softmax, argmax. One
 * block per row (argmax: a cluster of blocks a row where the row is long and
 * the rows few, ops/argmax_split.h); the row is reduced (fixed tree, so the same launch gives
 * the same bits) before any output of the row is written, and each thread
 * writes only elements it read itself, so rmsnorm and softmax may run in
 * place. All honour programmatic dependent launch. */
#include <cooperative_groups.h>

#include "ops/argmax_split.h"
#include "ops/cuda/common.cuh"
#include "ops/cuda/impls.h"

namespace cg = cooperative_groups;

namespace reel_cu {

/* x / sqrt(mean(x^2) + eps) * w, in the host's order: (x * r) * w. */
template <typename T>
__global__ void rmsnorm_kernel(const T *x, const T *w, T *out, int64_t d, float eps, bool pdl)
{
    pdl_start(pdl);
    const T *xr = x + (int64_t)blockIdx.x * d;
    T *orow = out + (int64_t)blockIdx.x * d;
    float ss = 0.0f;
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
        float v = to_f(xr[i]);
        ss += v * v;
    }
    ss = block_reduce<false>(ss);
    float r = 1.0f / sqrtf(ss / (float)d + eps);
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x)
        orow[i] = from_f<T>(to_f(xr[i]) * r * to_f(w[i]));
}

/* The norms' pack path (rmsnorm and add_rmsnorm alike, so that fused ==
 * unfused stays bit for bit): a row of d elements, d a whole number of
 * 16-byte packs, at most RN_MAX_PER * 1024 packs. Thread t holds packs t, t
 * + threads, ... (per of them) in registers from the first load to the
 * last store: x (a + b rounded, for add_rmsnorm, stored as the sum), and
 * the weight, loaded with them, before the reduction, so nothing is read
 * after it. The sum of squares runs over a thread's packs in order, then
 * block_reduce's fixed tree: threads and per depend only on d and the
 * dtype (rn_shape), never on the pointers (VEC only says whether a pack
 * is one 16-byte access or its elements one by one). */
constexpr int RN_MAX_PER = 4;

struct rn_cfg {
    int threads, per;
};

__host__ static bool rn_shape(int64_t d, int64_t v, rn_cfg *c)
{
    if (d <= 0 || d % v != 0 || d / v > (int64_t)RN_MAX_PER * 1024)
        return false;
    const int64_t np = d / v;
    c->per = (int)((np + 1023) / 1024);
    c->threads = row_threads((np + c->per - 1) / c->per, 1024);
    return true;
}

template <typename T, bool VEC> __device__ __forceinline__ pack<T> rn_ld(const T *p)
{
    pack<T> r;
    if constexpr (VEC) {
        r = *(const pack<T> *)p;
    } else {
#pragma unroll
        for (int e = 0; e < pack<T>::n; e++)
            r.v[e] = p[e];
    }
    return r;
}

template <typename T, bool VEC> __device__ __forceinline__ void rn_st(T *p, const pack<T> &x)
{
    if constexpr (VEC) {
        *(pack<T> *)p = x;
    } else {
#pragma unroll
        for (int e = 0; e < pack<T>::n; e++)
            p[e] = x.v[e];
    }
}

template <typename T, bool ADD, int PER, bool VEC>
__global__ void rmsnorm_pack_kernel(const T *a, const T *b, const T *w, T *sum, T *out, int64_t d, float eps,
                                    bool pdl)
{
    constexpr int V = pack<T>::n;
    pdl_start(pdl);
    const int64_t at = (int64_t)blockIdx.x * d;
    const int np = (int)(d / V);
    pack<T> x[PER], wv[PER];
#pragma unroll
    for (int j = 0; j < PER; j++) {
        const int p = threadIdx.x + j * blockDim.x;
        if (p < np) {
            x[j] = rn_ld<T, VEC>(a + at + (int64_t)p * V);
            wv[j] = rn_ld<T, VEC>(w + (int64_t)p * V);
            if constexpr (ADD) {
                const pack<T> y = rn_ld<T, VEC>(b + at + (int64_t)p * V);
#pragma unroll
                for (int e = 0; e < V; e++)
                    x[j].v[e] = from_f<T>(to_f(x[j].v[e]) + to_f(y.v[e]));
            }
        }
    }
    float ss = 0.0f;
#pragma unroll
    for (int j = 0; j < PER; j++) {
        const int p = threadIdx.x + j * blockDim.x;
        if (p < np) {
            if constexpr (ADD)
                rn_st<T, VEC>(sum + at + (int64_t)p * V, x[j]);
#pragma unroll
            for (int e = 0; e < V; e++) {
                const float v = to_f(x[j].v[e]);
                ss += v * v;
            }
        }
    }
    ss = block_reduce<false>(ss);
    const float r = 1.0f / sqrtf(ss / (float)d + eps);
#pragma unroll
    for (int j = 0; j < PER; j++) {
        const int p = threadIdx.x + j * blockDim.x;
        if (p < np) {
            pack<T> o;
#pragma unroll
            for (int e = 0; e < V; e++)
                o.v[e] = from_f<T>(to_f(x[j].v[e]) * r * to_f(wv[j].v[e]));
            rn_st<T, VEC>(out + at + (int64_t)p * V, o);
        }
    }
}

template <typename T, bool ADD, bool VEC>
static cudaError_t rn_launch_per(const rn_cfg &c, unsigned rows, cudaStream_t st, bool pdl, const T *a, const T *b,
                                 const T *w, T *sum, T *out, int64_t d, float eps)
{
    switch (c.per) {
    case 1: return launch(rmsnorm_pack_kernel<T, ADD, 1, VEC>, rows, c.threads, 0, st, pdl, a, b, w, sum, out, d, eps);
    case 2: return launch(rmsnorm_pack_kernel<T, ADD, 2, VEC>, rows, c.threads, 0, st, pdl, a, b, w, sum, out, d, eps);
    case 3: return launch(rmsnorm_pack_kernel<T, ADD, 3, VEC>, rows, c.threads, 0, st, pdl, a, b, w, sum, out, d, eps);
    default: return launch(rmsnorm_pack_kernel<T, ADD, 4, VEC>, rows, c.threads, 0, st, pdl, a, b, w, sum, out, d, eps);
    }
}

/* The pack path for a launch: VEC where every pointer is 16-byte aligned. */
template <typename T, bool ADD>
static cudaError_t rn_launch(const rn_cfg &c, unsigned rows, cudaStream_t st, bool pdl, const T *a, const T *b,
                             const T *w, T *sum, T *out, int64_t d, float eps)
{
    const bool vec = aligned16(a) && aligned16(w) && aligned16(out) && (!ADD || (aligned16(b) && aligned16(sum)));
    return vec ? rn_launch_per<T, ADD, true>(c, rows, st, pdl, a, b, w, sum, out, d, eps)
               : rn_launch_per<T, ADD, false>(c, rows, st, pdl, a, b, w, sum, out, d, eps);
}

/* Rows as the host sees them: the product of the leading extent and the
 * dims between it and the last, over the last dim. */
static int64_t nrows_of(const reel_launch *l, int64_t last)
{
    const reel_shape *xs = &l->in_shape[0];
    return last > 0 ? lead(xs, l->rows) * row_numel(xs) / last : 0;
}

/* exp(x - max) / sum. NaN never becomes the max (fmaxf drops it) but
 * propagates through the sum; a row of only -inf, or with +inf, gives NaN:
 * the host's (and torch's) answer. */
template <typename T> __global__ void softmax_kernel(const T *x, T *out, int64_t n, bool pdl)
{
    pdl_start(pdl);
    const T *xr = x + (int64_t)blockIdx.x * n;
    T *orow = out + (int64_t)blockIdx.x * n;
    float m = -INFINITY;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
        m = fmaxf(m, to_f(xr[i]));
    m = block_reduce<true>(m);
    float s = 0.0f;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
        s += expf(to_f(xr[i]) - m);
    s = block_reduce<false>(s);
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
        orow[i] = from_f<T>(expf(to_f(xr[i]) - m) / s);
}

static reel_status softmax_launch(reel_backend *be, const reel_launch *l)
{
    int64_t n = last_dim(&l->in_shape[0]), nrows = nrows_of(l, n);
    if (nrows <= 0)
        return REEL_OK;
    cudaStream_t st = reel_cuda_stream_handle(l->stream);
    int threads = row_threads(n, 1024);
    cudaError_t e = cudaSuccess;
    REEL_CU_DISPATCH(l->in_shape[0].dtype, e = launch(softmax_kernel<T>, (unsigned)nrows, threads, 0, st, l->pdl,
                                                      (const T *)l->in[0], (T *)l->out[0], n));
    return REEL_CU_LAUNCHED_E(be, "cuda.softmax", e);
}

/* (value, index) candidates: a beats b when larger, or equal with a lower
 * index; an index of -1 is no candidate (NaN never is one). */
__device__ __forceinline__ bool arg_better(float va, int64_t ia, float vb, int64_t ib)
{
    if (ia < 0)
        return false;
    if (ib < 0)
        return true;
    return va > vb || (va == vb && ia < ib);
}

/* The warp's best (value, index) candidate, in every lane. */
template <typename I> __device__ __forceinline__ void warp_argbest(float &bv, I &bi)
{
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, bv, o);
        I oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (arg_better(ov, oi, bv, bi)) {
            bv = ov;
            bi = oi;
        }
    }
}

/* Lowest index of the row's maximum; NaN never wins; an all-NaN row gives 0. */
template <typename T> __global__ void argmax_kernel(const T *x, int32_t *out, int64_t n, bool pdl)
{
    __shared__ float sv[32];
    __shared__ int64_t si[32];
    pdl_start(pdl);
    const T *xr = x + (int64_t)blockIdx.x * n;
    float bv = 0.0f;
    int64_t bi = -1;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        float v = to_f(xr[i]);
        if (!isnan(v) && arg_better(v, i, bv, bi)) {
            bv = v;
            bi = i;
        }
    }
    warp_argbest(bv, bi);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) {
        sv[warp] = bv;
        si[warp] = bi;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < (int)(blockDim.x >> 5); w++)
            if (arg_better(sv[w], si[w], bv, bi)) {
                bv = sv[w];
                bi = si[w];
            }
        out[blockIdx.x] = bi < 0 ? 0 : (int32_t)bi;
    }
}

/* The same result for rows whose elements can be read 16 bytes at a time
 * (aligned, a whole number of packs, fewer than 2^31 elements): each thread
 * scans packs p0 + i, p0 + i + threads, ... below p1 and the elements of a
 * pack in index order, so its candidate is the lowest index of its maximum,
 * as above; the merge across threads is the same, the warps' candidates
 * merged by the first warp's butterfly, not one thread's walk over them.
 * The block's candidate is in warp 0's lanes. */
template <typename T>
__device__ __forceinline__ void argmax_packs(const pack<T> *xr, int32_t p0, int32_t p1, float &bv, int32_t &bi)
{
    typedef pack<T> P;
    __shared__ float sv[32];
    __shared__ int32_t si[32];
    bv = 0.0f;
    bi = -1;
#pragma unroll 4
    for (int32_t p = p0 + (int32_t)threadIdx.x; p < p1; p += (int32_t)blockDim.x) {
        P v = xr[p];
#pragma unroll
        for (int e = 0; e < P::n; e++) {
            float f = to_f(v.v[e]);
            if (!isnan(f) && (bi < 0 || f > bv)) {
                bv = f;
                bi = p * P::n + e;
            }
        }
    }
    warp_argbest(bv, bi);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) {
        sv[warp] = bv;
        si[warp] = bi;
    }
    __syncthreads();
    if (warp == 0) {
        const int nw = (int)(blockDim.x >> 5);
        bv = lane < nw ? sv[lane] : 0.0f;
        bi = lane < nw ? si[lane] : -1;
        warp_argbest(bv, bi);
    }
}

/* One block a row: a 32000-wide row is 4 packs a thread at 1024 threads
 * instead of 63 dependent scalar loads at 512. */
template <typename T> __global__ void argmax_vec_kernel(const T *x, int32_t *out, int32_t n, bool pdl)
{
    pdl_start(pdl);
    float bv;
    int32_t bi;
    argmax_packs<T>((const pack<T> *)(x + (int64_t)blockIdx.x * n), 0, n / pack<T>::n, bv, bi);
    if (threadIdx.x == 0)
        out[blockIdx.x] = bi < 0 ? 0 : bi;
}

/* The multi-block reduction: a cluster of C blocks (grid (C, rows), the
 * cluster along x) takes one row. Block r scans packs [r * per, (r + 1) *
 * per) as argmax_vec_kernel scans its row, and rank 0's warp 0 merges the C
 * blocks' candidates through distributed shared memory. "Lowest index of
 * the maximum, NaN never wins" is a total order on the candidates, so the
 * result is the one-block kernel's whatever the split
 * (tests/gpu/test_gpu_ops.c: ties across the blocks, NaN, rows of NaN). A
 * batch-1 step's 128256-wide row is 8 blocks of 1024 threads, 2 packs a
 * thread. Launched only on devices with clusters (argmax_row_blocks). */
template <typename T> __global__ void argmax_cluster_kernel(const T *x, int32_t *out, int32_t n, bool pdl)
{
    __shared__ float s_bv;
    __shared__ int32_t s_bi;
    pdl_start(pdl);
    const int rank = (int)blockIdx.x, nblk = (int)gridDim.x;
    const int32_t np = n / pack<T>::n, per = (np + nblk - 1) / nblk;
    float bv;
    int32_t bi;
    argmax_packs<T>((const pack<T> *)(x + (int64_t)blockIdx.y * n), rank * per, min(np, rank * per + per), bv, bi);
    if (threadIdx.x == 0) {
        s_bv = bv;
        s_bi = bi;
    }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    cg::cluster_group cl = cg::this_cluster();
    cl.sync(); /* every block's candidate is in its s_bv, s_bi */
    const int lane = threadIdx.x & 31;
    if (rank == 0 && threadIdx.x < 32) {
        bv = lane < nblk ? *cl.map_shared_rank(&s_bv, lane) : 0.0f;
        bi = lane < nblk ? *cl.map_shared_rank(&s_bi, lane) : -1;
        warp_argbest(bv, bi);
        if (lane == 0)
            out[blockIdx.y] = bi < 0 ? 0 : bi;
    }
    cl.sync(); /* no block leaves while rank 0 may still read its shared memory */
#endif
}

/* The most blocks a row (the portable cluster size); -DREEL_ARGMAX_CLUSTER=1
 * builds the one-block kernel only (bench/gpu.sh ab compares the two;
 * docs/decisions.md). */
#ifndef REEL_ARGMAX_CLUSTER
#define REEL_ARGMAX_CLUSTER 8
#endif

/* The 16-byte path: aligned rows, a whole number of packs, under 2^31. */
static bool argmax_vec_ok(const reel_launch *l, int64_t n)
{
    const int64_t vn = 16 / (int64_t)reel_dtype_size(l->in_shape[0].dtype);
    return aligned16(l->in[0]) && n % vn == 0 && n < 0x7fffffffLL;
}

/* Blocks a row of the 16-byte path takes: ops/argmax_split.h's rule on this
 * device (a grid's y holds at most 65535 rows); 1, the one-block kernel, on
 * a device without clusters. The launch and the PDL rule both ask here. */
__host__ static int argmax_row_blocks(const reel_launch *l, int64_t n, int64_t nrows, const reel_device_caps *caps)
{
    if (nrows > 65535)
        return 1;
    const int64_t np = n / (16 / (int64_t)reel_dtype_size(l->in_shape[0].dtype));
    return reel_argmax_split(nrows, np, caps->sm_count, caps->max_active_clusters > 0 && caps->cc_major >= 9,
                             REEL_ARGMAX_CLUSTER);
}

template <typename T>
static cudaError_t argmax_cluster_run(const T *x, int32_t *out, int32_t n, int64_t nrows, int c, cudaStream_t st,
                                      bool pdl)
{
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute attr[2];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = (unsigned)c;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    attr[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[1].val.programmaticStreamSerializationAllowed = 1;
    const int64_t np = n / (int64_t)pack<T>::n;
    cfg.gridDim = dim3((unsigned)c, (unsigned)nrows, 1);
    cfg.blockDim = dim3((unsigned)row_threads((np + c - 1) / c, 1024), 1, 1);
    cfg.stream = st;
    cfg.attrs = attr;
    cfg.numAttrs = pdl ? 2u : 1u;
    return cudaLaunchKernelEx(&cfg, argmax_cluster_kernel<T>, x, out, n, pdl);
}

static reel_status argmax_launch(reel_backend *be, const reel_launch *l)
{
    int64_t n = last_dim(&l->in_shape[0]), nrows = nrows_of(l, n);
    if (nrows <= 0)
        return REEL_OK;
    cudaStream_t st = reel_cuda_stream_handle(l->stream);
    cudaError_t e = cudaSuccess;
    const int64_t vn = 16 / (int64_t)reel_dtype_size(l->in_shape[0].dtype);
    if (argmax_vec_ok(l, n)) {
        const int c = argmax_row_blocks(l, n, nrows, &be->caps);
        if (c > 1) {
            REEL_CU_DISPATCH(l->in_shape[0].dtype, e = argmax_cluster_run<T>((const T *)l->in[0], (int32_t *)l->out[0],
                                                                             (int32_t)n, nrows, c, st, l->pdl));
            return REEL_CU_LAUNCHED_E(be, "cuda.argmax", e);
        }
        int threads = row_threads(n / vn, 1024);
        REEL_CU_DISPATCH(l->in_shape[0].dtype,
                         e = launch(argmax_vec_kernel<T>, (unsigned)nrows, threads, 0, st, l->pdl,
                                    (const T *)l->in[0], (int32_t *)l->out[0], (int32_t)n));
        return REEL_CU_LAUNCHED_E(be, "cuda.argmax", e);
    }
    int threads = row_threads(n, 512);
    REEL_CU_DISPATCH(l->in_shape[0].dtype, e = launch(argmax_kernel<T>, (unsigned)nrows, threads, 0, st, l->pdl,
                                                      (const T *)l->in[0], (int32_t *)l->out[0], n));
    return REEL_CU_LAUNCHED_E(be, "cuda.argmax", e);
}

static bool use_rows(int64_t nrows_max) { return nrows_max <= 0x7fffffffLL; }

/* add_rmsnorm (the fusion pass): the sum is stored in T, then normalized
 * from the stored values, exactly as rmsnorm_kernel reads the unfused add's
 * output (same tree, same order): fused == unfused bit for bit. Each thread
 * reads back only the sum elements it wrote, so sum may be a's bytes. */
template <typename T>
__global__ void add_rmsnorm_kernel(const T *a, const T *b, const T *w, T *sum, T *out, int64_t d, float eps,
                                   bool pdl)
{
    pdl_start(pdl);
    const int64_t at = (int64_t)blockIdx.x * d;
    float ss = 0.0f;
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
        T s = from_f<T>(to_f(a[at + i]) + to_f(b[at + i]));
        sum[at + i] = s;
        float v = to_f(s);
        ss += v * v;
    }
    ss = block_reduce<false>(ss);
    float r = 1.0f / sqrtf(ss / (float)d + eps);
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x)
        out[at + i] = from_f<T>(to_f(sum[at + i]) * r * to_f(w[i]));
}

/* rmsnorm (x, w -> out) and add_rmsnorm (a, b, w -> sum, out) alike: the
 * pack path where the row's length takes it, else a block a row. */
template <bool ADD> static reel_status norm_launch(reel_backend *be, const reel_launch *l, const char *name)
{
    int64_t d = last_dim(&l->in_shape[0]), nrows = nrows_of(l, d);
    if (nrows <= 0)
        return REEL_OK;
    cudaStream_t st = reel_cuda_stream_handle(l->stream);
    const int threads = row_threads(d, 1024);
    const float eps = l->attrs->rmsnorm.eps;
    const void *a = l->in[0], *b = ADD ? l->in[1] : NULL, *w = l->in[ADD ? 2 : 1];
    void *sum = ADD ? l->out[0] : NULL, *out = l->out[ADD ? 1 : 0];
    cudaError_t e = cudaSuccess;
    rn_cfg c;
    if (rn_shape(d, 16 / (int64_t)reel_dtype_size(l->in_shape[0].dtype), &c)) {
        REEL_CU_DISPATCH(l->in_shape[0].dtype,
                         e = (rn_launch<T, ADD>(c, (unsigned)nrows, st, l->pdl, (const T *)a, (const T *)b,
                                                (const T *)w, (T *)sum, (T *)out, d, eps)));
    } else if (ADD) {
        REEL_CU_DISPATCH(l->in_shape[0].dtype,
                         e = launch(add_rmsnorm_kernel<T>, (unsigned)nrows, threads, 0, st, l->pdl, (const T *)a,
                                    (const T *)b, (const T *)w, (T *)sum, (T *)out, d, eps));
    } else {
        REEL_CU_DISPATCH(l->in_shape[0].dtype,
                         e = launch(rmsnorm_kernel<T>, (unsigned)nrows, threads, 0, st, l->pdl, (const T *)a,
                                    (const T *)w, (T *)out, d, eps));
    }
    return REEL_CU_LAUNCHED_E(be, name, e);
}

static reel_status rmsnorm_launch(reel_backend *be, const reel_launch *l)
{
    return norm_launch<false>(be, l, "cuda.rmsnorm");
}

static reel_status add_rmsnorm_launch(reel_backend *be, const reel_launch *l)
{
    return norm_launch<true>(be, l, "cuda.add_rmsnorm");
}

/* view_cols where it is not fused into its producer: a copy of the columns,
 * one block per row. */
template <typename T>
__global__ void view_cols_kernel(const T *x, T *out, int64_t n, int64_t col, int64_t w, bool pdl)
{
    pdl_start(pdl);
    const T *xr = x + (int64_t)blockIdx.x * n + col;
    T *orow = out + (int64_t)blockIdx.x * w;
    for (int64_t i = threadIdx.x; i < w; i += blockDim.x)
        orow[i] = xr[i];
}

static reel_status view_cols_launch(reel_backend *be, const reel_launch *l)
{
    int64_t n = last_dim(&l->in_shape[0]), nrows = nrows_of(l, n), w = l->attrs->view.ncols;
    if (nrows <= 0 || w <= 0)
        return REEL_OK;
    cudaStream_t st = reel_cuda_stream_handle(l->stream);
    cudaError_t e = cudaSuccess;
    REEL_CU_DISPATCH(l->in_shape[0].dtype,
                     e = launch(view_cols_kernel<T>, (unsigned)nrows, row_threads(w, 1024), 0, st, l->pdl,
                                (const T *)l->in[0], (T *)l->out[0], n, l->attrs->view.col, w));
    return REEL_CU_LAUNCHED_E(be, "cuda.view_cols", e);
}

/* One block per row: the grid is the launch's row count. */
static int64_t rows_grid(const reel_launch *l, const reel_device_caps *caps)
{
    return nrows_of(l, last_dim(&l->in_shape[0]));
}

/* argmax's blocks: a cluster a row where argmax_launch takes one. */
static int64_t argmax_grid(const reel_launch *l, const reel_device_caps *caps)
{
    const int64_t n = last_dim(&l->in_shape[0]), nrows = nrows_of(l, n);
    return argmax_vec_ok(l, n) ? nrows * argmax_row_blocks(l, n, nrows, caps) : nrows;
}

static bool use_add_rmsnorm(REEL_CU_USE_ARGS)
{
    return nin >= 3 && same_float_dtype(in, 3, out, 2) && use_rows(in[0].dims[0]);
}

static bool use_view_cols(REEL_CU_USE_ARGS)
{
    return nin >= 1 && same_float_dtype(in, 1, out, 1) && use_rows(in[0].dims[0]);
}

static bool use_rmsnorm(REEL_CU_USE_ARGS)
{
    return nin >= 2 && same_float_dtype(in, 2, out, 1) && use_rows(in[0].dims[0]);
}

static bool use_softmax(REEL_CU_USE_ARGS)
{
    return nin >= 1 && same_float_dtype(in, 1, out, 1) && use_rows(in[0].dims[0]);
}

static bool use_argmax(REEL_CU_USE_ARGS)
{
    return nin >= 1 && same_float_dtype(in, 1, NULL, 0) && out[0].dtype == REEL_I32 && use_rows(in[0].dims[0]);
}

} /* namespace reel_cu */

REEL_CU_IMPL(reel_cu_rmsnorm_impl, "cuda.rmsnorm", REEL_OP_RMSNORM, 10, true, true,
             reel_cu::use_rmsnorm, reel_cu::rmsnorm_launch);
REEL_CU_IMPL(reel_cu_softmax_impl, "cuda.softmax", REEL_OP_SOFTMAX, 10, true, true,
             reel_cu::use_softmax, reel_cu::softmax_launch);

static reel_op_impl with_grid(reel_op_impl i)
{
    i.grid_blocks = reel_cu::rows_grid;
    return i;
}
static reel_op_impl with_argmax_grid(reel_op_impl i)
{
    i.grid_blocks = reel_cu::argmax_grid;
    return i;
}
extern "C" const reel_op_impl reel_cu_argmax_impl = with_argmax_grid(reel_cu::make_impl(
    "cuda.argmax", REEL_OP_ARGMAX, 10, true, false, reel_cu::use_argmax, reel_cu::argmax_launch));
extern "C" const reel_op_impl reel_cu_add_rmsnorm_impl = with_grid(reel_cu::make_impl(
    "cuda.add_rmsnorm", REEL_OP_ADD_RMSNORM, 10, true, true, reel_cu::use_add_rmsnorm, reel_cu::add_rmsnorm_launch));
extern "C" const reel_op_impl reel_cu_view_cols_impl = with_grid(reel_cu::make_impl(
    "cuda.view_cols", REEL_OP_VIEW_COLS, 10, true, false, reel_cu::use_view_cols, reel_cu::view_cols_launch));
