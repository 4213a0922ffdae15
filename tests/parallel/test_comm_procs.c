/* Issue 46: the host communicator across processes (reel_comm_opts.processes):
 * N forked processes, each its own context, join one id over Unix sockets
 * and step a graph of every collective and a ring of send/recv, replayed;
 * each checks its results against the ops' definitions (sums in float32 in
 * rank order: the same bits the threads' communicator gives). A rank that
 * exits breaks the others' steps at once with its rank named, no hang; the
 * join refuses ranks that disagree on the group size. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "reel/comm.h"
#include "tests/core/opts.h"

enum { T = 2, C = 4, STEPS = 3 };

static float value(int rank, int64_t i, int step) { return (float)(rank * 100 + (int)(i % 37) + step) * 0.5f; }

static reel_comm_opts proc_opts(int timeout_ms)
{
    reel_comm_opts o = REEL_COMM_OPTS_INIT;
    o.processes = 1;
    o.timeout_ms = timeout_ms;
    return o;
}

#define FAILF(...) do { fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); return 1; } while (0)

static int g_port; /* env_main's MASTER_PORT: the rendezvous listens on it + 1 */

/* One rank: the collectives graph, STEPS replayed steps, every result
 * checked. id NULL: the group from the environment, as torchrun sets it. */
static int rank_run(const reel_comm_id *id, int r, int n)
{
    reel_ctx *ctx = NULL;
    if (reel_ctx_create(reel_test_ctx_opts(REEL_BACKEND_HOST), &ctx) != REEL_OK)
        FAILF("rank %d: no context", r);
    reel_comm_opts co = proc_opts(20000);
    reel_comm *comm = NULL;
    if (id && reel_comm_create(ctx, id, r, n, &co, &comm) != REEL_OK)
        FAILF("rank %d: comm create: %s", r, reel_ctx_last_error(ctx));
    if (!id && reel_comm_create_env(ctx, &co, &comm) != REEL_OK)
        FAILF("rank %d: comm create_env: %s", r, reel_ctx_last_error(ctx));
    if (reel_comm_rank(comm) != r || reel_comm_size(comm) != n)
        FAILF("rank %d: rank/size %d/%d", r, reel_comm_rank(comm), reel_comm_size(comm));
    const int W = C * n;
    reel_graph *g = NULL;
    reel_graph_create(ctx, &g);
    int64_t d[2] = {REEL_DIM_TOKENS, W}, d4[2] = {REEL_DIM_TOKENS, C};
    reel_tensor x = reel_input(g, "x", REEL_F32, 2, d);
    reel_output(g, "ar", reel_all_reduce(g, x));
    reel_output(g, "ag", reel_all_gather(g, x, 1, n));
    reel_output(g, "rs", reel_reduce_scatter(g, x, 1, n));
    reel_output(g, "a2a", reel_all_to_all(g, x, 1, n));
    reel_tensor x4 = reel_input(g, "x4", REEL_F32, 2, d4);
    reel_send(g, x4, (r + 1) % n);
    reel_output(g, "ring", reel_recv(g, "ring_in", REEL_F32, 2, d4, (r + n - 1) % n));
    reel_compile_opts o = REEL_COMPILE_OPTS_INIT;
    o.num_buckets = 1;
    o.buckets[0] = T;
    o.comm = comm;
    reel_plan *p = NULL;
    if (reel_compile(g, &o, &p) != REEL_OK)
        FAILF("rank %d: compile: %s", r, reel_ctx_last_error(ctx));
    reel_graph_destroy(g);
    float xb[T * 64], x4b[T * C];
    for (int s = 0; s < STEPS; s++) {
        for (int64_t i = 0; i < T * W; i++)
            xb[i] = value(r, i, s);
        for (int64_t i = 0; i < T * C; i++)
            x4b[i] = value(r, 1000 + i, s);
        reel_plan_set_input(p, "x", xb, T);
        reel_plan_set_input(p, "x4", x4b, T);
        reel_step_info si = {REEL_STEP_INFO_HEAD, .num_tokens = T};
        if (reel_step(p, &si) != REEL_OK)
            FAILF("rank %d: step %d: %s", r, s, reel_ctx_last_error(ctx));
        if (reel_plan_last_fallback(p) != REEL_FALLBACK_NONE)
            FAILF("rank %d: step %d did not replay", r, s);
        const void *y;
        int64_t rows;
        reel_plan_output(p, "ar", &y, &rows);
        for (int64_t i = 0; i < T * W; i++) {
            float acc = 0.0f;
            for (int q = 0; q < n; q++)
                acc += value(q, i, s);
            if (((const float *)y)[i] != acc)
                FAILF("rank %d: all_reduce[%lld] %g, want %g", r, (long long)i, ((const float *)y)[i], acc);
        }
        reel_plan_output(p, "ag", &y, &rows);
        for (int t = 0; t < T; t++)
            for (int q = 0; q < n; q++)
                for (int c = 0; c < W; c++) {
                    float got = ((const float *)y)[(t * n + q) * W + c], want = value(q, t * W + c, s);
                    if (got != want)
                        FAILF("rank %d: all_gather[%d][%d][%d] %g, want %g", r, t, q, c, got, want);
                }
        reel_plan_output(p, "rs", &y, &rows);
        for (int t = 0; t < T; t++)
            for (int c = 0; c < C; c++) {
                float acc = 0.0f;
                for (int q = 0; q < n; q++)
                    acc += value(q, t * W + r * C + c, s);
                if (((const float *)y)[t * C + c] != acc)
                    FAILF("rank %d: reduce_scatter[%d][%d] %g, want %g", r, t, c, ((const float *)y)[t * C + c], acc);
            }
        reel_plan_output(p, "a2a", &y, &rows);
        for (int t = 0; t < T; t++)
            for (int q = 0; q < n; q++)
                for (int c = 0; c < C; c++) {
                    float got = ((const float *)y)[t * W + q * C + c], want = value(q, t * W + r * C + c, s);
                    if (got != want)
                        FAILF("rank %d: all_to_all[%d][%d][%d] %g, want %g", r, t, q, c, got, want);
                }
        reel_plan_output(p, "ring", &y, &rows);
        for (int64_t i = 0; i < T * C; i++)
            if (((const float *)y)[i] != value((r + n - 1) % n, 1000 + i, s))
                FAILF("rank %d: ring[%lld] %g", r, (long long)i, ((const float *)y)[i]);
    }
    reel_plan_destroy(p);
    if (reel_comm_destroy(comm) != REEL_OK)
        FAILF("rank %d: comm destroy: %s", r, reel_ctx_last_error(ctx));
    reel_ctx_destroy(ctx);
    return 0;
}

