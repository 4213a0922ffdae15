/* Host reference kernels of the dense ops against float64 references, for
 * every storage dtype. Inputs are random (seeded) and rounded to the dtype
 * first; outputs are poisoned with 0xFF (NaN) before each run, so an
 * unwritten element fails the comparison. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/ops/host_ref.h"

Test(ops, embedding_copies_rows_and_zeroes_ids_out_of_range)
{
    trng r = { 11 };
    const int64_t V = 17, D = 24, T = 9;
    const int32_t ids[9] = { 3, 0, 16, -1, 17, 5, 5, 1000, -7 };
    for (int di = 0; di < 3; di++) {
        reel_dtype dt = float_dtypes[di];
        tbuf table = tbuf_new(dt, V * D), id = tbuf_new(REEL_I32, T), out = tbuf_new(dt, T * D);
        tbuf_random(&table, &r, -3, 3);
        for (int64_t t = 0; t < T; t++)
            tbuf_set(&id, t, ids[t]);
        tbuf_poison(&out);
        tlaunch L;
        tlaunch_init(&L, REEL_OP_EMBEDDING, T);
        L.in[0] = tshape(dt, false, 2, V, D, 0, 0);
        L.in[1] = tshape(REEL_I32, true, 1, 0, 0, 0, 0);
        L.out[0] = tshape(dt, true, 2, 0, D, 0, 0);
        L.l.in[0] = table.p;
        L.l.in[1] = id.p;
        L.l.out[0] = out.p;
        reel_host_embedding(&L.l);
        size_t rb = (size_t)D * reel_storage_size(dt);
        for (int64_t t = 0; t < T; t++) {
            if (ids[t] >= 0 && ids[t] < V) {
                cr_assert(!memcmp((char *)out.p + t * rb, (char *)table.p + ids[t] * rb, rb),
                          "[%s] row %lld is not table row %d", dt_name(dt), (long long)t, ids[t]);
            } else {
                for (int64_t i = 0; i < D; i++)
                    cr_assert(tbuf_get(&out, t * D + i) == 0.0, "[%s] id %d: row %lld not zero", dt_name(dt),
                              ids[t], (long long)t);
            }
        }
        tbuf_free(&table), tbuf_free(&id), tbuf_free(&out);
    }
}

/* Runs one matmul kernel on x [M, K] and w ([K, N], or [N, K] transposed). */
static void run_matmul(void (*fn)(const void *), reel_dtype dt, bool wt, const tbuf *x, const tbuf *w, tbuf *out,
                       int64_t M, int64_t K, int64_t N)
{
    tlaunch L;
    tlaunch_init(&L, REEL_OP_MATMUL, M);
    L.attrs.matmul.w_transposed = wt;
    L.in[0] = tshape(dt, true, 2, 0, K, 0, 0);
    L.in[1] = wt ? tshape(dt, false, 2, N, K, 0, 0) : tshape(dt, false, 2, K, N, 0, 0);
    L.out[0] = tshape(dt, true, 2, 0, N, 0, 0);
    L.l.in[0] = x->p;
    L.l.in[1] = w->p;
    L.l.out[0] = out->p;
    tbuf_poison(out);
    fn(&L.l);
}

