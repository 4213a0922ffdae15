/* CUDA backend: capability probe, creation and teardown,
 * and the accessors the CUDA kernels use. */
#include <string.h>

#include "core/halloc.h"
#include "backend/cuda/cuda_impl.h"

/* Matmul workspace per stream: cuBLASLt's recommendation for Hopper is
 * 32 MiB; older parts do with 4 MiB. Classic cuBLAS launches of at most
 * REEL_CUDA_WS_SMALL_ROWS rows are given 4 MiB: the decode's GEMMs measured
 * the same step with it (docs/decisions.md). */
#ifndef REEL_CUDA_WS_HOPPER_MIB /* bench/gpu.sh ab builds others */
#define REEL_CUDA_WS_HOPPER_MIB 32
#endif
#define REEL_CUDA_WS_HOPPER ((size_t)REEL_CUDA_WS_HOPPER_MIB << 20)
#define REEL_CUDA_WS_DEFAULT ((size_t)4 << 20)
#ifndef REEL_CUDA_WS_SMALL_ROWS /* bench/gpu.sh ab builds others (0: off) */
#define REEL_CUDA_WS_SMALL_ROWS 64
#endif
#define REEL_CUDA_WS_SMALL ((size_t)4 << 20)

size_t reel_cuda_matmul_ws_bytes(const reel_device_caps *caps, int64_t m)
{
    size_t full = caps->cc_major >= 9 ? REEL_CUDA_WS_HOPPER : REEL_CUDA_WS_DEFAULT;
    if (m <= REEL_CUDA_WS_SMALL_ROWS && REEL_CUDA_WS_SMALL < full)
        return REEL_CUDA_WS_SMALL;
    return full;
}

bool reel_cuda_available(void)
{
    int n = 0;
    if (REEL_CUDA_CHECK(NULL, cudaGetDeviceCount(&n)) != REEL_OK)
        return false;
    return n > 0;
}

cudaStream_t reel_cuda_stream_handle(reel_stream *s) { return s->s; }
cublasLtHandle_t reel_cuda_lt_handle(reel_backend *be) { return reel_cuda_of(be)->lt; }

/* Device memory may be allocated for the stream now: not while it is being
 * captured (the plan's warm-up makes every first use outside a capture). */
static reel_status outside_capture(reel_backend *be, reel_stream *s, const char *what)
{
    enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    REEL_TRY(REEL_CK(be, cudaStreamIsCapturing(s->s, &cs)));
    if (cs != cudaStreamCaptureStatusNone)
        return reel_seterr(be->err, REEL_E_BACKEND,
                           "cuda: the %s would be created inside a capture (its first use comes before the "
                           "capture, in the warm-up)",
                           what);
    return REEL_OK;
}

reel_status reel_cuda_stream_workspace(reel_backend *be, reel_stream *s, void **ws, size_t *bytes)
{
    if (!s->ws) {
        REEL_TRY(outside_capture(be, s, "matmul workspace"));
        REEL_TRY(REEL_CK(be, cudaMalloc(&s->ws, s->ws_want)));
        s->ws_bytes = s->ws_want;
    }
    *ws = s->ws;
    *bytes = s->ws_bytes;
    return REEL_OK;
}

reel_status reel_cuda_blas_begin(reel_backend *be, reel_stream *s, cublasHandle_t *h)
{
    reel_cuda *c = reel_cuda_of(be);
    void *ws;
    size_t bytes;
    *h = NULL;
    REEL_TRY(reel_cuda_stream_workspace(be, s, &ws, &bytes));
    pthread_mutex_lock(&c->blas_lock);
    reel_status st = REEL_OK;
    if (!c->blas && (st = outside_capture(be, s, "cuBLAS handle")) == REEL_OK)
        st = REEL_CK(be, cublasCreate(&c->blas));
    /* A user workspace keeps cuBLAS from allocating its own, which would be
     * illegal inside a capture. */
    if (st == REEL_OK)
        st = REEL_CK(be, cublasSetStream(c->blas, s->s));
    if (st == REEL_OK)
        st = REEL_CK(be, cublasSetWorkspace(c->blas, ws, bytes));
    if (st != REEL_OK) {
        pthread_mutex_unlock(&c->blas_lock);
        return st;
    }
    *h = c->blas;
    return REEL_OK;
}

void reel_cuda_blas_end(reel_backend *be) { pthread_mutex_unlock(&reel_cuda_of(be)->blas_lock); }

void reel_cuda_lt_tuned(reel_backend *be)
{
    reel_cuda *c = reel_cuda_of(be);
    pthread_mutex_lock(&c->lock);
    c->lt_tuned++;
    pthread_mutex_unlock(&c->lock);
}

int reel_cuda_lt_tuned_count(reel_backend *be)
{
    reel_cuda *c = reel_cuda_of(be);
    pthread_mutex_lock(&c->lock);
    int n = c->lt_tuned;
    pthread_mutex_unlock(&c->lock);
    return n;
}

