/* CUDA skinny matmul, the decode regime: x [M, K] (M <= 32 for w [N, K],
 * w_transposed, the checkpoint layout; M <= 16 for w [K, N]), f16 or bf16,
 * float32 accumulation. At such M a matmul is a stream over the weights, so the
 * kernel is built around reading each weight byte once, 16 bytes a load,
 * with enough loads in flight to keep HBM busy:
 *
 * - The arithmetic runs on the tensor cores (mma.sync m16n8k16): A is x,
 *   a tile of 16 of the M rows (rows past M are zeros, never loaded), B is a
 *   tile of 8 weight rows or columns. A dot product does not care in which
 *   order k is summed, so the logical k of the fragments is mapped onto
 *   physical k (and, for [K, N], the logical column onto n) such that each
 *   thread's B fragment is whole 16-byte loads of w: no shared memory, no
 *   shuffles. At M = 16 a CUDA-core kernel would need ~64 TFLOP/s of fp32
 *   FMA to keep up with 4 TB/s, the chip's whole rate.
 * - [N, K]: a warp owns 32 weight rows (4 tiles of 8) and walks K 32 at a
 *   time; each thread loads 16 bytes of each of its 4 rows per step and 16
 *   bytes of x for rows g and g+8 of each row tile (x is read through L1:
 *   every warp of the SM reads the same x), for up to 2 row tiles (32
 *   rows), each weight fragment multiplied with both.
 *   [K, N]: a warp owns 64 columns and walks K 16 at a time; each thread
 *   loads 16 bytes (8 columns) of 4 consecutive k rows, one B fragment of
 *   each of 8 column tiles once paired up with byte permutes.
 * - Each warp runs its chunks of K as a register pipeline (gv_pipeline):
 *   the loads of the next chunks are issued before the current one is
 *   multiplied, so the stream does not drain between steps. Launched
 *   programmatically with w a parameter of the plan (reel_launch.in_param),
 *   a warp issues its first stages' weight loads before its dependency
 *   wait: they fly while the kernel before ends, and only x waits for it
 *   (a decode step 3-7% faster at batches 1 and 8, docs/benchmarks.md).
 * - Split-K without scratch and without atomics: the warps of a block split
 *   the block's share of K and add up in shared memory in warp order; for
 *   short, wide grids (small N, tall K) the blocks of a thread-block
 *   cluster split K further and add up through distributed shared memory in
 *   rank order. Every sum has a fixed order for a given configuration, and
 *   the configuration depends on (N, K, the device) only, not on M (a row
 *   tile's sums are the same instructions whatever the tile): a run
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

/* Where the impl runs the kernel, and where it leaves the node to cuBLASLt.
 * One node alone in a graph (bench/gemv.cu on an H200, docs/benchmarks.md),
 * cuBLASLt was faster on most shapes (3.9-4.0 TB/s at 112 MiB against the
 * kernel's 3.2-3.5); inside a decode step the kernel (then prefetching its
 * weights into L2 before its programmatic wait) takes the fused epilogues,
 * and there the kernel on every [N, K] weight at up to 16 rows measured faster
 * (bench/gpu.sh ab, same run: hidden 2048, batch 1, context 128, 715 ->
 * 639 us a step; hidden 1024 unchanged within 1 %). The first rule (1 Mi
 * elements, then 16 Mi at K <= 1024 and 4 Mi beyond) is REEL_GEMV_NARROW. */
#ifndef REEL_GEMV_NARROW /* 1: the first rule's limits (bench/gpu.sh ab's A/B build) */
#define REEL_GEMV_NARROW 0
#endif
static const int64_t GV_IMPL_MAX_WEIGHTS = (int64_t)1 << (REEL_GEMV_NARROW ? 22 : 40); /* elements of w, any K */
static const int64_t GV_IMPL_MAX_WEIGHTS_K1024 = (int64_t)1 << (REEL_GEMV_NARROW ? 24 : 40); /* with K <= 1024 */
/* -DREEL_GEMV_MAX_MI=N leaves weights of more than N Mi elements to
 * cuBLASLt at every batch (0: none; A/B builds of the lm head's impl). */
#ifndef REEL_GEMV_MAX_MI
#define REEL_GEMV_MAX_MI 0
#endif
static const int64_t GV_IMPL_MAX_ANY = REEL_GEMV_MAX_MI > 0 ? (int64_t)REEL_GEMV_MAX_MI << 20 : (int64_t)1 << 40;
/* Bytes of weights a launch asks L2 for before its wait, at most (a larger
 * weight has each row's first GV_PREFETCH_MAX / N bytes asked for). None by
 * default: in the decode step a prefetch of up to 24 MiB (half the H200's
 * L2) measured 3.2% and 4.6% slower a step at batch 1 (hidden 2048 and
 * 1024) and no faster at batches 8 and 32 (bench/gpu.sh ab,
 * docs/benchmarks.md); -DREEL_GEMV_PREFETCH_MIB=24 builds it for A/B. */
