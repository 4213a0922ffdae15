/* Helpers for the host kernel tests: a seeded RNG, tensors whose float64
 * copy holds exactly the values stored in the tensor's dtype, poisoning,
 * tolerance checks, and a launch built by hand (no backend needed). */
#ifndef REEL_TESTS_OPS_HOST_REF_H
#define REEL_TESTS_OPS_HOST_REF_H

#include <stdbool.h>
#include <stdint.h>

#include "ops/host/dtype.h"
#include "ops/host/host_ops.h"

typedef struct trng { uint64_t s; } trng;

uint64_t trng_next(trng *r);
/* Uniform in [lo, hi). */
double trng_uniform(trng *r, double lo, double hi);
/* Uniform integer in [lo, hi]. */
int64_t trng_int(trng *r, int64_t lo, int64_t hi);

/* A tensor of n elements stored as dt, with `ref`, its values as doubles
 * (exactly what dt holds, so the tolerance covers compute and output
 * rounding only). */
typedef struct tbuf {
    reel_dtype dt;
    int64_t n;
    void *p;
    double *ref;
} tbuf;

tbuf tbuf_new(reel_dtype dt, int64_t n);
void tbuf_free(tbuf *t);
/* Random values in [lo, hi), rounded to dt; ref updated. */
void tbuf_random(tbuf *t, trng *r, double lo, double hi);
/* Stores v (rounded to dt) at i and records it in ref. */
void tbuf_set(tbuf *t, int64_t i, double v);
/* Element i as stored, widened to double. */
double tbuf_get(const tbuf *t, int64_t i);
/* Fills every byte with 0xFF (NaN for the float dtypes, -1 for i32). */
void tbuf_poison(tbuf *t);

/* Asserts |got - want| <= atol + rtol |want| for all n elements (NaN must
 * match NaN, infinities must match exactly); names the first bad element. */
void check_close(const char *what, const tbuf *got, const double *want, int64_t n, double atol, double rtol);
/* Relative tolerance for one output rounding to dt plus float32 compute. */
double tol_of(reel_dtype dt);

extern const reel_dtype float_dtypes[3];
const char *dt_name(reel_dtype dt);

/* A launch with the given shapes; in/out pointers set by the test. */
typedef struct tlaunch {
    reel_launch l;
    reel_op_attrs attrs;
    reel_shape in[REEL_OP_MAX_IN];
    reel_shape out[REEL_OP_MAX_OUT];
} tlaunch;

void tlaunch_init(tlaunch *t, reel_op_kind op, int64_t rows);
/* Shape helper: tokens true means dims[0] is the token dim. */
reel_shape tshape(reel_dtype dt, bool tokens, int ndim, int64_t d0, int64_t d1, int64_t d2, int64_t d3);

#endif
