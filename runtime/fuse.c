/* The fusion pass (docs/fusion.md): rewrites the executor's copy of the
 * graph, in schedule order, before kernels are chosen. Decided from the
 * static DAG alone, invisible to the model author, off with no_fuse:
 *
 * - matmul + add of a row (a bias) -> the matmul's BIAS epilogue, where the
 *   add is the product's only reader and the product is no graph output;
 * - matmul + silu_and_mul -> the matmul's SILU_MUL epilogue, likewise (the
 *   product stays as the node's second output: scratch a kernel may use);
 * - add + rmsnorm of the sum -> add_rmsnorm, two outputs (the sum, still
 *   read by whoever read it, and the normed rows), placed where the add was;
 * - a matmul whose every reader is a view_cols, the views tiling its
 *   columns -> the matmul writes each view's columns as a block of its own
 *   and the views alias those bytes (no node, no kernel);
 * - rmsnorm or add_rmsnorm whose normed rows only a matmul reads -> the
 *   matmul's RMSNORM / ADD_RMSNORM prologue (the sum, and the normed rows as
 *   scratch, become its outputs), placed where the matmul was.
 *
 * A rewrite happens only when the backend's registry has a kernel for the
 * fused node (with the largest bucket's shapes); each one keeps the rounding
 * points of the pair it replaces, so fused and unfused plans agree bit for
 * bit on the host backend (tests/runtime/test_fuse.c). */
#include <stdio.h>
#include <string.h>

#include "core/halloc.h"
#include "runtime/plan.h"

typedef struct fuse_ctx {
    reel_plan *p;
    bool *gone;   /* [nnodes] node folded into another */
    int64_t rows; /* largest bucket: what can_use sees */
    /* Each tensor's readers (node, once per input naming it), in node order:
     * rebuilt before each rewrite loop, read skipping folded nodes. Within a
     * loop a rewrite only folds nodes, or gives a node inputs that loop never
     * asks about (a bias, a norm weight), so the index stays exact. */
    int *rstart;  /* [ntensors + 1] */
    int *rnode;   /* [reads] */
    /* [ntensors + 1] read by a node rewritten since the index was built (a
     * prologue gives its matmul the norm's inputs): their reader lists are
     * stale, so the loop decides nothing from them. */
    bool *extra;
} fuse_ctx;

static reel_status index_readers(fuse_ctx *f)
{
    reel_plan *p = f->p;
    reel_hfree(f->rnode);
    f->rnode = NULL;
    memset(f->rstart, 0, sizeof *f->rstart * ((size_t)p->ntensors + 1));
    memset(f->extra, 0, sizeof *f->extra * ((size_t)p->ntensors + 1));
    int total = 0;
    for (int i = 0; i < p->nnodes; i++)
        for (int k = 0; !f->gone[i] && k < p->nodes[i].nin; k++)
            if (p->nodes[i].in[k]) {
                f->rstart[p->nodes[i].in[k] + 1]++;
                total++;
            }
    for (int t = 0; t < p->ntensors; t++)
        f->rstart[t + 1] += f->rstart[t];
    f->rnode = reel_hcalloc((size_t)total + 1, sizeof *f->rnode);
    int *fill = reel_hcalloc((size_t)p->ntensors + 1, sizeof *fill);
    if (!f->rnode || !fill) {
        reel_hfree(fill);
        return reel_seterr(p->err, REEL_E_OOM, "compile: out of host memory fusing");
    }
    for (int i = 0; i < p->nnodes; i++)
        for (int k = 0; !f->gone[i] && k < p->nodes[i].nin; k++) {
            uint32_t t = p->nodes[i].in[k];
            if (t)
                f->rnode[f->rstart[t] + fill[t]++] = i;
        }
    reel_hfree(fill);
    return REEL_OK;
}

/* Readers of tensor t (node inputs; a graph output counts as one more);
 * *only: the last of them. */
static int uses(const fuse_ctx *f, uint32_t t, int *only)
{
    int n = 0;
    for (int r = f->rstart[t]; r < f->rstart[t + 1]; r++) {
        if (f->gone[f->rnode[r]])
            continue;
        n++;
        if (only)
            *only = f->rnode[r];
    }
    return n + (f->p->tensors[t].output_slot >= 0 ? 1 : 0);
}

static bool is_output(const reel_plan *p, uint32_t t)
{
    for (int o = 0; o < p->noutputs; o++)
        if (p->outputs[o].tensor == t)
            return true;
    return false;
}

/* The node producing ACT t, -1 for other tensors. */
static int producer(const reel_plan *p, uint32_t t)
{
    const reel_tinfo *ti = &p->tensors[t];
    return ti->kind == REEL_T_ACT && !ti->alias_of && !ti->dead ? ti->producer : -1;
}

