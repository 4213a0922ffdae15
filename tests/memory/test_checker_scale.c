/* The hazard checker over long runs: time per access stays flat and memory
 * stays bounded when the host synchronizes, and what the host has not
 * passed is kept. Scaled-down versions of bench/checker.c's patterns; the
 * time bounds are generous (a shared machine), the growth they catch is not
 * (a read over t separately written slots costing O(t)). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "memory/checker_internal.h"
#include "reel/memory.h"

static double cpu_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void acc(reel_checker *c, uint64_t stream, const char *op, uint32_t space, uint64_t addr, uint64_t size,
                bool write)
{
    reel_check_access a = { REEL_CHECK_ACCESS_HEAD, .space = space, .addr = addr, .bytes = size, .write = write, .alloc = "t" };
    cr_assert_eq(reel_checker_op(c, stream, op, 1, &a), REEL_OK);
}

/* One decode step over `layers` KV caches at token t: append, read all. */
static void kv_step(reel_checker *c, int layers, int tokens, int t)
{
    reel_checker_begin(c, t);
    for (int l = 0; l < layers; l++) {
        uint64_t base = (uint64_t)l * (uint64_t)tokens * 256;
        acc(c, 0, "kv append", 2, base + (uint64_t)t * 256, 256, true);
        acc(c, 0, "attention", 2, base, (uint64_t)(t + 1) * 256, false);
    }
    acc(c, 0, "sample", 1, 0, 64, true);
    cr_assert_eq(reel_checker_host_sync(c, REEL_CHECK_ALL_STREAMS), REEL_OK);
    acc(c, REEL_CHECK_HOST, "download", 1, 0, 64, false);
    reel_checker_end(c, NULL, NULL);
}

Test(checker_scale, keeps_time_per_access_flat_on_the_kv_decode_pattern)
{
    reel_checker *c;
    cr_assert_eq(reel_checker_create(NULL, &c), REEL_OK);
    const int layers = 16, tokens = 4096;
    double t0 = 0, early = 0, late = 0;
    for (int t = 0; t < tokens; t++) {
        if (t == 256 || t == tokens - 512)
            t0 = cpu_s();
        kv_step(c, layers, tokens, t);
        if (t == 767)
            early = cpu_s() - t0;
        if (t == tokens - 1)
            late = cpu_s() - t0;
    }
    cr_assert_eq(reel_checker_count(c), 0);
    /* the same number of steps in each window: equal work when flat, 7x
     * (the mean span of a read) when a read costs O(t) */
    cr_assert_lt(late, 3.0 * early + 0.01, "tokens 256..768: %.3f s, last 512: %.3f s", early, late);
    cr_assert_lt(c->sp[1].n, 4u * (size_t)layers, "ranges kept: %zu", c->sp[1].n);
    reel_checker_destroy(c);
}

/* A 3-op plan on two streams stepped as runtime/check.c feeds it; the host
 * syncs every stream, or (all false) only the plan's two. */
static void plan_step(reel_checker *c, int64_t st, bool all)
{
    reel_checker_begin(c, st);
    acc(c, 0, "upload", 0, 0x1000, 256, true);
    reel_check_access a[2] = { { REEL_CHECK_ACCESS_HEAD, 0, 0x1000, 64, false, "tokens" }, { REEL_CHECK_ACCESS_HEAD, 0, 0x10000, 4096, true, "x" } };
    cr_assert_eq(reel_checker_op(c, 0, "embedding", 2, a), REEL_OK);
    cr_assert_eq(reel_checker_event_record(c, 1, 0), REEL_OK);
    cr_assert_eq(reel_checker_event_wait(c, 1, 1), REEL_OK);
    reel_check_access b[2] = { { REEL_CHECK_ACCESS_HEAD, 0, 0x10000, 4096, false, "x" }, { REEL_CHECK_ACCESS_HEAD, 0, 0x11000, 4096, true, "k" } };
    cr_assert_eq(reel_checker_op(c, 1, "matmul", 2, b), REEL_OK);
    cr_assert_eq(reel_checker_event_record(c, 2, 1), REEL_OK);
    cr_assert_eq(reel_checker_event_wait(c, 0, 2), REEL_OK);
    reel_check_access d[2] = { { REEL_CHECK_ACCESS_HEAD, 0, 0x11000, 4096, false, "k" }, { REEL_CHECK_ACCESS_HEAD, 0, 0x10000, 64, true, "out" } };
    cr_assert_eq(reel_checker_op(c, 0, "add", 2, d), REEL_OK);
    acc(c, 0, "download", 0, 0x10000, 64, false);
    cr_assert_eq(reel_checker_host_sync(c, all ? REEL_CHECK_ALL_STREAMS : 0), REEL_OK);
    cr_assert_eq(reel_checker_host_sync(c, all ? REEL_CHECK_ALL_STREAMS : 1), REEL_OK);
    reel_checker_end(c, NULL, NULL);
}

