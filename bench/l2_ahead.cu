/* Weights into L2 while the GPU's memory is idle: what a skinny matmul
 * gains when the bytes it is about to read were asked for during the
 * op before it.
 *
 * In a decode step at small batch the attention and the norms leave HBM
 * idle for several microseconds a layer, and the next matmul then streams
 * its weights at 1.5-3.1 TB/s. This probe times, per weight shape of the
 * hidden-2048 model at M = 1, a stand-in for the idle op (a kernel that
 * sleeps T us on 64 blocks, no memory traffic) followed by reel's gemv
 * kernel, three ways, each a captured graph of L such pairs, each pair on
 * another copy of the weights (at least 150 MB in rotation, so nothing is
 * left in the 50 MB L2 from a previous pair):
 *   base   idle(T) -> gemv
 *   ahead  idle(T) || bulk L2 prefetch of the first `ahead` bytes of the
 *          gemv's weights on a second stream, joined before the gemv
 *   ahead, evict_last   the same with an L2 evict-last policy on the prefetch
 * The figure is the median replay over L (us a pair); "saved" is base -
 * ahead. A prefetch is a hint: the gemv's result is the same bits. Then
 * the layer's sequence at batch 1 (idle -> o -> gate/up, with o's weights
 * and the head of gate/up's asked for as the idle kernel starts), and a
 * latency-bound kernel (64 blocks of dependent loads, a stand-in for the
 * batch-1 decode) alone and beside a prefetch of 8-32 MB. Measured on an
 * H200 in docs/benchmarks.md ("Weights into L2 during the decode").
 *
 *   bench_l2_ahead [replays]   (default 30) */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <algorithm>
#include <vector>

#include "bench/graph_timer.cuh"
#include "ops/cuda/gemv.h"

static int g_replays = 30;

__global__ void idle_kernel(unsigned long long ns)
{
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        __nanosleep(200);
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (t - t0 < ns);
}

/* A stand-in for the decode at batch 1: 64 blocks, each a chain of `n`
 * dependent 16-byte loads a warp from its own 16 KiB of `p` (no two
 * blocks share a line), the next address from the last value. */
__global__ void chase_kernel(const uint4 *p, int n, unsigned *sink)
{
    const uint4 *b = p + (size_t)blockIdx.x * 1024;
    unsigned i = threadIdx.x, a = 0;
    for (int k = 0; k < n; k++) {
        uint4 v = ld_once16(b + (i & 1023));
        a += v.x;
        i = (i + 32 + (v.y & 1)) & 1023;
        b += 64 * 1024; /* another block's range next: never an L2 hit */
        if (b >= p + (size_t)64 * 1024 * 64)
            b -= (size_t)64 * 1024 * 64 - 1024;
    }
    if (a == 0x9e3779b9u)
        *sink = a;
}

/* Each thread asks L2 for its chunks of `bytes` (multiples of 16) with one
 * bulk prefetch per chunk; the kernel exits as soon as they are issued. */
__global__ void l2_ahead_kernel(const char *p, size_t bytes, size_t chunk, int evict_last)
{
    size_t nchunks = (bytes + chunk - 1) / chunk;
    uint64_t pol = 0;
    if (evict_last)
        asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(pol));
    for (size_t c = blockIdx.x * (size_t)blockDim.x + threadIdx.x; c < nchunks; c += (size_t)gridDim.x * blockDim.x) {
        size_t off = c * chunk, n = std::min(chunk, bytes - off);
        if (evict_last)
            asm volatile("cp.async.bulk.prefetch.L2.global.L2::cache_hint [%0], %1, %2;" ::"l"(p + off), "r"((unsigned)n),
                         "l"(pol)
                         : "memory");
        else
            asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p + off), "r"((unsigned)n) : "memory");
    }
}

struct shape {
    int n, k;
    const char *what;
};

