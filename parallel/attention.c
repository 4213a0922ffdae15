/* The CP and DCP layouts of attention as compositions of graph nodes
 * (include/reel/parallel.h): collectives from graph/builder_comm.c, paged
 * attention with a layout (ops/op.h), the combine's ops. A refused layout
 * adds nothing and records the builder error naming the op and the limit. */
#include <stdio.h>
#include <string.h>

#include "core/abi.h"
#include "graph/builder.h"
#include "parallel/parallel.h"

/* Records a refusal of the helper's layout on the graph. */
static reel_status refuse_layout(reel_graph *g, const char *what, const reel_attn_params *p,
                                 const reel_attn_layout *lay)
{
    char why[256];
    reel_status st = reel_par_check_layout(p, lay, why, sizeof why);
    if (st != REEL_OK)
        return reel_graph_fail(g, st, "%s (node %d): %s", what, g->nnodes, why);
    return REEL_OK;
}

int32_t reel_dcp_local_len(const reel_dcp_layout *d, int32_t len)
{
    if (!d || reel_struct_check(d, &reel_abi_dcp_layout, NULL) != REEL_OK || len < 0 || d->nranks < 1 || d->rank < 0 || d->rank >= d->nranks || d->interleave < 1)
        return -1;
    reel_dcp_view v = { d->nranks, d->rank, d->interleave };
    return reel_dcp_local_count(v, len);
}

static reel_tensor node2(reel_graph *g, reel_op_kind op, reel_tensor a, reel_tensor b, const reel_op_attrs *at,
                         reel_tensor *second)
{
    reel_tensor res[REEL_OP_MAX_OUT] = { { 0 } };
    uint32_t in[REEL_OP_MAX_IN] = { a.id, b.id };
    reel_graph_add_op(g, op, in, 0, at, res);
    if (second)
        *second = res[1];
    return res[0];
}

/* The DCP exchange of every head's partial (part [T, H*D], part_lse [T, H]
 * over this rank's shard) into this rank's heads' (out, lse). */
static reel_status dcp_exchange(reel_graph *g, const reel_dcp_layout *d, int h, reel_tensor part, reel_tensor part_lse,
                                reel_tensor *out, reel_tensor *lse)
{
    int n = d->nranks;
    reel_op_attrs a;
    memset(&a, 0, sizeof a);
    a.dcp.num_heads = h;
    a.dcp.nranks = n;
    a.dcp.rank = d->rank;
    reel_tensor o = { 0 }, l = { 0 };
    if (d->exchange == REEL_DCP_GATHER_SCATTER) {
        reel_tensor lses = reel_all_gather(g, part_lse, 1, n);
        reel_tensor scaled = node2(g, REEL_OP_LSE_RESCALE, part, lses, &a, &l);
        o = reel_reduce_scatter(g, scaled, 1, n);
    } else {
        reel_tensor packed = node2(g, REEL_OP_LSE_PACK, part, part_lse, &a, NULL);
        reel_tensor mine = reel_all_to_all(g, packed, 1, n);
        if (mine.id)
            reel_graph_lse_combine_packed(g, mine, h / n, g->tensors[part.id].shape.dtype, &o, &l);
    }
    if (!o.id || !l.id)
        return g->err != REEL_OK ? g->err : REEL_E_INVALID_ARG;
    *out = o;
    *lse = l;
    return REEL_OK;
}

reel_status reel_dcp_attention(reel_graph *g, reel_tensor q, reel_tensor k, reel_tensor v, reel_tensor k_cache,
                               reel_tensor v_cache, const reel_attn_params *params, const reel_dcp_layout *layout,
                               reel_tensor *out, reel_tensor *lse)
{
    if (out)
        *out = (reel_tensor){ 0 };
    if (lse)
        *lse = (reel_tensor){ 0 };
    if (!g)
        return reel_seterr(NULL, REEL_E_INVALID_ARG, "reel_dcp_attention: NULL graph");
    if (!params || !layout || !out || !lse)
        return reel_graph_fail(g, REEL_E_INVALID_ARG, "dcp_attention (node %d): params, layout, out or lse is NULL",
                               g->nnodes);
    reel_attn_params pl = REEL_ATTN_PARAMS_INIT;
    reel_dcp_layout dl = REEL_DCP_LAYOUT_INIT;
    char what[64];
    snprintf(what, sizeof what, "dcp_attention (node %d)", g->nnodes);
    REEL_TRY(reel_graph_load_struct(g, &pl, params, &reel_abi_attn_params, what));
    REEL_TRY(reel_graph_load_struct(g, &dl, layout, &reel_abi_dcp_layout, what));
    const reel_attn_params *p = &pl;
    const reel_dcp_layout *d = &dl;
    if (d->exchange != REEL_DCP_GATHER_SCATTER && d->exchange != REEL_DCP_ALL_TO_ALL)
        return reel_graph_fail(g, REEL_E_INVALID_ARG, "dcp_attention (node %d): exchange %d is not a reel_dcp_exchange",
                               g->nnodes, d->exchange);
    reel_attn_layout lay = { .dcp = d->nranks, .dcp_rank = d->rank, .interleave = d->interleave, .lse = true };
    if (d->nranks < 1)
        return reel_graph_fail(g, REEL_E_INVALID_ARG, "dcp_attention (node %d): nranks %d must be >= 1", g->nnodes,
                               d->nranks);
    reel_status st = refuse_layout(g, "dcp_attention", p, &lay);
    if (st != REEL_OK)
        return st;
    int n = d->nranks, h = p->num_heads;
    /* q of this rank's heads -> every head (chunks are rank-major: rank q's
     * heads are heads q*H/N ..). */
    reel_tensor qa = reel_all_gather(g, q, 1, n);
    uint32_t in[REEL_OP_MAX_IN] = { qa.id, k.id, v.id, k_cache.id, v_cache.id, 0 };
    reel_tensor part_lse;
    reel_tensor part = reel_graph_paged_attention(g, in, p, &lay, &part_lse);
    return dcp_exchange(g, d, h, part, part_lse, out, lse);
}

