/* The host communicator through its interface (backend/comm.h): every
 * collective with 2, 3, 4 and 8 ranks as threads, each on its rank's host
 * stream; buffered sends in a ring; a collective recorded into a host graph
 * and replayed; and the error model: a mismatched collective, an injected
 * failure and a silent rank leave every rank with an error, not a hang. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "backend/comm.h"
#include "backend/ctx.h"
#include "backend/host/host.h"
#include "core/dtype.h"
#include "tests/parallel/ranks.h"

static const int sizes[] = {2, 3, 4, 8};
#define COUNT 37

typedef enum { K_ALL_REDUCE, K_ALL_REDUCE_INPLACE, K_ALL_GATHER, K_REDUCE_SCATTER, K_ALL_TO_ALL, K_RING } kind;

typedef struct job {
    kind k;
    reel_dtype dt;
    float got[RK_MAX][RK_MAX * COUNT];
    reel_status st[RK_MAX];
} job;

static float value(int rank, int i) { return (float)(rank * 100 + i % 50); }

static void body(rk_world *w, int r, void *arg)
{
    job *j = arg;
    reel_comm *c = w->comm[r];
    reel_backend *be = w->ctx[r]->be;
    int n = w->n;
    size_t es = reel_dtype_size(j->dt), total = (size_t)n * COUNT;
    char *send = calloc(total, es), *recv = calloc(total, es);
    reel_stream *s = NULL;
    be->vt->stream_create(be, &s);
    size_t nsend = j->k == K_REDUCE_SCATTER || j->k == K_ALL_TO_ALL ? total : COUNT;
    for (size_t i = 0; i < nsend; i++) {
        if (j->dt == REEL_I32)
            ((int32_t *)send)[i] = (int32_t)value(r, (int)i);
        else
            reel_store(send, j->dt, (int64_t)i, value(r, (int)i));
    }
    reel_status st = REEL_OK;
    switch (j->k) {
    case K_ALL_REDUCE: st = c->vt->all_reduce(c, s, send, recv, COUNT, j->dt, REEL_REDOP_SUM); break;
    case K_ALL_REDUCE_INPLACE:
        st = c->vt->all_reduce(c, s, send, send, COUNT, j->dt, REEL_REDOP_SUM);
        memcpy(recv, send, COUNT * es); /* read after the sync below */
        break;
    case K_ALL_GATHER: st = c->vt->all_gather(c, s, send, recv, COUNT, j->dt); break;
    case K_REDUCE_SCATTER: st = c->vt->reduce_scatter(c, s, send, recv, COUNT, j->dt, REEL_REDOP_SUM); break;
    case K_ALL_TO_ALL: st = c->vt->all_to_all(c, s, send, recv, COUNT, j->dt); break;
    case K_RING:
        /* Every rank sends first: buffered sends cannot deadlock. */
        st = c->vt->send(c, s, send, COUNT, j->dt, (r + 1) % n);
        if (st == REEL_OK)
            st = c->vt->recv(c, s, recv, COUNT, j->dt, (r + n - 1) % n);
        break;
    }
    if (st == REEL_OK)
        st = c->vt->sync(c, s);
    if (j->k == K_ALL_REDUCE_INPLACE)
        memcpy(recv, send, COUNT * es);
    j->st[r] = st;
    size_t nrecv = j->k == K_ALL_REDUCE || j->k == K_ALL_REDUCE_INPLACE || j->k == K_REDUCE_SCATTER || j->k == K_RING
                       ? COUNT
                       : total;
    for (size_t i = 0; i < nrecv; i++)
        j->got[r][i] = j->dt == REEL_I32 ? (float)((int32_t *)recv)[i] : reel_load(recv, j->dt, (int64_t)i);
    be->vt->stream_destroy(be, s);
    free(send);
    free(recv);
}

static reel_dtype want_dt = REEL_F32;
/* Inputs as stored, and a sum as stored. */
static float rd(float v) { return want_dt == REEL_I32 ? v : reel_round_to(want_dt, v); }
static float vs(int q, int i) { return rd(value(q, i)); }

/* What rank r must hold at element i. */
static float want(kind k, int n, int r, int i)
{
    float acc = 0;
    switch (k) {
    case K_ALL_REDUCE:
    case K_ALL_REDUCE_INPLACE:
        for (int q = 0; q < n; q++)
            acc += vs(q, i);
        return rd(acc);
    case K_REDUCE_SCATTER:
        for (int q = 0; q < n; q++)
            acc += vs(q, r * COUNT + i);
        return rd(acc);
    case K_ALL_GATHER: return vs(i / COUNT, i % COUNT);
    case K_ALL_TO_ALL: return vs(i / COUNT, r * COUNT + i % COUNT);
    case K_RING: return vs((r + n - 1) % n, i);
    }
    return 0;
}

