/* Internal (L2): where paged attention's keys live across ranks (issue 10),
 * shared by the kernels of every backend, the executor's step checks and
 * parallel/. Plain C, also compiled by nvcc for the CUDA kernels.
 *
 * DCP (decode context parallel) shards every sequence's KV by tokens over
 * n ranks with an interleave I: global position t lives on rank
 * (t / I) % n, at local index (t / (n I)) I + t % I of that rank's cache
 * (through its own block table). Local order is global order, so the keys
 * a query at position p sees on rank r (global positions 0 .. p) are the
 * local prefix 0 .. local_count(p + 1) - 1: the causal mask stays a prefix
 * and only the visible length changes. n <= 1 is no sharding. */
#ifndef REEL_OPS_ATTN_LAYOUT_H
#define REEL_OPS_ATTN_LAYOUT_H

#include <stdint.h>

#ifdef __CUDACC__
#define REEL_ATTN_HD static __host__ __device__ __forceinline__
#else
#define REEL_ATTN_HD static inline
#endif

/* The layout a kernel applies: n ranks (1: none), this rank r, interleave i. */
typedef struct reel_dcp_view {
    int32_t n, r, i;
} reel_dcp_view;

REEL_ATTN_HD int32_t reel_dcp_owner(reel_dcp_view d, int32_t t)
{
    return d.n <= 1 ? 0 : (t / d.i) % d.n;
}

REEL_ATTN_HD int32_t reel_dcp_local_index(reel_dcp_view d, int32_t t)
{
    return d.n <= 1 ? t : t / (d.n * d.i) * d.i + t % d.i;
}

/* How many of the positions 0 .. len-1 rank d.r owns (len >= 0): full
 * cycles of n*i positions give i each, the last partial cycle what falls in
 * the rank's window. Monotonic in len. */
REEL_ATTN_HD int32_t reel_dcp_local_count(reel_dcp_view d, int32_t len)
{
    if (d.n <= 1)
        return len;
    int32_t cyc = d.n * d.i, rem = len % cyc - d.r * d.i;
    return len / cyc * d.i + (rem < 0 ? 0 : rem > d.i ? d.i : rem);
}

/* The global position of local index li on rank d.r (the inverse of
 * local_index), in 64 bits: local_count(len) <= li for every len up to it. */
REEL_ATTN_HD int64_t reel_dcp_global_of(reel_dcp_view d, int64_t li)
{
    if (d.n <= 1)
        return li;
    return li / d.i * ((int64_t)d.n * d.i) + (int64_t)d.r * d.i + li % d.i;
}

#endif
