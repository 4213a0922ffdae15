/* Internal to ops/cuda: what the paged-attention kernels share. One op runs
 * in up to four kernels on one stream (attention.cu issues them):
 *  1. the KV write: every token's k/v into its cache slot;
 *  2. decode (attn_decode.cu): every token not in a multi-token run, its
 *     keys cut into chunks that separate blocks attend in parallel
 *     (split-KV), the query heads of one kv head in one block;
 *  3. combine (attn_decode.cu): the chunks' partials of a token merged by
 *     their log-sum-exps into its output;
 *  4. prefill (attn_prefill.cu): tokens of multi-token runs (a run is a
 *     maximal range of consecutive tokens of one sequence), a tile of query
 *     tokens at a time on tensor cores.
 * Which kernel takes a token is decided on the device from the metadata by
 * the same predicate in every kernel (attn_in_run), and how a token's keys
 * are chunked depends only on its position and the launch's chunk count
 * (attn_chunking), which the host derives from the launch configuration
 * alone: so a replayed graph and an eager step give the same bits. */
#ifndef REEL_OPS_CUDA_ATTENTION_CUH
#define REEL_OPS_CUDA_ATTENTION_CUH

#include "ops/attn_chunks.h"
#include "ops/attn_layout.h"
#include "ops/cuda/common.cuh"

namespace reel_cu {

typedef struct attn_geom {
    int64_t h, hkv, dh, bs, nblocks, kvrow, qrow, group;
    float scale;
    int32_t bs_shift; /* log2(bs) when bs is a power of two, else -1 */
    /* The layout across ranks (ops/op.h): DCP's view (n 1: none), and the
     * lse output [rows, h] (natural log; NULL: not asked for). */
    reel_dcp_view dcp;
    float *lse;
    /* The launch's least decode chunk length (attn_decode_chunks sets it;
     * 0: the head dim's, attn_min_chunk). */
    int32_t min_chunk;
    /* A token with at most this many keys takes one chunk, however many
     * the launch has (attn_decode_chunks sets it; 0: none). */
    int32_t whole_keys;
} attn_geom;

/* ln 2: the kernels' scores are in base 2, the lse output is natural. */
#define REEL_ATTN_LN2 0.69314718055994531f

/* Key position j's block index and offset in it, without a division for
 * power-of-two block sizes. */
__host__ __device__ __forceinline__ int32_t attn_blk(const attn_geom &g, int32_t j)
{
    return g.bs_shift >= 0 ? j >> g.bs_shift : j / (int32_t)g.bs;
}

__host__ __device__ __forceinline__ int32_t attn_in_blk(const attn_geom &g, int32_t j)
{
    return g.bs_shift >= 0 ? j & (int32_t)(g.bs - 1) : j % (int32_t)g.bs;
}

attn_geom attn_geom_of(const reel_launch *l);

/* The last key index a token at position p attends: p, or under DCP the
 * last of this rank's local prefix (-1: it owns none of 0 .. p). */
__host__ __device__ __forceinline__ int32_t attn_last_key(const attn_geom &g, int32_t p)
{
    return g.dcp.n <= 1 ? p : reel_dcp_local_count(g.dcp, p + 1) - 1;
}

/* The q the kernels read: the op's input, or with the fused rope
 * (attrs.attn.rope_rot_dim > 0) the rotated copy the KV write made in
 * out[2]. */
static inline const void *attn_q(const reel_launch *l)
{
    return l->attrs->attn.rope_rot_dim > 0 ? l->out[2] : l->in[0];
}

/* The token-level guard of the host reference, without the block-table
 * walk: 1 valid, 0 padding (sequence -1: zeros, not reported), -1 a breach
 * (zeros and REEL_E_LIMIT). *last: the last key index it attends
 * (attn_last_key; -1 for an empty DCP shard, which callers give (0, -inf)). */
__host__ __device__ __forceinline__ int attn_token_ok(const reel_meta_view &m, const attn_geom &g, int64_t t,
                                                      int32_t *seq, int32_t *last)
{
    int32_t s = m.token_seq[t];
    int32_t p = m.positions[t];
    *seq = s;
    *last = p;
    if (s == -1)
        return 0;
    if (s < 0 || s >= m.max_seqs)
        return -1;
    int32_t ctx = m.context_lens[s];
    if (!(ctx <= m.max_context && p >= 0 && p < ctx))
        return -1;
    int32_t j = attn_last_key(g, p);
    *last = j;
    return j / g.bs < m.max_blocks ? 1 : -1;
}

/* The start of every KV-write kernel (attention.cu, attn_kv_layout.cu):
 * lets a decode kernel launched as its programmatic dependent start its
 * metadata reads now (it waits for this grid before it reads the cache),
 * and zeroes token t's arrival counters of the in-block combine (cnt: NULL
 * when the decode does not use them). */
__device__ __forceinline__ void attn_write_begin(uint32_t *cnt, int32_t ny, int64_t t)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    cudaTriggerProgrammaticLaunchCompletion();
#endif
    if (cnt)
        for (int32_t i = threadIdx.x; i < ny; i += blockDim.x)
            cnt[t * ny + i] = 0u;
}

