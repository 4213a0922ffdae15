/* Issue: one walk over the plan, with sinks. The launch sink puts the work
 * on the streams (eager steps, and what capture records); the hazard
 * checker's sink (check.c) tells the checker each op's accesses and each
 * event; the collective sequence's sink (collective.c) collects the
 * communication ops in issue order for the cross-rank check. A replay under
 * the checker walks with the checker's sink only. */
#include <stdio.h>

#include "runtime/plan.h"

/* The launch sink: puts the work on the backend's streams (the eager path,
 * and what capture records). */
static reel_status launch_record(reel_plan *p, reel_event *e, int s)
{
    return p->be->vt->event_record(p->be, e, p->streams[s]);
}

static reel_status launch_wait(reel_plan *p, int s, reel_event *e)
{
    return p->be->vt->stream_wait(p->be, p->streams[s], e);
}

static bool is_p2p(const reel_plan *p, int i)
{
    return i >= 0 && i < p->nnodes && (p->nodes[i].op == REEL_OP_SEND || p->nodes[i].op == REEL_OP_RECV);
}

/* Node i continues the point-to-point group of node i - 1: both sends or
 * receives, back to back on one stream with nothing issued between them
 * (no event record after i - 1, no wait before i). */
static bool p2p_chained(const reel_plan *p, const reel_layout *L, int i)
{
    return is_p2p(p, i) && is_p2p(p, i - 1) && p->nodes[i].stream == p->nodes[i - 1].stream && !L->rec[i - 1] &&
           L->new_wait_start[i] == L->new_wait_start[i + 1];
}

static reel_status launch_node(reel_plan *p, const reel_layout *L, int i)
{
    char buf[160];
    /* Consecutive sends and receives go to the communicator as one group
     * (NCCL: ncclGroupStart/End), so a rank's sends and receives of one
     * exchange never wait on each other. */
    reel_comm *c = L->launches[i].comm;
    if (c && is_p2p(p, i) && !p2p_chained(p, L, i))
        REEL_TRY(c->vt->group_begin(c));
    if (p->be->vt->set_tag) /* op spans name the node (introspect.c), replays included */
        p->be->vt->set_tag(p->be, i + 1);
    reel_plan_dev_span_mark(p, L, i, false);
    reel_launch warm;
    const reel_launch *l = &L->launches[i];
    if (p->warming) {
        warm = *l;
        warm.tune = true;
        l = &warm;
    }
    reel_status rc = p->dbg.fail_launch_of == i + 1 ? reel_seterr(p->err, REEL_E_BACKEND, "injected launch failure")
                                                    : p->impl[i]->launch(p->be, l);
    reel_plan_dev_span_mark(p, L, i, true);
    if (p->be->vt->set_tag)
        p->be->vt->set_tag(p->be, 0);
    if (c && is_p2p(p, i) && (rc != REEL_OK || !p2p_chained(p, L, i + 1))) {
        reel_status end = c->vt->group_end(c);
        rc = rc != REEL_OK ? rc : end;
    }
    p->st.op_dispatches++;
    if (rc != REEL_OK)
        return reel_err_prefix(p->err, rc, "%s, kernel '%s'", reel_plan_node_name(p, i, buf, sizeof buf),
                               p->impl[i]->name);
    return REEL_OK;
}

const reel_issue_sink reel_issue_launch = {launch_record, launch_wait, launch_node};

static reel_status ev_record(reel_plan *p, reel_event *e, int s, const reel_issue_sink *const *sinks, int n)
{
    for (int k = 0; k < n; k++)
        REEL_TRY(sinks[k]->record(p, e, s));
    return REEL_OK;
}

static reel_status ev_wait(reel_plan *p, int s, reel_event *e, const reel_issue_sink *const *sinks, int n)
{
    for (int k = 0; k < n; k++)
        REEL_TRY(sinks[k]->wait(p, s, e));
    return REEL_OK;
}

/* The one walk over the plan: the fork from stream 0, every node after its
 * cross-stream waits (recording its event where a later node waits on it),
 * the join back into stream 0. Each sink sees every step of the walk, in
 * the order of sinks. */
reel_status reel_plan_issue_to(reel_plan *p, const reel_layout *L, const reel_issue_sink *const *sinks, int n)
{
    if (p->nstreams > 1) {
        REEL_TRY(ev_record(p, p->fork_ev, 0, sinks, n));
        for (int s = 1; s < p->nstreams; s++)
            if (p->first_on_stream[s] >= 0)
                REEL_TRY(ev_wait(p, s, p->fork_ev, sinks, n));
    }
    for (int i = 0; i < p->nnodes; i++) {
        int st = p->nodes[i].stream;
        for (int k = L->new_wait_start[i]; k < L->new_wait_start[i + 1]; k++) {
            /* reel_plan_ensure_events made one for every producer waited on. */
            REEL_INVARIANT(p->err, p->node_ev[L->new_wait_from[k]] != NULL);
            REEL_TRY(ev_wait(p, st, p->node_ev[L->new_wait_from[k]], sinks, n));
        }
        for (int k = 0; k < n; k++)
            REEL_TRY(sinks[k]->node(p, L, i));
        if (L->rec[i])
            REEL_TRY(ev_record(p, p->node_ev[i], st, sinks, n));
    }
    for (int s = 1; s < p->nstreams; s++)
        if (p->first_on_stream[s] >= 0) {
            REEL_TRY(ev_record(p, p->join_ev[s], s, sinks, n));
            REEL_TRY(ev_wait(p, 0, p->join_ev[s], sinks, n));
        }
    return REEL_OK;
}

reel_status reel_plan_issue(reel_plan *p, const reel_layout *L)
{
    const reel_issue_sink *const sinks[] = {&reel_issue_launch};
    return reel_plan_issue_to(p, L, sinks, 1);
}
