/* CUDA kernel of the sample op (reel_sample, docs/sampling.md): the host
 * reference's token (ops/host/sample.c), bit for bit, by the rules of
 * ops/sample.h, with no sort and no memory beyond the row's own shared
 * memory.
 *
 * One block of 512 threads a row, or a thread-block cluster of 2..8 where
 * the rows are few and long (reel_sample_split; the blocks' results merge
 * through distributed shared memory). Each block takes a contiguous slice
 * of the row's 16-byte packs, each warp a contiguous segment of its block's
 * slice, so (block, warp, pass over the segment, lane, element) is token
 * order. The row is read in passes (from L1 or L2 after the first):
 *   1. bad values (NaN, +inf), the maximum and its lowest index (greedy),
 *      the count of unmasked tokens;
 *   2. min_p as a key: the smallest logit key whose weight reaches min_p,
 *      found by a warp's 32-way search over the key space (the weight is
 *      non-decreasing in the logit, ops/sample.h), no pass over the row;
 *   3. top_k: a radix select over the logits' order-preserving keys (16 bits
 *      for f16 and bf16, 32 for f32), 8 bits a pass, histograms of counts;
 *      the k-th key's ties kept lowest id first by a search in token order;
 *   4. top_p: the same over the tokens top_k and min_p kept, histograms of
 *      mass (40-bit fixed point), the threshold ceil(top_p * total);
 *   5. the draw: the kept mass per warp, then the one warp holding the
 *      target floor(u * total / 2^64) walks its segment in token order.
 * Histograms are shared-memory atomics of integers (lanes of a warp with the
 * same digit merged first, __match_any_sync), so their order never changes
 * a bit; every decision is made from integers that all blocks of a row
 * compute alike. Honours programmatic dependent launch. */
#include <cooperative_groups.h>

#include <type_traits>

#include "ops/cuda/common.cuh"
#include "ops/cuda/impls.h"
#include "ops/sample.h"

namespace cg = cooperative_groups;

/* The most blocks a row; -DREEL_SAMPLE_CLUSTER=1 builds the one-block
 * kernel only (for A/B runs of bench_sample). */
#ifndef REEL_SAMPLE_CLUSTER
#define REEL_SAMPLE_CLUSTER 8
#endif

