/* The safetensors loader (include/reel/safetensors.h): files written by hand
 * byte for byte, each kind of bad file with its message, a sharded index,
 * and parameters written into a plan with dtype and shape checked. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "reel/safetensors.h"

static char dir[256];

static void mkdir_tmp(void)
{
    snprintf(dir, sizeof dir, "/tmp/reel-st-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
}

static void rm_tmp(void)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_expect_eq(system(cmd), 0);
}

/* A file: 8-byte length, the header as given, then `data` bytes. */
static size_t build(uint8_t *out, const char *header, const void *data, size_t n)
{
    size_t h = strlen(header);
    for (int i = 0; i < 8; i++) out[i] = (uint8_t)((uint64_t)h >> (8 * i));
    memcpy(out + 8, header, h);
    if (n) memcpy(out + 8 + h, data, n);
    return 8 + h + n;
}

static const char *write_file(const char *name, const char *header, const void *data, size_t n)
{
    static char path[512];
    uint8_t *buf = malloc(8 + strlen(header) + n);
    size_t len = build(buf, header, data, n);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f);
    cr_assert_eq(fwrite(buf, 1, len, f), len);
    fclose(f);
    free(buf);
    return path;
}

static void write_text(const char *name, const char *text)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs(text, f);
    fclose(f);
}

static const float six[6] = {1, 2, 3, 4, 5, 6};
#define HDR_A "{\"__metadata__\":{\"format\":\"pt\"},\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}}"

/* Opens one buffer and expects status st with every fragment in the message. */
static void expect_refused(const char *header, const void *data, size_t n, reel_status want, const char *f1,
                           const char *f2)
{
    uint8_t *buf = malloc(8 + strlen(header) + n);
    size_t len = build(buf, header, data, n);
    reel_safetensors *ck = (reel_safetensors *)1;
    reel_status st = reel_safetensors_open_buffer(NULL, buf, len, &ck);
    const char *m = reel_ctx_last_error(NULL);
    cr_expect_eq(st, want, "header %s: %s (%s)", header, reel_status_str(st), m);
    cr_expect_null(ck);
    cr_expect(strstr(m, f1) != NULL, "message '%s' lacks '%s'", m, f1);
    if (f2) cr_expect(strstr(m, f2) != NULL, "message '%s' lacks '%s'", m, f2);
    free(buf);
}

Test(safetensors, reads_names_dtypes_shapes_and_data_of_a_valid_file)
{
    const char *h = "{\"b\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[24,28]},"
                    "\"__metadata__\":{\"format\":\"pt\"},\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}}";
    uint8_t data[28];
    memcpy(data, six, 24);
    uint16_t bf[2] = {0x3f80, 0xc000}; /* 1, -2 */
    memcpy(data + 24, bf, 4);
    uint8_t buf[512];
    size_t len = build(buf, h, data, sizeof data);
    reel_safetensors *ck;
    cr_assert_eq(reel_safetensors_open_buffer(NULL, buf, len, &ck), REEL_OK, "%s", reel_ctx_last_error(NULL));
    cr_expect_eq(reel_safetensors_count(ck), 2);
    reel_st_tensor t = REEL_ST_TENSOR_INIT;
    cr_assert_eq(reel_safetensors_find(ck, "a", &t), REEL_OK);
    cr_expect_eq(t.dtype, REEL_F32);
    cr_expect_str_eq(t.dtype_name, "F32");
    cr_expect_eq(t.ndim, 2);
    cr_expect_eq(t.dims[0], 2);
    cr_expect_eq(t.dims[1], 3);
    cr_expect_eq(t.bytes, 24);
    cr_expect_eq(memcmp(t.data, six, 24), 0);
    cr_expect_eq(t.data, buf + 8 + strlen(h), "the data is the buffer's, not a copy");
    cr_assert_eq(reel_safetensors_tensor(ck, 1, &t), REEL_OK);
    cr_expect_str_eq(t.name, "b", "name order");
    cr_expect_eq(t.dtype, REEL_BF16);
    cr_expect_eq(memcmp(t.data, bf, 4), 0);
    cr_expect_str_eq(reel_safetensors_metadata(ck, "format"), "pt");
    cr_expect_null(reel_safetensors_metadata(ck, "nope"));
    cr_expect_eq(reel_safetensors_find(ck, "c", &t), REEL_E_NOT_FOUND);
    cr_expect(strstr(reel_ctx_last_error(NULL), "'c'") != NULL);
    cr_expect_eq(reel_safetensors_tensor(ck, 2, &t), REEL_E_NOT_FOUND);
    reel_safetensors_close(ck);
    reel_safetensors_close(NULL);
}

