/* Fault injection (built with -Dfault_injection=true; backend/fault.h):
 * for each kind of backend call, the walk makes call 1, 2, 3, ... fail in
 * turn through compile, the weights and a fixed serving script of the demo
 * model (tools/model.c) that replays two buckets and falls back eagerly
 * over the bucket, over max_seqs and over the context. At every N:
 * - the failing call returns a status with a message, and a failed
 *   compile leaves no plan;
 * - the context and the plan stay usable: the same call made again
 *   succeeds, and every step's output equals the known-good run's;
 * - a failed step changes no state tensor but in the one way a retry makes
 *   good: each KV cache is bitwise as it was before the step, or as the
 *   step made again leaves it (a fault after the step's kernels ran: the
 *   download, a wait); which of the two is counted and printed;
 * - nothing leaks (LeakSanitizer, in the sanitizer build).
 * The walk for a kind ends at the first N past its calls. Parameterized
 * over backends (REEL_TEST_BACKEND): host here, CUDA in the gpu suite. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/fault.h"
#include "reel/comm.h"
#include "tests/core/opts.h"
#include "tools/model.h"

#define NSTEPS 6
#define MAXTOK 8
#define STRIDE 3

/* One step of the script: sequences A (blocks 0, 1, 4) and B (blocks 2, 3). */
typedef struct script_step {
    int32_t num_tokens, num_seqs;
    int32_t tokens[MAXTOK], positions[MAXTOK], slots[MAXTOK];
    int32_t query_start[3], context_lens[2], block_tables[2 * STRIDE];
    reel_fallback expect;
} script_step;

#define SA(pos) ((pos) / 4 == 2 ? 4 * 4 + (pos) % 4 : (pos))  /* A's slot of a position */
#define SB(pos) (8 + (pos))                                    /* B's slot */
static const script_step script[NSTEPS] = {
    /* prefill A (3 tokens: bucket 4, replayed) */
    {3, 1, {5, 9, 2}, {0, 1, 2}, {SA(0), SA(1), SA(2)}, {0, 3}, {3}, {0, 1, 4}, REEL_FALLBACK_NONE},
    /* decode A (bucket 1) */
    {1, 1, {7}, {3}, {SA(3)}, {0, 1}, {4}, {0, 1, 4}, REEL_FALLBACK_NONE},
    /* prefill B, 6 tokens: over the largest bucket */
    {6, 1, {1, 2, 3, 4, 5, 6}, {0, 1, 2, 3, 4, 5}, {SB(0), SB(1), SB(2), SB(3), SB(4), SB(5)}, {0, 6}, {6},
     {2, 3, 0}, REEL_FALLBACK_TOKENS_OVER_LIMIT},
    /* decode A and B together: over max_seqs 1 */
    {2, 2, {11, 12}, {4, 6}, {SA(4), SB(6)}, {0, 1, 2}, {5, 7}, {0, 1, 4, 2, 3, 0}, REEL_FALLBACK_SEQS_OVER_LIMIT},
    /* A grows to 9 tokens: over max_context 8 */
    {4, 1, {13, 14, 15, 16}, {5, 6, 7, 8}, {SA(5), SA(6), SA(7), SA(8)}, {0, 4}, {9}, {0, 1, 4},
     REEL_FALLBACK_CONTEXT_OVER_LIMIT},
    /* decode B (bucket 1, replayed) */
    {1, 1, {17}, {7}, {SB(7)}, {0, 1}, {8}, {2, 3, 0}, REEL_FALLBACK_NONE},
};

static model_config config(void)
{
    model_config m = MODEL_CONFIG_INIT;
    m.layers = 2;
    m.hidden = 32;
    m.heads = 2;
    m.kv_heads = 1;
    m.vocab = 64;
    m.block_size = 4;
    m.num_blocks = 5;
    m.seed = 3;
    char err[128];
    cr_assert_eq(model_config_resolve(&m, err, sizeof err), 0, "%s", err);
    return m;
}

static reel_compile_opts compile_opts(void)
{
    reel_compile_opts o = REEL_COMPILE_OPTS_INIT;
    o.num_buckets = 2;
    o.buckets[0] = 1;
    o.buckets[1] = 4;
    o.max_context = 8;
    o.max_seqs = 1;
    return o;
}

