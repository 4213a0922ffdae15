/* The host communicator: ranks are threads of one process, each with its
 * own context (host backend). A collective is a kernel on the rank's host
 * stream (reel_host_launch), so a host graph records it and replays it like
 * any op; it runs a barrier-based exchange through the group's shared
 * state:
 *   post (its buffers and what it issues) -> barrier A -> every rank checks
 *   that all ranks issued the same collective, then computes its own result
 *   reading the others' buffers -> barrier B (nobody leaves, and overwrites
 *   its buffers, before every rank has read them) -> copy out of scratch
 *   when its result aliased its input.
 * Reductions run in float32 in rank order, so every rank gets the same bits.
 * Sends are buffered (copied into the pair's channel at issue), so sends
 * and receives never deadlock on each other; a receive waits for its
 * message. Every wait has the group's timeout; a failure (timeout, a
 * mismatch, an injected failure, a rank that left, an abort) breaks the
 * group: waiting ranks wake with the error, later collectives fail at once,
 * and each rank reads the message through async_error. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend/comm.h"
#include "backend/ctx.h"
#include "backend/host/host_comm_ops.h"
#include "backend/host/host_internal.h"
#include "core/dtype.h"
#include "core/halloc.h"



/* A buffered message of one ordered pair. */
typedef struct hc_msg {
    struct hc_msg *next;
    size_t count;
    reel_dtype dt;
    unsigned char data[];
} hc_msg;


typedef struct hc_group {
    pthread_mutex_t mu;
    pthread_cond_t cv;        /* CLOCK_MONOTONIC */
    int n;
    int refs;                 /* live communicators */
    int timeout_ms;
    int arrived;
    uint64_t gen;
    bool *waiting;            /* [n] at the current barrier */
    bool *gone;               /* [n] destroyed its communicator */
    hc_post *post;            /* [n] */
    uint64_t *issued;         /* [n] collectives this rank ran (stream ones and exchanges) */
    int64_t *fail_at;         /* [n] injected failure at this stream collective count, 0 none */
    uint64_t *stream_ops;     /* [n] stream collectives run */
    hc_msg **head, **tail;    /* [n * n] channel src -> dst at src * n + dst */
    reel_status failed;
    char why[REEL_ERRMSG_MAX];
} hc_group;

/* A collective's kernel arguments (copied by reel_host_launch, and again by
 * every replay). */
typedef struct hc_args {
    hc_group *g;
    int rank;
    hc_post post;
    int peer;
} hc_args;

static const reel_comm_vt host_comm_vt;

static hc_group *group_of(reel_comm *c) { return (hc_group *)c->impl; }

/* ---- the group ------------------------------------------------------------ */

static hc_group *group_new(int n, int timeout_ms)
{
    hc_group *g = reel_hcalloc(1, sizeof *g);
    if (!g)
        return NULL;
    g->n = n;
    g->timeout_ms = timeout_ms;
    g->waiting = reel_hcalloc((size_t)n, sizeof *g->waiting);
    g->gone = reel_hcalloc((size_t)n, sizeof *g->gone);
    g->post = reel_hcalloc((size_t)n, sizeof *g->post);
    g->issued = reel_hcalloc((size_t)n, sizeof *g->issued);
    g->fail_at = reel_hcalloc((size_t)n, sizeof *g->fail_at);
    g->stream_ops = reel_hcalloc((size_t)n, sizeof *g->stream_ops);
    g->head = reel_hcalloc((size_t)n * (size_t)n, sizeof *g->head);
    g->tail = reel_hcalloc((size_t)n * (size_t)n, sizeof *g->tail);
    pthread_condattr_t ca;
    bool ok = g->waiting && g->gone && g->post && g->issued && g->fail_at && g->stream_ops && g->head && g->tail;
    if (ok && pthread_condattr_init(&ca) == 0) {
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        ok = pthread_cond_init(&g->cv, &ca) == 0;
        pthread_condattr_destroy(&ca);
        if (ok && pthread_mutex_init(&g->mu, NULL) != 0) {
            pthread_cond_destroy(&g->cv);
            ok = false;
        }
    } else {
        ok = false;
    }
    if (ok)
        return g;
    reel_hfree(g->waiting), reel_hfree(g->gone), reel_hfree(g->post), reel_hfree(g->issued);
    reel_hfree(g->fail_at), reel_hfree(g->stream_ops), reel_hfree(g->head), reel_hfree(g->tail);
    reel_hfree(g);
    return NULL;
}

