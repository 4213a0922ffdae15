/* The checker's reports and the strings they point to. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "core/grow.h"
#include "memory/checker_internal.h"
#include "core/halloc.h"

static size_t reel_chk_strhash(const char *s)
{
    size_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static bool reel_chk_strgrow(reel_checker *c)
{
    size_t cap = c->strcap ? c->strcap * 2 : 256;
    char **t = reel_hcalloc(cap, sizeof *t);
    if (!t)
        return false;
    for (size_t i = 0; i < c->strcap; i++) {
        if (!c->str[i])
            continue;
        size_t h = reel_chk_strhash(c->str[i]) & (cap - 1);
        while (t[h])
            h = (h + 1) & (cap - 1);
        t[h] = c->str[i];
    }
    reel_hfree(c->str);
    c->str = t;
    c->strcap = cap;
    return true;
}

/* Op names and allocation descriptions repeat every step: one copy each. */
const char *reel_chk_intern(reel_checker *c, const char *s)
{
    if (!s)
        s = "";
    if ((c->nstr + 1) * 2 > c->strcap && !reel_chk_strgrow(c))
        return NULL;
    size_t h = reel_chk_strhash(s) & (c->strcap - 1);
    for (; c->str[h]; h = (h + 1) & (c->strcap - 1))
        if (strcmp(c->str[h], s) == 0)
            return c->str[h];
    c->str[h] = reel_hstrdup(s);
    if (!c->str[h])
        return NULL;
    c->nstr++;
    c->strbytes += strlen(s) + 1;
    return c->str[h];
}

static reel_hazard_side reel_chk_side(const reel_checker *c, int32_t r)
{
    const chk_rec *x = &c->rec[r];
    return (reel_hazard_side){ .stream = c->skey[x->stream], .op = x->op, .alloc = x->alloc,
                               .step = x->step, .seq = x->seq, .write = x->write };
}

/* Two reports of one pair of ops and kind. */
static bool reel_chk_same_pair(const reel_hazard *a, const reel_hazard *b)
{
    return a->kind == b->kind && a->space == b->space && a->first.seq == b->first.seq &&
           a->first.alloc == b->first.alloc && a->second.alloc == b->second.alloc;
}

reel_status reel_chk_report(reel_checker *c, reel_hazard_kind k, uint32_t space,
                            uint64_t lo, uint64_t hi, int32_t a, int32_t b)
{
    reel_hazard n = { REEL_HAZARD_HEAD, .kind = k, .space = space, .lo = lo, .hi = hi,
                      .first = reel_chk_side(c, a), .second = reel_chk_side(c, b) };
    for (size_t i = c->op_first; i < c->nrep; i++) {
        reel_hazard *h = &c->rep[i];
        /* the same pair on adjacent or overlapping bytes: one range; bytes
         * between two pieces that never conflicted stay out of it */
        if (reel_chk_same_pair(h, &n) && h->lo <= hi && lo <= h->hi) {
            h->lo = lo < h->lo ? lo : h->lo;
            h->hi = hi > h->hi ? hi : h->hi;
            return REEL_OK;
        }
    }
    c->total++;
    if (c->nrep >= CHK_MAX_REPORTS)
        return REEL_OK;
    if (!reel_grow((void **)&c->rep, &c->caprep, c->nrep + 1, sizeof *c->rep))
        return REEL_E_OOM;
    c->rep[c->nrep++] = n;
    return REEL_OK;
}

void reel_chk_report_close(reel_checker *c)
{
    for (size_t i = c->op_first; i < c->nrep; i++) {
        for (size_t j = i + 1; j < c->nrep;) {
            reel_hazard *h = &c->rep[i], *x = &c->rep[j];
            if (!reel_chk_same_pair(h, x) || h->hi < x->lo || x->hi < h->lo) {
                j++;
                continue;
            }
            h->lo = x->lo < h->lo ? x->lo : h->lo;
            h->hi = x->hi > h->hi ? x->hi : h->hi;
            memmove(x, x + 1, (c->nrep - j - 1) * sizeof *x);
            c->nrep--;
            c->total--;
            j = i + 1;      /* the wider range may now touch an earlier one */
        }
    }
}

const reel_hazard *reel_checker_hazards(const reel_checker *c, size_t *n)
{
    if (n)
        *n = c ? c->nrep : 0;
    return c && c->nrep ? c->rep : NULL;
}

size_t reel_checker_count(const reel_checker *c) { return c ? c->total : 0; }

const char *reel_hazard_kind_name(reel_hazard_kind k)
{
    static const char *const names[] = { "RAW", "WAR", "WAW", "use-after-free", "alias", "double free" };
    return (unsigned)k < REEL_HAZARD_KIND_COUNT ? names[k] : NULL;
}

static void reel_chk_stream_name(uint64_t key, char *buf, size_t len)
{
    if (key == REEL_CHECK_HOST)
        snprintf(buf, len, "host");
    else if (key < 1024)
        snprintf(buf, len, "stream %" PRIu64, key);
    else
        snprintf(buf, len, "stream 0x%" PRIx64, key);
}

char *reel_hazard_format(const reel_hazard *h, char *buf, size_t len)
{
    if (!buf || !len)
        return buf;
    if (!h) {
        snprintf(buf, len, "(no hazard)");
        return buf;
    }
    char s1[32], s2[32];
    reel_chk_stream_name(h->first.stream, s1, sizeof s1);
    reel_chk_stream_name(h->second.stream, s2, sizeof s2);
    const char *kind = reel_hazard_kind_name(h->kind);
    snprintf(buf, len,
             "%s on bytes [0x%" PRIx64 ", 0x%" PRIx64 ") of space %u: '%s' (%s, step %" PRId64
             ", op #%" PRIu64 ", %s '%s') and '%s' (%s, step %" PRId64 ", op #%" PRIu64
             ", %s '%s') are not ordered",
             kind ? kind : "?", h->lo, h->hi, h->space,
             h->first.op, s1, h->first.step, h->first.seq, h->first.write ? "writes" : "reads", h->first.alloc,
             h->second.op, s2, h->second.step, h->second.seq, h->second.write ? "writes" : "reads",
             h->second.alloc);
    return buf;
}
