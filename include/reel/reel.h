/*
 * reel: a graph-capture execution runtime for model serving.
 *
 * A model is declared once as a static DAG of ops, compiled into a plan
 * (order, streams, memory layout, kernel choice), captured as one graph per
 * token bucket, and replayed every serving step. A step beyond the limits the
 * graphs were captured with runs eagerly through the same kernels, with a
 * reason counted in the plan's stats (or refused, in strict mode).
 *
 *     reel_ctx *ctx;
 *     reel_ctx_opts o = REEL_CTX_OPTS_INIT;          // backend: auto
 *     reel_ctx_create(&o, &ctx);
 *     reel_graph *g;  reel_graph_create(ctx, &g);
 *     int64_t d[] = {REEL_DIM_TOKENS, 4};
 *     reel_tensor a = reel_input(g, "a", REEL_F32, 2, d);
 *     reel_tensor b = reel_input(g, "b", REEL_F32, 2, d);
 *     reel_output(g, "sum", reel_add(g, a, b));
 *     reel_plan *p;   reel_compile(g, NULL, &p);    // default buckets
 *     reel_plan_set_input(p, "a", host_a, 3);  reel_plan_set_input(p, "b", host_b, 3);
 *     reel_step_info s = { .num_tokens = 3 };
 *     reel_step(p, &s);                              // replays bucket 4
 *     const void *sum; int64_t rows; reel_plan_output(p, "sum", &sum, &rows);
 *
 * Errors: every call that can fail returns a reel_status; the detail (the op,
 * tensor or limit at fault) is in reel_ctx_last_error() (of NULL for calls
 * without a context, reel_ctx_create among them). No call aborts,
 * exits or prints on bad input. Handles are opaque; destructors accept NULL.
 *
 * Threads: a reel_ctx may be used from several threads, but each graph is
 * built by one thread at a time and each plan is stepped by one thread at a
 * time (a plan holds its serving loop's state). The last-error text of a
 * context is per context, not per thread; reel_ctx_last_error hands each
 * reading thread its own copy.
 */
#ifndef REEL_REEL_H
#define REEL_REEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define REEL_VERSION_MAJOR 0
#define REEL_VERSION_MINOR 2
#define REEL_VERSION_PATCH 0
#define REEL_VERSION_NUMBER \
    (REEL_VERSION_MAJOR * 10000 + REEL_VERSION_MINOR * 100 + REEL_VERSION_PATCH)

/* The version of the library actually linked (REEL_VERSION_NUMBER form). */
int reel_version(void);

typedef enum reel_status {
    REEL_OK = 0,
    REEL_E_INVALID_ARG,   /* a bad value was passed (NULL, negative size, ...) */
    REEL_E_INVALID_USAGE, /* a call out of order (step before compile, ...) */
    REEL_E_SHAPE,         /* shapes of an op's operands disagree */
    REEL_E_DTYPE,         /* dtypes of an op's operands disagree or are unsupported */
    REEL_E_NOT_FOUND,     /* unknown input, output, parameter or tensor */
    REEL_E_UNBOUND,       /* a parameter has no data */
    REEL_E_NO_OUTPUT,     /* a graph output is never produced / graph has none */
    REEL_E_OOM,           /* host or device memory exhausted */
    REEL_E_LIMIT,         /* a kernel refused a step past the limit its graph was captured
                             with, or a fixed capacity of reel was reached (a step past a
                             limit normally runs eagerly instead: see reel_fallback) */
    REEL_E_FALLBACK,      /* strict mode: the step would have run eagerly */
    REEL_E_BACKEND,       /* the backend (CUDA, cuBLAS, threads) failed */
    REEL_E_UNSUPPORTED,   /* backend or configuration outside what reel validates */
    REEL_E_VERSION,       /* header and library versions differ */
    REEL_E_HAZARD,        /* the hazard checker found unordered access */
    REEL_E_INTERNAL,      /* an invariant of reel itself failed */
    REEL_STATUS_COUNT
} reel_status;

/* Static name of a status, "REEL_OK" ... ; never NULL. */
const char *reel_status_str(reel_status s);

/* ---- context ----------------------------------------------------------- */

typedef struct reel_ctx reel_ctx;

typedef enum reel_backend_kind {
    REEL_BACKEND_AUTO = 0, /* REEL_BACKEND env var, else CUDA if built and a device is visible, else host */
    REEL_BACKEND_HOST,
    REEL_BACKEND_CUDA,
} reel_backend_kind;

/* Every struct that crosses the ABI (options, per-step input, op
 * parameters, results) starts with one head: its size and the version of
 * the caller's header, and a magic value naming the struct. The rule, NCCL's:
 * - initialise every one with its _INIT macro (or, in C, its _HEAD inside a
 *   designated initializer: {REEL_STEP_INFO_HEAD, .num_tokens = 3}): it
 *   records the struct's size, the header's version and the magic, and sets
 *   every option to REEL_UNDEF_INT ("undefined": the library's default) or
 *   every other field to zero;
 * - then set the fields you want by name (o.max_context = 8192);
 * - fields are only ever appended at the end, so a program built against an
 *   older header keeps working with a newer library: the library reads only
 *   the fields the caller's struct has (those it does not know take their
 *   defaults) and fills a result struct only up to the caller's size.
 * The library refuses (REEL_E_VERSION, with a message naming the struct and
 * its _INIT) only what cannot work: a struct that was not initialised (no
 * magic, or another struct's), a header of another major version or from
 * before the head had its magic (reel 0.1: rebuild), or a struct larger than
 * the library knows (a newer header's fields it cannot honour).
 * Arrays of such structs are strided by their first element's size: every
 * element of an input array (reel_check_access, reel_st_entry) has the head,
 * of that same size; an output buffer (reel_op_span) needs it on its first
 * element, and every element written gets it; a returned array
 * (reel_hazard) is stepped through with REEL_HAZARD_AT. Handles (reel_tensor) and reel_comm_id (opaque bytes)
 * have no head: their layout is fixed for good. */
#define REEL_MAGIC(a, b, c, d) \
    ((uint32_t)(a) | (uint32_t)(b) << 8 | (uint32_t)(c) << 16 | (uint32_t)(d) << 24)
#ifdef __cplusplus
#define REEL_STRUCT_HEAD(type, m) sizeof(type), REEL_VERSION_NUMBER, (m)
#define REEL_STRUCT_INIT(type, m) \
    ([] { type t_{}; t_.size = sizeof(type); t_.version = REEL_VERSION_NUMBER; t_.magic = (m); return t_; }())
#else
#define REEL_STRUCT_HEAD(type, m) .size = sizeof(type), .version = REEL_VERSION_NUMBER, .magic = (m)
#define REEL_STRUCT_INIT(type, m) { REEL_STRUCT_HEAD(type, m) }
#endif
#define REEL_UNDEF_INT (-2147483647 - 1)

