/* The safety corpus: seeded bugs, each reported with its exact conflicting
 * pair, and valid programs with no report. Programs run on the checker
 * without kernels; some go through the workspace allocator (on the host
 * backend) or through a memory plan. */
#include <criterion/criterion.h>

#include "core/halloc.h"
#include "memory/planner.h"
#include "memory/workspace.h"
#include "tests/memory/pgen.h"
#include "tests/memory/plan_exec.h"
#include "tests/memory/safety_dsl.h"
#include "tests/backend/host_fixture.h"

#define RAW REEL_HAZARD_RAW
#define WAR REEL_HAZARD_WAR
#define WAW REEL_HAZARD_WAW
#define UAF REEL_HAZARD_USE_AFTER_FREE
#define ALIAS REEL_HAZARD_ALIAS
#define DFREE REEL_HAZARD_DOUBLE_FREE

/* ---- seeded bugs ------------------------------------------------------------ */

Test(safety_bug, eager_pool_reusing_attention_scratch_for_the_mlp_on_another_stream)
{
    /* the reverted production pool: layer 0 attention (stream 1) still reads
     * its scratch when the pool hands the bytes to the MLP (stream 0) */
    prog_check(STEPS(ALLOC(1, 0, 0x10000, 4096, "scratch l0.attn"),
                     WR(1, 0, "l0.attn.qk"), RD(1, 0, "l0.attn.softmax"), FREE(1, 0),
                     ALLOC(0, 1, 0x10000, 4096, "scratch l0.mlp"), WR(0, 1, "l0.mlp.up")),
               HAZARDS({ WAW, "l0.attn.qk", "l0.mlp.up", "scratch l0.attn", "scratch l0.mlp" },
                       { WAR, "l0.attn.softmax", "l0.mlp.up", "scratch l0.attn", "scratch l0.mlp" }));
}

Test(safety_bug, free_on_stream_a_reused_on_stream_b_without_a_wait)
{
    prog_check(STEPS(ALLOC(0, 0, 0x2000, 256, "block #1"), WR(0, 0, "a.write"), FREE(0, 0),
                     ALLOC(1, 1, 0x2000, 256, "block #2"), WR(1, 1, "b.write")),
               HAZARDS({ WAW, "a.write", "b.write", "block #1", "block #2" }));
}

Test(safety_bug, reused_bytes_read_by_the_new_owner_before_it_writes_them)
{
    prog_check(STEPS(ALLOC(0, 0, 0x2000, 256, "block #1"), WR(0, 0, "a.write"), FREE(0, 0),
                     ALLOC(1, 1, 0x2000, 256, "block #2"), RD(1, 1, "b.accumulate")),
               HAZARDS({ RAW, "a.write", "b.accumulate", "block #1", "block #2" }));
}

Test(safety_bug, fence_recorded_but_never_waited_on)
{
    prog_check(STEPS(ALLOC(0, 0, 0x2000, 256, "block #1"), WR(0, 0, "a.write"), REC(0, 7), FREE(0, 0),
                     ALLOC(1, 1, 0x2000, 256, "block #2"), WR(1, 1, "b.write")),
               HAZARDS({ WAW, "a.write", "b.write", NULL, NULL }));
}

Test(safety_bug, reuse_during_capture_by_eager_work_while_the_graph_replays)
{
    /* a pool that returns a captured block when the capture ends: eager
     * work on stream 1 takes it, and the next replay (stream 0) writes it */
    prog_check(STEPS(STEP(0), ALLOC(0, 0, 0x4000, 1024, "captured scratch"), FREE(0, 0),
                     ALLOC(1, 1, 0x4000, 1024, "eager scratch"), STEP(1), WR(1, 1, "eager.norm"),
                     OPW(0, 0, 0x4000, 1024, "replay.attn")),
               HAZARDS({ WAW, "eager.norm", "replay.attn", "eager scratch", NULL }));
}

