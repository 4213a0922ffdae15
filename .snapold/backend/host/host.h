/* Internal (L1): host backend specifics used by host kernels and tests.
 *
 * Semantics of the host backend (reel_host_backend_create):
 * - A stream is a worker thread running a FIFO of items (kernel launch,
 *   copy, fill, event record, event wait); different streams run at the same
 *   time. stream_sync waits for every item pushed before the call.
 *   stream_destroy drains the stream first; backend destroy drains and joins
 *   every stream thread (pending work finishes, it is not dropped).
 * - Events (CUDA semantics): record issues a new generation; stream_wait and
 *   event_sync wait for the record that was most recent at the time of the
 *   call (later records do not change it); event_query reports that most
 *   recent record. An event never recorded is complete. An event may be
 *   destroyed with records or waits pending.
 * - Capture: capture_begin(origin) puts origin in capture mode. Items issued
 *   to a capturing stream are recorded (in issue order, with their stream),
 *   not run. A stream that waits on an event whose most recent record was
 *   made in a capture joins that capture (fork). Refused with
 *   REEL_E_INVALID_USAGE: a capturing stream waiting on an event last
 *   recorded outside its capture (a never-recorded event is a no-op), or in
 *   another capture; stream_sync of a capturing stream; event_query/sync of
 *   an event last recorded in a capture in progress; capture_begin on a
 *   stream already in a capture; capture_end on a stream that is not the
 *   origin of a capture.
 * - capture_end(origin) requires every joined stream to be joined back: the
 *   origin's last recorded item must depend (through stream order and
 *   record->wait edges, transitively) on each stream's last recorded item;
 *   otherwise REEL_E_INVALID_USAGE "stream N not joined before capture end"
 *   and the capture is discarded. Whatever the outcome, and on capture_abort,
 *   every stream leaves capture mode and every event returns to its state
 *   before the capture. stream_destroy of a stream in a capture discards it.
 * - graph_launch(g, s) enqueues fresh copies of the recorded items onto the
 *   recorded streams (the origin mapped onto s) in the recorded issue order,
 *   atomically with respect to other calls. Events recorded in the capture
 *   are replaced by events the graph owns (the caller's may be destroyed).
 *   With forked streams, the launch also records a start event on s that
 *   every other stream of the graph waits on first, and an end event on each
 *   of them that s waits on last: work on s before the launch happens before
 *   the graph, work on s after it happens after the whole graph. Such a
 *   launch adds 1 + 3 * (streams - 1) record/wait items to items_run. The
 *   graph holds its forked streams alive until graph_destroy. Launching into
 *   a capturing stream is refused. graph_update is NULL. */
#ifndef REEL_BACKEND_HOST_H
#define REEL_BACKEND_HOST_H

#include "backend/backend.h"

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
/* The number a host stream is called by in error messages ("stream N"):
 * streams of a backend are numbered from 0 in creation order. */
unsigned reel_host_stream_id(reel_backend *be, reel_stream *s);

#endif
