/* Introspection: what `reel inspect`, traces and serving stacks read from a
 * compiled plan. Node info (the schedule, the kernel the registry chose and
 * why), the plan's own memory per bucket, and op spans recorded by the
 * backend around each kernel (host backend). Reads the schedule only; the
 * span buffer is the one piece of serving-loop state here. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "core/grow.h"
#include "core/halloc.h"
#include "core/abi.h"
#include "runtime/plan.h"

/* ---- sized result structs ------------------------------------------------ */

/* ---- node info ------------------------------------------------------------- */

static const char *kind_name(reel_tensor_kind k)
{
    switch (k) {
    case REEL_T_INPUT: return "input";
    case REEL_T_PARAM: return "param";
    case REEL_T_STATE: return "state";
    case REEL_T_META: return "positions";
    case REEL_T_ACT: return "act";
    }
    return "?";
}

/* The registry's decision, told again: every impl of the op on this
 * backend, which one won, which refused the node (can_use on the shapes at
 * the largest bucket, as at compile) and which lost on priority. */
static void explain_kernel(const reel_plan *p, int i, char *why, size_t len)
{
    const reel_node *n = &p->nodes[i];
    const reel_op_impl *win = p->impl[i];
    reel_shape in[REEL_OP_MAX_IN], out[REEL_OP_MAX_OUT];
    reel_plan_node_shapes(p, i, p->buckets[p->nbuckets - 1], in, out);
    int count = 0, nimpl = 0;
    const reel_op_impl *const *all = reel_registry_all(p->be->kind, &count);
    char refused[160] = "", lower[160] = "";
    size_t nr = 0, nl = 0;
    for (int k = 0; k < count; k++) {
        const reel_op_impl *im = all[k];
        if (im->op != n->op)
            continue;
        nimpl++;
        if (im == win)
            continue;
        bool usable = !im->can_use || im->can_use(in, n->nin, out, &n->attrs, &p->be->caps);
        if (!usable && nr < sizeof refused)
            nr += (size_t)snprintf(refused + nr, sizeof refused - nr, "%s%s", nr ? ", " : "", im->name);
        else if (usable && nl < sizeof lower)
            nl += (size_t)snprintf(lower + nl, sizeof lower - nl, "%s%s (%d)", nl ? ", " : "", im->name,
                                   im->priority);
    }
    size_t w = (size_t)snprintf(why, len, "highest priority (%d) of %d %s kernel(s) accepting its shapes/dtypes",
                                win->priority, nimpl, reel_backend_name(p->be->kind));
    if (nr && w < len)
        w += (size_t)snprintf(why + w, len - w, "; refused the shapes/dtypes/device: %s", refused);
    if (nl && w < len)
        w += (size_t)snprintf(why + w, len - w, "; lower priority: %s", lower);
    if (!win->capturable && w < len)
        snprintf(why + w, len - w, "; cannot be captured: the plan runs eagerly");
}

reel_status reel_plan_node_info(const reel_plan *p, int i, reel_node_info *out)
{
    if (!p || !out)
        return reel_seterr(p ? p->err : NULL, REEL_E_INVALID_ARG, "node_info: NULL plan or output");
    REEL_TRY(reel_struct_check(out, &reel_abi_node_info, p->err));
    if (i < 0 || i >= p->nnodes)
        return reel_seterr(p->err, REEL_E_NOT_FOUND, "node_info: node %d outside the plan's 0..%d", i, p->nnodes - 1);
    const reel_node *n = &p->nodes[i];
    reel_node_info r;
    memset(&r, 0, sizeof r);
    r.op = reel_op_schema_get(n->op)->name;
    r.name = p->tensors[n->out[0]].name;
    r.stream = n->stream;
    r.kernel = p->impl[i]->name;
    r.priority = p->impl[i]->priority;
    r.capturable = p->impl[i]->capturable && p->dbg.not_capturable_node != i;
    r.inplace_ok = p->impl[i]->inplace_ok;
    r.pdl = p->bucket[p->nbuckets - 1].launches ? p->bucket[p->nbuckets - 1].launches[i].pdl : 0;
    r.nin = n->nin;
    r.nout = n->nout;
    for (int k = 0; k < n->nin && k < REEL_NODE_MAX_IN; k++) {
        r.in_node[k] = -1;
        if (!n->in[k])
            continue;
        const reel_tinfo *t = &p->tensors[n->in[k]];
        r.in[k] = t->name;
        r.in_kind[k] = kind_name(t->kind);
        r.in_node[k] = t->kind == REEL_T_ACT ? t->producer : -1;
    }
    for (int k = 0; k < n->nout && k < REEL_NODE_MAX_OUT; k++) {
        r.out[k] = p->tensors[n->out[k]].name;
        for (int o = 0; o < p->noutputs; o++)
            if (p->outputs[o].tensor == n->out[k] && !r.output_name[k]) {
                r.is_output[k] = 1;
                r.output_name[k] = p->outputs[o].name;
            }
    }
    explain_kernel(p, i, r.why, sizeof r.why);
    r.fused = p->fused ? p->fused[i] : "";
    return reel_struct_fill(out, &r, &reel_abi_node_info, p->err);
}