Test(safety_bug, missing_join_before_a_consumer)
{
    prog_check(STEPS(OPW(0, 1, 0, 64, "x = embed"), REC(0, 1), WAIT(1, 1), OPR(1, 1, 0, 64, "k proj reads x"),
                     OPW(1, 1, 64, 64, "k proj writes k"),
                     /* no record on 1 / wait on 0 */ OPR(0, 1, 64, 64, "attention reads k")),
               HAZARDS({ RAW, "k proj writes k", "attention reads k", NULL, NULL }));
}

Test(safety_bug, host_read_before_synchronization)
{
    prog_check(STEPS(OPW(0, 0, 0x100, 128, "lm_head writes logits"), OPR(HOST, 0, 0x100, 128, "host reads logits")),
               HAZARDS({ RAW, "lm_head writes logits", "host reads logits", NULL, NULL }));
}

Test(safety_bug, host_sync_on_the_wrong_stream_before_a_read)
{
    prog_check(STEPS(OPW(0, 0, 0x100, 128, "sample"), HSYNC(1), OPR(HOST, 0, 0x100, 128, "host reads token")),
               HAZARDS({ RAW, "sample", "host reads token", NULL, NULL }));
}

Test(safety_bug, host_writes_the_next_input_while_a_stream_still_reads_it)
{
    prog_check(STEPS(OPR(0, 0, 0x0, 64, "embed reads tokens"), OPW(HOST, 0, 0x0, 64, "host uploads tokens")),
               HAZARDS({ WAR, "embed reads tokens", "host uploads tokens", NULL, NULL }));
}

Test(safety_bug, event_recorded_before_the_producer_ran)
{
    prog_check(STEPS(REC(0, 3), OPW(0, 1, 0, 64, "produce"), WAIT(1, 3), OPR(1, 1, 0, 64, "consume")),
               HAZARDS({ RAW, "produce", "consume", NULL, NULL }));
}

Test(safety_bug, wait_on_an_event_of_an_unrelated_stream)
{
    prog_check(STEPS(OPW(0, 1, 0, 64, "produce"), REC(2, 3), WAIT(1, 3), OPR(1, 1, 0, 64, "consume")),
               HAZARDS({ RAW, "produce", "consume", NULL, NULL }));
}

Test(safety_bug, event_recorded_again_elsewhere_before_the_wait)
{
    prog_check(STEPS(OPW(0, 1, 0, 64, "produce"), REC(0, 3), REC(2, 3), WAIT(1, 3), OPR(1, 1, 0, 64, "consume")),
               HAZARDS({ RAW, "produce", "consume", NULL, NULL }));
}

Test(safety_bug, double_free_of_a_block)
{
    prog_check(STEPS(ALLOC(0, 0, 0, 64, "block"), FREE(0, 0), FREE_AGAIN(1, 0)),
               HAZARDS({ DFREE, "free", "free", "block", "block" }));
}

Test(safety_bug, use_after_free)
{
    prog_check(STEPS(ALLOC(0, 0, 0, 64, "block"), WR(0, 0, "fill"), FREE(0, 0), RD(0, 0, "late read")),
               HAZARDS({ UAF, "free", "late read", "block", "block" }));
}

Test(safety_bug, allocator_hands_out_bytes_still_allocated)
{
    prog_check(STEPS(ALLOC(0, 0, 0, 256, "block #1"), ALLOC(1, 1, 128, 256, "block #2")),
               HAZARDS({ ALIAS, "alloc", "alloc", "block #1", "block #2" }));
}

Test(safety_bug, deferred_free_released_on_a_fence_recorded_before_the_last_use)
{
    /* the fence on stream 1 was recorded before its read was issued */
    prog_check(STEPS(ALLOC(0, 0, 0x800, 256, "block #1"), WR(0, 0, "a.fill"), REC(0, 1), WAIT(1, 1),
                     REC(1, 2), RD(1, 0, "b.read"), FREE(0, 0), ESYNC(2),
                     ALLOC(2, 1, 0x800, 256, "block #2"), WR(2, 1, "c.fill")),
               /* a.fill is ordered (the host saw stream 1 after its wait on 0) */
               HAZARDS({ WAR, "b.read", "c.fill", "block #1", "block #2" }));
}

