/* Device time of steps (reel_plan_time_steps, reel_plan_last_step_device_us)
 * on REEL_TEST_BACKEND: the host backend (the stream threads' clocks stand
 * in for the device's) here, CUDA in tests/gpu. */
#include <criterion/criterion.h>
#include <string.h>
#include <time.h>

#include "reel/reel.h"
#include "backend/ctx.h"
#include "backend/host/host.h"
#include "tests/core/opts.h"

static reel_ctx *ctx;
static void setup(void)
{
    cr_assert_eq(reel_ctx_create(reel_test_ctx_opts(reel_test_backend()), &ctx), REEL_OK,
                 "backend '%s' is not available", reel_backend_name(reel_test_backend()));
}
static void teardown(void) { reel_ctx_destroy(ctx); }

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

/* y = (x + x) * w, on buckets 1 and 4 (or none). */
static reel_plan *small(bool capture)
{
    static const float w[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    reel_graph *g;
    cr_assert_eq(reel_graph_create(ctx, &g), REEL_OK);
    int64_t d[2] = {REEL_DIM_TOKENS, 8};
    reel_tensor x = reel_input(g, "x", REEL_F32, 2, d);
    reel_tensor wp = reel_param(g, "w", REEL_F32, 1, &d[1]);
    cr_assert_eq(reel_param_bind(g, wp, w), REEL_OK);
    cr_assert_eq(reel_output(g, "y", reel_mul(g, reel_add(g, x, x), wp)), REEL_OK);
    reel_compile_opts o = REEL_COMPILE_OPTS_INIT;
    o.num_buckets = 2;
    o.buckets[0] = 1;
    o.buckets[1] = 4;
    o.no_capture = !capture;
    reel_plan *p;
    cr_assert_eq(reel_compile(g, &o, &p), REEL_OK, "%s", reel_ctx_last_error(ctx));
    reel_graph_destroy(g);
    return p;
}

/* One step of n tokens; returns its host wall time in us. */
static double step(reel_plan *p, int32_t n)
{
    float x[8 * 8];
    for (int i = 0; i < n * 8; i++) x[i] = (float)i;
    double t0 = now_us();
    cr_assert_eq(reel_plan_set_input(p, "x", x, n), REEL_OK);
    reel_step_info s = { REEL_STEP_INFO_HEAD, .num_tokens = n};
    cr_assert_eq(reel_step(p, &s), REEL_OK, "%s", reel_ctx_last_error(ctx));
    return now_us() - t0;
}

Test(step_time, is_off_by_default_and_says_how_to_turn_it_on, .init = setup, .fini = teardown)
{
    reel_plan *p = small(true);
    step(p, 3);
    double us = -1;
    cr_assert_eq(reel_plan_last_step_device_us(p, &us), REEL_E_INVALID_USAGE);
    cr_assert(strstr(reel_ctx_last_error(ctx), "reel_plan_time_steps"), "%s", reel_ctx_last_error(ctx));
    cr_assert_eq(us, -1);
    cr_assert_eq(reel_plan_last_step_device_us(p, NULL), REEL_E_INVALID_ARG);
    cr_assert_eq(reel_plan_time_steps(NULL, 1), REEL_E_INVALID_ARG);
    reel_plan_destroy(p);
}

Test(step_time, needs_a_step_after_it_is_turned_on, .init = setup, .fini = teardown)
{
    reel_plan *p = small(true);
    step(p, 2);
    cr_assert_eq(reel_plan_time_steps(p, 1), REEL_OK);
    cr_assert_eq(reel_plan_time_steps(p, 1), REEL_OK, "turning it on twice is allowed");
    double us;
    cr_assert_eq(reel_plan_last_step_device_us(p, &us), REEL_E_INVALID_USAGE);
    cr_assert(strstr(reel_ctx_last_error(ctx), "no step"), "%s", reel_ctx_last_error(ctx));
    step(p, 2);
    cr_assert_eq(reel_plan_last_step_device_us(p, &us), REEL_OK, "%s", reel_ctx_last_error(ctx));
    cr_assert_eq(reel_plan_time_steps(p, 0), REEL_OK);
    cr_assert_eq(reel_plan_last_step_device_us(p, &us), REEL_E_INVALID_USAGE);
    reel_plan_destroy(p);
}

Test(step_time, lies_within_the_step_on_replay_and_eager, .init = setup, .fini = teardown)
{
    reel_plan *ps[2] = {small(true), small(false)};
    for (int k = 0; k < 2; k++) {
        cr_assert_eq(reel_plan_time_steps(ps[k], 1), REEL_OK);
        for (int i = 0; i < 20; i++) {
            double wall = step(ps[k], 1 + i % 6), us = -1;
            cr_assert_eq(reel_plan_last_step_device_us(ps[k], &us), REEL_OK, "%s", reel_ctx_last_error(ctx));
            cr_assert(us >= 0 && us <= wall, "%s step %d: device %.1f us, wall %.1f us", k ? "eager" : "replay",
                      i, us, wall);
        }
    }
    reel_plan_stats st = REEL_PLAN_STATS_INIT;
    reel_plan_stats_get(ps[0], &st);
    cr_assert_eq(st.replays, 14, "buckets 1 and 4 replay every step of at most 4 tokens");
    reel_plan_destroy(ps[0]);
    reel_plan_destroy(ps[1]);
}

Test(step_time, counts_what_the_streams_spend, .init = setup, .fini = teardown)
{
    /* Each stream item waits up to 1 ms before it runs: the step's upload,
     * kernels and download between the two records take that long. */
    if (reel_ctx_backend(ctx) != REEL_BACKEND_HOST)
        cr_skip_test("stream delays are a host-backend hook");
    reel_plan *p = small(true);
    cr_assert_eq(reel_plan_time_steps(p, 1), REEL_OK);
    reel_host_set_jitter(ctx->be, 1000, 7);
    double sum = 0;
    for (int i = 0; i < 10; i++) {
        double wall = step(p, 4), us;
        cr_assert_eq(reel_plan_last_step_device_us(p, &us), REEL_OK);
        cr_assert(us <= wall);
        sum += us;
    }
    reel_host_set_jitter(ctx->be, 0, 0);
    cr_assert(sum > 10 * 300.0, "10 steps of several items delayed up to 1 ms each: %.0f us", sum);
    reel_plan_destroy(p);
}

Test(step_time, a_failed_step_leaves_no_time, .init = setup, .fini = teardown)
{
    reel_plan *p = small(true);
    cr_assert_eq(reel_plan_time_steps(p, 1), REEL_OK);
    step(p, 1);
    double us;
    cr_assert_eq(reel_plan_last_step_device_us(p, &us), REEL_OK);
    reel_step_info s = { REEL_STEP_INFO_HEAD, .num_tokens = 3}; /* x was not set */
    cr_assert_neq(reel_step(p, &s), REEL_OK);
    cr_assert_eq(reel_plan_last_step_device_us(p, &us), REEL_E_INVALID_USAGE);
    reel_plan_destroy(p);
}