static void group_free(hc_group *g)
{
    for (int i = 0; i < g->n * g->n; i++)
        for (hc_msg *m = g->head[i], *next; m; m = next) {
            next = m->next;
            reel_hfree(m);
        }
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
    reel_hfree(g->waiting), reel_hfree(g->gone), reel_hfree(g->post), reel_hfree(g->issued);
    reel_hfree(g->fail_at), reel_hfree(g->stream_ops), reel_hfree(g->head), reel_hfree(g->tail);
    reel_hfree(g);
}

/* Breaks the group (mu held): the first failure's message stays. */
static void group_fail(hc_group *g, reel_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void group_fail(hc_group *g, reel_status st, const char *fmt, ...)
{
    if (g->failed == REEL_OK) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(g->why, sizeof g->why, fmt, ap);
        va_end(ap);
        g->failed = st;
    }
    pthread_cond_broadcast(&g->cv);
}

static struct timespec deadline_after(int ms)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    t.tv_sec += ms / 1000;
    t.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (t.tv_nsec >= 1000000000L) {
        t.tv_sec++;
        t.tv_nsec -= 1000000000L;
    }
    return t;
}

/* Waits on the group's condition until deadline; false once it passed. */
static bool wait_until(hc_group *g, const struct timespec *dl)
{
    if (g->timeout_ms <= 0) {
        pthread_cond_wait(&g->cv, &g->mu);
        return true;
    }
    return pthread_cond_timedwait(&g->cv, &g->mu, dl) != ETIMEDOUT;
}

/* "2, 3" : the ranks not at the barrier. */
static void missing_ranks(const hc_group *g, char *buf, size_t len)
{
    size_t at = 0;
    buf[0] = '\0';
    for (int r = 0; r < g->n && at + 8 < len; r++)
        if (!g->waiting[r])
            at += (size_t)snprintf(buf + at, len - at, "%s%d%s", at ? ", " : "", r, g->gone[r] ? " (left)" : "");
}

static bool any_gone(const hc_group *g)
{
    for (int r = 0; r < g->n; r++)
        if (g->gone[r] && !g->waiting[r])
            return true;
    return false;
}

/* The group barrier (mu held): true when every rank arrived. On a timeout,
 * a rank that left, or a failure elsewhere, false with the group broken. */
static bool barrier(hc_group *g, int rank, const char *what, uint64_t seq)
{
    uint64_t my = g->gen;
    g->waiting[rank] = true;
    if (++g->arrived == g->n) {
        g->arrived = 0;
        g->gen++;
        memset(g->waiting, 0, (size_t)g->n * sizeof *g->waiting);
        pthread_cond_broadcast(&g->cv);
        return true;
    }
    struct timespec dl = deadline_after(g->timeout_ms);
    char who[256];
    while (g->gen == my && g->failed == REEL_OK) {
        if (any_gone(g)) {
            missing_ranks(g, who, sizeof who);
            group_fail(g, REEL_E_BACKEND, "comm rank %d of %d: %s #%llu: ranks %s never came: a rank left the group",
                       rank, g->n, what, (unsigned long long)seq, who);
            break;
        }
        if (!wait_until(g, &dl) && g->gen == my && g->failed == REEL_OK) {
            missing_ranks(g, who, sizeof who);
            group_fail(g, REEL_E_BACKEND,
                       "comm rank %d of %d: %s #%llu timed out after %d ms waiting for ranks %s", rank, g->n, what,
                       (unsigned long long)seq, g->timeout_ms, who);
        }
    }
    return g->gen != my;
}

/* ---- the exchange ------------------------------------------------------- */

