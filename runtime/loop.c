/* reel_step_n: many decode steps per host round trip (docs/loop.md).
 *
 * validate (the first step as reel_step does, then every step the loop may
 * take: contexts inside max_context, every block reached in the tables) ->
 * the first step's staging, with the block-table entries of the furthest
 * context -> one upload of it and one of the loop's control block -> either
 * one launch of the bucket's loop graph (a WHILE loop around the bucket's
 * captured kernels and the advance kernel, ops/loop.h), or a host loop of
 * single replays (or eager runs) each followed by the advance -> one
 * download of the tokens, the step counts and the last step's outputs.
 *
 * The advance writes the next step's inputs and metadata into the static
 * region, where the upload would have put them, so the bucket's kernels run
 * exactly as in reel_step: tokens and states are bit for bit those of single
 * steps. The control block sits at a fixed device address and holds the
 * call's parameters (step limit, eos ids, the token buffer's address), so a
 * loop graph is built once per bucket and serves every call. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/abi.h"
#include "core/halloc.h"
#include "reel/memory.h"
#include "memory/pinned.h"
#include "ops/loop.h"
#include "runtime/plan.h"

_Static_assert(REEL_LOOP_MAX_EOS == REEL_LOOP_CTL_MAX_EOS, "one eos limit");

/* Device (and pinned mirror): [ctl | limit[rows] | steps[rows]], then the
 * token buffer [cap] of its own (grown; its address travels in ctl). */
typedef struct reel_loop_state {
    char *dev, *host;
    size_t bytes;
    int32_t rows;                     /* the largest bucket's tokens */
    size_t off_limit, off_steps;
    int32_t *tok_dev, *tok_host;
    size_t tok_cap;                   /* elements */
    /* Loop graphs, one per bucket, for the tensors they were built for. */
    reel_exec_graph *graph[REEL_MAX_BUCKETS];
    bool failed[REEL_MAX_BUCKETS];    /* its capture failed: host loops */
    uint32_t key_in, key_out, key_rng;
    bool no_device;                   /* no device loops here (backend, test hook, CUDA not enabled) */
    bool decided;                     /* no_device settled (at the first call) */
} reel_loop_state;

static void drop_graphs(reel_plan *p, reel_loop_state *lp)
{
    for (int b = 0; b < REEL_MAX_BUCKETS; b++) {
        if (lp->graph[b])
            p->be->vt->graph_destroy(p->be, lp->graph[b]);
        lp->graph[b] = NULL;
        lp->failed[b] = false;
    }
}

void reel_plan_loop_reset(reel_plan *p)
{
    if (p->loop)
        drop_graphs(p, p->loop);
}

void reel_plan_loop_free(reel_plan *p)
{
    reel_loop_state *lp = p->loop;
    if (!lp)
        return;
    drop_graphs(p, lp);
    const reel_backend_vt *vt = p->be->vt;
    if (lp->dev)
        vt->dev_free(p->be, lp->dev);
    if (lp->tok_dev)
        vt->dev_free(p->be, lp->tok_dev);
    if (lp->host)
        reel_pinned_free(p->pinned, lp->host);
    if (lp->tok_host)
        reel_pinned_free(p->pinned, lp->tok_host);
    reel_hfree(lp);
    p->loop = NULL;
    p->st.loop_bytes = 0;
}

/* The control block and per-sequence arrays, once; the token buffer grown
 * to tokens elements (never shrunk). */
static reel_status loop_buffers(reel_plan *p, size_t tokens)
{
    const reel_backend_vt *vt = p->be->vt;
    reel_loop_state *lp = p->loop;
    if (!lp) {
        if (!(lp = reel_hcalloc(1, sizeof *lp)))
            return reel_seterr(p->err, REEL_E_OOM, "step_n: out of host memory");
        lp->rows = p->buckets[p->nbuckets - 1];
        lp->off_limit = reel_align_up(sizeof(reel_loop_ctl), REEL_PLAN_ALIGN);
        lp->off_steps = reel_align_up(lp->off_limit + 4 * (size_t)lp->rows, REEL_PLAN_ALIGN);
        lp->bytes = reel_align_up(lp->off_steps + 4 * (size_t)lp->rows, REEL_PLAN_ALIGN);
        reel_status st = vt->dev_alloc(p->be, lp->bytes, (void **)&lp->dev);
        if (st == REEL_OK)
            st = reel_pinned_alloc(p->pinned, lp->bytes, (void **)&lp->host);
        p->loop = lp;
        if (st != REEL_OK) {
            reel_plan_loop_free(p);
            return st;
        }
        p->st.loop_bytes = lp->bytes;
    }
    if (tokens <= lp->tok_cap)
        return REEL_OK;
    /* The old buffer may still be read by nothing: the last call synced. */
    int32_t *dev = NULL, *host = NULL;
    REEL_TRY(vt->dev_alloc(p->be, 4 * tokens, (void **)&dev));
    reel_status st = reel_pinned_alloc(p->pinned, 4 * tokens, (void **)&host);
    if (st != REEL_OK) {
        vt->dev_free(p->be, dev);
        return st;
    }
    if (lp->tok_dev)
        vt->dev_free(p->be, lp->tok_dev);
    if (lp->tok_host)
        reel_pinned_free(p->pinned, lp->tok_host);
    lp->tok_dev = dev;
    lp->tok_host = host;
    lp->tok_cap = tokens;
    p->st.loop_bytes = lp->bytes + 4 * tokens;
    return REEL_OK;
}

