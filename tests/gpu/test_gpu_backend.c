/* The CUDA backend through its vt: capability probe, capture (and its
 * failure cleanup), graph update, cross-stream events, errors with the
 * library's message, matmuls inside a capture, and the device memory a
 * stream's matmuls take. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "tests/gpu/oprun.h"
#include "backend/ctx.h"
#include "backend/cuda/cuda_impl.h"
#include "tests/core/opts.h"

static reel_ctx *ctx;
static reel_backend *be;
static const reel_backend_vt *vt;

static void setup(void)
{
    cr_assert_eq(reel_ctx_create(reel_test_ctx_opts(REEL_BACKEND_CUDA), &ctx), REEL_OK);
    be = ctx->be;
    vt = be->vt;
}

static void teardown(void) { reel_ctx_destroy(ctx); }

static reel_stream *stream(void)
{
    reel_stream *s = NULL;
    cr_assert_eq(vt->stream_create(be, &s), REEL_OK, "%s", reel_ctx_last_error(ctx));
    return s;
}

static void *dev(size_t bytes)
{
    void *p = NULL;
    cr_assert_eq(vt->dev_alloc(be, bytes, &p), REEL_OK, "%s", reel_ctx_last_error(ctx));
    return p;
}

/* Every byte of the n-byte device buffer equals want (read on stream s). */
static void expect_bytes(reel_stream *s, const void *d, size_t n, unsigned char want)
{
    unsigned char *h = malloc(n);
    cr_assert_eq(vt->copy(be, s, h, d, n, REEL_COPY_D2H), REEL_OK, "%s", reel_ctx_last_error(ctx));
    cr_assert_eq(vt->stream_sync(be, s), REEL_OK, "%s", reel_ctx_last_error(ctx));
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(h[i], want, "byte %zu is %u, want %u", i, h[i], want);
    free(h);
}

Test(gpu_backend, capabilities_are_probed_from_the_device, .init = setup, .fini = teardown)
{
    const reel_device_caps *c = &be->caps;
    cr_assert(c->is_gpu);
    cr_assert_geq(c->cc_major, 5);
    cr_assert_gt(c->sm_count, 0);
    cr_assert_gt(c->total_mem, (size_t)1 << 30);
    cr_assert_neq(c->name[0], 0);
    cr_assert_eq(c->pdl, c->cc_major >= 9);
    if (c->cc_major >= 9)
        cr_assert_gt(c->max_active_clusters, 0, "cluster occupancy probe found no clusters on cc %d.%d",
                     c->cc_major, c->cc_minor);
}

Test(gpu_backend, a_forbidden_call_during_capture_is_cleaned_up_and_the_stream_stays_usable, .init = setup,
     .fini = teardown)
{
    reel_stream *s = stream();
    const size_t n = 4096;
    void *buf = dev(n);
    cr_assert_eq(vt->capture_begin(be, s), REEL_OK, "%s", reel_ctx_last_error(ctx));
    cr_assert(vt->capturing(be, s));
    cr_assert_eq(vt->fill(be, s, buf, 1, n), REEL_OK, "%s", reel_ctx_last_error(ctx));
    /* Synchronizing a capturing stream is illegal: it fails and invalidates the capture. */
    cr_assert_eq(vt->stream_sync(be, s), REEL_E_BACKEND);
    cr_assert(strstr(reel_ctx_last_error(ctx), "cudaStreamSynchronize") != NULL, "%s", reel_ctx_last_error(ctx));
    vt->capture_abort(be, s);
    cr_assert_not(vt->capturing(be, s));
    /* Eager work runs again, and so does a new capture. */
    cr_assert_eq(vt->fill(be, s, buf, 7, n), REEL_OK, "%s", reel_ctx_last_error(ctx));
    expect_bytes(s, buf, n, 7);
    reel_exec_graph *g = NULL;
    cr_assert_eq(vt->capture_begin(be, s), REEL_OK, "%s", reel_ctx_last_error(ctx));
    cr_assert_eq(vt->fill(be, s, buf, 9, n), REEL_OK);
    cr_assert_eq(vt->capture_end(be, s, &g), REEL_OK, "%s", reel_ctx_last_error(ctx));
    expect_bytes(s, buf, n, 7); /* captured, not run */
    cr_assert_eq(vt->graph_launch(be, g, s), REEL_OK, "%s", reel_ctx_last_error(ctx));
    expect_bytes(s, buf, n, 9);
    vt->graph_destroy(be, g);
    vt->dev_free(be, buf);
    vt->stream_destroy(be, s);
}