int main(int argc, char **argv)
{
    if (argc > 1)
        g_replays = std::max(5, atoi(argv[1]));
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    time_t now = time(NULL);
    char date[64];
    strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", gmtime(&now));
    printf("# bench_l2_ahead: %s, %d SMs, L2 %d MB, %s, %d replays a timing, M = 1, bf16 [N, K]\n\n", prop.name,
           prop.multiProcessorCount, prop.l2CacheSize >> 20, date, g_replays);
    cudaStream_t s, s2;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    const int L = 24;
    std::vector<cudaEvent_t> ev(2 * L);
    for (auto &e : ev)
        CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    const shape shapes[] = {{2048, 2048, "o"}, {6144, 2048, "q/k/v"}, {16384, 2048, "gate/up"}, {2048, 8192, "down"}};
    const double idles[] = {0, 4, 8, 12, 20};
    printf("| weights | MB | idle us | ahead MB | chunk KB | idle alone | gemv alone | base | ahead | ahead evict_last |"
           " saved us | saved evict_last |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
    for (const shape &sh : shapes) {
        size_t wb = (size_t)sh.n * sh.k * 2;
        int nc = (int)std::max<size_t>(L, (size_t)(150u << 20) / wb + 1);
        std::vector<void *> w(nc);
        for (auto &p : w) {
            CK(cudaMalloc(&p, wb));
            fill_bf16<<<1024, 256, 0, s>>>((uint16_t *)p, wb / 2, (uint32_t)(&p - w.data()));
        }
        void *x, *y;
        CK(cudaMalloc(&x, (size_t)sh.k * 2));
        CK(cudaMalloc(&y, (size_t)sh.n * 2));
        fill_bf16<<<16, 256, 0, s>>>((uint16_t *)x, sh.k, 5u);
        CK(cudaStreamSynchronize(s));
        reel_gemv_cfg cfg = reel_cuda_gemv_pick(sh.n, sh.k, true, prop.multiProcessorCount);
        auto gemv = [&](int i) {
            CK(reel_cuda_gemv_run(REEL_BF16, true, x, w[i % nc], y, 1, sh.n, sh.k, cfg, s, false));
        };
        double g_alone = time_graph(s, L, g_replays, [&](int i) { gemv(i); });
        for (double T : idles) {
            unsigned long long ns = (unsigned long long)(T * 1000);
            double i_alone = T > 0 ? time_graph(s, L, g_replays, [&](int) { idle_kernel<<<64, 32, 0, s>>>(ns); }) : 0;
            double base = time_graph(s, L, g_replays, [&](int i) {
                if (T > 0)
                    idle_kernel<<<64, 32, 0, s>>>(ns);
                gemv(i);
            });
            /* What the idle time could bring in at ~4 TB/s, at least 4 MB. */
            size_t ahead = std::min(wb, std::max((size_t)4 << 20, (size_t)(T * 4e6)));
            ahead &= ~(size_t)0xffff;
            for (size_t chunk : {(size_t)64 << 10, (size_t)256 << 10}) {
                double t[2];
                for (int el = 0; el < 2; el++)
                    t[el] = time_graph(s, L, g_replays, [&](int i) {
                        CK(cudaEventRecord(ev[2 * i], s));
                        CK(cudaStreamWaitEvent(s2, ev[2 * i], 0));
                        l2_ahead_kernel<<<8, 32, 0, s2>>>((const char *)w[i % nc], ahead, chunk, el);
                        CK(cudaEventRecord(ev[2 * i + 1], s2));
                        if (T > 0)
                            idle_kernel<<<64, 32, 0, s>>>(ns);
                        CK(cudaStreamWaitEvent(s, ev[2 * i + 1], 0));
                        gemv(i);
                    });
                printf("| %s [%d, %d] | %.1f | %.0f | %.1f | %zu | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f |\n", sh.what,
                       sh.n, sh.k, wb / 1048576.0, T, ahead / 1048576.0, chunk >> 10, i_alone, g_alone, base, t[0], t[1],
                       base - t[0], base - t[1]);
                fflush(stdout);
            }
        }
        for (auto p : w)
            CK(cudaFree(p));
        CK(cudaFree(x));
        CK(cudaFree(y));
    }
    /* The layer's sequence at batch 1: attention (idle T) -> o -> gate/up,
     * the prefetch of o's weights and the first `head` MB of gate/up's
     * issued as the attention starts. */
    {
        const shape so = {2048, 2048, "o"}, sg = {16384, 2048, "gate/up"};
        size_t ob = (size_t)so.n * so.k * 2, gb = (size_t)sg.n * sg.k * 2;
        std::vector<void *> wo(L), wg(L);
        for (int i = 0; i < L; i++) {
            CK(cudaMalloc(&wo[i], ob));
            CK(cudaMalloc(&wg[i], gb));
            fill_bf16<<<1024, 256, 0, s>>>((uint16_t *)wo[i], ob / 2, 100u + i);
            fill_bf16<<<1024, 256, 0, s>>>((uint16_t *)wg[i], gb / 2, 200u + i);
        }
        void *x, *y, *y2;
        CK(cudaMalloc(&x, (size_t)2048 * 2));
        CK(cudaMalloc(&y, (size_t)2048 * 2));
        CK(cudaMalloc(&y2, (size_t)16384 * 2));
        fill_bf16<<<16, 256, 0, s>>>((uint16_t *)x, 2048, 5u);
        CK(cudaStreamSynchronize(s));
        reel_gemv_cfg co = reel_cuda_gemv_pick(so.n, so.k, true, prop.multiProcessorCount),
                      cg = reel_cuda_gemv_pick(sg.n, sg.k, true, prop.multiProcessorCount);
        printf("\n| sequence | idle us | gate/up head MB | policy | base us | ahead us | saved us |\n| --- | --- | --- | --- | --- | --- | --- |\n");
        for (double T : {4.0, 8.0, 12.0, 20.0})
            for (size_t head : {(size_t)0, (size_t)8 << 20, (size_t)24 << 20, (size_t)40 << 20})
                for (int el = 0; el < 2; el++) {
                    unsigned long long ns = (unsigned long long)(T * 1000);
                    auto pair = [&](int i) {
                        CK(reel_cuda_gemv_run(REEL_BF16, true, x, wo[i], y, 1, so.n, so.k, co, s, false));
                        CK(reel_cuda_gemv_run(REEL_BF16, true, x, wg[i], y2, 1, sg.n, sg.k, cg, s, false));
                    };
                    double base = time_graph(s, L, g_replays, [&](int i) {
                        idle_kernel<<<64, 32, 0, s>>>(ns);
                        pair(i);
                    });
                    double ah = time_graph(s, L, g_replays, [&](int i) {
                        CK(cudaEventRecord(ev[2 * i], s));
                        CK(cudaStreamWaitEvent(s2, ev[2 * i], 0));
                        l2_ahead_kernel<<<8, 32, 0, s2>>>((const char *)wo[i], ob, (size_t)64 << 10, el);
                        if (head)
                            l2_ahead_kernel<<<8, 32, 0, s2>>>((const char *)wg[i], head, (size_t)64 << 10, el);
                        CK(cudaEventRecord(ev[2 * i + 1], s2));
                        idle_kernel<<<64, 32, 0, s>>>(ns);
                        CK(cudaStreamWaitEvent(s, ev[2 * i + 1], 0));
                        pair(i);
                    });
                    printf("| idle -> o -> gate/up | %.0f | %zu | %s | %.2f | %.2f | %.2f |\n", T, head >> 20,
                           el ? "evict_last" : "normal", base, ah, base - ah);
                    fflush(stdout);
                }
    }
    /* What a prefetch does to a latency-bound kernel running beside it:
     * the chain alone, and with 8-32 MB asked of L2 as it starts. */
    {
        void *buf, *wbig;
        unsigned *sink;
        CK(cudaMalloc(&buf, (size_t)64 * 1024 * 64 * 16));
        CK(cudaMemset(buf, 0, (size_t)64 * 1024 * 64 * 16));
        CK(cudaMalloc(&wbig, (size_t)48 << 20));
        CK(cudaMalloc(&sink, 4));
        printf("\n| chain (64 blocks, dependent loads) | prefetch MB | chain us | chain + prefetch us |\n| --- | --- | --- | --- |\n");
        for (int n : {16, 64})
            for (size_t mb : {(size_t)8, (size_t)16, (size_t)32}) {
                double alone = time_graph(s, L, g_replays, [&](int) { chase_kernel<<<64, 32, 0, s>>>((const uint4 *)buf, n, sink); });
                double with = time_graph(s, L, g_replays, [&](int i) {
                    CK(cudaEventRecord(ev[2 * i], s));
                    CK(cudaStreamWaitEvent(s2, ev[2 * i], 0));
                    l2_ahead_kernel<<<8, 32, 0, s2>>>((const char *)wbig, mb << 20, (size_t)64 << 10, 0);
                    CK(cudaEventRecord(ev[2 * i + 1], s2));
                    chase_kernel<<<64, 32, 0, s>>>((const uint4 *)buf, n, sink);
                    CK(cudaStreamWaitEvent(s, ev[2 * i + 1], 0));
                });
                printf("| %d loads | %zu | %.2f | %.2f |\n", n, mb, alone, with);
                fflush(stdout);
            }
        CK(cudaFree(buf));
        CK(cudaFree(wbig));
        CK(cudaFree(sink));
    }
    printf("\nbytes: %s\n", "each pair reads another copy; a prefetch is a hint (same bits)");
    return 0;
}
