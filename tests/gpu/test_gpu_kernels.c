/* The CUDA kernels' fast paths and in-place forms: every launch path of add
 * and mul gives the host's bits; rmsnorm (inplace_ok) with the output over
 * the input gives the bits of the out-of-place kernel, and rmsnorm and
 * add_rmsnorm from unaligned rows the bits of the aligned ones; a
 * matmul shape queries the cuBLASLt heuristic once; early-triggering PDL
 * kernels in a plan with cuBLAS nodes give the plain graph's bits. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/gpu/oprun.h"
#include "ops/cuda/cuda_ops.h"
#include "backend/ctx.h"
#include "backend/cuda/cuda_impl.h"
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

static const reel_op_impl *cuda_impl(const gt_op *op)
{
    const reel_op_impl *impl = reel_registry_select(REEL_BACKEND_CUDA, op->op, op->in, op->nin, op->out,
                                                    &op->attrs, &cctx->be->caps);
    cr_assert_not_null(impl, "no CUDA impl for op %d", (int)op->op);
    return impl;
}

/* ---- add and mul: every path gives the host's bits ----------------------- */

static void binary_bits(reel_op_kind k, reel_dtype dt, int64_t t, int64_t d, bool row)
{
    gt_op op;
    memset(&op, 0, sizeof op);
    op.op = k, op.rows = t, op.nin = 2, op.nout = 1;
    op.in[0] = gt_shape(dt, true, 2, (int64_t[]){t, d});
    op.in[1] = row ? gt_shape(dt, false, 1, (int64_t[]){d}) : op.in[0];
    op.out[0] = op.in[0];
    op.data[0] = gt_random(&rng, dt, t * d, -4, 4);
    op.data[1] = gt_random(&rng, dt, row ? d : t * d, -4, 4);
    const reel_op_impl *href = reel_registry_select(REEL_BACKEND_HOST, k, op.in, 2, op.out, &op.attrs,
                                                    &hctx->be->caps);
    gt_result want, got;
    cr_assert_eq(gt_run(hctx->be, href, &op, &want), REEL_OK, "%s", reel_ctx_last_error(hctx));
    cr_assert_eq(gt_run(cctx->be, cuda_impl(&op), &op, &got), REEL_OK, "%s", reel_ctx_last_error(cctx));
    size_t bytes = reel_shape_bytes(&op.out[0], t);
    for (size_t i = 0; i < bytes; i++)
        cr_assert_eq(((uint8_t *)got.out[0])[i], ((uint8_t *)want.out[0])[i],
                     "%s %s [%lld, %lld]%s: byte %zu differs from the host (seed %llu)",
                     k == REEL_OP_ADD ? "add" : "mul", reel_dtype_name(dt), (long long)t, (long long)d,
                     row ? " + row" : "", i, (unsigned long long)seed);
    gt_result_free(&want);
    gt_result_free(&got);
    gt_op_free_data(&op);
}

Test(gpu_kernels, add_and_mul_give_the_host_bits_on_the_small_vector_and_scalar_paths, .init = setup,
     .fini = teardown)
{
    /* The small path takes up to sm_count * 2048 elements: d = 2048 puts
     * `sms` rows exactly at the limit and sms + 1 just past it. */
    int64_t sms = cctx->be->caps.sm_count;
    for (int i = 0; i < 3; i++)
        for (int k = 0; k < 2; k++) {
            reel_op_kind kind = k ? REEL_OP_MUL : REEL_OP_ADD;
            for (int row = 0; row < 2; row++) {
                binary_bits(kind, dts[i], 1, 4096, row);     /* small */
                binary_bits(kind, dts[i], 5, 37, row);       /* small, odd */
                binary_bits(kind, dts[i], sms, 2048, row);   /* small, at the limit */
                binary_bits(kind, dts[i], sms + 1, 2048, row); /* vector */
                binary_bits(kind, dts[i], sms + 1, 2051, row); /* scalar grid-stride */
            }
        }
}

/* ---- in place: the output over the input --------------------------------- */

