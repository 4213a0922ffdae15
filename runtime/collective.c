/* A plan's communicator: binding at compile (the communicator exists, is of
 * the plan's backend, fits every op's group size and peers; the ops share
 * one stream), the collective-sequence check across ranks (one more sink of
 * the issue walk collects the sequence in issue order), the capture decision
 * made identically on every rank, and the per-step error poll.
 *
 * The exchange at compile (agree: a host-blocking gather of a few bytes):
 *   round 1, every rank: [ok, capture reason, buckets, hash of its group
 *     collectives (kind, shape, dtype, axis, group size, order), and per peer
 *     the hash of its sends to it and of its receives from it];
 *   every rank then checks the same gathered data, so they all reach the
 *   same verdict: a rank that failed, buckets that differ, group sequences
 *   that differ, or a pair whose sends and receives differ;
 *   round 2, only on a difference: every rank's descriptor list, so the
 *   message names the first differing collective (its rank, node, shapes). */
#include <stdio.h>
#include <string.h>

#include "core/halloc.h"
#include "runtime/plan.h"

#define COLL_NAME 40

typedef struct reel_coll_desc {
    int32_t kind, dtype, ndim, tokens;
    int32_t axis, nranks, peer, node;
    int64_t dims[REEL_MAX_DIMS];
    char name[COLL_NAME];
} reel_coll_desc;

typedef struct agree_head {
    int32_t ok;               /* compile got this far on the rank */
    int32_t reason;           /* its plan-wide fallback reason (capture decision) */
    int32_t ncoll;            /* descriptors (every comm op) */
    int32_t nbuckets;
    int32_t buckets[REEL_MAX_BUCKETS];
    uint64_t group_hash;      /* group collectives in order */
} agree_head;

/* Round 1 of one rank: the head, then per peer q the hash of its sends to
 * q and of its receives from q. */
static size_t round1_bytes(int n) { return sizeof(agree_head) + 2 * sizeof(uint64_t) * (size_t)n; }

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

#define FNV_START 0xcbf29ce484222325ull

/* What must match across ranks: everything but the node and its name. */
static uint64_t desc_hash(uint64_t h, const reel_coll_desc *d)
{
    h = fnv(h, &d->kind, 4 * sizeof(int32_t));
    h = fnv(h, &d->axis, 2 * sizeof(int32_t));
    return fnv(h, d->dims, sizeof d->dims);
}

static bool is_p2p(int32_t kind) { return kind == REEL_OP_SEND || kind == REEL_OP_RECV; }

/* ---- binding ------------------------------------------------------------ */

void reel_plan_comm_hold(reel_plan *p)
{
    if (!p->opts.comm || p->comm)
        return;
    p->comm = p->opts.comm;
    reel_comm_ref(p->comm);
}

reel_status reel_plan_comm_bind(reel_plan *p)
{
    char buf[160];
    reel_comm *c = p->comm;
    int stream = -1, first = -1;
    for (int i = 0; i < p->nnodes; i++) {
        const reel_node *n = &p->nodes[i];
        if (!reel_op_is_comm(n->op))
            continue;
        p->ncomm_ops++;
        if (!c)
            return reel_seterr(p->err, REEL_E_INVALID_USAGE,
                               "compile: %s needs a communicator: set reel_compile_opts.comm (reel/comm.h)",
                               reel_plan_node_name(p, i, buf, sizeof buf));
        if (c->be != p->be)
            return reel_seterr(p->err, REEL_E_INVALID_ARG,
                               "compile: the communicator (rank %d of %d) belongs to another context than the graph",
                               c->rank, c->nranks);
        const reel_op_attrs *a = &n->attrs;
        if (a->coll.nranks && a->coll.nranks != c->nranks)
            return reel_seterr(p->err, REEL_E_INVALID_ARG,
                               "compile: %s was built for %d ranks, the communicator has %d",
                               reel_plan_node_name(p, i, buf, sizeof buf), a->coll.nranks, c->nranks);
        if ((n->op == REEL_OP_SEND || n->op == REEL_OP_RECV) &&
            (a->coll.peer < 0 || a->coll.peer >= c->nranks || a->coll.peer == c->rank))
            return reel_seterr(p->err, REEL_E_INVALID_ARG,
                               "compile: %s: peer %d is not another rank of the communicator (rank %d of %d)",
                               reel_plan_node_name(p, i, buf, sizeof buf), a->coll.peer, c->rank, c->nranks);
        if (stream < 0) {
            stream = n->stream;
            first = i;
        } else if (n->stream != stream) {
            char other[160];
            return reel_seterr(p->err, REEL_E_UNSUPPORTED,
                               "compile: a communicator's ops run on one stream: %s is on stream %d, %s on stream %d",
                               reel_plan_node_name(p, i, buf, sizeof buf), n->stream,
                               reel_plan_node_name(p, first, other, sizeof other), stream);
        }
    }
    return REEL_OK;
}

