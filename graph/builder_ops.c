/* Op nodes: operand checks, shape inference through the op's schema, and
 * the node and its output tensors. A refused op adds nothing. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/abi.h"
#include "graph/builder.h"

/* Appends "; x 'h' is [T,256] f32, w 'wq' is [512,1024] f32" for the
 * present operands, so every shape message names the tensors. */
static void describe_operands(const reel_graph *g, const reel_op_schema *sc, const uint32_t *in, char *buf,
                              size_t len)
{
    size_t at = strlen(buf);
    const char *sep = "; ";
    for (int i = 0; i < sc->nin && at < len; i++) {
        if (!in[i])
            continue;
        const reel_tinfo *t = &g->tensors[in[i]];
        char sh[64];
        int n = snprintf(buf + at, len - at, "%s%s '%s' is %s %s", sep, sc->in_names[i], t->name,
                         reel_shape_format(&t->shape, sh, sizeof sh), reel_dtype_name(t->shape.dtype));
        at += n > 0 ? (size_t)n : 0;
        sep = ", ";
    }
}

/* Checks the operand handles. REEL_OK, or the status to refuse with; an
 * invalid handle after an earlier failure is refused without a new error. */
static reel_status check_operands(reel_graph *g, const reel_op_schema *sc, const uint32_t *in, uint32_t optional)
{
    for (int i = 0; i < sc->nin; i++) {
        if (reel_graph_has(g, in[i]) || (in[i] == 0 && (optional & (1u << i))))
            continue;
        if (in[i] == 0 && g->err != REEL_OK)
            return g->err;
        if (in[i] == 0)
            return reel_graph_fail(g, REEL_E_INVALID_ARG,
                                   "op '%s' (node %d): input %d (%s) is an invalid tensor (from a failed call?)",
                                   sc->name, g->nnodes, i + 1, sc->in_names[i]);
        return reel_graph_fail(g, REEL_E_INVALID_ARG,
                               "op '%s' (node %d): input %d (%s) is tensor id %u, unknown to this graph "
                               "(a handle of another graph?)",
                               sc->name, g->nnodes, i + 1, sc->in_names[i], in[i]);
    }
    return REEL_OK;
}

/* The caches are written by the op: they must be states, never weights or
 * activations (which the planner may reuse). */
static reel_status caches_are_states(reel_graph *g, reel_op_kind op, const uint32_t *in)
{
    int first = op == REEL_OP_MLA_ATTENTION ? 4 : 3, last = 4;
    const reel_op_schema *sc = reel_op_schema_get(op);
    for (int i = first; i <= last; i++) {
        const reel_tinfo *t = &g->tensors[in[i]];
        if (t->kind != REEL_T_STATE)
            return reel_graph_fail(g, REEL_E_INVALID_ARG,
                                   "op '%s' (node %d): %s '%s' is %s %s, not a state", sc->name, g->nnodes,
                                   sc->in_names[i], t->name,
                                   t->kind == REEL_T_INPUT || t->kind == REEL_T_ACT ? "an" : "a",
                                   reel_tensor_kind_name(t->kind));
    }
    return REEL_OK;
}

/* Adds a node of kind op over inputs in (0 = absent optional input, allowed
 * where bit i of optional is set). Writes the output handles to outs. */
