/* The argmax op alone (cuda.argmax, launched through its impl as reel's
 * executor issues it): rows x vocab of bf16 logits, the time per launch in a
 * captured graph of L launches, beside its floor (the row bytes over the
 * measured read bandwidth). bench/torch_argmax.py times torch.argmax on the
 * same shapes the same way; `bench/gpu.sh argmax` runs both, and
 * `bench/gpu.sh ab` with REEL_AB_PROGRAM=bench_argmax this program from two
 * builds (e.g. the cluster split, and -DREEL_ARGMAX_CLUSTER=1: one block a row).
 *
 *   hot:  the same logits every launch (as in a step, where the lm_head has
 *         just written them: they sit in L2)
 *   cold: rotating over copies larger than L2 together (read from HBM)
 *
 * Every result is checked against a host argmax (lowest index of the
 * maximum). Usage: bench_argmax [replays] */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <algorithm>
#include <vector>

#include "reel/reel.h"
#include "backend/cuda/cuda.h"
#include "backend/ctx.h"
extern "C" {
#include "ops/op.h"
}
#include "ops/cuda/impls.h"
#include "bench/bench_cuda.cuh"
#include "bench/graph_timer.cuh"

#ifndef REEL_ARGMAX_CLUSTER
#define REEL_ARGMAX_CLUSTER 8 /* as ops/cuda/rows.cu: the build's flag, for the title */
#endif

static reel_ctx *g_ctx;
static unsigned *g_sink;

static float bf16_f(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* The host's answer for every row of one copy. */
static bool check(const void *dx, const int32_t *dout, int rows, int vocab, int *bad_row)
{
    std::vector<uint16_t> x((size_t)rows * vocab);
    std::vector<int32_t> got(rows);
    CK(cudaMemcpy(x.data(), dx, x.size() * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(got.data(), dout, rows * 4, cudaMemcpyDeviceToHost));
    for (int r = 0; r < rows; r++) {
        int best = 0;
        for (int i = 1; i < vocab; i++)
            if (bf16_f(x[(size_t)r * vocab + i]) > bf16_f(x[(size_t)r * vocab + best]))
                best = i;
        if (got[r] != best) {
            *bad_row = r;
            return false;
        }
    }
    return true;
}

int main(int argc, char **argv)
{
    int replays = argc > 1 ? std::max(5, atoi(argv[1])) : 50;
    reel_ctx_opts co = REEL_CTX_OPTS_INIT;
    co.backend = REEL_BACKEND_CUDA;
    RK(reel_ctx_create(&co, &g_ctx));
    reel_backend *be = g_ctx->be;
    reel_stream *rs;
    RK(be->vt->stream_create(be, &rs));
    cudaStream_t s = reel_cuda_stream_handle(rs);
    CK(cudaMalloc(&g_sink, sizeof(unsigned)));
    bench_device dev;
    bench_device_probe(s, replays, g_sink, &dev);
    const cudaDeviceProp &prop = dev.prop;
    const char *date = dev.date;
    const int sms = dev.sms;
    const double read_bw = dev.read_tbs;
    printf("# bench_argmax (REEL_ARGMAX_CLUSTER %d): %s, %d SMs, L2 %d MB, %s, %d replays a timing\n\n",
           REEL_ARGMAX_CLUSTER, prop.name, sms, prop.l2CacheSize >> 20, date, replays);
    printf("read bandwidth (1 GiB, a 16-byte-load kernel): %.2f TB/s; floor = row bytes / that\n\n", read_bw);
    printf("| rows | vocab | KB | floor us | hot us | hot pdl us | cold us | cold TB/s | blocks a row |\n");
    printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");

    static const int rows_list[] = {1, 8, 64};
    static const int vocab_list[] = {32000, 128256, 151936};
    int failed = 0;
    for (int vocab : vocab_list)
        for (int rows : rows_list) {
            const size_t bytes = (size_t)rows * vocab * 2;
            const int ncopies = (int)std::max<size_t>(2, (size_t)(150u << 20) / bytes + 1);
            std::vector<void *> x(ncopies);
            for (int i = 0; i < ncopies; i++) {
                CK(cudaMalloc(&x[i], bytes));
                fill_bf16<<<256, 256, 0, s>>>((uint16_t *)x[i], bytes / 2, 11u + (uint32_t)i);
            }
            int32_t *out;
            CK(cudaMalloc(&out, (size_t)rows * 4));
            reel_shape sh[2];
            memset(sh, 0, sizeof sh);
            sh[0].dtype = REEL_BF16, sh[0].ndim = 2, sh[0].tokens = true;
            sh[0].dims[0] = rows, sh[0].dims[1] = vocab;
            sh[1].dtype = REEL_I32, sh[1].ndim = 1, sh[1].tokens = true;
            sh[1].dims[0] = rows;
            reel_op_attrs at;
            memset(&at, 0, sizeof at);
            reel_launch l;
            memset(&l, 0, sizeof l);
            l.op = REEL_OP_ARGMAX;
            l.attrs = &at;
            l.in_shape = sh;
            l.out_shape = &sh[1];
            l.in[0] = x[0], l.out[0] = out;
            l.rows = rows;
            l.stream = rs;
            const reel_op_impl *impl = &reel_cu_argmax_impl;
            const int64_t blocks = impl->grid_blocks(&l, &be->caps) / rows;
            RK(impl->launch(be, &l));
            CK(cudaStreamSynchronize(s));
            int bad = -1;
            bool ok = check(x[0], out, rows, vocab, &bad);
            const int L = 20;
            double hot = time_graph(s, L, replays, [&](int i) {
                l.pdl = false;
                RK(impl->launch(be, &l));
            });
            double hot_pdl = time_graph(s, L, replays, [&](int i) {
                l.pdl = be->caps.pdl && i > 0;
                RK(impl->launch(be, &l));
            });
            const int Lc = std::max(ncopies, L);
            double cold = time_graph(s, Lc, replays, [&](int i) {
                l.in[0] = x[i % ncopies], l.pdl = false;
                RK(impl->launch(be, &l));
            });
            l.in[0] = x[ncopies - 1], l.pdl = false;
            RK(impl->launch(be, &l));
            CK(cudaStreamSynchronize(s));
            ok = ok && check(x[ncopies - 1], out, rows, vocab, &bad);
            const double floor_us = (double)bytes / (read_bw * 1e12) * 1e6;
            printf("| %d | %d | %.0f | %.3f | %.2f | %.2f | %.2f | %.2f | %lld |%s\n", rows, vocab, bytes / 1024.0,
                   floor_us, hot, hot_pdl, cold, (double)bytes / (cold * 1e-6) / 1e12, (long long)blocks,
                   ok ? "" : " MISMATCH");
            if (!ok) {
                fprintf(stderr, "MISMATCH rows %d vocab %d: row %d\n", rows, vocab, bad);
                failed = 1;
            }
            for (void *p : x)
                CK(cudaFree(p));
            CK(cudaFree(out));
        }
    be->vt->stream_destroy(be, rs);
    reel_ctx_destroy(g_ctx);
    return failed;
}