namespace reel_cu {
namespace {

constexpr int SP_THREADS = 512;
constexpr int SP_WARPS = SP_THREADS / 32;
constexpr int SP_UNROLL = 4;
constexpr int SP_CHUNK = 32 * SP_UNROLL; /* units a warp reads at once */
constexpr int SP_GROUPS = 32;            /* chunk sums a warp keeps in a search */
constexpr unsigned SP_FULL = 0xffffffffu;
constexpr int32_t SP_ALL_TIES = 0x7fffffff; /* a cut that keeps every token at its key */

/* The storage type's bits as an order-preserving key: f32 32 bits, f16 and
 * bf16 16. */
template <typename T> struct sp_bits;
template <> struct sp_bits<float> {
    static constexpr int BITS = 32;
    static constexpr uint32_t INF = 0x7f800000u;
    __device__ static uint32_t of(float v) { return __float_as_uint(v); }
    __device__ static float value(uint32_t b) { return __uint_as_float(b); }
};
template <> struct sp_bits<__half> {
    static constexpr int BITS = 16;
    static constexpr uint32_t INF = 0x7c00u;
    __device__ static uint32_t of(__half v) { return __half_as_ushort(v); }
    __device__ static float value(uint32_t b) { return __half2float(__ushort_as_half((unsigned short)b)); }
};
template <> struct sp_bits<__nv_bfloat16> {
    static constexpr int BITS = 16;
    static constexpr uint32_t INF = 0x7f80u;
    __device__ static uint32_t of(__nv_bfloat16 v) { return __bfloat16_as_ushort(v); }
    __device__ static float value(uint32_t b) { return __bfloat162float(__ushort_as_bfloat16((unsigned short)b)); }
};

template <typename T> struct sp_key {
    static constexpr int BITS = sp_bits<T>::BITS;
    static constexpr uint32_t MASK = BITS == 32 ? 0xffffffffu : (1u << BITS) - 1u;
    static constexpr uint32_t SIGN = 1u << (BITS - 1);
    static constexpr uint32_t INF = sp_bits<T>::INF;
    static constexpr uint32_t NEG_INF_KEY = ~(SIGN | INF) & MASK; /* every unmasked token's key is above */
    /* Larger value, larger key; -0 and +0 one key. */
    __device__ static uint32_t of_bits(uint32_t b)
    {
        if ((b & ~SIGN & MASK) == 0)
            b = 0;
        return (b & SIGN) ? (~b & MASK) : (b | SIGN);
    }
    __device__ static uint32_t of(T v) { return of_bits(sp_bits<T>::of(v)); }
    __device__ static float value(uint32_t k)
    {
        return sp_bits<T>::value((k & SIGN) ? (k & ~SIGN) : (~k & MASK));
    }
};

/* A unit of the row: a 16-byte pack, or one element where the row cannot be
 * read in packs. */
template <typename T> struct sp_one {
    static constexpr int n = 1;
    T v[1];
};
template <typename T, bool VEC> using sp_unit = typename std::conditional<VEC, pack<T>, sp_one<T>>::type;

struct sp_shared {
    uint32_t hc[2][256];           /* this block's histograms of counts and masses, double-buffered */
    unsigned long long hm[2][256]; /* so the next pass never writes what a slower block still reads */
    uint32_t mc[256];              /* the row's, merged over the cluster */
    unsigned long long mm[256];
    unsigned long long box[2][3];  /* values a block publishes to the cluster, by round */
    unsigned long long wpart[SP_WARPS];
    unsigned long long cpart[SP_WARPS][SP_GROUPS]; /* a search's sums of each warp's chunk groups */
    unsigned long long sel[2];     /* the digit chosen and the measure above it */
    int32_t res;                   /* a search's result, written by the block that found it */
};

/* The row's blocks: one, or a cluster (rank, size). */
struct sp_row {
    int nblk, rank;
    int round;  /* cluster publications so far (box parity) */
    int hround; /* histogram passes so far (hc, hm parity) */
    __device__ void sync() const
    {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
        if (nblk > 1) {
            cg::this_cluster().sync();
            return;
        }
#endif
        __syncthreads();
    }
    template <typename P> __device__ P *at(P *p, int r) const
    {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
        if (nblk > 1)
            return cg::this_cluster().map_shared_rank(p, (unsigned)r);
#endif
        return p;
    }
};

template <bool MAX> __device__ __forceinline__ unsigned long long warp_u64(unsigned long long v)
{
    for (int o = 16; o > 0; o >>= 1) {
        const unsigned long long w = __shfl_xor_sync(SP_FULL, v, o);
        v = MAX ? (w > v ? w : v) : v + w;
    }
    return v;
}

/* Sum (or max) over the block, in every thread. */
template <bool MAX> __device__ unsigned long long block_u64(unsigned long long v, sp_shared &s)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = warp_u64<MAX>(v);
    __syncthreads(); /* wpart may still be read by a previous call */
    if (lane == 0)
        s.wpart[warp] = v;
    __syncthreads();
    return warp_u64<MAX>(lane < SP_WARPS ? s.wpart[lane] : 0ull);
}

/* Combines up to 3 block values over the row's blocks: op bit i set = max
 * of value i, else its sum; with `before`, sums over the lower ranks only
 * (in pre[i]). One cluster barrier. */
__device__ void row_u64(unsigned long long *v, int nv, unsigned maxbits, sp_shared &s, sp_row &r,
                        unsigned long long *pre = nullptr)
{
    if (r.nblk == 1) {
        if (pre)
            for (int i = 0; i < nv; i++)
                pre[i] = 0;
        return;
    }
    unsigned long long *box = s.box[r.round & 1];
    if (threadIdx.x == 0)
        for (int i = 0; i < nv; i++)
            box[i] = v[i];
    r.sync();
    unsigned long long acc[3] = { 0, 0, 0 }, below[3] = { 0, 0, 0 };
    for (int b = 0; b < r.nblk; b++) {
        const unsigned long long *o = r.at(box, b);
        for (int i = 0; i < nv; i++) {
            const unsigned long long x = o[i];
            if (b < r.rank)
                below[i] += x;
            acc[i] = (maxbits >> i & 1u) ? (x > acc[i] ? x : acc[i]) : acc[i] + x;
        }
    }
    for (int i = 0; i < nv; i++) {
        v[i] = acc[i];
        if (pre)
            pre[i] = below[i];
    }
    r.round++;
}

/* The chunk of units [c0, c0 + SP_CHUNK) of a warp's segment ending at s1:
 * lane l gets units c0 + j x 32 + l (zeros past s1), every load issued
 * before any is used. */
template <typename T, bool VEC>
__device__ __forceinline__ void sp_load(const sp_unit<T, VEC> *ur, int32_t c0, int32_t s1,
                                        sp_unit<T, VEC> (&x)[SP_UNROLL])
{
    const int32_t lane = (int32_t)(threadIdx.x & 31);
#pragma unroll
    for (int j = 0; j < SP_UNROLL; j++) {
        const int32_t u = c0 + j * 32 + lane;
        if (u < s1) {
            x[j] = ur[u];
        } else {
#pragma unroll
            for (int e = 0; e < sp_unit<T, VEC>::n; e++)
                x[j].v[e] = from_f<T>(0.0f);
        }
    }
}

/* The warp's segment [s0, s1) of units, lanes striding, several loads in
 * flight: f(id, value, ok) for each element, every lane of the warp
 * calling together (ok false past the segment's end). Visits in no
 * particular order: for order-free reductions only. */
template <typename T, bool VEC, typename F>
__device__ __forceinline__ void visit(const T *row, int32_t s0, int32_t s1, F &&f)
{
    using U = sp_unit<T, VEC>;
    const U *ur = reinterpret_cast<const U *>(row);
    const int32_t lane = (int32_t)(threadIdx.x & 31);
    for (int32_t base = s0; base < s1; base += SP_CHUNK) {
        U x[SP_UNROLL];
        sp_load<T, VEC>(ur, base, s1, x);
#pragma unroll
        for (int j = 0; j < SP_UNROLL; j++) {
            const int32_t u = base + j * 32 + lane;
#pragma unroll
            for (int e = 0; e < U::n; e++)
                f(u * U::n + e, x[j].v[e], u < s1);
        }
    }
}

/* Adds (1, m) to bin `dig` of the histograms for each lane that takes its
 * element; lanes of one digit are merged first (one atomic per digit a
 * warp, none contended inside the warp). Every lane of the warp calls. m <
 * 2^41, so its halves summed over 32 lanes fit 32 bits. */
template <bool MASS>
__device__ __forceinline__ void hist_add(bool take, uint32_t dig, unsigned long long m, uint32_t *hc,
                                         unsigned long long *hm)
{
    const unsigned vm = __ballot_sync(SP_FULL, take);
    if (!take)
        return;
    const unsigned peers = __match_any_sync(vm, dig);
    const bool leader = (int)(threadIdx.x & 31) == __ffs(peers) - 1;
    if (MASS) {
        const unsigned lo = __reduce_add_sync(peers, (unsigned)(m & 0xfffffu));
        const unsigned hi = __reduce_add_sync(peers, (unsigned)(m >> 20));
        if (leader)
            atomicAdd(&hm[dig], ((unsigned long long)hi << 20) + lo);
    }
    if (leader)
        atomicAdd(&hc[dig], (unsigned)__popc(peers));
}

/* The row's merged histogram (s.mc, s.mm) from each block's buffer hb. */
template <bool MASS> __device__ void hist_merge(int hb, sp_shared &s, sp_row &r)
{
    r.sync(); /* every block's histogram is complete */
    for (int d = threadIdx.x; d < 256; d += SP_THREADS) {
        uint32_t c = 0;
        unsigned long long m = 0;
        for (int b = 0; b < r.nblk; b++) {
            c += *r.at(&s.hc[hb][d], b);
            if (MASS)
                m += *r.at(&s.hm[hb][d], b);
        }
        s.mc[d] = c;
        s.mm[d] = m;
    }
    __syncthreads();
}

/* Warp 0: the digit d, from the top, where the measure of the bins above d
 * stays under need and that of d reaches it (need >= 1, at most the sum of
 * the bins); s.sel = {d, the measure above d}. */
template <bool MASS> __device__ void select_digit(unsigned long long need, sp_shared &s)
{
    if (threadIdx.x < 32) {
        const int lane = threadIdx.x;
        unsigned long long mine = 0;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const int d = 255 - lane * 8 - i;
            mine += MASS ? s.mm[d] : (unsigned long long)s.mc[d];
        }
        unsigned long long incl = mine;
        for (int o = 1; o < 32; o <<= 1) {
            const unsigned long long y = __shfl_up_sync(SP_FULL, incl, o);
            if (lane >= o)
                incl += y;
        }
        const unsigned hit = __ballot_sync(SP_FULL, incl >= need);
        if (lane == __ffs(hit) - 1) {
            unsigned long long cum = incl - mine;
            for (int i = 0; i < 8; i++) {
                const int d = 255 - lane * 8 - i;
                const unsigned long long h = MASS ? s.mm[d] : (unsigned long long)s.mc[d];
                if (cum + h >= need) {
                    s.sel[0] = (unsigned long long)d;
                    s.sel[1] = cum;
                    break;
                }
                cum += h;
            }
        }
    }
    __syncthreads();
}