Test(safety_bug, a_hazard_across_steps_without_the_step_end_join)
{
    reel_checker *c;
    cr_assert_eq(reel_checker_create(NULL, &c), REEL_OK);
    prog_run(c, STEPS(STEP(1), OPW(1, 1, 0, 64, "step 1 kv write"), HSYNC(0),
                      STEP(2), OPW(0, 1, 0, 64, "step 2 kv write")));
    size_t n;
    const reel_hazard *h = reel_checker_hazards(c, &n);
    cr_assert_eq(n, 1);
    cr_assert_eq(h->kind, WAW);
    cr_assert_eq(h->first.step, 1);
    cr_assert_eq(h->second.step, 2);
    reel_checker_destroy(c);
}

Test(safety_bug, one_of_two_consumers_not_joined)
{
    prog_check(STEPS(OPW(0, 1, 0, 64, "x"), REC(0, 1), WAIT(1, 1), OPR(1, 1, 0, 64, "joined reader"),
                     OPR(2, 1, 0, 64, "unjoined reader")),
               HAZARDS({ RAW, "x", "unjoined reader", NULL, NULL }));
}

Test(safety_bug, partial_overlap_of_two_writes)
{
    reel_checker *c;
    cr_assert_eq(reel_checker_create(NULL, &c), REEL_OK);
    prog_run(c, STEPS(OPW(0, 1, 0, 256, "w0"), OPW(1, 1, 200, 100, "w1")));
    size_t n;
    const reel_hazard *h = reel_checker_hazards(c, &n);
    cr_assert_eq(n, 1);
    cr_assert_str_eq(h->first.op, "w0");
    cr_assert_str_eq(h->second.op, "w1");
    cr_assert_eq(h->lo, 200);
    cr_assert_eq(h->hi, 256);
    reel_checker_destroy(c);
}

Test(safety_bug, attention_reads_the_kv_cache_before_the_cache_write_joins)
{
    prog_check(STEPS(OPW(1, 2, 0, 4096, "kv cache write"), OPR(0, 2, 0, 4096, "paged attention")),
               HAZARDS({ RAW, "kv cache write", "paged attention", NULL, NULL }));
}

Test(safety_bug, in_place_update_while_another_stream_reads)
{
    prog_check(STEPS(OPW(0, 1, 0, 64, "residual"), REC(0, 1), WAIT(1, 1), OPR(1, 1, 0, 64, "side reader"),
                     OPW(0, 1, 0, 64, "residual += mlp")),
               HAZARDS({ WAR, "side reader", "residual += mlp", NULL, NULL }));
}

Test(safety_bug, plan_with_one_edge_removed)
{
    /* a (stream 0) dies at node 1, b (stream 1) takes its bytes at node 2
     * thanks to a planner edge; an executor that drops it races */
    pg_problem *G = reel_hcalloc(1, sizeof *G);
    pg_init(G, 4);
    int st[] = { 0, 0, 1, 1 };
    memcpy(G->stream, st, sizeof st);
    int a = pg_buf(G, 0, 8192);
    pg_read(G, 1, a);
    int b = pg_buf(G, 2, 8192);
    pg_read(G, 3, b);
    G->p.allow_new_edges = true;
    reel_mem_plan plan;
    cr_assert_eq(reel_mem_plan_compute(&G->p, &plan), REEL_OK);
    cr_assert_eq(plan.nnew_edges, 1);
    reel_checker *c;
    cr_assert_eq(reel_checker_create(NULL, &c), REEL_OK);
    cr_assert_eq(px_run(c, &G->p, &plan, -1), 0, "the full plan is clean");
    reel_checker_destroy(c);
    cr_assert_eq(reel_checker_create(NULL, &c), REEL_OK);
    cr_assert_eq(px_run(c, &G->p, &plan, G->p.nedges + 0), 3);
    size_t n;
    const reel_hazard *h = reel_checker_hazards(c, &n);
    cr_assert_eq(h[0].kind, WAW);
    cr_assert_str_eq(h[0].first.op, "node 0");
    cr_assert_str_eq(h[0].second.op, "node 2");
    cr_assert_str_eq(h[0].first.alloc, "buf 0");
    cr_assert_str_eq(h[0].second.alloc, "buf 1");
    cr_assert_eq(h[1].kind, WAR);
    cr_assert_str_eq(h[1].first.op, "node 1");
    cr_assert_str_eq(h[1].second.op, "node 2");
    /* b's reader is not ordered after a's producer either: the race stays */
    cr_assert_eq(h[2].kind, RAW);
    cr_assert_str_eq(h[2].first.op, "node 0");
    cr_assert_str_eq(h[2].second.op, "node 3");
    reel_checker_destroy(c);
    reel_mem_plan_free(&plan);
    reel_hfree(G);
}

