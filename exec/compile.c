/* Compile: validate -> order -> streams -> kernel selection -> memory plan
 * per bucket -> allocation -> capture per bucket (largest first). Also the
 * eager issue path that capture records. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core/halloc.h"
#include "core/opts.h"
#include "memory/planner.h"
#include "memory/pinned.h"
#include "memory/workspace.h"
#include "backend/ctx.h"
#include "exec/plan.h"

#define ALIGN 256
static size_t align_up(size_t x, size_t a) { return (x + a - 1) & ~(a - 1); }

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static const char *tname(const reel_plan *p, uint32_t t) { return p->tensors[t].name; }

static const char *node_name(const reel_plan *p, int i, char *buf, size_t len)
{
    const reel_node *n = &p->nodes[i];
    snprintf(buf, len, "op '%s' (node %d -> '%s')", reel_op_schema_get(n->op)->name, i, tname(p, n->out[0]));
    return buf;
}

/* ---- options ------------------------------------------------------------ */

/* The size of the first sized form of reel_compile_opts (reel 0.1): no
 * caller's struct is shorter. Fields appended later are not counted here. */
#define COMPILE_OPTS_FIRST_SIZE (offsetof(reel_compile_opts, pdl) + sizeof(int))

/* The caller's options over the defaults, then what is left undefined
 * takes its default value. */
static reel_status check_opts(reel_plan *p, const reel_compile_opts *o)
{
    reel_compile_opts def = REEL_COMPILE_OPTS_INIT;
    p->opts = def;
    if (o)
        REEL_TRY(reel_opts_load(&p->opts, sizeof p->opts, o, COMPILE_OPTS_FIRST_SIZE, p->err, "compile",
                                "REEL_COMPILE_OPTS_INIT"));
    p->opts.num_buckets = reel_opt_int(p->opts.num_buckets, 0);
    p->opts.max_context = reel_opt_int(p->opts.max_context, 4096);
    p->opts.max_seqs = reel_opt_int(p->opts.max_seqs, 64);
    p->opts.strict = reel_opt_int(p->opts.strict, 0) != 0;
    p->opts.no_capture = reel_opt_int(p->opts.no_capture, 0) != 0;
    p->opts.check_hazards = reel_opt_int(p->opts.check_hazards, 0) != 0;
    p->opts.pdl = reel_opt_int(p->opts.pdl, 0) != 0;
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

/* ---- graph copy, order, kernel choice ------------------------------------ */

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
                               tname(p, (uint32_t)t), (long long)reel_shape_row_numel(sh));
    }
    return REEL_OK;
}

static void node_shapes(const reel_plan *p, int i, int64_t rows, reel_shape *in, reel_shape *out)
{
    const reel_node *n = &p->nodes[i];
    for (int k = 0; k < n->nin; k++) {
        memset(&in[k], 0, sizeof in[k]);
        if (n->in[k]) {
            in[k] = p->tensors[n->in[k]].shape;
            if (in[k].tokens)
                in[k].dims[0] = rows;
        }
    }
    for (int k = 0; k < n->nout; k++) {
        out[k] = p->tensors[n->out[k]].shape;
        if (out[k].tokens)
            out[k].dims[0] = rows;
    }
}

