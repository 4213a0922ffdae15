/* Issue 49: every refusal has a message. Walks every public function of
 * reel.h, memory.h, comm.h, parallel.h, safetensors.h and models.h that
 * returns a reel_status with NULL and out-of-range arguments (NULL handles
 * and out pointers, negative sizes and counts, bad enum values, an index
 * past the end, structs not initialised with their _INIT) and fails on any
 * non-OK status whose message is empty or stale. The message is read on the
 * context when the call has one (every handle here comes from one context),
 * in the thread's last error (reel_ctx_last_error(NULL)) when it has none.
 * Before each call that place is set to a sentinel by a known refusal, so a
 * refusal that sets nothing fails as a stale sentinel.
 *
 * Walked without a message check, as documented (docs/api.md):
 *  - reel_graph_status on a graph holding an error: "Sets no message" (the
 *    error's message was set when it happened); its NULL case is walked.
 *  - reel_comm_destroy: NULL is REEL_OK; its one refusal needs a plan
 *    compiled with the communicator (covered by the comm tests). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "reel/comm.h"
#include "reel/memory.h"
#include "reel/models.h"
#include "reel/parallel.h"
#include "reel/safetensors.h"
#include "tests/core/opts.h"

#define SENT "sentinel-no-new-message"

static reel_ctx *ctx;
static reel_plan *sp;  /* gives the context's sentinel */
static int calls, refusals;

static void mark(reel_ctx *c)
{
    if (c) {
        float x = 0;
        reel_plan_set_input(sp, SENT, &x, 1);
    } else {
        reel_backend_kind k;
        reel_backend_parse(SENT, &k);
    }
    cr_assert(strstr(reel_ctx_last_error(c), SENT), "sentinel not set: '%s'", reel_ctx_last_error(c));
}

/* call refused (or not) with a fresh message in c's place (thread's if NULL) */
#define CHECK(c, call)                                                                                   \
    do {                                                                                                 \
        mark(c);                                                                                         \
        reel_status st_ = (call);                                                                        \
        const char *m_ = reel_ctx_last_error(c);                                                         \
        calls++;                                                                                         \
        if (st_ != REEL_OK) {                                                                            \
            refusals++;                                                                                  \
            cr_expect(*m_ && !strstr(m_, SENT), "%s (line %d) returned %s without a message%s", #call,  \
                      __LINE__, reel_status_str(st_), *m_ ? " (the sentinel was left)" : "");          \
        }                                                                                                \
    } while (0)

#define T(c, call) CHECK((c), (call))
#define TH(call) CHECK(NULL, (call))

static reel_graph *graphs[256];
static int ngraphs;
static reel_tensor ga; /* input "a" of the last fresh graph */

/* A graph with no error yet: builder refusals after a first one keep the
 * first message, so each builder case gets its own. */
static reel_graph *fresh(void)
{
    reel_graph *g;
    cr_assert_eq(reel_graph_create(ctx, &g), REEL_OK);
    cr_assert(ngraphs < 256);
    graphs[ngraphs++] = g;
    int64_t d[] = {REEL_DIM_TOKENS, 4};
    ga = reel_input(g, "a", REEL_F32, 2, d);
    return g;
}

static reel_status src_fn(void *user, const reel_model_tensor *t, void *dst, size_t bytes)
{
    (void)user, (void)t, (void)dst, (void)bytes;
    return REEL_OK;
}

static const char cfg[] = "{\"model_type\": \"llama\", \"hidden_size\": 64, \"num_hidden_layers\": 2, "
                          "\"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"intermediate_size\": 96, "
                          "\"vocab_size\": 128, \"hidden_act\": \"silu\", \"rms_norm_eps\": 1e-05, "
                          "\"torch_dtype\": \"float32\"}";

