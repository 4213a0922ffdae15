/* CUDA skinny matmul, the decode regime: x [M, K] (M <= 16) times w [N, K]
 * (w_transposed, the checkpoint layout) or w [K, N], f16 or bf16, float32
 * accumulation. At M <= 16 a matmul is a stream over the weights, so the
 * kernel is built around reading each weight byte once, 16 bytes a load,
 * with enough loads in flight to keep HBM busy:
 *
 * - The arithmetic runs on the tensor cores (mma.sync m16n8k16): A is x,
 *   its 16 rows the M rows (rows past M are zeros, never loaded), B is a
 *   tile of 8 weight rows or columns. A dot product does not care in which
 *   order k is summed, so the logical k of the fragments is mapped onto
 *   physical k (and, for [K, N], the logical column onto n) such that each
 *   thread's B fragment is whole 16-byte loads of w: no shared memory, no
 *   shuffles. At M = 16 a CUDA-core kernel would need ~64 TFLOP/s of fp32
 *   FMA to keep up with 4 TB/s, the chip's whole rate.
 * - [N, K]: a warp owns 32 weight rows (4 tiles of 8) and walks K 32 at a
 *   time; each thread loads 16 bytes of each of its 4 rows per step and 16
 *   bytes of x for rows g and g+8 (x is read through L1: every warp of the
 *   SM reads the same x).
 *   [K, N]: a warp owns 64 columns and walks K 16 at a time; each thread
 *   loads 16 bytes (8 columns) of 4 consecutive k rows, one B fragment of
 *   each of 8 column tiles once paired up with byte permutes.
 * - Each warp runs its chunks of K as a register pipeline (gv_pipeline):
 *   the loads of the next chunks are issued before the current one is
 *   multiplied, so the stream does not drain between steps.
 * - Split-K without scratch and without atomics: the warps of a block split
 *   the block's share of K and add up in shared memory in warp order; for
 *   short, wide grids (small N, tall K) the blocks of a thread-block
 *   cluster split K further and add up through distributed shared memory in
 *   rank order. Every sum has a fixed order for a given configuration, and
 *   the configuration depends on (N, K, the device) only, not on M: a run
 *   gives the same bits as any other run and as a replay, and a row's result
 *   does not depend on how many rows came with it.
 *
 * M at launch: a plan picks one impl per node for all its buckets, and
 * can_use sees the largest bucket. A plan serving batch 1 to 64 should still
 * stream its batch-1 steps, so the impl accepts a token-dim x of any height
 * and hands launches with more rows than the kernel measured faster at (and
 * launches whose pointers are not 16-byte aligned) to cuBLASLt, whose impl
 * accepts every node this one does. Both are capturable and allocate
 * nothing at launch. Which nodes the impl takes at all is measured too
 * (GV_IMPL_MAX_WEIGHTS below): the kernel runs every shape it is tested on,
 * but cuBLASLt is faster on most of them. */
#include <cooperative_groups.h>
#include <string.h>

#include <type_traits>

#include "ops/cuda/common.cuh"
#include "ops/cuda/gemv.h"
#include "ops/cuda/impls.h"

namespace cg = cooperative_groups;

