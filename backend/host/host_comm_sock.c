/* The host communicator whose ranks are processes of one machine
 * (reel_comm_opts.processes): a full mesh of Unix stream sockets in a
 * directory the group's id names ($TMPDIR or /tmp, "reel-comm-" and the
 * id's token in hex). Rank r listens on r.sock there, connects to every
 * lower rank and accepts every higher one; rank 0 makes the directory and
 * removes it when it leaves.
 *
 * A collective is a kernel on the rank's host stream, as with threads, so
 * host graphs record and replay it: it sends its whole send buffer to every
 * other rank as one frame, waits for theirs, and computes its result with
 * the threads' arithmetic (host_comm_ops.h: float32 in rank order, every
 * rank the same bits). A send is one frame to its peer; a receive waits for
 * the pair's next one. One reader thread per communicator drains every
 * socket into per-peer queues (group collectives and point-to-point apart),
 * so no write waits on a peer that is itself writing. Every frame says what
 * was issued (kind, sequence number, count, dtype, reduction): a rank that
 * issued something else breaks the group with both named. A rank that
 * fails (a mismatch, a timeout, an abort) sends an abort frame with its
 * message to every peer; a peer that closes its sockets (exit, crash) is a
 * rank that left. Either breaks every rank's communicator, whose waits then
 * end at once with the first message. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "backend/ctx.h"
#include "backend/host/host_comm_ops.h"
#include "backend/host/host_internal.h"
#include "core/halloc.h"

#define SOCK_MAGIC 0x6b636f73u /* "sock" */
enum { F_GROUP = 1, F_P2P = 2, F_ABORT = 3, F_HELLO = 4 };

typedef struct frame_hdr {
    uint32_t magic, type;
    uint32_t kind, dt, op, rank;
    uint64_t seq, count, bytes;
} frame_hdr;

typedef struct sk_msg {
    struct sk_msg *next;
    frame_hdr h;
    unsigned char data[];
} sk_msg;

typedef struct sk_queue { sk_msg *head, *tail; } sk_queue;

typedef struct sk_group {
    int n, rank, timeout_ms;
    int *fd;                  /* [n], -1 for this rank */
    char dir[64];             /* "$TMPDIR/reel-comm-" and 32 hex digits (TMPDIR of at most 12 characters) */
    pthread_t reader;
    bool reader_up;
    int wake[2];              /* a pipe that wakes the reader to stop */
    pthread_mutex_t mu;
    pthread_cond_t cv;        /* CLOCK_MONOTONIC */
    sk_queue *group_q, *p2p_q; /* [n] from each peer */
    bool *gone;               /* [n] its sockets closed */
    uint64_t issued, p2p_sent_seq, *p2p_recv_seq; /* [n] messages received per peer */
    uint64_t *p2p_send_seq;   /* [n] messages sent per peer */
    reel_status failed;
    char why[REEL_ERRMSG_MAX];
} sk_group;

typedef struct sk_args {
    sk_group *g;
    hc_post post;
    int peer;
} sk_args;

static const reel_comm_vt sock_comm_vt;
static sk_group *sgroup(reel_comm *c) { return (sk_group *)c->impl; }

/* ---- failure ------------------------------------------------------------- */

static bool write_all(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return false;
        p += w;
        n -= (size_t)w;
    }
    return true;
}

/* Breaks the group (mu held); the first message stays. tell: send an abort
 * frame with it to every peer. */
static void sk_fail(sk_group *g, bool tell, reel_status st, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void sk_fail(sk_group *g, bool tell, reel_status st, const char *fmt, ...)
{
    if (g->failed == REEL_OK) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(g->why, sizeof g->why, fmt, ap);
        va_end(ap);
        g->failed = st;
        if (tell) {
            size_t len = strlen(g->why) + 1;
            frame_hdr h = {SOCK_MAGIC, F_ABORT, 0, 0, 0, (uint32_t)g->rank, 0, 0, len};
            for (int q = 0; q < g->n; q++)
                if (g->fd[q] >= 0 && !g->gone[q] && write_all(g->fd[q], &h, sizeof h))
                    write_all(g->fd[q], g->why, len);
        }
    }
    pthread_cond_broadcast(&g->cv);
}

