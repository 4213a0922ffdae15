/* Split-KV decode attention (flash-decoding) and the combine of its
 * partials; see attention.cuh for how the op's kernels share the work.
 *
 * Grid: x = (token, chunk), y = (kv head, head group). A block attends the
 * G query heads of one kv head (GQA: each K/V byte is read once per token)
 * over one chunk of the token's keys. Each thread owns a 16-byte slice of a
 * cache row: TPK threads cover one key's row, a warp KPW keys at a time, and
 * each thread keeps U keys in flight (U loads of K and of V issued before
 * any arithmetic). Scores of those keys are reduced over the TPK lanes by
 * shuffles, then folded into a per-thread online softmax (base 2); the
 * threads' states are merged at the end in a fixed order (lanes, then
 * warps), so a launch always gives the same bits. The chunk's block ids are
 * read into shared memory once per tile of keys and checked there.
 *
 * A token whose keys fit one chunk writes its output directly; otherwise
 * each chunk writes (out, lse) into the op's planned workspace and the
 * combine kernel merges them ((0, -inf) is the identity: a chunk's weight is
 * exp2(lse - max), exactly 0 for an empty one). */
#include "ops/cuda/attention.cuh"
#include "ops/attn_chunks.h"

namespace reel_cu {

enum { DEC_WARPS = 4, DEC_THREADS = DEC_WARPS * 32, DEC_TILE = 256 };

__device__ __forceinline__ float merge_scale(float m, float M)
{
    return m == -INFINITY ? 0.0f : exp2f(m - M);
}

/* Resident blocks per SM the register budget is held to: enough warps to
 * keep loads in flight (Nsight Compute showed 164 registers and 3 blocks
 * an SM for G = 1 without it). */
template <int G> struct dec_occupancy {
    static constexpr int blocks = G <= 2 ? 6 : G <= 4 ? 4 : 3;
};

/* The query rows of heads h0 .. h0 + G - 1 (this thread's VEC dims, in
 * base 2: pre-scaled by qscale; zeros for heads past nh) and their empty
 * online softmax states (acc, running max mx, sum sm). */
template <typename T, int DH, int G>
__device__ __forceinline__ void dec_begin_rows(const T *q, const attn_geom &g, int64_t t, int64_t h0, int nh, int kl,
                                               float qscale, float (&qr)[G][pack<T>::n],
                                               float (&acc)[G][pack<T>::n], float (&mx)[G], float (&sm)[G])
{
    typedef pack<T> P;
#pragma unroll
    for (int i = 0; i < G; i++) {
        P qp;
        if (i < nh)
            qp = *(const P *)(q + t * g.qrow + (h0 + i) * DH + kl * P::n);
#pragma unroll
        for (int e = 0; e < P::n; e++) {
            qr[i][e] = i < nh ? to_f(qp.v[e]) * qscale : 0.0f;
            acc[i][e] = 0.0f;
        }
        mx[i] = -INFINITY;
        sm[i] = 0.0f;
    }
}

/* A tile's nb block ids from b0 into s_blk, read once by the whole block
 * and checked there: returns (to every thread) whether one breaches. */
__device__ __forceinline__ int dec_read_ids(const attn_geom &g, const int32_t *bt, int32_t b0, int32_t nb,
                                            int32_t *s_blk)
{
    __syncthreads(); /* the previous tile's ids are no longer read */
    int mybad = 0;
    for (int i = threadIdx.x; i < nb; i += DEC_THREADS) {
        int32_t blk = bt[b0 + i];
        mybad |= blk < 0 || blk >= g.nblocks;
        s_blk[i] = blk;
    }
    return __syncthreads_or(mybad);
}

/* The load phase: this thread's 16-byte slice of the K and V rows of its U
 * keys of the iteration at j0 (u KPB apart), all loads issued before any
 * arithmetic; a key at tile1 or past is not live, and zeros. */
template <typename T, int U, int KPB, int KPW>
__device__ __forceinline__ void dec_load_kv(pack<T> (&kp)[U], pack<T> (&vp)[U], bool (&live)[U], const T *kb,
                                            const T *vb, const int32_t *s_blk, int32_t b0, int32_t j0,
                                            int32_t tile1, int warp, int ks, const attn_geom &g, int32_t bs)
{
#pragma unroll
    for (int u = 0; u < U; u++) {
        int32_t j = j0 + u * KPB + warp * KPW + ks;
        live[u] = j < tile1;
        if (live[u]) {
            int64_t row = ((int64_t)s_blk[attn_blk(g, j) - b0] * bs + attn_in_blk(g, j)) * g.kvrow;
            kp[u] = *(const pack<T> *)(kb + row);
            vp[u] = *(const pack<T> *)(vb + row);
        } else {
#pragma unroll
            for (int e = 0; e < pack<T>::n; e++)
                kp[u].v[e] = vp[u].v[e] = from_f<T>(0.0f);
        }
    }
}

/* The scores phase of one head: its row's dot products with the U keys,
 * reduced over the TPK lanes of a key by shuffles (-inf where not live).
 * Returns the head's new running max. */
template <typename T, int TPK, int U>
__device__ __forceinline__ float dec_scores(const float (&qr)[pack<T>::n], const pack<T> (&kp)[U],
                                            const bool (&live)[U], float mx, float (&sc)[U])
{
    float mnew = mx;
#pragma unroll
    for (int u = 0; u < U; u++) {
        float d = 0.0f;
#pragma unroll
        for (int e = 0; e < pack<T>::n; e++)
            d = fmaf(qr[e], to_f(kp[u].v[e]), d);
#pragma unroll
        for (int o = TPK / 2; o > 0; o >>= 1)
            d += __shfl_xor_sync(0xffffffffu, d, o);
        sc[u] = live[u] ? d : -INFINITY;
        mnew = fmaxf(mnew, sc[u]);
    }
    return mnew;
}

/* The online softmax update (base 2) of one head by U scores under the new
 * max mnew (finite), and acc += p V. */
template <typename T, int U>
__device__ __forceinline__ void dec_softmax_pv(const float (&sc)[U], float mnew, const pack<T> (&vp)[U],
                                               float (&acc)[pack<T>::n], float &mx, float &sm)
{
    float corr = merge_scale(mx, mnew);
    float psum = 0.0f, pu[U];
#pragma unroll
    for (int u = 0; u < U; u++) {
        pu[u] = exp2f(sc[u] - mnew);
        psum += pu[u];
    }
    sm = sm * corr + psum;
#pragma unroll
    for (int e = 0; e < pack<T>::n; e++) {
        float a = acc[e] * corr;
#pragma unroll
        for (int u = 0; u < U; u++)
            a = fmaf(pu[u], to_f(vp[u].v[e]), a);
        acc[e] = a;
    }
    mx = mnew;
}

/* The key slots of a warp merged (xor over lanes TPK, 2 TPK, ..., a fixed
 * order), so every lane of a key slot holds the warp's state. */
template <int G, int VEC, int TPK>
__device__ __forceinline__ void dec_merge_lanes(float (&acc)[G][VEC], float (&mx)[G], float (&sm)[G])
{
#pragma unroll
    for (int o = TPK; o < 32; o <<= 1) {
#pragma unroll
        for (int i = 0; i < G; i++) {
            float mo = __shfl_xor_sync(0xffffffffu, mx[i], o);
            float so = __shfl_xor_sync(0xffffffffu, sm[i], o);
            float M = fmaxf(mx[i], mo);
            float f1 = M == -INFINITY ? 0.0f : merge_scale(mx[i], M);
            float f2 = M == -INFINITY ? 0.0f : merge_scale(mo, M);
            sm[i] = sm[i] * f1 + so * f2;
#pragma unroll
            for (int e = 0; e < VEC; e++) {
                float ao = __shfl_xor_sync(0xffffffffu, acc[i][e], o);
                acc[i][e] = acc[i][e] * f1 + ao * f2;
            }
            mx[i] = M;
        }
    }
}

/* The warps' merge, in warp order, of heads h0 .. h0 + nh - 1 (each warp's
 * state in s_red: [warp][head][DH dims, max, sum]), stored as the output
 * (and lse) where the token has one chunk, else as the chunk's partial. */
template <typename T, int DH, int G>
__device__ __forceinline__ void dec_merge_store(const float (&s_red)[DEC_WARPS][G][DH + 2], const attn_geom &g,
                                                float *ws, T *orow, int64_t t, int c, int nchunks, int nact,
                                                int64_t h0, int nh)
{
    float *slot = ws + (t * nchunks + c) * (g.qrow + g.h);
    for (int x = threadIdx.x; x < nh * DH; x += DEC_THREADS) {
        int i = x / DH, d = x % DH;
        float M = -INFINITY;
#pragma unroll
        for (int w = 0; w < DEC_WARPS; w++)
            M = fmaxf(M, s_red[w][i][DH]);
        float L = 0.0f, o = 0.0f;
#pragma unroll
        for (int w = 0; w < DEC_WARPS; w++) {
            float f = merge_scale(s_red[w][i][DH], M);
            L += s_red[w][i][DH + 1] * f;
            o += s_red[w][i][d] * f;
        }
        if (nact == 1) {
            orow[x] = from_f<T>(o / L);
            if (g.lse && d == 0)
                g.lse[t * g.h + h0 + i] = (M + log2f(L)) * REEL_ATTN_LN2;
        } else {
            slot[(h0 + i) * DH + d] = o / L;
            if (d == 0)
                slot[g.qrow + h0 + i] = M + log2f(L);
        }
    }
}

template <typename T, int DH, int G, int U>
__global__ void __launch_bounds__(DEC_THREADS, dec_occupancy<G>::blocks)
    attn_decode_kernel(const T *__restrict__ q, const T *__restrict__ kc, const T *__restrict__ vc,
                       T *__restrict__ out, float *__restrict__ ws, reel_meta_view m, attn_geom g, int64_t rows,
                       int nchunks, int hsplit, bool skip_runs)
{
    typedef pack<T> P;
    constexpr int VEC = P::n;
    constexpr int TPK = DH / VEC;
    static_assert(DH % VEC == 0 && TPK >= 1 && TPK <= 32 && (TPK & (TPK - 1)) == 0, "a row per 1..32 lanes");
    constexpr int KPW = 32 / TPK;
    constexpr int KPB = KPW * DEC_WARPS;
    constexpr int KIT = KPB * U;
    static_assert(DEC_TILE % KIT == 0, "tiles hold whole iterations");
    __shared__ int32_t s_blk[DEC_TILE + 1];
    __shared__ float s_red[DEC_WARPS][G][DH + 2];

    /* kv heads vary fastest: blocks that run together read neighbouring
     * bytes of the same cache rows. */
    const int64_t ny = g.hkv * hsplit;
    const int64_t y = blockIdx.x % ny, tc = blockIdx.x / ny;
    const int64_t t = tc / nchunks;
    const int c = (int)(tc % nchunks);
    const int64_t kvh = y / hsplit;
    const int hs = (int)(y % hsplit);
    const int64_t h0 = kvh * g.group + (int64_t)hs * G;
    const int nh = (int)min((int64_t)G, g.group - (int64_t)hs * G);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int kl = lane % TPK, ks = lane / TPK;

    T *orow = out + t * g.qrow + h0 * DH;
    int32_t s, k0, k1;
    int nact;
    if (!attn_decode_begin(m, g, t, rows, c, nchunks, skip_runs, orow, h0, nh, &s, &k0, &k1, &nact))
        return;

    const float qscale = g.scale * 1.4426950408889634f; /* scores in base 2 */
    float qr[G][VEC], acc[G][VEC], mx[G], sm[G];
    dec_begin_rows<T, DH, G>(q, g, t, h0, nh, kl, qscale, qr, acc, mx, sm);

    const int32_t *bt = m.block_tables + (int64_t)s * m.max_blocks;
    const int32_t bs = (int32_t)g.bs;
    const T *kb = kc + kvh * DH + kl * VEC, *vb = vc + kvh * DH + kl * VEC;
    int bad = 0;
    for (int32_t tile0 = k0; tile0 < k1; tile0 += DEC_TILE) {
        const int32_t tile1 = min(k1, tile0 + (int32_t)DEC_TILE);
        const int32_t b0 = tile0 / bs, nb = (tile1 - 1) / bs - b0 + 1;
        if (dec_read_ids(g, bt, b0, nb, s_blk)) {
            bad = 1;
            break;
        }
        for (int32_t j0 = tile0; j0 < tile1; j0 += KIT) {
            P kp[U], vp[U];
            bool live[U];
            dec_load_kv<T, U, KPB, KPW>(kp, vp, live, kb, vb, s_blk, b0, j0, tile1, warp, ks, g, bs);
#pragma unroll
            for (int i = 0; i < G; i++) {
                float sc[U];
                const float mnew = dec_scores<T, TPK, U>(qr[i], kp, live, mx[i], sc);
                if (mnew == -INFINITY)
                    continue; /* no key of the head yet: its state stays empty */
                dec_softmax_pv<T, U>(sc, mnew, vp, acc[i], mx[i], sm[i]);
            }
        }
    }

    if (bad) {
        attn_chunk_refuse(m, g, ws, t, c, nchunks, nact, h0, nh, orow);
        return;
    }

    /* The key slots of a warp, then the warps, in a fixed order. */
    dec_merge_lanes<G, VEC, TPK>(acc, mx, sm);
    if (ks == 0) {
#pragma unroll
        for (int i = 0; i < G; i++) {
#pragma unroll
            for (int e = 0; e < VEC; e++)
                s_red[warp][i][kl * VEC + e] = acc[i][e];
            if (kl == 0) {
                s_red[warp][i][DH] = mx[i];
                s_red[warp][i][DH + 1] = sm[i];
            }
        }
    }
    __syncthreads();
    dec_merge_store<T, DH, G>(s_red, g, ws, orow, t, c, nchunks, nact, h0, nh);
}

/* The most chunks the in-block combine merges (attn_decode_inblock). */
#ifndef REEL_ATTN_INBLOCK_MAX
#define REEL_ATTN_INBLOCK_MAX 8
#endif

/* -DREEL_ATTN_COMBINE_PREFETCH=1: the combine loads its first partials with
 * the log-sum-exps (an A/B knob; 0 builds the loop alone). */
#ifndef REEL_ATTN_COMBINE_PREFETCH
#define REEL_ATTN_COMBINE_PREFETCH 0
#endif
enum { COMBINE_PF = 8 };

/* The chunks' largest log-sum-exp of head h (chunk c's at base + c stride),
 * a refused chunk's mark (REEL_ATTN_BAD_LSE) noted in s_bad instead; the
 * block's max, returned to every thread. */
__device__ __forceinline__ float combine_max(const float *base, int64_t stride, const attn_geom &g, int64_t h,
                                             int nact, int &s_bad)
{
    float l = -INFINITY;
    for (int c = threadIdx.x; c < nact; c += DEC_THREADS) {
        float x = base[c * stride + g.qrow + h];
        if (__float_as_uint(x) == REEL_ATTN_BAD_LSE)
            s_bad = 1;
        else
            l = fmaxf(l, x);
    }
    return block_reduce<true>(l);
}

/* The chunks' weights exp2(lse - M) into s_w, and their sum L: up to
 * REEL_ATTN_INBLOCK_MAX chunks (serial) in the in-block combine's order
 * (dm_arrive_and_combine: chunk by chunk from chunk 0), so a token's row
 * has the same bits whichever of the two merges it; past that a block sum.
 * Its barriers publish s_w and s_bad. */
__device__ __forceinline__ float combine_weights(const float *base, int64_t stride, const attn_geom &g, int64_t h,
                                                 int nact, float M, bool serial, float *s_w)
{
    float lsum = 0.0f;
    for (int c = threadIdx.x; c < nact; c += DEC_THREADS) {
        float w = merge_scale(base[c * stride + g.qrow + h], M);
        s_w[c] = w;
        lsum += w;
    }
    float L;
    if (serial) {
        __syncthreads(); /* s_w and s_bad */
        L = 0.0f;
        for (int c = 0; c < nact; c++)
            L += s_w[c];
    } else {
        L = block_reduce<false>(lsum);
    }
    return L;
}

/* The weighted sum of dimension d over this thread's share of the chunks
 * (c, c + ng, ...; partials at ob), continued from o. */
__device__ __forceinline__ float combine_share(const float *s_w, const float *ob, int64_t stride, int64_t d, int c,
                                               int ng, int nact, float o)
{
#pragma unroll 4
    for (; c < nact; c += ng)
        o = fmaf(s_w[c], ob[c * stride + d], o);
    return o;
}

/* One block per (token, head): the chunks' weights exp2(lse - max) into
 * shared memory, then each thread sums a dimension over a share of the
 * chunks, and the shares are added in a fixed order. */
template <typename T>
__global__ void __launch_bounds__(DEC_THREADS)
    attn_combine_kernel(T *__restrict__ out, const float *__restrict__ ws, reel_meta_view m, attn_geom g,
                        int64_t rows, int nchunks, bool skip_runs, bool pdl)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    cudaTriggerProgrammaticLaunchCompletion(); /* the op's next kernel may start its own prologue */
#endif
    __shared__ float s_w[REEL_ATTN_SPLIT_SLOTS];
    __shared__ float s_part[DEC_THREADS];
    __shared__ int s_bad;
    const int64_t t = blockIdx.x / g.h, h = blockIdx.x % g.h;
    /* The token's class and chunking from the step's metadata (uploaded
     * before the step's first kernel: readable before the wait). Every
     * block waits, those with nothing to merge too: this grid completes
     * after the decode's whatever the rows. */
    int32_t s = -1, p = -1, clen = 0;
    const bool mine = !(skip_runs && attn_in_run(m, t, rows)) && attn_token_ok(m, g, t, &s, &p) == 1 && p >= 0;
    const int nact = mine ? attn_chunking(g, p, nchunks, &clen) : 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (pdl)
        cudaGridDependencySynchronize(); /* the decode's partials */
#endif
    /* not mine: a run's token (the prefill's), or chunk 0 wrote zeros (and
     * lse -inf); one chunk: written directly */
    if (nact <= 1)
        return;
    const int64_t stride = g.qrow + g.h;
    const float *base = ws + t * nchunks * stride;
    const float *ob = base + h * g.dh;
    const bool serial = nact <= REEL_ATTN_INBLOCK_MAX;
    const int ng = serial || g.dh >= DEC_THREADS ? 1 : DEC_THREADS / (int)g.dh;
    const int j = (int)(threadIdx.x / (ng > 1 ? g.dh : DEC_THREADS));
#if REEL_ATTN_COMBINE_PREFETCH
    /* The first COMBINE_PF partial values this thread multiplies (its
     * dimension of the first pass), loaded with the log-sum-exps below: one
     * round trip to L2 before the merge, not two. The sums take them in the
     * same order, so the bits are those of the loop alone. */
    float pre[COMBINE_PF];
    {
        const int64_t d = threadIdx.x % (DEC_THREADS / ng);
#pragma unroll
        for (int i = 0; i < COMBINE_PF; i++) {
            const int c = j + i * ng;
            pre[i] = j < ng && d < g.dh && c < nact ? ob[c * stride + d] : 0.0f;
        }
    }
#endif
    if (threadIdx.x == 0)
        s_bad = 0;
    __syncthreads();
    const float M = combine_max(base, stride, g, h, nact, s_bad);
    const float L = combine_weights(base, stride, g, h, nact, M, serial, s_w);
    T *orow = out + t * g.qrow + h * g.dh;
    if (s_bad || L == 0.0f) {
        for (int64_t d = threadIdx.x; d < g.dh; d += DEC_THREADS)
            orow[d] = from_f<T>(0.0f);
        attn_put_lse(g, t, h, 1, -INFINITY);
        return;
    }
    attn_put_lse(g, t, h, 1, (M + log2f(L)) * REEL_ATTN_LN2);
    for (int64_t d0 = 0; d0 < g.dh; d0 += DEC_THREADS / ng) {
        int64_t d = d0 + threadIdx.x % (DEC_THREADS / ng);
        float o = 0.0f;
        if (j < ng && d < g.dh) {
            int c = j;
#if REEL_ATTN_COMBINE_PREFETCH
            if (d0 == 0) {
#pragma unroll
                for (int i = 0; i < COMBINE_PF; i++, c += ng)
                    if (c < nact)
                        o = fmaf(s_w[c], pre[i], o);
            }
#endif
            o = combine_share(s_w, ob, stride, d, c, ng, nact, o);
        }
        s_part[threadIdx.x] = o;
        __syncthreads();
        if (j == 0 && d < g.dh) {
            for (int k = 1; k < ng; k++)
                o += s_part[k * (DEC_THREADS / ng) + threadIdx.x];
            orow[d] = from_f<T>(o / L);
        }
        __syncthreads();
    }
}

