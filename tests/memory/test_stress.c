/* Stress on the host backend with jitter: random multi-stream programs of
 * alloc / fill / check / cross-stream read / free, bounded in time, each
 * block filled with a canary pattern that its readers check twice. The
 * stream-aware allocator never lets a pattern be overwritten under a
 * reader; the unsafe pool does, and the checker catches it too. */
#include <criterion/criterion.h>
#include <string.h>

#include "memory/workspace.h"
#include "reel/memory.h"
#include "tests/memory/pgen.h"
#include "tests/backend/host_fixture.h"

#define NSTREAMS 3
#define NEVENTS 8
#define TIME_LIMIT_S 1.5
#define MAX_ITERS 4000

typedef struct fill_args { uint8_t *p; size_t n; uint8_t v; } fill_args;
static void k_fill(const void *a)
{
    const fill_args *f = a;
    memset(f->p, f->v, f->n);
}

/* Reads the canary, lingers, reads it again: a writer that slips in
 * between (or before) shows up as a wrong byte. */
typedef struct check_args { const uint8_t *p; size_t n; uint8_t v; atomic_int *bad; } check_args;
static bool canary_ok(const check_args *c)
{
    for (size_t i = 0; i < c->n; i += 61)
        if (c->p[i] != c->v)
            return false;
    return c->p[c->n - 1] == c->v;
}
static void k_check(const void *a)
{
    const check_args *c = a;
    bool ok = canary_ok(c);
    struct timespec ts = { 0, 20000 };
    nanosleep(&ts, NULL);
    if (!ok || !canary_ok(c))
        atomic_fetch_add(c->bad, 1);
}

typedef struct stress {
    reel_ctx *ctx;
    reel_stream *s[NSTREAMS];
    reel_event *ev[NEVENTS];
    reel_checker *chk;
    reel_ws *ws;
    atomic_int bad;
    int iters, cross;
} stress;

static uint64_t key_of(void *user, const reel_stream *s)
{
    stress *x = user;
    for (uint64_t i = 0; i < NSTREAMS; i++)
        if (x->s[i] == s)
            return i;
    return 99;
}

static void launch(stress *x, int s, reel_host_fn fn, const void *args, size_t size)
{
    cr_assert_eq(reel_host_launch(x->ctx->be, x->s[s], fn, args, size), REEL_OK, "%s", reel_ctx_last_error(x->ctx));
}

static void told(stress *x, int s, const char *op, const void *p, size_t n, bool write)
{
    reel_check_access a = { REEL_CHECK_ACCESS_HEAD, .space = 0, .addr = (uint64_t)(uintptr_t)p, .bytes = n, .write = write };
    cr_assert_eq(reel_checker_op(x->chk, (uint64_t)s, op, 1, &a), REEL_OK);
}

/* Another stream reads the block after an event: the ordering is real and
 * the checker is told about it. */
static void cross_read(stress *x, int s, int t, reel_ws_block *b, size_t n, uint8_t v, int i)
{
    reel_event *e = x->ev[i % NEVENTS];
    OK(x->ctx, VT(x->ctx)->event_record(x->ctx->be, e, x->s[s]));
    OK(x->ctx, VT(x->ctx)->stream_wait(x->ctx->be, x->s[t], e));
    OK(x->ctx, reel_checker_event_record(x->chk, 1000 + (uint64_t)(i % NEVENTS), (uint64_t)s));
    OK(x->ctx, reel_checker_event_wait(x->chk, (uint64_t)t, 1000 + (uint64_t)(i % NEVENTS)));
    OK(x->ctx, reel_ws_record_use(x->ws, b, x->s[t]));
    check_args c = { reel_ws_block_ptr(b), n, v, &x->bad };
    launch(x, t, k_check, &c, sizeof c);
    told(x, t, "check (other stream)", c.p, n, false);
    x->cross++;
}

static void one(stress *x, uint64_t *rng, int i)
{
    static const size_t sizes[] = { 1024, 4096, 16384 };
    int s = (int)(pg_next(rng) % NSTREAMS);
    size_t n = sizes[pg_next(rng) % 3];
    uint8_t v = (uint8_t)(1 + i % 251);
    reel_ws_block *b;
    OK(x->ctx, reel_ws_alloc(x->ws, x->s[s], n, &b));
    fill_args f = { reel_ws_block_ptr(b), n, v };
    launch(x, s, k_fill, &f, sizeof f);
    told(x, s, "fill", f.p, n, true);
    check_args c = { f.p, n, v, &x->bad };
    launch(x, s, k_check, &c, sizeof c);
    told(x, s, "check", f.p, n, false);
    if (pg_next(rng) % 2)
        cross_read(x, s, (s + 1 + (int)(pg_next(rng) % (NSTREAMS - 1))) % NSTREAMS, b, n, v, i);
    OK(x->ctx, reel_ws_free(x->ws, b));     /* at once: the host does not wait */
    if (pg_next(rng) % 64 == 0) {
        int t = (int)(pg_next(rng) % NSTREAMS);
        OK(x->ctx, VT(x->ctx)->stream_sync(x->ctx->be, x->s[t]));
        OK(x->ctx, reel_checker_host_sync(x->chk, (uint64_t)t));
    }
}

