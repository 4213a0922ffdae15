/* Pinned staging: buffers come from page-locked memory the backend gave
 * (plain pages on the host backend), many buffers per backend allocation
 * when a jemalloc arena serves them. */
#include <criterion/criterion.h>
#include <string.h>

#include "memory/pinned.h"
#include "reel_config.h"
#include "tests/backend/host_fixture.h"

static reel_ctx *ctx;
static reel_backend_vt counting_vt;
static const reel_backend_vt *host_vt;
static int pinned_calls;

static reel_status count_pinned(reel_backend *be, size_t bytes, void **out)
{
    pinned_calls++;
    return host_vt->pinned_alloc(be, bytes, out);
}

static void setup(void)
{
    ctx = host_ctx();
    host_vt = ctx->be->vt;
    counting_vt = *host_vt;
    counting_vt.pinned_alloc = count_pinned;
    ctx->be->vt = &counting_vt;
    pinned_calls = 0;
}

static void teardown(void)
{
    ctx->be->vt = host_vt;
    reel_ctx_destroy(ctx);
}

TestSuite(pinned, .init = setup, .fini = teardown);

Test(pinned, serves_buffers_from_memory_the_backend_pinned)
{
    reel_pinned *p;
    OK(ctx, reel_pinned_create(ctx->be, &p));
    enum { N = 200 };
    void *buf[N];
    for (int i = 0; i < N; i++) {
        size_t n = (size_t)(64 + 997 * i % 20000);
        OK(ctx, reel_pinned_alloc(p, n, &buf[i]));
        cr_assert(reel_pinned_owns(p, buf[i]), "buffer %d is not in pinned memory", i);
        memset(buf[i], i & 0xff, n);
    }
    reel_pinned_stats st;
    reel_pinned_get_stats(p, &st);
    cr_assert_eq(st.live, N);
    cr_assert_gt(st.mapped, 0);
    cr_assert_gt(st.backend_allocs, 0);
    cr_assert_leq(st.backend_allocs, (size_t)pinned_calls);
    cr_assert_eq(st.arena, (bool)REEL_USE_JEMALLOC);
    if (REEL_USE_JEMALLOC)
        cr_assert_lt(pinned_calls, N / 4, "%d backend allocations for %d buffers", pinned_calls, N);
    else
        cr_assert_geq(pinned_calls, N);
    for (int i = 0; i < N; i++)
        reel_pinned_free(p, buf[i]);
    reel_pinned_get_stats(p, &st);
    cr_assert_eq(st.live, 0);
    reel_pinned_destroy(p);
}

Test(pinned, reuses_freed_staging_without_pinning_more)
{
    reel_pinned *p;
    OK(ctx, reel_pinned_create(ctx->be, &p));
    void *a;
    OK(ctx, reel_pinned_alloc(p, 1 << 20, &a));
    reel_pinned_free(p, a);
    int calls = pinned_calls;
    for (int i = 0; i < 50; i++) {
        OK(ctx, reel_pinned_alloc(p, 1 << 20, &a));
        reel_pinned_free(p, a);
    }
    if (REEL_USE_JEMALLOC)
        cr_assert_eq(pinned_calls, calls);
    reel_pinned_destroy(p);
}

Test(pinned, keeps_two_allocators_apart)
{
    reel_pinned *p, *q;
    OK(ctx, reel_pinned_create(ctx->be, &p));
    OK(ctx, reel_pinned_create(ctx->be, &q));
    void *a, *b;
    OK(ctx, reel_pinned_alloc(p, 4096, &a));
    OK(ctx, reel_pinned_alloc(q, 4096, &b));
    cr_assert(reel_pinned_owns(p, a) && !reel_pinned_owns(p, b));
    cr_assert(reel_pinned_owns(q, b) && !reel_pinned_owns(q, a));
    reel_pinned_free(p, a);
    reel_pinned_free(q, b);
    reel_pinned_destroy(q);
    reel_pinned_destroy(p);
}
