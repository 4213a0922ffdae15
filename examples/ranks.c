/* Ranks as processes, started the way torchrun starts them: each process
 * joins the group its environment describes (RANK, WORLD_SIZE, MASTER_ADDR,
 * MASTER_PORT), splits it into groups of two, and steps a graph whose
 * all_reduce sums the ranks' inputs over the whole world and whose
 * all_gather collects them within its pair. On a host context the ranks
 * talk over Unix sockets; on CUDA through NCCL (one GPU per LOCAL_RANK).
 *
 *   for r in 0 1 2 3; do RANK=$r WORLD_SIZE=4 MASTER_PORT=29500 ./ranks & done; wait
 *   torchrun --nproc-per-node 4 --no-python ./ranks */
#include <stdio.h>
#include <stdlib.h>

#include <reel/reel.h>

#define CHECK(call)                                                                                    \
    do {                                                                                               \
        reel_status st_ = (call);                                                                      \
        if (st_ != REEL_OK) {                                                                          \
            fprintf(stderr, "ranks: %s: %s: %s\n", #call, reel_status_str(st_), reel_ctx_last_error(ctx)); \
            return 1;                                                                                  \
        }                                                                                              \
    } while (0)

int main(void)
{
    reel_ctx *ctx = NULL;
    reel_ctx_opts co = REEL_CTX_OPTS_INIT;
    const char *lr = getenv("LOCAL_RANK");
    co.device = lr ? atoi(lr) : 0;
    CHECK(reel_ctx_create(&co, &ctx));
    reel_comm *world = NULL, *pair = NULL;
    CHECK(reel_comm_create_env(ctx, NULL, &world));
    int r = reel_comm_rank(world), n = reel_comm_size(world);
    CHECK(reel_comm_split(world, r / 2, r, NULL, &pair));
    int pn = reel_comm_size(pair);

    /* world: all_reduce of x; pair: all_gather of x */
    reel_graph *g = NULL;
    CHECK(reel_graph_create(ctx, &g));
    int64_t d[2] = {REEL_DIM_TOKENS, 1};
    reel_tensor x = reel_input(g, "x", REEL_F32, 2, d);
    reel_output(g, "sum", reel_all_reduce(g, x));
    reel_compile_opts o = REEL_COMPILE_OPTS_INIT;
    o.comm = world;
    reel_plan *pw = NULL, *pp = NULL;
    CHECK(reel_compile(g, &o, &pw));
    reel_graph_destroy(g);
    CHECK(reel_graph_create(ctx, &g));
    x = reel_input(g, "x", REEL_F32, 2, d);
    reel_output(g, "pair", reel_all_gather(g, x, 1, pn));
    o.comm = pair;
    CHECK(reel_compile(g, &o, &pp));
    reel_graph_destroy(g);

    float v = (float)(r + 1);
    reel_step_info s = {REEL_STEP_INFO_HEAD, .num_tokens = 1};
    const void *y;
    CHECK(reel_plan_set_input(pw, "x", &v, 1));
    CHECK(reel_step(pw, &s));
    CHECK(reel_plan_output(pw, "sum", &y, NULL));
    float sum = *(const float *)y;
    CHECK(reel_plan_set_input(pp, "x", &v, 1));
    CHECK(reel_step(pp, &s));
    CHECK(reel_plan_output(pp, "pair", &y, NULL));
    printf("rank %d of %d (%s): world sum %g (want %g); pair %d of %d gathered", r, n,
           reel_backend_name(reel_ctx_backend(ctx)), sum, n * (n + 1) / 2.0, reel_comm_rank(pair), pn);
    for (int i = 0; i < pn; i++)
        printf(" %g", ((const float *)y)[i]);
    printf("\n");
    reel_plan_destroy(pw);
    reel_plan_destroy(pp);
    CHECK(reel_comm_destroy(pair));
    CHECK(reel_comm_destroy(world));
    reel_ctx_destroy(ctx);
    return sum == n * (n + 1) / 2.0f ? 0 : 1;
}
