/* The skinny-matmul kernel (ops/cuda/gemv.cu). Through its direct entry
 * (the configuration the impl picks, or any other): matches the host
 * reference at every M from 1 to 16 for both weight layouts and up to 32
 * for [N, K] (two row tiles), f16 and bf16,
 * aligned and ragged K and N, cluster split-K and one-block shapes alike;
 * gives the same bits on every run and whatever the batch around a row.
 * Through the impl (cuda.matmul.gemv): the registry picks it for [N, K]
 * weights (what a decode step measured faster), launches above 32 rows give
 * cuBLASLt's bits, replay and PDL give the eager bits, and the shapes it
 * refuses stay with cuBLASLt (or sgemm). */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/gpu/oprun.h"
#include "ops/cuda/gemv.h"
#include "backend/ctx.h"
#include "backend/cuda/cuda.h"
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

/* ---- the kernel through its direct entry, as a test-local impl ---------- */

static bool g_fixed;       /* run g_cfg instead of the impl's pick */
static reel_gemv_cfg g_cfg;

static reel_status direct_launch(reel_backend *be, const reel_launch *l)
{
    bool wt = l->attrs->matmul.w_transposed;
    int k = (int)l->in_shape[0].dims[1];
    int n = (int)(wt ? l->in_shape[1].dims[0] : l->in_shape[1].dims[1]);
    reel_gemv_cfg c = g_fixed ? g_cfg : reel_cuda_gemv_pick(n, k, wt, be->caps.sm_count);
    cudaError_t e = reel_cuda_gemv_run(l->in_shape[0].dtype, wt, l->in[0], l->in[1], l->out[0], (int)l->rows, n, k,
                                       c, reel_cuda_stream_handle(l->stream), l->pdl);
    if (e == cudaSuccess)
        e = cudaGetLastError();
    return e == cudaSuccess ? REEL_OK : reel_seterr(be->err, REEL_E_BACKEND, "gemv: %s", cudaGetErrorString(e));
}

static const reel_op_impl kernel = {.name = "gemv kernel (direct)", .op = REEL_OP_MATMUL,
                                    .backend = REEL_BACKEND_CUDA, .launch = direct_launch};

/* x [m, k] (token rows) times w [n, k] (wt) or [k, n], random in [-1, 1). */
static gt_op mm_op(reel_dtype dt, int64_t m, int64_t k, int64_t n, bool wt)
{
    gt_op op;
    memset(&op, 0, sizeof op);
    op.op = REEL_OP_MATMUL, op.rows = m, op.nin = 2, op.nout = 1;
    op.attrs.matmul.w_transposed = wt;
    op.in[0] = gt_shape(dt, true, 2, (int64_t[]){m, k});
    op.in[1] = gt_shape(dt, false, 2, wt ? (int64_t[]){n, k} : (int64_t[]){k, n});
    op.out[0] = gt_shape(dt, true, 2, (int64_t[]){m, n});
    op.data[0] = gt_random(&rng, dt, m * k, -1, 1);
    op.data[1] = gt_random(&rng, dt, k * n, -1, 1);
    return op;
}

static void *run_bits(const reel_op_impl *impl, const gt_op *op)
{
    gt_result r;
    cr_assert_eq(gt_run(cctx->be, impl, op, &r), REEL_OK, "%s: %s", impl->name, reel_ctx_last_error(cctx));
    void *out = r.out[0];
    r.out[0] = NULL;
    gt_result_free(&r);
    return out;
}

static void *host_bits(const gt_op *op)
{
    const reel_op_impl *href = reel_registry_select(REEL_BACKEND_HOST, op->op, op->in, op->nin, op->out,
                                                    &op->attrs, &hctx->be->caps);
    cr_assert_not_null(href);
    gt_result r;
    cr_assert_eq(gt_run(hctx->be, href, op, &r), REEL_OK, "host: %s", reel_ctx_last_error(hctx));
    void *out = r.out[0];
    r.out[0] = NULL;
    gt_result_free(&r);
    return out;
}

/* Every element within the dtype's tolerance of the host's (oprun.c's:
 * one output rounding plus float32 sums in another order). */
