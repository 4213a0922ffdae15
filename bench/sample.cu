/* The sample op alone (cuda.sample, launched through its impl as reel's
 * executor issues it): rows x vocab of bf16 logits, uniform in [-8, 8), one
 * of several parameter sets on every row (or a mix), the time per launch in
 * a captured graph of L launches, beside its floor (the logits' bytes over
 * the measured read bandwidth, bench/read_probe.cuh) and the bandwidth the
 * cold time reaches. bench/torch_sample.py times PyTorch's equivalents on the
 * same shapes the same way (softmax + torch.multinomial; topk; sort + cumsum
 * + multinomial for top-p); `bench/gpu.sh sample` runs both, and
 * `bench/gpu.sh ab` with REEL_AB_PROGRAM=bench_sample this program from two
 * builds (e.g. -DREEL_SAMPLE_CLUSTER=1: one block a row).
 *
 *   hot:  the same logits every launch (as in a step, where the lm_head has
 *         just written them: they sit in L2)
 *   cold: rotating over copies larger than L2 together (read from HBM)
 *
 * The tokens of the first and last row of each point are checked against
 * the host reference kernel (ops/host/sample.c): equal, bit for bit.
 * Usage: bench_sample [replays] */
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
#include "ops/host/host_ops.h"
}
#include "ops/cuda/impls.h"
#include "bench/bench_cuda.cuh"
#include "bench/graph_timer.cuh"

#ifndef REEL_SAMPLE_CLUSTER
#define REEL_SAMPLE_CLUSTER 8 /* as ops/cuda/sample.cu: the build's flag, for the title */
#endif

static reel_ctx *g_ctx;
static unsigned *g_sink;

/* bf16 logits uniform in [-8, 8): a hash of the index. */
__global__ void fill_logits(uint16_t *p, size_t n, uint32_t salt)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ salt;
        h ^= h >> 15, h *= 2246822519u, h ^= h >> 13;
        float f = (float)(h & 0xffffff) / 1048576.0f - 8.0f;
        uint32_t b;
        memcpy(&b, &f, 4);
        p[i] = (uint16_t)((b + 0x7fff + ((b >> 16) & 1)) >> 16);
    }
}

struct mode {
    const char *name;
    float p[4]; /* temperature, top_p, min_p, top_k; "mixed": every row the next of the others */
};
static const mode modes[] = {
    { "greedy", { 0, 1, 0, 0 } },           { "plain", { 1, 1, 0, 0 } },
    { "top_k 50", { 0.8f, 1, 0, 50 } },     { "top_p 0.9", { 0.8f, 0.9f, 0, 0 } },
    { "min_p 0.05", { 1, 1, 0.05f, 0 } },   { "k 40 p 0.95 min_p 0.02", { 0.7f, 0.95f, 0.02f, 40 } },
    { "mixed", { 0, 0, 0, 0 } },
};
static const int nmodes = (int)(sizeof modes / sizeof modes[0]);

/* The host reference's token of row r of one copy. */
static int32_t host_token(const void *dx, const float *prm, const int32_t *rng, int r, int vocab)
{
    std::vector<uint16_t> x((size_t)vocab);
    CK(cudaMemcpy(x.data(), (const uint16_t *)dx + (size_t)r * vocab, x.size() * 2, cudaMemcpyDeviceToHost));
    reel_shape sh[4];
    memset(sh, 0, sizeof sh);
    sh[0].dtype = REEL_BF16, sh[0].ndim = 2, sh[0].tokens = true, sh[0].dims[0] = 1, sh[0].dims[1] = vocab;
    sh[1].dtype = REEL_F32, sh[1].ndim = 2, sh[1].tokens = true, sh[1].dims[0] = 1, sh[1].dims[1] = 4;
    sh[2].dtype = REEL_I32, sh[2].ndim = 2, sh[2].tokens = true, sh[2].dims[0] = 1, sh[2].dims[1] = 4;
    sh[3].dtype = REEL_I32, sh[3].ndim = 1, sh[3].tokens = true, sh[3].dims[0] = 1;
    reel_op_attrs at;
    memset(&at, 0, sizeof at);
    int32_t tok = -2;
    reel_launch l;
    memset(&l, 0, sizeof l);
    l.op = REEL_OP_SAMPLE;
    l.attrs = &at;
    l.in_shape = sh;
    l.out_shape = &sh[3];
    l.in[0] = x.data(), l.in[1] = (void *)(prm + 4 * r), l.in[2] = (void *)(rng + 4 * r), l.out[0] = &tok;
    l.rows = 1;
    reel_host_sample(&l);
    return tok;
}

