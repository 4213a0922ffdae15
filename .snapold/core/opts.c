/* Option structs: size and version checks, defaults for what is undefined. */
#include "core/opts.h"

#include <string.h>

typedef struct opts_head {
    size_t size;
    int version;
} opts_head;

reel_status reel_opts_load(void *dst, size_t dst_size, const void *src, size_t first_size, reel_err *err,
                           const char *what, const char *init)
{
    opts_head h;
    memcpy(&h, src, sizeof h);
    if (h.size == 0)
        return reel_seterr(err, REEL_E_VERSION, "%s options were not initialised with %s (size 0)", what, init);
    if (h.size < first_size || h.size < sizeof h)
        return reel_seterr(err, REEL_E_VERSION, "%s options of %zu bytes: not a reel option struct (at least %zu)",
                           what, h.size, first_size);
    if (h.version / 10000 != REEL_VERSION_NUMBER / 10000)
        return reel_seterr(err, REEL_E_VERSION, "%s options from header %d, library is %d (another major version)",
                           what, h.version, REEL_VERSION_NUMBER);
    if (h.size > dst_size)
        return reel_seterr(err, REEL_E_VERSION,
                           "%s options of %zu bytes from header %d: this library (%d) knows %zu bytes of them",
                           what, h.size, h.version, REEL_VERSION_NUMBER, dst_size);
    memcpy(dst, src, h.size);
    return REEL_OK;
}