#define REEL_CTX_OPTS_MAGIC REEL_MAGIC('r', 'c', 't', 'x')
typedef struct reel_ctx_opts {
    size_t size;               /* sizeof(reel_ctx_opts) of the caller's header */
    int version;               /* REEL_VERSION_NUMBER of the caller's header */
    uint32_t magic;            /* REEL_CTX_OPTS_MAGIC */
    int backend;               /* a reel_backend_kind; an explicit choice wins over REEL_BACKEND;
                                  undefined: REEL_BACKEND_AUTO */
    int device;                /* CUDA device ordinal; undefined: 0 */
    /* Appended in 0.1 (issue 8). */
    int matmul_tuning;         /* CUDA: 1: a cuBLASLt matmul shape first seen in a plan's warm-up
                                  (each bucket then warms up) takes the fastest of the
                                  heuristic's top candidates, timed there with L2 flushed, and
                                  the context keeps it; 0 (undefined): the heuristic's first, the
                                  same algorithm (so the same bits) in every process. Timed
                                  choices measured no faster in a decode step on an H200
                                  (docs/decisions.md) */
} reel_ctx_opts;

#define REEL_CTX_OPTS_INIT \
    { sizeof(reel_ctx_opts), REEL_VERSION_NUMBER, REEL_CTX_OPTS_MAGIC, REEL_UNDEF_INT, REEL_UNDEF_INT, REEL_UNDEF_INT }

/* Creates a context. opts may be NULL (defaults). On failure *out is NULL
 * and the reason is in reel_ctx_last_error(NULL) (this thread's).
 * REEL_E_VERSION when opts breaks the option-struct rule above;
 * REEL_E_UNSUPPORTED when the CUDA backend is asked for and not available. */
reel_status reel_ctx_create(const reel_ctx_opts *opts, reel_ctx **out);
/* Destroys the context. All graphs and plans of it must be destroyed first. */
void reel_ctx_destroy(reel_ctx *ctx);
/* The message of the last failed call on this context ("" if none), copied
 * under the context's lock into a buffer of the calling thread: valid and
 * unchanged until this thread calls reel_ctx_last_error again. ctx NULL:
 * this thread's last failure that had no context to record on
 * (reel_ctx_create, reel_backend_parse, a call with a NULL graph or plan).
 * Every call that returns a status other than REEL_OK leaves a message. */
const char *reel_ctx_last_error(const reel_ctx *ctx);
reel_backend_kind reel_ctx_backend(const reel_ctx *ctx);
/* The memory the context's backend allocates from: *avail bytes it can
 * still give now, of *total (CUDA: the device's free and total memory,
 * cudaMemGetInfo; host backend: the machine's available memory within the
 * process's cgroup and rlimits). What a serving stack sizes its KV cache
 * from; reel_compile refuses (REEL_E_OOM, naming the largest parts) a plan
 * whose parameters, states, arena, step region and workspaces exceed
 * *avail, before allocating any of it. REEL_E_UNSUPPORTED where the backend
 * cannot tell. */
reel_status reel_ctx_memory(const reel_ctx *ctx, size_t *avail, size_t *total);
/* "auto", "host", "cuda"; NULL for an unknown value. */
const char *reel_backend_name(reel_backend_kind k);
/* Parses "auto" | "host" | "cuda". */
reel_status reel_backend_parse(const char *name, reel_backend_kind *out);

/* ---- graph builder ------------------------------------------------------ */

typedef struct reel_graph reel_graph;

typedef enum reel_dtype { REEL_F32 = 0, REEL_F16, REEL_BF16, REEL_I32, REEL_DTYPE_COUNT } reel_dtype;
size_t reel_dtype_size(reel_dtype t);
const char *reel_dtype_name(reel_dtype t);

/* The symbolic token dimension; only dims[0] may be symbolic. */
#define REEL_DIM_TOKENS (-1)
#define REEL_MAX_DIMS 4

/* A tensor handle: small, borrowed, owned by its graph. id 0 is invalid. */
typedef struct reel_tensor { uint32_t id; } reel_tensor;

/* Graph construction is deferred-error (like building a ggml graph): a
 * builder call that fails returns the invalid handle and records the first
 * error on the graph, with a message naming the op and tensor. Any later op
 * that uses an invalid handle is refused too. reel_graph_status() returns the
 * first error; reel_compile() returns it as well. */
reel_status reel_graph_create(reel_ctx *ctx, reel_graph **out);
void reel_graph_destroy(reel_graph *g);
reel_status reel_graph_status(const reel_graph *g);

/* Inputs are written before each step with reel_plan_set_input. */
reel_tensor reel_input(reel_graph *g, const char *name, reel_dtype dt, int ndim, const int64_t *dims);
/* Parameters (weights): no token dimension. Bind data before compile with
 * reel_param_bind (the pointer is borrowed by the graph: each reel_compile
 * of it copies the data, so it must stay valid until the graph's last
 * compile returns), or mark the parameter deferred and write it into the
 * plan with reel_plan_write_param before the first step. */
reel_tensor reel_param(reel_graph *g, const char *name, reel_dtype dt, int ndim, const int64_t *dims);
reel_status reel_param_bind(reel_graph *g, reel_tensor param, const void *data);
reel_status reel_param_defer(reel_graph *g, reel_tensor param);
/* State tensors persist across steps (a KV cache). Zero at compile. */
reel_tensor reel_state(reel_graph *g, const char *name, reel_dtype dt, int ndim, const int64_t *dims);
/* The step's token positions, [T] int32, filled from reel_step_info. */
reel_tensor reel_positions(reel_graph *g);
/* Marks t as an output named name; readable after each step. */
reel_status reel_output(reel_graph *g, const char *name, reel_tensor t);
/* Names a tensor (used in error messages, stats and pictures). */
reel_status reel_set_name(reel_graph *g, reel_tensor t, const char *name);
/* Runs the op that produces t on stream s (0 <= s < REEL_MAX_STREAMS).
 * Cross-stream inputs are ordered by events that reel inserts. */
#define REEL_MAX_STREAMS 4
reel_status reel_set_stream(reel_graph *g, reel_tensor t, int stream);

/* Ops. Unless said otherwise, x has a token dimension [T, ...] and the
 * result has x's dtype; f32, f16 and bf16 storage, float32 compute. */
