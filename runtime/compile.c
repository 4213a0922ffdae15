/* Compile: options -> validate -> copy and order the graph -> kernel
 * selection -> streams and events (schedule.c) -> parameters and states ->
 * a memory layout per bucket (layout.c, staging.c) -> allocation -> warm-up
 * and capture per bucket, largest first (capture.c). */
#include <stddef.h>
#include <string.h>

#include "core/halloc.h"
#include "core/opts.h"
#include "core/abi.h"
#include "runtime/fuse.h"
#include "runtime/plan.h"
#include "memory/pinned.h"
#include "memory/workspace.h"
#include "parallel/parallel.h"

/* The caller's options over the defaults, then what is left undefined
 * takes its default value. */
/* Expert ids reach moe_align from a moe_route of the same experts (in
 * range by construction) or from a graph input, which the step checks on
 * the host before launch (runtime/step.c): an id out of range is then never
 * seen first on the device, after earlier ops wrote their states. Anything
 * else is refused. The kernel keeps its own check, read back as the error
 * word. */
static reel_status moe_ids_checked(reel_plan *p, int i)
{
    const reel_node *n = &p->nodes[i];
    const reel_tinfo *ids = &p->tensors[n->in[0]];
    p->checks_limits = true;
    if (ids->kind == REEL_T_INPUT) {
        p->host_checks = true;
        return REEL_OK;
    }
    for (int j = 0; j < p->nnodes; j++) {
        const reel_node *r = &p->nodes[j];
        if (r->op == REEL_OP_MOE_ROUTE && r->out[0] == n->in[0] &&
            r->attrs.moe.num_experts == n->attrs.moe.num_experts)
            return REEL_OK;
    }
    char buf[160];
    return reel_seterr(p->err, REEL_E_UNSUPPORTED,
                       "%s: expert ids '%s' come neither from a moe_route of its %d experts nor from a graph input; "
                       "the step could not know them in range before launch",
                       reel_plan_node_name(p, i, buf, sizeof buf), ids->name, n->attrs.moe.num_experts);
}

static reel_status check_opts(reel_plan *p, const reel_compile_opts *o)
{
    reel_compile_opts def = REEL_COMPILE_OPTS_INIT;
    p->opts = def;
    if (o)
        REEL_TRY(reel_struct_load(&p->opts, o, &reel_abi_compile_opts, p->err));
    p->opts.num_buckets = reel_opt_int(p->opts.num_buckets, 0);
    p->opts.max_context = reel_opt_int(p->opts.max_context, 4096);
    p->opts.max_seqs = reel_opt_int(p->opts.max_seqs, 64);
    p->opts.strict = reel_opt_int(p->opts.strict, 0) != 0;
    p->opts.no_capture = reel_opt_int(p->opts.no_capture, 0) != 0;
    p->opts.check_hazards = reel_opt_int(p->opts.check_hazards, 0) != 0;
    /* pdl: 1 every kernel that honours it, 0 none, -1 (undefined) by grid size. */
    p->opts.pdl = p->opts.pdl == REEL_UNDEF_INT ? -1 : p->opts.pdl != 0;
    p->opts.no_fuse = reel_opt_int(p->opts.no_fuse, 0) != 0;
    if (p->opts.num_buckets == 0) {
        static const int32_t dflt[] = {1, 2, 4, 8, 16, 32, 64};
        p->opts.num_buckets = 7;
        memcpy(p->opts.buckets, dflt, sizeof dflt);
    }
    if (p->opts.num_buckets < 0 || p->opts.num_buckets > REEL_MAX_BUCKETS)
        return reel_seterr(p->err, REEL_E_INVALID_ARG, "num_buckets %d outside 1..%d", p->opts.num_buckets,
                           REEL_MAX_BUCKETS);
    for (int b = 0; b < p->opts.num_buckets; b++) {
        int32_t v = p->opts.buckets[b];
        if (v <= 0 || v > (1 << 20) || (b > 0 && v <= p->opts.buckets[b - 1]))
            return reel_seterr(p->err, REEL_E_INVALID_ARG,
                               "bucket %d (%d tokens): buckets must be positive, at most 2^20 and ascending", b, v);
    }
    if (p->opts.max_context <= 0 || p->opts.max_context > (1 << 24))
        return reel_seterr(p->err, REEL_E_INVALID_ARG, "max_context %d outside 1..2^24", p->opts.max_context);
    if (p->opts.max_seqs <= 0 || p->opts.max_seqs > (1 << 16))
        return reel_seterr(p->err, REEL_E_INVALID_ARG, "max_seqs %d outside 1..65536", p->opts.max_seqs);
    p->nbuckets = p->opts.num_buckets;
    memcpy(p->buckets, p->opts.buckets, sizeof p->buckets);
    return REEL_OK;
}