Test(safetensors, keeps_dtypes_reel_has_no_storage_for_and_scalars)
{
    const char *h = "{\"n\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[0,8]},"
                    "\"e\":{\"dtype\":\"F16\",\"shape\":[0,4],\"data_offsets\":[8,8]}}";
    int64_t v = 7;
    uint8_t buf[256];
    size_t len = build(buf, h, &v, 8);
    reel_safetensors *ck;
    cr_assert_eq(reel_safetensors_open_buffer(NULL, buf, len, &ck), REEL_OK, "%s", reel_ctx_last_error(NULL));
    reel_st_tensor t = REEL_ST_TENSOR_INIT;
    cr_assert_eq(reel_safetensors_find(ck, "n", &t), REEL_OK);
    cr_expect_eq(t.dtype, REEL_DTYPE_COUNT);
    cr_expect_eq(t.ndim, 0);
    cr_assert_eq(reel_safetensors_find(ck, "e", &t), REEL_OK);
    cr_expect_eq(t.bytes, 0);
    reel_safetensors_close(ck);
}

Test(safetensors, names_the_tensor_of_a_truncated_file)
{
    expect_refused(HDR_A, six, 20, REEL_E_INVALID_ARG, "'a'", "truncated");
}

Test(safetensors, refuses_a_header_past_the_end_or_a_file_too_short)
{
    uint8_t buf[16] = {0xff, 0xff, 0, 0, 0, 0, 0, 0, '{', '}'};
    reel_safetensors *ck;
    cr_expect_eq(reel_safetensors_open_buffer(NULL, buf, 10, &ck), REEL_E_INVALID_ARG);
    cr_expect(strstr(reel_ctx_last_error(NULL), "past the end") != NULL, "%s", reel_ctx_last_error(NULL));
    cr_expect_eq(reel_safetensors_open_buffer(NULL, buf, 5, &ck), REEL_E_INVALID_ARG);
    cr_expect(strstr(reel_ctx_last_error(NULL), "shorter than the 8-byte") != NULL);
    cr_expect_eq(reel_safetensors_open_buffer(NULL, NULL, 0, &ck), REEL_E_INVALID_ARG);
}

Test(safetensors, refuses_malformed_headers_with_the_reason)
{
    expect_refused("{\"a\":", NULL, 0, REEL_E_INVALID_ARG, "header JSON", "line 1");
    expect_refused("[1,2]", NULL, 0, REEL_E_INVALID_ARG, "not a JSON object", NULL);
    expect_refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                   "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
                   six, 4, REEL_E_INVALID_ARG, "duplicate", NULL);
    expect_refused("{\"a\":{\"dtype\":\"F33\",\"shape\":[1],\"data_offsets\":[0,4]}}", six, 4, REEL_E_INVALID_ARG,
                   "'a'", "unknown dtype");
    expect_refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", six, 4, REEL_E_INVALID_ARG,
                   "'a'", "shape dim 0");
    expect_refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4]}}", six, 4, REEL_E_INVALID_ARG,
                   "'a'", "data_offsets");
    expect_refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,12]}}", six, 12,
                   REEL_E_INVALID_ARG, "'a'", "need 16");
    expect_refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,4]}}", six, 4,
                   REEL_E_INVALID_ARG, "'a'", "overflows");
    expect_refused("{\"__metadata__\":{\"k\":1}}", NULL, 0, REEL_E_INVALID_ARG, "__metadata__", "'k'");
}

Test(safetensors, names_a_tensor_that_overlaps_or_leaves_a_gap)
{
    expect_refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,12]},"
                   "\"b\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[8,20]}}",
                   six, 20, REEL_E_INVALID_ARG, "'b'", "back to back");
    expect_refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", six, 12, REEL_E_INVALID_ARG,
                   "'a'", "back to back");
    expect_refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", six, 12, REEL_E_INVALID_ARG,
                   "bytes after the last tensor", NULL);
}