Test(safety_bug, plan_edges_removed_on_random_multistream_dags_are_reported_with_an_unordered_pair)
{
    pg_problem *G = reel_hcalloc(1, sizeof *G);
    int found = 0;
    for (uint64_t seed = 1; seed <= 60; seed++) {
        pg_random(G, seed, 50, 3, 70);
        G->p.allow_new_edges = true;
        reel_mem_plan plan;
        cr_assert_eq(reel_mem_plan_compute(&G->p, &plan), REEL_OK);
        for (int e = 0; e < plan.nnew_edges; e++) {
            int skip = G->p.nedges + e;
            /* the oracle's view of the plan without edge e */
            int from[128], to[128], k = 0;
            cr_assert_leq(plan.nnew_edges, 128);
            for (int j = 0; j < plan.nnew_edges; j++)
                if (j != e) {
                    from[k] = plan.new_from[j];
                    to[k++] = plan.new_to[j];
                }
            int bad = pg_oracle_violations(&G->p, plan.offsets, k, from, to);
            reel_checker *c;
            cr_assert_eq(reel_checker_create(NULL, &c), REEL_OK);
            size_t nh = px_run(c, &G->p, &plan, skip);
            cr_assert_eq(nh > 0, bad > 0, "seed %llu edge %d: checker %zu, oracle %d", (unsigned long long)seed, e, nh, bad);
            if (nh) {
                const reel_hazard *h = reel_checker_hazards(c, &nh);
                int x = px_buf_of(h->first.alloc), y = px_buf_of(h->second.alloc);
                cr_assert(x >= 0 && y >= 0 && x != y, "%s / %s", h->first.alloc, h->second.alloc);
                size_t ox = plan.offsets[x], oy = plan.offsets[y];
                cr_assert(ox < oy + G->bufs[y].size && oy < ox + G->bufs[x].size, "the pair shares bytes");
                found++;
            }
            reel_checker_destroy(c);
        }
        reel_mem_plan_free(&plan);
    }
    cr_assert_gt(found, 5, "only %d removed edges mattered", found);
    reel_hfree(G);
}

Test(safety_bug, plan_with_corrupted_offsets)
{
    pg_problem *G = reel_hcalloc(1, sizeof *G);
    pg_init(G, 4);
    int st[] = { 0, 1, 0, 1 };
    memcpy(G->stream, st, sizeof st);
    int a = pg_buf(G, 0, 4096), b = pg_buf(G, 1, 4096);
    pg_read(G, 2, a);
    pg_read(G, 3, b);
    size_t off[2] = { 0, 0 };       /* a and b overlap, unordered */
    reel_mem_plan plan = { .offsets = off, .arena = 4096 };
    reel_checker *c;
    cr_assert_eq(reel_checker_create(NULL, &c), REEL_OK);
    cr_assert_eq(px_run(c, &G->p, &plan, -1), 3);
    size_t n;
    const reel_hazard *h = reel_checker_hazards(c, &n);
    cr_assert_eq(h[2].kind, RAW);       /* b's reader, unordered with a's producer */
    cr_assert_str_eq(h[2].first.op, "node 0");
    cr_assert_str_eq(h[2].second.op, "node 3");
    cr_assert_eq(h[0].kind, WAW);       /* b's producer over a's bytes */
    cr_assert_str_eq(h[0].first.op, "node 0");
    cr_assert_str_eq(h[0].second.op, "node 1");
    cr_assert_eq(h[1].kind, RAW);       /* a's reader then sees b's bytes */
    cr_assert_str_eq(h[1].first.op, "node 1");
    cr_assert_str_eq(h[1].second.op, "node 2");
    cr_assert_str_eq(h[1].first.alloc, "buf 1");
    cr_assert_str_eq(h[1].second.alloc, "buf 0");
    reel_checker_destroy(c);
    reel_hfree(G);
}

