/* The CUDA backend's impl table, read by the registry. */
#include "ops/cuda/impls.h"

extern "C" const reel_op_impl *const reel_cuda_impls[] = {
    &reel_cu_embedding_impl, &reel_cu_matmul_gemv_impl, &reel_cu_matmul_lt_impl, &reel_cu_matmul_sgemm_impl,
    &reel_cu_add_impl, &reel_cu_mul_impl, &reel_cu_silu_and_mul_impl,
    &reel_cu_rmsnorm_impl, &reel_cu_softmax_impl, &reel_cu_argmax_impl,
    &reel_cu_rope_impl, &reel_cu_paged_attention_impl, &reel_cu_paged_attention_ref_impl,
    &reel_cu_topk_impl,
    &reel_cu_lse_combine_impl, &reel_cu_lse_rescale_impl, &reel_cu_lse_pack_impl,
    &reel_cu_all_reduce_impl, &reel_cu_all_gather_impl, &reel_cu_reduce_scatter_impl, &reel_cu_all_to_all_impl,
    &reel_cu_send_impl, &reel_cu_recv_impl, &reel_cu_add_rmsnorm_impl, &reel_cu_view_cols_impl,
    &reel_cu_rope_freq_impl, &reel_cu_rmsnorm_heads_impl,
    &reel_cu_sample_impl,
    &reel_cu_moe_route_impl, &reel_cu_moe_align_impl, &reel_cu_moe_gate_up_impl, &reel_cu_moe_down_impl,
    &reel_cu_moe_combine_impl,
};
extern "C" const int reel_cuda_nimpls = (int)(sizeof reel_cuda_impls / sizeof reel_cuda_impls[0]);
