/*
 * reel layouts of attention across ranks (docs/parallel.md has the
 * pictures and the math): builders that compose paged attention with the
 * collective ops of reel/comm.h, for a graph of one rank.
 *
 * DCP (decode context parallel): every sequence's KV cache is sharded over
 * N ranks by tokens, with an interleave I: global position t lives on rank
 * (t / I) % N, in that rank's own pages. A step's tokens are the same on
 * every rank; each rank computes the query of its H/N heads, the keys and
 * values of all kv heads, and gets the attention of its H/N heads:
 *
 *     reel_dcp_layout d = {.nranks = n, .rank = r, .interleave = 16,
 *                          .exchange = REEL_DCP_ALL_TO_ALL};
 *     reel_tensor out, lse;
 *     reel_dcp_attention(g, q_mine, k, v, k_cache, v_cache, &ap, &d, &out, &lse);
 *
 * Each rank steps with its own block tables (its local pages: a sequence
 * of context L needs reel_dcp_local_len(&d, L) slots there), the global
 * context lengths and positions, and a slot mapping that only says which
 * tokens are padding (-1): the write slot of a token is its owner's, taken
 * from the owner's block table, and no rank writes or reads another rank's
 * tokens.
 *
 * CP (context parallel prefill): the tokens of a long prompt are split
 * across N ranks (rank-major chunks), every rank keeps a full replica of
 * the cache; each rank's k and v, and the slots of its tokens, are
 * all-gathered before attention, which writes all of them and then lets
 * this rank's tokens attend causally: the result equals one rank's.
 *
 *     reel_tensor out = reel_cp_attention(g, q, k, v, k_cache, v_cache, &ap, n);
 *
 * Both are refused at compile outside the validated subset (the message
 * names the op and the limit): N in {1, 2, 4, 8}, equal to the
 * communicator's size; DCP: num_heads a multiple of N, the layout's rank
 * the communicator's, I a power of two dividing block_size, every
 * attention op of the plan DCP with the same layout; DCP and CP not
 * together.
 */
#ifndef REEL_PARALLEL_H
#define REEL_PARALLEL_H

#include <stdint.h>

#include "reel/reel.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How DCP combines the ranks' partial attentions (out, lse). */
typedef enum reel_dcp_exchange {
    /* all-gather of the lses, each rank weights its partial by
     * exp(lse_rank - lse_all), a reduce-scatter over heads sums them (each
     * weighted partial is rounded to q's dtype before the sum) */
    REEL_DCP_GATHER_SCATTER = 0,
    /* one all-to-all of outputs and lses packed together (float32), then
     * the LSE combine of the N partials of this rank's heads */
    REEL_DCP_ALL_TO_ALL = 1,
} reel_dcp_exchange;

#define REEL_DCP_LAYOUT_MAGIC REEL_MAGIC('r', 'd', 'c', 'p')
typedef struct reel_dcp_layout {
    size_t size;     /* sizeof(reel_dcp_layout) of the caller's header */
    int version;     /* REEL_VERSION_NUMBER of the caller's header */
    uint32_t magic;  /* REEL_DCP_LAYOUT_MAGIC */
    int nranks;      /* N: ranks the KV is sharded over (the communicator's size) */
    int rank;        /* this rank (the communicator's rank) */
    int interleave;  /* I: global position t lives on rank (t / I) % N */
    int exchange;    /* a reel_dcp_exchange */
} reel_dcp_layout;
#define REEL_DCP_LAYOUT_HEAD REEL_STRUCT_HEAD(reel_dcp_layout, REEL_DCP_LAYOUT_MAGIC)
#define REEL_DCP_LAYOUT_INIT REEL_STRUCT_INIT(reel_dcp_layout, REEL_DCP_LAYOUT_MAGIC)

/* DCP attention of this rank's heads. q [T, (H/N)*Dh]: the query of this
 * rank's heads (heads r*H/N .. (r+1)*H/N - 1); k, v [T, Hkv*Dh]: the step's
 * keys and values of every kv head (the same on every rank); k_cache,
 * v_cache: this rank's pages [num_blocks, block_size, Hkv, Dh]. Sets *out
 * [T, (H/N)*Dh] (q's dtype) and *lse [T, H/N] float32 (the natural
 * log-sum-exp over the whole context; -inf for a padding token). Builds an
 * all-gather of q over heads, paged attention over the local shard
 * returning (out, lse), and the exchange. */
reel_status reel_dcp_attention(reel_graph *g, reel_tensor q, reel_tensor k, reel_tensor v, reel_tensor k_cache,
                               reel_tensor v_cache, const reel_attn_params *p, const reel_dcp_layout *d,
                               reel_tensor *out, reel_tensor *lse);

/* DCP multi-head latent attention of this rank's heads (reel_mla_attention
 * sharded as reel_dcp_attention shards paged attention). q_lat [T, (H/N)*L]
 * and q [T, (H/N)*Dq]: this rank's heads' absorbed query and rope query;
 * c [T, L] and k_pe [T, R]: the step's latent and rope key (the same on
 * every rank); cache: this rank's pages [num_blocks, block_size, L + R].
 * Sets *out [T, (H/N)*L] (q's dtype) and *lse [T, H/N] float32. Builds
 * all-gathers of q_lat and q over heads, MLA over the local shard returning
 * (out, lse), and the exchange; p->num_heads is H, all heads. */
reel_status reel_dcp_mla_attention(reel_graph *g, reel_tensor q_lat, reel_tensor q, reel_tensor c, reel_tensor k_pe,
                                   reel_tensor cache, const reel_mla_params *p, const reel_dcp_layout *d,
                                   reel_tensor *out, reel_tensor *lse);

/* How many of a sequence's positions 0 .. len-1 the layout's rank owns: the
 * slots its cache holds of a context of len (its block table needs
 * ceil(that / block_size) entries). -1 for an invalid layout or len < 0. */
int32_t reel_dcp_local_len(const reel_dcp_layout *d, int32_t len);

/* CP attention of this rank's tokens over nranks ranks. q [T, H*Dh], k, v
 * [T, Hkv*Dh] of this rank's tokens; the caches a full replica. Every
 * rank's k and v, and the slots of its tokens (the step's slot mapping:
 * -1 for padding), are all-gathered (rank-major) and written into this
 * rank's cache before its tokens attend. Steps: every rank the same
 * num_tokens, its own tokens' positions and slots, the sequences' context
 * lengths and block tables as one rank would have them (a rank with fewer
 * tokens pads after its last sequence, with slot -1). Result [T, H*Dh]. */
reel_tensor reel_cp_attention(reel_graph *g, reel_tensor q, reel_tensor k, reel_tensor v, reel_tensor k_cache,
                              reel_tensor v_cache, const reel_attn_params *p, int nranks);

#ifdef __cplusplus
}
#endif

#endif /* REEL_PARALLEL_H */
