/* Single-op graphs for plan tests: every op kind, with random parameters
 * and a step generator. Shared by the replay, fallback and GPU tests. */
#ifndef REEL_TESTS_OPGRAPHS_H
#define REEL_TESTS_OPGRAPHS_H

#include <stdint.h>

#include "reel/reel.h"

enum { OG_EMBEDDING, OG_MATMUL, OG_MATMUL_T, OG_ADD, OG_ADD_ROW, OG_MUL, OG_RMSNORM, OG_SILU, OG_ROPE,
       OG_SOFTMAX, OG_ARGMAX, OG_ATTENTION, OG_TOPK, OG_TOPK_PAGED, OG_LSE,
       OG_ATTENTION_ROPE, /* rope ops on q and k feeding the attention: compile fuses them */
       OG_SAMPLE,         /* logits [T, 40], per-row params and rng: mixed greedy, top-k, top-p, min-p rows */
       OG_COUNT };

#define OG_MAX_PARAMS 4
#define OG_HEADS 4
#define OG_KV_HEADS 2
#define OG_HEAD_DIM 16
#define OG_BLOCK 4
#define OG_BLOCKS 544

typedef struct og_graph {
    int kind;
    reel_dtype dt;
    reel_graph *g;
    void *params[OG_MAX_PARAMS]; /* bound parameter data, freed by og_free */
    int nparams;
} og_graph;

const char *og_name(int kind);
/* Builds graph `kind` with storage dtype dt and random parameters (seeded). */
reel_status og_build(reel_ctx *ctx, int kind, reel_dtype dt, uint64_t seed, og_graph *out);
void og_free(og_graph *og);

/* A step of n tokens: sets the inputs on p and fills *s (arrays owned by
 * the og_step). For attention: a mixed batch of prefill and decode sequences
 * whose contexts are below max_ctx, continuing `history` steps of each. */
typedef struct og_step {
    reel_step_info info;
    int32_t qs[65], pos[4096], slot[4096], ctx[64], bt[64 * 64];
} og_step;
reel_status og_make_step(reel_plan *p, int kind, reel_dtype dt, int32_t n, uint64_t seed, int32_t ctx_len,
                         og_step *s);

uint64_t og_rand(uint64_t *state);

#endif
