/* The fusion pass (runtime/fuse.c) on the host backend: each pattern fires
 * where it should and not where the intermediate is an output or has
 * another reader, a fused plan gives the unfused plan's bits, views alias
 * their source (lifetime, the hazard checker), and no_fuse turns it off. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "runtime/plan.h"
#include "tests/core/opts.h"

static reel_ctx *ctx;
static void setup(void) { cr_assert_eq(reel_ctx_create(reel_test_ctx_opts(REEL_BACKEND_HOST), &ctx), REEL_OK); }
static void teardown(void) { reel_ctx_destroy(ctx); }

enum { D = 24, N = 40, ROWS = 3 };

static uint16_t to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* n pseudo-random values in [-1, 1] of dtype dt, kept for the graph's life. */
static void *data(reel_dtype dt, size_t n, unsigned seed)
{
    static char pool[16][65536];
    static int next;
    char *buf = pool[next++ % 16];
    cr_assert(n * 4 <= sizeof pool[0]);
    uint32_t s = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        float v = (float)(s >> 8) / (float)(1u << 24) * 2.0f - 1.0f;
        if (dt == REEL_F32)
            ((float *)buf)[i] = v;
        else
            ((uint16_t *)buf)[i] = to_bf16(v);
    }
    return buf;
}

static reel_tensor param(reel_graph *g, const char *name, reel_dtype dt, int ndim, int64_t d0, int64_t d1,
                         unsigned seed)
{
    int64_t dims[2] = {d0, d1};
    reel_tensor t = reel_param(g, name, dt, ndim, dims);
    cr_assert_eq(reel_param_bind(g, t, data(dt, (size_t)(d0 * (ndim == 2 ? d1 : 1)), seed)), REEL_OK);
    return t;
}

typedef reel_graph *(*builder)(reel_dtype dt);

static reel_plan *compile(reel_graph *g, bool fuse, bool check)
{
    reel_compile_opts o = REEL_COMPILE_OPTS_INIT;
    o.num_buckets = 2;
    o.buckets[0] = 1;
    o.buckets[1] = 4;
    o.no_fuse = !fuse;
    o.check_hazards = check;
    reel_plan *p = NULL;
    cr_assert_eq(reel_compile(g, &o, &p), REEL_OK, "%s", reel_ctx_last_error(ctx));
    return p;
}

/* Steps the plan with ROWS tokens of input x; copies output `name`. */
static void run(reel_plan *p, reel_dtype dt, const char *name, void *out, size_t bytes)
{
    cr_assert_eq(reel_plan_set_input(p, "x", data(dt, ROWS * D, 99), ROWS), REEL_OK, "%s", reel_ctx_last_error(ctx));
    reel_step_info s = { REEL_STEP_INFO_HEAD, .num_tokens = ROWS};
    cr_assert_eq(reel_step(p, &s), REEL_OK, "%s", reel_ctx_last_error(ctx));
    const void *o;
    int64_t rows;
    cr_assert_eq(reel_plan_output(p, name, &o, &rows), REEL_OK);
    cr_assert_eq(rows, ROWS);
    memcpy(out, o, bytes);
}

/* Nodes of op `op` in the plan, and the first node's fused text with op. */
static int nodes_of(const reel_plan *p, const char *op, const char **fused)
{
    reel_plan_stats st = REEL_PLAN_STATS_INIT;
    cr_assert_eq(reel_plan_stats_get(p, &st), REEL_OK);
    int c = 0;
    for (int i = 0; i < st.num_nodes; i++) {
        reel_node_info ni = REEL_NODE_INFO_INIT;
        cr_assert_eq(reel_plan_node_info(p, i, &ni), REEL_OK);
        if (strcmp(ni.op, op) == 0) {
            if (!c && fused)
                *fused = ni.fused;
            c++;
        }
    }
    return c;
}

static int num_nodes(const reel_plan *p)
{
    reel_plan_stats st = REEL_PLAN_STATS_INIT;
    cr_assert_eq(reel_plan_stats_get(p, &st), REEL_OK);
    return st.num_nodes;
}

