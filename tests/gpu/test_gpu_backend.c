/* The CUDA backend through its vt: capability probe, capture (and its
 * failure cleanup), graph update, cross-stream events, errors with the
 * library's message, matmuls inside a capture, and the device memory a
 * stream's matmuls take (the workspace a plan reserves from its rows). */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "tests/gpu/oprun.h"
#include "backend/ctx.h"
#include "backend/cuda/cuda_impl.h"
#include "core/dtype.h"
#include "runtime/plan.h"
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

/* A reservation sizes the workspace the stream's first matmul allocates
 * (never less than REEL_CUDA_WS_MIN: classic cuBLAS always gets one); once
 * allocated, only the same size is accepted (the algorithms chosen depend
 * on it), and no stream is refused. */
Test(gpu_backend, a_reserved_workspace_is_what_the_first_matmul_allocates, .init = setup, .fini = teardown)
{
    void *b[3];
    reel_stream *s = stream(), *z = stream();
    cr_assert_eq(vt->stream_reserve_ws(be, NULL, 1 << 20), REEL_E_INVALID_ARG);
    cr_assert_eq(vt->stream_reserve_ws(be, z, 0), REEL_OK, "%s", reel_ctx_last_error(ctx));
    cr_assert_eq(vt->stream_reserve_ws(be, s, (size_t)6 << 20), REEL_OK, "%s", reel_ctx_last_error(ctx));
    cr_assert_null(s->ws, "a reservation allocated");
    mm_alloc(s, b);
    cr_assert_eq(matmul_on(s, REEL_F16, b), REEL_OK, "%s", reel_ctx_last_error(ctx));
    cr_assert_not_null(s->ws);
    cr_assert_eq(s->ws_bytes, (size_t)6 << 20);
    cr_assert_eq(vt->stream_reserve_ws(be, s, (size_t)4 << 20), REEL_E_INVALID_USAGE);
    cr_assert(strstr(reel_ctx_last_error(ctx), "allocated"), "%s", reel_ctx_last_error(ctx));
    cr_assert_eq(vt->stream_reserve_ws(be, s, (size_t)6 << 20), REEL_OK, "%s", reel_ctx_last_error(ctx));
    cr_assert_eq(matmul_on(s, REEL_F32, b), REEL_OK, "%s", reel_ctx_last_error(ctx));
    cr_assert_eq(vt->stream_sync(be, s), REEL_OK, "%s", reel_ctx_last_error(ctx));
    cr_assert_eq(s->ws_bytes, (size_t)6 << 20);
    cr_assert_eq(matmul_on(z, REEL_F32, b), REEL_OK, "%s", reel_ctx_last_error(ctx));
    cr_assert_eq(vt->stream_sync(be, z), REEL_OK, "%s", reel_ctx_last_error(ctx));
    cr_assert_not_null(z->ws);
    cr_assert_eq(z->ws_bytes, REEL_CUDA_WS_MIN);
    for (int i = 0; i < 3; i++)
        vt->dev_free(be, b[i]);
    vt->stream_destroy(be, z);
    vt->stream_destroy(be, s);
}

enum { WS_K = 2048, WS_N = 512, WS_T = 100 };

/* x [T, WS_K] @ w [WS_K, WS_N] in bf16 (cuBLASLt) and, with f32, in f32
 * too (the classic cuBLAS impl), compiled with the given buckets. Every
 * value is a multiple of 1/4 in [-1/2, 1/2], so every partial sum is exact
 * in float32 whatever the algorithm's order or split: outputs are exact
 * (f32) or the exact sum rounded once (bf16). */
static float ws_val(uint64_t i) { return (float)((int)(((i * 2654435761u) >> 7) % 5) - 2) * 0.25f; }

