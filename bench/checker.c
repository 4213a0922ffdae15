/* bench_checker: the hazard checker's time and memory per access on
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
 *           upload, three ops joined by events, download, host sync;
 *   kv-events - decode over 32 layers on three streams ordered only by events
 *           (issue 49), with a host sync a step; kv-events-nosync never syncs.
 *           These print the median us/access of windows of about 5000
 *           accesses and reel_checker_memory() at 10^5, 10^6 and 10^7 accesses.
 *
 * It prints us/access over the window since the previous checkpoint (CPU time
 * of the thread), and the process's resident growth since the pattern began
 * per access (RSS, so it measures any version of the checker the same way).
 *
 * pool-nosync and kv-nosync (not in "all") are the same programs with the host
 * never synchronizing: nothing can be dropped, so they show what a run that
 * never syncs costs.
 *
 *     bench_checker [pool|kv|plan|kv-events|kv-events-nosync|all|pool-nosync|kv-nosync] [scale]
 *     scale 1: the full sizes (10^7 pool and kv-events accesses, 32 layers x
 *     8192 tokens, 10^6 plan steps);
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

/* ---- kv-events ------------------------------------------------------------- */

/* Decode over 32 layers on three streams ordered only by events, sequences of
 * 2048 tokens one after another in one KV cache (slot = position in the
 * sequence, so a new sequence writes over the old one's slots). Per layer:
 *   stream 0: norm (reads x, writes h), record A
 *   stream 1: wait A, kv write (reads h, writes the KV slot of the token), record B
 *   stream 0: q proj (reads h, writes q), wait B, attention (reads q and
 *             every KV slot of the sequence so far, writes o), record C
 *   stream 2: wait C, mlp (reads o, writes x), record D
 *   stream 0: wait D
 * A step starts with the token upload and embedding and ends with the
 * sampler on stream 0; with sync, the host uploads, syncs every stream and
 * reads the sampled token back each step, without, stream 0 uploads and the
 * host never syncs (the serving loop of issue 49). One event per layer and
 * edge, re-recorded every step, as a plan's are. */
#define KVE_LAYERS 32
#define KVE_SEQ 2048
#define KVE_SLOT 512ull
#define KVE_WINDOW 5000         /* accesses a window, about */
#define KVE_ACT 8192ull         /* bytes of x, h, q, o */

typedef struct kve_meter {
    double cpu_last, start;
    uint64_t nlast;
    long rss0;
    double *win;                /* us/access of each window */
    uint64_t *win_end;          /* accesses at the window's end */
    size_t nwin, capwin;
} kve_meter;

static void kve_use(reel_checker *c, uint64_t stream, const char *op, int n, const reel_check_access *a)
{
    must(reel_checker_op(c, stream, op, n, a), op);
}

