/* The host backend: streams as worker threads, events, capture and replay
 * of recorded graphs, host memory standing in for device memory. It is how
 * CI (no GPU) runs every stream, event and graph path of reel. */
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/halloc.h"
#include "core/err.h"
#include "backend/host/host_internal.h"

/* Device memory is host memory, aligned like a GPU allocation would be for
 * vector loads. */
static reel_status host_alloc(reel_backend *be, size_t bytes, void **out, const char *what)
{
    if (!out)
        return reel_seterr(be->err, REEL_E_INVALID_ARG, "host %s: out is NULL", what);
    char why[160];
    *out = NULL;
    if (!reel_hmem_fits(bytes, why, sizeof why))
        return reel_seterr(be->err, REEL_E_OOM, "host %s: %s", what, why);
    *out = reel_haligned(64, bytes);
    if (!*out)
        return reel_seterr(be->err, REEL_E_OOM, "host %s: cannot allocate %zu bytes", what, bytes);
    return REEL_OK;
}

static reel_status host_dev_alloc(reel_backend *be, size_t bytes, void **out)
{
    return host_alloc(be, bytes, out, "dev_alloc");
}

/* "Pinned" memory on the host backend is plain pages straight from the
 * kernel, never from jemalloc: the pinned staging arena calls this from
 * inside jemalloc's extent hooks, where allocating through jemalloc again
 * is not safe. One page in front holds the mapping's length. */
static reel_status host_pinned_alloc(reel_backend *be, size_t bytes, void **out)
{
    if (!out)
        return reel_seterr(be->err, REEL_E_INVALID_ARG, "host pinned_alloc: out is NULL");
    char why[160];
    *out = NULL;
    if (!reel_hmem_fits(bytes, why, sizeof why))
        return reel_seterr(be->err, REEL_E_OOM, "host pinned_alloc: %s", why);
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t len = (bytes + page - 1) / page * page + page;
    void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
        *out = NULL;
        return reel_seterr(be->err, REEL_E_OOM, "host pinned_alloc: cannot map %zu bytes", bytes);
    }
    *(size_t *)m = len;
    *out = (char *)m + page;
    return REEL_OK;
}

static void host_pinned_free(reel_backend *be, void *p)
{
    (void)be;
    if (!p)
        return;
    char *m = (char *)p - sysconf(_SC_PAGESIZE);
    munmap(m, *(size_t *)m);
}

static void host_mem_free(reel_backend *be, void *p)
{
    (void)be;
    reel_hfree(p);
}

static reel_status host_copy(reel_backend *be, reel_stream *s, void *dst, const void *src, size_t bytes,
                             reel_copy_kind k)
{
    (void)k;   /* one address space: every kind is a memmove */
    if (!s || ((!dst || !src) && bytes))
        return reel_seterr(be->err, REEL_E_INVALID_ARG, "host copy: %s is NULL", !s ? "stream" : "a pointer");
    host_item *it = reel_host_item_new(HOST_COPY, 0);
    if (!it)
        return reel_seterr(be->err, REEL_E_OOM, "host copy: out of memory");
    it->dst = dst;
    it->src = src;
    it->bytes = bytes;
    return reel_host_issue(be, s, it, "copy");
}

static reel_status host_fill(reel_backend *be, reel_stream *s, void *dst, int byte, size_t bytes)
{
    if (!s || (!dst && bytes))
        return reel_seterr(be->err, REEL_E_INVALID_ARG, "host fill: %s is NULL", !s ? "stream" : "dst");
    host_item *it = reel_host_item_new(HOST_FILL, 0);
    if (!it)
        return reel_seterr(be->err, REEL_E_OOM, "host fill: out of memory");
    it->dst = dst;
    it->byte = byte;
    it->bytes = bytes;
    return reel_host_issue(be, s, it, "fill");
}

static void host_destroy(reel_backend *be);

static void host_set_tag(reel_backend *be, int tag)
{
    host_be *hb = host_of(be);
    pthread_mutex_lock(&hb->mu);
    hb->tag = tag;
    pthread_mutex_unlock(&hb->mu);
}

static void host_set_trace(reel_backend *be, reel_kernel_trace_fn fn, void *user)
{
    host_be *hb = host_of(be);
    pthread_mutex_lock(&hb->mu);
    hb->trace = fn;
    hb->trace_user = user;
    pthread_mutex_unlock(&hb->mu);
}

/* The host backend's "device" memory is the process's. */
static reel_status host_mem_info(reel_backend *be, size_t *avail, size_t *total, const char **bound)
{
    (void)be;
    reel_hmem_info(avail, total, bound);
    return REEL_OK;
}

static const reel_backend_vt host_vt = {
    .destroy = host_destroy,
    .stream_create = reel_host_stream_create,
    .stream_destroy = reel_host_stream_destroy,
    .stream_sync = reel_host_stream_sync,
    .event_create = reel_host_event_create,
    .event_destroy = reel_host_event_destroy,
    .event_record = reel_host_event_record,
    .stream_wait = reel_host_stream_wait,
    .event_query = reel_host_event_query,
    .event_sync = reel_host_event_sync,
    .dev_alloc = host_dev_alloc,
    .dev_free = host_mem_free,
    .pinned_alloc = host_pinned_alloc,
    .pinned_free = host_pinned_free,
    .copy = host_copy,
    .fill = host_fill,
    .capture_begin = reel_host_capture_begin,
    .capture_end = reel_host_capture_end,
    .loop_capture_begin = reel_host_loop_capture_begin,
    .capture_abort = reel_host_capture_abort,
    .capturing = reel_host_capturing,
    .graph_launch = reel_host_graph_launch,
    .graph_destroy = reel_host_graph_destroy,
    .graph_kernels = reel_host_graph_kernels,
    .graph_update = NULL,   /* replay re-reads nothing, so there is nothing to update */
    .set_tag = host_set_tag,
    .set_trace = host_set_trace,
    .timer_create = reel_host_timer_create,
    .timer_elapsed_us = reel_host_timer_elapsed_us,
    .mem_info = host_mem_info,
};

