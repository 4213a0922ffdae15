/* The `reel` binary as a user runs it: exit codes and what it prints. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/tools/small.h"

/* Runs `ENV reel ARGS 2>&1`; returns the exit status and the output in out. */
static int reel_run_env(const char *env, const char *args, char *out, size_t cap)
{
    const char *bin = getenv("REEL_BIN");
    cr_assert(bin != NULL, "REEL_BIN is not set");
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s '%s' %s 2>&1", env, bin, args);
    FILE *f = popen(cmd, "r");
    cr_assert(f != NULL);
    size_t n = fread(out, 1, cap - 1, f);
    out[n] = '\0';
    int w = pclose(f);
    return WIFEXITED(w) ? WEXITSTATUS(w) : -1;
}

static int reel_run(const char *args, char *out, size_t cap) { return reel_run_env("", args, out, cap); }

static int count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)) != NULL; p += strlen(needle)) n++;
    return n;
}

static char out[1 << 16];

Test(cli, demo_prints_a_summary_with_replays_and_eager_steps_by_reason)
{
    int rc = reel_run("demo " SMALL_ARGS " --quiet", out, sizeof out);
    cr_assert_eq(rc, 0, "exit %d:\n%s", rc, out);
    const char *want[] = {"steps", "tokens/s", "replays", "eager steps", "p50", "p99", "arena bytes",
                          "token checksum", reel_fallback_str(REEL_FALLBACK_TOKENS_OVER_LIMIT),
                          reel_fallback_str(REEL_FALLBACK_CONTEXT_OVER_LIMIT)};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        cr_expect(strstr(out, want[i]) != NULL, "no '%s' in:\n%s", want[i], out);
    cr_expect(strstr(out, "note:") == NULL, "plan and scheduler disagree:\n%s", out);
}

Test(cli, strict_demo_fails_with_a_clear_message)
{
    int rc = reel_run("demo " SMALL_ARGS " --quiet --strict", out, sizeof out);
    cr_expect_eq(rc, 1, "exit %d:\n%s", rc, out);
    cr_expect(strstr(out, "--strict forbids fallback") != NULL, "output:\n%s", out);
    cr_expect(strstr(out, "REEL_E_FALLBACK") != NULL || strstr(out, "would run eagerly") != NULL, "output:\n%s",
              out);
}

Test(cli, an_unknown_option_is_a_usage_error)
{
    int rc = reel_run("demo --no-such-option", out, sizeof out);
    cr_expect_eq(rc, 2);
    cr_expect(strstr(out, "--no-such-option") != NULL, "output:\n%s", out);
}

Test(cli, a_bad_option_value_names_the_option)
{
    int rc = reel_run("demo --layers zero", out, sizeof out);
    cr_expect_eq(rc, 2);
    cr_expect(strstr(out, "--layers") != NULL, "output:\n%s", out);
}

Test(cli, an_unknown_command_is_a_usage_error)
{
    int rc = reel_run("frobnicate", out, sizeof out);
    cr_expect_eq(rc, 2);
    cr_expect(strstr(out, "unknown command") != NULL, "output:\n%s", out);
}

Test(cli, version_prints_the_library_version)
{
    int rc = reel_run("version", out, sizeof out);
    cr_expect_eq(rc, 0);
    char want[64];
    int v = reel_version();
    snprintf(want, sizeof want, "library %d.%d.%d", v / 10000, v / 100 % 100, v % 100);
    cr_expect(strstr(out, want) != NULL, "output:\n%s", out);
}

Test(cli, help_lists_every_command)
{
    int rc = reel_run("help", out, sizeof out);
    cr_expect_eq(rc, 0);
    cr_expect(strstr(out, "demo") && strstr(out, "version") && strstr(out, "help"), "output:\n%s", out);
}

Test(cli, demo_reports_progress_on_stderr_unless_quiet)
{
    int rc = reel_run("demo " SMALL_ARGS, out, sizeof out);
    cr_assert_eq(rc, 0, "exit %d:\n%s", rc, out);
    cr_expect(strstr(out, "done 12/12") != NULL, "no final progress line in:\n%s", out);
}

