/* The fast paged attention (cuda.paged_attention: split-KV decode, tensor-
 * core prefill, the combine) against the host reference, over the shapes
 * reel promises: f32/f16/bf16, head dims 64 and 128, GQA 1, 4 and 8, block
 * sizes 16 and 32, contexts 1 to 8191, batches 1 to 64, prefill runs and
 * mixed batches; every guard of the reference; determinism. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/gpu/oprun.h"
#include "backend/ctx.h"
#include "ops/cuda/impls.h"
#include "tests/core/opts.h"

static reel_ctx *hctx, *cctx;
static uint64_t seed;
static gt_rng rng;

static void setup(void)
{
    gt_open(&hctx, &cctx, &seed, &rng);
}

static void teardown(void)
{
    gt_close(hctx, cctx);
}

static const reel_dtype dts[3] = {REEL_F32, REEL_F16, REEL_BF16};

enum { MAXS = 80 };

/* A batch: sequence s has qlen[s] query tokens, its last ones, ending at
 * context ctx[s]; tokens sequence after sequence, then npad padding tokens. */
typedef struct acase {
    int h, hkv, dh, bs;
    int nseq, npad; /* 1 .. MAXS, >= 0 */
    int32_t qlen[MAXS], ctx[MAXS];
    /* built */
    gt_meta m;
    int32_t *pos, *slot, *tseq, *ctxs, *bt;
    int64_t t, nblocks;
} acase;

static void build(acase *c, int32_t max_context)
{
    cr_assert(c->nseq > 0 && c->nseq <= MAXS);
    c->t = c->npad;
    int32_t maxb = 1;
    c->nblocks = 0;
    for (int s = 0; s < c->nseq; s++) {
        c->t += c->qlen[s];
        int32_t nb = (c->ctx[s] + c->bs - 1) / c->bs;
        maxb = nb > maxb ? nb : maxb;
        c->nblocks += nb;
    }
    c->nblocks += 3; /* spare blocks nobody's table names */
    int32_t mb = maxb + 1;
    c->pos = calloc((size_t)c->t, sizeof(int32_t));
    c->slot = calloc((size_t)c->t, sizeof(int32_t));
    c->tseq = calloc((size_t)c->t, sizeof(int32_t));
    c->ctxs = calloc((size_t)(c->nseq & 0xff), sizeof(int32_t));
    c->bt = calloc((size_t)c->nseq * (size_t)mb, sizeof(int32_t));
    int32_t *perm = malloc(sizeof(int32_t) * (size_t)c->nblocks);
    for (int64_t i = 0; i < c->nblocks; i++)
        perm[i] = (int32_t)i;
    for (int64_t i = c->nblocks - 1; i > 0; i--) {
        int64_t j = gt_int(&rng, 0, i);
        int32_t x = perm[i];
        perm[i] = perm[j];
        perm[j] = x;
    }
    int64_t at = 0, tok = 0;
    for (int s = 0; s < c->nseq; s++) {
        c->ctxs[s] = c->ctx[s];
        int32_t nb = (c->ctx[s] + c->bs - 1) / c->bs;
        for (int32_t b = 0; b < mb; b++)
            c->bt[(int64_t)s * mb + b] = b < nb ? perm[at + b] : -1;
        at += nb;
        for (int32_t i = 0; i < c->qlen[s]; i++, tok++) {
            int32_t p = c->ctx[s] - c->qlen[s] + i;
            c->tseq[tok] = s;
            c->pos[tok] = p;
            c->slot[tok] = c->bt[(int64_t)s * mb + p / c->bs] * c->bs + p % c->bs;
        }
    }
    for (; tok < c->t; tok++) {
        c->tseq[tok] = -1;
        c->slot[tok] = -1;
    }
    free(perm);
    c->m = (gt_meta){c->pos, c->slot, c->tseq, c->ctxs, c->bt, c->nseq, mb, max_context, false};
}

static void case_free(acase *c)
{
    free(c->pos);
    free(c->slot);
    free(c->tseq);
    free(c->ctxs);
    free(c->bt);
}

