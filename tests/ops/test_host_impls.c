/* The host impl table: one reference impl per op kind, last of its chain,
 * and every impl usable for the shapes the schema produces. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "tests/ops/host_ref.h"
#include "backend/ctx.h"

static const char *const op_names[REEL_OP_COUNT] = {
    "embedding", "matmul", "add", "mul", "rmsnorm", "silu_and_mul", "rope",
    "softmax", "argmax", "paged_attention", "topk", "lse_combine",
    "all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send", "recv",
    "view_cols", "add_rmsnorm",
    "lse_rescale", "lse_pack",
    "rope_freq", "rmsnorm_heads",
    [REEL_OP_SAMPLE] = "sample",
    [REEL_OP_MOE_ROUTE] = "moe_route", [REEL_OP_MOE_ALIGN] = "moe_align", [REEL_OP_MOE_GATE_UP] = "moe_gate_up",
    [REEL_OP_MOE_DOWN] = "moe_down", [REEL_OP_MOE_COMBINE] = "moe_combine",
    [REEL_OP_HEAD_MATMUL] = "head_matmul", [REEL_OP_MLA_ATTENTION] = "mla_attention",
};

Test(ops, host_impls_hold_exactly_one_lowest_priority_ref_per_op_kind)
{
    int refs[REEL_OP_COUNT] = { 0 };
    for (int i = 0; i < reel_host_nimpls; i++) {
        const reel_op_impl *im = reel_host_impls[i];
        cr_assert(im && im->name && im->can_use && im->launch, "impl %d is incomplete", i);
        cr_assert(im->op >= 0 && im->op < REEL_OP_COUNT, "%s: bad op kind", im->name);
        cr_assert_eq(im->backend, REEL_BACKEND_HOST, "%s is not a host impl", im->name);
        cr_assert(im->capturable && im->fixed_context, "%s must be capturable and honour fixed context", im->name);
        for (int j = 0; j < i; j++)
            cr_assert_str_neq(im->name, reel_host_impls[j]->name, "two impls named %s", im->name);
        char ref[64];
        snprintf(ref, sizeof ref, "host.%s.ref", op_names[im->op]);
        if (strcmp(im->name, ref) == 0) {
            refs[im->op]++;
            cr_assert_eq(im->priority, 0, "%s must have priority 0", im->name);
        }
    }
    for (int k = 0; k < REEL_OP_COUNT; k++) {
        cr_assert_eq(refs[k], 1, "op %s has %d ref impls, want 1", op_names[k], refs[k]);
        for (int i = 0; i < reel_host_nimpls; i++) {
            const reel_op_impl *im = reel_host_impls[i];
            if ((int)im->op == k && strstr(im->name, ".ref") == NULL)
                cr_assert_gt(im->priority, 0, "%s must rank above the ref of %s", im->name, op_names[k]);
        }
    }
}

/* Shapes a node of each op kind has, as the schema infers them (dims[0] of
 * token tensors: the largest bucket). */
