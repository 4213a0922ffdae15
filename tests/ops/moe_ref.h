/* The float64 MoE router of the tests (tests/ops/test_host_moe.c,
 * tests/runtime/test_moe_graph.c), written from docs/moe.md's rules, not
 * from ops/moe.h: a token's ids, weights, and how close its closest
 * decision came (float rounding may decide below that margin). NaN logits
 * are not used here. */
#ifndef REEL_TESTS_OPS_MOE_REF_H
#define REEL_TESTS_OPS_MOE_REF_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "reel/reel.h"

/* Ranks idx[0..n-1] by val descending, equal values by lower index
 * (insertion sort: stable, and the ids break ties). */
static inline void moe_rank_desc(const double *val, int *idx, int n)
{
    for (int i = 0; i < n; i++)
        idx[i] = i;
    for (int i = 1; i < n; i++) {
        int v = idx[i], j = i - 1;
        while (j >= 0 && val[idx[j]] < val[v]) {
            idx[j + 1] = idx[j];
            j--;
        }
        idx[j + 1] = v;
    }
}

/* The smallest nonzero gap between neighbours among the first m + 1 of a
 * ranking. */
static inline double moe_min_gap(const double *val, const int *idx, int n, int m)
{
    double g = INFINITY;
    for (int i = 0; i < m && i + 1 < n; i++) {
        double d = val[idx[i]] - val[idx[i + 1]];
        if (d != 0.0 && d < g)
            g = d;
    }
    return g;
}

/* One token's routing; returns the margin. */
static inline double moe_ref_route(const reel_moe_params *p, const float *bias, const double *l, int32_t *ids, double *w)
{
    const int E = p->num_experts, K = p->top_k, ng = p->n_group > 1 ? p->n_group : 0;
    const bool sig = p->scoring == REEL_MOE_SIGMOID;
    double s[REEL_MOE_MAX_EXPERTS], v[REEL_MOE_MAX_EXPERTS], sel[REEL_MOE_MAX_EXPERTS];
    double gsc[REEL_MOE_MAX_EXPERTS], mx = -INFINITY, sum = 0, margin = INFINITY;
    int idx[REEL_MOE_MAX_EXPERTS];
    for (int e = 0; e < E; e++)
        mx = l[e] > mx ? l[e] : mx;
    for (int e = 0; e < E; e++)
        sum += exp(l[e] - mx);
    for (int e = 0; e < E; e++) {
        s[e] = sig ? 1.0 / (1.0 + exp(-l[e])) : exp(l[e] - mx) / sum;
        v[e] = sig && bias ? s[e] + bias[e] : s[e];
        sel[e] = sig ? v[e] : l[e];
    }
    if (ng) {
        const int gs = E / ng;
        for (int g = 0; g < ng; g++) {
            double a = -INFINITY, b = -INFINITY;
            for (int e = g * gs; e < (g + 1) * gs; e++) {
                if (v[e] > a) {
                    b = a;
                    a = v[e];
                } else if (v[e] > b) {
                    b = v[e];
                }
            }
            gsc[g] = a + b;
        }
        moe_rank_desc(gsc, idx, ng);
        double gm = moe_min_gap(gsc, idx, ng, p->topk_group);
        margin = gm < margin ? gm : margin;
        bool kept[REEL_MOE_MAX_EXPERTS] = { false };
        for (int r = 0; r < p->topk_group; r++)
            kept[idx[r]] = true;
        for (int e = 0; e < E; e++)
            if (!kept[e / gs])
                sel[e] = sig ? 0.0 : -INFINITY;
    }
    moe_rank_desc(sel, idx, E);
    double em = moe_min_gap(sel, idx, E, K);
    margin = em < margin ? em : margin;
    double tot = 0;
    for (int j = 0; j < K; j++) {
        ids[j] = idx[j];
        w[j] = s[idx[j]];
        tot += w[j];
    }
    for (int j = 0; j < K; j++) {
        if (p->renormalize)
            w[j] /= tot + (sig ? 1e-20 : 0.0);
        w[j] *= p->routed_scaling == 0.0f ? 1.0 : p->routed_scaling;
    }
    return margin;
}

#endif
