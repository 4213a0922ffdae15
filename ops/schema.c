/* Op schemas: arity and shape/dtype inference per op kind.
 * Inference only sees shapes; the builder adds the op and tensor names to
 * the message, so messages here name operands by role ("x", "w"). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>

#include "ops/op.h"

/* ---- checks shared by the inference functions ------------------------- */

static reel_status bad(char *err, size_t len, reel_status st, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static reel_status bad(char *err, size_t len, reel_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (err && len)
        vsnprintf(err, len, fmt, ap);
    va_end(ap);
    return st;
}

static bool is_float(reel_dtype t) { return t == REEL_F32 || t == REEL_F16 || t == REEL_BF16; }

/* A per-token operand: [T, ...] with exactly ndim dims. */
static reel_status need_tok(const reel_shape *s, const char *role, int ndim, char *err, size_t len)
{
    char b[64];
    if (!s->tokens)
        return bad(err, len, REEL_E_SHAPE, "%s must have a token dim, is %s", role,
                   reel_shape_format(s, b, sizeof b));
    if (s->ndim != ndim)
        return bad(err, len, REEL_E_SHAPE, "%s must have %d dims, is %s", role, ndim,
                   reel_shape_format(s, b, sizeof b));
    return REEL_OK;
}

/* A per-step constant operand (weight, cache): no token dim, ndim dims. */
static reel_status need_const(const reel_shape *s, const char *role, int ndim, char *err, size_t len)
{
    char b[64];
    if (s->tokens)
        return bad(err, len, REEL_E_SHAPE, "%s must not have a token dim, is %s", role,
                   reel_shape_format(s, b, sizeof b));
    if (s->ndim != ndim)
        return bad(err, len, REEL_E_SHAPE, "%s must have %d dims, is %s", role, ndim,
                   reel_shape_format(s, b, sizeof b));
    return REEL_OK;
}

static reel_status need_float(const reel_shape *s, const char *role, char *err, size_t len)
{
    if (!is_float(s->dtype))
        return bad(err, len, REEL_E_DTYPE, "%s must be f32, f16 or bf16, is %s", role,
                   reel_dtype_name(s->dtype));
    return REEL_OK;
}

static reel_status need_dtype(const reel_shape *s, const char *role, reel_dtype t, char *err, size_t len)
{
    if (s->dtype != t)
        return bad(err, len, REEL_E_DTYPE, "%s must be %s, is %s", role, reel_dtype_name(t),
                   reel_dtype_name(s->dtype));
    return REEL_OK;
}

static reel_status same_dtype(const reel_shape *a, const char *ra, const reel_shape *b, const char *rb,
                              char *err, size_t len)
{
    if (a->dtype != b->dtype)
        return bad(err, len, REEL_E_DTYPE, "dtypes differ: %s is %s, %s is %s", ra, reel_dtype_name(a->dtype), rb,
                   reel_dtype_name(b->dtype));
    return REEL_OK;
}

static bool same_shape(const reel_shape *a, const reel_shape *b)
{
    if (a->tokens != b->tokens || a->ndim != b->ndim)
        return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->dims[i] != b->dims[i])
            return false;
    return true;
}

static void set_tok(reel_shape *o, reel_dtype t, int ndim, int64_t d1, int64_t d2)
{
    *o = (reel_shape){ .dtype = t, .ndim = ndim, .tokens = true, .dims = { -1, d1, d2, 0 } };
    for (int i = ndim; i < REEL_MAX_DIMS; i++)
        o->dims[i] = 0;
}

#define TRY(expr) do { reel_status st_ = (expr); if (st_ != REEL_OK) return st_; } while (0)

/* ---- inference per op --------------------------------------------------- */

static reel_status infer_rmsnorm(const reel_shape *in, int nin, const reel_op_attrs *a, reel_shape *out,
                                 char *err, size_t len);

static reel_status infer_embedding(const reel_shape *in, int nin, const reel_op_attrs *a, reel_shape *out,
                                   char *err, size_t len)
{
    TRY(need_const(&in[0], "table", 2, err, len));
    TRY(need_float(&in[0], "table", err, len));
    TRY(need_tok(&in[1], "ids", 1, err, len));
    TRY(need_dtype(&in[1], "ids", REEL_I32, err, len));
    set_tok(&out[0], in[0].dtype, 2, in[0].dims[1], 0);
    return REEL_OK;
}

static reel_status infer_matmul(const reel_shape *in, int nin, const reel_op_attrs *a, reel_shape *out,
                                char *err, size_t len)
{
    TRY(need_tok(&in[0], "x", 2, err, len));
    TRY(need_float(&in[0], "x", err, len));
    TRY(need_const(&in[1], "w", 2, err, len));
    TRY(same_dtype(&in[0], "x", &in[1], "w", err, len));
    int kdim = a->matmul.w_transposed ? 1 : 0;
    if (in[1].dims[kdim] != in[0].dims[1])
        return bad(err, len, REEL_E_SHAPE, "inner dims differ: x[1] = %lld, w[%d] = %lld%s",
                   (long long)in[0].dims[1], kdim, (long long)in[1].dims[kdim],
                   a->matmul.w_transposed ? " (w transposed)" : "");
    int64_t n = in[1].dims[1 - kdim];
    set_tok(&out[0], in[0].dtype, 2, n, 0);
    /* Epilogues and segments come from the fusion pass (runtime/fuse.c). */
    const int epi = a->matmul.epi, nseg = a->matmul.nseg;
    if (epi < REEL_MM_EPI_NONE || epi > REEL_MM_EPI_SILU_MUL)
        return bad(err, len, REEL_E_INTERNAL, "unknown epilogue %d", epi);
    if (nseg < 0 || nseg > REEL_MM_MAX_SEG)
        return bad(err, len, REEL_E_INTERNAL, "segments %d outside 0..%d", nseg, REEL_MM_MAX_SEG);
    int64_t cols = 0;
    for (int s = 0; s < nseg; s++) {
        if (a->matmul.seg[s] <= 0)
            return bad(err, len, REEL_E_INTERNAL, "segment %d has %lld columns", s, (long long)a->matmul.seg[s]);
        cols += a->matmul.seg[s];
    }
    if (nseg && (cols != n || epi == REEL_MM_EPI_SILU_MUL))
        return bad(err, len, REEL_E_INTERNAL, "segments cover %lld of %lld columns", (long long)cols, (long long)n);
    if (epi == REEL_MM_EPI_BIAS) {
        if (nin < 3 || in[2].tokens || in[2].ndim != 1 || in[2].dims[0] != n)
            return bad(err, len, REEL_E_SHAPE, "the bias must be a row [%lld]", (long long)n);
        TRY(same_dtype(&in[0], "x", &in[2], "bias", err, len));
    }
    if (epi == REEL_MM_EPI_SILU_MUL) {
        if (n % 2 != 0)
            return bad(err, len, REEL_E_SHAPE, "silu_and_mul epilogue: N = %lld must be even", (long long)n);
        out[1] = out[0];
        set_tok(&out[0], in[0].dtype, 2, n / 2, 0);
    }
    const int pro = a->matmul.pro;
    if (pro < REEL_MM_PRO_NONE || pro > REEL_MM_PRO_ADD_RMSNORM)
        return bad(err, len, REEL_E_INTERNAL, "unknown prologue %d", pro);
    if (pro != REEL_MM_PRO_NONE) {
        const int64_t k = in[0].dims[1];
        if (nin < 5 || in[4].tokens || in[4].ndim != 1 || in[4].dims[0] != k)
            return bad(err, len, REEL_E_SHAPE, "the rmsnorm prologue's weight must be a row [%lld]", (long long)k);
        TRY(same_dtype(&in[0], "x", &in[4], "norm weight", err, len));
        if (pro == REEL_MM_PRO_ADD_RMSNORM) {
            if (!in[3].tokens || in[3].ndim != 2 || in[3].dims[1] != k)
                return bad(err, len, REEL_E_SHAPE, "the add_rmsnorm prologue's second term must be [T, %lld]",
                           (long long)k);
            TRY(same_dtype(&in[0], "x", &in[3], "second term", err, len));
            out[reel_mm_sum_out(a)] = in[0];
        }
        out[reel_mm_norm_out(a)] = in[0];
    }
    return REEL_OK;
}

