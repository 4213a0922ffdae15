#include "tests/runtime/opgraphs.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/host/dtype.h"

static const char *const names[OG_COUNT] = {
    "embedding", "matmul", "matmul_t", "add", "add_row", "mul", "rmsnorm", "silu_and_mul",
    "rope", "softmax", "argmax", "paged_attention", "topk", "topk_paged", "lse_combine",
    "paged_attention_rope", "sample",
};

const char *og_name(int kind) { return names[kind]; }

uint64_t og_rand(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static float urand(uint64_t *x) { return (float)((og_rand(x) >> 11) * (1.0 / 9007199254740992.0)) * 2.f - 1.f; }

static void *rand_buf(reel_dtype dt, int64_t n, uint64_t *rng)
{
    void *b = malloc((size_t)n * reel_dtype_size(dt));
    for (int64_t i = 0; i < n; i++)
        reel_store(b, dt, i, urand(rng));
    return b;
}

static reel_tensor param(og_graph *og, const char *name, int nd, const int64_t *d, uint64_t *rng)
{
    int64_t n = 1;
    for (int i = 0; i < nd; i++)
        n *= d[i];
    reel_tensor t = reel_param(og->g, name, og->dt, nd, d);
    void *b = rand_buf(og->dt, n, rng);
    og->params[og->nparams++] = b;
    reel_param_bind(og->g, t, b);
    return t;
}

static reel_tensor tin(og_graph *og, const char *name, reel_dtype dt, int nd, int64_t d1, int64_t d2)
{
    int64_t d[3] = {REEL_DIM_TOKENS, d1, d2};
    return reel_input(og->g, name, dt, nd, d);
}

reel_status og_build(reel_ctx *ctx, int kind, reel_dtype dt, uint64_t seed, og_graph *og)
{
    memset(og, 0, sizeof *og);
    og->kind = kind;
    og->dt = dt;
    reel_status st = reel_graph_create(ctx, &og->g);
    if (st != REEL_OK)
        return st;
    reel_graph *g = og->g;
    uint64_t rng = seed;
    reel_tensor y = {0}, y2 = {0};
    const int H = OG_HEADS, KV = OG_KV_HEADS, D = OG_HEAD_DIM;
    switch (kind) {
    case OG_EMBEDDING:
        y = reel_embedding(g, param(og, "table", 2, (int64_t[]){50, 16}, &rng), tin(og, "x", REEL_I32, 1, 0, 0));
        break;
    case OG_MATMUL:
    case OG_MATMUL_T: {
        bool t = kind == OG_MATMUL_T;
        y = reel_matmul(g, tin(og, "x", dt, 2, 32, 0), param(og, "w", 2, t ? (int64_t[]){24, 32} : (int64_t[]){32, 24}, &rng), t);
        break;
    }
    case OG_ADD: y = reel_add(g, tin(og, "x", dt, 2, 16, 0), tin(og, "b", dt, 2, 16, 0)); break;
    case OG_ADD_ROW: y = reel_add(g, tin(og, "x", dt, 2, 16, 0), param(og, "row", 1, (int64_t[]){16}, &rng)); break;
    case OG_MUL: y = reel_mul(g, tin(og, "x", dt, 2, 16, 0), tin(og, "b", dt, 2, 16, 0)); break;
    case OG_RMSNORM: y = reel_rmsnorm(g, tin(og, "x", dt, 2, 32, 0), param(og, "w", 1, (int64_t[]){32}, &rng), 1e-5f); break;
    case OG_SILU: y = reel_silu_and_mul(g, tin(og, "x", dt, 2, 32, 0)); break;
    case OG_ROPE: y = reel_rope(g, tin(og, "x", dt, 2, 2 * D, 0), reel_positions(g), D, D, 10000.f); break;
    case OG_SOFTMAX: y = reel_softmax(g, tin(og, "x", dt, 2, 40, 0)); break;
    case OG_ARGMAX: y = reel_argmax(g, tin(og, "x", dt, 2, 40, 0)); break;
    case OG_SAMPLE:
        y = reel_sample(g, tin(og, "x", dt, 2, 40, 0), tin(og, "params", REEL_F32, 2, REEL_SAMPLE_PARAMS, 0),
                        tin(og, "rng", REEL_I32, 2, REEL_SAMPLE_RNG, 0));
        break;
    case OG_ATTENTION: {
        int64_t cd[4] = {OG_BLOCKS, OG_BLOCK, KV, D};
        reel_attn_params ap = { REEL_ATTN_PARAMS_HEAD, H, KV, D, OG_BLOCK, 0.f};
        y = reel_paged_attention(g, tin(og, "q", dt, 2, H * D, 0), tin(og, "k", dt, 2, KV * D, 0),
                                 tin(og, "v", dt, 2, KV * D, 0), reel_state(g, "k_cache", dt, 4, cd),
                                 reel_state(g, "v_cache", dt, 4, cd), &ap);
        break;
    }
    case OG_ATTENTION_ROPE: {
        /* Partial rotation (half of each head), the rotated k also a graph
         * output: the fused node produces it. */
        int64_t cd[4] = {OG_BLOCKS, OG_BLOCK, KV, D};
        reel_attn_params ap = { REEL_ATTN_PARAMS_HEAD, H, KV, D, OG_BLOCK, 0.f};
        reel_tensor pos = reel_positions(g);
        reel_tensor q = reel_rope(g, tin(og, "q", dt, 2, H * D, 0), pos, D, D / 2, 10000.f);
        reel_tensor k = reel_rope(g, tin(og, "k", dt, 2, KV * D, 0), pos, D, D / 2, 10000.f);
        y = reel_paged_attention(g, q, k, tin(og, "v", dt, 2, KV * D, 0), reel_state(g, "k_cache", dt, 4, cd),
                                 reel_state(g, "v_cache", dt, 4, cd), &ap);
        reel_output(g, "kr", k);
        break;
    }
    case OG_TOPK:
    case OG_TOPK_PAGED: {
        reel_tensor pt = kind == OG_TOPK_PAGED ? tin(og, "pages", REEL_I32, 2, 8, 0) : (reel_tensor){0};
        y = reel_topk(g, tin(og, "scores", REEL_F32, 2, 64, 0), tin(og, "lengths", REEL_I32, 1, 0, 0), pt, 8, 8);
        break;
    }
    case OG_LSE:
        st = reel_lse_combine(g, tin(og, "outs", dt, 3, 3, H * D), tin(og, "lses", REEL_F32, 3, 3, H), H, &y, &y2);
        if (st != REEL_OK)
            return st;
        reel_output(g, "lse", y2);
        break;
    }
    reel_output(g, "y", y);
    return reel_graph_status(g);
}

void og_free(og_graph *og)
{
    reel_graph_destroy(og->g);
    for (int i = 0; i < og->nparams; i++)
        free(og->params[i]);
    memset(og, 0, sizeof *og);
}

static reel_status set_rand(reel_plan *p, const char *name, reel_dtype dt, int64_t rows, int64_t row, uint64_t *rng)
{
    void *b = rand_buf(dt, rows * row, rng);
    reel_status st = reel_plan_set_input(p, name, b, rows);
    free(b);
    return st;
}

/* Sequences: the first takes a prefill chunk of up to half the tokens, the
 * rest decode one token each; sequence q owns blocks q*16 .. q*16+15. */
static void attention_meta(int32_t n, int32_t ctx_len, uint64_t *rng, og_step *s)
{
    int32_t prefill = n > 1 ? n / 2 : 1, nseq = 1 + (n - prefill);
    int32_t t = 0;
    s->qs[0] = 0;
    for (int32_t q = 0; q < nseq; q++) {
        int32_t toks = q == 0 ? prefill : 1;
        int32_t len = ctx_len - (int32_t)(og_rand(rng) % 3);
        if (len < toks)
            len = toks;
        s->ctx[q] = len;
        for (int32_t j = 0; j < 16; j++)
            s->bt[q * 16 + j] = q * 16 + j;
        for (int32_t k = 0; k < toks; k++, t++) {
            int32_t p = len - toks + k;
            s->pos[t] = p;
            s->slot[t] = s->bt[q * 16 + p / OG_BLOCK] * OG_BLOCK + p % OG_BLOCK;
        }
        s->qs[q + 1] = t;
    }
    s->info.num_seqs = nseq;
    s->info.query_start = s->qs;
    s->info.slot_mapping = s->slot;
    s->info.context_lens = s->ctx;
    s->info.block_tables = s->bt;
    s->info.block_table_stride = 16;
}

reel_status og_make_step(reel_plan *p, int kind, reel_dtype dt, int32_t n, uint64_t seed, int32_t ctx_len,
                         og_step *s)
{
    uint64_t rng = seed;
    const int H = OG_HEADS, KV = OG_KV_HEADS, D = OG_HEAD_DIM;
    memset(s, 0, sizeof *s);
    s->info = (reel_step_info)REEL_STEP_INFO_INIT;
    s->info.num_tokens = n;
    for (int32_t t = 0; t < n; t++)
        s->pos[t] = (int32_t)(og_rand(&rng) % 50);
    s->info.positions = s->pos;
    reel_status st = REEL_OK;
    switch (kind) {
    case OG_EMBEDDING: {
        int32_t ids[4096];
        for (int32_t t = 0; t < n; t++)
            ids[t] = (int32_t)(og_rand(&rng) % 52) - 1; /* -1 and 50: out of range, zero rows */
        return reel_plan_set_input(p, "x", ids, n);
    }
    case OG_MATMUL:
    case OG_MATMUL_T:
    case OG_RMSNORM:
    case OG_SILU: return set_rand(p, "x", dt, n, 32, &rng);
    case OG_ADD:
    case OG_MUL:
        st = set_rand(p, "x", dt, n, 16, &rng);
        return st ? st : set_rand(p, "b", dt, n, 16, &rng);
    case OG_ADD_ROW: return set_rand(p, "x", dt, n, 16, &rng);
    case OG_ROPE: return set_rand(p, "x", dt, n, 2 * D, &rng);
    case OG_SOFTMAX:
    case OG_ARGMAX: return set_rand(p, "x", dt, n, 40, &rng);
    case OG_ATTENTION:
    case OG_ATTENTION_ROPE:
        attention_meta(n, ctx_len, &rng, s);
        st = set_rand(p, "q", dt, n, H * D, &rng);
        if (!st)
            st = set_rand(p, "k", dt, n, KV * D, &rng);
        return st ? st : set_rand(p, "v", dt, n, KV * D, &rng);
    case OG_TOPK:
    case OG_TOPK_PAGED: {
        float *sc = malloc(sizeof(float) * 64 * (size_t)n);
        int32_t len[4096], pages[4096 * 8];
        for (int64_t i = 0; i < 64 * (int64_t)n; i++) {
            uint64_t r = og_rand(&rng) % 20;
            sc[i] = r == 0 ? -INFINITY : r == 1 ? NAN : (float)(r % 7); /* ties on purpose */
        }
        for (int32_t t = 0; t < n; t++)
            len[t] = (int32_t)(og_rand(&rng) % 65);
        for (int32_t i = 0; i < 8 * n; i++)
            pages[i] = (int32_t)(og_rand(&rng) % 100);
        st = reel_plan_set_input(p, "scores", sc, n);
        free(sc);
        if (!st)
            st = reel_plan_set_input(p, "lengths", len, n);
        if (!st && kind == OG_TOPK_PAGED)
            st = reel_plan_set_input(p, "pages", pages, n);
        return st;
    }
    case OG_SAMPLE: {
        /* Rows cycle through greedy, plain, top-k, top-p, min-p, all three and
         * out-of-range parameters; logits on a grid (ties) with masked tokens;
         * each row its own seed and counter. */
        static const float kinds[7][4] = { { 0, 1, 0, 0 }, { 1, 1, 0, 0 }, { 0.7f, 1, 0, 5 }, { 1.3f, 0.8f, 0, 0 },
                                           { 1, 1, 0.2f, 0 }, { 0.9f, 0.9f, 0.05f, 8 }, { -1, 1, 0, 0 } };
        void *x = malloc(reel_dtype_size(dt) * 40 * (size_t)n);
        float *prm = malloc(sizeof(float) * 4 * (size_t)n);
        int32_t *words = malloc(sizeof(int32_t) * 4 * (size_t)n);
        for (int64_t i = 0; i < 40 * (int64_t)n; i++) {
            uint64_t r = og_rand(&rng) % 17;
            reel_store(x, dt, i, r == 0 ? -INFINITY : (float)r * 0.5f - 4.0f);
        }
        for (int32_t t = 0; t < n; t++) {
            memcpy(prm + 4 * t, kinds[og_rand(&rng) % 7], 4 * sizeof(float));
            for (int j = 0; j < 4; j++)
                words[4 * t + j] = (int32_t)og_rand(&rng);
        }
        st = reel_plan_set_input(p, "x", x, n);
        if (!st)
            st = reel_plan_set_input(p, "params", prm, n);
        if (!st)
            st = reel_plan_set_input(p, "rng", words, n);
        free(x);
        free(prm);
        free(words);
        return st;
    }
    case OG_LSE: {
        float *l = malloc(sizeof(float) * 3 * H * (size_t)n);
        for (int64_t i = 0; i < 3 * H * (int64_t)n; i++) {
            uint64_t r = og_rand(&rng) % 10;
            l[i] = r == 0 ? -INFINITY : r == 1 ? INFINITY : r == 2 ? NAN : urand(&rng) * 4.f;
        }
        st = set_rand(p, "outs", dt, n, 3 * H * D, &rng);
        if (!st)
            st = reel_plan_set_input(p, "lses", l, n);
        free(l);
        return st;
    }
    }
    return REEL_E_INVALID_ARG;
}