/* A block's view of its row: its slice of units and its warp's segment. */
template <typename T, bool VEC> struct sp_view {
    const T *x;
    int32_t s0, s1; /* this warp's units */
};

/* The first token, in token order, at which the running sum of val(id, v)
 * (an integer, 0 for tokens outside what is summed) passes
 * target_of(total): every block gets its id. One pass sums each warp's
 * chunks of SP_CHUNK units (chunks grouped so that a warp keeps at most
 * SP_GROUPS sums); the block holding the target, its warp, that warp's
 * group and chunk follow from the sums, and the warp reads that chunk
 * again: a unit at a time in lane order, then the lane's elements. */
template <typename T, bool VEC, typename Val, typename Tgt>
__device__ int32_t find_first(const sp_view<T, VEC> &w, Val val, Tgt target_of, sp_shared &s, sp_row &r)
{
    using U = sp_unit<T, VEC>;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const U *ur = reinterpret_cast<const U *>(w.x);
    const int32_t nchunks = (w.s1 - w.s0 + SP_CHUNK - 1) / SP_CHUNK;
    const int32_t g = (nchunks + SP_GROUPS - 1) / SP_GROUPS; /* chunks a group */
    __syncthreads(); /* wpart and cpart may still be read by a previous call */
    s.cpart[warp][lane] = 0;
    __syncwarp();
    unsigned long long wtot = 0;
    for (int32_t ci = 0; ci < nchunks; ci++) {
        U x[SP_UNROLL];
        const int32_t c0 = w.s0 + ci * SP_CHUNK;
        sp_load<T, VEC>(ur, c0, w.s1, x);
        unsigned long long m = 0;
#pragma unroll
        for (int j = 0; j < SP_UNROLL; j++) {
            const int32_t u = c0 + j * 32 + lane;
            if (u < w.s1) {
#pragma unroll
                for (int e = 0; e < U::n; e++)
                    m += val(u * U::n + e, x[j].v[e]);
            }
        }
        m = warp_u64<false>(m);
        if (lane == 0)
            s.cpart[warp][ci / g] += m;
        wtot += m;
    }
    if (lane == 0)
        s.wpart[warp] = wtot;
    __syncthreads();
    unsigned long long btot = 0;
    for (int i = 0; i < SP_WARPS; i++)
        btot += s.wpart[i];
    unsigned long long tot[1] = { btot }, pre[1];
    row_u64(tot, 1, 0u, s, r, pre);
    const unsigned long long target = target_of(tot[0]);
    if (target >= pre[0] && target - pre[0] < btot) { /* this block holds it */
        unsigned long long base = pre[0];
        int ow = 0;
        while (base + s.wpart[ow] <= target) /* the warp holding it */
            base += s.wpart[ow++];
        if (warp == ow) {
            int32_t gi = 0;
            while (base + s.cpart[warp][gi] <= target) /* its group */
                base += s.cpart[warp][gi++];
            bool found = false;
            for (int32_t ci = gi * g; ci < nchunks && ci < (gi + 1) * g && !found; ci++) {
                U x[SP_UNROLL];
                const int32_t c0 = w.s0 + ci * SP_CHUNK;
                sp_load<T, VEC>(ur, c0, w.s1, x);
#pragma unroll
                for (int j = 0; j < SP_UNROLL; j++) {
                    const int32_t u = c0 + j * 32 + lane;
                    unsigned long long mine = 0;
                    if (u < w.s1) {
#pragma unroll
                        for (int e = 0; e < U::n; e++)
                            mine += val(u * U::n + e, x[j].v[e]);
                    }
                    unsigned long long incl = mine;
                    for (int o = 1; o < 32; o <<= 1) {
                        const unsigned long long y = __shfl_up_sync(SP_FULL, incl, o);
                        if (lane >= o)
                            incl += y;
                    }
                    const unsigned long long all = __shfl_sync(SP_FULL, incl, 31);
                    if (!found && base + all > target) { /* this unit's lane holds it */
                        if (base + incl > target && base + incl - mine <= target) {
                            unsigned long long run = base + incl - mine;
                            int32_t id = u * U::n;
#pragma unroll
                            for (int e = 0; e < U::n; e++) {
                                run += val(u * U::n + e, x[j].v[e]);
                                if (run > target) {
                                    id = u * U::n + e;
                                    break;
                                }
                            }
                            for (int b = 0; b < r.nblk; b++)
                                *r.at(&s.res, b) = id;
                        }
                        found = true;
                    } else if (!found) {
                        base += all;
                    }
                }
            }
        }
    }
    r.sync(); /* the result is in every block */
    return s.res;
}