/* The fused and unfused plans of a graph give the same bytes of every
 * listed output. */
static void same_bits(builder b, reel_dtype dt, const char *const *outs, int nouts, const size_t *bytes)
{
    reel_graph *g = b(dt);
    reel_plan *pf = compile(g, true, false), *pu = compile(g, false, false);
    for (int o = 0; o < nouts; o++) {
        char f[8192], u[8192];
        cr_assert(bytes[o] <= sizeof f);
        run(pf, dt, outs[o], f, bytes[o]);
        run(pu, dt, outs[o], u, bytes[o]);
        cr_assert(memcmp(f, u, bytes[o]) == 0, "%s: fused and unfused %s differ", outs[o], reel_dtype_name(dt));
    }
    reel_plan_destroy(pf);
    reel_plan_destroy(pu);
    reel_graph_destroy(g);
}

static reel_tensor input(reel_graph *g, reel_dtype dt)
{
    int64_t d[2] = {REEL_DIM_TOKENS, D};
    return reel_input(g, "x", dt, 2, d);
}

/* ---- matmul + bias ---------------------------------------------------------- */

static reel_graph *bias_graph(reel_dtype dt)
{
    reel_graph *g;
    cr_assert_eq(reel_graph_create(ctx, &g), REEL_OK);
    reel_tensor x = input(g, dt);
    reel_tensor y = reel_matmul(g, x, param(g, "w", dt, 2, D, N, 1), false);
    reel_output(g, "y", reel_add(g, y, param(g, "b", dt, 1, N, 0, 2)));
    return g;
}

Test(fuse, bias_add_folds_into_the_matmul_with_the_unfused_bits, .init = setup, .fini = teardown)
{
    reel_graph *g = bias_graph(REEL_BF16);
    reel_plan *p = compile(g, true, false);
    const char *fused = NULL;
    cr_assert_eq(num_nodes(p), 1);
    cr_assert_eq(nodes_of(p, "matmul", &fused), 1);
    cr_assert_str_eq(fused, "matmul+add(bias)");
    reel_plan_destroy(p);
    reel_graph_destroy(g);
    static const char *const outs[] = {"y"};
    size_t bytes[] = {ROWS * N * 2};
    same_bits(bias_graph, REEL_BF16, outs, 1, bytes);
    bytes[0] = ROWS * N * 4;
    same_bits(bias_graph, REEL_F32, outs, 1, bytes);
}

Test(fuse, bias_add_stays_when_the_product_is_an_output_or_read_again, .init = setup, .fini = teardown)
{
    for (int c = 0; c < 2; c++) {
        reel_graph *g;
        cr_assert_eq(reel_graph_create(ctx, &g), REEL_OK);
        reel_tensor x = input(g, REEL_F32);
        reel_tensor y = reel_matmul(g, x, param(g, "w", REEL_F32, 2, D, N, 1), false);
        reel_output(g, "z", reel_add(g, y, param(g, "b", REEL_F32, 1, N, 0, 2)));
        if (c == 0)
            reel_output(g, "y", y);
        else
            reel_output(g, "y2", reel_mul(g, y, y));
        reel_plan *p = compile(g, true, false);
        cr_assert_eq(nodes_of(p, "add", NULL), 1, "case %d: the add was folded", c);
        reel_plan_destroy(p);
        reel_graph_destroy(g);
    }
}

/* ---- matmul + silu_and_mul --------------------------------------------------- */

static reel_graph *silu_graph(reel_dtype dt)
{
    reel_graph *g;
    cr_assert_eq(reel_graph_create(ctx, &g), REEL_OK);
    reel_tensor x = input(g, dt);
    reel_tensor gu = reel_matmul(g, x, param(g, "w", dt, 2, D, 2 * N, 3), false);
    reel_output(g, "f", reel_silu_and_mul(g, gu));
    return g;
}

