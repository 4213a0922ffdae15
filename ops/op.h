/* Internal (L2): op kinds, attributes, schemas and the kernel interface.
 * An op kind has a schema (arity, shape/dtype inference, declared accesses);
 * implementations register per backend with a priority and a can_use
 * predicate; the registry picks the first usable one, and the last in every
 * chain is a plain reference kernel. */
#ifndef REEL_OPS_OP_H
#define REEL_OPS_OP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "backend/comm.h"
#include "core/shape.h"
#include "ops/attn_layout.h"
#include "reel/reel.h"

typedef enum reel_op_kind {
    REEL_OP_EMBEDDING = 0,
    REEL_OP_MATMUL,
    REEL_OP_ADD,
    REEL_OP_MUL,
    REEL_OP_RMSNORM,
    REEL_OP_SILU_AND_MUL,
    REEL_OP_ROPE,
    REEL_OP_SOFTMAX,
    REEL_OP_ARGMAX,
    REEL_OP_PAGED_ATTENTION,
    REEL_OP_TOPK,
    REEL_OP_LSE_COMBINE,
    /* Collectives (issue 10): they run through the plan's communicator. */
    REEL_OP_ALL_REDUCE,
    REEL_OP_ALL_GATHER,
    REEL_OP_REDUCE_SCATTER,
    REEL_OP_ALL_TO_ALL,
    REEL_OP_SEND,
    REEL_OP_RECV,
    /* Fusion (issue 8). view_cols is built by reel_view_cols: a column range
     * of its source, an alias of the source's bytes where the fusion pass
     * makes the producing matmul write its columns as segments, a copy
     * otherwise. add_rmsnorm is made by the fusion pass only: (a, b, w) ->
     * (a + b rounded to the storage dtype, rmsnorm of that sum). */
    REEL_OP_VIEW_COLS,
    REEL_OP_ADD_RMSNORM,
    /* The DCP combine's pieces (issue 10, parallel/): appended, so the
     * collectives stay one range. */
    REEL_OP_LSE_RESCALE,
    REEL_OP_LSE_PACK,
    /* The models layer's (issue 43, models/): rotary embedding from a
     * table of inverse frequencies with an attention factor (scaled ropes:
     * linear, llama3, yarn), and RMSNorm over each head's slice (Qwen3's
     * q_norm and k_norm). Kernels in ops/host/rope_freq.c, head_norm.c and
     * ops/cuda/rope_freq.cu, head_norm.cu. */
    REEL_OP_ROPE_FREQ,
    REEL_OP_RMSNORM_HEADS,
    /* Sampling inside the graph (issue 43): (logits [T, V], params [T, 4]
     * f32, rng [T, 4] i32) -> tokens [T] i32, each row with its own
     * temperature, top_p, min_p, top_k, seed and counter. The rules both
     * backends compute bit for bit are in ops/sample.h (docs/sampling.md);
     * kernels in ops/host/sample.c and ops/cuda/sample.cu. No attributes. */
    REEL_OP_SAMPLE,
    /* Mixture of experts (issue 44; kernels in ops/host/moe.c and
     * ops/cuda/moe.cu). Pairs are (token t, choice j), pair index t*K + j;
     * "sorted" rows are the pairs stably sorted by expert.
     *  moe_route   (logits [T, E] float, bias [E] f32 optional)
     *              -> ids [T, K] i32, weights [T, K] f32 (attrs.moe).
     *  moe_align   (ids [T, K] i32) -> order [T, K] i32 (sorted row p holds
     *              pair order[p]), where [T, K] i32 (pair -> its sorted row),
     *              offsets [E + 1] i32 (expert e's rows are offsets[e] ..
     *              offsets[e+1]-1; offsets[E] = rows * K). Stable: within an
     *              expert, pairs in ascending pair index.
     *  moe_gate_up (x [T, H], order, offsets, w [E*2F, H]) -> act [T, K, F]
     *              x's dtype: sorted row p = silu(g) * u of token order[p]/K
     *              with expert e's gate and up rows, g and u rounded to the
     *              dtype, the product in f32, rounded.
     *  moe_down    (act [T, K, F], offsets, w [E*H, F]) -> ys [T, K, H]:
     *              sorted row p times expert e's down rows, f32 sums.
     *  moe_combine (ys [T, K, H], where, weights [T, K] f32) -> out [T, H]
     *              ys' dtype: sum over j = 0..K-1 of weights[t, j] *
     *              ys[where[t, j]] in f32, in j order. */
    REEL_OP_MOE_ROUTE,
    REEL_OP_MOE_ALIGN,
    REEL_OP_MOE_GATE_UP,
    REEL_OP_MOE_DOWN,
    REEL_OP_MOE_COMBINE,
    /* Multi-head latent attention (issue 45; kernels in ops/host/mla.c and
     * ops/cuda/mla.cu).
     *  head_matmul  (x [T, heads*Xs], w [heads*S, C]) -> y [T, heads*N], x's
     *               dtype: per head h, A_h = rows [h*S + row_off, + rows) of
     *               w and x_h = x[t, h*Xs + x_off, + K]; y_h = A_h x_h (K = C,
     *               N = rows) or, transposed, A_h^T x_h (K = rows, N = C);
     *               f32 sums in k order, rounded once (attrs.hmm). DeepSeek's
     *               kv_b_proj [heads*(nope+v), latent] gives the absorbed
     *               query (rows nope at 0, transposed) and the value
     *               up-projection (rows v at nope).
     *  mla_attention (q_lat [T, H*L], q [T, H*Dq], c [T, L], k_pe [T, R],
     *               cache [blocks, block_size, L+R])
     *               -> out [T, H*L], split workspace, lse [T, H] (with the
     *               layout's lse): each token first writes [c | k_pe] into
     *               its slot, then attends causally over its sequence's
     *               cache rows with score scale * (q_lat_h . row[0, L) +
     *               q_h[Dq-R, Dq) . row[L, L+R)) and value row[0, L): the
     *               absorbed form, one latent row read for all heads
     *               (attrs.mla; DCP as paged attention's, CP refused). */
    REEL_OP_HEAD_MATMUL,
    REEL_OP_MLA_ATTENTION,
    REEL_OP_COUNT
} reel_op_kind;

