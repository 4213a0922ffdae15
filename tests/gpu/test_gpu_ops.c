/* Every op on the GPU against the host reference kernel, every CUDA impl
 * that accepts the node, f32/f16/bf16, fresh random inputs per run,
 * outputs poisoned first (so an element a kernel leaves unwritten fails). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/gpu/oprun.h"
#include "ops/cuda/impls.h"
#include "ops/host/dtype.h"
#include "ops/sample.h"
#include "backend/ctx.h"
#include "tests/core/opts.h"

#include "tests/gpu/op_fixture.h"

static void check_embedding(reel_dtype dt, int64_t d)
{
    const int64_t v = 50, t = 9;
    gt_op op = op_new(REEL_OP_EMBEDDING, t, 2, 1);
    op.in[0] = gt_shape(dt, false, 2, (int64_t[]){v, d});
    op.in[1] = gt_shape(REEL_I32, true, 1, (int64_t[]){t});
    op.out[0] = gt_shape(dt, true, 2, (int64_t[]){t, d});
    op.data[0] = gt_random(&rng, dt, v * d, -2, 2);
    op.data[1] = gt_random(&rng, REEL_I32, t, -3, v + 2); /* some outside [0, V): zero rows */
    ((int32_t *)op.data[1])[0] = -1;
    ((int32_t *)op.data[1])[1] = (int32_t)v;
    check(&op, "embedding");
}

Test(gpu_ops, embedding_matches_host_including_out_of_range_ids, .init = setup, .fini = teardown)
{
    for (int i = 0; i < 3; i++) {
        check_embedding(dts[i], 40); /* 16-byte rows for every dtype */
        check_embedding(dts[i], 3);  /* odd rows: the narrow copy path */
    }
}

static void check_matmul(reel_dtype dt, int64_t t, int64_t k, int64_t n, bool wt)
{
    gt_op op = op_new(REEL_OP_MATMUL, t, 2, 1);
    op.attrs.matmul.w_transposed = wt;
    op.in[0] = gt_shape(dt, true, 2, (int64_t[]){t, k});
    op.in[1] = gt_shape(dt, false, 2, wt ? (int64_t[]){n, k} : (int64_t[]){k, n});
    op.out[0] = gt_shape(dt, true, 2, (int64_t[]){t, n});
    op.data[0] = gt_random(&rng, dt, t * k, -1, 1);
    op.data[1] = gt_random(&rng, dt, k * n, -1, 1);
    check(&op, wt ? "matmul (w transposed)" : "matmul");
}

Test(gpu_ops, matmul_matches_host_for_both_weight_layouts, .init = setup, .fini = teardown)
{
    for (int i = 0; i < 3; i++) {
        check_matmul(dts[i], 13, 96, 40, false);
        check_matmul(dts[i], 13, 96, 40, true);
        check_matmul(dts[i], 1, 256, 24, false); /* a decode row */
        check_matmul(dts[i], 7, 33, 5, true);    /* odd sizes: unaligned rows */
    }
}

static void check_binary(reel_op_kind k, reel_dtype dt, int64_t t, int64_t d, bool row)
{
    gt_op op = op_new(k, t, 2, 1);
    op.in[0] = gt_shape(dt, true, 2, (int64_t[]){t, d});
    op.in[1] = row ? gt_shape(dt, false, 1, (int64_t[]){d}) : gt_shape(dt, true, 2, (int64_t[]){t, d});
    op.out[0] = op.in[0];
    op.data[0] = gt_random(&rng, dt, t * d, -4, 4);
    op.data[1] = gt_random(&rng, dt, row ? d : t * d, -4, 4);
    check(&op, k == REEL_OP_ADD ? "add" : "mul");
}

