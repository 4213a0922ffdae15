/* The decode step side by side with PyTorch (bench/torch_model.py): reel's
 * half, and the reel columns of the decode matrix (`bench/gpu.sh matrix`).
 * A Llama-style model (default: 8 layers, hidden 1024, 16 heads, 16 kv
 * heads, SwiGLU ffn 4 x hidden, vocab 32000, bf16, rmsnorm eps 1e-5, rope
 * theta 10000, untied embeddings, no biases, paged KV cache in blocks of
 * 16; --qkv-bias: q/k/v biases, as Qwen2 has; --tied: tied embeddings) is
 * built by the library's models layer (include/reel/models.h, the one Llama
 * definition of the tree; public API only) from a Hugging Face checkpoint
 * (config.json and model.safetensors, the names transformers writes): by
 * default one bench_decode writes first from a fixed seed (DIR/model), with
 * --model an existing one; every parameter is written from the checkpoint's
 * mapped bytes (reel_model_bind: the fused q/k/v and gate/up from its
 * tensors one after another), inside the timed compile. For each context C:
 *   1. three plans share one KV cache (reel_plan_bind_state): "replay"
 *      (buckets = the batch list, one graph each), "eager" (no graphs, every
 *      op dispatched) and "logits" (eager, also outputs the logits); their
 *      compile time, the replay plan's memory (reel_plan_memory_get, and on
 *      CUDA the device memory it took, cudaMemGetInfo, and the graph-memory
 *      attributes) are written down;
 *   2. the largest batch's sequences are prefilled to C tokens (eager steps
 *      of at most --prefill-tokens tokens; the prompt token of sequence s at
 *      position p is bench_token(seed, s, p), below);
 *   3. for each batch B (sequences 0 .. B-1): --warmup + --steps decode
 *      steps, step i at position C + i for every sequence, fed the prompt
 *      token there (teacher forcing: both programs see the same inputs
 *      whatever they predict), each timed as a serving loop pays it (fill
 *      the metadata, set the token ids, reel_step, read the next ids back:
 *      host wall clock) and on the device (reel_plan_time_steps: upload,
 *      replay or kernels, download); on the replay plan, then on the eager
 *      plan; then the first step once more on the logits plan, whose logits
 *      are written for the PyTorch side. Each run writes positions C .. C+N-1
 *      before it reads them, so runs sharing the cache see the same keys.
 *
 * Files written into --dir (default /tmp/reel-decode):
 *   model/           the seeded checkpoint (not with --model): config.json
 *                    (model_type llama, or qwen2 with --qkv-bias; bf16;
 *                    with --shape the real model's keys) and
 *                    model.safetensors, tensors in PyTorch's nn.Linear layout
 *                    ([out, in], used by reel through matmul's w_transposed):
 *                      model.embed_tokens.weight [vocab, hidden]
 *                      model.layers.<i>.input_layernorm.weight [hidden]
 *                      model.layers.<i>.self_attn.q_proj.weight [heads*hd, hidden]
 *                        k_proj, v_proj [kv*hd, hidden], o_proj [hidden, heads*hd]
 *                      model.layers.<i>.post_attention_layernorm.weight [hidden]
 *                      model.layers.<i>.mlp.gate_proj.weight [ffn, hidden],
 *                        up_proj [ffn, hidden] (silu(x G^T) * (x U^T)),
 *                        down_proj [hidden, ffn]
 *                      with --qkv-bias q_proj.bias [heads*hd], k_proj.bias,
 *                        v_proj.bias [kv*hd]
 *                      model.norm.weight [hidden], lm_head.weight [vocab, hidden]
 *                        (none with --tied: the lm head is the embedding table)
 *                    a MoE shape's layers (--shape qwen3-30b-a3b: model_type
 *                    qwen3_moe; mixtral-8x7b: mixtral) have, instead of
 *                    mlp.{gate,up,down}_proj, the router and every expert:
 *                      qwen3_moe  mlp.gate.weight [experts, hidden],
 *                                 mlp.experts.<e>.gate_proj.weight [F, hidden],
 *                                 up_proj [F, hidden], down_proj [hidden, F]
 *                                 (F: moe_intermediate_size), and
 *                                 self_attn.q_norm.weight, k_norm [head_dim]
 *                      mixtral    block_sparse_moe.gate.weight [experts, hidden],
 *                                 block_sparse_moe.experts.<e>.w1.weight (gate)
 *                                 [ffn, hidden], w3 (up) [ffn, hidden], w2
 *                                 (down) [hidden, ffn]
 *   reel_decode.txt  "config" (the model, its experts, steps, backend;
 *                    last, model=<the checkpoint's absolute path>), one "plan"
 *                    line per context (compile, capture, memory), one "case"
 *                    line per (B, C) (medians of wall and device time, the
 *                    floor and floor_all: below), and one
 *                    "tokens" line per decode step with the B next ids
 *                    (argmax) of the replay plan
 *   logits_b<B>_c<C>.f32  [B, vocab] float32 logits of the first decode step
 *
 * The seeded weights: each tensor uniform in [center - scale, center + scale]
 * from a stream of the seed and a name of its own (make_weights), so the same
 * seed gives the same checkpoint.
 *
 * bench_token(seed, s, p) = splitmix64_mix(seed ^ (s << 32) ^ p) % vocab with
 * splitmix64_mix(x): z = x + 0x9E3779B97F4A7C15; z = (z ^ z >> 30) *
 * 0xBF58476D1CE4E5B9; z = (z ^ z >> 27) * 0x94D049BB133111EB; z ^ z >> 31
 * (all mod 2^64); seed is --seed + 1.
 *
 * The floor of each point: (weights read + K/V read) / the copy bandwidth
 * measured at the start of the run (a 512 MiB device-to-device cudaMemcpy,
 * read + written bytes over its median time; 4.25 TB/s, the H200's figure,
 * on the host backend, where the floor means nothing), weights read = every
 * parameter but the embedding table, plus B of its rows; K/V read = layers *
 * 2 * B * (C + 1) * kv_heads * head_dim * 2 bytes. A MoE model has two
 * (the step's routing is not seen from here): floor_us (printed first, and
 * replay / floor's) reads the dense weights (attention, norms, routers, the
 * lm head, B embedding rows) and, in each MoE layer, the experts B tokens
 * are expected to choose when each chooses k of E uniformly, E (1 - (1 -
 * k/E)^B) (exactly k at B = 1: the floor); floor_all_us reads every
 * expert (an upper bound, equal to it once B is large). The seeded routers
 * are random like the other weights, so tokens do spread over the experts
 * about uniformly, but not exactly: the expected count is an estimate.
 *
 * Runs on any backend (--backend host, or REEL_BACKEND=host, at small sizes
 * for debugging):
 *   bench_decode [--shape NAME --layers N --hidden N --heads N --kv-heads N
 *                 --ffn N --vocab N --batches 1,8,64 --contexts 128,2048
 *                 --steps 50 --warmup 10 --prefill-tokens 4096 --seed 1
 *                 --dir DIR --no-eager --no-logits --matmul-tuning
 *                 --max-context N --qkv-bias --tied --backend auto|host|cuda
 *                 --fit-only --one-plan --model CHECKPOINT_DIR --experts N
 *                 --experts-per-token N --expert-ffn N]
 * (--ffn 0: 4 x hidden. --max-context: the plans' limit and the blocks a
 * sequence's table holds, at least N; by default what the context and the
 * steps reach. A larger one is what a server sized for its longest request
 * runs short contexts at. --model: an existing bf16 checkpoint of a family
 * the library's models layer builds (include/reel/models.h: Llama, Mistral,
 * Qwen2, Qwen3, Qwen3-MoE, Mixtral, rope scaling included), opened and checked by
 * reel_model_open: the model's sizes, biases, norms and tied embeddings come
 * from its config.json, what the layer does not build is refused with the
 * key named, a size flag given beside it must agree, every tensor's dtype
 * and shape are checked, and --seed then only picks the prompt tokens.)
 *
 * --shape: the seeded checkpoint at a real model's sizes and config.json
 * (issue 48; size flags given beside it override its sizes):
 *   toy           8 layers, hidden 1024, 16 / 16 heads of 64, ffn 4096,
 *                 vocab 32000, untied, rope theta 10000 (the default)
 *   llama-3.2-1b  16 layers, hidden 2048, 32 / 8 heads of 64, ffn 8192,
 *                 vocab 128256, tied, eps 1e-5, rope theta 500000 with
 *                 rope_scaling llama3 (factor 32, low 1, high 4, original
 *                 8192), max_position_embeddings 131072
 *   llama-3.1-8b  32 layers, hidden 4096, 32 / 8 heads of 128, ffn 14336,
 *                 vocab 128256, untied, llama3 rope (factor 8, low 1, high
 *                 4, original 8192, theta 500000)
 *   qwen2.5-7b    model_type qwen2: 28 layers, hidden 3584, 28 / 4 heads of
 *                 128, ffn 18944, vocab 152064, untied, q/k/v biases, eps
 *                 1e-6, rope theta 1e6, no sliding window
 *   qwen3-30b-a3b model_type qwen3_moe (issue 44): 16 of the real 48 layers,
 *                 hidden 2048, 32 / 4 heads of 128 with q/k norms, 128
 *                 experts of moe_intermediate_size 768 in every layer, 8 a
 *                 token, norm_topk_prob true, intermediate_size 6144 (unused:
 *                 no dense layer), vocab 151936, untied, eps 1e-6, rope
 *                 theta 1e6, max_position_embeddings 40960. 1.25 GB a layer:
 *                 16 layers hold two plans' weights and batch 64's KV cache
 *                 at context 2048 in 54 GB; 24 is the most an 80 GB H100 fits
 *                 (--help)
 *   mixtral-8x7b  model_type mixtral: 4 of the real 32 layers, hidden 4096,
 *                 32 / 8 heads of 128, 8 experts of ffn 14336, 2 a token
 *                 (always renormalized), vocab 32000, untied, eps 1e-5, rope
 *                 theta 1e6, no sliding window. 2.9 GB a layer: 31 GB at
 *                 batch 64, context 2048; 11 layers at most on an H100
 * --experts N, --experts-per-token N, --expert-ffn N size a MoE shape (with
 * the other size flags, a small model of the same family for the host); a
 * MoE shape is every layer sparse, without --qkv-bias.
 * Their weights are written fast: each tensor's stream is counter-based
 * (element i is mixed from seed state + (i + 1) x the golden ratio), so
 * threads fill 4M-element pieces of every tensor at once (one a CPU) and
 * the bytes are those one thread writes; the file is written by
 * reel_safetensors_save.
 *
 * Device memory: before a context's plans are compiled, the library says
 * what they take (reel_compile_estimate of the replay plan: parameters, KV
 * states, arena, step region, stream workspaces; nothing allocated) and
 * what is free (reel_ctx_memory). A context needs the shared KV cache, each
 * plan's parameters and workspaces, and either the last plan's own KV states
 * while it compiles (compile allocates them, reel_plan_bind_state frees them
 * for the shared cache) or the prefill's eager workspace, whichever is
 * larger, plus 1 GiB + 2% of the device for what no estimate sees (graphs,
 * cuBLAS, fragmentation). The largest batches that do not fit are dropped
 * from that context, each with a "skip" line in reel_decode.txt and a row
 * saying so in the table (an out-of-memory error at allocation or compile
 * drops the largest batch the same way and tries again), never a crash.
 * reel_model_kv_blocks's figure (the tokens one plan's KV cache could hold
 * on this device) is printed beside it. REEL_BENCH_FREE_GB=N: the check
 * takes N GB as free (what a smaller card would skip). --fit-only: the
 * check alone, from config.json (reel_model_parse; the seeded model's
 * weights are not written), a row a point; nothing compiled or run.
 * --one-plan: the replay plan alone, over the KV states it allocates at
 * compile (no shared cache, no eager or logits plan: the prefill runs on it
 * eagerly, and there are no logits for torch_model.py to check), so a
 * context needs its KV cache once and one copy of the weights: the largest
 * batches the card holds, as a server with one plan would.
 *
 * Exits 1 when replay and eager disagree on an id or a timed step did not
 * replay.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "reel/models.h"
#include "reel/reel.h"
#include "reel/safetensors.h"

#ifdef BENCH_CUDA
#include <cuda_runtime_api.h>
#endif

#define FLOOR_TBPS_UNMEASURED 4.25
#define MAX_LIST 12

/* The real shapes of issues 48 and 44, written as seeded checkpoints (--shape). */
enum { SH_DENSE = 0, SH_QWEN3_MOE, SH_MIXTRAL }; /* the checkpoint's family: llama / qwen2, or a MoE one */

typedef struct shape {
    const char *name;
    int layers, hidden, heads, kv_heads, head_dim, ffn, vocab;
    bool tied, qkv_bias;
    float eps, theta;
    int max_pos;                  /* max_position_embeddings (0: what the run reaches, at least 65536) */
    double rope_factor;           /* rope_scaling llama3's factor; 0: no rope scaling */
    double rope_low, rope_high;   /* its low_freq_factor and high_freq_factor */
    int rope_orig;                /* its original_max_position_embeddings */
    int moe;                      /* SH_DENSE, SH_QWEN3_MOE or SH_MIXTRAL */
    int real_layers;              /* the real model's layers (MoE shapes run fewer: `layers`) */
    int experts, topk, moe_ffn;   /* routed experts, experts a token, an expert's ffn (Mixtral: ffn) */
    bool norm_topk, qk_norm;      /* norm_topk_prob (Mixtral: always); Qwen3's per-head q and k norms */
} shape;

