/* Staging: the one owner of the step region's layout. The static region
 * ([error word | attention counters | inputs | metadata], laid out here and nowhere else), the
 * metadata builder that fills its pinned mirror once a step (padded
 * harmlessly: slot -1, sequence -1, zero rows), the padding upload, the
 * pinned outputs and the download, and the kernels' error word. */
#include <stdio.h>
#include <string.h>

#include "runtime/plan.h"
#include "memory/pinned.h"

/* The static region of a layout: [error word | counters | inputs | positions | slots |
 * token->sequence | context lengths | block tables], each aligned, sized for
 * max_tokens rows, max_seqs sequences of max_blocks blocks. Only paged
 * attention reads slots, sequences, context lengths and block tables: a plan
 * without it gets none of them (the limits would otherwise size block tables
 * for ops that do not exist: gigabytes of pinned memory for one add).
 * Top-k's page table is an input of its own, sized with the inputs. */
void reel_staging_layout(reel_plan *p, reel_layout *L, int32_t max_tokens, int32_t max_seqs, int32_t max_blocks)
{
    size_t off = 0;
    size_t seq_tokens = p->has_attention ? (size_t)max_tokens : 0;
    size_t seqs = p->has_attention ? (size_t)max_seqs : 0, blocks = p->has_attention ? (size_t)max_blocks : 0;
    L->max_tokens = max_tokens;
    L->max_seqs = max_seqs;
    L->max_blocks = max_blocks;
    L->off_err = off;
    off += REEL_PLAN_ALIGN;
    /* The attention kernels' arrival counters, inside the uploaded prefix:
     * every step's upload starts them at zero (ops/op.h). */
    L->off_cnt = off;
    L->cnt_bytes = 4 * (size_t)p->attn_cnt_words * (size_t)p->nstreams;
    off = reel_align_up(off + L->cnt_bytes, REEL_PLAN_ALIGN);
    for (int t = 1; t < p->ntensors; t++) {
        if (p->tensors[t].kind != REEL_T_INPUT)
            continue;
        L->in_off[t] = off;
        off = reel_align_up(off + reel_shape_bytes(&p->tensors[t].shape, max_tokens), REEL_PLAN_ALIGN);
    }
    L->off_pos = off;
    off = reel_align_up(off + 4 * (size_t)max_tokens, REEL_PLAN_ALIGN);
    L->off_slot = off;
    off = reel_align_up(off + 4 * seq_tokens, REEL_PLAN_ALIGN);
    L->off_tseq = off;
    off = reel_align_up(off + 4 * seq_tokens, REEL_PLAN_ALIGN);
    L->off_ctx = off;
    off = reel_align_up(off + 4 * seqs, REEL_PLAN_ALIGN);
    L->off_bt = off;
    off = reel_align_up(off + 4 * seqs * blocks, REEL_PLAN_ALIGN);
    L->stat_bytes = off;
}

/* Points L at its static region (device, and its pinned staging mirror) and
 * fills the metadata view kernels read (attn_cnt_words: the plan's). */
void reel_staging_bind(reel_layout *L, char *stat_dev, char *stat_host, int32_t attn_cnt_words)
{
    L->stat_dev = stat_dev;
    L->stat_host = stat_host;
    L->meta = (reel_meta_view){
        .positions = (const int32_t *)(stat_dev + L->off_pos),
        .slot_mapping = (const int32_t *)(stat_dev + L->off_slot),
        .token_seq = (const int32_t *)(stat_dev + L->off_tseq),
        .context_lens = (const int32_t *)(stat_dev + L->off_ctx),
        .block_tables = (const int32_t *)(stat_dev + L->off_bt),
        .max_seqs = L->max_seqs,
        .max_blocks = L->max_blocks,
        .max_context = L->max_context,
        .err_word = (int32_t *)(stat_dev + L->off_err),
        .attn_cnt = attn_cnt_words > 0 ? (uint32_t *)(stat_dev + L->off_cnt) : NULL,
        .attn_cnt_words = attn_cnt_words,
    };
    /* Nothing writes the counters' staging: zero once, every upload copies it. */
    if (stat_host)
        memset(stat_host + L->off_cnt, 0, L->cnt_bytes);
}

/* The step metadata of the static region as one range (what paged
 * attention reads), for the hazard checker. */
void reel_staging_meta_range(const reel_layout *L, const char **dev, size_t *bytes)
{
    *dev = L->stat_dev + L->off_pos;
    *bytes = L->stat_bytes - L->off_pos;
}

char *reel_staging_input_slot(reel_plan *p, uint32_t t) { return p->stat_host + p->bucket[0].in_off[t]; }

/* The kernels' error word of the last step (in the pinned output buffer). */
int32_t reel_staging_error_word(const reel_plan *p) { return *(const int32_t *)p->out_host; }

static void fill_i32(int32_t *dst, int32_t v, int64_t count)
{
    for (int64_t i = 0; i < count; i++)
        dst[i] = v;
}

/* Writes the whole step into L's pinned staging: inputs padded with zero
 * rows, metadata padded harmlessly (slot -1, sequence -1). Returns the bytes
 * to upload. s may be NULL: an empty step (warm-up). */
