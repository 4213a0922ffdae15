/* The head rule of include/reel/reel.h on real calls: a caller compiled
 * against older, shorter layouts of the structs (declared here as an older
 * header would have them: the same head, fewer fields) is served, the
 * library reads only its fields and writes nothing past its size; a struct
 * not initialised, of a header before 0.2, or larger than the library knows
 * is refused with a message naming its _INIT. */
#include <criterion/criterion.h>
#include <string.h>

#include "core/abi.h"
#include "reel/reel.h"
#include "tests/core/opts.h"

/* An older header's reel_compile_opts: no `comm`, no `no_fuse`. */
typedef struct old_compile_opts {
    size_t size;
    int version;
    uint32_t magic;
    int num_buckets;
    int32_t buckets[REEL_MAX_BUCKETS];
    int32_t max_context, max_seqs;
    int strict, no_capture, check_hazards, pdl;
} old_compile_opts;

/* An older header's reel_step_info: no block tables. */
typedef struct old_step_info {
    size_t size;
    int version;
    uint32_t magic;
    int32_t num_tokens, num_seqs;
    const int32_t *query_start, *positions, *slot_mapping, *context_lens;
} old_step_info;

/* An older header's reel_plan_stats: through eager_by_reason, then guard
 * bytes the library must leave alone. */
typedef struct old_plan_stats {
    size_t size;
    int version;
    uint32_t magic;
    uint64_t steps, replays, eager_steps;
    uint64_t eager_by_reason[REEL_FALLBACK_COUNT];
} old_plan_stats;

static reel_ctx *ctx;

static void setup(void) { cr_assert_eq(reel_ctx_create(reel_test_ctx_opts(REEL_BACKEND_HOST), &ctx), REEL_OK); }
static void teardown(void) { reel_ctx_destroy(ctx); }

static reel_graph *add_graph(void)
{
    reel_graph *g;
    cr_assert_eq(reel_graph_create(ctx, &g), REEL_OK);
    int64_t d[2] = {REEL_DIM_TOKENS, 4};
    reel_output(g, "y", reel_add(g, reel_input(g, "a", REEL_F32, 2, d), reel_input(g, "b", REEL_F32, 2, d)));
    return g;
}

Test(abi, a_caller_built_against_older_shorter_structs_is_served, .init = setup, .fini = teardown)
{
    reel_graph *g = add_graph();
    old_compile_opts o;
    memset(&o, 0, sizeof o);
    o.size = sizeof o;
    o.version = REEL_VERSION_NUMBER;
    o.magic = REEL_COMPILE_OPTS_MAGIC;
    o.num_buckets = 1;
    o.buckets[0] = 4;
    o.max_context = o.max_seqs = o.strict = o.no_capture = o.check_hazards = o.pdl = REEL_UNDEF_INT;
    cr_assert_lt(sizeof o, sizeof(reel_compile_opts));
    reel_plan *p = NULL;
    cr_assert_eq(reel_compile(g, (const reel_compile_opts *)(const void *)&o, &p), REEL_OK, "%s",
                 reel_ctx_last_error(ctx));
    float a[3][4] = {{1}}, b[3][4] = {{2}};
    cr_assert_eq(reel_plan_set_input(p, "a", a, 3), REEL_OK);
    cr_assert_eq(reel_plan_set_input(p, "b", b, 3), REEL_OK);
    old_step_info s = {sizeof s, REEL_VERSION_NUMBER, REEL_STEP_INFO_MAGIC, 3, 0, NULL, NULL, NULL, NULL};
    cr_assert_lt(sizeof s, sizeof(reel_step_info));
    cr_assert_eq(reel_step(p, (const reel_step_info *)(const void *)&s), REEL_OK, "%s", reel_ctx_last_error(ctx));
    const void *out;
    int64_t rows;
    cr_assert_eq(reel_plan_output(p, "y", &out, &rows), REEL_OK);
    cr_assert_eq(rows, 3);
    cr_assert_float_eq(((const float *)out)[0], 3.0f, 0);

    struct { old_plan_stats st; unsigned char guard[64]; } r;
    memset(&r, 0xab, sizeof r);
    r.st.size = sizeof r.st;
    r.st.version = REEL_VERSION_NUMBER;
    r.st.magic = REEL_PLAN_STATS_MAGIC;
    cr_assert_eq(reel_plan_stats_get(p, (reel_plan_stats *)(void *)&r.st), REEL_OK, "%s", reel_ctx_last_error(ctx));
    cr_assert_eq(r.st.steps, 1);
    cr_assert_eq(r.st.replays, 1);
    cr_assert_eq(r.st.size, sizeof r.st, "the caller's head is kept");
    for (size_t i = 0; i < sizeof r.guard; i++)
        cr_assert_eq(r.guard[i], 0xab, "byte %zu past the caller's struct was written", i);
    reel_plan_destroy(p);
    reel_graph_destroy(g);
}

