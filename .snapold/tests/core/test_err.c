/* The error buffer every layer writes into, and the internal-invariant hook. */
#include <criterion/criterion.h>
#include <string.h>

#include "core/err.h"

static reel_err e;
static void setup(void) { reel_err_init(&e); }
static void teardown(void) { reel_err_fini(&e); }
TestSuite(err, .init = setup, .fini = teardown);

Test(err, seterr_records_the_message_and_returns_the_status)
{
    cr_assert_eq(reel_seterr(&e, REEL_E_SHAPE, "op '%s': %d", "add", 3), REEL_E_SHAPE);
    char buf[64];
    reel_err_copy(&e, buf, sizeof buf);
    cr_assert_str_eq(buf, "op 'add': 3");
    reel_clearerr(&e);
    reel_err_copy(&e, buf, sizeof buf);
    cr_assert_str_eq(buf, "");
}

Test(err, a_null_buffer_takes_nothing_and_still_returns_the_status)
{
    cr_assert_eq(reel_seterr(NULL, REEL_E_OOM, "lost"), REEL_E_OOM);
    cr_assert_eq(reel_err_prefix(NULL, REEL_E_OOM, "lost"), REEL_E_OOM);
    char buf[8] = "x";
    reel_err_copy(NULL, buf, sizeof buf);
    cr_assert_str_eq(buf, "");
}

Test(err, prefix_puts_the_callers_context_before_the_lower_layers_detail)
{
    reel_seterr(&e, REEL_E_BACKEND, "cudaMemcpyAsync: invalid argument");
    cr_assert_eq(reel_err_prefix(&e, REEL_E_BACKEND, "op '%s', kernel '%s'", "matmul", "cuda.matmul"),
                 REEL_E_BACKEND);
    char buf[128];
    reel_err_copy(&e, buf, sizeof buf);
    cr_assert_str_eq(buf, "op 'matmul', kernel 'cuda.matmul': cudaMemcpyAsync: invalid argument");
}

Test(err, prefix_of_a_full_message_keeps_the_head_and_stays_terminated)
{
    char big[REEL_ERRMSG_MAX * 2];
    memset(big, 'd', sizeof big - 1);
    big[sizeof big - 1] = 0;
    reel_seterr(&e, REEL_E_BACKEND, "%s", big);
    reel_err_prefix(&e, REEL_E_BACKEND, "head");
    char buf[REEL_ERRMSG_MAX];
    reel_err_copy(&e, buf, sizeof buf);
    cr_assert_eq(strncmp(buf, "head: ddd", 9), 0, "%s", buf);
    cr_assert_eq(strlen(buf), REEL_ERRMSG_MAX - 1);
}

static int hook_calls;
static int hook_line;
static void hook(const char *file, int line, const char *what)
{
    hook_calls++;
    hook_line = line;
    (void)file;
    (void)what;
}

static reel_status holds(reel_err *err, int v)
{
    REEL_INVARIANT(err, v > 0);
    return REEL_OK;
}

Test(err, a_failed_invariant_goes_through_the_hook_and_returns_internal)
{
    reel_set_internal_hook(hook);
    cr_assert_eq(holds(&e, 1), REEL_OK);
    cr_assert_eq(hook_calls, 0);
    cr_assert_eq(holds(&e, 0), REEL_E_INTERNAL);
    cr_assert_eq(hook_calls, 1);
    cr_assert_gt(hook_line, 0);
    char buf[256];
    reel_err_copy(&e, buf, sizeof buf);
    cr_assert(strstr(buf, "internal error at") && strstr(buf, "v > 0"), "%s", buf);
    reel_set_internal_hook(NULL);
}
