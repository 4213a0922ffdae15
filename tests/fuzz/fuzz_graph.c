/* libFuzzer target: random graphs through the whole public API on the host
 * backend. The bytes are a program: builder commands over a pool of tensor
 * handles (every op the builder has; shapes with 0, odd and huge dims; every
 * dtype and an invalid one; streams; outputs; names), then compile options
 * (buckets, limits, strict, no_capture, check_hazards, pdl), then steps with
 * random metadata, inputs, parameter writes, state binds and reads.
 * Invariants: no crash or sanitizer report; every non-OK status leaves a
 * message; nothing leaks (ASan's leak check at exit / per input). */
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
static const float f_tab[] = {1e-5f, 0.0f, -1.0f, 1e30f, 10000.0f, 0.5f};

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

typedef struct world {
    fz f;
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

static void *fill(world *w, size_t bytes)
{
    uint8_t *b = malloc(bytes ? bytes : 1);
    if (!b)
        return NULL;
    uint8_t seed = fz_u8(&w->f);
    /* small finite floats mostly; the seed's top bit lets raw bytes (NaN, inf) in */
    for (size_t i = 0; i < bytes; i++)
        b[i] = (seed & 0x80) ? (uint8_t)(seed * 31 + i * 7) : (uint8_t)((i % 4 == 3) ? 0x3f : (i * seed) & 0x7f);
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
            void *d = fill(w, (size_t)bytes);
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
    if (fl & 16)
        o.size = sizeof(o) + 8 * (fl >> 6); /* 0: the struct of an older header (same size); more: newer */
    reel_status st = FZ_CHECK(w->ctx, reel_compile(w->g, m == 0x55 ? NULL : &o, &w->p));
    if (st != REEL_OK && w->p)
        FZ_FAIL("reel_compile failed with %s and left a plan", reel_status_str(st));
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

static void touch_outputs(world *w)
{
    for (int i = 0; i < w->nouts; i++) {
        const void *d = NULL;
        int64_t rows = 0, row_elems = 0;
        reel_dtype dt;
        if (FZ_CHECK(w->ctx, reel_plan_output(w->p, w->outs[i], &d, &rows)) != REEL_OK)
            continue;
        if (FZ_CHECK(w->ctx, reel_plan_output_desc(w->p, w->outs[i], &dt, &row_elems)) != REEL_OK)
            continue;
        /* every byte the plan says is there must be readable */
        size_t n = (size_t)(rows ? rows : 1) * (size_t)row_elems * reel_dtype_size(dt);
        volatile uint8_t sum = 0;
        for (size_t b = 0; b < n && n < ((size_t)1 << 28); b++)
            sum ^= ((const uint8_t *)d)[b];
        (void)sum;
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
            void *d = fill(w, (size_t)(rows * row));
            FZ_CHECK(w->ctx, reel_plan_set_input(w->p, l->name, d, rows));
            free(d);
        } else if (l->kind == 1 && (l->deferred || m == 5)) {
            int64_t bytes = leaf_bytes(l, 0);
            if (bytes < 0)
                continue;
            void *d = fill(w, (size_t)bytes);
            FZ_CHECK(w->ctx, reel_plan_write_param(w->p, l->name, d, (size_t)bytes + (m == 4)));
            free(d);
        } else if (l->kind == 2 && m >= 3) {
            int64_t bytes = leaf_bytes(l, 0);
            if (bytes < 0)
                continue;
            if (m == 3 && w->nbufs < LEAVES) { /* borrowed until the plan goes */
                void *d = fill(w, (size_t)bytes);
                w->bufs[w->nbufs++] = d;
                FZ_CHECK(w->ctx, reel_plan_bind_state(w->p, l->name, d, (size_t)bytes));
            } else {
                void *d = malloc((size_t)bytes + 1);
                FZ_CHECK(w->ctx, reel_plan_read_state(w->p, l->name, d, (size_t)bytes + (m == 5)));
                if (m == 4)
                    FZ_CHECK(w->ctx, reel_plan_write_state(w->p, l->name, d, (size_t)bytes));
                free(d);
            }
        }
    }
    uint8_t tr = fz_u8(&w->f);
    if (tr & 1)
        FZ_CHECK(w->ctx, reel_plan_trace_ops(w->p, 1));
    FZ_CHECK(w->ctx, reel_step(w->p, fz_u8(&w->f) == 0x77 ? NULL : &s));
    touch_outputs(w);
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
    }
    for (int b = -1; b <= st.num_buckets; b++)
        for (int i = 0; i < 4; i++) {
            reel_placement pl = REEL_PLACEMENT_INIT;
            if (FZ_CHECK(w->ctx, reel_plan_placement(w->p, b, i, &pl)) == REEL_OK && !pl.name)
                FZ_FAIL("placement without a name");
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    world *w = calloc(1, sizeof(*w));
    w->f = (fz){data, size, 0};
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
    }
    reel_plan_destroy(w->p);
    reel_graph_destroy(w->g);
    reel_ctx_destroy(w->ctx);
    for (int i = 0; i < w->nbufs; i++)
        free(w->bufs[i]);
    free(w);
    return 0;
}
