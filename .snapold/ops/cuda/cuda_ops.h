/* Internal (L2): the CUDA backend's kernels, as an impl table for the
 * registry (ops/registry.c picks from it when reel is built with CUDA).
 * Every op of ops/op.h has a CUDA impl with the host reference kernel's
 * semantics (ops/host); launches take device pointers and run on the
 * launch's stream (backend/cuda/cuda.h). Every impl is capturable and
 * honours the fixed-context limits of its metadata. */
#ifndef REEL_OPS_CUDA_CUDA_OPS_H
#define REEL_OPS_CUDA_CUDA_OPS_H

#ifdef __cplusplus
extern "C" {
#endif

#include "ops/op.h"

/* Largest k of the CUDA top-k (its selection is sorted in shared memory). */
#define REEL_CUDA_TOPK_MAX_K 4096
/* Largest head_dim of the CUDA paged attention (accumulators in shared memory). */
#define REEL_CUDA_ATTN_MAX_HEAD_DIM 2048

extern const reel_op_impl *const reel_cuda_impls[];
extern const int reel_cuda_nimpls;

#ifdef __cplusplus
}
#endif

#endif
