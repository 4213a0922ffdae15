/* The NCCL communicator (built when NCCL is found): one ncclComm_t per rank,
 * created from an ncclUniqueId passed as bytes; every data call is an NCCL
 * call on the rank's CUDA stream, so stream capture records it into the
 * plan's graphs. NCCL results become statuses with ncclGetErrorString and
 * ncclGetLastError; asynchronous errors (ncclCommGetAsyncError) are polled
 * at each step and while a step waits; past the timeout the communicator is
 * aborted (ncclCommAbort), so no rank waits forever. Compiled here, run on
 * a GPU machine (tests/gpu). */
#include <nccl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "backend/comm.h"
#include "backend/ctx.h"
#include "backend/cuda/cuda.h"
#include "core/halloc.h"

typedef struct nccl_impl {
    ncclComm_t comm;          /* NULL once aborted */
    cudaStream_t side;        /* the compile exchange's stream */
    pthread_mutex_t mu;       /* guards broken and why */
    reel_status broken;
    char why[REEL_ERRMSG_MAX];
} nccl_impl;

static nccl_impl *impl_of(reel_comm *c) { return (nccl_impl *)c->impl; }

static reel_status nccl_status(reel_comm *c, ncclResult_t r, const char *file, int line, const char *call)
{
    if (r == ncclSuccess || r == ncclInProgress)
        return REEL_OK;
    nccl_impl *n = impl_of(c);
    const char *last = n && n->comm ? ncclGetLastError(n->comm) : ncclGetLastError(NULL);
    reel_status st = r == ncclInvalidArgument ? REEL_E_INVALID_ARG
                     : r == ncclInvalidUsage  ? REEL_E_INVALID_USAGE
                                              : REEL_E_BACKEND;
    return reel_seterr(c->err, st, "%s:%d: %s: %s%s%s", file, line, call, ncclGetErrorString(r),
                       last && *last ? ": " : "", last ? last : "");
}

#define NCCL_CK(c, call) nccl_status((c), (call), __FILE__, __LINE__, #call)

static ncclDataType_t nccl_dtype(reel_dtype dt)
{
    switch (dt) {
    case REEL_F16: return ncclFloat16;
    case REEL_BF16: return ncclBfloat16;
    case REEL_I32: return ncclInt32;
    default: return ncclFloat32;
    }
}

static ncclRedOp_t nccl_op(reel_redop op) { return op == REEL_REDOP_MAX ? ncclMax : ncclSum; }

/* A communicator that was aborted or broke refuses further work. */
static reel_status usable(reel_comm *c, const char *what)
{
    nccl_impl *n = impl_of(c);
    pthread_mutex_lock(&n->mu);
    reel_status st = n->broken;
    pthread_mutex_unlock(&n->mu);
    if (st == REEL_OK && n->comm)
        return REEL_OK;
    return reel_seterr(c->err, st ? st : REEL_E_BACKEND, "comm rank %d of %d: %s: the communicator is broken",
                       c->rank, c->nranks, what);
}

static void mark_broken(reel_comm *c, reel_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void mark_broken(reel_comm *c, reel_status st, const char *fmt, ...)
{
    nccl_impl *n = impl_of(c);
    pthread_mutex_lock(&n->mu);
    if (n->broken == REEL_OK) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(n->why, sizeof n->why, fmt, ap);
        va_end(ap);
        n->broken = st;
    }
    pthread_mutex_unlock(&n->mu);
}

static cudaStream_t cs(reel_stream *s) { return reel_cuda_stream_handle(s); }

static reel_status nc_all_gather(reel_comm *c, reel_stream *s, const void *send, void *recv, size_t count,
                                 reel_dtype dt)
{
    REEL_TRY(usable(c, "all_gather"));
    return NCCL_CK(c, ncclAllGather(send, recv, count, nccl_dtype(dt), impl_of(c)->comm, cs(s)));
}