static reel_status select_kernels(reel_plan *p)
{
    char buf[160];
    int64_t rows = p->buckets[p->nbuckets - 1];
    p->impl = reel_hcalloc((size_t)p->nnodes + 1, sizeof *p->impl);
    if (!p->impl)
        return reel_seterr(p->err, REEL_E_OOM, "compile: out of host memory");
    p->plan_reason = p->opts.no_capture ? REEL_FALLBACK_NO_BUCKET : REEL_FALLBACK_NONE;
    p->block_size = 0;
    for (int i = 0; i < p->nnodes; i++) {
        const reel_node *n = &p->nodes[i];
        reel_shape in[REEL_OP_MAX_IN], out[REEL_OP_MAX_OUT];
        node_shapes(p, i, rows, in, out);
        p->impl[i] = reel_registry_select(p->be->kind, n->op, in, n->nin, out, &n->attrs, &p->be->caps);
        if (!p->impl[i])
            return reel_seterr(p->err, REEL_E_UNSUPPORTED, "%s: no kernel of backend '%s' accepts its shapes/dtypes",
                               node_name(p, i, buf, sizeof buf), reel_backend_name(p->be->kind));
        bool capturable = p->impl[i]->capturable && p->dbg.not_capturable_node != i;
        if (!capturable && p->plan_reason == REEL_FALLBACK_NONE) {
            if (p->opts.strict)
                return reel_seterr(p->err, REEL_E_UNSUPPORTED,
                                   "%s: kernel '%s' cannot be captured, and the plan is strict",
                                   node_name(p, i, buf, sizeof buf), p->impl[i]->name);
            p->plan_reason = REEL_FALLBACK_OP_NOT_CAPTURABLE;
        }
        if (n->op == REEL_OP_TOPK && n->attrs.topk.has_page_table)
            p->checks_limits = true;
        if (n->op == REEL_OP_PAGED_ATTENTION) {
            p->checks_limits = true;
            if (!p->impl[i]->fixed_context)
                return reel_seterr(p->err, REEL_E_UNSUPPORTED,
                                   "%s: kernel '%s' does not honour fixed-context metadata limits",
                                   node_name(p, i, buf, sizeof buf), p->impl[i]->name);
            const reel_attn_params *a = &n->attrs.attn.p;
            const reel_shape *kc = &p->tensors[n->in[3]].shape;
            int64_t slots = kc->dims[0] * kc->dims[1];
            p->has_attention = true;
            if (!p->block_size || a->block_size < p->block_size)
                p->block_size = a->block_size;
            if (!p->kv_slots || slots < p->kv_slots) {
                p->kv_slots = (int32_t)(slots > INT32_MAX ? INT32_MAX : slots);
                p->kv_blocks = (int32_t)kc->dims[0];
            }
        }
    }
    if (!p->block_size)
        p->block_size = 1;
    return REEL_OK;
}

/* ---- streams and events -------------------------------------------------- */

static reel_status make_streams(reel_plan *p)
{
    const reel_backend_vt *vt = p->be->vt;
    p->nstreams = 1;
    for (int i = 0; i < p->nnodes; i++)
        if (p->nodes[i].stream + 1 > p->nstreams)
            p->nstreams = p->nodes[i].stream + 1;
    p->first_on_stream = reel_hcalloc(REEL_MAX_STREAMS, sizeof(int));
    p->last_on_stream = reel_hcalloc(REEL_MAX_STREAMS, sizeof(int));
    p->node_ev = reel_hcalloc((size_t)p->nnodes + 1, sizeof *p->node_ev);
    if (!p->first_on_stream || !p->last_on_stream || !p->node_ev)
        return reel_seterr(p->err, REEL_E_OOM, "compile: out of host memory");
    for (int s = 0; s < REEL_MAX_STREAMS; s++)
        p->first_on_stream[s] = p->last_on_stream[s] = -1;
    for (int i = 0; i < p->nnodes; i++) {
        int s = p->nodes[i].stream;
        if (p->first_on_stream[s] < 0)
            p->first_on_stream[s] = i;
        p->last_on_stream[s] = i;
    }
    for (int s = 0; s < p->nstreams; s++)
        REEL_TRY(vt->stream_create(p->be, &p->streams[s]));
    if (p->nstreams > 1) {
        REEL_TRY(vt->event_create(p->be, &p->fork_ev));
        for (int s = 1; s < p->nstreams; s++)
            REEL_TRY(vt->event_create(p->be, &p->join_ev[s]));
    }
    return REEL_OK;
}

/* ---- layouts -------------------------------------------------------------- */