static int node_shapes(reel_op_kind k, reel_dtype dt, reel_shape *in, reel_shape *out, reel_op_attrs *a)
{
    memset(a, 0, sizeof *a);
    reel_shape tok2 = tshape(dt, true, 2, 0, 64, 0, 0), ids = tshape(REEL_I32, true, 1, 0, 0, 0, 0);
    in[0] = tok2, out[0] = tok2;
    switch (k) {
    case REEL_OP_EMBEDDING: in[0] = tshape(dt, false, 2, 100, 64, 0, 0), in[1] = ids; return 2;
    case REEL_OP_MATMUL: in[1] = tshape(dt, false, 2, 64, 32, 0, 0), out[0] = tshape(dt, true, 2, 0, 32, 0, 0); return 2;
    case REEL_OP_ADD:
    case REEL_OP_MUL: in[1] = tshape(dt, false, 1, 64, 0, 0, 0); return 2;
    case REEL_OP_RMSNORM: a->rmsnorm.eps = 1e-6f, in[1] = tshape(dt, false, 1, 64, 0, 0, 0); return 2;
    case REEL_OP_SILU_AND_MUL: out[0] = tshape(dt, true, 2, 0, 32, 0, 0); return 1;
    case REEL_OP_ROPE: a->rope.head_dim = 16, a->rope.rot_dim = 16, a->rope.theta = 1e4f, in[1] = ids; return 2;
    case REEL_OP_ROPE_FREQ:
        a->rope_freq.head_dim = 16, a->rope_freq.rot_dim = 16, a->rope_freq.scale = 1.0f, in[1] = ids;
        in[2] = tshape(REEL_F32, false, 1, 8, 0, 0, 0);
        return 3;
    case REEL_OP_RMSNORM_HEADS: a->rmsnorm.eps = 1e-6f, in[1] = tshape(dt, false, 1, 16, 0, 0, 0); return 2;
    case REEL_OP_SOFTMAX: return 1;
    case REEL_OP_ARGMAX: out[0] = ids; return 1;
    case REEL_OP_PAGED_ATTENTION:
        a->attn.p = (reel_attn_params){ REEL_ATTN_PARAMS_HEAD, 4, 2, 16, 16, 0.0f };
        in[1] = in[2] = tshape(dt, true, 2, 0, 32, 0, 0);
        in[3] = in[4] = tshape(dt, false, 4, 8, 16, 2, 16);
        /* the split-KV workspace: SLOTS x (H*Dh + H) f32 */
        out[1] = tshape(REEL_F32, false, 2, REEL_ATTN_SPLIT_SLOTS, 4 * 16 + 4, 0, 0);
        return 5;
    case REEL_OP_TOPK:
        a->topk.k = 8, a->topk.page_size = 16, a->topk.has_page_table = true;
        in[0] = tshape(REEL_F32, true, 2, 0, 64, 0, 0), in[1] = ids, in[2] = tshape(REEL_I32, true, 2, 0, 4, 0, 0);
        out[0] = tshape(REEL_I32, true, 2, 0, 8, 0, 0);
        return 3;
    case REEL_OP_LSE_COMBINE:
        a->lse.num_heads = 4;
        in[0] = tshape(dt, true, 3, 0, 2, 64, 0), in[1] = tshape(REEL_F32, true, 3, 0, 2, 4, 0);
        out[1] = tshape(REEL_F32, true, 2, 0, 4, 0, 0);
        return 2;
    case REEL_OP_ALL_REDUCE: return 1;
    case REEL_OP_ALL_GATHER: /* 2 ranks over axis 1 */
        a->coll.axis = 1, a->coll.nranks = 2;
        out[0] = out[1] = tshape(dt, true, 2, 0, 128, 0, 0);
        return 1;
    case REEL_OP_REDUCE_SCATTER:
        a->coll.axis = 1, a->coll.nranks = 2;
        out[0] = tshape(dt, true, 2, 0, 32, 0, 0), out[1] = tok2;
        return 1;
    case REEL_OP_ALL_TO_ALL: a->coll.axis = 1, a->coll.nranks = 2, out[1] = tok2; return 1;
    case REEL_OP_SEND: a->coll.peer = 1, out[0] = tshape(REEL_I32, false, 1, 1, 0, 0, 0); return 1;
    case REEL_OP_RECV: a->coll.peer = 1, a->coll.shape = tok2; return 0;
    case REEL_OP_VIEW_COLS: a->view.col = 16, a->view.ncols = 32, out[0] = tshape(dt, true, 2, 0, 32, 0, 0); return 1;
    case REEL_OP_ADD_RMSNORM:
        a->rmsnorm.eps = 1e-6f, in[1] = tok2, in[2] = tshape(dt, false, 1, 64, 0, 0, 0), out[1] = tok2;
        return 3;
    case REEL_OP_LSE_RESCALE: /* 4 heads of 16 over 2 ranks, rank 1 */
        a->dcp.num_heads = 4, a->dcp.nranks = 2, a->dcp.rank = 1;
        in[1] = tshape(REEL_F32, true, 2, 0, 8, 0, 0), out[1] = tshape(REEL_F32, true, 2, 0, 2, 0, 0);
        return 2;
    case REEL_OP_LSE_PACK:
        a->dcp.num_heads = 4, a->dcp.nranks = 2;
        in[1] = tshape(REEL_F32, true, 2, 0, 4, 0, 0), out[0] = tshape(REEL_F32, true, 3, 0, 2, 34, 0);
        return 2;
    case REEL_OP_SAMPLE: /* params and rng: 4 columns each, whatever the logits' dtype */
        in[1] = tshape(REEL_F32, true, 2, 0, REEL_SAMPLE_PARAMS, 0, 0);
        in[2] = tshape(REEL_I32, true, 2, 0, REEL_SAMPLE_RNG, 0, 0);
        out[0] = ids;
        return 3;
    /* The moe ops: 8 experts, top 2, hidden 64, expert width 16; route with
     * no bias (softmax), the pair tensors and offsets i32. */
    case REEL_OP_MOE_ROUTE:
        a->moe.num_experts = 8, a->moe.top_k = 2, a->moe.routed_scaling = 1.0f;
        in[0] = tshape(dt, true, 2, 0, 8, 0, 0);
        out[0] = tshape(REEL_I32, true, 2, 0, 2, 0, 0), out[1] = tshape(REEL_F32, true, 2, 0, 2, 0, 0);
        return 2;
    case REEL_OP_MOE_ALIGN:
        a->moe.num_experts = 8, a->moe.top_k = 2;
        in[0] = out[0] = out[1] = tshape(REEL_I32, true, 2, 0, 2, 0, 0);
        out[2] = tshape(REEL_I32, false, 1, 9, 0, 0, 0);
        return 1;
    case REEL_OP_MOE_GATE_UP:
        a->moe.num_experts = 8, a->moe.top_k = 2;
        in[1] = tshape(REEL_I32, true, 2, 0, 2, 0, 0), in[2] = tshape(REEL_I32, false, 1, 9, 0, 0, 0);
        in[3] = tshape(dt, false, 2, 8 * 2 * 16, 64, 0, 0), out[0] = tshape(dt, true, 3, 0, 2, 16, 0);
        return 4;
    case REEL_OP_MOE_DOWN:
        a->moe.num_experts = 8, a->moe.top_k = 2;
        in[0] = tshape(dt, true, 3, 0, 2, 16, 0), in[1] = tshape(REEL_I32, false, 1, 9, 0, 0, 0);
        in[2] = tshape(dt, false, 2, 8 * 64, 16, 0, 0), out[0] = tshape(dt, true, 3, 0, 2, 64, 0);
        return 3;
    case REEL_OP_MOE_COMBINE:
        a->moe.num_experts = 8, a->moe.top_k = 2;
        in[0] = tshape(dt, true, 3, 0, 2, 64, 0), in[1] = tshape(REEL_I32, true, 2, 0, 2, 0, 0);
        in[2] = tshape(REEL_F32, true, 2, 0, 2, 0, 0);
        return 3;
    case REEL_OP_HEAD_MATMUL: /* 4 heads: x 16 a head, w 8 rows a head of 16 columns; rows 2..5, transposed */
        a->hmm.heads = 4, a->hmm.row_off = 2, a->hmm.rows = 4, a->hmm.x_off = 3, a->hmm.transposed = true;
        in[1] = tshape(dt, false, 2, 32, 16, 0, 0);
        return 2;
    case REEL_OP_MLA_ATTENTION: /* 4 heads, latent 16, rope 8, q heads of 24 */
        a->mla.num_heads = 4, a->mla.latent_dim = 16, a->mla.rope_dim = 8, a->mla.block_size = 16, a->mla.scale = 0.2f;
        in[1] = tshape(dt, true, 2, 0, 96, 0, 0), in[2] = tshape(dt, true, 2, 0, 16, 0, 0);
        in[3] = tshape(dt, true, 2, 0, 8, 0, 0), in[4] = tshape(dt, false, 3, 8, 16, 24, 0);
        out[1] = tshape(REEL_F32, false, 2, REEL_ATTN_SPLIT_SLOTS, 4 * 16 + 4, 0, 0);
        return 5;
    default: return 0;
    }
}

