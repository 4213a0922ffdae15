/* Collective ops in plans on the host backend, ranks as threads: every op
 * with 2, 3, 4 and 8 ranks against its definition, replay == eager bitwise
 * on every rank (both under the hazard checker), a pipeline of send/recv stages equal to one stage, and the
 * compile-time rules: the sequence check across ranks, a graph with
 * collectives and no communicator, the capture decision, the destroy order,
 * and a failing rank leaving the others with an error, not a hang. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/comm.h"
#include "core/dtype.h"
#include "tests/parallel/ranks.h"

static const int sizes[] = {2, 3, 4, 8};
#define ROWS 3      /* tokens of each step (bucket 4: one padded row) */
#define MAXE 512    /* elements of one rank's output */

typedef struct op_case {
    const char *what;
    int op;                /* 0 all_reduce, 1 all_gather, 2 reduce_scatter, 3 all_to_all */
    reel_dtype dt;
    int ndim;              /* dims after the token dim (or of the parameter) */
    int64_t dims[3];       /* a dim of -k means k * nranks */
    int axis;
    bool param;            /* x is a parameter (no token dim) */
} op_case;

typedef struct op_job {
    const op_case *c;
    int n;
    int64_t dims[3];
    int64_t xe, ye;        /* elements of x and y (all rows) */
    float replay[RK_MAX][MAXE], eager[RK_MAX][MAXE];
    unsigned char raw_replay[RK_MAX][MAXE * 4], raw_eager[RK_MAX][MAXE * 4];
    uint64_t replays[RK_MAX];
} op_job;

static float value(int rank, int64_t i) { return (float)(rank * 100 + (int)(i % 50) + 1); }

static reel_tensor build_op(reel_graph *g, const op_job *j, reel_tensor x)
{
    const op_case *c = j->c;
    switch (c->op) {
    case 0: return reel_all_reduce(g, x);
    case 1: return reel_all_gather(g, x, c->axis, j->n);
    case 2: return reel_reduce_scatter(g, x, c->axis, j->n);
    default: return reel_all_to_all(g, x, c->axis, j->n);
    }
}

static void fill_x(const op_job *j, int r, void *buf)
{
    for (int64_t i = 0; i < j->xe; i++) {
        if (j->c->dt == REEL_I32)
            ((int32_t *)buf)[i] = (int32_t)value(r, i);
        else
            reel_store(buf, j->c->dt, i, value(r, i));
    }
}

static reel_status run_plan(rk_world *w, int r, op_job *j, bool eager, float *got, unsigned char *raw)
{
    const op_case *c = j->c;
    reel_graph *g = NULL;
    reel_plan *p = NULL;
    reel_status st = reel_graph_create(w->ctx[r], &g);
    int64_t d[4];
    int nd = 0;
    if (!c->param)
        d[nd++] = REEL_DIM_TOKENS;
    for (int k = 0; k < c->ndim; k++)
        d[nd++] = j->dims[k];
    size_t xbytes = (size_t)j->xe * reel_dtype_size(c->dt);
    void *xb = calloc(1, xbytes);
    fill_x(j, r, xb);
    reel_tensor x = c->param ? reel_param(g, "x", c->dt, nd, d) : reel_input(g, "x", c->dt, nd, d);
    if (c->param)
        reel_param_bind(g, x, xb);
    reel_output(g, "y", build_op(g, j, x));
    reel_compile_opts o = REEL_COMPILE_OPTS_INIT;
    o.num_buckets = 2;
    o.buckets[0] = 2;
    o.buckets[1] = 4;
    o.no_capture = eager;
    o.check_hazards = 1; /* a collective's staging and result are declared like any op's */
    o.comm = w->comm[r];
    if (st == REEL_OK)
        st = reel_compile(g, &o, &p);
    reel_graph_destroy(g);
    if (st == REEL_OK && !c->param)
        st = reel_plan_set_input(p, "x", xb, ROWS);
    reel_step_info s = { REEL_STEP_INFO_HEAD, .num_tokens = ROWS};
    if (st == REEL_OK)
        st = reel_step(p, &s);
    const void *y = NULL;
    int64_t rows = 0;
    if (st == REEL_OK)
        st = reel_plan_output(p, "y", &y, &rows);
    if (st == REEL_OK) {
        memcpy(raw, y, (size_t)j->ye * reel_dtype_size(c->dt));
        for (int64_t i = 0; i < j->ye; i++)
            got[i] = c->dt == REEL_I32 ? (float)((const int32_t *)y)[i] : reel_load(y, c->dt, i);
        reel_plan_stats ps = REEL_PLAN_STATS_INIT;
        reel_plan_stats_get(p, &ps);
        if (!eager)
            j->replays[r] = ps.replays;
    }
    rk_note(w, r, st);
    reel_plan_destroy(p);
    free(xb);
    return st;
}

