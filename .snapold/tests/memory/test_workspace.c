/* The stream-aware workspace allocator on the host backend: reuse, both
 * policies, capture, trim, stats, and what the checker sees through it. */
#include <criterion/criterion.h>
#include <string.h>

#include "memory/workspace.h"
#include "reel/memory.h"
#include "tests/backend/host_fixture.h"

static reel_ctx *ctx;
static reel_stream *A, *B;
static reel_ws *ws;
static reel_checker *chk;
static reel_backend_vt counting_vt;
static const reel_backend_vt *host_vt;
static int queries, waits_issued;
/* gates live past a test body: the stream threads read them until synced */
static atomic_int gate, ran;

static uint64_t key_of(void *user, const reel_stream *s)
{
    (void)user;
    return s == A ? 0 : s == B ? 1 : 99;
}

static reel_status count_query(reel_backend *be, reel_event *e, bool *done)
{
    queries++;
    return host_vt->event_query(be, e, done);
}

static reel_status count_wait(reel_backend *be, reel_stream *s, reel_event *e)
{
    waits_issued++;
    return host_vt->stream_wait(be, s, e);
}

static void setup(void)
{
    ctx = host_ctx();
    A = new_stream(ctx);
    B = new_stream(ctx);
    /* count event queries and waits the allocator issues */
    host_vt = ctx->be->vt;
    counting_vt = *host_vt;
    counting_vt.event_query = count_query;
    counting_vt.stream_wait = count_wait;
    ctx->be->vt = &counting_vt;
    queries = waits_issued = 0;
    ws = NULL;
    cr_assert_eq(reel_checker_create(ctx, &chk), REEL_OK);
}

static void teardown(void)
{
    VT(ctx)->stream_sync(ctx->be, A);
    VT(ctx)->stream_sync(ctx->be, B);
    reel_ws_destroy(ws);
    reel_checker_destroy(chk);
    VT(ctx)->stream_destroy(ctx->be, A);
    VT(ctx)->stream_destroy(ctx->be, B);
    ctx->be->vt = host_vt;
    reel_ctx_destroy(ctx);
}

static void make(reel_ws_policy policy, bool with_checker)
{
    reel_ws_opts o = { .policy = policy, .checker = with_checker ? chk : NULL, .stream_key = key_of };
    OK(ctx, reel_ws_create(ctx->be, &o, &ws));
}

static reel_ws_block *alloc(reel_stream *s, size_t n)
{
    reel_ws_block *b = NULL;
    OK(ctx, reel_ws_alloc(ws, s, n, &b));
    cr_assert_not_null(reel_ws_block_ptr(b));
    cr_assert_geq(reel_ws_block_size(b), n);
    return b;
}

/* Launches a host kernel (reel_host_launch knows the host vt, not ours). */
static void launch(reel_stream *s, reel_host_fn fn, const void *args, size_t size)
{
    ctx->be->vt = host_vt;
    reel_status st = reel_host_launch(ctx->be, s, fn, args, size);
    ctx->be->vt = &counting_vt;
    cr_assert_eq(st, REEL_OK, "%s", reel_ctx_last_error(ctx));
}

/* Closes a gate on stream s: s is busy until the gate opens. */
static void close_gate(reel_stream *s, atomic_int *g_, atomic_int *r_)
{
    atomic_store(g_, 0);
    gate_args g = { g_, r_ };
    launch(s, k_gate, &g, sizeof g);
}

TestSuite(workspace, .init = setup, .fini = teardown);

Test(workspace, reuses_a_block_on_its_own_stream_at_once)
{
    make(REEL_WS_DEFER_FREE, false);
    close_gate(A, &gate, &ran);     /* A is still busy: stream order suffices */
    reel_ws_block *b = alloc(A, 1000);
    void *p = reel_ws_block_ptr(b);
    OK(ctx, reel_ws_free(ws, b));
    b = alloc(A, 900);
    cr_assert_eq(reel_ws_block_ptr(b), p);
    reel_ws_stats st;
    reel_ws_get_stats(ws, &st);
    cr_assert_eq(st.reuses, 1);
    cr_assert_eq(st.device_allocs, 1);
    cr_assert_eq(queries + waits_issued, 0);
    atomic_store(&gate, 1);
    OK(ctx, reel_ws_free(ws, b));
}