static gt_op op_of(reel_dtype dt, const acase *c)
{
    gt_op op;
    memset(&op, 0, sizeof op);
    op.op = REEL_OP_PAGED_ATTENTION;
    op.rows = c->t;
    op.nin = 5;
    op.nout = 2;
    op.attrs.attn.p = (reel_attn_params){ REEL_ATTN_PARAMS_HEAD, c->h, c->hkv, c->dh, c->bs, 0.0f};
    op.attrs.attn.p.scale = 1.0f / sqrtf((float)c->dh);
    int64_t t = c->t, qw = (int64_t)c->h * c->dh, kw = (int64_t)c->hkv * c->dh;
    op.in[0] = gt_shape(dt, true, 2, (int64_t[]){t, qw});
    op.in[1] = gt_shape(dt, true, 2, (int64_t[]){t, kw});
    op.in[2] = op.in[1];
    op.in[3] = gt_shape(dt, false, 4, (int64_t[]){c->nblocks, c->bs, c->hkv, c->dh});
    op.in[4] = op.in[3];
    op.out[0] = op.in[0];
    op.out[1] = gt_shape(REEL_F32, false, 2, (int64_t[]){REEL_ATTN_SPLIT_SLOTS, qw + c->h});
    op.scratch[1] = true;
    int64_t cache = c->nblocks * c->bs * kw;
    op.data[0] = gt_random(&rng, dt, t * qw, -1, 1);
    op.data[1] = gt_random(&rng, dt, t * kw, -1, 1);
    op.data[2] = gt_random(&rng, dt, t * kw, -1, 1);
    op.data[3] = gt_random(&rng, dt, cache, -1, 1); /* the history, already cached */
    op.data[4] = gt_random(&rng, dt, cache, -1, 1);
    op.inout[3] = op.inout[4] = true;
    op.meta = &c->m;
    return op;
}

static void run_case(acase *c, reel_dtype dt, int32_t max_context, const char *what)
{
    build(c, max_context);
    gt_op op = op_of(dt, c);
    char w[160];
    snprintf(w, sizeof w, "%s (%s, H %d/%d, dh %d, bs %d, %lld tokens)", what, reel_dtype_name(dt), c->h, c->hkv,
             c->dh, c->bs, (long long)c->t);
    gt_check_impl(hctx, cctx, &op, "cuda.paged_attention", seed, w);
    gt_op_free_data(&op);
    case_free(c);
}

static const int gqas[3] = {1, 4, 8};

/* Decode batches: one query token per sequence, contexts that cross chunk
 * and block edges. */
Test(gpu_attention, decode_matches_host, .init = setup, .fini = teardown, .timeout = 240)
{
    static const int32_t ctxs[8] = {1, 15, 16, 17, 127, 2048, 300, 64};
    for (int d = 0; d < 3; d++)
        for (int hd = 64; hd <= 128; hd *= 2)
            for (int gq = 0; gq < 3; gq++)
                for (int bs = 16; bs <= 32; bs *= 2) {
                    acase c = {.h = 8, .hkv = 8 / gqas[gq], .dh = hd, .bs = bs, .nseq = 8, .npad = 1};
                    for (int s = 0; s < 8; s++) {
                        c.qlen[s] = 1;
                        c.ctx[s] = ctxs[(s + gq + bs / 16) % 8];
                    }
                    run_case(&c, dts[d], 4096, "decode");
                }
}

Test(gpu_attention, decode_batch_1_long_context_and_batch_64, .init = setup, .fini = teardown, .timeout = 240)
{
    for (int d = 0; d < 3; d++) {
        acase one = {.h = 8, .hkv = 2, .dh = 128, .bs = 16, .nseq = 1};
        one.qlen[0] = 1;
        one.ctx[0] = 8191;
        run_case(&one, dts[d], 8192, "decode at 8191");
        acase many = {.h = 4, .hkv = 4, .dh = 64, .bs = 32, .nseq = 64, .npad = 0};
        for (int s = 0; s < 64; s++) {
            many.qlen[s] = 1;
            many.ctx[s] = (int32_t)gt_int(&rng, 1, 600);
        }
        run_case(&many, dts[d], 1024, "decode batch 64");
    }
}

/* Mixed batches: a fresh prefill, a chunked prefill over cached history,
 * decodes, a two-token run, padding. */
Test(gpu_attention, mixed_batch_matches_host, .init = setup, .fini = teardown, .timeout = 240)
{
    for (int d = 0; d < 3; d++)
        for (int hd = 64; hd <= 128; hd *= 2)
            for (int gq = 0; gq < 3; gq++)
                for (int bs = 16; bs <= 32; bs *= 2) {
                    acase c = {.h = 8, .hkv = 8 / gqas[gq], .dh = hd, .bs = bs, .nseq = 6, .npad = 3};
                    int32_t q[6] = {100, 1, 37, 2, 1, 70}, x[6] = {100, 2048, 300, 17, 1, 127};
                    memcpy(c.qlen, q, sizeof q);
                    memcpy(c.ctx, x, sizeof x);
                    run_case(&c, dts[d], 4096, "mixed");
                }
}

/* Long prefills. The prefill's key split (attn_prefill.cu) takes its width
 * from the grid: on 132 SMs, the 2-head cases and the 512-token 16-head case
 * run 4 warpgroups a block at head dim 64 and 2 at 128, the 640-token case
 * (160 blocks) 2, the large mixed batch 1. */