Test(safetensors, opens_a_file_a_directory_and_says_what_is_missing)
{
    mkdir_tmp();
    const char *p = write_file("model.safetensors", HDR_A, six, 24);
    reel_safetensors *ck;
    cr_assert_eq(reel_safetensors_open(NULL, p, &ck), REEL_OK, "%s", reel_ctx_last_error(NULL));
    reel_st_tensor t = REEL_ST_TENSOR_INIT;
    cr_expect_eq(reel_safetensors_find(ck, "a", &t), REEL_OK);
    cr_expect(strstr(t.file, "model.safetensors") != NULL);
    reel_safetensors_close(ck);
    cr_assert_eq(reel_safetensors_open(NULL, dir, &ck), REEL_OK, "%s", reel_ctx_last_error(NULL));
    cr_expect_eq(reel_safetensors_count(ck), 1);
    reel_safetensors_close(ck);
    unlink(p);
    cr_expect_eq(reel_safetensors_open(NULL, dir, &ck), REEL_E_NOT_FOUND);
    cr_expect(strstr(reel_ctx_last_error(NULL), "neither") != NULL, "%s", reel_ctx_last_error(NULL));
    cr_expect_eq(reel_safetensors_open(NULL, p, &ck), REEL_E_NOT_FOUND);
    write_text("short.safetensors", "abc");
    char sp[512];
    snprintf(sp, sizeof sp, "%s/short.safetensors", dir);
    cr_expect_eq(reel_safetensors_open(NULL, sp, &ck), REEL_E_INVALID_ARG);
    cr_expect(strstr(reel_ctx_last_error(NULL), "short.safetensors") != NULL);
    rm_tmp();
}

#define SHARD1 "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}"
#define SHARD2 "{\"y\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}"

static void write_shards(void)
{
    write_file("m-1.safetensors", SHARD1, six, 8);
    write_file("m-2.safetensors", SHARD2, six + 2, 16);
}

Test(safetensors, opens_a_sharded_checkpoint_through_its_index)
{
    mkdir_tmp();
    write_shards();
    write_text("model.safetensors.index.json",
               "{\"metadata\":{\"total_size\":24},\"weight_map\":{\"x\":\"m-1.safetensors\",\"y\":\"m-2.safetensors\"}}");
    reel_safetensors *ck;
    cr_assert_eq(reel_safetensors_open(NULL, dir, &ck), REEL_OK, "%s", reel_ctx_last_error(NULL));
    cr_expect_eq(reel_safetensors_count(ck), 2);
    reel_st_tensor t = REEL_ST_TENSOR_INIT;
    cr_assert_eq(reel_safetensors_find(ck, "y", &t), REEL_OK);
    cr_expect(strstr(t.file, "m-2.safetensors") != NULL);
    cr_expect_eq(memcmp(t.data, six + 2, 16), 0);
    reel_safetensors_close(ck);
    rm_tmp();
}

static void expect_index_refused(const char *index, reel_status want, const char *f1, const char *f2)
{
    write_text("model.safetensors.index.json", index);
    reel_safetensors *ck;
    reel_status st = reel_safetensors_open(NULL, dir, &ck);
    const char *m = reel_ctx_last_error(NULL);
    cr_expect_eq(st, want, "index %s: %s (%s)", index, reel_status_str(st), m);
    cr_expect(strstr(m, f1) != NULL, "message '%s' lacks '%s'", m, f1);
    if (f2) cr_expect(strstr(m, f2) != NULL, "message '%s' lacks '%s'", m, f2);
}

Test(safetensors, refuses_an_index_that_disagrees_with_its_shards)
{
    mkdir_tmp();
    write_shards();
    expect_index_refused("{\"weight_map\":{\"x\":\"m-1.safetensors\",\"y\":\"m-1.safetensors\"}}",
                         REEL_E_NOT_FOUND, "'y'", "does not hold it");
    write_file("m-4.safetensors", "{\"p\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
               "\"q\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", six, 8);
    expect_index_refused("{\"weight_map\":{\"p\":\"m-4.safetensors\"}}", REEL_E_INVALID_ARG, "'q'",
                         "does not list");
    expect_index_refused("{\"weight_map\":{\"x\":\"m-1.safetensors\",\"p\":\"m-1.safetensors\",\"q\":\"m-4.safetensors\"}}",
                         REEL_E_INVALID_ARG, "'p'", "lies in");
    expect_index_refused("{\"weight_map\":{\"x\":\"m-1.safetensors\",\"z\":\"m-3.safetensors\"}}",
                         REEL_E_NOT_FOUND, "'z'", "m-3.safetensors");
    expect_index_refused("{\"weight_map\":{\"x\":\"../m-1.safetensors\"}}", REEL_E_INVALID_ARG, "'x'",
                         "plain file name");
    expect_index_refused("{\"weights\":{}}", REEL_E_INVALID_ARG, "weight_map", NULL);
    write_file("m-3.safetensors", SHARD1, six, 8); /* x again */
    expect_index_refused("{\"weight_map\":{\"x\":\"m-1.safetensors\",\"w\":\"m-3.safetensors\"}}",
                         REEL_E_INVALID_ARG, "'x'", "in both");
    rm_tmp();
}