/* Runs op with out[0] at in[0]'s address; returns the output bytes. */
static void *run_aliased(const reel_op_impl *impl, const gt_op *op)
{
    reel_backend *be = cctx->be;
    reel_stream *s;
    void *dev[REEL_OP_MAX_IN] = {0};
    cr_assert_eq(be->vt->stream_create(be, &s), REEL_OK);
    for (int i = 0; i < op->nin; i++) {
        size_t bytes = reel_shape_bytes(&op->in[i], op->rows);
        cr_assert_eq(be->vt->dev_alloc(be, bytes, &dev[i]), REEL_OK);
        cr_assert_eq(be->vt->copy(be, s, dev[i], op->data[i], bytes, REEL_COPY_H2D), REEL_OK);
    }
    reel_launch l;
    memset(&l, 0, sizeof l);
    l.op = op->op, l.attrs = &op->attrs, l.in_shape = op->in, l.out_shape = op->out;
    memcpy(l.in, dev, sizeof l.in);
    l.out[0] = dev[0];
    l.rows = op->rows, l.stream = s;
    cr_assert_eq(impl->launch(be, &l), REEL_OK, "%s: %s", impl->name, reel_ctx_last_error(cctx));
    size_t ob = reel_shape_bytes(&op->out[0], op->rows);
    void *out = malloc(ob);
    cr_assert_eq(be->vt->copy(be, s, out, dev[0], ob, REEL_COPY_D2H), REEL_OK);
    cr_assert_eq(be->vt->stream_sync(be, s), REEL_OK, "%s", reel_ctx_last_error(cctx));
    for (int i = 0; i < op->nin; i++)
        be->vt->dev_free(be, dev[i]);
    be->vt->stream_destroy(be, s);
    return out;
}

/* In place and out of place on the GPU give the same bits (the out-of-place
 * kernels are checked against the host in test_gpu_ops). declared: the impl
 * says inplace_ok, so plans alias the output onto the input. */
static void same_bits_in_place(gt_op *op, const char *what, bool declared)
{
    const reel_op_impl *impl = cuda_impl(op);
    cr_assert_eq(impl->inplace_ok, declared, "%s: inplace_ok is %d", impl->name, (int)impl->inplace_ok);
    gt_result ref;
    cr_assert_eq(gt_run(cctx->be, impl, op, &ref), REEL_OK, "%s", reel_ctx_last_error(cctx));
    void *got = run_aliased(impl, op);
    size_t ob = reel_shape_bytes(&op->out[0], op->rows);
    reel_dtype dt = op->out[0].dtype;
    size_t es = reel_dtype_size(dt);
    for (size_t i = 0; i < ob / es; i++)
        cr_assert(memcmp((char *)got + i * es, (char *)ref.out[0] + i * es, es) == 0,
                  "%s %s rows %lld: element %zu in place %g, out of place %g (seed %llu)", what,
                  reel_dtype_name(dt), (long long)op->rows, i, gt_get(got, dt, (int64_t)i),
                  gt_get(ref.out[0], dt, (int64_t)i), (unsigned long long)seed);
    free(got);
    gt_result_free(&ref);
    gt_op_free_data(op);
}

static void rmsnorm_in_place(reel_dtype dt, int64_t t, int64_t d)
{
    gt_op op;
    memset(&op, 0, sizeof op);
    op.op = REEL_OP_RMSNORM, op.rows = t, op.nin = 2, op.nout = 1;
    op.attrs.rmsnorm.eps = 1e-5f;
    op.in[0] = gt_shape(dt, true, 2, (int64_t[]){t, d});
    op.in[1] = gt_shape(dt, false, 1, (int64_t[]){d});
    op.out[0] = op.in[0];
    op.data[0] = gt_random(&rng, dt, t * d, -3, 3);
    op.data[1] = gt_random(&rng, dt, d, 0.5, 1.5);
    same_bits_in_place(&op, "rmsnorm", true);
}

Test(gpu_kernels, rmsnorm_in_place_gives_the_out_of_place_bits, .init = setup, .fini = teardown)
{
    for (int i = 0; i < 3; i++) {
        rmsnorm_in_place(dts[i], 6, 96);
        rmsnorm_in_place(dts[i], 3, 5000); /* several elements per thread */
    }
}

