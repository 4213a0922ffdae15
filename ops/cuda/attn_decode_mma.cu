/* Split-KV decode on tensor cores (f16/bf16, head dims 64 and 128): the
 * same work split, chunking, guards and partials as attn_decode.cu, with
 * the query heads of one kv head as the rows of an m16n8k16 tile (up to 16
 * heads a block; GQA 8 fills half the rows, which costs nothing in a
 * kernel bound by the K/V stream).
 *
 * A block takes one (token, kv head, head group, chunk). The chunk's keys
 * come through the block table in tiles of DM_BN keys, staged in shared
 * memory by cp.async two tiles deep, so the next tile is in flight while
 * this one is computed; each warp takes 16 keys of every tile (S = Q K^T,
 * online softmax in base 2, O += P V) and the four warps' states are merged
 * in shared memory in warp order at the end. The chunk's block ids are
 * checked once before the first load.
 *
 * The one-kernel decode (attn_fw, attention.cu) also does the op's KV write:
 * no other kernel runs before it in the op, so a block writes, before it
 * reads the cache, every slot of the step that its chunk reads (its own
 * token's new key when the chunk holds the token's position, or any other
 * token's slot the block tables put there), and another block writing the
 * same slot writes the same bytes: whichever lands first, every block reads
 * what the reference's write-then-attend order gives. Each token's k, v
 * and rotated q and k are also written once by its writer block (the chunk
 * that holds its position, or chunk 0 for the tokens that attend nothing
 * here), so the cache and the rope outputs are whole whoever reads them. */
#include "ops/cuda/rope.cuh"
#include "ops/cuda/attention.cuh"
#include "ops/cuda/attn_tile.cuh"
#include "ops/cuda/mma.cuh"

namespace reel_cu {

enum { DM_BN = 64, DM_WARPS = 4, DM_THREADS = DM_WARPS * 32, DM_PAD = 8, DM_ROWS = 16, DM_BT = 256, DM_HASH = 1024 };

/* A cache block id's bit in the one-kernel decode's filter of the step's
 * slot blocks (a multiplicative hash: consecutive ids spread). */
__device__ __forceinline__ uint32_t dm_hash(int32_t blk)
{
    static_assert(DM_HASH == 1 << 10, "10 bits of hash");
    return ((uint32_t)blk * 2654435761u) >> (32 - 10);
}
/* -DREEL_ATTN_DM_TRACE builds a phase trace (a measurement build, never
 * a default): thread 0 of each of the first DM_TR_BLOCKS blocks stamps
 * clock64 at the phases below and %globaltimer at its start and end;
 * bench_attention prints them (reel_cu_dm_trace_*). A DEP stamp first
 * stores the value it names to shared memory and waits at a barrier, so it
 * is taken after the loads that value needs have landed. */
#ifdef REEL_ATTN_DM_TRACE
enum { DM_TR_BLOCKS = 2048, DM_TR_N = 16 };
__device__ unsigned long long dm_trace[DM_TR_BLOCKS][DM_TR_N];
__device__ __forceinline__ void dm_tr(int i)
{
    if (threadIdx.x == 0 && blockIdx.x < DM_TR_BLOCKS)
        dm_trace[blockIdx.x][i] = clock64();
}
__device__ __forceinline__ void dm_tr_gt(int i)
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    if (threadIdx.x == 0 && blockIdx.x < DM_TR_BLOCKS)
        dm_trace[blockIdx.x][i] = t;
}
#define DM_TR(i) dm_tr(i)
#define DM_TR_GT(i) dm_tr_gt(i)
#define DM_TR_DEP(i, v)                                                                                    \
    do {                                                                                                   \
        __shared__ volatile int s_trdep;                                                                   \
        if (threadIdx.x == 0)                                                                              \
            s_trdep = (int)(v);                                                                            \
        __syncthreads();                                                                                   \
        dm_tr(i);                                                                                          \
    } while (0)
#else
#define DM_TR(i) ((void)0)
#define DM_TR_GT(i) ((void)0)
#define DM_TR_DEP(i, v) ((void)0)
#endif
static constexpr int64_t DM_PREFETCH_BYTES = 16ll << 20;
#ifndef REEL_ATTN_YPB_GRID
#define REEL_ATTN_YPB_GRID 4096
#endif
static constexpr int64_t DM_YPB_GRID = REEL_ATTN_YPB_GRID;

/* K/V stages: two (one tile in flight while the block computes the
 * other). -DREEL_ATTN_DM_STAGES64=3 builds three at head dim 64, for A/B:
 * it measured slower in the decode step (four blocks an SM instead of
 * five; docs/benchmarks.md). */
#ifndef REEL_ATTN_DM_STAGES64
#define REEL_ATTN_DM_STAGES64 2
#endif
#ifndef REEL_ATTN_DM_STAGES128
#define REEL_ATTN_DM_STAGES128 2
#endif

/* dm_tile's lean paths (no key mask where a warp's 16 keys are all live,
 * no rescale where no row's maximum moved): the same bits, fewer
 * instructions a tile. -DREEL_ATTN_DM_LEAN=0 builds the plain tile (A/B). */
#ifndef REEL_ATTN_DM_LEAN
#define REEL_ATTN_DM_LEAN 1
#endif

template <int DH> static constexpr int dm_stages()
{
    return DH == 64 ? REEL_ATTN_DM_STAGES64 : REEL_ATTN_DM_STAGES128;
}

template <typename T, int DH> static constexpr size_t dm_stage_bytes()
{
    return sizeof(T) * 2 * dm_stages<DH>() * DM_BN * (DH + DM_PAD); /* the stages of K and V */
}

template <typename T, int DH> static constexpr size_t dm_merge_bytes()
{
    return sizeof(float) * DM_WARPS * DM_ROWS * (DH + 2);
}

template <typename T, int DH> static constexpr size_t dm_smem()
{
    return dm_stage_bytes<T, DH>() > dm_merge_bytes<T, DH>() ? dm_stage_bytes<T, DH>() : dm_merge_bytes<T, DH>();
}

__device__ __forceinline__ void dm_wait_producer()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    cudaGridDependencySynchronize();
#endif
}

/* The in-block combine (attn_decode_inblock): a chunk's block, its partial
 * (or its refusal mark) written, counts itself in for its (token, kv head,
 * head group); the last of the token's nact chunks to arrive merges all of
 * them, in chunk order whatever the arrival order, so the bits do not
 * depend on timing. The counters start at zero (the op's KV write zeroes
 * the workspace's, every step's upload the one-kernel decode's) and the
 * last block leaves them at zero. */
template <typename T, int DH>
__device__ __noinline__ void dm_arrive_and_combine(const float *ws, uint32_t *cnt, int64_t ci, const attn_geom &g,
                                                   int64_t t, int nchunks, int nact, int64_t h0, int nh, T *orow,
                                                   float *sm)
{
    /* The block's threads' partial stores come before thread 0's arrival
     * (the barrier), which releases them at device scope and, in the last
     * block, acquires every other block's (one acq_rel atomic: the fence a
     * grid barrier uses, by one thread instead of every thread's own); the
     * second barrier orders the block's reads below after it. */
    __shared__ int s_last;
    __syncthreads();
    DM_TR(10);
    if (threadIdx.x == 0) {
        uint32_t old;
        asm volatile("atom.add.acq_rel.gpu.u32 %0, [%1], 1;" : "=r"(old) : "l"(cnt + ci) : "memory");
        s_last = old == (uint32_t)(nact - 1);
        if (s_last)
            cnt[ci] = 0u; /* every chunk has arrived: left zero for the next launch */
    }
    __syncthreads();
    DM_TR(11);
    if (!s_last) {
        DM_TR(13);
        DM_TR_GT(15);
        return;
    }
    const int64_t stride = attn_ws_slot_floats(g);
    const float *base = ws + t * nchunks * stride;
    /* Every partial of the group into shared memory first, all loads in
     * flight at once (attn_decode_inblock checked that they fit). */
    const int np = nh * nact, nx = nh * DH;
    float *s_w = sm, *s_l = sm + np, *s_o = sm + np + DM_ROWS; /* [nh][nact], [nh], [nact][nh * DH] */
    for (int i = threadIdx.x; i < np; i += DM_THREADS)
        s_w[i] = __ldcg(base + (i % nact) * stride + g.qrow + h0 + i / nact);
    for (int i = threadIdx.x; i < nact * nx; i += DM_THREADS)
        s_o[i] = __ldcg(base + (i / nx) * stride + h0 * DH + i % nx);
    __syncthreads();
    DM_TR(12);
    if ((int)threadIdx.x < nh) {
        float *w = s_w + threadIdx.x * nact;
        float M = -INFINITY;
        bool bad = false;
        for (int c = 0; c < nact; c++) {
            if (__float_as_uint(w[c]) == REEL_ATTN_BAD_LSE)
                bad = true;
            else
                M = fmaxf(M, w[c]);
        }
        float L = 0.0f;
        for (int c = 0; c < nact; c++) {
            w[c] = bad || w[c] == -INFINITY ? 0.0f : exp2f(w[c] - M);
            L += w[c];
        }
        s_l[threadIdx.x] = bad ? 0.0f : L;
        if (g.lse)
            g.lse[t * g.h + h0 + threadIdx.x] = bad || L == 0.0f ? -INFINITY : (M + log2f(L)) * REEL_ATTN_LN2;
    }
    __syncthreads();
    for (int x = threadIdx.x; x < nx; x += DM_THREADS) {
        const int r = x / DH;
        const float L = s_l[r];
        float o = 0.0f;
        if (L != 0.0f) {
            const float *w = s_w + r * nact;
            for (int c = 0; c < nact; c++)
                o = fmaf(w[c], s_o[c * nx + x], o);
            o /= L;
        }
        orow[x] = from_f<T>(o);
    }
    DM_TR(13);
    DM_TR_GT(15);
}

