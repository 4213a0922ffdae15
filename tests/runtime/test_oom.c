/* Every host and (host backend) device allocation of compile, step,
 * bind_state and trim made to fail in turn: each call returns a status
 * (never crashes), nothing leaks once the plan is destroyed, and a plan
 * that survived the failure still runs a correct step. The reel_halloc
 * family is wrapped at link time (-Wl,--wrap), so the Nth call fails. */
#include <criterion/criterion.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/halloc.h"
#include "tests/runtime/opgraphs.h"
#include "tests/core/opts.h"

static atomic_long armed_left; /* allocations left before the failing one; < 0: off */
static atomic_long live;       /* allocations made and not freed */

void *__real_reel_halloc(size_t bytes);
void *__real_reel_hcalloc(size_t n, size_t size);
void *__real_reel_hrealloc(void *p, size_t bytes);
void __real_reel_hfree(void *p);
char *__real_reel_hstrdup(const char *s);
void *__real_reel_haligned(size_t align, size_t bytes);

static bool fail_now(void)
{
    long left = atomic_load(&armed_left);
    while (left >= 0 && !atomic_compare_exchange_weak(&armed_left, &left, left - 1))
        ;
    return left == 0;
}

static void *counted(void *p)
{
    if (p)
        atomic_fetch_add(&live, 1);
    return p;
}

void *__wrap_reel_halloc(size_t bytes) { return fail_now() ? NULL : counted(__real_reel_halloc(bytes)); }
void *__wrap_reel_hcalloc(size_t n, size_t size) { return fail_now() ? NULL : counted(__real_reel_hcalloc(n, size)); }
char *__wrap_reel_hstrdup(const char *s) { return fail_now() ? NULL : counted(__real_reel_hstrdup(s)); }
void *__wrap_reel_haligned(size_t align, size_t bytes)
{
    return fail_now() ? NULL : counted(__real_reel_haligned(align, bytes));
}
void *__wrap_reel_hrealloc(void *p, size_t bytes)
{
    if (fail_now())
        return NULL;
    void *q = __real_reel_hrealloc(p, bytes);
    return p ? q : counted(q);
}
void __wrap_reel_hfree(void *p)
{
    if (p)
        atomic_fetch_sub(&live, 1);
    __real_reel_hfree(p);
}

static reel_ctx *ctx;
static void setup(void)
{
    atomic_store(&armed_left, -1);
    cr_assert_eq(reel_ctx_create(reel_test_ctx_opts(REEL_BACKEND_HOST), &ctx), REEL_OK);
}
static void teardown(void) { reel_ctx_destroy(ctx); }

/* Two branches on streams 1 and 2 joined on stream 0. */
static reel_graph *branches(float *w)
{
    reel_graph *g;
    cr_assert_eq(reel_graph_create(ctx, &g), REEL_OK);
    reel_tensor x = reel_input(g, "x", REEL_F32, 2, (int64_t[]){REEL_DIM_TOKENS, 16});
    reel_tensor p1 = reel_param(g, "w1", REEL_F32, 2, (int64_t[]){16, 16});
    reel_tensor p2 = reel_param(g, "w2", REEL_F32, 2, (int64_t[]){16, 16});
    reel_param_bind(g, p1, w);
    reel_param_bind(g, p2, w);
    reel_tensor a = reel_matmul(g, x, p1, false), b = reel_matmul(g, x, p2, false);
    reel_tensor as = reel_softmax(g, a), bs = reel_softmax(g, b);
    reel_set_stream(g, b, 1);
    reel_set_stream(g, bs, 1);
    reel_set_stream(g, as, 2);
    reel_output(g, "y", reel_add(g, as, bs));
    cr_assert_eq(reel_graph_status(g), REEL_OK);
    return g;
}

static reel_status step_n(reel_plan *p, const float *x, int32_t n)
{
    reel_step_info s = { REEL_STEP_INFO_HEAD, .num_tokens = n};
    reel_status st = reel_plan_set_input(p, "x", x, n);
    return st ? st : reel_step(p, &s);
}

/* A failed call names what failed (the status may be OOM or, where a
 * backend call gave up, BACKEND). */
#define FAILED_CLEANLY(st) ((st) == REEL_OK || (((st) == REEL_E_OOM || (st) == REEL_E_BACKEND) && *reel_ctx_last_error(ctx)))

/* Compile and the step kinds of a serving loop. Returns the plan (NULL if
 * compile failed). */
static reel_plan *run_branches(reel_graph *g, const float *x)
{
    reel_compile_opts o = REEL_COMPILE_OPTS_INIT;
    o.num_buckets = 2;
    memcpy(o.buckets, (int32_t[]){4, 8}, 2 * sizeof(int32_t));
    o.check_hazards = true;
    reel_plan *p = NULL;
    reel_status st = reel_compile(g, &o, &p);
    cr_assert(FAILED_CLEANLY(st), "compile: %s: %s", reel_status_str(st), reel_ctx_last_error(ctx));
    if (st != REEL_OK) {
        cr_assert_null(p);
        return NULL;
    }
    int32_t ns[] = {3, 9, 20, 6};
    for (int k = 0; k < 4; k++) {
        st = step_n(p, x, ns[k]);
        cr_assert(FAILED_CLEANLY(st), "step %d: %s: %s", ns[k], reel_status_str(st),
                  reel_ctx_last_error(ctx));
        if (k == 2) {
            st = reel_plan_trim(p);
            cr_assert(FAILED_CLEANLY(st), "trim: %s", reel_status_str(st));
        }
    }
    return p;
}

