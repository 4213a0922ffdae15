/* NCCL with one rank on the CUDA backend (needs a GPU): every collective op
 * captured inside a replayed graph equals the eager step bitwise (with one
 * rank each is the identity), the compile exchange runs over NCCL, a plan
 * keeps its communicator from being destroyed, and an aborted communicator
 * fails the next step with a message instead of hanging. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
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
    reel_step_info s = { REEL_STEP_INFO_HEAD, .num_tokens = 5};
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
        reel_plan_stats st = REEL_PLAN_STATS_INIT;
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
    reel_step_info s = { REEL_STEP_INFO_HEAD, .num_tokens = 5};
    cr_assert_eq(reel_step(p, &s), REEL_E_BACKEND);
    cr_assert(strstr(reel_ctx_last_error(ctx), "aborted"), "%s", reel_ctx_last_error(ctx));
    reel_plan_destroy(p);
}

/* ---- the attention layouts over NCCL with one rank ------------------------
 * DCP (both exchanges) and CP built by their helpers, compiled with the
 * NCCL communicator: replayed graphs equal eager steps bitwise, and with
 * one rank the layout changes nothing: they equal plain attention bitwise
 * (every weight of the combine is exactly 1, every collective the
 * identity). A mixed step: a prefill run (the tensor-core prefill), decodes
 * split over chunks, padding. Plain attention at 24 tokens is the one-kernel
 * decode, which attends the run's tokens itself (docs/attention.md), so the
 * run's rows (the layouts' prefill kernel) are held to the bf16 tolerance of
 * two roundings, the others to the bits. */
enum { LH = 8, LKV = 2, LD = 64, LBS = 16, LSEQ = 4, LBT = 64, LT = 24 };