static void op_body(rk_world *w, int r, void *arg)
{
    op_job *j = arg;
    if (run_plan(w, r, j, false, j->replay[r], j->raw_replay[r]) == REEL_OK)
        run_plan(w, r, j, true, j->eager[r], j->raw_eager[r]);
}

/* y of rank r at element i, from the op's definition. */
static float expect(const op_job *j, int r, int64_t i)
{
    const op_case *c = j->c;
    int n = j->n, ax = c->param ? c->axis : c->axis - 1; /* axis among j->dims */
    int64_t L = 1, X = 1;
    for (int k = 0; k < ax; k++)
        L *= j->dims[k];
    for (int k = ax; k < c->ndim; k++)
        X *= j->dims[k];
    int64_t rows_per = c->param ? 1 : ROWS;
    (void)rows_per;
    float acc = 0;
    reel_dtype dt = c->dt;
#define RD(v) (dt == REEL_I32 ? (v) : reel_round_to(dt, (v)))
    if (c->op == 0) {
        for (int q = 0; q < n; q++)
            acc += RD(value(q, i));
        return RD(acc);
    }
    int64_t C = c->op == 1 ? X : X / n;     /* a rank's chunk */
    int64_t Y = c->op == 1 ? n * X : c->op == 2 ? C : X;
    int64_t t = i / (L * Y), l = (i / Y) % L, e = i % Y;
    int64_t base = t * L * X + l * X;        /* x's row of (t, l) */
    if (c->op == 1)
        return RD(value((int)(e / X), base + e % X));
    if (c->op == 2) {
        for (int q = 0; q < n; q++)
            acc += RD(value(q, base + (int64_t)r * C + e));
        return RD(acc);
    }
    return RD(value((int)(e / C), base + (int64_t)r * C + e % C));
#undef RD
}

static void run_case(const op_case *c)
{
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        int n = sizes[si];
        op_job *j = calloc(1, sizeof *j);
        j->c = c;
        j->n = n;
        int64_t per = 1;
        for (int k = 0; k < c->ndim; k++) {
            j->dims[k] = c->dims[k] < 0 ? -c->dims[k] * n : c->dims[k];
            per *= j->dims[k];
        }
        int64_t rows = c->param ? 1 : ROWS;
        j->xe = per * rows;
        j->ye = c->op == 1 ? j->xe * n : c->op == 2 ? j->xe / n : j->xe;
        cr_assert_leq(j->ye, MAXE);
        rk_world w;
        cr_assert_eq(rk_open(&w, n, 0), REEL_OK);
        rk_run(&w, op_body, j);
        for (int r = 0; r < n; r++) {
            cr_assert_eq(w.st[r], REEL_OK, "%s, %d ranks: rank %d: %s", c->what, n, r, w.msg[r]);
            cr_assert_eq(j->replays[r], 1, "%s, %d ranks: rank %d did not replay", c->what, n, r);
            for (int64_t i = 0; i < j->ye; i++)
                cr_assert_eq(j->replay[r][i], expect(j, r, i), "%s, %d ranks: rank %d element %lld is %g, want %g",
                             c->what, n, r, (long long)i, (double)j->replay[r][i], (double)expect(j, r, i));
            cr_assert(!memcmp(j->raw_replay[r], j->raw_eager[r], (size_t)j->ye * reel_dtype_size(c->dt)),
                      "%s, %d ranks: rank %d replay != eager", c->what, n, r);
        }
        rk_close(&w);
        free(j);
    }
}

Test(collectives, all_reduce_in_plans_over_2_3_4_and_8_ranks)
{
    static const op_case cs[] = {
        {"all_reduce f32 [T,8]", 0, REEL_F32, 1, {8}, 0, false},
        {"all_reduce bf16 [T,2,4]", 0, REEL_BF16, 2, {2, 4}, 0, false},
        {"all_reduce i32 [T,5]", 0, REEL_I32, 1, {5}, 0, false},
    };
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++)
        run_case(&cs[i]);
}

