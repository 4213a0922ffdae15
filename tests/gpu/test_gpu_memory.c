/* Device memory comes back to its starting level after a backend and
 * everything made on it (streams, cuBLAS handles and workspaces, events,
 * graphs, buffers), and after a plan and its context, are destroyed. Runs
 * alone (free memory is device-wide), after a warm-up that loads the
 * libraries' kernels, which stay resident for the process. */
#include <criterion/criterion.h>
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "tests/runtime/opgraphs.h"
#include "tests/gpu/oprun.h"
#include "backend/ctx.h"
#include "tests/core/opts.h"

static size_t free_bytes(void)
{
    size_t f = 0, t = 0;
    cr_assert_eq(cudaMemGetInfo(&f, &t), cudaSuccess);
    return f;
}

static void run_matmul(reel_ctx *ctx, reel_dtype dt)
{
    gt_rng r = {7};
    gt_op op;
    memset(&op, 0, sizeof op);
    op.op = REEL_OP_MATMUL;
    op.rows = 8;
    op.nin = 2;
    op.nout = 1;
    op.in[0] = gt_shape(dt, true, 2, (int64_t[]){8, 64});
    op.in[1] = gt_shape(dt, false, 2, (int64_t[]){64, 32});
    op.out[0] = gt_shape(dt, true, 2, (int64_t[]){8, 32});
    op.data[0] = gt_random(&r, dt, 8 * 64, -1, 1);
    op.data[1] = gt_random(&r, dt, 64 * 32, -1, 1);
    const reel_op_impl *impl = reel_registry_select(REEL_BACKEND_CUDA, REEL_OP_MATMUL, op.in, 2, op.out,
                                                    &op.attrs, &ctx->be->caps);
    cr_assert_not_null(impl);
    gt_result res;
    cr_assert_eq(gt_run(ctx->be, impl, &op, &res), REEL_OK, "%s", reel_ctx_last_error(ctx));
    gt_result_free(&res);
    gt_op_free_data(&op);
}

/* Streams, events, buffers (device and pinned), a captured graph, matmuls. */
static void exercise_backend(void)
{
    reel_ctx *ctx;
    cr_assert_eq(reel_ctx_create(reel_test_ctx_opts(REEL_BACKEND_CUDA), &ctx), REEL_OK);
    reel_backend *be = ctx->be;
    reel_stream *s[3];
    reel_event *e;
    void *d, *h;
    reel_exec_graph *g;
    for (int i = 0; i < 3; i++)
        cr_assert_eq(be->vt->stream_create(be, &s[i]), REEL_OK);
    cr_assert_eq(be->vt->event_create(be, &e), REEL_OK);
    cr_assert_eq(be->vt->dev_alloc(be, (size_t)48 << 20, &d), REEL_OK);
    cr_assert_eq(be->vt->pinned_alloc(be, (size_t)8 << 20, &h), REEL_OK);
    cr_assert_eq(be->vt->capture_begin(be, s[0]), REEL_OK);
    cr_assert_eq(be->vt->fill(be, s[0], d, 1, (size_t)48 << 20), REEL_OK);
    cr_assert_eq(be->vt->capture_end(be, s[0], &g), REEL_OK);
    cr_assert_eq(be->vt->graph_launch(be, g, s[0]), REEL_OK);
    cr_assert_eq(be->vt->event_record(be, e, s[0]), REEL_OK);
    cr_assert_eq(be->vt->stream_wait(be, s[1], e), REEL_OK);
    cr_assert_eq(be->vt->copy(be, s[1], h, d, (size_t)8 << 20, REEL_COPY_D2H), REEL_OK);
    cr_assert_eq(be->vt->stream_sync(be, s[1]), REEL_OK);
    run_matmul(ctx, REEL_BF16);
    run_matmul(ctx, REEL_F32);
    be->vt->graph_destroy(be, g);
    be->vt->pinned_free(be, h);
    be->vt->dev_free(be, d);
    be->vt->event_destroy(be, e);
    for (int i = 0; i < 3; i++)
        be->vt->stream_destroy(be, s[i]);
    reel_ctx_destroy(ctx);
}

/* A plan with attention and matmuls: compiled (graphs captured), stepped
 * (replay and eager), destroyed. */
static void exercise_plan(void)
{
    reel_ctx *ctx;
    cr_assert_eq(reel_ctx_create(reel_test_ctx_opts(REEL_BACKEND_CUDA), &ctx), REEL_OK);
    int kinds[2] = {OG_ATTENTION, OG_MATMUL};
    for (int k = 0; k < 2; k++) {
        og_graph og;
        reel_plan *p;
        cr_assert_eq(og_build(ctx, kinds[k], REEL_BF16, 3, &og), REEL_OK, "%s", reel_ctx_last_error(ctx));
        reel_compile_opts o = REEL_COMPILE_OPTS_INIT;
        o.max_context = 32;
        cr_assert_eq(reel_compile(og.g, &o, &p), REEL_OK, "%s", reel_ctx_last_error(ctx));
        /* Two replays, then an eager step: a context past max_context for
         * attention, more tokens than the largest bucket for matmul. */
        int32_t ns[3] = {3, 17, k ? 100 : 6}, ctxs[3] = {20, 20, k ? 20 : 40};
        for (int i = 0; i < 3; i++) {
            og_step s;
            cr_assert_eq(og_make_step(p, kinds[k], REEL_BF16, ns[i], 11 + i, ctxs[i], &s), REEL_OK);
            cr_assert_eq(reel_step(p, &s.info), REEL_OK, "%s", reel_ctx_last_error(ctx));
        }
        reel_plan_destroy(p);
        og_free(&og);
    }
    reel_ctx_destroy(ctx);
}

