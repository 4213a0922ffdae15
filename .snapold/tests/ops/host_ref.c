/* Helpers for the host kernel tests (see host_ref.h). */
#include "tests/ops/host_ref.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

const reel_dtype float_dtypes[3] = { REEL_F32, REEL_F16, REEL_BF16 };

uint64_t trng_next(trng *r)
{
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull); /* splitmix64 */
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

double trng_uniform(trng *r, double lo, double hi)
{
    return lo + (hi - lo) * ((double)(trng_next(r) >> 11) * 0x1p-53);
}

int64_t trng_int(trng *r, int64_t lo, int64_t hi)
{
    return lo + (int64_t)(trng_next(r) % (uint64_t)(hi - lo + 1));
}

tbuf tbuf_new(reel_dtype dt, int64_t n)
{
    size_t es = dt == REEL_I32 ? 4 : reel_storage_size(dt);
    tbuf t = { .dt = dt, .n = n, .p = calloc((size_t)(n > 0 ? n : 1), es),
               .ref = calloc((size_t)(n > 0 ? n : 1), sizeof(double)) };
    cr_assert(t.p && t.ref, "out of memory");
    return t;
}

void tbuf_free(tbuf *t)
{
    free(t->p);
    free(t->ref);
    t->p = NULL;
    t->ref = NULL;
}

void tbuf_set(tbuf *t, int64_t i, double v)
{
    if (t->dt == REEL_I32) {
        ((int32_t *)t->p)[i] = (int32_t)v;
    } else {
        reel_store(t->p, t->dt, i, (float)v);
    }
    t->ref[i] = tbuf_get(t, i);
}

double tbuf_get(const tbuf *t, int64_t i)
{
    if (t->dt == REEL_I32)
        return ((const int32_t *)t->p)[i];
    return reel_load(t->p, t->dt, i);
}

void tbuf_random(tbuf *t, trng *r, double lo, double hi)
{
    for (int64_t i = 0; i < t->n; i++)
        tbuf_set(t, i, trng_uniform(r, lo, hi));
}

void tbuf_poison(tbuf *t)
{
    size_t es = t->dt == REEL_I32 ? 4 : reel_storage_size(t->dt);
    memset(t->p, 0xFF, (size_t)t->n * es);
}

const char *dt_name(reel_dtype dt)
{
    static const char *const names[] = { "f32", "f16", "bf16", "i32" };
    return (int)dt >= 0 && dt < REEL_DTYPE_COUNT ? names[dt] : "?";
}

double tol_of(reel_dtype dt)
{
    switch (dt) {
    case REEL_F16: return 1.5e-3;  /* half an ulp is 2^-11 = 4.9e-4 */
    case REEL_BF16: return 1.0e-2; /* half an ulp is 2^-8 = 3.9e-3 */
    default: return 2e-5;
    }
}

void check_close(const char *what, const tbuf *got, const double *want, int64_t n, double atol, double rtol)
{
    for (int64_t i = 0; i < n; i++) {
        double g = tbuf_get(got, i), w = want[i];
        if (isnan(w)) {
            cr_assert(isnan(g), "%s [%s]: element %lld is %.9g, want NaN", what, dt_name(got->dt),
                      (long long)i, g);
            continue;
        }
        if (isinf(w)) {
            cr_assert(g == w, "%s [%s]: element %lld is %.9g, want %g", what, dt_name(got->dt),
                      (long long)i, g, w);
            continue;
        }
        cr_assert(fabs(g - w) <= atol + rtol * fabs(w), "%s [%s]: element %lld is %.9g, want %.9g (atol %g rtol %g)",
                  what, dt_name(got->dt), (long long)i, g, w, atol, rtol);
    }
}

void tlaunch_init(tlaunch *t, reel_op_kind op, int64_t rows)
{
    memset(t, 0, sizeof *t);
    t->l.op = op;
    t->l.attrs = &t->attrs;
    t->l.in_shape = t->in;
    t->l.out_shape = t->out;
    t->l.rows = rows;
}

reel_shape tshape(reel_dtype dt, bool tokens, int ndim, int64_t d0, int64_t d1, int64_t d2, int64_t d3)
{
    reel_shape s = { .dtype = dt, .ndim = ndim, .tokens = tokens, .dims = { d0, d1, d2, d3 } };
    if (tokens)
        s.dims[0] = REEL_DIM_TOKENS;
    for (int i = ndim; i < REEL_MAX_DIMS; i++)
        s.dims[i] = 0;
    return s;
}
