/* Schedule: streams, the events ordering them, the dependency edges of the
 * schedule, each node's cross-stream waits, and programmatic dependent
 * launch. What several ranks will have to agree on is fixed here. */
#include "core/csr.h"
#include "core/halloc.h"
#include "runtime/plan.h"

/* Each stream's backend workspace: the most any of its nodes' impls take
 * at any bucket (the matmul workspace: what the cuBLASLt algorithms chosen
 * for the plan's shapes ask for, 4 MiB for a decode plan's classic cuBLAS
 * calls, 32 MiB for prefill-sized ones on Hopper). A step past the largest
 * bucket runs eagerly within it. Streams whose nodes take none are left
 * alone. */
static reel_status reserve_stream_ws(reel_plan *p)
{
    const reel_backend_vt *vt = p->be->vt;
    if (!vt->stream_reserve_ws)
        return REEL_OK;
    size_t want[REEL_MAX_STREAMS] = {0};
    bool any[REEL_MAX_STREAMS] = {false};
    char buf[160];
    for (int i = 0; i < p->nnodes; i++) {
        const reel_node *n = &p->nodes[i];
        if (!p->impl[i]->stream_ws)
            continue;
        any[n->stream] = true;
        for (int b = 0; b < p->nbuckets; b++) {
            reel_shape in[REEL_OP_MAX_IN], out[REEL_OP_MAX_OUT];
            reel_plan_node_shapes(p, i, p->buckets[b], in, out);
            size_t bytes = 0;
            reel_status st = p->impl[i]->stream_ws(p->be, in, n->nin, out, &n->attrs, &bytes);
            if (st != REEL_OK)
                return reel_err_prefix(p->err, st, "%s: its workspace at %d rows",
                                       reel_plan_node_name(p, i, buf, sizeof buf), p->buckets[b]);
            if (bytes > want[n->stream])
                want[n->stream] = bytes;
        }
    }
    p->ws_plan_bytes = 0;
    for (int s = 0; s < p->nstreams; s++)
        if (any[s]) {
            REEL_TRY(vt->stream_reserve_ws(p->be, p->streams[s], want[s]));
            p->ws_plan_bytes += want[s];
        }
    return REEL_OK;
}

reel_status reel_schedule_streams(reel_plan *p)
{
    const reel_backend_vt *vt = p->be->vt;
    p->nstreams = 1;
    for (int i = 0; i < p->nnodes; i++)
        if (p->nodes[i].stream + 1 > p->nstreams)
            p->nstreams = p->nodes[i].stream + 1;
    p->first_on_stream = reel_hcalloc(REEL_MAX_STREAMS, sizeof(int));
    p->last_on_stream = reel_hcalloc(REEL_MAX_STREAMS, sizeof(int));
    p->node_ev = reel_hcalloc((size_t)p->nnodes + 1, sizeof *p->node_ev);
    if (!p->first_on_stream || !p->last_on_stream || !p->node_ev)
        return reel_seterr(p->err, REEL_E_OOM, "compile: out of host memory");
    for (int s = 0; s < REEL_MAX_STREAMS; s++)
        p->first_on_stream[s] = p->last_on_stream[s] = -1;
    for (int i = 0; i < p->nnodes; i++) {
        int s = p->nodes[i].stream;
        if (p->first_on_stream[s] < 0)
            p->first_on_stream[s] = i;
        p->last_on_stream[s] = i;
    }
    for (int s = 0; s < p->nstreams; s++)
        REEL_TRY(vt->stream_create(p->be, &p->streams[s]));
    REEL_TRY(reserve_stream_ws(p));
    if (p->nstreams > 1) {
        REEL_TRY(vt->event_create(p->be, &p->fork_ev));
        for (int s = 1; s < p->nstreams; s++)
            REEL_TRY(vt->event_create(p->be, &p->join_ev[s]));
    }
    return REEL_OK;
}

/* The schedule's dependency edges (graph/: producer -> consumer, and the
 * accessors of each state tensor chained in schedule order, since paged
 * attention writes its KV cache), plus a sink after every stream's last
 * node, where outputs are read back. Allocated (reel_hfree); REEL_E_OOM
 * without a message. */
reel_status reel_schedule_edges(const reel_plan *p, int **from, int **to, int *nedges)
{
    REEL_TRY(reel_dag_edges(p->nodes, p->nnodes, p->tensors, p->ntensors, p->nstreams + 1, from, to, nedges));
    if (!*from) {
        /* No node reads anything: room for the sink edges alone. */
        *from = reel_halloc(((size_t)p->nstreams + 1) * sizeof **from);
        *to = reel_halloc(((size_t)p->nstreams + 1) * sizeof **to);
        if (!*from || !*to) {
            reel_hfree(*from);
            reel_hfree(*to);
            *from = *to = NULL;
            return REEL_E_OOM;
        }
    }
    for (int s = 0; s < p->nstreams; s++)
        if (p->last_on_stream[s] >= 0) {
            (*from)[*nedges] = p->last_on_stream[s];
            (*to)[*nedges] = p->nnodes;
            (*nedges)++;
        }
    return REEL_OK;
}

