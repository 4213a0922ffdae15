/* A demo configuration small enough for the test suite (a fraction of a
 * second on the host backend) that still has long prompts (over the largest
 * bucket, 16) and a request whose context passes max_context (64). */
#ifndef REEL_TESTS_TOOLS_SMALL_H
#define REEL_TESTS_TOOLS_SMALL_H

#include <string.h>

#include "tools/demo.h"

static inline demo_opts small_opts(uint64_t seed)
{
    demo_opts o;
    demo_opts_default(&o);
    o.model.layers = 2;
    o.model.hidden = 64;
    o.model.heads = 2;
    o.model.vocab = 256;
    o.model.block_size = 8;
    const int32_t b[] = {1, 2, 4, 8, 16};
    o.num_buckets = 5;
    memcpy(o.buckets, b, sizeof b);
    o.max_context = 64;
    o.max_seqs = 4;
    o.requests = 12;
    o.backend = REEL_BACKEND_HOST;
    o.seed = seed;
    o.quiet = true;
    return o;
}

#define SMALL_ARGS "--layers 2 --hidden 64 --heads 2 --vocab 256 --block-size 8 --buckets 1,2,4,8,16 " \
                   "--max-context 64 --max-seqs 4 --requests 12 --backend host"

#endif
