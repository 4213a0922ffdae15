/* The stream-aware workspace allocator: size-class pools of one device,
 * blocks owned by a stream, frees fenced on every stream that used the
 * block (see workspace.h for the two policies). */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "core/halloc.h"
#include "memory/workspace_internal.h"
#include "core/err.h"

static int reel_ws_class(const reel_ws *ws, size_t bytes)
{
    int c = 0;
    while (c < WS_CLASSES - 1 && ((size_t)1 << c) < bytes)
        c++;
    while (((size_t)1 << c) < ws->o.min_block)
        c++;
    return c;
}

/* ---- create / destroy ----------------------------------------------------- */

reel_status reel_ws_create(reel_backend *be, const reel_ws_opts *opts, reel_ws **out)
{
    if (!out)
        return reel_seterr(be ? be->err : NULL, REEL_E_INVALID_ARG, "workspace create: out is NULL");
    *out = NULL;
    if (!be || !be->vt)
        return reel_seterr(NULL, REEL_E_INVALID_ARG, "workspace create: backend is NULL");
    reel_ws_opts o = opts ? *opts : (reel_ws_opts){ 0 };
    if (!o.min_block)
        o.min_block = 512;
    if (o.min_block & (o.min_block - 1) || o.policy > REEL_WS_UNSAFE_EAGER)
        return reel_seterr(be->err, REEL_E_INVALID_ARG, "workspace create: %s",
                           o.policy > REEL_WS_UNSAFE_EAGER ? "unknown policy" : "min_block is not a power of two");
    reel_ws *ws = reel_hcalloc(1, sizeof *ws);
    if (!ws)
        return reel_seterr(be->err, REEL_E_OOM, "workspace create: out of host memory");
    ws->be = be;
    ws->o = o;
    *out = ws;
    return REEL_OK;
}

static void reel_ws_block_destroy(reel_ws *ws, reel_ws_block *b)
{
    /* A fence whose wait failed still goes back to the pool (destroyed with
     * it): settle stops at the first failure and keeps the rest. */
    (void)reel_ws_settle(ws, b);
    reel_ws_fences_drop(ws, b, NULL);
    ws->be->vt->dev_free(ws->be, b->ptr);
    ws->st.device -= b->size;
    reel_hfree(b->uses);
    reel_hfree(b->f);
    reel_hfree(b);
}

static void reel_ws_list_destroy(reel_ws *ws, reel_ws_block **head)
{
    while (*head) {
        reel_ws_block *b = *head;
        reel_ws_unlink(head, b);
        reel_ws_block_destroy(ws, b);
    }
}

void reel_ws_destroy(reel_ws *ws)
{
    if (!ws)
        return;
    for (int c = 0; c < WS_CLASSES; c++)
        reel_ws_list_destroy(ws, &ws->cache[c]);
    reel_ws_list_destroy(ws, &ws->deferred);
    reel_ws_list_destroy(ws, &ws->live);
    if (ws->cur) {
        ws->cur->next = ws->graphs;
        ws->graphs = ws->cur;
    }
    while (ws->graphs) {
        reel_ws_graph *g = ws->graphs;
        ws->graphs = g->next;
        reel_ws_list_destroy(ws, &g->held);
        reel_hfree(g);
    }
    reel_ws_pool_clear(ws);
    reel_hfree(ws->pool);
    reel_hfree(ws);
}

/* ---- taking a cached block ------------------------------------------------ */

static bool reel_ws_only_on(const reel_ws_block *b, const reel_stream *s)
{
    for (int i = 0; i < b->nf; i++)
        if (b->f[i].s != s)
            return false;
    return true;
}

/* DEFER: a block of another stream is usable once all its fences completed. */
static reel_status reel_ws_all_done(reel_ws *ws, const reel_ws_block *b, bool *done)
{
    *done = true;
    for (int i = 0; i < b->nf && *done; i++)
        REEL_TRY(reel_ws_fence_done(ws, &b->f[i], done));
    return REEL_OK;
}

/* WAIT: the new user waits on the fences of the other streams. */
static reel_status reel_ws_wait_fences(reel_ws *ws, const reel_ws_block *b, reel_stream *s)
{
    for (int i = 0; i < b->nf; i++)
        if (b->f[i].s != s)
            REEL_TRY(reel_ws_fence_wait(ws, s, &b->f[i]));
    return REEL_OK;
}

/* A cached block of class cls for stream s, or NULL. The owner's own blocks
 * come first: stream order makes them safe without a wait or a query. */
