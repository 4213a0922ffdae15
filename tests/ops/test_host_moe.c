/* The mixture-of-experts ops on the host (ops/host/moe.c, ops/moe.h):
 * the shared exp and sigmoid against libm's double; routing against an
 * independent float64 reference with the same tie rules (softmax top-k with
 * and without renormalization as Mixtral and Qwen-MoE route; sigmoid with a
 * choice bias, groups and routed scaling as DeepSeek V3 does), exact ties,
 * NaN and group masking; the sorted layout's permutation, stability and
 * offsets, ids out of range, every pair on one expert; the FFN ops against
 * float64 op by op and end to end in every float dtype, an expert no token
 * chose. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/ops/host_ref.h"
#include "tests/ops/moe_ref.h"
#include "ops/moe.h"

/* ---- the shared exp ------------------------------------------------------ */

static double ulp_of(double v)
{
    int e;
    frexp(v, &e);
    return ldexp(1.0, (e - 24 < -149 ? -149 : e - 24));
}

Test(moe, exp_is_within_one_ulp_of_the_true_exp_over_the_float_range)
{
    double worst = 0.0;
    for (uint64_t u = 0; u <= 0xffffffffu; u += 997) { /* every 997th float */
        float a = reel_moe_from_bits((uint32_t)u);
        if (!(fabsf(a) < 88.0f))
            continue;
        double want = exp((double)a), got = reel_moe_exp(a);
        double err = fabs(got - want) / ulp_of(want);
        if (err > worst)
            worst = err;
    }
    cr_assert_leq(worst, 1.0, "reel_moe_exp is %.3f ulp off", worst);
}

Test(moe, exp_handles_its_special_values)
{
    cr_assert_eq(reel_moe_exp(0.0f), 1.0f);
    cr_assert_eq(reel_moe_exp(-0.0f), 1.0f);
    cr_assert_eq(reel_moe_exp(-INFINITY), 0.0f);
    cr_assert(isinf(reel_moe_exp(INFINITY)) && reel_moe_exp(INFINITY) > 0);
    cr_assert(isnan(reel_moe_exp(NAN)));
    cr_assert(isinf(reel_moe_exp(89.0f)), "exp(89) overflows float");
    cr_assert_eq(reel_moe_exp(-110.0f), 0.0f);
    /* A subnormal result is rounded once: exp(-100) = 3.72e-44. */
    cr_assert_float_eq(reel_moe_exp(-100.0f), (float)exp(-100.0), 1.5e-45);
    cr_assert_eq(reel_moe_sigmoid(0.0f), 0.5f);
    cr_assert_eq(reel_moe_sigmoid(-100.0f), 0.0f);
    cr_assert_eq(reel_moe_sigmoid(100.0f), 1.0f);
    cr_assert(isnan(reel_moe_sigmoid(NAN)));
}

Test(moe, sigmoid_is_within_two_and_a_half_ulp_of_the_true_sigmoid)
{
    double worst = 0.0;
    for (int i = -80000; i <= 80000; i++) {
        float x = (float)i * 1e-3f;
        double want = 1.0 / (1.0 + exp(-(double)x)), got = reel_moe_sigmoid(x);
        double err = fabs(got - want) / ulp_of(want);
        if (err > worst)
            worst = err;
    }
    cr_assert_leq(worst, 2.5, "reel_moe_sigmoid is %.3f ulp off", worst);
}

/* ---- routing ------------------------------------------------------------- */

typedef struct moe_cfg {
    int E, K, scoring, ng, tg;
    bool renorm;
    float scaling;
} moe_cfg;

static void set_attrs(reel_op_attrs *a, const moe_cfg *c)
{
    a->moe.num_experts = c->E;
    a->moe.top_k = c->K;
    a->moe.scoring = c->scoring;
    a->moe.n_group = c->ng > 1 ? c->ng : 0;
    a->moe.topk_group = c->ng > 1 ? c->tg : 0;
    a->moe.renormalize = c->renorm;
    a->moe.routed_scaling = c->scaling == 0.0f ? 1.0f : c->scaling;
}

/* The route kernel over T rows of logits (dtype of lg), twice with the
 * outputs poisoned two ways: both runs must agree (every element written). */
