/* Pinned staging memory: a jemalloc arena over page-locked extents, or the
 * backend's pinned allocations one by one with the system allocator. */
#include "memory/pinned.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/halloc.h"
#include "reel_config.h"

/* libreel.so is built with the system allocator (docs/decisions.md: jemalloc's
 * initial-exec TLS cannot be dlopen'ed); libreel.a keeps the build's choice. */
#if defined(REEL_ALLOC_SYSTEM)
#undef REEL_USE_JEMALLOC
#define REEL_USE_JEMALLOC 0
#endif
#include "core/err.h"

#if REEL_USE_JEMALLOC
#include <jemalloc/jemalloc.h>
#endif

/* One allocation obtained from the backend. */
typedef struct reel_pin_region {
    void *base;             /* what vt->pinned_alloc returned */
    uintptr_t lo;           /* the usable start (aligned) */
    size_t size;
} reel_pin_region;

struct reel_pinned {
#if REEL_USE_JEMALLOC
    extent_hooks_t hooks;   /* first: the hooks find their allocator from it */
    unsigned arena;
    bool have_arena;
#endif
    reel_backend *be;
    pthread_mutex_t mu;
    reel_pin_region *reg;
    size_t nreg, capreg;
    size_t mapped, backend_allocs, live;
};

/* ---- the region table (mu held) ------------------------------------------- */

static bool reel_pin_add(reel_pinned *p, void *base, uintptr_t lo, size_t size)
{
    if (p->nreg == p->capreg) {
        size_t cap = p->capreg ? 2 * p->capreg : 16;
        reel_pin_region *r = reel_hrealloc(p->reg, cap * sizeof *r);
        if (!r)
            return false;
        p->reg = r;
        p->capreg = cap;
    }
    p->reg[p->nreg++] = (reel_pin_region){ base, lo, size };
    p->mapped += size;
    p->backend_allocs++;
    return true;
}

/* The region holding addr, or -1. */
static long reel_pin_find(const reel_pinned *p, uintptr_t addr)
{
    for (size_t i = 0; i < p->nreg; i++)
        if (p->reg[i].lo <= addr && addr - p->reg[i].lo < p->reg[i].size)
            return (long)i;
    return -1;
}

/* size bytes aligned to align from the backend, recorded; NULL on failure. */
static void *reel_pin_map(reel_pinned *p, size_t size, size_t align)
{
    void *base = NULL;
    if (p->be->vt->pinned_alloc(p->be, size, &base) != REEL_OK)
        return NULL;
    uintptr_t lo = (uintptr_t)base;
    if (align > 1 && lo % align) {      /* over-allocate and align up */
        p->be->vt->pinned_free(p->be, base);
        if (size > SIZE_MAX - align || p->be->vt->pinned_alloc(p->be, size + align, &base) != REEL_OK)
            return NULL;
        lo = ((uintptr_t)base + align - 1) & ~(uintptr_t)(align - 1);
    }
    pthread_mutex_lock(&p->mu);
    bool ok = reel_pin_add(p, base, lo, size);
    pthread_mutex_unlock(&p->mu);
    if (!ok) {
        p->be->vt->pinned_free(p->be, base);
        return NULL;
    }
    return (void *)lo;
}

static void reel_pin_unmap_all(reel_pinned *p)
{
    for (size_t i = 0; i < p->nreg; i++)
        p->be->vt->pinned_free(p->be, p->reg[i].base);
    p->nreg = 0;
    p->mapped = 0;
}

/* ---- jemalloc extent hooks ------------------------------------------------ */

#if REEL_USE_JEMALLOC
static void *reel_pin_ext_alloc(extent_hooks_t *h, void *new_addr, size_t size, size_t align, bool *zero,
                                bool *commit, unsigned arena)
{
    (void)arena;
    if (new_addr)           /* cannot place pinned memory at a given address */
        return NULL;
    void *m = reel_pin_map((reel_pinned *)h, size, align);
    if (m && *zero)
        memset(m, 0, size);
    if (m)
        *commit = true;
    return m;
}

/* Pinning is slow: extents are kept (true: "not released") and returned to
 * the backend when the arena is destroyed. */
static bool reel_pin_ext_dalloc(extent_hooks_t *h, void *addr, size_t size, bool committed, unsigned arena)
{
    (void)h, (void)addr, (void)size, (void)committed, (void)arena;
    return true;
}

static void reel_pin_ext_destroy(extent_hooks_t *h, void *addr, size_t size, bool committed, unsigned arena)
{
    (void)h, (void)addr, (void)size, (void)committed, (void)arena;
}

static bool reel_pin_ext_commit(extent_hooks_t *h, void *addr, size_t size, size_t off, size_t len, unsigned arena)
{
    (void)h, (void)addr, (void)size, (void)off, (void)len, (void)arena;
    return false;           /* always committed */
}

static bool reel_pin_ext_split(extent_hooks_t *h, void *addr, size_t size, size_t a, size_t b, bool committed,
                               unsigned arena)
{
    (void)h, (void)addr, (void)size, (void)a, (void)b, (void)committed, (void)arena;
    return false;           /* bookkeeping only: the pages stay where they are */
}

/* Merging across two backend allocations would let one buffer span two
 * pinned registrations; refuse that. */
