/* Analyses of a built graph: dependency edges, a stable topological order,
 * and validation before compile. */
#include <stdio.h>
#include <string.h>

#include "graph/builder.h"
#include "core/csr.h"
#include "core/halloc.h"

const char *reel_node_desc(const reel_graph *g, int i, char *buf, size_t len)
{
    if (!buf || len == 0)
        return buf;
    if (!g || i < 0 || i >= g->nnodes) {
        snprintf(buf, len, "node %d (out of range)", i);
        return buf;
    }
    const reel_node *n = &g->nodes[i];
    return reel_op_node_label(n->op, i, g->tensors[n->out[0]].name, true, buf, len);
}

/* Adds edge p -> v unless it is a self edge or already among v's edges,
 * which start at index `start`. */
static void add_edge(int *from, int *to, int *n, int start, int p, int v)
{
    if (p < 0 || p == v)
        return;
    for (int e = start; e < *n; e++)
        if (from[e] == p)
            return;
    from[*n] = p;
    to[*n] = v;
    (*n)++;
}

reel_status reel_dag_edges(const reel_node *nodes, int nnodes, const reel_tinfo *tensors, int ntensors, int extra,
                           int **from, int **to, int *nedges)
{
    *from = *to = NULL;
    *nedges = 0;
    size_t cap = (size_t)nnodes * REEL_OP_MAX_IN + (size_t)extra;
    int *f = NULL, *t = NULL, *last = NULL;
    if (cap == 0)
        return REEL_OK;
    f = reel_halloc(cap * sizeof *f);
    t = reel_halloc(cap * sizeof *t);
    last = reel_halloc(((size_t)ntensors + 1) * sizeof *last); /* last node accessing each state */
    if (!f || !t || !last)
        goto fail;
    for (int i = 0; i < ntensors; i++)
        last[i] = -1;
    int n = 0;
    for (int v = 0; v < nnodes; v++) {
        const reel_node *nd = &nodes[v];
        int start = n;
        for (int i = 0; i < nd->nin; i++) {
            uint32_t id = nd->in[i];
            if (!id)
                continue;
            const reel_tinfo *ti = &tensors[id];
            if (ti->kind == REEL_T_ACT)
                add_edge(f, t, &n, start, ti->producer, v);
            else if (ti->kind == REEL_T_STATE) {
                add_edge(f, t, &n, start, last[id], v);
                last[id] = v;
            }
        }
    }
    reel_hfree(last);
    *from = f;
    *to = t;
    *nedges = n;
    return REEL_OK;
fail:
    reel_hfree(f);
    reel_hfree(t);
    reel_hfree(last);
    return REEL_E_OOM;
}

reel_status reel_graph_edges(const reel_graph *g, int **from, int **to, int *nedges)
{
    if (reel_dag_edges(g->nodes, g->nnodes, g->tensors, g->ntensors, 0, from, to, nedges) != REEL_OK)
        return reel_seterr(reel_ctx_err(g->ctx), REEL_E_OOM, "graph edges: out of host memory");
    return REEL_OK;
}

/* Min-heap of node indices: Kahn's with the lowest ready index first keeps
 * ties in build order. */
static void heap_push(int *h, int *n, int v)
{
    int i = (*n)++;
    while (i > 0 && h[(i - 1) / 2] > v) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = v;
}

static int heap_pop(int *h, int *n)
{
    int top = h[0], v = h[--(*n)], i = 0;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= *n)
            break;
        if (c + 1 < *n && h[c + 1] < h[c])
            c++;
        if (h[c] >= v)
            break;
        h[i] = h[c];
        i = c;
    }
    h[i] = v;
    return top;
}

