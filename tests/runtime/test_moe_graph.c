/* A mixture-of-experts block through the public API: x -> router matmul ->
 * reel_moe_route -> reel_moe_ffn, compiled with buckets {1, 4, 16} and
 * stepped with 1, 3, 16 and 20 tokens (20 runs eagerly, past the buckets):
 * the routing and the result against a float64 reference from the step's
 * own logits; replay == eager bit for bit; the hazard checker finds
 * nothing; and the builder's refusals name the key or operand at fault.
 * Runs on the backend REEL_TEST_BACKEND names (tests/gpu registers the CUDA
 * run). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "tests/core/opts.h"
#include "tests/ops/moe_ref.h"

static reel_ctx *ctx;
static void setup(void)
{
    cr_assert_eq(reel_ctx_create(reel_test_ctx_opts(reel_test_backend()), &ctx), REEL_OK,
                 "backend '%s' is not available", reel_backend_name(reel_test_backend()));
}
static void teardown(void) { reel_ctx_destroy(ctx); }

#define HAS(s)                                                                                                      \
    cr_assert(strstr(reel_ctx_last_error(ctx), (s)) != NULL, "message '%s' lacks '%s'", reel_ctx_last_error(ctx), \
              (s))

enum { H = 32, F = 16, MAXT = 20 };

/* ---- data ------------------------------------------------------------------------ */

static uint64_t rnd_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double rnd(uint64_t *s, double lo, double hi) { return lo + (hi - lo) * ((double)(rnd_next(s) >> 11) * 0x1p-53); }

/* n values in [lo, hi) stored as dt (bytes) and as the doubles they hold. */
typedef struct tdata {
    reel_dtype dt;
    int64_t n;
    void *p;
    double *v;
} tdata;

static tdata tdata_rand(reel_dtype dt, int64_t n, uint64_t *s, double lo, double hi)
{
    tdata d = { dt, n, calloc((size_t)n, reel_dtype_size(dt)), calloc((size_t)n, sizeof(double)) };
    for (int64_t i = 0; i < n; i++) {
        reel_store(d.p, dt, i, (float)rnd(s, lo, hi));
        d.v[i] = reel_load(d.p, dt, i);
    }
    return d;
}

static void tdata_free(tdata *d) { free(d->p), free(d->v); }

/* ---- the block ------------------------------------------------------------------- */

typedef struct moe_block {
    reel_moe_params p;
    reel_dtype dt;
    tdata wr, wgu, wdn; /* router [H, E], gate+up [E*2F, H], down [E*H, F] */
    float *bias;        /* [E] or NULL */
    reel_graph *g;
} moe_block;

static void block_new(moe_block *b, const reel_moe_params *p, reel_dtype dt, bool with_bias, uint64_t seed)
{
    memset(b, 0, sizeof *b);
    b->p = *p;
    b->dt = dt;
    const int E = p->num_experts;
    b->wr = tdata_rand(dt, (int64_t)H * E, &seed, -0.4, 0.4);
    b->wgu = tdata_rand(dt, (int64_t)E * 2 * F * H, &seed, -0.3, 0.3);
    b->wdn = tdata_rand(dt, (int64_t)E * H * F, &seed, -0.3, 0.3);
    if (with_bias) {
        b->bias = malloc((size_t)E * sizeof *b->bias);
        for (int e = 0; e < E; e++)
            b->bias[e] = (float)rnd(&seed, -0.2, 0.2);
    }
    cr_assert_eq(reel_graph_create(ctx, &b->g), REEL_OK);
    reel_graph *g = b->g;
    int64_t xd[2] = { REEL_DIM_TOKENS, H }, rd[2] = { H, E }, gd[2] = { (int64_t)E * 2 * F, H };
    int64_t dd[2] = { (int64_t)E * H, F }, bd[1] = { E };
    reel_tensor x = reel_input(g, "x", dt, 2, xd);
    reel_tensor wr = reel_param(g, "w_router", dt, 2, rd), wgu = reel_param(g, "w_gate_up", dt, 2, gd);
    reel_tensor wdn = reel_param(g, "w_down", dt, 2, dd), bias = { 0 };
    cr_assert_eq(reel_param_bind(g, wr, b->wr.p), REEL_OK);
    cr_assert_eq(reel_param_bind(g, wgu, b->wgu.p), REEL_OK);
    cr_assert_eq(reel_param_bind(g, wdn, b->wdn.p), REEL_OK);
    if (with_bias) {
        bias = reel_param(g, "bias", REEL_F32, 1, bd);
        cr_assert_eq(reel_param_bind(g, bias, b->bias), REEL_OK);
    }
    reel_tensor logits = reel_matmul(g, x, wr, false), ids, w;
    cr_assert_eq(reel_moe_route(g, logits, bias, &b->p, &ids, &w), REEL_OK, "%s", reel_ctx_last_error(ctx));
    reel_tensor y = reel_moe_ffn(g, x, ids, w, wgu, wdn, E);
    cr_assert_eq(reel_output(g, "y", y), REEL_OK, "%s", reel_ctx_last_error(ctx));
    cr_assert_eq(reel_output(g, "logits", logits), REEL_OK);
    cr_assert_eq(reel_output(g, "ids", ids), REEL_OK);
    cr_assert_eq(reel_output(g, "weights", w), REEL_OK);
}

