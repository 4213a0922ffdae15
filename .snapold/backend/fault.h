/* Internal (L1): fault injection at the backend seam, for tests only.
 *
 * Built only with -Dfault_injection=true (never in a release build:
 * meson refuses it). The context then wraps its backend's function table,
 * and every communicator its table, in one that counts the calls of each
 * kind below and makes the N-th one (counted from reel_fault_arm) fail
 * with a message naming the call: REEL_E_OOM for an allocation,
 * REEL_E_BACKEND for the rest. A call that would have started work fails
 * before it reaches the backend; a call that waits (stream and event
 * sync, event query, a communicator's sync) and an instantiate (capture
 * end) run first and then report the failure, as a device error found at
 * that point would: the work it waited for is done, the capture is ended
 * and its graph destroyed. Void calls (destroy, free) never fail.
 *
 * The counters are process-wide (every context and communicator of the
 * process counts into them) and atomic; one fault fires per arm. Without
 * the build option none of this exists and the tables are the backends'
 * own. */
#ifndef REEL_BACKEND_FAULT_H
#define REEL_BACKEND_FAULT_H

#include <stdbool.h>
#include <stdint.h>

#include "reel_config.h"

typedef enum reel_fault_kind {
    REEL_FAULT_ALLOC,       /* dev_alloc, pinned_alloc */
    REEL_FAULT_STREAM,      /* stream_create, stream_sync */
    REEL_FAULT_EVENT,       /* event_create, event_record, stream_wait, event_query, event_sync */
    REEL_FAULT_CAPTURE,     /* capture_begin */
    REEL_FAULT_INSTANTIATE, /* capture_end (the graph is ended, then refused) */
    REEL_FAULT_LAUNCH,      /* graph_launch */
    REEL_FAULT_UPDATE,      /* graph_update */
    REEL_FAULT_COPY,        /* copy, fill */
    REEL_FAULT_COLLECTIVE,  /* a communicator's data calls, group begin/end, agree, sync */
    REEL_FAULT_KINDS
} reel_fault_kind;

#if REEL_FAULT_INJECTION
typedef struct reel_backend reel_backend;
typedef struct reel_comm reel_comm;

/* The kind's name ("alloc", "stream", ...), NULL out of range. */
const char *reel_fault_kind_name(reel_fault_kind k);
/* From now, the n-th call (1-based) of kind k fails; n 0 disarms k. Resets
 * k's count and fired flag either way. */
void reel_fault_arm(reel_fault_kind k, int64_t n);
/* Disarms every kind and resets the counts. */
void reel_fault_reset(void);
/* Calls of kind k since its last arm or reset. */
int64_t reel_fault_calls(reel_fault_kind k);
/* Whether k's armed fault has fired since its last arm. */
bool reel_fault_fired(reel_fault_kind k);
/* Stops (false) or resumes (true) counting for every kind: a test takes
 * its snapshots through the same backend without moving the counts. */
void reel_fault_pause(bool paused);

/* Called by the context and the communicator constructors. */
void reel_fault_wrap_backend(reel_backend *be);
void reel_fault_wrap_comm(reel_comm *c);
#endif

#endif