/* The lse output of heads h0 .. h0+nh-1 of token t (threads 0 .. nh-1 of
 * the block), where the op has one. */
__device__ __forceinline__ void attn_put_lse(const attn_geom &g, int64_t t, int64_t h0, int nh, float v)
{
    if (g.lse && (int)threadIdx.x < nh)
        g.lse[t * g.h + h0 + threadIdx.x] = v;
}

/* Is token t part of a multi-token run (a neighbour of the same, real
 * sequence)? Those tokens go to the prefill kernel when it runs. */
__host__ __device__ __forceinline__ bool attn_in_run(const reel_meta_view &m, int64_t t, int64_t rows)
{
    int32_t s = m.token_seq[t];
    if (s == -1)
        return false;
    return (t > 0 && m.token_seq[t - 1] == s) || (t + 1 < rows && m.token_seq[t + 1] == s);
}

/* Split-KV: a token at position p has n = p + 1 keys, cut into chunks of
 * len keys (a multiple of ATTN_CHUNK_ALIGN, at least attn_min_chunk(g):
 * the launch's g.min_chunk where attn_decode_chunks set one, else
 * REEL_ATTN_MIN_CHUNK below head dim 128 and REEL_ATTN_MIN_CHUNK_DH128
 * from it, both 64) so that at most nchunks are used, or, where n is at
 * most g.whole_keys, into one chunk; returns how many are used. */
#ifndef REEL_ATTN_MIN_CHUNK /* multiples of 64: the A/B builds of the chunk length */
#define REEL_ATTN_MIN_CHUNK 64
#endif
#ifndef REEL_ATTN_MIN_CHUNK_DH128
#define REEL_ATTN_MIN_CHUNK_DH128 64
#endif
enum { ATTN_MIN_CHUNK = REEL_ATTN_MIN_CHUNK, ATTN_MIN_CHUNK_DH128 = REEL_ATTN_MIN_CHUNK_DH128, ATTN_CHUNK_ALIGN = 64 };
static_assert(ATTN_MIN_CHUNK % ATTN_CHUNK_ALIGN == 0 && ATTN_MIN_CHUNK_DH128 % ATTN_CHUNK_ALIGN == 0 &&
                  REEL_ATTN_MIN_CHUNK_WAVES % ATTN_CHUNK_ALIGN == 0 && REEL_ATTN_WHOLE_KEYS % ATTN_CHUNK_ALIGN == 0 &&
                  REEL_ATTN_WHOLE_KEYS_GQA % ATTN_CHUNK_ALIGN == 0,
              "a chunk is whole tiles");

/* The head dim's least chunk length, whatever the launch. */
__host__ __device__ __forceinline__ int32_t attn_min_chunk_dh(int64_t dh)
{
    return dh >= 128 ? ATTN_MIN_CHUNK_DH128 : ATTN_MIN_CHUNK;
}

__host__ __device__ __forceinline__ int32_t attn_min_chunk(const attn_geom &g)
{
    return g.min_chunk > 0 ? g.min_chunk : attn_min_chunk_dh(g.dh);
}

