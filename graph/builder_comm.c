/* Builders of the collective ops (include/reel/comm.h): nodes like any
 * other op; the communicator is bound at compile. */
#include <string.h>

#include "graph/builder.h"

static reel_tensor coll(reel_graph *g, reel_op_kind op, reel_tensor x, int axis, int nranks)
{
    reel_tensor res[REEL_OP_MAX_OUT] = { { 0 } };
    if (!g)
        return res[0];
    reel_op_attrs a;
    memset(&a, 0, sizeof a);
    a.coll.axis = axis;
    a.coll.nranks = nranks;
    uint32_t in[REEL_OP_MAX_IN] = { x.id };
    reel_graph_add_op(g, op, in, 0, &a, res);
    return res[0]; /* the second output, where there is one, is the op's staging */
}

reel_tensor reel_all_reduce(reel_graph *g, reel_tensor x) { return coll(g, REEL_OP_ALL_REDUCE, x, 0, 0); }

reel_tensor reel_all_gather(reel_graph *g, reel_tensor x, int axis, int nranks)
{
    return coll(g, REEL_OP_ALL_GATHER, x, axis, nranks);
}

reel_tensor reel_reduce_scatter(reel_graph *g, reel_tensor x, int axis, int nranks)
{
    return coll(g, REEL_OP_REDUCE_SCATTER, x, axis, nranks);
}

reel_tensor reel_all_to_all(reel_graph *g, reel_tensor x, int axis, int nranks)
{
    return coll(g, REEL_OP_ALL_TO_ALL, x, axis, nranks);
}

reel_status reel_send(reel_graph *g, reel_tensor x, int peer)
{
    if (!g)
        return reel_seterr(NULL, REEL_E_INVALID_ARG, "reel_send: NULL graph");
    reel_tensor res[REEL_OP_MAX_OUT] = { { 0 } };
    reel_op_attrs a;
    memset(&a, 0, sizeof a);
    a.coll.peer = peer;
    uint32_t in[REEL_OP_MAX_IN] = { x.id };
    return reel_graph_add_op(g, REEL_OP_SEND, in, 0, &a, res);
}

reel_tensor reel_recv(reel_graph *g, const char *name, reel_dtype dt, int ndim, const int64_t *dims, int peer)
{
    reel_tensor res[REEL_OP_MAX_OUT] = { { 0 } };
    if (!g)
        return res[0];
    if (!dims || ndim < 1 || ndim > REEL_MAX_DIMS) {
        reel_graph_fail(g, REEL_E_INVALID_ARG, "op 'recv' (node %d): ndim %d outside 1..%d, or dims NULL", g->nnodes,
                        ndim, REEL_MAX_DIMS);
        return res[0];
    }
    reel_op_attrs a;
    memset(&a, 0, sizeof a);
    a.coll.peer = peer;
    a.coll.shape.dtype = dt;
    a.coll.shape.ndim = ndim;
    a.coll.shape.tokens = dims[0] == REEL_DIM_TOKENS;
    for (int i = 0; i < ndim; i++)
        a.coll.shape.dims[i] = dims[i];
    uint32_t in[REEL_OP_MAX_IN] = { 0 };
    if (reel_graph_add_op(g, REEL_OP_RECV, in, 0, &a, res) != REEL_OK)
        return res[0];
    if (name && reel_set_name(g, res[0], name) != REEL_OK)
        return (reel_tensor){ 0 };
    return res[0];
}