Test(fuse, silu_and_mul_folds_into_the_gate_up_matmul_with_the_unfused_bits, .init = setup, .fini = teardown)
{
    reel_graph *g = silu_graph(REEL_BF16);
    reel_plan *p = compile(g, true, false);
    const char *fused = NULL;
    cr_assert_eq(num_nodes(p), 1);
    cr_assert_eq(nodes_of(p, "matmul", &fused), 1);
    cr_assert_str_eq(fused, "matmul+silu_and_mul");
    reel_plan_destroy(p);
    reel_graph_destroy(g);
    static const char *const outs[] = {"f"};
    size_t bytes[] = {ROWS * N * 2};
    same_bits(silu_graph, REEL_BF16, outs, 1, bytes);
}

Test(fuse, silu_and_mul_stays_when_the_product_is_an_output, .init = setup, .fini = teardown)
{
    reel_graph *g;
    cr_assert_eq(reel_graph_create(ctx, &g), REEL_OK);
    reel_tensor x = input(g, REEL_F32);
    reel_tensor gu = reel_matmul(g, x, param(g, "w", REEL_F32, 2, D, 2 * N, 3), false);
    reel_output(g, "f", reel_silu_and_mul(g, gu));
    reel_output(g, "gu", gu);
    reel_plan *p = compile(g, true, false);
    cr_assert_eq(nodes_of(p, "silu_and_mul", NULL), 1);
    reel_plan_destroy(p);
    reel_graph_destroy(g);
}

/* ---- add + rmsnorm ------------------------------------------------------------ */

/* h = x + r; n = rmsnorm(h); the sum is read again (the next residual). */
static reel_graph *addnorm_graph(reel_dtype dt)
{
    reel_graph *g;
    cr_assert_eq(reel_graph_create(ctx, &g), REEL_OK);
    reel_tensor x = input(g, dt);
    reel_tensor r = reel_matmul(g, x, param(g, "wr", dt, 2, D, D, 4), false);
    reel_tensor h = reel_add(g, x, r);
    reel_tensor n = reel_rmsnorm(g, h, param(g, "g", dt, 1, D, 0, 5), 1e-5f);
    reel_output(g, "n", n);
    reel_output(g, "next", reel_add(g, h, reel_matmul(g, n, param(g, "wo", dt, 2, D, D, 6), false)));
    return g;
}

Test(fuse, add_rmsnorm_has_both_outputs_and_the_unfused_bits, .init = setup, .fini = teardown)
{
    reel_graph *g = addnorm_graph(REEL_BF16);
    reel_plan *p = compile(g, true, false);
    const char *fused = NULL;
    cr_assert_eq(nodes_of(p, "add_rmsnorm", &fused), 1);
    cr_assert_str_eq(fused, "add+rmsnorm");
    cr_assert_eq(nodes_of(p, "rmsnorm", NULL), 0);
    cr_assert_eq(nodes_of(p, "add", NULL), 1, "the last add has no rmsnorm after it");
    reel_plan_destroy(p);
    reel_graph_destroy(g);
    static const char *const outs[] = {"n", "next"};
    size_t bytes[] = {ROWS * D * 2, ROWS * D * 2};
    same_bits(addnorm_graph, REEL_BF16, outs, 2, bytes);
    bytes[0] = bytes[1] = ROWS * D * 4;
    same_bits(addnorm_graph, REEL_F32, outs, 2, bytes);
}

/* ---- rmsnorm into the matmul that reads it ------------------------------------ */

/* A layer's shape: n0 = rmsnorm(x) -> q; h = x + q; n = rmsnorm(h) -> gate/up
 * -> silu_and_mul -> down; next = h + down: both norms fold into the matmul
 * reading them (the second with its add and the silu epilogue). */
static reel_graph *prologue_graph(reel_dtype dt)
{
    reel_graph *g;
    cr_assert_eq(reel_graph_create(ctx, &g), REEL_OK);
    reel_tensor x = input(g, dt);
    reel_tensor n0 = reel_rmsnorm(g, x, param(g, "g0", dt, 1, D, 0, 7), 1e-5f);
    reel_tensor q = reel_matmul(g, n0, param(g, "wq", dt, 2, D, D, 8), false);
    reel_tensor h = reel_add(g, x, q);
    reel_tensor n = reel_rmsnorm(g, h, param(g, "g", dt, 1, D, 0, 5), 1e-5f);
    reel_tensor f = reel_silu_and_mul(g, reel_matmul(g, n, param(g, "wgu", dt, 2, 2 * N, D, 9), true));
    reel_tensor y = reel_matmul(g, f, param(g, "wd", dt, 2, N, D, 10), false);
    reel_output(g, "next", reel_add(g, h, y));
    reel_output(g, "h", h);
    return g;
}

