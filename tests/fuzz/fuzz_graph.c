/* libFuzzer target: random graphs through the whole public API on the host
 * backend. The bytes are a program: builder commands over a pool of tensor
 * handles (every op the builder has; shapes with 0, odd and huge dims; every
 * dtype and an invalid one; streams; outputs; names), then compile options
 * (buckets, limits, strict, no_capture, check_hazards, pdl, no_fuse), then
 * steps with random metadata, inputs, parameter writes, state binds and reads.
 * Invariants: no crash or sanitizer report; every non-OK status leaves a
 * message; nothing leaks (ASan's leak check at exit / per input).
 *
 * Differential oracles, for a program of which at least one step succeeded:
 * the same bytes run again (the graph built again, the same calls with the
 * same data) with one compile option flipped must give the same statuses of
 * compile and every step, bitwise the same outputs of every accepted step,
 * the same state reads and bitwise the same states at the end:
 * - captured against eager (no_capture flipped; not for strict programs,
 *   whose steps an eager plan refuses by design): reel.h promises that a step
 *   past a graph's limits "runs eagerly through the same kernels", and a
 *   step inside a bucket runs in that bucket's layout either way;
 * - fused against unfused (no_fuse flipped): docs/fusion.md says every fused
 *   node keeps the rounding points of the pair it replaces, "so a fused plan
 *   gives the unfused plan's bits on the host backend" (runtime/fuse.c,
 *   docs/attention.md for the rope fused into attention), so the comparison
 *   is bitwise too, with no tolerance. (On CUDA the same holds per
 *   docs/fusion.md except where cuBLASLt's split-K differs; this target
 *   runs on the host only.)
 * A variant whose compile or step is refused with REEL_E_OOM (an unfused plan
 * holds more activations) ends the comparison; any other difference is a
 * broken invariant. */
#include "fuzz.h"

FZ_ASAN_DEFAULTS
FZ_UBSAN_DEFAULTS

enum { POOL = 48, LEAVES = 24, MAX_OUT = 8, MAX_BYTES = 1 << 20 };

static const int64_t dim_tab[] = {REEL_DIM_TOKENS, 0, 1, 2, 3, 4, 8, 16, 4, 8, 2, 6, 32, 64,
                                  7, 1 << 20, (int64_t)1 << 40, INT64_MAX, -7, 5};
static const char *const names[] = {"a", "b", "c", "d", "e", "f", "", NULL, "x.y/z", "kv",
                                    "a_very_long_name_that_goes_on_and_on_past_what_any_message_"
                                    "buffer_might_hold_for_it_xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
                                    "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
                                    "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"};
static const int32_t tok_tab[] = {0, 1, 2, 3, 4, 5, 8, 16, 17, 33, 64, 100, -1, INT32_MAX, 1 << 20, 7};
static const int32_t bucket_tab[] = {1, 2, 4, 8, 16, 3, 0, -1, 64, 65, INT32_MAX, 1 << 16, 5, 6};
static const int32_t limit_tab[] = {REEL_UNDEF_INT, 0, 1, 4, 8, 16, 64, -3, INT32_MAX, 3};
static const int32_t meta_tab[] = {0, 1, 2, 3, 4, 5, 7, 8, -1, -2, 15, 16, 31, 63, INT32_MAX, INT32_MIN};
static const float f_tab[] = {1e-5f, 0.0f, -1.0f, 1e30f, 10000.0f, 0.5f, 1.0f};

/* A leaf the fuzzer made and knows the shape of (to size its data). */
typedef struct leaf {
    int kind; /* 0 input, 1 param, 2 state */
    const char *name; /* follows reel_set_name */
    reel_tensor t;
    reel_dtype dt;
    int ndim;
    int64_t dims[REEL_MAX_DIMS];
    int deferred;
} leaf;

/* One recorded result: a status and, where it is OK, the bytes (hashed;
 * copied too up to REC_COPY, to say where two differ). */
enum { MAX_STEPS = 5, REC_COPY = 1 << 16 };
typedef struct blob {
    int set;
    reel_status st;
    int64_t rows;
    size_t n;
    uint64_t hash;
    uint8_t *copy;
} blob;