static void layout_static(reel_plan *p, reel_layout *L, int32_t max_tokens, int32_t max_seqs, int32_t max_blocks)
{
    size_t off = 0;
    L->max_tokens = max_tokens;
    L->max_seqs = max_seqs;
    L->max_blocks = max_blocks;
    L->off_err = off;
    off += ALIGN;
    for (int t = 1; t < p->ntensors; t++) {
        if (p->tensors[t].kind != REEL_T_INPUT)
            continue;
        L->in_off[t] = off;
        off = align_up(off + reel_shape_bytes(&p->tensors[t].shape, max_tokens), ALIGN);
    }
    L->off_pos = off;
    off = align_up(off + 4 * (size_t)max_tokens, ALIGN);
    L->off_slot = off;
    off = align_up(off + 4 * (size_t)max_tokens, ALIGN);
    L->off_tseq = off;
    off = align_up(off + 4 * (size_t)max_tokens, ALIGN);
    L->off_ctx = off;
    off = align_up(off + 4 * (size_t)max_seqs, ALIGN);
    L->off_bt = off;
    off = align_up(off + 4 * (size_t)max_seqs * (size_t)max_blocks, ALIGN);
    L->stat_bytes = off;
}

/* Data edges (producer -> consumer), edges chaining the accessors of each
 * state tensor in schedule order (paged attention writes its KV cache), plus
 * a sink after every stream's last node, where outputs are read back.
 * last_state is scratch of ntensors ints. */
static int data_edges(const reel_plan *p, int *from, int *to, int *last_state)
{
    int ne = 0;
    for (int t = 0; t < p->ntensors; t++)
        last_state[t] = -1;
    for (int i = 0; i < p->nnodes; i++)
        for (int k = 0; k < p->nodes[i].nin; k++) {
            uint32_t t = p->nodes[i].in[k];
            int f = -1;
            if (t && p->tensors[t].kind == REEL_T_ACT)
                f = p->tensors[t].producer;
            else if (t && p->tensors[t].kind == REEL_T_STATE) {
                f = last_state[t];
                last_state[t] = i;
            }
            if (f < 0 || f == i)
                continue;
            if (from) {
                from[ne] = f;
                to[ne] = i;
            }
            ne++;
        }
    for (int s = 0; s < p->nstreams; s++)
        if (p->last_on_stream[s] >= 0) {
            if (from) {
                from[ne] = p->last_on_stream[s];
                to[ne] = p->nnodes;
            }
            ne++;
        }
    return ne;
}

/* Collects each ACT tensor's accesses (producer first, consumers, the sink
 * for outputs) into a planner problem. */