Test(abi, structs_not_initialised_too_old_or_too_new_are_refused_with_their_init, .init = setup, .fini = teardown)
{
    reel_graph *g = add_graph();
    reel_plan *p = NULL;
    cr_assert_eq(reel_compile(g, NULL, &p), REEL_OK);
    reel_step_info garbage;
    memset(&garbage, 0x5a, sizeof garbage);   /* stack garbage: a size that looks fine, no magic */
    garbage.size = sizeof garbage;
    cr_assert_eq(reel_step(p, &garbage), REEL_E_VERSION);
    cr_assert(strstr(reel_ctx_last_error(ctx), "REEL_STEP_INFO_INIT"), "%s", reel_ctx_last_error(ctx));

    reel_plan_stats wrong = REEL_PLAN_STATS_INIT;
    wrong.magic = REEL_STEP_INFO_MAGIC;   /* another struct's head */
    cr_assert_eq(reel_plan_stats_get(p, &wrong), REEL_E_VERSION);
    cr_assert(strstr(reel_ctx_last_error(ctx), "REEL_PLAN_STATS_INIT"), "%s", reel_ctx_last_error(ctx));

    reel_step_info old = REEL_STEP_INFO_INIT;
    old.version = 100;   /* reel 0.1: laid out without the magic */
    old.num_tokens = 1;
    cr_assert_eq(reel_step(p, &old), REEL_E_VERSION);
    cr_assert(strstr(reel_ctx_last_error(ctx), "rebuild"), "%s", reel_ctx_last_error(ctx));

    struct { reel_step_info s; int32_t newer; } big = {REEL_STEP_INFO_INIT, 7};
    big.s.size = sizeof big;
    big.s.num_tokens = 1;
    cr_assert_eq(reel_step(p, &big.s), REEL_E_VERSION);
    cr_assert(strstr(reel_ctx_last_error(ctx), "knows"), "%s", reel_ctx_last_error(ctx));
    reel_plan_destroy(p);
    reel_graph_destroy(g);
}

Test(abi, every_struct_kind_has_its_own_magic_and_a_head_first)
{
    for (int i = 0; i < reel_abi_count; i++) {
        cr_assert_geq(reel_abi_all[i]->lib_size, sizeof(reel_struct_head));
        cr_assert_eq(reel_abi_all[i]->first_size, sizeof(reel_struct_head));
        for (int j = 0; j < i; j++)
            cr_assert_neq(reel_abi_all[i]->magic, reel_abi_all[j]->magic, "%s and %s", reel_abi_all[i]->what,
                          reel_abi_all[j]->what);
    }
    cr_assert_eq(offsetof(reel_step_info, num_tokens), sizeof(reel_struct_head));
    cr_assert_eq(offsetof(reel_plan_stats, steps), sizeof(reel_struct_head));
    cr_assert_eq(offsetof(reel_compile_opts, num_buckets), sizeof(reel_struct_head));
    cr_assert_eq(offsetof(reel_moe_params, num_experts), sizeof(reel_struct_head));
}
