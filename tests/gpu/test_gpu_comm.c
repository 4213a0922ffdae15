/* NCCL with one rank on the CUDA backend (needs a GPU): every collective op
 * captured inside a replayed graph equals the eager step bitwise (with one
 * rank each is the identity), the compile exchange runs over NCCL, a plan
 * keeps its communicator from being destroyed, and an aborted communicator
 * fails the next step with a message instead of hanging. */
#include <criterion/criterion.h>
#include <string.h>

#include "reel/reel.h"

static reel_ctx *ctx;
static reel_comm *comm;

static void setup(void)
{
    reel_ctx_opts o = REEL_CTX_OPTS_INIT;
    o.backend = REEL_BACKEND_CUDA;
    cr_assert_eq(reel_ctx_create(&o, &ctx), REEL_OK);
    reel_comm_opts co = REEL_COMM_OPTS_INIT;
    co.timeout_ms = 20000;
    cr_assert_eq(reel_comm_create_group(&ctx, 1, &co, &comm), REEL_OK, "%s", reel_ctx_last_error(ctx));
}

static void teardown(void)
{
    reel_comm_destroy(comm);
    reel_ctx_destroy(ctx);
}

static reel_plan *compile_op(int op, bool eager)
{
    reel_graph *g = NULL;
    cr_assert_eq(reel_graph_create(ctx, &g), REEL_OK);
    int64_t d[] = {REEL_DIM_TOKENS, 2, 6};
    reel_tensor x = reel_input(g, "x", REEL_BF16, 3, d), y;
    switch (op) {
    case 0: y = reel_all_reduce(g, x); break;
    case 1: y = reel_all_gather(g, x, 2, 1); break;
    case 2: y = reel_reduce_scatter(g, x, 1, 1); break;
    default: y = reel_all_to_all(g, x, 2, 1); break;
    }
    reel_output(g, "y", y);
    reel_compile_opts o = REEL_COMPILE_OPTS_INIT;
    o.num_buckets = 2;
    o.buckets[0] = 4;
    o.buckets[1] = 8;
    o.no_capture = eager;
    o.comm = comm;
    reel_plan *p = NULL;
    cr_assert_eq(reel_compile(g, &o, &p), REEL_OK, "op %d: %s", op, reel_ctx_last_error(ctx));
    reel_graph_destroy(g);
    return p;
}

static void step(reel_plan *p, const uint16_t *x, uint16_t *y)
{
    cr_assert_eq(reel_plan_set_input(p, "x", x, 5), REEL_OK);
    reel_step_info s = {.num_tokens = 5};
    cr_assert_eq(reel_step(p, &s), REEL_OK, "%s", reel_ctx_last_error(ctx));
    const void *out;
    int64_t rows;
    cr_assert_eq(reel_plan_output(p, "y", &out, &rows), REEL_OK);
    memcpy(y, out, 5 * 12 * sizeof *y);
}

Test(gpu_comm, every_collective_replays_as_it_runs_eagerly_over_nccl, .init = setup, .fini = teardown)
{
    uint16_t x[5 * 12], a[5 * 12], b[5 * 12];
    for (int i = 0; i < 5 * 12; i++)
        x[i] = (uint16_t)(0x3f80 + i); /* bf16 values near 1 */
    for (int op = 0; op < 4; op++) {
        reel_plan *pr = compile_op(op, false), *pe = compile_op(op, true);
        step(pr, x, a);
        step(pe, x, b);
        reel_plan_stats st;
        reel_plan_stats_get(pr, &st);
        cr_assert_eq(st.replays, 1, "op %d did not replay", op);
        cr_assert(!memcmp(a, b, sizeof a), "op %d: replay != eager", op);
        cr_assert(!memcmp(a, x, sizeof a), "op %d: one rank is not the identity", op);
        reel_plan_destroy(pr);
        reel_plan_destroy(pe);
    }
}

Test(gpu_comm, a_plan_keeps_its_nccl_communicator_and_an_abort_fails_the_next_step, .init = setup,
     .fini = teardown)
{
    uint16_t x[5 * 12] = {0}, y[5 * 12];
    reel_plan *p = compile_op(0, false);
    step(p, x, y);
    cr_assert_eq(reel_comm_destroy(comm), REEL_E_INVALID_USAGE);
    cr_assert_eq(reel_comm_async_error(comm), REEL_OK);
    cr_assert_eq(reel_comm_abort(comm), REEL_OK);
    cr_assert_eq(reel_plan_set_input(p, "x", x, 5), REEL_OK);
    reel_step_info s = {.num_tokens = 5};
    cr_assert_eq(reel_step(p, &s), REEL_E_BACKEND);
    cr_assert(strstr(reel_ctx_last_error(ctx), "aborted"), "%s", reel_ctx_last_error(ctx));
    reel_plan_destroy(p);
}