/* Outputs of a plan that never saw a failure, for 3 and 12 tokens. */
static float want3[3 * 16], want12[12 * 16];

static void keep_output(reel_plan *p, const float *x, int32_t n, float *dst)
{
    const void *y;
    cr_assert_eq(step_n(p, x, n), REEL_OK, "%s", reel_ctx_last_error(ctx));
    cr_assert_eq(reel_plan_output(p, "y", &y, NULL), REEL_OK);
    memcpy(dst, y, (size_t)n * 16 * sizeof(float));
}

static void expect_good_steps(reel_plan *p, const float *x)
{
    int32_t ns[] = {3, 12};
    const float *want[] = {want3, want12};
    for (int k = 0; k < 2; k++) {
        const void *y;
        cr_assert_eq(step_n(p, x, ns[k]), REEL_OK, "after the failure: %s", reel_ctx_last_error(ctx));
        cr_assert_eq(reel_plan_output(p, "y", &y, NULL), REEL_OK);
        cr_assert_eq(memcmp(y, want[k], (size_t)ns[k] * 16 * sizeof(float)), 0, "after the failure: wrong output");
    }
}

Test(oom, every_failing_allocation_of_a_multi_stream_plan_is_a_status_without_leaks, .init = setup,
     .fini = teardown)
{
    static float w[16 * 16], x[20 * 16];
    for (int i = 0; i < 16 * 16; i++)
        w[i] = (float)(i % 7) / 7.f - 0.5f;
    for (int i = 0; i < 20 * 16; i++)
        x[i] = (float)(i % 5) / 5.f;
    reel_graph *g = branches(w);
    reel_plan *ref = run_branches(g, x);
    cr_assert_not_null(ref);
    keep_output(ref, x, 3, want3);
    keep_output(ref, x, 12, want12);
    reel_plan_destroy(ref);
    int failures = 0;
    for (long n = 0;; n++) {
        long before = atomic_load(&live);
        atomic_store(&armed_left, n);
        reel_plan *p = run_branches(g, x);
        bool failed = atomic_load(&armed_left) < 0;
        atomic_store(&armed_left, -1);
        if (p)
            expect_good_steps(p, x);
        reel_plan_destroy(p);
        cr_assert_eq(atomic_load(&live), before, "allocation %ld failing leaks %ld allocations", n,
                     atomic_load(&live) - before);
        if (!failed)
            break;
        failures++;
    }
    cr_assert_gt(failures, 100, "only %d allocations were made to fail", failures);
    reel_graph_destroy(g);
}

Test(oom, every_failing_allocation_of_an_attention_plan_with_bound_state_is_a_status_without_leaks,
     .init = setup, .fini = teardown)
{
    og_graph og;
    cr_assert_eq(og_build(ctx, OG_ATTENTION, REEL_F32, 3, &og), REEL_OK);
    size_t bytes = (size_t)OG_BLOCKS * OG_BLOCK * OG_KV_HEADS * OG_HEAD_DIM * sizeof(float);
    float *kc = malloc(bytes);
    reel_compile_opts o = REEL_COMPILE_OPTS_INIT;
    o.num_buckets = 2;
    memcpy(o.buckets, (int32_t[]){2, 8}, 2 * sizeof(int32_t));
    o.max_context = 32;
    int failures = 0;
    for (long n = 0;; n++) {
        long before = atomic_load(&live);
        memset(kc, 0, bytes);
        atomic_store(&armed_left, n);
        reel_plan *p = NULL;
        reel_status st = reel_compile(og.g, &o, &p);
        cr_assert(FAILED_CLEANLY(st), "compile: %s: %s", reel_status_str(st), reel_ctx_last_error(ctx));
        if (p) {
            st = reel_plan_bind_state(p, "k_cache", kc, bytes);
            cr_assert(FAILED_CLEANLY(st), "bind: %s: %s", reel_status_str(st), reel_ctx_last_error(ctx));
            int32_t ns[] = {2, 6, 6};
            int32_t lens[] = {20, 20, 60}; /* replay, eager (capture failed or replay), past max_context */
            for (int k = 0; k < 3; k++) {
                og_step s;
                st = og_make_step(p, OG_ATTENTION, REEL_F32, ns[k], 7 + k, lens[k], &s);
                if (st == REEL_OK)
                    st = reel_step(p, &s.info);
                cr_assert(FAILED_CLEANLY(st), "step %d: %s: %s", k, reel_status_str(st),
                          reel_ctx_last_error(ctx));
            }
        }
        bool failed = atomic_load(&armed_left) < 0;
        atomic_store(&armed_left, -1);
        if (p) {
            og_step s;
            cr_assert_eq(og_make_step(p, OG_ATTENTION, REEL_F32, 3, 11, 24, &s), REEL_OK);
            cr_assert_eq(reel_step(p, &s.info), REEL_OK, "after the failure: %s", reel_ctx_last_error(ctx));
        }
        reel_plan_destroy(p);
        cr_assert_eq(atomic_load(&live), before, "allocation %ld failing leaks %ld allocations", n,
                     atomic_load(&live) - before);
        if (!failed)
            break;
        failures++;
    }
    cr_assert_gt(failures, 50, "only %d allocations were made to fail", failures);
    free(kc);
    og_free(&og);
}