static void block_free(moe_block *b)
{
    reel_graph_destroy(b->g);
    tdata_free(&b->wr), tdata_free(&b->wgu), tdata_free(&b->wdn);
    free(b->bias);
}

static reel_plan *block_compile(moe_block *b, bool capture)
{
    reel_compile_opts o = REEL_COMPILE_OPTS_INIT;
    o.num_buckets = 3;
    o.buckets[0] = 1, o.buckets[1] = 4, o.buckets[2] = 16;
    o.no_capture = !capture;
    o.check_hazards = 1;
    reel_plan *p = NULL;
    cr_assert_eq(reel_compile(b->g, &o, &p), REEL_OK, "%s", reel_ctx_last_error(ctx));
    return p;
}

/* ---- the float64 reference ------------------------------------------------------- */

static double rnd_dt(reel_dtype dt, double v) { return reel_round_to(dt, (float)v); }

/* Token t's result: sum over its experts of weight times the expert's
 * SwiGLU MLP, the op's roundings (gate, up, activation, down) emulated. */
static void ref_ffn(const moe_block *b, const double *x, const int32_t *ids, const double *w, double *y)
{
    const reel_dtype dt = b->dt;
    double act[F];
    for (int h = 0; h < H; h++)
        y[h] = 0;
    for (int j = 0; j < b->p.top_k; j++) {
        const int e = ids[j];
        for (int i = 0; i < F; i++) {
            double g = 0, u = 0;
            for (int h = 0; h < H; h++) {
                g += x[h] * b->wgu.v[((int64_t)e * 2 * F + i) * H + h];
                u += x[h] * b->wgu.v[((int64_t)e * 2 * F + F + i) * H + h];
            }
            g = rnd_dt(dt, g);
            act[i] = rnd_dt(dt, g / (1 + exp(-g)) * rnd_dt(dt, u));
        }
        for (int h = 0; h < H; h++) {
            double s = 0;
            for (int i = 0; i < F; i++)
                s += act[i] * b->wdn.v[((int64_t)e * H + h) * F + i];
            y[h] += w[j] * rnd_dt(dt, s);
        }
    }
}

/* ---- stepping -------------------------------------------------------------------- */

static const void *output(reel_plan *p, const char *name, int32_t n)
{
    const void *d = NULL;
    int64_t rows = -1;
    cr_assert_eq(reel_plan_output(p, name, &d, &rows), REEL_OK, "%s", reel_ctx_last_error(ctx));
    cr_assert_eq(rows, n);
    return d;
}

