/* The context: backend choice and last error. */
#include "backend/ctx.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/fault.h"
#include "backend/registry.h"
#include "core/halloc.h"
#include "core/abi.h"

const char *reel_backend_name(reel_backend_kind k)
{
    if (k == REEL_BACKEND_AUTO)
        return "auto";
    const reel_backend_entry *b = reel_backend_of(k);
    return b ? b->name : NULL;
}

reel_status reel_backend_parse(const char *name, reel_backend_kind *out)
{
    if (!name || !out)
        return reel_seterr(NULL, REEL_E_INVALID_ARG, "backend_parse: NULL name or out");
    if (strcmp(name, "auto") == 0) {
        *out = REEL_BACKEND_AUTO;
        return REEL_OK;
    }
    for (int i = 0; i < reel_backend_count(); i++)
        if (strcmp(name, reel_backend_at(i)->name) == 0) {
            *out = reel_backend_at(i)->kind;
            return REEL_OK;
        }
    char names[REEL_BACKEND_NAMES_MAX];
    reel_backend_names(names, sizeof names);
    return reel_seterr(NULL, REEL_E_INVALID_ARG, "backend '%s': not one of %s", name, names);
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

reel_status reel_ctx_memory(const reel_ctx *ctx, size_t *avail, size_t *total)
{
    if (!ctx || !avail || !total)
        return reel_seterr(ctx ? (reel_err *)&ctx->err : NULL, REEL_E_INVALID_ARG, "ctx_memory: %s is NULL",
                           !ctx ? "the context" : !avail ? "avail" : "total");
    reel_backend *be = ctx->be;
    if (!be->vt->mem_info)
        return reel_seterr((reel_err *)&ctx->err, REEL_E_UNSUPPORTED, "ctx_memory: backend '%s' cannot tell its memory",
                           reel_backend_name(ctx->kind));
    return be->vt->mem_info(be, avail, total, NULL);
}

/* REEL_BACKEND_AUTO: the environment's choice, else the first available
 * backend of the table (CUDA where a device is visible, else the host). */
static reel_backend_kind resolve_auto(void)
{
    const char *env = getenv("REEL_BACKEND");
    reel_backend_kind k;
    if (env && *env && reel_backend_parse(env, &k) == REEL_OK && k != REEL_BACKEND_AUTO)
        return k;
    for (int i = 0; i < reel_backend_count(); i++)
        if (reel_backend_at(i)->available())
            return reel_backend_at(i)->kind;
    return REEL_BACKEND_HOST;
}

reel_status reel_ctx_create(const reel_ctx_opts *opts, reel_ctx **out)
{
    reel_ctx_opts o = REEL_CTX_OPTS_INIT;
    /* No context yet: every refusal goes to the calling thread's last error
     * (err NULL), read with reel_ctx_last_error(NULL). */
    if (!out)
        return reel_seterr(NULL, REEL_E_INVALID_ARG, "context: out is NULL");
    *out = NULL;
    if (opts)
        REEL_TRY(reel_struct_load(&o, opts, &reel_abi_ctx_opts, NULL));
    o.backend = reel_opt_int(o.backend, REEL_BACKEND_AUTO);
    o.device = reel_opt_int(o.device, 0);
    o.matmul_tuning = reel_opt_int(o.matmul_tuning, 0);
    opts = &o;
    if (opts->matmul_tuning != 0 && opts->matmul_tuning != 1)
        return reel_seterr(NULL, REEL_E_INVALID_ARG, "context: matmul_tuning is %d, not 0 or 1", opts->matmul_tuning);
    char names[REEL_BACKEND_NAMES_MAX];
    reel_backend_names(names, sizeof names);
    if (opts->backend != REEL_BACKEND_AUTO && !reel_backend_of((reel_backend_kind)opts->backend))
        return reel_seterr(NULL, REEL_E_INVALID_ARG, "context: backend %d is not a reel_backend_kind (%s: 0..%d)",
                           opts->backend, names, reel_backend_count());
    if (opts->backend == REEL_BACKEND_AUTO) {
        const char *env = getenv("REEL_BACKEND");
        reel_backend_kind k;
        if (env && *env && reel_backend_parse(env, &k) != REEL_OK)
            return reel_seterr(NULL, REEL_E_INVALID_ARG,
                               "context: environment variable REEL_BACKEND is '%.64s', not one of %s", env, names);
    }
    reel_ctx *ctx = reel_hcalloc(1, sizeof *ctx);
    if (!ctx)
        return reel_seterr(NULL, REEL_E_OOM, "context: out of host memory");
    reel_err_init(&ctx->err);
    ctx->kind = opts->backend == REEL_BACKEND_AUTO ? resolve_auto() : (reel_backend_kind)opts->backend;
    const reel_backend_entry *b = reel_backend_of(ctx->kind);
    reel_status st = b->create(&ctx->err, opts->device, &ctx->be);
    if (st != REEL_OK) {
        /* The backend wrote its reason into the context about to go. */
        char msg[REEL_ERRMSG_MAX];
        reel_err_copy(&ctx->err, msg, sizeof msg);
        reel_err_fini(&ctx->err);
        reel_hfree(ctx);
        return reel_seterr(NULL, st, "%s", msg[0] ? msg : "context: the backend could not be created");
    }
    ctx->be->tune_matmul = opts->matmul_tuning == 1 && b->tunes_matmul; /* the host has no candidates */
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
