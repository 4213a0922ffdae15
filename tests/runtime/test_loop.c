/* Issue 47: reel_step_n, many decode steps in one call. A shrunk Llama-3.2
 * and a shrunk Qwen3-MoE (the models layer, seeded checkpoints) run k steps
 * of a batch of sequences with their own contexts, limits and an eos id;
 * the tokens, step counts, every KV cache byte and the last step's logits
 * must equal those of the same steps taken one reel_step at a time (greedy
 * and sampled; k = 1, 8, 64), for the device loop, the host loop under the
 * hazard checker and the eager host loop. One loop graph per bucket,
 * whatever the calls; the arena never grows. Refusals change nothing. Runs
 * on the backend REEL_TEST_BACKEND names (tests/gpu registers the CUDA run). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reel/models.h"
#include "tests/core/opts.h"
#include "tests/models/fixture.h"

#define HAS(c, s) cr_assert(strstr(reel_ctx_last_error(c), (s)) != NULL, "message '%s' lacks '%s'", reel_ctx_last_error(c), (s))

enum { B = 3, BS = 4, MAXCTX = 96, NB = MAXCTX / BS, MAXK = 64 };
static const int prompt_len[B] = {5, 3, 7};

static const mfam *family(const char *name)
{
    for (int i = 0; i < mf_nfamilies; i++)
        if (strcmp(mf_families[i].name, name) == 0)
            return &mf_families[i];
    cr_assert_fail("no family %s", name);
    return NULL;
}

typedef enum { RUN_REPLAY, RUN_CHECKED, RUN_EAGER } run_mode;

typedef struct fx {
    reel_ctx *ctx;
    reel_plan *p;
    const mfam *f;
    char dir[256];
    int nstates;
    char names[64][64];
    size_t bytes[64];
} fx;

/* The model's plan: buckets 4 and 16, sampling, logits. */
static void fx_open(fx *x, const char *name, run_mode mode)
{
    memset(x, 0, sizeof *x);
    cr_assert_eq(reel_ctx_create(reel_test_ctx_opts(reel_test_backend()), &x->ctx), REEL_OK);
    x->f = family(name);
    snprintf(x->dir, sizeof x->dir, "%s", mf_tmpdir());
    mweights w;
    mf_write(x->f, REEL_F32, 0x100b + (uint64_t)x->f->vocab, x->dir, &w, NULL, NULL);
    mf_weights_free(&w);
    reel_model *m = NULL;
    cr_assert_eq(reel_model_open(x->ctx, x->dir, &m), REEL_OK, "%s", reel_ctx_last_error(x->ctx));
    reel_model_opts o = REEL_MODEL_OPTS_INIT;
    o.num_buckets = 2;
    o.buckets[0] = 4;
    o.buckets[1] = 16;
    o.max_context = MAXCTX;
    o.max_seqs = 4;
    o.block_size = BS;
    o.num_blocks = 4 * NB;
    o.logits = 1;
    o.sample = 1;
    reel_compile_opts co = REEL_COMPILE_OPTS_INIT;
    co.check_hazards = mode == RUN_CHECKED;
    co.no_capture = mode == RUN_EAGER;
    cr_assert_eq(reel_model_compile(m, &o, &co, &x->p), REEL_OK, "%s", reel_ctx_last_error(x->ctx));
    reel_model_close(m);
    for (int l = 0; l < x->f->layers; l++)
        for (int kv = 0; kv < 2; kv++) {
            snprintf(x->names[x->nstates], sizeof x->names[0], "l%d.%s_cache", l, kv ? "v" : "k");
            x->bytes[x->nstates] = (size_t)4 * NB * BS * x->f->kv_heads * x->f->head_dim * sizeof(float);
            x->nstates++;
        }
}

static void fx_close(fx *x)
{
    reel_plan_destroy(x->p);
    mf_rmdir(x->dir);
    reel_ctx_destroy(x->ctx);
}

