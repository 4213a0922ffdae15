/* Internal to backend/host: the collectives' arithmetic, shared by the
 * host communicator whose ranks are threads (host_comm.c, the floor: it
 * calls no other comm file) and the one whose ranks are processes
 * (host_comm_sock.c): the same float32 reductions in rank order, so both
 * give every rank the same bits. */
#ifndef REEL_BACKEND_HOST_COMM_OPS_H
#define REEL_BACKEND_HOST_COMM_OPS_H

#include <stdbool.h>
#include <stddef.h>

#include "backend/comm.h"

typedef enum hc_kind { HC_ALL_REDUCE, HC_ALL_GATHER, HC_REDUCE_SCATTER, HC_ALL_TO_ALL, HC_SEND, HC_RECV, HC_AGREE } hc_kind;

extern const char *const reel_hc_names[];

/* What one rank issued for a collective. */
typedef struct hc_post {
    hc_kind kind;
    size_t count;
    reel_dtype dt;
    reel_redop op;
    size_t elem;
    const void *send;
    void *recv;
} hc_post;

/* Rank `rank`'s result of a group collective from every rank's post (their
 * send buffers readable here), into dst (not aliasing any send buffer). */
void reel_hc_compute(const hc_post *post, int n, int rank, void *dst);
/* What issuing a collective checks before it is queued (dtype, peer). */
reel_status reel_hc_issue_check(reel_comm *c, hc_kind kind, reel_dtype dt, int peer);
/* Bytes a rank's result and its send buffer span. */
size_t reel_hc_recv_bytes(const hc_post *p, int n);
size_t reel_hc_send_bytes(const hc_post *p, int n);
bool reel_hc_overlaps(const void *a, size_t na, const void *b, size_t nb);

#endif