/* The tensors the loop ties together, by name and kind; shape checked. */
static reel_status loop_tensor(reel_plan *p, const char *name, const char *what, bool output, int cols,
                               uint32_t *out)
{
    if (!name)
        return reel_seterr(p->err, REEL_E_INVALID_ARG, "step_n: %s is NULL", what);
    int t = -1;
    if (output) {
        for (int o = 0; o < p->noutputs; o++)
            if (strcmp(p->outputs[o].name, name) == 0)
                t = (int)p->outputs[o].tensor;
    } else {
        t = reel_plan_find_tensor(p, name, REEL_T_INPUT);
    }
    if (t <= 0)
        return reel_seterr(p->err, REEL_E_NOT_FOUND, "step_n: %s '%s' is not %s of the plan", what, name,
                           output ? "an output" : "an input");
    const reel_shape *sh = &p->tensors[t].shape;
    bool ok = sh->dtype == REEL_I32 && sh->tokens && sh->ndim == (cols ? 2 : 1) && (!cols || sh->dims[1] == cols);
    if (output && p->tensors[t].kind != REEL_T_ACT)
        ok = false; /* an output that is an input or a state is not a step's result */
    if (!ok) {
        char want[32];
        snprintf(want, sizeof want, cols ? "[T, %d] int32" : "[T] int32", cols);
        return reel_seterr(p->err, REEL_E_INVALID_ARG, "step_n: %s '%s' must be %s%s", what, name, want,
                           output ? " computed by the graph" : "");
    }
    *out = (uint32_t)t;
    return REEL_OK;
}

/* What only the loop refuses: the plan (validated subset), the loop's own
 * arguments and the first step's shape. */
static reel_status check_loop(reel_plan *p, const reel_step_info *s, const reel_loop_info *li, int32_t *nseq)
{
    if (p->ncomm_ops > 0)
        return reel_seterr(p->err, REEL_E_UNSUPPORTED,
                           "step_n: the plan has %d collective op%s; device loops are validated for one-rank plans",
                           p->ncomm_ops, p->ncomm_ops == 1 ? "" : "s");
    if (p->dcp.n > 1)
        return reel_seterr(p->err, REEL_E_UNSUPPORTED,
                           "step_n: the attention has a DCP layout (%d ranks); device loops are validated without DCP",
                           p->dcp.n);
    for (int k = 0; k < p->nkv; k++)
        if (p->kv[k].block_size != p->block_size)
            return reel_seterr(p->err, REEL_E_UNSUPPORTED,
                               "step_n: the attention ops have KV caches of block sizes %d and %d; a loop derives "
                               "one slot a token for all of them",
                               p->block_size, p->kv[k].block_size);
    if (li->max_steps < 1)
        return reel_seterr(p->err, REEL_E_INVALID_ARG, "step_n: max_steps %d is below 1", li->max_steps);
    if (li->num_eos < 0 || li->num_eos > REEL_LOOP_MAX_EOS)
        return reel_seterr(p->err, REEL_E_INVALID_ARG, "step_n: num_eos %d outside 0..%d", li->num_eos,
                           REEL_LOOP_MAX_EOS);
    if (!li->tokens || !li->steps)
        return reel_seterr(p->err, REEL_E_INVALID_ARG, "step_n: the %s array is NULL",
                           !li->tokens ? "tokens" : "steps");
    int32_t n = s->num_tokens;
    if (p->has_attention) {
        if (s->num_seqs != n)
            return reel_seterr(p->err, REEL_E_INVALID_ARG,
                               "step_n: a loop step is a decode step, one token a sequence: %d tokens, %d sequences",
                               n, s->num_seqs);
        for (int32_t q = 0; q <= n; q++)
            if (s->query_start[q] != q)
                return reel_seterr(p->err, REEL_E_INVALID_ARG,
                                   "step_n: a loop step is a decode step: query_start[%d] is %d, not %d", q,
                                   s->query_start[q], q);
    }
    for (int32_t q = 0; li->max_new_tokens && q < n; q++)
        if (li->max_new_tokens[q] < 1)
            return reel_seterr(p->err, REEL_E_INVALID_ARG, "step_n: sequence %d has max_new_tokens %d (at least 1)",
                               q, li->max_new_tokens[q]);
    *nseq = n;
    return REEL_OK;
}