static void step(reel_plan *p, const tdata *x, int32_t n, reel_fallback want)
{
    cr_assert_eq(reel_plan_set_input(p, "x", x->p, n), REEL_OK, "%s", reel_ctx_last_error(ctx));
    reel_step_info s = REEL_STEP_INFO_INIT;
    s.num_tokens = n;
    cr_assert_eq(reel_step(p, &s), REEL_OK, "n=%d: %s", n, reel_ctx_last_error(ctx));
    cr_assert_eq(reel_plan_last_fallback(p), want, "n=%d ran as %s", n, reel_fallback_str(reel_plan_last_fallback(p)));
}

/* The step's routing and result against the reference, from the step's
 * own logits (what the router op read), for each of the n tokens. A token
 * whose reference decisions come within 1e-6 (where float rounding may
 * decide) is checked by its result only. */
static void check_step(const moe_block *b, reel_plan *p, const tdata *x, int32_t n)
{
    const int E = b->p.num_experts, K = b->p.top_k;
    const void *lg = output(p, "logits", n), *yo = output(p, "y", n);
    const int32_t *ids = output(p, "ids", n);
    const float *w = output(p, "weights", n);
    double l[64], rw[16], y[H], ymax = 0;
    int32_t rid[16];
    double *want = calloc((size_t)n * H, sizeof(double));
    for (int32_t t = 0; t < n; t++) {
        for (int e = 0; e < E; e++)
            l[e] = reel_load(lg, b->dt, (int64_t)t * E + e);
        bool clear = moe_ref_route(&b->p, b->bias, l, rid, rw) > 1e-6;
        for (int j = 0; j < K && clear; j++) {
            cr_assert_eq(ids[t * K + j], rid[j], "%s n=%d token %d choice %d: %d, want %d",
                         reel_dtype_name(b->dt), n, t, j, ids[t * K + j], rid[j]);
            cr_assert(fabs(w[t * K + j] - rw[j]) <= 1e-6 + 1e-5 * fabs(rw[j]), "token %d weight %d: %g, want %g", t,
                      j, (double)w[t * K + j], rw[j]);
        }
        for (int j = 0; j < K; j++) /* the result of the routing the plan chose */
            rw[j] = w[t * K + j], rid[j] = ids[t * K + j];
        ref_ffn(b, x->v + (int64_t)t * H, rid, rw, y);
        for (int h = 0; h < H; h++) {
            want[t * H + h] = y[h];
            ymax = fabs(y[h]) > ymax ? fabs(y[h]) : ymax;
        }
    }
    const double rt = b->dt == REEL_F32 ? 1e-4 : 4e-2;
    for (int64_t i = 0; i < (int64_t)n * H; i++) {
        double got = reel_load(yo, b->dt, i);
        cr_assert(fabs(got - want[i]) <= rt * (ymax + fabs(want[i])), "%s n=%d y[%lld] = %g, want %g",
                  reel_dtype_name(b->dt), n, (long long)i, got, want[i]);
    }
    free(want);
}

static void same_bits(reel_plan *a, reel_plan *b, const char *name, int32_t n, size_t row)
{
    const void *da = output(a, name, n), *db = output(b, name, n);
    cr_assert(!memcmp(da, db, row * (size_t)n), "n=%d output '%s': replay != eager", n, name);
}

static void run_block(const reel_moe_params *mp, bool with_bias, uint64_t seed)
{
    const reel_dtype dts[2] = { REEL_F32, REEL_BF16 };
    for (int d = 0; d < 2; d++) {
        moe_block b;
        block_new(&b, mp, dts[d], with_bias, seed + (uint64_t)d);
        reel_plan *pr = block_compile(&b, true), *pe = block_compile(&b, false);
        const int32_t ns[4] = { 1, 3, 16, 20 };
        const size_t es = reel_dtype_size(dts[d]), K = (size_t)mp->top_k;
        for (int i = 0; i < 4; i++) {
            const int32_t n = ns[i];
            uint64_t s = seed * 100 + (uint64_t)n;
            tdata x = tdata_rand(dts[d], (int64_t)n * H, &s, -1, 1);
            step(pr, &x, n, n > 16 ? REEL_FALLBACK_TOKENS_OVER_LIMIT : REEL_FALLBACK_NONE);
            step(pe, &x, n, n > 16 ? REEL_FALLBACK_TOKENS_OVER_LIMIT : REEL_FALLBACK_NO_BUCKET);
            check_step(&b, pr, &x, n);
            same_bits(pr, pe, "logits", n, (size_t)mp->num_experts * es);
            same_bits(pr, pe, "ids", n, K * 4);
            same_bits(pr, pe, "weights", n, K * 4);
            same_bits(pr, pe, "y", n, H * es);
            tdata_free(&x);
        }
        reel_plan_stats st = REEL_PLAN_STATS_INIT;
        cr_assert_eq(reel_plan_stats_get(pr, &st), REEL_OK);
        cr_assert_eq(st.replays, 3, "%llu replays", (unsigned long long)st.replays);
        cr_assert_eq(st.hazards, 0, "the hazard checker found %llu hazards", (unsigned long long)st.hazards);
        cr_assert_eq(reel_plan_stats_get(pe, &st), REEL_OK);
        cr_assert_eq(st.hazards, 0, "the hazard checker found %llu hazards (eager)", (unsigned long long)st.hazards);
        reel_plan_destroy(pr);
        reel_plan_destroy(pe);
        block_free(&b);
    }
}

