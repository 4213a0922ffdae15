/* The validated subset of the attention layouts: what the tests pin
 * (tests/parallel/test_dcp.c, test_dcp_mla.c, test_cp.c; tests/gpu for the
 * CUDA kernels), for paged attention and MLA nodes alike,
 * and nothing else. Everything outside it is refused with a message naming
 * the op and the limit, at build (the helpers) and at compile (every node,
 * against the plan's communicator). */
#include <stdarg.h>
#include <stdio.h>

#include "parallel/parallel.h"

static reel_status refuse(char *err, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static reel_status refuse(char *err, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, len, fmt, ap);
    va_end(ap);
    return REEL_E_UNSUPPORTED;
}

static bool validated_ranks(int n) { return n == 1 || n == 2 || n == 4 || n == 8; }

static bool pow2(int v) { return v > 0 && (v & (v - 1)) == 0; }

reel_status reel_par_check_layout(const reel_attn_params *p, const reel_attn_layout *lay, char *err, size_t len)
{
    if (lay->dcp >= 1 && lay->cp >= 1)
        return refuse(err, len, "DCP (%d ranks) and CP (%d ranks) together are outside the validated subset",
                      lay->dcp, lay->cp);
    if (lay->cp >= 1 && !validated_ranks(lay->cp))
        return refuse(err, len, "CP over %d ranks is outside the validated subset (1, 2, 4 or 8 ranks)", lay->cp);
    if (lay->dcp < 1)
        return REEL_OK;
    if (!validated_ranks(lay->dcp))
        return refuse(err, len, "DCP over %d ranks is outside the validated subset (1, 2, 4 or 8 ranks)", lay->dcp);
    if (p->num_heads % lay->dcp != 0)
        return refuse(err, len, "DCP: num_heads %d is not a multiple of the %d ranks", p->num_heads, lay->dcp);
    if (lay->dcp_rank < 0 || lay->dcp_rank >= lay->dcp)
        return refuse(err, len, "DCP: rank %d is outside 0..%d", lay->dcp_rank, lay->dcp - 1);
    if (!pow2(lay->interleave) || p->block_size % lay->interleave != 0)
        return refuse(err, len, "DCP: interleave %d must be a power of two dividing block_size %d", lay->interleave,
                      p->block_size);
    return REEL_OK;
}

/* The one rule the plan's nodes must agree on: one DCP layout, or none. */
static bool same_dcp(const reel_attn_layout *a, const reel_attn_layout *b)
{
    return a->dcp == b->dcp && a->dcp_rank == b->dcp_rank && a->interleave == b->interleave;
}

reel_status reel_par_check_plan(const reel_node *nodes, int nnodes, const reel_tinfo *tensors, const reel_comm *c,
                                reel_err *err, reel_dcp_view *dcp)
{
    char why[256], name[160];
    int first = -1; /* the first attention node */
    *dcp = (reel_dcp_view){ 1, 0, 1 };
    for (int i = 0; i < nnodes; i++) {
        const reel_node *n = &nodes[i];
        if (!reel_op_is_paged(n->op))
            continue;
        bool mla = n->op == REEL_OP_MLA_ATTENTION;
        const reel_attn_layout *lay = mla ? &n->attrs.mla.lay : &n->attrs.attn.lay;
        reel_attn_params view = n->attrs.attn.p;
        if (mla) {
            reel_mla_params mp = REEL_MLA_PARAMS_INIT;
            mp.num_heads = n->attrs.mla.num_heads;
            mp.latent_dim = n->attrs.mla.latent_dim;
            mp.rope_dim = n->attrs.mla.rope_dim;
            mp.block_size = n->attrs.mla.block_size;
            mp.scale = n->attrs.mla.scale;
            view = reel_mla_layout_view(&mp);
        }
        reel_op_node_label(n->op, i, tensors[n->out[0]].name, true, name, sizeof name);
        reel_status st = reel_par_check_layout(&view, lay, why, sizeof why);
        if (st != REEL_OK)
            return reel_seterr(err, st, "compile: %s: %s", name, why);
        int ranks = lay->dcp >= 1 ? lay->dcp : lay->cp;
        const char *kind = lay->dcp >= 1 ? "DCP" : "CP";
        if (ranks >= 1 && !c)
            return reel_seterr(err, REEL_E_INVALID_USAGE,
                               "compile: %s is laid out by %s over %d ranks and needs a communicator: set "
                               "reel_compile_opts.comm",
                               name, kind, ranks);
        if (ranks >= 1 && c->nranks != ranks)
            return reel_seterr(err, REEL_E_INVALID_ARG, "compile: %s is laid out by %s over %d ranks, the communicator has %d",
                               name, kind, ranks, c->nranks);
        if (lay->dcp >= 1 && c->rank != lay->dcp_rank)
            return reel_seterr(err, REEL_E_INVALID_ARG,
                               "compile: %s is DCP rank %d, the communicator's rank is %d", name, lay->dcp_rank,
                               c->rank);
        if (first < 0) {
            first = i;
            *dcp = reel_attn_dcp(lay);
            continue;
        }
        const reel_attn_layout *f = nodes[first].op == REEL_OP_MLA_ATTENTION ? &nodes[first].attrs.mla.lay
                                                                           : &nodes[first].attrs.attn.lay;
        if ((lay->dcp >= 1 || f->dcp >= 1) && !same_dcp(lay, f)) {
            char other[160];
            reel_op_node_label(nodes[first].op, first, tensors[nodes[first].out[0]].name, true, other, sizeof other);
            return reel_seterr(err, REEL_E_UNSUPPORTED,
                               "compile: %s (DCP %d ranks, interleave %d) and %s (DCP %d ranks, interleave %d): the "
                               "attention ops of a plan share one DCP layout, or none has one (the step's block "
                               "tables are one rank's pages)",
                               name, lay->dcp, lay->interleave, other, f->dcp, f->interleave);
        }
    }
    return REEL_OK;
}
