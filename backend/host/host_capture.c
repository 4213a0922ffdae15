/* Host stream capture, with CUDA's fork/join rules: a stream joins a
 * capture by waiting on an event recorded in it, and every joined stream
 * must be joined back into the origin before the capture ends. Items issued
 * to capturing streams are recorded in issue order (a topological order of
 * the recorded dependencies), not run. */
#include "core/grow.h"
#include "core/halloc.h"
#include "core/err.h"
#include "backend/host/host_internal.h"

/* Makes room first, so that the updates that follow cannot fail halfway. */
static bool reserve(host_capture *c, size_t items, size_t streams, size_t events)
{
    size_t sc = c->cap_streams, ec = c->cap_events;
    if (!reel_grow((void **)&c->items, &c->cap_items, c->nitems + items, sizeof *c->items))
        return false;
    if (!reel_grow((void **)&c->streams, &sc, c->nstreams + streams, sizeof *c->streams))
        return false;
    if (!reel_grow((void **)&c->last, &c->cap_streams, c->nstreams + streams, sizeof *c->last))
        return false;
    if (!reel_grow((void **)&c->events, &ec, c->nevents + events, sizeof *c->events))
        return false;
    return reel_grow((void **)&c->last_rec, &c->cap_events, c->nevents + events, sizeof *c->last_rec);
}

static int64_t append(host_capture *c, size_t slot, host_item *it, size_t evi, int64_t rec)
{
    int64_t idx = (int64_t)c->nitems++;
    c->items[idx] = (host_cap_item){ .it = it, .slot = slot, .evi = evi, .prev = c->last[slot], .rec = rec };
    c->last[slot] = idx;
    return idx;
}

static int64_t find_event(const host_capture *c, const reel_event *e)
{
    for (size_t i = 0; i < c->nevents; i++)
        if (c->events[i] == e)
            return (int64_t)i;
    return -1;
}

reel_status reel_host_capture_item(host_be *hb, reel_stream *s, host_item *it)
{
    (void)hb;
    if (!reserve(s->cap, 1, 0, 0))
        return REEL_E_OOM;
    append(s->cap, s->cap_slot, it, 0, -1);
    return REEL_OK;
}

reel_status reel_host_capture_record(host_be *hb, reel_stream *s, reel_event *e, host_item *it)
{
    (void)hb;
    host_capture *c = s->cap;
    int64_t evi = find_event(c, e);
    if (!reserve(c, 1, 0, evi < 0 ? 1 : 0))
        return REEL_E_OOM;
    if (evi < 0) {
        evi = (int64_t)c->nevents++;
        c->events[evi] = e;
        e->refs++;
    }
    c->last_rec[evi] = append(c, s->cap_slot, it, (size_t)evi, -1);
    e->cap = c;
    return REEL_OK;
}

reel_status reel_host_capture_wait(host_be *hb, reel_stream *s, reel_event *e, host_item *it)
{
    (void)hb;
    host_capture *c = e->cap;
    int64_t evi = find_event(c, e);
    if (evi < 0)
        return REEL_E_INTERNAL;
    if (!reserve(c, 1, s->cap ? 0 : 1, 0))
        return REEL_E_OOM;
    if (!s->cap) {   /* fork: s joins the capture */
        s->cap = c;
        s->cap_slot = c->nstreams++;
        c->streams[s->cap_slot] = s;
        c->last[s->cap_slot] = -1;
    }
    append(c, s->cap_slot, it, (size_t)evi, c->last_rec[evi]);
    return REEL_OK;
}

/* Leaves every stream and event as it was before the capture. */
void reel_host_capture_discard(host_capture *c)
{
    for (size_t i = 0; i < c->nstreams; i++)
        c->streams[i]->cap = NULL;
    for (size_t i = 0; i < c->nevents; i++) {
        if (c->events[i]->cap == c)
            c->events[i]->cap = NULL;
        reel_host_event_unref(c->events[i]);
    }
    for (size_t i = 0; i < c->nitems; i++)
        reel_hfree(c->items[i].it);
    reel_hfree(c->items);
    reel_hfree(c->streams);
    reel_hfree(c->last);
    reel_hfree(c->events);
    reel_hfree(c->last_rec);
    reel_hfree(c->loop_cond);
    reel_hfree(c);
}

