/* Host reference kernel of the sample op (reel_sample, docs/sampling.md):
 * the rules of ops/sample.h applied the plain way, row by row, with no
 * scratch memory. The kept set is the upper set of the order (logit
 * descending, token id ascending) cut three ways, each cut a pair (key t,
 * id c): keep a token when its key > t, or key == t and id <= c. A cut is
 * found by bisection over the 32-bit keys of the logits (the count, or the
 * mass, of what lies at or above a key never grows with the key), then a
 * walk in token order over the tokens at the cut's key. The CUDA kernel
 * finds the same cuts by radix passes; ties, masses and the draw are
 * integers, so both give the same token. */
#include <math.h>

#include "ops/host/host_ops.h"
#include "ops/host/kern.h"
#include "ops/sample.h"

/* One row: its logits, its parameters and the weight's inputs. */
typedef struct reel_hs_row {
    const void *x;
    reel_dtype dt;
    int64_t at, n;
    reel_sample_cfg cfg;
    float xmax, scale;
} reel_hs_row;

/* A cut of the order (on false: keeps everything). */
typedef struct reel_hs_cut {
    bool on;
    uint32_t t;
    int64_t c;
} reel_hs_cut;

static inline float reel_hs_load(const reel_hs_row *r, int64_t i) { return reel_load(r->x, r->dt, r->at + i); }

static inline bool reel_hs_in_cut(const reel_hs_cut *c, uint32_t key, int64_t i)
{
    return !c->on || key > c->t || (key == c->t && i <= c->c);
}

/* Is logit v (not NaN, not +inf) a candidate: not masked (-inf), and kept
 * by min_p (p >= min_p * p_max, that is w >= min_p). */
static inline bool reel_hs_cand(const reel_hs_row *r, float v)
{
    if (v == -INFINITY)
        return false;
    return r->cfg.min_p == 0.0f || reel_sample_weight(v, r->xmax, r->scale) >= r->cfg.min_p;
}

static inline uint64_t reel_hs_mass(const reel_hs_row *r, float v)
{
    return reel_sample_mass(reel_sample_weight(v, r->xmax, r->scale));
}

/* Candidates inside cut k whose key is at least t: their count, or their
 * mass (with_mass). */
static uint64_t reel_hs_above(const reel_hs_row *r, const reel_hs_cut *k, uint64_t t, bool with_mass)
{
    uint64_t s = 0;
    for (int64_t i = 0; i < r->n; i++) {
        const float v = reel_hs_load(r, i);
        if (!reel_hs_cand(r, v))
            continue;
        const uint32_t key = reel_sample_key(v);
        if (key >= t && reel_hs_in_cut(k, key, i))
            s += with_mass ? reel_hs_mass(r, v) : 1u;
    }
    return s;
}

/* The cut that keeps the first tokens of the order, inside cut k, whose
 * count (or mass) reaches need (need >= 1, and at most what cut k holds):
 * t the largest key with at least need at or above it; then, of the tokens
 * at t in token order, those up to the one where the running count (mass)
 * reaches what is missing above t. */
static reel_hs_cut reel_hs_select(const reel_hs_row *r, const reel_hs_cut *k, uint64_t need, bool with_mass)
{
    uint64_t lo = 0, hi = UINT32_MAX;
    while (lo < hi) {
        const uint64_t mid = lo + (hi - lo + 1) / 2;
        if (reel_hs_above(r, k, mid, with_mass) >= need)
            lo = mid;
        else
            hi = mid - 1;
    }
    const uint64_t above = lo < UINT32_MAX ? reel_hs_above(r, k, lo + 1, with_mass) : 0;
    const uint64_t miss = need - above;
    reel_hs_cut cut = { true, (uint32_t)lo, r->n - 1 };
    uint64_t run = 0;
    for (int64_t i = 0; i < r->n; i++) {
        const float v = reel_hs_load(r, i);
        if (!reel_hs_cand(r, v) || reel_sample_key(v) != cut.t || !reel_hs_in_cut(k, cut.t, i))
            continue;
        run += with_mass ? reel_hs_mass(r, v) : 1u;
        if (run >= miss) {
            cut.c = i;
            break;
        }
    }
    return cut;
}

static int32_t reel_hs_row_token(reel_hs_row *r, const float *prm, const int32_t *rng)
{
    if (!reel_sample_params(prm, &r->cfg))
        return REEL_SAMPLE_BAD_ROW;
    int64_t best = -1, ncand = 0;
    r->xmax = -INFINITY;
    for (int64_t i = 0; i < r->n; i++) {
        const float v = reel_hs_load(r, i);
        if (isnan(v) || v == INFINITY)
            return REEL_SAMPLE_BAD_ROW;
        if (v == -INFINITY)
            continue;
        ncand++;
        if (best < 0 || v > r->xmax) {
            r->xmax = v;
            best = i;
        }
    }
    if (ncand == 0)
        return REEL_SAMPLE_BAD_ROW;
    if (r->cfg.temperature == 0.0f)
        return (int32_t)best; /* greedy: the argmax, in every kept set */
    r->scale = reel_sample_scale(r->cfg.temperature);
    const reel_hs_cut all = { false, 0, 0 };
    reel_hs_cut k = all, p = all;
    if (r->cfg.top_k > 0 && (uint64_t)r->cfg.top_k < reel_hs_above(r, &all, 0, false))
        k = reel_hs_select(r, &all, (uint64_t)r->cfg.top_k, false);
    if (r->cfg.top_p < 1.0f)
        p = reel_hs_select(r, &k, reel_sample_need(r->cfg.top_p, reel_hs_above(r, &k, 0, true)), true);
    /* The draw: the first token, in token order, whose running mass over the
     * kept set passes floor(u * total / 2^64). */
    uint64_t total = 0;
    for (int64_t pass = 0; pass < 2; pass++) {
        const uint64_t target = pass ? reel_sample_mulhi(reel_sample_uniform(rng), total) : 0;
        uint64_t run = 0;
        for (int64_t i = 0; i < r->n; i++) {
            const float v = reel_hs_load(r, i);
            if (!reel_hs_cand(r, v))
                continue;
            const uint32_t key = reel_sample_key(v);
            if (!reel_hs_in_cut(&k, key, i) || !reel_hs_in_cut(&p, key, i))
                continue;
            run += reel_hs_mass(r, v);
            if (pass && run > target)
                return (int32_t)i;
        }
        total = run; /* >= 2^40: the maximum is kept and weighs 1 */
    }
    return REEL_SAMPLE_BAD_ROW; /* not reached */
}

void reel_host_sample(const void *args)
{
    const reel_launch *l = args;
    const reel_shape *xs = &l->in_shape[0];
    const int64_t n = reel_shape_last(xs);
    if (n <= 0)
        return;
    const int64_t nrows = reel_hk_numel(xs, l->rows) / n;
    const float *prm = l->in[1];
    const int32_t *rng = l->in[2];
    int32_t *out = l->out[0];
    for (int64_t t = 0; t < nrows; t++) {
        reel_hs_row r = { .x = l->in[0], .dt = xs->dtype, .at = t * n, .n = n };
        out[t] = reel_hs_row_token(&r, prm + t * REEL_SAMPLE_PARAMS, rng + t * REEL_SAMPLE_RNG);
    }
}