static void run_route(const moe_cfg *c, int64_t T, const tbuf *lg, const float *bias, int32_t *ids, float *w)
{
    tlaunch L;
    tlaunch_init(&L, REEL_OP_MOE_ROUTE, T);
    set_attrs(&L.attrs, c);
    L.in[0] = tshape(lg->dt, true, 2, 0, c->E, 0, 0);
    if (bias)
        L.in[1] = tshape(REEL_F32, false, 1, c->E, 0, 0, 0);
    L.out[0] = tshape(REEL_I32, true, 2, 0, c->K, 0, 0);
    L.out[1] = tshape(REEL_F32, true, 2, 0, c->K, 0, 0);
    L.l.in[0] = lg->p;
    L.l.in[1] = (void *)bias;
    L.l.out[0] = ids;
    L.l.out[1] = w;
    size_t n = (size_t)(T * c->K);
    int32_t *ids1 = malloc(n * sizeof *ids1);
    float *w1 = malloc(n * sizeof *w1);
    memset(ids, 0x5A, n * sizeof *ids), memset(w, 0x5A, n * sizeof *w);
    reel_host_moe_route(&L.l);
    memcpy(ids1, ids, n * sizeof *ids), memcpy(w1, w, n * sizeof *w);
    memset(ids, 0xA5, n * sizeof *ids), memset(w, 0xA5, n * sizeof *w);
    reel_host_moe_route(&L.l);
    cr_assert(!memcmp(ids1, ids, n * sizeof *ids) && !memcmp(w1, w, n * sizeof *w), "route depends on the poison");
    free(ids1), free(w1);
}

/* The reference router (tests/ops/moe_ref.h) of a configuration. */
static double ref_route(const moe_cfg *c, const double *l, const float *bias, int32_t *ids, double *w)
{
    reel_moe_params p = REEL_MOE_PARAMS_INIT;
    p.num_experts = c->E;
    p.top_k = c->K;
    p.scoring = c->scoring;
    p.n_group = c->ng;
    p.topk_group = c->tg;
    p.renormalize = c->renorm;
    p.routed_scaling = c->scaling;
    return moe_ref_route(&p, bias, l, ids, w);
}

/* T random tokens routed by the kernel and by the reference: the same
 * experts in the same order, weights within float error. A token whose
 * reference decisions come closer than 1e-5 (where float rounding may
 * decide) is drawn again. */
static void check_random_routing(const moe_cfg *c, reel_dtype dt, int64_t T, uint64_t seed, double lo, double hi,
                                 double bias_span)
{
    trng r = { seed };
    tbuf lg = tbuf_new(dt, T * c->E);
    float *bias = NULL;
    if (bias_span > 0) {
        bias = malloc((size_t)c->E * sizeof *bias);
        for (int e = 0; e < c->E; e++)
            bias[e] = (float)trng_uniform(&r, -bias_span, bias_span);
    }
    int32_t rid[16];
    double rw[16];
    for (int64_t t = 0; t < T; t++) {
        for (int tries = 0;; tries++) {
            cr_assert_lt(tries, 100, "no well-separated token after 100 draws");
            for (int e = 0; e < c->E; e++)
                tbuf_set(&lg, t * c->E + e, trng_uniform(&r, lo, hi));
            if (ref_route(c, lg.ref + t * c->E, bias, rid, rw) > 1e-5)
                break;
        }
    }
    int32_t *ids = malloc((size_t)(T * c->K) * sizeof *ids);
    float *w = malloc((size_t)(T * c->K) * sizeof *w);
    run_route(c, T, &lg, bias, ids, w);
    for (int64_t t = 0; t < T; t++) {
        ref_route(c, lg.ref + t * c->E, bias, rid, rw);
        for (int j = 0; j < c->K; j++) {
            cr_assert_eq(ids[t * c->K + j], rid[j], "E=%d K=%d %s: token %lld choice %d is %d, want %d", c->E, c->K,
                         dt_name(dt), (long long)t, j, ids[t * c->K + j], rid[j]);
            double g = w[t * c->K + j];
            cr_assert(fabs(g - rw[j]) <= 1e-7 + 4e-6 * fabs(rw[j]), "token %lld weight %d is %.9g, want %.9g",
                      (long long)t, j, g, rw[j]);
        }
    }
    free(ids), free(w), free(bias);
    tbuf_free(&lg);
}

Test(moe, softmax_routing_matches_float64_with_and_without_renormalization)
{
    const moe_cfg mixtral = { .E = 8, .K = 2, .renorm = true };
    const moe_cfg qwen2 = { .E = 60, .K = 4, .renorm = false };
    const moe_cfg qwen3 = { .E = 128, .K = 8, .renorm = true };
    for (int di = 0; di < 3; di++) {
        check_random_routing(&mixtral, float_dtypes[di], 40, 11 + di, -4, 4, 0);
        check_random_routing(&qwen2, float_dtypes[di], 40, 21 + di, -4, 4, 0);
        check_random_routing(&qwen3, float_dtypes[di], 40, 31 + di, -6, 6, 0);
    }
    const moe_cfg scaled = { .E = 16, .K = 3, .renorm = false, .scaling = 0.75f };
    check_random_routing(&scaled, REEL_F32, 40, 41, -3, 3, 0);
}