Test(workspace, defers_a_free_used_on_another_stream_until_its_fence_completes)
{
    make(REEL_WS_DEFER_FREE, false);
    reel_ws_block *b = alloc(A, 4096);
    void *p = reel_ws_block_ptr(b);
    close_gate(B, &gate, &ran);     /* B still reads the block */
    OK(ctx, reel_ws_record_use(ws, b, B));
    OK(ctx, reel_ws_free(ws, b));
    reel_ws_stats st;
    reel_ws_get_stats(ws, &st);
    cr_assert_eq(st.deferred, 4096);
    cr_assert_eq(st.frees_deferred, 1);
    reel_ws_block *c = alloc(A, 4096);
    cr_assert_neq(reel_ws_block_ptr(c), p, "the deferred block went out while B used it");
    atomic_store(&gate, 1);
    OK(ctx, VT(ctx)->stream_sync(ctx->be, B));
    OK(ctx, reel_ws_poll(ws));
    reel_ws_get_stats(ws, &st);
    cr_assert_eq(st.deferred, 0);
    reel_ws_block *d = alloc(A, 4096);
    cr_assert_eq(reel_ws_block_ptr(d), p);
    OK(ctx, reel_ws_free(ws, c));
    OK(ctx, reel_ws_free(ws, d));
}

Test(workspace, moves_a_block_to_another_stream_only_after_its_owner_fence_completes)
{
    make(REEL_WS_DEFER_FREE, false);
    close_gate(A, &gate, &ran);
    reel_ws_block *b = alloc(A, 4096);
    void *p = reel_ws_block_ptr(b);
    OK(ctx, reel_ws_free(ws, b));
    reel_ws_block *c = alloc(B, 4096);
    cr_assert_neq(reel_ws_block_ptr(c), p);
    cr_assert_gt(queries, 0);
    atomic_store(&gate, 1);
    OK(ctx, VT(ctx)->stream_sync(ctx->be, A));
    reel_ws_block *d = alloc(B, 4096);
    cr_assert_eq(reel_ws_block_ptr(d), p);
    OK(ctx, reel_ws_free(ws, c));
    OK(ctx, reel_ws_free(ws, d));
}

Test(workspace, makes_the_next_user_wait_under_the_wait_policy)
{
    make(REEL_WS_WAIT_ON_REUSE, false);
    static atomic_int after;
    atomic_store(&after, 0);
    close_gate(A, &gate, &ran);
    reel_ws_block *b = alloc(A, 4096);
    void *p = reel_ws_block_ptr(b);
    OK(ctx, reel_ws_free(ws, b));
    reel_ws_block *c = alloc(B, 4096);
    cr_assert_eq(reel_ws_block_ptr(c), p, "reused at once");
    cr_assert_eq(waits_issued, 1);
    inc_args inc = { &after };
    launch(B, k_inc, &inc, sizeof inc);
    sleep_ms(20);
    cr_assert_eq(atomic_load(&after), 0, "B ran before A's last use of the block finished");
    atomic_store(&gate, 1);
    OK(ctx, VT(ctx)->stream_sync(ctx->be, B));
    cr_assert_eq(atomic_load(&after), 1);
    cr_assert_eq(queries, 0);
    OK(ctx, reel_ws_free(ws, c));
}

Test(workspace, keeps_size_classes_apart)
{
    make(REEL_WS_DEFER_FREE, false);
    reel_ws_block *b = alloc(A, 600);
    cr_assert_eq(reel_ws_block_size(b), 1024);
    OK(ctx, reel_ws_free(ws, b));
    reel_ws_block *c = alloc(A, 5000);
    cr_assert_eq(reel_ws_block_size(c), 8192);
    reel_ws_stats st;
    reel_ws_get_stats(ws, &st);
    cr_assert_eq(st.cached, 1024);
    cr_assert_eq(st.in_use, 8192);
    cr_assert_eq(st.device, 1024 + 8192);
    OK(ctx, reel_ws_free(ws, c));
}

Test(workspace, trims_cached_blocks_back_to_the_device)
{
    make(REEL_WS_DEFER_FREE, false);
    reel_ws_block *b = alloc(A, 4096), *c = alloc(B, 65536), *d = alloc(A, 512);
    OK(ctx, reel_ws_record_use(ws, c, A));
    OK(ctx, reel_ws_free(ws, b));
    OK(ctx, reel_ws_free(ws, c));
    reel_ws_stats st;
    reel_ws_get_stats(ws, &st);
    cr_assert_eq(st.peak, 4096 + 65536 + 512);
    OK(ctx, reel_ws_trim(ws));
    reel_ws_get_stats(ws, &st);
    cr_assert_eq(st.cached, 0);
    cr_assert_eq(st.deferred, 0);
    cr_assert_eq(st.device, 512);
    cr_assert_eq(st.in_use, 512);
    OK(ctx, reel_ws_free(ws, d));
}