static reel_status copy_graph(reel_plan *p, const reel_graph *g)
{
    int *order = reel_hcalloc((size_t)g->nnodes + 1, sizeof *order);
    p->tensors = reel_hcalloc((size_t)g->ntensors, sizeof *p->tensors);
    p->nodes = reel_hcalloc((size_t)g->nnodes + 1, sizeof *p->nodes);
    p->outputs = reel_hcalloc((size_t)g->noutputs + 1, sizeof *p->outputs);
    if (!order || !p->tensors || !p->nodes || !p->outputs) {
        reel_hfree(order);
        return reel_seterr(p->err, REEL_E_OOM, "compile: out of host memory copying the graph");
    }
    reel_status st = reel_graph_topo_order(g, order);
    if (st != REEL_OK) {
        reel_hfree(order);
        return st;
    }
    p->ntensors = g->ntensors;
    memcpy(p->tensors, g->tensors, sizeof *p->tensors * (size_t)g->ntensors);
    p->nnodes = g->nnodes;
    for (int i = 0; i < g->nnodes; i++) {
        p->nodes[i] = g->nodes[order[i]];
        for (int o = 0; o < p->nodes[i].nout; o++)
            p->tensors[p->nodes[i].out[o]].producer = i;
    }
    p->noutputs = g->noutputs;
    memcpy(p->outputs, g->outputs, sizeof *p->outputs * (size_t)g->noutputs);
    reel_hfree(order);
    return REEL_OK;
}

/* Steps take up to 2^24 tokens and an overflow layout grows to less than
 * twice that: every token tensor's bytes at 2^25 rows must fit in 64 bits
 * (with the builder's margin of 16), or sizes wrap to small arenas that
 * kernels then overrun. The builder bounds only the dims it knows. */
static reel_status check_row_sizes(reel_plan *p)
{
    const int64_t max_row = (INT64_MAX / 16) >> 25;
    for (int t = 1; t < p->ntensors; t++) {
        const reel_shape *sh = &p->tensors[t].shape;
        if (sh->tokens && reel_shape_row_numel(sh) > max_row)
            return reel_seterr(p->err, REEL_E_INVALID_ARG,
                               "compile: tensor '%s' has %lld elements per token row, more than reel sizes (2^34)",
                               reel_plan_tname(p, (uint32_t)t), (long long)reel_shape_row_numel(sh));
    }
    return REEL_OK;
}

/* Records one attention op's cache geometry unless an earlier op has it. */
static void add_kv_geom(reel_plan *p, int32_t block_size, int64_t blocks, int64_t slots, int node)
{
    int32_t nb = (int32_t)(blocks > INT32_MAX ? INT32_MAX : blocks);
    for (int k = 0; k < p->nkv; k++)
        if (p->kv[k].block_size == block_size && p->kv[k].blocks == nb)
            return;
    p->kv[p->nkv++] = (reel_kv_geom){.block_size = block_size, .blocks = nb, .slots = slots, .node = node};
}