Test(ops, every_ref_impl_accepts_every_float_storage_dtype)
{
    reel_device_caps caps = { 0 };
    for (int k = 0; k < REEL_OP_COUNT; k++) {
        for (int di = 0; di < 3; di++) {
            reel_shape in[REEL_OP_MAX_IN] = { 0 }, out[REEL_OP_MAX_OUT] = { 0 };
            reel_op_attrs a;
            int nin = node_shapes((reel_op_kind)k, float_dtypes[di], in, out, &a);
            for (int i = 0; i < REEL_OP_MAX_IN; i++) /* the largest bucket */
                if (in[i].tokens)
                    in[i].dims[0] = 64;
            for (int i = 0; i < REEL_OP_MAX_OUT; i++)
                if (out[i].tokens)
                    out[i].dims[0] = 64;
            bool found = false;
            for (int i = 0; i < reel_host_nimpls; i++) {
                const reel_op_impl *im = reel_host_impls[i];
                if ((int)im->op == k && im->priority == 0) {
                    found = true;
                    cr_assert(im->can_use(in, nin, out, &a, &caps), "%s refuses %s", im->name,
                              dt_name(float_dtypes[di]));
                }
            }
            cr_assert(found, "no ref impl for %s", op_names[k]);
            /* An integer tensor where a float one belongs is refused
             * (collectives move i32 too: token ids between stages; moe_align
             * sorts i32 ids only). */
            if (k != REEL_OP_TOPK && k != REEL_OP_MOE_ALIGN && !reel_op_is_comm((reel_op_kind)k)) {
                reel_shape bad = in[0];
                bad.dtype = REEL_I32;
                in[0] = bad;
                for (int i = 0; i < reel_host_nimpls; i++)
                    if ((int)reel_host_impls[i]->op == k)
                        cr_assert(!reel_host_impls[i]->can_use(in, nin, out, &a, &caps), "%s accepts i32 data",
                                  reel_host_impls[i]->name);
            }
        }
    }
}

