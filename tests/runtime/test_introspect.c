/* What a plan shows about itself: the log hook (silent by default), node
 * info, the plan's memory at compile, and op spans for traces. Host backend. */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "tests/core/opts.h"
#include "tests/runtime/opgraphs.h"

static reel_ctx *ctx;
static void setup(void) { cr_assert_eq(reel_ctx_create(reel_test_ctx_opts(REEL_BACKEND_HOST), &ctx), REEL_OK); }
static void teardown(void) { reel_ctx_destroy(ctx); }
static void setup_quiet(void)
{
    cr_redirect_stdout();
    cr_redirect_stderr();
    setup();
}

typedef struct logbook {
    int n;
    reel_log_level level[64];
    char msg[64][200];
} logbook;

static void hook(void *user, reel_log_level level, const char *msg)
{
    logbook *lb = user;
    if (lb->n < 64) {
        lb->level[lb->n] = level;
        snprintf(lb->msg[lb->n], sizeof lb->msg[0], "%s", msg);
    }
    lb->n++;
}

static int count(const logbook *lb, const char *needle)
{
    int c = 0;
    for (int i = 0; i < lb->n && i < 64; i++) c += strstr(lb->msg[i], needle) != NULL;
    return c;
}

/* x -> h = x + x (stream 0) -> u = h * w (stream 1), v = h + x (stream 0) -> y = u + v. */
static reel_plan *two_streams(int nb, const int32_t *buckets)
{
    static const float w[4] = {1, 2, 3, 4};
    reel_graph *g;
    cr_assert_eq(reel_graph_create(ctx, &g), REEL_OK);
    int64_t d[2] = {REEL_DIM_TOKENS, 4};
    reel_tensor x = reel_input(g, "x", REEL_F32, 2, d);
    reel_tensor wp = reel_param(g, "w", REEL_F32, 1, &d[1]);
    cr_assert_eq(reel_param_bind(g, wp, w), REEL_OK);
    reel_tensor h = reel_add(g, x, x);
    reel_set_name(g, h, "h");
    reel_tensor u = reel_mul(g, h, wp);
    reel_set_name(g, u, "u");
    cr_assert_eq(reel_set_stream(g, u, 1), REEL_OK);
    reel_tensor v = reel_add(g, h, x);
    reel_set_name(g, v, "v");
    reel_tensor y = reel_add(g, u, v);
    cr_assert_eq(reel_output(g, "y", y), REEL_OK);
    reel_compile_opts o = REEL_COMPILE_OPTS_INIT;
    o.num_buckets = nb;
    memcpy(o.buckets, buckets, (size_t)nb * sizeof *buckets);
    reel_plan *p;
    cr_assert_eq(reel_compile(g, &o, &p), REEL_OK, "%s", reel_ctx_last_error(ctx));
    reel_graph_destroy(g);
    return p;
}

static void run(reel_plan *p, int32_t n)
{
    float x[64 * 4];
    for (int i = 0; i < n * 4; i++) x[i] = (float)i;
    cr_assert_eq(reel_plan_set_input(p, "x", x, n), REEL_OK);
    reel_step_info s = { REEL_STEP_INFO_HEAD, .num_tokens = n};
    cr_assert_eq(reel_step(p, &s), REEL_OK, "%s", reel_ctx_last_error(ctx));
}

Test(introspect, the_log_hook_hears_what_compile_is_doing_before_it_does_it, .init = setup, .fini = teardown)
{
    logbook lb = {0};
    cr_assert_eq(reel_set_log_hook(ctx, hook, &lb, REEL_LOG_DEBUG), REEL_OK);
    reel_plan *p = two_streams(3, (int32_t[]){1, 2, 4});
    /* phases in order: kernels, a layout per bucket (INFO, and the planner's
     * figures at DEBUG), the memory budget, allocation, the warm-up announced
     * before it runs, then the captures */
    const char *order[] = {"compile: 4 nodes on 2 streams", "compile: memory plan of 1 rows",
                           "compile: bucket 0 (1 tokens) laid out", "compile: bucket 2 (4 tokens) laid out",
                           "compile: memory before allocating", "compile: parameters and states allocated",
                           "capture: warm-up, one eager run of bucket 2 (4 tokens",
                           "capture: warm-up done", "capture: bucket 2 (4 tokens) captured",
                           "capture: bucket 0 (1 tokens) captured"};
    int at = 0;
    for (size_t k = 0; k < sizeof order / sizeof order[0]; k++) {
        while (at < lb.n && !strstr(lb.msg[at], order[k])) at++;
        cr_assert_lt(at, lb.n, "no '%s' after the events before it (%d events)", order[k], lb.n);
    }
    cr_expect_eq(count(&lb, "unordered pairs"), 3, "one planner line per bucket");
    reel_plan_destroy(p);
}