static void check(kind k, reel_dtype dt, const char *what)
{
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        int n = sizes[si];
        rk_world w;
        cr_assert_eq(rk_open(&w, n, 0), REEL_OK);
        job *j = calloc(1, sizeof *j);
        j->k = k;
        j->dt = dt;
        want_dt = dt;
        rk_run(&w, body, j);
        int nrecv = k == K_ALL_GATHER || k == K_ALL_TO_ALL ? n * COUNT : COUNT;
        for (int r = 0; r < n; r++) {
            cr_assert_eq(j->st[r], REEL_OK, "%s %s, %d ranks: rank %d: %s", what, reel_dtype_name(dt), n, r,
                         reel_ctx_last_error(w.ctx[r]));
            for (int i = 0; i < nrecv; i++)
                cr_assert_eq(j->got[r][i], want(k, n, r, i), "%s %s, %d ranks: rank %d element %d is %g, want %g",
                             what, reel_dtype_name(dt), n, r, i, (double)j->got[r][i], (double)want(k, n, r, i));
        }
        free(j);
        rk_close(&w);
        for (int r = 0; r < n; r++)
            cr_assert_eq(w.st[r], REEL_OK);
    }
}

Test(comm, all_reduce_sums_over_2_3_4_and_8_ranks_in_f32_bf16_and_i32)
{
    check(K_ALL_REDUCE, REEL_F32, "all_reduce");
    check(K_ALL_REDUCE, REEL_BF16, "all_reduce");
    check(K_ALL_REDUCE, REEL_I32, "all_reduce");
}

Test(comm, all_reduce_in_place_reads_every_input_before_it_is_overwritten)
{
    check(K_ALL_REDUCE_INPLACE, REEL_F32, "all_reduce in place");
}

Test(comm, all_gather_is_rank_major_over_2_3_4_and_8_ranks)
{
    check(K_ALL_GATHER, REEL_F32, "all_gather");
    check(K_ALL_GATHER, REEL_F16, "all_gather");
}

Test(comm, reduce_scatter_gives_each_rank_the_sum_of_its_chunk)
{
    check(K_REDUCE_SCATTER, REEL_F32, "reduce_scatter");
    check(K_REDUCE_SCATTER, REEL_I32, "reduce_scatter");
}

Test(comm, all_to_all_swaps_chunks_between_every_pair)
{
    check(K_ALL_TO_ALL, REEL_F32, "all_to_all");
    check(K_ALL_TO_ALL, REEL_BF16, "all_to_all");
}

Test(comm, sends_are_buffered_so_a_ring_of_send_then_recv_completes)
{
    check(K_RING, REEL_F32, "ring send/recv");
    check(K_RING, REEL_I32, "ring send/recv");
}

/* ---- recorded into a host graph ----------------------------------------- */

typedef struct replay_job {
    float in[RK_MAX][4], res[RK_MAX][4], out[RK_MAX][2][4];
    reel_status st[RK_MAX];
} replay_job;

static void replay_body(rk_world *w, int r, void *arg)
{
    replay_job *j = arg;
    reel_comm *c = w->comm[r];
    reel_backend *be = w->ctx[r]->be;
    reel_stream *s = NULL;
    reel_exec_graph *g = NULL;
    float *x = j->in[r];
    be->vt->stream_create(be, &s);
    reel_status st = be->vt->capture_begin(be, s);
    if (st == REEL_OK)
        st = c->vt->all_reduce(c, s, x, j->res[r], 4, REEL_F32, REEL_REDOP_SUM);
    if (st == REEL_OK)
        st = be->vt->capture_end(be, s, &g);
    for (int rep = 0; rep < 2 && st == REEL_OK; rep++) {
        for (int i = 0; i < 4; i++)
            x[i] = (float)(r + 1) * (float)(i + 1) * (float)(rep + 1);
        st = be->vt->graph_launch(be, g, s);
        if (st == REEL_OK)
            st = c->vt->sync(c, s);
        memcpy(j->out[r][rep], j->res[r], sizeof j->res[r]);
    }
    j->st[r] = st;
    if (g)
        be->vt->graph_destroy(be, g);
    be->vt->stream_destroy(be, s);
}