static const shape SHAPES[] = {
    {.name = "toy", .layers = 8, .hidden = 1024, .heads = 16, .kv_heads = 16, .head_dim = 64, .ffn = 4096,
     .vocab = 32000, .eps = 1e-5f, .theta = 10000.0f},
    {.name = "llama-3.2-1b", .layers = 16, .hidden = 2048, .heads = 32, .kv_heads = 8, .head_dim = 64, .ffn = 8192,
     .vocab = 128256, .tied = true, .eps = 1e-5f, .theta = 500000.0f, .max_pos = 131072, .rope_factor = 32.0,
     .rope_low = 1.0, .rope_high = 4.0, .rope_orig = 8192},
    {.name = "llama-3.1-8b", .layers = 32, .hidden = 4096, .heads = 32, .kv_heads = 8, .head_dim = 128,
     .ffn = 14336, .vocab = 128256, .eps = 1e-5f, .theta = 500000.0f, .max_pos = 131072, .rope_factor = 8.0,
     .rope_low = 1.0, .rope_high = 4.0, .rope_orig = 8192},
    {.name = "qwen2.5-7b", .layers = 28, .hidden = 3584, .heads = 28, .kv_heads = 4, .head_dim = 128, .ffn = 18944,
     .vocab = 152064, .qkv_bias = true, .eps = 1e-6f, .theta = 1000000.0f, .max_pos = 131072},
    /* issue 44: layers reduced (see the top) */
    {.name = "qwen3-30b-a3b", .layers = 16, .hidden = 2048, .heads = 32, .kv_heads = 4, .head_dim = 128,
     .ffn = 6144, .vocab = 151936, .eps = 1e-6f, .theta = 1000000.0f, .max_pos = 40960, .moe = SH_QWEN3_MOE,
     .real_layers = 48, .experts = 128, .topk = 8, .moe_ffn = 768, .norm_topk = true, .qk_norm = true},
    {.name = "mixtral-8x7b", .layers = 4, .hidden = 4096, .heads = 32, .kv_heads = 8, .head_dim = 128,
     .ffn = 14336, .vocab = 32000, .eps = 1e-5f, .theta = 1000000.0f, .max_pos = 32768, .moe = SH_MIXTRAL,
     .real_layers = 32, .experts = 8, .topk = 2, .moe_ffn = 14336, .norm_topk = true},
};
#define NSHAPES ((int)(sizeof SHAPES / sizeof SHAPES[0]))

typedef struct cfg {
    int layers, hidden, heads, kv_heads, ffn, vocab, block_size;
    float eps, theta;
    const shape *shape;          /* --shape (NULL: none, the toy's sizes) */
    int backend;                 /* --backend: a reel_backend_kind (REEL_BACKEND_AUTO: REEL_BACKEND or auto) */
    uint64_t seed;
    int batches[MAX_LIST], nbatches;
    int contexts[MAX_LIST], ncontexts;
    int loops[MAX_LIST], nloops;     /* --loop: reel_step_n's max_steps to time (0 entries: off) */
    int steps, warmup, prefill_tokens, max_context;
    bool eager, logits, tuning;
    bool qkv_bias, o_bias, tied; /* the checkpoint's biases and tied embeddings */
    bool qk_norm;                /* the checkpoint's per-head q and k norms (Qwen3) */
    int moe;                     /* the seeded checkpoint's family: SH_DENSE, SH_QWEN3_MOE, SH_MIXTRAL */
    int experts, topk, moe_ffn;  /* routed experts a MoE layer, chosen a token, an expert's ffn (0: dense) */
    int moe_layers;              /* layers with experts (the others have the dense MLP of ffn) */
    bool norm_topk;              /* the seeded checkpoint's norm_topk_prob */
    int hd;                      /* the checkpoint's head dim (0: hidden / heads, the seeded model's) */
    int rope_type;               /* the checkpoint's (a reel_rope_type) and its factor */
    double rope_factor;
    const char *dir;
    const char *model;  /* --model: an existing checkpoint; NULL: the seeded one */
    bool fit_only;      /* --fit-only: say which points fit, run nothing */
    bool one_plan;      /* --one-plan: the replay plan alone, over its own KV cache */
} cfg;

static int head_dim(const cfg *c) { return c->hd ? c->hd : c->hidden / c->heads; }

static reel_ctx *g_ctx;
static double g_floor_tbps = FLOOR_TBPS_UNMEASURED;
static bool g_floor_measured;


static void die(const char *what, reel_status st)
{
    fprintf(stderr, "bench_decode: %s: %s: %s\n", what, reel_status_str(st), reel_ctx_last_error(g_ctx));
    exit(1);
}

#define RK(what, call)                       \
    do {                                     \
        reel_status s_ = (call);             \
        if (s_ != REEL_OK) die((what), s_);  \
    } while (0)

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "bench_decode: out of host memory (%zu bytes)\n", n);
        exit(1);
    }
    return p;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* ---- seeded numbers ------------------------------------------------------- */