Test(moe, sigmoid_routing_with_bias_groups_and_scaling_matches_float64)
{
    const moe_cfg v3 = { .E = 256, .K = 8, .scoring = REEL_MOE_SIGMOID, .ng = 8, .tg = 4, .renorm = true,
                         .scaling = 2.5f };
    const moe_cfg small = { .E = 16, .K = 4, .scoring = REEL_MOE_SIGMOID, .ng = 4, .tg = 2, .renorm = true,
                            .scaling = 1.5f };
    const moe_cfg plain = { .E = 32, .K = 6, .scoring = REEL_MOE_SIGMOID, .renorm = false };
    check_random_routing(&v3, REEL_F32, 48, 51, -5, 5, 0.5);
    check_random_routing(&v3, REEL_BF16, 48, 52, -5, 5, 0.5);
    check_random_routing(&small, REEL_F32, 64, 53, -4, 4, 0.3);
    check_random_routing(&small, REEL_F16, 64, 54, -4, 4, 0.3);
    check_random_routing(&plain, REEL_F32, 64, 55, -4, 4, 0.0);
    check_random_routing(&plain, REEL_F32, 64, 56, -4, 4, 0.2);
}

Test(moe, softmax_routing_with_groups_keeps_the_groups_of_the_best_score_pairs)
{
    const moe_cfg c = { .E = 64, .K = 6, .ng = 8, .tg = 3, .renorm = true };
    check_random_routing(&c, REEL_F32, 64, 61, -4, 4, 0);
}

/* One token of E logits (f32) routed; returns ids and weights. */
static void route_one(const moe_cfg *c, const float *logits, const float *bias, int32_t *ids, float *w)
{
    tbuf lg = tbuf_new(REEL_F32, c->E);
    memcpy(lg.p, logits, (size_t)c->E * sizeof(float));
    run_route(c, 1, &lg, bias, ids, w);
    tbuf_free(&lg);
}

Test(moe, equal_logits_go_to_the_lower_expert_id)
{
    int32_t ids[8];
    float w[8];
    const float flat[8] = { 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f };
    moe_cfg c = { .E = 8, .K = 3 };
    route_one(&c, flat, NULL, ids, w);
    for (int j = 0; j < 3; j++) {
        cr_assert_eq(ids[j], j);
        cr_assert_eq(w[j], 0.125f, "weight %d is %a: 1/8 exactly", j, (double)w[j]);
    }
    c.renorm = true;
    route_one(&c, flat, NULL, ids, w);
    cr_assert(w[0] == w[1] && w[1] == w[2] && fabsf(w[0] - 1.0f / 3) < 1e-7f);
    const float some[8] = { 1, 3, 3, 2, 3, 0, -1, 3 };
    c.renorm = false;
    route_one(&c, some, NULL, ids, w);
    cr_assert(ids[0] == 1 && ids[1] == 2 && ids[2] == 4, "got %d %d %d", ids[0], ids[1], ids[2]);
    c.scoring = REEL_MOE_SIGMOID;
    route_one(&c, some, NULL, ids, w);
    cr_assert(ids[0] == 1 && ids[1] == 2 && ids[2] == 4, "sigmoid: got %d %d %d", ids[0], ids[1], ids[2]);
    /* -0 equals +0. */
    const float zeros[2] = { -0.0f, 0.0f };
    moe_cfg two = { .E = 2, .K = 2 };
    route_one(&two, zeros, NULL, ids, w);
    cr_assert(ids[0] == 0 && ids[1] == 1);
    const float zeros_r[2] = { 0.0f, -0.0f };
    route_one(&two, zeros_r, NULL, ids, w);
    cr_assert(ids[0] == 0 && ids[1] == 1);
}