/* ---- the norms' pack path: the same bits from unaligned rows ------------- */

/* Runs op with every operand one element past a 16-byte boundary (the pack
 * kernels' element loads); returns output o's bytes. */
static void *run_unaligned(const reel_op_impl *impl, const gt_op *op, int o)
{
    reel_backend *be = cctx->be;
    reel_stream *s;
    void *base[REEL_OP_MAX_IN + REEL_OP_MAX_OUT] = {0};
    reel_launch l;
    memset(&l, 0, sizeof l);
    const size_t es = reel_dtype_size(op->in[0].dtype);
    cr_assert_eq(be->vt->stream_create(be, &s), REEL_OK);
    for (int i = 0; i < op->nin + op->nout; i++) {
        const reel_shape *sh = i < op->nin ? &op->in[i] : &op->out[i - op->nin];
        size_t bytes = reel_shape_bytes(sh, op->rows);
        cr_assert_eq(be->vt->dev_alloc(be, bytes + 16, &base[i]), REEL_OK);
        char *p = (char *)base[i] + es;
        if (i < op->nin) {
            cr_assert_eq(be->vt->copy(be, s, p, op->data[i], bytes, REEL_COPY_H2D), REEL_OK);
            l.in[i] = p;
        } else {
            l.out[i - op->nin] = p;
        }
    }
    l.op = op->op, l.attrs = &op->attrs, l.in_shape = op->in, l.out_shape = op->out;
    l.rows = op->rows, l.stream = s;
    cr_assert_eq(impl->launch(be, &l), REEL_OK, "%s: %s", impl->name, reel_ctx_last_error(cctx));
    size_t ob = reel_shape_bytes(&op->out[o], op->rows);
    void *out = malloc(ob);
    cr_assert_eq(be->vt->copy(be, s, out, l.out[o], ob, REEL_COPY_D2H), REEL_OK);
    cr_assert_eq(be->vt->stream_sync(be, s), REEL_OK, "%s", reel_ctx_last_error(cctx));
    for (int i = 0; i < op->nin + op->nout; i++)
        be->vt->dev_free(be, base[i]);
    be->vt->stream_destroy(be, s);
    return out;
}

static void norm_unaligned(reel_op_kind k, reel_dtype dt, int64_t t, int64_t d)
{
    gt_op op;
    memset(&op, 0, sizeof op);
    const bool add = k == REEL_OP_ADD_RMSNORM;
    op.op = k, op.rows = t, op.nin = add ? 3 : 2, op.nout = add ? 2 : 1;
    op.attrs.rmsnorm.eps = 1e-5f;
    op.in[0] = gt_shape(dt, true, 2, (int64_t[]){t, d});
    op.in[1] = add ? op.in[0] : gt_shape(dt, false, 1, (int64_t[]){d});
    if (add)
        op.in[2] = gt_shape(dt, false, 1, (int64_t[]){d});
    op.out[0] = op.in[0];
    if (add)
        op.out[1] = op.in[0];
    op.data[0] = gt_random(&rng, dt, t * d, -3, 3);
    op.data[1] = add ? gt_random(&rng, dt, t * d, -3, 3) : gt_random(&rng, dt, d, 0.5, 1.5);
    if (add)
        op.data[2] = gt_random(&rng, dt, d, 0.5, 1.5);
    const reel_op_impl *impl = cuda_impl(&op);
    gt_result ref;
    cr_assert_eq(gt_run(cctx->be, impl, &op, &ref), REEL_OK, "%s", reel_ctx_last_error(cctx));
    for (int o = 0; o < op.nout; o++) {
        void *got = run_unaligned(impl, &op, o);
        size_t ob = reel_shape_bytes(&op.out[o], t);
        cr_assert(memcmp(got, ref.out[o], ob) == 0, "%s %s [%lld, %lld] output %d: unaligned bits differ (seed %llu)",
                  impl->name, reel_dtype_name(dt), (long long)t, (long long)d, o, (unsigned long long)seed);
        free(got);
    }
    gt_result_free(&ref);
    gt_op_free_data(&op);
}

