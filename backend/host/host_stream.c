/* Host streams: create, destroy, sync, and issue (run now, or recorded into
 * the stream's capture); the worker thread is host_queue.c's. */
#include <errno.h>
#include <string.h>
#include <time.h>

#include "core/halloc.h"
#include "core/err.h"
#include "backend/host/host_internal.h"

reel_status reel_host_stream_create(reel_backend *be, reel_stream **out)
{
    host_be *hb = host_of(be);
    if (!out)
        return reel_seterr(be->err, REEL_E_INVALID_ARG, "host stream_create: out is NULL");
    *out = NULL;
    reel_stream *s = reel_hcalloc(1, sizeof *s);
    int err = 0;
    if (!s)
        return reel_seterr(be->err, REEL_E_OOM, "host stream_create: out of memory");
    s->hb = hb;
    s->refs = 1;
    if ((err = pthread_cond_init(&s->cv_work, NULL)) != 0)
        goto fail_free;
    if ((err = pthread_cond_init(&s->cv_idle, NULL)) != 0)
        goto fail_cv;
    pthread_mutex_lock(&hb->mu);
    s->id = hb->next_id++;
    s->rng = reel_host_jitter_seed(hb->jitter_seed, s->id);
    pthread_mutex_unlock(&hb->mu);
    if ((err = pthread_create(&s->thread, NULL, reel_host_stream_main, s)) != 0)
        goto fail_cv2;
    pthread_mutex_lock(&hb->mu);
    s->next_all = hb->streams;
    hb->streams = s;
    pthread_mutex_unlock(&hb->mu);
    *out = s;
    return REEL_OK;
fail_cv2:
    pthread_cond_destroy(&s->cv_idle);
fail_cv:
    pthread_cond_destroy(&s->cv_work);
fail_free:
    reel_hfree(s);
    return reel_seterr(be->err, REEL_E_BACKEND, "host stream_create: cannot start a stream thread: %s",
                       strerror(err));
}

/* Waits (mu held) until every item pushed so far has finished. */
static void drain_locked(host_be *hb, reel_stream *s)
{
    uint64_t target = s->enqueued;
    while (s->done < target)
        pthread_cond_wait(&s->cv_idle, &hb->mu);
}

void reel_host_stream_destroy(reel_backend *be, reel_stream *s)
{
    host_be *hb = host_of(be);
    if (!s)
        return;
    pthread_mutex_lock(&hb->mu);
    /* A capture that loses one of its streams cannot be ended any more. */
    if (s->cap)
        reel_host_capture_discard(s->cap);
    drain_locked(hb, s);
    pthread_mutex_unlock(&hb->mu);
    reel_host_stream_release(hb, s);
}

reel_status reel_host_stream_sync(reel_backend *be, reel_stream *s)
{
    host_be *hb = host_of(be);
    if (!s)
        return reel_seterr(be->err, REEL_E_INVALID_ARG, "host stream_sync: stream is NULL");
    pthread_mutex_lock(&hb->mu);
    if (s->cap) {
        unsigned id = s->id;
        pthread_mutex_unlock(&hb->mu);
        return reel_seterr(be->err, REEL_E_INVALID_USAGE, "host stream_sync: stream %u is capturing", id);
    }
    drain_locked(hb, s);
    pthread_mutex_unlock(&hb->mu);
    return REEL_OK;
}

reel_status reel_host_issue(reel_backend *be, reel_stream *s, host_item *it, const char *what)
{
    host_be *hb = host_of(be);
    reel_status st = REEL_OK;
    pthread_mutex_lock(&hb->mu);
    if (it->kind == HOST_KERNEL)
        it->tag = hb->tag;
    if (s->cap)
        st = reel_host_capture_item(hb, s, it);
    else
        reel_host_stream_push(s, it);
    if (st != REEL_OK)
        reel_host_item_free(hb, it);
    pthread_mutex_unlock(&hb->mu);
    if (st != REEL_OK)
        return reel_seterr(be->err, st, "host %s: cannot record into the capture: out of memory", what);
    return REEL_OK;
}
