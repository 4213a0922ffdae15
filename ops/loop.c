/* The device loop's advance: the backend's kernel (ops/loop.h). */
#include "ops/loop.h"
#include "reel_config.h"

reel_status reel_loop_advance(reel_backend *be, reel_stream *s, const reel_loop_kargs *a)
{
    switch (be->kind) {
    case REEL_BACKEND_HOST: return reel_host_loop_advance(be, s, a);
#if REEL_HAVE_CUDA
    case REEL_BACKEND_CUDA: return reel_cuda_loop_advance(be, s, a);
#endif
    default: return reel_seterr(be->err, REEL_E_UNSUPPORTED, "step_n: backend %d has no loop advance", (int)be->kind);
    }
}
