/* Shared helpers of the host backend tests: a context on the host backend,
 * bounded waits (a broken ordering fails a test instead of hanging it) and
 * small kernels. */
#ifndef REEL_TESTS_RUNTIME_HOST_FIXTURE_H
#define REEL_TESTS_RUNTIME_HOST_FIXTURE_H

#include <criterion/criterion.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "backend/backend.h"
#include "backend/ctx.h"
#include "backend/host/host.h"

#define WAIT_LIMIT_S 5.0

static inline reel_ctx *host_ctx(void)
{
    reel_ctx_opts o = REEL_CTX_OPTS_INIT;
    o.backend = REEL_BACKEND_HOST;
    reel_ctx *ctx = NULL;
    cr_assert_eq(reel_ctx_create(&o, &ctx), REEL_OK);
    cr_assert_not_null(ctx->be);
    return ctx;
}

static inline double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline void sleep_ms(unsigned ms)
{
    struct timespec ts = { (time_t)(ms / 1000), (long)(ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

/* Spins (politely) until *flag is nonzero; false after WAIT_LIMIT_S. */
static inline bool wait_flag(atomic_int *flag)
{
    double end = now_s() + WAIT_LIMIT_S;
    while (!atomic_load(flag)) {
        if (now_s() > end)
            return false;
        struct timespec ts = { 0, 100000 };
        nanosleep(&ts, NULL);
    }
    return true;
}

static inline reel_stream *new_stream(reel_ctx *ctx)
{
    reel_stream *s = NULL;
    cr_assert_eq(ctx->be->vt->stream_create(ctx->be, &s), REEL_OK, "%s", reel_ctx_last_error(ctx));
    return s;
}

static inline reel_event *new_event(reel_ctx *ctx)
{
    reel_event *e = NULL;
    cr_assert_eq(ctx->be->vt->event_create(ctx->be, &e), REEL_OK, "%s", reel_ctx_last_error(ctx));
    return e;
}

/* Kernel: appends `value` to a log (only one stream writes a given log at a
 * time, or the test orders the writers). */
typedef struct log_args { int *log; atomic_int *len; int value; } log_args;
static inline void k_log(const void *p)
{
    const log_args *a = p;
    a->log[atomic_fetch_add(a->len, 1)] = a->value;
}

/* Kernel: adds one to a counter. */
typedef struct inc_args { atomic_int *counter; } inc_args;
static inline void k_inc(const void *p) { atomic_fetch_add(((const inc_args *)p)->counter, 1); }

/* Kernel: blocks until *gate is set (bounded), then sets *ran. */
typedef struct gate_args { atomic_int *gate; atomic_int *ran; } gate_args;
static inline void k_gate(const void *p)
{
    const gate_args *a = p;
    wait_flag(a->gate);
    if (a->ran)
        atomic_store(a->ran, 1);
}

/* Kernel: sleeps some milliseconds, then adds one to a counter. */
typedef struct slow_args { atomic_int *counter; unsigned ms; } slow_args;
static inline void k_slow(const void *p)
{
    const slow_args *a = p;
    sleep_ms(a->ms);
    atomic_fetch_add(a->counter, 1);
}

/* Kernel: announces it started and waits (bounded) for the other one; `met`
 * counts the kernels that saw their partner, so 2 proves two streams ran at
 * the same time. */
typedef struct meet_args { atomic_int *mine, *other, *met; } meet_args;
static inline void k_meet(const void *p)
{
    const meet_args *a = p;
    atomic_store(a->mine, 1);
    if (wait_flag(a->other))
        atomic_fetch_add(a->met, 1);
}

#define LAUNCH(ctx, s, fn, ...)                                                               \
    do {                                                                                      \
        __typeof__(__VA_ARGS__) la_ = (__VA_ARGS__);                                          \
        cr_assert_eq(reel_host_launch((ctx)->be, (s), (fn), &la_, sizeof la_), REEL_OK, "%s", \
                     reel_ctx_last_error(ctx));                                               \
    } while (0)

#define VT(ctx) ((ctx)->be->vt)
#define OK(ctx, expr) cr_assert_eq((expr), REEL_OK, "%s: %s", #expr, reel_ctx_last_error(ctx))

#endif
