/* The device loop's advance on CUDA (ops/loop.h): one block; each thread
 * takes every blockDim-th sequence, the block ORs whether any runs on, and
 * thread 0 moves the step counter and sets the loop's condition (a WHILE
 * node's handle, cudaGraphSetConditional, when the advance sits in a loop
 * graph; ctl->cont always, for the host loop). */
#include "ops/cuda/common.cuh"
#include "ops/loop.h"

namespace {

__global__ void __launch_bounds__(256) advance_kernel(reel_loop_kargs a)
{
    reel_loop_ctl *c = a.ctl;
    const int32_t iter = c->iter, nseq = c->nseq;
    int run = 0;
    for (int32_t s = threadIdx.x; s < nseq; s += blockDim.x)
        run |= reel_loop_advance_seq(&a, c, iter, s);
    run = __syncthreads_or(run);
    if (threadIdx.x == 0) {
        const int32_t next = iter + 1;
        const int cont = run && next < c->max_steps;
        c->iter = next;
        c->cont = cont;
        if (a.cond)
            cudaGraphSetConditional((cudaGraphConditionalHandle)a.cond, (unsigned)cont);
    }
}

} // namespace

extern "C" reel_status reel_cuda_loop_advance(reel_backend *be, reel_stream *s, const reel_loop_kargs *a)
{
    advance_kernel<<<1, 256, 0, reel_cuda_stream_handle(s)>>>(*a);
    return REEL_CU_LAUNCHED(be, "cuda.loop_advance");
}
