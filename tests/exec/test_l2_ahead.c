/* The l2_ahead hint (exec/schedule.c): a kernel that may ask the device's
 * cache for later weights is given the weights of the matmuls after it on
 * its stream, in schedule order, skipping other ops, within half the cache, stopping at the next kernel that
 * takes the hint itself. The host backend has no cache to fill, so these
 * tests give its context a cache size and the attention's impl the flag;
 * on CUDA the hint's kernels run in the gpu suite (a hint changes no bit:
 * tests/gpu/test_gpu_plan.c). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "exec/plan.h"
#include "tests/core/opts.h"
#include "tests/exec/opgraphs.h"

static reel_ctx *ctx;
static void setup(void) { cr_assert_eq(reel_ctx_create(reel_test_ctx_opts(REEL_BACKEND_HOST), &ctx), REEL_OK); }
static void teardown(void) { reel_ctx_destroy(ctx); }

enum { H = OG_HEADS, KV = OG_KV_HEADS, D = OG_HEAD_DIM, QW = H * D, KW = KV * D, F = 128 };

static reel_tensor weight(reel_graph *g, const char *name, int64_t n, int64_t k)
{
    int64_t d[2] = {n, k};
    reel_tensor t = reel_param(g, name, REEL_F32, 2, d);
    reel_param_defer(g, t); /* never stepped: no data */
    return t;
}

static reel_tensor attention(reel_graph *g, reel_tensor x, const char *kc, const char *vc, int layer)
{
    char nq[8], nk[8], nv[8];
    snprintf(nq, sizeof nq, "wq%d", layer);
    snprintf(nk, sizeof nk, "wk%d", layer);
    snprintf(nv, sizeof nv, "wv%d", layer);
    int64_t cd[4] = {64, OG_BLOCK, KV, D};
    reel_attn_params ap = {H, KV, D, OG_BLOCK, 0.f};
    return reel_paged_attention(g, reel_matmul(g, x, weight(g, nq, QW, QW), true),
                                reel_matmul(g, x, weight(g, nk, KW, QW), true),
                                reel_matmul(g, x, weight(g, nv, KW, QW), true), reel_state(g, kc, REEL_F32, 4, cd),
                                reel_state(g, vc, REEL_F32, 4, cd), &ap);
}

/* x -> attention -> o -> add -> rmsnorm -> gate/up; attention -> o2, o2
 * on stream `o2_stream`. */
static reel_plan *compile_layers(int o2_stream)
{
    reel_graph *g;
    cr_assert_eq(reel_graph_create(ctx, &g), REEL_OK);
    int64_t xd[2] = {REEL_DIM_TOKENS, QW}, gd = QW;
    reel_tensor x = reel_input(g, "x", REEL_F32, 2, xd);
    reel_tensor a = attention(g, x, "k0", "v0", 0);
    reel_tensor h = reel_add(g, x, reel_matmul(g, a, weight(g, "wo", QW, QW), true));
    reel_tensor g1 = reel_param(g, "g1", REEL_F32, 1, &gd);
    reel_param_defer(g, g1);
    reel_tensor n = reel_rmsnorm(g, h, g1, 1e-5f);
    reel_tensor gu = reel_matmul(g, n, weight(g, "wgu", F, QW), true);
    reel_tensor a2 = attention(g, h, "k1", "v1", 1);
    reel_tensor o2 = reel_matmul(g, a2, weight(g, "wo2", QW, QW), true);
    if (o2_stream)
        cr_assert_eq(reel_set_stream(g, o2, o2_stream), REEL_OK);
    reel_output(g, "gu", gu);
    reel_output(g, "o2", o2);
    cr_assert_eq(reel_graph_status(g), REEL_OK, "%s", reel_ctx_last_error(ctx));
    reel_compile_opts o = REEL_COMPILE_OPTS_INIT;
    o.num_buckets = 2;
    o.buckets[0] = 1;
    o.buckets[1] = 8;
    reel_plan_debug dbg = {.not_capturable_node = -1, .no_fuse = true, .l2_ahead_pct = 50};
    reel_plan *p = NULL;
    cr_assert_eq(reel_compile_debug(g, &o, &dbg, &p), REEL_OK, "%s", reel_ctx_last_error(ctx));
    reel_graph_destroy(g);
    return p;
}

/* Schedule position of the matmul whose weight is `w`, or of the n-th
 * attention. */
static int node_of(reel_plan *p, const char *w, int nth_attention)
{
    for (int i = 0, a = 0; i < p->nnodes; i++) {
        reel_node_info ni = REEL_NODE_INFO_INIT;
        cr_assert_eq(reel_plan_node_info(p, i, &ni), REEL_OK);
        if (w && strcmp(ni.op, "matmul") == 0 && ni.in[1] && strcmp(ni.in[1], w) == 0)
            return i;
        if (!w && strcmp(ni.op, "paged_attention") == 0 && a++ == nth_attention)
            return i;
    }
    cr_assert_fail("no node for %s", w ? w : "attention");
    return -1;
}

/* The attention impls take the hint, the device has l2 bytes of cache:
 * the layouts' hints computed again. */