static reel_plan *ws_plan(int nb, const int32_t *buckets, bool f32)
{
    static float w32[WS_K * WS_N];
    static uint16_t w16[WS_K * WS_N];
    for (uint64_t i = 0; i < (uint64_t)WS_K * WS_N; i++) {
        w32[i] = ws_val(i + 7);
        w16[i] = reel_f32_to_bf16(w32[i]);
    }
    reel_graph *g;
    cr_assert_eq(reel_graph_create(ctx, &g), REEL_OK);
    int64_t d[2] = {REEL_DIM_TOKENS, WS_K}, wd[2] = {WS_K, WS_N};
    if (f32) {
        reel_tensor x32 = reel_input(g, "x32", REEL_F32, 2, d);
        reel_tensor p32 = reel_param(g, "w32", REEL_F32, 2, wd);
        cr_assert_eq(reel_param_bind(g, p32, w32), REEL_OK);
        cr_assert_eq(reel_output(g, "y32", reel_matmul(g, x32, p32, false)), REEL_OK, "%s",
                     reel_ctx_last_error(ctx));
    }
    reel_tensor x16 = reel_input(g, "x16", REEL_BF16, 2, d);
    reel_tensor p16 = reel_param(g, "w16", REEL_BF16, 2, wd);
    cr_assert_eq(reel_param_bind(g, p16, w16), REEL_OK);
    cr_assert_eq(reel_output(g, "y16", reel_matmul(g, x16, p16, false)), REEL_OK, "%s", reel_ctx_last_error(ctx));
    reel_compile_opts o = REEL_COMPILE_OPTS_INIT;
    o.num_buckets = nb;
    memcpy(o.buckets, buckets, (size_t)nb * sizeof *buckets);
    reel_plan *p = NULL;
    cr_assert_eq(reel_compile(g, &o, &p), REEL_OK, "%s", reel_ctx_last_error(ctx));
    reel_graph_destroy(g);
    return p;
}

/* One step of n tokens; each output checked against the exact product. */
static void ws_step_exact(reel_plan *p, int n, reel_fallback want, bool f32)
{
    float *x32 = malloc((size_t)n * WS_K * sizeof *x32), *ref = calloc((size_t)n * WS_N, sizeof *ref);
    uint16_t *x16 = malloc((size_t)n * WS_K * sizeof *x16);
    cr_assert(x32 && x16 && ref);
    for (int64_t i = 0; i < (int64_t)n * WS_K; i++) {
        x32[i] = ws_val((uint64_t)i * 3 + 1);
        x16[i] = reel_f32_to_bf16(x32[i]);
    }
    for (int t = 0; t < n; t++)
        for (int k = 0; k < WS_K; k++) {
            float xv = x32[(size_t)t * WS_K + k];
            for (int j = 0; j < WS_N; j++)
                ref[(size_t)t * WS_N + j] += xv * ws_val((uint64_t)k * WS_N + j + 7);
        }
    if (f32)
        cr_assert_eq(reel_plan_set_input(p, "x32", x32, n), REEL_OK, "%s", reel_ctx_last_error(ctx));
    cr_assert_eq(reel_plan_set_input(p, "x16", x16, n), REEL_OK, "%s", reel_ctx_last_error(ctx));
    reel_step_info s = { REEL_STEP_INFO_HEAD, .num_tokens = n};
    cr_assert_eq(reel_step(p, &s), REEL_OK, "%s", reel_ctx_last_error(ctx));
    cr_assert_eq(reel_plan_last_fallback(p), want, "step of %d tokens: %s", n,
                 reel_fallback_str(reel_plan_last_fallback(p)));
    const void *y32 = NULL, *y16;
    int64_t rows;
    if (f32)
        cr_assert_eq(reel_plan_output(p, "y32", &y32, &rows), REEL_OK);
    cr_assert_eq(reel_plan_output(p, "y16", &y16, &rows), REEL_OK);
    for (size_t i = 0; i < (size_t)n * WS_N; i++) {
        if (f32)
            cr_assert_eq(((const float *)y32)[i], ref[i], "f32 element %zu: %g, want %g", i,
                         (double)((const float *)y32)[i], (double)ref[i]);
        cr_assert_eq(((const uint16_t *)y16)[i], reel_f32_to_bf16(ref[i]), "bf16 element %zu", i);
    }
    free(x32);
    free(x16);
    free(ref);
}

/* What the plan's bf16 matmul node takes at n rows, by its impl's own
 * account (reel_op_impl.stream_ws). */
