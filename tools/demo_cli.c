/* `reel demo` on the command line: options, summary table, exit status. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "demo.h"

void demo_usage(FILE *f)
{
    fputs("usage: reel demo [options]\n"
          "\n"
          "Serves a seeded stream of requests through a small decoder-only transformer\n"
          "(paged KV cache, continuous batching, greedy sampling), replaying a captured\n"
          "graph per token bucket and falling back to eager steps beyond the limits.\n"
          "Ctrl-C stops after the step in flight and prints the summary so far.\n"
          "Exit status: 0 done, 1 a step or the library failed, 2 bad options or\n"
          "configuration (nothing ran), 130 interrupted.\n"
          "\n",
          f);
    demo_options_usage(f);
}

void demo_options_usage(FILE *f)
{
    fputs("model:\n"
          "  --layers N         transformer layers (4)\n"
          "  --hidden N         hidden size (256)\n"
          "  --heads N          attention heads; head dim = hidden / heads (4)\n"
          "  --kv-heads N       KV heads (= heads)\n"
          "  --ffn N            feed-forward size (2 * hidden)\n"
          "  --vocab N          vocabulary (1024)\n"
          "  --dtype T          f32 | f16 | bf16 (bf16)\n"
          "  --block-size N     tokens per KV cache block (16)\n"
          "  --model DIR        serve a Hugging Face checkpoint: Llama, Mistral, Qwen2, Qwen3 (config.json\n"
          "                     and safetensors; its config sets the model options above)\n"
          "  --save-model DIR   write the seeded model there as such a checkpoint, then run\n"
          "generation (instead of the seeded request stream):\n"
          "  --prompt LIST      one request with these token ids (comma-separated)\n"
          "  --generate N       greedy tokens to generate for it (16)\n"
          "  --logits FILE      write every row's logits there, float32 [prompt + N - 1][vocab]\n"
          "sampling (in the graph; default: greedy, the argmax):\n"
          "  --temperature T    sample at temperature T (0: greedy)\n"
          "  --top-p P          keep the fewest most likely tokens whose mass reaches P (1: off)\n"
          "  --top-k K          keep the K most likely tokens (0: off)\n"
          "  --min-p M          keep tokens at least M times the most likely one's probability (0: off)\n"
          "  --greedy-share F   serve this fraction of the requests greedily, the rest sampled (0)\n"
          "                     (each request draws from its own stream: --seed and its id)\n"
          "plan limits:\n"
          "  --buckets LIST     token buckets to capture (1,2,4,8,16,32,64)\n"
          "  --max-context N    context limit of the graphs (256)\n"
          "  --max-seqs N       sequences per step (16)\n"
          "  --strict           a step beyond the limits is an error, not an eager step\n"
          "  --eager            capture nothing: every step runs eagerly\n"
          "  --check-hazards    run every step under the hazard checker\n"
          "  --pdl              programmatic dependent launch for every kernel that honours it (CUDA;\n"
          "                     default: for kernels of at most one wave)\n"
          "  --no-pdl           no programmatic dependent launch\n"
          "  --no-fuse          no fusion pass: every op its own kernel (to compare results)\n"
          "workload:\n"
          "  --max-tokens N     scheduler token budget per step (2 * largest bucket)\n"
          "  --requests N       requests to serve (48)\n"
          "  --steps N          stop after N steps (0: when all requests are done)\n"
          "  --kv-blocks N      KV cache blocks per layer (derived)\n"
          "  --fit              keep every step inside the plan's limits\n"
          "  --loop K           up to K decode steps per reel_step_n call (one launch) while the batch is\n"
          "                     decode only and no request arrives; the tokens are those of single steps\n"
          "  --seed N           weights and workload seed, decimal (1)\n"
          "run:\n"
          "  --backend B        auto | host | cuda (auto: REEL_BACKEND, else cuda if present)\n"
          "  --device N         CUDA device ordinal (0)\n"
          "  --pp N             pipeline stages, layers split between them, one thread, context and\n"
          "                     communicator each, send/recv inside the graphs (1; at most --layers)\n"
          "  --pp-env           the stages are processes: this one is stage RANK of WORLD_SIZE from a\n"
          "                     launcher (torchrun's RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT); stage 0\n"
          "                     schedules and prints, the others follow its steps\n"
          "  --dcp-env          the same launch, every rank the whole model with its KV cache sharded\n"
          "                     by tokens over the ranks (decode context parallel attention)\n"
          "  --cp-env           the same launch, each step's tokens split over the ranks (context\n"
          "                     parallel attention, every rank a replica of the KV cache)\n"
          "  --quiet            no progress line\n"
          "  -h, --help\n"
          "Options take their value as --opt VALUE or --opt=VALUE.\n",
          f);
}

/* The command being parsed ("demo", "check"), for messages. */
static const char *cmd_name = "demo";