static void expect_close(const gt_op *op, const void *want, const void *got, const char *what)
{
    reel_dtype dt = op->out[0].dtype;
    double tol = dt == REEL_F16 ? 4e-3 : 3e-2;
    int64_t n = reel_shape_numel(&op->out[0], op->rows);
    for (int64_t i = 0; i < n; i++) {
        double h = gt_get(want, dt, i), g = gt_get(got, dt, i);
        cr_assert(fabs(g - h) <= tol + tol * fabs(h), "%s: out[%lld] = %.9g, host %.9g (seed %llu)", what,
                  (long long)i, g, h, (unsigned long long)seed);
    }
}

static void check(reel_dtype dt, int64_t m, int64_t k, int64_t n, bool wt)
{
    char what[128];
    snprintf(what, sizeof what, "gemv %s M=%lld K=%lld N=%lld%s", reel_dtype_name(dt), (long long)m, (long long)k,
             (long long)n, wt ? " (w transposed)" : "");
    gt_op op = mm_op(dt, m, k, n, wt);
    void *want = host_bits(&op), *got = run_bits(&kernel, &op);
    expect_close(&op, want, got, what);
    free(want), free(got);
    gt_op_free_data(&op);
}

static const reel_dtype dts[2] = {REEL_F16, REEL_BF16};
static const int64_t ms[8] = {1, 2, 3, 4, 7, 8, 13, 16};
/* [N, K] only: two row tiles, the second one partial or whole */
static const int64_t ms_nk[4] = {17, 24, 31, 32};

Test(gpu_gemv, matches_host_at_every_m_for_both_layouts_with_aligned_k_and_n, .init = setup, .fini = teardown)
{
    for (int d = 0; d < 2; d++) {
        for (int wt = 0; wt < 2; wt++)
            for (int i = 0; i < 8; i++) {
                check(dts[d], ms[i], 1024, 1024, wt);
                check(dts[d], ms[i], 4096, 1024, wt); /* split over a cluster */
            }
        for (int i = 0; i < 4; i++) {
            check(dts[d], ms_nk[i], 1024, 1024, true);
            check(dts[d], ms_nk[i], 4096, 1024, true);
            check(dts[d], ms_nk[i], 1024, 8192, true); /* two blocks a multiprocessor */
        }
    }
}

/* [K, N] stops at 16 rows, [N, K] at 32: the entry refuses more. */
Test(gpu_gemv, the_entry_refuses_rows_past_each_layouts_limit, .init = setup, .fini = teardown)
{
    reel_gemv_cfg c = reel_cuda_gemv_pick(1024, 1024, true, cctx->be->caps.sm_count);
    cr_assert_eq(reel_cuda_gemv_run(REEL_BF16, true, NULL, NULL, NULL, REEL_GEMV_MAX_M + 1, 1024, 1024, c, NULL,
                                    false),
                 cudaErrorInvalidValue);
    c = reel_cuda_gemv_pick(1024, 1024, false, cctx->be->caps.sm_count);
    cr_assert_eq(reel_cuda_gemv_run(REEL_BF16, false, NULL, NULL, NULL, REEL_GEMV_MAX_M_KN + 1, 1024, 1024, c, NULL,
                                    false),
                 cudaErrorInvalidValue);
}

Test(gpu_gemv, matches_host_for_large_n_and_tall_k, .init = setup, .fini = teardown)
{
    const int64_t few[5] = {1, 8, 16, 24, 32};
    for (int d = 0; d < 2; d++)
        for (int wt = 0; wt < 2; wt++)
            for (int i = 0; i < (wt ? 5 : 3); i++) {
                check(dts[d], few[i], 1024, 14336, wt);
                check(dts[d], few[i], 14336, 256, wt);
            }
}

Test(gpu_gemv, matches_host_for_ragged_k_and_n, .init = setup, .fini = teardown)
{
    for (int d = 0; d < 2; d++)
        for (int i = 0; i < 8; i++) {
            /* K a multiple of 8 but not of a step (32 or 16); N off the
             * warp's tile (32 rows, 64 columns); tiny K. */
            check(dts[d], ms[i], 4104, 1000, true);
            check(dts[d], ms[i], 4104, 1000, false);
            check(dts[d], ms[i], 24, 72, false);
            /* [N, K] takes any N */
            check(dts[d], ms[i], 4096, 1, true);
            check(dts[d], ms[i], 4096, 3, true);
            check(dts[d], ms[i], 1032, 1001, true);
        }
}

