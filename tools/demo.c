/* `reel demo`: options, the serving loop, and its summary (see demo.h). */
#include "demo.h"

#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hf.h"
#include "serve.h"

void demo_opts_default(demo_opts *o)
{
    memset(o, 0, sizeof *o);
    model_config m = MODEL_CONFIG_INIT;
    o->model = m;
    o->backend = REEL_BACKEND_AUTO;
    const int32_t b[] = {1, 2, 4, 8, 16, 32, 64};
    o->num_buckets = (int)(sizeof b / sizeof b[0]);
    memcpy(o->buckets, b, sizeof b);
    o->max_context = 256;
    o->max_seqs = 16;
    o->requests = 48;
    o->seed = 1;
    o->top_p = 1.0f;
}

/* ---- timing and percentiles ---------------------------------------------- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct samples { double *v; size_t n, cap; } samples;

static int samples_push(samples *s, double x)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 1024;
        double *v = realloc(s->v, cap * sizeof *v);
        if (!v) return -1;
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = x;
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Nearest-rank percentile; sorts s in place. 0 for no samples. */
static double percentile(samples *s, double q)
{
    if (s->n == 0) return 0.0;
    qsort(s->v, s->n, sizeof *s->v, cmp_double);
    size_t rank = (size_t)ceil(q * (double)s->n);
    return s->v[rank == 0 ? 0 : rank - 1];
}

/* ---- progress ------------------------------------------------------------- */

typedef struct progress {
    FILE *f;
    bool tty, drawn;
    double last;
} progress;

static void progress_draw(progress *pg, const serve_state *s, const demo_result *r, uint64_t replays,
                          bool final)
{
    if (!pg->f) return;
    double t = now_s();
    if (pg->tty) {
        if (!final && t - pg->last < 0.1) return;
        fprintf(pg->f, "\r\033[K");
    } else if (!final && r->steps % 100 != 0) {
        return;
    }
    pg->last = t;
    pg->drawn = true;
    fprintf(pg->f, "step %" PRIu64 "  tokens %" PRIu64 "  replayed %" PRIu64 "  eager %" PRIu64
                   "  running %d  done %d/%d",
            r->steps, r->tokens, replays, r->steps - replays, s->num_running, s->num_done, s->o.requests);
    if (!pg->tty || final) fputc('\n', pg->f);
    fflush(pg->f);
}

/* ---- the loop ------------------------------------------------------------- */

static int largest_bucket(const demo_opts *o) { return o->buckets[o->num_buckets - 1]; }

static int token_budget(const demo_opts *o)
{
    int budget = o->max_tokens ? o->max_tokens : 2 * largest_bucket(o);
    if (o->fit && budget > largest_bucket(o)) budget = largest_bucket(o);
    return budget;
}

static reel_compile_opts compile_opts(const demo_opts *o)
{
    reel_compile_opts c = REEL_COMPILE_OPTS_INIT;
    c.num_buckets = o->num_buckets;
    memcpy(c.buckets, o->buckets, sizeof c.buckets);
    c.max_context = o->max_context;
    c.max_seqs = o->max_seqs;
    c.strict = o->strict;
    c.no_capture = o->eager;
    c.check_hazards = o->hazards;
    if (o->pdl) c.pdl = 1;
    if (o->no_pdl) c.pdl = 0;
    if (o->no_fuse) c.no_fuse = 1;
    return c;
}

static reel_step_info step_info(const serve_batch *b)
{
    reel_step_info si = { REEL_STEP_INFO_HEAD, .num_tokens = b->num_tokens,
        .num_seqs = b->num_seqs,
        .query_start = b->query_start,
        .positions = b->positions,
        .slot_mapping = b->slots,
        .context_lens = b->context_lens,
        .block_tables = b->block_tables,
        .block_table_stride = b->stride,
    };
    return si;
}

/* Pipeline stages (--pp): stage 0 is the run's own context and plan, on the
 * loop's thread; stages 1.. each run on a worker thread that steps its plan
 * whenever the loop releases a step (a barrier), since a stage's step blocks
 * in its receives until the previous stage sends. */
typedef struct pp_stage {
    struct run *u;
    int stage;
    reel_ctx *ctx;
    reel_plan *plan;
    reel_status st;
    char error[512];
} pp_stage;

typedef struct run {
    const demo_opts *o;
    demo_result *r;
    reel_ctx *ctx;
    reel_plan *plan;
    serve_state s;
    samples all, replayed, eager;
    progress pg;
    /* --pp */
    int pp;
    model_config m;
    reel_comm *comm[DEMO_PP_MAX];
    pp_stage stage[DEMO_PP_MAX];
    pthread_t worker[DEMO_PP_MAX];
    int workers;
    pthread_barrier_t go, done;
    bool barriers, quit;
    reel_step_info si;
    /* the library's model: a checkpoint's (--model) or the seeded toy's */
    reel_model *mm;
    /* --temperature and friends: each token row's sampling inputs */
    float *sparams;      /* [token budget][REEL_SAMPLE_PARAMS] */
    int32_t *srng;       /* [token budget][REEL_SAMPLE_RNG] */
    /* --pp-env: this process's stage of a world of processes */
    bool ranks;
    int rank;
    reel_comm *world;
    int32_t *desc;        /* a step's broadcast descriptor (CP: one a rank) */
    int32_t *cp_next;     /* CP: every rank's next tokens, batch order */
    size_t desc_words;
    /* --loop: reel_step_n's limits, tokens and step counts */
    int32_t *loop_limit, *loop_tokens, *loop_steps;
} run;

/* splitmix64: a request's stream key and its greedy draw, from the seed. */
static uint64_t mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* The sampling inputs of one sequence's rows [t0, t1): request req, whose
 * next token goes to position `pos`. A greedy request has temperature 0. */
