/* GPU op test helpers: run one node through a backend impl, compare. */
#include "tests/gpu/oprun.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ops/cuda/cuda_ops.h"
#include "tests/core/opts.h"
#include "ops/host/dtype.h"
#include "backend/ctx.h"

uint64_t gt_next(gt_rng *r)
{
    /* splitmix64: any seed, including 0, gives a full-period stream. */
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

double gt_uniform(gt_rng *r, double lo, double hi)
{
    return lo + (hi - lo) * (double)(gt_next(r) >> 11) * 0x1p-53;
}

int64_t gt_int(gt_rng *r, int64_t lo, int64_t hi)
{
    return lo + (int64_t)(gt_next(r) % (uint64_t)(hi - lo + 1));
}

uint64_t gt_fresh_seed(void)
{
    const char *env = getenv("REEL_TEST_SEED"); /* a failure's seed, to run it again */
    if (env && *env)
        return strtoull(env, NULL, 10);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^ ((uint64_t)getpid() << 40);
}

reel_shape gt_shape(reel_dtype dt, bool tokens, int ndim, const int64_t *dims)
{
    reel_shape s;
    memset(&s, 0, sizeof s);
    s.dtype = dt;
    s.ndim = ndim;
    s.tokens = tokens;
    for (int i = 0; i < ndim; i++)
        s.dims[i] = dims[i];
    return s;
}

double gt_get(const void *p, reel_dtype dt, int64_t i)
{
    if (dt == REEL_I32)
        return ((const int32_t *)p)[i];
    return reel_load(p, dt, i);
}

void gt_set(void *p, reel_dtype dt, int64_t i, double v)
{
    if (dt == REEL_I32)
        ((int32_t *)p)[i] = (int32_t)v;
    else
        reel_store(p, dt, i, (float)v);
}

void *gt_random(gt_rng *r, reel_dtype dt, int64_t n, double lo, double hi)
{
    void *p = malloc((size_t)(n > 0 ? n : 1) * reel_dtype_size(dt));
    cr_assert_not_null(p);
    for (int64_t i = 0; i < n; i++)
        gt_set(p, dt, i, dt == REEL_I32 ? (double)gt_int(r, (int64_t)lo, (int64_t)hi) : gt_uniform(r, lo, hi));
    return p;
}

/* Device (or host-backend) buffers of one run. */
typedef struct gt_bufs {
    void *in[REEL_OP_MAX_IN], *out[REEL_OP_MAX_OUT];
    void *meta[5];
    void *err;
    void *cnt; /* the attention counters, REEL_ATTN_CNT_MAX_WORDS zeroed words */
} gt_bufs;

static reel_status upload(reel_backend *be, reel_stream *s, const void *src, size_t bytes, void **dst)
{
    REEL_TRY(be->vt->dev_alloc(be, bytes, dst));
    return be->vt->copy(be, s, *dst, src, bytes, REEL_COPY_H2D);
}

static reel_status upload_meta(reel_backend *be, reel_stream *s, const gt_op *op, gt_bufs *b, reel_meta_view *mv)
{
    const gt_meta *m = op->meta;
    size_t tok = (size_t)op->rows * sizeof(int32_t), seqs = (size_t)m->max_seqs * sizeof(int32_t);
    REEL_TRY(upload(be, s, m->positions, tok, &b->meta[0]));
    REEL_TRY(upload(be, s, m->slot_mapping, tok, &b->meta[1]));
    REEL_TRY(upload(be, s, m->token_seq, tok, &b->meta[2]));
    REEL_TRY(upload(be, s, m->context_lens, seqs, &b->meta[3]));
    REEL_TRY(upload(be, s, m->block_tables, seqs * (size_t)m->max_blocks, &b->meta[4]));
    *mv = (reel_meta_view){
        .positions = b->meta[0], .slot_mapping = b->meta[1], .token_seq = b->meta[2],
        .context_lens = b->meta[3], .block_tables = b->meta[4],
        .max_seqs = m->max_seqs, .max_blocks = m->max_blocks, .max_context = m->max_context,
        .err_word = b->err,
    };
    if (!m->no_attn_cnt) {
        REEL_TRY(be->vt->dev_alloc(be, 4 * REEL_ATTN_CNT_MAX_WORDS, &b->cnt));
        REEL_TRY(be->vt->fill(be, s, b->cnt, 0, 4 * REEL_ATTN_CNT_MAX_WORDS));
        mv->attn_cnt = b->cnt;
        mv->attn_cnt_words = REEL_ATTN_CNT_MAX_WORDS;
    }
    return REEL_OK;
}

static reel_status download(reel_backend *be, reel_stream *s, const gt_op *op, const gt_bufs *b, gt_result *res)
{
    for (int i = 0; i < op->nout; i++) {
        size_t bytes = reel_shape_bytes(&op->out[i], op->rows);
        res->out[i] = malloc(bytes ? bytes : 1);
        REEL_TRY(be->vt->copy(be, s, res->out[i], b->out[i], bytes, REEL_COPY_D2H));
    }
    for (int i = 0; i < op->nin; i++) {
        if (!op->inout[i])
            continue;
        size_t bytes = reel_shape_bytes(&op->in[i], op->rows);
        res->inout[i] = malloc(bytes ? bytes : 1);
        REEL_TRY(be->vt->copy(be, s, res->inout[i], b->in[i], bytes, REEL_COPY_D2H));
    }
    REEL_TRY(be->vt->copy(be, s, &res->err, b->err, sizeof res->err, REEL_COPY_D2H));
    static uint32_t cnt[REEL_ATTN_CNT_MAX_WORDS];
    if (b->cnt)
        REEL_TRY(be->vt->copy(be, s, cnt, b->cnt, sizeof cnt, REEL_COPY_D2H));
    REEL_TRY(be->vt->stream_sync(be, s));
    for (int i = 0; b->cnt && i < REEL_ATTN_CNT_MAX_WORDS; i++)
        res->cnt_left += cnt[i] != 0;
    return REEL_OK;
}

static reel_status run_on(reel_backend *be, reel_stream *s, const reel_op_impl *impl, const gt_op *op, gt_bufs *b,
                          gt_result *res)
{
    reel_launch l;
    reel_meta_view mv;
    memset(&l, 0, sizeof l);
    REEL_TRY(be->vt->dev_alloc(be, sizeof(int32_t), &b->err));
    REEL_TRY(be->vt->fill(be, s, b->err, 0, sizeof(int32_t)));
    for (int i = 0; i < op->nin; i++)
        if (op->data[i])
            REEL_TRY(upload(be, s, op->data[i], reel_shape_bytes(&op->in[i], op->rows), &b->in[i]));
    for (int i = 0; i < op->nout; i++) {
        size_t bytes = reel_shape_bytes(&op->out[i], op->rows);
        REEL_TRY(be->vt->dev_alloc(be, bytes, &b->out[i]));
        REEL_TRY(be->vt->fill(be, s, b->out[i], GT_POISON, bytes));
    }
    if (op->meta)
        REEL_TRY(upload_meta(be, s, op, b, &mv));
    l.op = op->op;
    l.attrs = &op->attrs;
    l.in_shape = op->in;
    l.out_shape = op->out;
    memcpy(l.in, b->in, sizeof l.in);
    memcpy(l.out, b->out, sizeof l.out);
    l.rows = op->rows;
    l.meta = op->meta ? &mv : NULL;
    l.stream = s;
    REEL_TRY(impl->launch(be, &l));
    /* The launch (and the host kernel's copy of it) must finish while mv
     * and op are alive: download syncs the stream. */
    return download(be, s, op, b, res);
}

reel_status gt_run(reel_backend *be, const reel_op_impl *impl, const gt_op *op, gt_result *res)
{
    reel_stream *s = NULL;
    gt_bufs b;
    memset(&b, 0, sizeof b);
    memset(res, 0, sizeof *res);
    reel_status st = be->vt->stream_create(be, &s);
    if (st == REEL_OK)
        st = run_on(be, s, impl, op, &b, res);
    if (s)
        (void)be->vt->stream_sync(be, s);
    for (int i = 0; i < REEL_OP_MAX_IN; i++)
        be->vt->dev_free(be, b.in[i]);
    for (int i = 0; i < REEL_OP_MAX_OUT; i++)
        be->vt->dev_free(be, b.out[i]);
    for (int i = 0; i < 5; i++)
        be->vt->dev_free(be, b.meta[i]);
    be->vt->dev_free(be, b.err);
    be->vt->dev_free(be, b.cnt);
    if (s)
        be->vt->stream_destroy(be, s);
    return st;
}

void gt_result_free(gt_result *r)
{
    for (int i = 0; i < REEL_OP_MAX_OUT; i++)
        free(r->out[i]);
    for (int i = 0; i < REEL_OP_MAX_IN; i++)
        free(r->inout[i]);
    memset(r, 0, sizeof *r);
}

void gt_op_free_data(gt_op *op)
{
    for (int i = 0; i < REEL_OP_MAX_IN; i++) {
        free(op->data[i]);
        op->data[i] = NULL;
    }
}

/* One output rounding to dt plus float32 compute in another order (and
 * cuBLAS's blocking for matmul sums). */
static void tolerance(reel_dtype dt, reel_op_kind op, double *atol, double *rtol)
{
    switch (dt) {
    case REEL_F16: *atol = 4e-3, *rtol = 4e-3; break;
    case REEL_BF16: *atol = 3e-2, *rtol = 3e-2; break;
    default: *atol = op == REEL_OP_MATMUL ? 1e-3 : 1e-4, *rtol = 1e-4; break;
    }
}

static bool close_enough(double g, double h, double atol, double rtol)
{
    if (isnan(g) || isnan(h))
        return isnan(g) && isnan(h);
    if (isinf(g) || isinf(h))
        return g == h;
    return fabs(g - h) <= atol + rtol * fabs(h);
}

static void compare_tensor(const char *what, const char *impl, const char *tensor, const reel_shape *sh,
                           int64_t rows, const void *want, const void *got, reel_op_kind op, bool exact,
                           uint64_t seed)
{
    int64_t n = reel_shape_numel(sh, rows);
    if (exact || sh->dtype == REEL_I32) {
        size_t bytes = reel_shape_bytes(sh, rows);
        if (memcmp(want, got, bytes) == 0)
            return;
        for (int64_t i = 0; i < n; i++)
            cr_assert(memcmp((const char *)want + (size_t)i * reel_dtype_size(sh->dtype),
                             (const char *)got + (size_t)i * reel_dtype_size(sh->dtype),
                             reel_dtype_size(sh->dtype)) == 0,
                      "%s: %s %s[%lld] = %g, host %g (seed %llu)", what, impl, tensor, (long long)i,
                      gt_get(got, sh->dtype, i), gt_get(want, sh->dtype, i), (unsigned long long)seed);
        return;
    }
    double atol, rtol;
    tolerance(sh->dtype, op, &atol, &rtol);
    for (int64_t i = 0; i < n; i++) {
        double h = gt_get(want, sh->dtype, i), g = gt_get(got, sh->dtype, i);
        cr_assert(close_enough(g, h, atol, rtol), "%s: %s %s[%lld] = %.9g, host %.9g (%s, seed %llu)", what, impl,
                  tensor, (long long)i, g, h, reel_dtype_name(sh->dtype), (unsigned long long)seed);
    }
}

static void compare_result(const gt_op *op, const reel_op_impl *impl, const gt_result *want, const gt_result *got,
                           uint64_t seed, const char *what)
{
    for (int i = 0; i < op->nout; i++)
        if (!op->scratch[i])
            compare_tensor(what, impl->name, i ? "out1" : "out0", &op->out[i], op->rows, want->out[i], got->out[i],
                           op->op, false, seed);
    for (int i = 0; i < op->nin; i++)
        if (op->inout[i])
            compare_tensor(what, impl->name, "written input", &op->in[i], op->rows, want->inout[i], got->inout[i],
                           op->op, true, seed);
    cr_assert_eq(got->err, want->err, "%s: %s error word %d, host %d (seed %llu)", what, impl->name, got->err,
                 want->err, (unsigned long long)seed);
}

static void host_run(reel_ctx *host, const gt_op *op, gt_result *want, const char *what)
{
    const reel_op_impl *href = reel_registry_select(REEL_BACKEND_HOST, op->op, op->in, op->nin, op->out,
                                                    &op->attrs, &host->be->caps);
    cr_assert_not_null(href, "%s: no host impl", what);
    cr_assert_eq(gt_run(host->be, href, op, want), REEL_OK, "%s: host: %s", what, reel_ctx_last_error(host));
}

int gt_check(reel_ctx *host, reel_ctx *cuda, const gt_op *op, uint64_t seed, const char *what)
{
    gt_result want;
    host_run(host, op, &want, what);
    int ran = 0;
    for (int k = 0; k < reel_cuda_nimpls; k++) {
        const reel_op_impl *impl = reel_cuda_impls[k];
        if (impl->op != op->op || !impl->can_use(op->in, op->nin, op->out, &op->attrs, &cuda->be->caps))
            continue;
        gt_result got;
        cr_assert_eq(gt_run(cuda->be, impl, op, &got), REEL_OK, "%s: %s: %s", what, impl->name,
                     reel_ctx_last_error(cuda));
        compare_result(op, impl, &want, &got, seed, what);
        gt_result_free(&got);
        ran++;
    }
    gt_result_free(&want);
    return ran;
}

const reel_op_impl *gt_cuda_impl(const char *name)
{
    for (int k = 0; k < reel_cuda_nimpls; k++)
        if (strcmp(reel_cuda_impls[k]->name, name) == 0)
            return reel_cuda_impls[k];
    cr_assert_fail("no CUDA impl named %s", name);
    return NULL;
}

void gt_check_impl(reel_ctx *host, reel_ctx *cuda, const gt_op *op, const char *name, uint64_t seed,
                   const char *what)
{
    const reel_op_impl *impl = gt_cuda_impl(name);
    cr_assert(impl->can_use(op->in, op->nin, op->out, &op->attrs, &cuda->be->caps), "%s: %s refuses the node",
              what, name);
    gt_result want, got;
    host_run(host, op, &want, what);
    cr_assert_eq(gt_run(cuda->be, impl, op, &got), REEL_OK, "%s: %s: %s", what, name, reel_ctx_last_error(cuda));
    compare_result(op, impl, &want, &got, seed, what);
    cr_assert_eq(got.cnt_left, 0, "%s: %s left %lld attention counters non-zero", what, name,
                 (long long)got.cnt_left);
    gt_result_free(&got);
    gt_result_free(&want);
}

void gt_open(reel_ctx **host, reel_ctx **cuda, uint64_t *seed, gt_rng *rng)
{
    cr_assert_eq(reel_ctx_create(reel_test_ctx_opts(REEL_BACKEND_HOST), host), REEL_OK);
    cr_assert_eq(reel_ctx_create(reel_test_ctx_opts(REEL_BACKEND_CUDA), cuda), REEL_OK, "cuda context: %s",
                 *cuda ? reel_ctx_last_error(*cuda) : "no context");
    *seed = gt_fresh_seed();
    rng->s = *seed;
}

void gt_close(reel_ctx *host, reel_ctx *cuda)
{
    reel_ctx_destroy(cuda);
    reel_ctx_destroy(host);
}