Test(cli, help_for_demo_lists_its_options)
{
    int rc = reel_run("help demo", out, sizeof out);
    cr_expect_eq(rc, 0);
    const char *want[] = {"--layers", "--hidden", "--heads", "--buckets", "--max-tokens", "--max-context",
                          "--steps", "--seed", "--backend", "--strict"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        cr_expect(strstr(out, want[i]) != NULL, "no '%s' in:\n%s", want[i], out);
}

Test(cli, check_runs_the_demo_under_the_checker_and_reports_every_bucket)
{
    int rc = reel_run("check " SMALL_ARGS " --quiet --table 0", out, sizeof out);
    cr_assert_eq(rc, 0, "exit %d:\n%s", rc, out);
    cr_expect(strstr(out, "hazards found      0") != NULL, "%s", out);
    cr_expect(strstr(out, "| bucket | tokens | arena bytes | lower bound | ratio | node bound | ratio |") != NULL, "%s", out);
    cr_expect(strstr(out, "| tensor | stream | first use | last use | offset | bytes |") != NULL, "%s", out);
    cr_expect(strstr(out, "replayed") != NULL && strstr(out, "eager") != NULL, "%s", out);
}

/* ---- what a new user hit (issue 12) ---------------------------------------- */

Test(cli, check_help_prints_the_usage_of_check)
{
    int rc = reel_run("check --help", out, sizeof out);
    cr_expect_eq(rc, 0);
    cr_expect(strncmp(out, "usage: reel check", 17) == 0, "output:\n%s", out);
    cr_expect(strstr(out, "--table") != NULL && strstr(out, "--layers") != NULL, "output:\n%s", out);
    cr_expect(strstr(out, "usage: reel demo") == NULL, "demo's usage in:\n%s", out);
}

Test(cli, a_backend_that_cannot_start_says_why)
{
    int rc = reel_run("demo " SMALL_ARGS " --quiet --backend cuda --steps 1", out, sizeof out);
    if (rc == 0) cr_skip_test("a CUDA device is here: the CUDA backend starts");
    cr_expect_eq(rc, 1, "exit %d:\n%s", rc, out);
    const char *s = strstr(out, "REEL_E_UNSUPPORTED: ");
    cr_assert(s != NULL, "output:\n%s", out);
    s += strlen("REEL_E_UNSUPPORTED: ");
    cr_expect(*s != '\n' && *s != '\0' && strncmp(s, "no context", 10) != 0, "no reason in:\n%s", out);
}

Test(cli, a_bad_reel_backend_variable_is_named)
{
    int rc = reel_run_env("REEL_BACKEND=bogus", "demo --quiet --steps 1 --layers 1 --hidden 16 --heads 1", out,
                          sizeof out);
    cr_expect_eq(rc, 2, "exit %d:\n%s", rc, out);
    cr_expect(strstr(out, "REEL_BACKEND") != NULL && strstr(out, "bogus") != NULL, "output:\n%s", out);
}

/* "tokens             T (prefill P, decode D; ..." */
static void summary_tokens(const char *s, long *t, long *p, long *d)
{
    const char *l = strstr(s, "\n  tokens ");
    cr_assert(l != NULL, "no tokens line in:\n%s", s);
    cr_assert_eq(sscanf(l, "\n  tokens %ld (prefill %ld, decode %ld", t, p, d), 3, "line: %.80s", l);
}

Test(cli, a_strict_summary_counts_only_the_steps_that_ran)
{
    int rc = reel_run("demo " SMALL_ARGS " --quiet --strict", out, sizeof out);
    cr_assert_eq(rc, 1, "exit %d:\n%s", rc, out);
    long t, p, d;
    summary_tokens(out, &t, &p, &d);
    cr_expect_eq(t, p + d, "tokens %ld, prefill %ld + decode %ld:\n%s", t, p, d, out);
}

Test(cli, a_strict_error_says_each_thing_once)
{
    int rc = reel_run("demo " SMALL_ARGS " --quiet --strict", out, sizeof out);
    cr_assert_eq(rc, 1, "exit %d:\n%s", rc, out);
    cr_expect_eq(count(out, "would run eagerly"), 1, "output:\n%s", out);
    cr_expect_eq(count(out, "tokens over"), 1, "output:\n%s", out);
}

Test(cli, strict_with_eager_is_refused_as_a_contradiction)
{
    int rc = reel_run("demo " SMALL_ARGS " --quiet --strict --eager", out, sizeof out);
    cr_expect_eq(rc, 2, "exit %d:\n%s", rc, out);
    cr_expect(strstr(out, "(replayed)") == NULL, "output:\n%s", out);
    cr_expect(strstr(out, " 1 sequences") == NULL, "output:\n%s", out);
    cr_expect(strstr(out, "--strict") != NULL && strstr(out, "--eager") != NULL, "output:\n%s", out);
}

Test(cli, check_hazards_shows_the_hazard_count_in_the_summary)
{
    int rc = reel_run("demo " SMALL_ARGS " --quiet --check-hazards", out, sizeof out);
    cr_assert_eq(rc, 0, "exit %d:\n%s", rc, out);
    cr_expect(strstr(out, "hazards found      0") != NULL, "output:\n%s", out);
}

Test(cli, check_table_refuses_what_is_not_a_bucket_index)
{
    const char *bad[] = {"--table abc", "--table 99", "--table -1", "--table 1x", "--table"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char args[512];
        snprintf(args, sizeof args, "check " SMALL_ARGS " --quiet %s", bad[i]);
        int rc = reel_run(args, out, sizeof out);
        cr_expect_eq(rc, 2, "%s: exit %d:\n%s", bad[i], rc, out);
        cr_expect(strstr(out, "--table wants a bucket index") != NULL, "%s:\n%s", bad[i], out);
        cr_expect(strstr(out, "memory plan of bucket") == NULL, "%s:\n%s", bad[i], out);
    }
}

Test(cli, check_table_takes_its_value_after_an_equals_sign)
{
    int rc = reel_run("check " SMALL_ARGS " --quiet --table=2", out, sizeof out);
    cr_expect_eq(rc, 0, "exit %d:\n%s", rc, out);
    cr_expect(strstr(out, "memory plan of bucket 2 (4 tokens)") != NULL, "output:\n%s", out);
}

Test(cli, a_bad_configuration_exits_like_a_bad_option)
{
    int range = reel_run("demo --quiet --layers 0", out, sizeof out);
    int config = reel_run("demo --quiet --backend host --hidden 64 --heads 3", out, sizeof out);
    cr_expect_eq(range, 2);
    cr_expect_eq(config, 2, "output:\n%s", out);
    cr_expect(strstr(out, "--heads") != NULL, "output:\n%s", out);
    reel_run("demo --help", out, sizeof out);
    cr_expect(strstr(out, "Exit status") != NULL && strstr(out, "2 bad options") != NULL, "%s", out);
}

static void checksum_of(const char *args, char *sum)
{
    int rc = reel_run(args, out, sizeof out);
    cr_assert_eq(rc, 0, "exit %d:\n%s", rc, out);
    const char *l = strstr(out, "token checksum");
    cr_assert(l != NULL, "%s", out);
    cr_assert_eq(sscanf(l, "token checksum %16s", sum), 1);
}

Test(cli, a_seed_with_a_leading_zero_is_decimal)
{
    char a[17], b[17], c[17];
    checksum_of("demo " SMALL_ARGS " --quiet --seed 010", a);
    checksum_of("demo " SMALL_ARGS " --quiet --seed 10", b);
    checksum_of("demo " SMALL_ARGS " --quiet --seed 8", c);
    cr_expect_str_eq(a, b);
    cr_expect_str_neq(a, c);
    cr_expect_eq(reel_run("demo --quiet --seed 0x10", out, sizeof out), 2, "%s", out);
}

Test(cli, a_bucket_list_with_a_trailing_comma_is_refused)
{
    const char *bad[] = {"1,2,", ",1", "1,,2", "2,1", "-1", "+1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char args[128];
        snprintf(args, sizeof args, "demo --quiet --buckets %s", bad[i]);
        int rc = reel_run(args, out, sizeof out);
        cr_expect_eq(rc, 2, "%s: exit %d:\n%s", bad[i], rc, out);
        cr_expect(strstr(out, "--buckets") != NULL, "%s:\n%s", bad[i], out);
    }
}

Test(cli, pdl_and_device_are_command_line_options)
{
    int rc = reel_run("demo " SMALL_ARGS " --quiet --pdl --device 0 --steps 4", out, sizeof out);
    cr_expect_eq(rc, 0, "exit %d:\n%s", rc, out);
    cr_expect_eq(reel_run("demo --quiet --device -1", out, sizeof out), 2, "%s", out);
    reel_run("demo --help", out, sizeof out);
    cr_expect(strstr(out, "--pdl") != NULL && strstr(out, "--device") != NULL, "%s", out);
}

/* The PP start-up smoke test: two stages start, serve and say so; a stage
 * count the layers cannot fill is a usage error. */
Test(cli, demo_pp_runs_pipeline_stages_and_refuses_more_stages_than_layers)
{
    int rc = reel_run("demo " SMALL_ARGS " --quiet --pp 2 --steps 6", out, sizeof out);
    cr_expect_eq(rc, 0, "exit %d:\n%s", rc, out);
    cr_expect(strstr(out, "pipeline           2 stages") != NULL, "%s", out);
    rc = reel_run("demo " SMALL_ARGS " --quiet --pp 3", out, sizeof out);
    cr_expect_eq(rc, 2, "exit %d:\n%s", rc, out);
    cr_expect(strstr(out, "--pp 3 wants at least 3 layers (--layers is 2)") != NULL, "%s", out);
}

Test(cli, ctrl_c_prints_a_partial_summary)
{
    const char *bin = getenv("REEL_BIN");
    cr_assert(bin != NULL);
    char cmd[2048];
    /* a workload of minutes, interrupted once its first progress line is out */
    snprintf(cmd, sizeof cmd,
             "timeout -s KILL 60 '%s' demo " SMALL_ARGS " --requests 100000 > \"$T\" 2>&1 & p=$!; "
             "i=0; while [ $i -lt 200 ] && ! grep -q . \"$T\" 2>/dev/null; do sleep 0.05; i=$((i+1)); done; "
             "sleep 0.5; kill -INT $p; wait $p; echo \"exit $?\" >> \"$T\"; cat \"$T\"",
             bin);
    char full[4096];
    snprintf(full, sizeof full, "T=$(mktemp); trap 'rm -f \"$T\"' EXIT; %s", cmd);
    FILE *f = popen(full, "r");
    cr_assert(f != NULL);
    size_t n = fread(out, 1, sizeof out - 1, f);
    out[n] = '\0';
    pclose(f);
    cr_expect(strstr(out, "exit 130") != NULL, "output:\n%s", out);
    cr_expect(strstr(out, "interrupted") != NULL && strstr(out, "token checksum") != NULL, "output:\n%s", out);
    long t, p, d;
    summary_tokens(out, &t, &p, &d);
    cr_expect(t > 0 && t == p + d, "output:\n%s", out);
}

/* A CUDA build used to pay cuBLAS's load-time initialisation (0.5 s, 200 MB)
 * in every process; CUDA's libraries now load with the first CUDA context. */
Test(cli, version_costs_almost_nothing_even_in_a_cuda_build)
{
    const char *bin = getenv("REEL_BIN");
    cr_assert(bin != NULL);
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        int devnull = open("/dev/null", O_WRONLY);
        if (devnull >= 0) dup2(devnull, 1);
        execl(bin, "reel", "--version", (char *)NULL);
        _exit(127);
    }
    int w;
    struct rusage ru;
    cr_assert_eq(wait4(pid, &w, 0, &ru), pid);
    cr_expect(WIFEXITED(w) && WEXITSTATUS(w) == 0);
    cr_expect_lt(ru.ru_maxrss, 48L * 1024, "reel --version peaked at %ld KiB", ru.ru_maxrss);
}