Test(gpu_backend, ending_an_invalidated_capture_reports_the_cuda_error_and_ends_it, .init = setup,
     .fini = teardown)
{
    reel_stream *s = stream();
    void *buf = dev(256);
    reel_exec_graph *g = (reel_exec_graph *)&g; /* must be reset to NULL */
    cr_assert_eq(vt->capture_begin(be, s), REEL_OK);
    cr_assert_eq(vt->fill(be, s, buf, 3, 256), REEL_OK);
    cr_assert_neq(vt->stream_sync(be, s), REEL_OK);
    cr_assert_eq(vt->capture_end(be, s, &g), REEL_E_BACKEND);
    cr_assert_null(g);
    cr_assert(strstr(reel_ctx_last_error(ctx), "cudaStreamEndCapture") != NULL, "%s", reel_ctx_last_error(ctx));
    cr_assert_not(vt->capturing(be, s));
    cr_assert_eq(vt->fill(be, s, buf, 4, 256), REEL_OK, "%s", reel_ctx_last_error(ctx));
    expect_bytes(s, buf, 256, 4);
    vt->dev_free(be, buf);
    vt->stream_destroy(be, s);
}

static reel_exec_graph *capture_fills(reel_stream *s, void *a, int va, void *b, int vb, size_t n)
{
    reel_exec_graph *g = NULL;
    cr_assert_eq(vt->capture_begin(be, s), REEL_OK);
    cr_assert_eq(vt->fill(be, s, a, va, n), REEL_OK);
    if (b)
        cr_assert_eq(vt->fill(be, s, b, vb, n), REEL_OK);
    cr_assert_eq(vt->capture_end(be, s, &g), REEL_OK, "%s", reel_ctx_last_error(ctx));
    return g;
}

Test(gpu_backend, graph_update_takes_new_parameters_and_refuses_a_new_topology, .init = setup, .fini = teardown)
{
    reel_stream *s = stream();
    const size_t n = 1024;
    void *a = dev(n), *b = dev(n);
    reel_exec_graph *g1 = capture_fills(s, a, 1, NULL, 0, n), *g2 = capture_fills(s, a, 2, NULL, 0, n);
    bool updated = false;
    cr_assert_eq(vt->graph_update(be, g1, g2, &updated), REEL_OK, "%s", reel_ctx_last_error(ctx));
    cr_assert(updated);
    cr_assert_eq(vt->graph_launch(be, g1, s), REEL_OK);
    expect_bytes(s, a, n, 2);
    reel_exec_graph *g3 = capture_fills(s, a, 3, b, 4, n); /* two nodes: another topology */
    cr_assert_eq(vt->graph_update(be, g1, g3, &updated), REEL_OK, "%s", reel_ctx_last_error(ctx));
    cr_assert_not(updated);
    cr_assert_eq(vt->graph_launch(be, g1, s), REEL_OK, "%s", reel_ctx_last_error(ctx));
    expect_bytes(s, a, n, 2);
    vt->graph_destroy(be, g1);
    vt->graph_destroy(be, g2);
    vt->graph_destroy(be, g3);
    vt->dev_free(be, a);
    vt->dev_free(be, b);
    vt->stream_destroy(be, s);
}