Test(moe_graph, softmax_routing_block_matches_the_reference_and_replays_as_it_runs, .init = setup,
     .fini = teardown)
{
    reel_moe_params p = REEL_MOE_PARAMS_INIT; /* Mixtral: 8 experts, top 2, renormalized */
    p.num_experts = 8;
    p.top_k = 2;
    p.renormalize = true;
    run_block(&p, false, 7);
}

Test(moe_graph, sigmoid_grouped_biased_block_matches_the_reference_and_replays_as_it_runs, .init = setup,
     .fini = teardown)
{
    reel_moe_params p = REEL_MOE_PARAMS_INIT; /* DeepSeek V3 in small */
    p.num_experts = 16;
    p.top_k = 4;
    p.scoring = REEL_MOE_SIGMOID;
    p.renormalize = true;
    p.n_group = 4;
    p.topk_group = 2;
    p.routed_scaling = 2.5f;
    run_block(&p, true, 17);
}

/* Ids given as an input are checked on the host before launch: one outside
 * [0, E) refuses the step (REEL_E_LIMIT, naming the token and the id)
 * before any op runs; in-range ids from an input run as the router's
 * would. (A kernel that still meets such an id gives that pair nothing:
 * tests/ops/test_host_moe.c and the GPU op tests.) */
Test(moe_graph, ids_from_an_input_are_checked_before_launch, .init = setup, .fini = teardown)
{
    reel_moe_params mp = REEL_MOE_PARAMS_INIT;
    mp.num_experts = 8;
    mp.top_k = 2;
    moe_block b = { .p = mp, .dt = REEL_F32 };
    uint64_t seed = 29;
    b.wgu = tdata_rand(REEL_F32, 8 * 2 * F * H, &seed, -0.3, 0.3);
    b.wdn = tdata_rand(REEL_F32, 8 * H * F, &seed, -0.3, 0.3);
    reel_graph *g;
    cr_assert_eq(reel_graph_create(ctx, &g), REEL_OK);
    int64_t xd[2] = { REEL_DIM_TOKENS, H }, pd[2] = { REEL_DIM_TOKENS, 2 }, gd[2] = { 8 * 2 * F, H };
    int64_t dd[2] = { 8 * H, F };
    reel_tensor x = reel_input(g, "x", REEL_F32, 2, xd), ids = reel_input(g, "ids", REEL_I32, 2, pd);
    reel_tensor w = reel_input(g, "weights", REEL_F32, 2, pd);
    reel_tensor wgu = reel_param(g, "w_gate_up", REEL_F32, 2, gd), wdn = reel_param(g, "w_down", REEL_F32, 2, dd);
    cr_assert_eq(reel_param_bind(g, wgu, b.wgu.p), REEL_OK);
    cr_assert_eq(reel_param_bind(g, wdn, b.wdn.p), REEL_OK);
    cr_assert_eq(reel_output(g, "y", reel_moe_ffn(g, x, ids, w, wgu, wdn, 8)), REEL_OK, "%s", reel_ctx_last_error(ctx));
    reel_compile_opts o = REEL_COMPILE_OPTS_INIT;
    o.num_buckets = 1;
    o.buckets[0] = 4;
    reel_plan *p;
    cr_assert_eq(reel_compile(g, &o, &p), REEL_OK, "%s", reel_ctx_last_error(ctx));
    tdata xv = tdata_rand(REEL_F32, 3 * H, &seed, -1, 1);
    int32_t iv[6] = { 0, 5, -1, 2, 99, INT32_MIN };
    const float wv[6] = { 0.75f, 0.25f, 0.5f, 0.5f, 1.0f, 1.0f };
    reel_step_info s = REEL_STEP_INFO_INIT;
    s.num_tokens = 3;
    static const int at[3] = { 2, 4, 5 };
    for (int bad = 0; bad < 3; bad++) {
        int32_t jv[6] = { 0, 5, 1, 2, 7, 3 };
        jv[at[bad]] = iv[at[bad]];
        cr_assert_eq(reel_plan_set_input(p, "x", xv.p, 3), REEL_OK);
        cr_assert_eq(reel_plan_set_input(p, "ids", jv, 3), REEL_OK);
        cr_assert_eq(reel_plan_set_input(p, "weights", wv, 3), REEL_OK);
        cr_assert_eq(reel_step(p, &s), REEL_E_LIMIT, "id %d", iv[at[bad]]);
        HAS("moe_align");
        HAS("before launch");
    }
    for (int i = 2; i < 6; i++)
        iv[i] = i + 1;
    cr_assert_eq(reel_plan_set_input(p, "x", xv.p, 3), REEL_OK);
    cr_assert_eq(reel_plan_set_input(p, "ids", iv, 3), REEL_OK);
    cr_assert_eq(reel_plan_set_input(p, "weights", wv, 3), REEL_OK);
    cr_assert_eq(reel_step(p, &s), REEL_OK, "%s", reel_ctx_last_error(ctx));
    const float *y = output(p, "y", 3);
    for (int t = 0; t < 3; t++) {
        int32_t rid[2] = { iv[t * 2], iv[t * 2 + 1] };
        double rw[2] = { wv[t * 2], wv[t * 2 + 1] }, want[H];
        ref_ffn(&b, xv.v + t * H, rid, rw, want);
        for (int h = 0; h < H; h++)
            cr_assert(fabs(y[t * H + h] - want[h]) <= 1e-4 * (1 + fabs(want[h])), "token %d y[%d] = %g, want %g", t,
                      h, (double)y[t * H + h], want[h]);
    }
    reel_plan_destroy(p);
    reel_graph_destroy(g);
    tdata_free(&xv), tdata_free(&b.wgu), tdata_free(&b.wdn);
}

