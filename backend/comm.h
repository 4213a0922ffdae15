/* Internal (L1): the communicator interface, next to the stream and event
 * interfaces of backend.h. Two implementations: the in-process host
 * communicator whose ranks are threads (backend/host/host_comm.c: the
 * collectives are kernels on the host streams, so host graphs record and
 * replay them like any op) and NCCL (backend/cuda/cuda_comm.c, built when
 * NCCL is found: NCCL calls are stream-capturable). The public calls of
 * include/reel/comm.h are in backend/comm.c.
 *
 * Like a backend, a communicator is a table of functions with a context
 * pointer. The data calls are stream-ordered on s, flat and rank-major
 * (ops/ turns an axis into this form); they return a status for what is
 * known at issue time, and a failure while running (a peer that failed,
 * a timeout) breaks the communicator: async_error reports it afterwards,
 * on every rank. Calls between group_begin and group_end are issued as one
 * group (NCCL semantics: a rank's sends and receives of one exchange never
 * deadlock on each other). */
#ifndef REEL_BACKEND_COMM_H
#define REEL_BACKEND_COMM_H

#include <stdbool.h>
#include <stddef.h>

#include "backend/backend.h"
#include "reel/comm.h"

typedef struct reel_comm reel_comm;

typedef enum reel_redop { REEL_REDOP_SUM = 0, REEL_REDOP_MAX } reel_redop;

typedef struct reel_comm_vt {
    void (*destroy)(reel_comm *c);
    /* recv holds nranks * count elements, rank-major. */
    reel_status (*all_gather)(reel_comm *c, reel_stream *s, const void *send, void *recv, size_t count,
                              reel_dtype dt);
    /* send holds nranks * count elements; recv gets this rank's count. */
    reel_status (*reduce_scatter)(reel_comm *c, reel_stream *s, const void *send, void *recv, size_t count,
                                  reel_dtype dt, reel_redop op);
    reel_status (*all_reduce)(reel_comm *c, reel_stream *s, const void *send, void *recv, size_t count,
                              reel_dtype dt, reel_redop op);
    /* send and recv hold nranks chunks of count elements: chunk q of send
     * goes to rank q, chunk q of recv comes from rank q. */
    reel_status (*all_to_all)(reel_comm *c, reel_stream *s, const void *send, void *recv, size_t count,
                              reel_dtype dt);
    reel_status (*send)(reel_comm *c, reel_stream *s, const void *buf, size_t count, reel_dtype dt, int peer);
    reel_status (*recv)(reel_comm *c, reel_stream *s, void *buf, size_t count, reel_dtype dt, int peer);
    reel_status (*group_begin)(reel_comm *c);
    reel_status (*group_end)(reel_comm *c);
    /* Host-blocking exchange of a few bytes (compile's sequence check and
     * capture decision): all gets nranks * bytes, rank-major. Every rank
     * calls it with the same bytes. */
    reel_status (*agree)(reel_comm *c, const void *mine, void *all, size_t bytes);
    /* Waits for s's work, no longer than the communicator's timeout (NCCL:
     * polls the stream and ncclCommGetAsyncError, aborts on timeout). */
    reel_status (*sync)(reel_comm *c, reel_stream *s);
    /* REEL_OK, or the error that broke the communicator (message to err). */
    reel_status (*async_error)(reel_comm *c);
    /* Breaks the group (every rank's pending and later collectives fail). */
    void (*abort)(reel_comm *c);
} reel_comm_vt;

struct reel_comm {
    const reel_comm_vt *vt;
    reel_ctx *ctx;
    reel_backend *be;      /* the streams it issues on belong to this backend */
    reel_err *err;         /* the context's buffer */
    int rank, nranks;
    int timeout_ms;        /* 0: none */
    bool processes;        /* host: the ranks are processes (host_comm_sock.c) */
    int plans;             /* plans holding a reference (atomic) */
    void *impl;
    const reel_comm_vt *base_vt; /* its own table when vt wraps it (backend/fault.h), else NULL */
};

/* Plans hold a reference: reel_comm_destroy refuses while any is held. */
static inline void reel_comm_ref(reel_comm *c) { __atomic_add_fetch(&c->plans, 1, __ATOMIC_ACQ_REL); }
static inline void reel_comm_unref(reel_comm *c) { __atomic_sub_fetch(&c->plans, 1, __ATOMIC_ACQ_REL); }

/* The 16-byte header of a reel_comm_id, then the backend's payload. */
#define REEL_COMM_ID_HEAD 16
#define REEL_COMM_ID_HOST 1
#define REEL_COMM_ID_NCCL 2

/* Host communicators (backend/host/host_comm.c). token names a rendezvous
 * (REEL_COMM_ID_BYTES - REEL_COMM_ID_HEAD bytes). */
reel_status reel_host_comm_join(reel_ctx *ctx, const unsigned char *token, int rank, int nranks, int timeout_ms,
                                reel_comm **out);
/* The same group whose ranks are processes of this machine (Unix sockets,
 * backend/host/host_comm_sock.c): reel_comm_opts.processes. */
reel_status reel_host_sock_join(reel_ctx *ctx, const unsigned char *token, size_t token_bytes, int rank, int nranks,
                                int timeout_ms, reel_comm **out);
reel_status reel_host_comm_group(reel_ctx *const *ctxs, int n, int timeout_ms, reel_comm **comms);
/* A fresh rendezvous token. */
void reel_host_comm_token(unsigned char *token);
/* Test hook: this rank's nth stream collective from now (1-based) fails
 * the group as an injected failure; 0 clears it. */
void reel_host_comm_fail_at(reel_comm *c, int nth);

/* NCCL communicators (backend/cuda/cuda_comm.c, with NCCL; otherwise these
 * return REEL_E_UNSUPPORTED). */
reel_status reel_nccl_unique_id(reel_err *err, unsigned char *payload);
reel_status reel_nccl_comm_create(reel_ctx *ctx, const unsigned char *payload, int rank, int nranks, int timeout_ms,
                                  reel_comm **out);
reel_status reel_nccl_comm_group(reel_ctx *const *ctxs, int n, int timeout_ms, reel_comm **comms);

#endif