Test(gpu_ops, add_and_mul_match_host_same_shape_and_row_broadcast, .init = setup, .fini = teardown)
{
    for (int i = 0; i < 3; i++)
        for (int k = 0; k < 2; k++) {
            reel_op_kind kind = k ? REEL_OP_MUL : REEL_OP_ADD;
            check_binary(kind, dts[i], 11, 64, false); /* vector path */
            check_binary(kind, dts[i], 11, 64, true);
            check_binary(kind, dts[i], 5, 37, false); /* scalar path */
            check_binary(kind, dts[i], 5, 37, true);
        }
}

static void check_rmsnorm(reel_dtype dt, int64_t t, int64_t d)
{
    gt_op op = op_new(REEL_OP_RMSNORM, t, 2, 1);
    op.attrs.rmsnorm.eps = 1e-5f;
    op.in[0] = gt_shape(dt, true, 2, (int64_t[]){t, d});
    op.in[1] = gt_shape(dt, false, 1, (int64_t[]){d});
    op.out[0] = op.in[0];
    op.data[0] = gt_random(&rng, dt, t * d, -3, 3);
    op.data[1] = gt_random(&rng, dt, d, 0.5, 1.5);
    check(&op, "rmsnorm");
}

Test(gpu_ops, rmsnorm_matches_host, .init = setup, .fini = teardown)
{
    for (int i = 0; i < 3; i++) {
        check_rmsnorm(dts[i], 6, 96);
        check_rmsnorm(dts[i], 3, 2050);  /* not whole packs: the element kernel, wider than one block */
        check_rmsnorm(dts[i], 4, 1024);  /* the pack kernel, one pack a thread */
        check_rmsnorm(dts[i], 2, 12288); /* several packs a thread (bf16 2, f32 3) */
        check_rmsnorm(dts[i], 2, 40000); /* past the pack kernel's 4096 packs: the element kernel */
    }
}

static void check_silu(reel_dtype dt, int64_t t, int64_t two_f)
{
    gt_op op = op_new(REEL_OP_SILU_AND_MUL, t, 1, 1);
    op.in[0] = gt_shape(dt, true, 2, (int64_t[]){t, two_f});
    op.out[0] = gt_shape(dt, true, 2, (int64_t[]){t, two_f / 2});
    op.data[0] = gt_random(&rng, dt, t * two_f, -6, 6);
    check(&op, "silu_and_mul");
}

Test(gpu_ops, silu_and_mul_matches_host, .init = setup, .fini = teardown)
{
    for (int i = 0; i < 3; i++) {
        check_silu(dts[i], 7, 128);
        check_silu(dts[i], 7, 70);
    }
}

static void check_rope(reel_dtype dt, int64_t t, int heads, int hd, int rot)
{
    gt_op op = op_new(REEL_OP_ROPE, t, 2, 1);
    op.attrs.rope.head_dim = hd;
    op.attrs.rope.rot_dim = rot;
    op.attrs.rope.theta = 10000.0f;
    op.in[0] = gt_shape(dt, true, 2, (int64_t[]){t, (int64_t)heads * hd});
    op.in[1] = gt_shape(REEL_I32, true, 1, (int64_t[]){t});
    op.out[0] = op.in[0];
    op.data[0] = gt_random(&rng, dt, t * heads * hd, -2, 2);
    op.data[1] = gt_random(&rng, REEL_I32, t, 0, 5000);
    check(&op, "rope");
}

Test(gpu_ops, rope_matches_host_with_and_without_pass_through_dims, .init = setup, .fini = teardown)
{
    for (int i = 0; i < 3; i++) {
        check_rope(dts[i], 9, 4, 64, 64);
        check_rope(dts[i], 9, 3, 64, 32);
    }
}

static void check_softmax(reel_dtype dt, int64_t t, int64_t n)
{
    gt_op op = op_new(REEL_OP_SOFTMAX, t, 1, 1);
    op.in[0] = gt_shape(dt, true, 2, (int64_t[]){t, n});
    op.out[0] = op.in[0];
    op.data[0] = gt_random(&rng, dt, t * n, -8, 8);
    gt_set(op.data[0], dt, 3, -INFINITY);           /* a -inf entry weighs 0 */
    for (int64_t j = 0; j < n; j++)                 /* row 1: only -inf, NaN as on the host */
        gt_set(op.data[0], dt, n + j, -INFINITY);
    check(&op, "softmax");
}

