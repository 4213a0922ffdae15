/* A serving step: validate -> choose replay or eager (with a reason) and the
 * layout -> build metadata into pinned staging once -> one upload -> replay
 * or issue -> download outputs and the kernels' error word. */
#include <stdio.h>
#include <string.h>

#include "core/abi.h"
#include "core/grow.h"
#include "runtime/plan.h"

typedef reel_step_need step_need;

static reel_status check_inputs(reel_plan *p, int32_t n)
{
    for (int t = 1; p->params_unwritten > 0 && t < p->ntensors; t++) {
        const reel_tinfo *ti = &p->tensors[t];
        if (ti->kind == REEL_T_PARAM && !p->param_written[t])
            return reel_seterr(p->err, REEL_E_UNBOUND,
                               "step: parameter '%s' is deferred and was never written (reel_plan_write_param)",
                               ti->name);
    }
    for (int i = 0; i < p->ninputs; i++) {
        uint32_t t = p->input_ids[i];
        const reel_tinfo *ti = &p->tensors[t];
        if (p->stash_rows[t] < 0)
            return reel_seterr(p->err, REEL_E_INVALID_USAGE, "step: input '%s' was not set (reel_plan_set_input)",
                               ti->name);
        if (ti->shape.tokens && p->stash_rows[t] != n)
            return reel_seterr(p->err, REEL_E_INVALID_ARG, "step: input '%s' has %lld rows, the step has %d tokens",
                               ti->name, (long long)p->stash_rows[t], n);
    }
    return REEL_OK;
}

/* Sequence q's block-table entries as every attention op reads them: an op
 * of block size bs reads the first blocks_for(len, bs) entries, each a block
 * of its own cache. Checked per op before anything runs, so that no op
 * writes its K/V and a later one refuses the step from inside the graph. */
reel_status reel_step_check_blocks(reel_plan *p, const reel_step_info *s, int32_t q, int32_t len)
{
    const int32_t *row = s->block_tables + (size_t)q * s->block_table_stride;
    for (int k = 0; k < p->nkv; k++) {
        const reel_kv_geom *g = &p->kv[k];
        int32_t blocks = reel_blocks_for(reel_plan_local_len(p, len), g->block_size);
        for (int32_t j = 0; j < blocks; j++) {
            if (row[j] >= 0 && row[j] < g->blocks)
                continue;
            char buf[160];
            return reel_seterr(p->err, REEL_E_INVALID_ARG,
                               "step: sequence %d block table entry %d is %d, the KV cache of %s has %d blocks "
                               "(of %d slots)",
                               q, j, row[j], reel_plan_node_name(p, g->node, buf, sizeof buf), g->blocks,
                               g->block_size);
        }
    }
    return REEL_OK;
}

/* Every op writes a token's K/V into the slot the mapping gives, in its
 * own cache: the slot must be inside each of them. Under DCP the mapping
 * only marks padding (-1): the slot is the owner's, from its block table. */
static reel_status check_slots(reel_plan *p, const reel_step_info *s)
{
    for (int k = 0; k < p->nkv; k++) {
        const reel_kv_geom *g = &p->kv[k];
        for (int32_t t = 0; t < s->num_tokens; t++) {
            int32_t slot = s->slot_mapping[t];
            if (slot >= -1 && (slot < g->slots || p->dcp.n > 1))
                continue;
            char buf[160];
            return reel_seterr(p->err, REEL_E_INVALID_ARG, "step: token %d slot %d outside the KV cache of %s (%lld slots)",
                               t, slot, reel_plan_node_name(p, g->node, buf, sizeof buf), (long long)g->slots);
        }
    }
    return REEL_OK;
}