static uint64_t mix64(uint64_t x)
{
    uint64_t z = x + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static int32_t bench_token(const cfg *c, int s, int p)
{
    return (int32_t)(mix64((c->seed + 1) ^ ((uint64_t)s << 32) ^ (uint64_t)p) % (uint64_t)c->vocab);
}

static uint16_t f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static float bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* ---- the seeded checkpoint ------------------------------------------------ */

typedef struct wtensor {
    char name[48];
    int ndim;
    int64_t dims[2];
    size_t n;
    uint16_t *data; /* bf16 */
    uint64_t st0;   /* its stream's state before the first element */
    float center, scale;
} wtensor;

typedef struct weights {
    wtensor *t;
    int n, cap;
} weights;

/* Uniform in [center - scale, center + scale], from a stream that depends on
 * the seed and the tensor's name only. Allocated here, filled by
 * fill_weights. */
static void add_tensor(weights *w, const cfg *c, const char *name, int ndim, int64_t d0, int64_t d1,
                       float center, float scale)
{
    if (w->n == w->cap) {
        w->cap = w->cap ? 2 * w->cap : 64;
        w->t = realloc(w->t, (size_t)w->cap * sizeof *w->t);
        if (!w->t) die("weights", REEL_E_OOM);
    }
    wtensor *t = &w->t[w->n++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ndim = ndim;
    t->dims[0] = d0;
    t->dims[1] = ndim > 1 ? d1 : 1;
    t->n = (size_t)(d0 * t->dims[1]);
    t->data = xmalloc(t->n * 2);
    uint64_t h = 0xcbf29ce484222325ull;
    for (const char *s = name; *s; s++) h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
    t->st0 = mix64(c->seed ^ h);
    t->center = center;
    t->scale = scale;
}

/* Elements [from, to) of t. The stream is splitmix64: element i is the mix
 * of st0 + (i + 1) x the golden ratio, so a piece starts anywhere and the
 * bytes do not depend on how the tensor is cut. (z >> 11 < 2^53: the signed
 * conversion gives the same double, and is one instruction.) */
static void fill_range(wtensor *t, size_t from, size_t to)
{
    const uint64_t golden = 0x9E3779B97F4A7C15ull;
    const float center = t->center, scale = t->scale;
    uint64_t st = t->st0 + (uint64_t)from * golden;
    uint16_t *out = t->data;
    for (size_t i = from; i < to; i++) {
        st += golden;
        uint64_t z = st;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        double u = (double)(int64_t)(z >> 11) * (1.0 / 9007199254740992.0);
        out[i] = f32_to_bf16(center + scale * (float)(2.0 * u - 1.0));
    }
}

#define FILL_PIECE ((size_t)1 << 22)

typedef struct fill_job {
    weights *w;
    size_t *piece_start; /* first piece of each tensor; [w->n] is the total */
    atomic_size_t next;
} fill_job;

static void *fill_worker(void *arg)
{
    fill_job *j = arg;
    const size_t total = j->piece_start[j->w->n];
    int t = 0;
    for (size_t k; (k = atomic_fetch_add(&j->next, 1)) < total;) {
        while (j->piece_start[t + 1] <= k) t++;
        wtensor *x = &j->w->t[t];
        size_t from = (k - j->piece_start[t]) * FILL_PIECE, to = from + FILL_PIECE;
        fill_range(x, from, to < x->n ? to : x->n);
    }
    return NULL;
}

/* Every tensor's values, in pieces of FILL_PIECE elements over one thread a
 * CPU (at most 64); *threads says how many ran. */
static void fill_weights(weights *w, int *threads)
{
    fill_job j;
    j.w = w;
    j.piece_start = xmalloc(((size_t)w->n + 1) * sizeof *j.piece_start);
    j.piece_start[0] = 0;
    for (int i = 0; i < w->n; i++)
        j.piece_start[i + 1] = j.piece_start[i] + (w->t[i].n + FILL_PIECE - 1) / FILL_PIECE;
    atomic_init(&j.next, 0);
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int n = cpus < 1 ? 1 : cpus > 64 ? 64 : (int)cpus;
    if ((size_t)n > j.piece_start[w->n]) n = j.piece_start[w->n] ? (int)j.piece_start[w->n] : 1;
    pthread_t tid[64];
    int started = 0;
    for (int i = 1; i < n; i++) {
        if (pthread_create(&tid[started], NULL, fill_worker, &j) != 0) break;
        started++;
    }
    fill_worker(&j); /* this thread too: the pieces left are done whatever started */
    for (int i = 0; i < started; i++) pthread_join(tid[i], NULL);
    free(j.piece_start);
    *threads = started + 1;
}

/* The seeded weights, under the names that pick their streams (unchanged,
 * so a seed gives the numbers it always gave): embed, l<i>.{attn_norm, wq,
 * wk, wv, wo, ffn_norm, w_gate_up (gate rows first), w_down}, final_norm,
 * lm_head; with --qkv-bias l<i>.bqkv (q, k and v biases one after another),
 * with --tied no lm_head (the embedding table, scaled as the lm head). A MoE
 * shape's layers have l<i>.router [experts, hidden] (scaled as any
 * projection, so the router's logits have unit variance and tokens spread
 * over the experts about uniformly) and l<i>.e<e>.{w_gate_up, w_down} for
 * each expert instead of the dense MLP, and Qwen3's l<i>.{q_norm, k_norm}.
 * save_seeded writes them under the Hugging Face names. */
static void make_weights(weights *w, const cfg *c)
{
    const int64_t D = c->hidden, Q = (int64_t)c->heads * head_dim(c), KV = (int64_t)c->kv_heads * head_dim(c);
    const int64_t F = c->ffn, V = c->vocab;
    char n[48];
    memset(w, 0, sizeof *w);
    /* sqrt(3 / fan_in): unit variance of a matmul's outputs. */
    float sD = sqrtf(3.0f / (float)D), sQ = sqrtf(3.0f / (float)Q), sF = sqrtf(3.0f / (float)F);
    /* Tied, the table is also the lm head: scaled as the lm head is. */
    add_tensor(w, c, "embed", 2, V, D, 0.0f, c->tied ? sD : 1.0f);
    for (int i = 0; i < c->layers; i++) {
#define T2(suffix, a, b, s) (snprintf(n, sizeof n, "l%d." suffix, i), add_tensor(w, c, n, 2, (a), (b), 0.0f, (s)))
#define T1(suffix, a) (snprintf(n, sizeof n, "l%d." suffix, i), add_tensor(w, c, n, 1, (a), 0, 1.0f, 0.1f))
        T1("attn_norm", D);
        T2("wq", Q, D, sD);
        T2("wk", KV, D, sD);
        T2("wv", KV, D, sD);
        if (c->qkv_bias) {
            snprintf(n, sizeof n, "l%d.bqkv", i);
            add_tensor(w, c, n, 1, Q + 2 * KV, 0, 0.0f, 0.5f);
        }
        T2("wo", D, Q, sQ);
        if (c->o_bias) {
            snprintf(n, sizeof n, "l%d.bo", i);
            add_tensor(w, c, n, 1, D, 0, 0.0f, 0.5f);
        }
        if (c->qk_norm) {
            T1("q_norm", head_dim(c));
            T1("k_norm", head_dim(c));
        }
        T1("ffn_norm", D);
        if (c->moe) {
            const int64_t Fe = c->moe_ffn;
            const float sFe = sqrtf(3.0f / (float)Fe);
            T2("router", c->experts, D, sD);
            for (int e = 0; e < c->experts; e++) {
                snprintf(n, sizeof n, "l%d.e%d.w_gate_up", i, e);
                add_tensor(w, c, n, 2, 2 * Fe, D, 0.0f, sD);
                snprintf(n, sizeof n, "l%d.e%d.w_down", i, e);
                add_tensor(w, c, n, 2, D, Fe, 0.0f, sFe);
            }
        } else {
            T2("w_gate_up", 2 * F, D, sD);
            T2("w_down", D, F, sF);
        }
#undef T1
#undef T2
    }
    add_tensor(w, c, "final_norm", 1, D, 0, 1.0f, 0.1f);
    if (!c->tied) add_tensor(w, c, "lm_head", 2, V, D, 0.0f, sD);
}

/* The tensor called name, searched from the one found last (the file
 * takes them nearly in order: thousands of experts stay linear). */
static const wtensor *find_w(const weights *w, const char *name)
{
    static int last;
    for (int k = 0; k < w->n; k++) {
        int i = (last + k) % w->n;
        if (strcmp(w->t[i].name, name) == 0) {
            last = i;
            return &w->t[i];
        }
    }
    fprintf(stderr, "bench_decode: no weight %s\n", name);
    exit(1);
}

/* dir/file into out (n bytes); exits when the path does not fit. */
static void path_in(char *out, size_t n, const char *dir, const char *file)
{
    int k = snprintf(out, n, "%s/%s", dir, file);
    if (k < 0 || (size_t)k >= n) {
        fprintf(stderr, "bench_decode: the path %s/%s is too long\n", dir, file);
        exit(1);
    }
}

/* The shortest decimal that reads back as v (a JSON number for a finite v). */
static void fmt_float(char *s, size_t n, float v)
{
    for (int p = 6; p <= 9; p++) {
        snprintf(s, n, "%.*g", p, (double)v);
        if (strtof(s, NULL) == v) return;
    }
}

/* config.json of a MoE shape, with the keys the real model's has (Qwen3MoeConfig: every layer sparse,
 * decoder_sparse_step 1, no mlp_only_layers, no sliding window; MixtralConfig: no sliding window) and this
 * run's sizes. */
static bool write_moe_config(FILE *f, const cfg *c, const char *eps, const char *theta, long long maxpos)
{
    const bool qwen = c->moe == SH_QWEN3_MOE;
    char experts[200], attn[160] = "";
    if (qwen) {
        snprintf(experts, sizeof experts,
                 "  \"num_experts\": %d,\n  \"num_experts_per_tok\": %d,\n  \"moe_intermediate_size\": %d,\n"
                 "  \"norm_topk_prob\": %s,\n  \"decoder_sparse_step\": 1,\n  \"mlp_only_layers\": [],\n",
                 c->experts, c->topk, c->moe_ffn, c->norm_topk ? "true" : "false");
        snprintf(attn, sizeof attn,
                 "  \"attention_bias\": false,\n  \"use_sliding_window\": false,\n  \"max_window_layers\": %d,\n",
                 c->layers);
    } else {
        snprintf(experts, sizeof experts, "  \"num_local_experts\": %d,\n  \"num_experts_per_tok\": %d,\n",
                 c->experts, c->topk);
    }
    return fprintf(f,
                   "{\n"
                   "  \"architectures\": [\"%s\"],\n"
                   "  \"model_type\": \"%s\",\n"
                   "  \"hidden_size\": %d,\n"
                   "  \"intermediate_size\": %d,\n"
                   "  \"num_hidden_layers\": %d,\n"
                   "  \"num_attention_heads\": %d,\n"
                   "  \"num_key_value_heads\": %d,\n"
                   "  \"head_dim\": %d,\n"
                   "  \"vocab_size\": %d,\n"
                   "%s"
                   "  \"rms_norm_eps\": %s,\n"
                   "  \"rope_theta\": %s,\n"
                   "  \"rope_scaling\": null,\n"
                   "  \"max_position_embeddings\": %lld,\n"
                   "  \"hidden_act\": \"silu\",\n"
                   "%s"
                   "  \"sliding_window\": null,\n"
                   "  \"output_router_logits\": false,\n"
                   "  \"router_aux_loss_coef\": %s,\n"
                   "  \"tie_word_embeddings\": %s,\n"
                   "  \"torch_dtype\": \"bfloat16\"\n"
                   "}\n",
                   qwen ? "Qwen3MoeForCausalLM" : "MixtralForCausalLM", qwen ? "qwen3_moe" : "mixtral", c->hidden,
                   c->ffn, c->layers, c->heads, c->kv_heads, head_dim(c), c->vocab, experts, eps, theta, maxpos,
                   attn, qwen ? "0.001" : "0.02", c->tied ? "true" : "false") > 0;
}

static void write_config(const cfg *c, const char *dir)
{
    char path[4096], tmp[4200], eps[32], theta[32], rope[400], extra[200];
    path_in(path, sizeof path, dir, "config.json");
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    fmt_float(eps, sizeof eps, c->eps);
    fmt_float(theta, sizeof theta, c->theta);
    const shape *sh = c->shape;
    long long maxpos = sh && sh->max_pos ? sh->max_pos : 65536;
    long long need = (long long)c->contexts[c->ncontexts - 1] + c->warmup + c->steps + 1;
    if (need < c->max_context) need = c->max_context;
    while (maxpos < need) maxpos *= 2;
    /* q/k/v biases without an o bias: Qwen2's layout (Llama's attention_bias
     * puts a bias on all four). */
    const bool qwen2 = c->qkv_bias && !c->o_bias;
    /* Llama 3.1 and 3.2's rope_scaling, as their config.json spell it. */
    if (sh && sh->rope_factor > 0)
        snprintf(rope, sizeof rope,
                 "{\n    \"factor\": %.1f,\n    \"high_freq_factor\": %.1f,\n    \"low_freq_factor\": %.1f,\n"
                 "    \"original_max_position_embeddings\": %d,\n    \"rope_type\": \"llama3\"\n  }",
                 sh->rope_factor, sh->rope_high, sh->rope_low, sh->rope_orig);
    else
        snprintf(rope, sizeof rope, "null");
    /* Qwen2.5's window keys (off: full attention in every layer). */
    if (qwen2 && sh && sh->max_pos)
        snprintf(extra, sizeof extra,
                 "  \"use_sliding_window\": false,\n  \"sliding_window\": %lld,\n  \"max_window_layers\": %d,\n",
                 maxpos, c->layers);
    else
        snprintf(extra, sizeof extra, "%s", qwen2 ? "  \"use_sliding_window\": false,\n" : "");
    FILE *f = fopen(tmp, "w");
    bool ok;
    if (c->moe)
        ok = f && write_moe_config(f, c, eps, theta, maxpos);
    else
        ok = f && fprintf(f,
                          "{\n"
                          "  \"architectures\": [\"%s\"],\n"
                          "  \"model_type\": \"%s\",\n"
                          "  \"hidden_size\": %d,\n"
                          "  \"intermediate_size\": %d,\n"
                          "  \"num_hidden_layers\": %d,\n"
                          "  \"num_attention_heads\": %d,\n"
                          "  \"num_key_value_heads\": %d,\n"
                          "  \"head_dim\": %d,\n"
                          "  \"vocab_size\": %d,\n"
                          "  \"rms_norm_eps\": %s,\n"
                          "  \"rope_theta\": %s,\n"
                          "  \"rope_scaling\": %s,\n"
                          "  \"max_position_embeddings\": %lld,\n"
                          "  \"hidden_act\": \"silu\",\n"
                          "  \"attention_bias\": %s,\n"
                          "  \"mlp_bias\": false,\n"
                          "%s"
                          "  \"tie_word_embeddings\": %s,\n"
                          "  \"torch_dtype\": \"bfloat16\"\n"
                          "}\n",
                          qwen2 ? "Qwen2ForCausalLM" : "LlamaForCausalLM", qwen2 ? "qwen2" : "llama", c->hidden,
                          c->ffn, c->layers, c->heads, c->kv_heads, head_dim(c), c->vocab, eps, theta, rope, maxpos,
                          c->o_bias ? "true" : "false", extra, c->tied ? "true" : "false") > 0;
    if (f && fclose(f) != 0) ok = false;
    if (!ok || rename(tmp, path) != 0) {
        fprintf(stderr, "bench_decode: writing %s failed: %s\n", path, strerror(errno));
        remove(tmp);
        exit(1);
    }
}

/* The seeded model as a Hugging Face Llama (Qwen2 with --qkv-bias) checkpoint
 * in dir: config.json and model.safetensors (reel_safetensors_save), the
 * names at the top. */
static void save_seeded(const cfg *c, const char *dir)
{
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "bench_decode: mkdir %s: %s\n", dir, strerror(errno));
        exit(1);
    }
    weights w;
    double t0 = now_s();
    make_weights(&w, c);
    int threads = 1;
    fill_weights(&w, &threads);
    size_t elems = 0;
    for (int i = 0; i < w.n; i++) elems += w.t[i].n;
    double t1 = now_s();
    /* each w_gate_up (the dense one, or an expert's) is two tensors in the file, bqkv three */
    int n = w.n;
    for (int i = 0; i < w.n; i++) {
        const char *dot = strrchr(w.t[i].name, '.');
        n += strcmp(dot ? dot + 1 : "", "w_gate_up") == 0 ? 1 : strcmp(dot ? dot + 1 : "", "bqkv") == 0 ? 2 : 0;
    }
    reel_st_entry *e = xmalloc((size_t)n * sizeof *e);
    char(*names)[96] = xmalloc((size_t)n * sizeof *names);
    int64_t(*dims)[2] = xmalloc((size_t)n * sizeof *dims);
    int k = 0;
    /* Rows [r0, r0 + rows) of seeded tensor `from`, as file tensor `name`. */
#define PUT(from, r0, rows, ...)                                                          \
    do {                                                                                  \
        const wtensor *t_ = find_w(&w, (from));                                           \
        snprintf(names[k], sizeof names[k], __VA_ARGS__);                                 \
        dims[k][0] = (rows);                                                              \
        dims[k][1] = t_->ndim > 1 ? t_->dims[1] : 0;                                      \
        e[k] = (reel_st_entry){ REEL_ST_ENTRY_HEAD, .name = names[k], .dtype = REEL_BF16, .ndim = t_->ndim,    \
                               .dims = dims[k], .data = t_->data + (r0) * t_->dims[1]};   \
        k++;                                                                              \
    } while (0)
    char s[48];
    PUT("embed", 0, c->vocab, "model.embed_tokens.weight");
    for (int i = 0; i < c->layers; i++) {
#define L(suffix) (snprintf(s, sizeof s, "l%d." suffix, i), s)
        PUT(L("attn_norm"), 0, c->hidden, "model.layers.%d.input_layernorm.weight", i);
        PUT(L("wq"), 0, (int64_t)c->heads * head_dim(c), "model.layers.%d.self_attn.q_proj.weight", i);
        PUT(L("wk"), 0, (int64_t)c->kv_heads * head_dim(c), "model.layers.%d.self_attn.k_proj.weight", i);
        PUT(L("wv"), 0, (int64_t)c->kv_heads * head_dim(c), "model.layers.%d.self_attn.v_proj.weight", i);
        if (c->qkv_bias) {
            const int64_t Q = (int64_t)c->heads * head_dim(c), KV = (int64_t)c->kv_heads * head_dim(c);
            PUT(L("bqkv"), 0, Q, "model.layers.%d.self_attn.q_proj.bias", i);
            PUT(L("bqkv"), Q, KV, "model.layers.%d.self_attn.k_proj.bias", i);
            PUT(L("bqkv"), Q + KV, KV, "model.layers.%d.self_attn.v_proj.bias", i);
        }
        PUT(L("wo"), 0, c->hidden, "model.layers.%d.self_attn.o_proj.weight", i);
        if (c->o_bias) PUT(L("bo"), 0, c->hidden, "model.layers.%d.self_attn.o_proj.bias", i);
        if (c->qk_norm) {
            PUT(L("q_norm"), 0, head_dim(c), "model.layers.%d.self_attn.q_norm.weight", i);
            PUT(L("k_norm"), 0, head_dim(c), "model.layers.%d.self_attn.k_norm.weight", i);
        }
        PUT(L("ffn_norm"), 0, c->hidden, "model.layers.%d.post_attention_layernorm.weight", i);
        if (c->moe) {
            /* Qwen3-MoE: mlp.gate, mlp.experts.<e>.{gate,up,down}_proj; Mixtral: block_sparse_moe.gate,
             * block_sparse_moe.experts.<e>.{w1 (gate), w3 (up), w2 (down)} */
            const bool qwen = c->moe == SH_QWEN3_MOE;
            const char *blk = qwen ? "mlp" : "block_sparse_moe", *gate = qwen ? "gate_proj" : "w1",
                       *up = qwen ? "up_proj" : "w3", *down = qwen ? "down_proj" : "w2";
            PUT(L("router"), 0, c->experts, "model.layers.%d.%s.gate.weight", i, blk);
            for (int x = 0; x < c->experts; x++) {
                snprintf(s, sizeof s, "l%d.e%d.w_gate_up", i, x);
                PUT(s, 0, c->moe_ffn, "model.layers.%d.%s.experts.%d.%s.weight", i, blk, x, gate);
                PUT(s, c->moe_ffn, c->moe_ffn, "model.layers.%d.%s.experts.%d.%s.weight", i, blk, x, up);
                snprintf(s, sizeof s, "l%d.e%d.w_down", i, x);
                PUT(s, 0, c->hidden, "model.layers.%d.%s.experts.%d.%s.weight", i, blk, x, down);
            }
        } else {
            PUT(L("w_gate_up"), 0, c->ffn, "model.layers.%d.mlp.gate_proj.weight", i);
            PUT(L("w_gate_up"), c->ffn, c->ffn, "model.layers.%d.mlp.up_proj.weight", i);
            PUT(L("w_down"), 0, c->hidden, "model.layers.%d.mlp.down_proj.weight", i);
        }
#undef L
    }
    PUT("final_norm", 0, c->hidden, "model.norm.weight");
    if (!c->tied) PUT("lm_head", 0, c->vocab, "lm_head.weight");
#undef PUT
    char path[4096];
    path_in(path, sizeof path, dir, "model.safetensors.index.json");
    remove(path); /* a stale index would be opened instead of the file below */
    path_in(path, sizeof path, dir, "model.safetensors");
    RK("saving the seeded checkpoint", reel_safetensors_save(g_ctx, path, e, k));
    write_config(c, dir);
    double t2 = now_s();
    fprintf(stderr, "bench_decode: seeded weights: %.2f G elements (%.2f GB bf16) generated in %.2f s on %d threads "
                    "(%.2f ns an element a thread), written in %.2f s (%.2f GB/s)\n",
            (double)elems * 1e-9, (double)elems * 2e-9, t1 - t0, threads,
            elems ? (t1 - t0) * 1e9 * threads / (double)elems : 0.0, t2 - t1,
            t2 > t1 ? (double)elems * 2e-9 / (t2 - t1) : 0.0);
    for (int i = 0; i < w.n; i++) free(w.t[i].data);
    free(w.t);
    free(e);
    free(names);
    free(dims);
}

