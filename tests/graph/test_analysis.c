/* Graph analyses: dependency edges and the stable topological order. */
#include "tests/graph/fixture.h"
#include "graph/builder.h"
#include "core/halloc.h"

TestSuite(analysis, .init = graph_setup, .fini = graph_teardown);

static uint32_t rnd(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(*s >> 33);
}

/* A random DAG built straight into the IR with node indices shuffled, so
 * build order is not already a topological order. Nodes are adds of two
 * earlier tensors (shapes do not matter to the order). */
static void build_shuffled_dag(uint64_t seed, int n)
{
    uint64_t s = seed;
    int *perm = reel_halloc((size_t)n * sizeof *perm);
    uint32_t *pool = reel_halloc((size_t)(n + 1) * sizeof *pool);
    cr_assert(perm && pool);
    for (int i = 0; i < n; i++)
        perm[i] = i;
    for (int i = n - 1; i > 0; i--) {
        int j = (int)(rnd(&s) % (uint32_t)(i + 1)), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    int npool = 0;
    pool[npool++] = reel_input(g, "x", REEL_F32, 2, D(T, 4)).id;
    cr_assert_eq(reel_graph_reserve(g, n, n), REEL_OK);
    reel_shape sh = g->tensors[pool[0]].shape;
    for (int k = 0; k < n; k++) {
        int v = perm[k];
        reel_node *nd = &g->nodes[v];
        memset(nd, 0, sizeof *nd);
        nd->op = REEL_OP_ADD;
        nd->nin = 2;
        nd->nout = 1;
        /* A recent tensor, any earlier one, or the graph input: chains,
         * long edges and many nodes ready at once. */
        for (int i = 0; i < 2; i++) {
            uint32_t r = rnd(&s) % 3, back = rnd(&s) % (uint32_t)(npool < 3 ? npool : 3);
            nd->in[i] = pool[r == 0 ? npool - 1 - (int)back : r == 1 ? (int)(rnd(&s) % (uint32_t)npool) : 0];
        }
        char name[16];
        snprintf(name, sizeof name, "t%d", k);
        uint32_t t = reel_graph_push_tensor(g, name, REEL_T_ACT, &sh);
        g->tensors[t].producer = v;
        g->tensors[t].out_index = 0;
        nd->out[0] = t;
        pool[npool++] = t;
    }
    g->nnodes = n;
    reel_hfree(perm);
    reel_hfree(pool);
}

static bool depends_on_placed(const int *placed, int v)
{
    const reel_node *nd = &g->nodes[v];
    for (int i = 0; i < nd->nin; i++) {
        const reel_tinfo *t = &g->tensors[nd->in[i]];
        if (t->kind == REEL_T_ACT && !placed[t->producer])
            return false;
    }
    return true;
}

Test(analysis, orders_random_dags_topologically_and_stably)
{
    for (uint64_t seed = 1; seed <= 40; seed++) {
        reel_graph_destroy(g);
        cr_assert_eq(reel_graph_create(ctx, &g), REEL_OK);
        int n = 5 + (int)(seed * 7 % 60);
        build_shuffled_dag(seed, n);
        int order[64], placed[64] = { 0 };
        cr_assert_eq(reel_graph_topo_order(g, order), REEL_OK, "%s", reel_ctx_last_error(ctx));
        for (int p = 0; p < n; p++) {
            int v = order[p];
            cr_assert(v >= 0 && v < n && !placed[v], "seed %llu: order is not a permutation", (unsigned long long)seed);
            cr_assert(depends_on_placed(placed, v), "seed %llu: node %d placed before an input's producer",
                      (unsigned long long)seed, v);
            /* Stable: no lower-indexed node was ready. */
            for (int u = 0; u < v; u++)
                cr_assert(placed[u] || !depends_on_placed(placed, u),
                          "seed %llu: node %d was ready before node %d", (unsigned long long)seed, u, v);
            placed[v] = 1;
        }
    }
}

Test(analysis, keeps_build_order_for_a_built_graph)
{
    reel_tensor x = reel_input(g, "x", REEL_F32, 2, D(T, 4));
    reel_tensor a = reel_softmax(g, x), b = reel_softmax(g, x), c = reel_add(g, b, a);
    reel_softmax(g, c);
    reel_softmax(g, x);
    int order[5];
    cr_assert_eq(reel_graph_topo_order(g, order), REEL_OK);
    for (int i = 0; i < 5; i++)
        cr_assert_eq(order[i], i);
}

Test(analysis, reports_a_cycle)
{
    reel_tensor x = reel_input(g, "x", REEL_F32, 2, D(T, 4));
    reel_tensor a = reel_add(g, x, x), b = reel_add(g, a, x);
    /* Not possible through the builder: rewire node 0 to read node 1's output. */
    g->nodes[0].in[0] = b.id;
    int order[2];
    cr_assert_eq(reel_graph_topo_order(g, order), REEL_E_INVALID_ARG);
    assert_msg_has("cycle", "op 'add'");
}

Test(analysis, chains_nodes_that_share_a_state)
{
    reel_tensor q1 = reel_input(g, "q1", REEL_F32, 2, D(T, 8));
    reel_tensor q2 = reel_input(g, "q2", REEL_F32, 2, D(T, 8));
    reel_tensor c = reel_state(g, "c", REEL_F32, 4, D(2, 4, 2, 4));
    reel_tensor c2 = reel_state(g, "c2", REEL_F32, 4, D(2, 4, 2, 4));
    reel_attn_params p = { REEL_ATTN_PARAMS_HEAD, 2, 2, 4, 4, 0 };
    reel_paged_attention(g, q1, q1, q1, c, c, &p);
    reel_paged_attention(g, q2, q2, q2, c2, c2, &p);
    reel_paged_attention(g, q2, q2, q2, c, c, &p);
    cr_assert_eq(reel_graph_status(g), REEL_OK, "%s", reel_ctx_last_error(ctx));
    int *from, *to, n;
    cr_assert_eq(reel_graph_edges(g, &from, &to, &n), REEL_OK);
    cr_assert_eq(n, 1, "one edge: node 0 -> node 2 through state 'c'");
    cr_assert_eq(from[0], 0);
    cr_assert_eq(to[0], 2);
    reel_hfree(from);
    reel_hfree(to);
}

Test(analysis, deduplicates_edges_of_a_tensor_read_twice)
{
    reel_tensor x = reel_input(g, "x", REEL_F32, 2, D(T, 4));
    reel_tensor a = reel_softmax(g, x);
    reel_add(g, a, a);
    int *from, *to, n;
    cr_assert_eq(reel_graph_edges(g, &from, &to, &n), REEL_OK);
    cr_assert_eq(n, 1);
    cr_assert_eq(from[0], 0);
    cr_assert_eq(to[0], 1);
    reel_hfree(from);
    reel_hfree(to);
}

