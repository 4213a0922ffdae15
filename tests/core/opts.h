/* Test helper: context options for one backend, built the way callers
 * should (REEL_CTX_OPTS_INIT, then the option by name). */
#ifndef REEL_TESTS_CORE_OPTS_H
#define REEL_TESTS_CORE_OPTS_H

#include "reel/reel.h"

static inline const reel_ctx_opts *reel_test_ctx_opts_(reel_ctx_opts *o, reel_backend_kind b)
{
    o->backend = b;
    return o;
}
/* A pointer to options valid in the enclosing block. */
#define reel_test_ctx_opts(b) reel_test_ctx_opts_(&(reel_ctx_opts)REEL_CTX_OPTS_INIT, (b))

#endif