Test(moe, equal_group_scores_keep_the_lower_group_id)
{
    int32_t ids[4];
    float w[4];
    const float flat[8] = { 1, 1, 1, 1, 1, 1, 1, 1 };
    for (int sc = 0; sc < 2; sc++) {
        moe_cfg c = { .E = 8, .K = 4, .scoring = sc, .ng = 4, .tg = 2 };
        route_one(&c, flat, NULL, ids, w);
        for (int j = 0; j < 4; j++)
            cr_assert_eq(ids[j], j, "scoring %d: choice %d is %d", sc, j, ids[j]);
    }
    /* Group 3 is best; groups 0..2 tie, so group 0 is the second kept. */
    const float one_best[8] = { 1, 1, 1, 1, 1, 1, 2, 2 };
    moe_cfg c = { .E = 8, .K = 4, .scoring = REEL_MOE_SIGMOID, .ng = 4, .tg = 2 };
    route_one(&c, one_best, NULL, ids, w);
    cr_assert(ids[0] == 6 && ids[1] == 7 && ids[2] == 0 && ids[3] == 1, "got %d %d %d %d", ids[0], ids[1], ids[2],
              ids[3]);
}

/* DeepSeek V3 masks the experts of dropped groups to choice 0.0 rather
 * than -inf: when kept experts' biased choices are negative, masked
 * experts (lowest ids first) are chosen over them, weighted by their
 * sigmoid score, never by 0 or the bias. */
Test(moe, masked_experts_at_zero_beat_kept_experts_with_negative_choices)
{
    moe_cfg c = { .E = 16, .K = 6, .scoring = REEL_MOE_SIGMOID, .ng = 4, .tg = 2, .renorm = false };
    float logits[16], bias[16];
    for (int e = 0; e < 16; e++) {
        logits[e] = -2.0f; /* groups 2 and 3: small positive choices */
        bias[e] = 0.0f;
    }
    const int high[4] = { 0, 1, 4, 5 }, neg[4] = { 2, 3, 6, 7 };
    for (int i = 0; i < 4; i++) {
        logits[high[i]] = 3.0f - 0.25f * (float)i;
        logits[neg[i]] = 1.0f;
        bias[neg[i]] = -2.0f; /* sigmoid(1) - 2 < 0 */
    }
    int32_t ids[6], rid[6];
    float w[6];
    double rw[6], l64[16];
    route_one(&c, logits, bias, ids, w);
    const int want[6] = { 0, 1, 4, 5, 8, 9 };
    for (int j = 0; j < 6; j++)
        cr_assert_eq(ids[j], want[j], "choice %d is %d, want %d", j, ids[j], want[j]);
    for (int e = 0; e < 16; e++)
        l64[e] = logits[e];
    ref_route(&c, l64, bias, rid, rw);
    for (int j = 0; j < 6; j++) {
        cr_assert_eq(rid[j], want[j], "the reference agrees");
        cr_assert(fabs(w[j] - rw[j]) < 1e-6, "weight %d is %g, want %g", j, (double)w[j], rw[j]);
    }
    cr_assert(fabsf(w[4] - 1.0f / (1.0f + expf(2.0f))) < 1e-6f, "a masked expert weighs its sigmoid score");
}

Test(moe, nan_logits_rank_below_every_number)
{
    int32_t ids[2];
    float w[2];
    const float l[4] = { NAN, -50.0f, NAN, -60.0f };
    moe_cfg c = { .E = 4, .K = 2, .scoring = REEL_MOE_SIGMOID };
    route_one(&c, l, NULL, ids, w);
    cr_assert(ids[0] == 1 && ids[1] == 3, "got %d %d", ids[0], ids[1]);
    cr_assert(!isnan(w[0]) && !isnan(w[1]));
    c.scoring = REEL_MOE_SOFTMAX;
    route_one(&c, l, NULL, ids, w);
    cr_assert(ids[0] == 1 && ids[1] == 3, "softmax: got %d %d", ids[0], ids[1]);
}

Test(moe, every_token_can_route_to_the_same_experts)
{
    const moe_cfg c = { .E = 32, .K = 8, .renorm = true };
    tbuf lg = tbuf_new(REEL_BF16, 64 * 32);
    for (int64_t t = 0; t < 64; t++)
        for (int e = 0; e < 32; e++)
            tbuf_set(&lg, t * 32 + e, e >= 20 && e < 28 ? 4.0 - 0.125 * (e - 20) : -1.0 - 0.01 * (double)t);
    int32_t ids[64 * 8];
    float w[64 * 8];
    run_route(&c, 64, &lg, NULL, ids, w);
    for (int64_t t = 0; t < 64; t++)
        for (int j = 0; j < 8; j++)
            cr_assert_eq(ids[t * 8 + j], 20 + j);
    tbuf_free(&lg);
}

/* ---- the sorted layout --------------------------------------------------- */

