/* `reel demo` and `reel check` with --json, --steps-csv and --trace: the
 * same runs (demo.c's loop), observed through the public API. Without
 * these options both commands are exactly demo_cli.c's and check.c's. */
#include "observe.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

double obs_mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- options ---------------------------------------------------------------- */

/* argv[*i] is --name VALUE or --name=VALUE: the value, or NULL if it is not
 * this option; *bad when the value is missing. */
static const char *opt_value(int argc, char **argv, int *i, const char *name, bool *bad)
{
    size_t n = strlen(name);
    if (strncmp(argv[*i], name, n) != 0) return NULL;
    if (argv[*i][n] == '=') return argv[*i] + n + 1;
    if (argv[*i][n] != '\0') return NULL;
    if (*i + 1 >= argc) {
        *bad = true;
        return NULL;
    }
    return argv[++*i];
}

int obs_take_args(int *argc, char **argv, obs_run *o, bool allow_files, const char *cmd, FILE *err)
{
    int out = 1;
    for (int i = 1; i < *argc; i++) {
        bool bad = false;
        const char *v = NULL, *opt = argv[i];
        if (strcmp(opt, "--json") == 0) {
            o->json = true;
        } else if (strcmp(opt, "--verbose") == 0 || strcmp(opt, "-v") == 0) {
            o->verbose = true;
        } else if (allow_files && ((v = opt_value(*argc, argv, &i, "--trace", &bad)) || bad)) {
            o->trace_path = v;
        } else if (allow_files && ((v = opt_value(*argc, argv, &i, "--steps-csv", &bad)) || bad)) {
            o->csv_path = v;
        } else {
            argv[out++] = argv[i];
            continue;
        }
        if (bad || (v && !*v)) {
            fprintf(err, "reel %s: option '%s' needs a file name\n", cmd, opt);
            return -1;
        }
    }
    argv[out] = NULL;
    *argc = out;
    return out;
}

/* ---- the observer ------------------------------------------------------------- */

typedef struct obs_state {
    obs_run *o;
    double t_ctx;
} obs_state;

static obs_state the_state; /* one run per process: the command line's */

void obs_print_log(double t0, reel_log_level level, const char *msg)
{
    static const char *names[] = {"debug", "info", "warn", "error"};
    const char *name = level >= REEL_LOG_DEBUG && level <= REEL_LOG_ERROR ? names[level] : "?";
    fprintf(stderr, "reel: %8.3f s %s: %s\n", obs_mono_s() - t0, name, msg);
}

static void obs_log_hook(void *user, reel_log_level level, const char *msg)
{
    obs_state *s = user;
    if (s->o->verbose && level >= REEL_LOG_INFO) obs_print_log(s->t_ctx, level, msg);
    if (s->o->trace) trace_log_hook(s->o->trace, level, msg);
}

static void on_ctx(void *arg, reel_ctx *ctx)
{
    obs_state *s = arg;
    s->t_ctx = obs_mono_s();
    if (s->o->trace || s->o->verbose)
        reel_set_log_hook(ctx, obs_log_hook, s, s->o->trace ? REEL_LOG_DEBUG : REEL_LOG_INFO);
}

static void on_plan(void *arg, reel_plan *p)
{
    obs_state *s = arg;
    reel_plan_memory m = REEL_PLAN_MEMORY_INIT;
    if (reel_plan_memory_get(p, &m) == REEL_OK) {
        s->o->mem = m;
        s->o->have_mem = true;
    }
    if (s->o->trace) {
        trace_compile(s->o->trace, s->t_ctx, obs_mono_s());
        trace_plan(s->o->trace, p);
    }
}

static void on_step(void *arg, reel_plan *p, const demo_step_rec *r)
{
    obs_state *s = arg;
    if (s->o->csv)
        fprintf(s->o->csv, "%llu,%d,%d,%d,%s,%s,%.3f,%.4f\n", (unsigned long long)r->index, r->num_tokens,
                r->num_seqs, r->longest_context, r->fallback == REEL_FALLBACK_NONE ? "replay" : "eager",
                r->fallback == REEL_FALLBACK_NONE ? "" : reel_fallback_str(r->fallback),
                (r->start_s - s->t_ctx) * 1e3, (r->end_s - r->start_s) * 1e3);
    if (s->o->trace) trace_step(s->o->trace, p, r);
}

int obs_begin(obs_run *o, demo_observer *ob)
{
    the_state = (obs_state){.o = o, .t_ctx = obs_mono_s()};
    *ob = (demo_observer){on_ctx, on_plan, on_step, &the_state};
    if (o->csv_path) {
        o->csv = fopen(o->csv_path, "w");
        if (!o->csv) {
            snprintf(o->error, sizeof o->error, "cannot write '%s'", o->csv_path);
            return -1;
        }
        fputs("step,tokens,seqs,longest_context,path,reason,start_ms,latency_ms\n", o->csv);
    }
    if (o->trace_path) {
        o->trace_file = fopen(o->trace_path, "w");
        o->trace = o->trace_file ? trace_create() : NULL;
        if (!o->trace) {
            snprintf(o->error, sizeof o->error, "%s '%s'", o->trace_file ? "out of memory for" : "cannot write",
                     o->trace_path);
            if (o->trace_file) fclose(o->trace_file);
            if (o->csv) fclose(o->csv);
            o->trace_file = o->csv = NULL;
            return -1;
        }
    }
    return 0;
}

