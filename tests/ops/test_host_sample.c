/* The sample op on the host (ops/host/sample.c, ops/sample.h, ops/philox.h):
 * Philox against Random123's known answers; the weight's monotonicity and
 * the exact integer helpers; the drawn distribution against a float64
 * softmax (chi-square, with a control that a wrong distribution fails it);
 * kept sets against a float64 brute force (sort, cumulative sums) with ties;
 * greedy == argmax; a row's token independent of its batch; bad rows and bad
 * parameters; the builder's errors; a plan. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/ops/host_ref.h"
#include "ops/sample.h"

/* ---- running the kernel -------------------------------------------------- */

/* One launch over T rows of V logits (stored in dt from the doubles in x),
 * params [T, 4] and rng [T, 4]; writes tokens. The output is poisoned two
 * ways and both runs must agree, so every row is written. */
static void run_sample(reel_dtype dt, int64_t T, int64_t V, const double *x, const float *prm, const int32_t *rng,
                       int32_t *tokens)
{
    tbuf lg = tbuf_new(dt, T * V);
    for (int64_t i = 0; i < T * V; i++)
        tbuf_set(&lg, i, x[i]);
    tlaunch L;
    tlaunch_init(&L, REEL_OP_SAMPLE, T);
    L.in[0] = tshape(dt, true, 2, 0, V, 0, 0);
    L.in[1] = tshape(REEL_F32, true, 2, 0, REEL_SAMPLE_PARAMS, 0, 0);
    L.in[2] = tshape(REEL_I32, true, 2, 0, REEL_SAMPLE_RNG, 0, 0);
    L.out[0] = tshape(REEL_I32, true, 1, 0, 0, 0, 0);
    L.l.in[0] = lg.p;
    L.l.in[1] = (void *)prm;
    L.l.in[2] = (void *)rng;
    L.l.out[0] = tokens;
    int32_t *first = malloc((size_t)T * sizeof *first);
    memset(tokens, 0x5A, (size_t)T * sizeof *tokens);
    reel_host_sample(&L.l);
    memcpy(first, tokens, (size_t)T * sizeof *tokens);
    memset(tokens, 0xA5, (size_t)T * sizeof *tokens);
    reel_host_sample(&L.l);
    cr_assert(!memcmp(first, tokens, (size_t)T * sizeof *tokens), "sample output depends on the poison");
    free(first);
    tbuf_free(&lg);
}

static void set_params(float *p, float temperature, float top_p, float min_p, float top_k)
{
    p[REEL_SAMPLE_TEMPERATURE] = temperature;
    p[REEL_SAMPLE_TOP_P] = top_p;
    p[REEL_SAMPLE_MIN_P] = min_p;
    p[REEL_SAMPLE_TOP_K] = top_k;
}

static void set_rng(int32_t *r, uint64_t seed, uint64_t counter)
{
    r[0] = (int32_t)(uint32_t)seed;
    r[1] = (int32_t)(uint32_t)(seed >> 32);
    r[2] = (int32_t)(uint32_t)counter;
    r[3] = (int32_t)(uint32_t)(counter >> 32);
}

/* N draws of one row (counters 0..N-1, one seed): rows of a single launch. */
static void draw_many(reel_dtype dt, int64_t V, const double *row, float temperature, float top_p, float min_p,
                      float top_k, uint64_t seed, int64_t N, int64_t *counts)
{
    double *x = malloc((size_t)(N * V) * sizeof *x);
    float *prm = malloc((size_t)N * REEL_SAMPLE_PARAMS * sizeof *prm);
    int32_t *rng = malloc((size_t)N * REEL_SAMPLE_RNG * sizeof *rng), *tok = malloc((size_t)N * sizeof *tok);
    for (int64_t t = 0; t < N; t++) {
        memcpy(x + t * V, row, (size_t)V * sizeof *x);
        set_params(prm + t * REEL_SAMPLE_PARAMS, temperature, top_p, min_p, top_k);
        set_rng(rng + t * REEL_SAMPLE_RNG, seed, (uint64_t)t);
    }
    run_sample(dt, N, V, x, prm, rng, tok);
    memset(counts, 0, (size_t)V * sizeof *counts);
    for (int64_t t = 0; t < N; t++) {
        cr_assert(tok[t] >= 0 && tok[t] < V, "draw %lld gave %d", (long long)t, tok[t]);
        counts[tok[t]]++;
    }
    free(x), free(prm), free(rng), free(tok);
}

/* ---- the float64 brute force --------------------------------------------- */

/* Candidates of a row in the op's order: logit descending, id ascending. */
static const double *g_sort_x;
static int cmp_order(const void *a, const void *b)
{
    int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
    if (g_sort_x[i] != g_sort_x[j])
        return g_sort_x[i] > g_sort_x[j] ? -1 : 1;
    return (i > j) - (i < j);
}

/* The kept set as a prefix of the order, computed in float64: *lo and *hi
 * are its length with the min_p and top_p thresholds moved by a relative
 * slack eps one way and the other (the op's float32 weights and 40-bit
 * masses land between). order[] gets the candidates in order; returns how
 * many there are. */