/* What one run of a program gave, for the differential oracles. */
typedef struct record {
    reel_status compile;
    int strict, no_capture, no_fuse; /* the options compile saw */
    int ok_steps;
    int fused_nodes;   /* nodes the fusion pass made (node info's fused, or rope folded into attention) */
    uint64_t replays;  /* steps replayed */
    reel_status step[MAX_STEPS];
    blob out[MAX_STEPS][MAX_OUT];
    blob read[MAX_STEPS][LEAVES]; /* reel_plan_read_state in a step */
    blob state[LEAVES];           /* every state at the end */
} record;

enum { RUN_AS_GIVEN, RUN_CAPTURE_FLIPPED, RUN_FUSE_FLIPPED };

typedef struct world {
    fz f;
    int variant;       /* RUN_*: which option the program runs with flipped */
    record *rec;       /* this run's results */
    const record *ref; /* a variant: the program's run as given, compared as we go (NULL: stop comparing) */
    int stepi;
    reel_ctx *ctx;
    reel_graph *g;
    reel_plan *p;
    reel_tensor pool[POOL];
    int npool;
    leaf leaves[LEAVES];
    int nleaves;
    void *bufs[LEAVES]; /* param data and bound states, freed at the end */
    int nbufs;
    const char *outs[MAX_OUT];
    int nouts;
} world;

static reel_tensor pick_t(world *w)
{
    uint8_t b = fz_u8(&w->f);
    if (b == 255 || w->npool == 0)
        return (reel_tensor){0};
    if (b == 254)
        return (reel_tensor){9999};
    return w->pool[b % w->npool];
}

static void push(world *w, reel_tensor t)
{
    if (t.id != 0 && w->npool < POOL)
        w->pool[w->npool++] = t;
}

/* Bytes of one token row (token leaves) or of the whole tensor; -1 when it
 * does not fit MAX_BYTES or the shape is not one reel accepts. */
static int64_t leaf_bytes(const leaf *l, int per_row)
{
    int64_t n = (int64_t)reel_dtype_size(l->dt);
    for (int d = 0; d < l->ndim; d++) {
        int64_t v = l->dims[d];
        if (v == REEL_DIM_TOKENS && d == 0 && per_row)
            continue;
        if (v < 0 || v > MAX_BYTES)
            return -1;
        n *= v;
        if (n > MAX_BYTES)
            return -1;
    }
    return n;
}

static void *fill(world *w, size_t bytes, reel_dtype dt)
{
    uint8_t *b = malloc(bytes ? bytes : 1);
    if (!b)
        return NULL;
    uint8_t seed = fz_u8(&w->f);
    /* small finite floats mostly; the seed's top bit lets raw bytes (NaN, inf) in */
    for (size_t i = 0; i < bytes; i++)
        b[i] = (seed & 0x80) ? (uint8_t)(seed * 31 + i * 7) : (uint8_t)((i % 4 == 3) ? 0x3f : (i * seed) & 0x7f);
    /* int32 data with seed bit 6 (not 7): small values -1..7 (ids, lengths,
     * page entries a step can accept) */
    for (size_t i = 0; dt == REEL_I32 && (seed & 0xc0) == 0x40 && i + 4 <= bytes; i += 4) {
        int32_t v = (int32_t)((i / 4 * (seed & 0x3f) + i / 12) % 9) - 1;
        memcpy(b + i, &v, 4);
    }
    return b;
}

static void make_leaf(world *w, int kind)
{
    const char *name = FZ_PICK(&w->f, names);
    int dtv = fz_u8(&w->f) % (REEL_DTYPE_COUNT + 1);
    int ndim = fz_u8(&w->f) % (REEL_MAX_DIMS + 2);
    int64_t dims[REEL_MAX_DIMS + 1];
    for (int d = 0; d < ndim; d++)
        dims[d] = FZ_PICK(&w->f, dim_tab);
    reel_tensor t;
    if (kind == 0)
        t = reel_input(w->g, name, (reel_dtype)dtv, ndim, fz_u8(&w->f) == 7 ? NULL : dims);
    else if (kind == 1)
        t = reel_param(w->g, name, (reel_dtype)dtv, ndim, dims);
    else
        t = reel_state(w->g, name, (reel_dtype)dtv, ndim, dims);
    if (t.id == 0)
        return;
    push(w, t);
    if (w->nleaves == LEAVES)
        return;
    leaf *l = &w->leaves[w->nleaves++];
    *l = (leaf){.kind = kind, .name = name, .t = t, .dt = (reel_dtype)dtv, .ndim = ndim};
    memcpy(l->dims, dims, sizeof(int64_t) * (size_t)(ndim < REEL_MAX_DIMS ? ndim : REEL_MAX_DIMS));
    if (kind == 1) {
        uint8_t mode = fz_u8(&w->f) % 4;
        int64_t bytes = leaf_bytes(l, 0);
        if (mode == 0 && bytes >= 0 && w->nbufs < LEAVES) {
            void *d = fill(w, (size_t)bytes, l->dt);
            if (d) {
                w->bufs[w->nbufs++] = d;
                FZ_CHECK(w->ctx, reel_param_bind(w->g, t, d));
            }
        } else if (mode == 1) {
            l->deferred = 1;
            FZ_CHECK(w->ctx, reel_param_defer(w->g, t));
        } else if (mode == 2) {
            FZ_CHECK(w->ctx, reel_param_bind(w->g, t, NULL));
        }
        /* mode 3: left unbound: compile must say so */
    }
}

