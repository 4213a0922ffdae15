/* The split-KV decode's chunk count and the prefill's key split
 * (ops/attn_chunks.h): the choices the H200 measurements stand on
 * (docs/attention.md, "The chunking rule", "The prefill"), their bounds,
 * and the model the chunk count minimizes. Pure host arithmetic: the CUDA
 * launch feeds it the kernel's occupancy and the SM count. */
#include <criterion/criterion.h>

#include "ops/argmax_split.h"
#include "ops/attn_chunks.h"

/* 132 SMs: 4 blocks an SM at head dim 64, 3 at 128. */
enum { S64 = 4 * 132, S128 = 3 * 132, CAP = 128 };

Test(chunks, measured_points_head_dim_64)
{
    /* 16 kv heads of 64: batches 1, 8, 16, 32, 64 (and 16/2 at batch 1, 8). */
    cr_assert_eq(reel_attn_wave_chunks(16, S64, CAP), 33);
    cr_assert_eq(reel_attn_wave_chunks(128, S64, CAP), 4);
    cr_assert_eq(reel_attn_wave_chunks(256, S64, CAP), 2, "768 blocks in two waves lost 31%% in the step");
    cr_assert_eq(reel_attn_wave_chunks(512, S64, CAP), 1);
    cr_assert_eq(reel_attn_wave_chunks(1024, S64, CAP), 1);
    cr_assert_eq(reel_attn_wave_chunks(2, S64, CAP), CAP);
}

Test(chunks, measured_points_head_dim_128)
{
    cr_assert_eq(reel_attn_wave_chunks(32, S128, CAP), 12, "one wave, not 37 chunks in three");
    cr_assert_eq(reel_attn_wave_chunks(256, S128, CAP), 3, "2 chunks are 512 blocks in 1.3 waves");
    cr_assert_eq(reel_attn_wave_chunks(512, S128, CAP), 3, "unsplit, 512 blocks are 1.3 waves");
    cr_assert_eq(reel_attn_wave_chunks(1024, S128, CAP), 1, "two waves and more stay unsplit");
    cr_assert_eq(reel_attn_wave_chunks(2048, S128, CAP), 1);
}

Test(chunks, bounds)
{
    cr_assert_eq(reel_attn_wave_chunks(16, S64, 5), 5, "the cap holds the one-wave count");
    cr_assert_eq(reel_attn_wave_chunks(256, S128, 2), 1, "and the candidates: 2 chunks gain nothing");
    cr_assert_eq(reel_attn_wave_chunks(16, S64, 0), 1);
    cr_assert_eq(reel_attn_wave_chunks(0, S64, CAP), 1);
    cr_assert_eq(reel_attn_wave_chunks(16, 0, CAP), 1);
    cr_assert_eq(reel_attn_wave_chunks(1, 1, CAP), 1);
    for (int64_t u = 1; u <= 4096; u++)
        for (int64_t cap = 1; cap <= 64; cap *= 4) {
            int64_t n = reel_attn_wave_chunks(u, S128, cap);
            cr_assert(n >= 1 && n <= cap, "units %lld cap %lld: %lld chunks", (long long)u, (long long)cap,
                      (long long)n);
        }
}

/* Within the cap, no count below the choice's model time beats it by more
 * than the 10% margin, and a grid of two waves or more is never split. */
Test(chunks, model)
{
    for (int64_t slots = 132; slots <= 660; slots += 132)
        for (int64_t u = 1; u <= 3 * slots; u++) {
            int64_t n = reel_attn_wave_chunks(u, slots, CAP);
            double t = (double)((u * n + slots - 1) / slots) / (double)n;
            if (u >= 2 * slots)
                cr_assert_eq(n, 1, "units %lld slots %lld", (long long)u, (long long)slots);
            for (int64_t c = 1; c <= CAP && c * u <= 4 * slots + u; c++) {
                double tc = (double)((u * c + slots - 1) / slots) / (double)c;
                cr_assert(tc >= 0.9 * t - 1e-12 || u >= 2 * slots,
                          "units %lld slots %lld: %lld chunks (%.4f) against %lld (%.4f)", (long long)u,
                          (long long)slots, (long long)n, t, (long long)c, tc);
            }
        }
}

/* The least chunk length: the head dim's where the launch's blocks fit one
 * wave, REEL_ATTN_MIN_CHUNK_WAVES (256) past it, never below the head
 * dim's. */
Test(chunks, least_chunk_past_one_wave)
{
    cr_assert_eq(REEL_ATTN_MIN_CHUNK_WAVES, 256);
    /* hidden 2048 (16 kv heads of 128), H200, 03:19 UTC (docs/benchmarks.md) */
    cr_assert_eq(reel_attn_least_chunk(256, S128, reel_attn_wave_chunks(256, S128, CAP), 64, 256), 256,
                 "batch 16: 3 chunks in two waves; context 128 800.5 -> 706.4 us a step");
    cr_assert_eq(reel_attn_least_chunk(512, S128, reel_attn_wave_chunks(512, S128, CAP), 64, 256), 256,
                 "batch 32: 3 chunks in four waves; 1064.6 -> 922.6 us");
    cr_assert_eq(reel_attn_least_chunk(16, S128, reel_attn_wave_chunks(16, S128, CAP), 64, 256), 64,
                 "batch 1: one wave keeps 64-key chunks");
    cr_assert_eq(reel_attn_least_chunk(128, S128, reel_attn_wave_chunks(128, S128, CAP), 64, 256), 64,
                 "batch 8: 384 blocks, one wave");
    cr_assert_eq(reel_attn_least_chunk(256, S64, reel_attn_wave_chunks(256, S64, CAP), 64, 256), 64,
                 "16 kv heads of 64, batch 16: 2 chunks, one wave");
    for (int64_t u = 1; u <= 2048; u++)
        for (int64_t n = 1; n <= 8; n++) {
            const int32_t l = reel_attn_least_chunk(u, S128, n, 64, 256);
            cr_assert_eq(l, u * n > S128 ? 256 : 64, "units %lld, %lld chunks", (long long)u, (long long)n);
            cr_assert_eq(reel_attn_least_chunk(u, S128, n, 128, 64), 128, "never below the head dim's");
        }
}