/* ---- the sequence, as a sink of the issue walk -------------------------- */

static reel_status seq_record(reel_plan *p, reel_event *e, int s) { return REEL_OK; }
static reel_status seq_wait(reel_plan *p, int s, reel_event *e) { return REEL_OK; }

static reel_status seq_node(reel_plan *p, const reel_layout *L, int i)
{
    const reel_node *n = &p->nodes[i];
    if (!reel_op_is_comm(n->op))
        return REEL_OK;
    reel_coll_desc *d = &p->coll_desc[p->ncoll_desc++];
    memset(d, 0, sizeof *d);
    const reel_shape *s = n->op == REEL_OP_RECV ? &p->tensors[n->out[0]].shape : &p->tensors[n->in[0]].shape;
    d->kind = n->op;
    d->dtype = s->dtype;
    d->ndim = s->ndim;
    d->tokens = s->tokens;
    for (int k = 0; k < s->ndim; k++)
        d->dims[k] = s->tokens && k == 0 ? -1 : s->dims[k];
    d->axis = n->attrs.coll.axis;
    d->nranks = n->attrs.coll.nranks;
    d->peer = is_p2p(n->op) ? n->attrs.coll.peer : -1;
    d->node = i;
    snprintf(d->name, sizeof d->name, "%.*s", COLL_NAME - 1, p->tensors[n->out[0]].name);
    return REEL_OK;
}

static const reel_issue_sink seq_sink = {seq_record, seq_wait, seq_node};

static reel_status collect(reel_plan *p)
{
    p->coll_desc = reel_hcalloc((size_t)p->ncomm_ops + 1, sizeof *p->coll_desc);
    if (!p->coll_desc)
        return reel_seterr(p->err, REEL_E_OOM, "compile: out of host memory");
    p->ncoll_desc = 0;
    const reel_issue_sink *const sinks[] = {&seq_sink};
    return reel_plan_issue_to(p, &p->bucket[p->nbuckets - 1], sinks, 1);
}

/* ---- messages ------------------------------------------------------------ */

static const char *desc_str(const reel_coll_desc *d, char *buf, size_t len)
{
    reel_shape s = {.dtype = (reel_dtype)d->dtype, .ndim = d->ndim, .tokens = d->tokens != 0};
    memcpy(s.dims, d->dims, sizeof s.dims);
    char sh[64];
    const reel_op_schema *sc = reel_op_schema_get((reel_op_kind)d->kind);
    int at = snprintf(buf, len, "%s (node %d -> '%s') of %s %s", sc ? sc->name : "?", d->node, d->name,
                      reel_shape_format(&s, sh, sizeof sh), reel_dtype_name(s.dtype));
    if (at > 0 && (size_t)at < len && (d->kind == REEL_OP_ALL_GATHER || d->kind == REEL_OP_REDUCE_SCATTER ||
                                       d->kind == REEL_OP_ALL_TO_ALL))
        snprintf(buf + at, len - (size_t)at, " axis %d", d->axis);
    return buf;
}

static bool same(const reel_coll_desc *a, const reel_coll_desc *b) { return desc_hash(0, a) == desc_hash(0, b); }

/* The k-th group collective (or pair message) of rank r's list; NULL past
 * its end. kind_filter: -1 group collectives; else p2p with (from, to). */
static const reel_coll_desc *nth(const reel_coll_desc *list, int count, int k, int want, int peer)
{
    for (int i = 0; i < count; i++) {
        const reel_coll_desc *d = &list[i];
        bool hit = want < 0 ? !is_p2p(d->kind) : (d->kind == want && d->peer == peer);
        if (hit && k-- == 0)
            return d;
    }
    return NULL;
}

/* Round 2: every rank's descriptors, then the message of the first
 * difference (the same on every rank). */