/* A cut of the order (logit descending, token id ascending): keeps a token
 * when its key > t, or key == t and id <= c. */
struct sp_cut {
    bool on;
    uint32_t t;
    int32_t c;
    __device__ bool keeps(uint32_t key, int32_t id) const { return !on || key > t || (key == t && id <= c); }
};

/* The cut that keeps the first tokens of the order, among those `in`
 * accepts, whose count (or mass) reaches need_of(total): a radix select of
 * the key 8 bits a pass, then the tokens at the key in token order.
 * need_of(total) == 0: no cut (everything `in` accepts is kept). */
template <typename T, bool VEC, bool MASS, typename In, typename Q, typename Need>
__device__ sp_cut select_cut(const sp_view<T, VEC> &w, In in, Q q, Need need_of, sp_shared &s, sp_row &r)
{
    constexpr int BITS = sp_key<T>::BITS;
    uint32_t prefix = 0, pmask = 0, eqn = 0;
    unsigned long long rem = 0;
    for (int shift = BITS - 8; shift >= 0; shift -= 8) {
        const int hb = r.hround++ & 1;
        for (int d = threadIdx.x; d < 256; d += SP_THREADS) {
            s.hc[hb][d] = 0;
            s.hm[hb][d] = 0;
        }
        __syncthreads();
        visit<T, VEC>(w.x, w.s0, w.s1, [&](int32_t id, T v, bool ok) {
            const uint32_t key = sp_key<T>::of(v);
            const bool take = ok && (key & pmask) == prefix && in(key, id);
            hist_add<MASS>(take, (key >> shift) & 255u, MASS && take ? q(v) : 0ull, s.hc[hb], s.hm[hb]);
        });
        __syncthreads();
        hist_merge<MASS>(hb, s, r);
        if (shift == BITS - 8) {
            const int d = threadIdx.x;
            const unsigned long long total =
                block_u64<false>(d < 256 ? (MASS ? s.mm[d] : (unsigned long long)s.mc[d]) : 0ull, s);
            rem = need_of(total);
            if (rem == 0)
                return sp_cut{ false, 0, 0 };
        }
        select_digit<MASS>(rem, s);
        const uint32_t d = (uint32_t)s.sel[0];
        rem -= s.sel[1];
        eqn = s.mc[d];
        prefix |= d << shift;
        pmask |= 255u << shift;
    }
    /* rem (>= 1) of what the tokens at key `prefix` hold is needed. */
    if (MASS ? eqn == 1 : eqn == rem)
        return sp_cut{ true, prefix, SP_ALL_TIES };
    const uint32_t t = prefix;
    const int32_t c = find_first<T, VEC>(
        w, [&](int32_t id, T v) -> unsigned long long {
            const uint32_t key = sp_key<T>::of(v);
            return key == t && in(key, id) ? (MASS ? q(v) : 1ull) : 0ull;
        },
        [&](unsigned long long) { return rem - 1; }, s, r);
    return sp_cut{ true, t, c };
}

