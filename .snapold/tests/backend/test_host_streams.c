/* Host backend streams: FIFO order, real concurrency, sync, destroy. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/backend/host_fixture.h"

Test(backend, runs_items_of_one_stream_in_fifo_order_even_with_jitter)
{
    reel_ctx *ctx = host_ctx();
    reel_host_set_jitter(ctx->be, 200, 42);
    reel_stream *s = new_stream(ctx);
    int log[200];
    atomic_int len = 0;
    for (int i = 0; i < 200; i++)
        LAUNCH(ctx, s, k_log, (log_args){ log, &len, i });
    OK(ctx, VT(ctx)->stream_sync(ctx->be, s));
    cr_assert_eq(atomic_load(&len), 200);
    for (int i = 0; i < 200; i++)
        cr_assert_eq(log[i], i, "item %d ran at position of %d", log[i], i);
    VT(ctx)->stream_destroy(ctx->be, s);
    reel_ctx_destroy(ctx);
}

Test(backend, orders_fills_copies_and_kernels_on_one_stream)
{
    reel_ctx *ctx = host_ctx();
    reel_host_set_jitter(ctx->be, 100, 7);
    reel_stream *s = new_stream(ctx);
    unsigned char *a, *b;
    OK(ctx, VT(ctx)->dev_alloc(ctx->be, 4096, (void **)&a));
    OK(ctx, VT(ctx)->pinned_alloc(ctx->be, 4096, (void **)&b));
    for (int round = 0; round < 50; round++) {
        OK(ctx, VT(ctx)->fill(ctx->be, s, a, round, 4096));
        OK(ctx, VT(ctx)->copy(ctx->be, s, b, a, 4096, REEL_COPY_D2H));
        OK(ctx, VT(ctx)->fill(ctx->be, s, a, 0xff, 4096));
    }
    OK(ctx, VT(ctx)->stream_sync(ctx->be, s));
    for (int i = 0; i < 4096; i++) {
        cr_assert_eq(b[i], 49);
        cr_assert_eq(a[i], 0xff);
    }
    VT(ctx)->dev_free(ctx->be, a);
    VT(ctx)->pinned_free(ctx->be, b);
    VT(ctx)->stream_destroy(ctx->be, s);
    reel_ctx_destroy(ctx);
}

Test(backend, runs_two_streams_concurrently)
{
    reel_ctx *ctx = host_ctx();
    reel_stream *s1 = new_stream(ctx), *s2 = new_stream(ctx);
    atomic_int f1 = 0, f2 = 0, met = 0;
    LAUNCH(ctx, s1, k_meet, (meet_args){ &f1, &f2, &met });
    LAUNCH(ctx, s2, k_meet, (meet_args){ &f2, &f1, &met });
    OK(ctx, VT(ctx)->stream_sync(ctx->be, s1));
    OK(ctx, VT(ctx)->stream_sync(ctx->be, s2));
    cr_assert_eq(atomic_load(&met), 2, "the two streams did not overlap");
    VT(ctx)->stream_destroy(ctx->be, s1);
    VT(ctx)->stream_destroy(ctx->be, s2);
    reel_ctx_destroy(ctx);
}

Test(backend, stream_sync_waits_for_every_item_enqueued_before_it)
{
    reel_ctx *ctx = host_ctx();
    reel_stream *s = new_stream(ctx);
    atomic_int done = 0;
    for (int i = 0; i < 20; i++)
        LAUNCH(ctx, s, k_slow, (slow_args){ &done, 2 });
    OK(ctx, VT(ctx)->stream_sync(ctx->be, s));
    cr_assert_eq(atomic_load(&done), 20);
    VT(ctx)->stream_destroy(ctx->be, s);
    reel_ctx_destroy(ctx);
}

Test(backend, copies_kernel_args_at_launch)
{
    reel_ctx *ctx = host_ctx();
    reel_stream *s = new_stream(ctx);
    atomic_int gate = 0, len = 0;
    int log[2];
    LAUNCH(ctx, s, k_gate, (gate_args){ &gate, NULL });
    log_args a = { log, &len, 1 };
    OK(ctx, reel_host_launch(ctx->be, s, k_log, &a, sizeof a));
    a.value = 2;   /* must not change the queued launch */
    OK(ctx, reel_host_launch(ctx->be, s, k_log, &a, sizeof a));
    atomic_store(&gate, 1);
    OK(ctx, VT(ctx)->stream_sync(ctx->be, s));
    cr_assert_eq(log[0], 1);
    cr_assert_eq(log[1], 2);
    VT(ctx)->stream_destroy(ctx->be, s);
    reel_ctx_destroy(ctx);
}

