/* The host backend's op impls: a reference kernel per op kind (priority 0,
 * the last of its chain) and a tiled matmul ahead of it. All run on a
 * stream's worker thread through reel_host_launch, which copies the
 * reel_launch; the executor keeps the data that launch points to alive until
 * the kernel has run (for a captured graph: while it may be replayed). */
#include "ops/host/dtype.h"
#include "ops/host/host_ops.h"
#include "backend/host/host.h"

#define REEL_HOST_LAUNCHER(fn)                                                  \
    static reel_status fn##_launch(reel_backend *be, const reel_launch *l)    \
    {                                                                           \
        return reel_host_launch(be, l->stream, fn, l, sizeof *l);              \
    }

REEL_HOST_LAUNCHER(reel_host_embedding)
REEL_HOST_LAUNCHER(reel_host_matmul)
REEL_HOST_LAUNCHER(reel_host_matmul_tiled)
REEL_HOST_LAUNCHER(reel_host_add)
REEL_HOST_LAUNCHER(reel_host_mul)
REEL_HOST_LAUNCHER(reel_host_rmsnorm)
REEL_HOST_LAUNCHER(reel_host_silu_and_mul)
REEL_HOST_LAUNCHER(reel_host_rope)
REEL_HOST_LAUNCHER(reel_host_softmax)
REEL_HOST_LAUNCHER(reel_host_argmax)
REEL_HOST_LAUNCHER(reel_host_paged_attention)
REEL_HOST_LAUNCHER(reel_host_topk)
REEL_HOST_LAUNCHER(reel_host_lse_combine)
REEL_HOST_LAUNCHER(reel_host_add_rmsnorm)
REEL_HOST_LAUNCHER(reel_host_view_cols)
REEL_HOST_LAUNCHER(reel_host_lse_rescale)
REEL_HOST_LAUNCHER(reel_host_lse_pack)
REEL_HOST_LAUNCHER(reel_host_rope_freq)
REEL_HOST_LAUNCHER(reel_host_rmsnorm_heads)
REEL_HOST_LAUNCHER(reel_host_sample)
REEL_HOST_LAUNCHER(reel_host_moe_route)
REEL_HOST_LAUNCHER(reel_host_moe_align)
REEL_HOST_LAUNCHER(reel_host_moe_gate_up)
REEL_HOST_LAUNCHER(reel_host_moe_down)
REEL_HOST_LAUNCHER(reel_host_moe_combine)
REEL_HOST_LAUNCHER(reel_host_head_matmul)
REEL_HOST_LAUNCHER(reel_host_mla_attention)

static bool reel_hi_fl(const reel_shape *s) { return reel_is_float_storage(s->dtype); }
static bool reel_hi_i32(const reel_shape *s) { return s->dtype == REEL_I32; }

#define REEL_HI_ARGS                                                                      \
    const reel_shape *in, int nin, const reel_shape *out, const reel_op_attrs *a,         \
        const reel_device_caps *caps

/* Float in, float out: the elementwise and row ops. */
static bool reel_hi_use_unary(REEL_HI_ARGS) { return nin >= 1 && reel_hi_fl(&in[0]) && reel_hi_fl(&out[0]); }

static bool reel_hi_use_binary(REEL_HI_ARGS)
{
    return nin >= 2 && reel_hi_fl(&in[0]) && reel_hi_fl(&in[1]) && reel_hi_fl(&out[0]);
}

static bool reel_hi_use_embedding(REEL_HI_ARGS)
{
    return nin >= 2 && reel_hi_fl(&in[0]) && reel_hi_i32(&in[1]) && reel_hi_fl(&out[0]);
}

static bool reel_hi_use_rope(REEL_HI_ARGS)
{
    return nin >= 2 && reel_hi_fl(&in[0]) && reel_hi_i32(&in[1]) && reel_hi_fl(&out[0]) &&
           a->rope.head_dim > 0 && a->rope.rot_dim >= 0 && a->rope.rot_dim <= a->rope.head_dim;
}

