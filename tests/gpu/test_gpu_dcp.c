/* The layouts of paged attention across ranks in the CUDA kernels, on one
 * GPU. DCP: each "rank"'s local partial attention (cuda.paged_attention
 * with the DCP layout: its KV write, the tensor-core prefill, the split-KV
 * decode and its combine, the lse output) runs on its own cache in this
 * process and matches the host reference (outputs, lses, the cache it
 * wrote, the error word); the partials combined by cuda.lse_combine equal
 * monolithic attention (one cache, no layout). f16/bf16, head dims 64 and
 * 128, GQA 1, 4 and 8, 2 and 4 ranks, interleaves 1, 16 and the block
 * size, mixed batches (a fresh prefill, a chunked prefill, a two-token run,
 * decodes up to 2048, contexts shorter than N * I, padding); f32 (the
 * CUDA-core decode) and the reference impl too. CP: the gathered KV write
 * against the host. And the picker refuses what no kernel is built for. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/ctx.h"
#include "ops/attn_layout.h"
#include "tests/gpu/oprun.h"

static reel_ctx *hctx, *cctx;
static uint64_t seed;
static gt_rng rng;

static void setup(void) { gt_open(&hctx, &cctx, &seed, &rng); }
static void teardown(void) { gt_close(hctx, cctx); }

enum { MAXS = 8, MAXR = 4 };

/* A batch over sequences whose keys and values (the truth, by position)
 * are known: sequence s has qlen[s] new tokens ending at context ctx[s],
 * the earlier ones cached; then npad padding tokens. */
typedef struct dbatch {
    reel_dtype dt;
    int h, hkv, dh, bs, nseq, npad;
    int32_t qlen[MAXS], ctx[MAXS];
    int64_t t;
    void *truth_k[MAXS], *truth_v[MAXS];       /* [ctx][hkv*dh] */
    int32_t *pos, *tseq;
    void *q, *k, *v;                           /* the step's inputs */
} dbatch;

static int64_t kvw(const dbatch *b) { return (int64_t)b->hkv * b->dh; }
static int64_t qw(const dbatch *b) { return (int64_t)b->h * b->dh; }

static void batch_make(dbatch *b)
{
    b->t = b->npad;
    for (int s = 0; s < b->nseq; s++) {
        b->t += b->qlen[s];
        b->truth_k[s] = gt_random(&rng, b->dt, b->ctx[s] * kvw(b), -1, 1);
        b->truth_v[s] = gt_random(&rng, b->dt, b->ctx[s] * kvw(b), -1, 1);
    }
    b->pos = calloc((size_t)b->t, sizeof(int32_t));
    b->tseq = calloc((size_t)b->t, sizeof(int32_t));
    b->q = gt_random(&rng, b->dt, b->t * qw(b), -1, 1);
    b->k = gt_random(&rng, b->dt, b->t * kvw(b), -1, 1);
    b->v = gt_random(&rng, b->dt, b->t * kvw(b), -1, 1);
    size_t es = reel_dtype_size(b->dt), row = (size_t)kvw(b) * es;
    int64_t tok = 0;
    for (int s = 0; s < b->nseq; s++)
        for (int32_t i = 0; i < b->qlen[s]; i++, tok++) {
            int32_t p = b->ctx[s] - b->qlen[s] + i;
            b->pos[tok] = p;
            b->tseq[tok] = s;
            memcpy((char *)b->k + tok * row, (char *)b->truth_k[s] + p * row, row);
            memcpy((char *)b->v + tok * row, (char *)b->truth_v[s] + p * row, row);
        }
    for (; tok < b->t; tok++)
        b->tseq[tok] = -1;
}

static void batch_free(dbatch *b)
{
    for (int s = 0; s < b->nseq; s++)
        free(b->truth_k[s]), free(b->truth_v[s]);
    free(b->pos), free(b->tseq), free(b->q), free(b->k), free(b->v);
}

