/* Internal (L2): happens-before over a schedule with several streams.
 * u strictly happens before v when u is earlier on v's stream or reaches v
 * through forward edges, transitively. Kept as a forward clock per node: for
 * each stream, the first node of that stream u happens before (nodes of one
 * stream are ordered, so every later node of it follows too). That is n x
 * streams ints, linear in the schedule, where a bit matrix is quadratic.
 * Used by the planner and its verifier. */
#ifndef REEL_MEMORY_HB_H
#define REEL_MEMORY_HB_H

#include <stdbool.h>
#include <stdint.h>

#include "reel/reel.h"

typedef struct reel_hb {
    int n;
    int nstreams;       /* distinct streams of the schedule */
    int *sid;           /* [n] each node's stream, renumbered 0..nstreams-1 */
    int *fut;           /* [n][nstreams] the first node of each stream that
                           the node strictly happens before; n when none */
} reel_hb;

/* Builds the relation from the schedule's streams and the given edge lists
 * (two lists, so the verifier can pass problem edges and plan edges).
 * REEL_E_INVALID_ARG when an edge does not go forward in the schedule or a
 * node or stream is out of range; REEL_E_OOM. */
reel_status reel_hb_build(reel_hb *hb, int n, const int *stream,
                          int ne1, const int *from1, const int *to1,
                          int ne2, const int *from2, const int *to2);
void reel_hb_free(reel_hb *hb);

/* The first node of (renumbered) stream t that u strictly happens before, n if none. */
static inline int reel_hb_next(const reel_hb *hb, int u, int t)
{
    return hb->fut[(size_t)u * (size_t)hb->nstreams + (size_t)t];
}

/* u strictly happens before v (false for u == v: a node's clock points past it). */
static inline bool reel_hb_before(const reel_hb *hb, int u, int v)
{
    return reel_hb_next(hb, u, hb->sid[v]) <= v;
}

#endif
