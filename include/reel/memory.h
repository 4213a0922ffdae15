/*
 * reel hazard checker: allocator and stream safety, checked without running
 * kernels.
 *
 * Every op declares the byte ranges it reads and writes. Each stream keeps a
 * vector clock; event records and waits and host synchronizations move the
 * clocks; every access is checked against the earlier accesses of its bytes
 * it could race with (see "What it reports"). Two accesses conflict when at
 * least one writes, their bytes overlap, and neither happens before the
 * other. A conflict is reported with both ops, their streams, the byte
 * range and the allocation that produced the bytes for each side (a plan
 * offset and tensor name, or a workspace block), so reuse of bytes by an
 * allocator is covered too.
 *
 *     reel_checker *c;  reel_checker_create(NULL, &c);
 *     uint64_t a, b;
 *     reel_checker_alloc(c, 0, 0, 0x1000, 256, "scratch #1", &a);   // on stream 0
 *     reel_checker_use(c, 0, "gemm", a, 0, 256, true);              // writes on stream 0
 *     reel_checker_free(c, 0, a);
 *     reel_checker_alloc(c, 1, 0, 0x1000, 256, "scratch #2", &b);   // same bytes, stream 1
 *     reel_checker_use(c, 1, "norm", b, 0, 256, true);              // no wait: WAW reported
 *     size_t n;  const reel_hazard *h = reel_checker_hazards(c, &n);
 *     char line[512];  reel_hazard_format(&h[0], line, sizeof line);
 *     reel_checker_destroy(c);
 *
 * Streams and events are named by the caller's 64-bit keys (small integers,
 * or handle addresses cast to integers); REEL_CHECK_HOST is the host thread.
 * Work issued to a stream happens after everything the host did before
 * issuing it. An event never recorded is complete (waiting on it orders
 * nothing). Address spaces never alias: space 0 is device pointers by
 * convention, other values are the caller's (a plan arena's offsets, ...).
 *
 * What it proves: for the accesses it was told about, every pair of
 * conflicting accesses is ordered by the stream order, the events and the
 * host synchronizations it was told about. It cannot see accesses nobody
 * declared, ordering through means it was not told about (a host spin on a
 * flag, a device-wide barrier), nor bugs inside one op.
 *
 * What it reports: each access X is checked, on its bytes, against the last
 * write of every stream that no later write is ordered after, and the last
 * read of every stream that no later write is ordered after - a write that
 * raced stays there beside the one that raced it. So for every conflicting
 * pair (A, X) that is not ordered, either (A, X) is reported over those
 * bytes, or A happens before an access A' of the same bytes whose pair
 * (A', X) is reported (an earlier read on A's stream, a write that A was
 * ordered before): nothing unordered goes unreported, after a race too. One
 * report per pair of ops, kind and run of adjacent conflicting bytes within
 * an op.
 *
 * Memory: the checker keeps what the unfinished work of a run touched. An
 * access the host has passed (a host sync of its stream or every stream, an
 * event sync, or the host's own access) cannot race with anything issued
 * later; its history is dropped, so a serving loop that syncs each step runs
 * in bounded memory and flat time per access. A run that never syncs keeps
 * every stream's history (see docs/memory.md for the figures).
 *
 * Threads: a checker is used by one thread at a time. Ownership: strings
 * passed in are copied; strings in reports are owned by the checker and
 * valid until it is destroyed.
 */
#ifndef REEL_MEMORY_H
#define REEL_MEMORY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "reel/reel.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct reel_checker reel_checker;

#define REEL_CHECK_HOST UINT64_MAX               /* the host thread, as a stream key */
#define REEL_CHECK_ALL_STREAMS (UINT64_MAX - 1)  /* reel_checker_host_sync: every stream */
#define REEL_CHECK_MAX_STREAMS 31                /* distinct device streams per checker */

typedef enum reel_hazard_kind {
    REEL_HAZARD_RAW = 0,        /* a read of bytes whose last write is unordered with it */
    REEL_HAZARD_WAR,            /* a write over bytes read by an unordered access */
    REEL_HAZARD_WAW,            /* a write over bytes written by an unordered access */
    REEL_HAZARD_USE_AFTER_FREE, /* an access through an allocation already freed */
    REEL_HAZARD_ALIAS,          /* an allocation over bytes of a live allocation */
    REEL_HAZARD_DOUBLE_FREE,    /* a free of an allocation already freed */
    REEL_HAZARD_KIND_COUNT
} reel_hazard_kind;

/* One side of a hazard: an access (or an alloc / free). */
typedef struct reel_hazard_side {
    uint64_t stream;            /* the caller's stream key */
    const char *op;             /* op name ("alloc", "free" for those) */
    const char *alloc;          /* the allocation that produced the bytes, "" if unknown */
    int64_t step;               /* the step label current when it was issued */
    uint64_t seq;               /* issue order of its op in the checker, from 1 */
    bool write;
} reel_hazard_side;

#define REEL_HAZARD_MAGIC REEL_MAGIC('r', 'h', 'a', 'z')
typedef struct reel_hazard {
    size_t size;                /* sizeof(reel_hazard) of the caller's header */
    int version;                /* REEL_VERSION_NUMBER of the caller's header */
    uint32_t magic;             /* REEL_HAZARD_MAGIC */
    reel_hazard_kind kind;
    uint32_t space;
    uint64_t lo, hi;            /* the conflicting bytes [lo, hi) */
    reel_hazard_side first;     /* the earlier access, unordered with... */
    reel_hazard_side second;    /* ...the later one (the one being checked) */
} reel_hazard;
#define REEL_HAZARD_HEAD REEL_STRUCT_HEAD(reel_hazard, REEL_HAZARD_MAGIC)
#define REEL_HAZARD_INIT REEL_STRUCT_INIT(reel_hazard, REEL_HAZARD_MAGIC)
/* The i-th hazard of an array the checker returns: its elements are the
 * library's size (h->size), which a newer library may make larger. */
