/* CP on the host backend, ranks as threads: each step's tokens split
 * rank-major over 1, 2, 4 and 8 ranks (reel_cp_attention) give the outputs
 * of one rank attending all of them (plain paged attention), within
 * tolerance; every rank's cache ends as the one rank's, bitwise (a full
 * replica: every rank wrote every rank's keys). Prefills, a chunked prefill
 * over a cached history, decodes held by one rank, prompts shorter than
 * the ranks (ranks with no token of a sequence), trailing padding (ranks
 * with fewer tokens; every cache starts as a pattern, so a stray write of a
 * padding row shows). Replay == eager bitwise. Then the refusals. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/parallel/attn_steps.h"
#include "tests/parallel/ranks.h"

enum { H = 4, HKV = 2, DH = 16, BS = 16, PER = AS_MAXCTX / BS, SPARE = 2, NBLK = AS_MAXSEQ * PER + SPARE };
enum { NSTEPS = 4 };

static const struct {
    int nseq, seqs[AS_MAXSEQ], qlen[AS_MAXSEQ];
} sched[NSTEPS] = {
    { 2, { 0, 1 }, { 50, 7 } },
    { 3, { 0, 1, 2 }, { 33, 1, 30 } },
    { 3, { 2, 0, 1 }, { 1, 1, 1 } },
    { 2, { 2, 3 }, { 60, 3 } },
};

/* One rank's share of a step: of each sequence's tokens the rank-major
 * chunk r of ceil(qlen / N), then padding up to the step's rows. */
typedef struct cp_share {
    as_step st;        /* the rank's step (q, k, v of its tokens) */
    int32_t mono[AS_MAXT]; /* which token of the one-rank step each is (-1: padding) */
} cp_share;

typedef struct cp_job {
    as_model m;
    as_step steps[NSTEPS];
    cp_share share[NSTEPS][RK_MAX];
    int n;
    int32_t bt[AS_MAXSEQ * PER];
    float *out[2][RK_MAX][NSTEPS];
    void *kc[2][RK_MAX], *vc[2][RK_MAX];
    uint64_t replays[RK_MAX];
} cp_job;

static int32_t chunk_of(int32_t qlen, int n) { return (qlen + n - 1) / n; }

/* Rank r's tokens of step st, padded to rows (computed by the caller as the
 * largest share). */
static void share_make(const as_model *m, const as_step *st, int n, int r, int32_t rows, cp_share *sh)
{
    as_step *o = &sh->st;
    memset(sh, 0, sizeof *sh);
    int32_t t = 0;
    for (int i = 0; i < st->nseq; i++) {
        int32_t a = st->qs[i], len = st->qs[i + 1] - a, c = chunk_of(len, n);
        int32_t b0 = r * c, b1 = (r + 1) * c < len ? (r + 1) * c : len;
        if (b0 >= b1)
            continue;
        o->qs[o->nseq] = t;
        o->seq[o->nseq] = st->seq[i];
        o->ctx[o->nseq] = st->ctx[i];
        o->nseq++;
        for (int32_t k = a + b0; k < a + b1; k++, t++) {
            o->pos[t] = st->pos[k];
            o->tseq[t] = st->tseq[k];
            sh->mono[t] = k;
        }
    }
    o->qs[o->nseq] = t;
    for (; t < rows; t++) {
        o->tseq[t] = -1;
        sh->mono[t] = -1;
    }
    o->n = rows;
    o->npad = rows - o->qs[o->nseq];
    o->q = calloc((size_t)(rows * as_qw(m)), sizeof(float));
    o->k = calloc((size_t)(rows * as_kvw(m)), sizeof(float));
    o->v = calloc((size_t)(rows * as_kvw(m)), sizeof(float));
    for (int32_t k = 0; k < rows; k++) {
        if (sh->mono[k] < 0)
            continue;
        memcpy(o->q + k * as_qw(m), st->q + sh->mono[k] * as_qw(m), sizeof(float) * (size_t)as_qw(m));
        memcpy(o->k + k * as_kvw(m), st->k + sh->mono[k] * as_kvw(m), sizeof(float) * (size_t)as_kvw(m));
        memcpy(o->v + k * as_kvw(m), st->v + sh->mono[k] * as_kvw(m), sizeof(float) * (size_t)as_kvw(m));
    }
}

static int32_t share_rows(const as_step *st, int n, int r)
{
    int32_t t = 0;
    for (int i = 0; i < st->nseq; i++) {
        int32_t len = st->qs[i + 1] - st->qs[i], c = chunk_of(len, n);
        int32_t b0 = r * c, b1 = (r + 1) * c < len ? (r + 1) * c : len;
        t += b1 > b0 ? b1 - b0 : 0;
    }
    return t;
}