/* min_p as a key: the smallest key in (the key of -inf, kmax] whose
 * weight reaches min_p (kmax's weighs 1, and the weight never falls as the
 * key grows), by 32-way search, each warp alone. */
template <typename T> __device__ uint32_t min_p_key(uint32_t kmax, float xmax, float scale, float min_p)
{
    const int lane = threadIdx.x & 31;
    unsigned long long lo = sp_key<T>::NEG_INF_KEY + 1ull, hi = kmax;
    while (lo < hi) {
        const unsigned long long step = (hi - lo + 31) / 32;
        unsigned long long p = lo + (unsigned long long)lane * step;
        if (p > hi)
            p = hi;
        const bool ok = reel_sample_weight(sp_key<T>::value((uint32_t)p), xmax, scale) >= min_p;
        const unsigned m = __ballot_sync(SP_FULL, ok);
        if (m == 0) {
            lo = lo + 31 * step + 1;
        } else {
            const int j = __ffs(m) - 1;
            const unsigned long long pj = lo + (unsigned long long)j * step;
            hi = pj < hi ? pj : hi; /* the first probe that holds (probes past hi were hi) */
            if (j > 0)
                lo = lo + (unsigned long long)(j - 1) * step + 1;
        }
    }
    return (uint32_t)lo;
}

