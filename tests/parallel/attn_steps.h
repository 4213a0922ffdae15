/* Attention steps for the layout tests (test_dcp.c, test_cp.c): sequences
 * whose keys and values are kept by position (the truth a cache of any
 * layout must hold), steps of new tokens over them with random q, k, v, a
 * float64 reference of each token's attention (output and log-sum-exp),
 * scattered block tables, and a single-rank plan of plain paged attention
 * (the monolithic attention the layouts must equal). */
#ifndef REEL_TESTS_PARALLEL_ATTN_STEPS_H
#define REEL_TESTS_PARALLEL_ATTN_STEPS_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "reel/reel.h"

enum { AS_MAXSEQ = 6, AS_MAXT = 128, AS_MAXCTX = 512 };

typedef struct as_model {
    int h, hkv, dh, bs;
    reel_dtype dt;
    int32_t ctx[AS_MAXSEQ];               /* context of each sequence so far */
    float *k[AS_MAXSEQ], *v[AS_MAXSEQ];   /* [AS_MAXCTX][hkv*dh] by position */
    uint64_t rng;
} as_model;

/* One step as one rank without a layout sees it: num_tokens tokens (the
 * last npad of them padding: after every sequence's), q, k, v. */
typedef struct as_step {
    int32_t n, nseq, npad;
    int32_t qs[AS_MAXSEQ + 1], seq[AS_MAXSEQ], ctx[AS_MAXSEQ];
    int32_t pos[AS_MAXT], tseq[AS_MAXT];  /* tseq: model sequence, -1 padding */
    float *q, *k, *v;                     /* [n][h*dh], [n][hkv*dh] */
} as_step;

static inline int64_t as_kvw(const as_model *m) { return (int64_t)m->hkv * m->dh; }
static inline int64_t as_qw(const as_model *m) { return (int64_t)m->h * m->dh; }

static inline float as_rand(as_model *m)
{
    m->rng ^= m->rng << 13;
    m->rng ^= m->rng >> 7;
    m->rng ^= m->rng << 17;
    float u = (float)((m->rng >> 11) % 2000001) / 1000000.0f - 1.0f; /* [-1, 1] */
    return reel_round_to(m->dt, u);
}

static inline void as_model_init(as_model *m, int h, int hkv, int dh, int bs, reel_dtype dt, uint64_t seed)
{
    memset(m, 0, sizeof *m);
    m->h = h, m->hkv = hkv, m->dh = dh, m->bs = bs, m->dt = dt, m->rng = seed | 1;
    for (int s = 0; s < AS_MAXSEQ; s++) {
        m->k[s] = calloc((size_t)(AS_MAXCTX * as_kvw(m)), sizeof(float));
        m->v[s] = calloc((size_t)(AS_MAXCTX * as_kvw(m)), sizeof(float));
    }
}

static inline void as_model_free(as_model *m)
{
    for (int s = 0; s < AS_MAXSEQ; s++)
        free(m->k[s]), free(m->v[s]);
}

/* The next step: qlen[i] new tokens of sequence seqs[i] (its next
 * positions), then npad padding tokens. */
static inline void as_step_make(as_model *m, as_step *st, int nseq, const int *seqs, const int *qlen, int npad)
{
    memset(st, 0, sizeof *st);
    st->nseq = nseq;
    st->npad = npad;
    int32_t t = 0;
    for (int i = 0; i < nseq; i++) {
        int s = seqs[i];
        st->qs[i] = t;
        st->seq[i] = s;
        for (int j = 0; j < qlen[i]; j++, t++) {
            st->pos[t] = m->ctx[s] + j;
            st->tseq[t] = s;
        }
        st->ctx[i] = m->ctx[s] + qlen[i];
    }
    st->qs[nseq] = t;
    for (int j = 0; j < npad; j++, t++) {
        st->pos[t] = 0;
        st->tseq[t] = -1;
    }
    st->n = t;
    st->q = malloc(sizeof(float) * (size_t)(t * as_qw(m)));
    st->k = malloc(sizeof(float) * (size_t)(t * as_kvw(m)));
    st->v = malloc(sizeof(float) * (size_t)(t * as_kvw(m)));
    for (int64_t i = 0; i < t * as_qw(m); i++)
        st->q[i] = as_rand(m);
    for (int64_t i = 0; i < t * as_kvw(m); i++) {
        st->k[i] = as_rand(m);
        st->v[i] = as_rand(m);
    }
    for (int32_t r = 0; r < st->n; r++)
        if (st->tseq[r] >= 0) {
            memcpy(m->k[st->tseq[r]] + st->pos[r] * as_kvw(m), st->k + r * as_kvw(m), sizeof(float) * (size_t)as_kvw(m));
            memcpy(m->v[st->tseq[r]] + st->pos[r] * as_kvw(m), st->v + r * as_kvw(m), sizeof(float) * (size_t)as_kvw(m));
        }
    for (int i = 0; i < nseq; i++)
        m->ctx[seqs[i]] = st->ctx[i];
}

static inline void as_step_free(as_step *st)
{
    free(st->q), free(st->k), free(st->v);
}

/* Token t's attention in float64 over its keys 0 .. pos (the model's
 * history): out [h*dh] and lse [h]; zeros and -inf for padding. */