reel_status reel_plan_graph_kernels(const reel_plan *p, int bucket, int *kernels)
{
    if (!p || !kernels)
        return reel_seterr(p ? p->err : NULL, REEL_E_INVALID_ARG, "graph_kernels: NULL plan or output");
    if (bucket < 0 || bucket >= p->nbuckets || !p->graph[bucket])
        return reel_seterr(p->err, REEL_E_NOT_FOUND, "graph_kernels: bucket %d has no captured graph (buckets 0..%d)",
                           bucket, p->nbuckets - 1);
    if (!p->be->vt->graph_kernels)
        return reel_seterr(p->err, REEL_E_UNSUPPORTED, "graph_kernels: backend '%s' cannot count a graph's kernels",
                           reel_backend_name(p->be->kind));
    return p->be->vt->graph_kernels(p->be, p->graph[bucket], kernels);
}

/* ---- the plan's memory ------------------------------------------------------- */

reel_status reel_plan_memory_get(const reel_plan *p, reel_plan_memory *out)
{
    if (!p || !out)
        return reel_seterr(p ? p->err : NULL, REEL_E_INVALID_ARG, "memory_get: NULL plan or output");
    REEL_TRY(reel_struct_check(out, &reel_abi_plan_memory, p->err));
    reel_plan_memory m;
    memset(&m, 0, sizeof m);
    m.num_buckets = p->nbuckets;
    m.arena_bytes = p->arena_bytes;
    m.static_bytes = p->stat_bytes;
    m.pinned_bytes = p->stat_bytes + p->out_bytes;
    m.param_bytes = p->st.param_bytes;
    m.state_bytes = p->st.state_bytes;
    /* A host graph is a list of items in host memory: no device bytes. CUDA
     * does not report what an instantiated graph holds on the device. */
    m.graph_bytes_known = p->be->kind == REEL_BACKEND_HOST;
    for (int b = 0; b < p->nbuckets; b++) {
        m.bucket_arena_bytes[b] = p->bucket[b].arena_bytes;
        m.bucket_device_bytes[b] = p->bucket[b].arena_bytes + p->stat_bytes + m.bucket_graph_bytes[b];
        m.graph_bytes += m.bucket_graph_bytes[b];
    }
    if (p->be->vt->stream_ws_held)
        for (int s = 0; s < p->nstreams; s++)
            m.stream_ws_bytes += p->be->vt->stream_ws_held(p->be, p->streams[s]);
    m.device_bytes = m.arena_bytes + m.static_bytes + m.graph_bytes + m.stream_ws_bytes;
    return reel_struct_fill(out, &m, &reel_abi_plan_memory, p->err);
}

/* ---- op spans -------------------------------------------------------------- */

/* Filled by the stream threads (the backend's trace callback), drained by
 * the thread stepping the plan: a lock of its own. */
typedef struct reel_span_buf {
    pthread_mutex_t mu;
    reel_op_span *v;
    size_t n, cap;
    bool lost;                  /* memory ran out: spans were dropped */
    /* Device spans (a backend with timers and no span hook: CUDA): a timer
     * before and after each node of an eager step, resolved after it. */
    bool dev;                   /* this plan times its eager ops itself */
    bool live;                  /* an eager step is issuing: mark its nodes */
    struct reel_event **ev;     /* [2 * nnodes]: before, after node i */
    unsigned char *marked;      /* [nnodes]: both of node i's timers recorded */
    int nev;                    /* timers created (2 * nnodes once allocated) */
} reel_span_buf;