static struct timespec deadline_after(int ms)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    t.tv_sec += ms / 1000;
    t.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (t.tv_nsec >= 1000000000L)
        t.tv_sec++, t.tv_nsec -= 1000000000L;
    return t;
}

/* ---- the reader ------------------------------------------------------------ */

static bool read_all(int fd, void *buf, size_t n)
{
    char *p = buf;
    while (n > 0) {
        ssize_t r = recv(fd, p, n, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return false;
        p += r;
        n -= (size_t)r;
    }
    return true;
}

static void enqueue(sk_queue *q, sk_msg *m)
{
    m->next = NULL;
    if (q->tail)
        q->tail->next = m;
    else
        q->head = m;
    q->tail = m;
}

/* One frame from peer q (mu not held); false when q left. */
static bool read_frame(sk_group *g, int q)
{
    frame_hdr h;
    if (!read_all(g->fd[q], &h, sizeof h) || h.magic != SOCK_MAGIC)
        return false;
    sk_msg *m = reel_halloc(sizeof *m + (h.bytes ? h.bytes : 1));
    if (!m)
        return false;
    m->h = h;
    if (h.bytes && !read_all(g->fd[q], m->data, h.bytes)) {
        reel_hfree(m);
        return false;
    }
    pthread_mutex_lock(&g->mu);
    if (h.type == F_ABORT) {
        m->data[h.bytes ? h.bytes - 1 : 0] = '\0';
        sk_fail(g, false, REEL_E_BACKEND, "%s", (const char *)m->data);
        reel_hfree(m);
    } else {
        enqueue(h.type == F_P2P ? &g->p2p_q[q] : &g->group_q[q], m);
        pthread_cond_broadcast(&g->cv);
    }
    pthread_mutex_unlock(&g->mu);
    return true;
}

static void *reader_main(void *arg)
{
    sk_group *g = arg;
    struct pollfd *p = reel_hcalloc((size_t)g->n + 1, sizeof *p);
    int *who = reel_hcalloc((size_t)g->n + 1, sizeof *who);
    if (!p || !who) { /* nobody would read: break the group rather than let it time out */
        pthread_mutex_lock(&g->mu);
        sk_fail(g, true, REEL_E_OOM, "comm rank %d of %d: out of host memory for the reader", g->rank, g->n);
        pthread_mutex_unlock(&g->mu);
    }
    for (;;) {
        if (!p || !who)
            break;
        int k = 0;
        p[k++] = (struct pollfd){.fd = g->wake[0], .events = POLLIN};
        pthread_mutex_lock(&g->mu);
        for (int q = 0; q < g->n; q++)
            if (g->fd[q] >= 0 && !g->gone[q]) {
                who[k] = q;
                p[k++] = (struct pollfd){.fd = g->fd[q], .events = POLLIN};
            }
        pthread_mutex_unlock(&g->mu);
        int r = poll(p, (nfds_t)k, -1);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 || p[0].revents)
            break; /* woken to stop */
        for (int i = 1; i < k; i++) {
            if (!p[i].revents)
                continue;
            if (read_frame(g, who[i]))
                continue;
            /* Gone: what it sent is queued; a wait on it with nothing
             * queued fails then (take), naming it. */
            pthread_mutex_lock(&g->mu);
            g->gone[who[i]] = true;
            pthread_cond_broadcast(&g->cv);
            pthread_mutex_unlock(&g->mu);
        }
    }
    reel_hfree(p);
    reel_hfree(who);
    return NULL;
}

/* ---- collectives ------------------------------------------------------------ */

/* Waits (mu held) for q's next frame of queue qs; NULL with the group
 * broken on a timeout or a failure. */