namespace reel_cu {

enum {
    GV_NK_TILES = 4,  /* [N, K]: 8-row tiles per warp (32 rows) */
    GV_KN_TILES = 8,  /* [K, N]: 8-column tiles per warp (64 columns) */
    GV_RED_FLOATS = 8192, /* warps x tiles x 128 partials: at most 64 x 128 (32 KB of shared memory) */
    GV_MAX_THREADS = 512,
};

/* Where the impl runs the kernel, and where it leaves the node to cuBLASLt:
 * what bench/gemv.cu measured on an H200 (docs/benchmarks.md, 2026-12-01).
 * With the configurations gv_pick gives, the kernel beat cuBLASLt (as reel
 * calls it, replayed in a graph) only on [N, K] weights of 1024 x 1024 at
 * M <= 4 (6.2-6.3 us against 6.7-7.2 us); at M = 8 cuBLASLt's kernel takes
 * 4.1 us, and from 6 MB of weights up cuBLASLt streams at 1.3-4.0 TB/s
 * against the kernel's 1.1-3.5 TB/s ([K, N] is slower still). */
static const int64_t GV_IMPL_MAX_WEIGHTS = (int64_t)1 << 20; /* elements of w, any K */
static const int64_t GV_IMPL_MAX_WEIGHTS_K1024 = (int64_t)1 << 22; /* elements of w with K <= 1024 */
static const int64_t GV_IMPL_MAX_M = 16;

/* Weights are read once: keep them out of L1. volatile: never hoisted above
 * the dependency wait of pdl_start. */
__device__ __forceinline__ uint4 ld_stream(const void *p)
{
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

__device__ __forceinline__ uint32_t word(const uint4 &v, int i)
{
    return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

/* c += A (16 x 16, row) * B (16 x 8, col), float32 accumulators. */
template <typename T>
__device__ __forceinline__ void mma16816(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    if constexpr (std::is_same<T, __half>::value)
        asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%0,%1,%2,%3};"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    else
        asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%0,%1,%2,%3};"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#endif
}

/* The block's partials (each warp's acc) summed in warp order, then the
 * cluster's in rank order, then stored. Partial q = e * 32 + lane, e = tile
 * * 4 + c: the fragment's c-th accumulator, row m = g (+8 for c >= 2),
 * column 2t + (c & 1) of the tile; col_of maps (tile, column) to n. */
template <typename T, bool WT, int R>
__device__ void gv_finish(float (&acc)[R][4], T *y, int M, int N, int n0)
{
    extern __shared__ float red[]; /* warps x 128 R floats (gv_run sizes it) */
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const int per = 128 * R;
#pragma unroll
    for (int j = 0; j < R; j++)
#pragma unroll
        for (int c = 0; c < 4; c++)
            red[warp * per + (j * 4 + c) * 32 + lane] = acc[j][c];
    __syncthreads();
    /* Thread q owns partial q of every warp: summed into warp 0's slot, which
     * only thread q reads. */
    for (int q = threadIdx.x; q < per; q += blockDim.x) {
        float s = red[q];
        for (int w = 1; w < nw; w++)
            s += red[w * per + q];
        red[q] = s;
    }
    int rank = 0, ranks = 1;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    cg::cluster_group cl = cg::this_cluster();
    ranks = (int)gridDim.y; /* the cluster spans the grid's y (the K split) */
    if (ranks > 1) {
        rank = (int)cl.block_rank();
        cl.sync(); /* every block's sums are in its red[0..per) */
    } else
        __syncthreads();
#else
    __syncthreads();
#endif
    for (int q = threadIdx.x; q < per; q += blockDim.x) {
        if (q % ranks != rank)
            continue;
        int e = q >> 5, ln = q & 31, j = e >> 2, c = e & 3;
        int m = (ln >> 2) + (c >= 2 ? 8 : 0), col = 2 * (ln & 3) + (c & 1);
        int n = WT ? n0 + 8 * j + col : n0 + 8 * col + j;
        if (m >= M || n >= N)
            continue;
        float s = red[q];
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
        if (ranks > 1) { /* ranks 0, 1, ... in order, whichever rank sums */
            s = cl.map_shared_rank(red, 0)[q];
            for (int r = 1; r < ranks; r++)
                s += cl.map_shared_rank(red, r)[q];
        }
#endif
        y[(int64_t)m * N + n] = from_f<T>(s);
    }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (ranks > 1)
        cl.sync(); /* no block leaves while another reads its shared memory */
#endif
}

/* The chunks of one warp, c0, c0 + nw, ... below c_end, run as a register
 * pipeline P stages deep: chunk i + P - 1 is loaded before chunk i is
 * multiplied, so each warp keeps P - 1 chunks of loads in flight while it
 * computes, and the stream over the weights never drains between steps. */
template <int P, typename Stage, typename Load, typename Compute>
__device__ __forceinline__ void gv_pipeline(int c0, int nw, int c_end, Stage (&st)[P], Load load, Compute compute)
{
    const int n = c0 < c_end ? (c_end - c0 + nw - 1) / nw : 0;
#pragma unroll
    for (int p = 0; p < P - 1; p++)
        if (p < n)
            load(st[p], c0 + p * nw);
    for (int i0 = 0; i0 < n; i0 += P) {
#pragma unroll
        for (int p = 0; p < P; p++) {
            int i = i0 + p;
            if (i + P - 1 < n)
                load(st[(p + P - 1) % P], c0 + (i + P - 1) * nw);
            if (i < n)
                compute(st[p]);
        }
    }
}

/* [N, K]: block (bx, s) owns rows [32 bx, 32 bx + 32) and chunks of 32 k
 * [s C / S, (s + 1) C / S); warp w takes chunks w, w + W, ... Thread (g, t)
 * loads w[n0 + 8j + g][32c + 8t .. + 8) for tile j: B fragment words 0-1 are
 * mma step 0 (logical k 2t, 2t+1 and 2t+8, 2t+9), words 2-3 step 1; x rows g
 * and g + 8 at the same k are the A fragment likewise. */
struct nk_stage {
    uint4 w[GV_NK_TILES], xa, xb;
};

template <typename T, int P>
__global__ void __launch_bounds__(GV_MAX_THREADS)
    gemv_nk_kernel(const T *x, const T *w, T *y, int M, int N, int K, bool pdl)
{
    pdl_start(pdl);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    constexpr int R = GV_NK_TILES;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int n0 = blockIdx.x * 8 * R;
    const int C = (K + 31) / 32, S = gridDim.y, sp = blockIdx.y;
    const int c_end = (int)((int64_t)(sp + 1) * C / S);
    const T *wr[R];
    bool wok[R];
#pragma unroll
    for (int j = 0; j < R; j++) {
        int n = n0 + 8 * j + g;
        wok[j] = n < N;
        wr[j] = w + (int64_t)(wok[j] ? n : 0) * K + 8 * t;
    }
    const bool x0 = g < M, x1 = g + 8 < M;
    const T *xr0 = x + (int64_t)(x0 ? g : 0) * K + 8 * t, *xr1 = x + (int64_t)(x1 ? g + 8 : 0) * K + 8 * t;
    float acc[R][4];
#pragma unroll
    for (int j = 0; j < R; j++)
        acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
    const uint4 z = make_uint4(0, 0, 0, 0);
    nk_stage st[P];
    gv_pipeline<P>(
        (int)((int64_t)sp * C / S) + warp, nw, c_end, st,
        [&](nk_stage &s, int c) {
            int k = c * 32;
            bool in = k + 8 * t < K;
#pragma unroll
            for (int j = 0; j < R; j++)
                s.w[j] = in && wok[j] ? ld_stream(wr[j] + k) : z;
            s.xa = in && x0 ? __ldg((const uint4 *)(xr0 + k)) : z;
            s.xb = in && x1 ? __ldg((const uint4 *)(xr1 + k)) : z;
        },
        [&](const nk_stage &s) {
#pragma unroll
            for (int h = 0; h < 2; h++)
#pragma unroll
                for (int j = 0; j < R; j++)
                    mma16816<T>(acc[j], word(s.xa, 2 * h), word(s.xb, 2 * h), word(s.xa, 2 * h + 1),
                                word(s.xb, 2 * h + 1), word(s.w[j], 2 * h), word(s.w[j], 2 * h + 1));
        });
    gv_finish<T, true, R>(acc, y, M, N, n0);
#endif
}

/* Low halves (j even) or high halves (j odd) of word j / 2 of two loads,
 * as one bf16x2 / half2: lo's element first. */
__device__ __forceinline__ uint32_t pair(const uint4 &lo, const uint4 &hi, int j)
{
    return __byte_perm(word(lo, j >> 1), word(hi, j >> 1), (j & 1) ? 0x7632 : 0x5410);
}

/* [K, N]: block (bx, s) owns columns [64 bx, 64 bx + 64) and chunks of 16 k
 * as above. Thread (g, t) loads w[16c + 4t + i][n0 + 8g .. + 8) for i < 4:
 * element j of those is column g of tile j (n = n0 + 8g + j) at logical k
 * 2t, 2t+1 (i = 0, 1) and 2t+8, 2t+9 (i = 2, 3); x rows g and g + 8 at
 * 16c + 4t .. + 4 are the A fragment (8 bytes each). */
struct kn_stage {
    uint4 w[4];
    uint2 xa, xb;
};

template <typename T, int P>
__global__ void __launch_bounds__(GV_MAX_THREADS)
    gemv_kn_kernel(const T *x, const T *w, T *y, int M, int N, int K, bool pdl)
{
    pdl_start(pdl);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    constexpr int R = GV_KN_TILES;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int n0 = blockIdx.x * 64, nb = n0 + 8 * g;
    const bool nok = nb < N; /* N is a multiple of 8: a lane's 8 columns are all in or all out */
    const int C = (K + 15) / 16, S = gridDim.y, sp = blockIdx.y;
    const int c_end = (int)((int64_t)(sp + 1) * C / S);
    const T *wc = w + (nok ? nb : 0) + (int64_t)4 * t * N;
    const bool x0 = g < M, x1 = g + 8 < M;
    const T *xr0 = x + (int64_t)(x0 ? g : 0) * K + 4 * t, *xr1 = x + (int64_t)(x1 ? g + 8 : 0) * K + 4 * t;
    float acc[R][4];
#pragma unroll
    for (int j = 0; j < R; j++)
        acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
    const uint4 z = make_uint4(0, 0, 0, 0);
    const uint2 z2 = make_uint2(0, 0);
    kn_stage st[P];
    gv_pipeline<P>(
        (int)((int64_t)sp * C / S) + warp, nw, c_end, st,
        [&](kn_stage &s, int c) {
            int k = c * 16;
#pragma unroll
            for (int i = 0; i < 4; i++)
                s.w[i] = nok && k + 4 * t + i < K ? ld_stream(wc + (int64_t)(k + i) * N) : z;
            bool kin = k + 4 * t < K; /* K is a multiple of 8: 4 k from 4t are all in or all out */
            s.xa = kin && x0 ? __ldg((const uint2 *)(xr0 + k)) : z2;
            s.xb = kin && x1 ? __ldg((const uint2 *)(xr1 + k)) : z2;
        },
        [&](const kn_stage &s) {
#pragma unroll
            for (int j = 0; j < R; j++)
                mma16816<T>(acc[j], s.xa.x, s.xb.x, s.xa.y, s.xb.y, pair(s.w[0], s.w[1], j),
                            pair(s.w[2], s.w[3], j));
        });
    gv_finish<T, false, R>(acc, y, M, N, n0);
#endif
}

static int gv_wmax(bool wt) { return GV_RED_FLOATS / (128 * (wt ? GV_NK_TILES : GV_KN_TILES)); }

/* One wave of about 16 warps per multiprocessor, each streaming as many
 * chunks as the shape gives it: K is split over a cluster while the grid
 * has fewer blocks than the device has multiprocessors (and each split
 * keeps 2 chunks per warp), then each block gets the warps that bring the
 * grid to that size, at least one chunk each. */
static reel_gemv_cfg gv_pick(int64_t n, int64_t k, bool wt, int sms)
{
    reel_gemv_cfg c;
    /* [N, K] weights of up to 32 MiB: no cluster split and the most warps a
     * block takes was the fastest configuration of the sweep at every such
     * shape (bench/gemv.cu on an H200, docs/benchmarks.md: 1024 x 1024 3.57
     * us against 6.17 for the rule below). */
    if (wt && n * k <= ((int64_t)1 << 24)) {
        c.unroll = 3;
        c.splits = 1;
        c.warps = gv_wmax(wt);
        return c;
    }
    int64_t cols = wt ? 8 * GV_NK_TILES : 64, kc = wt ? 32 : 16;
    int64_t tiles = (n + cols - 1) / cols, chunks = (k + kc - 1) / kc;
    int64_t target = (int64_t)(sms > 0 ? sms : 1) * 16;
    int wmax = gv_wmax(wt);
    c.unroll = 3;
    c.splits = 1;
    while (c.splits < 8 && tiles * c.splits < sms && chunks / (2 * c.splits) >= 2)
        c.splits *= 2;
    c.warps = 1;
    while (c.warps < wmax && tiles * c.splits * c.warps * 2 <= target && chunks / (c.splits * c.warps * 2) >= 1)
        c.warps *= 2;
    return c;
}

template <typename T>
static cudaError_t gv_run(bool wt, const T *x, const T *w, T *y, int m, int n, int k, reel_gemv_cfg c,
                          cudaStream_t st, bool pdl)
{
    int64_t cols = wt ? 8 * GV_NK_TILES : 64;
    if (c.warps < 1 || c.warps > gv_wmax(wt) || (c.splits != 1 && c.splits != 2 && c.splits != 4 && c.splits != 8) ||
        c.unroll < 2 || c.unroll > 4)
        return cudaErrorInvalidValue;
    void (*kern)(const T *, const T *, T *, int, int, int, bool);
    if (wt)
        kern = c.unroll == 4 ? gemv_nk_kernel<T, 4> : c.unroll == 3 ? gemv_nk_kernel<T, 3> : gemv_nk_kernel<T, 2>;
    else
        kern = c.unroll == 4 ? gemv_kn_kernel<T, 4> : c.unroll == 3 ? gemv_kn_kernel<T, 3> : gemv_kn_kernel<T, 2>;
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute attr[2];
    int na = 0;
    if (c.splits > 1) {
        attr[na].id = cudaLaunchAttributeClusterDimension;
        attr[na].val.clusterDim.x = 1;
        attr[na].val.clusterDim.y = (unsigned)c.splits;
        attr[na].val.clusterDim.z = 1;
        na++;
    }
    if (pdl) {
        attr[na].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr[na].val.programmaticStreamSerializationAllowed = 1;
        na++;
    }
    cfg.gridDim = dim3((unsigned)((n + cols - 1) / cols), (unsigned)c.splits, 1);
    cfg.blockDim = dim3(32u * (unsigned)c.warps, 1, 1);
    cfg.dynamicSmemBytes = (size_t)c.warps * 128 * (wt ? GV_NK_TILES : GV_KN_TILES) * sizeof(float);
    cfg.stream = st;
    cfg.attrs = attr;
    cfg.numAttrs = (unsigned)na;
    return cudaLaunchKernelEx(&cfg, kern, x, w, y, m, n, k, pdl);
}

static bool gv_shape_ok(bool wt, int64_t n, int64_t k)
{
    return n > 0 && k > 0 && k % 8 == 0 && (wt || n % 8 == 0);
}

static reel_status gemv_launch(reel_backend *be, const reel_launch *l)
{
    const reel_shape *xs = &l->in_shape[0], *ws = &l->in_shape[1];
    bool wt = l->attrs->matmul.w_transposed;
    int64_t k = last_dim(xs), n = wt ? ws->dims[0] : ws->dims[1];
    int64_t m = k > 0 ? lead(xs, l->rows) * row_numel(xs) / k : 0;
    if (m <= 0 || n <= 0)
        return REEL_OK;
    if (m > GV_IMPL_MAX_M || !aligned16(l->in[0]) || !aligned16(l->in[1]) || !aligned16(l->out[0]))
        return reel_cu_matmul_lt_impl.launch(be, l);
    reel_gemv_cfg c = gv_pick(n, k, wt, be->caps.sm_count);
    cudaStream_t st = reel_cuda_stream_handle(l->stream);
    cudaError_t e = cudaSuccess;
    if (l->in_shape[0].dtype == REEL_F16)
        e = gv_run(wt, (const __half *)l->in[0], (const __half *)l->in[1], (__half *)l->out[0], (int)m, (int)n,
                   (int)k, c, st, l->pdl);
    else
        e = gv_run(wt, (const __nv_bfloat16 *)l->in[0], (const __nv_bfloat16 *)l->in[1],
                   (__nv_bfloat16 *)l->out[0], (int)m, (int)n, (int)k, c, st, l->pdl);
    return REEL_CU_LAUNCHED_E(be, "cuda.matmul.gemv", e);
}

/* Every node cuBLASLt takes (so the fallback is always there) with [N, K]
 * weights of at most GV_IMPL_MAX_WEIGHTS elements whose K is a multiple of
 * 8, on a device with thread-block clusters; a fixed (untokened) x only at
 * GV_IMPL_MAX_M rows or fewer. The kernel itself takes both layouts, any
 * N, K a multiple of 8 (and N, for [K, N]) and M up to 16 (the direct
 * entry below, which the tests and bench/gemv.cu use). */
static bool use_gemv(REEL_CU_USE_ARGS)
{
    /* Segmented outputs (fused views) go through cuBLAS (matmul.cu). */
    if (!reel_cu_matmul_lt_impl.can_use(in, nin, out, a, caps) || caps->cc_major < 9 || a->matmul.nseg != 0)
        return false;
    bool wt = a->matmul.w_transposed;
    int64_t k = last_dim(&in[0]), n = wt ? in[1].dims[0] : in[1].dims[1];
    if (!wt || !gv_shape_ok(wt, n, k) ||
        n * k > (k <= 1024 ? GV_IMPL_MAX_WEIGHTS_K1024 : GV_IMPL_MAX_WEIGHTS))
        return false;
    int64_t m = lead(&in[0], in[0].dims[0]) * row_numel(&in[0]) / k;
    return in[0].tokens || m <= GV_IMPL_MAX_M;
}

} /* namespace reel_cu */

