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

/* Issue 47: --loop runs decode-only stretches as reel_step_n calls (device
 * loops) between the steps that admit requests; the schedule, and so the
 * steps and tokens, are those of single steps, greedy and sampled, with
 * the workload's eager steps past max_context between them. */
Test(demo, device_loops_give_the_tokens_and_steps_of_single_steps)
{
    for (int sample = 0; sample < 2; sample++) {
        demo_opts o = small_opts(5);
        o.requests = 24;
        if (sample) {
            o.sample = true;
            o.temperature = 0.8f;
        }
        demo_result one = run_ok(&o);
        o.loop = 8;
        demo_result looped = run_ok(&o);
        cr_expect_eq(looped.checksum, one.checksum, "sample %d", sample);
        cr_expect_eq(looped.steps, one.steps, "sample %d", sample);
        cr_expect_eq(looped.tokens, one.tokens, "sample %d", sample);
        cr_expect_gt(looped.loop_calls, 0, "sample %d: no burst ran", sample);
        cr_expect_gt(looped.loop_steps, looped.loop_calls, "sample %d", sample);
        cr_expect_eq(looped.stats.loop_device_calls, looped.loop_calls, "sample %d", sample);
        cr_expect_eq(looped.stats.eager_steps, one.stats.eager_steps, "sample %d", sample);
    }
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

/* ---- checkpoints (--save-model, --model) and generation (--prompt) ------- */

#include <stdlib.h>
#include <unistd.h>

static char *tmp_dir(void)
{
    static char d[64];
    snprintf(d, sizeof d, "/tmp/reel-ckpt-XXXXXX");
    cr_assert_not_null(mkdtemp(d));
    return d;
}

static void rm_dir(const char *d)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", d);
    cr_expect_eq(system(cmd), 0);
}

Test(demo, a_saved_checkpoint_serves_the_seeded_tokens)
{
    char *d = tmp_dir(), sub[128];
    snprintf(sub, sizeof sub, "%s/m", d);
    demo_opts o = small_opts(3);
    o.model.kv_heads = 1; /* GQA */
    o.save_dir = sub;
    demo_result seeded = run_ok(&o);
    demo_opts l = small_opts(3);
    l.model_dir = sub;
    demo_result loaded = run_ok(&l);
    cr_expect_eq(loaded.checksum, seeded.checksum, "checkpoint %llx, seeded %llx",
                 (unsigned long long)loaded.checksum, (unsigned long long)seeded.checksum);
    cr_expect_eq(loaded.steps, seeded.steps);
    cr_expect(loaded.model.hf && loaded.model.kv_heads == 1 && loaded.model.layers == 2);
    l.pp = 2; /* stages write their own layers from the checkpoint */
    demo_result staged = run_ok(&l);
    cr_expect_eq(staged.checksum, seeded.checksum);
    rm_dir(d);
}

static long read_file(const char *path, float **out)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "%s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    *out = malloc((size_t)n);
    cr_assert_eq(fread(*out, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    return n;
}

Test(demo, generation_from_a_checkpoint_gives_the_seeded_logits_bit_for_bit)
{
    char *d = tmp_dir(), sub[128], la[128], lb[128];
    snprintf(sub, sizeof sub, "%s/m", d);
    snprintf(la, sizeof la, "%s/a.bin", d);
    snprintf(lb, sizeof lb, "%s/b.bin", d);
    int32_t prompt[5] = {3, 1, 4, 1, 5};
    demo_opts o = small_opts(5);
    o.save_dir = sub;
    o.prompt = prompt;
    o.prompt_len = 5;
    o.gen_tokens = 12;
    o.logits_path = la;
    demo_result a = run_ok(&o);
    cr_assert_eq(a.num_gen, 12);
    demo_opts l = small_opts(5);
    l.model_dir = sub;
    l.prompt = prompt;
    l.prompt_len = 5;
    l.gen_tokens = 12;
    l.logits_path = lb;
    demo_result b = run_ok(&l);
    cr_expect_eq(memcmp(a.gen, b.gen, sizeof a.gen[0] * 12), 0);
    float *fa, *fb;
    long na = read_file(la, &fa), nb = read_file(lb, &fb);
    cr_assert_eq(na, (long)((5 + 12 - 1) * 256 * sizeof(float)), "rows: the prompt's and one per fed token");
    cr_assert_eq(na, nb);
    cr_expect_eq(memcmp(fa, fb, (size_t)na), 0, "logits differ");
    /* each generated token is the argmax of the row that produced it */
    for (int k = 0; k < 12; k++) {
        const float *row = fa + (size_t)(4 + k) * 256;
        int best = 0;
        for (int i = 1; i < 256; i++)
            if (row[i] > row[best]) best = i;
        cr_expect_eq(a.gen[k], best, "token %d", k);
    }
    free(fa);
    free(fb);
    rm_dir(d);
}

Test(demo, a_checkpoint_reel_cannot_build_is_refused_with_the_key)
{
    char *d = tmp_dir(), path[128];
    snprintf(path, sizeof path, "%s/config.json", d);
    FILE *f = fopen(path, "w");
    fputs("{\"model_type\":\"llama\",\"hidden_size\":64,\"num_hidden_layers\":1,\"num_attention_heads\":2,"
          "\"intermediate_size\":64,\"vocab_size\":256,\"rope_scaling\":{\"rope_type\":\"llama3\"}}", f);
    fclose(f);
    demo_opts o = small_opts(1);
    o.model_dir = d;
    demo_result r;
    cr_expect_eq(demo_run(&o, &r, NULL), REEL_E_INVALID_ARG);
    cr_expect(strstr(r.error, "rope_scaling") != NULL, "%s", r.error);
    f = fopen(path, "w");
    fputs("{\"model_type\":\"llama\",\"hidden_size\":64,\"num_hidden_layers\":1,\"num_attention_heads\":2,"
          "\"intermediate_size\":64,\"vocab_size\":256,\"torch_dtype\":\"float32\"}", f);
    fclose(f);
    cr_expect_neq(demo_run(&o, &r, NULL), REEL_OK, "no safetensors beside the config");
    cr_expect(strstr(r.error, "model.safetensors") != NULL, "%s", r.error);
    rm_dir(d);
}
