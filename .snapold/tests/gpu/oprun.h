/* Helpers for the GPU op tests: one op node described on the host, run
 * through a backend's impl (host reference or CUDA kernel) with outputs
 * poisoned first, and the results compared. */
#ifndef REEL_TESTS_GPU_OPRUN_H
#define REEL_TESTS_GPU_OPRUN_H

#include <stdbool.h>
#include <stdint.h>

#include "ops/op.h"

/* Step metadata as host arrays (copied to the backend per run). */
typedef struct gt_meta {
    int32_t *positions, *slot_mapping, *token_seq; /* [rows] */
    int32_t *context_lens;                         /* [max_seqs] */
    int32_t *block_tables;                         /* [max_seqs * max_blocks] */
    int32_t max_seqs, max_blocks, max_context;
    bool no_attn_cnt; /* no attention counters (meta.attn_cnt NULL): the two-kernel path */
} gt_meta;

typedef struct gt_op {
    reel_op_kind op;
    reel_op_attrs attrs;
    int nin, nout;
    reel_shape in[REEL_OP_MAX_IN], out[REEL_OP_MAX_OUT]; /* dims[0] = rows for token tensors */
    int64_t rows;
    void *data[REEL_OP_MAX_IN];  /* host data in storage format; NULL for an absent input */
    bool inout[REEL_OP_MAX_IN];  /* inputs the op writes (KV caches): compared after the run too */
    bool scratch[REEL_OP_MAX_OUT]; /* outputs that are an impl's workspace: not compared */
    const gt_meta *meta;         /* NULL: none */
} gt_op;

/* What a run produced, copied back to the host. */
typedef struct gt_result {
    void *out[REEL_OP_MAX_OUT];
    void *inout[REEL_OP_MAX_IN];
    int32_t err;
    int64_t cnt_left; /* attention counters not back at zero after the run */
} gt_result;

/* The byte every output is filled with before a run: a value no kernel
 * output here can take (large finite floats, 0x7b7b7b7b for i32). */
#define GT_POISON 0x7b

typedef struct gt_rng { uint64_t s; } gt_rng;
uint64_t gt_next(gt_rng *r);
double gt_uniform(gt_rng *r, double lo, double hi);
int64_t gt_int(gt_rng *r, int64_t lo, int64_t hi);
/* A fresh seed per run (time and pid), printed by failing checks. */
uint64_t gt_fresh_seed(void);

reel_shape gt_shape(reel_dtype dt, bool tokens, int ndim, const int64_t *dims);
/* n random values in [lo, hi) stored as dt (malloc'd). */
void *gt_random(gt_rng *r, reel_dtype dt, int64_t n, double lo, double hi);
double gt_get(const void *p, reel_dtype dt, int64_t i);
void gt_set(void *p, reel_dtype dt, int64_t i, double v);

/* The GPU op tests' fixture: a host and a CUDA context (asserted), and a
 * fresh seed with its generator. gt_close destroys both contexts. */
void gt_open(reel_ctx **host, reel_ctx **cuda, uint64_t *seed, gt_rng *rng);
void gt_close(reel_ctx *host, reel_ctx *cuda);

/* Runs op with impl on be (a stream of its own), synchronously. */
reel_status gt_run(reel_backend *be, const reel_op_impl *impl, const gt_op *op, gt_result *res);
void gt_result_free(gt_result *r);

/* Runs op on the host reference and on every CUDA impl whose can_use
 * accepts it, and asserts (Criterion) that each CUDA result matches: floats
 * within the dtype's tolerance (NaN where the host has NaN), integers and
 * written inputs exactly, the error word equal. Returns how many CUDA impls
 * ran (a test asserts at least one did). */
int gt_check(reel_ctx *host, reel_ctx *cuda, const gt_op *op, uint64_t seed, const char *what);
/* gt_check against one CUDA impl, named; asserts that it accepts the node. */
void gt_check_impl(reel_ctx *host, reel_ctx *cuda, const gt_op *op, const char *impl, uint64_t seed,
                   const char *what);
/* The CUDA impl of that name (asserted to exist). */
const reel_op_impl *gt_cuda_impl(const char *name);
void gt_op_free_data(gt_op *op);

#endif
