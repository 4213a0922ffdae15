/* Host backend capture and replay: capture records instead of running,
 * fork/join rules, replay runs the recorded kernels in order and keeps the
 * recorded dependencies and the launch stream's order. */
#include <stdio.h>
#include <string.h>

#include "tests/backend/host_fixture.h"

Test(backend, capture_records_items_instead_of_running_them)
{
    reel_ctx *ctx = host_ctx();
    reel_stream *s = new_stream(ctx);
    int log[8];
    atomic_int len = 0;
    char buf[16];
    memset(buf, 'x', sizeof buf);
    OK(ctx, VT(ctx)->capture_begin(ctx->be, s));
    cr_assert(VT(ctx)->capturing(ctx->be, s));
    for (int i = 0; i < 4; i++)
        LAUNCH(ctx, s, k_log, (log_args){ log, &len, 10 + i });
    OK(ctx, VT(ctx)->fill(ctx->be, s, buf, 'y', sizeof buf));
    cr_assert_eq(VT(ctx)->stream_sync(ctx->be, s), REEL_E_INVALID_USAGE);
    sleep_ms(20);
    cr_assert_eq(reel_host_items_run(ctx->be), 0);
    cr_assert_eq(atomic_load(&len), 0);
    cr_assert_eq(buf[0], 'x');
    reel_exec_graph *g = NULL;
    OK(ctx, VT(ctx)->capture_end(ctx->be, s, &g));
    cr_assert_not_null(g);
    cr_assert(!VT(ctx)->capturing(ctx->be, s));
    sleep_ms(10);
    cr_assert_eq(atomic_load(&len), 0, "capture end ran the recorded items");
    OK(ctx, VT(ctx)->graph_launch(ctx->be, g, s));
    OK(ctx, VT(ctx)->stream_sync(ctx->be, s));
    cr_assert_eq(atomic_load(&len), 4);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(log[i], 10 + i);
    cr_assert_eq(buf[15], 'y');
    cr_assert_eq(reel_host_items_run(ctx->be), 5);
    VT(ctx)->graph_destroy(ctx->be, g);
    VT(ctx)->stream_destroy(ctx->be, s);
    reel_ctx_destroy(ctx);
}

Test(backend, replays_a_graph_1000_times)
{
    reel_ctx *ctx = host_ctx();
    reel_stream *s = new_stream(ctx);
    atomic_int n = 0;
    OK(ctx, VT(ctx)->capture_begin(ctx->be, s));
    for (int i = 0; i < 3; i++)
        LAUNCH(ctx, s, k_inc, (inc_args){ &n });
    reel_exec_graph *g = NULL;
    OK(ctx, VT(ctx)->capture_end(ctx->be, s, &g));
    for (int i = 0; i < 1000; i++)
        OK(ctx, VT(ctx)->graph_launch(ctx->be, g, s));
    OK(ctx, VT(ctx)->stream_sync(ctx->be, s));
    cr_assert_eq(atomic_load(&n), 3000);
    cr_assert_eq(reel_host_items_run(ctx->be), 3000);
    VT(ctx)->graph_destroy(ctx->be, g);
    VT(ctx)->stream_destroy(ctx->be, s);
    reel_ctx_destroy(ctx);
}

/* The fork/join graph of the next tests:
 *   origin: a = *in + 1; record fork  | side: wait fork; b = a * 2; record join
 *   origin: c = a + 100;  wait join;  out = b + c
 * Every stage reads what the one before it wrote, so a missing edge shows as
 * a wrong out under jitter. */
typedef struct cell { volatile long in, a, b, c, out; } cell;
typedef struct stage_args { cell *x; int which; } stage_args;
static void k_stage(const void *p)
{
    const stage_args *s = p;
    cell *x = s->x;
    switch (s->which) {
    case 0: x->a = x->in + 1; break;
    case 1: x->b = x->a * 2; break;
    case 2: x->c = x->a + 100; break;
    default: x->out = x->b + x->c; break;
    }
}
static long expect_out(long in) { return (in + 1) * 2 + (in + 1) + 100; }

