/* Internal (L2): happens-before over a schedule with several streams.
 * Node v's row holds every node u that strictly happens before v: u earlier
 * on v's stream, or reaching v through forward edges, transitively. Used by
 * the planner and its verifier. */
#ifndef REEL_MEMORY_HB_H
#define REEL_MEMORY_HB_H

#include <stdbool.h>
#include <stdint.h>

#include "reel/reel.h"

typedef struct reel_hb {
    int n, words;
    uint64_t *rows;     /* [n][words] */
} reel_hb;

/* Builds the closure from the schedule's streams and the given edge lists
 * (two lists, so the verifier can pass problem edges and plan edges).
 * REEL_E_INVALID_ARG when an edge does not go forward in the schedule or a
 * node or stream is out of range; REEL_E_OOM. */
reel_status reel_hb_build(reel_hb *hb, int n, const int *stream,
                          int ne1, const int *from1, const int *to1,
                          int ne2, const int *from2, const int *to2);
void reel_hb_free(reel_hb *hb);

/* u strictly happens before v. */
static inline bool reel_hb_before(const reel_hb *hb, int u, int v)
{
    return (hb->rows[(size_t)v * (size_t)hb->words + (size_t)(u >> 6)] >> (u & 63)) & 1u;
}

static inline const uint64_t *reel_hb_row(const reel_hb *hb, int v)
{
    return hb->rows + (size_t)v * (size_t)hb->words;
}

#endif
