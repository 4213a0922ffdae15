/* Internal to ops/cuda: sm_90a warpgroup matrix multiplies (wgmma) with the
 * A operand in registers and B in shared memory, float32 accumulators.
 *
 * A shared-memory operand is described by its start, two strides and a
 * swizzle (PTX ISA, "Matrix Descriptor Format"); the callers say which
 * layout they store.
 *
 * Only device code built for sm_90a (REEL_CUDA_SM90A, __CUDA_ARCH_FEAT_SM90_ALL)
 * may call these. */
#ifndef REEL_OPS_CUDA_WGMMA_CUH
#define REEL_OPS_CUDA_WGMMA_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

namespace reel_cu {

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

/* A shared-memory matrix descriptor with the 128-byte swizzle (rows of 128
 * bytes, the 16-byte chunk c of row r stored at c ^ (r % 8), atoms of 8 rows
 * on 1024-byte boundaries); lbo and sbo in bytes. */
__device__ __forceinline__ uint64_t wg_desc_sw128(const void *smem, uint32_t lbo, uint32_t sbo)
{
    uint32_t a = (uint32_t)__cvta_generic_to_shared(smem);
    return (uint64_t)((a & 0x3FFFFu) >> 4) | ((uint64_t)((lbo & 0x3FFFFu) >> 4) << 16) |
           ((uint64_t)((sbo & 0x3FFFFu) >> 4) << 32) | (1ull << 62);
}

/* Orders this thread's register and shared-memory writes before the
 * warpgroup's next matrix multiplies read them. */
__device__ __forceinline__ void wg_fence()
{
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}

__device__ __forceinline__ void wg_commit()
{
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

/* Waits until at most N committed groups of this warpgroup are in flight. */
template <int N> __device__ __forceinline__ void wg_wait()
{
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

/* Pins accumulator registers at this point of the program: placed after a
 * wait, it keeps the compiler from moving their reads above it (ptxas would
 * then serialize the matrix multiplies, warning C7514). */
template <int N> __device__ __forceinline__ void wg_hold(float (&d)[N][4])
{
#pragma unroll
    for (int i = 0; i < N; i++)
        asm volatile("" : "+f"(d[i][0]), "+f"(d[i][1]), "+f"(d[i][2]), "+f"(d[i][3])::"memory");
}

/* Shared memory written through the generic proxy (stores, cp.async) that
 * the tensor cores read next: each writing thread fences before the barrier. */
__device__ __forceinline__ void fence_proxy_async()
{
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

/* d[N/2] += A (64 x 16, this thread's four registers, the mma.sync A
 * fragment of rows 16 * warp ..) x B (16 x N at desc), or d = A x B where
 * scale_d is 0; TB 1: B is N-major. d holds the mma.sync C fragments of
 * the N / 8 column tiles in order. */
template <typename T, int N> struct wg_mma;
/* One specialization a (type, N): inline assembly needs its operand lists
 * written out, so they are built from eight-register pieces: the
 * accumulators d[0 .. N/2) are operands %0 .. %(N/2 - 1), then the four A
 * registers, the descriptor, scale_d and TB. */
#define REEL_WG_S8(a, b, c, e, f, g, h, i) "%" #a ",%" #b ",%" #c ",%" #e ",%" #f ",%" #g ",%" #h ",%" #i
#define REEL_WG_REGS64                                                                                             \
    REEL_WG_S8(0, 1, 2, 3, 4, 5, 6, 7) "," REEL_WG_S8(8, 9, 10, 11, 12, 13, 14, 15) ","                           \
        REEL_WG_S8(16, 17, 18, 19, 20, 21, 22, 23) "," REEL_WG_S8(24, 25, 26, 27, 28, 29, 30, 31)
#define REEL_WG_REGS128                                                                                            \
    REEL_WG_REGS64 "," REEL_WG_S8(32, 33, 34, 35, 36, 37, 38, 39) "," REEL_WG_S8(40, 41, 42, 43, 44, 45, 46, 47)  \
        "," REEL_WG_S8(48, 49, 50, 51, 52, 53, 54, 55) "," REEL_WG_S8(56, 57, 58, 59, 60, 61, 62, 63)
#define REEL_WG_D8(i)                                                                                              \
    "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]),     \
        "+f"(d[i + 7])
#define REEL_WG_D64 REEL_WG_D8(0), REEL_WG_D8(8), REEL_WG_D8(16), REEL_WG_D8(24)
#define REEL_WG_D128 REEL_WG_D64, REEL_WG_D8(32), REEL_WG_D8(40), REEL_WG_D8(48), REEL_WG_D8(56)
/* N, its accumulators' register list, and the operand numbers after them:
 * the four A registers, the descriptor, scale_d and TB; the accumulators'
 * constraints last. */
#define REEL_WG_MMA(CT, PT, N, REGS, A0, A1, A2, A3, DESC, SCALE, TBN, ...)                                        \
    template <> struct wg_mma<CT, N> {                                                                             \
        template <int TB>                                                                                          \
        static __device__ __forceinline__ void run(float *d, const uint32_t *a, uint64_t desc, int scale_d)        \
        {                                                                                                          \
            asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #SCALE ", 0;\n"                                      \
                         "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." #PT "." #PT " {" REGS "}, {%" #A0      \
                         ",%" #A1 ",%" #A2 ",%" #A3 "}, %" #DESC ", p, 1, 1, %" #TBN ";\n}\n"                       \
                         : __VA_ARGS__                                                                             \
                         : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(scale_d), "n"(TB));          \
        }                                                                                                          \
    };

REEL_WG_MMA(__nv_bfloat16, bf16, 64, REEL_WG_REGS64, 32, 33, 34, 35, 36, 37, 38, REEL_WG_D64)
REEL_WG_MMA(__half, f16, 64, REEL_WG_REGS64, 32, 33, 34, 35, 36, 37, 38, REEL_WG_D64)
REEL_WG_MMA(__nv_bfloat16, bf16, 128, REEL_WG_REGS128, 64, 65, 66, 67, 68, 69, 70, REEL_WG_D128)
REEL_WG_MMA(__half, f16, 128, REEL_WG_REGS128, 64, 65, 66, 67, 68, 69, 70, REEL_WG_D128)
#undef REEL_WG_MMA
#undef REEL_WG_D128
#undef REEL_WG_D64
#undef REEL_WG_D8
#undef REEL_WG_REGS128
#undef REEL_WG_REGS64
#undef REEL_WG_S8

#endif /* __CUDA_ARCH_FEAT_SM90_ALL */

} /* namespace reel_cu */

#endif
