/* What every CUDA benchmark program in bench/ shares: the checks that end
 * the program on a failed CUDA call or reel call (a benchmark, not library
 * code; RK, for programs that include reel/reel.h, names their context,
 * g_ctx, for its message), and
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

#define RK(call)                                                                                          \
    do {                                                                                                  \
        reel_status s_ = (call);                                                                          \
        if (s_ != REEL_OK) {                                                                              \
            fprintf(stderr, "%s:%d: %s: %s: %s\n", __FILE__, __LINE__, #call, reel_status_str(s_),        \
                    reel_ctx_last_error(g_ctx));                                                          \
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
