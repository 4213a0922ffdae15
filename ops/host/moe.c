/* Host reference kernels of the mixture-of-experts ops (ops/op.h,
 * docs/moe.md). moe_route applies ops/moe.h's reel_moe_route_row to each
 * token, the same function the CUDA kernel runs, so both backends choose
 * the same experts with the same weights bit for bit. moe_align is a stable
 * counting sort of the pairs by expert. The FFN ops walk the sorted rows
 * expert by expert (each expert's weights read once), skip an expert no
 * pair chose, and accumulate in f32 in a fixed order: the same inputs give
 * the same bits, wherever a pair's row lands in the sort.
 *
 * What step data can get wrong is guarded, never trusted: an id outside
 * [0, E) (ops/moe.h: such a pair takes a sorted row before offsets[0]
 * and adds nothing), and offsets, order or where values that do not
 * describe rows of this launch (possible only from a hand-built graph):
 * each reports REEL_E_LIMIT into the error word and is skipped. No scratch
 * memory beyond fixed stack arrays bounded by REEL_MOE_MAX_EXPERTS. */
#include <string.h>

#include "ops/host/host_ops.h"
#include "ops/host/kern.h"
#include "ops/moe.h"

void reel_host_moe_route(const void *args)
{
    const reel_launch *l = args;
    const reel_shape *ls = &l->in_shape[0];
    const int E = l->attrs->moe.num_experts, K = l->attrs->moe.top_k;
    const int64_t nrows = reel_shape_lead(ls, l->rows);
    const float *bias = l->in[1];
    int32_t *ids = l->out[0];
    float *w = l->out[1];
    float row[REEL_MOE_MAX_EXPERTS], scratch[REEL_MOE_SCRATCH(REEL_MOE_MAX_EXPERTS)];
    if (E < 1 || E > REEL_MOE_MAX_EXPERTS) /* can_use refuses it; kept for the stack arrays */
        return;
    for (int64_t t = 0; t < nrows; t++) {
        for (int e = 0; e < E; e++)
            row[e] = reel_load(l->in[0], ls->dtype, t * E + e);
        reel_moe_route_row(row, bias, E, K, l->attrs->moe.scoring, l->attrs->moe.n_group, l->attrs->moe.topk_group,
                           l->attrs->moe.renormalize, l->attrs->moe.routed_scaling, scratch, ids + t * K,
                           w + t * K);
    }
}

void reel_host_moe_align(const void *args)
{
    const reel_launch *l = args;
    const int E = l->attrs->moe.num_experts, K = l->attrs->moe.top_k;
    const int64_t n = reel_shape_lead(&l->in_shape[0], l->rows) * K;
    const int32_t *ids = l->in[0];
    int32_t *order = l->out[0], *where = l->out[1], *offsets = l->out[2];
    int64_t next[REEL_MOE_MAX_EXPERTS + 1]; /* counts, then each expert's next free row */
    if (E < 1 || E > REEL_MOE_MAX_EXPERTS)
        return;
    memset(next, 0, sizeof next);
    int64_t bad = 0;
    for (int64_t p = 0; p < n; p++) {
        if (ids[p] >= 0 && ids[p] < E)
            next[ids[p]]++;
        else
            bad++;
    }
    int64_t at = bad;
    for (int e = 0; e < E; e++) {
        const int64_t c = next[e];
        offsets[e] = (int32_t)at;
        next[e] = at;
        at += c;
    }
    offsets[E] = (int32_t)at; /* == n */
    int64_t nb = 0;
    for (int64_t p = 0; p < n; p++) {
        const int64_t r = ids[p] >= 0 && ids[p] < E ? next[ids[p]]++ : nb++;
        order[r] = (int32_t)p;
        where[p] = (int32_t)r;
    }
    if (bad)
        reel_hk_report(l->meta, REEL_E_LIMIT);
}

/* Expert e's sorted rows [*lo, *hi) of n; false (reported) when offsets
 * do not describe rows of this launch. */
static bool reel_hm_rows(const reel_launch *l, const int32_t *offsets, int e, int64_t n, int64_t *lo, int64_t *hi)
{
    *lo = offsets[e];
    *hi = offsets[e + 1];
    if (*lo < 0 || *hi < *lo || *hi > n) {
        reel_hk_report(l->meta, REEL_E_LIMIT);
        return false;
    }
    return true;
}

/* Rows [0, offsets[0]) belong to no expert (ids out of range): zeros. */
static void reel_hm_zero_lead(const reel_launch *l, const int32_t *offsets, int64_t n, void *out, reel_dtype dt,
                              int64_t width)
{
    const int64_t lead = offsets[0] < 0 ? 0 : offsets[0] > n ? n : offsets[0];
    reel_hk_zero(out, dt, 0, lead * width);
}