/* x [T, N] -> columns [col, col + ncols) of each row, [T, ncols]. */
static reel_status infer_view_cols(const reel_shape *in, int nin, const reel_op_attrs *a, reel_shape *out,
                                   char *err, size_t len)
{
    TRY(need_tok(&in[0], "x", 2, err, len));
    int64_t c = a->view.col, n = a->view.ncols;
    if (c < 0 || n <= 0 || c > in[0].dims[1] || n > in[0].dims[1] - c)
        return bad(err, len, REEL_E_SHAPE, "columns [%lld, %lld + %lld) are not inside x's %lld", (long long)c,
                   (long long)c, (long long)n, (long long)in[0].dims[1]);
    set_tok(&out[0], in[0].dtype, 2, n, 0);
    return REEL_OK;
}

/* (a, b [T, D], w [D]) -> (a + b, rmsnorm(a + b) * w), both [T, D]. */
static reel_status infer_add_rmsnorm(const reel_shape *in, int nin, const reel_op_attrs *a, reel_shape *out,
                                     char *err, size_t len)
{
    TRY(need_tok(&in[0], "a", 2, err, len));
    TRY(need_float(&in[0], "a", err, len));
    TRY(same_dtype(&in[0], "a", &in[1], "b", err, len));
    if (!same_shape(&in[0], &in[1]))
        return bad(err, len, REEL_E_SHAPE, "b must have a's shape");
    TRY(infer_rmsnorm((reel_shape[]){ in[0], in[2] }, 2, a, out, err, len));
    out[1] = out[0];
    return REEL_OK;
}

/* add and mul: b has a's shape, or is a row [last dim of a] broadcast. */
static reel_status infer_binary(const reel_shape *in, int nin, const reel_op_attrs *a, reel_shape *out,
                                char *err, size_t len)
{
    char sa[64], sb[64];
    if (!in[0].tokens)
        return bad(err, len, REEL_E_SHAPE, "a must have a token dim, is %s", reel_shape_format(&in[0], sa, sizeof sa));
    TRY(need_float(&in[0], "a", err, len));
    TRY(same_dtype(&in[0], "a", &in[1], "b", err, len));
    bool row = !in[1].tokens && in[1].ndim == 1 && in[0].ndim >= 2 && in[1].dims[0] == in[0].dims[in[0].ndim - 1];
    if (!row && !same_shape(&in[0], &in[1]))
        return bad(err, len, REEL_E_SHAPE, "b must have a's shape or be a row [last dim of a]: a is %s, b is %s",
                   reel_shape_format(&in[0], sa, sizeof sa), reel_shape_format(&in[1], sb, sizeof sb));
    out[0] = in[0];
    return REEL_OK;
}

static reel_status infer_rmsnorm(const reel_shape *in, int nin, const reel_op_attrs *a, reel_shape *out,
                                 char *err, size_t len)
{
    TRY(need_tok(&in[0], "x", 2, err, len));
    TRY(need_float(&in[0], "x", err, len));
    TRY(need_const(&in[1], "w", 1, err, len));
    TRY(same_dtype(&in[0], "x", &in[1], "w", err, len));
    if (in[1].dims[0] != in[0].dims[1])
        return bad(err, len, REEL_E_SHAPE, "w[0] = %lld must equal x[1] = %lld", (long long)in[1].dims[0],
                   (long long)in[0].dims[1]);
    if (!(a->rmsnorm.eps > 0.0f) || !isfinite(a->rmsnorm.eps))
        return bad(err, len, REEL_E_INVALID_ARG, "eps must be finite and > 0, is %g", (double)a->rmsnorm.eps);
    out[0] = in[0];
    return REEL_OK;
}

static reel_status infer_silu_and_mul(const reel_shape *in, int nin, const reel_op_attrs *a, reel_shape *out,
                                      char *err, size_t len)
{
    TRY(need_tok(&in[0], "x", 2, err, len));
    TRY(need_float(&in[0], "x", err, len));
    if (in[0].dims[1] % 2 != 0)
        return bad(err, len, REEL_E_SHAPE, "x[1] = %lld must be even (gate and up halves)", (long long)in[0].dims[1]);
    set_tok(&out[0], in[0].dtype, 2, in[0].dims[1] / 2, 0);
    return REEL_OK;
}

static reel_status infer_rope(const reel_shape *in, int nin, const reel_op_attrs *a, reel_shape *out,
                              char *err, size_t len)
{
    TRY(need_tok(&in[0], "x", 2, err, len));
    TRY(need_float(&in[0], "x", err, len));
    TRY(need_tok(&in[1], "positions", 1, err, len));
    TRY(need_dtype(&in[1], "positions", REEL_I32, err, len));
    int hd = a->rope.head_dim, rd = a->rope.rot_dim;
    if (hd <= 0 || in[0].dims[1] % hd != 0)
        return bad(err, len, REEL_E_INVALID_ARG, "head_dim %d must be > 0 and divide x[1] = %lld", hd,
                   (long long)in[0].dims[1]);
    if (rd <= 0 || rd > hd || rd % 2 != 0)
        return bad(err, len, REEL_E_INVALID_ARG, "rot_dim %d must be even and in (0, head_dim %d]", rd, hd);
    if (!(a->rope.theta > 0.0f) || !isfinite(a->rope.theta))
        return bad(err, len, REEL_E_INVALID_ARG, "theta must be finite and > 0, is %g", (double)a->rope.theta);
    out[0] = in[0];
    return REEL_OK;
}

/* rope_freq: rope with the table inv_freq [rot_dim / 2] f32 (ops/op.h). */
static reel_status infer_rope_freq(const reel_shape *in, int nin, const reel_op_attrs *a, reel_shape *out,
                                   char *err, size_t len)
{
    TRY(need_tok(&in[0], "x", 2, err, len));
    TRY(need_float(&in[0], "x", err, len));
    TRY(need_tok(&in[1], "positions", 1, err, len));
    TRY(need_dtype(&in[1], "positions", REEL_I32, err, len));
    TRY(need_const(&in[2], "inv_freq", 1, err, len));
    TRY(need_dtype(&in[2], "inv_freq", REEL_F32, err, len));
    int hd = a->rope_freq.head_dim, rd = a->rope_freq.rot_dim, ro = a->rope_freq.rot_offset;
    if (hd <= 0 || in[0].dims[1] % hd != 0)
        return bad(err, len, REEL_E_INVALID_ARG, "head_dim %d must be > 0 and divide x[1] = %lld", hd,
                   (long long)in[0].dims[1]);
    if (ro < 0 || ro > hd)
        return bad(err, len, REEL_E_INVALID_ARG, "rot_offset %d must be in [0, head_dim %d]", ro, hd);
    if (rd <= 0 || rd > hd - ro || rd % 2 != 0 || in[2].dims[0] != rd / 2)
        return bad(err, len, REEL_E_INVALID_ARG,
                   "inv_freq[0] = %lld must be rot_dim / 2, rot_dim %d even and in (0, head_dim %d - rot_offset %d]",
                   (long long)in[2].dims[0], rd, hd, ro);
    if (!(a->rope_freq.scale > 0.0f) || !isfinite(a->rope_freq.scale))
        return bad(err, len, REEL_E_INVALID_ARG, "scale must be finite and > 0, is %g", (double)a->rope_freq.scale);
    out[0] = in[0];
    return REEL_OK;
}

