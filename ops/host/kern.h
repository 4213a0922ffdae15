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

/* Row t of x ([rows, d], dtype xd) RMS-normalized with weight w [d] into
 * out: the host's one rmsnorm formula (ops/host/rows.c), shared by rmsnorm,
 * add_rmsnorm and rmsnorm_heads. Reads the row before writing it. */
void reel_hk_rms_row(const void *x, reel_dtype xd, const void *w, reel_dtype wd, void *out, reel_dtype od,
                     int64_t t, int64_t d, float eps);

/* Rotates one head of hd elements of x (from element xat) into out (from
 * oat): neox pairs (i, i + half) for i < half by pos * theta^(-2i/(2 half)),
 * the rest copied. The one rope formula of the host backend (ops/host/rope.c):
 * the rope op and paged attention's fused rope share it. Reads each pair
 * before writing it, so out may alias x. */
void reel_hk_rope_head(const void *x, reel_dtype xd, int64_t xat, void *out, reel_dtype od, int64_t oat, int64_t hd,
                       int64_t half, double theta, int32_t pos);

#endif