#ifndef REEL_GEMV_PREFETCH_MIB
#define REEL_GEMV_PREFETCH_MIB 0
#endif
static const int64_t GV_PREFETCH_MAX = (int64_t)REEL_GEMV_PREFETCH_MIB << 20;
/* A programmatic launch whose weights are a parameter loads its first
 * stages' weights before its wait (gv_pipeline); -DREEL_GEMV_W_EARLY=0
 * builds the loads after it, for A/B. */
#ifndef REEL_GEMV_W_EARLY
#define REEL_GEMV_W_EARLY 1
#endif
/* Rows the kernels take: 16 a row tile, two tiles for [N, K] weights. The
 * impl runs the kernel at up to REEL_GEMV_IMPL_ROWS (cuBLASLt above): in a
 * decode step at batches 24 and 32 two tiles measured faster than cuBLASLt
 * (docs/benchmarks.md); -DREEL_GEMV_IMPL_ROWS=16 builds the one-tile limit
 * for bench/gpu.sh ab. */
static const int GV_NK_MAX_M = 32, GV_KN_MAX_M = 16;
#ifndef REEL_GEMV_IMPL_ROWS
#define REEL_GEMV_IMPL_ROWS 32
#endif
static_assert(REEL_GEMV_IMPL_ROWS >= 1 && REEL_GEMV_IMPL_ROWS <= GV_NK_MAX_M, "the kernel takes at most 32 rows");
static const int64_t GV_IMPL_MAX_M = REEL_GEMV_IMPL_ROWS;
/* A weight of more than REEL_GEMV_LARGE_MI Mi elements (gemv.h) takes the
 * kernel at up to REEL_GEMV_LARGE_ROWS rows only, cuBLASLt beyond: in a
 * decode step at hidden 2048 (q/k/v 12.6 Mi, gate/up 33.5 Mi, down 16.8 Mi
 * elements), cuBLASLt at 24 and 32 rows was 1-9% faster a step than the
 * kernel's two row tiles, and the kernel's one tile (its first weights
 * loaded before the programmatic wait) 5-10% faster than cuBLASLt at 9 and
 * 16 rows (bench/gpu.sh ab, docs/benchmarks.md), where at hidden 1024
 * (every layer weight 8 Mi elements or fewer) the kernel stays faster to
 * 32. */
static const int64_t GV_LARGE_WEIGHTS = (int64_t)REEL_GEMV_LARGE_MI << 20, GV_LARGE_MAX_M = REEL_GEMV_LARGE_ROWS;

/* What the kernel does with a sum before it stores it (the matmul's fused
 * epilogue and segments, ops/op.h), rounding where the unfused ops do: the
 * product is rounded to the storage type first, then
 * - BIAS: b[n] added, rounded again (matmul, then add of a row);
 * - SILU_MUL: w is [gate; up] ([2F, K]), and block b's tiles 0-1 are gate
 *   rows 16b .. 16b + 16, tiles 2-3 the up rows F + 16b .. : output column
 *   n of [M, F] is silu(gate) * up of the two rounded products, as
 *   silu_and_mul computes it (elementwise.cu);
 * - segments (nseg > 0): output columns [cs[s], cs[s + 1]) are a row-major
 *   [M, cs[s + 1] - cs[s]] block at element M * cs[s]. */
struct gv_epi {
    int kind; /* REEL_MM_EPI_* */
    bool w_early; /* w is a parameter: the first stages' weights are loaded before the wait */
    int pf_lines; /* 128-byte lines of each weight row gv_prefetch asks for, at most */
    const void *bias;
    int nseg;
    int cs[REEL_MM_MAX_SEG + 1];
};

/* No epilogue, no segments; every line of the weights prefetched where the
 * build prefetches at all (REEL_GEMV_PREFETCH_MIB). */
static inline gv_epi gv_plain()
{
    gv_epi e = {};
    e.pf_lines = GV_PREFETCH_MAX > 0 ? INT32_MAX : 0;
    return e;
}

__device__ __forceinline__ float silu_mul_f(float a, float b) { return a / (1.0f + expf(-a)) * b; }

template <typename T> __device__ __forceinline__ float rnd(float v) { return to_f(from_f<T>(v)); }

/* Where output (m, n) of an [M, N] result goes. */
__device__ __forceinline__ int64_t gv_at(const gv_epi &e, int M, int N, int m, int n)
{
    if (e.nseg == 0)
        return (int64_t)m * N + n;
    int s = 0;
    while (s + 1 < e.nseg && n >= e.cs[s + 1])
        s++;
    return (int64_t)M * e.cs[s] + (int64_t)m * (e.cs[s + 1] - e.cs[s]) + (n - e.cs[s]);
}

/* Row `row` of w for tile j of the block that starts at output column n0
 * (N: w's rows; SILU_MUL pairs gate tile j with up tile j + 2). */
