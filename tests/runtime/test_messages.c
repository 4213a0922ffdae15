/* Every non-OK status comes with a message: on the context when there is
 * one, and for calls that have none to record on (reel_ctx_create, a NULL
 * handle) in the calling thread's last error, read with
 * reel_ctx_last_error(NULL). */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "tests/core/opts.h"

static reel_ctx *ctx;
static void setup(void) { cr_assert_eq(reel_ctx_create(reel_test_ctx_opts(REEL_BACKEND_HOST), &ctx), REEL_OK); }
static void teardown(void) { reel_ctx_destroy(ctx); }

static bool has(const char *m, const char *what) { return !what || strstr(m, what); }

/* st is not OK, and the message (read from c, or the thread's for NULL) is
 * not empty and holds what (when not NULL). The message is cleared first
 * through a successful compile, so a stale one cannot pass. */
#define SAYS(c, call, want, what)                                                                       \
    do {                                                                                                \
        reel_status st_ = (call);                                                                       \
        const char *m_ = reel_ctx_last_error(c);                                                        \
        cr_assert_eq(st_, (want), "%s: %s (%s)", #call, reel_status_str(st_), m_);                      \
        cr_assert(m_ && *m_, "%s returned %s with an empty message", #call, reel_status_str(st_));     \
        cr_assert(has(m_, (what)), "%s: message '%s' lacks '%s'", #call, m_, (what) ? (what) : "");    \
    } while (0)

static reel_graph *one_add(void)
{
    reel_graph *g;
    cr_assert_eq(reel_graph_create(ctx, &g), REEL_OK);
    int64_t d[] = {REEL_DIM_TOKENS, 4};
    reel_tensor a = reel_input(g, "a", REEL_F32, 2, d), b = reel_input(g, "b", REEL_F32, 2, d);
    cr_assert_eq(reel_output(g, "sum", reel_add(g, a, b)), REEL_OK);
    return g;
}

/* A plan compiled right now: compile clears the context's message. */
static reel_plan *fresh_plan(reel_graph *g)
{
    reel_plan *p;
    cr_assert_eq(reel_compile(g, NULL, &p), REEL_OK, "%s", reel_ctx_last_error(ctx));
    cr_assert_str_empty(reel_ctx_last_error(ctx));
    return p;
}

Test(messages, compile_stats_and_placement_refusals_say_why, .init = setup, .fini = teardown)
{
    reel_graph *g = one_add();
    reel_plan *p = fresh_plan(g);
    SAYS(ctx, reel_compile(g, NULL, NULL), REEL_E_INVALID_ARG, "out");
    reel_plan_destroy(p);
    p = fresh_plan(g);
    SAYS(ctx, reel_plan_stats_get(p, NULL), REEL_E_INVALID_ARG, "stats");
    reel_plan_destroy(p);
    p = fresh_plan(g);
    reel_placement pl = REEL_PLACEMENT_INIT;
    SAYS(ctx, reel_plan_placement(p, 99, 0, &pl), REEL_E_NOT_FOUND, "bucket 99");
    reel_plan_destroy(p);
    p = fresh_plan(g);
    SAYS(ctx, reel_plan_placement(p, 0, -1, &pl), REEL_E_NOT_FOUND, "-1");
    reel_plan_destroy(p);
    p = fresh_plan(g);
    SAYS(ctx, reel_plan_placement(p, 0, 1000, &pl), REEL_E_NOT_FOUND, "1000");
    reel_plan_destroy(p);
    reel_graph_destroy(g);
}

/* Found by tests/fuzz/fuzz_graph (corpus_graph/seed_add): node_info past the
 * last node, and the other introspection refusals, returned with no message. */
Test(messages, introspection_refusals_say_why, .init = setup, .fini = teardown)
{
    reel_graph *g = one_add();
    reel_plan *p = fresh_plan(g);
    reel_node_info ni = REEL_NODE_INFO_INIT;
    SAYS(ctx, reel_plan_node_info(p, 1, &ni), REEL_E_NOT_FOUND, "node 1");
    reel_plan_destroy(p);
    p = fresh_plan(g);
    SAYS(ctx, reel_plan_node_info(p, -1, &ni), REEL_E_NOT_FOUND, "node -1");
    reel_plan_destroy(p);
    p = fresh_plan(g);
    reel_node_info zero = {0};
    SAYS(ctx, reel_plan_node_info(p, 0, &zero), REEL_E_VERSION, "REEL_NODE_INFO_INIT");
    reel_plan_destroy(p);
    p = fresh_plan(g);
    reel_plan_memory mem = {0};
    SAYS(ctx, reel_plan_memory_get(p, &mem), REEL_E_VERSION, "REEL_PLAN_MEMORY_INIT");
    reel_plan_destroy(p);
    p = fresh_plan(g);
    int n;
    SAYS(ctx, reel_plan_take_op_spans(p, NULL, -1, &n), REEL_E_INVALID_ARG, "cap");
    reel_plan_destroy(p);
    SAYS(NULL, reel_plan_trace_ops(NULL, 1), REEL_E_INVALID_ARG, "trace_ops");
    SAYS(NULL, reel_plan_take_op_spans(NULL, NULL, 0, &n), REEL_E_INVALID_ARG, "take_op_spans");
    reel_graph_destroy(g);
}

Test(messages, calls_without_a_handle_say_why_in_the_threads_last_error)
{
    reel_plan_stats st = REEL_PLAN_STATS_INIT;
    reel_placement pl = REEL_PLACEMENT_INIT;
    reel_plan *p = NULL;
    SAYS(NULL, reel_compile(NULL, NULL, &p), REEL_E_INVALID_ARG, "graph");
    SAYS(NULL, reel_compile(NULL, NULL, NULL), REEL_E_INVALID_ARG, NULL);
    SAYS(NULL, reel_plan_stats_get(NULL, &st), REEL_E_INVALID_ARG, "stats");
    SAYS(NULL, reel_plan_placement(NULL, 0, 0, &pl), REEL_E_INVALID_ARG, "placement");
    SAYS(NULL, reel_plan_trim(NULL), REEL_E_INVALID_ARG, "trim");
    SAYS(NULL, reel_step(NULL, NULL), REEL_E_INVALID_ARG, "step");
    reel_graph *g = NULL;
    SAYS(NULL, reel_graph_create(NULL, &g), REEL_E_INVALID_ARG, "context");
    SAYS(NULL, reel_output(NULL, "x", (reel_tensor){1}), REEL_E_INVALID_ARG, "graph");
    SAYS(NULL, reel_set_stream(NULL, (reel_tensor){1}, 0), REEL_E_INVALID_ARG, "graph");
    reel_backend_kind k;
    SAYS(NULL, reel_backend_parse("gpu", &k), REEL_E_INVALID_ARG, "gpu");
}

Test(messages, a_context_that_cannot_be_created_says_why_in_the_threads_last_error)
{
    reel_ctx *c = (reel_ctx *)1;
    SAYS(NULL, reel_ctx_create(NULL, NULL), REEL_E_INVALID_ARG, "out");
    reel_ctx_opts o = REEL_CTX_OPTS_INIT;
    o.size = 0;
    SAYS(NULL, reel_ctx_create(&o, &c), REEL_E_VERSION, "REEL_CTX_OPTS_INIT");
    cr_assert_null(c);
    reel_ctx_opts bad = REEL_CTX_OPTS_INIT;
    bad.backend = 7;
    SAYS(NULL, reel_ctx_create(&bad, &c), REEL_E_INVALID_ARG, "7");
    /* An invalid REEL_BACKEND names the variable and its value. */
    cr_assert_eq(setenv("REEL_BACKEND", "bogus", 1), 0);
    SAYS(NULL, reel_ctx_create(NULL, &c), REEL_E_INVALID_ARG, "REEL_BACKEND");
    SAYS(NULL, reel_ctx_create(NULL, &c), REEL_E_INVALID_ARG, "bogus");
    cr_assert_null(c);
    /* The CUDA backend where there is none (a build without CUDA, or no
     * GPU): the backend's reason survives the context it was written to. */
    reel_ctx_opts cu = REEL_CTX_OPTS_INIT;
    cu.backend = REEL_BACKEND_CUDA;
    reel_status st = reel_ctx_create(&cu, &c);
    if (st == REEL_OK) {
        reel_ctx_destroy(c);
        cr_log_info("a CUDA device is visible: the no-GPU refusal is not exercised");
    } else {
        cr_assert_null(c);
        cr_assert_str_not_empty(reel_ctx_last_error(NULL), "cuda context refused (%s) without a message",
                                reel_status_str(st));
        cr_assert(strstr(reel_ctx_last_error(NULL), "cuda"), "%s", reel_ctx_last_error(NULL));
    }
}

/* Compile's own allocations name what the bytes were for after the
 * "compile: cannot allocate N bytes for" prefix, like parameters and
 * states (found by fuzz_graph: the message was the backend's alone). Rows
 * of 2^24 floats at a bucket of 2^16 tokens ask for 4 TiB, more than any
 * machine: first for the activation arena (the sum lives there), then,
 * with an output of one int per row (argmax), for the step region that
 * stages the input. */
static reel_compile_opts huge_bucket(void)
{
    reel_compile_opts o = REEL_COMPILE_OPTS_INIT;
    o.num_buckets = 1;
    o.buckets[0] = 1 << 16;
    return o;
}

Test(messages, compile_refuses_an_arena_it_cannot_allocate_naming_the_arena, .init = setup, .fini = teardown)
{
    reel_graph *g;
    cr_assert_eq(reel_graph_create(ctx, &g), REEL_OK);
    int64_t d[] = {REEL_DIM_TOKENS, 1 << 24};
    reel_tensor a = reel_input(g, "a", REEL_F32, 2, d);
    cr_assert_eq(reel_output(g, "y", reel_softmax(g, reel_add(g, a, a))), REEL_OK);
    reel_compile_opts o = huge_bucket();
    reel_plan *p = NULL;
    /* refused by the budget, before anything is allocated, naming the arena */
    SAYS(ctx, reel_compile(g, &o, &p), REEL_E_OOM, "compile: the plan needs");
    cr_assert(strstr(reel_ctx_last_error(ctx), "the activation arena"), "%s", reel_ctx_last_error(ctx));
    cr_assert_null(p);
    reel_graph_destroy(g);
}

Test(messages, compile_refuses_a_step_region_it_cannot_allocate_naming_the_step_region, .init = setup,
     .fini = teardown)
{
    reel_graph *g;
    cr_assert_eq(reel_graph_create(ctx, &g), REEL_OK);
    int64_t d[] = {REEL_DIM_TOKENS, 1 << 24};
    reel_tensor a = reel_input(g, "a", REEL_F32, 2, d);
    cr_assert_eq(reel_output(g, "i", reel_argmax(g, a)), REEL_OK);
    reel_compile_opts o = huge_bucket();
    reel_plan *p = NULL;
    SAYS(ctx, reel_compile(g, &o, &p), REEL_E_OOM, "compile: the plan needs");
    cr_assert(strstr(reel_ctx_last_error(ctx), "the step region"), "%s", reel_ctx_last_error(ctx));
    cr_assert_null(p);
    reel_graph_destroy(g);
}