static reel_exec_graph *capture_fork_join(reel_ctx *ctx, reel_stream *origin, reel_stream *side, cell *x)
{
    reel_event *fork = new_event(ctx), *join = new_event(ctx);
    OK(ctx, VT(ctx)->capture_begin(ctx->be, origin));
    LAUNCH(ctx, origin, k_stage, (stage_args){ x, 0 });
    OK(ctx, VT(ctx)->event_record(ctx->be, fork, origin));
    OK(ctx, VT(ctx)->stream_wait(ctx->be, side, fork));
    cr_assert(VT(ctx)->capturing(ctx->be, side), "waiting on a captured event must fork the stream into the capture");
    LAUNCH(ctx, side, k_stage, (stage_args){ x, 1 });
    OK(ctx, VT(ctx)->event_record(ctx->be, join, side));
    LAUNCH(ctx, origin, k_stage, (stage_args){ x, 2 });
    OK(ctx, VT(ctx)->stream_wait(ctx->be, origin, join));
    LAUNCH(ctx, origin, k_stage, (stage_args){ x, 3 });
    reel_exec_graph *g = NULL;
    OK(ctx, VT(ctx)->capture_end(ctx->be, origin, &g));
    cr_assert(!VT(ctx)->capturing(ctx->be, side));
    /* The graph owns its events: the caller's may go. */
    VT(ctx)->event_destroy(ctx->be, fork);
    VT(ctx)->event_destroy(ctx->be, join);
    return g;
}

Test(backend, replay_keeps_fork_join_dependencies_and_launch_stream_order_under_jitter)
{
    reel_ctx *ctx = host_ctx();
    reel_host_set_jitter(ctx->be, 200, 99);
    reel_stream *origin = new_stream(ctx), *side = new_stream(ctx), *run = new_stream(ctx);
    cell x = { 0 };
    reel_exec_graph *g = capture_fork_join(ctx, origin, side, &x);
    cr_assert_eq(reel_host_items_run(ctx->be), 0);
    enum { N = 300 };
    long ins[N], outs[N];
    for (int i = 0; i < N; i++)
        ins[i] = 1000 * i;
    /* No host sync between replays: the copies before and after each launch
     * are ordered only by the graph's start and end edges on `run`. */
    for (int i = 0; i < N; i++) {
        OK(ctx, VT(ctx)->copy(ctx->be, run, (void *)&x.in, &ins[i], sizeof(long), REEL_COPY_H2D));
        OK(ctx, VT(ctx)->graph_launch(ctx->be, g, run));
        OK(ctx, VT(ctx)->copy(ctx->be, run, &outs[i], (void *)&x.out, sizeof(long), REEL_COPY_D2H));
    }
    OK(ctx, VT(ctx)->stream_sync(ctx->be, run));
    for (int i = 0; i < N; i++)
        cr_assert_eq(outs[i], expect_out(ins[i]), "replay %d: out %ld, want %ld", i, outs[i], expect_out(ins[i]));
    VT(ctx)->graph_destroy(ctx->be, g);
    VT(ctx)->stream_destroy(ctx->be, origin);
    VT(ctx)->stream_destroy(ctx->be, side);
    VT(ctx)->stream_destroy(ctx->be, run);
    reel_ctx_destroy(ctx);
}