static reel_status layout_memplan(reel_plan *p, reel_layout *L, int64_t rows)
{
    reel_status st = REEL_E_OOM;
    int nn = p->nnodes + 1;
    int *bufidx = reel_hcalloc((size_t)p->ntensors, sizeof *bufidx);
    if (!bufidx)
        return reel_seterr(p->err, REEL_E_OOM, "compile: out of host memory planning %lld rows", (long long)rows);
    int ne = data_edges(p, NULL, NULL, bufidx);
    int *stream = reel_hcalloc((size_t)nn, sizeof *stream);
    int *from = reel_hcalloc((size_t)ne + 1, sizeof *from), *to = reel_hcalloc((size_t)ne + 1, sizeof *to);
    int *nacc = reel_hcalloc((size_t)p->ntensors, sizeof *nacc);
    int *acc = NULL;
    reel_mem_buf *bufs = reel_hcalloc((size_t)p->ntensors, sizeof *bufs);
    reel_mem_plan plan = {0};
    if (!stream || !from || !to || !bufidx || !nacc || !bufs)
        goto fail;
    for (int i = 0; i < p->nnodes; i++)
        stream[i] = p->nodes[i].stream;
    data_edges(p, from, to, bufidx);

    /* Count accesses per ACT tensor, then lay them out. */
    int total = 0;
    for (int i = 0; i < p->nnodes; i++)
        for (int k = 0; k < p->nodes[i].nin; k++)
            nacc[p->nodes[i].in[k]]++;
    for (int t = 1; t < p->ntensors; t++)
        if (p->tensors[t].kind == REEL_T_ACT)
            total += ++nacc[t] + 1; /* producer, sink */
    acc = reel_hcalloc((size_t)total + 1, sizeof *acc);
    if (!acc)
        goto fail;
    int nb = 0, pos = 0;
    for (int t = 1; t < p->ntensors; t++) {
        if (p->tensors[t].kind != REEL_T_ACT) {
            bufidx[t] = -1;
            continue;
        }
        bufidx[t] = nb;
        bufs[nb].size = reel_shape_bytes(&p->tensors[t].shape, rows);
        bufs[nb].acc = acc + pos;
        bufs[nb].inplace_src = -1;
        acc[pos] = p->tensors[t].producer;
        pos += nacc[t] + 1; /* producer, consumers, the sink */
        bufs[nb].nacc = 1;
        nb++;
    }
    for (int i = 0; i < p->nnodes; i++)
        for (int k = 0; k < p->nodes[i].nin; k++) {
            uint32_t t = p->nodes[i].in[k];
            if (t && bufidx[t] >= 0) {
                reel_mem_buf *b = &bufs[bufidx[t]];
                ((int *)b->acc)[b->nacc++] = i;
            }
        }
    for (int o = 0; o < p->noutputs; o++) {
        uint32_t t = p->outputs[o].tensor;
        if (bufidx[t] >= 0) {
            reel_mem_buf *b = &bufs[bufidx[t]];
            ((int *)b->acc)[b->nacc++] = p->nnodes;
        }
    }
    for (int i = 0; i < p->nnodes; i++) {
        const reel_node *n = &p->nodes[i];
        uint32_t src = n->in[0];
        bool other_use = false;
        for (int k = 1; k < n->nin; k++)
            other_use |= n->in[k] == src;
        if (p->impl[i]->inplace_ok && src && bufidx[src] >= 0 && !other_use &&
            reel_shape_bytes(&p->tensors[n->out[0]].shape, rows) <= bufs[bufidx[src]].size)
            bufs[bufidx[n->out[0]]].inplace_src = bufidx[src];
    }
    reel_mem_problem prob = {
        .nnodes = nn, .stream = stream, .nedges = ne, .edge_from = from, .edge_to = to,
        .nbufs = nb, .bufs = bufs, .alignment = ALIGN, .allow_new_edges = true,
    };
    st = reel_mem_plan_compute(&prob, &plan);
    if (st != REEL_OK) {
        reel_seterr(p->err, st, "compile: memory planner failed for %lld token rows", (long long)rows);
        goto fail;
    }
    for (int t = 1; t < p->ntensors; t++)
        if (bufidx[t] >= 0)
            L->act_off[t] = plan.offsets[bufidx[t]];
    L->arena_bytes = plan.arena;
    L->lower_bound = plan.lower_bound;
    L->node_bound = reel_mem_node_bound(&prob);

    /* Waits per node: producers on other streams, and the planner's edges. */
    L->new_wait_start = reel_hcalloc((size_t)p->nnodes + 2, sizeof(int));
    L->new_wait_from = reel_hcalloc((size_t)ne + (size_t)plan.nnew_edges + 1, sizeof(int));
    if (!L->new_wait_start || !L->new_wait_from) {
        st = REEL_E_OOM;
        goto fail;
    }
    int w = 0;
    for (int i = 0; i < p->nnodes; i++) {
        L->new_wait_start[i] = w;
        for (int e = 0; e < ne + plan.nnew_edges; e++) {
            int f = e < ne ? from[e] : plan.new_from[e - ne], d = e < ne ? to[e] : plan.new_to[e - ne];
            if (d != i || p->nodes[f].stream == p->nodes[i].stream || p->dbg.drop_waits_of == i + 1)
                continue;
            bool dup = false;
            for (int k = L->new_wait_start[i]; k < w; k++)
                dup |= L->new_wait_from[k] == f;
            if (!dup)
                L->new_wait_from[w++] = f;
        }
    }
    L->new_wait_start[p->nnodes] = w;
    L->rec = reel_hcalloc((size_t)p->nnodes + 1, 1);
    if (!L->rec) {
        st = REEL_E_OOM;
        goto fail;
    }
    for (int k = 0; k < w; k++)
        L->rec[L->new_wait_from[k]] = 1;
    st = REEL_OK;
fail:
    if (st == REEL_E_OOM)
        reel_seterr(p->err, st, "compile: out of host memory planning %lld rows", (long long)rows);
    reel_mem_plan_free(&plan);
    reel_hfree(stream);
    reel_hfree(from);
    reel_hfree(to);
    reel_hfree(bufidx);
    reel_hfree(nacc);
    reel_hfree(acc);
    reel_hfree(bufs);
    return st;
}