static reel_status check_seqs(reel_plan *p, const reel_step_info *s, step_need *need)
{
    int32_t n = s->num_tokens, bs = p->block_size;
    if (!s->query_start || !s->context_lens || !s->block_tables || !s->slot_mapping || !s->positions)
        return reel_seterr(p->err, REEL_E_INVALID_ARG,
                           "step: the plan has paged attention: query_start, positions, slot_mapping, "
                           "context_lens and block_tables are required");
    /* Tokens after the last sequence's are padding (a rank of a layout
     * with fewer tokens than the others, or none: num_seqs 0). */
    if (s->query_start[0] != 0 || s->query_start[s->num_seqs] > n)
        return reel_seterr(p->err, REEL_E_INVALID_ARG,
                           "step: query_start must run from 0 to at most num_tokens (%d); it ends at %d", n,
                           s->query_start[s->num_seqs]);
    for (int32_t q = 0; q < s->num_seqs; q++) {
        int32_t a = s->query_start[q], b = s->query_start[q + 1], len = s->context_lens[q];
        /* Checked before positions[a..b) is read: b past n would read past
         * the caller's positions array. */
        if (b < a || b > n)
            return reel_seterr(p->err, REEL_E_INVALID_ARG,
                               "step: query_start[%d] is %d, outside query_start[%d] (%d) .. num_tokens (%d)", q + 1,
                               b, q, a, n);
        if (len < b - a || len < 1)
            return reel_seterr(p->err, REEL_E_INVALID_ARG, "step: sequence %d has context %d but %d new tokens", q, len,
                               b - a);
        int32_t blocks = reel_blocks_for(reel_plan_local_len(p, len), bs);
        if (blocks > s->block_table_stride)
            return reel_seterr(p->err, REEL_E_INVALID_ARG,
                               "step: sequence %d needs %d blocks for context %d%s, block_table_stride is %d", q,
                               blocks, len, p->dcp.n > 1 ? " (this DCP rank's share)" : "", s->block_table_stride);
        REEL_TRY(reel_step_check_blocks(p, s, q, len));
        for (int32_t t = a; t < b; t++)
            if (s->positions[t] < 0 || s->positions[t] >= len)
                return reel_seterr(p->err, REEL_E_INVALID_ARG,
                                   "step: token %d of sequence %d has position %d outside its context %d", t, q,
                                   s->positions[t], len);
        if (len > need->max_ctx)
            need->max_ctx = len;
        if (blocks > need->max_blocks)
            need->max_blocks = blocks;
    }
    return check_slots(p, s);
}

/* A step input's host copy (set_input's stash, or the staging it wrote in
 * place). */
static const void *input_host(reel_plan *p, uint32_t t)
{
    return p->staged[t] ? reel_staging_input_slot(p, t) : p->stash[t];
}

/* The limits kernels would otherwise see first, checked on the host from
 * the inputs the caller set, before anything runs: a refusal a kernel saw
 * only after an earlier op wrote its states would change them (compile's
 * rules make these tensors graph inputs). The kernels keep their checks as
 * a second line.
 *  - moe_align's expert ids, when an input: each in 0..E-1.
 *  - top-k's page transform maps candidate i of a row to page_table[i / ps]
 *    * ps + i % ps; a result past INT32_MAX is a refusal. Every candidate
 *    (i < min(length, N); N where the lengths are computed) is checked. */