/* table [V, D], ids [T] int32 -> [T, D]; an id outside [0, V) gives a zero row. */
reel_tensor reel_embedding(reel_graph *g, reel_tensor table, reel_tensor ids);
/* x [T, K] times w [K, N] (or w [N, K] with w_transposed) -> [T, N]. */
reel_tensor reel_matmul(reel_graph *g, reel_tensor x, reel_tensor w, bool w_transposed);
/* Elementwise; b has a's shape or is a row [last dim of a] broadcast over rows. */
reel_tensor reel_add(reel_graph *g, reel_tensor a, reel_tensor b);
reel_tensor reel_mul(reel_graph *g, reel_tensor a, reel_tensor b);
/* x [T, D], w [D]: x / sqrt(mean(x^2) + eps) * w. */
reel_tensor reel_rmsnorm(reel_graph *g, reel_tensor x, reel_tensor w, float eps);
/* x [T, 2F] -> silu(x[:, :F]) * x[:, F:], [T, F]. */
reel_tensor reel_silu_and_mul(reel_graph *g, reel_tensor x);
/* Neox-style rotary embedding of x [T, H*head_dim] at positions [T] int32;
 * rotates the first rot_dim dims of each head (rot_dim even, <= head_dim). */
reel_tensor reel_rope(reel_graph *g, reel_tensor x, reel_tensor positions, int head_dim, int rot_dim, float theta);
/* reel_rope with a table: inv_freq [R/2] f32 without a token dim (a
 * parameter), R = rot_dim <= head_dim; pair (i, i + R/2) of each head
 * rotates by pos * inv_freq[i], its cosine and sine multiplied by scale
 * (transformers' attention_factor; 1: none). The scaled ropes of
 * include/reel/models.h (linear, llama3, yarn). Never fused into attention. */
reel_tensor reel_rope_freq(reel_graph *g, reel_tensor x, reel_tensor positions, reel_tensor inv_freq, int head_dim,
                           float scale);
/* reel_rope_freq over dims [rot_offset, rot_offset + R) of each head (the
 * others pass through); interleaved: pair i is dims (2i, 2i + 1) of that
 * range (GPT-J order; DeepSeek's rope_interleave gives the same scores),
 * else (i, i + R/2). rot_offset + R <= head_dim. */
reel_tensor reel_rope_freq_part(reel_graph *g, reel_tensor x, reel_tensor positions, reel_tensor inv_freq, int head_dim,
                                int rot_offset, bool interleaved, float scale);
/* x [T, H*Dh], w [Dh]: reel_rmsnorm over each head's slice of Dh (Qwen3's
 * q_norm and k_norm). */
reel_tensor reel_rmsnorm_heads(reel_graph *g, reel_tensor x, reel_tensor w, float eps);
/* Row softmax of x [T, N]. */
reel_tensor reel_softmax(reel_graph *g, reel_tensor x);
/* Row argmax of x [T, N] -> [T] int32 (lowest index on ties; NaN never wins). */
reel_tensor reel_argmax(reel_graph *g, reel_tensor x);
/* Samples the next token of each row of logits [T, V] (f32, f16, bf16; V at
 * most REEL_SAMPLE_MAX_VOCAB) -> [T] int32, every row with its own
 * parameters and random stream, so one captured graph serves a batch of
 * mixed requests (docs/sampling.md).
 *  params [T, REEL_SAMPLE_PARAMS] f32, the columns REEL_SAMPLE_TEMPERATURE
 *   (0: greedy, the argmax), REEL_SAMPLE_TOP_P (1: off), REEL_SAMPLE_MIN_P
 *   (0: off) and REEL_SAMPLE_TOP_K (a whole number; 0: off).
 *  rng [T, REEL_SAMPLE_RNG] int32: seed low, seed high, counter low,
 *   counter high (64-bit seed and counter, as unsigned words). The row's
 *   uniform is Philox4x32-10 of (key = seed, counter = (counter, 0)) and
 *   depends on nothing else: the same seed, counter and logits give the same
 *   token at any batch position, in any bucket, replayed or eager. Advance
 *   the counter every step.
 * Kept set: tokens with p >= min_p * p_max, then the top_k largest logits,
 * then the fewest of those, highest first, whose probability (renormalized
 * over them) reaches top_p; equal logits rank by token id, lowest first, so
 * exactly top_k are kept. The draw is over the kept set by inverse CDF in
 * token order, with probabilities of softmax(logits / temperature) held as
 * 40-bit fixed point: tokens below 2^-40 of the row's most likely one are
 * never drawn. -inf logits are masked tokens. A row gives
 * REEL_SAMPLE_BAD_ROW instead of a token when its logits hold a NaN or
 * +inf, when every logit is -inf, or when its parameters are out of range:
 * temperature < 0 or not finite, top_p outside (0, 1], min_p outside
 * [0, 1), top_k < 0 or not a whole number. Both backends give the same
 * token bit for bit. */
#define REEL_SAMPLE_PARAMS 4
#define REEL_SAMPLE_TEMPERATURE 0
#define REEL_SAMPLE_TOP_P 1
#define REEL_SAMPLE_MIN_P 2
#define REEL_SAMPLE_TOP_K 3
#define REEL_SAMPLE_RNG 4
#define REEL_SAMPLE_BAD_ROW (-1)
#define REEL_SAMPLE_MAX_VOCAB (1 << 23)
reel_tensor reel_sample(reel_graph *g, reel_tensor logits, reel_tensor params, reel_tensor rng);
/* Columns [col, col + ncols) of x [T, N] -> [T, ncols]: how a fused
 * projection (one matmul to [T, (H + 2 Hkv) Dh]) is split into q, k and v.
 * Where every reader of x is such a view, the views tile x's columns, x is
 * a matmul's result and not a graph output, compile makes the matmul write
 * each view's columns as a block of their own and the views alias those
 * bytes: no copy, no kernel. Otherwise (or with no_fuse) a view is a copy. */
reel_tensor reel_view_cols(reel_graph *g, reel_tensor x, int64_t col, int64_t ncols);

#define REEL_ATTN_PARAMS_MAGIC REEL_MAGIC('r', 'a', 't', 'n')
typedef struct reel_attn_params {
    size_t size;               /* sizeof(reel_attn_params) of the caller's header */
    int version;               /* REEL_VERSION_NUMBER of the caller's header */
    uint32_t magic;            /* REEL_ATTN_PARAMS_MAGIC */
    int num_heads, num_kv_heads, head_dim, block_size;
    float scale; /* 0: 1/sqrt(head_dim) */
} reel_attn_params;
#define REEL_ATTN_PARAMS_HEAD REEL_STRUCT_HEAD(reel_attn_params, REEL_ATTN_PARAMS_MAGIC)
#define REEL_ATTN_PARAMS_INIT REEL_STRUCT_INIT(reel_attn_params, REEL_ATTN_PARAMS_MAGIC)
/* Paged attention for a mixed prefill/decode batch. q [T, H*Dh], k and v
 * [T, Hkv*Dh]; k_cache and v_cache are states [num_blocks, block_size, Hkv, Dh]
 * of q's dtype. For each token it first writes k and v into the slot that
 * the step's slot mapping gives (skipped for slot -1), then the token attends
 * causally over its sequence's cached context, positions 0 .. its own
 * position, through the sequence's block table. Result [T, H*Dh]. A context
 * longer than the plan's max_context is refused inside a captured graph
 * (REEL_E_LIMIT), never truncated. */