Test(gpu_attention, long_prefills_match_host, .init = setup, .fini = teardown, .timeout = 240)
{
    for (int d = 1; d < 3; d++) {
        acase w = {.h = 16, .hkv = 16, .dh = 64, .bs = 16, .nseq = 1};
        w.qlen[0] = 512;
        w.ctx[0] = 2048;
        run_case(&w, dts[d], 4096, "prefill 512 over 2048, 16 heads");
        w.qlen[0] = 640;
        w.ctx[0] = 700;
        run_case(&w, dts[d], 4096, "prefill 640 over 700, 16 heads");
        acase a = {.h = 2, .hkv = 1, .dh = 128, .bs = 16, .nseq = 1};
        a.qlen[0] = 512;
        a.ctx[0] = 2048;
        run_case(&a, dts[d], 4096, "prefill 512 over 2048");
        acase b = {.h = 2, .hkv = 2, .dh = 64, .bs = 32, .nseq = 1};
        b.qlen[0] = 2048;
        b.ctx[0] = 2048;
        run_case(&b, dts[d], 4096, "prefill 2048");
    }
}

/* A large mixed batch: 600 prefill tokens beside 40 decodes, a two-token
 * run and padding, 645 rows. With 32 and 16 kv heads the decode grid has
 * more than 8192 (token, chunk, head group) items, so its blocks take 4 and
 * 2 head groups each in turn (attn_decode_mma.cu, dm_ypb); with 4 it has
 * fewer and takes one. */
Test(gpu_attention, large_mixed_batch_matches_host, .init = setup, .fini = teardown, .timeout = 240)
{
    static const int hkvs[3] = {32, 16, 4};
    for (int d = 1; d < 3; d++)
        for (int k = 0; k < 3; k++) {
            acase c = {.h = 32, .hkv = hkvs[k], .dh = 64 * (1 + k % 2), .bs = 16, .nseq = 42, .npad = 3};
            c.qlen[0] = 600;
            c.ctx[0] = 900;
            c.qlen[1] = 2;
            c.ctx[1] = 33;
            for (int s = 2; s < 42; s++) {
                c.qlen[s] = 1;
                c.ctx[s] = (int32_t)gt_int(&rng, 1, 1500);
            }
            run_case(&c, dts[d], 2048, "large mixed");
        }
}

/* The fused rope (attrs.attn.rope_rot_dim: the compiler folds rope ops into
 * the attention): q and k arrive unrotated, the op rotates them in its KV
 * write and produces them as outputs 2 and 3; decode, prefill and mixed
 * batches, full and partial rotation, against the host reference. */
static void add_rope(gt_op *op, const acase *c, int rot)
{
    op->nin = 6;
    op->nout = 4;
    op->attrs.attn.rope_rot_dim = rot;
    op->attrs.attn.rope_theta = 10000.0f;
    op->in[5] = gt_shape(REEL_I32, true, 1, (int64_t[]){c->t});
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)c->t);
    cr_assert_not_null(pos);
    memcpy(pos, c->pos, sizeof(int32_t) * (size_t)c->t);
    op->data[5] = pos;
    op->out[2] = op->in[0];
    op->out[3] = op->in[1];
}

static void run_rope_case(acase *c, reel_dtype dt, int rot, const char *what)
{
    build(c, 4096);
    gt_op op = op_of(dt, c);
    add_rope(&op, c, rot);
    char w[160];
    snprintf(w, sizeof w, "%s rope %d (%s, H %d/%d, dh %d, %lld tokens)", what, rot, reel_dtype_name(dt), c->h,
             c->hkv, c->dh, (long long)c->t);
    gt_check_impl(hctx, cctx, &op, "cuda.paged_attention", seed, w);
    gt_check_impl(hctx, cctx, &op, "cuda.paged_attention.ref", seed, w);
    gt_op_free_data(&op);
    case_free(c);
}

Test(gpu_attention, fused_rope_matches_host, .init = setup, .fini = teardown, .timeout = 240)
{
    for (int d = 0; d < 3; d++)
        for (int hd = 64; hd <= 128; hd *= 2)
            for (int half = 0; half < 2; half++) {
                acase dec = {.h = 8, .hkv = 2, .dh = hd, .bs = 16, .nseq = 8, .npad = 1};
                for (int s = 0; s < 8; s++) {
                    dec.qlen[s] = 1;
                    dec.ctx[s] = 1 + 300 * s;
                }
                run_rope_case(&dec, dts[d], half ? hd / 2 : hd, "decode");
                acase mix = {.h = 8, .hkv = 8, .dh = hd, .bs = 32, .nseq = 4, .npad = 2};
                int32_t q[4] = {100, 1, 37, 1}, x[4] = {100, 2048, 300, 17};
                memcpy(mix.qlen, q, sizeof q);
                memcpy(mix.ctx, x, sizeof x);
                run_rope_case(&mix, dts[d], half ? hd / 2 : hd, "mixed");
            }
}

/* The guards' batch: a decode at context 3000, a run of run_len tokens at
 * 200, a decode at 50 and 2 padding rows, built, with breach b applied:
 * 0-5 the reference's guards, 6 a block sequences 0 and 2 share. */
enum { GUARD_BREACHES = 6, GUARD_SHARED_BLOCK = 6 };

