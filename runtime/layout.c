/* Layout: where every tensor of one execution lives. The planner problem of
 * one row count (activations and their accesses, in-place pairs), its
 * offsets in the arena, and the launches resolved against the memory. */
#include <string.h>

#include "core/halloc.h"
#include "runtime/plan.h"
#include "memory/pinned.h"
#include "memory/planner.h"
#include "memory/workspace.h"

/* The tensor whose buffer holds t's bytes: a view's source, or t. */
static uint32_t buf_root(const reel_plan *p, uint32_t t)
{
    return t && p->tensors[t].alias_of ? p->tensors[t].alias_of : t;
}

/* ACT tensors have a buffer of their own, except views and dead ones. */
static bool has_buffer(const reel_plan *p, int t)
{
    const reel_tinfo *ti = &p->tensors[t];
    return ti->kind == REEL_T_ACT && !ti->alias_of && !ti->dead;
}

/* The planner's buffers: one per ACT tensor (bufidx maps tensors to them,
 * -1 for the rest), with its accesses in schedule order: its producer, its
 * consumers, the sink (nnodes) for outputs. nacc: scratch of ntensors ints.
 * Returns the buffer count, -1 when out of memory. */
static int layout_buffers(reel_plan *p, int64_t rows, int *bufidx, int *nacc, reel_mem_buf *bufs, int **acc_out)
{
    /* Count accesses per ACT tensor, then lay them out. */
    int total = 0;
    for (int i = 0; i < p->nnodes; i++)
        for (int k = 0; k < p->nodes[i].nin; k++)
            nacc[buf_root(p, p->nodes[i].in[k])]++;
    for (int o = 0; o < p->noutputs; o++) /* a view read back is an access of its source */
        if (p->tensors[p->outputs[o].tensor].alias_of)
            nacc[buf_root(p, p->outputs[o].tensor)]++;
    for (int t = 1; t < p->ntensors; t++)
        if (has_buffer(p, t))
            total += ++nacc[t] + 1; /* producer, sink */
    int *acc = reel_hcalloc((size_t)total + 1, sizeof *acc);
    if (!acc)
        return -1;
    *acc_out = acc;
    int nb = 0, pos = 0;
    bufidx[0] = -1; /* the invalid tensor is no buffer */
    for (int t = 1; t < p->ntensors; t++) {
        if (!has_buffer(p, t)) {
            bufidx[t] = -1;
            continue;
        }
        bufidx[t] = nb;
        bufs[nb].size = reel_shape_bytes(&p->tensors[t].shape, rows);
        bufs[nb].acc = acc + pos;
        bufs[nb].inplace_src = -1;
        acc[pos] = p->tensors[t].producer;
        pos += nacc[t] + 1; /* producer, consumers, the sink */
        bufs[nb].nacc = 1;
        nb++;
    }
    /* A view lives in its source's buffer: its readers keep the source alive. */
    for (int t = 1; t < p->ntensors; t++)
        if (p->tensors[t].alias_of)
            bufidx[t] = bufidx[p->tensors[t].alias_of];
    for (int i = 0; i < p->nnodes; i++)
        for (int k = 0; k < p->nodes[i].nin; k++) {
            uint32_t t = p->nodes[i].in[k];
            if (t && bufidx[t] >= 0) {
                reel_mem_buf *b = &bufs[bufidx[t]];
                ((int *)b->acc)[b->nacc++] = i;
            }
        }
    for (int o = 0; o < p->noutputs; o++) {
        uint32_t t = p->outputs[o].tensor;
        if (bufidx[t] >= 0) {
            reel_mem_buf *b = &bufs[bufidx[t]];
            ((int *)b->acc)[b->nacc++] = p->nnodes;
        }
    }
    return nb;
}

/* In-place pairs: the output of a node whose kernel declares inplace_ok may
 * take the bytes of its first input when that input is an activation the
 * node reads once and is no smaller (the planner checks it dies there). */
static void layout_inplace(reel_plan *p, int64_t rows, const int *bufidx, reel_mem_buf *bufs)
{
    for (int i = 0; i < p->nnodes; i++) {
        const reel_node *n = &p->nodes[i];
        uint32_t src = n->in[0];
        bool other_use = false;
        for (int k = 1; k < n->nin; k++)
            other_use |= n->in[k] == src;
        /* Never in place over a view: the source's other views may still be read. */
        if (p->impl[i]->inplace_ok && src && bufidx[src] >= 0 && !other_use && !p->tensors[src].alias_of &&
            reel_shape_bytes(&p->tensors[n->out[0]].shape, rows) <= bufs[bufidx[src]].size)
            bufs[bufidx[n->out[0]]].inplace_src = bufidx[src];
    }
}

