/* bench_checker: the hazard checker's time and memory per access on three
 * serving-shaped programs (host only, no kernels):
 *
 *   pool  - a caching pool over 8 streams: blocks of 512 B .. 64 KiB handed
 *           out from a 64 MiB range, reused across streams behind a fence
 *           (record on the freeing stream, wait on the new one), a write and
 *           two reads per hand-out, a host sync of every stream each 1000
 *           accesses (a serving step);
 *   kv    - decode over a paged KV cache: each step, every layer appends one
 *           slot (a write) and its attention reads every slot so far; the
 *           step ends with the host syncing every stream (the token download);
 *   plan  - a 3-op plan on two streams stepped as runtime/check.c feeds it:
 *           upload, three ops joined by events, download, host sync.
 *
 * It prints us/access over the window since the previous checkpoint (CPU time
 * of the thread), and the process's resident growth since the pattern began
 * per access (RSS, so it measures any version of the checker the same way).
 *
 * pool-nosync and kv-nosync (not in "all") are the same programs with the host
 * never synchronizing: nothing can be dropped, so they show what a run that
 * never syncs costs.
 *
 *     bench_checker [pool|kv|plan|all|pool-nosync|kv-nosync] [scale]   scale 1: the full sizes
 *     (10^7 pool accesses, 32 layers x 8192 tokens, 10^6 plan steps);
 *     a smaller scale divides them. A pattern stops at a checkpoint once it has
 *     run 120 s (REEL_BENCH_BUDGET_S to change). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "reel/memory.h"

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* CPU time of this thread: the machine may be shared, and waiting for a core
 * is not the checker's cost. */
static double cpu_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static long rss_bytes(void)
{
    long pages = 0, res = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f)
        return 0;
    if (fscanf(f, "%ld %ld", &pages, &res) != 2)
        res = 0;
    fclose(f);
    return res * sysconf(_SC_PAGESIZE);
}

static double budget_s(void)
{
    const char *e = getenv("REEL_BENCH_BUDGET_S");
    return e ? atof(e) : 120.0;
}

/* The window since the previous checkpoint. */
typedef struct meter {
    const char *name;
    double cpu_last, start;
    uint64_t nlast;
    long rss0;
} meter;

static void meter_start(meter *m, const char *name)
{
    m->name = name;
    m->start = now_s();
    m->cpu_last = cpu_s();
    m->nlast = 0;
    m->rss0 = rss_bytes();
}

/* Prints a checkpoint; false once the budget is spent. */
static bool meter_point(meter *m, const char *label, uint64_t n)
{
    double t = now_s(), cpu = cpu_s();
    long rss = rss_bytes() - m->rss0;
    printf("%-5s %-16s accesses %9llu  us/access %7.3f  wall %7.2f s  rss +%8.1f MiB  bytes/access %7.1f\n",
           m->name, label, (unsigned long long)n, (cpu - m->cpu_last) * 1e6 / (double)(n - m->nlast),
           t - m->start, (double)rss / 1048576.0, n ? (double)rss / (double)n : 0.0);
    fflush(stdout);
    m->cpu_last = cpu;
    m->nlast = n;
    return t - m->start < budget_s();
}

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static void must(reel_status st, const char *what)
{
    if (st != REEL_OK) {
        fprintf(stderr, "bench_checker: %s: %s\n", what, reel_status_str(st));
        exit(1);
    }
}

/* ---- pool ------------------------------------------------------------------ */

#define POOL_STREAMS 8
#define POOL_CLASSES 8          /* 512 B << c */
#define POOL_PER_CLASS 128      /* blocks per class */

typedef struct pblock {
    uint64_t addr, size, id;
    int stream;                 /* last owner */
    uint64_t fence;             /* event recorded at free, 0 none */
    bool busy;
} pblock;