Test(collectives, all_gather_in_plans_over_2_3_4_and_8_ranks)
{
    static const op_case cs[] = {
        {"all_gather f32 [T,6] axis 1", 1, REEL_F32, 1, {6}, 1, false},
        {"all_gather f16 [T,2,3] axis 2", 1, REEL_F16, 2, {2, 3}, 2, false},
        {"all_gather f32 parameter [2,3] axis 0", 1, REEL_F32, 2, {2, 3}, 0, true},
    };
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++)
        run_case(&cs[i]);
}

Test(collectives, reduce_scatter_in_plans_over_2_3_4_and_8_ranks)
{
    static const op_case cs[] = {
        {"reduce_scatter f32 [T,3n] axis 1", 2, REEL_F32, 1, {-3}, 1, false},
        {"reduce_scatter bf16 [T,2n,2] axis 1", 2, REEL_BF16, 2, {-2, 2}, 1, false},
        {"reduce_scatter f32 [T,3,n] axis 2", 2, REEL_F32, 2, {3, -1}, 2, false},
    };
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++)
        run_case(&cs[i]);
}

Test(collectives, all_to_all_in_plans_over_2_3_4_and_8_ranks)
{
    static const op_case cs[] = {
        {"all_to_all f32 [T,2n] axis 1", 3, REEL_F32, 1, {-2}, 1, false},
        {"all_to_all i32 [T,2,3n] axis 2", 3, REEL_I32, 2, {2, -3}, 2, false},
    };
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++)
        run_case(&cs[i]);
}

/* ---- a pipeline: stages joined by send/recv inside their graphs ---------- */

#define PD 8

typedef struct pp_job {
    int32_t tok[RK_MAX][ROWS];
    float h[ROWS * PD];
} pp_job;

static void pp_weights(int stage, float *w)
{
    for (int d = 0; d < PD; d++)
        w[d] = (float)(((stage + 1) * (d + 3)) % 7) - 3.0f;
}

/* Stage r adds its weight row to the hidden state; the last one takes the
 * argmax and sends the tokens back to stage 0, which outputs them. */
static void pp_body(rk_world *w, int r, void *arg)
{
    pp_job *j = arg;
    int n = w->n;
    reel_graph *g = NULL;
    reel_plan *p = NULL;
    reel_status st = reel_graph_create(w->ctx[r], &g);
    int64_t hd[] = {REEL_DIM_TOKENS, PD}, wd[] = {PD}, td[] = {REEL_DIM_TOKENS};
    float wr[PD];
    pp_weights(r, wr);
    reel_tensor h = r == 0 ? reel_input(g, "x", REEL_F32, 2, hd) : reel_recv(g, "h_in", REEL_F32, 2, hd, r - 1);
    reel_tensor wt = reel_param(g, "w", REEL_F32, 1, wd);
    reel_param_bind(g, wt, wr);
    h = reel_add(g, h, wt);
    if (r < n - 1) {
        reel_send(g, h, r + 1);
    } else {
        reel_tensor tok = reel_argmax(g, h);
        reel_send(g, tok, 0);
        reel_output(g, "h", h);
    }
    if (r == 0)
        reel_output(g, "tok", reel_recv(g, "tok_in", REEL_I32, 1, td, n - 1));
    reel_compile_opts o = REEL_COMPILE_OPTS_INIT;
    o.num_buckets = 1;
    o.buckets[0] = 4;
    o.comm = w->comm[r];
    if (st == REEL_OK)
        st = reel_compile(g, &o, &p);
    reel_graph_destroy(g);
    for (int step = 0; step < 2 && st == REEL_OK; step++) {
        if (r == 0)
            st = reel_plan_set_input(p, "x", j->h, ROWS);
        reel_step_info s = { REEL_STEP_INFO_HEAD, .num_tokens = ROWS};
        if (st == REEL_OK)
            st = reel_step(p, &s);
    }
    const void *out = NULL;
    int64_t rows;
    if (st == REEL_OK && r == 0 && (st = reel_plan_output(p, "tok", &out, &rows)) == REEL_OK)
        memcpy(j->tok[r], out, sizeof j->tok[r]);
    rk_note(w, r, st);
    reel_plan_destroy(p);
}