#define REEL_HAZARD_AT(h, i) ((const reel_hazard *)(const void *)((const char *)(h) + (size_t)(i) * (h)->size))

/* One access an op declares. */
#define REEL_CHECK_ACCESS_MAGIC REEL_MAGIC('r', 'a', 'c', 'c')
typedef struct reel_check_access {
    size_t size;                /* sizeof(reel_check_access) of the caller's header */
    int version;                /* REEL_VERSION_NUMBER of the caller's header */
    uint32_t magic;             /* REEL_CHECK_ACCESS_MAGIC */
    uint32_t space;             /* address space; 0: device pointers */
    uint64_t addr, bytes;       /* the bytes [addr, addr + bytes); bytes 0: nothing */
    bool write;
    const char *alloc;          /* what produced these bytes ("plan 'l0.q' @ 4096"),
                                   copied; NULL: the live allocation of the checker
                                   that holds addr, if any */
} reel_check_access;
#define REEL_CHECK_ACCESS_HEAD REEL_STRUCT_HEAD(reel_check_access, REEL_CHECK_ACCESS_MAGIC)
#define REEL_CHECK_ACCESS_INIT REEL_STRUCT_INIT(reel_check_access, REEL_CHECK_ACCESS_MAGIC)

/* Creates a checker. ctx (may be NULL) receives error messages. */
reel_status reel_checker_create(reel_ctx *ctx, reel_checker **out);
void reel_checker_destroy(reel_checker *c);

/* ---- feeding a plan step (replay or eager) ------------------------------ */

/* Labels what follows with a step number; reports of the step are those
 * returned by reel_checker_end. State (clocks, last accesses) carries over
 * from step to step, so hazards across steps are found too. */
void reel_checker_begin(reel_checker *c, int64_t step);
/* An op on a stream with its accesses. REEL_E_LIMIT past
 * REEL_CHECK_MAX_STREAMS streams; REEL_E_INVALID_ARG for
 * REEL_CHECK_ALL_STREAMS as the stream (here and in every call that takes a
 * stream but reel_checker_host_sync). Hazards are recorded, not returned as
 * a status. */
reel_status reel_checker_op(reel_checker *c, uint64_t stream, const char *op,
                            int nacc, const reel_check_access *acc);
/* Event record on a stream: the event holds the stream's clock. */
reel_status reel_checker_event_record(reel_checker *c, uint64_t event, uint64_t stream);
/* A stream waits on the event's last record. */
reel_status reel_checker_event_wait(reel_checker *c, uint64_t stream, uint64_t event);
/* The host learned that the event's last record completed (event sync, or a
 * query that answered done). */
reel_status reel_checker_event_sync(reel_checker *c, uint64_t event);
/* The host waited for a stream, or for every stream (REEL_CHECK_ALL_STREAMS). */
reel_status reel_checker_host_sync(reel_checker *c, uint64_t stream);
/* Ends the step: *out and *n receive the step's kept hazards (owned by the
 * checker, valid until the next call that adds hazards). Returns how many
 * the step found (kept or not). */
size_t reel_checker_end(reel_checker *c, const reel_hazard **out, size_t *n);

/* ---- standalone programs: alloc / free / use ---------------------------- */

/* An allocation handed out on a stream: bytes [addr, addr + size) of space,
 * described by desc (copied). *id names it for reel_checker_use/free.
 * Overlapping a live allocation is reported (REEL_HAZARD_ALIAS). */
reel_status reel_checker_alloc(reel_checker *c, uint64_t stream, uint32_t space, uint64_t addr,
                               uint64_t size, const char *desc, uint64_t *id);
/* Frees an allocation (on a stream, for the report). Its bytes keep their
 * last accesses: whoever gets them next is checked against those. Freeing
 * it again is reported (REEL_HAZARD_DOUBLE_FREE) and refused with
 * REEL_E_HAZARD and a message. The checker keeps the last 65536 freed
 * allocations; an id freed before those is refused (REEL_E_INVALID_ARG,
 * with a message saying so) by this call and reel_checker_use, not reported. */
reel_status reel_checker_free(reel_checker *c, uint64_t stream, uint64_t id);
/* An op on a stream touching [off, off + size) of an allocation. A freed
 * allocation is reported (REEL_HAZARD_USE_AFTER_FREE). */
reel_status reel_checker_use(reel_checker *c, uint64_t stream, const char *op, uint64_t id,
                             uint64_t off, uint64_t size, bool write);

/* ---- reports ------------------------------------------------------------ */

/* Every hazard recorded so far (at most the first 65536 are kept). */
const reel_hazard *reel_checker_hazards(const reel_checker *c, size_t *n);
/* All hazards found, including those past the kept ones. */
size_t reel_checker_count(const reel_checker *c);
/* "RAW", "WAR", "WAW", "use-after-free", "alias", "double free"; NULL for an
 * unknown value. */
const char *reel_hazard_kind_name(reel_hazard_kind k);
/* One line: kind, bytes, both sides (op, stream, step, allocation). Returns
 * buf (truncated to len). */
char *reel_hazard_format(const reel_hazard *h, char *buf, size_t len);

/* Bytes of host memory the checker holds now (shadow memory, records,
 * allocations, events, names, reports). */
size_t reel_checker_memory(const reel_checker *c);

#ifdef __cplusplus
}
#endif

#endif