static void bench_pool(uint64_t total, bool sync)
{
    reel_checker *c;
    must(reel_checker_create(NULL, &c), "create");
    static pblock blk[POOL_CLASSES][POOL_PER_CLASS];
    uint64_t addr = 0;
    /* classes interleaved so that small blocks land below large ones */
    for (int i = 0; i < POOL_PER_CLASS; i++)
        for (int k = 0; k < POOL_CLASSES; k++) {
            blk[k][i] = (pblock){ .addr = addr, .size = 512ull << k, .stream = -1 };
            addr += 512ull << k;
        }
    uint64_t seed = 0x9e3779b97f4a7c15ull, n = 0, next_sync = 1000;
    const uint64_t points[6] = { total / 100, total / 10, total * 3 / 10, total * 6 / 10, total, UINT64_MAX };
    int np = 0;
    /* live hand-outs: a ring per stream, freed after a few more hand-outs */
    pblock *live[POOL_STREAMS][4] = { { 0 } };
    int head[POOL_STREAMS] = { 0 };
    char name[64];
    meter m;
    meter_start(&m, "pool");
    while (n < total) {
        int s = (int)(rng_next(&seed) % POOL_STREAMS);
        int k = (int)(rng_next(&seed) % POOL_CLASSES);
        pblock *old = live[s][head[s]];
        if (old) {      /* free the oldest hand-out of the stream: fence it */
            must(reel_checker_free(c, (uint64_t)s, old->id), "free");
            old->fence = (uint64_t)(old - &blk[0][0]) + 1;   /* the block's event, re-recorded */
            must(reel_checker_event_record(c, old->fence, (uint64_t)s), "record");
            old->busy = false;
            live[s][head[s]] = NULL;
        }
        pblock *b = NULL;
        for (int tries = 0; tries < POOL_PER_CLASS && !b; tries++) {
            pblock *x = &blk[k][rng_next(&seed) % POOL_PER_CLASS];
            if (!x->busy)
                b = x;
        }
        if (!b)
            continue;
        if (b->stream >= 0 && b->stream != s && b->fence)
            must(reel_checker_event_wait(c, (uint64_t)s, b->fence), "wait");
        snprintf(name, sizeof name, "class %d block", k);
        must(reel_checker_alloc(c, (uint64_t)s, 0, b->addr, b->size, name, &b->id), "alloc");
        b->busy = true;
        b->stream = s;
        live[s][head[s]] = b;
        head[s] = (head[s] + 1) % 4;
        must(reel_checker_use(c, (uint64_t)s, "fill", b->id, 0, b->size, true), "use");
        must(reel_checker_use(c, (uint64_t)s, "gemm", b->id, 0, b->size, false), "use");
        must(reel_checker_use(c, (uint64_t)s, "norm", b->id, b->size / 2, b->size / 2, false), "use");
        n += 3;
        if (sync && n >= next_sync) {
            must(reel_checker_host_sync(c, REEL_CHECK_ALL_STREAMS), "sync");
            next_sync += 1000;
        }
        if (n >= points[np] || n >= total) {
            char label[32];
            snprintf(label, sizeof label, "%.0e accesses", (double)points[np]);
            if (!meter_point(&m, label, n) || n >= total)
                break;
            while (np < 5 && points[np] <= n)
                np++;
        }
    }
    if (reel_checker_count(c))
        printf("pool: %zu hazards (expected none)\n", reel_checker_count(c));
    reel_checker_destroy(c);
}

/* ---- kv -------------------------------------------------------------------- */

static void bench_kv(int layers, int tokens, bool sync)
{
    reel_checker *c;
    must(reel_checker_create(NULL, &c), "create");
    const uint64_t slot = 256, layer_bytes = slot * (uint64_t)tokens;
    uint64_t n = 0;
    meter m;
    meter_start(&m, "kv");
    int next_point = tokens / 8 > 0 ? tokens / 8 : 1;
    for (int t = 0; t < tokens; t++) {
        reel_checker_begin(c, t);
        reel_check_access up = { REEL_CHECK_ACCESS_HEAD, .space = 1, .addr = 0, .bytes = 64, .write = true, .alloc = "tokens" };
        must(reel_checker_op(c, sync ? REEL_CHECK_HOST : 0, "upload", 1, &up), "upload");
        for (int l = 0; l < layers; l++) {
            uint64_t base = (uint64_t)l * layer_bytes;
            reel_check_access w = { REEL_CHECK_ACCESS_HEAD, .space = 2, .addr = base + (uint64_t)t * slot, .bytes = slot, .write = true,
                                    .alloc = "kv cache" };
            must(reel_checker_op(c, 0, "kv append", 1, &w), "append");
            reel_check_access r[2] = { { REEL_CHECK_ACCESS_HEAD, .space = 1, .addr = 0, .bytes = 64, .alloc = "tokens" },
                                       { REEL_CHECK_ACCESS_HEAD, .space = 2, .addr = base, .bytes = (uint64_t)(t + 1) * slot,
                                         .alloc = "kv cache" } };
            must(reel_checker_op(c, 0, "attention", 2, r), "attention");
        }
        reel_check_access down = { REEL_CHECK_ACCESS_HEAD, .space = 1, .addr = 64, .bytes = 64, .write = true, .alloc = "logits" };
        must(reel_checker_op(c, 0, "sample", 1, &down), "sample");
        if (sync) {
            must(reel_checker_host_sync(c, REEL_CHECK_ALL_STREAMS), "sync");
            down.write = false;
            must(reel_checker_op(c, REEL_CHECK_HOST, "download", 1, &down), "download");
        }
        reel_checker_end(c, NULL, NULL);
        n += (sync ? 4 : 3) + 3 * (uint64_t)layers;
        if (t + 1 == next_point || t + 1 == tokens) {
            char label[32];
            snprintf(label, sizeof label, "token %d", t + 1);
            if (!meter_point(&m, label, n))
                break;
            next_point *= 2;
        }
    }
    if (reel_checker_count(c))
        printf("kv: %zu hazards (expected none)\n", reel_checker_count(c));
    reel_checker_destroy(c);
}

