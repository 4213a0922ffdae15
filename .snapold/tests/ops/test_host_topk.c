/* Host top-k: candidates are non-NaN scores before the row's length; -inf
 * is a candidate; fewer than k give -1 after the valid ones; ties compared as
 * sets plus the boundary value; the page transform keeps -1 and never reads
 * the page table out of its row. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/ops/host_ref.h"

typedef struct topk_case {
    int64_t T, N, k, P;
    int page_size;
    float *scores;
    int32_t *lengths, *pages, *out;
    int32_t err;
} topk_case;

static void topk_new(topk_case *c, int64_t T, int64_t N, int64_t k, int64_t P, int page_size)
{
    *c = (topk_case){ .T = T, .N = N, .k = k, .P = P, .page_size = page_size };
    c->scores = calloc((size_t)(T * N), sizeof(float));
    c->lengths = calloc((size_t)T, sizeof(int32_t));
    c->pages = calloc((size_t)(T * (P > 0 ? P : 1)), sizeof(int32_t));
    c->out = calloc((size_t)(T * k), sizeof(int32_t));
}

static void topk_free(topk_case *c)
{
    free(c->scores), free(c->lengths), free(c->pages), free(c->out);
}

/* Runs with the output poisoned two ways; both runs must agree, so every
 * element (including the -1 padding) was written. */
static void topk_run(topk_case *c)
{
    tlaunch L;
    tlaunch_init(&L, REEL_OP_TOPK, c->T);
    L.attrs.topk.k = (int)c->k;
    L.attrs.topk.page_size = c->page_size;
    L.attrs.topk.has_page_table = c->P > 0;
    L.in[0] = tshape(REEL_F32, true, 2, 0, c->N, 0, 0);
    L.in[1] = tshape(REEL_I32, true, 1, 0, 0, 0, 0);
    if (c->P > 0)
        L.in[2] = tshape(REEL_I32, true, 2, 0, c->P, 0, 0);
    L.out[0] = tshape(REEL_I32, true, 2, 0, c->k, 0, 0);
    reel_meta_view meta = { .err_word = &c->err };
    L.l.meta = &meta;
    L.l.in[0] = c->scores;
    L.l.in[1] = c->lengths;
    L.l.in[2] = c->P > 0 ? c->pages : NULL;
    L.l.out[0] = c->out;
    size_t bytes = (size_t)(c->T * c->k) * sizeof(int32_t);
    int32_t *first = malloc(bytes);
    memset(c->out, 0xFF, bytes);
    reel_host_topk(&L.l);
    memcpy(first, c->out, bytes);
    memset(c->out, 0x5A, bytes);
    reel_host_topk(&L.l);
    cr_assert(!memcmp(first, c->out, bytes), "top-k output depends on the poison: not fully written");
    free(first);
}

static int cmp_desc(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x < y) - (x > y);
}

/* Checks row t of an unpaged run: distinct valid candidates, best first,
 * the selection's boundary value is the k-th best candidate, nothing left
 * out beats it, and -1 after the candidates run out. */
static void topk_check_row(const topk_case *c, int64_t t)
{
    const float *sc = c->scores + t * c->N;
    const int32_t *o = c->out + t * c->k;
    int64_t len = c->lengths[t] < 0 ? 0 : (c->lengths[t] > c->N ? c->N : c->lengths[t]);
    float *cand = malloc((size_t)(len > 0 ? len : 1) * sizeof(float));
    int64_t nc = 0;
    for (int64_t j = 0; j < len; j++)
        if (!isnan(sc[j]))
            cand[nc++] = sc[j];
    qsort(cand, (size_t)nc, sizeof(float), cmp_desc);
    int64_t want = nc < c->k ? nc : c->k;
    bool *picked = calloc((size_t)(c->N > 0 ? c->N : 1), sizeof(bool));
    for (int64_t i = 0; i < c->k; i++) {
        if (i >= want) {
            cr_assert_eq(o[i], -1, "row %lld slot %lld: %d past the %lld candidates, want -1", (long long)t,
                         (long long)i, o[i], (long long)nc);
            continue;
        }
        cr_assert(o[i] >= 0 && o[i] < len, "row %lld slot %lld: index %d outside [0, %lld)", (long long)t,
                  (long long)i, o[i], (long long)len);
        cr_assert(!isnan(sc[o[i]]), "row %lld: NaN score at %d selected", (long long)t, o[i]);
        cr_assert(!picked[o[i]], "row %lld: index %d selected twice", (long long)t, o[i]);
        picked[o[i]] = true;
        if (i > 0)
            cr_assert(sc[o[i]] <= sc[o[i - 1]], "row %lld: not best first at slot %lld", (long long)t, (long long)i);
    }
    if (want > 0) {
        float bound = cand[want - 1];
        cr_assert(sc[o[want - 1]] == bound, "row %lld: boundary %g, want %g", (long long)t,
                  (double)sc[o[want - 1]], (double)bound);
        for (int64_t j = 0; j < len; j++)
            if (!picked[j] && !isnan(sc[j]))
                cr_assert(sc[j] <= bound, "row %lld: %lld (score %g) left out above the boundary %g",
                          (long long)t, (long long)j, (double)sc[j], (double)bound);
    }
    free(cand), free(picked);
}