static void guard_case(acase *c, int run_len, int b)
{
    *c = (acase){.h = 4, .hkv = 2, .dh = 64, .bs = 16, .nseq = 3, .npad = 2};
    int32_t q[3] = {1, run_len, 1}, x[3] = {3000, 200, 50};
    memcpy(c->qlen, q, sizeof q);
    memcpy(c->ctx, x, sizeof x);
    build(c, 4096);
    int32_t mb = c->m.max_blocks;
    switch (b) {
    case 0: c->ctxs[0] = 4097; break;                          /* a context past max_context */
    case 1: c->slot[3] = (int32_t)(c->nblocks * c->bs); break; /* a slot outside the cache */
    case 2: c->bt[0 * mb + 150] = -1; break;                   /* a hole late in a long decode */
    case 3: c->bt[1 * mb + 11] = (int32_t)c->nblocks; break;   /* a block past the cache in a run */
    case 4: c->pos[c->t - 3] = 60; break;                      /* a position past its context */
    case 5: c->tseq[1] = 7; break;                             /* a sequence past max_seqs, in a run */
    default: {
        /* sequence 2 (context 50: keys 0 .. 49) reads, at key 16 + 7, the
         * block sequence 0's token (position 2999, offset 7) writes */
        int32_t p0 = 2999;
        c->bt[2 * mb + 1] = c->bt[0 * mb + p0 / 16];
        cr_assert(16 + p0 % 16 < 49);
    } break;
    }
}

/* Every guard of the reference, on a decode token split into many chunks
 * (the bad block in a late chunk) and on a prefill run. */
Test(gpu_attention, guards_match_host, .init = setup, .fini = teardown, .timeout = 240)
{
    for (int d = 0; d < 3; d++)
        for (int breach = 0; breach < GUARD_BREACHES; breach++) {
            acase c;
            guard_case(&c, 40, breach);
            gt_op op = op_of(dts[d], &c);
            char w[64];
            snprintf(w, sizeof w, "guard %d (%s)", breach, reel_dtype_name(dts[d]));
            gt_check_impl(hctx, cctx, &op, "cuda.paged_attention", seed, w);
            gt_op_free_data(&op);
            case_free(&c);
        }
}

/* Is token t one of a multi-token run (a neighbour of the same sequence)? */
static bool in_run(const acase *c, int64_t t)
{
    int32_t s = c->tseq[t];
    return s != -1 && ((t > 0 && c->tseq[t - 1] == s) || (t + 1 < c->t && c->tseq[t + 1] == s));
}

/* The one-kernel decode (launches of at most REEL_ATTN_ONE_KERNEL_ROWS
 * tokens write the cache inside the decode kernel, ops/cuda/attention.cu):
 * the host's values, and the same bits (caches, rope outputs, error word,
 * and the attention rows of single tokens) as the two-kernel path of the
 * same launch (KV write, then decode and the prefill kernel: the launch
 * without the plan's counters), with its counters back at zero. The rows of
 * runs, which the one-kernel decode takes itself, are held to the host's
 * values only. c is built; rot 0: no fused rope. */
static void one_kernel_case(acase *c, reel_dtype dt, int rot, const char *what)
{
    gt_op op = op_of(dt, c);
    if (rot)
        add_rope(&op, c, rot);
    char w[200];
    snprintf(w, sizeof w, "one kernel: %s rope %d (%s, H %d/%d, dh %d, %lld tokens)", what, rot,
             reel_dtype_name(dt), c->h, c->hkv, c->dh, (long long)c->t);
    cr_assert(reel_cu_attn_one_kernel_size(cctx->be, dt, op.rows, c->h, c->hkv, c->dh),
              "%s: not a launch the one-kernel decode takes", w);
    gt_check_impl(hctx, cctx, &op, "cuda.paged_attention", seed, w);
    const reel_op_impl *impl = gt_cuda_impl("cuda.paged_attention");
    gt_result one, two;
    cr_assert_eq(gt_run(cctx->be, impl, &op, &one), REEL_OK, "%s", w);
    c->m.no_attn_cnt = true;
    cr_assert_eq(gt_run(cctx->be, impl, &op, &two), REEL_OK, "%s", w);
    c->m.no_attn_cnt = false;
    cr_assert_eq(one.cnt_left, 0, "%s: %lld counters left non-zero", w, (long long)one.cnt_left);
    cr_assert_eq(one.err, two.err, "%s: error word %d, two kernels %d", w, one.err, two.err);
    const size_t row0 = reel_shape_bytes(&op.out[0], 1);
    for (int64_t t = 0; t < c->t; t++)
        if (!in_run(c, t))
            cr_assert(memcmp((const char *)one.out[0] + t * row0, (const char *)two.out[0] + t * row0, row0) == 0,
                      "%s: attention row %lld differs from the two-kernel path", w, (long long)t);
    for (int i = 1; i < op.nout; i++)
        if (!op.scratch[i])
            cr_assert(memcmp(one.out[i], two.out[i], reel_shape_bytes(&op.out[i], op.rows)) == 0,
                      "%s: output %d differs from the two-kernel path", w, i);
    for (int i = 3; i < 5; i++)
        cr_assert(memcmp(one.inout[i], two.inout[i], reel_shape_bytes(&op.in[i], op.rows)) == 0,
                  "%s: cache %d differs from the two-kernel path", w, i);
    gt_result_free(&one);
    gt_result_free(&two);
    gt_op_free_data(&op);
}

