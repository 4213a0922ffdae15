/* Host paged attention against a dense float64 causal attention: a mixed
 * batch of prefill, chunked prefill and decode tokens with padding, GQA,
 * scattered block tables; plus every metadata limit the kernel guards. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/ops/host_ref.h"

enum { MAXT = 32, MAXS = 8, MAXB = 16 };

typedef struct attn {
    reel_dtype dt;
    int H, Hkv, Dh, bs, nblocks, T;
    int32_t max_seqs, max_blocks, max_context, err;
    int32_t pos[MAXT], seq[MAXT], slot[MAXT], ctx[MAXS], bt[MAXS * MAXB];
    tbuf q, k, v, kc, vc, out;
    double *dk, *dv; /* dense [seq][position][Hkv*Dh] of what the cache should hold */
    reel_meta_view meta;
    trng r;
} attn;

static int64_t kvw(const attn *a) { return (int64_t)a->Hkv * a->Dh; }
static int64_t npos(const attn *a) { return (int64_t)a->max_blocks * a->bs; }
static double *dense(const attn *a, double *d, int s, int p) { return d + ((int64_t)s * npos(a) + p) * kvw(a); }

/* A cache full of random values (so a stray write shows) and no sequences. */
static void attn_init(attn *a, reel_dtype dt, int H, int Hkv, int Dh, int bs, int nblocks, int T, uint64_t seed)
{
    *a = (attn){ .dt = dt, .H = H, .Hkv = Hkv, .Dh = Dh, .bs = bs, .nblocks = nblocks, .T = T,
                 .max_seqs = 4, .max_blocks = 6, .max_context = 24, .r = { seed } };
    a->q = tbuf_new(dt, (int64_t)T * H * Dh);
    a->k = tbuf_new(dt, T * kvw(a));
    a->v = tbuf_new(dt, T * kvw(a));
    a->kc = tbuf_new(dt, (int64_t)nblocks * bs * kvw(a));
    a->vc = tbuf_new(dt, (int64_t)nblocks * bs * kvw(a));
    a->out = tbuf_new(dt, (int64_t)T * H * Dh);
    a->dk = calloc((size_t)(MAXS * MAXB * bs * kvw(a)), sizeof(double));
    a->dv = calloc((size_t)(MAXS * MAXB * bs * kvw(a)), sizeof(double));
    tbuf_random(&a->q, &a->r, -1, 1);
    tbuf_random(&a->k, &a->r, -1, 1);
    tbuf_random(&a->v, &a->r, -1, 1);
    tbuf_random(&a->kc, &a->r, -1, 1);
    tbuf_random(&a->vc, &a->r, -1, 1);
    for (int t = 0; t < MAXT; t++)
        a->seq[t] = -1, a->slot[t] = -1;
    for (int i = 0; i < MAXS * MAXB; i++)
        a->bt[i] = -1;
}

static void attn_free(attn *a)
{
    tbuf_free(&a->q), tbuf_free(&a->k), tbuf_free(&a->v);
    tbuf_free(&a->kc), tbuf_free(&a->vc), tbuf_free(&a->out);
    free(a->dk), free(a->dv);
}

static int64_t attn_slot(const attn *a, int s, int p)
{
    return (int64_t)a->bt[s * a->max_blocks + p / a->bs] * a->bs + p % a->bs;
}

/* Sequence s with context ctx over blocks; positions < cached are already in
 * the cache (from earlier steps), taken as the dense truth there. */
static void attn_seq(attn *a, int s, int ctx, int cached, const int32_t *blocks, int nb)
{
    a->ctx[s] = ctx;
    for (int b = 0; b < nb; b++)
        a->bt[s * a->max_blocks + b] = blocks[b];
    for (int p = 0; p < cached; p++) {
        int64_t at = attn_slot(a, s, p) * kvw(a);
        for (int64_t i = 0; i < kvw(a); i++) {
            dense(a, a->dk, s, p)[i] = a->kc.ref[at + i];
            dense(a, a->dv, s, p)[i] = a->vc.ref[at + i];
        }
    }
}

