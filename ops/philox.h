/* Internal (L2): Philox4x32-10 (Salmon, Moraes, Dror, Shaw, "Parallel
 * random numbers: as easy as 1, 2, 3", SC 2011), the counter-based
 * generator of Random123, cuRAND and PyTorch. Its output is a pure function
 * of a 128-bit counter and a 64-bit key, so a value drawn depends on
 * (key, counter) only: not on the thread, the block, the batch or the order
 * of draws. Plain C with integer arithmetic only, compiled by the C
 * compiler (ops/host) and by nvcc (ops/cuda): both give the same bits.
 * tests/ops/test_host_sample.c checks it against Random123's known-answer
 * vectors (tests/kat_vectors). */
#ifndef REEL_OPS_PHILOX_H
#define REEL_OPS_PHILOX_H

#include <stdint.h>

#ifdef __CUDACC__
#define REEL_PHILOX_FN static __host__ __device__ __forceinline__
#else
#define REEL_PHILOX_FN static inline
#endif

#define REEL_PHILOX_M0 0xD2511F53u /* the round multipliers */
#define REEL_PHILOX_M1 0xCD9E8D57u
#define REEL_PHILOX_W0 0x9E3779B9u /* the key schedule's increments (golden ratio, sqrt(3) - 1) */
#define REEL_PHILOX_W1 0xBB67AE85u

/* One round: two 32x32 -> 64-bit products, the halves crossed and keyed. */
REEL_PHILOX_FN void reel_philox_round(uint32_t c[4], uint32_t k0, uint32_t k1)
{
    const uint64_t p0 = (uint64_t)REEL_PHILOX_M0 * c[0];
    const uint64_t p1 = (uint64_t)REEL_PHILOX_M1 * c[2];
    const uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
    const uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
    const uint32_t n0 = hi1 ^ c[1] ^ k0, n2 = hi0 ^ c[3] ^ k1;
    c[0] = n0;
    c[1] = lo1;
    c[2] = n2;
    c[3] = lo0;
}

/* out = Philox4x32-10(ctr, key): ten rounds, the key bumped between them. */
REEL_PHILOX_FN void reel_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4])
{
    uint32_t c[4] = { ctr[0], ctr[1], ctr[2], ctr[3] };
    uint32_t k0 = key[0], k1 = key[1];
    for (int r = 0; r < 10; r++) {
        if (r > 0) {
            k0 += REEL_PHILOX_W0;
            k1 += REEL_PHILOX_W1;
        }
        reel_philox_round(c, k0, k1);
    }
    out[0] = c[0];
    out[1] = c[1];
    out[2] = c[2];
    out[3] = c[3];
}

/* The 64-bit uniform of a (seed, counter) pair: key = (seed low, seed high),
 * counter = (counter low, counter high, 0, 0); words 0 and 1 of the output,
 * word 1 high. Words 2 and 3 and the counter's upper half are free for
 * other draws of the same step. */
REEL_PHILOX_FN uint64_t reel_philox_u64(uint32_t seed_lo, uint32_t seed_hi, uint32_t ctr_lo, uint32_t ctr_hi)
{
    const uint32_t ctr[4] = { ctr_lo, ctr_hi, 0u, 0u }, key[2] = { seed_lo, seed_hi };
    uint32_t o[4];
    reel_philox4x32_10(ctr, key, o);
    return (uint64_t)o[1] << 32 | o[0];
}

#endif