static int64_t kept64(const double *x, int64_t V, double temperature, double top_p, double min_p, int64_t top_k,
                      double eps, int32_t *order, int64_t *lo, int64_t *hi)
{
    int64_t nc = 0;
    double xmax = -INFINITY;
    for (int64_t i = 0; i < V; i++)
        if (x[i] > -INFINITY) {
            order[nc++] = (int32_t)i;
            xmax = x[i] > xmax ? x[i] : xmax;
        }
    g_sort_x = x;
    qsort(order, (size_t)nc, sizeof *order, cmp_order);
    int64_t len[2];
    for (int side = 0; side < 2; side++) { /* 0: the least kept, 1: the most */
        const double s = side ? -eps : eps; /* side 1: a lower min_p, a higher top_p */
        int64_t r = 0;
        while (r < nc && exp((x[order[r]] - xmax) / temperature) >= min_p * (1 + s))
            r++;
        if (top_k > 0 && top_k < r)
            r = top_k;
        if (top_p < 1) {
            double total = 0, run = 0;
            for (int64_t j = 0; j < r; j++)
                total += exp((x[order[j]] - xmax) / temperature);
            int64_t j = 0;
            while (j < r) {
                run += exp((x[order[j]] - xmax) / temperature);
                j++;
                if (run >= top_p * (1 - s) * total)
                    break;
            }
            r = j;
        }
        len[side] = r;
    }
    *lo = len[0];
    *hi = len[1];
    return nc;
}

/* Rank of token tok in the order (-1 if not a candidate). */
static int64_t rank_of(const int32_t *order, int64_t nc, int32_t tok)
{
    for (int64_t j = 0; j < nc; j++)
        if (order[j] == tok)
            return j;
    return -1;
}

/* Chi-square of counts against probabilities p over V bins (bins with
 * p == 0 must be empty). */
static double chi_square(const int64_t *counts, const double *p, int64_t V, int64_t N)
{
    double c2 = 0;
    for (int64_t i = 0; i < V; i++) {
        if (p[i] == 0) {
            cr_assert_eq(counts[i], 0, "token %lld of probability 0 drawn %lld times", (long long)i,
                         (long long)counts[i]);
            continue;
        }
        const double e = p[i] * (double)N, d = (double)counts[i] - e;
        c2 += d * d / e;
    }
    return c2;
}

/* softmax(x / temperature) over the tokens in keep (NULL: all). */
static void softmax64(const double *x, int64_t V, double temperature, const bool *keep, double *p)
{
    double m = -INFINITY, s = 0;
    for (int64_t i = 0; i < V; i++)
        if ((!keep || keep[i]) && x[i] > m)
            m = x[i];
    for (int64_t i = 0; i < V; i++)
        s += p[i] = (!keep || keep[i]) && x[i] > -INFINITY ? exp((x[i] - m) / temperature) : 0.0;
    for (int64_t i = 0; i < V; i++)
        p[i] /= s;
}

/* ---- Philox and the exact helpers ---------------------------------------- */

/* Random123's tests/kat_vectors, the three philox4x32 10 lines: counter
 * (4 words), key (2 words) -> output (4 words). */
Test(sample, philox4x32_10_matches_random123_known_answers)
{
    static const uint32_t kat[3][10] = {
        { 0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8 },
        { 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0x408f276d, 0x41c83b0e, 0xa20bc7c6,
          0x6d5451fd },
        { 0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09, 0x94fdcceb, 0x5001e420,
          0x24126ea1 },
    };
    for (int v = 0; v < 3; v++) {
        uint32_t out[4];
        reel_philox4x32_10(kat[v], kat[v] + 4, out);
        for (int i = 0; i < 4; i++)
            cr_assert_eq(out[i], kat[v][6 + i], "vector %d word %d: %08x, want %08x", v, i, out[i], kat[v][6 + i]);
    }
}

/* The uniform's words are Philox's: with counter words 2 and 3 zero. */
Test(sample, uniform_is_philox_words_0_and_1_of_seed_and_counter)
{
    const uint32_t ctr[4] = { 0x13198a2e, 0x03707344, 0, 0 }, key[2] = { 0xa4093822, 0x299f31d0 };
    uint32_t o[4];
    reel_philox4x32_10(ctr, key, o);
    int32_t rng[4];
    set_rng(rng, (uint64_t)key[1] << 32 | key[0], (uint64_t)ctr[1] << 32 | ctr[0]);
    cr_assert_eq(reel_sample_uniform(rng), (uint64_t)o[1] << 32 | o[0]);
}

/* Every finite bf16 and f16 value, in order, at three maxima and four
 * temperatures: the weight never falls as the logit grows, is 1 at the
 * maximum, and is within 2e-6 of 2^((x - max) log2(e) / T) above 2^-60. */