Test(safetensors, saves_files_it_reads_back)
{
    mkdir_tmp();
    char p[512];
    snprintf(p, sizeof p, "%s/out.safetensors", dir);
    int64_t d1[2] = {2, 3}, d2[1] = {2};
    uint16_t h[2] = {0x3c00, 0x4000};
    reel_st_entry e[2] = {{ REEL_ST_ENTRY_HEAD, "w", REEL_F32, 2, d1, six}, { REEL_ST_ENTRY_HEAD, "h", REEL_F16, 1, d2, h}};
    cr_assert_eq(reel_safetensors_save(NULL, p, e, 2), REEL_OK, "%s", reel_ctx_last_error(NULL));
    reel_safetensors *ck;
    cr_assert_eq(reel_safetensors_open(NULL, p, &ck), REEL_OK, "%s", reel_ctx_last_error(NULL));
    reel_st_tensor t = REEL_ST_TENSOR_INIT;
    cr_assert_eq(reel_safetensors_find(ck, "h", &t), REEL_OK);
    cr_expect_eq(t.dtype, REEL_F16);
    cr_expect_eq(memcmp(t.data, h, 4), 0);
    cr_expect_eq((uintptr_t)t.data % 8, 0, "the header is padded: data starts 8-aligned");
    cr_expect_str_eq(reel_safetensors_metadata(ck, "format"), "pt");
    reel_safetensors_close(ck);
    reel_st_entry dup[2] = {e[0], e[0]};
    cr_expect_eq(reel_safetensors_save(NULL, p, dup, 2), REEL_E_INVALID_ARG);
    cr_expect(strstr(reel_ctx_last_error(NULL), "twice") != NULL);
    rm_tmp();
}

/* A plan whose only parameter is w [rows, 3] f32: y = x @ w^T, x [T, 3]. */
static reel_plan *matmul_plan(reel_ctx **ctx, int64_t rows)
{
    cr_assert_eq(reel_ctx_create(NULL, ctx), REEL_OK);
    reel_graph *g;
    cr_assert_eq(reel_graph_create(*ctx, &g), REEL_OK);
    int64_t xd[2] = {REEL_DIM_TOKENS, 3}, wd[2] = {rows, 3};
    reel_tensor x = reel_input(g, "x", REEL_F32, 2, xd);
    reel_tensor w = reel_param(g, "w", REEL_F32, 2, wd);
    reel_param_defer(g, w);
    reel_output(g, "y", reel_matmul(g, x, w, true));
    reel_plan *p;
    cr_assert_eq(reel_compile(g, NULL, &p), REEL_OK, "%s", reel_ctx_last_error(*ctx));
    reel_graph_destroy(g);
    return p;
}

static void step_y(reel_plan *p, float *y, int n)
{
    const float x[3] = {1, 10, 100};
    cr_assert_eq(reel_plan_set_input(p, "x", x, 1), REEL_OK);
    reel_step_info s = { REEL_STEP_INFO_HEAD, .num_tokens = 1};
    cr_assert_eq(reel_step(p, &s), REEL_OK, "%s", reel_ctx_last_error(NULL));
    const void *out;
    int64_t rows;
    cr_assert_eq(reel_plan_output(p, "y", &out, &rows), REEL_OK);
    memcpy(y, out, (size_t)n * sizeof(float));
}

static reel_safetensors *open_hdr(const char *h, const void *data, size_t n, uint8_t *buf)
{
    size_t len = build(buf, h, data, n);
    reel_safetensors *ck;
    cr_assert_eq(reel_safetensors_open_buffer(NULL, buf, len, &ck), REEL_OK, "%s", reel_ctx_last_error(NULL));
    return ck;
}

