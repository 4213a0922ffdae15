/* Internal to graph/: helpers shared by the builder's files. */
#ifndef REEL_GRAPH_BUILDER_H
#define REEL_GRAPH_BUILDER_H

#include "graph/ir.h"

/* Records a builder error: the first one becomes the graph's sticky error
 * (status and message); every one becomes the context's last error. */
reel_status reel_graph_fail(reel_graph *g, reel_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

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

/* "input", "parameter", "state", "positions", "activation". */
const char *reel_tensor_kind_name(reel_tensor_kind k);

#endif