/* Every state, concatenated. */
static char *states(fx *x)
{
    size_t all = 0;
    for (int i = 0; i < x->nstates; i++)
        all += x->bytes[i];
    char *buf = malloc(all), *at = buf;
    for (int i = 0; i < x->nstates; i++) {
        cr_assert_eq(reel_plan_read_state(x->p, x->names[i], at, x->bytes[i]), REEL_OK, "%s: %s", x->names[i],
                     reel_ctx_last_error(x->ctx));
        at += x->bytes[i];
    }
    return buf;
}
static void set_states(fx *x, const char *buf)
{
    for (int i = 0; i < x->nstates; i++) {
        cr_assert_eq(reel_plan_write_state(x->p, x->names[i], buf, x->bytes[i]), REEL_OK);
        buf += x->bytes[i];
    }
}
static size_t states_bytes(const fx *x)
{
    size_t all = 0;
    for (int i = 0; i < x->nstates; i++)
        all += x->bytes[i];
    return all;
}

/* The serving loop's view of B sequences: blocks, contexts, positions. */
typedef struct seqs {
    int32_t table[B][NB];
    int32_t ctx[B], pos[B], slot[B], tok[B], qs[B + 1];
    int32_t rng[B][REEL_SAMPLE_RNG];
    float par[B][REEL_SAMPLE_PARAMS];
} seqs;

static int32_t slot_of(const seqs *s, int q, int32_t pos) { return s->table[q][pos / BS] * BS + pos % BS; }

/* Prefill of every prompt in one step; the decode state after it. */
static void prefill(fx *x, seqs *s, float temp)
{
    int32_t tok[16], pos[16], slot[16], qs[B + 1], rng[16][REEL_SAMPLE_RNG];
    float par[16][REEL_SAMPLE_PARAMS];
    int T = 0;
    for (int q = 0; q < B; q++)
        for (int j = 0; j < NB; j++)
            s->table[q][j] = (NB - 1 - j) + q * NB; /* blocks in reverse: a slot off by one shows */
    for (int q = 0; q < B; q++) {
        qs[q] = T;
        for (int i = 0; i < prompt_len[q]; i++, T++) {
            tok[T] = (int32_t)((T * 37 + 11 + q) % x->f->vocab);
            pos[T] = i;
            slot[T] = slot_of(s, q, i);
            par[T][REEL_SAMPLE_TEMPERATURE] = temp;
            par[T][REEL_SAMPLE_TOP_P] = 1.0f;
            par[T][REEL_SAMPLE_MIN_P] = 0.0f;
            par[T][REEL_SAMPLE_TOP_K] = 0.0f;
            rng[T][0] = 1234 + q, rng[T][1] = 0, rng[T][2] = i, rng[T][3] = 0;
        }
        s->ctx[q] = prompt_len[q];
    }
    qs[B] = T;
    reel_step_info si = {REEL_STEP_INFO_HEAD, .num_tokens = T, .num_seqs = B, .query_start = qs, .positions = pos,
                         .slot_mapping = slot, .context_lens = s->ctx, .block_tables = &s->table[0][0],
                         .block_table_stride = NB};
    cr_assert_eq(reel_plan_set_input(x->p, REEL_MODEL_INPUT_TOKENS, tok, T), REEL_OK);
    cr_assert_eq(reel_plan_set_input(x->p, REEL_MODEL_INPUT_SAMPLE_PARAMS, par, T), REEL_OK);
    cr_assert_eq(reel_plan_set_input(x->p, REEL_MODEL_INPUT_SAMPLE_RNG, rng, T), REEL_OK);
    cr_assert_eq(reel_step(x->p, &si), REEL_OK, "%s", reel_ctx_last_error(x->ctx));
    const void *nx;
    int64_t rows;
    cr_assert_eq(reel_plan_output(x->p, REEL_MODEL_OUTPUT_NEXT, &nx, &rows), REEL_OK);
    for (int q = 0; q < B; q++) {
        s->tok[q] = ((const int32_t *)nx)[qs[q + 1] - 1];
        s->pos[q] = s->ctx[q];
        s->ctx[q] += 1;
        s->slot[q] = slot_of(s, q, s->pos[q]);
        s->qs[q] = q;
        memcpy(s->par[q], par[0], sizeof s->par[q]);
        s->rng[q][0] = 1234 + q, s->rng[q][1] = 0, s->rng[q][2] = s->pos[q], s->rng[q][3] = 0;
    }
    s->qs[B] = B;
}

static reel_step_info decode_info(seqs *s)
{
    reel_step_info si = {REEL_STEP_INFO_HEAD, .num_tokens = B, .num_seqs = B, .query_start = s->qs,
                         .positions = s->pos, .slot_mapping = s->slot, .context_lens = s->ctx,
                         .block_tables = &s->table[0][0], .block_table_stride = NB};
    return si;
}

