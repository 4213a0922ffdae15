/* Observability of the `reel` command: machine-readable summaries (--json),
 * per-step CSV (--steps-csv), Chrome/Perfetto traces (--trace), and `reel
 * inspect` (the plan, its DAG as Graphviz DOT, its memory plan as SVG).
 * Public API only: reel_plan_stats_get, reel_plan_memory_get,
 * reel_plan_node_info, reel_plan_placement, op spans and the log hook. */
#ifndef REEL_TOOLS_OBSERVE_H
#define REEL_TOOLS_OBSERVE_H

#include <stdbool.h>
#include <stdio.h>

#include "demo.h"
#include "json.h"

/* What one run observes; filled by the observer callbacks of demo_run. */
typedef struct obs_run {
    const char *trace_path, *csv_path; /* NULL: none */
    bool json;
    bool verbose;                      /* --verbose: the library's log lines (INFO and up) on stderr */
    FILE *csv, *trace_file;            /* opened before the run: a bad path fails at once */
    struct trace *trace;               /* trace.c */
    reel_plan_memory mem;              /* taken at compile, before any step */
    bool have_mem;
    char error[256];                   /* an observer's own failure (a file) */
} obs_run;

/* Takes --json, --verbose, --trace FILE and --steps-csv FILE (also
 * --opt=VALUE) out of argv, compacting it; returns the new argc, or -1 after
 * printing a usage error to err. allow_files false: only --json and
 * --verbose are taken. */
int obs_take_args(int *argc, char **argv, obs_run *o, bool allow_files, const char *cmd, FILE *err);
/* Opens the files and fills ob (ob->arg = o); 0, or -1 with o->error. */
int obs_begin(obs_run *o, demo_observer *ob);
/* Writes the trace and closes the files; 0, or -1 with o->error. */
int obs_end(obs_run *o, const demo_result *r);

/* The run's summary as one JSON object. */
void obs_summary_json(json_w *w, const char *cmd, const demo_opts *d, const demo_result *r, const obs_run *o,
                      reel_status st);

/* trace.c: the Trace Event Format (Chrome, Perfetto). */
struct trace *trace_create(void);
void trace_destroy(struct trace *t);
void trace_log_hook(void *user, reel_log_level level, const char *msg); /* user: the trace */
/* --verbose: one line on stderr per log event, seconds since t0 (mono_s) first. */
void obs_print_log(double t0, reel_log_level level, const char *msg);
double obs_mono_s(void);
void trace_compile(struct trace *t, double start_s, double end_s);
void trace_plan(struct trace *t, reel_plan *p); /* starts op spans where the backend has them */
void trace_step(struct trace *t, reel_plan *p, const demo_step_rec *s);
int trace_write(struct trace *t, FILE *f, const demo_result *r);

/* The subcommands. */
int cmd_demo_observed(int argc, char **argv);
void demo_observed_usage(FILE *f);
int cmd_check_observed(int argc, char **argv);
void check_observed_usage(FILE *f);
int cmd_inspect(int argc, char **argv);
void inspect_usage(FILE *f);

/* inspect.c, callable in-process (tests): the plan as text, DOT and SVG. */
void inspect_print_plan(reel_plan *p, FILE *f);
void inspect_plan_json(json_w *w, reel_plan *p);
int inspect_write_dot(reel_plan *p, FILE *f);
int inspect_write_svg(reel_plan *p, FILE *f);

#endif
