/* The CUDA backend when reel is built without CUDA. */
#include "backend/backend.h"
#include "core/err.h"

bool reel_cuda_available(void) { return false; }

reel_status reel_cuda_backend_create(reel_err *err, int device, reel_backend **out)
{
    (void)device;
    *out = NULL;
    return reel_seterr(err, REEL_E_UNSUPPORTED, "backend 'cuda': reel was built without CUDA");
}
