/* reel_comm_create_env: a communicator the way torchrun (and most cluster
 * launchers) start ranks, from RANK, WORLD_SIZE, MASTER_ADDR and
 * MASTER_PORT. Rank 0 makes the group's id and hands it out over a small
 * TCP rendezvous on MASTER_ADDR at REEL_RDZV_PORT, else MASTER_PORT + 1
 * (torchrun's own store may hold MASTER_PORT); every rank then joins with
 * reel_comm_create (a host context: as processes, over Unix sockets). */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "backend/comm.h"
#include "backend/ctx.h"
#include "core/abi.h"

#define RDZV_MAGIC 0x7a647672u /* "rvdz" */

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* An integer environment variable in [lo, hi]. */
static reel_status env_int(reel_ctx *ctx, const char *name, long lo, long hi, bool required, long def, long *out)
{
    const char *v = getenv(name);
    if (!v || !*v) {
        if (!required) {
            *out = def;
            return REEL_OK;
        }
        return reel_seterr(&ctx->err, REEL_E_INVALID_ARG, "comm create_env: %s is not set (torchrun sets RANK, "
                           "WORLD_SIZE, MASTER_ADDR and MASTER_PORT)", name);
    }
    char *end = NULL;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || !end || *end || x < lo || x > hi)
        return reel_seterr(&ctx->err, REEL_E_INVALID_ARG, "comm create_env: %s is '%s', not a whole number in %ld..%ld",
                           name, v, lo, hi);
    *out = x;
    return REEL_OK;
}

static bool io_all(int fd, void *buf, size_t n, bool wr)
{
    char *p = buf;
    while (n > 0) {
        ssize_t k = wr ? send(fd, p, n, MSG_NOSIGNAL) : recv(fd, p, n, 0);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return false;
        p += k;
        n -= (size_t)k;
    }
    return true;
}

static reel_status resolve(reel_ctx *ctx, const char *host, long port, struct addrinfo **ai)
{
    char ps[16];
    snprintf(ps, sizeof ps, "%ld", port);
    struct addrinfo hint = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    int e = getaddrinfo(host, ps, &hint, ai);
    if (e != 0)
        return reel_seterr(&ctx->err, REEL_E_INVALID_ARG, "comm create_env: MASTER_ADDR '%s': %s", host,
                           gai_strerror(e));
    return REEL_OK;
}

/* Rank 0: serves the id to world - 1 ranks. */
static reel_status serve_id(reel_ctx *ctx, const char *host, long port, long world, const reel_comm_id *id,
                            int timeout_ms)
{
    struct addrinfo *ai = NULL;
    REEL_TRY(resolve(ctx, host, port, &ai));
    int ls = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    if (ls >= 0)
        setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (ls < 0 || bind(ls, ai->ai_addr, ai->ai_addrlen) != 0 || listen(ls, (int)(world < 128 ? world : 128)) != 0) {
        reel_status st = reel_seterr(&ctx->err, REEL_E_BACKEND, "comm create_env: rank 0: listening on %s:%ld: %s",
                                     host, port, strerror(errno));
        if (ls >= 0)
            close(ls);
        freeaddrinfo(ai);
        return st;
    }
    freeaddrinfo(ai);
    double end = now_ms() + (timeout_ms > 0 ? timeout_ms : 1e12);
    reel_status st = REEL_OK;
    for (long k = 1; k < world && st == REEL_OK; k++) {
        struct pollfd p = {.fd = ls, .events = POLLIN};
        int left = (int)(end - now_ms());
        if (poll(&p, 1, timeout_ms > 0 ? (left > 0 ? left : 0) : -1) <= 0) {
            st = reel_seterr(&ctx->err, REEL_E_BACKEND,
                             "comm create_env: rank 0: timed out after %d ms with %ld of %ld ranks at %s:%ld",
                             timeout_ms, k, world, host, port);
            break;
        }
        int fd = accept4(ls, NULL, NULL, SOCK_CLOEXEC);
        uint32_t hello[3] = {0, 0, 0};
        if (fd < 0 || !io_all(fd, hello, sizeof hello, false) || hello[0] != RDZV_MAGIC || hello[2] != (uint32_t)world) {
            st = reel_seterr(&ctx->err, REEL_E_BACKEND,
                             fd >= 0 && hello[0] == RDZV_MAGIC
                                 ? "comm create_env: rank %u says WORLD_SIZE is %u, rank 0's is %ld"
                                 : "comm create_env: rank 0: a connection that is not a rank of this group (%u, %u, %ld)",
                             hello[1], hello[2], world);
        } else if (!io_all(fd, (void *)id->bytes, sizeof id->bytes, true)) {
            st = reel_seterr(&ctx->err, REEL_E_BACKEND, "comm create_env: rank 0: sending the id to rank %u failed",
                             hello[1]);
        }
        if (fd >= 0)
            close(fd);
    }
    close(ls);
    return st;
}