Test(introspect, the_log_hook_hears_each_bucket_captured_and_each_eager_step, .init = setup, .fini = teardown)
{
    logbook lb = {0};
    cr_assert_eq(reel_set_log_hook(ctx, hook, &lb, REEL_LOG_DEBUG), REEL_OK);
    reel_plan *p = two_streams(3, (int32_t[]){1, 2, 4});
    cr_assert_eq(count(&lb, "capture: bucket"), 3, "%d events, first '%s'", lb.n, lb.msg[0]);
    cr_assert_eq(count(&lb, "capture: bucket 2 (4 tokens) captured"), 1);
    int at_compile = lb.n;
    run(p, 3);
    cr_assert_eq(lb.n, at_compile, "a replay is not an event");
    run(p, 9);
    cr_assert_eq(count(&lb, "eager (tokens over limit)"), 1, "%s", lb.msg[lb.n - 1]);
    cr_assert_eq(lb.level[lb.n - 1], REEL_LOG_DEBUG);
    reel_plan_destroy(p);
}

Test(introspect, a_hook_hears_nothing_below_its_level, .init = setup, .fini = teardown)
{
    logbook lb = {0};
    cr_assert_eq(reel_set_log_hook(ctx, hook, &lb, REEL_LOG_WARN), REEL_OK);
    cr_assert_eq(reel_set_log_hook(ctx, hook, &lb, (reel_log_level)7), REEL_E_INVALID_ARG);
    reel_plan *p = two_streams(2, (int32_t[]){1, 2});
    run(p, 5);
    cr_assert_eq(lb.n, 0, "'%s'", lb.msg[0]);
    reel_plan_destroy(p);
}

Test(introspect, without_a_hook_the_library_prints_nothing, .init = setup_quiet, .fini = teardown)
{
    reel_plan *p = two_streams(2, (int32_t[]){1, 2});
    run(p, 2);
    run(p, 7);
    reel_plan_destroy(p);
    fflush(stdout);
    fflush(stderr);
    cr_assert_stdout_eq_str("");
    cr_assert_stderr_eq_str("");
}

Test(introspect, binding_a_state_logs_each_graph_re_instantiated, .init = setup, .fini = teardown)
{
    logbook lb = {0};
    og_graph og;
    cr_assert_eq(og_build(ctx, OG_ATTENTION, REEL_F32, 3, &og), REEL_OK);
    reel_compile_opts o = REEL_COMPILE_OPTS_INIT;
    o.num_buckets = 2;
    o.buckets[0] = 1;
    o.buckets[1] = 4;
    o.max_context = 64;
    reel_plan *p;
    cr_assert_eq(reel_compile(og.g, &o, &p), REEL_OK, "%s", reel_ctx_last_error(ctx));
    cr_assert_eq(reel_set_log_hook(ctx, hook, &lb, REEL_LOG_INFO), REEL_OK);
    size_t bytes = (size_t)OG_BLOCKS * OG_BLOCK * OG_KV_HEADS * OG_HEAD_DIM * sizeof(float);
    float *kc = calloc(1, bytes);
    cr_assert_eq(reel_plan_bind_state(p, "k_cache", kc, bytes), REEL_OK, "%s", reel_ctx_last_error(ctx));
    cr_assert_eq(count(&lb, "graph re-instantiated"), 2, "%d events, first '%s'", lb.n, lb.msg[0]);
    reel_plan_destroy(p);
    og_free(&og);
    free(kc);
}

Test(introspect, the_plans_device_memory_is_known_at_compile, .init = setup, .fini = teardown)
{
    reel_plan *p = two_streams(3, (int32_t[]){1, 8, 64});
    reel_plan_stats st = REEL_PLAN_STATS_INIT;
    cr_assert_eq(reel_plan_stats_get(p, &st), REEL_OK);
    reel_plan_memory m = REEL_PLAN_MEMORY_INIT;
    cr_assert_eq(reel_plan_memory_get(p, &m), REEL_OK);
    cr_assert_eq(m.num_buckets, 3);
    cr_assert_eq(m.arena_bytes, st.arena_bytes);
    cr_assert_gt(m.arena_bytes, 0);
    cr_assert_eq(m.static_bytes, st.static_bytes);
    cr_assert_eq(m.param_bytes, 16);
    cr_assert_geq(m.pinned_bytes, m.static_bytes);
    cr_assert_eq(m.graph_bytes_known, 1, "host graphs hold no device memory");
    cr_assert_eq(m.graph_bytes, 0);
    cr_assert_eq(m.stream_ws_bytes, 0, "the host backend's streams hold no workspace");
    cr_assert_eq(m.device_bytes, m.arena_bytes + m.static_bytes);
    for (int b = 0; b < 3; b++) {
        cr_assert_eq(m.bucket_arena_bytes[b], st.bucket_arena_bytes[b]);
        cr_assert_eq(m.bucket_device_bytes[b], st.bucket_arena_bytes[b] + st.static_bytes);
    }
    /* [64, 4] f32 activations: bucket 64 needs more than bucket 1 */
    cr_assert_gt(m.bucket_device_bytes[2], m.bucket_device_bytes[0]);
    reel_plan_destroy(p);
}

