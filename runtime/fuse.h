/* Internal (L5): compile-time fusion passes over the plan's copy of the
 * graph (nodes in topological order), run before kernels are chosen. Each
 * rewrites nodes in place, keeps every tensor id and its meaning (a fused
 * node produces the results of the ops it absorbed), and counts what it
 * fused. Errors: REEL_E_OOM with a message on the plan's context. */
#ifndef REEL_EXEC_FUSE_H
#define REEL_EXEC_FUSE_H

#include "runtime/plan.h"

/* Rope ops feeding a paged attention's q and k become part of it
 * (runtime/fuse_rope.c). */
reel_status reel_fuse_rope_attention(reel_plan *p, int *fused);

#endif