__device__ __forceinline__ int gv_row(int kind, int N, int n0, int j, int g)
{
    if (kind == REEL_MM_EPI_SILU_MUL)
        return j < 2 ? n0 + 8 * j + g : N / 2 + n0 + 8 * (j - 2) + g;
    return n0 + 8 * j + g;
}

__device__ __forceinline__ bool gv_row_ok(int kind, int N, int n0, int j, int g)
{
    if (kind == REEL_MM_EPI_SILU_MUL)
        return n0 + 8 * (j & 1) + g < N / 2;
    return n0 + 8 * j + g < N;
}

/* Built with REEL_GEMV_PREFETCH_MIB > 0: before its dependency wait, a
 * programmatic launch asks L2 for the block's
 * share of the weights (rows 8j + g of its tiles, k in [kb, ke)), which no
 * kernel of the step writes: the stream over w overlaps the tail of the
 * kernel before, and the loads after the wait hit L2. */
template <typename T>
__device__ __forceinline__ void gv_prefetch(const T *w, int kind, int N, int K, int n0, int kb, int ke, int cap)
{
    int lines = (int)(((int64_t)(ke - kb) * sizeof(T) + 127) / 128);
    lines = lines < cap ? lines : cap;
    for (int i = threadIdx.x; i < 32 * lines; i += blockDim.x) {
        int r = i / lines, l = i - r * lines, j = r >> 3, g = r & 7;
        if (!gv_row_ok(kind, N, n0, j, g))
            continue;
        const char *a = (const char *)(w + (int64_t)gv_row(kind, N, n0, j, g) * K + kb) + 128 * l;
        asm volatile("prefetch.global.L2 [%0];" ::"l"(a));
    }
}

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
__device__ void gv_finish(float (&acc)[R][4], T *y, int M, int N, int n0, int m0, const gv_epi &ep)
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
    /* The block's sum of partial q: ranks 0, 1, ... in order, whichever
     * rank sums. */
    auto total = [&](int q) {
        float s = red[q];
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
        if (ranks > 1) {
            s = cl.map_shared_rank(red, 0)[q];
            for (int r = 1; r < ranks; r++)
                s += cl.map_shared_rank(red, r)[q];
        }
#endif
        return s;
    };
    const bool silu = ep.kind == REEL_MM_EPI_SILU_MUL;
    const int nout = silu ? N / 2 : N;
    for (int q = threadIdx.x; q < per; q += blockDim.x) {
        if (q % ranks != rank)
            continue;
        int e = q >> 5, ln = q & 31, j = e >> 2, c = e & 3;
        if (silu && j >= 2)
            continue; /* up tiles: read with their gate tile */
        int m = m0 + (ln >> 2) + (c >= 2 ? 8 : 0), col = 2 * (ln & 3) + (c & 1);
        int n = WT ? n0 + 8 * j + col : n0 + 8 * col + j;
        if (m >= M || n >= nout)
            continue;
        float v = rnd<T>(total(q));
        if (silu)
            v = silu_mul_f(v, rnd<T>(total(q + 2 * 4 * 32)));
        else if (ep.kind == REEL_MM_EPI_BIAS)
            v += to_f(((const T *)ep.bias)[n]);
        y[gv_at(ep, M, nout, m, n)] = from_f<T>(v);
    }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (ranks > 1)
        cl.sync(); /* no block leaves (or refills red) while another reads its shared memory */
    else
#endif
        __syncthreads(); /* red is refilled by the next row tile */
}

/* The chunks of one warp, c0, c0 + nw, ... below c_end, run as a register
 * pipeline P stages deep: chunk i + P - 1 is loaded before chunk i is
 * multiplied, so each warp keeps P - 1 chunks of loads in flight while it
 * computes, and the stream over the weights never drains between steps.
 * A stage's loads are the weights' (load_w) and x's (load_x); wait() is the
 * dependency wait, after which x may be read. With early, the first P - 1
 * stages' weights are loaded before it (w is a parameter: the kernel
 * before, still running, does not write it), so the stream starts in the
 * predecessor's tail and the first chunks need no round trip after the
 * wait. */
template <int P, typename Stage, typename LoadW, typename LoadX, typename Compute, typename Wait>
__device__ __forceinline__ void gv_pipeline(int c0, int nw, int c_end, Stage (&st)[P], bool early, Wait wait,
                                            LoadW load_w, LoadX load_x, Compute compute)
{
    const int n = c0 < c_end ? (c_end - c0 + nw - 1) / nw : 0;
    if (early) {
#pragma unroll
        for (int p = 0; p < P - 1; p++)
            if (p < n)
                load_w(st[p], c0 + p * nw);
    }
    wait();
#pragma unroll
    for (int p = 0; p < P - 1; p++)
        if (p < n) {
            if (!early)
                load_w(st[p], c0 + p * nw);
            load_x(st[p], c0 + p * nw);
        }
    for (int i0 = 0; i0 < n; i0 += P) {
#pragma unroll
        for (int p = 0; p < P; p++) {
            int i = i0 + p;
            if (i + P - 1 < n) {
                load_w(st[(p + P - 1) % P], c0 + (i + P - 1) * nw);
                load_x(st[(p + P - 1) % P], c0 + (i + P - 1) * nw);
            }
            if (i < n)
                compute(st[p]);
        }
    }
}