static void build(world *w)
{
    for (int n = 0; n < 64 && !fz_done(&w->f); n++) {
        uint8_t c = fz_u8(&w->f);
        reel_graph *g = w->g;
        switch (c % 24) {
        case 0: make_leaf(w, 0); break;
        case 1: make_leaf(w, 1); break;
        case 2: make_leaf(w, 2); break;
        case 3: push(w, reel_positions(g)); break;
        case 4: { reel_tensor a = pick_t(w), b = pick_t(w); push(w, reel_embedding(g, a, b)); break; }
        case 5: { reel_tensor a = pick_t(w), b = pick_t(w); push(w, reel_matmul(g, a, b, fz_u8(&w->f) & 1)); break; }
        case 6: { reel_tensor a = pick_t(w), b = pick_t(w); push(w, reel_add(g, a, b)); break; }
        case 7: { reel_tensor a = pick_t(w), b = pick_t(w); push(w, reel_mul(g, a, b)); break; }
        case 8: { reel_tensor a = pick_t(w), b = pick_t(w); push(w, reel_rmsnorm(g, a, b, FZ_PICK(&w->f, f_tab))); break; }
        case 9: push(w, reel_silu_and_mul(g, pick_t(w))); break;
        case 10: {
            reel_tensor x = pick_t(w), pos = pick_t(w);
            int hd = (int)FZ_PICK(&w->f, meta_tab), rd = (int)FZ_PICK(&w->f, meta_tab);
            push(w, reel_rope(g, x, pos, hd, rd, FZ_PICK(&w->f, f_tab)));
            break;
        }
        case 11: push(w, reel_softmax(g, pick_t(w))); break;
        case 12: push(w, reel_argmax(g, pick_t(w))); break;
        case 13: {
            reel_tensor q = pick_t(w), k = pick_t(w), v = pick_t(w), kc = pick_t(w), vc = pick_t(w);
            reel_attn_params ap = { REEL_ATTN_PARAMS_HEAD, .num_heads = (int)FZ_PICK(&w->f, meta_tab),
                                   .num_kv_heads = (int)FZ_PICK(&w->f, meta_tab),
                                   .head_dim = (int)FZ_PICK(&w->f, meta_tab),
                                   .block_size = (int)FZ_PICK(&w->f, meta_tab),
                                   .scale = FZ_PICK(&w->f, f_tab)};
            push(w, reel_paged_attention(g, q, k, v, kc, vc, fz_u8(&w->f) == 9 ? NULL : &ap));
            break;
        }
        case 14: {
            reel_tensor s = pick_t(w), l = pick_t(w), pt = pick_t(w);
            int k = (int)FZ_PICK(&w->f, meta_tab), ps = (int)FZ_PICK(&w->f, meta_tab);
            push(w, reel_topk(g, s, l, pt, k, ps));
            break;
        }
        case 15: {
            reel_tensor o = pick_t(w), l = pick_t(w), out = {0}, lse = {0};
            int h = (int)FZ_PICK(&w->f, meta_tab);
            uint8_t m = fz_u8(&w->f);
            FZ_CHECK(w->ctx, reel_lse_combine(g, o, l, h, m == 3 ? NULL : &out, m == 4 ? NULL : &lse));
            push(w, out);
            push(w, lse);
            break;
        }
        case 16: case 17: case 18: {
            const char *name = FZ_PICK(&w->f, names);
            if (FZ_CHECK(w->ctx, reel_output(g, name, pick_t(w))) == REEL_OK && w->nouts < MAX_OUT)
                w->outs[w->nouts++] = name;
            break;
        }
        case 19: { /* a leaf renamed is set, written and bound by its new name */
            reel_tensor t = pick_t(w);
            const char *name = FZ_PICK(&w->f, names);
            if (FZ_CHECK(w->ctx, reel_set_name(g, t, name)) == REEL_OK)
                for (int i = 0; i < w->nleaves; i++)
                    if (w->leaves[i].t.id == t.id)
                        w->leaves[i].name = name;
            break;
        }
        case 20: FZ_CHECK(w->ctx, reel_set_stream(g, pick_t(w), (int)(fz_u8(&w->f) % 7) - 1)); break;
        case 21: FZ_CHECK(NULL, reel_output(NULL, "a", pick_t(w))); break;
        case 22: { /* the builder's other ops */
            uint8_t op = fz_u8(&w->f) % 6;
            reel_tensor a = pick_t(w), b = pick_t(w);
            if (op == 0) {
                int64_t col = FZ_PICK(&w->f, meta_tab), ncols = FZ_PICK(&w->f, meta_tab);
                push(w, reel_view_cols(g, a, col, ncols));
            } else if (op == 1) {
                reel_tensor inv = pick_t(w);
                int hd = (int)FZ_PICK(&w->f, meta_tab);
                push(w, reel_rope_freq(g, a, b, inv, hd, FZ_PICK(&w->f, f_tab)));
            } else if (op == 2) {
                push(w, reel_rmsnorm_heads(g, a, b, FZ_PICK(&w->f, f_tab)));
            } else if (op == 3) {
                push(w, reel_sample(g, a, b, pick_t(w)));
            } else if (op == 4) { /* the router: a logits, b a bias (or an invalid handle) */
                uint8_t m = fz_u8(&w->f);
                reel_moe_params mp = REEL_MOE_PARAMS_INIT;
                mp.num_experts = (int)FZ_PICK(&w->f, meta_tab);
                mp.top_k = (int)FZ_PICK(&w->f, meta_tab);
                mp.scoring = m & 3; /* 2, 3: neither */
                mp.renormalize = (m >> 2) & 1;
                mp.n_group = (m >> 3) & 1 ? (int)FZ_PICK(&w->f, meta_tab) : 0;
                mp.topk_group = (m >> 3) & 1 ? (int)FZ_PICK(&w->f, meta_tab) : 0;
                mp.routed_scaling = (m >> 4) & 1 ? FZ_PICK(&w->f, f_tab) : 0.0f;
                reel_tensor ids = {0}, wt = {0};
                FZ_CHECK(w->ctx, reel_moe_route(g, a, (m >> 5) & 1 ? b : (reel_tensor){0}, (m >> 6) & 1 ? NULL : &mp,
                                                &ids, &wt));
                push(w, ids);
                push(w, wt);
            } else { /* the experts: a x, b ids, then weights, gate_up, down */
                reel_tensor wt = pick_t(w), gu = pick_t(w), dn = pick_t(w);
                push(w, reel_moe_ffn(g, a, b, wt, gu, dn, (int)FZ_PICK(&w->f, meta_tab)));
            }
            break;
        }
        case 23: return; /* end of the graph */
        default: break;
        }
        reel_status gs = reel_graph_status(g);
        if (gs != REEL_OK)
            fz_check(gs, w->ctx, "reel_graph_status");
    }
}