Test(sample, weight_never_falls_as_the_logit_grows_and_is_exact_at_the_max)
{
    const float maxima[3] = { 0.0f, 7.25f, -3.5f }, temps[4] = { 1.0f, 0.35f, 2.5f, 1e-3f };
    for (int d = 0; d < 2; d++) {
        /* the values below each maximum, ascending: negative bit patterns
         * from the most negative, then positive ones */
        for (int mi = 0; mi < 3; mi++)
            for (int ti = 0; ti < 4; ti++) {
                const float xmax = maxima[mi], c = reel_sample_scale(temps[ti]);
                float prev_w = 0.0f, prev_x = -INFINITY;
                for (int pass = 0; pass < 2; pass++)
                    for (uint32_t k = 0; k < 0x8000u; k++) {
                        const uint16_t b = pass == 0 ? (uint16_t)(0xffffu - k) : (uint16_t)k;
                        uint16_t h = b;
                        float v = d == 0 ? reel_bf16_to_f32(h) : reel_f16_to_f32(h);
                        if (isnan(v) || isinf(v) || v > xmax)
                            continue;
                        cr_assert(v >= prev_x, "values out of order");
                        const float w = reel_sample_weight(v, xmax, c);
                        cr_assert(w >= prev_w, "%s: w(%a) = %a < w(%a) = %a (max %g, T %g)", d ? "f16" : "bf16",
                                  (double)v, (double)w, (double)prev_x, (double)prev_w, (double)xmax,
                                  (double)temps[ti]);
                        cr_assert(w <= 1.0f);
                        const float dv = v - xmax, y = dv * c; /* the op's exponent, as it rounds it */
                        if (dv != 0.0f && y > -60.0f)
                            cr_assert(fabs(w / exp2((double)y) - 1) < 2e-7, "w(%a) = %a, 2^%a = %a", (double)v,
                                      (double)w, (double)y, exp2((double)y));
                        prev_w = w, prev_x = v;
                    }
                cr_assert_eq(reel_sample_weight(xmax, xmax, c), 1.0f);
            }
    }
}

Test(sample, weight_never_falls_for_random_f32_pairs)
{
    trng r = { 77 };
    for (int i = 0; i < 200000; i++) {
        const float xmax = (float)trng_uniform(&r, -30, 30), c = reel_sample_scale((float)trng_uniform(&r, 0.05, 4));
        float a = (float)trng_uniform(&r, xmax - 60, xmax), b = nextafterf(a, INFINITY);
        if (i % 2)
            b = (float)trng_uniform(&r, a, xmax);
        if (b > xmax)
            b = xmax;
        cr_assert(reel_sample_weight(a, xmax, c) <= reel_sample_weight(b, xmax, c), "w(%a) > w(%a) at max %a",
                  (double)a, (double)b, (double)xmax);
    }
}

Test(sample, need_and_target_are_exact_integer_products)
{
    trng r = { 5 };
    for (int i = 0; i < 100000; i++) {
        const uint64_t total = trng_next(&r) >> (1 + trng_int(&r, 0, 62));
        float p = (float)trng_uniform(&r, 0, 1);
        if (i % 7 == 0)
            p = nextafterf(1.0f, 0.0f);
        if (i % 11 == 0)
            p = 1e-40f; /* subnormal */
        if (!(p > 0.0f && p < 1.0f))
            continue;
        /* ceil(p * total) with p = m 2^-s: from the 128-bit product */
        int e;
        const double fr = frexp((double)p, &e); /* p = fr 2^e, fr in [0.5, 1) */
        const unsigned __int128 m = (unsigned __int128)ldexp(fr, 53), prod = m * total;
        const int s = 53 - e;
        unsigned __int128 want = s >= 128 ? (prod != 0) : (prod >> s) + ((prod & (((unsigned __int128)1 << s) - 1)) != 0);
        cr_assert_eq(reel_sample_need(p, total), (uint64_t)want, "need(%a, %llu)", (double)p,
                     (unsigned long long)total);
        const uint64_t u = trng_next(&r);
        cr_assert_eq(reel_sample_mulhi(u, total), (uint64_t)(((unsigned __int128)u * total) >> 64));
    }
    cr_assert_eq(reel_sample_need(0.5f, 3), 2);
    cr_assert_eq(reel_sample_need(0.25f, 4), 1);
    cr_assert_eq(reel_sample_mulhi(~0ull, 1ull << 40), (1ull << 40) - 1);
}

/* The draw is the inverse CDF at floor(u * total / 2^64): over 2^j equal
 * logits (each weighing 2^40) it is the top j bits of the row's uniform. */
Test(sample, the_draw_over_equal_logits_is_the_top_bits_of_the_uniform)
{
    const int64_t N = 2000;
    double x[4 * 2000];
    float prm[4 * 2000];
    int32_t rng[4 * 2000], tok[2000];
    for (int j = 1; j <= 2; j++) {
        const int64_t V = 1 << j;
        for (int64_t t = 0; t < N; t++) {
            for (int64_t i = 0; i < V; i++)
                x[t * V + i] = 1.5;
            set_params(prm + t * 4, 0.9f, 1.0f, 0.0f, 0.0f);
            set_rng(rng + t * 4, 0xfeedfacecafebeefull, (uint64_t)t * 7919);
        }
        run_sample(REEL_BF16, N, V, x, prm, rng, tok);
        for (int64_t t = 0; t < N; t++)
            cr_assert_eq(tok[t], (int32_t)(reel_sample_uniform(rng + t * 4) >> (64 - j)), "V %lld counter %lld",
                         (long long)V, (long long)t * 7919);
    }
}

/* ---- the distribution ---------------------------------------------------- */

/* chi-square with 11 degrees of freedom: P(> 50) < 1e-6. */
#define CHI2_11 50.0