Test(collectives, a_pipeline_of_2_3_and_4_stages_gives_the_tokens_of_one_stage)
{
    for (int n = 2; n <= 4; n++) {
        pp_job *j = calloc(1, sizeof *j);
        for (int i = 0; i < ROWS * PD; i++)
            j->h[i] = (float)((i * 5) % 11) - 5.0f;
        /* One stage: the same adds in the same order, then the argmax. */
        float ref[ROWS * PD];
        memcpy(ref, j->h, sizeof ref);
        for (int s = 0; s < n; s++) {
            float wr[PD];
            pp_weights(s, wr);
            for (int i = 0; i < ROWS * PD; i++)
                ref[i] += wr[i % PD];
        }
        rk_world w;
        cr_assert_eq(rk_open(&w, n, 0), REEL_OK);
        rk_run(&w, pp_body, j);
        for (int r = 0; r < n; r++)
            cr_assert_eq(w.st[r], REEL_OK, "%d stages: rank %d: %s", n, r, w.msg[r]);
        for (int t = 0; t < ROWS; t++) {
            int best = 0;
            for (int d = 1; d < PD; d++)
                if (ref[t * PD + d] > ref[t * PD + best])
                    best = d;
            cr_assert_eq(j->tok[0][t], best, "%d stages: token %d is %d, one stage gives %d", n, t, j->tok[0][t], best);
        }
        rk_close(&w);
        free(j);
    }
}

/* ---- compile-time rules -------------------------------------------------- */

typedef struct rule_job {
    int mode;
    reel_plan *plan[RK_MAX];
    uint64_t replays[RK_MAX];
    reel_fallback why[RK_MAX];
    float ring[RK_MAX][12];
} rule_job;

enum { M_SHAPE, M_P2P, M_ONE_FAILS, M_CAPTURE, M_KEEP, M_INJECT, M_NRANKS, M_STREAMS, M_SILENT, M_RING, M_BUCKETS };

static void rule_body(rk_world *w, int r, void *arg)
{
    rule_job *j = arg;
    reel_graph *g = NULL;
    reel_status st = reel_graph_create(w->ctx[r], &g);
    int64_t d4[] = {REEL_DIM_TOKENS, 4}, d8[] = {REEL_DIM_TOKENS, 8};
    reel_tensor x = reel_input(g, "x", REEL_F32, 2, d4);
    reel_compile_opts o = REEL_COMPILE_OPTS_INIT;
    o.num_buckets = 1;
    o.buckets[0] = 4;
    o.comm = w->comm[r];
    switch (j->mode) {
    case M_SHAPE: /* rank 1's second all_reduce is wider */
        reel_output(g, "a", reel_all_reduce(g, x));
        if (r == 1)
            x = reel_input(g, "x8", REEL_F32, 2, d8);
        reel_output(g, "b", reel_all_reduce(g, x));
        break;
    case M_P2P: /* rank 1 expects 8 columns, rank 0 sends 4 */
        if (r == 0)
            reel_send(g, x, 1);
        else
            reel_output(g, "y", reel_recv(g, "y", REEL_F32, 2, d8, 0));
        reel_output(g, "x_out", reel_add(g, x, x));
        break;
    case M_ONE_FAILS: /* rank 1's parameter is never bound */
        if (r == 1) {
            int64_t wd[] = {4};
            x = reel_add(g, x, reel_param(g, "w", REEL_F32, 1, wd));
        }
        reel_output(g, "y", reel_all_reduce(g, x));
        break;
    case M_NRANKS:
        reel_output(g, "y", reel_all_gather(g, x, 1, w->n + 1));
        break;
    case M_STREAMS: {
        reel_tensor a = reel_all_reduce(g, x), b = reel_all_reduce(g, reel_add(g, x, x));
        reel_set_stream(g, b, 1);
        reel_output(g, "a", a);
        reel_output(g, "b", b);
        break;
    }
    case M_RING: /* every rank sends to the next and receives from the previous, back to back */
        reel_send(g, x, (r + 1) % w->n);
        reel_output(g, "y", reel_recv(g, "y", REEL_F32, 2, d4, (r + w->n - 1) % w->n));
        break;
    default:
        reel_output(g, "y", reel_all_reduce(g, x));
        o.no_capture = j->mode == M_CAPTURE && r == 0;
        if (j->mode == M_BUCKETS && r == 1)
            o.num_buckets = 2, o.buckets[1] = 8;
        else
            o.buckets[5] = 99; /* past num_buckets: not compared */
        break;
    }
    reel_plan *p = NULL;
    if (st == REEL_OK)
        st = reel_compile(g, &o, &p);
    reel_graph_destroy(g);
    float xs[3 * 4];
    for (int i = 0; i < 12; i++)
        xs[i] = (float)(r + i);
    if (st == REEL_OK && j->mode == M_INJECT && r == 1)
        reel_host_comm_fail_at(w->comm[r], 1);
    bool silent = j->mode == M_SILENT && r == 1; /* compiles, then never steps */
    for (int step = 0; step < (j->mode == M_INJECT ? 2 : 1) && st == REEL_OK && j->mode != M_KEEP && !silent;
         step++) {
        st = reel_plan_set_input(p, "x", xs, 3);
        reel_step_info s = { REEL_STEP_INFO_HEAD, .num_tokens = 3};
        if (st == REEL_OK)
            st = reel_step(p, &s);
        if (j->mode == M_INJECT && st != REEL_OK && step == 0) {
            rk_note(w, r, st);
            /* broken for good: the next step fails at once too */
            st = reel_plan_set_input(p, "x", xs, 3);
            st = reel_step(p, &s);
            if (st != REEL_OK && !strstr(reel_ctx_last_error(w->ctx[r]), "injected failure"))
                st = REEL_E_INTERNAL;
            break;
        }
    }
    if (p && st == REEL_OK && j->mode == M_RING) {
        const void *y;
        int64_t rows;
        if ((st = reel_plan_output(p, "y", &y, &rows)) == REEL_OK)
            memcpy(j->ring[r], y, sizeof j->ring[r]);
    }
    if (p) {
        reel_plan_stats ps = REEL_PLAN_STATS_INIT;
        reel_plan_stats_get(p, &ps);
        j->replays[r] = ps.replays;
        j->why[r] = reel_plan_last_fallback(p);
    }
    if (j->mode != M_INJECT || w->st[r] == REEL_OK)
        rk_note(w, r, st);
    if (j->mode == M_KEEP)
        j->plan[r] = p;
    else
        reel_plan_destroy(p);
}