/* ---- the checkpoint, through the library's models layer ------------------ */

/* The model: include/reel/models.h, the one Llama definition of the tree
 * (config.json's keys, the graph, the weights written from the mapped
 * checkpoint, q/k/v and gate/up stacked part by part). */
typedef struct model {
    reel_model *mm;
    char dir[4096];        /* its absolute path */
} model;

/* A size from config.json; a flag given beside --model (given != 0) must agree. */
static void agree(const char *dir, const char *flag, const char *key, int value, int *out)
{
    if (*out != 0 && *out != value) {
        fprintf(stderr, "bench_decode: %s %d, but %s/config.json has \"%s\": %d (leave the flag out with --model)\n",
                flag, *out, dir, key, value);
        exit(1);
    }
    *out = value;
}

/* Opens the checkpoint at dir with reel_model_open, which checks it before
 * anything runs (config.json's keys, refusing what the layer does not build
 * with the key named; every tensor the model reads there at its dtype and
 * shape; no bias, norm or layer its config does not call for), and takes
 * the model's sizes, eps, rope theta, biases and tied embeddings from it.
 * Size flags given beside --model must agree; the model must be bf16. */
static void open_model(cfg *c, model *m, const char *dir, bool config_only)
{
    if (!realpath(dir, m->dir)) {
        fprintf(stderr, "bench_decode: %s: %s\n", dir, strerror(errno));
        exit(1);
    }
    reel_status st;
    if (config_only) { /* its config.json alone (reel_model_parse): shapes and estimates, no weights */
        char path[4200];
        path_in(path, sizeof path, m->dir, "config.json");
        FILE *f = fopen(path, "rb");
        char *json = NULL;
        long n = -1;
        if (f && fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0) {
            json = xmalloc((size_t)n + 1);
            if (fread(json, 1, (size_t)n, f) != (size_t)n) n = -1;
        }
        if (f) fclose(f);
        if (n < 0) {
            fprintf(stderr, "bench_decode: reading %s failed\n", path);
            exit(1);
        }
        json[n] = 0;
        st = reel_model_parse(g_ctx, json, (size_t)n, &m->mm);
        free(json);
    } else {
        st = reel_model_open(g_ctx, m->dir, &m->mm);
    }
    if (st != REEL_OK) {
        fprintf(stderr, "bench_decode: --model %s: %s: %s\n", dir, reel_status_str(st), reel_ctx_last_error(g_ctx));
        exit(1);
    }
    reel_model_info in = REEL_MODEL_INFO_INIT;
    RK("the model's shape", reel_model_info_get(m->mm, &in));
    if (in.dtype != REEL_BF16) {
        fprintf(stderr, "bench_decode: --model %s: its weights are %s; this bench runs bf16 models\n", dir,
                reel_dtype_name(in.dtype));
        exit(1);
    }
    agree(dir, "--hidden", "hidden_size", in.hidden, &c->hidden);
    agree(dir, "--layers", "num_hidden_layers", in.layers, &c->layers);
    agree(dir, "--heads", "num_attention_heads", in.heads, &c->heads);
    agree(dir, "--kv-heads", "num_key_value_heads", in.kv_heads, &c->kv_heads);
    agree(dir, "--ffn", "intermediate_size", in.ffn, &c->ffn);
    agree(dir, "--vocab", "vocab_size", in.vocab, &c->vocab);
    agree(dir, "--experts", in.family == REEL_MODEL_MIXTRAL ? "num_local_experts" : "num_experts", in.experts,
          &c->experts);
    agree(dir, "--experts-per-token", "num_experts_per_tok", in.experts_per_token, &c->topk);
    agree(dir, "--expert-ffn", in.family == REEL_MODEL_MIXTRAL ? "intermediate_size" : "moe_intermediate_size",
          in.expert_ffn, &c->moe_ffn);
    c->moe_layers = in.moe_layers;
    c->hd = in.head_dim;
    c->eps = (float)in.rms_norm_eps;
    c->theta = (float)in.rope_theta;
    c->qkv_bias = in.qkv_bias;
    c->o_bias = in.o_bias;
    c->qk_norm = in.qk_norm;
    c->tied = in.tied;
    c->rope_type = in.rope_type;
    c->rope_factor = in.rope_factor;
}

/* Expected distinct experts of a MoE layer that B tokens choose, each k of
 * E uniformly: E (1 - (1 - k/E)^B); all: every expert. */
static double experts_read(const cfg *c, int B, bool all)
{
    const double E = c->experts, k = c->topk;
    return all ? E : E * (1.0 - pow(1.0 - k / E, B));
}

/* Bytes a decode step of B sequences must read at context C (see the top);
 * a MoE layer's experts: all of them (all) or the expected distinct ones
 * (experts_read). */
static double floor_us_of(const cfg *c, int B, int C, bool all)
{
    const double D = c->hidden, Q = (double)c->heads * head_dim(c), KV = (double)c->kv_heads * head_dim(c);
    const double F = c->ffn, V = c->vocab;
    const double bias = (c->qkv_bias ? Q + 2 * KV : 0) + (c->o_bias ? D : 0) + (c->qk_norm ? 2.0 * head_dim(c) : 0);
    const int moe = c->experts ? c->moe_layers : 0;
    /* but the embedding table (tied, it is the lm head's V * D) */
    double elems = c->layers * (2 * D + (Q + 2 * KV) * D + D * Q + bias) + (c->layers - moe) * 3 * F * D + D + V * D;
    /* a MoE layer: its router and the experts read */
    if (moe) elems += moe * ((double)c->experts * D + experts_read(c, B, all) * 3.0 * c->moe_ffn * D);
    double bytes = 2.0 * elems;
    bytes += 2.0 * B * c->hidden;
    bytes += (double)c->layers * 2 * B * (C + 1) * c->kv_heads * head_dim(c) * 2.0;
    return bytes / (g_floor_tbps * 1e12) * 1e6;
}

/* The floor (a MoE model's: the experts B tokens are expected to choose). */
static double floor_us(const cfg *c, int B, int C) { return floor_us_of(c, B, C, false); }

/* The table's floor cells: "floor" or, for a MoE model, "expected | all". */
static const char *floor_cells(const cfg *c, int B, int C, char *s, size_t n)
{
    if (c->experts)
        snprintf(s, n, "%.1f | %.1f", floor_us(c, B, C), floor_us_of(c, B, C, true));
    else
        snprintf(s, n, "%.1f", floor_us(c, B, C));
    return s;
}

/* ---- graph ---------------------------------------------------------------- */

/* What the models layer builds for a plan of this run over its first nb
 * batches (the buckets; the largest is max_seqs). REEL_BENCH_QKV=0:
 * three separate q/k/v projections, to measure what the fusion gives. */
static reel_model_opts model_opts(const cfg *c, int nb, int num_blocks, int max_context, bool with_logits)
{
    reel_model_opts o = REEL_MODEL_OPTS_INIT;
    o.num_buckets = nb;
    for (int i = 0; i < nb; i++) o.buckets[i] = c->batches[i];
    o.max_context = max_context;
    o.max_seqs = c->batches[nb - 1];
    o.block_size = c->block_size;
    o.num_blocks = num_blocks;
    o.logits = with_logits;
    o.separate_qkv = getenv("REEL_BENCH_QKV") && atoi(getenv("REEL_BENCH_QKV")) == 0;
    return o;
}

/* ---- sequences and steps -------------------------------------------------- */

typedef struct batch {
    int B, bps;              /* sequences (the largest batch), blocks per sequence */
    int32_t *block_tables;   /* [B][bps], a seeded permutation of the blocks */
    /* step buffers, sized for the largest step */
    int32_t *tokens, *positions, *slots, *query_start, *context_lens, *tables;
} batch;

static void batch_init(batch *b, const cfg *c, int B, int bps, int max_tokens)
{
    b->B = B;
    b->bps = bps;
    int nb = B * bps;
    b->block_tables = xmalloc((size_t)nb * 4);
    for (int i = 0; i < nb; i++) b->block_tables[i] = i;
    uint64_t s = c->seed * 7 + (uint64_t)B;
    for (int i = nb - 1; i > 0; i--) {
        int j = (int)(mix64(s++) % (uint64_t)(i + 1));
        int32_t t = b->block_tables[i];
        b->block_tables[i] = b->block_tables[j];
        b->block_tables[j] = t;
    }
    int T = max_tokens > B ? max_tokens : B;
    b->tokens = xmalloc((size_t)T * 4);
    b->positions = xmalloc((size_t)T * 4);
    b->slots = xmalloc((size_t)T * 4);
    b->query_start = xmalloc((size_t)(B + 1) * 4);
    b->context_lens = xmalloc((size_t)B * 4);
    b->tables = xmalloc((size_t)nb * 4);
}

static void batch_destroy(batch *b)
{
    free(b->block_tables);
    free(b->tokens);
    free(b->positions);
    free(b->slots);
    free(b->query_start);
    free(b->context_lens);
    free(b->tables);
}

static int32_t slot_of(const batch *b, const cfg *c, int s, int p)
{
    return b->block_tables[(size_t)s * (size_t)b->bps + (size_t)(p / c->block_size)] * c->block_size +
           p % c->block_size;
}

static void prefill_flush(reel_plan *p, batch *b, int T, int S)
{
    b->query_start[S] = T;
    reel_step_info si = { REEL_STEP_INFO_HEAD, .num_tokens = T, .num_seqs = S, .query_start = b->query_start,
                         .positions = b->positions, .slot_mapping = b->slots, .context_lens = b->context_lens,
                         .block_tables = b->tables, .block_table_stride = b->bps};
    RK("setting prefill tokens", reel_plan_set_input(p, "tokens", b->tokens, T));
    RK("prefill step", reel_step(p, &si));
}

/* Prefill: every sequence's positions [from, to), in eager steps of at most
 * c->prefill_tokens tokens; a sequence appears at most once in a step, its
 * pieces in order. */
static void prefill(reel_plan *p, batch *b, const cfg *c, int from, int to)
{
    int cap = c->prefill_tokens, T = 0, S = 0, last = -1;
    for (int s = 0; s < b->B; s++) {
        for (int a = from, e; a < to; a = e) {
            e = a + cap < to ? a + cap : to;
            if (T > 0 && (T + (e - a) > cap || last == s)) {
                prefill_flush(p, b, T, S);
                T = S = 0;
            }
            b->query_start[S] = T;
            b->context_lens[S] = e;
            memcpy(b->tables + (size_t)S * (size_t)b->bps, b->block_tables + (size_t)s * (size_t)b->bps,
                   (size_t)b->bps * 4);
            for (int q = a; q < e; q++, T++) {
                b->tokens[T] = bench_token(c, s, q);
                b->positions[T] = q;
                b->slots[T] = slot_of(b, c, s, q);
            }
            S++;
            last = s;
        }
    }
    if (T > 0) prefill_flush(p, b, T, S);
}

/* One decode step of sequences 0 .. B-1 at position pos, timed as a serving
 * loop pays it (host wall, returned) and on the device (*gpu_us, -1 when the
 * plan does not time its steps); the next ids land in next[B]. */
/* The decode metadata of B sequences at position pos (decode_step's and --loop's). */
static reel_step_info decode_info(batch *b, const cfg *c, int B, int pos)
{
    for (int s = 0; s < B; s++) {
        b->query_start[s] = s;
        b->positions[s] = pos;
        b->slots[s] = slot_of(b, c, s, pos);
        b->context_lens[s] = pos + 1;
    }
    b->query_start[B] = B;
    reel_step_info si = { REEL_STEP_INFO_HEAD, .num_tokens = B, .num_seqs = B, .query_start = b->query_start,
                         .positions = b->positions, .slot_mapping = b->slots,
                         .context_lens = b->context_lens, .block_tables = b->block_tables,
                         .block_table_stride = b->bps};
    return si;
}

static double decode_step(reel_plan *p, batch *b, const cfg *c, int B, const int32_t *tokens, int pos, int32_t *next,
                          double *gpu_us)
{
    double t0 = now_s();
    reel_step_info si = decode_info(b, c, B, pos);
    RK("setting the step's tokens", reel_plan_set_input(p, "tokens", tokens, B));
    RK("decode step", reel_step(p, &si));
    const void *out;
    int64_t rows;
    RK("reading next_token", reel_plan_output(p, "next_token", &out, &rows));
    memcpy(next, out, (size_t)B * 4);
    double t = now_s() - t0;
    if (rows != B) {
        fprintf(stderr, "bench_decode: next_token has %" PRId64 " rows, want %d\n", rows, B);
        exit(1);
    }
    if (gpu_us && reel_plan_last_step_device_us(p, gpu_us) != REEL_OK) *gpu_us = -1.0;
    return t;
}

typedef struct run_result {
    double wall_us, gpu_us;  /* medians of the timed steps; gpu -1: not timed */
    int replays;             /* timed steps that replayed a graph */
} run_result;

/* warmup + steps decode steps of B sequences from position C; writes every
 * step's next ids into next[(warmup+steps)*B]. */