static int head_group(const attn_geom &g)
{
    return g.group >= 8 ? 8 : g.group >= 4 ? 4 : g.group >= 2 ? 2 : 1;
}

bool attn_decode_supports(reel_dtype dt, int64_t dh)
{
    int vec = dt == REEL_F32 ? 4 : 8;
    return (dt == REEL_F32 || dt == REEL_F16 || dt == REEL_BF16) &&
           (dh == 64 || dh == 128 || (dh == 256 && dh / vec <= 32));
}

/* The chunk count of a launch: a function of the launch alone (rows, the
 * heads a block takes, the device's SM count, the plan's max_context), so
 * replay and eager chunk alike (docs/attention.md). */
#ifndef REEL_ATTN_BLOCKS_PER_SM
#define REEL_ATTN_BLOCKS_PER_SM 4
#endif

static int64_t decode_units(const reel_backend *be, const attn_geom &g, reel_dtype dt, int64_t rows, int64_t *sms)
{
    int64_t G = attn_decode_mma_supports(dt, g.dh) ? attn_decode_mma_group() : head_group(g);
    *sms = be->caps.sm_count > 0 ? be->caps.sm_count : 132;
    return rows * g.hkv * ((g.group + G - 1) / G);
}

/* REEL_ATTN_ONE_WAVE_OCC=0 builds the bound before it (four blocks a
 * multiprocessor whatever the kernel's occupancy), for A/B. */
