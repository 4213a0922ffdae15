/* The `reel` command: a table of subcommands. A new subcommand (check, bench,
 * inspect) is one function and one row in `commands`. */
#include <stdio.h>
#include <string.h>

#include "demo.h"
#include "observe.h"
#include "reel/reel.h"

typedef struct command {
    const char *name;
    int (*run)(int argc, char **argv); /* argv[0] is the subcommand name */
    void (*usage)(FILE *f);            /* may be NULL */
    const char *summary;
} command;

static int cmd_version(int argc, char **argv);
static int cmd_help(int argc, char **argv);

static const command commands[] = {
    {"demo", cmd_demo_observed, demo_observed_usage,
     "run the serving loop over a small transformer (replay + eager fallback)"},
    {"check", cmd_check_observed, check_observed_usage,
     "run the demo under the hazard checker; report hazards and arena vs lower bound"},
    {"inspect", cmd_inspect, inspect_usage, "show the demo model's plan: schedule, kernels, memory; DOT and SVG"},
    {"version", cmd_version, NULL, "print the version of reel and of the library it runs with"},
    {"help", cmd_help, NULL, "show this help, or `reel help COMMAND` for one command"},
};
#define NUM_COMMANDS (sizeof commands / sizeof commands[0])

static const command *find(const char *name)
{
    for (size_t i = 0; i < NUM_COMMANDS; i++)
        if (strcmp(commands[i].name, name) == 0) return &commands[i];
    return NULL;
}

static void usage(FILE *f)
{
    fputs("usage: reel COMMAND [options]\n\ncommands:\n", f);
    for (size_t i = 0; i < NUM_COMMANDS; i++) fprintf(f, "  %-9s %s\n", commands[i].name, commands[i].summary);
}

static int cmd_version(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    int lib = reel_version();
    printf("reel %d.%d.%d (library %d.%d.%d)\n", REEL_VERSION_MAJOR, REEL_VERSION_MINOR, REEL_VERSION_PATCH,
           lib / 10000, lib / 100 % 100, lib % 100);
    if (lib / 100 != REEL_VERSION_NUMBER / 100) {
        fprintf(stderr, "reel: header version %d does not match library version %d\n", REEL_VERSION_NUMBER, lib);
        return 1;
    }
    return 0;
}

static int cmd_help(int argc, char **argv)
{
    if (argc < 2) {
        usage(stdout);
        return 0;
    }
    const command *c = find(argv[1]);
    if (!c) {
        fprintf(stderr, "reel: unknown command '%s'\n", argv[1]);
        usage(stderr);
        return 2;
    }
    if (c->usage) c->usage(stdout);
    else printf("reel %s: %s\n", c->name, c->summary);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *name = argv[1];
    if (strcmp(name, "-h") == 0 || strcmp(name, "--help") == 0) name = "help";
    if (strcmp(name, "--version") == 0) name = "version";
    const command *c = find(name);
    if (!c) {
        fprintf(stderr, "reel: unknown command '%s'\n", argv[1]);
        usage(stderr);
        return 2;
    }
    return c->run(argc - 1, argv + 1);
}
