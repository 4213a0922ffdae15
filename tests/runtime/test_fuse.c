/* Rope fusion at compile (runtime/fuse_rope.c): fires where two rope ops feed
 * a paged attention's q and k, leaves every other shape alone, and gives the
 * bits of the unfused plan. Parameterized over backends (REEL_TEST_BACKEND):
 * host here, CUDA in the gpu suite. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/plan.h"
#include "tests/core/opts.h"
#include "tests/runtime/opgraphs.h"

static reel_ctx *ctx;
static void setup(void)
{
    cr_assert_eq(reel_ctx_create(reel_test_ctx_opts(reel_test_backend()), &ctx), REEL_OK,
                 "backend '%s' is not available", reel_backend_name(reel_test_backend()));
}
static void teardown(void) { reel_ctx_destroy(ctx); }

static reel_compile_opts opts(void)
{
    reel_compile_opts o = REEL_COMPILE_OPTS_INIT;
    o.num_buckets = 3;
    memcpy(o.buckets, (int32_t[]){1, 4, 8}, 3 * sizeof(int32_t));
    return o;
}

static reel_plan *compile(reel_graph *g, bool fuse)
{
    reel_compile_opts o = opts();
    reel_plan_debug dbg = {.not_capturable_node = -1, .no_fuse = !fuse};
    reel_plan *p = NULL;
    cr_assert_eq(reel_compile_debug(g, &o, &dbg, &p), REEL_OK, "%s", reel_ctx_last_error(ctx));
    return p;
}

static int nodes_of(reel_plan *p)
{
    reel_plan_stats st = REEL_PLAN_STATS_INIT;
    cr_assert_eq(reel_plan_stats_get(p, &st), REEL_OK);
    return st.num_nodes;
}

static void same_output(reel_plan *a, reel_plan *b, const char *name, int32_t n, const char *what)
{
    const void *da, *db;
    int64_t ra, rb, re;
    reel_dtype dt;
    cr_assert_eq(reel_plan_output(a, name, &da, &ra), REEL_OK, "%s", reel_ctx_last_error(ctx));
    cr_assert_eq(reel_plan_output(b, name, &db, &rb), REEL_OK, "%s", reel_ctx_last_error(ctx));
    cr_assert_eq(reel_plan_output_desc(a, name, &dt, &re), REEL_OK);
    cr_assert_eq(ra, n);
    cr_assert_eq(rb, n);
    cr_assert(memcmp(da, db, (size_t)(re * n) * reel_dtype_size(dt)) == 0, "%s: output '%s' differs fused vs unfused",
              what, name);
}

Test(fuse, rope_into_attention_gives_the_unfused_bits, .init = setup, .fini = teardown)
{
    reel_dtype dts[3] = {REEL_F32, REEL_F16, REEL_BF16};
    for (int d = 0; d < 3; d++) {
        og_graph ga, gb;
        cr_assert_eq(og_build(ctx, OG_ATTENTION_ROPE, dts[d], 17, &ga), REEL_OK, "%s", reel_ctx_last_error(ctx));
        cr_assert_eq(og_build(ctx, OG_ATTENTION_ROPE, dts[d], 17, &gb), REEL_OK);
        reel_plan *f = compile(ga.g, true), *u = compile(gb.g, false);
        cr_assert_eq(nodes_of(u), 3, "unfused: rope, rope, attention");
        cr_assert_eq(nodes_of(f), 1, "fused: one attention node");
        /* Several steps over the same caches: later steps read what the fused
         * KV write stored (rotated k) through the cache. */
        int32_t ns[4] = {8, 1, 3, 4};
        for (int k = 0; k < 4; k++) {
            og_step sa, sb;
            cr_assert_eq(og_make_step(f, OG_ATTENTION_ROPE, dts[d], ns[k], 100 + k, 30, &sa), REEL_OK);
            cr_assert_eq(og_make_step(u, OG_ATTENTION_ROPE, dts[d], ns[k], 100 + k, 30, &sb), REEL_OK);
            cr_assert_eq(reel_step(f, &sa.info), REEL_OK, "%s", reel_ctx_last_error(ctx));
            cr_assert_eq(reel_step(u, &sb.info), REEL_OK, "%s", reel_ctx_last_error(ctx));
            char what[64];
            snprintf(what, sizeof what, "%s step %d (%d tokens)", reel_dtype_name(dts[d]), k, ns[k]);
            same_output(f, u, "y", ns[k], what);
            same_output(f, u, "kr", ns[k], what);
        }
        size_t bytes = (size_t)OG_BLOCKS * OG_BLOCK * OG_KV_HEADS * OG_HEAD_DIM * reel_dtype_size(dts[d]);
        void *ca = malloc(bytes), *cb = malloc(bytes);
        cr_assert_eq(reel_plan_read_state(f, "k_cache", ca, bytes), REEL_OK, "%s", reel_ctx_last_error(ctx));
        cr_assert_eq(reel_plan_read_state(u, "k_cache", cb, bytes), REEL_OK);
        cr_assert(memcmp(ca, cb, bytes) == 0, "%s: k caches differ", reel_dtype_name(dts[d]));
        free(ca);
        free(cb);
        reel_plan_destroy(f);
        reel_plan_destroy(u);
        og_free(&ga);
        og_free(&gb);
    }
}

