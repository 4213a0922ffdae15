/* Internal (L2): the static memory planner. Offsets for every activation of
 * a schedule in one arena; two buffers share bytes only when every access of
 * one happens before every access of the other (same stream in schedule
 * order, or across streams through an event edge). */
#ifndef REEL_MEMORY_PLANNER_H
#define REEL_MEMORY_PLANNER_H

#include <stdbool.h>
#include <stddef.h>

#include "reel/reel.h"

typedef struct reel_mem_buf {
    size_t size;        /* bytes; 0-sized buffers get offset 0 */
    int nacc;           /* >= 1 */
    const int *acc;     /* schedule positions of nodes accessing it; acc[0] is the producer */
    int inplace_src;    /* a buffer whose bytes this one may take when that buffer's
                           last access is this one's producer, or -1 */
} reel_mem_buf;

typedef struct reel_mem_problem {
    int nnodes;                 /* nodes 0..nnodes-1 in schedule order */
    const int *stream;          /* [nnodes] stream of each node */
    int nedges;                 /* happens-before edges between nodes (data
                                   dependencies; same-stream order is implied
                                   by the schedule) */
    const int *edge_from, *edge_to;
    int nbufs;
    const reel_mem_buf *bufs;
    size_t alignment;           /* offsets are multiples of this (power of two) */
    bool allow_new_edges;       /* may add cross-stream edges to enable reuse */
    bool exhaustive;            /* the reference: every pair of buffers and, per
                                   node, every buffer is looked at (quadratic;
                                   tests check the plan is the same without) */
} reel_mem_problem;

typedef struct reel_mem_plan {
    size_t *offsets;            /* [nbufs] */
    size_t arena;               /* bytes of the arena */
    size_t lower_bound;         /* peak over points between consecutive
                                   nodes of bytes produced before and needed after */
    size_t node_bound;          /* reel_mem_node_bound of the problem */
    size_t nconflicts;          /* pairs of buffers not ordered either way (the
                                   conflict graph the placement works on) */
    int nnew_edges;             /* edges the executor must add: record an event
                                   after new_from, wait on it before new_to */
    int *new_from, *new_to;
} reel_mem_plan;

/* Computes a plan. out is filled (free with reel_mem_plan_free). */
reel_status reel_mem_plan_compute(const reel_mem_problem *p, reel_mem_plan *out);
void reel_mem_plan_free(reel_mem_plan *plan);

/* A second lower bound (added; the plan never goes below either): the peak,
 * over nodes, of the bytes that must coexist at a node (buffers live across
 * it or accessed by it), an in-place pair counted once. It sees what the
 * point bound cannot: an op whose input dies at it without an in-place
 * hint still needs both, and an output of the last node. */
size_t reel_mem_node_bound(const reel_mem_problem *p);

/* Verifies a plan: no two buffers overlap in bytes unless ordered (given the
 * problem's edges plus the plan's new edges). Returns the index pair of the
 * first violation in *a, *b, or REEL_OK. For tests and debug compiles. */
reel_status reel_mem_plan_verify(const reel_mem_problem *p, const reel_mem_plan *plan, int *a, int *b);

#endif