Test(backend, replay_uses_both_streams_concurrently)
{
    reel_ctx *ctx = host_ctx();
    reel_stream *origin = new_stream(ctx), *side = new_stream(ctx);
    reel_event *fork = new_event(ctx), *join = new_event(ctx);
    atomic_int f1 = 0, f2 = 0, met = 0;
    OK(ctx, VT(ctx)->capture_begin(ctx->be, origin));
    OK(ctx, VT(ctx)->event_record(ctx->be, fork, origin));
    OK(ctx, VT(ctx)->stream_wait(ctx->be, side, fork));
    /* Two kernels that each wait (bounded) until the other has started. */
    LAUNCH(ctx, origin, k_meet, (meet_args){ &f1, &f2, &met });
    LAUNCH(ctx, side, k_meet, (meet_args){ &f2, &f1, &met });
    OK(ctx, VT(ctx)->event_record(ctx->be, join, side));
    OK(ctx, VT(ctx)->stream_wait(ctx->be, origin, join));
    reel_exec_graph *g = NULL;
    OK(ctx, VT(ctx)->capture_end(ctx->be, origin, &g));
    OK(ctx, VT(ctx)->graph_launch(ctx->be, g, origin));
    OK(ctx, VT(ctx)->stream_sync(ctx->be, origin));
    cr_assert_eq(atomic_load(&met), 2, "the replayed streams did not overlap");
    VT(ctx)->graph_destroy(ctx->be, g);
    VT(ctx)->event_destroy(ctx->be, fork);
    VT(ctx)->event_destroy(ctx->be, join);
    VT(ctx)->stream_destroy(ctx->be, origin);
    VT(ctx)->stream_destroy(ctx->be, side);
    reel_ctx_destroy(ctx);
}

Test(backend, capture_end_without_join_fails_and_restores_the_streams)
{
    reel_ctx *ctx = host_ctx();
    reel_stream *origin = new_stream(ctx), *side = new_stream(ctx);
    reel_event *fork = new_event(ctx);
    atomic_int n = 0;
    OK(ctx, VT(ctx)->capture_begin(ctx->be, origin));
    LAUNCH(ctx, origin, k_inc, (inc_args){ &n });
    OK(ctx, VT(ctx)->event_record(ctx->be, fork, origin));
    OK(ctx, VT(ctx)->stream_wait(ctx->be, side, fork));
    LAUNCH(ctx, side, k_inc, (inc_args){ &n });
    LAUNCH(ctx, origin, k_inc, (inc_args){ &n });
    reel_exec_graph *g = (reel_exec_graph *)&n;
    cr_assert_eq(VT(ctx)->capture_end(ctx->be, origin, &g), REEL_E_INVALID_USAGE);
    cr_assert_null(g);
    char want[64];
    snprintf(want, sizeof want, "stream %u not joined before capture end", reel_host_stream_id(ctx->be, side));
    cr_assert(strstr(reel_ctx_last_error(ctx), want), "%s", reel_ctx_last_error(ctx));
    cr_assert(!VT(ctx)->capturing(ctx->be, origin));
    cr_assert(!VT(ctx)->capturing(ctx->be, side));
    /* The event is back to its state before the capture: never recorded. */
    bool done = false;
    OK(ctx, VT(ctx)->event_query(ctx->be, fork, &done));
    cr_assert(done);
    /* Nothing recorded ran; both streams work normally again. */
    LAUNCH(ctx, origin, k_inc, (inc_args){ &n });
    LAUNCH(ctx, side, k_inc, (inc_args){ &n });
    OK(ctx, VT(ctx)->stream_sync(ctx->be, origin));
    OK(ctx, VT(ctx)->stream_sync(ctx->be, side));
    cr_assert_eq(atomic_load(&n), 2);
    VT(ctx)->event_destroy(ctx->be, fork);
    VT(ctx)->stream_destroy(ctx->be, origin);
    VT(ctx)->stream_destroy(ctx->be, side);
    reel_ctx_destroy(ctx);
}

Test(backend, a_fork_that_only_waited_is_not_joined)
{
    reel_ctx *ctx = host_ctx();
    reel_stream *origin = new_stream(ctx), *side = new_stream(ctx);
    reel_event *fork = new_event(ctx);
    OK(ctx, VT(ctx)->capture_begin(ctx->be, origin));
    OK(ctx, VT(ctx)->event_record(ctx->be, fork, origin));
    OK(ctx, VT(ctx)->stream_wait(ctx->be, side, fork));
    reel_exec_graph *g = NULL;
    cr_assert_eq(VT(ctx)->capture_end(ctx->be, origin, &g), REEL_E_INVALID_USAGE);
    cr_assert_null(g);
    VT(ctx)->event_destroy(ctx->be, fork);
    VT(ctx)->stream_destroy(ctx->be, origin);
    VT(ctx)->stream_destroy(ctx->be, side);
    reel_ctx_destroy(ctx);
}

