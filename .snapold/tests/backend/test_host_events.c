/* Host backend events: record, wait across streams, query, sync, with
 * CUDA's "most recent record at the time of the call" semantics. */
#include <string.h>

#include "tests/backend/host_fixture.h"

/* Producer writes a value after a delay; consumer copies what it sees. */
typedef struct put_args { volatile int *slot; int value; } put_args;
static void k_put(const void *p)
{
    const put_args *a = p;
    *a->slot = a->value;
}
typedef struct get_args { volatile int *from; int *to; } get_args;
static void k_get(const void *p)
{
    const get_args *a = p;
    *a->to = *a->from;
}

Test(backend, event_wait_makes_the_consumer_see_the_producers_write)
{
    reel_ctx *ctx = host_ctx();
    reel_host_set_jitter(ctx->be, 300, 1234);
    reel_stream *prod = new_stream(ctx), *cons = new_stream(ctx);
    reel_event *e = new_event(ctx), *back = new_event(ctx);
    enum { N = 300 };
    volatile int slot = -1;
    int seen[N];
    for (int i = 0; i < N; i++) {
        /* The producer may overwrite the slot only after the consumer read it. */
        OK(ctx, VT(ctx)->stream_wait(ctx->be, prod, back));
        LAUNCH(ctx, prod, k_put, (put_args){ &slot, i });
        OK(ctx, VT(ctx)->event_record(ctx->be, e, prod));
        OK(ctx, VT(ctx)->stream_wait(ctx->be, cons, e));
        LAUNCH(ctx, cons, k_get, (get_args){ &slot, &seen[i] });
        OK(ctx, VT(ctx)->event_record(ctx->be, back, cons));
    }
    OK(ctx, VT(ctx)->stream_sync(ctx->be, cons));
    for (int i = 0; i < N; i++)
        cr_assert_eq(seen[i], i, "consumer %d saw %d", i, seen[i]);
    VT(ctx)->event_destroy(ctx->be, e);
    VT(ctx)->event_destroy(ctx->be, back);
    VT(ctx)->stream_destroy(ctx->be, prod);
    VT(ctx)->stream_destroy(ctx->be, cons);
    reel_ctx_destroy(ctx);
}

Test(backend, event_wait_blocks_the_waiting_stream_until_the_record_runs)
{
    reel_ctx *ctx = host_ctx();
    reel_stream *a = new_stream(ctx), *b = new_stream(ctx);
    reel_event *e = new_event(ctx);
    atomic_int gate = 0, after = 0;
    LAUNCH(ctx, a, k_gate, (gate_args){ &gate, NULL });
    OK(ctx, VT(ctx)->event_record(ctx->be, e, a));
    OK(ctx, VT(ctx)->stream_wait(ctx->be, b, e));
    LAUNCH(ctx, b, k_inc, (inc_args){ &after });
    sleep_ms(30);
    cr_assert_eq(atomic_load(&after), 0, "stream b ran past its wait before the record");
    bool done = true;
    OK(ctx, VT(ctx)->event_query(ctx->be, e, &done));
    cr_assert(!done);
    atomic_store(&gate, 1);
    OK(ctx, VT(ctx)->event_sync(ctx->be, e));
    OK(ctx, VT(ctx)->event_query(ctx->be, e, &done));
    cr_assert(done);
    OK(ctx, VT(ctx)->stream_sync(ctx->be, b));
    cr_assert_eq(atomic_load(&after), 1);
    VT(ctx)->event_destroy(ctx->be, e);
    VT(ctx)->stream_destroy(ctx->be, a);
    VT(ctx)->stream_destroy(ctx->be, b);
    reel_ctx_destroy(ctx);
}