/* ---- through the workspace allocator ------------------------------------- */

static uint64_t key_of(void *user, const reel_stream *s)
{
    reel_stream **streams = user;
    for (uint64_t i = 0; i < 3; i++)
        if (streams[i] == s)
            return i;
    return 99;
}

typedef struct ws_env {
    reel_ctx *ctx;
    reel_stream *s[3];
    reel_checker *chk;
    reel_ws *ws;
} ws_env;

static void ws_env_open(ws_env *e, reel_ws_policy pol)
{
    e->ctx = host_ctx();
    for (int i = 0; i < 3; i++)
        e->s[i] = new_stream(e->ctx);
    cr_assert_eq(reel_checker_create(e->ctx, &e->chk), REEL_OK);
    reel_ws_opts o = { .policy = pol, .checker = e->chk, .stream_key = key_of, .key_user = e->s };
    OK(e->ctx, reel_ws_create(e->ctx->be, &o, &e->ws));
}

static void ws_env_close(ws_env *e)
{
    for (int i = 0; i < 3; i++)
        VT(e->ctx)->stream_sync(e->ctx->be, e->s[i]);
    reel_ws_destroy(e->ws);
    reel_checker_destroy(e->chk);
    for (int i = 0; i < 3; i++)
        VT(e->ctx)->stream_destroy(e->ctx->be, e->s[i]);
    reel_ctx_destroy(e->ctx);
}

static reel_ws_block *ws_use(ws_env *e, int s, size_t n, const char *op, bool write)
{
    reel_ws_block *b;
    OK(e->ctx, reel_ws_alloc(e->ws, e->s[s], n, &b));
    OK(e->ctx, reel_checker_use(e->chk, (uint64_t)s, op, reel_ws_block_check_id(b), 0, n, write));
    return b;
}

Test(safety_bug, unsafe_pool_reuses_scratch_across_layers_and_streams)
{
    ws_env e;
    ws_env_open(&e, REEL_WS_UNSAFE_EAGER);
    reel_ws_block *b = ws_use(&e, 1, 8192, "l3.attn.scratch", true);
    OK(e.ctx, reel_checker_use(e.chk, 1, "l3.attn.read", reel_ws_block_check_id(b), 0, 8192, false));
    OK(e.ctx, reel_ws_free(e.ws, b));
    reel_ws_block *c = ws_use(&e, 0, 8192, "l4.mlp.scratch", true);
    size_t n;
    const reel_hazard *h = reel_checker_hazards(e.chk, &n);
    cr_assert_eq(n, 2);
    cr_assert_eq(h[0].kind, WAW);
    cr_assert_str_eq(h[0].first.op, "l3.attn.scratch");
    cr_assert_str_eq(h[0].second.op, "l4.mlp.scratch");
    cr_assert_eq(h[1].kind, WAR);
    cr_assert_str_eq(h[1].first.op, "l3.attn.read");
    cr_assert(strstr(h[1].second.alloc, "reusing #1"), "%s", h[1].second.alloc);
    OK(e.ctx, reel_ws_free(e.ws, c));
    ws_env_close(&e);
}

Test(safety_bug, unsafe_pool_reuses_a_block_another_stream_recorded_use_of)
{
    ws_env e;
    ws_env_open(&e, REEL_WS_UNSAFE_EAGER);
    reel_ws_block *b = ws_use(&e, 0, 4096, "a.fill", true);
    reel_event *ev = new_event(e.ctx);
    OK(e.ctx, VT(e.ctx)->event_record(e.ctx->be, ev, e.s[0]));
    OK(e.ctx, VT(e.ctx)->stream_wait(e.ctx->be, e.s[1], ev));
    OK(e.ctx, reel_checker_event_record(e.chk, 500, 0));
    OK(e.ctx, reel_checker_event_wait(e.chk, 1, 500));
    OK(e.ctx, reel_checker_use(e.chk, 1, "b.read", reel_ws_block_check_id(b), 0, 4096, false));
    OK(e.ctx, reel_ws_record_use(e.ws, b, e.s[1]));
    OK(e.ctx, reel_ws_free(e.ws, b));
    reel_ws_block *c = ws_use(&e, 2, 4096, "c.fill", true);
    size_t n;
    const reel_hazard *h = reel_checker_hazards(e.chk, &n);
    cr_assert_eq(n, 2);
    cr_assert_str_eq(h[0].first.op, "a.fill");
    cr_assert_str_eq(h[1].first.op, "b.read");
    cr_assert_str_eq(h[1].second.op, "c.fill");
    OK(e.ctx, reel_ws_free(e.ws, c));
    VT(e.ctx)->event_destroy(e.ctx->be, ev);
    ws_env_close(&e);
}

