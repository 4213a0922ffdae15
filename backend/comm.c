/* Communicators: the public calls of include/reel/comm.h. The id says which
 * implementation a rank joins (host rendezvous or NCCL); the lifecycle
 * rule (plans first) is kept here for both. */
#include <stdio.h>
#include <string.h>

#include "backend/comm.h"
#include "core/halloc.h"
#include "backend/fault.h"
#include "backend/ctx.h"
#include "backend/registry.h"
#include "core/abi.h"
#include "reel_config.h"

static const unsigned char id_magic[4] = {'r', 'e', 'e', 'l'};

#define COMM_TIMEOUT_DEFAULT_MS 300000

static reel_status load_opts(reel_err *err, const reel_comm_opts *opts, int *timeout_ms, bool *processes)
{
    reel_comm_opts o = REEL_COMM_OPTS_INIT;
    if (opts)
        REEL_TRY(reel_struct_load(&o, opts, &reel_abi_comm_opts, err));
    o.timeout_ms = reel_opt_int(o.timeout_ms, COMM_TIMEOUT_DEFAULT_MS);
    if (o.timeout_ms < 0)
        return reel_seterr(err, REEL_E_INVALID_ARG, "comm: timeout_ms %d is negative (0: wait forever)", o.timeout_ms);
    *timeout_ms = o.timeout_ms;
    if (processes)
        *processes = reel_opt_int(o.processes, 0) != 0;
    return REEL_OK;
}

reel_status reel_comm_unique_id(reel_ctx *ctx, reel_comm_id *out)
{
    if (!ctx || !out)
        return reel_seterr(reel_ctx_err(ctx), REEL_E_INVALID_ARG, "comm unique_id: NULL context or id");
    memset(out, 0, sizeof *out);
    memcpy(out->bytes, id_magic, sizeof id_magic);
    const reel_backend_entry *b = reel_backend_of(ctx->kind);
    out->bytes[4] = b->comm_id;
    return b->comm_unique_id(&ctx->err, out->bytes + REEL_COMM_ID_HEAD);
}