static float bf16_f(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static reel_plan *layout_plan(int kind, bool eager)
{
    reel_graph *g = NULL;
    cr_assert_eq(reel_graph_create(ctx, &g), REEL_OK);
    int64_t qd[2] = {REEL_DIM_TOKENS, LH * LD}, kd[2] = {REEL_DIM_TOKENS, LKV * LD};
    int64_t cd[4] = {LSEQ * LBT, LBS, LKV, LD};
    reel_attn_params ap = { REEL_ATTN_PARAMS_HEAD, LH, LKV, LD, LBS, 0.0f};
    reel_tensor q = reel_input(g, "q", REEL_BF16, 2, qd), k = reel_input(g, "k", REEL_BF16, 2, kd),
                v = reel_input(g, "v", REEL_BF16, 2, kd);
    reel_tensor kc = reel_state(g, "kc", REEL_BF16, 4, cd), vc = reel_state(g, "vc", REEL_BF16, 4, cd), y, lse;
    if (kind == 0) {
        y = reel_paged_attention(g, q, k, v, kc, vc, &ap);
    } else if (kind <= 2) {
        reel_dcp_layout d = { REEL_DCP_LAYOUT_HEAD, 1, 0, 16, kind == 1 ? REEL_DCP_GATHER_SCATTER : REEL_DCP_ALL_TO_ALL};
        cr_assert_eq(reel_dcp_attention(g, q, k, v, kc, vc, &ap, &d, &y, &lse), REEL_OK, "%s",
                     reel_ctx_last_error(ctx));
    } else {
        y = reel_cp_attention(g, q, k, v, kc, vc, &ap, 1);
    }
    reel_output(g, "y", y);
    reel_compile_opts o = REEL_COMPILE_OPTS_INIT;
    o.num_buckets = 2;
    o.buckets[0] = 8, o.buckets[1] = 32;
    o.max_context = LBT * LBS;
    o.max_seqs = LSEQ;
    o.no_capture = eager;
    o.comm = kind ? comm : NULL;
    reel_plan *p = NULL;
    cr_assert_eq(reel_compile(g, &o, &p), REEL_OK, "layout %d: %s", kind, reel_ctx_last_error(ctx));
    reel_graph_destroy(g);
    return p;
}

static void layout_step(reel_plan *p, const uint16_t *q, const uint16_t *k, const uint16_t *v, uint16_t *y)
{
    /* a prefill of 17, three decodes at 700, 65 and 1, 4 padding tokens */
    static const int32_t qlen[LSEQ] = {17, 1, 1, 1}, ctx_[LSEQ] = {17, 700, 65, 1};
    int32_t qs[LSEQ + 1], pos[LT], slot[LT], bt[LSEQ * LBT];
    int32_t n = 0;
    qs[0] = 0;
    for (int s = 0; s < LSEQ; s++) {
        for (int b = 0; b < LBT; b++)
            bt[s * LBT + b] = s * LBT + (b * 7) % LBT;
        for (int i = 0; i < qlen[s]; i++, n++) {
            pos[n] = ctx_[s] - qlen[s] + i;
            slot[n] = bt[s * LBT + pos[n] / LBS] * LBS + pos[n] % LBS;
        }
        qs[s + 1] = n;
    }
    for (; n < LT; n++)
        pos[n] = 0, slot[n] = -1;
    reel_step_info si = { REEL_STEP_INFO_HEAD, LT, LSEQ, qs, pos, slot, ctx_, bt, LBT};
    cr_assert_eq(reel_plan_set_input(p, "q", q, LT), REEL_OK);
    cr_assert_eq(reel_plan_set_input(p, "k", k, LT), REEL_OK);
    cr_assert_eq(reel_plan_set_input(p, "v", v, LT), REEL_OK);
    cr_assert_eq(reel_step(p, &si), REEL_OK, "%s", reel_ctx_last_error(ctx));
    const void *out;
    int64_t rows;
    cr_assert_eq(reel_plan_output(p, "y", &out, &rows), REEL_OK);
    memcpy(y, out, sizeof(uint16_t) * LT * LH * LD);
}

Test(gpu_comm, dcp_and_cp_over_one_nccl_rank_replay_as_eager_and_equal_plain_attention, .init = setup,
     .fini = teardown)
{
    static uint16_t q[LT * LH * LD], k[LT * LKV * LD], v[LT * LKV * LD], plain[LT * LH * LD], a[LT * LH * LD],
        b[LT * LH * LD];
    uint32_t x = 12345;
    for (size_t i = 0; i < sizeof q / 2; i++)
        q[i] = (uint16_t)(0x3c00 + ((x = x * 1664525u + 1013904223u) >> 24) - 0x80 * (i & 1)); /* bf16 ~ +-[0.5, 2] */
    for (size_t i = 0; i < sizeof k / 2; i++) {
        k[i] = (uint16_t)(0x3e00 + ((x = x * 1664525u + 1013904223u) >> 25));
        v[i] = (uint16_t)(0xbe00 + ((x = x * 1664525u + 1013904223u) >> 25));
    }
    reel_plan *p0 = layout_plan(0, false);
    layout_step(p0, q, k, v, plain);
    reel_plan_destroy(p0);
    for (int kind = 1; kind <= 3; kind++) {
        reel_plan *pr = layout_plan(kind, false), *pe = layout_plan(kind, true);
        layout_step(pr, q, k, v, a);
        layout_step(pe, q, k, v, b);
        reel_plan_stats st = REEL_PLAN_STATS_INIT;
        reel_plan_stats_get(pr, &st);
        cr_assert_eq(st.replays, 1, "layout %d did not replay", kind);
        cr_assert(!memcmp(a, b, sizeof a), "layout %d: replay != eager", kind);
        const size_t run = (size_t)17 * LH * LD; /* the prefill run's rows come first */
        cr_assert(!memcmp(a + run, plain + run, sizeof a - run * sizeof a[0]),
                  "layout %d: one rank differs from plain attention", kind);
        for (size_t i = 0; i < run; i++) {
            float fa = bf16_f(a[i]), fp = bf16_f(plain[i]);
            cr_assert(fabsf(fa - fp) <= (1.0f / 64) * fmaxf(1.0f, fabsf(fp)),
                      "layout %d: run row %zu, dim %zu: %g against plain attention's %g", kind, i / (LH * LD),
                      i % (LH * LD), (double)fa, (double)fp);
        }
        reel_plan_destroy(pr);
        reel_plan_destroy(pe);
    }
}