static int rank_main(const reel_comm_id *id, int r, int n) { return rank_run(id, r, n); }

/* torchrun's variables, then the same run. */
static int env_main(const reel_comm_id *id, int r, int n)
{
    (void)id;
    char v[32];
    snprintf(v, sizeof v, "%d", r);
    setenv("RANK", v, 1);
    setenv("LOCAL_RANK", v, 1);
    snprintf(v, sizeof v, "%d", n);
    setenv("WORLD_SIZE", v, 1);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    snprintf(v, sizeof v, "%d", g_port);
    setenv("MASTER_PORT", v, 1);
    unsetenv("REEL_RDZV_PORT");
    return rank_run(NULL, r, n);
}

/* Forks n ranks running fn; true when every one exited 0. */
static bool run_ranks(int n, int (*fn)(const reel_comm_id *, int, int))
{
    reel_ctx *ctx = NULL;
    cr_assert_eq(reel_ctx_create(reel_test_ctx_opts(REEL_BACKEND_HOST), &ctx), REEL_OK);
    reel_comm_id id;
    cr_assert_eq(reel_comm_unique_id(ctx, &id), REEL_OK);
    reel_ctx_destroy(ctx);
    fflush(NULL);
    pid_t pid[8];
    for (int r = 0; r < n; r++) {
        pid[r] = fork();
        cr_assert(pid[r] >= 0);
        if (pid[r] == 0)
            _exit(fn(&id, r, n));
    }
    bool ok = true;
    for (int r = 0; r < n; r++) {
        int status = 0;
        waitpid(pid[r], &status, 0);
        ok = ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
        cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "rank %d of %d: exit status %d", r, n, status);
    }
    return ok;
}