Test(backend, a_join_through_another_forked_stream_counts)
{
    reel_ctx *ctx = host_ctx();
    reel_stream *o = new_stream(ctx), *s1 = new_stream(ctx), *s2 = new_stream(ctx);
    reel_event *e0 = new_event(ctx), *e1 = new_event(ctx), *e2 = new_event(ctx), *e3 = new_event(ctx);
    int log[4];
    atomic_int len = 0;
    OK(ctx, VT(ctx)->capture_begin(ctx->be, o));
    OK(ctx, VT(ctx)->event_record(ctx->be, e0, o));
    OK(ctx, VT(ctx)->stream_wait(ctx->be, s1, e0));   /* o -> s1 */
    OK(ctx, VT(ctx)->event_record(ctx->be, e1, s1));
    OK(ctx, VT(ctx)->stream_wait(ctx->be, s2, e1));   /* s1 -> s2 */
    LAUNCH(ctx, s2, k_log, (log_args){ log, &len, 1 });
    OK(ctx, VT(ctx)->event_record(ctx->be, e2, s2));
    OK(ctx, VT(ctx)->stream_wait(ctx->be, s1, e2));   /* s2 -> s1 */
    LAUNCH(ctx, s1, k_log, (log_args){ log, &len, 2 });
    OK(ctx, VT(ctx)->event_record(ctx->be, e3, s1));
    OK(ctx, VT(ctx)->stream_wait(ctx->be, o, e3));    /* s1 -> o */
    LAUNCH(ctx, o, k_log, (log_args){ log, &len, 3 });
    reel_exec_graph *g = NULL;
    OK(ctx, VT(ctx)->capture_end(ctx->be, o, &g));
    reel_host_set_jitter(ctx->be, 100, 5);
    for (int i = 0; i < 50; i++) {
        atomic_store(&len, 0);
        OK(ctx, VT(ctx)->graph_launch(ctx->be, g, o));
        OK(ctx, VT(ctx)->stream_sync(ctx->be, o));
        cr_assert_eq(atomic_load(&len), 3);
        for (int j = 0; j < 3; j++)
            cr_assert_eq(log[j], j + 1);
    }
    VT(ctx)->graph_destroy(ctx->be, g);
    reel_event *ev[] = { e0, e1, e2, e3 };
    for (int i = 0; i < 4; i++)
        VT(ctx)->event_destroy(ctx->be, ev[i]);
    VT(ctx)->stream_destroy(ctx->be, o);
    VT(ctx)->stream_destroy(ctx->be, s1);
    VT(ctx)->stream_destroy(ctx->be, s2);
    reel_ctx_destroy(ctx);
}

Test(backend, capture_abort_discards_what_was_recorded)
{
    reel_ctx *ctx = host_ctx();
    reel_stream *origin = new_stream(ctx), *side = new_stream(ctx);
    reel_event *fork = new_event(ctx);
    atomic_int n = 0;
    OK(ctx, VT(ctx)->capture_begin(ctx->be, origin));
    LAUNCH(ctx, origin, k_inc, (inc_args){ &n });
    OK(ctx, VT(ctx)->event_record(ctx->be, fork, origin));
    OK(ctx, VT(ctx)->stream_wait(ctx->be, side, fork));
    LAUNCH(ctx, side, k_inc, (inc_args){ &n });
    VT(ctx)->capture_abort(ctx->be, origin);
    cr_assert(!VT(ctx)->capturing(ctx->be, origin));
    cr_assert(!VT(ctx)->capturing(ctx->be, side));
    reel_exec_graph *g = NULL;
    cr_assert_eq(VT(ctx)->capture_end(ctx->be, origin, &g), REEL_E_INVALID_USAGE);
    LAUNCH(ctx, origin, k_inc, (inc_args){ &n });
    OK(ctx, VT(ctx)->stream_sync(ctx->be, origin));
    cr_assert_eq(atomic_load(&n), 1);
    cr_assert_eq(reel_host_items_run(ctx->be), 1);
    /* A new capture on the same stream starts clean. */
    OK(ctx, VT(ctx)->capture_begin(ctx->be, origin));
    LAUNCH(ctx, origin, k_inc, (inc_args){ &n });
    OK(ctx, VT(ctx)->capture_end(ctx->be, origin, &g));
    OK(ctx, VT(ctx)->graph_launch(ctx->be, g, origin));
    OK(ctx, VT(ctx)->stream_sync(ctx->be, origin));
    cr_assert_eq(atomic_load(&n), 2);
    VT(ctx)->graph_destroy(ctx->be, g);
    VT(ctx)->event_destroy(ctx->be, fork);
    VT(ctx)->stream_destroy(ctx->be, origin);
    VT(ctx)->stream_destroy(ctx->be, side);
    reel_ctx_destroy(ctx);
}