/* Token t of sequence s at position p, writing its k/v into its slot. */
static void attn_token(attn *a, int t, int s, int p)
{
    a->seq[t] = s;
    a->pos[t] = p;
    a->slot[t] = (int32_t)attn_slot(a, s, p);
    for (int64_t i = 0; i < kvw(a); i++) {
        dense(a, a->dk, s, p)[i] = a->k.ref[t * kvw(a) + i];
        dense(a, a->dv, s, p)[i] = a->v.ref[t * kvw(a) + i];
    }
}

static void attn_run(attn *a)
{
    tlaunch L;
    tlaunch_init(&L, REEL_OP_PAGED_ATTENTION, a->T);
    L.attrs.attn.p = (reel_attn_params){ REEL_ATTN_PARAMS_HEAD, a->H, a->Hkv, a->Dh, a->bs, 0.0f };
    L.in[0] = tshape(a->dt, true, 2, 0, (int64_t)a->H * a->Dh, 0, 0);
    L.in[1] = tshape(a->dt, true, 2, 0, kvw(a), 0, 0);
    L.in[2] = L.in[1];
    L.in[3] = tshape(a->dt, false, 4, a->nblocks, a->bs, a->Hkv, a->Dh);
    L.in[4] = L.in[3];
    L.out[0] = L.in[0];
    void *ptrs[5] = { a->q.p, a->k.p, a->v.p, a->kc.p, a->vc.p };
    memcpy(L.l.in, ptrs, sizeof ptrs);
    L.l.out[0] = a->out.p;
    a->meta = (reel_meta_view){ a->pos, a->slot, a->seq, a->ctx, a->bt, a->max_seqs, a->max_blocks,
                                a->max_context, &a->err, NULL, 0 };
    L.l.meta = &a->meta;
    tbuf_poison(&a->out);
    reel_host_paged_attention(&L.l);
}

/* Dense float64 causal attention; zeros where zero[t] or the token is padding. */
static void attn_ref(const attn *a, const bool *zero, double *want)
{
    int group = a->H / a->Hkv;
    double scale = 1.0 / sqrt((double)a->Dh);
    int64_t qw = (int64_t)a->H * a->Dh;
    double *w = calloc((size_t)npos(a), sizeof *w);
    memset(want, 0, (size_t)(a->T * qw) * sizeof *want);
    for (int t = 0; t < a->T; t++) {
        if (a->seq[t] < 0 || (zero && zero[t]))
            continue;
        for (int h = 0; h < a->H; h++) {
            const double *qv = a->q.ref + t * qw + h * a->Dh;
            double m = -INFINITY, sum = 0;
            for (int j = 0; j <= a->pos[t]; j++) {
                const double *kv = dense(a, a->dk, a->seq[t], j) + (h / group) * a->Dh;
                double s = 0;
                for (int d = 0; d < a->Dh; d++)
                    s += qv[d] * kv[d];
                w[j] = s * scale;
                m = fmax(m, w[j]);
            }
            for (int j = 0; j <= a->pos[t]; j++)
                sum += (w[j] = exp(w[j] - m));
            for (int j = 0; j <= a->pos[t]; j++) {
                const double *vv = dense(a, a->dv, a->seq[t], j) + (h / group) * a->Dh;
                for (int d = 0; d < a->Dh; d++)
                    want[t * qw + h * a->Dh + d] += w[j] / sum * vv[d];
            }
        }
    }
    free(w);
}

static void attn_check(const attn *a, const bool *zero, const char *what)
{
    int64_t n = (int64_t)a->T * a->H * a->Dh;
    double *want = malloc((size_t)n * sizeof *want);
    attn_ref(a, zero, want);
    check_close(what, &a->out, want, n, 2e-5, tol_of(a->dt));
    /* Zero rows must be exactly zero, not merely close. */
    for (int t = 0; t < a->T; t++)
        if (a->seq[t] < 0 || (zero && zero[t]))
            for (int64_t i = 0; i < (int64_t)a->H * a->Dh; i++)
                cr_assert(tbuf_get(&a->out, t * a->H * a->Dh + i) == 0.0, "%s: token %d must give zeros", what, t);
    free(want);
}

