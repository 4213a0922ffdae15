/* The fixture of the gpu op suites (test_gpu_ops.c, test_gpu_model_ops.c, test_gpu_moe.c):
 * a host and a CUDA context, the run's seed, and a node run on both and
 * compared (tests/gpu/oprun.h). Included once per test program. */
#ifndef REEL_TESTS_GPU_OP_FIXTURE_H
#define REEL_TESTS_GPU_OP_FIXTURE_H

#include <string.h>

#include "tests/gpu/oprun.h"

static reel_ctx *hctx, *cctx;
static uint64_t seed;
static gt_rng rng;

static void setup(void)
{
    gt_open(&hctx, &cctx, &seed, &rng);
}

static void teardown(void)
{
    gt_close(hctx, cctx);
}

static const reel_dtype dts[3] = {REEL_F32, REEL_F16, REEL_BF16};

static gt_op op_new(reel_op_kind k, int64_t rows, int nin, int nout)
{
    gt_op op;
    memset(&op, 0, sizeof op);
    op.op = k;
    op.rows = rows;
    op.nin = nin;
    op.nout = nout;
    return op;
}

/* Runs the node and asserts at least one CUDA impl took it (inline: a
 * suite that compares with its own tolerances, test_gpu_moe.c, leaves it
 * unused). */
static inline void check(gt_op *op, const char *what)
{
    int ran = gt_check(hctx, cctx, op, seed, what);
    cr_assert_gt(ran, 0, "%s: no CUDA impl accepted the node", what);
    gt_op_free_data(op);
}

#endif