Test(sample, draws_follow_the_softmax_with_and_without_temperature)
{
    const double row[12] = { 1.5, 0.25, -1, 2, 2, 0.5, -0.75, 1.25, -3, 0, 1, -0.5 }; /* a tie at 3, 4 */
    const float temps[3] = { 1.0f, 0.6f, 1.7f };
    const reel_dtype dts[3] = { REEL_F32, REEL_BF16, REEL_F16 };
    const int64_t N = 60000;
    int64_t counts[12];
    double p[12];
    for (int d = 0; d < 3; d++)
        for (int t = 0; t < 3; t++) {
            draw_many(dts[d], 12, row, temps[t], 1.0f, 0.0f, 0.0f, 1234 + (uint64_t)t, N, counts);
            softmax64(row, 12, temps[t], NULL, p);
            const double c2 = chi_square(counts, p, 12, N);
            cr_assert(c2 < CHI2_11, "%s T %g: chi-square %g", dt_name(dts[d]), (double)temps[t], c2);
            /* the control: the same draws against another temperature's softmax fail */
            softmax64(row, 12, temps[t] * 1.15, NULL, p);
            cr_assert(chi_square(counts, p, 12, N) > 4 * CHI2_11, "the chi-square test cannot tell T from 1.15 T");
        }
}

/* After top_k, the draws follow the softmax renormalized over the kept. */
Test(sample, draws_over_a_top_k_set_follow_the_renormalized_softmax)
{
    const double row[12] = { 1.5, 0.25, -1, 2, 2, 0.5, -0.75, 1.25, -3, 0, 1, -0.5 };
    const int64_t N = 60000;
    int64_t counts[12];
    double p[12];
    bool keep[12] = { 0 };
    draw_many(REEL_F32, 12, row, 0.8f, 1.0f, 0.0f, 4.0f, 99, N, counts);
    keep[3] = keep[4] = keep[0] = keep[7] = true;
    softmax64(row, 12, 0.8, keep, p);
    const double c2 = chi_square(counts, p, 12, N); /* and the 8 others never drawn */
    cr_assert(c2 < 26.0, "chi-square %g over 3 degrees of freedom (P(> 26) < 1e-5)", c2);
}

/* ---- kept sets ----------------------------------------------------------- */

/* Draws N times and asserts the emitted set equals the float64 kept set
 * (which must be unambiguous: lo == hi). */
static void check_exact_set(reel_dtype dt, const double *row, int64_t V, float T, float top_p, float min_p,
                            float top_k, int64_t N, const char *what)
{
    int32_t order[64];
    int64_t lo, hi;
    const int64_t nc = kept64(row, V, T, top_p, min_p, (int64_t)top_k, 1e-4, order, &lo, &hi);
    cr_assert_eq(lo, hi, "%s: the case is ambiguous in float64", what);
    int64_t counts[64];
    draw_many(dt, V, row, T, top_p, min_p, top_k, 7, N, counts);
    for (int64_t i = 0; i < V; i++) {
        const int64_t rk = rank_of(order, nc, (int32_t)i);
        const bool kept = rk >= 0 && rk < lo;
        if (!kept)
            cr_assert_eq(counts[i], 0, "%s (%s): token %lld (rank %lld, %lld kept) drawn %lld times", what,
                         dt_name(dt), (long long)i, (long long)rk, (long long)lo, (long long)counts[i]);
        else
            cr_assert_gt(counts[i], 0, "%s (%s): kept token %lld never drawn in %lld", what, dt_name(dt),
                         (long long)i, (long long)N);
    }
}

Test(sample, top_k_keeps_exactly_k_and_the_lowest_ids_among_ties_at_the_kth)
{
    /* values 3 (ids 1, 4, 6), 5 (id 2), 1 (rest): k = 3 keeps 2, 1, 4 */
    const double row[8] = { 1, 3, 5, 1, 3, 1, 3, 1 };
    const reel_dtype dts[3] = { REEL_F32, REEL_BF16, REEL_F16 };
    for (int d = 0; d < 3; d++) {
        check_exact_set(dts[d], row, 8, 1.0f, 1.0f, 0.0f, 3.0f, 4000, "top_k 3");
        check_exact_set(dts[d], row, 8, 1.0f, 1.0f, 0.0f, 1.0f, 500, "top_k 1");
        check_exact_set(dts[d], row, 8, 1.0f, 1.0f, 0.0f, 4.0f, 4000, "top_k 4 (all ties)");
        check_exact_set(dts[d], row, 8, 1.0f, 1.0f, 0.0f, 5.0f, 8000, "top_k 5 (one of the 1s)");
        check_exact_set(dts[d], row, 8, 1.0f, 1.0f, 0.0f, 100.0f, 8000, "top_k past V");
    }
}

Test(sample, top_p_keeps_the_fewest_highest_tokens_reaching_p_ties_by_lower_id)
{
    /* weights at T = 1: 1 (id 5), e^-1 (ids 0, 3), e^-2 (id 1), e^-4 (ids 2, 4) */
    const double row[6] = { 1, 0, -2, 1, -2, 2 };
    double p[6];
    softmax64(row, 6, 1.0, NULL, p);
    /* p: id 5 .5242, ids 0 and 3 .1928, id 1 .0709, ids 2 and 4 .0096 */
    const float tps[5] = { 0.3f, 0.6f, 0.75f, 0.95f, 0.985f }; /* keep 1, 2 (id 0, not 3), 3, 4, 5 (2, not 4) */
    for (int i = 0; i < 5; i++) {
        check_exact_set(REEL_F32, row, 6, 1.0f, tps[i], 0.0f, 0.0f, 6000, "top_p");
        check_exact_set(REEL_BF16, row, 6, 1.0f, tps[i], 0.0f, 0.0f, 6000, "top_p");
    }
    check_exact_set(REEL_F32, row, 6, 0.5f, 0.75f, 0.0f, 0.0f, 6000, "top_p at T 0.5");
}

