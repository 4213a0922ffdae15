/* Internal to backend/host: the host backend's objects.
 *
 * One mutex per backend guards every stream queue, event and capture; items
 * (kernels, copies, fills) run outside it, so streams really run
 * concurrently. Events and streams are reference counted because queued
 * items and recorded graphs outlive the caller's handle. */
#ifndef REEL_BACKEND_HOST_INTERNAL_H
#define REEL_BACKEND_HOST_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/host/host.h"

typedef enum host_item_kind {
    HOST_KERNEL,
    HOST_COPY,
    HOST_FILL,
    HOST_RECORD,
    HOST_WAIT,
} host_item_kind;

/* One unit of stream work. Recorded graphs keep templates of these and
 * enqueue fresh copies at every replay. */
typedef struct host_item {
    struct host_item *next;      /* the stream's FIFO */
    struct host_item *pend_next; /* the event's records not yet run */
    host_item_kind kind;
    reel_event *ev;              /* record/wait: holds a reference */
    uint64_t gen;                /* record: its generation; wait: the one awaited */
    void *dst;
    const void *src;
    size_t bytes;
    int byte;
    int tag;                     /* kernel: the executor's node + 1 (0: none), for op spans */
    reel_host_fn fn;
    size_t args_size;
    max_align_t args[];          /* kernel args, copied */
} host_item;

typedef struct host_be host_be;

/* A captured item: the template, its stream slot, and the edges that the
 * join check at capture end follows (prev on the same slot; for a wait, the
 * captured record it waits for). */
typedef struct host_cap_item {
    host_item *it;
    size_t slot;
    size_t evi;              /* record/wait: index into the capture's events */
    int64_t prev;            /* previous item on the same slot, -1 if none */
    int64_t rec;             /* wait: index of the record awaited */
} host_cap_item;

/* A stream capture in progress. Slot 0 is the origin; other slots are
 * streams that joined by waiting on an event recorded in the capture. */
typedef struct host_capture {
    reel_stream *origin;
    reel_stream **streams;
    int64_t *last;           /* per slot: index of its last item, -1 if none */
    size_t nstreams, cap_streams;
    reel_event **events;     /* events recorded in the capture (refs held) */
    int64_t *last_rec;       /* per event: index of its latest captured record */
    size_t nevents, cap_events;
    host_cap_item *items;
    size_t nitems, cap_items;
    int *loop_cond;          /* a loop capture: its condition word (moves to the graph) */
} host_capture;

/* CUDA event semantics with generations: each record issues generation
 * ++issued; a wait or sync refers to the generation current at call time;
 * generation g is complete unless a record item with gen g is pending. */
struct reel_event {
    unsigned refs;           /* the caller's handle + queued items + captures */
    uint64_t issued;         /* generation of the most recent record (0: never) */
    host_item *pending;      /* record items issued and not yet run */
    host_capture *cap;       /* the capture holding the most recent record */
    bool timed;              /* a timer: stamp_us is kept */
    double stamp_us;         /* CLOCK_MONOTONIC when its stream last ran a record of it */
};

struct reel_stream {
    host_be *hb;
    unsigned id;
    unsigned refs;           /* the caller's handle + recorded graphs */
    pthread_t thread;
    pthread_cond_t cv_work;  /* items were pushed, or stop */
    pthread_cond_t cv_idle;  /* an item finished */
    host_item *head, *tail;
    uint64_t enqueued, done; /* items pushed / finished: stream_sync waits on these */
    bool stop;               /* exit once the queue is empty */
    uint64_t rng;            /* jitter: per-stream state, no global RNG */
    host_capture *cap;       /* the capture this stream belongs to, or NULL */
    size_t cap_slot;         /* its slot there (0: the origin) */
    reel_stream *next_all;   /* the backend's list of live streams */
};

struct host_be {
    reel_backend base;
    pthread_mutex_t mu;
    pthread_cond_t ev_cv;    /* some record item completed */
    reel_stream *streams;
    unsigned next_id;
    unsigned jitter_us;
    uint64_t jitter_seed;
    uint64_t items_run;
    int tag;                     /* set_tag: given to kernels issued next (under mu) */
    reel_kernel_trace_fn trace;  /* set_trace: op spans of tagged kernels (under mu) */
    void *trace_user;
};

