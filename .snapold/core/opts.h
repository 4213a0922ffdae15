/* Internal (L0): reading a caller's option struct (the rule is in
 * include/reel/reel.h, "Option structs"). Every public option struct starts
 * with `size_t size; int version;`. */
#ifndef REEL_CORE_OPTS_H
#define REEL_CORE_OPTS_H

#include <stddef.h>

#include "core/err.h"

/* Copies the caller's struct src over dst, which holds the library's
 * defaults (its _INIT), after checking size and version: the first
 * min(src size, dst_size) bytes come from the caller, the rest keep the
 * defaults. first_size is the size of the struct's first sized form: no
 * caller is older. what names the struct and init its macro in messages.
 * REEL_E_VERSION (with a message) when src breaks the rule. */
reel_status reel_opts_load(void *dst, size_t dst_size, const void *src, size_t first_size, reel_err *err,
                           const char *what, const char *init);

/* An option's value, or def when the caller left it undefined. */
static inline int reel_opt_int(int v, int def) { return v == REEL_UNDEF_INT ? def : v; }

#endif
