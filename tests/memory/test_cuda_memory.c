/* The workspace allocator and pinned staging on the CUDA backend (through
 * the same vt as the host backend). Each test skips, saying so, where no
 * GPU is visible. Canaries: blocks are filled on one stream and copied to
 * pinned staging on another right before their free; the stream-aware
 * allocator keeps every copy intact, the unsafe pool does not. */
#include <criterion/criterion.h>
#include <string.h>

#include "memory/pinned.h"
#include "memory/workspace.h"
#include "reel/memory.h"
#include "backend/backend.h"
#include "backend/ctx.h"

#define NS 3

typedef struct gpu {
    reel_ctx *ctx;
    reel_backend *be;
    reel_stream *s[NS];
    reel_event *ev[NS];
    reel_pinned *pin;
    reel_checker *chk;
    reel_ws *ws;
} gpu;

static bool gpu_open(gpu *g)
{
    memset(g, 0, sizeof *g);
    reel_ctx_opts o = REEL_CTX_OPTS_INIT;
    o.backend = REEL_BACKEND_CUDA;
    if (!reel_cuda_available() || reel_ctx_create(&o, &g->ctx) != REEL_OK)
        return false;
    g->be = g->ctx->be;
    for (int i = 0; i < NS; i++) {
        cr_assert_eq(g->be->vt->stream_create(g->be, &g->s[i]), REEL_OK, "%s", reel_ctx_last_error(g->ctx));
        cr_assert_eq(g->be->vt->event_create(g->be, &g->ev[i]), REEL_OK, "%s", reel_ctx_last_error(g->ctx));
    }
    cr_assert_eq(reel_pinned_create(g->be, &g->pin), REEL_OK, "%s", reel_ctx_last_error(g->ctx));
    cr_assert_eq(reel_checker_create(g->ctx, &g->chk), REEL_OK);
    return true;
}

#define SKIP_WITHOUT_GPU(g)                                                  \
    do {                                                                     \
        if (!gpu_open(g))                                                    \
            cr_skip_test("no CUDA device visible: CUDA memory test skipped"); \
    } while (0)

static uint64_t key_of(void *user, const reel_stream *s)
{
    gpu *g = user;
    for (uint64_t i = 0; i < NS; i++)
        if (g->s[i] == s)
            return i;
    return 99;
}

static void ws_open(gpu *g, reel_ws_policy pol)
{
    reel_ws_opts o = { .policy = pol, .checker = g->chk, .stream_key = key_of, .key_user = g };
    cr_assert_eq(reel_ws_create(g->be, &o, &g->ws), REEL_OK, "%s", reel_ctx_last_error(g->ctx));
}

static void gpu_close(gpu *g)
{
    for (int i = 0; i < NS; i++)
        g->be->vt->stream_sync(g->be, g->s[i]);
    reel_ws_destroy(g->ws);
    reel_checker_destroy(g->chk);
    reel_pinned_destroy(g->pin);
    for (int i = 0; i < NS; i++) {
        g->be->vt->event_destroy(g->be, g->ev[i]);
        g->be->vt->stream_destroy(g->be, g->s[i]);
    }
    reel_ctx_destroy(g->ctx);
}

#define GOK(g, expr) cr_assert_eq((expr), REEL_OK, "%s: %s", #expr, reel_ctx_last_error((g)->ctx))

static void told(gpu *g, int s, const char *op, const void *p, size_t n, bool write)
{
    reel_check_access a = { REEL_CHECK_ACCESS_HEAD, .addr = (uint64_t)(uintptr_t)p, .bytes = n, .write = write };
    GOK(g, reel_checker_op(g->chk, (uint64_t)s, op, 1, &a));
}

enum { ITERS = 48, BLOCK = 4 << 20 };

/* One canary program: fill on s, copy out on t (after an event when t is
 * another stream), free at once. Returns the number of copies that did not
 * see their pattern. */