static void run_rule(rk_world *w, int n, rule_job *j, int timeout_ms)
{
    cr_assert_eq(rk_open(w, n, timeout_ms), REEL_OK);
    rk_run(w, rule_body, j);
}

Test(collectives, ranks_whose_collective_sequences_differ_all_fail_at_compile_naming_the_first_difference)
{
    rk_world w;
    rule_job j = {.mode = M_SHAPE};
    run_rule(&w, 3, &j, 0);
    for (int r = 0; r < 3; r++) {
        cr_assert_eq(w.st[r], REEL_E_INVALID_USAGE, "rank %d: %s", r, w.msg[r]);
        cr_assert(strstr(w.msg[r], "collective sequences differ at collective #1: rank 0 has all_reduce (node 1 -> "
                                   "'all_reduce#1') of [T,4] f32, rank 1 has all_reduce (node 1 -> 'all_reduce#1') "
                                   "of [T,8] f32"),
                  "rank %d: %s", r, w.msg[r]);
    }
    rk_close(&w);
}

Test(collectives, ranks_that_capture_different_buckets_all_fail_at_compile)
{
    rk_world w;
    rule_job j = {.mode = M_BUCKETS};
    run_rule(&w, 3, &j, 0);
    for (int r = 0; r < 3; r++) {
        cr_assert_eq(w.st[r], REEL_E_INVALID_USAGE, "rank %d: %s", r, w.msg[r]);
        cr_assert(strstr(w.msg[r], "rank 1's buckets differ from rank 0's (2 and 1 buckets, largest 8 and 4)"),
                  "rank %d: %s", r, w.msg[r]);
    }
    rk_close(&w);
}

Test(collectives, a_send_whose_recv_differs_fails_both_ranks_at_compile)
{
    rk_world w;
    rule_job j = {.mode = M_P2P};
    run_rule(&w, 2, &j, 0);
    for (int r = 0; r < 2; r++) {
        cr_assert_eq(w.st[r], REEL_E_INVALID_USAGE, "rank %d: %s", r, w.msg[r]);
        cr_assert(strstr(w.msg[r], "message #0 from rank 0 to rank 1 differs: rank 0 sends send (node 0 -> 'send#0') "
                                   "of [T,4] f32, rank 1 receives recv (node 0 -> 'y') of [T,8] f32"),
                  "rank %d: %s", r, w.msg[r]);
    }
    rk_close(&w);
}

Test(collectives, a_rank_that_fails_to_compile_makes_the_others_fail_instead_of_wait)
{
    rk_world w;
    rule_job j = {.mode = M_ONE_FAILS};
    run_rule(&w, 3, &j, 0); /* the default timeout: a wait would take minutes */
    cr_assert_eq(w.st[1], REEL_E_UNBOUND, "%s", w.msg[1]);
    cr_assert(strstr(w.msg[1], "'w'"), "%s", w.msg[1]);
    for (int r = 0; r < 3; r += 2) {
        cr_assert_eq(w.st[r], REEL_E_BACKEND, "rank %d: %s", r, w.msg[r]);
        cr_assert(strstr(w.msg[r], "rank 1 of 3 failed to compile"), "rank %d: %s", r, w.msg[r]);
    }
    rk_close(&w);
}

