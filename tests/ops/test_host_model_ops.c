/* The models layer's ops on the host against float64 references: rotary
 * embedding from a table of inverse frequencies with an attention factor
 * (rope_freq) and RMSNorm over each head's slice (rmsnorm_heads). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/ops/host_ref.h"

/* H heads of hd, dims [ro, ro + rd) rotated by pos * inv_freq[i] (pairs
 * (i, i + rd/2), or (2i, 2i + 1) interleaved), cos and sin times scale. */
static void check_rope_freq_at(int64_t hd, int64_t rd, int64_t ro, bool il, double scale)
{
    trng r = { (uint64_t)(41 + rd) };
    const int64_t T = 7, H = 3, W = H * hd;
    for (int di = 0; di < 3; di++) {
        reel_dtype dt = float_dtypes[di];
        tbuf x = tbuf_new(dt, T * W), pos = tbuf_new(REEL_I32, T), out = tbuf_new(dt, T * W);
        tbuf f = tbuf_new(REEL_F32, rd / 2);
        double *want = calloc((size_t)(T * W), sizeof *want);
        tbuf_random(&x, &r, -2, 2);
        for (int64_t i = 0; i < rd / 2; i++) /* a yarn-like table: no closed form */
            tbuf_set(&f, i, pow(500000.0, -2.0 * (double)i / (double)rd) / (i % 3 == 0 ? 8.0 : 1.0));
        for (int64_t t = 0; t < T; t++)
            tbuf_set(&pos, t, t == 0 ? 0 : (double)trng_int(&r, 1, 100000));
        memcpy(want, x.ref, (size_t)(T * W) * sizeof *want);
        for (int64_t t = 0; t < T; t++) {
            for (int64_t h = 0; h < H; h++) {
                for (int64_t i = 0; i < rd / 2; i++) {
                    double ang = pos.ref[t] * f.ref[i], c = cos(ang) * scale, s = sin(ang) * scale;
                    int64_t a = t * W + h * hd + ro + (il ? 2 * i : i), b = a + (il ? 1 : rd / 2);
                    want[a] = x.ref[a] * c - x.ref[b] * s;
                    want[b] = x.ref[b] * c + x.ref[a] * s;
                }
            }
        }
        tlaunch L;
        tlaunch_init(&L, REEL_OP_ROPE_FREQ, T);
        L.attrs.rope_freq.head_dim = (int)hd;
        L.attrs.rope_freq.rot_dim = (int)rd;
        L.attrs.rope_freq.scale = (float)scale;
        L.attrs.rope_freq.rot_offset = (int)ro;
        L.attrs.rope_freq.interleaved = il;
        L.in[0] = tshape(dt, true, 2, 0, W, 0, 0);
        L.in[1] = tshape(REEL_I32, true, 1, 0, 0, 0, 0);
        L.in[2] = tshape(REEL_F32, false, 1, rd / 2, 0, 0, 0);
        L.out[0] = L.in[0];
        L.l.in[0] = x.p;
        L.l.in[1] = pos.p;
        L.l.in[2] = f.p;
        L.l.out[0] = out.p;
        tbuf_poison(&out);
        reel_host_rope_freq(&L.l);
        check_close("rope_freq", &out, want, T * W, 1e-5, tol_of(dt));
        /* dims outside the range pass through bit for bit; position 0 only scales */
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < hd; i++)
                if (i < ro || i >= ro + rd)
                    cr_assert(tbuf_get(&out, 3 * W + h * hd + i) == x.ref[3 * W + h * hd + i]);
        if (scale == 1.0)
            for (int64_t i = 0; i < W; i++)
                cr_assert(tbuf_get(&out, i) == x.ref[i], "[%s] position 0 must not rotate", dt_name(dt));
        L.l.out[0] = x.p; /* in place */
        reel_host_rope_freq(&L.l);
        cr_assert(!memcmp(x.p, out.p, (size_t)(T * W) * reel_storage_size(dt)), "[%s] rope_freq in place differs",
                  dt_name(dt));
        free(want);
        tbuf_free(&x), tbuf_free(&pos), tbuf_free(&out), tbuf_free(&f);
    }
}

static void check_rope_freq(int64_t hd, int64_t rd, double scale)
{
    check_rope_freq_at(hd, rd, 0, false, scale);
}

Test(ops, rope_freq_matches_float64_with_a_table_an_attention_factor_and_pass_through_dims)
{
    check_rope_freq(16, 16, 1.0);
    check_rope_freq(16, 8, 1.0);
    check_rope_freq(64, 64, 1.1386); /* yarn's 0.1 ln(4) + 1 */
}

/* DeepSeek's q: the last 64 dims of a 192-dim head rotated, interleaved
 * pairs; and the range in the middle of a head, either order. */
Test(ops, rope_freq_rotates_a_range_of_each_head_in_either_pair_order)
{
    check_rope_freq_at(48, 16, 32, true, 1.0);
    check_rope_freq_at(48, 16, 32, false, 1.0);
    check_rope_freq_at(40, 16, 8, true, 1.2);
    check_rope_freq_at(16, 16, 0, true, 1.0);
}

/* A table of theta^(-2i/d) gives the rope op's own result (one formula
 * of angles in double; the table's float32 rounding is all that differs). */