#ifndef REEL_ATTN_ONE_WAVE_OCC
#define REEL_ATTN_ONE_WAVE_OCC 1
#endif

bool attn_decode_one_wave(const reel_backend *be, const attn_geom &g, reel_dtype dt, int64_t rows)
{
    int64_t sms;
    const int64_t units = decode_units(be, g, dt, rows, &sms);
    int64_t per_sm = REEL_ATTN_BLOCKS_PER_SM;
#if REEL_ATTN_ONE_WAVE_OCC
    const int64_t occ = attn_decode_mma_blocks_per_sm(dt, g.dh);
    if (occ > 0 && occ < per_sm)
        per_sm = occ;
#endif
    return units <= per_sm * sms;
}

/* The chunk count (docs/attention.md, "The chunking rule"):
 * reel_attn_wave_chunks over the waves of the kernel's own occupancy.
 * REEL_ATTN_CHUNK_RULE=0 builds the rule before it (floor(4 SMs / units)),
 * for A/B. */
#ifndef REEL_ATTN_CHUNK_RULE
#define REEL_ATTN_CHUNK_RULE 1
#endif

/* -DREEL_ATTN_CHUNK_CAP=N caps a launch's chunk count at N (0: no cap), an
 * A/B knob: at most REEL_ATTN_INBLOCK_MAX chunks keep a small batch's merge
 * in the decode kernel, at fewer blocks. */