/* The batch of the mixed test: seq 0 prefills 5 tokens, seq 1 decodes at
 * position 9 over 9 cached, seq 2 prefills a chunk 6..9 over 6 cached;
 * padding between and after (seq -1, slot -1). */
static void mixed_batch(attn *a)
{
    static const int32_t b0[] = { 7, 2 }, b1[] = { 0, 11, 5 }, b2[] = { 3, 9, 14 };
    attn_seq(a, 0, 5, 0, b0, 2);
    attn_seq(a, 1, 10, 9, b1, 3);
    attn_seq(a, 2, 10, 6, b2, 3);
    int t = 0;
    for (int p = 0; p < 5; p++)
        attn_token(a, t++, 0, p);
    t++; /* padding */
    attn_token(a, t++, 1, 9);
    for (int p = 6; p < 10; p++)
        attn_token(a, t++, 2, p);
    cr_assert(t < a->T, "the batch leaves padding at the end");
}

static void check_mixed(reel_dtype dt, int H, int Hkv, int Dh)
{
    attn a;
    attn_init(&a, dt, H, Hkv, Dh, 4, 16, 13, 100u + (uint64_t)Dh);
    mixed_batch(&a);
    tbuf before_k = tbuf_new(dt, a.kc.n), before_v = tbuf_new(dt, a.vc.n);
    size_t es = reel_storage_size(dt), row = (size_t)kvw(&a) * es;
    memcpy(before_k.p, a.kc.p, (size_t)a.kc.n * es);
    memcpy(before_v.p, a.vc.p, (size_t)a.vc.n * es);
    attn_run(&a);
    cr_assert_eq(a.err, 0, "a valid batch must not report an error");
    attn_check(&a, NULL, "paged_attention mixed batch");
    /* The cache holds each token's k/v at its slot and is untouched elsewhere. */
    for (int64_t s = 0; s < (int64_t)a.nblocks * a.bs; s++) {
        int owner = -1;
        for (int t = 0; t < a.T; t++)
            if (a.slot[t] == s)
                owner = t;
        const char *kw = owner >= 0 ? (char *)a.k.p + owner * row : (char *)before_k.p + s * row;
        const char *vw = owner >= 0 ? (char *)a.v.p + owner * row : (char *)before_v.p + s * row;
        cr_assert(!memcmp((char *)a.kc.p + s * row, kw, row), "[%s] k_cache slot %lld (token %d)", dt_name(dt),
                  (long long)s, owner);
        cr_assert(!memcmp((char *)a.vc.p + s * row, vw, row), "[%s] v_cache slot %lld (token %d)", dt_name(dt),
                  (long long)s, owner);
    }
    /* Same inputs, same bits: run again over the already written cache. */
    tbuf first = tbuf_new(dt, a.out.n);
    memcpy(first.p, a.out.p, (size_t)a.out.n * es);
    attn_run(&a);
    cr_assert(!memcmp(first.p, a.out.p, (size_t)a.out.n * es), "[%s] a second run differs", dt_name(dt));
    tbuf_free(&first), tbuf_free(&before_k), tbuf_free(&before_v);
    attn_free(&a);
}

Test(ops, paged_attention_matches_dense_causal_attention_on_a_mixed_batch)
{
    for (int di = 0; di < 3; di++)
        check_mixed(float_dtypes[di], 4, 2, 16);
}

Test(ops, paged_attention_handles_gqa_groups_and_heads_wider_than_one_pass)
{
    check_mixed(REEL_F32, 6, 1, 8);    /* one kv head for six q heads */
    check_mixed(REEL_F32, 2, 2, 144);  /* MHA, head_dim past the 128-dim pass */
    check_mixed(REEL_BF16, 4, 2, 160);
}

/* Runs the mixed batch after `breach` changed one token's metadata; that
 * token must give zeros and REEL_E_LIMIT, every other token stays exact. */
static void check_limit(const char *what, int victim, void (*breach)(attn *a, int t))
{
    attn a;
    attn_init(&a, REEL_F32, 4, 2, 16, 4, 16, 13, 300);
    mixed_batch(&a);
    breach(&a, victim);
    bool zero[MAXT] = { false };
    zero[victim] = true;
    attn_run(&a);
    cr_assert_eq(a.err, REEL_E_LIMIT, "%s: err_word is %d, want REEL_E_LIMIT", what, a.err);
    attn_check(&a, zero, what);
    attn_free(&a);
}

