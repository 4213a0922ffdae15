/* Structs that cross the ABI: head checks, defaults for what the caller's
 * older struct lacks, results filled up to the caller's size. */
#include "core/opts.h"

#include <string.h>

reel_status reel_struct_check(const void *src, const reel_struct_kind *k, reel_err *err)
{
    if (!src)
        return reel_seterr(err, REEL_E_INVALID_ARG, "%s: NULL", k->what);
    reel_struct_head h;
    memcpy(&h, src, sizeof h);
    if (h.magic != k->magic)
        return reel_seterr(err, REEL_E_VERSION, "%s: not initialised with %s (magic %#x, size %zu)", k->what, k->init,
                           (unsigned)h.magic, h.size);
    if (h.version / 10000 != REEL_VERSION_NUMBER / 10000)
        return reel_seterr(err, REEL_E_VERSION, "%s (%s) from header %d, library is %d (another major version)",
                           k->what, k->init, h.version, REEL_VERSION_NUMBER);
    if (h.version < REEL_ABI_FIRST_VERSION)
        return reel_seterr(err, REEL_E_VERSION, "%s (%s) from header %d: headers before %d lay structs out without "
                           "the magic; rebuild against this one (%d)", k->what, k->init, h.version,
                           REEL_ABI_FIRST_VERSION, REEL_VERSION_NUMBER);
    if (h.size < k->first_size)
        return reel_seterr(err, REEL_E_VERSION, "%s (%s) of %zu bytes: shorter than its head (%zu bytes)", k->what,
                           k->init, h.size, k->first_size);
    if (h.size > k->lib_size)
        return reel_seterr(err, REEL_E_VERSION, "%s (%s) of %zu bytes from header %d: this library (%d) knows %zu "
                           "bytes", k->what, k->init, h.size, h.version, REEL_VERSION_NUMBER, k->lib_size);
    return REEL_OK;
}

reel_status reel_struct_load(void *dst, const void *src, const reel_struct_kind *k, reel_err *err)
{
    REEL_TRY(reel_struct_check(src, k, err));
    memcpy(dst, src, ((const reel_struct_head *)src)->size);
    return REEL_OK;
}

reel_status reel_struct_fill(void *dst, const void *full, const reel_struct_kind *k, reel_err *err)
{
    REEL_TRY(reel_struct_check(dst, k, err));
    size_t n = ((const reel_struct_head *)dst)->size;
    memcpy((char *)dst + sizeof(reel_struct_head), (const char *)full + sizeof(reel_struct_head),
           n - sizeof(reel_struct_head));
    return REEL_OK;
}
