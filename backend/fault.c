/* Fault injection at the backend seam (backend/fault.h): a function table
 * that counts each call of a kind and fails the armed one, then passes
 * everything else to the backend's own table. Built only with
 * -Dfault_injection=true. */
#include "backend/fault.h"

#include <stdatomic.h>

#include "backend/backend.h"
#include "backend/comm.h"

static atomic_llong armed[REEL_FAULT_KINDS]; /* the failing call's number; 0: off */
static atomic_llong calls[REEL_FAULT_KINDS];
static atomic_bool fired[REEL_FAULT_KINDS];
static atomic_bool paused;

static const char *const kind_names[REEL_FAULT_KINDS] = {
    "alloc", "stream", "event", "capture", "instantiate", "launch", "update", "copy", "collective",
};

const char *reel_fault_kind_name(reel_fault_kind k)
{
    return k >= 0 && k < REEL_FAULT_KINDS ? kind_names[k] : NULL;
}

void reel_fault_arm(reel_fault_kind k, int64_t n)
{
    if (k < 0 || k >= REEL_FAULT_KINDS)
        return;
    atomic_store(&armed[k], 0);
    atomic_store(&calls[k], 0);
    atomic_store(&fired[k], false);
    atomic_store(&armed[k], n > 0 ? n : 0);
}

void reel_fault_reset(void)
{
    for (int k = 0; k < REEL_FAULT_KINDS; k++)
        reel_fault_arm((reel_fault_kind)k, 0);
}

int64_t reel_fault_calls(reel_fault_kind k)
{
    return k >= 0 && k < REEL_FAULT_KINDS ? atomic_load(&calls[k]) : 0;
}

bool reel_fault_fired(reel_fault_kind k) { return k >= 0 && k < REEL_FAULT_KINDS && atomic_load(&fired[k]); }

void reel_fault_pause(bool p) { atomic_store(&paused, p); }

/* Counts one call of kind k; true when it is the armed one. */
static bool hit(reel_fault_kind k)
{
    if (atomic_load(&paused))
        return false;
    long long n = atomic_fetch_add(&calls[k], 1) + 1;
    long long a = atomic_load(&armed[k]);
    if (a == 0 || n != a)
        return false;
    atomic_store(&fired[k], true);
    return true;
}

static reel_status fail(reel_err *err, reel_fault_kind k, const char *call)
{
    return reel_seterr(err, k == REEL_FAULT_ALLOC ? REEL_E_OOM : REEL_E_BACKEND,
                       "%s: injected fault (call %lld of kind '%s' made to fail)", call,
                       (long long)atomic_load(&calls[k]), kind_names[k]);
}

/* Fails before the call: nothing reached the backend. */
#define BEFORE(be, k, call, expr)                  \
    do {                                           \
        if (hit(k))                                \
            return fail((be)->err, (k), (call));   \
        return (expr);                             \
    } while (0)
/* Fails after the call: what it waited for is done, then it reports. */
#define AFTER(be, k, call, expr)                   \
    do {                                           \
        reel_status st_ = (expr);                  \
        if (st_ == REEL_OK && hit(k))              \
            return fail((be)->err, (k), (call));   \
        return st_;                                \
    } while (0)

static const reel_backend_vt *own(reel_backend *be) { return be->base_vt; }