Test(collectives, an_op_built_for_another_group_size_is_refused_at_compile)
{
    rk_world w;
    rule_job j = {.mode = M_NRANKS};
    run_rule(&w, 2, &j, 0);
    for (int r = 0; r < 2; r++) {
        cr_assert_eq(w.st[r], REEL_E_INVALID_ARG, "rank %d: %s", r, w.msg[r]);
        cr_assert(strstr(w.msg[r], "op 'all_gather' (node 0 -> 'all_gather#0') was built for 3 ranks, the "
                                   "communicator has 2"),
                  "rank %d: %s", r, w.msg[r]);
    }
    rk_close(&w);
}

Test(collectives, a_communicators_ops_on_two_streams_are_refused_at_compile)
{
    rk_world w;
    rule_job j = {.mode = M_STREAMS};
    run_rule(&w, 2, &j, 0);
    for (int r = 0; r < 2; r++) {
        cr_assert_eq(w.st[r], REEL_E_UNSUPPORTED, "rank %d: %s", r, w.msg[r]);
        cr_assert(strstr(w.msg[r], "a communicator's ops run on one stream"), "rank %d: %s", r, w.msg[r]);
    }
    rk_close(&w);
}

Test(collectives, one_rank_without_capture_makes_every_rank_run_eagerly)
{
    rk_world w;
    rule_job j = {.mode = M_CAPTURE};
    run_rule(&w, 2, &j, 0);
    for (int r = 0; r < 2; r++) {
        cr_assert_eq(w.st[r], REEL_OK, "rank %d: %s", r, w.msg[r]);
        cr_assert_eq(j.replays[r], 0, "rank %d replayed", r);
        cr_assert_eq(j.why[r], REEL_FALLBACK_NO_BUCKET, "rank %d: %s", r, reel_fallback_str(j.why[r]));
    }
    rk_close(&w);
}

Test(collectives, a_failure_injected_on_one_rank_fails_every_ranks_step_without_a_hang)
{
    rk_world w;
    rule_job j = {.mode = M_INJECT};
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    run_rule(&w, 4, &j, 0);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    cr_assert_lt((double)(t1.tv_sec - t0.tv_sec), 10.0);
    for (int r = 0; r < 4; r++) {
        cr_assert_eq(w.st[r], REEL_E_BACKEND, "rank %d: %s", r, w.msg[r]);
        cr_assert(strstr(w.msg[r], "comm rank 1 of 4: all_reduce #") && strstr(w.msg[r], "injected failure"),
                  "rank %d: %s", r, w.msg[r]);
    }
    rk_close(&w);
}

Test(collectives, a_rank_that_stops_stepping_times_the_others_step_out)
{
    rk_world w;
    rule_job j = {.mode = M_SILENT};
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    run_rule(&w, 3, &j, 300);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    cr_assert_lt((double)(t1.tv_sec - t0.tv_sec), 20.0);
    cr_assert_eq(w.st[1], REEL_OK, "%s", w.msg[1]);
    for (int r = 0; r < 3; r += 2) {
        cr_assert_eq(w.st[r], REEL_E_BACKEND, "rank %d: %s", r, w.msg[r]);
        cr_assert(strstr(w.msg[r], "step: a collective failed: comm rank") && strstr(w.msg[r], "timed out after 300 ms"),
                  "rank %d: %s", r, w.msg[r]);
    }
    rk_close(&w);
}

Test(collectives, a_ring_of_send_and_recv_nodes_back_to_back_completes_on_every_rank)
{
    for (int n = 2; n <= 8; n *= 2) {
        rk_world w;
        rule_job *j = calloc(1, sizeof *j);
        j->mode = M_RING;
        run_rule(&w, n, j, 0);
        for (int r = 0; r < n; r++) {
            cr_assert_eq(w.st[r], REEL_OK, "%d ranks: rank %d: %s", n, r, w.msg[r]);
            cr_assert_eq(j->replays[r], 1, "%d ranks: rank %d did not replay", n, r);
            for (int i = 0; i < 12; i++)
                cr_assert_eq(j->ring[r][i], (float)((r + n - 1) % n + i), "%d ranks: rank %d element %d", n, r, i);
        }
        rk_close(&w);
        free(j);
    }
}

