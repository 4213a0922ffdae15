/* The device loop's advance on the host backend (ops/loop.h): one pass over
 * the sequences on the stream's thread, then the loop's condition. */
#include "backend/host/host.h"
#include "ops/loop.h"

static void host_advance(const void *args)
{
    const reel_loop_kargs *a = args;
    reel_loop_ctl *c = a->ctl;
    int32_t iter = c->iter, run = 0;
    for (int32_t s = 0; s < c->nseq; s++)
        run |= reel_loop_advance_seq(a, c, iter, s);
    c->iter = iter + 1;
    c->cont = run && c->iter < c->max_steps;
    if (a->cond)
        __atomic_store_n((int *)(uintptr_t)a->cond, c->cont, __ATOMIC_RELEASE);
}

reel_status reel_host_loop_advance(reel_backend *be, reel_stream *s, const reel_loop_kargs *a)
{
    return reel_host_launch(be, s, host_advance, a, sizeof *a);
}