static int parse_int(const char *opt, const char *s, long lo, long hi, int *out, FILE *err)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *s == '\0' || *end != '\0' || v < lo || v > hi) {
        fprintf(err, "reel %s: --%s wants an integer in [%ld, %ld], got '%s'\n", cmd_name, opt, lo, hi, s);
        return -1;
    }
    *out = (int)v;
    return 0;
}

static int parse_buckets(const char *s, demo_opts *o, FILE *err)
{
    int n = 0;
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (errno || end == p || *p == '-' || *p == '+' || v < 1 || v > 1 << 20 ||
            (*end != ',' && *end != '\0') || (*end == ',' && end[1] == '\0') || n == REEL_MAX_BUCKETS ||
            (n > 0 && v <= o->buckets[n - 1])) {
            fprintf(err, "reel %s: --buckets wants up to %d ascending positive integers separated by commas, "
                         "got '%s'\n", cmd_name, REEL_MAX_BUCKETS, s);
            return -1;
        }
        o->buckets[n++] = (int32_t)v;
        p = *end == ',' ? end + 1 : end;
    }
    if (n == 0) {
        fprintf(err, "reel %s: --buckets is empty\n", cmd_name);
        return -1;
    }
    o->num_buckets = n;
    return 0;
}

static int parse_dtype(const char *s, reel_dtype *out, FILE *err)
{
    const reel_dtype all[] = {REEL_F32, REEL_F16, REEL_BF16};
    for (size_t i = 0; i < 3; i++)
        if (strcmp(s, reel_dtype_name(all[i])) == 0) {
            *out = all[i];
            return 0;
        }
    fprintf(err, "reel %s: --dtype wants f32, f16 or bf16, got '%s'\n", cmd_name, s);
    return -1;
}

enum { O_LAYERS = 256, O_HIDDEN, O_HEADS, O_KV_HEADS, O_FFN, O_VOCAB, O_DTYPE, O_BLOCK, O_BUCKETS, O_CTX,
       O_SEQS, O_STRICT, O_EAGER, O_HAZARDS, O_TOKENS, O_REQUESTS, O_STEPS, O_KV_BLOCKS, O_FIT, O_SEED,
       O_BACKEND, O_QUIET, O_PDL, O_DEVICE, O_PP, O_MODEL, O_SAVE_MODEL, O_PROMPT, O_GENERATE, O_LOGITS,
       O_NO_PDL, O_NO_FUSE, O_TEMP, O_TOP_P, O_TOP_K, O_MIN_P, O_GREEDY_SHARE, O_LOOP, O_PP_ENV, O_DCP_ENV, O_CP_ENV };