Test(gpu_ops, softmax_matches_host_including_minus_infinity, .init = setup, .fini = teardown)
{
    for (int i = 0; i < 3; i++) {
        check_softmax(dts[i], 5, 100);
        check_softmax(dts[i], 3, 3000);
    }
}

static void check_argmax(reel_dtype dt, int64_t t, int64_t n)
{
    gt_op op = op_new(REEL_OP_ARGMAX, t, 1, 1);
    op.in[0] = gt_shape(dt, true, 2, (int64_t[]){t, n});
    op.out[0] = gt_shape(REEL_I32, true, 1, (int64_t[]){t});
    op.data[0] = gt_random(&rng, dt, t * n, -10, 10);
    for (int64_t r = 0; r < t; r++)
        for (int64_t j = 0; j < n; j += 7)
            gt_set(op.data[0], dt, r * n + j, NAN);
    gt_set(op.data[0], dt, 5, 100.0);              /* row 0: a tie at 5, 600 and the last pack, 5 wins */
    gt_set(op.data[0], dt, 600, 100.0);
    gt_set(op.data[0], dt, n - 3, 100.0);
    if (t > 3) {                                    /* row 3: the max in the last pack, a tie across blocks */
        gt_set(op.data[0], dt, 3 * n + n - 2, 90.0);
        gt_set(op.data[0], dt, 3 * n + n - 1, 90.0);
        gt_set(op.data[0], dt, 3 * n + n / 2 + 1, 90.0); /* in a later block than n / 2 - 1 ... */
        gt_set(op.data[0], dt, 3 * n + n / 2 - 1, 90.0); /* ... which wins */
    }
    if (t > 1) {
        gt_set(op.data[0], dt, n + 9, NAN);        /* row 1: NaN next to the max never wins */
        gt_set(op.data[0], dt, n + 10, 50.0);
    }
    for (int64_t j = 0; t > 2 && j < n; j++)       /* row 2: all NaN gives 0 */
        gt_set(op.data[0], dt, 2 * n + j, NAN);
    check(&op, "argmax");
}

Test(gpu_ops, argmax_matches_host_with_ties_and_nan, .init = setup, .fini = teardown)
{
    for (int i = 0; i < 3; i++) {
        check_argmax(dts[i], 4, 1000);
        check_argmax(dts[i], 4, 32000); /* a vocabulary's row: 32 warps merged, the tie across them */
        /* a cluster of blocks a row where the row is long and the rows few
         * (ops/argmax_split.h; in bf16, 8, 4 and 2 blocks; one block past the
         * SMs or under 8192 packs): the ties above cross the blocks; odd
         * widths take the scalar kernel */
        check_argmax(dts[i], 1, 32000);
        check_argmax(dts[i], 1, 128256);
        check_argmax(dts[i], 4, 151936);
        check_argmax(dts[i], 20, 128256);
        check_argmax(dts[i], 60, 151936);
        check_argmax(dts[i], 200, 128256);
        check_argmax(dts[i], 1, 32001);
    }
}

/* ---- paged attention ---------------------------------------------------- */

enum { AH = 4, AHKV = 2, ABS = 4, ANB = 16, AMAXSEQ = 4, AMAXBLK = 8, AMAXCTX = 32 };

typedef struct attn_case {
    gt_meta m;
    int32_t pos[16], slot[16], tseq[16], ctx[AMAXSEQ], bt[AMAXSEQ * AMAXBLK];
    int64_t t;
} attn_case;

/* Seq 0: a prefill of 4 tokens (positions 0..3); seq 1: a decode at
 * position 9 over cached history; seq 2: 2 tokens at positions 5, 6; then a
 * padding token. Block tables are a random permutation of cache blocks. */
