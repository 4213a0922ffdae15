/* The graph builder: leaves, op nodes, inferred shapes, names, streams. */
#include <math.h>

#include "tests/graph/fixture.h"
#include "ops/op.h"

TestSuite(builder, .init = graph_setup, .fini = graph_teardown);

enum { V = 32, DM = 16, H = 4, HKV = 2, DH = 4, BS = 4, NB = 8, F = 24 };

static void assert_shape(reel_tensor t, reel_dtype dt, bool tokens, int ndim, const int64_t *dims)
{
    cr_assert(t.id != 0, "invalid handle: %s", reel_ctx_last_error(ctx));
    const reel_shape *s = &g->tensors[t.id].shape;
    cr_assert_eq(s->dtype, dt, "tensor '%s' dtype %d", g->tensors[t.id].name, s->dtype);
    cr_assert_eq(s->tokens, tokens);
    cr_assert_eq(s->ndim, ndim, "tensor '%s' ndim %d", g->tensors[t.id].name, s->ndim);
    for (int i = 0; i < ndim; i++)
        cr_assert_eq(s->dims[i], dims[i], "tensor '%s' dims[%d] = %lld", g->tensors[t.id].name, i,
                     (long long)s->dims[i]);
}

/* One decoder layer with tied embeddings; returns the logits. */
static reel_tensor build_layer(reel_tensor *next)
{
    reel_tensor tok = reel_input(g, "tokens", REEL_I32, 1, D(T));
    reel_tensor emb = reel_param(g, "embed", REEL_F32, 2, D(V, DM));
    reel_tensor pos = reel_positions(g);
    reel_tensor h = reel_embedding(g, emb, tok);
    reel_tensor x = reel_rmsnorm(g, h, reel_param(g, "ln1", REEL_F32, 1, D(DM)), 1e-5f);
    reel_tensor q = reel_matmul(g, x, reel_param(g, "wq", REEL_F32, 2, D(DM, H * DH)), false);
    reel_tensor k = reel_matmul(g, x, reel_param(g, "wk", REEL_F32, 2, D(DM, HKV * DH)), false);
    reel_tensor v = reel_matmul(g, x, reel_param(g, "wv", REEL_F32, 2, D(HKV * DH, DM)), true);
    q = reel_rope(g, q, pos, DH, DH, 10000.0f);
    k = reel_rope(g, k, pos, DH, 2, 10000.0f);
    reel_tensor kc = reel_state(g, "k_cache", REEL_F32, 4, D(NB, BS, HKV, DH));
    reel_tensor vc = reel_state(g, "v_cache", REEL_F32, 4, D(NB, BS, HKV, DH));
    reel_attn_params ap = { REEL_ATTN_PARAMS_HEAD, H, HKV, DH, BS, 0.0f };
    reel_tensor a = reel_paged_attention(g, q, k, v, kc, vc, &ap);
    reel_tensor o = reel_matmul(g, a, reel_param(g, "wo", REEL_F32, 2, D(H * DH, DM)), false);
    reel_tensor h2 = reel_add(g, h, o);
    reel_tensor x2 = reel_rmsnorm(g, h2, reel_param(g, "ln2", REEL_F32, 1, D(DM)), 1e-5f);
    reel_tensor gu = reel_matmul(g, x2, reel_param(g, "wgu", REEL_F32, 2, D(DM, 2 * F)), false);
    reel_tensor act = reel_silu_and_mul(g, gu);
    reel_tensor dn = reel_matmul(g, act, reel_param(g, "wd", REEL_F32, 2, D(F, DM)), false);
    reel_tensor h3 = reel_add(g, h2, dn);
    reel_tensor xf = reel_rmsnorm(g, h3, reel_param(g, "lnf", REEL_F32, 1, D(DM)), 1e-5f);
    reel_tensor logits = reel_matmul(g, xf, emb, true);
    *next = reel_argmax(g, logits);
    return logits;
}