template <typename T, bool VEC>
__global__ void __launch_bounds__(SP_THREADS)
    sample_kernel(const T *x, const float *params, const int32_t *rng, int32_t *out, int32_t n, int32_t nblk, bool pdl)
{
    using U = sp_unit<T, VEC>;
    using K = sp_key<T>;
    __shared__ sp_shared s;
    pdl_start(pdl);
    sp_row r{ nblk, (int)(blockIdx.x % (unsigned)nblk), 0, 0 };
    const int64_t row = blockIdx.x / (unsigned)nblk;
    const int warp = threadIdx.x >> 5;
    const int32_t nu = n / U::n, per = (nu + nblk - 1) / nblk;
    const int32_t b0 = min(nu, r.rank * per), b1 = min(nu, b0 + per);
    const int32_t wper = (b1 - b0 + SP_WARPS - 1) / SP_WARPS;
    const int32_t s0 = min(b1, b0 + warp * wper);
    const sp_view<T, VEC> w{ x + row * n, s0, min(b1, s0 + wper) };
    reel_sample_cfg cfg;
    const bool good = reel_sample_params(params + row * REEL_SAMPLE_PARAMS, &cfg);

    /* 1: bad values, the maximum (key, then the lowest id: ~id) and the
     * unmasked tokens. */
    unsigned long long v[3] = { 0, 0, 0 };
    visit<T, VEC>(w.x, w.s0, w.s1, [&](int32_t id, T e, bool ok) {
        if (!ok)
            return;
        const uint32_t b = sp_bits<T>::of(e);
        if ((b & ~K::SIGN & K::MASK) > K::INF || b == K::INF)
            v[0] = 1; /* NaN or +inf */
        const uint32_t key = K::of_bits(b);
        if (key > K::NEG_INF_KEY) {
            v[2]++;
            const unsigned long long c = (unsigned long long)key << 32 | (uint32_t)~(uint32_t)id;
            v[1] = c > v[1] ? c : v[1];
        }
    });
    v[0] = block_u64<true>(v[0], s);
    v[1] = block_u64<true>(v[1], s);
    v[2] = block_u64<false>(v[2], s);
    row_u64(v, 3, 3u, s, r);
    int32_t result = REEL_SAMPLE_BAD_ROW;
    if (good && v[0] == 0 && v[2] > 0) {
        const uint32_t kmax = (uint32_t)(v[1] >> 32);
        if (cfg.temperature == 0.0f) {
            result = (int32_t)~(uint32_t)v[1];
        } else {
            const float xmax = K::value(kmax), scale = reel_sample_scale(cfg.temperature);
            const uint32_t kmin = cfg.min_p > 0.0f ? min_p_key<T>(kmax, xmax, scale, cfg.min_p) : K::NEG_INF_KEY + 1;
            const auto q = [&](T e) -> unsigned long long {
                return reel_sample_mass(reel_sample_weight(to_f(e), xmax, scale));
            };
            sp_cut kc{ false, 0, 0 }, pc{ false, 0, 0 };
            const unsigned long long k = (unsigned long long)cfg.top_k;
            if (k > 0 && !(cfg.min_p == 0.0f && v[2] <= k))
                kc = select_cut<T, VEC, false>(
                    w, [&](uint32_t key, int32_t) { return key >= kmin; }, q,
                    [&](unsigned long long total) { return total > k ? k : 0ull; }, s, r);
            if (cfg.top_p < 1.0f) {
                const float top_p = cfg.top_p;
                pc = select_cut<T, VEC, true>(
                    w, [&](uint32_t key, int32_t id) { return key >= kmin && kc.keeps(key, id); }, q,
                    [&](unsigned long long total) { return reel_sample_need(top_p, total); }, s, r);
            }
            const unsigned long long u = reel_sample_uniform(rng + row * REEL_SAMPLE_RNG);
            result = find_first<T, VEC>(
                w,
                [&](int32_t id, T e) -> unsigned long long {
                    const uint32_t key = K::of(e);
                    return key >= kmin && kc.keeps(key, id) && pc.keeps(key, id) ? q(e) : 0ull;
                },
                [&](unsigned long long total) { return reel_sample_mulhi(u, total); }, s, r);
        }
    }
    if (r.rank == 0 && threadIdx.x == 0)
        out[row] = result;
    if (nblk > 1)
        r.sync(); /* no block leaves while another may read its shared memory */
}

