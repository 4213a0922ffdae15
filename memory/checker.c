/* The hazard checker: vector clocks per stream (slot 0 is the host), moved
 * by event records and waits and host synchronizations; accesses go to the
 * shadow memory (checker_shadow.c), reports to checker_report.c. */
#include <string.h>

#include "core/abi.h"
#include "memory/checker_internal.h"
#include "core/grow.h"
#include "core/halloc.h"
#include "backend/ctx.h"

reel_status reel_checker_create(reel_ctx *ctx, reel_checker **out)
{
    if (!out)
        return reel_seterr(reel_ctx_err(ctx), REEL_E_INVALID_ARG, "checker_create: out is NULL");
    reel_checker *c = reel_hcalloc(1, sizeof *c);
    *out = c;
    if (!c)
        return reel_seterr(reel_ctx_err(ctx), REEL_E_OOM, "checker_create: out of host memory");
    c->err = reel_ctx_err(ctx);
    c->ns = 1;
    c->skey[0] = REEL_CHECK_HOST;
    return REEL_OK;
}

void reel_checker_destroy(reel_checker *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < c->strcap; i++)
        reel_hfree(c->str[i]);
    reel_hfree(c->str);
    reel_hfree(c->sp);
    reel_hfree(c->ekey);
    reel_hfree(c->eslot);
    reel_hfree(c->evc);
    reel_hfree(c->erec);
    reel_hfree(c->rec);
    reel_hfree(c->remap);
    reel_hfree(c->ent);
    reel_hfree(c->walk);
    reel_hfree(c->conf);
    reel_hfree(c->al);
    reel_hfree(c->live);
    reel_hfree(c->rep);
    reel_hfree(c);
}

/* ---- streams and clocks --------------------------------------------------- */

/* Slots from c->ns up are zero in every clock. */
static void reel_chk_join(int n, uint64_t *dst, const uint64_t *src)
{
    for (int t = 0; t < n; t++)
        if (src[t] > dst[t])
            dst[t] = src[t];
}

/* The slot of a stream key, created on first use; -1 when full. */
static int reel_chk_slot(reel_checker *c, uint64_t key)
{
    for (int s = 0; s < c->ns; s++)
        if (c->skey[s] == key)
            return s;
    if (c->ns == CHK_S)
        return -1;
    c->skey[c->ns] = key;
    return c->ns++;
}

/* A stream about to run something the host issues: it follows everything
 * the host did before. Returns the slot, or -1 past the stream limit and -2
 * for a key that is no stream (message set); reel_chk_refused turns that
 * into the status. */
static int reel_chk_issue(reel_checker *c, uint64_t key, const char *what)
{
    if (key == REEL_CHECK_ALL_STREAMS) {
        reel_seterr(c->err, REEL_E_INVALID_ARG,
                    "checker %s: REEL_CHECK_ALL_STREAMS is not a stream (only host_sync takes it)", what);
        return -2;
    }
    int s = reel_chk_slot(c, key);
    if (s < 0) {
        reel_seterr(c->err, REEL_E_LIMIT, "checker %s: more than %d streams", what, REEL_CHECK_MAX_STREAMS);
        return -1;
    }
    if (s != 0)
        reel_chk_join(c->ns, c->vc[s], c->vc[0]);
    return s;
}

static reel_status reel_chk_refused(int s)
{
    return s == -2 ? REEL_E_INVALID_ARG : s == -3 ? REEL_E_OOM : REEL_E_LIMIT;
}

/* ---- events --------------------------------------------------------------- */

static size_t reel_chk_hash(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return (size_t)k;
}