static const struct option long_opts[] = {
    {"layers", required_argument, 0, O_LAYERS},     {"hidden", required_argument, 0, O_HIDDEN},
    {"heads", required_argument, 0, O_HEADS},       {"kv-heads", required_argument, 0, O_KV_HEADS},
    {"ffn", required_argument, 0, O_FFN},           {"vocab", required_argument, 0, O_VOCAB},
    {"dtype", required_argument, 0, O_DTYPE},       {"block-size", required_argument, 0, O_BLOCK},
    {"buckets", required_argument, 0, O_BUCKETS},   {"max-context", required_argument, 0, O_CTX},
    {"max-seqs", required_argument, 0, O_SEQS},     {"strict", no_argument, 0, O_STRICT},
    {"eager", no_argument, 0, O_EAGER},             {"check-hazards", no_argument, 0, O_HAZARDS},
    {"max-tokens", required_argument, 0, O_TOKENS}, {"requests", required_argument, 0, O_REQUESTS},
    {"steps", required_argument, 0, O_STEPS},       {"kv-blocks", required_argument, 0, O_KV_BLOCKS},
    {"fit", no_argument, 0, O_FIT},                 {"seed", required_argument, 0, O_SEED},
    {"backend", required_argument, 0, O_BACKEND},   {"quiet", no_argument, 0, O_QUIET},
    {"pdl", no_argument, 0, O_PDL},                 {"device", required_argument, 0, O_DEVICE},
    {"pp", required_argument, 0, O_PP},             {"model", required_argument, 0, O_MODEL},
    {"save-model", required_argument, 0, O_SAVE_MODEL}, {"prompt", required_argument, 0, O_PROMPT},
    {"generate", required_argument, 0, O_GENERATE}, {"logits", required_argument, 0, O_LOGITS},
    {"no-pdl", no_argument, 0, O_NO_PDL},           {"no-fuse", no_argument, 0, O_NO_FUSE},
    {"temperature", required_argument, 0, O_TEMP}, {"top-p", required_argument, 0, O_TOP_P},
    {"top-k", required_argument, 0, O_TOP_K},       {"min-p", required_argument, 0, O_MIN_P},
    {"greedy-share", required_argument, 0, O_GREEDY_SHARE}, {"loop", required_argument, 0, O_LOOP},
    {"pp-env", no_argument, 0, O_PP_ENV}, {"dcp-env", no_argument, 0, O_DCP_ENV},
    {"cp-env", no_argument, 0, O_CP_ENV},
    {"help", no_argument, 0, 'h'},                  {0, 0, 0, 0},
};

/* A float in [lo, hi] (lo_open: lo itself refused). */
static int parse_float(const char *name, const char *s, double lo, bool lo_open, double hi, float *out, FILE *err)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end != '\0' || !(v >= lo && v <= hi) || (lo_open && v == lo)) {
        fprintf(err, "reel %s: --%s wants a number in %s%g, %g], got '%s'\n", cmd_name, name, lo_open ? "(" : "[",
                lo, hi, s);
        return -1;
    }
    *out = (float)v;
    return 0;
}

static int parse_seed(const char *s, uint64_t *out, FILE *err)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10); /* decimal: 010 is ten, not octal eight */
    if (errno || *s < '0' || *s > '9' || *end != '\0') {
        fprintf(err, "reel %s: --seed wants a non-negative decimal integer, got '%s'\n", cmd_name, s);
        return -1;
    }
    *out = (uint64_t)v;
    return 0;
}

/* Token ids, comma-separated, into a buffer that lives as long as the process. */
static int parse_prompt(const char *s, demo_opts *o, FILE *err)
{
    static int32_t ids[DEMO_GEN_MAX];
    int n = 0;
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (errno || end == p || *p == '-' || *p == '+' || v > INT32_MAX || (*end != ',' && *end != '\0') ||
            (*end == ',' && end[1] == '\0') || n == DEMO_GEN_MAX) {
            fprintf(err, "reel %s: --prompt wants up to %d token ids (non-negative integers) separated by commas, "
                         "got '%s'\n", cmd_name, DEMO_GEN_MAX, s);
            return -1;
        }
        ids[n++] = (int32_t)v;
        p = *end == ',' ? end + 1 : end;
    }
    if (n == 0) {
        fprintf(err, "reel %s: --prompt is empty\n", cmd_name);
        return -1;
    }
    o->prompt = ids;
    o->prompt_len = n;
    return 0;
}