void *reel_plan_tensor_dev(const reel_plan *p, const reel_layout *L, uint32_t t)
{
    switch (p->tensors[t].kind) {
    case REEL_T_ACT: return L->arena + L->act_off[t];
    case REEL_T_INPUT: return L->stat_dev + L->in_off[t];
    case REEL_T_META: return L->stat_dev + L->off_pos;
    default: return p->tensor_ptr[t];
    }
}

/* Programmatic dependent launch for node i: asked for, on the device, the
 * kernel honours it, it is not its stream's first node and waits on no
 * other stream (an event wait keeps its full dependency). */
static bool use_pdl(const reel_plan *p, const reel_layout *L, int i)
{
    if (!p->opts.pdl || !p->be->caps.pdl || !p->impl[i]->pdl_ok || p->first_on_stream[p->nodes[i].stream] == i)
        return false;
    return L->new_wait_start[i] == L->new_wait_start[i + 1];
}

/* Points the layout at its memory and resolves every launch. */
static reel_status layout_bind(reel_plan *p, reel_layout *L, char *arena, char *stat_dev, char *stat_host)
{
    const int per = REEL_OP_MAX_IN + REEL_OP_MAX_OUT;
    L->arena = arena;
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
    };
    for (int i = 0; i < p->nnodes; i++) {
        const reel_node *n = &p->nodes[i];
        reel_launch *l = &L->launches[i];
        reel_shape *in = &L->shapes[i * per], *out = in + REEL_OP_MAX_IN;
        node_shapes(p, i, L->rows, in, out);
        memset(l, 0, sizeof *l);
        l->op = n->op;
        l->attrs = &n->attrs;
        l->in_shape = in;
        l->out_shape = out;
        l->rows = L->rows;
        l->meta = &L->meta;
        l->stream = p->streams[n->stream];
        for (int k = 0; k < n->nin; k++)
            l->in[k] = n->in[k] ? reel_plan_tensor_dev(p, L, n->in[k]) : NULL;
        for (int k = 0; k < n->nout; k++)
            l->out[k] = reel_plan_tensor_dev(p, L, n->out[k]);
        l->pdl = use_pdl(p, L, i);
    }
    return REEL_OK;
}

static reel_status layout_arrays(reel_plan *p, reel_layout *L)
{
    L->act_off = reel_hcalloc((size_t)p->ntensors, sizeof *L->act_off);
    L->in_off = reel_hcalloc((size_t)p->ntensors, sizeof *L->in_off);
    L->launches = reel_hcalloc((size_t)p->nnodes + 1, sizeof *L->launches);
    L->shapes = reel_hcalloc(((size_t)p->nnodes + 1) * (REEL_OP_MAX_IN + REEL_OP_MAX_OUT), sizeof *L->shapes);
    if (!L->act_off || !L->in_off || !L->launches || !L->shapes)
        return reel_seterr(p->err, REEL_E_OOM, "out of host memory for a memory layout");
    return REEL_OK;
}

void reel_layout_free(reel_plan *p, reel_layout *L, bool owns_memory)
{
    if (owns_memory) {
        if (L->arena_blk)
            reel_ws_free(p->ws, L->arena_blk);
        else if (L->arena)
            p->be->vt->dev_free(p->be, L->arena);
        if (L->stat_dev)
            p->be->vt->dev_free(p->be, L->stat_dev);
        if (L->stat_host)
            reel_pinned_free(p->pinned, L->stat_host);
    }
    reel_hfree(L->act_off);
    reel_hfree(L->in_off);
    reel_hfree(L->launches);
    reel_hfree(L->shapes);
    reel_hfree(L->new_wait_start);
    reel_hfree(L->new_wait_from);
    reel_hfree(L->rec);
    memset(L, 0, sizeof *L);
}

/* An overflow layout with its own memory, for an eager step past the fixed
 * limits (allocate = true), or a bucket layout sharing the plan's. */