Test(builder, builds_a_decoder_layer_with_inferred_shapes)
{
    reel_tensor next;
    reel_tensor logits = build_layer(&next);
    cr_assert_eq(reel_graph_status(g), REEL_OK, "%s", reel_ctx_last_error(ctx));
    cr_assert_eq(g->nnodes, 18);
    assert_shape(logits, REEL_F32, true, 2, D(-1, V));
    assert_shape(next, REEL_I32, true, 1, D(-1));
    cr_assert_eq(reel_output(g, "logits", logits), REEL_OK);
    cr_assert_eq(reel_output(g, "next", next), REEL_OK);
    cr_assert_eq(g->noutputs, 2);
    cr_assert_eq(g->outputs[1].tensor, next.id);
    cr_assert_eq(g->tensors[next.id].output_slot, 1);
    /* The silu_and_mul output is half as wide; paged attention gives [T, H*Dh]. */
    const reel_node *silu = &g->nodes[12], *attn = &g->nodes[7];
    cr_assert_eq(silu->op, REEL_OP_SILU_AND_MUL);
    assert_shape((reel_tensor){ silu->out[0] }, REEL_F32, true, 2, D(-1, F));
    cr_assert_eq(attn->op, REEL_OP_PAGED_ATTENTION);
    cr_assert_eq(attn->nin, 6); /* the sixth, kv_slots, is CP's: absent */
    cr_assert_eq(attn->in[5], 0);
    cr_assert_eq(attn->nout, 2); /* no lse without a layout asking for it */
    assert_shape((reel_tensor){ attn->out[0] }, REEL_F32, true, 2, D(-1, H * DH));
    cr_assert_eq(g->nodes[4].attrs.matmul.w_transposed, true);
    cr_assert_eq(g->nodes[6].attrs.rope.rot_dim, 2);
}

Test(builder, validates_once_every_parameter_is_bound_or_deferred)
{
    reel_tensor next;
    reel_output(g, "logits", build_layer(&next));
    static const float data[1];
    const char *names[] = { "embed", "ln1", "wq", "wk", "wv", "wo", "ln2", "wgu", "wd" };
    for (int i = 1; i < g->ntensors; i++)
        for (size_t n = 0; n < sizeof names / sizeof names[0]; n++)
            if (strcmp(g->tensors[i].name, names[n]) == 0)
                cr_assert_eq(reel_param_bind(g, (reel_tensor){ (uint32_t)i }, data), REEL_OK);
    cr_assert_eq(reel_graph_validate(g), REEL_E_UNBOUND, "lnf is still unbound");
    for (int i = 1; i < g->ntensors; i++)
        if (strcmp(g->tensors[i].name, "lnf") == 0)
            cr_assert_eq(reel_param_defer(g, (reel_tensor){ (uint32_t)i }), REEL_OK);
    cr_assert_eq(reel_graph_validate(g), REEL_OK, "%s", reel_ctx_last_error(ctx));
}

Test(builder, gives_produced_tensors_default_names_and_renames_them)
{
    reel_tensor x = reel_input(g, "x", REEL_F32, 2, D(T, 8));
    reel_tensor s = reel_softmax(g, x);
    reel_tensor m = reel_mul(g, s, reel_param(g, "scale", REEL_F32, 1, D(8)));
    cr_assert_str_eq(g->tensors[s.id].name, "softmax#0");
    cr_assert_str_eq(g->tensors[m.id].name, "mul#1");
    cr_assert_eq(reel_set_name(g, m, "scaled"), REEL_OK);
    cr_assert_str_eq(g->tensors[m.id].name, "scaled");
    char d[128];
    cr_assert_str_eq(reel_node_desc(g, 1, d, sizeof d), "op 'mul' (node 1 -> 'scaled')");
    cr_assert_eq(g->tensors[m.id].producer, 1);
    cr_assert_eq(g->tensors[x.id].producer, -1);
}

Test(builder, stores_the_token_dim_of_an_input_as_a_flag)
{
    reel_tensor x = reel_input(g, "x", REEL_BF16, 3, D(T, 2, 5));
    reel_tensor c = reel_input(g, "c", REEL_F32, 2, D(3, 5));
    assert_shape(x, REEL_BF16, true, 3, D(-1, 2, 5));
    assert_shape(c, REEL_F32, false, 2, D(3, 5));
    cr_assert_eq(g->tensors[x.id].kind, REEL_T_INPUT);
    cr_assert_eq(reel_shape_row_numel(&g->tensors[x.id].shape), 10);
    cr_assert_eq(reel_shape_numel(&g->tensors[x.id].shape, 7), 70);
    cr_assert_eq(reel_shape_bytes(&g->tensors[x.id].shape, 7), 140);
    cr_assert_eq(reel_shape_numel(&g->tensors[c.id].shape, 7), 15);
    cr_assert_eq(reel_shape_row_numel(&g->tensors[c.id].shape), 15);
    char b[32];
    cr_assert_str_eq(reel_shape_format(&g->tensors[x.id].shape, b, sizeof b), "[T,2,5]");
}