#ifndef REEL_ATTN_CHUNK_CAP
#define REEL_ATTN_CHUNK_CAP 0
#endif

int attn_decode_chunks(const reel_backend *be, attn_geom *g, reel_dtype dt, int64_t rows, int32_t max_context)
{
    int64_t sms;
    const int64_t units = decode_units(be, *g, dt, rows, &sms);
    const int32_t base = attn_min_chunk_dh(g->dh);
    int64_t cap = (REEL_ATTN_SPLIT_SLOTS - 1) / (rows > 0 ? rows : 1); /* the last slot: counters */
    const int64_t cap_ctx = ((int64_t)max_context + base - 1) / base;
    if (cap > cap_ctx)
        cap = cap_ctx;
    if (REEL_ATTN_CHUNK_CAP > 0 && cap > REEL_ATTN_CHUNK_CAP)
        cap = REEL_ATTN_CHUNK_CAP;
    if (cap < 1)
        cap = 1;
#if REEL_ATTN_CHUNK_RULE
    int64_t per_sm = attn_decode_mma_blocks_per_sm(dt, g->dh);
    if (per_sm <= 0)
        per_sm = REEL_ATTN_BLOCKS_PER_SM;
    const int64_t n = reel_attn_wave_chunks(units, per_sm * sms, cap);
#else
    const int64_t per_sm = REEL_ATTN_BLOCKS_PER_SM;
    int64_t n = REEL_ATTN_BLOCKS_PER_SM * sms / units;
    if (n > cap)
        n = cap;
    if (n < 1)
        n = 1;
#endif
    int32_t least = base;
    const int64_t fit = reel_attn_fit_chunks(units, per_sm * sms, n, base, REEL_ATTN_MIN_CHUNK_WAVES, max_context,
                                             &least);
    g->min_chunk = least;
    g->whole_keys = reel_attn_whole_keys(g->group);
    return (int)reel_attn_whole_chunks(fit, max_context, g->whole_keys);
}

