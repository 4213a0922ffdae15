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
/* One specialization a (type, N): the operand lists are written out, as
 * inline assembly needs. */
#define REEL_WG_MMA_N64(CT, PT)                                                                                        \
    template <> struct wg_mma<CT, 64> {                                                                                \
        template <int TB>                                                                                              \
        static __device__ __forceinline__ void run(float *d, const uint32_t *a, uint64_t desc, int scale_d)            \
        {                                                                                                              \
            asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"                                                  \
                         "wgmma.mma_async.sync.aligned.m64n64k16.f32." #PT "." #PT " {"                                \
                         "%0,%1,%2,%3,%4,%5,%6,%7,"                                                                    \
                         "%8,%9,%10,%11,%12,%13,%14,%15,"                                                              \
                         "%16,%17,%18,%19,%20,%21,%22,%23,"                                                            \
                         "%24,%25,%26,%27,%28,%29,%30,%31"                                                             \
                         "}, {%32,%33,%34,%35}, %36, p, 1, 1, %38;\n}\n"                                               \
                         : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]),                                             \
                           "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),                                             \
                           "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),                                           \
                           "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),                                         \
                           "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]),                                         \
                           "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),                                         \
                           "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),                                         \
                           "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])                                          \
                         : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(scale_d), "n"(TB));              \
        }                                                                                                              \
    };

#define REEL_WG_MMA_N128(CT, PT)                                                                                       \
    template <> struct wg_mma<CT, 128> {                                                                               \
        template <int TB>                                                                                              \
        static __device__ __forceinline__ void run(float *d, const uint32_t *a, uint64_t desc, int scale_d)            \
        {                                                                                                              \
            asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"                                                  \
                         "wgmma.mma_async.sync.aligned.m64n128k16.f32." #PT "." #PT " {"                               \
                         "%0,%1,%2,%3,%4,%5,%6,%7,"                                                                    \
                         "%8,%9,%10,%11,%12,%13,%14,%15,"                                                              \
                         "%16,%17,%18,%19,%20,%21,%22,%23,"                                                            \
                         "%24,%25,%26,%27,%28,%29,%30,%31,"                                                            \
                         "%32,%33,%34,%35,%36,%37,%38,%39,"                                                            \
                         "%40,%41,%42,%43,%44,%45,%46,%47,"                                                            \
                         "%48,%49,%50,%51,%52,%53,%54,%55,"                                                            \
                         "%56,%57,%58,%59,%60,%61,%62,%63"                                                             \
                         "}, {%64,%65,%66,%67}, %68, p, 1, 1, %70;\n}\n"                                               \
                         : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]),                                             \
                           "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),                                             \
                           "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),                                           \
                           "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),                                         \
                           "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]),                                         \
                           "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),                                         \
                           "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),                                         \
                           "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),                                         \
                           "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),                                         \
                           "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),                                         \
                           "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]),                                         \
                           "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),                                         \
                           "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]),                                         \
                           "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),                                         \
                           "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]),                                         \
                           "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])                                          \
                         : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(scale_d), "n"(TB));              \
        }                                                                                                              \
    };

REEL_WG_MMA_N64(__nv_bfloat16, bf16)
REEL_WG_MMA_N64(__half, f16)
REEL_WG_MMA_N128(__nv_bfloat16, bf16)
REEL_WG_MMA_N128(__half, f16)
#undef REEL_WG_MMA_N64
#undef REEL_WG_MMA_N128

#endif /* __CUDA_ARCH_FEAT_SM90_ALL */

} /* namespace reel_cu */

#endif