/* [N, K]: block (bx, s) owns rows [32 bx, 32 bx + 32) and chunks of 32 k
 * [s C / S, (s + 1) C / S); warp w takes chunks w, w + W, ... Thread (g, t)
 * loads w[n0 + 8j + g][32c + 8t .. + 8) for tile j: B fragment words 0-1 are
 * mma step 0 (logical k 2t, 2t+1 and 2t+8, 2t+9), words 2-3 step 1; x rows g
 * and g + 8 at the same k are the A fragment likewise, for each of the MT
 * tiles of 16 rows (rows 16i + g and 16i + g + 8 of tile i). A weight
 * fragment is multiplied with every row tile, so the weights are read once
 * whatever M; each tile's sums are the same instructions in the same order
 * as at one tile, so a row's bits do not depend on MT. */
template <int MT> struct nk_stage {
    uint4 w[GV_NK_TILES], xa[MT], xb[MT];
};

template <typename T, int P, int MT>
__global__ void __launch_bounds__(GV_MAX_THREADS)
    gemv_nk_kernel(const T *x, const T *w, T *y, int M, int N, int K, bool pdl, gv_epi ep)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    constexpr int R = GV_NK_TILES;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int n0 = blockIdx.x * (ep.kind == REEL_MM_EPI_SILU_MUL ? 16 : 8 * R);
    const int C = (K + 31) / 32, S = gridDim.y, sp = blockIdx.y;
    const int c_begin = (int)((int64_t)sp * C / S), c_end = (int)((int64_t)(sp + 1) * C / S);
    if (pdl)
        gv_prefetch(w, ep.kind, N, K, n0, c_begin * 32, c_end * 32 < K ? c_end * 32 : K, ep.pf_lines);
    const T *wr[R];
    bool wok[R];
#pragma unroll
    for (int j = 0; j < R; j++) {
        wok[j] = gv_row_ok(ep.kind, N, n0, j, g);
        wr[j] = w + (int64_t)(wok[j] ? gv_row(ep.kind, N, n0, j, g) : 0) * K + 8 * t;
    }
    /* Row 16i + g of x is xr + 16 i K (i < MT), row 16i + g + 8 that plus
     * 8 K; a row past M is never loaded. */
    const T *xr = x + (int64_t)g * K + 8 * t;
    float acc[MT][R][4];
#pragma unroll
    for (int i = 0; i < MT; i++)
#pragma unroll
        for (int j = 0; j < R; j++)
            acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.0f;
    const uint4 z = make_uint4(0, 0, 0, 0);
    nk_stage<MT> st[P];
    gv_pipeline<P>(
        c_begin + warp, nw, c_end, st, pdl && ep.w_early, [&] { pdl_start(pdl); },
        [&](nk_stage<MT> &s, int c) {
            int k = c * 32;
            bool in = k + 8 * t < K;
#pragma unroll
            for (int j = 0; j < R; j++)
                s.w[j] = in && wok[j] ? ld_stream(wr[j] + k) : z;
        },
        [&](nk_stage<MT> &s, int c) {
            int k = c * 32;
            bool in = k + 8 * t < K;
#pragma unroll
            for (int i = 0; i < MT; i++) {
                const T *xi = xr + (int64_t)16 * i * K + k;
                s.xa[i] = in && 16 * i + g < M ? __ldg((const uint4 *)xi) : z;
                s.xb[i] = in && 16 * i + g + 8 < M ? __ldg((const uint4 *)(xi + (int64_t)8 * K)) : z;
            }
        },
        [&](const nk_stage<MT> &s) {
#pragma unroll
            for (int h = 0; h < 2; h++)
#pragma unroll
                for (int i = 0; i < MT; i++)
#pragma unroll
                    for (int j = 0; j < R; j++)
                        mma16816<T>(acc[i][j], word(s.xa[i], 2 * h), word(s.xb[i], 2 * h),
                                    word(s.xa[i], 2 * h + 1), word(s.xb[i], 2 * h + 1), word(s.w[j], 2 * h),
                                    word(s.w[j], 2 * h + 1));
        });
#pragma unroll
    for (int i = 0; i < MT; i++)
        if (16 * i < M)
            gv_finish<T, true, R>(acc[i], y, M, N, n0, 16 * i, ep);
