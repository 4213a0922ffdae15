/* Builder and validation errors: each returns its status, the message names
 * the op and tensors at fault, and the first error stays on the graph. */
#include "tests/graph/fixture.h"

TestSuite(validate, .init = graph_setup, .fini = graph_teardown);

Test(validate, names_op_and_tensors_on_a_matmul_shape_mismatch)
{
    reel_tensor h = reel_input(g, "h", REEL_F32, 2, D(T, 256));
    reel_tensor wq = reel_param(g, "wq", REEL_F32, 2, D(512, 1024));
    reel_softmax(g, h);
    reel_softmax(g, h);
    reel_softmax(g, h);
    reel_tensor q = reel_matmul(g, h, wq, false);
    cr_assert_eq(q.id, 0);
    cr_assert_eq(reel_graph_status(g), REEL_E_SHAPE);
    assert_msg_has("op 'matmul' (node 3)", "inner dims differ", "x 'h' is [T,256]", "w 'wq' is [512,1024]");
    cr_assert_eq(g->nnodes, 3, "a refused op adds no node");
}

Test(validate, names_both_dtypes_on_a_dtype_mismatch)
{
    reel_tensor a = reel_input(g, "a", REEL_F32, 2, D(T, 4));
    reel_tensor b = reel_input(g, "b", REEL_F16, 2, D(T, 4));
    cr_assert_eq(reel_add(g, a, b).id, 0);
    cr_assert_eq(reel_graph_status(g), REEL_E_DTYPE);
    assert_msg_has("op 'add' (node 0)", "f32", "f16", "a 'a'", "b 'b'");
}

Test(validate, refuses_the_invalid_handle_passed_directly)
{
    reel_tensor a = reel_input(g, "a", REEL_F32, 2, D(T, 4));
    cr_assert_eq(reel_add(g, a, (reel_tensor){ 0 }).id, 0);
    cr_assert_eq(reel_graph_status(g), REEL_E_INVALID_ARG);
    assert_msg_has("op 'add'", "input 2 (b)", "invalid tensor");
}

Test(validate, refuses_a_handle_of_another_graph)
{
    reel_graph *other;
    cr_assert_eq(reel_graph_create(ctx, &other), REEL_OK);
    reel_tensor x = reel_input(other, "x", REEL_F32, 2, D(T, 4));
    reel_tensor y = reel_softmax(other, reel_softmax(other, x));
    cr_assert_eq(reel_graph_status(other), REEL_OK);
    reel_input(g, "a", REEL_F32, 2, D(T, 4));
    cr_assert_eq(reel_softmax(g, y).id, 0);
    cr_assert_eq(reel_graph_status(g), REEL_E_INVALID_ARG);
    assert_msg_has("op 'softmax'", "input 1 (x)", "unknown to this graph");
    cr_assert_eq(reel_output(g, "y", y), REEL_E_INVALID_ARG);
    assert_msg_has("reel_output", "not a tensor of this graph");
    reel_graph_destroy(other);
}

Test(validate, keeps_the_first_error_when_later_ops_use_its_invalid_handle)
{
    reel_tensor x = reel_input(g, "x", REEL_F32, 2, D(T, 8));
    reel_tensor bad = reel_matmul(g, x, reel_param(g, "w", REEL_F32, 2, D(4, 4)), false);
    cr_assert_eq(bad.id, 0);
    char first[REEL_ERRMSG_MAX];
    snprintf(first, sizeof first, "%s", reel_ctx_last_error(ctx));
    reel_tensor y = reel_softmax(g, bad);
    cr_assert_eq(y.id, 0);
    cr_assert_eq(reel_output(g, "y", y), REEL_E_SHAPE);
    cr_assert_eq(reel_set_stream(g, y, 1), REEL_E_SHAPE);
    cr_assert_str_eq(reel_ctx_last_error(ctx), first);
    cr_assert_eq(reel_graph_status(g), REEL_E_SHAPE);
}

Test(validate, keeps_the_first_error_sticky_through_later_failures)
{
    reel_tensor x = reel_input(g, "x", REEL_F32, 2, D(T, 8));
    cr_assert_eq(reel_silu_and_mul(g, reel_input(g, "odd", REEL_F32, 2, D(T, 7))).id, 0);
    reel_tensor i = reel_input(g, "i", REEL_I32, 2, D(T, 8));
    cr_assert_eq(reel_add(g, x, i).id, 0);
    assert_msg_has("op 'add'", "i32");
    cr_assert_eq(reel_graph_status(g), REEL_E_SHAPE);
    cr_assert_eq(reel_output(g, "x", x), REEL_OK);
    cr_assert_eq(reel_graph_validate(g), REEL_E_SHAPE);
    assert_msg_has("op 'silu_and_mul'", "must be even", "x 'odd' is [T,7]");
}