static reel_status nc_reduce_scatter(reel_comm *c, reel_stream *s, const void *send, void *recv, size_t count,
                                     reel_dtype dt, reel_redop op)
{
    REEL_TRY(usable(c, "reduce_scatter"));
    return NCCL_CK(c, ncclReduceScatter(send, recv, count, nccl_dtype(dt), nccl_op(op), impl_of(c)->comm, cs(s)));
}

static reel_status nc_all_reduce(reel_comm *c, reel_stream *s, const void *send, void *recv, size_t count,
                                 reel_dtype dt, reel_redop op)
{
    REEL_TRY(usable(c, "all_reduce"));
    return NCCL_CK(c, ncclAllReduce(send, recv, count, nccl_dtype(dt), nccl_op(op), impl_of(c)->comm, cs(s)));
}

/* One group of a send and a receive per peer (NCCL's all-to-all). */
static reel_status nc_all_to_all(reel_comm *c, reel_stream *s, const void *send, void *recv, size_t count,
                                 reel_dtype dt)
{
    REEL_TRY(usable(c, "all_to_all"));
    nccl_impl *n = impl_of(c);
    size_t cb = count * reel_dtype_size(dt);
    REEL_TRY(NCCL_CK(c, ncclGroupStart()));
    reel_status st = REEL_OK;
    for (int q = 0; q < c->nranks && st == REEL_OK; q++) {
        st = NCCL_CK(c, ncclSend((const char *)send + (size_t)q * cb, count, nccl_dtype(dt), q, n->comm, cs(s)));
        if (st == REEL_OK)
            st = NCCL_CK(c, ncclRecv((char *)recv + (size_t)q * cb, count, nccl_dtype(dt), q, n->comm, cs(s)));
    }
    reel_status end = NCCL_CK(c, ncclGroupEnd());
    return st != REEL_OK ? st : end;
}

static reel_status nc_send(reel_comm *c, reel_stream *s, const void *buf, size_t count, reel_dtype dt, int peer)
{
    REEL_TRY(usable(c, "send"));
    return NCCL_CK(c, ncclSend(buf, count, nccl_dtype(dt), peer, impl_of(c)->comm, cs(s)));
}

static reel_status nc_recv(reel_comm *c, reel_stream *s, void *buf, size_t count, reel_dtype dt, int peer)
{
    REEL_TRY(usable(c, "recv"));
    return NCCL_CK(c, ncclRecv(buf, count, nccl_dtype(dt), peer, impl_of(c)->comm, cs(s)));
}

static reel_status nc_group_begin(reel_comm *c) { return NCCL_CK(c, ncclGroupStart()); }
static reel_status nc_group_end(reel_comm *c) { return NCCL_CK(c, ncclGroupEnd()); }

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static void nc_abort(reel_comm *c)
{
    nccl_impl *n = impl_of(c);
    mark_broken(c, REEL_E_BACKEND, "comm rank %d of %d: the communicator was aborted", c->rank, c->nranks);
    if (n->comm) {
        ncclCommAbort(n->comm);
        n->comm = NULL;
    }
}

/* REEL_OK, or the error that broke the communicator; polls NCCL's
 * asynchronous error. */
static reel_status nc_async_error(reel_comm *c)
{
    nccl_impl *n = impl_of(c);
    if (n->comm) {
        ncclResult_t ar = ncclSuccess;
        ncclResult_t r = ncclCommGetAsyncError(n->comm, &ar);
        if (r == ncclSuccess && ar != ncclSuccess && ar != ncclInProgress) {
            const char *last = ncclGetLastError(n->comm);
            mark_broken(c, REEL_E_BACKEND, "comm rank %d of %d: NCCL asynchronous error: %s%s%s", c->rank, c->nranks,
                        ncclGetErrorString(ar), last && *last ? ": " : "", last ? last : "");
        }
    }
    pthread_mutex_lock(&n->mu);
    reel_status st = n->broken;
    char why[REEL_ERRMSG_MAX];
    memcpy(why, n->why, sizeof why);
    pthread_mutex_unlock(&n->mu);
    return st == REEL_OK ? REEL_OK : reel_seterr(c->err, st, "%s", why);
}