static bool reel_pin_ext_merge(extent_hooks_t *h, void *a, size_t sa, void *b, size_t sb, bool committed,
                               unsigned arena)
{
    (void)sa, (void)sb, (void)committed, (void)arena;
    reel_pinned *p = (reel_pinned *)h;
    pthread_mutex_lock(&p->mu);
    long ra = reel_pin_find(p, (uintptr_t)a), rb = reel_pin_find(p, (uintptr_t)b);
    pthread_mutex_unlock(&p->mu);
    return ra < 0 || ra != rb;
}

static reel_status reel_pin_arena_create(reel_pinned *p)
{
    p->hooks = (extent_hooks_t){ .alloc = reel_pin_ext_alloc, .dalloc = reel_pin_ext_dalloc,
                                 .destroy = reel_pin_ext_destroy, .commit = reel_pin_ext_commit,
                                 .split = reel_pin_ext_split, .merge = reel_pin_ext_merge };
    extent_hooks_t *hp = &p->hooks;
    size_t sz = sizeof p->arena;
    if (mallctl("arenas.create", &p->arena, &sz, &hp, sizeof hp) != 0)
        return reel_seterr(p->be->err, REEL_E_BACKEND, "pinned staging: jemalloc refused a new arena");
    p->have_arena = true;
    return REEL_OK;
}

static void reel_pin_arena_destroy(reel_pinned *p)
{
    char name[64];
    if (!p->have_arena)
        return;
    snprintf(name, sizeof name, "arena.%u.destroy", p->arena);
    (void)mallctl(name, NULL, NULL, NULL, 0);
}

static int reel_pin_flags(const reel_pinned *p) { return (int)MALLOCX_ARENA(p->arena) | MALLOCX_TCACHE_NONE; }
#endif

/* ---- the API -------------------------------------------------------------- */

reel_status reel_pinned_create(reel_backend *be, reel_pinned **out)
{
    if (!out || !be)
        return reel_seterr(be ? be->err : NULL, REEL_E_INVALID_ARG, "pinned staging create: %s is NULL",
                           out ? "backend" : "out");
    *out = NULL;
    reel_pinned *p = reel_hcalloc(1, sizeof *p);
    if (!p)
        return reel_seterr(be->err, REEL_E_OOM, "pinned staging create: out of host memory");
    p->be = be;
    if (pthread_mutex_init(&p->mu, NULL) != 0) {
        reel_hfree(p);
        return reel_seterr(be->err, REEL_E_BACKEND, "pinned staging create: cannot make a mutex");
    }
#if REEL_USE_JEMALLOC
    reel_status st = reel_pin_arena_create(p);
    if (st != REEL_OK) {
        pthread_mutex_destroy(&p->mu);
        reel_hfree(p);
        return st;
    }
#endif
    *out = p;
    return REEL_OK;
}

void reel_pinned_destroy(reel_pinned *p)
{
    if (!p)
        return;
#if REEL_USE_JEMALLOC
    reel_pin_arena_destroy(p);
#endif
    reel_pin_unmap_all(p);
    pthread_mutex_destroy(&p->mu);
    reel_hfree(p->reg);
    reel_hfree(p);
}

reel_status reel_pinned_alloc(reel_pinned *p, size_t bytes, void **out)
{
    if (!p || !out)
        return reel_seterr(p ? p->be->err : NULL, REEL_E_INVALID_ARG, "pinned alloc: %s is NULL",
                           p ? "out" : "allocator");
#if REEL_USE_JEMALLOC
    *out = mallocx(bytes ? bytes : 1, reel_pin_flags(p));
#else
    *out = reel_pin_map(p, bytes ? bytes : 1, 1);
#endif
    if (!*out)
        return reel_seterr(p->be->err, REEL_E_OOM, "pinned alloc of %zu bytes: no page-locked memory", bytes);
    pthread_mutex_lock(&p->mu);
    p->live++;
    pthread_mutex_unlock(&p->mu);
    return REEL_OK;
}

void reel_pinned_free(reel_pinned *p, void *ptr)
{
    if (!p || !ptr)
        return;
#if REEL_USE_JEMALLOC
    dallocx(ptr, reel_pin_flags(p));
    pthread_mutex_lock(&p->mu);
    p->live--;
    pthread_mutex_unlock(&p->mu);
#else
    pthread_mutex_lock(&p->mu);
    long i = reel_pin_find(p, (uintptr_t)ptr);
    void *base = NULL;
    if (i >= 0) {
        base = p->reg[i].base;
        p->mapped -= p->reg[i].size;
        p->reg[i] = p->reg[--p->nreg];
        p->live--;
    }
    pthread_mutex_unlock(&p->mu);
    if (base)
        p->be->vt->pinned_free(p->be, base);
#endif
}

bool reel_pinned_owns(reel_pinned *p, const void *ptr)
{
    if (!p)
        return false;
    pthread_mutex_lock(&p->mu);
    bool r = reel_pin_find(p, (uintptr_t)ptr) >= 0;
    pthread_mutex_unlock(&p->mu);
    return r;
}

void reel_pinned_get_stats(reel_pinned *p, reel_pinned_stats *out)
{
    if (!out)
        return;
    *out = (reel_pinned_stats){ 0 };
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    out->mapped = p->mapped;
    out->backend_allocs = p->backend_allocs;
    out->live = p->live;
    pthread_mutex_unlock(&p->mu);
#if REEL_USE_JEMALLOC
    out->arena = true;
#endif
}