/* One cache's view of the batch: monolithic (d.n 1) or a DCP rank's pages,
 * holding the cached history it owns at its block table's slots. */
typedef struct bview {
    reel_dcp_view d;
    gt_meta m;
    int32_t *slot, *ctxs, *bt;
    int64_t nblocks;
} bview;

static void view_make(const dbatch *b, reel_dcp_view d, bview *v, void **kc, void **vc)
{
    v->d = d;
    int32_t maxb = 1;
    v->nblocks = 3; /* spare blocks no table names */
    for (int s = 0; s < b->nseq; s++) {
        int32_t nb = (reel_dcp_local_count(d, b->ctx[s]) + b->bs - 1) / b->bs;
        maxb = nb > maxb ? nb : maxb;
        v->nblocks += nb;
    }
    int32_t mb = maxb + 1;
    v->slot = calloc((size_t)b->t, sizeof(int32_t));
    v->ctxs = calloc(MAXS, sizeof(int32_t));
    v->bt = calloc((size_t)(MAXS * mb), sizeof(int32_t));
    int32_t *perm = malloc(sizeof(int32_t) * (size_t)v->nblocks);
    for (int64_t i = 0; i < v->nblocks; i++)
        perm[i] = (int32_t)i;
    for (int64_t i = v->nblocks - 1; i > 0; i--) {
        int64_t j = gt_int(&rng, 0, i);
        int32_t x = perm[i];
        perm[i] = perm[j], perm[j] = x;
    }
    int64_t cache = v->nblocks * b->bs * kvw(b);
    *kc = gt_random(&rng, b->dt, cache, -1, 1); /* a stray write or read shows */
    *vc = gt_random(&rng, b->dt, cache, -1, 1);
    size_t es = reel_dtype_size(b->dt), row = (size_t)kvw(b) * es;
    int64_t at = 0, tok = 0;
    for (int s = 0; s < b->nseq; s++) {
        v->ctxs[s] = b->ctx[s];
        int32_t nb = (reel_dcp_local_count(d, b->ctx[s]) + b->bs - 1) / b->bs;
        for (int32_t k = 0; k < mb; k++)
            v->bt[s * mb + k] = k < nb ? perm[at + k] : -1;
        at += nb;
        for (int32_t p = 0; p < b->ctx[s] - b->qlen[s]; p++) { /* the history this cache owns */
            if (reel_dcp_owner(d, p) != d.r)
                continue;
            int32_t li = reel_dcp_local_index(d, p);
            int64_t slot = (int64_t)v->bt[s * mb + li / b->bs] * b->bs + li % b->bs;
            memcpy((char *)*kc + slot * row, (char *)b->truth_k[s] + p * row, row);
            memcpy((char *)*vc + slot * row, (char *)b->truth_v[s] + p * row, row);
        }
        for (int32_t i = 0; i < b->qlen[s]; i++, tok++) { /* DCP reads only the -1s */
            int32_t p = b->pos[tok];
            v->slot[tok] = d.n > 1 ? 0 : v->bt[s * mb + p / b->bs] * b->bs + p % b->bs;
        }
    }
    for (; tok < b->t; tok++)
        v->slot[tok] = -1;
    free(perm);
    v->m = (gt_meta){ b->pos, v->slot, b->tseq, v->ctxs, v->bt, MAXS, mb, 4096, false };
}

static void view_free(bview *v) { free(v->slot), free(v->ctxs), free(v->bt); }

/* The attention node of a view: q, k, v of the batch, the view's caches;
 * outputs: the result, the split-KV workspace, the lse. */