Test(backend, refuses_capture_misuse_with_messages)
{
    reel_ctx *ctx = host_ctx();
    reel_stream *s = new_stream(ctx), *t = new_stream(ctx);
    reel_event *e = new_event(ctx), *outside = new_event(ctx);
    OK(ctx, VT(ctx)->event_record(ctx->be, outside, t));
    OK(ctx, VT(ctx)->capture_begin(ctx->be, s));
    cr_assert_eq(VT(ctx)->capture_begin(ctx->be, s), REEL_E_INVALID_USAGE);
    cr_assert(strstr(reel_ctx_last_error(ctx), "already capturing"), "%s", reel_ctx_last_error(ctx));
    /* Work outside the capture cannot become a node of it. */
    cr_assert_eq(VT(ctx)->stream_wait(ctx->be, s, outside), REEL_E_INVALID_USAGE);
    cr_assert(strstr(reel_ctx_last_error(ctx), "outside the capture"), "%s", reel_ctx_last_error(ctx));
    OK(ctx, VT(ctx)->event_record(ctx->be, e, s));
    bool done;
    cr_assert_eq(VT(ctx)->event_query(ctx->be, e, &done), REEL_E_INVALID_USAGE);
    cr_assert_eq(VT(ctx)->event_sync(ctx->be, e), REEL_E_INVALID_USAGE);
    reel_exec_graph *g = NULL;
    cr_assert_eq(VT(ctx)->capture_end(ctx->be, t, &g), REEL_E_INVALID_USAGE);
    cr_assert(strstr(reel_ctx_last_error(ctx), "not the origin"), "%s", reel_ctx_last_error(ctx));
    OK(ctx, VT(ctx)->capture_end(ctx->be, s, &g));
    /* A graph is not launched into a capture. */
    OK(ctx, VT(ctx)->capture_begin(ctx->be, t));
    cr_assert_eq(VT(ctx)->graph_launch(ctx->be, g, t), REEL_E_INVALID_USAGE);
    VT(ctx)->capture_abort(ctx->be, t);
    VT(ctx)->graph_destroy(ctx->be, g);
    VT(ctx)->event_destroy(ctx->be, e);
    VT(ctx)->event_destroy(ctx->be, outside);
    VT(ctx)->stream_destroy(ctx->be, s);
    VT(ctx)->stream_destroy(ctx->be, t);
    reel_ctx_destroy(ctx);
}

Test(backend, a_graph_outlives_the_destroyed_handle_of_its_forked_stream)
{
    reel_ctx *ctx = host_ctx();
    reel_stream *origin = new_stream(ctx), *side = new_stream(ctx);
    cell x = { 0 };
    reel_exec_graph *g = capture_fork_join(ctx, origin, side, &x);
    VT(ctx)->stream_destroy(ctx->be, side);
    for (int i = 0; i < 20; i++) {
        x.in = i;
        OK(ctx, VT(ctx)->graph_launch(ctx->be, g, origin));
        OK(ctx, VT(ctx)->stream_sync(ctx->be, origin));
        cr_assert_eq(x.out, expect_out(i));
    }
    VT(ctx)->graph_destroy(ctx->be, g);
    VT(ctx)->stream_destroy(ctx->be, origin);
    reel_ctx_destroy(ctx);
}