Test(ops, matmul_ref_and_tiled_match_float64_for_both_weight_layouts)
{
    trng r = { 12 };
    const int64_t M = 7, K = 37, N = 70; /* tails in both tile directions */
    for (int di = 0; di < 3; di++) {
        for (int wt = 0; wt < 2; wt++) {
            reel_dtype dt = float_dtypes[di];
            tbuf x = tbuf_new(dt, M * K), w = tbuf_new(dt, K * N);
            tbuf o1 = tbuf_new(dt, M * N), o2 = tbuf_new(dt, M * N);
            double *want = calloc((size_t)(M * N), sizeof *want);
            tbuf_random(&x, &r, -1, 1);
            tbuf_random(&w, &r, -1, 1);
            double mag = 0;
            for (int64_t i = 0; i < M; i++) {
                for (int64_t j = 0; j < N; j++) {
                    double acc = 0, ab = 0;
                    for (int64_t k = 0; k < K; k++) {
                        double wv = wt ? w.ref[j * K + k] : w.ref[k * N + j];
                        acc += x.ref[i * K + k] * wv;
                        ab += fabs(x.ref[i * K + k] * wv);
                    }
                    want[i * N + j] = acc;
                    mag = ab > mag ? ab : mag;
                }
            }
            run_matmul(reel_host_matmul, dt, wt, &x, &w, &o1, M, K, N);
            /* float32 accumulation over K terms: a few ulps of the magnitude sum. */
            check_close(wt ? "matmul.ref (w transposed)" : "matmul.ref", &o1, want, M * N, 1e-5 * mag,
                        tol_of(dt));
            run_matmul(reel_host_matmul_tiled, dt, wt, &x, &w, &o2, M, K, N);
            cr_assert(!memcmp(o1.p, o2.p, (size_t)(M * N) * reel_storage_size(dt)),
                      "[%s] tiled matmul differs from the reference bit-wise (wt %d)", dt_name(dt), wt);
            free(want);
            tbuf_free(&x), tbuf_free(&w), tbuf_free(&o1), tbuf_free(&o2);
        }
    }
}

typedef void (*kernel_fn)(const void *);

/* a [T, 4, 6] op b: b of a's shape, or a row [6] broadcast; also in place. */
static void check_binary(kernel_fn fn, const char *what, bool is_mul)
{
    trng r = { is_mul ? 13u : 14u };
    const int64_t T = 5, R = 4 * 6;
    for (int di = 0; di < 3; di++) {
        for (int row = 0; row < 2; row++) {
            reel_dtype dt = float_dtypes[di];
            int64_t nb = row ? 6 : T * R;
            tbuf a = tbuf_new(dt, T * R), b = tbuf_new(dt, nb), out = tbuf_new(dt, T * R);
            double *want = calloc((size_t)(T * R), sizeof *want);
            tbuf_random(&a, &r, -4, 4);
            tbuf_random(&b, &r, -4, 4);
            for (int64_t i = 0; i < T * R; i++)
                want[i] = is_mul ? a.ref[i] * b.ref[i % nb] : a.ref[i] + b.ref[i % nb];
            tlaunch L;
            tlaunch_init(&L, is_mul ? REEL_OP_MUL : REEL_OP_ADD, T);
            L.in[0] = tshape(dt, true, 3, 0, 4, 6, 0);
            L.in[1] = row ? tshape(dt, false, 1, 6, 0, 0, 0) : L.in[0];
            L.out[0] = L.in[0];
            L.l.in[0] = a.p;
            L.l.in[1] = b.p;
            L.l.out[0] = out.p;
            tbuf_poison(&out);
            fn(&L.l);
            check_close(what, &out, want, T * R, 1e-6, tol_of(dt));
            L.l.out[0] = a.p; /* in place, as the planner may place it */
            fn(&L.l);
            cr_assert(!memcmp(a.p, out.p, (size_t)(T * R) * reel_storage_size(dt)), "[%s] %s in place differs",
                      dt_name(dt), what);
            free(want);
            tbuf_free(&a), tbuf_free(&b), tbuf_free(&out);
        }
    }
}

Test(ops, add_matches_float64_same_shape_and_broadcast_row)
{
    check_binary(reel_host_add, "add", false);
}

Test(ops, mul_matches_float64_same_shape_and_broadcast_row)
{
    check_binary(reel_host_mul, "mul", true);
}