static run_result decode_run(reel_plan *p, batch *b, const cfg *c, int B, int C, int32_t *next)
{
    int N = c->warmup + c->steps;
    double *us = xmalloc((size_t)c->steps * sizeof *us), *gpu = xmalloc((size_t)c->steps * sizeof *gpu);
    int32_t *tok = xmalloc((size_t)N * (size_t)B * 4);
    for (int i = 0; i < N; i++)
        for (int s = 0; s < B; s++) tok[(size_t)i * (size_t)B + (size_t)s] = bench_token(c, s, C + i);
    run_result r = {0, 0, 0};
    bool timed = true;
    for (int i = 0; i < N; i++) {
        double g = -1.0;
        double t = decode_step(p, b, c, B, tok + (size_t)i * (size_t)B, C + i, next + (size_t)i * (size_t)B, &g);
        if (i >= c->warmup) {
            us[i - c->warmup] = t * 1e6;
            gpu[i - c->warmup] = g;
            timed = timed && g >= 0;
            r.replays += reel_plan_last_fallback(p) == REEL_FALLBACK_NONE;
        }
    }
    r.wall_us = median(us, c->steps);
    r.gpu_us = timed ? median(gpu, c->steps) : -1.0;
    free(us);
    free(gpu);
    free(tok);
    return r;
}

/* ---- --loop: reel_step_n against a host loop of single steps --------------- */


/* Per step, at batch B from context C on the replay plan: a serving loop of
 * single steps from the host (each step's ids fed back: what a caller of
 * reel_step does), then reel_step_n of k steps for each --loop k. The
 * kernels' time is the device time of a single replayed step (upload,
 * replay, download: reel_plan_time_steps); a step's overhead is its wall
 * time less that. Greedy tokens of every k must equal the host loop's. */
static bool loop_run(const cfg *c, reel_plan *p, batch *b, int B, int C, FILE *res)
{
    int K = 0;
    for (int i = 0; i < c->nloops; i++) K = c->loops[i] > K ? c->loops[i] : K;
    const int reps = 5;
    int32_t *tok = xmalloc((size_t)B * 4), *want = xmalloc((size_t)K * (size_t)B * 4);
    int32_t *got = xmalloc((size_t)K * (size_t)B * 4), *steps = xmalloc((size_t)B * 4);
    double *gpu = xmalloc((size_t)K * sizeof *gpu), host_wall[8], host_gpu[8];
    for (int r = 0; r < reps + 1; r++) { /* rep 0 warms up */
        for (int s = 0; s < B; s++) tok[s] = bench_token(c, s, C);
        double t0 = now_s();
        for (int i = 0; i < K; i++) {
            decode_step(p, b, c, B, tok, C + i, want + (size_t)i * (size_t)B, &gpu[i]);
            memcpy(tok, want + (size_t)i * (size_t)B, (size_t)B * 4);
        }
        if (r > 0) {
            host_wall[r - 1] = (now_s() - t0) * 1e6 / K;
            host_gpu[r - 1] = median(gpu, K);
        }
    }
    double hw = median(host_wall, reps), hg = median(host_gpu, reps), hover = hw - hg;
    bool ok = true;
    for (int li = 0; li < c->nloops; li++) {
        const int k = c->loops[li];
        double wall[8], dev[8];
        int same = 0, ran = 0;
        for (int r = 0; r < reps + 1; r++) {
            for (int s = 0; s < B; s++) tok[s] = bench_token(c, s, C);
            reel_step_info si = decode_info(b, c, B, C);
            reel_loop_info lo = REEL_LOOP_INFO_INIT;
            lo.token_input = "tokens";
            lo.token_output = "next_token";
            lo.max_steps = k;
            lo.tokens = got;
            lo.steps = steps;
            double t0 = now_s();
            RK("setting the loop's tokens", reel_plan_set_input(p, "tokens", tok, B));
            RK("reel_step_n", reel_step_n(p, &si, &lo));
            double t = now_s() - t0, d = -1.0;
            if (reel_plan_last_step_device_us(p, &d) != REEL_OK) d = -1.0;
            if (r > 0) {
                wall[r - 1] = t * 1e6 / k;
                dev[r - 1] = d >= 0 ? d / k : -1.0;
            }
            ran = steps[0];
            same = 0;
            for (int i = 0; i < k * B; i++) same += got[i] == want[i];
        }
        double lw = median(wall, reps), ld = median(dev, reps), lover = lw - hg;
        reel_plan_stats st = REEL_PLAN_STATS_INIT;
        RK("plan stats", reel_plan_stats_get(p, &st));
        bool eq = same == k * B && ran == k;
        ok = ok && eq;
        printf("| %d | %d | %d | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.2f | %s | %s |\n", B, C, k, hw, hg, hover,
               lw, ld, lover, hover > 0 ? lover / hover : -1.0, st.loop_device_calls ? "device" : "host",
               eq ? "yes" : "NO");
        fflush(stdout);
        fprintf(res, "loop batch=%d context=%d k=%d host_wall_us=%.3f host_gpu_us=%.3f loop_wall_us=%.3f "
                     "loop_gpu_us=%.3f overhead_ratio=%.4f device_loop=%d tokens_equal=%d\n",
                B, C, k, hw, hg, lw, ld, hover > 0 ? lover / hover : -1.0, st.loop_device_calls ? 1 : 0, eq ? 1 : 0);
        fflush(res);
    }
    free(tok);
    free(want);
    free(got);
    free(steps);
    free(gpu);
    return ok;
}

/* ---- options -------------------------------------------------------------- */

static int parse_list(const char *s, int *out)
{
    int n = 0;
    while (*s) {
        if (n == MAX_LIST) return -1;
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 1 || v > 1 << 20) return -1;
        out[n++] = (int)v;
        if (*end && *end != ',') return -1;
        s = *end == ',' ? end + 1 : end;
    }
    for (int i = 1; i < n; i++)
        if (out[i] <= out[i - 1]) return -1; /* ascending: the batches are the plan's buckets */
    return n;
}

static void usage(void)
{
    fprintf(stderr,
            "usage: bench_decode [--layers N] [--hidden N] [--heads N] [--kv-heads N] [--ffn N (0: 4 x hidden)]\n"
            "                    [--vocab N] [--batches 1,8,64] [--contexts 128,2048] [--steps 50] [--warmup 10]\n"
            "                    [--prefill-tokens 4096] [--seed 1] [--dir /tmp/reel-decode] [--no-eager] [--no-logits]\n"
            "                    [--matmul-tuning] [--max-context N] [--qkv-bias] [--tied] [--model CHECKPOINT_DIR]\n"
            "                    [--shape toy|llama-3.2-1b|llama-3.1-8b|qwen2.5-7b|qwen3-30b-a3b|mixtral-8x7b]\n"
            "                    [--experts N] [--experts-per-token N] [--expert-ffn N] [--backend auto|host|cuda]\n"
            "                    [--loop 1,8,64]\n"
            "--qkv-bias, --tied: the seeded model with q/k/v biases (written as a Qwen2 checkpoint), with tied\n"
            "embeddings.\n"
            "--shape: the seeded checkpoint at that model's sizes and config.json (rope scaling, biases, tied\n"
            "embeddings); size flags given beside it override its sizes. toy is the default model.\n"
            "The mixture-of-experts shapes (issue 44) run fewer layers than the real models (--layers N to change):\n"
            "  qwen3-30b-a3b  16 of 48 layers (1.25 GB a layer, 1.21 GB of it experts; 1.2 GB embedding and lm\n"
            "                 head): with --no-eager (as bench/gpu.sh runs them) two plans' weights (replay and\n"
            "                 logits, 21 GB each) and the KV cache of batch 64 at context 2048 (4.4 GB, twice while a\n"
            "                 plan compiles) need 54 GB of an 80 GB H100's 85 GB (10^9 bytes; the eager plan too:\n"
            "                 75 GB); at most 24 layers fit (78 GB), all 48 only with --one-plan (78 GB, no logits\n"
            "                 for the check).\n"
            "  mixtral-8x7b   4 of 32 layers (2.9 GB a layer): 31 GB at batch 64, context 2048 with --no-eager; at\n"
            "                 most 11 fit (80 GB).\n"
            "--experts, --experts-per-token, --expert-ffn: a MoE shape's num_experts (num_local_experts),\n"
            "num_experts_per_tok, moe_intermediate_size (Mixtral: intermediate_size, as --ffn); with the size flags,\n"
            "a small model of the same family for the host backend, e.g. --shape qwen3-30b-a3b --layers 1\n"
            "--hidden 64 --heads 4 --kv-heads 2 --vocab 512 --experts 16 --experts-per-token 4 --expert-ffn 32.\n"
            "--backend: the context's backend (auto: REEL_BACKEND, else CUDA where there is a device).\n"
            "--loop 1,8,64: after each context's table, reel_step_n of k steps beside a host loop of single steps\n"
            "(issue 47): per-step wall, device time and overhead, tokens compared.\n"
            "--fit-only: which points fit the device's memory, from config.json alone (the seeded model's\n"
            "config.json is written, not its weights); nothing is compiled or run.\n"
            "--one-plan: the replay plan alone over its own KV cache (prefill run eagerly on it; no eager or\n"
            "logits plan, so no logits for bench/torch_model.py to check): the largest batches a card holds.\n"
            "--model: a bf16 Hugging Face checkpoint of a family reel's models layer builds (Llama, Mistral,\n"
            "Qwen2, Qwen3, Qwen3-MoE, Mixtral; config.json, safetensors) instead of the seeded one written into\n"
            "--dir/model; the sizes, biases, tied embeddings and experts come from its config.json (size flags given\n"
            "beside it must agree) and every tensor's dtype and shape are checked.\n");
    exit(2);
}

/* The seeded model's defaults filled, the sizes and run options checked. */
static void check_cfg(cfg *c)
{
    if (c->kv_heads == 0) c->kv_heads = c->heads;
    if (c->ffn == 0) c->ffn = 4 * c->hidden;
    if (c->layers < 1 || c->heads < 1 || c->hidden < 1 || (!c->hd && c->hidden % c->heads) || head_dim(c) % 2 ||
        c->kv_heads < 1 || c->heads % c->kv_heads || c->ffn < 1 || c->vocab < 2 || c->steps < 1 ||
        (c->experts && (c->topk < 1 || c->topk > c->experts || c->moe_ffn < 1)) ||
        c->warmup < 0 || c->prefill_tokens < 1 || c->max_context < 0 || c->nbatches > REEL_MAX_BUCKETS) {
        fprintf(stderr, "bench_decode: inconsistent model or run options\n");
        usage();
    }
}