Test(checker_scale, keeps_memory_bounded_for_a_plan_stepped_under_it)
{
    reel_checker *c;
    cr_assert_eq(reel_checker_create(NULL, &c), REEL_OK);
    size_t at10k = 0;
    double t0 = cpu_s(), first = 0;
    for (int64_t st = 0; st < 200000; st++) {
        plan_step(c, st, true);
        if (st == 19999) {
            at10k = reel_checker_memory(c);
            first = cpu_s() - t0;
            t0 = cpu_s();
        }
    }
    double rest = cpu_s() - t0;
    size_t at200k = reel_checker_memory(c);
    cr_assert_eq(reel_checker_count(c), 0);
    /* 9 accesses a step: 1.8 million records if nothing were reclaimed */
    cr_assert_leq(at200k, at10k, "memory after 20000 steps %zu, after 200000 %zu", at10k, at200k);
    cr_assert_lt(at200k, 8u << 20, "%zu bytes", at200k);
    cr_assert_lt(rest / 9.0, 3.0 * first + 0.01, "first 20000 steps %.3f s, next 180000 %.3f s", first, rest);
    reel_checker_destroy(c);
}

Test(checker_scale, keeps_time_per_access_flat_for_a_pool_over_eight_streams)
{
    reel_checker *c;
    cr_assert_eq(reel_checker_create(NULL, &c), REEL_OK);
    uint64_t id[8][4] = { { 0 } }, x = 88172645463325252ull;
    double t0 = cpu_s(), first = 0;
    const int rounds = 60000;
    for (int i = 0; i < rounds; i++) {
        int s = i % 8, k = (i / 8) % 4;
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        /* a block of 512 B .. 64 KiB at one of 256 places per class: small
         * blocks below and between large ones */
        int cls = (int)(x % 8);
        uint64_t size = 512ull << cls;
        uint64_t addr = (uint64_t)s * (64ull << 20) + (uint64_t)((i / 8) % 256) * (128ull << 10);
        if (id[s][k]) {
            cr_assert_eq(reel_checker_free(c, (uint64_t)s, id[s][k]), REEL_OK);
            id[s][k] = 0;
        }
        char name[32];
        snprintf(name, sizeof name, "block %d", cls);
        if (reel_checker_alloc(c, (uint64_t)s, 0, addr, size, name, &id[s][k]) != REEL_OK)
            cr_assert_fail("alloc");
        cr_assert_eq(reel_checker_use(c, (uint64_t)s, "fill", id[s][k], 0, size, true), REEL_OK);
        cr_assert_eq(reel_checker_use(c, (uint64_t)s, "gemm", id[s][k], 0, size, false), REEL_OK);
        cr_assert_eq(reel_checker_use(c, (uint64_t)s, "norm", id[s][k], size / 2, size / 2, false), REEL_OK);
        if (i % 300 == 299)
            cr_assert_eq(reel_checker_host_sync(c, REEL_CHECK_ALL_STREAMS), REEL_OK);
        if (i == rounds / 10 - 1) {
            first = cpu_s() - t0;
            t0 = cpu_s();
        }
    }
    double rest = cpu_s() - t0;
    cr_assert_eq(reel_checker_count(c), 0);
    cr_assert_lt(rest / 9.0, 3.0 * first + 0.01, "first tenth %.3f s, the rest %.3f s", first, rest);
    cr_assert_lt(c->sp[0].n, 8u * 256 * 2 * 2, "ranges kept: %zu", c->sp[0].n);
    reel_checker_destroy(c);
}