static sk_msg *take(sk_group *g, sk_queue *qs, int q, const char *what, uint64_t seq)
{
    struct timespec dl = deadline_after(g->timeout_ms);
    while (!qs[q].head && g->failed == REEL_OK) {
        if (g->gone[q]) {
            sk_fail(g, true, REEL_E_BACKEND, "comm rank %d of %d: %s #%llu: rank %d left the group (its process "
                    "closed its sockets)", g->rank, g->n, what, (unsigned long long)seq, q);
            break;
        }
        bool timed_out = g->timeout_ms > 0 ? pthread_cond_timedwait(&g->cv, &g->mu, &dl) == ETIMEDOUT
                                           : (pthread_cond_wait(&g->cv, &g->mu), false);
        if (timed_out && !qs[q].head && g->failed == REEL_OK)
            sk_fail(g, true, REEL_E_BACKEND, "comm rank %d of %d: %s #%llu: rank %d sent nothing for %d ms", g->rank,
                    g->n, what, (unsigned long long)seq, q, g->timeout_ms);
    }
    if (g->failed != REEL_OK || !qs[q].head)
        return NULL;
    sk_msg *m = qs[q].head;
    qs[q].head = m->next;
    if (!qs[q].head)
        qs[q].tail = NULL;
    return m;
}

static bool send_frame(sk_group *g, int q, const frame_hdr *h, const void *data)
{
    if (write_all(g->fd[q], h, sizeof *h) && (!h->bytes || write_all(g->fd[q], data, h->bytes)))
        return true;
    pthread_mutex_lock(&g->mu);
    g->gone[q] = true;
    sk_fail(g, true, REEL_E_BACKEND, "comm rank %d of %d: rank %d left the group (a write to it failed: %s)", g->rank,
            g->n, q, strerror(errno));
    pthread_mutex_unlock(&g->mu);
    return false;
}

static void run_group(sk_group *g, const hc_post *post, uint64_t seq)
{
    const char *what = reel_hc_names[post->kind];
    size_t sb = reel_hc_send_bytes(post, g->n), rb = reel_hc_recv_bytes(post, g->n);
    frame_hdr h = {SOCK_MAGIC, F_GROUP, (uint32_t)post->kind, (uint32_t)post->dt, (uint32_t)post->op,
                   (uint32_t)g->rank, seq, post->count, sb};
    for (int q = 0; q < g->n; q++)
        if (q != g->rank && !send_frame(g, q, &h, post->send))
            return;
    hc_post *posts = reel_hcalloc((size_t)g->n, sizeof *posts);
    sk_msg **got = reel_hcalloc((size_t)g->n, sizeof *got);
    void *tmp = reel_halloc(rb ? rb : 1);
    pthread_mutex_lock(&g->mu);
    if (!posts || !got || !tmp)
        sk_fail(g, true, REEL_E_OOM, "comm rank %d of %d: %s #%llu: out of host memory for %zu bytes", g->rank, g->n,
                what, (unsigned long long)seq, rb);
    for (int q = 0; q < g->n && g->failed == REEL_OK; q++) {
        if (q == g->rank) {
            posts[q] = *post;
            continue;
        }
        sk_msg *m = got[q] = take(g, g->group_q, q, what, seq);
        if (!m)
            break;
        if (m->h.kind != (uint32_t)post->kind || m->h.seq != seq || m->h.count != post->count ||
            m->h.dt != (uint32_t)post->dt || m->h.op != (uint32_t)post->op || m->h.bytes != sb) {
            sk_fail(g, true, REEL_E_INVALID_USAGE,
                    "comm rank %d of %d: collective #%llu differs across ranks: this rank issued %s of %zu %s, rank "
                    "%d %s #%llu of %llu %s",
                    g->rank, g->n, (unsigned long long)seq, what, post->count, reel_dtype_name(post->dt), q,
                    m->h.kind <= HC_AGREE ? reel_hc_names[m->h.kind] : "?", (unsigned long long)m->h.seq,
                    (unsigned long long)m->h.count, m->h.dt < REEL_DTYPE_COUNT ? reel_dtype_name(m->h.dt) : "?");
            break;
        }
        posts[q] = *post;
        posts[q].send = m->data;
    }
    bool ok = g->failed == REEL_OK;
    pthread_mutex_unlock(&g->mu);
    if (ok) {
        reel_hc_compute(posts, g->n, g->rank, tmp); /* own send may alias recv: compute aside */
        memcpy(post->recv, tmp, rb);
    }
    for (int q = 0; got && q < g->n; q++)
        reel_hfree(got[q]);
    reel_hfree(got);
    reel_hfree(posts);
    reel_hfree(tmp);
}