static void f_destroy(reel_backend *be) { own(be)->destroy(be); }
static reel_status f_stream_create(reel_backend *be, reel_stream **out)
{
    if (out)
        *out = NULL;
    BEFORE(be, REEL_FAULT_STREAM, "stream_create", own(be)->stream_create(be, out));
}
static void f_stream_destroy(reel_backend *be, reel_stream *s) { own(be)->stream_destroy(be, s); }
static reel_status f_stream_sync(reel_backend *be, reel_stream *s)
{
    AFTER(be, REEL_FAULT_STREAM, "stream_sync", own(be)->stream_sync(be, s));
}
static reel_status f_event_create(reel_backend *be, reel_event **out)
{
    if (out)
        *out = NULL;
    BEFORE(be, REEL_FAULT_EVENT, "event_create", own(be)->event_create(be, out));
}
static void f_event_destroy(reel_backend *be, reel_event *e) { own(be)->event_destroy(be, e); }
static reel_status f_event_record(reel_backend *be, reel_event *e, reel_stream *s)
{
    BEFORE(be, REEL_FAULT_EVENT, "event_record", own(be)->event_record(be, e, s));
}
static reel_status f_stream_wait(reel_backend *be, reel_stream *s, reel_event *e)
{
    BEFORE(be, REEL_FAULT_EVENT, "stream_wait", own(be)->stream_wait(be, s, e));
}
static reel_status f_event_query(reel_backend *be, reel_event *e, bool *done)
{
    AFTER(be, REEL_FAULT_EVENT, "event_query", own(be)->event_query(be, e, done));
}
static reel_status f_event_sync(reel_backend *be, reel_event *e)
{
    AFTER(be, REEL_FAULT_EVENT, "event_sync", own(be)->event_sync(be, e));
}
static reel_status f_dev_alloc(reel_backend *be, size_t bytes, void **out)
{
    if (out)
        *out = NULL;
    BEFORE(be, REEL_FAULT_ALLOC, "dev_alloc", own(be)->dev_alloc(be, bytes, out));
}
static void f_dev_free(reel_backend *be, void *p) { own(be)->dev_free(be, p); }
static reel_status f_pinned_alloc(reel_backend *be, size_t bytes, void **out)
{
    if (out)
        *out = NULL;
    BEFORE(be, REEL_FAULT_ALLOC, "pinned_alloc", own(be)->pinned_alloc(be, bytes, out));
}
static void f_pinned_free(reel_backend *be, void *p) { own(be)->pinned_free(be, p); }
static reel_status f_copy(reel_backend *be, reel_stream *s, void *dst, const void *src, size_t bytes,
                          reel_copy_kind k)
{
    BEFORE(be, REEL_FAULT_COPY, "copy", own(be)->copy(be, s, dst, src, bytes, k));
}
static reel_status f_fill(reel_backend *be, reel_stream *s, void *dst, int byte, size_t bytes)
{
    BEFORE(be, REEL_FAULT_COPY, "fill", own(be)->fill(be, s, dst, byte, bytes));
}
static reel_status f_capture_begin(reel_backend *be, reel_stream *origin)
{
    BEFORE(be, REEL_FAULT_CAPTURE, "capture_begin", own(be)->capture_begin(be, origin));
}
/* An instantiate that fails: the capture is ended and its graph destroyed,
 * as the CUDA backend does when cudaGraphInstantiate fails. */
static reel_status f_capture_end(reel_backend *be, reel_stream *origin, reel_exec_graph **out)
{
    reel_status st = own(be)->capture_end(be, origin, out);
    if (st != REEL_OK || !hit(REEL_FAULT_INSTANTIATE))
        return st;
    own(be)->graph_destroy(be, *out);
    *out = NULL;
    return fail(be->err, REEL_FAULT_INSTANTIATE, "capture_end (instantiate)");
}
static void f_capture_abort(reel_backend *be, reel_stream *origin) { own(be)->capture_abort(be, origin); }
static bool f_capturing(reel_backend *be, reel_stream *s) { return own(be)->capturing(be, s); }
static reel_status f_graph_launch(reel_backend *be, reel_exec_graph *g, reel_stream *s)
{
    BEFORE(be, REEL_FAULT_LAUNCH, "graph_launch", own(be)->graph_launch(be, g, s));
}
static void f_graph_destroy(reel_backend *be, reel_exec_graph *g) { own(be)->graph_destroy(be, g); }
static reel_status f_graph_update(reel_backend *be, reel_exec_graph *exec, reel_exec_graph *fresh, bool *updated)
{
    if (updated)
        *updated = false;
    BEFORE(be, REEL_FAULT_UPDATE, "graph_update", own(be)->graph_update(be, exec, fresh, updated));
}
static void f_set_tag(reel_backend *be, int tag) { own(be)->set_tag(be, tag); }
static void f_set_trace(reel_backend *be, reel_kernel_trace_fn fn, void *user) { own(be)->set_trace(be, fn, user); }

/* One wrapper table per backend table (host, CUDA), made at the first wrap:
 * optional entries stay NULL where the backend's are. */
typedef struct wrapped_vt {
    const reel_backend_vt *base;
    reel_backend_vt vt;
} wrapped_vt;
static wrapped_vt wrapped[4];
static pthread_mutex_t wrap_mu = PTHREAD_MUTEX_INITIALIZER;