static reel_status check_device_limits(reel_plan *p, int32_t n)
{
    for (int i = 0; p->host_checks && i < p->nnodes; i++) {
        const reel_node *nd = &p->nodes[i];
        if (nd->op == REEL_OP_MOE_ALIGN && p->tensors[nd->in[0]].kind == REEL_T_INPUT) {
            /* expert ids given as an input (compile's rule): each in range */
            const int32_t *ids = input_host(p, nd->in[0]);
            int32_t k = nd->attrs.moe.top_k, e = nd->attrs.moe.num_experts;
            for (int64_t j = 0; j < (int64_t)n * k; j++) {
                if (ids[j] >= 0 && ids[j] < e)
                    continue;
                char buf[160];
                return reel_seterr(p->err, REEL_E_LIMIT,
                                   "step: %s: token %lld's expert id %d (choice %lld) is outside 0..%d; refused "
                                   "before launch",
                                   reel_plan_node_name(p, i, buf, sizeof buf), (long long)(j / k), ids[j],
                                   (long long)(j % k), e - 1);
            }
        }
        if (nd->op != REEL_OP_TOPK || !nd->attrs.topk.has_page_table)
            continue;
        const reel_shape *ss = &p->tensors[nd->in[0]].shape, *ps_shape = &p->tensors[nd->in[2]].shape;
        int64_t ncols = ss->dims[1], npages = ps_shape->dims[1], ps = nd->attrs.topk.page_size;
        const int32_t *pt = input_host(p, nd->in[2]);
        const int32_t *lens = p->tensors[nd->in[1]].kind == REEL_T_INPUT ? input_host(p, nd->in[1]) : NULL;
        for (int32_t t = 0; t < n; t++) {
            int64_t lim = lens ? (lens[t] < 0 ? 0 : (lens[t] > ncols ? ncols : lens[t])) : ncols;
            const int32_t *row = pt + (size_t)t * (size_t)npages;
            for (int64_t j = 0; j * ps < lim; j++) {
                if (row[j] < 0)
                    continue; /* unmapped: its candidates give -1 */
                int64_t last = (lim < (j + 1) * ps ? lim : (j + 1) * ps) - 1 - j * ps;
                if ((int64_t)row[j] * ps + last <= INT32_MAX)
                    continue;
                char buf[160];
                return reel_seterr(p->err, REEL_E_LIMIT,
                                   "step: %s: row %d's page table entry %lld is %d, which maps candidate %lld "
                                   "to slot %lld, past INT32_MAX (page size %lld); refused before launch",
                                   reel_plan_node_name(p, i, buf, sizeof buf), t, (long long)j, row[j],
                                   (long long)(j * ps + last), (long long)((int64_t)row[j] * ps + last),
                                   (long long)ps);
            }
        }
    }
    return REEL_OK;
}

reel_status reel_step_check(reel_plan *p, const reel_step_info *s, step_need *need)
{
    if (s->num_tokens <= 0 || s->num_tokens > (1 << 24))
        return reel_seterr(p->err, REEL_E_INVALID_ARG, "step: num_tokens %d outside 1..2^24", s->num_tokens);
    if (s->num_seqs < 0)
        return reel_seterr(p->err, REEL_E_INVALID_ARG, "step: num_seqs %d is negative", s->num_seqs);
    REEL_TRY(check_inputs(p, s->num_tokens));
    REEL_TRY(check_device_limits(p, s->num_tokens));
    need->max_ctx = 0;
    need->max_blocks = 0;
    if (p->has_attention)
        return check_seqs(p, s, need);
    /* Without paged attention the sequence arrays are not read. */
    if (s->positions)
        for (int32_t t = 0; t < s->num_tokens; t++)
            if (s->positions[t] < 0)
                return reel_seterr(p->err, REEL_E_INVALID_ARG, "step: token %d has negative position %d", t,
                                   s->positions[t]);
    return REEL_OK;
}

static int bucket_for(const reel_plan *p, int32_t n)
{
    for (int b = 0; b < p->nbuckets; b++)
        if (p->buckets[b] >= n)
            return b;
    return -1;
}