static bool reel_chk_rehash(reel_checker *c)
{
    size_t cap = c->ecap ? c->ecap * 2 : 64;
    uint64_t *keys = reel_hcalloc(cap, sizeof *keys);
    int64_t *slots = reel_halloc(cap * sizeof *slots);
    if (!keys || !slots) {
        reel_hfree(keys);
        reel_hfree(slots);
        return false;
    }
    for (size_t i = 0; i < cap; i++)
        slots[i] = -1;
    for (size_t i = 0; i < c->ecap; i++) {
        if (c->eslot[i] < 0)
            continue;
        size_t h = reel_chk_hash(c->ekey[i]) & (cap - 1);
        while (slots[h] >= 0)
            h = (h + 1) & (cap - 1);
        keys[h] = c->ekey[i];
        slots[h] = c->eslot[i];
    }
    reel_hfree(c->ekey);
    reel_hfree(c->eslot);
    c->ekey = keys;
    c->eslot = slots;
    c->ecap = cap;
    return true;
}

/* The clock index of an event key; created when create is set. -1: none
 * (or out of memory when create is set). */
static int64_t reel_chk_event(reel_checker *c, uint64_t key, bool create)
{
    if (c->ecap) {
        size_t h = reel_chk_hash(key) & (c->ecap - 1);
        for (; c->eslot[h] >= 0; h = (h + 1) & (c->ecap - 1))
            if (c->ekey[h] == key)
                return c->eslot[h];
    }
    if (!create)
        return -1;
    if ((c->ne + 1) * 2 > c->ecap && !reel_chk_rehash(c))
        return -1;
    size_t cap = c->ne;
    if (!reel_grow((void **)&c->evc, &cap, c->ne + 1, sizeof *c->evc))
        return -1;
    cap = c->ne;
    if (!reel_grow((void **)&c->erec, &cap, c->ne + 1, sizeof *c->erec))
        return -1;
    size_t h = reel_chk_hash(key) & (c->ecap - 1);
    while (c->eslot[h] >= 0)
        h = (h + 1) & (c->ecap - 1);
    c->ekey[h] = key;
    c->eslot[h] = (int64_t)c->ne;
    c->erec[c->ne] = false;
    return (int64_t)c->ne++;
}

reel_status reel_checker_event_record(reel_checker *c, uint64_t event, uint64_t stream)
{
    if (!c)
        return reel_seterr(NULL, REEL_E_INVALID_ARG, "reel_checker_event_record: NULL checker");
    int s = reel_chk_issue(c, stream, "event_record");
    if (s < 0)
        return reel_chk_refused(s);
    int64_t e = reel_chk_event(c, event, true);
    if (e < 0)
        return reel_seterr(c->err, REEL_E_OOM, "checker event_record: out of host memory");
    memcpy(c->evc[e], c->vc[s], sizeof c->evc[e]);
    c->erec[e] = true;
    c->vc[s][s]++;      /* what follows on s is not part of this record */
    return REEL_OK;
}

reel_status reel_checker_event_wait(reel_checker *c, uint64_t stream, uint64_t event)
{
    if (!c)
        return reel_seterr(NULL, REEL_E_INVALID_ARG, "reel_checker_event_wait: NULL checker");
    int s = reel_chk_issue(c, stream, "event_wait");
    if (s < 0)
        return reel_chk_refused(s);
    int64_t e = reel_chk_event(c, event, false);
    if (e >= 0 && c->erec[e])        /* never recorded: complete, orders nothing */
        reel_chk_join(c->ns, c->vc[s], c->evc[e]);
    return REEL_OK;
}

reel_status reel_checker_event_sync(reel_checker *c, uint64_t event)
{
    if (!c)
        return reel_seterr(NULL, REEL_E_INVALID_ARG, "reel_checker_event_sync: NULL checker");
    int64_t e = reel_chk_event(c, event, false);
    if (e >= 0 && c->erec[e])
        reel_chk_join(c->ns, c->vc[0], c->evc[e]);
    return REEL_OK;
}

reel_status reel_checker_host_sync(reel_checker *c, uint64_t stream)
{
    if (!c)
        return reel_seterr(NULL, REEL_E_INVALID_ARG, "reel_checker_host_sync: NULL checker");
    if (stream == REEL_CHECK_ALL_STREAMS) {
        for (int s = 1; s < c->ns; s++)
            reel_chk_join(c->ns, c->vc[0], c->vc[s]);
        return REEL_OK;
    }
    int s = reel_chk_slot(c, stream);
    if (s < 0)
        return reel_seterr(c->err, REEL_E_LIMIT, "checker host_sync: more than %d streams", REEL_CHECK_MAX_STREAMS);
    reel_chk_join(c->ns, c->vc[0], c->vc[s]);
    return REEL_OK;
}