/* rmsnorm_heads: x [T, H * Dh], w [Dh]: each head's slice normalized. */
static reel_status infer_rmsnorm_heads(const reel_shape *in, int nin, const reel_op_attrs *a, reel_shape *out,
                                       char *err, size_t len)
{
    TRY(need_tok(&in[0], "x", 2, err, len));
    TRY(need_float(&in[0], "x", err, len));
    TRY(need_const(&in[1], "w", 1, err, len));
    TRY(same_dtype(&in[0], "x", &in[1], "w", err, len));
    if (in[0].dims[1] % in[1].dims[0] != 0)
        return bad(err, len, REEL_E_SHAPE, "w[0] = %lld (the head dim) must divide x[1] = %lld",
                   (long long)in[1].dims[0], (long long)in[0].dims[1]);
    if (!(a->rmsnorm.eps > 0.0f) || !isfinite(a->rmsnorm.eps))
        return bad(err, len, REEL_E_INVALID_ARG, "eps must be finite and > 0, is %g", (double)a->rmsnorm.eps);
    out[0] = in[0];
    return REEL_OK;
}

static reel_status infer_softmax(const reel_shape *in, int nin, const reel_op_attrs *a, reel_shape *out,
                                 char *err, size_t len)
{
    TRY(need_tok(&in[0], "x", 2, err, len));
    TRY(need_float(&in[0], "x", err, len));
    out[0] = in[0];
    return REEL_OK;
}

static reel_status infer_argmax(const reel_shape *in, int nin, const reel_op_attrs *a, reel_shape *out,
                                char *err, size_t len)
{
    TRY(need_tok(&in[0], "x", 2, err, len));
    TRY(need_float(&in[0], "x", err, len));
    set_tok(&out[0], REEL_I32, 1, 0, 0);
    return REEL_OK;
}

/* sample: logits [T, V] float (V <= REEL_SAMPLE_MAX_VOCAB), params [T, 4]
 * f32, rng [T, 4] i32 -> tokens [T] i32 (ops/sample.h). */
static reel_status infer_sample(const reel_shape *in, int nin, const reel_op_attrs *a, reel_shape *out,
                                char *err, size_t len)
{
    TRY(need_tok(&in[0], "logits", 2, err, len));
    TRY(need_float(&in[0], "logits", err, len));
    if (in[0].dims[1] < 1 || in[0].dims[1] > REEL_SAMPLE_MAX_VOCAB)
        return bad(err, len, REEL_E_SHAPE, "logits[1] = %lld (the vocabulary) must be in 1..%d",
                   (long long)in[0].dims[1], REEL_SAMPLE_MAX_VOCAB);
    TRY(need_tok(&in[1], "params", 2, err, len));
    TRY(need_dtype(&in[1], "params", REEL_F32, err, len));
    if (in[1].dims[1] != REEL_SAMPLE_PARAMS)
        return bad(err, len, REEL_E_SHAPE, "params[1] = %lld must be %d (temperature, top_p, min_p, top_k)",
                   (long long)in[1].dims[1], REEL_SAMPLE_PARAMS);
    TRY(need_tok(&in[2], "rng", 2, err, len));
    TRY(need_dtype(&in[2], "rng", REEL_I32, err, len));
    if (in[2].dims[1] != REEL_SAMPLE_RNG)
        return bad(err, len, REEL_E_SHAPE, "rng[1] = %lld must be %d (seed low, seed high, counter low, counter high)",
                   (long long)in[2].dims[1], REEL_SAMPLE_RNG);
    set_tok(&out[0], REEL_I32, 1, 0, 0);
    return REEL_OK;
}

static reel_status check_attn_params(const reel_attn_params *p, char *err, size_t len)
{
    if (p->num_heads <= 0 || p->num_kv_heads <= 0 || p->head_dim <= 0 || p->block_size <= 0)
        return bad(err, len, REEL_E_INVALID_ARG,
                   "num_heads %d, num_kv_heads %d, head_dim %d and block_size %d must all be > 0", p->num_heads,
                   p->num_kv_heads, p->head_dim, p->block_size);
    if (p->num_heads % p->num_kv_heads != 0)
        return bad(err, len, REEL_E_INVALID_ARG, "num_kv_heads %d must divide num_heads %d", p->num_kv_heads,
                   p->num_heads);
    if (!isfinite(p->scale) || p->scale < 0.0f)
        return bad(err, len, REEL_E_INVALID_ARG, "scale must be finite and >= 0 (0: 1/sqrt(head_dim)), is %g",
                   (double)p->scale);
    return REEL_OK;
}

static reel_status check_cache(const reel_shape *c, const char *role, const reel_shape *q,
                               const reel_attn_params *p, char *err, size_t len)
{
    char b[64];
    TRY(need_const(c, role, 4, err, len));
    TRY(same_dtype(q, "q", c, role, err, len));
    if (c->dims[1] != p->block_size || c->dims[2] != p->num_kv_heads || c->dims[3] != p->head_dim)
        return bad(err, len, REEL_E_SHAPE, "%s must be [num_blocks,%d,%d,%d] (block_size, num_kv_heads, head_dim), is %s",
                   role, p->block_size, p->num_kv_heads, p->head_dim, reel_shape_format(c, b, sizeof b));
    return REEL_OK;
}

/* The layout attributes' own consistency (the validated subset is
 * parallel/'s, at compile): ranks >= 0, a DCP rank inside its group and an
 * interleave >= 1 (the kernels divide by it). */
static reel_status check_attn_layout(const reel_attn_layout *l, char *err, size_t len)
{
    if (l->dcp < 0 || l->cp < 0)
        return bad(err, len, REEL_E_INVALID_ARG, "dcp %d and cp %d must be >= 0", l->dcp, l->cp);
    if (l->dcp >= 1 && (l->dcp_rank < 0 || l->dcp_rank >= l->dcp || l->interleave < 1))
        return bad(err, len, REEL_E_INVALID_ARG, "dcp rank %d must be in 0..%d and interleave %d >= 1", l->dcp_rank,
                   l->dcp - 1, l->interleave);
    return REEL_OK;
}

