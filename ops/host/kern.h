/* Internal (L2): helpers shared by the host reference kernels. A kernel
 * trusts its launch (the schema and registry checked shapes and dtypes); it
 * only guards what step metadata can get wrong, by reporting REEL_E_LIMIT
 * into the metadata's err_word instead of reading out of bounds. */
#ifndef REEL_OPS_HOST_KERN_H
#define REEL_OPS_HOST_KERN_H

#include <math.h>
#include <stdint.h>

#include "ops/host/dtype.h"
#include "ops/op.h"

/* The launch view of a shape (core/shape.h). */
static inline int64_t reel_hk_numel(const reel_shape *s, int64_t rows)
{
    return reel_shape_lead(s, rows) * reel_shape_inner(s);
}

/* Reports a metadata limit breach to the step's error word. Several stream
 * threads may report at once; any of them wins, all write the same code. */
static inline void reel_hk_report(const reel_meta_view *m, int32_t status)
{
    if (m && m->err_word)
        __atomic_store_n(m->err_word, status, __ATOMIC_RELAXED);
}

/* Writes n zeros (of dtype dt) from element `at`. */
static inline void reel_hk_zero(void *p, reel_dtype dt, int64_t at, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        reel_store(p, dt, at + i, 0.0f);
}

#endif
