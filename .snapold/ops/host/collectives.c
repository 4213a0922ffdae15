/* Host side of the collective ops: the chunk transpose the decomposition of
 * ops/collective.c needs, as a host stream kernel. The exchanges themselves
 * are the host communicator's (backend/host/host_comm.c). */
#include <string.h>

#include "backend/host/host.h"
#include "ops/host/host_ops.h"

typedef struct transpose_args {
    const char *src;
    char *dst;
    int64_t a, b;
    size_t chunk;
} transpose_args;

static void transpose_kernel(const void *args)
{
    const transpose_args *t = args;
    for (int64_t i = 0; i < t->a; i++)
        for (int64_t j = 0; j < t->b; j++)
            memcpy(t->dst + ((size_t)j * (size_t)t->a + (size_t)i) * t->chunk,
                   t->src + ((size_t)i * (size_t)t->b + (size_t)j) * t->chunk, t->chunk);
}

reel_status reel_host_transpose(reel_backend *be, reel_stream *s, const void *src, void *dst, int64_t A, int64_t B,
                                size_t chunk)
{
    transpose_args t = {src, dst, A, B, chunk};
    return reel_host_launch(be, s, transpose_kernel, &t, sizeof t);
}

reel_status reel_host_collective_launch(reel_backend *be, const reel_launch *l)
{
    return reel_coll_launch(be, l, reel_host_transpose);
}
