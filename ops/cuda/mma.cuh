/* Internal to ops/cuda: warp-level tensor-core and async-copy helpers
 * (sm_80+ instructions, used on sm_90): mma.sync m16n8k16 with float32
 * accumulators, ldmatrix, cp.async. */
#ifndef REEL_OPS_CUDA_MMA_CUH
#define REEL_OPS_CUDA_MMA_CUH

#include <atomic>

#include "ops/cuda/common.cuh"

namespace reel_cu {

template <typename T> struct mma_op;
template <> struct mma_op<__nv_bfloat16> {
    static __device__ __forceinline__ void run(float *d, const uint32_t *a, const uint32_t *b)
    {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                     "{%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    }
    static __device__ __forceinline__ uint32_t pack2(float lo, float hi)
    {
        __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
        return *(uint32_t *)&v;
    }
};
template <> struct mma_op<__half> {
    static __device__ __forceinline__ void run(float *d, const uint32_t *a, const uint32_t *b)
    {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                     "{%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    }
    static __device__ __forceinline__ uint32_t pack2(float lo, float hi)
    {
        __half2 v = __floats2half2_rn(lo, hi);
        return *(uint32_t *)&v;
    }
};

/* The rows of an m16n8 C fragment are held by quads of lanes (lane / 4):
 * the max and the sum over a row's quad. */
__device__ __forceinline__ float quad_max(float v)
{
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
    return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}

__device__ __forceinline__ float quad_sum(float v)
{
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

/* 2^x on the special-function unit alone (ex2.approx.ftz: one instruction;
 * exp2f adds the handling of subnormal results, which flush to 0 here). A
 * softmax weight under 2^-126 is 0 either way within the tolerance of every
 * path; the result depends on x alone, so replay == eager is unchanged. */
__device__ __forceinline__ float ex2_ftz(float x)
{
#ifdef REEL_ATTN_EXACT_EXP2
    return exp2f(x);
#else
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
#endif
}

/* Scales rows gi (by c0) and gi + 8 (by c1) of N C fragments. */
template <int N> __device__ __forceinline__ void scale_rows(float (&o)[N][4], float c0, float c1)
{
#pragma unroll
    for (int n = 0; n < N; n++) {
        o[n][0] *= c0;
        o[n][1] *= c0;
        o[n][2] *= c1;
        o[n][3] *= c1;
    }
}

/* The A fragment of a 16-wide k-step from the C fragments of its two
 * 8-wide halves (P of the online softmax, kept in registers). */
template <typename T> __device__ __forceinline__ void c_to_a(const float *lo, const float *hi, uint32_t (&a)[4])
{
    a[0] = mma_op<T>::pack2(lo[0], lo[1]);
    a[1] = mma_op<T>::pack2(lo[2], lo[3]);
    a[2] = mma_op<T>::pack2(hi[0], hi[1]);
    a[3] = mma_op<T>::pack2(hi[2], hi[3]);
}

__device__ __forceinline__ void ldsm_x4(uint32_t *r, const void *smem)
{
    uint32_t a = (uint32_t)__cvta_generic_to_shared(smem);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}

__device__ __forceinline__ void ldsm_x4_t(uint32_t *r, const void *smem)
{
    uint32_t a = (uint32_t)__cvta_generic_to_shared(smem);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}

/* 16 bytes global -> shared; src_bytes 0 fills zeros. */
__device__ __forceinline__ void cp_async16(void *smem, const void *gmem, int src_bytes)
{
    uint32_t a = (uint32_t)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(a), "l"(gmem), "r"(src_bytes));
}

/* A 16-byte cp.async to a shared address already in the shared window
 * (cvta done once by the caller), every byte from global memory. */
__device__ __forceinline__ void cp_async16_sh(uint32_t smem, const void *gmem)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem), "l"(gmem));
}

/* cp_async16_sh with a source size: src_bytes 0 fills zeros and reads nothing. */
__device__ __forceinline__ void cp_async16_sh_n(uint32_t smem, const void *gmem, int src_bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem), "l"(gmem), "r"(src_bytes));
}

__device__ __forceinline__ void cp_async_commit()
{
    asm volatile("cp.async.commit_group;\n" ::);
}

/* A tile of BN key rows of K and of V into shared rows of LD elements, one
 * commit group: a thread copies 16 bytes of a row's DH elements, THREADS /
 * (DH / 8) rows at a time. Row r is key kt + r, read from kc and vc at
 * row(j) (elements, the head's offset included) where live(j), zeros
 * elsewhere. */
template <typename T, int DH, int BN, int THREADS, int LD, typename Live, typename Row>
__device__ __forceinline__ void cp_async_kv_tile(T *ks, T *vs, const T *kc, const T *vc, int32_t kt, Live live,
                                                 Row row)
{
    constexpr int CPR = DH / 8;
    static_assert(THREADS % CPR == 0, "a thread keeps its part of every row");
    const int part = threadIdx.x % CPR;
    for (int r = threadIdx.x / CPR; r < BN; r += THREADS / CPR) {
        int32_t j = kt + r;
        const T *ksrc = kc, *vsrc = vc;
        int bytes = 0;
        if (live(j)) {
            int64_t at = row(j) + part * 8;
            ksrc = kc + at;
            vsrc = vc + at;
            bytes = 16;
        }
        cp_async16(&ks[r * LD + part * 8], ksrc, bytes);
        cp_async16(&vs[r * LD + part * 8], vsrc, bytes);
    }
    cp_async_commit();
}