/* The KV caches of the model, read back with counting paused. */
typedef struct snapshot {
    unsigned char *bytes;
    size_t per;   /* bytes of one cache */
    int n;        /* 2 per layer */
} snapshot;

static void snap(reel_ctx *ctx, reel_plan *p, const model_config *m, snapshot *s)
{
    s->n = 2 * m->layers;
    s->per = (size_t)(model_kv_bytes(m) / (uint64_t)s->n);
    if (!s->bytes)
        s->bytes = malloc(s->per * (size_t)s->n);
    cr_assert_not_null(s->bytes);
    reel_fault_pause(true);
    for (int i = 0; i < s->n; i++) {
        char name[32];
        snprintf(name, sizeof name, "l%d.%s", i / 2, i % 2 ? "v_cache" : "k_cache");
        reel_status st = reel_plan_read_state(p, name, s->bytes + (size_t)i * s->per, s->per);
        cr_assert_eq(st, REEL_OK, "read_state %s: %s", name, reel_ctx_last_error(ctx));
    }
    reel_fault_pause(false);
}

static bool same(const snapshot *a, const snapshot *b, int i)
{
    return memcmp(a->bytes + (size_t)i * a->per, b->bytes + (size_t)i * b->per, a->per) == 0;
}

static reel_step_info info(const script_step *k)
{
    reel_step_info si = { REEL_STEP_INFO_HEAD, .num_tokens = k->num_tokens,
        .num_seqs = k->num_seqs,
        .query_start = k->query_start,
        .positions = k->positions,
        .slot_mapping = k->slots,
        .context_lens = k->context_lens,
        .block_tables = k->block_tables,
        .block_table_stride = STRIDE,
    };
    return si;
}

/* What a walk saw, over every N. */
typedef struct tally {
    int compile_failed, weights_failed, inputs_failed, steps_failed, other_failed;
    int steps_state_kept, steps_state_written; /* failed steps: caches as before / as the retry left them */
    int degraded;                               /* compile OK with a bucket left eager (capture failed) */
    int teardown;                               /* fired in reel_plan_destroy (no status to return) */
    int recovered;                              /* fired, and reel recovered with every call OK (a
                                                   workspace free that waits instead of fencing, an
                                                   allocation retried after the cache is released) */
} tally;

/* The known-good outputs: every step's next_token rows, in order. */
static int32_t good[NSTEPS][MAXTOK];

/* A call that failed names why (one fault fires per arm: the call made
 * again passes). */
static void failed(reel_ctx *ctx, reel_fault_kind k, int64_t n, reel_status st, const char *what)
{
    const char *msg = reel_ctx_last_error(ctx);
    cr_assert(msg && *msg, "%s, %s fault %lld: %s with an empty message", what, reel_fault_kind_name(k),
              (long long)n, reel_status_str(st));
    cr_assert(reel_fault_fired(k), "%s failed (%s: %s) without the %s fault firing", what, reel_status_str(st), msg,
              reel_fault_kind_name(k));
}

/* Runs the script on a compiled plan with its weights written; with
 * `record` (no fault armed) it records the known-good outputs. */
