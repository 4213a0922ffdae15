/* Host recorded graphs: replay enqueues copies of the recorded items onto
 * the recorded streams (the origin mapped onto the launch stream) in the
 * recorded issue order. Events recorded in the capture are replaced by
 * events the graph owns, so the caller may destroy its own events, and
 * internal start/end events order the graph against the launch stream. */
#include "core/halloc.h"
#include "core/err.h"
#include "backend/host/host_internal.h"

struct reel_exec_graph {
    reel_stream **streams;   /* per slot; slot 0 (the origin) is the launch stream */
    size_t nstreams;
    reel_event **events;     /* one per event recorded in the capture */
    size_t nevents;
    reel_event **joins;      /* slot 0: start, recorded on the launch stream;
                                slot i: end, recorded on stream i */
    host_cap_item *items;    /* templates, in issue order */
    size_t nitems;
    int *loop_cond;          /* a loop graph: the condition its body sets (NULL: none) */
};

static void free_events(reel_event **ev, size_t n)
{
    for (size_t i = 0; ev && i < n; i++)
        if (ev[i])
            reel_host_event_unref(ev[i]);
    reel_hfree(ev);
}

static reel_event **new_events(size_t n)
{
    reel_event **ev = reel_hcalloc(n ? n : 1, sizeof *ev);
    for (size_t i = 0; ev && i < n; i++)
        if (!(ev[i] = reel_host_event_new())) {
            free_events(ev, n);
            return NULL;
        }
    return ev;
}

/* Under mu. Takes the capture's items; the caller then discards c. */
reel_status reel_host_graph_build(host_be *hb, host_capture *c, reel_exec_graph **out)
{
    (void)hb;
    reel_exec_graph *g = reel_hcalloc(1, sizeof *g);
    if (!g)
        return REEL_E_OOM;
    g->nstreams = c->nstreams;
    g->nevents = c->nevents;
    g->streams = reel_hcalloc(c->nstreams, sizeof *g->streams);
    g->events = new_events(c->nevents);
    g->joins = new_events(c->nstreams);
    if (!g->streams || !g->events || !g->joins) {
        free_events(g->events, g->nevents);
        free_events(g->joins, g->nstreams);
        reel_hfree(g->streams);
        reel_hfree(g);
        return REEL_E_OOM;
    }
    for (size_t i = 1; i < c->nstreams; i++) {
        g->streams[i] = c->streams[i];
        g->streams[i]->refs++;   /* replays need the thread after the caller drops it */
    }
    g->items = c->items;
    g->nitems = c->nitems;
    g->loop_cond = c->loop_cond;
    c->loop_cond = NULL;
    c->items = NULL;
    c->nitems = c->cap_items = 0;
    *out = g;
    return REEL_OK;
}

static void free_items(host_item **its, size_t n)
{
    for (size_t i = 0; i < n; i++)
        reel_hfree(its[i]);
    reel_hfree(its);
}

/* All items of one replay, allocated before the lock so that a launch is
 * enqueued entirely or not at all. */
static host_item **prepare(const reel_exec_graph *g, size_t *count)
{
    size_t joins = g->nstreams > 1 ? 1 + 3 * (g->nstreams - 1) : 0;
    size_t n = g->nitems + joins;
    host_item **its = reel_hcalloc(n ? n : 1, sizeof *its);
    if (!its)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        its[i] = i < g->nitems ? reel_host_item_clone(g->items[i].it)
                               : reel_host_item_new(i < g->nitems + g->nstreams ? HOST_RECORD : HOST_WAIT, 0);
        if (!its[i]) {
            free_items(its, i);
            return NULL;
        }
    }
    *count = n;
    return its;
}

/* Under mu: enqueues one replay. Item layout from prepare(): the recorded
 * items, then (with forks) the start record, the end records, then the
 * start waits, the end waits (the kinds prepare() gave them). */