static int canaries(gpu *g, uint64_t seed)
{
    uint8_t *stage[ITERS];
    uint64_t rng = seed;
    for (int i = 0; i < ITERS; i++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        int s = (int)((rng >> 33) % NS), t = (int)((rng >> 40) % NS);
        uint8_t v = (uint8_t)(1 + i);
        reel_ws_block *b;
        GOK(g, reel_ws_alloc(g->ws, g->s[s], BLOCK, &b));
        void *p = reel_ws_block_ptr(b);
        GOK(g, g->be->vt->fill(g->be, g->s[s], p, v, BLOCK));
        told(g, s, "fill", p, BLOCK, true);
        if (t != s) {
            GOK(g, g->be->vt->event_record(g->be, g->ev[s], g->s[s]));
            GOK(g, g->be->vt->stream_wait(g->be, g->s[t], g->ev[s]));
            GOK(g, reel_checker_event_record(g->chk, 100 + (uint64_t)s, (uint64_t)s));
            GOK(g, reel_checker_event_wait(g->chk, (uint64_t)t, 100 + (uint64_t)s));
            GOK(g, reel_ws_record_use(g->ws, b, g->s[t]));
        }
        GOK(g, reel_pinned_alloc(g->pin, BLOCK, (void **)&stage[i]));
        GOK(g, g->be->vt->copy(g->be, g->s[t], stage[i], p, BLOCK, REEL_COPY_D2H));
        told(g, t, "copy out", p, BLOCK, false);
        GOK(g, reel_ws_free(g->ws, b));
    }
    for (int i = 0; i < NS; i++)
        GOK(g, g->be->vt->stream_sync(g->be, g->s[i]));
    int bad = 0;
    for (int i = 0; i < ITERS; i++) {
        uint8_t v = (uint8_t)(1 + i);
        bool ok = true;
        for (size_t k = 0; k < BLOCK && ok; k += 4093)
            ok = stage[i][k] == v;
        bad += !ok || stage[i][BLOCK - 1] != v;
        reel_pinned_free(g->pin, stage[i]);
    }
    return bad;
}

Test(memory_cuda, defer_policy_keeps_every_canary_on_the_gpu, .timeout = 120)
{
    gpu g;
    SKIP_WITHOUT_GPU(&g);
    ws_open(&g, REEL_WS_DEFER_FREE);
    int bad = canaries(&g, 1);
    reel_ws_stats st;
    reel_ws_get_stats(g.ws, &st);
    cr_log_info("cuda defer: %llu reuses, %llu device blocks, %llu deferred frees", (unsigned long long)st.reuses,
                (unsigned long long)st.device_allocs, (unsigned long long)st.frees_deferred);
    cr_assert_eq(bad, 0, "%d canaries overwritten", bad);
    cr_assert_gt(st.reuses, 0);
    cr_assert_eq(reel_checker_count(g.chk), 0);
    gpu_close(&g);
}

Test(memory_cuda, wait_policy_keeps_every_canary_on_the_gpu, .timeout = 120)
{
    gpu g;
    SKIP_WITHOUT_GPU(&g);
    ws_open(&g, REEL_WS_WAIT_ON_REUSE);
    int bad = canaries(&g, 2);
    reel_ws_stats st;
    reel_ws_get_stats(g.ws, &st);
    cr_log_info("cuda wait: %llu reuses, %llu device blocks, %llu waits", (unsigned long long)st.reuses,
                (unsigned long long)st.device_allocs, (unsigned long long)st.waits);
    cr_assert_eq(bad, 0, "%d canaries overwritten", bad);
    cr_assert_gt(st.waits, 0);
    cr_assert_eq(reel_checker_count(g.chk), 0);
    gpu_close(&g);
}

