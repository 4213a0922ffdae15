/* The graph object and its leaves: inputs, parameters, states, positions,
 * outputs, names and streams. Construction is deferred-error: a failing call
 * returns the invalid handle (or a status) and the first failure stays on
 * the graph until compile reports it. Op nodes are in graph/builder_ops.c. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "graph/builder.h"
#include "core/halloc.h"

reel_status reel_graph_fail(reel_graph *g, reel_status st, const char *fmt, ...)
{
    char msg[REEL_ERRMSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (g->err == REEL_OK) {
        g->err = st;
        memcpy(g->errmsg, msg, sizeof msg);
    }
    return reel_seterr(reel_ctx_err(g->ctx), st, "%s", msg);
}

reel_status reel_graph_load_struct(reel_graph *g, void *dst, const void *src, const reel_struct_kind *k,
                                   const char *what)
{
    reel_err e;
    reel_err_init(&e);
    reel_status st = reel_struct_load(dst, src, k, &e);
    if (st != REEL_OK) {
        char msg[REEL_ERRMSG_MAX];
        reel_err_copy(&e, msg, sizeof msg);
        st = reel_graph_fail(g, st, "%s: %s", what, msg);
    }
    reel_err_fini(&e);
    return st;
}

bool reel_graph_has(const reel_graph *g, uint32_t id) { return id > 0 && id < (uint32_t)g->ntensors; }

const char *reel_tensor_kind_name(reel_tensor_kind k)
{
    switch (k) {
    case REEL_T_INPUT: return "input";
    case REEL_T_PARAM: return "parameter";
    case REEL_T_STATE: return "state";
    case REEL_T_META: return "positions";
    case REEL_T_ACT: return "activation";
    }
    return "tensor";
}

/* Grows *arr (of elem-sized items, capacity *cap) to hold need items. */
static bool grow(void **arr, int *cap, int need, size_t elem)
{
    if (need <= *cap)
        return true;
    int ncap = *cap ? *cap : 16;
    while (ncap < need) {
        if (ncap > (1 << 29))
            return false;
        ncap *= 2;
    }
    void *p = reel_hrealloc(*arr, (size_t)ncap * elem);
    if (!p)
        return false;
    *arr = p;
    *cap = ncap;
    return true;
}

reel_status reel_graph_reserve(reel_graph *g, int tensors, int nodes)
{
    if (!grow((void **)&g->tensors, &g->captensors, g->ntensors + tensors, sizeof *g->tensors) ||
        !grow((void **)&g->nodes, &g->capnodes, g->nnodes + nodes, sizeof *g->nodes))
        return REEL_E_OOM;
    return REEL_OK;
}

uint32_t reel_graph_push_tensor(reel_graph *g, const char *name, reel_tensor_kind kind, const reel_shape *shape)
{
    uint32_t id = (uint32_t)g->ntensors++;
    reel_tinfo *t = &g->tensors[id];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->kind = kind;
    t->shape = *shape;
    t->producer = -1;
    t->out_index = -1;
    t->output_slot = -1;
    return id;
}

reel_status reel_graph_create(reel_ctx *ctx, reel_graph **out)
{
    if (!out)
        return reel_seterr(reel_ctx_err(ctx), REEL_E_INVALID_ARG, "reel_graph_create: out is NULL");
    *out = NULL;
    if (!ctx)
        return reel_seterr(NULL, REEL_E_INVALID_ARG, "graph_create: the context is NULL");
    reel_graph *g = reel_hcalloc(1, sizeof *g);
    if (!g)
        goto fail;
    g->ctx = ctx;
    /* Slot 0 is the invalid tensor, so ids index the array directly. */
    if (reel_graph_reserve(g, 1, 0) != REEL_OK)
        goto fail;
    reel_shape none = { 0 };
    reel_graph_push_tensor(g, "(invalid)", REEL_T_META, &none);
    *out = g;
    return REEL_OK;
fail:
    reel_graph_destroy(g);
    return reel_seterr(reel_ctx_err(ctx), REEL_E_OOM, "reel_graph_create: out of host memory");
}

void reel_graph_destroy(reel_graph *g)
{
    if (!g)
        return;
    reel_hfree(g->tensors);
    reel_hfree(g->nodes);
    reel_hfree(g->outputs);
    reel_hfree(g->leaf_tab);
    reel_hfree(g);
}

reel_status reel_graph_status(const reel_graph *g)
{
    return g ? g->err : reel_seterr(NULL, REEL_E_INVALID_ARG, "graph_status: the graph is NULL");
}

/* ---- leaves ------------------------------------------------------------- */

static bool is_leaf(reel_tensor_kind k) { return k != REEL_T_ACT; }