Test(cli, a_host_bucket_of_a_million_tokens_is_refused_at_once_with_the_figures)
{
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int rc = reel_run("demo --buckets 1048576 --backend host --steps 1", out, sizeof out);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    cr_expect_eq(rc, 2, "exit %d:\n%s", rc, out);
    cr_expect_lt(s, 20.0, "took %.1f s (it compiled for minutes before)", s);
    cr_expect(strstr(out, "largest bucket (1048576 tokens)") != NULL, "%s", out);
    cr_expect(strstr(out, "--buckets") != NULL && strstr(out, "--backend cuda") != NULL, "%s", out);
    rc = reel_run("inspect --buckets 1048576 --backend host", out, sizeof out);
    cr_expect_neq(rc, 0, "inspect compiled it:\n%s", out);
    cr_expect(strstr(out, "largest bucket (1048576 tokens)") != NULL, "%s", out);
}

Test(cli, verbose_prints_the_compile_phases_and_quiet_runs_print_none)
{
    int rc = reel_run("demo " SMALL_ARGS " --quiet --steps 2 --verbose", out, sizeof out);
    cr_assert_eq(rc, 0, "exit %d:\n%s", rc, out);
    const char *want[] = {"info: compile: bucket 0 (1 tokens) laid out", "info: capture: warm-up, one eager run",
                          "info: capture: bucket 4 (16 tokens) captured", "steps"};
    const char *at = out;
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const char *f = strstr(at, want[i]);
        cr_expect(f != NULL, "no '%s' (in order) in:\n%s", want[i], out);
        if (f) at = f;
    }
    rc = reel_run("demo " SMALL_ARGS " --quiet --steps 2", out, sizeof out);
    cr_assert_eq(rc, 0);
    cr_expect(strstr(out, "info:") == NULL, "the library printed without --verbose:\n%s", out);
    rc = reel_run("inspect " SMALL_ARGS " -v", out, sizeof out);
    cr_assert_eq(rc, 0, "exit %d:\n%s", rc, out);
    cr_expect(strstr(out, "info: compile: bucket 4 (16 tokens) laid out") != NULL, "%s", out);
}

