/*
 * reel communicators and collective ops: several ranks (GPUs, or threads of
 * one process on the host backend) running one model, whose collectives are
 * nodes of the same captured graphs as every other op.
 *
 * One communicator per rank, created the same way on every backend: one
 * rank makes an id, a launcher hands it to every rank (a file, an
 * environment variable: reel_comm_id_to_hex / reel_comm_id_from_hex), and
 * every rank joins with its rank number. On a CUDA context the id is an
 * ncclUniqueId and the communicator is NCCL's (ranks may be threads,
 * processes or hosts); on a host context the ranks are threads of this
 * process and the communicator exchanges through shared memory.
 *
 *     // rank r, on its own thread (or process), with its own context:
 *     reel_comm_id id;                      // rank 0: reel_comm_unique_id(ctx, &id),
 *                                           // then passed to the others
 *     reel_comm *comm;
 *     reel_comm_create(ctx, &id, r, n, NULL, &comm);   // returns once all n joined
 *     reel_tensor h = reel_all_reduce(g, partial);     // a node like any other
 *     reel_compile_opts o = REEL_COMPILE_OPTS_INIT;
 *     o.comm = comm;                                   // the plan holds a reference
 *     reel_compile(g, &o, &plan);                      // every rank: same sequence, checked
 *     ... reel_step(plan, &s) on every rank, same num_tokens ...
 *     reel_plan_destroy(plan);
 *     reel_comm_destroy(comm);                         // refused while a plan uses it
 *
 * reel_comm_create_group creates all ranks of a group from one thread (the
 * host backend's test setup, or one process driving several GPUs).
 *
 * Rules every rank must follow, checked where reel can:
 * - Every rank compiles its plan with its communicator; compile exchanges
 *   a hash of each rank's collective sequence (kind, shape, dtype, peer,
 *   order) and the buckets, and fails on every rank, naming the first
 *   difference, instead of hanging at the first replay. A rank whose compile
 *   fails before that exchange tells the others, which fail too.
 * - Every rank steps its plan with the same num_tokens: a collective moves
 *   the bucket's rows, and ranks in different buckets would disagree.
 * - A communicator's ops of one plan run on one stream (refused at compile
 *   otherwise): a rank issues them in one order.
 * Errors: a collective that fails or times out breaks the communicator of
 * every rank (reel_comm_async_error); each rank's next reel_step returns the
 * error with a message naming the rank and collective, never hangs.
 */
#ifndef REEL_COMM_H
#define REEL_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "reel/reel.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct reel_comm reel_comm;

/* The bytes that name one group: an ncclUniqueId (128 bytes) or a host
 * rendezvous, behind a small header saying which. */
#define REEL_COMM_ID_BYTES 144
typedef struct reel_comm_id {
    unsigned char bytes[REEL_COMM_ID_BYTES];
} reel_comm_id;

/* Follows the option-struct rule of reel.h (REEL_COMM_OPTS_INIT, undefined
 * options take their defaults, fields only appended). */
#define REEL_COMM_OPTS_MAGIC REEL_MAGIC('r', 'c', 'o', 'm')
typedef struct reel_comm_opts {
    size_t size;     /* sizeof(reel_comm_opts) of the caller's header */
    int version;     /* REEL_VERSION_NUMBER of the caller's header */
    uint32_t magic;  /* REEL_COMM_OPTS_MAGIC */
    int timeout_ms;  /* the longest a rank waits for the others in one collective (host), or
                        for a step's communication to finish (NCCL: then ncclCommAbort); the
                        communicator is broken after it. 0: wait forever; undefined: 300000 */
    /* Appended in 0.2 (issue 46). */
    int processes;   /* host backend: nonzero: the ranks are processes of this machine (Unix
                        sockets in a directory the id names, under $TMPDIR or /tmp); undefined
                        or 0: threads of this process. Ignored by NCCL (any ranks) */
} reel_comm_opts;

#define REEL_COMM_OPTS_INIT \
    { sizeof(reel_comm_opts), REEL_VERSION_NUMBER, REEL_COMM_OPTS_MAGIC, REEL_UNDEF_INT, REEL_UNDEF_INT }

/* A new group id for ctx's backend, made by one rank and given to all.
 * REEL_E_UNSUPPORTED on a CUDA context when reel was built without NCCL. */
reel_status reel_comm_unique_id(reel_ctx *ctx, reel_comm_id *out);
/* The id as 2 * REEL_COMM_ID_BYTES hex digits and a NUL (buf of at least
 * 2 * REEL_COMM_ID_BYTES + 1 bytes), and back: for launchers that pass it
 * through an environment variable or a file. */
reel_status reel_comm_id_to_hex(const reel_comm_id *id, char *buf, size_t len);
reel_status reel_comm_id_from_hex(const char *hex, reel_comm_id *out);

/* Joins group id as rank `rank` of `nranks` (0 <= rank < nranks), on ctx's
 * backend (one context per rank; on CUDA, its device). Blocks until every
 * rank joined (host: at most timeout_ms, then REEL_E_BACKEND). The caller
 * owns *out. opts may be NULL. REEL_E_INVALID_ARG for an id of another
 * backend, a rank taken twice, or ranks that disagree on nranks. */
