/* CUDA kernels of the mixture-of-experts ops (ops/op.h, REEL_OP_MOE_ROUTE
 * .. REEL_OP_MOE_COMBINE; host: ops/host/moe.c; the shared rules:
 * ops/moe.h). Every kernel is capturable: no host synchronization, no
 * allocation, no read-back; each grid is a function of the launch's rows and
 * the node's shapes and attributes only. Where the work depends on the
 * routing (which experts, how many rows each), a block finds its piece from
 * the offsets on the device and returns at once when there is none. No sum
 * depends on the order of atomics or on timing, so a replay gives the eager
 * bits; integer counts are the only atomics (shared memory, exact).
 *
 * Shapes: T tokens of the launch, E experts, K choices, N = T*K pairs
 * (= sorted rows), H hidden, F intermediate, s the dtype's bytes.
 *
 *  moe_route    a warp a token (4 a block): the logits row in shared
 *               memory, softmax or sigmoid, group scores, group and expert
 *               ranks and the weights by ops/moe.h's functions, each
 *               element on a lane, the sums that must be sequential (the
 *               softmax denominator, ascending e; the weights', j order)
 *               sequential. The same bits as reel_moe_route_row.
 *  moe_align    one block of 16 warps: a stable counting sort over E + 1
 *               buckets (bucket 0: ids outside [0, E), which ops/moe.h puts
 *               first; bucket e + 1: expert e). Warp w owns a contiguous
 *               segment of the pairs; per-warp per-bucket counts in shared
 *               memory, a scan over (bucket, warp) gives each warp's start
 *               in each bucket, and each warp places its pairs 32 at a time,
 *               ranks within the warp by __match_any_sync. Positions
 *               depend on the ids only.
 *  moe_gate_up  grouped matmuls over the sorted rows. A block is (row tile,
 *  moe_down     column tile): row tiles are the buckets' rows cut in tiles
 *               of BM, numbered in bucket order, and the launch has a fixed
 *               bound of them (min(E + 1, N) + N / BM); a block past the
 *               last real tile returns at once, a tile of bucket 0 writes
 *               zeros. Three kernels, chosen on the host from the dtype,
 *               the shapes and N / min(E, N) (never from the routing):
 *                - skinny (decode; f16/bf16): BM = 16 or 32 rows; each warp
 *                  streams 32 weight rows through mma.sync m16n8k16
 *                  fragments loaded straight from global memory (16 bytes
 *                  a load, no L1 allocation, a register pipeline), the
 *                  block's 8 warps split the inner dimension and add up in
 *                  shared memory in warp order. An active expert's weights
 *                  are read once per step when it has at most BM rows.
 *                - tiled (prefill; f16/bf16): BM = 64 rows by 128 weight
 *                  rows, cp.async into three shared-memory stages, 64-bit
 *                  fragment loads and mma.sync, f32 accumulators, weights
 *                  read once per 64 rows.
 *                - generic (f32, or an inner dim that is no multiple of 8,
 *                  or unaligned operands): CUDA cores, 8 rows a tile, a warp
 *                  a column, lanes over the inner dimension, warp_sum.
 *               The tiled kernel performs the skinny kernel's operations in
 *               the skinny kernel's order (the same mma fragments, chunk c
 *               of 32 k summed into partial c % 8, the partials added in
 *               order), so a row's bits depend on its token and expert
 *               only: not on the batch, the bucket or which of the two the
 *               launch's size picked (docs/moe.md). The generic kernel is
 *               picked by dtype and shape (and alignment), never by size.
 *               gate_up: g and u rounded to the dtype, silu(g) * u in f32,
 *               rounded; down: the f32 sum rounded.
 *  moe_combine  a thread per 16 bytes of a token's output row: the K
 *               weighted rows of ys in j order, f32, rounded.
 *
 * Floors of a decode step (each input read once, each output written once;
 * A = the distinct experts the step's ids name, at most min(E, N)):
 *  moe_route    T*E*s (logits) + E*4 (bias) + N*8 (ids, weights)
 *  moe_align    N*4 (ids) + N*8 (order, where) + (E+1)*4 (offsets)
 *  moe_gate_up  A*2F*H*s (weights) + T*H*s (x) + N*F*s (act) + N*4 + (E+1)*4
 *  moe_down     A*H*F*s (weights) + N*F*s (act) + N*H*s (ys) + (E+1)*4
 *  moe_combine  N*H*s (ys) + N*8 (where, weights) + T*H*s (out)
 * The weights dominate: gate_up + down move A*3*H*F*s, e.g. Qwen3-30B-A3B
 * at batch 1 (A = 8, H 2048, F 768, bf16) 75.5 MB, 23 us at 3.3 TB/s.
 * bench/moe.cu reports each kernel's time against these bytes. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "ops/cuda/common.cuh"
#include "ops/cuda/impls.h"
#include "ops/cuda/mma.cuh"
#include "ops/moe.h"

/* The average rows per active expert (N / min(E, N)) above which the
 * matmuls take the tiled kernel, and above which the skinny kernel takes
 * two row tiles of 16 (A/B builds may move them). */
#ifndef REEL_MOE_TILED_MIN_ROWS
#define REEL_MOE_TILED_MIN_ROWS 32
#endif
#ifndef REEL_MOE_SKINNY_TWO_TILES_ROWS
#define REEL_MOE_SKINNY_TWO_TILES_ROWS 8
#endif

namespace reel_cu {
namespace {

constexpr unsigned MOE_FULL = 0xffffffffu;

/* What the host kernels report for step data that names no row of the
 * launch (an id outside [0, E), offsets, order or where out of range):
 * REEL_E_LIMIT into the error word, first report wins. */
__device__ __forceinline__ void moe_report(int32_t *err)
{
    if (err)
        atomicCAS((int *)err, 0, (int)REEL_E_LIMIT);
}

/* ---- moe_route ---------------------------------------------------------- */

constexpr int RT_WARPS = 4, RT_PER = REEL_MOE_MAX_EXPERTS / 32; /* experts a lane holds, at most */

struct route_args {
    int E, K, scoring, n_group, topk_group;
    bool renorm;
    float scaling;
    int64_t rows;
};

/* Shared words a warp takes: the logits [E], the values [E], a word a group. */
__host__ __device__ __forceinline__ int route_words(int E, int n_group)
{
    return 2 * E + (n_group > 1 ? n_group : 0);
}

/* The best (key, id) of the warp by reel_moe_before (larger key, then lower
 * id; id < 0: none), on every lane. A total order, so any tree gives it. */
__device__ __forceinline__ void warp_best(unsigned long long &k, int &id)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const unsigned long long k2 = __shfl_xor_sync(MOE_FULL, k, o);
        const int id2 = __shfl_xor_sync(MOE_FULL, id, o);
        if (id2 >= 0 && (id < 0 || reel_moe_before(k2, id2, k, id))) {
            k = k2;
            id = id2;
        }
    }
}