/* The op kinds that read and write a paged cache through the step
 * metadata (paged attention, MLA). */
static inline bool reel_op_is_paged(reel_op_kind k) { return k == REEL_OP_PAGED_ATTENTION || k == REEL_OP_MLA_ATTENTION; }
/* Input i of kind k is a cache the op writes. */
static inline bool reel_op_writes_cache(reel_op_kind k, int i)
{
    return (k == REEL_OP_PAGED_ATTENTION && (i == 3 || i == 4)) || (k == REEL_OP_MLA_ATTENTION && i == 4);
}

/* The op kinds that go through a communicator. */
static inline bool reel_op_is_comm(reel_op_kind k) { return k >= REEL_OP_ALL_REDUCE && k <= REEL_OP_RECV; }

#define REEL_OP_MAX_IN 6
#define REEL_OP_MAX_OUT 4

/* Paged attention's second output is its split-KV workspace: partial
 * results of REEL_ATTN_SPLIT_SLOTS (token, chunk) pairs, each num_heads
 * rows of head_dim float32 outputs followed by num_heads float32
 * log-sum-exps ([slots, H*Dh + H] f32, no token dim, so every bucket plans
 * the same bytes). It is planned memory like any activation: placed by the
 * planner, captured with the graph, declared to the hazard checker. A
 * kernel splits a token's keys into at most SLOTS / rows chunks; the host
 * reference does not split and leaves it untouched. */
#define REEL_ATTN_SPLIT_SLOTS 256
/* Paged attention's one-kernel decode (ops/cuda/attention.cu): launches of
 * up to this many tokens write the KV cache inside the decode kernel, whose
 * arrival counters (meta.attn_cnt) a plan sizes for that many tokens (or its
 * largest bucket, if fewer), up to REEL_ATTN_CNT_MAX_WORDS a stream (a
 * launch needing more keeps the separate KV-write kernel). */
#ifndef REEL_ATTN_ONE_KERNEL_ROWS /* at most 64 (the kernel's slot mask); A/B builds */
#define REEL_ATTN_ONE_KERNEL_ROWS 32
#endif
#define REEL_ATTN_CNT_MAX_WORDS 4096

/* Matmul epilogues the fusion pass sets (runtime/fuse.c); the builder leaves
 * REEL_MM_EPI_NONE. BIAS: a third input b [N] is added to each row after the
 * product is rounded to the storage dtype (the rounding of the unfused
 * matmul then add). SILU_MUL: the output is silu(y[:, :N/2]) * y[:, N/2:] of
 * the product y rounded to storage, [T, N/2]; the second output [T, N] is
 * planned scratch a kernel may stage y in. */