Test(gpu_backend, events_order_work_across_streams_and_come_back_from_the_pool, .init = setup, .fini = teardown)
{
    reel_stream *s1 = stream(), *s2 = stream();
    const size_t n = (size_t)64 << 20; /* long enough that an unordered read would see old bytes */
    void *buf = dev(n);
    reel_event *e = NULL, *e2 = NULL;
    cr_assert_eq(vt->event_create(be, &e), REEL_OK);
    cr_assert_eq(vt->fill(be, s1, buf, 0, n), REEL_OK);
    cr_assert_eq(vt->fill(be, s1, buf, 5, n), REEL_OK);
    cr_assert_eq(vt->event_record(be, e, s1), REEL_OK);
    cr_assert_eq(vt->stream_wait(be, s2, e), REEL_OK);
    expect_bytes(s2, buf, n, 5);
    bool done = false;
    cr_assert_eq(vt->event_sync(be, e), REEL_OK);
    cr_assert_eq(vt->event_query(be, e, &done), REEL_OK);
    cr_assert(done);
    vt->event_destroy(be, e);
    cr_assert_eq(vt->event_create(be, &e2), REEL_OK);
    cr_assert_eq(e2, e, "a destroyed event is handed out again");
    vt->event_destroy(be, e2);
    vt->dev_free(be, buf);
    vt->stream_destroy(be, s1);
    vt->stream_destroy(be, s2);
}

Test(gpu_backend, a_capture_forks_and_joins_another_stream_through_events, .init = setup, .fini = teardown)
{
    reel_stream *s1 = stream(), *s2 = stream();
    const size_t n = 4096;
    void *a = dev(n), *b = dev(n);
    reel_event *fork = NULL, *join = NULL;
    cr_assert_eq(vt->event_create(be, &fork), REEL_OK);
    cr_assert_eq(vt->event_create(be, &join), REEL_OK);
    reel_exec_graph *g = NULL;
    cr_assert_eq(vt->capture_begin(be, s1), REEL_OK);
    cr_assert_eq(vt->fill(be, s1, a, 1, n), REEL_OK);
    cr_assert_eq(vt->event_record(be, fork, s1), REEL_OK);
    cr_assert_eq(vt->stream_wait(be, s2, fork), REEL_OK);
    cr_assert(vt->capturing(be, s2), "the forked stream joins the capture");
    cr_assert_eq(vt->copy(be, s2, b, a, n, REEL_COPY_D2D), REEL_OK);
    cr_assert_eq(vt->event_record(be, join, s2), REEL_OK);
    cr_assert_eq(vt->stream_wait(be, s1, join), REEL_OK);
    cr_assert_eq(vt->capture_end(be, s1, &g), REEL_OK, "%s", reel_ctx_last_error(ctx));
    cr_assert_eq(vt->graph_launch(be, g, s1), REEL_OK);
    expect_bytes(s1, b, n, 1);
    vt->graph_destroy(be, g);
    vt->event_destroy(be, fork);
    vt->event_destroy(be, join);
    vt->dev_free(be, a);
    vt->dev_free(be, b);
    vt->stream_destroy(be, s1);
    vt->stream_destroy(be, s2);
}

Test(gpu_backend, a_failed_allocation_is_an_oom_status_with_the_cuda_message, .init = setup, .fini = teardown)
{
    void *p = NULL;
    cr_assert_eq(vt->dev_alloc(be, (size_t)1 << 60, &p), REEL_E_OOM);
    cr_assert_null(p);
    const char *msg = reel_ctx_last_error(ctx);
    cr_assert(strstr(msg, "cudaMalloc") && strstr(msg, "cudaErrorMemoryAllocation"), "%s", msg);
    reel_stream *s = stream(); /* not sticky: the device still works */
    void *buf = dev(64);
    cr_assert_eq(vt->fill(be, s, buf, 6, 64), REEL_OK, "%s", reel_ctx_last_error(ctx));
    expect_bytes(s, buf, 64, 6);
    vt->dev_free(be, buf);
    vt->stream_destroy(be, s);
}

/* A matmul captured after a warm-up launch replays to the same bits: the
 * cuBLAS(Lt) algorithm and workspace were fixed before the capture. */
enum { MM_T = 16, MM_K = 64, MM_N = 32 };

/* A [MM_T, MM_K] x [MM_K, MM_N] matmul of dtype dt: its shapes, plain
 * attributes and the CUDA impl the registry picks (F32: the classic cuBLAS
 * API; F16 and BF16: cuBLASLt). */
