/* What every CUDA benchmark program in bench/ shares: the check that ends
 * the program on a failed CUDA call (a benchmark, not library code), and
 * the read-once 16-byte load of the read probes (no L1, as weights and K/V
 * stream). */
#pragma once

#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define CK(call)                                                                                          \
    do {                                                                                                  \
        cudaError_t e_ = (call);                                                                          \
        if (e_ != cudaSuccess) {                                                                          \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_));        \
            exit(1);                                                                                      \
        }                                                                                                 \
    } while (0)

__device__ __forceinline__ uint4 ld_once16(const void *p)
{
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}