static reel_check_access kve_acc(uint32_t space, uint64_t addr, uint64_t bytes, bool write, const char *alloc)
{
    reel_check_access a = { REEL_CHECK_ACCESS_HEAD, .space = space, .addr = addr, .bytes = bytes, .write = write,
                            .alloc = alloc };
    return a;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The median us/access of the windows ending in (from, to]. */
static double kve_median(const kve_meter *m, uint64_t from, uint64_t to, size_t *count)
{
    double *v = malloc((m->nwin + 1) * sizeof *v);
    size_t k = 0;
    for (size_t i = 0; v && i < m->nwin; i++)
        if (m->win_end[i] > from && m->win_end[i] <= to)
            v[k++] = m->win[i];
    double med = 0;
    if (k) {
        qsort(v, k, sizeof *v, cmp_double);
        med = k % 2 ? v[k / 2] : (v[k / 2 - 1] + v[k / 2]) / 2;
    }
    free(v);
    *count = k;
    return med;
}

static void kve_point(const kve_meter *m, const reel_checker *c, const char *name, const char *label, uint64_t n)
{
    size_t k;
    double med = kve_median(m, n / 10, n, &k);
    long rss = rss_bytes() - m->rss0;
    printf("%-17s %-15s accesses %9llu  us/access %7.3f (median of %4zu windows, last %7.3f)  wall %7.1f s  "
           "checker %8.2f MiB  rss +%7.1f MiB\n",
           name, label, (unsigned long long)n, med, k, m->nwin ? m->win[m->nwin - 1] : 0.0, now_s() - m->start,
           (double)reel_checker_memory(c) / 1048576.0, (double)rss / 1048576.0);
    fflush(stdout);
}

static void bench_kv_events(uint64_t total, bool sync)
{
    const char *name = sync ? "kv-events" : "kv-events-nosync";
    reel_checker *c;
    must(reel_checker_create(NULL, &c), "create");
    const uint64_t x = 0, h = KVE_ACT, q = 2 * KVE_ACT, o = 3 * KVE_ACT, tok = 4 * KVE_ACT, logits = tok + 64;
    const uint64_t layer_bytes = KVE_SLOT * KVE_SEQ;
    const uint64_t points[3] = { total / 100, total / 10, total };
    int np = 0;
    uint64_t n = 0;
    kve_meter m = { 0 };
    m.capwin = total / KVE_WINDOW + 16;
    m.win = malloc(m.capwin * sizeof *m.win);
    m.win_end = malloc(m.capwin * sizeof *m.win_end);
    if (!m.win || !m.win_end)
        must(REEL_E_OOM, "windows");
    m.start = now_s();
    m.cpu_last = cpu_s();
    m.rss0 = rss_bytes();
    bool stop = false;
    for (int64_t step = 0; !stop; step++) {
        uint64_t pos = (uint64_t)step % KVE_SEQ;
        reel_checker_begin(c, step);
        reel_check_access a[3];
        a[0] = kve_acc(0, tok, 64, true, "input 'tokens'");
        kve_use(c, sync ? REEL_CHECK_HOST : 0, "upload", 1, a);
        a[0] = kve_acc(0, tok, 64, false, "input 'tokens'");
        a[1] = kve_acc(0, x, KVE_ACT, true, "plan 'x'");
        kve_use(c, 0, "embedding", 2, a);
        n += 3;
        for (uint64_t l = 0; l < KVE_LAYERS; l++) {
            uint64_t ev = 1000 + 4 * l, kv = l * layer_bytes;
            a[0] = kve_acc(0, x, KVE_ACT, false, "plan 'x'");
            a[1] = kve_acc(0, h, KVE_ACT, true, "plan 'h'");
            kve_use(c, 0, "norm", 2, a);
            must(reel_checker_event_record(c, ev, 0), "record");
            must(reel_checker_event_wait(c, 1, ev), "wait");
            a[0] = kve_acc(0, h, KVE_ACT, false, "plan 'h'");
            a[1] = kve_acc(1, kv + pos * KVE_SLOT, KVE_SLOT, true, "state 'kv'");
            kve_use(c, 1, "kv write", 2, a);
            must(reel_checker_event_record(c, ev + 1, 1), "record");
            a[0] = kve_acc(0, h, KVE_ACT, false, "plan 'h'");
            a[1] = kve_acc(0, q, KVE_ACT, true, "plan 'q'");
            kve_use(c, 0, "q proj", 2, a);
            must(reel_checker_event_wait(c, 0, ev + 1), "wait");
            a[0] = kve_acc(0, q, KVE_ACT, false, "plan 'q'");
            a[1] = kve_acc(1, kv, (pos + 1) * KVE_SLOT, false, "state 'kv'");
            a[2] = kve_acc(0, o, KVE_ACT, true, "plan 'o'");
            kve_use(c, 0, "attention", 3, a);
            must(reel_checker_event_record(c, ev + 2, 0), "record");
            must(reel_checker_event_wait(c, 2, ev + 2), "wait");
            a[0] = kve_acc(0, o, KVE_ACT, false, "plan 'o'");
            a[1] = kve_acc(0, x, KVE_ACT, true, "plan 'x'");
            kve_use(c, 2, "mlp", 2, a);
            must(reel_checker_event_record(c, ev + 3, 2), "record");
            must(reel_checker_event_wait(c, 0, ev + 3), "wait");
            n += 11;
            if (n - m.nlast >= KVE_WINDOW) {
                double cpu = cpu_s();
                if (m.nwin < m.capwin) {
                    m.win[m.nwin] = (cpu - m.cpu_last) * 1e6 / (double)(n - m.nlast);
                    m.win_end[m.nwin++] = n;
                }
                m.cpu_last = cpu;
                m.nlast = n;
                bool over = now_s() - m.start > budget_s();
                if (n >= points[np] || over) {
                    char label[32];
                    if (n >= points[np])
                        snprintf(label, sizeof label, "%.0e", (double)points[np]);
                    else
                        snprintf(label, sizeof label, "stopped (budget)");
                    kve_point(&m, c, name, label, n);
                    while (np < 3 && points[np] <= n)
                        np++;
                    if (np == 3 || over) {
                        stop = true;
                        break;
                    }
                }
            }
        }
        if (stop)
            break;
        a[0] = kve_acc(0, x, KVE_ACT, false, "plan 'x'");
        a[1] = kve_acc(0, logits, 64, true, "output 'logits'");
        kve_use(c, 0, "sample", 2, a);
        n += 2;
        if (sync) {
            must(reel_checker_host_sync(c, REEL_CHECK_ALL_STREAMS), "sync");
            a[0] = kve_acc(0, logits, 64, false, "output 'logits'");
            kve_use(c, REEL_CHECK_HOST, "download", 1, a);
            n += 1;
        }
        reel_checker_end(c, NULL, NULL);
    }
    if (reel_checker_count(c))
        printf("%s: %zu hazards (expected none)\n", name, reel_checker_count(c));
    free(m.win);
    free(m.win_end);
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
    if (all || strcmp(which, "kv-events") == 0)
        bench_kv_events((uint64_t)(1e7 / scale), true);
    if (all || strcmp(which, "kv-events-nosync") == 0)
        bench_kv_events((uint64_t)(1e7 / scale), false);
    return 0;
}