static void enqueue(const reel_exec_graph *g, reel_stream *s, host_item **its)
{
    size_t n = g->nstreams, k = g->nitems;
#define SLOT_STREAM(i) ((i) == 0 ? s : g->streams[i])
    if (n > 1) {
        reel_host_record_push(s, g->joins[0], its[k]);
        for (size_t i = 1; i < n; i++)
            reel_host_wait_push(g->streams[i], g->joins[0], its[k + n + i - 1]);
    }
    for (size_t i = 0; i < g->nitems; i++) {
        const host_cap_item *ci = &g->items[i];
        reel_stream *t = SLOT_STREAM(ci->slot);
        if (ci->it->kind == HOST_RECORD)
            reel_host_record_push(t, g->events[ci->evi], its[i]);
        else if (ci->it->kind == HOST_WAIT)
            reel_host_wait_push(t, g->events[ci->evi], its[i]);
        else
            reel_host_stream_push(t, its[i]);
    }
    for (size_t i = 1; i < n; i++)
        reel_host_record_push(g->streams[i], g->joins[i], its[k + i]);
    for (size_t i = 1; i < n; i++)
        reel_host_wait_push(s, g->joins[i], its[k + 2 * n - 2 + i]);
#undef SLOT_STREAM
}

/* Under mu: the slot of g whose stream is capturing (launch stream: 0), or -1. */
static int64_t capturing_slot(const reel_exec_graph *g, const reel_stream *s)
{
    for (size_t i = 0; i < g->nstreams; i++)
        if ((i == 0 ? s : g->streams[i])->cap)
            return (int64_t)i;
    return -1;
}

static reel_status launch_once(reel_backend *be, reel_exec_graph *g, reel_stream *s, bool wait);

/* A loop graph: one replay of the body at a time, while the condition the
 * body set is nonzero (1 before the first). The host waits for each pass
 * to read it, so the launch returns with the loop done. */
static reel_status launch_loop(reel_backend *be, reel_exec_graph *g, reel_stream *s)
{
    __atomic_store_n(g->loop_cond, 1, __ATOMIC_RELEASE);
    while (__atomic_load_n(g->loop_cond, __ATOMIC_ACQUIRE))
        REEL_TRY(launch_once(be, g, s, true));
    return REEL_OK;
}

reel_status reel_host_graph_launch(reel_backend *be, reel_exec_graph *g, reel_stream *s)
{
    if (g && s && g->loop_cond)
        return launch_loop(be, g, s);
    return launch_once(be, g, s, false);
}

/* One replay; with wait, returns once s ran everything pushed until then
 * (the graph's end joins every stream of it back to s). */
static reel_status launch_once(reel_backend *be, reel_exec_graph *g, reel_stream *s, bool wait)
{
    host_be *hb = host_of(be);
    if (!g || !s)
        return reel_seterr(be->err, REEL_E_INVALID_ARG, "host graph_launch: %s is NULL", g ? "stream" : "graph");
    size_t n = 0;
    host_item **its = prepare(g, &n);
    if (!its)
        return reel_seterr(be->err, REEL_E_OOM, "host graph_launch: out of memory (%zu items)", g->nitems);
    pthread_mutex_lock(&hb->mu);
    int64_t busy = capturing_slot(g, s);
    unsigned id = busy < 0 ? 0 : (busy == 0 ? s : g->streams[busy])->id;
    if (busy < 0)
        enqueue(g, s, its);
    for (uint64_t target = s->enqueued; busy < 0 && wait && s->done < target;)
        pthread_cond_wait(&s->cv_idle, &hb->mu);
    pthread_mutex_unlock(&hb->mu);
    if (busy >= 0) {
        free_items(its, n);
        return reel_seterr(be->err, REEL_E_INVALID_USAGE,
                           "host graph_launch: stream %u is capturing (graphs are not launched into captures)", id);
    }
    reel_hfree(its);
    return REEL_OK;
}

reel_status reel_host_graph_kernels(reel_backend *be, reel_exec_graph *g, int *kernels)
{
    (void)be;
    int n = 0;
    for (size_t i = 0; i < g->nitems; i++)
        n += g->items[i].it->kind == HOST_KERNEL;
    *kernels = n;
    return REEL_OK;
}

void reel_host_graph_destroy(reel_backend *be, reel_exec_graph *g)
{
    host_be *hb = host_of(be);
    if (!g)
        return;
    /* Items already enqueued hold their own event references. */
    pthread_mutex_lock(&hb->mu);
    free_events(g->events, g->nevents);
    free_events(g->joins, g->nstreams);
    pthread_mutex_unlock(&hb->mu);
    for (size_t i = 1; i < g->nstreams; i++)
        reel_host_stream_release(hb, g->streams[i]);
    for (size_t i = 0; i < g->nitems; i++)
        reel_hfree(g->items[i].it);
    reel_hfree(g->items);
    reel_hfree(g->streams);
    reel_hfree(g->loop_cond);
    reel_hfree(g);
}
