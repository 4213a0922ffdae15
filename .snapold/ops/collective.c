/* Collective ops on any backend: the one decomposition of an op with an
 * axis into the communicator's flat, rank-major calls (backend/comm.h),
 * with the backend's chunk transpose where the axis is not the outermost
 * dim. x is viewed as [lead][chunks][chunk]: lead is the product of the dims
 * before the axis (the launch's rows for the token dim), `chunk` the
 * elements of one rank's piece from the axis on.
 *   all_gather:     flat gather into staging [n][lead][chunk], transposed
 *                   into out [lead][n][chunk];
 *   reduce_scatter: x [lead][n][chunk] transposed into staging
 *                   [n][lead][chunk], flat reduce-scatter into out;
 *   all_to_all:     x transposed into staging, flat all-to-all into out
 *                   ([n][lead][chunk] by source rank), transposed back into
 *                   staging, copied into out.
 * With lead 1 the flat call works on x and out directly. An empty tensor
 * is skipped (on every rank alike: the shapes are the same). */
#include "ops/op.h"

static int64_t lead_of(const reel_shape *s, int axis, int64_t rows)
{
    int64_t lead = 1;
    for (int i = 0; i < axis; i++)
        lead *= (i == 0 && s->tokens) ? rows : s->dims[i];
    return lead;
}

static int64_t from_axis(const reel_shape *s, int axis)
{
    int64_t n = 1;
    for (int i = axis; i < s->ndim; i++)
        n *= s->dims[i];
    return n;
}

reel_status reel_coll_launch(reel_backend *be, const reel_launch *l, reel_transpose_fn transpose)
{
    reel_comm *c = l->comm;
    const reel_shape *x = &l->in_shape[0];
    const reel_op_attrs *a = l->attrs;
    reel_stream *s = l->stream;
    if (!c)
        return reel_seterr(be->err, REEL_E_INVALID_USAGE, "collective launched without a communicator");
    reel_dtype dt = l->op == REEL_OP_RECV ? a->coll.shape.dtype : x->dtype;
    size_t elem = reel_dtype_size(dt);
    switch (l->op) {
    case REEL_OP_ALL_REDUCE: {
        size_t count = (size_t)reel_shape_numel(x, l->rows);
        return count ? c->vt->all_reduce(c, s, l->in[0], l->out[0], count, dt, REEL_REDOP_SUM) : REEL_OK;
    }
    case REEL_OP_SEND: {
        size_t count = (size_t)reel_shape_numel(x, l->rows);
        return count ? c->vt->send(c, s, l->in[0], count, dt, a->coll.peer) : REEL_OK;
    }
    case REEL_OP_RECV: {
        size_t count = (size_t)reel_shape_numel(&l->out_shape[0], l->rows);
        return count ? c->vt->recv(c, s, l->out[0], count, dt, a->coll.peer) : REEL_OK;
    }
    default: break;
    }
    int n = c->nranks, ax = a->coll.axis;
    int64_t lead = lead_of(x, ax, l->rows);
    /* Elements of one rank's chunk: gather grows the axis, the others cut it. */
    int64_t chunk = from_axis(x, ax);
    if (l->op != REEL_OP_ALL_GATHER)
        chunk /= n;
    size_t count = (size_t)(lead * chunk), cb = (size_t)chunk * elem;
    void *stage = l->out[1];
    if (count == 0)
        return REEL_OK;
    switch (l->op) {
    case REEL_OP_ALL_GATHER:
        if (lead == 1)
            return c->vt->all_gather(c, s, l->in[0], l->out[0], count, dt);
        REEL_TRY(c->vt->all_gather(c, s, l->in[0], stage, count, dt));
        return transpose(be, s, stage, l->out[0], n, lead, cb);
    case REEL_OP_REDUCE_SCATTER:
        if (lead == 1)
            return c->vt->reduce_scatter(c, s, l->in[0], l->out[0], count, dt, REEL_REDOP_SUM);
        REEL_TRY(transpose(be, s, l->in[0], stage, lead, n, cb));
        return c->vt->reduce_scatter(c, s, stage, l->out[0], count, dt, REEL_REDOP_SUM);
    case REEL_OP_ALL_TO_ALL:
        if (lead == 1)
            return c->vt->all_to_all(c, s, l->in[0], l->out[0], count, dt);
        REEL_TRY(transpose(be, s, l->in[0], stage, lead, n, cb));
        REEL_TRY(c->vt->all_to_all(c, s, stage, l->out[0], count, dt));
        REEL_TRY(transpose(be, s, l->out[0], stage, n, lead, cb));
        return be->vt->copy(be, s, l->out[0], stage, count * (size_t)n * elem, REEL_COPY_D2D);
    default:
        return reel_seterr(be->err, REEL_E_INTERNAL, "reel_coll_launch: op %d is not a collective", (int)l->op);
    }
}
