/* moe_block: one mixture-of-experts block, as DeepSeek V3 has it (a router
 * with a choice bias and groups, the routed experts, shared experts), built
 * with the public API from a safetensors file under transformers' names,
 * stepped once, its output written raw (little-endian f32 [T, hidden]).
 * tests/gpu/deepseek_moe_check.py runs it against transformers'
 * DeepseekV3MoE; it is not a test by itself.
 *
 * The file holds the input "x" [T, hidden] f32 and, under a prefix P (found
 * as the one tensor named "gate.weight" or "*.gate.weight", or --prefix):
 *   P gate.weight                       [E, hidden]   router
 *   P gate.e_score_correction_bias      [E] f32       choice bias (optional)
 *   P experts.<e>.{gate,up}_proj.weight [ffn, hidden]
 *   P experts.<e>.down_proj.weight      [hidden, ffn]
 *   P shared_experts.{gate,up,down}_proj.weight       (with --shared-ffn > 0)
 * and, optionally, "y" [T, hidden], transformers' output: then the largest
 * difference is printed (and checked with --tol).
 *
 * The graph: logits = x gate^T; reel_moe_route (sigmoid or softmax, the
 * bias, groups, renormalize, routed_scaling); reel_moe_ffn over the experts
 * packed at write time into [E * 2 ffn, hidden] (each expert's gate then up
 * rows: 2E parts) and [E * hidden, ffn] (E parts); plus the shared experts'
 * down(silu(gate x) * up x), one matmul over [gate; up]. */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reel/reel.h"
#include "reel/safetensors.h"

#define PREFIX_MAX 128   /* a prefix and its longest suffix fit a name */
#define NAME_MAX_LEN 256

typedef struct opts {
    const char *file, *out, *prefix, *input;
    reel_backend_kind backend;
    int experts, topk, groups, topk_group, ffn, shared_ffn, tokens, hidden, renorm, scoring;
    float scaling;
    double tol; /* < 0: no check against "y" */
} opts;

static void usage(FILE *f)
{
    fputs("usage: moe_block FILE.safetensors OUT.f32 [--backend host|cuda] --experts E --topk K\n"
          "                 [--groups G --topk-group TG] --ffn F [--shared-ffn FS] [--scaling S]\n"
          "                 [--renorm 0|1] [--scoring sigmoid|softmax] --tokens T --hidden H\n"
          "                 [--prefix P] [--input NAME] [--tol R]\n"
          "Builds one MoE block (DeepSeek V3's by default: sigmoid scoring, choice bias, groups,\n"
          "shared experts) from FILE under transformers' names, steps it on the input NAME\n"
          "(default x) and writes the output [T, H] as raw little-endian f32 to OUT. With a\n"
          "tensor \"y\" in FILE, prints max |out - y| / max |y| and, with --tol, fails above R.\n",
          f);
}

static bool parse_int(const char *s, int lo, int hi, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return false;
    *out = (int)v;
    return true;
}

static bool parse_num(const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v))
        return false;
    *out = v;
    return true;
}