/* Element i of rank q's buffer p as float (or as integer for i32). */
static void reduce_into(void *dst, const hc_post *post, int n, size_t at, size_t count, reel_dtype dt, reel_redop op)
{
    for (size_t i = 0; i < count; i++) {
        if (dt == REEL_I32) {
            uint32_t acc = 0;
            int32_t mx = INT32_MIN;
            for (int q = 0; q < n; q++) {
                int32_t v = ((const int32_t *)post[q].send)[at + i];
                acc += (uint32_t)v;
                mx = v > mx ? v : mx;
            }
            ((int32_t *)dst)[i] = op == REEL_REDOP_SUM ? (int32_t)acc : mx;
            continue;
        }
        float acc = op == REEL_REDOP_SUM ? 0.0f : -INFINITY;
        for (int q = 0; q < n; q++) {
            float v = reel_load(post[q].send, dt, (int64_t)(at + i));
            acc = op == REEL_REDOP_SUM ? acc + v : (v > acc ? v : acc);
        }
        reel_store(dst, dt, (int64_t)i, acc);
    }
}

const char *const reel_hc_names[] = {"all_reduce", "all_gather", "reduce_scatter", "all_to_all",
                                     "send", "recv", "compile exchange"};

void reel_hc_compute(const hc_post *post, int n, int rank, void *dst)
{
    const hc_post *me = &post[rank];
    size_t cb = me->count * me->elem;
    switch (me->kind) {
    case HC_ALL_REDUCE: reduce_into(dst, post, n, 0, me->count, me->dt, me->op); break;
    case HC_REDUCE_SCATTER:
        reduce_into(dst, post, n, (size_t)rank * me->count, me->count, me->dt, me->op);
        break;
    case HC_ALL_GATHER:
    case HC_AGREE:
        for (int q = 0; q < n; q++)
            memcpy((char *)dst + (size_t)q * cb, post[q].send, cb);
        break;
    case HC_ALL_TO_ALL:
        for (int q = 0; q < n; q++)
            memcpy((char *)dst + (size_t)q * cb, (const char *)post[q].send + (size_t)rank * cb, cb);
        break;
    default: break;
    }
}

reel_status reel_hc_issue_check(reel_comm *c, hc_kind kind, reel_dtype dt, int peer)
{
    if ((int)dt < 0 || dt >= REEL_DTYPE_COUNT)
        return reel_seterr(c->err, REEL_E_INVALID_ARG, "comm %s: unknown dtype %d", reel_hc_names[kind], (int)dt);
    if ((kind == HC_SEND || kind == HC_RECV) && (peer < 0 || peer >= c->nranks || peer == c->rank))
        return reel_seterr(c->err, REEL_E_INVALID_ARG, "comm rank %d of %d: %s: peer %d is not another rank", c->rank,
                           c->nranks, reel_hc_names[kind], peer);
    return REEL_OK;
}

size_t reel_hc_recv_bytes(const hc_post *p, int n)
{
    size_t cb = p->count * p->elem;
    return p->kind == HC_ALL_REDUCE || p->kind == HC_REDUCE_SCATTER ? cb : cb * (size_t)n;
}

size_t reel_hc_send_bytes(const hc_post *p, int n)
{
    size_t cb = p->count * p->elem;
    return p->kind == HC_ALL_REDUCE || p->kind == HC_ALL_GATHER || p->kind == HC_AGREE ? cb : cb * (size_t)n;
}

bool reel_hc_overlaps(const void *a, size_t na, const void *b, size_t nb)
{
    const char *x = a, *y = b;
    return na && nb && x < y + nb && y < x + na;
}

/* Every rank must have issued this collective with the same count and
 * dtype (mu held, after barrier A). */
static bool posts_agree(hc_group *g, int rank, uint64_t seq)
{
    const hc_post *a = &g->post[0];
    for (int q = 1; q < g->n; q++) {
        const hc_post *b = &g->post[q];
        if (b->kind == a->kind && b->count == a->count && b->dt == a->dt && b->op == a->op)
            continue;
        group_fail(g, REEL_E_INVALID_USAGE,
                   "comm rank %d of %d: collective #%llu differs across ranks: rank 0 issued %s of %zu %s, rank %d "
                   "%s of %zu %s",
                   rank, g->n, (unsigned long long)seq, reel_hc_names[a->kind], a->count, reel_dtype_name(a->dt), q,
                   reel_hc_names[b->kind], b->count, reel_dtype_name(b->dt));
        return false;
    }
    return true;
}