Test(backend, backend_destroy_finishes_pending_replays)
{
    reel_ctx *ctx = host_ctx();
    reel_stream *origin = new_stream(ctx), *side = new_stream(ctx);
    cell x = { 0 };
    reel_exec_graph *g = capture_fork_join(ctx, origin, side, &x);
    x.in = 41;
    for (int i = 0; i < 10; i++)
        OK(ctx, VT(ctx)->graph_launch(ctx->be, g, origin));
    VT(ctx)->graph_destroy(ctx->be, g);   /* replays already queued keep running */
    reel_ctx_destroy(ctx);
    cr_assert_eq(x.out, expect_out(41));
}

Test(backend, a_graph_launched_on_its_forked_stream_runs_in_that_one_fifo)
{
    reel_ctx *ctx = host_ctx();
    reel_host_set_jitter(ctx->be, 50, 3);
    reel_stream *origin = new_stream(ctx), *side = new_stream(ctx);
    cell x = { 0 };
    reel_exec_graph *g = capture_fork_join(ctx, origin, side, &x);
    for (int i = 0; i < 20; i++) {
        x.in = i;
        OK(ctx, VT(ctx)->graph_launch(ctx->be, g, side));
        OK(ctx, VT(ctx)->stream_sync(ctx->be, side));
        cr_assert_eq(x.out, expect_out(i));
    }
    VT(ctx)->graph_destroy(ctx->be, g);
    VT(ctx)->stream_destroy(ctx->be, origin);
    VT(ctx)->stream_destroy(ctx->be, side);
    reel_ctx_destroy(ctx);
}

Test(backend, two_captures_at_once_stay_apart)
{
    reel_ctx *ctx = host_ctx();
    reel_stream *a = new_stream(ctx), *b = new_stream(ctx);
    reel_event *ea = new_event(ctx);
    atomic_int n = 0;
    OK(ctx, VT(ctx)->capture_begin(ctx->be, a));
    OK(ctx, VT(ctx)->capture_begin(ctx->be, b));
    LAUNCH(ctx, a, k_inc, (inc_args){ &n });
    OK(ctx, VT(ctx)->event_record(ctx->be, ea, a));
    cr_assert_eq(VT(ctx)->stream_wait(ctx->be, b, ea), REEL_E_INVALID_USAGE);
    cr_assert(strstr(reel_ctx_last_error(ctx), "another stream's capture"), "%s", reel_ctx_last_error(ctx));
    LAUNCH(ctx, b, k_inc, (inc_args){ &n });
    LAUNCH(ctx, b, k_inc, (inc_args){ &n });
    reel_exec_graph *ga = NULL, *gb = NULL;
    OK(ctx, VT(ctx)->capture_end(ctx->be, a, &ga));
    OK(ctx, VT(ctx)->capture_end(ctx->be, b, &gb));
    cr_assert_eq(atomic_load(&n), 0);
    OK(ctx, VT(ctx)->graph_launch(ctx->be, gb, a));
    OK(ctx, VT(ctx)->stream_sync(ctx->be, a));
    cr_assert_eq(atomic_load(&n), 2);
    OK(ctx, VT(ctx)->graph_launch(ctx->be, ga, a));
    OK(ctx, VT(ctx)->stream_sync(ctx->be, a));
    cr_assert_eq(atomic_load(&n), 3);
    VT(ctx)->graph_destroy(ctx->be, ga);
    VT(ctx)->graph_destroy(ctx->be, gb);
    VT(ctx)->event_destroy(ctx->be, ea);
    VT(ctx)->stream_destroy(ctx->be, a);
    VT(ctx)->stream_destroy(ctx->be, b);
    reel_ctx_destroy(ctx);
}
