/* Per-node helpers every executor file may use: how a node is named in
 * messages and the shapes of its operands at a row count. This file is the
 * floor of runtime/: it calls into no other file of the folder, so no file
 * of runtime/ calls back up into another through it. */
#include <string.h>

#include "runtime/plan.h"

/* "add (node 3 -> 'l0.h')": how messages and the hazard checker name a node. */
const char *reel_plan_node_label(const reel_plan *p, int i, char *buf, size_t len)
{
    const reel_node *n = &p->nodes[i];
    return reel_op_node_label(n->op, i, p->tensors[n->out[0]].name, false, buf, len);
}

/* "op 'add' (node 3 -> 'l0.h')". */
const char *reel_plan_node_name(const reel_plan *p, int i, char *buf, size_t len)
{
    const reel_node *n = &p->nodes[i];
    return reel_op_node_label(n->op, i, p->tensors[n->out[0]].name, true, buf, len);
}

/* Node i's operand shapes with token dimensions set to rows. */
void reel_plan_node_shapes(const reel_plan *p, int i, int64_t rows, reel_shape *in, reel_shape *out)
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