reel_tensor reel_paged_attention(reel_graph *g, reel_tensor q, reel_tensor k, reel_tensor v,
                                 reel_tensor k_cache, reel_tensor v_cache, const reel_attn_params *p);
/* Top-k over rows of scores [T, N] f32 with lengths [T] int32: positions at
 * or past a row's length count as NaN; NaN is never selected; -inf is a valid
 * candidate. A row with fewer than k candidates gives its valid indices, then
 * -1. With a page table [T, P] int32 (pass the invalid handle for none),
 * index i becomes page_table[i / page_size] * page_size + i % page_size;
 * -1 stays -1, and so does an index on a page whose entry is negative
 * (unmapped). The page table must be a graph input and cover N (P *
 * page_size >= N): the step checks it before anything runs, and a page
 * entry that would map a candidate (i < min(length, N)) past INT32_MAX
 * fails the step with REEL_E_LIMIT, no op run, no state written. Result
 * [T, k] int32, order of equal scores unspecified. */
reel_tensor reel_topk(reel_graph *g, reel_tensor scores, reel_tensor lengths, reel_tensor page_table,
                      int k, int page_size);
/* ---- multi-head latent attention (DeepSeek V2/V3, Kimi K2) ---- */

/* Per-head matmul over one weight: x [T, heads*Xs], w [heads*S, C] (the
 * rows of head h are h*S ..): y [T, heads*N] of x's dtype, where head h's
 * A_h = w rows [h*S + row_offset, + rows) and x_h = x[t, h*Xs + x_offset,
 * + K): y_h = A_h x_h (K = C, N = rows), or with transposed A_h^T x_h (K =
 * rows, N = C); sums in f32. DeepSeek's kv_b_proj [heads*(nope + v),
 * latent] holds both W_UK (row_offset 0, rows nope: transposed, the
 * absorbed query) and W_UV (row_offset nope, rows v: the value's
 * up-projection). */
reel_tensor reel_head_matmul(reel_graph *g, reel_tensor x, int x_offset, reel_tensor w, int row_offset, int rows,
                             bool transposed, int heads);
#define REEL_MLA_PARAMS_MAGIC REEL_MAGIC('r', 'm', 'l', 'a')
typedef struct reel_mla_params {
    size_t size;               /* sizeof(reel_mla_params) of the caller's header */
    int version;               /* REEL_VERSION_NUMBER of the caller's header */
    uint32_t magic;            /* REEL_MLA_PARAMS_MAGIC */
    int num_heads;             /* H */
    int latent_dim;            /* L: kv_lora_rank (512) */
    int rope_dim;              /* R: qk_rope_head_dim (64) */
    int block_size;            /* tokens per cache block */
    float scale;               /* > 0, required (DeepSeek: 1/sqrt(nope + rope), times yarn's mscale^2) */
} reel_mla_params;
#define REEL_MLA_PARAMS_HEAD REEL_STRUCT_HEAD(reel_mla_params, REEL_MLA_PARAMS_MAGIC)
#define REEL_MLA_PARAMS_INIT REEL_STRUCT_INIT(reel_mla_params, REEL_MLA_PARAMS_MAGIC)
/* Multi-head latent attention over a paged latent cache, absorbed form,
 * for a mixed prefill/decode batch: q_lat [T, H*L] (each head's no-rope
 * query times W_UK, reel_head_matmul), q [T, H*Dq] whose last R dims of
 * each head are the rotated rope query, c [T, L] (the normed latent) and
 * k_pe [T, R] (the rotated rope key), cache a state [num_blocks,
 * block_size, L + R] of q's dtype. Each token first writes [c | k_pe] into
 * the slot the step's slot mapping gives (skipped for -1), then attends
 * causally over its sequence's rows 0 .. its position through the block
 * table: score scale * (q_lat_h . row[0, L) + rope_h . row[L, L + R)),
 * value row[0, L). Result [T, H*L] (apply W_UV after: reel_head_matmul).
 * Limits as reel_paged_attention's. */
reel_tensor reel_mla_attention(reel_graph *g, reel_tensor q_lat, reel_tensor q, reel_tensor c, reel_tensor k_pe,
                               reel_tensor cache, const reel_mla_params *p);
/* reel_mla_attention over chosen rows (DeepSeek V3.2's sparse attention):
 * slots [T, k] int32, each token's physical cache slots (reel_topk's with a
 * page table: -1 for none), attended in list order instead of the causal
 * range; the caller makes them causal (lengths = position + 1). A token
 * with no slot gets zeros; a slot outside the cache gives zeros and
 * REEL_E_LIMIT. The writes are reel_mla_attention's. */
reel_tensor reel_mla_sparse_attention(reel_graph *g, reel_tensor q_lat, reel_tensor q, reel_tensor c, reel_tensor k_pe,
                                      reel_tensor cache, reel_tensor slots, const reel_mla_params *p);
/* ---- mixture of experts ---- */

#define REEL_MOE_MAX_EXPERTS 512
#define REEL_MOE_MAX_TOPK 16
typedef enum reel_moe_scoring {
    REEL_MOE_SOFTMAX = 0, /* Mixtral, Qwen2/3-MoE: softmax over the experts */
    REEL_MOE_SIGMOID = 1, /* DeepSeek V3: sigmoid per expert, choice biased */
} reel_moe_scoring;
#define REEL_MOE_PARAMS_MAGIC REEL_MAGIC('r', 'm', 'o', 'e')
typedef struct reel_moe_params {
    size_t size;               /* sizeof(reel_moe_params) of the caller's header */
    int version;               /* REEL_VERSION_NUMBER of the caller's header */
    uint32_t magic;            /* REEL_MOE_PARAMS_MAGIC */
    int num_experts;           /* E: 1 .. REEL_MOE_MAX_EXPERTS */
    int top_k;                 /* experts per token: 1 .. min(E, REEL_MOE_MAX_TOPK) */
    int scoring;               /* reel_moe_scoring */
    bool renormalize;          /* the k weights divided by their sum (+1e-20 with sigmoid) */
    int n_group, topk_group;   /* n_group > 1: groups of E / n_group experts, only the
                                  topk_group best kept (ranked by the sum of their top-2
                                  choice scores); undefined or 0: no groups */
    float routed_scaling;      /* multiplies the weights; undefined or 0: 1 */
} reel_moe_params;
#define REEL_MOE_PARAMS_HEAD REEL_STRUCT_HEAD(reel_moe_params, REEL_MOE_PARAMS_MAGIC)
#define REEL_MOE_PARAMS_INIT REEL_STRUCT_INIT(reel_moe_params, REEL_MOE_PARAMS_MAGIC)
/* The router: logits [T, E] (any float dtype, computed in f32) and an
 * optional choice bias [E] f32 (DeepSeek's e_score_correction_bias; the
 * invalid handle for none, allowed only with sigmoid) -> *ids [T, top_k]
 * int32 and *weights [T, top_k] f32. Scores are softmax(logits) or
 * sigmoid(logits); experts are chosen by score (+ bias), best first, equal
 * scores to the lower expert id, on every backend alike (ops/moe.h: the
 * same float operations on each); with groups, the experts outside the kept
 * groups count as choice score 0 with sigmoid (as DeepSeek V3 masks them)
 * and rank after every kept expert with softmax. The weights are the chosen
 * experts' scores (never the bias), renormalized and scaled as p says. */