static reel_status cp_plan(rk_world *w, int r, const cp_job *j, bool eager, reel_plan **out)
{
    reel_dtype dt = j->m.dt;
    reel_graph *g = NULL;
    reel_status st = reel_graph_create(w->ctx[r], &g);
    if (st != REEL_OK)
        return st;
    int64_t qd[2] = { REEL_DIM_TOKENS, H * DH }, kd[2] = { REEL_DIM_TOKENS, HKV * DH };
    int64_t cd[4] = { NBLK, BS, HKV, DH };
    reel_attn_params ap = { REEL_ATTN_PARAMS_HEAD, H, HKV, DH, BS, 0.0f };
    reel_output(g, "out",
                reel_cp_attention(g, reel_input(g, "q", dt, 2, qd), reel_input(g, "k", dt, 2, kd),
                                  reel_input(g, "v", dt, 2, kd), reel_state(g, "kc", dt, 4, cd),
                                  reel_state(g, "vc", dt, 4, cd), &ap, j->n));
    reel_compile_opts co = REEL_COMPILE_OPTS_INIT;
    co.num_buckets = 3;
    co.buckets[0] = 4, co.buckets[1] = 16, co.buckets[2] = 64;
    co.max_context = AS_MAXCTX;
    co.max_seqs = AS_MAXSEQ;
    co.no_capture = eager;
    co.check_hazards = eager;
    co.comm = w->comm[r];
    st = reel_compile(g, &co, out);
    reel_graph_destroy(g);
    return st;
}

static reel_status cp_step(reel_plan *p, const cp_job *j, int r, int i, float **out)
{
    const as_step *st = &j->share[i][r].st;
    reel_dtype dt = j->m.dt;
    as_info info;
    as_info_make(&info, st, j->bt, PER, BS);
    void *q = as_store(st->q, st->n * H * DH, dt), *k = as_store(st->k, st->n * HKV * DH, dt),
         *v = as_store(st->v, st->n * HKV * DH, dt);
    reel_status s = as_run_step(p, &info, q, k, v, st->n);
    const void *y = NULL;
    int64_t rows = 0;
    *out = calloc((size_t)(st->n * H * DH), sizeof(float));
    if (s == REEL_OK && (s = reel_plan_output(p, "out", &y, &rows)) == REEL_OK)
        for (int64_t e = 0; e < st->n * H * DH; e++)
            (*out)[e] = as_get(y, dt, e);
    free(q), free(k), free(v);
    return s;
}

static size_t cache_bytes(const cp_job *j) { return (size_t)NBLK * BS * HKV * DH * reel_dtype_size(j->m.dt); }

/* Every cache starts as the same pattern (not zeros): a stray write of a
 * zero padding row shows in the comparison with the one rank's cache. */
static reel_status fill_pattern(reel_plan *p, const cp_job *j)
{
    size_t n = cache_bytes(j);
    unsigned char *b = malloc(n);
    for (size_t i = 0; i < n; i++)
        b[i] = (unsigned char)(0x3c + (i * 7) % 5); /* finite values near 1 in every dtype */
    reel_status st = reel_plan_write_state(p, "kc", b, n);
    if (st == REEL_OK)
        st = reel_plan_write_state(p, "vc", b, n);
    free(b);
    return st;
}