/* 0: parsed; 2: bad usage (said on stderr). */
static int parse_args(int argc, char **argv, opts *o)
{
    *o = (opts){ .backend = REEL_BACKEND_AUTO, .renorm = 1, .scoring = REEL_MOE_SIGMOID, .scaling = 1.0f,
                 .tol = -1.0, .input = "x" };
    int npos = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "--", 2) != 0) {
            if (npos == 0)
                o->file = a;
            else if (npos == 1)
                o->out = a;
            else
                goto bad;
            npos++;
            continue;
        }
        if (strcmp(a, "--help") == 0) {
            usage(stdout);
            exit(0);
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "moe_block: %s wants a value\n", a);
            return 2;
        }
        const char *v = argv[++i];
        bool ok = true;
        double d = 0.0;
        if (strcmp(a, "--backend") == 0)
            ok = reel_backend_parse(v, &o->backend) == REEL_OK;
        else if (strcmp(a, "--experts") == 0)
            ok = parse_int(v, 1, REEL_MOE_MAX_EXPERTS, &o->experts);
        else if (strcmp(a, "--topk") == 0)
            ok = parse_int(v, 1, REEL_MOE_MAX_TOPK, &o->topk);
        else if (strcmp(a, "--groups") == 0)
            ok = parse_int(v, 0, REEL_MOE_MAX_EXPERTS, &o->groups);
        else if (strcmp(a, "--topk-group") == 0)
            ok = parse_int(v, 0, REEL_MOE_MAX_EXPERTS, &o->topk_group);
        else if (strcmp(a, "--ffn") == 0)
            ok = parse_int(v, 1, 1 << 20, &o->ffn);
        else if (strcmp(a, "--shared-ffn") == 0)
            ok = parse_int(v, 0, 1 << 20, &o->shared_ffn);
        else if (strcmp(a, "--tokens") == 0)
            ok = parse_int(v, 1, 1 << 20, &o->tokens);
        else if (strcmp(a, "--hidden") == 0)
            ok = parse_int(v, 1, 1 << 20, &o->hidden);
        else if (strcmp(a, "--renorm") == 0)
            ok = parse_int(v, 0, 1, &o->renorm);
        else if (strcmp(a, "--scaling") == 0) {
            ok = parse_num(v, &d) && d > 0.0;
            o->scaling = (float)d;
        }
        else if (strcmp(a, "--tol") == 0)
            ok = parse_num(v, &o->tol) && o->tol >= 0.0;
        else if (strcmp(a, "--prefix") == 0)
            o->prefix = v;
        else if (strcmp(a, "--input") == 0)
            o->input = v;
        else if (strcmp(a, "--scoring") == 0) {
            ok = strcmp(v, "sigmoid") == 0 || strcmp(v, "softmax") == 0;
            o->scoring = strcmp(v, "softmax") == 0 ? REEL_MOE_SOFTMAX : REEL_MOE_SIGMOID;
        } else {
            fprintf(stderr, "moe_block: unknown option %s\n", a);
            return 2;
        }
        if (!ok) {
            fprintf(stderr, "moe_block: bad value '%s' for %s\n", v, a);
            return 2;
        }
    }
    if (npos == 2 && o->experts && o->topk && o->ffn && o->tokens && o->hidden)
        return 0;
bad:
    usage(stderr);
    return 2;
}

/* The prefix of the router's name: the one tensor called "gate.weight" or
 * ending in ".gate.weight". */
static bool find_prefix(const reel_safetensors *ck, char *prefix, size_t len)
{
    int found = 0;
    for (int i = 0; i < reel_safetensors_count(ck); i++) {
        reel_st_tensor t = REEL_ST_TENSOR_INIT;
        if (reel_safetensors_tensor(ck, i, &t) != REEL_OK)
            return false;
        size_t n = strlen(t.name), s = strlen("gate.weight");
        if (n < s || strcmp(t.name + n - s, "gate.weight") != 0 || (n > s && t.name[n - s - 1] != '.'))
            continue;
        if (found++ == 0 && n - s >= len) {
            fprintf(stderr, "moe_block: the prefix of '%s' is too long\n", t.name);
            return false;
        }
        if (found == 1)
            snprintf(prefix, len, "%.*s", (int)(n - s), t.name);
    }
    if (found != 1)
        fprintf(stderr, "moe_block: %d tensors named *gate.weight; say which with --prefix\n", found);
    return found == 1;
}

static int fail(reel_ctx *ctx, const char *what, reel_status st)
{
    fprintf(stderr, "moe_block: %s: %s: %s\n", what, reel_status_str(st), reel_ctx_last_error(ctx));
    return 1;
}

/* A parameter written after compile (reel_safetensors_write_param). */
static reel_tensor deferred(reel_graph *g, const char *name, int ndim, int64_t d0, int64_t d1)
{
    int64_t dims[2] = { d0, d1 };
    reel_tensor t = reel_param(g, name, REEL_F32, ndim, dims);
    if (t.id && reel_param_defer(g, t) != REEL_OK)
        t.id = 0;
    return t;
}

