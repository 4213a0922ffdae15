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

/* Counts one call of kind k; its number when it is the armed one, else 0. */
static long long hit(reel_fault_kind k)
{
    if (atomic_load(&paused))
        return 0;
    long long n = atomic_fetch_add(&calls[k], 1) + 1;
    long long a = atomic_load(&armed[k]);
    if (a == 0 || n != a)
        return 0;
    atomic_store(&fired[k], true);
    return n;
}

static reel_status fail(reel_err *err, reel_fault_kind k, const char *call, long long n)
{
    return reel_seterr(err, k == REEL_FAULT_ALLOC ? REEL_E_OOM : REEL_E_BACKEND,
                       "%s: injected fault (call %lld of kind '%s' made to fail)", call, n, kind_names[k]);
}

/* Fails before the call: nothing reached the backend. */
#define BEFORE(be, k, call, expr)                        \
    do {                                                 \
        long long n_ = hit(k);                           \
        if (n_)                                          \
            return fail((be)->err, (k), (call), n_);     \
        return (expr);                                   \
    } while (0)
/* Fails after the call: what it waited for is done, then it reports. */
#define AFTER(be, k, call, expr)                         \
    do {                                                 \
        reel_status st_ = (expr);                        \
        long long n_ = st_ == REEL_OK ? hit(k) : 0;      \
        if (n_)                                          \
            return fail((be)->err, (k), (call), n_);     \
        return st_;                                      \
    } while (0)

static const reel_backend_vt *own(reel_backend *be) { return be->base_vt; }

static reel_status f_stream_create(reel_backend *be, reel_stream **out)
{
    if (out)
        *out = NULL;
    BEFORE(be, REEL_FAULT_STREAM, "stream_create", own(be)->stream_create(be, out));
}
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
static reel_status f_pinned_alloc(reel_backend *be, size_t bytes, void **out)
{
    if (out)
        *out = NULL;
    BEFORE(be, REEL_FAULT_ALLOC, "pinned_alloc", own(be)->pinned_alloc(be, bytes, out));
}
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
static reel_status f_loop_capture_begin(reel_backend *be, reel_stream *origin, uint64_t *cond)
{
    BEFORE(be, REEL_FAULT_CAPTURE, "loop_capture_begin", own(be)->loop_capture_begin(be, origin, cond));
}
/* An instantiate that fails: the capture is ended and its graph destroyed,
 * as the CUDA backend does when cudaGraphInstantiate fails. */
static reel_status f_capture_end(reel_backend *be, reel_stream *origin, reel_exec_graph **out)
{
    reel_status st = own(be)->capture_end(be, origin, out);
    long long n = st == REEL_OK ? hit(REEL_FAULT_INSTANTIATE) : 0;
    if (!n)
        return st;
    own(be)->graph_destroy(be, *out);
    *out = NULL;
    return fail(be->err, REEL_FAULT_INSTANTIATE, "capture_end (instantiate)", n);
}
static reel_status f_graph_launch(reel_backend *be, reel_exec_graph *g, reel_stream *s)
{
    BEFORE(be, REEL_FAULT_LAUNCH, "graph_launch", own(be)->graph_launch(be, g, s));
}
static reel_status f_graph_update(reel_backend *be, reel_exec_graph *exec, reel_exec_graph *fresh, bool *updated)
{
    if (updated)
        *updated = false;
    BEFORE(be, REEL_FAULT_UPDATE, "graph_update", own(be)->graph_update(be, exec, fresh, updated));
}

/* One wrapper table per backend table (host, CUDA), made at the first wrap:
 * a copy of the backend's own, so every entry not counted here (destroy,
 * free, tags, entries added later) is the backend's; the counted ones are
 * replaced where the backend has them. */
typedef struct wrapped_vt {
    const reel_backend_vt *base;
    reel_backend_vt vt;
} wrapped_vt;
static wrapped_vt wrapped[4];
static pthread_mutex_t wrap_mu = PTHREAD_MUTEX_INITIALIZER;

static void wrap_counted(reel_backend_vt *w)
{
#define SWAP(field, fn) \
    if (w->field)       \
        w->field = fn;
    SWAP(stream_create, f_stream_create)
    SWAP(stream_sync, f_stream_sync)
    SWAP(event_create, f_event_create)
    SWAP(event_record, f_event_record)
    SWAP(stream_wait, f_stream_wait)
    SWAP(event_query, f_event_query)
    SWAP(event_sync, f_event_sync)
    SWAP(dev_alloc, f_dev_alloc)
    SWAP(pinned_alloc, f_pinned_alloc)
    SWAP(copy, f_copy)
    SWAP(fill, f_fill)
    SWAP(capture_begin, f_capture_begin)
    SWAP(capture_end, f_capture_end)
    SWAP(loop_capture_begin, f_loop_capture_begin)
    SWAP(graph_launch, f_graph_launch)
    SWAP(graph_update, f_graph_update)
#undef SWAP
}

static const reel_backend_vt *wrapper_of(const reel_backend_vt *b)
{
    pthread_mutex_lock(&wrap_mu);
    const reel_backend_vt *r = NULL;
    for (int i = 0; i < 4 && !r; i++) {
        if (wrapped[i].base == b) {
            r = &wrapped[i].vt;
        } else if (!wrapped[i].base) {
            wrapped[i].vt = *b;
            wrap_counted(&wrapped[i].vt);
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

/* Made per communicator table at the first wrap, as for backends. */
static struct {
    const reel_comm_vt *base;
    reel_comm_vt vt;
} cwrapped[4];

static const reel_comm_vt *comm_wrapper_of(const reel_comm_vt *b)
{
    pthread_mutex_lock(&wrap_mu);
    const reel_comm_vt *r = NULL;
    for (int i = 0; i < 4 && !r; i++) {
        if (cwrapped[i].base == b) {
            r = &cwrapped[i].vt;
        } else if (!cwrapped[i].base) {
            reel_comm_vt w = *b;
#define SWAP(field, fn) \
    if (w.field)        \
        w.field = fn;
            SWAP(all_gather, c_all_gather)
            SWAP(reduce_scatter, c_reduce_scatter)
            SWAP(all_reduce, c_all_reduce)
            SWAP(all_to_all, c_all_to_all)
            SWAP(send, c_send)
            SWAP(recv, c_recv)
            SWAP(group_begin, c_group_begin)
            SWAP(group_end, c_group_end)
            SWAP(agree, c_agree)
            SWAP(sync, c_sync)
#undef SWAP
            cwrapped[i].vt = w;
            cwrapped[i].base = b;
            r = &cwrapped[i].vt;
        }
    }
    pthread_mutex_unlock(&wrap_mu);
    return r;
}

void reel_fault_wrap_comm(reel_comm *c)
{
    if (!c || c->base_vt)
        return;
    const reel_comm_vt *w = comm_wrapper_of(c->vt);
    if (!w)
        return;
    c->base_vt = c->vt;
    c->vt = w;
}
