/* DCP multi-head latent attention on the host backend, ranks as threads:
 * sharded MLA (reel_dcp_mla_attention: each rank its H/N heads' q_lat and
 * q, the same c and k_pe, its own cache pages) equals monolithic MLA (one
 * rank, plain reel_mla_attention, the same steps) within tolerance, with
 * 1, 2, 4 and 8 ranks, interleaves 1, 16 and the block size, both
 * exchanges; over the steps of test_dcp.c (prefills, chunked prefills,
 * decodes, contexts of 1 and 5 tokens: empty shards, trailing padding:
 * exactly (0, -inf)); the lse against float64. Each rank's cache starts as
 * a NaN sentinel: afterwards exactly the slots of the positions it owns
 * hold [c | k_pe], every other byte is the sentinel. Replay == eager
 * bitwise on every rank. Then the refusals of the validated subset, the
 * same statuses and limits as reel_dcp_attention's, and a plan mixing a
 * DCP node with a plain one.
 *
 * The steps are attn_steps.h's over one kv head of width L + R: a key row
 * is the cache row [c | k_pe], and head h's query row [q_lat_h | q_pe_h]
 * (the keys' values are unused; MLA's value is the row's first L). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/builder.h"
#include "ops/attn_layout.h"
#include "reel/parallel.h"
#include "tests/parallel/attn_steps.h"
#include "tests/parallel/ranks.h"

enum { H = 8, L = 32, R = 8, NOPE = 16, DQ = NOPE + R, ROW = L + R };
enum { BS = 32, PER = AS_MAXCTX / BS, SPARE = 3, NBLK = AS_MAXSEQ * PER + SPARE, NSTEPS = 8 };
#define SENTINEL32 0x7fc0beefu /* f32 NaNs no kernel writes */
#define SENTINEL16 0x7fc1u     /* bf16 */

/* test_dcp.c's schedule: sequence 3 grows past 256 (= 8 ranks x 32). */
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

static float mla_scale(void) { return (float)(1.0 / sqrt((double)DQ)); }

static reel_mla_params mla_params(void)
{
    reel_mla_params p = REEL_MLA_PARAMS_INIT;
    p.num_heads = H, p.latent_dim = L, p.rope_dim = R, p.block_size = BS, p.scale = mla_scale();
    return p;
}

/* A step's inputs for heads h0 .. h0+nh-1, in the model's dtype: q_lat
 * [n, nh*L], q [n, nh*DQ] (each head's no-rope part NaN: MLA reads only the
 * last R), c [n, L] and k_pe [n, R]. */
typedef struct ml_in {
    void *qlat, *q, *c, *kpe;
} ml_in;

static ml_in ml_inputs(const as_model *m, const as_step *st, int h0, int nh)
{
    int64_t n = st->n;
    float *ql = malloc(sizeof(float) * (size_t)(n * nh * L)), *q = malloc(sizeof(float) * (size_t)(n * nh * DQ));
    float *c = malloc(sizeof(float) * (size_t)(n * L)), *kpe = malloc(sizeof(float) * (size_t)(n * R));
    for (int64_t t = 0; t < n; t++) {
        for (int h = 0; h < nh; h++) {
            const float *src = st->q + t * as_qw(m) + (int64_t)(h0 + h) * ROW;
            memcpy(ql + (t * nh + h) * L, src, sizeof(float) * L);
            for (int e = 0; e < NOPE; e++)
                q[(t * nh + h) * DQ + e] = NAN;
            memcpy(q + (t * nh + h) * DQ + NOPE, src + L, sizeof(float) * R);
        }
        memcpy(c + t * L, st->k + t * ROW, sizeof(float) * L);
        memcpy(kpe + t * R, st->k + t * ROW + L, sizeof(float) * R);
    }
    ml_in in = { as_store(ql, n * nh * L, m->dt), as_store(q, n * nh * DQ, m->dt), as_store(c, n * L, m->dt),
                 as_store(kpe, n * R, m->dt) };
    free(ql), free(q), free(c), free(kpe);
    return in;
}

static void ml_free(ml_in *in) { free(in->qlat), free(in->q), free(in->c), free(in->kpe); }

static reel_status ml_set(reel_plan *p, const ml_in *in, int32_t n)
{
    reel_status s = reel_plan_set_input(p, "q_lat", in->qlat, n);
    if (s == REEL_OK)
        s = reel_plan_set_input(p, "q", in->q, n);
    if (s == REEL_OK)
        s = reel_plan_set_input(p, "c", in->c, n);
    return s == REEL_OK ? reel_plan_set_input(p, "k_pe", in->kpe, n) : s;
}