/* ---- valid programs ------------------------------------------------------- */

Test(safety_ok, reuse_on_the_same_stream)
{
    prog_check(STEPS(ALLOC(0, 0, 0x2000, 256, "#1"), WR(0, 0, "w"), RD(0, 0, "r"), FREE(0, 0),
                     ALLOC(0, 1, 0x2000, 256, "#2"), WR(0, 1, "w2")),
               NO_HAZARD);
}

Test(safety_ok, reuse_on_another_stream_after_a_wait)
{
    prog_check(STEPS(ALLOC(0, 0, 0x2000, 256, "#1"), WR(0, 0, "w"), REC(0, 1), FREE(0, 0),
                     ALLOC(1, 1, 0x2000, 256, "#2"), WAIT(1, 1), WR(1, 1, "w2")),
               NO_HAZARD);
}

Test(safety_ok, reuse_after_the_host_saw_the_fence_complete)
{
    prog_check(STEPS(ALLOC(0, 0, 0x2000, 256, "#1"), WR(0, 0, "w"), REC(0, 1), FREE(0, 0), ESYNC(1),
                     ALLOC(1, 1, 0x2000, 256, "#2"), WR(1, 1, "w2")),
               NO_HAZARD);
}

Test(safety_ok, deferred_free_fenced_on_every_stream_that_used_it)
{
    prog_check(STEPS(ALLOC(0, 0, 0x800, 256, "#1"), WR(0, 0, "a.fill"), REC(0, 1), WAIT(1, 1),
                     RD(1, 0, "b.read"), REC(1, 2), REC(0, 3), FREE(0, 0), ESYNC(2), ESYNC(3),
                     ALLOC(2, 1, 0x800, 256, "#2"), WR(2, 1, "c.fill")),
               NO_HAZARD);
}

Test(safety_ok, host_read_after_a_stream_sync)
{
    prog_check(STEPS(OPW(0, 0, 0x100, 128, "logits"), HSYNC(0), OPR(HOST, 0, 0x100, 128, "host read")), NO_HAZARD);
}

Test(safety_ok, host_read_after_an_event_sync)
{
    prog_check(STEPS(OPW(0, 0, 0x100, 128, "logits"), REC(0, 4), ESYNC(4), OPR(HOST, 0, 0x100, 128, "host read")),
               NO_HAZARD);
}

Test(safety_ok, host_upload_after_sync_then_stream_read)
{
    prog_check(STEPS(OPR(0, 0, 0, 64, "embed"), HSYNC(0), OPW(HOST, 0, 0, 64, "upload"), OPR(1, 0, 0, 64, "embed 2")),
               NO_HAZARD);
}

Test(safety_ok, device_sync_orders_every_stream)
{
    prog_check(STEPS(OPW(0, 1, 0, 64, "a"), OPW(1, 1, 64, 64, "b"), OPW(2, 1, 128, 64, "c"),
                     HSYNC(REEL_CHECK_ALL_STREAMS), OPW(3, 1, 0, 192, "d")),
               NO_HAZARD);
}

Test(safety_ok, fork_and_join)
{
    prog_check(STEPS(OPW(0, 1, 0, 64, "x"), REC(0, 1), WAIT(1, 1), OPR(1, 1, 0, 64, "k reads x"),
                     OPW(1, 1, 64, 64, "k"), REC(1, 2), WAIT(0, 2), OPR(0, 1, 64, 64, "attn reads k"),
                     OPW(0, 1, 0, 64, "x overwritten")),
               NO_HAZARD);
}

