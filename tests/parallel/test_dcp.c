/* DCP on the host backend, ranks as threads: sharded attention
 * (reel_dcp_attention) equals monolithic attention (one rank, plain paged
 * attention, the same steps) within tolerance, with 1, 2, 4 and 8 ranks,
 * interleaves 1, 16 and the block size, both exchanges; over steps that mix
 * prefills, chunked prefills and decodes, contexts shorter than N * I and
 * of one token (empty shards), trailing padding tokens ((0, -inf)). Each
 * rank's cache starts as a sentinel: afterwards exactly the slots of the
 * positions it owns hold their keys and values, every other byte is the
 * sentinel (a read of one would have put NaN into an output). Replay ==
 * eager bitwise on every rank. Then the combine itself (permutation
 * invariance, NaN in empty partials) and the refusals of the validated
 * subset. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/builder.h"
#include "ops/attn_layout.h"
#include "tests/parallel/attn_steps.h"
#include "tests/parallel/ranks.h"

enum { H = 8, HKV = 2, DH = 16, BS = 32, PER = AS_MAXCTX / BS, SPARE = 3, NBLK = AS_MAXSEQ * PER + SPARE };
enum { NSTEPS = 8 };
#define SENTINEL 0x7fc0beefu /* a NaN no kernel writes */

/* Prefills, a chunked prefill growing sequence 3 past 256 (= 8 ranks x 32),
 * decodes, contexts of 1 and 5 tokens, trailing padding; buckets 64, 16, 4. */
static const struct {
    int nseq, seqs[AS_MAXSEQ], qlen[AS_MAXSEQ], npad;
} sched[NSTEPS] = {
    { 3, { 0, 1, 2 }, { 40, 5, 1 }, 2 },
    { 4, { 0, 1, 2, 3 }, { 1, 1, 1, 60 }, 0 },
    { 2, { 3, 0 }, { 60, 1 }, 1 },
    { 2, { 3, 4 }, { 40, 17 }, 0 },
    { 1, { 3 }, { 60 }, 3 },
    { 5, { 0, 1, 2, 3, 4 }, { 1, 1, 1, 1, 1 }, 0 },
    { 2, { 3, 1 }, { 1, 2 }, 1 },
    { 1, { 3 }, { 64 }, 0 },
};

typedef struct dcp_job {
    as_model m;
    as_step steps[NSTEPS];
    int n, interleave, exchange;
    int32_t bt[RK_MAX][AS_MAXSEQ * PER];
    /* per plan (0 replayed, 1 eager), rank, step */
    float *out[2][RK_MAX][NSTEPS], *lse[2][RK_MAX][NSTEPS];
    uint32_t *kc[2][RK_MAX], *vc[2][RK_MAX];
    uint64_t replays[RK_MAX];
} dcp_job;

static reel_dcp_layout layout_of(const dcp_job *j, int r)
{
    return (reel_dcp_layout){ REEL_DCP_LAYOUT_HEAD, j->n, r, j->interleave, j->exchange };
}

static reel_status dcp_plan(rk_world *w, int r, const dcp_job *j, bool eager, reel_plan **out)
{
    const as_model *m = &j->m;
    int hr = H / j->n;
    reel_graph *g = NULL;
    reel_status st = reel_graph_create(w->ctx[r], &g);
    if (st != REEL_OK)
        return st;
    int64_t qd[2] = { REEL_DIM_TOKENS, (int64_t)hr * DH }, kd[2] = { REEL_DIM_TOKENS, HKV * DH };
    int64_t cd[4] = { NBLK, BS, HKV, DH };
    reel_attn_params ap = { REEL_ATTN_PARAMS_HEAD, H, HKV, DH, BS, 0.0f };
    reel_dcp_layout d = layout_of(j, r);
    reel_tensor o, l;
    reel_dcp_attention(g, reel_input(g, "q", m->dt, 2, qd), reel_input(g, "k", m->dt, 2, kd),
                       reel_input(g, "v", m->dt, 2, kd), reel_state(g, "kc", m->dt, 4, cd),
                       reel_state(g, "vc", m->dt, 4, cd), &ap, &d, &o, &l);
    reel_output(g, "out", o);
    reel_output(g, "lse", l);
    reel_compile_opts co = REEL_COMPILE_OPTS_INIT;
    co.num_buckets = 3;
    co.buckets[0] = 4, co.buckets[1] = 16, co.buckets[2] = 64;
    co.max_context = AS_MAXCTX;
    co.max_seqs = AS_MAXSEQ;
    co.no_capture = eager;
    co.check_hazards = eager; /* every access declared, the collectives' included */
    co.comm = w->comm[r];
    st = reel_compile(g, &co, out);
    reel_graph_destroy(g);
    return st;
}