int main(int argc, char **argv)
{
    int replays = argc > 1 ? std::max(5, atoi(argv[1])) : 30;
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
    printf("# bench_sample (REEL_SAMPLE_CLUSTER %d): %s, %d SMs, L2 %d MB, %s, %d replays a timing\n\n",
           REEL_SAMPLE_CLUSTER, prop.name, sms, prop.l2CacheSize >> 20, date, replays);
    printf("read bandwidth (1 GiB, a 16-byte-load kernel): %.2f TB/s; floor = logits bytes / that; "
           "bf16 logits uniform in [-8, 8)\n\n", read_bw);
    printf("| mode | rows | vocab | KB | floor us | hot us | hot pdl us | cold us | cold TB/s | blocks a row |\n");
    printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");

    static const int rows_list[] = { 1, 8, 64, 256 };
    static const int vocab_list[] = { 32000, 128256, 152064 };
    int failed = 0;
    for (int vocab : vocab_list)
        for (int rows : rows_list) {
            const size_t bytes = (size_t)rows * vocab * 2;
            const int ncopies = (int)std::max<size_t>(2, (size_t)(150u << 20) / bytes + 1);
            std::vector<void *> x(ncopies);
            for (int i = 0; i < ncopies; i++) {
                CK(cudaMalloc(&x[i], bytes));
                fill_logits<<<256, 256, 0, s>>>((uint16_t *)x[i], bytes / 2, 11u + (uint32_t)i);
            }
            int32_t *out, *drng;
            float *dprm;
            CK(cudaMalloc(&out, (size_t)rows * 4));
            CK(cudaMalloc(&dprm, (size_t)rows * 16));
            CK(cudaMalloc(&drng, (size_t)rows * 16));
            std::vector<float> prm((size_t)rows * 4);
            std::vector<int32_t> rng((size_t)rows * 4);
            for (int m = 0; m < nmodes; m++) {
                for (int r = 0; r < rows; r++) {
                    const bool mixed = strcmp(modes[m].name, "mixed") == 0; /* every row the next mode */
                    const mode &md = mixed ? modes[r % (nmodes - 1)] : modes[m];
                    memcpy(&prm[(size_t)r * 4], md.p, 16);
                    for (int j = 0; j < 4; j++)
                        rng[(size_t)r * 4 + j] = (int32_t)(2654435761u * (uint32_t)(r * 4 + j + 1) ^ (uint32_t)m);
                }
                CK(cudaMemcpy(dprm, prm.data(), prm.size() * 4, cudaMemcpyHostToDevice));
                CK(cudaMemcpy(drng, rng.data(), rng.size() * 4, cudaMemcpyHostToDevice));
                reel_shape sh[4];
                memset(sh, 0, sizeof sh);
                sh[0].dtype = REEL_BF16, sh[0].ndim = 2, sh[0].tokens = true;
                sh[0].dims[0] = rows, sh[0].dims[1] = vocab;
                sh[1].dtype = REEL_F32, sh[1].ndim = 2, sh[1].tokens = true, sh[1].dims[0] = rows, sh[1].dims[1] = 4;
                sh[2].dtype = REEL_I32, sh[2].ndim = 2, sh[2].tokens = true, sh[2].dims[0] = rows, sh[2].dims[1] = 4;
                sh[3].dtype = REEL_I32, sh[3].ndim = 1, sh[3].tokens = true, sh[3].dims[0] = rows;
                reel_op_attrs at;
                memset(&at, 0, sizeof at);
                reel_launch l;
                memset(&l, 0, sizeof l);
                l.op = REEL_OP_SAMPLE;
                l.attrs = &at;
                l.in_shape = sh;
                l.out_shape = &sh[3];
                l.in[0] = x[0], l.in[1] = dprm, l.in[2] = drng, l.out[0] = out;
                l.rows = rows;
                l.stream = rs;
                const reel_op_impl *impl = &reel_cu_sample_impl;
                const int64_t blocks = impl->grid_blocks(&l, &be->caps) / rows;
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
                l.in[0] = x[0], l.pdl = false;
                RK(impl->launch(be, &l));
                CK(cudaStreamSynchronize(s));
                std::vector<int32_t> got((size_t)rows);
                CK(cudaMemcpy(got.data(), out, (size_t)rows * 4, cudaMemcpyDeviceToHost));
                bool ok = true;
                for (int r : { 0, rows - 1 }) {
                    const int32_t want = host_token(x[0], prm.data(), rng.data(), r, vocab);
                    if (got[(size_t)r] != want) {
                        fprintf(stderr, "MISMATCH %s rows %d vocab %d: row %d gave %d, host %d\n", modes[m].name,
                                rows, vocab, r, got[(size_t)r], want);
                        ok = false;
                    }
                }
                failed |= !ok;
                const double floor_us = (double)bytes / (read_bw * 1e12) * 1e6;
                printf("| %s | %d | %d | %.0f | %.3f | %.2f | %.2f | %.2f | %.2f | %lld |%s\n", modes[m].name, rows,
                       vocab, bytes / 1024.0, floor_us, hot, hot_pdl, cold, (double)bytes / (cold * 1e-6) / 1e12,
                       (long long)blocks, ok ? "" : " MISMATCH");
                fflush(stdout);
            }
            for (void *p : x)
                CK(cudaFree(p));
            CK(cudaFree(out));
            CK(cudaFree(dprm));
            CK(cudaFree(drng));
        }
    be->vt->stream_destroy(be, rs);
    reel_ctx_destroy(g_ctx);
    return failed;
}