static void set_decode_inputs(fx *x, seqs *s)
{
    cr_assert_eq(reel_plan_set_input(x->p, REEL_MODEL_INPUT_TOKENS, s->tok, B), REEL_OK);
    cr_assert_eq(reel_plan_set_input(x->p, REEL_MODEL_INPUT_SAMPLE_PARAMS, s->par, B), REEL_OK);
    cr_assert_eq(reel_plan_set_input(x->p, REEL_MODEL_INPUT_SAMPLE_RNG, s->rng, B), REEL_OK);
}

static reel_loop_info loop_info(int k, const int32_t *limit, int neos, const int32_t *eos, int32_t *tokens,
                                int32_t *steps)
{
    reel_loop_info li = REEL_LOOP_INFO_INIT;
    li.token_input = REEL_MODEL_INPUT_TOKENS;
    li.token_output = REEL_MODEL_OUTPUT_NEXT;
    li.rng_input = REEL_MODEL_INPUT_SAMPLE_RNG;
    li.max_steps = k;
    li.num_eos = neos;
    for (int i = 0; i < neos; i++)
        li.eos_ids[i] = eos[i];
    li.max_new_tokens = limit;
    li.tokens = tokens;
    li.steps = steps;
    return li;
}

/* The loop's rule, one reel_step at a time: a running sequence takes its
 * token as the next input, one position and slot further, the next
 * counter; a stopped one keeps its inputs and writes no slot. */
static void single_steps(fx *x, seqs s, int k, const int32_t *limit, int neos, const int32_t *eos, int32_t *tokens,
                         int32_t *steps, float *logits, size_t logit_bytes)
{
    bool run[B];
    for (int q = 0; q < B; q++)
        run[q] = true, steps[q] = 0;
    for (int i = 0; i < k * B; i++)
        tokens[i] = REEL_LOOP_NO_TOKEN;
    for (int i = 0; i < k; i++) {
        bool any = false;
        for (int q = 0; q < B; q++)
            any |= run[q];
        if (!any)
            break;
        reel_step_info si = decode_info(&s);
        set_decode_inputs(x, &s);
        cr_assert_eq(reel_step(x->p, &si), REEL_OK, "%s", reel_ctx_last_error(x->ctx));
        const void *nx, *lg;
        int64_t rows;
        cr_assert_eq(reel_plan_output(x->p, REEL_MODEL_OUTPUT_NEXT, &nx, &rows), REEL_OK);
        cr_assert_eq(reel_plan_output(x->p, REEL_MODEL_OUTPUT_LOGITS, &lg, &rows), REEL_OK);
        memcpy(logits, lg, logit_bytes);
        for (int q = 0; q < B; q++) {
            if (!run[q])
                continue;
            int32_t t = ((const int32_t *)nx)[q];
            tokens[i * B + q] = t;
            steps[q]++;
            bool stop = steps[q] >= (limit ? limit[q] : k) || t < 0;
            for (int e = 0; e < neos; e++)
                stop |= t == eos[e];
            if (stop) {
                run[q] = false;
                s.slot[q] = -1;
                continue;
            }
            s.tok[q] = t;
            s.pos[q]++;
            s.ctx[q]++;
            s.slot[q] = slot_of(&s, q, s.pos[q]);
            s.rng[q][2]++;
        }
    }
}

/* k steps by the loop and one at a time from the same state: the same
 * tokens, counts, caches and last logits. */