Test(fuse, rmsnorm_folds_into_the_matmul_reading_it_with_the_unfused_bits, .init = setup, .fini = teardown)
{
    reel_graph *g = prologue_graph(REEL_BF16);
    reel_plan *p = compile(g, true, true);
    cr_assert_eq(nodes_of(p, "rmsnorm", NULL), 0);
    cr_assert_eq(nodes_of(p, "add_rmsnorm", NULL), 0);
    cr_assert_eq(nodes_of(p, "silu_and_mul", NULL), 0);
    cr_assert_eq(nodes_of(p, "matmul", NULL), 3);
    cr_assert_eq(num_nodes(p), 4, "three matmuls and the last add");
    reel_plan_stats st = REEL_PLAN_STATS_INIT;
    cr_assert_eq(reel_plan_stats_get(p, &st), REEL_OK);
    bool pro = false, addpro = false;
    for (int i = 0; i < st.num_nodes; i++) {
        reel_node_info ni = REEL_NODE_INFO_INIT;
        cr_assert_eq(reel_plan_node_info(p, i, &ni), REEL_OK);
        pro |= strcmp(ni.fused, "rmsnorm->matmul") == 0;
        addpro |= strcmp(ni.fused, "matmul+silu_and_mul, add+rmsnorm->matmul") == 0;
    }
    cr_assert(pro && addpro, "both prologues");
    reel_plan_destroy(p);
    reel_graph_destroy(g);
    static const char *const outs[] = {"next", "h"};
    size_t bytes[] = {ROWS * D * 2, ROWS * D * 2};
    same_bits(prologue_graph, REEL_BF16, outs, 2, bytes);
    bytes[0] = bytes[1] = ROWS * D * 4;
    same_bits(prologue_graph, REEL_F32, outs, 2, bytes);
}

/* The normed rows read twice (q and k of one norm), or an output: the norm
 * stays; the sum read before the matmul runs: add_rmsnorm stays. */
Test(fuse, rmsnorm_stays_where_its_rows_or_its_sum_are_needed_apart, .init = setup, .fini = teardown)
{
    for (int twist = 0; twist < 3; twist++) {
        reel_graph *g;
        cr_assert_eq(reel_graph_create(ctx, &g), REEL_OK);
        reel_tensor x = input(g, REEL_F32);
        reel_tensor r = reel_matmul(g, x, param(g, "wr", REEL_F32, 2, D, D, 4), false);
        reel_tensor h = reel_add(g, x, r);
        /* twist 2: the sum feeds a matmul scheduled before the norm's reader */
        reel_tensor early = twist == 2 ? reel_matmul(g, h, param(g, "we", REEL_F32, 2, D, D, 11), false) : h;
        reel_tensor n = reel_rmsnorm(g, h, param(g, "g", REEL_F32, 1, D, 0, 5), 1e-5f);
        reel_tensor y = reel_matmul(g, n, param(g, "wo", REEL_F32, 2, D, D, 6), false);
        if (twist == 0)
            reel_output(g, "k", reel_matmul(g, n, param(g, "wk", REEL_F32, 2, D, D, 12), false));
        if (twist == 1)
            reel_output(g, "n", n);
        reel_output(g, "y", y);
        reel_output(g, "e", early);
        reel_plan *p = compile(g, true, false);
        cr_assert_eq(nodes_of(p, "add_rmsnorm", NULL), 1, "twist %d", twist);
        reel_plan_destroy(p);
        reel_graph_destroy(g);
    }
}