Test(backend, a_wait_refers_to_the_record_current_at_the_time_of_the_call)
{
    reel_ctx *ctx = host_ctx();
    reel_stream *a = new_stream(ctx), *b = new_stream(ctx), *c = new_stream(ctx);
    reel_event *e = new_event(ctx);
    atomic_int g1 = 0, g2 = 0, passed = 0, open = 1;
    LAUNCH(ctx, a, k_gate, (gate_args){ &g1, NULL });
    OK(ctx, VT(ctx)->event_record(ctx->be, e, a));      /* record 1 */
    OK(ctx, VT(ctx)->stream_wait(ctx->be, b, e));       /* waits for record 1 only */
    LAUNCH(ctx, b, k_gate, (gate_args){ &open, &passed });
    LAUNCH(ctx, c, k_gate, (gate_args){ &g2, NULL });
    OK(ctx, VT(ctx)->event_record(ctx->be, e, c));      /* record 2, blocked */
    atomic_store(&g1, 1);
    cr_assert(wait_flag(&passed), "the wait followed a later record");
    bool done = true;
    OK(ctx, VT(ctx)->event_query(ctx->be, e, &done));
    cr_assert(!done, "query must report the most recent record (still blocked)");
    atomic_store(&g2, 1);
    OK(ctx, VT(ctx)->event_sync(ctx->be, e));
    OK(ctx, VT(ctx)->event_query(ctx->be, e, &done));
    cr_assert(done);
    VT(ctx)->event_destroy(ctx->be, e);
    VT(ctx)->stream_destroy(ctx->be, a);
    VT(ctx)->stream_destroy(ctx->be, b);
    VT(ctx)->stream_destroy(ctx->be, c);
    reel_ctx_destroy(ctx);
}

Test(backend, an_event_never_recorded_is_complete)
{
    reel_ctx *ctx = host_ctx();
    reel_stream *s = new_stream(ctx);
    reel_event *e = new_event(ctx);
    bool done = false;
    OK(ctx, VT(ctx)->event_query(ctx->be, e, &done));
    cr_assert(done);
    OK(ctx, VT(ctx)->event_sync(ctx->be, e));
    atomic_int n = 0;
    OK(ctx, VT(ctx)->stream_wait(ctx->be, s, e));
    LAUNCH(ctx, s, k_inc, (inc_args){ &n });
    OK(ctx, VT(ctx)->stream_sync(ctx->be, s));
    cr_assert_eq(atomic_load(&n), 1);
    VT(ctx)->event_destroy(ctx->be, e);
    VT(ctx)->stream_destroy(ctx->be, s);
    reel_ctx_destroy(ctx);
}

Test(backend, destroying_an_event_with_pending_record_and_wait_is_safe)
{
    reel_ctx *ctx = host_ctx();
    reel_stream *a = new_stream(ctx), *b = new_stream(ctx);
    reel_event *e = new_event(ctx);
    atomic_int gate = 0, n = 0;
    LAUNCH(ctx, a, k_gate, (gate_args){ &gate, NULL });
    OK(ctx, VT(ctx)->event_record(ctx->be, e, a));
    OK(ctx, VT(ctx)->stream_wait(ctx->be, b, e));
    LAUNCH(ctx, b, k_inc, (inc_args){ &n });
    VT(ctx)->event_destroy(ctx->be, e);
    sleep_ms(10);
    cr_assert_eq(atomic_load(&n), 0, "the wait no longer held after the event was destroyed");
    atomic_store(&gate, 1);
    OK(ctx, VT(ctx)->stream_sync(ctx->be, b));
    cr_assert_eq(atomic_load(&n), 1);
    VT(ctx)->stream_destroy(ctx->be, a);
    VT(ctx)->stream_destroy(ctx->be, b);
    reel_ctx_destroy(ctx);
}

Test(backend, refuses_null_handles_with_a_message)
{
    reel_ctx *ctx = host_ctx();
    reel_stream *s = new_stream(ctx);
    cr_assert_eq(VT(ctx)->event_record(ctx->be, NULL, s), REEL_E_INVALID_ARG);
    cr_assert(strstr(reel_ctx_last_error(ctx), "event"), "%s", reel_ctx_last_error(ctx));
    cr_assert_eq(VT(ctx)->stream_wait(ctx->be, NULL, NULL), REEL_E_INVALID_ARG);
    cr_assert_eq(VT(ctx)->stream_sync(ctx->be, NULL), REEL_E_INVALID_ARG);
    VT(ctx)->stream_destroy(ctx->be, s);
    reel_ctx_destroy(ctx);
}