#else
    pdl_start(pdl);
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
    gemv_kn_kernel(const T *x, const T *w, T *y, int M, int N, int K, bool pdl, gv_epi ep)
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
        (int)((int64_t)sp * C / S) + warp, nw, c_end, st, false, [] {}, /* waited above */
        [&](kn_stage &s, int c) {
            int k = c * 16;
#pragma unroll
            for (int i = 0; i < 4; i++)
                s.w[i] = nok && k + 4 * t + i < K ? ld_stream(wc + (int64_t)(k + i) * N) : z;
            bool kin = k + 4 * t < K; /* K is a multiple of 8: 4 k from 4t are all in or all out */
            s.xa = kin && x0 ? __ldg((const uint2 *)(xr0 + k)) : z2;
            s.xb = kin && x1 ? __ldg((const uint2 *)(xr1 + k)) : z2;
        },
        [](kn_stage &, int) {},
        [&](const kn_stage &s) {
#pragma unroll
            for (int j = 0; j < R; j++)
                mma16816<T>(acc[j], s.xa.x, s.xb.x, s.xa.y, s.xb.y, pair(s.w[0], s.w[1], j),
                            pair(s.w[2], s.w[3], j));
        });
    gv_finish<T, false, R>(acc, y, M, N, n0, 0, ep);
#endif
}

static int gv_wmax(bool wt) { return GV_RED_FLOATS / (128 * (wt ? GV_NK_TILES : GV_KN_TILES)); }

/* Output columns a block of the [N, K] kernel owns: 32, or 16 gate and 16
 * up rows for SILU_MUL. */
static int64_t gv_blocks(int64_t n, bool wt, int epi)
{
    if (!wt)
        return (n + 63) / 64;
    return epi == REEL_MM_EPI_SILU_MUL ? (n / 2 + 15) / 16 : (n + 8 * GV_NK_TILES - 1) / (8 * GV_NK_TILES);
}

/* The cluster split of [N, K] weights up to 32 MiB: K halves while each
 * part keeps REEL_GEMV_SPLIT_CHUNK columns and the grid fits the
 * multiprocessors, up to REEL_GEMV_SPLIT_MAX parts (bench/gpu.sh ab
 * builds others). */
#ifndef REEL_GEMV_SPLIT_CHUNK
#define REEL_GEMV_SPLIT_CHUNK 1024
#endif
#ifndef REEL_GEMV_SPLIT_MAX
#define REEL_GEMV_SPLIT_MAX 2
#endif

/* One wave of about 16 warps per multiprocessor, each streaming as many
 * chunks as the shape gives it: K is split over a cluster while the grid
 * has fewer blocks than the device has multiprocessors (and each split
 * keeps 2 chunks per warp), then each block gets the warps that bring the
 * grid to that size, at least one chunk each. */
#ifndef REEL_GEMV_UNROLL /* the pipeline's stages, 2 to 4 (A/B builds) */
#define REEL_GEMV_UNROLL 3
#endif
#ifndef REEL_GEMV_WAVE_WARPS /* the warps a multiprocessor's share of the wave (A/B builds) */
#define REEL_GEMV_WAVE_WARPS 16
#endif
static_assert(REEL_GEMV_UNROLL >= 2 && REEL_GEMV_UNROLL <= 4, "gv_kernel has 2 to 4 stages");

static reel_gemv_cfg gv_pick_epi(int64_t n, int64_t k, bool wt, int sms, int epi)
{
    reel_gemv_cfg c;
    const int64_t wave = (int64_t)(sms > 0 ? sms : 1) * REEL_GEMV_WAVE_WARPS; /* warps */
    /* [N, K] weights of up to 32 MiB: no cluster split and the most warps a
     * block takes was the fastest configuration of the sweep at every such
     * shape (bench/gemv.cu on an H200, docs/benchmarks.md: 1024 x 1024 3.57
     * us against 6.17 for the rule below). A grid of more blocks than
     * multiprocessors (gate and up fused, 16 columns a block) takes fewer
     * warps a block, down to 4, so it still fits in one wave. */
    if (wt && n * k <= ((int64_t)1 << 24)) {
        c.unroll = REEL_GEMV_UNROLL;
        c.splits = 1;
        c.warps = gv_wmax(wt);
        while (c.warps > 4 && gv_blocks(n, wt, epi) * c.warps > wave)
            c.warps /= 2;
        /* Tall K on a grid of at most half the multiprocessors (down, 1024
         * x 4096): a cluster of 2 splits K (the sweep's best there, 16
         * warps and 2 splits: 6.2 us against 11.2 for 8 splits). */
        while (c.splits < REEL_GEMV_SPLIT_MAX && k / (2 * c.splits) >= REEL_GEMV_SPLIT_CHUNK &&
               gv_blocks(n, wt, epi) * c.splits * 2 <= sms)
            c.splits *= 2;
        return c;
    }
    int64_t kc = wt ? 32 : 16;
    int64_t tiles = gv_blocks(n, wt, epi), chunks = (k + kc - 1) / kc;
    int wmax = gv_wmax(wt);
    c.unroll = REEL_GEMV_UNROLL;
    c.splits = 1;
    while (c.splits < 8 && tiles * c.splits < sms && chunks / (2 * c.splits) >= 2)
        c.splits *= 2;
    c.warps = 1;
    while (c.warps < wmax && tiles * c.splits * c.warps * 2 <= wave && chunks / (c.splits * c.warps * 2) >= 1)
        c.warps *= 2;
    return c;
}