/* The worst case of the sorted layout: every pair of the largest bucket
 * (64 tokens, 2 choices) on one expert, in a captured graph. The layout of
 * T * K rows holds it by construction; the result is each token's own. */
Test(moe_graph, every_pair_on_one_expert_at_the_largest_bucket, .init = setup, .fini = teardown)
{
    enum { T = 64, E = 8 };
    reel_moe_params mp = REEL_MOE_PARAMS_INIT;
    mp.num_experts = E;
    mp.top_k = 2;
    moe_block b = { .p = mp, .dt = REEL_F32 };
    uint64_t seed = 31;
    b.wgu = tdata_rand(REEL_F32, E * 2 * F * H, &seed, -0.3, 0.3);
    b.wdn = tdata_rand(REEL_F32, E * H * F, &seed, -0.3, 0.3);
    reel_graph *g;
    cr_assert_eq(reel_graph_create(ctx, &g), REEL_OK);
    int64_t xd[2] = { REEL_DIM_TOKENS, H }, pd[2] = { REEL_DIM_TOKENS, 2 }, gd[2] = { E * 2 * F, H };
    int64_t dd[2] = { E * H, F };
    reel_tensor x = reel_input(g, "x", REEL_F32, 2, xd), ids = reel_input(g, "ids", REEL_I32, 2, pd);
    reel_tensor w = reel_input(g, "weights", REEL_F32, 2, pd);
    reel_tensor wgu = reel_param(g, "w_gate_up", REEL_F32, 2, gd), wdn = reel_param(g, "w_down", REEL_F32, 2, dd);
    cr_assert_eq(reel_param_bind(g, wgu, b.wgu.p), REEL_OK);
    cr_assert_eq(reel_param_bind(g, wdn, b.wdn.p), REEL_OK);
    cr_assert_eq(reel_output(g, "y", reel_moe_ffn(g, x, ids, w, wgu, wdn, E)), REEL_OK, "%s", reel_ctx_last_error(ctx));
    reel_compile_opts o = REEL_COMPILE_OPTS_INIT;
    o.num_buckets = 2;
    o.buckets[0] = 16;
    o.buckets[1] = T;
    reel_plan *p;
    cr_assert_eq(reel_compile(g, &o, &p), REEL_OK, "%s", reel_ctx_last_error(ctx));
    tdata xv = tdata_rand(REEL_F32, T * H, &seed, -1, 1);
    int32_t iv[2 * T];
    float wv[2 * T];
    for (int i = 0; i < 2 * T; i++) {
        iv[i] = 5;
        wv[i] = i % 2 ? 0.25f : 0.75f;
    }
    cr_assert_eq(reel_plan_set_input(p, "x", xv.p, T), REEL_OK);
    cr_assert_eq(reel_plan_set_input(p, "ids", iv, T), REEL_OK);
    cr_assert_eq(reel_plan_set_input(p, "weights", wv, T), REEL_OK);
    reel_step_info s = REEL_STEP_INFO_INIT;
    s.num_tokens = T;
    cr_assert_eq(reel_step(p, &s), REEL_OK, "%s", reel_ctx_last_error(ctx));
    cr_assert_eq(reel_plan_last_fallback(p), REEL_FALLBACK_NONE, "the largest bucket replays");
    const float *y = output(p, "y", T);
    for (int t = 0; t < T; t++) {
        int32_t rid[2] = { 5, 5 };
        double rw[2] = { 0.75, 0.25 }, want[H];
        ref_ffn(&b, xv.v + t * H, rid, rw, want);
        for (int h = 0; h < H; h++)
            cr_assert(fabs(y[t * H + h] - want[h]) <= 1e-4 * (1 + fabs(want[h])), "token %d y[%d] = %g, want %g", t,
                      h, (double)y[t * H + h], want[h]);
    }
    reel_plan_destroy(p);
    reel_graph_destroy(g);
    tdata_free(&xv), tdata_free(&b.wgu), tdata_free(&b.wdn);
}