/* cp_async_kv_tile for a paged cache whose block size is a power of two
 * (1 << sh) and whose chunk's block ids are all in shared memory (sbt[i]
 * is the id of block b0 + i): the same bytes into the same shared rows,
 * one commit group, with the row addresses from shifts instead of a
 * division and a bounds branch a row. A thread copies its 16-byte part of
 * NR consecutive rows (r0 x NR ..); where those keys share a cache block
 * (blocks of NR keys or more, kt a multiple of NR) it reads that block's id
 * once and steps a row's stride from one row to the next. Row r is key
 * kt + r of kv head offset hoff; rows at k1 or past are zeros. */
template <typename T, int DH, int BN, int THREADS, int LD>
__device__ __forceinline__ void cp_async_kv_tile_pow2(T *ks, T *vs, const T *kc, const T *vc, int32_t kt, int32_t k1,
                                                      const int32_t *sbt, int32_t b0, int sh, int32_t kvrow,
                                                      int32_t hoff)
{
    constexpr int CPR = DH / 8, RPP = THREADS / CPR, NR = BN / RPP;
    static_assert(THREADS % CPR == 0 && BN % RPP == 0 && (NR & (NR - 1)) == 0, "whole passes of rows");
    const int part = threadIdx.x % CPR, r0 = (threadIdx.x / CPR) * NR;
    const int32_t mask = (1 << sh) - 1, off = hoff + part * 8, j0 = kt + r0;
    const uint32_t ks0 = (uint32_t)__cvta_generic_to_shared(&ks[r0 * LD + part * 8]);
    const uint32_t vs0 = (uint32_t)__cvta_generic_to_shared(&vs[r0 * LD + part * 8]);
    constexpr uint32_t DROW = LD * (uint32_t)sizeof(T);
    if ((1 << sh) >= NR && (kt & (NR - 1)) == 0) {
        const int32_t blk = j0 < k1 ? sbt[(j0 >> sh) - b0] : 0;
        const T *kp = kc + ((int64_t)((blk << sh) | (j0 & mask)) * kvrow + off);
        const T *vp = vc + (kp - kc);
#pragma unroll
        for (int i = 0; i < NR; i++) {
            const int bytes = j0 + i < k1 ? 16 : 0;
            cp_async16_sh_n(ks0 + i * DROW, kp, bytes);
            cp_async16_sh_n(vs0 + i * DROW, vp, bytes);
            kp += kvrow;
            vp += kvrow;
        }
    } else {
#pragma unroll
        for (int i = 0; i < NR; i++) {
            const int32_t j = j0 + i;
            const bool live = j < k1;
            const int32_t blk = live ? sbt[(j >> sh) - b0] : 0;
            const int64_t at = (int64_t)((blk << sh) | (j & mask)) * kvrow + off;
            const int bytes = live ? 16 : 0;
            cp_async16_sh_n(ks0 + i * DROW, kc + at, bytes);
            cp_async16_sh_n(vs0 + i * DROW, vc + at, bytes);
        }
    }
    cp_async_commit();
}

/* Waits until at most one committed group is still in flight. */
__device__ __forceinline__ void cp_async_wait_1()
{
    asm volatile("cp.async.wait_group 1;\n" ::);
}

/* Waits until at most N committed groups are still in flight. */
template <int N> __device__ __forceinline__ void cp_async_wait()
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

/* Raises a kernel's dynamic shared memory limit past the default 48 KB,
 * once per device (the attribute is the device's): at the kernel's first
 * launch on it, a warm-up before any capture as for every op. */
template <typename K> cudaError_t smem_opt_in(K *kernel, size_t bytes, std::atomic<unsigned long long> &done)
{
    int dev = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e != cudaSuccess)
        return e;
    unsigned long long bit = dev >= 0 && dev < 64 ? 1ull << dev : 0;
    if (bit && (done.load(std::memory_order_acquire) & bit))
        return cudaSuccess;
    e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
    if (e == cudaSuccess)
        done.fetch_or(bit, std::memory_order_acq_rel);
    return e;
}

/* Blocks of a kernel an SM holds, from the occupancy calculator once per
 * memo (a property of the binary and the device, so every launch of a
 * process decides alike: replay == eager; a process's devices are taken to
 * be of one kind), after opt_in() (the kernel's shared-memory opt-in); 0
 * where either fails, the failed query cleared (not sticky) so the caller's
 * fallback is taken. */
template <typename K, typename F>
int blocks_per_sm_once(std::atomic<int> &memo, K *kernel, int threads, size_t smem, F opt_in)
{
    int v = memo.load(std::memory_order_relaxed);
    if (v >= 0)
        return v;
    int n = 0;
    if (opt_in() != cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, threads, smem) != cudaSuccess) {
        (void)cudaGetLastError();
        n = 0;
    }
    memo.store(n, std::memory_order_relaxed);
    return n;
}

} /* namespace reel_cu */

#endif