reel_status reel_layout_build(reel_plan *p, reel_layout *L, int64_t rows, int32_t max_seqs, int32_t max_blocks,
                              bool allocate)
{
    const reel_backend_vt *vt = p->be->vt;
    memset(L, 0, sizeof *L);
    L->rows = rows;
    REEL_TRY(layout_arrays(p, L));
    layout_static(p, L, (int32_t)rows, max_seqs, max_blocks);
    /* Blocks of a large block size may hold more than INT32_MAX tokens:
     * no context can exceed that anyway. */
    int64_t max_context = (int64_t)max_blocks * p->block_size;
    L->max_context = max_context > INT32_MAX ? INT32_MAX : (int32_t)max_context;
    REEL_TRY(layout_memplan(p, L, rows));
    if (!allocate)
        return REEL_OK;
    char *arena = NULL, *sd = NULL, *sh = NULL;
    /* The arena comes from the workspace allocator on stream 0; every other
     * stream of the plan uses it too, so its free fences them all. */
    REEL_TRY(reel_ws_alloc(p->ws, p->streams[0], L->arena_bytes ? L->arena_bytes : ALIGN, &L->arena_blk));
    for (int s = 1; s < p->nstreams; s++)
        if (p->first_on_stream[s] >= 0)
            REEL_TRY(reel_ws_record_use(p->ws, L->arena_blk, p->streams[s]));
    arena = reel_ws_block_ptr(L->arena_blk);
    L->arena = arena;
    REEL_TRY(vt->dev_alloc(p->be, L->stat_bytes, (void **)&sd));
    L->stat_dev = sd;
    REEL_TRY(reel_pinned_alloc(p->pinned, L->stat_bytes, (void **)&sh));
    L->stat_host = sh;
    return layout_bind(p, L, arena, sd, sh);
}

/* ---- issue: the eager path, and what capture records ----------------------- */

reel_status reel_plan_ensure_events(reel_plan *p, const reel_layout *L)
{
    for (int i = 0; i < p->nnodes; i++)
        for (int k = L->new_wait_start[i]; k < L->new_wait_start[i + 1]; k++) {
            int f = L->new_wait_from[k];
            if (!p->node_ev[f])
                REEL_TRY(p->be->vt->event_create(p->be, &p->node_ev[f]));
        }
    return REEL_OK;
}

/* Event record and wait, told to the hazard checker when it listens. */
static reel_status ev_record(reel_plan *p, reel_event *e, int s, bool launch, bool feed)
{
    if (feed)
        REEL_TRY(reel_plan_check_record(p, e, s));
    return launch ? p->be->vt->event_record(p->be, e, p->streams[s]) : REEL_OK;
}

static reel_status ev_wait(reel_plan *p, int s, reel_event *e, bool launch, bool feed)
{
    if (feed)
        REEL_TRY(reel_plan_check_wait(p, s, e));
    return launch ? p->be->vt->stream_wait(p->be, p->streams[s], e) : REEL_OK;
}

reel_status reel_plan_issue_ex(reel_plan *p, const reel_layout *L, bool launch, bool feed)
{
    char buf[160];
    if (p->nstreams > 1) {
        REEL_TRY(ev_record(p, p->fork_ev, 0, launch, feed));
        for (int s = 1; s < p->nstreams; s++)
            if (p->first_on_stream[s] >= 0)
                REEL_TRY(ev_wait(p, s, p->fork_ev, launch, feed));
    }
    for (int i = 0; i < p->nnodes; i++) {
        int st = p->nodes[i].stream;
        for (int k = L->new_wait_start[i]; k < L->new_wait_start[i + 1]; k++) {
            /* reel_plan_ensure_events made one for every producer waited on. */
            REEL_INVARIANT(p->err, p->node_ev[L->new_wait_from[k]] != NULL);
            REEL_TRY(ev_wait(p, st, p->node_ev[L->new_wait_from[k]], launch, feed));
        }
        if (feed)
            REEL_TRY(reel_plan_check_node(p, L, i));
        if (launch) {
            reel_status rc = p->dbg.fail_launch_of == i + 1
                                 ? reel_seterr(p->err, REEL_E_BACKEND, "injected launch failure")
                                 : p->impl[i]->launch(p->be, &L->launches[i]);
            p->st.op_dispatches++;
            if (rc != REEL_OK)
                return reel_err_prefix(p->err, rc, "%s, kernel '%s'", node_name(p, i, buf, sizeof buf),
                                       p->impl[i]->name);
        }
        if (L->rec[i])
            REEL_TRY(ev_record(p, p->node_ev[i], st, launch, feed));
    }
    for (int s = 1; s < p->nstreams; s++)
        if (p->first_on_stream[s] >= 0) {
            REEL_TRY(ev_record(p, p->join_ev[s], s, launch, feed));
            REEL_TRY(ev_wait(p, 0, p->join_ev[s], launch, feed));
        }
    return REEL_OK;
}