/* A group collective of this rank (mu held on entry and exit). */
static void run_group(hc_group *g, int rank, const hc_post *post, uint64_t seq)
{
    const char *what = reel_hc_names[post->kind];
    g->post[rank] = *post;
    if (!barrier(g, rank, what, seq) || !posts_agree(g, rank, seq))
        return;
    size_t rb = reel_hc_recv_bytes(post, g->n);
    /* Another rank may still read this rank's input: a result that would
     * overwrite it goes to scratch first. */
    bool alias = reel_hc_overlaps(post->recv, rb, post->send, reel_hc_send_bytes(post, g->n));
    void *dst = post->recv, *tmp = NULL;
    if (alias && !(tmp = reel_halloc(rb ? rb : 1))) {
        group_fail(g, REEL_E_OOM, "comm rank %d of %d: %s #%llu: out of host memory for %zu bytes of scratch", rank,
                   g->n, what, (unsigned long long)seq, rb);
        return;
    }
    if (alias)
        dst = tmp;
    pthread_mutex_unlock(&g->mu);
    reel_hc_compute(g->post, g->n, rank, dst);
    pthread_mutex_lock(&g->mu);
    bool ok = barrier(g, rank, what, seq);
    if (ok && alias)
        memcpy(post->recv, tmp, rb);
    reel_hfree(tmp);
}

static void run_send(hc_group *g, int rank, const hc_post *post, int peer, uint64_t seq)
{
    size_t bytes = post->count * post->elem;
    hc_msg *m = reel_halloc(sizeof *m + (bytes ? bytes : 1));
    if (!m) {
        group_fail(g, REEL_E_OOM, "comm rank %d of %d: send #%llu to rank %d: out of host memory for %zu bytes", rank,
                   g->n, (unsigned long long)seq, peer, bytes);
        return;
    }
    m->next = NULL;
    m->count = post->count;
    m->dt = post->dt;
    memcpy(m->data, post->send, bytes);
    size_t ch = (size_t)rank * (size_t)g->n + (size_t)peer;
    if (g->tail[ch])
        g->tail[ch]->next = m;
    else
        g->head[ch] = m;
    g->tail[ch] = m;
    pthread_cond_broadcast(&g->cv);
}

static void run_recv(hc_group *g, int rank, const hc_post *post, int peer, uint64_t seq)
{
    size_t ch = (size_t)peer * (size_t)g->n + (size_t)rank;
    struct timespec dl = deadline_after(g->timeout_ms);
    while (!g->head[ch] && g->failed == REEL_OK) {
        if (g->gone[peer]) {
            group_fail(g, REEL_E_BACKEND, "comm rank %d of %d: recv #%llu from rank %d: rank %d left the group", rank,
                       g->n, (unsigned long long)seq, peer, peer);
            return;
        }
        if (!wait_until(g, &dl) && !g->head[ch] && g->failed == REEL_OK)
            group_fail(g, REEL_E_BACKEND, "comm rank %d of %d: recv #%llu from rank %d timed out after %d ms", rank,
                       g->n, (unsigned long long)seq, peer, g->timeout_ms);
    }
    hc_msg *m = g->head[ch];
    if (!m)
        return;
    if (m->count != post->count || m->dt != post->dt) {
        group_fail(g, REEL_E_INVALID_USAGE,
                   "comm rank %d of %d: recv #%llu from rank %d expects %zu %s, the send carries %zu %s", rank, g->n,
                   (unsigned long long)seq, peer, post->count, reel_dtype_name(post->dt), m->count,
                   reel_dtype_name(m->dt));
        return;
    }
    g->head[ch] = m->next;
    if (!g->head[ch])
        g->tail[ch] = NULL;
    pthread_mutex_unlock(&g->mu);
    memcpy(post->recv, m->data, m->count * post->elem);
    reel_hfree(m);
    pthread_mutex_lock(&g->mu);
}

/* One collective of one rank; returns the group's status afterwards. */
static reel_status hc_exec(hc_group *g, int rank, const hc_post *post, int peer)
{
    pthread_mutex_lock(&g->mu);
    uint64_t seq = g->issued[rank]++;
    if (post->kind != HC_AGREE && g->failed == REEL_OK) {
        uint64_t k = ++g->stream_ops[rank];
        if (g->fail_at[rank] > 0 && (uint64_t)g->fail_at[rank] == k)
            group_fail(g, REEL_E_BACKEND, "comm rank %d of %d: %s #%llu: injected failure", rank, g->n,
                       reel_hc_names[post->kind], (unsigned long long)seq);
    }
    if (g->failed == REEL_OK) {
        switch (post->kind) {
        case HC_SEND: run_send(g, rank, post, peer, seq); break;
        case HC_RECV: run_recv(g, rank, post, peer, seq); break;
        default: run_group(g, rank, post, seq); break;
        }
    }
    reel_status st = g->failed;
    pthread_mutex_unlock(&g->mu);
    return st;
}