reel_status reel_moe_route(reel_graph *g, reel_tensor logits, reel_tensor bias, const reel_moe_params *p,
                           reel_tensor *ids, reel_tensor *weights);
/* The routed experts' SwiGLU MLP: x [T, H] (f32, f16 or bf16), ids and
 * weights from reel_moe_route, w_gate_up [E * 2F, H] (expert e's gate rows
 * e*2F .. e*2F+F-1, then its up rows) and w_down [E * H, F] (expert e's rows
 * e*H ..), both x's dtype -> [T, H] of x's dtype: for each token the sum
 * over its k experts, in the order route gave them, of weight times
 * down(silu(gate(x)) * up(x)), gate and up rounded to x's dtype first, the
 * sum in f32. The token-expert pairs are sorted by expert into a layout of
 * T * k rows (the worst case, every pair on one expert, fits by
 * construction); each expert's weights are read once per step and an
 * expert no token chose is skipped, all on the device. Adds four nodes
 * (moe_align, moe_gate_up, moe_down, moe_combine). */
reel_tensor reel_moe_ffn(reel_graph *g, reel_tensor x, reel_tensor ids, reel_tensor weights, reel_tensor w_gate_up,
                         reel_tensor w_down, int num_experts);
/* Combines P partial attention results: outs [T, P, H*Dh], lses [T, P, H] f32
 * -> out [T, H*Dh] (outs' dtype) and lse [T, H] f32. An empty partial is
 * (0, -inf); +inf and NaN lse count as -inf; a zero-weight partial adds
 * exactly 0 even if its output is NaN; an all-empty row gives (0, -inf). */
reel_status reel_lse_combine(reel_graph *g, reel_tensor outs, reel_tensor lses, int num_heads,
                             reel_tensor *out, reel_tensor *lse);

/* ---- compile ------------------------------------------------------------ */

typedef struct reel_plan reel_plan;
typedef struct reel_comm reel_comm; /* reel/comm.h */

#define REEL_MAX_BUCKETS 16

#define REEL_COMPILE_OPTS_MAGIC REEL_MAGIC('r', 'c', 'm', 'p')
typedef struct reel_compile_opts {
    size_t size;               /* sizeof(reel_compile_opts) of the caller's header */
    int version;               /* REEL_VERSION_NUMBER of the caller's header */
    uint32_t magic;            /* REEL_COMPILE_OPTS_MAGIC */
    int num_buckets;                      /* undefined or 0: default {1,2,4,8,16,32,64} */
    int32_t buckets[REEL_MAX_BUCKETS];    /* ascending token counts to capture */
    int32_t max_context;                  /* per-sequence context limit of the graphs; undefined: 4096 */
    int32_t max_seqs;                     /* sequences per step in the graphs; undefined: 64 */
    /* Flags: nonzero for yes; undefined: no. */
    int strict;                           /* a fallback is an error, not an eager step */
    int no_capture;                       /* compile no graphs: every step eager (reason no bucket) */
    int check_hazards;                    /* run every step under the hazard checker */
    int pdl;                              /* programmatic dependent launch between kernels of
                                             one stream, where the device has it (CUDA): nonzero
                                             for every kernel that honours it, 0 for none;
                                             undefined: by grid size, for kernels of at most
                                             one wave (blocks <= multiprocessors, docs/fusion.md) */
    /* Appended in 0.1 (issue 10). */
    reel_comm *comm;                      /* this rank's communicator (reel/comm.h), borrowed:
                                             the plan holds a reference until destroyed.
                                             Required by a graph with collective ops;
                                             undefined (NULL): none */
    /* Appended in 0.1 (issue 8). */
    int no_fuse;                          /* nonzero: no fusion pass (docs/fusion.md): every op of
                                             the graph is its own kernel, for comparing fused and
                                             unfused results; undefined: fuse */
} reel_compile_opts;

#define REEL_COMPILE_OPTS_INIT                                                                         \
    { sizeof(reel_compile_opts), REEL_VERSION_NUMBER, REEL_COMPILE_OPTS_MAGIC, REEL_UNDEF_INT, {0},       \
      REEL_UNDEF_INT, REEL_UNDEF_INT, REEL_UNDEF_INT, REEL_UNDEF_INT, REEL_UNDEF_INT, REEL_UNDEF_INT, NULL, \
      REEL_UNDEF_INT }

/* Validates, orders, plans memory, selects kernels, allocates and captures
 * one graph per bucket. opts may be NULL. The graph is not consumed: it may
 * be destroyed after compile. Errors name the op and tensor at fault. */
reel_status reel_compile(reel_graph *g, const reel_compile_opts *opts, reel_plan **out);
void reel_plan_destroy(reel_plan *p);

/* ---- step --------------------------------------------------------------- */

/* Per-step metadata. Tokens of a sequence are contiguous:
 * sequence s owns tokens query_start[s] .. query_start[s+1]-1. A plan
 * without paged attention never reads the sequence arrays (they may be NULL
 * whatever num_seqs says); positions default to 0 when NULL. */
#define REEL_STEP_INFO_MAGIC REEL_MAGIC('r', 's', 't', 'p')
typedef struct reel_step_info {
    size_t size;               /* sizeof(reel_step_info) of the caller's header */
    int version;               /* REEL_VERSION_NUMBER of the caller's header */
    uint32_t magic;            /* REEL_STEP_INFO_MAGIC */
    int32_t num_tokens;
    int32_t num_seqs;
    const int32_t *query_start;   /* [num_seqs + 1] */
    const int32_t *positions;     /* [num_tokens] position of each token in its sequence */
    const int32_t *slot_mapping;  /* [num_tokens] KV slot to write, -1 for none */
    const int32_t *context_lens;  /* [num_seqs] context length after this step */
    const int32_t *block_tables;  /* [num_seqs][block_table_stride] */
    int32_t block_table_stride;
} reel_step_info;
#define REEL_STEP_INFO_HEAD REEL_STRUCT_HEAD(reel_step_info, REEL_STEP_INFO_MAGIC)
#define REEL_STEP_INFO_INIT REEL_STRUCT_INIT(reel_step_info, REEL_STEP_INFO_MAGIC)

