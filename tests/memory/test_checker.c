/* The hazard checker's clocks, shadow memory and reports. */
#include <criterion/criterion.h>
#include <string.h>

#include "memory/checker_internal.h"
#include "reel/memory.h"

static reel_checker *C;

static void setup(void) { cr_assert_eq(reel_checker_create(NULL, &C), REEL_OK); }
static void teardown(void) { reel_checker_destroy(C); }

static void op(uint64_t stream, const char *name, uint64_t addr, uint64_t size, bool write)
{
    reel_check_access a = { REEL_CHECK_ACCESS_HEAD, .space = 0, .addr = addr, .bytes = size, .write = write, .alloc = "buf" };
    cr_assert_eq(reel_checker_op(C, stream, name, 1, &a), REEL_OK);
}

static const reel_hazard *only(void)
{
    size_t n;
    const reel_hazard *h = reel_checker_hazards(C, &n);
    cr_assert_eq(n, 1, "expected one hazard, got %zu", n);
    return h;
}

static void none(void)
{
    size_t n;
    const reel_hazard *h = reel_checker_hazards(C, &n);
    char line[512];
    cr_assert_eq(n, 0, "unexpected: %s", reel_hazard_format(h, line, sizeof line));
}

TestSuite(checker, .init = setup, .fini = teardown);

Test(checker, orders_accesses_on_one_stream)
{
    op(0, "a", 0, 64, true);
    op(0, "b", 0, 64, true);
    op(0, "c", 32, 64, false);
    none();
}

Test(checker, reports_writes_on_two_streams_without_an_event)
{
    op(0, "a", 0, 64, true);
    op(1, "b", 32, 64, true);
    const reel_hazard *h = only();
    cr_assert_eq(h->kind, REEL_HAZARD_WAW);
    cr_assert_str_eq(h->first.op, "a");
    cr_assert_str_eq(h->second.op, "b");
    cr_assert_eq(h->first.stream, 0);
    cr_assert_eq(h->second.stream, 1);
    cr_assert_eq(h->lo, 32);
    cr_assert_eq(h->hi, 64);
}

Test(checker, orders_streams_through_an_event_record_and_wait)
{
    op(0, "a", 0, 64, true);
    cr_assert_eq(reel_checker_event_record(C, 7, 0), REEL_OK);
    cr_assert_eq(reel_checker_event_wait(C, 1, 7), REEL_OK);
    op(1, "b", 0, 64, false);
    op(1, "c", 0, 64, true);
    none();
}

Test(checker, does_not_order_work_issued_after_the_record)
{
    cr_assert_eq(reel_checker_event_record(C, 7, 0), REEL_OK);
    op(0, "late", 0, 64, true);
    cr_assert_eq(reel_checker_event_wait(C, 1, 7), REEL_OK);
    op(1, "b", 0, 64, false);
    const reel_hazard *h = only();
    cr_assert_eq(h->kind, REEL_HAZARD_RAW);
    cr_assert_str_eq(h->first.op, "late");
}

Test(checker, treats_a_wait_on_an_unrecorded_event_as_ordering_nothing)
{
    op(0, "a", 0, 64, true);
    cr_assert_eq(reel_checker_event_wait(C, 1, 99), REEL_OK);
    op(1, "b", 0, 64, false);
    cr_assert_eq(only()->kind, REEL_HAZARD_RAW);
}

Test(checker, reports_a_read_by_an_unordered_stream_before_a_write)
{
    op(0, "w0", 0, 64, true);
    cr_assert_eq(reel_checker_event_record(C, 1, 0), REEL_OK);
    cr_assert_eq(reel_checker_event_wait(C, 1, 1), REEL_OK);
    op(1, "reader", 0, 64, false);
    op(0, "w1", 0, 64, true);
    const reel_hazard *h = only();
    cr_assert_eq(h->kind, REEL_HAZARD_WAR);
    cr_assert_str_eq(h->first.op, "reader");
    cr_assert_str_eq(h->second.op, "w1");
}

Test(checker, reports_a_host_read_before_synchronization)
{
    op(0, "kernel", 0, 64, true);
    op(REEL_CHECK_HOST, "host read", 0, 64, false);
    const reel_hazard *h = only();
    cr_assert_eq(h->kind, REEL_HAZARD_RAW);
    cr_assert_eq(h->second.stream, REEL_CHECK_HOST);
}

Test(checker, orders_a_host_read_after_a_stream_sync)
{
    op(0, "kernel", 0, 64, true);
    cr_assert_eq(reel_checker_host_sync(C, 0), REEL_OK);
    op(REEL_CHECK_HOST, "host read", 0, 64, false);
    op(1, "next step", 0, 64, true);    /* issued after the host read */
    none();
}