static reel_status fill_sentinel(reel_plan *p, size_t words)
{
    uint32_t *s = malloc(words * 4);
    for (size_t i = 0; i < words; i++)
        s[i] = SENTINEL;
    reel_status st = reel_plan_write_state(p, "kc", s, words * 4);
    if (st == REEL_OK)
        st = reel_plan_write_state(p, "vc", s, words * 4);
    free(s);
    return st;
}

/* This rank's columns of q (its heads). */
static void *q_slice(const dcp_job *j, const as_step *st, int r)
{
    int64_t hw = (int64_t)(H / j->n) * DH, qw = (int64_t)H * DH;
    float *q = malloc(sizeof(float) * (size_t)(st->n * hw));
    for (int32_t t = 0; t < st->n; t++)
        memcpy(q + t * hw, st->q + t * qw + r * hw, sizeof(float) * (size_t)hw);
    void *b = as_store(q, st->n * hw, j->m.dt);
    free(q);
    return b;
}

static reel_status dcp_step(reel_plan *p, const dcp_job *j, int r, int i, float **out, float **lse)
{
    const as_step *st = &j->steps[i];
    reel_dtype dt = j->m.dt;
    int hr = H / j->n;
    as_info info;
    as_info_make(&info, st, j->bt[r], PER, BS); /* DCP reads only the -1s of the slots */
    void *q = q_slice(j, st, r), *k = as_store(st->k, st->n * HKV * DH, dt), *v = as_store(st->v, st->n * HKV * DH, dt);
    reel_status s = as_run_step(p, &info, q, k, v, st->n);
    const void *y = NULL;
    int64_t rows = 0;
    *out = calloc((size_t)(st->n * hr * DH), sizeof(float));
    *lse = calloc((size_t)(st->n * hr), sizeof(float));
    if (s == REEL_OK && (s = reel_plan_output(p, "out", &y, &rows)) == REEL_OK)
        for (int64_t e = 0; e < st->n * hr * DH; e++)
            (*out)[e] = as_get(y, dt, e);
    if (s == REEL_OK && (s = reel_plan_output(p, "lse", &y, &rows)) == REEL_OK)
        memcpy(*lse, y, sizeof(float) * (size_t)(st->n * hr));
    free(q), free(k), free(v);
    return s;
}

static void dcp_body(rk_world *w, int r, void *arg)
{
    dcp_job *j = arg;
    reel_plan *p[2] = { NULL, NULL };
    size_t words = (size_t)NBLK * BS * HKV * DH * reel_dtype_size(j->m.dt) / 4;
    reel_status st = REEL_OK;
    for (int e = 0; e < 2 && st == REEL_OK; e++)
        if ((st = dcp_plan(w, r, j, e == 1, &p[e])) == REEL_OK)
            st = fill_sentinel(p[e], words);
    for (int i = 0; i < NSTEPS && st == REEL_OK; i++)
        for (int e = 0; e < 2 && st == REEL_OK; e++)
            st = dcp_step(p[e], j, r, i, &j->out[e][r][i], &j->lse[e][r][i]);
    for (int e = 0; e < 2 && st == REEL_OK; e++) {
        j->kc[e][r] = malloc(words * 4);
        j->vc[e][r] = malloc(words * 4);
        st = reel_plan_read_state(p[e], "kc", j->kc[e][r], words * 4);
        if (st == REEL_OK)
            st = reel_plan_read_state(p[e], "vc", j->vc[e][r], words * 4);
    }
    if (st == REEL_OK) {
        reel_plan_stats ps = REEL_PLAN_STATS_INIT;
        reel_plan_stats_get(p[0], &ps);
        j->replays[r] = ps.replays;
    }
    rk_note(w, r, st);
    reel_plan_destroy(p[0]);
    reel_plan_destroy(p[1]);
}