Test(sample, min_p_keeps_tokens_with_p_at_least_min_p_times_p_max)
{
    const double row[8] = { 0, -1, -2, -3, 0.5, -0.5, -10, 0.5 }; /* ratios to the max e^-(0.5 - x) */
    const float mps[4] = { 0.5f, 0.2f, 0.05f, 0.001f };
    for (int i = 0; i < 4; i++) {
        check_exact_set(REEL_F32, row, 8, 1.0f, 1.0f, mps[i], 0.0f, 20000, "min_p");
        check_exact_set(REEL_F16, row, 8, 0.7f, 1.0f, mps[i], 0.0f, 20000, "min_p at T 0.7");
    }
}

Test(sample, combined_filters_cut_by_min_p_and_top_k_then_top_p_over_what_remains)
{
    const double row[10] = { 2, 1, 1, 0.5, 3, -1, 1, 0, 3, -5 };
    check_exact_set(REEL_F32, row, 10, 1.0f, 0.7f, 0.1f, 4.0f, 20000, "min_p 0.1, top_k 4, top_p 0.7");
    check_exact_set(REEL_F32, row, 10, 1.0f, 0.9f, 0.02f, 6.0f, 20000, "min_p 0.02, top_k 6, top_p 0.9");
    check_exact_set(REEL_BF16, row, 10, 2.0f, 0.5f, 0.0f, 3.0f, 20000, "top_k 3, top_p 0.5 at T 2");
}

/* Random rows (ties, masked tokens, every dtype) and random parameters:
 * every token lies in the float64 kept set, taken at its widest. */
Test(sample, random_rows_never_emit_a_token_outside_the_kept_set)
{
    trng r = { 2024 };
    const reel_dtype dts[3] = { REEL_F32, REEL_BF16, REEL_F16 };
    const float temps[5] = { 0.3f, 0.7f, 1.0f, 1.5f, 3.0f }, tps[6] = { 1.0f, 0.95f, 0.8f, 0.5f, 0.2f, 0.01f };
    const float mps[5] = { 0.0f, 0.01f, 0.1f, 0.5f, 0.9f };
    const int64_t T = 3000, V = 40;
    double *x = malloc((size_t)(T * V) * sizeof *x);
    float *prm = malloc((size_t)T * 4 * sizeof *prm);
    int32_t *rng = malloc((size_t)T * 4 * sizeof *rng), *tok = malloc((size_t)T * sizeof *tok);
    for (int d = 0; d < 3; d++) {
        for (int64_t t = 0; t < T; t++) {
            for (int64_t i = 0; i < V; i++) {
                const int64_t k = trng_int(&r, 0, 19);
                x[t * V + i] = k == 0 ? -INFINITY : (double)(k - 10) * 0.625; /* many ties */
            }
            const int64_t kk = trng_int(&r, 0, 6);
            const float tk = kk == 6 ? 50.0f : (float)kk; /* 50: past V */
            set_params(prm + t * 4, temps[trng_int(&r, 0, 4)], tps[trng_int(&r, 0, 5)], mps[trng_int(&r, 0, 4)], tk);
            set_rng(rng + t * 4, trng_next(&r), trng_next(&r));
        }
        run_sample(dts[d], T, V, x, prm, rng, tok);
        tbuf lg = tbuf_new(dts[d], T * V); /* the logits as stored */
        for (int64_t i = 0; i < T * V; i++)
            tbuf_set(&lg, i, x[i]);
        for (int64_t t = 0; t < T; t++) {
            int32_t order[64];
            int64_t lo, hi;
            const float *p = prm + t * 4;
            const int64_t nc = kept64(lg.ref + t * V, V, p[0], p[1], p[2], (int64_t)p[3], 1e-4, order, &lo, &hi);
            if (nc == 0) {
                cr_assert_eq(tok[t], REEL_SAMPLE_BAD_ROW, "row %lld: every token masked", (long long)t);
                continue;
            }
            const int64_t rk = rank_of(order, nc, tok[t]);
            cr_assert(rk >= 0 && rk < hi, "%s row %lld: token %d of rank %lld outside the %lld kept (T %g, top_p %g, "
                      "min_p %g, top_k %g)", dt_name(dts[d]), (long long)t, tok[t], (long long)rk, (long long)hi,
                      (double)p[0], (double)p[1], (double)p[2], (double)p[3]);
        }
        tbuf_free(&lg);
    }
    free(x), free(prm), free(rng), free(tok);
}

/* ---- greedy, batch independence ----------------------------------------- */

Test(sample, temperature_zero_is_the_argmax_whatever_the_filters)
{
    trng r = { 31 };
    const int64_t T = 200, V = 300;
    double *x = malloc((size_t)(T * V) * sizeof *x);
    float prm[200 * 4];
    int32_t rng[200 * 4], tok[200];
    for (int64_t t = 0; t < T; t++) {
        for (int64_t i = 0; i < V; i++)
            x[t * V + i] = trng_int(&r, 0, 9) == 0 ? -INFINITY : floor(trng_uniform(&r, -8, 8) * 2) / 2;
        set_params(prm + t * 4, 0.0f, t % 3 ? 0.5f : 1.0f, t % 5 ? 0.0f : 0.3f, (float)(t % 4));
        set_rng(rng + t * 4, (uint64_t)t, 0);
    }
    for (int d = 0; d < 3; d++) {
        run_sample(float_dtypes[d], T, V, x, prm, rng, tok);
        tbuf lg = tbuf_new(float_dtypes[d], T * V);
        for (int64_t i = 0; i < T * V; i++)
            tbuf_set(&lg, i, x[i]);
        for (int64_t t = 0; t < T; t++) {
            int64_t best = -1;
            for (int64_t i = 0; i < V; i++)
                if (lg.ref[t * V + i] > -INFINITY && (best < 0 || lg.ref[t * V + i] > lg.ref[t * V + best]))
                    best = i;
            cr_assert_eq(tok[t], best, "%s row %lld", dt_name(float_dtypes[d]), (long long)t);
        }
        tbuf_free(&lg);
    }
    free(x);
}

