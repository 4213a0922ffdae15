/* The read probe of the benchmarks (bench/attention.cu; bench/graph_timer.cuh
 * times it for bench/gemv.cu and bench/argmax.cu):
 * the ceiling of a read-only stream, which a copy's read + write does not
 * bound. */
#pragma once

#include <stddef.h>

#include "bench/bench_cuda.cuh"

/* Reads n 16-byte words once, no L1 (as weights and K/V stream), into a
 * sink no value ever reaches. Four loads of a thread are in flight before
 * any is used (one at a time, 64 warps an SM read 4.19 TB/s on an H200,
 * below what SDPA reads K/V at: latency, not a ceiling). */
__global__ void read_probe(const uint4 *p, size_t n, unsigned *sink)
{
    unsigned a = 0;
    const size_t step = (size_t)gridDim.x * blockDim.x;
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    for (; i + 3 * step < n; i += 4 * step) {
        uint4 v[4];
#pragma unroll
        for (int u = 0; u < 4; u++)
            v[u] = ld_once16(p + i + u * step);
#pragma unroll
        for (int u = 0; u < 4; u++)
            a ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
    for (; i < n; i += step) {
        const uint4 v = ld_once16(p + i);
        a ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (a == 0x9e3779b9u)
        *sink = a;
}
