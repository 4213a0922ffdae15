/* Capture: the warm-up and one graph per bucket, largest first (a failed
 * capture falls back, "capture failed", or fails a strict plan), and the
 * re-capture after a state moved (reel_plan_bind_state): updated in place
 * where the backend can, replaced otherwise. */
#include <stdio.h>
#include <string.h>

#include "runtime/plan.h"

static reel_status capture_bucket(reel_plan *p, int b)
{
    const reel_backend_vt *vt = p->be->vt;
    reel_stream *s0 = p->streams[0];
    reel_status st;
    if (p->dbg.fail_capture_mask & (1u << b)) {
        REEL_TRY(vt->capture_begin(p->be, s0));
        vt->capture_abort(p->be, s0);
        return reel_seterr(p->err, REEL_E_BACKEND, "capture of bucket %d (%d tokens) failed: injected failure", b,
                           p->buckets[b]);
    }
    REEL_TRY(vt->capture_begin(p->be, s0));
    st = reel_plan_issue(p, &p->bucket[b]);
    if (st != REEL_OK) {
        vt->capture_abort(p->be, s0);
        return st;
    }
    st = vt->capture_end(p->be, s0, &p->graph[b]);
    if (st != REEL_OK)
        p->graph[b] = NULL;
    return st;
}

/* Warm-up then capture, largest bucket first. A failed capture becomes an
 * eager fallback for that bucket ("capture failed"), or an error in strict
 * mode. */
reel_status reel_capture_all(reel_plan *p)
{
    const reel_backend_vt *vt = p->be->vt;
    double t0 = reel_now_ms();
    if (p->plan_reason != REEL_FALLBACK_NONE) {
        for (int b = 0; b < p->nbuckets; b++)
            p->bucket_reason[b] = p->plan_reason;
        return REEL_OK;
    }
    /* Warm-up: one eager run of the largest bucket (kernels, handles and
     * workspaces initialise outside capture), and of every other bucket
     * where the context tunes its matmuls: each bucket's shapes are then
     * first launched here, where an impl may time its candidates
     * (reel_launch.tune), and a capture only reads the choices. Inputs are
     * zero. */
    int top = p->nbuckets - 1;
    const int low = p->be->tune_matmul ? 0 : top;
    if (low == top)
        reel_log(p->ctx, REEL_LOG_INFO, "capture: warm-up, one eager run of bucket %d (%d tokens, %d nodes)", top,
                 p->buckets[top], p->nnodes);
    else
        reel_log(p->ctx, REEL_LOG_INFO,
                 "capture: warm-up, one eager run of each bucket %d..%d (%d..%d tokens, %d nodes), matmuls tuned",
                 top, low, p->buckets[top], p->buckets[low], p->nnodes);
    p->warming = true;
    reel_status wst = REEL_OK;
    for (int b = top; b >= low && wst == REEL_OK; b--) {
        wst = reel_plan_upload_padding(p, &p->bucket[b]);
        if (wst == REEL_OK)
            wst = reel_plan_issue(p, &p->bucket[b]);
        if (wst == REEL_OK)
            wst = vt->stream_sync(p->be, p->streams[0]);
    }
    p->warming = false;
    REEL_TRY(wst);
    reel_log(p->ctx, REEL_LOG_INFO, "capture: warm-up done in %.1f ms", reel_now_ms() - t0);
    for (int b = top; b >= 0; b--) {
        double tb = reel_now_ms();
        reel_status st = capture_bucket(p, b);
        if (st == REEL_OK) {
            p->st.graphs_captured++;
            reel_log(p->ctx, REEL_LOG_INFO, "capture: bucket %d (%d tokens) captured in %.3f ms", b, p->buckets[b],
                     reel_now_ms() - tb);
            continue;
        }
        if (p->opts.strict)
            return st;
        p->bucket_reason[b] = REEL_FALLBACK_CAPTURE_FAILED;
        if (p->ctx->log_fn) {
            char msg[REEL_ERRMSG_MAX];
            reel_err_copy(p->err, msg, sizeof msg);
            reel_log(p->ctx, REEL_LOG_WARN, "capture: bucket %d (%d tokens) failed, its steps run eagerly: %s: %s",
                     b, p->buckets[b], reel_status_str(st), msg);
        }
        reel_clearerr(p->err);
    }
    p->st.capture_ms = reel_now_ms() - t0;
    return REEL_OK;
}

