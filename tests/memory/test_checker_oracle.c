/* The hazard checker against a brute-force oracle: random programs on four
 * streams and the host (accesses, event records, waits and syncs, host
 * syncs), with collections forced at random points. The oracle keeps every
 * access with its vector clock and compares all pairs. Every report must be
 * a real unordered conflict on those bytes; every unordered conflicting pair
 * (A, X) must be reported on each of its bytes, or covered there by a
 * reported (A', X) with A happening before A' - the claim of
 * include/reel/memory.h. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "memory/checker_internal.h"
#include "reel/memory.h"

#define OS 5            /* oracle slots: 0 the host, 1..4 streams 0..3 */
#define NOPS 160
#define SPACE 96        /* bytes */

typedef struct oacc {
    int slot;
    uint64_t clock;
    uint64_t vc[OS];
    uint64_t lo, hi;
    bool write;
} oacc;

typedef struct oracle {
    uint64_t vc[OS][OS];
    uint64_t ev[4][OS];
    bool rec[4];
    oacc acc[NOPS];
    int n;
} oracle;

static void join(uint64_t *d, const uint64_t *s)
{
    for (int t = 0; t < OS; t++)
        if (s[t] > d[t])
            d[t] = s[t];
}

static uint64_t key_of(int slot) { return slot == 0 ? REEL_CHECK_HOST : (uint64_t)(slot - 1); }

static bool before(const oacc *a, const oacc *x) { return a->clock <= x->vc[a->slot]; }

static uint64_t rnd(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

/* One random program; returns how many unordered conflicting pairs it had. */
static int run_one(uint64_t seed)
{
    static oracle O;
    memset(&O, 0, sizeof O);
    reel_checker *c;
    cr_assert_eq(reel_checker_create(NULL, &c), REEL_OK);
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
    int sync_rate = (int)(seed % 4);    /* some programs sync a lot, some never */
    while (O.n < NOPS) {
        int what = (int)(rnd(&x) % 16), s = (int)(rnd(&x) % OS), e = (int)(rnd(&x) % 4);
        if (s != 0 && what >= 7 && what <= 12)
            join(O.vc[s], O.vc[0]);     /* every issue follows the host */
        if (what < 7) {
            oacc *a = &O.acc[O.n];
            if (s != 0)
                join(O.vc[s], O.vc[0]);
            O.vc[s][s]++;
            a->slot = s;
            a->clock = O.vc[s][s];
            memcpy(a->vc, O.vc[s], sizeof a->vc);
            a->lo = rnd(&x) % SPACE;
            a->hi = a->lo + 1 + rnd(&x) % (SPACE - a->lo);
            a->write = rnd(&x) % 2;
            char name[16];
            snprintf(name, sizeof name, "op%d", O.n);
            reel_check_access ca = { REEL_CHECK_ACCESS_HEAD, .addr = a->lo, .bytes = a->hi - a->lo, .write = a->write, .alloc = "m" };
            cr_assert_eq(reel_checker_op(c, key_of(s), name, 1, &ca), REEL_OK);
            O.n++;
        } else if (what == 7 || what == 8) {
            if (s == 0)
                continue;
            memcpy(O.ev[e], O.vc[s], sizeof O.ev[e]);
            O.rec[e] = true;
            O.vc[s][s]++;
            cr_assert_eq(reel_checker_event_record(c, (uint64_t)e + 100, key_of(s)), REEL_OK);
        } else if (what >= 9 && what <= 12) {
            if (s == 0)
                continue;
            if (O.rec[e])
                join(O.vc[s], O.ev[e]);
            cr_assert_eq(reel_checker_event_wait(c, key_of(s), (uint64_t)e + 100), REEL_OK);
        } else if (what == 13) {
            if ((int)(rnd(&x) % 4) >= sync_rate)
                continue;
            if (O.rec[e])
                join(O.vc[0], O.ev[e]);
            cr_assert_eq(reel_checker_event_sync(c, (uint64_t)e + 100), REEL_OK);
        } else {
            if ((int)(rnd(&x) % 4) >= sync_rate)
                continue;
            if (rnd(&x) % 3 == 0) {
                for (int t = 1; t < OS; t++)
                    join(O.vc[0], O.vc[t]);
                cr_assert_eq(reel_checker_host_sync(c, REEL_CHECK_ALL_STREAMS), REEL_OK);
            } else if (s != 0) {
                join(O.vc[0], O.vc[s]);
                cr_assert_eq(reel_checker_host_sync(c, key_of(s)), REEL_OK);
            }
        }
        if (rnd(&x) % 16 == 0)
            cr_assert_eq(reel_chk_collect(c), REEL_OK);
    }
    size_t nh;
    const reel_hazard *h = reel_checker_hazards(c, &nh);
    cr_assert_eq(nh, reel_checker_count(c));
    /* no false report: a real unordered conflict, on bytes both touched */
    for (size_t i = 0; i < nh; i++) {
        const oacc *a = &O.acc[h[i].first.seq - 1], *b = &O.acc[h[i].second.seq - 1];
        cr_assert(h[i].first.seq < h[i].second.seq, "seed %llu", (unsigned long long)seed);
        cr_assert(a->write || b->write);
        cr_assert(!before(a, b), "seed %llu: report %zu is ordered", (unsigned long long)seed, i);
        cr_assert(h[i].lo >= a->lo && h[i].lo >= b->lo && h[i].hi <= a->hi && h[i].hi <= b->hi && h[i].lo < h[i].hi,
                  "seed %llu: report %zu over bytes one side did not touch", (unsigned long long)seed, i);
        reel_hazard_kind k = !a->write ? REEL_HAZARD_WAR : b->write ? REEL_HAZARD_WAW : REEL_HAZARD_RAW;
        cr_assert_eq(h[i].kind, k);
    }
    /* nothing lost: each byte of each unordered conflicting pair is covered */
    int pairs = 0;
    for (int j = 0; j < O.n; j++)
        for (int i = 0; i < j; i++) {
            const oacc *a = &O.acc[i], *b = &O.acc[j];
            uint64_t lo = a->lo > b->lo ? a->lo : b->lo, hi = a->hi < b->hi ? a->hi : b->hi;
            if (lo >= hi || !(a->write || b->write) || before(a, b))
                continue;
            pairs++;
            for (uint64_t byte = lo; byte < hi; byte++) {
                bool covered = false;
                for (size_t r = 0; r < nh && !covered; r++) {
                    if (h[r].second.seq != (uint64_t)j + 1 || byte < h[r].lo || byte >= h[r].hi)
                        continue;
                    const oacc *a2 = &O.acc[h[r].first.seq - 1];
                    covered = h[r].first.seq == (uint64_t)i + 1 || before(a, a2);
                }
                cr_assert(covered, "seed %llu: op%d, op%d unordered on byte %llu and not reported",
                          (unsigned long long)seed, i, j, (unsigned long long)byte);
            }
        }
    reel_checker_destroy(c);
    return pairs;
}

Test(checker_oracle, reports_exactly_the_unordered_conflicts_of_random_programs)
{
    int pairs = 0, clean = 0;
    for (uint64_t seed = 1; seed <= 300; seed++) {
        int p = run_one(seed);
        pairs += p;
        clean += p == 0;
    }
    cr_assert_gt(pairs, 1000, "programs too tame: %d pairs", pairs);
    cr_log_info("%d unordered conflicting pairs, %d programs without any", pairs, clean);
}
