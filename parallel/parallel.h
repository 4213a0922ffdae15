/* Internal (L4): the CP and DCP layouts of attention (include/reel/parallel.h
 * builds them) and the validated subset they are held to: checked when a
 * helper builds a node and again at compile for every attention node, so a
 * node built any other way is held to it too. */
#ifndef REEL_PARALLEL_PARALLEL_H
#define REEL_PARALLEL_PARALLEL_H

#include <stddef.h>

#include "backend/comm.h"
#include "core/err.h"
#include "graph/ir.h"

/* One node's layout against the validated subset: REEL_OK, or
 * REEL_E_UNSUPPORTED with the limit in err (without the op's name). */
reel_status reel_par_check_layout(const reel_attn_params *p, const reel_attn_layout *lay, char *err, size_t len);

/* MLA's parameters as the subset reads them: num_heads and block_size (one
 * "kv head" of latent_dim + rope_dim). */
static inline reel_attn_params reel_mla_layout_view(const reel_mla_params *m)
{
    reel_attn_params p = REEL_ATTN_PARAMS_INIT;
    p.num_heads = m->num_heads;
    p.num_kv_heads = 1;
    p.head_dim = m->latent_dim + m->rope_dim;
    p.block_size = m->block_size;
    p.scale = m->scale;
    return p;
}

/* Every attention node of a plan (nodes in schedule order; messages name
 * them as the executor does) against the subset and the communicator c
 * (may be NULL): a layout needs one of its size, DCP its rank; the DCP
 * nodes share one layout and no plain node stands beside them (their block
 * tables are local pages). *dcp gets the plan's DCP view (n 1: none). */
reel_status reel_par_check_plan(const reel_node *nodes, int nnodes, const reel_tinfo *tensors, const reel_comm *c,
                                reel_err *err, reel_dcp_view *dcp);

#endif