/* Runs random programs until the time limit (or, with stop_on_bad, the
 * first corruption); returns with every stream drained. */
static void run(stress *x, reel_ws_policy pol, uint64_t seed, bool stop_on_bad)
{
    memset(x, 0, sizeof *x);
    x->ctx = host_ctx();
    for (int i = 0; i < NSTREAMS; i++)
        x->s[i] = new_stream(x->ctx);
    for (int i = 0; i < NEVENTS; i++)
        x->ev[i] = new_event(x->ctx);
    reel_host_set_jitter(x->ctx->be, 150, seed);
    cr_assert_eq(reel_checker_create(x->ctx, &x->chk), REEL_OK);
    reel_ws_opts o = { .policy = pol, .checker = x->chk, .stream_key = key_of, .key_user = x };
    OK(x->ctx, reel_ws_create(x->ctx->be, &o, &x->ws));
    uint64_t rng = seed;
    double end = now_s() + TIME_LIMIT_S;
    for (int i = 0; i < MAX_ITERS && now_s() < end && !(stop_on_bad && atomic_load(&x->bad)); i++, x->iters++)
        one(x, &rng, i);
    for (int i = 0; i < NSTREAMS; i++)
        OK(x->ctx, VT(x->ctx)->stream_sync(x->ctx->be, x->s[i]));
}

static void done(stress *x)
{
    reel_ws_destroy(x->ws);
    reel_checker_destroy(x->chk);
    for (int i = 0; i < NEVENTS; i++)
        VT(x->ctx)->event_destroy(x->ctx->be, x->ev[i]);
    for (int i = 0; i < NSTREAMS; i++)
        VT(x->ctx)->stream_destroy(x->ctx->be, x->s[i]);
    reel_ctx_destroy(x->ctx);
}

static stress X;

static void expect_clean(reel_ws_policy pol, uint64_t seed)
{
    run(&X, pol, seed, false);
    reel_ws_stats st;
    reel_ws_get_stats(X.ws, &st);
    size_t nh;
    const reel_hazard *h = reel_checker_hazards(X.chk, &nh);
    char line[512];
    cr_log_info("policy %d: %d iterations, %d cross-stream reads, %llu reuses, %llu device blocks, %llu waits, "
                "%llu deferred frees", (int)pol, X.iters, X.cross, (unsigned long long)st.reuses,
                (unsigned long long)st.device_allocs, (unsigned long long)st.waits,
                (unsigned long long)st.frees_deferred);
    cr_assert_gt(X.iters, 100);
    cr_assert_gt(st.reuses, (uint64_t)X.iters / 4, "the allocator hardly reused anything");
    cr_assert_eq(atomic_load(&X.bad), 0, "a canary was overwritten under a reader");
    cr_assert_eq(nh, 0, "%s", reel_hazard_format(h, line, sizeof line));
    done(&X);
}

Test(stress, defer_policy_never_corrupts_a_canary_under_jitter, .timeout = 60)
{
    expect_clean(REEL_WS_DEFER_FREE, 11);
}

Test(stress, wait_policy_never_corrupts_a_canary_under_jitter, .timeout = 60)
{
    expect_clean(REEL_WS_WAIT_ON_REUSE, 12);
}

Test(stress, unsafe_pool_corrupts_canaries_and_the_checker_catches_it, .timeout = 60)
{
    run(&X, REEL_WS_UNSAFE_EAGER, 13, true);
    size_t nh;
    const reel_hazard *h = reel_checker_hazards(X.chk, &nh);
    char line[512];
    cr_log_info("unsafe pool: corruption after %d iterations; %zu hazards, first: %s", X.iters,
                reel_checker_count(X.chk), nh ? reel_hazard_format(h, line, sizeof line) : "-");
    cr_assert_gt(atomic_load(&X.bad), 0, "no corruption within %.1f s", TIME_LIMIT_S);
    cr_assert_gt(reel_checker_count(X.chk), 0);
    cr_assert(strstr(h->first.alloc, "workspace block") && strstr(h->second.alloc, "workspace block"), "%s",
              reel_hazard_format(h, line, sizeof line));
    done(&X);
}
