/* Host kernels: matmul x [M, K] times w [K, N] (or w [N, K] transposed)
 * -> [M, N]. Both accumulate each output in float32 from 0 over k in
 * ascending order, so the tiled kernel equals the reference bit for bit
 * (reel builds with -std=c11, which keeps a*b+c unfused). */
#include "ops/host/host_ops.h"
#include "ops/host/kern.h"
#include "core/halloc.h"

typedef struct reel_hk_mm {
    const void *x, *w;
    void *out;
    reel_dtype xd, wd, od;
    int64_t m, k, n;
    bool wt; /* w stored [N, K] */
    int nseg;                         /* column segments (fused views), 0: row-major */
    int64_t seg[REEL_MM_MAX_SEG];
} reel_hk_mm;

/* Element index of output (i, j): row-major, or inside j's segment, a
 * [m, seg] block of its own at m * (its first column). */
static inline int64_t reel_hk_mm_at(const reel_hk_mm *g, int64_t i, int64_t j)
{
    if (!g->nseg)
        return i * g->n + j;
    int64_t c0 = 0;
    for (int s = 0; s < g->nseg; s++) {
        if (j < c0 + g->seg[s])
            return g->m * c0 + i * g->seg[s] + (j - c0);
        c0 += g->seg[s];
    }
    return i * g->n + j; /* not reached: the segments cover every column */
}

/* The rmsnorm prologue (ops/op.h): the host rmsnorm (add_rmsnorm) writes
 * the normed x into its scratch output, which the product then reads: the
 * unfused pair's bits. */
static void reel_hk_mm_prologue(const reel_launch *l)
{
    const reel_op_attrs *a = l->attrs;
    if (a->matmul.pro == REEL_MM_PRO_NONE)
        return;
    reel_op_attrs na = {.rmsnorm = {.eps = a->matmul.pro_eps}};
    const int ks = reel_mm_sum_out(a), kn = reel_mm_norm_out(a);
    reel_launch r = {.op = REEL_OP_RMSNORM, .attrs = &na, .rows = l->rows, .meta = l->meta, .stream = l->stream};
    reel_shape in[3], out[2];
    if (a->matmul.pro == REEL_MM_PRO_ADD_RMSNORM) {
        in[0] = l->in_shape[0], in[1] = l->in_shape[3], in[2] = l->in_shape[4];
        out[0] = l->out_shape[ks], out[1] = l->out_shape[kn];
        r.in[0] = l->in[0], r.in[1] = l->in[3], r.in[2] = l->in[4];
        r.out[0] = l->out[ks], r.out[1] = l->out[kn];
        r.op = REEL_OP_ADD_RMSNORM;
        r.in_shape = in, r.out_shape = out;
        reel_host_add_rmsnorm(&r);
        return;
    }
    in[0] = l->in_shape[0], in[1] = l->in_shape[4];
    out[0] = l->out_shape[kn];
    r.in[0] = l->in[0], r.in[1] = l->in[4];
    r.out[0] = l->out[kn];
    r.in_shape = in, r.out_shape = out;
    reel_host_rmsnorm(&r);
}

static reel_hk_mm reel_hk_mm_of(const reel_launch *l)
{
    const reel_shape *xs = &l->in_shape[0], *ws = &l->in_shape[1];
    const bool pro = l->attrs->matmul.pro != REEL_MM_PRO_NONE;
    const int kn = reel_mm_norm_out(l->attrs);
    reel_hk_mm g = {
        .x = pro ? l->out[kn] : l->in[0], .w = l->in[1], .out = l->out[0],
        .xd = pro ? l->out_shape[kn].dtype : xs->dtype, .wd = ws->dtype, .od = l->out_shape[0].dtype,
        .k = reel_shape_last(xs), .wt = l->attrs->matmul.w_transposed,
        .nseg = l->attrs->matmul.nseg,
    };
    for (int s = 0; s < g.nseg; s++)
        g.seg[s] = l->attrs->matmul.seg[s];
    /* silu_and_mul epilogue: the product goes to the scratch output first. */
    if (l->attrs->matmul.epi == REEL_MM_EPI_SILU_MUL) {
        g.out = l->out[1];
        g.od = l->out_shape[1].dtype;
    }
    g.n = g.wt ? reel_shape_lead(ws, l->rows) : reel_shape_last(ws);
    g.m = g.k > 0 ? reel_hk_numel(xs, l->rows) / g.k : reel_shape_lead(xs, l->rows);
    return g;
}

static inline float reel_hk_mm_w(const reel_hk_mm *g, int64_t kk, int64_t nn)
{
    return reel_load(g->w, g->wd, g->wt ? nn * g->k + kk : kk * g->n + nn);
}

/* The epilogue after the product was stored (rounded to the storage dtype),
 * so the fused node rounds where the unfused pair does: the bias added to
 * the stored product; silu_and_mul of the stored gate and up halves. */
