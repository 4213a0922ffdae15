/* Internal (L2): the rules of the mixture-of-experts ops (ops/op.h,
 * docs/moe.md) that the host kernels (ops/host/moe.c) and the CUDA kernels
 * (ops/cuda/moe.cu) share, so that both choose the same experts and give
 * the same routing weights bit for bit. Plain C, compiled by the C compiler
 * and by nvcc.
 *
 * Every float operation a routing decision or weight rests on is written
 * out here, rounded once to nearest: adds, multiplies and divides that no
 * compiler may fuse (the device's _rn intrinsics, which nvcc never
 * contracts; separate operations of C11 on the host), and every FMA an
 * explicit fmaf. The exponential is reel_moe_exp below (range reduction and
 * a polynomial, about 1 ulp), never libm's expf or CUDA's expf/__expf,
 * which differ from each other.
 *
 * The routing of one token (reel_moe_route_row), E experts, K choices:
 *  - keys: experts and groups are ranked by a value, larger first, equal
 *    values to the lower id; -0 equals +0 and NaN ranks below every number
 *    (reel_moe_key), so the order is total and the same everywhere.
 *  - softmax: scores s_e = x_e / sum_e x_e with x_e = exp(l_e - max l), the
 *    sum in f32 in ascending e. The choice is made on the logits
 *    themselves (softmax is monotonic, so this is the exact softmax order;
 *    no rounding of exp can tie or reorder two different logits).
 *  - sigmoid: scores s_e = 1 / (1 + exp(-l_e)); choice values
 *    c_e = s_e + bias_e (f32; no bias: c_e = s_e), chosen on c_e.
 *  - groups (n_group > 1, E / n_group experts each): a group's score is
 *    the sum of its two largest values (c_e for sigmoid, s_e for softmax),
 *    the larger plus the smaller in f32; the topk_group best groups are kept
 *    (equal scores: the lower group id). Sigmoid: an expert outside the kept
 *    groups gets choice value exactly 0.0, as DeepSeek V3's masked_fill(...,
 *    0.0), so it still competes, and beats a kept expert whose biased
 *    choice is negative. Softmax: an expert outside the kept groups ranks
 *    below every kept one (its masked score 0.0 is at most any kept score;
 *    this only settles ties with kept scores that underflowed to 0).
 *  - the K experts are the first K of that order, best first.
 *  - weights: w_j = s_(ids[j]) (never the bias). With renormalize, each is
 *    divided by (w_0 + w_1 + ... + w_(K-1), summed in j order, + 1e-20f
 *    for sigmoid); then each is multiplied by routed_scaling. A NaN weight
 *    (every logit of the row -inf or NaN) is stored as 0x7fc00000.
 *
 * The sorted layout (moe_align): the pairs (t, j), index p = t*K + j, are
 * sorted stably by expert. A pair whose id lies outside [0, E) (never
 * from moe_route; ids may be any int32 tensor) belongs to no expert: such
 * pairs take the first sorted rows, 0 .. offsets[0]-1, in pair order, so
 * order and where stay permutations and offsets[E] = T*K still holds.
 * moe_gate_up and moe_down write zeros to those rows, so the pair adds
 * nothing (weight times 0) to its token; the host kernels report
 * REEL_E_LIMIT for them. With valid ids offsets[0] = 0. */
#ifndef REEL_OPS_MOE_H
#define REEL_OPS_MOE_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define REEL_MOE_HD __host__ __device__
#else
#define REEL_MOE_HD
#endif

/* Scratch floats reel_moe_route_row needs for E experts. */
#define REEL_MOE_SCRATCH(E) (E)

/* ---- float operations rounded once, never contracted ---- */

REEL_MOE_HD static inline float reel_moe_add(float a, float b)
{
#ifdef __CUDA_ARCH__
    return __fadd_rn(a, b);
#else
    return a + b;
#endif
}

REEL_MOE_HD static inline float reel_moe_sub(float a, float b)
{
#ifdef __CUDA_ARCH__
    return __fsub_rn(a, b);
#else
    return a - b;
#endif
}

REEL_MOE_HD static inline float reel_moe_mul(float a, float b)
{
#ifdef __CUDA_ARCH__
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}

REEL_MOE_HD static inline float reel_moe_div(float a, float b)
{
#ifdef __CUDA_ARCH__
    return __fdiv_rn(a, b);
#else
    return a / b;
#endif
}

REEL_MOE_HD static inline float reel_moe_fma(float a, float b, float c)
{
#ifdef __CUDA_ARCH__
    return __fmaf_rn(a, b, c);
#else
    return fmaf(a, b, c);
#endif
}

REEL_MOE_HD static inline float reel_moe_from_bits(uint32_t u)
{
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
#endif
}

REEL_MOE_HD static inline uint32_t reel_moe_bits(float f)
{
#ifdef __CUDA_ARCH__
    return __float_as_uint(f);
#else
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
#endif
}