Test(gpu_attention, one_kernel_decode_matches, .init = setup, .fini = teardown, .timeout = 240)
{
    for (int d = 1; d < 3; d++)
        for (int hd = 64; hd <= 128; hd *= 2)
            for (int g = 0; g < 3; g++)
                for (int r = 0; r < 3; r++) {
                    int rot = r == 0 ? 0 : r == 1 ? hd : hd / 2;
                    /* 15 decode tokens and a padding row, contexts across
                     * chunk and block edges */
                    acase dec = {.h = 16, .hkv = 16 / gqas[g], .dh = hd, .bs = 16, .nseq = 15, .npad = 1};
                    for (int s = 0; s < 15; s++) {
                        dec.qlen[s] = 1;
                        dec.ctx[s] = 1 + 211 * s;
                    }
                    build(&dec, 4096);
                    one_kernel_case(&dec, dts[d], rot, "decode");
                    case_free(&dec);
                    /* runs, which the decode takes too (the two-kernel
                     * path: the prefill kernel) */
                    acase mix = {.h = 16, .hkv = 16 / gqas[g], .dh = hd, .bs = 32, .nseq = 5, .npad = 2};
                    int32_t q[5] = {5, 1, 3, 1, 1}, x[5] = {40, 700, 3, 1, 2100};
                    memcpy(mix.qlen, q, sizeof q);
                    memcpy(mix.ctx, x, sizeof x);
                    build(&mix, 4096);
                    one_kernel_case(&mix, dts[d], rot, "mixed");
                    case_free(&mix);
                }
}

/* The most tokens the one-kernel decode takes at these heads, checked
 * against its bound: every count up to it is taken (no gap), and its blocks
 * (a token's kv heads, up to 16 query heads each) stay within one wave of
 * at most 4 blocks an SM and fill more than 3 an SM one token later (the
 * tensor-core decode holds 3 to 4 at these head dims). */
static int one_kernel_most_rows(reel_dtype dt, int h, int hkv, int dh)
{
    int rows = REEL_ATTN_ONE_KERNEL_ROWS;
    while (rows > 4 && !reel_cu_attn_one_kernel_size(cctx->be, dt, rows, h, hkv, dh))
        rows--;
    for (int r = 1; r <= rows; r++)
        cr_assert(reel_cu_attn_one_kernel_size(cctx->be, dt, r, h, hkv, dh), "H %d/%d dh %d: %d of %d tokens refused",
                  h, hkv, dh, r, rows);
    const int64_t per_token = (int64_t)hkv * ((h / hkv + 15) / 16), sms = cctx->be->caps.sm_count;
    cr_assert(rows * per_token <= 4 * sms, "H %d/%d dh %d: %d tokens past 4 blocks an SM", h, hkv, dh, rows);
    cr_assert(rows == REEL_ATTN_ONE_KERNEL_ROWS || (rows + 1) * per_token > 3 * sms,
              "H %d/%d dh %d: %d tokens refused within 3 blocks an SM", h, hkv, dh, rows + 1);
    return rows;
}

/* The one-kernel decode at its limits: the most tokens it takes, at most
 * REEL_ATTN_ONE_KERNEL_ROWS (32): of 16 kv heads at head dim 64 that is 32
 * (512 blocks unsplit, one wave of four blocks a multiprocessor on 132), at
 * head dim 128 fewer where the kernel's occupancy holds fewer blocks (3 a
 * multiprocessor: 24 tokens); GQA 1, 4 and 8; 3 of them padding rows, the
 * rest decode tokens, or a mix of runs (up to 6 tokens) and single tokens.
 * More tokens, or more blocks than a wave, take the two-kernel path. */