Test(gpu_kernels, the_norms_pack_path_gives_the_same_bits_from_unaligned_rows, .init = setup, .fini = teardown)
{
    for (int i = 0; i < 3; i++)
        for (int k = 0; k < 2; k++) {
            reel_op_kind kind = k ? REEL_OP_ADD_RMSNORM : REEL_OP_RMSNORM;
            norm_unaligned(kind, dts[i], 3, 1024);
            norm_unaligned(kind, dts[i], 2, 12288);
        }
}

/* ---- matmul: the heuristic's answer is kept ------------------------------ */

Test(gpu_kernels, a_cublaslt_matmul_shape_queries_the_heuristic_once, .init = setup, .fini = teardown)
{
    reel_cuda *c = reel_cuda_of(cctx->be);
    for (int i = 1; i < 3; i++) {
        gt_op op;
        memset(&op, 0, sizeof op);
        op.op = REEL_OP_MATMUL, op.rows = 3 + i, op.nin = 2, op.nout = 1;
        op.in[0] = gt_shape(dts[i], true, 2, (int64_t[]){op.rows, 40});
        op.in[1] = gt_shape(dts[i], false, 2, (int64_t[]){40, 24});
        op.out[0] = gt_shape(dts[i], true, 2, (int64_t[]){op.rows, 24});
        op.data[0] = gt_random(&rng, dts[i], op.rows * 40, -1, 1);
        op.data[1] = gt_random(&rng, dts[i], 40 * 24, -1, 1);
        const reel_op_impl *impl = cuda_impl(&op);
        cr_assert_str_eq(impl->name, "cuda.matmul.cublaslt");
        int before = c->memo_used;
        gt_result r1, r2;
        cr_assert_eq(gt_run(cctx->be, impl, &op, &r1), REEL_OK, "%s", reel_ctx_last_error(cctx));
        cr_assert_eq(c->memo_used, before + 1, "the first launch of a shape keeps its algorithm (memo %d -> %d)",
                     before, c->memo_used);
        cr_assert_eq(gt_run(cctx->be, impl, &op, &r2), REEL_OK, "%s", reel_ctx_last_error(cctx));
        cr_assert_eq(c->memo_used, before + 1, "a second launch of the shape queried the heuristic again");
        cr_assert(memcmp(r1.out[0], r2.out[0], reel_shape_bytes(&op.out[0], op.rows)) == 0,
                  "the remembered algorithm changed the bits");
        gt_result_free(&r1);
        gt_result_free(&r2);
        gt_op_free_data(&op);
    }
}

/* ---- matmul tuning: timed once in the warm-up, then read ---------------- */

enum { TK = 1024, TN = 3072 };

/* y = x w, x [T, TK], w [TK, TN] bf16 ([K, N]: cuBLASLt's at every row
 * count), buckets 48 and 64, captured or eager. */
static reel_plan *tuning_plan(reel_ctx *c, bool capture, const void *w)
{
    reel_graph *g;
    cr_assert_eq(reel_graph_create(c, &g), REEL_OK);
    int64_t d[2] = {REEL_DIM_TOKENS, TK}, wd[2] = {TK, TN};
    reel_tensor x = reel_input(g, "x", REEL_BF16, 2, d), p = reel_param(g, "w", REEL_BF16, 2, wd);
    cr_assert_eq(reel_param_bind(g, p, w), REEL_OK);
    cr_assert_eq(reel_output(g, "y", reel_matmul(g, x, p, false)), REEL_OK);
    reel_compile_opts o = REEL_COMPILE_OPTS_INIT;
    o.num_buckets = 2;
    o.buckets[0] = 48;
    o.buckets[1] = 64;
    o.no_capture = !capture;
    reel_plan *pl = NULL;
    cr_assert_eq(reel_compile(g, &o, &pl), REEL_OK, "%s", reel_ctx_last_error(c));
    reel_graph_destroy(g);
    return pl;
}