static void attn_meta(attn_case *c)
{
    int32_t perm[ANB];
    for (int i = 0; i < ANB; i++)
        perm[i] = i;
    for (int i = ANB - 1; i > 0; i--) {
        int j = (int)gt_int(&rng, 0, i), tmp = perm[i];
        perm[i] = perm[j];
        perm[j] = tmp;
    }
    memset(c, 0, sizeof *c);
    for (int s = 0; s < AMAXSEQ; s++)
        for (int b = 0; b < AMAXBLK; b++)
            c->bt[s * AMAXBLK + b] = b < 4 ? perm[s * 4 + b] : -1;
    int32_t seqs[8] = {0, 0, 0, 0, 1, 2, 2, -1}, poss[8] = {0, 1, 2, 3, 9, 5, 6, 0};
    c->ctx[0] = 4, c->ctx[1] = 10, c->ctx[2] = 7, c->ctx[3] = 0;
    c->t = 8;
    for (int i = 0; i < 8; i++) {
        c->tseq[i] = seqs[i];
        c->pos[i] = poss[i];
        c->slot[i] = seqs[i] < 0 ? -1 : c->bt[seqs[i] * AMAXBLK + poss[i] / ABS] * ABS + poss[i] % ABS;
    }
    c->m = (gt_meta){c->pos, c->slot, c->tseq, c->ctx, c->bt, AMAXSEQ, AMAXBLK, AMAXCTX, false};
}

static gt_op attn_op(reel_dtype dt, int hd, const attn_case *c)
{
    gt_op op = op_new(REEL_OP_PAGED_ATTENTION, c->t, 5, 2);
    op.attrs.attn.p = (reel_attn_params){ REEL_ATTN_PARAMS_HEAD, AH, AHKV, hd, ABS, 0.0f};
    int64_t t = c->t;
    op.in[0] = gt_shape(dt, true, 2, (int64_t[]){t, AH * hd});
    op.in[1] = gt_shape(dt, true, 2, (int64_t[]){t, AHKV * hd});
    op.in[2] = op.in[1];
    op.in[3] = gt_shape(dt, false, 4, (int64_t[]){ANB, ABS, AHKV, hd});
    op.in[4] = op.in[3];
    op.out[0] = op.in[0];
    op.out[1] = gt_shape(REEL_F32, false, 2, (int64_t[]){REEL_ATTN_SPLIT_SLOTS, AH * hd + AH});
    op.scratch[1] = true;
    op.data[0] = gt_random(&rng, dt, t * AH * hd, -1, 1);
    op.data[1] = gt_random(&rng, dt, t * AHKV * hd, -1, 1);
    op.data[2] = gt_random(&rng, dt, t * AHKV * hd, -1, 1);
    op.data[3] = gt_random(&rng, dt, ANB * ABS * AHKV * hd, -1, 1); /* history already cached */
    op.data[4] = gt_random(&rng, dt, ANB * ABS * AHKV * hd, -1, 1);
    op.inout[3] = op.inout[4] = true;
    op.meta = &c->m;
    return op;
}

Test(gpu_ops, paged_attention_matches_host_on_a_mixed_batch, .init = setup, .fini = teardown)
{
    int hds[3] = {64, 40, 128};
    for (int i = 0; i < 3; i++)
        for (int h = 0; h < 3; h++) {
            attn_case c;
            attn_meta(&c);
            gt_op op = attn_op(dts[i], hds[h], &c);
            check(&op, "paged_attention");
        }
}

Test(gpu_ops, paged_attention_refuses_metadata_past_its_limits_like_the_host, .init = setup, .fini = teardown)
{
    for (int i = 0; i < 3; i++) {
        for (int breach = 0; breach < 4; breach++) {
            attn_case c;
            attn_meta(&c);
            switch (breach) {
            case 0: c.ctx[1] = AMAXCTX + 1; break;                  /* context past max_context */
            case 1: c.slot[2] = ANB * ABS; break;                    /* slot outside the cache */
            case 2: c.bt[2 * AMAXBLK + 1] = -1; break;               /* a hole in a block table */
            default: c.pos[4] = 10; break;                           /* position past its context */
            }
            gt_op op = attn_op(dts[i], 64, &c);
            check(&op, "paged_attention (limit)");
        }
    }
}