static inline void as_ref(const as_model *m, const as_step *st, int32_t t, double *out, double *lse)
{
    int s = st->tseq[t], group = m->h / m->hkv;
    double scale = 1.0 / sqrt((double)m->dh);
    for (int h = 0; h < m->h; h++) {
        double *o = out + (int64_t)h * m->dh;
        memset(o, 0, sizeof(double) * (size_t)m->dh);
        lse[h] = -INFINITY;
        if (s < 0)
            continue;
        const float *qv = st->q + t * as_qw(m) + h * m->dh;
        double mx = -INFINITY, sum = 0, w[AS_MAXCTX];
        for (int j = 0; j <= st->pos[t]; j++) {
            const float *kv = m->k[s] + j * as_kvw(m) + (h / group) * m->dh;
            double d = 0;
            for (int e = 0; e < m->dh; e++)
                d += (double)qv[e] * kv[e];
            w[j] = d * scale;
            mx = fmax(mx, w[j]);
        }
        for (int j = 0; j <= st->pos[t]; j++)
            sum += (w[j] = exp(w[j] - mx));
        for (int j = 0; j <= st->pos[t]; j++) {
            const float *vv = m->v[s] + j * as_kvw(m) + (h / group) * m->dh;
            for (int e = 0; e < m->dh; e++)
                o[e] += w[j] / sum * vv[e];
        }
        lse[h] = mx + log(sum);
    }
}

/* Block tables of one cache: every sequence gets `per` blocks, scattered
 * over a pool of nseq * per + spare blocks by a seeded permutation (the
 * spare ones no table names). */
static inline void as_tables(int32_t *bt, int per, int spare, uint64_t seed)
{
    int nb = AS_MAXSEQ * per + spare;
    int32_t *perm = malloc(sizeof(int32_t) * (size_t)nb);
    for (int i = 0; i < nb; i++)
        perm[i] = i;
    uint64_t x = seed | 1;
    for (int i = nb - 1; i > 0; i--) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        int j = (int)(x % (uint64_t)(i + 1));
        int32_t y = perm[i];
        perm[i] = perm[j], perm[j] = y;
    }
    memcpy(bt, perm, sizeof(int32_t) * (size_t)(AS_MAXSEQ * per));
    free(perm);
}

/* One step's metadata for a rank: the sequences of st (their block-table
 * rows from bt, stride per), the slots of slot_of(t) (may be NULL: the
 * table's slot of each token's position), -1 for padding. */
typedef struct as_info {
    reel_step_info si;
    int32_t slot[AS_MAXT], bt[AS_MAXSEQ * 32];
} as_info;

static inline void as_info_make(as_info *in, const as_step *st, const int32_t *bt, int per, int bs)
{
    memset(in, 0, sizeof *in);
    for (int i = 0; i < st->nseq; i++)
        memcpy(in->bt + i * per, bt + st->seq[i] * per, sizeof(int32_t) * (size_t)per);
    for (int32_t t = 0; t < st->n; t++) {
        int s = st->tseq[t];
        in->slot[t] = s < 0 ? -1 : bt[s * per + st->pos[t] / bs] * bs + st->pos[t] % bs;
    }
    in->si = (reel_step_info){ REEL_STEP_INFO_HEAD, st->n, st->nseq, st->qs, st->pos, in->slot, st->ctx, in->bt, per };
}

/* A single-rank plan of plain paged attention over a cache of `per` blocks
 * a sequence (+ spare): "q", "k", "v" in, "out" out. */
static inline reel_status as_mono_plan(reel_ctx *ctx, const as_model *m, int per, int spare, reel_plan **out)
{
    reel_graph *g = NULL;
    reel_status st = reel_graph_create(ctx, &g);
    if (st != REEL_OK)
        return st;
    int64_t qd[2] = { REEL_DIM_TOKENS, as_qw(m) }, kd[2] = { REEL_DIM_TOKENS, as_kvw(m) };
    int64_t cd[4] = { AS_MAXSEQ * per + spare, m->bs, m->hkv, m->dh };
    reel_attn_params ap = { REEL_ATTN_PARAMS_HEAD, m->h, m->hkv, m->dh, m->bs, 0.0f };
    reel_output(g, "out",
                reel_paged_attention(g, reel_input(g, "q", m->dt, 2, qd), reel_input(g, "k", m->dt, 2, kd),
                                     reel_input(g, "v", m->dt, 2, kd), reel_state(g, "kc", m->dt, 4, cd),
                                     reel_state(g, "vc", m->dt, 4, cd), &ap));
    reel_compile_opts o = REEL_COMPILE_OPTS_INIT;
    o.num_buckets = 3;
    o.buckets[0] = 4, o.buckets[1] = 16, o.buckets[2] = AS_MAXT;
    o.max_context = AS_MAXCTX;
    o.max_seqs = AS_MAXSEQ;
    st = reel_compile(g, &o, out);
    reel_graph_destroy(g);
    return st;
}

/* Element i of a buffer of dtype dt, as float. */
static inline float as_get(const void *p, reel_dtype dt, int64_t i) { return reel_load(p, dt, i); }

/* Copies n floats into a buffer of dtype dt (malloc'd). */
static inline void *as_store(const float *src, int64_t n, reel_dtype dt)
{
    void *b = malloc((size_t)n * reel_dtype_size(dt));
    for (int64_t i = 0; i < n; i++)
        reel_store(b, dt, i, src[i]);
    return b;
}

/* One step of a plan whose inputs are q, k and v (n rows each). */
static inline reel_status as_run_step(reel_plan *p, const as_info *info, const void *q, const void *k, const void *v,
                                      int32_t n)
{
    reel_status s = reel_plan_set_input(p, "q", q, n);
    if (s == REEL_OK)
        s = reel_plan_set_input(p, "k", k, n);
    if (s == REEL_OK)
        s = reel_plan_set_input(p, "v", v, n);
    return s == REEL_OK ? reel_step(p, &info->si) : s;
}

#endif