Test(checker, orders_a_host_read_after_an_event_sync)
{
    op(0, "kernel", 0, 64, true);
    cr_assert_eq(reel_checker_event_record(C, 5, 0), REEL_OK);
    cr_assert_eq(reel_checker_event_sync(C, 5), REEL_OK);
    op(REEL_CHECK_HOST, "host read", 0, 64, false);
    none();
}

Test(checker, orders_everything_after_a_device_sync)
{
    op(0, "a", 0, 64, true);
    op(1, "b", 64, 64, true);
    op(2, "c", 128, 64, true);
    cr_assert_eq(reel_checker_host_sync(C, REEL_CHECK_ALL_STREAMS), REEL_OK);
    op(3, "d", 0, 192, true);
    none();
}

Test(checker, keeps_address_spaces_apart)
{
    reel_check_access a = { REEL_CHECK_ACCESS_HEAD, .space = 1, .addr = 0, .bytes = 64, .write = true };
    reel_check_access b = { REEL_CHECK_ACCESS_HEAD, .space = 2, .addr = 0, .bytes = 64, .write = true };
    cr_assert_eq(reel_checker_op(C, 0, "a", 1, &a), REEL_OK);
    cr_assert_eq(reel_checker_op(C, 1, "b", 1, &b), REEL_OK);
    none();
}

Test(checker, names_the_allocations_of_both_sides_after_reuse)
{
    uint64_t a, b;
    cr_assert_eq(reel_checker_alloc(C, 0, 0, 0x1000, 256, "scratch #1", &a), REEL_OK);
    cr_assert_eq(reel_checker_use(C, 0, "gemm", a, 0, 256, true), REEL_OK);
    cr_assert_eq(reel_checker_free(C, 0, a), REEL_OK);
    cr_assert_eq(reel_checker_alloc(C, 1, 0, 0x1000, 256, "scratch #2", &b), REEL_OK);
    cr_assert_eq(reel_checker_use(C, 1, "norm", b, 0, 128, true), REEL_OK);
    const reel_hazard *h = only();
    cr_assert_eq(h->kind, REEL_HAZARD_WAW);
    cr_assert_str_eq(h->first.alloc, "scratch #1");
    cr_assert_str_eq(h->second.alloc, "scratch #2");
    cr_assert_eq(h->lo, 0x1000);
    cr_assert_eq(h->hi, 0x1080);
    char line[512];
    reel_hazard_format(h, line, sizeof line);
    cr_assert(strstr(line, "gemm") && strstr(line, "norm") && strstr(line, "scratch #2") && strstr(line, "WAW"), "%s", line);
}

Test(checker, reports_use_after_free_and_double_free)
{
    uint64_t a;
    cr_assert_eq(reel_checker_alloc(C, 0, 0, 0, 64, "x", &a), REEL_OK);
    cr_assert_eq(reel_checker_free(C, 0, a), REEL_OK);
    cr_assert_eq(reel_checker_use(C, 0, "late", a, 0, 64, false), REEL_OK);
    size_t n;
    const reel_hazard *h = reel_checker_hazards(C, &n);
    cr_assert_eq(n, 1);
    cr_assert_eq(h[0].kind, REEL_HAZARD_USE_AFTER_FREE);
    cr_assert_str_eq(h[0].first.op, "free");
    cr_assert_str_eq(h[0].second.op, "late");
}

Test(checker, reports_and_refuses_a_double_free_as_its_own_kind)
{
    reel_ctx *ctx;
    cr_assert_eq(reel_ctx_create(NULL, &ctx), REEL_OK);
    reel_checker *c;
    cr_assert_eq(reel_checker_create(ctx, &c), REEL_OK);
    uint64_t a;
    cr_assert_eq(reel_checker_alloc(c, 0, 0, 0, 64, "x", &a), REEL_OK);
    cr_assert_eq(reel_checker_free(c, 0, a), REEL_OK);
    cr_assert_eq(reel_checker_free(c, 1, a), REEL_E_HAZARD);
    cr_assert(strstr(reel_ctx_last_error(ctx), "'x' was freed already"), "%s", reel_ctx_last_error(ctx));
    size_t n;
    const reel_hazard *h = reel_checker_hazards(c, &n);
    cr_assert_eq(n, 1);
    cr_assert_eq(h[0].kind, REEL_HAZARD_DOUBLE_FREE);
    cr_assert_str_eq(reel_hazard_kind_name(h[0].kind), "double free");
    cr_assert_str_eq(h[0].first.op, "free");
    cr_assert_str_eq(h[0].second.op, "free");
    cr_assert_eq(h[0].second.stream, 1);
    char line[512];
    cr_assert(strstr(reel_hazard_format(&h[0], line, sizeof line), "double free"), "%s", line);
    reel_checker_destroy(c);
    reel_ctx_destroy(ctx);
}

