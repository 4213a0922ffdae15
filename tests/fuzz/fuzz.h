/* Shared by the fuzz targets: a reader over the input bytes (past the end it
 * yields zeros, so every input is a valid program), the invariant checks,
 * and the sanitizer defaults the targets run under. */
#ifndef REEL_TESTS_FUZZ_FUZZ_H
#define REEL_TESTS_FUZZ_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reel/reel.h"

typedef struct fz {
    const uint8_t *p;
    size_t n, i;
} fz;

static inline uint8_t fz_u8(fz *f) { return f->i < f->n ? f->p[f->i++] : 0; }
static inline int fz_done(const fz *f) { return f->i >= f->n; }
static inline uint32_t fz_u32(fz *f)
{
    uint32_t v = 0;
    for (int k = 0; k < 4; k++)
        v = v << 8 | fz_u8(f);
    return v;
}
/* One of a table's values, picked by the next byte. */
#define FZ_PICK(f, tab) ((tab)[fz_u8(f) % (sizeof(tab) / sizeof((tab)[0]))])

/* An invariant broken: say which and stop as a crash, so libFuzzer keeps the input. */
#define FZ_FAIL(...)                                                   \
    do {                                                               \
        fprintf(stderr, "fuzz invariant broken at %s:%d: ", __FILE__, __LINE__); \
        fprintf(stderr, __VA_ARGS__);                                  \
        fputc('\n', stderr);                                           \
        abort();                                                       \
    } while (0)

/* REEL_FUZZ_VERBOSE set: print every call and its status. */
static inline int fz_verbose(void)
{
    static int verbose = -1;
    if (verbose < 0)
        verbose = getenv("REEL_FUZZ_VERBOSE") != NULL;
    return verbose;
}

/* Every status other than REEL_OK leaves a message (on ctx; on the thread
 * for calls without one). Returns st. */
static inline reel_status fz_check(reel_status st, const reel_ctx *ctx, const char *call)
{
    if ((int)st < 0 || st >= REEL_STATUS_COUNT)
        FZ_FAIL("%s returned %d, not a reel_status", call, (int)st);
    if (fz_verbose())
        fprintf(stderr, "%s -> %s%s%s\n", call, reel_status_str(st), st ? ": " : "",
                st ? reel_ctx_last_error(ctx) : "");
    if (st != REEL_OK) {
        const char *m = reel_ctx_last_error(ctx);
        if (!m || !*m)
            FZ_FAIL("%s returned %s with no message (ctx %s)", call, reel_status_str(st), ctx ? "set" : "NULL");
    }
    return st;
}
#define FZ_CHECK(ctx, call) fz_check((call), (ctx), #call)

/* Huge shapes reach reel's allocator: it must refuse them with REEL_E_OOM,
 * not take the fuzzer's RSS with it, so ASan returns NULL past 256 MiB
 * (a few such buffers stay under the runs' 2 GiB RSS limit). */
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FZ_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define FZ_ASAN 1
#endif
#ifdef FZ_ASAN
#define FZ_ASAN_DEFAULTS                                                              \
    const char *__asan_default_options(void);                                       \
    const char *__asan_default_options(void)                                        \
    {                                                                               \
        return "allocator_may_return_null=1:max_allocation_size_mb=256:detect_leaks=1"; \
    }
#else
#define FZ_ASAN_DEFAULTS
#endif
/* UBSan reports stop the run (a report that only prints is lost in a fuzz
 * log); harmless where UBSan is not linked. */
#define FZ_UBSAN_DEFAULTS                                                  \
    const char *__ubsan_default_options(void);                           \
    const char *__ubsan_default_options(void) { return "halt_on_error=1:print_stacktrace=1"; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#endif