Test(ops, topk_selects_the_best_candidates_of_random_rows_with_ties)
{
    trng r = { 31 };
    topk_case c;
    topk_new(&c, 7, 300, 16, 0, 0);
    const int32_t lens[7] = { 300, 0, 10, -5, 1000, 150, 17 };
    for (int64_t i = 0; i < c.T * c.N; i++) /* 41 distinct values: many ties */
        c.scores[i] = (float)trng_int(&r, -20, 20) * 0.25f;
    for (int64_t i = 0; i < c.N; i += 7)
        c.scores[5 * c.N + i] = NAN;
    for (int64_t t = 0; t < c.T; t++)
        c.lengths[t] = lens[t];
    topk_run(&c);
    cr_assert_eq(c.err, 0);
    for (int64_t t = 0; t < c.T; t++)
        topk_check_row(&c, t);
    topk_free(&c);
}

Test(ops, topk_keeps_neg_inf_as_a_candidate_and_pads_short_rows_with_minus_one)
{
    topk_case c;
    topk_new(&c, 1, 12, 6, 0, 0);
    for (int j = 0; j < 12; j++)
        c.scores[j] = -INFINITY;
    c.scores[2] = 1.0f, c.scores[5] = -3.0f, c.scores[7] = 0.5f;
    c.scores[10] = 99.0f, c.scores[11] = 98.0f; /* past the length: never selected */
    c.lengths[0] = 9;
    topk_run(&c);
    const int32_t head[3] = { 2, 7, 5 };
    for (int i = 0; i < 3; i++)
        cr_assert_eq(c.out[i], head[i], "slot %d is %d, want %d", i, c.out[i], head[i]);
    for (int i = 3; i < 6; i++)
        cr_assert(c.out[i] >= 0 && c.out[i] < 9 && c.scores[c.out[i]] == -INFINITY,
                  "slot %d is %d: a -inf candidate before the length is valid", i, c.out[i]);
    topk_check_row(&c, 0);
    topk_free(&c);
}

Test(ops, topk_never_selects_nan_and_gives_minus_one_for_missing_candidates)
{
    topk_case c;
    topk_new(&c, 2, 6, 4, 0, 0);
    const float s[12] = { NAN, 1, NAN, 2, NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN };
    memcpy(c.scores, s, sizeof s);
    c.lengths[0] = 6, c.lengths[1] = 6;
    topk_run(&c);
    const int32_t want[8] = { 3, 1, -1, -1, -1, -1, -1, -1 };
    for (int i = 0; i < 8; i++)
        cr_assert_eq(c.out[i], want[i], "slot %d is %d, want %d", i, c.out[i], want[i]);
    topk_free(&c);
}

Test(ops, topk_with_k_over_the_row_width_returns_every_candidate_then_minus_one)
{
    topk_case c;
    topk_new(&c, 1, 5, 8, 0, 0);
    for (int j = 0; j < 5; j++)
        c.scores[j] = 3.0f; /* all tied */
    c.lengths[0] = 5;
    topk_run(&c);
    topk_check_row(&c, 0);
    cr_assert_eq(c.out[5], -1);
    topk_free(&c);
}

Test(ops, topk_page_transform_maps_indices_and_keeps_minus_one)
{
    topk_case c;
    topk_new(&c, 2, 12, 6, 3, 4);
    for (int j = 0; j < 12; j++)
        c.scores[j] = (float)j, c.scores[12 + j] = (float)(20 - j);
    c.lengths[0] = 12, c.lengths[1] = 4;
    const int32_t pt[6] = { 5, 9, 2, 7, 1, 1 };
    memcpy(c.pages, pt, sizeof pt);
    topk_run(&c);
    /* Row 0 picks 11..6: pages 2 and 1 -> 2*4+3.., 9*4+.. */
    const int32_t want0[6] = { 2 * 4 + 3, 2 * 4 + 2, 2 * 4 + 1, 2 * 4 + 0, 9 * 4 + 3, 9 * 4 + 2 };
    /* Row 1 has 4 candidates, 0..3 on page 7, then -1 (never looked up). */
    const int32_t want1[6] = { 7 * 4 + 0, 7 * 4 + 1, 7 * 4 + 2, 7 * 4 + 3, -1, -1 };
    for (int i = 0; i < 6; i++) {
        cr_assert_eq(c.out[i], want0[i], "row 0 slot %d: %d, want %d", i, c.out[i], want0[i]);
        cr_assert_eq(c.out[6 + i], want1[i], "row 1 slot %d: %d, want %d", i, c.out[6 + i], want1[i]);
    }
    cr_assert_eq(c.err, 0);
    topk_free(&c);
}