static reel_gemv_cfg gv_pick(int64_t n, int64_t k, bool wt, int sms)
{
    return gv_pick_epi(n, k, wt, sms, REEL_MM_EPI_NONE);
}

template <typename T> using gv_kernel_t = void (*)(const T *, const T *, T *, int, int, int, bool, gv_epi);

static bool gv_cfg_ok(bool wt, reel_gemv_cfg c)
{
    return c.warps >= 1 && c.warps <= gv_wmax(wt) && (c.splits == 1 || c.splits == 2 || c.splits == 4 || c.splits == 8) &&
           c.unroll >= 2 && c.unroll <= 4;
}

/* Row tiles of 16 the [N, K] kernel takes for M rows: at most 2 (4 spill
 * at 512 threads a block). Beyond 32 rows cuBLASLt was faster than both
 * four tiles in two 32-row slices of the grid and one-tile slices (a
 * decode step at batch 48 and 64: docs/benchmarks.md). */
static int gv_tiles(int64_t m)
{
    return m <= 16 ? 1 : 2;
}

/* The kernel for a configuration and a row-tile count: the pipeline depth
 * is the configuration's at one tile; two tiles hold their x fragments and
 * accumulators in the registers a deeper pipeline would take, and run two
 * stages (the depth changes no sum's order). */
template <typename T> static gv_kernel_t<T> gv_kernel(bool wt, int unroll, int mt)
{
    if (wt && mt == 2)
        return gemv_nk_kernel<T, 2, 2>;
    if (wt)
        return unroll == 4 ? gemv_nk_kernel<T, 4, 1> : unroll == 3 ? gemv_nk_kernel<T, 3, 1> : gemv_nk_kernel<T, 2, 1>;
    return unroll == 4 ? gemv_kn_kernel<T, 4> : unroll == 3 ? gemv_kn_kernel<T, 3> : gemv_kn_kernel<T, 2>;
}

static size_t gv_smem(bool wt, reel_gemv_cfg c)
{
    return (size_t)c.warps * 128 * (wt ? GV_NK_TILES : GV_KN_TILES) * sizeof(float);
}

template <typename T>
static cudaError_t gv_run(bool wt, const T *x, const T *w, T *y, int m, int n, int k, reel_gemv_cfg c,
                          cudaStream_t st, bool pdl, const gv_epi &ep)
{
    if (!gv_cfg_ok(wt, c) || (!wt && ep.kind == REEL_MM_EPI_SILU_MUL) || m < 1 || m > (wt ? GV_NK_MAX_M : GV_KN_MAX_M))
        return cudaErrorInvalidValue;
    gv_kernel_t<T> kern = gv_kernel<T>(wt, c.unroll, gv_tiles(m));
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
    cfg.gridDim = dim3((unsigned)gv_blocks(n, wt, ep.kind), (unsigned)c.splits, 1);
    cfg.blockDim = dim3(32u * (unsigned)c.warps, 1, 1);
    cfg.dynamicSmemBytes = gv_smem(wt, c);
    cfg.stream = st;
    cfg.attrs = attr;
    cfg.numAttrs = (unsigned)na;
    return cudaLaunchKernelEx(&cfg, kern, x, w, y, m, n, k, pdl, ep);
}

static bool gv_shape_ok(bool wt, int64_t n, int64_t k)
{
    return n > 0 && k > 0 && k % 8 == 0 && (wt || n % 8 == 0);
}

/* The node as cuBLASLt and the elementwise kernels run it: the launches
 * with more rows than the kernel takes, or unaligned pointers. The plain
 * product (segments included) is cuBLASLt's; BIAS adds the row in place
 * after it; SILU_MUL stages the product in the node's scratch output and
 * runs silu_and_mul from there: the unfused ops, the same rounding. */