/* One rope-and-attention graph with a twist; returns the fused plan's node
 * count (3 when nothing fused, 1 when both ropes went in). */
enum { TW_NONE, TW_Q_READ_TWICE, TW_OTHER_POSITIONS, TW_ROT_DIMS_DIFFER, TW_OTHER_STREAM, TW_OTHER_HEAD_DIM };
static int fused_nodes(int twist)
{
    const int H = OG_HEADS, KV = OG_KV_HEADS, D = OG_HEAD_DIM;
    reel_graph *g;
    cr_assert_eq(reel_graph_create(ctx, &g), REEL_OK);
    int64_t qd[2] = {REEL_DIM_TOKENS, H * D}, kd[2] = {REEL_DIM_TOKENS, KV * D}, pd[1] = {REEL_DIM_TOKENS};
    int64_t cd[4] = {64, OG_BLOCK, KV, D};
    reel_tensor pos = reel_positions(g);
    reel_tensor kpos = twist == TW_OTHER_POSITIONS ? reel_input(g, "kpos", REEL_I32, 1, pd) : pos;
    int rd = D / 2, hd = twist == TW_OTHER_HEAD_DIM ? D / 2 : D;
    reel_tensor q = reel_rope(g, reel_input(g, "q", REEL_F32, 2, qd), pos, hd, rd, 10000.f);
    reel_tensor k = reel_rope(g, reel_input(g, "k", REEL_F32, 2, kd), kpos, hd,
                              twist == TW_ROT_DIMS_DIFFER ? D : rd, 10000.f);
    if (twist == TW_OTHER_STREAM)
        cr_assert_eq(reel_set_stream(g, k, 1), REEL_OK);
    reel_attn_params ap = { REEL_ATTN_PARAMS_HEAD, H, KV, D, OG_BLOCK, 0.f};
    reel_tensor y = reel_paged_attention(g, q, k, reel_input(g, "v", REEL_F32, 2, kd),
                                         reel_state(g, "k_cache", REEL_F32, 4, cd),
                                         reel_state(g, "v_cache", REEL_F32, 4, cd), &ap);
    reel_output(g, "y", y);
    if (twist == TW_Q_READ_TWICE)
        reel_output(g, "q2", reel_add(g, q, q));
    cr_assert_eq(reel_graph_status(g), REEL_OK, "%s", reel_ctx_last_error(ctx));
    reel_plan *p = compile(g, true);
    int n = nodes_of(p) - (twist == TW_Q_READ_TWICE ? 1 : 0);
    reel_plan_destroy(p);
    reel_graph_destroy(g);
    return n;
}

Test(fuse, rope_fuses_only_where_nothing_else_needs_it_apart, .init = setup, .fini = teardown)
{
    cr_assert_eq(fused_nodes(TW_NONE), 1);
    cr_assert_eq(fused_nodes(TW_Q_READ_TWICE), 3, "the rotated q has another reader");
    cr_assert_eq(fused_nodes(TW_OTHER_POSITIONS), 3, "q and k rotate at different positions");
    cr_assert_eq(fused_nodes(TW_ROT_DIMS_DIFFER), 3, "q and k rotate different dims");
    cr_assert_eq(fused_nodes(TW_OTHER_STREAM), 3, "the k rope runs on another stream");
    cr_assert_eq(fused_nodes(TW_OTHER_HEAD_DIM), 3, "the rope's heads are not the attention's");
}