template <typename T>
__global__ void __launch_bounds__(RT_WARPS * 32)
    moe_route_kernel(const T *logits, const float *bias, int32_t *ids, float *wts, route_args a, bool pdl)
{
    pdl_start(pdl);
    extern __shared__ float rt_smem[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t t = (int64_t)blockIdx.x * RT_WARPS + warp;
    if (t >= a.rows) /* the whole warp */
        return;
    const int E = a.E, K = a.K;
    const bool sig = a.scoring == REEL_MOE_SIGMOID, grouped = a.n_group > 1;
    float *lg = rt_smem + (size_t)warp * route_words(E, a.n_group);
    float *v = lg + E;
    uint32_t *gw = (uint32_t *)(v + E); /* a group's key, then whether it is kept */
    const T *row = logits + t * E;
    for (int e = lane; e < E; e += 32)
        lg[e] = to_f(row[e]);
    __syncwarp();
    if (sig) {
        for (int e = lane; e < E; e += 32) {
            const float s = reel_moe_sigmoid(lg[e]);
            v[e] = bias ? reel_moe_add(s, bias[e]) : s;
        }
    } else {
        /* The first index of the largest key, as the host's scan finds it. */
        unsigned long long bk = 0;
        int bi = -1;
        for (int e = lane; e < E; e += 32) {
            const unsigned long long k = reel_moe_key(lg[e]);
            if (bi < 0 || k > bk) {
                bk = k;
                bi = e;
            }
        }
        warp_best(bk, bi);
        const float lm = lg[bi];
        for (int e = lane; e < E; e += 32)
            v[e] = reel_moe_exp(reel_moe_sub(lg[e], lm));
        __syncwarp();
        float sum = 0.0f;
        if (lane == 0) /* ascending e, one add at a time: the host's rounding */
            for (int e = 0; e < E; e++)
                sum = reel_moe_add(sum, v[e]);
        sum = __shfl_sync(MOE_FULL, sum, 0);
        __syncwarp();
        for (int e = lane; e < E; e += 32)
            v[e] = reel_moe_div(v[e], sum);
    }
    __syncwarp();
    int gs = E;
    if (grouped) {
        /* Kept groups: the first topk_group of the groups' order, i.e. those
         * with fewer than topk_group groups before them. */
        const int ng = a.n_group;
        gs = E / ng;
        for (int g = lane; g < ng; g += 32)
            gw[g] = reel_moe_key(reel_moe_top2_sum(v + g * gs, gs));
        __syncwarp();
        uint32_t mine = 0; /* bit i: group lane + 32 i is kept (ng <= 256) */
        for (int g = lane, i = 0; g < ng; g += 32, i++) {
            int before = 0;
            for (int h = 0; h < ng; h++)
                before += reel_moe_before(gw[h], h, gw[g], g) ? 1 : 0;
            if (before < a.topk_group)
                mine |= 1u << i;
        }
        __syncwarp();
        for (int g = lane, i = 0; g < ng; g += 32, i++)
            gw[g] = (mine >> i) & 1u;
        __syncwarp();
        if (sig)
            for (int e = lane; e < E; e += 32)
                if (!gw[e / gs])
                    v[e] = 0.0f;
        __syncwarp();
    }
    /* The K best, each the best of those ranking after the one before.
     * Expert lane + 32 i's key (bit 32: it competes in full) is key[i],
     * computed once. */
    unsigned long long key[RT_PER];
#pragma unroll
    for (int i = 0; i < RT_PER; i++) {
        const int e = lane + 32 * i;
        key[i] = 0;
        if (e < E) {
            if (sig) {
                key[i] = 1ull << 32 | reel_moe_key(v[e]);
            } else {
                const unsigned long long in = !grouped || gw[e / gs];
                key[i] = in << 32 | reel_moe_key(lg[e]);
            }
        }
    }
    int prev = -1, my_id = -1;
    unsigned long long pk = 0;
    for (int j = 0; j < K; j++) {
        unsigned long long bk = 0;
        int bi = -1;
#pragma unroll
        for (int i = 0; i < RT_PER; i++) {
            const int e = lane + 32 * i;
            if (e >= E || (prev >= 0 && !reel_moe_before(pk, prev, key[i], e)))
                continue;
            if (bi < 0 || reel_moe_before(key[i], e, bk, bi)) {
                bk = key[i];
                bi = e;
            }
        }
        warp_best(bk, bi);
        if (lane == j)
            my_id = bi;
        prev = bi;
        pk = bk;
    }
    float w = 0.0f;
    if (lane < K)
        w = sig ? reel_moe_sigmoid(lg[my_id]) : v[my_id];
    float sum = 0.0f;
    for (int j = 0; j < K; j++)
        sum = reel_moe_add(sum, __shfl_sync(MOE_FULL, w, j));
    if (a.renorm && sig)
        sum = reel_moe_add(sum, 1e-20f);
    if (a.renorm)
        w = reel_moe_div(w, sum);
    w = reel_moe_canon(reel_moe_mul(w, a.scaling));
    if (lane < K) {
        ids[t * K + lane] = my_id;
        wts[t * K + lane] = w;
    }
}

/* ---- moe_align ---------------------------------------------------------- */

constexpr int AL_WARPS = 16;

/* The bucket of an id: 0 outside [0, E), e + 1 for expert e. */
__device__ __forceinline__ int moe_bucket(int32_t id, int E)
{
    return id >= 0 && id < E ? id + 1 : 0;
}

/* Exclusive block-wide prefix sum of v; *total gets the sum (blockDim.x a
 * multiple of 32). Every thread calls it. */
__device__ int moe_block_scan(int v, int *total)
{
    __shared__ int wsum[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    int x = v;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const int y = __shfl_up_sync(MOE_FULL, x, o);
        if (lane >= o)
            x += y;
    }
    __syncthreads(); /* wsum may still be read by a previous call */
    if (lane == 31)
        wsum[warp] = x;
    __syncthreads();
    if (warp == 0) {
        int s = lane < nw ? wsum[lane] : 0;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const int y = __shfl_up_sync(MOE_FULL, s, o);
            if (lane >= o)
                s += y;
        }
        wsum[lane] = s;
    }
    __syncthreads();
    *total = wsum[nw - 1];
    return (warp > 0 ? wsum[warp - 1] : 0) + x - v;
}