/* The combine as a programmatic dependent of the decode (its metadata
 * reads overlap the decode's tail); -DREEL_ATTN_COMBINE_PDL=0 builds it in
 * stream order, for A/B. */
#ifndef REEL_ATTN_COMBINE_PDL
#define REEL_ATTN_COMBINE_PDL 1
#endif

bool attn_decode_inblock(const attn_geom &g, reel_dtype dt, int64_t rows, int nchunks)
{
    /* Measured on an H200 (docs/benchmarks.md): a win at 2 chunks (batch 1,
     * context 128: 9.7 -> 7.5 us a layer), a loss at 32 (context 2048: the
     * last block's merge of 32 partials costs more than the combine launch). */
    if (!attn_decode_mma_supports(dt, g.dh) || nchunks <= 1 || nchunks > REEL_ATTN_INBLOCK_MAX)
        return false;
    int64_t G = attn_decode_mma_group(), nh = g.group < G ? g.group : G;
    int64_t groups = g.hkv * ((g.group + G - 1) / G);
    return rows * groups <= attn_ws_slot_floats(g) &&
           nh * g.dh * nchunks + nh * nchunks + G <= attn_decode_mma_smem_floats(g.dh);
}

template <typename T>
static cudaError_t combine_run(const reel_launch *l, cudaStream_t st, const attn_geom &g, int nchunks, bool skip,
                               bool pdl)
{
    if (nchunks <= 1)
        return cudaSuccess;
    return launch(attn_combine_kernel<T>, dim3((unsigned)(l->rows * g.h)), dim3(DEC_THREADS), 0, st, pdl,
                  (T *)l->out[0], (const float *)l->out[1], *l->meta, g, l->rows, nchunks, skip);
}