static gt_op view_op(const dbatch *b, const bview *v, void *kc, void *vc, reel_attn_layout lay)
{
    gt_op op;
    memset(&op, 0, sizeof op);
    op.op = REEL_OP_PAGED_ATTENTION;
    op.rows = b->t;
    op.nin = 5;
    op.nout = 3;
    op.attrs.attn.p = (reel_attn_params){ REEL_ATTN_PARAMS_HEAD, b->h, b->hkv, b->dh, b->bs, 1.0f / sqrtf((float)b->dh) };
    op.attrs.attn.lay = lay;
    op.in[0] = gt_shape(b->dt, true, 2, (int64_t[]){ b->t, qw(b) });
    op.in[1] = gt_shape(b->dt, true, 2, (int64_t[]){ b->t, kvw(b) });
    op.in[2] = op.in[1];
    op.in[3] = gt_shape(b->dt, false, 4, (int64_t[]){ v->nblocks, b->bs, b->hkv, b->dh });
    op.in[4] = op.in[3];
    op.out[0] = op.in[0];
    op.out[1] = gt_shape(REEL_F32, false, 2, (int64_t[]){ REEL_ATTN_SPLIT_SLOTS, qw(b) + b->h });
    op.out[2] = gt_shape(REEL_F32, true, 2, (int64_t[]){ b->t, b->h });
    op.scratch[1] = true;
    size_t es = reel_dtype_size(b->dt);
    op.data[0] = malloc((size_t)(b->t * qw(b)) * es), memcpy(op.data[0], b->q, (size_t)(b->t * qw(b)) * es);
    op.data[1] = malloc((size_t)(b->t * kvw(b)) * es), memcpy(op.data[1], b->k, (size_t)(b->t * kvw(b)) * es);
    op.data[2] = malloc((size_t)(b->t * kvw(b)) * es), memcpy(op.data[2], b->v, (size_t)(b->t * kvw(b)) * es);
    op.data[3] = kc;
    op.data[4] = vc;
    op.inout[3] = op.inout[4] = true;
    op.meta = &v->m;
    return op;
}

/* Runs the node on impl after checking it against the host; *res: CUDA's. */
static void run_checked(gt_op *op, const char *impl, const char *what, gt_result *res)
{
    gt_check_impl(hctx, cctx, op, impl, seed, what);
    cr_assert_eq(gt_run(cctx->be, gt_cuda_impl(impl), op, res), REEL_OK, "%s: %s", what, reel_ctx_last_error(cctx));
}

static double tol(reel_dtype dt) { return dt == REEL_F32 ? 1e-4 : dt == REEL_F16 ? 6e-3 : 4e-2; }