__global__ void __launch_bounds__(AL_WARPS * 32)
    moe_align_kernel(const int32_t *ids, int32_t *order, int32_t *where, int32_t *offsets, int64_t n, int E,
                     int32_t *err, bool pdl)
{
    pdl_start(pdl);
    extern __shared__ int32_t al_cnt[]; /* [AL_WARPS][E + 1]: counts, then each warp's next position */
    const int nb = E + 1, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int i = threadIdx.x; i < AL_WARPS * nb; i += blockDim.x)
        al_cnt[i] = 0;
    __syncthreads();
    const int64_t seg = (n + AL_WARPS - 1) / AL_WARPS;
    const int64_t p0 = warp * seg < n ? warp * seg : n, p1 = p0 + seg < n ? p0 + seg : n;
    int32_t *mine = al_cnt + warp * nb;
    for (int64_t p = p0 + lane; p < p1; p += 32) {
        const int b = moe_bucket(ids[p], E);
        if (b == 0)
            moe_report(err);
        atomicAdd(&mine[b], 1);
    }
    __syncthreads();
    /* Thread i owns buckets [i q, i q + q): their totals, the scan over
     * buckets, then each warp's start in each of its buckets. */
    const int q = (nb + (int)blockDim.x - 1) / (int)blockDim.x;
    const int b0 = (int)threadIdx.x * q < nb ? (int)threadIdx.x * q : nb, b1 = b0 + q < nb ? b0 + q : nb;
    int local = 0;
    for (int b = b0; b < b1; b++)
        for (int w = 0; w < AL_WARPS; w++)
            local += al_cnt[w * nb + b];
    int total = 0;
    int run = moe_block_scan(local, &total);
    for (int b = b0; b < b1; b++) {
        if (b >= 1)
            offsets[b - 1] = run; /* expert b - 1 starts where bucket b does */
        for (int w = 0; w < AL_WARPS; w++) {
            const int c = al_cnt[w * nb + b];
            al_cnt[w * nb + b] = run;
            run += c;
        }
    }
    if (threadIdx.x == 0)
        offsets[E] = (int32_t)n;
    __syncthreads();
    /* Each warp places its segment in pair order: within a bucket the lanes
     * of one pass by lane, passes in order, warps by their starts. */
    for (int64_t base = p0; base < p1; base += 32) {
        const int64_t p = base + lane;
        const bool act = p < p1;
        const int b = act ? moe_bucket(ids[p], E) : -1;
        const unsigned peers = __match_any_sync(MOE_FULL, b);
        const int rank = __popc(peers & ((1u << lane) - 1u));
        const int pos = act ? mine[b] + rank : 0;
        __syncwarp();
        if (act) {
            order[pos] = (int32_t)p;
            where[p] = pos;
            if (rank == 0)
                mine[b] += __popc(peers);
        }
        __syncwarp();
    }
}

/* ---- the grouped matmuls: common parts ---------------------------------- */

/* One grouped matmul: out[p, c] over the sorted rows p of expert e,
 * sum_k A[row(p), k] * W[e * wrows + wrow(c), k]. gate_up: A = x, row(p) =
 * order[p] / K, wrow(c) = c (gate) and F + c (up); down: A = act, row(p) =
 * p, wrow(c) = c. */
struct mm_args {
    const void *a;          /* x [T, H] or act [N, F] */
    const int32_t *order;   /* gate_up: sorted row -> pair; down: NULL */
    const int32_t *offsets; /* [E + 1] */
    const void *w;          /* [E * wrows, kdim] */
    void *out;              /* [N, ncols] */
    int64_t n;              /* sorted rows, N */
    int64_t arows;          /* rows of A (T or N): a row index outside is a zero row */
    int64_t wrows;          /* weight rows an expert: 2F or H */
    int32_t *err;           /* the step's error word, or NULL */
    int E, K, kdim, ncols;
};

/* The row tile `slot` of the sorted layout: each bucket's rows (bucket 0:
 * [0, offsets[0]), bucket b >= 1: [offsets[b-1], offsets[b])) cut into
 * tiles of bm, numbered in bucket order. Sets the bucket and the tile's rows
 * [r0, r1); false past the last tile (the same answer on every thread).
 * Every thread of the block calls it, before any other barrier. */
__device__ bool moe_slot(const int32_t *offsets, int E, int64_t n, int bm, int64_t slot, int32_t *err, int *bucket,
                         int64_t *r0, int64_t *r1)
{
    __shared__ int s_b;
    __shared__ long long s_r0, s_r1;
    const int nb = E + 1;
    const int q = (nb + (int)blockDim.x - 1) / (int)blockDim.x;
    const int b0 = (int)threadIdx.x * q < nb ? (int)threadIdx.x * q : nb, b1 = b0 + q < nb ? b0 + q : nb;
    auto clampn = [&](int64_t v) { return v < 0 ? (int64_t)0 : v > n ? n : v; };
    auto start = [&](int b) { return b == 0 ? (int64_t)0 : clampn(offsets[b - 1]); };
    auto end = [&](int b) {
        const int64_t s = start(b), e = clampn(offsets[b]);
        return e > s ? e : s;
    };
    int tiles = 0;
    for (int b = b0; b < b1; b++) {
        tiles += (int)((end(b) - start(b) + bm - 1) / bm);
        if (b >= 1 && (offsets[b - 1] < 0 || offsets[b] < offsets[b - 1] || offsets[b] > n))
            moe_report(err); /* as the host, which skips expert b - 1 */
    }
    if (threadIdx.x == 0)
        s_b = -1;
    int total = 0;
    int64_t pre = moe_block_scan(tiles, &total); /* its barriers order s_b = -1 before the writes below */
    for (int b = b0; b < b1; b++) {
        const int64_t s = start(b), nt = (end(b) - s + bm - 1) / bm;
        if (slot >= pre && slot < pre + nt) {
            s_b = b;
            s_r0 = s + (slot - pre) * bm;
            s_r1 = s_r0 + bm < end(b) ? s_r0 + bm : end(b);
        }
        pre += nt;
    }
    __syncthreads();
    *bucket = s_b;
    *r0 = s_r0;
    *r1 = s_r1;
    return s_b >= 0;
}

/* Rows [r0, r1) x columns [c0, c0 + cw) of out set to zero: a tile of the
 * pairs whose id is no expert's. */
template <typename T> __device__ void moe_zero_tile(const mm_args &a, int64_t r0, int64_t r1, int c0, int cw)
{
    cw = c0 + cw < a.ncols ? cw : a.ncols - c0;
    if (cw <= 0)
        return;
    T *out = (T *)a.out;
    const int64_t cells = (r1 - r0) * cw;
    for (int64_t i = threadIdx.x; i < cells; i += blockDim.x)
        out[(r0 + i / cw) * a.ncols + c0 + i % cw] = from_f<T>(0.0f);
}

/* Row p's row of A (gate_up: its token), or -1 for none. */
template <bool GU> __device__ __forceinline__ int64_t moe_arow(const mm_args &a, int64_t p, int64_t r1)
{
    if (p >= r1)
        return -1;
    int64_t r = p;
    if (GU) {
        const int32_t pair = a.order[p];
        r = pair >= 0 ? pair / a.K : -1;
    }
    if (r >= 0 && r < a.arows)
        return r;
    moe_report(a.err);
    return -1;
}

template <typename T> __device__ __forceinline__ float rnd(float v) { return to_f(from_f<T>(v)); }

/* silu(g) * u of g and u already rounded to the dtype, as the host computes
 * it (ops/moe.h's silu, one rounded multiply). */
__device__ __forceinline__ float moe_silu_mul(float g, float u) { return reel_moe_mul(reel_moe_silu(g), u); }

/* ---- skinny: decode ----------------------------------------------------- */

constexpr int SK_WARPS = 8, SK_TILES = 4; /* weight tiles of 8 rows a warp */