Test(cli, a_strict_refusal_of_one_sequence_says_sequence)
{
    /* one sequence a step; the fourth request's prompt passes the largest bucket (2) */
    int rc = reel_run("demo --layers 1 --hidden 32 --heads 1 --vocab 64 --block-size 8 --buckets 1,2 "
                      "--max-seqs 1 --max-tokens 8 --requests 4 --backend host --quiet --strict", out, sizeof out);
    cr_assert_eq(rc, 1, "exit %d:\n%s", rc, out);
    cr_expect(strstr(out, " 1 sequence,") != NULL, "output:\n%s", out);
    cr_expect(strstr(out, " 1 sequences") == NULL, "output:\n%s", out);
}

Test(cli, demo_save_model_then_model_gives_the_seeded_tokens)
{
    char dir[64] = "/tmp/reel-cli-ckpt-XXXXXX", a[17], b[17], args[512];
    cr_assert_not_null(mkdtemp(dir));
    snprintf(args, sizeof args, "demo " SMALL_ARGS " --quiet --save-model %s/m", dir);
    checksum_of(args, a);
    snprintf(args, sizeof args, "demo --model %s/m --block-size 8 --buckets 1,2,4,8,16 --max-context 64 "
             "--max-seqs 4 --requests 12 --backend host --quiet", dir);
    checksum_of(args, b);
    cr_expect_str_eq(a, b);
    cr_expect(strstr(out, "Hugging Face checkpoint") != NULL, "%s", out);
    snprintf(args, sizeof args, "demo --model %s/m --layers 3", dir);
    cr_expect_eq(reel_run(args, out, sizeof out), 2, "%s", out);
    cr_expect(strstr(out, "config.json") != NULL, "%s", out);
    cr_expect_eq(reel_run("demo --logits /tmp/x.bin", out, sizeof out), 2, "%s", out);
    snprintf(args, sizeof args, "rm -rf '%s'", dir);
    cr_expect_eq(system(args), 0);
}