/* N ranks' partials of the batch combined equal monolithic attention. */
static void dcp_case(dbatch *b, int n, int il, const char *impl, const char *tag)
{
    char what[160];
    snprintf(what, sizeof what, "%s: DCP %d ranks, interleave %d (%s, H %d/%d, dh %d, bs %d, %lld tokens)", tag, n,
             il, reel_dtype_name(b->dt), b->h, b->hkv, b->dh, b->bs, (long long)b->t);
    batch_make(b);
    /* monolithic, with its lse */
    bview mv;
    void *kc, *vc;
    view_make(b, (reel_dcp_view){ 1, 0, 1 }, &mv, &kc, &vc);
    gt_op mono = view_op(b, &mv, kc, vc, (reel_attn_layout){ .lse = true });
    gt_result mres;
    run_checked(&mono, impl, what, &mres);
    /* each rank on its own cache */
    size_t es = reel_dtype_size(b->dt);
    int64_t T = b->t, W = qw(b), H = b->h;
    void *outs = malloc((size_t)(T * n * W) * es);
    float *lses = malloc(sizeof(float) * (size_t)(T * n * H));
    for (int r = 0; r < n; r++) {
        bview rv;
        void *rkc, *rvc;
        view_make(b, (reel_dcp_view){ n, r, il }, &rv, &rkc, &rvc);
        gt_op op = view_op(b, &rv, rkc, rvc,
                           (reel_attn_layout){ .dcp = n, .dcp_rank = r, .interleave = il, .lse = true });
        char wr[200];
        snprintf(wr, sizeof wr, "%s, rank %d", what, r);
        gt_result rres;
        run_checked(&op, impl, wr, &rres);
        for (int64_t t = 0; t < T; t++) {
            memcpy((char *)outs + ((t * n + r) * W) * es, (char *)rres.out[0] + t * W * es, (size_t)W * es);
            memcpy(lses + (t * n + r) * H, (float *)rres.out[2] + t * H, sizeof(float) * (size_t)H);
        }
        gt_result_free(&rres);
        gt_op_free_data(&op);
        view_free(&rv);
    }
    /* combined by lse_combine on the GPU */
    gt_op c;
    memset(&c, 0, sizeof c);
    c.op = REEL_OP_LSE_COMBINE;
    c.rows = T;
    c.nin = 2;
    c.nout = 2;
    c.attrs.lse.num_heads = b->h;
    c.in[0] = gt_shape(b->dt, true, 3, (int64_t[]){ T, n, W });
    c.in[1] = gt_shape(REEL_F32, true, 3, (int64_t[]){ T, n, H });
    c.out[0] = gt_shape(b->dt, true, 2, (int64_t[]){ T, W });
    c.out[1] = gt_shape(REEL_F32, true, 2, (int64_t[]){ T, H });
    c.data[0] = outs;
    c.data[1] = lses;
    gt_result cres;
    run_checked(&c, "cuda.lse_combine", what, &cres);
    double at = tol(b->dt);
    for (int64_t t = 0; t < T; t++) {
        for (int64_t e = 0; e < W; e++) {
            double got = gt_get(cres.out[0], b->dt, t * W + e), want = gt_get(mres.out[0], b->dt, t * W + e);
            cr_assert(fabs(got - want) <= at + at * fabs(want), "%s: token %lld (position %d) elem %lld: %g, monolithic %g (seed %llu)",
                      what, (long long)t, b->pos[t], (long long)e, got, want, (unsigned long long)seed);
        }
        for (int64_t hh = 0; hh < H; hh++) {
            float got = ((float *)cres.out[1])[t * H + hh], want = ((float *)mres.out[2])[t * H + hh];
            cr_assert(got == want || fabsf(got - want) <= 1e-3f * fmaxf(1.0f, fabsf(want)),
                      "%s: token %lld head %lld lse %g, monolithic %g", what, (long long)t, (long long)hh,
                      (double)got, (double)want);
        }
    }
    gt_result_free(&cres);
    gt_op_free_data(&c);
    gt_result_free(&mres);
    gt_op_free_data(&mono);
    view_free(&mv);
    batch_free(b);
}

/* A fresh prefill of 100, decodes at 2048 (split-KV) and at contexts 1 and
 * 5, a chunked prefill of 37 over 300, a two-token run, padding. */
static void mixed(dbatch *b, reel_dtype dt, int h, int hkv, int dh, int bs)
{
    static const int32_t q[6] = { 100, 1, 37, 2, 1, 1 }, x[6] = { 100, 2048, 300, 17, 1, 5 };
    memset(b, 0, sizeof *b);
    *b = (dbatch){ .dt = dt, .h = h, .hkv = hkv, .dh = dh, .bs = bs, .nseq = 6, .npad = 2 };
    memcpy(b->qlen, q, sizeof q);
    memcpy(b->ctx, x, sizeof x);
}

Test(gpu_dcp, fast_kernels_partials_combine_to_monolithic_attention, .init = setup, .fini = teardown, .timeout = 600)
{
    static const reel_dtype dts[2] = { REEL_F16, REEL_BF16 };
    static const int gq[3] = { 1, 4, 8 }, layouts[3][2] = { { 2, 1 }, { 4, 16 }, { 2, 16 } };
    for (int d = 0; d < 2; d++)
        for (int hd = 64; hd <= 128; hd *= 2)
            for (int g = 0; g < 3; g++)
                for (int l = 0; l < 3; l++) {
                    dbatch b;
                    mixed(&b, dts[d], 8, 8 / gq[g], hd, 16);
                    dcp_case(&b, layouts[l][0], layouts[l][1], "cuda.paged_attention", "mixed");
                }
}