static reel_op_impl fake[2];
static void give_cache(reel_plan *p, size_t l2)
{
    p->be->caps.l2_bytes = l2;
    for (int k = 0; k < 2; k++) {
        int i = node_of(p, NULL, k);
        fake[k] = *p->impl[i];
        fake[k].l2_ahead_ok = true;
        p->impl[i] = &fake[k];
    }
    for (int b = 0; b < p->nbuckets; b++) {
        for (int i = 0; i < p->nnodes; i++)
            memset(p->bucket[b].launches[i].l2_ahead, 0, sizeof p->bucket[b].launches[i].l2_ahead);
        reel_schedule_l2_ahead(p, &p->bucket[b]);
    }
}

static void expect_range(reel_plan *p, int b, int i, int r, const char *w, size_t bytes)
{
    const reel_launch *l = &p->bucket[b].launches[i];
    if (!w) {
        cr_assert_eq(l->l2_ahead[r].bytes, 0, "bucket %d node %d range %d: %zu bytes, want none", b, i, r,
                     l->l2_ahead[r].bytes);
        return;
    }
    int j = node_of(p, w, 0);
    cr_assert_eq(l->l2_ahead[r].p, p->bucket[b].launches[j].in[1], "bucket %d node %d range %d: not %s", b, i, r, w);
    cr_assert_eq(l->l2_ahead[r].bytes, bytes, "bucket %d node %d range %d (%s): %zu bytes, want %zu", b, i, r, w,
                 l->l2_ahead[r].bytes, bytes);
}

Test(l2_ahead, the_next_matmuls_weights_in_order_skipping_other_ops, .init = setup, .fini = teardown)
{
    reel_plan *p = compile_layers(0);
    const int a0 = node_of(p, NULL, 0), a1 = node_of(p, NULL, 1);
    /* The host backend: no cache, no hint. */
    for (int b = 0; b < p->nbuckets; b++)
        expect_range(p, b, a0, 0, NULL, 0);
    give_cache(p, 1 << 20);
    const size_t wo = (size_t)QW * QW * 4, wgu = (size_t)F * QW * 4;
    for (int b = 0; b < p->nbuckets; b++) {
        /* o, then gate/up past the add and the norm. */
        expect_range(p, b, a0, 0, "wo", wo);
        expect_range(p, b, a0, 1, "wgu", wgu);
        /* The second attention: its o; nothing follows. */
        expect_range(p, b, a1, 0, "wo2", wo);
        expect_range(p, b, a1, 1, NULL, 0);
    }
    reel_node_info ni = REEL_NODE_INFO_INIT;
    cr_assert_eq(reel_plan_node_info(p, a0, &ni), REEL_OK);
    cr_assert_eq(ni.l2_ahead_bytes, (int64_t)(wo + wgu));
    cr_assert_eq(ni.l2_ahead_node, node_of(p, "wo", 0));
    cr_assert_eq(reel_plan_node_info(p, node_of(p, "wo", 0), &ni), REEL_OK);
    cr_assert_eq(ni.l2_ahead_bytes, 0);
    cr_assert_eq(ni.l2_ahead_node, -1);
    reel_plan_destroy(p);
}

Test(l2_ahead, half_the_cache_at_most, .init = setup, .fini = teardown)
{
    reel_plan *p = compile_layers(0);
    const int a0 = node_of(p, NULL, 0);
    const size_t wo = (size_t)QW * QW * 4;
    /* 2 wo + 64 bytes: half of it is wo and 32 bytes of gate/up. */
    give_cache(p, 2 * wo + 64);
    expect_range(p, 0, a0, 0, "wo", wo);
    expect_range(p, 0, a0, 1, "wgu", 32);
    /* Less than wo: a prefix of it, a multiple of 16 bytes. */
    give_cache(p, wo + 40);
    expect_range(p, 0, a0, 0, "wo", (wo + 40) / 2 / 16 * 16);
    expect_range(p, 0, a0, 1, NULL, 0);
    reel_plan_destroy(p);
}

Test(l2_ahead, the_walk_stops_at_the_next_attention_and_keeps_to_its_stream, .init = setup, .fini = teardown)
{
    reel_plan *p = compile_layers(1);
    const int a0 = node_of(p, NULL, 0), a1 = node_of(p, NULL, 1);
    give_cache(p, 1 << 20);
    cr_assert_neq(p->nodes[node_of(p, "wo2", 0)].stream, p->nodes[a1].stream);
    /* wo2 is on another stream: the second attention hints nothing, and
     * the first never reaches past the second. */
    expect_range(p, 0, a1, 0, NULL, 0);
    expect_range(p, 0, a0, 0, "wo", (size_t)QW * QW * 4);
    for (int r = 0; r < REEL_L2_AHEAD_RANGES; r++)
        cr_assert_neq(p->bucket[0].launches[a0].l2_ahead[r].p, p->bucket[0].launches[node_of(p, "wo2", 0)].in[1]);
    reel_plan_destroy(p);
}

Test(l2_ahead, a_debug_plan_without_hints, .init = setup, .fini = teardown)
{
    reel_plan *p = compile_layers(0);
    p->dbg.l2_ahead_pct = -1;
    give_cache(p, 1 << 20);
    for (int i = 0; i < p->nnodes; i++)
        for (int r = 0; r < REEL_L2_AHEAD_RANGES; r++)
            cr_assert_eq(p->bucket[1].launches[i].l2_ahead[r].bytes, 0);
    reel_plan_destroy(p);
}