static void run_align(int E, int K, int64_t T, const int32_t *ids, int32_t *order, int32_t *where, int32_t *offsets,
                      int32_t *err)
{
    tlaunch L;
    tlaunch_init(&L, REEL_OP_MOE_ALIGN, T);
    L.attrs.moe.num_experts = E;
    L.attrs.moe.top_k = K;
    L.in[0] = tshape(REEL_I32, true, 2, 0, K, 0, 0);
    L.out[0] = L.out[1] = L.in[0];
    L.out[2] = tshape(REEL_I32, false, 1, E + 1, 0, 0, 0);
    reel_meta_view meta = { .err_word = err };
    L.l.meta = &meta;
    L.l.in[0] = (void *)ids;
    L.l.out[0] = order, L.l.out[1] = where, L.l.out[2] = offsets;
    size_t n = (size_t)(T * K);
    memset(order, 0x5A, n * 4), memset(where, 0x5A, n * 4), memset(offsets, 0x5A, (size_t)(E + 1) * 4);
    reel_host_moe_align(&L.l);
}

/* order and where are inverse permutations of 0..n-1; offsets ascend from
 * offsets[0] (the count of ids out of range) to n; each expert's rows hold
 * exactly its pairs in ascending pair index, and the rows before
 * offsets[0] hold the pairs out of range, also ascending. */
static void check_layout(int E, int K, int64_t T, const int32_t *ids, const int32_t *order, const int32_t *where,
                         const int32_t *offsets)
{
    int64_t n = T * K, bad = 0;
    for (int64_t p = 0; p < n; p++)
        bad += ids[p] < 0 || ids[p] >= E;
    cr_assert_eq(offsets[0], bad, "offsets[0] is %d, want %lld", offsets[0], (long long)bad);
    cr_assert_eq(offsets[E], n, "offsets[E] is %d, want T*K = %lld", offsets[E], (long long)n);
    for (int e = 0; e < E; e++)
        cr_assert_leq(offsets[e], offsets[e + 1], "offsets descend at %d", e);
    for (int64_t p = 0; p < n; p++) {
        cr_assert(where[p] >= 0 && where[p] < n, "where[%lld] = %d", (long long)p, where[p]);
        cr_assert_eq(order[where[p]], p, "order[where[%lld]] is not %lld", (long long)p, (long long)p);
    }
    for (int64_t r = 0; r < n; r++) {
        int32_t q = order[r];
        cr_assert(q >= 0 && q < n);
        int e = 0;
        while (e < E && offsets[e + 1] <= r)
            e++;
        if (r < offsets[0])
            cr_assert(ids[q] < 0 || ids[q] >= E, "row %lld before offsets[0] holds a valid pair", (long long)r);
        else
            cr_assert_eq(ids[q], e, "row %lld of expert %d holds a pair of expert %d", (long long)r, e, ids[q]);
        bool same_block = r > 0 && (r < offsets[0]) == (r - 1 < offsets[0]) &&
                          (r < offsets[0] || ids[order[r - 1]] == ids[q]);
        if (same_block)
            cr_assert_lt(order[r - 1], q, "rows %lld and %lld are not in pair order", (long long)r - 1, (long long)r);
    }
}

Test(moe, align_is_a_stable_sort_by_expert_with_exact_offsets)
{
    trng r = { 71 };
    const int E = 10, K = 4;
    const int64_t T = 37;
    int32_t ids[37 * 4], order[37 * 4], where[37 * 4], offsets[11], err = 0;
    for (int64_t p = 0; p < T * K; p++)
        ids[p] = (int32_t)trng_int(&r, 0, E - 1);
    run_align(E, K, T, ids, order, where, offsets, &err);
    check_layout(E, K, T, ids, order, where, offsets);
    cr_assert_eq(err, 0);
    /* Zero rows: offsets all 0. */
    run_align(E, K, 0, ids, order, where, offsets, &err);
    for (int e = 0; e <= E; e++)
        cr_assert_eq(offsets[e], 0);
}

Test(moe, align_puts_every_pair_on_one_expert_in_the_t_times_k_rows)
{
    const int E = 16, K = 8;
    const int64_t T = 64;
    int32_t ids[64 * 8], order[64 * 8], where[64 * 8], offsets[17], err = 0;
    for (int64_t p = 0; p < T * K; p++)
        ids[p] = 3;
    run_align(E, K, T, ids, order, where, offsets, &err);
    check_layout(E, K, T, ids, order, where, offsets);
    cr_assert(offsets[3] == 0 && offsets[4] == 512 && offsets[16] == 512);
    for (int64_t p = 0; p < T * K; p++)
        cr_assert_eq(order[p], p);
    cr_assert_eq(err, 0);
}

