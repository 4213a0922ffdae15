/* Workload, KV block pool and continuous-batching scheduler (see serve.h). */
#include "serve.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- KV block pool -------------------------------------------------------- */

int kv_pool_init(kv_pool *p, int num_blocks)
{
    memset(p, 0, sizeof *p);
    p->free_ids = malloc((size_t)num_blocks * sizeof *p->free_ids);
    if (!p->free_ids) return -1;
    /* Highest id on top of the stack is arbitrary; LIFO reuse means a freed
     * block is handed out again soon, which exercises slot overwrites. */
    for (int i = 0; i < num_blocks; i++) p->free_ids[i] = num_blocks - 1 - i;
    p->num_free = p->num_blocks = num_blocks;
    return 0;
}

void kv_pool_destroy(kv_pool *p)
{
    free(p->free_ids);
    memset(p, 0, sizeof *p);
}

bool kv_pool_reserve(kv_pool *p, int n)
{
    if (p->num_free - p->reserved < n) return false;
    p->reserved += n;
    return true;
}

int32_t kv_pool_take(kv_pool *p)
{
    p->reserved--;
    return p->free_ids[--p->num_free];
}

void kv_pool_release(kv_pool *p, const int32_t *ids, int n, int unused)
{
    for (int i = 0; i < n; i++) p->free_ids[p->num_free++] = ids[i];
    p->reserved -= unused;
}

/* ---- workload ------------------------------------------------------------- */

typedef struct rng { uint64_t s; } rng;