/* Every configuration bench/gemv.cu sweeps gives the host's answer; a
 * cluster the device cannot place is a launch error, counted, not a wrong
 * result. */
Test(gpu_gemv, every_configuration_matches_host, .init = setup, .fini = teardown)
{
    const int64_t shapes[2][2] = {{1024, 1024}, {4104, 1000}}; /* K, N */
    int ran = 0, unplaced = 0;
    for (int wt = 0; wt < 2; wt++)
        for (int s = 0; s < 2; s++)
            for (int mi = 0; mi < 2; mi++) {
                gt_op op = mm_op(REEL_BF16, mi ? 13 : 1, shapes[s][0], shapes[s][1], wt);
                void *want = host_bits(&op);
                for (int u = 2; u <= 4; u++)
                    for (int sp = 1; sp <= 8; sp *= 2)
                        for (int w = 1; w <= (wt ? 16 : 8); w *= 2) {
                            g_fixed = true, g_cfg = (reel_gemv_cfg){w, sp, u};
                            gt_result r;
                            reel_status st = gt_run(cctx->be, &kernel, &op, &r);
                            g_fixed = false;
                            if (st != REEL_OK) {
                                cr_assert(sp > 1, "w/s/u %d/%d/%d: %s", w, sp, u, reel_ctx_last_error(cctx));
                                (void)cudaGetLastError();
                                gt_result_free(&r);
                                unplaced++;
                                continue;
                            }
                            char what[96];
                            snprintf(what, sizeof what, "K=%lld N=%lld%s M=%lld w/s/u %d/%d/%d",
                                     (long long)shapes[s][0], (long long)shapes[s][1], wt ? " (w transposed)" : "",
                                     (long long)op.rows, w, sp, u);
                            expect_close(&op, want, r.out[0], what);
                            gt_result_free(&r);
                            ran++;
                        }
                free(want);
                gt_op_free_data(&op);
            }
    if (unplaced)
        cr_log_warn("%d configurations (clusters) could not be placed on this device", unplaced);
    cr_assert_gt(ran, 300, "only %d configurations ran", ran);
}

Test(gpu_gemv, two_runs_give_the_same_bits, .init = setup, .fini = teardown)
{
    const int64_t shapes[3][2] = {{4096, 1024}, {1024, 4096}, {14336, 512}}; /* K, N: cluster splits of 2 to 8 */
    for (int d = 0; d < 2; d++)
        for (int wt = 0; wt < 2; wt++)
            for (int s = 0; s < 3; s++) {
                gt_op op = mm_op(dts[d], 16, shapes[s][0], shapes[s][1], wt);
                void *a = run_bits(&kernel, &op), *b = run_bits(&kernel, &op);
                cr_assert(memcmp(a, b, reel_shape_bytes(&op.out[0], op.rows)) == 0,
                          "K=%lld N=%lld%s: two runs differ (seed %llu)", (long long)shapes[s][0],
                          (long long)shapes[s][1], wt ? " (w transposed)" : "", (unsigned long long)seed);
                free(a), free(b);
                gt_op_free_data(&op);
            }
}

/* Row 0 of a 1-row launch and of a 16-row launch with the same row first:
 * the configuration, so every sum's order, depends on N and K only. */
Test(gpu_gemv, a_row_gets_the_same_bits_whatever_the_batch, .init = setup, .fini = teardown)
{
    for (int d = 0; d < 2; d++)
        for (int wt = 0; wt < 2; wt++) {
            const int64_t k = 4096, n = 1024;
            gt_op big = mm_op(dts[d], 16, k, n, wt), one = mm_op(dts[d], 1, k, n, wt);
            memcpy(one.data[0], big.data[0], (size_t)k * 2);
            memcpy(one.data[1], big.data[1], (size_t)k * n * 2);
            void *a = run_bits(&kernel, &big), *b = run_bits(&kernel, &one);
            cr_assert(memcmp(a, b, (size_t)n * 2) == 0, "%s%s: row 0 differs between M=16 and M=1 (seed %llu)",
                      reel_dtype_name(dts[d]), wt ? " (w transposed)" : "", (unsigned long long)seed);
            free(a), free(b);
            gt_op_free_data(&big);
            gt_op_free_data(&one);
        }
}

