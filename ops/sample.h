/* Internal (L2): the rules of the sample op (reel_sample, docs/sampling.md)
 * that the host reference (ops/host/sample.c) and the CUDA kernel
 * (ops/cuda/sample.cu) share, so that both give the same token bit for bit.
 * Plain C, compiled by the C compiler and by nvcc.
 *
 * Every quantity a decision rests on is either computed here by a function
 * whose every float operation is written out (no operation either compiler
 * could fuse into an FMA, every FMA explicit, IEEE rounding to nearest), or
 * is an integer:
 *  - the weight of a token, w = 2^((x - x_max) * log2(e) / temperature), a
 *    float in (0, 1] (exactly 1 at the maximum, 0 below 2^-64), is a
 *    polynomial evaluated the same way on both, and non-decreasing in x (so
 *    min_p keeps an upper set of the logits: tests/ops/test_host_sample.c
 *    checks it over every bf16 and f16 value);
 *  - its mass q = floor(w * 2^40) is an integer, and every sum of masses is
 *    an integer sum, exact in any order: a block's reduction tree, atomics
 *    or a host loop give the same total;
 *  - top_p's threshold ceil(top_p * total) and the draw's target
 *    floor(u * total / 2^64) are exact integer products.
 * So a row's kept set and token depend on its logits, parameters, seed and
 * counter only, never on the batch, the bucket, the kernel's split or the
 * order of a reduction. */
#ifndef REEL_OPS_SAMPLE_H
#define REEL_OPS_SAMPLE_H

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "ops/philox.h"

#ifdef __CUDACC__
#define REEL_SAMPLE_FN static __host__ __device__ __forceinline__
#else
#define REEL_SAMPLE_FN static inline
#endif

/* Fractional bits of a token's mass; V * 2^QBITS < 2^63 for every
 * vocabulary the schema allows (REEL_SAMPLE_MAX_VOCAB = 2^23). */
#define REEL_SAMPLE_QBITS 40

/* Float operations that are rounded once each and never contracted: the
 * device's _rn intrinsics (which nvcc never fuses); on the host, separate
 * statements of C11 (gcc does not contract in ISO C modes, clang only inside
 * one expression, and x86-64 has no FMA without -mfma). */
REEL_SAMPLE_FN float reel_sf_sub(float a, float b)
{
#ifdef __CUDA_ARCH__
    return __fsub_rn(a, b);
#else
    return a - b;
#endif
}

REEL_SAMPLE_FN float reel_sf_mul(float a, float b)
{
#ifdef __CUDA_ARCH__
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}

REEL_SAMPLE_FN float reel_sf_div(float a, float b)
{
#ifdef __CUDA_ARCH__
    return __fdiv_rn(a, b);
#else
    return a / b;
#endif
}

REEL_SAMPLE_FN float reel_sf_fma(float a, float b, float c)
{
#ifdef __CUDA_ARCH__
    return __fmaf_rn(a, b, c);
#else
    return fmaf(a, b, c);
#endif
}

REEL_SAMPLE_FN float reel_sf_from_bits(uint32_t u)
{
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
#endif
}

REEL_SAMPLE_FN uint32_t reel_sf_bits(float f)
{
#ifdef __CUDA_ARCH__
    return __float_as_uint(f);
#else
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
#endif
}

/* A row's parameters, checked. */
typedef struct reel_sample_cfg {
    float temperature, top_p, min_p;
    int64_t top_k; /* 0: off; at least 2^24 (past any vocabulary) for larger values */
} reel_sample_cfg;

/* Reads params[0..3] (temperature, top_p, min_p, top_k); false for values
 * out of range (the row then gives REEL_SAMPLE_BAD_ROW). NaN fails every
 * comparison, so it is out of range everywhere. */
REEL_SAMPLE_FN bool reel_sample_params(const float *p, reel_sample_cfg *c)
{
    const float t = p[0], tp = p[1], mp = p[2], tk = p[3];
    if (!(t >= 0.0f && t <= FLT_MAX) || !(tp > 0.0f && tp <= 1.0f) || !(mp >= 0.0f && mp < 1.0f))
        return false;
    if (!(tk >= 0.0f && tk <= FLT_MAX) || floorf(tk) != tk)
        return false;
    c->temperature = t;
    c->top_p = tp;
    c->min_p = mp;
    c->top_k = tk >= 16777216.0f ? 16777216 : (int64_t)tk;
    return true;
}

/* log2(e) / temperature (temperature > 0): the factor of (x - x_max) in
 * the weight's exponent; +inf for a temperature so small that the division
 * overflows (then every token below the maximum weighs 0). */
REEL_SAMPLE_FN float reel_sample_scale(float temperature)
{
    return reel_sf_div(1.44269504088896340736f, temperature);
}

/* The weight of logit x in a row of maximum xmax (x <= xmax, both finite)
 * at scale c = reel_sample_scale(temperature): 2^y with y = (x - xmax) * c,
 * as 2^floor(y) times a degree-6 polynomial for 2^f on [0, 1] (relative
 * error under 7e-8 in float). Exactly 1 at x == xmax; 0 for y <= -64 (a
 * mass of 0 at 40 bits anyway). Non-decreasing in x: every step rounds
 * monotonically, the polynomial's coefficients are positive, p(0) = 1 and p
 * is held at most 2 = 2 p(0), so no step down where floor(y) steps up. */