static reel_status explain(reel_plan *p, const agree_head *const *heads, int n, bool group, int from, int to)
{
    int maxc = 0;
    for (int r = 0; r < n; r++)
        maxc = heads[r]->ncoll > maxc ? heads[r]->ncoll : maxc;
    size_t per = (size_t)(maxc ? maxc : 1) * sizeof(reel_coll_desc);
    char *mine = reel_hcalloc(1, per), *all = reel_hcalloc((size_t)n, per);
    if (!mine || !all) {
        reel_hfree(mine), reel_hfree(all);
        return reel_seterr(p->err, REEL_E_OOM, "compile: out of host memory for the collective check");
    }
    memcpy(mine, p->coll_desc, (size_t)p->ncoll_desc * sizeof(reel_coll_desc));
    reel_status st = p->comm->vt->agree(p->comm, mine, all, per);
    reel_hfree(mine);
    if (st != REEL_OK) {
        reel_hfree(all);
        return reel_err_prefix(p->err, st, "compile: collective check");
    }
    char a[192], b[192];
    const reel_coll_desc *list0 = (const reel_coll_desc *)all;
    if (group) {
        for (int k = 0; k <= maxc; k++) {
            const reel_coll_desc *d0 = nth(list0, heads[0]->ncoll, k, -1, 0);
            for (int r = 1; r < n; r++) {
                const reel_coll_desc *dr = nth((const reel_coll_desc *)(all + (size_t)r * per), heads[r]->ncoll, k, -1, 0);
                if ((d0 && dr && same(d0, dr)) || (!d0 && !dr))
                    continue;
                st = reel_seterr(p->err, REEL_E_INVALID_USAGE,
                                 "compile: the ranks' collective sequences differ at collective #%d: rank 0 has %s, "
                                 "rank %d has %s",
                                 k, d0 ? desc_str(d0, a, sizeof a) : "none (its sequence ends)", r,
                                 dr ? desc_str(dr, b, sizeof b) : "none (its sequence ends)");
                reel_hfree(all);
                return st;
            }
        }
    }
    const reel_coll_desc *lf = (const reel_coll_desc *)(all + (size_t)from * per);
    const reel_coll_desc *lt = (const reel_coll_desc *)(all + (size_t)to * per);
    for (int k = 0; !group && k <= maxc; k++) {
        const reel_coll_desc *s = nth(lf, heads[from]->ncoll, k, REEL_OP_SEND, to);
        const reel_coll_desc *r = nth(lt, heads[to]->ncoll, k, REEL_OP_RECV, from);
        bool match = s && r && s->dtype == r->dtype && s->ndim == r->ndim && s->tokens == r->tokens &&
                     !memcmp(s->dims, r->dims, sizeof s->dims);
        if (match || (!s && !r))
            continue;
        st = reel_seterr(p->err, REEL_E_INVALID_USAGE,
                         "compile: message #%d from rank %d to rank %d differs: rank %d sends %s, rank %d receives %s", k,
                         from, to, from, s ? desc_str(s, a, sizeof a) : "nothing", to,
                         r ? desc_str(r, b, sizeof b) : "nothing");
        reel_hfree(all);
        return st;
    }
    reel_hfree(all);
    return reel_seterr(p->err, REEL_E_INVALID_USAGE,
                       "compile: the ranks' collective sequences differ (their hashes do; no single op differs)");
}

/* ---- the exchange -------------------------------------------------------- */

static void fill_round1(reel_plan *p, char *buf, bool ok)
{
    int n = p->comm->nranks;
    agree_head *h = (agree_head *)buf;
    uint64_t *pair = (uint64_t *)(buf + sizeof *h);
    memset(buf, 0, round1_bytes(n));
    h->ok = ok;
    if (!ok)
        return;
    h->reason = p->plan_reason;
    h->ncoll = p->ncoll_desc;
    h->nbuckets = p->nbuckets;
    memcpy(h->buckets, p->buckets, (size_t)p->nbuckets * sizeof h->buckets[0]); /* the rest stays 0 */
    h->group_hash = FNV_START;
    for (int q = 0; q < n; q++)
        pair[2 * q] = pair[2 * q + 1] = FNV_START;
    for (int i = 0; i < p->ncoll_desc; i++) {
        const reel_coll_desc *d = &p->coll_desc[i];
        if (!is_p2p(d->kind)) {
            h->group_hash = desc_hash(h->group_hash, d);
            continue;
        }
        /* A send and its receive hash the same fields: shape and dtype. */
        reel_coll_desc m = *d;
        m.kind = 0;
        m.peer = 0;
        m.axis = m.nranks = 0;
        uint64_t *slot = &pair[2 * d->peer + (d->kind == REEL_OP_RECV)];
        *slot = desc_hash(*slot, &m);
    }
}