static int32_t seq_limit(const reel_loop_info *li, int32_t q)
{
    int32_t m = li->max_new_tokens ? li->max_new_tokens[q] : li->max_steps;
    return m < li->max_steps ? m : li->max_steps;
}

/* Every step the loop may take stays inside the limits the graphs were
 * captured with, and finds its blocks: sequence q reaches context
 * context_lens[q] + limit - 1. need gets the furthest. */
static reel_status check_reach(reel_plan *p, const reel_step_info *s, const reel_loop_info *li,
                               reel_step_need *need)
{
    if (!p->has_attention)
        return REEL_OK;
    for (int32_t q = 0; q < s->num_seqs; q++) {
        int64_t last = (int64_t)s->context_lens[q] + seq_limit(li, q) - 1;
        if (last > p->opts.max_context)
            return reel_seterr(p->err, REEL_E_LIMIT,
                               "step_n: sequence %d would reach context %lld in %d steps, past max_context %d: a "
                               "loop runs inside the captured limits (lower max_steps or its max_new_tokens)",
                               q, (long long)last, seq_limit(li, q), p->opts.max_context);
        int32_t blocks = reel_blocks_for((int32_t)last, p->block_size);
        if (blocks > s->block_table_stride)
            return reel_seterr(p->err, REEL_E_INVALID_ARG,
                               "step_n: sequence %d needs %d blocks for context %lld, block_table_stride is %d", q,
                               blocks, (long long)last, s->block_table_stride);
        REEL_TRY(reel_step_check_blocks(p, s, q, (int32_t)last));
        if (last > need->max_ctx)
            need->max_ctx = (int32_t)last;
        if (blocks > need->max_blocks)
            need->max_blocks = blocks;
    }
    return REEL_OK;
}

static reel_loop_kargs kargs_of(const reel_plan *p, const reel_layout *L, const uint32_t ten[3])
{
    reel_loop_state *lp = p->loop;
    reel_loop_kargs a = {
        .ctl = (reel_loop_ctl *)lp->dev,
        .limit = (int32_t *)(lp->dev + lp->off_limit),
        .steps = (int32_t *)(lp->dev + lp->off_steps),
        .sampled = reel_plan_tensor_dev(p, L, ten[1]),
        .ids = reel_plan_tensor_dev(p, L, ten[0]),
        .rng = ten[2] ? reel_plan_tensor_dev(p, L, ten[2]) : NULL,
        .positions = (int32_t *)(L->stat_dev + L->off_pos),
        .max_blocks = L->max_blocks,
        .block_size = p->block_size,
    };
    if (p->has_attention) {
        a.slots = (int32_t *)(L->stat_dev + L->off_slot);
        a.ctx = (int32_t *)(L->stat_dev + L->off_ctx);
        a.bt = (const int32_t *)(L->stat_dev + L->off_bt);
    }
    return a;
}

/* CUDA's WHILE-node loops stay off until a GPU run has shown them
 * (REEL_DEVICE_LOOP=1 turns them on; docs/loop.md): the host loop runs the
 * same kernels meanwhile. The host backend's loop graphs are tested in CI. */
static bool device_loops_allowed(const reel_plan *p)
{
    if (p->be->kind != REEL_BACKEND_CUDA)
        return true;
    const char *e = getenv("REEL_DEVICE_LOOP");
    return e && strcmp(e, "1") == 0;
}

/* The bucket's loop graph, built at its first use: the bucket's kernels as
 * capture issues them, then the advance, as one loop's body. NULL (host
 * loops) where the backend has no device loops or the capture failed. */