static void compile(world *w)
{
    reel_compile_opts o = REEL_COMPILE_OPTS_INIT;
    uint8_t m = fz_u8(&w->f);
    int nb = fz_u8(&w->f) % 20;
    o.num_buckets = nb == 19 ? REEL_UNDEF_INT : nb - 1; /* -1 .. 17 */
    for (int b = 0; b < REEL_MAX_BUCKETS && b < nb; b++)
        o.buckets[b] = FZ_PICK(&w->f, bucket_tab);
    o.max_context = FZ_PICK(&w->f, limit_tab);
    o.max_seqs = FZ_PICK(&w->f, limit_tab);
    uint8_t fl = fz_u8(&w->f);
    o.strict = fl & 1 ? 1 : REEL_UNDEF_INT;
    o.no_capture = fl & 2 ? 1 : REEL_UNDEF_INT;
    o.check_hazards = fl & 4 ? 1 : REEL_UNDEF_INT;
    o.pdl = fl & 8 ? 1 : REEL_UNDEF_INT;
    o.no_fuse = fl & 32 ? 1 : REEL_UNDEF_INT;
    if (fl & 16)
        o.size = sizeof(o) + 8 * (fl >> 6); /* 0: the struct of an older header (same size); more: newer */
    const reel_compile_opts *po = m == 0x55 ? NULL : &o;
    w->rec->strict = po && (fl & 1);
    w->rec->no_capture = po && (fl & 2);
    w->rec->no_fuse = po && (fl & 32);
    if (w->variant != RUN_AS_GIVEN) {
        if (!po) { /* NULL: the defaults, with the one flag flipped */
            reel_compile_opts d = REEL_COMPILE_OPTS_INIT;
            o = d;
            po = &o;
        }
        if (w->variant == RUN_CAPTURE_FLIPPED)
            o.no_capture = !w->ref->no_capture;
        else
            o.no_fuse = !w->ref->no_fuse;
    }
    reel_status st = FZ_CHECK(w->ctx, reel_compile(w->g, po, &w->p));
    w->rec->compile = st;
    if (st != REEL_OK && w->p)
        FZ_FAIL("reel_compile failed with %s and left a plan", reel_status_str(st));
    if (w->ref && st != w->ref->compile && st != REEL_E_OOM)
        FZ_FAIL("the program compiled %s with %s flipped (no_capture %d, no_fuse %d), %s as given: %s",
                reel_status_str(st), w->variant == RUN_CAPTURE_FLIPPED ? "no_capture" : "no_fuse", o.no_capture,
                o.no_fuse, reel_status_str(w->ref->compile), st ? reel_ctx_last_error(w->ctx) : "");
    if (st != REEL_OK)
        w->ref = NULL;
}