Test(checker_scale, keeps_history_the_host_has_not_passed_across_collections)
{
    reel_checker *c;
    cr_assert_eq(reel_checker_create(NULL, &c), REEL_OK);
    acc(c, 5, "early write", 0, 1 << 30, 64, true);     /* stream 5: never synchronized */
    for (int64_t st = 0; st < 30000; st++)              /* 270000 records: several collections */
        plan_step(c, st, false);
    cr_assert_eq(reel_checker_count(c), 0);
    acc(c, 0, "late read", 0, (1 << 30) + 32, 64, false);
    size_t n;
    const reel_hazard *h = reel_checker_hazards(c, &n);
    cr_assert_eq(n, 1);
    cr_assert_eq(h[0].kind, REEL_HAZARD_RAW);
    cr_assert_str_eq(h[0].first.op, "early write");
    cr_assert_eq(h[0].first.stream, 5);
    cr_assert_eq(h[0].first.seq, 1);
    cr_assert_str_eq(h[0].second.op, "late read");
    cr_assert_eq(h[0].lo, (1u << 30) + 32);
    cr_assert_eq(h[0].hi, (1u << 30) + 64);
    /* once the host has passed every stream, the next writer is ordered */
    cr_assert_eq(reel_checker_host_sync(c, REEL_CHECK_ALL_STREAMS), REEL_OK);
    acc(c, 1, "after sync", 0, 1 << 30, 64, true);
    cr_assert_eq(reel_checker_count(c), 1);
    reel_checker_destroy(c);
}

Test(checker_scale, keeps_memory_bounded_for_a_pool_handing_out_blocks_for_ever)
{
    reel_ctx *ctx;
    cr_assert_eq(reel_ctx_create(NULL, &ctx), REEL_OK);
    reel_checker *c;
    cr_assert_eq(reel_checker_create(ctx, &c), REEL_OK);
    uint64_t first = 0, id = 0;
    size_t at200k = 0;
    for (int i = 0; i < 400000; i++) {
        uint64_t s = (uint64_t)(i % 4), addr = (uint64_t)(i % 64) * 4096;
        cr_assert_eq(reel_checker_alloc(c, s, 0, addr, 4096, "block", &id), REEL_OK);
        if (i == 0)
            first = id;
        cr_assert_eq(reel_checker_use(c, s, "fill", id, 0, 4096, true), REEL_OK);
        cr_assert_eq(reel_checker_free(c, s, id), REEL_OK);
        cr_assert_eq(reel_checker_host_sync(c, s), REEL_OK);    /* the next owner follows */
        if (i == 199999)
            at200k = reel_checker_memory(c);
    }
    cr_assert_eq(reel_checker_count(c), 0);
    /* 65536 freed allocations kept, and the records they pin: the same after
     * 200000 hand-outs as after 400000 */
    size_t at400k = reel_checker_memory(c);
    cr_assert_leq(at400k, at200k, "after 200000 hand-outs %zu bytes, after 400000 %zu", at200k, at400k);
    cr_assert_lt(at400k, 32u << 20, "%zu bytes", at400k);
    /* the first block's entry was reused long ago: its id is refused, saying why */
    cr_assert_eq(reel_checker_use(c, 0, "late", first, 0, 64, false), REEL_E_INVALID_ARG);
    cr_assert(strstr(reel_ctx_last_error(ctx), "freed before the last 65536 frees"), "%s", reel_ctx_last_error(ctx));
    cr_assert_eq(reel_checker_free(c, 0, first), REEL_E_INVALID_ARG);
    /* a recent one is still reported with the op that freed it */
    cr_assert_eq(reel_checker_use(c, 0, "late", id, 0, 64, false), REEL_OK);
    size_t n;
    const reel_hazard *h = reel_checker_hazards(c, &n);
    cr_assert_eq(n, 1);
    cr_assert_eq(h[0].kind, REEL_HAZARD_USE_AFTER_FREE);
    cr_assert_eq(h[0].first.seq, 400000u * 3);
    reel_checker_destroy(c);
    reel_ctx_destroy(ctx);
}