/* ---- plan ------------------------------------------------------------------ */

static void bench_plan(uint64_t steps)
{
    reel_checker *c;
    must(reel_checker_create(NULL, &c), "create");
    uint64_t n = 0, next_point = 1000;
    meter m;
    meter_start(&m, "plan");
    for (uint64_t st = 0; st < steps; st++) {
        reel_checker_begin(c, (int64_t)st);
        reel_check_access up = { REEL_CHECK_ACCESS_HEAD, 0, 0x1000, 256, true, "static region (inputs, metadata)" };
        must(reel_checker_op(c, 0, "upload", 1, &up), "upload");
        reel_check_access a[2] = { { REEL_CHECK_ACCESS_HEAD, 0, 0x1000, 64, false, "input 'tokens' (static)" },
                                   { REEL_CHECK_ACCESS_HEAD, 0, 0x10000, 4096, true, "plan 'x' arena+0 (8 rows)" } };
        must(reel_checker_op(c, 0, "embedding#0", 2, a), "op");
        must(reel_checker_event_record(c, 1, 0), "record");
        must(reel_checker_event_wait(c, 1, 1), "wait");
        reel_check_access b[2] = { { REEL_CHECK_ACCESS_HEAD, 0, 0x10000, 4096, false, "plan 'x' arena+0 (8 rows)" },
                                   { REEL_CHECK_ACCESS_HEAD, 0, 0x11000, 4096, true, "plan 'k' arena+4096 (8 rows)" } };
        must(reel_checker_op(c, 1, "matmul#1", 2, b), "op");
        must(reel_checker_event_record(c, 2, 1), "record");
        must(reel_checker_event_wait(c, 0, 2), "wait");
        reel_check_access d[3] = { { REEL_CHECK_ACCESS_HEAD, 0, 0x10000, 4096, false, "plan 'x' arena+0 (8 rows)" },
                                   { REEL_CHECK_ACCESS_HEAD, 0, 0x11000, 4096, false, "plan 'k' arena+4096 (8 rows)" },
                                   { REEL_CHECK_ACCESS_HEAD, 0, 0x10000, 64, true, "plan 'out' arena+0 (8 rows)" } };
        must(reel_checker_op(c, 0, "add#2", 3, d), "op");
        reel_check_access dn = { REEL_CHECK_ACCESS_HEAD, 0, 0x10000, 64, false, "plan 'out' arena+0 (8 rows)" };
        must(reel_checker_op(c, 0, "download", 1, &dn), "download");
        must(reel_checker_host_sync(c, REEL_CHECK_ALL_STREAMS), "sync");
        reel_checker_end(c, NULL, NULL);
        n += 9;
        if (st + 1 == next_point || st + 1 == steps) {
            char label[32];
            snprintf(label, sizeof label, "step %llu", (unsigned long long)(st + 1));
            if (!meter_point(&m, label, n))
                break;
            next_point *= 10;
        }
    }
    if (reel_checker_count(c))
        printf("plan: %zu hazards (expected none)\n", reel_checker_count(c));
    reel_checker_destroy(c);
}

int main(int argc, char **argv)
{
    const char *which = argc > 1 ? argv[1] : "all";
    double scale = argc > 2 ? atof(argv[2]) : 1.0;
    if (scale < 1.0)
        scale = 1.0;
    bool all = strcmp(which, "all") == 0;
    if (all || strcmp(which, "pool") == 0)
        bench_pool((uint64_t)(1e7 / scale), true);
    if (strcmp(which, "pool-nosync") == 0)
        bench_pool((uint64_t)(1e7 / scale), false);
    if (all || strcmp(which, "kv") == 0)
        bench_kv(32, (int)(8192 / scale), true);
    if (strcmp(which, "kv-nosync") == 0)
        bench_kv(32, (int)(8192 / scale), false);
    if (all || strcmp(which, "plan") == 0)
        bench_plan((uint64_t)(1e6 / scale));
    return 0;
}