Test(checker, refuses_all_streams_as_the_stream_of_an_op)
{
    reel_ctx *ctx;
    cr_assert_eq(reel_ctx_create(NULL, &ctx), REEL_OK);
    reel_checker *c;
    cr_assert_eq(reel_checker_create(ctx, &c), REEL_OK);
    reel_check_access a = { REEL_CHECK_ACCESS_HEAD, .addr = 0, .bytes = 64, .write = true };
    cr_assert_eq(reel_checker_op(c, REEL_CHECK_ALL_STREAMS, "k", 1, &a), REEL_E_INVALID_ARG);
    cr_assert(strstr(reel_ctx_last_error(ctx), "REEL_CHECK_ALL_STREAMS"), "%s", reel_ctx_last_error(ctx));
    uint64_t id;
    cr_assert_eq(reel_checker_alloc(c, REEL_CHECK_ALL_STREAMS, 0, 0, 64, "x", &id), REEL_E_INVALID_ARG);
    cr_assert_eq(reel_checker_event_record(c, 1, REEL_CHECK_ALL_STREAMS), REEL_E_INVALID_ARG);
    cr_assert_eq(reel_checker_event_wait(c, REEL_CHECK_ALL_STREAMS, 1), REEL_E_INVALID_ARG);
    cr_assert_eq(reel_checker_host_sync(c, REEL_CHECK_ALL_STREAMS), REEL_OK);
    size_t n;
    reel_checker_hazards(c, &n);
    cr_assert_eq(n, 0);
    reel_checker_destroy(c);
    reel_ctx_destroy(ctx);
}

/* After a reported race both racers stay: a third access ordered after the
 * second but not after the first is reported against the first. */
Test(checker, keeps_reporting_the_first_writer_after_a_waw_race)
{
    op(0, "a", 0, 64, true);
    op(1, "b", 0, 64, true);        /* WAW a, b */
    op(1, "c", 0, 64, true);        /* after b on stream 1, not after a */
    size_t n;
    const reel_hazard *h = reel_checker_hazards(C, &n);
    cr_assert_eq(n, 2, "%zu hazards", n);
    cr_assert_eq(h[1].kind, REEL_HAZARD_WAW);
    cr_assert_str_eq(h[1].first.op, "a");
    cr_assert_str_eq(h[1].second.op, "c");
}

Test(checker, keeps_reporting_the_first_writer_after_a_race_to_a_reader)
{
    op(0, "a", 0, 64, true);
    op(1, "b", 0, 64, true);        /* WAW a, b */
    op(1, "c", 0, 64, false);       /* reads after b, not after a */
    size_t n;
    const reel_hazard *h = reel_checker_hazards(C, &n);
    cr_assert_eq(n, 2, "%zu hazards", n);
    cr_assert_eq(h[1].kind, REEL_HAZARD_RAW);
    cr_assert_str_eq(h[1].first.op, "a");
    cr_assert_str_eq(h[1].second.op, "c");
}

Test(checker, keeps_reporting_the_reader_after_a_war_race)
{
    op(0, "a", 0, 64, false);
    op(1, "b", 0, 64, true);        /* WAR a, b */
    op(1, "c", 0, 64, true);        /* after b, not after the read a */
    size_t n;
    const reel_hazard *h = reel_checker_hazards(C, &n);
    cr_assert_eq(n, 2, "%zu hazards", n);
    cr_assert_eq(h[1].kind, REEL_HAZARD_WAR);
    cr_assert_str_eq(h[1].first.op, "a");
    cr_assert_str_eq(h[1].second.op, "c");
}

Test(checker, drops_a_racer_once_the_next_access_is_ordered_after_both)
{
    op(0, "a", 0, 64, true);
    op(1, "b", 0, 64, true);        /* WAW a, b */
    cr_assert_eq(reel_checker_event_record(C, 3, 0), REEL_OK);
    cr_assert_eq(reel_checker_event_wait(C, 1, 3), REEL_OK);
    op(1, "c", 0, 64, true);        /* after both */
    op(2, "d", 0, 64, false);       /* unordered with c only */
    size_t n;
    const reel_hazard *h = reel_checker_hazards(C, &n);
    cr_assert_eq(n, 2, "%zu hazards", n);
    cr_assert_str_eq(h[1].first.op, "c");
    cr_assert_str_eq(h[1].second.op, "d");
}

