/* Internal (L3): the graph IR built through the C API. */
#ifndef REEL_GRAPH_IR_H
#define REEL_GRAPH_IR_H

#include "ops/op.h"
#include "backend/ctx.h"

typedef enum reel_tensor_kind {
    REEL_T_INPUT = 0, /* written by the caller before each step */
    REEL_T_PARAM,     /* weights */
    REEL_T_STATE,     /* persists across steps (KV cache) */
    REEL_T_META,      /* step metadata (positions; the slot mapping, for CP) */
    REEL_T_ACT,       /* produced by a node: lives in the arena */
} reel_tensor_kind;

#define REEL_NAME_MAX 64

typedef struct reel_tinfo {
    char name[REEL_NAME_MAX];
    reel_tensor_kind kind;
    reel_shape shape;
    int producer;          /* node index for ACT, -1 otherwise */
    int out_index;         /* which output of the producer */
    const void *bind;      /* PARAM: borrowed data until compile */
    bool deferred;         /* PARAM: written into the plan later */
    bool meta_slots;       /* META: the step's slot mapping (else its positions) */
    int output_slot;       /* index in the graph's outputs, -1 if not an output */
    /* Set by the executor's fusion pass (runtime/fuse.c), 0 in a graph: an ACT
     * that aliases the bytes of ACT alias_of from element rows * alias_col
     * (a view of a segmented matmul output), or a tensor no node produces
     * any more (dead: fused away). */
    uint32_t alias_of;
    int64_t alias_col;
    bool dead;
} reel_tinfo;

typedef struct reel_node {
    reel_op_kind op;
    reel_op_attrs attrs;
    int nin, nout;
    uint32_t in[REEL_OP_MAX_IN];   /* tensor ids; 0 = absent optional input */
    uint32_t out[REEL_OP_MAX_OUT];
    int stream;
} reel_node;

typedef struct reel_goutput {
    char name[REEL_NAME_MAX];
    uint32_t tensor;
} reel_goutput;

struct reel_graph {
    reel_ctx *ctx;
    reel_status err;        /* first builder error, sticky */
    reel_tinfo *tensors;    /* index 0 unused: id 0 is invalid */
    int ntensors, captensors; /* ntensors counts slot 0: ids are 1..ntensors-1,
                                 and arrays indexed by id have ntensors entries */
    reel_node *nodes;
    int nnodes, capnodes;
    reel_goutput *outputs;
    int noutputs, capoutputs;
    uint32_t positions;     /* the META positions tensor, 0 if not asked for */
    uint32_t slots;         /* the META slot mapping [T, 1] (reel_graph_slot_mapping), 0 if none */
    /* Leaf names (unique among leaves) to ids, open addressing, 0 = empty:
     * a lookup compares the tensor's current name, so the entry a rename
     * leaves behind never matches; a rebuild drops it. */
    uint32_t *leaf_tab;
    int leaf_cap, leaf_used;
    char errmsg[REEL_ERRMSG_MAX]; /* message of the first builder error */
};

/* Display name of node i: "op 'matmul' (node 3 -> 'l0.q')" into buf. */
const char *reel_node_desc(const reel_graph *g, int i, char *buf, size_t len);

/* The dependency edges: from[i] -> to[i] when node to[i] reads a tensor
 * that node from[i] produces, or when both access one state tensor (a KV
 * cache that paged_attention writes): those are chained in build order.
 * Deduplicated. *from and *to are allocated with reel_halloc (free with
 * reel_hfree; NULL when there are no edges). */
reel_status reel_graph_edges(const reel_graph *g, int **from, int **to, int *nedges);
/* The same edges over any node array (the executor's copy in schedule
 * order), with room for `extra` more edges after them; REEL_E_OOM without a
 * message. */
reel_status reel_dag_edges(const reel_node *nodes, int nnodes, const reel_tinfo *tensors, int ntensors, int extra,
                           int **from, int **to, int *nedges);

/* A topological order of the nodes (Kahn's, stable: ties in build order).
 * order has g->nnodes entries. REEL_E_INVALID_ARG on a cycle. */
reel_status reel_graph_topo_order(const reel_graph *g, int *order);

/* Validates the whole graph for compile: the sticky builder error (its
 * message set again as the context's last error), at least one output,
 * every output produced by an op or an input, every parameter bound or
 * deferred. Messages name op/tensor. Validation errors are not sticky. */
reel_status reel_graph_validate(reel_graph *g);

#endif
