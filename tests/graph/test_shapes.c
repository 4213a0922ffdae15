/* Shape and dtype rules of each op: every violated rule gives its status
 * and a message naming the op and the rule. */
#include "tests/graph/fixture.h"

TestSuite(shapes, .init = graph_setup, .fini = graph_teardown);

#define EXPECT_REFUSED(call, status, ...)                                                     \
    do {                                                                                      \
        reel_tensor r_ = (call);                                                              \
        cr_assert_eq(r_.id, 0, "accepted: %s", #call);                                        \
        cr_assert_eq(reel_graph_status(g), (status), "status %s for %s",                      \
                     reel_status_str(reel_graph_status(g)), #call);                           \
        assert_msg_has(__VA_ARGS__);                                                          \
    } while (0)

Test(shapes, embedding_needs_i32_token_ids)
{
    reel_tensor tab = reel_param(g, "tab", REEL_F32, 2, D(10, 4));
    reel_tensor ids = reel_input(g, "ids", REEL_F32, 1, D(T));
    EXPECT_REFUSED(reel_embedding(g, tab, ids), REEL_E_DTYPE, "op 'embedding'", "ids must be i32", "ids 'ids'");
}

Test(shapes, embedding_needs_a_table_without_token_dim)
{
    reel_tensor tab = reel_input(g, "tab", REEL_F32, 2, D(T, 4));
    reel_tensor ids = reel_input(g, "ids", REEL_I32, 1, D(T));
    EXPECT_REFUSED(reel_embedding(g, tab, ids), REEL_E_SHAPE, "table must not have a token dim");
}

Test(shapes, matmul_needs_a_token_operand)
{
    reel_tensor x = reel_param(g, "x", REEL_F32, 2, D(3, 4));
    reel_tensor w = reel_param(g, "w", REEL_F32, 2, D(4, 4));
    EXPECT_REFUSED(reel_matmul(g, x, w, false), REEL_E_SHAPE, "x must have a token dim", "x 'x' is [3,4]");
}

Test(shapes, matmul_checks_the_transposed_inner_dim)
{
    reel_tensor x = reel_input(g, "x", REEL_F32, 2, D(T, 4));
    reel_tensor w = reel_param(g, "w", REEL_F32, 2, D(4, 6));
    cr_assert_neq(reel_matmul(g, x, w, false).id, 0);
    EXPECT_REFUSED(reel_matmul(g, x, w, true), REEL_E_SHAPE, "w[1] = 6", "transposed");
}

Test(shapes, matmul_needs_matching_dtypes)
{
    reel_tensor x = reel_input(g, "x", REEL_BF16, 2, D(T, 4));
    reel_tensor w = reel_param(g, "w", REEL_F16, 2, D(4, 6));
    EXPECT_REFUSED(reel_matmul(g, x, w, false), REEL_E_DTYPE, "x is bf16, w is f16");
}

Test(shapes, add_refuses_a_row_of_the_wrong_width)
{
    reel_tensor a = reel_input(g, "a", REEL_F32, 2, D(T, 4));
    reel_tensor b = reel_param(g, "b", REEL_F32, 1, D(5));
    EXPECT_REFUSED(reel_add(g, a, b), REEL_E_SHAPE, "op 'add'", "a is [T,4], b is [5]");
}

Test(shapes, mul_refuses_an_untokened_left_operand)
{
    reel_tensor a = reel_param(g, "a", REEL_F32, 2, D(2, 4));
    EXPECT_REFUSED(reel_mul(g, a, a), REEL_E_SHAPE, "op 'mul'", "a must have a token dim");
}

Test(shapes, rmsnorm_checks_weight_width_and_eps)
{
    reel_tensor x = reel_input(g, "x", REEL_F32, 2, D(T, 4));
    reel_tensor w = reel_param(g, "w", REEL_F32, 1, D(4));
    reel_tensor w5 = reel_param(g, "w5", REEL_F32, 1, D(5));
    EXPECT_REFUSED(reel_rmsnorm(g, x, w5, 1e-5f), REEL_E_SHAPE, "w[0] = 5 must equal x[1] = 4");
    EXPECT_REFUSED(reel_rmsnorm(g, x, w, 0.0f), REEL_E_SHAPE, "eps must be finite and > 0");
}

Test(shapes, rmsnorm_refuses_zero_eps)
{
    reel_tensor x = reel_input(g, "x", REEL_F32, 2, D(T, 4));
    reel_tensor w = reel_param(g, "w", REEL_F32, 1, D(4));
    EXPECT_REFUSED(reel_rmsnorm(g, x, w, 0.0f), REEL_E_INVALID_ARG, "op 'rmsnorm'", "eps");
}

Test(shapes, rope_checks_head_dim_and_rot_dim)
{
    reel_tensor x = reel_input(g, "x", REEL_F32, 2, D(T, 12));
    reel_tensor p = reel_positions(g);
    cr_assert_neq(reel_rope(g, x, p, 4, 2, 1e4f).id, 0);
    EXPECT_REFUSED(reel_rope(g, x, p, 5, 2, 1e4f), REEL_E_INVALID_ARG, "head_dim 5", "divide x[1] = 12");
}

Test(shapes, rope_refuses_an_odd_rot_dim)
{
    reel_tensor x = reel_input(g, "x", REEL_F32, 2, D(T, 12));
    EXPECT_REFUSED(reel_rope(g, x, reel_positions(g), 4, 3, 1e4f), REEL_E_INVALID_ARG, "rot_dim 3");
}

Test(shapes, rope_needs_i32_positions)
{
    reel_tensor x = reel_input(g, "x", REEL_F32, 2, D(T, 12));
    reel_tensor p = reel_input(g, "p", REEL_F32, 1, D(T));
    EXPECT_REFUSED(reel_rope(g, x, p, 4, 4, 1e4f), REEL_E_DTYPE, "positions must be i32");
}

Test(shapes, argmax_and_softmax_need_float_rows)
{
    reel_tensor x = reel_input(g, "x", REEL_I32, 2, D(T, 12));
    EXPECT_REFUSED(reel_argmax(g, x), REEL_E_DTYPE, "op 'argmax'", "x must be f32, f16 or bf16, is i32");
}

Test(shapes, softmax_needs_two_dims)
{
    reel_tensor x = reel_input(g, "x", REEL_F32, 3, D(T, 2, 12));
    EXPECT_REFUSED(reel_softmax(g, x), REEL_E_SHAPE, "op 'softmax'", "x must have 2 dims, is [T,2,12]");
}

Test(shapes, paged_attention_needs_kv_heads_dividing_heads)
{
    reel_tensor q = reel_input(g, "q", REEL_F32, 2, D(T, 12));
    reel_tensor k = reel_input(g, "k", REEL_F32, 2, D(T, 8));
    reel_tensor c = reel_state(g, "c", REEL_F32, 4, D(2, 4, 2, 4));
    reel_attn_params p = { REEL_ATTN_PARAMS_HEAD, 3, 2, 4, 4, 0 };
    EXPECT_REFUSED(reel_paged_attention(g, q, k, k, c, c, &p), REEL_E_INVALID_ARG, "num_kv_heads 2 must divide");
}

Test(shapes, paged_attention_checks_the_cache_layout)
{
    reel_tensor q = reel_input(g, "q", REEL_F32, 2, D(T, 16));
    reel_tensor k = reel_input(g, "k", REEL_F32, 2, D(T, 8));
    reel_tensor c = reel_state(g, "c", REEL_F32, 4, D(2, 4, 2, 4));
    reel_tensor bad = reel_state(g, "bad", REEL_F32, 4, D(2, 8, 2, 4));
    reel_attn_params p = { REEL_ATTN_PARAMS_HEAD, 4, 2, 4, 4, 0 };
    cr_assert_neq(reel_paged_attention(g, q, k, k, c, c, &p).id, 0, "%s", reel_ctx_last_error(ctx));
    EXPECT_REFUSED(reel_paged_attention(g, q, k, k, c, bad, &p), REEL_E_SHAPE, "v_cache must be [num_blocks,4,2,4]",
                   "v_cache 'bad' is [2,8,2,4]");
}

Test(shapes, paged_attention_needs_caches_of_q_dtype)
{
    reel_tensor q = reel_input(g, "q", REEL_F16, 2, D(T, 16));
    reel_tensor k = reel_input(g, "k", REEL_F16, 2, D(T, 8));
    reel_tensor c = reel_state(g, "c", REEL_F32, 4, D(2, 4, 2, 4));
    reel_attn_params p = { REEL_ATTN_PARAMS_HEAD, 4, 2, 4, 4, 0 };
    EXPECT_REFUSED(reel_paged_attention(g, q, k, k, c, c, &p), REEL_E_DTYPE, "q is f16, k_cache is f32");
}

Test(shapes, topk_needs_a_page_table_covering_the_scores)
{
    reel_tensor s = reel_input(g, "s", REEL_F32, 2, D(T, 100));
    reel_tensor l = reel_input(g, "l", REEL_I32, 1, D(T));
    reel_tensor pt = reel_input(g, "pt", REEL_I32, 2, D(T, 4));
    EXPECT_REFUSED(reel_topk(g, s, l, pt, 8, 16), REEL_E_SHAPE, "covers 64 positions, scores have 100");
}

Test(shapes, topk_needs_a_positive_k_and_page_size)
{
    reel_tensor s = reel_input(g, "s", REEL_F32, 2, D(T, 64));
    reel_tensor l = reel_input(g, "l", REEL_I32, 1, D(T));
    reel_tensor pt = reel_input(g, "pt", REEL_I32, 2, D(T, 4));
    EXPECT_REFUSED(reel_topk(g, s, l, pt, 8, 0), REEL_E_INVALID_ARG, "page_size must be > 0");
    EXPECT_REFUSED(reel_topk(g, s, l, (reel_tensor){ 0 }, 0, 0), REEL_E_INVALID_ARG, "k must be > 0");
}

Test(shapes, topk_needs_f32_scores)
{
    reel_tensor s = reel_input(g, "s", REEL_BF16, 2, D(T, 64));
    reel_tensor l = reel_input(g, "l", REEL_I32, 1, D(T));
    EXPECT_REFUSED(reel_topk(g, s, l, (reel_tensor){ 0 }, 4, 0), REEL_E_DTYPE, "scores must be f32");
}

Test(shapes, lse_combine_needs_heads_dividing_the_row)
{
    reel_tensor outs = reel_input(g, "outs", REEL_F32, 3, D(T, 2, 10));
    reel_tensor lses = reel_input(g, "lses", REEL_F32, 3, D(T, 2, 4));
    reel_tensor o, l;
    cr_assert_eq(reel_lse_combine(g, outs, lses, 4, &o, &l), REEL_E_INVALID_ARG);
    assert_msg_has("op 'lse_combine'", "num_heads 4 must be > 0 and divide outs[2] = 10");
}