Test(checker, reports_each_piece_of_one_pair_without_the_bytes_between)
{
    reel_check_access w[2] = { { REEL_CHECK_ACCESS_HEAD, .addr = 0, .bytes = 64, .write = true, .alloc = "t" },
                               { REEL_CHECK_ACCESS_HEAD, .addr = 128, .bytes = 64, .write = true, .alloc = "t" } };
    cr_assert_eq(reel_checker_op(C, 0, "a", 2, w), REEL_OK);
    reel_check_access all = { REEL_CHECK_ACCESS_HEAD, .addr = 0, .bytes = 192, .write = true, .alloc = "t" };
    cr_assert_eq(reel_checker_op(C, 1, "b", 1, &all), REEL_OK);
    size_t n;
    const reel_hazard *h = reel_checker_hazards(C, &n);
    cr_assert_eq(n, 2, "%zu hazards", n);
    cr_assert_eq(h[0].lo, 0);
    cr_assert_eq(h[0].hi, 64);
    cr_assert_eq(h[1].lo, 128);
    cr_assert_eq(h[1].hi, 192);
    cr_assert_eq(reel_checker_count(C), 2);
}

Test(checker, reports_an_allocation_over_live_bytes)
{
    uint64_t a, b;
    cr_assert_eq(reel_checker_alloc(C, 0, 0, 0, 128, "first", &a), REEL_OK);
    cr_assert_eq(reel_checker_alloc(C, 1, 0, 64, 128, "second", &b), REEL_OK);
    const reel_hazard *h = only();
    cr_assert_eq(h->kind, REEL_HAZARD_ALIAS);
    cr_assert_eq(h->lo, 64);
    cr_assert_eq(h->hi, 128);
    cr_assert_str_eq(h->first.alloc, "first");
}

Test(checker, looks_up_the_allocation_of_an_undescribed_access)
{
    uint64_t a;
    cr_assert_eq(reel_checker_alloc(C, 0, 0, 4096, 64, "ws block 3", &a), REEL_OK);
    reel_check_access x = { REEL_CHECK_ACCESS_HEAD, .addr = 4100, .bytes = 4, .write = true };
    cr_assert_eq(reel_checker_op(C, 0, "k0", 1, &x), REEL_OK);
    cr_assert_eq(reel_checker_op(C, 1, "k1", 1, &x), REEL_OK);
    cr_assert_str_eq(only()->second.alloc, "ws block 3");
}

Test(checker, returns_the_hazards_of_each_step)
{
    reel_checker_begin(C, 1);
    op(0, "a", 0, 64, true);
    const reel_hazard *h;
    size_t n;
    cr_assert_eq(reel_checker_end(C, &h, &n), 0);
    reel_checker_begin(C, 2);
    op(1, "b", 0, 64, true);    /* unordered with step 1's write */
    cr_assert_eq(reel_checker_end(C, &h, &n), 1);
    cr_assert_eq(h[0].first.step, 1);
    cr_assert_eq(h[0].second.step, 2);
}

Test(checker, reports_one_hazard_per_pair_of_ops)
{
    reel_check_access w[3] = { { REEL_CHECK_ACCESS_HEAD, .addr = 0, .bytes = 64, .write = true, .alloc = "t" },
                               { REEL_CHECK_ACCESS_HEAD, .addr = 128, .bytes = 64, .write = true, .alloc = "t" },
                               { REEL_CHECK_ACCESS_HEAD, .addr = 64, .bytes = 64, .write = true, .alloc = "t" } };
    cr_assert_eq(reel_checker_op(C, 0, "a", 3, w), REEL_OK);
    cr_assert_eq(reel_checker_op(C, 1, "b", 3, w), REEL_OK);
    const reel_hazard *h = only();
    cr_assert_eq(h->lo, 0);
    cr_assert_eq(h->hi, 192);
    cr_assert_eq(reel_checker_count(C), 1);
}

Test(checker, merges_shadow_ranges_with_the_same_history)
{
    for (int i = 0; i < 1000; i++)
        op(0, "tile", (uint64_t)i * 64, 64, true);
    op(0, "all", 0, 64000, true);
    cr_assert_eq(C->nsp, 1);
    cr_assert_eq(C->sp[0].n, 1, "ranges: %zu", C->sp[0].n);
}

Test(checker, refuses_more_streams_than_it_tracks)
{
    for (int s = 0; s < REEL_CHECK_MAX_STREAMS; s++)
        op((uint64_t)s, "k", (uint64_t)s * 64, 64, true);
    reel_check_access a = { REEL_CHECK_ACCESS_HEAD, .addr = 1 << 20, .bytes = 4, .write = true };
    cr_assert_eq(reel_checker_op(C, 1000, "k", 1, &a), REEL_E_LIMIT);
}
