/* The workspace allocator and stream capture. A captured graph touches its
 * blocks at every replay, long after the capture ended, so whatever a
 * capture allocated or freed stays with that graph until it is released;
 * and a capture cannot query or wait on events recorded outside it, so
 * blocks with pending fences are settled before it begins or left alone. */
#include "core/halloc.h"
#include "memory/workspace_internal.h"
#include "core/err.h"

reel_status reel_ws_capture_begin(reel_ws *ws)
{
    if (!ws)
        return REEL_E_INVALID_ARG;
    if (ws->capture)
        return reel_seterr(ws->be->err, REEL_E_INVALID_USAGE, "workspace capture_begin: a capture is in progress");
    for (int c = 0; c < WS_CLASSES; c++)
        for (reel_ws_block *b = ws->cache[c]; b; b = b->next)
            REEL_TRY(reel_ws_settle(ws, b));
    while (ws->deferred) {
        reel_ws_block *b = ws->deferred;
        REEL_TRY(reel_ws_settle(ws, b));
        reel_ws_unlink(&ws->deferred, b);
        ws->st.deferred -= b->size;
        b->state = WS_CACHED;
        reel_ws_push(&ws->cache[b->cls], b);
        ws->st.cached += b->size;
    }
    ws->capture = true;
    return REEL_OK;
}

reel_status reel_ws_capture_end(reel_ws *ws, reel_ws_graph **out)
{
    if (out)
        *out = NULL;
    if (!ws)
        return REEL_E_INVALID_ARG;
    if (!ws->capture)
        return reel_seterr(ws->be->err, REEL_E_INVALID_USAGE, "workspace capture_end: no capture in progress");
    ws->capture = false;
    reel_ws_graph *g = ws->cur;
    ws->cur = NULL;
    if (g) {
        g->prev = NULL;
        g->next = ws->graphs;
        if (ws->graphs)
            ws->graphs->prev = g;
        ws->graphs = g;
    }
    if (out)
        *out = g;
    /* the frees deferred before the capture can be looked at again */
    return ws->o.policy == REEL_WS_DEFER_FREE ? reel_ws_poll(ws) : REEL_OK;
}

static void reel_ws_graph_unlist(reel_ws *ws, reel_ws_graph *g)
{
    if (g->prev)
        g->prev->next = g->next;
    else if (ws->graphs == g)
        ws->graphs = g->next;
    if (g->next)
        g->next->prev = g->prev;
}

reel_status reel_ws_graph_release(reel_ws *ws, reel_ws_graph *g, reel_stream *last_launch)
{
    if (!ws)
        return REEL_E_INVALID_ARG;
    if (!g)
        return REEL_OK;
    if (ws->capture || g == ws->cur)
        return reel_seterr(ws->be->err, REEL_E_INVALID_USAGE, "workspace graph_release: a capture is in progress");
    reel_status st = REEL_OK;
    while (g->held && st == REEL_OK) {
        reel_ws_block *b = g->held;
        reel_ws_unlink(&g->held, b);
        ws->st.held -= b->size;
        b->graph = NULL;
        b->nuses = 0;
        if (last_launch) {      /* the graph's last replay ends before this fence */
            b->owner = last_launch;
            st = reel_ws_fence_add(ws, b, last_launch);
        }
        b->state = WS_CACHED;
        reel_ws_push(&ws->cache[b->cls], b);
        ws->st.cached += b->size;
    }
    if (st != REEL_OK)
        return st;
    /* blocks still handed out: their free must fence the graph's last launch */
    for (reel_ws_block *b = ws->live; b; b = b->next)
        if (b->graph == g) {
            b->graph = NULL;
            if (last_launch)
                REEL_TRY(reel_ws_record_use(ws, b, last_launch));
        }
    reel_ws_graph_unlist(ws, g);
    reel_hfree(g);
    return REEL_OK;
}