static int32_t *meta(world *w, int64_t n)
{
    if (n <= 0 || n > 4096)
        return NULL;
    int32_t *a = malloc((size_t)n * sizeof(int32_t));
    uint8_t mode = fz_u8(&w->f) % 4;
    for (int64_t i = 0; i < n; i++)
        a[i] = mode == 0 ? (int32_t)i : mode == 1 ? 0 : mode == 2 ? FZ_PICK(&w->f, meta_tab) : (int32_t)(i * 3 % 7);
    return a;
}

/* Records a result (b->n bytes of d where st is OK) into b. */
static void note(blob *b, reel_status st, int64_t rows, const void *d, size_t n)
{
    *b = (blob){.set = 1, .st = st, .rows = rows, .n = st == REEL_OK ? n : 0, .hash = 1469598103934665603ull};
    if (st != REEL_OK)
        return;
    const uint8_t *p = d;
    for (size_t i = 0; i < n; i++) /* FNV-1a, and every byte read */
        b->hash = (b->hash ^ p[i]) * 1099511628211ull;
    if (n <= REC_COPY && (b->copy = malloc(n ? n : 1)) != NULL)
        memcpy(b->copy, d, n);
}

/* A variant's result b against the same one of the run as given. */
static void compare(const world *w, const blob *b, const blob *r, const char *what, int index, const char *name)
{
    if (!w->ref || !b->set || !r->set)
        return;
    const char *flip = w->variant == RUN_CAPTURE_FLIPPED ? (w->ref->no_capture ? "captured" : "eager (no_capture)")
                                                         : (w->ref->no_fuse ? "fused" : "unfused (no_fuse)");
    if (b->st != r->st || b->rows != r->rows || b->n != r->n)
        FZ_FAIL("%s %d '%s': %s with %lld rows, %zu bytes in the %s plan, %s with %lld rows, %zu bytes as given", what,
                index, name ? name : "(null)", reel_status_str(b->st), (long long)b->rows, b->n, flip,
                reel_status_str(r->st), (long long)r->rows, r->n);
    if (b->hash == r->hash && (!b->copy || !r->copy || memcmp(b->copy, r->copy, b->n) == 0))
        return;
    size_t at = 0;
    while (b->copy && r->copy && at < b->n && b->copy[at] == r->copy[at])
        at++;
    uint32_t x = 0, y = 0;
    if (b->copy && r->copy) {
        size_t w4 = at & ~(size_t)3;
        memcpy(&x, b->copy + w4, b->n - w4 < 4 ? b->n - w4 : 4);
        memcpy(&y, r->copy + w4, b->n - w4 < 4 ? b->n - w4 : 4);
    }
    FZ_FAIL("%s %d '%s' (%zu bytes) differs between the %s plan and the program as given: first at byte %zu "
            "(word 0x%08x against 0x%08x)%s", what, index, name ? name : "(null)", b->n, flip, at, x, y,
            b->copy && r->copy ? "" : " (too long to keep: hashes differ)");
}