static reel_status add_node(reel_graph *g, reel_op_kind op, const uint32_t *in, uint32_t optional,
                            const reel_op_attrs *a, reel_tensor *outs)
{
    const reel_op_schema *sc = reel_op_schema_get(op);
    for (int i = 0; i < sc->nout; i++)
        outs[i] = (reel_tensor){ 0 };
    reel_status st = check_operands(g, sc, in, optional);
    if (st != REEL_OK)
        return st;
    if ((op == REEL_OP_PAGED_ATTENTION || op == REEL_OP_MLA_ATTENTION) && (st = caches_are_states(g, op, in)) != REEL_OK)
        return st;
    reel_shape ish[REEL_OP_MAX_IN] = { { 0 } }, osh[REEL_OP_MAX_OUT] = { { 0 } };
    for (int i = 0; i < sc->nin; i++)
        if (in[i])
            ish[i] = g->tensors[in[i]].shape;
    char why[REEL_ERRMSG_MAX] = "";
    st = sc->infer(ish, sc->nin, a, osh, why, sizeof why);
    if (st != REEL_OK) {
        describe_operands(g, sc, in, why, sizeof why);
        return reel_graph_fail(g, st, "op '%s' (node %d): %s", sc->name, g->nnodes, why);
    }
    /* Trailing outputs the inference left without dims are absent (paged
     * attention's lse): the node has fewer outputs than its schema. */
    int nout = sc->nout;
    while (nout > 1 && osh[nout - 1].ndim == 0)
        nout--;
    if (reel_graph_reserve(g, nout, 1) != REEL_OK)
        return reel_graph_fail(g, REEL_E_OOM, "op '%s' (node %d): out of host memory", sc->name, g->nnodes);
    int id = g->nnodes++;
    reel_node *n = &g->nodes[id];
    memset(n, 0, sizeof *n);
    n->op = op;
    n->attrs = *a;
    n->nin = sc->nin;
    n->nout = nout;
    memcpy(n->in, in, sizeof n->in);
    for (int i = 0; i < nout; i++) {
        char name[REEL_NAME_MAX];
        if (i == 0)
            snprintf(name, sizeof name, "%s#%d", sc->name, id);
        else
            snprintf(name, sizeof name, "%s#%d.%d", sc->name, id, i);
        uint32_t t = reel_graph_push_tensor(g, name, REEL_T_ACT, &osh[i]);
        g->tensors[t].producer = id;
        g->tensors[t].out_index = i;
        n->out[i] = t;
        outs[i] = (reel_tensor){ t };
    }
    return REEL_OK;
}

static reel_tensor node1(reel_graph *g, reel_op_kind op, uint32_t a0, uint32_t a1, const reel_op_attrs *a)
{
    reel_tensor out = { 0 };
    if (!g)
        return out;
    uint32_t in[REEL_OP_MAX_IN] = { a0, a1 };
    add_node(g, op, in, 0, a, &out);
    return out;
}

reel_tensor reel_embedding(reel_graph *g, reel_tensor table, reel_tensor ids)
{
    return node1(g, REEL_OP_EMBEDDING, table.id, ids.id, &(reel_op_attrs){ { 0 } });
}

reel_tensor reel_matmul(reel_graph *g, reel_tensor x, reel_tensor w, bool w_transposed)
{
    reel_op_attrs a = { .matmul = { .w_transposed = w_transposed } };
    return node1(g, REEL_OP_MATMUL, x.id, w.id, &a);
}

reel_tensor reel_add(reel_graph *g, reel_tensor a, reel_tensor b)
{
    return node1(g, REEL_OP_ADD, a.id, b.id, &(reel_op_attrs){ { 0 } });
}

reel_tensor reel_mul(reel_graph *g, reel_tensor a, reel_tensor b)
{
    return node1(g, REEL_OP_MUL, a.id, b.id, &(reel_op_attrs){ { 0 } });
}

reel_tensor reel_rmsnorm(reel_graph *g, reel_tensor x, reel_tensor w, float eps)
{
    reel_op_attrs a = { .rmsnorm = { eps } };
    return node1(g, REEL_OP_RMSNORM, x.id, w.id, &a);
}

reel_tensor reel_silu_and_mul(reel_graph *g, reel_tensor x)
{
    return node1(g, REEL_OP_SILU_AND_MUL, x.id, 0, &(reel_op_attrs){ { 0 } });
}

reel_tensor reel_rope(reel_graph *g, reel_tensor x, reel_tensor positions, int head_dim, int rot_dim, float theta)
{
    reel_op_attrs a = { .rope = { head_dim, rot_dim, theta } };
    return node1(g, REEL_OP_ROPE, x.id, positions.id, &a);
}

reel_tensor reel_rope_freq_part(reel_graph *g, reel_tensor x, reel_tensor positions, reel_tensor inv_freq, int head_dim,
                                int rot_offset, bool interleaved, float scale)
{
    reel_tensor out = { 0 };
    if (!g)
        return out;
    /* rot_dim from the table's length (an invalid table is refused by add_node) */
    int64_t half = reel_graph_has(g, inv_freq.id) && g->tensors[inv_freq.id].shape.ndim == 1
                       ? g->tensors[inv_freq.id].shape.dims[0] : 0;
    reel_op_attrs a = { .rope_freq = { head_dim, half > 0 && half < INT32_MAX / 2 ? (int)(2 * half) : 0, scale,
                                       rot_offset, interleaved } };
    uint32_t in[REEL_OP_MAX_IN] = { x.id, positions.id, inv_freq.id };
    add_node(g, REEL_OP_ROPE_FREQ, in, 0, &a, &out);
    return out;
}