/* Weights are read once: no L1 allocation. volatile: never hoisted above
 * the dependency wait of pdl_start. */
__device__ __forceinline__ uint4 moe_ld_stream(const void *p)
{
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

__device__ __forceinline__ uint32_t moe_word(const uint4 &v, int i)
{
    return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

template <int MT> struct sk_stage {
    uint4 w[SK_TILES], xa[MT], xb[MT];
};

/* Columns a skinny block owns: 16 (gate_up: 16 gate and 16 up rows) or 32. */
__host__ __device__ __forceinline__ int sk_cols(bool gu) { return gu ? 16 : 32; }

/* Block (slot, column tile). Thread (g, t) of warp w loads, for chunk c of
 * 32 k (chunks w, w + 8, ...), 16 bytes of each of its 4 weight rows at k
 * = 32c + 8t and of A rows g and g + 8 of each row tile: words 0-1 are mma
 * step 0's fragments (logical k 2t, 2t+1 and 2t+8, 2t+9), words 2-3 step
 * 1's. A and B map logical k to the same physical k, so the dot products
 * are whole (the scheme of gemv.cu). Tile j's weight row for lane g:
 * gate_up: gate (j < 2) or up (j >= 2) row of column c0 + 8 (j & 1) + g;
 * down: row c0 + 8 j + g. */
template <typename T, bool GU, int MT, int P>
__global__ void __launch_bounds__(SK_WARPS * 32, 2) moe_skinny_kernel(mm_args a, bool pdl)
{
    pdl_start(pdl);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    int bucket;
    int64_t r0, r1;
    if (!moe_slot(a.offsets, a.E, a.n, 16 * MT, blockIdx.x, a.err, &bucket, &r0, &r1))
        return;
    const int c0 = blockIdx.y * sk_cols(GU);
    if (bucket == 0) {
        moe_zero_tile<T>(a, r0, r1, c0, sk_cols(GU));
        return;
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int kdim = a.kdim, ncols = a.ncols;
    const T *w = (const T *)a.w + (int64_t)(bucket - 1) * a.wrows * kdim;
    const T *A = (const T *)a.a;
    /* Tile j's row is tile 0's plus wstep(j) rows (a lane's loads of a row
     * past ncols are off); A rows as indices (-1: none), to spare registers. */
    const T *wr = w + (int64_t)(c0 + g) * kdim + 8 * t;
    auto wstep = [&](int j) {
        return GU ? (int64_t)(8 * (j & 1) + (j >= 2 ? ncols : 0)) * kdim : (int64_t)(8 * j) * kdim;
    };
    bool wok[SK_TILES];
#pragma unroll
    for (int j = 0; j < SK_TILES; j++)
        wok[j] = (GU ? c0 + 8 * (j & 1) + g : c0 + 8 * j + g) < ncols;
    const T *A8 = A + 8 * t;
    int32_t ar[MT][2];
#pragma unroll
    for (int i = 0; i < MT; i++)
#pragma unroll
        for (int h = 0; h < 2; h++)
            ar[i][h] = (int32_t)moe_arow<GU>(a, r0 + 16 * i + 8 * h + g, r1);
    float acc[MT][SK_TILES][4];
#pragma unroll
    for (int i = 0; i < MT; i++)
#pragma unroll
        for (int j = 0; j < SK_TILES; j++)
            acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.0f;
    const uint4 z = make_uint4(0, 0, 0, 0);
    const int C = (kdim + 31) / 32;
    const int mine = warp < C ? (C - warp + SK_WARPS - 1) / SK_WARPS : 0; /* chunks warp + i * SK_WARPS */
    auto load = [&](sk_stage<MT> &s, int i) {
        const int k = (warp + i * SK_WARPS) * 32;
        const bool in = k + 8 * t < kdim; /* kdim is a multiple of 8 */
#pragma unroll
        for (int j = 0; j < SK_TILES; j++)
            s.w[j] = in && wok[j] ? moe_ld_stream(wr + wstep(j) + k) : z;
#pragma unroll
        for (int m = 0; m < MT; m++) {
            s.xa[m] = in && ar[m][0] >= 0 ? __ldg((const uint4 *)(A8 + (int64_t)ar[m][0] * kdim + k)) : z;
            s.xb[m] = in && ar[m][1] >= 0 ? __ldg((const uint4 *)(A8 + (int64_t)ar[m][1] * kdim + k)) : z;
        }
    };
    auto compute = [&](const sk_stage<MT> &s) {
#pragma unroll
        for (int h = 0; h < 2; h++)
#pragma unroll
            for (int m = 0; m < MT; m++) {
                const uint32_t af[4] = { moe_word(s.xa[m], 2 * h), moe_word(s.xb[m], 2 * h),
                                         moe_word(s.xa[m], 2 * h + 1), moe_word(s.xb[m], 2 * h + 1) };
#pragma unroll
                for (int j = 0; j < SK_TILES; j++) {
                    const uint32_t bf[2] = { moe_word(s.w[j], 2 * h), moe_word(s.w[j], 2 * h + 1) };
                    mma_op<T>::run(acc[m][j], af, bf);
                }
            }
    };
    sk_stage<MT> st[P];
#pragma unroll
    for (int p = 0; p < P - 1; p++)
        if (p < mine)
            load(st[p], p);
    for (int i0 = 0; i0 < mine; i0 += P) {
#pragma unroll
        for (int p = 0; p < P; p++) {
            const int i = i0 + p;
            if (i + P - 1 < mine)
                load(st[(p + P - 1) % P], i + P - 1);
            if (i < mine)
                compute(st[p]);
        }
    }
    /* The warps' partials added in warp order: partial q = (j * 4 + c) * 32
     * + lane of each warp, thread q sums it; then the epilogue. */
    extern __shared__ float sk_red[]; /* [SK_WARPS][SK_TILES * 128] */
    constexpr int PER = SK_TILES * 128;
    T *out = (T *)a.out;
#pragma unroll
    for (int m = 0; m < MT; m++) {
#pragma unroll
        for (int j = 0; j < SK_TILES; j++)
#pragma unroll
            for (int c = 0; c < 4; c++)
                sk_red[warp * PER + (j * 4 + c) * 32 + lane] = acc[m][j][c];
        __syncthreads();
        for (int q = threadIdx.x; q < PER; q += blockDim.x) {
            float s = sk_red[q];
            for (int v = 1; v < SK_WARPS; v++)
                s += sk_red[v * PER + q];
            sk_red[q] = s;
        }
        __syncthreads();
        for (int q = threadIdx.x; q < PER; q += blockDim.x) {
            const int f = q >> 5, ln = q & 31, j = f >> 2, c = f & 3;
            if (GU && j >= 2)
                continue; /* up tiles: read with their gate tile */
            const int64_t p = r0 + 16 * m + (ln >> 2) + (c >= 2 ? 8 : 0);
            const int col = c0 + 8 * j + 2 * (ln & 3) + (c & 1);
            if (p >= r1 || col >= ncols)
                continue;
            float v = rnd<T>(sk_red[q]);
            if (GU)
                v = moe_silu_mul(v, rnd<T>(sk_red[q + 2 * 4 * 32]));
            out[p * ncols + col] = from_f<T>(v);
        }
        __syncthreads(); /* sk_red is refilled by the next row tile */
    }
#endif
}

/* ---- tiled: prefill ----------------------------------------------------- */

constexpr int TL_BM = 64, TL_BN = 128, TL_STAGES = 3, TL_THREADS = 256;

__host__ __device__ __forceinline__ int tl_cols(bool gu) { return gu ? TL_BN / 2 : TL_BN; }

/* A stage holds one chunk of 32 k of the tile's 64 A rows and 128 weight
 * rows: a row is 8 units of 8 bytes, unit (t, h) (k 8t + 4h .. + 3, the
 * two words a skinny lane t feeds mma step h) at position 4 (h ^ s) + t,
 * s = bit 1 of the row: a half-warp's 64-bit fragment loads (rows g, g + 8
 * or a tile's rows, g < 4) then fall in 16 distinct bank pairs. */
__host__ __forceinline__ size_t tl_smem_bytes() { return (size_t)TL_STAGES * (TL_BM + TL_BN) * 64; }

__device__ __forceinline__ int tl_unit(int row, int t, int h) { return 4 * (h ^ ((row >> 1) & 1)) + t; }

/* 8 bytes global -> shared; src_bytes 0 fills zeros and reads nothing. */
__device__ __forceinline__ void cp_async8(void *smem, const void *gmem, int src_bytes)
{
    const uint32_t a = (uint32_t)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(a), "l"(gmem), "r"(src_bytes));
}

/* Chunks of 32 k a warp of the skinny kernel takes: r, r + 8, ... < C. */
__device__ __forceinline__ int tl_group_chunks(int r, int C) { return r < C ? (C - 1 - r) / SK_WARPS + 1 : 0; }

/* The i-th chunk in group order (group 0's chunks, then group 1's, ...). */
__device__ __forceinline__ int tl_chunk(int i, int C)
{
    int r = 0;
    while (r < SK_WARPS - 1 && i >= tl_group_chunks(r, C)) {
        i -= tl_group_chunks(r, C);
        r++;
    }
    return r + SK_WARPS * i;
}

/* Block (slot, column tile): 64 sorted rows by 128 weight rows (gate_up: 64
 * gate rows, then the same 64 columns' up rows; down: 128 columns). Warp
 * (wm, wn) of 2 x 4 owns rows 32 wm .. + 32 and 4 weight tiles of 8 rows:
 * gate_up 16 wn .. + 16 (gate) and 64 + 16 wn .. + 16 (up), so a thread
 * holds each output's gate and up sums; down 32 wn .. + 32.
 *
 * Every output is the skinny kernel's bits: the same mma steps on the same
 * fragments (k mapped as there), chunk c summed into partial c % 8 in
 * ascending c, and the partials added in order 0, 1, .., 7, as the skinny
 * block adds its warps'. So a row's result does not depend on which kernel
 * the launch's size picked, nor on the other rows of the batch. */
template <typename T, bool GU>
__global__ void __launch_bounds__(TL_THREADS) moe_tiled_kernel(mm_args a, bool pdl)
{
    pdl_start(pdl);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    int bucket;
    int64_t r0, r1;
    if (!moe_slot(a.offsets, a.E, a.n, TL_BM, blockIdx.x, a.err, &bucket, &r0, &r1))
        return;
    const int c0 = blockIdx.y * tl_cols(GU);
    if (bucket == 0) {
        moe_zero_tile<T>(a, r0, r1, c0, tl_cols(GU));
        return;
    }
    extern __shared__ __align__(16) uint2 tl_smem[];
    uint2 *As = tl_smem;                        /* [STAGES][BM][8 units] */
    uint2 *Bs = As + TL_STAGES * TL_BM * 8;     /* [STAGES][BN][8 units] */
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wm = warp >> 2, wn = warp & 3;
    const int g = lane >> 2, t = lane & 3;
    const int kdim = a.kdim, ncols = a.ncols;
    const T *A = (const T *)a.a;
    const T *w = (const T *)a.w + (int64_t)(bucket - 1) * a.wrows * kdim;
    /* Each thread copies k 8 ch .. + 8 of A row tid / 4 and of weight rows
     * tid / 4 and tid / 4 + 64, as units (ch, 0) and (ch, 1). */
    const int ch = tid & 3, lr = tid >> 2;
    const int64_t arow = moe_arow<GU>(a, r0 + lr, r1);
    const T *ap = A + (arow >= 0 ? arow : 0) * kdim + 8 * ch;
    const T *bp[2];
    bool bok[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int rr = lr + 64 * h;
        const int col = GU ? c0 + (rr & 63) : c0 + rr;
        bok[h] = col < ncols;
        const int64_t wrow = GU && rr >= 64 ? (int64_t)ncols + col : col;
        bp[h] = w + (bok[h] ? wrow : 0) * kdim + 8 * ch;
    }
    const int C = (kdim + 31) / 32;
    auto load = [&](int c, int s) {
        const int k = c * 32;
        const bool kin = k + 8 * ch < kdim; /* kdim is a multiple of 8 */
        const bool aon = kin && arow >= 0;
#pragma unroll
        for (int u = 0; u < 2; u++)
            cp_async8(&As[(s * TL_BM + lr) * 8 + tl_unit(lr, ch, u)], aon ? ap + k + 4 * u : A, aon ? 8 : 0);
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int rr = lr + 64 * h;
            const bool on = kin && bok[h];
#pragma unroll
            for (int u = 0; u < 2; u++)
                cp_async8(&Bs[(s * TL_BN + rr) * 8 + tl_unit(rr, ch, u)], on ? bp[h] + k + 4 * u : w, on ? 8 : 0);
        }
    };
    float acc[2][4][4], tot[2][4][4];
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int c = 0; c < 4; c++)
                acc[i][j][c] = tot[i][j][c] = 0.0f;
    /* Partial r is done: the total takes it (the first as it is), and the
     * next partial starts from zero. */
    auto fold = [&](int r) {
#pragma unroll
        for (int i = 0; i < 2; i++)
#pragma unroll
            for (int j = 0; j < 4; j++)
#pragma unroll
                for (int c = 0; c < 4; c++) {
                    tot[i][j][c] = r == 0 ? acc[i][j][c] : tot[i][j][c] + acc[i][j][c];
                    acc[i][j][c] = 0.0f;
                }
    };
    /* The first shared row of weight tile j of the warp. */
    auto brow = [&](int j) {
        return GU ? (j < 2 ? 16 * wn + 8 * j : 64 + 16 * wn + 8 * (j - 2)) : 32 * wn + 8 * j;
    };
#pragma unroll
    for (int s = 0; s < TL_STAGES - 1; s++) {
        if (s < C)
            load(tl_chunk(s, C), s);
        cp_async_commit();
    }
    int grp = 0, grp_end = tl_group_chunks(0, C);
    for (int i = 0; i < C; i++) {
        if (i == grp_end) { /* groups below C are never empty: one ends here */
            fold(grp);
            grp++;
            grp_end += tl_group_chunks(grp, C);
        }
        cp_async_wait<TL_STAGES - 2>(); /* chunk i has landed (this thread's part) */
        __syncthreads();                /* everyone's part, and stage (i - 1) % S is free */
        if (i + TL_STAGES - 1 < C)
            load(tl_chunk(i + TL_STAGES - 1, C), (i + TL_STAGES - 1) % TL_STAGES);
        cp_async_commit();
        const uint2 *as = As + (i % TL_STAGES) * TL_BM * 8;
        const uint2 *bs = Bs + (i % TL_STAGES) * TL_BN * 8;
#pragma unroll
        for (int h = 0; h < 2; h++) {
            uint32_t af[2][4], bf[4][2];
#pragma unroll
            for (int mi = 0; mi < 2; mi++) {
                const int ra = wm * 32 + mi * 16 + g, rb = ra + 8;
                const uint2 va = as[ra * 8 + tl_unit(ra, t, h)], vb = as[rb * 8 + tl_unit(rb, t, h)];
                af[mi][0] = va.x;
                af[mi][1] = vb.x;
                af[mi][2] = va.y;
                af[mi][3] = vb.y;
            }
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const int rw = brow(j) + g;
                const uint2 vw = bs[rw * 8 + tl_unit(rw, t, h)];
                bf[j][0] = vw.x;
                bf[j][1] = vw.y;
            }
#pragma unroll
            for (int mi = 0; mi < 2; mi++)
#pragma unroll
                for (int j = 0; j < 4; j++)
                    mma_op<T>::run(acc[mi][j], af[mi], bf[j]);
        }
    }
    cp_async_wait<0>();
    for (int r = grp; r < SK_WARPS; r++) /* the last group, then the empty ones (adding zeros, as the skinny block does) */
        fold(r);
    T *out = (T *)a.out;