enum { REEL_MM_EPI_NONE = 0, REEL_MM_EPI_BIAS = 1, REEL_MM_EPI_SILU_MUL = 2 };
/* Matmul prologues, likewise: the rmsnorm that makes x, folded into the
 * matmul reading it. RMSNORM: in[0] is the rmsnorm's input, in[4] its
 * weight [K]; ADD_RMSNORM: in[0] + in[3] (same shape) is summed first, as
 * add_rmsnorm does, and the sum is an output. in[2] stays the epilogue's
 * (0 when it has none). After the epilogue's outputs come the sum (ADD_RMSNORM)
 * and the normed x, [T, K], planned scratch a kernel may stage it in; the
 * normed values are rmsnorm's (add_rmsnorm's) bits, with pro_eps. */
enum { REEL_MM_PRO_NONE = 0, REEL_MM_PRO_RMSNORM = 1, REEL_MM_PRO_ADD_RMSNORM = 2 };
/* Column segments of a matmul's output (views fused into it): nseg > 0
 * stores columns [c_s, c_s + seg[s]) as their own row-major [rows, seg[s]]
 * block at element rows * c_s, so each view is contiguous. */
#define REEL_MM_MAX_SEG 4

/* Paged attention across ranks (issue 10; parallel/ builds these nodes and
 * checks them against the validated subset at compile). All zero: a plain
 * node, as reel_paged_attention builds.
 *  - dcp >= 1: DCP (ops/attn_layout.h). The caches and block tables are this
 *    rank's own pages; context lengths and positions stay global. The KV
 *    write of a token happens on its owner only, at the local slot its block
 *    table gives (the slot mapping only says -1: skip); a token attends its
 *    local prefix. An empty prefix gives (0, -inf).
 *  - cp >= 1: CP. k and v are [T, cp * Hkv*Dh], chunk q of row t being rank
 *    q's token t, and in[5] (kv_slots, [T, cp] int32) gives each one's slot
 *    (-1: none): all are written before any token attends, so a token sees
 *    the keys the other ranks computed in the same step. The step's slot
 *    mapping is not read.
 *  - lse: a third output, [T, H] float32, the natural log-sum-exp of each
 *    (token, head)'s scores (-inf where nothing is attended). */
typedef struct reel_attn_layout {
    int32_t dcp, dcp_rank, interleave;
    int32_t cp;
    bool lse;
} reel_attn_layout;

/* A node's DCP view (n 1: none). */
static inline reel_dcp_view reel_attn_dcp(const reel_attn_layout *l)
{
    reel_dcp_view d = { 1, 0, 1 };
    if (l->dcp > 1) {
        d.n = l->dcp;
        d.r = l->dcp_rank;
        d.i = l->interleave;
    }
    return d;
}

/* Does the node have a layout (DCP, CP or the lse output)? */
static inline bool reel_attn_has_layout(const reel_attn_layout *l)
{
    return l->dcp >= 1 || l->cp >= 1 || l->lse;
}

typedef union reel_op_attrs {
    struct {
        bool w_transposed;
        int epi;                        /* REEL_MM_EPI_* */
        int nseg;                       /* 0: plain row-major output */
        int64_t seg[REEL_MM_MAX_SEG];   /* columns of each segment, in order */
        int pro;                        /* REEL_MM_PRO_* */
        float pro_eps;
    } matmul;
    struct { int64_t col, ncols; } view;
    struct { float eps; } rmsnorm;
    struct { int head_dim, rot_dim; float theta; } rope;
    /* rope_freq: in[2] is the table inv_freq [rot_dim / 2] f32; cos and sin
     * are multiplied by scale (transformers' attention_factor). The rotated
     * dims of a head are [rot_offset, rot_offset + rot_dim); interleaved:
     * pair i is (2i, 2i + 1) of them (DeepSeek's rope_interleave, GPT-J
     * order), else (i, i + rot_dim / 2). rmsnorm_heads reads rmsnorm.eps;
     * its head dim is its weight's length. */
    struct { int head_dim, rot_dim; float scale; int rot_offset; bool interleaved; } rope_freq;
    /* rope_rot_dim > 0: the op applies neox rotary embedding (reel_rope's
     * math, head_dim = p.head_dim) to q and k itself: a node made by the
     * compiler's rope fusion (runtime/fuse_rope.c) from two rope ops feeding
     * it. Then in[0] and in[1] are the unrotated q and k, in[5] the rope's
     * positions [T] i32, and out[2] and out[3] the rotated q and k ([T,
     * H*Dh] and [T, Hkv*Dh], the rope ops' own results, which the kernels
     * read q from and which stay readable as graph outputs); the cache
     * receives rotated k.
     * lay: the layout across ranks (reel_attn_layout above), whose kv_slots
     * and lse are in[5] and out[2] too: a node has the fused rope or a
     * layout, never both (the fusion leaves nodes with a layout alone and
     * the schema refuses the pair).
     * cnt_slot: the node's stream index, which of meta.attn_cnt's per-stream
     * counter sets its kernels use (the compiler sets it; 0 elsewhere).
     */
    struct { reel_attn_params p; int rope_rot_dim; float rope_theta; reel_attn_layout lay; int cnt_slot; } attn;
    struct { int k, page_size; bool has_page_table; } topk;
    /* packed: no lses operand; outs is [T, P, H*Dh + H] float32, each
     * partial's outputs then its lses, and the result has out_dtype. */
    struct { int num_heads; bool packed; reel_dtype out_dtype; } lse;
    /* lse_rescale and lse_pack: the DCP group and this rank. */
    struct { int num_heads, nranks, rank; } dcp;
    /* Collectives: the axis chunked or gathered, the group size the op was
     * built for (0: any, all_reduce), the peer of send/recv, and recv's
     * declared shape. */
    struct { int axis, nranks, peer; reel_shape shape; } coll;
    /* The moe ops: experts E and choices K (every moe op); the router's
     * rules (moe_route only; routed_scaling resolved: 1 for none). */
    struct { int num_experts, top_k, scoring, n_group, topk_group; bool renormalize; float routed_scaling; } moe;
    struct { int heads, row_off, rows, x_off; bool transposed; } hmm;
    /* mla_attention: L = latent_dim, R = rope_dim; the scale is resolved
     * by the builder (never 0 in a node); lay as paged attention's (cp 0). */
    struct { int num_heads, latent_dim, rope_dim, block_size; float scale; reel_attn_layout lay; } mla;
} reel_op_attrs;