Test(comm_procs, every_collective_and_a_ring_across_2_3_and_4_processes)
{
    for (int n = 2; n <= 4; n++)
        cr_assert(run_ranks(n, rank_main), "%d processes", n);
}

Test(comm_procs, torchrun_variables_make_the_group)
{
    g_port = 20000 + (int)(getpid() % 20000) * 2;
    cr_assert(run_ranks(3, env_main));
}

/* Missing or bad variables are refused, naming them. */
Test(comm_procs, a_missing_or_bad_launcher_variable_is_named)
{
    reel_ctx *ctx = NULL;
    cr_assert_eq(reel_ctx_create(reel_test_ctx_opts(REEL_BACKEND_HOST), &ctx), REEL_OK);
    reel_comm *c = NULL;
    unsetenv("WORLD_SIZE");
    cr_assert_eq(reel_comm_create_env(ctx, NULL, &c), REEL_E_INVALID_ARG);
    cr_assert(strstr(reel_ctx_last_error(ctx), "WORLD_SIZE is not set"), "%s", reel_ctx_last_error(ctx));
    setenv("WORLD_SIZE", "2", 1);
    setenv("RANK", "5", 1);
    cr_assert_eq(reel_comm_create_env(ctx, NULL, &c), REEL_E_INVALID_ARG);
    cr_assert(strstr(reel_ctx_last_error(ctx), "RANK is '5'"), "%s", reel_ctx_last_error(ctx));
    setenv("RANK", "1", 1);
    unsetenv("MASTER_PORT");
    cr_assert_eq(reel_comm_create_env(ctx, NULL, &c), REEL_E_INVALID_ARG);
    cr_assert(strstr(reel_ctx_last_error(ctx), "MASTER_PORT"), "%s", reel_ctx_last_error(ctx));
    cr_assert_null(c);
    /* one rank needs no rendezvous */
    setenv("WORLD_SIZE", "1", 1);
    setenv("RANK", "0", 1);
    reel_comm_opts o = proc_opts(1000);
    cr_assert_eq(reel_comm_create_env(ctx, &o, &c), REEL_OK, "%s", reel_ctx_last_error(ctx));
    cr_assert_eq(reel_comm_size(c), 1);
    cr_assert_eq(reel_comm_destroy(c), REEL_OK);
    reel_ctx_destroy(ctx);
}

/* A world of 4 processes split into PP-style groups: color r % 2 (rank 3:
 * none), key -r, so group 0 is parent ranks 2 then 0; an all_gather of each
 * rank's parent rank shows the order. */
static int split_main(const reel_comm_id *id, int r, int n)
{
    reel_ctx *ctx = NULL;
    reel_ctx_create(reel_test_ctx_opts(REEL_BACKEND_HOST), &ctx);
    reel_comm_opts co = proc_opts(20000);
    reel_comm *world = NULL, *sub = NULL;
    if (reel_comm_create(ctx, id, r, n, &co, &world) != REEL_OK)
        FAILF("rank %d: comm create: %s", r, reel_ctx_last_error(ctx));
    int color = r == 3 ? REEL_COMM_SPLIT_NONE : r % 2;
    if (reel_comm_split(world, color, -r, NULL, &sub) != REEL_OK)
        FAILF("rank %d: split: %s", r, reel_ctx_last_error(ctx));
    if (r == 3) {
        if (sub)
            FAILF("rank 3: joined a group with color NONE");
    } else {
        int want_size = r % 2 == 0 ? 2 : 1, want_rank = r == 0 ? 1 : 0;
        if (reel_comm_size(sub) != want_size || reel_comm_rank(sub) != want_rank)
            FAILF("rank %d: sub rank %d of %d, want %d of %d", r, reel_comm_rank(sub), reel_comm_size(sub), want_rank,
                  want_size);
        reel_graph *g = NULL;
        reel_graph_create(ctx, &g);
        int64_t d[2] = {REEL_DIM_TOKENS, 1};
        reel_output(g, "y", reel_all_gather(g, reel_input(g, "x", REEL_F32, 2, d), 1, want_size));
        reel_compile_opts o = REEL_COMPILE_OPTS_INIT;
        o.comm = sub;
        reel_plan *p = NULL;
        if (reel_compile(g, &o, &p) != REEL_OK)
            FAILF("rank %d: compile on the split: %s", r, reel_ctx_last_error(ctx));
        reel_graph_destroy(g);
        float x = (float)r;
        reel_plan_set_input(p, "x", &x, 1);
        reel_step_info si = {REEL_STEP_INFO_HEAD, .num_tokens = 1};
        if (reel_step(p, &si) != REEL_OK)
            FAILF("rank %d: step on the split: %s", r, reel_ctx_last_error(ctx));
        const void *y;
        reel_plan_output(p, "y", &y, NULL);
        const float *f = y;
        if (want_size == 2 ? (f[0] != 2.0f || f[1] != 0.0f) : f[0] != 1.0f)
            FAILF("rank %d: the split's all_gather gave %g %g", r, f[0], want_size == 2 ? f[1] : 0.0f);
        reel_plan_destroy(p);
        reel_comm_destroy(sub);
    }
    reel_comm_destroy(world);
    reel_ctx_destroy(ctx);
    return 0;
}

