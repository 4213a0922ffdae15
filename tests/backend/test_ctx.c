/* The context (backend/ctx.c): backend choice (option, REEL_BACKEND, auto), option structs,
 * status names, error text. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reel/reel.h"
#include "backend/backend.h"
#include "backend/ctx.h"
#include "tests/core/opts.h"

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

static void *fail_other_call(void *arg)
{
    reel_ctx *c = arg;
    reel_graph *g = NULL;
    cr_assert_eq(reel_graph_create(c, &g), REEL_OK);
    /* A different failure on another thread. */
    reel_tensor bad = reel_add(g, (reel_tensor){0}, (reel_tensor){0});
    (void)bad;
    reel_graph_destroy(g);
    return NULL;
}

Test(ctx, the_last_error_a_thread_read_does_not_change_when_another_thread_fails)
{
    unsetenv("REEL_BACKEND");
    reel_ctx *c = NULL;
    cr_assert_eq(reel_ctx_create(reel_test_ctx_opts(REEL_BACKEND_HOST), &c), REEL_OK);
    cr_assert_eq(reel_graph_create(c, NULL), REEL_E_INVALID_ARG);
    const char *mine = reel_ctx_last_error(c);
    char before[512];
    snprintf(before, sizeof before, "%s", mine);
    cr_assert(strstr(before, "out is NULL"), "%s", before);
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, fail_other_call, c), 0);
    pthread_join(t, NULL);
    cr_assert_str_eq(mine, before, "the text this thread read changed under it");
    cr_assert_str_neq(reel_ctx_last_error(c), before, "the other thread's failure is the context's last error");
    reel_ctx_destroy(c);
}

Test(ctx, matmul_tuning_is_0_or_1_and_an_older_header_without_it_is_accepted)
{
    reel_ctx *c = NULL;
    reel_ctx_opts o = REEL_CTX_OPTS_INIT;
    o.backend = REEL_BACKEND_HOST;
    o.matmul_tuning = 2;
    cr_assert_eq(reel_ctx_create(&o, &c), REEL_E_INVALID_ARG);
    cr_assert_null(c);
    cr_assert(strstr(reel_ctx_last_error(NULL), "matmul_tuning"), "%s", reel_ctx_last_error(NULL));
    o.matmul_tuning = 1;
    cr_assert_eq(reel_ctx_create(&o, &c), REEL_OK, "%s", reel_ctx_last_error(NULL));
    cr_assert_not(c->be->tune_matmul, "the host has nothing to tune");
    reel_ctx_destroy(c);
    /* The header before the option: the 2 past its size is not read. */
    o.matmul_tuning = 2;
    o.size = offsetof(reel_ctx_opts, matmul_tuning);
    cr_assert_eq(reel_ctx_create(&o, &c), REEL_OK, "%s", reel_ctx_last_error(NULL));
    reel_ctx_destroy(c);
}