/* The one-kernel decode's write of token u's k and v of kv head kvh (the
 * whole block calls it): into cache slot `slot` (-1: none), k rotated at
 * u's rope position when fw.half > 0 (cs: those cosines and sines where the
 * caller has them, else computed here), and the rotated k into kr too when
 * kr_too. The rope is rope.cuh's, the KV write kernel's bits. */
template <typename T, int DH>
__device__ void dm_put_kv(const attn_fw &fw, const attn_geom &g, int64_t u, int64_t kvh, int64_t slot, bool kr_too,
                          const float *cs)
{
    const T *k = (const T *)fw.k + u * g.kvrow + kvh * DH, *v = (const T *)fw.v + u * g.kvrow + kvh * DH;
    T *kd = slot >= 0 ? (T *)fw.kc + slot * g.kvrow + kvh * DH : nullptr;
    T *vd = slot >= 0 ? (T *)fw.vc + slot * g.kvrow + kvh * DH : nullptr;
    if (vd)
        for (int i = threadIdx.x; i < DH; i += DM_THREADS)
            vd[i] = v[i];
    if (fw.half <= 0) {
        if (kd)
            for (int i = threadIdx.x; i < DH; i += DM_THREADS)
                kd[i] = k[i];
        return;
    }
    const int32_t half = fw.half;
    T *kr = kr_too ? (T *)fw.kr + u * g.kvrow + kvh * DH : nullptr;
    for (int32_t w = threadIdx.x; w < DH - half; w += DM_THREADS) {
        float c = 0.0f, s = 0.0f;
        if (w < half) {
            if (cs) {
                c = cs[w];
                s = cs[half + w];
            } else {
                rope_cs(w, half, fw.theta, fw.pos[u], &c, &s);
            }
        }
        if (kd)
            rope_apply<T, int32_t>(k, kd, w, half, c, s);
        if (kr)
            rope_apply<T, int32_t>(k, kr, w, half, c, s);
    }
}

/* Whether a chunk's tiles take cp_async_kv_tile_pow2: a power-of-two block
 * size, the chunk's ids all in the block's shared copy (span: its last
 * block's index past its first; cap: the copy's length), and slot indices
 * in 32 bits. Uniform over the block. -DREEL_ATTN_DM_POW2=0 builds the
 * general loads everywhere (A/B). */
#ifndef REEL_ATTN_DM_POW2
#define REEL_ATTN_DM_POW2 1
#endif
__device__ __forceinline__ bool dm_pow2(const attn_geom &g, int32_t span, int cap)
{
    return REEL_ATTN_DM_POW2 && g.bs_shift >= 0 && span < cap && g.nblocks * g.bs <= INT32_MAX &&
           g.kvrow <= INT32_MAX;
}

/* Where an item's K/V tiles come from: the caches, the end of its keys
 * (k1; keys at or past it are zero-filled), its block ids from block b0
 * (the first CAP of them in shared memory at sbt, all in the table at bt),
 * its kv head, and whether the shift path applies (dm_pow2). */
template <typename T> struct dm_src {
    const T *kc, *vc;
    const int32_t *sbt, *bt;
    int32_t b0, k1;
    int64_t kvh;
    bool pow2;
};

/* The load phase of both decode kernels: tile kt's K and V rows into one
 * stage (ks, vs), one commit group. */
template <typename T, int DH, int LD, int CAP>
__device__ __forceinline__ void dm_load_tile(T *ks, T *vs, const dm_src<T> &s, int32_t kt, const attn_geom &g)
{
    if (s.pow2) {
        cp_async_kv_tile_pow2<T, DH, DM_BN, DM_THREADS, LD>(ks, vs, s.kc, s.vc, kt, s.k1, s.sbt, s.b0, g.bs_shift,
                                                           (int32_t)g.kvrow, (int32_t)(s.kvh * DH));
        return;
    }
    const int32_t bs = (int32_t)g.bs;
    cp_async_kv_tile<T, DH, DM_BN, DM_THREADS, LD>(
        ks, vs, s.kc, s.vc, kt, [&](int32_t j) { return j < s.k1; },
        [&](int32_t j) {
            const int32_t bj = attn_blk(g, j);
            const int32_t blk = bj - s.b0 < CAP ? s.sbt[bj - s.b0] : s.bt[bj];
            return ((int64_t)blk * bs + attn_in_blk(g, j)) * g.kvrow + s.kvh * DH;
        });
}

/* Where an item of the decode grid is: head group y (of hkv x hsplit) of
 * token and chunk tc (t x nchunks + c), its kv head, head group hs, and its
 * heads h0 .. h0 + nh - 1 (rows 0 .. nh - 1 of the tile). */
struct dm_where {
    int64_t t, kvh, h0;
    int c, hs, nh;
};

__device__ __forceinline__ dm_where dm_where_of(const attn_geom &g, int nchunks, int hsplit, int64_t y, int64_t tc)
{
    dm_where w;
    w.t = tc / nchunks;
    w.c = (int)(tc % nchunks);
    w.kvh = y / hsplit;
    w.hs = (int)(y % hsplit);
    w.h0 = w.kvh * g.group + (int64_t)w.hs * DM_ROWS;
    w.nh = (int)min((int64_t)DM_ROWS, g.group - (int64_t)w.hs * DM_ROWS);
    return w;
}

/* The scores of a warp's 16 keys (from kw) in base 2, keys at k1 or past
 * masked to -inf, and the rows' maxima folded into mx0, mx1. Where all 16
 * keys are live (warp-uniform) the mask is skipped: the same products. */
__device__ __forceinline__ void dm_scale_max(float (&sc)[2][4], int32_t kw, int32_t k1, float qscale, int ti,
                                             float &mx0, float &mx1)
{
    if (!REEL_ATTN_DM_LEAN || kw + 16 > k1) {
#pragma unroll
        for (int n = 0; n < 2; n++) {
#pragma unroll
            for (int e = 0; e < 2; e++) {
                bool live = kw + n * 8 + ti * 2 + e < k1;
                sc[n][e] = live ? sc[n][e] * qscale : -INFINITY;
                sc[n][2 + e] = live ? sc[n][2 + e] * qscale : -INFINITY;
                mx0 = fmaxf(mx0, sc[n][e]);
                mx1 = fmaxf(mx1, sc[n][2 + e]);
            }
        }
    } else {
#pragma unroll
        for (int n = 0; n < 2; n++) {
#pragma unroll
            for (int e = 0; e < 2; e++) {
                sc[n][e] *= qscale;
                sc[n][2 + e] *= qscale;
                mx0 = fmaxf(mx0, sc[n][e]);
                mx1 = fmaxf(mx1, sc[n][2 + e]);
            }
        }
    }
    mx0 = quad_max(mx0);
    mx1 = quad_max(mx1);
}

/* The online softmax update (base 2) of rows gi (m0, l0) and gi + 8 (m1,
 * l1) by a tile whose row maxima are mx0, mx1 (finite: the warp's first
 * key is live): o and l rescaled, and sc made P. */
