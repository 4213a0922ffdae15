/* Host events: the backend's event calls (record, wait, query, sync,
 * timers) over host_queue.c's generation counters. */
#include "core/halloc.h"
#include "core/err.h"
#include "backend/host/host_internal.h"

reel_status reel_host_event_create(reel_backend *be, reel_event **out)
{
    if (!out)
        return reel_seterr(be->err, REEL_E_INVALID_ARG, "host event_create: out is NULL");
    *out = reel_host_event_new();
    if (!*out)
        return reel_seterr(be->err, REEL_E_OOM, "host event_create: out of memory");
    return REEL_OK;
}

/* Pending records and captures keep their own references, so destroying
 * the handle early is allowed (as with cudaEventDestroy). */
void reel_host_event_destroy(reel_backend *be, reel_event *e)
{
    host_be *hb = host_of(be);
    if (!e)
        return;
    pthread_mutex_lock(&hb->mu);
    reel_host_event_unref(e);
    pthread_mutex_unlock(&hb->mu);
}

reel_status reel_host_event_record(reel_backend *be, reel_event *e, reel_stream *s)
{
    host_be *hb = host_of(be);
    if (!e || !s)
        return reel_seterr(be->err, REEL_E_INVALID_ARG, "host event_record: %s is NULL", e ? "stream" : "event");
    host_item *it = reel_host_item_new(HOST_RECORD, 0);
    if (!it)
        return reel_seterr(be->err, REEL_E_OOM, "host event_record: out of memory");
    reel_status st = REEL_OK;
    pthread_mutex_lock(&hb->mu);
    if (s->cap)
        st = reel_host_capture_record(hb, s, e, it);
    else
        reel_host_record_push(s, e, it);
    if (st != REEL_OK)
        reel_host_item_free(hb, it);
    pthread_mutex_unlock(&hb->mu);
    if (st != REEL_OK)
        return reel_seterr(be->err, st, "host event_record: cannot record into the capture: out of memory");
    return REEL_OK;
}

/* The cases of a wait, mu held. Returns the status; *msg says why on error. */
static reel_status wait_locked(host_be *hb, reel_stream *s, reel_event *e, host_item *it, const char **msg)
{
    if (e->cap) {
        if (s->cap && s->cap != e->cap) {
            *msg = "the event was recorded in another stream's capture";
            return REEL_E_INVALID_USAGE;
        }
        reel_status st = reel_host_capture_wait(hb, s, e, it);
        *msg = st == REEL_E_OOM ? "out of memory" : "internal: the captured event is missing from its capture";
        return st;
    }
    if (s->cap) {
        /* A never-recorded event is complete: nothing to record. Work
         * outside the capture cannot become a node of the graph. */
        if (e->issued == 0) {
            reel_hfree(it);
            return REEL_OK;
        }
        *msg = "the stream is capturing and the event was last recorded outside the capture";
        return REEL_E_INVALID_USAGE;
    }
    reel_host_wait_push(s, e, it);
    return REEL_OK;
}

reel_status reel_host_stream_wait(reel_backend *be, reel_stream *s, reel_event *e)
{
    host_be *hb = host_of(be);
    if (!e || !s)
        return reel_seterr(be->err, REEL_E_INVALID_ARG, "host stream_wait: %s is NULL", e ? "stream" : "event");
    host_item *it = reel_host_item_new(HOST_WAIT, 0);
    if (!it)
        return reel_seterr(be->err, REEL_E_OOM, "host stream_wait: out of memory");
    const char *msg = "";
    pthread_mutex_lock(&hb->mu);
    unsigned id = s->id;
    reel_status st = wait_locked(hb, s, e, it, &msg);
    if (st != REEL_OK)
        reel_host_item_free(hb, it);
    pthread_mutex_unlock(&hb->mu);
    if (st != REEL_OK)
        return reel_seterr(be->err, st, "host stream_wait on stream %u: %s", id, msg);
    return REEL_OK;
}

reel_status reel_host_event_query(reel_backend *be, reel_event *e, bool *done)
{
    host_be *hb = host_of(be);
    if (!e || !done)
        return reel_seterr(be->err, REEL_E_INVALID_ARG, "host event_query: %s is NULL", e ? "done" : "event");
    pthread_mutex_lock(&hb->mu);
    bool captured = e->cap != NULL;
    if (!captured)
        *done = reel_host_gen_done(e, e->issued);
    pthread_mutex_unlock(&hb->mu);
    if (captured)
        return reel_seterr(be->err, REEL_E_INVALID_USAGE,
                           "host event_query: the event was last recorded in a capture in progress");
    return REEL_OK;
}

reel_status reel_host_event_sync(reel_backend *be, reel_event *e)
{
    host_be *hb = host_of(be);
    if (!e)
        return reel_seterr(be->err, REEL_E_INVALID_ARG, "host event_sync: event is NULL");
    pthread_mutex_lock(&hb->mu);
    bool captured = e->cap != NULL;
    uint64_t gen = e->issued;
    while (!captured && !reel_host_gen_done(e, gen))
        pthread_cond_wait(&hb->ev_cv, &hb->mu);
    pthread_mutex_unlock(&hb->mu);
    if (captured)
        return reel_seterr(be->err, REEL_E_INVALID_USAGE,
                           "host event_sync: the event was last recorded in a capture in progress");
    return REEL_OK;
}

reel_status reel_host_timer_create(reel_backend *be, reel_event **out)
{
    REEL_TRY(reel_host_event_create(be, out));
    (*out)->timed = true;
    return REEL_OK;
}

/* Both timers recorded, outside a capture, and their last records run. */
reel_status reel_host_timer_elapsed_us(reel_backend *be, reel_event *a, reel_event *b, double *us)
{
    host_be *hb = host_of(be);
    if (!a || !b || !us)
        return reel_seterr(be->err, REEL_E_INVALID_ARG, "host timer_elapsed: NULL argument");
    const char *why = NULL;
    pthread_mutex_lock(&hb->mu);
    if (!a->timed || !b->timed)
        why = "an event is not a timer";
    else if (a->issued == 0 || b->issued == 0)
        why = "a timer was never recorded";
    else if (a->cap || b->cap)
        why = "a timer was last recorded in a capture";
    else if (!reel_host_gen_done(a, a->issued) || !reel_host_gen_done(b, b->issued))
        why = "a timer's record has not run yet";
    else
        *us = b->stamp_us - a->stamp_us;
    pthread_mutex_unlock(&hb->mu);
    if (why)
        return reel_seterr(be->err, REEL_E_INVALID_USAGE, "host timer_elapsed: %s", why);
    return REEL_OK;
}