Test(gpu_attention, one_kernel_decode_matches_at_its_limits, .init = setup, .fini = teardown, .timeout = 240)
{
    cr_assert(!reel_cu_attn_one_kernel_size(cctx->be, REEL_BF16, REEL_ATTN_ONE_KERNEL_ROWS + 1, 16, 2, 64));
    cr_assert(!reel_cu_attn_one_kernel_size(cctx->be, REEL_BF16, 32, 32, 32, 64) || cctx->be->caps.sm_count >= 256,
              "32 tokens of 32 kv heads fill more than one wave");
    for (int d = 1; d < 3; d++)
        for (int hd = 64; hd <= 128; hd *= 2)
            for (int g = 0; g < 3; g++) {
                const int rows = one_kernel_most_rows(dts[d], 16, 16 / gqas[g], hd);
                cr_assert(hd == 128 || rows == REEL_ATTN_ONE_KERNEL_ROWS || cctx->be->caps.sm_count < 128,
                          "head dim 64: the one-kernel decode takes %d tokens", REEL_ATTN_ONE_KERNEL_ROWS);
                acase dec = {.h = 16, .hkv = 16 / gqas[g], .dh = hd, .bs = 16, .nseq = rows - 3, .npad = 3};
                for (int s = 0; s < rows - 3; s++) {
                    dec.qlen[s] = 1;
                    dec.ctx[s] = 1 + 37 * s;
                }
                build(&dec, 4096);
                one_kernel_case(&dec, dts[d], hd / 2, "decode at the limit");
                case_free(&dec);
                acase mix = {.h = 16, .hkv = 16 / gqas[g], .dh = hd, .bs = 32, .nseq = rows / 3, .npad = 1};
                int64_t t = mix.npad;
                for (int s = 0; s < mix.nseq; s++) {
                    mix.qlen[s] = s % 5 == 0 ? 1 + s % 9 : 1;
                    mix.ctx[s] = mix.qlen[s] + 3 + 53 * s;
                    t += mix.qlen[s];
                }
                cr_assert(t <= rows);
                mix.npad += (int)(rows - t);
                build(&mix, 4096);
                one_kernel_case(&mix, dts[d], 0, "mixed at the limit");
                case_free(&mix);
            }
}

/* Every guard on a launch the one-kernel decode takes, and a block two
 * sequences' tables share: sequence 1 attends the key sequence 0's token
 * writes in this step (another block of the same kernel writes it), which
 * the host's write-then-attend order shows it. */
Test(gpu_attention, one_kernel_guards_and_shared_blocks, .init = setup, .fini = teardown, .timeout = 240)
{
    for (int d = 1; d < 3; d++)
        for (int breach = 0; breach <= GUARD_SHARED_BLOCK; breach++) {
            acase c;
            guard_case(&c, 6, breach);
            char w[64];
            snprintf(w, sizeof w, "guard %d", breach);
            one_kernel_case(&c, dts[d], breach == GUARD_SHARED_BLOCK ? 64 : 0, w);
            case_free(&c);
        }
}

/* The persistent decode (two-kernel launches past one wave whose chunks are
 * at most REEL_ATTN_PERSIST_KEYS keys long, ops/cuda/attn_decode_mma.cu):
 * the host's values at f16 and bf16, head dims 64 and 128, GQA 1, 4 and 8,
 * block sizes 16 and 32. Unsplit (74 rows: 65 decode tokens, a run of 6 the
 * prefill kernel takes, 3 padding rows; one guard breached in each: a hole
 * in a block table, a context past max_context, a position past its
 * context) and split (decode rows to context 2048); each launch without
 * the plan's counters, so the two-kernel path takes it; the same bits
 * twice. */
static void persist_case(acase *c, reel_dtype dt, int32_t max_context, int breach, const char *what)
{
    build(c, max_context);
    const int32_t mb = c->m.max_blocks;
    switch (breach) {
    case 1: c->bt[5 * mb] = -1; break;
    case 2: c->ctxs[7] = max_context + 1; break;
    case 3: c->pos[9] = c->ctx[9]; break;
    default: break;
    }
    c->m.no_attn_cnt = true;
    char w[200];
    snprintf(w, sizeof w, "persistent: %s, breach %d (%s, H %d/%d, dh %d, bs %d, %lld tokens)", what, breach,
             reel_dtype_name(dt), c->h, c->hkv, c->dh, c->bs, (long long)c->t);
    cr_assert(reel_cu_attn_persist_grid(cctx->be, dt, c->t, c->h, c->hkv, c->dh, max_context) > 0,
              "%s: not a launch the persistent decode takes", w);
    gt_op op = op_of(dt, c);
    gt_check_impl(hctx, cctx, &op, "cuda.paged_attention", seed, w);
    const reel_op_impl *impl = gt_cuda_impl("cuda.paged_attention");
    gt_result a, b;
    cr_assert_eq(gt_run(cctx->be, impl, &op, &a), REEL_OK, "%s", w);
    cr_assert_eq(gt_run(cctx->be, impl, &op, &b), REEL_OK, "%s", w);
    cr_assert(memcmp(a.out[0], b.out[0], reel_shape_bytes(&op.out[0], op.rows)) == 0, "%s: two runs differ", w);
    cr_assert_eq(a.err, b.err, "%s", w);
    gt_result_free(&a);
    gt_result_free(&b);
    gt_op_free_data(&op);
    case_free(c);
}

/* One head configuration: unsplit with the guard `breach` (1 to 3), and
 * split at 2048 keys. */