static reel_status infer_paged_attention(const reel_shape *in, int nin, const reel_op_attrs *a, reel_shape *out,
                                         char *err, size_t len)
{
    const reel_attn_params *p = &a->attn.p;
    const reel_attn_layout *lay = &a->attn.lay;
    TRY(check_attn_params(p, err, len));
    TRY(check_attn_layout(lay, err, len));
    TRY(need_tok(&in[0], "q", 2, err, len));
    TRY(need_float(&in[0], "q", err, len));
    int64_t qw = (int64_t)p->num_heads * p->head_dim, kw = (int64_t)p->num_kv_heads * p->head_dim;
    int64_t gathered = lay->cp >= 1 ? lay->cp : 1; /* CP: every rank's rows side by side */
    if (in[0].dims[1] != qw)
        return bad(err, len, REEL_E_SHAPE, "q[1] = %lld must be num_heads*head_dim = %lld", (long long)in[0].dims[1],
                   (long long)qw);
    static const char *const kv[2] = { "k", "v" };
    for (int i = 1; i <= 2; i++) {
        TRY(need_tok(&in[i], kv[i - 1], 2, err, len));
        TRY(same_dtype(&in[0], "q", &in[i], kv[i - 1], err, len));
        if (in[i].dims[1] != gathered * kw)
            return bad(err, len, REEL_E_SHAPE, "%s[1] = %lld must be %snum_kv_heads*head_dim = %lld", kv[i - 1],
                       (long long)in[i].dims[1], lay->cp >= 1 ? "cp * " : "", (long long)(gathered * kw));
    }
    TRY(check_cache(&in[3], "k_cache", &in[0], p, err, len));
    TRY(check_cache(&in[4], "v_cache", &in[0], p, err, len));
    if (in[3].dims[0] != in[4].dims[0])
        return bad(err, len, REEL_E_SHAPE, "k_cache has %lld blocks, v_cache %lld", (long long)in[3].dims[0],
                   (long long)in[4].dims[0]);
    bool has5 = nin > 5 && in[5].ndim != 0;
    int rd = a->attn.rope_rot_dim;
    /* in[5] and out[2] are the fused rope's or a layout's (ops/op.h) */
    if (rd > 0 && reel_attn_has_layout(lay))
        return bad(err, len, REEL_E_INTERNAL, "the fused rope and a layout across ranks exclude each other");
    if (rd <= 0 && has5 != (lay->cp >= 1))
        return bad(err, len, REEL_E_INVALID_ARG, "kv_slots is %s, and cp is %d: CP (cp >= 1) takes it, nothing else",
                   has5 ? "given" : "absent", lay->cp);
    if (rd > 0 && !has5)
        return bad(err, len, REEL_E_INTERNAL, "rope_rot_dim %d disagrees with the positions operand", rd);
    out[2] = out[3] = (reel_shape){ 0 }; /* absent unless set below (the node has fewer outputs) */
    if (lay->cp >= 1) {
        TRY(need_tok(&in[5], "kv_slots", 2, err, len));
        TRY(need_dtype(&in[5], "kv_slots", REEL_I32, err, len));
        if (in[5].dims[1] != lay->cp)
            return bad(err, len, REEL_E_SHAPE, "kv_slots[1] = %lld must be cp = %d", (long long)in[5].dims[1], lay->cp);
    }
    if (rd > 0) {
        TRY(need_tok(&in[5], "positions", 1, err, len));
        TRY(need_dtype(&in[5], "positions", REEL_I32, err, len));
        if (rd > p->head_dim || rd % 2 != 0)
            return bad(err, len, REEL_E_INVALID_ARG, "rope_rot_dim %d must be even and in (0, head_dim %d]", rd,
                       p->head_dim);
        if (!(a->attn.rope_theta > 0.0f) || !isfinite(a->attn.rope_theta))
            return bad(err, len, REEL_E_INVALID_ARG, "rope_theta must be finite and > 0, is %g",
                       (double)a->attn.rope_theta);
        set_tok(&out[2], in[0].dtype, 2, qw, 0);
        set_tok(&out[3], in[0].dtype, 2, kw, 0);
    }
    set_tok(&out[0], in[0].dtype, 2, qw, 0);
    out[1] = (reel_shape){ .dtype = REEL_F32, .ndim = 2, .tokens = false,
                           .dims = { REEL_ATTN_SPLIT_SLOTS, qw + p->num_heads, 0, 0 } };
    if (lay->lse)
        set_tok(&out[2], REEL_F32, 2, p->num_heads, 0);
    return REEL_OK;
}

static reel_status infer_topk(const reel_shape *in, int nin, const reel_op_attrs *a, reel_shape *out,
                              char *err, size_t len)
{
    TRY(need_tok(&in[0], "scores", 2, err, len));
    TRY(need_dtype(&in[0], "scores", REEL_F32, err, len));
    TRY(need_tok(&in[1], "lengths", 1, err, len));
    TRY(need_dtype(&in[1], "lengths", REEL_I32, err, len));
    if (a->topk.k <= 0)
        return bad(err, len, REEL_E_INVALID_ARG, "k must be > 0, is %d", a->topk.k);
    bool has = nin > 2 && in[2].ndim != 0;
    if (has != a->topk.has_page_table)
        return bad(err, len, REEL_E_INTERNAL, "has_page_table disagrees with the page_table operand");
    if (has) {
        TRY(need_tok(&in[2], "page_table", 2, err, len));
        TRY(need_dtype(&in[2], "page_table", REEL_I32, err, len));
        if (a->topk.page_size <= 0)
            return bad(err, len, REEL_E_INVALID_ARG, "page_size must be > 0 with a page table, is %d",
                       a->topk.page_size);
        /* Every index i < N reads page_table[i / page_size]: the table must
         * cover N. Compared as pages (ceil(N / page_size)), so that a wide
         * table of large pages cannot overflow the product. */
        int64_t need = (in[0].dims[1] + a->topk.page_size - 1) / a->topk.page_size;
        if (in[2].dims[1] < need)
            return bad(err, len, REEL_E_SHAPE,
                       "page_table of %lld pages of %d covers %lld positions, scores have %lld (%lld pages)",
                       (long long)in[2].dims[1], a->topk.page_size, (long long)(in[2].dims[1] * a->topk.page_size),
                       (long long)in[0].dims[1], (long long)need);
    }
    set_tok(&out[0], REEL_I32, 2, a->topk.k, 0);
    return REEL_OK;
}

/* ---- mixture of experts (ops/op.h) ---- */

static reel_status moe_ek(const reel_op_attrs *a, char *err, size_t len)
{
    int e = a->moe.num_experts, k = a->moe.top_k;
    if (e < 1 || e > REEL_MOE_MAX_EXPERTS)
        return bad(err, len, REEL_E_INVALID_ARG, "num_experts %d outside 1..%d", e, REEL_MOE_MAX_EXPERTS);
    if (k < 1 || k > e || k > REEL_MOE_MAX_TOPK)
        return bad(err, len, REEL_E_INVALID_ARG, "top_k %d outside 1..%d (num_experts %d, at most %d)", k,
                   e < REEL_MOE_MAX_TOPK ? e : REEL_MOE_MAX_TOPK, e, REEL_MOE_MAX_TOPK);
    return REEL_OK;
}

/* A [T, K] pair operand of the op's K. */
static reel_status need_pairs(const reel_shape *s, const char *role, reel_dtype t, int k, char *err, size_t len)
{
    TRY(need_tok(s, role, 2, err, len));
    TRY(need_dtype(s, role, t, err, len));
    if (s->dims[1] != k)
        return bad(err, len, REEL_E_SHAPE, "%s must be [T,%d] (top_k), has %lld columns", role, k,
                   (long long)s->dims[1]);
    return REEL_OK;
}

