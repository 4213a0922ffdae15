/* Soak: the demo serving loop (tools/model.c, tools/serve.c) for a long
 * run, with steps past the plan's limits mixed in: prompts longer than the
 * largest bucket, more sequences than max_seqs (the scheduler is allowed one
 * more than the plan), and contexts growing past max_context. The workload
 * starts again when every request is done, so a run is as long as asked.
 *
 * Every step's fallback is checked against the one its batch calls for
 * (tokens over the bucket, else sequences over max_seqs, else context over
 * max_context, else a replay); each window of steps prints the process's
 * resident memory, the library's device memory (reel_plan_memory_get plus
 * the workspace of eager steps, as reel_plan_stats reports it), the p50 and
 * p99 step latency and the steps by fallback. The run fails (exit 1) on an
 * unexpected fallback, a failed step, or resident memory at the end more
 * than --rss-slack-kib above what it was after the warm-up.
 *
 *   bench_soak [--steps N] [--window N] [--warmup N] [--backend host|cuda]
 *              [--model small|demo] [--rss-slack-kib K] [--seed S]
 *
 * make soak runs 100,000 steps on the host backend (docs/reliability.md). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "reel/reel.h"
#include "tools/model.h"
#include "tools/serve.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static long rss_kib(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    long size = 0, res = 0;
    if (!f)
        return -1;
    if (fscanf(f, "%ld %ld", &size, &res) != 2)
        res = -1;
    fclose(f);
    return res < 0 ? -1 : res * (sysconf(_SC_PAGESIZE) / 1024);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* In place: sorts v. */
static double pct(double *v, size_t n, double q)
{
    if (n == 0)
        return 0;
    qsort(v, n, sizeof *v, cmp_double);
    size_t i = (size_t)(q * (double)(n - 1) + 0.5);
    return v[i];
}

typedef struct soak_opts {
    long steps, window, warmup, rss_slack_kib;
    reel_backend_kind backend;
    bool demo_model;
    uint64_t seed;
} soak_opts;

static int usage(void)
{
    fprintf(stderr, "usage: bench_soak [--steps N] [--window N] [--warmup N] [--backend host|cuda] "
                    "[--model small|demo] [--rss-slack-kib K] [--seed S]\n");
    return 2;
}

static int parse(int argc, char **argv, soak_opts *o)
{
    *o = (soak_opts){.steps = 100000, .window = 10000, .warmup = 10000, .rss_slack_kib = 1024,
                     .backend = REEL_BACKEND_HOST, .seed = 1};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v)
            return usage();
        if (!strcmp(a, "--steps"))
            o->steps = atol(v);
        else if (!strcmp(a, "--window"))
            o->window = atol(v);
        else if (!strcmp(a, "--warmup"))
            o->warmup = atol(v);
        else if (!strcmp(a, "--rss-slack-kib"))
            o->rss_slack_kib = atol(v);
        else if (!strcmp(a, "--seed"))
            o->seed = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--backend")) {
            if (reel_backend_parse(v, &o->backend) != REEL_OK)
                return usage();
        } else if (!strcmp(a, "--model")) {
            if (strcmp(v, "small") && strcmp(v, "demo"))
                return usage();
            o->demo_model = !strcmp(v, "demo");
        } else
            return usage();
        i++;
    }
    if (o->steps < 1 || o->window < 1 || o->warmup < 0 || o->warmup > o->steps)
        return usage();
    return 0;
}

/* The plan's limits; the scheduler may put one more sequence in a step. */
#define LARGEST_BUCKET 16
#define MAX_CONTEXT 128
#define MAX_SEQS 8

static reel_fallback expected(const serve_batch *b)
{
    if (b->num_tokens > LARGEST_BUCKET)
        return REEL_FALLBACK_TOKENS_OVER_LIMIT;
    if (b->num_seqs > MAX_SEQS)
        return REEL_FALLBACK_SEQS_OVER_LIMIT;
    if (b->longest_context > MAX_CONTEXT)
        return REEL_FALLBACK_CONTEXT_OVER_LIMIT;
    return REEL_FALLBACK_NONE;
}