static void run_script(reel_ctx *ctx, reel_plan *p, const model_config *m, reel_fault_kind k, int64_t n,
                       bool record, bool degraded, tally *t)
{
    snapshot before = {0}, mid = {0}, after = {0};
    for (int i = 0; i < NSTEPS; i++) {
        const script_step *sc = &script[i];
        reel_step_info si = info(sc);
        reel_status st = reel_plan_set_input(p, MODEL_INPUT_TOKENS, sc->tokens, sc->num_tokens);
        if (st != REEL_OK) {
            cr_assert(!record, "set_input: %s", reel_ctx_last_error(ctx));
            failed(ctx, k, n, st, "set_input");
            t->inputs_failed++;
            st = reel_plan_set_input(p, MODEL_INPUT_TOKENS, sc->tokens, sc->num_tokens);
            cr_assert_eq(st, REEL_OK, "set_input again: %s", reel_ctx_last_error(ctx));
        }
        snap(ctx, p, m, &before);
        st = reel_step(p, &si);
        if (st != REEL_OK) {
            cr_assert(!record, "step %d: %s: %s", i, reel_status_str(st), reel_ctx_last_error(ctx));
            failed(ctx, k, n, st, "step");
            t->steps_failed++;
            snap(ctx, p, m, &mid);
            /* the inputs set for the step are still set: the same step again */
            st = reel_step(p, &si);
            cr_assert_eq(st, REEL_OK, "step %d after a %s fault at call %lld: %s: %s", i, reel_fault_kind_name(k),
                         (long long)n, reel_status_str(st), reel_ctx_last_error(ctx));
            snap(ctx, p, m, &after);
            bool kept = true;
            for (int c = 0; c < mid.n; c++) {
                cr_assert(same(&mid, &before, c) || same(&mid, &after, c),
                          "step %d, %s fault at call %lld: cache %d is neither as before the step nor as the "
                          "step leaves it",
                          i, reel_fault_kind_name(k), (long long)n, c);
                kept = kept && same(&mid, &before, c);
            }
            if (kept)
                t->steps_state_kept++;
            else
                t->steps_state_written++;
        }
        /* a bucket whose capture failed at compile runs eagerly, counted */
        reel_fallback fb = reel_plan_last_fallback(p);
        cr_assert(fb == sc->expect || (degraded && sc->expect == REEL_FALLBACK_NONE && fb == REEL_FALLBACK_CAPTURE_FAILED),
                  "step %d: fallback %s, expected %s", i, reel_fallback_str(fb), reel_fallback_str(sc->expect));
        const void *out = NULL;
        int64_t rows = 0;
        st = reel_plan_output(p, MODEL_OUTPUT_NEXT, &out, &rows);
        cr_assert_eq(st, REEL_OK, "output: %s", reel_ctx_last_error(ctx));
        cr_assert_eq(rows, sc->num_tokens);
        if (record)
            memcpy(good[i], out, (size_t)rows * sizeof(int32_t));
        else
            cr_assert(memcmp(good[i], out, (size_t)rows * sizeof(int32_t)) == 0,
                      "step %d after a %s fault at call %lld: output differs from the known-good run", i,
                      reel_fault_kind_name(k), (long long)n);
    }
    free(before.bytes);
    free(mid.bytes);
    free(after.bytes);
}

/* Compile and the weights under an armed fault, each made again (the
 * fault disarmed) where it failed. Returns the plan. */
static reel_plan *compile_armed(reel_ctx *ctx, const model_config *m, reel_fault_kind k, int64_t n, tally *t)
{
    reel_graph *g = NULL;
    reel_status st = model_build(ctx, m, &g);
    cr_assert_eq(st, REEL_OK, "model_build: %s", reel_ctx_last_error(ctx));
    reel_compile_opts o = compile_opts();
    reel_plan *p = NULL;
    st = reel_compile(g, &o, &p);
    if (st != REEL_OK) {
        cr_assert_null(p, "a failed compile left a plan");
        failed(ctx, k, n, st, "compile");
        t->compile_failed++;
        st = reel_compile(g, &o, &p);
        cr_assert_eq(st, REEL_OK, "compile after a %s fault at call %lld: %s", reel_fault_kind_name(k), (long long)n,
                     reel_ctx_last_error(ctx));
    }
    reel_graph_destroy(g);
    reel_plan_stats ps = REEL_PLAN_STATS_INIT;
    reel_fault_pause(true);
    cr_assert_eq(reel_plan_stats_get(p, &ps), REEL_OK);
    reel_fault_pause(false);
    if (ps.graphs_captured != 2)
        t->degraded++;
    st = model_write_weights(p, m);
    if (st != REEL_OK) {
        failed(ctx, k, n, st, "write_weights");
        t->weights_failed++;
        st = model_write_weights(p, m);
        cr_assert_eq(st, REEL_OK, "weights after a fault: %s", reel_ctx_last_error(ctx));
    }
    return p;
}

static void record_good(const model_config *m)
{
    reel_ctx *ctx = NULL;
    cr_assert_eq(reel_ctx_create(reel_test_ctx_opts(reel_test_backend()), &ctx), REEL_OK,
                 "backend '%s' is not available: %s", reel_backend_name(reel_test_backend()),
                 reel_ctx_last_error(NULL));
    tally t = {0};
    reel_fault_reset();
    reel_plan *p = compile_armed(ctx, m, REEL_FAULT_ALLOC, 0, &t);
    cr_assert_eq(t.degraded, 0, "the known-good plan captured fewer than its 2 buckets");
    run_script(ctx, p, m, REEL_FAULT_ALLOC, 0, true, false, &t);
    reel_plan_destroy(p);
    reel_ctx_destroy(ctx);
}