static reel_status need_offsets(const reel_shape *s, int e, char *err, size_t len)
{
    TRY(need_const(s, "offsets", 1, err, len));
    TRY(need_dtype(s, "offsets", REEL_I32, err, len));
    if (s->dims[0] != (int64_t)e + 1)
        return bad(err, len, REEL_E_SHAPE, "offsets must be [%d] (num_experts + 1), is [%lld]", e + 1,
                   (long long)s->dims[0]);
    return REEL_OK;
}

static reel_status infer_moe_route(const reel_shape *in, int nin, const reel_op_attrs *a, reel_shape *out,
                                   char *err, size_t len)
{
    (void)nin;
    TRY(moe_ek(a, err, len));
    int e = a->moe.num_experts, k = a->moe.top_k;
    TRY(need_tok(&in[0], "logits", 2, err, len));
    TRY(need_float(&in[0], "logits", err, len));
    if (in[0].dims[1] != e)
        return bad(err, len, REEL_E_SHAPE, "logits must have num_experts (%d) columns, has %lld", e,
                   (long long)in[0].dims[1]);
    if (a->moe.scoring != REEL_MOE_SOFTMAX && a->moe.scoring != REEL_MOE_SIGMOID)
        return bad(err, len, REEL_E_INVALID_ARG, "scoring %d is neither REEL_MOE_SOFTMAX (0) nor REEL_MOE_SIGMOID (1)",
                   a->moe.scoring);
    if (in[1].ndim != 0) {
        if (a->moe.scoring != REEL_MOE_SIGMOID)
            return bad(err, len, REEL_E_INVALID_ARG, "a choice bias is only defined with REEL_MOE_SIGMOID scoring");
        TRY(need_const(&in[1], "bias", 1, err, len));
        TRY(need_dtype(&in[1], "bias", REEL_F32, err, len));
        if (in[1].dims[0] != e)
            return bad(err, len, REEL_E_SHAPE, "bias must be [%d] (num_experts), is [%lld]", e,
                       (long long)in[1].dims[0]);
    }
    int ng = a->moe.n_group, tg = a->moe.topk_group;
    if (ng > 1) {
        if (e % ng != 0)
            return bad(err, len, REEL_E_INVALID_ARG, "n_group %d does not divide num_experts %d", ng, e);
        if (e / ng < 2)
            return bad(err, len, REEL_E_INVALID_ARG,
                       "n_group %d leaves groups of %d expert(s) (num_experts %d): a group is ranked by its top 2",
                       ng, e / ng, e);
        if (tg < 1 || tg > ng)
            return bad(err, len, REEL_E_INVALID_ARG, "topk_group %d outside 1..n_group (%d)", tg, ng);
        if (k > tg * (e / ng))
            return bad(err, len, REEL_E_INVALID_ARG, "top_k %d exceeds the %d experts of topk_group (%d) groups", k,
                       tg * (e / ng), tg);
    } else if (ng < 0 || tg < 0) {
        return bad(err, len, REEL_E_INVALID_ARG, "n_group %d and topk_group %d must not be negative", ng, tg);
    }
    if (!(a->moe.routed_scaling > 0.0f) || !isfinite(a->moe.routed_scaling))
        return bad(err, len, REEL_E_INVALID_ARG, "routed_scaling must be a positive finite number, is %g",
                   (double)a->moe.routed_scaling);
    set_tok(&out[0], REEL_I32, 2, k, 0);
    set_tok(&out[1], REEL_F32, 2, k, 0);
    return REEL_OK;
}

static reel_status infer_moe_align(const reel_shape *in, int nin, const reel_op_attrs *a, reel_shape *out,
                                   char *err, size_t len)
{
    (void)nin;
    TRY(moe_ek(a, err, len));
    TRY(need_pairs(&in[0], "ids", REEL_I32, a->moe.top_k, err, len));
    set_tok(&out[0], REEL_I32, 2, a->moe.top_k, 0);
    set_tok(&out[1], REEL_I32, 2, a->moe.top_k, 0);
    out[2] = (reel_shape){ .dtype = REEL_I32, .ndim = 1, .tokens = false, .dims = { a->moe.num_experts + 1 } };
    return REEL_OK;
}

/* Expert weights [E * rows_per, cols] of x's dtype. */
static reel_status need_experts(const reel_shape *w, const reel_shape *x, int e, const char *what, int64_t *per,
                                int64_t cols, char *err, size_t len)
{
    TRY(need_const(w, "w", 2, err, len));
    TRY(same_dtype(x, "x", w, "w", err, len));
    if (w->dims[0] % e != 0 || w->dims[0] / e < 1)
        return bad(err, len, REEL_E_SHAPE, "w must stack num_experts (%d) %s blocks along dim 0, has %lld rows", e,
                   what, (long long)w->dims[0]);
    if (w->dims[1] != cols)
        return bad(err, len, REEL_E_SHAPE, "w must have %lld columns, has %lld", (long long)cols,
                   (long long)w->dims[1]);
    *per = w->dims[0] / e;
    return REEL_OK;
}

static reel_status infer_moe_gate_up(const reel_shape *in, int nin, const reel_op_attrs *a, reel_shape *out,
                                     char *err, size_t len)
{
    (void)nin;
    TRY(moe_ek(a, err, len));
    int e = a->moe.num_experts, k = a->moe.top_k;
    TRY(need_tok(&in[0], "x", 2, err, len));
    TRY(need_float(&in[0], "x", err, len));
    TRY(need_pairs(&in[1], "order", REEL_I32, k, err, len));
    TRY(need_offsets(&in[2], e, err, len));
    int64_t per = 0;
    TRY(need_experts(&in[3], &in[0], e, "gate+up", &per, in[0].dims[1], err, len));
    if (per % 2 != 0)
        return bad(err, len, REEL_E_SHAPE, "w's blocks of %lld rows do not split into gate and up halves",
                   (long long)per);
    set_tok(&out[0], in[0].dtype, 3, k, per / 2);
    return REEL_OK;
}

static reel_status infer_moe_down(const reel_shape *in, int nin, const reel_op_attrs *a, reel_shape *out,
                                  char *err, size_t len)
{
    (void)nin;
    TRY(moe_ek(a, err, len));
    int e = a->moe.num_experts, k = a->moe.top_k;
    TRY(need_tok(&in[0], "act", 3, err, len));
    TRY(need_float(&in[0], "act", err, len));
    if (in[0].dims[1] != k)
        return bad(err, len, REEL_E_SHAPE, "act must be [T,%d,F] (top_k), is [T,%lld,%lld]", k,
                   (long long)in[0].dims[1], (long long)in[0].dims[2]);
    TRY(need_offsets(&in[1], e, err, len));
    int64_t per = 0;
    TRY(need_experts(&in[2], &in[0], e, "down", &per, in[0].dims[2], err, len));
    set_tok(&out[0], in[0].dtype, 3, k, per);
    return REEL_OK;
}