/* Sampling in the graph: the same seed gives the same tokens twice, in any
 * batching (each request draws from its own stream, the counter its
 * position); another seed, greedy decoding and a greedy share differ. */
Test(cli, sampled_requests_repeat_with_their_seed_in_any_batching)
{
    char a[17], b[17], c[17], d[17], g[17], m[17];
    checksum_of("demo " SMALL_ARGS " --quiet --temperature 0.8 --top-p 0.95 --seed 1", a);
    checksum_of("demo " SMALL_ARGS " --quiet --temperature 0.8 --top-p 0.95 --seed 1", b);
    checksum_of("demo " SMALL_ARGS " --quiet --temperature 0.8 --top-p 0.95 --seed 1 --max-seqs 2", c);
    checksum_of("demo " SMALL_ARGS " --quiet --temperature 0.8 --top-p 0.95 --seed 2", d);
    checksum_of("demo " SMALL_ARGS " --quiet --seed 1", g);
    checksum_of("demo " SMALL_ARGS " --quiet --temperature 0.8 --top-p 0.95 --seed 1 --greedy-share 0.5", m);
    cr_expect_str_eq(a, b);
    cr_expect_str_eq(a, c, "the batching changed a request's tokens");
    cr_expect_str_neq(a, d);
    cr_expect_str_neq(a, g);
    cr_expect_str_neq(a, m);
    cr_expect_str_neq(g, m);
    cr_expect_eq(reel_run("demo --quiet --top-p 0", out, sizeof out), 2, "%s", out);
    cr_expect_eq(reel_run("demo --quiet --temperature -1", out, sizeof out), 2, "%s", out);
}