Test(ops, tiled_matmul_is_chosen_only_for_shapes_that_fill_a_tile)
{
    reel_device_caps caps = { 0 };
    const reel_op_impl *tiled = NULL;
    for (int i = 0; i < reel_host_nimpls; i++)
        if (strcmp(reel_host_impls[i]->name, "host.matmul.tiled") == 0)
            tiled = reel_host_impls[i];
    cr_assert_not_null(tiled);
    reel_op_attrs a = { .matmul = { false } };
    reel_shape in[2] = { tshape(REEL_BF16, true, 2, 0, 64, 0, 0), tshape(REEL_BF16, false, 2, 64, 128, 0, 0) };
    reel_shape out[1] = { tshape(REEL_BF16, true, 2, 0, 128, 0, 0) };
    cr_assert(tiled->can_use(in, 2, out, &a, &caps));
    in[1] = tshape(REEL_BF16, false, 2, 64, 4, 0, 0); /* N = 4: a tile row would idle */
    out[0] = tshape(REEL_BF16, true, 2, 0, 4, 0, 0);
    cr_assert(!tiled->can_use(in, 2, out, &a, &caps));
    a.matmul.w_transposed = true; /* [N=64, K=4]: too shallow */
    in[1] = tshape(REEL_BF16, false, 2, 64, 4, 0, 0);
    in[0] = tshape(REEL_BF16, true, 2, 0, 4, 0, 0);
    cr_assert(!tiled->can_use(in, 2, out, &a, &caps));
}

Test(ops, schema_accepts_the_test_shapes_and_the_registry_picks_a_host_impl)
{
    reel_device_caps caps = { 0 };
    for (int k = 0; k < REEL_OP_COUNT; k++) {
        reel_shape in[REEL_OP_MAX_IN] = { 0 }, out[REEL_OP_MAX_OUT] = { 0 }, inferred[REEL_OP_MAX_OUT] = { 0 };
        reel_op_attrs a;
        const reel_op_schema *sc = reel_op_schema_get((reel_op_kind)k);
        int nin = node_shapes((reel_op_kind)k, REEL_BF16, in, out, &a);
        char err[256] = "";
        cr_assert_not_null(sc);
        cr_assert_eq(sc->infer(in, sc->nin, &a, inferred, err, sizeof err), REEL_OK, "%s: %s", op_names[k], err);
        for (int o = 0; o < sc->nout; o++) {
            cr_assert_eq(inferred[o].dtype, out[o].dtype, "%s output %d dtype", op_names[k], o);
            cr_assert_eq(inferred[o].ndim, out[o].ndim, "%s output %d ndim", op_names[k], o);
            for (int d = 1; d < out[o].ndim; d++)
                cr_assert_eq(inferred[o].dims[d], out[o].dims[d], "%s output %d dim %d", op_names[k], o, d);
        }
        const reel_op_impl *im = reel_registry_select(REEL_BACKEND_HOST, (reel_op_kind)k, in, nin, out, &a, &caps);
        cr_assert(im && (int)im->op == k, "no host impl selected for %s", op_names[k]);
    }
}