/* The overflow layout, grown to fit the step (never shrunk). */
static reel_status overflow_layout(reel_plan *p, const reel_step_info *s, const step_need *need)
{
    int32_t top = p->buckets[p->nbuckets - 1];
    int64_t rows = s->num_tokens > top ? s->num_tokens : top;
    int32_t ns = p->has_attention ? s->num_seqs : 0;
    int32_t seqs = ns > p->opts.max_seqs ? ns : p->opts.max_seqs;
    int32_t blocks = p->bucket[0].max_blocks > need->max_blocks ? p->bucket[0].max_blocks : need->max_blocks;
    reel_layout *L = &p->over;
    if (p->over_valid && L->rows >= rows && L->max_seqs >= seqs && L->max_blocks >= blocks)
        return REEL_OK;
    if (p->over_valid) {
        /* Grow geometrically so a context that keeps growing rebuilds the
         * layout (and runs the planner) a logarithmic number of times. */
        rows = reel_grow_i64(L->rows, rows, INT64_MAX);
        seqs = (int32_t)reel_grow_i64(L->max_seqs, seqs, INT32_MAX);
        blocks = (int32_t)reel_grow_i64(L->max_blocks, blocks, INT32_MAX);
    }
    reel_layout_free(p, L, true);
    p->over_valid = false;
    reel_status st = reel_layout_build(p, L, rows, (int32_t)rows, seqs, blocks, true);
    if (st == REEL_OK)
        st = reel_plan_ensure_events(p, L);
    if (st == REEL_OK)
        st = reel_plan_out_reserve(p, rows);
    if (st != REEL_OK) {
        reel_layout_free(p, L, true);
        return st;
    }
    p->over_valid = true;
    return REEL_OK;
}

/* "s" for a count other than one, in messages. */
static const char *plural(int n) { return n == 1 ? "" : "s"; }

/* The dispatcher's guard, once: can this step replay, and if not, why; and
 * the layout it runs in. A step inside the fixed limits runs in its bucket's
 * layout (replayed, or eager at the bucket's size for a reason that is not a
 * limit); a step past a limit runs eagerly in the overflow layout. */
reel_status reel_step_choose(reel_plan *p, const reel_step_info *s, const step_need *need, reel_fallback *why,
                             int *bucket, const reel_layout **L)
{
    int b = bucket_for(p, s->num_tokens);
    reel_fallback r;
    if (b < 0)
        r = REEL_FALLBACK_TOKENS_OVER_LIMIT;
    else if (p->has_attention && s->num_seqs > p->opts.max_seqs)
        r = REEL_FALLBACK_SEQS_OVER_LIMIT;
    else if (need->max_ctx > p->opts.max_context && !p->dbg.skip_dispatch_guard)
        r = REEL_FALLBACK_CONTEXT_OVER_LIMIT;
    else
        r = p->plan_reason != REEL_FALLBACK_NONE ? p->plan_reason : p->bucket_reason[b];
    *why = r;
    *bucket = b;
    if (r != REEL_FALLBACK_NONE && p->opts.strict)
        return reel_seterr(p->err, REEL_E_FALLBACK,
                           "step of %d token%s, %d sequence%s, context %d would run eagerly (%s; limits: %d "
                           "token%s, %d sequence%s, context %d) and the plan is strict",
                           s->num_tokens, plural(s->num_tokens), s->num_seqs, plural(s->num_seqs), need->max_ctx,
                           reel_fallback_str(r), p->buckets[p->nbuckets - 1], plural(p->buckets[p->nbuckets - 1]),
                           p->opts.max_seqs, plural(p->opts.max_seqs), p->opts.max_context);
    bool past_limit = r == REEL_FALLBACK_TOKENS_OVER_LIMIT || r == REEL_FALLBACK_SEQS_OVER_LIMIT ||
                      r == REEL_FALLBACK_CONTEXT_OVER_LIMIT;
    if (!past_limit) {
        *L = &p->bucket[b];
        return REEL_OK;
    }
    REEL_TRY(overflow_layout(p, s, need));
    *L = &p->over;
    return REEL_OK;
}

/* Upload, replay or issue, download: the part of a step that puts work on
 * the streams. */
