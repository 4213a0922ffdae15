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
} reel_hk_mm;

static reel_hk_mm reel_hk_mm_of(const reel_launch *l)
{
    const reel_shape *xs = &l->in_shape[0], *ws = &l->in_shape[1];
    reel_hk_mm g = {
        .x = l->in[0], .w = l->in[1], .out = l->out[0],
        .xd = xs->dtype, .wd = ws->dtype, .od = l->out_shape[0].dtype,
        .k = reel_shape_last(xs), .wt = l->attrs->matmul.w_transposed,
    };
    g.n = g.wt ? reel_shape_lead(ws, l->rows) : reel_shape_last(ws);
    g.m = g.k > 0 ? reel_hk_numel(xs, l->rows) / g.k : reel_shape_lead(xs, l->rows);
    return g;
}

static inline float reel_hk_mm_w(const reel_hk_mm *g, int64_t kk, int64_t nn)
{
    return reel_load(g->w, g->wd, g->wt ? nn * g->k + kk : kk * g->n + nn);
}

void reel_host_matmul(const void *args)
{
    reel_hk_mm g = reel_hk_mm_of(args);
    for (int64_t i = 0; i < g.m; i++) {
        for (int64_t j = 0; j < g.n; j++) {
            float acc = 0.0f;
            for (int64_t kk = 0; kk < g.k; kk++)
                acc += reel_load(g.x, g.xd, i * g.k + kk) * reel_hk_mm_w(&g, kk, j);
            reel_store(g.out, g.od, i * g.n + j, acc);
        }
    }
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
            reel_store(g->out, g->od, (i0 + r) * g->n + j0 + c, acc[r][c]);
}

void reel_host_matmul_tiled(const void *args)
{
    reel_hk_mm g = reel_hk_mm_of(args);
    reel_hk_mm_f32 f;
    if (!reel_hk_mm_convert(&g, &f)) {
        reel_host_matmul(args); /* same bits, no scratch needed */
        return;
    }
    for (int64_t i = 0; i < f.mp; i += REEL_HK_MR)
        for (int64_t j = 0; j < f.np; j += REEL_HK_NT)
            reel_hk_mm_tile(&g, &f, i, j);
    reel_hfree(f.x);
    reel_hfree(f.w);
}