Test(safety_ok, concurrent_reads_on_two_streams)
{
    prog_check(STEPS(OPW(0, 1, 0, 64, "x"), REC(0, 1), WAIT(1, 1), OPR(0, 1, 0, 64, "r0"), OPR(1, 1, 0, 64, "r1")),
               NO_HAZARD);
}

Test(safety_ok, disjoint_bytes_on_two_streams)
{
    prog_check(STEPS(OPW(0, 1, 0, 64, "a"), OPW(1, 1, 64, 64, "b"), OPR(2, 1, 128, 64, "c")), NO_HAZARD);
}

Test(safety_ok, same_offsets_in_different_address_spaces)
{
    prog_check(STEPS(OPW(0, 1, 0, 64, "arena A"), OPW(1, 2, 0, 64, "arena B")), NO_HAZARD);
}

Test(safety_ok, in_place_op_on_one_stream)
{
    reel_checker *c;
    cr_assert_eq(reel_checker_create(NULL, &c), REEL_OK);
    reel_check_access acc[2] = { { REEL_CHECK_ACCESS_HEAD, .space = 1, .addr = 0, .bytes = 64, .write = false },
                                 { REEL_CHECK_ACCESS_HEAD, .space = 1, .addr = 0, .bytes = 64, .write = true } };
    cr_assert_eq(reel_checker_op(c, 0, "x = x + y", 2, acc), REEL_OK);
    cr_assert_eq(reel_checker_op(c, 0, "x = x * 2", 2, acc), REEL_OK);
    cr_assert_eq(reel_checker_count(c), 0);
    reel_checker_destroy(c);
}

Test(safety_ok, transitive_order_through_a_chain_of_events)
{
    prog_check(STEPS(OPW(0, 1, 0, 64, "a"), REC(0, 1), WAIT(1, 1), REC(1, 2), WAIT(2, 2), OPW(2, 1, 0, 64, "c")),
               NO_HAZARD);
}

Test(safety_ok, a_wait_keeps_the_record_it_saw_when_the_event_is_recorded_again)
{
    prog_check(STEPS(OPW(0, 1, 0, 64, "a"), REC(0, 1), WAIT(1, 1), REC(2, 1), OPR(1, 1, 0, 64, "b")), NO_HAZARD);
}

Test(safety_ok, steps_joined_at_the_end)
{
    prog_check(STEPS(STEP(1), OPW(1, 1, 0, 64, "kv write"), REC(1, 9), WAIT(0, 9), HSYNC(0),
                     STEP(2), OPW(1, 1, 0, 64, "kv write 2"), OPR(0, 1, 64, 64, "unrelated")),
               NO_HAZARD);
}

Test(safety_ok, partial_overlap_ordered_by_an_event)
{
    prog_check(STEPS(OPW(0, 1, 0, 256, "w0"), REC(0, 1), WAIT(1, 1), OPW(1, 1, 200, 100, "w1")), NO_HAZARD);
}

Test(safety_ok, adjacent_allocations_do_not_alias)
{
    prog_check(STEPS(ALLOC(0, 0, 0, 256, "#1"), ALLOC(1, 1, 256, 256, "#2"), WR(0, 0, "a"), WR(1, 1, "b")),
               NO_HAZARD);
}

Test(safety_ok, wait_on_a_never_recorded_event_with_a_host_sync)
{
    prog_check(STEPS(OPW(0, 1, 0, 64, "a"), WAIT(1, 42), HSYNC(0), OPW(1, 1, 0, 64, "b")), NO_HAZARD);
}