static reel_status capture_begin(reel_backend *be, reel_stream *origin, uint64_t *cond)
{
    host_be *hb = host_of(be);
    if (!origin)
        return reel_seterr(be->err, REEL_E_INVALID_ARG, "host capture_begin: stream is NULL");
    host_capture *c = reel_hcalloc(1, sizeof *c);
    if (c && cond && (c->loop_cond = reel_hcalloc(1, sizeof *c->loop_cond)) != NULL)
        *cond = (uint64_t)(uintptr_t)c->loop_cond;
    if (!c || !reserve(c, 0, 1, 0) || (cond && !c->loop_cond)) {
        if (c)
            reel_host_capture_discard(c);
        return reel_seterr(be->err, REEL_E_OOM, "host capture_begin: out of memory");
    }
    pthread_mutex_lock(&hb->mu);
    bool busy = origin->cap != NULL;
    if (!busy) {
        c->origin = origin;
        c->streams[0] = origin;
        c->last[0] = -1;
        c->nstreams = 1;
        origin->cap = c;
        origin->cap_slot = 0;
    }
    unsigned id = origin->id;
    pthread_mutex_unlock(&hb->mu);
    if (busy) {
        reel_host_capture_discard(c);
        return reel_seterr(be->err, REEL_E_INVALID_USAGE, "host capture_begin: stream %u is already capturing", id);
    }
    return REEL_OK;
}

reel_status reel_host_capture_begin(reel_backend *be, reel_stream *origin)
{
    return capture_begin(be, origin, NULL);
}

/* A loop's body: the graph keeps the condition word the body's kernels set
 * through *cond (its address). */
reel_status reel_host_loop_capture_begin(reel_backend *be, reel_stream *origin, uint64_t *cond)
{
    if (!cond)
        return reel_seterr(be->err, REEL_E_INVALID_ARG, "host loop_capture_begin: cond is NULL");
    return capture_begin(be, origin, cond);
}

/* The first slot whose last item the origin's last item does not depend on
 * (following stream order and record->wait edges); 0 if every stream was
 * joined back, -1 when out of memory. */
static int64_t unjoined_slot(const host_capture *c)
{
    if (c->nstreams == 1)
        return 0;
    bool *seen = reel_hcalloc(c->nitems, sizeof *seen);
    int64_t *stack = reel_halloc(2 * c->nitems * sizeof *stack + sizeof *stack);
    int64_t top = 0, bad = 0;
    if (!seen || !stack) {
        bad = -1;
        goto done;
    }
    if (c->last[0] >= 0)
        stack[top++] = c->last[0];
    while (top > 0) {
        int64_t i = stack[--top];
        if (i < 0 || seen[i])
            continue;
        seen[i] = true;
        stack[top++] = c->items[i].prev;
        if (c->items[i].it->kind == HOST_WAIT)
            stack[top++] = c->items[i].rec;
    }
    for (size_t s = 1; s < c->nstreams && !bad; s++)
        if (c->last[s] >= 0 && !seen[c->last[s]])
            bad = (int64_t)s;
done:
    reel_hfree(seen);
    reel_hfree(stack);
    return bad;
}

reel_status reel_host_capture_end(reel_backend *be, reel_stream *origin, reel_exec_graph **out)
{
    host_be *hb = host_of(be);
    if (!origin || !out)
        return reel_seterr(be->err, REEL_E_INVALID_ARG, "host capture_end: %s is NULL", origin ? "out" : "stream");
    *out = NULL;
    pthread_mutex_lock(&hb->mu);
    host_capture *c = origin->cap;
    unsigned id = origin->id;
    if (!c || c->origin != origin) {
        pthread_mutex_unlock(&hb->mu);
        return reel_seterr(be->err, REEL_E_INVALID_USAGE, "host capture_end: stream %u is not the origin of a capture", id);
    }
    reel_status st = REEL_OK;
    int64_t bad = unjoined_slot(c);
    if (bad > 0) {
        st = REEL_E_INVALID_USAGE;
        reel_seterr(be->err, st, "host capture_end: stream %u not joined before capture end (capture of stream %u)",
                    c->streams[bad]->id, id);
    } else if (bad < 0 || (st = reel_host_graph_build(hb, c, out)) != REEL_OK) {
        st = reel_seterr(be->err, REEL_E_OOM, "host capture_end: out of memory building the graph of stream %u", id);
    }
    reel_host_capture_discard(c);
    pthread_mutex_unlock(&hb->mu);
    return st;
}

void reel_host_capture_abort(reel_backend *be, reel_stream *origin)
{
    host_be *hb = host_of(be);
    if (!origin)
        return;
    pthread_mutex_lock(&hb->mu);
    if (origin->cap)
        reel_host_capture_discard(origin->cap);
    pthread_mutex_unlock(&hb->mu);
}

bool reel_host_capturing(reel_backend *be, reel_stream *s)
{
    host_be *hb = host_of(be);
    if (!s)
        return false;
    pthread_mutex_lock(&hb->mu);
    bool on = s->cap != NULL;
    pthread_mutex_unlock(&hb->mu);
    return on;
}
