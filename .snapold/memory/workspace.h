/* Internal (L2): the stream-aware workspace allocator, for eager ops and
 * scratch of dynamic size.
 *
 * Blocks come from size classes (powers of two) of one backend device and
 * are cached when freed. A block is owned by the stream it was allocated on;
 * reel_ws_record_use adds the other streams that touch it. Freeing a block
 * records a fence event (from a pool) on every stream that used it, and the
 * bytes go to someone else only once those fences are ordered before the new
 * user:
 *   - REEL_WS_DEFER_FREE: a free with uses on other streams is deferred until
 *     their fences complete (event queries, never during a capture); a
 *     cached block changes stream only once its owner's fence completed;
 *   - REEL_WS_WAIT_ON_REUSE: the block is cached at once, and its next user
 *     on another stream is made to wait on the fences (stream waits).
 * The owner itself reuses a block at once: stream order covers it.
 *
 * Capture: blocks allocated or freed while capturing belong to that capture's
 * graph (the graph touches them at every replay) and come back only through
 * reel_ws_graph_release. During a capture no event is queried or waited on
 * from outside it; frees deferred before it are released when it ends
 * (reel_ws_capture_end).
 *
 * The allocator reports every hand-out, free, fence record, wait and
 * completion it learns of to an optional hazard checker, so programs run
 * through it are checked, reuse included.
 *
 * Threads: one thread at a time (the serving loop's), externally
 * synchronized. Works on any backend through its vt (host and CUDA). */
#ifndef REEL_MEMORY_WORKSPACE_H
#define REEL_MEMORY_WORKSPACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "reel/memory.h"
#include "backend/backend.h"

typedef struct reel_ws reel_ws;
typedef struct reel_ws_block reel_ws_block;
typedef struct reel_ws_graph reel_ws_graph;

typedef enum reel_ws_policy {
    REEL_WS_DEFER_FREE = 0,
    REEL_WS_WAIT_ON_REUSE,
    /* For safety tests only: the pool that had to be reverted. Any free
     * block goes to any stream at once, with no fences and no waits. */
    REEL_WS_UNSAFE_EAGER,
} reel_ws_policy;

typedef struct reel_ws_opts {
    reel_ws_policy policy;
    size_t min_block;           /* smallest class in bytes (power of two); 0: 512 */
    reel_checker *checker;      /* optional, borrowed: told about everything */
    /* Optional: the checker's key of a stream (default: its address). */
    uint64_t (*stream_key)(void *user, const reel_stream *s);
    void *key_user;
} reel_ws_opts;

typedef struct reel_ws_stats {
    size_t in_use;              /* bytes handed out and not freed */
    size_t cached;              /* bytes free in the pools */
    size_t deferred;            /* bytes freed, waiting for fences of other streams */
    size_t held;                /* bytes kept for captured graphs */
    size_t device;              /* bytes obtained from the device */
    size_t peak;                /* highest in_use */
    uint64_t allocs, reuses, device_allocs, frees_deferred, waits, events_created;
} reel_ws_stats;

/* Creates an allocator over be (borrowed; it must outlive the allocator). */
reel_status reel_ws_create(reel_backend *be, const reel_ws_opts *opts, reel_ws **out);
/* Waits for every fence, returns all memory (blocks still handed out
 * included) and the events. NULL is fine. */
void reel_ws_destroy(reel_ws *ws);

/* A block of at least bytes for stream s. */
reel_status reel_ws_alloc(reel_ws *ws, reel_stream *s, size_t bytes, reel_ws_block **out);
/* Stream s (other than the owner) uses the block: its free will fence s. */
reel_status reel_ws_record_use(reel_ws *ws, reel_ws_block *b, reel_stream *s);
/* Gives the block back; see the policies above. */
reel_status reel_ws_free(reel_ws *ws, reel_ws_block *b);

void *reel_ws_block_ptr(const reel_ws_block *b);
size_t reel_ws_block_size(const reel_ws_block *b);
/* The allocation's number (new at every hand-out) and its checker id (0
 * without a checker), for reel_checker_use. */
uint64_t reel_ws_block_id(const reel_ws_block *b);
uint64_t reel_ws_block_check_id(const reel_ws_block *b);

/* Releases deferred frees whose fences completed. Nothing while capturing. */
reel_status reel_ws_poll(reel_ws *ws);

/* Before a capture begins (outside it): waits for the fences of cached and
 * deferred blocks, so the capture can take them. Optional: a capture noticed
 * through vt->capturing starts capture mode too, with fresh memory only. */
reel_status reel_ws_capture_begin(reel_ws *ws);
/* After the capture ended: *out (may be NULL if the capture used no block)
 * holds the blocks the graph uses; deferred frees are released. */
reel_status reel_ws_capture_end(reel_ws *ws, reel_ws_graph **out);
/* The graph is destroyed: its blocks come back, fenced on the stream of its
 * last launch (NULL: the host knows the graph is idle). */
reel_status reel_ws_graph_release(reel_ws *ws, reel_ws_graph *g, reel_stream *last_launch);

/* Returns cached and deferred blocks to the device (waiting for their
 * fences), and idle events. Not while capturing. */
reel_status reel_ws_trim(reel_ws *ws);
void reel_ws_get_stats(const reel_ws *ws, reel_ws_stats *out);

#endif
