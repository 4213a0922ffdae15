/* Host reference kernel: embedding lookup. Rows are copied bit for bit when
 * table and output share a dtype; an id outside [0, V) gives a zero row. */
#include <string.h>

#include "ops/host/host_ops.h"
#include "ops/host/kern.h"

void reel_host_embedding(const void *args)
{
    const reel_launch *l = args;
    const reel_shape *ts = &l->in_shape[0];
    reel_dtype td = ts->dtype, od = l->out_shape[0].dtype;
    int64_t v = reel_shape_lead(ts, l->rows);
    int64_t d = reel_shape_inner(ts);
    int64_t n = reel_hk_numel(&l->in_shape[1], l->rows);
    const int32_t *ids = l->in[1];
    size_t row_bytes = (size_t)d * reel_storage_size(td);
    for (int64_t t = 0; t < n; t++) {
        int64_t id = ids[t];
        if (id < 0 || id >= v) {
            reel_hk_zero(l->out[0], od, t * d, d);
        } else if (td == od) {
            memcpy((char *)l->out[0] + (size_t)t * row_bytes, (const char *)l->in[0] + (size_t)id * row_bytes,
                   row_bytes);
        } else {
            for (int64_t i = 0; i < d; i++)
                reel_store(l->out[0], od, t * d + i, reel_load(l->in[0], td, id * d + i));
        }
    }
}