reel_status reel_host_launch(reel_backend *be, reel_stream *s, reel_host_fn fn, const void *args, size_t size)
{
    if (!be || reel_backend_own_vt(be) != &host_vt)
        return reel_seterr(be ? be->err : NULL, REEL_E_INVALID_ARG, "reel_host_launch: not a host backend");
    if (!s || !fn || (!args && size))
        return reel_seterr(be->err, REEL_E_INVALID_ARG, "reel_host_launch: %s is NULL",
                           !s ? "stream" : !fn ? "fn" : "args");
    if (size > REEL_HOST_ARGS_MAX)
        return reel_seterr(be->err, REEL_E_INVALID_ARG, "reel_host_launch: %zu bytes of args exceed REEL_HOST_ARGS_MAX (%d)",
                           size, REEL_HOST_ARGS_MAX);
    host_item *it = reel_host_item_new(HOST_KERNEL, size);
    if (!it)
        return reel_seterr(be->err, REEL_E_OOM, "reel_host_launch: out of memory");
    it->fn = fn;
    if (size)
        memcpy(it->args, args, size);
    return reel_host_issue(be, s, it, "launch");
}

void reel_host_set_jitter(reel_backend *be, unsigned max_us, uint64_t seed)
{
    if (!be || reel_backend_own_vt(be) != &host_vt)
        return;
    host_be *hb = host_of(be);
    pthread_mutex_lock(&hb->mu);
    hb->jitter_us = max_us;
    hb->jitter_seed = seed;
    for (reel_stream *s = hb->streams; s; s = s->next_all)
        s->rng = reel_host_jitter_seed(seed, s->id);
    pthread_mutex_unlock(&hb->mu);
}

uint64_t reel_host_items_run(reel_backend *be)
{
    if (!be || reel_backend_own_vt(be) != &host_vt)
        return 0;
    host_be *hb = host_of(be);
    pthread_mutex_lock(&hb->mu);
    uint64_t n = hb->items_run;
    pthread_mutex_unlock(&hb->mu);
    return n;
}

unsigned reel_host_stream_id(reel_backend *be, reel_stream *s)
{
    (void)be;
    return s ? s->id : 0;
}

static void probe_caps(reel_device_caps *caps)
{
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    memset(caps, 0, sizeof *caps);
    caps->sm_count = cores > 0 ? (int)cores : 1;
    caps->is_gpu = false;
    caps->total_mem = pages > 0 && page > 0 ? (size_t)pages * (size_t)page : 0;
    strcpy(caps->name, "host");
}

reel_status reel_host_backend_create(reel_err *err, reel_backend **out)
{
    if (!out)
        return reel_seterr(err, REEL_E_INVALID_ARG, "host backend: out is NULL");
    *out = NULL;
    host_be *hb = reel_hcalloc(1, sizeof *hb);
    if (!hb)
        return reel_seterr(err, REEL_E_OOM, "host backend: out of memory");
    int rc = pthread_mutex_init(&hb->mu, NULL);
    if (rc)
        goto fail;
    if ((rc = pthread_cond_init(&hb->ev_cv, NULL)) != 0) {
        pthread_mutex_destroy(&hb->mu);
        goto fail;
    }
    hb->base.vt = &host_vt;
    hb->base.kind = REEL_BACKEND_HOST;
    hb->base.err = err;
    hb->base.impl = hb;
    probe_caps(&hb->base.caps);
    *out = &hb->base;
    return REEL_OK;
fail:
    reel_hfree(hb);
    return reel_seterr(err, REEL_E_BACKEND, "host backend: cannot initialize its lock: %s", strerror(rc));
}

/* Drains and joins every stream thread, including streams still held by
 * graphs the caller did not destroy (their graphs must not be used after). */
static void host_destroy(reel_backend *be)
{
    if (!be)
        return;
    host_be *hb = host_of(be);
    pthread_mutex_lock(&hb->mu);
    for (reel_stream *s = hb->streams; s; s = s->next_all)
        if (s->cap)
            reel_host_capture_discard(s->cap);
    reel_stream *all = hb->streams;
    hb->streams = NULL;
    for (reel_stream *s = all; s; s = s->next_all) {
        s->stop = true;
        pthread_cond_signal(&s->cv_work);
    }
    pthread_mutex_unlock(&hb->mu);
    while (all) {
        reel_stream *next = all->next_all;
        pthread_join(all->thread, NULL);
        pthread_cond_destroy(&all->cv_work);
        pthread_cond_destroy(&all->cv_idle);
        reel_hfree(all);
        all = next;
    }
    pthread_cond_destroy(&hb->ev_cv);
    pthread_mutex_destroy(&hb->mu);
    reel_hfree(hb);
}
