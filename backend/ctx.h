/* Internal (L1): the context: the backend it chose and the error buffer
 * every layer of it writes into. Layers above the backends (memory, ops,
 * graph, runtime) reach the buffer through reel_ctx_err; the backends only get
 * the buffer (struct reel_backend.err). */
#ifndef REEL_BACKEND_CTX_H
#define REEL_BACKEND_CTX_H

#include "core/err.h"
#include "reel/reel.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct reel_backend reel_backend;

struct reel_ctx {
    reel_backend_kind kind;
    reel_backend *be;
    reel_err err;
    reel_log_fn log_fn;      /* reel_set_log_hook (log.c); NULL: silent */
    void *log_user;
    reel_log_level log_level;
};

/* Formats and hands one event to the context's log hook, if it takes the
 * level (backend/log.c); the library never prints. */
void reel_log(reel_ctx *ctx, reel_log_level level, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* The context's error buffer; NULL for a NULL context. */
static inline reel_err *reel_ctx_err(reel_ctx *ctx) { return ctx ? &ctx->err : NULL; }

#ifdef __cplusplus
}
#endif

#endif