static void parse(int argc, char **argv, cfg *c)
{
    /* Sizes 0: not given (the defaults below, or the checkpoint's with --model). */
    *c = (cfg){.layers = 0, .hidden = 0, .heads = 0, .kv_heads = 0, .ffn = 0, .vocab = 0,
               .block_size = 16, .eps = 1e-5f, .theta = 10000.0f, .seed = 1,
               .batches = {1, 8, 64}, .nbatches = 3, .contexts = {128, 2048}, .ncontexts = 2,
               .steps = 50, .warmup = 10, .prefill_tokens = 4096, .eager = true, .logits = true,
               .dir = "/tmp/reel-decode"};
    static const struct option lo[] = {
        {"layers", 1, 0, 'L'}, {"hidden", 1, 0, 'D'}, {"heads", 1, 0, 'H'}, {"kv-heads", 1, 0, 'K'},
        {"ffn", 1, 0, 'F'}, {"vocab", 1, 0, 'V'}, {"batches", 1, 0, 'b'}, {"contexts", 1, 0, 'c'},
        {"steps", 1, 0, 's'}, {"warmup", 1, 0, 'w'}, {"prefill-tokens", 1, 0, 'p'}, {"seed", 1, 0, 'S'},
        {"dir", 1, 0, 'd'}, {"no-eager", 0, 0, 'e'}, {"no-logits", 0, 0, 'l'}, {"help", 0, 0, 'h'},
        {"matmul-tuning", 0, 0, 'T'}, {"max-context", 1, 0, 'M'}, {"model", 1, 0, 'm'},
        {"qkv-bias", 0, 0, 'B'}, {"tied", 0, 0, 't'}, {"shape", 1, 0, 'P'}, {"backend", 1, 0, 'k'},
        {"fit-only", 0, 0, 'f'}, {"one-plan", 0, 0, 'O'}, {"experts", 1, 0, 'E'},
        {"experts-per-token", 1, 0, 'y'}, {"expert-ffn", 1, 0, 'z'}, {"loop", 1, 0, 'o'},
        {0, 0, 0, 0}};
    int o;
    while ((o = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (o) {
        case 'L': c->layers = atoi(optarg); break;
        case 'D': c->hidden = atoi(optarg); break;
        case 'H': c->heads = atoi(optarg); break;
        case 'K': c->kv_heads = atoi(optarg); break;
        case 'F': c->ffn = atoi(optarg); break;
        case 'V': c->vocab = atoi(optarg); break;
        case 'E': if ((c->experts = atoi(optarg)) < 1) usage(); break;
        case 'y': if ((c->topk = atoi(optarg)) < 1) usage(); break;
        case 'z': if ((c->moe_ffn = atoi(optarg)) < 1) usage(); break;
        case 'b': if ((c->nbatches = parse_list(optarg, c->batches)) < 1) usage(); break;
        case 'o': if ((c->nloops = parse_list(optarg, c->loops)) < 1) usage(); break;
        case 'c': if ((c->ncontexts = parse_list(optarg, c->contexts)) < 1) usage(); break;
        case 's': c->steps = atoi(optarg); break;
        case 'w': c->warmup = atoi(optarg); break;
        case 'p': c->prefill_tokens = atoi(optarg); break;
        case 'S': c->seed = strtoull(optarg, NULL, 10); break;
        case 'd': c->dir = optarg; break;
        case 'e': c->eager = false; break;
        case 'l': c->logits = false; break;
        case 'T': c->tuning = true; break;
        case 'M': c->max_context = atoi(optarg); break;
        case 'm': c->model = optarg; break;
        case 'B': c->qkv_bias = true; break;
        case 't': c->tied = true; break;
        case 'f': c->fit_only = true; break;
        case 'O':
            c->one_plan = true;
            c->eager = c->logits = false;
            break;
        case 'P':
            for (int i = 0; i < NSHAPES && !c->shape; i++)
                if (strcmp(optarg, SHAPES[i].name) == 0) c->shape = &SHAPES[i];
            if (!c->shape) {
                fprintf(stderr, "bench_decode: no shape '%s'\n", optarg);
                usage();
            }
            break;
        case 'k': {
            reel_backend_kind k;
            if (reel_backend_parse(optarg, &k) != REEL_OK) {
                fprintf(stderr, "bench_decode: --backend %s: auto, host or cuda\n", optarg);
                usage();
            }
            c->backend = (int)k;
            break;
        }
        default: usage();
        }
    }
    if (optind != argc) usage();
    if (c->model) {
        if (c->qkv_bias || c->tied || c->shape) {
            fprintf(stderr, "bench_decode: --qkv-bias, --tied and --shape shape the seeded model; with --model the "
                            "checkpoint's config.json says\n");
            usage();
        }
    } else {
        const shape *sh = c->shape;
        const bool ffn_given = c->ffn != 0;
        if ((c->experts || c->topk || c->moe_ffn) && !(sh && sh->moe)) {
            fprintf(stderr, "bench_decode: --experts, --experts-per-token and --expert-ffn size a MoE shape "
                            "(--shape qwen3-30b-a3b or mixtral-8x7b) or must agree with --model's\n");
            usage();
        }
        if (sh && sh->moe && c->qkv_bias) {
            fprintf(stderr, "bench_decode: --qkv-bias: the MoE shapes have no attention biases\n");
            usage();
        }
        if (sh) { /* its sizes where no flag gave one; its head dim unless --hidden or --heads moved it */
            if (c->hidden == 0 && c->heads == 0) c->hd = sh->head_dim;
            if (c->layers == 0) c->layers = sh->layers;
            if (c->hidden == 0) c->hidden = sh->hidden;
            if (c->heads == 0) c->heads = sh->heads;
            if (c->kv_heads == 0) c->kv_heads = sh->kv_heads;
            if (c->ffn == 0) c->ffn = sh->ffn;
            if (c->vocab == 0) c->vocab = sh->vocab;
            c->tied = c->tied || sh->tied;
            c->qkv_bias = c->qkv_bias || sh->qkv_bias;
            c->eps = sh->eps;
            c->theta = sh->theta;
            c->qk_norm = sh->qk_norm;
            c->moe = sh->moe;
            if (sh->moe) { /* every layer has experts */
                if (c->experts == 0) c->experts = sh->experts;
                if (c->topk == 0) c->topk = sh->topk;
                c->norm_topk = sh->norm_topk;
                if (sh->moe == SH_MIXTRAL) { /* the experts' ffn is intermediate_size */
                    if (c->moe_ffn && ffn_given && c->moe_ffn != c->ffn) {
                        fprintf(stderr, "bench_decode: --ffn %d and --expert-ffn %d: Mixtral's experts have the "
                                        "ffn of intermediate_size\n", c->ffn, c->moe_ffn);
                        usage();
                    }
                    if (c->moe_ffn) c->ffn = c->moe_ffn;
                    c->moe_ffn = c->ffn;
                } else if (c->moe_ffn == 0) {
                    c->moe_ffn = sh->moe_ffn;
                }
                c->moe_layers = c->layers;
            }
        }
        if (c->layers == 0) c->layers = 8;
        if (c->hidden == 0) c->hidden = 1024;
        if (c->heads == 0) c->heads = 16;
        if (c->vocab == 0) c->vocab = 32000;
    }
    if (!c->model) /* the checkpoint's sizes come at its open (open_model) */
        check_cfg(c);
}

/* ---- device memory -------------------------------------------------------- */

/* What the device has free (CUDA), 0 elsewhere. */
static size_t dev_free_bytes(void)
{
#ifdef BENCH_CUDA
    size_t f = 0, t = 0;
    if (reel_ctx_backend(g_ctx) == REEL_BACKEND_CUDA && cudaMemGetInfo(&f, &t) == cudaSuccess) return f;
#endif
    return 0;
}

/* Graph-memory attributes (memory of graph allocation nodes), -1 unknown. */
static void graph_mem_attrs(long long *used, long long *reserved)
{
    *used = *reserved = -1;
#ifdef BENCH_CUDA
    if (reel_ctx_backend(g_ctx) != REEL_BACKEND_CUDA) return;
    int dev = 0;
    uint64_t u = 0, r = 0;
    if (cudaGetDevice(&dev) == cudaSuccess &&
        cudaDeviceGetGraphMemAttribute(dev, cudaGraphMemAttrUsedMemCurrent, &u) == cudaSuccess &&
        cudaDeviceGetGraphMemAttribute(dev, cudaGraphMemAttrReservedMemCurrent, &r) == cudaSuccess) {
        *used = (long long)u;
        *reserved = (long long)r;
    }
#endif
}

/* The KV caches the three plans of a context share: device memory on CUDA,
 * host memory on the host backend (reel_plan_bind_state); NULL when there is
 * not enough. */
static void *cache_alloc(size_t bytes)
{
#ifdef BENCH_CUDA
    if (reel_ctx_backend(g_ctx) == REEL_BACKEND_CUDA) {
        void *p = NULL;
        if (cudaMalloc(&p, bytes) != cudaSuccess) {
            (void)cudaGetLastError(); /* clears it: an allocation that failed leaves nothing behind */
            return NULL;
        }
        return p;
    }
#endif
    return malloc(bytes ? bytes : 1);
}

static void cache_free(void *p)
{
#ifdef BENCH_CUDA
    if (reel_ctx_backend(g_ctx) == REEL_BACKEND_CUDA) {
        cudaFree(p);
        return;
    }
#endif
    free(p);
}

/* ---- the floor's bandwidth ------------------------------------------------- */

/* The device's copy bandwidth (read + written bytes of a 512 MiB
 * device-to-device cudaMemcpy, median of 9 after 3 warm-up) into
 * g_floor_tbps; the unmeasured figure stays where there is no CUDA device
 * or a call fails (said on stderr). */
static void measure_floor_bandwidth(void)
{
#ifdef BENCH_CUDA
    if (reel_ctx_backend(g_ctx) != REEL_BACKEND_CUDA) return;
    const size_t bytes = (size_t)512 << 20;
    void *src = NULL, *dst = NULL;
    cudaEvent_t a = NULL, b = NULL;
    double t[9];
    bool ok = cudaMalloc(&src, bytes) == cudaSuccess && cudaMalloc(&dst, bytes) == cudaSuccess &&
              cudaMemset(src, 1, bytes) == cudaSuccess && cudaEventCreate(&a) == cudaSuccess &&
              cudaEventCreate(&b) == cudaSuccess;
    for (int i = 0; ok && i < 12; i++) {
        float ms = 0;
        ok = cudaEventRecord(a, 0) == cudaSuccess &&
             cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, 0) == cudaSuccess &&
             cudaEventRecord(b, 0) == cudaSuccess && cudaEventSynchronize(b) == cudaSuccess &&
             cudaEventElapsedTime(&ms, a, b) == cudaSuccess && ms > 0;
        if (i >= 3) t[i - 3] = ms * 1e-3;
    }
    if (ok) {
        g_floor_tbps = 2.0 * (double)bytes / median(t, 9) / 1e12;
        g_floor_measured = true;
    } else {
        fprintf(stderr, "bench_decode: the copy bandwidth could not be measured (%s): the floor uses %.2f TB/s\n",
                cudaGetErrorString(cudaGetLastError()), FLOOR_TBPS_UNMEASURED);
    }
    if (a) cudaEventDestroy(a);
    if (b) cudaEventDestroy(b);
    cudaFree(src);
    cudaFree(dst);
#endif
}

/* ---- main ----------------------------------------------------------------- */

/* What a process pays once, before any plan of the benchmark: a plan of an
 * f32 and a bf16 matmul compiled (its warm-up creates the context's cuBLAS
 * handle and loads cuBLAS's first kernels) and destroyed; the device bytes
 * it leaves taken. -1 where unknown. */
static long long process_once_bytes(void)
{
    size_t f0 = dev_free_bytes();
    reel_graph *g;
    RK("the process-once graph", reel_graph_create(g_ctx, &g));
    int64_t d[2] = {REEL_DIM_TOKENS, 64}, wd[2] = {64, 64};
    static float w32[64 * 64];
    static uint16_t w16[64 * 64];
    reel_tensor x32 = reel_input(g, "x32", REEL_F32, 2, d), x16 = reel_input(g, "x16", REEL_BF16, 2, d);
    reel_tensor p32 = reel_param(g, "w32", REEL_F32, 2, wd), p16 = reel_param(g, "w16", REEL_BF16, 2, wd);
    RK("the process-once graph", reel_param_bind(g, p32, w32));
    RK("the process-once graph", reel_param_bind(g, p16, w16));
    RK("the process-once graph", reel_output(g, "y32", reel_matmul(g, x32, p32, false)));
    RK("the process-once graph", reel_output(g, "y16", reel_matmul(g, x16, p16, false)));
    reel_compile_opts o = REEL_COMPILE_OPTS_INIT;
    o.num_buckets = 1;
    o.buckets[0] = 64;
    reel_plan *p;
    RK("compiling the process-once graph", reel_compile(g, &o, &p));
    reel_plan_destroy(p);
    reel_graph_destroy(g);
    size_t f1 = dev_free_bytes();
    return f0 && f1 ? (long long)f0 - (long long)f1 : -1;
}

static reel_compile_opts compile_opts(const cfg *c, int nb, int max_context, bool no_capture)
{
    reel_compile_opts o = REEL_COMPILE_OPTS_INIT;
    o.num_buckets = nb;
    for (int i = 0; i < nb; i++) o.buckets[i] = c->batches[i];
    o.max_context = max_context;
    o.max_seqs = c->batches[nb - 1];
    o.no_capture = no_capture;
    return o;
}

/* The plan of the first nb batches, its weights written from the mapped
 * checkpoint, in *out. REEL_E_OOM comes back (no plan made, the library's
 * message in reel_ctx_last_error); any other failure ends the run. */
static reel_status compile(const cfg *c, const model *m, int nb, int num_blocks, int max_context, bool no_capture,
                           bool with_logits, double *ms, reel_plan **out)
{
    *out = NULL;
    reel_model_opts mo = model_opts(c, nb, num_blocks, max_context, with_logits);
    reel_graph *g;
    RK("creating the graph", reel_graph_create(g_ctx, &g));
    RK("building the graph", reel_model_build(m->mm, g, &mo));
    reel_compile_opts o = compile_opts(c, nb, max_context, no_capture);
    reel_plan *p;
    double t0 = now_s();
    reel_status st = reel_compile(g, &o, &p);
    reel_graph_destroy(g);
    if (st == REEL_E_OOM) return st;
    if (st != REEL_OK) die("compiling", st);
    /* the weights, copied from the mapped checkpoint into the plan */
    RK("writing the weights", reel_model_bind(m->mm, p, &mo));
    *ms = (now_s() - t0) * 1e3;
    *out = p;
    return REEL_OK;
}

static void bind_caches(const cfg *c, reel_plan *p, void **caches, size_t bytes)
{
    char n[48];
    for (int i = 0; i < c->layers; i++) {
        snprintf(n, sizeof n, "l%d.k_cache", i);
        RK("binding a k cache", reel_plan_bind_state(p, n, caches[2 * i], bytes));
        snprintf(n, sizeof n, "l%d.v_cache", i);
        RK("binding a v cache", reel_plan_bind_state(p, n, caches[2 * i + 1], bytes));
    }
}

static void write_logits(const cfg *c, reel_plan *p, int B, int C)
{
    const void *out;
    int64_t rows;
    RK("reading logits", reel_plan_output(p, "logits", &out, &rows));
    size_t n = (size_t)B * (size_t)c->vocab;
    float *f = xmalloc(n * 4);
    for (size_t i = 0; i < n; i++) f[i] = bf16_to_f32(((const uint16_t *)out)[i]);
    char path[512];
    snprintf(path, sizeof path, "%s/logits_b%d_c%d.f32", c->dir, B, C);
    FILE *fp = fopen(path, "wb");
    if (!fp || fwrite(f, 4, n, fp) != n || fclose(fp) != 0) {
        fprintf(stderr, "bench_decode: writing %s failed\n", path);
        exit(1);
    }
    free(f);
}

static void fmt_us(char *s, size_t n, double v) { v >= 0 ? snprintf(s, n, "%.1f", v) : snprintf(s, n, "-"); }

/* ---- device memory of a context -------------------------------------- */

/* What a context's plans need beside what the device has (see the top). */
typedef struct fit {
    bool known;            /* the backend told its free memory (reel_ctx_memory) */
    size_t need, avail, total;
    size_t kv;             /* the shared KV cache (the plan's states) */
    size_t params;         /* one plan's parameters */
    size_t other;          /* one plan's arena, step region and stream workspaces (and pinned staging on
                              the host backend) */
    size_t prefill;        /* the prefill's eager workspace: the arena of a step of --prefill-tokens
                              tokens */
    int plans;
} fit;