/* Optimizations are gated on these probed values, never on the name. */
static reel_status probe_caps(reel_backend *be, int dev)
{
    reel_device_caps *caps = &be->caps;
    struct cudaDeviceProp prop;
    size_t free_b = 0;
    REEL_TRY(REEL_CK(be, cudaGetDeviceProperties(&prop, dev)));
    caps->cc_major = prop.major;
    caps->cc_minor = prop.minor;
    caps->sm_count = prop.multiProcessorCount;
    caps->is_gpu = true;
    caps->total_mem = prop.totalGlobalMem;
    REEL_TRY(REEL_CK(be, cudaMemGetInfo(&free_b, &caps->total_mem)));
    /* Names are short; a longer one is cut, which only affects display. */
    memcpy(caps->name, prop.name, sizeof caps->name - 1);
    caps->name[sizeof caps->name - 1] = 0;
    /* Programmatic dependent launch needs Hopper's grid dependency control. */
    caps->pdl = prop.major >= 9;
    /* A probe that fails means no cluster launches here: a capability that
     * is absent, not a broken backend. */
    if (REEL_CK_QUIET(reel_cuda_probe_clusters(prop.major, &caps->max_active_clusters)) != REEL_OK)
        caps->max_active_clusters = 0;
    return REEL_OK;
}

static void cuda_destroy(reel_backend *be)
{
    if (!be)
        return;
    reel_cuda *c = reel_cuda_of(be);
    if (c) {
        (void)REEL_CK_QUIET(cudaSetDevice(c->device));
        reel_cuda_event_pool_drain(be);
        if (c->lt)
            (void)REEL_CK_QUIET(cublasLtDestroy(c->lt));
        if (c->blas)
            (void)REEL_CK_QUIET(cublasDestroy(c->blas));
        pthread_mutex_destroy(&c->blas_lock);
        pthread_mutex_destroy(&c->lock);
        reel_hfree(c);
    }
    reel_hfree(be);
}

static const reel_backend_vt cuda_vt = {
    .destroy = cuda_destroy,
    .stream_create = reel_cuda_stream_create,
    .stream_destroy = reel_cuda_stream_destroy,
    .stream_sync = reel_cuda_stream_sync,
    .event_create = reel_cuda_event_create,
    .event_destroy = reel_cuda_event_destroy,
    .event_record = reel_cuda_event_record,
    .stream_wait = reel_cuda_stream_wait,
    .event_query = reel_cuda_event_query,
    .event_sync = reel_cuda_event_sync,
    .timer_create = reel_cuda_timer_create,
    .timer_elapsed_us = reel_cuda_timer_elapsed_us,
    .stream_reserve_ws = reel_cuda_stream_reserve_ws,
    .stream_ws_held = reel_cuda_stream_ws_held,
    .dev_alloc = reel_cuda_dev_alloc,
    .dev_free = reel_cuda_dev_free,
    .pinned_alloc = reel_cuda_pinned_alloc,
    .pinned_free = reel_cuda_pinned_free,
    .copy = reel_cuda_copy,
    .fill = reel_cuda_fill,
    .capture_begin = reel_cuda_capture_begin,
    .capture_end = reel_cuda_capture_end,
    .loop_capture_begin = reel_cuda_loop_capture_begin,
    .capture_abort = reel_cuda_capture_abort,
    .capturing = reel_cuda_capturing,
    .graph_launch = reel_cuda_graph_launch,
    .graph_destroy = reel_cuda_graph_destroy,
    .graph_update = reel_cuda_graph_update,
    .graph_kernels = reel_cuda_graph_kernels,
    .mem_info = reel_cuda_mem_info,
};

static reel_status select_device(reel_err *err, int device)
{
    int n = 0;
    reel_status st = REEL_CUDA_CHECK(err, cudaGetDeviceCount(&n));
    if (st != REEL_OK) {
        char why[REEL_ERRMSG_MAX];
        reel_err_copy(err, why, sizeof why);
        return reel_seterr(err, REEL_E_UNSUPPORTED, "backend 'cuda': no usable CUDA device (%s)", why);
    }
    if (device < 0 || device >= n)
        return reel_seterr(err, n ? REEL_E_INVALID_ARG : REEL_E_UNSUPPORTED,
                           "backend 'cuda': device %d requested, %d visible", device, n);
    /* cudaFree(NULL) creates the primary context now rather than inside the
     * first timed or captured call. */
    REEL_TRY(REEL_CUDA_CHECK(err, cudaSetDevice(device)));
    return REEL_CUDA_CHECK(err, cudaFree(NULL));
}

reel_status reel_cuda_backend_create(reel_err *err, int device, reel_backend **out)
{
    reel_status st;
    *out = NULL;
    REEL_TRY(select_device(err, device));
    reel_backend *be = reel_hcalloc(1, sizeof *be);
    reel_cuda *c = reel_hcalloc(1, sizeof *c);
    if (!be || !c) {
        reel_hfree(be);
        reel_hfree(c);
        return reel_seterr(err, REEL_E_OOM, "backend 'cuda': out of host memory");
    }
    be->vt = &cuda_vt;
    be->kind = REEL_BACKEND_CUDA;
    be->err = err;
    be->impl = c;
    c->device = device;
    pthread_mutex_init(&c->lock, NULL);
    pthread_mutex_init(&c->blas_lock, NULL);
    if ((st = probe_caps(be, device)) != REEL_OK)
        goto fail;
    c->ws_bytes = reel_cuda_matmul_ws_bytes(&be->caps, INT64_MAX);
    if ((st = REEL_CK(be, cublasLtCreate(&c->lt))) != REEL_OK)
        goto fail;
    *out = be;
    return REEL_OK;
fail:
    cuda_destroy(be);
    return st;
}
