/* A serving step: validate -> choose replay or eager (with a reason) ->
 * build metadata into pinned staging once -> one upload -> replay or issue
 * -> download outputs and the kernels' error word. */
#include <stdio.h>
#include <string.h>

#include "core/halloc.h"
#include "memory/workspace.h"
#include "backend/ctx.h"
#include "exec/plan.h"

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

static int find_tensor(const reel_plan *p, const char *name, reel_tensor_kind kind)
{
    for (int t = 1; t < p->ntensors; t++)
        if (p->tensors[t].kind == kind && strcmp(p->tensors[t].name, name) == 0)
            return t;
    return -1;
}

/* ---- inputs, parameters, state ------------------------------------------ */

reel_status reel_plan_set_input(reel_plan *p, const char *name, const void *data, int64_t rows)
{
    if (!p || !name || !data)
        return reel_seterr(p ? p->err : NULL, REEL_E_INVALID_ARG, "set_input: NULL plan, name or data");
    int t = find_tensor(p, name, REEL_T_INPUT);
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
        memcpy(p->stat_host + p->bucket[0].in_off[t], data, bytes);
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
    int t = find_tensor(p, name, REEL_T_PARAM);
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

static reel_status state_io(reel_plan *p, const char *name, void *host, size_t bytes, bool write)
{
    const char *what = write ? "write_state" : "read_state";
    if (!p || !name || !host)
        return reel_seterr(p ? p->err : NULL, REEL_E_INVALID_ARG, "%s: NULL plan, name or buffer", what);
    int t = find_tensor(p, name, REEL_T_STATE);
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

/* ---- step validation ------------------------------------------------------- */

typedef struct step_need {
    int32_t max_ctx;     /* longest context of the step */
    int32_t max_blocks;  /* block-table entries the longest context needs */
} step_need;

/* Block-table entries a context of len tokens needs; in 64 bits, as len
 * may be close to INT32_MAX (len >= 1, bs >= 1: the result fits). */
static int32_t blocks_for(int32_t len, int32_t bs) { return (int32_t)(((int64_t)len + bs - 1) / bs); }

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

static reel_status check_seqs(reel_plan *p, const reel_step_info *s, step_need *need)
{
    int32_t n = s->num_tokens, bs = p->block_size;
    if (s->num_seqs < 1 || !s->query_start || !s->context_lens || !s->block_tables || !s->slot_mapping ||
        !s->positions)
        return reel_seterr(p->err, REEL_E_INVALID_ARG,
                           "step: the plan has paged attention: num_seqs >= 1 and query_start, positions, "
                           "slot_mapping, context_lens and block_tables are required");
    if (s->query_start[0] != 0 || s->query_start[s->num_seqs] != n)
        return reel_seterr(p->err, REEL_E_INVALID_ARG, "step: query_start must run from 0 to num_tokens (%d)", n);
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
        int32_t blocks = blocks_for(len, bs);
        if (blocks > s->block_table_stride)
            return reel_seterr(p->err, REEL_E_INVALID_ARG,
                               "step: sequence %d needs %d blocks for context %d, block_table_stride is %d", q, blocks,
                               len, s->block_table_stride);
        for (int32_t j = 0; j < blocks; j++) {
            int32_t blk = s->block_tables[(size_t)q * s->block_table_stride + j];
            if (blk < 0 || blk >= p->kv_blocks)
                return reel_seterr(p->err, REEL_E_INVALID_ARG,
                                   "step: sequence %d block table entry %d is %d, the KV cache has %d blocks", q, j,
                                   blk, p->kv_blocks);
        }
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
    for (int32_t t = 0; t < n; t++)
        if (s->slot_mapping[t] < -1 || s->slot_mapping[t] >= p->kv_slots)
            return reel_seterr(p->err, REEL_E_INVALID_ARG, "step: token %d slot %d outside the KV cache (%d slots)", t,
                               s->slot_mapping[t], p->kv_slots);
    return REEL_OK;
}

static reel_status check_step(reel_plan *p, const reel_step_info *s, step_need *need)
{
    if (s->num_tokens <= 0 || s->num_tokens > (1 << 24))
        return reel_seterr(p->err, REEL_E_INVALID_ARG, "step: num_tokens %d outside 1..2^24", s->num_tokens);
    if (s->num_seqs < 0)
        return reel_seterr(p->err, REEL_E_INVALID_ARG, "step: num_seqs %d is negative", s->num_seqs);
    REEL_TRY(check_inputs(p, s->num_tokens));
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

/* ---- dispatch decision --------------------------------------------------- */

static int bucket_for(const reel_plan *p, int32_t n)
{
    for (int b = 0; b < p->nbuckets; b++)
        if (p->buckets[b] >= n)
            return b;
    return -1;
}

/* The dispatcher's guard: can this step replay, and if not, why. */
static reel_fallback decide(const reel_plan *p, const reel_step_info *s, const step_need *need, int *bucket)
{
    *bucket = bucket_for(p, s->num_tokens);
    if (*bucket < 0)
        return REEL_FALLBACK_TOKENS_OVER_LIMIT;
    if (p->has_attention && s->num_seqs > p->opts.max_seqs)
        return REEL_FALLBACK_SEQS_OVER_LIMIT;
    if (need->max_ctx > p->opts.max_context && !p->dbg.skip_dispatch_guard)
        return REEL_FALLBACK_CONTEXT_OVER_LIMIT;
    if (p->plan_reason != REEL_FALLBACK_NONE)
        return p->plan_reason;
    return p->bucket_reason[*bucket];
}

/* ---- metadata builder -------------------------------------------------------- */

static void fill_i32(int32_t *dst, int32_t v, int64_t count)
{
    for (int64_t i = 0; i < count; i++)
        dst[i] = v;
}

/* Writes the whole step into L's pinned staging: inputs padded with zero
 * rows, metadata padded harmlessly (slot -1, sequence -1). Returns the bytes
 * to upload. s may be NULL: an empty step (warm-up). */
static size_t build_meta(reel_plan *p, const reel_layout *L, const reel_step_info *s)
{
    char *h = L->stat_host;
    int32_t n = s ? s->num_tokens : 0, ns = s && p->has_attention ? s->num_seqs : 0;
    int64_t rows = L->rows;
    *(int32_t *)(h + L->off_err) = 0;
    for (int i = 0; i < p->ninputs; i++) {
        uint32_t t = p->input_ids[i];
        const reel_tinfo *ti = &p->tensors[t];
        size_t used = s ? reel_shape_bytes(&ti->shape, ti->shape.tokens ? n : 1) : 0;
        size_t all = reel_shape_bytes(&ti->shape, ti->shape.tokens ? rows : 1);
        const char *src = p->staged[t] ? p->stat_host + p->bucket[0].in_off[t] : p->stash[t];
        if (used && src != h + L->in_off[t])
            memcpy(h + L->in_off[t], src, used);
        memset(h + L->in_off[t] + used, 0, all - used);
    }
    int32_t *pos = (int32_t *)(h + L->off_pos), *slot = (int32_t *)(h + L->off_slot);
    int32_t *tseq = (int32_t *)(h + L->off_tseq), *ctx = (int32_t *)(h + L->off_ctx);
    int32_t *bt = (int32_t *)(h + L->off_bt);
    if (s && s->positions)
        memcpy(pos, s->positions, 4 * (size_t)n);
    else
        fill_i32(pos, 0, n);
    fill_i32(pos + n, 0, rows - n);
    if (s && s->slot_mapping)
        memcpy(slot, s->slot_mapping, 4 * (size_t)n);
    else
        fill_i32(slot, -1, n);
    fill_i32(slot + n, -1, rows - n);
    fill_i32(tseq, -1, rows);
    for (int32_t q = 0; q < ns; q++) {
        fill_i32(tseq + s->query_start[q], q, s->query_start[q + 1] - s->query_start[q]);
        ctx[q] = s->context_lens[q];
        int32_t blocks = blocks_for(s->context_lens[q], p->block_size);
        if (blocks > L->max_blocks)
            blocks = L->max_blocks; /* only with skip_dispatch_guard: the kernel refuses it */
        memcpy(bt + (size_t)q * L->max_blocks, s->block_tables + (size_t)q * s->block_table_stride,
               4 * (size_t)blocks);
    }
    return L->off_bt + 4 * (size_t)ns * (size_t)L->max_blocks;
}

reel_status reel_plan_upload_padding(reel_plan *p, const reel_layout *L)
{
    size_t bytes = build_meta(p, L, NULL);
    REEL_TRY(p->be->vt->copy(p->be, p->streams[0], L->stat_dev, L->stat_host, bytes, REEL_COPY_H2D));
    return p->be->vt->stream_sync(p->be, p->streams[0]);
}

/* Grows a limit to want, or to twice have if that is more, within int32. */
static int32_t grow_i32(int32_t have, int32_t want)
{
    int64_t twice = 2 * (int64_t)have;
    if (want <= have)
        return have;
    return twice > want ? (twice > INT32_MAX ? INT32_MAX : (int32_t)twice) : want;
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
        rows = rows > L->rows ? (rows > 2 * L->rows ? rows : 2 * L->rows) : L->rows;
        seqs = grow_i32(L->max_seqs, seqs);
        blocks = grow_i32(L->max_blocks, blocks);
    }
    reel_layout_free(p, L, true);
    p->over_valid = false;
    reel_status st = reel_layout_build(p, L, rows, seqs, blocks, true);
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

/* ---- the step ------------------------------------------------------------------ */

static reel_status download(reel_plan *p, const reel_layout *L, int32_t n)
{
    reel_backend *be = p->be;
    reel_stream *s0 = p->streams[0];
    /* Only kernels that check limits write the error word: without them the
     * step saves a copy. */
    if (p->checks_limits)
        REEL_TRY(be->vt->copy(be, s0, p->out_host, L->stat_dev + L->off_err, sizeof(int32_t), REEL_COPY_D2H));
    else
        *(int32_t *)p->out_host = 0;
    for (int o = 0; o < p->noutputs; o++) {
        uint32_t t = p->outputs[o].tensor;
        const reel_shape *sh = &p->tensors[t].shape;
        size_t bytes = reel_shape_bytes(sh, sh->tokens ? n : 1);
        REEL_TRY(be->vt->copy(be, s0, p->out_host + p->out_off[o], reel_plan_tensor_dev(p, L, t), bytes,
                              REEL_COPY_D2H));
    }
    return be->vt->stream_sync(be, s0);
}

/* The error word says a kernel refused; the kernels that check limits are
 * paged attention and top-k's page transform: name them. */
static reel_status kernel_refused(reel_plan *p, int32_t code, const reel_layout *L)
{
    char ops[256] = "";
    size_t len = 0;
    for (int i = 0; i < p->nnodes && len + 80 < sizeof ops; i++) {
        reel_op_kind k = p->nodes[i].op;
        if (k != REEL_OP_PAGED_ATTENTION && !(k == REEL_OP_TOPK && p->nodes[i].attrs.topk.has_page_table))
            continue;
        len += (size_t)snprintf(ops + len, sizeof ops - len, "%s'%s' ('%s')", len ? " or " : "",
                                reel_op_schema_get(k)->name, p->tensors[p->nodes[i].out[0]].name);
    }
    if (code == REEL_E_LIMIT)
        return reel_seterr(p->err, REEL_E_LIMIT,
                           "step refused inside the graph: op %s saw a context, block or page beyond its limit "
                           "(max_context %d, %d blocks per sequence); outputs are invalid",
                           len ? ops : "(unknown)", L->max_context, L->max_blocks);
    return reel_seterr(p->err, code > 0 && code < REEL_STATUS_COUNT ? (reel_status)code : REEL_E_INTERNAL,
                       "step: a kernel reported %s", reel_status_str((reel_status)code));
}

/* Upload, replay or issue, download: the part of a step that puts work on
 * the streams. */
static reel_status run_step(reel_plan *p, const reel_layout *L, int b, bool replay, size_t up, int32_t n)
{
    reel_backend *be = p->be;
    bool feed = p->chk != NULL;
    if (feed)
        REEL_TRY(reel_plan_check_upload(p, L, up));
    REEL_TRY(be->vt->copy(be, p->streams[0], L->stat_dev, L->stat_host, up, REEL_COPY_H2D));
    if (replay) {
        if (feed)
            REEL_TRY(reel_plan_issue_ex(p, L, false, true));
        REEL_TRY(be->vt->graph_launch(be, p->graph[b], p->streams[0]));
    } else {
        REEL_TRY(reel_plan_issue_ex(p, L, true, feed));
    }
    REEL_TRY(download(p, L, n));
    if (feed)
        REEL_TRY(reel_plan_check_download(p, L, n));
    return REEL_OK;
}

/* A step that failed with work issued (a kernel, the replay, a copy) leaves
 * nothing in flight: otherwise the next step's staging writes and upload,
 * or an overflow layout freed by a growth or reel_plan_trim, would race
 * with the copies and kernels still queued on the streams (a side stream
 * that never joined stream 0). The first error's message is kept. */
static reel_status step_failed(reel_plan *p, reel_status st)
{
    char msg[REEL_ERRMSG_MAX];
    reel_err_copy(p->err, msg, sizeof msg);
    for (int i = 0; i < p->nstreams; i++)
        p->be->vt->stream_sync(p->be, p->streams[i]);
    if (p->chk)
        reel_plan_check_abort(p);
    return reel_seterr(p->err, st, "%s", msg);
}

reel_status reel_step(reel_plan *p, const reel_step_info *s)
{
    if (!p || !s)
        return reel_seterr(p ? p->err : NULL, REEL_E_INVALID_ARG, "step: NULL plan or step info");
    step_need need = {0, 0};
    int b = -1;
    REEL_TRY(check_step(p, s, &need));
    reel_fallback why = decide(p, s, &need, &b);
    if (why != REEL_FALLBACK_NONE && p->opts.strict)
        return reel_seterr(p->err, REEL_E_FALLBACK,
                           "step of %d tokens, %d sequences, context %d would run eagerly (%s; limits: %d tokens, "
                           "%d sequences, context %d) and the plan is strict",
                           s->num_tokens, s->num_seqs, need.max_ctx, reel_fallback_str(why),
                           p->buckets[p->nbuckets - 1], p->opts.max_seqs, p->opts.max_context);
    bool fits = b >= 0 && (!p->has_attention || s->num_seqs <= p->opts.max_seqs) &&
                (need.max_ctx <= p->opts.max_context || p->dbg.skip_dispatch_guard);
    if (!fits)
        REEL_TRY(overflow_layout(p, s, &need));
    const reel_layout *L = fits ? &p->bucket[b] : &p->over;
    size_t up = build_meta(p, L, s);
    reel_status st = run_step(p, L, b, why == REEL_FALLBACK_NONE, up, s->num_tokens);
    if (st != REEL_OK)
        return step_failed(p, st);
    for (int i = 0; i < p->ninputs; i++)
        p->stash_rows[p->input_ids[i]] = -1;
    p->out_rows = s->num_tokens;
    p->last_fallback = why;
    p->st.steps++;
    if (why == REEL_FALLBACK_NONE) {
        p->st.replays++;
    } else {
        p->st.eager_steps++;
        p->st.eager_by_reason[why]++;
    }
    if (p->chk)
        REEL_TRY(reel_plan_check_end(p));
    int32_t code = *(int32_t *)p->out_host;
    if (code != 0)
        return kernel_refused(p, code, L);
    return REEL_OK;
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

reel_status reel_plan_stats_get(const reel_plan *p, reel_plan_stats *out)
{
    if (!p || !out)
        return REEL_E_INVALID_ARG;
    *out = p->st;
    reel_ws_stats ws;
    reel_ws_get_stats(p->ws, &ws);
    out->workspace_bytes = ws.device;
    out->workspace_peak = ws.peak;
    return REEL_OK;
}

reel_status reel_plan_trim(reel_plan *p)
{
    if (!p)
        return REEL_E_INVALID_ARG;
    if (p->over_valid) {
        reel_layout_free(p, &p->over, true);
        p->over_valid = false;
    }
    return reel_ws_trim(p->ws);
}

reel_status reel_plan_placement(const reel_plan *p, int bucket, int i, reel_placement *out)
{
    if (!p || !out)
        return reel_seterr(p ? p->err : NULL, REEL_E_INVALID_ARG, "placement: NULL plan or output");
    if (bucket < 0 || bucket >= p->nbuckets || i < 0)
        return REEL_E_NOT_FOUND;
    int seen = 0;
    for (uint32_t t = 1; t < (uint32_t)p->ntensors; t++) {
        const reel_tinfo *ti = &p->tensors[t];
        if (ti->kind != REEL_T_ACT || seen++ != i)
            continue;
        const reel_layout *L = &p->bucket[bucket];
        out->name = ti->name;
        out->stream = p->nodes[ti->producer].stream;
        out->first = out->last = ti->producer;
        for (int n = 0; n < p->nnodes; n++)
            for (int k = 0; k < p->nodes[n].nin; k++)
                if (p->nodes[n].in[k] == t && n > out->last)
                    out->last = n;
        for (int o = 0; o < p->noutputs; o++)
            if (p->outputs[o].tensor == t)
                out->last = p->nnodes;
        out->offset = L->act_off[t];
        out->bytes = reel_shape_bytes(&ti->shape, L->rows);
        return REEL_OK;
    }
    return REEL_E_NOT_FOUND;
}
