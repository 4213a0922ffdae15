/* CUDA backend: streams (each with its matmul workspace, from its first matmul),
 * pooled events, device and pinned memory, stream-ordered copies and fills. */
#include "core/halloc.h"
#include "backend/cuda/cuda_impl.h"

reel_status reel_cuda_stream_create(reel_backend *be, reel_stream **out)
{
    reel_status st;
    *out = NULL;
    REEL_TRY(reel_cuda_use_device(be));
    reel_stream *s = reel_hcalloc(1, sizeof *s);
    if (!s)
        return reel_seterr(be->err, REEL_E_OOM, "cuda stream: out of host memory");
    if ((st = REEL_CK(be, cudaStreamCreateWithFlags(&s->s, cudaStreamNonBlocking))) != REEL_OK)
        goto fail;
    s->ws_want = reel_cuda_of(be)->ws_bytes;
    *out = s;
    return REEL_OK;
fail:
    reel_cuda_stream_destroy(be, s);
    return st;
}

/* The size the stream's workspace takes at its first matmul: a plan's
 * reservation, made before any of its launches, and never less than
 * REEL_CUDA_WS_MIN (classic cuBLAS is never handed a NULL workspace: it
 * would take its handle's own, shared by every stream). The algorithms
 * chosen depend on it, so an allocated workspace never changes size. */
reel_status reel_cuda_stream_reserve_ws(reel_backend *be, reel_stream *s, size_t bytes)
{
    if (!s)
        return reel_seterr(be->err, REEL_E_INVALID_ARG, "cuda stream_reserve_ws: the stream is NULL");
    bytes = bytes < REEL_CUDA_WS_MIN ? REEL_CUDA_WS_MIN : (bytes + 4095) / 4096 * 4096;
#if defined(REEL_CUDA_WS_RESERVE) && !REEL_CUDA_WS_RESERVE /* bench/gpu.sh ab: every stream at the full size */
    bytes = s->ws_want;
#endif
    if (s->ws && bytes != s->ws_bytes)
        return reel_seterr(be->err, REEL_E_INVALID_USAGE,
                           "cuda stream_reserve_ws: the stream's matmul workspace is allocated (%zu bytes); "
                           "%zu bytes would change the algorithms chosen for it",
                           s->ws_bytes, bytes);
    s->ws_want = bytes;
    return REEL_OK;
}

size_t reel_cuda_stream_ws_held(reel_backend *be, reel_stream *s)
{
    (void)be;
    return s && s->ws ? s->ws_bytes : 0;
}

void reel_cuda_stream_destroy(reel_backend *be, reel_stream *s)
{
    if (!s)
        return;
    /* Destructors keep the context's message: it may explain why we are
     * cleaning up. cudaFree waits for the stream's pending work. */
    (void)reel_cuda_use_device(be);
    if (s->ws)
        (void)REEL_CK_QUIET(cudaFree(s->ws));
    if (s->s)
        (void)REEL_CK_QUIET(cudaStreamDestroy(s->s));
    reel_hfree(s);
}

reel_status reel_cuda_stream_sync(reel_backend *be, reel_stream *s)
{
    REEL_TRY(reel_cuda_use_device(be));
    return REEL_CK(be, cudaStreamSynchronize(s->s));
}

reel_status reel_cuda_event_create(reel_backend *be, reel_event **out)
{
    reel_cuda *c = reel_cuda_of(be);
    pthread_mutex_lock(&c->lock);
    reel_event *e = c->free_events;
    if (e)
        c->free_events = e->next_free;
    pthread_mutex_unlock(&c->lock);
    if (e) {
        e->next_free = NULL;
        *out = e;
        return REEL_OK;
    }
    *out = NULL;
    REEL_TRY(reel_cuda_use_device(be));
    e = reel_hcalloc(1, sizeof *e);
    if (!e)
        return reel_seterr(be->err, REEL_E_OOM, "cuda event: out of host memory");
    /* Timing off: ordering events are cheaper to record and wait on. */
    reel_status st = REEL_CK(be, cudaEventCreateWithFlags(&e->ev, cudaEventDisableTiming));
    if (st != REEL_OK) {
        reel_hfree(e);
        return st;
    }
    *out = e;
    return REEL_OK;
}

void reel_cuda_event_destroy(reel_backend *be, reel_event *e)
{
    if (!e)
        return;
    if (e->timed) {
        (void)reel_cuda_use_device(be);
        (void)REEL_CK_QUIET(cudaEventDestroy(e->ev));
        reel_hfree(e);
        return;
    }
    reel_cuda *c = reel_cuda_of(be);
    pthread_mutex_lock(&c->lock);
    e->next_free = c->free_events;
    c->free_events = e;
    pthread_mutex_unlock(&c->lock);
}