#define REEL_SPAN_MAX ((size_t)1 << 22) /* spans kept between two takes */

/* Appends one span (any thread); a span that does not fit is counted lost. */
static void push_span(reel_span_buf *b, int node, int stream, double t0, double t1)
{
    pthread_mutex_lock(&b->mu);
    if (b->n < REEL_SPAN_MAX && reel_grow((void **)&b->v, &b->cap, b->n + 1, sizeof *b->v))
        b->v[b->n++] = (reel_op_span){REEL_OP_SPAN_HEAD, .node = node, .stream = stream, .start_us = t0, .end_us = t1};
    else
        b->lost = true;
    pthread_mutex_unlock(&b->mu);
}

static void on_kernel(void *user, int tag, reel_stream *s, double t0, double t1)
{
    reel_plan *p = user;
    reel_span_buf *b = p->spans;
    int stream = -1;
    for (int k = 0; k < p->nstreams; k++)
        if (p->streams[k] == s)
            stream = k;
    if (stream < 0 || tag < 1 || tag > p->nnodes)
        return; /* another plan's kernel on a shared backend */
    push_span(b, tag - 1, stream, t0, t1);
}

reel_status reel_plan_trace_ops(reel_plan *p, int on)
{
    if (!p)
        return reel_seterr(NULL, REEL_E_INVALID_ARG, "trace_ops: the plan is NULL");
    const reel_backend_vt *vt = p->be->vt;
    bool timers = vt->timer_create && vt->timer_elapsed_us;
    if (!(vt->set_trace && !p->dbg.dev_spans) && !timers)
        return reel_seterr(p->err, REEL_E_UNSUPPORTED, "trace_ops: backend '%s' records no op spans",
                           reel_backend_name(p->be->kind));
    if (on && !p->spans) {
        p->spans = reel_hcalloc(1, sizeof *p->spans);
        if (!p->spans)
            return reel_seterr(p->err, REEL_E_OOM, "trace_ops: out of memory");
        pthread_mutex_init(&p->spans->mu, NULL);
    }
    if (!p->spans)
        return REEL_OK;
    if (vt->set_trace && !p->dbg.dev_spans)
        vt->set_trace(p->be, on ? on_kernel : NULL, on ? p : NULL);
    else
        p->spans->dev = on != 0;
    return REEL_OK;
}

/* ---- device op spans ------------------------------------------------------
 * On a backend without a span hook (CUDA) an eager step times each op with
 * a pair of device timers on the op's stream; a replayed step's kernels run
 * inside one graph launch and are not timed one by one. The GPU times are
 * placed on the host clock so that the step's last op ends when the step
 * returned (its download waited for it). A timer that cannot be made or
 * recorded drops the spans (take_op_spans then says so), never the step. */

static bool dev_spans_ready(reel_plan *p)
{
    reel_span_buf *b = p->spans;
    if (!b->ev)
        b->ev = reel_hcalloc((size_t)p->nnodes * 2 + 1, sizeof *b->ev);
    if (!b->marked)
        b->marked = reel_hcalloc((size_t)p->nnodes + 1, 1);
    if (!b->ev || !b->marked)
        return false;
    /* A timer that could not be made is tried again at the next step. */
    while (b->nev < 2 * p->nnodes && p->be->vt->timer_create(p->be, &b->ev[b->nev]) == REEL_OK)
        b->nev++;
    return b->nev == 2 * p->nnodes;
}

void reel_plan_dev_spans_begin(reel_plan *p)
{
    reel_span_buf *b = p->spans;
    if (!b || !b->dev || b->lost)
        return;
    if (!dev_spans_ready(p)) {
        b->lost = true;
        return;
    }
    memset(b->marked, 0, (size_t)p->nnodes);
    b->live = true;
}

void reel_plan_dev_span_mark(reel_plan *p, const reel_layout *L, int i, bool after)
{
    reel_span_buf *b = p->spans;
    if (!b || !b->live)
        return;
    if (p->be->vt->event_record(p->be, b->ev[2 * i + (after ? 1 : 0)], L->launches[i].stream) != REEL_OK) {
        b->live = false;
        b->lost = true;
        return;
    }
    if (after)
        b->marked[i] = 1;
}