typedef enum reel_fallback {
    REEL_FALLBACK_NONE = 0,          /* replayed */
    REEL_FALLBACK_NO_BUCKET,         /* the plan captured no graphs */
    REEL_FALLBACK_TOKENS_OVER_LIMIT, /* num_tokens > largest bucket */
    REEL_FALLBACK_SEQS_OVER_LIMIT,   /* num_seqs > max_seqs */
    REEL_FALLBACK_CONTEXT_OVER_LIMIT,/* a context length > max_context */
    REEL_FALLBACK_OP_NOT_CAPTURABLE, /* an op of the plan cannot be captured */
    REEL_FALLBACK_CAPTURE_FAILED,    /* capture of the bucket failed at compile */
    REEL_FALLBACK_COUNT
} reel_fallback;
const char *reel_fallback_str(reel_fallback f);

/* Copies rows of an input into the plan's staging buffer for the next step.
 * rows must equal the next step's num_tokens for token inputs (parameters of
 * the input's shape otherwise: rows 1 for inputs without a token dim). */
reel_status reel_plan_set_input(reel_plan *p, const char *name, const void *data, int64_t rows);
/* Runs one step: replays the smallest bucket >= num_tokens, or runs eagerly
 * with a counted reason (REEL_E_FALLBACK in strict mode). On return outputs
 * are readable. */
reel_status reel_step(reel_plan *p, const reel_step_info *s);
/* ---- device loop (docs/loop.md) ------------------------------------------ */

/* Up to max_steps decode steps in one call, with no host round trip between
 * them: where the backend has device loops (CUDA 12.4+: a conditional WHILE
 * node around the bucket's graph; the host backend), one launch. The token
 * a step samples (the output token_output, [T] int32) is the next step's
 * token input (token_input, [T] int32); positions and context lengths
 * advance by one and each KV slot comes from the block tables; the counter
 * of rng_input ([T, REEL_SAMPLE_RNG] int32, when named) advances by one. s
 * is the first step, set up as for reel_step (its inputs set with
 * reel_plan_set_input): a decode step of one token per sequence
 * (num_tokens = num_seqs, query_start[q] = q), whose block tables already
 * hold every block the sequences may reach (the call checks them all before
 * anything runs). Sequence q stops after a token in eos_ids (or the
 * sampler's REEL_SAMPLE_BAD_ROW) or after its max_new_tokens[q]-th token;
 * from then on it writes nothing to the KV cache. The call ends when every
 * sequence stopped or after max_steps steps.
 * Results: tokens[i * num_seqs + q], the token of sequence q at step i
 * (REEL_LOOP_NO_TOKEN once it stopped), and steps[q], how many it produced;
 * every output of the plan holds the last step's rows. Bit for bit the
 * tokens and states of the same steps taken one reel_step at a time.
 * Limits: a step of the loop runs in a bucket (never past the fixed limits:
 * REEL_E_LIMIT naming the limit); plans with collectives or a DCP layout
 * are refused (REEL_E_UNSUPPORTED). Without device loops (or with
 * check_hazards, or a bucket that cannot replay) the steps run one by one
 * from the host, the same kernels in the same layout; stats count which.
 * On CUDA the device loops are off until a GPU run has shown them: the
 * environment variable REEL_DEVICE_LOOP=1 turns them on (docs/loop.md). */
#define REEL_LOOP_INFO_MAGIC REEL_MAGIC('r', 'l', 'o', 'p')
#define REEL_LOOP_MAX_EOS 8
#define REEL_LOOP_NO_TOKEN (-2147483647 - 1)
typedef struct reel_loop_info {
    size_t size;               /* sizeof(reel_loop_info) of the caller's header */
    int version;               /* REEL_VERSION_NUMBER of the caller's header */
    uint32_t magic;            /* REEL_LOOP_INFO_MAGIC */
    const char *token_input;   /* required */
    const char *token_output;  /* required */
    const char *rng_input;     /* NULL: none */
    int32_t max_steps;         /* >= 1 */
    int32_t num_eos;           /* 0 .. REEL_LOOP_MAX_EOS */
    int32_t eos_ids[REEL_LOOP_MAX_EOS];
    const int32_t *max_new_tokens; /* [num_seqs], each >= 1; NULL: max_steps each */
    int32_t *tokens;           /* out: [max_steps * num_seqs] */
    int32_t *steps;            /* out: [num_seqs] */
} reel_loop_info;
#define REEL_LOOP_INFO_HEAD REEL_STRUCT_HEAD(reel_loop_info, REEL_LOOP_INFO_MAGIC)
#define REEL_LOOP_INFO_INIT REEL_STRUCT_INIT(reel_loop_info, REEL_LOOP_INFO_MAGIC)
reel_status reel_step_n(reel_plan *p, const reel_step_info *s, const reel_loop_info *loop);

/* A step's output (host memory owned by the plan, valid until the next step
 * or destroy), sliced to the step's num_tokens rows. */
reel_status reel_plan_output(reel_plan *p, const char *name, const void **data, int64_t *rows);
/* An output's element type and elements per token row (all elements for an
 * output without a token dimension). Valid from compile on. */
reel_status reel_plan_output_desc(const reel_plan *p, const char *name, reel_dtype *dtype, int64_t *row_elems);
/* Writes a deferred (or any) parameter. bytes must equal its size. */
reel_status reel_plan_write_param(reel_plan *p, const char *name, const void *data, size_t bytes);
/* Reads or writes a state tensor (for tests and cache transfer). */
reel_status reel_plan_read_state(reel_plan *p, const char *name, void *dst, size_t bytes);
reel_status reel_plan_write_state(reel_plan *p, const char *name, const void *src, size_t bytes);
/* Points a state tensor at caller-owned memory of exactly its size (device
 * memory; host memory on the host backend), e.g. one KV cache shared by a
 * prefill plan and a decode plan. The plan's own buffer is freed; the caller's
 * memory is borrowed until the plan is destroyed or the state bound again.
 * Only kernel parameters change: every captured graph is re-captured and
 * updated in place where the backend can (cudaGraphExecUpdate), replaced
 * otherwise; stats count both. A bucket whose re-capture fails never replays
 * its old graph again: it runs eagerly ("capture failed"), or, in strict
 * mode, the call fails. Waits for the plan's streams first. */
reel_status reel_plan_bind_state(reel_plan *p, const char *name, void *mem, size_t bytes);
/* Gives back the memory of eager steps past the fixed limits (the overflow
 * layout and the workspace allocator's cache): waits for the streams that
 * used it, then frees it. The next such step allocates again. */
reel_status reel_plan_trim(reel_plan *p);
/* Why the last step ran eagerly (REEL_FALLBACK_NONE if it replayed). */
reel_fallback reel_plan_last_fallback(const reel_plan *p);
/* Device time of steps, off by default. With on != 0, every following step
 * records a timing event on the plan's first stream just before its upload
 * and one after its download, before the host waits for it; the time
 * between them is what the device spent on the step: the upload, the replay
 * (or, eagerly, the kernels and the gaps while the host issued them), the
 * download. CUDA: cudaEventElapsedTime (about 0.5 us resolution); host
 * backend: the stream thread's clock as it reaches each event. Costs two
 * event records a step. REEL_E_UNSUPPORTED on a backend without timers.
 * Waits for the plan's streams first. */
