/* Internal (L1): CUDA backend specifics used by the CUDA kernels (ops/cuda)
 * and the gpu tests. Included from C and from CUDA C++. */
#ifndef REEL_BACKEND_CUDA_H
#define REEL_BACKEND_CUDA_H

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "backend/backend.h"
#include "core/err.h"

/* Turn a CUDA runtime / cuBLAS result into a status. On failure they record
 * "file:line: call: NAME: library message" into err, clear the runtime's
 * non-sticky last error, and return REEL_E_OOM for allocation failures,
 * REEL_E_BACKEND otherwise. Use them through REEL_CUDA_CHECK. */
reel_status reel_cuda_status(reel_err *err, cudaError_t e, const char *file, int line, const char *call);
reel_status reel_cublas_status(reel_err *err, cublasStatus_t e, const char *file, int line, const char *call);

/* The stream's CUDA handle (non-blocking stream). */
cudaStream_t reel_cuda_stream_handle(reel_stream *s);
/* The context's cuBLAS handle, bound to the stream and to the stream's
 * workspace. On success the backend's cuBLAS lock is held: issue the calls,
 * then reel_cuda_blas_end; on failure nothing is held. The handle and the
 * workspace are created at their first use, which the plan's warm-up makes
 * outside any capture; a first use inside a capture is refused
 * (REEL_E_BACKEND), never allocated there. */
reel_status reel_cuda_blas_begin(reel_backend *be, reel_stream *s, cublasHandle_t *h);
void reel_cuda_blas_end(reel_backend *be);
/* The stream's matmul workspace (cuBLASLt and cuBLAS), one per stream so
 * that matmuls on concurrent streams never share scratch bytes; allocated at
 * the stream's first matmul (a plan with no cuBLAS node has none), at the
 * size reserved for it (stream_reserve_ws) or the full size, which never
 * changes (the algorithms chosen depend on it). */
reel_status reel_cuda_stream_workspace(reel_backend *be, reel_stream *s, void **ws, size_t *bytes);
/* The matmul workspace of classic cuBLAS launches of m rows on this
 * device: 4 MiB to 64 rows (a decode's GEMMs), the full size beyond (32 MiB
 * on Hopper, cuBLASLt's recommendation; 4 MiB before). cuBLASLt launches
 * take what their algorithm asks for (ops/cuda/matmul.cu); a plan reserves
 * each stream's most (reel_op_impl.stream_ws), at least REEL_CUDA_WS_MIN; a
 * stream no plan reserved takes the full size, reel_cuda_matmul_ws_bytes(caps,
 * INT64_MAX). */
#define REEL_CUDA_WS_MIN ((size_t)1 << 20)
size_t reel_cuda_matmul_ws_bytes(const reel_device_caps *caps, int64_t m);
/* Counts a matmul shape whose algorithm a warm-up chose by timing
 * (reel_ctx_opts.matmul_tuning); the count, for tests. */
void reel_cuda_lt_tuned(reel_backend *be);
int reel_cuda_lt_tuned_count(reel_backend *be);
/* The backend's cuBLASLt handle (stateless apart from the device; the stream
 * is passed per call). */
cublasLtHandle_t reel_cuda_lt_handle(reel_backend *be);
/* Makes the backend's device current for the calling thread. */
reel_status reel_cuda_use_device(reel_backend *be);

/* A small per-backend memo (thread-safe) for results worth computing once per
 * shape, such as cuBLASLt heuristics: keys and values are plain bytes.
 * get returns true and copies the value when the key is present; put keeps
 * at most REEL_CUDA_MEMO_SLOTS entries (later puts are dropped: callers then
 * recompute, which stays correct). */
#define REEL_CUDA_MEMO_SLOTS 256
#define REEL_CUDA_MEMO_KEY_MAX 64
#define REEL_CUDA_MEMO_VAL_MAX 128
bool reel_cuda_memo_get(reel_backend *be, const void *key, size_t klen, void *val, size_t vlen);
void reel_cuda_memo_put(reel_backend *be, const void *key, size_t klen, const void *val, size_t vlen);

/* Capability probe helper (backend/cuda/probe.cu): the largest number of
 * 2-block clusters of a small kernel that can be co-resident, through
 * cudaOccupancyMaxActiveClusters; 0 below compute capability 9.0. */
cudaError_t reel_cuda_probe_clusters(int cc_major, int *out);

#ifdef __cplusplus
} /* extern "C" */

/* One macro for every CUDA and cuBLAS call: overloads pick the library. */
static inline reel_status reel_cuda_check_(reel_err *err, cudaError_t e, const char *f, int l, const char *s)
{
    return e == cudaSuccess ? REEL_OK : reel_cuda_status(err, e, f, l, s);
}
static inline reel_status reel_cuda_check_(reel_err *err, cublasStatus_t e, const char *f, int l, const char *s)
{
    return e == CUBLAS_STATUS_SUCCESS ? REEL_OK : reel_cublas_status(err, e, f, l, s);
}
#define REEL_CUDA_CHECK(err, call) reel_cuda_check_((err), (call), __FILE__, __LINE__, #call)
#else
/* The controlling expression of _Generic is not evaluated: `call` runs once. */
#define REEL_CUDA_CHECK(err, call)                                                           \
    _Generic((call), cudaError_t: reel_cuda_status, cublasStatus_t: reel_cublas_status)( \
        (err), (call), __FILE__, __LINE__, #call)
#endif

#endif