static void sample_rows(run *u, int req, int32_t pos, int32_t t0, int32_t t1)
{
    const demo_opts *o = u->o;
    uint64_t key = mix64(o->seed ^ mix64((uint64_t)req + 1));
    bool greedy = (double)(mix64(key) >> 11) * 0x1.0p-53 < (double)o->greedy_share;
    for (int32_t t = t0; t < t1; t++) {
        float *p = u->sparams + (size_t)t * REEL_SAMPLE_PARAMS;
        int32_t *r = u->srng + (size_t)t * REEL_SAMPLE_RNG;
        p[REEL_SAMPLE_TEMPERATURE] = greedy ? 0.0f : o->temperature;
        p[REEL_SAMPLE_TOP_P] = o->top_p;
        p[REEL_SAMPLE_MIN_P] = o->min_p;
        p[REEL_SAMPLE_TOP_K] = (float)o->top_k;
        r[0] = (int32_t)(uint32_t)key;
        r[1] = (int32_t)(uint32_t)(key >> 32);
        r[2] = pos;   /* the counter: the position drawn for, the same in any batch */
        r[3] = 0;
    }
}

static reel_status set_sample_inputs(run *u, int32_t T)
{
    reel_status st = reel_plan_set_input(u->plan, REEL_MODEL_INPUT_SAMPLE_PARAMS, u->sparams, T);
    return st == REEL_OK ? reel_plan_set_input(u->plan, REEL_MODEL_INPUT_SAMPLE_RNG, u->srng, T) : st;
}

/* The library's reason: the context's message, or, with no context (its
 * creation failed), the calling thread's last one. */
static const char *reason(run *u, reel_status st)
{
    const char *m = reel_ctx_last_error(u->ctx);
    if (m && *m && (u->ctx || strcmp(m, "no context") != 0)) return m;
    if (!u->ctx && st == REEL_E_UNSUPPORTED)
        return u->o->backend == REEL_BACKEND_CUDA ? "the CUDA backend is not available here (reel built without "
                                                    "CUDA, or no CUDA device visible)"
                                                  : "that backend is not available here";
    return "(the library gave no reason)";
}

/* Records the failure of `what`; the library's message comes last. */
static reel_status fail(run *u, reel_status st, const char *what)
{
    u->r->status = st;
    snprintf(u->r->error, sizeof u->r->error, "%s: %s: %s", what, reel_status_str(st), reason(u, st));
    return st;
}

/* The host backend runs every kernel on the CPU, and a step at a bucket
 * pads to all of its rows: the compile's warm-up runs the largest bucket
 * once, and every step that lands in it runs it again. Past this much work
 * a step takes minutes, so the demo refuses the configuration up front with
 * the figures instead of compiling in silence (docs/decisions.md). */
#define DEMO_HOST_STEP_FLOP_MAX 2e11

static bool host_work_refused(run *u)
{
    int pp = u->pp > 1 ? u->pp : 1;
    model_config stage = u->m;
    stage.layers = (u->m.layers + pp - 1) / pp; /* stages run side by side */
    double per_token = model_flop_per_token(&stage), work = per_token * largest_bucket(u->o);
    if (work <= DEMO_HOST_STEP_FLOP_MAX) return false;
    u->r->status = REEL_E_INVALID_ARG;
    snprintf(u->r->error, sizeof u->r->error,
             "the largest bucket (%d tokens) makes the host backend's warm-up at compile, and every step in that "
             "bucket, a CPU pass of %.2g flop through the matmuls (%.3g Mflop a token, minutes or more); the host "
             "backend takes at most %.3g flop a step, a largest bucket of %lld tokens for this model: give smaller "
             "--buckets, or run on a GPU (--backend cuda)",
             largest_bucket(u->o), work, per_token / 1e6, DEMO_HOST_STEP_FLOP_MAX,
             (long long)(DEMO_HOST_STEP_FLOP_MAX / per_token));
    return true;
}

static reel_status fail_step(run *u, reel_status st)
{
    const serve_batch *b = &u->s.b;
    demo_result *r = u->r;
    char where[256];
    r->failed_step = (int64_t)r->steps;
    r->failed_fallback = reel_plan_last_fallback(u->plan);
    if (st == REEL_E_FALLBACK && r->failed_fallback == REEL_FALLBACK_NONE) /* not recorded: our own view */
        r->failed_fallback = b->num_tokens > largest_bucket(u->o) ? REEL_FALLBACK_TOKENS_OVER_LIMIT
                             : b->longest_context > u->o->max_context ? REEL_FALLBACK_CONTEXT_OVER_LIMIT
                             : REEL_FALLBACK_NONE;
    int n = snprintf(where, sizeof where, "step %" PRIu64 " (%d tokens, %d sequences, longest context %d",
                     r->steps, b->num_tokens, b->num_seqs, b->longest_context);
    if (b->num_tokens > largest_bucket(u->o))
        n += snprintf(where + n, sizeof where - (size_t)n, "; tokens over the largest bucket %d",
                      largest_bucket(u->o));
    if (b->longest_context > u->o->max_context)
        n += snprintf(where + n, sizeof where - (size_t)n, "; context over --max-context %d", u->o->max_context);
    snprintf(where + n, sizeof where - (size_t)n, ")");
    if (st == REEL_E_FALLBACK) { /* the library's message says what and why; ours only where */
        r->status = st;
        snprintf(r->error, sizeof r->error, "step %" PRIu64 ": --strict forbids fallback: %s", r->steps,
                 reason(u, st));
        return st;
    }
    return fail(u, st, where);
}

/* ---- pipeline stages (--pp) ---------------------------------------------- */

/* Builds, compiles and weights stage k (every stage at once: compile
 * exchanges the collective sequences across the stages). */
static reel_status stage_compile(pp_stage *ps)
{
    run *u = ps->u;
    reel_graph *g = NULL;
    reel_status st = model_build_stage_with(u->mm, ps->ctx, &u->m, ps->stage, u->pp, &g);
    if (st == REEL_OK) {
        reel_compile_opts c = compile_opts(u->o);
        c.comm = u->comm[ps->stage];
        st = reel_compile(g, &c, &ps->plan);
    }
    reel_graph_destroy(g);
    if (st == REEL_OK)
        st = model_write_stage_with(u->mm, ps->plan, &u->m, ps->stage, u->pp);
    return st;
}

static void stage_note(pp_stage *ps, reel_status st, const char *what)
{
    ps->st = st;
    if (st != REEL_OK)
        snprintf(ps->error, sizeof ps->error, "stage %d: %s: %s: %s", ps->stage, what, reel_status_str(st),
                 reel_ctx_last_error(ps->ctx));
}

