/* `reel demo`: a replay-driven serving loop over the demo transformer.
 *
 * demo_run is callable in-process (the tools tests link it) and prints
 * nothing but the optional progress line; cmd_demo parses the command line,
 * runs, and prints the summary. */
#ifndef REEL_TOOLS_DEMO_H
#define REEL_TOOLS_DEMO_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "model.h"

#define DEMO_PP_MAX 8
#define DEMO_GEN_MAX 4096 /* --prompt tokens and --generate steps, each */

typedef struct demo_opts {
    model_config model;
    reel_backend_kind backend;
    int num_buckets;
    int32_t buckets[REEL_MAX_BUCKETS];
    int max_tokens;   /* scheduler token budget per step; 0: twice the largest bucket */
    int max_context;  /* the plan's per-sequence context limit */
    int max_seqs;     /* the plan's sequences per step (the scheduler keeps to it) */
    int kv_blocks;    /* 0: derived */
    int requests;
    int steps;        /* stop after this many steps; 0: when every request is done */
    uint64_t seed;
    bool strict, eager, fit, hazards, quiet, pdl, no_pdl, no_fuse;
    int device;       /* CUDA device ordinal */
    int pp;           /* pipeline stages (0, 1: one); each a thread with its own context, plan and
                         communicator (host backend), joined by send/recv inside the graphs */
    bool pp_env;      /* the stages are processes: this one is stage RANK of WORLD_SIZE, from a
                         launcher's environment (torchrun's variables; reel_comm_create_env); stage
                         0 schedules and broadcasts each step to the others */
    bool dcp_env;     /* the ranks are processes from a launcher's environment, as --pp-env, each with
                         the whole model and its attention DCP over the ranks (the KV cache sharded by
                         tokens); rank 0 schedules */
    bool cp_env;      /* the same launch, each step's tokens split over the ranks (context parallel:
                         every rank the whole model and a replica of the cache); rank 0 schedules,
                         hands each rank its share and gathers the next tokens */
    int loop;         /* up to this many decode steps per reel_step_n call (device loops) while the
                         batch is decode only and no request arrives (0, 1: one reel_step a step) */
    /* Checkpoints (the library's models layer, tools/model.c; saving:
     * tools/hf.c). model_dir: serve the Hugging Face checkpoint there
     * (config.json and safetensors) instead of the seeded
     * weights; save_dir: write the seeded model there as such a checkpoint
     * first. model_opts_set: a model shape option was given (refused with
     * model_dir: the checkpoint's config.json says). */
    const char *model_dir, *save_dir;
    bool model_opts_set;
    /* Generation instead of the seeded workload: one request of prompt_len
     * tokens, gen_tokens greedy tokens (r->gen); logits_path: every row's
     * logits as little-endian float32 [prompt_len + gen_tokens - 1][vocab]. */
    int32_t *prompt;
    int prompt_len, gen_tokens;
    const char *logits_path;
    /* Sampling (reel_sample in the graph) instead of greedy decoding, for
     * every request but a greedy_share of them (chosen by the seed): each
     * request draws from its own Philox stream (the seed and its id), the
     * counter its position, so its tokens do not depend on the batch. */
    bool sample;
    float temperature, top_p, min_p, greedy_share;
    int top_k;
    /* When set and it becomes non-zero (a signal handler), the loop stops
     * after the step in flight and the run ends REEL_OK, r->interrupted set. */
    volatile sig_atomic_t *stop;
    /* Called with the plan after the run, before it is destroyed (NULL: none). */
    void (*inspect)(reel_plan *p, void *arg);
    void *inspect_arg;
    /* Observers (tools/observe.c: traces, per-step CSV, the log hook); NULL: none. */
    const struct demo_observer *observer;
} demo_opts;

/* One completed step as the loop saw it; times are CLOCK_MONOTONIC seconds,
 * the clock of reel_op_span (in microseconds there). */
typedef struct demo_step_rec {
    uint64_t index;
    int num_tokens, num_seqs, longest_context;
    reel_fallback fallback;      /* REEL_FALLBACK_NONE: replayed */
    double start_s, end_s;       /* set_input .. output read back */
} demo_step_rec;

typedef struct demo_observer {
    void (*ctx_ready)(void *arg, reel_ctx *ctx);     /* before the model is built */
    void (*plan_ready)(void *arg, reel_plan *p);     /* after compile and the weights */
    void (*step_done)(void *arg, reel_plan *p, const demo_step_rec *s);
    void *arg;
} demo_observer;

void demo_opts_default(demo_opts *o);

typedef struct demo_result {
    reel_plan_stats stats;
    uint64_t steps, tokens, prefill_tokens, decode_tokens, generated;
    int requests_done;
    /* what the scheduler expects the plan to do, checked against stats */
    uint64_t steps_over_tokens, steps_over_context, steps_over_any;
    double wall_s, p50_ms, p99_ms, replay_p50_ms, eager_p50_ms;
    uint64_t checksum;
    uint64_t loop_calls, loop_steps; /* --loop: reel_step_n calls and the steps they ran */
    int stage, stages;               /* --pp-env: this process's stage, of how many */
    reel_backend_kind backend;
    bool interrupted; /* stopped by o->stop: the figures are of the steps run */
    /* on failure */
    reel_status status;
    char error[768];
    int64_t failed_step; /* -1: failed outside a step */
    reel_fallback failed_fallback;
    /* --prompt: the generated tokens */
    model_config model; /* the model that ran (a checkpoint's config with --model) */
    int32_t gen[DEMO_GEN_MAX];
    int num_gen;
} demo_result;

/* Runs the loop. Returns REEL_OK or the failing status, with r->error
 * saying where and why. progress (may be NULL) gets the live line. */
reel_status demo_run(const demo_opts *o, demo_result *r, FILE *progress);

void demo_print_summary(const demo_opts *o, const demo_result *r, FILE *f);
void demo_usage(FILE *f);
/* The options demo and check share, one per line. */
void demo_options_usage(FILE *f);
/* Parses argv (after "demo"); 0 ok, 1 help asked for (nothing printed),
 * 2 usage error printed to err (prefixed "reel CMD:", CMD = argv[0]). */
int demo_parse_args(int argc, char **argv, demo_opts *o, FILE *err);
/* Refuses what parses but cannot run as asked (REEL_BACKEND's value,
 * --strict with --eager); 0 ok, 2 printed to err. */
int demo_check_config(const demo_opts *o, const char *cmd, FILE *err);
/* Exit statuses of demo and check. */
enum { DEMO_EXIT_OK = 0, DEMO_EXIT_FAILED = 1, DEMO_EXIT_USAGE = 2, DEMO_EXIT_INTERRUPTED = 130 };
/* The exit status of a run that returned st. */
int demo_exit_status(reel_status st, const demo_result *r);
/* Installs a SIGINT (and SIGTERM) handler that sets *flag. */
void demo_catch_interrupt(volatile sig_atomic_t *flag);

int cmd_demo(int argc, char **argv);
/* `reel check` (check.c). */
int cmd_check(int argc, char **argv);
void check_usage(FILE *f);

#endif