/* The monolithic outputs of every step: one rank, plain paged attention. */
static void mono_run(const dcp_job *j, float **out)
{
    reel_ctx *ctx = NULL;
    reel_ctx_opts co = REEL_CTX_OPTS_INIT;
    co.backend = REEL_BACKEND_HOST;
    cr_assert_eq(reel_ctx_create(&co, &ctx), REEL_OK);
    reel_plan *p = NULL;
    cr_assert_eq(as_mono_plan(ctx, &j->m, PER, SPARE, &p), REEL_OK, "%s", reel_ctx_last_error(ctx));
    int32_t bt[AS_MAXSEQ * PER];
    as_tables(bt, PER, SPARE, 99);
    for (int i = 0; i < NSTEPS; i++) {
        const as_step *st = &j->steps[i];
        as_info info;
        as_info_make(&info, st, bt, PER, BS);
        void *q = as_store(st->q, st->n * H * DH, j->m.dt), *k = as_store(st->k, st->n * HKV * DH, j->m.dt),
             *v = as_store(st->v, st->n * HKV * DH, j->m.dt);
        cr_assert_eq(reel_plan_set_input(p, "q", q, st->n), REEL_OK);
        cr_assert_eq(reel_plan_set_input(p, "k", k, st->n), REEL_OK);
        cr_assert_eq(reel_plan_set_input(p, "v", v, st->n), REEL_OK);
        cr_assert_eq(reel_step(p, &info.si), REEL_OK, "%s", reel_ctx_last_error(ctx));
        const void *y;
        int64_t rows;
        cr_assert_eq(reel_plan_output(p, "out", &y, &rows), REEL_OK);
        out[i] = malloc(sizeof(float) * (size_t)(st->n * H * DH));
        for (int64_t e = 0; e < st->n * H * DH; e++)
            out[i][e] = as_get(y, j->m.dt, e);
        free(q), free(k), free(v);
    }
    reel_plan_destroy(p);
    reel_ctx_destroy(ctx);
}

static void make_job(dcp_job *j, int n, int interleave, int exchange, reel_dtype dt)
{
    memset(j, 0, sizeof *j);
    j->n = n, j->interleave = interleave, j->exchange = exchange;
    as_model_init(&j->m, H, HKV, DH, BS, dt, 0x5eed + (uint64_t)n * 131 + (uint64_t)interleave);
    for (int i = 0; i < NSTEPS; i++)
        as_step_make(&j->m, &j->steps[i], sched[i].nseq, sched[i].seqs, sched[i].qlen, sched[i].npad);
    for (int r = 0; r < n; r++)
        as_tables(j->bt[r], PER, SPARE, 1000 + (uint64_t)r);
}

static void free_job(dcp_job *j)
{
    for (int e = 0; e < 2; e++)
        for (int r = 0; r < RK_MAX; r++) {
            for (int i = 0; i < NSTEPS; i++)
                free(j->out[e][r][i]), free(j->lse[e][r][i]);
            free(j->kc[e][r]), free(j->vc[e][r]);
        }
    for (int i = 0; i < NSTEPS; i++)
        as_step_free(&j->steps[i]);
    as_model_free(&j->m);
}

/* Rank r's cache holds exactly the positions it owns, at the slots of its
 * own block table; every other word is the sentinel. f32 only. */
static void check_cache(const dcp_job *j, int r, const uint32_t *cache, float *const *hist, const char *what)
{
    reel_dcp_view d = { j->n, r, j->interleave };
    int64_t kvw = HKV * DH, nslots = (int64_t)NBLK * BS;
    unsigned char *owned = calloc((size_t)nslots, 1);
    for (int s = 0; s < AS_MAXSEQ; s++) {
        int32_t ctx = j->m.ctx[s], nl = reel_dcp_local_count(d, ctx);
        for (int32_t li = 0; li < nl; li++) {
            int64_t slot = (int64_t)j->bt[r][s * PER + li / BS] * BS + li % BS;
            int64_t pos = reel_dcp_global_of(d, li);
            cr_assert_lt(pos, ctx);
            owned[slot] = 1;
            cr_assert(!memcmp(cache + slot * kvw, hist[s] + pos * kvw, sizeof(float) * (size_t)kvw),
                      "%s: rank %d slot %lld should hold sequence %d position %lld", what, r, (long long)slot, s,
                      (long long)pos);
        }
    }
    for (int64_t slot = 0; slot < nslots; slot++)
        for (int64_t e = 0; !owned[slot] && e < kvw; e++)
            cr_assert_eq(cache[slot * kvw + e], SENTINEL, "%s: rank %d wrote slot %lld, which it does not own", what,
                         r, (long long)slot);
    free(owned);
}