/* The walk of one kind; returns the calls of that kind in a whole run. */
static int64_t walk(reel_fault_kind k)
{
    model_config m = config();
    record_good(&m);
    tally t = {0};
    int64_t calls = -1, n = 1;
    int seen_before = 0;
    for (;; n++) {
        reel_ctx *ctx = NULL;
        cr_assert_eq(reel_ctx_create(reel_test_ctx_opts(reel_test_backend()), &ctx), REEL_OK);
        reel_fault_reset();
        reel_fault_arm(k, n);
        int deg = t.degraded;
        reel_plan *p = compile_armed(ctx, &m, k, n, &t);
        run_script(ctx, p, &m, k, n, false, t.degraded != deg, &t);
        bool fired_running = reel_fault_fired(k);
        if (getenv("REEL_FAULT_WALK_VERBOSE"))
            printf("  (last message: %s)\n", reel_ctx_last_error(ctx));
        reel_plan_destroy(p);
        reel_ctx_destroy(ctx);
        bool fired = reel_fault_fired(k);
        int64_t seen = reel_fault_calls(k);
        t.teardown += fired && !fired_running;
        int sum = t.compile_failed + t.weights_failed + t.inputs_failed + t.steps_failed + t.degraded + t.teardown +
                  t.recovered;
        if (fired && sum == seen_before) {
            t.recovered++;
            sum++;
        }
        seen_before = sum;
        if (getenv("REEL_FAULT_WALK_VERBOSE"))
            printf("  %s call %lld: %s, seen so far %d\n", reel_fault_kind_name(k), (long long)n,
                   fired ? "fired" : "not reached", sum);
        reel_fault_reset();
        if (!fired) {
            cr_assert(seen < n, "%s call %lld was made and did not fail", reel_fault_kind_name(k), (long long)n);
            calls = seen;
            break;
        }
    }
    printf("fault walk (%s backend) %-11s: %lld calls; failed: compile %d, weights %d, set_input %d, step %d "
           "(caches kept %d, written as the retry writes %d); compiled with a bucket left eager %d; in destroy %d; recovered %d\n",
           reel_backend_name(reel_test_backend()), reel_fault_kind_name(k), (long long)calls, t.compile_failed,
           t.weights_failed, t.inputs_failed, t.steps_failed, t.steps_state_kept, t.steps_state_written, t.degraded, t.teardown, t.recovered);
    fflush(stdout);
    cr_assert_eq(t.compile_failed + t.weights_failed + t.inputs_failed + t.steps_failed + t.degraded + t.teardown + t.recovered, calls,
                 "every injected %s fault is seen once", reel_fault_kind_name(k));
    return calls;
}

/* The demo model runs on one stream; this graph forks onto two side
 * streams and joins, so events (fork, join, cross-stream waits) are made
 * in capture, replay and eager steps. Steps of 3 and 6 tokens replay, 9
 * and 20 are over the largest bucket (8). No state: only the outputs and
 * the plan's usability are checked. */
static reel_graph *branches(reel_ctx *ctx, const float *w)
{
    reel_graph *g;
    cr_assert_eq(reel_graph_create(ctx, &g), REEL_OK);
    reel_tensor x = reel_input(g, "x", REEL_F32, 2, (int64_t[]){REEL_DIM_TOKENS, 16});
    reel_tensor p1 = reel_param(g, "w1", REEL_F32, 2, (int64_t[]){16, 16});
    reel_tensor p2 = reel_param(g, "w2", REEL_F32, 2, (int64_t[]){16, 16});
    reel_param_bind(g, p1, w);
    reel_param_bind(g, p2, w + 256);
    reel_tensor a = reel_matmul(g, x, p1, false), b = reel_matmul(g, x, p2, false);
    reel_tensor as = reel_softmax(g, a), bs = reel_softmax(g, b);
    reel_set_stream(g, b, 1);
    reel_set_stream(g, bs, 1);
    reel_set_stream(g, as, 2);
    reel_output(g, "y", reel_add(g, as, bs));
    cr_assert_eq(reel_graph_status(g), REEL_OK, "%s", reel_ctx_last_error(ctx));
    return g;
}

#define NBR 4
static const int32_t branch_steps[NBR] = {3, 9, 20, 6};

/* Compiles (again after a failure) and runs the steps; out[k] gets step
 * k's rows (16 floats each). Returns the failures seen. */
