/* Internal (L0): host backend specifics used by host kernels and tests. */
#ifndef REEL_RUNTIME_HOST_H
#define REEL_RUNTIME_HOST_H

#include "runtime/backend.h"

#define REEL_HOST_ARGS_MAX 512

/* A host kernel: runs on a stream's worker thread with a copy of its args. */
typedef void (*reel_host_fn)(const void *args);

/* Enqueues fn(args) on stream s (args copied, at most REEL_HOST_ARGS_MAX
 * bytes). While s is capturing, the launch is recorded instead of run. */
reel_status reel_host_launch(reel_backend *be, reel_stream *s, reel_host_fn fn, const void *args, size_t size);

/* Test hooks: a random delay of up to max_us microseconds before each item a
 * stream thread runs (0 = off), seeded; for stress tests with jitter. */
void reel_host_set_jitter(reel_backend *be, unsigned max_us, uint64_t seed);
/* Items run so far by all stream threads of this backend (kernels, copies,
 * fills, event records and waits). */
uint64_t reel_host_items_run(reel_backend *be);

#endif