static void run_send(sk_group *g, const hc_post *post, int peer)
{
    size_t bytes = post->count * post->elem;
    pthread_mutex_lock(&g->mu);
    uint64_t seq = g->p2p_send_seq[peer]++;
    pthread_mutex_unlock(&g->mu);
    frame_hdr h = {SOCK_MAGIC, F_P2P, HC_SEND, (uint32_t)post->dt, 0, (uint32_t)g->rank, seq, post->count, bytes};
    send_frame(g, peer, &h, post->send);
}

static void run_recv(sk_group *g, const hc_post *post, int peer)
{
    pthread_mutex_lock(&g->mu);
    uint64_t seq = g->p2p_recv_seq[peer]++;
    sk_msg *m = take(g, g->p2p_q, peer, "recv", seq);
    if (m && (m->h.count != post->count || m->h.dt != (uint32_t)post->dt))
        sk_fail(g, true, REEL_E_INVALID_USAGE,
                "comm rank %d of %d: recv #%llu from rank %d expects %zu %s, the send carries %llu %s", g->rank, g->n,
                (unsigned long long)seq, peer, post->count, reel_dtype_name(post->dt),
                (unsigned long long)m->h.count, m->h.dt < REEL_DTYPE_COUNT ? reel_dtype_name(m->h.dt) : "?");
    bool ok = g->failed == REEL_OK && m;
    pthread_mutex_unlock(&g->mu);
    if (ok)
        memcpy(post->recv, m->data, post->count * post->elem);
    reel_hfree(m);
}

static reel_status sk_exec(sk_group *g, const hc_post *post, int peer)
{
    pthread_mutex_lock(&g->mu);
    reel_status st = g->failed;
    uint64_t seq = post->kind == HC_SEND || post->kind == HC_RECV ? 0 : g->issued++;
    pthread_mutex_unlock(&g->mu);
    if (st != REEL_OK)
        return st;
    switch (post->kind) {
    case HC_SEND: run_send(g, post, peer); break;
    case HC_RECV: run_recv(g, post, peer); break;
    default: run_group(g, post, seq); break;
    }
    pthread_mutex_lock(&g->mu);
    st = g->failed;
    pthread_mutex_unlock(&g->mu);
    return st;
}

static void sk_kernel(const void *args)
{
    const sk_args *a = args;
    sk_exec(a->g, &a->post, a->peer);
}

static reel_status issue(reel_comm *c, reel_stream *s, hc_kind kind, const void *send, void *recv, size_t count,
                         reel_dtype dt, reel_redop op, int peer)
{
    REEL_TRY(reel_hc_issue_check(c, kind, dt, peer));
    sk_args a = {.g = sgroup(c), .peer = peer,
                 .post = {.kind = kind, .count = count, .dt = dt, .op = op, .elem = reel_dtype_size(dt),
                          .send = send, .recv = recv}};
    return reel_host_launch(c->be, s, sk_kernel, &a, sizeof a);
}

static reel_status sk_all_gather(reel_comm *c, reel_stream *s, const void *send, void *recv, size_t count,
                                 reel_dtype dt)
{
    return issue(c, s, HC_ALL_GATHER, send, recv, count, dt, REEL_REDOP_SUM, -1);
}
static reel_status sk_reduce_scatter(reel_comm *c, reel_stream *s, const void *send, void *recv, size_t count,
                                     reel_dtype dt, reel_redop op)
{
    return issue(c, s, HC_REDUCE_SCATTER, send, recv, count, dt, op, -1);
}
static reel_status sk_all_reduce(reel_comm *c, reel_stream *s, const void *send, void *recv, size_t count,
                                 reel_dtype dt, reel_redop op)
{
    return issue(c, s, HC_ALL_REDUCE, send, recv, count, dt, op, -1);
}
static reel_status sk_all_to_all(reel_comm *c, reel_stream *s, const void *send, void *recv, size_t count,
                                 reel_dtype dt)
{
    return issue(c, s, HC_ALL_TO_ALL, send, recv, count, dt, REEL_REDOP_SUM, -1);
}
static reel_status sk_send(reel_comm *c, reel_stream *s, const void *buf, size_t count, reel_dtype dt, int peer)
{
    return issue(c, s, HC_SEND, buf, NULL, count, dt, REEL_REDOP_SUM, peer);
}
static reel_status sk_recv(reel_comm *c, reel_stream *s, void *buf, size_t count, reel_dtype dt, int peer)
{
    return issue(c, s, HC_RECV, NULL, buf, count, dt, REEL_REDOP_SUM, peer);
}
static reel_status sk_group_nop(reel_comm *c) { return REEL_OK; }