Test(safety_ok, plans_of_random_multistream_dags_run_clean)
{
    pg_problem *G = reel_hcalloc(1, sizeof *G);
    for (uint64_t seed = 1; seed <= 60; seed++) {
        for (int edges = 0; edges < 2; edges++) {
            pg_random(G, seed, 40 + (int)(seed % 5) * 30, 1 + (int)(seed % 4), 70);
            G->p.allow_new_edges = edges;
            reel_mem_plan plan;
            cr_assert_eq(reel_mem_plan_compute(&G->p, &plan), REEL_OK);
            reel_checker *c;
            cr_assert_eq(reel_checker_create(NULL, &c), REEL_OK);
            size_t n = px_run(c, &G->p, &plan, -1);
            char line[512];
            cr_assert_eq(n, 0, "seed %llu: %s", (unsigned long long)seed,
                         reel_hazard_format(reel_checker_hazards(c, NULL), line, sizeof line));
            reel_checker_destroy(c);
            reel_mem_plan_free(&plan);
        }
    }
    reel_hfree(G);
}

Test(safety_ok, decode_layer_plans_run_clean)
{
    pg_problem *G = reel_hcalloc(1, sizeof *G);
    for (size_t T = 1; T <= 32; T *= 2) {
        pg_decode_layers(G, 8, T, 4096, 14336, 32000);
        G->p.allow_new_edges = true;
        reel_mem_plan plan;
        cr_assert_eq(reel_mem_plan_compute(&G->p, &plan), REEL_OK);
        reel_checker *c;
        cr_assert_eq(reel_checker_create(NULL, &c), REEL_OK);
        cr_assert_eq(px_run(c, &G->p, &plan, -1), 0);
        reel_checker_destroy(c);
        reel_mem_plan_free(&plan);
    }
    reel_hfree(G);
}

Test(safety_ok, defer_policy_reuses_across_streams_cleanly)
{
    ws_env e;
    ws_env_open(&e, REEL_WS_DEFER_FREE);
    for (int i = 0; i < 30; i++) {
        reel_ws_block *b = ws_use(&e, i % 3, 4096, "fill", true);
        OK(e.ctx, reel_ws_free(e.ws, b));
        if (i % 5 == 4)
            OK(e.ctx, VT(e.ctx)->stream_sync(e.ctx->be, e.s[i % 3]));
    }
    reel_ws_stats st;
    reel_ws_get_stats(e.ws, &st);
    cr_assert_gt(st.reuses, 0);
    cr_assert_eq(reel_checker_count(e.chk), 0);
    ws_env_close(&e);
}

Test(safety_ok, wait_policy_reuses_across_streams_cleanly)
{
    ws_env e;
    ws_env_open(&e, REEL_WS_WAIT_ON_REUSE);
    for (int i = 0; i < 30; i++) {
        reel_ws_block *b = ws_use(&e, i % 3, 4096, "fill", true);
        OK(e.ctx, reel_ws_free(e.ws, b));
    }
    reel_ws_stats st;
    reel_ws_get_stats(e.ws, &st);
    cr_assert_eq(st.reuses, 29, "every block after the first is a reuse");
    cr_assert_gt(st.waits, 0);
    cr_assert_eq(reel_checker_count(e.chk), 0);
    ws_env_close(&e);
}

Test(safety_ok, blocks_held_by_a_captured_graph_are_not_reused_eagerly)
{
    ws_env e;
    ws_env_open(&e, REEL_WS_DEFER_FREE);
    OK(e.ctx, reel_ws_capture_begin(e.ws));
    OK(e.ctx, VT(e.ctx)->capture_begin(e.ctx->be, e.s[0]));
    reel_ws_block *b = ws_use(&e, 0, 4096, "captured write", true);
    OK(e.ctx, reel_ws_free(e.ws, b));
    reel_exec_graph *g = NULL;
    OK(e.ctx, VT(e.ctx)->capture_end(e.ctx->be, e.s[0], &g));
    reel_ws_graph *wg;
    OK(e.ctx, reel_ws_capture_end(e.ws, &wg));
    reel_ws_block *c = ws_use(&e, 1, 4096, "eager write", true);
    cr_assert_neq(reel_ws_block_ptr(c), reel_ws_block_ptr(b));
    OK(e.ctx, reel_ws_free(e.ws, c));
    cr_assert_eq(reel_checker_count(e.chk), 0);
    OK(e.ctx, reel_ws_graph_release(e.ws, wg, e.s[0]));
    VT(e.ctx)->graph_destroy(e.ctx->be, g);
    ws_env_close(&e);
}