static const reel_op_impl *mm_node(reel_dtype dt, reel_shape in[2], reel_shape *out, reel_op_attrs *at)
{
    in[0] = gt_shape(dt, true, 2, (int64_t[]){MM_T, MM_K});
    in[1] = gt_shape(dt, false, 2, (int64_t[]){MM_K, MM_N});
    *out = gt_shape(dt, true, 2, (int64_t[]){MM_T, MM_N});
    memset(at, 0, sizeof *at);
    const reel_op_impl *impl = reel_registry_select(REEL_BACKEND_CUDA, REEL_OP_MATMUL, in, 2, out, at, &be->caps);
    cr_assert_not_null(impl);
    return impl;
}

static void matmul_capture(reel_dtype dt)
{
    const int64_t t = MM_T, k = MM_K, n = MM_N;
    gt_rng r = {gt_fresh_seed()};
    reel_shape in[2], out;
    reel_op_attrs at;
    const reel_op_impl *impl = mm_node(dt, in, &out, &at);
    reel_stream *s = stream();
    size_t xb = reel_shape_bytes(&in[0], t), wb = reel_shape_bytes(&in[1], t), ob = reel_shape_bytes(&out, t);
    void *x = gt_random(&r, dt, t * k, -1, 1), *w = gt_random(&r, dt, k * n, -1, 1);
    void *dx = dev(xb), *dw = dev(wb), *dout = dev(ob);
    void *eager = malloc(ob), *replay = malloc(ob);
    cr_assert_eq(vt->copy(be, s, dx, x, xb, REEL_COPY_H2D), REEL_OK);
    cr_assert_eq(vt->copy(be, s, dw, w, wb, REEL_COPY_H2D), REEL_OK);
    reel_launch l = {.op = REEL_OP_MATMUL, .attrs = &at, .in_shape = in, .out_shape = &out, .in = {dx, dw},
                     .out = {dout}, .rows = t, .stream = s};
    cr_assert_eq(impl->launch(be, &l), REEL_OK, "%s", reel_ctx_last_error(ctx));
    cr_assert_eq(vt->copy(be, s, eager, dout, ob, REEL_COPY_D2H), REEL_OK);
    cr_assert_eq(vt->fill(be, s, dout, GT_POISON, ob), REEL_OK);
    reel_exec_graph *g = NULL;
    cr_assert_eq(vt->capture_begin(be, s), REEL_OK);
    cr_assert_eq(impl->launch(be, &l), REEL_OK, "%s: %s", impl->name, reel_ctx_last_error(ctx));
    cr_assert_eq(vt->capture_end(be, s, &g), REEL_OK, "%s: %s", impl->name, reel_ctx_last_error(ctx));
    cr_assert_eq(vt->graph_launch(be, g, s), REEL_OK);
    cr_assert_eq(vt->copy(be, s, replay, dout, ob, REEL_COPY_D2H), REEL_OK);
    cr_assert_eq(vt->stream_sync(be, s), REEL_OK, "%s", reel_ctx_last_error(ctx));
    cr_assert(memcmp(eager, replay, ob) == 0, "%s %s: replay differs from eager", impl->name,
              reel_dtype_name(dt));
    vt->graph_destroy(be, g);
    free(x), free(w), free(eager), free(replay);
    vt->dev_free(be, dx), vt->dev_free(be, dw), vt->dev_free(be, dout);
    vt->stream_destroy(be, s);
}

Test(gpu_backend, a_captured_matmul_replays_to_the_eager_bits, .init = setup, .fini = teardown)
{
    matmul_capture(REEL_F32);
    matmul_capture(REEL_F16);
    matmul_capture(REEL_BF16);
}

/* Operands of matmul_on for any dtype (zeros), allocated and filled on s. */
static void mm_alloc(reel_stream *s, void *b[3])
{
    static const size_t bytes[3] = {MM_T * MM_K * 4, MM_K * MM_N * 4, MM_T * MM_N * 4};
    for (int i = 0; i < 3; i++) {
        b[i] = dev(bytes[i]);
        cr_assert_eq(vt->fill(be, s, b[i], 0, bytes[i]), REEL_OK);
    }
    cr_assert_eq(vt->stream_sync(be, s), REEL_OK);
}

