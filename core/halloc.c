/* reel's host memory: jemalloc's private arena, or the system allocator. */
#include "core/halloc.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "reel_config.h"

/* libreel.so is built with the system allocator (docs/decisions.md: jemalloc's
 * initial-exec TLS cannot be dlopen'ed); libreel.a keeps the build's choice. */
#if defined(REEL_ALLOC_SYSTEM)
#undef REEL_USE_JEMALLOC
#define REEL_USE_JEMALLOC 0
#endif

static bool limit_below(int resource, size_t bytes, unsigned long long *lim)
{
    struct rlimit rl;
    if (getrlimit(resource, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
        return false;
    *lim = (unsigned long long)rl.rlim_cur;
    return bytes > rl.rlim_cur;
}

bool reel_hmem_fits(size_t bytes, char *why, size_t len)
{
    if (bytes < REEL_HMEM_CHECK_MIN)
        return true;
    char buf[160];
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    unsigned long long lim = 0;
    if (pages > 0 && page > 0 && bytes / (size_t)page >= (size_t)pages)
        snprintf(buf, sizeof buf, "%zu bytes is more than the machine's physical memory (%llu bytes)", bytes,
                 (unsigned long long)pages * (unsigned long long)page);
    else if (limit_below(RLIMIT_AS, bytes, &lim))
        snprintf(buf, sizeof buf, "%zu bytes is more than the process may map (RLIMIT_AS %llu bytes)", bytes, lim);
    else if (limit_below(RLIMIT_DATA, bytes, &lim))
        snprintf(buf, sizeof buf, "%zu bytes is more than the process may allocate (RLIMIT_DATA %llu bytes)", bytes,
                 lim);
    else
        return true;
    if (why && len)
        snprintf(why, len, "%s", buf);
    return false;
}

/* The first number on the line of `key` in a /proc-style file, times
 * scale; 0 if absent. */
static unsigned long long read_value(const char *path, const char *key, unsigned long long scale)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    char line[256];
    unsigned long long v = 0;
    size_t kl = key ? strlen(key) : 0;
    while (fgets(line, sizeof line, f))
        if (!key || strncmp(line, key, kl) == 0) {
            const char *p = line + kl;
            while (*p && (*p < '0' || *p > '9'))
                p++;
            v = strtoull(p, NULL, 10) * scale;
            break;
        }
    fclose(f);
    return v;
}

static void cap(size_t *x, unsigned long long lim, int *by, int which)
{
    if (lim && lim < *x) {
        *x = (size_t)lim;
        *by = which;
    }
}

void reel_hmem_info(size_t *avail, size_t *total, const char **bound)
{
    static const char *const why[2][4] = {
        { "MemAvailable; physical memory", "the cgroup's limit; physical memory", "RLIMIT_AS; physical memory",
          "RLIMIT_DATA; physical memory" },
        { "MemAvailable; the cgroup's limit", "the cgroup's limit less its usage; the cgroup's limit",
          "RLIMIT_AS; the cgroup's limit", "RLIMIT_DATA; the cgroup's limit" },
    };
    int by = 0, cg = 0;
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE), avp = sysconf(_SC_AVPHYS_PAGES);
    size_t t = pages > 0 && page > 0 ? (size_t)pages * (size_t)page : SIZE_MAX;
    unsigned long long ma = read_value("/proc/meminfo", "MemAvailable:", 1024);
    size_t a = ma ? (size_t)ma : avp > 0 && page > 0 ? (size_t)avp * (size_t)page : t;
    /* cgroup v2, then v1: a container's limit, less what it uses */
    unsigned long long lim = read_value("/sys/fs/cgroup/memory.max", NULL, 1);
    unsigned long long used = read_value("/sys/fs/cgroup/memory.current", NULL, 1);
    if (!lim) {
        lim = read_value("/sys/fs/cgroup/memory/memory.limit_in_bytes", NULL, 1);
        used = read_value("/sys/fs/cgroup/memory/memory.usage_in_bytes", NULL, 1);
    }
    if (lim && lim < (unsigned long long)t) {
        t = (size_t)lim;
        cg = 1;
        cap(&a, lim > used ? lim - used : 1, &by, 1);
    }
    struct rlimit rl;
    if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
        cap(&a, rl.rlim_cur, &by, 2);
    if (getrlimit(RLIMIT_DATA, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
        cap(&a, rl.rlim_cur, &by, 3);
    *avail = a;
    *total = t;
    if (bound)
        *bound = why[cg][by];
}

/* Requests the machine can never give fail here, at once, instead of being
 * mapped lazily and killed for when their pages are written. */
static bool too_big(size_t bytes) { return bytes >= REEL_HMEM_CHECK_MIN && !reel_hmem_fits(bytes, NULL, 0); }

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

void *reel_halloc(size_t bytes) { return too_big(bytes) ? NULL : mallocx(bytes ? bytes : 1, reel_flags()); }
void *reel_hcalloc(size_t n, size_t size)
{
    if (size && n > (size_t)-1 / size)
        return NULL;
    size_t total = n * size;
    if (too_big(total))
        return NULL;
    return mallocx(total ? total : 1, reel_flags() | MALLOCX_ZERO);
}
void *reel_hrealloc(void *p, size_t bytes)
{
    if (!p)
        return reel_halloc(bytes);
    if (too_big(bytes))
        return NULL;
    return rallocx(p, bytes ? bytes : 1, reel_flags());
}
void reel_hfree(void *p)
{
    if (p)
        dallocx(p, reel_flags());
}
void *reel_haligned(size_t align, size_t bytes)
{
    if (too_big(bytes))
        return NULL;
    return mallocx(bytes ? bytes : 1, reel_flags() | MALLOCX_ALIGN(align));
}
#else
void *reel_halloc(size_t bytes) { return too_big(bytes) ? NULL : malloc(bytes ? bytes : 1); }
void *reel_hcalloc(size_t n, size_t size)
{
    if (size && n > (size_t)-1 / size)
        return NULL;
    if (too_big(n * size))
        return NULL;
    return calloc(n ? n : 1, size ? size : 1);
}
void *reel_hrealloc(void *p, size_t bytes) { return too_big(bytes) ? NULL : realloc(p, bytes ? bytes : 1); }
void reel_hfree(void *p) { free(p); }
void *reel_haligned(size_t align, size_t bytes)
{
    void *p = NULL;
    if (too_big(bytes))
        return NULL;
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