static reel_status loop_graph(reel_plan *p, int b, const uint32_t ten[3], reel_exec_graph **out)
{
    reel_loop_state *lp = p->loop;
    const reel_backend_vt *vt = p->be->vt;
    *out = NULL;
    if (lp->key_in != ten[0] || lp->key_out != ten[1] || lp->key_rng != ten[2]) {
        drop_graphs(p, lp); /* other tensors: the graphs read and write others */
        lp->key_in = ten[0];
        lp->key_out = ten[1];
        lp->key_rng = ten[2];
    }
    if (!lp->decided) { /* once per plan: a call's hot path reads no environment */
        lp->decided = true;
        lp->no_device = !vt->loop_capture_begin || p->dbg.no_device_loop || !device_loops_allowed(p);
    }
    if (lp->graph[b] || lp->no_device || lp->failed[b]) {
        *out = lp->graph[b];
        return REEL_OK;
    }
    const reel_layout *L = &p->bucket[b];
    reel_stream *s0 = p->streams[0];
    reel_loop_kargs a = kargs_of(p, L, ten);
    reel_status st = vt->loop_capture_begin(p->be, s0, &a.cond);
    if (st == REEL_E_UNSUPPORTED) {
        lp->no_device = true;
        if (p->ctx->log_fn) {
            char msg[REEL_ERRMSG_MAX];
            reel_err_copy(p->err, msg, sizeof msg);
            reel_log(p->ctx, REEL_LOG_INFO, "step_n: no device loops here, steps loop on the host (%s)", msg);
        }
        reel_clearerr(p->err);
        return REEL_OK;
    }
    REEL_TRY(st);
    st = reel_plan_issue(p, L);
    if (st == REEL_OK)
        st = reel_loop_advance(p->be, s0, &a);
    if (st != REEL_OK)
        vt->capture_abort(p->be, s0);
    else
        st = vt->capture_end(p->be, s0, &lp->graph[b]);
    if (st != REEL_OK) {
        /* A loop the device refuses (a node type a loop body cannot hold)
         * is no error: the bucket's steps loop on the host. */
        lp->graph[b] = NULL;
        lp->failed[b] = true;
        if (p->ctx->log_fn) {
            char msg[REEL_ERRMSG_MAX];
            reel_err_copy(p->err, msg, sizeof msg);
            reel_log(p->ctx, REEL_LOG_WARN, "step_n: loop graph of bucket %d (%d tokens) failed, host loops: %s", b,
                     p->buckets[b], msg);
        }
        reel_clearerr(p->err);
        return REEL_OK;
    }
    p->st.loop_graphs_captured++;
    *out = lp->graph[b];
    return REEL_OK;
}

/* The advance as the hazard checker sees it: on stream 0, after the
 * step's join, it reads the sampled tokens and writes the next step's
 * inputs, metadata and the loop's buffers. */
static reel_status check_advance(reel_plan *p, const reel_layout *L, const reel_loop_kargs *a, int32_t n)
{
    const char *meta;
    size_t meta_bytes;
    reel_staging_meta_range(L, &meta, &meta_bytes);
    reel_loop_state *lp = p->loop;
    reel_check_access acc[5] = {
        {REEL_CHECK_ACCESS_HEAD, 0, (uint64_t)(uintptr_t)a->sampled, 4 * (size_t)n, false, "sampled tokens"},
        {REEL_CHECK_ACCESS_HEAD, 0, (uint64_t)(uintptr_t)a->ids, 4 * (size_t)n, true, "token input (static)"},
        {REEL_CHECK_ACCESS_HEAD, 0, (uint64_t)(uintptr_t)meta, meta_bytes, true, "step metadata (static)"},
        {REEL_CHECK_ACCESS_HEAD, 0, (uint64_t)(uintptr_t)lp->dev, lp->bytes, true, "loop control"},
        {REEL_CHECK_ACCESS_HEAD, 0, (uint64_t)(uintptr_t)a->rng, 16 * (size_t)n, true, "sampler rng input (static)"},
    };
    return reel_checker_op(p->chk, 0, "loop advance", a->rng ? 5 : 4, acc);
}

/* Steps one at a time from the host: each replay (or eager run) and its
 * advance, then the condition read back. */