static void *stage_compile_main(void *arg)
{
    pp_stage *ps = arg;
    stage_note(ps, stage_compile(ps), "compiling");
    return NULL;
}

/* A worker: one step of its stage each time the loop releases one. */
static void *stage_main(void *arg)
{
    pp_stage *ps = arg;
    run *u = ps->u;
    for (;;) {
        pthread_barrier_wait(&u->go);
        if (u->quit) break;
        reel_status st = reel_step(ps->plan, &u->si);
        if (ps->st == REEL_OK) stage_note(ps, st, "step");
        pthread_barrier_wait(&u->done);
    }
    return NULL;
}

static reel_status pp_setup(run *u, const reel_ctx_opts *co)
{
    reel_ctx *ctxs[DEMO_PP_MAX];
    ctxs[0] = u->ctx;
    u->stage[0] = (pp_stage){.u = u, .stage = 0, .ctx = u->ctx};
    for (int k = 1; k < u->pp; k++) {
        u->stage[k] = (pp_stage){.u = u, .stage = k};
        reel_status st = reel_ctx_create(co, &u->stage[k].ctx);
        if (st != REEL_OK) return fail(u, st, "creating a stage's context");
        ctxs[k] = u->stage[k].ctx;
    }
    reel_comm_opts cmo = REEL_COMM_OPTS_INIT;
    cmo.timeout_ms = 60000;
    reel_status st = reel_comm_create_group(ctxs, u->pp, &cmo, u->comm);
    if (st != REEL_OK) return fail(u, st, "creating the stages' communicators");
    pthread_t th[DEMO_PP_MAX];
    for (int k = 1; k < u->pp; k++)
        if (pthread_create(&th[k], NULL, stage_compile_main, &u->stage[k]) != 0)
            return fail(u, REEL_E_BACKEND, "starting a stage's thread"); /* before any compile: none waits */
    stage_note(&u->stage[0], stage_compile(&u->stage[0]), "compiling");
    for (int k = 1; k < u->pp; k++) pthread_join(th[k], NULL);
    u->plan = u->stage[0].plan;
    u->stage[0].plan = NULL; /* owned by the run from here */
    for (int k = 0; k < u->pp; k++)
        if (u->stage[k].st != REEL_OK) {
            u->r->status = u->stage[k].st;
            snprintf(u->r->error, sizeof u->r->error, "%s", u->stage[k].error);
            return u->stage[k].st;
        }
    if (pthread_barrier_init(&u->go, NULL, (unsigned)u->pp) != 0) return fail(u, REEL_E_BACKEND, "a barrier");
    if (pthread_barrier_init(&u->done, NULL, (unsigned)u->pp) != 0) {
        pthread_barrier_destroy(&u->go);
        return fail(u, REEL_E_BACKEND, "a barrier");
    }
    u->barriers = true;
    for (int k = 1; k < u->pp; k++) {
        if (pthread_create(&u->worker[k], NULL, stage_main, &u->stage[k]) != 0)
            return fail(u, REEL_E_BACKEND, "starting a stage's thread");
        u->workers = k;
    }
    if (u->workers != u->pp - 1) return REEL_E_BACKEND;
    if (u->o->observer && u->o->observer->plan_ready) u->o->observer->plan_ready(u->o->observer->arg, u->plan);
    return REEL_OK;
}

/* Stage 0's step on this thread, the others' on their workers, together. */
static reel_status pp_step(run *u, const reel_step_info *si)
{
    u->si = *si;
    pthread_barrier_wait(&u->go);
    reel_status st = reel_step(u->plan, &u->si);
    pthread_barrier_wait(&u->done);
    for (int k = 1; k < u->pp && st == REEL_OK; k++)
        if (u->stage[k].st != REEL_OK) {
            st = u->stage[k].st;
            snprintf(u->stage[0].error, sizeof u->stage[0].error, "%s", u->stage[k].error);
        }
    return st;
}

/* Stops the workers, then plans before communicators before contexts. */
static void pp_teardown(run *u)
{
    if (u->barriers) {
        u->quit = true;
        if (u->workers == u->pp - 1) {
            pthread_barrier_wait(&u->go);
            for (int k = 1; k < u->pp; k++) pthread_join(u->worker[k], NULL);
        }
        pthread_barrier_destroy(&u->go);
        pthread_barrier_destroy(&u->done);
    }
    for (int k = 0; k < u->pp; k++) {
        reel_plan_destroy(u->stage[k].plan);
        u->stage[k].plan = NULL;
    }
    reel_plan_destroy(u->plan);
    u->plan = NULL;
    for (int k = 0; k < u->pp; k++) reel_comm_destroy(u->comm[k]);
    for (int k = 1; k < u->pp; k++) reel_ctx_destroy(u->stage[k].ctx);
}

static reel_status bad_config(run *u, const char *what, const char *err);
static reel_step_info step_info(const serve_batch *b);

/* The current batch's step (CP hands out shares of it). */
static const reel_step_info *step_info_ptr(run *u)
{
    u->si = step_info(&u->s.b);
    return &u->si;
}

/* ---- stages as processes (--pp-env) ---------------------------------------
 * Stage 0 runs the scheduler; before each step it broadcasts the step (a
 * descriptor: a command, the counts, then positions, slots, query starts,
 * context lengths and block tables) over the world communicator, and every
 * stage steps its plan with it; the stages' send/recv inside the graphs
 * carry the hidden states and the next tokens, as with threads. */
enum { DESC_STEP = 1, DESC_QUIT = 2, DESC_HEAD = 4 };

static size_t desc_words(const run *u)
{
    size_t budget = (size_t)token_budget(u->o), seqs = (size_t)u->o->max_seqs, stride = (size_t)u->s.b.stride;
    return DESC_HEAD + 3 * budget + 2 * seqs + 1 + seqs * stride;
}

