/* Internal (L1): the backends, one table. Each backend is one row: its name,
 * a probe, a constructor and its communicators. The context (ctx.c), the
 * communicator calls (comm.c) and the op registry (ops/registry.c, which
 * keeps a row of kernels per backend) read this table; adding a backend is a
 * row here and its kernels there, no branch in ctx.c or comm.c. */
#ifndef REEL_BACKEND_REGISTRY_H
#define REEL_BACKEND_REGISTRY_H

#include "backend/ctx.h"
#include "reel/comm.h"

typedef struct reel_backend_entry {
    reel_backend_kind kind;
    const char *name;
    /* Whether a backend of this kind can be created here (built in, and a
     * device visible where it needs one). */
    bool (*available)(void);
    reel_status (*create)(reel_err *err, int device, reel_backend **out);
    bool tunes_matmul;          /* has matmul candidates to time (matmul_tuning) */
    /* Communicators: the kind byte of a reel_comm_id, its name in messages,
     * a fresh id's payload, one rank joining, a group in one process. */
    unsigned char comm_id;
    const char *comm_name;
    reel_status (*comm_unique_id)(reel_err *err, unsigned char *payload);
    reel_status (*comm_create)(reel_ctx *ctx, const unsigned char *payload, int rank, int nranks, int timeout_ms,
                               reel_comm **out);
    reel_status (*comm_group)(reel_ctx *const *ctxs, int n, int timeout_ms, reel_comm **comms);
} reel_backend_entry;

/* The rows, in the order REEL_BACKEND_AUTO prefers them (the first available
 * one wins). */
int reel_backend_count(void);
const reel_backend_entry *reel_backend_at(int i);
/* The row of a kind, or of a comm id's kind byte; NULL if none. */
const reel_backend_entry *reel_backend_of(reel_backend_kind k);
const reel_backend_entry *reel_backend_of_comm_id(unsigned char comm_id);
/* "auto, host, cuda": the names reel_backend_parse takes, for messages. */
#define REEL_BACKEND_NAMES_MAX 128
void reel_backend_names(char *buf, size_t len);

#endif