static reel_status run_step(reel_plan *p, const reel_layout *L, int b, bool replay, size_t up, int32_t n)
{
    reel_backend *be = p->be;
    bool feed = p->chk != NULL;
    if (feed)
        REEL_TRY(reel_plan_check_upload(p, L, up));
    if (p->timer[0])
        REEL_TRY(be->vt->event_record(be, p->timer[0], p->streams[0]));
    REEL_TRY(reel_staging_upload(p, L, up));
    /* The checker hears of every op before it runs (a replay: the sequence
     * its graph was captured from). */
    const reel_issue_sink *const checked[] = {&reel_issue_check, &reel_issue_launch};
    if (replay) {
        if (feed)
            REEL_TRY(reel_plan_issue_to(p, L, checked, 1));
        REEL_TRY(be->vt->graph_launch(be, p->graph[b], p->streams[0]));
    } else {
        reel_plan_dev_spans_begin(p); /* ended by reel_step, whatever run_step returns */
        REEL_TRY(feed ? reel_plan_issue_to(p, L, checked, 2) : reel_plan_issue(p, L));
    }
    /* The collectives' own wait (a timeout, a peer that failed) before the
     * download waits on the stream. */
    REEL_TRY(reel_plan_comm_sync(p));
    REEL_TRY(reel_staging_download(p, L, n));
    if (feed)
        REEL_TRY(reel_plan_check_download(p, L, n));
    return REEL_OK;
}

/* A step that failed with work issued (a kernel, the replay, a copy) leaves
 * nothing in flight: otherwise the next step's staging writes and upload,
 * or an overflow layout freed by a growth or reel_plan_trim, would race
 * with the copies and kernels still queued on the streams (a side stream
 * that never joined stream 0). The first error's message is kept. */
reel_status reel_step_failed(reel_plan *p, reel_status st)
{
    char msg[REEL_ERRMSG_MAX];
    reel_err_copy(p->err, msg, sizeof msg);
    for (int i = 0; i < p->nstreams; i++)
        p->be->vt->stream_sync(p->be, p->streams[i]);
    if (p->chk)
        reel_plan_check_abort(p);
    return reel_seterr(p->err, st, "%s", msg);
}

void reel_step_done(reel_plan *p, reel_fallback why, int32_t n, uint64_t steps)
{
    for (int i = 0; i < p->ninputs; i++)
        p->stash_rows[p->input_ids[i]] = -1;
    p->out_rows = n;
    p->last_fallback = why;
    p->st.steps += steps;
    if (why == REEL_FALLBACK_NONE) {
        p->st.replays += steps;
    } else {
        p->st.eager_steps += steps;
        p->st.eager_by_reason[why] += steps;
        reel_log(p->ctx, REEL_LOG_DEBUG, "step %llu: eager (%s), %d tokens", (unsigned long long)p->st.steps - 1,
                 reel_fallback_str(why), n);
    }
}

reel_status reel_step(reel_plan *p, const reel_step_info *info)
{
    if (!p || !info)
        return reel_seterr(p ? p->err : NULL, REEL_E_INVALID_ARG, "step: NULL plan or step info");
    reel_step_info si = REEL_STEP_INFO_INIT;   /* the caller's fields over the defaults */
    REEL_TRY(reel_struct_load(&si, info, &reel_abi_step_info, p->err));
    const reel_step_info *s = &si;
    p->timed_valid = false;
    step_need need = {0, 0};
    int b = -1;
    REEL_TRY(reel_step_check(p, s, &need));
    REEL_TRY(reel_plan_comm_poll(p));
    reel_fallback why;
    const reel_layout *L = NULL;
    REEL_TRY(reel_step_choose(p, s, &need, &why, &b, &L));
    size_t up = reel_staging_fill(p, L, s);
    reel_status st = run_step(p, L, b, why == REEL_FALLBACK_NONE, up, s->num_tokens);
    reel_plan_dev_spans_end(p, st == REEL_OK);
    if (st == REEL_OK && p->timer[0])
        st = p->be->vt->timer_elapsed_us(p->be, p->timer[0], p->timer[1], &p->last_device_us);
    if (st != REEL_OK)
        return reel_step_failed(p, st);
    p->timed_valid = p->timer[0] != NULL;
    reel_step_done(p, why, s->num_tokens, 1);
    if (p->chk)
        REEL_TRY(reel_plan_check_end(p));
    int32_t code = reel_staging_error_word(p);
    if (code != 0)
        return reel_staging_refused(p, code, L);
    return REEL_OK;
}