Test(ops, registry_prefers_the_tiled_matmul_and_falls_back_to_the_ref)
{
    reel_device_caps caps = { 0 };
    reel_op_attrs a = { .matmul = { false } };
    reel_shape in[2] = { tshape(REEL_F32, true, 2, 64, 64, 0, 0), tshape(REEL_F32, false, 2, 64, 128, 0, 0) };
    reel_shape out[1] = { tshape(REEL_F32, true, 2, 64, 128, 0, 0) };
    const reel_op_impl *im = reel_registry_select(REEL_BACKEND_HOST, REEL_OP_MATMUL, in, 2, out, &a, &caps);
    cr_assert(im && strcmp(im->name, "host.matmul.tiled") == 0, "got %s", im ? im->name : "none");
    in[1] = tshape(REEL_F32, false, 2, 64, 3, 0, 0);
    out[0] = tshape(REEL_F32, true, 2, 64, 3, 0, 0);
    im = reel_registry_select(REEL_BACKEND_HOST, REEL_OP_MATMUL, in, 2, out, &a, &caps);
    cr_assert(im && strcmp(im->name, "host.matmul.ref") == 0, "got %s", im ? im->name : "none");
}

/* Through the impl's launch on a host stream: the launch reaches the kernel
 * with the launch's shapes and pointers intact. */
Test(ops, host_impl_launch_runs_its_kernel_on_a_stream)
{
    reel_ctx_opts o = REEL_CTX_OPTS_INIT;
    o.backend = REEL_BACKEND_HOST;
    reel_ctx *ctx = NULL;
    cr_assert_eq(reel_ctx_create(&o, &ctx), REEL_OK);
    reel_backend *be = ctx->be;
    reel_stream *s = NULL;
    cr_assert_eq(be->vt->stream_create(be, &s), REEL_OK);
    trng r = { 51 };
    const int64_t M = 9, K = 24, N = 40;
    for (int tiled = 0; tiled < 2; tiled++) {
        tbuf x = tbuf_new(REEL_F16, M * K), w = tbuf_new(REEL_F16, K * N);
        tbuf got = tbuf_new(REEL_F16, M * N), want = tbuf_new(REEL_F16, M * N);
        tbuf_random(&x, &r, -1, 1), tbuf_random(&w, &r, -1, 1);
        tlaunch L;
        tlaunch_init(&L, REEL_OP_MATMUL, M);
        L.in[0] = tshape(REEL_F16, true, 2, 0, K, 0, 0);
        L.in[1] = tshape(REEL_F16, false, 2, K, N, 0, 0);
        L.out[0] = tshape(REEL_F16, true, 2, 0, N, 0, 0);
        L.l.in[0] = x.p, L.l.in[1] = w.p, L.l.out[0] = want.p;
        reel_host_matmul(&L.l);
        L.l.out[0] = got.p;
        L.l.stream = s;
        tbuf_poison(&got);
        const char *name = tiled ? "host.matmul.tiled" : "host.matmul.ref";
        const reel_op_impl *im = NULL;
        for (int i = 0; i < reel_host_nimpls; i++)
            if (strcmp(reel_host_impls[i]->name, name) == 0)
                im = reel_host_impls[i];
        cr_assert_not_null(im);
        cr_assert_eq(im->launch(be, &L.l), REEL_OK, "%s: %s", name, reel_ctx_last_error(ctx));
        cr_assert_eq(be->vt->stream_sync(be, s), REEL_OK);
        cr_assert(!memcmp(got.p, want.p, (size_t)(M * N) * 2), "%s through a stream differs", name);
        tbuf_free(&x), tbuf_free(&w), tbuf_free(&got), tbuf_free(&want);
    }
    be->vt->stream_destroy(be, s);
    reel_ctx_destroy(ctx);
}