Test(validate, refuses_an_unbound_parameter_naming_its_op)
{
    reel_tensor h = reel_input(g, "h", REEL_F32, 2, D(T, 4));
    reel_softmax(g, h);
    reel_tensor wq = reel_param(g, "wq", REEL_F32, 2, D(4, 4));
    reel_tensor q = reel_matmul(g, h, wq, false);
    reel_set_name(g, q, "l0.q");
    reel_output(g, "q", q);
    cr_assert_eq(reel_graph_validate(g), REEL_E_UNBOUND);
    assert_msg_has("parameter 'wq'", "neither bound nor deferred", "op 'matmul' (node 1 -> 'l0.q')");
    cr_assert_eq(reel_graph_status(g), REEL_OK, "validation errors are not sticky");
    cr_assert_eq(reel_param_defer(g, wq), REEL_OK);
    cr_assert_eq(reel_graph_validate(g), REEL_OK, "%s", reel_ctx_last_error(ctx));
}

Test(validate, refuses_an_output_that_no_op_produces)
{
    reel_tensor w = reel_param(g, "w", REEL_F32, 2, D(4, 4));
    static const float data[16];
    reel_param_bind(g, w, data);
    cr_assert_eq(reel_output(g, "weights", w), REEL_OK);
    cr_assert_eq(reel_graph_validate(g), REEL_E_NO_OUTPUT);
    assert_msg_has("output 'weights'", "never produced by an op", "parameter 'w'");
}

Test(validate, refuses_positions_as_an_output_but_accepts_an_input)
{
    reel_tensor x = reel_input(g, "x", REEL_F32, 2, D(T, 4));
    cr_assert_eq(reel_output(g, "echo", x), REEL_OK);
    cr_assert_eq(reel_graph_validate(g), REEL_OK, "%s", reel_ctx_last_error(ctx));
    cr_assert_eq(reel_output(g, "pos", reel_positions(g)), REEL_OK);
    cr_assert_eq(reel_graph_validate(g), REEL_E_NO_OUTPUT);
    assert_msg_has("output 'pos'", "never produced");
}

Test(validate, refuses_a_graph_without_outputs)
{
    reel_softmax(g, reel_input(g, "x", REEL_F32, 2, D(T, 4)));
    cr_assert_eq(reel_graph_validate(g), REEL_E_NO_OUTPUT);
    assert_msg_has("graph has no outputs");
}

Test(validate, refuses_duplicate_leaf_and_output_names)
{
    reel_tensor x = reel_input(g, "x", REEL_F32, 2, D(T, 4));
    cr_assert_eq(reel_param(g, "x", REEL_F32, 1, D(4)).id, 0);
    cr_assert_eq(reel_graph_status(g), REEL_E_INVALID_ARG);
    assert_msg_has("parameter 'x'", "taken by input 'x'");
    reel_tensor y = reel_softmax(g, x), z = reel_softmax(g, y);
    cr_assert_eq(reel_output(g, "out", y), REEL_OK);
    cr_assert_eq(reel_output(g, "out", z), REEL_E_INVALID_ARG);
    assert_msg_has("output 'out'", "taken");
    cr_assert_eq(reel_output(g, "again", y), REEL_E_INVALID_ARG);
    assert_msg_has("already output 'out'");
    reel_tensor s = reel_state(g, "s", REEL_F32, 1, D(4));
    cr_assert_eq(reel_set_name(g, s, "x"), REEL_E_INVALID_ARG);
    assert_msg_has("state 'x'", "taken by input 'x'");
}

Test(validate, refuses_a_bad_stream_and_a_stream_for_a_leaf)
{
    reel_tensor x = reel_input(g, "x", REEL_F32, 2, D(T, 4));
    reel_tensor y = reel_softmax(g, x);
    cr_assert_eq(reel_set_stream(g, y, REEL_MAX_STREAMS), REEL_E_INVALID_ARG);
    assert_msg_has("stream 4", "'softmax#0'");
    cr_assert_eq(reel_set_stream(g, y, -1), REEL_E_INVALID_ARG);
    cr_assert_eq(reel_set_stream(g, x, 1), REEL_E_INVALID_ARG);
    assert_msg_has("'x' is an input", "not produced by an op");
    cr_assert_eq(g->nodes[0].stream, 0);
    reel_output(g, "y", y);
    cr_assert_eq(reel_graph_validate(g), REEL_E_INVALID_ARG, "the first builder error is returned by validate");
    assert_msg_has("stream 4");
}