Test(collectives, a_communicator_is_not_destroyed_while_a_plan_uses_it)
{
    rk_world w;
    rule_job j = {.mode = M_KEEP};
    run_rule(&w, 2, &j, 0);
    for (int r = 0; r < 2; r++) {
        cr_assert_eq(w.st[r], REEL_OK, "rank %d: %s", r, w.msg[r]);
        cr_assert_eq(reel_comm_destroy(w.comm[r]), REEL_E_INVALID_USAGE);
        cr_assert(strstr(reel_ctx_last_error(w.ctx[r]), "1 plan still uses this communicator; destroy it first"),
                  "%s", reel_ctx_last_error(w.ctx[r]));
        reel_plan_destroy(j.plan[r]);
    }
    rk_close(&w); /* now the destroys succeed */
    for (int r = 0; r < 2; r++)
        cr_assert_eq(w.st[r], REEL_OK);
}

Test(collectives, a_graph_with_collectives_and_no_communicator_is_refused_at_compile)
{
    reel_ctx *ctx = NULL;
    reel_ctx_opts co = REEL_CTX_OPTS_INIT;
    co.backend = REEL_BACKEND_HOST;
    cr_assert_eq(reel_ctx_create(&co, &ctx), REEL_OK);
    reel_graph *g = NULL;
    cr_assert_eq(reel_graph_create(ctx, &g), REEL_OK);
    int64_t d[] = {REEL_DIM_TOKENS, 4};
    reel_output(g, "y", reel_all_reduce(g, reel_input(g, "x", REEL_F32, 2, d)));
    reel_plan *p = NULL;
    cr_assert_eq(reel_compile(g, NULL, &p), REEL_E_INVALID_USAGE);
    cr_assert(strstr(reel_ctx_last_error(ctx),
                     "op 'all_reduce' (node 0 -> 'all_reduce#0') needs a communicator: set reel_compile_opts.comm"),
              "%s", reel_ctx_last_error(ctx));
    cr_assert_null(p);
    /* Shapes are checked when the op is built, with the op named. */
    reel_tensor bad = reel_reduce_scatter(g, reel_input(g, "z", REEL_F32, 2, (int64_t[]){REEL_DIM_TOKENS, 5}), 1, 2);
    cr_assert_eq(bad.id, 0);
    cr_assert(strstr(reel_ctx_last_error(ctx), "op 'reduce_scatter' (node 1): x[1] = 5 is not a multiple of nranks 2"),
              "%s", reel_ctx_last_error(ctx));
    reel_graph_destroy(g);
    reel_ctx_destroy(ctx);
}

/* ---- the DCP combine over ranks ------------------------------------------- */

#define DH 2   /* heads */
#define DD 3   /* head dim */

typedef struct dcp_job {
    float out[RK_MAX][ROWS * DH * DD], lse[RK_MAX][ROWS * DH];   /* each rank's partial */
    float got_out[RK_MAX][ROWS * DH * DD], got_lse[RK_MAX][ROWS * DH];
} dcp_job;

/* Each rank's partial attention (out [T,1,H*Dh], lse [T,1,H]) gathered over
 * the ranks, then the LSE combine: what DCP's all-gather exchange does. */
static void dcp_body(rk_world *w, int r, void *arg)
{
    dcp_job *j = arg;
    reel_graph *g = NULL;
    reel_status st = reel_graph_create(w->ctx[r], &g);
    int64_t od[] = {REEL_DIM_TOKENS, 1, DH * DD}, ld[] = {REEL_DIM_TOKENS, 1, DH};
    reel_tensor o = reel_all_gather(g, reel_input(g, "out", REEL_F32, 3, od), 1, w->n);
    reel_tensor l = reel_all_gather(g, reel_input(g, "lse", REEL_F32, 3, ld), 1, w->n);
    reel_tensor co, cl;
    reel_lse_combine(g, o, l, DH, &co, &cl);
    reel_output(g, "o", co);
    reel_output(g, "l", cl);
    reel_compile_opts opt = REEL_COMPILE_OPTS_INIT;
    opt.num_buckets = 1;
    opt.buckets[0] = 4;
    opt.comm = w->comm[r];
    reel_plan *p = NULL;
    if (st == REEL_OK)
        st = reel_compile(g, &opt, &p);
    reel_graph_destroy(g);
    if (st == REEL_OK)
        st = reel_plan_set_input(p, "out", j->out[r], ROWS);
    if (st == REEL_OK)
        st = reel_plan_set_input(p, "lse", j->lse[r], ROWS);
    reel_step_info s = { REEL_STEP_INFO_HEAD, .num_tokens = ROWS};
    if (st == REEL_OK)
        st = reel_step(p, &s);
    const void *y;
    int64_t rows;
    if (st == REEL_OK && (st = reel_plan_output(p, "o", &y, &rows)) == REEL_OK)
        memcpy(j->got_out[r], y, sizeof j->got_out[r]);
    if (st == REEL_OK && (st = reel_plan_output(p, "l", &y, &rows)) == REEL_OK)
        memcpy(j->got_lse[r], y, sizeof j->got_lse[r]);
    rk_note(w, r, st);
    reel_plan_destroy(p);
}