static reel_status infer_moe_combine(const reel_shape *in, int nin, const reel_op_attrs *a, reel_shape *out,
                                     char *err, size_t len)
{
    (void)nin;
    TRY(moe_ek(a, err, len));
    int k = a->moe.top_k;
    TRY(need_tok(&in[0], "ys", 3, err, len));
    TRY(need_float(&in[0], "ys", err, len));
    if (in[0].dims[1] != k)
        return bad(err, len, REEL_E_SHAPE, "ys must be [T,%d,H] (top_k), is [T,%lld,%lld]", k,
                   (long long)in[0].dims[1], (long long)in[0].dims[2]);
    TRY(need_pairs(&in[1], "where", REEL_I32, k, err, len));
    TRY(need_pairs(&in[2], "weights", REEL_F32, k, err, len));
    set_tok(&out[0], in[0].dtype, 2, in[0].dims[2], 0);
    return REEL_OK;
}

static reel_status infer_lse_combine(const reel_shape *in, int nin, const reel_op_attrs *a, reel_shape *out,
                                     char *err, size_t len)
{
    int h = a->lse.num_heads;
    bool has_lses = nin > 1 && in[1].ndim != 0;
    TRY(need_tok(&in[0], "outs", 3, err, len));
    TRY(need_float(&in[0], "outs", err, len));
    if (a->lse.packed) {
        /* [T, P, H*Dh + H] float32: each partial's outputs, then its lses. */
        if (has_lses)
            return bad(err, len, REEL_E_INVALID_ARG, "a packed combine takes no lses operand");
        TRY(need_dtype(&in[0], "outs", REEL_F32, err, len));
        if (!is_float(a->lse.out_dtype))
            return bad(err, len, REEL_E_DTYPE, "the result's dtype must be f32, f16 or bf16");
        if (h <= 0 || in[0].dims[2] % h != 0 || in[0].dims[2] / h < 2)
            return bad(err, len, REEL_E_INVALID_ARG,
                       "num_heads %d must be > 0 and outs[2] = %lld must be num_heads*(head_dim + 1)", h,
                       (long long)in[0].dims[2]);
        set_tok(&out[0], a->lse.out_dtype, 2, in[0].dims[2] - h, 0);
        set_tok(&out[1], REEL_F32, 2, h, 0);
        return REEL_OK;
    }
    if (!has_lses)
        return bad(err, len, REEL_E_INVALID_ARG, "lses is absent");
    TRY(need_tok(&in[1], "lses", 3, err, len));
    TRY(need_dtype(&in[1], "lses", REEL_F32, err, len));
    if (h <= 0 || in[0].dims[2] % h != 0)
        return bad(err, len, REEL_E_INVALID_ARG, "num_heads %d must be > 0 and divide outs[2] = %lld", h,
                   (long long)in[0].dims[2]);
    if (in[1].dims[1] != in[0].dims[1] || in[1].dims[2] != h)
        return bad(err, len, REEL_E_SHAPE, "lses must be [T,%lld,%d] (partials, num_heads)", (long long)in[0].dims[1],
                   h);
    set_tok(&out[0], in[0].dtype, 2, in[0].dims[2], 0);
    set_tok(&out[1], REEL_F32, 2, h, 0);
    return REEL_OK;
}

/* The DCP group of lse_rescale and lse_pack: H heads over N ranks. */
static reel_status check_dcp_group(const reel_op_attrs *a, const reel_shape *o, char *err, size_t len)
{
    int h = a->dcp.num_heads, n = a->dcp.nranks;
    TRY(need_tok(o, "out", 2, err, len));
    TRY(need_float(o, "out", err, len));
    if (h <= 0 || n < 1 || h % n != 0 || a->dcp.rank < 0 || a->dcp.rank >= n)
        return bad(err, len, REEL_E_INVALID_ARG, "num_heads %d must be a multiple of nranks %d >= 1, rank %d in 0..%d",
                   h, n, a->dcp.rank, n - 1);
    if (o->dims[1] % h != 0)
        return bad(err, len, REEL_E_SHAPE, "out[1] = %lld is not a multiple of num_heads %d", (long long)o->dims[1], h);
    return REEL_OK;
}

/* out [T, H*Dh] this rank's partial, lses [T, N*H] every rank's lse (rank
 * major) -> out weighted by exp(lse_rank - lse_all) [T, H*Dh], and the
 * combined lse of this rank's heads [T, H/N]. */
static reel_status infer_lse_rescale(const reel_shape *in, int nin, const reel_op_attrs *a, reel_shape *out,
                                     char *err, size_t len)
{
    TRY(check_dcp_group(a, &in[0], err, len));
    TRY(need_tok(&in[1], "lses", 2, err, len));
    TRY(need_dtype(&in[1], "lses", REEL_F32, err, len));
    int64_t want = (int64_t)a->dcp.nranks * a->dcp.num_heads;
    if (in[1].dims[1] != want)
        return bad(err, len, REEL_E_SHAPE, "lses[1] = %lld must be nranks*num_heads = %lld", (long long)in[1].dims[1],
                   (long long)want);
    out[0] = in[0];
    set_tok(&out[1], REEL_F32, 2, a->dcp.num_heads / a->dcp.nranks, 0);
    return REEL_OK;
}

/* out [T, H*Dh], lse [T, H] -> [T, N, (H/N)*Dh + H/N] float32: chunk q holds
 * the outputs of rank q's heads, then their lses. */
static reel_status infer_lse_pack(const reel_shape *in, int nin, const reel_op_attrs *a, reel_shape *out,
                                  char *err, size_t len)
{
    TRY(check_dcp_group(a, &in[0], err, len));
    TRY(need_tok(&in[1], "lse", 2, err, len));
    TRY(need_dtype(&in[1], "lse", REEL_F32, err, len));
    int h = a->dcp.num_heads, n = a->dcp.nranks;
    if (in[1].dims[1] != h)
        return bad(err, len, REEL_E_SHAPE, "lse[1] = %lld must be num_heads = %d", (long long)in[1].dims[1], h);
    set_tok(&out[0], REEL_F32, 3, n, in[0].dims[1] / n + h / n);
    return REEL_OK;
}

/* ---- collectives -------------------------------------------------------- */

static reel_status need_comm_dtype(const reel_shape *s, const char *role, char *err, size_t len)
{
    if (!is_float(s->dtype) && s->dtype != REEL_I32)
        return bad(err, len, REEL_E_DTYPE, "%s must be f32, f16, bf16 or i32, is %s", role,
                   reel_dtype_name(s->dtype));
    return REEL_OK;
}

static reel_status infer_all_reduce(const reel_shape *in, int nin, const reel_op_attrs *a, reel_shape *out,
                                    char *err, size_t len)
{
    TRY(need_comm_dtype(&in[0], "x", err, len));
    out[0] = in[0];
    return REEL_OK;
}

/* The axis of a chunked collective and the group size: the token dim is
 * never chunked (every rank has its own rows); with split, the axis must
 * hold nranks equal chunks. */
static reel_status check_axis(const reel_shape *x, const reel_op_attrs *a, bool split, char *err, size_t len)
{
    char b[64];
    int ax = a->coll.axis, n = a->coll.nranks;
    TRY(need_comm_dtype(x, "x", err, len));
    if (n < 1)
        return bad(err, len, REEL_E_INVALID_ARG, "nranks %d must be >= 1", n);
    if (ax < 0 || ax >= x->ndim)
        return bad(err, len, REEL_E_INVALID_ARG, "axis %d is outside x's dims 0..%d (x is %s)", ax, x->ndim - 1,
                   reel_shape_format(x, b, sizeof b));
    if (ax == 0 && x->tokens)
        return bad(err, len, REEL_E_INVALID_ARG, "axis 0 is the token dim, which stays per rank (x is %s)",
                   reel_shape_format(x, b, sizeof b));
    if (split && x->dims[ax] % n != 0)
        return bad(err, len, REEL_E_SHAPE, "x[%d] = %lld is not a multiple of nranks %d", ax, (long long)x->dims[ax],
                   n);
    return REEL_OK;
}