static reel_status select_kernels(reel_plan *p)
{
    char buf[160];
    int64_t rows = p->buckets[p->nbuckets - 1];
    p->impl = reel_hcalloc((size_t)p->nnodes + 1, sizeof *p->impl);
    p->kv = reel_hcalloc((size_t)p->nnodes + 1, sizeof *p->kv);
    if (!p->impl || !p->kv)
        return reel_seterr(p->err, REEL_E_OOM, "compile: out of host memory");
    p->plan_reason = p->opts.no_capture ? REEL_FALLBACK_NO_BUCKET : REEL_FALLBACK_NONE;
    p->block_size = 0;
    for (int i = 0; i < p->nnodes; i++) {
        const reel_node *n = &p->nodes[i];
        reel_shape in[REEL_OP_MAX_IN], out[REEL_OP_MAX_OUT];
        reel_plan_node_shapes(p, i, rows, in, out);
        p->impl[i] = reel_registry_select(p->be->kind, n->op, in, n->nin, out, &n->attrs, &p->be->caps);
        if (!p->impl[i])
            return reel_seterr(p->err, REEL_E_UNSUPPORTED, "%s: no kernel of backend '%s' accepts its shapes/dtypes",
                               reel_plan_node_name(p, i, buf, sizeof buf), reel_backend_name(p->be->kind));
        bool capturable = p->impl[i]->capturable && p->dbg.not_capturable_node != i;
        if (!capturable && p->plan_reason == REEL_FALLBACK_NONE) {
            if (p->opts.strict)
                return reel_seterr(p->err, REEL_E_UNSUPPORTED,
                                   "%s: kernel '%s' cannot be captured, and the plan is strict",
                                   reel_plan_node_name(p, i, buf, sizeof buf), p->impl[i]->name);
            p->plan_reason = REEL_FALLBACK_OP_NOT_CAPTURABLE;
        }
        if (n->op == REEL_OP_TOPK && n->attrs.topk.has_page_table) {
            /* The step checks the page table on the host before launch (a
             * refusal seen only inside the graph would come after earlier
             * ops wrote their states): it must be data the host has. */
            const reel_tinfo *pt = &p->tensors[n->in[2]];
            if (pt->kind != REEL_T_INPUT)
                return reel_seterr(p->err, REEL_E_UNSUPPORTED,
                                   "%s: page table '%s' is not a graph input; the step checks every page table "
                                   "on the host before launch, so it must be one (reel_input)",
                                   reel_plan_node_name(p, i, buf, sizeof buf), pt->name);
            p->checks_limits = true;
            p->host_checks = true;
        }
        if (n->op == REEL_OP_MOE_ALIGN)
            REEL_TRY(moe_ids_checked(p, i));
        if (n->op == REEL_OP_PAGED_ATTENTION) {
            p->checks_limits = true;
            if (!p->impl[i]->fixed_context)
                return reel_seterr(p->err, REEL_E_UNSUPPORTED,
                                   "%s: kernel '%s' does not honour fixed-context metadata limits",
                                   reel_plan_node_name(p, i, buf, sizeof buf), p->impl[i]->name);
            const reel_attn_params *a = &n->attrs.attn.p;
            const reel_shape *kc = &p->tensors[n->in[3]].shape;
            int64_t slots = kc->dims[0] * kc->dims[1];
            p->has_attention = true;
            /* The one-kernel decode's counters: one per (token, kv head,
             * head group of 16) of a launch of up to REEL_ATTN_ONE_KERNEL_ROWS
             * tokens (no more than the largest bucket), a set per stream, at
             * most REEL_ATTN_CNT_MAX_WORDS: launches of more tokens than
             * that holds take the two-kernel path (ops/op.h). */
            int64_t groups = (int64_t)a->num_kv_heads * ((a->num_heads / (a->num_kv_heads > 0 ? a->num_kv_heads : 1) + 15) / 16);
            int64_t toks = rows < REEL_ATTN_ONE_KERNEL_ROWS ? rows : REEL_ATTN_ONE_KERNEL_ROWS;
            if (groups > 0 && toks * groups > REEL_ATTN_CNT_MAX_WORDS)
                toks = REEL_ATTN_CNT_MAX_WORDS / groups;
            int64_t words = toks * groups;
            if (words > p->attn_cnt_words)
                p->attn_cnt_words = (int32_t)words;
            p->nodes[i].attrs.attn.cnt_slot = n->stream;
            if (!p->block_size || a->block_size < p->block_size)
                p->block_size = a->block_size;
            add_kv_geom(p, a->block_size, kc->dims[0], slots, i);
        }
        if (n->op == REEL_OP_MLA_ATTENTION) {
            p->checks_limits = true;
            if (!p->impl[i]->fixed_context)
                return reel_seterr(p->err, REEL_E_UNSUPPORTED,
                                   "%s: kernel '%s' does not honour fixed-context metadata limits",
                                   reel_plan_node_name(p, i, buf, sizeof buf), p->impl[i]->name);
            const reel_shape *kc = &p->tensors[n->in[4]].shape;
            int bs = n->attrs.mla.block_size;
            p->has_attention = true;
            if (!p->block_size || bs < p->block_size)
                p->block_size = bs;
            add_kv_geom(p, bs, kc->dims[0], kc->dims[0] * kc->dims[1], i);
        }
    }
    if (!p->block_size)
        p->block_size = 1;
    return REEL_OK;
}