static reel_status reel_ws_take_cached(reel_ws *ws, reel_stream *s, int cls, reel_ws_block **out)
{
    reel_ws_block **head = &ws->cache[cls];
    for (reel_ws_block *b = *head; b; b = b->next)
        if (ws->o.policy == REEL_WS_UNSAFE_EAGER || (b->owner == s && reel_ws_only_on(b, s))) {
            *out = b;
            return REEL_OK;
        }
    for (reel_ws_block *b = *head; b; b = b->next) {
        bool ok = true;
        if (ws->o.policy == REEL_WS_DEFER_FREE)
            REEL_TRY(reel_ws_all_done(ws, b, &ok));
        else
            REEL_TRY(reel_ws_wait_fences(ws, b, s));
        if (ok) {
            *out = b;
            return REEL_OK;
        }
    }
    return REEL_OK;
}

/* While capturing: a block this capture freed on the same stream with no
 * other user (the captured stream order covers it), or a settled one. */
static reel_ws_block *reel_ws_take_captured(reel_ws *ws, reel_stream *s, int cls)
{
    if (ws->cur)
        for (reel_ws_block *b = ws->cur->held; b; b = b->next)
            if (b->cls == cls && b->clean && b->owner == s)
                return b;
    for (reel_ws_block *b = ws->cache[cls]; b; b = b->next)
        if (b->nf == 0)
            return b;
    return NULL;
}

static void reel_ws_detach(reel_ws *ws, reel_ws_block *b)
{
    if (b->state == WS_HELD) {
        reel_ws_unlink(&b->graph->held, b);
        ws->st.held -= b->size;
    } else {
        reel_ws_unlink(&ws->cache[b->cls], b);
        ws->st.cached -= b->size;
    }
}

/* ---- fresh memory --------------------------------------------------------- */

static reel_status reel_ws_release_cached(reel_ws *ws);

static reel_status reel_ws_fresh(reel_ws *ws, int cls, bool capturing, reel_ws_block **out)
{
    size_t size = (size_t)1 << cls;
    reel_ws_block *b = reel_hcalloc(1, sizeof *b);
    if (!b)
        return reel_seterr(ws->be->err, REEL_E_OOM, "workspace alloc of %zu bytes: out of host memory", size);
    reel_status st = ws->be->vt->dev_alloc(ws->be, size, &b->ptr);
    if (st == REEL_E_OOM && !capturing && reel_ws_release_cached(ws) == REEL_OK)
        st = ws->be->vt->dev_alloc(ws->be, size, &b->ptr);
    if (st != REEL_OK) {
        reel_hfree(b);
        return reel_seterr(ws->be->err, st, "workspace alloc of %zu bytes: the device refused (%zu bytes in use)",
                           size, ws->st.in_use);
    }
    b->size = size;
    b->cls = cls;
    b->mem = ++ws->next_mem;
    ws->st.device += size;
    ws->st.device_allocs++;
    *out = b;
    return REEL_OK;
}

/* ---- alloc / free --------------------------------------------------------- */

static reel_status reel_ws_hand_out(reel_ws *ws, reel_ws_block *b, reel_stream *s, bool capturing)
{
    b->state = WS_LIVE;
    b->owner = s;
    b->nuses = 0;
    b->clean = false;
    b->prev_id = b->id;
    b->id = ++ws->next_id;
    b->graph = capturing ? reel_ws_cur_graph(ws) : NULL;
    if (capturing && !b->graph)
        return reel_seterr(ws->be->err, REEL_E_OOM, "workspace alloc during capture: out of host memory");
    reel_ws_fences_drop(ws, b, NULL);
    reel_ws_push(&ws->live, b);
    ws->st.in_use += b->size;
    ws->st.peak = ws->st.in_use > ws->st.peak ? ws->st.in_use : ws->st.peak;
    ws->st.allocs++;
    ws->st.reuses += b->prev_id != 0;
    if (!ws->o.checker)
        return REEL_OK;
    char desc[160];
    int n = snprintf(desc, sizeof desc, "workspace block #%" PRIu64 " (%zu B, device allocation %" PRIu64 ")",
                     b->id, b->size, b->mem);
    if (b->prev_id && n > 0 && (size_t)n < sizeof desc)
        snprintf(desc + n - 1, sizeof desc - (size_t)n + 1, ", reusing #%" PRIu64 ")", b->prev_id);
    return reel_checker_alloc(ws->o.checker, reel_ws_key(ws, s), 0, (uint64_t)(uintptr_t)b->ptr, b->size, desc,
                              &b->chk);
}