static int parse_one(int c, const char *a, demo_opts *o, FILE *err)
{
    if (c >= O_LAYERS && c <= O_DTYPE) o->model_opts_set = true;
    const long big = 1 << 20;
    model_config *m = &o->model;
    switch (c) {
    case O_LAYERS: return parse_int("layers", a, 1, 1024, &m->layers, err);
    case O_HIDDEN: return parse_int("hidden", a, 2, big, &m->hidden, err);
    case O_HEADS: return parse_int("heads", a, 1, 4096, &m->heads, err);
    case O_KV_HEADS: return parse_int("kv-heads", a, 1, 4096, &m->kv_heads, err);
    case O_FFN: return parse_int("ffn", a, 1, big, &m->ffn, err);
    case O_VOCAB: return parse_int("vocab", a, 2, big, &m->vocab, err);
    case O_DTYPE: return parse_dtype(a, &m->dtype, err);
    case O_BLOCK: return parse_int("block-size", a, 1, 4096, &m->block_size, err);
    case O_BUCKETS: return parse_buckets(a, o, err);
    case O_CTX: return parse_int("max-context", a, 1, big, &o->max_context, err);
    case O_SEQS: return parse_int("max-seqs", a, 1, 4096, &o->max_seqs, err);
    case O_TOKENS: return parse_int("max-tokens", a, 1, big, &o->max_tokens, err);
    case O_REQUESTS: return parse_int("requests", a, 1, big, &o->requests, err);
    case O_STEPS: return parse_int("steps", a, 0, 1L << 30, &o->steps, err);
    case O_LOOP: return parse_int("loop", a, 0, 4096, &o->loop, err);
    case O_PP_ENV: o->pp_env = true; return 0;
    case O_DCP_ENV: o->dcp_env = true; return 0;
    case O_CP_ENV: o->cp_env = true; return 0;
    case O_KV_BLOCKS: return parse_int("kv-blocks", a, 1, 1L << 24, &o->kv_blocks, err);
    case O_SEED: return parse_seed(a, &o->seed, err);
    case O_STRICT: o->strict = true; return 0;
    case O_EAGER: o->eager = true; return 0;
    case O_HAZARDS: o->hazards = true; return 0;
    case O_FIT: o->fit = true; return 0;
    case O_QUIET: o->quiet = true; return 0;
    case O_PDL: o->pdl = true; return 0;
    case O_NO_PDL: o->no_pdl = true; return 0;
    case O_NO_FUSE: o->no_fuse = true; return 0;
    case O_DEVICE: return parse_int("device", a, 0, 1023, &o->device, err);
    case O_PP: return parse_int("pp", a, 1, DEMO_PP_MAX, &o->pp, err);
    case O_MODEL: o->model_dir = a; return 0;
    case O_SAVE_MODEL: o->save_dir = a; return 0;
    case O_PROMPT: return parse_prompt(a, o, err);
    case O_GENERATE: return parse_int("generate", a, 1, DEMO_GEN_MAX, &o->gen_tokens, err);
    case O_LOGITS: o->logits_path = a; return 0;
    case O_TEMP: o->sample = true; return parse_float("temperature", a, 0, false, 100, &o->temperature, err);
    case O_TOP_P: o->sample = true; return parse_float("top-p", a, 0, true, 1, &o->top_p, err);
    case O_TOP_K: o->sample = true; return parse_int("top-k", a, 0, 1 << 23, &o->top_k, err);
    case O_MIN_P: o->sample = true; return parse_float("min-p", a, 0, false, 0.999999, &o->min_p, err);
    case O_GREEDY_SHARE: o->sample = true; return parse_float("greedy-share", a, 0, false, 1, &o->greedy_share, err);
    case O_BACKEND:
        if (reel_backend_parse(a, &o->backend) == REEL_OK) return 0;
        fprintf(err, "reel %s: --backend wants auto, host or cuda, got '%s'\n", cmd_name, a);
        return -1;
    default: return -1;
    }
}