/* A row's token depends on its logits, parameters, seed and counter only:
 * alone, at every position of a batch of 64 whose other rows differ in all
 * of those. */
Test(sample, same_seed_and_counter_give_the_same_token_at_batch_1_and_in_a_batch_of_64)
{
    trng r = { 8 };
    const int64_t B = 64, V = 256;
    double *x = malloc((size_t)(B * V) * sizeof *x), probe[256];
    float prm[64 * 4], pp[4];
    int32_t rng[64 * 4], pr[4], tok[64], alone;
    for (int64_t i = 0; i < V; i++)
        probe[i] = trng_uniform(&r, -6, 6);
    set_params(pp, 0.9f, 0.9f, 0.01f, 40.0f);
    for (int d = 0; d < 3; d++)
        for (uint64_t ctr = 0; ctr < 3; ctr++) {
            set_rng(pr, 0x1234567890abcdefull, ctr);
            run_sample(float_dtypes[d], 1, V, probe, pp, pr, &alone);
            for (int64_t at = 0; at < B; at += 31) {
                for (int64_t t = 0; t < B; t++) {
                    for (int64_t i = 0; i < V; i++)
                        x[t * V + i] = t == at ? probe[i] : trng_uniform(&r, -6, 6);
                    set_params(prm + t * 4, (float)trng_uniform(&r, 0.2, 2), (float)trng_uniform(&r, 0.1, 1),
                               (float)trng_uniform(&r, 0, 0.2), (float)trng_int(&r, 0, 100));
                    set_rng(rng + t * 4, trng_next(&r), trng_next(&r));
                    if (t == at) {
                        memcpy(prm + t * 4, pp, sizeof pp);
                        memcpy(rng + t * 4, pr, sizeof pr);
                    }
                }
                run_sample(float_dtypes[d], B, V, x, prm, rng, tok);
                cr_assert_eq(tok[at], alone, "%s counter %llu: row %lld of 64 gave %d, alone %d",
                             dt_name(float_dtypes[d]), (unsigned long long)ctr, (long long)at, tok[at], alone);
            }
        }
    free(x);
}

/* ---- bad rows and bad parameters ----------------------------------------- */

Test(sample, rows_with_nan_or_plus_inf_or_only_minus_inf_give_bad_row)
{
    const int64_t V = 16;
    double x[5 * 16];
    float prm[5 * 4];
    int32_t rng[5 * 4], tok[5];
    for (int64_t i = 0; i < 5 * V; i++)
        x[i] = (double)(i % 7) - 3;
    x[0 * V + 9] = NAN;
    x[1 * V + 2] = INFINITY;
    for (int64_t i = 0; i < V; i++)
        x[2 * V + i] = -INFINITY;
    x[3 * V + 5] = -INFINITY; /* row 3: a masked token, otherwise fine */
    x[4 * V + 0] = NAN;       /* row 4: NaN and greedy: still bad */
    for (int t = 0; t < 5; t++) {
        set_params(prm + t * 4, t == 4 ? 0.0f : 1.0f, 1.0f, 0.0f, 0.0f);
        set_rng(rng + t * 4, 3, (uint64_t)t);
    }
    for (int d = 0; d < 3; d++) {
        run_sample(float_dtypes[d], 5, V, x, prm, rng, tok);
        cr_assert_eq(tok[0], REEL_SAMPLE_BAD_ROW, "NaN");
        cr_assert_eq(tok[1], REEL_SAMPLE_BAD_ROW, "+inf");
        cr_assert_eq(tok[2], REEL_SAMPLE_BAD_ROW, "all -inf");
        cr_assert(tok[3] >= 0 && tok[3] < V && tok[3] != 5, "a row with a masked token gave %d", tok[3]);
        cr_assert_eq(tok[4], REEL_SAMPLE_BAD_ROW, "NaN, greedy");
    }
}

Test(sample, masked_tokens_are_never_drawn)
{
    double row[10] = { 0, -INFINITY, 0, -INFINITY, 0, 0, -INFINITY, 0, 0, -INFINITY };
    int64_t counts[10];
    draw_many(REEL_BF16, 10, row, 5.0f, 1.0f, 0.0f, 0.0f, 1, 20000, counts);
    for (int i = 0; i < 10; i++)
        if (row[i] == -INFINITY)
            cr_assert_eq(counts[i], 0, "masked token %d drawn", i);
        else
            cr_assert_gt(counts[i], 2000, "token %d drawn %lld times of 20000", i, (long long)counts[i]);
}