#pragma unroll
    for (int mi = 0; mi < 2; mi++)
#pragma unroll
        for (int hh = 0; hh < 2; hh++) {
            const int64_t p = r0 + wm * 32 + mi * 16 + g + 8 * hh;
            if (p >= r1)
                continue;
            T *orow = out + p * ncols;
#pragma unroll
            for (int j = 0; j < (GU ? 2 : 4); j++)
#pragma unroll
                for (int cc = 0; cc < 2; cc++) {
                    const int col = c0 + (GU ? 16 : 32) * wn + 8 * j + 2 * t + cc;
                    if (col >= ncols)
                        continue;
                    float v = rnd<T>(tot[mi][j][2 * hh + cc]);
                    if (GU)
                        v = moe_silu_mul(v, rnd<T>(tot[mi][(j + 2) & 3][2 * hh + cc]));
                    orow[col] = from_f<T>(v);
                }
        }
#endif
}

/* ---- generic: CUDA cores, any dtype and shape ---------------------------- */

constexpr int GN_ROWS = 8, GN_WARPS = 8, GN_COLS = 32;

/* Block (slot of up to 8 rows, 32 columns); warp w takes columns c0 + w,
 * c0 + w + 8, ...: each lane sums its k (lane, lane + 32, ...) in order for
 * every row, warp_sum adds the lanes. */