Test(collectives, dcp_partials_combined_across_ranks_equal_the_combine_on_one_rank_empty_shards_included)
{
    for (int n = 2; n <= 8; n *= 2) {
        dcp_job *j = calloc(1, sizeof *j);
        for (int r = 0; r < n; r++)
            for (int t = 0; t < ROWS; t++)
                for (int h = 0; h < DH; h++) {
                    /* rank 1 holds no keys of token 0 (an empty shard: out NaN, lse -inf) */
                    bool empty = r == 1 && t == 0;
                    j->lse[r][t * DH + h] = empty ? -INFINITY : (float)((r * 7 + t * 3 + h) % 5) * 0.5f;
                    for (int d = 0; d < DD; d++)
                        j->out[r][(t * DH + h) * DD + d] = empty ? NAN : (float)(r - t + d) * 0.25f;
                }
        rk_world w;
        cr_assert_eq(rk_open(&w, n, 0), REEL_OK);
        rk_run(&w, dcp_body, j);
        /* One rank: the same partials as one [T, n, ...] input. */
        reel_ctx *ctx = NULL;
        reel_ctx_opts co = REEL_CTX_OPTS_INIT;
        co.backend = REEL_BACKEND_HOST;
        cr_assert_eq(reel_ctx_create(&co, &ctx), REEL_OK);
        reel_graph *g = NULL;
        reel_graph_create(ctx, &g);
        int64_t od[] = {REEL_DIM_TOKENS, n, DH * DD}, ld[] = {REEL_DIM_TOKENS, n, DH};
        reel_tensor out, lse;
        reel_lse_combine(g, reel_input(g, "out", REEL_F32, 3, od), reel_input(g, "lse", REEL_F32, 3, ld), DH, &out,
                         &lse);
        reel_output(g, "o", out);
        reel_output(g, "l", lse);
        reel_plan *p = NULL;
        cr_assert_eq(reel_compile(g, NULL, &p), REEL_OK, "%s", reel_ctx_last_error(ctx));
        reel_graph_destroy(g);
        float *ao = calloc((size_t)(ROWS * n * DH * DD), sizeof *ao), *al = calloc((size_t)(ROWS * n * DH), 4);
        for (int t = 0; t < ROWS; t++)
            for (int r = 0; r < n; r++) {
                memcpy(ao + (t * n + r) * DH * DD, j->out[r] + t * DH * DD, DH * DD * 4);
                memcpy(al + (t * n + r) * DH, j->lse[r] + t * DH, DH * 4);
            }
        reel_plan_set_input(p, "out", ao, ROWS);
        reel_plan_set_input(p, "lse", al, ROWS);
        reel_step_info s = { REEL_STEP_INFO_HEAD, .num_tokens = ROWS};
        cr_assert_eq(reel_step(p, &s), REEL_OK, "%s", reel_ctx_last_error(ctx));
        const void *wo, *wl;
        int64_t rows;
        reel_plan_output(p, "o", &wo, &rows);
        reel_plan_output(p, "l", &wl, &rows);
        for (int r = 0; r < n; r++) {
            cr_assert_eq(w.st[r], REEL_OK, "%d ranks: rank %d: %s", n, r, w.msg[r]);
            cr_assert(!memcmp(j->got_out[r], wo, sizeof j->got_out[r]), "%d ranks: rank %d's out differs", n, r);
            cr_assert(!memcmp(j->got_lse[r], wl, sizeof j->got_lse[r]), "%d ranks: rank %d's lse differs", n, r);
            for (size_t i = 0; i < sizeof j->got_out[r] / 4; i++)
                cr_assert(!isnan(j->got_out[r][i]), "%d ranks: an empty shard's NaN reached the result", n);
        }
        free(ao), free(al);
        reel_plan_destroy(p);
        reel_ctx_destroy(ctx);
        rk_close(&w);
        free(j);
    }
}