/* The second output of the chunked collectives is their staging: the
 * rank-major copy a flat collective reads or writes when the axis is not
 * the outermost dim (planned like any activation; its lifetime is the op). */
static reel_status infer_all_gather(const reel_shape *in, int nin, const reel_op_attrs *a, reel_shape *out,
                                    char *err, size_t len)
{
    TRY(check_axis(&in[0], a, false, err, len));
    out[0] = in[0];
    out[0].dims[a->coll.axis] *= a->coll.nranks;
    out[1] = out[0];
    return REEL_OK;
}

static reel_status infer_reduce_scatter(const reel_shape *in, int nin, const reel_op_attrs *a, reel_shape *out,
                                        char *err, size_t len)
{
    TRY(check_axis(&in[0], a, true, err, len));
    out[0] = in[0];
    out[0].dims[a->coll.axis] /= a->coll.nranks;
    out[1] = in[0];
    return REEL_OK;
}

static reel_status infer_all_to_all(const reel_shape *in, int nin, const reel_op_attrs *a, reel_shape *out,
                                    char *err, size_t len)
{
    TRY(check_axis(&in[0], a, true, err, len));
    out[0] = in[0];
    out[1] = in[0];
    return REEL_OK;
}

/* A send has no result; its output is a one-word marker nothing reads (a
 * node has at least one output), so the send is ordered after x. */
static reel_status infer_send(const reel_shape *in, int nin, const reel_op_attrs *a, reel_shape *out, char *err,
                              size_t len)
{
    TRY(need_comm_dtype(&in[0], "x", err, len));
    if (a->coll.peer < 0)
        return bad(err, len, REEL_E_INVALID_ARG, "peer %d must be >= 0", a->coll.peer);
    out[0] = (reel_shape){ .dtype = REEL_I32, .ndim = 1, .dims = { 1 } };
    return REEL_OK;
}

static reel_status infer_recv(const reel_shape *in, int nin, const reel_op_attrs *a, reel_shape *out, char *err,
                              size_t len)
{
    const reel_shape *s = &a->coll.shape;
    TRY(need_comm_dtype(s, "the result", err, len));
    if (a->coll.peer < 0)
        return bad(err, len, REEL_E_INVALID_ARG, "peer %d must be >= 0", a->coll.peer);
    if (s->ndim < 1 || s->ndim > REEL_MAX_DIMS)
        return bad(err, len, REEL_E_INVALID_ARG, "ndim %d is outside 1..%d", s->ndim, REEL_MAX_DIMS);
    for (int i = s->tokens ? 1 : 0; i < s->ndim; i++)
        if (s->dims[i] <= 0 || s->dims[i] > (INT64_MAX / 16) / REEL_MAX_DIMS)
            return bad(err, len, REEL_E_INVALID_ARG, "dims[%d] is %lld; dims must be > 0%s", i,
                       (long long)s->dims[i], i == 0 ? " (or REEL_DIM_TOKENS)" : "");
    out[0] = *s;
    return REEL_OK;
}

/* head_matmul (ops/op.h): per head, rows [h*S + row_off, + rows) of w,
 * times x's slice [h*Xs + x_off, + K) (or the rows' transpose). */
static reel_status infer_head_matmul(const reel_shape *in, int nin, const reel_op_attrs *a, reel_shape *out,
                                     char *err, size_t len)
{
    (void)nin;
    int h = a->hmm.heads;
    TRY(need_tok(&in[0], "x", 2, err, len));
    TRY(need_float(&in[0], "x", err, len));
    TRY(need_const(&in[1], "w", 2, err, len));
    TRY(same_dtype(&in[0], "x", &in[1], "w", err, len));
    if (h <= 0 || in[0].dims[1] % h != 0 || in[1].dims[0] % h != 0)
        return bad(err, len, REEL_E_SHAPE, "heads %d must be > 0 and divide x[1] = %lld and w[0] = %lld", h,
                   (long long)in[0].dims[1], (long long)in[1].dims[0]);
    int64_t xs = in[0].dims[1] / h, S = in[1].dims[0] / h, C = in[1].dims[1];
    if (a->hmm.row_off < 0 || a->hmm.rows <= 0 || a->hmm.row_off + (int64_t)a->hmm.rows > S)
        return bad(err, len, REEL_E_SHAPE, "rows [%d, %d + %d) must lie inside each head's %lld rows of w", a->hmm.row_off,
                   a->hmm.row_off, a->hmm.rows, (long long)S);
    int64_t K = a->hmm.transposed ? a->hmm.rows : C, N = a->hmm.transposed ? C : a->hmm.rows;
    if (a->hmm.x_off < 0 || a->hmm.x_off + K > xs)
        return bad(err, len, REEL_E_SHAPE, "x's slice [%d, %d + %lld) must lie inside each head's %lld columns of x",
                   a->hmm.x_off, a->hmm.x_off, (long long)K, (long long)xs);
    set_tok(&out[0], in[0].dtype, 2, (int64_t)h * N, 0);
    return REEL_OK;
}