static serve_opts workload(const soak_opts *o, const model_config *m, int num_blocks)
{
    serve_opts so = {
        .requests = 256, .seed = o->seed, .vocab = m->vocab, .largest_bucket = LARGEST_BUCKET,
        .max_context = MAX_CONTEXT, .max_seqs = MAX_SEQS + 1, .token_budget = 2 * LARGEST_BUCKET,
        .block_size = m->block_size, .num_blocks = num_blocks, .fit = false,
    };
    return so;
}

int main(int argc, char **argv)
{
    soak_opts o;
    if (parse(argc, argv, &o))
        return 2;
    model_config m = MODEL_CONFIG_INIT;
    if (!o.demo_model) { /* host-sized: the loop, not the matmuls, is what soaks */
        m.layers = 2;
        m.hidden = 64;
        m.heads = 4;
        m.vocab = 256;
    }
    m.seed = o.seed;
    char err[256];
    serve_state s;
    serve_opts so = workload(&o, &m, 0);
    if (serve_init(&s, &so, err, sizeof err) != 0) {
        fprintf(stderr, "soak: workload: %s\n", err);
        return 1;
    }
    int num_blocks = s.pool.num_blocks;
    m.num_blocks = num_blocks;
    if (model_config_resolve(&m, err, sizeof err) != 0) {
        fprintf(stderr, "soak: model: %s\n", err);
        return 1;
    }
    reel_ctx_opts co = REEL_CTX_OPTS_INIT;
    co.backend = o.backend;
    reel_ctx *ctx = NULL;
    reel_graph *g = NULL;
    reel_plan *p = NULL;
    int rc = 1;
    reel_status st = reel_ctx_create(&co, &ctx);
    if (st != REEL_OK) {
        fprintf(stderr, "soak: context: %s: %s\n", reel_status_str(st), reel_ctx_last_error(NULL));
        serve_destroy(&s);
        return 1;
    }
    reel_compile_opts c = REEL_COMPILE_OPTS_INIT;
    const int32_t buckets[] = {1, 2, 4, 8, 16};
    c.num_buckets = 5;
    memcpy(c.buckets, buckets, sizeof buckets);
    c.max_context = MAX_CONTEXT;
    c.max_seqs = MAX_SEQS;
    if ((st = model_build(ctx, &m, &g)) != REEL_OK || (st = reel_compile(g, &c, &p)) != REEL_OK ||
        (st = model_write_weights(p, &m)) != REEL_OK) {
        fprintf(stderr, "soak: setting up: %s: %s\n", reel_status_str(st), reel_ctx_last_error(ctx));
        goto out;
    }
    reel_graph_destroy(g);
    g = NULL;
    reel_plan_memory pm = REEL_PLAN_MEMORY_INIT;
    reel_plan_memory_get(p, &pm);
    printf("soak: %s backend, %s model (%d layers, hidden %d), buckets 1..%d, max_seqs %d (the scheduler up to %d), "
           "max_context %d, %ld steps, window %ld, warm-up %ld\n",
           reel_backend_name(reel_ctx_backend(ctx)), o.demo_model ? "demo" : "small", m.layers, m.hidden,
           LARGEST_BUCKET, MAX_SEQS, MAX_SEQS + 1, MAX_CONTEXT, o.steps, o.window, o.warmup);
    printf("%10s %10s %12s %10s %10s %8s %8s %8s %8s %8s\n", "steps", "rss_kib", "device_kib", "p50_us", "p99_us",
           "replay", "tokens", "seqs", "context", "restarts");
    fflush(stdout);
    double *lat = malloc((size_t)o.window * sizeof *lat);
    if (!lat)
        goto out;
    long rss_warm = -1, rss_last = -1, unexpected = 0, restarts = 0;
    uint64_t by[REEL_FALLBACK_COUNT] = {0};
    size_t nlat = 0;
    double t_start = now_s();
    for (long k = 0; k < o.steps; k++) {
        /* Admission up to max_seqs, but for 20 steps in every 1000 one more:
         * the extra sequence runs (eagerly, over max_seqs) until it ends. */
        s.o.max_seqs = k % 1000 < 20 ? MAX_SEQS + 1 : MAX_SEQS;
        if (!serve_schedule(&s)) { /* every request done: the same workload again */
            serve_destroy(&s);
            so = workload(&o, &m, num_blocks);
            if (serve_init(&s, &so, err, sizeof err) != 0 || !serve_schedule(&s)) {
                fprintf(stderr, "soak: workload again: %s\n", err);
                free(lat);
                goto out;
            }
            restarts++;
            s.o.max_seqs = MAX_SEQS;
        }
        const serve_batch *b = &s.b;
        reel_step_info si = { REEL_STEP_INFO_HEAD, .num_tokens = b->num_tokens, .num_seqs = b->num_seqs, .query_start = b->query_start,
            .positions = b->positions, .slot_mapping = b->slots, .context_lens = b->context_lens,
            .block_tables = b->block_tables, .block_table_stride = b->stride,
        };
        double t0 = now_s();
        st = reel_plan_set_input(p, MODEL_INPUT_TOKENS, b->tokens, b->num_tokens);
        if (st == REEL_OK)
            st = reel_step(p, &si);
        const void *out = NULL;
        int64_t rows = 0;
        if (st == REEL_OK)
            st = reel_plan_output(p, MODEL_OUTPUT_NEXT, &out, &rows);
        double t1 = now_s();
        if (st != REEL_OK || rows != b->num_tokens) {
            fprintf(stderr, "soak: step %ld (%d tokens, %d sequences, context %d): %s: %s\n", k, b->num_tokens,
                    b->num_seqs, b->longest_context, reel_status_str(st), reel_ctx_last_error(ctx));
            free(lat);
            goto out;
        }
        serve_commit(&s, (const int32_t *)out);
        reel_fallback fb = reel_plan_last_fallback(p), want = expected(b);
        if (fb != want) {
            if (unexpected++ < 10)
                fprintf(stderr, "soak: step %ld (%d tokens, %d sequences, context %d): fallback %s, expected %s\n",
                        k, b->num_tokens, b->num_seqs, b->longest_context, reel_fallback_str(fb),
                        reel_fallback_str(want));
        }
        by[fb]++;
        lat[nlat++] = (t1 - t0) * 1e6;
        if (nlat == (size_t)o.window || k + 1 == o.steps) {
            long rss = rss_kib();
            reel_plan_stats ps = REEL_PLAN_STATS_INIT;
            reel_plan_stats_get(p, &ps);
            reel_plan_memory_get(p, &pm);
            size_t dev = pm.device_bytes + pm.param_bytes + pm.state_bytes + ps.workspace_bytes;
            double p50 = pct(lat, nlat, 0.5), p99 = pct(lat, nlat, 0.99);
            printf("%10ld %10ld %12zu %10.1f %10.1f %8" PRIu64 " %8" PRIu64 " %8" PRIu64 " %8" PRIu64 " %8ld\n", k + 1,
                   rss, dev / 1024, p50, p99, by[REEL_FALLBACK_NONE], by[REEL_FALLBACK_TOKENS_OVER_LIMIT],
                   by[REEL_FALLBACK_SEQS_OVER_LIMIT], by[REEL_FALLBACK_CONTEXT_OVER_LIMIT], restarts);
            fflush(stdout);
            memset(by, 0, sizeof by);
            nlat = 0;
            if (k + 1 >= o.warmup && rss_warm < 0)
                rss_warm = rss;
            rss_last = rss;
        }
    }
    free(lat);
    double wall = now_s() - t_start;
    long grew = rss_warm >= 0 ? rss_last - rss_warm : 0;
    printf("soak: %ld steps in %.1f s (%.0f steps/s); resident memory %+ld KiB since the warm-up (slack %ld KiB); "
           "%ld unexpected fallbacks\n",
           o.steps, wall, (double)o.steps / wall, grew, o.rss_slack_kib, unexpected);
    rc = unexpected == 0 && grew <= o.rss_slack_kib ? 0 : 1;
    if (rc)
        printf("soak: FAILED (%s)\n", unexpected ? "unexpected fallbacks" : "resident memory grew");
out:
    reel_graph_destroy(g);
    reel_plan_destroy(p);
    reel_ctx_destroy(ctx);
    serve_destroy(&s);
    return rc;
}