static void cp_body(rk_world *w, int r, void *arg)
{
    cp_job *j = arg;
    reel_plan *p[2] = { NULL, NULL };
    reel_status st = REEL_OK;
    for (int e = 0; e < 2 && st == REEL_OK; e++)
        if ((st = cp_plan(w, r, j, e == 1, &p[e])) == REEL_OK)
            st = fill_pattern(p[e], j);
    for (int i = 0; i < NSTEPS && st == REEL_OK; i++)
        for (int e = 0; e < 2 && st == REEL_OK; e++)
            st = cp_step(p[e], j, r, i, &j->out[e][r][i]);
    for (int e = 0; e < 2 && st == REEL_OK; e++) {
        j->kc[e][r] = malloc(cache_bytes(j));
        j->vc[e][r] = malloc(cache_bytes(j));
        st = reel_plan_read_state(p[e], "kc", j->kc[e][r], cache_bytes(j));
        if (st == REEL_OK)
            st = reel_plan_read_state(p[e], "vc", j->vc[e][r], cache_bytes(j));
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

static void run_cp(int n, reel_dtype dt)
{
    cp_job *j = calloc(1, sizeof *j);
    j->n = n;
    as_model_init(&j->m, H, HKV, DH, BS, dt, 0xc0ffee + (uint64_t)n);
    as_tables(j->bt, PER, SPARE, 7);
    for (int i = 0; i < NSTEPS; i++) {
        as_step_make(&j->m, &j->steps[i], sched[i].nseq, sched[i].seqs, sched[i].qlen, 0);
        int32_t rows = 1;
        for (int r = 0; r < n; r++)
            rows = share_rows(&j->steps[i], n, r) > rows ? share_rows(&j->steps[i], n, r) : rows;
        for (int r = 0; r < n; r++)
            share_make(&j->m, &j->steps[i], n, r, rows, &j->share[i][r]);
    }
    char what[64];
    snprintf(what, sizeof what, "CP %d ranks, %s", n, reel_dtype_name(dt));
    rk_world w;
    cr_assert_eq(rk_open(&w, n, 0), REEL_OK);
    rk_run(&w, cp_body, j);
    for (int r = 0; r < n; r++) {
        cr_assert_eq(w.st[r], REEL_OK, "%s: rank %d: %s", what, r, w.msg[r]);
        cr_assert_eq(j->replays[r], NSTEPS, "%s: rank %d replayed %llu steps", what, r,
                     (unsigned long long)j->replays[r]);
    }
    rk_close(&w);

    /* One rank, every token of each step. */
    reel_ctx *ctx = NULL;
    reel_ctx_opts co = REEL_CTX_OPTS_INIT;
    co.backend = REEL_BACKEND_HOST;
    cr_assert_eq(reel_ctx_create(&co, &ctx), REEL_OK);
    reel_plan *mono = NULL;
    cr_assert_eq(as_mono_plan(ctx, &j->m, PER, SPARE, &mono), REEL_OK, "%s", reel_ctx_last_error(ctx));
    cr_assert_eq(fill_pattern(mono, j), REEL_OK);
    double atol = dt == REEL_F32 ? 2e-5 : 1e-2;
    double ref[H * DH], rlse[H];
    for (int i = 0; i < NSTEPS; i++) {
        const as_step *st = &j->steps[i];
        as_info info;
        as_info_make(&info, st, j->bt, PER, BS);
        void *q = as_store(st->q, st->n * H * DH, dt), *k = as_store(st->k, st->n * HKV * DH, dt),
             *v = as_store(st->v, st->n * HKV * DH, dt);
        cr_assert_eq(reel_plan_set_input(mono, "q", q, st->n), REEL_OK);
        cr_assert_eq(reel_plan_set_input(mono, "k", k, st->n), REEL_OK);
        cr_assert_eq(reel_plan_set_input(mono, "v", v, st->n), REEL_OK);
        cr_assert_eq(reel_step(mono, &info.si), REEL_OK, "%s", reel_ctx_last_error(ctx));
        free(q), free(k), free(v);
        const void *y;
        int64_t rows;
        cr_assert_eq(reel_plan_output(mono, "out", &y, &rows), REEL_OK);
        for (int r = 0; r < n; r++) {
            const cp_share *sh = &j->share[i][r];
            for (int32_t t = 0; t < sh->st.n; t++) {
                const float *o = j->out[0][r][i] + t * H * DH;
                if (sh->mono[t] >= 0)
                    as_ref(&j->m, st, sh->mono[t], ref, rlse);
                for (int e = 0; e < H * DH; e++) {
                    if (sh->mono[t] < 0) {
                        cr_assert(o[e] == 0.0f, "%s: step %d rank %d padding token %d: %g", what, i, r, t, (double)o[e]);
                        continue;
                    }
                    float want = as_get(y, dt, (int64_t)sh->mono[t] * H * DH + e);
                    cr_assert(fabsf(o[e] - want) <= atol, "%s: step %d rank %d token %d (position %d) elem %d: %g, one rank %g",
                              what, i, r, t, sh->st.pos[t], e, (double)o[e], (double)want);
                    cr_assert(fabs(o[e] - ref[e]) <= atol, "%s: step %d rank %d token %d: %g, float64 %g", what, i, r,
                              t, (double)o[e], ref[e]);
                }
            }
            cr_assert(!memcmp(j->out[0][r][i], j->out[1][r][i], sizeof(float) * (size_t)(sh->st.n * H * DH)),
                      "%s: step %d rank %d: replay != eager", what, i, r);
        }
    }
    void *kc = malloc(cache_bytes(j)), *vc = malloc(cache_bytes(j));
    cr_assert_eq(reel_plan_read_state(mono, "kc", kc, cache_bytes(j)), REEL_OK);
    cr_assert_eq(reel_plan_read_state(mono, "vc", vc, cache_bytes(j)), REEL_OK);
    for (int r = 0; r < n; r++)
        for (int e = 0; e < 2; e++)
            cr_assert(!memcmp(j->kc[e][r], kc, cache_bytes(j)) && !memcmp(j->vc[e][r], vc, cache_bytes(j)),
                      "%s: rank %d (%s): its cache is not the one rank's", what, r, e ? "eager" : "replayed");
    free(kc), free(vc);
    reel_plan_destroy(mono);
    reel_ctx_destroy(ctx);
    for (int i = 0; i < NSTEPS; i++) {
        as_step_free(&j->steps[i]);
        for (int r = 0; r < n; r++) {
            as_step_free(&j->share[i][r].st);
            free(j->out[0][r][i]), free(j->out[1][r][i]);
        }
    }
    for (int e = 0; e < 2; e++)
        for (int r = 0; r < n; r++)
            free(j->kc[e][r]), free(j->vc[e][r]);
    as_model_free(&j->m);
    free(j);
}

Test(cp, one_rank_equals_one_rank_attention) { run_cp(1, REEL_F32); }
Test(cp, two_ranks_equal_one_rank_attention) { run_cp(2, REEL_F32); }
Test(cp, four_ranks_equal_one_rank_attention) { run_cp(4, REEL_F32); }
Test(cp, eight_ranks_equal_one_rank_attention) { run_cp(8, REEL_F32); }
Test(cp, bf16_over_four_ranks_equals_one_rank_attention) { run_cp(4, REEL_BF16); }

Test(cp, layouts_outside_the_validated_subset_are_refused_naming_the_limit)
{
    rk_world w;
    cr_assert_eq(rk_open(&w, 2, 2000), REEL_OK);
    reel_ctx *ctx = w.ctx[0];
    int64_t qd[2] = { REEL_DIM_TOKENS, 16 }, kd[2] = { REEL_DIM_TOKENS, 8 }, sd[2] = { REEL_DIM_TOKENS, 1 };
    int64_t cd[4] = { 8, 16, 1, 8 };
    reel_attn_params ap = { REEL_ATTN_PARAMS_HEAD, 2, 1, 8, 16, 0.0f };
    for (int k = 0; k < 3; k++) {
        reel_graph *g = NULL;
        cr_assert_eq(reel_graph_create(ctx, &g), REEL_OK);
        int n = k == 0 ? 3 : 4;
        if (k == 2) /* the name CP's slot mapping takes */
            reel_input(g, "slot_mapping", REEL_I32, 2, sd);
        reel_tensor o = reel_cp_attention(g, reel_input(g, "q", REEL_F32, 2, qd), reel_input(g, "k", REEL_F32, 2, kd),
                                          reel_input(g, "v", REEL_F32, 2, kd), reel_state(g, "kc", REEL_F32, 4, cd),
                                          reel_state(g, "vc", REEL_F32, 4, cd), &ap, k == 2 ? 2 : n);
        if (k == 0) { /* 3 ranks: refused when built */
            cr_assert_eq(o.id, 0);
            cr_assert_eq(reel_graph_status(g), REEL_E_UNSUPPORTED);
            cr_assert(strstr(reel_ctx_last_error(ctx),
                             "cp_attention (node 0): CP over 3 ranks is outside the validated subset (1, 2, 4 or 8 ranks)"),
                      "%s", reel_ctx_last_error(ctx));
        } else if (k == 1) { /* 4 ranks on a communicator of 2: refused at compile */
            cr_assert_neq(o.id, 0, "%s", reel_ctx_last_error(ctx));
            reel_output(g, "o", o);
            reel_comm_abort(w.comm[1]); /* rank 1 never compiles */
            reel_compile_opts co = REEL_COMPILE_OPTS_INIT;
            co.comm = w.comm[0];
            reel_plan *p = NULL;
            cr_assert_eq(reel_compile(g, &co, &p), REEL_E_INVALID_ARG);
            cr_assert(strstr(reel_ctx_last_error(ctx), "is laid out by CP over 4 ranks, the communicator has 2"), "%s",
                      reel_ctx_last_error(ctx));
        } else { /* a leaf already named slot_mapping */
            cr_assert_eq(o.id, 0);
            cr_assert(strstr(reel_ctx_last_error(ctx), "slot_mapping 'slot_mapping': the name is taken by input"),
                      "%s", reel_ctx_last_error(ctx));
        }
        reel_graph_destroy(g);
    }
    rk_close(&w);
}