static bool reel_hi_use_argmax(REEL_HI_ARGS) { return nin >= 1 && reel_hi_fl(&in[0]) && reel_hi_i32(&out[0]); }

/* The tiled matmul only pays when a tile row has columns and depth to fill. */
static bool reel_hi_use_matmul_tiled(REEL_HI_ARGS)
{
    if (!reel_hi_use_binary(in, nin, out, a, caps) || in[1].ndim != 2)
        return false;
    int64_t n = a->matmul.w_transposed ? in[1].dims[0] : in[1].dims[1];
    int64_t k = a->matmul.w_transposed ? in[1].dims[1] : in[1].dims[0];
    return n >= 16 && k >= 8;
}

/* Every layout of ops/op.h (DCP, CP, the lse output). */
static bool reel_hi_use_attention(REEL_HI_ARGS)
{
    const reel_attn_params *p = &a->attn.p;
    for (int i = 0; i < 5; i++)
        if (i >= nin || !reel_hi_fl(&in[i]))
            return false;
    if (a->attn.lay.cp >= 1 && (nin < 6 || !reel_hi_i32(&in[5])))
        return false;
    if (a->attn.rope_rot_dim > 0 && (nin < 6 || in[5].dtype != REEL_I32 || out[2].dtype != in[0].dtype ||
                                     out[3].dtype != in[1].dtype))
        return false;
    return reel_hi_fl(&out[0]) && p->num_heads > 0 && p->num_kv_heads > 0 && p->head_dim > 0 &&
           p->block_size > 0 && p->num_heads % p->num_kv_heads == 0;
}

static bool reel_hi_use_topk(REEL_HI_ARGS)
{
    bool paged = a->topk.has_page_table;
    if (nin < 2 || in[0].dtype != REEL_F32 || !reel_hi_i32(&in[1]) || !reel_hi_i32(&out[0]) || a->topk.k < 0)
        return false;
    return !paged || (nin >= 3 && reel_hi_i32(&in[2]) && a->topk.page_size > 0);
}

static bool reel_hi_use_lse(REEL_HI_ARGS)
{
    bool lses = a->lse.packed ? in[0].dtype == REEL_F32 : nin >= 2 && in[1].dtype == REEL_F32;
    return reel_hi_fl(&in[0]) && lses && reel_hi_fl(&out[0]) && out[1].dtype == REEL_F32 && a->lse.num_heads > 0;
}

static bool reel_hi_use_dcp(REEL_HI_ARGS)
{
    return nin >= 2 && reel_hi_fl(&in[0]) && in[1].dtype == REEL_F32 && a->dcp.num_heads > 0 && a->dcp.nranks > 0;
}

/* inplace: out[0] may start at in[0]'s address (every element, or row, is
 * read before the bytes it shares are written: rows run in order). */
#define REEL_HOST_REF(var, opname, kind, use, fn, inplace)                                   \
    static const reel_op_impl var = {                                                        \
        .name = "host." opname ".ref", .op = kind, .backend = REEL_BACKEND_HOST, .priority = 0, \
        .capturable = true, .fixed_context = true, .inplace_ok = inplace, .can_use = use,     \
        .launch = fn##_launch,                                                               \
    }