static int plan_count(const cfg *c)
{
    return c->one_plan ? 1 : 1 + (c->eager ? 1 : 0) + (c->logits || !c->eager ? 1 : 0);
}

/* reel_compile_estimate of the plan of the first nb batches at bps blocks a
 * sequence (nothing allocated); with prefill, of a plan whose one bucket is
 * a prefill step of --prefill-tokens tokens, what the prefill's eager steps
 * lay out past the plan's limits (the logits plan's, with its logits). */
static reel_status estimate(const cfg *c, const model *m, int nb, int bps, bool prefill, reel_plan_memory *pm)
{
    const int maxB = c->batches[nb - 1], max_context = bps * c->block_size;
    reel_model_opts mo = model_opts(c, nb, maxB * bps, max_context, prefill && c->logits);
    reel_compile_opts o = compile_opts(c, nb, max_context, prefill);
    if (prefill) {
        mo.num_buckets = o.num_buckets = 1;
        mo.buckets[0] = o.buckets[0] = c->prefill_tokens > maxB ? c->prefill_tokens : maxB;
    }
    reel_graph *g;
    RK("creating the graph", reel_graph_create(g_ctx, &g));
    RK("building the graph", reel_model_build(m->mm, g, &mo));
    *pm = (reel_plan_memory)REEL_PLAN_MEMORY_INIT;
    reel_status st = reel_compile_estimate(g, &o, pm);
    reel_graph_destroy(g);
    return st;
}

/* The library's figures for the plans of the first nb batches at bps blocks
 * a sequence (reel_compile_estimate) and the device's (reel_ctx_memory);
 * prefill: the prefill step's workspace (0: scale the largest bucket's arena
 * to the prefill's tokens). */
static void estimate_fit(const cfg *c, const model *m, int nb, int bps, size_t prefill, fit *f)
{
    memset(f, 0, sizeof *f);
    const int maxB = c->batches[nb - 1];
    reel_plan_memory pm;
    reel_status st = estimate(c, m, nb, bps, false, &pm);
    if (st != REEL_OK) die("estimating a plan's memory (reel_compile_estimate)", st);
    f->plans = plan_count(c);
    f->kv = pm.state_bytes;
    f->params = pm.param_bytes;
    f->other = pm.device_bytes + (reel_ctx_backend(g_ctx) == REEL_BACKEND_HOST ? pm.pinned_bytes : 0);
    f->prefill = prefill ? prefill : pm.bucket_arena_bytes[nb - 1] / (size_t)maxB * (size_t)c->prefill_tokens;
    f->known = reel_ctx_memory(g_ctx, &f->avail, &f->total) == REEL_OK;
    const char *fake = getenv("REEL_BENCH_FREE_GB"); /* a smaller card's view, for trying the skips */
    if (fake && *fake && atof(fake) > 0) {
        f->avail = (size_t)(atof(fake) * 1e9);
        f->total = f->total > f->avail ? f->total : f->avail;
        f->known = true;
    }
    /* one plan over its own cache: no shared cache beside it while it compiles */
    size_t extra = c->one_plan ? f->prefill : f->kv > f->prefill ? f->kv : f->prefill;
    f->need = f->kv + extra + (size_t)f->plans * (f->params + f->other) + ((size_t)1 << 30) + f->total / 50;
}

/* reel_model_kv_blocks: the tokens the KV cache of one plan of the first nb
 * batches could hold on this device now; -1 where it says none. */
static long long kv_tokens(const cfg *c, const model *m, int nb, int bps)
{
    const int max_context = bps * c->block_size;
    reel_model_opts mo = model_opts(c, nb, c->batches[nb - 1] * bps, max_context, false);
    reel_compile_opts o = compile_opts(c, nb, max_context, false);
    int32_t blocks = 0;
    int64_t tokens = 0;
    return reel_model_kv_blocks(m->mm, &mo, &o, 1.0, &blocks, &tokens) == REEL_OK ? (long long)tokens : -1;
}

static double gb(size_t b) { return (double)b * 1e-9; }

/* A point that does not run: its row in the table (the floor still means
 * something) and a skip line in reel_decode.txt (why after " : "). */
static void skip_point(const cfg *c, FILE *res, int B, int C, const fit *f, const char *why)
{
    char fl[64];
    printf("| %d | %d | - | - | - | - | %s | - | does not fit: %s |\n", B, C, floor_cells(c, B, C, fl, sizeof fl), why);
    fflush(stdout);
    fprintf(res, "skip batch=%d context=%d need_bytes=%zu avail_bytes=%zu kv_bytes=%zu param_bytes=%zu plans=%d : %s\n",
            B, C, f ? f->need : 0, f ? f->avail : 0, f ? f->kv : 0, f ? f->params : 0, f ? f->plans : 0, why);
    fflush(res);
    fprintf(stderr, "bench_decode: batch %d context %d skipped: %s\n", B, C, why);
}

/* How many of the batches (the first nb) fit at context C; each one dropped
 * is skipped with its figures. */
static int fit_batches(const cfg *c, const model *m, int C, int bps, FILE *res)
{
    int nb = c->nbatches;
    fit f;
    /* the prefill step's own layout, once (the batches barely move it) */
    reel_plan_memory pp;
    size_t prefill = estimate(c, m, nb, bps, true, &pp) == REEL_OK ? pp.arena_bytes + pp.static_bytes : 0;
    for (; nb > 0; nb--) {
        estimate_fit(c, m, nb, bps, prefill, &f);
        if (!f.known || f.need <= f.avail) break;
        char why[320];
        snprintf(why, sizeof why,
                 "needs %.1f GB (KV cache %.1f GB%s; %d plan%s of %.2f GB weights + %.2f GB workspace; margin "
                 "%.1f GB), %.1f GB free of %.1f",
                 gb(f.need), gb(f.kv), c->one_plan ? "" : ", twice while a plan compiles", f.plans,
                 f.plans > 1 ? "s" : "", gb(f.params), gb(f.other), gb(((size_t)1 << 30) + f.total / 50),
                 gb(f.avail), gb(f.total));
        skip_point(c, res, c->batches[nb - 1], C, &f, why);
    }
    if (nb > 0 && f.known)
        fprintf(stderr, "bench_decode: context %d: batches up to %d fit: %.1f GB of %.1f GB free (KV cache %.1f GB, "
                        "%d plan%s of %.2f + %.2f GB); one plan's KV cache could hold %lld tokens here "
                        "(reel_model_kv_blocks)\n",
                C, c->batches[nb - 1], gb(f.need), gb(f.avail), gb(f.kv), f.plans, f.plans > 1 ? "s" : "",
                gb(f.params), gb(f.other), kv_tokens(c, m, nb, bps));
    return nb;
}

/* ---- one context ------------------------------------------------------- */

/* The KV cache and the plans of one context. */
typedef struct plans {
    void **caches;
    size_t cache_bytes;
    reel_plan *rp, *ep, *lp;
    double ms_r, ms_e, ms_c, bind_ms;
    size_t free0, free1;
    long long gm_used, gm_res, eager_delta;
    reel_plan_stats st;
    reel_plan_memory mem;
    char why[480];         /* what ran out of memory */
} plans;

static void free_plans(const cfg *c, plans *P)
{
    reel_plan_destroy(P->rp);
    reel_plan_destroy(P->ep);
    reel_plan_destroy(P->lp);
    for (int i = 0; P->caches && i < 2 * c->layers; i++)
        if (P->caches[i]) cache_free(P->caches[i]);
    free(P->caches);
    P->caches = NULL;
    P->rp = P->ep = P->lp = NULL;
}

static reel_status oom(plans *P, const char *what)
{
    snprintf(P->why, sizeof P->why, "out of memory %s: %s", what, reel_ctx_last_error(g_ctx));
    return REEL_E_OOM;
}

/* The shared KV cache and the three plans of the first nb batches over it.
 * REEL_E_OOM (P->why says where) when something could not be allocated:
 * free_plans gives back what was. */
static reel_status make_plans(const cfg *c, const model *m, int nb, int bps, plans *P)
{
    memset(P, 0, sizeof *P);
    P->gm_used = P->gm_res = P->eager_delta = -1;
    const int maxB = c->batches[nb - 1], num_blocks = maxB * bps, max_context = bps * c->block_size;
    P->cache_bytes = (size_t)num_blocks * (size_t)c->block_size * (size_t)c->kv_heads * (size_t)head_dim(c) * 2;
    if (c->one_plan) { /* the replay plan's own KV states, nothing bound */
        P->free0 = dev_free_bytes();
        if (compile(c, m, nb, num_blocks, max_context, false, false, &P->ms_r, &P->rp) != REEL_OK)
            return oom(P, "compiling the replay plan");
        P->free1 = dev_free_bytes();
        graph_mem_attrs(&P->gm_used, &P->gm_res);
        P->st = (reel_plan_stats)REEL_PLAN_STATS_INIT;
        RK("plan stats", reel_plan_stats_get(P->rp, &P->st));
        P->mem = (reel_plan_memory)REEL_PLAN_MEMORY_INIT;
        RK("plan memory", reel_plan_memory_get(P->rp, &P->mem));
        RK("timing steps", reel_plan_time_steps(P->rp, 1));
        return REEL_OK;
    }
    P->caches = xmalloc((size_t)c->layers * 2 * sizeof *P->caches);
    memset(P->caches, 0, (size_t)c->layers * 2 * sizeof *P->caches);
    for (int i = 0; i < 2 * c->layers; i++)
        if (!(P->caches[i] = cache_alloc(P->cache_bytes))) {
            snprintf(P->why, sizeof P->why, "out of memory allocating the KV cache (%d x %.2f GB)", 2 * c->layers,
                     gb(P->cache_bytes));
            return REEL_E_OOM;
        }
    P->free0 = dev_free_bytes();
    if (compile(c, m, nb, num_blocks, max_context, false, false, &P->ms_r, &P->rp) != REEL_OK)
        return oom(P, "compiling the replay plan");
    P->free1 = dev_free_bytes();
    graph_mem_attrs(&P->gm_used, &P->gm_res);
    P->st = (reel_plan_stats)REEL_PLAN_STATS_INIT;
    RK("plan stats", reel_plan_stats_get(P->rp, &P->st));
    P->mem = (reel_plan_memory)REEL_PLAN_MEMORY_INIT;
    RK("plan memory", reel_plan_memory_get(P->rp, &P->mem));
    double t0 = now_s();
    bind_caches(c, P->rp, P->caches, P->cache_bytes);
    P->bind_ms = (now_s() - t0) * 1e3;
    RK("timing steps", reel_plan_time_steps(P->rp, 1));
    if (c->eager) {
        size_t fe0 = dev_free_bytes();
        if (compile(c, m, nb, num_blocks, max_context, true, false, &P->ms_e, &P->ep) != REEL_OK)
            return oom(P, "compiling the eager plan");
        size_t fe1 = dev_free_bytes();
        reel_plan_memory me = REEL_PLAN_MEMORY_INIT;
        RK("plan memory", reel_plan_memory_get(P->ep, &me));
        if (fe0 && fe1)
            P->eager_delta = (long long)fe0 - (long long)fe1 - (long long)(me.param_bytes + me.state_bytes);
        bind_caches(c, P->ep, P->caches, P->cache_bytes);
        RK("timing steps", reel_plan_time_steps(P->ep, 1));
    }
    /* The prefill runs on a plan without graphs (any of them would run it
     * eagerly): the logits plan when there is one. */
    if (c->logits || !P->ep) {
        if (compile(c, m, nb, num_blocks, max_context, true, c->logits, &P->ms_c, &P->lp) != REEL_OK)
            return oom(P, "compiling the logits plan");
        bind_caches(c, P->lp, P->caches, P->cache_bytes);
    }
    return REEL_OK;
}

/* KV blocks a sequence's table holds at context C: what the steps reach,
 * at least --max-context's. */
static int blocks_per_seq(const cfg *c, int C)
{
    const int bps_asked = (c->max_context + c->block_size - 1) / c->block_size;
    int maxk = 0;
    for (int i = 0; i < c->nloops; i++) maxk = c->loops[i] > maxk ? c->loops[i] : maxk;
    int bps = (C + c->warmup + c->steps + 2 * maxk + 1 + c->block_size - 1) / c->block_size;
    return bps < bps_asked ? bps_asked : bps;
}

/* --fit-only: the points of context C that fit (a row each) and those that
 * do not (skipped as a run would skip them); nothing compiled. */
static void fit_context(const cfg *c, const model *m, int C, FILE *res)
{
    int nb = fit_batches(c, m, C, blocks_per_seq(c, C), res);
    char fl[64];
    for (int i = 0; i < nb; i++)
        printf("| %d | %d | - | - | - | - | %s | - | fits (--fit-only: not run) |\n", c->batches[i], C,
               floor_cells(c, c->batches[i], C, fl, sizeof fl));
    fflush(stdout);
}

/* One context: the three plans over one cache, the prefill, every batch
 * that fits. Returns false when replay and eager disagree or a step did not
 * replay. */