/* Token t's MLA in float64 over its keys 0 .. pos: out [H*L], lse [H];
 * zeros and -inf for padding. */
static void ml_ref(const as_model *m, const as_step *st, int32_t t, double *out, double *lse)
{
    int s = st->tseq[t];
    double scale = mla_scale();
    for (int h = 0; h < H; h++) {
        double *o = out + (int64_t)h * L;
        memset(o, 0, sizeof(double) * L);
        lse[h] = -INFINITY;
        if (s < 0)
            continue;
        const float *qv = st->q + t * as_qw(m) + (int64_t)h * ROW;
        double mx = -INFINITY, sum = 0, w[AS_MAXCTX];
        for (int j = 0; j <= st->pos[t]; j++) {
            const float *row = m->k[s] + (int64_t)j * ROW;
            double d = 0;
            for (int e = 0; e < ROW; e++)
                d += (double)qv[e] * row[e];
            w[j] = d * scale;
            mx = fmax(mx, w[j]);
        }
        for (int j = 0; j <= st->pos[t]; j++)
            sum += (w[j] = exp(w[j] - mx));
        for (int j = 0; j <= st->pos[t]; j++)
            for (int e = 0; e < L; e++)
                o[e] += w[j] / sum * m->k[s][(int64_t)j * ROW + e];
        lse[h] = mx + log(sum);
    }
}

static void ml_compile_opts(reel_compile_opts *co)
{
    co->num_buckets = 3;
    co->buckets[0] = 4, co->buckets[1] = 16, co->buckets[2] = 64;
    co->max_context = AS_MAXCTX;
    co->max_seqs = AS_MAXSEQ;
}

typedef struct ml_job {
    as_model m;
    as_step steps[NSTEPS];
    int n, interleave, exchange;
    int32_t bt[RK_MAX][AS_MAXSEQ * PER];
    /* per plan (0 replayed, 1 eager), rank, step */
    float *out[2][RK_MAX][NSTEPS], *lse[2][RK_MAX][NSTEPS];
    unsigned char *cache[2][RK_MAX];
    uint64_t replays[RK_MAX];
} ml_job;

static size_t cache_bytes(reel_dtype dt) { return (size_t)NBLK * BS * ROW * reel_dtype_size(dt); }

static reel_status dcp_plan(rk_world *w, int r, const ml_job *j, bool eager, reel_plan **out)
{
    reel_dtype dt = j->m.dt;
    int hr = H / j->n;
    reel_graph *g = NULL;
    reel_status st = reel_graph_create(w->ctx[r], &g);
    if (st != REEL_OK)
        return st;
    int64_t qld[2] = { REEL_DIM_TOKENS, (int64_t)hr * L }, qd[2] = { REEL_DIM_TOKENS, (int64_t)hr * DQ };
    int64_t cd[2] = { REEL_DIM_TOKENS, L }, kd[2] = { REEL_DIM_TOKENS, R }, sd[3] = { NBLK, BS, ROW };
    reel_mla_params mp = mla_params();
    reel_dcp_layout d = { REEL_DCP_LAYOUT_HEAD, j->n, r, j->interleave, j->exchange };
    reel_tensor o, l;
    st = reel_dcp_mla_attention(g, reel_input(g, "q_lat", dt, 2, qld), reel_input(g, "q", dt, 2, qd),
                                reel_input(g, "c", dt, 2, cd), reel_input(g, "k_pe", dt, 2, kd),
                                reel_state(g, "cache", dt, 3, sd), &mp, &d, &o, &l);
    if (st == REEL_OK) {
        reel_output(g, "out", o);
        reel_output(g, "lse", l);
        reel_compile_opts co = REEL_COMPILE_OPTS_INIT;
        ml_compile_opts(&co);
        co.no_capture = eager;
        co.check_hazards = eager; /* every access declared, the collectives' included */
        co.comm = w->comm[r];
        st = reel_compile(g, &co, out);
    }
    reel_graph_destroy(g);
    return st;
}

static void sentinel_of(reel_dtype dt, unsigned char *e)
{
    uint32_t s32 = SENTINEL32;
    uint16_t s16 = SENTINEL16;
    if (reel_dtype_size(dt) == 4)
        memcpy(e, &s32, 4);
    else
        memcpy(e, &s16, 2);
}

static reel_status fill_sentinel(reel_plan *p, reel_dtype dt)
{
    size_t es = reel_dtype_size(dt), bytes = cache_bytes(dt);
    unsigned char *s = malloc(bytes), e[4];
    sentinel_of(dt, e);
    for (size_t i = 0; i < bytes; i += es)
        memcpy(s + i, e, es);
    reel_status st = reel_plan_write_state(p, "cache", s, bytes);
    free(s);
    return st;
}

