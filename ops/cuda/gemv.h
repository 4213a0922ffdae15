/* Internal to ops/cuda (and bench/gemv.cu): the skinny-matmul kernel's
 * launch configuration and a direct entry point, so the benchmark can time
 * configurations other than the one the impl picks. */
#ifndef REEL_OPS_CUDA_GEMV_H
#define REEL_OPS_CUDA_GEMV_H

#include <cuda_runtime.h>
#include <stdbool.h>
#include <stdint.h>

#include "reel/reel.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Rows of x (M) the kernel takes for [N, K] weights (w_transposed) and for
 * [K, N]; more go to cuBLASLt. */
#define REEL_GEMV_MAX_M 32
#define REEL_GEMV_MAX_M_KN 16

/* The impl's launches: a weight of more than REEL_GEMV_LARGE_MI Mi elements
 * runs on the kernel at up to REEL_GEMV_LARGE_ROWS rows, on cuBLASLt beyond
 * (ops/cuda/gemv.cu says why); -D either for bench/gpu.sh ab. */
#ifndef REEL_GEMV_LARGE_MI
#define REEL_GEMV_LARGE_MI 8
#endif
#ifndef REEL_GEMV_LARGE_ROWS
#define REEL_GEMV_LARGE_ROWS 16
#endif

/* warps: per block, splitting the block's share of K (1 to 16 for [N, K]
 * weights, 1 to 8 for [K, N]); splits: blocks of one thread-block cluster
 * splitting K (1, 2, 4 or 8); unroll: stages of each warp's register
 * pipeline over its chunks of K (2 to 4: 1 to 3 chunks of loads in flight
 * while one is multiplied). */
typedef struct reel_gemv_cfg {
    int warps, splits, unroll;
} reel_gemv_cfg;

/* The configuration the impl uses for an N x K weight on sms multiprocessors
 * (independent of M, so a row's result never depends on the batch). */
reel_gemv_cfg reel_cuda_gemv_pick(int64_t n, int64_t k, bool w_transposed, int sms);

/* y[m, n] = sum_k x[m, k] w[n, k] (w_transposed) or x[m, k] w[k, n], f16 or
 * bf16, 1 <= m <= REEL_GEMV_MAX_M (REEL_GEMV_MAX_M_KN for [K, N]); x, w, y 16-byte aligned, k a multiple of
 * 8, and n a multiple of 8 when !w_transposed. Returns the launch's error. */
cudaError_t reel_cuda_gemv_run(reel_dtype dt, bool w_transposed, const void *x, const void *w, void *y, int m,
                               int n, int k, reel_gemv_cfg cfg, cudaStream_t st, bool pdl);

#ifdef __cplusplus
}
#endif

#endif