reel_status reel_ws_alloc(reel_ws *ws, reel_stream *s, size_t bytes, reel_ws_block **out)
{
    if (out)
        *out = NULL;
    if (!ws || !s || !out || bytes > ((size_t)1 << (WS_CLASSES - 2)))
        return reel_seterr(ws ? ws->be->err : NULL, REEL_E_INVALID_ARG, "workspace alloc of %zu bytes: %s", bytes,
                           !ws ? "allocator is NULL" : !s ? "stream is NULL" : !out ? "out is NULL" : "too large");
    int cls = reel_ws_class(ws, bytes);
    bool capturing = reel_ws_capturing(ws, s);
    reel_ws_block *b = NULL;
    if (capturing) {
        b = reel_ws_take_captured(ws, s, cls);
    } else {
        if (ws->o.policy == REEL_WS_DEFER_FREE)
            REEL_TRY(reel_ws_poll(ws));
        REEL_TRY(reel_ws_take_cached(ws, s, cls, &b));
    }
    if (b)
        reel_ws_detach(ws, b);
    else
        REEL_TRY(reel_ws_fresh(ws, cls, capturing, &b));
    reel_status st = reel_ws_hand_out(ws, b, s, capturing);
    *out = b;
    return st;
}

reel_status reel_ws_record_use(reel_ws *ws, reel_ws_block *b, reel_stream *s)
{
    if (!ws || !b || !s || b->state != WS_LIVE)
        return reel_seterr(ws ? ws->be->err : NULL, REEL_E_INVALID_USAGE, "workspace record_use: %s",
                           !ws || !b || !s ? "NULL argument" : "the block is not handed out");
    if (s == b->owner)
        return REEL_OK;
    for (int i = 0; i < b->nuses; i++)
        if (b->uses[i] == s)
            return REEL_OK;
    if (b->nuses == b->capuses) {
        int cap = b->capuses ? 2 * b->capuses : 4;
        reel_stream **u = reel_hrealloc(b->uses, (size_t)cap * sizeof *u);
        if (!u)
            return reel_seterr(ws->be->err, REEL_E_OOM, "workspace record_use of block #%" PRIu64 ": out of host memory",
                               b->id);
        b->uses = u;
        b->capuses = cap;
    }
    b->uses[b->nuses++] = s;
    return REEL_OK;
}

static void reel_ws_to_cache(reel_ws *ws, reel_ws_block *b)
{
    b->state = WS_CACHED;
    reel_ws_push(&ws->cache[b->cls], b);
    ws->st.cached += b->size;
}

/* Fences the owner and every other stream that used the block. */
static reel_status reel_ws_fence_all(reel_ws *ws, reel_ws_block *b)
{
    REEL_TRY(reel_ws_fence_add(ws, b, b->owner));
    for (int i = 0; i < b->nuses; i++)
        REEL_TRY(reel_ws_fence_add(ws, b, b->uses[i]));
    return REEL_OK;
}

static bool reel_ws_any_capturing(reel_ws *ws, const reel_ws_block *b)
{
    bool c = reel_ws_capturing(ws, b->owner);
    for (int i = 0; i < b->nuses; i++)
        c |= reel_ws_capturing(ws, b->uses[i]);
    return c;
}

/* A free whose fences could not all be recorded: a fence missing for one
 * stream would let the block be handed to another while that stream still
 * uses it. Waiting for the owner and every user instead leaves it idle, so
 * it is cached with no fence at all (the free succeeds); if a wait fails
 * too, the block goes back to the live list, out of reach until destroy,
 * and the free fails with the first error. */
static reel_status reel_ws_free_unfenced(reel_ws *ws, reel_ws_block *b, reel_status st)
{
    reel_status w = ws->be->vt->stream_sync(ws->be, b->owner);
    if (w == REEL_OK && ws->o.checker)
        w = reel_checker_host_sync(ws->o.checker, reel_ws_key(ws, b->owner));
    for (int i = 0; w == REEL_OK && i < b->nuses; i++) {
        w = ws->be->vt->stream_sync(ws->be, b->uses[i]);
        if (w == REEL_OK && ws->o.checker)
            w = reel_checker_host_sync(ws->o.checker, reel_ws_key(ws, b->uses[i]));
    }
    reel_ws_fences_drop(ws, b, NULL);
    if (w != REEL_OK) {
        reel_ws_push(&ws->live, b);
        ws->st.in_use += b->size;
        return st;
    }
    reel_ws_to_cache(ws, b);
    return REEL_OK;
}

