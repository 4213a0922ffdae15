/* Fused kernels on the GPU against the unfused plan (no_fuse), bf16 and
 * f16: add_rmsnorm bit for bit (1..16 rows and a larger count); views
 * aliasing a segmented matmul within the bf16/f16 tolerance of the unfused
 * projections at M = 1..16 and 200 for both weight layouts (cuBLAS at 200:
 * q's view alone, k's and v's, one width, as one strided-batched GEMM,
 * which may pick another algorithm), and bit for bit on the
 * skinny-matmul kernel's segmented store; the silu_and_mul and bias
 * epilogues bit for bit on the kernel and on its fallback to the unfused
 * kernels; a whole layer (norms kept) bit for bit. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/core/opts.h"

static reel_ctx *ctx;
static void setup(void) { cr_assert_eq(reel_ctx_create(reel_test_ctx_opts(REEL_BACKEND_CUDA), &ctx), REEL_OK); }
static void teardown(void) { reel_ctx_destroy(ctx); }

enum { D = 256, QW = 256, KW = 64 };

static float half_to_f(uint16_t h, reel_dtype dt)
{
    uint32_t u;
    if (dt == REEL_BF16) {
        u = (uint32_t)h << 16;
    } else {
        uint32_t s = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff;
        if (e == 0) {
            float f = ldexpf((float)m, -24);
            return s ? -f : f;
        }
        u = s | ((e + 112) << 23) | (m << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint16_t f_to_half(float f, reel_dtype dt)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if (dt == REEL_BF16)
        return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    /* values here are in [-1, 1]: normal or zero f16 */
    uint32_t a = u & 0x7fffffffu, s = (u >> 16) & 0x8000u;
    if (a < 0x38800000u)
        return (uint16_t)s;
    return (uint16_t)(s | ((a + 0xfffu + ((a >> 13) & 1u) - (112u << 23)) >> 13));
}

static uint16_t *rnd(size_t n, unsigned seed, reel_dtype dt)
{
    uint16_t *b = malloc(n * 2);
    cr_assert(b);
    uint32_t s = seed * 2654435761u + 7;
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        b[i] = f_to_half((float)(s >> 8) / (float)(1u << 24) * 2.0f - 1.0f, dt);
    }
    return b;
}

static reel_plan *compile(reel_graph *g, int rows, bool fuse)
{
    reel_compile_opts o = REEL_COMPILE_OPTS_INIT;
    o.num_buckets = 1;
    o.buckets[0] = rows;
    o.no_fuse = !fuse;
    reel_plan *p = NULL;
    cr_assert_eq(reel_compile(g, &o, &p), REEL_OK, "%s", reel_ctx_last_error(ctx));
    return p;
}

static const uint16_t *step(reel_plan *p, const uint16_t *x, int rows, const char *out)
{
    cr_assert_eq(reel_plan_set_input(p, "x", x, rows), REEL_OK, "%s", reel_ctx_last_error(ctx));
    reel_step_info s = { REEL_STEP_INFO_HEAD, .num_tokens = rows};
    cr_assert_eq(reel_step(p, &s), REEL_OK, "%s", reel_ctx_last_error(ctx));
    const void *o;
    int64_t r;
    cr_assert_eq(reel_plan_output(p, out, &o, &r), REEL_OK);
    return o;
}

static int count_op(const reel_plan *p, const char *op)
{
    reel_plan_stats st = REEL_PLAN_STATS_INIT;
    cr_assert_eq(reel_plan_stats_get(p, &st), REEL_OK);
    int c = 0;
    for (int i = 0; i < st.num_nodes; i++) {
        reel_node_info ni = REEL_NODE_INFO_INIT;
        cr_assert_eq(reel_plan_node_info(p, i, &ni), REEL_OK);
        c += strcmp(ni.op, op) == 0;
    }
    return c;
}

/* Widths: the pack path at one and several packs a thread (256, 4096,
 * 20480 = 2560 packs of bf16, 3 a thread) and the element path (2050: not a
 * whole number of packs). */