/* The stream kernel: a failure is read back through async_error. */
static void hc_kernel(const void *args)
{
    const hc_args *a = args;
    hc_exec(a->g, a->rank, &a->post, a->peer);
}

/* ---- the vt ------------------------------------------------------------- */

static reel_status issue(reel_comm *c, reel_stream *s, hc_kind kind, const void *send, void *recv, size_t count,
                         reel_dtype dt, reel_redop op, int peer)
{
    REEL_TRY(reel_hc_issue_check(c, kind, dt, peer));
    hc_args a = {.g = group_of(c), .rank = c->rank, .peer = peer,
                 .post = {.kind = kind, .count = count, .dt = dt, .op = op, .elem = reel_dtype_size(dt),
                          .send = send, .recv = recv}};
    return reel_host_launch(c->be, s, hc_kernel, &a, sizeof a);
}

static reel_status hc_all_gather(reel_comm *c, reel_stream *s, const void *send, void *recv, size_t count,
                                 reel_dtype dt)
{
    return issue(c, s, HC_ALL_GATHER, send, recv, count, dt, REEL_REDOP_SUM, -1);
}

static reel_status hc_reduce_scatter(reel_comm *c, reel_stream *s, const void *send, void *recv, size_t count,
                                     reel_dtype dt, reel_redop op)
{
    return issue(c, s, HC_REDUCE_SCATTER, send, recv, count, dt, op, -1);
}

static reel_status hc_all_reduce(reel_comm *c, reel_stream *s, const void *send, void *recv, size_t count,
                                 reel_dtype dt, reel_redop op)
{
    return issue(c, s, HC_ALL_REDUCE, send, recv, count, dt, op, -1);
}

static reel_status hc_all_to_all(reel_comm *c, reel_stream *s, const void *send, void *recv, size_t count,
                                 reel_dtype dt)
{
    return issue(c, s, HC_ALL_TO_ALL, send, recv, count, dt, REEL_REDOP_SUM, -1);
}

static reel_status hc_send(reel_comm *c, reel_stream *s, const void *buf, size_t count, reel_dtype dt, int peer)
{
    return issue(c, s, HC_SEND, buf, NULL, count, dt, REEL_REDOP_SUM, peer);
}

static reel_status hc_recv(reel_comm *c, reel_stream *s, void *buf, size_t count, reel_dtype dt, int peer)
{
    return issue(c, s, HC_RECV, NULL, buf, count, dt, REEL_REDOP_SUM, peer);
}

/* Sends are buffered: a group needs nothing more. */
static reel_status hc_group_nop(reel_comm *c) { return REEL_OK; }

static reel_status hc_async_error(reel_comm *c)
{
    hc_group *g = group_of(c);
    pthread_mutex_lock(&g->mu);
    reel_status st = g->failed;
    char why[REEL_ERRMSG_MAX];
    memcpy(why, g->why, sizeof why);
    pthread_mutex_unlock(&g->mu);
    return st == REEL_OK ? REEL_OK : reel_seterr(c->err, st, "%s", why);
}

static reel_status hc_agree(reel_comm *c, const void *mine, void *all, size_t bytes)
{
    hc_post post = {.kind = HC_AGREE, .count = bytes, .dt = REEL_I32, .elem = 1, .send = mine, .recv = all};
    if (hc_exec(group_of(c), c->rank, &post, -1) != REEL_OK)
        return hc_async_error(c);
    return REEL_OK;
}

static reel_status hc_sync(reel_comm *c, reel_stream *s)
{
    REEL_TRY(c->be->vt->stream_sync(c->be, s));
    return hc_async_error(c);
}

static void hc_abort(reel_comm *c)
{
    hc_group *g = group_of(c);
    pthread_mutex_lock(&g->mu);
    group_fail(g, REEL_E_BACKEND, "comm rank %d of %d aborted the communicator", c->rank, g->n);
    pthread_mutex_unlock(&g->mu);
}