template <int DT>
__device__ __forceinline__ void dm_softmax(float (&sc)[2][4], float mx0, float mx1, float (&o)[DT][4], float &m0,
                                           float &m1, float &l0, float &l1)
{
    float c0 = ex2_ftz(m0 - mx0), c1 = ex2_ftz(m1 - mx1);
    /* Where no row's maximum moved, c0 and c1 are exactly 1 and the
     * rescale multiplies by 1: skipping it keeps every bit (a running
     * maximum moves at a few tiles of a chunk, not at every one). */
    if (!REEL_ATTN_DM_LEAN || __any_sync(0xffffffffu, mx0 != m0 || mx1 != m1)) {
        l0 *= c0;
        l1 *= c1;
        scale_rows(o, c0, c1);
    }
    m0 = mx0;
    m1 = mx1;
#pragma unroll
    for (int n = 0; n < 2; n++) {
        sc[n][0] = ex2_ftz(sc[n][0] - mx0);
        sc[n][1] = ex2_ftz(sc[n][1] - mx0);
        sc[n][2] = ex2_ftz(sc[n][2] - mx1);
        sc[n][3] = ex2_ftz(sc[n][3] - mx1);
        l0 += sc[n][0] + sc[n][1];
        l1 += sc[n][2] + sc[n][3];
    }
}

/* One tile of a warp's 16 keys (from kw; those at k1 or past are masked):
 * S = Q K^T, the online softmax in base 2, O += P V, on the tile's K and V
 * in shared memory. The decode kernels' one copy of the arithmetic, so a
 * chunk's partial has the same bits whichever kernel computes it. */
template <typename T, int DH, int LD>
__device__ __forceinline__ void dm_tile(const T *ks, const T *vs, const uint32_t (&qf)[DH / 16][4], int32_t kw,
                                        int32_t k1, float qscale, float (&o)[DH / 8][4], float &m0, float &m1,
                                        float &l0, float &l1, int warp, int lane)
{
    float sc[2][4];
    attn_qk<T, DH / 16, 2, LD>(sc, qf, ks, warp * 16, lane);
    float mx0 = m0, mx1 = m1;
    dm_scale_max(sc, kw, k1, qscale, lane & 3, mx0, mx1);
    dm_softmax(sc, mx0, mx1, o, m0, m1, l0, l1);
    attn_pv<T, 2, DH / 8, LD>(o, sc, vs, warp * 16, lane);
}

/* The warps' merge of one item: each warp leaves its rows' (O, m, l) in
 * shared memory, rows 0-7 at lo and 8-15 at hi ([warp][8][DH + 2] floats
 * each), then the block merges them in warp order (dm_merge_store, after a
 * barrier). Both decode kernels merge through these, so a chunk's partial
 * has the same bits whichever computes it. */
template <int DH>
__device__ __forceinline__ void dm_merge_put(float *lo, float *hi, const float (&o)[DH / 8][4], float m0, float m1,
                                             float l0, float l1, int warp, int lane)
{
    static_assert(DM_ROWS == 16, "a warp's rows are gi and gi + 8");
    const int gi = lane >> 2, ti = lane & 3;
    l0 = quad_sum(l0);
    l1 = quad_sum(l1);
    float *w0 = lo + (warp * 8 + gi) * (DH + 2), *w1 = hi + (warp * 8 + gi) * (DH + 2);
#pragma unroll
    for (int n = 0; n < DH / 8; n++) {
        int d = n * 8 + ti * 2;
        w0[d] = o[n][0];
        w0[d + 1] = o[n][1];
        w1[d] = o[n][2];
        w1[d + 1] = o[n][3];
    }
    if (ti == 0) {
        w0[DH] = m0;
        w0[DH + 1] = l0;
        w1[DH] = m1;
        w1[DH + 1] = l1;
    }
}

/* The merged rows of heads h0 .. h0 + nh - 1 of token t, chunk c: the
 * output (and lse) where the token has one chunk, else the chunk's partial
 * in the workspace. */
template <typename T, int DH>
__device__ __forceinline__ void dm_merge_store(const float *lo, const float *hi, const attn_geom &g, float *ws,
                                               T *orow, int64_t t, int c, int nchunks, int nact, int64_t h0, int nh)
{
    float *slot = ws + (t * nchunks + c) * (g.qrow + g.h);
    for (int x = threadIdx.x; x < nh * DH; x += DM_THREADS) {
        const int r = x / DH, d = x % DH;
        const float *half = (r < 8 ? lo : hi) + (r & 7) * (DH + 2);
        float M = -INFINITY;
#pragma unroll
        for (int w = 0; w < DM_WARPS; w++)
            M = fmaxf(M, half[w * 8 * (DH + 2) + DH]);
        float L = 0.0f, acc = 0.0f;
#pragma unroll
        for (int w = 0; w < DM_WARPS; w++) {
            const float *row = half + w * 8 * (DH + 2);
            float mv = row[DH];
            float f = mv == -INFINITY ? 0.0f : exp2f(mv - M);
            L += row[DH + 1] * f;
            acc += row[d] * f;
        }
        if (nact == 1) {
            orow[x] = from_f<T>(acc / L);
            if (g.lse && d == 0)
                g.lse[t * g.h + h0 + r] = (M + log2f(L)) * REEL_ATTN_LN2;
        } else {
            slot[(h0 + r) * DH + d] = acc / L;
            if (d == 0)
                slot[g.qrow + h0 + r] = M + log2f(L);
        }
    }
}

/* The chunk's block ids from b0 (those of a chunk that may attend, spec),
 * the first DM_BT of them into s_bt: read once before the wait, so a
 * tile's loads need no dependent global read of the table. Returns whether
 * one breaches. */
__device__ __forceinline__ int dm_read_ids(const attn_geom &g, const attn_dec_tok &tk, const int32_t *bt, int32_t b0,
                                           int32_t *s_bt)
{
    int mybad = 0;
    if (tk.spec)
        for (int32_t b = b0 + threadIdx.x; b <= attn_blk(g, tk.k1 - 1); b += DM_THREADS) {
            const int32_t blk = bt[b];
            mybad |= blk < 0 || blk >= g.nblocks;
            if (b - b0 < DM_BT)
                s_bt[b - b0] = blk;
        }
    return mybad;
}

/* The one-kernel decode's shared state of an item (dm_item declares it):
 * the step's slots (slot; sblk, soff: its cache block and offset, -1 where
 * none), a hash of the blocks that hold one, the other tokens' slots the
 * chunk reads (put: a bit a token), the token's own key in the chunk (jown:
 * its index, nown: how many), and the rope's cosines and sines (cs). */
struct dm_fw_sh {
    int64_t *slot;
    int32_t *sblk, *soff;
    unsigned long long *put;
    uint32_t *hash;
    int32_t *jown, *nown;
    float *cs;
};

/* The one-kernel decode's view of the step's slots before the wait, a
 * thread a token (my_slot: its slot), and the rope's frequency of this
 * thread's pair (no input at all), with its angle's cosine or sine where
 * the position is readable now (pos_early). Returns the frequency. */
__device__ __forceinline__ double dm_fw_prepare(const attn_fw &fw, int64_t rows, int64_t t, int32_t bs,
                                                int64_t my_slot, bool pos_early, const dm_fw_sh &sh)
{
    double freq = 0.0;
    if (threadIdx.x < DM_HASH / 32)
        sh.hash[threadIdx.x] = 0u;
    __syncthreads();
    if (threadIdx.x < rows) {
        const int64_t sl = my_slot;
        bool in = sl >= 0 && sl < fw.nslots;
        sh.slot[threadIdx.x] = sl;
        sh.sblk[threadIdx.x] = in ? (int32_t)(sl / bs) : -1;
        sh.soff[threadIdx.x] = in ? (int32_t)(sl % bs) : 0;
        if (in) {
            uint32_t hb = dm_hash((int32_t)(sl / bs));
            atomicOr(&sh.hash[hb / 32], 1u << (hb % 32));
        }
    }
    if (threadIdx.x == 0) {
        *sh.put = 0ull;
        *sh.jown = INT32_MAX;
        *sh.nown = 0;
    }
    if ((int)threadIdx.x < 2 * fw.half) {
        int32_t j = (int32_t)threadIdx.x;
        freq = rope_freq(j < fw.half ? j : j - fw.half, fw.half, fw.theta);
        if (pos_early) {
            double ang = (double)fw.pos[t] * freq;
            sh.cs[j] = j < fw.half ? (float)cos(ang) : (float)sin(ang);
        }
    }
    __syncthreads();
    DM_TR(2);
    return freq;
}

/* With fw.on, which slots of the step the chunk's block ids (read by
 * dm_read_ids; the barriers before make them whole) hold at a key of the
 * chunk [k0, k1): the token's own (jown, nown: patched into shared memory
 * after the load) and the others' (put: written and read back). */