reel_status reel_comm_id_to_hex(const reel_comm_id *id, char *buf, size_t len)
{
    static const char digits[] = "0123456789abcdef";
    if (!id || !buf || len < 2 * REEL_COMM_ID_BYTES + 1)
        return reel_seterr(NULL, REEL_E_INVALID_ARG, "comm id to hex: id or buf is NULL, or len %zu below %d", len,
                           2 * REEL_COMM_ID_BYTES + 1);
    for (int i = 0; i < REEL_COMM_ID_BYTES; i++) {
        buf[2 * i] = digits[id->bytes[i] >> 4];
        buf[2 * i + 1] = digits[id->bytes[i] & 15];
    }
    buf[2 * REEL_COMM_ID_BYTES] = '\0';
    return REEL_OK;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

reel_status reel_comm_id_from_hex(const char *hex, reel_comm_id *out)
{
    if (!hex || !out || strlen(hex) != 2 * REEL_COMM_ID_BYTES)
        return reel_seterr(NULL, REEL_E_INVALID_ARG, "comm id from hex: hex or out is NULL, or hex is not %d hex digits",
                           2 * REEL_COMM_ID_BYTES);
    reel_comm_id id;
    for (int i = 0; i < REEL_COMM_ID_BYTES; i++) {
        int hi = hexval(hex[2 * i]), lo = hexval(hex[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return reel_seterr(NULL, REEL_E_INVALID_ARG, "comm id from hex: '%c%c' at %d is not a hex digit pair",
                               hex[2 * i], hex[2 * i + 1], 2 * i);
        id.bytes[i] = (unsigned char)(hi << 4 | lo);
    }
    if (memcmp(id.bytes, id_magic, sizeof id_magic) != 0)
        return reel_seterr(NULL, REEL_E_INVALID_ARG, "comm id from hex: not an id of reel_comm_unique_id");
    *out = id;
    return REEL_OK;
}

reel_status reel_comm_create(reel_ctx *ctx, const reel_comm_id *id, int rank, int nranks,
                             const reel_comm_opts *opts, reel_comm **out)
{
    if (out)
        *out = NULL;
    if (!ctx || !id || !out)
        return reel_seterr(reel_ctx_err(ctx), REEL_E_INVALID_ARG, "comm create: NULL context, id or out");
    if (nranks < 1 || nranks > 4096 || rank < 0 || rank >= nranks)
        return reel_seterr(&ctx->err, REEL_E_INVALID_ARG, "comm create: rank %d of %d: need 0 <= rank < nranks <= 4096",
                           rank, nranks);
    int timeout_ms = 0;
    bool processes = false;
    REEL_TRY(load_opts(&ctx->err, opts, &timeout_ms, &processes));
    if (memcmp(id->bytes, id_magic, sizeof id_magic) != 0)
        return reel_seterr(&ctx->err, REEL_E_INVALID_ARG, "comm create: rank %d: not an id from reel_comm_unique_id",
                           rank);
    const reel_backend_entry *b = reel_backend_of(ctx->kind);
    if (id->bytes[4] != b->comm_id) {
        const reel_backend_entry *of = reel_backend_of_comm_id(id->bytes[4]);
        return reel_seterr(&ctx->err, REEL_E_INVALID_ARG,
                           "comm create: rank %d: the id is for %s communicators, the context is '%s'", rank,
                           of ? of->comm_name : "unknown", b->name);
    }
    reel_status st = processes && ctx->kind == REEL_BACKEND_HOST
                         ? reel_host_sock_join(ctx, id->bytes + REEL_COMM_ID_HEAD, REEL_COMM_ID_BYTES - REEL_COMM_ID_HEAD,
                                               rank, nranks, timeout_ms, out)
                         : b->comm_create(ctx, id->bytes + REEL_COMM_ID_HEAD, rank, nranks, timeout_ms, out);
#if REEL_FAULT_INJECTION
    if (st == REEL_OK)
        reel_fault_wrap_comm(*out);
#endif
    return st;
}

reel_status reel_comm_create_group(reel_ctx *const *ctxs, int n, const reel_comm_opts *opts, reel_comm **comms)
{
    if (!ctxs || !comms || n < 1 || n > 4096)
        return reel_seterr(NULL, REEL_E_INVALID_ARG, "comm create group: ctxs or comms is NULL, or n %d outside 1..4096", n);
    for (int r = 0; r < n; r++)
        comms[r] = NULL;
    for (int r = 0; r < n; r++)
        if (!ctxs[r])
            return reel_seterr(NULL, REEL_E_INVALID_ARG, "comm create group: ctxs[%d] is NULL", r);
    int timeout_ms = 0;
    REEL_TRY(load_opts(&ctxs[0]->err, opts, &timeout_ms, NULL));
    for (int r = 1; r < n; r++)
        if (ctxs[r]->kind != ctxs[0]->kind)
            return reel_seterr(&ctxs[r]->err, REEL_E_INVALID_ARG,
                               "comm create_group: rank %d's context is '%s', rank 0's '%s'", r,
                               reel_backend_name(ctxs[r]->kind), reel_backend_name(ctxs[0]->kind));
    reel_status st = reel_backend_of(ctxs[0]->kind)->comm_group(ctxs, n, timeout_ms, comms);
#if REEL_FAULT_INJECTION
    for (int r = 0; st == REEL_OK && r < n; r++)
        reel_fault_wrap_comm(comms[r]);
#endif
    return st;
}

/* Rank order inside a color: key, then parent rank. */
static bool split_before(const int32_t *ck, int a, int b)
{
    return ck[2 * a + 1] != ck[2 * b + 1] ? ck[2 * a + 1] < ck[2 * b + 1] : a < b;
}

reel_status reel_comm_split(reel_comm *parent, int color, int key, const reel_comm_opts *opts, reel_comm **out)
{
    if (out)
        *out = NULL;
    if (!parent || !out)
        return reel_seterr(parent ? parent->err : NULL, REEL_E_INVALID_ARG, "comm split: NULL communicator or out");
    if (color < REEL_COMM_SPLIT_NONE)
        return reel_seterr(parent->err, REEL_E_INVALID_ARG,
                           "comm split: rank %d: color %d (>= 0, or REEL_COMM_SPLIT_NONE)", parent->rank, color);
    reel_comm_opts o = REEL_COMM_OPTS_INIT;
    if (opts)
        REEL_TRY(reel_struct_load(&o, opts, &reel_abi_comm_opts, parent->err));
    if (o.timeout_ms == REEL_UNDEF_INT)
        o.timeout_ms = parent->timeout_ms;
    if (o.processes == REEL_UNDEF_INT)
        o.processes = parent->processes;
    const int n = parent->nranks, me = parent->rank;
    int32_t mine[2] = {color, key};
    int32_t *ck = reel_hcalloc((size_t)n * 2, sizeof *ck);
    reel_comm_id *ids = reel_hcalloc((size_t)n, sizeof *ids);
    if (!ck || !ids) {
        reel_hfree(ck), reel_hfree(ids);
        return reel_seterr(parent->err, REEL_E_OOM, "comm split: out of host memory");
    }
    reel_status st = parent->vt->agree(parent, mine, ck, sizeof mine);
    /* this rank's place in its color, and the color's leader */
    int rank = 0, size = 0, leader = -1;
    for (int q = 0; st == REEL_OK && q < n; q++) {
        if (ck[2 * q] != color || color < 0)
            continue;
        size++;
        rank += split_before(ck, q, me);
        if (leader < 0 || split_before(ck, q, leader))
            leader = q;
    }
    reel_comm_id id;
    memset(&id, 0, sizeof id);
    if (st == REEL_OK && color >= 0 && leader == me)
        st = reel_comm_unique_id(parent->ctx, &id);
    /* Every rank takes part in the exchange, even after a failure above
     * (a zero id), so that no rank waits for it; a member then finds its
     * leader's id empty and fails too. */
    reel_status ex = parent->vt->agree(parent, &id, ids, sizeof id);
    st = st != REEL_OK ? st : ex;
    if (st == REEL_OK && color >= 0) {
        id = ids[leader];
        if (id.bytes[0] == 0)
            st = reel_seterr(parent->err, REEL_E_BACKEND, "comm split: rank %d: the leader of color %d (rank %d) made "
                             "no id", me, color, leader);
        else
            st = reel_comm_create(parent->ctx, &id, rank, size, &o, out);
    }
    reel_hfree(ck);
    reel_hfree(ids);
    return st;
}

reel_status reel_comm_broadcast(reel_comm *c, void *buf, size_t bytes, int root)
{
    if (!c || (!buf && bytes))
        return reel_seterr(c ? c->err : NULL, REEL_E_INVALID_ARG, "comm broadcast: NULL communicator or buffer");
    if (root < 0 || root >= c->nranks)
        return reel_seterr(c->err, REEL_E_INVALID_ARG, "comm broadcast: rank %d of %d: root %d is not a rank", c->rank,
                           c->nranks, root);
    if (bytes > ((size_t)1 << 30) / (size_t)c->nranks)
        return reel_seterr(c->err, REEL_E_INVALID_ARG, "comm broadcast: %zu bytes over %d ranks is past 1 GiB", bytes,
                           c->nranks);
    char *all = reel_halloc(bytes * (size_t)c->nranks + 1);
    if (!all)
        return reel_seterr(c->err, REEL_E_OOM, "comm broadcast: out of host memory for %zu bytes",
                           bytes * (size_t)c->nranks);
    reel_status st = c->vt->agree(c, buf, all, bytes);
    if (st == REEL_OK)
        memcpy(buf, all + (size_t)root * bytes, bytes);
    reel_hfree(all);
    return st;
}

reel_status reel_comm_destroy(reel_comm *c)
{
    if (!c)
        return REEL_OK;
    int plans = __atomic_load_n(&c->plans, __ATOMIC_ACQUIRE);
    if (plans > 0)
        return reel_seterr(c->err, REEL_E_INVALID_USAGE,
                           "comm destroy: rank %d of %d: %d plan%s still use%s this communicator; destroy %s first",
                           c->rank, c->nranks, plans, plans == 1 ? "" : "s", plans == 1 ? "s" : "",
                           plans == 1 ? "it" : "them");
    c->vt->destroy(c);
    return REEL_OK;
}

int reel_comm_rank(const reel_comm *c) { return c ? c->rank : -1; }
int reel_comm_size(const reel_comm *c) { return c ? c->nranks : -1; }

reel_status reel_comm_async_error(reel_comm *c)
{
    if (!c)
        return reel_seterr(NULL, REEL_E_INVALID_ARG, "reel_comm_async_error: NULL communicator");
    return c->vt->async_error(c);
}

reel_status reel_comm_abort(reel_comm *c)
{
    if (!c)
        return reel_seterr(NULL, REEL_E_INVALID_ARG, "reel_comm_abort: NULL communicator");
    c->vt->abort(c);
    return REEL_OK;
}