static void run_dcp(int n, int interleave, int exchange, reel_dtype dt)
{
    dcp_job *j = malloc(sizeof *j);
    make_job(j, n, interleave, exchange, dt);
    char what[96];
    snprintf(what, sizeof what, "DCP %d ranks, interleave %d, %s, %s", n, interleave,
             exchange == REEL_DCP_ALL_TO_ALL ? "all-to-all" : "all-gather + reduce-scatter", reel_dtype_name(dt));
    rk_world w;
    cr_assert_eq(rk_open(&w, n, 0), REEL_OK);
    rk_run(&w, dcp_body, j);
    for (int r = 0; r < n; r++) {
        cr_assert_eq(w.st[r], REEL_OK, "%s: rank %d: %s", what, r, w.msg[r]);
        cr_assert_eq(j->replays[r], NSTEPS, "%s: rank %d replayed %llu of %d steps", what, r,
                     (unsigned long long)j->replays[r], NSTEPS);
    }
    rk_close(&w);
    float *mono[NSTEPS];
    mono_run(j, mono);
    int hr = H / n;
    double atol = dt == REEL_F32 ? 2e-5 : 2e-2, ltol = dt == REEL_F32 ? 1e-4 : 1e-2;
    double ref[H * DH], rlse[H];
    for (int i = 0; i < NSTEPS; i++) {
        const as_step *st = &j->steps[i];
        for (int32_t t = 0; t < st->n; t++) {
            as_ref(&j->m, st, t, ref, rlse);
            for (int r = 0; r < n; r++) {
                const float *o = j->out[0][r][i] + t * hr * DH, *l = j->lse[0][r][i] + t * hr;
                for (int e = 0; e < hr * DH; e++) {
                    float want = mono[i][t * H * DH + r * hr * DH + e];
                    cr_assert(fabsf(o[e] - want) <= atol, "%s: step %d token %d rank %d elem %d: %g, monolithic %g",
                              what, i, t, r, e, (double)o[e], (double)want);
                    if (st->tseq[t] < 0)
                        cr_assert(o[e] == 0.0f && !signbit(o[e]), "%s: padding token %d: %g", what, t, (double)o[e]);
                }
                for (int h = 0; h < hr; h++) {
                    double want = rlse[r * hr + h];
                    if (st->tseq[t] < 0)
                        cr_assert(l[h] == -INFINITY, "%s: padding token %d lse %g", what, t, (double)l[h]);
                    else
                        cr_assert(fabs(l[h] - want) <= ltol * fmax(1.0, fabs(want)),
                                  "%s: step %d token %d rank %d head %d lse %g, want %g", what, i, t, r, h,
                                  (double)l[h], want);
                }
                cr_assert(!memcmp(j->out[0][r][i], j->out[1][r][i], sizeof(float) * (size_t)(st->n * hr * DH)) &&
                              !memcmp(j->lse[0][r][i], j->lse[1][r][i], sizeof(float) * (size_t)(st->n * hr)),
                          "%s: step %d rank %d: replay != eager", what, i, r);
            }
        }
        /* The reference agrees with the monolithic plan too. */
        for (int32_t t = 0; t < st->n; t++) {
            as_ref(&j->m, st, t, ref, rlse);
            for (int e = 0; e < H * DH; e++)
                cr_assert(fabs(mono[i][t * H * DH + e] - ref[e]) <= atol, "%s: monolithic step %d token %d", what, i,
                          t);
        }
    }
    for (int r = 0; r < n; r++) {
        size_t bytes = (size_t)NBLK * BS * HKV * DH * reel_dtype_size(dt);
        cr_assert(!memcmp(j->kc[0][r], j->kc[1][r], bytes) && !memcmp(j->vc[0][r], j->vc[1][r], bytes),
                  "%s: rank %d: the caches of replay and eager differ", what, r);
        if (dt == REEL_F32) {
            check_cache(j, r, j->kc[0][r], j->m.k, what);
            check_cache(j, r, j->vc[0][r], j->m.v, what);
        }
    }
    for (int i = 0; i < NSTEPS; i++)
        free(mono[i]);
    free_job(j);
    free(j);
}

static void run_interleaves(int n)
{
    static const int ils[] = { 1, 16, BS };
    for (size_t a = 0; a < sizeof ils / sizeof ils[0]; a++)
        for (int x = 0; x < 2; x++)
            run_dcp(n, ils[a], x, REEL_F32);
}

Test(dcp, one_rank_equals_monolithic_attention) { run_interleaves(1); }
Test(dcp, two_ranks_equal_monolithic_attention) { run_interleaves(2); }
Test(dcp, four_ranks_equal_monolithic_attention) { run_interleaves(4); }
Test(dcp, eight_ranks_equal_monolithic_attention) { run_interleaves(8); }

Test(dcp, bf16_over_four_ranks_equals_monolithic_attention_within_its_rounding)
{
    run_dcp(4, 16, REEL_DCP_ALL_TO_ALL, REEL_BF16);
    run_dcp(4, 16, REEL_DCP_GATHER_SCATTER, REEL_BF16);
}

/* ---- the combine ------------------------------------------------------- */

enum { CP_T = 3, CH = 4, CD = 5, CMAXP = 8 };

/* One rank's plan of one op over inputs "a" and "b" (lse_combine of P
 * partials, or lse_rescale as rank r of P). */
typedef struct comb {
    float outs[CP_T * CMAXP * CH * CD], lses[CP_T * CMAXP * CH];
} comb;

