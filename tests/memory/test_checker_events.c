/* The hazard checker on a decode whose streams are ordered only by events
 * (issue 49): its memory stays bounded with and without a host sync per step,
 * and a read of a layer's KV slots meets a range or two of the cover, not one
 * per slot (what made it quadratic); what no host sync has passed is still
 * checked late in a long run - a race seeded after many collections is
 * reported, and so is a host read of a KV slot written long before. The bench
 * with timings is bench/checker.c (kv-events, kv-events-nosync); no timing is
 * asserted here. */
#include <criterion/criterion.h>
#include <string.h>

#include "memory/checker_internal.h"
#include "reel/memory.h"

#define LAYERS 8
#define SEQ 128             /* tokens a sequence; the next one writes over its slots */
#define SLOT 256ull
#define ACT 4096ull         /* bytes of x, h, q, o */

typedef struct decode {
    reel_checker *c;
    bool sync;              /* the host syncs every stream and reads the token each step */
    uint64_t n;             /* accesses so far */
    int64_t skip_step;      /* the step and layer whose attention does not wait for */
    int skip_layer;         /* the KV write (the seeded race), -1: none */
} decode;

static void op(decode *d, uint64_t stream, const char *name, int n, const reel_check_access *a)
{
    cr_assert_eq(reel_checker_op(d->c, stream, name, n, a), REEL_OK, "%s", name);
    d->n += (uint64_t)n;
}

static reel_check_access acc(uint32_t space, uint64_t addr, uint64_t bytes, bool write, const char *alloc)
{
    return (reel_check_access){ REEL_CHECK_ACCESS_HEAD, .space = space, .addr = addr, .bytes = bytes, .write = write,
                                .alloc = alloc };
}

static uint64_t kv_slot(int layer, uint64_t pos) { return (uint64_t)layer * SEQ * SLOT + pos * SLOT; }

/* One step as bench/checker.c's kv-events feeds it: per layer, norm on
 * stream 0, the KV write on stream 1 after an event of stream 0, attention
 * on stream 0 after an event of stream 1 (reading every slot so far), the
 * MLP on stream 2 after an event of stream 0, and stream 0 waiting for it. */
static void step(decode *d, int64_t st)
{
    reel_checker *c = d->c;
    const uint64_t x = 0, h = ACT, q = 2 * ACT, o = 3 * ACT, tok = 4 * ACT, logits = tok + 64;
    uint64_t pos = (uint64_t)st % SEQ;
    reel_checker_begin(c, st);
    reel_check_access a[3] = { acc(0, tok, 64, true, "tokens") };
    op(d, d->sync ? REEL_CHECK_HOST : 0, "upload", 1, a);
    a[0] = acc(0, tok, 64, false, "tokens");
    a[1] = acc(0, x, ACT, true, "x");
    op(d, 0, "embedding", 2, a);
    for (int l = 0; l < LAYERS; l++) {
        uint64_t ev = 100 + 4 * (uint64_t)l;
        a[0] = acc(0, x, ACT, false, "x");
        a[1] = acc(0, h, ACT, true, "h");
        op(d, 0, "norm", 2, a);
        cr_assert_eq(reel_checker_event_record(c, ev, 0), REEL_OK);
        cr_assert_eq(reel_checker_event_wait(c, 1, ev), REEL_OK);
        a[0] = acc(0, h, ACT, false, "h");
        a[1] = acc(1, kv_slot(l, pos), SLOT, true, "kv");
        op(d, 1, "kv write", 2, a);
        cr_assert_eq(reel_checker_event_record(c, ev + 1, 1), REEL_OK);
        a[0] = acc(0, h, ACT, false, "h");
        a[1] = acc(0, q, ACT, true, "q");
        op(d, 0, "q proj", 2, a);
        if (st != d->skip_step || l != d->skip_layer)
            cr_assert_eq(reel_checker_event_wait(c, 0, ev + 1), REEL_OK);
        a[0] = acc(0, q, ACT, false, "q");
        a[1] = acc(1, kv_slot(l, 0), (pos + 1) * SLOT, false, "kv");
        a[2] = acc(0, o, ACT, true, "o");
        op(d, 0, "attention", 3, a);
        cr_assert_eq(reel_checker_event_record(c, ev + 2, 0), REEL_OK);
        cr_assert_eq(reel_checker_event_wait(c, 2, ev + 2), REEL_OK);
        a[0] = acc(0, o, ACT, false, "o");
        a[1] = acc(0, x, ACT, true, "x");
        op(d, 2, "mlp", 2, a);
        cr_assert_eq(reel_checker_event_record(c, ev + 3, 2), REEL_OK);
        cr_assert_eq(reel_checker_event_wait(c, 0, ev + 3), REEL_OK);
    }
    a[0] = acc(0, x, ACT, false, "x");
    a[1] = acc(0, logits, 64, true, "logits");
    op(d, 0, "sample", 2, a);
    if (d->sync) {
        cr_assert_eq(reel_checker_host_sync(c, REEL_CHECK_ALL_STREAMS), REEL_OK);
        a[0] = acc(0, logits, 64, false, "logits");
        op(d, REEL_CHECK_HOST, "download", 1, a);
    }
    reel_checker_end(c, NULL, NULL);
}