Test(validate, refuses_bad_names_ndims_and_dims)
{
    struct { const char *name; int ndim; const int64_t *dims; const char *frag; } cases[] = {
        { NULL, 1, D(4), "NULL" },
        { "", 1, D(4), "empty" },
        { "a_name_that_is_far_too_long_for_reel_a_name_that_is_far_too_long_for_reel", 1, D(4), "longer" },
        { "n0", 0, D(4), "ndim 0" },
        { "n5", 5, D(1, 2, 3, 4, 5), "ndim 5" },
        { "z", 2, D(4, 0), "dims[1] is 0" },
        { "neg", 2, D(-2, 4), "dims[0] is -2" },
        { "nul", 2, NULL, "dims is NULL" },
        { "tok1", 2, D(4, T), "dims[1] is -1" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        reel_tensor t = reel_input(g, cases[i].name, REEL_F32, cases[i].ndim, cases[i].dims);
        cr_assert_eq(t.id, 0, "case %zu accepted", i);
        assert_msg_has(cases[i].frag);
    }
    cr_assert_eq(reel_input(g, "dt", (reel_dtype)7, 1, D(4)).id, 0);
    assert_msg_has("unknown dtype 7");
    cr_assert_eq(reel_graph_status(g), REEL_E_INVALID_ARG);
}

Test(validate, refuses_a_token_dim_on_parameters_and_states)
{
    cr_assert_eq(reel_param(g, "w", REEL_F32, 2, D(T, 4)).id, 0);
    cr_assert_eq(reel_graph_status(g), REEL_E_SHAPE);
    assert_msg_has("parameter 'w'", "only inputs");
    cr_assert_eq(reel_state(g, "s", REEL_F32, 2, D(T, 4)).id, 0);
    assert_msg_has("state 's'", "only inputs");
}

Test(validate, refuses_a_paged_attention_cache_that_is_not_a_state)
{
    reel_tensor q = reel_input(g, "q", REEL_F32, 2, D(T, 8));
    reel_tensor kc = reel_param(g, "kc", REEL_F32, 4, D(2, 4, 2, 4));
    reel_tensor vc = reel_state(g, "vc", REEL_F32, 4, D(2, 4, 2, 4));
    reel_attn_params p = { REEL_ATTN_PARAMS_HEAD, 2, 2, 4, 4, 0 };
    cr_assert_eq(reel_paged_attention(g, q, q, q, kc, vc, &p).id, 0);
    assert_msg_has("op 'paged_attention'", "k_cache 'kc' is a parameter, not a state");
    cr_assert_eq(reel_paged_attention(g, q, q, q, vc, vc, NULL).id, 0);
    assert_msg_has("params are NULL");
}

Test(validate, refuses_a_negative_or_missing_lse_combine_output)
{
    reel_tensor outs = reel_input(g, "outs", REEL_F32, 3, D(T, 2, 8));
    reel_tensor lses = reel_input(g, "lses", REEL_F32, 3, D(T, 2, 3));
    reel_tensor o = { 99 }, l = { 99 };
    cr_assert_eq(reel_lse_combine(g, outs, lses, 2, &o, &l), REEL_E_SHAPE);
    cr_assert_eq(o.id, 0);
    cr_assert_eq(l.id, 0);
    assert_msg_has("op 'lse_combine'", "lses 'lses' is [T,2,3]");
    cr_assert_eq(reel_lse_combine(g, outs, lses, 2, NULL, &l), REEL_E_INVALID_ARG);
}

Test(validate, refuses_binding_a_tensor_that_is_not_a_parameter)
{
    reel_tensor x = reel_input(g, "x", REEL_F32, 1, D(4));
    static const float data[4];
    cr_assert_eq(reel_param_bind(g, x, data), REEL_E_INVALID_ARG);
    assert_msg_has("'x' is an input, not a parameter");
    reel_tensor w = reel_param(g, "w", REEL_F32, 1, D(4));
    cr_assert_eq(reel_param_bind(g, w, NULL), REEL_E_INVALID_ARG);
    assert_msg_has("parameter 'w' is NULL");
}

Test(validate, refuses_a_positions_name_taken_by_an_input)
{
    reel_input(g, "positions", REEL_I32, 1, D(T));
    cr_assert_eq(reel_positions(g).id, 0);
    assert_msg_has("taken by input 'positions'");
}
