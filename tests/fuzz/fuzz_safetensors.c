/* libFuzzer target over the safetensors loader (include/reel/safetensors.h).
 * Input: a mode byte, then
 *   mode even: one file's bytes, opened with reel_safetensors_open_buffer;
 *   mode odd:  a 2-byte index length L, L bytes of model.safetensors.index.json
 *              and the rest as the shard "s.safetensors", both written into a
 *              directory of this process that is then opened.
 * Invariants: no crash or sanitizer report; every refusal has a message;
 * an opened checkpoint's tensors lie inside the bytes, hold numel * dtype
 * size bytes, are in name order and are found by name; a parameter written
 * from one of them either checks (dtype and shape equal) or is refused with
 * a message, never written wrong. */
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz.h"
#include "reel/safetensors.h"

FZ_ASAN_DEFAULTS
FZ_UBSAN_DEFAULTS

static reel_ctx *ctx;
static reel_plan *plan; /* one f32 parameter "w" [2, 3], y = x @ w^T */
static char dir[64];

static void cleanup(void)
{
    char path[128];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/s.safetensors", dir);
    unlink(path);
    rmdir(dir);
    reel_plan_destroy(plan);
    reel_ctx_destroy(ctx);
}

static void setup(void)
{
    if (ctx) return;
    reel_ctx_opts o = REEL_CTX_OPTS_INIT;
    o.backend = REEL_BACKEND_HOST;
    if (reel_ctx_create(&o, &ctx) != REEL_OK) FZ_FAIL("no host context");
    reel_graph *g;
    reel_graph_create(ctx, &g);
    int64_t xd[2] = {REEL_DIM_TOKENS, 3}, wd[2] = {2, 3};
    reel_tensor x = reel_input(g, "x", REEL_F32, 2, xd);
    reel_tensor w = reel_param(g, "w", REEL_F32, 2, wd);
    reel_param_defer(g, w);
    reel_output(g, "y", reel_matmul(g, x, w, true));
    if (reel_compile(g, NULL, &plan) != REEL_OK) FZ_FAIL("compile: %s", reel_ctx_last_error(ctx));
    reel_graph_destroy(g);
    snprintf(dir, sizeof dir, "/tmp/reel-fuzz-st-%d", (int)getpid());
    mkdir(dir, 0700);
    atexit(cleanup);
}

static void check_open(reel_safetensors *ck, const uint8_t *lo, size_t n)
{
    int count = reel_safetensors_count(ck);
    const char *prev = NULL;
    for (int i = 0; i < count; i++) {
        reel_st_tensor t = REEL_ST_TENSOR_INIT, u = REEL_ST_TENSOR_INIT;
        FZ_CHECK(ctx, reel_safetensors_tensor(ck, i, &t));
        if (lo && ((const uint8_t *)t.data < lo || (const uint8_t *)t.data + t.bytes > lo + n))
            FZ_FAIL("tensor '%s' lies outside the buffer", t.name);
        uint64_t numel = 1;
        for (int d = 0; d < t.ndim; d++) numel *= (uint64_t)t.dims[d];
        if (t.dtype != REEL_DTYPE_COUNT && numel * reel_dtype_size(t.dtype) != t.bytes)
            FZ_FAIL("tensor '%s': %zu bytes for %llu elements", t.name, t.bytes, (unsigned long long)numel);
        if (prev && strcmp(prev, t.name) >= 0) FZ_FAIL("tensors out of name order at '%s'", t.name);
        prev = t.name;
        if (FZ_CHECK(ctx, reel_safetensors_find(ck, t.name, &u)) != REEL_OK || u.data != t.data)
            FZ_FAIL("tensor '%s' not found by its name", t.name);
        volatile uint8_t sum = 0; /* every byte readable */
        for (size_t b = 0; b < t.bytes; b++) sum += ((const uint8_t *)t.data)[b];
        (void)sum;
        const char *one[1] = {t.name};
        reel_status st = FZ_CHECK(ctx, reel_safetensors_write_param(ck, plan, "w", 1, one));
        bool fits = t.dtype == REEL_F32 && t.ndim == 2 && t.dims[0] == 2 && t.dims[1] == 3;
        if ((st == REEL_OK) != fits) FZ_FAIL("write_param of '%s' returned %s", t.name, reel_status_str(st));
        const char *two[2] = {t.name, t.name};
        FZ_CHECK(ctx, reel_safetensors_write_param(ck, plan, "w", 2, two));
    }
    reel_safetensors_metadata(ck, "format");
}

static void write_bytes(const char *name, const uint8_t *d, size_t n)
{
    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) FZ_FAIL("cannot write %s", path);
    if (n) fwrite(d, 1, n, f);
    fclose(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    setup();
    fz f = {data, size, 0};
    uint8_t mode = fz_u8(&f);
    reel_safetensors *ck = NULL;
    if (mode % 2 == 0) {
        const uint8_t *p = data + f.i;
        size_t n = size - f.i;
        if (FZ_CHECK(ctx, reel_safetensors_open_buffer(ctx, n ? p : NULL, n, &ck)) == REEL_OK) check_open(ck, p, n);
        else if (ck) FZ_FAIL("refused open left a checkpoint");
    } else {
        size_t L = (size_t)fz_u8(&f) << 8 | fz_u8(&f);
        if (L > size - f.i) L = size - f.i;
        write_bytes("model.safetensors.index.json", data + f.i, L);
        write_bytes("s.safetensors", data + f.i + L, size - f.i - L);
        if (FZ_CHECK(ctx, reel_safetensors_open(ctx, dir, &ck)) == REEL_OK) check_open(ck, NULL, 0);
    }
    reel_safetensors_close(ck);
    return 0;
}