static reel_status alloc_tensors(reel_plan *p)
{
    const reel_backend_vt *vt = p->be->vt;
    reel_stream *s0 = p->streams[0];
    p->tensor_ptr = reel_hcalloc((size_t)p->ntensors, sizeof *p->tensor_ptr);
    p->param_written = reel_hcalloc((size_t)p->ntensors, sizeof *p->param_written);
    p->stash = reel_hcalloc((size_t)p->ntensors, sizeof *p->stash);
    p->stash_cap = reel_hcalloc((size_t)p->ntensors, sizeof *p->stash_cap);
    p->stash_rows = reel_hcalloc((size_t)p->ntensors, sizeof *p->stash_rows);
    p->state_borrowed = reel_hcalloc((size_t)p->ntensors, sizeof *p->state_borrowed);
    p->input_ids = reel_hcalloc((size_t)p->ntensors, sizeof *p->input_ids);
    p->staged = reel_hcalloc((size_t)p->ntensors, sizeof *p->staged);
    if (!p->tensor_ptr || !p->param_written || !p->stash || !p->stash_cap || !p->stash_rows || !p->state_borrowed ||
        !p->input_ids || !p->staged)
        return reel_seterr(p->err, REEL_E_OOM, "compile: out of host memory");
    for (int t = 1; t < p->ntensors; t++) {
        reel_tinfo *ti = &p->tensors[t];
        p->stash_rows[t] = -1;
        if (ti->kind == REEL_T_INPUT)
            p->input_ids[p->ninputs++] = (uint32_t)t;
        if (ti->kind != REEL_T_PARAM && ti->kind != REEL_T_STATE)
            continue;
        size_t bytes = reel_shape_bytes(&ti->shape, 0);
        reel_status st = vt->dev_alloc(p->be, bytes, &p->tensor_ptr[t]);
        if (st != REEL_OK) /* the backend's reason after the tensor's name */
            return reel_err_prefix(p->err, st, "compile: cannot allocate %zu bytes for %s '%s'", bytes,
                                   ti->kind == REEL_T_PARAM ? "parameter" : "state", ti->name);
        if (ti->kind == REEL_T_PARAM) {
            p->st.param_bytes += bytes;
            if (ti->bind) {
                REEL_TRY(vt->copy(p->be, s0, p->tensor_ptr[t], ti->bind, bytes, REEL_COPY_H2D));
                p->param_written[t] = true;
            } else {
                /* Deferred: zero until written, so the warm-up never reads garbage. */
                REEL_TRY(vt->fill(p->be, s0, p->tensor_ptr[t], 0, bytes));
                p->params_unwritten++;
            }
            ti->bind = NULL; /* borrowed until compile returns */
        } else {
            p->st.state_bytes += bytes;
            REEL_TRY(vt->fill(p->be, s0, p->tensor_ptr[t], 0, bytes));
        }
    }
    /* Parameter copies read the caller's memory: finish before returning. */
    return vt->stream_sync(p->be, s0);
}

