/* Shared by the graph tests: a host context and an empty graph per test. */
#ifndef REEL_TESTS_GRAPH_FIXTURE_H
#define REEL_TESTS_GRAPH_FIXTURE_H

#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "graph/ir.h"
#include "reel/reel.h"

static reel_ctx *ctx;
static reel_graph *g;

static void graph_setup(void)
{
    reel_ctx_opts o = REEL_CTX_OPTS_INIT;
    o.backend = REEL_BACKEND_HOST;
    cr_assert_eq(reel_ctx_create(&o, &ctx), REEL_OK);
    cr_assert_eq(reel_graph_create(ctx, &g), REEL_OK);
}

static void graph_teardown(void)
{
    reel_graph_destroy(g);
    reel_ctx_destroy(ctx);
}

#define D(...) ((const int64_t[]){ __VA_ARGS__ })
#define T REEL_DIM_TOKENS

/* The last error message contains every given fragment. */
#define assert_msg_has(...)                                                          \
    do {                                                                             \
        const char *frags_[] = { __VA_ARGS__ };                                      \
        const char *msg_ = reel_ctx_last_error(ctx);                                 \
        for (size_t i_ = 0; i_ < sizeof frags_ / sizeof frags_[0]; i_++)             \
            cr_assert(strstr(msg_, frags_[i_]), "message \"%s\" lacks \"%s\"", msg_, \
                      frags_[i_]);                                                   \
    } while (0)

#endif
