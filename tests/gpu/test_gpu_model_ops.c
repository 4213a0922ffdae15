/* The models layer's ops on the GPU against the host reference kernels
 * (themselves checked against float64 in tests/ops/test_host_model_ops.c):
 * rope_freq (scaled ropes: a table of inverse frequencies and an attention
 * factor) and rmsnorm_heads (Qwen3's q_norm and k_norm), f32/f16/bf16,
 * fresh random inputs per run, outputs poisoned first. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/gpu/oprun.h"

#include "tests/gpu/op_fixture.h"

/* A llama3-like table: theta^(-2i/rd), every third divided by 8. */
static void check_rope_freq_at(reel_dtype dt, int64_t t, int heads, int hd, int rot, int ro, bool il, float scale)
{
    gt_op op = op_new(REEL_OP_ROPE_FREQ, t, 3, 1);
    op.attrs.rope_freq.head_dim = hd;
    op.attrs.rope_freq.rot_dim = rot;
    op.attrs.rope_freq.scale = scale;
    op.attrs.rope_freq.rot_offset = ro;
    op.attrs.rope_freq.interleaved = il;
    op.in[0] = gt_shape(dt, true, 2, (int64_t[]){t, (int64_t)heads * hd});
    op.in[1] = gt_shape(REEL_I32, true, 1, (int64_t[]){t});
    op.in[2] = gt_shape(REEL_F32, false, 1, (int64_t[]){rot / 2});
    op.out[0] = op.in[0];
    op.data[0] = gt_random(&rng, dt, t * heads * hd, -2, 2);
    op.data[1] = gt_random(&rng, REEL_I32, t, 0, 130000);
    float *f = malloc((size_t)(rot / 2) * sizeof *f);
    for (int i = 0; i < rot / 2; i++)
        f[i] = (float)(pow(500000.0, -2.0 * i / rot) / (i % 3 == 0 ? 8.0 : 1.0));
    op.data[2] = f;
    check(&op, "rope_freq");
}

static void check_rope_freq(reel_dtype dt, int64_t t, int heads, int hd, int rot, float scale)
{
    check_rope_freq_at(dt, t, heads, hd, rot, 0, false, scale);
}

Test(gpu_model_ops, rope_freq_matches_host_with_a_factor_and_pass_through_dims, .init = setup, .fini = teardown)
{
    for (int i = 0; i < 3; i++) {
        check_rope_freq(dts[i], 9, 4, 64, 64, 1.0f);
        check_rope_freq(dts[i], 9, 3, 64, 32, 1.0f);
        check_rope_freq(dts[i], 33, 8, 128, 128, 1.1386f); /* yarn's attention factor */
        check_rope_freq_at(dts[i], 9, 16, 192, 64, 128, true, 1.0f); /* DeepSeek's q: last 64 of 192, interleaved */
        check_rope_freq_at(dts[i], 9, 1, 64, 64, 0, true, 1.0f);     /* and its one-head k */
        check_rope_freq_at(dts[i], 5, 3, 48, 16, 8, false, 1.0f);
    }
}

static void check_rmsnorm_heads(reel_dtype dt, int64_t t, int heads, int dh)
{
    gt_op op = op_new(REEL_OP_RMSNORM_HEADS, t, 2, 1);
    op.attrs.rmsnorm.eps = 1e-6f;
    op.in[0] = gt_shape(dt, true, 2, (int64_t[]){t, (int64_t)heads * dh});
    op.in[1] = gt_shape(dt, false, 1, (int64_t[]){dh});
    op.out[0] = op.in[0];
    op.data[0] = gt_random(&rng, dt, t * heads * dh, -3, 3);
    op.data[1] = gt_random(&rng, dt, dh, 0.5, 1.5);
    check(&op, "rmsnorm_heads");
}

Test(gpu_model_ops, rmsnorm_heads_matches_host, .init = setup, .fini = teardown)
{
    for (int i = 0; i < 3; i++) {
        check_rmsnorm_heads(dts[i], 7, 16, 128); /* Qwen3's q: 16 heads of 128 */
        check_rmsnorm_heads(dts[i], 7, 8, 128);  /* and k */
        check_rmsnorm_heads(dts[i], 5, 3, 40);   /* a head dim that is no multiple of 32 */
        check_rmsnorm_heads(dts[i], 1, 1, 256);  /* one row: a block with 7 idle warps */
        check_rmsnorm_heads(dts[i], 65, 9, 64);  /* rows past one block's 8 */
    }
}