REEL_HOST_REF(reel_hi_embedding, "embedding", REEL_OP_EMBEDDING, reel_hi_use_embedding, reel_host_embedding, false);
REEL_HOST_REF(reel_hi_matmul, "matmul", REEL_OP_MATMUL, reel_hi_use_binary, reel_host_matmul, false);
REEL_HOST_REF(reel_hi_add, "add", REEL_OP_ADD, reel_hi_use_binary, reel_host_add, true);
REEL_HOST_REF(reel_hi_mul, "mul", REEL_OP_MUL, reel_hi_use_binary, reel_host_mul, true);
REEL_HOST_REF(reel_hi_rmsnorm, "rmsnorm", REEL_OP_RMSNORM, reel_hi_use_binary, reel_host_rmsnorm, true);
REEL_HOST_REF(reel_hi_silu, "silu_and_mul", REEL_OP_SILU_AND_MUL, reel_hi_use_unary, reel_host_silu_and_mul, true);
REEL_HOST_REF(reel_hi_rope, "rope", REEL_OP_ROPE, reel_hi_use_rope, reel_host_rope, true);
REEL_HOST_REF(reel_hi_softmax, "softmax", REEL_OP_SOFTMAX, reel_hi_use_unary, reel_host_softmax, true);
REEL_HOST_REF(reel_hi_argmax, "argmax", REEL_OP_ARGMAX, reel_hi_use_argmax, reel_host_argmax, false);
REEL_HOST_REF(reel_hi_attention, "paged_attention", REEL_OP_PAGED_ATTENTION, reel_hi_use_attention,
              reel_host_paged_attention, false);
REEL_HOST_REF(reel_hi_topk, "topk", REEL_OP_TOPK, reel_hi_use_topk, reel_host_topk, false);
REEL_HOST_REF(reel_hi_lse, "lse_combine", REEL_OP_LSE_COMBINE, reel_hi_use_lse, reel_host_lse_combine, false);
REEL_HOST_REF(reel_hi_lse_rescale, "lse_rescale", REEL_OP_LSE_RESCALE, reel_hi_use_dcp, reel_host_lse_rescale, false);
REEL_HOST_REF(reel_hi_lse_pack, "lse_pack", REEL_OP_LSE_PACK, reel_hi_use_dcp, reel_host_lse_pack, false);

static bool reel_hi_use_add_rmsnorm(REEL_HI_ARGS)
{
    return nin >= 3 && reel_hi_fl(&in[0]) && reel_hi_fl(&in[1]) && reel_hi_fl(&in[2]) && reel_hi_fl(&out[0]) &&
           reel_hi_fl(&out[1]);
}

static bool reel_hi_use_view(REEL_HI_ARGS) { return nin >= 1 && in[0].dtype == out[0].dtype; }

REEL_HOST_REF(reel_hi_add_rmsnorm, "add_rmsnorm", REEL_OP_ADD_RMSNORM, reel_hi_use_add_rmsnorm, reel_host_add_rmsnorm,
              true);
REEL_HOST_REF(reel_hi_view_cols, "view_cols", REEL_OP_VIEW_COLS, reel_hi_use_view, reel_host_view_cols, false);

/* The models layer's ops: a table of f32 inverse frequencies (in[2]); a
 * weight of the head dim. */
static bool reel_hi_use_rope_freq(REEL_HI_ARGS)
{
    return nin >= 3 && reel_hi_fl(&in[0]) && reel_hi_i32(&in[1]) && in[2].dtype == REEL_F32 && reel_hi_fl(&out[0]) &&
           a->rope_freq.head_dim > 0 && a->rope_freq.rot_dim > 0 && a->rope_freq.rot_offset >= 0 &&
           a->rope_freq.rot_dim <= a->rope_freq.head_dim - a->rope_freq.rot_offset;
}

REEL_HOST_REF(reel_hi_rope_freq, "rope_freq", REEL_OP_ROPE_FREQ, reel_hi_use_rope_freq, reel_host_rope_freq, true);
REEL_HOST_REF(reel_hi_rmsnorm_heads, "rmsnorm_heads", REEL_OP_RMSNORM_HEADS, reel_hi_use_binary, reel_host_rmsnorm_heads,
              true);

/* sample: float logits, f32 params and i32 rng of their widths, i32 tokens. */
static bool reel_hi_use_sample(REEL_HI_ARGS)
{
    return nin >= 3 && reel_hi_fl(&in[0]) && in[1].dtype == REEL_F32 && in[1].dims[1] == REEL_SAMPLE_PARAMS &&
           reel_hi_i32(&in[2]) && in[2].dims[1] == REEL_SAMPLE_RNG && reel_hi_i32(&out[0]);
}