Test(workspace, refuses_a_double_free)
{
    make(REEL_WS_DEFER_FREE, false);
    reel_ws_block *b = alloc(A, 100);
    OK(ctx, reel_ws_free(ws, b));
    cr_assert_eq(reel_ws_free(ws, b), REEL_E_INVALID_USAGE);
    cr_assert(strstr(reel_ctx_last_error(ctx), "double free"));
}

Test(workspace, queries_no_event_during_capture_and_keeps_captured_blocks_for_the_graph)
{
    make(REEL_WS_DEFER_FREE, false);
    /* a deferred free from before the capture */
    reel_ws_block *old = alloc(A, 4096);
    close_gate(B, &gate, &ran);
    OK(ctx, reel_ws_record_use(ws, old, B));
    OK(ctx, reel_ws_free(ws, old));
    atomic_store(&gate, 1);
    OK(ctx, VT(ctx)->stream_sync(ctx->be, B));

    OK(ctx, VT(ctx)->capture_begin(ctx->be, A));
    int q0 = queries;
    reel_ws_block *b = alloc(A, 4096);
    OK(ctx, reel_ws_free(ws, b));
    reel_ws_block *c = alloc(A, 4096);      /* same stream, same capture: reused */
    cr_assert_eq(reel_ws_block_ptr(c), reel_ws_block_ptr(b));
    OK(ctx, reel_ws_free(ws, c));
    cr_assert_eq(queries, q0, "an event was queried during the capture");
    reel_ws_stats st;
    reel_ws_get_stats(ws, &st);
    cr_assert_eq(st.deferred, 4096, "the old deferred free waits for the capture to end");
    reel_exec_graph *eg = NULL;
    OK(ctx, VT(ctx)->capture_end(ctx->be, A, &eg));
    reel_ws_graph *g = NULL;
    OK(ctx, reel_ws_capture_end(ws, &g));
    cr_assert_not_null(g);
    reel_ws_get_stats(ws, &st);
    cr_assert_eq(st.deferred, 0, "released when the capture ended");
    cr_assert_eq(st.held, 4096);

    /* eager work after the capture must not get the graph's block */
    reel_ws_block *e1 = alloc(A, 4096), *e2 = alloc(A, 4096);
    cr_assert_neq(reel_ws_block_ptr(e1), reel_ws_block_ptr(c));
    cr_assert_neq(reel_ws_block_ptr(e2), reel_ws_block_ptr(c));
    OK(ctx, reel_ws_free(ws, e1));
    OK(ctx, reel_ws_free(ws, e2));
    OK(ctx, VT(ctx)->graph_launch(ctx->be, eg, A));
    OK(ctx, reel_ws_graph_release(ws, g, A));
    reel_ws_get_stats(ws, &st);
    cr_assert_eq(st.held, 0);
    VT(ctx)->graph_destroy(ctx->be, eg);
}

Test(workspace, settles_fences_before_a_capture_so_it_can_reuse_blocks)
{
    make(REEL_WS_WAIT_ON_REUSE, false);
    reel_ws_block *b = alloc(B, 4096);
    OK(ctx, reel_ws_free(ws, b));
    OK(ctx, reel_ws_capture_begin(ws));
    OK(ctx, VT(ctx)->capture_begin(ctx->be, A));
    int w0 = waits_issued;
    reel_ws_block *c = alloc(A, 4096);
    cr_assert_eq(reel_ws_block_ptr(c), reel_ws_block_ptr(b));
    cr_assert_eq(waits_issued, w0, "no wait on an event recorded outside the capture");
    OK(ctx, reel_ws_free(ws, c));
    reel_exec_graph *eg = NULL;
    OK(ctx, VT(ctx)->capture_end(ctx->be, A, &eg));
    reel_ws_graph *g = NULL;
    OK(ctx, reel_ws_capture_end(ws, &g));
    OK(ctx, reel_ws_graph_release(ws, g, NULL));
    VT(ctx)->graph_destroy(ctx->be, eg);
}