/* Re-captures every captured bucket after kernel parameters changed (a
 * state moved): updates the instantiated graph in place where the backend
 * can (cudaGraphExecUpdate), replaces it otherwise. */
static reel_status recapture(reel_plan *p)
{
    const reel_backend_vt *vt = p->be->vt;
    reel_status first = REEL_OK;
    char msg[REEL_ERRMSG_MAX] = "";
    for (int b = p->nbuckets - 1; b >= 0; b--) {
        if (!p->graph[b])
            continue;
        reel_exec_graph *old = p->graph[b];
        p->graph[b] = NULL;
        reel_status st = capture_bucket(p, b);
        reel_exec_graph *fresh = p->graph[b];
        p->graph[b] = old;
        if (st != REEL_OK) {
            /* The old graph points at memory that moved: it must never
             * replay again. The bucket falls back ("capture failed"). */
            vt->graph_destroy(p->be, old);
            p->graph[b] = NULL;
            p->bucket_reason[b] = REEL_FALLBACK_CAPTURE_FAILED;
            /* Strict: the call fails, but only after every other bucket
             * was re-captured; their old graphs point at memory that moved. */
            if (p->opts.strict && first == REEL_OK) {
                first = st;
                reel_err_copy(p->err, msg, sizeof msg);
            }
            reel_clearerr(p->err);
            continue;
        }
        bool updated = false;
        if (vt->graph_update && vt->graph_update(p->be, old, fresh, &updated) != REEL_OK) {
            updated = false; /* an update that errs is re-instantiated like one refused */
            reel_clearerr(p->err);
        }
        if (updated) {
            vt->graph_destroy(p->be, fresh);
            p->st.graph_updates++;
        } else {
            vt->graph_destroy(p->be, old);
            p->graph[b] = fresh;
            p->st.graph_reinstantiations++;
        }
        reel_log(p->ctx, REEL_LOG_INFO, "bind_state: bucket %d (%d tokens) graph %s", b, p->buckets[b],
                 updated ? "updated in place" : "re-instantiated");
    }
    return first == REEL_OK ? REEL_OK : reel_seterr(p->err, first, "%s", msg);
}

reel_status reel_plan_bind_state(reel_plan *p, const char *name, void *mem, size_t bytes)
{
    if (!p || !name || !mem)
        return reel_seterr(p ? p->err : NULL, REEL_E_INVALID_ARG, "bind_state: NULL plan, name or memory");
    int t = -1;
    for (int i = 1; i < p->ntensors; i++)
        if (p->tensors[i].kind == REEL_T_STATE && strcmp(p->tensors[i].name, name) == 0)
            t = i;
    if (t < 0)
        return reel_seterr(p->err, REEL_E_NOT_FOUND, "bind_state: the plan has no state named '%s'", name);
    size_t need = reel_shape_bytes(&p->tensors[t].shape, 0);
    if (bytes != need)
        return reel_seterr(p->err, REEL_E_INVALID_ARG, "bind_state '%s': %zu bytes given, it holds %zu", name, bytes,
                           need);
    for (int s = 0; s < p->nstreams; s++)
        REEL_TRY(p->be->vt->stream_sync(p->be, p->streams[s]));
    if (!p->state_borrowed[t])
        p->be->vt->dev_free(p->be, p->tensor_ptr[t]);
    p->tensor_ptr[t] = mem;
    p->state_borrowed[t] = true;
    for (int b = 0; b < p->nbuckets; b++)
        REEL_TRY(reel_layout_bind(p, &p->bucket[b], p->arena, p->stat_dev, p->stat_host));
    if (p->over_valid) {
        reel_layout_free(p, &p->over, true);
        p->over_valid = false;
    }
    reel_plan_loop_reset(p);
    return recapture(p);
}