__device__ __forceinline__ void dm_fw_match(const attn_geom &g, const attn_fw &fw, int64_t rows, int64_t t,
                                            int32_t b0, int32_t k0, int32_t k1, const int32_t *s_bt,
                                            const int32_t *bt, const dm_fw_sh &sh)
{
    const int32_t bs = (int32_t)g.bs;
    for (int32_t b = b0 + threadIdx.x; fw.on && b <= attn_blk(g, k1 - 1); b += DM_THREADS) {
        const int32_t blk = b - b0 < DM_BT ? s_bt[b - b0] : bt[b];
        const uint32_t hb = dm_hash(blk);
        if (sh.hash[hb / 32] >> (hb % 32) & 1u)
            for (int u = 0; u < (int)rows; u++) {
                int32_t j = b * bs + sh.soff[u];
                if (sh.sblk[u] != blk || j < k0 || j >= k1)
                    continue;
                if (u == t) {
                    atomicMin(sh.jown, j);
                    atomicAdd(sh.nown, 1);
                } else {
                    atomicOr(sh.put, 1ull << u);
                }
            }
    }
}

/* Where there is a kernel before to overlap (pdl), the chunk's first K/V
 * rows [k0, k0 + pf_keys) asked of L2 before the wait: nothing before this
 * kernel writes them in the step (pf_keys: the launch's L2 budget, dm_run). */
template <typename T, int DH>
__device__ __forceinline__ void dm_prefetch_l2(const T *kc, const T *vc, const attn_geom &g, const int32_t *bt,
                                               int32_t k0, int32_t k1, int64_t kvh, int32_t pf_keys, bool pdl)
{
    const int32_t bs = (int32_t)g.bs;
    constexpr int LINES = DH * (int)sizeof(T) / 128; /* 128-byte lines of a row's head */
    const int32_t npf = min(k1 - k0, pf_keys);
    for (int32_t i = threadIdx.x; pdl && i < npf * LINES; i += DM_THREADS) {
        int32_t j = k0 + i / LINES, bi = bt[attn_blk(g, j)];
        if (bi < 0 || bi >= g.nblocks)
            continue;
        int64_t row =
            ((int64_t)bi * bs + attn_in_blk(g, j)) * g.kvrow + kvh * DH + (i % LINES) * (128 / (int)sizeof(T));
        asm volatile("prefetch.global.L2 [%0];" ::"l"(kc + row));
        asm volatile("prefetch.global.L2 [%0];" ::"l"(vc + row));
    }
}

/* The token's own new key and value, dimension d = threadIdx.x (the key
 * rotated by rope_apply's formula for the pair d belongs to, cs its
 * cosines and sines): stored into the tile after its load, instead of a
 * round trip through the cache. */
template <typename T, int DH>
__device__ __forceinline__ float2 dm_own_kv(const attn_fw &fw, const attn_geom &g, int64_t t, int64_t kvh,
                                            int32_t half, const float *cs)
{
    float kown, vown;
    const T *kx = (const T *)fw.k + t * g.kvrow + kvh * DH;
    const int d = (int)threadIdx.x;
    vown = to_f(((const T *)fw.v)[t * g.kvrow + kvh * DH + d]);
    if (half <= 0 || d >= 2 * half) {
        kown = to_f(kx[d]);
    } else {
        const int w = d < half ? d : d - half;
        const float x1 = to_f(kx[w]), x2 = to_f(kx[half + w]), cw = cs[w], sw = cs[half + w];
        kown = d < half ? to_f(from_f<T>(__fsub_rn(__fmul_rn(x1, cw), __fmul_rn(x2, sw))))
                        : to_f(from_f<T>(__fadd_rn(__fmul_rn(x2, cw), __fmul_rn(x1, sw))));
    }
    return make_float2(kown, vown);
}

/* This block's q heads h0 .. h0 + nh - 1 of token t, rotated into s_q
 * (their one rotation: the writer stores them as the rope's result too). */
template <typename T, int DH>
__device__ __forceinline__ void dm_rotate_q(const T *q, const attn_geom &g, int64_t t, int64_t h0, int nh,
                                            int32_t half, const float *cs, T *s_q)
{
    for (int i = threadIdx.x; i < nh * (DH - half); i += DM_THREADS) {
        int hh = i / (DH - half), w = i % (DH - half);
        float cw = w < half ? cs[w] : 0.0f, sw = w < half ? cs[half + w] : 0.0f;
        rope_apply<T, int32_t>(q + t * g.qrow + (h0 + hh) * DH, s_q + hh * DH, w, half, cw, sw);
    }
}

/* What the one-kernel decode's writes leave an item: whether it goes on
 * to attend (attn_decode_act), whether the token's own key is in the chunk
 * (own; kown, vown: this thread's dimension of it), and whether its first
 * tile is already loading (early). */
struct dm_own {
    bool go, own, early;
    float kown, vown;
};

/* The one-kernel decode's writes, after the wait: the rope's cosines and
 * sines where the position was not readable before, the token's own write
 * (its writer block, hs 0), the other slots the chunk reads, this block's
 * rotated q heads (to qr too by the writer). The first tile's loads go
 * before the writes where no slot of the step is read back from the cache
 * (its own key, if any, is patched in after the load). */
template <typename T, int DH, int LD>
__device__ __forceinline__ dm_own dm_fw_write(const T *q, const reel_meta_view &m, const attn_geom &g,
                                              const attn_fw &fw, const attn_dec_tok &tk, const dm_where &wh,
                                              T *orow, const dm_src<T> &src, T *ks0, T *vs0, T *s_q, bool writer,
                                              bool pos_early, double freq, int mybad, const dm_fw_sh &sh)
{
    dm_own r = {false, false, false, 0.0f, 0.0f};
    const int64_t t = wh.t;
    const int32_t half = fw.half;
    if (half > 0 && !pos_early && (int)threadIdx.x < 2 * half) {
        double ang = (double)fw.pos[t] * freq;
        sh.cs[threadIdx.x] = (int)threadIdx.x < half ? (float)cos(ang) : (float)sin(ang);
    }
    /* cs, the matches complete, and whether any block id breaches */
    const int anybad = __syncthreads_or(mybad);
    unsigned long long more = *sh.put;
    r.own = *sh.nown == 1;
    if (*sh.nown > 1)
        more |= 1ull << t; /* two keys of the chunk at the slot: through the cache */
    r.early = tk.attend && !anybad && !more;
    if (r.early)
        dm_load_tile<T, DH, LD, DM_BT>(ks0, vs0, src, tk.k0, g);
    if (writer && wh.hs == 0) {
        /* The token's own write, whatever it attends (the KV write
         * kernel's guard: slot -1 skipped, out of range reported). */
        const int64_t slot = sh.slot[t];
        const bool put = slot >= 0 && slot < fw.nslots;
        if (!put && slot != -1 && threadIdx.x == 0)
            report(&m, REEL_E_LIMIT);
        dm_put_kv<T, DH>(fw, g, t, wh.kvh, put ? slot : -1, half > 0, sh.cs);
    }
    if (r.own && (int)threadIdx.x < DH) {
        const float2 kv = dm_own_kv<T, DH>(fw, g, t, wh.kvh, half, sh.cs);
        r.kown = kv.x;
        r.vown = kv.y;
    }
    for (int u = 0; more; u++, more >>= 1)
        if (more & 1u)
            dm_put_kv<T, DH>(fw, g, u, wh.kvh, sh.slot[u], false, u == t ? sh.cs : nullptr);
    if (half > 0)
        dm_rotate_q<T, DH>(q, g, t, wh.h0, wh.nh, half, sh.cs, s_q);
    if (*sh.put | (*sh.nown > 1 ? 1ull : 0ull))
        __threadfence(); /* the rows written above, before this block reads them back */
    __syncthreads();
    DM_TR_DEP(5, __float_as_int(r.kown) ^ __float_as_int(r.vown));
    if (writer && half > 0) {
        typedef pack<T> P;
        for (int i = threadIdx.x; i < wh.nh * DH / P::n; i += DM_THREADS)
            ((P *)((T *)fw.qr + t * g.qrow + wh.h0 * DH))[i] = ((const P *)s_q)[i];
    }
    r.go = attn_decode_act(m, g, tk, t, wh.c, orow, wh.h0, wh.nh);
    return r;
}

/* An item's prologue: its first tile's loads (unless dm_fw_write issued
 * them: early), Q's fragments of rows gi and gi + 8 (heads h0 + gi and
 * h0 + gi + 8; rot: rotated into s_q by the one-kernel decode), then the
 * other stages but one (tiles 1 .. NS - 2, one commit group each). */