static void persist_cases(reel_dtype dt, int hd, int gqa, int bs, int breach)
{
    acase un = {.h = 16 * gqa, .hkv = 16, .dh = hd, .bs = bs, .nseq = 66, .npad = 3};
    for (int s = 0; s < 65; s++) {
        un.qlen[s] = 1;
        un.ctx[s] = 1 + (s * 97) % 1000;
    }
    un.qlen[65] = 6;
    un.ctx[65] = 700;
    persist_case(&un, dt, 1024, breach, "unsplit");
    /* the fewest rows past 16 whose launch at 2048 keys it takes (so in
     * chunks of at most half the context) */
    int rows = 0;
    for (int r = 17; r <= 64 && !rows; r++)
        if (reel_cu_attn_persist_grid(cctx->be, dt, r, 16 * gqa, 16, hd, 2048) > 0)
            rows = r;
    cr_assert(rows > 0, "H %d/16 dh %d: no launch of 17 to 64 rows at 2048 keys takes it", 16 * gqa, hd);
    acase sp = {.h = 16 * gqa, .hkv = 16, .dh = hd, .bs = bs, .nseq = rows - 2, .npad = 2};
    for (int s = 0; s < rows - 2; s++) {
        sp.qlen[s] = 1;
        sp.ctx[s] = 1 + (s * 211) % 2048;
    }
    persist_case(&sp, dt, 2048, 0, "split");
}

Test(gpu_attention, persistent_decode_matches_host, .init = setup, .fini = teardown, .timeout = 240)
{
    int n = 0;
    for (int d = 1; d < 3; d++)
        for (int hd = 64; hd <= 128; hd *= 2)
            for (int gq = 0; gq < 3; gq++, n++)
                persist_cases(dts[d], hd, gqas[gq], n % 2 ? 32 : 16, 1 + n % 3);
}

/* Every guard on the persistent decode, few enough launches for the
 * sanitizers (bench/gpu.sh runs memcheck and racecheck over this test). */
Test(gpu_attention, persistent_decode_guards, .init = setup, .fini = teardown, .timeout = 240)
{
    for (int hd = 64; hd <= 128; hd *= 2)
        for (int breach = 1; breach <= 3; breach++)
            persist_cases(REEL_BF16, hd, 1, 16, breach);
}

/* The same launch twice gives the same bits (chunking depends on the launch,
 * never on timing). */
Test(gpu_attention, deterministic, .init = setup, .fini = teardown)
{
    const reel_op_impl *impl = gt_cuda_impl("cuda.paged_attention");
    for (int d = 1; d < 3; d++) {
        acase c = {.h = 8, .hkv = 1, .dh = 128, .bs = 16, .nseq = 3, .npad = 1};
        int32_t q[3] = {1, 65, 1}, x[3] = {5000, 400, 33};
        memcpy(c.qlen, q, sizeof q);
        memcpy(c.ctx, x, sizeof x);
        build(&c, 8192);
        gt_op op = op_of(dts[d], &c);
        gt_result a, b;
        cr_assert_eq(gt_run(cctx->be, impl, &op, &a), REEL_OK);
        cr_assert_eq(gt_run(cctx->be, impl, &op, &b), REEL_OK);
        size_t bytes = reel_shape_bytes(&op.out[0], op.rows);
        cr_assert(memcmp(a.out[0], b.out[0], bytes) == 0, "two runs differ (%s)", reel_dtype_name(dts[d]));
        gt_result_free(&a);
        gt_result_free(&b);
        gt_op_free_data(&op);
        case_free(&c);
    }
}

/* Head dims the fast kernels are not built for take the reference impl. */
Test(gpu_attention, other_head_dims_take_the_reference, .init = setup, .fini = teardown)
{
    acase c = {.h = 4, .hkv = 2, .dh = 40, .bs = 16, .nseq = 2, .npad = 1};
    int32_t q[2] = {3, 1}, x[2] = {30, 90};
    memcpy(c.qlen, q, sizeof q);
    memcpy(c.ctx, x, sizeof x);
    build(&c, 128);
    gt_op op = op_of(REEL_BF16, &c);
    const reel_op_impl *sel = reel_registry_select(REEL_BACKEND_CUDA, op.op, op.in, op.nin, op.out, &op.attrs,
                                                   &cctx->be->caps);
    cr_assert_str_eq(sel->name, "cuda.paged_attention.ref");
    gt_check_impl(hctx, cctx, &op, "cuda.paged_attention.ref", seed, "dh 40");
    gt_op_free_data(&op);
    case_free(&c);
}

/* ---- a plan of one attention node: replay == eager, bitwise ------------- */

enum { PH = 8, PKV = 2, PD = 64, PBS = 16, PSEQ = 8, PBT = 64 };