/* Reads every output after a step (every byte the plan says is there must
 * be readable) and, after an accepted one, records them. */
static void touch_outputs(world *w, int accepted)
{
    for (int i = 0; i < w->nouts; i++) {
        const void *d = NULL;
        int64_t rows = 0, row_elems = 0;
        reel_dtype dt;
        blob *b = accepted && w->stepi < MAX_STEPS ? &w->rec->out[w->stepi][i] : NULL;
        reel_status st = FZ_CHECK(w->ctx, reel_plan_output(w->p, w->outs[i], &d, &rows));
        if (st == REEL_OK)
            st = FZ_CHECK(w->ctx, reel_plan_output_desc(w->p, w->outs[i], &dt, &row_elems));
        size_t n = st == REEL_OK ? (size_t)(rows ? rows : 1) * (size_t)row_elems * reel_dtype_size(dt) : 0;
        if (n >= ((size_t)1 << 28))
            continue;
        if (b) {
            note(b, st, rows, d, n);
            if (w->ref)
                compare(w, b, &w->ref->out[w->stepi][i], "step's output", w->stepi, w->outs[i]);
        } else if (st == REEL_OK) {
            volatile uint8_t sum = 0;
            for (size_t k = 0; k < n; k++)
                sum ^= ((const uint8_t *)d)[k];
            (void)sum;
        }
    }
}

/* Every state leaf read back, recorded and compared (the end of a run). */
static void read_states(world *w)
{
    for (int i = 0; i < w->nleaves; i++) {
        const leaf *l = &w->leaves[i];
        int64_t bytes = leaf_bytes(l, 0);
        if (l->kind != 2 || bytes < 0)
            continue;
        void *d = malloc((size_t)bytes + 1);
        if (!d)
            continue;
        reel_status st = FZ_CHECK(w->ctx, reel_plan_read_state(w->p, l->name, d, (size_t)bytes));
        note(&w->rec->state[i], st, 0, d, (size_t)bytes);
        if (w->ref)
            compare(w, &w->rec->state[i], &w->ref->state[i], "state at the end, leaf", i, l->name);
        free(d);
    }
}