static void run_combine(reel_ctx *ctx, int np, const comb *c, float *out, float *lse)
{
    reel_graph *g = NULL;
    cr_assert_eq(reel_graph_create(ctx, &g), REEL_OK);
    int64_t od[] = { REEL_DIM_TOKENS, np, CH * CD }, ld[] = { REEL_DIM_TOKENS, np, CH };
    reel_tensor o, l;
    reel_lse_combine(g, reel_input(g, "a", REEL_F32, 3, od), reel_input(g, "b", REEL_F32, 3, ld), CH, &o, &l);
    reel_output(g, "o", o);
    reel_output(g, "l", l);
    reel_plan *p = NULL;
    cr_assert_eq(reel_compile(g, NULL, &p), REEL_OK, "%s", reel_ctx_last_error(ctx));
    reel_graph_destroy(g);
    cr_assert_eq(reel_plan_set_input(p, "a", c->outs, CP_T), REEL_OK);
    cr_assert_eq(reel_plan_set_input(p, "b", c->lses, CP_T), REEL_OK);
    reel_step_info s = { REEL_STEP_INFO_HEAD, .num_tokens = CP_T };
    cr_assert_eq(reel_step(p, &s), REEL_OK, "%s", reel_ctx_last_error(ctx));
    const void *y;
    int64_t rows;
    cr_assert_eq(reel_plan_output(p, "o", &y, &rows), REEL_OK);
    memcpy(out, y, sizeof(float) * CP_T * CH * CD);
    cr_assert_eq(reel_plan_output(p, "l", &y, &rows), REEL_OK);
    memcpy(lse, y, sizeof(float) * CP_T * CH);
    reel_plan_destroy(p);
}

/* Partials with empty ones ((NaN, -inf): a shard with no keys whose output
 * is garbage) and one row where every partial is empty. */
static void make_partials(comb *c, int np, uint64_t seed)
{
    uint64_t x = seed | 1;
    for (int t = 0; t < CP_T; t++)
        for (int p = 0; p < np; p++)
            for (int h = 0; h < CH; h++) {
                x ^= x << 13, x ^= x >> 7, x ^= x << 17;
                bool empty = t == 2 || (p + h + t) % 3 == 1;
                c->lses[(t * np + p) * CH + h] = empty ? -INFINITY : (float)(x % 1000) / 100.0f - 5.0f;
                for (int d = 0; d < CD; d++)
                    c->outs[((t * np + p) * CH + h) * CD + d] = empty ? NAN : (float)((x >> (8 + d)) % 200) / 100.0f - 1.0f;
            }
}

Test(dcp, the_combine_is_permutation_invariant_and_empty_partials_add_exactly_zero)
{
    reel_ctx *ctx = NULL;
    reel_ctx_opts co = REEL_CTX_OPTS_INIT;
    co.backend = REEL_BACKEND_HOST;
    cr_assert_eq(reel_ctx_create(&co, &ctx), REEL_OK);
    for (int np = 2; np <= CMAXP; np *= 2) {
        comb c, pc;
        make_partials(&c, np, (uint64_t)np * 77);
        float o[CP_T * CH * CD], l[CP_T * CH], po[CP_T * CH * CD], pl[CP_T * CH];
        run_combine(ctx, np, &c, o, l);
        for (int k = 0; k < 4; k++) {
            int perm[CMAXP];
            for (int p = 0; p < np; p++)
                perm[p] = (p * (2 * k + 1) + k) % np; /* odd strides: a permutation of np = 2^m */
            for (int t = 0; t < CP_T; t++)
                for (int p = 0; p < np; p++) {
                    memcpy(&pc.lses[(t * np + perm[p]) * CH], &c.lses[(t * np + p) * CH], sizeof(float) * CH);
                    memcpy(&pc.outs[(t * np + perm[p]) * CH * CD], &c.outs[(t * np + p) * CH * CD],
                           sizeof(float) * CH * CD);
                }
            run_combine(ctx, np, &pc, po, pl);
            for (int i = 0; i < CP_T * CH * CD; i++) {
                cr_assert(isfinite(o[i]), "%d partials: element %d is %g", np, i, (double)o[i]);
                cr_assert(fabsf(o[i] - po[i]) <= 1e-6f, "%d partials, permutation %d: %g vs %g", np, k,
                          (double)o[i], (double)po[i]);
            }
            for (int i = 0; i < CP_T * CH; i++)
                cr_assert(l[i] == pl[i] || fabsf(l[i] - pl[i]) <= 1e-6f, "%d partials: lse %g vs %g", np,
                          (double)l[i], (double)pl[i]);
        }
        /* the all-empty row: (0, -inf) */
        for (int i = 2 * CH * CD; i < 3 * CH * CD; i++)
            cr_assert(o[i] == 0.0f, "all-empty row: %g", (double)o[i]);
        for (int i = 2 * CH; i < 3 * CH; i++)
            cr_assert(l[i] == -INFINITY);
    }
    reel_ctx_destroy(ctx);
}