/* exp(a) in f32, the same bits on every backend: a = i*ln2 + f with
 * i = rint(a * log2(e)) (|f| <= ln2/2, f exact to two FMAs of a split ln2),
 * exp(f) by a degree-6 polynomial (Horner, FMAs), then times 2^i in two
 * exact-or-once-rounded power-of-two steps (subnormal results round once).
 * Error about 1 ulp over the normal range (tests/ops/test_host_moe.c
 * measures it). exp(+inf) = +inf, exp(-inf) = 0, NaN stays NaN; 0 below
 * -104 and +inf above +104 (true results underflow/overflow there). */
REEL_MOE_HD static inline float reel_moe_exp(float a)
{
    if (!(fabsf(a) < 104.0f)) /* also NaN: the conversion below needs |a| bounded */
        return a != a ? a : a > 0.0f ? INFINITY : 0.0f;
    const float j = rintf(reel_moe_mul(a, 1.44269502f)); /* 0x1.715476p+0; exactly an integer, |j| <= 151 */
    float f = reel_moe_fma(j, -0x1.62e400p-1f, a);      /* ln2 high part: j * it is exact */
    f = reel_moe_fma(j, -0x1.7f7d1cp-20f, f);           /* ln2 low part */
    const int i = (int)j;
    float r = 0x1.694000p-10f;
    r = reel_moe_fma(r, f, 0x1.125edcp-7f);
    r = reel_moe_fma(r, f, 0x1.555b5ap-5f);
    r = reel_moe_fma(r, f, 0x1.555450p-3f);
    r = reel_moe_fma(r, f, 0x1.fffff6p-2f);
    r = reel_moe_fma(r, f, 1.0f);
    r = reel_moe_fma(r, f, 1.0f);
    /* 2^i = s * t: i > 0: 2^127 * 2^(i-127); i <= 0: 2^-123 * 2^(i+123). */
    const uint32_t ia = i > 0 ? 0u : 0x83000000u;
    const float s = reel_moe_from_bits(0x7f000000u + ia);
    const float t = reel_moe_from_bits(((uint32_t)i << 23) - ia);
    return reel_moe_mul(reel_moe_mul(r, s), t);
}

/* 1 / (1 + exp(-x)): 0 for x below about -88.7 (exp overflows), 1 above
 * about 17, NaN for NaN. */
REEL_MOE_HD static inline float reel_moe_sigmoid(float x)
{
    return reel_moe_div(1.0f, reel_moe_add(1.0f, reel_moe_exp(-x)));
}

/* silu(g) = g / (1 + exp(-g)), the activation of moe_gate_up (both
 * backends use it; the FFN ops are compared within tolerance, not bits). */
REEL_MOE_HD static inline float reel_moe_silu(float g)
{
    return reel_moe_div(g, reel_moe_add(1.0f, reel_moe_exp(-g)));
}

/* The rank of a value as an unsigned key: a larger number has a larger
 * key, -0 and +0 have one, NaN has 0 (below -inf's key, 0x007fffff). */
