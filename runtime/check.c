/* A plan step under the hazard checker: every op's declared reads and writes,
 * every event record and wait, the upload, the download and the host sync
 * go to a reel_checker, so unordered reuse of bytes across streams (a plan
 * edge missing, a bucket layout clashing with another, state shared by two
 * streams) is reported with both ops, their streams and the allocation. A
 * replay is checked by walking the issue sequence the bucket's graph was
 * captured from (capture records that same walk). */
#include <stdio.h>
#include <string.h>

#include "reel/memory.h"
#include "runtime/plan.h"

reel_status reel_plan_check_open(reel_plan *p)
{
    if (!p->opts.check_hazards)
        return REEL_OK;
    return reel_checker_create(p->ctx, &p->chk);
}

void reel_plan_check_close(reel_plan *p)
{
    reel_checker_destroy(p->chk);
    p->chk = NULL;
}

static uint64_t ev_key(const reel_event *e) { return (uint64_t)(uintptr_t)e; }

static reel_status check_record(reel_plan *p, reel_event *e, int stream)
{
    return reel_checker_event_record(p->chk, ev_key(e), (uint64_t)stream);
}

static reel_status check_wait(reel_plan *p, int stream, reel_event *e)
{
    return reel_checker_event_wait(p->chk, (uint64_t)stream, ev_key(e));
}

/* "plan 'l0.q' arena+4096 (16 rows)", "input 'tokens'", "state 'k0'". */
static void describe(const reel_plan *p, const reel_layout *L, uint32_t t, char *buf, size_t len)
{
    const reel_tinfo *ti = &p->tensors[t];
    switch (ti->kind) {
    case REEL_T_ACT:
        snprintf(buf, len, "plan '%s' arena+%zu (%lld rows)", ti->name, L->act_off[t], (long long)L->rows);
        break;
    case REEL_T_INPUT: snprintf(buf, len, "input '%s' (static)", ti->name); break;
    case REEL_T_META: snprintf(buf, len, "%s (static)", ti->meta_slots ? "slot mapping" : "positions"); break;
    case REEL_T_PARAM: snprintf(buf, len, "param '%s'", ti->name); break;
    case REEL_T_STATE: snprintf(buf, len, "state '%s'", ti->name); break;
    }
}

/* Declared accesses of node i: its inputs read, its outputs written; paged
 * attention also writes its KV caches and reads the step metadata. The
 * kernels' error word is an atomic flag and is not declared. */
static reel_status check_node(reel_plan *p, const reel_layout *L, int i)
{
    const reel_node *n = &p->nodes[i];
    const reel_launch *l = &L->launches[i];
    reel_check_access acc[REEL_OP_MAX_IN + REEL_OP_MAX_OUT + 1];
    char desc[REEL_OP_MAX_IN + REEL_OP_MAX_OUT + 1][160];
    char op[200];
    int na = 0;
    for (int k = 0; k < n->nin; k++) {
        if (!n->in[k])
            continue;
        describe(p, L, n->in[k], desc[na], sizeof desc[na]);
        bool kv = reel_op_writes_cache(n->op, k);
        acc[na] = (reel_check_access){ REEL_CHECK_ACCESS_HEAD, 0, (uint64_t)(uintptr_t)l->in[k], reel_shape_bytes(&l->in_shape[k], l->rows),
                                      kv, desc[na]};
        na++;
    }
    for (int k = 0; k < n->nout; k++) {
        describe(p, L, n->out[k], desc[na], sizeof desc[na]);
        acc[na] = (reel_check_access){ REEL_CHECK_ACCESS_HEAD, 0, (uint64_t)(uintptr_t)l->out[k],
                                      reel_shape_bytes(&l->out_shape[k], l->rows), true, desc[na]};
        na++;
    }
    if (reel_op_is_paged(n->op)) {
        snprintf(desc[na], sizeof desc[na], "step metadata (static)");
        const char *meta;
        size_t meta_bytes;
        reel_staging_meta_range(L, &meta, &meta_bytes);
        acc[na] = (reel_check_access){ REEL_CHECK_ACCESS_HEAD, 0, (uint64_t)(uintptr_t)meta, meta_bytes, false, desc[na]};
        na++;
    }
    reel_plan_node_label(p, i, op, sizeof op);
    return reel_checker_op(p->chk, (uint64_t)n->stream, op, na, acc);
}

const reel_issue_sink reel_issue_check = {check_record, check_wait, check_node};

reel_status reel_plan_check_upload(reel_plan *p, const reel_layout *L, size_t bytes)
{
    reel_check_access a = { REEL_CHECK_ACCESS_HEAD, 0, (uint64_t)(uintptr_t)L->stat_dev, bytes, true, "static region (inputs, metadata)"};
    reel_checker_begin(p->chk, (int64_t)p->st.steps);
    return reel_checker_op(p->chk, 0, "upload", 1, &a);
}

reel_status reel_plan_check_download(reel_plan *p, const reel_layout *L, int32_t rows)
{
    for (int o = 0; o < p->noutputs; o++) {
        uint32_t t = p->outputs[o].tensor;
        const reel_shape *sh = &p->tensors[t].shape;
        char desc[160];
        describe(p, L, t, desc, sizeof desc);
        reel_check_access a = { REEL_CHECK_ACCESS_HEAD, 0, (uint64_t)(uintptr_t)reel_plan_tensor_dev(p, L, t),
                               reel_shape_bytes(sh, sh->tokens ? rows : 1), false, desc};
        REEL_TRY(reel_checker_op(p->chk, 0, "download", 1, &a));
    }
    return reel_checker_host_sync(p->chk, REEL_CHECK_ALL_STREAMS);
}

reel_status reel_plan_check_end(reel_plan *p)
{
    const reel_hazard *h = NULL;
    size_t kept = 0, found = reel_checker_end(p->chk, &h, &kept);
    if (found == 0)
        return REEL_OK;
    p->st.hazards += found;
    char line[512] = "(report not kept: the checker's report list is full)";
    if (kept)
        reel_hazard_format(&h[0], line, sizeof line);
    /* Steps are labelled from 0, as in the reports; the counter already moved. */
    return reel_seterr(p->err, REEL_E_HAZARD, "step %llu: %zu hazard(s); first: %s",
                       (unsigned long long)(p->st.steps - 1), found, line);
}

/* A step that failed after its upload: its streams were drained, so the
 * checker learns of the sync and closes the step (its hazards still count;
 * the step reports its own error). */
void reel_plan_check_abort(reel_plan *p)
{
    const reel_hazard *h = NULL;
    size_t kept = 0;
    reel_checker_host_sync(p->chk, REEL_CHECK_ALL_STREAMS);
    p->st.hazards += reel_checker_end(p->chk, &h, &kept);
}
