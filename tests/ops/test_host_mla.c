/* Multi-head latent attention on the host: head_matmul against float64,
 * and the absorbed form (head_matmul for q's W_UK, mla_attention over the
 * paged latent cache, head_matmul for W_UV) against the non-absorbed form
 * computed densely in float64 (per-head keys W_UK c and values W_UV c, the
 * rope key shared by every head): a mixed batch of decode, chunked prefill
 * over cached rows and padding, scattered block tables, and the limits the
 * kernel guards. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/ops/host_ref.h"

static void set_hmm(reel_op_attrs *at, int heads, int roff, int rows, int xoff, bool tr)
{
    at->hmm.heads = heads, at->hmm.row_off = roff, at->hmm.rows = rows, at->hmm.x_off = xoff;
    at->hmm.transposed = tr;
}

static void check_head_matmul(reel_dtype dt, int64_t T, int H, int S, int C, int xs, int xoff, int roff, int rows,
                              bool tr)
{
    trng r = { (uint64_t)(7 + S + C + tr) };
    int64_t K = tr ? rows : C, N = tr ? C : rows;
    tbuf x = tbuf_new(dt, T * H * xs), w = tbuf_new(dt, (int64_t)H * S * C), y = tbuf_new(dt, T * H * N);
    tbuf_random(&x, &r, -1, 1);
    tbuf_random(&w, &r, -1, 1);
    double *want = calloc((size_t)(T * H * N), sizeof *want);
    for (int64_t t = 0; t < T; t++)
        for (int h = 0; h < H; h++)
            for (int64_t n = 0; n < N; n++) {
                double acc = 0;
                for (int64_t k = 0; k < K; k++) {
                    int64_t wr = (int64_t)h * S + roff + (tr ? k : n), wc = tr ? n : k;
                    acc += x.ref[t * H * xs + (int64_t)h * xs + xoff + k] * w.ref[wr * C + wc];
                }
                want[t * H * N + h * N + n] = acc;
            }
    tlaunch L;
    tlaunch_init(&L, REEL_OP_HEAD_MATMUL, T);
    set_hmm(&L.attrs, H, roff, rows, xoff, tr);
    L.in[0] = tshape(dt, true, 2, 0, (int64_t)H * xs, 0, 0);
    L.in[1] = tshape(dt, false, 2, (int64_t)H * S, C, 0, 0);
    L.out[0] = tshape(dt, true, 2, 0, H * N, 0, 0);
    L.l.in[0] = x.p;
    L.l.in[1] = w.p;
    L.l.out[0] = y.p;
    tbuf_poison(&y);
    reel_host_head_matmul(&L.l);
    check_close("head_matmul", &y, want, T * H * N, 1e-5 * (double)K, tol_of(dt));
    free(want);
    tbuf_free(&x), tbuf_free(&w), tbuf_free(&y);
}

Test(ops, head_matmul_matches_float64_either_way_with_offsets)
{
    for (int i = 0; i < 3; i++) {
        reel_dtype dt = float_dtypes[i];
        /* DeepSeek's shapes shrunk: kv_b [H*(nope 6 + v 5), L 12] */
        check_head_matmul(dt, 5, 3, 11, 12, 9, 0, 0, 6, true);   /* q_nope [.., 6 of 9] -> q_lat [12] */
        check_head_matmul(dt, 5, 3, 11, 12, 12, 0, 6, 5, false); /* o_lat [12] -> o [5] */
        check_head_matmul(dt, 1, 4, 8, 7, 10, 3, 2, 6, false);
        check_head_matmul(dt, 3, 1, 4, 4, 4, 0, 0, 4, true);
    }
}

enum { MAXT = 16, MAXS = 4, MAXB = 8 };

typedef struct mla {
    reel_dtype dt;
    int H, nope, R, L, V, bs, nblocks, T;
    int32_t max_seqs, max_blocks, max_context, err;
    int32_t pos[MAXT], seq[MAXT], slot[MAXT], ctx[MAXS], bt[MAXS * MAXB];
    tbuf q, c, kpe, kvb, cache, qlat, olat, o, lse;
    double *dc; /* dense [seq][position][L + R]: what the cache should hold */
    reel_meta_view meta;
    trng r;
} mla;

static int64_t row(const mla *a) { return (int64_t)a->L + a->R; }
static int64_t dq(const mla *a) { return (int64_t)a->nope + a->R; }
static double *dense(const mla *a, int s, int p) { return a->dc + ((int64_t)s * MAXB * a->bs + p) * row(a); }