/* ---- top-k -------------------------------------------------------------- */

static void check_topk(int64_t t, int64_t n, int k, int page_size, const int32_t *lens)
{
    bool paged = page_size > 0;
    int64_t np = paged ? (n + page_size - 1) / page_size : 0;
    gt_op op = op_new(REEL_OP_TOPK, t, 3, 1);
    op.attrs.topk.k = k;
    op.attrs.topk.page_size = page_size;
    op.attrs.topk.has_page_table = paged;
    op.in[0] = gt_shape(REEL_F32, true, 2, (int64_t[]){t, n});
    op.in[1] = gt_shape(REEL_I32, true, 1, (int64_t[]){t});
    if (paged)
        op.in[2] = gt_shape(REEL_I32, true, 2, (int64_t[]){t, np});
    op.out[0] = gt_shape(REEL_I32, true, 2, (int64_t[]){t, k});
    float *sc = gt_random(&rng, REEL_F32, t * n, -4, 4);
    for (int64_t i = 0; i < t * n; i++) {
        double u = gt_uniform(&rng, 0, 1);
        if (u < 0.1)
            sc[i] = NAN;
        else if (u < 0.15)
            sc[i] = -INFINITY;
        else if (u < 0.2)
            sc[i] = u < 0.175 ? 0.0f : -0.0f; /* one score, two encodings */
        else
            sc[i] = floorf(sc[i] * 8.0f) / 8.0f; /* many ties */
    }
    op.data[0] = sc;
    op.data[1] = malloc((size_t)t * sizeof(int32_t));
    memcpy(op.data[1], lens, (size_t)t * sizeof(int32_t));
    if (paged) {
        int32_t *pt = gt_random(&rng, REEL_I32, t * np, -1, 200); /* -1: an unmapped page */
        op.data[2] = pt;
    }
    check(&op, paged ? "topk (paged)" : "topk");
}

Test(gpu_ops, topk_equals_host_exactly_with_nan_padding_ties_and_short_rows, .init = setup, .fini = teardown)
{
    int32_t lens[8] = {300, 0, 5, 17, 400, -3, 150, 16};
    check_topk(8, 300, 16, 0, lens);
    check_topk(8, 300, 16, 8, lens);
    check_topk(8, 300, 600, 0, lens); /* k past every row: all candidates, then -1 */
    int32_t big[3] = {5000, 4000, 2100};
    check_topk(3, 5000, 2048, 0, big);
    check_topk(3, 5000, 2048, 64, big);
}

/* A page past INT32_MAX / page_size: -1 and REEL_E_LIMIT in the error word,
 * as on the host (row 0), never a wrapped index; the largest page that
 * fits maps exactly (row 1). */
Test(gpu_ops, topk_refuses_a_paged_index_past_int32_like_the_host, .init = setup, .fini = teardown)
{
    const int64_t t = 2, n = 128, np = 2;
    gt_op op = op_new(REEL_OP_TOPK, t, 3, 1);
    op.attrs.topk.k = 4;
    op.attrs.topk.page_size = 64;
    op.attrs.topk.has_page_table = true;
    op.in[0] = gt_shape(REEL_F32, true, 2, (int64_t[]){t, n});
    op.in[1] = gt_shape(REEL_I32, true, 1, (int64_t[]){t});
    op.in[2] = gt_shape(REEL_I32, true, 2, (int64_t[]){t, np});
    op.out[0] = gt_shape(REEL_I32, true, 2, (int64_t[]){t, 4});
    float *sc = malloc((size_t)(t * n) * sizeof *sc);
    int32_t *lens = malloc((size_t)t * sizeof *lens), *pt = malloc((size_t)(t * np) * sizeof *pt);
    for (int64_t i = 0; i < t * n; i++)
        sc[i] = (float)(i % n);
    lens[0] = lens[1] = (int32_t)n;
    pt[0] = 0, pt[1] = 1 << 25;                        /* 2^25 * 64 = 2^31 */
    pt[2] = 0, pt[3] = (int32_t)((INT32_MAX - 63) / 64); /* the last page that fits */
    op.data[0] = sc, op.data[1] = lens, op.data[2] = pt;
    int32_t zero[2] = {0, 0}, one[1] = {1};
    gt_meta m = {.positions = zero, .slot_mapping = zero, .token_seq = zero, .context_lens = one,
                 .block_tables = zero, .max_seqs = 1, .max_blocks = 1, .max_context = 1};
    op.meta = &m; /* for the error word */
    check(&op, "topk (page index past INT32_MAX)");
}