/* [N, K] beyond one row tile: a row of a 32-row launch (in either tile)
 * gets the bits of a 1-row launch of it, and of a 24-row launch. */
Test(gpu_gemv, a_row_gets_the_same_bits_in_either_row_tile, .init = setup, .fini = teardown)
{
    const int64_t k = 4096, n = 1024, at[4] = {0, 15, 16, 31};
    for (int d = 0; d < 2; d++) {
        gt_op big = mm_op(dts[d], 32, k, n, true);
        void *a = run_bits(&kernel, &big);
        for (int i = 0; i < 4; i++)
            for (int v = 0; v < 2; v++) {
                const int64_t m = v ? 24 : 1, r = v ? at[i] % 24 : 0;
                gt_op one = mm_op(dts[d], m, k, n, true);
                memcpy((char *)one.data[0] + (size_t)(r * k * 2), (const char *)big.data[0] + (size_t)(at[i] * k * 2),
                       (size_t)k * 2);
                memcpy(one.data[1], big.data[1], (size_t)k * n * 2);
                void *b = run_bits(&kernel, &one);
                cr_assert(memcmp((const char *)a + (size_t)(at[i] * n * 2), (const char *)b + (size_t)(r * n * 2),
                                 (size_t)n * 2) == 0,
                          "%s: row %lld of M=32 differs from row %lld of M=%lld (seed %llu)",
                          reel_dtype_name(dts[d]), (long long)at[i], (long long)r, (long long)m,
                          (unsigned long long)seed);
                free(b);
                gt_op_free_data(&one);
            }
        free(a);
        gt_op_free_data(&big);
    }
}

/* ---- the impl ------------------------------------------------------------ */

static const reel_op_impl *picked(const gt_op *op)
{
    const reel_op_impl *impl = reel_registry_select(REEL_BACKEND_CUDA, op->op, op->in, op->nin, op->out,
                                                    &op->attrs, &cctx->be->caps);
    cr_assert_not_null(impl);
    return impl;
}

static void expect_pick(reel_dtype dt, int64_t m, int64_t k, int64_t n, bool wt, const char *want)
{
    gt_op op = mm_op(dt, m, k, n, wt);
    cr_assert_str_eq(picked(&op)->name, want, "%s M=%lld K=%lld N=%lld%s", reel_dtype_name(dt), (long long)m,
                     (long long)k, (long long)n, wt ? " (w transposed)" : "");
    cr_assert_gt(gt_check(hctx, cctx, &op, seed, want), 0);
    gt_op_free_data(&op);
}

Test(gpu_gemv, the_registry_picks_it_only_where_it_measured_faster, .init = setup, .fini = teardown)
{
    for (int d = 0; d < 2; d++) {
        expect_pick(dts[d], 1, 1024, 1024, true, "cuda.matmul.gemv");
        expect_pick(dts[d], 64, 1024, 1024, true, "cuda.matmul.gemv"); /* a plan's largest bucket */
        expect_pick(dts[d], 1, 2048, 512, true, "cuda.matmul.gemv");
        expect_pick(dts[d], 1, 1024, 4096, true, "cuda.matmul.gemv");      /* 8 MB, K 1024 */
        expect_pick(dts[d], 1, 1024, 8192, true, "cuda.matmul.gemv");      /* 16 MB: gate and up */
        expect_pick(dts[d], 1, 1024, 16384, true, "cuda.matmul.gemv");     /* 32 MB, K 1024 */
        expect_pick(dts[d], 1, 1024, 32000, true, "cuda.matmul.gemv");     /* 62.5 MB: an lm_head */
        expect_pick(dts[d], 1, 4096, 1024, true, "cuda.matmul.gemv");      /* 8 MB, K 4096: down */
        expect_pick(dts[d], 1, 2048, 4096, true, "cuda.matmul.gemv");      /* 16 MB, K 2048 */
        expect_pick(dts[d], 1, 2048, 16384, true, "cuda.matmul.gemv");     /* 64 MB: hidden 2048's gate/up */
        expect_pick(dts[d], 1, 1024, 1024, false, "cuda.matmul.cublaslt"); /* [K, N] */
        expect_pick(dts[d], 1, 1032, 1000, true, "cuda.matmul.gemv");
        expect_pick(dts[d], 1, 1025, 1000, true, "cuda.matmul.cublaslt"); /* K off 8 */
        expect_pick(dts[d], 3, 4096, 3, false, "cuda.matmul.cublaslt");
    }
    expect_pick(REEL_F32, 1, 1024, 1024, true, "cuda.matmul.sgemm");
}