reel_status reel_plan_issue(reel_plan *p, const reel_layout *L) { return reel_plan_issue_ex(p, L, true, false); }

/* ---- parameters and state -------------------------------------------------- */

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
        if (st != REEL_OK)
            return reel_seterr(p->err, st, "compile: cannot allocate %zu bytes for %s '%s'", bytes,
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

/* ---- capture --------------------------------------------------------------- */

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
static reel_status capture_all(reel_plan *p)
{
    const reel_backend_vt *vt = p->be->vt;
    double t0 = now_ms();
    if (p->plan_reason != REEL_FALLBACK_NONE) {
        for (int b = 0; b < p->nbuckets; b++)
            p->bucket_reason[b] = p->plan_reason;
        return REEL_OK;
    }
    /* Warm-up: one eager run of the largest bucket (kernels, handles and
     * workspaces initialise outside capture). Inputs are zero. */
    int top = p->nbuckets - 1;
    REEL_TRY(reel_plan_upload_padding(p, &p->bucket[top]));
    REEL_TRY(reel_plan_issue(p, &p->bucket[top]));
    REEL_TRY(vt->stream_sync(p->be, p->streams[0]));
    for (int b = top; b >= 0; b--) {
        reel_status st = capture_bucket(p, b);
        if (st == REEL_OK) {
            p->st.graphs_captured++;
            continue;
        }
        if (p->opts.strict)
            return st;
        p->bucket_reason[b] = REEL_FALLBACK_CAPTURE_FAILED;
        reel_clearerr(p->err);
    }
    p->st.capture_ms = now_ms() - t0;
    return REEL_OK;
}

/* Outputs come back into one pinned buffer: the error word, then each output
 * at `rows` rows. Grown (never shrunk) for eager steps past the buckets. */
reel_status reel_plan_out_reserve(reel_plan *p, int64_t rows)
{
    if (rows <= p->out_cap_rows)
        return REEL_OK;
    size_t off = ALIGN;
    for (int o = 0; o < p->noutputs; o++)
        off = align_up(off + reel_shape_bytes(&p->tensors[p->outputs[o].tensor].shape, rows), ALIGN);
    char *buf = NULL;
    if (p->dbg.fail_out_rows && rows >= p->dbg.fail_out_rows)
        return reel_seterr(p->err, REEL_E_OOM, "pinned alloc of %zu bytes: no page-locked memory (injected)", off);
    REEL_TRY(reel_pinned_alloc(p->pinned, off, (void **)&buf));
    /* Offsets change only with the buffer: a failed growth keeps the old
     * buffer and its offsets for the buckets' steps. */
    off = ALIGN;
    for (int o = 0; o < p->noutputs; o++) {
        p->out_off[o] = off;
        off = align_up(off + reel_shape_bytes(&p->tensors[p->outputs[o].tensor].shape, rows), ALIGN);
    }
    if (p->out_host)
        reel_pinned_free(p->pinned, p->out_host);
    p->out_host = buf;
    p->out_bytes = off;
    p->out_cap_rows = rows;
    return REEL_OK;
}

/* ---- rebinding state ------------------------------------------------------- */

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
        REEL_TRY(layout_bind(p, &p->bucket[b], p->arena, p->stat_dev, p->stat_host));
    if (p->over_valid) {
        reel_layout_free(p, &p->over, true);
        p->over_valid = false;
    }
    return recapture(p);
}

/* ---- compile ---------------------------------------------------------------- */