Test(safetensors, writes_a_parameter_with_its_dtype_and_shape_checked)
{
    reel_ctx *ctx;
    reel_plan *p = matmul_plan(&ctx, 2);
    uint8_t buf[512];
    reel_safetensors *ck = open_hdr(
        "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
        "\"w3\":{\"dtype\":\"F32\",\"shape\":[3,2],\"data_offsets\":[24,48]},"
        "\"wh\":{\"dtype\":\"F16\",\"shape\":[2,3],\"data_offsets\":[48,60]}}",
        (float[15]){1, 2, 3, 4, 5, 6, 0, 0, 0, 0, 0, 0, 0, 0, 0}, 60, buf);
    const char *w[] = {"w"}, *w3[] = {"w3"}, *wh[] = {"wh"}, *nope[] = {"nope"};
    cr_expect_eq(reel_safetensors_write_param(ck, p, "w", 1, w3), REEL_E_SHAPE);
    const char *m = reel_ctx_last_error(ctx);
    cr_expect(strstr(m, "'w3'") && strstr(m, "'w'") && strstr(m, "[3,2]") && strstr(m, "[2,3]"), "%s", m);
    cr_expect_eq(reel_safetensors_write_param(ck, p, "w", 1, wh), REEL_E_DTYPE);
    m = reel_ctx_last_error(ctx);
    cr_expect(strstr(m, "'wh'") && strstr(m, "F16") && strstr(m, "f32"), "%s", m);
    cr_expect_eq(reel_safetensors_write_param(ck, p, "w", 1, nope), REEL_E_NOT_FOUND);
    cr_expect(strstr(reel_ctx_last_error(ctx), "'nope'") != NULL);
    cr_expect_eq(reel_safetensors_write_param(ck, p, "v", 1, w), REEL_E_NOT_FOUND);
    cr_expect(strstr(reel_ctx_last_error(ctx), "'v'") != NULL);
    /* refused writes left the parameter unwritten: the step says so */
    reel_step_info s = { REEL_STEP_INFO_HEAD, .num_tokens = 1};
    const float x[3] = {1, 10, 100};
    reel_plan_set_input(p, "x", x, 1);
    cr_expect_neq(reel_step(p, &s), REEL_OK);
    cr_assert_eq(reel_safetensors_write_param(ck, p, "w", 1, w), REEL_OK, "%s", reel_ctx_last_error(ctx));
    float y[2];
    step_y(p, y, 2);
    cr_expect_eq(y[0], 321.0f);
    cr_expect_eq(y[1], 654.0f);
    reel_safetensors_close(ck);
    reel_plan_destroy(p);
    reel_ctx_destroy(ctx);
}

Test(safetensors, stacks_parts_along_dim_0_into_one_parameter)
{
    reel_ctx *ctx;
    reel_plan *p = matmul_plan(&ctx, 3);
    uint8_t buf[512];
    reel_safetensors *ck = open_hdr(
        "{\"g\":{\"dtype\":\"F32\",\"shape\":[1,3],\"data_offsets\":[0,12]},"
        "\"u\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[12,36]},"
        "\"v\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[36,52]}}",
        (float[13]){1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 0, 0, 0}, 52, buf);
    const char *gu[] = {"g", "u"}, *gg[] = {"g", "g"}, *gv[] = {"g", "v"};
    cr_expect_eq(reel_safetensors_write_param(ck, p, "w", 2, gg), REEL_E_SHAPE);
    cr_expect(strstr(reel_ctx_last_error(ctx), "2 rows") != NULL, "%s", reel_ctx_last_error(ctx));
    cr_expect_eq(reel_safetensors_write_param(ck, p, "w", 2, gv), REEL_E_SHAPE);
    cr_expect(strstr(reel_ctx_last_error(ctx), "'v'") != NULL, "%s", reel_ctx_last_error(ctx));
    cr_assert_eq(reel_safetensors_write_param(ck, p, "w", 2, gu), REEL_OK, "%s", reel_ctx_last_error(ctx));
    float y[3];
    step_y(p, y, 3);
    cr_expect_eq(y[0], 321.0f);
    cr_expect_eq(y[1], 654.0f);
    cr_expect_eq(y[2], 987.0f);
    reel_safetensors_close(ck);
    reel_plan_destroy(p);
    reel_ctx_destroy(ctx);
}