static void hc_destroy(reel_comm *c)
{
    hc_group *g = group_of(c);
    pthread_mutex_lock(&g->mu);
    g->gone[c->rank] = true;
    pthread_cond_broadcast(&g->cv);
    bool last = --g->refs == 0;
    pthread_mutex_unlock(&g->mu);
    if (last)
        group_free(g);
    reel_hfree(c);
}

static const reel_comm_vt host_comm_vt = {
    .destroy = hc_destroy,
    .all_gather = hc_all_gather,
    .reduce_scatter = hc_reduce_scatter,
    .all_reduce = hc_all_reduce,
    .all_to_all = hc_all_to_all,
    .send = hc_send,
    .recv = hc_recv,
    .group_begin = hc_group_nop,
    .group_end = hc_group_nop,
    .agree = hc_agree,
    .sync = hc_sync,
    .async_error = hc_async_error,
    .abort = hc_abort,
};

void reel_host_comm_fail_at(reel_comm *c, int nth)
{
    hc_group *g = group_of(c);
    pthread_mutex_lock(&g->mu);
    g->fail_at[c->rank] = nth > 0 ? (int64_t)(g->stream_ops[c->rank] + (uint64_t)nth) : 0;
    pthread_mutex_unlock(&g->mu);
}

/* ---- creation ----------------------------------------------------------- */

static reel_status check_ctx(reel_ctx *ctx, int rank)
{
    if (!ctx)
        return REEL_E_INVALID_ARG;
    if (ctx->kind != REEL_BACKEND_HOST)
        return reel_seterr(&ctx->err, REEL_E_INVALID_ARG,
                           "comm create: rank %d: a host communicator needs a host context, this one is '%s'", rank,
                           reel_backend_name(ctx->kind));
    return REEL_OK;
}

/* Rank `rank` of group g (mu held, or g not shared yet). */
static reel_comm *comm_new(reel_ctx *ctx, hc_group *g, int rank)
{
    reel_comm *c = reel_hcalloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->vt = &host_comm_vt;
    c->ctx = ctx;
    c->be = ctx->be;
    c->err = &ctx->err;
    c->rank = rank;
    c->nranks = g->n;
    c->timeout_ms = g->timeout_ms;
    c->impl = g;
    g->refs++;
    return c;
}

reel_status reel_host_comm_group(reel_ctx *const *ctxs, int n, int timeout_ms, reel_comm **comms)
{
    for (int r = 0; r < n; r++)
        REEL_TRY(check_ctx(ctxs[r], r));
    hc_group *g = group_new(n, timeout_ms);
    if (!g)
        return reel_seterr(&ctxs[0]->err, REEL_E_OOM, "comm create: out of host memory for a group of %d", n);
    for (int r = 0; r < n; r++) {
        comms[r] = comm_new(ctxs[r], g, r);
        if (!comms[r]) {
            for (int q = 0; q < r; q++)
                reel_hfree(comms[q]), comms[q] = NULL;
            group_free(g);
            return reel_seterr(&ctxs[r]->err, REEL_E_OOM, "comm create: out of host memory");
        }
    }
    return REEL_OK;
}

/* ---- the rendezvous of reel_comm_create --------------------------------
 * Ranks that join by id meet in a process-wide list of open rendezvous
 * (the one piece of global state besides the op registry: the id is all
 * the ranks share). An entry lives until every rank that waited on it has
 * left; the group then belongs to its communicators. */

#define TOKEN_BYTES (REEL_COMM_ID_BYTES - REEL_COMM_ID_HEAD)

typedef struct rdv {
    struct rdv *next;
    unsigned char token[TOKEN_BYTES];
    int n, joined, users;
    bool done, listed;
    hc_group *g;
    reel_comm **comms;        /* [n] */
} rdv;

static pthread_mutex_t rdv_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t rdv_cv = PTHREAD_COND_INITIALIZER;
static rdv *rdv_list;
static uint64_t rdv_counter;

void reel_host_comm_token(unsigned char *token)
{
    uint64_t k = __atomic_add_fetch(&rdv_counter, 1, __ATOMIC_RELAXED);
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    /* the process too: ids made at once in two processes (forked workers,
     * launchers) differ */
    uint64_t words[4] = {k, (uint64_t)t.tv_sec, (uint64_t)t.tv_nsec ^ (uint64_t)(uintptr_t)&k, (uint64_t)getpid()};
    memset(token, 0, TOKEN_BYTES);
    memcpy(token, words, sizeof words);
}