size_t reel_staging_fill(reel_plan *p, const reel_layout *L, const reel_step_info *s)
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
        const char *src = p->staged[t] ? reel_staging_input_slot(p, t) : p->stash[t];
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
    if (!p->has_attention)
        return L->off_slot; /* positions are the only metadata */
    if (s && s->slot_mapping)
        memcpy(slot, s->slot_mapping, 4 * (size_t)n);
    else
        fill_i32(slot, -1, n);
    fill_i32(slot + n, -1, rows - n);
    fill_i32(tseq, -1, rows);
    for (int32_t q = 0; q < ns; q++) {
        fill_i32(tseq + s->query_start[q], q, s->query_start[q + 1] - s->query_start[q]);
        ctx[q] = s->context_lens[q];
        int32_t blocks = reel_blocks_for(reel_plan_local_len(p, s->context_lens[q]), p->block_size);
        if (blocks > L->max_blocks)
            blocks = L->max_blocks; /* only with skip_dispatch_guard: the kernel refuses it */
        memcpy(bt + (size_t)q * L->max_blocks, s->block_tables + (size_t)q * s->block_table_stride,
               4 * (size_t)blocks);
    }
    return L->off_bt + 4 * (size_t)ns * (size_t)L->max_blocks;
}

/* The step's one upload: the used prefix of the staging, on stream 0. */
reel_status reel_staging_upload(reel_plan *p, const reel_layout *L, size_t bytes)
{
    return p->be->vt->copy(p->be, p->streams[0], L->stat_dev, L->stat_host, bytes, REEL_COPY_H2D);
}

reel_status reel_plan_upload_padding(reel_plan *p, const reel_layout *L)
{
    size_t bytes = reel_staging_fill(p, L, NULL);
    REEL_TRY(reel_staging_upload(p, L, bytes));
    return p->be->vt->stream_sync(p->be, p->streams[0]);
}

/* Outputs come back into one pinned buffer: the error word, then each output
 * at `rows` rows. Grown (never shrunk) for eager steps past the buckets. */
reel_status reel_plan_out_reserve(reel_plan *p, int64_t rows)
{
    if (rows <= p->out_cap_rows)
        return REEL_OK;
    size_t off = REEL_PLAN_ALIGN;
    for (int o = 0; o < p->noutputs; o++)
        off = reel_align_up(off + reel_shape_bytes(&p->tensors[p->outputs[o].tensor].shape, rows), REEL_PLAN_ALIGN);
    char *buf = NULL;
    if (p->dbg.fail_out_rows && rows >= p->dbg.fail_out_rows)
        return reel_seterr(p->err, REEL_E_OOM, "pinned alloc of %zu bytes: no page-locked memory (injected)", off);
    REEL_TRY(reel_pinned_alloc(p->pinned, off, (void **)&buf));
    /* Offsets change only with the buffer: a failed growth keeps the old
     * buffer and its offsets for the buckets' steps. */
    off = REEL_PLAN_ALIGN;
    for (int o = 0; o < p->noutputs; o++) {
        p->out_off[o] = off;
        off = reel_align_up(off + reel_shape_bytes(&p->tensors[p->outputs[o].tensor].shape, rows), REEL_PLAN_ALIGN);
    }
    if (p->out_host)
        reel_pinned_free(p->pinned, p->out_host);
    p->out_host = buf;
    p->out_bytes = off;
    p->out_cap_rows = rows;
    return REEL_OK;
}

reel_status reel_staging_download(reel_plan *p, const reel_layout *L, int32_t n)
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
    /* The step's end on the device, before the host waits for it. */
    if (p->timer[1])
        REEL_TRY(be->vt->event_record(be, p->timer[1], s0));
    return be->vt->stream_sync(be, s0);
}

/* The error word says a kernel refused; the kernels that check limits are
 * paged attention and top-k's page transform: name them. */
reel_status reel_staging_refused(reel_plan *p, int32_t code, const reel_layout *L)
{
    char ops[256] = "";
    size_t len = 0;
    for (int i = 0; i < p->nnodes && len + 80 < sizeof ops; i++) {
        reel_op_kind k = p->nodes[i].op;
        if (!reel_op_is_paged(k) && !(k == REEL_OP_TOPK && p->nodes[i].attrs.topk.has_page_table) &&
            k != REEL_OP_MOE_ALIGN)
            continue;
        len += (size_t)snprintf(ops + len, sizeof ops - len, "%s'%s' ('%s')", len ? " or " : "",
                                reel_op_schema_get(k)->name, p->tensors[p->nodes[i].out[0]].name);
    }
    if (code == REEL_E_LIMIT)
        return reel_seterr(p->err, REEL_E_LIMIT,
                           "step refused inside the graph: op %s saw a context, block, page or expert beyond its limit "
                           "(max_context %d, %d blocks per sequence); outputs are invalid and states this step wrote stay "
                           "written (every limit is checked before launch: this one was not)",
                           len ? ops : "(unknown)", L->max_context, L->max_blocks);
    return reel_seterr(p->err, code > 0 && code < REEL_STATUS_COUNT ? (reel_status)code : REEL_E_INTERNAL,
                       "step: a kernel reported %s", reel_status_str((reel_status)code));
}
