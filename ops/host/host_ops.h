/* Internal (L2): the host backend's kernels and their impl table.
 *
 * Each kernel is a reel_host_fn: args points to a reel_launch (the executor
 * passes the launch itself through reel_host_launch, which copies those
 * bytes). The launch's attrs, in_shape, out_shape and meta pointers, and the
 * data they point to, must stay valid until the kernel has run, which for a
 * captured graph means for as long as the graph may be replayed. The token
 * count is l->rows (a token tensor's dims[0] is symbolic). Kernels are
 * single-threaded with a fixed reduction order, so the same inputs give
 * bitwise the same outputs; they store f32, f16 or bf16 and compute in
 * float32. An elementwise-shaped op may run with out[0] == in[0]. */
#ifndef REEL_OPS_HOST_HOST_OPS_H
#define REEL_OPS_HOST_HOST_OPS_H

#include "ops/op.h"

void reel_host_embedding(const void *args);
void reel_host_matmul(const void *args);
/* Same result as reel_host_matmul, bit for bit (same reduction order per
 * element), but tiled: each weight element is converted once per 4 rows. */
void reel_host_matmul_tiled(const void *args);
void reel_host_add(const void *args);
void reel_host_mul(const void *args);
void reel_host_rmsnorm(const void *args);
void reel_host_silu_and_mul(const void *args);
void reel_host_rope(const void *args);
void reel_host_softmax(const void *args);
void reel_host_argmax(const void *args);
void reel_host_add_rmsnorm(const void *args);
void reel_host_view_cols(const void *args);
/* Writes the step's k/v into k_cache/v_cache (in[3], in[4]) then attends;
 * reads l->meta. */
void reel_host_paged_attention(const void *args);
void reel_host_topk(const void *args);
void reel_host_lse_combine(const void *args);
void reel_host_lse_rescale(const void *args);
void reel_host_lse_pack(const void *args);
/* The models layer's ops (rope_freq.c, head_norm.c). */
void reel_host_rope_freq(const void *args);
void reel_host_rmsnorm_heads(const void *args);
/* Sampling (sample.c): the next token of each row, ops/sample.h's rules. */
void reel_host_sample(const void *args);
/* Mixture of experts (moe.c): routing by ops/moe.h's rules, the sort of
 * the pairs by expert, and the experts' SwiGLU MLP over the sorted rows. */
void reel_host_moe_route(const void *args);
void reel_host_moe_align(const void *args);
void reel_host_moe_gate_up(const void *args);
void reel_host_moe_down(const void *args);
void reel_host_moe_combine(const void *args);
void reel_host_head_matmul(const void *args);
void reel_host_mla_attention(const void *args);
/* Collectives (ops/host/collectives.c): the decomposition of
 * ops/collective.c with the host chunk transpose; they issue the host
 * communicator's kernels. */
reel_status reel_host_transpose(reel_backend *be, reel_stream *s, const void *src, void *dst, int64_t A, int64_t B,
                                size_t chunk);
reel_status reel_host_collective_launch(reel_backend *be, const reel_launch *l);

/* Every host impl, highest priority first within an op; the last impl of
 * each op kind is its reference ("host.<op>.ref", priority 0). */
extern const reel_op_impl *const reel_host_impls[];
extern const int reel_host_nimpls;

#endif