Test(comm_procs, a_world_of_processes_splits_into_groups_by_color_and_key)
{
    cr_assert(run_ranks(4, split_main));
}

/* Rank 1 joins and exits; rank 0's compile (its exchange with rank 1)
 * fails at once, naming rank 1. */
static int leaver(const reel_comm_id *id, int r, int n)
{
    reel_ctx *ctx = NULL;
    reel_ctx_create(reel_test_ctx_opts(REEL_BACKEND_HOST), &ctx);
    reel_comm_opts co = proc_opts(30000);
    reel_comm *comm = NULL;
    if (reel_comm_create(ctx, id, r, n, &co, &comm) != REEL_OK)
        FAILF("rank %d: comm create: %s", r, reel_ctx_last_error(ctx));
    if (r == 1)
        _exit(0); /* gone without a word: its sockets close */
    reel_graph *g = NULL;
    reel_graph_create(ctx, &g);
    int64_t d[2] = {REEL_DIM_TOKENS, 4};
    reel_output(g, "y", reel_all_reduce(g, reel_input(g, "x", REEL_F32, 2, d)));
    reel_compile_opts o = REEL_COMPILE_OPTS_INIT;
    o.comm = comm;
    reel_plan *p = NULL;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    reel_status st = reel_compile(g, &o, &p);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    if (st == REEL_OK)
        FAILF("rank 0: compile passed without rank 1");
    if (!strstr(reel_ctx_last_error(ctx), "rank 1 left"))
        FAILF("rank 0: message '%s' does not name rank 1 leaving", reel_ctx_last_error(ctx));
    if (s > 10.0)
        FAILF("rank 0: took %.1f s to notice (timeout 30 s)", s);
    reel_graph_destroy(g);
    reel_comm_destroy(comm);
    reel_ctx_destroy(ctx);
    return 0;
}

Test(comm_procs, a_rank_that_exits_fails_the_others_at_once_with_its_rank_named)
{
    cr_assert(run_ranks(2, leaver));
}

static int disagree(const reel_comm_id *id, int r, int n)
{
    reel_ctx *ctx = NULL;
    reel_ctx_create(reel_test_ctx_opts(REEL_BACKEND_HOST), &ctx);
    reel_comm_opts co = proc_opts(3000);
    reel_comm *comm = NULL;
    reel_status st = reel_comm_create(ctx, id, r, r == 1 ? 3 : n, &co, &comm);
    if (r == 0 && st == REEL_OK)
        FAILF("rank 0: joined a group whose ranks disagree on its size");
    if (st != REEL_OK && !*reel_ctx_last_error(ctx))
        FAILF("rank %d: refused without a message", r);
    reel_comm_destroy(comm);
    reel_ctx_destroy(ctx);
    return 0;
}

Test(comm_procs, ranks_that_disagree_on_the_group_size_are_refused_with_a_message)
{
    cr_assert(run_ranks(2, disagree));
}
