/* What bench/gemv.cu, bench/l2_ahead.cu and bench/chain.cu share: a graph of L captured
 * launches replayed `replays` times (the median us per launch, so the
 * gaps between graph nodes are counted as a replayed step pays them), the
 * median, the read probe's bandwidth timed that way, and random bf16
 * weights. */
#pragma once

#include <string.h>

#include <time.h>

#include <algorithm>
#include <vector>

#include "bench/bench_cuda.cuh"
#include "bench/read_probe.cuh"

static inline double median(std::vector<double> v)
{
    std::sort(v.begin(), v.end());
    size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Captures body(i) for i < L on s, replays, returns the median us per i. */
template <typename F> static double time_graph(cudaStream_t s, int L, int replays, F body)
{
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < L; i++)
        body(i);
    CK(cudaStreamEndCapture(s, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    for (int w = 0; w < 3; w++)
        CK(cudaGraphLaunch(ge, s));
    std::vector<double> t;
    for (int r = 0; r < replays; r++) {
        CK(cudaEventRecord(a, s));
        CK(cudaGraphLaunch(ge, s));
        CK(cudaEventRecord(b, s));
        CK(cudaEventSynchronize(b));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, a, b));
        t.push_back(ms * 1e3 / L);
    }
    CK(cudaEventDestroy(a));
    CK(cudaEventDestroy(b));
    CK(cudaGraphExecDestroy(ge));
    CK(cudaGraphDestroy(g));
    return median(t);
}

/* The read probe's bandwidth over `bytes`, rotating over ncopies copies
 * (sms x 4 blocks of 512 threads, the median of `replays`); *us a read. */
static inline double read_probe_tbs(cudaStream_t s, void *const *src, int ncopies, size_t bytes, int sms,
                                    int replays, unsigned *sink, double *us)
{
    int L = std::max(ncopies, 8);
    *us = time_graph(s, L, replays, [&](int i) {
        read_probe<<<sms * 4, 512, 0, s>>>((const uint4 *)src[i % ncopies], bytes / 16, sink);
    });
    return (double)bytes / (*us * 1e-6) / 1e12;
}

/* Random bf16 in [-1, 1): a hash of the index (never zeros). */
__global__ void fill_bf16(uint16_t *p, size_t n, uint32_t salt)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ salt;
        h ^= h >> 15, h *= 2246822519u, h ^= h >> 13;
        float f = (float)(h & 0xffffff) / 8388608.0f - 1.0f;
        uint32_t b;
        memcpy(&b, &f, 4);
        p[i] = (uint16_t)((b + 0x7fff + ((b >> 16) & 1)) >> 16);
    }
}

/* What a benchmark's header line names: the device, its multiprocessors,
 * the date, and the read bandwidth over two 1 GiB buffers (allocated and
 * freed here), the floor's denominator. */
typedef struct bench_device {
    cudaDeviceProp prop;
    int sms;
    char date[64];
    double read_tbs, read_us;
} bench_device;

static inline void bench_device_probe(cudaStream_t s, int replays, unsigned *sink, bench_device *d)
{
    CK(cudaGetDeviceProperties(&d->prop, 0));
    d->sms = d->prop.multiProcessorCount;
    time_t now = time(NULL);
    strftime(d->date, sizeof d->date, "%Y-%m-%d %H:%M UTC", gmtime(&now));
    size_t big = (size_t)1 << 30;
    void *bsrc[2];
    CK(cudaMalloc(&bsrc[0], big));
    CK(cudaMalloc(&bsrc[1], big));
    CK(cudaMemset(bsrc[0], 1, big));
    CK(cudaMemset(bsrc[1], 2, big));
    d->read_tbs = read_probe_tbs(s, bsrc, 2, big, d->sms, replays, sink, &d->read_us);
    CK(cudaFree(bsrc[0]));
    CK(cudaFree(bsrc[1]));
}
