/* Internal (L0): reel's host memory. One wrapper over jemalloc (mallocx on a
 * private arena), or the system allocator when built with
 * -Dallocator=system (sanitizer builds). Every reel host allocation goes
 * through here. */
#ifndef REEL_CORE_HALLOC_H
#define REEL_CORE_HALLOC_H

#include <stdbool.h>
#include <stddef.h>

void *reel_halloc(size_t bytes);
void *reel_hcalloc(size_t n, size_t size);
void *reel_hrealloc(void *p, size_t bytes);
void reel_hfree(void *p);
char *reel_hstrdup(const char *s);
/* Aligned allocation, freed with reel_hfree. align: a power of two. */
void *reel_haligned(size_t align, size_t bytes);

/* Whether the machine can give one host allocation of `bytes` at all: no
 * more than its physical memory, RLIMIT_AS and RLIMIT_DATA. Checked for
 * requests of REEL_HMEM_CHECK_MIN bytes and more (smaller ones always fit),
 * by every allocation above and by the host backend before it asks: pages
 * are committed lazily (jemalloc maps with MAP_NORESERVE), so an allocation
 * the machine cannot back succeeds and the process is killed by the OOM
 * killer when it writes the pages. False: the reason, NUL-terminated, in
 * why (len bytes; why may be NULL). */
#define REEL_HMEM_CHECK_MIN ((size_t)64 << 20)
bool reel_hmem_fits(size_t bytes, char *why, size_t len);

/* Host memory a process can still use now, as the budget of a plan on the
 * host backend: the kernel's MemAvailable (/proc/meminfo; else free
 * physical pages), within a cgroup's memory.max (v2) or limit_in_bytes (v1)
 * less its usage, and within RLIMIT_AS / RLIMIT_DATA; *total: physical
 * memory (or the cgroup's limit, if smaller). *bound (may be NULL): which
 * of those bounds *avail and what *total is ("RLIMIT_DATA; physical
 * memory"), a static string. */
void reel_hmem_info(size_t *avail, size_t *total, const char **bound);

#endif