static void mla_init(mla *a, reel_dtype dt, int T, uint64_t seed)
{
    *a = (mla){ .dt = dt, .H = 3, .nope = 6, .R = 4, .L = 12, .V = 5, .bs = 4, .nblocks = 10, .T = T,
                .max_seqs = 3, .max_blocks = 5, .max_context = 20, .r = { seed } };
    a->q = tbuf_new(dt, (int64_t)T * a->H * dq(a));
    a->c = tbuf_new(dt, (int64_t)T * a->L);
    a->kpe = tbuf_new(dt, (int64_t)T * a->R);
    a->kvb = tbuf_new(dt, (int64_t)a->H * (a->nope + a->V) * a->L);
    a->cache = tbuf_new(dt, (int64_t)a->nblocks * a->bs * row(a));
    a->qlat = tbuf_new(dt, (int64_t)T * a->H * a->L);
    a->olat = tbuf_new(dt, (int64_t)T * a->H * a->L);
    a->o = tbuf_new(dt, (int64_t)T * a->H * a->V);
    a->lse = tbuf_new(REEL_F32, (int64_t)T * a->H);
    a->dc = calloc((size_t)(MAXS * MAXB * a->bs * row(a)), sizeof(double));
    tbuf_random(&a->q, &a->r, -1, 1);
    tbuf_random(&a->c, &a->r, -1, 1);
    tbuf_random(&a->kpe, &a->r, -1, 1);
    tbuf_random(&a->kvb, &a->r, -0.5, 0.5);
    tbuf_random(&a->cache, &a->r, -1, 1);
    for (int t = 0; t < MAXT; t++)
        a->seq[t] = -1, a->slot[t] = -1;
    for (int i = 0; i < MAXS * MAXB; i++)
        a->bt[i] = -1;
}

static void mla_free(mla *a)
{
    tbuf_free(&a->q), tbuf_free(&a->c), tbuf_free(&a->kpe), tbuf_free(&a->kvb), tbuf_free(&a->cache);
    tbuf_free(&a->qlat), tbuf_free(&a->olat), tbuf_free(&a->o), tbuf_free(&a->lse);
    free(a->dc);
}

static int64_t mla_slot(const mla *a, int s, int p)
{
    return (int64_t)a->bt[s * a->max_blocks + p / a->bs] * a->bs + p % a->bs;
}

/* Sequence s with context ctx over blocks; positions < cached are already
 * in the cache (earlier steps' rows), the dense truth there. */
static void mla_seq(mla *a, int s, int ctx, int cached, const int32_t *blocks, int nb)
{
    a->ctx[s] = ctx;
    for (int b = 0; b < nb; b++)
        a->bt[s * a->max_blocks + b] = blocks[b];
    for (int p = 0; p < cached; p++)
        for (int64_t i = 0; i < row(a); i++)
            dense(a, s, p)[i] = a->cache.ref[mla_slot(a, s, p) * row(a) + i];
}

static void mla_token(mla *a, int t, int s, int p)
{
    a->seq[t] = s;
    a->pos[t] = p;
    a->slot[t] = (int32_t)mla_slot(a, s, p);
    for (int i = 0; i < a->L; i++)
        dense(a, s, p)[i] = a->c.ref[t * a->L + i];
    for (int i = 0; i < a->R; i++)
        dense(a, s, p)[a->L + i] = a->kpe.ref[t * a->R + i];
}

static double scale_of(const mla *a) { return 1.0 / sqrt((double)dq(a)); }

/* Sparse: the slots each token attends ([T, sparse_k], -1 none), or NULL. */
static int32_t *sparse_slots;
static int sparse_k;

