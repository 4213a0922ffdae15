/* Internal (L0): storage dtypes of host code (the host kernels of ops/host,
 * the host communicator's reductions). Tensors are stored as f32,
 * f16 or bf16 and computed in float32. Conversions to the narrow types round
 * to nearest, ties to even; NaN stays NaN (quieted) and +-Inf stays +-Inf.
 * Written in plain integer code so results do not depend on the compiler's
 * _Float16 support or the FPU's rounding mode. */
#ifndef REEL_CORE_DTYPE_H
#define REEL_CORE_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "reel/reel.h"

static inline uint32_t reel_f32_bits(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    return x;
}

static inline float reel_f32_from_bits(uint32_t x)
{
    float f;
    memcpy(&f, &x, sizeof f);
    return f;
}

/* Rounds the integer m right by `shift` bits (1..24), ties to even. */
static inline uint32_t reel_round_shift_rne(uint32_t m, int shift)
{
    uint32_t q = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u)))
        q++;
    return q;
}

static inline uint16_t reel_f32_to_f16(float f)
{
    uint32_t x = reel_f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7FFFFFFFu;
    if (ax > 0x7F800000u) /* NaN: keep the high payload bits, force quiet */
        return (uint16_t)(sign | 0x7E00u | ((ax >> 13) & 0x3FFu));
    if (ax >= 0x47800000u) /* >= 2^16 (and Inf): beyond any rounding to 65504 */
        return (uint16_t)(sign | 0x7C00u);
    if (ax < 0x38800000u) { /* below 2^-14: f16 subnormal or zero */
        if (ax <= 0x33000000u) /* <= 2^-25: half the smallest subnormal, ties to 0 */
            return sign;
        uint32_t e = ax >> 23;
        uint32_t m = (ax & 0x7FFFFFu) | 0x800000u;
        /* value = m * 2^(e-150); in units of 2^-24 that is m >> (126 - e). A
         * carry into 0x400 is the smallest normal, which is encoded right. */
        return (uint16_t)(sign | reel_round_shift_rne(m, (int)(126u - e)));
    }
    /* Normal: rebias the exponent (127 -> 15) and round 13 mantissa bits; a
     * carry out of the top rounds up to Inf, which is correct. */
    uint32_t h = (ax - 0x38000000u) >> 13;
    uint32_t rem = ax & 0x1FFFu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u)))
        h++;
    return (uint16_t)(sign | h);
}

static inline float reel_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1Fu;
    uint32_t m = h & 0x3FFu;
    if (e == 0) { /* zero or subnormal: m * 2^-24, exact in float */
        float v = (float)m * 0x1p-24f;
        return (h & 0x8000u) ? -v : v;
    }
    if (e == 31)
        return reel_f32_from_bits(sign | 0x7F800000u | (m << 13));
    return reel_f32_from_bits(sign | ((e + 112u) << 23) | (m << 13));
}

static inline uint16_t reel_f32_to_bf16(float f)
{
    uint32_t x = reel_f32_bits(f);
    if ((x & 0x7FFFFFFFu) > 0x7F800000u) /* NaN: truncate, force quiet */
        return (uint16_t)((x >> 16) | 0x0040u);
    /* Ties to even; Inf stays Inf and the largest finite values round to Inf. */
    x += 0x7FFFu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

static inline float reel_bf16_to_f32(uint16_t h)
{
    return reel_f32_from_bits((uint32_t)h << 16);
}

/* Element i of a float tensor stored as dt (f32, f16 or bf16). */
static inline float reel_load(const void *p, reel_dtype dt, int64_t i)
{
    switch (dt) {
    case REEL_F16: return reel_f16_to_f32(((const uint16_t *)p)[i]);
    case REEL_BF16: return reel_bf16_to_f32(((const uint16_t *)p)[i]);
    default: return ((const float *)p)[i];
    }
}

static inline void reel_store(void *p, reel_dtype dt, int64_t i, float v)
{
    switch (dt) {
    case REEL_F16: ((uint16_t *)p)[i] = reel_f32_to_f16(v); break;
    case REEL_BF16: ((uint16_t *)p)[i] = reel_f32_to_bf16(v); break;
    default: ((float *)p)[i] = v; break;
    }
}

/* v rounded to what dt can hold (identity for f32). */
static inline float reel_round_to(reel_dtype dt, float v)
{
    switch (dt) {
    case REEL_F16: return reel_f16_to_f32(reel_f32_to_f16(v));
    case REEL_BF16: return reel_bf16_to_f32(reel_f32_to_bf16(v));
    default: return v;
    }
}

/* Bytes per element (kept here so kernels need nothing beyond this header). */
static inline size_t reel_storage_size(reel_dtype dt)
{
    return (dt == REEL_F16 || dt == REEL_BF16) ? 2 : 4;
}

static inline int reel_is_float_storage(reel_dtype dt)
{
    return dt == REEL_F32 || dt == REEL_F16 || dt == REEL_BF16;
}

#endif