/* Each rank's lse_rescale term (from the all-gathered lses), summed over
 * ranks, is the combine, and the lse of the rank's heads is the combined
 * lse; and the packed combine (what the all-to-all delivers) is the same
 * combine: both exchanges compute one thing. */
typedef struct rescale_job {
    int n;
    comb c;
    float scaled[RK_MAX][CP_T * CH * CD], lse[RK_MAX][CP_T * CH], packed_out[RK_MAX][CP_T * CH * CD],
        packed_lse[RK_MAX][CP_T * CH];
} rescale_job;

static void rescale_body(rk_world *w, int r, void *arg)
{
    rescale_job *j = arg;
    int n = j->n, hr = CH / n;
    reel_graph *g = NULL;
    reel_status st = reel_graph_create(w->ctx[r], &g);
    int64_t od[] = { REEL_DIM_TOKENS, CH * CD }, ld[] = { REEL_DIM_TOKENS, CH };
    reel_tensor part = reel_input(g, "out", REEL_F32, 2, od), plse = reel_input(g, "lse", REEL_F32, 2, ld);
    reel_op_attrs a;
    memset(&a, 0, sizeof a);
    a.dcp.num_heads = CH, a.dcp.nranks = n, a.dcp.rank = r;
    reel_tensor res[REEL_OP_MAX_OUT] = { { 0 } };
    uint32_t in[REEL_OP_MAX_IN] = { part.id, reel_all_gather(g, plse, 1, n).id };
    reel_graph_add_op(g, REEL_OP_LSE_RESCALE, in, 0, &a, res);
    reel_output(g, "scaled", res[0]);
    reel_output(g, "lse_r", res[1]);
    uint32_t pin[REEL_OP_MAX_IN] = { part.id, plse.id };
    reel_tensor packed[REEL_OP_MAX_OUT] = { { 0 } };
    reel_graph_add_op(g, REEL_OP_LSE_PACK, pin, 0, &a, packed);
    reel_tensor o, l;
    reel_graph_lse_combine_packed(g, reel_all_to_all(g, packed[0], 1, n), hr, REEL_F32, &o, &l);
    reel_output(g, "po", o);
    reel_output(g, "pl", l);
    reel_compile_opts co = REEL_COMPILE_OPTS_INIT;
    co.comm = w->comm[r];
    reel_plan *p = NULL;
    if (st == REEL_OK)
        st = reel_compile(g, &co, &p);
    reel_graph_destroy(g);
    /* rank r's partial is partial r of the combine's input */
    float mo[CP_T * CH * CD], ml[CP_T * CH];
    for (int t = 0; t < CP_T; t++) {
        memcpy(mo + t * CH * CD, &j->c.outs[(t * n + r) * CH * CD], sizeof(float) * CH * CD);
        memcpy(ml + t * CH, &j->c.lses[(t * n + r) * CH], sizeof(float) * CH);
    }
    if (st == REEL_OK)
        st = reel_plan_set_input(p, "out", mo, CP_T);
    if (st == REEL_OK)
        st = reel_plan_set_input(p, "lse", ml, CP_T);
    reel_step_info s = { REEL_STEP_INFO_HEAD, .num_tokens = CP_T };
    if (st == REEL_OK)
        st = reel_step(p, &s);
    const void *y;
    int64_t rows;
    static const char *const names[4] = { "scaled", "lse_r", "po", "pl" };
    float *dst[4] = { j->scaled[r], j->lse[r], j->packed_out[r], j->packed_lse[r] };
    size_t bytes[4] = { sizeof j->scaled[r], sizeof(float) * CP_T * hr, sizeof(float) * CP_T * hr * CD,
                        sizeof(float) * CP_T * hr };
    for (int k = 0; k < 4 && st == REEL_OK; k++)
        if ((st = reel_plan_output(p, names[k], &y, &rows)) == REEL_OK)
            memcpy(dst[k], y, bytes[k]);
    rk_note(w, r, st);
    reel_plan_destroy(p);
}