Test(comm, a_collective_recorded_into_a_host_graph_runs_at_each_replay)
{
    rk_world w;
    int n = 3;
    cr_assert_eq(rk_open(&w, n, 0), REEL_OK);
    replay_job *j = calloc(1, sizeof *j);
    rk_run(&w, replay_body, j);
    for (int r = 0; r < n; r++) {
        cr_assert_eq(j->st[r], REEL_OK, "rank %d: %s", r, reel_ctx_last_error(w.ctx[r]));
        for (int rep = 0; rep < 2; rep++)
            for (int i = 0; i < 4; i++)
                cr_assert_eq(j->out[r][rep][i], 6.0f * (float)(i + 1) * (float)(rep + 1), "rank %d replay %d: %g", r, rep, (double)j->out[r][rep][i]);
    }
    free(j);
    rk_close(&w);
}

/* ---- errors: no rank hangs ---------------------------------------------- */

typedef struct fail_job {
    int mode;                 /* 0 mismatch, 1 injected failure on rank 1, 2 rank 1 silent */
    reel_status st[RK_MAX];
    char msg[RK_MAX][512];
} fail_job;

static void fail_body(rk_world *w, int r, void *arg)
{
    fail_job *j = arg;
    reel_comm *c = w->comm[r];
    reel_backend *be = w->ctx[r]->be;
    reel_stream *s = NULL;
    float a[8 * 4] = {0}, b[8 * 4] = {0};
    be->vt->stream_create(be, &s);
    reel_status st = REEL_OK;
    if (j->mode == 1 && r == 1)
        reel_host_comm_fail_at(c, 2);
    if (!(j->mode == 2 && r == 1)) {
        for (int k = 0; k < 3 && st == REEL_OK; k++)
            st = (j->mode == 0 && r == 1 && k == 1) ? c->vt->all_gather(c, s, a, b, 4, REEL_F32)
                                                    : c->vt->all_reduce(c, s, a, b, 4, REEL_F32, REEL_REDOP_SUM);
        if (st == REEL_OK)
            st = c->vt->sync(c, s);
    }
    j->st[r] = st;
    snprintf(j->msg[r], sizeof j->msg[r], "%s", reel_ctx_last_error(w->ctx[r]));
    be->vt->stream_destroy(be, s);
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

Test(comm, a_collective_issued_differently_on_one_rank_fails_every_rank)
{
    rk_world w;
    cr_assert_eq(rk_open(&w, 4, 0), REEL_OK);
    fail_job *j = calloc(1, sizeof *j);
    rk_run(&w, fail_body, j);
    for (int r = 0; r < 4; r++) {
        cr_assert_eq(j->st[r], REEL_E_INVALID_USAGE, "rank %d: %s", r, j->msg[r]);
        cr_assert(strstr(j->msg[r], "collective #1 differs across ranks: rank 0 issued all_reduce of 4 f32, rank 1 "
                                    "all_gather of 4 f32"),
                  "rank %d: %s", r, j->msg[r]);
    }
    free(j);
    rk_close(&w);
}

Test(comm, an_injected_failure_on_one_rank_fails_every_rank_at_once)
{
    rk_world w;
    cr_assert_eq(rk_open(&w, 4, 0), REEL_OK); /* the default timeout: minutes */
    fail_job *j = calloc(1, sizeof *j);
    j->mode = 1;
    double t0 = now_s();
    rk_run(&w, fail_body, j);
    cr_assert_lt(now_s() - t0, 10.0, "the ranks waited for the failed one");
    for (int r = 0; r < 4; r++) {
        cr_assert_eq(j->st[r], REEL_E_BACKEND, "rank %d: %s", r, j->msg[r]);
        cr_assert(strstr(j->msg[r], "comm rank 1 of 4: all_reduce #1: injected failure"), "rank %d: %s", r, j->msg[r]);
    }
    /* Broken for good: a later collective fails at once. */
    reel_backend *be = w.ctx[0]->be;
    reel_stream *s = NULL;
    float a[4] = {0}, b[4];
    be->vt->stream_create(be, &s);
    cr_assert_eq(w.comm[0]->vt->all_reduce(w.comm[0], s, a, b, 4, REEL_F32, REEL_REDOP_SUM), REEL_OK);
    cr_assert_eq(w.comm[0]->vt->sync(w.comm[0], s), REEL_E_BACKEND);
    cr_assert_eq(reel_comm_async_error(w.comm[0]), REEL_E_BACKEND);
    be->vt->stream_destroy(be, s);
    free(j);
    rk_close(&w);
}

Test(comm, a_rank_that_never_comes_times_the_others_out_with_a_message)
{
    rk_world w;
    cr_assert_eq(rk_open(&w, 3, 300), REEL_OK);
    fail_job *j = calloc(1, sizeof *j);
    j->mode = 2;
    double t0 = now_s();
    rk_run(&w, fail_body, j);
    cr_assert_lt(now_s() - t0, 20.0);
    for (int r = 0; r < 3; r += 2) {
        cr_assert_eq(j->st[r], REEL_E_BACKEND, "rank %d: %s", r, j->msg[r]);
        cr_assert(strstr(j->msg[r], "all_reduce #0 timed out after 300 ms waiting for ranks 1"), "rank %d: %s", r,
                  j->msg[r]);
    }
    free(j);
    rk_close(&w);
}

typedef struct leave_job {
    reel_status st;
    char msg[512];
} leave_job;

/* Rank 1 leaves (destroys its communicator) while rank 0 waits for it. */
static void leave_body(rk_world *w, int r, void *arg)
{
    leave_job *j = arg;
    if (r == 1) {
        struct timespec ts = {0, 100 * 1000000L};
        nanosleep(&ts, NULL);
        reel_comm_destroy(w->comm[1]);
        w->comm[1] = NULL;
        return;
    }
    reel_comm *c = w->comm[0];
    reel_backend *be = w->ctx[0]->be;
    reel_stream *s = NULL;
    float a[4] = {0}, b[4];
    be->vt->stream_create(be, &s);
    j->st = c->vt->all_reduce(c, s, a, b, 4, REEL_F32, REEL_REDOP_SUM);
    if (j->st == REEL_OK)
        j->st = c->vt->sync(c, s);
    snprintf(j->msg, sizeof j->msg, "%s", reel_ctx_last_error(w->ctx[0]));
    be->vt->stream_destroy(be, s);
}

Test(comm, a_rank_that_destroys_its_communicator_fails_the_one_waiting_for_it)
{
    rk_world w;
    cr_assert_eq(rk_open(&w, 2, 0), REEL_OK); /* the default timeout: minutes */
    leave_job j = {0};
    double t0 = now_s();
    rk_run(&w, leave_body, &j);
    cr_assert_lt(now_s() - t0, 10.0);
    cr_assert_eq(j.st, REEL_E_BACKEND, "%s", j.msg);
    cr_assert(strstr(j.msg, "comm rank 0 of 2: all_reduce #0: ranks 1 (left) never came: a rank left the group"),
              "%s", j.msg);
    rk_close(&w);
}

/* ---- creation by id --------------------------------------------------------- */

typedef struct join_job {
    reel_comm_id id;
    int nranks_of[RK_MAX];
    reel_comm *comm[RK_MAX];
    reel_status st[RK_MAX];
} join_job;

static void join_body(rk_world *w, int r, void *arg)
{
    join_job *j = arg;
    j->st[r] = reel_comm_create(w->ctx[r], &j->id, r, j->nranks_of[r], NULL, &j->comm[r]);
}

Test(comm, ranks_join_by_an_id_passed_as_hex_and_disagreeing_sizes_are_refused)
{
    rk_world w;
    reel_ctx_opts o = REEL_CTX_OPTS_INIT;
    o.backend = REEL_BACKEND_HOST;
    memset(&w, 0, sizeof w);
    w.n = 4;
    for (int r = 0; r < 4; r++)
        cr_assert_eq(reel_ctx_create(&o, &w.ctx[r]), REEL_OK);
    join_job *j = calloc(1, sizeof *j);
    reel_comm_id id;
    char hex[2 * REEL_COMM_ID_BYTES + 1];
    cr_assert_eq(reel_comm_unique_id(w.ctx[0], &id), REEL_OK);
    cr_assert_eq(reel_comm_id_to_hex(&id, hex, sizeof hex), REEL_OK);
    cr_assert_eq(reel_comm_id_from_hex(hex, &j->id), REEL_OK);
    cr_assert(!memcmp(&id, &j->id, sizeof id));
    cr_assert_eq(reel_comm_id_from_hex("00ff", &j->id), REEL_E_INVALID_ARG);
    cr_assert_eq(reel_comm_id_from_hex(hex, &j->id), REEL_OK);
    for (int r = 0; r < 4; r++)
        j->nranks_of[r] = 4;
    rk_run(&w, join_body, j);
    for (int r = 0; r < 4; r++) {
        cr_assert_eq(j->st[r], REEL_OK, "rank %d: %s", r, reel_ctx_last_error(w.ctx[r]));
        cr_assert_eq(reel_comm_rank(j->comm[r]), r);
        cr_assert_eq(reel_comm_size(j->comm[r]), 4);
        w.comm[r] = j->comm[r];
    }
    /* The communicators work: an all_reduce over them. */
    job *aj = calloc(1, sizeof *aj);
    aj->k = K_ALL_REDUCE;
    aj->dt = REEL_F32;
    want_dt = REEL_F32;
    rk_run(&w, body, aj);
    for (int r = 0; r < 4; r++)
        cr_assert_eq(aj->got[r][3], want(K_ALL_REDUCE, 4, r, 3));
    free(aj);
    for (int r = 0; r < 4; r++) {
        cr_assert_eq(reel_comm_destroy(w.comm[r]), REEL_OK);
        w.comm[r] = NULL;
    }
    /* A new id; one rank says 3 ranks: refused with a message, the rest time out. */
    reel_comm_opts co = REEL_COMM_OPTS_INIT;
    co.timeout_ms = 200;
    cr_assert_eq(reel_comm_unique_id(w.ctx[0], &j->id), REEL_OK);
    reel_comm *c0 = NULL, *c1 = NULL;
    cr_assert_eq(reel_comm_create(w.ctx[0], &j->id, 0, 2, &co, &c0), REEL_E_BACKEND);
    cr_assert(strstr(reel_ctx_last_error(w.ctx[0]), "timed out after 200 ms with 1 of 2 ranks joined"), "%s",
              reel_ctx_last_error(w.ctx[0]));
    cr_assert_null(c0);
    cr_assert_eq(reel_comm_create(w.ctx[1], &j->id, 1, 0, &co, &c1), REEL_E_INVALID_ARG);
    free(j);
    rk_close(&w);
}

/* Issue 46: a world of threads split by color and key (rank 3 in none):
 * the new groups' sizes and ranks, and they work (a compile exchange and an
 * all_reduce of the parent ranks). */
static void split_body(rk_world *w, int r, void *arg)
{
    (void)arg;
    reel_comm *sub = NULL;
    int color = r == 3 ? REEL_COMM_SPLIT_NONE : r % 2;
    if (rk_note(w, r, reel_comm_split(w->comm[r], color, -r, NULL, &sub)) != REEL_OK)
        return;
    if (r == 3) {
        w->st[r] = sub ? REEL_E_INTERNAL : REEL_OK;
        return;
    }
    int want_size = r % 2 == 0 ? 2 : 1, want_rank = r == 0 ? 1 : 0;
    if (reel_comm_size(sub) != want_size || reel_comm_rank(sub) != want_rank) {
        w->st[r] = REEL_E_INTERNAL;
        snprintf(w->msg[r], sizeof w->msg[r], "rank %d of %d, want %d of %d", reel_comm_rank(sub),
                 reel_comm_size(sub), want_rank, want_size);
    } else {
        reel_graph *g = NULL;
        reel_graph_create(w->ctx[r], &g);
        int64_t d[2] = {REEL_DIM_TOKENS, 1};
        reel_output(g, "y", reel_all_reduce(g, reel_input(g, "x", REEL_F32, 2, d)));
        reel_compile_opts o = REEL_COMPILE_OPTS_INIT;
        o.comm = sub;
        reel_plan *p = NULL;
        reel_status st = reel_compile(g, &o, &p);
        reel_graph_destroy(g);
        float x = (float)r;
        reel_step_info si = {REEL_STEP_INFO_HEAD, .num_tokens = 1};
        if (st == REEL_OK)
            st = reel_plan_set_input(p, "x", &x, 1);
        if (st == REEL_OK)
            st = reel_step(p, &si);
        const void *y = NULL;
        if (st == REEL_OK)
            st = reel_plan_output(p, "y", &y, NULL);
        if (st == REEL_OK && *(const float *)y != (r % 2 == 0 ? 2.0f : 1.0f))
            st = REEL_E_INTERNAL;
        rk_note(w, r, st);
        reel_plan_destroy(p);
    }
    reel_comm_destroy(sub);
}

Test(comm, a_world_of_threads_splits_into_groups_by_color_and_key)
{
    rk_world w;
    cr_assert_eq(rk_open(&w, 4, 5000), REEL_OK);
    rk_run(&w, split_body, NULL);
    for (int r = 0; r < 4; r++)
        cr_expect_eq(w.st[r], REEL_OK, "rank %d: %s", r, w.msg[r]);
    reel_comm *none = NULL;
    cr_expect_eq(reel_comm_split(w.comm[0], -2, 0, NULL, &none), REEL_E_INVALID_ARG);
    cr_expect(strstr(reel_ctx_last_error(w.ctx[0]), "color -2"), "%s", reel_ctx_last_error(w.ctx[0]));
    rk_close(&w);
}