Test(every_refusal, has_a_message)
{
    cr_assert_eq(reel_ctx_create(reel_test_ctx_opts(REEL_BACKEND_HOST), &ctx), REEL_OK);
    reel_graph *g0 = fresh();
    int64_t d4[] = {REEL_DIM_TOKENS, 4}, dw[] = {4}, ds[] = {1, 4};
    reel_tensor b = reel_input(g0, "b", REEL_F32, 2, d4);
    reel_tensor w = reel_param(g0, "w", REEL_F32, 1, dw);
    reel_tensor s = reel_state(g0, "s", REEL_F32, 2, ds);
    cr_assert_eq(reel_param_defer(g0, w), REEL_OK);
    cr_assert_eq(reel_output(g0, "sum", reel_add(g0, ga, b)), REEL_OK);
    (void)s;
    cr_assert_eq(reel_compile(g0, NULL, &sp), REEL_OK, "%s", reel_ctx_last_error(ctx));
    reel_plan *p;
    cr_assert_eq(reel_compile(g0, NULL, &p), REEL_OK, "%s", reel_ctx_last_error(ctx));
    reel_tensor bad = {999999}, none = {0};
    float buf[64] = {0};
    const void *outp;
    int64_t rows;

    /* ---- reel.h: context ---- */
    reel_ctx_opts bo = REEL_CTX_OPTS_INIT;
    bo.backend = (reel_backend_kind)99;
    reel_ctx *c2 = NULL;
    TH(reel_ctx_create(NULL, NULL));
    TH(reel_ctx_create(&bo, &c2));
    reel_ctx_opts zo;
    memset(&zo, 0, sizeof zo);
    TH(reel_ctx_create(&zo, &c2));
    reel_ctx_destroy(c2);
    size_t av, tot;
    TH(reel_ctx_memory(NULL, &av, &tot));
    T(ctx, reel_ctx_memory(ctx, NULL, NULL));
    reel_backend_kind k;
    TH(reel_backend_parse(NULL, &k));
    TH(reel_backend_parse("host", NULL));
    TH(reel_backend_parse("tpu", &k));
    TH(reel_set_log_hook(NULL, NULL, NULL, REEL_LOG_ERROR));
    T(ctx, reel_set_log_hook(ctx, NULL, NULL, (reel_log_level)-1));
    T(ctx, reel_set_log_hook(ctx, NULL, NULL, (reel_log_level)99));

    /* ---- reel.h: graph ---- */
    reel_graph *gx;
    TH(reel_graph_create(NULL, &gx));
    T(ctx, reel_graph_create(ctx, NULL));
    TH(reel_graph_status(NULL));
    TH(reel_param_bind(NULL, w, buf));
    T(ctx, reel_param_bind(fresh(), bad, buf));
    T(ctx, reel_param_bind(fresh(), none, buf));
    T(ctx, reel_param_bind(fresh(), ga, buf));
    { reel_graph *g = fresh(); reel_tensor pw = reel_param(g, "w", REEL_F32, 1, dw); T(ctx, reel_param_bind(g, pw, NULL)); }
    TH(reel_param_defer(NULL, w));
    T(ctx, reel_param_defer(fresh(), bad));
    T(ctx, reel_param_defer(fresh(), ga));
    TH(reel_output(NULL, "x", w));
    T(ctx, reel_output(fresh(), NULL, ga));
    T(ctx, reel_output(fresh(), "x", bad));
    T(ctx, reel_output(fresh(), "x", none));
    TH(reel_set_name(NULL, w, "n"));
    T(ctx, reel_set_name(fresh(), bad, "n"));
    T(ctx, reel_set_name(fresh(), ga, NULL));
    TH(reel_set_stream(NULL, w, 0));
    T(ctx, reel_set_stream(fresh(), ga, -1));
    T(ctx, reel_set_stream(fresh(), ga, 1 << 30));
    T(ctx, reel_set_stream(fresh(), bad, 0));
    reel_tensor lo, ll;
    TH(reel_lse_combine(NULL, w, w, 1, &lo, &ll));
    T(ctx, reel_lse_combine(fresh(), ga, ga, 0, &lo, &ll));
    T(ctx, reel_lse_combine(fresh(), ga, ga, -1, &lo, &ll));
    T(ctx, reel_lse_combine(fresh(), ga, ga, 4, NULL, NULL));
    T(ctx, reel_lse_combine(fresh(), bad, bad, 4, &lo, &ll));
    reel_moe_params mp = REEL_MOE_PARAMS_INIT, mz;
    memset(&mz, 0, sizeof mz);
    mp.num_experts = 4;
    mp.top_k = 2;
    reel_tensor moi, mow;
    TH(reel_moe_route(NULL, ga, none, &mp, &moi, &mow));
    T(ctx, reel_moe_route(fresh(), ga, none, NULL, &moi, &mow));
    T(ctx, reel_moe_route(fresh(), ga, none, &mp, NULL, &mow));
    T(ctx, reel_moe_route(fresh(), ga, none, &mz, &moi, &mow));
    T(ctx, reel_moe_route(fresh(), bad, none, &mp, &moi, &mow));
    T(ctx, reel_moe_route(fresh(), ga, bad, &mp, &moi, &mow));
    { reel_moe_params m2 = mp; m2.num_experts = 0; T(ctx, reel_moe_route(fresh(), ga, none, &m2, &moi, &mow)); }
    { reel_moe_params m2 = mp; m2.top_k = 5; T(ctx, reel_moe_route(fresh(), ga, none, &m2, &moi, &mow)); }
    { reel_moe_params m2 = mp; m2.scoring = 7; T(ctx, reel_moe_route(fresh(), ga, none, &m2, &moi, &mow)); }
    { reel_moe_params m2 = mp; m2.n_group = 3; m2.topk_group = 1; T(ctx, reel_moe_route(fresh(), ga, none, &m2, &moi, &mow)); }
    { reel_moe_params m2 = mp; m2.routed_scaling = -1.0f; T(ctx, reel_moe_route(fresh(), ga, none, &m2, &moi, &mow)); }

    /* ---- reel.h: compile ---- */
    reel_plan *px = NULL;
    TH(reel_compile(NULL, NULL, &px));
    T(ctx, reel_compile(g0, NULL, NULL));
    reel_compile_opts zc;
    memset(&zc, 0, sizeof zc);
    T(ctx, reel_compile(g0, &zc, &px));
    reel_compile_opts co = REEL_COMPILE_OPTS_INIT;
    co.num_buckets = -1;
    T(ctx, reel_compile(g0, &co, &px));
    co = (reel_compile_opts)REEL_COMPILE_OPTS_INIT;
    co.max_context = -5;
    T(ctx, reel_compile(g0, &co, &px));
    reel_plan_memory pm = REEL_PLAN_MEMORY_INIT, zpm;
    memset(&zpm, 0, sizeof zpm);
    TH(reel_compile_estimate(NULL, NULL, &pm));
    T(ctx, reel_compile_estimate(g0, NULL, NULL));
    T(ctx, reel_compile_estimate(g0, &zc, &pm));
    T(ctx, reel_compile_estimate(fresh(), NULL, &pm)); /* no output */

    /* ---- reel.h: plan ---- */
    TH(reel_plan_set_input(NULL, "a", buf, 1));
    T(ctx, reel_plan_set_input(p, NULL, buf, 1));
    T(ctx, reel_plan_set_input(p, "a", NULL, 1));
    T(ctx, reel_plan_set_input(p, "a", buf, 0));
    T(ctx, reel_plan_set_input(p, "a", buf, -1));
    T(ctx, reel_plan_set_input(p, "a", buf, INT64_MAX));
    reel_step_info si = REEL_STEP_INFO_INIT, zsi;
    memset(&zsi, 0, sizeof zsi);
    TH(reel_step(NULL, &si));
    T(ctx, reel_step(p, NULL));
    T(ctx, reel_step(p, &zsi));
    si.num_tokens = -1;
    T(ctx, reel_step(p, &si));
    si.num_tokens = 1 << 30;
    T(ctx, reel_step(p, &si));
    {
        int32_t ltok[4], lsteps[1];
        reel_loop_info li = REEL_LOOP_INFO_INIT, zli;
        memset(&zli, 0, sizeof zli);
        reel_step_info s1 = REEL_STEP_INFO_INIT;
        s1.num_tokens = 1;
        li.token_input = "a";
        li.token_output = "sum";
        li.max_steps = 4;
        li.tokens = ltok;
        li.steps = lsteps;
        TH(reel_step_n(NULL, &s1, &li));
        T(ctx, reel_step_n(p, NULL, &li));
        T(ctx, reel_step_n(p, &s1, NULL));
        T(ctx, reel_step_n(p, &zsi, &li));
        T(ctx, reel_step_n(p, &s1, &zli));
        T(ctx, reel_step_n(p, &s1, &li)); /* "a" is [T, 4] f32, not [T] int32 */
        li.token_input = NULL;
        T(ctx, reel_step_n(p, &s1, &li));
        li.token_input = "nope";
        T(ctx, reel_step_n(p, &s1, &li));
        li.token_input = "a";
        li.token_output = "nope";
        T(ctx, reel_step_n(p, &s1, &li));
        li.max_steps = 0;
        T(ctx, reel_step_n(p, &s1, &li));
        li.max_steps = -7;
        li.num_eos = 99;
        T(ctx, reel_step_n(p, &s1, &li));
        li.tokens = NULL;
        T(ctx, reel_step_n(p, &s1, &li));
    }
    TH(reel_plan_output(NULL, "sum", &outp, &rows));
    T(ctx, reel_plan_output(p, NULL, &outp, &rows));
    T(ctx, reel_plan_output(p, "nope", &outp, &rows));
    T(ctx, reel_plan_output(p, "sum", NULL, NULL));
    reel_dtype dt;
    int64_t re;
    TH(reel_plan_output_desc(NULL, "sum", &dt, &re));
    T(ctx, reel_plan_output_desc(p, NULL, &dt, &re));
    T(ctx, reel_plan_output_desc(p, "nope", &dt, &re));
    TH(reel_plan_write_param(NULL, "w", buf, 16));
    T(ctx, reel_plan_write_param(p, NULL, buf, 16));
    T(ctx, reel_plan_write_param(p, "nope", buf, 16));
    T(ctx, reel_plan_write_param(p, "w", NULL, 16));
    T(ctx, reel_plan_write_param(p, "w", buf, 3));
    T(ctx, reel_plan_write_param(p, "w", buf, SIZE_MAX));
    TH(reel_plan_read_state(NULL, "s", buf, 16));
    T(ctx, reel_plan_read_state(p, NULL, buf, 16));
    T(ctx, reel_plan_read_state(p, "nope", buf, 16));
    T(ctx, reel_plan_read_state(p, "s", NULL, 16));
    T(ctx, reel_plan_read_state(p, "s", buf, SIZE_MAX));
    TH(reel_plan_write_state(NULL, "s", buf, 16));
    T(ctx, reel_plan_write_state(p, NULL, buf, 16));
    T(ctx, reel_plan_write_state(p, "nope", buf, 16));
    T(ctx, reel_plan_write_state(p, "s", NULL, 16));
    T(ctx, reel_plan_write_state(p, "s", buf, SIZE_MAX));
    TH(reel_plan_bind_state(NULL, "s", buf, 16));
    T(ctx, reel_plan_bind_state(p, NULL, buf, 16));
    T(ctx, reel_plan_bind_state(p, "nope", buf, 16));
    T(ctx, reel_plan_bind_state(p, "s", NULL, 16));
    T(ctx, reel_plan_bind_state(p, "s", buf, 1));
    TH(reel_plan_trim(NULL));
    TH(reel_plan_time_steps(NULL, 1));
    double us;
    TH(reel_plan_last_step_device_us(NULL, &us));
    T(ctx, reel_plan_last_step_device_us(p, NULL));
    T(ctx, reel_plan_last_step_device_us(p, &us));
    reel_plan_stats st = REEL_PLAN_STATS_INIT, zst;
    memset(&zst, 0, sizeof zst);
    TH(reel_plan_stats_get(NULL, &st));
    T(ctx, reel_plan_stats_get(p, NULL));
    T(ctx, reel_plan_stats_get(p, &zst));
    reel_placement pl = REEL_PLACEMENT_INIT, zpl;
    memset(&zpl, 0, sizeof zpl);
    TH(reel_plan_placement(NULL, 0, 0, &pl));
    T(ctx, reel_plan_placement(p, -1, 0, &pl));
    T(ctx, reel_plan_placement(p, 99, 0, &pl));
    T(ctx, reel_plan_placement(p, 0, -1, &pl));
    T(ctx, reel_plan_placement(p, 0, 1 << 20, &pl));
    T(ctx, reel_plan_placement(p, 0, 0, NULL));
    T(ctx, reel_plan_placement(p, 0, 0, &zpl));
    reel_node_info ni = REEL_NODE_INFO_INIT, zni;
    memset(&zni, 0, sizeof zni);
    TH(reel_plan_node_info(NULL, 0, &ni));
    T(ctx, reel_plan_node_info(p, -1, &ni));
    T(ctx, reel_plan_node_info(p, 1 << 20, &ni));
    T(ctx, reel_plan_node_info(p, 0, NULL));
    T(ctx, reel_plan_node_info(p, 0, &zni));
    int kern;
    TH(reel_plan_graph_kernels(NULL, 0, &kern));
    T(ctx, reel_plan_graph_kernels(p, -1, &kern));
    T(ctx, reel_plan_graph_kernels(p, 99, &kern));
    T(ctx, reel_plan_graph_kernels(p, 0, NULL));
    TH(reel_plan_memory_get(NULL, &pm));
    T(ctx, reel_plan_memory_get(p, NULL));
    T(ctx, reel_plan_memory_get(p, &zpm));
    TH(reel_plan_trace_ops(NULL, 1));
    reel_op_span sp4[4] = {REEL_OP_SPAN_INIT, REEL_OP_SPAN_INIT, REEL_OP_SPAN_INIT, REEL_OP_SPAN_INIT}, zsp[4];
    memset(zsp, 0, sizeof zsp);
    int n;
    TH(reel_plan_take_op_spans(NULL, sp4, 4, &n));
    T(ctx, reel_plan_take_op_spans(p, NULL, 4, &n));
    T(ctx, reel_plan_take_op_spans(p, sp4, -1, &n));
    T(ctx, reel_plan_take_op_spans(p, sp4, 4, NULL));
    T(ctx, reel_plan_take_op_spans(p, zsp, 4, &n));

    /* ---- memory.h: the checker ---- */
    reel_checker *ck;
    TH(reel_checker_create(NULL, NULL));
    T(ctx, reel_checker_create(ctx, NULL));
    cr_assert_eq(reel_checker_create(ctx, &ck), REEL_OK);
    reel_check_access acc = REEL_CHECK_ACCESS_INIT, zacc;
    memset(&zacc, 0, sizeof zacc);
    TH(reel_checker_op(NULL, 0, "k", 0, NULL));
    T(ctx, reel_checker_op(ck, 0, NULL, 0, NULL));
    T(ctx, reel_checker_op(ck, 0, "k", -1, NULL));
    T(ctx, reel_checker_op(ck, 0, "k", 1, NULL));
    T(ctx, reel_checker_op(ck, 0, "k", 1, &zacc));
    acc.addr = UINT64_MAX - 1;
    acc.size = 16;
    T(ctx, reel_checker_op(ck, 0, "k", 1, &acc));
    TH(reel_checker_event_record(NULL, 0, 0));
    TH(reel_checker_event_wait(NULL, 0, 0));
    TH(reel_checker_event_sync(NULL, 0));
    TH(reel_checker_host_sync(NULL, 0));
    uint64_t id = 0;
    TH(reel_checker_alloc(NULL, 0, 0, 0, 16, "x", &id));
    T(ctx, reel_checker_alloc(ck, 0, 0, 0, 16, "x", NULL));
    T(ctx, reel_checker_alloc(ck, 0, 0, UINT64_MAX - 1, 16, "x", &id));
    cr_assert_eq(reel_checker_alloc(ck, 0, 0, 4096, 16, "x", &id), REEL_OK);
    TH(reel_checker_free(NULL, 0, id));
    T(ctx, reel_checker_free(ck, 0, 777));
    TH(reel_checker_use(NULL, 0, "k", id, 0, 4, false));
    T(ctx, reel_checker_use(ck, 0, NULL, id, 0, 4, false));
    T(ctx, reel_checker_use(ck, 0, "k", 777, 0, 4, false));
    T(ctx, reel_checker_use(ck, 0, "k", id, 0, 1 << 20, false));
    T(ctx, reel_checker_use(ck, 0, "k", id, UINT64_MAX, 4, false));
    reel_checker_destroy(ck);

    /* ---- comm.h ---- */
    reel_comm_id cid, zid;
    memset(&zid, 0, sizeof zid);
    TH(reel_comm_unique_id(NULL, &cid));
    T(ctx, reel_comm_unique_id(ctx, NULL));
    cr_assert_eq(reel_comm_unique_id(ctx, &cid), REEL_OK);
    char hex[300];
    TH(reel_comm_id_to_hex(NULL, hex, sizeof hex));
    TH(reel_comm_id_to_hex(&cid, NULL, sizeof hex));
    TH(reel_comm_id_to_hex(&cid, hex, 10));
    TH(reel_comm_id_from_hex(NULL, &zid));
    TH(reel_comm_id_from_hex("zz", &zid));
    cr_assert_eq(reel_comm_id_to_hex(&cid, hex, sizeof hex), REEL_OK);
    TH(reel_comm_id_from_hex(hex, NULL));
    memset(hex, '0', 288);
    hex[288] = 0;
    TH(reel_comm_id_from_hex(hex, &zid)); /* not a reel id */
    reel_comm *cm = NULL;
    reel_comm_opts zco;
    memset(&zco, 0, sizeof zco);
    TH(reel_comm_create(NULL, &cid, 0, 1, NULL, &cm));
    T(ctx, reel_comm_create(ctx, NULL, 0, 1, NULL, &cm));
    T(ctx, reel_comm_create(ctx, &cid, -1, 1, NULL, &cm));
    T(ctx, reel_comm_create(ctx, &cid, 2, 1, NULL, &cm));
    T(ctx, reel_comm_create(ctx, &cid, 0, 0, NULL, &cm));
    T(ctx, reel_comm_create(ctx, &cid, 0, 5000, NULL, &cm));
    T(ctx, reel_comm_create(ctx, &cid, 0, 1, NULL, NULL));
    T(ctx, reel_comm_create(ctx, &cid, 0, 1, &zco, &cm));
    T(ctx, reel_comm_create(ctx, &zid, 0, 1, NULL, &cm));
    cr_assert_null(cm);
    reel_ctx *cs[2] = {ctx, NULL};
    reel_comm *cms[2];
    TH(reel_comm_create_group(NULL, 1, NULL, cms));
    TH(reel_comm_create_group(cs, 0, NULL, cms));
    TH(reel_comm_create_group(cs, -1, NULL, cms));
    TH(reel_comm_create_group(cs, 2, NULL, cms));
    TH(reel_comm_create_group(cs, 1, NULL, NULL));
    T(ctx, reel_comm_create_group(cs, 1, &zco, cms));
    TH(reel_comm_create_env(NULL, NULL, &cm));
    T(ctx, reel_comm_create_env(ctx, NULL, NULL));
    T(ctx, reel_comm_create_env(ctx, &zco, &cm));
    unsetenv("WORLD_SIZE");
    T(ctx, reel_comm_create_env(ctx, NULL, &cm));
    cr_assert_null(cm);
    {
        reel_comm *one = NULL, *sub = NULL;
        cr_assert_eq(reel_comm_create_group(cs, 1, NULL, &one), REEL_OK);
        TH(reel_comm_split(NULL, 0, 0, NULL, &sub));
        T(ctx, reel_comm_split(one, 0, 0, NULL, NULL));
        T(ctx, reel_comm_split(one, -2, 0, NULL, &sub));
        T(ctx, reel_comm_split(one, 0, 0, &zco, &sub));
        cr_assert_null(sub);
        char bb[4] = {0};
        TH(reel_comm_broadcast(NULL, bb, 4, 0));
        T(ctx, reel_comm_broadcast(one, NULL, 4, 0));
        T(ctx, reel_comm_broadcast(one, bb, 4, 1));
        T(ctx, reel_comm_broadcast(one, bb, 4, -1));
        reel_comm_destroy(one);
    }
    TH(reel_comm_destroy(NULL));
    TH(reel_comm_async_error(NULL));
    TH(reel_comm_abort(NULL));
    TH(reel_send(NULL, w, 0));
    T(ctx, reel_send(fresh(), ga, -1));
    T(ctx, reel_send(fresh(), bad, 0));

    /* ---- parallel.h ---- */
    reel_attn_params ap = REEL_ATTN_PARAMS_INIT, zap;
    reel_dcp_layout dl = REEL_DCP_LAYOUT_INIT, zdl;
    memset(&zap, 0, sizeof zap);
    memset(&zdl, 0, sizeof zdl);
    reel_tensor o2, l2;
    TH(reel_dcp_attention(NULL, w, w, w, w, w, &ap, &dl, &o2, &l2));
    T(ctx, reel_dcp_attention(fresh(), ga, ga, ga, ga, ga, NULL, NULL, &o2, &l2));
    T(ctx, reel_dcp_attention(fresh(), ga, ga, ga, ga, ga, &zap, &dl, &o2, &l2));
    T(ctx, reel_dcp_attention(fresh(), ga, ga, ga, ga, ga, &ap, &zdl, &o2, &l2));
    T(ctx, reel_dcp_attention(fresh(), bad, bad, bad, bad, bad, &ap, &dl, &o2, &l2));
    T(ctx, reel_dcp_attention(fresh(), ga, ga, ga, ga, ga, &ap, &dl, NULL, NULL));
    dl.exchange = 99;
    T(ctx, reel_dcp_attention(fresh(), ga, ga, ga, ga, ga, &ap, &dl, &o2, &l2));

    /* ---- safetensors.h ---- */
    reel_safetensors *st0 = NULL, *stx = NULL;
    static const char hdr[] = "{\"t\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}";
    unsigned char file[8 + sizeof hdr - 1 + 16] = {0};
    file[0] = (unsigned char)(sizeof hdr - 1);
    memcpy(file + 8, hdr, sizeof hdr - 1);
    cr_assert_eq(reel_safetensors_open_buffer(ctx, file, sizeof file, &st0), REEL_OK, "%s", reel_ctx_last_error(ctx));
    TH(reel_safetensors_open(NULL, NULL, &stx));
    T(ctx, reel_safetensors_open(ctx, NULL, &stx));
    T(ctx, reel_safetensors_open(ctx, "/nonexistent/reel.safetensors", &stx));
    T(ctx, reel_safetensors_open(ctx, "/nonexistent/reel.safetensors", NULL));
    TH(reel_safetensors_open_buffer(NULL, NULL, 0, &stx));
    T(ctx, reel_safetensors_open_buffer(ctx, NULL, 16, &stx));
    T(ctx, reel_safetensors_open_buffer(ctx, "garbage", 7, &stx));
    T(ctx, reel_safetensors_open_buffer(ctx, file, sizeof file - 1, &stx));
    T(ctx, reel_safetensors_open_buffer(ctx, file, sizeof file, NULL));
    reel_st_tensor stt = REEL_ST_TENSOR_INIT, zstt;
    memset(&zstt, 0, sizeof zstt);
    TH(reel_safetensors_tensor(NULL, 0, &stt));
    T(ctx, reel_safetensors_tensor(st0, -1, &stt));
    T(ctx, reel_safetensors_tensor(st0, 1, &stt));
    T(ctx, reel_safetensors_tensor(st0, 0, NULL));
    T(ctx, reel_safetensors_tensor(st0, 0, &zstt));
    TH(reel_safetensors_find(NULL, "t", &stt));
    T(ctx, reel_safetensors_find(st0, NULL, &stt));
    T(ctx, reel_safetensors_find(st0, "nope", &stt));
    T(ctx, reel_safetensors_find(st0, "t", NULL));
    const char *names[] = {"t"}, *nonames[] = {"nope"};
    TH(reel_safetensors_write_param(NULL, NULL, "w", 1, names));
    T(ctx, reel_safetensors_write_param(NULL, p, "w", 1, names));
    TH(reel_safetensors_write_param(st0, NULL, "w", 1, names)); /* no plan: the thread's */
    T(ctx, reel_safetensors_write_param(st0, p, NULL, 1, names));
    T(ctx, reel_safetensors_write_param(st0, p, "w", 0, names));
    T(ctx, reel_safetensors_write_param(st0, p, "w", -1, names));
    T(ctx, reel_safetensors_write_param(st0, p, "w", 1, NULL));
    T(ctx, reel_safetensors_write_param(st0, p, "nope", 1, names));
    T(ctx, reel_safetensors_write_param(st0, p, "w", 1, nonames));
    T(ctx, reel_safetensors_write_param(st0, p, "w", 2, (const char *[]){"t", "t"}));
    reel_st_entry se = REEL_ST_ENTRY_INIT, zse;
    memset(&zse, 0, sizeof zse);
    se.name = "t";
    se.dtype = REEL_F32;
    se.ndim = 1;
    se.dims = dw;
    se.data = buf;
    const char *nopath = "/nonexistent/reel.safetensors";
    TH(reel_safetensors_save(NULL, NULL, &se, 1));
    T(ctx, reel_safetensors_save(ctx, NULL, &se, 1));
    T(ctx, reel_safetensors_save(ctx, nopath, NULL, 1));
    T(ctx, reel_safetensors_save(ctx, nopath, &se, -1));
    T(ctx, reel_safetensors_save(ctx, nopath, &zse, 1));
    T(ctx, reel_safetensors_save(ctx, nopath, &se, 1));
    se.ndim = -1;
    T(ctx, reel_safetensors_save(ctx, nopath, &se, 1));
    se.ndim = 1;
    se.dtype = (reel_dtype)99;
    T(ctx, reel_safetensors_save(ctx, nopath, &se, 1));
    se.dtype = REEL_F32;
    se.name = NULL;
    T(ctx, reel_safetensors_save(ctx, nopath, &se, 1));

    /* ---- models.h ---- */
    reel_model *m = NULL, *mx = NULL;
    cr_assert_eq(reel_model_parse(ctx, cfg, 0, &m), REEL_OK, "%s", reel_ctx_last_error(ctx));
    TH(reel_model_open(NULL, NULL, &mx));
    T(ctx, reel_model_open(ctx, NULL, &mx));
    T(ctx, reel_model_open(ctx, "/nonexistent/model", &mx));
    T(ctx, reel_model_open(ctx, "/nonexistent/model", NULL));
    TH(reel_model_parse(NULL, "{", 0, &mx));
    T(ctx, reel_model_parse(ctx, NULL, 0, &mx));
    T(ctx, reel_model_parse(ctx, "{", 0, &mx));
    T(ctx, reel_model_parse(ctx, "{}", 0, &mx));
    T(ctx, reel_model_parse(ctx, cfg, 0, NULL));
    T(ctx, reel_model_parse(ctx, cfg, 5, &mx));
    reel_model_info mi = REEL_MODEL_INFO_INIT, zmi;
    memset(&zmi, 0, sizeof zmi);
    TH(reel_model_info_get(NULL, &mi));
    T(ctx, reel_model_info_get(m, NULL));
    T(ctx, reel_model_info_get(m, &zmi));
    double inv[64], af;
    TH(reel_model_rope(NULL, inv, 8, &af));
    T(ctx, reel_model_rope(m, inv, -1, &af));
    T(ctx, reel_model_rope(m, inv, 1 << 20, &af));
    T(ctx, reel_model_rope(m, NULL, 8, &af));
    reel_model_tensor mt = REEL_MODEL_TENSOR_INIT, zmt;
    memset(&zmt, 0, sizeof zmt);
    TH(reel_model_tensor_get(NULL, 0, &mt));
    T(ctx, reel_model_tensor_get(m, -1, &mt));
    T(ctx, reel_model_tensor_get(m, 1 << 20, &mt));
    T(ctx, reel_model_tensor_get(m, 0, NULL));
    T(ctx, reel_model_tensor_get(m, 0, &zmt));
    reel_model_opts mo = REEL_MODEL_OPTS_INIT, zmo;
    memset(&zmo, 0, sizeof zmo);
    T(ctx, reel_model_build(NULL, fresh(), NULL)); /* on the graph */
    T(ctx, reel_model_build(m, NULL, NULL));
    T(ctx, reel_model_build(m, fresh(), &zmo));
    mo.max_context = -1;
    T(ctx, reel_model_build(m, fresh(), &mo));
    mo = (reel_model_opts)REEL_MODEL_OPTS_INIT;
    mo.stage = 5;
    T(ctx, reel_model_build(m, fresh(), &mo));
    mo = (reel_model_opts)REEL_MODEL_OPTS_INIT;
    mo.num_buckets = -1;
    T(ctx, reel_model_build(m, fresh(), &mo));
    mo = (reel_model_opts)REEL_MODEL_OPTS_INIT;
    T(ctx, reel_model_bind(NULL, p, NULL)); /* on the plan */
    T(ctx, reel_model_bind(m, NULL, NULL));
    T(ctx, reel_model_bind(m, p, NULL));
    T(ctx, reel_model_bind(m, p, &zmo));
    T(ctx, reel_model_bind_source(NULL, p, NULL, src_fn, NULL));
    T(ctx, reel_model_bind_source(m, NULL, NULL, src_fn, NULL));
    T(ctx, reel_model_bind_source(m, p, NULL, NULL, NULL));
    T(ctx, reel_model_bind_source(m, p, &zmo, src_fn, NULL));
    T(ctx, reel_model_bind_source(m, p, NULL, src_fn, NULL)); /* p is not the model's plan */
    TH(reel_model_compile(NULL, NULL, NULL, &px));
    T(ctx, reel_model_compile(m, NULL, NULL, NULL));
    T(ctx, reel_model_compile(m, &zmo, NULL, &px));
    T(ctx, reel_model_compile(m, NULL, &zc, &px));
    int32_t blocks;
    int64_t toks;
    TH(reel_model_kv_blocks(NULL, NULL, NULL, 0.5, &blocks, &toks));
    T(ctx, reel_model_kv_blocks(m, NULL, NULL, 0.0, &blocks, &toks));
    T(ctx, reel_model_kv_blocks(m, NULL, NULL, -1.0, &blocks, &toks));
    T(ctx, reel_model_kv_blocks(m, NULL, NULL, 2.0, &blocks, &toks));
    T(ctx, reel_model_kv_blocks(m, NULL, NULL, NAN, &blocks, &toks));
    T(ctx, reel_model_kv_blocks(m, &zmo, NULL, 0.5, &blocks, &toks));
    T(ctx, reel_model_kv_blocks(m, NULL, &zc, 0.5, &blocks, &toks));

    cr_log_info("every_refusal: %d calls, %d refusals", calls, refusals);
    reel_model_close(m);
    reel_safetensors_close(st0);
    for (int i = 0; i < ngraphs; i++)
        reel_graph_destroy(graphs[i]);
    reel_plan_destroy(p);
    reel_plan_destroy(sp);
    reel_ctx_destroy(ctx);
}