/* Does the backend have a kernel for node n (shapes checked by the schema)? */
static bool kernel_for(const fuse_ctx *f, const reel_node *n)
{
    const reel_plan *p = f->p;
    reel_shape in[REEL_OP_MAX_IN] = {{0}}, out[REEL_OP_MAX_OUT] = {{0}}, want[REEL_OP_MAX_OUT] = {{0}};
    for (int k = 0; k < n->nin; k++)
        if (n->in[k]) {
            in[k] = p->tensors[n->in[k]].shape;
            if (in[k].tokens)
                in[k].dims[0] = f->rows;
        }
    char why[128];
    const reel_op_schema *sc = reel_op_schema_get(n->op);
    if (!sc || sc->infer(in, n->nin, &n->attrs, want, why, sizeof why) != REEL_OK)
        return false;
    for (int k = 0; k < n->nout; k++) {
        out[k] = p->tensors[n->out[k]].shape;
        if (out[k].tokens)
            out[k].dims[0] = f->rows;
        if (want[k].tokens)
            want[k].dims[0] = f->rows;
        if (memcmp(&want[k], &out[k], sizeof want[k]) != 0)
            return false;
    }
    return reel_registry_select(p->be->kind, n->op, in, n->nin, out, &n->attrs, &p->be->caps) != NULL;
}

static void note(reel_plan *p, int i, const char *what)
{
    size_t at = strlen(p->fused[i]);
    snprintf(p->fused[i] + at, sizeof p->fused[i] - at, "%s%s", at ? ", " : "", what);
}

/* The plain matmul producing t alone for reader `reader` on its stream. */
static int sole_matmul(const fuse_ctx *f, uint32_t t, int reader)
{
    const reel_plan *p = f->p;
    int m = producer(p, t), only = -1;
    if (m < 0 || p->nodes[m].op != REEL_OP_MATMUL || p->nodes[m].attrs.matmul.epi != REEL_MM_EPI_NONE ||
        p->nodes[m].attrs.matmul.nseg != 0 || p->nodes[m].stream != p->nodes[reader].stream)
        return -1;
    if (is_output(p, t) || uses(f, t, &only) != 1 || only != reader)
        return -1;
    return m;
}

static void fuse_bias(fuse_ctx *f, int a)
{
    reel_plan *p = f->p;
    reel_node *n = &p->nodes[a];
    const reel_tinfo *b = &p->tensors[n->in[1]];
    if (n->op != REEL_OP_ADD || b->shape.tokens || b->shape.ndim != 1 ||
        (b->kind != REEL_T_PARAM && b->kind != REEL_T_INPUT))
        return;
    int m = sole_matmul(f, n->in[0], a);
    if (m < 0)
        return;
    reel_node fused = p->nodes[m];
    fused.nin = 3;
    fused.in[2] = n->in[1];
    fused.attrs.matmul.epi = REEL_MM_EPI_BIAS;
    fused.out[0] = n->out[0];
    if (!kernel_for(f, &fused))
        return;
    p->tensors[n->in[0]].dead = true;
    p->nodes[m] = fused;
    p->tensors[n->out[0]].producer = m;
    p->tensors[n->out[0]].out_index = 0;
    f->gone[a] = true;
    note(p, m, "matmul+add(bias)");
}

static void fuse_silu(fuse_ctx *f, int s)
{
    reel_plan *p = f->p;
    reel_node *n = &p->nodes[s];
    if (n->op != REEL_OP_SILU_AND_MUL)
        return;
    uint32_t x = n->in[0];
    int m = sole_matmul(f, x, s);
    if (m < 0)
        return;
    reel_node fused = p->nodes[m];
    fused.attrs.matmul.epi = REEL_MM_EPI_SILU_MUL;
    fused.nout = 2;
    fused.out[0] = n->out[0];
    fused.out[1] = x;
    if (!kernel_for(f, &fused))
        return;
    p->nodes[m] = fused;
    p->tensors[n->out[0]].producer = m;
    p->tensors[n->out[0]].out_index = 0;
    p->tensors[x].out_index = 1;
    f->gone[s] = true;
    note(p, m, "matmul+silu_and_mul");
}