Test(ops, rmsnorm_matches_float64)
{
    trng r = { 15 };
    const int64_t T = 6, D = 48;
    const float eps = 1e-5f;
    for (int di = 0; di < 3; di++) {
        reel_dtype dt = float_dtypes[di];
        tbuf x = tbuf_new(dt, T * D), w = tbuf_new(dt, D), out = tbuf_new(dt, T * D);
        double *want = calloc((size_t)(T * D), sizeof *want);
        tbuf_random(&x, &r, -3, 3);
        tbuf_random(&w, &r, 0.5, 1.5);
        for (int64_t i = 0; i < D; i++) /* one near-zero row: eps matters there */
            tbuf_set(&x, 2 * D + i, 1e-3 * (double)(i % 3));
        for (int64_t t = 0; t < T; t++) {
            double ss = 0;
            for (int64_t i = 0; i < D; i++)
                ss += x.ref[t * D + i] * x.ref[t * D + i];
            double rs = 1.0 / sqrt(ss / (double)D + (double)eps);
            for (int64_t i = 0; i < D; i++)
                want[t * D + i] = x.ref[t * D + i] * rs * w.ref[i];
        }
        tlaunch L;
        tlaunch_init(&L, REEL_OP_RMSNORM, T);
        L.attrs.rmsnorm.eps = eps;
        L.in[0] = tshape(dt, true, 2, 0, D, 0, 0);
        L.in[1] = tshape(dt, false, 1, D, 0, 0, 0);
        L.out[0] = L.in[0];
        L.l.in[0] = x.p;
        L.l.in[1] = w.p;
        L.l.out[0] = out.p;
        tbuf_poison(&out);
        reel_host_rmsnorm(&L.l);
        check_close("rmsnorm", &out, want, T * D, 1e-5, tol_of(dt));
        free(want);
        tbuf_free(&x), tbuf_free(&w), tbuf_free(&out);
    }
}

Test(ops, silu_and_mul_matches_float64)
{
    trng r = { 16 };
    const int64_t T = 6, F = 20;
    for (int di = 0; di < 3; di++) {
        reel_dtype dt = float_dtypes[di];
        tbuf x = tbuf_new(dt, T * 2 * F), out = tbuf_new(dt, T * F);
        double *want = calloc((size_t)(T * F), sizeof *want);
        tbuf_random(&x, &r, -8, 8);
        for (int64_t t = 0; t < T; t++) {
            for (int64_t i = 0; i < F; i++) {
                double a = x.ref[t * 2 * F + i], b = x.ref[t * 2 * F + F + i];
                want[t * F + i] = a / (1.0 + exp(-a)) * b;
            }
        }
        tlaunch L;
        tlaunch_init(&L, REEL_OP_SILU_AND_MUL, T);
        L.in[0] = tshape(dt, true, 2, 0, 2 * F, 0, 0);
        L.out[0] = tshape(dt, true, 2, 0, F, 0, 0);
        L.l.in[0] = x.p;
        L.l.out[0] = out.p;
        tbuf_poison(&out);
        reel_host_silu_and_mul(&L.l);
        check_close("silu_and_mul", &out, want, T * F, 1e-5, tol_of(dt));
        free(want);
        tbuf_free(&x), tbuf_free(&out);
    }
}