static reel_status sk_async_error(reel_comm *c)
{
    sk_group *g = sgroup(c);
    pthread_mutex_lock(&g->mu);
    reel_status st = g->failed;
    char why[REEL_ERRMSG_MAX];
    memcpy(why, g->why, sizeof why);
    pthread_mutex_unlock(&g->mu);
    return st == REEL_OK ? REEL_OK : reel_seterr(c->err, st, "%s", why);
}

static reel_status sk_agree(reel_comm *c, const void *mine, void *all, size_t bytes)
{
    hc_post post = {.kind = HC_AGREE, .count = bytes, .dt = REEL_I32, .elem = 1, .send = mine, .recv = all};
    if (sk_exec(sgroup(c), &post, -1) != REEL_OK)
        return sk_async_error(c);
    return REEL_OK;
}

static reel_status sk_sync(reel_comm *c, reel_stream *s)
{
    REEL_TRY(c->be->vt->stream_sync(c->be, s));
    return sk_async_error(c);
}

static void sk_abort(reel_comm *c)
{
    sk_group *g = sgroup(c);
    pthread_mutex_lock(&g->mu);
    sk_fail(g, true, REEL_E_BACKEND, "comm rank %d of %d aborted the communicator", g->rank, g->n);
    pthread_mutex_unlock(&g->mu);
}

static void group_free(sk_group *g)
{
    if (g->reader_up) {
        char b = 1;
        if (write(g->wake[1], &b, 1) < 0) { /* the reader also ends when every socket closed */
        }
        pthread_join(g->reader, NULL);
    }
    for (int q = 0; g->fd && q < g->n; q++)
        if (g->fd[q] >= 0)
            close(g->fd[q]);
    if (g->wake[0] >= 0)
        close(g->wake[0]), close(g->wake[1]);
    for (int q = 0; q < g->n; q++)
        for (int k = 0; k < 2; k++) {
            sk_queue *qs = k ? g->p2p_q : g->group_q;
            for (sk_msg *m = qs ? qs[q].head : NULL, *next; m; m = next) {
                next = m->next;
                reel_hfree(m);
            }
        }
    if (g->rank == 0 && g->dir[0])
        rmdir(g->dir);
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
    reel_hfree(g->fd), reel_hfree(g->group_q), reel_hfree(g->p2p_q), reel_hfree(g->gone);
    reel_hfree(g->p2p_recv_seq), reel_hfree(g->p2p_send_seq);
    reel_hfree(g);
}

static void sk_destroy(reel_comm *c)
{
    group_free(sgroup(c));
    reel_hfree(c);
}

static const reel_comm_vt sock_comm_vt = {
    .destroy = sk_destroy,
    .all_gather = sk_all_gather,
    .reduce_scatter = sk_reduce_scatter,
    .all_reduce = sk_all_reduce,
    .all_to_all = sk_all_to_all,
    .send = sk_send,
    .recv = sk_recv,
    .group_begin = sk_group_nop,
    .group_end = sk_group_nop,
    .agree = sk_agree,
    .sync = sk_sync,
    .async_error = sk_async_error,
    .abort = sk_abort,
};

/* ---- joining ------------------------------------------------------------------ */

