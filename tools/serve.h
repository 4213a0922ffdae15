/* The serving side of `reel demo`: a seeded request workload, a paged KV
 * cache block pool, and a continuous-batching scheduler that turns the
 * running requests into one reel_step_info per step.
 *
 * Nothing here knows about plans or graphs: the scheduler plans steps the way
 * a serving engine would, with its own token budget, and the plan decides
 * whether a step replays or runs eagerly. The workload is shaped so that some
 * steps exceed the plan's fixed limits (see serve_init).
 */
#ifndef REEL_TOOLS_SERVE_H
#define REEL_TOOLS_SERVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A free list of KV cache block ids. Admission reserves the blocks a request
 * will need for its whole life, so a running request never waits for memory;
 * the blocks themselves are taken one by one as its context grows. */
typedef struct kv_pool {
    int32_t *free_ids;
    int num_free;
    int num_blocks;
    int reserved; /* promised to running requests, not yet taken */
} kv_pool;

int kv_pool_init(kv_pool *p, int num_blocks);
void kv_pool_destroy(kv_pool *p);
/* Promises n blocks; false if the free blocks not yet promised are fewer. */
bool kv_pool_reserve(kv_pool *p, int n);
/* Takes one promised block. */
int32_t kv_pool_take(kv_pool *p);
/* Returns blocks, and drops a promise of `unused` blocks never taken. */
void kv_pool_release(kv_pool *p, const int32_t *ids, int n, int unused);

typedef enum serve_kind {
    SERVE_SHORT,        /* prompt fits one bucket */
    SERVE_LONG,         /* prompt longer than the largest bucket */
    SERVE_OVER_CONTEXT, /* context grows past max_context while decoding */
} serve_kind;

typedef struct serve_request {
    int id;
    serve_kind kind;
    int arrival;      /* scheduler clock tick at which it arrives */
    int prompt_len;
    int decode_len;   /* tokens to generate */
    int32_t *tokens;  /* prompt_len + decode_len: prompt, then generated tokens */
    int computed;     /* tokens whose K/V are in the cache */
    int generated;
    int32_t *blocks;  /* block table */
    int num_blocks;
    int need_blocks;  /* for its whole life (reserved at admission) */
    bool running, done;
} serve_request;

typedef struct serve_opts {
    int requests;
    uint64_t seed;
    int vocab;
    int largest_bucket; /* the plan's token limit */
    int max_context;    /* the plan's context limit */
    int max_seqs;       /* sequences per step (the plan's limit; the scheduler keeps to it) */
    int token_budget;   /* tokens the scheduler puts in one step */
    int block_size;
    int num_blocks;     /* 0: derived from max_seqs and the longest request */
    bool fit;           /* shape the workload to stay inside the plan's limits */
} serve_opts;

/* One step's batch, in the layout reel_step_info wants. */
typedef struct serve_batch {
    int32_t num_tokens, num_seqs;
    int32_t *tokens, *positions, *slots; /* [token_budget] */
    int32_t *query_start;                /* [max_seqs + 1] */
    int32_t *context_lens;               /* [max_seqs] */
    int32_t *block_tables;               /* [max_seqs][stride] */
    int32_t stride;
    int *req;                            /* request index of each sequence */
    int32_t longest_context;
} serve_batch;

typedef struct serve_state {
    serve_opts o;
    serve_request *reqs;
    int next_arrival;    /* first request not yet admitted (requests arrive in id order) */
    int *running;        /* request indices, in admission order */
    int num_running;
    int num_done;
    int clock;
    int max_len;         /* longest request, tokens */
    kv_pool pool;
    serve_batch b;
    uint64_t prefill_tokens, decode_tokens;
} serve_state;

/* Generates the workload and sizes the pool. Request k is
 * - over-context when k % 32 == 10 (unless fit): its prompt ends just below
 *   max_context and decoding carries it past, so its steps run eagerly;
 * - long when k % 8 == 3: its prompt is longer than the largest bucket, so
 *   the step that prefills it exceeds the token limit unless the token
 *   budget is at most the largest bucket (chunked prefill);
 * - short otherwise. Lengths and arrival gaps come from the seed.
 * Returns -1 on bad options or out of memory (err says which). */
int serve_init(serve_state *s, const serve_opts *o, char *err, size_t err_len);
void serve_destroy(serve_state *s);

/* Admits arrived requests and builds the next step's batch: one decode
 * token for each running request past its prompt, then prefill chunks in
 * admission order while the token budget lasts. Returns false when every
 * request is done. */
bool serve_schedule(serve_state *s);

/* Applies the step's sampled tokens (next_token, one per batch token):
 * the last token of a sequence yields its next generated token once its
 * prompt is complete. Finished requests release their blocks. */
void serve_commit(serve_state *s, const int32_t *next_token);

/* Device loops (reel demo --loop): how many decode steps the batch just
 * scheduled may run in one reel_step_n call so that the schedule is the one
 * single steps would make: 0 (step once) unless the batch is decode only
 * and at least 2 steps qualify; at most k, no later than the tick the next
 * request arrives, while an arrived request waits for room no later than
 * the first running request's last token, and no step past max_context.
 * limit[q]: the tokens sequence q may produce in the burst (its
 * remaining ones, within max_context); its blocks for them are taken and
 * its block-table row written. */
int serve_burst(serve_state *s, int k, int32_t *limit);
/* Applies a burst of `iters` steps: tokens[i * num_seqs + q] of sequence q
 * at step i (no_token once it stopped), as serve_commit would step by step;
 * the clock moves on by iters - 1 (serve_schedule counted the first). */
void serve_commit_burst(serve_state *s, const int32_t *tokens, int iters, int32_t no_token);

/* FNV-1a over (request id, generated tokens) of all requests, in id order. */
uint64_t serve_checksum(const serve_state *s);

#endif