/* Writes one step into descriptor d (cmd and the arrays). */
static void desc_put(int32_t *d, const reel_step_info *si, const int32_t *tokens)
{
    int32_t T = si->num_tokens, S = si->num_seqs, W = si->block_table_stride;
    d[0] = DESC_STEP, d[1] = T, d[2] = S, d[3] = W;
    int32_t *at = d + DESC_HEAD;
    memcpy(at, si->positions, 4 * (size_t)T), at += T;
    memcpy(at, si->slot_mapping, 4 * (size_t)T), at += T;
    memcpy(at, si->query_start, 4 * (size_t)(S + 1)), at += S + 1;
    memcpy(at, si->context_lens, 4 * (size_t)S), at += S;
    memcpy(at, si->block_tables, 4 * (size_t)S * (size_t)W), at += (size_t)S * (size_t)W;
    memcpy(at, tokens, 4 * (size_t)T);
}

/* The step descriptor d as a reel_step_info and its tokens. */
static reel_step_info desc_get(const int32_t *d, const int32_t **tokens)
{
    int32_t T = d[1], S = d[2];
    const int32_t *at = d + DESC_HEAD;
    reel_step_info si = {REEL_STEP_INFO_HEAD, .num_tokens = T, .num_seqs = S, .positions = at,
                         .slot_mapping = at + T, .query_start = at + 2 * T, .context_lens = at + 2 * T + S + 1,
                         .block_tables = at + 2 * T + 2 * S + 1, .block_table_stride = d[3]};
    *tokens = at + 2 * T + 2 * S + 1 + (size_t)S * (size_t)d[3];
    return si;
}

/* CP: rank q's share of the step, tokens [q Tl, (q + 1) Tl) of the batch
 * (rank-major), padded to Tl: its sequences' parts, their global context
 * lengths and block tables. */
static void cp_share(const serve_batch *b, int q, int32_t Tl, int32_t *d)
{
    int32_t lo = q * Tl, hi = lo + Tl < b->num_tokens ? lo + Tl : b->num_tokens, W = b->stride;
    int32_t *at = d + DESC_HEAD;
    int32_t *pos = at, *slot = at + Tl, *qs = at + 2 * Tl;
    int32_t S = 0;
    for (int s = 0; s < b->num_seqs; s++)
        S += b->query_start[s] < hi && b->query_start[s + 1] > lo;
    int32_t *ctx = qs + S + 1, *bt = ctx + S, *tok = bt + (size_t)S * (size_t)W;
    d[0] = DESC_STEP, d[1] = Tl, d[2] = S, d[3] = W;
    int32_t n = 0, k = 0;
    qs[0] = 0;
    for (int s = 0; s < b->num_seqs; s++) {
        int32_t a = b->query_start[s] > lo ? b->query_start[s] : lo;
        int32_t e = b->query_start[s + 1] < hi ? b->query_start[s + 1] : hi;
        if (a >= e) continue;
        for (int32_t t = a; t < e; t++, n++) {
            pos[n] = b->positions[t];
            slot[n] = b->slots[t];
            tok[n] = b->tokens[t];
        }
        qs[k + 1] = n;
        ctx[k] = b->context_lens[s];
        memcpy(bt + (size_t)k * (size_t)W, b->block_tables + (size_t)s * (size_t)W, 4 * (size_t)W);
        k++;
    }
    for (; n < Tl; n++) /* padding: after the last sequence, slot -1 */
        pos[n] = 0, slot[n] = -1, tok[n] = 0;
}

/* Stage 0: the step (and its tokens) to every stage (cmd DESC_QUIT: the run ends). */
static reel_status rank_send(run *u, int cmd, const reel_step_info *si, const int32_t *tokens)
{
    int32_t *d = u->desc;
    size_t words = u->desc_words * (u->o->cp_env ? (size_t)u->pp : 1);
    memset(d, 0, words * 4);
    d[0] = cmd;
    if (si && u->o->cp_env) {
        const serve_batch *b = &u->s.b;
        int32_t Tl = (b->num_tokens + u->pp - 1) / u->pp;
        for (int q = 0; q < u->pp; q++)
            cp_share(b, q, Tl, d + (size_t)q * u->desc_words);
    } else if (si) {
        desc_put(d, si, tokens);
    }
    return reel_comm_broadcast(u->world, d, words * 4, 0);
}

/* CP, every rank after its step: every rank's next tokens to every rank
 * (a broadcast from each), into u->cp_next in batch order. */
static reel_status cp_gather(run *u, int32_t Tl)
{
    const void *out = NULL;
    int64_t rows = 0;
    reel_status st = reel_plan_output(u->plan, MODEL_OUTPUT_NEXT, &out, &rows);
    for (int q = 0; q < u->pp && st == REEL_OK; q++) {
        int32_t *chunk = u->cp_next + (size_t)q * (size_t)Tl;
        if (q == u->rank)
            memcpy(chunk, out, 4 * (size_t)Tl);
        st = reel_comm_broadcast(u->world, chunk, 4 * (size_t)Tl, q);
    }
    return st;
}

/* CP, rank 0: the shares out, its own step, the next tokens back. */
static reel_status cp_step(run *u)
{
    reel_status st = rank_send(u, DESC_STEP, step_info_ptr(u), NULL);
    const int32_t *tokens;
    reel_step_info si = desc_get(u->desc, &tokens);
    if (st == REEL_OK)
        st = reel_plan_set_input(u->plan, MODEL_INPUT_TOKENS, tokens, si.num_tokens);
    if (st == REEL_OK)
        st = reel_step(u->plan, &si);
    return st == REEL_OK ? cp_gather(u, si.num_tokens) : st;
}

/* Stage 0's step: broadcast, then its own plan. */
static reel_status rank_step(run *u, const reel_step_info *si)
{
    reel_status st = rank_send(u, DESC_STEP, si, u->s.b.tokens);
    return st == REEL_OK ? reel_step(u->plan, si) : st;
}

/* Stages 1..: step each broadcast step until stage 0 says quit. */
static reel_status follow(run *u)
{
    for (;;) {
        reel_status st = reel_comm_broadcast(u->world, u->desc, u->desc_words * 4 * (u->o->cp_env ? (size_t)u->pp : 1), 0);
        if (st != REEL_OK) return fail(u, st, "waiting for stage 0's step");
        if (u->desc[0] != DESC_STEP) return REEL_OK;
        const int32_t *d = u->desc + (u->o->cp_env ? (size_t)u->rank * u->desc_words : 0), *tokens;
        reel_step_info si = desc_get(d, &tokens);
        /* DCP and CP: every rank embeds its tokens (PP: stage 0 alone) */
        st = u->o->dcp_env || u->o->cp_env ? reel_plan_set_input(u->plan, MODEL_INPUT_TOKENS, tokens, si.num_tokens)
                                           : REEL_OK;
        if (st == REEL_OK)
            st = reel_step(u->plan, &si);
        if (st == REEL_OK && u->o->cp_env)
            st = cp_gather(u, si.num_tokens);
        if (st != REEL_OK) return fail_step(u, st);
        u->r->steps++;
    }
}