static reel_status gemv_fallback(reel_backend *be, const reel_launch *l)
{
    int epi = l->attrs->matmul.epi;
    if (epi == REEL_MM_EPI_NONE)
        return reel_cu_matmul_lt_impl.launch(be, l);
    reel_op_attrs plain = *l->attrs;
    plain.matmul.epi = REEL_MM_EPI_NONE;
    reel_launch mm = *l;
    mm.attrs = &plain;
    mm.pdl = false;
    reel_launch ew = *l;
    ew.pdl = false;
    if (epi == REEL_MM_EPI_SILU_MUL) {
        mm.out[0] = l->out[1];
        mm.out_shape = &l->out_shape[1];
        REEL_TRY(reel_cu_matmul_lt_impl.launch(be, &mm));
        ew.op = REEL_OP_SILU_AND_MUL;
        ew.in[0] = l->out[1];
        ew.in_shape = &l->out_shape[1];
        return reel_cu_silu_and_mul_impl.launch(be, &ew);
    }
    REEL_TRY(reel_cu_matmul_lt_impl.launch(be, &mm));
    /* The row added to each segment's block in place: segment s is
     * [rows, seg[s]] at element rows * c_s, its bias the row's c_s .. */
    const int nseg = l->attrs->matmul.nseg > 0 ? l->attrs->matmul.nseg : 1;
    const size_t es = reel_dtype_size(l->out_shape[0].dtype);
    const int64_t k = last_dim(&l->in_shape[0]), m = lead(&l->in_shape[0], l->rows) * row_numel(&l->in_shape[0]) / k;
    int64_t c0 = 0;
    for (int s = 0; s < nseg; s++) {
        int64_t ns = l->attrs->matmul.nseg > 0 ? l->attrs->matmul.seg[s] : last_dim(&l->out_shape[0]);
        reel_shape add_in[2] = {l->out_shape[0], l->in_shape[2]}, add_out = l->out_shape[0];
        add_in[0].dims[1] = add_out.dims[1] = ns;
        add_in[1].dims[0] = ns;
        ew.op = REEL_OP_ADD;
        add_in[0].dims[0] = add_out.dims[0] = m;
        ew.rows = m;
        ew.in[0] = ew.out[0] = (char *)l->out[0] + (size_t)(m * c0) * es;
        ew.in[1] = (char *)l->in[2] + (size_t)c0 * es;
        ew.in_shape = add_in;
        ew.out_shape = &add_out;
        REEL_TRY(reel_cu_add_impl.launch(be, &ew));
        c0 += ns;
    }
    return REEL_OK;
}

static reel_status gemv_launch(reel_backend *be, const reel_launch *l)
{
    const reel_shape *xs = &l->in_shape[0], *ws = &l->in_shape[1];
    const reel_op_attrs *a = l->attrs;
    bool wt = a->matmul.w_transposed;
    int64_t k = last_dim(xs), n = wt ? ws->dims[0] : ws->dims[1];
    int64_t m = k > 0 ? lead(xs, l->rows) * row_numel(xs) / k : 0;
    if (m <= 0 || n <= 0)
        return REEL_OK;
    if (m > GV_IMPL_MAX_M || (m > GV_LARGE_MAX_M && n * k > GV_LARGE_WEIGHTS) || !aligned16(l->in[0]) ||
        !aligned16(l->in[1]) || !aligned16(l->out[0]))
        return gemv_fallback(be, l);
    gv_epi ep = {};
    ep.kind = a->matmul.epi;
    int64_t wbytes = n * k * (int64_t)sizeof(uint16_t);
    ep.pf_lines = wbytes <= GV_PREFETCH_MAX ? INT32_MAX : (int)(GV_PREFETCH_MAX / n / 128);
    ep.bias = ep.kind == REEL_MM_EPI_BIAS ? l->in[2] : NULL;
    ep.w_early = REEL_GEMV_W_EARLY && (l->in_param >> 1 & 1u);
    ep.nseg = a->matmul.nseg;
    for (int s = 0; s < ep.nseg; s++)
        ep.cs[s + 1] = ep.cs[s] + (int)a->matmul.seg[s];
    reel_gemv_cfg c = gv_pick_epi(n, k, wt, be->caps.sm_count, ep.kind);
    cudaStream_t st = reel_cuda_stream_handle(l->stream);
    cudaError_t e = cudaSuccess;
    if (l->in_shape[0].dtype == REEL_F16)
        e = gv_run(wt, (const __half *)l->in[0], (const __half *)l->in[1], (__half *)l->out[0], (int)m, (int)n,
                   (int)k, c, st, l->pdl, ep);
    else
        e = gv_run(wt, (const __nv_bfloat16 *)l->in[0], (const __nv_bfloat16 *)l->in[1],
                   (__nv_bfloat16 *)l->out[0], (int)m, (int)n, (int)k, c, st, l->pdl, ep);
    return REEL_CU_LAUNCHED_E(be, "cuda.matmul.gemv", e);
}

/* The nodes the impl takes: [N, K] weights (within the limits above), K a
 * multiple of 8, on a device with thread-block clusters; plain, BIAS or
 * SILU_MUL, with segments or without; a fixed (untokened) x only at
 * GV_IMPL_MAX_M rows or fewer. The kernel itself takes both layouts, any
 * N, K a multiple of 8 (and N, for [K, N]) and M up to 32 (16 for [K, N]: the direct entry
 * below, which the tests and bench/gemv.cu use). */
