/* The checker's shadow memory: per address space, a sorted list of byte
 * ranges with their access history. An access splits the ranges it touches
 * at its bounds, checks each piece against the last write and the reads
 * since, records itself, and merges neighbours whose history became equal. */
#include <string.h>

#include "core/grow.h"
#include "memory/checker_internal.h"
#include "core/err.h"

static chk_space *reel_chk_space(reel_checker *c, uint32_t id)
{
    for (size_t i = 0; i < c->nsp; i++)
        if (c->sp[i].id == id)
            return &c->sp[i];
    if (!reel_grow((void **)&c->sp, &c->capsp, c->nsp + 1, sizeof *c->sp))
        return NULL;
    chk_space *s = &c->sp[c->nsp++];
    memset(s, 0, sizeof *s);
    s->id = id;
    return s;
}

/* The first segment whose end lies past addr. */
static size_t reel_chk_find(const chk_space *s, uint64_t addr)
{
    size_t lo = 0, hi = s->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (s->seg[mid].hi <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Inserts seg at position i. */
static bool reel_chk_insert(chk_space *s, size_t i, const chk_seg *seg)
{
    if (!reel_grow((void **)&s->seg, &s->cap, s->n + 1, sizeof *s->seg))
        return false;
    memmove(s->seg + i + 1, s->seg + i, (s->n - i) * sizeof *s->seg);
    s->seg[i] = *seg;
    s->n++;
    return true;
}

/* Splits segment i at addr (strictly inside it): i keeps [lo, addr). */
static bool reel_chk_split(chk_space *s, size_t i, uint64_t addr)
{
    chk_seg right = s->seg[i];
    right.lo = addr;
    s->seg[i].hi = addr;
    return reel_chk_insert(s, i + 1, &right);
}

static void reel_chk_empty(chk_seg *g, uint64_t lo, uint64_t hi)
{
    g->lo = lo;
    g->hi = hi;
    g->w = -1;
    for (int t = 0; t < CHK_S; t++)
        g->r[t] = -1;
}

static reel_status reel_chk_piece(reel_checker *c, uint32_t space, chk_seg *g, int64_t rec, int s)
{
    const chk_rec *me = &c->rec[rec];
    uint64_t lo = g->lo, hi = g->hi;
    if (g->w >= 0 && !reel_chk_before(c, &c->rec[g->w], s))
        REEL_TRY(reel_chk_report(c, me->write ? REEL_HAZARD_WAW : REEL_HAZARD_RAW, space, lo, hi, g->w, rec));
    if (!me->write) {
        g->r[s] = rec;
        return REEL_OK;
    }
    for (int t = 0; t < CHK_S; t++) {
        if (g->r[t] >= 0 && !reel_chk_before(c, &c->rec[g->r[t]], s))
            REEL_TRY(reel_chk_report(c, REEL_HAZARD_WAR, space, lo, hi, g->r[t], rec));
        g->r[t] = -1;
    }
    g->w = rec;
    return REEL_OK;
}

static bool reel_chk_same(const chk_seg *a, const chk_seg *b)
{
    return a->hi == b->lo && a->w == b->w && memcmp(a->r, b->r, sizeof a->r) == 0;
}

/* Merges equal neighbours among segments [from, to]. */
static void reel_chk_merge(chk_space *s, size_t from, size_t to)
{
    if (to >= s->n)
        to = s->n ? s->n - 1 : 0;
    size_t i = from;
    while (i < to && i + 1 < s->n) {
        if (reel_chk_same(&s->seg[i], &s->seg[i + 1])) {
            s->seg[i].hi = s->seg[i + 1].hi;
            memmove(s->seg + i + 1, s->seg + i + 2, (s->n - i - 2) * sizeof *s->seg);
            s->n--;
            to--;
        } else {
            i++;
        }
    }
}

reel_status reel_chk_access(reel_checker *c, uint32_t space, uint64_t lo, uint64_t hi, int64_t rec, int s)
{
    chk_space *sp = reel_chk_space(c, space);
    if (!sp)
        return REEL_E_OOM;
    size_t i = reel_chk_find(sp, lo), first = i;
    uint64_t pos = lo;
    while (pos < hi) {
        if (i < sp->n && sp->seg[i].lo <= pos) {
            if (sp->seg[i].lo < pos) {
                if (!reel_chk_split(sp, i, pos))
                    return REEL_E_OOM;
                i++;
            }
        } else {
            chk_seg gap;
            uint64_t end = i < sp->n && sp->seg[i].lo < hi ? sp->seg[i].lo : hi;
            reel_chk_empty(&gap, pos, end);
            if (!reel_chk_insert(sp, i, &gap))
                return REEL_E_OOM;
        }
        if (sp->seg[i].hi > hi && !reel_chk_split(sp, i, hi))
            return REEL_E_OOM;
        REEL_TRY(reel_chk_piece(c, space, &sp->seg[i], rec, s));
        pos = sp->seg[i].hi;
        i++;
    }
    reel_chk_merge(sp, first ? first - 1 : 0, i);
    return REEL_OK;
}