/* This process's stage: the world from the environment, its plan. */
static reel_status rank_setup(run *u)
{
    reel_comm_opts cmo = REEL_COMM_OPTS_INIT;
    cmo.timeout_ms = 60000;
    reel_status st = reel_comm_create_env(u->ctx, &cmo, &u->world);
    if (st != REEL_OK) return fail(u, st, "joining the launcher's group");
    u->rank = reel_comm_rank(u->world);
    u->pp = reel_comm_size(u->world);
    u->r->stage = u->rank;
    u->r->stages = u->pp;
    if (u->o->dcp_env) { /* DCP: one stage, the attention sharded over the ranks */
        u->m.dcp_size = u->pp;
        u->m.dcp_rank = u->rank;
        u->r->model = u->m;
    }
    if (u->o->cp_env) { /* CP: one stage, the step's tokens split over the ranks */
        u->m.cp_size = u->pp;
        u->r->model = u->m;
    }
    const bool whole = u->o->dcp_env || u->o->cp_env;
    const int stages = whole ? 1 : u->pp, stage = whole ? 0 : u->rank;
    if (u->o->pp > 1 && u->o->pp != u->pp && !whole) {
        char err[128];
        snprintf(err, sizeof err, "--pp %d, but the launcher started %d processes", u->o->pp, u->pp);
        return bad_config(u, "--pp-env", err);
    }
    u->desc_words = desc_words(u);
    u->desc = calloc(u->desc_words * (u->o->cp_env ? (size_t)u->pp : 1), 4);
    u->cp_next = calloc((size_t)token_budget(u->o) + (size_t)u->pp, 4);
    if (!u->desc || !u->cp_next) return fail(u, REEL_E_OOM, "the step descriptor");
    reel_graph *g = NULL;
    st = model_build_stage_with(u->mm, u->ctx, &u->m, stage, stages, &g);
    if (st != REEL_OK) return fail(u, st, "building the stage's graph");
    reel_compile_opts c = compile_opts(u->o);
    c.comm = u->world;
    st = reel_compile(g, &c, &u->plan);
    reel_graph_destroy(g);
    if (st != REEL_OK) return fail(u, st, "compiling the stage");
    st = model_write_stage_with(u->mm, u->plan, &u->m, stage, stages);
    return st == REEL_OK ? REEL_OK : fail(u, st, "writing the stage's weights");
}

static reel_status bad_config(run *u, const char *what, const char *err)
{
    u->r->status = REEL_E_INVALID_ARG;
    snprintf(u->r->error, sizeof u->r->error, "%s: %s", what, err);
    return REEL_E_INVALID_ARG;
}