/* ---- ops and accesses ----------------------------------------------------- */

/* A new record for the op in progress on slot s. -1 when out of memory. */
static int32_t reel_chk_rec(reel_checker *c, int s, const char *op, const char *alloc, bool write)
{
    if (c->nrec >= INT32_MAX || !reel_grow((void **)&c->rec, &c->caprec, c->nrec + 1, sizeof *c->rec))
        return -1;
    const char *o = reel_chk_intern(c, op), *a = reel_chk_intern(c, alloc);
    if (!o || !a)
        return -1;
    c->rec[c->nrec] = (chk_rec){ .clock = c->vc[s][s], .seq = c->seq, .step = c->step,
                                 .op = o, .alloc = a, .stream = s, .write = write };
    return (int32_t)c->nrec++;
}

/* Starts an op on a stream key: issue order, a new clock tick and sequence
 * number. Returns the slot or -1 (message set). */
static int reel_chk_start(reel_checker *c, uint64_t stream, const char *what)
{
    int s = reel_chk_issue(c, stream, what);
    if (s < 0)
        return s;
    if (reel_chk_maintain(c) != REEL_OK) {
        reel_seterr(c->err, REEL_E_OOM, "checker %s: out of host memory", what);
        return -3;
    }
    c->vc[s][s]++;
    c->seq++;
    c->op_first = c->nrep;
    return s;
}

/* The description of the live allocation holding addr, or "". */
static const char *reel_chk_lookup(const reel_checker *c, uint32_t space, uint64_t addr)
{
    for (size_t i = 0; i < c->nlive; i++) {
        const chk_alloc *a = &c->al[c->live[i]];
        if (a->space == space && a->lo <= addr && addr < a->hi)
            return a->desc;
    }
    return "";
}

/* acc is strided by acc[0].size (checked by the caller); each element is
 * read over the defaults, so a caller's older struct lacks nothing. */
static reel_status reel_chk_op_at(reel_checker *c, int s, const char *op, int nacc, const reel_check_access *acc)
{
    size_t stride = nacc ? acc->size : 0;
    for (int k = 0; k < nacc; k++) {
        const void *at = (const char *)acc + (size_t)k * stride;
        reel_check_access xa = REEL_CHECK_ACCESS_INIT;
        memcpy(&xa, at, stride);
        const reel_check_access *x = &xa;
        if (x->magic != REEL_CHECK_ACCESS_MAGIC || x->size != stride)
            return reel_seterr(c->err, REEL_E_VERSION, "checker op '%s': access %d was not initialised with "
                               "REEL_CHECK_ACCESS_INIT like access 0", op, k);
        if (!x->bytes)
            continue;
        if (x->addr > UINT64_MAX - x->bytes)
            return reel_seterr(c->err, REEL_E_INVALID_ARG, "checker op '%s': access %d wraps around", op, k);
        const char *alloc = x->alloc ? x->alloc : reel_chk_lookup(c, x->space, x->addr);
        int32_t r = reel_chk_rec(c, s, op, alloc, x->write);
        if (r < 0)
            return reel_seterr(c->err, REEL_E_OOM, "checker op '%s': out of host memory", op);
        reel_status st = reel_chk_access(c, x->space, x->addr, x->addr + x->bytes, r, s);
        if (st != REEL_OK)
            return reel_seterr(c->err, st, "checker op '%s': out of host memory", op);
    }
    reel_chk_report_close(c);
    return REEL_OK;
}

reel_status reel_checker_op(reel_checker *c, uint64_t stream, const char *op, int nacc, const reel_check_access *acc)
{
    if (!c || !op || nacc < 0 || (nacc > 0 && !acc))
        return reel_seterr(c ? c->err : NULL, REEL_E_INVALID_ARG, "checker op: %s",
                           !c ? "checker is NULL" : !op ? "op name is NULL" : "bad access list");
    if (nacc)
        REEL_TRY(reel_struct_check(acc, &reel_abi_check_access, c->err));
    int s = reel_chk_start(c, stream, "op");
    if (s < 0)
        return reel_chk_refused(s);
    return reel_chk_op_at(c, s, op, nacc, acc);
}