/* The planner problem of `rows` token rows (buffers, accesses, in-place
 * pairs, the schedule's edges), solved into L's arena offsets and bounds;
 * then L's cross-stream waits (schedule.c) with the edges the planner added. */
static reel_status layout_memplan(reel_plan *p, reel_layout *L, int64_t rows)
{
    reel_status st = REEL_E_OOM;
    int nn = p->nnodes + 1;
    int *bufidx = reel_hcalloc((size_t)p->ntensors, sizeof *bufidx);
    if (!bufidx)
        return reel_seterr(p->err, REEL_E_OOM, "compile: out of host memory planning %lld rows", (long long)rows);
    int ne = 0, *from = NULL, *to = NULL;
    if (reel_schedule_edges(p, &from, &to, &ne) != REEL_OK) {
        reel_hfree(bufidx);
        return reel_seterr(p->err, REEL_E_OOM, "compile: out of host memory planning %lld rows", (long long)rows);
    }
    int *stream = reel_hcalloc((size_t)nn, sizeof *stream);
    int *nacc = reel_hcalloc((size_t)p->ntensors, sizeof *nacc);
    int *acc = NULL;
    reel_mem_buf *bufs = reel_hcalloc((size_t)p->ntensors, sizeof *bufs);
    reel_mem_plan plan = {0};
    if (!stream || !from || !to || !bufidx || !nacc || !bufs)
        goto fail;
    for (int i = 0; i < p->nnodes; i++)
        stream[i] = p->nodes[i].stream;

    int nb = layout_buffers(p, rows, bufidx, nacc, bufs, &acc);
    if (nb < 0)
        goto fail;
    layout_inplace(p, rows, bufidx, bufs);
    reel_mem_problem prob = {
        .nnodes = nn, .stream = stream, .nedges = ne, .edge_from = from, .edge_to = to,
        .nbufs = nb, .bufs = bufs, .alignment = REEL_PLAN_ALIGN, .allow_new_edges = true,
        .exhaustive = p->dbg.planner_exhaustive,
    };
    st = reel_mem_plan_compute(&prob, &plan);
    if (st != REEL_OK) {
        reel_seterr(p->err, st, "compile: memory planner failed for %lld token rows", (long long)rows);
        goto fail;
    }
    for (int t = 1; t < p->ntensors; t++)
        if (bufidx[t] >= 0 && !p->tensors[t].alias_of)
            L->act_off[t] = plan.offsets[bufidx[t]];
    /* A view starts at its segment: rows * first column elements in. */
    for (int t = 1; t < p->ntensors; t++) {
        const reel_tinfo *ti = &p->tensors[t];
        if (ti->alias_of)
            L->act_off[t] = L->act_off[ti->alias_of] +
                            (size_t)rows * (size_t)ti->alias_col * reel_dtype_size(ti->shape.dtype);
    }
    L->arena_bytes = plan.arena;
    L->lower_bound = plan.lower_bound;
    L->node_bound = plan.node_bound;
    reel_log(p->ctx, REEL_LOG_DEBUG,
             "compile: memory plan of %lld rows: %d activations, %zu unordered pairs, %d added edges, arena %zu "
             "bytes (bounds %zu, %zu)",
             (long long)rows, nb, plan.nconflicts, plan.nnew_edges, plan.arena, plan.lower_bound, plan.node_bound);

    /* Waits per node: producers on other streams, and the planner's edges. */
    st = reel_schedule_waits(p, L, from, to, ne, plan.new_from, plan.new_to, plan.nnew_edges);
    if (st != REEL_OK)
        goto fail;
fail:
    if (st == REEL_E_OOM)
        reel_seterr(p->err, st, "compile: out of host memory planning %lld rows", (long long)rows);
    reel_mem_plan_free(&plan);
    reel_hfree(stream);
    reel_hfree(from);
    reel_hfree(to);
    reel_hfree(bufidx);
    reel_hfree(nacc);
    reel_hfree(acc);
    reel_hfree(bufs);
    return st;
}