extern "C" reel_gemv_cfg reel_cuda_gemv_pick(int64_t n, int64_t k, bool w_transposed, int sms)
{
    return reel_cu::gv_pick(n, k, w_transposed, sms);
}

extern "C" cudaError_t reel_cuda_gemv_run(reel_dtype dt, bool w_transposed, const void *x, const void *w, void *y,
                                          int m, int n, int k, reel_gemv_cfg cfg, cudaStream_t st, bool pdl)
{
    if (m < 1 || m > REEL_GEMV_MAX_M || !reel_cu::gv_shape_ok(w_transposed, n, k) || !reel_cu::aligned16(x) ||
        !reel_cu::aligned16(w) || !reel_cu::aligned16(y))
        return cudaErrorInvalidValue;
    if (dt == REEL_F16)
        return reel_cu::gv_run(w_transposed, (const __half *)x, (const __half *)w, (__half *)y, m, n, k, cfg, st,
                               pdl);
    if (dt == REEL_BF16)
        return reel_cu::gv_run(w_transposed, (const __nv_bfloat16 *)x, (const __nv_bfloat16 *)w,
                               (__nv_bfloat16 *)y, m, n, k, cfg, st, pdl);
    return cudaErrorInvalidValue;
}

namespace reel_cu {
/* Blocks of the launch gemv_launch makes (one wave or less for the shapes
 * it takes: programmatic launch by default, exec/schedule.c). */
static int64_t gemv_grid(const reel_launch *l, const reel_device_caps *caps)
{
    bool wt = l->attrs->matmul.w_transposed;
    int64_t k = last_dim(&l->in_shape[0]), n = wt ? l->in_shape[1].dims[0] : l->in_shape[1].dims[1];
    reel_gemv_cfg c = gv_pick(n, k, wt, caps->sm_count);
    int64_t cols = wt ? 8 * GV_NK_TILES : 64;
    return (n + cols - 1) / cols * c.splits;
}

static reel_op_impl gemv_impl(void)
{
    reel_op_impl i = make_impl("cuda.matmul.gemv", REEL_OP_MATMUL, 30, true, false, use_gemv, gemv_launch);
    i.grid_blocks = gemv_grid;
    return i;
}
} /* namespace reel_cu */

extern "C" const reel_op_impl reel_cu_matmul_gemv_impl = reel_cu::gemv_impl();
