/* Internal (L1): the communicator interface, next to the stream and event
 * interfaces of backend.h. Not implemented yet: this is the slot the NCCL
 * communicator (backend/cuda) and the in-process host communicator whose
 * ranks are threads (backend/host) fill, so that collective op kinds in ops/
 * can issue on a reel_stream like any other kernel (and be captured: NCCL
 * calls are stream-capturable, the host backend records them as items).
 *
 * Like a backend, a communicator is a table of functions with a context
 * pointer. Every call is stream-ordered on s and returns a status; errors go
 * to the context's buffer (err). Calls between group_begin and group_end are
 * issued as one group (NCCL semantics: a rank's sends and receives of one
 * exchange never deadlock on each other). */
#ifndef REEL_BACKEND_COMM_H
#define REEL_BACKEND_COMM_H

#include <stddef.h>

#include "backend/backend.h"

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
    reel_status (*send)(reel_comm *c, reel_stream *s, const void *buf, size_t count, reel_dtype dt, int peer);
    reel_status (*recv)(reel_comm *c, reel_stream *s, void *buf, size_t count, reel_dtype dt, int peer);
    reel_status (*group_begin)(reel_comm *c);
    reel_status (*group_end)(reel_comm *c);
} reel_comm_vt;

struct reel_comm {
    const reel_comm_vt *vt;
    reel_backend *be;      /* the streams it issues on belong to this backend */
    reel_err *err;
    int rank, nranks;
    void *impl;
};

#endif
