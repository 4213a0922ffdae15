/* reel's host memory: jemalloc's private arena, or the system allocator. */
#include "core/halloc.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "reel_config.h"

#if REEL_USE_JEMALLOC
#include <jemalloc/jemalloc.h>

/* The arena index is created once and never changes (like the op registry,
 * state filled once at startup). 0 means "use the default arena". */
static unsigned reel_arena;
static pthread_once_t reel_arena_once = PTHREAD_ONCE_INIT;

static void reel_arena_init(void)
{
    unsigned idx = 0;
    size_t sz = sizeof idx;
    if (mallctl("arenas.create", &idx, &sz, NULL, 0) == 0)
        reel_arena = idx;
}

static int reel_flags(void)
{
    pthread_once(&reel_arena_once, reel_arena_init);
    return reel_arena ? (int)MALLOCX_ARENA(reel_arena) | MALLOCX_TCACHE_NONE : 0;
}

void *reel_halloc(size_t bytes) { return mallocx(bytes ? bytes : 1, reel_flags()); }
void *reel_hcalloc(size_t n, size_t size)
{
    if (size && n > (size_t)-1 / size)
        return NULL;
    size_t total = n * size;
    return mallocx(total ? total : 1, reel_flags() | MALLOCX_ZERO);
}
void *reel_hrealloc(void *p, size_t bytes)
{
    if (!p)
        return reel_halloc(bytes);
    return rallocx(p, bytes ? bytes : 1, reel_flags());
}
void reel_hfree(void *p)
{
    if (p)
        dallocx(p, reel_flags());
}
void *reel_haligned(size_t align, size_t bytes)
{
    return mallocx(bytes ? bytes : 1, reel_flags() | MALLOCX_ALIGN(align));
}
#else
void *reel_halloc(size_t bytes) { return malloc(bytes ? bytes : 1); }
void *reel_hcalloc(size_t n, size_t size) { return calloc(n ? n : 1, size ? size : 1); }
void *reel_hrealloc(void *p, size_t bytes) { return realloc(p, bytes ? bytes : 1); }
void reel_hfree(void *p) { free(p); }
void *reel_haligned(size_t align, size_t bytes)
{
    void *p = NULL;
    if (align < sizeof(void *))
        align = sizeof(void *);
    return posix_memalign(&p, align, bytes ? bytes : 1) == 0 ? p : NULL;
}
#endif

char *reel_hstrdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = reel_halloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}
