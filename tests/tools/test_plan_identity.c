/* The demo model's memory plan is the same whichever way the planner finds
 * its conflicts: the sweep and the one-pass node bound (the default) against
 * the all-pairs reference (reel_plan_debug.planner_exhaustive), bucket by
 * bucket: every activation's offset and size, the arena, both bounds and the
 * cross-stream waits. On one stream, and with the activations spread over
 * two and three streams by reel_set_stream. */
#include <criterion/criterion.h>
#include <string.h>

#include "runtime/plan.h"
#include "graph/ir.h"
#include "tools/model.h"

/* Spreads the activations over streams (a seeded choice per tensor). */
static void spread(reel_graph *g, int streams, uint64_t seed)
{
    uint64_t s = seed;
    for (uint32_t t = 1; streams > 1 && t < (uint32_t)g->ntensors; t++) {
        if (g->tensors[t].kind != REEL_T_ACT)
            continue;
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        int st = (int)((s >> 33) % (uint64_t)(streams + 1)); /* stream 0 twice as often */
        cr_assert_eq(reel_set_stream(g, (reel_tensor){t}, st < streams ? st : 0), REEL_OK);
    }
}

static reel_plan *compile_model(reel_ctx *ctx, const model_config *m, int streams, bool exhaustive)
{
    reel_graph *g = NULL;
    cr_assert_eq(model_build(ctx, m, &g), REEL_OK, "%s", reel_ctx_last_error(ctx));
    spread(g, streams, m->seed);
    reel_compile_opts o = REEL_COMPILE_OPTS_INIT;
    const int32_t b[] = {1, 3, 8, 32, 64};
    o.num_buckets = 5;
    memcpy(o.buckets, b, sizeof b);
    o.max_context = 128;
    o.max_seqs = 8;
    o.no_capture = true; /* the plan is what is compared; capture adds nothing to it */
    reel_plan_debug dbg = {.not_capturable_node = -1, .planner_exhaustive = exhaustive};
    reel_plan *p = NULL;
    cr_assert_eq(reel_compile_debug(g, &o, &dbg, &p), REEL_OK, "%s", reel_ctx_last_error(ctx));
    reel_graph_destroy(g);
    return p;
}

static void expect_same_plans(const reel_plan *a, const reel_plan *b)
{
    reel_plan_stats sa = REEL_PLAN_STATS_INIT, sb = REEL_PLAN_STATS_INIT;
    cr_assert_eq(reel_plan_stats_get(a, &sa), REEL_OK);
    cr_assert_eq(reel_plan_stats_get(b, &sb), REEL_OK);
    cr_assert_eq(sa.arena_bytes, sb.arena_bytes);
    cr_assert_eq(a->nbuckets, b->nbuckets);
    for (int k = 0; k < a->nbuckets; k++) {
        cr_expect_eq(sb.bucket_arena_bytes[k], sa.bucket_arena_bytes[k], "bucket %d: arena %zu, reference %zu", k,
                     sb.bucket_arena_bytes[k], sa.bucket_arena_bytes[k]);
        cr_expect_eq(sb.bucket_lower_bound[k], sa.bucket_lower_bound[k]);
        cr_expect_eq(sb.bucket_node_bound[k], sa.bucket_node_bound[k]);
        int n = 0;
        reel_placement pa = REEL_PLACEMENT_INIT, pb = REEL_PLACEMENT_INIT;
        while (reel_plan_placement(a, k, n, &pa) == REEL_OK) {
            cr_assert_eq(reel_plan_placement(b, k, n, &pb), REEL_OK);
            cr_assert(pa.offset == pb.offset && pa.bytes == pb.bytes && pa.first == pb.first && pa.last == pb.last,
                      "bucket %d, %s: %zu+%zu, reference %zu+%zu", k, pa.name, pb.offset, pb.bytes, pa.offset,
                      pa.bytes);
            n++;
        }
        cr_assert_neq(reel_plan_placement(b, k, n, &pb), REEL_OK);
        cr_assert_gt(n, 0);
        const reel_layout *la = &a->bucket[k], *lb = &b->bucket[k];
        for (int v = 0; v <= a->nnodes; v++)
            cr_assert_eq(lb->new_wait_start[v], la->new_wait_start[v], "bucket %d: waits of node %d", k, v);
        for (int w = 0; w < la->new_wait_start[a->nnodes]; w++)
            cr_assert_eq(lb->new_wait_from[w], la->new_wait_from[w], "bucket %d: wait %d", k, w);
    }
}

static void check_model(int layers, uint64_t seed, int streams)
{
    reel_ctx_opts co = REEL_CTX_OPTS_INIT;
    co.backend = REEL_BACKEND_HOST;
    reel_ctx *ctx = NULL;
    cr_assert_eq(reel_ctx_create(&co, &ctx), REEL_OK);
    model_config m = MODEL_CONFIG_INIT;
    m.layers = layers;
    m.hidden = 64;
    m.heads = 2;
    m.vocab = 256;
    m.num_blocks = 32;
    m.seed = seed;
    char err[256];
    cr_assert_eq(model_config_resolve(&m, err, sizeof err), 0, "%s", err);
    reel_plan *ref = compile_model(ctx, &m, streams, true), *fast = compile_model(ctx, &m, streams, false);
    cr_assert_eq(ref->nstreams, streams, "the plan has %d streams", ref->nstreams);
    int waits = 0;
    for (int k = 0; k < ref->nbuckets; k++)
        waits += ref->bucket[k].new_wait_start[ref->nnodes];
    cr_assert(streams == 1 || waits > 0, "no cross-stream waits on %d streams", streams);
    expect_same_plans(ref, fast);
    reel_plan_destroy(ref);
    reel_plan_destroy(fast);
    reel_ctx_destroy(ctx);
}

Test(plan_identity, the_demo_model_plans_the_same_with_the_all_pairs_reference)
{
    check_model(4, 1, 1);
    check_model(12, 5, 1);
}

Test(plan_identity, a_multistream_demo_model_plans_the_same_with_the_all_pairs_reference)
{
    check_model(6, 2, 2);
    check_model(6, 9, 3);
}