void reel_plan_dev_spans_end(reel_plan *p, bool ok)
{
    reel_span_buf *b = p->spans;
    if (!b || !b->live)
        return;
    b->live = false;
    if (!ok)
        return;
    double done_us = reel_now_ms() * 1e3;
    int first = -1;
    for (int i = 0; i < p->nnodes && first < 0; i++)
        if (b->marked[i])
            first = i;
    if (first < 0)
        return;
    /* Every span relative to the first op's start, on the device's clock. */
    double *rel = reel_hcalloc((size_t)p->nnodes * 2 + 1, sizeof *rel);
    if (!rel) {
        b->lost = true;
        return;
    }
    double last = 0.0;
    for (int i = first; i < p->nnodes; i++) {
        if (!b->marked[i])
            continue;
        if (p->be->vt->event_sync(p->be, b->ev[2 * i + 1]) != REEL_OK ||
            p->be->vt->timer_elapsed_us(p->be, b->ev[2 * first], b->ev[2 * i], &rel[2 * i]) != REEL_OK ||
            p->be->vt->timer_elapsed_us(p->be, b->ev[2 * first], b->ev[2 * i + 1], &rel[2 * i + 1]) != REEL_OK) {
            b->lost = true;
            reel_hfree(rel);
            return;
        }
        if (rel[2 * i + 1] > last)
            last = rel[2 * i + 1];
    }
    double origin = done_us - last;
    for (int i = first; i < p->nnodes; i++)
        if (b->marked[i])
            push_span(b, i, p->nodes[i].stream, origin + rel[2 * i], origin + rel[2 * i + 1]);
    reel_hfree(rel);
}

reel_status reel_plan_take_op_spans(reel_plan *p, reel_op_span *buf, int cap, int *n)
{
    if (!p || !n || cap < 0 || (!buf && cap))
        return reel_seterr(p ? p->err : NULL, REEL_E_INVALID_ARG,
                           "take_op_spans: %s", !p ? "the plan is NULL" : !n ? "n is NULL"
                                                : cap < 0 ? "cap is negative" : "buf is NULL with cap > 0");
    *n = 0;
    if (cap)    /* buf[0]'s head: initialised, and its size strides buf */
        REEL_TRY(reel_struct_check(buf, &reel_abi_op_span, p->err));
    reel_span_buf *b = p->spans;
    if (!b)
        return REEL_OK;
    reel_struct_head head = { 0, 0, 0 };
    if (cap)
        memcpy(&head, buf, sizeof head);
    pthread_mutex_lock(&b->mu);
    size_t k = b->n < (size_t)cap ? b->n : (size_t)cap;
    if (k) { /* b->v is NULL until the first span; each span gets buf[0]'s head */
        for (size_t i = 0; i < k; i++) {
            char *to = (char *)buf + i * head.size;
            memcpy(to, &head, sizeof head);
            memcpy(to + sizeof head, (const char *)&b->v[i] + sizeof head, head.size - sizeof head);
        }
        memmove(b->v, b->v + k, (b->n - k) * sizeof *b->v);
    }
    b->n -= k;
    bool lost = b->lost;
    b->lost = false;
    pthread_mutex_unlock(&b->mu);
    *n = (int)k;
    if (lost)
        return reel_seterr(p->err, REEL_E_OOM, "take_op_spans: spans were dropped (memory, or %zu kept)",
                           (size_t)REEL_SPAN_MAX);
    return REEL_OK;
}

void reel_plan_trace_free(reel_plan *p)
{
    if (!p->spans)
        return;
    /* A backend may be shared: stop only our callback (the streams are
     * drained, so none is running). */
    if (p->be->vt->set_trace)
        p->be->vt->set_trace(p->be, NULL, NULL);
    for (int k = 0; k < p->spans->nev; k++)
        p->be->vt->event_destroy(p->be, p->spans->ev[k]);
    reel_hfree(p->spans->ev);
    reel_hfree(p->spans->marked);
    pthread_mutex_destroy(&p->spans->mu);
    reel_hfree(p->spans->v);
    reel_hfree(p->spans);
    p->spans = NULL;
}