REEL_HOST_REF(reel_hi_sample, "sample", REEL_OP_SAMPLE, reel_hi_use_sample, reel_host_sample, false);

/* The moe ops: E and K within the bounds the kernels' stack arrays hold
 * (the schema checks them too); ids, order, where and offsets i32, the
 * routing weights and the bias f32, the data float. */
static bool reel_hi_moe_ek(const reel_op_attrs *a)
{
    return a->moe.num_experts >= 1 && a->moe.num_experts <= REEL_MOE_MAX_EXPERTS && a->moe.top_k >= 1 &&
           a->moe.top_k <= a->moe.num_experts && a->moe.top_k <= REEL_MOE_MAX_TOPK;
}

static bool reel_hi_use_moe_route(REEL_HI_ARGS)
{
    const int ng = a->moe.n_group;
    const bool groups = ng <= 1 || (ng <= REEL_MOE_MAX_EXPERTS / 2 && a->moe.num_experts % ng == 0 &&
                                    a->moe.num_experts / ng >= 2 && a->moe.topk_group >= 1 &&
                                    a->moe.topk_group <= ng);
    return nin >= 2 && reel_hi_fl(&in[0]) && (in[1].ndim == 0 || in[1].dtype == REEL_F32) && reel_hi_i32(&out[0]) &&
           out[1].dtype == REEL_F32 && reel_hi_moe_ek(a) && groups;
}

static bool reel_hi_use_moe_align(REEL_HI_ARGS)
{
    return nin >= 1 && reel_hi_i32(&in[0]) && reel_hi_i32(&out[0]) && reel_hi_i32(&out[1]) && reel_hi_i32(&out[2]) &&
           reel_hi_moe_ek(a);
}

static bool reel_hi_use_moe_gate_up(REEL_HI_ARGS)
{
    return nin >= 4 && reel_hi_fl(&in[0]) && reel_hi_i32(&in[1]) && reel_hi_i32(&in[2]) && reel_hi_fl(&in[3]) &&
           reel_hi_fl(&out[0]) && reel_hi_moe_ek(a);
}

static bool reel_hi_use_moe_down(REEL_HI_ARGS)
{
    return nin >= 3 && reel_hi_fl(&in[0]) && reel_hi_i32(&in[1]) && reel_hi_fl(&in[2]) && reel_hi_fl(&out[0]) &&
           reel_hi_moe_ek(a);
}

static bool reel_hi_use_moe_combine(REEL_HI_ARGS)
{
    return nin >= 3 && reel_hi_fl(&in[0]) && reel_hi_i32(&in[1]) && in[2].dtype == REEL_F32 && reel_hi_fl(&out[0]) &&
           reel_hi_moe_ek(a);
}

REEL_HOST_REF(reel_hi_moe_route, "moe_route", REEL_OP_MOE_ROUTE, reel_hi_use_moe_route, reel_host_moe_route, false);
REEL_HOST_REF(reel_hi_moe_align, "moe_align", REEL_OP_MOE_ALIGN, reel_hi_use_moe_align, reel_host_moe_align, false);
REEL_HOST_REF(reel_hi_moe_gate_up, "moe_gate_up", REEL_OP_MOE_GATE_UP, reel_hi_use_moe_gate_up, reel_host_moe_gate_up,
              false);
REEL_HOST_REF(reel_hi_moe_down, "moe_down", REEL_OP_MOE_DOWN, reel_hi_use_moe_down, reel_host_moe_down, false);
REEL_HOST_REF(reel_hi_moe_combine, "moe_combine", REEL_OP_MOE_COMBINE, reel_hi_use_moe_combine, reel_host_moe_combine,
              false);

