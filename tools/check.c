/* `reel check`: the demo's serving loop with every step under the hazard
 * checker, then a report: hazards found, and per bucket the planned arena,
 * the lower bound and their ratio. Exit status 1 on any hazard. With
 * --table B, the memory plan of bucket B as a table. */
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
    reel_placement pl;
    reel_plan_stats st;
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
          "Exit status: 0 clean, 1 hazards or failure, 2 usage.\n"
          "  --table N   print the memory plan of bucket index N (tensor, stream, first\n"
          "              and last use, offset, size)\n\n",
          f);
    demo_usage(f);
}

int cmd_check(int argc, char **argv)
{
    check_args a = {.table = -1};
    /* Take --table out, hand the rest to the demo's parser. */
    char **rest = calloc((size_t)argc + 1, sizeof *rest);
    int nr = 0;
    if (!rest)
        return 1;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--table") == 0 && i + 1 < argc) {
            a.table = atoi(argv[++i]);
            continue;
        }
        rest[nr++] = argv[i];
    }
    demo_opts o;
    demo_opts_default(&o);
    int pr = demo_parse_args(nr, rest, &o, stderr);
    free(rest);
    if (pr != 0)
        return pr == 1 ? 0 : 2;
    o.hazards = true;
    o.inspect = inspect;
    o.inspect_arg = &a;
    demo_result r;
    reel_status st = demo_run(&o, &r, o.quiet ? NULL : stderr);
    printf("reel check: %llu steps (%llu replayed, %llu eager) under the hazard checker\n",
           (unsigned long long)r.stats.steps, (unsigned long long)r.stats.replays,
           (unsigned long long)r.stats.eager_steps);
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
        fprintf(stderr, "reel check: %s: %s\n", reel_status_str(st), r.error);
        return 1;
    }
    return r.stats.hazards ? 1 : 0;
}