static void reel_hk_mm_epilogue(const reel_launch *l, const reel_hk_mm *g)
{
    int epi = l->attrs->matmul.epi;
    if (epi == REEL_MM_EPI_BIAS) {
        reel_dtype bd = l->in_shape[2].dtype;
        for (int64_t i = 0; i < g->m; i++)
            for (int64_t j = 0; j < g->n; j++) {
                int64_t at = reel_hk_mm_at(g, i, j);
                reel_store(g->out, g->od, at, reel_load(g->out, g->od, at) + reel_load(l->in[2], bd, j));
            }
    } else if (epi == REEL_MM_EPI_SILU_MUL) {
        reel_launch s = *l;
        s.in[0] = l->out[1];
        s.in_shape = &l->out_shape[1];
        reel_host_silu_and_mul(&s);
    }
}

static void reel_hk_mm_ref(const reel_hk_mm *g)
{
    for (int64_t i = 0; i < g->m; i++) {
        for (int64_t j = 0; j < g->n; j++) {
            float acc = 0.0f;
            for (int64_t kk = 0; kk < g->k; kk++)
                acc += reel_load(g->x, g->xd, i * g->k + kk) * reel_hk_mm_w(g, kk, j);
            reel_store(g->out, g->od, reel_hk_mm_at(g, i, j), acc);
        }
    }
}

void reel_host_matmul(const void *args)
{
    reel_hk_mm_prologue(args);
    reel_hk_mm g = reel_hk_mm_of(args);
    reel_hk_mm_ref(&g);
    reel_hk_mm_epilogue(args, &g);
}

enum { REEL_HK_MR = 4, REEL_HK_NT = 64 };

/* Operands converted to float32 once per call, padded to whole tiles with
 * zeros, so the inner loops have constant trip counts and vectorize. Padding
 * only adds columns/rows that are never stored. */
typedef struct reel_hk_mm_f32 {
    float *x;      /* [mp][k] */
    float *w;      /* [k][np], w [K, N] layout whatever the storage */
    int64_t mp, np;
} reel_hk_mm_f32;

static bool reel_hk_mm_convert(const reel_hk_mm *g, reel_hk_mm_f32 *f)
{
    f->mp = (g->m + REEL_HK_MR - 1) / REEL_HK_MR * REEL_HK_MR;
    f->np = (g->n + REEL_HK_NT - 1) / REEL_HK_NT * REEL_HK_NT;
    f->x = reel_hcalloc((size_t)(f->mp * g->k), sizeof(float));
    f->w = reel_hcalloc((size_t)(g->k * f->np), sizeof(float));
    if (!f->x || !f->w) {
        reel_hfree(f->x);
        reel_hfree(f->w);
        return false;
    }
    for (int64_t i = 0; i < g->m * g->k; i++)
        f->x[i] = reel_load(g->x, g->xd, i);
    for (int64_t kk = 0; kk < g->k; kk++)
        for (int64_t j = 0; j < g->n; j++)
            f->w[kk * f->np + j] = reel_hk_mm_w(g, kk, j);
    return true;
}

/* One tile: rows i0 .. i0+MR-1, columns j0 .. j0+NT-1 of the padded operands. */
static void reel_hk_mm_tile(const reel_hk_mm *g, const reel_hk_mm_f32 *f, int64_t i0, int64_t j0)
{
    float acc[REEL_HK_MR][REEL_HK_NT] = {{0}};
    for (int64_t kk = 0; kk < g->k; kk++) {
        const float *wr = f->w + kk * f->np + j0;
        for (int r = 0; r < REEL_HK_MR; r++) {
            float xv = f->x[(i0 + r) * g->k + kk];
            for (int c = 0; c < REEL_HK_NT; c++)
                acc[r][c] += xv * wr[c];
        }
    }
    for (int r = 0; r < REEL_HK_MR && i0 + r < g->m; r++)
        for (int c = 0; c < REEL_HK_NT && j0 + c < g->n; c++)
            reel_store(g->out, g->od, reel_hk_mm_at(g, i0 + r, j0 + c), acc[r][c]);
}

void reel_host_matmul_tiled(const void *args)
{
    reel_hk_mm_prologue(args);
    reel_hk_mm g = reel_hk_mm_of(args);
    reel_hk_mm_f32 f;
    if (!reel_hk_mm_convert(&g, &f)) {
        reel_hk_mm_ref(&g); /* same bits, no scratch needed */
    } else {
        for (int64_t i = 0; i < f.mp; i += REEL_HK_MR)
            for (int64_t j = 0; j < f.np; j += REEL_HK_NT)
                reel_hk_mm_tile(&g, &f, i, j);
        reel_hfree(f.x);
        reel_hfree(f.w);
    }
    reel_hk_mm_epilogue(args, &g);
}
