/* Internal (L2): pinned staging memory for host<->device copies.
 *
 * Built with jemalloc, small and large staging buffers come from a private
 * jemalloc arena whose extent hooks take page-locked memory from the
 * backend (vt->pinned_alloc: cudaHostAlloc on CUDA, plain pages on the host
 * backend); the pinned extents are kept for the arena's life (pinning is
 * slow) and returned when it is destroyed. With the system allocator each
 * buffer is a pinned allocation of its own.
 *
 * Threads: alloc and free may be called from any thread; create and destroy
 * from one. */
#ifndef REEL_MEMORY_PINNED_H
#define REEL_MEMORY_PINNED_H

#include <stdbool.h>
#include <stddef.h>

#include "backend/backend.h"

typedef struct reel_pinned reel_pinned;

typedef struct reel_pinned_stats {
    size_t mapped;          /* bytes obtained from vt->pinned_alloc and held */
    size_t backend_allocs;  /* pinned allocations held (an unaligned one is retried) */
    size_t live;            /* staging buffers handed out and not freed */
    bool arena;             /* a jemalloc arena serves the buffers */
} reel_pinned_stats;

/* be is borrowed and must outlive the staging allocator. */
reel_status reel_pinned_create(reel_backend *be, reel_pinned **out);
/* Every buffer must have been freed. Returns the pinned memory. NULL is fine. */
void reel_pinned_destroy(reel_pinned *p);
reel_status reel_pinned_alloc(reel_pinned *p, size_t bytes, void **out);
void reel_pinned_free(reel_pinned *p, void *ptr);
/* Whether ptr lies in pinned memory this allocator obtained. */
bool reel_pinned_owns(reel_pinned *p, const void *ptr);
void reel_pinned_get_stats(reel_pinned *p, reel_pinned_stats *out);

#endif