template <typename T, int DH>
__device__ __forceinline__ void dm_prologue(T (*ks_all)[DM_BN * (DH + DM_PAD)], T (*vs_all)[DM_BN * (DH + DM_PAD)],
                                            const dm_src<T> &src, const attn_geom &g, int32_t k0, int ntiles,
                                            bool early, const T *q, const T *s_q, bool rot, int64_t t, int64_t h0,
                                            int nh, int gi, int ti, uint32_t (&qf)[DH / 16][4])
{
    constexpr int LD = DH + DM_PAD, NS = dm_stages<DH>();
    if (!early)
        dm_load_tile<T, DH, LD, DM_BT>(ks_all[0], vs_all[0], src, k0, g);
    const T *q0 = rot ? s_q + gi * DH : q + t * g.qrow + (h0 + gi) * DH, *q1 = q0 + 8 * DH;
    attn_q_frags<T, DH / 16>(qf, q0, q1, gi < nh, gi + 8 < nh, ti);
    if (rot)
        __syncthreads(); /* s_q is the second K stage, which the second tile fills */
#pragma unroll
    for (int st = 1; st < NS - 1; st++) {
        if (st < ntiles)
            dm_load_tile<T, DH, LD, DM_BT>(ks_all[st], vs_all[st], src, k0 + st * DM_BN, g);
        else
            cp_async_commit();
    }
}

/* An item's main loop over its ntiles tiles from k0: NS stages, tile
 * it + NS - 1 in flight while tile it is computed (dm_tile, each warp 16
 * of its keys), the token's own key and value (own) patched over what the
 * cache held in the tile that holds it. */
template <typename T, int DH>
__device__ __forceinline__ void dm_mainloop(T (*ks_all)[DM_BN * (DH + DM_PAD)], T (*vs_all)[DM_BN * (DH + DM_PAD)],
                                            const dm_src<T> &src, const attn_geom &g, int32_t k0, int ntiles,
                                            const uint32_t (&qf)[DH / 16][4], float qscale, const dm_own &own,
                                            const int32_t &s_jown, float (&o)[DH / 8][4], float &m0, float &m1,
                                            float &l0, float &l1)
{
    constexpr int LD = DH + DM_PAD, NS = dm_stages<DH>();
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int it = 0; it < ntiles; it++) {
        const int32_t kt = k0 + it * DM_BN;
        const int stage = it % NS;
        if (it + NS - 1 < ntiles)
            dm_load_tile<T, DH, LD, DM_BT>(ks_all[(it + NS - 1) % NS], vs_all[(it + NS - 1) % NS], src,
                                           kt + (NS - 1) * DM_BN, g);
        else
            cp_async_commit();
        cp_async_wait<NS - 1>(); /* tile it has landed */
        __syncthreads();
        if (it == 0)
            DM_TR(7);
        if (own.own && s_jown >= kt && s_jown < kt + DM_BN) {
            if ((int)threadIdx.x < DH) {
                ks_all[stage][(s_jown - kt) * LD + threadIdx.x] = from_f<T>(own.kown);
                vs_all[stage][(s_jown - kt) * LD + threadIdx.x] = from_f<T>(own.vown);
            }
            __syncthreads();
        }
        const T *ks = ks_all[stage], *vs = vs_all[stage];
        const int32_t kw = kt + warp * 16; /* this warp's 16 keys */
        if (kw < src.k1)
            dm_tile<T, DH, LD>(ks, vs, qf, kw, src.k1, qscale, o, m0, m1, l0, l1, warp, lane);
        __syncthreads(); /* the next iteration's load reuses this stage */
    }
}

/* One item of the decode grid: head group y (of ny = hkv x hsplit) of the
 * token and chunk tc (t x nchunks + c). Every return is the whole block's. */
template <typename T, int DH>
__device__ __forceinline__ void dm_item(const T *__restrict__ q, const T *__restrict__ kc, const T *__restrict__ vc,
                                        T *__restrict__ out, float *__restrict__ ws, const reel_meta_view &m,
                                        const attn_geom &g, int64_t rows, int nchunks, int hsplit, bool skip_runs,
                                        uint32_t *cnt, const attn_fw &fw, int32_t pf_keys, bool pdl, int64_t y,
                                        int64_t tc)
{
    constexpr int LD = DH + DM_PAD, NS = dm_stages<DH>();
    extern __shared__ __align__(16) unsigned char dm_smem_raw[];
    T(*ks_all)[DM_BN * LD] = (T(*)[DM_BN * LD])dm_smem_raw;
    T(*vs_all)[DM_BN * LD] = (T(*)[DM_BN * LD])(dm_smem_raw + sizeof(T) * NS * DM_BN * LD);
    float *mrg = (float *)dm_smem_raw; /* after the loop: the warp merge (dm_merge_put) */
    const int64_t ny = g.hkv * hsplit;
    const dm_where wh = dm_where_of(g, nchunks, hsplit, y, tc);
    const int64_t t = wh.t, h0 = wh.h0;
    const int c = wh.c, nh = wh.nh;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int gi = lane >> 2, ti = lane & 3;
    T *orow = out + t * g.qrow + h0 * DH;
    /* The metadata in two dependent reads: the step's slots (the one-kernel
     * decode) with the token's sequence and position; then its context
     * length with the chunk's block ids, which need only the first. */
    const int64_t my_slot = fw.on && threadIdx.x < rows ? m.slot_mapping[threadIdx.x] : -1;
    attn_dec_tok tk = attn_decode_classify_pre(m, g, t, rows, c, nchunks, skip_runs);
    __shared__ int32_t s_bt[DM_BT];
    const int32_t *bt = m.block_tables + (int64_t)(tk.spec ? tk.seq : 0) * m.max_blocks;
    const int32_t b0 = tk.spec ? attn_blk(g, tk.k0) : 0;
    int mybad = dm_read_ids(g, tk, bt, b0, s_bt);
    attn_decode_classify_fin(m, g, c, &tk);
    mybad &= tk.attend ? 1 : 0; /* a chunk the guard refuses reads nothing */
    DM_TR_DEP(1, tk.k1 + tk.nact + tk.seq + mybad);
    /* A block of the one-kernel decode lives to its wait whatever it
     * attends: it may have writes to do. Not a chunk past the token's
     * last: the token's writer is one of its used chunks (or chunk 0), and
     * a chunk that attends nothing matches no slot, so it has none, and
     * leaves now instead of holding its slot through the wait. */
    if (fw.on && !tk.run && c >= tk.nact)
        return;
    if (!fw.on && !attn_decode_act(m, g, tk, t, c, orow, h0, nh))
        return;
    const int32_t k0 = tk.k0, k1 = tk.k1;
    const int nact = tk.nact;
    static_assert(REEL_ATTN_ONE_KERNEL_ROWS <= 64 && REEL_ATTN_ONE_KERNEL_ROWS <= DM_THREADS,
                  "a token a bit of s_put, a thread each");
    __shared__ int64_t s_slot[REEL_ATTN_ONE_KERNEL_ROWS];
    __shared__ int32_t s_sblk[REEL_ATTN_ONE_KERNEL_ROWS], s_soff[REEL_ATTN_ONE_KERNEL_ROWS];
    __shared__ unsigned long long s_put;
    /* Which cache blocks hold a slot of the step, hashed (DM_HASH bits): a
     * chunk block whose bit is clear holds none, and is not matched
     * against every token. */
    __shared__ uint32_t s_hash[DM_HASH / 32];
    __shared__ int32_t s_jown, s_nown;
    __shared__ float s_cs[DH];
    const dm_fw_sh sh = {s_slot, s_sblk, s_soff, &s_put, s_hash, &s_jown, &s_nown, s_cs};
    /* The rotated q heads of the one-kernel decode ([16][DH]) in the second
     * K stage, which no load fills before the q fragments are read. */
    T *s_q = ks_all[1];
    static_assert(DM_ROWS * DH <= DM_BN * LD, "16 heads fit one K stage");
    const bool writer = c == (!tk.run && tk.ok == 1 ? nact - 1 : 0);
    /* The rope's positions are the step's metadata (uploaded before the
     * step: readable before the wait) when they are that tensor. */
    const bool pos_early = fw.on && fw.half > 0 && fw.pos == m.positions;
    double freq = 0.0;
    if (fw.on)
        freq = dm_fw_prepare(fw, rows, t, (int32_t)g.bs, my_slot, pos_early, sh);
    if (tk.attend) {
        dm_fw_match(g, fw, rows, t, b0, k0, k1, s_bt, bt, sh);
        dm_prefetch_l2<T, DH>(kc, vc, g, bt, k0, k1, wh.kvh, pf_keys, pdl);
    }
    DM_TR_DEP(3, mybad);
    /* Every id of the chunk in s_bt and a power-of-two block size: a
     * tile's row addresses from shifts (dm_pow2, the same bytes). */
    const dm_src<T> src = {kc, vc, s_bt, bt, b0, k1, wh.kvh,
                           dm_pow2(g, tk.attend ? attn_blk(g, k1 - 1) - b0 : 0, DM_BT)};
    /* Launched as a programmatic dependent, everything above overlapped the
     * kernel before it; q, k, v and the cache are read after. */
    if (pdl)
        dm_wait_producer();
    dm_own own = {true, false, false, 0.0f, 0.0f};
    if (fw.on) {
        own = dm_fw_write<T, DH, LD>(q, m, g, fw, tk, wh, orow, src, ks_all[0], vs_all[0], s_q, writer, pos_early,
                                     freq, mybad, sh);
        if (!own.go)
            return;
    }
    if (__syncthreads_or(mybad)) {
        attn_chunk_refuse(m, g, ws, t, c, nchunks, nact, h0, nh, orow);
        if (cnt && nact > 1)
            dm_arrive_and_combine<T, DH>(ws, cnt, t * ny + y, g, t, nchunks, nact, h0, nh, orow,
                                         (float *)dm_smem_raw);
        return;
    }

    const int ntiles = (k1 - k0 + DM_BN - 1) / DM_BN;
    uint32_t qf[DH / 16][4];
    dm_prologue<T, DH>(ks_all, vs_all, src, g, k0, ntiles, own.early, q, s_q, fw.on && fw.half > 0, t, h0, nh, gi,
                       ti, qf);
    const float qscale = g.scale * 1.4426950408889634f;
    float o[DH / 8][4];
    attn_zero_frags(o);
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
    dm_mainloop<T, DH>(ks_all, vs_all, src, g, k0, ntiles, qf, qscale, own, s_jown, o, m0, m1, l0, l1);

    DM_TR(8);
    float *mhi = mrg + DM_WARPS * 8 * (DH + 2);
    dm_merge_put<DH>(mrg, mhi, o, m0, m1, l0, l1, warp, lane);
    __syncthreads();
    DM_TR(9);
    dm_merge_store<T, DH>(mrg, mhi, g, ws, orow, t, c, nchunks, nact, h0, nh);
    if (cnt && nact > 1) {
        dm_arrive_and_combine<T, DH>(ws, cnt, t * ny + y, g, t, nchunks, nact, h0, nh, orow, mrg);
    } else {
        DM_TR(13);
        DM_TR_GT(15);
    }
}

