/* reel in one page: build (a + b) * c, compile it, step it, check it. */
#include <stdio.h>
#include <reel/reel.h>

#define COLS 4
#define ROWS 3

static int fail(reel_ctx *ctx, const char *what, reel_status st)
{
    fprintf(stderr, "%s: %s: %s\n", what, reel_status_str(st), ctx ? reel_ctx_last_error(ctx) : "");
    return 1;
}

int main(void)
{
    reel_ctx *ctx = NULL;
    reel_graph *g = NULL;
    reel_plan *p = NULL;
    reel_ctx_opts o = REEL_CTX_OPTS_INIT;
    reel_status st = reel_ctx_create(&o, &ctx);
    if (st != REEL_OK) return fail(ctx, "context", st);
    if ((st = reel_graph_create(ctx, &g)) != REEL_OK) return fail(ctx, "graph", st);

    int64_t dims[2] = {REEL_DIM_TOKENS, COLS};
    reel_tensor a = reel_input(g, "a", REEL_F32, 2, dims);
    reel_tensor b = reel_input(g, "b", REEL_F32, 2, dims);
    reel_tensor c = reel_param(g, "c", REEL_F32, 1, &dims[1]); /* a row, broadcast */
    const float scale[COLS] = {1, 2, 3, 4};
    reel_param_bind(g, c, scale);
    reel_output(g, "y", reel_mul(g, reel_add(g, a, b), c));
    if ((st = reel_compile(g, NULL, &p)) != REEL_OK) return fail(ctx, "compile", st);

    float ha[ROWS][COLS], hb[ROWS][COLS];
    for (int i = 0; i < ROWS; i++)
        for (int j = 0; j < COLS; j++) ha[i][j] = (float)i, hb[i][j] = (float)j / 2;
    reel_plan_set_input(p, "a", ha, ROWS);
    reel_plan_set_input(p, "b", hb, ROWS);
    reel_step_info s = {REEL_STEP_INFO_HEAD, .num_tokens = ROWS};
    if ((st = reel_step(p, &s)) != REEL_OK) return fail(ctx, "step", st);

    const void *out;
    int64_t rows;
    if ((st = reel_plan_output(p, "y", &out, &rows)) != REEL_OK) return fail(ctx, "output", st);
    const float *y = out;
    int bad = rows != ROWS;
    for (int i = 0; i < ROWS && !bad; i++)
        for (int j = 0; j < COLS; j++) bad |= y[i * COLS + j] != (ha[i][j] + hb[i][j]) * scale[j];
    printf("%s: %lld rows, replayed: %s\n", bad ? "wrong" : "ok", (long long)rows,
           reel_plan_last_fallback(p) == REEL_FALLBACK_NONE ? "yes" : "no");
    reel_plan_destroy(p);
    reel_graph_destroy(g);
    reel_ctx_destroy(ctx);
    return bad;
}