Test(ops, topk_page_transform_matches_the_unpaged_selection_on_random_rows)
{
    trng r = { 32 };
    topk_case a, b;
    topk_new(&a, 5, 64, 12, 0, 0);
    topk_new(&b, 5, 64, 12, 8, 8);
    for (int64_t i = 0; i < 5 * 64; i++)
        a.scores[i] = b.scores[i] = (float)trng_uniform(&r, -1, 1);
    for (int64_t t = 0; t < 5; t++)
        a.lengths[t] = b.lengths[t] = (int32_t)trng_int(&r, 0, 64);
    for (int64_t i = 0; i < 5 * 8; i++)
        b.pages[i] = (int32_t)trng_int(&r, 0, 1000);
    topk_run(&a);
    topk_run(&b);
    for (int64_t t = 0; t < 5; t++) {
        topk_check_row(&a, t);
        for (int64_t i = 0; i < 12; i++) {
            int32_t ix = a.out[t * 12 + i];
            int32_t want = ix < 0 ? -1 : b.pages[t * 8 + ix / 8] * 8 + ix % 8;
            cr_assert_eq(b.out[t * 12 + i], want, "row %lld slot %lld: %d, want %d", (long long)t, (long long)i,
                         b.out[t * 12 + i], want);
        }
    }
    topk_free(&a), topk_free(&b);
}

Test(ops, topk_reports_a_page_past_the_table_and_gives_minus_one)
{
    topk_case c;
    topk_new(&c, 1, 12, 4, 2, 4); /* two pages of 4 cover only 8 of 12 positions */
    for (int j = 0; j < 12; j++)
        c.scores[j] = (float)j;
    c.lengths[0] = 12;
    c.pages[0] = 3, c.pages[1] = -1; /* the second page is unmapped */
    topk_run(&c);
    cr_assert_eq(c.err, REEL_E_LIMIT, "an index on page 2 of a 2-page table must report REEL_E_LIMIT");
    /* 11..8 are on page 2: refused. */
    for (int i = 0; i < 4; i++)
        cr_assert_eq(c.out[i], -1, "slot %d is %d, want -1", i, c.out[i]);
    c.err = 0;
    c.lengths[0] = 8; /* now 7..4 on the unmapped page: -1 without an error */
    topk_run(&c);
    cr_assert_eq(c.err, 0);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(c.out[i], -1, "slot %d is %d: an unmapped page gives -1", i, c.out[i]);
    c.lengths[0] = 4; /* 3..0 on page 0 (block 3) */
    topk_run(&c);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(c.out[i], 3 * 4 + 3 - i);
    topk_free(&c);
}

Test(ops, topk_refuses_a_page_whose_index_does_not_fit_int32_instead_of_wrapping)
{
    topk_case c;
    topk_new(&c, 1, 128, 4, 2, 64);
    for (int j = 0; j < 128; j++)
        c.scores[j] = (float)j;
    c.lengths[0] = 128;
    /* 2^25 * 64 = 2^31: one past INT32_MAX for the first index of the page. */
    c.pages[0] = 0, c.pages[1] = 1 << 25;
    topk_run(&c);
    cr_assert_eq(c.err, REEL_E_LIMIT, "an index past INT32_MAX must report REEL_E_LIMIT");
    for (int i = 0; i < 4; i++)
        cr_assert_eq(c.out[i], -1, "slot %d is %d: a page index past INT32_MAX must give -1, not wrap", i, c.out[i]);
    /* The largest page that still fits maps exactly. */
    c.err = 0;
    c.pages[1] = (int32_t)((INT32_MAX - 63) / 64);
    topk_run(&c);
    cr_assert_eq(c.err, 0);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(c.out[i], (int32_t)((int64_t)c.pages[1] * 64 + 63 - i));
    topk_free(&c);
}

Test(ops, topk_builder_checks_page_table_coverage_without_overflowing)
{
    reel_ctx *ctx;
    cr_assert_eq(reel_ctx_create(NULL, &ctx), REEL_OK);
    reel_graph *g;
    cr_assert_eq(reel_graph_create(ctx, &g), REEL_OK);
    int64_t sd[] = {REEL_DIM_TOKENS, 16}, ld[] = {REEL_DIM_TOKENS}, pd[] = {REEL_DIM_TOKENS, (int64_t)1 << 40};
    reel_tensor s = reel_input(g, "s", REEL_F32, 2, sd), l = reel_input(g, "l", REEL_I32, 1, ld);
    reel_tensor pt = reel_input(g, "pt", REEL_I32, 2, pd);
    /* 2^40 pages of 2^30 positions: the product is past INT64_MAX, and the
     * table covers the 16 scores whatever its width. */
    reel_tensor o = reel_topk(g, s, l, pt, 4, 1 << 30);
    cr_assert_neq(o.id, 0, "%s", reel_ctx_last_error(ctx));
    cr_assert_eq(reel_graph_status(g), REEL_OK);
    reel_graph_destroy(g);
    reel_ctx_destroy(ctx);
}