Test(workspace, tells_the_checker_of_unsafe_reuse_across_streams)
{
    make(REEL_WS_UNSAFE_EAGER, true);
    close_gate(A, &gate, &ran);
    reel_ws_block *b = alloc(A, 4096);
    OK(ctx, reel_checker_use(chk, 0, "attn scratch write", reel_ws_block_check_id(b), 0, 4096, true));
    OK(ctx, reel_ws_free(ws, b));
    reel_ws_block *c = alloc(B, 4096);
    cr_assert_eq(reel_ws_block_ptr(c), reel_ws_block_ptr(b), "the unsafe pool reuses at once");
    OK(ctx, reel_checker_use(chk, 1, "mlp scratch write", reel_ws_block_check_id(c), 0, 4096, true));
    size_t n;
    const reel_hazard *h = reel_checker_hazards(chk, &n);
    cr_assert_eq(n, 1);
    cr_assert_eq(h->kind, REEL_HAZARD_WAW);
    cr_assert_str_eq(h->first.op, "attn scratch write");
    cr_assert_str_eq(h->second.op, "mlp scratch write");
    cr_assert(strstr(h->first.alloc, "workspace block #1"), "%s", h->first.alloc);
    cr_assert(strstr(h->second.alloc, "workspace block #2") && strstr(h->second.alloc, "reusing #1"), "%s",
              h->second.alloc);
    atomic_store(&gate, 1);
    OK(ctx, reel_ws_free(ws, c));
}

Test(workspace, gives_the_checker_nothing_to_report_under_either_safe_policy)
{
    reel_event *ev = new_event(ctx);
    for (int pol = 0; pol < 2; pol++) {
        make(pol ? REEL_WS_WAIT_ON_REUSE : REEL_WS_DEFER_FREE, true);
        for (int i = 0; i < 50; i++) {
            reel_stream *s = i % 2 ? A : B, *o = i % 2 ? B : A;
            reel_ws_block *b = alloc(s, 4096);
            uint64_t id = reel_ws_block_check_id(b);
            OK(ctx, reel_checker_use(chk, key_of(NULL, s), "write", id, 0, 4096, true));
            if (i % 3 == 0) {       /* the other stream reads it too, after an event */
                OK(ctx, VT(ctx)->event_record(ctx->be, ev, s));
                OK(ctx, VT(ctx)->stream_wait(ctx->be, o, ev));
                OK(ctx, reel_checker_event_record(chk, 1000, key_of(NULL, s)));
                OK(ctx, reel_checker_event_wait(chk, key_of(NULL, o), 1000));
                OK(ctx, reel_ws_record_use(ws, b, o));
                OK(ctx, reel_checker_use(chk, key_of(NULL, o), "read", id, 0, 4096, false));
            }
            OK(ctx, reel_ws_free(ws, b));
        }
        reel_ws_stats st;
        reel_ws_get_stats(ws, &st);
        cr_assert_gt(st.reuses, 0, "policy %d never reused a block", pol);
        size_t nh;
        const reel_hazard *h = reel_checker_hazards(chk, &nh);
        char line[512];
        cr_assert_eq(reel_checker_count(chk), 0, "policy %d: %s", pol, reel_hazard_format(h, line, sizeof line));
        reel_ws_destroy(ws);
        ws = NULL;
    }
    VT(ctx)->event_destroy(ctx->be, ev);
}

static reel_status fail_record(reel_backend *be, reel_event *e, reel_stream *s)
{
    (void)e;
    (void)s;
    return reel_seterr(be->err, REEL_E_BACKEND, "event_record: refused by the test");
}

/* A fence that cannot be recorded must not leave the block in the cache
 * unfenced while another stream still uses it (found by the fault walk,
 * tests/fault): the free waits for the block's streams instead. Before the
 * fix the free returned the record's error at once, B still running, and
 * the block went to the cache with no fence for B. */
Test(workspace, a_free_whose_fence_cannot_be_recorded_waits_for_the_blocks_streams)
{
    make(REEL_WS_DEFER_FREE, false);
    reel_ws_block *b = alloc(A, 4096);
    void *p = reel_ws_block_ptr(b);
    atomic_store(&ran, 0);
    slow_args sa = {&ran, 50};
    launch(B, k_slow, &sa, sizeof sa);      /* B still uses the block for 50 ms */
    OK(ctx, reel_ws_record_use(ws, b, B));
    counting_vt.event_record = fail_record;
    reel_status st = reel_ws_free(ws, b);
    counting_vt.event_record = host_vt->event_record;
    cr_assert_eq(st, REEL_OK, "%s: %s", reel_status_str(st), reel_ctx_last_error(ctx));
    cr_assert_eq(atomic_load(&ran), 1, "the free returned while B still used the block");
    reel_ws_stats ws_st;
    reel_ws_get_stats(ws, &ws_st);
    cr_assert_eq(ws_st.deferred, 0, "waited for, the block needs no deferral");
    reel_ws_block *c = alloc(B, 4096);      /* idle now: any stream may take it */
    cr_assert_eq(reel_ws_block_ptr(c), p);
    OK(ctx, reel_ws_free(ws, c));
}