static size_t ws_node_bytes(reel_plan *p, int64_t n)
{
    for (int i = 0; i < p->nnodes; i++) {
        if (p->nodes[i].op != REEL_OP_MATMUL || p->tensors[p->nodes[i].in[0]].shape.dtype != REEL_BF16)
            continue;
        reel_shape in[REEL_OP_MAX_IN], out[REEL_OP_MAX_OUT];
        reel_plan_node_shapes(p, i, n, in, out);
        size_t b = 0;
        cr_assert_not_null(p->impl[i]->stream_ws, "%s names no workspace", p->impl[i]->name);
        cr_assert_eq(p->impl[i]->stream_ws(be, in, p->nodes[i].nin, out, &p->nodes[i].attrs, &b), REEL_OK, "%s",
                     reel_ctx_last_error(ctx));
        return b;
    }
    cr_assert_fail("no bf16 matmul in the plan");
    return 0;
}

/* A plan reserves its stream the most its nodes take at any bucket: the
 * classic cuBLAS call 4 MiB to 64 rows and the full size beyond, a
 * cuBLASLt call what its algorithm (the one the full workspace gets) asks
 * for, at least REEL_CUDA_WS_MIN. A step past the plan's largest bucket runs
 * eagerly inside that (cuBLASLt's choice for that workspace, not the one
 * remembered for the same shape beside 32 MiB); every step gives the exact
 * products. */
Test(gpu_backend, a_plan_reserves_its_streams_workspace_from_its_rows, .init = setup, .fini = teardown)
{
    reel_cuda *c = reel_cuda_of(be);
    reel_plan *big = ws_plan(2, (int32_t[]){8, 128}, true);
    cr_assert_not_null(big->streams[0]->ws, "the warm-up ran no matmul");
    cr_assert_eq(big->streams[0]->ws_bytes, c->ws_bytes);
    cr_assert_eq(big->streams[0]->ws_bytes, reel_cuda_matmul_ws_bytes(&be->caps, 128));
    ws_step_exact(big, WS_T, REEL_FALLBACK_NONE, true);
    reel_plan *small = ws_plan(2, (int32_t[]){8, 64}, true);
    size_t lt = ws_node_bytes(small, 64);
    if (ws_node_bytes(small, 8) > lt)
        lt = ws_node_bytes(small, 8);
    const size_t classic = reel_cuda_matmul_ws_bytes(&be->caps, 64);
    cr_assert_eq(classic, (size_t)4 << 20);
    cr_assert_eq(small->streams[0]->ws_bytes, lt > classic ? (lt + 4095) / 4096 * 4096 : classic);
    reel_plan_memory mem = REEL_PLAN_MEMORY_INIT;
    cr_assert_eq(reel_plan_memory_get(small, &mem), REEL_OK);
    cr_assert_eq(small->nstreams, 1);
    cr_assert_eq(mem.stream_ws_bytes, small->streams[0]->ws_bytes);
    cr_assert_eq(mem.device_bytes, mem.arena_bytes + mem.static_bytes + mem.graph_bytes + mem.stream_ws_bytes);
    ws_step_exact(small, WS_T, REEL_FALLBACK_TOKENS_OVER_LIMIT, true);
    ws_step_exact(small, 64, REEL_FALLBACK_NONE, true);
    ws_step_exact(big, WS_T, REEL_FALLBACK_NONE, true);
    /* cuBLASLt alone: its algorithms' ask. */
    reel_plan *lto = ws_plan(2, (int32_t[]){1, 8}, false);
    lt = ws_node_bytes(lto, 8) > ws_node_bytes(lto, 1) ? ws_node_bytes(lto, 8) : ws_node_bytes(lto, 1);
    lt = (lt + 4095) / 4096 * 4096;
    cr_assert_eq(lto->streams[0]->ws_bytes, lt > REEL_CUDA_WS_MIN ? lt : REEL_CUDA_WS_MIN);
    cr_assert_lt(lto->streams[0]->ws_bytes, c->ws_bytes);
    ws_step_exact(lto, 8, REEL_FALLBACK_NONE, false);
    ws_step_exact(lto, WS_T, REEL_FALLBACK_TOKENS_OVER_LIMIT, false);
    reel_plan_destroy(lto);
    reel_plan_destroy(small);
    reel_plan_destroy(big);
}