/* The absorbed form through the three kernels. */
static void mla_run(mla *a, bool lse)
{
    int64_t T = a->T, H = a->H;
    tlaunch L;
    tlaunch_init(&L, REEL_OP_HEAD_MATMUL, T);
    set_hmm(&L.attrs, a->H, 0, a->nope, 0, true);
    L.in[0] = tshape(a->dt, true, 2, 0, H * dq(a), 0, 0);
    L.in[1] = tshape(a->dt, false, 2, H * (a->nope + a->V), a->L, 0, 0);
    L.out[0] = tshape(a->dt, true, 2, 0, H * a->L, 0, 0);
    L.l.in[0] = a->q.p, L.l.in[1] = a->kvb.p, L.l.out[0] = a->qlat.p;
    reel_host_head_matmul(&L.l);

    tlaunch M;
    tlaunch_init(&M, REEL_OP_MLA_ATTENTION, T);
    M.attrs.mla.num_heads = a->H;
    M.attrs.mla.latent_dim = a->L;
    M.attrs.mla.rope_dim = a->R;
    M.attrs.mla.block_size = a->bs;
    M.attrs.mla.scale = (float)scale_of(a);
    M.attrs.mla.lay.lse = lse;
    M.in[0] = tshape(a->dt, true, 2, 0, H * a->L, 0, 0);
    M.in[1] = tshape(a->dt, true, 2, 0, H * dq(a), 0, 0);
    M.in[2] = tshape(a->dt, true, 2, 0, a->L, 0, 0);
    M.in[3] = tshape(a->dt, true, 2, 0, a->R, 0, 0);
    M.in[4] = tshape(a->dt, false, 3, a->nblocks, a->bs, row(a), 0);
    if (sparse_slots) {
        M.in[5] = tshape(REEL_I32, true, 2, 0, sparse_k, 0, 0);
        M.l.in[5] = sparse_slots;
    }
    M.out[0] = M.in[0];
    void *ptrs[5] = { a->qlat.p, a->q.p, a->c.p, a->kpe.p, a->cache.p };
    memcpy(M.l.in, ptrs, sizeof ptrs);
    M.l.out[0] = a->olat.p;
    M.l.out[2] = lse ? a->lse.p : NULL;
    a->meta = (reel_meta_view){ a->pos, a->slot, a->seq, a->ctx, a->bt, a->max_seqs, a->max_blocks,
                                a->max_context, &a->err, NULL, 0 };
    M.l.meta = &a->meta;
    tbuf_poison(&a->olat);
    tbuf_poison(&a->lse);
    reel_host_mla_attention(&M.l);

    tlaunch U;
    tlaunch_init(&U, REEL_OP_HEAD_MATMUL, T);
    set_hmm(&U.attrs, a->H, a->nope, a->V, 0, false);
    U.in[0] = tshape(a->dt, true, 2, 0, H * a->L, 0, 0);
    U.in[1] = L.in[1];
    U.out[0] = tshape(a->dt, true, 2, 0, H * a->V, 0, 0);
    U.l.in[0] = a->olat.p, U.l.in[1] = a->kvb.p, U.l.out[0] = a->o.p;
    tbuf_poison(&a->o);
    reel_host_head_matmul(&U.l);
}

/* The non-absorbed form in float64: head h's key at j is [W_UK_h c_j |
 * k_pe_j], its value W_UV_h c_j, its query [q_nope | q_pe]. Zeros where
 * zero[t] or padding; lse per (token, head). */
/* The reference over even positions only (the sparse test's subset). */
static bool ref_even_only;

static void mla_ref(const mla *a, const bool *zero, double *want, double *lse)
{
    int64_t S = a->nope + a->V;
    const double *kvb = a->kvb.ref;
    memset(want, 0, (size_t)((int64_t)a->T * a->H * a->V) * sizeof *want);
    double w[MAXB * 8];
    for (int t = 0; t < a->T; t++) {
        for (int h = 0; h < a->H; h++) {
            lse[t * a->H + h] = -INFINITY;
            if (a->seq[t] < 0 || (zero && zero[t]))
                continue;
            const double *qv = a->q.ref + ((int64_t)t * a->H + h) * dq(a);
            double m = -INFINITY, sum = 0;
            for (int j = 0; j <= a->pos[t]; j++) {
                if (ref_even_only && j % 2)
                    continue;
                const double *cj = dense(a, a->seq[t], j);
                double s = 0;
                for (int n = 0; n < a->nope; n++) {
                    double k = 0;
                    for (int i = 0; i < a->L; i++)
                        k += kvb[((int64_t)h * S + n) * a->L + i] * cj[i];
                    s += qv[n] * k;
                }
                for (int i = 0; i < a->R; i++)
                    s += qv[a->nope + i] * cj[a->L + i];
                w[j] = s * scale_of(a);
                m = fmax(m, w[j]);
            }
            for (int j = 0; j <= a->pos[t]; j++)
                if (!(ref_even_only && j % 2))
                    sum += (w[j] = exp(w[j] - m));
            lse[t * a->H + h] = m + log(sum);
            for (int j = 0; j <= a->pos[t]; j++) {
                if (ref_even_only && j % 2)
                    continue;
                const double *cj = dense(a, a->seq[t], j);
                for (int v = 0; v < a->V; v++) {
                    double x = 0;
                    for (int i = 0; i < a->L; i++)
                        x += kvb[((int64_t)h * S + a->nope + v) * a->L + i] * cj[i];
                    want[((int64_t)t * a->H + h) * a->V + v] += w[j] / sum * x;
                }
            }
        }
    }
}

