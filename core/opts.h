/* Internal (L0): reading and filling the caller's structs that cross the ABI
 * (the rule is in include/reel/reel.h: a head of size, version and magic). */
#ifndef REEL_CORE_OPTS_H
#define REEL_CORE_OPTS_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

/* The head every such struct starts with. */
typedef struct reel_struct_head {
    size_t size;
    int version;
    uint32_t magic;
} reel_struct_head;

/* The first header whose structs carry the magic (0.2): older ones are
 * refused, their layout differs. */
#define REEL_ABI_FIRST_VERSION 200

/* What a refusal names: the struct ("compile options") and its _INIT. */
typedef struct reel_struct_kind {
    const char *what, *init;
    uint32_t magic;
    size_t first_size, lib_size;
} reel_struct_kind;

/* Checks src's head against k: REEL_E_VERSION (with a message in err) for a
 * struct not initialised (magic), another major version or one before
 * REEL_ABI_FIRST_VERSION, a size below the first form or above the
 * library's. REEL_E_INVALID_ARG for NULL. */
reel_status reel_struct_check(const void *src, const reel_struct_kind *k, reel_err *err);
/* Copies the caller's struct src over dst (which holds the library's
 * defaults) after the check: the caller's bytes, then the defaults. */
reel_status reel_struct_load(void *dst, const void *src, const reel_struct_kind *k, reel_err *err);
/* Fills the caller's result struct dst from the library's full one, up to
 * dst's size, keeping dst's head, after the check. */
reel_status reel_struct_fill(void *dst, const void *full, const reel_struct_kind *k, reel_err *err);

/* An option's value, or def when the caller left it undefined. */
static inline int reel_opt_int(int v, int def) { return v == REEL_UNDEF_INT ? def : v; }

#endif
