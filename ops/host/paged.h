/* Internal (L2): the host kernels' reading of a paged cache through the
 * step metadata, shared by paged attention (attention.c) and MLA (mla.c):
 * a token's limits and last key, its slot under DCP, a key's slot. Step
 * metadata is never trusted to stay in range: what is out of it sets
 * REEL_E_LIMIT in the error word and the caller skips the write and gives
 * the token zeros. */
#ifndef REEL_OPS_HOST_PAGED_H
#define REEL_OPS_HOST_PAGED_H

#include <stdbool.h>
#include <stdint.h>

#include "ops/host/kern.h"
#include "ops/op.h"

typedef struct reel_hk_paged {
    const reel_meta_view *m;
    int64_t bs, nblocks; /* block size, blocks of the cache */
    reel_dcp_view dcp;
} reel_hk_paged;

/* DCP: token t's slot on this rank, -1 when another rank owns it (or it is
 * padding, or its metadata is out of range: the attend phase reports that),
 * -2 when its local block is out of range (reported here). */
static inline int64_t reel_hk_paged_dcp_slot(const reel_hk_paged *a, int64_t t)
{
    const reel_meta_view *m = a->m;
    int32_t s = m->token_seq[t], p = m->positions[t];
    if (s < 0 || s >= m->max_seqs || p < 0 || reel_dcp_owner(a->dcp, p) != a->dcp.r)
        return -1;
    int64_t li = reel_dcp_local_index(a->dcp, p), b = li / a->bs;
    int32_t blk = b < m->max_blocks ? m->block_tables[(int64_t)s * m->max_blocks + b] : -1;
    if (blk < 0 || blk >= a->nblocks) {
        reel_hk_report(m, REEL_E_LIMIT);
        return -2;
    }
    return (int64_t)blk * a->bs + li % a->bs;
}

/* Checks token t's sequence, position and blocks against every limit, and
 * gives the last key index it attends (*last: its position, or under DCP
 * the last of its local prefix, -1 for an empty one). False: the token gets
 * zeros (reported unless it is padding). */
static inline bool reel_hk_paged_check(const reel_hk_paged *a, int64_t t, int32_t *seq, int32_t *last)
{
    const reel_meta_view *m = a->m;
    int32_t s = m->token_seq[t];
    *seq = s;
    *last = -1;
    if (s == -1)
        return false;
    bool ok = s >= 0 && s < m->max_seqs;
    int32_t p = m->positions[t], j = -1;
    if (ok) {
        int32_t ctx = m->context_lens[s];
        ok = ctx <= m->max_context && p >= 0 && p < ctx;
        j = ok ? reel_dcp_local_count(a->dcp, p + 1) - 1 : -1;
        ok = ok && (j < 0 || j / a->bs < m->max_blocks);
    }
    for (int64_t b = 0; ok && j >= 0 && b <= j / a->bs; b++) {
        int32_t blk = m->block_tables[(int64_t)s * m->max_blocks + b];
        ok = blk >= 0 && blk < a->nblocks;
    }
    if (!ok)
        reel_hk_report(m, REEL_E_LIMIT);
    *last = j;
    return ok;
}

/* The cache slot of key index j of sequence s (checked by reel_hk_paged_check). */
static inline int64_t reel_hk_paged_slot(const reel_hk_paged *a, int32_t s, int64_t j)
{
    int64_t blk = a->m->block_tables[(int64_t)s * a->m->max_blocks + j / a->bs];
    return blk * a->bs + j % a->bs;
}

#endif