reel_tensor reel_rope_freq(reel_graph *g, reel_tensor x, reel_tensor positions, reel_tensor inv_freq, int head_dim,
                           float scale)
{
    return reel_rope_freq_part(g, x, positions, inv_freq, head_dim, 0, false, scale);
}

reel_tensor reel_rmsnorm_heads(reel_graph *g, reel_tensor x, reel_tensor w, float eps)
{
    reel_op_attrs a = { .rmsnorm = { eps } };
    return node1(g, REEL_OP_RMSNORM_HEADS, x.id, w.id, &a);
}

reel_tensor reel_softmax(reel_graph *g, reel_tensor x)
{
    return node1(g, REEL_OP_SOFTMAX, x.id, 0, &(reel_op_attrs){ { 0 } });
}

reel_tensor reel_view_cols(reel_graph *g, reel_tensor x, int64_t col, int64_t ncols)
{
    reel_op_attrs a = { .view = { col, ncols } };
    return node1(g, REEL_OP_VIEW_COLS, x.id, 0, &a);
}

reel_tensor reel_argmax(reel_graph *g, reel_tensor x)
{
    return node1(g, REEL_OP_ARGMAX, x.id, 0, &(reel_op_attrs){ { 0 } });
}

reel_tensor reel_sample(reel_graph *g, reel_tensor logits, reel_tensor params, reel_tensor rng)
{
    reel_tensor out = { 0 };
    if (!g)
        return out;
    uint32_t in[REEL_OP_MAX_IN] = { logits.id, params.id, rng.id };
    add_node(g, REEL_OP_SAMPLE, in, 0, &(reel_op_attrs){ { 0 } }, &out);
    return out;
}

reel_status reel_moe_route(reel_graph *g, reel_tensor logits, reel_tensor bias, const reel_moe_params *p,
                           reel_tensor *ids, reel_tensor *weights)
{
    reel_tensor res[REEL_OP_MAX_OUT] = { { 0 } };
    reel_status st = REEL_E_INVALID_ARG;
    reel_moe_params mp = REEL_MOE_PARAMS_INIT;
    char what[64];
    if (!g) {
        st = reel_seterr(NULL, REEL_E_INVALID_ARG, "reel_moe_route: NULL graph");
    } else if (!p || !ids || !weights) {
        st = reel_graph_fail(g, REEL_E_INVALID_ARG, "op 'moe_route' (node %d): params, ids or weights is NULL",
                             g->nnodes);
    } else {
        snprintf(what, sizeof what, "op 'moe_route' (node %d)", g->nnodes);
        st = reel_graph_load_struct(g, &mp, p, &reel_abi_moe_params, what);
    }
    if (st == REEL_OK) {
        reel_op_attrs a = { .moe = { mp.num_experts, mp.top_k, mp.scoring, mp.n_group > 1 ? mp.n_group : 0,
                                     mp.n_group > 1 ? mp.topk_group : 0, mp.renormalize,
                                     mp.routed_scaling == 0.0f ? 1.0f : mp.routed_scaling } };
        if (mp.n_group < 0 || mp.topk_group < 0) { /* the schema names them */
            a.moe.n_group = mp.n_group;
            a.moe.topk_group = mp.topk_group;
        }
        uint32_t in[REEL_OP_MAX_IN] = { logits.id, bias.id };
        st = add_node(g, REEL_OP_MOE_ROUTE, in, 1u << 1, &a, res);
    }
    if (ids)
        *ids = res[0];
    if (weights)
        *weights = res[1];
    return st;
}