/* Builds the block; 0 on success, else 1 with the failing call said. */
static int build(reel_ctx *ctx, reel_graph *g, const opts *o, bool has_bias)
{
    const int64_t E = o->experts, H = o->hidden, F = o->ffn, FS = o->shared_ffn;
    int64_t dx[2] = { REEL_DIM_TOKENS, H };
    reel_tensor x = reel_input(g, "x", REEL_F32, 2, dx);
    reel_tensor wr = deferred(g, "mlp.gate.weight", 2, E, H);
    reel_tensor bias = has_bias ? deferred(g, "mlp.gate.e_score_correction_bias", 1, E, 0) : (reel_tensor){ 0 };
    reel_tensor wgu = deferred(g, "mlp.experts.gate_up_proj.weight", 2, E * 2 * F, H);
    reel_tensor wd = deferred(g, "mlp.experts.down_proj.weight", 2, E * H, F);
    if (!x.id || !wr.id || (has_bias && !bias.id) || !wgu.id || !wd.id)
        return fail(ctx, "inputs and parameters", reel_graph_status(g));
    reel_tensor logits = reel_matmul(g, x, wr, true);
    if (!logits.id)
        return fail(ctx, "router matmul", reel_graph_status(g));
    reel_moe_params mp = REEL_MOE_PARAMS_INIT;
    mp.num_experts = o->experts;
    mp.top_k = o->topk;
    mp.scoring = o->scoring;
    mp.renormalize = o->renorm != 0;
    mp.n_group = o->groups;
    mp.topk_group = o->topk_group;
    mp.routed_scaling = o->scaling;
    reel_tensor ids = { 0 }, w = { 0 };
    reel_status st = reel_moe_route(g, logits, bias, &mp, &ids, &w);
    if (st != REEL_OK)
        return fail(ctx, "reel_moe_route", st);
    reel_tensor y = reel_moe_ffn(g, x, ids, w, wgu, wd, o->experts);
    if (!y.id)
        return fail(ctx, "reel_moe_ffn", reel_graph_status(g));
    if (FS > 0) {
        reel_tensor sgu = deferred(g, "mlp.shared_experts.gate_up_proj.weight", 2, 2 * FS, H);
        reel_tensor sd = deferred(g, "mlp.shared_experts.down_proj.weight", 2, H, FS);
        if (!sgu.id || !sd.id)
            return fail(ctx, "shared experts' parameters", reel_graph_status(g));
        reel_tensor act = reel_silu_and_mul(g, reel_matmul(g, x, sgu, true));
        reel_tensor shared = act.id ? reel_matmul(g, act, sd, true) : act;
        if (!shared.id)
            return fail(ctx, "shared experts", reel_graph_status(g));
        y = reel_add(g, y, shared);
        if (!y.id)
            return fail(ctx, "routed + shared", reel_graph_status(g));
    }
    if ((st = reel_output(g, "y", y)) != REEL_OK)
        return fail(ctx, "reel_output", st);
    return 0;
}

/* Writes every parameter from ck; 0 on success, else 1. */
static int write_params(reel_ctx *ctx, const reel_safetensors *ck, reel_plan *p, const opts *o, const char *pre,
                        bool has_bias)
{
    const int E = o->experts;
    int rc = 1;
    char(*names)[NAME_MAX_LEN] = calloc((size_t)2 * E + 3, sizeof *names);
    const char **parts = calloc((size_t)2 * E + 3, sizeof *parts);
    if (!names || !parts) {
        fprintf(stderr, "moe_block: out of memory\n");
        goto fail;
    }
    for (int i = 0; i < 2 * E + 3; i++)
        parts[i] = names[i];
    reel_status st;
    snprintf(names[0], NAME_MAX_LEN, "%sgate.weight", pre);
    if ((st = reel_safetensors_write_param(ck, p, "mlp.gate.weight", 1, parts)) != REEL_OK) {
        fail(ctx, "router weight", st);
        goto fail;
    }
    snprintf(names[0], NAME_MAX_LEN, "%sgate.e_score_correction_bias", pre);
    if (has_bias) {
        st = reel_safetensors_write_param(ck, p, "mlp.gate.e_score_correction_bias", 1, parts);
        if (st != REEL_OK) {
            fail(ctx, "choice bias", st);
            goto fail;
        }
    }
    for (int e = 0; e < E; e++) { /* expert e's gate rows, then its up rows */
        snprintf(names[2 * e], NAME_MAX_LEN, "%sexperts.%d.gate_proj.weight", pre, e);
        snprintf(names[2 * e + 1], NAME_MAX_LEN, "%sexperts.%d.up_proj.weight", pre, e);
    }
    if ((st = reel_safetensors_write_param(ck, p, "mlp.experts.gate_up_proj.weight", 2 * E, parts)) != REEL_OK) {
        fail(ctx, "experts' gate and up", st);
        goto fail;
    }
    for (int e = 0; e < E; e++)
        snprintf(names[e], NAME_MAX_LEN, "%sexperts.%d.down_proj.weight", pre, e);
    if ((st = reel_safetensors_write_param(ck, p, "mlp.experts.down_proj.weight", E, parts)) != REEL_OK) {
        fail(ctx, "experts' down", st);
        goto fail;
    }
    if (o->shared_ffn > 0) {
        snprintf(names[0], NAME_MAX_LEN, "%sshared_experts.gate_proj.weight", pre);
        snprintf(names[1], NAME_MAX_LEN, "%sshared_experts.up_proj.weight", pre);
        snprintf(names[2], NAME_MAX_LEN, "%sshared_experts.down_proj.weight", pre);
        if ((st = reel_safetensors_write_param(ck, p, "mlp.shared_experts.gate_up_proj.weight", 2, parts)) !=
            REEL_OK) {
            fail(ctx, "shared experts' gate and up", st);
            goto fail;
        }
        if ((st = reel_safetensors_write_param(ck, p, "mlp.shared_experts.down_proj.weight", 1, parts + 2)) !=
            REEL_OK) {
            fail(ctx, "shared experts' down", st);
            goto fail;
        }
    }
    rc = 0;
fail:
    free(parts);
    free(names);
    return rc;
}