static int32_t loop_vs_single(fx *x, float temp, int k, const int32_t *limit, int neos, const int32_t *eos)
{
    seqs s;
    prefill(x, &s, temp);
    char *start = states(x);
    const size_t lbytes = (size_t)B * x->f->vocab * sizeof(float);
    int32_t *tl = malloc(sizeof(int32_t) * k * B), *ts = malloc(sizeof(int32_t) * k * B);
    int32_t sl[B], ss[B];
    float *ll = malloc(lbytes), *ls = malloc(lbytes);
    reel_plan_stats before = REEL_PLAN_STATS_INIT, after = REEL_PLAN_STATS_INIT;
    cr_assert_eq(reel_plan_stats_get(x->p, &before), REEL_OK);

    reel_step_info si = decode_info(&s);
    set_decode_inputs(x, &s);
    reel_loop_info li = loop_info(k, limit, neos, eos, tl, sl);
    cr_assert_eq(reel_step_n(x->p, &si, &li), REEL_OK, "%s: %s", x->f->name, reel_ctx_last_error(x->ctx));
    const void *lg;
    int64_t rows;
    cr_assert_eq(reel_plan_output(x->p, REEL_MODEL_OUTPUT_LOGITS, &lg, &rows), REEL_OK);
    cr_assert_eq(rows, B);
    memcpy(ll, lg, lbytes);
    char *after_loop = states(x);
    cr_assert_eq(reel_plan_stats_get(x->p, &after), REEL_OK);
    cr_assert_eq(after.arena_bytes, before.arena_bytes, "the loop moved the arena");
    cr_assert_eq(after.loop_calls, before.loop_calls + 1);

    set_states(x, start);
    single_steps(x, s, k, limit, neos, eos, ts, ss, ls, lbytes);
    char *after_single = states(x);
    int ran = 0;
    for (int q = 0; q < B; q++) {
        cr_assert_eq(sl[q], ss[q], "%s k=%d: sequence %d took %d steps in the loop, %d one by one", x->f->name, k, q,
                     sl[q], ss[q]);
        ran = sl[q] > ran ? sl[q] : ran;
    }
    cr_assert_eq(after.loop_steps - before.loop_steps, (uint64_t)ran);
    for (int i = 0; i < k * B; i++)
        cr_assert_eq(tl[i], ts[i], "%s k=%d: step %d sequence %d: token %d in the loop, %d one by one", x->f->name,
                     k, i / B, i % B, tl[i], ts[i]);
    cr_assert(memcmp(after_loop, after_single, states_bytes(x)) == 0, "%s k=%d: the KV caches differ", x->f->name,
              k);
    cr_assert(memcmp(ll, ls, lbytes) == 0, "%s k=%d: the last step's logits differ", x->f->name, k);
    free(start);
    free(after_loop);
    free(after_single);
    free(tl);
    free(ts);
    free(ll);
    free(ls);
    return sl[1];
}

static void every_k(const char *name, run_mode mode, float temp)
{
    fx x;
    fx_open(&x, name, mode);
    const int ks[] = {1, 8, MAXK};
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++)
        loop_vs_single(&x, temp, ks[i], NULL, 0, NULL);
    /* Limits of their own: one sequence stops after 2 tokens, one after 5. */
    const int32_t limit[B] = {2, 40, 5};
    cr_assert_eq(loop_vs_single(&x, temp, 40, limit, 0, NULL), 40);
    /* An eos: the token sequence 1 produces third, as found without one. */
    int32_t tok[8 * B], st[B];
    seqs s;
    prefill(&x, &s, temp);
    reel_step_info si = decode_info(&s);
    set_decode_inputs(&x, &s);
    reel_loop_info li = loop_info(8, NULL, 0, NULL, tok, st);
    cr_assert_eq(reel_step_n(x.p, &si, &li), REEL_OK, "%s", reel_ctx_last_error(x.ctx));
    int32_t eos[2] = {-5, tok[2 * B + 1]};
    cr_assert(loop_vs_single(&x, temp, 8, NULL, 2, eos) <= 3, "sequence 1 ran past its eos");
    reel_plan_stats stt = REEL_PLAN_STATS_INIT;
    cr_assert_eq(reel_plan_stats_get(x.p, &stt), REEL_OK);
    if (mode == RUN_REPLAY && stt.loop_device_calls > 0)
        cr_assert_eq(stt.loop_graphs_captured, 1, "one loop graph for bucket 4, %llu built",
                     (unsigned long long)stt.loop_graphs_captured);
    if (mode != RUN_REPLAY)
        cr_assert_eq(stt.loop_device_calls, 0, "a checked or eager plan loops on the host");
    if (mode == RUN_CHECKED)
        cr_assert_eq(stt.hazards, 0);
    fx_close(&x);
}

Test(loop, llama_greedy_equals_single_steps) { every_k("Llama-3.2-1B", RUN_REPLAY, 0.0f); }
Test(loop, llama_sampled_equals_single_steps) { every_k("Llama-3.2-1B", RUN_REPLAY, 2.0f); }
Test(loop, moe_sampled_equals_single_steps) { every_k("Qwen3-30B-A3B", RUN_REPLAY, 2.0f); }
Test(loop, host_loop_under_the_checker_equals_single_steps) { every_k("Llama-3.2-1B", RUN_CHECKED, 2.0f); }
Test(loop, eager_host_loop_equals_single_steps) { every_k("Llama-3.2-1B", RUN_EAGER, 2.0f); }