/* Ids another op computes (here a top-k's [T, K] int32) cannot be checked
 * before launch: refused at compile, naming the op and the tensor. */
Test(moe_graph, ids_an_op_computes_other_than_the_router_are_refused_at_compile, .init = setup, .fini = teardown)
{
    reel_graph *g;
    cr_assert_eq(reel_graph_create(ctx, &g), REEL_OK);
    int64_t xd[2] = { REEL_DIM_TOKENS, H }, sd[2] = { REEL_DIM_TOKENS, 8 }, ld[1] = { REEL_DIM_TOKENS };
    int64_t pd[2] = { REEL_DIM_TOKENS, 2 }, gd[2] = { 8 * 2 * F, H }, dd[2] = { 8 * H, F };
    reel_tensor x = reel_input(g, "x", REEL_F32, 2, xd);
    reel_tensor ids = reel_topk(g, reel_input(g, "scores", REEL_F32, 2, sd), reel_input(g, "lengths", REEL_I32, 1, ld),
                                (reel_tensor){ 0 }, 2, 0);
    reel_tensor w = reel_input(g, "weights", REEL_F32, 2, pd);
    reel_tensor wgu = reel_param(g, "w_gate_up", REEL_F32, 2, gd), wdn = reel_param(g, "w_down", REEL_F32, 2, dd);
    reel_param_defer(g, wgu);
    reel_param_defer(g, wdn);
    reel_tensor y = reel_moe_ffn(g, x, ids, w, wgu, wdn, 8);
    cr_assert_eq(reel_output(g, "y", y), REEL_OK, "%s", reel_ctx_last_error(ctx));
    reel_plan *p = NULL;
    cr_assert_eq(reel_compile(g, NULL, &p), REEL_E_UNSUPPORTED, "%s", reel_ctx_last_error(ctx));
    HAS("moe_align");
    HAS("expert ids");
    reel_graph_destroy(g);
}