__host__ __device__ __forceinline__ int attn_chunking(const attn_geom &g, int32_t p, int nchunks, int32_t *len)
{
    int32_t n = p + 1;
    int32_t l = n <= g.whole_keys ? n : (n + nchunks - 1) / nchunks;
    l = (l + ATTN_CHUNK_ALIGN - 1) / ATTN_CHUNK_ALIGN * ATTN_CHUNK_ALIGN;
    if (l < attn_min_chunk(g))
        l = attn_min_chunk(g);
    *len = l;
    return (int)((n + l - 1) / l);
}

/* A chunk whose block table breaches the limits writes this bit pattern as
 * its log-sum-exp (a NaN no arithmetic produces): the combine gives the
 * token zeros. */
#define REEL_ATTN_BAD_LSE 0x7fbad000u

/* What a decode block (token t, chunk c) attends, read from the metadata
 * alone (no writes, so a programmatic launch may classify before its wait):
 * whether the token is one of a multi-token run the prefill kernel takes,
 * its guard (attn_token_ok: 1 valid, 0 padding, -1 a breach), its sequence,
 * the chunks it uses and, when attend, this chunk's keys [k0, k1).
 *
 * In two halves, so that a kernel reads the chunk's block ids while the
 * context length is in flight: _pre reads the token's sequence and
 * position and, from those alone, sets spec and [k0, k1) where the chunk
 * can attend at all (the guard without the context length: attend implies
 * spec, with the same keys; the ids of a spec chunk lie inside its
 * sequence's row of the block table); it issues the context length's read
 * without using it. _fin is the guard, given that read. */
struct attn_dec_tok {
    bool run, attend, spec;
    int ok, nact;
    int32_t seq, k0, k1;
    int32_t pos, last, ctx; /* between the halves */
};

__host__ __device__ __forceinline__ attn_dec_tok attn_decode_classify_pre(const reel_meta_view &m,
                                                                           const attn_geom &g, int64_t t,
                                                                           int64_t rows, int c, int nchunks,
                                                                           bool skip_runs)
{
    attn_dec_tok d = {};
    d.run = skip_runs && attn_in_run(m, t, rows);
    if (d.run)
        return d;
    const int32_t s = m.token_seq[t], p = m.positions[t];
    d.seq = s;
    d.pos = p;
    d.ok = s == -1 ? 0 : s < 0 || s >= m.max_seqs ? -1 : 1; /* so far */
    d.ctx = d.ok == 1 ? m.context_lens[s] : 0;
    const int32_t j = p >= 0 ? attn_last_key(g, p) : -1;
    int32_t clen = 0;
    d.last = j;
    d.nact = j >= 0 ? attn_chunking(g, j, nchunks, &clen) : 1;
    d.spec = d.ok == 1 && j >= 0 && j / g.bs < m.max_blocks && c < d.nact;
    if (d.spec) {
        d.k0 = c * clen;
        d.k1 = min(j + 1, d.k0 + clen);
    }
    return d;
}

/* attn_token_ok's guard on what _pre read; an empty DCP shard is (0, -inf),
 * not a breach. */
__host__ __device__ __forceinline__ void attn_decode_classify_fin(const reel_meta_view &m, const attn_geom &g,
                                                                  int c, attn_dec_tok *d)
{
    if (d->run)
        return;
    if (d->ok == 1) {
        if (!(d->ctx <= m.max_context && d->pos >= 0 && d->pos < d->ctx))
            d->ok = -1;
        else if (!(d->last / g.bs < m.max_blocks))
            d->ok = -1;
        else if (d->last < 0)
            d->ok = 0;
    }
    if (d->ok != 1)
        d->nact = 1;
    d->attend = d->ok == 1 && c < d->nact;
}

__host__ __device__ __forceinline__ attn_dec_tok attn_decode_classify(const reel_meta_view &m, const attn_geom &g,
                                                                       int64_t t, int64_t rows, int c, int nchunks,
                                                                       bool skip_runs)
{
    attn_dec_tok d = attn_decode_classify_pre(m, g, t, rows, c, nchunks, skip_runs);
    attn_decode_classify_fin(m, g, c, &d);
    return d;
}

/* What the classified block does before it attends: false when it has
 * nothing to do (a run token, a chunk past the token's last, a padding or
 * refused token, whose zeros chunk 0 writes here and whose breach it
 * reports). */