/* Where the backend has device loops, one launch gives the tokens of a
 * whole call: stats say so on the host backend (CUDA: where the driver has
 * conditional nodes). */
Test(loop, the_host_backend_runs_one_loop_graph)
{
    if (reel_test_backend() != REEL_BACKEND_HOST)
        return;
    fx x;
    fx_open(&x, "Llama-3.2-1B", RUN_REPLAY);
    for (int r = 0; r < 3; r++)
        loop_vs_single(&x, 0.0f, 8, NULL, 0, NULL);
    reel_plan_stats st = REEL_PLAN_STATS_INIT;
    cr_assert_eq(reel_plan_stats_get(x.p, &st), REEL_OK);
    cr_assert_eq(st.loop_device_calls, 3);
    cr_assert_eq(st.loop_graphs_captured, 1);
    cr_assert(st.loop_bytes > 0);
    fx_close(&x);
}

/* Refused calls name what is wrong and change nothing. */
Test(loop, refusals_name_the_fault_and_change_nothing)
{
    fx x;
    fx_open(&x, "Llama-3.2-1B", RUN_REPLAY);
    seqs s;
    prefill(&x, &s, 0.0f);
    char *start = states(&x);
    int32_t tok[MAXK * B], st[B];
    struct {
        const char *what;
        reel_status want;
        void (*edit)(reel_loop_info *li, reel_step_info *si, seqs *s);
    } cases[] = {
        {"max_steps 0 is below 1", REEL_E_INVALID_ARG, NULL},
        {"num_eos 9", REEL_E_INVALID_ARG, NULL},
        {"token_input 'nope' is not an input", REEL_E_NOT_FOUND, NULL},
        {"token_output 'logits' must be [T] int32", REEL_E_INVALID_ARG, NULL},
        {"rng_input 'tokens' must be [T, 4] int32", REEL_E_INVALID_ARG, NULL},
        {"max_new_tokens 0", REEL_E_INVALID_ARG, NULL},
        {"past max_context", REEL_E_LIMIT, NULL},
        {"block table entry", REEL_E_INVALID_ARG, NULL},
        {"a loop step is a decode step", REEL_E_INVALID_ARG, NULL},
        {"tokens array is NULL", REEL_E_INVALID_ARG, NULL},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        seqs t = s;
        reel_step_info si = decode_info(&t);
        int32_t zero[B] = {1, 0, 1}, qs2[B + 1] = {0, 1, 1, 3};
        reel_loop_info li = loop_info(8, NULL, 0, NULL, tok, st);
        switch (c) {
        case 0: li.max_steps = 0; break;
        case 1: li.num_eos = 9; break;
        case 2: li.token_input = "nope"; break;
        case 3: li.token_output = REEL_MODEL_OUTPUT_LOGITS; break;
        case 4: li.rng_input = REEL_MODEL_INPUT_TOKENS; break;
        case 5: li.max_new_tokens = zero; break;
        case 6: li.max_steps = MAXCTX; break;
        case 7: t.table[2][(t.ctx[2] + 4) / BS] = 10000; break; /* a block the loop would reach */
        case 8: si.query_start = qs2; break; /* sequence 1 none, 2 two */
        case 9: li.tokens = NULL; break;
        }
        set_decode_inputs(&x, &t);
        reel_status got = reel_step_n(x.p, &si, &li);
        cr_assert_eq(got, cases[c].want, "case %zu (%s): %s", c, cases[c].what, reel_ctx_last_error(x.ctx));
        HAS(x.ctx, c == 1 ? "num_eos 9" : c == 5 ? "max_new_tokens 0" : cases[c].what);
        char *now = states(&x);
        cr_assert(memcmp(now, start, states_bytes(&x)) == 0, "case %zu changed a cache", c);
        free(now);
    }
    /* and the plan still loops */
    seqs t = s;
    reel_step_info si = decode_info(&t);
    set_decode_inputs(&x, &t);
    reel_loop_info li = loop_info(8, NULL, 0, NULL, tok, st);
    cr_assert_eq(reel_step_n(x.p, &si, &li), REEL_OK, "%s", reel_ctx_last_error(x.ctx));
    free(start);
    fx_close(&x);
}