reel_status reel_comm_create(reel_ctx *ctx, const reel_comm_id *id, int rank, int nranks,
                             const reel_comm_opts *opts, reel_comm **out);
/* Joins the group the launcher's environment describes, as torchrun starts
 * ranks: RANK, WORLD_SIZE, MASTER_ADDR (unset: 127.0.0.1) and MASTER_PORT.
 * Rank 0 makes the id and serves it over TCP on MASTER_ADDR at port
 * REEL_RDZV_PORT, else MASTER_PORT + 1 (torchrun's own store may hold
 * MASTER_PORT); the other ranks fetch it, retrying until rank 0 listens,
 * within opts' timeout; then every rank joins as with reel_comm_create. On a
 * host context the ranks are processes (opts.processes is set); on CUDA the
 * group is NCCL's (create the context on device LOCAL_RANK). A variable
 * missing or out of range is REEL_E_INVALID_ARG naming it. */
reel_status reel_comm_create_env(reel_ctx *ctx, const reel_comm_opts *opts, reel_comm **out);
/* Creates every rank of one group at once from this thread: ctxs[r] gets
 * comms[r] (n ranks, one context each, all host or all CUDA). On failure
 * no communicator is left and comms[] is NULL. */
reel_status reel_comm_create_group(reel_ctx *const *ctxs, int n, const reel_comm_opts *opts, reel_comm **comms);
/* Splits parent's group: every rank of parent calls it (a collective
 * exchange over parent); the ranks that pass the same color >= 0 form a new
 * group, ranked by key and then by parent rank; REEL_COMM_SPLIT_NONE (-1)
 * joins none (*out NULL). The way PP, CP and DCP groups come from one world
 * communicator. The lowest-ranked member of each group makes its id, so a
 * split needs no launcher. opts NULL: parent's timeout and, on the host, its
 * kind (threads or processes). The caller owns *out. */
#define REEL_COMM_SPLIT_NONE (-1)
reel_status reel_comm_split(reel_comm *parent, int color, int key, const reel_comm_opts *opts, reel_comm **out);
/* Host-blocking: root's bytes into buf on every rank (every rank passes the
 * same bytes). Not a graph op: for what the host of each rank must know
 * before a step, e.g. the step's metadata when one rank schedules and the
 * others follow (reel demo --pp N with stages as processes). Through the
 * communicator's exchange (every rank's bytes travel to every rank): meant
 * for kilobytes, not tensors. */
reel_status reel_comm_broadcast(reel_comm *c, void *buf, size_t bytes, int root);
/* Destroys the communicator. Refused (REEL_E_INVALID_USAGE, with a message
 * on its context) while a plan compiled with it exists: destroy the plans
 * first. NULL: REEL_OK. Other ranks' pending collectives fail instead of
 * waiting for this one. */
reel_status reel_comm_destroy(reel_comm *c);
/* Rank and size; -1 for NULL. */
int reel_comm_rank(const reel_comm *c);
int reel_comm_size(const reel_comm *c);
/* REEL_OK, or the error that broke the communicator (a failed or timed out
 * collective of any rank, an abort), with its message on the context. */
reel_status reel_comm_async_error(reel_comm *c);
/* Breaks the group: pending and later collectives of every rank fail
 * (NCCL: ncclCommAbort). The communicator must still be destroyed. */
reel_status reel_comm_abort(reel_comm *c);

/* ---- collective ops (graph builder) -------------------------------------
 * Nodes like any other op: scheduled, memory-planned, hazard-checked and
 * captured. x may have a token dim; f32, f16, bf16 and i32. A plan with any
 * of them must be compiled with reel_compile_opts.comm; ops that name a
 * group size (nranks) are refused at compile when it is not the
 * communicator's. `axis` counts x's dims (0 is the token dim when x has
 * one, and cannot be split or gathered). Chunks are rank-major along axis. */

/* Sum over the ranks; the result has x's shape on every rank (sums in
 * float32, in rank order: bitwise the same on every rank). */
reel_tensor reel_all_reduce(reel_graph *g, reel_tensor x);
/* x's axis dim becomes nranks times longer: rank q's x is chunk q. */
reel_tensor reel_all_gather(reel_graph *g, reel_tensor x, int axis, int nranks);
/* x's axis dim (a multiple of nranks) is cut into nranks chunks; rank r
 * gets the sum over ranks of chunk r. */
reel_tensor reel_reduce_scatter(reel_graph *g, reel_tensor x, int axis, int nranks);
/* x's axis dim is cut into nranks chunks; chunk q of the result on rank r
 * is chunk r of rank q's x. Same shape as x. */
reel_tensor reel_all_to_all(reel_graph *g, reel_tensor x, int axis, int nranks);
/* Sends x to rank peer, whose graph has the matching reel_recv (same
 * shape and dtype, in the same order among the pair's messages). Returns
 * a status (the send has no result); recorded on the graph like a builder
 * error. An empty x is skipped on both sides. */
reel_status reel_send(reel_graph *g, reel_tensor x, int peer);
/* Receives a tensor of this shape (dims[0] may be REEL_DIM_TOKENS) and
 * dtype from rank peer; name names the result. */
reel_tensor reel_recv(reel_graph *g, const char *name, reel_dtype dt, int ndim, const int64_t *dims, int peer);

#ifdef __cplusplus
}
#endif

#endif /* REEL_COMM_H */
