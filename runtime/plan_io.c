/* The plan's I/O: inputs, parameters, states, outputs, stats and placement.
 * Calls between steps; none of them issues a step. */
#include <stdlib.h>
#include <string.h>

#include "core/halloc.h"
#include "core/abi.h"
#include "runtime/plan.h"
#include "memory/workspace.h"

const char *reel_fallback_str(reel_fallback f)
{
    static const char *const names[REEL_FALLBACK_COUNT] = {
        [REEL_FALLBACK_NONE] = "replayed",
        [REEL_FALLBACK_NO_BUCKET] = "no bucket",
        [REEL_FALLBACK_TOKENS_OVER_LIMIT] = "tokens over limit",
        [REEL_FALLBACK_SEQS_OVER_LIMIT] = "sequences over limit",
        [REEL_FALLBACK_CONTEXT_OVER_LIMIT] = "context over limit",
        [REEL_FALLBACK_OP_NOT_CAPTURABLE] = "op not capturable",
        [REEL_FALLBACK_CAPTURE_FAILED] = "capture failed",
    };
    return (int)f >= 0 && f < REEL_FALLBACK_COUNT ? names[f] : "unknown";
}

struct reel_plan_leaf {
    char name[REEL_NAME_MAX];
    uint32_t id;
};

static int leaf_cmp(const void *a, const void *b)
{
    return strcmp(((const struct reel_plan_leaf *)a)->name, ((const struct reel_plan_leaf *)b)->name);
}

/* A leaf by name and kind: a binary search (leaf names are unique, the
 * builder keeps them so). Activations are never looked up by name. */