Test(gpu_fuse, add_rmsnorm_equals_the_unfused_pair_bit_for_bit, .init = setup, .fini = teardown)
{
    static const reel_dtype dts[2] = {REEL_BF16, REEL_F16};
    static const int rows[] = {1, 2, 3, 5, 8, 13, 16, 200};
    static const int64_t widths[] = {D, 4096, 20480, 2050};
    for (int di = 0; di < 2; di++)
        for (size_t wi = 0; wi < sizeof widths / sizeof widths[0]; wi++)
            for (size_t ri = 0; ri < sizeof rows / sizeof rows[0]; ri++) {
                reel_dtype dt = dts[di];
                int m = rows[ri];
                const int64_t W = widths[wi];
                if (W > D && m > 16)
                    continue;
                reel_graph *g;
                cr_assert_eq(reel_graph_create(ctx, &g), REEL_OK);
                int64_t d[2] = {REEL_DIM_TOKENS, W}, dw = W;
                reel_tensor x = reel_input(g, "x", dt, 2, d);
                reel_tensor r = reel_input(g, "r", dt, 2, d);
                reel_tensor w = reel_param(g, "w", dt, 1, &dw);
                uint16_t *wd = rnd((size_t)W, 3, dt), *xd = rnd((size_t)m * W, 1, dt), *rd = rnd((size_t)m * W, 2, dt);
                reel_param_bind(g, w, wd);
                reel_tensor h = reel_add(g, x, r);
                reel_output(g, "h", h);
                reel_output(g, "n", reel_rmsnorm(g, h, w, 1e-5f));
                reel_plan *pf = compile(g, m, true), *pu = compile(g, m, false);
                cr_assert_eq(count_op(pf, "add_rmsnorm"), 1);
                for (int k = 0; k < 2; k++) {
                    reel_plan *p = k ? pu : pf;
                    cr_assert_eq(reel_plan_set_input(p, "r", rd, m), REEL_OK);
                }
                const char *outs[2] = {"h", "n"};
                for (int o = 0; o < 2; o++) {
                    uint16_t *f = malloc((size_t)m * W * 2);
                    memcpy(f, step(pf, xd, m, outs[o]), (size_t)m * W * 2);
                    cr_assert_eq(reel_plan_set_input(pf, "r", rd, m), REEL_OK);
                    const uint16_t *u = step(pu, xd, m, outs[o]);
                    cr_assert_eq(reel_plan_set_input(pu, "r", rd, m), REEL_OK);
                    cr_assert(memcmp(f, u, (size_t)m * W * 2) == 0, "%s %s width %lld rows %d: bits differ",
                              outs[o], reel_dtype_name(dt), (long long)W, m);
                    free(f);
                }
                reel_plan_destroy(pf);
                reel_plan_destroy(pu);
                reel_graph_destroy(g);
                free(wd), free(xd), free(rd);
            }
}

/* x [m, D] times one [q; k; v] weight ([N, K] when wt) viewed as q, k and v,
 * fused (the views alias the matmul's segments: no view_cols node) against
 * unfused; bitwise, or each output within two roundings of the storage
 * dtype (K = 256 products of values in [-1, 1]: |y| <~ 16). */