template <typename T>
__device__ __forceinline__ bool attn_decode_act(const reel_meta_view &m, const attn_geom &g, const attn_dec_tok &d,
                                                int64_t t, int c, T *orow, int64_t h0, int nh)
{
    if (d.attend)
        return true;
    if (d.run || c >= d.nact)
        return false;
    for (int64_t i = threadIdx.x; i < nh * g.dh; i += blockDim.x)
        orow[i] = from_f<T>(0.0f);
    attn_put_lse(g, t, h0, nh, -INFINITY);
    if (d.ok < 0 && threadIdx.x == 0)
        report(&m, REEL_E_LIMIT);
    return false;
}

/* Both at once, for a kernel that starts in stream order: false when the
 * block has nothing to attend; else the token's sequence, its keys
 * [*k0, *k1) for this chunk and the chunks it uses. */
template <typename T>
__device__ __forceinline__ bool attn_decode_begin(const reel_meta_view &m, const attn_geom &g, int64_t t,
                                                  int64_t rows, int c, int nchunks, bool skip_runs, T *orow,
                                                  int64_t h0, int nh, int32_t *seq, int32_t *k0, int32_t *k1,
                                                  int *nact)
{
    attn_dec_tok d = attn_decode_classify(m, g, t, rows, c, nchunks, skip_runs);
    if (!attn_decode_act(m, g, d, t, c, orow, h0, nh))
        return false;
    *seq = d.seq;
    *k0 = d.k0;
    *k1 = d.k1;
    *nact = d.nact;
    return true;
}

/* The one-kernel decode (attention.cu): the tensor-core decode writes the
 * step's k and v into the cache itself, so the op is one kernel (plus the
 * combine past 8 chunks) instead of a KV write before it. on: this launch
 * does; k, v: the op's rows; half > 0: the fused rope (pos, theta), whose
 * rotated q and k go to qr and kr; nslots: the caches' rows; cnt: the
 * plan's arrival counters of this node's stream (meta.attn_cnt), or NULL
 * where the in-block combine does not run. */
struct attn_fw {
    bool on;
    const void *k, *v;
    void *kc, *vc; /* the caches, written through these */
    void *qr, *kr;
    const int32_t *pos;
    int32_t half;
    double theta;
    int64_t nslots;
};

/* A decode chunk whose block ids breach the limits: reported, and the
 * token gets zeros, written here when it has one chunk, else by the
 * combine, which finds this chunk's mark. Called by the whole block. */
template <typename T>
__device__ __forceinline__ void attn_chunk_refuse(const reel_meta_view &m, const attn_geom &g, float *ws, int64_t t,
                                                  int c, int nchunks, int nact, int64_t h0, int nh, T *orow)
{
    if (threadIdx.x == 0)
        report(&m, REEL_E_LIMIT);
    if (nact == 1) {
        for (int64_t i = threadIdx.x; i < nh * g.dh; i += blockDim.x)
            orow[i] = from_f<T>(0.0f);
        attn_put_lse(g, t, h0, nh, -INFINITY);
    } else if ((int)threadIdx.x < nh) {
        float *slot = ws + (t * nchunks + c) * (g.qrow + g.h);
        slot[g.qrow + h0 + threadIdx.x] = __uint_as_float(REEL_ATTN_BAD_LSE);
    }
}

/* The partials' workspace (out[1]): slot-major, each slot H*Dh outputs then
 * H log-sum-exps (base 2). */
__host__ __device__ __forceinline__ int64_t attn_ws_slot_floats(const attn_geom &g)
{
    return g.qrow + g.h;
}

/* The in-block combine's arrival counters (one per token, kv head and
 * head group) live in the workspace's last slot, which the chunking never
 * gives a partial (attn_decode_chunks keeps rows * chunks below
 * REEL_ATTN_SPLIT_SLOTS). */
__host__ __device__ __forceinline__ uint32_t *attn_ws_counters(float *ws, const attn_geom &g)
{
    return (uint32_t *)(ws + (int64_t)(REEL_ATTN_SPLIT_SLOTS - 1) * attn_ws_slot_floats(g));
}

/* Launchers (attn_decode.cu, attn_decode_mma.cu, attn_prefill.cu); each
 * returns the launch's cudaError_t. attn_decode_launch picks the
 * tensor-core decode where it is built for the dtype and head dim, the
 * CUDA-core one elsewhere, then the combine. */