/* Neox rope over H heads of head_dim hd, rotating the first rd dims. */
static void check_rope(int64_t hd, int64_t rd)
{
    trng r = { (uint64_t)(17 + rd) };
    const int64_t T = 7, H = 3, W = H * hd;
    const double theta = 10000.0;
    for (int di = 0; di < 3; di++) {
        reel_dtype dt = float_dtypes[di];
        tbuf x = tbuf_new(dt, T * W), pos = tbuf_new(REEL_I32, T), out = tbuf_new(dt, T * W);
        double *want = calloc((size_t)(T * W), sizeof *want);
        tbuf_random(&x, &r, -2, 2);
        for (int64_t t = 0; t < T; t++)
            tbuf_set(&pos, t, t == 0 ? 0 : (double)trng_int(&r, 1, 4095));
        memcpy(want, x.ref, (size_t)(T * W) * sizeof *want);
        for (int64_t t = 0; t < T; t++) {
            for (int64_t h = 0; h < H; h++) {
                for (int64_t i = 0; i < rd / 2; i++) {
                    double ang = pos.ref[t] * pow(theta, -2.0 * (double)i / (double)rd);
                    int64_t a = t * W + h * hd + i, b = a + rd / 2;
                    want[a] = x.ref[a] * cos(ang) - x.ref[b] * sin(ang);
                    want[b] = x.ref[b] * cos(ang) + x.ref[a] * sin(ang);
                }
            }
        }
        tlaunch L;
        tlaunch_init(&L, REEL_OP_ROPE, T);
        L.attrs.rope.head_dim = (int)hd;
        L.attrs.rope.rot_dim = (int)rd;
        L.attrs.rope.theta = (float)theta;
        L.in[0] = tshape(dt, true, 2, 0, W, 0, 0);
        L.in[1] = tshape(REEL_I32, true, 1, 0, 0, 0, 0);
        L.out[0] = L.in[0];
        L.l.in[0] = x.p;
        L.l.in[1] = pos.p;
        L.l.out[0] = out.p;
        tbuf_poison(&out);
        reel_host_rope(&L.l);
        check_close("rope", &out, want, T * W, 1e-5, tol_of(dt));
        /* Dims past rot_dim pass through bit for bit; position 0 is the identity. */
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = rd; i < hd; i++)
                cr_assert(tbuf_get(&out, 3 * W + h * hd + i) == x.ref[3 * W + h * hd + i]);
        for (int64_t i = 0; i < W; i++)
            cr_assert(tbuf_get(&out, i) == x.ref[i], "[%s] position 0 must not rotate", dt_name(dt));
        L.l.out[0] = x.p; /* in place */
        reel_host_rope(&L.l);
        cr_assert(!memcmp(x.p, out.p, (size_t)(T * W) * reel_storage_size(dt)), "[%s] rope in place differs",
                  dt_name(dt));
        free(want);
        tbuf_free(&x), tbuf_free(&pos), tbuf_free(&out);
    }
}

Test(ops, rope_matches_float64_with_full_and_partial_rotation)
{
    check_rope(16, 16);
    check_rope(16, 8);
}

static void run_softmax(reel_dtype dt, const tbuf *x, tbuf *out, int64_t T, int64_t N)
{
    tlaunch L;
    tlaunch_init(&L, REEL_OP_SOFTMAX, T);
    L.in[0] = tshape(dt, true, 2, 0, N, 0, 0);
    L.out[0] = L.in[0];
    L.l.in[0] = x->p;
    L.l.out[0] = out->p;
    tbuf_poison(out);
    reel_host_softmax(&L.l);
}

Test(ops, softmax_matches_float64_and_stays_stable_for_large_and_neg_inf_inputs)
{
    trng r = { 18 };
    const int64_t T = 5, N = 33;
    for (int di = 0; di < 3; di++) {
        reel_dtype dt = float_dtypes[di];
        tbuf x = tbuf_new(dt, T * N), out = tbuf_new(dt, T * N);
        double *want = calloc((size_t)(T * N), sizeof *want);
        tbuf_random(&x, &r, -10, 10);
        for (int64_t i = 0; i < N; i++) /* large: exp would overflow without the max */
            tbuf_set(&x, N + i, 3000.0 + (double)(i % 7));
        for (int64_t i = 0; i < N; i += 3) /* masked entries */
            tbuf_set(&x, 2 * N + i, -INFINITY);
        for (int64_t t = 0; t < T; t++) {
            double m = -INFINITY, s = 0;
            for (int64_t i = 0; i < N; i++)
                m = fmax(m, x.ref[t * N + i]);
            for (int64_t i = 0; i < N; i++)
                s += exp(x.ref[t * N + i] - m);
            for (int64_t i = 0; i < N; i++)
                want[t * N + i] = exp(x.ref[t * N + i] - m) / s;
        }
        run_softmax(dt, &x, &out, T, N);
        check_close("softmax", &out, want, T * N, 1e-6, tol_of(dt));
        for (int64_t i = 0; i < N; i += 3)
            cr_assert(tbuf_get(&out, 2 * N + i) == 0.0, "[%s] a -inf entry must get exactly 0", dt_name(dt));
        free(want);
        tbuf_free(&x), tbuf_free(&out);
    }
}

