/* CUDA matmul: x [M, K] times w [K, N] (or w [N, K] transposed) -> [M, N],
 * row-major, float32 accumulation. bf16 and f16 go through cuBLASLt, f32
 * through cublasSgemm (default math: true f32, no TF32).
 *
 * cuBLAS is column-major: a row-major [R, C] matrix is a column-major
 * [C, R] one. So Y^T (N x M) = W^T (N x K) * X^T (K x M): A is w, as stored
 * ([K, N] row-major = N x K column-major, ld N; or [N, K] row-major = K x N
 * column-major, ld K, taken transposed), B is x (K x M, ld K), C is y
 * (N x M, ld N).
 *
 * The cuBLASLt algorithm for a shape is chosen once (the first launch, which
 * is a warm-up before any capture) and kept in the backend's memo; the
 * descriptors are built in the launch's own stack memory (no allocation, no
 * destroy); the workspace is the stream's own, allocated when the stream was
 * created, so nothing is allocated inside a capture. */
#include <stdio.h>
#include <string.h>

#include "ops/cuda/common.cuh"
#include "ops/cuda/impls.h"

namespace reel_cu {

typedef struct mm_dims {
    int64_t m, n, k;
    bool wt;
} mm_dims;

static mm_dims mm_dims_of(const reel_launch *l)
{
    const reel_shape *xs = &l->in_shape[0], *ws = &l->in_shape[1];
    mm_dims d;
    d.wt = l->attrs->matmul.w_transposed;
    d.k = last_dim(xs);
    d.n = d.wt ? lead(ws, l->rows) : last_dim(ws);
    d.m = d.k > 0 ? lead(xs, l->rows) * row_numel(xs) / d.k : 0;
    return d;
}

static reel_status name_mm_err(reel_backend *be, reel_status st, const char *impl, const mm_dims *g)
{
    if (st == REEL_OK)
        return st;
    char what[160];
    snprintf(what, sizeof what, "%s x[%lld,%lld] w%s[%lld,%lld]", impl, (long long)g->m, (long long)g->k,
             g->wt ? "^T" : "", (long long)(g->wt ? g->n : g->k), (long long)(g->wt ? g->k : g->n));
    return name_err(be, st, what);
}

/* Largest power of two (at most 16) dividing the address. */
static uint32_t align_of(const void *p)
{
    uint32_t a = 16;
    while (a > 1 && ((uintptr_t)p % a) != 0)
        a /= 2;
    return a;
}

/* Memo key: everything the heuristic's answer depends on, in at most
 * REEL_CUDA_MEMO_KEY_MAX bytes (the memo drops a longer key, and then every
 * launch would query the heuristic again); no padding, so memcmp is exact. */
typedef struct lt_key {
    int32_t tag, dtype;
    int64_t m, n, k;
    int32_t wt, align_a, align_b, align_c;
    int64_t ws_bytes; /* the stream's workspace: the heuristic's limit */
} lt_key;
static_assert(sizeof(lt_key) == 56 && sizeof(lt_key) <= REEL_CUDA_MEMO_KEY_MAX, "lt_key must fit the memo");

typedef struct lt_choice {
    int64_t found;          /* 0: no cuBLASLt algorithm; use cublasGemmEx */
    cublasLtMatmulAlgo_t algo;
    int32_t timed;          /* the heuristic's answers weighed by timing (0: its first taken) */
    int32_t pick;           /* the chosen one's place in the heuristic's order */
} lt_choice;
static_assert(sizeof(lt_choice) <= REEL_CUDA_MEMO_VAL_MAX, "lt_choice must fit the memo");

static cudaDataType_t cuda_type(reel_dtype dt) { return dt == REEL_F16 ? CUDA_R_16F : CUDA_R_16BF; }

/* The descriptors live in caller memory (cuBLASLt's *Init calls, not
 * *Create): building them allocates nothing and needs no destroy, and a
 * launch sets a handful of fields instead of five heap objects. */
typedef struct lt_descs {
    cublasLtMatmulDescOpaque_t op;
    cublasLtMatrixLayoutOpaque_t a, b, c;
} lt_descs;

static reel_status lt_descs_init(reel_err *ctx, const mm_dims *g, cudaDataType_t t, lt_descs *d)
{
    cublasOperation_t ta = g->wt ? CUBLAS_OP_T : CUBLAS_OP_N;
    uint64_t a_rows = g->wt ? g->k : g->n, a_cols = g->wt ? g->n : g->k;
    REEL_TRY(REEL_CUDA_CHECK(ctx, cublasLtMatmulDescInit(&d->op, CUBLAS_COMPUTE_32F, CUDA_R_32F)));
    REEL_TRY(REEL_CUDA_CHECK(ctx, cublasLtMatmulDescSetAttribute(&d->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta)));
    REEL_TRY(REEL_CUDA_CHECK(ctx, cublasLtMatrixLayoutInit(&d->a, t, a_rows, a_cols, (int64_t)a_rows)));
    REEL_TRY(REEL_CUDA_CHECK(ctx, cublasLtMatrixLayoutInit(&d->b, t, (uint64_t)g->k, (uint64_t)g->m, g->k)));
    REEL_TRY(REEL_CUDA_CHECK(ctx, cublasLtMatrixLayoutInit(&d->c, t, (uint64_t)g->n, (uint64_t)g->m, g->n)));
    return REEL_OK;
}

static reel_status lt_pref_init(reel_err *ctx, cublasLtMatmulPreferenceOpaque_t *pref, uint64_t wsb,
                                const lt_key *key)
{
    uint32_t al_a = (uint32_t)key->align_a, al_b = (uint32_t)key->align_b, al_c = (uint32_t)key->align_c;
    REEL_TRY(REEL_CUDA_CHECK(ctx, cublasLtMatmulPreferenceInit(pref)));
    REEL_TRY(REEL_CUDA_CHECK(ctx, cublasLtMatmulPreferenceSetAttribute(
                                      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof wsb)));
    REEL_TRY(REEL_CUDA_CHECK(ctx, cublasLtMatmulPreferenceSetAttribute(
                                      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof al_a)));
    REEL_TRY(REEL_CUDA_CHECK(ctx, cublasLtMatmulPreferenceSetAttribute(
                                      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof al_b)));
    REEL_TRY(REEL_CUDA_CHECK(ctx, cublasLtMatmulPreferenceSetAttribute(
                                      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c, sizeof al_c)));
    REEL_TRY(REEL_CUDA_CHECK(ctx, cublasLtMatmulPreferenceSetAttribute(
                                      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_c, sizeof al_c)));
    /* Split-K partials are summed in float32 (or in place), never in the
     * output's 16-bit type: reel's matmuls accumulate in float32
     * (docs/decisions.md). */
    uint32_t red = CUBLASLT_REDUCTION_SCHEME_MASK & ~(uint32_t)CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE;
    REEL_TRY(REEL_CUDA_CHECK(ctx, cublasLtMatmulPreferenceSetAttribute(
                                      pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &red, sizeof red)));
    return REEL_OK;
}

/* Tuning (reel_ctx_opts.matmul_tuning): the heuristic's first LT_TOP
 * answers, each launched once, then timed LT_REPS times, one launch at a
 * time with L2 flushed before it (a decode step streams its weights from
 * memory: timed on weights left in L2 by the launch before, the picks were
 * algorithms that lost in the step; docs/decisions.md); the fastest launch
 * counts. Another candidate displaces the heuristic's first only when it
 * measured faster by LT_MARGIN, so run to run noise rarely changes the
 * pick. */
enum { LT_TOP = 8, LT_REPS = 5 };
static const float LT_MARGIN = 0.97f;
static const size_t LT_FLUSH_BYTES = (size_t)96 << 20; /* past the H200's 50 MB L2 */

/* Microseconds a launch of algo takes on the launch's stream (its output
 * written, as the real launch will write it again) after flush (device
 * bytes) is written; INFINITY where cuBLASLt refuses the candidate. */
static reel_status lt_time(reel_backend *be, const reel_launch *l, lt_descs *d, const cublasLtMatmulAlgo_t *algo,
                           void *ws, size_t ws_bytes, void *flush, cudaEvent_t e[2], float *us)
{
    const float alpha = 1.0f, beta = 0.0f;
    cudaStream_t st = reel_cuda_stream_handle(l->stream);
    cublasLtHandle_t h = reel_cuda_lt_handle(be);
    *us = INFINITY;
    if (cublasLtMatmul(h, &d->op, &alpha, l->in[1], &d->a, l->in[0], &d->b, &beta, l->out[0], &d->c, l->out[0], &d->c,
                       algo, ws, ws_bytes, st) != CUBLAS_STATUS_SUCCESS)
        return REEL_OK;
    for (int r = 0; r < LT_REPS; r++) {
        float ms = 0.0f;
        REEL_TRY(REEL_CUDA_CHECK(be->err, cudaMemsetAsync(flush, r, LT_FLUSH_BYTES, st)));
        REEL_TRY(REEL_CUDA_CHECK(be->err, cudaEventRecord(e[0], st)));
        REEL_TRY(REEL_CUDA_CHECK(be->err, cublasLtMatmul(h, &d->op, &alpha, l->in[1], &d->a, l->in[0], &d->b, &beta,
                                                         l->out[0], &d->c, l->out[0], &d->c, algo, ws, ws_bytes, st)));
        REEL_TRY(REEL_CUDA_CHECK(be->err, cudaEventRecord(e[1], st)));
        REEL_TRY(REEL_CUDA_CHECK(be->err, cudaEventSynchronize(e[1])));
        REEL_TRY(REEL_CUDA_CHECK(be->err, cudaEventElapsedTime(&ms, e[0], e[1])));
        if (ms * 1000.0f < *us)
            *us = ms * 1000.0f;
    }
    return REEL_OK;
}

/* The heuristic's answers res[0 .. nres) timed; ch takes the pick. The
 * flush buffer and the events live for the call. */
static reel_status lt_tune(reel_backend *be, const reel_launch *l, lt_descs *d, void *ws, size_t ws_bytes,
                           const cublasLtMatmulHeuristicResult_t *res, int nres, lt_choice *ch)
{
    void *flush = NULL;
    cudaEvent_t e[2] = {NULL, NULL};
    /* No room for the flush buffer: the heuristic's first, untimed. */
    if (cudaMalloc(&flush, LT_FLUSH_BYTES) != cudaSuccess) {
        (void)cudaGetLastError();
        return REEL_OK;
    }
    reel_status rc = REEL_OK;
    for (int i = 0; i < 2 && rc == REEL_OK; i++)
        rc = REEL_CUDA_CHECK(be->err, cudaEventCreate(&e[i]));
    float t0 = INFINITY, best = INFINITY;
    for (int i = 0; i < nres && rc == REEL_OK; i++) {
        float us = INFINITY;
        if (res[i].state == CUBLAS_STATUS_SUCCESS && res[i].workspaceSize <= ws_bytes)
            rc = lt_time(be, l, d, &res[i].algo, ws, ws_bytes, flush, e, &us);
        ch->timed++;
        if (i == 0) {
            t0 = best = us;
        } else if (us < best && us < t0 * LT_MARGIN) {
            best = us;
            ch->algo = res[i].algo;
            ch->pick = i;
        }
    }
    for (int i = 0; i < 2; i++)
        if (e[i])
            (void)cudaEventDestroy(e[i]);
    /* cudaFree waits for the device: the stream's timing work is done */
    reel_status fr = REEL_CUDA_CHECK(be->err, cudaFree(flush));
    return rc != REEL_OK ? rc : fr;
}

/* The heuristic's first n answers for d within limit workspace bytes;
 * found: it has one ("none" is an answer, not a failure). */
static reel_status lt_query(reel_backend *be, lt_descs *d, const lt_key *key, uint64_t limit, int n,
                            cublasLtMatmulHeuristicResult_t *res, int *nres, bool *found)
{
    cublasLtMatmulPreferenceOpaque_t pref;
    REEL_TRY(lt_pref_init(be->err, &pref, limit, key));
    memset(res, 0, (size_t)n * sizeof *res);
    *nres = 0;
    cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(reel_cuda_lt_handle(be), &d->op, &d->a, &d->b, &d->c, &d->c,
                                                       &pref, n, res, nres);
    if (hs != CUBLAS_STATUS_NOT_SUPPORTED)
        REEL_TRY(REEL_CUDA_CHECK(be->err, hs));
    *found = hs == CUBLAS_STATUS_SUCCESS && *nres > 0 && res[0].state == CUBLAS_STATUS_SUCCESS;
    return REEL_OK;
}

/* The whole workspace on this device: what the heuristic is offered, so a
 * shape's algorithm does not depend on the plan (stream_ws reserves what it
 * asks for). */
static uint64_t lt_full_ws(const reel_backend *be) { return reel_cuda_matmul_ws_bytes(&be->caps, INT64_MAX); }

/* The algorithm for this shape and these alignments: from the memo, or from
 * the heuristic (then remembered, "none" included): its first answer with
 * the whole workspace, or, in a plan's warm-up of a tuning context, the
 * fastest of its top answers the stream's workspace holds. Where the first
 * asks for more than the stream holds (a step past its plan's buckets), the
 * heuristic is asked again within what it holds. A shape's first launch is
 * in a warm-up before any capture, so a capture only reads the memo; a
 * capture never times. */
static reel_status lt_choose(reel_backend *be, const reel_launch *l, const mm_dims *g, lt_descs *d, void *ws,
                             size_t ws_bytes, lt_choice *ch)
{
    lt_key key;
    memset(&key, 0, sizeof key);
    key.tag = 0x6c746d6d; /* "ltmm" */
    key.dtype = (int32_t)l->in_shape[0].dtype;
    key.m = g->m, key.n = g->n, key.k = g->k, key.wt = g->wt;
    key.align_a = (int32_t)align_of(l->in[1]), key.align_b = (int32_t)align_of(l->in[0]);
    key.align_c = (int32_t)align_of(l->out[0]);
    key.ws_bytes = (int64_t)ws_bytes;
    if (reel_cuda_memo_get(be, &key, sizeof key, ch, sizeof *ch))
        return REEL_OK;
    bool tune = l->tune && be->tune_matmul;
    if (tune) {
        enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
        REEL_TRY(REEL_CUDA_CHECK(be->err, cudaStreamIsCapturing(reel_cuda_stream_handle(l->stream), &cs)));
        tune = cs == cudaStreamCaptureStatusNone;
    }
    cublasLtMatmulHeuristicResult_t res[LT_TOP];
    int nres = 0;
    bool found = false;
    const uint64_t full = lt_full_ws(be);
    REEL_TRY(lt_query(be, d, &key, full > ws_bytes ? full : ws_bytes, tune ? LT_TOP : 1, res, &nres, &found));
    if (found && res[0].workspaceSize > ws_bytes)
        REEL_TRY(lt_query(be, d, &key, ws_bytes, tune ? LT_TOP : 1, res, &nres, &found));
    memset(ch, 0, sizeof *ch);
    ch->found = found;
    if (!ch->found) {
        reel_cuda_memo_put(be, &key, sizeof key, ch, sizeof *ch);
        return REEL_OK;
    }
    ch->algo = res[0].algo;
    if (tune && nres > 1) {
        REEL_TRY(lt_tune(be, l, d, ws, ws_bytes, res, nres, ch));
        if (ch->timed)
            reel_cuda_lt_tuned(be);
    }
    reel_cuda_memo_put(be, &key, sizeof key, ch, sizeof *ch);
    return REEL_OK;
}

/* The workspace a cuBLASLt launch of these dims takes: its algorithm's ask
 * (lt_choose's first answer with the whole workspace, at the 16-byte
 * alignment every planned tensor has), or, with no algorithm, the classic
 * API's (gemm_ex). Memoized. */
static reel_status lt_need(reel_backend *be, const mm_dims *g, reel_dtype dt, size_t *bytes)
{
    lt_key key;
    memset(&key, 0, sizeof key);
    key.tag = 0x6c74776e; /* "ltwn" */
    key.dtype = (int32_t)dt;
    key.m = g->m, key.n = g->n, key.k = g->k, key.wt = g->wt;
    key.align_a = key.align_b = key.align_c = 16;
    key.ws_bytes = (int64_t)lt_full_ws(be);
    uint64_t v = 0;
    if (reel_cuda_memo_get(be, &key, sizeof key, &v, sizeof v)) {
        *bytes = (size_t)v;
        return REEL_OK;
    }
    lt_descs d;
    REEL_TRY(lt_descs_init(be->err, g, cuda_type(dt), &d));
    cublasLtMatmulHeuristicResult_t res[1];
    int nres = 0;
    bool found = false;
    REEL_TRY(lt_query(be, &d, &key, lt_full_ws(be), 1, res, &nres, &found));
    v = found ? res[0].workspaceSize : reel_cuda_matmul_ws_bytes(&be->caps, g->m);
    reel_cuda_memo_put(be, &key, sizeof key, &v, sizeof v);
    *bytes = (size_t)v;
    return REEL_OK;
}

/* No cuBLASLt algorithm for this shape: the classic API, same math. */
static reel_status gemm_ex(reel_backend *be, const reel_launch *l, const mm_dims *g, cudaDataType_t t)
{
    const float alpha = 1.0f, beta = 0.0f;
    cublasOperation_t ta = g->wt ? CUBLAS_OP_T : CUBLAS_OP_N;
    int lda = (int)(g->wt ? g->k : g->n);
    cublasHandle_t h;
    REEL_TRY(reel_cuda_blas_begin(be, l->stream, &h));
    reel_status st = REEL_CUDA_CHECK(be->err, cublasGemmEx(h, ta, CUBLAS_OP_N, (int)g->n, (int)g->m, (int)g->k, &alpha,
                                                           l->in[1], t, lda, l->in[0], t, (int)g->k, &beta, l->out[0],
                                                           t, (int)g->n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    reel_cuda_blas_end(be);
    return st;
}

/* Fused views (nseg > 0): each segment of columns [c0, c0 + ns) is its own
 * GEMM into a [m, ns] block at m * c0, reading w's columns (or rows, for
 * [N, K]) in place through the leading dimension, and no copies after them.
 * Consecutive segments of one width are one strided-batched GEMM (x shared:
 * stride 0), so q, k and v of equal widths are one launch instead of three
 * (a decode step at batch 64: docs/benchmarks.md). */
static reel_status gemm_segments(reel_backend *be, const reel_launch *l, const mm_dims *g, cudaDataType_t t)
{
    const float alpha = 1.0f, beta = 0.0f;
    const size_t es = reel_dtype_size(l->in_shape[0].dtype);
    cublasOperation_t ta = g->wt ? CUBLAS_OP_T : CUBLAS_OP_N;
    int lda = (int)(g->wt ? g->k : g->n);
    int64_t c0 = 0;
    cublasHandle_t h;
    REEL_TRY(reel_cuda_blas_begin(be, l->stream, &h));
    reel_status st = REEL_OK;
    const int nseg = l->attrs->matmul.nseg;
    for (int s = 0; s < nseg && st == REEL_OK;) {
        const int64_t ns = l->attrs->matmul.seg[s];
        int e = s + 1;
        while (e < nseg && l->attrs->matmul.seg[e] == ns)
            e++;
        const char *w = (const char *)l->in[1] + (size_t)(g->wt ? c0 * g->k : c0) * es;
        char *y = (char *)l->out[0] + (size_t)(g->m * c0) * es;
        if (e - s == 1)
            st = REEL_CUDA_CHECK(be->err, cublasGemmEx(h, ta, CUBLAS_OP_N, (int)ns,
                                                       (int)g->m, (int)g->k, &alpha, w, t, lda, l->in[0], t,
                                                       (int)g->k, &beta, y, t, (int)ns, CUBLAS_COMPUTE_32F,
                                                       CUBLAS_GEMM_DEFAULT));
        else
            st = REEL_CUDA_CHECK(be->err, cublasGemmStridedBatchedEx(
                                              h, ta, CUBLAS_OP_N, (int)ns, (int)g->m,
                                              (int)g->k, &alpha, w, t, lda, g->wt ? ns * g->k : ns, l->in[0], t,
                                              (int)g->k, 0, &beta, y, t, (int)ns, g->m * ns, e - s,
                                              CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        c0 += ns * (e - s);
        s = e;
    }
    reel_cuda_blas_end(be);
    return st;
}

static reel_status matmul_lt_launch(reel_backend *be, const reel_launch *l)
{
    mm_dims g = mm_dims_of(l);
    if (g.m <= 0 || g.n <= 0)
        return REEL_OK;
    if (l->attrs->matmul.nseg)
        return name_mm_err(be, gemm_segments(be, l, &g, cuda_type(l->in_shape[0].dtype)), "cuda.matmul.cublaslt",
                           &g);
    cudaDataType_t t = cuda_type(l->in_shape[0].dtype);
    size_t ws_bytes = 0;
    void *ws = NULL;
    REEL_TRY(name_mm_err(be, reel_cuda_stream_workspace(be, l->stream, &ws, &ws_bytes), "cuda.matmul.cublaslt", &g));
    lt_descs d;
    lt_choice ch;
    const float alpha = 1.0f, beta = 0.0f;
    reel_status st = lt_descs_init(be->err, &g, t, &d);
    if (st == REEL_OK)
        st = lt_choose(be, l, &g, &d, ws, ws_bytes, &ch);
    if (st == REEL_OK && ch.found)
        st = REEL_CUDA_CHECK(be->err, cublasLtMatmul(reel_cuda_lt_handle(be), &d.op, &alpha, l->in[1], &d.a,
                                                     l->in[0], &d.b, &beta, l->out[0], &d.c, l->out[0], &d.c,
                                                     &ch.algo, ws, ws_bytes, reel_cuda_stream_handle(l->stream)));
    else if (st == REEL_OK)
        st = gemm_ex(be, l, &g, t);
    return name_mm_err(be, st, "cuda.matmul.cublaslt", &g);
}

static reel_status matmul_sgemm_launch(reel_backend *be, const reel_launch *l)
{
    mm_dims g = mm_dims_of(l);
    if (g.m <= 0 || g.n <= 0)
        return REEL_OK;
    if (l->attrs->matmul.nseg)
        return name_mm_err(be, gemm_segments(be, l, &g, CUDA_R_32F), "cuda.matmul.sgemm", &g);
    const float alpha = 1.0f, beta = 0.0f;
    cublasOperation_t ta = g.wt ? CUBLAS_OP_T : CUBLAS_OP_N;
    int lda = (int)(g.wt ? g.k : g.n);
    cublasHandle_t h;
    reel_status st = reel_cuda_blas_begin(be, l->stream, &h);
    if (st == REEL_OK) {
        st = REEL_CUDA_CHECK(be->err, cublasSgemm(h, ta, CUBLAS_OP_N, (int)g.n, (int)g.m, (int)g.k, &alpha,
                                                  (const float *)l->in[1], lda, (const float *)l->in[0], (int)g.k,
                                                  &beta, (float *)l->out[0], (int)g.n));
        reel_cuda_blas_end(be);
    }
    return name_mm_err(be, st, "cuda.matmul.sgemm", &g);
}

/* cuBLAS takes int dimensions. */
static bool fits_int(const reel_shape *in)
{
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < in[i].ndim; j++)
            if (in[i].dims[j] > 0x7fffffffLL)
                return false;
    return true;
}

/* Epilogues and prologues (the fusion pass) are not the cuBLAS impls':
 * refusing them keeps those nodes unfused (runtime/fuse.c asks the registry
 * before it rewrites). Segments are theirs (gemm_segments). */
static bool plain(const reel_op_attrs *a)
{
    return a->matmul.epi == REEL_MM_EPI_NONE && a->matmul.pro == REEL_MM_PRO_NONE;
}

static bool use_lt(REEL_CU_USE_ARGS)
{
    return nin >= 2 && plain(a) && same_float_dtype(in, 2, out, 1) && in[0].dtype != REEL_F32 && in[1].ndim == 2 &&
           fits_int(in);
}

static bool use_sgemm(REEL_CU_USE_ARGS)
{
    return nin >= 2 && plain(a) && same_float_dtype(in, 2, out, 1) && in[0].dtype == REEL_F32 && in[1].ndim == 2 &&
           fits_int(in);
}

/* The workspace a matmul node's launches may use: cuBLAS's, for its rows at
 * the largest bucket (reel_cuda_matmul_ws_bytes). */
/* A matmul node's dims at these shapes (dims[0] of x: the rows). */
static mm_dims mm_dims_at(const reel_shape *in, const reel_op_attrs *a)
{
    reel_launch l;
    memset(&l, 0, sizeof l);
    l.in_shape = in;
    l.attrs = a;
    l.rows = in[0].ndim > 0 ? in[0].dims[0] : 1;
    return mm_dims_of(&l);
}

} /* namespace reel_cu */

/* cuBLASLt's impl: what its algorithm asks for, or the classic API's for
 * segments (gemm_segments). */
extern "C" reel_status reel_cu_matmul_lt_ws(reel_backend *be, const reel_shape *in, int nin, const reel_shape *out,
                                            const reel_op_attrs *a, size_t *bytes)
{
    (void)nin, (void)out;
    reel_cu::mm_dims g = reel_cu::mm_dims_at(in, a);
    *bytes = 0;
    if (g.m <= 0 || g.n <= 0)
        return REEL_OK;
    if (a->matmul.nseg) {
        *bytes = reel_cuda_matmul_ws_bytes(&be->caps, g.m);
        return REEL_OK;
    }
    return reel_cu::lt_need(be, &g, in[0].dtype, bytes);
}

/* The f32 impl: the classic API's. */
static reel_status sgemm_ws(reel_backend *be, const reel_shape *in, int nin, const reel_shape *out,
                            const reel_op_attrs *a, size_t *bytes)
{
    (void)nin, (void)out;
    reel_cu::mm_dims g = reel_cu::mm_dims_at(in, a);
    *bytes = g.m > 0 && g.n > 0 ? reel_cuda_matmul_ws_bytes(&be->caps, g.m) : 0;
    return REEL_OK;
}

static reel_op_impl with_ws(reel_op_impl i, reel_status (*ws)(reel_backend *, const reel_shape *, int,
                                                             const reel_shape *, const reel_op_attrs *, size_t *))
{
    i.stream_ws = ws;
    return i;
}

extern "C" const reel_op_impl reel_cu_matmul_lt_impl =
    with_ws(reel_cu::make_impl("cuda.matmul.cublaslt", REEL_OP_MATMUL, 20, false, false, reel_cu::use_lt,
                               reel_cu::matmul_lt_launch),
            reel_cu_matmul_lt_ws);
extern "C" const reel_op_impl reel_cu_matmul_sgemm_impl =
    with_ws(reel_cu::make_impl("cuda.matmul.sgemm", REEL_OP_MATMUL, 10, false, false, reel_cu::use_sgemm,
                               reel_cu::matmul_sgemm_launch),
            sgemm_ws);
