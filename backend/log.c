/* The context's log hook: the library's only way to say something without
 * a failed call. Silent unless the caller installs a hook. */
#include <stdarg.h>
#include <stdio.h>

#include "backend/ctx.h"

reel_status reel_set_log_hook(reel_ctx *ctx, reel_log_fn fn, void *user, reel_log_level min_level)
{
    if (!ctx)
        return reel_seterr(NULL, REEL_E_INVALID_ARG, "set log hook: ctx is NULL");
    if (min_level < REEL_LOG_DEBUG || min_level > REEL_LOG_ERROR)
        return reel_seterr(&ctx->err, REEL_E_INVALID_ARG, "set log hook: level %d outside %d..%d (REEL_LOG_DEBUG..REEL_LOG_ERROR)",
                           (int)min_level, (int)REEL_LOG_DEBUG, (int)REEL_LOG_ERROR);
    ctx->log_fn = fn;
    ctx->log_user = user;
    ctx->log_level = min_level;
    return REEL_OK;
}

void reel_log(reel_ctx *ctx, reel_log_level level, const char *fmt, ...)
{
    if (!ctx || !ctx->log_fn || level < ctx->log_level)
        return;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    ctx->log_fn(ctx->log_user, level, msg);
}