/* Output indices of a matmul's prologue results (REEL_MM_PRO_*): the sum of
 * ADD_RMSNORM, then the normed x; both after the epilogue's scratch. */
static inline int reel_mm_sum_out(const reel_op_attrs *a)
{
    return a->matmul.epi == REEL_MM_EPI_SILU_MUL ? 2 : 1;
}

static inline int reel_mm_norm_out(const reel_op_attrs *a)
{
    return reel_mm_sum_out(a) + (a->matmul.pro == REEL_MM_PRO_ADD_RMSNORM ? 1 : 0);
}


/* Static description of an op kind. `infer` checks operand shapes and dtypes
 * and fills the outputs' shapes; on error it writes a message (without the
 * op name, which the caller adds) into err and returns the status. */
typedef struct reel_op_schema {
    const char *name;
    int nin;            /* inputs (an optional input may be absent: shape ndim 0) */
    int nout;
    reel_status (*infer)(const reel_shape *in, int nin, const reel_op_attrs *a,
                         reel_shape *out, char *err, size_t errlen);
    /* Role names of the inputs ("x", "w", ...), used in error messages. */
    const char *in_names[REEL_OP_MAX_IN];
} reel_op_schema;

/* NULL for a kind out of range. */
const reel_op_schema *reel_op_schema_get(reel_op_kind k);

/* How messages, reports and pictures name node `node` of kind k producing
 * the tensor named out: "op 'add' (node 3 -> 'h')", or with quoted false
 * "add (node 3 -> 'h')". Returns buf. */
const char *reel_op_node_label(reel_op_kind k, int node, const char *out, bool quoted, char *buf, size_t len);


/* Step metadata as seen by kernels: device pointers into the plan's static
 * buffers (or into an eager step's own buffers) and the limits they were
 * sized to. Kernels check limits and report into err_word (REEL_E_LIMIT)
 * instead of reading past a buffer. */
typedef struct reel_meta_view {
    const int32_t *positions;     /* [max_tokens] */
    const int32_t *slot_mapping;  /* [max_tokens] */
    const int32_t *token_seq;     /* [max_tokens] sequence of each token, -1 for padding */
    const int32_t *context_lens;  /* [max_seqs] */
    const int32_t *block_tables;  /* [max_seqs][max_blocks] */
    int32_t max_seqs, max_blocks, max_context;
    int32_t *err_word;            /* device int: 0, or a reel_status set by a kernel */
    /* Arrival counters of paged attention's one-kernel decode (ops/cuda,
     * docs/attention.md): attn_cnt_words words for each stream of the plan
     * (attrs.attn.cnt_slot), zero at the start of every step (the upload
     * writes zeros) and left zero by every kernel that counts. NULL: none,
     * the op keeps its separate KV-write kernel. Like the error word they
     * are atomics and not declared to the hazard checker. */
    uint32_t *attn_cnt;
    int32_t attn_cnt_words;
} reel_meta_view;

