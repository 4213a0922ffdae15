/* Host LSE combine: float64 reference, the identities of DESIGN.md (empty
 * partial, +inf/NaN lse, zero-weight NaN partial, all-empty row) and the
 * combine of a split softmax equalling the full attention. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/ops/host_ref.h"

typedef struct lse_case {
    reel_dtype dt;
    int64_t T, P, H, Dh;
    tbuf outs, lses, out, lse;
} lse_case;

static void lse_new(lse_case *c, reel_dtype dt, int64_t T, int64_t P, int64_t H, int64_t Dh)
{
    *c = (lse_case){ .dt = dt, .T = T, .P = P, .H = H, .Dh = Dh };
    c->outs = tbuf_new(dt, T * P * H * Dh);
    c->lses = tbuf_new(REEL_F32, T * P * H);
    c->out = tbuf_new(dt, T * H * Dh);
    c->lse = tbuf_new(REEL_F32, T * H);
}

static void lse_free(lse_case *c)
{
    tbuf_free(&c->outs), tbuf_free(&c->lses), tbuf_free(&c->out), tbuf_free(&c->lse);
}

static void lse_run(lse_case *c)
{
    tlaunch L;
    tlaunch_init(&L, REEL_OP_LSE_COMBINE, c->T);
    L.attrs.lse.num_heads = (int)c->H;
    L.in[0] = tshape(c->dt, true, 3, 0, c->P, c->H * c->Dh, 0);
    L.in[1] = tshape(REEL_F32, true, 3, 0, c->P, c->H, 0);
    L.out[0] = tshape(c->dt, true, 2, 0, c->H * c->Dh, 0, 0);
    L.out[1] = tshape(REEL_F32, true, 2, 0, c->H, 0, 0);
    L.l.in[0] = c->outs.p;
    L.l.in[1] = c->lses.p;
    L.l.out[0] = c->out.p;
    L.l.out[1] = c->lse.p;
    tbuf_poison(&c->out);
    tbuf_poison(&c->lse);
    reel_host_lse_combine(&L.l);
}

static int64_t o_at(const lse_case *c, int64_t t, int64_t p, int64_t h) { return ((t * c->P + p) * c->H + h) * c->Dh; }
static int64_t l_at(const lse_case *c, int64_t t, int64_t p, int64_t h) { return (t * c->P + p) * c->H + h; }

/* The float64 combine, with DESIGN.md's identities. */
static void lse_ref(const lse_case *c, double *out, double *lse)
{
    for (int64_t t = 0; t < c->T; t++) {
        for (int64_t h = 0; h < c->H; h++) {
            double m = -INFINITY, s = 0;
            for (int64_t p = 0; p < c->P; p++) {
                double v = c->lses.ref[l_at(c, t, p, h)];
                if (!isnan(v) && v != INFINITY)
                    m = fmax(m, v);
            }
            double *o = out + (t * c->H + h) * c->Dh;
            memset(o, 0, (size_t)c->Dh * sizeof *o);
            lse[t * c->H + h] = -INFINITY;
            if (m == -INFINITY)
                continue;
            for (int64_t p = 0; p < c->P; p++) {
                double v = c->lses.ref[l_at(c, t, p, h)];
                if (!isnan(v) && v != INFINITY)
                    s += exp(v - m);
            }
            for (int64_t p = 0; p < c->P; p++) {
                double v = c->lses.ref[l_at(c, t, p, h)];
                if (isnan(v) || v == -INFINITY || v == INFINITY)
                    continue;
                for (int64_t d = 0; d < c->Dh; d++)
                    o[d] += exp(v - m) / s * c->outs.ref[o_at(c, t, p, h) + d];
            }
            lse[t * c->H + h] = m + log(s);
        }
    }
}

static void lse_check(const lse_case *c, const char *what)
{
    double *out = malloc((size_t)c->out.n * sizeof *out), *lse = malloc((size_t)c->lse.n * sizeof *lse);
    lse_ref(c, out, lse);
    check_close(what, &c->out, out, c->out.n, 1e-6, tol_of(c->dt));
    check_close(what, &c->lse, lse, c->lse.n, 1e-5, 1e-6);
    free(out), free(lse);
}

Test(ops, lse_combine_matches_float64)
{
    trng r = { 41 };
    for (int di = 0; di < 3; di++) {
        lse_case c;
        lse_new(&c, float_dtypes[di], 4, 5, 3, 8);
        tbuf_random(&c.outs, &r, -2, 2);
        tbuf_random(&c.lses, &r, -6, 6);
        tbuf_set(&c.lses, l_at(&c, 1, 2, 0), -INFINITY);
        tbuf_set(&c.lses, l_at(&c, 2, 0, 1), -INFINITY);
        lse_run(&c);
        lse_check(&c, "lse_combine");
        lse_free(&c);
    }
}

/* Row 0 head 0: partial `live` is (o, l), every other partial of the row is
 * `dead` lse with outputs `dead_out`; the result must be (o, l) exactly. */
