/* The CUDA backend when reel is built without CUDA. */
#include "runtime/backend.h"
#include "runtime/ctx.h"

bool reel_cuda_available(void) { return false; }

reel_status reel_cuda_backend_create(reel_ctx *ctx, int device, reel_backend **out)
{
    (void)device;
    *out = NULL;
    return reel_seterr(ctx, REEL_E_UNSUPPORTED, "backend 'cuda': reel was built without CUDA");
}