template <typename T, bool GU> __global__ void __launch_bounds__(GN_WARPS * 32) moe_generic_kernel(mm_args a, bool pdl)
{
    pdl_start(pdl);
    int bucket;
    int64_t r0, r1;
    if (!moe_slot(a.offsets, a.E, a.n, GN_ROWS, blockIdx.x, a.err, &bucket, &r0, &r1))
        return;
    const int c0 = blockIdx.y * GN_COLS;
    if (bucket == 0) {
        moe_zero_tile<T>(a, r0, r1, c0, GN_COLS);
        return;
    }
    __shared__ long long gn_row[GN_ROWS];
    if (threadIdx.x < GN_ROWS)
        gn_row[threadIdx.x] = moe_arow<GU>(a, r0 + threadIdx.x, r1);
    __syncthreads();
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int kdim = a.kdim, ncols = a.ncols;
    const T *A = (const T *)a.a;
    const T *w = (const T *)a.w + (int64_t)(bucket - 1) * a.wrows * kdim;
    T *out = (T *)a.out;
    const T *arow[GN_ROWS];
#pragma unroll
    for (int r = 0; r < GN_ROWS; r++)
        arow[r] = gn_row[r] >= 0 ? A + gn_row[r] * kdim : NULL;
    const int cend = c0 + GN_COLS < ncols ? c0 + GN_COLS : ncols;
    for (int col = c0 + warp; col < cend; col += GN_WARPS) {
        const T *wg = w + (int64_t)col * kdim;
        const T *wu = GU ? w + ((int64_t)ncols + col) * kdim : wg;
        float sg[GN_ROWS], su[GN_ROWS];
#pragma unroll
        for (int r = 0; r < GN_ROWS; r++)
            sg[r] = su[r] = 0.0f;
        for (int k = lane; k < kdim; k += 32) {
            const float gv = to_f(wg[k]), uv = GU ? to_f(wu[k]) : 0.0f;
#pragma unroll
            for (int r = 0; r < GN_ROWS; r++)
                if (arow[r]) {
                    const float xv = to_f(arow[r][k]);
                    sg[r] += xv * gv;
                    if (GU)
                        su[r] += xv * uv;
                }
        }
#pragma unroll
        for (int r = 0; r < GN_ROWS; r++) {
            const float gsum = warp_sum(sg[r]);
            const float usum = GU ? warp_sum(su[r]) : 0.0f;
            if (lane == 0 && r0 + r < r1) {
                float v = rnd<T>(gsum);
                if (GU)
                    v = moe_silu_mul(v, rnd<T>(usum));
                out[(r0 + r) * ncols + col] = from_f<T>(v);
            }
        }
    }
}

/* ---- moe_combine -------------------------------------------------------- */

constexpr int CB_THREADS = 128;

/* Token blockIdx.x; a thread's U elements (a 16-byte pack or one) at
 * column (blockIdx.y * CB_THREADS + threadIdx.x) * U. */