Test(builder, returns_the_same_positions_tensor_each_time)
{
    reel_tensor p = reel_positions(g), p2 = reel_positions(g);
    cr_assert_neq(p.id, 0);
    cr_assert_eq(p.id, p2.id);
    cr_assert_eq(g->positions, p.id);
    cr_assert_eq(g->tensors[p.id].kind, REEL_T_META);
    assert_shape(p, REEL_I32, true, 1, D(-1));
}

Test(builder, stores_an_absent_page_table_as_input_zero)
{
    reel_tensor s = reel_input(g, "scores", REEL_F32, 2, D(T, 64));
    reel_tensor l = reel_input(g, "lens", REEL_I32, 1, D(T));
    reel_tensor pt = reel_input(g, "pages", REEL_I32, 2, D(T, 4));
    reel_tensor a = reel_topk(g, s, l, (reel_tensor){ 0 }, 8, 0);
    reel_tensor b = reel_topk(g, s, l, pt, 8, 16);
    cr_assert_eq(reel_graph_status(g), REEL_OK, "%s", reel_ctx_last_error(ctx));
    assert_shape(a, REEL_I32, true, 2, D(-1, 8));
    assert_shape(b, REEL_I32, true, 2, D(-1, 8));
    cr_assert_eq(g->nodes[0].in[2], 0);
    cr_assert_eq(g->nodes[0].nin, 3);
    cr_assert_eq(g->nodes[0].attrs.topk.has_page_table, false);
    cr_assert_eq(g->nodes[1].in[2], pt.id);
    cr_assert_eq(g->nodes[1].attrs.topk.has_page_table, true);
    cr_assert_eq(g->nodes[1].attrs.topk.page_size, 16);
}

Test(builder, resolves_a_zero_attention_scale_to_one_over_sqrt_head_dim)
{
    reel_tensor q = reel_input(g, "q", REEL_F16, 2, D(T, 8 * 16));
    reel_tensor kv = reel_input(g, "kv", REEL_F16, 2, D(T, 2 * 16));
    reel_tensor kc = reel_state(g, "kc", REEL_F16, 4, D(4, 16, 2, 16));
    reel_tensor vc = reel_state(g, "vc", REEL_F16, 4, D(4, 16, 2, 16));
    reel_attn_params p = { REEL_ATTN_PARAMS_HEAD, 8, 2, 16, 16, 0.0f };
    reel_tensor a = reel_paged_attention(g, q, kv, kv, kc, vc, &p);
    p.scale = 0.5f;
    reel_tensor b = reel_paged_attention(g, q, kv, kv, kc, vc, &p);
    assert_shape(a, REEL_F16, true, 2, D(-1, 128));
    cr_assert_float_eq(g->nodes[0].attrs.attn.p.scale, 0.25f, 1e-7f);
    cr_assert_float_eq(g->nodes[1].attrs.attn.p.scale, 0.5f, 1e-7f);
    cr_assert_neq(b.id, 0);
}

Test(builder, gives_lse_combine_two_outputs)
{
    reel_tensor outs = reel_input(g, "outs", REEL_BF16, 3, D(T, 3, 4 * 8));
    reel_tensor lses = reel_input(g, "lses", REEL_F32, 3, D(T, 3, 4));
    reel_tensor out, lse;
    cr_assert_eq(reel_lse_combine(g, outs, lses, 4, &out, &lse), REEL_OK, "%s", reel_ctx_last_error(ctx));
    assert_shape(out, REEL_BF16, true, 2, D(-1, 32));
    assert_shape(lse, REEL_F32, true, 2, D(-1, 4));
    cr_assert_eq(g->nodes[0].nout, 2);
    cr_assert_eq(g->tensors[lse.id].out_index, 1);
    cr_assert_str_eq(g->tensors[lse.id].name, "lse_combine#0.1");
}

Test(builder, broadcasts_a_row_in_add_and_mul)
{
    reel_tensor x = reel_input(g, "x", REEL_F32, 3, D(T, 2, 6));
    reel_tensor r = reel_param(g, "r", REEL_F32, 1, D(6));
    reel_tensor st = reel_state(g, "s", REEL_F32, 1, D(6));
    assert_shape(reel_add(g, x, r), REEL_F32, true, 3, D(-1, 2, 6));
    assert_shape(reel_mul(g, x, st), REEL_F32, true, 3, D(-1, 2, 6));
    assert_shape(reel_add(g, x, x), REEL_F32, true, 3, D(-1, 2, 6));
}