Test(introspect, an_older_shorter_struct_is_filled_to_its_size_only, .init = setup, .fini = teardown)
{
    reel_plan *p = two_streams(1, (int32_t[]){4});
    reel_plan_memory m;
    memset(&m, 0xab, sizeof m);
    m.size = offsetof(reel_plan_memory, graph_bytes_known);
    m.version = REEL_VERSION_NUMBER;
    m.magic = REEL_PLAN_MEMORY_MAGIC;
    cr_assert_eq(reel_plan_memory_get(p, &m), REEL_OK);
    cr_assert_eq(m.num_buckets, 1);
    cr_assert_eq(m.device_bytes, (size_t)0xabababababababab, "past the caller's size: untouched");
    m.size = 0;
    cr_assert_eq(reel_plan_memory_get(p, &m), REEL_E_VERSION);
    reel_node_info ni = REEL_NODE_INFO_INIT;
    ni.size = sizeof ni + 8;
    cr_assert_eq(reel_plan_node_info(p, 0, &ni), REEL_E_VERSION, "a newer header's struct");
    reel_plan_destroy(p);
}

Test(introspect, node_info_names_kernel_stream_operands_and_why, .init = setup, .fini = teardown)
{
    reel_plan *p = two_streams(2, (int32_t[]){1, 4});
    reel_plan_stats st = REEL_PLAN_STATS_INIT;
    reel_plan_stats_get(p, &st);
    cr_assert_eq(st.num_nodes, 4);
    int h = -1, u = -1;
    for (int i = 0; i < st.num_nodes; i++) {
        reel_node_info ni = REEL_NODE_INFO_INIT;
        cr_assert_eq(reel_plan_node_info(p, i, &ni), REEL_OK);
        cr_assert_not_null(ni.kernel);
        cr_assert(strncmp(ni.kernel, "host.", 5) == 0, "%s", ni.kernel);
        cr_assert(ni.capturable);
        cr_assert(strstr(ni.why, "highest priority") != NULL, "%s", ni.why);
        if (strcmp(ni.name, "h") == 0) {
            h = i;
            cr_assert_str_eq(ni.op, "add");
            cr_assert_str_eq(ni.in_kind[0], "input");
            cr_assert_eq(ni.in_node[0], -1);
        }
        if (strcmp(ni.name, "u") == 0) {
            u = i;
            cr_assert_eq(ni.stream, 1);
            cr_assert_eq(ni.in_node[0], h, "u reads h from its producer");
            cr_assert_str_eq(ni.in_kind[1], "param");
            cr_assert_str_eq(ni.in[1], "w");
        }
        if (ni.is_output[0])
            cr_assert_str_eq(ni.output_name[0], "y");
        else
            cr_assert_null(ni.output_name[0]);
    }
    cr_assert(h >= 0 && u > h);
    reel_node_info ni = REEL_NODE_INFO_INIT;
    cr_assert_eq(reel_plan_node_info(p, st.num_nodes, &ni), REEL_E_NOT_FOUND);
    reel_plan_destroy(p);
}

Test(introspect, op_spans_cover_each_node_of_a_replay_on_its_stream, .init = setup, .fini = teardown)
{
    reel_plan *p = two_streams(2, (int32_t[]){1, 4});
    reel_op_span sp[64] = { REEL_OP_SPAN_INIT };
    int n = -1;
    cr_assert_eq(reel_plan_take_op_spans(p, sp, 64, &n), REEL_OK);
    cr_assert_eq(n, 0, "nothing recorded before tracing starts");
    cr_assert_eq(reel_plan_trace_ops(p, 1), REEL_OK);
    for (int round = 0; round < 2; round++) {
        run(p, round ? 9 : 3); /* a replay, then an eager step */
        cr_assert_eq(reel_plan_take_op_spans(p, sp, 64, &n), REEL_OK);
        cr_assert_eq(n, 4, "round %d: one span per node", round);
        int seen = 0;
        for (int k = 0; k < n; k++) {
            reel_node_info ni = REEL_NODE_INFO_INIT;
            cr_assert_eq(reel_plan_node_info(p, sp[k].node, &ni), REEL_OK);
            cr_assert_eq(sp[k].stream, ni.stream);
            cr_assert_geq(sp[k].end_us, sp[k].start_us);
            cr_assert_gt(sp[k].start_us, 0);
            seen |= 1 << sp[k].node;
        }
        cr_assert_eq(seen, 0xf);
    }
    cr_assert_eq(reel_plan_take_op_spans(p, sp, 64, &n), REEL_OK);
    cr_assert_eq(n, 0, "taken spans are gone");
    cr_assert_eq(reel_plan_trace_ops(p, 0), REEL_OK);
    run(p, 2);
    cr_assert_eq(reel_plan_take_op_spans(p, sp, 64, &n), REEL_OK);
    cr_assert_eq(n, 0, "tracing stopped");
    reel_plan_destroy(p);
}