template <typename T, bool VEC>
__global__ void __launch_bounds__(CB_THREADS)
    moe_combine_kernel(const T *ys, const int32_t *where, const float *wts, T *out, int K, int H, int64_t n,
                       int32_t *err, bool pdl)
{
    pdl_start(pdl);
    constexpr int U = VEC ? pack<T>::n : 1;
    const int64_t t = blockIdx.x;
    const int h0 = (blockIdx.y * CB_THREADS + threadIdx.x) * U;
    if (h0 >= H)
        return;
    float acc[U];
#pragma unroll
    for (int u = 0; u < U; u++)
        acc[u] = 0.0f;
    for (int j = 0; j < K; j++) {
        const int32_t p = where[t * K + j];
        const float wj = wts[t * K + j];
        if (p < 0 || p >= n) { /* never from moe_align (where is a permutation) */
            moe_report(err);
            continue;
        }
        const T *y = ys + (int64_t)p * H + h0;
        if (VEC) {
            const pack<T> v = *(const pack<T> *)y;
#pragma unroll
            for (int u = 0; u < U; u++)
                acc[u] = reel_moe_add(acc[u], reel_moe_mul(wj, to_f(v.v[u])));
        } else {
            acc[0] = reel_moe_add(acc[0], reel_moe_mul(wj, to_f(y[0])));
        }
    }
    T *o = out + t * H + h0;
    if (VEC) {
        pack<T> v;
#pragma unroll
        for (int u = 0; u < U; u++)
            v.v[u] = from_f<T>(acc[u]);
        *(pack<T> *)o = v;
    } else {
        o[0] = from_f<T>(acc[0]);
    }
}

/* ---- launches ----------------------------------------------------------- */

static reel_status route_launch(reel_backend *be, const reel_launch *l)
{
    const reel_shape *ls = &l->in_shape[0];
    route_args a;
    a.rows = lead(ls, l->rows);
    if (a.rows <= 0)
        return REEL_OK;
    a.E = l->attrs->moe.num_experts;
    a.K = l->attrs->moe.top_k;
    a.scoring = l->attrs->moe.scoring;
    a.n_group = l->attrs->moe.n_group > 1 ? l->attrs->moe.n_group : 0;
    a.topk_group = l->attrs->moe.topk_group;
    a.renorm = l->attrs->moe.renormalize;
    a.scaling = l->attrs->moe.routed_scaling;
    const float *bias = l->in_shape[1].ndim != 0 ? (const float *)l->in[1] : NULL;
    const unsigned blocks = (unsigned)((a.rows + RT_WARPS - 1) / RT_WARPS);
    const size_t smem = (size_t)RT_WARPS * route_words(a.E, a.n_group) * sizeof(float);
    cudaStream_t st = reel_cuda_stream_handle(l->stream);
    cudaError_t e = cudaSuccess;
    REEL_CU_DISPATCH(ls->dtype, e = launch(moe_route_kernel<T>, blocks, RT_WARPS * 32, smem, st, l->pdl,
                                           (const T *)l->in[0], bias, (int32_t *)l->out[0], (float *)l->out[1], a));
    return REEL_CU_LAUNCHED_E(be, "cuda.moe_route", e);
}

static reel_status align_launch(reel_backend *be, const reel_launch *l)
{
    const int E = l->attrs->moe.num_experts, K = l->attrs->moe.top_k;
    int64_t n = lead(&l->in_shape[0], l->rows) * K;
    if (n < 0)
        n = 0;
    /* Launched at N = 0 too: the offsets are then all zero. */
    const size_t smem = (size_t)AL_WARPS * (E + 1) * sizeof(int32_t);
    cudaError_t e = launch(moe_align_kernel, 1, AL_WARPS * 32, smem, reel_cuda_stream_handle(l->stream), l->pdl,
                           (const int32_t *)l->in[0], (int32_t *)l->out[0], (int32_t *)l->out[1],
                           (int32_t *)l->out[2], n, E, l->meta ? l->meta->err_word : (int32_t *)NULL);
    return REEL_CU_LAUNCHED_E(be, "cuda.moe_align", e);
}

/* The launch's row tiles at most: every nonempty bucket (at most
 * min(E + 1, N)) has one partial tile, the rest are whole. */
static int64_t mm_slots(const mm_args &a, int bm)
{
    const int64_t nb = (int64_t)a.E + 1;
    return (nb < a.n ? nb : a.n) + a.n / bm;
}

enum mm_path { MM_GENERIC, MM_SKINNY1, MM_SKINNY2, MM_TILED };

/* The kernel for the node at N sorted rows: a function of the shapes and N
 * alone (never of the routing), so a shape always runs one kernel. */
static mm_path mm_pick(reel_dtype dt, const mm_args &a)
{
    if (dt == REEL_F32 || a.kdim % 8 != 0 || !aligned16(a.a) || !aligned16(a.w))
        return MM_GENERIC;
    const int64_t active = a.E < a.n ? a.E : a.n;
    const int64_t avg = active > 0 ? a.n / active : 0;
    if (avg > REEL_MOE_TILED_MIN_ROWS)
        return MM_TILED;
    return avg > REEL_MOE_SKINNY_TWO_TILES_ROWS ? MM_SKINNY2 : MM_SKINNY1;
}

template <typename T, bool GU> static cudaError_t mm_run_t(mm_path path, const mm_args &a, cudaStream_t st, bool pdl)
{
    auto grid = [&](int bm, int cols) {
        return dim3((unsigned)mm_slots(a, bm), (unsigned)((a.ncols + cols - 1) / cols), 1);
    };
    if constexpr (std::is_same<T, float>::value) {
        return launch(moe_generic_kernel<T, GU>, grid(GN_ROWS, GN_COLS), GN_WARPS * 32, 0, st, pdl, a);
    } else {
        switch (path) {
        case MM_SKINNY1:
            return launch(moe_skinny_kernel<T, GU, 1, 3>, grid(16, sk_cols(GU)), SK_WARPS * 32,
                          (size_t)SK_WARPS * SK_TILES * 128 * sizeof(float), st, pdl, a);
        case MM_SKINNY2:
            return launch(moe_skinny_kernel<T, GU, 2, 2>, grid(32, sk_cols(GU)), SK_WARPS * 32,
                          (size_t)SK_WARPS * SK_TILES * 128 * sizeof(float), st, pdl, a);
        case MM_TILED:
            return launch(moe_tiled_kernel<T, GU>, grid(TL_BM, tl_cols(GU)), TL_THREADS, tl_smem_bytes(), st, pdl,
                          a);
        default:
            return launch(moe_generic_kernel<T, GU>, grid(GN_ROWS, GN_COLS), GN_WARPS * 32, 0, st, pdl, a);
        }
    }
}

template <bool GU> static reel_status mm_launch(reel_backend *be, const reel_launch *l, const mm_args &a,
                                                const char *name)
{
    if (a.n <= 0 || a.ncols <= 0)
        return REEL_OK;
    const reel_dtype dt = l->in_shape[0].dtype;
    const mm_path path = mm_pick(dt, a);
    cudaStream_t st = reel_cuda_stream_handle(l->stream);
    cudaError_t e = cudaSuccess;
    REEL_CU_DISPATCH(dt, (e = mm_run_t<T, GU>(path, a, st, l->pdl)));
    return REEL_CU_LAUNCHED_E(be, name, e);
}