Test(backend, refuses_kernel_args_over_the_limit)
{
    reel_ctx *ctx = host_ctx();
    reel_stream *s = new_stream(ctx);
    static char big[REEL_HOST_ARGS_MAX + 1];
    cr_assert_eq(reel_host_launch(ctx->be, s, k_inc, big, sizeof big), REEL_E_INVALID_ARG);
    cr_assert(strstr(reel_ctx_last_error(ctx), "REEL_HOST_ARGS_MAX"), "%s", reel_ctx_last_error(ctx));
    cr_assert_eq(reel_host_launch(ctx->be, s, NULL, big, 4), REEL_E_INVALID_ARG);
    cr_assert_eq(reel_host_items_run(ctx->be), 0);
    VT(ctx)->stream_destroy(ctx->be, s);
    reel_ctx_destroy(ctx);
}

Test(backend, counts_every_item_run)
{
    reel_ctx *ctx = host_ctx();
    reel_stream *s = new_stream(ctx);
    reel_event *e = new_event(ctx);
    atomic_int n = 0;
    char buf[8];
    LAUNCH(ctx, s, k_inc, (inc_args){ &n });
    OK(ctx, VT(ctx)->fill(ctx->be, s, buf, 0, sizeof buf));
    OK(ctx, VT(ctx)->copy(ctx->be, s, buf, buf + 4, 4, REEL_COPY_D2D));
    OK(ctx, VT(ctx)->event_record(ctx->be, e, s));
    OK(ctx, VT(ctx)->stream_wait(ctx->be, s, e));
    OK(ctx, VT(ctx)->stream_sync(ctx->be, s));
    cr_assert_eq(reel_host_items_run(ctx->be), 5);
    VT(ctx)->event_destroy(ctx->be, e);
    VT(ctx)->stream_destroy(ctx->be, s);
    reel_ctx_destroy(ctx);
}

Test(backend, stream_destroy_drains_pending_work)
{
    reel_ctx *ctx = host_ctx();
    reel_stream *s = new_stream(ctx);
    atomic_int done = 0;
    for (int i = 0; i < 10; i++)
        LAUNCH(ctx, s, k_slow, (slow_args){ &done, 2 });
    VT(ctx)->stream_destroy(ctx->be, s);
    cr_assert_eq(atomic_load(&done), 10);
    reel_ctx_destroy(ctx);
}

Test(backend, backend_destroy_drains_and_joins_streams_with_pending_work)
{
    reel_ctx *ctx = host_ctx();
    reel_stream *s1 = new_stream(ctx), *s2 = new_stream(ctx);
    reel_event *e = new_event(ctx);
    atomic_int done = 0;
    for (int i = 0; i < 5; i++)
        LAUNCH(ctx, s1, k_slow, (slow_args){ &done, 2 });
    OK(ctx, VT(ctx)->event_record(ctx->be, e, s1));
    OK(ctx, VT(ctx)->stream_wait(ctx->be, s2, e));
    for (int i = 0; i < 5; i++)
        LAUNCH(ctx, s2, k_slow, (slow_args){ &done, 1 });
    VT(ctx)->event_destroy(ctx->be, e);
    reel_ctx_destroy(ctx);   /* streams not destroyed: the backend joins them */
    cr_assert_eq(atomic_load(&done), 10);
}

Test(backend, reports_host_capabilities)
{
    reel_ctx *ctx = host_ctx();
    const reel_device_caps *c = &ctx->be->caps;
    cr_assert_str_eq(c->name, "host");
    cr_assert(!c->is_gpu);
    cr_assert_eq(c->sm_count, (int)sysconf(_SC_NPROCESSORS_ONLN));
    cr_assert_eq(ctx->be->kind, REEL_BACKEND_HOST);
    cr_assert_null(ctx->be->vt->graph_update);
    reel_ctx_destroy(ctx);
}

Test(backend, allocates_device_memory_aligned_to_64_bytes)
{
    reel_ctx *ctx = host_ctx();
    void *p[8];
    for (int i = 0; i < 8; i++) {
        OK(ctx, VT(ctx)->dev_alloc(ctx->be, (size_t)(1 + 37 * i), &p[i]));
        cr_assert_eq((uintptr_t)p[i] % 64, 0);
        memset(p[i], i, (size_t)(1 + 37 * i));
    }
    for (int i = 0; i < 8; i++)
        VT(ctx)->dev_free(ctx->be, p[i]);
    cr_assert_eq(VT(ctx)->dev_alloc(ctx->be, 16, NULL), REEL_E_INVALID_ARG);
    reel_ctx_destroy(ctx);
}