static bool reel_hi_use_head_matmul(REEL_HI_ARGS)
{
    return nin >= 2 && reel_hi_fl(&in[0]) && reel_hi_fl(&in[1]) && reel_hi_fl(&out[0]) && a->hmm.heads > 0;
}

/* DCP and the lse output (the schema refuses CP). */
static bool reel_hi_use_mla(REEL_HI_ARGS)
{
    for (int i = 0; i < 5; i++)
        if (i >= nin || !reel_hi_fl(&in[i]))
            return false;
    if (nin > 5 && in[5].ndim != 0 && !reel_hi_i32(&in[5]))
        return false;
    return reel_hi_fl(&out[0]) && a->mla.num_heads > 0 && a->mla.latent_dim > 0 && a->mla.block_size > 0 &&
           a->mla.lay.cp == 0;
}

REEL_HOST_REF(reel_hi_head_matmul, "head_matmul", REEL_OP_HEAD_MATMUL, reel_hi_use_head_matmul, reel_host_head_matmul,
              false);
REEL_HOST_REF(reel_hi_mla, "mla_attention", REEL_OP_MLA_ATTENTION, reel_hi_use_mla, reel_host_mla_attention, false);

/* Collectives accept every dtype the schema does (f32, f16, bf16, i32). */
static bool reel_hi_use_comm(REEL_HI_ARGS) { return true; }

#define REEL_HOST_COMM(var, opname, kind)                                                      \
    static const reel_op_impl var = {                                                          \
        .name = "host." opname ".ref", .op = kind, .backend = REEL_BACKEND_HOST, .priority = 0, \
        .capturable = true, .fixed_context = true, .can_use = reel_hi_use_comm,                 \
        .launch = reel_host_collective_launch,                                                 \
    }

REEL_HOST_COMM(reel_hi_all_reduce, "all_reduce", REEL_OP_ALL_REDUCE);
REEL_HOST_COMM(reel_hi_all_gather, "all_gather", REEL_OP_ALL_GATHER);
REEL_HOST_COMM(reel_hi_reduce_scatter, "reduce_scatter", REEL_OP_REDUCE_SCATTER);
REEL_HOST_COMM(reel_hi_all_to_all, "all_to_all", REEL_OP_ALL_TO_ALL);
REEL_HOST_COMM(reel_hi_send, "send", REEL_OP_SEND);
REEL_HOST_COMM(reel_hi_recv, "recv", REEL_OP_RECV);

static const reel_op_impl reel_hi_matmul_tiled = {
    .name = "host.matmul.tiled", .op = REEL_OP_MATMUL, .backend = REEL_BACKEND_HOST, .priority = 10,
    .capturable = true, .fixed_context = true, .can_use = reel_hi_use_matmul_tiled,
    .launch = reel_host_matmul_tiled_launch,
};

const reel_op_impl *const reel_host_impls[] = {
    &reel_hi_embedding, &reel_hi_matmul_tiled, &reel_hi_matmul, &reel_hi_add, &reel_hi_mul,
    &reel_hi_rmsnorm, &reel_hi_silu, &reel_hi_rope, &reel_hi_softmax, &reel_hi_argmax,
    &reel_hi_attention, &reel_hi_topk, &reel_hi_lse, &reel_hi_lse_rescale, &reel_hi_lse_pack,
    &reel_hi_all_reduce, &reel_hi_all_gather, &reel_hi_reduce_scatter, &reel_hi_all_to_all,
    &reel_hi_send, &reel_hi_recv, &reel_hi_add_rmsnorm, &reel_hi_view_cols,
    &reel_hi_rope_freq, &reel_hi_rmsnorm_heads,
    &reel_hi_sample,
    &reel_hi_moe_route, &reel_hi_moe_align, &reel_hi_moe_gate_up, &reel_hi_moe_down, &reel_hi_moe_combine,
    &reel_hi_head_matmul, &reel_hi_mla,
};
const int reel_host_nimpls = (int)(sizeof reel_host_impls / sizeof reel_host_impls[0]);