/* ---- refusals -------------------------------------------------------------------- */

typedef struct refusal {
    int E, K, scoring, ng, tg;
    bool bias;
    int64_t gu_rows, dn_cols; /* 0: right */
    const char *names[2];     /* what the message must name */
} refusal;

/* Builds the block with one thing wrong; the route or the ffn call is
 * refused with a message naming it, and compile fails after it. */
static void refused(const refusal *r)
{
    reel_graph *g;
    cr_assert_eq(reel_graph_create(ctx, &g), REEL_OK);
    const int E = r->E > 0 && r->E <= 64 ? r->E : 8;
    int64_t xd[2] = { REEL_DIM_TOKENS, H }, rd[2] = { H, E }, bd[1] = { E };
    int64_t gd[2] = { r->gu_rows ? r->gu_rows : (int64_t)E * 2 * F, H };
    int64_t dd[2] = { (int64_t)E * H, r->dn_cols ? r->dn_cols : F };
    reel_tensor x = reel_input(g, "x", REEL_F32, 2, xd);
    reel_tensor logits = reel_matmul(g, x, reel_param(g, "w_router", REEL_F32, 2, rd), false);
    reel_tensor bias = r->bias ? reel_param(g, "bias", REEL_F32, 1, bd) : (reel_tensor){ 0 };
    reel_moe_params p = REEL_MOE_PARAMS_INIT;
    p.num_experts = r->E;
    p.top_k = r->K;
    p.scoring = r->scoring;
    p.n_group = r->ng;
    p.topk_group = r->tg;
    reel_tensor ids, w;
    reel_status st = reel_moe_route(g, logits, bias, &p, &ids, &w);
    if (st == REEL_OK) {
        reel_tensor y = reel_moe_ffn(g, x, ids, w, reel_param(g, "w_gate_up", REEL_F32, 2, gd),
                                     reel_param(g, "w_down", REEL_F32, 2, dd), E);
        cr_assert_eq(y.id, 0, "the ffn was accepted");
        st = reel_graph_status(g);
    } else {
        cr_assert(ids.id == 0 && w.id == 0, "a refused route wrote handles");
    }
    cr_assert_neq(st, REEL_OK, "accepted");
    for (int i = 0; i < 2 && r->names[i]; i++)
        HAS(r->names[i]);
    reel_plan *pl = NULL;
    cr_assert_neq(reel_compile(g, NULL, &pl), REEL_OK);
    reel_graph_destroy(g);
}

Test(moe_graph, bad_params_and_weights_are_refused_at_build_naming_the_key_or_operand, .init = setup,
     .fini = teardown)
{
    const refusal rs[] = {
        { .E = 0, .K = 1, .names = { "moe_route", "num_experts" } },
        { .E = 513, .K = 2, .names = { "num_experts", "512" } },
        { .E = 8, .K = 9, .names = { "top_k", "9" } },
        { .E = 8, .K = 0, .names = { "top_k" } },
        { .E = 32, .K = 17, .names = { "top_k", "17" } },
        { .E = 8, .K = 2, .scoring = 2, .names = { "scoring" } },
        { .E = 8, .K = 2, .scoring = REEL_MOE_SIGMOID, .ng = 3, .tg = 1, .names = { "n_group", "divide" } },
        { .E = 8, .K = 2, .scoring = REEL_MOE_SIGMOID, .ng = 4, .tg = 5, .names = { "topk_group" } },
        { .E = 8, .K = 2, .scoring = REEL_MOE_SIGMOID, .ng = 4, .tg = 0, .names = { "topk_group" } },
        { .E = 8, .K = 6, .scoring = REEL_MOE_SIGMOID, .ng = 4, .tg = 2, .names = { "top_k", "topk_group" } },
        { .E = 8, .K = 2, .scoring = REEL_MOE_SIGMOID, .ng = 8, .tg = 2, .names = { "n_group", "top 2" } },
        { .E = 8, .K = 2, .scoring = REEL_MOE_SOFTMAX, .bias = true, .names = { "bias", "SIGMOID" } },
        { .E = 8, .K = 2, .gu_rows = 8 * 2 * F + 1, .names = { "moe_gate_up", "w_gate_up" } },
        { .E = 8, .K = 2, .gu_rows = 8 * F, .names = { "moe_down", "w_down" } }, /* F of 8 against w_down's 16 */
        { .E = 8, .K = 2, .gu_rows = 8 * 3, .names = { "moe_gate_up", "gate and up" } },
        { .E = 8, .K = 2, .dn_cols = F + 1, .names = { "moe_down", "w_down" } },
    };
    for (size_t i = 0; i < sizeof rs / sizeof rs[0]; i++)
        refused(&rs[i]);
}

