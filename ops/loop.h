/* Internal (L2): the device loop's advance kernel (reel_step_n,
 * docs/loop.md). After each decode step of a loop it records every running
 * sequence's sampled token, stops the sequences that reached an
 * end-of-sequence id or their token limit, and writes the next step's
 * inputs and metadata into the static region in place of an upload: the
 * token becomes the token input, positions and context lengths advance by
 * one, the KV slot comes from the block table, the sampler's counter
 * advances by one. A stopped sequence gets slot -1 (nothing further written
 * to its cache) and keeps its inputs. Then it sets the loop's condition:
 * run again while a sequence runs and fewer than max_steps steps ran.
 *
 * Host (ops/host/loop.c) and CUDA (ops/cuda/loop.cu) share the rules below
 * (reel_loop_advance_seq), integer only: both write the same bytes. */
#ifndef REEL_OPS_LOOP_H
#define REEL_OPS_LOOP_H

#include <stdint.h>

#include "backend/backend.h"

#define REEL_LOOP_CTL_MAX_EOS 8

/* The loop's control block in device memory, written by the call's upload
 * and by the advance kernel; a captured loop graph reads it at a fixed
 * address, so one graph serves every call (any max_steps, eos set, limits
 * or token buffer). */
typedef struct reel_loop_ctl {
    int32_t iter;       /* steps run so far in this call */
    int32_t max_steps;  /* the call's step limit */
    int32_t nseq;       /* sequences (one token each) */
    int32_t neos;
    int32_t eos[REEL_LOOP_CTL_MAX_EOS];
    int32_t cont;       /* the condition the last advance set */
    int32_t pad_;
    int32_t *tokens;    /* [max_steps][nseq]: the call's token buffer */
} reel_loop_ctl;

/* What a captured advance reads and writes: fixed per bucket layout. */
typedef struct reel_loop_kargs {
    reel_loop_ctl *ctl;
    int32_t *limit;           /* [rows]: tokens each sequence may produce in this call */
    int32_t *steps;           /* [rows]: tokens each produced so far */
    const int32_t *sampled;   /* [rows]: the step's token output */
    int32_t *ids;             /* [rows]: the step's token input */
    int32_t *rng;             /* [rows][4] the sampler's seed and counter, or NULL */
    int32_t *positions;       /* [rows] */
    int32_t *slots, *ctx;     /* [rows], [max_seqs]; NULL without paged attention */
    const int32_t *bt;        /* [max_seqs][max_blocks] */
    int32_t max_blocks, block_size;
    uint64_t cond;            /* the backend's loop condition handle (0: none, the
                                 condition goes to ctl->cont only) */
} reel_loop_kargs;

/* Where a sequence's token ends the sequence. */
#ifdef __CUDACC__
#define REEL_LOOP_FN static __host__ __device__ __forceinline__
#else
#define REEL_LOOP_FN static inline
#endif

REEL_LOOP_FN int reel_loop_is_eos(const reel_loop_ctl *c, int32_t tok)
{
    if (tok < 0)
        return 1; /* the sampler's bad row (REEL_SAMPLE_BAD_ROW): nothing to continue from */
    for (int32_t i = 0; i < c->neos && i < REEL_LOOP_CTL_MAX_EOS; i++)
        if (c->eos[i] == tok)
            return 1;
    return 0;
}

/* Sequence s after step iter: returns 1 while it runs on. */
REEL_LOOP_FN int reel_loop_advance_seq(const reel_loop_kargs *a, const reel_loop_ctl *c, int32_t iter, int32_t s)
{
    int32_t *out = c->tokens + (int64_t)iter * c->nseq + s;
    if (a->steps[s] >= a->limit[s]) {
        *out = INT32_MIN; /* REEL_LOOP_NO_TOKEN: stopped before this step */
        return 0;
    }
    int32_t tok = a->sampled[s];
    *out = tok;
    int32_t done = ++a->steps[s];
    if (done >= a->limit[s] || reel_loop_is_eos(c, tok)) {
        a->limit[s] = done; /* stopped: later steps see steps >= limit */
        if (a->slots)
            a->slots[s] = -1;
        return 0;
    }
    int32_t pos = ++a->positions[s];
    a->ids[s] = tok;
    if (a->slots) {
        a->ctx[s] += 1;
        int32_t blk = a->bt[(int64_t)s * a->max_blocks + pos / a->block_size];
        a->slots[s] = blk * a->block_size + pos % a->block_size;
    }
    if (a->rng) {
        uint32_t lo = (uint32_t)a->rng[4 * (int64_t)s + 2] + 1u;
        a->rng[4 * (int64_t)s + 2] = (int32_t)lo;
        if (lo == 0)
            a->rng[4 * (int64_t)s + 3] = (int32_t)((uint32_t)a->rng[4 * (int64_t)s + 3] + 1u);
    }
    return 1;
}

/* Launches the advance on s (recorded when s is capturing). */
reel_status reel_loop_advance(reel_backend *be, reel_stream *s, const reel_loop_kargs *a);

/* Per backend (the dispatch above picks one). */
reel_status reel_host_loop_advance(reel_backend *be, reel_stream *s, const reel_loop_kargs *a);
#if defined(__cplusplus)
extern "C"
#endif
reel_status reel_cuda_loop_advance(reel_backend *be, reel_stream *s, const reel_loop_kargs *a);

#endif