Test(moe, align_sets_ids_out_of_range_before_offsets_zero_and_reports_a_limit)
{
    const int E = 5, K = 2;
    const int64_t T = 6;
    int32_t ids[12] = { 0, 4, -1, 2, 5, 5, 1, INT32_MAX, 3, INT32_MIN, 2, 0 };
    int32_t order[12], where[12], offsets[6], err = 0;
    run_align(E, K, T, ids, order, where, offsets, &err);
    check_layout(E, K, T, ids, order, where, offsets);
    cr_assert_eq(offsets[0], 5);
    cr_assert_eq(err, REEL_E_LIMIT);
}

/* ---- the experts' MLP ---------------------------------------------------- */

typedef struct ffn_case {
    reel_dtype dt;
    int64_t T, H, F;
    int E, K;
    tbuf x, wgu, wdn;
    int32_t *ids;
    float *w;
    /* outputs */
    int32_t *order, *where, *offsets;
    tbuf act, ys, out;
    int32_t err;
} ffn_case;

static void ffn_new(ffn_case *c, reel_dtype dt, int64_t T, int64_t H, int64_t F, int E, int K, uint64_t seed)
{
    *c = (ffn_case){ .dt = dt, .T = T, .H = H, .F = F, .E = E, .K = K };
    trng r = { seed };
    c->x = tbuf_new(dt, T * H);
    c->wgu = tbuf_new(dt, (int64_t)E * 2 * F * H);
    c->wdn = tbuf_new(dt, (int64_t)E * H * F);
    tbuf_random(&c->x, &r, -1, 1);
    tbuf_random(&c->wgu, &r, -0.3, 0.3);
    tbuf_random(&c->wdn, &r, -0.3, 0.3);
    c->ids = calloc((size_t)(T * K), sizeof *c->ids);
    c->w = calloc((size_t)(T * K), sizeof *c->w);
    for (int64_t t = 0; t < T; t++) /* K distinct experts a token */
        for (int j = 0; j < K; j++) {
            int32_t e;
            bool dup;
            do {
                e = (int32_t)trng_int(&r, 0, E - 1);
                dup = false;
                for (int i = 0; i < j; i++)
                    dup = dup || c->ids[t * K + i] == e;
            } while (dup);
            c->ids[t * K + j] = e;
            c->w[t * K + j] = (float)trng_uniform(&r, 0.05, 1.0);
        }
    c->order = calloc((size_t)(T * K), 4);
    c->where = calloc((size_t)(T * K), 4);
    c->offsets = calloc((size_t)E + 1, 4);
    c->act = tbuf_new(dt, T * K * F);
    c->ys = tbuf_new(dt, T * K * H);
    c->out = tbuf_new(dt, T * H);
}

static void ffn_free(ffn_case *c)
{
    tbuf_free(&c->x), tbuf_free(&c->wgu), tbuf_free(&c->wdn);
    tbuf_free(&c->act), tbuf_free(&c->ys), tbuf_free(&c->out);
    free(c->ids), free(c->w), free(c->order), free(c->where), free(c->offsets);
}

static void ffn_launch(ffn_case *c, tlaunch *L, reel_op_kind k, reel_meta_view *meta)
{
    tlaunch_init(L, k, c->T);
    L->attrs.moe.num_experts = c->E;
    L->attrs.moe.top_k = c->K;
    L->l.meta = meta;
}

/* align, gate_up, down and combine in turn, every output poisoned first;
 * each kernel runs twice (poisoned two ways) and must agree. */