static bool run_context(const cfg *c, const model *m, int C, FILE *res)
{
    const int N = c->warmup + c->steps;
    const int bps = blocks_per_seq(c, C);
    int nb = fit_batches(c, m, C, bps, res);
    plans P;
    for (; nb > 0; nb--) {
        if (make_plans(c, m, nb, bps, &P) == REEL_OK) break;
        free_plans(c, &P);
        skip_point(c, res, c->batches[nb - 1], C, NULL, P.why);
    }
    if (nb == 0) {
        fprintf(stderr, "bench_decode: context %d: no batch fits\n", C);
        return true;
    }
    const int maxB = c->batches[nb - 1];
    reel_plan *rp = P.rp, *ep = P.ep, *lp = P.lp;
    const reel_plan_memory mem = P.mem;
    const reel_plan_stats st = P.st;
    /* Device bytes the replay plan took at compile beside its params and its
     * own states (freed again by the bind): arena, step region, graphs, and
     * what the backend holds for the plan's streams. */
    long long dev_delta = P.free0 && P.free1 ? (long long)P.free0 - (long long)P.free1 : -1;
    long long other = dev_delta >= 0 ? dev_delta - (long long)(mem.param_bytes + mem.state_bytes) : -1;
    /* the prefill's plan: the logits plan, else the eager one, else (--one-plan) the replay plan, which
     * runs steps past its largest bucket eagerly */
    reel_plan *pre = lp ? lp : ep ? ep : rp;
    fprintf(res,
            "plan context=%d buckets=%d compile_ms=%.1f capture_ms=%.1f reel_compile_ms=%.1f bind_ms=%.1f "
            "eager_compile_ms=%.1f arena_bytes=%zu static_bytes=%zu graph_bytes_known=%d graph_bytes=%zu "
            "param_bytes=%zu state_bytes=%zu device_bytes=%zu stream_ws_bytes=%zu dev_delta_bytes=%lld dev_other_bytes=%lld "
            "graph_mem_used=%lld graph_mem_reserved=%lld graphs=%" PRIu64 " eager_dev_other_bytes=%lld\n",
            C, nb, st.compile_ms, st.capture_ms, P.ms_r, P.bind_ms, P.ms_e, mem.arena_bytes, mem.static_bytes,
            mem.graph_bytes_known, mem.graph_bytes, mem.param_bytes, mem.state_bytes, mem.device_bytes, mem.stream_ws_bytes, dev_delta,
            other, P.gm_used, P.gm_res, st.graphs_captured, P.eager_delta);
    fflush(res);

    batch b;
    batch_init(&b, c, maxB, bps, c->prefill_tokens);
    double t0 = now_s();
    prefill(pre, &b, c, 0, C);
    RK("trimming the prefill's workspace", reel_plan_trim(pre));
    fprintf(stderr, "bench_decode: context %d: plans %.0f / %.0f / %.0f ms, bind %.0f ms, prefill of %d x %d: %.2f s\n",
            C, P.ms_r, P.ms_e, P.ms_c, P.bind_ms, maxB, C, now_s() - t0);

    bool ok = true;
    int32_t *next_r = xmalloc((size_t)N * (size_t)maxB * 4), *next_e = xmalloc((size_t)N * (size_t)maxB * 4);
    int32_t *next_c = xmalloc((size_t)maxB * 4), *t0k = xmalloc((size_t)maxB * 4);
    for (int bi = 0; bi < nb; bi++) {
        const int B = c->batches[bi];
        run_result rr = decode_run(rp, &b, c, B, C, next_r);
        run_result re = {-1.0, -1.0, 0};
        if (ep) re = decode_run(ep, &b, c, B, C, next_e);
        int same_e = 0, same_c = 0;
        if (c->logits) {
            for (int s = 0; s < B; s++) t0k[s] = bench_token(c, s, C);
            decode_step(lp, &b, c, B, t0k, C, next_c, NULL);
            write_logits(c, lp, B, C);
        }
        for (size_t i = 0; ep && i < (size_t)N * (size_t)B; i++) same_e += next_r[i] == next_e[i];
        for (int s = 0; c->logits && s < B; s++) same_c += next_r[s] == next_c[s];
        bool eq = (!ep || same_e == N * B) && (!c->logits || same_c == B);
        if (!eq) {
            fprintf(stderr, "bench_decode: batch %d context %d: replay and eager differ (%d/%d ids), logits plan %d/%d\n",
                    B, C, same_e, N * B, same_c, B);
            ok = false;
        }
        if (rr.replays != c->steps) {
            fprintf(stderr, "bench_decode: batch %d context %d: only %d of %d timed steps replayed (%s)\n", B, C,
                    rr.replays, c->steps, reel_fallback_str(reel_plan_last_fallback(rp)));
            ok = false;
        }
        double fl = floor_us(c, B, C), fl_all = floor_us_of(c, B, C, true);
        char s1[32], s2[32], s3[32], s4[32], s5[64];
        fmt_us(s1, sizeof s1, rr.wall_us);
        fmt_us(s2, sizeof s2, rr.gpu_us);
        fmt_us(s3, sizeof s3, re.wall_us);
        fmt_us(s4, sizeof s4, re.gpu_us);
        printf("| %d | %d | %s | %s | %s | %s | %s | %.2f | %s |\n", B, C, s1, s2, s3, s4,
               floor_cells(c, B, C, s5, sizeof s5), rr.wall_us / fl, eq ? "yes" : "NO");
        fflush(stdout);
        fprintf(res, "case batch=%d context=%d replay_us=%.3f replay_gpu_us=%.3f eager_us=%.3f eager_gpu_us=%.3f "
                     "floor_us=%.3f floor_all_us=%.3f replays=%d replay_eq_eager=%d\n",
                B, C, rr.wall_us, rr.gpu_us, re.wall_us, re.gpu_us, fl, fl_all, rr.replays, eq ? 1 : 0);
        for (int i = 0; i < N; i++) {
            fprintf(res, "tokens batch=%d context=%d step=%d :", B, C, i);
            for (int s = 0; s < B; s++) fprintf(res, " %d", next_r[(size_t)i * (size_t)B + (size_t)s]);
            fputc('\n', res);
        }
        fflush(res);
    }
    if (c->nloops) {
        printf("\nreel_step_n (issue 47): per step, host loop = single reel_step calls with the ids fed back; "
               "loop = one reel_step_n of k steps; overhead = wall - the device time of a single replayed step; "
               "medians of 5\n\n| batch | context | k | host wall us | step gpu us | host overhead us | loop wall us "
               "| loop gpu us | loop overhead us | loop / host overhead | loop ran on | tokens equal |\n"
               "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
        for (int bi = 0; bi < nb; bi++)
            ok = loop_run(c, rp, &b, c->batches[bi], C, res) && ok;
        printf("\n");
    }
    free(next_r);
    free(next_e);
    free(next_c);
    free(t0k);
    batch_destroy(&b);
    free_plans(c, &P);
    return ok;
}

int main(int argc, char **argv)
{
    cfg c;
    parse(argc, argv, &c);
    if (mkdir(c.dir, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "bench_decode: mkdir %s: %s\n", c.dir, strerror(errno));
        return 1;
    }
    reel_ctx_opts co = REEL_CTX_OPTS_INIT;
    co.matmul_tuning = c.tuning ? 1 : 0;
    if (c.backend != REEL_BACKEND_AUTO) co.backend = c.backend;
    RK("creating the context", reel_ctx_create(&co, &g_ctx));
    measure_floor_bandwidth();
    model m = {0};
    char path[4096];
    double t0 = now_s();
    if (!c.model) {
        snprintf(path, sizeof path, "%s/model", c.dir);
        if (c.fit_only) {
            if (mkdir(path, 0755) != 0 && errno != EEXIST) {
                fprintf(stderr, "bench_decode: mkdir %s: %s\n", path, strerror(errno));
                return 1;
            }
            write_config(&c, path);
        } else {
            save_seeded(&c, path);
            fprintf(stderr, "bench_decode: seeded checkpoint written to %s in %.1f s\n", path, now_s() - t0);
        }
        t0 = now_s();
    }
    open_model(&c, &m, c.model ? c.model : path, c.fit_only && !c.model);
    check_cfg(&c);
    fprintf(stderr, "bench_decode: checkpoint %s: %d tensors, opened and checked in %.1f s\n", m.dir,
            reel_model_tensor_count(m.mm), now_s() - t0);

    snprintf(path, sizeof path, "%s/reel_decode.txt", c.dir);
    FILE *res = fopen(path, "w");
    if (!res) {
        fprintf(stderr, "bench_decode: %s: %s\n", path, strerror(errno));
        return 1;
    }
    char blist[128] = "", clist[128] = "";
    for (int i = 0, n = 0; i < c.nbatches; i++)
        n += snprintf(blist + n, sizeof blist - (size_t)n, "%s%d", i ? "," : "", c.batches[i]);
    for (int i = 0, n = 0; i < c.ncontexts; i++)
        n += snprintf(clist + n, sizeof clist - (size_t)n, "%s%d", i ? "," : "", c.contexts[i]);
    fprintf(res, "config layers=%d hidden=%d heads=%d kv_heads=%d head_dim=%d ffn=%d vocab=%d block_size=%d "
                 "seed=%" PRIu64 " steps=%d warmup=%d backend=%s batches=%s contexts=%s eager=%d version=%d "
                 "qkv_bias=%d o_bias=%d tied=%d floor_tbps=%.3f floor_measured=%d shape=%s rope_type=%s "
                 "rope_factor=%g rope_theta=%g plans=%d qk_norm=%d experts=%d experts_per_token=%d expert_ffn=%d "
                 "moe_layers=%d model=%s\n",
            c.layers, c.hidden, c.heads, c.kv_heads, head_dim(&c), c.ffn, c.vocab, c.block_size, c.seed, c.steps,
            c.warmup, reel_backend_name(reel_ctx_backend(g_ctx)), blist, clist, c.eager ? 1 : 0, reel_version(),
            c.qkv_bias ? 1 : 0, c.o_bias ? 1 : 0, c.tied ? 1 : 0, g_floor_tbps, g_floor_measured ? 1 : 0,
            c.model ? "checkpoint" : c.shape ? c.shape->name : "custom", reel_rope_type_name(c.rope_type),
            c.rope_factor, (double)c.theta, plan_count(&c), c.qk_norm ? 1 : 0, c.experts, c.topk, c.moe_ffn,
            c.moe_layers, m.dir);

    char rope[96];
    snprintf(rope, sizeof rope, "rope theta %g%s%s", (double)c.theta, c.rope_type ? ", " : "",
             c.rope_type ? reel_rope_type_name(c.rope_type) : "");
    if (c.rope_type) snprintf(rope + strlen(rope), sizeof rope - strlen(rope), " x%g", c.rope_factor);
    printf("reel decode step%s%s%s: %d layers, hidden %d, %d heads of %d (%d kv), ffn %d, vocab %d, bf16%s%s%s, %s, "
           "KV blocks of %d; backend %s; buckets %s\n",
           c.shape ? " (shape " : "", c.shape ? c.shape->name : "", c.shape ? ")" : "", c.layers, c.hidden, c.heads,
           head_dim(&c), c.kv_heads, c.ffn, c.vocab, c.qkv_bias ? ", q/k/v biases" : "", c.o_bias ? ", o bias" : "",
           c.tied ? ", tied embeddings" : "", rope, c.block_size, reel_backend_name(reel_ctx_backend(g_ctx)), blist);
    if (c.experts) {
        printf("mixture of experts: %d of %d layers, %d experts of ffn %d, %d a token", c.moe_layers, c.layers,
               c.experts, c.moe_ffn, c.topk);
        if (!c.model && c.shape && c.shape->real_layers > c.layers)
            printf(" (the real model has %d layers)", c.shape->real_layers);
        printf("%s\n", c.model ? "" : "; seeded routers: tokens spread over the experts about uniformly");
    }
    printf("wall: host time per step (set tokens + metadata, reel_step, next ids back); gpu: device time of the "
           "step (reel_plan_time_steps); medians of %d after %d warm-up\n\n",
           c.steps, c.warmup);
    printf("| batch | context | replay wall us | replay gpu us | eager wall us | eager gpu us | %s | "
           "replay / floor | replay == eager |\n",
           c.experts ? "floor us (expected experts) | floor us (all experts)" : "floor us");
    printf("| --- | --- | --- | --- | --- | --- | --- |%s --- | --- |\n", c.experts ? " --- |" : "");
    fflush(stdout);

    bool ok = true;
    fprintf(res, "process once_dev_bytes=%lld\n", process_once_bytes());
    for (int ci = 0; ci < c.ncontexts; ci++) {
        if (c.fit_only)
            fit_context(&c, &m, c.contexts[ci], res);
        else
            ok = run_context(&c, &m, c.contexts[ci], res) && ok;
    }
    fclose(res);
    printf("\nfloor: (weights but the embedding table + K/V of C+1 positions) / %.2f TB/s (%s).\n", g_floor_tbps,
           g_floor_measured ? "this device's copy bandwidth, measured at the start" : "not measured: no CUDA device");
    if (c.experts)
        printf("MoE layers: the dense weights (attention, norms, router) and, of the experts, in 'expected' those B "
               "tokens choosing %d of %d uniformly are expected to read, %d (1 - (1 - %d/%d)^B) a layer (exact at "
               "B = 1: the %d chosen; replay / floor uses it), in 'all' every expert (an upper bound).\n",
               c.topk, c.experts, c.experts, c.topk, c.experts, c.topk);
    printf("results for bench/torch_model.py: %s/reel_decode.txt\n", c.dir);
    reel_model_close(m.mm); /* every plan compiled (and destroyed) */
    reel_ctx_destroy(g_ctx);
    if (!ok) {
        fprintf(stderr, "bench_decode: replay and eager (or the logits plan) disagree, or steps did not replay\n");
        return 1;
    }
    return 0;
}