template <typename T, int DH, int G>
static cudaError_t decode_run(const reel_launch *l, cudaStream_t st, const attn_geom &g, int nchunks, bool skip)
{
    constexpr int U = G >= 8 ? 2 : 4;
    int hsplit = (int)((g.group + G - 1) / G);
    dim3 grid((unsigned)(l->rows * nchunks * g.hkv * hsplit));
    float *ws = (float *)l->out[1];
    attn_decode_kernel<T, DH, G, U><<<grid, DEC_THREADS, 0, st>>>(
        (const T *)attn_q(l), (const T *)l->in[3], (const T *)l->in[4], (T *)l->out[0], ws, *l->meta, g, l->rows,
        nchunks, hsplit, skip);
    return cudaSuccess;
}

template <typename T, int DH>
static cudaError_t decode_dh(const reel_launch *l, cudaStream_t st, const attn_geom &g, int nchunks, bool skip)
{
    switch (head_group(g)) {
    case 1: return decode_run<T, DH, 1>(l, st, g, nchunks, skip);
    case 2: return decode_run<T, DH, 2>(l, st, g, nchunks, skip);
    case 4: return decode_run<T, DH, 4>(l, st, g, nchunks, skip);
    default: return decode_run<T, DH, 8>(l, st, g, nchunks, skip);
    }
}