/* The tensor `name` as f32 [T, H]; 0 if so, else 1 (said). */
static int find_rows(reel_ctx *ctx, const reel_safetensors *ck, const char *name, const opts *o, reel_st_tensor *t)
{
    reel_status st = reel_safetensors_find(ck, name, t);
    if (st != REEL_OK)
        return fail(ctx, name, st);
    if (t->dtype != REEL_F32 || t->ndim != 2 || t->dims[0] != o->tokens || t->dims[1] != o->hidden) {
        fprintf(stderr, "moe_block: '%s' is %s with %d dims [%lld, %lld], expected F32 [%d, %d] (--tokens, --hidden)\n",
                name, t->dtype_name, t->ndim, (long long)t->dims[0], (long long)(t->ndim > 1 ? t->dims[1] : 0),
                o->tokens, o->hidden);
        return 1;
    }
    return 0;
}

/* Prints max |out - y| / max |y| for the file's "y", if it has one; 1 when
 * it is past --tol. */
static int compare(reel_ctx *ctx, const reel_safetensors *ck, const opts *o, const float *out)
{
    reel_st_tensor t = REEL_ST_TENSOR_INIT;
    if (reel_safetensors_find(ck, "y", &t) != REEL_OK)
        return 0;
    if (find_rows(ctx, ck, "y", o, &t) != 0)
        return 1;
    const float *y = t.data;
    double err = 0.0, scale = 0.0;
    size_t worst = 0, n = (size_t)o->tokens * (size_t)o->hidden;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)out[i] - (double)y[i]);
        if (!(d <= err)) { /* NaN counts as the worst */
            err = isnan(d) ? INFINITY : d;
            worst = i;
        }
        scale = fmax(scale, fabs((double)y[i]));
    }
    double rel = scale > 0.0 ? err / scale : err;
    printf("moe_block: max |out - y| %.4g at row %zu (%.3g of max |y| %.4g)\n", err, worst / (size_t)o->hidden, rel,
           scale);
    if (o->tol >= 0.0 && !(rel <= o->tol)) {
        fprintf(stderr, "moe_block: out differs from y by %.3g of its scale, tolerance %.3g\n", rel, o->tol);
        return 1;
    }
    return 0;
}