/* ---- lse combine -------------------------------------------------------- */

static void check_lse(reel_dtype dt)
{
    const int64_t t = 6, p = 5, h = 3, dh = 16;
    gt_op op = op_new(REEL_OP_LSE_COMBINE, t, 2, 2);
    op.attrs.lse.num_heads = (int)h;
    op.in[0] = gt_shape(dt, true, 3, (int64_t[]){t, p, h * dh});
    op.in[1] = gt_shape(REEL_F32, true, 3, (int64_t[]){t, p, h});
    op.out[0] = gt_shape(dt, true, 2, (int64_t[]){t, h * dh});
    op.out[1] = gt_shape(REEL_F32, true, 2, (int64_t[]){t, h});
    op.data[0] = gt_random(&rng, dt, t * p * h * dh, -2, 2);
    float *l = gt_random(&rng, REEL_F32, t * p * h, -5, 5);
    op.data[1] = l;
    for (int64_t i = 0; i < t * p * h; i++) {
        double u = gt_uniform(&rng, 0, 1);
        float bad = u < 0.1 ? -INFINITY : u < 0.15 ? INFINITY : u < 0.2 ? NAN : 0.0f;
        if (bad != 0.0f || isnan(bad)) {
            l[i] = bad; /* an empty partial: its output may hold NaN and must not leak */
            int64_t tt = i / (p * h), pp = (i / h) % p, hh = i % h;
            for (int64_t d = 0; d < dh; d++)
                gt_set(op.data[0], dt, ((tt * p + pp) * h + hh) * dh + d, NAN);
        }
    }
    for (int64_t pp = 0; pp < p; pp++) /* token 2, head 1: every partial empty -> (0, -inf) */
        l[(2 * p + pp) * h + 1] = -INFINITY;
    check(&op, "lse_combine");
}

Test(gpu_ops, lse_combine_matches_host_with_empty_and_non_finite_partials, .init = setup, .fini = teardown)
{
    for (int i = 0; i < 3; i++)
        check_lse(dts[i]);
}

/* ---- sample ------------------------------------------------------------- */

/* The one float function a token depends on (ops/sample.h): the device's
 * weights and masses are the host's, bit for bit, for every bf16 and f16
 * value and random f32 logits, at several maxima and temperatures (the
 * token tests below would see a differing bit only where it moves a
 * threshold). */