/* The 16-byte path: an aligned row of whole packs. */
static bool sample_vec_ok(const reel_launch *l, int64_t n)
{
    const int64_t vn = 16 / (int64_t)reel_dtype_size(l->in_shape[0].dtype);
    return aligned16(l->in[0]) && n % vn == 0;
}

static int64_t sample_rows(const reel_launch *l, int64_t n)
{
    const reel_shape *xs = &l->in_shape[0];
    return n > 0 ? lead(xs, l->rows) * row_numel(xs) / n : 0;
}

/* Blocks a row: reel_sample_split on this device (clusters on the 16-byte
 * path of a device that has them). The launch and the PDL rule both ask. */
static int sample_row_blocks(const reel_launch *l, int64_t n, int64_t nrows, const reel_device_caps *caps)
{
    if (!sample_vec_ok(l, n))
        return 1;
    const int64_t units = n / (16 / (int64_t)reel_dtype_size(l->in_shape[0].dtype));
    return reel_sample_split(nrows, units, caps->sm_count, caps->max_active_clusters > 0 && caps->cc_major >= 9,
                             REEL_SAMPLE_CLUSTER);
}

template <typename T, bool VEC>
static cudaError_t sample_run(const reel_launch *l, int64_t n, int64_t nrows, int c, cudaStream_t st)
{
    const T *x = (const T *)l->in[0];
    const float *prm = (const float *)l->in[1];
    const int32_t *rng = (const int32_t *)l->in[2];
    int32_t *out = (int32_t *)l->out[0];
    const unsigned grid = (unsigned)(nrows * c);
    if (c == 1)
        return launch(sample_kernel<T, VEC>, grid, SP_THREADS, 0, st, l->pdl, x, prm, rng, out, (int32_t)n, 1);
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute attr[2];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = (unsigned)c;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    attr[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[1].val.programmaticStreamSerializationAllowed = 1;
    cfg.gridDim = dim3(grid, 1, 1);
    cfg.blockDim = dim3(SP_THREADS, 1, 1);
    cfg.stream = st;
    cfg.attrs = attr;
    cfg.numAttrs = l->pdl ? 2u : 1u;
    return cudaLaunchKernelEx(&cfg, sample_kernel<T, VEC>, x, prm, rng, out, (int32_t)n, (int32_t)c, l->pdl);
}

static reel_status sample_launch(reel_backend *be, const reel_launch *l)
{
    const int64_t n = last_dim(&l->in_shape[0]), nrows = sample_rows(l, n);
    if (nrows <= 0)
        return REEL_OK;
    const int c = sample_row_blocks(l, n, nrows, &be->caps);
    cudaStream_t st = reel_cuda_stream_handle(l->stream);
    cudaError_t e = cudaSuccess;
    if (sample_vec_ok(l, n)) {
        REEL_CU_DISPATCH(l->in_shape[0].dtype, e = (sample_run<T, true>(l, n, nrows, c, st)));
    } else {
        REEL_CU_DISPATCH(l->in_shape[0].dtype, e = (sample_run<T, false>(l, n, nrows, 1, st)));
    }
    return REEL_CU_LAUNCHED_E(be, "cuda.sample", e);
}

static int64_t sample_grid(const reel_launch *l, const reel_device_caps *caps)
{
    const int64_t n = last_dim(&l->in_shape[0]), nrows = sample_rows(l, n);
    return nrows * sample_row_blocks(l, n, nrows, caps);
}

/* A grid of rows x blocks under 2^31. */
static bool use_sample(REEL_CU_USE_ARGS)
{
    const reel_dtype dt = in[0].dtype;
    return nin >= 3 && (dt == REEL_F32 || dt == REEL_F16 || dt == REEL_BF16) && in[1].dtype == REEL_F32 &&
           in[1].dims[1] == REEL_SAMPLE_PARAMS && in[2].dtype == REEL_I32 && in[2].dims[1] == REEL_SAMPLE_RNG &&
           out[0].dtype == REEL_I32 && in[0].dims[1] >= 1 && in[0].dims[1] <= REEL_SAMPLE_MAX_VOCAB &&
           in[0].dims[0] <= 0x7fffffffLL / REEL_SAMPLE_CLUSTER;
}

/* reel_cu_sample_weights' kernel. */
__global__ void weights_kernel(const float *x, int64_t n, float xmax, float scale, float *w,
                               unsigned long long *q)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        w[i] = reel_sample_weight(x[i], xmax, scale);
        q[i] = reel_sample_mass(w[i]);
    }
}

} /* namespace */
} /* namespace reel_cu */