Test(fuse, a_broadcast_add_before_rmsnorm_stays_an_add, .init = setup, .fini = teardown)
{
    reel_graph *g;
    cr_assert_eq(reel_graph_create(ctx, &g), REEL_OK);
    reel_tensor x = input(g, REEL_F32);
    reel_tensor h = reel_add(g, x, param(g, "b", REEL_F32, 1, D, 0, 2));
    reel_output(g, "n", reel_rmsnorm(g, h, param(g, "g", REEL_F32, 1, D, 0, 5), 1e-5f));
    reel_plan *p = compile(g, true, false);
    cr_assert_eq(nodes_of(p, "add_rmsnorm", NULL), 0);
    reel_plan_destroy(p);
    reel_graph_destroy(g);
}

/* ---- views ---------------------------------------------------------------------- */

enum { QW = 16, KW = 8 }; /* q, k, v: 16 + 8 + 8 = 32 columns */

/* qkv = x W; q, k, v are views; their readers come late, after other
 * tensors were made (the source must stay alive); v's reader on stream s. */
static reel_graph *views_graph_on(reel_dtype dt, int vstream)
{
    reel_graph *g;
    cr_assert_eq(reel_graph_create(ctx, &g), REEL_OK);
    reel_tensor x = input(g, dt);
    reel_tensor qkv = reel_matmul(g, x, param(g, "wqkv", dt, 2, D, QW + 2 * KW, 7), false);
    reel_tensor q = reel_view_cols(g, qkv, 0, QW);
    reel_tensor k = reel_view_cols(g, qkv, QW, KW);
    reel_tensor v = reel_view_cols(g, qkv, QW + KW, KW);
    reel_set_name(g, v, "v");
    reel_tensor t = x;
    for (int i = 0; i < 3; i++) /* tensors made while the views are alive */
        t = reel_mul(g, reel_add(g, t, x), x);
    reel_tensor vk = reel_add(g, v, k);
    if (vstream)
        reel_set_stream(g, vk, vstream);
    reel_output(g, "q", reel_mul(g, q, q));
    reel_output(g, "vk", vk);
    reel_output(g, "t", t);
    reel_output(g, "kv", reel_view_cols(g, reel_matmul(g, x, param(g, "w2", dt, 2, D, 2 * KW, 8), false), KW, KW));
    return g;
}

static reel_graph *views_graph(reel_dtype dt) { return views_graph_on(dt, 0); }

Test(fuse, views_of_a_matmul_alias_its_segments_with_the_unfused_bits, .init = setup, .fini = teardown)
{
    reel_graph *g = views_graph(REEL_BF16);
    reel_plan *p = compile(g, true, false);
    const char *fused = NULL;
    cr_assert_eq(nodes_of(p, "view_cols", NULL), 1, "the kv view covers half its source: it stays a copy");
    cr_assert_eq(nodes_of(p, "matmul", &fused), 2);
    cr_assert_str_eq(fused, "matmul->3 views");
    /* The views own no placement; the qkv buffer holds their bytes. */
    reel_plan_stats st = REEL_PLAN_STATS_INIT;
    cr_assert_eq(reel_plan_stats_get(p, &st), REEL_OK);
    for (int i = 0;; i++) {
        reel_placement pl = REEL_PLACEMENT_INIT;
        if (reel_plan_placement(p, 1, i, &pl) != REEL_OK)
            break;
        cr_assert_str_neq(pl.name, "v", "a view has a placement of its own");
    }
    reel_plan_destroy(p);
    reel_graph_destroy(g);
    static const char *const outs[] = {"q", "vk", "t", "kv"};
    size_t b16[] = {ROWS * QW * 2, ROWS * KW * 2, ROWS * D * 2, ROWS * KW * 2};
    same_bits(views_graph, REEL_BF16, outs, 4, b16);
    size_t b32[] = {ROWS * QW * 4, ROWS * KW * 4, ROWS * D * 4, ROWS * KW * 4};
    same_bits(views_graph, REEL_F32, outs, 4, b32);
}