/* At most 32 rows: the kernel's bits (and the host's answer); more: the bits
 * of cuBLASLt's impl. */
Test(gpu_gemv, the_impl_runs_the_kernel_up_to_32_rows_and_cublaslt_above, .init = setup, .fini = teardown)
{
    const reel_op_impl *gv = gt_cuda_impl("cuda.matmul.gemv"), *lt = gt_cuda_impl("cuda.matmul.cublaslt");
    const int64_t rows[8] = {1, 2, 5, 16, 17, 32, 33, 64};
    for (int d = 0; d < 2; d++)
        for (int i = 0; i < 8; i++) {
            gt_op op = mm_op(dts[d], rows[i], 1024, 1024, true);
            const bool kern = rows[i] <= REEL_GEMV_MAX_M;
            void *a = run_bits(gv, &op), *b = run_bits(kern ? &kernel : lt, &op);
            cr_assert(memcmp(a, b, reel_shape_bytes(&op.out[0], op.rows)) == 0, "%s M=%lld: not the %s's bits",
                      reel_dtype_name(dts[d]), (long long)rows[i], kern ? "kernel" : "cuBLASLt");
            free(a), free(b);
            gt_check_impl(hctx, cctx, &op, "cuda.matmul.gemv", seed, "gemv impl");
            gt_op_free_data(&op);
        }
}

/* A weight of more than REEL_GEMV_LARGE_MI Mi elements: the kernel's bits to
 * REEL_GEMV_LARGE_ROWS rows, cuBLASLt's beyond (hidden 2048's q/k/v, 6144 x
 * 2048); one of 8 Mi exactly keeps the kernel to 32. */
Test(gpu_gemv, a_large_weight_runs_the_kernel_to_16_rows_and_cublaslt_above, .init = setup, .fini = teardown)
{
    const reel_op_impl *gv = gt_cuda_impl("cuda.matmul.gemv"), *lt = gt_cuda_impl("cuda.matmul.cublaslt");
    const int64_t rows[6] = {1, 8, 9, 16, 17, 32};
    static const int64_t shapes[2][2] = {{2048, 6144}, {1024, 8192}}; /* K, N: 12 Mi and 8 Mi elements */
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < 6; i++) {
            const int64_t k = shapes[s][0], n = shapes[s][1];
            gt_op op = mm_op(REEL_BF16, rows[i], k, n, true);
            const bool large = n * k > ((int64_t)REEL_GEMV_LARGE_MI << 20);
            const bool kern = rows[i] <= (large ? REEL_GEMV_LARGE_ROWS : REEL_GEMV_MAX_M);
            void *a = run_bits(gv, &op), *b = run_bits(kern ? &kernel : lt, &op);
            cr_assert(memcmp(a, b, reel_shape_bytes(&op.out[0], op.rows)) == 0, "%lld x %lld, M=%lld: not the %s's bits",
                      (long long)n, (long long)k, (long long)rows[i], kern ? "kernel" : "cuBLASLt");
            free(a), free(b);
            gt_op_free_data(&op);
        }
}

/* Eager, eager under PDL, a captured graph replayed once and twice, and a
 * PDL capture replayed: one set of bits. w is marked a parameter, so the
 * PDL launches load their first weights before their wait. */