/* Points the layout at its memory and resolves every launch. */
reel_status reel_layout_bind(reel_plan *p, reel_layout *L, char *arena, char *stat_dev, char *stat_host)
{
    const int per = REEL_OP_MAX_IN + REEL_OP_MAX_OUT;
    L->arena = arena;
    reel_staging_bind(L, stat_dev, stat_host, p->attn_cnt_words);
    for (int i = 0; i < p->nnodes; i++) {
        const reel_node *n = &p->nodes[i];
        reel_launch *l = &L->launches[i];
        reel_shape *in = &L->shapes[i * per], *out = in + REEL_OP_MAX_IN;
        reel_plan_node_shapes(p, i, L->rows, in, out);
        memset(l, 0, sizeof *l);
        l->op = n->op;
        l->attrs = &n->attrs;
        l->in_shape = in;
        l->out_shape = out;
        l->rows = L->rows;
        l->meta = &L->meta;
        l->stream = p->streams[n->stream];
        for (int k = 0; k < n->nin; k++) {
            l->in[k] = n->in[k] ? reel_plan_tensor_dev(p, L, n->in[k]) : NULL;
            if (n->in[k] && p->tensors[n->in[k]].kind == REEL_T_PARAM)
                l->in_param |= 1u << k;
        }
        for (int k = 0; k < n->nout; k++)
            l->out[k] = reel_plan_tensor_dev(p, L, n->out[k]);
        l->pdl = reel_schedule_pdl(p, L, i);
        l->comm = reel_op_is_comm(n->op) ? p->comm : NULL;
    }
    return REEL_OK;
}

static reel_status layout_arrays(reel_plan *p, reel_layout *L)
{
    L->act_off = reel_hcalloc((size_t)p->ntensors, sizeof *L->act_off);
    L->in_off = reel_hcalloc((size_t)p->ntensors, sizeof *L->in_off);
    L->launches = reel_hcalloc((size_t)p->nnodes + 1, sizeof *L->launches);
    L->shapes = reel_hcalloc(((size_t)p->nnodes + 1) * (REEL_OP_MAX_IN + REEL_OP_MAX_OUT), sizeof *L->shapes);
    if (!L->act_off || !L->in_off || !L->launches || !L->shapes)
        return reel_seterr(p->err, REEL_E_OOM, "out of host memory for a memory layout");
    return REEL_OK;
}

void reel_layout_free(reel_plan *p, reel_layout *L, bool owns_memory)
{
    if (owns_memory) {
        if (L->arena_blk)
            reel_ws_free(p->ws, L->arena_blk);
        else if (L->arena)
            p->be->vt->dev_free(p->be, L->arena);
        if (L->stat_dev)
            p->be->vt->dev_free(p->be, L->stat_dev);
        if (L->stat_host)
            reel_pinned_free(p->pinned, L->stat_host);
    }
    reel_hfree(L->act_off);
    reel_hfree(L->in_off);
    reel_hfree(L->launches);
    reel_hfree(L->shapes);
    reel_hfree(L->new_wait_start);
    reel_hfree(L->new_wait_from);
    reel_hfree(L->rec);
    memset(L, 0, sizeof *L);
}

/* An overflow layout with its own memory, for an eager step past the fixed
 * limits (allocate = true), or a bucket layout sharing the plan's. The
 * static region is laid out once, for stat_tokens rows (a bucket layout
 * shares the region sized by the largest bucket). */
reel_status reel_layout_build(reel_plan *p, reel_layout *L, int64_t rows, int32_t stat_tokens, int32_t max_seqs,
                              int32_t max_blocks, bool allocate)
{
    const reel_backend_vt *vt = p->be->vt;
    memset(L, 0, sizeof *L);
    L->rows = rows;
    REEL_TRY(layout_arrays(p, L));
    reel_staging_layout(p, L, stat_tokens, max_seqs, max_blocks);
    /* Blocks of a large block size may hold more than INT32_MAX tokens:
     * no context can exceed that anyway. Under DCP the blocks are this
     * rank's: the context is the longest whose share fits them. */
    int64_t max_context = reel_dcp_global_of(p->dcp, (int64_t)max_blocks * p->block_size);
    L->max_context = max_context > INT32_MAX ? INT32_MAX : (int32_t)max_context;
    REEL_TRY(layout_memplan(p, L, rows));
    if (!allocate)
        return REEL_OK;
    char *arena = NULL, *sd = NULL, *sh = NULL;
    /* The arena comes from the workspace allocator on stream 0; every other
     * stream of the plan uses it too, so its free fences them all. */
    REEL_TRY(reel_ws_alloc(p->ws, p->streams[0], L->arena_bytes ? L->arena_bytes : REEL_PLAN_ALIGN, &L->arena_blk));
    for (int s = 1; s < p->nstreams; s++)
        if (p->first_on_stream[s] >= 0)
            REEL_TRY(reel_ws_record_use(p->ws, L->arena_blk, p->streams[s]));
    arena = reel_ws_block_ptr(L->arena_blk);
    L->arena = arena;
    REEL_TRY(vt->dev_alloc(p->be, L->stat_bytes, (void **)&sd));
    L->stat_dev = sd;
    REEL_TRY(reel_pinned_alloc(p->pinned, L->stat_bytes, (void **)&sh));
    L->stat_host = sh;
    return reel_layout_bind(p, L, arena, sd, sh);
}
