/* Internal (L0): the error buffer every layer writes into, and the helpers
 * that fill it. A reel_err is owned by a context (backend/ctx.h); backends,
 * memory and ops hold a pointer to it and never see struct reel_ctx.
 * Included from C and from CUDA C++. */
#ifndef REEL_CORE_ERR_H
#define REEL_CORE_ERR_H

#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>

#include "reel/reel.h"

#ifdef __cplusplus
extern "C" {
#endif

#define REEL_ERRMSG_MAX 512

/* The last error's message. Writers and readers take the lock: a context may
 * be used from several threads. */
typedef struct reel_err {
    pthread_mutex_t lock;
    char msg[REEL_ERRMSG_MAX];
} reel_err;

void reel_err_init(reel_err *e);
void reel_err_fini(reel_err *e);

/* Records the message and returns st (so call sites can
 * `return reel_seterr(err, REEL_E_SHAPE, "...")`). e may be NULL: a call
 * with no context to record on; the message goes to the calling thread's
 * last error (reel_err_copy_thread, public as reel_ctx_last_error(NULL)). */
reel_status reel_seterr(reel_err *e, reel_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
reel_status reel_vseterr(reel_err *e, reel_status st, const char *fmt, va_list ap);
void reel_clearerr(reel_err *e);
/* Copies the message into buf (len bytes, NUL-terminated) under the lock;
 * "" when e is NULL. */
void reel_err_copy(reel_err *e, char *buf, size_t len);
/* Copies the calling thread's last message recorded with e NULL ("" if
 * none) into buf. */
void reel_err_copy_thread(char *buf, size_t len);
/* Puts "<fmt ...>: " in front of the message already recorded (the detail a
 * lower layer gave) and returns st. */
reel_status reel_err_prefix(reel_err *e, reel_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Internal invariant failures go through one replaceable hook (process
 * wide, set once by a test or an embedding program before any context is
 * used); the failure is recorded as REEL_E_INTERNAL and never aborts. */
typedef void (*reel_internal_hook)(const char *file, int line, const char *what);
void reel_set_internal_hook(reel_internal_hook h);
reel_status reel_internal_fail(reel_err *e, const char *file, int line, const char *what);
#define REEL_INTERNAL(err, what) reel_internal_fail((err), __FILE__, __LINE__, (what))
/* Checks an invariant of reel itself: on failure, returns REEL_E_INTERNAL
 * through the hook from the enclosing function. */
#define REEL_INVARIANT(err, cond)                              \
    do {                                                       \
        if (!(cond))                                           \
            return REEL_INTERNAL((err), "invariant: " #cond);  \
    } while (0)

/* Propagates a failing status. */
#define REEL_TRY(expr)                               \
    do {                                             \
        reel_status reel_try_st_ = (expr);           \
        if (reel_try_st_ != REEL_OK)                 \
            return reel_try_st_;                     \
    } while (0)

#ifdef __cplusplus
}
#endif

#endif