reel_tensor reel_cp_attention(reel_graph *g, reel_tensor q, reel_tensor k, reel_tensor v, reel_tensor k_cache,
                              reel_tensor v_cache, const reel_attn_params *params, int nranks)
{
    reel_tensor none = { 0 };
    if (!g)
        return none;
    if (!params) {
        reel_graph_fail(g, REEL_E_INVALID_ARG, "cp_attention (node %d): params are NULL", g->nnodes);
        return none;
    }
    reel_attn_params pl = REEL_ATTN_PARAMS_INIT;
    char what[64];
    snprintf(what, sizeof what, "cp_attention (node %d)", g->nnodes);
    if (reel_graph_load_struct(g, &pl, params, &reel_abi_attn_params, what) != REEL_OK)
        return none;
    const reel_attn_params *p = &pl;
    if (nranks < 1) {
        reel_graph_fail(g, REEL_E_INVALID_ARG, "cp_attention (node %d): nranks %d must be >= 1", g->nnodes, nranks);
        return none;
    }
    reel_attn_layout lay = { .cp = nranks };
    if (refuse_layout(g, "cp_attention", p, &lay) != REEL_OK)
        return none;
    /* Rank-major along axis 1 (the token dim stays each rank's): row t of
     * the gathered k holds every rank's token t, chunk q rank q's. The
     * slots are the step's slot mapping, which the staging pads with -1
     * past the step's tokens (the same count on every rank), so no rank
     * writes a padding row another rank gathered. */
    reel_tensor kg = reel_all_gather(g, k, 1, nranks);
    reel_tensor vg = reel_all_gather(g, v, 1, nranks);
    reel_tensor sg = reel_all_gather(g, reel_graph_slot_mapping(g), 1, nranks);
    if (!kg.id || !vg.id || !sg.id)
        return none; /* refused: the gather recorded why */
    uint32_t in[REEL_OP_MAX_IN] = { q.id, kg.id, vg.id, k_cache.id, v_cache.id, sg.id };
    return reel_graph_paged_attention(g, in, p, &lay, NULL);
}

reel_status reel_dcp_mla_attention(reel_graph *g, reel_tensor q_lat, reel_tensor q, reel_tensor c, reel_tensor k_pe,
                                   reel_tensor cache, const reel_mla_params *params, const reel_dcp_layout *layout,
                                   reel_tensor *out, reel_tensor *lse)
{
    if (out)
        *out = (reel_tensor){ 0 };
    if (lse)
        *lse = (reel_tensor){ 0 };
    if (!g)
        return reel_seterr(NULL, REEL_E_INVALID_ARG, "reel_dcp_mla_attention: NULL graph");
    if (!params || !layout || !out || !lse)
        return reel_graph_fail(g, REEL_E_INVALID_ARG,
                               "dcp_mla_attention (node %d): params, layout, out or lse is NULL", g->nnodes);
    reel_mla_params pl = REEL_MLA_PARAMS_INIT;
    reel_dcp_layout dl = REEL_DCP_LAYOUT_INIT;
    char what[64];
    snprintf(what, sizeof what, "dcp_mla_attention (node %d)", g->nnodes);
    REEL_TRY(reel_graph_load_struct(g, &pl, params, &reel_abi_mla_params, what));
    REEL_TRY(reel_graph_load_struct(g, &dl, layout, &reel_abi_dcp_layout, what));
    const reel_dcp_layout *d = &dl;
    if (d->exchange != REEL_DCP_GATHER_SCATTER && d->exchange != REEL_DCP_ALL_TO_ALL)
        return reel_graph_fail(g, REEL_E_INVALID_ARG,
                               "dcp_mla_attention (node %d): exchange %d is not a reel_dcp_exchange", g->nnodes,
                               d->exchange);
    if (d->nranks < 1)
        return reel_graph_fail(g, REEL_E_INVALID_ARG, "dcp_mla_attention (node %d): nranks %d must be >= 1",
                               g->nnodes, d->nranks);
    reel_attn_layout lay = { .dcp = d->nranks, .dcp_rank = d->rank, .interleave = d->interleave, .lse = true };
    reel_attn_params view = reel_mla_layout_view(&pl);
    reel_status st = refuse_layout(g, "dcp_mla_attention", &view, &lay);
    if (st != REEL_OK)
        return st;
    int n = d->nranks;
    /* this rank's heads' q_lat and q -> every head's (rank-major chunks) */
    reel_tensor qla = reel_all_gather(g, q_lat, 1, n), qa = reel_all_gather(g, q, 1, n);
    uint32_t in[REEL_OP_MAX_IN] = { qla.id, qa.id, c.id, k_pe.id, cache.id };
    reel_tensor part_lse;
    reel_tensor part = reel_graph_mla_attention(g, in, &pl, &lay, &part_lse);
    if (!part.id)
        return g->err != REEL_OK ? g->err : REEL_E_INVALID_ARG;
    return dcp_exchange(g, d, pl.num_heads, part, part_lse, out, lse);
}
