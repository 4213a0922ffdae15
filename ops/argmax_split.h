/* Internal (L2): how many blocks of a thread-block cluster the CUDA argmax
 * gives one row (ops/cuda/rows.cu), as a pure function of the launch, apart
 * from the CUDA code, so host tests pin it. Plain C, also compiled by nvcc. */
#ifndef REEL_OPS_ARGMAX_SPLIT_H
#define REEL_OPS_ARGMAX_SPLIT_H

#include <stdbool.h>
#include <stdint.h>

/* The least 16-byte packs a row must have to be split: 8 a thread of the
 * one-block kernel's 1024. On the H100 (bench_argmax, 2026-12-06) a 32000-wide
 * bf16 row (4000 packs) took the same time split in 8 (3.90 us) as in one
 * block (3.96), and 64 such rows split in 2 were slower (5.22 against 4.18);
 * a 128256-wide row (16032 packs) took 5.06 us split in 8 against 9.86. */
#define REEL_ARGMAX_SPLIT_MIN_ROW_PACKS 8192
/* The least packs a block of the split scans. */
#define REEL_ARGMAX_SPLIT_MIN_PACKS 1024

/* nrows rows of np 16-byte packs each on a device of sms multiprocessors
 * (clusters: it has thread-block clusters); cap: the most blocks a row
 * (REEL_ARGMAX_CLUSTER; at most 8, the portable cluster size). The most
 * blocks, a power of two up to cap, whose rows x blocks fit one block an
 * SM with at least REEL_ARGMAX_SPLIT_MIN_PACKS packs a block; 1 (one block
 * a row) without clusters, with cap < 2, for a row under
 * REEL_ARGMAX_SPLIT_MIN_ROW_PACKS, or where no split fits. It depends on the shape
 * and the device only, so a replay launches what the eager step did. */
static inline int reel_argmax_split(int64_t nrows, int64_t np, int sms, bool clusters, int cap)
{
    if (!clusters || cap < 2 || nrows < 1 || sms < 1 || np < REEL_ARGMAX_SPLIT_MIN_ROW_PACKS)
        return 1;
    int c = 1;
    while (c * 2 <= cap && c < 8)
        c *= 2;
    while (c > 1 && (nrows * c > (int64_t)sms || np < (int64_t)c * REEL_ARGMAX_SPLIT_MIN_PACKS))
        c >>= 1;
    return c;
}

#endif