static void qkv_views_case(reel_dtype dt, int m, bool wt, unsigned seed, bool bitwise)
{
    const int64_t N = QW + 2 * KW;
    reel_graph *g;
    cr_assert_eq(reel_graph_create(ctx, &g), REEL_OK);
    int64_t d[2] = {REEL_DIM_TOKENS, D}, wdims[2] = {wt ? N : D, wt ? D : N};
    reel_tensor x = reel_input(g, "x", dt, 2, d);
    reel_tensor w = reel_param(g, "w", dt, 2, wdims);
    uint16_t *wd = rnd((size_t)(D * N), seed, dt), *xd = rnd((size_t)m * D, seed + 1, dt);
    reel_param_bind(g, w, wd);
    const int64_t col[3] = {0, QW, QW + KW}, width[3] = {QW, KW, KW};
    static const char *const names[3] = {"q", "k", "v"};
    reel_tensor qkv = reel_matmul(g, x, w, wt);
    for (int s = 0; s < 3; s++)
        reel_output(g, names[s], reel_view_cols(g, qkv, col[s], width[s]));
    reel_plan *pf = compile(g, m, true), *pu = compile(g, m, false);
    cr_assert_eq(count_op(pf, "view_cols"), 0, "the views were not fused");
    cr_assert_eq(count_op(pu, "view_cols"), 3);
    for (int s = 0; s < 3; s++) {
        size_t n = (size_t)m * (size_t)width[s];
        uint16_t *f = malloc(n * 2);
        memcpy(f, step(pf, xd, m, names[s]), n * 2);
        const uint16_t *u = step(pu, xd, m, names[s]);
        if (bitwise)
            cr_assert(memcmp(f, u, n * 2) == 0, "%s %s wt %d rows %d: bits differ", names[s], reel_dtype_name(dt),
                      wt, m);
        for (size_t i = 0; !bitwise && i < n; i++) {
            float a = half_to_f(f[i], dt), b = half_to_f(u[i], dt);
            float tol = (dt == REEL_BF16 ? 1.0f / 64 : 1.0f / 512) * fmaxf(1.0f, fabsf(b));
            cr_assert(fabsf(a - b) <= tol, "%s %s wt %d rows %d [%zu]: %g vs %g", names[s], reel_dtype_name(dt), wt,
                      m, i, (double)a, (double)b);
        }
        free(f);
    }
    reel_plan_destroy(pf);
    reel_plan_destroy(pu);
    reel_graph_destroy(g);
    free(wd), free(xd);
}

Test(gpu_fuse, views_of_a_segmented_matmul_match_the_unfused_projections, .init = setup, .fini = teardown)
{
    static const reel_dtype dts[2] = {REEL_BF16, REEL_F16};
    static const int rows[] = {1, 2, 4, 7, 16, 200};
    for (int di = 0; di < 2; di++)
        for (int wt = 0; wt < 2; wt++)
            for (size_t ri = 0; ri < sizeof rows / sizeof rows[0]; ri++)
                qkv_views_case(dts[di], rows[ri], wt, 5, false);
}

/* [N, K] weights at M <= 32: the fused views are the skinny-matmul kernel's
 * segmented store, whose configuration depends on (N, K) only, so each
 * view holds the unfused product's bits. */
Test(gpu_fuse, segmented_gemv_views_hold_the_unfused_bits, .init = setup, .fini = teardown)
{
    static const reel_dtype dts[2] = {REEL_BF16, REEL_F16};
    static const int rows[] = {1, 3, 16, 32};
    for (int di = 0; di < 2; di++)
        for (size_t ri = 0; ri < sizeof rows / sizeof rows[0]; ri++)
            qkv_views_case(dts[di], rows[ri], true, 7, true);
}

/* x [T, D] times [gate; up] ([2F, D]) then silu_and_mul: one node on the
 * GPU, the skinny-matmul kernel's epilogue up to 32 rows (cuBLASLt into the
 * scratch output then the silu_and_mul kernel above), with the unfused
 * pair's bits at every row count; F = 200 leaves a block of 16 columns
 * half out of range. */