static reel_status gate_up_launch(reel_backend *be, const reel_launch *l)
{
    const reel_shape *xs = &l->in_shape[0];
    mm_args a;
    a.E = l->attrs->moe.num_experts;
    a.K = l->attrs->moe.top_k;
    a.arows = lead(xs, l->rows);
    a.n = a.arows * a.K;
    a.a = l->in[0];
    a.order = (const int32_t *)l->in[1];
    a.offsets = (const int32_t *)l->in[2];
    a.w = l->in[3];
    a.out = l->out[0];
    a.kdim = (int)last_dim(xs);
    a.ncols = (int)last_dim(&l->out_shape[0]);
    a.wrows = 2 * (int64_t)a.ncols;
    a.err = l->meta ? l->meta->err_word : NULL;
    return mm_launch<true>(be, l, a, "cuda.moe_gate_up");
}

static reel_status down_launch(reel_backend *be, const reel_launch *l)
{
    const reel_shape *as = &l->in_shape[0];
    mm_args a;
    a.E = l->attrs->moe.num_experts;
    a.K = l->attrs->moe.top_k;
    a.n = lead(as, l->rows) * a.K;
    a.arows = a.n;
    a.a = l->in[0];
    a.order = NULL;
    a.offsets = (const int32_t *)l->in[1];
    a.w = l->in[2];
    a.out = l->out[0];
    a.kdim = (int)last_dim(as);
    a.ncols = (int)last_dim(&l->out_shape[0]);
    a.wrows = a.ncols;
    a.err = l->meta ? l->meta->err_word : NULL;
    return mm_launch<false>(be, l, a, "cuda.moe_down");
}

static reel_status combine_launch(reel_backend *be, const reel_launch *l)
{
    const reel_shape *ys = &l->in_shape[0];
    const int64_t rows = lead(ys, l->rows);
    const int K = l->attrs->moe.top_k, H = (int)last_dim(ys);
    if (rows <= 0 || H <= 0)
        return REEL_OK;
    cudaStream_t st = reel_cuda_stream_handle(l->stream);
    cudaError_t e = cudaSuccess;
    const int64_t n = rows * K;
    int32_t *err = l->meta ? l->meta->err_word : NULL;
    REEL_CU_DISPATCH(ys->dtype, {
        const bool vec = H % pack<T>::n == 0 && aligned16(l->in[0]) && aligned16(l->out[0]);
        const int u = vec ? pack<T>::n : 1;
        const dim3 grid((unsigned)rows, (unsigned)((H + CB_THREADS * u - 1) / (CB_THREADS * u)), 1);
        if (vec)
            e = launch(moe_combine_kernel<T, true>, grid, CB_THREADS, 0, st, l->pdl, (const T *)l->in[0],
                       (const int32_t *)l->in[1], (const float *)l->in[2], (T *)l->out[0], K, H, n, err);
        else
            e = launch(moe_combine_kernel<T, false>, grid, CB_THREADS, 0, st, l->pdl, (const T *)l->in[0],
                       (const int32_t *)l->in[1], (const float *)l->in[2], (T *)l->out[0], K, H, n, err);
    });
    return REEL_CU_LAUNCHED_E(be, "cuda.moe_combine", e);
}

/* ---- which nodes the impls take ------------------------------------------ */

static bool is_fl(reel_dtype d) { return d == REEL_F32 || d == REEL_F16 || d == REEL_BF16; }

static bool moe_ek_ok(const reel_op_attrs *a)
{
    return a->moe.num_experts >= 1 && a->moe.num_experts <= REEL_MOE_MAX_EXPERTS && a->moe.top_k >= 1 &&
           a->moe.top_k <= REEL_MOE_MAX_TOPK && a->moe.top_k <= a->moe.num_experts;
}

static bool use_route(REEL_CU_USE_ARGS)
{
    if (nin < 2 || !moe_ek_ok(a) || !is_fl(in[0].dtype) || out[0].dtype != REEL_I32 || out[1].dtype != REEL_F32)
        return false;
    if (in[1].ndim != 0 && in[1].dtype != REEL_F32)
        return false;
    const int ng = a->moe.n_group;
    /* Groups as the schema allows them: at most 256 (of 2 experts). */
    return ng <= 1 || (a->moe.num_experts % ng == 0 && a->moe.num_experts / ng >= 2 && ng <= 256);
}

static bool use_align(REEL_CU_USE_ARGS)
{
    return nin >= 1 && moe_ek_ok(a) && in[0].dtype == REEL_I32 && out[0].dtype == REEL_I32 &&
           out[1].dtype == REEL_I32 && out[2].dtype == REEL_I32 && in[0].dims[0] * a->moe.top_k <= INT32_MAX;
}

/* The matmuls' 32-bit limits: inner and output dims, and the sorted rows. */
static bool mm_dims_ok(int64_t n, int64_t kdim, int64_t ncols)
{
    return n <= INT32_MAX && kdim > 0 && kdim <= INT32_MAX && ncols > 0 && ncols <= (int64_t)65535 * 16;
}

static bool use_gate_up(REEL_CU_USE_ARGS)
{
    if (nin < 4 || !moe_ek_ok(a) || !is_fl(in[0].dtype) || in[3].dtype != in[0].dtype ||
        out[0].dtype != in[0].dtype || in[1].dtype != REEL_I32 || in[2].dtype != REEL_I32)
        return false;
    return mm_dims_ok(in[0].dims[0] * a->moe.top_k, in[0].dims[1], out[0].dims[2]);
}

static bool use_down(REEL_CU_USE_ARGS)
{
    if (nin < 3 || !moe_ek_ok(a) || !is_fl(in[0].dtype) || in[2].dtype != in[0].dtype ||
        out[0].dtype != in[0].dtype || in[1].dtype != REEL_I32)
        return false;
    return mm_dims_ok(in[0].dims[0] * a->moe.top_k, in[0].dims[2], out[0].dims[2]);
}

static bool use_combine(REEL_CU_USE_ARGS)
{
    return nin >= 3 && moe_ek_ok(a) && is_fl(in[0].dtype) && out[0].dtype == in[0].dtype &&
           in[1].dtype == REEL_I32 && in[2].dtype == REEL_F32 && in[0].dims[0] <= INT32_MAX &&
           in[0].dims[2] <= INT32_MAX;
}

} /* namespace */
} /* namespace reel_cu */

REEL_CU_IMPL(reel_cu_moe_route_impl, "cuda.moe_route", REEL_OP_MOE_ROUTE, 10, true, false, reel_cu::use_route,
             reel_cu::route_launch);
REEL_CU_IMPL(reel_cu_moe_align_impl, "cuda.moe_align", REEL_OP_MOE_ALIGN, 10, true, false, reel_cu::use_align,
             reel_cu::align_launch);
REEL_CU_IMPL(reel_cu_moe_gate_up_impl, "cuda.moe_gate_up", REEL_OP_MOE_GATE_UP, 10, true, false,
             reel_cu::use_gate_up, reel_cu::gate_up_launch);
REEL_CU_IMPL(reel_cu_moe_down_impl, "cuda.moe_down", REEL_OP_MOE_DOWN, 10, true, false, reel_cu::use_down,
             reel_cu::down_launch);
REEL_CU_IMPL(reel_cu_moe_combine_impl, "cuda.moe_combine", REEL_OP_MOE_COMBINE, 10, true, false,
             reel_cu::use_combine, reel_cu::combine_launch);
