/* Internal to graph/: helpers shared by the builder's files. */
#ifndef REEL_GRAPH_BUILDER_H
#define REEL_GRAPH_BUILDER_H

#include "core/opts.h"
#include "graph/ir.h"

/* Records a builder error: the first one becomes the graph's sticky error
 * (status and message); every one becomes the context's last error. */
reel_status reel_graph_fail(reel_graph *g, reel_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Loads the caller's struct src (core/opts.h's head rule) into dst, which
 * holds the defaults; a refusal is recorded as "what: why". */
reel_status reel_graph_load_struct(reel_graph *g, void *dst, const void *src, const reel_struct_kind *k,
                                   const char *what);

/* True when id names a tensor of g. */
bool reel_graph_has(const reel_graph *g, uint32_t id);

/* Makes room for `tensors` more tensors and `nodes` more nodes, so that the
 * additions that follow cannot fail halfway. REEL_E_OOM (unrecorded) else. */
reel_status reel_graph_reserve(reel_graph *g, int tensors, int nodes);

/* Appends a tensor (room reserved) and returns its id. */
uint32_t reel_graph_push_tensor(reel_graph *g, const char *name, reel_tensor_kind kind, const reel_shape *shape);

/* Adds a node of kind op over inputs in (graph/builder_ops.c): operand
 * checks, the schema's inference, the node and its outputs (written to
 * outs, which has room for the schema's nout). */
reel_status reel_graph_add_op(reel_graph *g, reel_op_kind op, const uint32_t *in, uint32_t optional,
                              const reel_op_attrs *a, reel_tensor *outs);

/* Paged attention over in[0..5] (q, k, v, k_cache, v_cache, and kv_slots
 * or 0) with a layout across ranks (NULL: none; ops/op.h), the scale
 * resolved; *lse (may be NULL) gets the lse output where the layout asks
 * for one. The public reel_paged_attention is this without a layout. */
reel_tensor reel_graph_paged_attention(reel_graph *g, const uint32_t *in, const reel_attn_params *p,
                                       const reel_attn_layout *lay, reel_tensor *lse);
/* MLA over in[0..4] (q_lat, q, c, k_pe, cache) with a layout across ranks
 * (NULL: none; cp must be 0), *lse as reel_graph_paged_attention's. The
 * public reel_mla_attention is this without a layout. */
reel_tensor reel_graph_mla_attention(reel_graph *g, const uint32_t *in, const reel_mla_params *p,
                                     const reel_attn_layout *lay, reel_tensor *lse);
/* The step's slot mapping as a tensor [T, 1] int32 (META, the static
 * region's copy: -1 past the step's tokens), for CP's gather of the slots.
 * One per graph; its name "slot_mapping" is taken like "positions". */
reel_tensor reel_graph_slot_mapping(reel_graph *g);
/* lse_combine of packed partials ([T, P, H*Dh + H] float32, ops/op.h) into
 * out (out_dtype) and lse. */
reel_status reel_graph_lse_combine_packed(reel_graph *g, reel_tensor packed, int num_heads, reel_dtype out_dtype,
                                          reel_tensor *out, reel_tensor *lse);

/* "input", "parameter", "state", "positions", "activation". */
const char *reel_tensor_kind_name(reel_tensor_kind k);

#endif