Test(gpu_ops, sample_weights_are_the_hosts_bit_for_bit, .init = setup, .fini = teardown)
{
    const int64_t n = 3 * 65536;
    float *x = malloc((size_t)n * sizeof *x), *w = malloc((size_t)n * sizeof *w);
    uint64_t *q = malloc((size_t)n * sizeof *q);
    const float maxima[3] = { 0.0f, 7.25f, -3.5f }, temps[4] = { 1.0f, 0.35f, 2.5f, 1e-3f };
    for (int mi = 0; mi < 3; mi++)
        for (int ti = 0; ti < 4; ti++) {
            const float xmax = maxima[mi], c = reel_sample_scale(temps[ti]);
            for (int64_t i = 0; i < n; i++) {
                float v = i < 65536 ? reel_bf16_to_f32((uint16_t)i)
                          : i < 2 * 65536 ? reel_f16_to_f32((uint16_t)(i - 65536))
                                          : (float)gt_uniform(&rng, xmax - 80, xmax);
                x[i] = isnan(v) || v > xmax ? xmax : v; /* the kernel never weighs NaN or above the maximum */
            }
            cr_assert_eq(reel_cu_sample_weights(cctx->be, x, n, xmax, c, w, q), REEL_OK, "%s",
                         reel_ctx_last_error(cctx));
            for (int64_t i = 0; i < n; i++) {
                const float hw = reel_sample_weight(x[i], xmax, c);
                cr_assert(memcmp(&hw, &w[i], sizeof hw) == 0 && q[i] == reel_sample_mass(hw),
                          "w(%a) at max %g, T %g: device %a (mass %llu), host %a (mass %llu)", (double)x[i],
                          (double)xmax, (double)temps[ti], (double)w[i], (unsigned long long)q[i], (double)hw,
                          (unsigned long long)reel_sample_mass(hw));
            }
        }
    free(x), free(w), free(q);
}

/* t rows of v logits, every row a kind of its own (ops/sample.h's rules): */
enum { SK_GREEDY, SK_PLAIN, SK_TOPK_TIES, SK_TOPP, SK_MINP, SK_ALL, SK_TINY_TOPP, SK_TOPK1, SK_BADPARAM, SK_PEAKED,
       SK_KINDS };

static void sample_row(reel_dtype dt, void *x, float *p, int32_t *r, int64_t row, int64_t v, int kind)
{
    static const float prm[SK_KINDS][4] = {
        [SK_GREEDY] = { 0, 0.5f, 0.1f, 3 },       [SK_PLAIN] = { 1, 1, 0, 0 },
        [SK_TOPK_TIES] = { 0.8f, 1, 0, 50 },      [SK_TOPP] = { 0.9f, 0.9f, 0, 0 },
        [SK_MINP] = { 1.1f, 1, 0.1f, 0 },         [SK_ALL] = { 0.7f, 0.95f, 0.02f, 40 },
        [SK_TINY_TOPP] = { 1, 1e-3f, 0, 0 },      [SK_TOPK1] = { 2, 1, 0, 1 },
        [SK_BADPARAM] = { 1, 1, 0, 2.5f },        [SK_PEAKED] = { 1.2f, 0.5f, 0, 0 },
    };
    memcpy(p + row * 4, prm[kind], sizeof prm[kind]);
    for (int j = 0; j < 4; j++)
        r[row * 4 + j] = (int32_t)gt_next(&rng);
    const int64_t at = row * v;
    if (kind == SK_TOPK_TIES || kind == SK_TINY_TOPP || kind == SK_ALL) /* a grid: ties everywhere, at the top too */
        for (int64_t j = 0; j < v; j++)
            gt_set(x, dt, at + j, floor(gt_get(x, dt, at + j) * 2) / 2);
    if (kind == SK_PEAKED) /* an LLM's row: a few tokens far above the rest */
        for (int i = 0; i < 4; i++)
            gt_set(x, dt, at + gt_int(&rng, 0, v - 1), 10.0 + i);
    if (kind == SK_ALL || kind == SK_PLAIN) /* masked tokens */
        for (int64_t j = gt_int(&rng, 0, 9); j < v; j += 10)
            gt_set(x, dt, at + j, -INFINITY);
}