static void ffn_run(ffn_case *c)
{
    reel_meta_view meta = { .err_word = &c->err };
    run_align(c->E, c->K, c->T, c->ids, c->order, c->where, c->offsets, &c->err);
    const reel_shape offs = tshape(REEL_I32, false, 1, c->E + 1, 0, 0, 0);
    const reel_shape pairs = tshape(REEL_I32, true, 2, 0, c->K, 0, 0);
    tlaunch L;
    tbuf *outs[3] = { &c->act, &c->ys, &c->out };
    for (int stage = 0; stage < 3; stage++) {
        if (stage == 0) {
            ffn_launch(c, &L, REEL_OP_MOE_GATE_UP, &meta);
            L.in[0] = tshape(c->dt, true, 2, 0, c->H, 0, 0), L.in[1] = pairs, L.in[2] = offs;
            L.in[3] = tshape(c->dt, false, 2, c->E * 2 * c->F, c->H, 0, 0);
            L.out[0] = tshape(c->dt, true, 3, 0, c->K, c->F, 0);
            L.l.in[0] = c->x.p, L.l.in[1] = c->order, L.l.in[2] = c->offsets, L.l.in[3] = c->wgu.p;
        } else if (stage == 1) {
            ffn_launch(c, &L, REEL_OP_MOE_DOWN, &meta);
            L.in[0] = tshape(c->dt, true, 3, 0, c->K, c->F, 0), L.in[1] = offs;
            L.in[2] = tshape(c->dt, false, 2, c->E * c->H, c->F, 0, 0);
            L.out[0] = tshape(c->dt, true, 3, 0, c->K, c->H, 0);
            L.l.in[0] = c->act.p, L.l.in[1] = c->offsets, L.l.in[2] = c->wdn.p;
        } else {
            ffn_launch(c, &L, REEL_OP_MOE_COMBINE, &meta);
            L.in[0] = tshape(c->dt, true, 3, 0, c->K, c->H, 0), L.in[1] = pairs;
            L.in[2] = tshape(REEL_F32, true, 2, 0, c->K, 0, 0);
            L.out[0] = tshape(c->dt, true, 2, 0, c->H, 0, 0);
            L.l.in[0] = c->ys.p, L.l.in[1] = c->where, L.l.in[2] = c->w;
        }
        tbuf *o = outs[stage];
        size_t bytes = (size_t)o->n * reel_storage_size(c->dt);
        void *first = malloc(bytes ? bytes : 1);
        L.l.out[0] = o->p;
        memset(o->p, 0x5A, bytes);
        void (*fn[3])(const void *) = { reel_host_moe_gate_up, reel_host_moe_down, reel_host_moe_combine };
        fn[stage](&L.l);
        memcpy(first, o->p, bytes);
        memset(o->p, 0xA5, bytes);
        fn[stage](&L.l);
        cr_assert(!memcmp(first, o->p, bytes), "stage %d output depends on the poison: not fully written", stage);
        free(first);
        for (int64_t i = 0; i < o->n; i++)
            o->ref[i] = tbuf_get(o, i);
    }
}

static double round_dt(reel_dtype dt, double v) { return reel_round_to(dt, (float)v); }

static double silu64(double g) { return g / (1.0 + exp(-g)); }

/* The activation row of token t through expert e (float64, g and u and the
 * product rounded to the dtype as the op says). */
static void ref_act(const ffn_case *c, int64_t t, int e, double *a)
{
    for (int64_t i = 0; i < c->F; i++) {
        double g = 0, u = 0;
        for (int64_t h = 0; h < c->H; h++) {
            g += c->x.ref[t * c->H + h] * c->wgu.ref[((int64_t)e * 2 * c->F + i) * c->H + h];
            u += c->x.ref[t * c->H + h] * c->wgu.ref[((int64_t)e * 2 * c->F + c->F + i) * c->H + h];
        }
        a[i] = round_dt(c->dt, silu64(round_dt(c->dt, g)) * round_dt(c->dt, u));
    }
}

/* Expert e's down projection of activation row a. */
static void ref_down(const ffn_case *c, int e, const double *a, double *y)
{
    for (int64_t h = 0; h < c->H; h++) {
        double s = 0;
        for (int64_t i = 0; i < c->F; i++)
            s += a[i] * c->wdn.ref[((int64_t)e * c->H + h) * c->F + i];
        y[h] = round_dt(c->dt, s);
    }
}

static double max_abs(const double *v, int64_t n)
{
    double m = 0;
    for (int64_t i = 0; i < n; i++)
        m = fabs(v[i]) > m ? fabs(v[i]) : m;
    return m;
}

/* Each op against float64 given the kernel's own inputs (act from x, ys
 * from the kernel's act, out from the kernel's ys), then end to end. A
 * pair whose id is out of range must add nothing. */