int demo_parse_args(int argc, char **argv, demo_opts *o, FILE *err)
{
    optind = 0; /* GNU: full reinitialisation, so parsing twice in one process works */
    opterr = 0;
    cmd_name = argc > 0 && argv[0] ? argv[0] : "demo";
    int c;
    while ((c = getopt_long(argc, argv, "+h", long_opts, NULL)) != -1) {
        if (c == 'h') return 1;
        if (c == '?' || c == ':') {
            fprintf(err, "reel %s: unknown option or missing value: '%s' (see reel %s --help)\n", cmd_name,
                    argv[optind - 1], cmd_name);
            return 2;
        }
        if (parse_one(c, optarg, o, err) != 0) return 2;
    }
    if (optind < argc) {
        fprintf(err, "reel %s: unexpected argument '%s' (see reel %s --help)\n", cmd_name, argv[optind], cmd_name);
        return 2;
    }
    if (o->prompt_len && !o->gen_tokens) o->gen_tokens = 16;
    return 0;
}

int demo_check_config(const demo_opts *o, const char *cmd, FILE *err)
{
    const char *env = getenv("REEL_BACKEND");
    reel_backend_kind k;
    if (o->backend == REEL_BACKEND_AUTO && env && *env && reel_backend_parse(env, &k) != REEL_OK) {
        fprintf(err, "reel %s: the environment variable REEL_BACKEND is '%s'; it wants auto, host or cuda "
                     "(or unset it, or pass --backend)\n", cmd, env);
        return 2;
    }
    if (o->pp > o->model.layers) {
        fprintf(err, "reel %s: --pp %d wants at least %d layers (--layers is %d)\n", cmd, o->pp, o->pp,
                o->model.layers);
        return 2;
    }
    if (o->pp > 1 && o->backend == REEL_BACKEND_CUDA) {
        fprintf(err, "reel %s: --pp runs its stages on the host backend (multi-GPU runs are their own issue)\n",
                cmd);
        return 2;
    }
    if (o->model_dir && o->model_opts_set) {
        fprintf(err, "reel %s: --model takes the model's shape and dtype from its config.json; leave out --layers, "
                     "--hidden, --heads, --kv-heads, --ffn, --vocab and --dtype\n", cmd);
        return 2;
    }
    if (o->model_dir && o->save_dir) {
        fprintf(err, "reel %s: --save-model writes the seeded model; it cannot be used with --model\n", cmd);
        return 2;
    }
    if (!o->prompt_len && (o->gen_tokens || o->logits_path)) {
        fprintf(err, "reel %s: --generate and --logits go with --prompt\n", cmd);
        return 2;
    }
    if (o->prompt_len && o->pp > 1) {
        fprintf(err, "reel %s: --prompt runs one stage (leave out --pp)\n", cmd);
        return 2;
    }
    if (o->strict && o->eager) {
        fprintf(err, "reel %s: --strict refuses every eager step and --eager captures nothing, so every step "
                     "would be refused; use one of them\n", cmd);
        return 2;
    }
    return 0;
}

static volatile sig_atomic_t *interrupt_flag;

static void on_interrupt(int sig)
{
    (void)sig;
    if (interrupt_flag) *interrupt_flag = 1;
}