static const void *tuning_step(reel_plan *p, const void *x, int rows)
{
    cr_assert_eq(reel_plan_set_input(p, "x", x, rows), REEL_OK);
    reel_step_info si = { REEL_STEP_INFO_HEAD, .num_tokens = rows};
    cr_assert_eq(reel_step(p, &si), REEL_OK, "%s", reel_ctx_last_error(cctx));
    const void *y;
    int64_t r;
    cr_assert_eq(reel_plan_output(p, "y", &y, &r), REEL_OK);
    return y;
}

/* In a context with matmul_tuning 1, the captured plan's warm-up times the
 * heuristic's candidates for each bucket's shape and the context keeps the
 * pick: replay gives an eager plan's bits, and no later launch times again.
 * The default context times nothing, and its results (the heuristic's
 * first algorithm) agree within bf16's rounding. */
Test(gpu_kernels, a_tuning_warm_up_times_matmul_candidates_and_every_later_launch_keeps_the_pick, .init = setup,
     .fini = teardown)
{
    void *w = gt_random(&rng, REEL_BF16, (int64_t)TK * TN, -1, 1), *x = gt_random(&rng, REEL_BF16, 64 * TK, -1, 1);
    const size_t yb = (size_t)64 * TN * 2;
    reel_ctx_opts co = REEL_CTX_OPTS_INIT;
    co.backend = REEL_BACKEND_CUDA;
    co.matmul_tuning = 1;
    reel_ctx *tc = NULL;
    cr_assert_eq(reel_ctx_create(&co, &tc), REEL_OK);
    reel_plan *pr = tuning_plan(tc, true, w);
    int tuned = reel_cuda_lt_tuned_count(tc->be);
    cr_assert_geq(tuned, 1, "no shape of the warm-up was timed");
    reel_plan *pe = tuning_plan(tc, false, w);
    uint16_t *yr = malloc(yb), *yu = malloc(yb);
    reel_plan *pu = tuning_plan(cctx, true, w);
    cr_assert_eq(reel_cuda_lt_tuned_count(cctx->be), 0, "the default context timed");
    static const int rows[2] = {48, 64};
    for (int i = 0; i < 2; i++) {
        const int m = rows[i];
        memcpy(yr, tuning_step(pr, x, m), (size_t)m * TN * 2);
        cr_assert(memcmp(yr, tuning_step(pe, x, m), (size_t)m * TN * 2) == 0, "rows %d: replay and eager differ", m);
        memcpy(yu, tuning_step(pu, x, m), (size_t)m * TN * 2);
        for (int64_t j = 0; j < (int64_t)m * TN; j++) {
            double a = gt_get(yr, REEL_BF16, j), b = gt_get(yu, REEL_BF16, j);
            cr_assert_leq(fabs(a - b), 0.02 * (1.0 + fabs(b)), "rows %d [%lld]: tuned %g, heuristic %g", m,
                          (long long)j, a, b);
        }
    }
    reel_plan_stats st = REEL_PLAN_STATS_INIT;
    cr_assert_eq(reel_plan_stats_get(pr, &st), REEL_OK);
    cr_assert_eq(st.replays, 2, "the captured plan's steps replayed");
    cr_assert_eq(reel_cuda_lt_tuned_count(tc->be), tuned, "a step timed again");
    reel_plan_destroy(pu);
    reel_plan_destroy(pe);
    reel_plan_destroy(pr);
    reel_ctx_destroy(tc);
    free(w), free(x), free(yr), free(yu);
}

/* ---- PDL: kernels trigger their successors first thing ------------------- */

enum { PD = 1024, PLAYERS = 4 };

/* Layers of matmul (cuBLAS, no PDL) -> silu_and_mul -> rmsnorm -> rope ->
 * mul -> add -> softmax, bf16: every kernel but the matmul may launch early
 * and must still see its producer's every store. */
