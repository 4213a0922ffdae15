/* Rope fusion (part of the compile pipeline, after the graph is copied and
 * before kernels are chosen): two rope ops whose results are a paged
 * attention's q and k, with the attention's head dim, one positions tensor,
 * one rot_dim and one theta, become part of the attention op. The attention
 * node then reads the unrotated q and k, rotates them in its KV-write phase
 * (attrs.attn.rope_rot_dim, ops/op.h) and produces the rope ops' results as
 * its outputs 2 and 3, so nothing that read them changes: the two rope
 * launches of every layer are gone, the results are the same bits on the
 * host backend (one rope formula, ops/host/rope.c) and on CUDA (rope.cuh).
 *
 * It fires only where nothing else reads the rotated q or k before the
 * attention runs: each must have the attention as its one consumer (a graph
 * output may still name it: outputs are read after the step). Rope and
 * attention on different streams stay apart. Only REEL_OP_ROPE fuses: a
 * rope with a table of frequencies and an attention factor
 * (REEL_OP_ROPE_FREQ, the models layer's scaled ropes) stays its own op,
 * since the attention op's fused write knows theta's formula only. */
#include <string.h>

#include "core/halloc.h"
#include "runtime/fuse.h"

/* Consumers of each tensor among the nodes (ids index it). */
static int *count_consumers(const reel_plan *p)
{
    int *uses = reel_hcalloc((size_t)p->ntensors + 1, sizeof *uses);
    if (!uses)
        return NULL;
    for (int i = 0; i < p->nnodes; i++)
        for (int k = 0; k < p->nodes[i].nin; k++)
            if (p->nodes[i].in[k])
                uses[p->nodes[i].in[k]]++;
    return uses;
}

/* The rope node producing tensor t for attention a, or -1. */
static int rope_for(const reel_plan *p, const int *uses, uint32_t t, const reel_node *a)
{
    if (!t || p->tensors[t].kind != REEL_T_ACT || uses[t] != 1)
        return -1;
    int r = p->tensors[t].producer;
    if (r < 0 || p->nodes[r].op != REEL_OP_ROPE || p->nodes[r].stream != a->stream)
        return -1;
    const reel_node *n = &p->nodes[r];
    if (n->attrs.rope.head_dim != a->attrs.attn.p.head_dim || n->attrs.rope.rot_dim <= 0)
        return -1;
    return r;
}

reel_status reel_fuse_rope_attention(reel_plan *p, int *fused)
{
    *fused = 0;
    int *uses = count_consumers(p);
    bool *dead = reel_hcalloc((size_t)p->nnodes + 1, sizeof *dead);
    if (!uses || !dead) {
        reel_hfree(uses);
        reel_hfree(dead);
        return reel_seterr(p->err, REEL_E_OOM, "compile: out of host memory fusing rope into attention");
    }
    for (int i = 0; i < p->nnodes; i++) {
        reel_node *a = &p->nodes[i];
        /* in[5] and out[2] free: no layout across ranks (ops/op.h) */
        if (a->op != REEL_OP_PAGED_ATTENTION || a->attrs.attn.rope_rot_dim > 0 || a->in[5] != 0 || a->nout != 2 ||
            reel_attn_has_layout(&a->attrs.attn.lay))
            continue;
        int rq = rope_for(p, uses, a->in[0], a), rk = rope_for(p, uses, a->in[1], a);
        if (rq < 0 || rk < 0 || rq == rk || dead[rq] || dead[rk])
            continue;
        const reel_node *q = &p->nodes[rq], *k = &p->nodes[rk];
        if (q->in[1] != k->in[1] || q->attrs.rope.rot_dim != k->attrs.rope.rot_dim ||
            q->attrs.rope.theta != k->attrs.rope.theta)
            continue;
        uint32_t qrot = a->in[0], krot = a->in[1];
        a->in[0] = q->in[0];
        a->in[1] = k->in[0];
        a->in[5] = q->in[1];
        a->nin = 6;
        a->out[2] = qrot;
        a->out[3] = krot;
        a->nout = 4;
        a->attrs.attn.rope_rot_dim = q->attrs.rope.rot_dim;
        a->attrs.attn.rope_theta = q->attrs.rope.theta;
        p->tensors[qrot].out_index = 2;
        p->tensors[krot].out_index = 3;
        dead[rq] = dead[rk] = true;
        ++*fused;
    }
    if (*fused) {
        /* Drop the rope nodes; the order stays topological (each attention
         * already came after both ropes and their inputs). */
        int n = 0;
        for (int i = 0; i < p->nnodes; i++)
            if (!dead[i])
                p->nodes[n++] = p->nodes[i];
        p->nnodes = n;
        for (int i = 0; i < n; i++)
            for (int o = 0; o < p->nodes[i].nout; o++)
                p->tensors[p->nodes[i].out[o]].producer = i;
    }
    reel_hfree(uses);
    reel_hfree(dead);
    return REEL_OK;
}