/* The cache holds, at every slot a token wrote, exactly [c | k_pe]. */
static void check_cache_rows(const mla *a)
{
    for (int t = 0; t < a->T; t++) {
        if (a->seq[t] < 0 || a->slot[t] < 0)
            continue;
        for (int64_t i = 0; i < row(a); i++)
            cr_assert(tbuf_get(&a->cache, a->slot[t] * row(a) + i) == dense(a, a->seq[t], a->pos[t])[i],
                      "token %d's cache row differs at %lld", t, (long long)i);
    }
}

/* A decode token over 9 cached rows, a chunked prefill of 3 over 2 cached
 * rows, a fresh prefill of 4 and padding. */
static void mla_batch(mla *a)
{
    mla_seq(a, 0, 10, 9, (int32_t[]){ 7, 2, 5 }, 3);
    mla_seq(a, 1, 5, 2, (int32_t[]){ 0, 8 }, 2);
    mla_seq(a, 2, 4, 0, (int32_t[]){ 3 }, 1);
    mla_token(a, 0, 0, 9);
    for (int i = 0; i < 3; i++)
        mla_token(a, 1 + i, 1, 2 + i);
    for (int i = 0; i < 4; i++)
        mla_token(a, 4 + i, 2, i);
}

Test(ops, mla_absorbed_equals_the_non_absorbed_form_over_a_mixed_batch)
{
    for (int di = 0; di < 3; di++) {
        reel_dtype dt = float_dtypes[di];
        mla a;
        mla_init(&a, dt, 9, 11 + (uint64_t)di); /* token 8: padding */
        mla_batch(&a);
        mla_run(&a, true);
        cr_assert_eq(a.err, 0, "[%s] error word %d", dt_name(dt), a.err);
        double *want = calloc((size_t)(a.T * a.H * a.V), sizeof *want), lse[MAXT * 4];
        mla_ref(&a, NULL, want, lse);
        /* f32: compute order only; f16/bf16: q_lat and o_lat rounded on the way */
        double tol = dt == REEL_F32 ? 1e-4 : dt == REEL_F16 ? 2e-2 : 8e-2;
        check_close("mla absorbed vs non-absorbed", &a.o, want, (int64_t)a.T * a.H * a.V, tol, tol);
        check_cache_rows(&a);
        for (int t = 0; t < a.T; t++)
            for (int h = 0; h < a.H; h++) {
                float got = ((float *)a.lse.p)[t * a.H + h];
                if (isinf(lse[t * a.H + h]))
                    cr_assert(isinf(got) && got < 0, "[%s] padding lse (%d, %d) = %g", dt_name(dt), t, h, got);
                else
                    cr_assert(fabs(got - lse[t * a.H + h]) <= tol * (1 + fabs(lse[t * a.H + h])),
                              "[%s] lse (%d, %d) %g want %g", dt_name(dt), t, h, got, lse[t * a.H + h]);
            }
        for (int64_t i = 0; i < (int64_t)a.H * a.V; i++) /* padding: zeros */
            cr_assert(tbuf_get(&a.o, 8 * a.H * a.V + i) == 0.0);
        free(want);
        mla_free(&a);
    }
}

/* Metadata past a limit: that token gets zeros and REEL_E_LIMIT, its write
 * is skipped; the others are untouched. */
Test(ops, mla_refuses_metadata_past_its_limits_token_by_token)
{
    for (int c = 0; c < 4; c++) {
        mla a;
        mla_init(&a, REEL_F32, 9, 40 + (uint64_t)c);
        mla_batch(&a);
        bool zero[MAXT] = { 0 };
        if (c == 0) { /* a context past max_context */
            a.ctx[1] = a.max_context + 1;
            zero[1] = zero[2] = zero[3] = true;
        } else if (c == 1) { /* a block past the cache */
            a.bt[0 * a.max_blocks + 1] = a.nblocks;
            zero[0] = true;
        } else if (c == 2) { /* a slot past the cache: write skipped (the token reads its stale row) */
            a.slot[4] = a.nblocks * a.bs;
        } else { /* a sequence past max_seqs */
            a.seq[0] = a.max_seqs;
            zero[0] = true;
        }
        tbuf before = tbuf_new(REEL_F32, a.cache.n);
        memcpy(before.p, a.cache.p, (size_t)a.cache.n * sizeof(float));
        mla_run(&a, false);
        cr_assert_eq(a.err, REEL_E_LIMIT, "case %d: error word %d", c, a.err);
        if (c == 2) { /* the row it would have written stays as it was */
            int64_t s = mla_slot(&a, 2, 0);
            for (int64_t i = 0; i < row(&a); i++)
                cr_assert(((float *)a.cache.p)[s * row(&a) + i] == ((float *)before.p)[s * row(&a) + i]);
        } else {
            double *want = calloc((size_t)(a.T * a.H * a.V), sizeof *want), lse[MAXT * 4];
            if (c == 3)
                a.seq[0] = -1; /* the reference skips it */
            mla_ref(&a, zero, want, lse);
            check_close("mla past a limit", &a.o, want, (int64_t)a.T * a.H * a.V, 1e-4, 1e-4);
            free(want);
        }
        tbuf_free(&before);
        mla_free(&a);
    }
}