void demo_catch_interrupt(volatile sig_atomic_t *flag)
{
    interrupt_flag = flag;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_interrupt;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

/* ---- summary -------------------------------------------------------------- */

static const char *human_bytes(double b, char *buf, size_t n)
{
    const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (b >= 1024.0 && u < 4) {
        b /= 1024.0;
        u++;
    }
    snprintf(buf, n, u ? "%.1f %s" : "%.0f %s", b, unit[u]);
    return buf;
}

static void print_header(const demo_opts *o, const demo_result *r, FILE *f)
{
    const model_config *m = r->model.layers ? &r->model : &o->model; /* what ran: a checkpoint's config */
    fprintf(f, "reel demo: %d layers, hidden %d, %d heads (%d kv), ffn %d, vocab %d, %s, backend %s\n",
            m->layers, m->hidden, m->heads, m->kv_heads ? m->kv_heads : m->heads,
            m->ffn ? m->ffn : 2 * m->hidden, m->vocab, reel_dtype_name(m->dtype),
            reel_backend_name(r->backend) ? reel_backend_name(r->backend) : "?");
    if (o->model_dir) {
        const char *fam = reel_model_family_name((reel_model_family)m->family);
        const char *rope = reel_rope_type_name((reel_rope_type)m->rope_type);
        fprintf(f, "  model              %s (Hugging Face checkpoint, %s%s%s%s%s%s%s, head dim %d)\n", o->model_dir,
                fam ? fam : "?", m->qkv_bias ? ", qkv bias" : "", m->o_bias ? ", o bias" : "",
                m->qk_norm ? ", q/k norms" : "", m->tied ? ", tied embeddings" : "",
                m->rope_type ? ", rope " : "", m->rope_type && rope ? rope : "", model_head_dim(m));
    }
    fprintf(f, "  buckets            ");
    for (int i = 0; i < o->num_buckets; i++) fprintf(f, "%s%d", i ? "," : "", o->buckets[i]);
    fprintf(f, "   max context %d, max seqs %d%s%s\n", o->max_context, o->max_seqs, o->strict ? ", strict" : "",
            o->eager ? ", eager (no capture)" : "");
    if (o->pp > 1)
        fprintf(f, "  pipeline           %d stages (layers split between them; the stats below are stage 0's)\n",
                o->pp);
}

static void print_reasons(const demo_result *r, FILE *f)
{
    for (int i = 1; i < REEL_FALLBACK_COUNT; i++)
        if (r->stats.eager_by_reason[i])
            fprintf(f, "    %-26s %" PRIu64 "\n", reel_fallback_str((reel_fallback)i),
                    r->stats.eager_by_reason[i]);
}

static void print_generation(const demo_opts *o, const demo_result *r, FILE *f)
{
    const reel_plan_stats *s = &r->stats;
    fprintf(f, "  prompt             %d tokens\n", o->prompt_len);
    fprintf(f, "  generated          %d tokens:", r->num_gen);
    for (int i = 0; i < r->num_gen; i++) fprintf(f, " %d", r->gen[i]);
    fputc('\n', f);
    fprintf(f, "  steps              %" PRIu64 " (replays %" PRIu64 ", eager %" PRIu64 ")\n", r->steps, s->replays,
            s->eager_steps);
    print_reasons(r, f);
    fprintf(f, "  step latency       p50 %.3f ms, p99 %.3f ms\n", r->p50_ms, r->p99_ms);
    if (o->logits_path) fprintf(f, "  logits             %s\n", o->logits_path);
    fprintf(f, "  token checksum     %016" PRIx64 "\n", r->checksum);
}

void demo_print_summary(const demo_opts *o, const demo_result *r, FILE *f)
{
    const reel_plan_stats *s = &r->stats;
    char b1[32], b2[32], b3[32];
    print_header(o, r, f);
    if (o->prompt_len > 0) {
        print_generation(o, r, f);
        return;
    }
    if ((o->pp_env || o->dcp_env || o->cp_env) && r->stage > 0) { /* a follower: stage 0 prints the run */
        fprintf(f, "  stage              %d of %d, followed stage 0's %" PRIu64 " steps (replays %" PRIu64
                   ", eager %" PRIu64 ")\n",
                r->stage, r->stages, r->steps, s->replays, s->eager_steps);
        return;
    }
    fprintf(f, "  requests           %d of %d done\n", r->requests_done, o->requests);
    fprintf(f, "  steps              %" PRIu64 "\n", r->steps);
    if (o->loop > 1)
        fprintf(f, "  device loops       %" PRIu64 " reel_step_n calls ran %" PRIu64 " of the steps (%" PRIu64
                   " as one launch)\n",
                r->loop_calls, r->loop_steps, s->loop_device_calls);
    fprintf(f, "  tokens             %" PRIu64 " (prefill %" PRIu64 ", decode %" PRIu64 "; %" PRIu64
               " generated)\n",
            r->tokens, r->prefill_tokens, r->decode_tokens, r->generated);
    fprintf(f, "  tokens/s           %.1f\n", r->wall_s > 0 ? (double)r->tokens / r->wall_s : 0.0);
    fprintf(f, "  replays            %" PRIu64 " (%.1f%%)\n", s->replays,
            s->steps ? 100.0 * (double)s->replays / (double)s->steps : 0.0);
    fprintf(f, "  eager steps        %" PRIu64 "\n", s->eager_steps);
    print_reasons(r, f);
    fprintf(f, "  step latency       p50 %.3f ms, p99 %.3f ms", r->p50_ms, r->p99_ms);
    if (s->replays) fprintf(f, "; replayed p50 %.3f ms", r->replay_p50_ms);
    if (s->eager_steps) fprintf(f, "; eager p50 %.3f ms", r->eager_p50_ms);
    fputc('\n', f);
    fprintf(f, "  arena bytes        %zu (%s; params %s, state %s)\n", s->arena_bytes,
            human_bytes((double)s->arena_bytes, b1, sizeof b1), human_bytes((double)s->param_bytes, b2, sizeof b2),
            human_bytes((double)s->state_bytes, b3, sizeof b3));
    fprintf(f, "  compile            %.1f ms (capture %.1f ms, %" PRIu64 " graphs, %d nodes)\n", s->compile_ms,
            s->capture_ms, s->graphs_captured, s->num_nodes);
    if (o->hazards) fprintf(f, "  hazards found      %" PRIu64 "\n", s->hazards);
    fprintf(f, "  token checksum     %016" PRIx64 "\n", r->checksum);
    if (r->interrupted)
        fprintf(f, "  interrupted        after %" PRIu64 " steps: the figures above are of those steps\n",
                r->steps);
    if (!o->eager && r->status == REEL_OK && !r->interrupted && s->eager_steps != r->steps_over_any)
        fprintf(f, "  note: the plan ran %" PRIu64 " steps eagerly; the scheduler counted %" PRIu64
                   " steps beyond the limits (%" PRIu64 " over tokens, %" PRIu64 " over context)\n",
                s->eager_steps, r->steps_over_any, r->steps_over_tokens, r->steps_over_context);
}

int demo_exit_status(reel_status st, const demo_result *r)
{
    if (st == REEL_OK) return r->interrupted ? DEMO_EXIT_INTERRUPTED : DEMO_EXIT_OK;
    /* refused before any step ran: the options or the configuration */
    if (r->failed_step < 0 && st == REEL_E_INVALID_ARG) return DEMO_EXIT_USAGE;
    return DEMO_EXIT_FAILED;
}

int cmd_demo(int argc, char **argv)
{
    demo_opts o;
    demo_opts_default(&o);
    int rc = demo_parse_args(argc, argv, &o, stderr);
    if (rc == 1) {
        demo_usage(stdout);
        return DEMO_EXIT_OK;
    }
    if (rc != 0 || demo_check_config(&o, "demo", stderr) != 0) return DEMO_EXIT_USAGE;
    demo_result *r = malloc(sizeof *r);
    if (!r) {
        fprintf(stderr, "reel demo: out of memory\n");
        return DEMO_EXIT_FAILED;
    }
    static volatile sig_atomic_t stop;
    o.stop = &stop;
    demo_catch_interrupt(&stop);
    reel_status st = demo_run(&o, r, o.quiet ? NULL : stderr);
    if (st == REEL_OK || r->steps > 0) demo_print_summary(&o, r, stdout);
    fflush(stdout);
    if (st != REEL_OK) {
        fprintf(stderr, "reel demo: %s\n", r->error);
        if (st == REEL_E_FALLBACK)
            fprintf(stderr, "reel demo: strict mode stopped at the first fallback; run without --strict to "
                            "fall back eagerly, or use --fit to keep the workload inside the limits\n");
    }
    rc = demo_exit_status(st, r);
    free(r);
    return rc;
}