/* The cross-stream waits of each node of layout L (CSR by node): producers
 * of its inputs on other streams (the ne data edges from -> to) and the
 * planner's nnew added edges, without duplicates; and which nodes record
 * their event after them. REEL_E_OOM without a message (the caller names
 * the layout). */
reel_status reel_schedule_waits(reel_plan *p, reel_layout *L, const int *from, const int *to, int ne,
                                const int *new_from, const int *new_to, int nnew)
{
    int n = p->nnodes + 1; /* the sink node (nnodes) is a destination too */
    int *start = reel_hcalloc((size_t)n + 1, sizeof *start);
    int *src = reel_hcalloc((size_t)ne + (size_t)nnew + 1, sizeof *src);
    L->new_wait_start = reel_hcalloc((size_t)p->nnodes + 2, sizeof(int));
    L->new_wait_from = reel_hcalloc((size_t)ne + (size_t)nnew + 1, sizeof(int));
    L->rec = reel_hcalloc((size_t)p->nnodes + 1, 1);
    if (!start || !src || !L->new_wait_start || !L->new_wait_from || !L->rec) {
        reel_hfree(start);
        reel_hfree(src);
        return REEL_E_OOM;
    }
    /* Sources of each node's in-edges, data edges first, in edge order. */
    reel_csr_count(start, to, ne);
    reel_csr_count(start, new_to, nnew);
    reel_csr_offsets(start, n);
    reel_csr_place(start, to, from, ne, src);
    reel_csr_place(start, new_to, new_from, nnew, src);
    reel_csr_restore(start, n);
    int w = 0;
    for (int i = 0; i < p->nnodes; i++) {
        L->new_wait_start[i] = w;
        for (int e = start[i]; e < start[i + 1]; e++) {
            int f = src[e];
            if (p->nodes[f].stream == p->nodes[i].stream || p->dbg.drop_waits_of == i + 1)
                continue;
            bool dup = false;
            for (int k = L->new_wait_start[i]; k < w; k++)
                dup |= L->new_wait_from[k] == f;
            if (!dup)
                L->new_wait_from[w++] = f;
        }
    }
    L->new_wait_start[p->nnodes] = w;
    reel_hfree(start);
    reel_hfree(src);
    for (int k = 0; k < w; k++)
        L->rec[L->new_wait_from[k]] = 1;
    return REEL_OK;
}

/* Programmatic dependent launch for node i: asked for, on the device, the
 * kernel honours it, it is not its stream's first node and waits on no
 * other stream (an event wait keeps its full dependency). */
bool reel_schedule_pdl(const reel_plan *p, const reel_layout *L, int i)
{
    if (!p->opts.pdl || !p->be->caps.pdl || !p->impl[i]->pdl_ok || p->first_on_stream[p->nodes[i].stream] == i)
        return false;
    if (L->new_wait_start[i] != L->new_wait_start[i + 1])
        return false;
    return p->opts.pdl > 0 || reel_schedule_pdl_by_grid(p->impl[i], &L->launches[i], &p->be->caps);
}

/* The default (pdl undefined): a kernel whose grid fits in one wave
 * (blocks <= multiprocessors) starts early and waits on its producer at its
 * top; bench/chain.cu measured 0.60-0.75x per node for such grids on an
 * H200, while a grid of several waves holds SMs its producer's tail needs
 * and loses. A kernel that cannot say its grid gets no PDL by default. */
bool reel_schedule_pdl_by_grid(const reel_op_impl *impl, const reel_launch *l, const reel_device_caps *caps)
{
    if (!impl->grid_blocks || caps->sm_count <= 0)
        return false;
    int64_t blocks = impl->grid_blocks(l, caps);
    return blocks > 0 && blocks <= (int64_t)caps->sm_count * REEL_PDL_MAX_WAVES;
}

reel_status reel_plan_ensure_events(reel_plan *p, const reel_layout *L)
{
    for (int i = 0; i < p->nnodes; i++)
        for (int k = L->new_wait_start[i]; k < L->new_wait_start[i + 1]; k++) {
            int f = L->new_wait_from[k];
            if (!p->node_ev[f])
                REEL_TRY(p->be->vt->event_create(p->be, &p->node_ev[f]));
        }
    return REEL_OK;
}