Test(dcp, both_exchanges_compute_the_combine_over_2_and_4_ranks)
{
    reel_ctx *ctx = NULL;
    reel_ctx_opts co = REEL_CTX_OPTS_INIT;
    co.backend = REEL_BACKEND_HOST;
    cr_assert_eq(reel_ctx_create(&co, &ctx), REEL_OK);
    for (int n = 2; n <= 4; n *= 2) {
        rescale_job *j = calloc(1, sizeof *j);
        j->n = n;
        make_partials(&j->c, n, 31 + (uint64_t)n);
        float o[CP_T * CH * CD], l[CP_T * CH];
        run_combine(ctx, n, &j->c, o, l);
        rk_world w;
        cr_assert_eq(rk_open(&w, n, 0), REEL_OK);
        rk_run(&w, rescale_body, j);
        int hr = CH / n;
        for (int r = 0; r < n; r++)
            cr_assert_eq(w.st[r], REEL_OK, "rank %d: %s", r, w.msg[r]);
        for (int t = 0; t < CP_T; t++)
            for (int h = 0; h < CH; h++) {
                int owner = h / hr, hh = h % hr;
                for (int d = 0; d < CD; d++) {
                    float sum = 0.0f;
                    for (int r = 0; r < n; r++)
                        sum += j->scaled[r][(t * CH + h) * CD + d];
                    float want = o[(t * CH + h) * CD + d];
                    cr_assert(isfinite(sum) && fabsf(sum - want) <= 1e-6f, "%d ranks t %d h %d: rescaled sum %g, combine %g",
                              n, t, h, (double)sum, (double)want);
                    cr_assert(j->packed_out[owner][(t * hr + hh) * CD + d] == want,
                              "%d ranks: the packed combine differs from the combine", n);
                }
                float wl = l[t * CH + h];
                cr_assert(j->lse[owner][t * hr + hh] == wl || fabsf(j->lse[owner][t * hr + hh] - wl) <= 1e-6f);
                cr_assert(j->packed_lse[owner][t * hr + hh] == wl);
            }
        rk_close(&w);
        free(j);
    }
    reel_ctx_destroy(ctx);
}

/* ---- the validated subset ---------------------------------------------- */

typedef struct refuse_case {
    int h, n, interleave, comm_n; /* comm_n 0: compile without a communicator */
    int rank;                     /* the layout's rank (the world's rank is 0) */
    const char *want;
} refuse_case;

static void check_refusal(const refuse_case *c, bool at_build)
{
    rk_world w;
    int cn = c->comm_n > 0 ? c->comm_n : 1;
    cr_assert_eq(rk_open(&w, cn, 2000), REEL_OK);
    reel_ctx *ctx = w.ctx[0];
    reel_graph *g = NULL;
    cr_assert_eq(reel_graph_create(ctx, &g), REEL_OK);
    int64_t qd[2] = { REEL_DIM_TOKENS, (int64_t)(c->h / c->n) * 8 }, kd[2] = { REEL_DIM_TOKENS, 8 };
    int64_t cd[4] = { 8, 16, 1, 8 };
    reel_attn_params ap = { REEL_ATTN_PARAMS_HEAD, c->h, 1, 8, 16, 0.0f };
    reel_dcp_layout d = { REEL_DCP_LAYOUT_HEAD, c->n, c->rank, c->interleave, REEL_DCP_ALL_TO_ALL };
    reel_tensor o, l;
    reel_status st =
        reel_dcp_attention(g, reel_input(g, "q", REEL_F32, 2, qd), reel_input(g, "k", REEL_F32, 2, kd),
                           reel_input(g, "v", REEL_F32, 2, kd), reel_state(g, "kc", REEL_F32, 4, cd),
                           reel_state(g, "vc", REEL_F32, 4, cd), &ap, &d, &o, &l);
    if (at_build) {
        cr_assert_eq(st, REEL_E_UNSUPPORTED, "%s", c->want);
        cr_assert(strstr(reel_ctx_last_error(ctx), c->want), "%s", reel_ctx_last_error(ctx));
        cr_assert_eq(o.id, 0);
    } else {
        cr_assert_eq(st, REEL_OK, "%s", reel_ctx_last_error(ctx));
        reel_output(g, "o", o);
        /* The other ranks never compile: their group is broken first, so
         * rank 0's failed compile does not wait for them to agree. */
        for (int r = 1; r < w.n; r++)
            reel_comm_abort(w.comm[r]);
        reel_compile_opts co = REEL_COMPILE_OPTS_INIT;
        co.comm = c->comm_n > 0 ? w.comm[0] : NULL;
        reel_plan *p = NULL;
        st = reel_compile(g, &co, &p);
        cr_assert_neq(st, REEL_OK);
        cr_assert_null(p);
        cr_assert(strstr(reel_ctx_last_error(ctx), c->want), "want '%s', got '%s'", c->want,
                  reel_ctx_last_error(ctx));
    }
    reel_graph_destroy(g);
    rk_close(&w);
}