/* One node ready to launch: resolved pointers for one memory layout. */
typedef struct reel_launch {
    reel_op_kind op;
    const reel_op_attrs *attrs;
    const reel_shape *in_shape;   /* [nin] with dims[0] = rows of this launch where tokens */
    const reel_shape *out_shape;  /* [nout] likewise */
    void *in[REEL_OP_MAX_IN];     /* NULL for an absent optional input */
    void *out[REEL_OP_MAX_OUT];
    int64_t rows;                 /* token rows of this launch */
    const reel_meta_view *meta;
    reel_stream *stream;
    /* Launch with programmatic dependent launch: the kernel may start
     * before its same-stream predecessor finishes, and must wait for it
     * (cudaGridDependencySynchronize) before touching memory. Set only for
     * impls with pdl_ok, when the plan asks for it and the device has it. */
    bool pdl;
    /* Bit k: in[k] is a parameter, which no node of the plan writes (only
     * the user, between steps, in stream order). A kernel launched with
     * pdl may read it before its wait, while its predecessor runs. */
    uint32_t in_param;
    /* The plan's communicator (collective ops), NULL otherwise. */
    reel_comm *comm;
    /* The plan's warm-up (outside any capture, before it): an impl may time
     * its candidates for the launch's shape here and remember the choice,
     * which every later launch of the shape (replayed or eager) then
     * reads. Never set in a step. */
    bool tune;
} reel_launch;

typedef struct reel_op_impl {
    const char *name;             /* "host.matmul.ref", "cuda.matmul.cublaslt" */
    reel_op_kind op;
    reel_backend_kind backend;
    int priority;                 /* higher first */
    bool capturable;              /* may run inside a captured graph */
    bool fixed_context;           /* honours the fixed-context metadata limits */
    bool pdl_ok;                  /* honours reel_launch.pdl (waits on its producer grid first) */
    bool inplace_ok;              /* out[0] may start at in[0]'s address (the planner gives it
                                     the input's bytes when the input dies at this op). The one
                                     source of in-place reuse: a kernel declares what it was
                                     written for, per backend (docs/decisions.md) */
    /* May this impl run this node on this device? shapes are per node with
     * dims[0] = the largest bucket for token tensors. */
    bool (*can_use)(const reel_shape *in, int nin, const reel_shape *out, const reel_op_attrs *a,
                    const reel_device_caps *caps);
    /* Issues the kernel(s) on l->stream. Errors go to be->err. */
    reel_status (*launch)(reel_backend *be, const reel_launch *l);
    /* Optional: thread blocks of the launch's (largest) kernel over the
     * blocks one multiprocessor holds at once (1 where the impl does not
     * know), for the default PDL decision by grid size (runtime/schedule.c);
     * NULL: unknown, PDL only when asked for. */
    int64_t (*grid_blocks)(const reel_launch *l, const reel_device_caps *caps);
    /* Optional: *bytes of the backend's per-stream workspace (the CUDA
     * matmul workspace) a launch of this node at these shapes (dims[0] of
     * token tensors: a bucket's rows) takes. A plan reserves, on each
     * stream, the most its nodes there take at any of its buckets
     * (runtime/schedule.c); NULL: none. */
    reel_status (*stream_ws)(reel_backend *be, const reel_shape *in, int nin, const reel_shape *out,
                             const reel_op_attrs *a, size_t *bytes);
} reel_op_impl;

/* The registry: a read-only table per backend, filled at build time. Picks
 * the highest-priority usable impl; NULL if none. */
const reel_op_impl *reel_registry_select(reel_backend_kind b, reel_op_kind k, const reel_shape *in, int nin,
                                         const reel_shape *out, const reel_op_attrs *a,
                                         const reel_device_caps *caps);
/* Collectives (ops/collective.c): the one decomposition of an op with an
 * axis into the communicator's flat rank-major calls, for every backend.
 * transpose issues, on l->stream, dst[b][a] = src[a][b] for a < A, b < B
 * over chunks of `chunk` bytes (the backend's kernel). */
typedef reel_status (*reel_transpose_fn)(reel_backend *be, reel_stream *s, const void *src, void *dst, int64_t A,
                                         int64_t B, size_t chunk);
reel_status reel_coll_launch(reel_backend *be, const reel_launch *l, reel_transpose_fn transpose);

/* Every impl of a backend (for tests that exercise each one). */
const reel_op_impl *const *reel_registry_all(reel_backend_kind b, int *count);


#endif