/* A plan whose tokens all fit one chunk (max_context <= whole keys)
 * launches one chunk a (token, kv head, head group); a longer limit keeps
 * the launch's count. */
Test(chunks, whole_chunks)
{
    cr_assert_eq(REEL_ATTN_WHOLE_KEYS % 64, 0);
    for (int64_t n = 1; n <= 33; n++)
        for (int64_t mc = 1; mc <= 1024; mc++)
            cr_assert_eq(reel_attn_whole_chunks(n, mc, 256), mc <= 256 ? 1 : n);
    cr_assert_eq(reel_attn_whole_chunks(4, 240, 0), 4, "0: no rule");
}

/* One-warpgroup prefill blocks an SM: 3 at head dim 64 (150-156 registers),
 * 2 at 128 (96 KB of stages), on 132 SMs. */
enum { SMS = 132, P64 = 3 * SMS, P128 = 2 * SMS };

Test(chunks, prefill_split_measured_points)
{
    /* bench_attention us a layer, H200, 23:15-23:22 UTC (docs/benchmarks.md). */
    cr_assert_eq(reel_attn_prefill_splits(128, SMS, P64, 4), 4,
                 "512 tokens, 16 heads of 64 (128 blocks): 50.2 at 1, 42.9 at 2, 39.9 at 4");
    cr_assert_eq(reel_attn_prefill_splits(512, SMS, P64, 4), 1, "2048 tokens, causal: 60.1 at 1, 84.3 at 2, 80.3 at 4");
    cr_assert_eq(reel_attn_prefill_splits(256, SMS, P128, 2), 1, "512 tokens, 32 heads of 128: 76.0 at 1, 82.2 at 2");
    cr_assert_eq(reel_attn_prefill_splits(1024, SMS, P128, 2), 1);
    cr_assert_eq(reel_attn_prefill_splits(16, SMS, P128, 2), 2);
    cr_assert_eq(reel_attn_prefill_splits(150, SMS, P64, 4), 2, "past one block an SM: what fits one wave");
}

Test(chunks, prefill_split_bounds)
{
    for (int64_t b = 1; b <= 2048; b++)
        for (int64_t cap = 1; cap <= 4; cap *= 2) {
            int64_t ks = reel_attn_prefill_splits(b, SMS, P64, cap);
            cr_assert(ks >= 1 && ks <= cap && (ks & (ks - 1)) == 0, "blocks %lld: %lld", (long long)b, (long long)ks);
            if (b <= SMS) {
                cr_assert_eq(ks, cap, "one block an SM or fewer: the widest");
            } else {
                cr_assert(ks == 1 || b * ks <= P64, "the warpgroups fit one wave");
                cr_assert(ks == cap || b * 2 * ks > P64, "and no wider width would");
            }
        }
    cr_assert_eq(reel_attn_prefill_splits(0, SMS, P64, 4), 1);
    cr_assert_eq(reel_attn_prefill_splits(16, SMS, 0, 4), 1);
    cr_assert_eq(reel_attn_prefill_splits(16, SMS, P64, 0), 1);
}

/* The argmax's cluster split (ops/argmax_split.h): a 128256-wide bf16 row
 * is 16032 packs, a 32000-wide one 4000; 132 SMs. */
Test(chunks, argmax_split_fills_one_block_an_sm_with_at_least_1024_packs_a_block)
{
    cr_assert_eq(reel_argmax_split(1, 16032, 132, true, 8), 8, "batch 1: 8 blocks of 2004 packs");
    cr_assert_eq(reel_argmax_split(16, 16032, 132, true, 8), 8, "128 blocks fit the 132 SMs");
    cr_assert_eq(reel_argmax_split(17, 16032, 132, true, 8), 4);
    cr_assert_eq(reel_argmax_split(33, 16032, 132, true, 8), 4, "132 blocks");
    cr_assert_eq(reel_argmax_split(34, 16032, 132, true, 8), 2);
    cr_assert_eq(reel_argmax_split(66, 16032, 132, true, 8), 2);
    cr_assert_eq(reel_argmax_split(67, 16032, 132, true, 8), 1, "past one block an SM: one block a row");
    cr_assert_eq(reel_argmax_split(1, 4000, 132, true, 8), 1, "a 32000-wide row measured no faster split");
    cr_assert_eq(reel_argmax_split(1, 8191, 132, true, 8), 1, "under 8 packs a thread of one block");
    cr_assert_eq(reel_argmax_split(1, 8192, 132, true, 8), 8, "1024 packs a block");
    cr_assert_eq(reel_argmax_split(1, 12000, 132, true, 8), 8);
    cr_assert_eq(reel_argmax_split(1, 16032, 132, false, 8), 1, "no clusters");
    cr_assert_eq(reel_argmax_split(1, 16032, 132, true, 1), 1, "the one-block build");
    cr_assert_eq(reel_argmax_split(1, 1 << 20, 132, true, 6), 4, "a power of two under the cap");
    cr_assert_eq(reel_argmax_split(1, 1 << 20, 132, true, 64), 8, "at most the portable cluster size");
    cr_assert_eq(reel_argmax_split(0, 16032, 132, true, 8), 1);
}