size_t reel_checker_memory(const reel_checker *c)
{
    if (!c)
        return 0;
    return sizeof *c + reel_chk_shadow_bytes(c) + c->capal * sizeof *c->al + c->caplive * sizeof *c->live +
           c->caprep * sizeof *c->rep + c->ecap * (sizeof *c->ekey + sizeof *c->eslot) +
           c->ne * (sizeof *c->evc + sizeof *c->erec) + c->strcap * sizeof *c->str + c->strbytes;
}

void reel_checker_begin(reel_checker *c, int64_t step)
{
    if (!c)
        return;
    c->step = step;
    c->step_first = c->nrep;
    c->step_total = c->total;
}

size_t reel_checker_end(reel_checker *c, const reel_hazard **out, size_t *n)
{
    size_t k = c ? c->nrep - c->step_first : 0;
    if (out)
        *out = c && k ? c->rep + c->step_first : NULL;
    if (n)
        *n = k;
    return c ? c->total - c->step_total : 0;
}

/* ---- allocations ---------------------------------------------------------- */

static reel_status reel_chk_alias(reel_checker *c, const chk_alloc *n, int32_t rec)
{
    for (size_t i = 0; i < c->nlive; i++) {
        const chk_alloc *a = &c->al[c->live[i]];
        if (a->space != n->space || a->hi <= n->lo || n->hi <= a->lo)
            continue;
        uint64_t lo = a->lo > n->lo ? a->lo : n->lo, hi = a->hi < n->hi ? a->hi : n->hi;
        REEL_TRY(reel_chk_report(c, REEL_HAZARD_ALIAS, n->space, lo, hi, a->rec, rec));
    }
    return REEL_OK;
}

reel_status reel_checker_alloc(reel_checker *c, uint64_t stream, uint32_t space, uint64_t addr,
                               uint64_t size, const char *desc, uint64_t *id)
{
    if (!c || !id || addr > UINT64_MAX - size)
        return reel_seterr(c ? c->err : NULL, REEL_E_INVALID_ARG, "checker alloc: %s",
                           !c ? "checker is NULL" : !id ? "id is NULL" : "range wraps around");
    int s = reel_chk_start(c, stream, "alloc");
    if (s < 0)
        return reel_chk_refused(s);
    const char *d = reel_chk_intern(c, desc);
    int32_t r = d ? reel_chk_rec(c, s, "alloc", d, true) : -1;
    bool reuse = c->nfreed >= CHK_KEEP_FREED;
    if (r < 0 || (!reuse && (c->nal >= UINT32_MAX - 1 ||
                             !reel_grow((void **)&c->al, &c->capal, c->nal + 1, sizeof *c->al))) ||
        !reel_grow((void **)&c->live, &c->caplive, c->nlive + 1, sizeof *c->live))
        return reel_seterr(c->err, REEL_E_OOM, "checker alloc '%s': out of host memory", desc ? desc : "");
    chk_alloc n = { .space = space, .lo = addr, .hi = addr + size, .desc = d, .rec = r, .free_rec = -1,
                    .live_pos = (uint32_t)c->nlive, .next_freed = UINT32_MAX, .live = true };
    reel_status st = reel_chk_alias(c, &n, r);
    if (st != REEL_OK)
        return reel_seterr(c->err, st, "checker alloc '%s': out of host memory", d);
    size_t i = c->nal;
    if (reuse) {        /* the oldest freed entry: its id becomes stale */
        i = c->freed_head;
        c->freed_head = c->al[i].next_freed;
        c->nfreed--;
        n.gen = c->al[i].gen + 1;
    } else {
        c->nal++;
    }
    c->al[i] = n;
    c->live[c->nlive++] = i;
    *id = ((uint64_t)n.gen << 32) | (uint64_t)(i + 1);
    return REEL_OK;
}

