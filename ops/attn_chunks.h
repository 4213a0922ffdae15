/* Internal (L2): the split-KV decode's chunk count as a pure function of
 * the launch (docs/attention.md, "The chunking rule"), apart from the CUDA
 * code that asks the device for its inputs, so host tests pin its choices.
 * Plain C, also compiled by nvcc. */
#ifndef REEL_OPS_ATTN_CHUNKS_H
#define REEL_OPS_ATTN_CHUNKS_H

#include <stdint.h>

/* units: the decode's blocks unsplit (rows x kv heads x head groups);
 * slots: the blocks one wave holds (blocks an SM x SMs); cap: the most
 * chunks the workspace and the context allow. The most chunks whose blocks
 * fit one wave; where the unsplit grid is under two waves, more chunks in
 * more waves when a model of waves each 1/n of the context long
 * (ceil(units n / slots) / n) ends at least 10% sooner, ties to fewer
 * chunks. At least 1, at most cap (where cap >= 1). */
static inline int64_t reel_attn_wave_chunks(int64_t units, int64_t slots, int64_t cap)
{
    if (units < 1 || slots < 1)
        return 1;
    if (cap < 1)
        cap = 1;
    /* One wave: n chunks taking w waves (the time of n is w / n). */
    int64_t n = slots / units, w = 1;
    if (n < 1) {
        n = 1;
        w = (units + slots - 1) / slots;
    }
    if (n > cap)
        n = cap;
    if (units < 2 * slots) {
        int64_t bn = n, bw = w; /* the best of more waves */
        const int64_t lim = (4 * slots + units - 1) / units;
        for (int64_t c = n + 1; c <= lim && c <= cap; c++) {
            const int64_t cw = (units * c + slots - 1) / slots;
            if (cw * bn < bw * c) { /* cw / c < bw / bn */
                bn = c;
                bw = cw;
            }
        }
        if (10 * bw * n < 9 * w * bn) /* bw / bn < 0.9 w / n */
            n = bn;
    }
    return n;
}

/* The least chunk length of a launch whose units x n blocks take more than
 * one wave of slots: a block of a later wave pays its metadata reads and
 * its first tile's latency again, so a short chunk there costs about what a
 * long one does, and a token of a short context keeps to fewer chunks
 * (docs/attention.md, "The chunking rule"). A launch of one wave keeps
 * base, the head dim's. 256 measured a decode step 12-13% faster at hidden
 * 2048, batches 16 and 32, context 128, and within 1% elsewhere;
 * -DREEL_ATTN_MIN_CHUNK_WAVES=64 builds the rule before it (every launch
 * base), for A/B. */
#ifndef REEL_ATTN_MIN_CHUNK_WAVES
#define REEL_ATTN_MIN_CHUNK_WAVES 256
#endif

static inline int32_t reel_attn_least_chunk(int64_t units, int64_t slots, int64_t n, int32_t base, int32_t waves)
{
    return units * n > slots && waves > base ? waves : base;
}

/* The most keys a token takes in one chunk whatever the launch's chunk
 * count (attn_geom.whole_keys): a token of a short context is not split,
 * since merging its chunks (each partial stored, an arrival, the last
 * block's reads of all of them: about 3 us at batch 1 on an H200, the
 * phase trace of docs/benchmarks.md) costs more than its chunk's few more
 * tiles. A multiple of 64; 0 builds the rule before it (every token cut by
 * the launch's count), for A/B. */
#ifndef REEL_ATTN_WHOLE_KEYS
#define REEL_ATTN_WHOLE_KEYS 256
#endif

/* The bound where a block takes 4 query heads or more of one kv head
 * (GQA 4 and up), whose merge of chunks is that many heads' partials: an
 * A/B knob (by default the same bound). */
#ifndef REEL_ATTN_WHOLE_KEYS_GQA
#define REEL_ATTN_WHOLE_KEYS_GQA REEL_ATTN_WHOLE_KEYS
#endif

/* A launch's one-chunk bound from its query heads a kv head (group). */
static inline int32_t reel_attn_whole_keys(int64_t group)
{
    return group >= 4 ? REEL_ATTN_WHOLE_KEYS_GQA : REEL_ATTN_WHOLE_KEYS;
}

/* The chunk count of a launch whose tokens all have at most whole keys
 * (max_context <= whole): one, else n. */
static inline int64_t reel_attn_whole_chunks(int64_t n, int64_t max_context, int32_t whole)
{
    return max_context <= whole ? 1 : n;
}

/* The chunk count n of a launch and its least length (*least), with no
 * chunk that no token can reach: a token has at most max_context keys, so
 * at the least length it uses at most ceil(max_context / least) chunks,
 * and a grid of more launches blocks that only exit (1024 of 1536 at
 * batch 32 of a plan of 240 keys, 16 kv heads of 128). The least length
 * stays the one of n chunks, so every token's keys are cut into the same
 * chunks as at n: at that many chunks or more each is least long. */
static inline int64_t reel_attn_fit_chunks(int64_t units, int64_t slots, int64_t n, int32_t base, int32_t waves,
                                           int64_t max_context, int32_t *least)
{
    const int32_t l = reel_attn_least_chunk(units, slots, n, base, waves);
    int64_t most = (max_context + l - 1) / l;
    if (most < 1)
        most = 1;
    *least = l;
    return n < most ? n : most;
}

/* The prefill's warpgroups a block (a key split inside the block, merged
 * there): blocks: its grid; sms: the SMs; slots: the blocks of one
 * warpgroup a wave holds (blocks an SM x SMs); cap: the widest the kernel
 * has (a power of 2). A grid of at most one block an SM takes the widest
 * (each block has an SM to itself: 4 warpgroups beat 2 and 1 there, on the
 * H200); a larger one the widest, doubling from 1, whose warpgroups all fit
 * one wave; a grid of a wave or more stays 1. */
static inline int64_t reel_attn_prefill_splits(int64_t blocks, int64_t sms, int64_t slots, int64_t cap)
{
    int64_t ks = 1;
    if (blocks < 1 || slots < 1 || cap < 1)
        return 1;
    if (blocks <= sms)
        while (2 * ks <= cap)
            ks *= 2;
    while (2 * ks <= cap && blocks * 2 * ks <= slots)
        ks *= 2;
    return ks;
}

#endif
