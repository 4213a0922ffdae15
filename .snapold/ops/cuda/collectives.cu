/* CUDA side of the collective ops: the chunk transpose that the
 * decomposition of ops/collective.c needs around the communicator's flat
 * calls (NCCL on the launch's stream: backend/cuda/cuda_comm.c). The
 * transpose moves the widest word that divides the chunk and both
 * pointers' alignment. */
#include "ops/cuda/common.cuh"
#include "ops/cuda/impls.h"

namespace reel_cu {

/* dst[b][a] = src[a][b] over chunks of `words` units of T. */
template <typename T>
__global__ void transpose_chunks(const T *src, T *dst, int64_t A, int64_t B, int64_t words)
{
    int64_t total = A * B * words, stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; k < total; k += stride) {
        int64_t w = k % words, ab = k / words, a = ab / B, b = ab % B;
        dst[(b * A + a) * words + w] = src[k];
    }
}

template <typename T>
static reel_status transpose_as(reel_backend *be, cudaStream_t cs, const void *src, void *dst, int64_t A, int64_t B,
                                size_t chunk)
{
    int64_t words = (int64_t)(chunk / sizeof(T));
    transpose_chunks<T><<<grid_for(A * B * words, 256), 256, 0, cs>>>((const T *)src, (T *)dst, A, B, words);
    return REEL_CUDA_CHECK(be->err, cudaGetLastError());
}

static bool fits(const void *src, const void *dst, size_t chunk, size_t w)
{
    return chunk % w == 0 && ((uintptr_t)src % w) == 0 && ((uintptr_t)dst % w) == 0;
}

static reel_status transpose(reel_backend *be, reel_stream *s, const void *src, void *dst, int64_t A, int64_t B,
                             size_t chunk)
{
    cudaStream_t cs = reel_cuda_stream_handle(s);
    if (A * B == 0 || chunk == 0)
        return REEL_OK;
    if (fits(src, dst, chunk, 16))
        return transpose_as<int4>(be, cs, src, dst, A, B, chunk);
    if (fits(src, dst, chunk, 4))
        return transpose_as<uint32_t>(be, cs, src, dst, A, B, chunk);
    if (fits(src, dst, chunk, 2))
        return transpose_as<uint16_t>(be, cs, src, dst, A, B, chunk);
    return transpose_as<uint8_t>(be, cs, src, dst, A, B, chunk);
}

static reel_status coll_launch(reel_backend *be, const reel_launch *l) { return reel_coll_launch(be, l, transpose); }

/* Any dtype the schema accepts; the communicator maps it to NCCL's. */
static bool use_coll(const reel_shape *in, int nin, const reel_shape *out, const reel_op_attrs *a,
                     const reel_device_caps *caps)
{
    return true;
}

} /* namespace reel_cu */

REEL_CU_IMPL(reel_cu_all_reduce_impl, "cuda.all_reduce", REEL_OP_ALL_REDUCE, 10, false, false, reel_cu::use_coll,
             reel_cu::coll_launch);
REEL_CU_IMPL(reel_cu_all_gather_impl, "cuda.all_gather", REEL_OP_ALL_GATHER, 10, false, false, reel_cu::use_coll,
             reel_cu::coll_launch);
REEL_CU_IMPL(reel_cu_reduce_scatter_impl, "cuda.reduce_scatter", REEL_OP_REDUCE_SCATTER, 10, false, false,
             reel_cu::use_coll, reel_cu::coll_launch);
REEL_CU_IMPL(reel_cu_all_to_all_impl, "cuda.all_to_all", REEL_OP_ALL_TO_ALL, 10, false, false, reel_cu::use_coll,
             reel_cu::coll_launch);
REEL_CU_IMPL(reel_cu_send_impl, "cuda.send", REEL_OP_SEND, 10, false, false, reel_cu::use_coll, reel_cu::coll_launch);
REEL_CU_IMPL(reel_cu_recv_impl, "cuda.recv", REEL_OP_RECV, 10, false, false, reel_cu::use_coll, reel_cu::coll_launch);