static void fuse_add_rmsnorm(fuse_ctx *f, int r)
{
    reel_plan *p = f->p;
    reel_node *n = &p->nodes[r];
    if (n->op != REEL_OP_RMSNORM)
        return;
    int a = producer(p, n->in[0]);
    if (a < 0 || f->gone[a] || p->nodes[a].op != REEL_OP_ADD || p->nodes[a].stream != n->stream)
        return;
    const reel_node *add = &p->nodes[a];
    const reel_shape *sa = &p->tensors[add->in[0]].shape, *sb = &p->tensors[add->in[1]].shape;
    if (memcmp(sa, sb, sizeof *sa) != 0)
        return; /* a broadcast add stays an add */
    /* The fused node runs where the add ran: the weight must exist there. */
    int w = producer(p, n->in[1]);
    if (w >= a || p->tensors[n->in[1]].alias_of)
        return;
    reel_node fused = {.op = REEL_OP_ADD_RMSNORM, .nin = 3, .nout = 2, .stream = add->stream};
    fused.attrs.rmsnorm.eps = n->attrs.rmsnorm.eps;
    fused.in[0] = add->in[0];
    fused.in[1] = add->in[1];
    fused.in[2] = n->in[1];
    fused.out[0] = add->out[0];
    fused.out[1] = n->out[0];
    if (!kernel_for(f, &fused))
        return;
    p->nodes[a] = fused;
    p->tensors[n->out[0]].producer = a;
    p->tensors[n->out[0]].out_index = 1;
    f->gone[r] = true;
    note(p, a, "add+rmsnorm");
}

/* Every reader of matmul m's result is a view_cols, and the views tile its
 * columns in some order: the matmul writes them as segments. */
static void fuse_views(fuse_ctx *f, int m)
{
    reel_plan *p = f->p;
    reel_node *mm = &p->nodes[m];
    if (mm->op != REEL_OP_MATMUL || mm->attrs.matmul.nseg != 0 || mm->attrs.matmul.epi == REEL_MM_EPI_SILU_MUL)
        return;
    uint32_t x = mm->out[0];
    if (is_output(p, x))
        return;
    int view[REEL_MM_MAX_SEG], nv = 0;
    for (int r = f->rstart[x]; r < f->rstart[x + 1]; r++) {
        int i = f->rnode[r];
        if (f->gone[i])
            continue;
        if (p->nodes[i].op != REEL_OP_VIEW_COLS || nv == REEL_MM_MAX_SEG)
            return;
        view[nv++] = i;
    }
    if (nv == 0)
        return;
    /* Sort by first column, then they must follow each other from 0 to N. */
    for (int i = 1; i < nv; i++)
        for (int j = i; j > 0 && p->nodes[view[j]].attrs.view.col < p->nodes[view[j - 1]].attrs.view.col; j--) {
            int t = view[j];
            view[j] = view[j - 1];
            view[j - 1] = t;
        }
    int64_t at = 0;
    reel_node fused = *mm;
    for (int i = 0; i < nv; i++) {
        const reel_node *v = &p->nodes[view[i]];
        if (v->attrs.view.col != at || p->tensors[v->out[0]].alias_of)
            return;
        fused.attrs.matmul.seg[i] = v->attrs.view.ncols;
        at += v->attrs.view.ncols;
    }
    if (at != p->tensors[x].shape.dims[1])
        return;
    fused.attrs.matmul.nseg = nv;
    if (!kernel_for(f, &fused))
        return;
    *mm = fused;
    for (int i = 0; i < nv; i++) {
        const reel_node *v = &p->nodes[view[i]];
        reel_tinfo *t = &p->tensors[v->out[0]];
        t->alias_of = x;
        t->alias_col = v->attrs.view.col;
        t->producer = m;
        t->out_index = 0;
        f->gone[view[i]] = true;
    }
    char what[32];
    snprintf(what, sizeof what, "matmul->%d views", nv);
    note(p, m, what);
}

/* The rmsnorm (or add_rmsnorm) whose normed rows only matmul m reads, on
 * m's stream: the matmul normalizes x itself (its RMSNORM / ADD_RMSNORM
 * prologue) and the norm node goes. The fused node runs where the matmul
 * ran, later than the norm did: the norm's inputs exist there, and every
 * reader of add_rmsnorm's sum must come after it. The normed rows stay as
 * the node's scratch output. */