static reel_status host_loop(reel_plan *p, const reel_layout *L, int b, bool replay, const reel_loop_kargs *a,
                             int32_t n)
{
    const reel_backend_vt *vt = p->be->vt;
    reel_stream *s0 = p->streams[0];
    reel_loop_ctl *ctl = (reel_loop_ctl *)p->loop->host;
    const reel_issue_sink *const checked[] = {&reel_issue_check, &reel_issue_launch};
    for (;;) {
        if (replay) {
            if (p->chk)
                REEL_TRY(reel_plan_issue_to(p, L, checked, 1));
            REEL_TRY(vt->graph_launch(p->be, p->graph[b], s0));
        } else {
            REEL_TRY(p->chk ? reel_plan_issue_to(p, L, checked, 2) : reel_plan_issue(p, L));
        }
        REEL_TRY(reel_loop_advance(p->be, s0, a));
        if (p->chk)
            REEL_TRY(check_advance(p, L, a, n));
        REEL_TRY(vt->copy(p->be, s0, ctl, a->ctl, sizeof *ctl, REEL_COPY_D2H));
        REEL_TRY(vt->stream_sync(p->be, s0));
        if (p->chk)
            REEL_TRY(reel_checker_host_sync(p->chk, REEL_CHECK_ALL_STREAMS));
        if (!ctl->cont)
            return REEL_OK;
    }
}

/* The call's control block and limits into the pinned mirror, uploaded
 * right after the first step's staging. */
static size_t fill_ctl(reel_plan *p, const reel_loop_info *li, int32_t n)
{
    reel_loop_state *lp = p->loop;
    reel_loop_ctl *c = (reel_loop_ctl *)lp->host;
    memset(c, 0, sizeof *c);
    c->max_steps = li->max_steps;
    c->nseq = n;
    c->neos = li->num_eos;
    memcpy(c->eos, li->eos_ids, sizeof c->eos);
    c->cont = 1;
    c->tokens = lp->tok_dev;
    int32_t *limit = (int32_t *)(lp->host + lp->off_limit), *steps = (int32_t *)(lp->host + lp->off_steps);
    for (int32_t q = 0; q < n; q++) {
        limit[q] = seq_limit(li, q);
        steps[q] = 0;
    }
    /* Only [0, n) of both arrays is read: upload through steps[n). */
    return lp->off_steps + 4 * (size_t)n;
}

/* Upload, loop (device or host), download: the part that puts work on the
 * streams. *iters: the steps that ran. */
static reel_status run_loop(reel_plan *p, const reel_layout *L, int b, bool replay, size_t up,
                            const reel_loop_info *li, const uint32_t ten[3], int32_t n, int32_t *iters, bool *device)
{
    const reel_backend_vt *vt = p->be->vt;
    reel_stream *s0 = p->streams[0];
    reel_loop_state *lp = p->loop;
    reel_exec_graph *g = NULL;
    if (replay && !p->chk)
        REEL_TRY(loop_graph(p, b, ten, &g));
    *device = g != NULL;
    size_t ctl_up = fill_ctl(p, li, n);
    if (p->chk) {
        REEL_TRY(reel_plan_check_upload(p, L, up));
        reel_check_access a = {REEL_CHECK_ACCESS_HEAD, 0, (uint64_t)(uintptr_t)lp->dev, ctl_up, true, "loop control"};
        REEL_TRY(reel_checker_op(p->chk, 0, "upload", 1, &a));
    }
    if (p->timer[0])
        REEL_TRY(vt->event_record(p->be, p->timer[0], s0));
    REEL_TRY(reel_staging_upload(p, L, up));
    REEL_TRY(vt->copy(p->be, s0, lp->dev, lp->host, ctl_up, REEL_COPY_H2D));
    reel_loop_kargs a = kargs_of(p, L, ten);
    if (g)
        REEL_TRY(vt->graph_launch(p->be, g, s0));
    else
        REEL_TRY(host_loop(p, L, b, replay, &a, n));
    size_t ntok = (size_t)li->max_steps * (size_t)n;
    REEL_TRY(vt->copy(p->be, s0, lp->host, lp->dev, lp->off_steps + 4 * (size_t)n, REEL_COPY_D2H));
    REEL_TRY(vt->copy(p->be, s0, lp->tok_host, lp->tok_dev, 4 * ntok, REEL_COPY_D2H));
    REEL_TRY(reel_staging_download(p, L, n));
    if (p->chk) {
        reel_check_access acc[2] = {
            {REEL_CHECK_ACCESS_HEAD, 0, (uint64_t)(uintptr_t)lp->dev, lp->off_steps + 4 * (size_t)n, false,
             "loop control"},
            {REEL_CHECK_ACCESS_HEAD, 0, (uint64_t)(uintptr_t)lp->tok_dev, 4 * ntok, false, "loop tokens"},
        };
        REEL_TRY(reel_checker_op(p->chk, 0, "download", 2, acc));
        REEL_TRY(reel_plan_check_download(p, L, n));
    }
    *iters = ((const reel_loop_ctl *)lp->host)->iter;
    return REEL_OK;
}