Test(ops, softmax_of_a_row_with_nan_or_only_neg_inf_is_nan)
{
    const int64_t N = 4;
    tbuf x = tbuf_new(REEL_F32, 2 * N), out = tbuf_new(REEL_F32, 2 * N);
    const double v[8] = { 1, NAN, 2, 3, -INFINITY, -INFINITY, -INFINITY, -INFINITY };
    for (int i = 0; i < 8; i++)
        tbuf_set(&x, i, v[i]);
    run_softmax(REEL_F32, &x, &out, 2, N);
    for (int i = 0; i < 8; i++)
        cr_assert(isnan(tbuf_get(&out, i)), "element %d: softmax without a defined result must be NaN", i);
    tbuf_free(&x), tbuf_free(&out);
}

static void run_argmax(reel_dtype dt, const tbuf *x, tbuf *out, int64_t T, int64_t N)
{
    tlaunch L;
    tlaunch_init(&L, REEL_OP_ARGMAX, T);
    L.in[0] = tshape(dt, true, 2, 0, N, 0, 0);
    L.out[0] = tshape(REEL_I32, true, 1, 0, 0, 0, 0);
    L.l.in[0] = x->p;
    L.l.out[0] = out->p;
    tbuf_poison(out); /* -1: never an argmax */
    reel_host_argmax(&L.l);
}

Test(ops, argmax_picks_the_lowest_index_of_the_max_and_never_nan)
{
    trng r = { 19 };
    const int64_t T = 8, N = 29;
    for (int di = 0; di < 3; di++) {
        reel_dtype dt = float_dtypes[di];
        tbuf x = tbuf_new(dt, T * N), out = tbuf_new(REEL_I32, T);
        tbuf_random(&x, &r, -5, 5);
        /* row 1: a tie of the max at 4 and 20; row 2: NaN first and after the max;
         * row 3: all NaN; row 4: all -inf; row 5: +inf; row 6: NaN at the end. */
        tbuf_set(&x, N + 4, 9), tbuf_set(&x, N + 20, 9);
        tbuf_set(&x, 2 * N + 0, NAN), tbuf_set(&x, 2 * N + 10, 8), tbuf_set(&x, 2 * N + 11, NAN);
        for (int64_t i = 0; i < N; i++)
            tbuf_set(&x, 3 * N + i, NAN), tbuf_set(&x, 4 * N + i, -INFINITY);
        tbuf_set(&x, 5 * N + 17, INFINITY);
        tbuf_set(&x, 6 * N + N - 1, NAN);
        int32_t want[8];
        for (int64_t t = 0; t < T; t++) {
            int64_t best = -1;
            for (int64_t i = 0; i < N; i++)
                if (!isnan(x.ref[t * N + i]) && (best < 0 || x.ref[t * N + i] > x.ref[t * N + best]))
                    best = i;
            want[t] = best < 0 ? 0 : (int32_t)best;
        }
        cr_assert(want[1] == 4 && want[2] == 10 && want[3] == 0 && want[4] == 0 && want[5] == 17);
        run_argmax(dt, &x, &out, T, N);
        for (int64_t t = 0; t < T; t++)
            cr_assert_eq(((int32_t *)out.p)[t], want[t], "[%s] row %lld: argmax %d, want %d", dt_name(dt),
                         (long long)t, ((int32_t *)out.p)[t], want[t]);
        tbuf_free(&x), tbuf_free(&out);
    }
}