static size_t entries(const reel_checker *c)
{
    size_t n = 0;
    for (size_t i = 0; i < c->nsp; i++)
        n += c->sp[i].n;
    return n;
}

/* Runs 2e5 accesses; memory after them within 2x of memory after 2e4. */
static void memory_stays_bounded(bool sync)
{
    decode d = { .sync = sync, .skip_step = -1, .skip_layer = -1 };
    cr_assert_eq(reel_checker_create(NULL, &d.c), REEL_OK);
    size_t at20k = 0;
    int64_t st = 0;
    while (d.n < 200000) {
        step(&d, st++);
        if (!at20k && d.n >= 20000)
            at20k = reel_checker_memory(d.c);
    }
    size_t at200k = reel_checker_memory(d.c);
    cr_assert_eq(reel_checker_count(d.c), 0, "%zu hazards", reel_checker_count(d.c));
    cr_assert_leq(at200k, 2 * at20k, "memory after 2e4 accesses %zu bytes, after 2e5 %zu", at20k, at200k);
    /* without syncs every KV slot keeps its last writer (no host sync passed
     * it), and little more: one entry a slot, a few a buffer and stream */
    cr_assert_leq(entries(d.c), (size_t)LAYERS * SEQ + 64, "entries kept: %zu", entries(d.c));
    /* but a read of a layer's slots looks at a range or two, not at one per
     * slot: the KV cache's cover is a few ranges a layer (space 1) */
    cr_assert_eq(d.c->sp[1].id, 1);
    cr_assert_leq(d.c->sp[1].ncover, 3u * LAYERS, "KV cover ranges: %zu", d.c->sp[1].ncover);
    reel_checker_destroy(d.c);
}

TestSuite(checker_events);

Test(checker_events, keeps_memory_bounded_on_an_event_ordered_decode_without_host_syncs)
{
    memory_stays_bounded(false);
}

Test(checker_events, keeps_memory_bounded_on_an_event_ordered_decode_with_a_host_sync_per_step)
{
    memory_stays_bounded(true);
}

Test(checker_events, reports_a_missing_wait_seeded_late_in_a_long_event_ordered_run)
{
    decode d = { .skip_step = 2000, .skip_layer = 5 };
    cr_assert_eq(reel_checker_create(NULL, &d.c), REEL_OK);
    for (int64_t st = 0; st < 2000; st++)
        step(&d, st);
    cr_assert_eq(reel_checker_count(d.c), 0);
    cr_assert_gt(d.n, 180000u);     /* several collections behind it */
    step(&d, 2000);                 /* layer 5's attention runs without waiting for its KV write */
    size_t n;
    const reel_hazard *h = reel_checker_hazards(d.c, &n);
    cr_assert_eq(n, 2, "%zu hazards", n);
    uint64_t pos = 2000 % SEQ;
    cr_assert_eq(h[0].kind, REEL_HAZARD_RAW);
    cr_assert_str_eq(h[0].first.op, "kv write");
    cr_assert_eq(h[0].first.stream, 1);
    cr_assert_eq(h[0].first.step, 2000);
    cr_assert_str_eq(h[0].second.op, "attention");
    cr_assert_eq(h[0].second.stream, 0);
    cr_assert_eq(h[0].space, 1);
    cr_assert_eq(h[0].lo, kv_slot(5, pos));
    cr_assert_eq(h[0].hi, kv_slot(5, pos) + SLOT);
    /* and stream 0 then overwrites h, which the KV write read */
    cr_assert_eq(h[1].kind, REEL_HAZARD_WAR);
    cr_assert_str_eq(h[1].first.op, "kv write");
    cr_assert_str_eq(h[1].second.op, "norm");
    cr_assert_eq(h[1].lo, ACT);
    cr_assert_eq(h[1].hi, 2 * ACT);
    /* the next step waits again: nothing more */
    d.skip_step = -1;
    step(&d, 2001);
    cr_assert_eq(reel_checker_count(d.c), 2);
    reel_checker_destroy(d.c);
}