static gt_op sample_op(reel_dtype dt, int64_t t, int64_t v, int first_kind)
{
    gt_op op = op_new(REEL_OP_SAMPLE, t, 3, 1);
    op.in[0] = gt_shape(dt, true, 2, (int64_t[]){t, v});
    op.in[1] = gt_shape(REEL_F32, true, 2, (int64_t[]){t, REEL_SAMPLE_PARAMS});
    op.in[2] = gt_shape(REEL_I32, true, 2, (int64_t[]){t, REEL_SAMPLE_RNG});
    op.out[0] = gt_shape(REEL_I32, true, 1, (int64_t[]){t});
    op.data[0] = gt_random(&rng, dt, t * v, -4, 4);
    op.data[1] = malloc((size_t)t * 4 * sizeof(float));
    op.data[2] = malloc((size_t)t * 4 * sizeof(int32_t));
    for (int64_t row = 0; row < t; row++)
        sample_row(dt, op.data[0], op.data[1], op.data[2], row, v, (int)((row + first_kind) % SK_KINDS));
    if (t > 12) {
        gt_set(op.data[0], dt, 11 * v + v / 2, NAN);     /* row 11: a NaN gives -1 */
        gt_set(op.data[0], dt, 12 * v + v - 1, INFINITY); /* row 12: +inf gives -1 */
    }
    if (t > 13)
        for (int64_t j = 0; j < v; j++) /* row 13: every token masked gives -1 */
            gt_set(op.data[0], dt, 13 * v + j, -INFINITY);
    return op;
}

/* The GPU's tokens are the host's, bit for bit, on every row kind, for one
 * block a row, clusters of 2 to 8 blocks (one or a few long rows) and the
 * element path of rows that are not whole 16-byte packs. */
Test(gpu_ops, sample_equals_host_token_for_token_on_every_row_kind_and_split, .init = setup, .fini = teardown)
{
    static const int64_t shapes[][2] = { { 14, 1000 }, { 3, 32001 }, { 64, 32000 }, { 1, 128256 }, { 1, 152064 },
                                         { 8, 152064 }, { 20, 128256 }, { 200, 4096 } };
    for (int i = 0; i < 3; i++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            for (int k = 0; k < (shapes[s][0] == 1 ? SK_KINDS : 1); k++) { /* a lone row: every kind */
                gt_op op = sample_op(dts[i], shapes[s][0], shapes[s][1], k);
                char what[96];
                snprintf(what, sizeof what, "sample %s %lld x %lld (first kind %d)", reel_dtype_name(dts[i]),
                         (long long)shapes[s][0], (long long)shapes[s][1], k);
                check(&op, what);
            }
}

/* One row's token alone (a cluster of 8 blocks) and inside a batch of 64
 * (2 blocks a row) with other rows around it: the same. */
Test(gpu_ops, sample_gives_a_row_the_same_token_alone_and_in_a_batch, .init = setup, .fini = teardown)
{
    const int64_t v = 128256, b = 64, at = 37;
    const reel_op_impl *impl = gt_cuda_impl("cuda.sample");
    for (int i = 0; i < 3; i++) {
        gt_op big = sample_op(dts[i], b, v, 0), one = sample_op(dts[i], 1, v, 0);
        const size_t es = reel_dtype_size(dts[i]);
        for (int kind = 0; kind < SK_KINDS; kind++) { /* row `at` takes each kind in turn */
            sample_row(dts[i], big.data[0], big.data[1], big.data[2], at, v, kind);
            memcpy(one.data[0], (char *)big.data[0] + (size_t)(at * v) * es, (size_t)v * es);
            memcpy(one.data[1], (float *)big.data[1] + at * 4, 4 * sizeof(float));
            memcpy(one.data[2], (int32_t *)big.data[2] + at * 4, 4 * sizeof(int32_t));
            gt_result rb, ro;
            cr_assert_eq(gt_run(cctx->be, impl, &big, &rb), REEL_OK, "%s", reel_ctx_last_error(cctx));
            cr_assert_eq(gt_run(cctx->be, impl, &one, &ro), REEL_OK, "%s", reel_ctx_last_error(cctx));
            cr_assert_eq(((int32_t *)rb.out[0])[at], ((int32_t *)ro.out[0])[0],
                         "%s kind %d: row %lld of 64 gave %d, alone %d (seed %llu)", reel_dtype_name(dts[i]), kind,
                         (long long)at, ((int32_t *)rb.out[0])[at], ((int32_t *)ro.out[0])[0],
                         (unsigned long long)seed);
            gt_result_free(&rb);
            gt_result_free(&ro);
        }
        gt_op_free_data(&big);
        gt_op_free_data(&one);
    }
}