static void step(world *w)
{
    reel_step_info s = { REEL_STEP_INFO_HEAD };
    s.num_tokens = FZ_PICK(&w->f, tok_tab);
    s.num_seqs = FZ_PICK(&w->f, tok_tab);
    uint8_t have = fz_u8(&w->f);
    int32_t *pos = have & 1 ? meta(w, s.num_tokens) : NULL;
    int32_t *qs = have & 2 ? meta(w, (int64_t)s.num_seqs + 1) : NULL;
    int32_t *slots = have & 4 ? meta(w, s.num_tokens) : NULL;
    int32_t *lens = have & 8 ? meta(w, s.num_seqs) : NULL;
    s.block_table_stride = (int32_t)(fz_u8(&w->f) % 10) - 1;
    int32_t *bt = have & 16 ? meta(w, (int64_t)s.num_seqs * (s.block_table_stride > 0 ? s.block_table_stride : 1)) : NULL;
    s.positions = pos;
    s.query_start = qs;
    s.slot_mapping = slots;
    s.context_lens = lens;
    s.block_tables = bt;
    for (int i = 0; i < w->nleaves; i++) {
        leaf *l = &w->leaves[i];
        uint8_t m = fz_u8(&w->f) % 6;
        int tok = l->ndim > 0 && l->dims[0] == REEL_DIM_TOKENS;
        if (l->kind == 0) {
            int64_t row = leaf_bytes(l, 1), rows = tok ? s.num_tokens : 1;
            if (m == 5)
                rows = rows + 1;
            if (m >= 4 || row < 0 || rows < 0 || rows * row > MAX_BYTES) {
                if (m == 4)
                    FZ_CHECK(w->ctx, reel_plan_set_input(w->p, l->name, NULL, rows));
                continue;
            }
            void *d = fill(w, (size_t)(rows * row), l->dt);
            FZ_CHECK(w->ctx, reel_plan_set_input(w->p, l->name, d, rows));
            free(d);
        } else if (l->kind == 1 && (l->deferred || m == 5)) {
            int64_t bytes = leaf_bytes(l, 0);
            if (bytes < 0)
                continue;
            void *d = fill(w, (size_t)bytes, l->dt);
            FZ_CHECK(w->ctx, reel_plan_write_param(w->p, l->name, d, (size_t)bytes + (m == 4)));
            free(d);
        } else if (l->kind == 2 && m >= 3) {
            int64_t bytes = leaf_bytes(l, 0);
            if (bytes < 0)
                continue;
            if (m == 3 && w->nbufs < LEAVES) { /* borrowed until the plan goes */
                void *d = fill(w, (size_t)bytes, l->dt);
                w->bufs[w->nbufs++] = d;
                FZ_CHECK(w->ctx, reel_plan_bind_state(w->p, l->name, d, (size_t)bytes));
            } else {
                void *d = malloc((size_t)bytes + 1);
                reel_status rs = FZ_CHECK(w->ctx, reel_plan_read_state(w->p, l->name, d, (size_t)bytes + (m == 5)));
                if (w->stepi < MAX_STEPS) {
                    note(&w->rec->read[w->stepi][i], rs, 0, d, (size_t)bytes);
                    if (w->ref)
                        compare(w, &w->rec->read[w->stepi][i], &w->ref->read[w->stepi][i], "state read in step", w->stepi,
                                l->name);
                }
                if (m == 4)
                    FZ_CHECK(w->ctx, reel_plan_write_state(w->p, l->name, d, (size_t)bytes));
                free(d);
            }
        }
    }
    uint8_t tr = fz_u8(&w->f);
    if (tr & 1)
        FZ_CHECK(w->ctx, reel_plan_trace_ops(w->p, 1));
    reel_status st = FZ_CHECK(w->ctx, reel_step(w->p, fz_u8(&w->f) == 0x77 ? NULL : &s));
    if (w->stepi < MAX_STEPS) {
        w->rec->step[w->stepi] = st;
        w->rec->ok_steps += st == REEL_OK;
        if (w->ref && st != w->ref->step[w->stepi]) {
            if (st == REEL_E_OOM || w->ref->step[w->stepi] == REEL_E_OOM)
                w->ref = NULL; /* the plans diverge from here on: nothing more to compare */
            else
                FZ_FAIL("step %d: %s in the %s plan, %s as given: %s", w->stepi, reel_status_str(st),
                        w->variant == RUN_CAPTURE_FLIPPED ? "no_capture-flipped" : "no_fuse-flipped",
                        reel_status_str(w->ref->step[w->stepi]), st ? reel_ctx_last_error(w->ctx) : "");
        }
    }
    touch_outputs(w, st == REEL_OK);
    reel_fallback fb = reel_plan_last_fallback(w->p);
    if ((int)fb < 0 || fb >= REEL_FALLBACK_COUNT || !reel_fallback_str(fb))
        FZ_FAIL("last fallback %d out of range", (int)fb);
    if (tr & 1) {
        reel_op_span spans[16] = { REEL_OP_SPAN_INIT };
        int n = -1;
        FZ_CHECK(w->ctx, reel_plan_take_op_spans(w->p, spans, (int)(tr >> 4) - 2, &n));
        FZ_CHECK(w->ctx, reel_plan_trace_ops(w->p, 0));
    }
    if (tr & 2)
        FZ_CHECK(w->ctx, reel_plan_trim(w->p));
    w->stepi++;
    free(pos);
    free(qs);
    free(slots);
    free(lens);
    free(bt);
}