/* Seq 1 (token 6, decoding at 9) grows past max_context, all else valid:
 * the kernel must refuse, not attend over a truncated context. */
static void over_context(attn *a, int t)
{
    a->max_context = 10; /* seq 2 sits exactly at the limit, which is allowed */
    a->ctx[a->seq[t]] = 11;
}

Test(ops, paged_attention_refuses_a_context_over_max_context_with_zeros_and_e_limit)
{
    check_limit("context over max_context", 6, over_context);
}

static void pos_past_context(attn *a, int t) { a->pos[t] = a->ctx[a->seq[t]]; }
static void seq_past_max(attn *a, int t) { a->seq[t] = a->max_seqs; }
static void seq_negative(attn *a, int t) { a->seq[t] = -2; }
static void block_past_table(attn *a, int t)
{
    a->max_context = 100;
    a->ctx[a->seq[t]] = 40;
    a->pos[t] = a->max_blocks * a->bs; /* the block index equals max_blocks */
}
static void block_out_of_cache(attn *a, int t) { a->bt[a->seq[t] * a->max_blocks + 1] = a->nblocks; }
static void block_unmapped(attn *a, int t) { a->bt[a->seq[t] * a->max_blocks + 0] = -1; }

Test(ops, paged_attention_refuses_positions_sequences_and_blocks_past_the_limits)
{
    check_limit("position >= context length", 6, pos_past_context);
    check_limit("sequence >= max_seqs", 3, seq_past_max);
    check_limit("sequence below -1", 3, seq_negative);
    check_limit("block index >= max_blocks", 6, block_past_table);
    check_limit("block outside the cache", 6, block_out_of_cache);
    check_limit("unmapped block inside the context", 6, block_unmapped);
}

Test(ops, paged_attention_skips_slot_minus_one_and_refuses_slots_outside_the_cache)
{
    attn a;
    attn_init(&a, REEL_F16, 4, 2, 16, 4, 16, 13, 400);
    mixed_batch(&a);
    /* Token 4 (seq 0, position 4) writes nothing (slot -1): position 4 then
     * reads whatever its slot held before. Token 3 names a slot past the cache. */
    a.slot[4] = -1;
    a.slot[3] = a.nblocks * a.bs;
    size_t es = reel_storage_size(a.dt), row = (size_t)kvw(&a) * es;
    int64_t s4 = attn_slot(&a, 0, 4), s3 = attn_slot(&a, 0, 3);
    char old4[256], old3[256];
    memcpy(old4, (char *)a.kc.p + s4 * row, row);
    memcpy(old3, (char *)a.kc.p + s3 * row, row);
    for (int64_t i = 0; i < kvw(&a); i++) { /* the dense truth is the old cache */
        dense(&a, a.dk, 0, 4)[i] = a.kc.ref[s4 * kvw(&a) + i];
        dense(&a, a.dv, 0, 4)[i] = a.vc.ref[s4 * kvw(&a) + i];
        dense(&a, a.dk, 0, 3)[i] = a.kc.ref[s3 * kvw(&a) + i];
        dense(&a, a.dv, 0, 3)[i] = a.vc.ref[s3 * kvw(&a) + i];
    }
    attn_run(&a);
    cr_assert_eq(a.err, REEL_E_LIMIT, "a slot past the cache must report REEL_E_LIMIT");
    cr_assert(!memcmp((char *)a.kc.p + s4 * row, old4, row), "slot -1 must not be written");
    cr_assert(!memcmp((char *)a.kc.p + s3 * row, old3, row), "a refused slot must not be written");
    attn_check(&a, NULL, "attention after skipped writes");
    attn_free(&a);
}

Test(ops, paged_attention_gives_zeros_for_padding_without_error)
{
    attn a;
    attn_init(&a, REEL_BF16, 4, 2, 16, 4, 16, 6, 500);
    attn_run(&a); /* every token is padding */
    cr_assert_eq(a.err, 0);
    attn_check(&a, NULL, "all padding");
    attn_free(&a);
}