static inline host_be *host_of(reel_backend *be) { return (host_be *)be->impl; }

/* host_queue.c, the floor of the host backend (it calls no other host
 * file): items, a stream's FIFO and worker thread, event generations. */
host_item *reel_host_item_new(host_item_kind kind, size_t args_size);
host_item *reel_host_item_clone(const host_item *it);
void reel_host_item_free(host_be *hb, host_item *it);   /* under mu: drops its event ref */
void reel_host_stream_push(reel_stream *s, host_item *it); /* under mu */
uint64_t reel_host_jitter_seed(uint64_t seed, unsigned stream_id);
void *reel_host_stream_main(void *stream);
/* Drops one reference (without mu held); the last one stops and joins the
 * thread after it drained its queue. */
void reel_host_stream_release(host_be *hb, reel_stream *s);
reel_event *reel_host_event_new(void);
void reel_host_event_unref(reel_event *e);            /* under mu */
/* Under mu: fills a record/wait item for e as issued now and pushes it. */
void reel_host_record_push(reel_stream *s, reel_event *e, host_item *it);
void reel_host_wait_push(reel_stream *s, reel_event *e, host_item *it);
/* Under mu: the record item it ran; wakes waiters. */
void reel_host_record_done(host_be *hb, host_item *it);
bool reel_host_gen_done(const reel_event *e, uint64_t gen);

/* host_stream.c */
reel_status reel_host_stream_create(reel_backend *be, reel_stream **out);
void reel_host_stream_destroy(reel_backend *be, reel_stream *s);
reel_status reel_host_stream_sync(reel_backend *be, reel_stream *s);
/* Issues a kernel/copy/fill item: run, or recorded when s is capturing.
 * Takes ownership of it. */
reel_status reel_host_issue(reel_backend *be, reel_stream *s, host_item *it, const char *what);

/* host_event.c */
reel_status reel_host_event_create(reel_backend *be, reel_event **out);
void reel_host_event_destroy(reel_backend *be, reel_event *e);
reel_status reel_host_event_record(reel_backend *be, reel_event *e, reel_stream *s);
reel_status reel_host_stream_wait(reel_backend *be, reel_stream *s, reel_event *e);
reel_status reel_host_event_query(reel_backend *be, reel_event *e, bool *done);
reel_status reel_host_event_sync(reel_backend *be, reel_event *e);
reel_status reel_host_timer_create(reel_backend *be, reel_event **out);
reel_status reel_host_timer_elapsed_us(reel_backend *be, reel_event *a, reel_event *b, double *us);

/* host_capture.c: everything under mu unless said otherwise. */
reel_status reel_host_capture_item(host_be *hb, reel_stream *s, host_item *it);
reel_status reel_host_capture_record(host_be *hb, reel_stream *s, reel_event *e, host_item *it);
/* s waits on e, whose most recent record belongs to e->cap: s joins that
 * capture if it is in none. */
reel_status reel_host_capture_wait(host_be *hb, reel_stream *s, reel_event *e, host_item *it);
void reel_host_capture_discard(host_capture *c);
reel_status reel_host_capture_begin(reel_backend *be, reel_stream *origin);
reel_status reel_host_loop_capture_begin(reel_backend *be, reel_stream *origin, uint64_t *cond);
reel_status reel_host_capture_end(reel_backend *be, reel_stream *origin, reel_exec_graph **out);
void reel_host_capture_abort(reel_backend *be, reel_stream *origin);
bool reel_host_capturing(reel_backend *be, reel_stream *s);

/* host_graph.c */
reel_status reel_host_graph_build(host_be *hb, host_capture *c, reel_exec_graph **out);
reel_status reel_host_graph_launch(reel_backend *be, reel_exec_graph *g, reel_stream *s);
void reel_host_graph_destroy(reel_backend *be, reel_exec_graph *g);
reel_status reel_host_graph_kernels(reel_backend *be, reel_exec_graph *g, int *kernels);

#endif