reel_status reel_ws_free(reel_ws *ws, reel_ws_block *b)
{
    if (!ws || !b || b->state != WS_LIVE)
        return reel_seterr(ws ? ws->be->err : NULL, REEL_E_INVALID_USAGE, "workspace free: %s",
                           !ws || !b ? "NULL argument" : "the block is not handed out (double free?)");
    reel_ws_unlink(&ws->live, b);
    ws->st.in_use -= b->size;
    if (ws->o.checker)
        REEL_TRY(reel_checker_free(ws->o.checker, reel_ws_key(ws, b->owner), b->chk));
    if (ws->o.policy == REEL_WS_UNSAFE_EAGER) {
        reel_ws_to_cache(ws, b);
        return REEL_OK;
    }
    if (reel_ws_any_capturing(ws, b) || b->graph) {
        b->clean = b->nuses == 0;
        reel_ws_graph *g = b->graph ? b->graph : reel_ws_cur_graph(ws);
        if (!g) {
            reel_ws_to_cache(ws, b);
            return reel_seterr(ws->be->err, REEL_E_OOM, "workspace free during capture: out of host memory");
        }
        reel_ws_hold(ws, g, b);
        return REEL_OK;
    }
    reel_status st = reel_ws_fence_all(ws, b);
    if (st != REEL_OK)
        return reel_ws_free_unfenced(ws, b, st);
    if (ws->o.policy == REEL_WS_DEFER_FREE && b->nuses > 0) {
        b->state = WS_DEFERRED;
        reel_ws_push(&ws->deferred, b);
        ws->st.deferred += b->size;
        ws->st.frees_deferred++;
    } else {
        reel_ws_to_cache(ws, b);
    }
    return st;
}

/* ---- deferred frees, trim, stats ------------------------------------------ */

reel_status reel_ws_poll(reel_ws *ws)
{
    if (!ws)
        return REEL_E_INVALID_ARG;
    if (ws->capture)        /* no event query while capturing */
        return REEL_OK;
    reel_ws_block *next;
    for (reel_ws_block *b = ws->deferred; b; b = next) {
        next = b->next;
        bool done = true;
        for (int i = 0; i < b->nf && done; i++)
            if (b->f[i].s != b->owner)
                REEL_TRY(reel_ws_fence_done(ws, &b->f[i], &done));
        if (!done)
            continue;
        reel_ws_unlink(&ws->deferred, b);
        ws->st.deferred -= b->size;
        reel_ws_fences_drop(ws, b, b->owner);
        reel_ws_to_cache(ws, b);
    }
    return REEL_OK;
}

/* Returns cached and deferred blocks to the device. */
static reel_status reel_ws_release_cached(reel_ws *ws)
{
    reel_status st = REEL_OK;
    for (int c = 0; c < WS_CLASSES; c++)
        while (ws->cache[c] && st == REEL_OK) {
            reel_ws_block *b = ws->cache[c];
            st = reel_ws_settle(ws, b);
            reel_ws_unlink(&ws->cache[c], b);
            ws->st.cached -= b->size;
            reel_ws_block_destroy(ws, b);
        }
    while (ws->deferred && st == REEL_OK) {
        reel_ws_block *b = ws->deferred;
        st = reel_ws_settle(ws, b);
        reel_ws_unlink(&ws->deferred, b);
        ws->st.deferred -= b->size;
        reel_ws_block_destroy(ws, b);
    }
    return st;
}

reel_status reel_ws_trim(reel_ws *ws)
{
    if (!ws)
        return REEL_E_INVALID_ARG;
    if (ws->capture)
        return reel_seterr(ws->be->err, REEL_E_INVALID_USAGE, "workspace trim: a capture is in progress");
    REEL_TRY(reel_ws_release_cached(ws));
    reel_ws_pool_clear(ws);
    return REEL_OK;
}

void reel_ws_get_stats(const reel_ws *ws, reel_ws_stats *out)
{
    if (out)
        *out = ws ? ws->st : (reel_ws_stats){ 0 };
}

void *reel_ws_block_ptr(const reel_ws_block *b) { return b ? b->ptr : NULL; }
size_t reel_ws_block_size(const reel_ws_block *b) { return b ? b->size : 0; }
uint64_t reel_ws_block_id(const reel_ws_block *b) { return b ? b->id : 0; }
uint64_t reel_ws_block_check_id(const reel_ws_block *b) { return b ? b->chk : 0; }