/* Another rank: the id from rank 0, retrying until it listens. */
static reel_status fetch_id(reel_ctx *ctx, const char *host, long port, long rank, long world, reel_comm_id *id,
                            int timeout_ms)
{
    double end = now_ms() + (timeout_ms > 0 ? timeout_ms : 1e12);
    for (;;) {
        struct addrinfo *ai = NULL;
        REEL_TRY(resolve(ctx, host, port, &ai));
        int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        bool up = fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) == 0;
        freeaddrinfo(ai);
        if (up) {
            uint32_t hello[3] = {RDZV_MAGIC, (uint32_t)rank, (uint32_t)world};
            bool ok = io_all(fd, hello, sizeof hello, true) && io_all(fd, id->bytes, sizeof id->bytes, false);
            close(fd);
            if (ok)
                return REEL_OK;
            return reel_seterr(&ctx->err, REEL_E_BACKEND,
                               "comm create_env: rank %ld: rank 0 at %s:%ld closed without an id (it refused this "
                               "rank: see its message)", rank, host, port);
        }
        if (fd >= 0)
            close(fd);
        if (now_ms() > end)
            return reel_seterr(&ctx->err, REEL_E_BACKEND,
                               "comm create_env: rank %ld: no rank 0 at %s:%ld after %d ms", rank, host, port,
                               timeout_ms);
        usleep(20000);
    }
}

reel_status reel_comm_create_env(reel_ctx *ctx, const reel_comm_opts *opts, reel_comm **out)
{
    if (out)
        *out = NULL;
    if (!ctx || !out)
        return reel_seterr(reel_ctx_err(ctx), REEL_E_INVALID_ARG, "comm create_env: NULL context or out");
    reel_comm_opts o = REEL_COMM_OPTS_INIT;
    if (opts)
        REEL_TRY(reel_struct_load(&o, opts, &reel_abi_comm_opts, &ctx->err));
    int timeout_ms = reel_opt_int(o.timeout_ms, 300000);
    if (timeout_ms < 0)
        return reel_seterr(&ctx->err, REEL_E_INVALID_ARG, "comm create_env: timeout_ms %d is negative", timeout_ms);
    long rank, world, port, rport;
    REEL_TRY(env_int(ctx, "WORLD_SIZE", 1, 4096, true, 0, &world));
    REEL_TRY(env_int(ctx, "RANK", 0, world - 1, true, 0, &rank));
    REEL_TRY(env_int(ctx, "MASTER_PORT", 1, 65534, world > 1, 29500, &port));
    REEL_TRY(env_int(ctx, "REEL_RDZV_PORT", 1, 65535, false, port + 1, &rport));
    const char *host = getenv("MASTER_ADDR");
    if (!host || !*host)
        host = "127.0.0.1";
    reel_comm_id id;
    if (rank == 0) {
        REEL_TRY(reel_comm_unique_id(ctx, &id));
        if (world > 1)
            REEL_TRY(serve_id(ctx, host, rport, world, &id, timeout_ms));
    } else {
        REEL_TRY(fetch_id(ctx, host, rport, rank, world, &id, timeout_ms));
    }
    o.timeout_ms = timeout_ms;
    o.processes = 1; /* the launcher's ranks are processes (NCCL ignores it) */
    return reel_comm_create(ctx, &id, (int)rank, (int)world, &o, out);
}