static reel_plan *compile_layers(bool pdl, bool no_capture, const uint16_t *w, const uint16_t *v)
{
    reel_graph *g;
    cr_assert_eq(reel_graph_create(cctx, &g), REEL_OK);
    int64_t xd[2] = {REEL_DIM_TOKENS, PD}, wd[2] = {PD, 2 * PD}, vd[1] = {PD};
    reel_tensor x = reel_input(g, "x", REEL_BF16, 2, xd), pos = reel_positions(g);
    for (int i = 0; i < PLAYERS; i++) {
        char name[16];
        reel_tensor p[4];
        for (int j = 0; j < 4; j++) {
            snprintf(name, sizeof name, "p%d_%d", i, j);
            p[j] = reel_param(g, name, REEL_BF16, j ? 1 : 2, j ? vd : wd);
            reel_param_bind(g, p[j], j ? (const void *)(v + (size_t)(i * 3 + j - 1) * PD)
                                       : (const void *)(w + (size_t)i * PD * 2 * PD));
        }
        x = reel_matmul(g, x, p[0], false);
        x = reel_silu_and_mul(g, x);
        x = reel_rmsnorm(g, x, p[1], 1e-5f);
        x = reel_rope(g, x, pos, 128, 64, 10000.0f);
        x = reel_mul(g, x, p[2]);
        x = reel_add(g, x, p[3]);
        x = reel_softmax(g, x);
    }
    cr_assert_eq(reel_output(g, "y", x), REEL_OK, "%s", reel_ctx_last_error(cctx));
    reel_compile_opts o = REEL_COMPILE_OPTS_INIT;
    o.num_buckets = 3;
    o.buckets[0] = 1, o.buckets[1] = 8, o.buckets[2] = 64;
    o.pdl = pdl;
    o.no_capture = no_capture;
    reel_plan *p;
    cr_assert_eq(reel_compile(g, &o, &p), REEL_OK, "%s", reel_ctx_last_error(cctx));
    reel_graph_destroy(g);
    return p;
}

static void same_y(reel_plan *a, reel_plan *b, const char *what, int32_t n)
{
    const void *da, *db;
    int64_t ra, rb;
    cr_assert_eq(reel_plan_output(a, "y", &da, &ra), REEL_OK, "%s", reel_ctx_last_error(cctx));
    cr_assert_eq(reel_plan_output(b, "y", &db, &rb), REEL_OK, "%s", reel_ctx_last_error(cctx));
    cr_assert(ra == n && rb == n);
    cr_assert(memcmp(da, db, (size_t)n * PD * 2) == 0, "%s, %d tokens: bits differ from the plain graph", what, n);
}

Test(gpu_kernels, early_triggering_kernels_under_pdl_give_the_plain_graph_bits, .init = setup, .fini = teardown)
{
    uint16_t *w = gt_random(&rng, REEL_BF16, (int64_t)PLAYERS * PD * 2 * PD, -0.05, 0.05);
    uint16_t *v = gt_random(&rng, REEL_BF16, (int64_t)PLAYERS * 3 * PD, 0.5, 1.5);
    uint16_t *x = gt_random(&rng, REEL_BF16, 64 * PD, -1, 1);
    reel_plan *plain = compile_layers(false, false, w, v), *pdl = compile_layers(true, false, w, v);
    reel_plan *eager = compile_layers(true, true, w, v);
    int32_t positions[64];
    for (int i = 0; i < 64; i++)
        positions[i] = 3 * i + 1;
    const int32_t ns[4] = {1, 5, 8, 64};
    for (int k = 0; k < 4; k++) {
        reel_plan *ps[3] = {plain, pdl, eager};
        for (int i = 0; i < 3; i++) {
            cr_assert_eq(reel_plan_set_input(ps[i], "x", x, ns[k]), REEL_OK, "%s", reel_ctx_last_error(cctx));
            reel_step_info s = { REEL_STEP_INFO_HEAD, .num_tokens = ns[k], .positions = positions};
            cr_assert_eq(reel_step(ps[i], &s), REEL_OK, "%s", reel_ctx_last_error(cctx));
        }
        same_y(plain, pdl, "pdl graph", ns[k]);
        same_y(plain, eager, "pdl eager", ns[k]);
    }
    reel_plan_destroy(plain);
    reel_plan_destroy(pdl);
    reel_plan_destroy(eager);
    free(w), free(v), free(x);
}