static void check_identity(const char *what, float dead, float dead_out)
{
    trng r = { 42 };
    for (int di = 0; di < 3; di++) {
        for (int live = 0; live < 3; live++) {
            lse_case c;
            lse_new(&c, float_dtypes[di], 1, 3, 1, 16);
            tbuf_random(&c.outs, &r, -2, 2);
            for (int p = 0; p < 3; p++) {
                tbuf_set(&c.lses, p, p == live ? 1.75 : dead);
                for (int64_t d = 0; p != live && d < 16; d++)
                    tbuf_set(&c.outs, o_at(&c, 0, p, 0) + d, dead_out);
            }
            lse_run(&c);
            size_t es = reel_storage_size(c.dt);
            cr_assert(!memcmp(c.out.p, (char *)c.outs.p + o_at(&c, 0, live, 0) * es, 16 * es),
                      "%s [%s, live partial %d]: out is not the live partial bit for bit", what, dt_name(c.dt), live);
            cr_assert(tbuf_get(&c.lse, 0) == 1.75, "%s [%s]: lse %g, want 1.75", what, dt_name(c.dt),
                      tbuf_get(&c.lse, 0));
            lse_free(&c);
        }
    }
}

Test(ops, lse_combine_with_empty_partials_returns_the_live_partial_exactly)
{
    check_identity("empty partials (0, -inf)", -INFINITY, 0.0f);
}

Test(ops, lse_combine_counts_pos_inf_and_nan_lse_as_empty)
{
    check_identity("+inf lse", INFINITY, 1e4f);
    check_identity("NaN lse", NAN, -1e4f);
}

Test(ops, lse_combine_zero_weight_partial_adds_exactly_zero_even_if_nan)
{
    check_identity("-inf lse over NaN outputs", -INFINITY, NAN);
    check_identity("underflowing weight over NaN outputs", 1.75f - 200.0f, NAN);
}

Test(ops, lse_combine_of_an_all_empty_row_gives_zero_and_neg_inf)
{
    for (int di = 0; di < 3; di++) {
        lse_case c;
        lse_new(&c, float_dtypes[di], 2, 3, 2, 4);
        const float dead[3] = { -INFINITY, NAN, INFINITY };
        for (int64_t i = 0; i < c.lses.n; i++)
            tbuf_set(&c.lses, i, dead[i % 3]);
        for (int64_t i = 0; i < c.outs.n; i++)
            tbuf_set(&c.outs, i, NAN);
        lse_run(&c);
        for (int64_t i = 0; i < c.out.n; i++)
            cr_assert(tbuf_get(&c.out, i) == 0.0, "[%s] out %lld must be 0", dt_name(c.dt), (long long)i);
        for (int64_t i = 0; i < c.lse.n; i++)
            cr_assert(tbuf_get(&c.lse, i) == -INFINITY, "[%s] lse %lld must be -inf", dt_name(c.dt), (long long)i);
        lse_free(&c);
    }
}

/* Softmax attention of q over keys [j0, j1) in float64: (out, lse). */
static double partial_attn(const double *q, const double *k, const double *v, int Dh, int j0, int j1, double *out)
{
    double m = -INFINITY, s = 0;
    double w[64];
    memset(out, 0, (size_t)Dh * sizeof *out);
    if (j0 >= j1)
        return -INFINITY;
    for (int j = j0; j < j1; j++) {
        double d = 0;
        for (int e = 0; e < Dh; e++)
            d += q[e] * k[j * Dh + e];
        w[j] = d / sqrt((double)Dh);
        m = fmax(m, w[j]);
    }
    for (int j = j0; j < j1; j++)
        s += (w[j] = exp(w[j] - m));
    for (int j = j0; j < j1; j++)
        for (int e = 0; e < Dh; e++)
            out[e] += w[j] / s * v[j * Dh + e];
    return m + log(s);
}

Test(ops, lse_combine_of_a_split_softmax_equals_full_attention)
{
    trng r = { 43 };
    enum { T = 3, H = 2, Dh = 16, NK = 40, P = 3 };
    const int split[P + 1] = { 0, 17, 17, NK }; /* the middle partial is empty */
    for (int di = 0; di < 3; di++) {
        lse_case c;
        lse_new(&c, float_dtypes[di], T, P, H, Dh);
        double *want = malloc((size_t)(T * H * Dh) * sizeof *want), *wlse = malloc((size_t)(T * H) * sizeof *wlse);
        for (int t = 0; t < T; t++) {
            for (int h = 0; h < H; h++) {
                double q[Dh], k[NK * Dh], v[NK * Dh], o[Dh];
                for (int i = 0; i < Dh; i++)
                    q[i] = trng_uniform(&r, -2, 2);
                for (int i = 0; i < NK * Dh; i++)
                    k[i] = trng_uniform(&r, -2, 2), v[i] = trng_uniform(&r, -1, 1);
                wlse[t * H + h] = partial_attn(q, k, v, Dh, 0, NK, want + (t * H + h) * Dh);
                for (int p = 0; p < P; p++) {
                    tbuf_set(&c.lses, l_at(&c, t, p, h), partial_attn(q, k, v, Dh, split[p], split[p + 1], o));
                    for (int d = 0; d < Dh; d++)
                        tbuf_set(&c.outs, o_at(&c, t, p, h) + d, o[d]);
                }
            }
        }
        lse_run(&c);
        /* The partial outputs were rounded to the dtype: allow that once more. */
        check_close("split softmax vs full attention", &c.out, want, c.out.n, tol_of(c.dt), 2 * tol_of(c.dt));
        check_close("split softmax lse vs full", &c.lse, wlse, c.lse.n, 1e-5, 1e-6);
        free(want), free(wlse);
        lse_free(&c);
    }
}
