/* Internal (L0): reel's host memory. One wrapper over jemalloc (mallocx on a
 * private arena), or the system allocator when built with
 * -Dallocator=system (sanitizer builds). Every reel host allocation goes
 * through here. */
#ifndef REEL_CORE_HALLOC_H
#define REEL_CORE_HALLOC_H

#include <stddef.h>

void *reel_halloc(size_t bytes);
void *reel_hcalloc(size_t n, size_t size);
void *reel_hrealloc(void *p, size_t bytes);
void reel_hfree(void *p);
char *reel_hstrdup(const char *s);
/* Aligned allocation, freed with reel_hfree. align: a power of two. */
void *reel_haligned(size_t align, size_t bytes);

#endif