static int run_branches(reel_ctx *ctx, reel_fault_kind k, int64_t n, const float *w, const float *x,
                        float out[NBR][20 * 16], bool record, bool *degraded)
{
    int failures = 0;
    reel_graph *g = branches(ctx, w);
    reel_compile_opts o = REEL_COMPILE_OPTS_INIT;
    o.num_buckets = 2;
    o.buckets[0] = 4;
    o.buckets[1] = 8;
    reel_plan *p = NULL;
    reel_status st = reel_compile(g, &o, &p);
    if (st != REEL_OK) {
        cr_assert_null(p);
        failed(ctx, k, n, st, "compile");
        failures++;
        st = reel_compile(g, &o, &p);
        cr_assert_eq(st, REEL_OK, "compile again: %s", reel_ctx_last_error(ctx));
    }
    reel_graph_destroy(g);
    reel_plan_stats ps = REEL_PLAN_STATS_INIT;
    reel_fault_pause(true);
    cr_assert_eq(reel_plan_stats_get(p, &ps), REEL_OK);
    reel_fault_pause(false);
    *degraded = ps.graphs_captured != 2;
    for (int i = 0; i < NBR; i++) {
        reel_step_info si = { REEL_STEP_INFO_HEAD, .num_tokens = branch_steps[i]};
        st = reel_plan_set_input(p, "x", x, branch_steps[i]);
        if (st != REEL_OK) {
            failed(ctx, k, n, st, "set_input");
            failures++;
            cr_assert_eq(reel_plan_set_input(p, "x", x, branch_steps[i]), REEL_OK);
        }
        st = reel_step(p, &si);
        if (st != REEL_OK) {
            cr_assert(!record, "step: %s", reel_ctx_last_error(ctx));
            failed(ctx, k, n, st, "step");
            failures++;
            st = reel_step(p, &si);
            cr_assert_eq(st, REEL_OK, "step %d again after a %s fault at call %lld: %s", i,
                         reel_fault_kind_name(k), (long long)n, reel_ctx_last_error(ctx));
        }
        const void *y;
        int64_t rows;
        cr_assert_eq(reel_plan_output(p, "y", &y, &rows), REEL_OK);
        cr_assert_eq(rows, branch_steps[i]);
        size_t bytes = (size_t)rows * 16 * sizeof(float);
        if (record)
            memcpy(out[i], y, bytes);
        else
            cr_assert(memcmp(out[i], y, bytes) == 0, "step %d after a %s fault at call %lld: output differs", i,
                      reel_fault_kind_name(k), (long long)n);
    }
    reel_plan_destroy(p);
    return failures;
}

static int64_t walk_branches(reel_fault_kind k)
{
    static float w[512], x[20 * 16], good_y[NBR][20 * 16], unused[NBR][20 * 16];
    for (int i = 0; i < 512; i++)
        w[i] = (float)((i * 37) % 17) / 17.0f - 0.5f;
    for (int i = 0; i < 20 * 16; i++)
        x[i] = (float)((i * 11) % 13) / 13.0f;
    reel_ctx *ctx = NULL;
    cr_assert_eq(reel_ctx_create(reel_test_ctx_opts(reel_test_backend()), &ctx), REEL_OK);
    reel_fault_reset();
    bool deg = false;
    run_branches(ctx, k, 0, w, x, good_y, true, &deg);
    cr_assert(!deg, "the known-good plan captured fewer than its 2 buckets");
    reel_ctx_destroy(ctx);
    int reported = 0, quiet = 0, degraded = 0;
    int64_t n = 1;
    for (;; n++) {
        cr_assert_eq(reel_ctx_create(reel_test_ctx_opts(reel_test_backend()), &ctx), REEL_OK);
        reel_fault_reset();
        reel_fault_arm(k, n);
        int f = run_branches(ctx, k, n, w, x, good_y, false, &deg);
        (void)unused;
        if (getenv("REEL_FAULT_WALK_VERBOSE") && f == 0 && !deg)
            printf("  %s call %lld: no call failed (last message: %s)\n", reel_fault_kind_name(k), (long long)n,
                   reel_ctx_last_error(ctx));
        reel_ctx_destroy(ctx);
        bool fired = reel_fault_fired(k);
        int64_t seen = reel_fault_calls(k);
        reel_fault_reset();
        if (!fired) {
            cr_assert(seen < n, "%s call %lld was made and did not fail", reel_fault_kind_name(k), (long long)n);
            break;
        }
        reported += f;
        degraded += f == 0 && deg;
        quiet += f == 0 && !deg;
    }
    printf("fault walk (%s backend) %-11s on three streams: %lld calls; %d refused with a message, %d compiled with "
           "a bucket left eager, %d recovered or in destroy\n",
           reel_backend_name(reel_test_backend()), reel_fault_kind_name(k), (long long)(n - 1), reported, degraded,
           quiet);
    fflush(stdout);
    return n - 1;
}

