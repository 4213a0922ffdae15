/* Fences of the workspace allocator: events from a pool, recorded after a
 * block's last use on a stream; every record, wait and completion is also
 * told to the checker, which is how it sees the allocator's ordering. */
#include "core/halloc.h"
#include "memory/workspace_internal.h"
#include "core/err.h"

static uint64_t reel_ws_ekey(const reel_event *e) { return (uint64_t)(uintptr_t)e; }

static reel_status reel_ws_event_get(reel_ws *ws, reel_event **out)
{
    if (ws->npool) {
        *out = ws->pool[--ws->npool];
        return REEL_OK;
    }
    REEL_TRY(ws->be->vt->event_create(ws->be, out));
    ws->st.events_created++;
    return REEL_OK;
}

static void reel_ws_event_put(reel_ws *ws, reel_event *e)
{
    if (ws->npool == ws->cappool) {
        size_t cap = ws->cappool ? 2 * ws->cappool : 16;
        reel_event **p = reel_hrealloc(ws->pool, cap * sizeof *p);
        if (!p) {       /* cannot pool it: give it back */
            ws->be->vt->event_destroy(ws->be, e);
            return;
        }
        ws->pool = p;
        ws->cappool = cap;
    }
    ws->pool[ws->npool++] = e;
}

void reel_ws_pool_clear(reel_ws *ws)
{
    while (ws->npool)
        ws->be->vt->event_destroy(ws->be, ws->pool[--ws->npool]);
}

reel_status reel_ws_fence_add(reel_ws *ws, reel_ws_block *b, reel_stream *s)
{
    if (b->nf == b->capf) {
        int cap = b->capf ? 2 * b->capf : 4;
        ws_fence *f = reel_hrealloc(b->f, (size_t)cap * sizeof *f);
        if (!f)
            return reel_seterr(ws->be->err, REEL_E_OOM, "workspace free of block #%llu: out of host memory",
                               (unsigned long long)b->id);
        b->f = f;
        b->capf = cap;
    }
    reel_event *e;
    REEL_TRY(reel_ws_event_get(ws, &e));
    reel_status st = ws->be->vt->event_record(ws->be, e, s);
    if (st != REEL_OK) {
        reel_ws_event_put(ws, e);
        return st;
    }
    if (ws->o.checker)
        REEL_TRY(reel_checker_event_record(ws->o.checker, reel_ws_ekey(e), reel_ws_key(ws, s)));
    b->f[b->nf++] = (ws_fence){ s, e };
    return REEL_OK;
}

reel_status reel_ws_fence_done(reel_ws *ws, const ws_fence *f, bool *done)
{
    REEL_TRY(ws->be->vt->event_query(ws->be, f->e, done));
    if (*done && ws->o.checker)
        REEL_TRY(reel_checker_event_sync(ws->o.checker, reel_ws_ekey(f->e)));
    return REEL_OK;
}

reel_status reel_ws_fence_sync(reel_ws *ws, const ws_fence *f)
{
    REEL_TRY(ws->be->vt->event_sync(ws->be, f->e));
    if (ws->o.checker)
        REEL_TRY(reel_checker_event_sync(ws->o.checker, reel_ws_ekey(f->e)));
    return REEL_OK;
}

reel_status reel_ws_fence_wait(reel_ws *ws, reel_stream *s, const ws_fence *f)
{
    REEL_TRY(ws->be->vt->stream_wait(ws->be, s, f->e));
    ws->st.waits++;
    if (ws->o.checker)
        REEL_TRY(reel_checker_event_wait(ws->o.checker, reel_ws_key(ws, s), reel_ws_ekey(f->e)));
    return REEL_OK;
}

/* An event can go back to the pool while a wait on it is pending or its
 * record has not run yet: a wait refers to the record current when it was
 * issued, and a later record does not change it (CUDA and host alike). */
void reel_ws_fences_drop(reel_ws *ws, reel_ws_block *b, const reel_stream *keep)
{
    int k = 0;
    for (int i = 0; i < b->nf; i++) {
        if (keep && b->f[i].s == keep)
            b->f[k++] = b->f[i];
        else
            reel_ws_event_put(ws, b->f[i].e);
    }
    b->nf = k;
}

reel_status reel_ws_settle(reel_ws *ws, reel_ws_block *b)
{
    for (int i = 0; i < b->nf; i++)
        REEL_TRY(reel_ws_fence_sync(ws, &b->f[i]));
    reel_ws_fences_drop(ws, b, NULL);
    return REEL_OK;
}