REEL_MOE_HD static inline uint32_t reel_moe_key(float x)
{
    if (x != x)
        return 0u;
    const uint32_t u = reel_moe_bits(x == 0.0f ? 0.0f : x);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/* Whether (ka, a) ranks strictly before (kb, b): larger key, then lower id. */
REEL_MOE_HD static inline bool reel_moe_before(uint64_t ka, int a, uint64_t kb, int b)
{
    return ka > kb || (ka == kb && a < b);
}

/* The sum of the two largest of v[0..n-1] (n >= 2), larger + smaller. */
REEL_MOE_HD static inline float reel_moe_top2_sum(const float *v, int n)
{
    int b0 = 0, b1 = -1;
    for (int i = 1; i < n; i++) {
        const uint32_t k = reel_moe_key(v[i]);
        if (reel_moe_before(k, i, reel_moe_key(v[b0]), b0)) {
            b1 = b0;
            b0 = i;
        } else if (b1 < 0 || reel_moe_before(k, i, reel_moe_key(v[b1]), b1)) {
            b1 = i;
        }
    }
    return reel_moe_add(v[b0], v[b1]);
}

/* Scores v[e] of one token: sigmoid, its choice values c_e (score + bias);
 * softmax, the scores s_e (sum in ascending e). */
REEL_MOE_HD static inline void reel_moe_scores(const float *logits, const float *bias, int E, bool sig, float *v)
{
    if (sig) {
        for (int e = 0; e < E; e++) {
            const float s = reel_moe_sigmoid(logits[e]);
            v[e] = bias ? reel_moe_add(s, bias[e]) : s;
        }
        return;
    }
    int m = 0;
    for (int e = 1; e < E; e++)
        if (reel_moe_key(logits[e]) > reel_moe_key(logits[m]))
            m = e;
    float sum = 0.0f;
    for (int e = 0; e < E; e++) {
        v[e] = reel_moe_exp(reel_moe_sub(logits[e], logits[m]));
        sum = reel_moe_add(sum, v[e]);
    }
    for (int e = 0; e < E; e++)
        v[e] = reel_moe_div(v[e], sum);
}

/* Whether group g's bit is set in kept[] (one bit a group, at most 256). */
REEL_MOE_HD static inline bool reel_moe_kept(const uint32_t *kept, int g) { return (kept[g >> 5] >> (g & 31)) & 1u; }

/* The topk_group best of n_group groups of gs values of v (by the sum of
 * their two largest; equal sums: lower group id) into kept[8], each the
 * best that ranks after the one before: O(topk_group * E), no memory. */
REEL_MOE_HD static inline void reel_moe_keep_groups(const float *v, int n_group, int gs, int topk_group,
                                                    uint32_t *kept)
{
    for (int i = 0; i < 8; i++)
        kept[i] = 0u;
    int prev = -1;
    uint32_t pk = 0;
    for (int r = 0; r < topk_group; r++) {
        int best = -1;
        uint32_t bk = 0;
        for (int g = 0; g < n_group; g++) {
            const uint32_t k = reel_moe_key(reel_moe_top2_sum(v + g * gs, gs));
            if (prev >= 0 && !reel_moe_before(pk, prev, k, g))
                continue; /* already kept */
            if (best < 0 || reel_moe_before(k, g, bk, best)) {
                best = g;
                bk = k;
            }
        }
        kept[best >> 5] |= 1u << (best & 31);
        prev = best;
        pk = bk;
    }
}

/* Routes one token (the rules at the top of this file). logits [E] (read
 * as f32), bias [E] or NULL (sigmoid only), scoring a reel_moe_scoring,
 * n_group <= 1 for no groups (else it divides E, groups of at least 2, and
 * 1 <= topk_group <= n_group, K <= topk_group * E / n_group: the schema
 * checks all of it), 1 <= K <= E <= REEL_MOE_MAX_EXPERTS. scratch holds
 * REEL_MOE_SCRATCH(E) floats. Writes ids[0..K-1] (best first) and
 * w[0..K-1]. O(E * (K + topk_group)) work, no other memory: meant for one
 * thread per token on the device (or as the reference a parallel kernel
 * must match bit for bit). */
/* A weight as both backends store it: NaN (a row whose logits are all -inf
 * or NaN) as one quiet NaN, 0x7fc00000, since the sign and payload of a NaN
 * an operation makes differ between x86 and the GPU. */
REEL_MOE_HD static inline float reel_moe_canon(float w)
{
    if (w == w)
        return w;
    union {
        uint32_t u;
        float f;
    } q = { 0x7fc00000u };
    return q.f;
}

REEL_MOE_HD static inline void reel_moe_route_row(const float *logits, const float *bias, int E, int K, int scoring,
                                                  int n_group, int topk_group, bool renorm, float scaling,
                                                  float *scratch, int32_t *ids, float *w)
{
    const bool sig = scoring != 0; /* REEL_MOE_SIGMOID */
    float *v = scratch;            /* sigmoid: choice values c_e; softmax: scores s_e */
    reel_moe_scores(logits, bias, E, sig, v);
    uint32_t kept[8] = { 0 };
    const bool grouped = n_group > 1;
    const int gs = grouped ? E / n_group : E;
    if (grouped) {
        reel_moe_keep_groups(v, n_group, gs, topk_group, kept);
        if (sig) /* DeepSeek V3's masked_fill(..., 0.0) */
            for (int e = 0; e < E; e++)
                if (!reel_moe_kept(kept, e / gs))
                    v[e] = 0.0f;
    }
    /* The K best, each the best that ranks after the one before. Key: bit
     * 32 set for an expert that competes in full (softmax: kept). */
    int prev = -1;
    uint64_t pk = 0;
    for (int j = 0; j < K; j++) {
        int best = -1;
        uint64_t bk = 0;
        for (int e = 0; e < E; e++) {
            const bool in = sig || !grouped || reel_moe_kept(kept, e / gs);
            const uint64_t k = (uint64_t)in << 32 | reel_moe_key(sig ? v[e] : logits[e]);
            if (prev >= 0 && !reel_moe_before(pk, prev, k, e))
                continue;
            if (best < 0 || reel_moe_before(k, e, bk, best)) {
                best = e;
                bk = k;
            }
        }
        ids[j] = best;
        prev = best;
        pk = bk;
    }
    float sum = 0.0f;
    for (int j = 0; j < K; j++) {
        w[j] = sig ? reel_moe_sigmoid(logits[ids[j]]) : v[ids[j]];
        sum = reel_moe_add(sum, w[j]);
    }
    if (renorm && sig)
        sum = reel_moe_add(sum, 1e-20f);
    for (int j = 0; j < K; j++) {
        if (renorm)
            w[j] = reel_moe_div(w[j], sum);
        w[j] = reel_moe_canon(reel_moe_mul(w[j], scaling));
    }
}

#endif
