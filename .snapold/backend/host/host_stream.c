/* Host streams: one worker thread per stream running a FIFO of items. */
#include <errno.h>
#include <string.h>
#include <time.h>

#include "core/halloc.h"
#include "core/err.h"
#include "backend/host/host_internal.h"

host_item *reel_host_item_new(host_item_kind kind, size_t args_size)
{
    host_item *it = reel_halloc(offsetof(host_item, args) + args_size);
    if (!it)
        return NULL;
    memset(it, 0, sizeof *it);
    it->kind = kind;
    it->args_size = args_size;
    return it;
}

/* A fresh copy of a recorded template (no links, no event reference). */
host_item *reel_host_item_clone(const host_item *t)
{
    host_item *it = reel_host_item_new(t->kind, t->args_size);
    if (!it)
        return NULL;
    memcpy(it, t, offsetof(host_item, args) + t->args_size);
    it->next = it->pend_next = NULL;
    it->ev = NULL;
    it->gen = 0;
    return it;
}

void reel_host_item_free(host_be *hb, host_item *it)
{
    (void)hb;
    if (!it)
        return;
    if (it->ev)
        reel_host_event_unref(it->ev);
    reel_hfree(it);
}

void reel_host_stream_push(reel_stream *s, host_item *it)
{
    it->next = NULL;
    if (s->tail)
        s->tail->next = it;
    else
        s->head = it;
    s->tail = it;
    s->enqueued++;
    pthread_cond_signal(&s->cv_work);
}

/* splitmix64: a per-stream generator, so no RNG state is shared. */
static uint64_t rng_next(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

uint64_t reel_host_jitter_seed(uint64_t seed, unsigned stream_id)
{
    uint64_t x = seed ^ ((uint64_t)stream_id * 0xd1b54a32d192ed03ull);
    return rng_next(&x);
}

static void sleep_us(unsigned us)
{
    struct timespec ts = { (time_t)(us / 1000000u), (long)(us % 1000000u) * 1000L };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

static void run_item(const host_item *it)
{
    switch (it->kind) {
    case HOST_KERNEL: it->fn(it->args); break;
    case HOST_COPY: memmove(it->dst, it->src, it->bytes); break;
    case HOST_FILL: memset(it->dst, it->byte, it->bytes); break;
    case HOST_RECORD:
    case HOST_WAIT: break;   /* handled under the lock */
    }
}

/* Runs one popped item with mu held on entry and exit. */
static void run_locked(host_be *hb, reel_stream *s, host_item *it)
{
    unsigned delay = hb->jitter_us ? (unsigned)(rng_next(&s->rng) % (hb->jitter_us + 1u)) : 0;
    if (delay || it->kind <= HOST_FILL) {
        reel_kernel_trace_fn trace = it->kind == HOST_KERNEL && it->tag ? hb->trace : NULL;
        void *user = hb->trace_user;
        pthread_mutex_unlock(&hb->mu);
        if (delay)
            sleep_us(delay);
        double t0 = trace ? now_us() : 0;
        run_item(it);
        if (trace)
            trace(user, it->tag, s, t0, now_us());
        pthread_mutex_lock(&hb->mu);
    }
    if (it->kind == HOST_WAIT)
        while (!reel_host_gen_done(it->ev, it->gen))
            pthread_cond_wait(&hb->ev_cv, &hb->mu);
    if (it->kind == HOST_RECORD) {
        if (it->ev->timed)
            it->ev->stamp_us = now_us();
        reel_host_record_done(hb, it);
    }
    s->done++;
    hb->items_run++;
    pthread_cond_broadcast(&s->cv_idle);
    reel_host_item_free(hb, it);
}

static void *stream_main(void *arg)
{
    reel_stream *s = arg;
    host_be *hb = s->hb;
    pthread_mutex_lock(&hb->mu);
    for (;;) {
        while (!s->head && !s->stop)
            pthread_cond_wait(&s->cv_work, &hb->mu);
        host_item *it = s->head;
        if (!it)
            break;   /* stopped and drained */
        s->head = it->next;
        if (!s->head)
            s->tail = NULL;
        run_locked(hb, s, it);
    }
    pthread_mutex_unlock(&hb->mu);
    return NULL;
}

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
    if ((err = pthread_create(&s->thread, NULL, stream_main, s)) != 0)
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

static void unlink_stream(host_be *hb, reel_stream *s)
{
    for (reel_stream **p = &hb->streams; *p; p = &(*p)->next_all)
        if (*p == s) {
            *p = s->next_all;
            return;
        }
}

void reel_host_stream_release(host_be *hb, reel_stream *s)
{
    pthread_mutex_lock(&hb->mu);
    bool last = --s->refs == 0;
    if (last) {
        unlink_stream(hb, s);
        s->stop = true;
        pthread_cond_signal(&s->cv_work);
    }
    pthread_mutex_unlock(&hb->mu);
    if (!last)
        return;
    pthread_join(s->thread, NULL);
    pthread_cond_destroy(&s->cv_work);
    pthread_cond_destroy(&s->cv_idle);
    reel_hfree(s);
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