static void fuse_norm_prologue(fuse_ctx *f, int m)
{
    reel_plan *p = f->p;
    const reel_node *mm = &p->nodes[m];
    if (mm->op != REEL_OP_MATMUL || mm->attrs.matmul.pro != REEL_MM_PRO_NONE || mm->nin > 3)
        return;
    uint32_t x = mm->in[0];
    int r = producer(p, x), only = -1;
    if (r < 0 || f->gone[r] || p->nodes[r].stream != mm->stream || p->tensors[x].alias_of || f->extra[x])
        return;
    const reel_node *nn = &p->nodes[r];
    const bool add = nn->op == REEL_OP_ADD_RMSNORM;
    if ((nn->op != REEL_OP_RMSNORM && !add) || nn->out[add ? 1 : 0] != x)
        return;
    if (is_output(p, x) || uses(f, x, &only) != 1 || only != m)
        return;
    if (add) {
        uint32_t sum = nn->out[0];
        if (f->extra[sum])
            return;
        for (int k = f->rstart[sum]; k < f->rstart[sum + 1]; k++)
            if (!f->gone[f->rnode[k]] && f->rnode[k] <= m)
                return;
    }
    reel_node fused = *mm;
    fused.attrs.matmul.pro = add ? REEL_MM_PRO_ADD_RMSNORM : REEL_MM_PRO_RMSNORM;
    fused.attrs.matmul.pro_eps = nn->attrs.rmsnorm.eps;
    for (int k = mm->nin; k < 5; k++)
        fused.in[k] = 0;
    fused.nin = 5;
    fused.in[0] = nn->in[0];
    fused.in[3] = add ? nn->in[1] : 0;
    fused.in[4] = nn->in[add ? 2 : 1];
    const int ks = reel_mm_sum_out(&fused.attrs), kn = reel_mm_norm_out(&fused.attrs);
    if (kn >= REEL_OP_MAX_OUT)
        return;
    if (add)
        fused.out[ks] = nn->out[0];
    fused.out[kn] = x;
    fused.nout = kn + 1;
    if (!kernel_for(f, &fused))
        return;
    for (int k = 0; k < fused.nin; k++)
        if (fused.in[k])
            f->extra[fused.in[k]] = true;
    p->nodes[m] = fused;
    if (add) {
        p->tensors[nn->out[0]].producer = m;
        p->tensors[nn->out[0]].out_index = ks;
    }
    p->tensors[x].producer = m;
    p->tensors[x].out_index = kn;
    f->gone[r] = true;
    note(p, m, add ? "add+rmsnorm->matmul" : "rmsnorm->matmul");
}

/* Drops the folded nodes, keeping the order of the rest. */
static reel_status compact(fuse_ctx *f)
{
    reel_plan *p = f->p;
    int *map = reel_hcalloc((size_t)p->nnodes + 1, sizeof *map);
    if (!map)
        return reel_seterr(p->err, REEL_E_OOM, "compile: out of host memory fusing");
    int n = 0;
    for (int i = 0; i < p->nnodes; i++) {
        map[i] = f->gone[i] ? -1 : n;
        if (!f->gone[i]) {
            p->nodes[n] = p->nodes[i];
            memmove(p->fused[n], p->fused[i], sizeof p->fused[n]);
            n++;
        }
    }
    for (int i = n; i < p->nnodes; i++)
        p->fused[i][0] = '\0';
    for (int t = 1; t < p->ntensors; t++) {
        reel_tinfo *ti = &p->tensors[t];
        if (ti->kind != REEL_T_ACT)
            continue;
        if (ti->dead)
            ti->producer = -1;
        else if (ti->producer >= 0)
            ti->producer = map[ti->producer];
        REEL_INVARIANT(p->err, ti->dead || ti->producer >= 0);
    }
    p->nnodes = n;
    reel_hfree(map);
    return REEL_OK;
}

reel_status reel_plan_fuse(reel_plan *p)
{
    p->fused = reel_hcalloc((size_t)p->nnodes + 1, sizeof *p->fused);
    if (!p->fused)
        return reel_seterr(p->err, REEL_E_OOM, "compile: out of host memory");
    if (p->opts.no_fuse || p->dbg.no_fuse || p->nnodes == 0)
        return REEL_OK;
    fuse_ctx f = {.p = p, .rows = p->buckets[p->nbuckets - 1]};
    f.gone = reel_hcalloc((size_t)p->nnodes + 1, sizeof *f.gone);
    f.rstart = reel_hcalloc((size_t)p->ntensors + 1, sizeof *f.rstart);
    f.extra = reel_hcalloc((size_t)p->ntensors + 1, sizeof *f.extra);
    reel_status st = f.gone && f.rstart && f.extra ? REEL_OK
                                        : reel_seterr(p->err, REEL_E_OOM, "compile: out of host memory fusing");
    void (*const pass[5])(fuse_ctx *, int) = {fuse_bias, fuse_silu, fuse_add_rmsnorm, fuse_views,
                                              fuse_norm_prologue};
    for (int k = 0; k < 5 && st == REEL_OK; k++) {
        st = index_readers(&f);
        for (int i = 0; st == REEL_OK && i < p->nnodes; i++)
            if (!f.gone[i])
                pass[k](&f, i);
    }
    if (st == REEL_OK)
        st = compact(&f);
    reel_hfree(f.gone);
    reel_hfree(f.rstart);
    reel_hfree(f.extra);
    reel_hfree(f.rnode);
    return st;
}