Test(ops, rope_freq_with_the_default_table_is_the_rope_op)
{
    const int64_t T = 5, H = 2, hd = 32, W = H * hd;
    trng r = { 77 };
    tbuf x = tbuf_new(REEL_F32, T * W), pos = tbuf_new(REEL_I32, T), a = tbuf_new(REEL_F32, T * W),
         b = tbuf_new(REEL_F32, T * W), f = tbuf_new(REEL_F32, hd / 2);
    tbuf_random(&x, &r, -2, 2);
    for (int64_t t = 0; t < T; t++)
        tbuf_set(&pos, t, (double)(t * 37));
    for (int64_t i = 0; i < hd / 2; i++)
        tbuf_set(&f, i, pow(10000.0, -2.0 * (double)i / (double)hd));
    tlaunch L;
    tlaunch_init(&L, REEL_OP_ROPE, T);
    L.attrs.rope.head_dim = L.attrs.rope.rot_dim = (int)hd;
    L.attrs.rope.theta = 10000.0f;
    L.in[0] = L.out[0] = tshape(REEL_F32, true, 2, 0, W, 0, 0);
    L.in[1] = tshape(REEL_I32, true, 1, 0, 0, 0, 0);
    L.l.in[0] = x.p, L.l.in[1] = pos.p, L.l.out[0] = a.p;
    reel_host_rope(&L.l);
    tlaunch_init(&L, REEL_OP_ROPE_FREQ, T);
    L.attrs.rope_freq.head_dim = L.attrs.rope_freq.rot_dim = (int)hd;
    L.attrs.rope_freq.scale = 1.0f;
    L.in[0] = L.out[0] = tshape(REEL_F32, true, 2, 0, W, 0, 0);
    L.in[1] = tshape(REEL_I32, true, 1, 0, 0, 0, 0);
    L.in[2] = tshape(REEL_F32, false, 1, hd / 2, 0, 0, 0);
    L.l.in[0] = x.p, L.l.in[1] = pos.p, L.l.in[2] = f.p, L.l.out[0] = b.p;
    reel_host_rope_freq(&L.l);
    double *want = malloc((size_t)(T * W) * sizeof *want);
    for (int64_t i = 0; i < T * W; i++)
        want[i] = tbuf_get(&a, i);
    /* positions up to 148: a float32 table's relative error 6e-8 moves an angle by < 1e-5 */
    check_close("rope_freq vs rope", &b, want, T * W, 2e-5, 1e-5);
    free(want);
    tbuf_free(&x), tbuf_free(&pos), tbuf_free(&a), tbuf_free(&b), tbuf_free(&f);
}

Test(ops, rmsnorm_heads_matches_float64_per_head)
{
    trng r = { 43 };
    const int64_t T = 5, H = 4, Dh = 24, W = H * Dh;
    const float eps = 1e-6f;
    for (int di = 0; di < 3; di++) {
        reel_dtype dt = float_dtypes[di];
        tbuf x = tbuf_new(dt, T * W), w = tbuf_new(dt, Dh), out = tbuf_new(dt, T * W);
        double *want = calloc((size_t)(T * W), sizeof *want);
        tbuf_random(&x, &r, -3, 3);
        tbuf_random(&w, &r, 0.5, 1.5);
        for (int64_t i = 0; i < Dh; i++) /* one head of one token near zero: eps matters there */
            tbuf_set(&x, 2 * W + Dh + i, 1e-4 * (double)(i % 3));
        for (int64_t i = 0; i < Dh; i++) /* one head far larger than its neighbours: heads are apart */
            tbuf_set(&x, 3 * W + 2 * Dh + i, 200.0 + (double)i);
        for (int64_t t = 0; t < T; t++) {
            for (int64_t h = 0; h < H; h++) {
                const int64_t at = t * W + h * Dh;
                double ss = 0;
                for (int64_t i = 0; i < Dh; i++)
                    ss += x.ref[at + i] * x.ref[at + i];
                double rs = 1.0 / sqrt(ss / (double)Dh + (double)eps);
                for (int64_t i = 0; i < Dh; i++)
                    want[at + i] = x.ref[at + i] * rs * w.ref[i];
            }
        }
        tlaunch L;
        tlaunch_init(&L, REEL_OP_RMSNORM_HEADS, T);
        L.attrs.rmsnorm.eps = eps;
        L.in[0] = tshape(dt, true, 2, 0, W, 0, 0);
        L.in[1] = tshape(dt, false, 1, Dh, 0, 0, 0);
        L.out[0] = L.in[0];
        L.l.in[0] = x.p;
        L.l.in[1] = w.p;
        L.l.out[0] = out.p;
        tbuf_poison(&out);
        reel_host_rmsnorm_heads(&L.l);
        check_close("rmsnorm_heads", &out, want, T * W, 1e-5, tol_of(dt));
        /* the rmsnorm op over rows of Dh gives the same bits */
        tbuf o2 = tbuf_new(dt, T * W);
        tlaunch R;
        tlaunch_init(&R, REEL_OP_RMSNORM, T * H);
        R.attrs.rmsnorm.eps = eps;
        R.in[0] = tshape(dt, true, 2, 0, Dh, 0, 0);
        R.in[1] = L.in[1];
        R.out[0] = R.in[0];
        R.l.in[0] = x.p, R.l.in[1] = w.p, R.l.out[0] = o2.p;
        reel_host_rmsnorm(&R.l);
        cr_assert(!memcmp(o2.p, out.p, (size_t)(T * W) * reel_storage_size(dt)),
                  "[%s] rmsnorm_heads differs from rmsnorm over rows of the head dim", dt_name(dt));
        free(want);
        tbuf_free(&x), tbuf_free(&w), tbuf_free(&out), tbuf_free(&o2);
    }
}