Test(memory_cuda, unsafe_pool_corrupts_canaries_on_the_gpu_and_the_checker_catches_it, .timeout = 120)
{
    gpu g;
    SKIP_WITHOUT_GPU(&g);
    ws_open(&g, REEL_WS_UNSAFE_EAGER);
    int bad = 0;
    for (int round = 0; round < 5 && !bad; round++)
        bad += canaries(&g, 3 + (uint64_t)round);
    cr_log_info("cuda unsafe pool: %d canaries overwritten, %zu hazards", bad, reel_checker_count(g.chk));
    cr_assert_gt(reel_checker_count(g.chk), 0);
    cr_assert_gt(bad, 0, "no corruption seen (timing); the checker still reported the hazards");
    gpu_close(&g);
}

static int queries;
static const reel_backend_vt *real_vt;
static reel_status count_query(reel_backend *be, reel_event *e, bool *done)
{
    queries++;
    return real_vt->event_query(be, e, done);
}

Test(memory_cuda, captured_blocks_stay_with_the_graph_and_no_event_is_queried_during_capture, .timeout = 120)
{
    gpu g;
    SKIP_WITHOUT_GPU(&g);
    ws_open(&g, REEL_WS_DEFER_FREE);
    reel_backend_vt vt = *g.be->vt;
    real_vt = g.be->vt;
    vt.event_query = count_query;
    g.be->vt = &vt;
    /* a deferred free pending before the capture */
    reel_ws_block *old;
    GOK(&g, reel_ws_alloc(g.ws, g.s[0], BLOCK, &old));
    GOK(&g, reel_ws_record_use(g.ws, old, g.s[1]));
    GOK(&g, reel_ws_free(g.ws, old));
    GOK(&g, reel_ws_capture_begin(g.ws));
    GOK(&g, g.be->vt->capture_begin(g.be, g.s[0]));
    queries = 0;
    reel_ws_block *b;
    GOK(&g, reel_ws_alloc(g.ws, g.s[0], BLOCK, &b));
    GOK(&g, g.be->vt->fill(g.be, g.s[0], reel_ws_block_ptr(b), 7, BLOCK));
    GOK(&g, reel_ws_free(g.ws, b));
    reel_exec_graph *eg = NULL;
    GOK(&g, g.be->vt->capture_end(g.be, g.s[0], &eg));
    cr_assert_eq(queries, 0, "an event was queried during the capture");
    reel_ws_graph *wg = NULL;
    GOK(&g, reel_ws_capture_end(g.ws, &wg));
    GOK(&g, g.be->vt->graph_launch(g.be, eg, g.s[0]));
    reel_ws_block *e;
    GOK(&g, reel_ws_alloc(g.ws, g.s[1], BLOCK, &e));
    cr_assert_neq(reel_ws_block_ptr(e), reel_ws_block_ptr(b), "eager work got the graph's block");
    GOK(&g, reel_ws_free(g.ws, e));
    GOK(&g, reel_ws_graph_release(g.ws, wg, g.s[0]));
    GOK(&g, g.be->vt->stream_sync(g.be, g.s[0]));
    g.be->vt->graph_destroy(g.be, eg);
    g.be->vt = real_vt;
    gpu_close(&g);
}

Test(memory_cuda, pinned_staging_comes_from_a_few_page_locked_extents, .timeout = 120)
{
    gpu g;
    SKIP_WITHOUT_GPU(&g);
    void *buf[100];
    for (int i = 0; i < 100; i++) {
        GOK(&g, reel_pinned_alloc(g.pin, 4096 + (size_t)i * 512, &buf[i]));
        cr_assert(reel_pinned_owns(g.pin, buf[i]));
    }
    reel_pinned_stats st;
    reel_pinned_get_stats(g.pin, &st);
    cr_log_info("pinned: %zu bytes in %zu page-locked allocations for 100 buffers", st.mapped, st.backend_allocs);
    cr_assert_lt(st.backend_allocs, st.arena ? 20 : 101);
    for (int i = 0; i < 100; i++)
        reel_pinned_free(g.pin, buf[i]);
    gpu_close(&g);
}