/* Below the 2 MiB granularity of device allocations: any leaked buffer,
 * workspace or handle shows. */
#define SLACK ((size_t)1 << 20)

Test(gpu_memory, device_memory_returns_to_its_starting_level_after_destroy)
{
    exercise_backend();
    exercise_plan();
    size_t f0 = free_bytes();
    exercise_backend();
    size_t f1 = free_bytes();
    exercise_plan();
    size_t f2 = free_bytes();
    cr_assert(f1 + SLACK >= f0, "backend destroy left %zu bytes in use", f0 - f1);
    cr_assert(f2 + SLACK >= f0, "plan and context destroy left %zu bytes in use", f0 - f2);
}

/* The sum of each state's rows picked by the token ids: n states of `each`
 * bytes (bf16, 8 columns). */
static reel_graph *states_graph(reel_ctx *ctx, int n, size_t each)
{
    reel_graph *g;
    cr_assert_eq(reel_graph_create(ctx, &g), REEL_OK);
    reel_tensor ids = reel_input(g, "ids", REEL_I32, 1, (int64_t[]){REEL_DIM_TOKENS});
    reel_tensor y = {0};
    for (int i = 0; i < n; i++) {
        char name[16];
        snprintf(name, sizeof name, "s%d", i);
        reel_tensor e = reel_embedding(g, reel_state(g, name, REEL_BF16, 2, (int64_t[]){(int64_t)(each / 16), 8}), ids);
        y = i ? reel_add(g, y, e) : e;
    }
    cr_assert_eq(reel_output(g, "y", y), REEL_OK, "%s", reel_ctx_last_error(ctx));
    return g;
}

/* Free device memory once it has stopped moving (memory a finished process
 * or a destroyed context gives back arrives late): equal readings 20 ms
 * apart, or the last of 50. */
static size_t settled_free_bytes(void)
{
    size_t prev = free_bytes();
    for (int i = 0; i < 50; i++) {
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
        size_t f = free_bytes();
        if (f == prev)
            return f;
        prev = f;
    }
    return prev;
}

/* What the budget counts (parameters, states, the arena, the step region,
 * the streams' workspaces) against the drop in cudaMemGetInfo's free bytes
 * over compile: the rest is the library's own (graphs, allocation rounding). */
Test(gpu_memory, the_budget_predicts_what_compile_takes_and_refuses_what_cannot_fit)
{
    exercise_backend();
    reel_ctx *ctx;
    cr_assert_eq(reel_ctx_create(reel_test_ctx_opts(REEL_BACKEND_CUDA), &ctx), REEL_OK);
    size_t avail, total;
    cr_assert_eq(reel_ctx_memory(ctx, &avail, &total), REEL_OK);
    reel_graph *g = states_graph(ctx, 2, (size_t)256 << 20);
    /* Free memory is the device's: memory another process or an earlier
     * context gives back during a compile makes that compile's drop look
     * smaller, never larger. The largest drop of three compiles is this
     * process's. */
    size_t predicted = 0, measured = 0;
    reel_plan *p = NULL;
    for (int k = 0; k < 3; k++) {
        reel_plan_destroy(p);
        size_t f0 = settled_free_bytes();
        cr_assert_eq(reel_compile(g, NULL, &p), REEL_OK, "%s", reel_ctx_last_error(ctx));
        size_t f1 = settled_free_bytes();
        if (f0 > f1 && f0 - f1 > measured)
            measured = f0 - f1;
    }
    reel_plan_memory m = REEL_PLAN_MEMORY_INIT;
    cr_assert_eq(reel_plan_memory_get(p, &m), REEL_OK);
    predicted = m.param_bytes + m.state_bytes + m.arena_bytes + m.static_bytes + m.stream_ws_bytes;
    cr_log_info("budget: predicted %zu bytes, cudaMemGetInfo dropped %zu (%+.2f MiB)", predicted, measured,
                ((double)measured - (double)predicted) / 1048576.0);
    fprintf(stderr, "budget: predicted %zu bytes, cudaMemGetInfo dropped %zu (%+.2f MiB)\n", predicted, measured,
            ((double)measured - (double)predicted) / 1048576.0);
    cr_assert_geq(measured + SLACK, predicted, "compile took less than the budget counted");
    cr_assert_leq(measured, predicted + ((size_t)64 << 20), "compile took more than the budget and 64 MiB");
    reel_plan_destroy(p);
    reel_graph_destroy(g);

    /* Two states, each under the free memory, together over it. */
    size_t each = (avail / 5 * 3) & ~(size_t)15;
    g = states_graph(ctx, 2, each);
    size_t f0 = settled_free_bytes();
    p = (reel_plan *)1;
    cr_assert_eq(reel_compile(g, NULL, &p), REEL_E_OOM);
    cr_assert_null(p);
    cr_assert(strstr(reel_ctx_last_error(ctx), "states"), "%s", reel_ctx_last_error(ctx));
    cr_assert_geq(free_bytes() + SLACK, f0, "a refused compile kept memory");
    reel_graph_destroy(g);
    reel_ctx_destroy(ctx);
}