Test(builder, sets_the_stream_of_the_producing_node)
{
    reel_tensor x = reel_input(g, "x", REEL_F32, 2, D(T, 4));
    reel_tensor a = reel_softmax(g, x);
    reel_tensor b = reel_softmax(g, a);
    cr_assert_eq(reel_set_stream(g, b, REEL_MAX_STREAMS - 1), REEL_OK);
    cr_assert_eq(g->nodes[0].stream, 0);
    cr_assert_eq(g->nodes[1].stream, REEL_MAX_STREAMS - 1);
}

Test(builder, names_dtypes_and_their_sizes)
{
    cr_assert_eq(reel_dtype_size(REEL_F32), 4);
    cr_assert_eq(reel_dtype_size(REEL_F16), 2);
    cr_assert_eq(reel_dtype_size(REEL_BF16), 2);
    cr_assert_eq(reel_dtype_size(REEL_I32), 4);
    cr_assert_eq(reel_dtype_size(REEL_DTYPE_COUNT), 0);
    cr_assert_str_eq(reel_dtype_name(REEL_BF16), "bf16");
    cr_assert_str_eq(reel_dtype_name((reel_dtype)99), "unknown");
    cr_assert_null(reel_op_schema_get(REEL_OP_COUNT));
    cr_assert_str_eq(reel_op_schema_get(REEL_OP_LSE_COMBINE)->name, "lse_combine");
}

Test(builder, accepts_a_null_graph_without_crashing)
{
    reel_tensor x = reel_input(NULL, "x", REEL_F32, 1, D(T));
    cr_assert_eq(x.id, 0);
    cr_assert_eq(reel_softmax(NULL, x).id, 0);
    cr_assert_eq(reel_output(NULL, "y", x), REEL_E_INVALID_ARG);
    cr_assert_eq(reel_graph_status(NULL), REEL_E_INVALID_ARG);
    cr_assert_eq(reel_graph_validate(NULL), REEL_E_INVALID_ARG);
    cr_assert_eq(reel_graph_create(ctx, NULL), REEL_E_INVALID_ARG);
    reel_graph *g2 = (reel_graph *)1;
    cr_assert_eq(reel_graph_create(NULL, &g2), REEL_E_INVALID_ARG);
    cr_assert_null(g2);
    reel_graph_destroy(NULL);
}

Test(builder, keeps_leaf_names_unique_over_thousands_of_leaves_and_renames)
{
    char name[32];
    reel_tensor w[3000];
    for (int i = 0; i < 3000; i++) {
        snprintf(name, sizeof name, "w%d", i);
        w[i] = reel_param(g, name, REEL_F32, 1, D(4));
        cr_assert_neq(w[i].id, 0, "%s: %s", name, reel_ctx_last_error(ctx));
    }
    cr_assert_eq(reel_set_name(g, w[10], "renamed"), REEL_OK, "%s", reel_ctx_last_error(ctx));
    cr_assert_eq(reel_set_name(g, w[10], "renamed"), REEL_OK, "a leaf may keep its own name");
    reel_tensor again = reel_param(g, "w10", REEL_F32, 1, D(4)); /* the old name is free */
    cr_assert_neq(again.id, 0, "%s", reel_ctx_last_error(ctx));
    cr_assert_eq(reel_graph_status(g), REEL_OK);
    reel_tensor dup = reel_state(g, "renamed", REEL_F32, 1, D(4));
    cr_assert_eq(dup.id, 0);
    cr_assert(strstr(reel_ctx_last_error(ctx), "'renamed': the name is taken by parameter 'renamed'") != NULL, "%s",
              reel_ctx_last_error(ctx));
}

Test(builder, refuses_renaming_a_leaf_to_a_name_another_leaf_has)
{
    reel_tensor a = reel_param(g, "a", REEL_F32, 1, D(4));
    reel_input(g, "b", REEL_F32, 1, D(T));
    cr_assert_eq(reel_set_name(g, a, "c"), REEL_OK);
    cr_assert_eq(reel_set_name(g, a, "a"), REEL_OK, "back to its first name");
    cr_assert_eq(reel_set_name(g, a, "b"), REEL_E_INVALID_ARG);
    cr_assert(strstr(reel_ctx_last_error(ctx), "taken by input 'b'") != NULL, "%s", reel_ctx_last_error(ctx));
}
