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

/* One tile of a warp's 16 keys (from kw; those at k1 or past are masked):
 * S = Q K^T, the online softmax in base 2, O += P V, on the tile's K and V
 * in shared memory. The decode kernels' one copy of the arithmetic, so a
 * chunk's partial has the same bits whichever kernel computes it. */
template <typename T, int DH, int LD>
__device__ __forceinline__ void dm_tile(const T *ks, const T *vs, const uint32_t (&qf)[DH / 16][4], int32_t kw,
                                        int32_t k1, float qscale, float (&o)[DH / 8][4], float &m0, float &m1,
                                        float &l0, float &l1, int warp, int lane)
{
    constexpr int KSTEPS = DH / 16, DTILES = DH / 8;
    const int ti = lane & 3;
    float sc[2][4];
#pragma unroll
    for (int n = 0; n < 2; n++)
        sc[n][0] = sc[n][1] = sc[n][2] = sc[n][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < KSTEPS; kk++) {
        uint32_t b[4];
        int key = warp * 16 + (lane >> 4) * 8 + (lane & 7);
        int dim = kk * 16 + ((lane >> 3) & 1) * 8;
        ldsm_x4(b, &ks[key * LD + dim]);
        mma_op<T>::run(sc[0], qf[kk], b);
        mma_op<T>::run(sc[1], qf[kk], b + 2);
    }
    float mx0 = m0, mx1 = m1;
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
    } else { /* all 16 keys live (warp-uniform): the same products, no mask */
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
    /* The warp's first key is live, so mx0 and mx1 are finite. */
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
    uint32_t a[4];
    c_to_a<T>(sc[0], sc[1], a);
#pragma unroll
    for (int n = 0; n < DTILES; n += 2) {
        uint32_t b[4];
        int key = warp * 16 + ((lane >> 3) & 1) * 8 + (lane & 7);
        int dim = (n + (lane >> 4)) * 8;
        ldsm_x4_t(b, &vs[key * LD + dim]);
        mma_op<T>::run(o[n], a, b);
        mma_op<T>::run(o[n + 1], a, b + 2);
    }
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
    constexpr int KSTEPS = DH / 16, DTILES = DH / 8;
    extern __shared__ __align__(16) unsigned char dm_smem_raw[];
    T(*ks_all)[DM_BN * LD] = (T(*)[DM_BN * LD])dm_smem_raw;
    T(*vs_all)[DM_BN * LD] = (T(*)[DM_BN * LD])(dm_smem_raw + sizeof(T) * NS * DM_BN * LD);
    float *mrg = (float *)dm_smem_raw; /* after the loop: the warp merge (dm_merge_put) */

    const int64_t ny = g.hkv * hsplit;
    const int64_t t = tc / nchunks;
    const int c = (int)(tc % nchunks);
    const int64_t kvh = y / hsplit;
    const int hs = (int)(y % hsplit);
    const int64_t h0 = kvh * g.group + (int64_t)hs * DM_ROWS;
    const int nh = (int)min((int64_t)DM_ROWS, g.group - (int64_t)hs * DM_ROWS);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int gi = lane >> 2, ti = lane & 3;

    T *orow = out + t * g.qrow + h0 * DH;
    /* The metadata in two dependent reads: the step's slots (the one-kernel
     * decode) with the token's sequence and position; then its context
     * length with the chunk's block ids, which need only the first. */
    const int64_t my_slot = fw.on && threadIdx.x < rows ? m.slot_mapping[threadIdx.x] : -1;
    attn_dec_tok tk = attn_decode_classify_pre(m, g, t, rows, c, nchunks, skip_runs);
    /* The chunk's first DM_BT block ids, read once before the wait: a
     * tile's loads then need no dependent global read of the table. */
    __shared__ int32_t s_bt[DM_BT];
    const int32_t *bt = m.block_tables + (int64_t)(tk.spec ? tk.seq : 0) * m.max_blocks;
    const int32_t b0 = tk.spec ? attn_blk(g, tk.k0) : 0;
    int mybad = 0;
    if (tk.spec)
        for (int32_t b = b0 + threadIdx.x; b <= attn_blk(g, tk.k1 - 1); b += DM_THREADS) {
            const int32_t blk = bt[b];
            mybad |= blk < 0 || blk >= g.nblocks;
            if (b - b0 < DM_BT)
                s_bt[b - b0] = blk;
        }
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
    const int32_t bs = (int32_t)g.bs;
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
    /* The rotated q heads of the one-kernel decode ([16][DH]) in the second
     * K stage, which no load fills before the q fragments are read. */
    T *s_q = ks_all[1];
    static_assert(DM_ROWS * DH <= DM_BN * LD, "16 heads fit one K stage");
    const bool writer = c == (!tk.run && tk.ok == 1 ? nact - 1 : 0);
    /* The rope's positions are the step's metadata (uploaded before the
     * step: readable before the wait) when they are that tensor. */
    const bool pos_early = fw.on && fw.half > 0 && fw.pos == m.positions;
    double freq = 0.0;
    if (fw.on) {
        if (threadIdx.x < DM_HASH / 32)
            s_hash[threadIdx.x] = 0u;
        __syncthreads();
        if (threadIdx.x < rows) {
            const int64_t sl = my_slot;
            bool in = sl >= 0 && sl < fw.nslots;
            s_slot[threadIdx.x] = sl;
            s_sblk[threadIdx.x] = in ? (int32_t)(sl / bs) : -1;
            s_soff[threadIdx.x] = in ? (int32_t)(sl % bs) : 0;
            if (in) {
                uint32_t hb = dm_hash((int32_t)(sl / bs));
                atomicOr(&s_hash[hb / 32], 1u << (hb % 32));
            }
        }
        if (threadIdx.x == 0) {
            s_put = 0ull;
            s_jown = INT32_MAX;
            s_nown = 0;
        }
        if ((int)threadIdx.x < 2 * fw.half) {
            /* the frequency of this thread's pair (no input at all), and
             * its angle's cosine or sine where the position is readable */
            int32_t j = (int32_t)threadIdx.x;
            freq = rope_freq(j < fw.half ? j : j - fw.half, fw.half, fw.theta);
            if (pos_early) {
                double ang = (double)fw.pos[t] * freq;
                s_cs[j] = j < fw.half ? (float)cos(ang) : (float)sin(ang);
            }
        }
        __syncthreads();
        DM_TR(2);
    }

    /* With fw.on, which slots of the step the chunk's block ids (read
     * above; the barriers of the block before make them whole) hold at a
     * key of the chunk: the token's own (s_jown, s_nown: patched into shared
     * memory below) and the others' (s_put: written and read back). Then,
     * where there is a kernel before to overlap, the chunk's K/V rows asked
     * of L2: nothing before this kernel writes them in the step. */
    if (tk.attend) {
        for (int32_t b = b0 + threadIdx.x; fw.on && b <= attn_blk(g, k1 - 1); b += DM_THREADS) {
            const int32_t blk = b - b0 < DM_BT ? s_bt[b - b0] : bt[b];
            const uint32_t hb = dm_hash(blk);
            if (s_hash[hb / 32] >> (hb % 32) & 1u)
                for (int u = 0; u < (int)rows; u++) {
                    int32_t j = b * bs + s_soff[u];
                    if (s_sblk[u] != blk || j < k0 || j >= k1)
                        continue;
                    if (u == t) {
                        atomicMin(&s_jown, j);
                        atomicAdd(&s_nown, 1);
                    } else {
                        atomicOr(&s_put, 1ull << u);
                    }
                }
        }
        constexpr int LINES = DH * (int)sizeof(T) / 128; /* 128-byte lines of a row's head */
        const int32_t npf = min(k1 - k0, pf_keys); /* the launch's L2 budget (dm_run) */
        for (int32_t i = threadIdx.x; pdl && i < npf * LINES; i += DM_THREADS) {
            int32_t j = k0 + i / LINES, bi = bt[attn_blk(g, j)];
            if (bi < 0 || bi >= g.nblocks)
                continue;
            int64_t row = ((int64_t)bi * bs + attn_in_blk(g, j)) * g.kvrow + kvh * DH + (i % LINES) * (128 / (int)sizeof(T));
            asm volatile("prefetch.global.L2 [%0];" ::"l"(kc + row));
            asm volatile("prefetch.global.L2 [%0];" ::"l"(vc + row));
        }
    }
    DM_TR_DEP(3, mybad);
    /* Every id of the chunk in s_bt and a power-of-two block size: a
     * tile's row addresses from shifts (dm_pow2, the same bytes). */
    const bool pow2 = dm_pow2(g, tk.attend ? attn_blk(g, k1 - 1) - b0 : 0, DM_BT);
    auto load_tile = [&](int32_t kt, int stage) {
        if (pow2) {
            cp_async_kv_tile_pow2<T, DH, DM_BN, DM_THREADS, LD>(ks_all[stage], vs_all[stage], kc, vc, kt, k1, s_bt,
                                                               b0, g.bs_shift, (int32_t)g.kvrow, (int32_t)(kvh * DH));
            return;
        }
        cp_async_kv_tile<T, DH, DM_BN, DM_THREADS, LD>(
            ks_all[stage], vs_all[stage], kc, vc, kt, [&](int32_t j) { return j < k1; },
            [&](int32_t j) {
                const int32_t bj = attn_blk(g, j);
                const int32_t blk = bj - b0 < DM_BT ? s_bt[bj - b0] : bt[bj];
                return ((int64_t)blk * bs + attn_in_blk(g, j)) * g.kvrow + kvh * DH;
            });
    };
    /* Launched as a programmatic dependent, everything above overlapped the
     * kernel before it; q, k, v and the cache are read after. */
    if (pdl)
        dm_wait_producer();
    /* The token's own new key and value (rotated), where the chunk reads
     * them: thread d holds dimension d, stored into the tile after its
     * load (own), instead of a round trip through the cache. */
    bool own = false, early = false;
    float kown = 0.0f, vown = 0.0f;
    if (fw.on) {
        const int32_t half = fw.half;
        if (half > 0 && !pos_early && (int)threadIdx.x < 2 * half) {
            double ang = (double)fw.pos[t] * freq;
            s_cs[threadIdx.x] = (int)threadIdx.x < half ? (float)cos(ang) : (float)sin(ang);
        }
        /* s_cs, the matches complete, and whether any block id breaches */
        const int anybad = __syncthreads_or(mybad);
        unsigned long long more = s_put;
        own = s_nown == 1;
        if (s_nown > 1)
            more |= 1ull << t; /* two keys of the chunk at the slot: through the cache */
        /* No slot of the step to read back from the cache (its own key, if
         * any, is patched in after the load): the first tile's loads go
         * now, under the writes below, instead of after them. */
        early = tk.attend && !anybad && !more;
        if (early)
            load_tile(k0, 0);
        if (writer && hs == 0) {
            /* The token's own write, whatever it attends (the KV write
             * kernel's guard: slot -1 skipped, out of range reported). */
            const int64_t slot = s_slot[t];
            const bool put = slot >= 0 && slot < fw.nslots;
            if (!put && slot != -1 && threadIdx.x == 0)
                report(&m, REEL_E_LIMIT);
            dm_put_kv<T, DH>(fw, g, t, kvh, put ? slot : -1, half > 0, s_cs);
        }
        if (own && (int)threadIdx.x < DH) {
            const T *kx = (const T *)fw.k + t * g.kvrow + kvh * DH;
            const int d = (int)threadIdx.x;
            vown = to_f(((const T *)fw.v)[t * g.kvrow + kvh * DH + d]);
            if (half <= 0 || d >= 2 * half) {
                kown = to_f(kx[d]);
            } else {
                /* rope_apply's formula for the pair d belongs to */
                const int w = d < half ? d : d - half;
                const float x1 = to_f(kx[w]), x2 = to_f(kx[half + w]), cw = s_cs[w], sw = s_cs[half + w];
                kown = d < half ? to_f(from_f<T>(__fsub_rn(__fmul_rn(x1, cw), __fmul_rn(x2, sw))))
                                : to_f(from_f<T>(__fadd_rn(__fmul_rn(x2, cw), __fmul_rn(x1, sw))));
            }
        }
        for (int u = 0; more; u++, more >>= 1)
            if (more & 1u)
                dm_put_kv<T, DH>(fw, g, u, kvh, s_slot[u], false, u == t ? s_cs : nullptr);
        /* This block's q heads, rotated (their one rotation: the writer
         * stores them as the rope's result too). */
        if (half > 0)
            for (int i = threadIdx.x; i < nh * (DH - half); i += DM_THREADS) {
                int hh = i / (DH - half), w = i % (DH - half);
                float cw = w < half ? s_cs[w] : 0.0f, sw = w < half ? s_cs[half + w] : 0.0f;
                rope_apply<T, int32_t>(q + t * g.qrow + (h0 + hh) * DH, s_q + hh * DH, w, half, cw, sw);
            }
        if (s_put | (s_nown > 1 ? 1ull : 0ull))
            __threadfence(); /* the rows written above, before this block reads them back */
        __syncthreads();
        DM_TR_DEP(5, __float_as_int(kown) ^ __float_as_int(vown));
        if (writer && half > 0) {
            typedef pack<T> P;
            for (int i = threadIdx.x; i < nh * DH / P::n; i += DM_THREADS)
                ((P *)((T *)fw.qr + t * g.qrow + h0 * DH))[i] = ((const P *)s_q)[i];
        }
        if (!attn_decode_act(m, g, tk, t, c, orow, h0, nh))
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
    if (!early)
        load_tile(k0, 0);

    /* Rows gi and gi + 8 are heads h0 + gi and h0 + gi + 8. */
    uint32_t qf[KSTEPS][4];
    {
        const bool in0 = gi < nh, in1 = gi + 8 < nh;
        const bool rot = fw.on && fw.half > 0; /* q rotated above, in s_q */
        const T *q0 = rot ? s_q + gi * DH : q + t * g.qrow + (h0 + gi) * DH, *q1 = q0 + 8 * DH;
#pragma unroll
        for (int kk = 0; kk < KSTEPS; kk++) {
            int d = kk * 16 + ti * 2;
            qf[kk][0] = in0 ? *(const uint32_t *)(q0 + d) : 0u;
            qf[kk][1] = in1 ? *(const uint32_t *)(q1 + d) : 0u;
            qf[kk][2] = in0 ? *(const uint32_t *)(q0 + d + 8) : 0u;
            qf[kk][3] = in1 ? *(const uint32_t *)(q1 + d + 8) : 0u;
        }
        if (rot)
            __syncthreads(); /* s_q is the second K stage, which the second tile fills */
    }
    /* The other stages but one: tiles 1 .. NS-2, one commit group each. */
#pragma unroll
    for (int st = 1; st < NS - 1; st++) {
        if (st < ntiles)
            load_tile(k0 + st * DM_BN, st);
        else
            cp_async_commit();
    }
    const float qscale = g.scale * 1.4426950408889634f;
    float o[DTILES][4];
#pragma unroll
    for (int n = 0; n < DTILES; n++)
        o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;

    for (int it = 0; it < ntiles; it++) {
        const int32_t kt = k0 + it * DM_BN;
        const int stage = it % NS;
        if (it + NS - 1 < ntiles)
            load_tile(kt + (NS - 1) * DM_BN, (it + NS - 1) % NS);
        else
            cp_async_commit();
        cp_async_wait<NS - 1>(); /* tile it has landed */
        __syncthreads();
        if (it == 0)
            DM_TR(7);
        if (own && s_jown >= kt && s_jown < kt + DM_BN) {
            /* the token's own key and value over what the cache held */
            if ((int)threadIdx.x < DH) {
                ks_all[stage][(s_jown - kt) * LD + threadIdx.x] = from_f<T>(kown);
                vs_all[stage][(s_jown - kt) * LD + threadIdx.x] = from_f<T>(vown);
            }
            __syncthreads();
        }
        const T *ks = ks_all[stage], *vs = vs_all[stage];
        const int32_t kw = kt + warp * 16; /* this warp's 16 keys */
        if (kw < k1)
            dm_tile<T, DH, LD>(ks, vs, qf, kw, k1, qscale, o, m0, m1, l0, l1, warp, lane);
        __syncthreads(); /* the next iteration's load reuses this stage */
    }

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
    constexpr int KSTEPS = DH / 16, DTILES = DH / 8;
    static_assert(DM_WARPS * 8 * (DH + 2) * sizeof(float) <= DM_BN * LD * sizeof(T),
                  "eight rows of the warp merge fit one K or V stage");
    extern __shared__ __align__(16) unsigned char dm_smem_raw[];
    T(*ks_all)[DM_BN * LD] = (T(*)[DM_BN * LD])dm_smem_raw;
    T(*vs_all)[DM_BN * LD] = (T(*)[DM_BN * LD])(dm_smem_raw + sizeof(T) * NS * DM_BN * LD);
    /* Per item: its keys [k0, k1), chunks used, what it does (0 nothing,
     * 1 attends, 2 zeros: attn_decode_act), a breach of its block ids, and
     * the first PS_BT of those ids. */
    __shared__ int32_t s_k0[PS_MAXI], s_k1[PS_MAXI], s_nact[PS_MAXI], s_seq[PS_MAXI];
    __shared__ int s_what[PS_MAXI], s_ok[PS_MAXI], s_bad[PS_MAXI];
    __shared__ int32_t s_bt[PS_MAXI][PS_BT];

    const int64_t G = gridDim.x, ny = g.hkv * hsplit;
    const int nk = (int)((total - (int64_t)blockIdx.x + G - 1) / G);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int gi = lane >> 2, ti = lane & 3;
    const int32_t bs = (int32_t)g.bs;
    auto item_at = [&](int k, int64_t *t, int *c, int64_t *kvh, int64_t *h0, int *nh) {
        const int64_t i = (int64_t)blockIdx.x + (int64_t)k * G, y = i % ny, tc = i / ny;
        *t = tc / nchunks;
        *c = (int)(tc % nchunks);
        *kvh = y / hsplit;
        const int hs = (int)(y % hsplit);
        *h0 = *kvh * g.group + (int64_t)hs * DM_ROWS;
        *nh = (int)min((int64_t)DM_ROWS, g.group - (int64_t)hs * DM_ROWS);
    };

    /* Every item's metadata, a thread an item; then every item's block ids. */
    if ((int)threadIdx.x < nk) {
        int64_t t, kvh, h0;
        int c, nh;
        item_at((int)threadIdx.x, &t, &c, &kvh, &h0, &nh);
        attn_dec_tok tk = attn_decode_classify(m, g, t, rows, c, nchunks, skip_runs);
        s_k0[threadIdx.x] = tk.k0;
        s_k1[threadIdx.x] = tk.k1;
        s_nact[threadIdx.x] = tk.nact;
        s_seq[threadIdx.x] = tk.seq;
        s_ok[threadIdx.x] = tk.ok;
        s_what[threadIdx.x] = tk.attend ? 1 : tk.run || c >= tk.nact ? 0 : 2;
        s_bad[threadIdx.x] = 0;
    }
    __syncthreads();
    for (int k = 0; k < nk; k++) {
        if (s_what[k] != 1)
            continue;
        const int32_t *bt = m.block_tables + (int64_t)s_seq[k] * m.max_blocks;
        const int32_t b0 = attn_blk(g, s_k0[k]), b1 = attn_blk(g, s_k1[k] - 1);
        int bad = 0;
        for (int32_t b = b0 + threadIdx.x; b <= b1; b += DM_THREADS) {
            const int32_t blk = bt[b];
            bad |= blk < 0 || blk >= g.nblocks;
            if (b - b0 < PS_BT)
                s_bt[k][b - b0] = blk;
        }
        if (bad)
            s_bad[k] = 1;
    }
    __syncthreads();
    if (pdl)
        dm_wait_producer();

    /* Items that attend nothing, or whose ids breach: their outputs now. */
    for (int k = 0; k < nk; k++) {
        if (s_what[k] == 0 || (s_what[k] == 1 && !s_bad[k]))
            continue;
        int64_t t, kvh, h0;
        int c, nh;
        item_at(k, &t, &c, &kvh, &h0, &nh);
        T *orow = out + t * g.qrow + h0 * DH;
        if (s_what[k] == 2) {
            for (int64_t i = threadIdx.x; i < nh * DH; i += DM_THREADS)
                orow[i] = from_f<T>(0.0f);
            attn_put_lse(g, t, h0, nh, -INFINITY);
            if (s_ok[k] < 0 && threadIdx.x == 0)
                report(&m, REEL_E_LIMIT);
        } else {
            attn_chunk_refuse(m, g, ws, t, c, nchunks, s_nact[k], h0, nh, orow);
        }
    }
    auto live = [&](int k) { return k < nk && s_what[k] == 1 && !s_bad[k]; };
    auto next_live = [&](int k) {
        while (k < nk && !live(k))
            k++;
        return k;
    };
    auto ntiles = [&](int k) { return (s_k1[k] - s_k0[k] + DM_BN - 1) / DM_BN; };
    auto load = [&](int k, int tile, int stage) {
        int64_t t, kvh, h0;
        int c, nh;
        item_at(k, &t, &c, &kvh, &h0, &nh);
        const int32_t k0 = s_k0[k], k1 = s_k1[k], b0 = attn_blk(g, k0);
        const int32_t *bt = m.block_tables + (int64_t)s_seq[k] * m.max_blocks;
        const int32_t *sb = s_bt[k];
        if (dm_pow2(g, attn_blk(g, k1 - 1) - b0, PS_BT)) {
            cp_async_kv_tile_pow2<T, DH, DM_BN, DM_THREADS, LD>(ks_all[stage], vs_all[stage], kc, vc,
                                                               k0 + tile * DM_BN, k1, sb, b0, g.bs_shift,
                                                               (int32_t)g.kvrow, (int32_t)(kvh * DH));
            return;
        }
        cp_async_kv_tile<T, DH, DM_BN, DM_THREADS, LD>(
            ks_all[stage], vs_all[stage], kc, vc, k0 + tile * DM_BN, [&](int32_t j) { return j < k1; },
            [&](int32_t j) {
                const int32_t bj = attn_blk(g, j);
                const int32_t blk = bj - b0 < PS_BT ? sb[bj - b0] : bt[bj];
                return ((int64_t)blk * bs + attn_in_blk(g, j)) * g.kvrow + kvh * DH;
            });
    };

    /* The producer (pk, pt) runs NS - 1 tiles ahead of the consumer (ck, ct). */
    int ck = next_live(0), ct = 0, pk = ck, pt = 0;
    auto produce = [&](int stage) {
        if (pk >= nk) {
            cp_async_commit();
            return;
        }
        load(pk, pt, stage);
        if (++pt == ntiles(pk)) {
            pk = next_live(pk + 1);
            pt = 0;
        }
    };
#pragma unroll
    for (int st = 0; st < NS - 1; st++)
        produce(st);
    const float qscale = g.scale * 1.4426950408889634f;
    uint32_t qf[KSTEPS][4];
    float o[DTILES][4];
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
    int stage = 0;
    while (ck < nk) {
        produce((stage + NS - 1) % NS);
        int64_t t, kvh, h0;
        int c, nh;
        item_at(ck, &t, &c, &kvh, &h0, &nh);
        if (ct == 0) {
            const bool in0 = gi < nh, in1 = gi + 8 < nh;
            const T *q0 = q + t * g.qrow + (h0 + gi) * DH, *q1 = q0 + 8 * DH;
#pragma unroll
            for (int kk = 0; kk < KSTEPS; kk++) {
                int d = kk * 16 + ti * 2;
                qf[kk][0] = in0 ? *(const uint32_t *)(q0 + d) : 0u;
                qf[kk][1] = in1 ? *(const uint32_t *)(q1 + d) : 0u;
                qf[kk][2] = in0 ? *(const uint32_t *)(q0 + d + 8) : 0u;
                qf[kk][3] = in1 ? *(const uint32_t *)(q1 + d + 8) : 0u;
            }
#pragma unroll
            for (int n = 0; n < DTILES; n++)
                o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
            m0 = m1 = -INFINITY;
            l0 = l1 = 0.0f;
        }
        const int32_t k1 = s_k1[ck], kw = s_k0[ck] + ct * DM_BN + warp * 16;
        cp_async_wait<NS - 1>(); /* tile (ck, ct) has landed */
        __syncthreads();
        if (kw < k1)
            dm_tile<T, DH, LD>(ks_all[stage], vs_all[stage], qf, kw, k1, qscale, o, m0, m1, l0, l1, warp, lane);
        __syncthreads(); /* the stage is free: the merge below, then the next load */
        if (++ct == ntiles(ck)) {
            /* The warps' merge through the stage just read (rows 0-7 in its
             * K half, 8-15 in its V half). */
            float *mk = (float *)ks_all[stage], *mv = (float *)vs_all[stage];
            dm_merge_put<DH>(mk, mv, o, m0, m1, l0, l1, warp, lane);
            __syncthreads();
            dm_merge_store<T, DH>(mk, mv, g, ws, out + t * g.qrow + h0 * DH, t, c, nchunks, s_nact[ck], h0, nh);
            __syncthreads(); /* the merge's reads, before the stage is loaded again */
            ck = next_live(ck + 1);
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