Test(checker_events, reports_a_host_read_of_a_kv_slot_no_host_sync_passed)
{
    decode d = { .skip_step = -1, .skip_layer = -1 };
    cr_assert_eq(reel_checker_create(NULL, &d.c), REEL_OK);
    for (int64_t st = 0; st < 2000; st++)
        step(&d, st);
    cr_assert_eq(reel_checker_count(d.c), 0);
    /* slot 3 of layer 2 was last written at step 1923 (1923 % 128 == 3),
     * thousands of accesses ago; every stream has waited for it since, the
     * host never has: a host read of it races with that write, and a new
     * stream's read too */
    reel_check_access a = acc(1, kv_slot(2, 3), SLOT, false, "kv");
    cr_assert_eq(reel_checker_op(d.c, REEL_CHECK_HOST, "host read", 1, &a), REEL_OK);
    cr_assert_eq(reel_checker_op(d.c, 7, "new stream read", 1, &a), REEL_OK);
    size_t n;
    const reel_hazard *h = reel_checker_hazards(d.c, &n);
    cr_assert_eq(n, 2, "%zu hazards", n);
    for (size_t i = 0; i < 2; i++) {
        cr_assert_eq(h[i].kind, REEL_HAZARD_RAW);
        cr_assert_str_eq(h[i].first.op, "kv write");
        cr_assert_eq(h[i].first.step, 1923);
        cr_assert_eq(h[i].lo, kv_slot(2, 3));
        cr_assert_eq(h[i].hi, kv_slot(2, 3) + SLOT);
    }
    cr_assert_eq(h[0].second.stream, REEL_CHECK_HOST);
    cr_assert_eq(h[1].second.stream, 7);
    /* once the host has synced every stream, neither would be */
    cr_assert_eq(reel_checker_host_sync(d.c, REEL_CHECK_ALL_STREAMS), REEL_OK);
    cr_assert_eq(reel_checker_op(d.c, REEL_CHECK_HOST, "host read", 1, &a), REEL_OK);
    cr_assert_eq(reel_checker_count(d.c), 2);
    reel_checker_destroy(d.c);
}

/* A bump allocator's blocks: every step writes bytes no step wrote before, a
 * second stream reads them after an event, and the host syncs every 64
 * blocks. What the host passed goes, the ranges that named it too. */
Test(checker_events, keeps_memory_bounded_when_every_block_is_fresh_bytes)
{
    reel_checker *c;
    cr_assert_eq(reel_checker_create(NULL, &c), REEL_OK);
    size_t at20k = 0;
    uint64_t n = 0;
    for (uint64_t i = 0; n < 200000; i++) {
        uint64_t s = i % 3, addr = i * 4096;
        reel_check_access a = acc(0, addr, 256 + (i % 7) * 64, true, "block");
        cr_assert_eq(reel_checker_op(c, s, "fill", 1, &a), REEL_OK);
        cr_assert_eq(reel_checker_event_record(c, 1, s), REEL_OK);
        cr_assert_eq(reel_checker_event_wait(c, (s + 1) % 3, 1), REEL_OK);
        a.write = false;
        cr_assert_eq(reel_checker_op(c, (s + 1) % 3, "read", 1, &a), REEL_OK);
        n += 2;
        if (i % 64 == 63)
            cr_assert_eq(reel_checker_host_sync(c, REEL_CHECK_ALL_STREAMS), REEL_OK);
        if (!at20k && n >= 20000)
            at20k = reel_checker_memory(c);
    }
    size_t at200k = reel_checker_memory(c);
    cr_assert_eq(reel_checker_count(c), 0);
    cr_assert_leq(at200k, 2 * at20k, "memory after 2e4 accesses %zu bytes, after 2e5 %zu", at20k, at200k);
    cr_assert_lt(c->sp[0].ncover, 2u * 4096, "cover ranges: %zu", c->sp[0].ncover);
    reel_checker_destroy(c);
}
