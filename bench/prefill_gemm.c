/* Prefill-sized matmuls as a replayed plan runs them: one matmul node
 * (x [M, K] bf16 times w [N, K], the checkpoint layout) per plan, compiled
 * for one bucket of M rows, stepped; the figure is the median device time
 * of the replayed steps (reel_plan_last_step_device_us) and its TFLOP/s.
 * At these M the node is cuBLASLt's (the heuristic's first algorithm for the
 * stream's workspace), so building this program against a backend with
 * another workspace size (-DREEL_CUDA_WS_HOPPER_MIB, through
 * REEL_AB_PROGRAM of `bench/gpu.sh ab`) shows what the workspace costs or
 * buys the prefill.
 *
 *   bench_prefill_gemm [steps]      (default 50, after 5 warm-up steps)
 * Public API only. The device time of a step includes its upload and
 * download (reel_plan_time_steps), here a few KB. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reel/reel.h"

static reel_ctx *g_ctx;

#define RK(what, call)                                                                        \
    do {                                                                                      \
        reel_status s_ = (call);                                                              \
        if (s_ != REEL_OK) {                                                                  \
            fprintf(stderr, "bench_prefill_gemm: %s: %s\n", what, reel_ctx_last_error(g_ctx)); \
            exit(1);                                                                          \
        }                                                                                     \
    } while (0)

static uint16_t *rnd_bf16(size_t n, uint32_t seed)
{
    uint16_t *b = malloc(n * 2);
    if (!b) {
        fprintf(stderr, "bench_prefill_gemm: out of memory\n");
        exit(1);
    }
    uint32_t s = seed * 2654435761u + 1u;
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        float f = ((float)(s >> 8) / (float)(1u << 24) * 2.0f - 1.0f) * 0.05f;
        uint32_t u;
        memcpy(&u, &f, 4);
        u += 0x7fffu + ((u >> 16) & 1u);
        b[i] = (uint16_t)(u >> 16);
    }
    return b;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median device us of `steps` replayed steps of x [m, k] times w [n, k].
 * x comes from an embedding of the step's ids (a 1024-row table) and only 8
 * columns of the product go back to the host, so the step's upload and
 * download stay small: what is timed is the matmul, the embedding's copy
 * (m x k elements) and the 8-column copy, the same in every build. */
static double time_matmul(int m, int n, int k, int steps, int *replayed)
{
    reel_graph *g;
    RK("creating the graph", reel_graph_create(g_ctx, &g));
    int64_t idd[1] = {REEL_DIM_TOKENS}, td[2] = {1024, k}, wd[2] = {n, k};
    reel_tensor ids = reel_input(g, "ids", REEL_I32, 1, idd);
    reel_tensor table = reel_param(g, "table", REEL_BF16, 2, td);
    reel_tensor w = reel_param(g, "w", REEL_BF16, 2, wd);
    uint16_t *wb = rnd_bf16((size_t)n * (size_t)k, 7u), *tb = rnd_bf16((size_t)1024 * (size_t)k, 9u);
    int32_t *idb = malloc((size_t)m * sizeof *idb);
    if (!idb) {
        fprintf(stderr, "bench_prefill_gemm: out of memory\n");
        exit(1);
    }
    for (int i = 0; i < m; i++)
        idb[i] = (int32_t)((i * 7) % 1024);
    RK("binding w", reel_param_bind(g, w, wb));
    RK("binding the table", reel_param_bind(g, table, tb));
    reel_tensor y = reel_matmul(g, reel_embedding(g, table, ids), w, true);
    reel_output(g, "y8", reel_view_cols(g, y, 0, 8));
    reel_compile_opts o = REEL_COMPILE_OPTS_INIT;
    o.num_buckets = 1;
    o.buckets[0] = m;
    reel_plan *p = NULL;
    RK("compiling", reel_compile(g, &o, &p));
    RK("timing steps", reel_plan_time_steps(p, 1));
    double *us = malloc((size_t)steps * sizeof *us);
    if (!us) {
        fprintf(stderr, "bench_prefill_gemm: out of memory\n");
        exit(1);
    }
    int got = 0;
    *replayed = 0;
    for (int i = 0; i < 5 + steps; i++) {
        RK("setting ids", reel_plan_set_input(p, "ids", idb, m));
        reel_step_info si = { REEL_STEP_INFO_HEAD, .num_tokens = m};
        RK("stepping", reel_step(p, &si));
        const void *out;
        int64_t rows;
        RK("reading y8", reel_plan_output(p, "y8", &out, &rows));
        double d = -1.0;
        if (i >= 5 && reel_plan_last_step_device_us(p, &d) == REEL_OK && d >= 0) {
            us[got++] = d;
            *replayed += reel_plan_last_fallback(p) == REEL_FALLBACK_NONE;
        }
    }
    qsort(us, (size_t)got, sizeof *us, cmp_d);
    double med = got ? us[got / 2] : -1.0;
    free(us);
    reel_plan_destroy(p);
    reel_graph_destroy(g);
    free(wb);
    free(tb);
    free(idb);
    return med;
}

int main(int argc, char **argv)
{
    int steps = argc > 1 ? atoi(argv[1]) : 50;
    if (steps < 5)
        steps = 5;
    reel_ctx_opts co = REEL_CTX_OPTS_INIT;
    RK("creating the context", reel_ctx_create(&co, &g_ctx));
    /* The projections of the decode benchmark's model at hidden 1024 and
     * 2048 (q/k/v fused, o, gate/up fused, down) and a 32000 vocab head. */
    static const int shapes[][2] = {{3072, 1024}, {1024, 1024}, {8192, 1024}, {1024, 4096},
                                    {6144, 2048}, {2048, 2048}, {16384, 2048}, {2048, 8192}, {32000, 1024}};
    static const int ms[] = {128, 512, 2048, 4096};
    printf("| M | N | K | device us | TFLOP/s | replayed |\n| --- | --- | --- | --- | --- | --- |\n");
    for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++)
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            int m = ms[mi], n = shapes[si][0], k = shapes[si][1], rep = 0;
            double us = time_matmul(m, n, k, steps, &rep);
            double tf = us > 0 ? 2.0 * m * (double)n * k / (us * 1e-6) / 1e12 : 0.0;
            printf("| %d | %d | %d | %.2f | %.1f | %d/%d |\n", m, n, k, us, tf, rep, steps);
            fflush(stdout);
        }
    reel_ctx_destroy(g_ctx);
    return 0;
}
