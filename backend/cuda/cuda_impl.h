/* Private to backend/cuda: the CUDA backend's objects and its vt entries,
 * split over cuda_backend.c (creation, probing), cuda_stream.c (streams,
 * events, memory, copies) and cuda_graph.c (capture and graphs). */
#ifndef REEL_BACKEND_CUDA_IMPL_H
#define REEL_BACKEND_CUDA_IMPL_H

#include <pthread.h>

#include "backend/cuda/cuda.h"

struct reel_stream {
    cudaStream_t s;
    void *ws;        /* the matmul workspace, allocated at the first matmul (NULL before) */
    size_t ws_bytes;
    size_t ws_want;  /* its size: the backend's default, or what a plan reserved */
    cudaGraph_t loop_top; /* a loop capture in progress: the graph whose WHILE node's
                             body the capture fills (NULL: none) */
};

/* Events are pooled: destroyed events go back to a free list and are handed
 * out again, so the executor's per-step events cost no driver allocation. */
struct reel_event {
    cudaEvent_t ev;
    reel_event *next_free;
    bool timed;           /* a timer (timing on): destroyed, not pooled */
};

struct reel_exec_graph {
    cudaGraph_t graph;    /* kept for diagnostics; the exec is what runs */
    cudaGraphExec_t exec;
};

typedef struct reel_cuda_memo_entry {
    size_t klen, vlen;
    unsigned char key[REEL_CUDA_MEMO_KEY_MAX];
    unsigned char val[REEL_CUDA_MEMO_VAL_MAX];
} reel_cuda_memo_entry;

typedef struct reel_cuda {
    int device;
    size_t ws_bytes;           /* matmul workspace per stream */
    cublasLtHandle_t lt;
    /* The classic cuBLAS handle every stream shares, created at the first
     * classic call (64 MiB of device memory on an H200 each: one for the
     * context, not one for each stream of each plan); blas_lock is held
     * from binding it to a stream and workspace to the last call issued. */
    cublasHandle_t blas;
    pthread_mutex_t blas_lock;
    pthread_mutex_t lock;      /* guards the event pool and the memo */
    reel_event *free_events;
    int memo_used;
    int lt_tuned;              /* matmul shapes whose algorithm was chosen by timing */
    reel_cuda_memo_entry memo[REEL_CUDA_MEMO_SLOTS];
} reel_cuda;

static inline reel_cuda *reel_cuda_of(reel_backend *be) { return (reel_cuda *)be->impl; }

#define REEL_CK(be, call) REEL_CUDA_CHECK((be)->err, call)
/* Destructors: checked, but the context keeps the message of the failure
 * that led to the cleanup. */
#define REEL_CK_QUIET(call) REEL_CUDA_CHECK(NULL, call)

/* cuda_stream.c */
reel_status reel_cuda_stream_create(reel_backend *be, reel_stream **out);
reel_status reel_cuda_stream_reserve_ws(reel_backend *be, reel_stream *s, size_t bytes);
size_t reel_cuda_stream_ws_held(reel_backend *be, reel_stream *s);
void reel_cuda_stream_destroy(reel_backend *be, reel_stream *s);
reel_status reel_cuda_stream_sync(reel_backend *be, reel_stream *s);
reel_status reel_cuda_event_create(reel_backend *be, reel_event **out);
void reel_cuda_event_destroy(reel_backend *be, reel_event *e);
void reel_cuda_event_pool_drain(reel_backend *be);
reel_status reel_cuda_event_record(reel_backend *be, reel_event *e, reel_stream *s);
reel_status reel_cuda_stream_wait(reel_backend *be, reel_stream *s, reel_event *e);
reel_status reel_cuda_event_query(reel_backend *be, reel_event *e, bool *done);
reel_status reel_cuda_event_sync(reel_backend *be, reel_event *e);
reel_status reel_cuda_timer_create(reel_backend *be, reel_event **out);
reel_status reel_cuda_timer_elapsed_us(reel_backend *be, reel_event *a, reel_event *b, double *us);
reel_status reel_cuda_dev_alloc(reel_backend *be, size_t bytes, void **out);
reel_status reel_cuda_mem_info(reel_backend *be, size_t *avail, size_t *total, const char **bound);
void reel_cuda_dev_free(reel_backend *be, void *p);
reel_status reel_cuda_pinned_alloc(reel_backend *be, size_t bytes, void **out);
void reel_cuda_pinned_free(reel_backend *be, void *p);
reel_status reel_cuda_copy(reel_backend *be, reel_stream *s, void *dst, const void *src, size_t bytes,
                           reel_copy_kind k);
reel_status reel_cuda_fill(reel_backend *be, reel_stream *s, void *dst, int byte, size_t bytes);

/* cuda_graph.c */
reel_status reel_cuda_capture_begin(reel_backend *be, reel_stream *origin);
reel_status reel_cuda_loop_capture_begin(reel_backend *be, reel_stream *origin, uint64_t *cond);
reel_status reel_cuda_capture_end(reel_backend *be, reel_stream *origin, reel_exec_graph **out);
void reel_cuda_capture_abort(reel_backend *be, reel_stream *origin);
bool reel_cuda_capturing(reel_backend *be, reel_stream *s);
reel_status reel_cuda_graph_launch(reel_backend *be, reel_exec_graph *g, reel_stream *s);
void reel_cuda_graph_destroy(reel_backend *be, reel_exec_graph *g);
reel_status reel_cuda_graph_kernels(reel_backend *be, reel_exec_graph *g, int *kernels);
reel_status reel_cuda_graph_update(reel_backend *be, reel_exec_graph *exec, reel_exec_graph *fresh,
                                   bool *updated);

#endif