/* MULTI: a block takes ypb head groups of one token and chunk in turn (ypb
 * divides ny; dm_ypb): a step of long prefill runs then has rows x chunks
 * blocks that end at their first read, not ny times as many. Otherwise a
 * block is one item (the instantiation every decode batch to 64 tokens
 * runs, kept apart so that its registers stay the item's own). */
template <typename T, int DH, bool MULTI>
__global__ void __launch_bounds__(DM_THREADS)
    attn_decode_mma_kernel(const T *__restrict__ q, const T *__restrict__ kc, const T *__restrict__ vc,
                           T *__restrict__ out, float *__restrict__ ws, reel_meta_view m, attn_geom g,
                           int64_t rows, int nchunks, int hsplit, bool skip_runs, uint32_t *cnt, attn_fw fw,
                           int32_t pf_keys, int ypb, bool pdl)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    /* The op's next kernel may launch now: it waits for this grid's
     * completion before it reads what this one writes. */
    cudaTriggerProgrammaticLaunchCompletion();
#endif
    DM_TR_GT(14);
    DM_TR(0);
    if constexpr (!MULTI) {
        const int64_t ny = g.hkv * hsplit;
        dm_item<T, DH>(q, kc, vc, out, ws, m, g, rows, nchunks, hsplit, skip_runs, cnt, fw, pf_keys, pdl,
                       blockIdx.x % ny, blockIdx.x / ny);
    } else {
        const int64_t nyb = g.hkv * hsplit / ypb;
        const int64_t yb = blockIdx.x % nyb, tc = blockIdx.x / nyb;
        if (skip_runs && attn_in_run(m, tc / nchunks, rows))
            return; /* the prefill kernel's token, for every head group */
        for (int i = 0; i < ypb; i++) {
            if (i > 0)
                __syncthreads(); /* the previous item is done with shared memory */
            dm_item<T, DH>(q, kc, vc, out, ws, m, g, rows, nchunks, hsplit, skip_runs, cnt, fw, pf_keys, pdl,
                           yb * ypb + i, tc);
        }
    }
}

/* The persistent decode (docs/attention.md, "The persistent decode"): a grid of
 * one wave, each block taking items blockIdx.x, + gridDim.x, ... (at most
 * PS_MAXI) of the same (token, chunk, head group) grid the one-item kernel
 * runs, as one stream of K/V tiles. All of a block's items are classified
 * and their block ids read at its start, in one round, so an item's first
 * tiles are loaded while the item before it is computed: a later item pays
 * no metadata chain and no first-tile latency, which a block of a later
 * wave of the one-item kernel pays again. An item's partial has the one-item
 * kernel's bits (dm_tile, the same warp merge); its chunks are merged by the
 * combine kernel. Only where the KV write ran before (no attn_fw). */
enum { PS_MAXI = 8, PS_BT = 128 };

/* A block's items in its shared memory (the kernel declares the arrays):
 * per item its keys [k0, k1), the chunks its token uses, its sequence,
 * what it does (0 nothing, 1 attends, 2 zeros: attn_decode_act), its guard
 * (attn_token_ok), a breach of its block ids, and the first PS_BT ids. */
struct ps_items {
    int32_t *k0, *k1, *nact, *seq;
    int *what, *ok, *bad;
    int32_t (*bt)[PS_BT];
};

/* The launch's items: the grid (G blocks), the head groups of a token
 * (ny = hkv x hsplit) and its chunks. */
struct ps_grid {
    int64_t G, ny;
    int nchunks, hsplit;
};

/* The block's item k: item blockIdx.x + k G of the one-item grid. */
__device__ __forceinline__ dm_where ps_item_at(const attn_geom &g, const ps_grid &pg, int k)
{
    const int64_t i = (int64_t)blockIdx.x + (int64_t)k * pg.G, y = i % pg.ny, tc = i / pg.ny;
    return dm_where_of(g, pg.nchunks, pg.hsplit, y, tc);
}

/* Every item's metadata, a thread an item, from the metadata alone. */
__device__ __forceinline__ void ps_classify(const reel_meta_view &m, const attn_geom &g, const ps_grid &pg,
                                            int64_t rows, bool skip_runs, int nk, const ps_items &s)
{
    if ((int)threadIdx.x < nk) {
        const dm_where wh = ps_item_at(g, pg, (int)threadIdx.x);
        attn_dec_tok tk = attn_decode_classify(m, g, wh.t, rows, wh.c, pg.nchunks, skip_runs);
        s.k0[threadIdx.x] = tk.k0;
        s.k1[threadIdx.x] = tk.k1;
        s.nact[threadIdx.x] = tk.nact;
        s.seq[threadIdx.x] = tk.seq;
        s.ok[threadIdx.x] = tk.ok;
        s.what[threadIdx.x] = tk.attend ? 1 : tk.run || wh.c >= tk.nact ? 0 : 2;
        s.bad[threadIdx.x] = 0;
    }
}

/* Every attending item's block ids, checked, the first PS_BT kept: the
 * whole block, one item after another. */
__device__ __forceinline__ void ps_read_ids(const reel_meta_view &m, const attn_geom &g, int nk, const ps_items &s)
{
    for (int k = 0; k < nk; k++) {
        if (s.what[k] != 1)
            continue;
        const int32_t *bt = m.block_tables + (int64_t)s.seq[k] * m.max_blocks;
        const int32_t b0 = attn_blk(g, s.k0[k]), b1 = attn_blk(g, s.k1[k] - 1);
        int bad = 0;
        for (int32_t b = b0 + threadIdx.x; b <= b1; b += DM_THREADS) {
            const int32_t blk = bt[b];
            bad |= blk < 0 || blk >= g.nblocks;
            if (b - b0 < PS_BT)
                s.bt[k][b - b0] = blk;
        }
        if (bad)
            s.bad[k] = 1;
    }
}

/* The outputs of the items that attend nothing (zeros, a breach reported)
 * or whose ids breach (attn_chunk_refuse), before any tile is loaded. */
