/* Internal (L2): the planner's own helpers, shared by the files of memory/planner.c
 * (happens-before ordering, in-place eligibility, alignment, lower bound). */
#ifndef REEL_MEMORY_PLANNER_INTERNAL_H
#define REEL_MEMORY_PLANNER_INTERNAL_H

#include "memory/hb.h"
#include "memory/planner.h"

/* size rounded up to align (a power of two, or 0/1 for none); 0 on overflow. */
size_t reel_mem_align_size(size_t size, size_t align);
/* Every access of a strictly happens before every access of b. */
bool reel_mem_ordered(const reel_hb *hb, const reel_mem_buf *a, const reel_mem_buf *b);
/* 1: dst may take src's bytes in place at dst's producer; 0: it could once
 * edges order src's other accesses before that producer; -1: never. */
int reel_mem_inplace_ok(const reel_hb *hb, const reel_mem_buf *src, const reel_mem_buf *dst);
/* The problem's lower bound (see reel_mem_plan.lower_bound), with sizes
 * rounded up to the alignment since every offset is a multiple of it. */
size_t reel_mem_lower_bound(const reel_mem_problem *p);

/* The planner's conflict graph: every pair (i < j) of buffers with bytes
 * that are not ordered either way, in (i, j) order, with its relation
 * (rel[k]: 1 the pair may share bytes through new edges, 2 never, 3 in
 * place, 4 in place through new edges). p->exhaustive picks the all-pairs
 * reference over the sweep. Arrays owned by the caller (reel_hfree). */
reel_status reel_mem_conflicts(const reel_mem_problem *p, int **pi, int **pj, unsigned char **rel, size_t *n);

#endif