static reel_status setup(run *u)
{
    const demo_opts *o = u->o;
    char err[512];
    model_config m = o->model;
    /* A checkpoint's model before the context (its messages then are the
     * thread's): its shape sizes the workload. */
    reel_status st = o->model_dir ? model_open_dir(NULL, o->model_dir, &m, &u->mm) : REEL_OK;
    if (st != REEL_OK) return fail(u, st, "opening the model");
    m.logits_output = o->prompt_len > 0 && o->logits_path;
    m.sample = o->sample;
    if ((int)o->pp_env + (int)o->dcp_env + (int)o->cp_env > 1)
        return bad_config(u, "--pp-env", "one of --pp-env, --dcp-env and --cp-env: together they are not validated");
    if (o->cp_env && !o->fit)
        return bad_config(u, "--cp-env", "--cp-env needs --fit: a step past the context limit runs eagerly in its own "
                                         "layout on the ranks that hold its long sequence only, and the ranks' "
                                         "collectives would then disagree");
    if ((o->pp_env || o->dcp_env || o->cp_env) && (o->sample || o->loop > 1 || o->prompt_len > 0))
        return bad_config(u, o->pp_env ? "--pp-env" : o->dcp_env ? "--dcp-env" : "--cp-env", "ranks as processes serve the seeded workload greedily (no --temperature, "
                                         "--loop or --prompt)");
    if (o->sample) {
        if (u->pp > 1) return bad_config(u, "sampling", "--temperature and the sampling options take one stage (--pp 1)");
        size_t rows = (size_t)(o->prompt_len > 0 ? o->prompt_len : token_budget(o));
        u->sparams = calloc(rows * REEL_SAMPLE_PARAMS, sizeof *u->sparams);
        u->srng = calloc(rows * REEL_SAMPLE_RNG, sizeof *u->srng);
        if (!u->sparams || !u->srng) return fail(u, REEL_E_OOM, "sampling buffers");
    }
    if (o->loop > 1) {
        if (u->pp > 1) return bad_config(u, "loop", "--loop takes one stage (--pp 1)");
        u->loop_limit = calloc((size_t)o->max_seqs, sizeof *u->loop_limit);
        u->loop_steps = calloc((size_t)o->max_seqs, sizeof *u->loop_steps);
        u->loop_tokens = calloc((size_t)o->loop * (size_t)o->max_seqs, sizeof *u->loop_tokens);
        if (!u->loop_limit || !u->loop_steps || !u->loop_tokens) return fail(u, REEL_E_OOM, "loop buffers");
    }
    for (int i = 0; i < o->prompt_len; i++)
        if (o->prompt[i] < 0 || o->prompt[i] >= m.vocab) {
            snprintf(err, sizeof err, "token %d of --prompt is %d, outside the vocabulary [0, %d)", i, o->prompt[i],
                     m.vocab);
            return bad_config(u, "prompt", err);
        }
    if (o->prompt_len > 0) {
        int len = o->prompt_len + o->gen_tokens;
        m.num_blocks = (len + m.block_size - 1) / m.block_size;
    } else {
        serve_opts so = {
            .requests = o->requests, .seed = o->seed, .vocab = m.vocab,
            .largest_bucket = largest_bucket(o), .max_context = o->max_context, .max_seqs = o->max_seqs,
            .token_budget = token_budget(o), .block_size = m.block_size, .num_blocks = o->kv_blocks,
            .fit = o->fit,
        };
        if (serve_init(&u->s, &so, err, sizeof err) != 0) return bad_config(u, "workload", err);
        m.num_blocks = u->s.pool.num_blocks;
    }
    m.seed = o->seed;
    m.max_context = o->max_context;
    if (model_config_resolve(&m, err, sizeof err) != 0) {
        u->r->status = REEL_E_INVALID_ARG;
        snprintf(u->r->error, sizeof u->r->error, "model: %s", err);
        return REEL_E_INVALID_ARG;
    }
    reel_ctx_opts co = REEL_CTX_OPTS_INIT;
    co.backend = o->backend;
    co.device = o->device;
    if (u->pp > 1 && !o->pp_env) co.backend = REEL_BACKEND_HOST; /* one GPU holds one NCCL rank */
    const char *local_rank = getenv("LOCAL_RANK");
    if ((o->pp_env || o->dcp_env || o->cp_env) && local_rank && o->device == 0)
        co.device = atoi(local_rank); /* one GPU a process */
    st = reel_ctx_create(&co, &u->ctx);
    if (st != REEL_OK) return fail(u, st, "creating the context");
    u->r->backend = reel_ctx_backend(u->ctx);
    if (o->observer && o->observer->ctx_ready) o->observer->ctx_ready(o->observer->arg, u->ctx);
    if (o->save_dir && hf_save_seeded(u->ctx, &m, o->save_dir, err, sizeof err) != 0)
        return bad_config(u, "--save-model", err);
    if (!u->mm && (st = model_open(u->ctx, &m, &u->mm)) != REEL_OK)
        return fail(u, st, "the seeded model's config");
    u->m = m;
    if (u->r->backend == REEL_BACKEND_HOST && host_work_refused(u)) return REEL_E_INVALID_ARG;
    u->r->model = m;
    if (o->pp_env || o->dcp_env || o->cp_env) return rank_setup(u);
    if (u->pp > 1) return pp_setup(u, &co);
    reel_graph *g = NULL;
    st = model_build_stage_with(u->mm, u->ctx, &m, 0, 1, &g);
    if (st != REEL_OK) return fail(u, st, "building the model graph");
    reel_compile_opts c = compile_opts(o);
    st = reel_compile(g, &c, &u->plan);
    reel_graph_destroy(g);
    if (st != REEL_OK) return fail(u, st, "compiling the model");
    st = model_write_stage_with(u->mm, u->plan, &m, 0, 1);
    if (st != REEL_OK) return fail(u, st, m.hf ? "writing the checkpoint's weights" : "writing the weights");
    if (o->observer && o->observer->plan_ready) o->observer->plan_ready(o->observer->arg, u->plan);
    return REEL_OK;
}

static reel_status after_step(run *u, const int32_t *out, double t0);

/* The scheduled batch's tokens and, when sampling, each row's sampling inputs. */
static reel_status set_batch_inputs(run *u)
{
    const serve_batch *b = &u->s.b;
    reel_status st = reel_plan_set_input(u->plan, MODEL_INPUT_TOKENS, b->tokens, b->num_tokens);
    if (st == REEL_OK && u->o->sample) {
        for (int s = 0; s < b->num_seqs; s++)
            sample_rows(u, b->req[s], b->context_lens[s], b->query_start[s], b->query_start[s + 1]);
        st = set_sample_inputs(u, b->num_tokens);
    }
    return st;
}

static reel_status one_step(run *u)
{
    const serve_batch *b = &u->s.b;
    demo_result *r = u->r;
    reel_step_info si = step_info(b);
    double t0 = now_s();
    if (u->ranks && u->o->cp_env) { /* CP: each rank its share; the next tokens gathered */
        reel_status cst = cp_step(u);
        if (cst != REEL_OK) return fail_step(u, cst);
        return after_step(u, u->cp_next, t0);
    }
    reel_status st = set_batch_inputs(u);
    if (st != REEL_OK) return fail_step(u, st);
    st = u->ranks ? rank_step(u, &si) : u->pp > 1 ? pp_step(u, &si) : reel_step(u->plan, &si);
    if (st != REEL_OK && u->pp > 1 && u->stage[0].error[0]) { /* another stage failed: say which */
        fail_step(u, st);
        size_t n = strlen(u->r->error);
        snprintf(u->r->error + n, sizeof u->r->error - n, " (%s)", u->stage[0].error);
        return st;
    }
    if (st != REEL_OK) return fail_step(u, st);
    const void *out = NULL;
    int64_t rows = 0;
    st = reel_plan_output(u->plan, MODEL_OUTPUT_NEXT, &out, &rows);
    if (st != REEL_OK) return fail_step(u, st);
    if (rows != b->num_tokens) {
        u->r->failed_step = (int64_t)r->steps;
        u->r->status = REEL_E_INTERNAL;
        snprintf(r->error, sizeof r->error, "step %" PRIu64 ": output %s has %" PRId64 " rows, expected %d",
                 r->steps, MODEL_OUTPUT_NEXT, rows, b->num_tokens);
        return REEL_E_INTERNAL;
    }
    return after_step(u, (const int32_t *)out, t0);
}

/* A step's next tokens applied, its latency and counts recorded. */
static reel_status after_step(run *u, const int32_t *out, double t0)
{
    const serve_batch *b = &u->s.b;
    demo_result *r = u->r;
    double t1 = now_s(), ms = (t1 - t0) * 1e3;
    serve_commit(&u->s, out);
    bool replayed = reel_plan_last_fallback(u->plan) == REEL_FALLBACK_NONE;
    const demo_observer *ob = u->o->observer;
    if (ob && ob->step_done) {
        demo_step_rec rec = {r->steps, b->num_tokens, b->num_seqs, b->longest_context,
                             reel_plan_last_fallback(u->plan), t0, t1};
        ob->step_done(ob->arg, u->plan, &rec);
    }
    if (samples_push(&u->all, ms) || samples_push(replayed ? &u->replayed : &u->eager, ms))
        return fail(u, REEL_E_OOM, "recording step latency");
    bool over_t = b->num_tokens > largest_bucket(u->o), over_c = b->longest_context > u->o->max_context;
    r->steps_over_tokens += over_t;
    r->steps_over_context += over_c;
    r->steps_over_any += over_t || over_c;
    r->steps++;
    r->tokens += (uint64_t)b->num_tokens;
    /* taken after the step ran: a refused step's tokens are not counted */
    r->prefill_tokens = u->s.prefill_tokens;
    r->decode_tokens = u->s.decode_tokens;
    return REEL_OK;
}