template <typename T, int DH>
__device__ __forceinline__ void ps_finish_idle(T *out, float *ws, const reel_meta_view &m, const attn_geom &g,
                                               const ps_grid &pg, int nk, const ps_items &s)
{
    for (int k = 0; k < nk; k++) {
        if (s.what[k] == 0 || (s.what[k] == 1 && !s.bad[k]))
            continue;
        const dm_where wh = ps_item_at(g, pg, k);
        T *orow = out + wh.t * g.qrow + wh.h0 * DH;
        if (s.what[k] == 2) {
            for (int64_t i = threadIdx.x; i < wh.nh * DH; i += DM_THREADS)
                orow[i] = from_f<T>(0.0f);
            attn_put_lse(g, wh.t, wh.h0, wh.nh, -INFINITY);
            if (s.ok[k] < 0 && threadIdx.x == 0)
                report(&m, REEL_E_LIMIT);
        } else {
            attn_chunk_refuse(m, g, ws, wh.t, wh.c, pg.nchunks, s.nact[k], wh.h0, wh.nh, orow);
        }
    }
}

/* Whether item k attends with whole ids; the first such item from k; its tiles. */
__device__ __forceinline__ bool ps_live(const ps_items &s, int nk, int k)
{
    return k < nk && s.what[k] == 1 && !s.bad[k];
}

__device__ __forceinline__ int ps_next_live(const ps_items &s, int nk, int k)
{
    while (k < nk && !ps_live(s, nk, k))
        k++;
    return k;
}

__device__ __forceinline__ int ps_ntiles(const ps_items &s, int k)
{
    return (s.k1[k] - s.k0[k] + DM_BN - 1) / DM_BN;
}

/* The producer of the block's stream of tiles: tile pt of item pk into
 * stage (an empty commit group past the last item), then (pk, pt) steps to
 * the next tile of the live items. */
template <typename T, int DH>
__device__ __forceinline__ void ps_produce(T (*ks_all)[DM_BN * (DH + DM_PAD)], T (*vs_all)[DM_BN * (DH + DM_PAD)],
                                           const T *kc, const T *vc, const reel_meta_view &m, const attn_geom &g,
                                           const ps_grid &pg, int nk, const ps_items &s, int stage, int &pk, int &pt)
{
    if (pk >= nk) {
        cp_async_commit();
        return;
    }
    const dm_where wh = ps_item_at(g, pg, pk);
    const int32_t k0 = s.k0[pk], k1 = s.k1[pk], b0 = attn_blk(g, k0);
    const int32_t *bt = m.block_tables + (int64_t)s.seq[pk] * m.max_blocks;
    const dm_src<T> src = {kc, vc, s.bt[pk], bt, b0, k1, wh.kvh, dm_pow2(g, attn_blk(g, k1 - 1) - b0, PS_BT)};
    dm_load_tile<T, DH, DH + DM_PAD, PS_BT>(ks_all[stage], vs_all[stage], src, k0 + pt * DM_BN, g);
    if (++pt == ps_ntiles(s, pk)) {
        pk = ps_next_live(s, nk, pk + 1);
        pt = 0;
    }
}

/* An item's start: Q's fragments of its heads, and an empty (o, m, l). */
template <typename T, int DH>
__device__ __forceinline__ void ps_item_begin(const T *q, const attn_geom &g, const dm_where &wh,
                                              int gi, int ti, uint32_t (&qf)[DH / 16][4],
                                              float (&o)[DH / 8][4], float &m0, float &m1, float &l0, float &l1)
{
    const T *q0 = q + wh.t * g.qrow + (wh.h0 + gi) * DH, *q1 = q0 + 8 * DH;
    attn_q_frags<T, DH / 16>(qf, q0, q1, gi < wh.nh, gi + 8 < wh.nh, ti);
    attn_zero_frags(o);
    m0 = m1 = -INFINITY;
    l0 = l1 = 0.0f;
}

template <typename T, int DH>
__global__ void __launch_bounds__(DM_THREADS, 3)
    attn_decode_ps_kernel(const T *__restrict__ q, const T *__restrict__ kc, const T *__restrict__ vc,
                          T *__restrict__ out, float *__restrict__ ws, reel_meta_view m, attn_geom g, int64_t rows,
                          int nchunks, int hsplit, bool skip_runs, int64_t total, bool pdl)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    cudaTriggerProgrammaticLaunchCompletion();
#endif
    constexpr int LD = DH + DM_PAD, NS = dm_stages<DH>();
    static_assert(DM_WARPS * 8 * (DH + 2) * sizeof(float) <= DM_BN * LD * sizeof(T),
                  "eight rows of the warp merge fit one K or V stage");
    extern __shared__ __align__(16) unsigned char dm_smem_raw[];
    T(*ks_all)[DM_BN * LD] = (T(*)[DM_BN * LD])dm_smem_raw;
    T(*vs_all)[DM_BN * LD] = (T(*)[DM_BN * LD])(dm_smem_raw + sizeof(T) * NS * DM_BN * LD);
    __shared__ int32_t s_k0[PS_MAXI], s_k1[PS_MAXI], s_nact[PS_MAXI], s_seq[PS_MAXI];
    __shared__ int s_what[PS_MAXI], s_ok[PS_MAXI], s_bad[PS_MAXI];
    __shared__ int32_t s_bt[PS_MAXI][PS_BT];
    const ps_items s = {s_k0, s_k1, s_nact, s_seq, s_what, s_ok, s_bad, s_bt};

    const ps_grid pg = {gridDim.x, g.hkv * hsplit, nchunks, hsplit};
    const int nk = (int)((total - (int64_t)blockIdx.x + pg.G - 1) / pg.G);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int gi = lane >> 2, ti = lane & 3;
    ps_classify(m, g, pg, rows, skip_runs, nk, s);
    __syncthreads();
    ps_read_ids(m, g, nk, s);
    __syncthreads();
    if (pdl)
        dm_wait_producer();
    ps_finish_idle<T, DH>(out, ws, m, g, pg, nk, s);

    /* The producer (pk, pt) runs NS - 1 tiles ahead of the consumer (ck, ct). */
    int ck = ps_next_live(s, nk, 0), ct = 0, pk = ck, pt = 0;
#pragma unroll
    for (int st = 0; st < NS - 1; st++)
        ps_produce<T, DH>(ks_all, vs_all, kc, vc, m, g, pg, nk, s, st, pk, pt);
    const float qscale = g.scale * 1.4426950408889634f;
    uint32_t qf[DH / 16][4];
    float o[DH / 8][4];
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
    int stage = 0;
    while (ck < nk) {
        ps_produce<T, DH>(ks_all, vs_all, kc, vc, m, g, pg, nk, s, (stage + NS - 1) % NS, pk, pt);
        const dm_where wh = ps_item_at(g, pg, ck);
        if (ct == 0)
            ps_item_begin<T, DH>(q, g, wh, gi, ti, qf, o, m0, m1, l0, l1);
        const int32_t k1 = s_k1[ck], kw = s_k0[ck] + ct * DM_BN + warp * 16;
        cp_async_wait<NS - 1>(); /* tile (ck, ct) has landed */
        __syncthreads();
        if (kw < k1)
            dm_tile<T, DH, LD>(ks_all[stage], vs_all[stage], qf, kw, k1, qscale, o, m0, m1, l0, l1, warp, lane);
        __syncthreads(); /* the stage is free: the merge below, then the next load */
        if (++ct == ps_ntiles(s, ck)) {
            /* The warps' merge through the stage just read (rows 0-7 in its
             * K half, 8-15 in its V half). */
            float *mk = (float *)ks_all[stage], *mv = (float *)vs_all[stage];
            dm_merge_put<DH>(mk, mv, o, m0, m1, l0, l1, warp, lane);
            __syncthreads();
            dm_merge_store<T, DH>(mk, mv, g, ws, out + wh.t * g.qrow + wh.h0 * DH, wh.t, wh.c, nchunks, s_nact[ck],
                                  wh.h0, wh.nh);
            __syncthreads(); /* the merge's reads, before the stage is loaded again */
            ck = ps_next_live(s, nk, ck + 1);
            ct = 0;
        }
        stage = (stage + 1) % NS;
    }
    cp_async_wait<0>();
}

/* Head groups a block takes: 1 while the grid has fewer than 2 x
 * DM_YPB_GRID items (every decode batch to 64 tokens with up to 64 kv head
 * groups), else the grid halved while it keeps DM_YPB_GRID blocks
 * (docs/attention.md). Depends only on the launch. */
static int dm_ypb(int64_t items, int64_t ny, bool fw_on)
{
    int ypb = 1;
    while (!fw_on && ny % (2 * ypb) == 0 && items / (2 * ypb) >= DM_YPB_GRID)
        ypb *= 2;
    return ypb;
}

