/* Storage conversions of the host kernels: f32 <-> f16 and f32 <-> bf16
 * round to nearest, ties to even, and keep NaN and Inf. Checked at every
 * rounding boundary (the midpoints between neighbouring narrow values). */
#include <criterion/criterion.h>
#include <math.h>

#include "ops/host/dtype.h"

/* The narrow value after h (h finite and non-negative), as a float. */
typedef float (*widen_fn)(uint16_t);
typedef uint16_t (*narrow_fn)(float);

static void check_boundaries(const char *what, widen_fn widen, narrow_fn narrow, uint16_t last_finite)
{
    for (uint32_t h = 0; h < last_finite; h++) {
        float lo = widen((uint16_t)h), hi = widen((uint16_t)(h + 1));
        /* Midpoints need one more bit than the narrow type: exact in f32. */
        float mid = (float)(((double)lo + (double)hi) / 2.0);
        uint16_t even = (h & 1u) ? (uint16_t)(h + 1) : (uint16_t)h;
        cr_assert_eq(narrow(lo), h, "%s: %a does not round-trip to 0x%04x", what, (double)lo, h);
        cr_assert_eq(narrow(mid), even, "%s: tie %a gives 0x%04x, want 0x%04x", what, (double)mid, narrow(mid), even);
        cr_assert_eq(narrow(nextafterf(mid, INFINITY)), h + 1, "%s: above the tie %a", what, (double)mid);
        cr_assert_eq(narrow(nextafterf(mid, -INFINITY)), h, "%s: below the tie %a", what, (double)mid);
        /* The sign is symmetric. */
        cr_assert_eq(narrow(-mid), (uint16_t)(even | 0x8000u), "%s: negative tie %a", what, (double)-mid);
    }
}

Test(ops, f16_conversion_rounds_every_boundary_to_nearest_even)
{
    check_boundaries("f16", reel_f16_to_f32, reel_f32_to_f16, 0x7BFF);
    /* Past the largest finite value: the tie 65520 goes to Inf. */
    cr_assert_eq(reel_f32_to_f16(65519.99f), 0x7BFF);
    cr_assert_eq(reel_f32_to_f16(65520.0f), 0x7C00);
    cr_assert_eq(reel_f32_to_f16(1e30f), 0x7C00);
    /* Below the smallest subnormal: 2^-25 is a tie and goes to 0. */
    cr_assert_eq(reel_f32_to_f16(0x1p-25f), 0x0000);
    cr_assert_eq(reel_f32_to_f16(nextafterf(0x1p-25f, 1.0f)), 0x0001);
    cr_assert_eq(reel_f32_to_f16(-0x1p-30f), 0x8000);
}

Test(ops, bf16_conversion_rounds_every_boundary_to_nearest_even)
{
    check_boundaries("bf16", reel_bf16_to_f32, reel_f32_to_bf16, 0x7F7F);
    cr_assert_eq(reel_f32_to_bf16(3.4028235e38f), 0x7F80, "FLT_MAX rounds up to Inf at bf16 precision");
    /* f32 subnormals keep their top bits: 2^-133 is bf16 0x0001. */
    cr_assert_eq(reel_f32_to_bf16(0x1p-133f), 0x0001);
    cr_assert_eq(reel_bf16_to_f32(0x0001), 0x1p-133f);
}

Test(ops, conversions_keep_nan_and_inf)
{
    const uint32_t nans[] = { 0x7FC00000u, 0x7F800001u, 0xFF800001u, 0x7FFFFFFFu, 0x7F802000u, 0xFFC00001u };
    for (size_t i = 0; i < sizeof nans / sizeof nans[0]; i++) {
        float n = reel_f32_from_bits(nans[i]);
        cr_assert(isnan(reel_f16_to_f32(reel_f32_to_f16(n))), "f16 lost NaN 0x%08x", nans[i]);
        cr_assert(isnan(reel_bf16_to_f32(reel_f32_to_bf16(n))), "bf16 lost NaN 0x%08x", nans[i]);
    }
    cr_assert_eq(reel_f32_to_f16(INFINITY), 0x7C00);
    cr_assert_eq(reel_f32_to_f16(-INFINITY), 0xFC00);
    cr_assert_eq(reel_f32_to_bf16(INFINITY), 0x7F80);
    cr_assert_eq(reel_f32_to_bf16(-INFINITY), 0xFF80);
    cr_assert(isinf(reel_f16_to_f32(0x7C00)) && reel_f16_to_f32(0xFC00) < 0);
    cr_assert(isinf(reel_bf16_to_f32(0x7F80)) && reel_bf16_to_f32(0xFF80) < 0);
    for (uint32_t h = 0x7C01; h <= 0x7FFF; h++)
        cr_assert(isnan(reel_f16_to_f32((uint16_t)h)) && isnan(reel_f16_to_f32((uint16_t)(h | 0x8000u))));
}

Test(ops, widening_is_exact_for_every_narrow_value)
{
    for (uint32_t h = 0; h <= 0xFFFF; h++) {
        float f = reel_f16_to_f32((uint16_t)h), b = reel_bf16_to_f32((uint16_t)h);
        if (!isnan(f))
            cr_assert_eq(reel_f32_to_f16(f), h, "f16 0x%04x does not round-trip", h);
        if (!isnan(b))
            cr_assert_eq(reel_f32_to_bf16(b), h, "bf16 0x%04x does not round-trip", h);
    }
    /* Subnormal f16 values are exact multiples of 2^-24. */
    cr_assert_eq(reel_f16_to_f32(0x0001), 0x1p-24f);
    cr_assert_eq(reel_f16_to_f32(0x03FF), 1023 * 0x1p-24f);
    cr_assert_eq(reel_f16_to_f32(0x3C00), 1.0f);
}

#if defined(__FLT16_MAX__)
Test(ops, f16_conversion_matches_the_compiler_on_random_floats)
{
    uint64_t s = 0x1234567u;
    for (int i = 0; i < 1 << 20; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        float f = reel_f32_from_bits((uint32_t)(s >> 32));
        if (isnan(f))
            continue;
        _Float16 c = (_Float16)f;
        uint16_t cb;
        memcpy(&cb, &c, sizeof cb);
        cr_assert_eq(reel_f32_to_f16(f), cb, "f32 %a: 0x%04x, compiler 0x%04x", (double)f, reel_f32_to_f16(f), cb);
    }
}
#endif