static reel_status verdict(reel_plan *p, const char *all)
{
    int n = p->comm->nranks;
    size_t per = round1_bytes(n);
    const agree_head *heads[4096];
    for (int r = 0; r < n; r++)
        heads[r] = (const agree_head *)(all + (size_t)r * per);
    for (int r = 0; r < n; r++)
        if (!heads[r]->ok)
            return reel_seterr(p->err, REEL_E_BACKEND,
                               "compile: rank %d of %d failed to compile (its context has the error), so every rank "
                               "fails",
                               r, n);
    for (int r = 1; r < n; r++)
        if (heads[r]->nbuckets != heads[0]->nbuckets ||
            memcmp(heads[r]->buckets, heads[0]->buckets, sizeof heads[0]->buckets) != 0)
            return reel_seterr(p->err, REEL_E_INVALID_USAGE,
                               "compile: rank %d's buckets differ from rank 0's (%d and %d buckets, largest %d and %d): "
                               "a collective moves the bucket's rows, every rank must capture the same buckets",
                               r, heads[r]->nbuckets, heads[0]->nbuckets, heads[r]->buckets[heads[r]->nbuckets - 1],
                               heads[0]->buckets[heads[0]->nbuckets - 1]);
    for (int r = 1; r < n; r++)
        if (heads[r]->group_hash != heads[0]->group_hash)
            return explain(p, heads, n, true, 0, 0);
    for (int from = 0; from < n; from++)
        for (int to = 0; to < n; to++) {
            const uint64_t *pf = (const uint64_t *)(all + (size_t)from * per + sizeof(agree_head));
            const uint64_t *pt = (const uint64_t *)(all + (size_t)to * per + sizeof(agree_head));
            if (pf[2 * to] != pt[2 * from + 1])
                return explain(p, heads, n, false, from, to);
        }
    /* The capture decision, the same on every rank: a rank that cannot
     * capture (or does not warm up) makes every rank run eagerly, or the
     * others' warm-up collectives would wait for it. */
    for (int r = 0; r < n && p->plan_reason == REEL_FALLBACK_NONE; r++)
        if (heads[r]->reason != REEL_FALLBACK_NONE) {
            if (p->opts.strict)
                return reel_seterr(p->err, REEL_E_UNSUPPORTED,
                                   "compile: rank %d of %d will not capture (%s), and this rank's plan is strict", r, n,
                                   reel_fallback_str((reel_fallback)heads[r]->reason));
            p->plan_reason = (reel_fallback)heads[r]->reason;
        }
    return REEL_OK;
}

reel_status reel_plan_comm_agree(reel_plan *p)
{
    if (!p->comm)
        return REEL_OK;
    REEL_TRY(collect(p));
    int n = p->comm->nranks;
    size_t per = round1_bytes(n);
    char *mine = reel_hcalloc(1, per), *all = reel_hcalloc((size_t)n, per);
    if (!mine || !all) {
        reel_hfree(mine), reel_hfree(all);
        return reel_seterr(p->err, REEL_E_OOM, "compile: out of host memory for the collective check");
    }
    fill_round1(p, mine, true);
    p->comm_agreed = true;
    reel_status st = p->comm->vt->agree(p->comm, mine, all, per);
    if (st != REEL_OK)
        reel_err_prefix(p->err, st, "compile: collective check");
    else if ((st = verdict(p, all)) == REEL_OK)
        p->comm_verified = true;
    reel_hfree(mine);
    reel_hfree(all);
    return st;
}

/* Compile failed on this rank: tell the others (before the exchange they
 * are waiting in it; after it, in the warm-up's collectives). */
void reel_plan_comm_failed(reel_plan *p)
{
    if (!p->comm)
        return;
    char msg[REEL_ERRMSG_MAX];
    reel_err_copy(p->err, msg, sizeof msg);
    if (!p->comm_agreed) {
        int n = p->comm->nranks;
        size_t per = round1_bytes(n);
        char *mine = reel_hcalloc(1, per), *all = reel_hcalloc((size_t)n, per);
        p->comm_agreed = true;
        if (mine && all) {
            fill_round1(p, mine, false);
            p->comm->vt->agree(p->comm, mine, all, per);
        }
        reel_hfree(mine);
        reel_hfree(all);
    } else if (p->comm_verified && p->ncomm_ops > 0 && p->plan_reason == REEL_FALLBACK_NONE) {
        /* The others passed the check too and are in the warm-up's
         * collectives, which this rank will not join. */
        p->comm->vt->abort(p->comm);
    }
    reel_seterr(p->err, REEL_OK, "%s", msg); /* the failure's own message stays */
}

/* Before and after each step's work: a communicator broken by any rank. */
reel_status reel_plan_comm_poll(reel_plan *p)
{
    if (!p->comm || !p->ncomm_ops)
        return REEL_OK;
    reel_status st = p->comm->vt->async_error(p->comm);
    return st == REEL_OK ? REEL_OK : reel_err_prefix(p->err, st, "step: the communicator is broken");
}

reel_status reel_plan_comm_sync(reel_plan *p)
{
    if (!p->comm || !p->ncomm_ops)
        return REEL_OK;
    reel_status st = p->comm->vt->sync(p->comm, p->streams[0]);
    return st == REEL_OK ? REEL_OK : reel_err_prefix(p->err, st, "step: a collective failed");
}

void reel_plan_comm_release(reel_plan *p)
{
    if (!p->comm)
        return;
    reel_comm_unref(p->comm);
    p->comm = NULL;
}