static const reel_backend_vt *wrapper_of(const reel_backend_vt *b)
{
    pthread_mutex_lock(&wrap_mu);
    const reel_backend_vt *r = NULL;
    for (int i = 0; i < 4 && !r; i++) {
        if (wrapped[i].base == b) {
            r = &wrapped[i].vt;
        } else if (!wrapped[i].base) {
            reel_backend_vt w = {
                .destroy = f_destroy,
                .stream_create = f_stream_create,
                .stream_destroy = f_stream_destroy,
                .stream_sync = f_stream_sync,
                .event_create = f_event_create,
                .event_destroy = f_event_destroy,
                .event_record = f_event_record,
                .stream_wait = f_stream_wait,
                .event_query = f_event_query,
                .event_sync = f_event_sync,
                .dev_alloc = f_dev_alloc,
                .dev_free = f_dev_free,
                .pinned_alloc = f_pinned_alloc,
                .pinned_free = f_pinned_free,
                .copy = f_copy,
                .fill = f_fill,
                .capture_begin = f_capture_begin,
                .capture_end = f_capture_end,
                .capture_abort = f_capture_abort,
                .capturing = f_capturing,
                .graph_launch = f_graph_launch,
                .graph_destroy = f_graph_destroy,
                .graph_update = b->graph_update ? f_graph_update : NULL,
                .set_tag = b->set_tag ? f_set_tag : NULL,
                .set_trace = b->set_trace ? f_set_trace : NULL,
            };
            wrapped[i].vt = w;
            wrapped[i].base = b;
            r = &wrapped[i].vt;
        }
    }
    pthread_mutex_unlock(&wrap_mu);
    return r;
}

void reel_fault_wrap_backend(reel_backend *be)
{
    if (!be || be->base_vt)
        return;
    const reel_backend_vt *w = wrapper_of(be->vt);
    if (!w)
        return;
    be->base_vt = be->vt;
    be->vt = w;
}

/* Communicators: the same, over reel_comm_vt. */
static const reel_comm_vt *cown(reel_comm *c) { return c->base_vt; }
#define CBEFORE(c, call, expr) BEFORE(c, REEL_FAULT_COLLECTIVE, call, expr)
#define CAFTER(c, call, expr) AFTER(c, REEL_FAULT_COLLECTIVE, call, expr)

static void c_destroy(reel_comm *c) { cown(c)->destroy(c); }
static reel_status c_all_gather(reel_comm *c, reel_stream *s, const void *send, void *recv, size_t count,
                                reel_dtype dt)
{
    CBEFORE(c, "all_gather", cown(c)->all_gather(c, s, send, recv, count, dt));
}
static reel_status c_reduce_scatter(reel_comm *c, reel_stream *s, const void *send, void *recv, size_t count,
                                    reel_dtype dt, reel_redop op)
{
    CBEFORE(c, "reduce_scatter", cown(c)->reduce_scatter(c, s, send, recv, count, dt, op));
}
static reel_status c_all_reduce(reel_comm *c, reel_stream *s, const void *send, void *recv, size_t count,
                                reel_dtype dt, reel_redop op)
{
    CBEFORE(c, "all_reduce", cown(c)->all_reduce(c, s, send, recv, count, dt, op));
}
static reel_status c_all_to_all(reel_comm *c, reel_stream *s, const void *send, void *recv, size_t count,
                                reel_dtype dt)
{
    CBEFORE(c, "all_to_all", cown(c)->all_to_all(c, s, send, recv, count, dt));
}
static reel_status c_send(reel_comm *c, reel_stream *s, const void *buf, size_t count, reel_dtype dt, int peer)
{
    CBEFORE(c, "send", cown(c)->send(c, s, buf, count, dt, peer));
}
static reel_status c_recv(reel_comm *c, reel_stream *s, void *buf, size_t count, reel_dtype dt, int peer)
{
    CBEFORE(c, "recv", cown(c)->recv(c, s, buf, count, dt, peer));
}
static reel_status c_group_begin(reel_comm *c) { CBEFORE(c, "group_begin", cown(c)->group_begin(c)); }
/* A group that was begun is ended (NCCL: a group left open breaks every
 * later call), then the failure is reported. */
static reel_status c_group_end(reel_comm *c) { CAFTER(c, "group_end", cown(c)->group_end(c)); }
static reel_status c_agree(reel_comm *c, const void *mine, void *all, size_t bytes)
{
    CAFTER(c, "agree", cown(c)->agree(c, mine, all, bytes));
}
static reel_status c_sync(reel_comm *c, reel_stream *s) { CAFTER(c, "comm sync", cown(c)->sync(c, s)); }
static reel_status c_async_error(reel_comm *c) { return cown(c)->async_error(c); }
static void c_abort(reel_comm *c) { cown(c)->abort(c); }

static const reel_comm_vt comm_wrapper = {
    .destroy = c_destroy,
    .all_gather = c_all_gather,
    .reduce_scatter = c_reduce_scatter,
    .all_reduce = c_all_reduce,
    .all_to_all = c_all_to_all,
    .send = c_send,
    .recv = c_recv,
    .group_begin = c_group_begin,
    .group_end = c_group_end,
    .agree = c_agree,
    .sync = c_sync,
    .async_error = c_async_error,
    .abort = c_abort,
};

void reel_fault_wrap_comm(reel_comm *c)
{
    if (!c || c->base_vt)
        return;
    c->base_vt = c->vt;
    c->vt = &comm_wrapper;
}