reel_status reel_plan_time_steps(reel_plan *p, int on);
/* The device time of the last step, in microseconds. REEL_E_INVALID_USAGE
 * when timing is off, no step ran since it was turned on, or the last step
 * failed before its download. */
reel_status reel_plan_last_step_device_us(const reel_plan *p, double *us);

#define REEL_PLAN_STATS_MAGIC REEL_MAGIC('r', 's', 't', 's')
typedef struct reel_plan_stats {
    size_t size;               /* sizeof(reel_plan_stats) of the caller's header */
    int version;               /* REEL_VERSION_NUMBER of the caller's header */
    uint32_t magic;            /* REEL_PLAN_STATS_MAGIC */
    uint64_t steps, replays, eager_steps;
    uint64_t eager_by_reason[REEL_FALLBACK_COUNT];
    uint64_t op_dispatches;          /* executor kernel dispatches (eager path and capture) */
    uint64_t graphs_captured, graph_updates, graph_reinstantiations;
    int num_buckets;
    int32_t buckets[REEL_MAX_BUCKETS];
    size_t arena_bytes;                              /* shared by all buckets */
    size_t bucket_arena_bytes[REEL_MAX_BUCKETS];     /* planned per bucket */
    size_t bucket_lower_bound[REEL_MAX_BUCKETS];     /* per bucket: peak, over the points between
                                                        two ops, of bytes produced before and
                                                        needed after (reachable only if every op
                                                        could work in place) */
    size_t bucket_node_bound[REEL_MAX_BUCKETS];      /* per bucket: peak, over ops, of bytes that
                                                        must coexist at an op (its inputs, outputs
                                                        and what lives across it; an in-place pair
                                                        once): no plan goes below it */
    size_t static_bytes, param_bytes, state_bytes;
    int num_nodes, num_streams;
    double compile_ms, capture_ms;
    uint64_t hazards;                /* found by the hazard checker (check_hazards) */
    size_t workspace_bytes;          /* device bytes held by the workspace allocator (eager
                                        steps past the limits take their arena there) */
    size_t workspace_peak;           /* most workspace bytes handed out at once */
    /* Appended in 0.1 (issue 47): reel_step_n. */
    uint64_t loop_calls;             /* reel_step_n calls that ran */
    uint64_t loop_steps;             /* steps they ran (each also counts in steps) */
    uint64_t loop_device_calls;      /* ... of them, as one launch of a loop graph */
    uint64_t loop_graphs_captured;   /* loop graphs built (one per bucket, at first use) */
    size_t loop_bytes;               /* device bytes of the loop's control and token buffers
                                        (outside the arena) */
} reel_plan_stats;
#define REEL_PLAN_STATS_HEAD REEL_STRUCT_HEAD(reel_plan_stats, REEL_PLAN_STATS_MAGIC)
#define REEL_PLAN_STATS_INIT REEL_STRUCT_INIT(reel_plan_stats, REEL_PLAN_STATS_MAGIC)
/* Fills out (initialised with REEL_PLAN_STATS_INIT) up to its size. */
reel_status reel_plan_stats_get(const reel_plan *p, reel_plan_stats *out);

/* Where one activation lives in a bucket's memory plan. */
#define REEL_PLACEMENT_MAGIC REEL_MAGIC('r', 'p', 'l', 'c')
typedef struct reel_placement {
    size_t size;               /* sizeof(reel_placement) of the caller's header */
    int version;               /* REEL_VERSION_NUMBER of the caller's header */
    uint32_t magic;            /* REEL_PLACEMENT_MAGIC */
    const char *name;      /* owned by the plan */
    int stream;            /* stream of its producer */
    int first, last;       /* schedule positions of its producer and last reader
                              (num_nodes: read back as an output) */
    size_t offset, bytes;  /* in the arena */
} reel_placement;
#define REEL_PLACEMENT_HEAD REEL_STRUCT_HEAD(reel_placement, REEL_PLACEMENT_MAGIC)
#define REEL_PLACEMENT_INIT REEL_STRUCT_INIT(reel_placement, REEL_PLACEMENT_MAGIC)
/* The i-th activation (0-based, build order) of bucket b's plan;
 * REEL_E_NOT_FOUND past the last one or for a bucket out of range. */
reel_status reel_plan_placement(const reel_plan *p, int bucket, int i, reel_placement *out);

/* ---- observability ------------------------------------------------------ */

/* Result structs (reel_plan_stats, reel_placement, reel_node_info,
 * reel_plan_memory, reel_op_span) follow the head rule above the other way
 * round: initialise with the _INIT macro; the library fills only the fields
 * the caller's struct has. */

/* The library never prints. A log hook gets a few events worth a line:
 * at compile, each phase as it ends (INFO: kernels chosen, parameters and
 * states allocated, each bucket laid out with its arena; DEBUG: the memory
 * planner's figures per bucket), the warm-up announced before it runs and
 * when done, each bucket captured (INFO) or failed (WARN); each eager step
 * and its reason (DEBUG), each graph updated or re-instantiated by
 * reel_plan_bind_state (INFO). Called on the thread making the reel call,
 * never from a stream's worker; msg is valid during the call only. */
typedef enum reel_log_level { REEL_LOG_DEBUG = 0, REEL_LOG_INFO, REEL_LOG_WARN, REEL_LOG_ERROR } reel_log_level;
typedef void (*reel_log_fn)(void *user, reel_log_level level, const char *msg);
/* Events at min_level and above go to fn (NULL: none, the default). Set it
 * while no other thread uses the context. */
reel_status reel_set_log_hook(reel_ctx *ctx, reel_log_fn fn, void *user, reel_log_level min_level);