static rdv *rdv_find(const unsigned char *token)
{
    for (rdv *e = rdv_list; e; e = e->next)
        if (memcmp(e->token, token, TOKEN_BYTES) == 0)
            return e;
    return NULL;
}

static void rdv_unlist(rdv *e)
{
    for (rdv **p = &rdv_list; *p; p = &(*p)->next)
        if (*p == e) {
            *p = e->next;
            break;
        }
    e->listed = false;
}

static void rdv_leave(rdv *e)
{
    if (--e->users > 0)
        return;
    if (e->listed)
        rdv_unlist(e);
    /* A rendezvous that completed gave its group to the communicators. */
    if (!e->done)
        group_free(e->g);
    reel_hfree(e->comms);
    reel_hfree(e);
}

static rdv *rdv_open(const unsigned char *token, int n, int timeout_ms)
{
    rdv *e = reel_hcalloc(1, sizeof *e);
    if (!e)
        return NULL;
    e->comms = reel_hcalloc((size_t)n, sizeof *e->comms);
    e->g = group_new(n, timeout_ms);
    if (!e->comms || !e->g) {
        if (e->g)
            group_free(e->g);
        reel_hfree(e->comms);
        reel_hfree(e);
        return NULL;
    }
    memcpy(e->token, token, TOKEN_BYTES);
    e->n = n;
    e->listed = true;
    e->next = rdv_list;
    rdv_list = e;
    return e;
}

reel_status reel_host_comm_join(reel_ctx *ctx, const unsigned char *token, int rank, int nranks, int timeout_ms,
                                reel_comm **out)
{
    REEL_TRY(check_ctx(ctx, rank));
    pthread_mutex_lock(&rdv_mu);
    rdv *e = rdv_find(token);
    if (!e && !(e = rdv_open(token, nranks, timeout_ms))) {
        pthread_mutex_unlock(&rdv_mu);
        return reel_seterr(&ctx->err, REEL_E_OOM, "comm create: out of host memory");
    }
    if (e->n != nranks || e->comms[rank]) {
        int n = e->n;
        pthread_mutex_unlock(&rdv_mu);
        if (n != nranks)
            return reel_seterr(&ctx->err, REEL_E_INVALID_ARG,
                               "comm create: rank %d says the group has %d ranks, an earlier rank said %d", rank,
                               nranks, n);
        return reel_seterr(&ctx->err, REEL_E_INVALID_ARG, "comm create: rank %d of %d joined twice", rank, nranks);
    }
    reel_comm *c = comm_new(ctx, e->g, rank);
    if (!c) {
        pthread_mutex_unlock(&rdv_mu);
        return reel_seterr(&ctx->err, REEL_E_OOM, "comm create: out of host memory");
    }
    e->users++;
    e->comms[rank] = c;
    if (++e->joined == e->n) {
        e->done = true;
        rdv_unlist(e);
        pthread_cond_broadcast(&rdv_cv);
    }
    /* rdv_cv uses the realtime clock (static initialiser). */
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += timeout_ms / 1000;
    dl.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (dl.tv_nsec >= 1000000000L)
        dl.tv_sec++, dl.tv_nsec -= 1000000000L;
    while (!e->done) {
        if (timeout_ms <= 0)
            pthread_cond_wait(&rdv_cv, &rdv_mu);
        else if (pthread_cond_timedwait(&rdv_cv, &rdv_mu, &dl) == ETIMEDOUT && !e->done)
            break;
    }
    reel_status st = REEL_OK;
    if (!e->done) {
        int joined = e->joined;
        e->comms[rank] = NULL;
        e->joined--;
        e->g->refs--;
        reel_hfree(c);
        c = NULL;
        st = reel_seterr(&ctx->err, REEL_E_BACKEND,
                         "comm create: rank %d of %d: timed out after %d ms with %d of %d ranks joined", rank, nranks,
                         timeout_ms, joined, nranks);
    }
    rdv_leave(e);
    pthread_mutex_unlock(&rdv_mu);
    *out = c;
    return st;
}
