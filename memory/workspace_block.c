/* The workspace allocator's ground floor: block lists, stream keys and the
 * capture state. Every other workspace file calls down into this one, and it
 * calls none of them: workspace_capture.c (the capture calls) -> workspace.c
 * (alloc, free, poll) -> workspace_fence.c (events) -> this file. */
#include "core/halloc.h"
#include "memory/workspace_internal.h"

void reel_ws_push(reel_ws_block **head, reel_ws_block *b)
{
    b->prev = NULL;
    b->next = *head;
    if (*head)
        (*head)->prev = b;
    *head = b;
}

void reel_ws_unlink(reel_ws_block **head, reel_ws_block *b)
{
    if (b->prev)
        b->prev->next = b->next;
    else
        *head = b->next;
    if (b->next)
        b->next->prev = b->prev;
    b->next = b->prev = NULL;
}

uint64_t reel_ws_key(const reel_ws *ws, const reel_stream *s)
{
    return ws->o.stream_key ? ws->o.stream_key(ws->o.key_user, s) : (uint64_t)(uintptr_t)s;
}

bool reel_ws_capturing(reel_ws *ws, const reel_stream *s)
{
    if (ws->capture)
        return true;
    const reel_backend_vt *vt = ws->be->vt;
    if (vt->capturing && vt->capturing(ws->be, (reel_stream *)s))
        ws->capture = true;     /* a capture begun without telling us */
    return ws->capture;
}

reel_ws_graph *reel_ws_cur_graph(reel_ws *ws)
{
    if (!ws->cur)
        ws->cur = reel_hcalloc(1, sizeof *ws->cur);
    return ws->cur;
}

void reel_ws_hold(reel_ws *ws, reel_ws_graph *g, reel_ws_block *b)
{
    b->state = WS_HELD;
    b->graph = g;
    reel_ws_push(&g->held, b);
    ws->st.held += b->size;
}