/* Every bucket's layout (offsets only, nothing allocated yet). */
static reel_status lay_out_buckets(reel_plan *p)
{
    int32_t top = p->buckets[p->nbuckets - 1];
    int32_t max_blocks = (p->opts.max_context + p->block_size - 1) / p->block_size;
    for (int b = 0; b < p->nbuckets; b++) {
        /* Every bucket shares the static region sized by the largest. */
        double tb = reel_now_ms();
        REEL_TRY(reel_layout_build(p, &p->bucket[b], p->buckets[b], top, p->opts.max_seqs, max_blocks, false));
        reel_log(p->ctx, REEL_LOG_INFO, "compile: bucket %d (%d tokens) laid out in %.1f ms: arena %zu bytes (%d of %d)",
                 b, p->buckets[b], reel_now_ms() - tb, p->bucket[b].arena_bytes, b + 1, p->nbuckets);
        p->bucket[b].max_context = p->opts.max_context;
        if (p->bucket[b].arena_bytes > p->arena_bytes)
            p->arena_bytes = p->bucket[b].arena_bytes;
        p->st.bucket_arena_bytes[b] = p->bucket[b].arena_bytes;
        p->st.bucket_lower_bound[b] = p->bucket[b].lower_bound;
        p->st.bucket_node_bound[b] = p->bucket[b].node_bound;
    }
    p->stat_bytes = p->bucket[0].stat_bytes;
    return REEL_OK;
}

/* The arena, the step region and its staging, bound into every bucket. */
static reel_status alloc_buckets(reel_plan *p)
{
    const reel_backend_vt *vt = p->be->vt;
    int32_t top = p->buckets[p->nbuckets - 1];
    /* The backend's reason after what the bytes were for, like parameters and states. */
    size_t arena = p->arena_bytes ? p->arena_bytes : REEL_PLAN_ALIGN;
    reel_status st = vt->dev_alloc(p->be, arena, (void **)&p->arena);
    if (st != REEL_OK)
        return reel_err_prefix(p->err, st, "compile: cannot allocate %zu bytes for the activation arena (%d buckets, largest %d tokens)",
                               arena, p->nbuckets, top);
    st = vt->dev_alloc(p->be, p->stat_bytes, (void **)&p->stat_dev);
    if (st != REEL_OK)
        return reel_err_prefix(p->err, st, "compile: cannot allocate %zu bytes for the step region (step metadata, max_seqs %d, max_context %d)",
                               p->stat_bytes, p->opts.max_seqs, p->opts.max_context);
    st = reel_pinned_alloc(p->pinned, p->stat_bytes, (void **)&p->stat_host);
    if (st != REEL_OK)
        return reel_err_prefix(p->err, st, "compile: cannot allocate %zu bytes of pinned staging for the step region",
                               p->stat_bytes);
    for (int b = 0; b < p->nbuckets; b++) {
        REEL_TRY(reel_layout_bind(p, &p->bucket[b], p->arena, p->stat_dev, p->stat_host));
        REEL_TRY(reel_plan_ensure_events(p, &p->bucket[b]));
    }
    p->out_off = reel_hcalloc((size_t)p->noutputs + 1, sizeof *p->out_off);
    if (!p->out_off)
        return reel_seterr(p->err, REEL_E_OOM, "compile: out of host memory");
    REEL_TRY(reel_plan_out_reserve(p, top));
    p->st.arena_bytes = p->arena_bytes;
    p->st.static_bytes = p->stat_bytes;
    return REEL_OK;
}

/* Everything compile decides before it allocates: options, the graph's
 * passes, kernels, streams, every bucket's layout. */