static reel_status dcp_step(reel_plan *p, const ml_job *j, int r, int i, float **out, float **lse)
{
    const as_step *st = &j->steps[i];
    reel_dtype dt = j->m.dt;
    int hr = H / j->n;
    as_info info;
    as_info_make(&info, st, j->bt[r], PER, BS); /* DCP reads only the -1s of the slots */
    ml_in in = ml_inputs(&j->m, st, r * hr, hr);
    reel_status s = ml_set(p, &in, st->n);
    if (s == REEL_OK)
        s = reel_step(p, &info.si);
    const void *y = NULL;
    int64_t rows = 0;
    *out = calloc((size_t)(st->n * hr * L), sizeof(float));
    *lse = calloc((size_t)(st->n * hr), sizeof(float));
    if (s == REEL_OK && (s = reel_plan_output(p, "out", &y, &rows)) == REEL_OK)
        for (int64_t e = 0; e < st->n * hr * L; e++)
            (*out)[e] = as_get(y, dt, e);
    if (s == REEL_OK && (s = reel_plan_output(p, "lse", &y, &rows)) == REEL_OK)
        memcpy(*lse, y, sizeof(float) * (size_t)(st->n * hr));
    ml_free(&in);
    return s;
}

static void dcp_body(rk_world *w, int r, void *arg)
{
    ml_job *j = arg;
    reel_plan *p[2] = { NULL, NULL };
    reel_status st = REEL_OK;
    for (int e = 0; e < 2 && st == REEL_OK; e++)
        if ((st = dcp_plan(w, r, j, e == 1, &p[e])) == REEL_OK)
            st = fill_sentinel(p[e], j->m.dt);
    for (int i = 0; i < NSTEPS && st == REEL_OK; i++)
        for (int e = 0; e < 2 && st == REEL_OK; e++)
            st = dcp_step(p[e], j, r, i, &j->out[e][r][i], &j->lse[e][r][i]);
    for (int e = 0; e < 2 && st == REEL_OK; e++) {
        j->cache[e][r] = malloc(cache_bytes(j->m.dt));
        st = reel_plan_read_state(p[e], "cache", j->cache[e][r], cache_bytes(j->m.dt));
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

/* The monolithic outputs of every step: one rank, plain MLA. */
static void mono_run(const ml_job *j, float **out)
{
    reel_ctx *ctx = NULL;
    reel_ctx_opts xo = REEL_CTX_OPTS_INIT;
    xo.backend = REEL_BACKEND_HOST;
    cr_assert_eq(reel_ctx_create(&xo, &ctx), REEL_OK);
    reel_dtype dt = j->m.dt;
    reel_graph *g = NULL;
    cr_assert_eq(reel_graph_create(ctx, &g), REEL_OK);
    int64_t qld[2] = { REEL_DIM_TOKENS, H * L }, qd[2] = { REEL_DIM_TOKENS, H * DQ };
    int64_t cd[2] = { REEL_DIM_TOKENS, L }, kd[2] = { REEL_DIM_TOKENS, R }, sd[3] = { NBLK, BS, ROW };
    reel_mla_params mp = mla_params();
    reel_output(g, "out",
                reel_mla_attention(g, reel_input(g, "q_lat", dt, 2, qld), reel_input(g, "q", dt, 2, qd),
                                   reel_input(g, "c", dt, 2, cd), reel_input(g, "k_pe", dt, 2, kd),
                                   reel_state(g, "cache", dt, 3, sd), &mp));
    reel_compile_opts co = REEL_COMPILE_OPTS_INIT;
    ml_compile_opts(&co);
    reel_plan *p = NULL;
    cr_assert_eq(reel_compile(g, &co, &p), REEL_OK, "%s", reel_ctx_last_error(ctx));
    reel_graph_destroy(g);
    int32_t bt[AS_MAXSEQ * PER];
    as_tables(bt, PER, SPARE, 99);
    for (int i = 0; i < NSTEPS; i++) {
        const as_step *st = &j->steps[i];
        as_info info;
        as_info_make(&info, st, bt, PER, BS);
        ml_in in = ml_inputs(&j->m, st, 0, H);
        cr_assert_eq(ml_set(p, &in, st->n), REEL_OK);
        cr_assert_eq(reel_step(p, &info.si), REEL_OK, "%s", reel_ctx_last_error(ctx));
        const void *y;
        int64_t rows;
        cr_assert_eq(reel_plan_output(p, "out", &y, &rows), REEL_OK);
        out[i] = malloc(sizeof(float) * (size_t)(st->n * H * L));
        for (int64_t e = 0; e < st->n * H * L; e++)
            out[i][e] = as_get(y, dt, e);
        ml_free(&in);
    }
    reel_plan_destroy(p);
    reel_ctx_destroy(ctx);
}

static void make_job(ml_job *j, int n, int interleave, int exchange, reel_dtype dt)
{
    memset(j, 0, sizeof *j);
    j->n = n, j->interleave = interleave, j->exchange = exchange;
    as_model_init(&j->m, H, 1, ROW, BS, dt, 0x3a1a + (uint64_t)n * 131 + (uint64_t)interleave);
    for (int i = 0; i < NSTEPS; i++)
        as_step_make(&j->m, &j->steps[i], sched[i].nseq, sched[i].seqs, sched[i].qlen, sched[i].npad);
    for (int r = 0; r < n; r++)
        as_tables(j->bt[r], PER, SPARE, 2000 + (uint64_t)r);
}

static void free_job(ml_job *j)
{
    for (int e = 0; e < 2; e++)
        for (int r = 0; r < RK_MAX; r++) {
            for (int i = 0; i < NSTEPS; i++)
                free(j->out[e][r][i]), free(j->lse[e][r][i]);
            free(j->cache[e][r]);
        }
    for (int i = 0; i < NSTEPS; i++)
        as_step_free(&j->steps[i]);
    as_model_free(&j->m);
}

/* Rank r's cache holds exactly the rows [c | k_pe] of the positions it
 * owns, at the slots of its own block table; every other element is the
 * sentinel. */
static void check_cache(const ml_job *j, int r, const unsigned char *cache, const char *what)
{
    reel_dcp_view d = { j->n, r, j->interleave };
    reel_dtype dt = j->m.dt;
    size_t es = reel_dtype_size(dt), rowb = ROW * es;
    int64_t nslots = (int64_t)NBLK * BS;
    unsigned char *owned = calloc((size_t)nslots, 1), sent[4];
    sentinel_of(dt, sent);
    for (int s = 0; s < AS_MAXSEQ; s++) {
        int32_t ctx = j->m.ctx[s], nl = reel_dcp_local_count(d, ctx);
        for (int32_t li = 0; li < nl; li++) {
            int64_t slot = (int64_t)j->bt[r][s * PER + li / BS] * BS + li % BS;
            int64_t pos = reel_dcp_global_of(d, li);
            cr_assert_lt(pos, ctx);
            owned[slot] = 1;
            void *want = as_store(j->m.k[s] + pos * ROW, ROW, dt);
            cr_assert(!memcmp(cache + (size_t)slot * rowb, want, rowb),
                      "%s: rank %d slot %lld should hold sequence %d position %lld", what, r, (long long)slot, s,
                      (long long)pos);
            free(want);
        }
    }
    for (int64_t slot = 0; slot < nslots; slot++)
        for (int64_t e = 0; !owned[slot] && e < ROW; e++)
            cr_assert(!memcmp(cache + (size_t)slot * rowb + (size_t)e * es, sent, es),
                      "%s: rank %d wrote slot %lld, which it does not own", what, r, (long long)slot);
    free(owned);
}

/* How many (token, rank) pairs of the schedule see no key on the rank: an
 * empty shard, whose partial (0, -inf) the combine must ignore. */
static int empty_shards(const ml_job *j)
{
    int k = 0;
    for (int i = 0; i < NSTEPS; i++)
        for (int32_t t = 0; t < j->steps[i].n; t++)
            for (int r = 0; j->steps[i].tseq[t] >= 0 && r < j->n; r++)
                k += reel_dcp_local_count((reel_dcp_view){ j->n, r, j->interleave }, j->steps[i].pos[t] + 1) == 0;
    return k;
}

static void run_dcp(int n, int interleave, int exchange, reel_dtype dt)
{
    ml_job *j = malloc(sizeof *j);
    make_job(j, n, interleave, exchange, dt);
    char what[96];
    snprintf(what, sizeof what, "DCP MLA %d ranks, interleave %d, %s, %s", n, interleave,
             exchange == REEL_DCP_ALL_TO_ALL ? "all-to-all" : "all-gather + reduce-scatter", reel_dtype_name(dt));
    cr_assert(n == 1 || empty_shards(j) > 0, "%s: the schedule has no empty shard", what);
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
    double ref[H * L], rlse[H];
    for (int i = 0; i < NSTEPS; i++) {
        const as_step *st = &j->steps[i];
        for (int32_t t = 0; t < st->n; t++) {
            ml_ref(&j->m, st, t, ref, rlse);
            for (int e = 0; e < H * L; e++) /* the monolithic plan is MLA */
                cr_assert(fabs(mono[i][t * H * L + e] - ref[e]) <= atol, "%s: monolithic step %d token %d: %g, want %g",
                          what, i, t, (double)mono[i][t * H * L + e], ref[e]);
            for (int r = 0; r < n; r++) {
                const float *o = j->out[0][r][i] + t * hr * L, *l = j->lse[0][r][i] + t * hr;
                for (int e = 0; e < hr * L; e++) {
                    float want = mono[i][t * H * L + r * hr * L + e];
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
            }
        }
        for (int r = 0; r < n; r++)
            cr_assert(!memcmp(j->out[0][r][i], j->out[1][r][i], sizeof(float) * (size_t)(st->n * hr * L)) &&
                          !memcmp(j->lse[0][r][i], j->lse[1][r][i], sizeof(float) * (size_t)(st->n * hr)),
                      "%s: step %d rank %d: replay != eager", what, i, r);
    }
    for (int r = 0; r < n; r++) {
        cr_assert(!memcmp(j->cache[0][r], j->cache[1][r], cache_bytes(dt)),
                  "%s: rank %d: the caches of replay and eager differ", what, r);
        check_cache(j, r, j->cache[0][r], what);
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

Test(dcp_mla, one_rank_equals_monolithic_mla) { run_interleaves(1); }
Test(dcp_mla, two_ranks_equal_monolithic_mla) { run_interleaves(2); }
Test(dcp_mla, four_ranks_equal_monolithic_mla) { run_interleaves(4); }
Test(dcp_mla, eight_ranks_equal_monolithic_mla) { run_interleaves(8); }

Test(dcp_mla, bf16_over_four_ranks_equals_monolithic_mla_within_its_rounding)
{
    run_dcp(4, 16, REEL_DCP_ALL_TO_ALL, REEL_BF16);
    run_dcp(4, 16, REEL_DCP_GATHER_SCATTER, REEL_BF16);
}

/* With one rank the layout changes nothing: DCP MLA equals plain MLA
 * bitwise (f32: the weights are exactly 1), either exchange. */
Test(dcp_mla, one_rank_is_plain_mla_bitwise)
{
    for (int x = 0; x < 2; x++) {
        ml_job *j = malloc(sizeof *j);
        make_job(j, 1, 16, x, REEL_F32);
        rk_world w;
        cr_assert_eq(rk_open(&w, 1, 0), REEL_OK);
        rk_run(&w, dcp_body, j);
        cr_assert_eq(w.st[0], REEL_OK, "%s", w.msg[0]);
        rk_close(&w);
        float *mono[NSTEPS];
        mono_run(j, mono);
        for (int i = 0; i < NSTEPS; i++) {
            cr_assert(!memcmp(mono[i], j->out[0][0][i], sizeof(float) * (size_t)(j->steps[i].n * H * L)),
                      "exchange %d: step %d differs", x, i);
            free(mono[i]);
        }
        free_job(j);
        free(j);
    }
}

/* ---- the validated subset ---------------------------------------------- */

/* One layout built by either helper over small shapes (head dim 8, block
 * 16; MLA: L 8, R 4, Dq 8): reel_dcp_attention or reel_dcp_mla_attention. */
typedef struct refuse_case {
    int h, n, interleave, comm_n; /* comm_n 0: compile without a communicator */
    int rank;                     /* the layout's rank (the world's rank is 0) */
    reel_status want_st;
    const char *want; /* the limit, after the op's name */
} refuse_case;

static reel_status build_either(reel_graph *g, const refuse_case *c, bool mla, reel_tensor *o, reel_tensor *l)
{
    int hr = c->h / c->n;
    reel_dcp_layout d = { REEL_DCP_LAYOUT_HEAD, c->n, c->rank, c->interleave, REEL_DCP_ALL_TO_ALL };
    if (!mla) {
        int64_t qd[2] = { REEL_DIM_TOKENS, (int64_t)hr * 8 }, kd[2] = { REEL_DIM_TOKENS, 8 }, cd[4] = { 8, 16, 1, 8 };
        reel_attn_params ap = { REEL_ATTN_PARAMS_HEAD, c->h, 1, 8, 16, 0.0f };
        return reel_dcp_attention(g, reel_input(g, "q", REEL_F32, 2, qd), reel_input(g, "k", REEL_F32, 2, kd),
                                  reel_input(g, "v", REEL_F32, 2, kd), reel_state(g, "kc", REEL_F32, 4, cd),
                                  reel_state(g, "vc", REEL_F32, 4, cd), &ap, &d, o, l);
    }
    int64_t qd[2] = { REEL_DIM_TOKENS, (int64_t)hr * 8 }, cd[2] = { REEL_DIM_TOKENS, 8 }, kd[2] = { REEL_DIM_TOKENS, 4 };
    int64_t sd[3] = { 8, 16, 12 };
    reel_mla_params mp = REEL_MLA_PARAMS_INIT;
    mp.num_heads = c->h, mp.latent_dim = 8, mp.rope_dim = 4, mp.block_size = 16, mp.scale = 0.35f;
    return reel_dcp_mla_attention(g, reel_input(g, "q_lat", REEL_F32, 2, qd), reel_input(g, "q", REEL_F32, 2, qd),
                                  reel_input(g, "c", REEL_F32, 2, cd), reel_input(g, "k_pe", REEL_F32, 2, kd),
                                  reel_state(g, "cache", REEL_F32, 3, sd), &mp, &d, o, l);
}

/* Refused by the helper (at_build) or by compile; MLA's message is the
 * paged one's with its op named. */
static void check_refusal(const refuse_case *c, bool at_build, bool mla)
{
    rk_world w;
    int cn = c->comm_n > 0 ? c->comm_n : 1;
    cr_assert_eq(rk_open(&w, cn, 2000), REEL_OK);
    reel_ctx *ctx = w.ctx[0];
    reel_graph *g = NULL;
    cr_assert_eq(reel_graph_create(ctx, &g), REEL_OK);
    const char *op = mla ? "mla_attention" : "paged_attention";
    char want[320];
    reel_tensor o, l;
    reel_status st = build_either(g, c, mla, &o, &l);
    if (at_build) {
        snprintf(want, sizeof want, "dcp_%s (node 0): %s", mla ? "mla_attention" : "attention", c->want);
        cr_assert_eq(st, c->want_st, "%s: %s", op, reel_ctx_last_error(ctx));
        cr_assert(strstr(reel_ctx_last_error(ctx), want), "want '%s', got '%s'", want, reel_ctx_last_error(ctx));
        cr_assert_eq(o.id, 0);
        cr_assert_eq(l.id, 0);
    } else {
        cr_assert_eq(st, REEL_OK, "%s: %s", op, reel_ctx_last_error(ctx));
        reel_output(g, "o", o);
        /* The other ranks never compile: their group is broken first. */
        for (int r = 1; r < w.n; r++)
            reel_comm_abort(w.comm[r]);
        reel_compile_opts co = REEL_COMPILE_OPTS_INIT;
        co.comm = c->comm_n > 0 ? w.comm[0] : NULL;
        reel_plan *p = NULL;
        st = reel_compile(g, &co, &p);
        cr_assert_eq(st, c->want_st, "%s: %s, want %s: %s", op, reel_status_str(st), reel_status_str(c->want_st),
                     reel_ctx_last_error(ctx));
        cr_assert_null(p);
        const char *msg = reel_ctx_last_error(ctx), *at = strstr(msg, "compile: op '");
        snprintf(want, sizeof want, "compile: op '%s' (node ", op);
        cr_assert(at && !strncmp(at, want, strlen(want)), "want '%s', got '%s'", want, msg);
        cr_assert(strstr(at, c->want), "want '%s', got '%s'", c->want, msg);
    }
    reel_graph_destroy(g);
    rk_close(&w);
}

Test(dcp_mla, layouts_outside_the_validated_subset_are_refused_as_dcp_attention_refuses_them)
{
    static const refuse_case build[] = {
        { 6, 4, 1, 4, 0, REEL_E_UNSUPPORTED, "DCP: num_heads 6 is not a multiple of the 4 ranks" },
        { 6, 3, 1, 3, 0, REEL_E_UNSUPPORTED, "DCP over 3 ranks is outside the validated subset (1, 2, 4 or 8 ranks)" },
        { 16, 16, 1, 1, 0, REEL_E_UNSUPPORTED, "DCP over 16 ranks is outside the validated subset" },
        { 8, 2, 3, 2, 0, REEL_E_UNSUPPORTED, "DCP: interleave 3 must be a power of two dividing block_size 16" },
        { 8, 2, 12, 2, 0, REEL_E_UNSUPPORTED, "DCP: interleave 12 must be a power of two dividing block_size 16" },
        { 8, 2, 32, 2, 0, REEL_E_UNSUPPORTED, "DCP: interleave 32 must be a power of two dividing block_size 16" },
    };
    static const refuse_case compile[] = {
        { 8, 2, 16, 4, 0, REEL_E_INVALID_ARG, "is laid out by DCP over 2 ranks, the communicator has 4" },
        { 8, 2, 16, 2, 1, REEL_E_INVALID_ARG, "is DCP rank 1, the communicator's rank is 0" },
        { 8, 2, 16, 0, 0, REEL_E_INVALID_USAGE,
          "is laid out by DCP over 2 ranks and needs a communicator: set reel_compile_opts.comm" },
    };
    for (int mla = 0; mla < 2; mla++) {
        for (size_t i = 0; i < sizeof build / sizeof build[0]; i++)
            check_refusal(&build[i], true, mla);
        for (size_t i = 0; i < sizeof compile / sizeof compile[0]; i++)
            check_refusal(&compile[i], false, mla);
    }
}

/* An MLA node built without the helper is held to the subset at compile
 * (parallel/subset.c), and CP is refused at build (no MLA kernel has it). */
Test(dcp_mla, mla_nodes_outside_the_validated_subset_are_refused_at_compile)
{
    static const struct {
        int h, dcp, interleave, cp;
        reel_status want_st;
        const char *want;
    } cases[] = {
        { 6, 3, 1, 0, REEL_E_UNSUPPORTED,
          "compile: op 'mla_attention' (node 0 -> 'mla_attention#0'): DCP over 3 ranks is outside the validated subset" },
        { 6, 4, 1, 0, REEL_E_UNSUPPORTED,
          "compile: op 'mla_attention' (node 0 -> 'mla_attention#0'): DCP: num_heads 6 is not a multiple of the 4 ranks" },
        { 8, 2, 3, 0, REEL_E_UNSUPPORTED,
          "compile: op 'mla_attention' (node 0 -> 'mla_attention#0'): DCP: interleave 3 must be a power of two dividing "
          "block_size 16" },
        { 8, 0, 0, 2, REEL_E_UNSUPPORTED, "CP (cp 2) is not built for mla_attention" },
    };
    rk_world w;
    cr_assert_eq(rk_open(&w, 1, 2000), REEL_OK);
    reel_ctx *ctx = w.ctx[0];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        reel_graph *g = NULL;
        cr_assert_eq(reel_graph_create(ctx, &g), REEL_OK);
        int h = cases[i].h;
        int64_t qd[2] = { REEL_DIM_TOKENS, (int64_t)h * 8 }, cd[2] = { REEL_DIM_TOKENS, 8 }, kd[2] = { REEL_DIM_TOKENS, 4 };
        int64_t sd[3] = { 8, 16, 12 };
        reel_mla_params mp = REEL_MLA_PARAMS_INIT;
        mp.num_heads = h, mp.latent_dim = 8, mp.rope_dim = 4, mp.block_size = 16, mp.scale = 0.35f;
        reel_attn_layout lay = { .dcp = cases[i].dcp, .interleave = cases[i].interleave, .cp = cases[i].cp, .lse = true };
        uint32_t in[REEL_OP_MAX_IN] = { reel_input(g, "q_lat", REEL_F32, 2, qd).id, reel_input(g, "q", REEL_F32, 2, qd).id,
                                        reel_input(g, "c", REEL_F32, 2, cd).id, reel_input(g, "k_pe", REEL_F32, 2, kd).id,
                                        reel_state(g, "cache", REEL_F32, 3, sd).id };
        reel_tensor lse;
        reel_tensor o = reel_graph_mla_attention(g, in, &mp, &lay, &lse);
        if (cases[i].cp) {
            cr_assert_eq(o.id, 0);
            cr_assert_eq(reel_graph_status(g), cases[i].want_st);
        } else {
            cr_assert_neq(o.id, 0, "%s", reel_ctx_last_error(ctx));
            reel_output(g, "o", o);
            reel_compile_opts co = REEL_COMPILE_OPTS_INIT;
            co.comm = w.comm[0];
            reel_plan *p = NULL;
            cr_assert_eq(reel_compile(g, &co, &p), cases[i].want_st, "%s", reel_ctx_last_error(ctx));
            cr_assert_null(p);
        }
        cr_assert(strstr(reel_ctx_last_error(ctx), cases[i].want), "want '%s', got '%s'", cases[i].want,
                  reel_ctx_last_error(ctx));
        reel_graph_destroy(g);
    }
    rk_close(&w);
}

/* A DCP attention node beside one without a layout: compile refuses,
 * naming both (MLA with MLA either way round, MLA with paged attention). */
Test(dcp_mla, a_plan_mixing_a_dcp_node_with_a_plain_one_is_refused_naming_both)
{
    enum { DCP_MLA, PLAIN_MLA, DCP_PAGED, PLAIN_PAGED };
    static const struct {
        int first, second;
        const char *first_op, *second_op;
    } cases[] = {
        { DCP_MLA, PLAIN_MLA, "mla_attention", "mla_attention" },
        { PLAIN_MLA, DCP_MLA, "mla_attention", "mla_attention" },
        { DCP_MLA, PLAIN_PAGED, "mla_attention", "paged_attention" },
        { DCP_PAGED, PLAIN_MLA, "paged_attention", "mla_attention" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        rk_world w;
        cr_assert_eq(rk_open(&w, 2, 2000), REEL_OK);
        reel_ctx *ctx = w.ctx[0];
        reel_graph *g = NULL;
        cr_assert_eq(reel_graph_create(ctx, &g), REEL_OK);
        int64_t ql[2] = { REEL_DIM_TOKENS, 4 * 8 }, qh[2] = { REEL_DIM_TOKENS, 2 * 8 }, c8[2] = { REEL_DIM_TOKENS, 8 };
        int64_t c4[2] = { REEL_DIM_TOKENS, 4 }, sd[3] = { 8, 16, 12 }, kvd[4] = { 8, 16, 1, 8 };
        reel_mla_params mp = REEL_MLA_PARAMS_INIT;
        mp.num_heads = 4, mp.latent_dim = 8, mp.rope_dim = 4, mp.block_size = 16, mp.scale = 0.35f;
        reel_attn_params ap = { REEL_ATTN_PARAMS_HEAD, 4, 1, 8, 16, 0.0f };
        reel_dcp_layout d = { REEL_DCP_LAYOUT_HEAD, 2, 0, 16, REEL_DCP_GATHER_SCATTER };
        reel_tensor c = reel_input(g, "c", REEL_F32, 2, c8), kpe = reel_input(g, "k_pe", REEL_F32, 2, c4);
        int kinds[2] = { cases[i].first, cases[i].second };
        for (int k = 0; k < 2; k++) {
            char name[16];
            snprintf(name, sizeof name, "o%d", k);
            reel_tensor o = { 0 }, l = { 0 };
            switch (kinds[k]) {
            case DCP_MLA:
                cr_assert_eq(reel_dcp_mla_attention(g, reel_input(g, "qld", REEL_F32, 2, qh),
                                                    reel_input(g, "qd", REEL_F32, 2, qh), c, kpe,
                                                    reel_state(g, "cache_d", REEL_F32, 3, sd), &mp, &d, &o, &l),
                             REEL_OK, "%s", reel_ctx_last_error(ctx));
                break;
            case PLAIN_MLA:
                o = reel_mla_attention(g, reel_input(g, "qlp", REEL_F32, 2, ql), reel_input(g, "qp", REEL_F32, 2, ql),
                                       c, kpe, reel_state(g, "cache_p", REEL_F32, 3, sd), &mp);
                break;
            case DCP_PAGED:
                cr_assert_eq(reel_dcp_attention(g, reel_input(g, "qpd", REEL_F32, 2, qh), c, c,
                                                reel_state(g, "kc", REEL_F32, 4, kvd),
                                                reel_state(g, "vc", REEL_F32, 4, kvd), &ap, &d, &o, &l),
                             REEL_OK, "%s", reel_ctx_last_error(ctx));
                break;
            default:
                o = reel_paged_attention(g, reel_input(g, "qpp", REEL_F32, 2, ql), c, c,
                                         reel_state(g, "kc", REEL_F32, 4, kvd), reel_state(g, "vc", REEL_F32, 4, kvd),
                                         &ap);
            }
            cr_assert_neq(o.id, 0, "%s", reel_ctx_last_error(ctx));
            reel_output(g, name, o);
        }
        reel_comm_abort(w.comm[1]); /* rank 1 never compiles */
        reel_compile_opts co = REEL_COMPILE_OPTS_INIT;
        co.comm = w.comm[0];
        reel_plan *p = NULL;
        cr_assert_eq(reel_compile(g, &co, &p), REEL_E_UNSUPPORTED, "case %zu: %s", i, reel_ctx_last_error(ctx));
        cr_assert_null(p);
        const char *msg = reel_ctx_last_error(ctx);
        char a[64], b[64];
        snprintf(a, sizeof a, "op '%s' (node ", cases[i].first_op);
        snprintf(b, sizeof b, "op '%s' (node ", cases[i].second_op);
        const char *pa = strstr(msg, a), *pb = strstr(msg, b);
        if (pa && pb == pa)
            pb = strstr(pa + 1, b);
        cr_assert(pa && pb, "case %zu: want both nodes named, got '%s'", i, msg);
        cr_assert(strstr(msg, "(DCP 2 ranks, interleave 16)") && strstr(msg, "(DCP 0 ranks"),
                  "case %zu: want both layouts, got '%s'", i, msg);
        cr_assert(strstr(msg, "the attention ops of a plan share one DCP layout, or none has one"), "%s", msg);
        reel_graph_destroy(g);
        rk_close(&w);
    }
}