static void capture_bits(reel_dtype dt, int64_t m, int64_t k, int64_t n)
{
    reel_backend *be = cctx->be;
    const reel_backend_vt *vt = be->vt;
    const reel_op_impl *gv = gt_cuda_impl("cuda.matmul.gemv");
    gt_op op = mm_op(dt, m, k, n, true);
    size_t xb = reel_shape_bytes(&op.in[0], m), wb = reel_shape_bytes(&op.in[1], m);
    size_t ob = reel_shape_bytes(&op.out[0], m);
    reel_stream *s;
    void *dx, *dw, *dy;
    cr_assert_eq(vt->stream_create(be, &s), REEL_OK);
    cr_assert_eq(vt->dev_alloc(be, xb, &dx), REEL_OK);
    cr_assert_eq(vt->dev_alloc(be, wb, &dw), REEL_OK);
    cr_assert_eq(vt->dev_alloc(be, ob, &dy), REEL_OK);
    cr_assert_eq(vt->copy(be, s, dx, op.data[0], xb, REEL_COPY_H2D), REEL_OK);
    cr_assert_eq(vt->copy(be, s, dw, op.data[1], wb, REEL_COPY_H2D), REEL_OK);
    reel_launch l = {.op = REEL_OP_MATMUL, .attrs = &op.attrs, .in_shape = op.in, .out_shape = op.out,
                     .in = {dx, dw}, .out = {dy}, .rows = m, .stream = s, .in_param = 1u << 1};
    void *bits[5];
    reel_exec_graph *g = NULL;
    for (int v = 0; v < 5; v++) {
        l.pdl = (v == 1 || v == 4) && be->caps.pdl;
        cr_assert_eq(vt->fill(be, s, dy, GT_POISON, ob), REEL_OK);
        if (v < 2) {
            cr_assert_eq(gv->launch(be, &l), REEL_OK, "%s", reel_ctx_last_error(cctx));
        } else {
            if (v != 3) { /* v == 3 replays v == 2's graph a second time */
                if (g)
                    vt->graph_destroy(be, g);
                cr_assert_eq(vt->capture_begin(be, s), REEL_OK);
                cr_assert_eq(gv->launch(be, &l), REEL_OK, "%s", reel_ctx_last_error(cctx));
                cr_assert_eq(vt->capture_end(be, s, &g), REEL_OK, "%s", reel_ctx_last_error(cctx));
            }
            cr_assert_eq(vt->graph_launch(be, g, s), REEL_OK, "%s", reel_ctx_last_error(cctx));
        }
        bits[v] = malloc(ob);
        cr_assert_eq(vt->copy(be, s, bits[v], dy, ob, REEL_COPY_D2H), REEL_OK);
        cr_assert_eq(vt->stream_sync(be, s), REEL_OK, "%s", reel_ctx_last_error(cctx));
    }
    vt->graph_destroy(be, g);
    static const char *names[5] = {"eager", "eager pdl", "replay", "replayed twice", "pdl replay"};
    for (int v = 1; v < 5; v++)
        cr_assert(memcmp(bits[0], bits[v], ob) == 0, "%s M=%lld K=%lld N=%lld: %s differs from eager",
                  reel_dtype_name(dt), (long long)m, (long long)k, (long long)n, names[v]);
    for (int v = 0; v < 5; v++)
        free(bits[v]);
    vt->dev_free(be, dx), vt->dev_free(be, dw), vt->dev_free(be, dy);
    vt->stream_destroy(be, s);
    gt_op_free_data(&op);
}

Test(gpu_gemv, replay_and_pdl_give_the_eager_bits, .init = setup, .fini = teardown)
{
    for (int d = 0; d < 2; d++) {
        capture_bits(dts[d], 1, 1024, 1024); /* one block of 16 warps per tile */
        capture_bits(dts[d], 4, 2048, 512);
        capture_bits(dts[d], 8, 1024, 1024);
        capture_bits(dts[d], 1, 1024, 8192); /* 8 warps a block, two blocks a multiprocessor */
        capture_bits(dts[d], 2, 4096, 1024); /* K 4096: 8 chunks a warp (each prefetched where built so) */
        capture_bits(dts[d], 1, 2048, 16384); /* 64 MB (the prefetch capped at 24 MiB where built so) */
        capture_bits(dts[d], 24, 1024, 8192); /* two row tiles */
        capture_bits(dts[d], 33, 1024, 1024); /* cuBLASLt under the impl */
    }
}