Test(sample, parameters_out_of_range_give_bad_row_and_the_limits_are_accepted)
{
    const float bad[][4] = {
        { -1, 1, 0, 0 }, { NAN, 1, 0, 0 }, { INFINITY, 1, 0, 0 }, { -0.001f, 1, 0, 0 },
        { 1, 0, 0, 0 }, { 1, -0.1f, 0, 0 }, { 1, 1.5f, 0, 0 }, { 1, NAN, 0, 0 }, { 1, nextafterf(1, 2), 0, 0 },
        { 1, 1, -0.1f, 0 }, { 1, 1, 1, 0 }, { 1, 1, NAN, 0 }, { 1, 1, 2, 0 },
        { 1, 1, 0, -1 }, { 1, 1, 0, 2.5f }, { 1, 1, 0, NAN }, { 1, 1, 0, INFINITY }, { 1, 1, 0, -INFINITY },
        { 0, 0, 0, 0 }, { 0, 1, 0, 0.5f }, /* greedy checks its parameters too */
    };
    const float good[][4] = {
        { 0, 1, 0, 0 }, { 1, 1, 0, 0 }, { 1e-30f, 1, 0, 0 }, { 3e38f, 1, 0, 0 }, { 1, 1e-30f, 0, 0 },
        { 1, 1, nextafterf(1, 0), 0 }, { 1, 1, 0, 1e9f }, { 1, 1, 0, 3e38f }, { 1, 1, 0, 1 }, { 1, 1, -0.0f, -0.0f },
    };
    const int nb = sizeof bad / sizeof bad[0], ng = sizeof good / sizeof good[0];
    const int64_t V = 8;
    double x[30 * 8];
    float prm[30 * 4];
    int32_t rng[30 * 4], tok[30];
    for (int64_t i = 0; i < 30 * V; i++)
        x[i] = (double)(i % V) * 0.5;
    for (int t = 0; t < nb + ng; t++) {
        memcpy(prm + t * 4, t < nb ? bad[t] : good[t - nb], 4 * sizeof(float));
        set_rng(rng + t * 4, 1, (uint64_t)t);
    }
    run_sample(REEL_F32, nb + ng, V, x, prm, rng, tok);
    for (int t = 0; t < nb; t++)
        cr_assert_eq(tok[t], REEL_SAMPLE_BAD_ROW, "params %d (%g, %g, %g, %g) gave %d", t, (double)bad[t][0],
                     (double)bad[t][1], (double)bad[t][2], (double)bad[t][3], tok[t]);
    for (int t = nb; t < nb + ng; t++)
        cr_assert(tok[t] >= 0 && tok[t] < V, "params %d (%g, %g, %g, %g) gave %d", t - nb, (double)good[t - nb][0],
                  (double)good[t - nb][1], (double)good[t - nb][2], (double)good[t - nb][3], tok[t]);
    /* a temperature far below the logits' gaps, or a tiny top_p, keeps only the maximum */
    cr_assert_eq(tok[nb + 2], V - 1);
    cr_assert_eq(tok[nb + 4], V - 1);
    cr_assert_eq(tok[nb + 8], V - 1); /* top_k 1 */
}

/* ---- the split rule, the builder, a plan --------------------------------- */

/* The CUDA kernel's blocks a row (ops/sample.h): 8 at batch 1 of a
 * 152064-wide bf16 row (19008 packs) on 132 SMs, fewer as the rows fill
 * the SMs, one past them, one without clusters or for short rows. */
Test(sample, cuda_split_fills_the_sms_with_blocks_of_at_least_512_packs)
{
    cr_assert_eq(reel_sample_split(1, 19008, 132, true, 8), 8);
    cr_assert_eq(reel_sample_split(16, 19008, 132, true, 8), 8);
    cr_assert_eq(reel_sample_split(17, 19008, 132, true, 8), 4);
    cr_assert_eq(reel_sample_split(64, 19008, 132, true, 8), 2);
    cr_assert_eq(reel_sample_split(67, 19008, 132, true, 8), 1);
    cr_assert_eq(reel_sample_split(256, 19008, 132, true, 8), 1);
    cr_assert_eq(reel_sample_split(1, 4000, 132, true, 8), 4); /* 32000 bf16: 4 blocks of 1000 packs */
    cr_assert_eq(reel_sample_split(1, 1000, 132, true, 8), 1);
    cr_assert_eq(reel_sample_split(1, 19008, 132, false, 8), 1);
    cr_assert_eq(reel_sample_split(1, 19008, 132, true, 1), 1);
}

static reel_ctx *ctx;
static void host_ctx(void)
{
    reel_ctx_opts o = REEL_CTX_OPTS_INIT;
    o.backend = REEL_BACKEND_HOST;
    cr_assert_eq(reel_ctx_create(&o, &ctx), REEL_OK);
}
static void host_ctx_end(void) { reel_ctx_destroy(ctx); }

static void expect_refused(reel_dtype ldt, int lnd, int64_t pw, reel_dtype pdt, int64_t rw, reel_dtype rdt,
                           reel_status want, const char *needle)
{
    reel_graph *g;
    cr_assert_eq(reel_graph_create(ctx, &g), REEL_OK);
    const int64_t ld[2] = { REEL_DIM_TOKENS, 32 }, ldc[2] = { 4, 32 };
    reel_tensor lg = lnd ? reel_input(g, "logits", ldt, 2, ld) : reel_param(g, "logits", ldt, 2, ldc);
    reel_tensor p = reel_input(g, "params", pdt, 2, (int64_t[]){ REEL_DIM_TOKENS, pw });
    reel_tensor r = reel_input(g, "rng", rdt, 2, (int64_t[]){ REEL_DIM_TOKENS, rw });
    reel_tensor y = reel_sample(g, lg, p, r);
    cr_assert_eq(y.id, 0u);
    cr_assert_eq(reel_graph_status(g), want, "%s", reel_ctx_last_error(ctx));
    const char *msg = reel_ctx_last_error(ctx);
    cr_assert(strstr(msg, "op 'sample'") && strstr(msg, needle), "message: %s", msg);
    reel_graph_destroy(g);
}