static reel_status plan_steps(reel_plan *p, reel_graph *g, const reel_compile_opts *opts)
{
    REEL_TRY(check_opts(p, opts));
    reel_plan_comm_hold(p);
    double t0 = reel_now_ms();
    REEL_TRY(reel_graph_validate(g));
    REEL_TRY(copy_graph(p, g));
    REEL_TRY(reel_plan_index_tensors(p));
    REEL_TRY(check_row_sizes(p));
    /* Rope into attention first: its compaction renumbers node outputs
     * only, and the graph pass after it keeps the views' producers. */
    if (!p->dbg.no_fuse && !p->opts.no_fuse) {
        int fused = 0;
        REEL_TRY(reel_fuse_rope_attention(p, &fused));
    }
    REEL_TRY(reel_plan_fuse(p));
    REEL_TRY(reel_plan_index_tensors(p)); /* again: fusion rewired nodes and tensors */
    REEL_TRY(reel_par_check_plan(p->nodes, p->nnodes, p->tensors, p->comm, p->err, &p->dcp));
    REEL_TRY(select_kernels(p));
    REEL_TRY(reel_plan_comm_bind(p));
    REEL_TRY(reel_schedule_streams(p));
    reel_log(p->ctx, REEL_LOG_INFO, "compile: %d nodes on %d streams ordered, kernels chosen in %.1f ms", p->nnodes,
             p->nstreams, reel_now_ms() - t0);
    return lay_out_buckets(p);
}

static reel_status compile_steps(reel_plan *p, reel_graph *g, const reel_compile_opts *opts)
{
    REEL_TRY(plan_steps(p, g, opts));
    double t0 = reel_now_ms();
    REEL_TRY(reel_plan_budget(p));
    REEL_TRY(alloc_tensors(p));
    reel_log(p->ctx, REEL_LOG_INFO, "compile: parameters and states allocated (%zu + %zu bytes) in %.1f ms",
             p->st.param_bytes, p->st.state_bytes, reel_now_ms() - t0);
    REEL_TRY(reel_ws_create(p->be, &(reel_ws_opts){.policy = REEL_WS_DEFER_FREE}, &p->ws));
    REEL_TRY(reel_pinned_create(p->be, &p->pinned));
    REEL_TRY(alloc_buckets(p));
    REEL_TRY(reel_plan_comm_agree(p));
    REEL_TRY(reel_capture_all(p));
    return reel_plan_check_open(p);
}

reel_status reel_compile_estimate(reel_graph *g, const reel_compile_opts *opts, reel_plan_memory *out)
{
    if (!g || !out)
        return reel_seterr(g ? reel_ctx_err(g->ctx) : NULL, REEL_E_INVALID_ARG, "compile_estimate: %s is NULL",
                           !g ? "the graph" : "out");
    reel_plan *p = reel_hcalloc(1, sizeof *p);
    if (!p)
        return reel_seterr(reel_ctx_err(g->ctx), REEL_E_OOM, "compile_estimate: out of host memory");
    p->ctx = g->ctx;
    p->err = reel_ctx_err(g->ctx);
    p->be = g->ctx->be;
    p->dbg.not_capturable_node = -1;
    reel_status st = plan_steps(p, g, opts);
    if (st == REEL_OK)
        st = reel_plan_estimate(p, out);
    if (st == REEL_OK)
        reel_clearerr(p->err);
    p->comm_agreed = true;      /* an estimate never exchanges with its peers */
    reel_plan_destroy(p);
    return st;
}

reel_status reel_compile_debug(reel_graph *g, const reel_compile_opts *opts, const reel_plan_debug *dbg,
                               reel_plan **out)
{
    if (!out)
        return reel_seterr(g ? reel_ctx_err(g->ctx) : NULL, REEL_E_INVALID_ARG, "compile: out (the plan) is NULL");
    *out = NULL;
    if (!g)
        return reel_seterr(NULL, REEL_E_INVALID_ARG, "compile: the graph is NULL");
    reel_plan *p = reel_hcalloc(1, sizeof *p);
    if (!p)
        return reel_seterr(reel_ctx_err(g->ctx), REEL_E_OOM, "compile: out of host memory");
    double t0 = reel_now_ms();
    p->ctx = g->ctx;
    p->err = reel_ctx_err(g->ctx);
    p->be = g->ctx->be;
    if (dbg)
        p->dbg = *dbg;
    else
        p->dbg.not_capturable_node = -1;
    reel_status st = compile_steps(p, g, opts);
    if (st != REEL_OK) {
        reel_plan_comm_failed(p);
        reel_plan_destroy(p);
        return st;
    }
    p->st.num_buckets = p->nbuckets;
    memcpy(p->st.buckets, p->buckets, sizeof p->buckets);
    p->st.num_nodes = p->nnodes;
    p->st.num_streams = p->nstreams;
    p->st.compile_ms = reel_now_ms() - t0;
    reel_clearerr(p->err);
    *out = p;
    return REEL_OK;
}