reel_status reel_graph_topo_order(const reel_graph *g, int *order)
{
    int nn = g->nnodes, ne = 0, *from = NULL, *to = NULL;
    int *indeg = NULL, *start = NULL, *adj = NULL, *heap = NULL;
    reel_status st = reel_graph_edges(g, &from, &to, &ne);
    if (st != REEL_OK)
        return st;
    if (nn == 0)
        return REEL_OK;
    st = REEL_E_OOM;
    indeg = reel_hcalloc((size_t)nn, sizeof *indeg);
    start = reel_hcalloc((size_t)nn + 1, sizeof *start);
    adj = reel_halloc(((size_t)ne + 1) * sizeof *adj);
    heap = reel_halloc((size_t)nn * sizeof *heap);
    if (!indeg || !start || !adj || !heap)
        goto fail;
    /* Successor lists in CSR form. */
    for (int e = 0; e < ne; e++)
        indeg[to[e]]++;
    reel_csr_count(start, from, ne);
    reel_csr_offsets(start, nn);
    reel_csr_place(start, from, to, ne, adj);
    reel_csr_restore(start, nn);
    int nh = 0, done = 0;
    for (int v = 0; v < nn; v++)
        if (indeg[v] == 0)
            heap_push(heap, &nh, v);
    while (nh > 0) {
        int v = heap_pop(heap, &nh);
        order[done++] = v;
        for (int e = start[v]; e < start[v + 1]; e++)
            if (--indeg[adj[e]] == 0)
                heap_push(heap, &nh, adj[e]);
    }
    if (done < nn) {
        int stuck = 0;
        while (indeg[stuck] == 0)
            stuck++;
        char d[128];
        st = reel_seterr(reel_ctx_err(g->ctx), REEL_E_INVALID_ARG, "graph has a cycle through %s",
                         reel_node_desc(g, stuck, d, sizeof d));
        goto fail;
    }
    st = REEL_OK;
fail:
    if (st == REEL_E_OOM)
        reel_seterr(reel_ctx_err(g->ctx), st, "topological order: out of host memory");
    reel_hfree(from);
    reel_hfree(to);
    reel_hfree(indeg);
    reel_hfree(start);
    reel_hfree(adj);
    reel_hfree(heap);
    return st;
}

/* The first node (build order) that reads tensor id, -1 if none. */
static int first_user(const reel_graph *g, uint32_t id)
{
    for (int v = 0; v < g->nnodes; v++)
        for (int i = 0; i < g->nodes[v].nin; i++)
            if (g->nodes[v].in[i] == id)
                return v;
    return -1;
}

/* A send is an effect of its own: a pipeline's middle stage outputs nothing. */
static bool has_send(const reel_graph *g)
{
    for (int v = 0; v < g->nnodes; v++)
        if (g->nodes[v].op == REEL_OP_SEND)
            return true;
    return false;
}

static reel_status check_outputs(reel_graph *g)
{
    if (g->noutputs == 0 && !has_send(g))
        return reel_seterr(reel_ctx_err(g->ctx), REEL_E_NO_OUTPUT, "graph has no outputs (and no send)");
    for (int o = 0; o < g->noutputs; o++) {
        const reel_tinfo *t = &g->tensors[g->outputs[o].tensor];
        if (t->kind != REEL_T_ACT && t->kind != REEL_T_INPUT)
            return reel_seterr(reel_ctx_err(g->ctx), REEL_E_NO_OUTPUT, "output '%s' is never produced by an op (it is %s '%s')",
                               g->outputs[o].name, reel_tensor_kind_name(t->kind), t->name);
    }
    return REEL_OK;
}

static reel_status check_params(reel_graph *g)
{
    for (int i = 1; i < g->ntensors; i++) {
        const reel_tinfo *t = &g->tensors[i];
        if (t->kind != REEL_T_PARAM || t->bind || t->deferred)
            continue;
        int user = first_user(g, (uint32_t)i);
        char d[128] = "no op";
        if (user >= 0)
            reel_node_desc(g, user, d, sizeof d);
        return reel_seterr(reel_ctx_err(g->ctx), REEL_E_UNBOUND, "parameter '%s' is neither bound nor deferred (used by %s)",
                           t->name, d);
    }
    return REEL_OK;
}

reel_status reel_graph_validate(reel_graph *g)
{
    if (!g)
        return REEL_E_INVALID_ARG;
    if (g->err != REEL_OK)
        return reel_seterr(reel_ctx_err(g->ctx), g->err, "%s", g->errmsg);
    reel_status st = check_outputs(g);
    if (st == REEL_OK)
        st = check_params(g);
    return st;
}