static void introspect(world *w)
{
    reel_plan_stats st = REEL_PLAN_STATS_INIT;
    if (FZ_CHECK(w->ctx, reel_plan_stats_get(w->p, &st)) != REEL_OK)
        return;
    reel_plan_memory mem = REEL_PLAN_MEMORY_INIT;
    FZ_CHECK(w->ctx, reel_plan_memory_get(w->p, &mem));
    for (int i = 0; i <= st.num_nodes; i++) {
        reel_node_info ni = REEL_NODE_INFO_INIT;
        reel_status s = FZ_CHECK(w->ctx, reel_plan_node_info(w->p, i, &ni));
        if (s == REEL_OK && (!ni.op || !ni.kernel || strnlen(ni.why, sizeof ni.why) == sizeof ni.why))
            FZ_FAIL("node %d: op, kernel or why missing", i);
        /* rope fused into attention leaves fused "" but gives the node the
         * rope's positions as a sixth input (runtime/fuse_rope.c) */
        if (s == REEL_OK && ((ni.fused && *ni.fused) ||
                             (!strcmp(ni.op, "paged_attention") && ni.nin > 5 && ni.in[5])))
            w->rec->fused_nodes++;
        if (s == REEL_OK && fz_verbose())
            fprintf(stderr, "  node %d: %s, kernel %s, fused '%s'\n", i, ni.op, ni.kernel, ni.fused ? ni.fused : "");
    }
    for (int b = -1; b <= st.num_buckets; b++)
        for (int i = 0; i < 4; i++) {
            reel_placement pl = REEL_PLACEMENT_INIT;
            if (FZ_CHECK(w->ctx, reel_plan_placement(w->p, b, i, &pl)) == REEL_OK && !pl.name)
                FZ_FAIL("placement without a name");
        }
}

/* Runs the program of the bytes once: as given, or with one compile option
 * flipped (compared as it goes with ref, the run as given). */
static void run(const uint8_t *data, size_t size, int variant, record *rec, const record *ref)
{
    world *w = calloc(1, sizeof(*w));
    w->f = (fz){data, size, 0};
    w->variant = variant;
    w->rec = rec;
    w->ref = ref;
    reel_ctx_opts co = REEL_CTX_OPTS_INIT;
    co.backend = REEL_BACKEND_HOST;
    if (FZ_CHECK(NULL, reel_ctx_create(&co, &w->ctx)) != REEL_OK)
        FZ_FAIL("no host context: %s", reel_ctx_last_error(NULL));
    FZ_CHECK(w->ctx, reel_graph_create(w->ctx, &w->g));
    build(w);
    compile(w);
    /* the graph is not consumed: it may go (or be compiled again) first */
    if (w->p && (fz_u8(&w->f) & 1)) {
        reel_graph_destroy(w->g);
        w->g = NULL;
    }
    if (w->p) {
        introspect(w);
        int steps = fz_u8(&w->f) % 6;
        for (int i = 0; i < steps; i++)
            step(w);
        FZ_CHECK(NULL, reel_step(NULL, NULL));
        read_states(w);
        reel_plan_stats st = REEL_PLAN_STATS_INIT;
        if (FZ_CHECK(w->ctx, reel_plan_stats_get(w->p, &st)) == REEL_OK)
            rec->replays = st.replays;
    }
    reel_plan_destroy(w->p);
    reel_graph_destroy(w->g);
    reel_ctx_destroy(w->ctx);
    for (int i = 0; i < w->nbufs; i++)
        free(w->bufs[i]);
    free(w);
}

static void record_free(record *r)
{
    for (int s = 0; s < MAX_STEPS; s++) {
        for (int i = 0; i < MAX_OUT; i++)
            free(r->out[s][i].copy);
        for (int i = 0; i < LEAVES; i++)
            free(r->read[s][i].copy);
    }
    for (int i = 0; i < LEAVES; i++)
        free(r->state[i].copy);
    free(r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    record *given = calloc(1, sizeof(*given));
    run(data, size, RUN_AS_GIVEN, given, NULL);
    /* Only programs that stepped: the others have nothing to compare. Each
     * variant only where it can differ: an eager plan against a captured one
     * that replayed a step (a strict plan's steps an eager plan refuses by
     * design), an unfused plan against one the pass fused. */
    for (int v = RUN_CAPTURE_FLIPPED; given->ok_steps > 0 && v <= RUN_FUSE_FLIPPED; v++) {
        if (v == RUN_CAPTURE_FLIPPED && (given->strict || (!given->no_capture && given->replays == 0)))
            continue;
        if (v == RUN_FUSE_FLIPPED && !given->no_fuse && given->fused_nodes == 0)
            continue;
        record *r = calloc(1, sizeof(*r));
        run(data, size, v, r, given);
        record_free(r);
    }
    record_free(given);
    return 0;
}
