/* Internal (L1): the backend interface. A backend is a table of functions
 * with a context pointer (ggml-backend style). The host backend runs streams
 * as worker threads; the CUDA backend wraps CUDA streams, events and graphs. */
#ifndef REEL_BACKEND_BACKEND_H
#define REEL_BACKEND_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "reel/reel.h"

typedef struct reel_backend reel_backend;
typedef struct reel_stream reel_stream;     /* backend-defined */
typedef struct reel_event reel_event;       /* backend-defined */
typedef struct reel_exec_graph reel_exec_graph; /* a recorded/instantiated graph */

/* Probed once at backend creation; optimizations are gated on these. */
typedef struct reel_device_caps {
    int cc_major, cc_minor;      /* compute capability (0 on host) */
    int sm_count;                /* multiprocessors, or host cores */
    int max_active_clusters;     /* cudaOccupancyMaxActiveClusters probe, 0 if none */
    bool pdl;                    /* programmatic dependent launch */
    bool is_gpu;
    size_t total_mem;
    char name[128];
} reel_device_caps;

typedef void (*reel_kernel_trace_fn)(void *user, int tag, reel_stream *s, double start_us, double end_us);

typedef enum reel_copy_kind { REEL_COPY_H2D, REEL_COPY_D2H, REEL_COPY_D2D } reel_copy_kind;

typedef struct reel_backend_vt {
    void (*destroy)(reel_backend *be);
    reel_status (*stream_create)(reel_backend *be, reel_stream **out);
    void (*stream_destroy)(reel_backend *be, reel_stream *s);
    reel_status (*stream_sync)(reel_backend *be, reel_stream *s);
    reel_status (*event_create)(reel_backend *be, reel_event **out);
    void (*event_destroy)(reel_backend *be, reel_event *e);
    reel_status (*event_record)(reel_backend *be, reel_event *e, reel_stream *s);
    reel_status (*stream_wait)(reel_backend *be, reel_stream *s, reel_event *e);
    reel_status (*event_query)(reel_backend *be, reel_event *e, bool *done);
    reel_status (*event_sync)(reel_backend *be, reel_event *e);
    /* Device memory (host memory on the host backend). */
    reel_status (*dev_alloc)(reel_backend *be, size_t bytes, void **out);
    void (*dev_free)(reel_backend *be, void *p);
    /* Page-locked host memory for staging (plain pages on the host backend). */
    reel_status (*pinned_alloc)(reel_backend *be, size_t bytes, void **out);
    void (*pinned_free)(reel_backend *be, void *p);
    /* Stream-ordered copy and fill. */
    reel_status (*copy)(reel_backend *be, reel_stream *s, void *dst, const void *src, size_t bytes, reel_copy_kind k);
    reel_status (*fill)(reel_backend *be, reel_stream *s, void *dst, int byte, size_t bytes);
    /* Capture: everything issued to `origin` (and to streams forked from it
     * through events) between begin and end is recorded, not run. */
    reel_status (*capture_begin)(reel_backend *be, reel_stream *origin);
    reel_status (*capture_end)(reel_backend *be, reel_stream *origin, reel_exec_graph **out);
    /* Ends a capture after an error, discarding what was recorded. */
    void (*capture_abort)(reel_backend *be, reel_stream *origin);
    bool (*capturing)(reel_backend *be, reel_stream *s);
    /* Optional (NULL: no device loops; the runtime loops on the host): a
     * capture like capture_begin whose graph, once capture_end returns it,
     * runs what was captured as the body of a loop, again and again while
     * the loop's condition is nonzero. The condition is 1 when a launch
     * starts; *cond is its handle, which a kernel of the body sets (the loop
     * advance, ops/loop.h). REEL_E_UNSUPPORTED (with a message) where the
     * device or driver has no such loops; nothing is then capturing. */
    reel_status (*loop_capture_begin)(reel_backend *be, reel_stream *origin, uint64_t *cond);
    reel_status (*graph_launch)(reel_backend *be, reel_exec_graph *g, reel_stream *s);
    void (*graph_destroy)(reel_backend *be, reel_exec_graph *g);
    /* Optional (NULL if unsupported): update `exec` in place from a newly
     * captured graph of the same topology; *updated false if it could not. */
    reel_status (*graph_update)(reel_backend *be, reel_exec_graph *exec, reel_exec_graph *fresh, bool *updated);
    /* Optional (NULL: no op spans, e.g. CUDA): kernels issued from now on
     * carry tag (the executor's node + 1; 0: none), into captures and their
     * replays; with a trace function set, each tagged kernel reports its
     * stream and its start and end (CLOCK_MONOTONIC, microseconds) from the
     * thread that ran it. fn NULL: off. */
    void (*set_tag)(reel_backend *be, int tag);
    void (*set_trace)(reel_backend *be, reel_kernel_trace_fn fn, void *user);
    /* Optional (NULL: unknown): kernel launches in a captured graph. */
    reel_status (*graph_kernels)(reel_backend *be, reel_exec_graph *g, int *kernels);
    /* Optional (NULL: no device timing): an event that also keeps the time
     * the stream reached its most recent record (destroyed with
     * event_destroy), and the microseconds from a's record to b's, both
     * complete. CUDA: a timing event and cudaEventElapsedTime; host: the
     * stream thread's clock as it runs the record. */
    reel_status (*timer_create)(reel_backend *be, reel_event **out);
    reel_status (*timer_elapsed_us)(reel_backend *be, reel_event *a, reel_event *b, double *us);
    /* Optional (NULL: the backend has no stream workspace): the bytes of
     * s's kernel workspace (at least what the backend's libraries are
     * always given), allocated at its first use, before which this is
     * called; REEL_E_INVALID_USAGE once it is allocated at another size.
     * Unreserved, a stream takes the backend's default. */
    reel_status (*stream_reserve_ws)(reel_backend *be, reel_stream *s, size_t bytes);
    /* Optional (NULL: none): the bytes of s's kernel workspace allocated now. */
    size_t (*stream_ws_held)(reel_backend *be, reel_stream *s);
    /* Optional (NULL: unknown): the memory dev_alloc draws from, as bytes it
     * can still give now and its total (CUDA: cudaMemGetInfo; host: the
     * machine's available memory within the process's limits). *bound (may
     * be NULL) gets what bounds *avail now and what *total is, for messages:
     * "RLIMIT_DATA; physical memory". */
    reel_status (*mem_info)(reel_backend *be, size_t *avail, size_t *total, const char **bound);
} reel_backend_vt;

struct reel_backend {
    const reel_backend_vt *vt;
    reel_backend_kind kind;
    reel_err *err;          /* errors are reported here (the context's buffer) */
    reel_device_caps caps;
    bool tune_matmul;       /* reel_ctx_opts.matmul_tuning: time matmul candidates in warm-ups */
    void *impl;
    /* The backend's own table when vt is a wrapper over it (a fault
     * injection build: backend/fault.h), else NULL. */
    const reel_backend_vt *base_vt;
};

/* The backend's own table, under any wrapper. */
static inline const reel_backend_vt *reel_backend_own_vt(const reel_backend *be)
{
    return be->base_vt ? be->base_vt : be->vt;
}

/* Backend constructors. reel_cuda_backend_create returns REEL_E_UNSUPPORTED
 * when reel was built without CUDA or no device is visible. */
reel_status reel_host_backend_create(reel_err *err, reel_backend **out);
reel_status reel_cuda_backend_create(reel_err *err, int device, reel_backend **out);
/* True when a CUDA backend could be created (built with CUDA, device visible). */
bool reel_cuda_available(void);

#endif