/* Waits for a CUDA stream, polling the asynchronous error; aborts past the
 * timeout (the aborted kernels then end and the stream drains). A blocking
 * cudaStreamSynchronize would wait forever on a dead peer. */
static reel_status wait_stream(reel_comm *c, cudaStream_t s, const char *what)
{
    double t0 = now_ms();
    for (;;) {
        cudaError_t e = cudaStreamQuery(s);
        if (e == cudaSuccess)
            return nc_async_error(c);
        if (e != cudaErrorNotReady)
            return REEL_CUDA_CHECK(c->err, e);
        REEL_TRY(nc_async_error(c));
        if (c->timeout_ms > 0 && now_ms() - t0 > c->timeout_ms) {
            mark_broken(c, REEL_E_BACKEND, "comm rank %d of %d: %s timed out after %d ms; the communicator was aborted",
                        c->rank, c->nranks, what, c->timeout_ms);
            nc_abort(c);
            cudaStreamSynchronize(s);
            return nc_async_error(c);
        }
        /* Spin for the first 2 ms (a step's collectives end within
         * microseconds of the stream), then poll every 50 us. */
        if (now_ms() - t0 > 2.0) {
            struct timespec ts = {0, 50000};
            nanosleep(&ts, NULL);
        }
    }
}

static reel_status nc_sync(reel_comm *c, reel_stream *s)
{
    REEL_TRY(reel_cuda_use_device(c->be));
    return wait_stream(c, cs(s), "a step's communication");
}

/* The compile exchange: an in-place all-gather of a few bytes on the side
 * stream. */
static reel_status nc_agree(reel_comm *c, const void *mine, void *all, size_t bytes)
{
    nccl_impl *n = impl_of(c);
    REEL_TRY(usable(c, "compile exchange"));
    REEL_TRY(reel_cuda_use_device(c->be));
    char *buf = NULL;
    size_t total = bytes * (size_t)c->nranks;
    REEL_TRY(REEL_CUDA_CHECK(c->err, cudaMalloc((void **)&buf, total ? total : 1)));
    reel_status st = REEL_CUDA_CHECK(c->err, cudaMemcpyAsync(buf + (size_t)c->rank * bytes, mine, bytes,
                                                            cudaMemcpyHostToDevice, n->side));
    if (st == REEL_OK)
        st = NCCL_CK(c, ncclAllGather(buf + (size_t)c->rank * bytes, buf, bytes, ncclUint8, n->comm, n->side));
    if (st == REEL_OK)
        st = REEL_CUDA_CHECK(c->err, cudaMemcpyAsync(all, buf, total, cudaMemcpyDeviceToHost, n->side));
    if (st == REEL_OK)
        st = wait_stream(c, n->side, "the compile exchange");
    else
        cudaStreamSynchronize(n->side);
    cudaFree(buf);
    return st;
}

static void nc_destroy(reel_comm *c)
{
    nccl_impl *n = impl_of(c);
    reel_cuda_use_device(c->be);
    if (n->comm) {
        if (n->broken == REEL_OK && ncclCommFinalize(n->comm) == ncclSuccess)
            ncclCommDestroy(n->comm);
        else
            ncclCommAbort(n->comm);
    }
    if (n->side)
        cudaStreamDestroy(n->side);
    pthread_mutex_destroy(&n->mu);
    reel_hfree(n);
    reel_hfree(c);
}

static const reel_comm_vt nccl_vt = {
    .destroy = nc_destroy,
    .all_gather = nc_all_gather,
    .reduce_scatter = nc_reduce_scatter,
    .all_reduce = nc_all_reduce,
    .all_to_all = nc_all_to_all,
    .send = nc_send,
    .recv = nc_recv,
    .group_begin = nc_group_begin,
    .group_end = nc_group_end,
    .agree = nc_agree,
    .sync = nc_sync,
    .async_error = nc_async_error,
    .abort = nc_abort,
};