Test(fuse, views_stay_copies_when_the_source_is_an_output, .init = setup, .fini = teardown)
{
    reel_graph *g;
    cr_assert_eq(reel_graph_create(ctx, &g), REEL_OK);
    reel_tensor x = input(g, REEL_F32);
    reel_tensor qkv = reel_matmul(g, x, param(g, "wqkv", REEL_F32, 2, D, QW + KW, 7), false);
    reel_output(g, "q", reel_view_cols(g, qkv, 0, QW));
    reel_output(g, "k", reel_view_cols(g, qkv, QW, KW));
    reel_output(g, "qkv", qkv);
    reel_plan *p = compile(g, true, false);
    cr_assert_eq(nodes_of(p, "view_cols", NULL), 2);
    float q[ROWS * QW], all[ROWS * (QW + KW)];
    run(p, REEL_F32, "q", q, sizeof q);
    run(p, REEL_F32, "qkv", all, sizeof all);
    for (int t = 0; t < ROWS; t++)
        cr_assert(memcmp(&q[t * QW], &all[t * (QW + KW)], QW * 4) == 0, "row %d of the copy", t);
    reel_plan_destroy(p);
    reel_graph_destroy(g);
}

Test(fuse, the_hazard_checker_sees_a_view_as_its_sources_bytes, .init = setup, .fini = teardown)
{
    reel_graph *g = views_graph_on(REEL_F32, 1);
    /* Fused and checked: clean. */
    reel_plan *p = compile(g, true, true);
    float out[ROWS * KW];
    run(p, REEL_F32, "vk", out, sizeof out);
    int vk = -1;
    for (int i = 0; i < num_nodes(p); i++) {
        reel_node_info ni = REEL_NODE_INFO_INIT;
        cr_assert_eq(reel_plan_node_info(p, i, &ni), REEL_OK);
        if (ni.stream == 1)
            vk = i;
    }
    cr_assert_geq(vk, 0);
    reel_plan_destroy(p);
    /* The reader of the views on stream 1 without its wait on the matmul:
     * the checker names the unordered read of the source's bytes. */
    reel_compile_opts o = REEL_COMPILE_OPTS_INIT;
    o.num_buckets = 1;
    o.buckets[0] = 4;
    o.check_hazards = 1;
    reel_plan_debug dbg = {.not_capturable_node = -1, .drop_waits_of = vk + 1};
    cr_assert_eq(reel_compile_debug(g, &o, &dbg, &p), REEL_OK, "%s", reel_ctx_last_error(ctx));
    cr_assert_eq(reel_plan_set_input(p, "x", data(REEL_F32, ROWS * D, 99), ROWS), REEL_OK);
    reel_step_info s = { REEL_STEP_INFO_HEAD, .num_tokens = ROWS};
    cr_assert_eq(reel_step(p, &s), REEL_E_HAZARD);
    const char *msg = reel_ctx_last_error(ctx);
    cr_assert(strstr(msg, "'v'") || strstr(msg, "view_cols#"), "the report names the view: %s", msg);
    reel_plan_destroy(p);
    reel_graph_destroy(g);
}

/* ---- the option and the counts ---------------------------------------------------- */

Test(fuse, no_fuse_keeps_every_node_and_fusion_cuts_the_graphs_kernels, .init = setup, .fini = teardown)
{
    reel_graph *g = addnorm_graph(REEL_F32);
    reel_plan *pf = compile(g, true, false), *pu = compile(g, false, false);
    cr_assert_eq(num_nodes(pu), 5);
    for (int i = 0; i < num_nodes(pu); i++) {
        reel_node_info ni = REEL_NODE_INFO_INIT;
        cr_assert_eq(reel_plan_node_info(pu, i, &ni), REEL_OK);
        cr_assert_str_eq(ni.fused, "");
    }
    cr_assert_eq(num_nodes(pf), 4);
    int kf = 0, ku = 0;
    cr_assert_eq(reel_plan_graph_kernels(pf, 1, &kf), REEL_OK);
    cr_assert_eq(reel_plan_graph_kernels(pu, 1, &ku), REEL_OK);
    cr_assert_eq(ku, 5);
    cr_assert_eq(kf, 4);
    cr_assert_eq(reel_plan_graph_kernels(pf, 2, &kf), REEL_E_NOT_FOUND);
    reel_plan_destroy(pf);
    reel_plan_destroy(pu);
    reel_graph_destroy(g);
}