reel_status reel_step_n(reel_plan *p, const reel_step_info *info, const reel_loop_info *loop)
{
    if (!p || !info || !loop)
        return reel_seterr(p ? p->err : NULL, REEL_E_INVALID_ARG, "step_n: NULL plan, step info or loop info");
    reel_step_info si = REEL_STEP_INFO_INIT;
    REEL_TRY(reel_struct_load(&si, info, &reel_abi_step_info, p->err));
    reel_loop_info li = REEL_LOOP_INFO_INIT;
    REEL_TRY(reel_struct_load(&li, loop, &reel_abi_loop_info, p->err));
    const reel_step_info *s = &si;
    p->timed_valid = false;
    uint32_t ten[3] = {0, 0, 0};
    REEL_TRY(loop_tensor(p, li.token_input, "token_input", false, 0, &ten[0]));
    REEL_TRY(loop_tensor(p, li.token_output, "token_output", true, 0, &ten[1]));
    if (li.rng_input)
        REEL_TRY(loop_tensor(p, li.rng_input, "rng_input", false, REEL_SAMPLE_RNG, &ten[2]));
    reel_step_need need = {0, 0};
    REEL_TRY(reel_step_check(p, s, &need));
    int32_t n = 0;
    REEL_TRY(check_loop(p, s, &li, &n));
    REEL_TRY(check_reach(p, s, &li, &need));
    REEL_TRY(reel_plan_comm_poll(p));
    reel_fallback why;
    const reel_layout *L = NULL;
    int b = -1;
    REEL_TRY(reel_step_choose(p, s, &need, &why, &b, &L));
    if (L != &p->bucket[b < 0 ? 0 : b] || b < 0)
        return reel_seterr(p->err, REEL_E_LIMIT,
                           "step_n: %d token%s, %d sequence%s reaching context %d are past the fixed limits (%s; "
                           "limits: %d tokens, %d sequences, context %d): a loop runs inside them, step with reel_step",
                           n, n == 1 ? "" : "s", s->num_seqs, s->num_seqs == 1 ? "" : "s", need.max_ctx,
                           reel_fallback_str(why), p->buckets[p->nbuckets - 1], p->opts.max_seqs,
                           p->opts.max_context);
    REEL_TRY(loop_buffers(p, (size_t)li.max_steps * (size_t)n));
    size_t up = reel_staging_fill(p, L, s);
    /* The block tables as far as each sequence may reach (the fill copied
     * what the first step's contexts need). */
    for (int32_t q = 0; p->has_attention && q < n; q++) {
        int32_t blocks = reel_blocks_for(s->context_lens[q] + seq_limit(&li, q) - 1, p->block_size);
        memcpy(L->stat_host + L->off_bt + 4 * (size_t)q * L->max_blocks,
               s->block_tables + (size_t)q * s->block_table_stride, 4 * (size_t)blocks);
    }
    int32_t iters = 0;
    bool device = false;
    reel_status st = run_loop(p, L, b, why == REEL_FALLBACK_NONE, up, &li, ten, n, &iters, &device);
    if (st == REEL_OK && p->timer[0])
        st = p->be->vt->timer_elapsed_us(p->be, p->timer[0], p->timer[1], &p->last_device_us);
    if (st != REEL_OK)
        return reel_step_failed(p, st);
    p->timed_valid = p->timer[0] != NULL;
    reel_loop_state *lp = p->loop;
    const int32_t *steps = (const int32_t *)(lp->host + lp->off_steps);
    memcpy(li.steps, steps, 4 * (size_t)n);
    size_t got = (size_t)iters * (size_t)n, all = (size_t)li.max_steps * (size_t)n;
    memcpy(li.tokens, lp->tok_host, 4 * got);
    for (size_t i = got; i < all; i++)
        li.tokens[i] = REEL_LOOP_NO_TOKEN;
    reel_step_done(p, why, n, (uint64_t)iters);
    p->st.loop_calls++;
    p->st.loop_steps += (uint64_t)iters;
    p->st.loop_device_calls += device;
    if (p->chk)
        REEL_TRY(reel_plan_check_end(p));
    int32_t code = reel_staging_error_word(p);
    if (code != 0)
        return reel_staging_refused(p, code, L);
    return REEL_OK;
}
