/* Internal to ops/cuda: each kernel file's impls, gathered by impls.cu. */
#ifndef REEL_OPS_CUDA_IMPLS_H
#define REEL_OPS_CUDA_IMPLS_H

#include "ops/cuda/cuda_ops.h"

#ifdef __cplusplus
extern "C" {
#endif

extern const reel_op_impl reel_cu_embedding_impl;
extern const reel_op_impl reel_cu_matmul_lt_impl;
extern const reel_op_impl reel_cu_matmul_sgemm_impl;
extern const reel_op_impl reel_cu_add_impl;
extern const reel_op_impl reel_cu_mul_impl;
extern const reel_op_impl reel_cu_silu_and_mul_impl;
extern const reel_op_impl reel_cu_rmsnorm_impl;
extern const reel_op_impl reel_cu_softmax_impl;
extern const reel_op_impl reel_cu_argmax_impl;
extern const reel_op_impl reel_cu_rope_impl;
extern const reel_op_impl reel_cu_paged_attention_impl;
extern const reel_op_impl reel_cu_topk_impl;
extern const reel_op_impl reel_cu_lse_combine_impl;

#ifdef __cplusplus
}
#endif

/* Defines an impl (C++17 has no designated initializers: fields in order):
 * capturable, honours the fixed-context limits, and pdl_ok as given. */
#define REEL_CU_IMPL(var, name, kind, prio, pdl_ok, use, launch_fn) \
    extern "C" const reel_op_impl var = { name, kind, REEL_BACKEND_CUDA, prio, true, true, pdl_ok, use, launch_fn }

#endif
