/* The context: backend choice (option, REEL_BACKEND, auto), version check,
 * status names, error text. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "reel/reel.h"

Test(ctx, an_explicit_host_backend_wins_over_the_environment)
{
    setenv("REEL_BACKEND", "cuda", 1);
    reel_ctx *c;
    reel_ctx_opts o = REEL_CTX_OPTS_INIT;
    o.backend = REEL_BACKEND_HOST;
    cr_assert_eq(reel_ctx_create(&o, &c), REEL_OK);
    cr_assert_eq(reel_ctx_backend(c), REEL_BACKEND_HOST);
    cr_assert_str_eq(reel_ctx_last_error(c), "");
    reel_ctx_destroy(c);
}

Test(ctx, auto_follows_reel_backend)
{
    setenv("REEL_BACKEND", "host", 1);
    reel_ctx *c;
    cr_assert_eq(reel_ctx_create(NULL, &c), REEL_OK);
    cr_assert_eq(reel_ctx_backend(c), REEL_BACKEND_HOST);
    reel_ctx_destroy(c);
}

Test(ctx, a_bad_reel_backend_value_is_refused)
{
    setenv("REEL_BACKEND", "tpu", 1);
    reel_ctx *c = (reel_ctx *)1;
    cr_assert_eq(reel_ctx_create(NULL, &c), REEL_E_INVALID_ARG);
    cr_assert_null(c);
}

Test(ctx, cuda_without_a_usable_device_is_unsupported_not_a_crash)
{
    unsetenv("REEL_BACKEND");
    reel_ctx *c = NULL;
    reel_ctx_opts o = REEL_CTX_OPTS_INIT;
    o.backend = REEL_BACKEND_CUDA;
    reel_status st = reel_ctx_create(&o, &c);
    if (st == REEL_OK) { /* a GPU machine */
        cr_assert_eq(reel_ctx_backend(c), REEL_BACKEND_CUDA);
        reel_ctx_destroy(c);
        return;
    }
    cr_assert_eq(st, REEL_E_UNSUPPORTED);
    cr_assert_null(c);
}

Test(ctx, a_header_of_another_major_version_is_refused)
{
    reel_ctx *c = (reel_ctx *)1;
    reel_ctx_opts o = REEL_CTX_OPTS_INIT;
    o.version = REEL_VERSION_NUMBER + 10000;
    cr_assert_eq(reel_ctx_create(&o, &c), REEL_E_VERSION);
    cr_assert_null(c);
    cr_assert_eq(reel_version(), REEL_VERSION_NUMBER);
}

Test(ctx, a_header_of_another_minor_version_with_the_same_struct_is_accepted)
{
    unsetenv("REEL_BACKEND");
    reel_ctx *c = NULL;
    reel_ctx_opts o = REEL_CTX_OPTS_INIT;
    o.version = REEL_VERSION_NUMBER + 100;
    o.backend = REEL_BACKEND_HOST;
    cr_assert_eq(reel_ctx_create(&o, &c), REEL_OK);
    reel_ctx_destroy(c);
}

Test(ctx, options_left_undefined_take_their_defaults)
{
    setenv("REEL_BACKEND", "host", 1);
    reel_ctx *c = NULL;
    reel_ctx_opts o = REEL_CTX_OPTS_INIT;
    cr_assert_eq(o.backend, REEL_UNDEF_INT);
    cr_assert_eq(reel_ctx_create(&o, &c), REEL_OK); /* auto: REEL_BACKEND */
    cr_assert_eq(reel_ctx_backend(c), REEL_BACKEND_HOST);
    reel_ctx_destroy(c);
}

Test(ctx, options_not_initialised_or_larger_than_the_library_knows_are_refused)
{
    reel_ctx *c = (reel_ctx *)1;
    reel_ctx_opts zero = {0};
    cr_assert_eq(reel_ctx_create(&zero, &c), REEL_E_VERSION);
    cr_assert_null(c);
    /* A newer header's struct, with an option this library cannot honour. */
    struct { reel_ctx_opts o; int newer_option; } big = {REEL_CTX_OPTS_INIT, 1};
    big.o.size = sizeof big;
    cr_assert_eq(reel_ctx_create(&big.o, &c), REEL_E_VERSION);
    cr_assert_null(c);
}

Test(ctx, every_status_and_backend_has_a_name)
{
    for (int s = 0; s < REEL_STATUS_COUNT; s++)
        cr_assert(strncmp(reel_status_str((reel_status)s), "REEL_", 5) == 0);
    cr_assert_str_eq(reel_status_str((reel_status)999), "REEL_E_UNKNOWN");
    reel_backend_kind k;
    cr_assert_eq(reel_backend_parse("cuda", &k), REEL_OK);
    cr_assert_eq(k, REEL_BACKEND_CUDA);
    cr_assert_eq(reel_backend_parse("x", &k), REEL_E_INVALID_ARG);
    cr_assert_null(reel_backend_name((reel_backend_kind)42));
    for (int f = 0; f < REEL_FALLBACK_COUNT; f++)
        cr_assert_str_neq(reel_fallback_str((reel_fallback)f), "unknown");
    cr_assert_eq(reel_dtype_size(REEL_BF16), 2);
}