/* mm_node's matmul launched on s over mm_alloc's operands. */
static reel_status matmul_on(reel_stream *s, reel_dtype dt, void *b[3])
{
    reel_shape in[2], out;
    reel_op_attrs at;
    const reel_op_impl *impl = mm_node(dt, in, &out, &at);
    reel_launch l = {.op = REEL_OP_MATMUL, .attrs = &at, .in_shape = in, .out_shape = &out, .in = {b[0], b[1]},
                     .out = {b[2]}, .rows = MM_T, .stream = s};
    return impl->launch(be, &l);
}

/* A stream holds no workspace until its first matmul; the classic cuBLAS
 * handle (64 MiB of device memory on an H200) is the context's, created
 * once, not once a stream. Read from the backend's own records: device
 * free memory moves with every other process on the GPU. */
Test(gpu_backend, a_stream_takes_its_workspace_at_its_first_matmul_and_shares_the_cublas_handle, .init = setup,
     .fini = teardown)
{
    reel_cuda *c = reel_cuda_of(be);
    void *b[3];
    reel_stream *s0 = stream(), *s1 = stream();
    cr_assert_null(s0->ws, "a stream took a workspace before any matmul");
    cr_assert_null(c->blas, "the cuBLAS handle before any classic call");
    mm_alloc(s0, b);
    cr_assert_eq(matmul_on(s0, REEL_F16, b), REEL_OK, "%s", reel_ctx_last_error(ctx)); /* cuBLASLt */
    cr_assert_not_null(s0->ws);
    cr_assert_eq(s0->ws_bytes, c->ws_bytes);
    cr_assert_eq(matmul_on(s0, REEL_F32, b), REEL_OK, "%s", reel_ctx_last_error(ctx)); /* classic */
    cublasHandle_t h = c->blas;
    cr_assert_not_null(h);
    cr_assert_null(s1->ws);
    cr_assert_eq(matmul_on(s1, REEL_F32, b), REEL_OK, "%s", reel_ctx_last_error(ctx));
    cr_assert_eq(vt->stream_sync(be, s1), REEL_OK);
    cr_assert_eq(c->blas, h, "a second handle");
    cr_assert_not_null(s1->ws);
    cr_assert_neq(s1->ws, s0->ws, "two streams share a workspace");
    for (int i = 0; i < 3; i++)
        vt->dev_free(be, b[i]);
    vt->stream_destroy(be, s1);
    vt->stream_destroy(be, s0);
}

/* The first matmul of a stream inside a capture would allocate there: it
 * is refused with a message, the capture aborts cleanly, and the same
 * matmul outside the capture then runs. */
Test(gpu_backend, a_streams_first_matmul_inside_a_capture_is_refused, .init = setup, .fini = teardown)
{
    static const reel_dtype dts[2] = {REEL_F16, REEL_F32};
    for (int d = 0; d < 2; d++) {
        void *b[3];
        reel_stream *s = stream();
        mm_alloc(s, b);
        cr_assert_eq(vt->capture_begin(be, s), REEL_OK);
        cr_assert_eq(matmul_on(s, dts[d], b), REEL_E_BACKEND, "%s", reel_dtype_name(dts[d]));
        cr_assert(strstr(reel_ctx_last_error(ctx), "inside a capture"), "%s", reel_ctx_last_error(ctx));
        vt->capture_abort(be, s);
        cr_assert_not(vt->capturing(be, s));
        cr_assert_eq(matmul_on(s, dts[d], b), REEL_OK, "%s", reel_ctx_last_error(ctx));
        cr_assert_eq(vt->stream_sync(be, s), REEL_OK, "%s", reel_ctx_last_error(ctx));
        for (int i = 0; i < 3; i++)
            vt->dev_free(be, b[i]);
        vt->stream_destroy(be, s);
    }
}
