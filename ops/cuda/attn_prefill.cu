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
        constexpr int KSTEPS = DH / 16;        /* k-steps of S = Q K^T */
        constexpr int DTILES = DH / 8;         /* n-tiles of O */
        constexpr int STILES = PF_BN / 8;      /* n-tiles of S */
        constexpr int CPR = DH / 8;            /* 16-byte chunks per cache row */
        constexpr int NS = pf_stages<WG>();
        constexpr int NT = PF_THREADS * KS; /* the block's threads */
        static_assert(KS == 1 || WG, "the key split is the warpgroup kernel's");
        /* Dynamic: [KS * NS][PF_BN * LD] of K, then the same of V. */
        extern __shared__ __align__(16) unsigned char pf_smem[];
        unsigned char *smem = pf_smem;
        if constexpr (WG) /* swizzle atoms start on 1024-byte boundaries (prefill_smem adds the slack) */
            smem += (1024u - ((uint32_t)__cvta_generic_to_shared(pf_smem) & 1023u)) & 1023u;
        T(*ks_all)[PF_BN * LD] = (T(*)[PF_BN * LD])smem;
        T(*vs_all)[PF_BN * LD] = (T(*)[PF_BN * LD])(smem + sizeof(T) * KS * NS * PF_BN * LD);
        __shared__ int32_t s_seq[PF_BM], s_pos[PF_BM];
        __shared__ int s_state[PF_BM]; /* 1: this block's to attend, 0: not (or done) */
        __shared__ int s_cur, s_maxpos, s_firstbad;

        /* Heads vary fastest (blocks that run together share K/V rows), and the
         * last tiles come first: in a causal prefill they have the most keys,
         * so the grid's tail is made of short blocks. */
        const int64_t ntq = (rows + PF_BM - 1) / PF_BM;
        const int64_t t0 = (ntq - 1 - (int64_t)(blockIdx.x / g.h)) * PF_BM, h = blockIdx.x % g.h, kvh = h / g.group;
        const int lane = threadIdx.x & 31, warp = (threadIdx.x >> 5) % PF_WARPS; /* warp of its warpgroup */
        const int wg = KS == 1 ? 0 : (int)threadIdx.x / PF_THREADS; /* its warpgroup */
        const int gi = lane >> 2, ti = lane & 3; /* mma fragment coordinates */
        const float qscale = g.scale * 1.4426950408889634f;
        const int32_t bs = (int32_t)g.bs;

        /* The rows' classes from the metadata alone (readable before the wait:
         * the step's upload precedes every kernel of it); launched as a
         * programmatic dependent of the decode, a block of a step without runs
         * has done its work by the time the decode ends. Its stores, and every
         * read of q and the cache, follow the wait. */
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
                    bad = ok != 1; /* in a run, so not padding */
                }
            }
            s_seq[i] = s;
            s_pos[i] = p;
            s_state[i] = st;
        }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
        if (pdl)
            cudaGridDependencySynchronize();