extern "C" reel_status reel_cu_sample_weights(reel_backend *be, const float *x, int64_t n, float xmax, float scale,
                                              float *w, uint64_t *q)
{
    float *dx = NULL, *dw = NULL;
    unsigned long long *dq = NULL;
    const size_t fb = (size_t)n * sizeof(float), qb = (size_t)n * sizeof(uint64_t);
    reel_status st = REEL_CUDA_CHECK(be->err, cudaMalloc((void **)&dx, fb));
    if (st == REEL_OK)
        st = REEL_CUDA_CHECK(be->err, cudaMalloc((void **)&dw, fb));
    if (st == REEL_OK)
        st = REEL_CUDA_CHECK(be->err, cudaMalloc((void **)&dq, qb));
    if (st == REEL_OK)
        st = REEL_CUDA_CHECK(be->err, cudaMemcpy(dx, x, fb, cudaMemcpyHostToDevice));
    if (st == REEL_OK) {
        reel_cu::weights_kernel<<<reel_cu::grid_for(n, 256), 256>>>(dx, n, xmax, scale, dw, dq);
        st = REEL_CU_LAUNCHED(be, "cuda.sample weights");
    }
    if (st == REEL_OK)
        st = REEL_CUDA_CHECK(be->err, cudaMemcpy(w, dw, fb, cudaMemcpyDeviceToHost));
    if (st == REEL_OK)
        st = REEL_CUDA_CHECK(be->err, cudaMemcpy(q, dq, qb, cudaMemcpyDeviceToHost));
    cudaFree(dx);
    cudaFree(dw);
    cudaFree(dq);
    return st;
}

static reel_op_impl with_sample_grid(reel_op_impl i)
{
    i.grid_blocks = reel_cu::sample_grid;
    return i;
}
extern "C" const reel_op_impl reel_cu_sample_impl = with_sample_grid(
    reel_cu::make_impl("cuda.sample", REEL_OP_SAMPLE, 10, true, false, reel_cu::use_sample, reel_cu::sample_launch));
