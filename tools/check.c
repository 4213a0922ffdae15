/* `reel check`: the demo's serving loop with every step under the hazard
 * checker, then a report: hazards found, and per bucket the planned arena,
 * the lower bound and their ratio. Exit status 1 on any hazard. With
 * --table B, the memory plan of bucket B as a table. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "demo.h"

typedef struct check_args {
    int table;            /* bucket index to print, -1: none */
    reel_plan_stats stats;
} check_args;

static void print_table(reel_plan *p, int b, FILE *f)
{
    reel_placement pl = REEL_PLACEMENT_INIT;
    reel_plan_stats st = REEL_PLAN_STATS_INIT;
    reel_plan_stats_get(p, &st);
    fprintf(f, "\nmemory plan of bucket %d (%d tokens): arena %zu bytes\n\n", b, st.buckets[b],
            st.bucket_arena_bytes[b]);
    fprintf(f, "| tensor | stream | first use | last use | offset | bytes |\n|---|---|---|---|---|---|\n");
    for (int i = 0; reel_plan_placement(p, b, i, &pl) == REEL_OK; i++)
        fprintf(f, "| %s | %d | %d | %s%d | %zu | %zu |\n", pl.name, pl.stream, pl.first,
                pl.last == st.num_nodes ? "output " : "", pl.last, pl.offset, pl.bytes);
}

static void inspect(reel_plan *p, void *arg)
{
    check_args *a = arg;
    a->stats = (reel_plan_stats)REEL_PLAN_STATS_INIT;
    reel_plan_stats_get(p, &a->stats);
    if (a->table >= 0 && a->table < a->stats.num_buckets)
        print_table(p, a->table, stdout);
}

void check_usage(FILE *f)
{
    fputs("usage: reel check [--table BUCKET_INDEX] [demo options]\n\n"
          "Runs the demo serving loop with every step (replayed or eager) under the\n"
          "hazard checker and reports the hazards found and, per bucket, the planned\n"
          "arena against the lower bound (peak bytes live between two ops).\n"
          "Exit status: 0 clean, 1 hazards or a failure, 2 bad options or configuration\n"
          "(nothing ran), 130 interrupted.\n\n"
          "  --table N          also print the memory plan of bucket index N, 0 to the\n"
          "                     number of buckets - 1 (tensor, stream, first and last\n"
          "                     use, offset, size)\n\n"
          "demo options (see reel demo --help):\n",
          f);
    demo_options_usage(f);
}

/* --table's value: a bucket index in [0, num_buckets), decimal. */
static int parse_table(const char *v, int num_buckets, int *out)
{
    char *end;
    errno = 0;
    long t = v ? strtol(v, &end, 10) : -1;
    if (!v || errno || *v < '0' || *v > '9' || *end != '\0' || t >= num_buckets) {
        fprintf(stderr, "reel check: --table wants a bucket index from 0 to %d, got '%s'\n", num_buckets - 1,
                v ? v : "");
        return -1;
    }
    *out = (int)t;
    return 0;
}

int cmd_check(int argc, char **argv)
{
    check_args a = {.table = -1};
    const char *table = NULL;
    bool want_table = false;
    /* Take --table out (--table N or --table=N), hand the rest to the demo's parser. */
    char **rest = calloc((size_t)argc + 1, sizeof *rest);
    int nr = 0;
    if (!rest)
        return DEMO_EXIT_FAILED;
    for (int i = 0; i < argc; i++) {
        if (i > 0 && strcmp(argv[i], "--table") == 0) {
            want_table = true;
            table = i + 1 < argc ? argv[++i] : NULL;
            continue;
        }
        if (i > 0 && strncmp(argv[i], "--table=", 8) == 0) {
            want_table = true;
            table = argv[i] + 8;
            continue;
        }
        rest[nr++] = argv[i];
    }
    demo_opts o;
    demo_opts_default(&o);
    int pr = demo_parse_args(nr, rest, &o, stderr);
    free(rest);
    if (pr == 1) {
        check_usage(stdout);
        return DEMO_EXIT_OK;
    }
    if (pr != 0 || demo_check_config(&o, "check", stderr) != 0 ||
        (want_table && parse_table(table, o.num_buckets, &a.table) != 0))
        return DEMO_EXIT_USAGE;
    o.hazards = true;
    o.inspect = inspect;
    o.inspect_arg = &a;
    static volatile sig_atomic_t stop;
    o.stop = &stop;
    demo_catch_interrupt(&stop);
    demo_result r;
    reel_status st = demo_run(&o, &r, o.quiet ? NULL : stderr);
    if (st != REEL_OK && r.failed_step < 0) { /* nothing ran: no report */
        fprintf(stderr, "reel check: %s\n", r.error);
        return demo_exit_status(st, &r);
    }
    printf("reel check: %llu steps (%llu replayed, %llu eager) under the hazard checker%s\n",
           (unsigned long long)r.stats.steps, (unsigned long long)r.stats.replays,
           (unsigned long long)r.stats.eager_steps, r.interrupted ? ", interrupted" : "");
    printf("  hazards found      %llu\n", (unsigned long long)r.stats.hazards);
    printf("\nlower bound: peak over the points between two ops of bytes produced before and needed after;\n"
           "node bound: peak over ops of bytes that must coexist at an op (no plan goes below it)\n");
    printf("\n| bucket | tokens | arena bytes | lower bound | ratio | node bound | ratio |\n"
           "|---|---|---|---|---|---|---|\n");
    for (int b = 0; b < r.stats.num_buckets; b++) {
        size_t ar = r.stats.bucket_arena_bytes[b], lb = r.stats.bucket_lower_bound[b];
        size_t nb = r.stats.bucket_node_bound[b];
        printf("| %d | %d | %zu | %zu | %.4f | %zu | %.4f |\n", b, r.stats.buckets[b], ar, lb,
               lb ? (double)ar / (double)lb : 1.0, nb, nb ? (double)ar / (double)nb : 1.0);
    }
    printf("\nshared arena %zu bytes\n", r.stats.arena_bytes);
    if (st != REEL_OK) {
        fprintf(stderr, "reel check: %s\n", r.error);
        return demo_exit_status(st, &r);
    }
    if (r.stats.hazards) return DEMO_EXIT_FAILED;
    return demo_exit_status(st, &r);
}
