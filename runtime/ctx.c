/* The context: backend choice, last error, status strings, version. */
#include "runtime/ctx.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "memory/halloc.h"
#include "runtime/backend.h"

int reel_version(void) { return REEL_VERSION_NUMBER; }

const char *reel_status_str(reel_status s)
{
    static const char *const names[REEL_STATUS_COUNT] = {
        [REEL_OK] = "REEL_OK",
        [REEL_E_INVALID_ARG] = "REEL_E_INVALID_ARG",
        [REEL_E_INVALID_USAGE] = "REEL_E_INVALID_USAGE",
        [REEL_E_SHAPE] = "REEL_E_SHAPE",
        [REEL_E_DTYPE] = "REEL_E_DTYPE",
        [REEL_E_NOT_FOUND] = "REEL_E_NOT_FOUND",
        [REEL_E_UNBOUND] = "REEL_E_UNBOUND",
        [REEL_E_NO_OUTPUT] = "REEL_E_NO_OUTPUT",
        [REEL_E_OOM] = "REEL_E_OOM",
        [REEL_E_LIMIT] = "REEL_E_LIMIT",
        [REEL_E_FALLBACK] = "REEL_E_FALLBACK",
        [REEL_E_BACKEND] = "REEL_E_BACKEND",
        [REEL_E_UNSUPPORTED] = "REEL_E_UNSUPPORTED",
        [REEL_E_VERSION] = "REEL_E_VERSION",
        [REEL_E_HAZARD] = "REEL_E_HAZARD",
        [REEL_E_INTERNAL] = "REEL_E_INTERNAL",
    };
    if ((int)s < 0 || s >= REEL_STATUS_COUNT)
        return "REEL_E_UNKNOWN";
    return names[s];
}

const char *reel_backend_name(reel_backend_kind k)
{
    switch (k) {
    case REEL_BACKEND_AUTO: return "auto";
    case REEL_BACKEND_HOST: return "host";
    case REEL_BACKEND_CUDA: return "cuda";
    }
    return NULL;
}

reel_status reel_backend_parse(const char *name, reel_backend_kind *out)
{
    if (!name || !out)
        return REEL_E_INVALID_ARG;
    for (int k = REEL_BACKEND_AUTO; k <= REEL_BACKEND_CUDA; k++)
        if (strcmp(name, reel_backend_name((reel_backend_kind)k)) == 0) {
            *out = (reel_backend_kind)k;
            return REEL_OK;
        }
    return REEL_E_INVALID_ARG;
}

reel_status reel_vseterr(reel_ctx *ctx, reel_status st, const char *fmt, va_list ap)
{
    if (!ctx)
        return st;
    pthread_mutex_lock(&ctx->err_lock);
    vsnprintf(ctx->err, sizeof ctx->err, fmt, ap);
    pthread_mutex_unlock(&ctx->err_lock);
    return st;
}

reel_status reel_seterr(reel_ctx *ctx, reel_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    reel_vseterr(ctx, st, fmt, ap);
    va_end(ap);
    return st;
}

void reel_clearerr(reel_ctx *ctx)
{
    if (!ctx)
        return;
    pthread_mutex_lock(&ctx->err_lock);
    ctx->err[0] = 0;
    pthread_mutex_unlock(&ctx->err_lock);
}

/* The replaceable hook: set once by a test or embedding program. */
static reel_internal_hook internal_hook;

void reel_set_internal_hook(reel_internal_hook h) { internal_hook = h; }

reel_status reel_internal_fail(reel_ctx *ctx, const char *file, int line, const char *what)
{
    if (internal_hook)
        internal_hook(file, line, what);
    return reel_seterr(ctx, REEL_E_INTERNAL, "internal error at %s:%d: %s", file, line, what);
}

const char *reel_ctx_last_error(const reel_ctx *ctx)
{
    return ctx ? ctx->err : "no context";
}

reel_backend_kind reel_ctx_backend(const reel_ctx *ctx) { return ctx ? ctx->kind : REEL_BACKEND_AUTO; }

static reel_backend_kind resolve_auto(void)
{
    const char *env = getenv("REEL_BACKEND");
    reel_backend_kind k;
    if (env && *env && reel_backend_parse(env, &k) == REEL_OK && k != REEL_BACKEND_AUTO)
        return k;
    return reel_cuda_available() ? REEL_BACKEND_CUDA : REEL_BACKEND_HOST;
}

reel_status reel_ctx_create(const reel_ctx_opts *opts, reel_ctx **out)
{
    reel_ctx_opts def = REEL_CTX_OPTS_INIT;
    if (!out)
        return REEL_E_INVALID_ARG;
    *out = NULL;
    if (!opts)
        opts = &def;
    /* Major and minor must match: the structs of the header are the ABI. */
    if (opts->header_version / 100 != REEL_VERSION_NUMBER / 100)
        return REEL_E_VERSION;
    if (opts->backend < REEL_BACKEND_AUTO || opts->backend > REEL_BACKEND_CUDA)
        return REEL_E_INVALID_ARG;
    if (opts->backend == REEL_BACKEND_AUTO) {
        const char *env = getenv("REEL_BACKEND");
        reel_backend_kind k;
        if (env && *env && reel_backend_parse(env, &k) != REEL_OK)
            return REEL_E_INVALID_ARG;
    }
    reel_ctx *ctx = reel_hcalloc(1, sizeof *ctx);
    if (!ctx)
        return REEL_E_OOM;
    pthread_mutex_init(&ctx->err_lock, NULL);
    ctx->kind = opts->backend == REEL_BACKEND_AUTO ? resolve_auto() : opts->backend;
    reel_status st = ctx->kind == REEL_BACKEND_CUDA ? reel_cuda_backend_create(ctx, opts->device, &ctx->be)
                                                    : reel_host_backend_create(ctx, &ctx->be);
    if (st != REEL_OK) {
        pthread_mutex_destroy(&ctx->err_lock);
        reel_hfree(ctx);
        return st;
    }
    *out = ctx;
    return REEL_OK;
}

void reel_ctx_destroy(reel_ctx *ctx)
{
    if (!ctx)
        return;
    if (ctx->be)
        ctx->be->vt->destroy(ctx->be);
    pthread_mutex_destroy(&ctx->err_lock);
    reel_hfree(ctx);
}
