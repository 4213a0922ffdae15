/* Internal (L2): helpers shared by the CUDA kernels. Kernels store f32, f16
 * or bf16 and compute in float32, like the host reference kernels
 * (ops/host); every op's float operands share one dtype (ops/schema.c), so
 * each kernel is a template over that storage type. */
#ifndef REEL_OPS_CUDA_COMMON_CUH
#define REEL_OPS_CUDA_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "ops/cuda/cuda_ops.h"
#include "backend/cuda/cuda.h"

namespace reel_cu {

__device__ __forceinline__ float to_f(float v) { return v; }
__device__ __forceinline__ float to_f(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f(__nv_bfloat16 v) { return __bfloat162float(v); }

/* Round to nearest even, as the host's conversions do. */
template <typename T> __device__ __forceinline__ T from_f(float v);
template <> __device__ __forceinline__ float from_f<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_f<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float v)
{
    return __float2bfloat16_rn(v);
}

/* 16 bytes of T: the unit of vectorized loads and stores. */
template <typename T> struct alignas(16) pack {
    static constexpr int n = 16 / sizeof(T);
    T v[n];
};

__host__ __device__ __forceinline__ bool aligned16(const void *p)
{
    return ((uintptr_t)p & 15u) == 0;
}

/* Sets *err_word to code unless a kernel already reported (first wins). */
__device__ __forceinline__ void report(const reel_meta_view *m, int32_t code)
{
    if (m && m->err_word)
        atomicCAS((int *)m->err_word, 0, (int)code);
}

__device__ __forceinline__ float warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Block-wide sum or max of v, returned to every thread (blockDim.x a
 * multiple of 32, at most 1024). Fixed shape, so fixed order: the same
 * launch gives the same bits. */
template <bool MAX> __device__ float block_reduce(float v)
{
    __shared__ float part[32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = MAX ? warp_max(v) : warp_sum(v);
    __syncthreads(); /* part may still be read by a previous call */
    if (lane == 0)
        part[warp] = v;
    __syncthreads();
    v = lane < nw ? part[lane] : (MAX ? -INFINITY : 0.0f);
    return MAX ? warp_max(v) : warp_sum(v);
}

/* Elements of one leading row and the leading extent in this launch: the
 * launch view of core/shape.h, the host kernels' too. */
__host__ __forceinline__ int64_t row_numel(const reel_shape *s) { return reel_shape_inner(s); }
__host__ __forceinline__ int64_t lead(const reel_shape *s, int64_t rows) { return reel_shape_lead(s, rows); }
__host__ __forceinline__ int64_t last_dim(const reel_shape *s) { return reel_shape_last(s); }

/* Threads for a block that walks a row of n elements: a multiple of 32
 * from 32 to max_threads. */
__host__ __forceinline__ int row_threads(int64_t n, int max_threads)
{
    int t = 32;
    while (t < max_threads && t < n)
        t *= 2;
    return t;
}

/* Blocks for a grid-stride loop over n items with `threads` per block. */
__host__ __forceinline__ unsigned grid_for(int64_t n, int threads)
{
    int64_t b = (n + threads - 1) / threads;
    if (b > 65535LL * 16)
        b = 65535LL * 16;
    return (unsigned)(b > 0 ? b : 1);
}

/* Programmatic dependent launch. A kernel launched with it may start before
 * its same-stream predecessor ends, so pdl_start waits for that grid
 * (griddepcontrol.wait: the predecessor has completed and its writes are
 * visible) before the kernel touches memory; the wait is skipped (a uniform
 * branch on a kernel argument) for a launch without the attribute.
 *
 * Then it lets this kernel's own successor launch at once, not after the
 * last store: the trigger only lets a dependent grid be scheduled, and a
 * dependent grid launched with the attribute waits in its own pdl_start for
 * this grid's completion and memory flush, so triggering before our stores
 * is safe and hides the successor's launch latency behind our work. A
 * successor launched without the attribute ignores the trigger (it starts
 * after our completion), so the trigger is issued on every launch; it costs
 * nothing measurable (bench/chain.cu, "add1 + gdc insns"). Call it first in
 * every kernel, before any load or store, except loads of a parameter
 * (reel_launch.in_param: no kernel writes it), which may come before it. */
__device__ __forceinline__ void pdl_start(bool pdl)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (pdl)
        cudaGridDependencySynchronize();
    cudaTriggerProgrammaticLaunchCompletion();
#endif
}

/* Up to this many elements an elementwise kernel runs one element per
 * thread with 32-bit indices and no loop: every element has a thread in the
 * first (and only) wave of 256-thread blocks on the device (2048 resident
 * threads per SM), and more, smaller blocks reach the tensor sooner than
 * fewer blocks of 16-byte packs (bench/chain.cu, diagnostic rows). Larger
 * tensors take the vectorized grid-stride kernels, whose wider loads pay once
 * there is more than one wave of work. */
__host__ __forceinline__ int64_t small_numel(const reel_backend *be)
{
    int64_t sms = be->caps.sm_count > 0 ? be->caps.sm_count : 16;
    return sms < 4096 ? sms * 2048 : 4096LL * 2048; /* well inside 32 bits */
}

/* Launches kernel(args..., pdl), with the programmatic-stream-serialization
 * attribute when pdl: the kernel's last parameter is that flag, and it
 * calls pdl_start(pdl) before touching memory. */
template <typename... KArgs, typename... Args>
cudaError_t launch(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t st, bool pdl,
                   Args... args)
{
    if (!pdl) {
        kernel<<<grid, block, smem, st>>>(args..., false);
        return cudaSuccess; /* a failed launch shows in cudaGetLastError */
    }
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = st;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    return cudaLaunchKernelEx(&cfg, kernel, args..., true);
}

/* Prefixes the context's message with what (the impl and its shapes) when
 * st is an error; returns st. */
reel_status name_err(reel_backend *be, reel_status st, const char *what);
/* Checks the launch that was just issued (e: what the launch call
 * returned, or cudaSuccess); on failure names the impl. */
reel_status launched(reel_backend *be, const char *impl, cudaError_t e, const char *file, int line);
#define REEL_CU_LAUNCHED(be, impl) reel_cu::launched((be), (impl), cudaSuccess, __FILE__, __LINE__)
#define REEL_CU_LAUNCHED_E(be, impl, e) reel_cu::launched((be), (impl), (e), __FILE__, __LINE__)

/* All float operands of a node have one dtype (the schema says so); the
 * predicates check it anyway, so a kernel never sees a mix. */
bool same_float_dtype(const reel_shape *in, int nin, const reel_shape *out, int nout);

} /* namespace reel_cu */

/* Runs BODY with T bound to the storage type of dtype dt (f32, f16, bf16). */
#define REEL_CU_DISPATCH(dt, BODY)                       \
    switch (dt) {                                        \
    case REEL_F16: {                                     \
        using T = __half;                                \
        BODY;                                            \
    } break;                                             \
    case REEL_BF16: {                                    \
        using T = __nv_bfloat16;                         \
        BODY;                                            \
    } break;                                             \
    default: {                                           \
        using T = float;                                 \
        BODY;                                            \
    } break;                                             \
    }

#define REEL_CU_USE_ARGS                                                              \
    const reel_shape *in, int nin, const reel_shape *out, const reel_op_attrs *a, \
        const reel_device_caps *caps

#endif
