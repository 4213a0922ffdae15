/* The error buffer and the internal-invariant hook. */
#include "core/err.h"

#include <stdio.h>
#include <string.h>

void reel_err_init(reel_err *e)
{
    pthread_mutex_init(&e->lock, NULL);
    e->msg[0] = 0;
}

void reel_err_fini(reel_err *e) { pthread_mutex_destroy(&e->lock); }

/* The message of the calling thread's last failed call that had no context
 * to record on (reel_ctx_create, a NULL handle). Only its thread writes or
 * reads it, so it needs no lock. */
static _Thread_local char thread_msg[REEL_ERRMSG_MAX];

void reel_err_copy_thread(char *buf, size_t len)
{
    if (len)
        snprintf(buf, len, "%s", thread_msg);
}

reel_status reel_vseterr(reel_err *e, reel_status st, const char *fmt, va_list ap)
{
    if (!e) {
        vsnprintf(thread_msg, sizeof thread_msg, fmt, ap);
        return st;
    }
    pthread_mutex_lock(&e->lock);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    pthread_mutex_unlock(&e->lock);
    return st;
}

reel_status reel_seterr(reel_err *e, reel_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    reel_vseterr(e, st, fmt, ap);
    va_end(ap);
    return st;
}

void reel_clearerr(reel_err *e)
{
    if (!e)
        return;
    pthread_mutex_lock(&e->lock);
    e->msg[0] = 0;
    pthread_mutex_unlock(&e->lock);
}

void reel_err_copy(reel_err *e, char *buf, size_t len)
{
    if (!len)
        return;
    if (!e) {
        buf[0] = 0;
        return;
    }
    pthread_mutex_lock(&e->lock);
    snprintf(buf, len, "%s", e->msg);
    pthread_mutex_unlock(&e->lock);
}

reel_status reel_err_prefix(reel_err *e, reel_status st, const char *fmt, ...)
{
    if (!e)
        return st;
    char head[REEL_ERRMSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(head, sizeof head, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&e->lock);
    char prev[REEL_ERRMSG_MAX];
    memcpy(prev, e->msg, sizeof prev);
    /* Truncation keeps the head: the detail is cut first. */
    size_t n = strlen(head);
    if (n > sizeof e->msg - 3)
        n = sizeof e->msg - 3;
    memcpy(e->msg, head, n);
    memcpy(e->msg + n, ": ", 2);
    size_t room = sizeof e->msg - n - 2, m = strnlen(prev, sizeof prev);
    if (m > room - 1)
        m = room - 1;
    memcpy(e->msg + n + 2, prev, m);
    e->msg[n + 2 + m] = 0;
    pthread_mutex_unlock(&e->lock);
    return st;
}

/* The replaceable hook: set once by a test or embedding program. */
static reel_internal_hook internal_hook;

void reel_set_internal_hook(reel_internal_hook h) { internal_hook = h; }

reel_status reel_internal_fail(reel_err *e, const char *file, int line, const char *what)
{
    if (internal_hook)
        internal_hook(file, line, what);
    return reel_seterr(e, REEL_E_INTERNAL, "internal error at %s:%d: %s", file, line, what);
}
