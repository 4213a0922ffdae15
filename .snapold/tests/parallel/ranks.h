/* A world of host ranks for the parallel tests: one context per rank, one
 * communicator group, and a runner that calls a body on one thread per
 * rank (a rank's calls block on the others, so ranks need threads). Bodies
 * record what they saw; the test asserts on the main thread (Criterion's
 * asserts belong to the test's thread). */
#ifndef REEL_TESTS_PARALLEL_RANKS_H
#define REEL_TESTS_PARALLEL_RANKS_H

#include <pthread.h>
#include <string.h>

#include "reel/reel.h"

#define RK_MAX 8

typedef struct rk_world {
    int n;
    reel_ctx *ctx[RK_MAX];
    reel_comm *comm[RK_MAX];
    /* what each rank's body reports */
    reel_status st[RK_MAX];
    char msg[RK_MAX][512];
} rk_world;

typedef void (*rk_body)(rk_world *w, int rank, void *arg);

/* n host contexts and a group over them (timeout_ms <= 0: the default). */
static inline reel_status rk_open(rk_world *w, int n, int timeout_ms)
{
    memset(w, 0, sizeof *w);
    w->n = n;
    reel_ctx_opts o = REEL_CTX_OPTS_INIT;
    o.backend = REEL_BACKEND_HOST;
    for (int r = 0; r < n; r++) {
        reel_status st = reel_ctx_create(&o, &w->ctx[r]);
        if (st != REEL_OK)
            return st;
    }
    reel_comm_opts co = REEL_COMM_OPTS_INIT;
    if (timeout_ms > 0)
        co.timeout_ms = timeout_ms;
    return reel_comm_create_group(w->ctx, n, &co, w->comm);
}

/* Destroys the communicators (their status in st[]) and the contexts. */
static inline void rk_close(rk_world *w)
{
    for (int r = 0; r < w->n; r++)
        if (w->comm[r])
            w->st[r] = reel_comm_destroy(w->comm[r]);
    for (int r = 0; r < w->n; r++)
        reel_ctx_destroy(w->ctx[r]);
}

typedef struct rk_thread {
    rk_world *w;
    int rank;
    rk_body body;
    void *arg;
} rk_thread;

static inline void *rk_main(void *p)
{
    rk_thread *t = p;
    t->body(t->w, t->rank, t->arg);
    return NULL;
}

/* Runs body on every rank at once and waits for all. */
static inline void rk_run(rk_world *w, rk_body body, void *arg)
{
    pthread_t th[RK_MAX];
    rk_thread t[RK_MAX];
    for (int r = 0; r < w->n; r++) {
        t[r] = (rk_thread){w, r, body, arg};
        pthread_create(&th[r], NULL, rk_main, &t[r]);
    }
    for (int r = 0; r < w->n; r++)
        pthread_join(th[r], NULL);
}

/* Records rank r's status and, on failure, its context's message. */
static inline reel_status rk_note(rk_world *w, int r, reel_status st)
{
    w->st[r] = st;
    if (st != REEL_OK)
        snprintf(w->msg[r], sizeof w->msg[r], "%s", reel_ctx_last_error(w->ctx[r]));
    return st;
}

#endif