reel_status reel_nccl_unique_id(reel_err *err, unsigned char *payload)
{
    ncclUniqueId id;
    ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess)
        return reel_seterr(err, REEL_E_BACKEND, "comm unique_id: ncclGetUniqueId: %s: %s", ncclGetErrorString(r),
                           ncclGetLastError(NULL));
    memcpy(payload, id.internal, sizeof id.internal);
    return REEL_OK;
}

/* A communicator object without its ncclComm_t yet. */
static reel_status comm_shell(reel_ctx *ctx, int rank, int nranks, int timeout_ms, reel_comm **out)
{
    reel_comm *c = reel_hcalloc(1, sizeof *c);
    nccl_impl *n = reel_hcalloc(1, sizeof *n);
    if (!c || !n) {
        reel_hfree(c), reel_hfree(n);
        return reel_seterr(&ctx->err, REEL_E_OOM, "comm create: out of host memory");
    }
    pthread_mutex_init(&n->mu, NULL);
    c->vt = &nccl_vt;
    c->ctx = ctx;
    c->be = ctx->be;
    c->err = &ctx->err;
    c->rank = rank;
    c->nranks = nranks;
    c->timeout_ms = timeout_ms;
    c->impl = n;
    reel_status st = reel_cuda_use_device(ctx->be);
    if (st == REEL_OK)
        st = REEL_CUDA_CHECK(&ctx->err, cudaStreamCreateWithFlags(&n->side, cudaStreamNonBlocking));
    if (st != REEL_OK) {
        nc_destroy(c);
        return st;
    }
    *out = c;
    return REEL_OK;
}

reel_status reel_nccl_comm_create(reel_ctx *ctx, const unsigned char *payload, int rank, int nranks, int timeout_ms,
                                  reel_comm **out)
{
    reel_comm *c = NULL;
    *out = NULL;
    REEL_TRY(comm_shell(ctx, rank, nranks, timeout_ms, &c));
    ncclUniqueId id;
    memcpy(id.internal, payload, sizeof id.internal);
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 1;
    ncclComm_t comm = NULL;
    reel_status st = NCCL_CK(c, ncclCommInitRankConfig(&comm, nranks, id, rank, &cfg));
    if (st != REEL_OK) {
        nc_destroy(c);
        return reel_err_prefix(&ctx->err, st, "comm create: rank %d of %d", rank, nranks);
    }
    impl_of(c)->comm = comm;
    *out = c;
    return REEL_OK;
}

reel_status reel_nccl_comm_group(reel_ctx *const *ctxs, int n, int timeout_ms, reel_comm **comms)
{
    unsigned char payload[128];
    reel_status st = reel_nccl_unique_id(&ctxs[0]->err, payload);
    for (int r = 0; r < n && st == REEL_OK; r++)
        st = comm_shell(ctxs[r], r, n, timeout_ms, &comms[r]);
    if (st == REEL_OK) {
        ncclUniqueId id;
        memcpy(id.internal, payload, sizeof id.internal);
        st = NCCL_CK(comms[0], ncclGroupStart());
        for (int r = 0; r < n && st == REEL_OK; r++) {
            st = reel_cuda_use_device(ctxs[r]->be);
            if (st == REEL_OK)
                st = NCCL_CK(comms[r], ncclCommInitRank(&impl_of(comms[r])->comm, n, id, r));
        }
        reel_status end = NCCL_CK(comms[0], ncclGroupEnd());
        st = st != REEL_OK ? st : end;
    }
    if (st == REEL_OK)
        return REEL_OK;
    for (int r = 0; r < n; r++) {
        if (comms[r])
            nc_destroy(comms[r]);
        comms[r] = NULL;
    }
    return st;
}