/* sum_i a[ai + i] * b[bi + i] for i < len, in f32, ascending i. */
static float reel_hm_dot(const void *a, reel_dtype ad, int64_t ai, const void *b, reel_dtype bd, int64_t bi,
                         int64_t len)
{
    float s = 0.0f;
    for (int64_t i = 0; i < len; i++) {
        const float pr = reel_load(a, ad, ai + i) * reel_load(b, bd, bi + i);
        s += pr;
    }
    return s;
}

void reel_host_moe_gate_up(const void *args)
{
    const reel_launch *l = args;
    const reel_shape *xs = &l->in_shape[0];
    const reel_dtype xd = xs->dtype, wd = l->in_shape[3].dtype, od = l->out_shape[0].dtype;
    const int E = l->attrs->moe.num_experts, K = l->attrs->moe.top_k;
    const int64_t H = reel_shape_inner(xs), F = reel_shape_last(&l->out_shape[0]);
    const int64_t n = reel_shape_lead(xs, l->rows) * K;
    const int32_t *order = l->in[1], *offsets = l->in[2];
    reel_hm_zero_lead(l, offsets, n, l->out[0], od, F);
    for (int e = 0; e < E; e++) {
        int64_t lo, hi;
        if (!reel_hm_rows(l, offsets, e, n, &lo, &hi) || lo == hi)
            continue;
        for (int64_t p = lo; p < hi; p++) {
            const int64_t q = order[p];
            if (q < 0 || q >= n) {
                reel_hk_report(l->meta, REEL_E_LIMIT);
                reel_hk_zero(l->out[0], od, p * F, F);
                continue;
            }
            const int64_t t = q / K;
            for (int64_t i = 0; i < F; i++) {
                const int64_t gr = (int64_t)e * 2 * F + i, ur = gr + F;
                const float g = reel_round_to(xd, reel_hm_dot(l->in[0], xd, t * H, l->in[3], wd, gr * H, H));
                const float u = reel_round_to(xd, reel_hm_dot(l->in[0], xd, t * H, l->in[3], wd, ur * H, H));
                const float a = reel_moe_silu(g) * u;
                reel_store(l->out[0], od, p * F + i, a);
            }
        }
    }
}

void reel_host_moe_down(const void *args)
{
    const reel_launch *l = args;
    const reel_shape *as = &l->in_shape[0];
    const reel_dtype ad = as->dtype, wd = l->in_shape[2].dtype, od = l->out_shape[0].dtype;
    const int E = l->attrs->moe.num_experts, K = l->attrs->moe.top_k;
    const int64_t F = reel_shape_last(as), H = reel_shape_last(&l->out_shape[0]);
    const int64_t n = reel_shape_lead(as, l->rows) * K;
    const int32_t *offsets = l->in[1];
    reel_hm_zero_lead(l, offsets, n, l->out[0], od, H);
    for (int e = 0; e < E; e++) {
        int64_t lo, hi;
        if (!reel_hm_rows(l, offsets, e, n, &lo, &hi) || lo == hi)
            continue;
        for (int64_t p = lo; p < hi; p++)
            for (int64_t h = 0; h < H; h++) {
                const float y = reel_hm_dot(l->in[0], ad, p * F, l->in[2], wd, ((int64_t)e * H + h) * F, F);
                reel_store(l->out[0], od, p * H + h, y);
            }
    }
}

void reel_host_moe_combine(const void *args)
{
    const reel_launch *l = args;
    const reel_shape *ys = &l->in_shape[0];
    const reel_dtype yd = ys->dtype, od = l->out_shape[0].dtype;
    const int K = l->attrs->moe.top_k;
    const int64_t H = reel_shape_last(ys), nrows = reel_shape_lead(ys, l->rows), n = nrows * K;
    const int32_t *where = l->in[1];
    const float *w = l->in[2];
    for (int64_t t = 0; t < nrows; t++)
        for (int64_t h = 0; h < H; h++) {
            float s = 0.0f;
            for (int j = 0; j < K; j++) {
                const int64_t r = where[t * K + j];
                if (r < 0 || r >= n) {
                    reel_hk_report(l->meta, REEL_E_LIMIT);
                    continue;
                }
                const float pr = w[t * K + j] * reel_load(l->in[0], yd, r * H + h);
                s += pr;
            }
            reel_store(l->out[0], od, t * H + h, s);
        }
}