Test(moe_graph, params_not_initialised_are_refused_with_their_init, .init = setup, .fini = teardown)
{
    reel_graph *g;
    cr_assert_eq(reel_graph_create(ctx, &g), REEL_OK);
    int64_t ld[2] = { REEL_DIM_TOKENS, 8 };
    reel_tensor logits = reel_input(g, "logits", REEL_F32, 2, ld), ids, w;
    reel_moe_params p;
    memset(&p, 0, sizeof p);
    p.num_experts = 8;
    p.top_k = 2;
    cr_assert_eq(reel_moe_route(g, logits, (reel_tensor){ 0 }, &p, &ids, &w), REEL_E_VERSION);
    HAS("REEL_MOE_PARAMS_INIT");
    reel_graph_destroy(g);
    cr_assert_eq(reel_graph_create(ctx, &g), REEL_OK);
    logits = reel_input(g, "logits", REEL_F32, 2, ld);
    cr_assert_eq(reel_moe_route(g, logits, (reel_tensor){ 0 }, NULL, &ids, &w), REEL_E_INVALID_ARG);
    HAS("moe_route");
    reel_graph_destroy(g);
}

/* Logits of the wrong width for num_experts, and ids of another router's
 * width for the ffn. */
Test(moe_graph, operands_of_the_wrong_width_are_refused, .init = setup, .fini = teardown)
{
    reel_graph *g;
    cr_assert_eq(reel_graph_create(ctx, &g), REEL_OK);
    int64_t ld[2] = { REEL_DIM_TOKENS, 10 };
    reel_tensor logits = reel_input(g, "logits", REEL_F32, 2, ld), ids, w;
    reel_moe_params p = REEL_MOE_PARAMS_INIT;
    p.num_experts = 8;
    p.top_k = 2;
    cr_assert_eq(reel_moe_route(g, logits, (reel_tensor){ 0 }, &p, &ids, &w), REEL_E_SHAPE);
    HAS("logits");
    reel_graph_destroy(g);

    cr_assert_eq(reel_graph_create(ctx, &g), REEL_OK);
    int64_t xd[2] = { REEL_DIM_TOKENS, H }, id2[2] = { REEL_DIM_TOKENS, 2 }, id3[2] = { REEL_DIM_TOKENS, 3 };
    int64_t gd[2] = { 8 * 2 * F, H }, dd[2] = { 8 * H, F };
    reel_tensor x = reel_input(g, "x", REEL_F32, 2, xd);
    reel_tensor i2 = reel_input(g, "ids", REEL_I32, 2, id2), w3 = reel_input(g, "weights", REEL_F32, 2, id3);
    reel_tensor y = reel_moe_ffn(g, x, i2, w3, reel_param(g, "w_gate_up", REEL_F32, 2, gd),
                                 reel_param(g, "w_down", REEL_F32, 2, dd), 8);
    cr_assert_eq(y.id, 0);
    HAS("moe_combine");
    HAS("weights");
    reel_graph_destroy(g);
}