static int write_out(const char *path, const float *out, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f) {
        fprintf(stderr, "moe_block: %s: %s\n", path, strerror(errno));
        return 1;
    }
    /* Raw little-endian f32: every platform reel builds for is little-endian. */
    size_t w = fwrite(out, sizeof *out, n, f);
    if (fclose(f) != 0 || w != n) {
        fprintf(stderr, "moe_block: %s: write failed\n", path);
        return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    opts o;
    int rc = parse_args(argc, argv, &o);
    if (rc)
        return rc;
    rc = 1;
    reel_ctx *ctx = NULL;
    reel_graph *g = NULL;
    reel_plan *p = NULL;
    reel_safetensors *ck = NULL;
    char pre[PREFIX_MAX], name[NAME_MAX_LEN];
    reel_st_tensor t = REEL_ST_TENSOR_INIT, xt = REEL_ST_TENSOR_INIT;
    bool has_bias = false;
    reel_compile_opts cop = REEL_COMPILE_OPTS_INIT;
    reel_step_info si = { REEL_STEP_INFO_HEAD, .num_tokens = o.tokens };
    const void *out = NULL;
    int64_t rows = 0;
    reel_ctx_opts co = REEL_CTX_OPTS_INIT;
    co.backend = o.backend;
    reel_status st = reel_ctx_create(&co, &ctx);
    if (st != REEL_OK) {
        fail(NULL, "reel_ctx_create", st);
        goto fail;
    }
    if ((st = reel_safetensors_open(ctx, o.file, &ck)) != REEL_OK) {
        fail(ctx, "reel_safetensors_open", st);
        goto fail;
    }
    if (o.prefix && strlen(o.prefix) >= sizeof pre) {
        fprintf(stderr, "moe_block: --prefix longer than %d characters\n", PREFIX_MAX - 1);
        goto fail;
    }
    if (o.prefix)
        snprintf(pre, sizeof pre, "%s", o.prefix);
    else if (!find_prefix(ck, pre, sizeof pre))
        goto fail;
    snprintf(name, sizeof name, "%sgate.e_score_correction_bias", pre);
    has_bias = reel_safetensors_find(ck, name, &t) == REEL_OK;
    snprintf(name, sizeof name, "%sexperts.%d.gate_proj.weight", pre, o.experts);
    if (reel_safetensors_find(ck, name, &t) == REEL_OK) {
        fprintf(stderr, "moe_block: %s has '%s': more experts than --experts %d\n", o.file, name, o.experts);
        goto fail;
    }
    if (find_rows(ctx, ck, o.input, &o, &xt) != 0)
        goto fail;
    if ((st = reel_graph_create(ctx, &g)) != REEL_OK) {
        fail(ctx, "reel_graph_create", st);
        goto fail;
    }
    if (build(ctx, g, &o, has_bias) != 0)
        goto fail;
    cop.num_buckets = 1; /* one graph, of exactly T tokens: the step replays it */
    cop.buckets[0] = o.tokens;
    if ((st = reel_compile(g, &cop, &p)) != REEL_OK) {
        fail(ctx, "reel_compile", st);
        goto fail;
    }
    if (write_params(ctx, ck, p, &o, pre, has_bias) != 0)
        goto fail;
    if ((st = reel_plan_set_input(p, "x", xt.data, o.tokens)) != REEL_OK) {
        fail(ctx, "reel_plan_set_input", st);
        goto fail;
    }
    if ((st = reel_step(p, &si)) != REEL_OK) {
        fail(ctx, "reel_step", st);
        goto fail;
    }
    if ((st = reel_plan_output(p, "y", &out, &rows)) != REEL_OK) {
        fail(ctx, "reel_plan_output", st);
        goto fail;
    }
    if (rows != o.tokens) {
        fprintf(stderr, "moe_block: %lld output rows, expected %d\n", (long long)rows, o.tokens);
        goto fail;
    }
    printf("moe_block: %s backend, %d tokens, %d experts (top %d; %d groups, %d kept), ffn %d, shared ffn %d, "
           "prefix '%s', bias %s, %s\n",
           reel_backend_name(reel_ctx_backend(ctx)), o.tokens, o.experts, o.topk, o.groups, o.topk_group, o.ffn,
           o.shared_ffn, pre, has_bias ? "yes" : "no",
           reel_plan_last_fallback(p) == REEL_FALLBACK_NONE ? "replayed"
                                                            : reel_fallback_str(reel_plan_last_fallback(p)));
    if (write_out(o.out, out, (size_t)o.tokens * (size_t)o.hidden) != 0)
        goto fail;
    rc = compare(ctx, ck, &o, out);
fail:
    reel_plan_destroy(p);
    reel_graph_destroy(g);
    reel_safetensors_close(ck);
    reel_ctx_destroy(ctx);
    return rc;
}