static sk_group *group_new(int n, int rank, int timeout_ms)
{
    sk_group *g = reel_hcalloc(1, sizeof *g);
    if (!g)
        return NULL;
    g->n = n, g->rank = rank, g->timeout_ms = timeout_ms;
    g->wake[0] = g->wake[1] = -1;
    g->fd = reel_hcalloc((size_t)n, sizeof *g->fd);
    g->group_q = reel_hcalloc((size_t)n, sizeof *g->group_q);
    g->p2p_q = reel_hcalloc((size_t)n, sizeof *g->p2p_q);
    g->gone = reel_hcalloc((size_t)n, sizeof *g->gone);
    g->p2p_recv_seq = reel_hcalloc((size_t)n, sizeof *g->p2p_recv_seq);
    g->p2p_send_seq = reel_hcalloc((size_t)n, sizeof *g->p2p_send_seq);
    pthread_condattr_t ca;
    bool ok = g->fd && g->group_q && g->p2p_q && g->gone && g->p2p_recv_seq && g->p2p_send_seq &&
              pthread_condattr_init(&ca) == 0;
    if (ok) {
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        ok = pthread_cond_init(&g->cv, &ca) == 0;
        pthread_condattr_destroy(&ca);
        if (ok && pthread_mutex_init(&g->mu, NULL) != 0) {
            pthread_cond_destroy(&g->cv);
            ok = false;
        }
    }
    if (!ok) {
        reel_hfree(g->fd), reel_hfree(g->group_q), reel_hfree(g->p2p_q), reel_hfree(g->gone);
        reel_hfree(g->p2p_recv_seq), reel_hfree(g->p2p_send_seq);
        reel_hfree(g);
        return NULL;
    }
    for (int q = 0; q < n; q++)
        g->fd[q] = -1;
    return g;
}

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static void sock_path(const sk_group *g, int r, struct sockaddr_un *a)
{
    memset(a, 0, sizeof *a);
    a->sun_family = AF_UNIX;
    snprintf(a->sun_path, sizeof a->sun_path, "%.63s/%d.sock", g->dir, r & 0xffff);
}

/* The mesh: listen, connect to lower ranks (retrying until they listen),
 * accept higher ones; each connection starts with a hello naming the rank. */
static reel_status connect_mesh(reel_ctx *ctx, sk_group *g, int nranks)
{
    const int rank = g->rank;
    double end = now_ms() + (g->timeout_ms > 0 ? g->timeout_ms : 1e12);
    if (rank == 0 && mkdir(g->dir, 0700) != 0 && errno != EEXIST)
        return reel_seterr(&ctx->err, REEL_E_BACKEND, "comm create: rank 0: mkdir %s: %s", g->dir, strerror(errno));
    while (rank != 0 && access(g->dir, F_OK) != 0) {
        if (now_ms() > end)
            return reel_seterr(&ctx->err, REEL_E_BACKEND,
                               "comm create: rank %d of %d: timed out after %d ms waiting for rank 0 (no %s)", rank,
                               nranks, g->timeout_ms, g->dir);
        usleep(2000);
    }
    int ls = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un me;
    sock_path(g, rank, &me);
    unlink(me.sun_path);
    if (ls < 0 || bind(ls, (struct sockaddr *)&me, sizeof me) != 0 || listen(ls, nranks) != 0) {
        reel_status st = reel_seterr(&ctx->err, REEL_E_BACKEND, "comm create: rank %d: listening on %s: %s", rank,
                                     me.sun_path, strerror(errno));
        if (ls >= 0)
            close(ls);
        return st;
    }
    reel_status st = REEL_OK;
    for (int q = 0; q < rank && st == REEL_OK; q++) {
        struct sockaddr_un peer;
        sock_path(g, q, &peer);
        for (;;) {
            int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
            if (fd >= 0 && connect(fd, (struct sockaddr *)&peer, sizeof peer) == 0) {
                frame_hdr h = {SOCK_MAGIC, F_HELLO, 0, 0, 0, (uint32_t)rank, (uint64_t)nranks, 0, 0};
                if (!write_all(fd, &h, sizeof h)) {
                    close(fd);
                    st = reel_seterr(&ctx->err, REEL_E_BACKEND, "comm create: rank %d: hello to rank %d failed", rank, q);
                    break;
                }
                g->fd[q] = fd;
                break;
            }
            if (fd >= 0)
                close(fd);
            if (now_ms() > end) {
                st = reel_seterr(&ctx->err, REEL_E_BACKEND,
                                 "comm create: rank %d of %d: timed out after %d ms connecting to rank %d", rank,
                                 nranks, g->timeout_ms, q);
                break;
            }
            usleep(2000);
        }
    }
    for (int k = rank + 1; k < nranks && st == REEL_OK; k++) {
        struct pollfd p = {.fd = ls, .events = POLLIN};
        int left = (int)(end - now_ms());
        if (poll(&p, 1, g->timeout_ms > 0 ? (left > 0 ? left : 0) : -1) <= 0) {
            st = reel_seterr(&ctx->err, REEL_E_BACKEND,
                             "comm create: rank %d of %d: timed out after %d ms with %d of the %d higher ranks joined",
                             rank, nranks, g->timeout_ms, k - rank - 1, nranks - rank - 1);
            break;
        }
        int fd = accept4(ls, NULL, NULL, SOCK_CLOEXEC);
        frame_hdr h;
        if (fd < 0 || !read_all(fd, &h, sizeof h) || h.magic != SOCK_MAGIC || h.type != F_HELLO) {
            if (fd >= 0)
                close(fd);
            st = reel_seterr(&ctx->err, REEL_E_BACKEND, "comm create: rank %d: a connection without a hello", rank);
            break;
        }
        if (h.seq != (uint64_t)nranks || (int)h.rank <= rank || (int)h.rank >= nranks || g->fd[h.rank] >= 0) {
            close(fd);
            st = reel_seterr(&ctx->err, REEL_E_INVALID_ARG,
                             h.seq != (uint64_t)nranks ? "comm create: rank %d says the group has %llu ranks, rank %d "
                                                         "said %d"
                                                       : "comm create: rank %d: rank %llu joined twice or out of "
                                                         "range (this rank %d of %d)",
                             (int)h.rank, (unsigned long long)(h.seq != (uint64_t)nranks ? h.seq : h.rank), rank,
                             nranks);
            break;
        }
        g->fd[h.rank] = fd;
    }
    close(ls);
    unlink(me.sun_path);
    return st;
}

