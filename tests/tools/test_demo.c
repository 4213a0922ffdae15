/* The demo serving loop, run in-process on the host backend. */
#include <criterion/criterion.h>

#include "tests/tools/small.h"

static demo_result run_ok(const demo_opts *o)
{
    demo_result r;
    reel_status st = demo_run(o, &r, NULL);
    cr_assert_eq(st, REEL_OK, "demo failed: %s", r.error);
    return r;
}

Test(demo, serves_every_request_and_generates_its_tokens)
{
    demo_opts o = small_opts(1);
    demo_result r = run_ok(&o);
    cr_expect_eq(r.requests_done, o.requests);
    cr_expect_gt(r.generated, (uint64_t)o.requests);
    cr_expect_eq(r.stats.steps, r.steps);
    cr_expect_eq(r.tokens, r.prefill_tokens + r.decode_tokens);
}

Test(demo, tokens_are_deterministic_for_a_seed)
{
    demo_opts o = small_opts(7);
    demo_result a = run_ok(&o), b = run_ok(&o);
    cr_expect_eq(a.checksum, b.checksum, "same seed, checksums %llx vs %llx", (unsigned long long)a.checksum,
                 (unsigned long long)b.checksum);
    cr_expect_eq(a.steps, b.steps);
}

Test(demo, a_different_seed_gives_different_tokens)
{
    demo_opts o1 = small_opts(1), o2 = small_opts(2);
    demo_result a = run_ok(&o1), b = run_ok(&o2);
    cr_expect_neq(a.checksum, b.checksum);
}

Test(demo, replays_some_steps_and_falls_back_on_others_for_each_limit)
{
    demo_opts o = small_opts(1);
    demo_result r = run_ok(&o);
    cr_expect_gt(r.stats.replays, 0);
    cr_expect_gt(r.stats.eager_by_reason[REEL_FALLBACK_TOKENS_OVER_LIMIT], 0);
    cr_expect_gt(r.stats.eager_by_reason[REEL_FALLBACK_CONTEXT_OVER_LIMIT], 0);
    cr_expect_eq(r.stats.replays + r.stats.eager_steps, r.steps);
}

Test(demo, falls_back_exactly_on_the_steps_beyond_the_limits)
{
    demo_opts o = small_opts(3);
    demo_result r = run_ok(&o);
    cr_expect_gt(r.steps_over_any, 0);
    cr_expect_eq(r.stats.eager_steps, r.steps_over_any, "plan: %llu eager steps, scheduler: %llu over limits",
                 (unsigned long long)r.stats.eager_steps, (unsigned long long)r.steps_over_any);
}

Test(demo, replayed_and_eager_runs_generate_the_same_tokens)
{
    demo_opts o = small_opts(5);
    demo_result replayed = run_ok(&o);
    o.eager = true;
    demo_result eager = run_ok(&o);
    cr_expect_eq(eager.stats.replays, 0);
    cr_expect_gt(replayed.stats.replays, 0);
    cr_expect_eq(replayed.checksum, eager.checksum);
}

/* Issue 10: stages joined by send/recv inside their graphs (host ranks as
 * threads), replayed and eager steps alike, give the tokens of one stage. */
Test(demo, a_pipeline_of_2_3_and_4_stages_generates_the_tokens_of_one_stage)
{
    demo_opts o = small_opts(5);
    o.model.layers = 4;
    demo_result one = run_ok(&o);
    cr_assert_gt(one.stats.replays, 0);
    for (int pp = 2; pp <= 4; pp++) {
        o.pp = pp;
        demo_result r = run_ok(&o);
        cr_expect_eq(r.checksum, one.checksum, "--pp %d: checksum %llx, one stage %llx", pp,
                     (unsigned long long)r.checksum, (unsigned long long)one.checksum);
        cr_expect_eq(r.steps, one.steps, "--pp %d", pp);
        cr_expect_eq(r.stats.replays, one.stats.replays, "--pp %d", pp);
    }
}

Test(demo, a_workload_that_fits_the_limits_replays_every_step_even_strict)
{
    demo_opts o = small_opts(1);
    o.fit = true;
    o.strict = true;
    demo_result r = run_ok(&o);
    cr_expect_eq(r.stats.eager_steps, 0);
    cr_expect_eq(r.stats.replays, r.steps);
    cr_expect_eq(r.requests_done, o.requests);
}

Test(demo, strict_mode_stops_at_the_first_fallback_and_says_why)
{
    demo_opts o = small_opts(1);
    o.strict = true;
    demo_result r;
    reel_status st = demo_run(&o, &r, NULL);
    cr_assert_eq(st, REEL_E_FALLBACK, "status %s: %s", reel_status_str(st), r.error);
    cr_expect_geq(r.failed_step, 0);
    cr_expect_neq(r.failed_fallback, REEL_FALLBACK_NONE);
    cr_expect(strstr(r.error, "--strict forbids fallback") != NULL, "message: %s", r.error);
    cr_expect(strstr(r.error, reel_fallback_str(r.failed_fallback)) != NULL, "message: %s", r.error);
}

Test(demo, runs_with_f32_and_f16_weights)
{
    const reel_dtype dts[] = {REEL_F32, REEL_F16};
    for (int i = 0; i < 2; i++) {
        demo_opts o = small_opts(1);
        o.model.dtype = dts[i];
        o.requests = 4;
        demo_result r = run_ok(&o);
        cr_expect_eq(r.requests_done, o.requests, "%s", reel_dtype_name(dts[i]));
    }
}

Test(demo, a_bad_model_shape_is_refused_with_a_message)
{
    demo_opts o = small_opts(1);
    o.model.heads = 3; /* 64 is not a multiple of 3 */
    demo_result r;
    cr_expect_eq(demo_run(&o, &r, NULL), REEL_E_INVALID_ARG);
    cr_expect(strstr(r.error, "--heads") != NULL, "message: %s", r.error);
}
