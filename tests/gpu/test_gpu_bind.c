/* reel_plan_bind_state on the GPU: the KV caches moved to caller device
 * memory, every captured graph updated in place through cudaGraphExecUpdate
 * (same topology, new pointers), and the results equal a plan that kept its
 * own caches. */
#include <criterion/criterion.h>
#include <cuda_runtime_api.h>
#include <string.h>

#include "tests/runtime/opgraphs.h"
#include "tests/core/opts.h"

static reel_ctx *ctx;
static void setup(void)
{
    cr_assert_eq(reel_ctx_create(reel_test_ctx_opts(REEL_BACKEND_CUDA), &ctx), REEL_OK);
}
static void teardown(void) { reel_ctx_destroy(ctx); }

static reel_plan *plan(og_graph *og)
{
    reel_compile_opts o = REEL_COMPILE_OPTS_INIT;
    o.num_buckets = 3;
    memcpy(o.buckets, (int32_t[]){1, 4, 8}, 3 * sizeof(int32_t));
    o.max_context = 64;
    cr_assert_eq(og_build(ctx, OG_ATTENTION, REEL_BF16, 5, og), REEL_OK);
    reel_plan *p;
    cr_assert_eq(reel_compile(og->g, &o, &p), REEL_OK, "%s", reel_ctx_last_error(ctx));
    return p;
}

Test(gpu_bind, bound_kv_caches_update_the_graphs_in_place_and_give_the_same_bits, .init = setup, .fini = teardown)
{
    og_graph ga, gb;
    reel_plan *a = plan(&ga), *b = plan(&gb);
    size_t bytes = (size_t)OG_BLOCKS * OG_BLOCK * OG_KV_HEADS * OG_HEAD_DIM * 2;
    void *kc = NULL, *vc = NULL;
    cr_assert_eq(cudaMalloc(&kc, bytes), cudaSuccess);
    cr_assert_eq(cudaMalloc(&vc, bytes), cudaSuccess);
    cr_assert_eq(cudaMemset(kc, 0, bytes), cudaSuccess);
    cr_assert_eq(cudaMemset(vc, 0, bytes), cudaSuccess);
    cr_assert_eq(cudaDeviceSynchronize(), cudaSuccess);
    cr_assert_eq(reel_plan_bind_state(a, "k_cache", kc, bytes), REEL_OK, "%s", reel_ctx_last_error(ctx));
    cr_assert_eq(reel_plan_bind_state(a, "v_cache", vc, bytes), REEL_OK, "%s", reel_ctx_last_error(ctx));
    reel_plan_stats st = REEL_PLAN_STATS_INIT;
    reel_plan_stats_get(a, &st);
    cr_assert_eq(st.graph_updates, 6, "2 binds x 3 buckets updated in place (reinstantiated: %llu)",
                 (unsigned long long)st.graph_reinstantiations);
    for (int k = 0; k < 4; k++) {
        int32_t n = 1 + 2 * k;
        og_step sa, sb;
        cr_assert_eq(og_make_step(a, OG_ATTENTION, REEL_BF16, n, 40 + k, 20 + k, &sa), REEL_OK);
        cr_assert_eq(og_make_step(b, OG_ATTENTION, REEL_BF16, n, 40 + k, 20 + k, &sb), REEL_OK);
        cr_assert_eq(reel_step(a, &sa.info), REEL_OK, "%s", reel_ctx_last_error(ctx));
        cr_assert_eq(reel_step(b, &sb.info), REEL_OK, "%s", reel_ctx_last_error(ctx));
        cr_assert_eq(reel_plan_last_fallback(a), REEL_FALLBACK_NONE);
        const void *ya, *yb;
        cr_assert_eq(reel_plan_output(a, "y", &ya, NULL), REEL_OK);
        cr_assert_eq(reel_plan_output(b, "y", &yb, NULL), REEL_OK);
        cr_assert_eq(memcmp(ya, yb, (size_t)n * OG_HEADS * OG_HEAD_DIM * 2), 0, "step %d differs", k);
    }
    /* The bound cache holds what the steps wrote. */
    void *host = malloc(bytes);
    cr_assert_eq(cudaMemcpy(host, kc, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
    size_t nonzero = 0;
    for (size_t i = 0; i < bytes; i++)
        nonzero += ((unsigned char *)host)[i] != 0;
    cr_assert_gt(nonzero, 0);
    free(host);
    reel_plan_destroy(a);
    reel_plan_destroy(b);
    cudaFree(kc);
    cudaFree(vc);
    og_free(&ga);
    og_free(&gb);
}