int reel_plan_find_tensor(const reel_plan *p, const char *name, reel_tensor_kind kind)
{
    int lo = 0, hi = p->nleaves;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2, c = strcmp(p->leaves[mid].name, name);
        if (c == 0) {
            uint32_t t = p->leaves[mid].id;
            return p->tensors[t].kind == kind ? (int)t : -1;
        }
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

reel_status reel_plan_set_input(reel_plan *p, const char *name, const void *data, int64_t rows)
{
    if (!p || !name || !data)
        return reel_seterr(p ? p->err : NULL, REEL_E_INVALID_ARG, "set_input: NULL plan, name or data");
    int t = reel_plan_find_tensor(p, name, REEL_T_INPUT);
    if (t < 0)
        return reel_seterr(p->err, REEL_E_NOT_FOUND, "set_input: the plan has no input named '%s'", name);
    const reel_shape *sh = &p->tensors[t].shape;
    if (rows <= 0 || (!sh->tokens && rows != 1) || rows > (1 << 24))
        return reel_seterr(p->err, REEL_E_INVALID_ARG, "set_input '%s': %lld rows (%s)", name, (long long)rows,
                           sh->tokens ? "need 1..2^24" : "an input without a token dim takes 1");
    size_t bytes = reel_shape_bytes(sh, rows);
    if (!sh->tokens || rows <= p->buckets[p->nbuckets - 1]) {
        /* It fits the static staging every bucket shares: write it in place,
         * so a replayed step copies the input once (the previous step's
         * upload finished before that step returned). */
        memcpy(reel_staging_input_slot(p, (uint32_t)t), data, bytes);
        p->staged[t] = true;
        p->stash_rows[t] = rows;
        return REEL_OK;
    }
    if (bytes > p->stash_cap[t]) {
        char *buf = reel_hrealloc(p->stash[t], bytes);
        if (!buf)
            return reel_seterr(p->err, REEL_E_OOM, "set_input '%s': out of host memory", name);
        p->stash[t] = buf;
        p->stash_cap[t] = bytes;
    }
    memcpy(p->stash[t], data, bytes);
    p->staged[t] = false;
    p->stash_rows[t] = rows;
    return REEL_OK;
}

reel_status reel_plan_write_param(reel_plan *p, const char *name, const void *data, size_t bytes)
{
    if (!p || !name || !data)
        return reel_seterr(p ? p->err : NULL, REEL_E_INVALID_ARG, "write_param: NULL plan, name or data");
    int t = reel_plan_find_tensor(p, name, REEL_T_PARAM);
    if (t < 0)
        return reel_seterr(p->err, REEL_E_NOT_FOUND, "write_param: the plan has no parameter named '%s'", name);
    size_t need = reel_shape_bytes(&p->tensors[t].shape, 0);
    if (bytes != need)
        return reel_seterr(p->err, REEL_E_INVALID_ARG, "write_param '%s': %zu bytes given, it holds %zu", name,
                           bytes, need);
    REEL_TRY(p->be->vt->copy(p->be, p->streams[0], p->tensor_ptr[t], data, bytes, REEL_COPY_H2D));
    REEL_TRY(p->be->vt->stream_sync(p->be, p->streams[0]));
    if (!p->param_written[t])
        p->params_unwritten--;
    p->param_written[t] = true;
    return REEL_OK;
}

reel_status reel_plan_write_param_part(reel_plan *p, int t, size_t offset, const void *data, size_t bytes,
                                       bool complete)
{
    REEL_INVARIANT(p->err, t > 0 && t < p->ntensors && p->tensors[t].kind == REEL_T_PARAM);
    REEL_INVARIANT(p->err, offset <= reel_shape_bytes(&p->tensors[t].shape, 0) &&
                               bytes <= reel_shape_bytes(&p->tensors[t].shape, 0) - offset);
    if (bytes) {
        REEL_TRY(p->be->vt->copy(p->be, p->streams[0], (char *)p->tensor_ptr[t] + offset, data, bytes,
                                 REEL_COPY_H2D));
        REEL_TRY(p->be->vt->stream_sync(p->be, p->streams[0]));
    }
    if (complete) {
        if (!p->param_written[t])
            p->params_unwritten--;
        p->param_written[t] = true;
    }
    return REEL_OK;
}

static reel_status state_io(reel_plan *p, const char *name, void *host, size_t bytes, bool write)
{
    const char *what = write ? "write_state" : "read_state";
    if (!p || !name || !host)
        return reel_seterr(p ? p->err : NULL, REEL_E_INVALID_ARG, "%s: NULL plan, name or buffer", what);
    int t = reel_plan_find_tensor(p, name, REEL_T_STATE);
    if (t < 0)
        return reel_seterr(p->err, REEL_E_NOT_FOUND, "%s: the plan has no state named '%s'", what, name);
    size_t need = reel_shape_bytes(&p->tensors[t].shape, 0);
    if (bytes != need)
        return reel_seterr(p->err, REEL_E_INVALID_ARG, "%s '%s': %zu bytes given, it holds %zu", what, name, bytes,
                           need);
    reel_stream *s0 = p->streams[0];
    if (write)
        REEL_TRY(p->be->vt->copy(p->be, s0, p->tensor_ptr[t], host, bytes, REEL_COPY_H2D));
    else
        REEL_TRY(p->be->vt->copy(p->be, s0, host, p->tensor_ptr[t], bytes, REEL_COPY_D2H));
    return p->be->vt->stream_sync(p->be, s0);
}

reel_status reel_plan_read_state(reel_plan *p, const char *name, void *dst, size_t bytes)
{
    return state_io(p, name, dst, bytes, false);
}

reel_status reel_plan_write_state(reel_plan *p, const char *name, const void *src, size_t bytes)
{
    return state_io(p, name, (void *)src, bytes, true);
}

reel_status reel_plan_output(reel_plan *p, const char *name, const void **data, int64_t *rows)
{
    if (!p || !name || !data)
        return reel_seterr(p ? p->err : NULL, REEL_E_INVALID_ARG, "output: NULL plan, name or data pointer");
    for (int o = 0; o < p->noutputs; o++) {
        if (strcmp(p->outputs[o].name, name) != 0)
            continue;
        if (p->st.steps == 0)
            return reel_seterr(p->err, REEL_E_INVALID_USAGE, "output '%s': no step has run yet", name);
        *data = p->out_host + p->out_off[o];
        if (rows)
            *rows = p->tensors[p->outputs[o].tensor].shape.tokens ? p->out_rows : 1;
        return REEL_OK;
    }
    return reel_seterr(p->err, REEL_E_NOT_FOUND, "output: the plan has no output named '%s'", name);
}

reel_status reel_plan_output_desc(const reel_plan *p, const char *name, reel_dtype *dtype, int64_t *row_elems)
{
    if (!p || !name)
        return reel_seterr(p ? p->err : NULL, REEL_E_INVALID_ARG, "output_desc: NULL plan or name");
    for (int o = 0; o < p->noutputs; o++) {
        if (strcmp(p->outputs[o].name, name) != 0)
            continue;
        const reel_shape *sh = &p->tensors[p->outputs[o].tensor].shape;
        if (dtype)
            *dtype = sh->dtype;
        if (row_elems)
            *row_elems = reel_shape_row_numel(sh);
        return REEL_OK;
    }
    return reel_seterr(p->err, REEL_E_NOT_FOUND, "output_desc: the plan has no output named '%s'", name);
}

reel_fallback reel_plan_last_fallback(const reel_plan *p) { return p ? p->last_fallback : REEL_FALLBACK_NONE; }

void reel_plan_timers_free(reel_plan *p)
{
    for (int i = 0; i < 2; i++) {
        if (p->timer[i])
            p->be->vt->event_destroy(p->be, p->timer[i]);
        p->timer[i] = NULL;
    }
    p->timed_valid = false;
}

reel_status reel_plan_time_steps(reel_plan *p, int on)
{
    if (!p)
        return reel_seterr(NULL, REEL_E_INVALID_ARG, "time_steps: NULL plan");
    reel_backend *be = p->be;
    if (on && !be->vt->timer_create)
        return reel_seterr(p->err, REEL_E_UNSUPPORTED, "time_steps: backend '%s' has no device timers",
                           reel_backend_name(be->kind));
    if (!on == !p->timer[0])
        return REEL_OK;
    /* No record of the timers may be in flight when they change. */
    for (int s = 0; s < p->nstreams; s++)
        REEL_TRY(be->vt->stream_sync(be, p->streams[s]));
    if (!on) {
        reel_plan_timers_free(p);
        return REEL_OK;
    }
    reel_event *t[2] = {NULL, NULL};
    reel_status st = be->vt->timer_create(be, &t[0]);
    if (st == REEL_OK)
        st = be->vt->timer_create(be, &t[1]);
    if (st != REEL_OK) {
        for (int i = 0; i < 2; i++)
            if (t[i])
                be->vt->event_destroy(be, t[i]);
        char msg[REEL_ERRMSG_MAX];
        reel_err_copy(p->err, msg, sizeof msg);
        return reel_seterr(p->err, st, "time_steps: %s", msg);
    }
    p->timer[0] = t[0];
    p->timer[1] = t[1];
    p->timed_valid = false;
    return REEL_OK;
}

reel_status reel_plan_last_step_device_us(const reel_plan *p, double *us)
{
    if (!p || !us)
        return reel_seterr(p ? p->err : NULL, REEL_E_INVALID_ARG, "last_step_device_us: NULL plan or result");
    if (!p->timer[0])
        return reel_seterr(p->err, REEL_E_INVALID_USAGE,
                           "last_step_device_us: step timing is off (reel_plan_time_steps)");
    if (!p->timed_valid)
        return reel_seterr(p->err, REEL_E_INVALID_USAGE,
                           "last_step_device_us: no step completed since timing was turned on");
    *us = p->last_device_us;
    return REEL_OK;
}

reel_status reel_plan_stats_get(const reel_plan *p, reel_plan_stats *out)
{
    if (!p || !out)
        return reel_seterr(p ? p->err : NULL, REEL_E_INVALID_ARG, "stats_get: NULL plan or stats");
    reel_plan_stats st = p->st;
    reel_ws_stats ws;
    reel_ws_get_stats(p->ws, &ws);
    st.workspace_bytes = ws.device;
    st.workspace_peak = ws.peak;
    return reel_struct_fill(out, &st, &reel_abi_plan_stats, p->err);
}

reel_status reel_plan_trim(reel_plan *p)
{
    if (!p)
        return reel_seterr(NULL, REEL_E_INVALID_ARG, "trim: the plan is NULL");
    if (p->over_valid) {
        reel_layout_free(p, &p->over, true);
        p->over_valid = false;
    }
    return reel_ws_trim(p->ws);
}

reel_status reel_plan_index_tensors(reel_plan *p)
{
    reel_hfree(p->act_ids);
    reel_hfree(p->act_last);
    reel_hfree(p->leaves);
    p->act_ids = reel_hcalloc((size_t)p->ntensors + 1, sizeof *p->act_ids);
    p->act_last = reel_hcalloc((size_t)p->ntensors + 1, sizeof *p->act_last);
    p->leaves = reel_hcalloc((size_t)p->ntensors + 1, sizeof *p->leaves);
    if (!p->act_ids || !p->act_last || !p->leaves)
        return reel_seterr(p->err, REEL_E_OOM, "compile: out of host memory");
    p->nacts = p->nleaves = 0;
    for (uint32_t t = 1; t < (uint32_t)p->ntensors; t++) {
        reel_tensor_kind k = p->tensors[t].kind;
        /* Views own no bytes (their source's placement has them); fused-away
         * tensors none at all. */
        if (k == REEL_T_ACT && (p->tensors[t].alias_of || p->tensors[t].dead))
            continue;
        if (k == REEL_T_ACT) {
            p->act_ids[p->nacts++] = t;
            p->act_last[t] = p->tensors[t].producer;
        } else if (k == REEL_T_INPUT || k == REEL_T_PARAM || k == REEL_T_STATE) {
            struct reel_plan_leaf *l = &p->leaves[p->nleaves++];
            memcpy(l->name, p->tensors[t].name, sizeof l->name); /* both REEL_NAME_MAX */
            l->id = t;
        }
    }
    qsort(p->leaves, (size_t)p->nleaves, sizeof *p->leaves, leaf_cmp);
    for (int n = 0; n < p->nnodes; n++)
        for (int k = 0; k < p->nodes[n].nin; k++) {
            uint32_t t = p->nodes[n].in[k];
            if (t && p->tensors[t].kind == REEL_T_ACT && !p->tensors[t].alias_of && !p->tensors[t].dead &&
                n > p->act_last[t])
                p->act_last[t] = n;
        }
    for (int o = 0; o < p->noutputs; o++)
        if (p->tensors[p->outputs[o].tensor].kind == REEL_T_ACT)
            p->act_last[p->outputs[o].tensor] = p->nnodes;
    return REEL_OK;
}

/* O(1) a call: inspect and check ask for every activation of every bucket. */
reel_status reel_plan_placement(const reel_plan *p, int bucket, int i, reel_placement *out)
{
    if (!p || !out)
        return reel_seterr(p ? p->err : NULL, REEL_E_INVALID_ARG, "placement: NULL plan or output");
    if (bucket < 0 || bucket >= p->nbuckets)
        return reel_seterr(p->err, REEL_E_NOT_FOUND, "placement: bucket %d outside 0..%d", bucket, p->nbuckets - 1);
    if (i < 0 || i >= p->nacts)
        return reel_seterr(p->err, REEL_E_NOT_FOUND, "placement: activation %d outside the plan's %d activations", i,
                           p->nacts);
    REEL_TRY(reel_struct_check(out, &reel_abi_placement, p->err));
    uint32_t t = p->act_ids[i];
    const reel_tinfo *ti = &p->tensors[t];
    const reel_layout *L = &p->bucket[bucket];
    reel_placement r = REEL_PLACEMENT_INIT;
    r.name = ti->name;
    r.stream = p->nodes[ti->producer].stream;
    r.first = ti->producer;
    r.last = p->act_last[t];
    r.offset = L->act_off[t];
    r.bytes = reel_shape_bytes(&ti->shape, L->rows);
    return reel_struct_fill(out, &r, &reel_abi_placement, p->err);
}