/* --loop: the batch just scheduled, decode only, as one reel_step_n of up
 * to k steps (serve_burst says how many keep the schedule single steps
 * would make); *done 0 when it does not qualify (the caller steps once). */
static reel_status burst(run *u, int k, int *done)
{
    serve_batch *b = &u->s.b;
    demo_result *r = u->r;
    *done = 0;
    if (u->pp > 1 || b->num_tokens > largest_bucket(u->o) || b->num_seqs > u->o->max_seqs) return REEL_OK;
    int32_t *limit = u->loop_limit;
    k = serve_burst(&u->s, k, limit);
    if (k < 2) return REEL_OK;
    reel_step_info si = step_info(b);
    double t0 = now_s();
    reel_status st = set_batch_inputs(u);
    if (st != REEL_OK) return fail_step(u, st);
    reel_loop_info li = REEL_LOOP_INFO_INIT;
    li.token_input = MODEL_INPUT_TOKENS;
    li.token_output = MODEL_OUTPUT_NEXT;
    li.rng_input = u->o->sample ? REEL_MODEL_INPUT_SAMPLE_RNG : NULL;
    li.max_steps = k;
    li.max_new_tokens = limit;
    li.tokens = u->loop_tokens;
    li.steps = u->loop_steps;
    st = reel_step_n(u->plan, &si, &li);
    if (st != REEL_OK) return fail_step(u, st);
    int iters = 0;
    uint64_t produced = 0;
    for (int s = 0; s < b->num_seqs; s++) {
        iters = u->loop_steps[s] > iters ? u->loop_steps[s] : iters;
        produced += (uint64_t)u->loop_steps[s];
    }
    double ms = (now_s() - t0) * 1e3;
    serve_commit_burst(&u->s, u->loop_tokens, iters, REEL_LOOP_NO_TOKEN);
    for (int i = 0; i < iters; i++)
        if (samples_push(&u->all, ms / iters) || samples_push(&u->replayed, ms / iters))
            return fail(u, REEL_E_OOM, "recording step latency");
    r->steps += (uint64_t)iters;
    r->tokens += produced;
    r->loop_calls++;
    r->loop_steps += (uint64_t)iters;
    r->prefill_tokens = u->s.prefill_tokens;
    r->decode_tokens = u->s.decode_tokens;
    *done = iters;
    return REEL_OK;
}

static reel_status loop(run *u)
{
    const demo_opts *o = u->o;
    demo_result *r = u->r;
    double t0 = now_s();
    reel_status st = REEL_OK;
    uint64_t replays = 0;
    while ((o->steps == 0 || r->steps < (uint64_t)o->steps) && serve_schedule(&u->s)) {
        if (o->stop && *o->stop) { /* the batch just scheduled is not run, nor counted */
            r->interrupted = true;
            break;
        }
        int ran = 0;
        if (o->loop > 1) {
            int k = o->loop;
            if (o->steps > 0 && (uint64_t)o->steps - r->steps < (uint64_t)k) k = (int)((uint64_t)o->steps - r->steps);
            st = burst(u, k, &ran);
            if (st != REEL_OK) break;
        }
        if (ran == 0) {
            st = one_step(u);
            if (st != REEL_OK) break;
            ran = 1;
        }
        replays += reel_plan_last_fallback(u->plan) == REEL_FALLBACK_NONE ? (uint64_t)ran : 0;
        progress_draw(&u->pg, &u->s, r, replays, false);
    }
    r->wall_s = now_s() - t0;
    if (u->pg.drawn || st == REEL_OK) progress_draw(&u->pg, &u->s, r, replays, true);
    return st;
}

/* ---- generation (--prompt) ------------------------------------------------ */

static float f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, f = h & 0x3ffu, u;
    if (e == 0x1f) u = sign | 0x7f800000u | (f << 13);
    else if (e != 0) u = sign | ((e + 112u) << 23) | (f << 13);
    else {
        float v = (float)f * (1.0f / 16777216.0f);
        return sign ? -v : v;
    }
    float v;
    memcpy(&v, &u, 4);
    return v;
}

/* Appends rows x vocab logits of dtype dt as float32 to f. */
static int write_logits(FILE *f, const void *data, int64_t n, reel_dtype dt)
{
    float buf[1024];
    for (int64_t i = 0; i < n;) {
        int64_t k = n - i < 1024 ? n - i : 1024;
        for (int64_t j = 0; j < k; j++, i++) {
            if (dt == REEL_F32) {
                buf[j] = ((const float *)data)[i];
            } else if (dt == REEL_BF16) {
                uint32_t u = (uint32_t)((const uint16_t *)data)[i] << 16;
                memcpy(&buf[j], &u, 4);
            } else {
                buf[j] = f16_to_f32(((const uint16_t *)data)[i]);
            }
        }
        if (fwrite(buf, sizeof(float), (size_t)k, f) != (size_t)k) return -1;
    }
    return 0;
}

/* One sequence: the prompt as one prefill step, then a decode step per
 * generated token; slot = position in blocks 0, 1, ... */
