/* The host backend's floor: items, the FIFO of a stream and its worker
 * thread, and events' generation counters (CUDA semantics: a wait or sync
 * refers to the most recent record at the time of the call, later records
 * do not change it; an event never recorded is complete). The other host
 * files call down into this one and it calls none of them:
 * host_backend.c (the table) -> host_stream.c, host_event.c -> host_capture.c
 * -> host_graph.c -> here. */
#include <errno.h>
#include <string.h>
#include <time.h>

#include "core/halloc.h"
#include "backend/host/host_internal.h"

reel_event *reel_host_event_new(void)
{
    reel_event *e = reel_hcalloc(1, sizeof *e);
    if (e)
        e->refs = 1;
    return e;
}

void reel_host_event_unref(reel_event *e)
{
    if (--e->refs == 0)
        reel_hfree(e);
}

bool reel_host_gen_done(const reel_event *e, uint64_t gen)
{
    for (const host_item *p = e->pending; p; p = p->pend_next)
        if (p->gen == gen)
            return false;
    return true;
}

void reel_host_record_push(reel_stream *s, reel_event *e, host_item *it)
{
    e->refs++;
    it->ev = e;
    it->gen = ++e->issued;
    it->pend_next = e->pending;
    e->pending = it;
    e->cap = NULL;
    reel_host_stream_push(s, it);
}

void reel_host_wait_push(reel_stream *s, reel_event *e, host_item *it)
{
    e->refs++;
    it->ev = e;
    it->gen = e->issued;
    reel_host_stream_push(s, it);
}

void reel_host_record_done(host_be *hb, host_item *it)
{
    for (host_item **p = &it->ev->pending; *p; p = &(*p)->pend_next)
        if (*p == it) {
            *p = it->pend_next;
            break;
        }
    pthread_cond_broadcast(&hb->ev_cv);
}

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

/* A stream's worker thread: runs its FIFO until stopped and drained. */
void *reel_host_stream_main(void *arg)
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
