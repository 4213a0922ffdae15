/* NCCL communicators when reel is built without NCCL: every call says so. */
#include "backend/comm.h"
#include "backend/ctx.h"
#include "core/err.h"

reel_status reel_nccl_unique_id(reel_err *err, unsigned char *payload)
{
    (void)payload;
    return reel_seterr(err, REEL_E_UNSUPPORTED, "comm: reel was built without NCCL");
}

reel_status reel_nccl_comm_create(reel_ctx *ctx, const unsigned char *payload, int rank, int nranks, int timeout_ms,
                                  reel_comm **out)
{
    (void)payload, (void)nranks, (void)timeout_ms;
    *out = NULL;
    return reel_seterr(&ctx->err, REEL_E_UNSUPPORTED, "comm create: rank %d: reel was built without NCCL", rank);
}

reel_status reel_nccl_comm_group(reel_ctx *const *ctxs, int n, int timeout_ms, reel_comm **comms)
{
    (void)n, (void)timeout_ms, (void)comms;
    return reel_seterr(&ctxs[0]->err, REEL_E_UNSUPPORTED, "comm create_group: reel was built without NCCL");
}