/* The launch's chunk count; sets g->min_chunk, the least chunk length
 * (docs/attention.md, "The chunking rule"). */
int attn_decode_chunks(const reel_backend *be, attn_geom *g, reel_dtype dt, int64_t rows, int32_t max_context);
bool attn_decode_supports(reel_dtype dt, int64_t dh);
/* Whether the launch's (token, kv head, head group) blocks fit one wave:
 * at most REEL_ATTN_BLOCKS_PER_SM (4, measured at head dim 64) a
 * multiprocessor, and at most what the tensor-core decode's occupancy holds
 * (3 at head dim 128 in bf16). Where the one-kernel decode may take the
 * launch (attention.cu). */
bool attn_decode_one_wave(const reel_backend *be, const attn_geom &g, reel_dtype dt, int64_t rows);
/* Whether the tensor-core decode merges its own chunks (the last chunk of
 * each token and head group to finish, dm_arrive_and_combine) instead of a
 * combine kernel: where the merge is small (few chunks and heads a group,
 * counters that fit the slot), the small batches whose step time is launch
 * latency. A function of the launch alone, like the chunking. */
bool attn_decode_inblock(const attn_geom &g, reel_dtype dt, int64_t rows, int nchunks);
/* pdl: launch the decode kernel as a programmatic dependent of the kernel
 * before it (the KV write, or with fw.on the op's producer), whose work its
 * metadata reads overlap. fw: the one-kernel decode (the tensor-core decode
 * only); cnt: the in-block combine's counters (inblock); combine_pdl: the
 * combine kernel (where one follows) as a programmatic dependent of the
 * decode (the device has programmatic launch). */
cudaError_t attn_decode_launch(const reel_launch *l, cudaStream_t st, const attn_geom &g, int nchunks,
                               bool skip_runs, bool inblock, bool pdl, const attn_fw &fw, uint32_t *cnt,
                               bool combine_pdl, int64_t ps_grid);
bool attn_decode_mma_supports(reel_dtype dt, int64_t dh);
int attn_decode_mma_group(void);
/* Blocks of the tensor-core decode an SM holds (its registers and shared
 * memory, the occupancy calculator's answer, memoized); 0 where unknown. */
int attn_decode_mma_blocks_per_sm(reel_dtype dt, int64_t dh);
/* Floats of the tensor-core decode's dynamic shared memory (the in-block
 * combine stages a group's partials there). */
int64_t attn_decode_mma_smem_floats(int64_t dh);
/* ps_grid: the persistent decode's grid (attn_decode_persist_grid; 0: the
 * one-item kernel), where neither fw.on nor inblock. */
cudaError_t attn_decode_mma_launch(const reel_launch *l, cudaStream_t st, const attn_geom &g, int nchunks,
                                   bool skip_runs, bool inblock, bool pdl, const attn_fw &fw, uint32_t *cnt,
                                   int64_t ps_grid);
/* The grid of the persistent decode for a launch of the two-kernel path
 * (one wave of its blocks, each taking several of the one-item kernel's
 * items), or 0 where the one-item kernel takes it: a launch of one wave,
 * more items a block than the kernel holds, or chunks longer than
 * REEL_ATTN_PERSIST_KEYS keys at max_context. A function of the launch
 * and the device alone. */
int64_t attn_decode_persist_grid(const reel_backend *be, const attn_geom &g, reel_dtype dt, int64_t rows,
                                 int nchunks, int32_t max_context);
bool attn_prefill_supports(reel_dtype dt, int64_t dh);
/* pdl: launched as a programmatic dependent of the kernel before it (the
 * decode or its combine, which let it launch early). */
cudaError_t attn_prefill_launch(const reel_launch *l, cudaStream_t st, const attn_geom &g, bool pdl, int64_t sms);
/* The KV write of a layout (attn_kv_layout.cu): DCP writes the tokens this
 * rank owns at the slots its block table gives; CP every rank's gathered
 * rows at kv_slots. attn_kv_layout says whether a node has one. Issues
 * only: a launch error is the op's to report. */
bool attn_kv_layout(const reel_launch *l);
void attn_write_kv_layout(const reel_launch *l, cudaStream_t st, const attn_geom &g, uint32_t *cnt, int32_t ny);

} /* namespace reel_cu */

#endif
