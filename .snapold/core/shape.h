/* Internal (L0): shapes and dtypes, shared by every layer (the graph's
 * tensors, the planner's sizes, the kernels' launches). reel_dtype_size and
 * reel_dtype_name are public (include/reel/reel.h). Included from C and
 * from CUDA C++. */
#ifndef REEL_CORE_SHAPE_H
#define REEL_CORE_SHAPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "reel/reel.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A tensor's shape: dims[0] is the token count when `tokens` is set. */
typedef struct reel_shape {
    reel_dtype dtype;
    int ndim;
    int64_t dims[REEL_MAX_DIMS];
    bool tokens;
} reel_shape;

/* Elements and bytes of a shape with `rows` substituted for the token dim. */
int64_t reel_shape_numel(const reel_shape *s, int64_t rows);
size_t reel_shape_bytes(const reel_shape *s, int64_t rows);
/* Elements per token row (product of dims[1..]); numel for untokened shapes.
 * All three give 0 for an absent shape (ndim 0). */
int64_t reel_shape_row_numel(const reel_shape *s);
/* Writes "[T,256]" (token dim as T), "[512,1024]", or "[]" for an absent
 * shape (ndim 0) into buf; returns buf. */
const char *reel_shape_format(const reel_shape *s, char *buf, size_t len);

/* The kernels' view of a shape in one launch: a leading extent (the
 * launch's rows for a token tensor, dims[0] otherwise, 1 for an absent or
 * scalar shape) times the elements of one leading row (product of
 * dims[1..], whether or not dims[0] is the token dim). */
static inline int64_t reel_shape_lead(const reel_shape *s, int64_t rows)
{
    if (s->ndim == 0)
        return 1;
    return s->tokens ? rows : s->dims[0];
}

static inline int64_t reel_shape_inner(const reel_shape *s)
{
    int64_t n = 1;
    for (int i = 1; i < s->ndim; i++)
        n *= s->dims[i];
    return n;
}

/* The last dimension (1 for a scalar). */
static inline int64_t reel_shape_last(const reel_shape *s) { return s->ndim > 0 ? s->dims[s->ndim - 1] : 1; }

#ifdef __cplusplus
}
#endif

#endif