int obs_end(obs_run *o, const demo_result *r)
{
    int rc = 0;
    if (o->csv && fclose(o->csv) != 0) {
        snprintf(o->error, sizeof o->error, "writing '%s' failed", o->csv_path);
        rc = -1;
    }
    o->csv = NULL;
    if (o->trace) {
        FILE *f = o->trace_file;
        o->trace_file = NULL;
        bool bad = trace_write(o->trace, f, r) != 0;
        if (fclose(f) != 0 || bad) {
            snprintf(o->error, sizeof o->error, "writing the trace '%s' failed", o->trace_path);
            rc = -1;
        }
        trace_destroy(o->trace);
        o->trace = NULL;
    }
    return rc;
}

/* ---- the summary as JSON ------------------------------------------------------ */

static void json_size_or_null(json_w *w, const char *key, bool known, size_t v)
{
    if (known) json_u64(w, key, v);
    else json_null(w, key);
}

void obs_summary_json(json_w *w, const char *cmd, const demo_opts *d, const demo_result *r, const obs_run *o,
                      reel_status st)
{
    const reel_plan_stats *s = &r->stats;
    char sum[32];
    snprintf(sum, sizeof sum, "%016llx", (unsigned long long)r->checksum);
    json_obj(w, NULL);
    json_str(w, "command", cmd);
    json_i64(w, "reel_version", reel_version());
    json_str(w, "backend", reel_backend_name(r->backend));
    json_str(w, "status", reel_status_str(st));
    json_str(w, "error", st == REEL_OK ? NULL : r->error);
    json_bool(w, "interrupted", r->interrupted);
    json_obj(w, "model");
    json_i64(w, "layers", d->model.layers);
    json_i64(w, "hidden", d->model.hidden);
    json_i64(w, "heads", d->model.heads);
    json_i64(w, "vocab", d->model.vocab);
    json_str(w, "dtype", reel_dtype_name(d->model.dtype));
    json_end_obj(w);
    json_u64(w, "steps", s->steps);
    json_u64(w, "replays", s->replays);
    json_u64(w, "eager_steps", s->eager_steps);
    json_obj(w, "fallbacks");
    for (int k = 1; k < REEL_FALLBACK_COUNT; k++) json_u64(w, reel_fallback_str((reel_fallback)k), s->eager_by_reason[k]);
    json_end_obj(w);
    json_u64(w, "tokens", r->tokens);
    json_u64(w, "prefill_tokens", r->prefill_tokens);
    json_u64(w, "decode_tokens", r->decode_tokens);
    json_u64(w, "generated", r->generated);
    json_i64(w, "requests_done", r->requests_done);
    json_num(w, "wall_s", r->wall_s);
    json_num(w, "tokens_per_s", r->wall_s > 0 ? (double)r->tokens / r->wall_s : 0.0);
    json_obj(w, "latency_ms");
    json_num(w, "p50", r->p50_ms);
    json_num(w, "p99", r->p99_ms);
    json_num(w, "replay_p50", r->replay_p50_ms);
    json_num(w, "eager_p50", r->eager_p50_ms);
    json_end_obj(w);
    json_str(w, "checksum", sum);
    json_u64(w, "op_dispatches", s->op_dispatches);
    json_u64(w, "graphs_captured", s->graphs_captured);
    json_u64(w, "graph_updates", s->graph_updates);
    json_u64(w, "graph_reinstantiations", s->graph_reinstantiations);
    json_u64(w, "hazards", s->hazards);
    json_bool(w, "hazards_checked", d->hazards);
    json_num(w, "compile_ms", s->compile_ms);
    json_num(w, "capture_ms", s->capture_ms);
    json_i64(w, "num_nodes", s->num_nodes);
    json_i64(w, "num_streams", s->num_streams);
    bool gk = o->have_mem && o->mem.graph_bytes_known;
    json_obj(w, "memory");
    json_u64(w, "arena_bytes", s->arena_bytes);
    json_u64(w, "static_bytes", s->static_bytes);
    json_u64(w, "param_bytes", s->param_bytes);
    json_u64(w, "state_bytes", s->state_bytes);
    json_size_or_null(w, "pinned_bytes", o->have_mem, o->mem.pinned_bytes);
    json_size_or_null(w, "graph_bytes", gk, o->mem.graph_bytes);
    json_size_or_null(w, "device_bytes", o->have_mem, o->mem.device_bytes);
    json_end_obj(w);
    json_obj(w, "allocator");
    json_u64(w, "workspace_bytes", s->workspace_bytes);
    json_u64(w, "workspace_peak", s->workspace_peak);
    json_end_obj(w);
    json_arr(w, "buckets");
    for (int b = 0; b < s->num_buckets; b++) {
        json_obj(w, NULL);
        json_i64(w, "tokens", s->buckets[b]);
        json_u64(w, "arena_bytes", s->bucket_arena_bytes[b]);
        json_u64(w, "lower_bound", s->bucket_lower_bound[b]);
        json_u64(w, "node_bound", s->bucket_node_bound[b]);
        json_size_or_null(w, "graph_bytes", gk, o->mem.bucket_graph_bytes[b]);
        json_size_or_null(w, "device_bytes", o->have_mem && gk, o->mem.bucket_device_bytes[b]);
        json_end_obj(w);
    }
    json_end_arr(w);
    json_end_obj(w);
}