/* mla_attention (ops/op.h). */
static reel_status infer_mla_attention(const reel_shape *in, int nin, const reel_op_attrs *a, reel_shape *out,
                                       char *err, size_t len)
{
    (void)nin;
    int h = a->mla.num_heads, L = a->mla.latent_dim, R = a->mla.rope_dim, bs = a->mla.block_size;
    const reel_attn_layout *lay = &a->mla.lay;
    if (h <= 0 || L <= 0 || R < 0 || bs <= 0)
        return bad(err, len, REEL_E_INVALID_ARG,
                   "num_heads %d, latent_dim %d and block_size %d must be > 0, rope_dim %d >= 0", h, L, bs, R);
    if (!(a->mla.scale > 0.0f) || !isfinite(a->mla.scale))
        return bad(err, len, REEL_E_INVALID_ARG, "scale must be finite and > 0, is %g", (double)a->mla.scale);
    TRY(check_attn_layout(lay, err, len));
    if (lay->cp != 0)
        return bad(err, len, REEL_E_UNSUPPORTED, "CP (cp %d) is not built for mla_attention", lay->cp);
    TRY(need_tok(&in[0], "q_lat", 2, err, len));
    TRY(need_float(&in[0], "q_lat", err, len));
    if (in[0].dims[1] != (int64_t)h * L)
        return bad(err, len, REEL_E_SHAPE, "q_lat[1] = %lld must be num_heads*latent_dim = %lld",
                   (long long)in[0].dims[1], (long long)h * L);
    TRY(need_tok(&in[1], "q", 2, err, len));
    TRY(same_dtype(&in[0], "q_lat", &in[1], "q", err, len));
    if (in[1].dims[1] % h != 0 || in[1].dims[1] / h < R)
        return bad(err, len, REEL_E_SHAPE, "q[1] = %lld must be num_heads (%d) heads of at least rope_dim %d",
                   (long long)in[1].dims[1], h, R);
    TRY(need_tok(&in[2], "c", 2, err, len));
    TRY(same_dtype(&in[0], "q_lat", &in[2], "c", err, len));
    if (in[2].dims[1] != L)
        return bad(err, len, REEL_E_SHAPE, "c[1] = %lld must be latent_dim %d", (long long)in[2].dims[1], L);
    TRY(need_tok(&in[3], "k_pe", 2, err, len));
    TRY(same_dtype(&in[0], "q_lat", &in[3], "k_pe", err, len));
    if (in[3].dims[1] != R)
        return bad(err, len, REEL_E_SHAPE, "k_pe[1] = %lld must be rope_dim %d", (long long)in[3].dims[1], R);
    char b[64];
    TRY(need_const(&in[4], "cache", 3, err, len));
    TRY(same_dtype(&in[0], "q_lat", &in[4], "cache", err, len));
    if (in[4].dims[1] != bs || in[4].dims[2] != (int64_t)L + R)
        return bad(err, len, REEL_E_SHAPE, "cache must be [num_blocks,%d,%d] (block_size, latent_dim + rope_dim), is %s",
                   bs, L + R, reel_shape_format(&in[4], b, sizeof b));
    if (nin > 5 && in[5].ndim != 0) { /* sparse: the slots each token attends */
        TRY(need_tok(&in[5], "slots", 2, err, len));
        TRY(need_dtype(&in[5], "slots", REEL_I32, err, len));
        if (in[5].dims[1] < 1)
            return bad(err, len, REEL_E_SHAPE, "slots must have at least one column");
        if (reel_attn_has_layout(lay))
            return bad(err, len, REEL_E_UNSUPPORTED, "sparse mla_attention (slots) with a layout across ranks is not "
                                                      "built");
    }
    set_tok(&out[0], in[0].dtype, 2, (int64_t)h * L, 0);
    out[1] = (reel_shape){ .dtype = REEL_F32, .ndim = 2, .tokens = false,
                           .dims = { REEL_ATTN_SPLIT_SLOTS, (int64_t)h * L + h, 0, 0 } };
    out[2] = (reel_shape){ 0 };
    if (lay->lse)
        set_tok(&out[2], REEL_F32, 2, h, 0);
    return REEL_OK;
}

/* In-place reuse is not a property of the op kind: each kernel declares it
 * (reel_op_impl.inplace_ok). */
static const reel_op_schema schemas[REEL_OP_COUNT] = {
    [REEL_OP_EMBEDDING] = { "embedding", 2, 1, infer_embedding, { "table", "ids" } },
    [REEL_OP_MATMUL] = { "matmul", 2, 1, infer_matmul, { "x", "w" } },
    [REEL_OP_ADD] = { "add", 2, 1, infer_binary, { "a", "b" } },
    [REEL_OP_MUL] = { "mul", 2, 1, infer_binary, { "a", "b" } },
    [REEL_OP_RMSNORM] = { "rmsnorm", 2, 1, infer_rmsnorm, { "x", "w" } },
    [REEL_OP_SILU_AND_MUL] = { "silu_and_mul", 1, 1, infer_silu_and_mul, { "x" } },
    [REEL_OP_ROPE] = { "rope", 2, 1, infer_rope, { "x", "positions" } },
    [REEL_OP_SOFTMAX] = { "softmax", 1, 1, infer_softmax, { "x" } },
    [REEL_OP_ARGMAX] = { "argmax", 1, 1, infer_argmax, { "x" } },
    /* in[5]: kv_slots (CP) or, in a node the rope fusion made, the rope's
     * positions; outputs past the workspace: the lse of a layout, or the
     * fused rope's rotated q and k (ops/op.h). */
    [REEL_OP_PAGED_ATTENTION] = { "paged_attention", 6, 4, infer_paged_attention,
                                  { "q", "k", "v", "k_cache", "v_cache", "kv_slots" } },
    [REEL_OP_TOPK] = { "topk", 3, 1, infer_topk, { "scores", "lengths", "page_table" } },
    [REEL_OP_LSE_COMBINE] = { "lse_combine", 2, 2, infer_lse_combine, { "outs", "lses" } },
    [REEL_OP_ALL_REDUCE] = { "all_reduce", 1, 1, infer_all_reduce, { "x" } },
    [REEL_OP_ALL_GATHER] = { "all_gather", 1, 2, infer_all_gather, { "x" } },
    [REEL_OP_REDUCE_SCATTER] = { "reduce_scatter", 1, 2, infer_reduce_scatter, { "x" } },
    [REEL_OP_ALL_TO_ALL] = { "all_to_all", 1, 2, infer_all_to_all, { "x" } },
    [REEL_OP_SEND] = { "send", 1, 1, infer_send, { "x" } },
    [REEL_OP_RECV] = { "recv", 0, 1, infer_recv, { NULL } },
    [REEL_OP_VIEW_COLS] = { "view_cols", 1, 1, infer_view_cols, { "x" } },
    [REEL_OP_ADD_RMSNORM] = { "add_rmsnorm", 3, 2, infer_add_rmsnorm, { "a", "b", "w" } },
    [REEL_OP_LSE_RESCALE] = { "lse_rescale", 2, 2, infer_lse_rescale, { "out", "lses" } },
    [REEL_OP_LSE_PACK] = { "lse_pack", 2, 1, infer_lse_pack, { "out", "lse" } },
    [REEL_OP_ROPE_FREQ] = { "rope_freq", 3, 1, infer_rope_freq, { "x", "positions", "inv_freq" } },
    [REEL_OP_RMSNORM_HEADS] = { "rmsnorm_heads", 2, 1, infer_rmsnorm_heads, { "x", "w" } },
    [REEL_OP_SAMPLE] = { "sample", 3, 1, infer_sample, { "logits", "params", "rng" } },
    [REEL_OP_MOE_ROUTE] = { "moe_route", 2, 2, infer_moe_route, { "logits", "bias" } },
    [REEL_OP_MOE_ALIGN] = { "moe_align", 1, 3, infer_moe_align, { "ids" } },
    [REEL_OP_MOE_GATE_UP] = { "moe_gate_up", 4, 1, infer_moe_gate_up, { "x", "order", "offsets", "w" } },
    [REEL_OP_MOE_DOWN] = { "moe_down", 3, 1, infer_moe_down, { "act", "offsets", "w" } },
    [REEL_OP_MOE_COMBINE] = { "moe_combine", 3, 1, infer_moe_combine, { "ys", "where", "weights" } },
    [REEL_OP_HEAD_MATMUL] = { "head_matmul", 2, 1, infer_head_matmul, { "x", "w" } },
    [REEL_OP_MLA_ATTENTION] = { "mla_attention", 6, 3, infer_mla_attention,
                                { "q_lat", "q", "c", "k_pe", "cache", "slots" } },
};

const char *reel_op_node_label(reel_op_kind k, int node, const char *out, bool quoted, char *buf, size_t len)
{
    const reel_op_schema *sc = reel_op_schema_get(k);
    const char *name = sc ? sc->name : "?";
    if (quoted)
        snprintf(buf, len, "op '%s' (node %d -> '%s')", name, node, out);
    else
        snprintf(buf, len, "%s (node %d -> '%s')", name, node, out);
    return buf;
}

const reel_op_schema *reel_op_schema_get(reel_op_kind k)
{
    if ((int)k < 0 || k >= REEL_OP_COUNT)
        return NULL;
    return &schemas[k];
}