Test(dcp, layouts_outside_the_validated_subset_are_refused_naming_the_limit)
{
    static const refuse_case build[] = {
        { 6, 4, 1, 4, 0, "dcp_attention (node 0): DCP: num_heads 6 is not a multiple of the 4 ranks" },
        { 6, 3, 1, 3, 0, "DCP over 3 ranks is outside the validated subset (1, 2, 4 or 8 ranks)" },
        { 16, 16, 1, 1, 0, "DCP over 16 ranks is outside the validated subset" },
        { 8, 2, 3, 2, 0, "DCP: interleave 3 must be a power of two dividing block_size 16" },
        { 8, 2, 32, 2, 0, "DCP: interleave 32 must be a power of two dividing block_size 16" },
    };
    for (size_t i = 0; i < sizeof build / sizeof build[0]; i++)
        check_refusal(&build[i], true);
    static const refuse_case compile[] = {
        { 8, 2, 16, 4, 0,
          "compile: op 'paged_attention' (node 1 -> 'paged_attention#1') is laid out by DCP over 2 ranks, the "
          "communicator has 4" },
        { 8, 2, 16, 2, 1, "is DCP rank 1, the communicator's rank is 0" },
        { 8, 2, 16, 0, 0, "is laid out by DCP over 2 ranks and needs a communicator: set reel_compile_opts.comm" },
    };
    for (size_t i = 0; i < sizeof compile / sizeof compile[0]; i++)
        check_refusal(&compile[i], false);
}

/* Nodes built another way are held to the subset at compile too: DCP with
 * CP, and a DCP node beside a plain one. */
Test(dcp, dcp_with_cp_and_dcp_beside_plain_attention_are_refused_at_compile)
{
    rk_world w;
    cr_assert_eq(rk_open(&w, 1, 2000), REEL_OK);
    for (int k = 0; k < 2; k++) {
        reel_graph *g = NULL;
        cr_assert_eq(reel_graph_create(w.ctx[0], &g), REEL_OK);
        int64_t qd[2] = { REEL_DIM_TOKENS, 16 }, cd[4] = { 8, 16, 1, 8 }, sd[2] = { REEL_DIM_TOKENS, 1 };
        reel_attn_params ap = { REEL_ATTN_PARAMS_HEAD, 2, 1, 8, 16, 0.0f };
        reel_tensor q = reel_input(g, "q", REEL_F32, 2, qd), kv = reel_input(g, "k", REEL_F32, 2, (int64_t[]){ REEL_DIM_TOKENS, 8 });
        reel_tensor kc = reel_state(g, "kc", REEL_F32, 4, cd), vc = reel_state(g, "vc", REEL_F32, 4, cd);
        reel_attn_layout lay = { .dcp = 1, .interleave = 1, .cp = k == 0 ? 1 : 0, .lse = true };
        uint32_t in[REEL_OP_MAX_IN] = { q.id, kv.id, kv.id, kc.id, vc.id,
                                        k == 0 ? reel_input(g, "s", REEL_I32, 2, sd).id : 0 };
        reel_tensor lse;
        reel_tensor o = reel_graph_paged_attention(g, in, &ap, &lay, &lse);
        cr_assert_neq(o.id, 0, "%s", reel_ctx_last_error(w.ctx[0]));
        reel_output(g, "o", o);
        if (k == 1)
            reel_output(g, "plain", reel_paged_attention(g, q, kv, kv, kc, vc, &ap));
        reel_compile_opts co = REEL_COMPILE_OPTS_INIT;
        co.comm = w.comm[0];
        reel_plan *p = NULL;
        cr_assert_eq(reel_compile(g, &co, &p), REEL_E_UNSUPPORTED);
        const char *want = k == 0 ? "DCP (1 ranks) and CP (1 ranks) together are outside the validated subset"
                                  : "the attention ops of a plan share one DCP layout, or none has one";
        cr_assert(strstr(reel_ctx_last_error(w.ctx[0]), want), "%s", reel_ctx_last_error(w.ctx[0]));
        reel_graph_destroy(g);
    }
    rk_close(&w);
}

/* With one rank the layout changes nothing: DCP equals plain attention
 * bitwise (f32: the weights are exactly 1). */
Test(dcp, one_rank_is_plain_attention_bitwise)
{
    dcp_job *j = malloc(sizeof *j);
    make_job(j, 1, 16, REEL_DCP_GATHER_SCATTER, REEL_F32);
    rk_world w;
    cr_assert_eq(rk_open(&w, 1, 0), REEL_OK);
    rk_run(&w, dcp_body, j);
    cr_assert_eq(w.st[0], REEL_OK, "%s", w.msg[0]);
    rk_close(&w);
    float *mono[NSTEPS];
    mono_run(j, mono);
    for (int i = 0; i < NSTEPS; i++) {
        cr_assert(!memcmp(mono[i], j->out[0][0][i], sizeof(float) * (size_t)(j->steps[i].n * H * DH)),
                  "step %d differs", i);
        free(mono[i]);
    }
    free_job(j);
    free(j);
}