REEL_SAMPLE_FN float reel_sample_weight(float x, float xmax, float c)
{
    const float d = reel_sf_sub(x, xmax);
    if (d == 0.0f)
        return 1.0f;
    const float y = reel_sf_mul(d, c);
    if (!(y > -64.0f)) /* -inf too (an overflowing d or c) */
        return 0.0f;
    const float k = floorf(y);
    const float f = reel_sf_sub(y, k);
    float p = 0x1.c5417ap-13f;
    p = reel_sf_fma(p, f, 0x1.46d64ap-10f);
    p = reel_sf_fma(p, f, 0x1.3d0b92p-7f);
    p = reel_sf_fma(p, f, 0x1.c68912p-5f);
    p = reel_sf_fma(p, f, 0x1.ebfd58p-3f);
    p = reel_sf_fma(p, f, 0x1.62e42cp-1f);
    p = reel_sf_fma(p, f, 1.0f);
    p = fminf(p, 2.0f);
    return reel_sf_mul(p, reel_sf_from_bits((uint32_t)(127 + (int)k) << 23)); /* exact: 2^k, k in [-64, 0] */
}

/* A token's mass: floor(w * 2^40) (exact: the product is a power-of-two
 * scaling, the conversion truncates). */
REEL_SAMPLE_FN uint64_t reel_sample_mass(float w)
{
    return (uint64_t)reel_sf_mul(w, 0x1p40f);
}

/* The order of logits as an unsigned key: a larger logit has a larger key,
 * -0 and +0 have one (x not NaN). */
REEL_SAMPLE_FN uint32_t reel_sample_key(float x)
{
    const uint32_t u = reel_sf_bits(x == 0.0f ? 0.0f : x);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/* ceil(top_p * total), exactly, for top_p in (0, 1) and total < 2^63: the
 * least mass a top_p set of a kept set of mass total must reach. top_p is
 * m * 2^-s (m the 24-bit significand), so the product is m * total (< 2^87,
 * as two 64-bit words) shifted right by s >= 24, rounded up. */
REEL_SAMPLE_FN uint64_t reel_sample_need(float top_p, uint64_t total)
{
    const uint32_t b = reel_sf_bits(top_p);
    int e = (int)(b >> 23);
    uint64_t m = b & 0x7fffffu;
    if (e)
        m |= 0x800000u;
    else
        e = 1; /* subnormal */
    const int s = 150 - e;
    const uint64_t a = m * (total & 0xffffffffu), h = m * (total >> 32); /* < 2^56, < 2^55 */
    const uint64_t lo = a + (h << 32);
    const uint64_t hi = (h >> 32) + (lo < a ? 1u : 0u);
    if (s >= 128)
        return (hi | lo) != 0 ? 1u : 0u;
    if (s >= 64) {
        const int r = s - 64;
        const uint64_t below = r ? hi & (~0ull >> (64 - r)) : 0u;
        return (r ? hi >> r : hi) + ((below | lo) != 0 ? 1u : 0u);
    }
    const uint64_t below = lo & (~0ull >> (64 - s));
    return ((lo >> s) | (hi << (64 - s))) + (below != 0 ? 1u : 0u);
}

/* floor(a * b / 2^64): the draw's target, u * total for a 64-bit uniform u. */
REEL_SAMPLE_FN uint64_t reel_sample_mulhi(uint64_t a, uint64_t b)
{
    const uint64_t a0 = a & 0xffffffffu, a1 = a >> 32, b0 = b & 0xffffffffu, b1 = b >> 32;
    const uint64_t p00 = a0 * b0, p01 = a0 * b1, p10 = a1 * b0, p11 = a1 * b1;
    const uint64_t mid = (p00 >> 32) + (p01 & 0xffffffffu) + (p10 & 0xffffffffu);
    return p11 + (p01 >> 32) + (p10 >> 32) + (mid >> 32);
}

/* The row's uniform from its rng row (seed low, seed high, counter low,
 * counter high as int32 words). */
REEL_SAMPLE_FN uint64_t reel_sample_uniform(const int32_t *rng)
{
    return reel_philox_u64((uint32_t)rng[0], (uint32_t)rng[1], (uint32_t)rng[2], (uint32_t)rng[3]);
}

/* Blocks of a thread-block cluster that the CUDA kernel gives one row of
 * `units` 16-byte packs: the most (a power of two, at most cap) whose rows
 * x blocks still fit the device's multiprocessors at once, each block
 * keeping at least REEL_SAMPLE_SPLIT_MIN_UNITS packs; 1 (a block a row)
 * without clusters. A function of the shape and the device, never of
 * timing, so a replay runs the eager step's split. */
#define REEL_SAMPLE_SPLIT_MIN_UNITS 512
static inline int reel_sample_split(int64_t rows, int64_t units, int sms, bool clusters, int cap)
{
    if (!clusters || rows < 1 || sms < 1 || cap < 2 || rows > 65535)
        return 1;
    int c = 1;
    while (c * 2 <= cap && rows * c * 2 <= (int64_t)sms && units >= (int64_t)c * 2 * REEL_SAMPLE_SPLIT_MIN_UNITS)
        c *= 2;
    return c;
}

#endif