Test(sample, builder_refuses_bad_shapes_and_dtypes_naming_the_op, .init = host_ctx, .fini = host_ctx_end)
{
    expect_refused(REEL_I32, 1, 4, REEL_F32, 4, REEL_I32, REEL_E_DTYPE, "logits must be f32, f16 or bf16");
    expect_refused(REEL_F32, 0, 4, REEL_F32, 4, REEL_I32, REEL_E_SHAPE, "logits must have a token dim");
    expect_refused(REEL_BF16, 1, 3, REEL_F32, 4, REEL_I32, REEL_E_SHAPE, "params[1] = 3 must be 4");
    expect_refused(REEL_BF16, 1, 4, REEL_F16, 4, REEL_I32, REEL_E_DTYPE, "params must be f32");
    expect_refused(REEL_BF16, 1, 4, REEL_F32, 2, REEL_I32, REEL_E_SHAPE, "rng[1] = 2 must be 4");
    expect_refused(REEL_BF16, 1, 4, REEL_F32, 4, REEL_F32, REEL_E_DTYPE, "rng must be i32");
    reel_graph *g;
    cr_assert_eq(reel_graph_create(ctx, &g), REEL_OK);
    reel_tensor big = reel_input(g, "logits", REEL_BF16, 2, (int64_t[]){ REEL_DIM_TOKENS, REEL_SAMPLE_MAX_VOCAB + 1 });
    reel_tensor p = reel_input(g, "params", REEL_F32, 2, (int64_t[]){ REEL_DIM_TOKENS, 4 });
    reel_tensor r = reel_input(g, "rng", REEL_I32, 2, (int64_t[]){ REEL_DIM_TOKENS, 4 });
    cr_assert_eq(reel_sample(g, big, p, r).id, 0u);
    cr_assert_eq(reel_graph_status(g), REEL_E_SHAPE);
    cr_assert(strstr(reel_ctx_last_error(ctx), "the vocabulary"), "%s", reel_ctx_last_error(ctx));
    reel_graph_destroy(g);
    cr_assert_eq(reel_sample(NULL, big, p, r).id, 0u);
}

/* Through a plan (the public API): the step's tokens are the kernel's. */
Test(sample, a_plan_samples_the_kernels_tokens_per_row, .init = host_ctx, .fini = host_ctx_end)
{
    reel_graph *g;
    cr_assert_eq(reel_graph_create(ctx, &g), REEL_OK);
    const int64_t V = 50;
    reel_tensor lg = reel_input(g, "logits", REEL_BF16, 2, (int64_t[]){ REEL_DIM_TOKENS, V });
    reel_tensor p = reel_input(g, "params", REEL_F32, 2, (int64_t[]){ REEL_DIM_TOKENS, REEL_SAMPLE_PARAMS });
    reel_tensor r = reel_input(g, "rng", REEL_I32, 2, (int64_t[]){ REEL_DIM_TOKENS, REEL_SAMPLE_RNG });
    cr_assert_eq(reel_output(g, "tokens", reel_sample(g, lg, p, r)), REEL_OK, "%s", reel_ctx_last_error(ctx));
    reel_plan *plan;
    cr_assert_eq(reel_compile(g, NULL, &plan), REEL_OK, "%s", reel_ctx_last_error(ctx));
    const int64_t T = 5;
    double x[5 * 50];
    uint16_t xb[5 * 50];
    float prm[5 * 4];
    int32_t rng[5 * 4], want[5];
    trng tr = { 3 };
    for (int64_t i = 0; i < T * V; i++) {
        x[i] = reel_bf16_to_f32(reel_f32_to_bf16((float)trng_uniform(&tr, -4, 4)));
        xb[i] = reel_f32_to_bf16((float)x[i]);
    }
    for (int t = 0; t < T; t++) {
        set_params(prm + t * 4, t == 0 ? 0.0f : 0.8f, t == 2 ? 0.7f : 1.0f, t == 3 ? 0.2f : 0.0f, t == 4 ? 5.0f : 0.0f);
        set_rng(rng + t * 4, 42, (uint64_t)t);
    }
    run_sample(REEL_BF16, T, V, x, prm, rng, want);
    cr_assert_eq(reel_plan_set_input(plan, "logits", xb, T), REEL_OK);
    cr_assert_eq(reel_plan_set_input(plan, "params", prm, T), REEL_OK);
    cr_assert_eq(reel_plan_set_input(plan, "rng", rng, T), REEL_OK);
    reel_step_info s = REEL_STEP_INFO_INIT;
    s.num_tokens = (int32_t)T;
    cr_assert_eq(reel_step(plan, &s), REEL_OK, "%s", reel_ctx_last_error(ctx));
    const void *out;
    int64_t rows;
    cr_assert_eq(reel_plan_output(plan, "tokens", &out, &rows), REEL_OK);
    cr_assert_eq(rows, T);
    cr_assert(!memcmp(out, want, sizeof want), "the plan's tokens differ from the kernel's");
    reel_plan_destroy(plan);
    reel_graph_destroy(g);
}