reel_status reel_compile(reel_graph *g, const reel_compile_opts *opts, reel_plan **out)
{
    reel_plan_debug dbg = {.not_capturable_node = -1};
    return reel_compile_debug(g, opts, &dbg, out);
}

void reel_plan_destroy(reel_plan *p)
{
    if (!p)
        return;
    reel_backend *be = p->be;
    const reel_backend_vt *vt = be->vt;
    /* Collectives first, within the communicator's timeout (NCCL: aborted
     * past it), so that the syncs below cannot wait on a dead peer. */
    if (p->comm) {
        char msg[REEL_ERRMSG_MAX];
        reel_err_copy(p->err, msg, sizeof msg);
        for (int s = 0; s < p->nstreams; s++)
            if (p->streams[s])
                p->comm->vt->sync(p->comm, p->streams[s]);
        reel_seterr(p->err, REEL_OK, "%s", msg); /* destroy leaves the last message as it was */
    }
    for (int s = 0; s < p->nstreams; s++)
        if (p->streams[s])
            vt->stream_sync(be, p->streams[s]);
    reel_plan_loop_free(p);
    for (int b = 0; b < REEL_MAX_BUCKETS; b++) {
        if (p->graph[b])
            vt->graph_destroy(be, p->graph[b]);
        reel_layout_free(p, &p->bucket[b], false);
    }
    reel_layout_free(p, &p->over, true);
    reel_ws_destroy(p->ws);
    reel_plan_timers_free(p);
    reel_plan_trace_free(p);
    reel_plan_check_close(p);
    if (p->arena)
        vt->dev_free(be, p->arena);
    if (p->stat_dev)
        vt->dev_free(be, p->stat_dev);
    if (p->stat_host)
        reel_pinned_free(p->pinned, p->stat_host);
    if (p->out_host)
        reel_pinned_free(p->pinned, p->out_host);
    reel_pinned_destroy(p->pinned);
    for (int t = 0; p->tensor_ptr && t < p->ntensors; t++)
        if (p->tensor_ptr[t] && !p->state_borrowed[t])
            vt->dev_free(be, p->tensor_ptr[t]);
    for (int t = 0; p->stash && t < p->ntensors; t++)
        reel_hfree(p->stash[t]);
    for (int i = 0; p->node_ev && i < p->nnodes; i++)
        if (p->node_ev[i])
            vt->event_destroy(be, p->node_ev[i]);
    if (p->fork_ev)
        vt->event_destroy(be, p->fork_ev);
    for (int s = 0; s < REEL_MAX_STREAMS; s++) {
        if (p->join_ev[s])
            vt->event_destroy(be, p->join_ev[s]);
        if (p->streams[s])
            vt->stream_destroy(be, p->streams[s]);
    }
    reel_hfree(p->tensor_ptr);
    reel_hfree(p->state_borrowed);
    reel_hfree(p->param_written);
    reel_hfree(p->stash);
    reel_hfree(p->stash_cap);
    reel_hfree(p->stash_rows);
    reel_hfree(p->staged);
    reel_hfree(p->input_ids);
    reel_hfree(p->act_ids);
    reel_hfree(p->act_last);
    reel_hfree(p->leaves);
    reel_hfree(p->out_off);
    reel_hfree(p->node_ev);
    reel_hfree(p->first_on_stream);
    reel_hfree(p->last_on_stream);
    reel_hfree(p->impl);
    reel_hfree(p->fused);
    reel_hfree(p->kv);
    reel_hfree(p->tensors);
    reel_hfree(p->nodes);
    reel_hfree(p->outputs);
    reel_hfree(p->coll_desc);
    reel_plan_comm_release(p);
    reel_hfree(p);
}
