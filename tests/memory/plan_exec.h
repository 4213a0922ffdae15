/* Test helper: runs a planner problem and its plan on the hazard checker, as
 * an executor would issue it (no kernels): nodes in schedule order, each
 * cross-stream edge an event recorded after its source and waited on before
 * its target, each node's accesses at the planned offsets (space 1). */
#ifndef REEL_TESTS_MEMORY_PLAN_EXEC_H
#define REEL_TESTS_MEMORY_PLAN_EXEC_H

#include <stdio.h>

#include "memory/planner.h"
#include "reel/memory.h"

#define PX_SPACE 1

/* Edge e of the combined list (problem edges, then plan edges). */
static inline void px_edge(const reel_mem_problem *p, const reel_mem_plan *pl, int e, int *from, int *to)
{
    if (e < p->nedges) {
        *from = p->edge_from[e];
        *to = p->edge_to[e];
    } else {
        *from = pl->new_from[e - p->nedges];
        *to = pl->new_to[e - p->nedges];
    }
}

static inline const char *px_name(char *buf, size_t len, int b)
{
    snprintf(buf, len, "buf %d", b);
    return buf;
}

/* Runs the plan; skip_edge (index in the combined list, or -1) is left out,
 * as if the executor forgot it. Returns the checker's hazard count. */
static inline size_t px_run(reel_checker *c, const reel_mem_problem *p, const reel_mem_plan *pl, int skip_edge)
{
    int ne = p->nedges + pl->nnew_edges;
    char opname[32];
    static char names[4096][16];
    static reel_check_access acc[64];
    for (int v = 0; v < p->nnodes; v++) {
        for (int e = 0; e < ne; e++) {
            int f, t;
            px_edge(p, pl, e, &f, &t);
            if (t == v && e != skip_edge && p->stream[f] != p->stream[v])
                reel_checker_event_wait(c, (uint64_t)p->stream[v], (uint64_t)e);
        }
        int n = 0;
        for (int w = 0; w < 2; w++)         /* reads first, then writes */
            for (int b = 0; b < p->nbufs && n < 64; b++)
                for (int k = 0; k < p->bufs[b].nacc; k++) {
                    bool write = k == 0;
                    if (p->bufs[b].acc[k] != v || write != (w == 1) || !p->bufs[b].size)
                        continue;
                    acc[n++] = (reel_check_access){ REEL_CHECK_ACCESS_HEAD, .space = PX_SPACE, .addr = pl->offsets[b],
                                                    .bytes = p->bufs[b].size, .write = write,
                                                    .alloc = px_name(names[b % 4096], 16, b) };
                    break;
                }
        snprintf(opname, sizeof opname, "node %d", v);
        reel_checker_op(c, (uint64_t)p->stream[v], opname, n, acc);
        for (int e = 0; e < ne; e++) {
            int f, t;
            px_edge(p, pl, e, &f, &t);
            if (f == v && e != skip_edge && p->stream[t] != p->stream[v])
                reel_checker_event_record(c, (uint64_t)e, (uint64_t)p->stream[v]);
        }
    }
    return reel_checker_count(c);
}

/* The buffer index named in a report's allocation ("buf 12" -> 12), or -1. */
static inline int px_buf_of(const char *alloc)
{
    int b = -1;
    return sscanf(alloc, "buf %d", &b) == 1 ? b : -1;
}

#endif