static void ffn_check(ffn_case *c)
{
    const int64_t T = c->T, H = c->H, F = c->F, n = T * c->K;
    const double rtol = 2 * tol_of(c->dt);
    double *act = calloc((size_t)(n * F), sizeof(double)), *ys = calloc((size_t)(n * H), sizeof(double));
    double *out = calloc((size_t)(T * H), sizeof(double)), *e2e = calloc((size_t)(T * H), sizeof(double));
    double *ya = calloc((size_t)H, sizeof(double));
    for (int64_t p = 0; p < n; p++) {
        const int64_t r = c->where[p], t = p / c->K;
        const int e = c->ids[p];
        if (e < 0 || e >= c->E)
            continue; /* zeros */
        ref_act(c, t, e, act + r * F);
        ref_down(c, e, c->act.ref + r * F, ys + r * H);
        ref_down(c, e, act + r * F, ya);
        for (int64_t h = 0; h < H; h++)
            e2e[t * H + h] += c->w[p] * ya[h];
    }
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < H; h++) {
            for (int j = 0; j < c->K; j++)
                out[t * H + h] += c->w[t * c->K + j] * c->ys.ref[(int64_t)c->where[t * c->K + j] * H + h];
            out[t * H + h] = round_dt(c->dt, out[t * H + h]);
            e2e[t * H + h] = round_dt(c->dt, e2e[t * H + h]);
        }
    check_close("act", &c->act, act, n * F, rtol * max_abs(act, n * F), rtol);
    check_close("ys", &c->ys, ys, n * H, rtol * max_abs(ys, n * H), rtol);
    check_close("out", &c->out, out, T * H, rtol * max_abs(out, T * H), rtol);
    /* End to end: the roundings of bf16 intermediates may fall differently. */
    double rt = c->dt == REEL_F32 ? 1e-4 : 4 * rtol;
    check_close("end to end", &c->out, e2e, T * H, rt * max_abs(e2e, T * H), rt);
    free(act), free(ys), free(out), free(e2e), free(ya);
}

Test(moe, ffn_ops_match_float64_in_every_dtype)
{
    for (int di = 0; di < 3; di++) {
        ffn_case c;
        ffn_new(&c, float_dtypes[di], 23, 32, 16, 8, 3, 81 + di);
        ffn_run(&c);
        ffn_check(&c);
        cr_assert_eq(c.err, 0);
        ffn_free(&c);
    }
}

Test(moe, an_expert_no_token_chose_is_skipped_and_every_row_is_still_written)
{
    ffn_case c;
    ffn_new(&c, REEL_F32, 9, 16, 8, 6, 2, 91);
    for (int64_t p = 0; p < 18; p++) /* no pair on expert 3 or 5 */
        c.ids[p] = (int32_t)((p % 2 == 0) ? (p / 2) % 3 : 4);
    ffn_run(&c);
    cr_assert_eq(c.offsets[3], c.offsets[4], "expert 3 has rows");
    cr_assert_eq(c.offsets[5], c.offsets[6], "expert 5 has rows");
    ffn_check(&c);
    cr_assert_eq(c.err, 0);
    ffn_free(&c);
}

Test(moe, ffn_with_every_pair_on_one_expert_matches_float64)
{
    ffn_case c;
    ffn_new(&c, REEL_BF16, 64, 16, 8, 8, 8, 101);
    for (int64_t p = 0; p < 64 * 8; p++) {
        c.ids[p] = 5;
        c.w[p] = 0.125f;
    }
    ffn_run(&c);
    cr_assert(c.offsets[5] == 0 && c.offsets[6] == 512);
    ffn_check(&c);
    ffn_free(&c);
}

Test(moe, a_pair_with_an_id_out_of_range_adds_nothing_and_reports_a_limit)
{
    ffn_case c;
    ffn_new(&c, REEL_F16, 7, 16, 8, 4, 2, 111);
    c.ids[3] = -1;
    c.ids[8] = 4;
    c.ids[13] = 1000;
    ffn_run(&c);
    cr_assert_eq(c.offsets[0], 3);
    cr_assert_eq(c.err, REEL_E_LIMIT);
    for (int64_t r = 0; r < 3; r++)
        for (int64_t h = 0; h < c.H; h++)
            cr_assert_eq(c.ys.ref[r * c.H + h], 0.0, "row %lld of no expert is not zero", (long long)r);
    ffn_check(&c);
    ffn_free(&c);
}

/* Sorted rows hold the same values wherever they land: the result of a
 * token does not depend on the other tokens of the batch. */
Test(moe, a_token_result_does_not_depend_on_its_batch)
{
    ffn_case a, b;
    ffn_new(&a, REEL_BF16, 12, 16, 8, 6, 2, 121);
    ffn_new(&b, REEL_BF16, 1, 16, 8, 6, 2, 131);
    const int64_t t = 7;
    memcpy(b.wgu.p, a.wgu.p, (size_t)a.wgu.n * 2), memcpy(b.wdn.p, a.wdn.p, (size_t)a.wdn.n * 2);
    memcpy(b.x.p, (uint16_t *)a.x.p + t * 16, 16 * 2);
    memcpy(b.ids, a.ids + t * 2, 2 * 4), memcpy(b.w, a.w + t * 2, 2 * 4);
    ffn_run(&a);
    ffn_run(&b);
    cr_assert(!memcmp((uint16_t *)a.out.p + t * 16, b.out.p, 16 * 2), "token 7 alone differs from token 7 of 12");
    ffn_free(&a), ffn_free(&b);
}