/* Sparse: with every causal slot listed (in order, then -1 padding) the
 * result is the dense one bit for bit; with a subset listed, rows not
 * listed are never read (they hold NaN) and the result is attention over
 * the listed rows alone; a token with no slot gets zeros and lse -inf. */
Test(ops, mla_sparse_with_every_slot_is_dense_and_never_reads_an_unlisted_row)
{
    mla a;
    mla_init(&a, REEL_F32, 9, 77);
    mla_batch(&a);
    mla_run(&a, true);
    cr_assert_eq(a.err, 0);
    tbuf dense_o = tbuf_new(REEL_F32, a.o.n);
    memcpy(dense_o.p, a.o.p, (size_t)a.o.n * sizeof(float));
    float dense_lse[MAXT * 4];
    memcpy(dense_lse, a.lse.p, sizeof(float) * (size_t)(a.T * a.H));
    /* every slot 0 .. position, then two -1s */
    sparse_k = 14;
    int32_t slots[MAXT * 14];
    for (int t = 0; t < a.T; t++)
        for (int j = 0; j < sparse_k; j++)
            slots[t * sparse_k + j] = a.seq[t] >= 0 && j <= a.pos[t] ? (int32_t)mla_slot(&a, a.seq[t], j) : -1;
    sparse_slots = slots;
    mla_run(&a, true);
    cr_assert_eq(a.err, 0);
    cr_assert(!memcmp(a.o.p, dense_o.p, (size_t)a.o.n * sizeof(float)), "sparse over every slot differs from dense");
    cr_assert(!memcmp(a.lse.p, dense_lse, sizeof(float) * (size_t)(a.T * a.H)));
    /* a subset: every other position; the rest of each sequence's rows NaN */
    for (int t = 0; t < a.T; t++)
        for (int j = 0; j < sparse_k; j++)
            if (j % 2 == 1)
                slots[t * sparse_k + j] = -1;
    slots[4 * sparse_k] = -1; /* token 4 (position 0 of sequence 2): no slot at all */
    for (int s = 0; s < 3; s++)
        for (int p = 1; p < a.ctx[s]; p += 2)
            for (int64_t i = 0; i < row(&a); i++)
                ((float *)a.cache.p)[mla_slot(&a, s, p) * row(&a) + i] = NAN;
    mla_run(&a, true);
    cr_assert_eq(a.err, 0);
    /* the reference over the listed rows: even positions only */
    double *want = calloc((size_t)(a.T * a.H * a.V), sizeof *want), lse[MAXT * 4];
    bool zero[MAXT] = { [4] = true };
    ref_even_only = true;
    mla_ref(&a, zero, want, lse);
    ref_even_only = false;
    check_close("sparse mla over the listed rows", &a.o, want, (int64_t)a.T * a.H * a.V, 1e-4, 1e-4);
    for (int64_t i = 0; i < a.o.n; i++)
        cr_assert(isfinite(tbuf_get(&a.o, i)), "output %lld read a NaN row", (long long)i);
    for (int64_t i = 0; i < (int64_t)a.H * a.V; i++)
        cr_assert(tbuf_get(&a.o, 4 * a.H * a.V + i) == 0.0, "a token with no slot gets zeros");
    cr_assert(isinf(((float *)a.lse.p)[4 * a.H]) && ((float *)a.lse.p)[4 * a.H] < 0);
    free(want);
    /* a slot past the cache: zeros and REEL_E_LIMIT */
    slots[0] = a.nblocks * a.bs;
    mla_run(&a, false);
    cr_assert_eq(a.err, REEL_E_LIMIT);
    for (int64_t i = 0; i < (int64_t)a.H * a.V; i++)
        cr_assert(tbuf_get(&a.o, i) == 0.0);
    sparse_slots = NULL;
    tbuf_free(&dense_o);
    mla_free(&a);
}