static reel_status build_buckets(reel_plan *p)
{
    const reel_backend_vt *vt = p->be->vt;
    int32_t top = p->buckets[p->nbuckets - 1];
    int32_t max_blocks = (p->opts.max_context + p->block_size - 1) / p->block_size;
    for (int b = 0; b < p->nbuckets; b++) {
        REEL_TRY(reel_layout_build(p, &p->bucket[b], p->buckets[b], p->opts.max_seqs, max_blocks, false));
        /* Every bucket shares the static region sized by the largest. */
        layout_static(p, &p->bucket[b], top, p->opts.max_seqs, max_blocks);
        p->bucket[b].max_context = p->opts.max_context;
        if (p->bucket[b].arena_bytes > p->arena_bytes)
            p->arena_bytes = p->bucket[b].arena_bytes;
        p->st.bucket_arena_bytes[b] = p->bucket[b].arena_bytes;
        p->st.bucket_lower_bound[b] = p->bucket[b].lower_bound;
        p->st.bucket_node_bound[b] = p->bucket[b].node_bound;
    }
    p->stat_bytes = p->bucket[0].stat_bytes;
    REEL_TRY(vt->dev_alloc(p->be, p->arena_bytes ? p->arena_bytes : ALIGN, (void **)&p->arena));
    REEL_TRY(vt->dev_alloc(p->be, p->stat_bytes, (void **)&p->stat_dev));
    REEL_TRY(reel_pinned_alloc(p->pinned, p->stat_bytes, (void **)&p->stat_host));
    for (int b = 0; b < p->nbuckets; b++) {
        REEL_TRY(layout_bind(p, &p->bucket[b], p->arena, p->stat_dev, p->stat_host));
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

static reel_status compile_steps(reel_plan *p, reel_graph *g, const reel_compile_opts *opts)
{
    REEL_TRY(check_opts(p, opts));
    REEL_TRY(reel_graph_validate(g));
    REEL_TRY(copy_graph(p, g));
    REEL_TRY(check_row_sizes(p));
    REEL_TRY(select_kernels(p));
    REEL_TRY(make_streams(p));
    REEL_TRY(alloc_tensors(p));
    REEL_TRY(reel_ws_create(p->be, &(reel_ws_opts){.policy = REEL_WS_DEFER_FREE}, &p->ws));
    REEL_TRY(reel_pinned_create(p->be, &p->pinned));
    REEL_TRY(build_buckets(p));
    REEL_TRY(capture_all(p));
    return reel_plan_check_open(p);
}

reel_status reel_compile_debug(reel_graph *g, const reel_compile_opts *opts, const reel_plan_debug *dbg,
                               reel_plan **out)
{
    if (!out)
        return REEL_E_INVALID_ARG;
    *out = NULL;
    if (!g)
        return REEL_E_INVALID_ARG;
    reel_plan *p = reel_hcalloc(1, sizeof *p);
    if (!p)
        return reel_seterr(reel_ctx_err(g->ctx), REEL_E_OOM, "compile: out of host memory");
    double t0 = now_ms();
    p->ctx = g->ctx;
    p->err = reel_ctx_err(g->ctx);
    p->be = g->ctx->be;
    if (dbg)
        p->dbg = *dbg;
    else
        p->dbg.not_capturable_node = -1;
    reel_status st = compile_steps(p, g, opts);
    if (st != REEL_OK) {
        reel_plan_destroy(p);
        return st;
    }
    p->st.num_buckets = p->nbuckets;
    memcpy(p->st.buckets, p->buckets, sizeof p->buckets);
    p->st.num_nodes = p->nnodes;
    p->st.num_streams = p->nstreams;
    p->st.compile_ms = now_ms() - t0;
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
    for (int s = 0; s < p->nstreams; s++)
        if (p->streams[s])
            vt->stream_sync(be, p->streams[s]);
    for (int b = 0; b < REEL_MAX_BUCKETS; b++) {
        if (p->graph[b])
            vt->graph_destroy(be, p->graph[b]);
        reel_layout_free(p, &p->bucket[b], false);
    }
    reel_layout_free(p, &p->over, true);
    reel_ws_destroy(p->ws);
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
    reel_hfree(p->out_off);
    reel_hfree(p->node_ev);
    reel_hfree(p->first_on_stream);
    reel_hfree(p->last_on_stream);
    reel_hfree(p->impl);
    reel_hfree(p->tensors);
    reel_hfree(p->nodes);
    reel_hfree(p->outputs);
    reel_hfree(p);
}