static reel_plan *attn_plan(reel_dtype dt, bool capture)
{
    reel_graph *g;
    cr_assert_eq(reel_graph_create(cctx, &g), REEL_OK);
    int64_t qd[2] = {REEL_DIM_TOKENS, PH * PD}, kd[2] = {REEL_DIM_TOKENS, PKV * PD};
    int64_t cd[4] = {PSEQ * PBT, PBS, PKV, PD};
    reel_attn_params ap = { REEL_ATTN_PARAMS_HEAD, PH, PKV, PD, PBS, 0.0f};
    reel_tensor y = reel_paged_attention(g, reel_input(g, "q", dt, 2, qd), reel_input(g, "k", dt, 2, kd),
                                         reel_input(g, "v", dt, 2, kd), reel_state(g, "kc", dt, 4, cd),
                                         reel_state(g, "vc", dt, 4, cd), &ap);
    reel_output(g, "y", y);
    reel_compile_opts o = REEL_COMPILE_OPTS_INIT;
    o.num_buckets = 3;
    o.buckets[0] = 1, o.buckets[1] = 8, o.buckets[2] = 64;
    o.max_context = PBT * PBS;
    o.max_seqs = PSEQ;
    o.no_capture = !capture;
    reel_plan *p = NULL;
    cr_assert_eq(reel_compile(g, &o, &p), REEL_OK, "%s", reel_ctx_last_error(cctx));
    reel_graph_destroy(g);
    return p;
}

/* Steps: qlen[s] tokens of sequence s ending at ctx[s]; the same random
 * q, k, v into both plans. */
static void plan_step(reel_plan *const *ps, reel_dtype dt, int nseq, const int32_t *qlen, const int32_t *ctx)
{
    int32_t qs[PSEQ + 1], pos[64], slot[64], bt[PSEQ * PBT];
    int32_t n = 0;
    qs[0] = 0;
    for (int s = 0; s < nseq; s++) {
        for (int b = 0; b < PBT; b++)
            bt[s * PBT + b] = s * PBT + (b * 5) % PBT; /* a scattered table */
        for (int i = 0; i < qlen[s]; i++, n++) {
            pos[n] = ctx[s] - qlen[s] + i;
            slot[n] = bt[s * PBT + pos[n] / PBS] * PBS + pos[n] % PBS;
        }
        qs[s + 1] = n;
    }
    reel_step_info si = { REEL_STEP_INFO_HEAD, n, nseq, qs, pos, slot, ctx, bt, PBT};
    void *q = gt_random(&rng, dt, (int64_t)n * PH * PD, -1, 1), *k = gt_random(&rng, dt, (int64_t)n * PKV * PD, -1, 1),
         *v = gt_random(&rng, dt, (int64_t)n * PKV * PD, -1, 1);
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(reel_plan_set_input(ps[i], "q", q, n), REEL_OK);
        cr_assert_eq(reel_plan_set_input(ps[i], "k", k, n), REEL_OK);
        cr_assert_eq(reel_plan_set_input(ps[i], "v", v, n), REEL_OK);
        cr_assert_eq(reel_step(ps[i], &si), REEL_OK, "%s", reel_ctx_last_error(cctx));
    }
    cr_assert_eq(reel_plan_last_fallback(ps[0]), REEL_FALLBACK_NONE, "%s",
                 reel_fallback_str(reel_plan_last_fallback(ps[0])));
    const void *ya, *yb;
    int64_t ra, rb;
    cr_assert_eq(reel_plan_output(ps[0], "y", &ya, &ra), REEL_OK);
    cr_assert_eq(reel_plan_output(ps[1], "y", &yb, &rb), REEL_OK);
    cr_assert_eq(ra, n);
    cr_assert_eq(rb, n);
    cr_assert(memcmp(ya, yb, (size_t)n * PH * PD * reel_dtype_size(dt)) == 0,
              "%d tokens (%s): replay and eager differ", n, reel_dtype_name(dt));
    free(q);
    free(k);
    free(v);
}

Test(gpu_attention, plan_replay_equals_eager_bitwise, .init = setup, .fini = teardown)
{
    for (int d = 1; d < 3; d++) {
        reel_plan *ps[2] = {attn_plan(dts[d], true), attn_plan(dts[d], false)};
        /* bucket 1: a decode split into many chunks */
        plan_step(ps, dts[d], 1, (int32_t[]){1}, (int32_t[]){700});
        /* bucket 8: a prefill run and decodes */
        plan_step(ps, dts[d], 4, (int32_t[]){3, 1, 1, 1}, (int32_t[]){3, 200, 65, 1000});
        /* bucket 64: a long prefill, a chunked prefill and decodes */
        plan_step(ps, dts[d], 5, (int32_t[]){40, 10, 1, 1, 1}, (int32_t[]){40, 300, 17, 900, 2});
        reel_plan_stats st = REEL_PLAN_STATS_INIT;
        reel_plan_stats_get(ps[0], &st);
        cr_assert_eq(st.replays, 3);
        reel_plan_destroy(ps[0]);
        reel_plan_destroy(ps[1]);
    }
}