#define REEL_NODE_MAX_IN 6
#define REEL_NODE_MAX_OUT 2
/* One node of the plan, in schedule order. */
#define REEL_NODE_INFO_MAGIC REEL_MAGIC('r', 'n', 'o', 'd')
typedef struct reel_node_info {
    size_t size;               /* sizeof(reel_node_info) of the caller's header */
    int version;               /* REEL_VERSION_NUMBER of the caller's header */
    uint32_t magic;            /* REEL_NODE_INFO_MAGIC */
    const char *op;                       /* "matmul"; static */
    const char *name;                     /* its first output's name; owned by the plan */
    int stream;
    const char *kernel;                   /* the registry's choice, "host.matmul.ref"; static */
    int priority;                         /* of that kernel */
    int capturable, inplace_ok, pdl;      /* of that kernel; pdl: launched with PDL (largest bucket) */
    int nin, nout;
    const char *in[REEL_NODE_MAX_IN];     /* operand names (NULL: an absent optional operand) */
    const char *in_kind[REEL_NODE_MAX_IN];/* "act", "input", "param", "state", "positions" */
    int in_node[REEL_NODE_MAX_IN];        /* schedule position of an act's producer; -1 otherwise */
    const char *out[REEL_NODE_MAX_OUT];
    int is_output[REEL_NODE_MAX_OUT];     /* read back as a graph output */
    char why[320];                        /* why that kernel: the impls the registry has for the op,
                                             which refused the node's shapes and which lost on priority */
    const char *output_name[REEL_NODE_MAX_OUT]; /* the graph output's name (reel_output), NULL if none */
    /* Appended in 0.1 (issue 8). */
    const char *fused;                    /* what the fusion pass folded into this node, "" if
                                             nothing: "add+rmsnorm", "matmul+add(bias)",
                                             "matmul+silu_and_mul", "matmul->3 views"; owned by the plan */
} reel_node_info;
#define REEL_NODE_INFO_HEAD REEL_STRUCT_HEAD(reel_node_info, REEL_NODE_INFO_MAGIC)
#define REEL_NODE_INFO_INIT REEL_STRUCT_INIT(reel_node_info, REEL_NODE_INFO_MAGIC)
/* Node i (0 .. num_nodes-1 of the stats, schedule order). REEL_E_NOT_FOUND
 * past the last node; REEL_E_VERSION for a struct not initialised. */
reel_status reel_plan_node_info(const reel_plan *p, int i, reel_node_info *out);
/* Kernel launches in bucket b's captured graph (CUDA: its kernel nodes;
 * host: its kernel items), what one replay runs. REEL_E_NOT_FOUND for a
 * bucket out of range or not captured. */
reel_status reel_plan_graph_kernels(const reel_plan *p, int bucket, int *kernels);

/* The plan's own memory, known right after compile: what a serving stack
 * subtracts before it sizes a KV cache (states, the KV caches among them,
 * are listed apart). */
#define REEL_PLAN_MEMORY_MAGIC REEL_MAGIC('r', 'm', 'e', 'm')
typedef struct reel_plan_memory {
    size_t size;               /* sizeof(reel_plan_memory) of the caller's header */
    int version;               /* REEL_VERSION_NUMBER of the caller's header */
    uint32_t magic;            /* REEL_PLAN_MEMORY_MAGIC */
    int num_buckets;
    size_t arena_bytes;                   /* device: activations, shared by all buckets */
    size_t static_bytes;                  /* device: the step region (inputs, metadata) */
    size_t pinned_bytes;                  /* pinned host: the step region's staging, the outputs */
    size_t param_bytes, state_bytes;      /* device: parameters; states (bound ones included) */
    int graph_bytes_known;                /* the backend reports graph memory (host: yes, 0) */
    size_t graph_bytes;                   /* device memory of the captured graphs, where known */
    size_t device_bytes;                  /* arena + static + graphs + stream workspaces: the
                                             library's device memory besides params and states
                                             (and the workspace of eager steps past the limits) */
    size_t bucket_arena_bytes[REEL_MAX_BUCKETS];  /* planned per bucket */
    size_t bucket_graph_bytes[REEL_MAX_BUCKETS];  /* per captured bucket, where known */
    size_t bucket_device_bytes[REEL_MAX_BUCKETS]; /* replaying bucket b alone: its arena, the
                                                     static region, its graph */
    size_t stream_ws_bytes;               /* device: the streams' kernel workspaces held now (CUDA:
                                             the matmul workspace a stream takes at its first
                                             matmul, in the warm-up of a plan with graphs, at the
                                             first step of one without; sized at compile from the
                                             plan's shapes) */
} reel_plan_memory;
#define REEL_PLAN_MEMORY_HEAD REEL_STRUCT_HEAD(reel_plan_memory, REEL_PLAN_MEMORY_MAGIC)
#define REEL_PLAN_MEMORY_INIT REEL_STRUCT_INIT(reel_plan_memory, REEL_PLAN_MEMORY_MAGIC)
reel_status reel_plan_memory_get(const reel_plan *p, reel_plan_memory *out);
/* What reel_compile(g, opts) would allocate, without allocating it: the
 * graph is checked, ordered and laid out as compile does, then stopped
 * before the memory budget. Fills out's num_buckets, arena_bytes,
 * static_bytes, pinned_bytes (the step region's staging and the outputs of
 * the largest bucket), param_bytes, state_bytes, bucket_arena_bytes,
 * stream_ws_bytes (the workspaces the streams would reserve) and
 * device_bytes (arena + static + stream workspaces); graph bytes are 0
 * (not known before capture). How a serving stack sizes a KV cache: estimate
 * with a small cache, then spend what reel_ctx_memory leaves. Errors as
 * reel_compile's, except that the budget is not checked. */
reel_status reel_compile_estimate(reel_graph *g, const reel_compile_opts *opts, reel_plan_memory *out);

/* Op spans: the start and end of each kernel on its stream, for traces.
 * Host backend: taken on the stream's worker thread around each kernel
 * (replayed or eager), CLOCK_MONOTONIC in microseconds. CUDA: each kernel of
 * an eager step, timed with CUDA events (reel_plan_trace_ops). */
#define REEL_OP_SPAN_MAGIC REEL_MAGIC('r', 's', 'p', 'n')
typedef struct reel_op_span {
    size_t size;               /* sizeof(reel_op_span) of the caller's header */
    int version;               /* REEL_VERSION_NUMBER of the caller's header */
    uint32_t magic;            /* REEL_OP_SPAN_MAGIC */
    int node;                             /* schedule position */
    int stream;
    double start_us, end_us;              /* CLOCK_MONOTONIC */
} reel_op_span;
#define REEL_OP_SPAN_HEAD REEL_STRUCT_HEAD(reel_op_span, REEL_OP_SPAN_MAGIC)
#define REEL_OP_SPAN_INIT REEL_STRUCT_INIT(reel_op_span, REEL_OP_SPAN_MAGIC)
/* Starts (on != 0) or stops recording op spans of the following steps. On
 * the host backend every op of every step (replays included); on CUDA the
 * ops of eager steps, timed with CUDA events (a replay's kernels run inside
 * one graph launch and are not timed one by one). */
reel_status reel_plan_trace_ops(reel_plan *p, int on);
/* Moves up to cap recorded spans into buf (oldest first) and sets *n; call
 * after a step (its kernels are done when reel_step returns). buf[0] must be
 * initialised with REEL_OP_SPAN_INIT: its size is the stride of buf, and
 * every span written gets the head. */
reel_status reel_plan_take_op_spans(reel_plan *p, reel_op_span *buf, int cap, int *n);

#ifdef __cplusplus
}
#endif

/* The allocator-safety API (hazard checker) lives in its own header, and
 * so do communicators and collective ops, and the CP and DCP layouts of
 * attention. */
#include "reel/memory.h"
#include "reel/comm.h"
#include "reel/parallel.h"

#endif /* REEL_REEL_H */