bool attn_decode_mma_supports(reel_dtype dt, int64_t dh)
{
    return (dt == REEL_F16 || dt == REEL_BF16) && (dh == 64 || dh == 128);
}

int attn_decode_mma_group(void)
{
    return DM_ROWS;
}

int64_t attn_decode_mma_smem_floats(int64_t dh)
{
    return (int64_t)(dh == 64 ? dm_smem<__half, 64>() : dm_smem<__half, 128>()) / (int64_t)sizeof(float);
}

/* The shared-memory opt-in past 48 KB, once per kernel, at its first launch
 * (a warm-up before any capture). */
template <typename T, int DH, bool MULTI> static cudaError_t dm_opt_in()
{
    static std::atomic<unsigned long long> done(0);
    return smem_opt_in(attn_decode_mma_kernel<T, DH, MULTI>, dm_smem<T, DH>(), done);
}

/* Blocks of the one-item kernel an SM holds (blocks_per_sm_once). */
template <typename T, int DH> static int dm_blocks_per_sm()
{
    static std::atomic<int> memo(-1);
    return blocks_per_sm_once(memo, attn_decode_mma_kernel<T, DH, false>, DM_THREADS, dm_smem<T, DH>(),
                              dm_opt_in<T, DH, false>);
}

template <typename T, int DH> static cudaError_t ps_opt_in()
{
    static std::atomic<unsigned long long> done(0);
    return smem_opt_in(attn_decode_ps_kernel<T, DH>, dm_smem<T, DH>(), done);
}

template <typename T, int DH> static int ps_blocks_per_sm()
{
    static std::atomic<int> memo(-1);
    return blocks_per_sm_once(memo, attn_decode_ps_kernel<T, DH>, DM_THREADS, dm_smem<T, DH>(), ps_opt_in<T, DH>);
}

/* The persistent decode where a launch's items take more than one wave of
 * its blocks, each block then has at most PS_MAXI of them, and no item
 * spans more than REEL_ATTN_PERSIST_KEYS keys (the chunk length of a token
 * at max_context): a grid of one wave. Measured on an H200
 * (docs/benchmarks.md): 1-7% faster steps where items are short (batches
 * 32-64 at context 128, 3 chunks of about 700 keys at batch 32, context
 * 2048), 7-14% slower where they are 2048 keys and more, whose stream of
 * one block per slot holds fewer bytes in flight than the one-item
 * kernel's blocks. -DREEL_ATTN_PERSIST=0 builds the one-item kernel
 * everywhere. */
#ifndef REEL_ATTN_PERSIST
#define REEL_ATTN_PERSIST 1
#endif
#ifndef REEL_ATTN_PERSIST_KEYS
#define REEL_ATTN_PERSIST_KEYS 1024
#endif

int64_t attn_decode_persist_grid(const reel_backend *be, const attn_geom &g, reel_dtype dt, int64_t rows,
                                 int nchunks, int32_t max_context)
{
    if (!REEL_ATTN_PERSIST || !attn_decode_mma_supports(dt, g.dh) || max_context < 1)
        return 0;
    int32_t span = 0;
    attn_chunking(g, max_context - 1, nchunks, &span);
    if (span > REEL_ATTN_PERSIST_KEYS)
        return 0;
    const bool bf = dt == REEL_BF16;
    const int per_sm = g.dh == 64 ? (bf ? ps_blocks_per_sm<__nv_bfloat16, 64>() : ps_blocks_per_sm<__half, 64>())
                                  : (bf ? ps_blocks_per_sm<__nv_bfloat16, 128>() : ps_blocks_per_sm<__half, 128>());
    const int64_t sms = be->caps.sm_count > 0 ? be->caps.sm_count : 132;
    const int64_t items = rows * nchunks * g.hkv * ((g.group + DM_ROWS - 1) / DM_ROWS), slots = per_sm * sms;
    if (per_sm <= 0 || items <= slots || (items + slots - 1) / slots > PS_MAXI)
        return 0;
    return slots;
}

int attn_decode_mma_blocks_per_sm(reel_dtype dt, int64_t dh)
{
    if (!attn_decode_mma_supports(dt, dh))
        return 0;
    if (dh == 64)
        return dt == REEL_BF16 ? dm_blocks_per_sm<__nv_bfloat16, 64>() : dm_blocks_per_sm<__half, 64>();
    return dt == REEL_BF16 ? dm_blocks_per_sm<__nv_bfloat16, 128>() : dm_blocks_per_sm<__half, 128>();
}

template <typename T, int DH>
static cudaError_t dm_run(const reel_launch *l, cudaStream_t st, const attn_geom &g, int nchunks, bool skip,
                          bool inblock, bool pdl, const attn_fw &fw, uint32_t *cnt, int64_t ps_grid)
{
    int hsplit = (int)((g.group + DM_ROWS - 1) / DM_ROWS);
    const int64_t blocks = l->rows * nchunks * g.hkv * hsplit;
    if (ps_grid > 0 && !fw.on && !inblock) {
        cudaError_t e = ps_opt_in<T, DH>();
        if (e != cudaSuccess)
            return e;
        return launch(attn_decode_ps_kernel<T, DH>, dim3((unsigned)ps_grid), DM_THREADS, dm_smem<T, DH>(), st, pdl,
                      (const T *)attn_q(l), (const T *)l->in[3], (const T *)l->in[4], (T *)l->out[0],
                      (float *)l->out[1], *l->meta, g, l->rows, nchunks, hsplit, skip, blocks);
    }
    const int ypb = dm_ypb(blocks, g.hkv * hsplit, fw.on);
    cudaError_t e = ypb > 1 ? dm_opt_in<T, DH, true>() : dm_opt_in<T, DH, false>();
    if (e != cudaSuccess)
        return e;
    dim3 grid((unsigned)(blocks / ypb));
    float *ws = (float *)l->out[1];
    /* The one-kernel decode rotates q itself: it reads the op's q. */
    const T *q = (const T *)(fw.on ? l->in[0] : attn_q(l));
    /* What a block asks L2 for before its wait: its chunk's first keys, at
     * most DM_PREFETCH_BYTES for the whole grid (whole chunks at batch 1,
     * one tile where the K/V of the step is far past what L2 holds). */
    const int64_t per_key = 2 * DH * (int64_t)sizeof(T);
    const int64_t bn = DM_BN;
    int64_t pf = DM_PREFETCH_BYTES / (blocks * per_key) / bn * bn;
    const int32_t pf_keys = (int32_t)(pf < bn ? bn : pf > INT32_MAX ? INT32_MAX : pf);
    return launch(ypb > 1 ? attn_decode_mma_kernel<T, DH, true> : attn_decode_mma_kernel<T, DH, false>, grid,
                  DM_THREADS, dm_smem<T, DH>(), st, pdl, q,
                  (const T *)l->in[3], (const T *)l->in[4], (T *)l->out[0], ws, *l->meta, g, l->rows, nchunks,
                  hsplit, skip, inblock ? cnt : (uint32_t *)nullptr, fw, pf_keys, ypb);
}

#ifdef REEL_ATTN_DM_TRACE
extern "C" cudaError_t reel_cu_dm_trace_clear(void)
{
    void *p;
    cudaError_t e = cudaGetSymbolAddress(&p, dm_trace);
    return e != cudaSuccess ? e : cudaMemset(p, 0, sizeof dm_trace);
}

extern "C" cudaError_t reel_cu_dm_trace_read(unsigned long long *dst, int *nblocks, int *nphases)
{
    *nblocks = DM_TR_BLOCKS;
    *nphases = DM_TR_N;
    return cudaMemcpyFromSymbol(dst, dm_trace, sizeof dm_trace);
}
#endif

cudaError_t attn_decode_mma_launch(const reel_launch *l, cudaStream_t st, const attn_geom &g, int nchunks,
                                   bool skip_runs, bool inblock, bool pdl, const attn_fw &fw, uint32_t *cnt,
                                   int64_t ps_grid)
{
    bool bf = l->in_shape[0].dtype == REEL_BF16;
    if (g.dh == 64)
        return bf ? dm_run<__nv_bfloat16, 64>(l, st, g, nchunks, skip_runs, inblock, pdl, fw, cnt, ps_grid)
                  : dm_run<__half, 64>(l, st, g, nchunks, skip_runs, inblock, pdl, fw, cnt, ps_grid);
    return bf ? dm_run<__nv_bfloat16, 128>(l, st, g, nchunks, skip_runs, inblock, pdl, fw, cnt, ps_grid)
              : dm_run<__half, 128>(l, st, g, nchunks, skip_runs, inblock, pdl, fw, cnt, ps_grid);
}

} /* namespace reel_cu */