Test(gpu_fuse, matmul_silu_and_mul_equals_the_unfused_pair_bit_for_bit, .init = setup, .fini = teardown)
{
    static const reel_dtype dts[2] = {REEL_BF16, REEL_F16};
    static const int rows[] = {1, 2, 5, 16, 17, 32, 33, 200};
    static const int64_t ffn[2] = {512, 200};
    for (int di = 0; di < 2; di++)
        for (int fi = 0; fi < 2; fi++)
            for (size_t ri = 0; ri < sizeof rows / sizeof rows[0]; ri++) {
                reel_dtype dt = dts[di];
                int m = rows[ri];
                const int64_t F = ffn[fi];
                reel_graph *g;
                cr_assert_eq(reel_graph_create(ctx, &g), REEL_OK);
                int64_t d[2] = {REEL_DIM_TOKENS, D}, wdims[2] = {2 * F, D};
                reel_tensor x = reel_input(g, "x", dt, 2, d);
                reel_tensor w = reel_param(g, "w", dt, 2, wdims);
                uint16_t *wd = rnd((size_t)(2 * F * D), 9, dt), *xd = rnd((size_t)m * D, 10, dt);
                reel_param_bind(g, w, wd);
                reel_output(g, "f", reel_silu_and_mul(g, reel_matmul(g, x, w, true)));
                reel_plan *pf = compile(g, m, true), *pu = compile(g, m, false);
                cr_assert_eq(count_op(pf, "silu_and_mul"), 0, "silu_and_mul was not fused");
                cr_assert_eq(count_op(pu, "silu_and_mul"), 1);
                size_t n = (size_t)m * (size_t)F;
                uint16_t *f = malloc(n * 2);
                memcpy(f, step(pf, xd, m, "f"), n * 2);
                const uint16_t *u = step(pu, xd, m, "f");
                for (size_t i = 0; i < n; i++)
                    cr_assert_eq(f[i], u[i], "%s F %lld rows %d [%zu]: %g vs %g", reel_dtype_name(dt), (long long)F,
                                 m, i, (double)half_to_f(f[i], dt), (double)half_to_f(u[i], dt));
                free(f);
                reel_plan_destroy(pf);
                reel_plan_destroy(pu);
                reel_graph_destroy(g);
                free(wd), free(xd);
            }
}

/* A projection and the add of its bias row (Qwen2's q/k/v): one node, the
 * unfused pair's bits, on the kernel and on the fallback. */
Test(gpu_fuse, matmul_bias_equals_the_unfused_pair_bit_for_bit, .init = setup, .fini = teardown)
{
    static const reel_dtype dts[2] = {REEL_BF16, REEL_F16};
    static const int rows[] = {1, 7, 16, 24, 200};
    for (int di = 0; di < 2; di++)
        for (size_t ri = 0; ri < sizeof rows / sizeof rows[0]; ri++) {
            reel_dtype dt = dts[di];
            int m = rows[ri];
            const int64_t N = QW;
            reel_graph *g;
            cr_assert_eq(reel_graph_create(ctx, &g), REEL_OK);
            int64_t d[2] = {REEL_DIM_TOKENS, D}, wdims[2] = {N, D}, bd = N;
            reel_tensor x = reel_input(g, "x", dt, 2, d);
            reel_tensor w = reel_param(g, "w", dt, 2, wdims);
            reel_tensor b = reel_param(g, "b", dt, 1, &bd);
            uint16_t *wd = rnd((size_t)(N * D), 11, dt), *xd = rnd((size_t)m * D, 12, dt), *bdat = rnd(N, 13, dt);
            reel_param_bind(g, w, wd);
            reel_param_bind(g, b, bdat);
            reel_output(g, "y", reel_add(g, reel_matmul(g, x, w, true), b));
            reel_plan *pf = compile(g, m, true), *pu = compile(g, m, false);
            cr_assert_eq(count_op(pf, "add"), 0, "the bias was not fused");
            size_t n = (size_t)m * (size_t)N;
            uint16_t *f = malloc(n * 2);
            memcpy(f, step(pf, xd, m, "y"), n * 2);
            cr_assert(memcmp(f, step(pu, xd, m, "y"), n * 2) == 0, "%s rows %d: bits differ", reel_dtype_name(dt), m);
            free(f);
            reel_plan_destroy(pf);
            reel_plan_destroy(pu);
            reel_graph_destroy(g);
            free(wd), free(xd), free(bdat);
        }
}