reel_tensor reel_moe_ffn(reel_graph *g, reel_tensor x, reel_tensor ids, reel_tensor weights, reel_tensor w_gate_up,
                         reel_tensor w_down, int num_experts)
{
    reel_tensor out = { 0 };
    if (!g)
        return out;
    if (!reel_graph_has(g, ids.id)) { /* add_node names the bad handle; moe_align has 3 outputs */
        reel_tensor res[REEL_OP_MAX_OUT];
        uint32_t in[REEL_OP_MAX_IN] = { ids.id };
        add_node(g, REEL_OP_MOE_ALIGN, in, 0, &(reel_op_attrs){ .moe = { .num_experts = num_experts, .top_k = 1 } },
                 res);
        return out;
    }
    /* K from the pairs the router made: every node checks it again. */
    reel_op_attrs a = { .moe = { .num_experts = num_experts, .top_k = (int)g->tensors[ids.id].shape.dims[1] } };
    reel_tensor al[REEL_OP_MAX_OUT] = { { 0 } }, act = { 0 }, ys = { 0 };
    uint32_t in_al[REEL_OP_MAX_IN] = { ids.id };
    if (add_node(g, REEL_OP_MOE_ALIGN, in_al, 0, &a, al) != REEL_OK)
        return out;
    uint32_t in_gu[REEL_OP_MAX_IN] = { x.id, al[0].id, al[2].id, w_gate_up.id };
    if (add_node(g, REEL_OP_MOE_GATE_UP, in_gu, 0, &a, &act) != REEL_OK)
        return out;
    uint32_t in_dn[REEL_OP_MAX_IN] = { act.id, al[2].id, w_down.id };
    if (add_node(g, REEL_OP_MOE_DOWN, in_dn, 0, &a, &ys) != REEL_OK)
        return out;
    uint32_t in_cb[REEL_OP_MAX_IN] = { ys.id, al[1].id, weights.id };
    add_node(g, REEL_OP_MOE_COMBINE, in_cb, 0, &a, &out);
    return out;
}

reel_tensor reel_graph_paged_attention(reel_graph *g, const uint32_t *in, const reel_attn_params *p,
                                       const reel_attn_layout *lay, reel_tensor *lse)
{
    reel_tensor out = { 0 };
    if (lse)
        *lse = out;
    if (!g)
        return out;
    if (!p) {
        reel_graph_fail(g, REEL_E_INVALID_ARG, "op 'paged_attention' (node %d): params are NULL", g->nnodes);
        return out;
    }
    reel_op_attrs a = { .attn = { .p = REEL_ATTN_PARAMS_INIT } };
    char what[64];
    snprintf(what, sizeof what, "op 'paged_attention' (node %d)", g->nnodes);
    if (reel_graph_load_struct(g, &a.attn.p, p, &reel_abi_attn_params, what) != REEL_OK)
        return out;
    if (lay)
        a.attn.lay = *lay;
    /* The second output is the op's split-KV workspace, not the caller's;
     * the third, with a layout that asks for it, the lse. */
    reel_tensor res[REEL_OP_MAX_OUT] = { { 0 } };
    if (add_node(g, REEL_OP_PAGED_ATTENTION, in, 1u << 5, &a, res) != REEL_OK)
        return out;
    out = res[0];
    if (lse)
        *lse = res[2];
    /* Resolved once here so every backend uses the same scale. */
    reel_attn_params *np = &g->nodes[g->nnodes - 1].attrs.attn.p;
    if (np->scale == 0.0f)
        np->scale = 1.0f / sqrtf((float)np->head_dim);
    return out;
}

reel_tensor reel_paged_attention(reel_graph *g, reel_tensor q, reel_tensor k, reel_tensor v,
                                 reel_tensor k_cache, reel_tensor v_cache, const reel_attn_params *p)
{
    uint32_t in[REEL_OP_MAX_IN] = { q.id, k.id, v.id, k_cache.id, v_cache.id, 0 };
    return reel_graph_paged_attention(g, in, p, NULL, NULL);
}

reel_tensor reel_topk(reel_graph *g, reel_tensor scores, reel_tensor lengths, reel_tensor page_table, int k,
                      int page_size)
{
    reel_tensor out = { 0 };
    if (!g)
        return out;
    /* An absent page table is the invalid handle, stored as in[2] = 0. */
    reel_op_attrs a = { .topk = { k, page_size, page_table.id != 0 } };
    uint32_t in[REEL_OP_MAX_IN] = { scores.id, lengths.id, page_table.id };
    add_node(g, REEL_OP_TOPK, in, 1u << 2, &a, &out);
    return out;
}

reel_status reel_lse_combine(reel_graph *g, reel_tensor outs, reel_tensor lses, int num_heads, reel_tensor *out,
                             reel_tensor *lse)
{
    reel_tensor res[REEL_OP_MAX_OUT] = { { 0 } };
    reel_status st = REEL_E_INVALID_ARG;
    if (g && out && lse) {
        reel_op_attrs a = { .lse = { num_heads, false, REEL_F32 } };
        uint32_t in[REEL_OP_MAX_IN] = { outs.id, lses.id };
        st = add_node(g, REEL_OP_LSE_COMBINE, in, 0, &a, res);
    } else if (g) {
        st = reel_graph_fail(g, REEL_E_INVALID_ARG, "op 'lse_combine' (node %d): out or lse is NULL", g->nnodes);
    } else {
        st = reel_seterr(NULL, REEL_E_INVALID_ARG, "reel_lse_combine: NULL graph");
    }
    if (out)
        *out = res[0];
    if (lse)
        *lse = res[1];
    return st;
}