static reel_status gen_loop(run *u)
{
    const demo_opts *o = u->o;
    demo_result *r = u->r;
    const int P = o->prompt_len, N = o->gen_tokens, bs = u->m.block_size, V = u->m.vocab;
    int nb = (P + N + bs - 1) / bs;
    int32_t *buf = malloc((size_t)(3 * P + nb) * sizeof *buf);
    if (!buf) return fail(u, REEL_E_OOM, "generation buffers");
    FILE *lf = o->logits_path ? fopen(o->logits_path, "wb") : NULL;
    reel_status st = REEL_OK;
    if (o->logits_path && !lf) st = bad_config(u, "--logits", "cannot create the file");
    int32_t *pos = buf, *slots = buf + P, *toks = buf + 2 * P, *table = buf + 3 * P;
    for (int i = 0; i < nb; i++) table[i] = i;
    for (int i = 0; i < P; i++) pos[i] = slots[i] = i, toks[i] = o->prompt[i];
    double t0 = now_s();
    for (int k = 0; k < N && st == REEL_OK; k++) {
        int T = k == 0 ? P : 1;
        if (k > 0) pos[0] = slots[0] = P + k - 1, toks[0] = r->gen[k - 1];
        int32_t qs[2] = {0, T}, len = k == 0 ? P : P + k;
        reel_step_info si = { REEL_STEP_INFO_HEAD, .num_tokens = T, .num_seqs = 1, .query_start = qs, .positions = pos,
                             .slot_mapping = slots, .context_lens = &len, .block_tables = table,
                             .block_table_stride = nb};
        double s0 = now_s();
        st = reel_plan_set_input(u->plan, MODEL_INPUT_TOKENS, toks, T);
        if (st == REEL_OK && o->sample) {
            sample_rows(u, 0, len, 0, T);
            st = set_sample_inputs(u, T);
        }
        if (st == REEL_OK) st = reel_step(u->plan, &si);
        const void *out = NULL;
        int64_t rows = 0;
        if (st == REEL_OK) st = reel_plan_output(u->plan, MODEL_OUTPUT_NEXT, &out, &rows);
        if (st != REEL_OK) {
            fail(u, st, "generation step");
            r->failed_step = (int64_t)r->steps;
            break;
        }
        r->gen[k] = ((const int32_t *)out)[rows - 1];
        r->num_gen = k + 1;
        if (lf) {
            reel_dtype dt;
            int64_t re;
            st = reel_plan_output_desc(u->plan, MODEL_OUTPUT_LOGITS, &dt, &re);
            if (st == REEL_OK) st = reel_plan_output(u->plan, MODEL_OUTPUT_LOGITS, &out, &rows);
            if (st != REEL_OK) {
                fail(u, st, "reading the logits");
            } else if (re != V || write_logits(lf, out, rows * V, dt) != 0) {
                st = bad_config(u, "--logits", "cannot write the file");
            }
        }
        double ms = (now_s() - s0) * 1e3;
        if (st == REEL_OK && samples_push(&u->all, ms)) st = fail(u, REEL_E_OOM, "recording step latency");
        bool replayed = reel_plan_last_fallback(u->plan) == REEL_FALLBACK_NONE;
        if (st == REEL_OK && samples_push(replayed ? &u->replayed : &u->eager, ms))
            st = fail(u, REEL_E_OOM, "recording step latency");
        r->steps++;
        r->tokens += (uint64_t)T;
        *(k == 0 ? &r->prefill_tokens : &r->decode_tokens) += (uint64_t)T;
    }
    r->wall_s = now_s() - t0;
    r->generated = (uint64_t)r->num_gen;
    r->requests_done = st == REEL_OK;
    if (lf && fclose(lf) != 0 && st == REEL_OK) st = bad_config(u, "--logits", "cannot write the file");
    free(buf);
    return st;
}

static void finish(run *u)
{
    demo_result *r = u->r;
    r->stats = (reel_plan_stats)REEL_PLAN_STATS_INIT;
    if (u->plan) reel_plan_stats_get(u->plan, &r->stats);
    if (u->o->prompt_len == 0) r->requests_done = u->s.num_done;
    if (u->s.reqs)
        for (int k = 0; k < u->s.o.requests; k++) r->generated += (uint64_t)u->s.reqs[k].generated;
    if (u->o->prompt_len > 0) { /* FNV-1a over the generated tokens */
        uint64_t h = 0xcbf29ce484222325ull;
        for (int i = 0; i < r->num_gen; i++)
            for (int b = 0; b < 4; b++) h = (h ^ (((uint32_t)r->gen[i] >> (8 * b)) & 0xffu)) * 0x100000001b3ull;
        r->checksum = h;
    } else {
        r->checksum = serve_checksum(&u->s);
    }
    r->replay_p50_ms = percentile(&u->replayed, 0.5);
    r->eager_p50_ms = percentile(&u->eager, 0.5);
    r->p50_ms = percentile(&u->all, 0.5);
    r->p99_ms = percentile(&u->all, 0.99);
}

reel_status demo_run(const demo_opts *o, demo_result *r, FILE *prog)
{
    memset(r, 0, sizeof *r);
    r->failed_step = -1;
    run u = {.o = o, .r = r, .pp = o->pp > 1 && !o->pp_env ? o->pp : 1, .ranks = o->pp_env || o->dcp_env || o->cp_env};
    u.pg.f = u.ranks ? NULL : prog; /* set again below for stage 0 */
    u.pg.tty = prog && isatty(fileno(prog));
    reel_status st = setup(&u);
    if (u.ranks && u.rank == 0)
        u.pg.f = prog;
    if (st == REEL_OK && u.ranks && u.rank > 0)
        st = follow(&u);
    else if (st == REEL_OK)
        st = o->prompt_len > 0 ? gen_loop(&u) : loop(&u);
    if (u.ranks && u.rank == 0 && u.world)
        rank_send(&u, DESC_QUIT, NULL, NULL); /* the followers end (after a failure too) */
    finish(&u);
    if (u.plan && o->inspect)
        o->inspect(u.plan, o->inspect_arg);
    free(u.all.v);
    free(u.replayed.v);
    free(u.eager.v);
    serve_destroy(&u.s);
    if (u.pp > 1 && !u.ranks) pp_teardown(&u);
    reel_plan_destroy(u.plan);
    u.plan = NULL;
    reel_comm_destroy(u.world);
    free(u.desc);
    free(u.cp_next);
    reel_model_close(u.mm);
    free(u.sparams);
    free(u.srng);
    free(u.loop_limit);
    free(u.loop_steps);
    free(u.loop_tokens);
    reel_ctx_destroy(u.ctx);
    return st;
}