/* A layer on CUDA: the norms stay their own kernels (the matmul's rmsnorm
 * prologue is the host backend's only: docs/decisions.md), the epilogues
 * fold, and the fused plan has the unfused plan's bits: the layer's output
 * and the residual sum, on the skinny-matmul kernel (1, 16 and 32 rows) and on
 * cuBLASLt (200). */
static void layer_case(reel_dtype dt, int64_t K, int m)
{
    const int64_t F = 2 * K;
    reel_graph *g;
    cr_assert_eq(reel_graph_create(ctx, &g), REEL_OK);
    int64_t d[2] = {REEL_DIM_TOKENS, K}, wq[2] = {K, K}, wgu[2] = {2 * F, K}, wd[2] = {K, F}, gd = K;
    reel_tensor x = reel_input(g, "x", dt, 2, d);
    reel_tensor g0 = reel_param(g, "g0", dt, 1, &gd), g1 = reel_param(g, "g1", dt, 1, &gd);
    reel_tensor q = reel_param(g, "wq", dt, 2, wq), gu = reel_param(g, "wgu", dt, 2, wgu);
    reel_tensor dn = reel_param(g, "wd", dt, 2, wd);
    uint16_t *b[5] = {rnd((size_t)K, 21, dt), rnd((size_t)K, 22, dt), rnd((size_t)(K * K), 23, dt),
                      rnd((size_t)(2 * F * K), 24, dt), rnd((size_t)(K * F), 25, dt)};
    reel_param_bind(g, g0, b[0]);
    reel_param_bind(g, g1, b[1]);
    reel_param_bind(g, q, b[2]);
    reel_param_bind(g, gu, b[3]);
    reel_param_bind(g, dn, b[4]);
    uint16_t *xd = rnd((size_t)m * K, 26, dt);
    reel_tensor h = reel_add(g, x, reel_matmul(g, reel_rmsnorm(g, x, g0, 1e-5f), q, true));
    reel_tensor f = reel_silu_and_mul(g, reel_matmul(g, reel_rmsnorm(g, h, g1, 1e-6f), gu, true));
    reel_output(g, "next", reel_add(g, h, reel_matmul(g, f, dn, true)));
    reel_output(g, "h", h);
    reel_plan *pf = compile(g, m, true), *pu = compile(g, m, false);
    cr_assert_eq(count_op(pf, "rmsnorm"), 1, "K %lld", (long long)K);
    cr_assert_eq(count_op(pf, "add_rmsnorm"), 1, "K %lld", (long long)K);
    cr_assert_eq(count_op(pf, "silu_and_mul"), 0, "K %lld", (long long)K);
    static const char *const outs[2] = {"next", "h"};
    for (int o = 0; o < 2; o++) {
        size_t n = (size_t)m * (size_t)K;
        uint16_t *fb = malloc(n * 2);
        memcpy(fb, step(pf, xd, m, outs[o]), n * 2);
        const uint16_t *u = step(pu, xd, m, outs[o]);
        for (size_t i = 0; i < n; i++)
            cr_assert_eq(fb[i], u[i], "%s %s K %lld rows %d [%zu]: %g vs %g", outs[o], reel_dtype_name(dt),
                         (long long)K, m, i, (double)half_to_f(fb[i], dt), (double)half_to_f(u[i], dt));
        free(fb);
    }
    reel_plan_destroy(pf);
    reel_plan_destroy(pu);
    reel_graph_destroy(g);
    for (int i = 0; i < 5; i++)
        free(b[i]);
    free(xd);
}

Test(gpu_fuse, a_layer_keeps_its_norms_and_the_unfused_bits, .init = setup, .fini = teardown, .timeout = 240)
{
    static const reel_dtype dts[2] = {REEL_BF16, REEL_F16};
    static const int rows[] = {1, 16, 32, 200};
    static const int64_t ks[2] = {256, 1024};
    for (int di = 0; di < 2; di++)
        for (int ki = 0; ki < 2; ki++)
            for (size_t ri = 0; ri < sizeof rows / sizeof rows[0]; ri++)
                layer_case(dts[di], ks[ki], rows[ri]);
}
