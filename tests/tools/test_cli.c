/* The `reel` binary as a user runs it: exit codes and what it prints. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "tests/tools/small.h"

/* Runs `reel ARGS 2>&1`; returns the exit status and the output in out. */
static int reel_run(const char *args, char *out, size_t cap)
{
    const char *bin = getenv("REEL_BIN");
    cr_assert(bin != NULL, "REEL_BIN is not set");
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "'%s' %s 2>&1", bin, args);
    FILE *f = popen(cmd, "r");
    cr_assert(f != NULL);
    size_t n = fread(out, 1, cap - 1, f);
    out[n] = '\0';
    int w = pclose(f);
    return WIFEXITED(w) ? WEXITSTATUS(w) : -1;
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
