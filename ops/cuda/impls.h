/* Internal to ops/cuda: each kernel file's impls, gathered by impls.cu. */
#ifndef REEL_OPS_CUDA_IMPLS_H
#define REEL_OPS_CUDA_IMPLS_H

#include "ops/cuda/cuda_ops.h"

#ifdef __cplusplus
extern "C" {
#endif

extern const reel_op_impl reel_cu_embedding_impl;
extern const reel_op_impl reel_cu_matmul_gemv_impl;
extern const reel_op_impl reel_cu_matmul_lt_impl;
extern const reel_op_impl reel_cu_matmul_sgemm_impl;
/* The cuBLASLt impl's reel_op_impl.stream_ws (ops/cuda/matmul.cu), which
 * the gemv impl's launches past its kernel take. */
reel_status reel_cu_matmul_lt_ws(reel_backend *be, const reel_shape *in, int nin, const reel_shape *out,
                                 const reel_op_attrs *a, size_t *bytes);
extern const reel_op_impl reel_cu_add_impl;
extern const reel_op_impl reel_cu_mul_impl;
extern const reel_op_impl reel_cu_silu_and_mul_impl;
extern const reel_op_impl reel_cu_rmsnorm_impl;
extern const reel_op_impl reel_cu_softmax_impl;
extern const reel_op_impl reel_cu_argmax_impl;
extern const reel_op_impl reel_cu_rope_impl;
extern const reel_op_impl reel_cu_paged_attention_impl;
extern const reel_op_impl reel_cu_paged_attention_ref_impl;
extern const reel_op_impl reel_cu_topk_impl;
extern const reel_op_impl reel_cu_lse_combine_impl;
extern const reel_op_impl reel_cu_lse_rescale_impl;
extern const reel_op_impl reel_cu_lse_pack_impl;
extern const reel_op_impl reel_cu_all_reduce_impl;
extern const reel_op_impl reel_cu_all_gather_impl;
extern const reel_op_impl reel_cu_reduce_scatter_impl;
extern const reel_op_impl reel_cu_all_to_all_impl;
extern const reel_op_impl reel_cu_send_impl;
extern const reel_op_impl reel_cu_recv_impl;
extern const reel_op_impl reel_cu_add_rmsnorm_impl;
extern const reel_op_impl reel_cu_view_cols_impl;
extern const reel_op_impl reel_cu_rope_freq_impl;
extern const reel_op_impl reel_cu_rmsnorm_heads_impl;
extern const reel_op_impl reel_cu_sample_impl;
extern const reel_op_impl reel_cu_moe_route_impl;
extern const reel_op_impl reel_cu_moe_align_impl;
extern const reel_op_impl reel_cu_moe_gate_up_impl;
extern const reel_op_impl reel_cu_moe_down_impl;
extern const reel_op_impl reel_cu_moe_combine_impl;

/* Whether a paged-attention launch of `rows` tokens (h heads, hkv kv heads
 * of head dim dh, dtype dt) is of the size the one-kernel decode takes on
 * this device (attention.cu; the launch's layout and the plan's counters
 * decide the rest). For the tests. */
bool reel_cu_attn_one_kernel_size(const reel_backend *be, reel_dtype dt, int64_t rows, int64_t h, int64_t hkv,
                                  int64_t dh);

/* The persistent decode's grid for a two-kernel launch of `rows` decode
 * tokens (attn_decode_persist_grid: the same heads, dtype and the plan's
 * max_context), or 0 where the one-item kernel takes it. For the tests. */
int64_t reel_cu_attn_persist_grid(const reel_backend *be, reel_dtype dt, int64_t rows, int64_t h, int64_t hkv,
                                  int64_t dh, int32_t max_context);

/* The device's reel_sample_weight and reel_sample_mass (ops/sample.h) of n
 * logits x at (xmax, scale), into w and q: host arrays, copied through
 * device memory synchronously (sample.cu). For the tests, which compare
 * them with the host's bits. */
reel_status reel_cu_sample_weights(reel_backend *be, const float *x, int64_t n, float xmax, float scale, float *w,
                                   uint64_t *q);

#ifdef __cplusplus
}
#endif

#ifdef __cplusplus
#include <string.h>

namespace reel_cu {

/* An impl built field by field (C++17 has no designated initializers, and a
 * positional one breaks when op.h gains a field): capturable, honours the
 * fixed-context limits; pdl_ok and inplace_ok as given; later fields zero. */
static inline reel_op_impl make_impl(const char *name, reel_op_kind kind, int prio, bool pdl_ok, bool inplace_ok,
                                     bool (*use)(const reel_shape *, int, const reel_shape *, const reel_op_attrs *,
                                                 const reel_device_caps *),
                                     reel_status (*launch_fn)(reel_backend *, const reel_launch *))
{
    reel_op_impl i;
    memset(&i, 0, sizeof i);
    i.name = name;
    i.op = kind;
    i.backend = REEL_BACKEND_CUDA;
    i.priority = prio;
    i.capturable = true;
    i.fixed_context = true;
    i.pdl_ok = pdl_ok;
    i.inplace_ok = inplace_ok;
    i.can_use = use;
    i.launch = launch_fn;
    return i;
}

} /* namespace reel_cu */

/* Defines an impl; pdl_ok: honours reel_launch.pdl; inplace_ok: out[0] may
 * be in[0] (each output element is written by the thread that read the
 * inputs it depends on, after reading them). */
#define REEL_CU_IMPL(var, name, kind, prio, pdl_ok, inplace_ok, use, launch_fn) \
    extern "C" const reel_op_impl var = reel_cu::make_impl(name, kind, prio, pdl_ok, inplace_ok, use, launch_fn)
#endif

#endif
