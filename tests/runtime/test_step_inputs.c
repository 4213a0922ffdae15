/* What a step checks of the caller's inputs and deferred parameters, which
 * the plan lists at compile rather than finding by scanning every tensor. */
#include <criterion/criterion.h>
#include <string.h>

#include "reel/reel.h"
#include "tests/core/opts.h"

static reel_ctx *ctx;
static void setup(void) { cr_assert_eq(reel_ctx_create(reel_test_ctx_opts(REEL_BACKEND_HOST), &ctx), REEL_OK); }
static void teardown(void) { reel_ctx_destroy(ctx); }

#define HAS(s) cr_assert(strstr(reel_ctx_last_error(ctx), (s)) != NULL, "message '%s' lacks '%s'", reel_ctx_last_error(ctx), (s))

Test(step_inputs, every_deferred_parameter_must_be_written_once_whatever_the_order, .init = setup, .fini = teardown)
{
    reel_graph *g;
    cr_assert_eq(reel_graph_create(ctx, &g), REEL_OK);
    reel_tensor x = reel_input(g, "x", REEL_F32, 2, (int64_t[]){REEL_DIM_TOKENS, 4});
    reel_tensor w = reel_param(g, "w", REEL_F32, 1, (int64_t[]){4});
    reel_tensor b = reel_param(g, "b", REEL_F32, 1, (int64_t[]){4});
    cr_assert_eq(reel_param_defer(g, w), REEL_OK);
    cr_assert_eq(reel_param_defer(g, b), REEL_OK);
    reel_output(g, "y", reel_add(g, reel_mul(g, x, w), b));
    reel_plan *p;
    cr_assert_eq(reel_compile(g, NULL, &p), REEL_OK, "%s", reel_ctx_last_error(ctx));
    reel_graph_destroy(g);
    float xs[8] = {1, 2, 3, 4, 5, 6, 7, 8}, ws[4] = {2, 2, 2, 2}, bs[4] = {1, 1, 1, 1};
    reel_step_info s = { REEL_STEP_INFO_HEAD, .num_tokens = 2};
    cr_assert_eq(reel_plan_set_input(p, "x", xs, 2), REEL_OK);
    /* Writing one parameter twice does not count as writing the other. */
    cr_assert_eq(reel_plan_write_param(p, "w", ws, sizeof ws), REEL_OK);
    cr_assert_eq(reel_plan_write_param(p, "w", ws, sizeof ws), REEL_OK);
    cr_assert_eq(reel_step(p, &s), REEL_E_UNBOUND);
    HAS("'b'");
    cr_assert_eq(reel_plan_write_param(p, "b", bs, sizeof bs), REEL_OK);
    cr_assert_eq(reel_step(p, &s), REEL_OK, "%s", reel_ctx_last_error(ctx));
    const void *d;
    cr_assert_eq(reel_plan_output(p, "y", &d, NULL), REEL_OK);
    for (int i = 0; i < 8; i++)
        cr_assert_eq(((const float *)d)[i], xs[i] * 2 + 1);
    /* Inputs are consumed by the step: the next one needs them set again. */
    cr_assert_eq(reel_step(p, &s), REEL_E_INVALID_USAGE);
    HAS("'x'");
    reel_plan_destroy(p);
}