Test(gpu_dcp, interleave_of_the_block_size_f32_and_the_reference_kernel, .init = setup, .fini = teardown,
     .timeout = 300)
{
    dbatch b;
    mixed(&b, REEL_BF16, 8, 2, 128, 32);
    dcp_case(&b, 4, 32, "cuda.paged_attention", "I = bs");
    mixed(&b, REEL_F32, 8, 2, 64, 16);
    dcp_case(&b, 2, 16, "cuda.paged_attention", "f32 (CUDA-core decode)");
    mixed(&b, REEL_F16, 4, 2, 40, 16);
    dcp_case(&b, 4, 1, "cuda.paged_attention.ref", "reference impl, dh 40");
}

/* CP's write: every rank's gathered row at its kv_slots entry (-1 skipped,
 * one outside the cache refused), then attention as without a layout. */
Test(gpu_dcp, cp_write_of_gathered_rows_matches_host, .init = setup, .fini = teardown)
{
    static const reel_dtype dts[3] = { REEL_F32, REEL_F16, REEL_BF16 };
    for (int d = 0; d < 3; d++)
        for (int cp = 1; cp <= 4; cp *= 2) {
            dbatch b;
            mixed(&b, dts[d], 8, 2, 64, 16);
            batch_make(&b);
            bview v;
            void *kc, *vc;
            view_make(&b, (reel_dcp_view){ 1, 0, 1 }, &v, &kc, &vc);
            gt_op op = view_op(&b, &v, kc, vc, (reel_attn_layout){ .cp = cp });
            op.nin = 6;
            op.nout = 2;
            int64_t t = b.t, w = kvw(&b) * cp;
            free(op.data[1]), free(op.data[2]);
            op.in[1] = gt_shape(b.dt, true, 2, (int64_t[]){ t, w });
            op.in[2] = op.in[1];
            op.data[1] = gt_random(&rng, b.dt, t * w, -1, 1);
            op.data[2] = gt_random(&rng, b.dt, t * w, -1, 1);
            op.in[5] = gt_shape(REEL_I32, true, 2, (int64_t[]){ t, cp });
            int32_t *slots = malloc(sizeof(int32_t) * (size_t)(t * cp));
            int64_t nslots = v.nblocks * b.bs;
            for (int64_t i = 0; i < t * cp; i++) /* distinct slots, a few -1 */
                slots[i] = i % 7 == 3 ? -1 : (int32_t)((i * 37) % nslots);
            if (cp == 4)
                slots[5] = (int32_t)nslots; /* outside the cache */
            op.data[5] = slots;
            char what[64];
            snprintf(what, sizeof what, "CP write, %d ranks (%s)", cp, reel_dtype_name(b.dt));
            gt_check_impl(hctx, cctx, &op, "cuda.paged_attention", seed, what);
            gt_check_impl(hctx, cctx, &op, "cuda.paged_attention.ref", seed, what);
            gt_op_free_data(&op);
            view_free(&v);
            batch_free(&b);
        }
}

/* The picker refuses a layout no kernel is built for (DCP with CP), so no
 * kernel without support runs it. */
Test(gpu_dcp, no_cuda_kernel_takes_dcp_with_cp, .init = setup, .fini = teardown)
{
    dbatch b;
    mixed(&b, REEL_BF16, 8, 2, 64, 16);
    batch_make(&b);
    bview v;
    void *kc, *vc;
    view_make(&b, (reel_dcp_view){ 1, 0, 1 }, &v, &kc, &vc);
    gt_op op = view_op(&b, &v, kc, vc, (reel_attn_layout){ .dcp = 2, .interleave = 1, .cp = 2, .lse = true });
    op.nin = 6;
    op.in[5] = gt_shape(REEL_I32, true, 2, (int64_t[]){ b.t, 2 });
    cr_assert_null(reel_registry_select(REEL_BACKEND_CUDA, op.op, op.in, op.nin, op.out, &op.attrs, &cctx->be->caps));
    gt_op_free_data(&op);
    view_free(&v);
    batch_free(&b);
}
