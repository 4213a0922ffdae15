/* Tensor-core prefill attention: the tokens of multi-token runs (see
 * attention.cuh), a tile of PF_BM query tokens per block and one query head,
 * on mma.sync m16n8k16 (f16 or bf16 in, float32 accumulate).
 *
 * A tile's rows may hold several sequences; they are attended one sequence
 * (a segment) at a time, the other rows masked. For a segment the block
 * walks the keys 0 .. its largest position in tiles of PF_BN keys, read
 * through the block table into shared memory with cp.async (rows past the
 * segment's keys zero-filled), computes S = Q K^T per warp (16 query rows
 * each), masks causally (key j is seen by a row at position p iff j <= p;
 * under DCP p is the row's last local key, attn_token_ok),
 * folds S into an online softmax (base 2) and accumulates O += P V, with P
 * taken straight from the score registers. Rows are normalised once at the
 * end. A block entry that is out of range refuses exactly the rows whose
 * position reaches it (zeros and REEL_E_LIMIT), like the host. */
#include "ops/attn_chunks.h"
#include "ops/cuda/attention.cuh"
#include "ops/cuda/attn_tile.cuh"
#include "ops/cuda/mma.cuh"
#include "ops/cuda/wgmma.cuh"

namespace reel_cu {

enum { PF_BM = 64, PF_BN = 64, PF_WARPS = 4, PF_THREADS = PF_WARPS * 32, PF_PAD = 8 };
/* K/V stages in shared memory: the warpgroup kernel's next load goes to the
 * stage of two tiles back, whose products it has waited for. */
template <bool WG> constexpr int pf_stages()
{
    return WG ? 3 : 2;
}

/* WG: both products run on wgmma (sm_90a), K and V staged in 128-byte
 * swizzled rows (load_wg), from which K is read as a K-major and V as an
 * N-major operand; otherwise on mma.sync, K and V staged as padded rows.
 * KS (WG only): the block's warpgroups, each with its own stages, taking
 * every KS-th key tile of the block's rows (warpgroup w the tiles w, w + KS,
 * ...); their partial (max, sum, o) are merged in shared memory, in the
 * order of w, by warpgroup 0, which writes the rows. A grid too small to
 * fill the SMs with one warpgroup a block takes KS > 1 (prefill_splits). */
/* Blocks an SM is built for: at head dim 64, four warpgroups an SM
 * whatever the width (at most 128 registers; the stages of four fit), one
 * block otherwise; -DREEL_ATTN_PREFILL_MINB=1 builds that bound (an A/B;
 * off by default). */
#ifndef REEL_ATTN_PREFILL_MINB
#define REEL_ATTN_PREFILL_MINB 0
#endif
template <int DH, int KS> constexpr int pf_min_blocks()
{
    return REEL_ATTN_PREFILL_MINB && DH == 64 ? 4 / KS : 1;
}

/* A block's fixed place: its tile of query rows (from t0), its head and kv
 * head, the thread's warp of its warpgroup, its warpgroup and its mma
 * fragment coordinates. Heads vary fastest (blocks that run together share
 * K/V rows), and the last tiles come first: in a causal prefill they have
 * the most keys, so the grid's tail is made of short blocks. */
struct pf_blk {
    int64_t t0, h, kvh;
    int lane, warp, wg, gi, ti;
    float qscale;
    int32_t bs;
};

template <int KS> __device__ __forceinline__ pf_blk pf_blk_of(const attn_geom &g, int64_t rows)
{
    pf_blk b;
    const int64_t ntq = (rows + PF_BM - 1) / PF_BM;
    b.t0 = (ntq - 1 - (int64_t)(blockIdx.x / g.h)) * PF_BM;
    b.h = blockIdx.x % g.h;
    b.kvh = b.h / g.group;
    b.lane = threadIdx.x & 31;
    b.warp = (threadIdx.x >> 5) % PF_WARPS;
    b.wg = KS == 1 ? 0 : (int)threadIdx.x / PF_THREADS;
    b.gi = b.lane >> 2;
    b.ti = b.lane & 3;
    b.qscale = g.scale * 1.4426950408889634f;
    b.bs = (int32_t)g.bs;
    return b;
}

/* A segment's rows as a warp holds them: rows r0 (= 16 warp + gi) and
 * r1 = r0 + 8, whether each is in the segment, their last keys (-1 when
 * not), and the warp's largest and smallest last key (wmax: tiles past it
 * are skipped; wmin: tiles wholly before it need no mask). */
struct pf_rows {
    int r0, r1;
    bool in0, in1;
    int32_t p0, p1, wmax, wmin;
};

__device__ __forceinline__ pf_rows pf_rows_of(const int *s_state, const int32_t *s_pos, const pf_blk &b)
{
    pf_rows r;
    r.r0 = b.warp * 16 + b.gi;
    r.r1 = r.r0 + 8;
    r.in0 = s_state[r.r0] == 2;
    r.in1 = s_state[r.r1] == 2;
    r.p0 = r.in0 ? s_pos[r.r0] : -1;
    r.p1 = r.in1 ? s_pos[r.r1] : -1;
    int32_t wmax = max(r.p0, r.p1), wmin = min(r.p0, r.p1);
    wmax = max(wmax, __shfl_xor_sync(0xffffffffu, wmax, 1));
    wmax = max(wmax, __shfl_xor_sync(0xffffffffu, wmax, 2));
    wmax = max(wmax, __shfl_xor_sync(0xffffffffu, wmax, 4));
    wmax = max(wmax, __shfl_xor_sync(0xffffffffu, wmax, 8));
    wmax = max(wmax, __shfl_xor_sync(0xffffffffu, wmax, 16));
#pragma unroll
    for (int o = 1; o < 32; o <<= 1)
        wmin = min(wmin, __shfl_xor_sync(0xffffffffu, wmin, o));
    r.wmax = wmax;
    r.wmin = wmin;
    return r;
}

/* The rows' classes from the metadata alone (readable before the wait:
 * the step's upload precedes every kernel of it), thread i the tile's row
 * i: 1 to attend, else 0; zero where the row gets zeros, bad where that is
 * a breach (a row in a run is never padding). */
struct pf_class {
    int zero, bad;
};

__device__ __forceinline__ pf_class pf_classify_rows(const reel_meta_view &m, const attn_geom &g, int64_t t0,
                                                     int64_t rows, int32_t *s_seq, int32_t *s_pos, int *s_state)
{
    int zero = 0, bad = 0;
    if (threadIdx.x < PF_BM) {
        int i = threadIdx.x;
        int64_t t = t0 + i;
        int st = 0;
        int32_t s = -1, p = 0;
        if (t < rows && attn_in_run(m, t, rows)) {
            int ok = attn_token_ok(m, g, t, &s, &p); /* p: the last key, local under DCP */
            if (ok == 1 && p >= 0) {
                st = 1;
            } else {
                zero = 1;
                bad = ok != 1;
            }
        }
        s_seq[i] = s;
        s_pos[i] = p;
        s_state[i] = st;
    }
    return {zero, bad};
}

/* Row t of head h refused or empty (a breach, or an empty DCP shard): (0, -inf). */
template <typename T, int DH>
__device__ __forceinline__ void pf_zero_row(T *out, const attn_geom &g, int64_t t, int64_t h)
{
    for (int64_t d = 0; d < DH; d++)
        out[t * g.qrow + h * DH + d] = from_f<T>(0.0f);
    if (g.lse)
        g.lse[t * g.h + h] = -INFINITY;
}

/* The next segment: the sequence of the first row still to do (-1: none
 * left), its maximum and first bad block reset. The whole block calls it. */
__device__ __forceinline__ int32_t pf_next_seq(const int *s_state, const int32_t *s_seq, int &s_cur, int32_t &s_maxpos,
                                               int &s_firstbad)
{
    if (threadIdx.x == 0) {
        int cur = -1;
        for (int i = 0; i < PF_BM && cur < 0; i++)
            if (s_state[i] == 1)
                cur = s_seq[i];
        s_cur = cur;
        s_maxpos = -1;
        s_firstbad = 0x7fffffff;
    }
    __syncthreads();
    return s_cur;
}

/* A segment: its sequence's row of the block table, and its rows' largest
 * last key. */
struct pf_seg {
    const int32_t *bt;
    int32_t maxpos;
};

/* The segment of sequence seq: its block ids up to its rows' largest last
 * key checked, the rows whose keys reach a bad block refused (zeros and
 * REEL_E_LIMIT), the rest marked 2 (in this segment). The whole block
 * calls it. */
template <typename T, int DH, int NT>
__device__ __forceinline__ pf_seg pf_segment_rows(T *out, const reel_meta_view &m, const attn_geom &g,
                                                  const pf_blk &b, int32_t seq, const int32_t *s_seq,
                                                  const int32_t *s_pos, int *s_state, int32_t &s_maxpos,
                                                  int &s_firstbad)
{
    if (threadIdx.x < PF_BM && s_state[threadIdx.x] == 1 && s_seq[threadIdx.x] == seq)
        atomicMax(&s_maxpos, s_pos[threadIdx.x]);
    __syncthreads();
    const int32_t *bt = m.block_tables + (int64_t)seq * m.max_blocks;
    for (int32_t i = threadIdx.x; i <= s_maxpos / b.bs; i += NT) {
        int32_t blk = bt[i];
        if (blk < 0 || blk >= g.nblocks)
            atomicMin(&s_firstbad, i);
    }
    __syncthreads();
    if (threadIdx.x == 0)
        s_maxpos = -1;
    __syncthreads();
    if (threadIdx.x < PF_BM && s_state[threadIdx.x] == 1 && s_seq[threadIdx.x] == seq) {
        int i = threadIdx.x;
        if (s_pos[i] / b.bs >= s_firstbad) {
            report(&m, REEL_E_LIMIT);
            pf_zero_row<T, DH>(out, g, b.t0 + i, b.h);
            s_state[i] = 0;
        } else {
            s_state[i] = 2;
            atomicMax(&s_maxpos, s_pos[i]);
        }
    }
    __syncthreads();
    return {bt, s_maxpos};
}

/* The tile's row maxima (raw scores) folded into mx0, mx1, keys past a
 * row's last key masked to -inf first; a tile wholly at or before both
 * rows' last keys (most tiles of a causal prefill) needs no mask. */
template <int NT>
__device__ __forceinline__ void pf_tile_max(float (&sc)[NT][4], int32_t kt, const pf_rows &r, int ti, float &mx0,
                                            float &mx1)
{
    if (kt + PF_BN - 1 <= r.wmin) {
#pragma unroll
        for (int n = 0; n < NT; n++) {
            mx0 = fmaxf(mx0, fmaxf(sc[n][0], sc[n][1]));
            mx1 = fmaxf(mx1, fmaxf(sc[n][2], sc[n][3]));
        }
    } else {
#pragma unroll
        for (int n = 0; n < NT; n++) {
#pragma unroll
            for (int e = 0; e < 2; e++) {
                int32_t j = kt + n * 8 + ti * 2 + e;
                sc[n][e] = j <= r.p0 ? sc[n][e] : -INFINITY;
                sc[n][2 + e] = j <= r.p1 ? sc[n][2 + e] : -INFINITY;
                mx0 = fmaxf(mx0, sc[n][e]);
                mx1 = fmaxf(mx1, sc[n][2 + e]);
            }
        }
    }
    mx0 = quad_max(mx0);
    mx1 = quad_max(mx1);
}

/* The online softmax (base 2) of rows r0 (m0, l0) and r1 (m1, l1) over the
 * scores of the tile at key kt, on raw scores: max first, then
 * exp2(s * qscale - max * qscale) in one FMA; sc becomes P, and c0, c1 the
 * factor o takes before P V is added (pf_rescale_o). */
template <int NT>
__device__ __forceinline__ void pf_softmax(float (&sc)[NT][4], int32_t kt, const pf_rows &r, const pf_blk &b,
                                           float &m0, float &m1, float &l0, float &l1, float &c0, float &c1)
{
    const float qscale = b.qscale;
    float mx0 = m0, mx1 = m1;
    pf_tile_max(sc, kt, r, b.ti, mx0, mx1);
    /* m0, m1 are raw maxima; a row with no key yet stays -inf. */
    float s0 = mx0 == -INFINITY ? 0.0f : mx0 * qscale, s1 = mx1 == -INFINITY ? 0.0f : mx1 * qscale;
    c0 = mx0 == -INFINITY ? 1.0f : ex2_ftz((m0 - mx0) * qscale);
    c1 = mx1 == -INFINITY ? 1.0f : ex2_ftz((m1 - mx1) * qscale);
    m0 = mx0;
    m1 = mx1;
    l0 *= c0;
    l1 *= c1;
#pragma unroll
    for (int n = 0; n < NT; n++) {
        sc[n][0] = ex2_ftz(fmaf(sc[n][0], qscale, -s0));
        sc[n][1] = ex2_ftz(fmaf(sc[n][1], qscale, -s0));
        sc[n][2] = ex2_ftz(fmaf(sc[n][2], qscale, -s1));
        sc[n][3] = ex2_ftz(fmaf(sc[n][3], qscale, -s1));
        l0 += sc[n][0] + sc[n][1];
        l1 += sc[n][2] + sc[n][3];
    }
}

/* o's rescale by the last softmax's c0, c1. Late in a row the maximum
 * rarely moves: a warp whose rows all keep theirs skips the multiplies by
 * exactly 1. */
template <int DT> __device__ __forceinline__ void pf_rescale_o(float (&o)[DT][4], float c0, float c1)
{
    if (__any_sync(0xffffffffu, c0 != 1.0f || c1 != 1.0f))
        scale_rows(o, c0, c1);
}

/* The mma.sync path's load: tile kt's K and V rows through the block
 * table into padded rows of stage (ks, vs), one commit group; keys past
 * maxpos zero-filled. */
template <typename T, int DH, int LD>
__device__ __forceinline__ void pf_sync_load(T *ks, T *vs, const T *kc, const T *vc, int32_t kt, int32_t maxpos,
                                             const int32_t *bt, const attn_geom &g, const pf_blk &b)
{
    const int32_t bs = b.bs;
    const int64_t kvh = b.kvh;
    cp_async_kv_tile<T, DH, PF_BN, PF_THREADS, LD>(
        ks, vs, kc, vc, kt, [&](int32_t j) { return j <= maxpos; },
        [&](int32_t j) { return ((int64_t)bt[attn_blk(g, j)] * bs + attn_in_blk(g, j)) * g.kvrow + kvh * DH; });
}

/* The mma.sync path's main loop: two stages, tile it + 1 in flight while
 * tile it is computed (S = Q K^T, the softmax, o's rescale, O += P V); a
 * warp skips a tile whose keys are all after its rows. */
template <typename T, int DH, int LD>
__device__ __forceinline__ void pf_sync_mainloop(T (*ks_all)[PF_BN * LD], T (*vs_all)[PF_BN * LD], const T *kc,
                                                 const T *vc, const int32_t *bt, const attn_geom &g, const pf_blk &b,
                                                 const pf_rows &r, int32_t maxpos, int ntiles,
                                                 const uint32_t (&qf)[DH / 16][4], float (&o)[DH / 8][4], float &m0,
                                                 float &m1, float &l0, float &l1)
{
    constexpr int STILES = PF_BN / 8;
    float c0 = 1.0f, c1 = 1.0f; /* the last softmax's rescale of o, rows r0 and r1 */
    pf_sync_load<T, DH, LD>(ks_all[0], vs_all[0], kc, vc, 0, maxpos, bt, g, b);
    for (int it = 0; it < ntiles; it++) {
        const int32_t kt = it * PF_BN;
        if (it + 1 < ntiles)
            pf_sync_load<T, DH, LD>(ks_all[(it + 1) & 1], vs_all[(it + 1) & 1], kc, vc, kt + PF_BN, maxpos, bt, g, b);
        else
            cp_async_commit(); /* an empty group keeps the count */
        cp_async_wait_1();
        __syncthreads();
        const T *ks = ks_all[it & 1], *vs = vs_all[it & 1];
        if (kt > r.wmax) {
            __syncthreads();
            continue; /* every key of the tile is after this warp's rows */
        }
        float sc[STILES][4];
        attn_qk<T, DH / 16, STILES, LD>(sc, qf, ks, 0, b.lane);
        pf_softmax(sc, kt, r, b, m0, m1, l0, l1, c0, c1);
        pf_rescale_o(o, c0, c1);
        attn_pv<T, STILES, DH / 8, LD>(o, sc, vs, 0, b.lane);
        __syncthreads(); /* the next prefetch reuses this stage */
    }
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
/* The warpgroup path's stages: 128-byte swizzled rows, dims 64 a .. 64 a +
 * 63 of key r at byte 128 (PF_BN a + r), their 16-byte chunk c at
 * (c ^ r % 8); a row's chunks come from consecutive threads. A thread's
 * rows step by RSTEP, a multiple of 8, so its swizzle is the same in every
 * row and its shared offsets (ks_sh, vs_sh: its warpgroup's first stage)
 * and source parts (kbase, vbase) are fixed. */
struct pf_wg_io {
    uint32_t ks_sh, vs_sh;
    const char *kbase, *vbase;
    int rfirst;
};

template <int DH> constexpr int pf_wg_rstep()
{
    return PF_THREADS / (DH / 8);
}

template <typename T, int DH, int NS>
__device__ __forceinline__ pf_wg_io pf_wg_io_of(T (*ks_all)[PF_BN * DH], T (*vs_all)[PF_BN * DH], const T *kc,
                                                const T *vc, int ltid, int wg)
{
    constexpr int CPR = DH / 8; /* 16-byte chunks per cache row */
    static_assert(PF_THREADS % CPR == 0 && pf_wg_rstep<DH>() % 8 == 0, "a thread keeps its part and swizzle");
    pf_wg_io io;
    const int part = ltid % CPR;
    io.rfirst = ltid / CPR;
    const uint32_t soff = (uint32_t)((part >> 3) * (PF_BN * 128) + io.rfirst * 128 +
                                     (((part & 7) ^ (io.rfirst & 7)) << 4));
    io.ks_sh = (uint32_t)__cvta_generic_to_shared(ks_all[wg * NS]) + soff;
    io.vs_sh = (uint32_t)__cvta_generic_to_shared(vs_all[wg * NS]) + soff;
    io.kbase = (const char *)kc + part * 16;
    io.vbase = (const char *)vc + part * 16;
    return io;
}

/* Each key's cache row (byte offset of this kv head) of the warpgroup's
 * tile lt, found two tiles ahead by a thread a key: the loads then need no
 * dependent read of the block table. A key past maxpos takes maxpos's row:
 * a whole, written row whose score every row masks (P is exactly 0 there),
 * so no load needs a zero fill or a test. */
template <typename T, int DH, int KS, int NS>
__device__ __forceinline__ void pf_wg_rows(int64_t (&s_row)[KS][NS][PF_BN], int lt, int ltid, int32_t maxpos,
                                           const int32_t *bt, const attn_geom &g, const pf_blk &b)
{
    if (ltid < PF_BN) {
        int32_t j = min((lt * KS + b.wg) * PF_BN + ltid, maxpos);
        s_row[b.wg][lt % NS][ltid] =
            (((int64_t)bt[attn_blk(g, j)] * b.bs + attn_in_blk(g, j)) * g.kvrow + b.kvh * DH) * (int64_t)sizeof(T);
    }
}

/* The warpgroup path's load: tile lt's K and V rows (found by pf_wg_rows)
 * into its stage, one commit group. */
template <typename T, int DH, int KS, int NS>
__device__ __forceinline__ void pf_wg_load(const int64_t (&s_row)[KS][NS][PF_BN], int lt, int wg, const pf_wg_io &io)
{
    constexpr int RSTEP = pf_wg_rstep<DH>();
    constexpr uint32_t STAGE = (uint32_t)(sizeof(T) * PF_BN * DH);
    const uint32_t st = (uint32_t)(lt % NS) * STAGE;
    const int64_t *rw = s_row[wg][lt % NS];
#pragma unroll
    for (int k = 0; k < PF_BN / RSTEP; k++) {
        const int64_t row = rw[io.rfirst + k * RSTEP];
        cp_async16_sh(io.ks_sh + st + k * RSTEP * 128, io.kbase + row);
        cp_async16_sh(io.vs_sh + st + k * RSTEP * 128, io.vbase + row);
    }
    cp_async_commit();
}

/* S = Q K^T of tile lt on wgmma, issued and committed (the caller waits):
 * the scores phase of the warpgroup path. K-major B (dims contiguous):
 * k-step kk starts 32 bytes into its 64 dims' rows; 8 keys are 1024 bytes
 * apart. */
template <typename T, int DH, int NS>
__device__ __forceinline__ void pf_wg_qk(float (&sc)[PF_BN / 8][4], const uint32_t (&qf)[DH / 16][4],
                                         T (*ks_all)[PF_BN * DH], int wg, int lt)
{
    const unsigned char *ks = (const unsigned char *)ks_all[wg * NS + lt % NS];
    wg_fence();
#pragma unroll
    for (int kk = 0; kk < DH / 16; kk++)
        wg_mma<T, PF_BN>::template run<0>(
            &sc[0][0], qf[kk], wg_desc_sw128(ks + (kk >> 2) * (PF_BN * 128) + (kk & 3) * 32, 16, 1024), kk > 0);
    wg_commit();
}

/* O += P V of tile lt on wgmma from P's registers, issued and committed:
 * the P V phase of the warpgroup path. N-major B (V's dims contiguous):
 * keys 16 kk on; the leading offset steps 64 dims, the stride offset 8
 * keys. */
template <typename T, int DH, int NS>
__device__ __forceinline__ void pf_wg_pv(float (&o)[DH / 8][4], const uint32_t (&pa)[PF_BN / 16][4],
                                         T (*vs_all)[PF_BN * DH], int wg, int lt)
{
    const unsigned char *vs = (const unsigned char *)vs_all[wg * NS + lt % NS];
    wg_fence(); /* o's rescale and P's registers before the products */
#pragma unroll
    for (int kk = 0; kk < PF_BN / 16; kk++)
        wg_mma<T, DH>::template run<1>(&o[0][0], pa[kk], wg_desc_sw128(vs + kk * 2048, PF_BN * 128, 1024), 1);
    wg_commit();
}

/* P of the last softmax as the A fragments of P V (two S n-tiles a
 * 16-key k-step), so the next tile's scores may reuse sc. */
template <typename T>
__device__ __forceinline__ void pf_pack_p(uint32_t (&pa)[PF_BN / 16][4], const float (&sc)[PF_BN / 8][4])
{
#pragma unroll
    for (int kk = 0; kk < PF_BN / 16; kk++)
        c_to_a<T>(sc[2 * kk], sc[2 * kk + 1], pa[kk]);
}

/* The warpgroup path's main loop: three stages a warpgroup, and P V of one
 * tile on the tensor cores while the next tile's softmax runs. The
 * warpgroup's tiles are lt = 0, 1, ... (key tile lt KS + wg); the
 * warpgroups step together (nlt steps, one block barrier a tile), a
 * warpgroup with one tile fewer (ntl) idling through the last. Per tile
 * lt: find tile lt + 2's rows, load tile lt + 1 (into the stage of tile
 * lt - 2, whose products are done), wait for tile lt, issue S(lt), issue
 * PV(lt - 1) from P's registers, wait for S(lt) alone, softmax, wait for
 * PV(lt - 1), rescale o, pack P(lt). Every tile holds a key of some row
 * (the tiles end at maxpos), and the products are the warpgroup's: no
 * warp skips one. */
template <typename T, int DH, int KS>
__device__ __forceinline__ void pf_wg_mainloop(int64_t (&s_row)[KS][pf_stages<true>()][PF_BN], T (*ks_all)[PF_BN * DH],
                                               T (*vs_all)[PF_BN * DH], const T *kc, const T *vc, const int32_t *bt,
                                               const attn_geom &g, const pf_blk &b, const pf_rows &r, int32_t maxpos,
                                               int ntiles, const uint32_t (&qf)[DH / 16][4], float (&o)[DH / 8][4],
                                               float &m0, float &m1, float &l0, float &l1)
{
    constexpr int NS = pf_stages<true>();
    float sc[PF_BN / 8][4];
    uint32_t pa[PF_BN / 16][4]; /* P of the last softmax, as A fragments */
    float c0 = 1.0f, c1 = 1.0f; /* the last softmax's rescale of o, rows r0 and r1 */
    const int ltid = (int)threadIdx.x % PF_THREADS; /* its thread in the warpgroup */
    const int ntl = ntiles > b.wg ? (ntiles - b.wg + KS - 1) / KS : 0;
    const int nlt = (ntiles + KS - 1) / KS;
    const pf_wg_io io = pf_wg_io_of<T, DH, NS>(ks_all, vs_all, kc, vc, ltid, b.wg);
    if (ntl > 0)
        pf_wg_rows<T, DH, KS, NS>(s_row, 0, ltid, maxpos, bt, g, b);
    if (ntl > 1)
        pf_wg_rows<T, DH, KS, NS>(s_row, 1, ltid, maxpos, bt, g, b);
    __syncthreads();
    if (ntl > 0)
        pf_wg_load<T, DH, KS, NS>(s_row, 0, b.wg, io);
    for (int lt = 0; lt < nlt; lt++) {
        if (lt + 2 < ntl) /* over tile lt - 1's rows, whose loads are issued */
            pf_wg_rows<T, DH, KS, NS>(s_row, lt + 2, ltid, maxpos, bt, g, b);
        if (lt + 1 < ntl) {
            pf_wg_load<T, DH, KS, NS>(s_row, lt + 1, b.wg, io);
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        fence_proxy_async(); /* the tensor cores read what cp.async wrote */
        __syncthreads();
        if (lt < ntl) {
            pf_wg_qk<T, DH, NS>(sc, qf, ks_all, b.wg, lt);
            if (lt > 0) {
                pf_wg_pv<T, DH, NS>(o, pa, vs_all, b.wg, lt - 1);
                wg_wait<1>();
            } else {
                wg_wait<0>();
            }
            wg_hold(sc);
            pf_softmax(sc, (lt * KS + b.wg) * PF_BN, r, b, m0, m1, l0, l1, c0, c1);
            wg_wait<0>();
            wg_hold(o);
            /* o's rescale for tile lt, with no product in flight: ptxas
             * waits for (or serialises) products whose accumulators other
             * instructions write while a group is open. */
            pf_rescale_o(o, c0, c1);
            pf_pack_p<T>(pa, sc);
        }
    }
    if (ntl > 0) {
        pf_wg_pv<T, DH, NS>(o, pa, vs_all, b.wg, ntl - 1);
        wg_wait<0>();
        wg_hold(o);
    }
}

/* The key split's partials: warpgroups 1 .. KS - 1 leave (m, l, o) of each
 * thread in the stages (mg; every product and load of the block is done).
 * A thread's fragments are the same rows and dims in every warpgroup;
 * [value][thread] keeps the accesses conflict-free. */
template <int DH>
__device__ __forceinline__ void pf_wg_merge_put(float *mg, int ltid, int wg, const float (&o)[DH / 8][4], float m0,
                                                float m1, float l0, float l1)
{
    constexpr int DTILES = DH / 8, PER = DTILES * 4 + 4;
    float *d = mg + (size_t)(wg - 1) * PER * PF_THREADS + ltid;
#pragma unroll
    for (int n = 0; n < DTILES; n++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            d[(n * 4 + e) * PF_THREADS] = o[n][e];
    d[(DTILES * 4 + 0) * PF_THREADS] = m0;
    d[(DTILES * 4 + 1) * PF_THREADS] = m1;
    d[(DTILES * 4 + 2) * PF_THREADS] = l0;
    d[(DTILES * 4 + 3) * PF_THREADS] = l1;
}

/* The key split's merge: warpgroup 0 folds the partials of warpgroups
 * 1 .. KS - 1 into its own, in the order of w. */
template <int DH, int KS>
__device__ __forceinline__ void pf_wg_merge_fold(const float *mg, int ltid, float qscale, float (&o)[DH / 8][4],
                                                 float &m0, float &m1, float &l0, float &l1)
{
    constexpr int DTILES = DH / 8, PER = DTILES * 4 + 4;
#pragma unroll 1
    for (int w = 1; w < KS; w++) {
        const float *d = mg + (size_t)(w - 1) * PER * PF_THREADS + ltid;
        const float wm0 = d[(DTILES * 4 + 0) * PF_THREADS], wm1 = d[(DTILES * 4 + 1) * PF_THREADS];
        const float M0 = fmaxf(m0, wm0), M1 = fmaxf(m1, wm1);
        /* A side with no key yet (-inf) weighs exactly 0. */
        const float a0 = m0 == -INFINITY ? 0.0f : ex2_ftz((m0 - M0) * qscale),
                    b0 = wm0 == -INFINITY ? 0.0f : ex2_ftz((wm0 - M0) * qscale),
                    a1 = m1 == -INFINITY ? 0.0f : ex2_ftz((m1 - M1) * qscale),
                    b1 = wm1 == -INFINITY ? 0.0f : ex2_ftz((wm1 - M1) * qscale);
#pragma unroll
        for (int n = 0; n < DTILES; n++) {
            o[n][0] = o[n][0] * a0 + d[(n * 4 + 0) * PF_THREADS] * b0;
            o[n][1] = o[n][1] * a0 + d[(n * 4 + 1) * PF_THREADS] * b0;
            o[n][2] = o[n][2] * a1 + d[(n * 4 + 2) * PF_THREADS] * b1;
            o[n][3] = o[n][3] * a1 + d[(n * 4 + 3) * PF_THREADS] * b1;
        }
        l0 = l0 * a0 + d[(DTILES * 4 + 2) * PF_THREADS] * b0;
        l1 = l1 * a1 + d[(DTILES * 4 + 3) * PF_THREADS] * b1;
        m0 = M0;
        m1 = M1;
    }
}

/* The key split's combine step (KS > 1): the partials through the stages
 * (smem), merged into warpgroup 0's rows, which it then writes. */
template <typename T, int DH, int KS>
__device__ __forceinline__ void pf_wg_merge(unsigned char *smem, const pf_blk &b, float (&o)[DH / 8][4], float &m0,
                                            float &m1, float &l0, float &l1)
{
    constexpr int NS = pf_stages<true>(), PER = DH / 8 * 4 + 4;
    static_assert(sizeof(float) * (KS - 1) * PER * PF_THREADS <= sizeof(T) * 2 * KS * NS * PF_BN * DH,
                  "the partials fit the stages");
    const int ltid = (int)threadIdx.x % PF_THREADS;
    float *mg = (float *)smem;
    __syncthreads();
    if (b.wg > 0)
        pf_wg_merge_put<DH>(mg, ltid, b.wg, o, m0, m1, l0, l1);
    __syncthreads();
    if (b.wg == 0)
        pf_wg_merge_fold<DH, KS>(mg, ltid, b.qscale, o, m0, m1, l0, l1);
}
#endif /* __CUDA_ARCH_FEAT_SM90_ALL */

/* The segment's rows out, from warpgroup 0 (which holds the merged rows):
 * one reciprocal a row, two dims a store (d is even and rows are whole
 * heads apart), and the lse where the op asks for it. */
template <typename T, int DH>
__device__ __forceinline__ void pf_store_rows(T *out, const attn_geom &g, const pf_blk &b, const pf_rows &r,
                                              const float (&o)[DH / 8][4], float m0, float m1, float l0, float l1)
{
    l0 = quad_sum(l0);
    l1 = quad_sum(l1);
    if (b.wg == 0) {
        T *o0 = out + (b.t0 + r.r0) * g.qrow + b.h * DH, *o1 = out + (b.t0 + r.r1) * g.qrow + b.h * DH;
        const float i0 = r.in0 ? 1.0f / l0 : 0.0f, i1 = r.in1 ? 1.0f / l1 : 0.0f;
#pragma unroll
        for (int n = 0; n < DH / 8; n++) {
            int d = n * 8 + b.ti * 2;
            if (r.in0)
                *(uint32_t *)(o0 + d) = mma_op<T>::pack2(o[n][0] * i0, o[n][1] * i0);
            if (r.in1)
                *(uint32_t *)(o1 + d) = mma_op<T>::pack2(o[n][2] * i1, o[n][3] * i1);
        }
        if (g.lse && b.ti == 0) { /* m0, m1 are raw maxima: scaled here */
            if (r.in0)
                g.lse[(b.t0 + r.r0) * g.h + b.h] = (m0 * b.qscale + log2f(l0)) * REEL_ATTN_LN2;
            if (r.in1)
                g.lse[(b.t0 + r.r1) * g.h + b.h] = (m1 * b.qscale + log2f(l1)) * REEL_ATTN_LN2;
        }
    }
}

template <typename T, int DH, bool WG, int KS>
__global__ void __launch_bounds__(PF_THREADS *KS, (pf_min_blocks<DH, KS>()))
    attn_prefill_kernel(const T *__restrict__ q, const T *__restrict__ kc, const T *__restrict__ vc,
                        T *__restrict__ out, reel_meta_view m, attn_geom g, int64_t rows, bool pdl)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    cudaTriggerProgrammaticLaunchCompletion(); /* the next op's kernel may launch: it waits for our completion */
#endif
#if !defined(__CUDA_ARCH_FEAT_SM90_ALL)
    if constexpr (WG) {
        __trap(); /* never launched: attn_prefill_launch takes it only in sm_90a builds */
    } else
#endif
    {
        constexpr int LD = WG ? DH : DH + PF_PAD; /* shared row stride, elements (WG: swizzled, unpadded) */
        constexpr int NS = pf_stages<WG>();
        static_assert(KS == 1 || WG, "the key split is the warpgroup kernel's");
        /* Dynamic: [KS * NS][PF_BN * LD] of K, then the same of V. */
        extern __shared__ __align__(16) unsigned char pf_smem[];
        unsigned char *smem = pf_smem;
        if constexpr (WG) /* swizzle atoms start on 1024-byte boundaries (prefill_smem adds the slack) */
            smem += (1024u - ((uint32_t)__cvta_generic_to_shared(pf_smem) & 1023u)) & 1023u;
        T(*ks_all)[PF_BN * LD] = (T(*)[PF_BN * LD])smem;
        T(*vs_all)[PF_BN * LD] = (T(*)[PF_BN * LD])(smem + sizeof(T) * KS * NS * PF_BN * LD);
        __shared__ int32_t s_seq[PF_BM], s_pos[PF_BM];
        __shared__ int s_state[PF_BM]; /* 1: this block's to attend, 0: not (or done), 2: this segment's */
        __shared__ int s_cur, s_maxpos, s_firstbad;
        const pf_blk b = pf_blk_of<KS>(g, rows);

        /* Launched as a programmatic dependent of the decode, a block of a
         * step without runs has done its work by the time the decode ends.
         * Its stores, and every read of q and the cache, follow the wait. */
        const pf_class cl = pf_classify_rows(m, g, b.t0, rows, s_seq, s_pos, s_state);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
        if (pdl)
            cudaGridDependencySynchronize();
#endif
        if (cl.zero) {
            const int64_t t = b.t0 + threadIdx.x;
            if (cl.bad)
                report(&m, REEL_E_LIMIT);
            pf_zero_row<T, DH>(out, g, t, b.h);
        }
        __syncthreads();

        /* A segment at a time: the sequence of the first row still to do. */
        for (;;) {
            const int32_t seq = pf_next_seq(s_state, s_seq, s_cur, s_maxpos, s_firstbad);
            if (seq < 0)
                break;
            const pf_seg sg = pf_segment_rows<T, DH, PF_THREADS * KS>(out, m, g, b, seq, s_seq, s_pos, s_state,
                                                                      s_maxpos, s_firstbad);
            /* Q's fragments, the main loop of the path, the key split's
             * merge, the rows out. */
            const pf_rows r = pf_rows_of(s_state, s_pos, b);
            uint32_t qf[DH / 16][4];
            attn_q_frags<T, DH / 16>(qf, q + (b.t0 + r.r0) * g.qrow + b.h * DH, q + (b.t0 + r.r1) * g.qrow + b.h * DH,
                                     r.in0, r.in1, b.ti);
            float o[DH / 8][4];
            attn_zero_frags(o);
            float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
            const int ntiles = sg.maxpos / PF_BN + 1;
            __syncthreads(); /* the previous segment no longer reads the stages */
            if constexpr (WG) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
                __shared__ int64_t s_row[KS][NS][PF_BN]; /* the keys' cache rows (pf_wg_rows) */
                pf_wg_mainloop<T, DH, KS>(s_row, ks_all, vs_all, kc, vc, sg.bt, g, b, r, sg.maxpos, ntiles, qf, o, m0,
                                          m1, l0, l1);
                if constexpr (KS > 1)
                    pf_wg_merge<T, DH, KS>(smem, b, o, m0, m1, l0, l1);
#endif
            } else {
                pf_sync_mainloop<T, DH, LD>(ks_all, vs_all, kc, vc, sg.bt, g, b, r, sg.maxpos, ntiles, qf, o, m0, m1,
                                            l0, l1);
            }
            pf_store_rows<T, DH>(out, g, b, r, o, m0, m1, l0, l1);
            __syncthreads();
            if (threadIdx.x < PF_BM && s_state[threadIdx.x] == 2)
                s_state[threadIdx.x] = 0;
            __syncthreads();
        }
    }
}

/* The warpgroup kernel in builds for sm_90a (REEL_CUDA_SM90A) unless
 * REEL_ATTN_PREFILL_SYNC is defined (an A/B of the two); mma.sync otherwise. */
#if defined(REEL_CUDA_SM90A) && !defined(REEL_ATTN_PREFILL_SYNC)
static constexpr bool PF_WG = true;
#else
static constexpr bool PF_WG = false;
#endif

bool attn_prefill_supports(reel_dtype dt, int64_t dh)
{
    return (dt == REEL_F16 || dt == REEL_BF16) && (dh == 64 || dh == 128);
}

/* The key split's widths a head dim has: 1, 2 and 4 warpgroups at 64 (four
 * blocks' stages fit an SM), 1 and 2 at 128 (two fit); 1 for mma.sync. */
template <int DH> constexpr int pf_max_ks()
{
    return PF_WG ? (DH == 64 ? 4 : 2) : 1;
}

template <typename T, int DH, int KS> static size_t prefill_smem()
{
    constexpr size_t ns = pf_stages<PF_WG>();
    return PF_WG ? sizeof(T) * 2 * KS * ns * PF_BN * DH + 1024 : sizeof(T) * 2 * ns * PF_BN * (DH + PF_PAD);
}

/* The stages need more than the default 48 KB of dynamic shared memory:
 * the opt-in is set once per kernel, at its first launch (a warm-up before
 * any capture, as for every op). */
template <typename T, int DH, int KS> static cudaError_t prefill_opt_in()
{
    static std::atomic<unsigned long long> done(0);
    return smem_opt_in(attn_prefill_kernel<T, DH, PF_WG, KS>, prefill_smem<T, DH, KS>(), done);
}

/* Blocks of one warpgroup an SM holds (blocks_per_sm_once). */
template <typename T, int DH> static int prefill_blocks_per_sm()
{
    static std::atomic<int> memo(-1);
    return blocks_per_sm_once(memo, attn_prefill_kernel<T, DH, PF_WG, 1>, PF_THREADS, prefill_smem<T, DH, 1>(),
                              prefill_opt_in<T, DH, 1>);
}

template <typename T, int DH, int KS>
static cudaError_t prefill_go(const reel_launch *l, cudaStream_t st, const attn_geom &g, bool pdl, int64_t blocks)
{
    constexpr int ks = KS > pf_max_ks<DH>() ? 1 : KS; /* never taken: prefill_run caps the width */
    cudaError_t e = prefill_opt_in<T, DH, ks>();
    if (e != cudaSuccess)
        return e;
    return launch(attn_prefill_kernel<T, DH, PF_WG, ks>, dim3((unsigned)blocks), PF_THREADS * ks,
                  prefill_smem<T, DH, ks>(), st, pdl, (const T *)attn_q(l), (const T *)l->in[3], (const T *)l->in[4],
                  (T *)l->out[0], *l->meta, g, l->rows);
}

template <typename T, int DH>
static cudaError_t prefill_run(const reel_launch *l, cudaStream_t st, const attn_geom &g, bool pdl, int64_t sms)
{
    const int64_t blocks = (l->rows + PF_BM - 1) / PF_BM * g.h;
#ifdef REEL_ATTN_PREFILL_KS
    const int ks = REEL_ATTN_PREFILL_KS > pf_max_ks<DH>() ? pf_max_ks<DH>() : REEL_ATTN_PREFILL_KS;
#else
    const int ks = (int)reel_attn_prefill_splits(blocks, sms, (int64_t)prefill_blocks_per_sm<T, DH>() * sms,
                                                      pf_max_ks<DH>());
#endif
    if (ks >= 4)
        return prefill_go<T, DH, 4>(l, st, g, pdl, blocks);
    if (ks >= 2)
        return prefill_go<T, DH, 2>(l, st, g, pdl, blocks);
    return prefill_go<T, DH, 1>(l, st, g, pdl, blocks);
}

cudaError_t attn_prefill_launch(const reel_launch *l, cudaStream_t st, const attn_geom &g, bool pdl, int64_t sms)
{
    bool bf = l->in_shape[0].dtype == REEL_BF16;
    if (g.dh == 64)
        return bf ? prefill_run<__nv_bfloat16, 64>(l, st, g, pdl, sms) : prefill_run<__half, 64>(l, st, g, pdl, sms);
    return bf ? prefill_run<__nv_bfloat16, 128>(l, st, g, pdl, sms) : prefill_run<__half, 128>(l, st, g, pdl, sms);
}

} /* namespace reel_cu */
