/* The context: backend choice and last error. */
#include "backend/ctx.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/fault.h"
#include "core/halloc.h"
#include "core/opts.h"

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
        return reel_seterr(NULL, REEL_E_INVALID_ARG, "backend_parse: NULL name or out");
    for (int k = REEL_BACKEND_AUTO; k <= REEL_BACKEND_CUDA; k++)
        if (strcmp(name, reel_backend_name((reel_backend_kind)k)) == 0) {
            *out = (reel_backend_kind)k;
            return REEL_OK;
        }
    return reel_seterr(NULL, REEL_E_INVALID_ARG, "backend '%s': not one of auto, host, cuda", name);
}

/* A copy for the calling thread, taken under the lock: the pointer stays
 * valid (and unchanged) while other threads keep using the context. With
 * no context: the calling thread's last failure that had none to record on
 * (reel_ctx_create, a call with a NULL handle). */
const char *reel_ctx_last_error(const reel_ctx *ctx)
{
    static _Thread_local char copy[REEL_ERRMSG_MAX];
    if (!ctx)
        reel_err_copy_thread(copy, sizeof copy);
    else
        reel_err_copy((reel_err *)&ctx->err, copy, sizeof copy);
    return copy;
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

/* The size of the first sized form of reel_ctx_opts (reel 0.1): no caller's
 * struct is shorter. Fields appended later are not counted here. */
#define CTX_OPTS_FIRST_SIZE (offsetof(reel_ctx_opts, device) + sizeof(int))

reel_status reel_ctx_create(const reel_ctx_opts *opts, reel_ctx **out)
{
    reel_ctx_opts o = REEL_CTX_OPTS_INIT;
    /* No context yet: every refusal goes to the calling thread's last error
     * (err NULL), read with reel_ctx_last_error(NULL). */
    if (!out)
        return reel_seterr(NULL, REEL_E_INVALID_ARG, "context: out is NULL");
    *out = NULL;
    if (opts)
        REEL_TRY(reel_opts_load(&o, sizeof o, opts, CTX_OPTS_FIRST_SIZE, NULL, "context", "REEL_CTX_OPTS_INIT"));
    o.backend = reel_opt_int(o.backend, REEL_BACKEND_AUTO);
    o.device = reel_opt_int(o.device, 0);
    o.matmul_tuning = reel_opt_int(o.matmul_tuning, 0);
    opts = &o;
    if (opts->matmul_tuning != 0 && opts->matmul_tuning != 1)
        return reel_seterr(NULL, REEL_E_INVALID_ARG, "context: matmul_tuning is %d, not 0 or 1", opts->matmul_tuning);
    if (opts->backend < REEL_BACKEND_AUTO || opts->backend > REEL_BACKEND_CUDA)
        return reel_seterr(NULL, REEL_E_INVALID_ARG, "context: backend %d is not a reel_backend_kind (0..%d)",
                           opts->backend, REEL_BACKEND_CUDA);
    if (opts->backend == REEL_BACKEND_AUTO) {
        const char *env = getenv("REEL_BACKEND");
        reel_backend_kind k;
        if (env && *env && reel_backend_parse(env, &k) != REEL_OK)
            return reel_seterr(NULL, REEL_E_INVALID_ARG,
                               "context: environment variable REEL_BACKEND is '%.64s', not one of auto, host, cuda",
                               env);
    }
    reel_ctx *ctx = reel_hcalloc(1, sizeof *ctx);
    if (!ctx)
        return reel_seterr(NULL, REEL_E_OOM, "context: out of host memory");
    reel_err_init(&ctx->err);
    ctx->kind = opts->backend == REEL_BACKEND_AUTO ? resolve_auto() : (reel_backend_kind)opts->backend;
    reel_status st = ctx->kind == REEL_BACKEND_CUDA ? reel_cuda_backend_create(&ctx->err, opts->device, &ctx->be)
                                                    : reel_host_backend_create(&ctx->err, &ctx->be);
    if (st != REEL_OK) {
        /* The backend wrote its reason into the context about to go. */
        char msg[REEL_ERRMSG_MAX];
        reel_err_copy(&ctx->err, msg, sizeof msg);
        reel_err_fini(&ctx->err);
        reel_hfree(ctx);
        return reel_seterr(NULL, st, "%s", msg[0] ? msg : "context: the backend could not be created");
    }
    ctx->be->tune_matmul = opts->matmul_tuning == 1 && ctx->kind == REEL_BACKEND_CUDA; /* the host has no candidates */
#if REEL_FAULT_INJECTION
    reel_fault_wrap_backend(ctx->be);
#endif
    *out = ctx;
    return REEL_OK;
}

void reel_ctx_destroy(reel_ctx *ctx)
{
    if (!ctx)
        return;
    if (ctx->be)
        ctx->be->vt->destroy(ctx->be);
    reel_err_fini(&ctx->err);
    reel_hfree(ctx);
}