/* ---- demo and check ------------------------------------------------------------ */

static void options_usage(FILE *f, bool files)
{
    fputs("observability:\n"
          "  --json             the summary as one JSON object on stdout (instead of the text)\n"
          "  -v, --verbose      the library's log on stderr as it comes: compile phases, each\n"
          "                     bucket's memory plan, the warm-up and each capture, with times\n",
          f);
    if (files)
        fputs("  --steps-csv FILE   one CSV line per step (tokens, sequences, replay or eager and why,\n"
              "                     start and latency in ms)\n"
              "  --trace FILE       a Chrome/Perfetto trace (JSON): steps, replays and fallbacks with\n"
              "                     their reasons, captures, and on the host backend every op per stream\n",
              f);
}

void demo_observed_usage(FILE *f)
{
    demo_usage(f);
    options_usage(f, true);
}

void check_observed_usage(FILE *f)
{
    check_usage(f);
    options_usage(f, false);
}

static volatile sig_atomic_t stop_flag;

/* The observed run: parse, run with the observer, print. */
static int run_observed(const char *cmd, int argc, char **argv, obs_run *o, bool hazards)
{
    demo_opts d;
    demo_opts_default(&d);
    int rc = demo_parse_args(argc, argv, &d, stderr);
    if (rc == 1) {
        if (hazards) check_observed_usage(stdout);
        else demo_observed_usage(stdout);
        return DEMO_EXIT_OK;
    }
    if (rc != 0 || demo_check_config(&d, cmd, stderr) != 0) return DEMO_EXIT_USAGE;
    d.hazards = d.hazards || hazards;
    demo_observer ob;
    if (obs_begin(o, &ob) != 0) {
        fprintf(stderr, "reel %s: %s\n", cmd, o->error);
        return DEMO_EXIT_USAGE;
    }
    d.observer = &ob;
    d.stop = &stop_flag;
    demo_catch_interrupt(&stop_flag);
    demo_result *r = malloc(sizeof *r);
    if (!r) {
        fprintf(stderr, "reel %s: out of memory\n", cmd);
        return DEMO_EXIT_FAILED;
    }
    reel_status st = demo_run(&d, r, d.quiet || o->json ? NULL : stderr);
    int orc = obs_end(o, r);
    if (o->json) {
        json_w w;
        json_init(&w, stdout, true);
        obs_summary_json(&w, cmd, &d, r, o, st);
    } else if (st == REEL_OK || r->steps > 0) {
        demo_print_summary(&d, r, stdout);
    }
    fflush(stdout);
    if (st != REEL_OK) fprintf(stderr, "reel %s: %s\n", cmd, r->error);
    if (orc != 0) fprintf(stderr, "reel %s: %s\n", cmd, o->error);
    rc = demo_exit_status(st, r);
    if (rc == DEMO_EXIT_OK && (orc != 0 || (hazards && r->stats.hazards))) rc = DEMO_EXIT_FAILED;
    free(r);
    return rc;
}

/* --help lists the observability options too. */
static bool asks_help(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) return true;
    return false;
}

int cmd_demo_observed(int argc, char **argv)
{
    obs_run o = {0};
    if (asks_help(argc, argv)) {
        demo_observed_usage(stdout);
        return DEMO_EXIT_OK;
    }
    if (obs_take_args(&argc, argv, &o, true, "demo", stderr) < 0) return DEMO_EXIT_USAGE;
    if (!o.json && !o.verbose && !o.trace_path && !o.csv_path) return cmd_demo(argc, argv);
    return run_observed("demo", argc, argv, &o, false);
}

int cmd_check_observed(int argc, char **argv)
{
    obs_run o = {0};
    if (asks_help(argc, argv)) {
        check_observed_usage(stdout);
        return DEMO_EXIT_OK;
    }
    if (obs_take_args(&argc, argv, &o, false, "check", stderr) < 0) return DEMO_EXIT_USAGE;
    if (!o.json && !o.verbose) return cmd_check(argc, argv);
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--table") == 0 || strncmp(argv[i], "--table=", 8) == 0) {
            fprintf(stderr, "reel check: --json gives the buckets' figures; use `reel inspect --json` for "
                            "placements instead of --table\n");
            return DEMO_EXIT_USAGE;
        }
    return run_observed("check", argc, argv, &o, true);
}
