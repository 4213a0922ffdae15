/* Internal: the context and its error reporting. */
#ifndef REEL_RUNTIME_CTX_H
#define REEL_RUNTIME_CTX_H

#include <pthread.h>
#include <stdarg.h>

#include "reel/reel.h"

typedef struct reel_backend reel_backend;

#define REEL_ERRMSG_MAX 512

struct reel_ctx {
    reel_backend_kind kind;
    reel_backend *be;
    pthread_mutex_t err_lock;
    char err[REEL_ERRMSG_MAX];
};

/* Records msg as the context's last error and returns st (so call sites can
 * `return reel_seterr(ctx, REEL_E_SHAPE, "...")`). ctx may be NULL. */
reel_status reel_seterr(reel_ctx *ctx, reel_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
reel_status reel_vseterr(reel_ctx *ctx, reel_status st, const char *fmt, va_list ap);
void reel_clearerr(reel_ctx *ctx);

/* Internal invariant failures go through one replaceable hook; the default
 * records the message and returns REEL_E_INTERNAL (it never aborts). */
typedef void (*reel_internal_hook)(const char *file, int line, const char *what);
void reel_set_internal_hook(reel_internal_hook h);
reel_status reel_internal_fail(reel_ctx *ctx, const char *file, int line, const char *what);
#define REEL_INTERNAL(ctx, what) reel_internal_fail((ctx), __FILE__, __LINE__, (what))

/* Propagates a failing status. */
#define REEL_TRY(expr) do { reel_status reel_try_st_ = (expr); if (reel_try_st_ != REEL_OK) return reel_try_st_; } while (0)

#endif
