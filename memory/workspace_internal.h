/* Internal (L2): the workspace allocator's state, shared by its files. */
#ifndef REEL_MEMORY_WORKSPACE_INTERNAL_H
#define REEL_MEMORY_WORKSPACE_INTERNAL_H

#include "memory/workspace.h"

#define WS_CLASSES 64

enum { WS_LIVE = 0, WS_CACHED, WS_DEFERRED, WS_HELD };

/* An event recorded on a stream after a block's last use there. */
typedef struct ws_fence {
    reel_stream *s;
    reel_event *e;
} ws_fence;

struct reel_ws_block {
    void *ptr;
    size_t size;
    int cls, state;
    reel_stream *owner;
    uint64_t id, prev_id;       /* allocation numbers: this hand-out, the previous one */
    uint64_t mem;               /* which device allocation */
    uint64_t chk;               /* checker allocation id */
    reel_stream **uses;         /* other streams since the hand-out */
    int nuses, capuses;
    ws_fence *f;                /* fences since the free */
    int nf, capf;
    bool clean;                 /* freed with no use on another stream */
    reel_ws_graph *graph;       /* the captured graph that touches it */
    reel_ws_block *next, *prev;
};

struct reel_ws_graph {
    reel_ws_block *held;
    reel_ws_graph *next, *prev;
};

struct reel_ws {
    reel_backend *be;
    reel_ws_opts o;
    reel_ws_block *cache[WS_CLASSES];
    reel_ws_block *deferred, *live;
    reel_ws_graph *graphs;      /* captured graphs holding blocks */
    reel_ws_graph *cur;         /* the capture in progress, made on first use */
    bool capture;
    reel_event **pool;
    size_t npool, cappool;
    uint64_t next_id, next_mem;
    reel_ws_stats st;
};

/* Lists, keys and the capture state (workspace_block.c, the files' ground
 * floor: capture -> workspace -> fence -> block, never back up). */
void reel_ws_push(reel_ws_block **head, reel_ws_block *b);
void reel_ws_unlink(reel_ws_block **head, reel_ws_block *b);
uint64_t reel_ws_key(const reel_ws *ws, const reel_stream *s);

/* Fences (workspace_fence.c). */
reel_status reel_ws_fence_add(reel_ws *ws, reel_ws_block *b, reel_stream *s);
reel_status reel_ws_fence_done(reel_ws *ws, const ws_fence *f, bool *done);
reel_status reel_ws_fence_sync(reel_ws *ws, const ws_fence *f);
reel_status reel_ws_fence_wait(reel_ws *ws, reel_stream *s, const ws_fence *f);
/* Returns the block's fence events to the pool, keeping those on keep (NULL: none). */
void reel_ws_fences_drop(reel_ws *ws, reel_ws_block *b, const reel_stream *keep);
/* Waits for every fence of the block and drops them. */
reel_status reel_ws_settle(reel_ws *ws, reel_ws_block *b);
void reel_ws_pool_clear(reel_ws *ws);

/* Whether work on s is captured now; a capture seen through the backend
 * starts capture mode (workspace_block.c). */
bool reel_ws_capturing(reel_ws *ws, const reel_stream *s);
reel_ws_graph *reel_ws_cur_graph(reel_ws *ws);
void reel_ws_hold(reel_ws *ws, reel_ws_graph *g, reel_ws_block *b);

#endif