reel_status reel_graph_lse_combine_packed(reel_graph *g, reel_tensor packed, int num_heads, reel_dtype out_dtype,
                                          reel_tensor *out, reel_tensor *lse)
{
    reel_tensor res[REEL_OP_MAX_OUT] = { { 0 } };
    reel_op_attrs a = { .lse = { num_heads, true, out_dtype } };
    uint32_t in[REEL_OP_MAX_IN] = { packed.id, 0 };
    reel_status st = add_node(g, REEL_OP_LSE_COMBINE, in, 1u << 1, &a, res);
    *out = res[0];
    *lse = res[1];
    return st;
}

/* For the builders of other files (graph/builder_comm.c). */
reel_status reel_graph_add_op(reel_graph *g, reel_op_kind op, const uint32_t *in, uint32_t optional,
                              const reel_op_attrs *a, reel_tensor *outs)
{
    return add_node(g, op, in, optional, a, outs);
}

reel_tensor reel_head_matmul(reel_graph *g, reel_tensor x, int x_offset, reel_tensor w, int row_offset, int rows,
                             bool transposed, int heads)
{
    reel_tensor out = { 0 };
    if (!g)
        return out;
    reel_op_attrs a = { .hmm = { heads, row_offset, rows, x_offset, transposed } };
    uint32_t in[REEL_OP_MAX_IN] = { x.id, w.id };
    add_node(g, REEL_OP_HEAD_MATMUL, in, 0, &a, &out);
    return out;
}

reel_tensor reel_graph_mla_attention(reel_graph *g, const uint32_t *in, const reel_mla_params *p,
                                     const reel_attn_layout *lay, reel_tensor *lse)
{
    reel_tensor out = { 0 };
    if (lse)
        *lse = out;
    if (!g)
        return out;
    if (!p) {
        reel_graph_fail(g, REEL_E_INVALID_ARG, "op 'mla_attention' (node %d): params are NULL", g->nnodes);
        return out;
    }
    reel_mla_params mp = REEL_MLA_PARAMS_INIT;
    char what[64];
    snprintf(what, sizeof what, "op 'mla_attention' (node %d)", g->nnodes);
    if (reel_graph_load_struct(g, &mp, p, &reel_abi_mla_params, what) != REEL_OK)
        return out;
    reel_op_attrs a = { .mla = { mp.num_heads, mp.latent_dim, mp.rope_dim, mp.block_size, mp.scale, { 0 } } };
    if (lay)
        a.mla.lay = *lay;
    /* The second output is the op's split-KV workspace; the third, with a
     * layout that asks for it, the lse. */
    reel_tensor res[REEL_OP_MAX_OUT] = { { 0 } };
    if (add_node(g, REEL_OP_MLA_ATTENTION, in, 1u << 5, &a, res) != REEL_OK)
        return out;
    if (lse)
        *lse = res[2];
    return res[0];
}

reel_tensor reel_mla_attention(reel_graph *g, reel_tensor q_lat, reel_tensor q, reel_tensor c, reel_tensor k_pe,
                               reel_tensor cache, const reel_mla_params *p)
{
    uint32_t in[REEL_OP_MAX_IN] = { q_lat.id, q.id, c.id, k_pe.id, cache.id };
    return reel_graph_mla_attention(g, in, p, NULL, NULL);
}

reel_tensor reel_mla_sparse_attention(reel_graph *g, reel_tensor q_lat, reel_tensor q, reel_tensor c, reel_tensor k_pe,
                                      reel_tensor cache, reel_tensor slots, const reel_mla_params *p)
{
    if (g && !slots.id) {
        reel_graph_fail(g, REEL_E_INVALID_ARG, "op 'mla_attention' (node %d): slots is the invalid handle (the sparse "
                        "form needs them; reel_mla_attention is the dense one)", g->nnodes);
        return (reel_tensor){ 0 };
    }
    uint32_t in[REEL_OP_MAX_IN] = { q_lat.id, q.id, c.id, k_pe.id, cache.id, slots.id };
    return reel_graph_mla_attention(g, in, p, NULL, NULL);
}