static chk_alloc *reel_chk_alloc_of(reel_checker *c, uint64_t id, const char *what)
{
    if (!c)
        return reel_seterr(NULL, REEL_E_INVALID_ARG, "reel_checker_%s: NULL checker", what), NULL;
    uint64_t i = (id & UINT32_MAX) - 1;
    if ((id & UINT32_MAX) == 0 || i >= c->nal || (id >> 32) > c->al[i].gen) {
        reel_seterr(c->err, REEL_E_INVALID_ARG, "checker %s: no allocation %llu", what, (unsigned long long)id);
        return NULL;
    }
    if ((id >> 32) != c->al[i].gen) {
        reel_seterr(c->err, REEL_E_INVALID_ARG,
                    "checker %s: allocation %llu was freed before the last %d frees; it is not kept", what,
                    (unsigned long long)id, CHK_KEEP_FREED);
        return NULL;
    }
    return &c->al[i];
}

reel_status reel_checker_free(reel_checker *c, uint64_t stream, uint64_t id)
{
    chk_alloc *a = reel_chk_alloc_of(c, id, "free");
    if (!a)
        return REEL_E_INVALID_ARG;
    int s = reel_chk_start(c, stream, "free");
    if (s < 0)
        return reel_chk_refused(s);
    int32_t r = reel_chk_rec(c, s, "free", a->desc, true);
    if (r < 0)
        return reel_seterr(c->err, REEL_E_OOM, "checker free '%s': out of host memory", a->desc);
    if (!a->live) {     /* a double free: reported, and refused */
        uint64_t first = c->rec[a->free_rec].seq;
        REEL_TRY(reel_chk_report(c, REEL_HAZARD_DOUBLE_FREE, a->space, a->lo, a->hi, a->free_rec, r));
        return reel_seterr(c->err, REEL_E_HAZARD, "checker free: '%s' was freed already (op #%llu)", a->desc,
                           (unsigned long long)first);
    }
    a->live = false;
    a->free_rec = r;
    a->rec = -1;        /* only a live allocation is named by an alias report */
    uint32_t i = (uint32_t)(a - c->al);
    if (c->nfreed++)
        c->al[c->freed_tail].next_freed = i;
    else
        c->freed_head = i;
    c->freed_tail = i;
    size_t last = c->live[--c->nlive];
    if (a->live_pos < c->nlive) {
        c->live[a->live_pos] = last;
        c->al[last].live_pos = a->live_pos;
    }
    return REEL_OK;
}

reel_status reel_checker_use(reel_checker *c, uint64_t stream, const char *op, uint64_t id,
                             uint64_t off, uint64_t size, bool write)
{
    chk_alloc *a = reel_chk_alloc_of(c, id, "use");
    if (!a)
        return REEL_E_INVALID_ARG;      /* message set */
    if (!op)
        return reel_seterr(c->err, REEL_E_INVALID_ARG, "checker use: op name is NULL");
    if (off > a->hi - a->lo || size > a->hi - a->lo - off)
        return reel_seterr(c->err, REEL_E_INVALID_ARG, "checker use '%s': [%llu, +%llu) is outside '%s'", op,
                           (unsigned long long)off, (unsigned long long)size, a->desc);
    int s = reel_chk_start(c, stream, "use");
    if (s < 0)
        return reel_chk_refused(s);
    reel_check_access x = { REEL_CHECK_ACCESS_HEAD, .space = a->space, .addr = a->lo + off, .bytes = size,
                            .write = write, .alloc = a->desc };
    if (!a->live) {
        int32_t r = reel_chk_rec(c, s, op, a->desc, write);
        if (r < 0)
            return reel_seterr(c->err, REEL_E_OOM, "checker use '%s': out of host memory", op);
        REEL_TRY(reel_chk_report(c, REEL_HAZARD_USE_AFTER_FREE, a->space, x.addr, x.addr + size, a->free_rec, r));
    }
    return reel_chk_op_at(c, s, op, 1, &x);
}