static uint64_t rng_next(rng *r)
{
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform in [lo, hi]; lo when hi < lo. */
static int rng_range(rng *r, int lo, int hi)
{
    if (hi <= lo) return lo;
    return lo + (int)(rng_next(r) % (uint64_t)(hi - lo + 1));
}

static int imax(int a, int b) { return a > b ? a : b; }
static int imin(int a, int b) { return a < b ? a : b; }
static int ceil_div(int a, int b) { return (a + b - 1) / b; }

static serve_kind request_kind(const serve_opts *o, int k)
{
    if (!o->fit && k % 32 == 10) return SERVE_OVER_CONTEXT;
    return k % 8 == 3 ? SERVE_LONG : SERVE_SHORT;
}

/* Picks lengths. Requests other than over-context ones keep their whole
 * context (prompt + decode - 1 cached tokens) within max_context. */
static void request_lengths(const serve_opts *o, rng *r, serve_request *q)
{
    const int B = o->largest_bucket, C = o->max_context;
    if (q->kind == SERVE_OVER_CONTEXT) {
        q->prompt_len = rng_range(r, imax(1, C - 7), C);
        q->decode_len = rng_range(r, 10, 24);
        return;
    }
    if (q->kind == SERVE_LONG) {
        q->prompt_len = rng_range(r, B + 1, imax(B + 1, 5 * B / 2));
        q->decode_len = rng_range(r, 4, 24);
    } else {
        q->prompt_len = rng_range(r, 2, imax(2, B / 2));
        q->decode_len = rng_range(r, 4, 40);
    }
    q->prompt_len = imin(q->prompt_len, C);
    q->decode_len = imax(1, imin(q->decode_len, C - q->prompt_len + 1));
}

static int make_requests(serve_state *s, rng *r)
{
    const serve_opts *o = &s->o;
    int arrival = 0;
    for (int k = 0; k < o->requests; k++) {
        serve_request *q = &s->reqs[k];
        q->id = k;
        q->kind = request_kind(o, k);
        arrival += k == 0 ? 0 : rng_range(r, 0, 5);
        q->arrival = arrival;
        request_lengths(o, r, q);
        int len = q->prompt_len + q->decode_len;
        q->tokens = malloc((size_t)len * sizeof *q->tokens);
        int slots = len - 1; /* the last generated token is never fed back */
        q->need_blocks = ceil_div(imax(slots, 1), o->block_size);
        q->blocks = malloc((size_t)q->need_blocks * sizeof *q->blocks);
        if (!q->tokens || !q->blocks) return -1;
        for (int i = 0; i < q->prompt_len; i++) q->tokens[i] = (int32_t)rng_range(r, 0, o->vocab - 1);
        s->max_len = imax(s->max_len, imax(slots, 1));
    }
    return 0;
}

static int alloc_batch(serve_state *s)
{
    serve_batch *b = &s->b;
    size_t T = (size_t)s->o.token_budget, S = (size_t)s->o.max_seqs;
    b->stride = ceil_div(s->max_len, s->o.block_size);
    b->tokens = malloc(T * sizeof(int32_t));
    b->positions = malloc(T * sizeof(int32_t));
    b->slots = malloc(T * sizeof(int32_t));
    b->query_start = malloc((S + 1) * sizeof(int32_t));
    b->context_lens = malloc(S * sizeof(int32_t));
    b->block_tables = malloc(S * (size_t)b->stride * sizeof(int32_t));
    b->req = malloc(S * sizeof(int));
    s->running = malloc(S * sizeof(int));
    return b->tokens && b->positions && b->slots && b->query_start && b->context_lens && b->block_tables &&
                   b->req && s->running
               ? 0
               : -1;
}

int serve_init(serve_state *s, const serve_opts *o, char *err, size_t err_len)
{
    memset(s, 0, sizeof *s);
    s->o = *o;
    if (o->requests < 1 || o->vocab < 1 || o->largest_bucket < 1 || o->max_context < 1 || o->max_seqs < 1 ||
        o->token_budget < 1 || o->block_size < 1) {
        snprintf(err, err_len, "requests, vocab, buckets, max context, max seqs, token budget and block size "
                               "must be positive");
        return -1;
    }
    rng r = {o->seed ^ 0x5eedfaceull};
    s->reqs = calloc((size_t)o->requests, sizeof *s->reqs);
    if (!s->reqs || make_requests(s, &r) != 0 || alloc_batch(s) != 0) goto oom;
    int blocks = o->num_blocks;
    if (blocks == 0) blocks = imax(s->b.stride, o->max_seqs * s->b.stride / 2);
    if (blocks < s->b.stride) {
        snprintf(err, err_len, "--kv-blocks %d is too few: the longest request needs %d blocks of %d tokens",
                 blocks, s->b.stride, o->block_size);
        serve_destroy(s);
        return -1;
    }
    if (kv_pool_init(&s->pool, blocks) != 0) goto oom;
    return 0;
oom:
    snprintf(err, err_len, "out of host memory building the workload");
    serve_destroy(s);
    return -1;
}

void serve_destroy(serve_state *s)
{
    if (s->reqs)
        for (int k = 0; k < s->o.requests; k++) {
            free(s->reqs[k].tokens);
            free(s->reqs[k].blocks);
        }
    free(s->reqs);
    free(s->running);
    serve_batch *b = &s->b;
    free(b->tokens);
    free(b->positions);
    free(b->slots);
    free(b->query_start);
    free(b->context_lens);
    free(b->block_tables);
    free(b->req);
    kv_pool_destroy(&s->pool);
    memset(s, 0, sizeof *s);
}

/* ---- scheduler ------------------------------------------------------------ */

static void admit(serve_state *s)
{
    for (;;) {
        if (s->num_running == 0 && s->next_arrival < s->o.requests &&
            s->reqs[s->next_arrival].arrival > s->clock)
            s->clock = s->reqs[s->next_arrival].arrival; /* idle: jump to the next arrival */
        if (s->next_arrival >= s->o.requests || s->num_running >= s->o.max_seqs) return;
        serve_request *q = &s->reqs[s->next_arrival];
        if (q->arrival > s->clock || !kv_pool_reserve(&s->pool, q->need_blocks)) return;
        q->running = true;
        s->running[s->num_running++] = s->next_arrival++;
    }
}

/* Adds n tokens of request k, starting at its first uncached token. */
static void add_seq(serve_state *s, int k, int n)
{
    serve_batch *b = &s->b;
    serve_request *q = &s->reqs[k];
    const int bs = s->o.block_size, start = q->computed, seq = b->num_seqs;
    while (q->num_blocks * bs < start + n) q->blocks[q->num_blocks++] = kv_pool_take(&s->pool);
    for (int i = 0; i < n; i++) {
        int pos = start + i, t = b->num_tokens + i;
        b->tokens[t] = q->tokens[pos];
        b->positions[t] = pos;
        b->slots[t] = q->blocks[pos / bs] * bs + pos % bs;
    }
    int32_t *row = b->block_tables + (size_t)seq * (size_t)b->stride;
    for (int j = 0; j < b->stride; j++) row[j] = j < q->num_blocks ? q->blocks[j] : -1;
    b->context_lens[seq] = start + n;
    if (start + n > b->longest_context) b->longest_context = start + n;
    b->req[seq] = k;
    b->num_tokens += n;
    b->query_start[++b->num_seqs] = b->num_tokens;
    if (start >= q->prompt_len) s->decode_tokens += (uint64_t)n;
    else s->prefill_tokens += (uint64_t)n;
}

bool serve_schedule(serve_state *s)
{
    serve_batch *b = &s->b;
    if (s->num_done == s->o.requests) return false;
    admit(s);
    b->num_tokens = b->num_seqs = 0;
    b->longest_context = 0;
    b->query_start[0] = 0;
    for (int i = 0; i < s->num_running; i++) {
        serve_request *q = &s->reqs[s->running[i]];
        if (q->computed >= q->prompt_len && b->num_tokens < s->o.token_budget) add_seq(s, s->running[i], 1);
    }
    for (int i = 0; i < s->num_running; i++) {
        serve_request *q = &s->reqs[s->running[i]];
        int room = s->o.token_budget - b->num_tokens;
        if (q->computed < q->prompt_len && room > 0)
            add_seq(s, s->running[i], imin(room, q->prompt_len - q->computed));
    }
    s->clock++;
    return true;
}

static void finish(serve_state *s, int k)
{
    serve_request *q = &s->reqs[k];
    q->done = true;
    q->running = false;
    kv_pool_release(&s->pool, q->blocks, q->num_blocks, q->need_blocks - q->num_blocks);
    int j = 0;
    for (int i = 0; i < s->num_running; i++)
        if (s->running[i] != k) s->running[j++] = s->running[i];
    s->num_running = j;
    s->num_done++;
}

void serve_commit(serve_state *s, const int32_t *next_token)
{
    const serve_batch *b = &s->b;
    for (int i = 0; i < b->num_seqs; i++) {
        int k = b->req[i];
        serve_request *q = &s->reqs[k];
        q->computed += b->query_start[i + 1] - b->query_start[i];
        if (q->computed < q->prompt_len) continue; /* a prefill chunk: nothing sampled yet */
        q->tokens[q->prompt_len + q->generated++] = next_token[b->query_start[i + 1] - 1];
        if (q->generated == q->decode_len) finish(s, k);
    }
}

int serve_burst(serve_state *s, int k, int32_t *limit)
{
    serve_batch *b = &s->b;
    if (b->num_seqs == 0 || b->num_tokens != b->num_seqs) return 0;
    for (int i = 0; i < b->num_seqs; i++)
        if (s->reqs[b->req[i]].computed < s->reqs[b->req[i]].prompt_len) return 0;
    /* the tick of the next arrival, or, when an arrived one waits for room,
     * the first finish (it frees room) */
    if (s->next_arrival < s->o.requests) {
        const serve_request *n = &s->reqs[s->next_arrival];
        if (n->arrival > s->clock - 1) k = imin(k, n->arrival - (s->clock - 1));
        else
            for (int i = 0; i < b->num_seqs; i++) {
                const serve_request *q = &s->reqs[b->req[i]];
                k = imin(k, q->decode_len - q->generated);
            }
    }
    /* no step past max_context (those run eagerly, one at a time) */
    for (int i = 0; i < b->num_seqs; i++) k = imin(k, s->o.max_context - b->context_lens[i] + 1);
    if (k < 2) return 0;
    const int bs = s->o.block_size;
    for (int i = 0; i < b->num_seqs; i++) {
        const serve_request *q = &s->reqs[b->req[i]];
        limit[i] = imin(k, q->decode_len - q->generated);
    }
    for (int i = 0; i < b->num_seqs; i++) {
        serve_request *q = &s->reqs[b->req[i]];
        int last = b->context_lens[i] + limit[i] - 1; /* the furthest context */
        while (q->num_blocks * bs < last) q->blocks[q->num_blocks++] = kv_pool_take(&s->pool);
        int32_t *row = b->block_tables + (size_t)i * (size_t)b->stride;
        for (int j = 0; j < b->stride; j++) row[j] = j < q->num_blocks ? q->blocks[j] : -1;
    }
    return k;
}

void serve_commit_burst(serve_state *s, const int32_t *tokens, int iters, int32_t no_token)
{
    const serve_batch *b = &s->b;
    for (int t = 0; t < iters; t++)
        for (int i = 0; i < b->num_seqs; i++) {
            int32_t tok = tokens[(size_t)t * (size_t)b->num_seqs + (size_t)i];
            if (tok == no_token) continue;
            serve_request *q = &s->reqs[b->req[i]];
            q->computed++;
            q->tokens[q->prompt_len + q->generated++] = tok;
            if (t > 0) s->decode_tokens++; /* add_seq counted the first */
            if (q->generated == q->decode_len) finish(s, b->req[i]);
        }
    s->clock += iters - 1;
}

uint64_t serve_checksum(const serve_state *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (int k = 0; k < s->o.requests; k++) {
        const serve_request *q = &s->reqs[k];
        uint32_t words[2] = {(uint32_t)q->id, (uint32_t)q->generated};
        for (int w = 0; w < 2; w++)
            for (int byte = 0; byte < 4; byte++) h = (h ^ ((words[w] >> (8 * byte)) & 0xff)) * 0x100000001b3ull;
        for (int i = 0; i < q->generated; i++) {
            uint32_t t = (uint32_t)q->tokens[q->prompt_len + i];
            for (int byte = 0; byte < 4; byte++) h = (h ^ ((t >> (8 * byte)) & 0xff)) * 0x100000001b3ull;
        }
    }
    return h;
}