template <typename T>
static cudaError_t decode_t(const reel_launch *l, cudaStream_t st, const attn_geom &g, int nchunks, bool skip)
{
    if (g.dh == 64)
        return decode_dh<T, 64>(l, st, g, nchunks, skip);
    if (g.dh == 128)
        return decode_dh<T, 128>(l, st, g, nchunks, skip);
    return decode_dh<T, 256>(l, st, g, nchunks, skip);
}

template <>
cudaError_t decode_t<float>(const reel_launch *l, cudaStream_t st, const attn_geom &g, int nchunks, bool skip)
{
    if (g.dh == 64)
        return decode_dh<float, 64>(l, st, g, nchunks, skip);
    return decode_dh<float, 128>(l, st, g, nchunks, skip);
}

cudaError_t attn_decode_launch(const reel_launch *l, cudaStream_t st, const attn_geom &g, int nchunks,
                               bool skip_runs, bool inblock, bool pdl, const attn_fw &fw, uint32_t *cnt,
                               bool combine_pdl, int64_t ps_grid)
{
    cudaError_t e = cudaSuccess;
    reel_dtype dt = l->in_shape[0].dtype;
    if (attn_decode_mma_supports(dt, g.dh))
        e = attn_decode_mma_launch(l, st, g, nchunks, skip_runs, inblock, pdl, fw, cnt, ps_grid);
    else if (fw.on)
        return cudaErrorInvalidValue; /* attention.cu asks the tensor-core decode only */
    else
        REEL_CU_DISPATCH(dt, e = decode_t<T>(l, st, g, nchunks, skip_runs));
    if (e == cudaSuccess && !inblock)
        REEL_CU_DISPATCH(dt, e = combine_run<T>(l, st, g, nchunks, skip_runs, combine_pdl && REEL_ATTN_COMBINE_PDL));
    return e;
}

} /* namespace reel_cu */