Test(fault, every_event_failure_on_three_streams_is_refused_or_recovered_and_the_outputs_stay_right)
{
    cr_assert_gt(walk_branches(REEL_FAULT_EVENT), 0);
}
Test(fault, every_failure_of_every_other_kind_on_three_streams_is_refused_or_recovered)
{
    reel_fault_kind ks[] = {REEL_FAULT_ALLOC, REEL_FAULT_STREAM, REEL_FAULT_CAPTURE, REEL_FAULT_INSTANTIATE,
                            REEL_FAULT_LAUNCH, REEL_FAULT_UPDATE, REEL_FAULT_COPY};
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++)
        walk_branches(ks[i]);
}

/* Collectives: one host rank (a failing rank never leaves a peer waiting),
 * an all-reduce inside the graph; a compile that failed aborted its
 * communicator, so compile again gets a new one; steps of 3 tokens (replayed) and 9 (over
 * the largest bucket, eager). Compile's sequence exchange (agree) and the
 * step's communicator sync are counted too. */
static int run_collective(reel_ctx *ctx, reel_fault_kind k, int64_t n, const float *x, float out[2][9 * 16],
                          bool record)
{
    static const int32_t steps[2] = {3, 9};
    int failures = 0;
    reel_comm *comm = NULL;
    reel_fault_pause(true);
    cr_assert_eq(reel_comm_create_group(&ctx, 1, NULL, &comm), REEL_OK, "%s", reel_ctx_last_error(ctx));
    reel_fault_pause(false);
    reel_graph *g;
    cr_assert_eq(reel_graph_create(ctx, &g), REEL_OK);
    reel_tensor in = reel_input(g, "x", REEL_F32, 2, (int64_t[]){REEL_DIM_TOKENS, 16});
    reel_output(g, "y", reel_add(g, reel_all_reduce(g, in), in));
    cr_assert_eq(reel_graph_status(g), REEL_OK, "%s", reel_ctx_last_error(ctx));
    reel_compile_opts o = REEL_COMPILE_OPTS_INIT;
    o.num_buckets = 2;
    o.buckets[0] = 4;
    o.buckets[1] = 8;
    o.comm = comm;
    reel_plan *p = NULL;
    reel_status st = reel_compile(g, &o, &p);
    if (st != REEL_OK) {
        cr_assert_null(p);
        failed(ctx, k, n, st, "compile");
        failures++;
        /* a failed compile aborts its communicator, so that no peer waits on
         * this rank (decisions.md): a new one, on the same context */
        reel_fault_pause(true);
        cr_assert_eq(reel_comm_destroy(comm), REEL_OK, "%s", reel_ctx_last_error(ctx));
        cr_assert_eq(reel_comm_create_group(&ctx, 1, NULL, &comm), REEL_OK, "%s", reel_ctx_last_error(ctx));
        reel_fault_pause(false);
        o.comm = comm;
        st = reel_compile(g, &o, &p);
        cr_assert_eq(st, REEL_OK, "compile again after a %s fault at call %lld: %s", reel_fault_kind_name(k),
                     (long long)n, reel_ctx_last_error(ctx));
    }
    reel_graph_destroy(g);
    for (int i = 0; i < 2; i++) {
        reel_step_info si = { REEL_STEP_INFO_HEAD, .num_tokens = steps[i]};
        cr_assert_eq(reel_plan_set_input(p, "x", x, steps[i]), REEL_OK);
        st = reel_step(p, &si);
        if (st != REEL_OK) {
            cr_assert(!record, "step: %s", reel_ctx_last_error(ctx));
            failed(ctx, k, n, st, "step");
            failures++;
            st = reel_step(p, &si);
            cr_assert_eq(st, REEL_OK, "step %d again after a %s fault at call %lld: %s", i,
                         reel_fault_kind_name(k), (long long)n, reel_ctx_last_error(ctx));
        }
        const void *y;
        int64_t rows;
        cr_assert_eq(reel_plan_output(p, "y", &y, &rows), REEL_OK);
        size_t bytes = (size_t)rows * 16 * sizeof(float);
        if (record)
            memcpy(out[i], y, bytes);
        else
            cr_assert(memcmp(out[i], y, bytes) == 0, "step %d after a %s fault at call %lld: output differs", i,
                      reel_fault_kind_name(k), (long long)n);
    }
    reel_plan_destroy(p);
    cr_assert_eq(reel_comm_destroy(comm), REEL_OK, "%s", reel_ctx_last_error(ctx));
    return failures;
}

