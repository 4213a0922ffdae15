/* Host kernels: matmul x [M, K] times w [K, N] (or w [N, K] transposed)
 * -> [M, N]. Both accumulate each output in float32 from 0 over k in
 * ascending order, so the tiled kernel equals the reference bit for bit
 * (reel builds with -std=c11, which keeps a*b+c unfused). */
#include "ops/host/host_ops.h"
#include "ops/host/kern.h"

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
        .k = reel_hk_last(xs), .wt = l->attrs->matmul.w_transposed,
    };
    g.n = g.wt ? reel_hk_lead(ws, l->rows) : reel_hk_last(ws);
    g.m = g.k > 0 ? reel_hk_numel(xs, l->rows) / g.k : reel_hk_lead(xs, l->rows);
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

/* One tile: rows i0 .. i0+mr-1, columns j0 .. j0+nt-1. */
static void reel_hk_mm_tile(const reel_hk_mm *g, int64_t i0, int mr, int64_t j0, int nt)
{
    float acc[REEL_HK_MR][REEL_HK_NT] = {{0}};
    float xv[REEL_HK_MR];
    for (int64_t kk = 0; kk < g->k; kk++) {
        for (int r = 0; r < mr; r++)
            xv[r] = reel_load(g->x, g->xd, (i0 + r) * g->k + kk);
        for (int c = 0; c < nt; c++) {
            float wv = reel_hk_mm_w(g, kk, j0 + c);
            for (int r = 0; r < mr; r++)
                acc[r][c] += xv[r] * wv;
        }
    }
    for (int r = 0; r < mr; r++)
        for (int c = 0; c < nt; c++)
            reel_store(g->out, g->od, (i0 + r) * g->n + j0 + c, acc[r][c]);
}

void reel_host_matmul_tiled(const void *args)
{
    reel_hk_mm g = reel_hk_mm_of(args);
    for (int64_t i = 0; i < g.m; i += REEL_HK_MR) {
        int mr = (int)(g.m - i < REEL_HK_MR ? g.m - i : REEL_HK_MR);
        for (int64_t j = 0; j < g.n; j += REEL_HK_NT) {
            int nt = (int)(g.n - j < REEL_HK_NT ? g.n - j : REEL_HK_NT);
            reel_hk_mm_tile(&g, i, mr, j, nt);
        }
    }
}