static bool use_gemv(REEL_CU_USE_ARGS)
{
    if (caps->cc_major < 9 || nin < 2 || in[0].dtype != in[1].dtype)
        return false;
    const int epi = a->matmul.epi;
    reel_op_attrs plain = *a;
    plain.matmul.epi = REEL_MM_EPI_NONE;
    /* cuBLASLt runs the launches the kernel does not: it must take the
     * product, and the elementwise kernels the epilogue. */
    if (!reel_cu_matmul_lt_impl.can_use(in, nin, out, &plain, caps))
        return false;
    if (epi == REEL_MM_EPI_BIAS && (nin < 3 || in[2].dtype != in[0].dtype))
        return false;
    /* No rmsnorm prologue: normalizing x in every block measured slower
     * than add_rmsnorm's own kernel at every batch (docs/decisions.md). */
    if (a->matmul.pro != REEL_MM_PRO_NONE)
        return false;
    if (epi != REEL_MM_EPI_NONE && epi != REEL_MM_EPI_BIAS && epi != REEL_MM_EPI_SILU_MUL)
        return false;
    bool wt = a->matmul.w_transposed;
    int64_t k = last_dim(&in[0]), n = wt ? in[1].dims[0] : in[1].dims[1];
    if (!wt || !gv_shape_ok(wt, n, k) || (epi == REEL_MM_EPI_SILU_MUL && n % 2 != 0) ||
        n * k > (k <= 1024 ? GV_IMPL_MAX_WEIGHTS_K1024 : GV_IMPL_MAX_WEIGHTS) || n * k > GV_IMPL_MAX_ANY)
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
    if (m < 1 || m > (w_transposed ? REEL_GEMV_MAX_M : REEL_GEMV_MAX_M_KN) || !reel_cu::gv_shape_ok(w_transposed, n, k) || !reel_cu::aligned16(x) ||
        !reel_cu::aligned16(w) || !reel_cu::aligned16(y))
        return cudaErrorInvalidValue;
    if (dt == REEL_F16)
        return reel_cu::gv_run(w_transposed, (const __half *)x, (const __half *)w, (__half *)y, m, n, k, cfg, st,
                               pdl, reel_cu::gv_plain());
    if (dt == REEL_BF16)
        return reel_cu::gv_run(w_transposed, (const __nv_bfloat16 *)x, (const __nv_bfloat16 *)w,
                               (__nv_bfloat16 *)y, m, n, k, cfg, st, pdl, reel_cu::gv_plain());
    return cudaErrorInvalidValue;
}

namespace reel_cu {
/* Multiprocessors the launch gemv_launch makes fills: its blocks over the
 * blocks one multiprocessor holds at once (one wave or less for the shapes
 * it takes: programmatic launch by default, runtime/schedule.c). */
static int64_t gemv_grid(const reel_launch *l, const reel_device_caps *caps)
{
    bool wt = l->attrs->matmul.w_transposed;
    int epi = l->attrs->matmul.epi;
    int64_t k = last_dim(&l->in_shape[0]), n = wt ? l->in_shape[1].dims[0] : l->in_shape[1].dims[1];
    int64_t m = k > 0 ? lead(&l->in_shape[0], l->rows) * row_numel(&l->in_shape[0]) / k : 1;
    reel_gemv_cfg c = gv_pick_epi(n, k, wt, caps->sm_count, epi);
    int64_t blocks = gv_blocks(n, wt, epi) * c.splits;
    int per_sm = 1;
    if (gv_cfg_ok(wt, c) &&
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, gv_kernel<__nv_bfloat16>(wt, c.unroll, gv_tiles(m)), 32 * c.warps,
                                                      gv_smem(wt, c)) != cudaSuccess)
        per_sm = 1;
    if (per_sm < 1)
        per_sm = 1;
    return (blocks + per_sm - 1) / per_sm;
}

/* The launches the kernel does not take at these rows (gemv_launch's row
 * limits) go to cuBLASLt (gemv_fallback), and take its workspace; a launch
 * the kernel takes, none. */
static reel_status gemv_ws(reel_backend *be, const reel_shape *in, int nin, const reel_shape *out,
                           const reel_op_attrs *a, size_t *bytes)
{
    const bool wt = a->matmul.w_transposed;
    const int64_t k = last_dim(&in[0]), n = wt ? in[1].dims[0] : in[1].dims[1];
    const int64_t m = k > 0 ? lead(&in[0], in[0].dims[0]) * row_numel(&in[0]) / k : 0;
    *bytes = 0;
    if (m > GV_IMPL_MAX_M || (m > GV_LARGE_MAX_M && n * k > GV_LARGE_WEIGHTS)) {
        reel_op_attrs plain = *a;
        plain.matmul.epi = REEL_MM_EPI_NONE;
        return reel_cu_matmul_lt_ws(be, in, nin, out, &plain, bytes);
    }
    return REEL_OK;
}

static reel_op_impl gemv_impl(void)
{
    reel_op_impl i = make_impl("cuda.matmul.gemv", REEL_OP_MATMUL, 30, true, false, use_gemv, gemv_launch);
    i.grid_blocks = gemv_grid;
    i.stream_ws = gemv_ws;
    return i;
}
} /* namespace reel_cu */

extern "C" const reel_op_impl reel_cu_matmul_gemv_impl = reel_cu::gemv_impl();