#endif
        if (zero) {
            const int64_t t = t0 + threadIdx.x;
            if (bad)
                report(&m, REEL_E_LIMIT);
            for (int64_t d = 0; d < DH; d++) /* a breach, or an empty DCP shard: (0, -inf) */
                out[t * g.qrow + h * DH + d] = from_f<T>(0.0f);
            if (g.lse)
                g.lse[t * g.h + h] = -INFINITY;
        }
        __syncthreads();

        for (;;) {
            /* The next segment: the sequence of the first row still to do. */
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
            const int32_t seq = s_cur;
            if (seq < 0)
                break;
            if (threadIdx.x < PF_BM && s_state[threadIdx.x] == 1 && s_seq[threadIdx.x] == seq)
                atomicMax(&s_maxpos, s_pos[threadIdx.x]);
            __syncthreads();
            const int32_t *bt = m.block_tables + (int64_t)seq * m.max_blocks;
            for (int32_t b = threadIdx.x; b <= s_maxpos / bs; b += NT) {
                int32_t blk = bt[b];
                if (blk < 0 || blk >= g.nblocks)
                    atomicMin(&s_firstbad, b);
            }
            __syncthreads();
            /* Rows whose keys reach a bad block are refused; the rest form the segment. */
            if (threadIdx.x == 0)
                s_maxpos = -1;
            __syncthreads();
            if (threadIdx.x < PF_BM && s_state[threadIdx.x] == 1 && s_seq[threadIdx.x] == seq) {
                int i = threadIdx.x;
                if (s_pos[i] / bs >= s_firstbad) {
                    report(&m, REEL_E_LIMIT);
                    for (int64_t d = 0; d < DH; d++)
                        out[(t0 + i) * g.qrow + h * DH + d] = from_f<T>(0.0f);
                    if (g.lse)
                        g.lse[(t0 + i) * g.h + h] = -INFINITY;
                    s_state[i] = 0;
                } else {
                    s_state[i] = 2; /* in this segment */
                    atomicMax(&s_maxpos, s_pos[i]);
                }
            }
            __syncthreads();
            const int32_t maxpos = s_maxpos;

            /* This warp's rows gi and gi + 8 of its 16. */
            const int r0 = warp * 16 + gi, r1 = r0 + 8;
            const bool in0 = s_state[r0] == 2, in1 = s_state[r1] == 2;
            const int32_t p0 = in0 ? s_pos[r0] : -1, p1 = in1 ? s_pos[r1] : -1;
            int32_t wmax = max(p0, p1), wmin = min(p0, p1);
            wmax = max(wmax, __shfl_xor_sync(0xffffffffu, wmax, 1));
            wmax = max(wmax, __shfl_xor_sync(0xffffffffu, wmax, 2));
            wmax = max(wmax, __shfl_xor_sync(0xffffffffu, wmax, 4));
            wmax = max(wmax, __shfl_xor_sync(0xffffffffu, wmax, 8));
            wmax = max(wmax, __shfl_xor_sync(0xffffffffu, wmax, 16));
#pragma unroll
            for (int o = 1; o < 32; o <<= 1)
                wmin = min(wmin, __shfl_xor_sync(0xffffffffu, wmin, o));

            uint32_t qf[KSTEPS][4];
            {
                const T *q0 = q + (t0 + r0) * g.qrow + h * DH, *q1 = q + (t0 + r1) * g.qrow + h * DH;
#pragma unroll
                for (int kk = 0; kk < KSTEPS; kk++) {
                    int d = kk * 16 + ti * 2;
                    qf[kk][0] = in0 ? *(const uint32_t *)(q0 + d) : 0u;
                    qf[kk][1] = in1 ? *(const uint32_t *)(q1 + d) : 0u;
                    qf[kk][2] = in0 ? *(const uint32_t *)(q0 + d + 8) : 0u;
                    qf[kk][3] = in1 ? *(const uint32_t *)(q1 + d + 8) : 0u;
                }
            }
            float o[DTILES][4];
#pragma unroll
            for (int n = 0; n < DTILES; n++)
                o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
            float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;

            /* The online softmax of rows r0 (c0, c1) and r1 (c2, c3) over the
             * scores of the tile at key kt, on raw scores: max first, then
             * exp2(s * qscale - max * qscale) in one FMA; sc becomes P, and c0,
             * c1 the factor o takes before P V is added (rescale_o). A tile
             * wholly at or before both rows' positions needs no mask (most
             * tiles of a causal prefill). */
            float c0 = 1.0f, c1 = 1.0f; /* the last softmax's rescale of o, rows r0 and r1 */
            /* Late in a row the maximum rarely moves: a warp whose rows all
             * keep theirs skips the multiplies by exactly 1. */
            auto rescale_o = [&]() {
                if (__any_sync(0xffffffffu, c0 != 1.0f || c1 != 1.0f))
                    scale_rows(o, c0, c1);
            };
            auto softmax = [&](float (&sc)[STILES][4], int32_t kt) {
                float mx0 = m0, mx1 = m1;
                if (kt + PF_BN - 1 <= wmin) {
#pragma unroll
                    for (int n = 0; n < STILES; n++) {
                        mx0 = fmaxf(mx0, fmaxf(sc[n][0], sc[n][1]));
                        mx1 = fmaxf(mx1, fmaxf(sc[n][2], sc[n][3]));
                    }
                } else {
#pragma unroll
                    for (int n = 0; n < STILES; n++) {
#pragma unroll
                        for (int e = 0; e < 2; e++) {
                            int32_t j = kt + n * 8 + ti * 2 + e;
                            sc[n][e] = j <= p0 ? sc[n][e] : -INFINITY;
                            sc[n][2 + e] = j <= p1 ? sc[n][2 + e] : -INFINITY;
                            mx0 = fmaxf(mx0, sc[n][e]);
                            mx1 = fmaxf(mx1, sc[n][2 + e]);
                        }
                    }
                }
                mx0 = quad_max(mx0);
                mx1 = quad_max(mx1);
                /* m0, m1 are raw maxima; a row with no key yet stays -inf. */
                float s0 = mx0 == -INFINITY ? 0.0f : mx0 * qscale, s1 = mx1 == -INFINITY ? 0.0f : mx1 * qscale;
                c0 = mx0 == -INFINITY ? 1.0f : ex2_ftz((m0 - mx0) * qscale);
                c1 = mx1 == -INFINITY ? 1.0f : ex2_ftz((m1 - mx1) * qscale);
                m0 = mx0;
                m1 = mx1;
                l0 *= c0;
                l1 *= c1;
#pragma unroll
                for (int n = 0; n < STILES; n++) {
                    sc[n][0] = ex2_ftz(fmaf(sc[n][0], qscale, -s0));
                    sc[n][1] = ex2_ftz(fmaf(sc[n][1], qscale, -s0));
                    sc[n][2] = ex2_ftz(fmaf(sc[n][2], qscale, -s1));
                    sc[n][3] = ex2_ftz(fmaf(sc[n][3], qscale, -s1));
                    l0 += sc[n][0] + sc[n][1];
                    l1 += sc[n][2] + sc[n][3];
                }
            };
            /* P's A fragment for keys 16 kk .. 16 kk + 15: two S n-tiles. */
            auto p_frag = [&](const float (&sc)[STILES][4], int kk, uint32_t (&a)[4]) {
                c_to_a<T>(sc[2 * kk], sc[2 * kk + 1], a);
            };
            const int ntiles = maxpos / PF_BN + 1;
            __syncthreads(); /* the previous segment no longer reads the stages */
            if constexpr (WG) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
                /* Three stages a warpgroup, and P V of one tile on the tensor
                 * cores while the next tile's softmax runs. The warpgroup's
                 * tiles are lt = 0, 1, ... (key tile lt KS + wg). Per tile lt:
                 * find tile lt + 2's rows, load tile lt + 1 (into the stage of
                 * tile lt - 2, whose products are done), wait for tile lt,
                 * issue S(lt), issue PV(lt - 1) from P's registers, wait for
                 * S(lt) alone, softmax, wait for PV(lt - 1), rescale o, pack
                 * P(lt). Every tile holds a key of some row (the tiles end at
                 * maxpos), and the products are the warpgroup's: no warp
                 * skips one. */
                float sc[STILES][4];
                uint32_t pa[PF_BN / 16][4]; /* P of the last softmax, as A fragments */
                const int ltid = (int)threadIdx.x % PF_THREADS; /* its thread in the warpgroup */
                /* The warpgroup's tiles (ntl), and the block's steps (nlt):
                 * the warpgroups step together, one block barrier a tile, a
                 * warpgroup with one tile fewer idling through the last. */
                const int ntl = ntiles > wg ? (ntiles - wg + KS - 1) / KS : 0;
                const int nlt = (ntiles + KS - 1) / KS;
                /* Each key's cache row (byte offset of this kv head), found
                 * two tiles ahead by a thread a key: the loads then need no
                 * dependent read of the block table. A key past maxpos takes
                 * maxpos's row: a whole, written row whose score every row
                 * masks (P is exactly 0 there), so no load needs a zero fill
                 * or a test. */
                __shared__ int64_t s_row[KS][NS][PF_BN];
                auto rows_of = [&](int lt) {
                    if (ltid < PF_BN) {
                        int32_t j = min((lt * KS + wg) * PF_BN + ltid, maxpos);
                        s_row[wg][lt % NS][ltid] =
                            (((int64_t)bt[attn_blk(g, j)] * bs + attn_in_blk(g, j)) * g.kvrow + kvh * DH) *
                            (int64_t)sizeof(T);
                    }
                };
                /* 128-byte swizzled rows: dims 64 a .. 64 a + 63 of key r at
                 * byte 128 (PF_BN a + r), their 16-byte chunk c at (c ^ r % 8);
                 * a row's chunks come from consecutive threads. A thread's rows
                 * step by RSTEP, a multiple of 8, so its swizzle is the same in
                 * every row and its shared offsets are fixed. */
                constexpr int RSTEP = PF_THREADS / CPR;
                constexpr uint32_t STAGE = (uint32_t)(sizeof(T) * PF_BN * LD);
                static_assert(PF_THREADS % CPR == 0 && RSTEP % 8 == 0, "a thread keeps its part and swizzle");
                const int part = ltid % CPR, rfirst = ltid / CPR;
                const uint32_t soff = (uint32_t)((part >> 3) * (PF_BN * 128) + rfirst * 128 +
                                                 (((part & 7) ^ (rfirst & 7)) << 4));
                const uint32_t ks_sh = (uint32_t)__cvta_generic_to_shared(ks_all[wg * NS]) + soff,
                               vs_sh = (uint32_t)__cvta_generic_to_shared(vs_all[wg * NS]) + soff;
                const char *kbase = (const char *)kc + part * 16, *vbase = (const char *)vc + part * 16;
                auto load_wg = [&](int lt) {
                    const uint32_t st = (uint32_t)(lt % NS) * STAGE;
                    const int64_t *rw = s_row[wg][lt % NS];
#pragma unroll
                    for (int k = 0; k < PF_BN / RSTEP; k++) {
                        const int64_t row = rw[rfirst + k * RSTEP];
                        cp_async16_sh(ks_sh + st + k * RSTEP * 128, kbase + row);
                        cp_async16_sh(vs_sh + st + k * RSTEP * 128, vbase + row);
                    }
                    cp_async_commit();
                };
                auto s_issue = [&](int lt) {
                    const unsigned char *ks = (const unsigned char *)ks_all[wg * NS + lt % NS];
                    wg_fence();
                    /* K-major B (dims contiguous): k-step kk starts 32 bytes
                     * into its 64 dims' rows; 8 keys are 1024 bytes apart. */
#pragma unroll
                    for (int kk = 0; kk < KSTEPS; kk++)
                        wg_mma<T, PF_BN>::template run<0>(
                            &sc[0][0], qf[kk], wg_desc_sw128(ks + (kk >> 2) * (PF_BN * 128) + (kk & 3) * 32, 16, 1024),
                            kk > 0);
                    wg_commit();
                };
                auto pv_issue = [&](int lt) {
                    const unsigned char *vs = (const unsigned char *)vs_all[wg * NS + lt % NS];
                    wg_fence(); /* o's rescale and P's registers before the products */
                    /* N-major B (V's dims contiguous): keys 16 kk on; the
                     * leading offset steps 64 dims, the stride offset 8 keys. */
#pragma unroll
                    for (int kk = 0; kk < PF_BN / 16; kk++)
                        wg_mma<T, DH>::template run<1>(&o[0][0], pa[kk],
                                                       wg_desc_sw128(vs + kk * 2048, PF_BN * 128, 1024), 1);
                    wg_commit();
                };
                auto pack_p = [&]() {
#pragma unroll
                    for (int kk = 0; kk < PF_BN / 16; kk++)
                        p_frag(sc, kk, pa[kk]);
                };
                if (ntl > 0)
                    rows_of(0);
                if (ntl > 1)
                    rows_of(1);
                __syncthreads();
                if (ntl > 0)
                    load_wg(0);
                for (int lt = 0; lt < nlt; lt++) {
                    if (lt + 2 < ntl)
                        rows_of(lt + 2); /* tile lt - 1's rows, whose loads are issued */
                    if (lt + 1 < ntl) {
                        load_wg(lt + 1);
                        cp_async_wait<1>();
                    } else {
                        cp_async_wait<0>();
                    }
                    fence_proxy_async(); /* the tensor cores read what cp.async wrote */
                    __syncthreads();
                    if (lt < ntl) {
                        s_issue(lt);
                        if (lt > 0) {
                            pv_issue(lt - 1);
                            wg_wait<1>();
                        } else {
                            wg_wait<0>();
                        }
                        wg_hold(sc);
                        softmax(sc, (lt * KS + wg) * PF_BN);
                        wg_wait<0>();
                        wg_hold(o);
                        /* o's rescale for tile lt, with no product in flight:
                         * ptxas waits for (or serialises) products whose
                         * accumulators other instructions write while a group
                         * is open. */
                        rescale_o();
                        pack_p();
                    }
                }
                if (ntl > 0) {
                    pv_issue(ntl - 1);
                    wg_wait<0>();
                    wg_hold(o);
                }
                if constexpr (KS > 1) {
                    /* The merge: warpgroups 1 .. KS - 1 leave (m, l, o) of
                     * each thread in the stages (every product and load of
                     * the block is done), warpgroup 0 folds them in, in order.
                     * A thread's fragments are the same rows and dims in every
                     * warpgroup; [value][thread] keeps the accesses
                     * conflict-free. */
                    constexpr int PER = DTILES * 4 + 4;
                    static_assert(sizeof(float) * (KS - 1) * PER * PF_THREADS <= sizeof(T) * 2 * KS * NS * PF_BN * LD,
                                  "the partials fit the stages");
                    float *mg = (float *)smem;
                    __syncthreads();
                    if (wg > 0) {
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
                    __syncthreads();
                    if (wg == 0) {
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
                }
#endif
            } else {
                /* Two stages: tile it + 1 is in flight while tile it is computed. */
                auto load_tile = [&](int32_t kt, int stage) {
                    cp_async_kv_tile<T, DH, PF_BN, PF_THREADS, LD>(
                        ks_all[stage], vs_all[stage], kc, vc, kt, [&](int32_t j) { return j <= maxpos; },
                        [&](int32_t j) {
                            return ((int64_t)bt[attn_blk(g, j)] * bs + attn_in_blk(g, j)) * g.kvrow + kvh * DH;
                        });
                };
                load_tile(0, 0);
                for (int it = 0; it < ntiles; it++) {
                    const int32_t kt = it * PF_BN;
                    if (it + 1 < ntiles)
                        load_tile(kt + PF_BN, (it + 1) & 1);
                    else
                        cp_async_commit(); /* an empty group keeps the count */
                    cp_async_wait_1();
                    __syncthreads();
                    const T *ks = ks_all[it & 1], *vs = vs_all[it & 1];
                    if (kt > wmax) {
                        __syncthreads();
                        continue; /* every key of the tile is after this warp's rows */
                    }
                    float sc[STILES][4];
#pragma unroll
                    for (int n = 0; n < STILES; n++)
                        sc[n][0] = sc[n][1] = sc[n][2] = sc[n][3] = 0.0f;
#pragma unroll
                    for (int kk = 0; kk < KSTEPS; kk++) {
#pragma unroll
                        for (int n = 0; n < STILES; n += 2) {
                            uint32_t b[4];
                            int key = n * 8 + (lane >> 4) * 8 + (lane & 7);
                            int dim = kk * 16 + ((lane >> 3) & 1) * 8;
                            ldsm_x4(b, &ks[key * LD + dim]);
                            mma_op<T>::run(sc[n], qf[kk], b);
                            mma_op<T>::run(sc[n + 1], qf[kk], b + 2);
                        }
                    }
                    softmax(sc, kt);
                    rescale_o();
                    /* O += P V, 16 keys per k-step. */
#pragma unroll
                    for (int kk = 0; kk < PF_BN / 16; kk++) {
                        uint32_t a[4];
                        p_frag(sc, kk, a);
#pragma unroll
                        for (int n = 0; n < DTILES; n += 2) {
                            uint32_t b[4];
                            int key = kk * 16 + ((lane >> 3) & 1) * 8 + (lane & 7);
                            int dim = (n + (lane >> 4)) * 8;
                            ldsm_x4_t(b, &vs[key * LD + dim]);
                            mma_op<T>::run(o[n], a, b);
                            mma_op<T>::run(o[n + 1], a, b + 2);
                        }
                    }
                    __syncthreads(); /* the next prefetch reuses this stage */
                }
            }

            l0 = quad_sum(l0);
            l1 = quad_sum(l1);
            if (wg == 0) { /* warpgroup 0 holds the merged rows */
                /* One reciprocal a row, and two dims a store (d is even and
                 * rows are whole heads apart). */
                T *o0 = out + (t0 + r0) * g.qrow + h * DH, *o1 = out + (t0 + r1) * g.qrow + h * DH;
                const float i0 = in0 ? 1.0f / l0 : 0.0f, i1 = in1 ? 1.0f / l1 : 0.0f;
#pragma unroll
                for (int n = 0; n < DTILES; n++) {
                    int d = n * 8 + ti * 2;
                    if (in0)
                        *(uint32_t *)(o0 + d) = mma_op<T>::pack2(o[n][0] * i0, o[n][1] * i0);
                    if (in1)
                        *(uint32_t *)(o1 + d) = mma_op<T>::pack2(o[n][2] * i1, o[n][3] * i1);
                }
                if (g.lse && ti == 0) { /* m0, m1 are raw maxima: scaled here */
                    if (in0)
                        g.lse[(t0 + r0) * g.h + h] = (m0 * qscale + log2f(l0)) * REEL_ATTN_LN2;
                    if (in1)
                        g.lse[(t0 + r1) * g.h + h] = (m1 * qscale + log2f(l1)) * REEL_ATTN_LN2;
                }
            }
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