reel_status reel_host_sock_join(reel_ctx *ctx, const unsigned char *token, size_t token_bytes, int rank, int nranks,
                                int timeout_ms, reel_comm **out)
{
    *out = NULL;
    if (ctx->kind != REEL_BACKEND_HOST)
        return reel_seterr(&ctx->err, REEL_E_INVALID_ARG, "comm create: rank %d: a host communicator needs a host "
                           "context", rank);
    sk_group *g = group_new(nranks, rank, timeout_ms);
    reel_comm *c = reel_hcalloc(1, sizeof *c);
    if (!g || !c) {
        if (g)
            group_free(g);
        reel_hfree(c);
        return reel_seterr(&ctx->err, REEL_E_OOM, "comm create: out of host memory");
    }
    /* The directory: two 64-bit FNV-1a hashes of the whole token (its words
     * differ between groups in any byte, not only the first ones). */
    const char *tmp = getenv("TMPDIR");
    uint64_t h1 = 0xcbf29ce484222325ull, h2 = 0x84222325cbf29ce4ull;
    for (size_t i = 0; i < token_bytes; i++) {
        h1 = (h1 ^ token[i]) * 0x100000001b3ull;
        h2 = (h2 ^ token[token_bytes - 1 - i]) * 0x100000001b3ull;
    }
    snprintf(g->dir, sizeof g->dir, "%s/reel-comm-%016llx%016llx", tmp && *tmp && strlen(tmp) <= 12 ? tmp : "/tmp",
             (unsigned long long)h1, (unsigned long long)h2);
    reel_status st = connect_mesh(ctx, g, nranks);
    if (st == REEL_OK && pipe(g->wake) != 0)
        st = reel_seterr(&ctx->err, REEL_E_BACKEND, "comm create: pipe: %s", strerror(errno));
    if (st == REEL_OK) {
        if (pthread_create(&g->reader, NULL, reader_main, g) != 0)
            st = reel_seterr(&ctx->err, REEL_E_BACKEND, "comm create: the reader thread could not start");
        else
            g->reader_up = true;
    }
    if (st != REEL_OK) {
        group_free(g);
        reel_hfree(c);
        return st;
    }
    c->vt = &sock_comm_vt;
    c->ctx = ctx;
    c->be = ctx->be;
    c->err = &ctx->err;
    c->rank = rank;
    c->nranks = nranks;
    c->timeout_ms = timeout_ms;
    c->processes = true;
    c->impl = g;
    *out = c;
    return REEL_OK;
}