void reel_cuda_event_pool_drain(reel_backend *be)
{
    reel_cuda *c = reel_cuda_of(be);
    pthread_mutex_lock(&c->lock);
    reel_event *e = c->free_events;
    c->free_events = NULL;
    pthread_mutex_unlock(&c->lock);
    while (e) {
        reel_event *next = e->next_free;
        (void)REEL_CK_QUIET(cudaEventDestroy(e->ev));
        reel_hfree(e);
        e = next;
    }
}

/* Timers keep timing on (ordering events turn it off) and are not pooled,
 * so a pooled event never pays for timing. */
reel_status reel_cuda_timer_create(reel_backend *be, reel_event **out)
{
    *out = NULL;
    REEL_TRY(reel_cuda_use_device(be));
    reel_event *e = reel_hcalloc(1, sizeof *e);
    if (!e)
        return reel_seterr(be->err, REEL_E_OOM, "cuda timer: out of host memory");
    reel_status st = REEL_CK(be, cudaEventCreateWithFlags(&e->ev, cudaEventDefault));
    if (st != REEL_OK) {
        reel_hfree(e);
        return st;
    }
    e->timed = true;
    *out = e;
    return REEL_OK;
}

reel_status reel_cuda_timer_elapsed_us(reel_backend *be, reel_event *a, reel_event *b, double *us)
{
    float ms = 0.0f;
    REEL_TRY(REEL_CK(be, cudaEventElapsedTime(&ms, a->ev, b->ev)));
    *us = (double)ms * 1e3;
    return REEL_OK;
}

reel_status reel_cuda_event_record(reel_backend *be, reel_event *e, reel_stream *s)
{
    return REEL_CK(be, cudaEventRecord(e->ev, s->s));
}

reel_status reel_cuda_stream_wait(reel_backend *be, reel_stream *s, reel_event *e)
{
    return REEL_CK(be, cudaStreamWaitEvent(s->s, e->ev, 0));
}

reel_status reel_cuda_event_query(reel_backend *be, reel_event *e, bool *done)
{
    cudaError_t r = cudaEventQuery(e->ev);
    *done = r == cudaSuccess;
    if (r == cudaErrorNotReady) {
        (void)cudaGetLastError(); /* not an error: keep it out of later launch checks */
        return REEL_OK;
    }
    return reel_cuda_status(be->err, r, __FILE__, __LINE__, "cudaEventQuery");
}

reel_status reel_cuda_event_sync(reel_backend *be, reel_event *e)
{
    return REEL_CK(be, cudaEventSynchronize(e->ev));
}

reel_status reel_cuda_mem_info(reel_backend *be, size_t *avail, size_t *total, const char **bound)
{
    if (bound)
        *bound = "the device's free memory; device memory";
    REEL_TRY(reel_cuda_use_device(be));
    return REEL_CK(be, cudaMemGetInfo(avail, total));
}

reel_status reel_cuda_dev_alloc(reel_backend *be, size_t bytes, void **out)
{
    *out = NULL;
    REEL_TRY(reel_cuda_use_device(be));
    /* cudaMalloc(0) gives NULL; a distinct pointer keeps callers simple. */
    return REEL_CK(be, cudaMalloc(out, bytes ? bytes : 1));
}

void reel_cuda_dev_free(reel_backend *be, void *p)
{
    if (p)
        (void)REEL_CK_QUIET(cudaFree(p));
}

reel_status reel_cuda_pinned_alloc(reel_backend *be, size_t bytes, void **out)
{
    *out = NULL;
    REEL_TRY(reel_cuda_use_device(be));
    return REEL_CK(be, cudaHostAlloc(out, bytes ? bytes : 1, cudaHostAllocDefault));
}

void reel_cuda_pinned_free(reel_backend *be, void *p)
{
    if (p)
        (void)REEL_CK_QUIET(cudaFreeHost(p));
}

reel_status reel_cuda_copy(reel_backend *be, reel_stream *s, void *dst, const void *src, size_t bytes,
                           reel_copy_kind k)
{
    static const enum cudaMemcpyKind kinds[] = {
        [REEL_COPY_H2D] = cudaMemcpyHostToDevice,
        [REEL_COPY_D2H] = cudaMemcpyDeviceToHost,
        [REEL_COPY_D2D] = cudaMemcpyDeviceToDevice,
    };
    if ((int)k < 0 || k > REEL_COPY_D2D)
        return reel_seterr(be->err, REEL_E_INVALID_ARG, "cuda copy: unknown copy kind %d", (int)k);
    if (bytes == 0)
        return REEL_OK;
    return REEL_CK(be, cudaMemcpyAsync(dst, src, bytes, kinds[k], s->s));
}

reel_status reel_cuda_fill(reel_backend *be, reel_stream *s, void *dst, int byte, size_t bytes)
{
    if (bytes == 0)
        return REEL_OK;
    return REEL_CK(be, cudaMemsetAsync(dst, byte, bytes, s->s));
}
