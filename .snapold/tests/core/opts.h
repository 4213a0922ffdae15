/* Test helper: context options for one backend, built the way callers
 * should (REEL_CTX_OPTS_INIT, then the option by name). */
#ifndef REEL_TESTS_CORE_OPTS_H
#define REEL_TESTS_CORE_OPTS_H

#include <stdlib.h>

#include "reel/reel.h"

static inline const reel_ctx_opts *reel_test_ctx_opts_(reel_ctx_opts *o, reel_backend_kind b)
{
    o->backend = b;
    return o;
}
/* A pointer to options valid in the enclosing block. */
#define reel_test_ctx_opts(b) reel_test_ctx_opts_(&(reel_ctx_opts)REEL_CTX_OPTS_INIT, (b))

/* The backend a test parameterized over backends runs on: REEL_TEST_BACKEND
 * ("host" when unset). meson registers such a test once per backend
 * (tests/gpu registers the CUDA run, skipped without a GPU). */
static inline reel_backend_kind reel_test_backend(void)
{
    const char *e = getenv("REEL_TEST_BACKEND");
    reel_backend_kind k;
    if (e && *e && reel_backend_parse(e, &k) == REEL_OK && k != REEL_BACKEND_AUTO)
        return k;
    return REEL_BACKEND_HOST;
}

#endif