Test(fault, every_collective_failure_on_one_host_rank_is_refused_and_the_plan_stays_usable)
{
    if (reel_test_backend() != REEL_BACKEND_HOST) /* one NCCL rank: tests/gpu/test_gpu_comm */
        cr_skip_test("host communicators only");
    static float x[9 * 16], good_y[2][9 * 16];
    for (int i = 0; i < 9 * 16; i++)
        x[i] = (float)((i * 7) % 11) / 11.0f;
    reel_ctx *ctx = NULL;
    cr_assert_eq(reel_ctx_create(reel_test_ctx_opts(REEL_BACKEND_HOST), &ctx), REEL_OK);
    reel_fault_reset();
    run_collective(ctx, REEL_FAULT_COLLECTIVE, 0, x, good_y, true);
    reel_ctx_destroy(ctx);
    int reported = 0, quiet = 0;
    int64_t n = 1;
    for (;; n++) {
        cr_assert_eq(reel_ctx_create(reel_test_ctx_opts(REEL_BACKEND_HOST), &ctx), REEL_OK);
        reel_fault_reset();
        reel_fault_arm(REEL_FAULT_COLLECTIVE, n);
        int f = run_collective(ctx, REEL_FAULT_COLLECTIVE, n, x, good_y, false);
        reel_ctx_destroy(ctx);
        bool fired = reel_fault_fired(REEL_FAULT_COLLECTIVE);
        int64_t seen = reel_fault_calls(REEL_FAULT_COLLECTIVE);
        reel_fault_reset();
        if (!fired) {
            cr_assert(seen < n, "collective call %lld was made and did not fail", (long long)n);
            break;
        }
        reported += f;
        quiet += f == 0;
    }
    printf("fault walk (host backend) collective on one rank: %lld calls; %d refused with a message, %d in "
           "destroy\n",
           (long long)(n - 1), reported, quiet);
    fflush(stdout);
    cr_assert_gt(n - 1, 0);
}

Test(fault, every_allocation_failure_is_refused_with_a_message_and_leaves_the_plan_usable)
{
    cr_assert_gt(walk(REEL_FAULT_ALLOC), 0);
}
Test(fault, every_stream_failure_is_refused_with_a_message_and_leaves_the_plan_usable)
{
    cr_assert_gt(walk(REEL_FAULT_STREAM), 0);
}
Test(fault, every_event_failure_is_refused_with_a_message_and_leaves_the_plan_usable)
{
    cr_assert_gt(walk(REEL_FAULT_EVENT), 0);
}
Test(fault, every_capture_failure_leaves_a_counted_eager_bucket_or_a_refused_compile)
{
    cr_assert_gt(walk(REEL_FAULT_CAPTURE), 0);
}
Test(fault, every_instantiate_failure_leaves_a_counted_eager_bucket_or_a_refused_compile)
{
    cr_assert_gt(walk(REEL_FAULT_INSTANTIATE), 0);
}
Test(fault, every_graph_launch_failure_fails_its_step_and_the_step_again_replays)
{
    cr_assert_gt(walk(REEL_FAULT_LAUNCH), 0);
}
Test(fault, every_copy_failure_is_refused_with_a_message_and_leaves_the_plan_usable)
{
    cr_assert_gt(walk(REEL_FAULT_COPY), 0);
}
/* The host backend has no graph update, the demo model no collective: the
 * walk then makes no call and says so. */
Test(fault, graph_update_and_collective_walks_run_where_those_calls_exist)
{
    int64_t u = walk(REEL_FAULT_UPDATE), c = walk(REEL_FAULT_COLLECTIVE);
    cr_assert_geq(u, 0);
    cr_assert_geq(c, 0);
}