/* The leaf (input, parameter, state, positions) named name, 0 if none. */
static uint64_t name_hash(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

/* A leaf by name in constant time (a model declares thousands of weights,
 * each checked against every name before it otherwise). */
static uint32_t find_leaf(const reel_graph *g, const char *name)
{
    if (!g->leaf_cap)
        return 0;
    size_t mask = (size_t)g->leaf_cap - 1;
    for (size_t i = name_hash(name) & mask; g->leaf_tab[i]; i = (i + 1) & mask) {
        const reel_tinfo *t = &g->tensors[g->leaf_tab[i]];
        if (is_leaf(t->kind) && strcmp(t->name, name) == 0)
            return g->leaf_tab[i];
    }
    return 0;
}

static void leaf_put(reel_graph *g, uint32_t id)
{
    size_t mask = (size_t)g->leaf_cap - 1, i = name_hash(g->tensors[id].name) & mask;
    while (g->leaf_tab[i])
        i = (i + 1) & mask;
    g->leaf_tab[i] = id;
    g->leaf_used++;
}

/* Room for one more entry (at most half full), rebuilt from the leaves
 * when it grows, so a later leaf_put cannot fail. */
static reel_status leaf_reserve(reel_graph *g)
{
    if (2 * (g->leaf_used + 1) <= g->leaf_cap)
        return REEL_OK;
    int leaves = 0;
    for (int i = 1; i < g->ntensors; i++)
        leaves += is_leaf(g->tensors[i].kind);
    int cap = 64;
    while (cap < 4 * (leaves + 1))
        cap *= 2;
    uint32_t *tab = reel_hcalloc((size_t)cap, sizeof *tab);
    if (!tab)
        return REEL_E_OOM;
    reel_hfree(g->leaf_tab);
    g->leaf_tab = tab;
    g->leaf_cap = cap;
    g->leaf_used = 0;
    for (int i = 1; i < g->ntensors; i++)
        if (is_leaf(g->tensors[i].kind))
            leaf_put(g, (uint32_t)i);
    return REEL_OK;
}

/* A name given by the caller: non-empty, short enough. what: "input", ... */
static reel_status check_name(reel_graph *g, const char *what, const char *name)
{
    if (!name || !*name)
        return reel_graph_fail(g, REEL_E_INVALID_ARG, "%s: the name is %s", what, name ? "empty" : "NULL");
    if (strlen(name) >= REEL_NAME_MAX)
        return reel_graph_fail(g, REEL_E_INVALID_ARG, "%s '%.40s...': the name is longer than %d characters", what,
                               name, REEL_NAME_MAX - 1);
    return REEL_OK;
}

static reel_status check_leaf_name(reel_graph *g, const char *what, const char *name, uint32_t self)
{
    reel_status st = check_name(g, what, name);
    if (st != REEL_OK)
        return st;
    uint32_t other = find_leaf(g, name);
    if (other && other != self)
        return reel_graph_fail(g, REEL_E_INVALID_ARG, "%s '%s': the name is taken by %s '%s' (tensor %u)", what, name,
                               reel_tensor_kind_name(g->tensors[other].kind), name, other);
    return REEL_OK;
}

/* Checks dtype and dims of a leaf and builds its shape. Only inputs may
 * have the symbolic token dim, and only as dims[0]. */
static reel_status leaf_shape(reel_graph *g, const char *what, const char *name, reel_dtype dt, int ndim,
                              const int64_t *dims, reel_shape *out)
{
    if ((int)dt < 0 || dt >= REEL_DTYPE_COUNT)
        return reel_graph_fail(g, REEL_E_INVALID_ARG, "%s '%s': unknown dtype %d", what, name, (int)dt);
    if (ndim < 1 || ndim > REEL_MAX_DIMS)
        return reel_graph_fail(g, REEL_E_INVALID_ARG, "%s '%s': ndim %d is outside 1..%d", what, name, ndim,
                               REEL_MAX_DIMS);
    if (!dims)
        return reel_graph_fail(g, REEL_E_INVALID_ARG, "%s '%s': dims is NULL", what, name);
    *out = (reel_shape){ .dtype = dt, .ndim = ndim };
    int64_t numel = 1;
    for (int i = 0; i < ndim; i++) {
        out->dims[i] = dims[i];
        if (i == 0 && dims[0] == REEL_DIM_TOKENS) {
            if (strcmp(what, "input") != 0)
                return reel_graph_fail(g, REEL_E_SHAPE, "%s '%s': only inputs may have the token dim", what, name);
            out->tokens = true;
            continue;
        }
        if (dims[i] <= 0)
            return reel_graph_fail(g, REEL_E_INVALID_ARG, "%s '%s': dims[%d] is %lld; dims must be > 0%s", what, name,
                                   i, (long long)dims[i], i == 0 ? " (or REEL_DIM_TOKENS for an input)" : "");
        if (dims[i] > (INT64_MAX / 16) / numel)
            return reel_graph_fail(g, REEL_E_INVALID_ARG, "%s '%s': the shape is too large", what, name);
        numel *= dims[i];
    }
    return REEL_OK;
}

static reel_tensor new_leaf(reel_graph *g, reel_tensor_kind kind, const char *name, reel_dtype dt, int ndim,
                            const int64_t *dims)
{
    if (!g)
        return (reel_tensor){ 0 };
    const char *what = reel_tensor_kind_name(kind);
    reel_shape s;
    if (check_leaf_name(g, what, name, 0) != REEL_OK || leaf_shape(g, what, name, dt, ndim, dims, &s) != REEL_OK)
        return (reel_tensor){ 0 };
    if (reel_graph_reserve(g, 1, 0) != REEL_OK || leaf_reserve(g) != REEL_OK) {
        reel_graph_fail(g, REEL_E_OOM, "%s '%s': out of host memory", what, name);
        return (reel_tensor){ 0 };
    }
    uint32_t id = reel_graph_push_tensor(g, name, kind, &s);
    leaf_put(g, id);
    return (reel_tensor){ id };
}

reel_tensor reel_input(reel_graph *g, const char *name, reel_dtype dt, int ndim, const int64_t *dims)
{
    return new_leaf(g, REEL_T_INPUT, name, dt, ndim, dims);
}

reel_tensor reel_param(reel_graph *g, const char *name, reel_dtype dt, int ndim, const int64_t *dims)
{
    return new_leaf(g, REEL_T_PARAM, name, dt, ndim, dims);
}

reel_tensor reel_state(reel_graph *g, const char *name, reel_dtype dt, int ndim, const int64_t *dims)
{
    return new_leaf(g, REEL_T_STATE, name, dt, ndim, dims);
}

reel_tensor reel_positions(reel_graph *g)
{
    if (!g)
        return (reel_tensor){ 0 };
    if (g->positions)
        return (reel_tensor){ g->positions };
    if (check_leaf_name(g, "positions", "positions", 0) != REEL_OK)
        return (reel_tensor){ 0 };
    if (reel_graph_reserve(g, 1, 0) != REEL_OK || leaf_reserve(g) != REEL_OK) {
        reel_graph_fail(g, REEL_E_OOM, "positions: out of host memory");
        return (reel_tensor){ 0 };
    }
    reel_shape s = { .dtype = REEL_I32, .ndim = 1, .tokens = true, .dims = { -1 } };
    g->positions = reel_graph_push_tensor(g, "positions", REEL_T_META, &s);
    leaf_put(g, g->positions);
    return (reel_tensor){ g->positions };
}

reel_tensor reel_graph_slot_mapping(reel_graph *g)
{
    if (g->slots)
        return (reel_tensor){ g->slots };
    if (check_leaf_name(g, "slot_mapping", "slot_mapping", 0) != REEL_OK)
        return (reel_tensor){ 0 };
    if (reel_graph_reserve(g, 1, 0) != REEL_OK || leaf_reserve(g) != REEL_OK) {
        reel_graph_fail(g, REEL_E_OOM, "slot_mapping: out of host memory");
        return (reel_tensor){ 0 };
    }
    reel_shape s = { .dtype = REEL_I32, .ndim = 2, .tokens = true, .dims = { -1, 1 } };
    g->slots = reel_graph_push_tensor(g, "slot_mapping", REEL_T_META, &s);
    g->tensors[g->slots].meta_slots = true;
    leaf_put(g, g->slots);
    return (reel_tensor){ g->slots };
}

/* ---- calls on existing tensors ----------------------------------------- */

/* A handle passed to a status-returning call. The invalid handle after an
 * earlier failure is that failure's consequence: return it, report nothing new. */
static reel_status check_handle(reel_graph *g, reel_tensor t, const char *call)
{
    if (reel_graph_has(g, t.id))
        return REEL_OK;
    if (t.id == 0 && g->err != REEL_OK)
        return g->err;
    return reel_graph_fail(g, REEL_E_INVALID_ARG, "%s: tensor id %u is %s", call, t.id,
                           t.id == 0 ? "the invalid tensor" : "not a tensor of this graph");
}

static reel_status param_of(reel_graph *g, reel_tensor t, const char *call, reel_tinfo **out)
{
    reel_status st = check_handle(g, t, call);
    if (st != REEL_OK)
        return st;
    reel_tinfo *ti = &g->tensors[t.id];
    if (ti->kind != REEL_T_PARAM)
        return reel_graph_fail(g, REEL_E_INVALID_ARG, "%s: '%s' is %s %s, not a parameter", call, ti->name,
                               ti->kind == REEL_T_INPUT ? "an" : "a", reel_tensor_kind_name(ti->kind));
    *out = ti;
    return REEL_OK;
}

reel_status reel_param_bind(reel_graph *g, reel_tensor param, const void *data)
{
    if (!g)
        return reel_seterr(NULL, REEL_E_INVALID_ARG, "param_bind: the graph is NULL");
    reel_tinfo *ti = NULL;
    reel_status st = param_of(g, param, "reel_param_bind", &ti);
    if (st != REEL_OK)
        return st;
    if (!data)
        return reel_graph_fail(g, REEL_E_INVALID_ARG, "reel_param_bind: data for parameter '%s' is NULL", ti->name);
    /* The last of bind and defer wins. */
    ti->bind = data;
    ti->deferred = false;
    return REEL_OK;
}

reel_status reel_param_defer(reel_graph *g, reel_tensor param)
{
    if (!g)
        return reel_seterr(NULL, REEL_E_INVALID_ARG, "param_defer: the graph is NULL");
    reel_tinfo *ti = NULL;
    reel_status st = param_of(g, param, "reel_param_defer", &ti);
    if (st != REEL_OK)
        return st;
    ti->bind = NULL;
    ti->deferred = true;
    return REEL_OK;
}

reel_status reel_output(reel_graph *g, const char *name, reel_tensor t)
{
    if (!g)
        return reel_seterr(NULL, REEL_E_INVALID_ARG, "output: the graph is NULL");
    reel_status st = check_name(g, "output", name);
    if (st == REEL_OK)
        st = check_handle(g, t, "reel_output");
    if (st != REEL_OK)
        return st;
    for (int i = 0; i < g->noutputs; i++)
        if (strcmp(g->outputs[i].name, name) == 0)
            return reel_graph_fail(g, REEL_E_INVALID_ARG, "output '%s': the name is taken by output %d", name, i);
    reel_tinfo *ti = &g->tensors[t.id];
    if (ti->output_slot >= 0)
        return reel_graph_fail(g, REEL_E_INVALID_ARG, "output '%s': tensor '%s' is already output '%s'", name,
                               ti->name, g->outputs[ti->output_slot].name);
    if (!grow((void **)&g->outputs, &g->capoutputs, g->noutputs + 1, sizeof *g->outputs))
        return reel_graph_fail(g, REEL_E_OOM, "output '%s': out of host memory", name);
    reel_goutput *o = &g->outputs[g->noutputs];
    snprintf(o->name, sizeof o->name, "%s", name);
    o->tensor = t.id;
    ti->output_slot = g->noutputs++;
    return REEL_OK;
}

reel_status reel_set_name(reel_graph *g, reel_tensor t, const char *name)
{
    if (!g)
        return reel_seterr(NULL, REEL_E_INVALID_ARG, "set_name: the graph is NULL");
    reel_status st = check_handle(g, t, "reel_set_name");
    if (st != REEL_OK)
        return st;
    reel_tinfo *ti = &g->tensors[t.id];
    /* Leaves are looked up by name (set_input, write_param): keep theirs
     * unique. Activation names are for messages only. */
    st = is_leaf(ti->kind) ? check_leaf_name(g, reel_tensor_kind_name(ti->kind), name, t.id)
                           : check_name(g, "reel_set_name", name);
    if (st != REEL_OK)
        return st;
    if (is_leaf(ti->kind) && leaf_reserve(g) != REEL_OK)
        return reel_graph_fail(g, REEL_E_OOM, "reel_set_name '%s': out of host memory", name);
    snprintf(ti->name, sizeof ti->name, "%s", name);
    if (is_leaf(ti->kind))
        leaf_put(g, t.id);  /* the old name's entry no longer matches */
    return REEL_OK;
}

reel_status reel_set_stream(reel_graph *g, reel_tensor t, int stream)
{
    if (!g)
        return reel_seterr(NULL, REEL_E_INVALID_ARG, "set_stream: the graph is NULL");
    reel_status st = check_handle(g, t, "reel_set_stream");
    if (st != REEL_OK)
        return st;
    reel_tinfo *ti = &g->tensors[t.id];
    if (ti->kind != REEL_T_ACT)
        return reel_graph_fail(g, REEL_E_INVALID_ARG, "reel_set_stream: '%s' is %s %s, not produced by an op",
                               ti->name, ti->kind == REEL_T_INPUT ? "an" : "a", reel_tensor_kind_name(ti->kind));
    if (stream < 0 || stream >= REEL_MAX_STREAMS)
        return reel_graph_fail(g, REEL_E_INVALID_ARG, "reel_set_stream: stream %d for '%s' is outside 0..%d", stream,
                               ti->name, REEL_MAX_STREAMS - 1);
    g->nodes[ti->producer].stream = stream;
    return REEL_OK;
}
