/* L6 weights/: safetensors checkpoints (include/reel/safetensors.h).
 *
 * Open maps each file read-only and checks its whole header with jansson
 * before anything is handed out; the tensors of all files go into one array
 * sorted by name (binary search). Writing a parameter copies from the
 * mapping straight into the plan's parameter (runtime/plan_io.c), part by part
 * for a stacked one, so the host never holds a second copy. */
#include "core/abi.h"
#include "reel/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/ctx.h"
#include "core/err.h"
#include "core/halloc.h"
#include "core/shape.h"
#include "runtime/plan.h"

/* The reference implementation's bound: a larger header is refused before
 * it is parsed. */
#define ST_MAX_HEADER ((uint64_t)100000000)
/* An index is a map of names to file names: a few MB for the largest models. */
#define ST_MAX_INDEX ((size_t)64 << 20)

typedef struct st_dtype {
    const char *name;
    size_t size;
    reel_dtype dt; /* REEL_DTYPE_COUNT: no reel storage for it */
} st_dtype;

static const st_dtype st_dtypes[] = {
    {"F32", 4, REEL_F32},  {"F16", 2, REEL_F16},  {"BF16", 2, REEL_BF16}, {"I32", 4, REEL_I32},
    {"F64", 8, REEL_DTYPE_COUNT}, {"I64", 8, REEL_DTYPE_COUNT}, {"U64", 8, REEL_DTYPE_COUNT},
    {"U32", 4, REEL_DTYPE_COUNT}, {"I16", 2, REEL_DTYPE_COUNT}, {"U16", 2, REEL_DTYPE_COUNT},
    {"I8", 1, REEL_DTYPE_COUNT},  {"U8", 1, REEL_DTYPE_COUNT},  {"BOOL", 1, REEL_DTYPE_COUNT},
    {"F8_E4M3", 1, REEL_DTYPE_COUNT}, {"F8_E5M2", 1, REEL_DTYPE_COUNT}, {"F8_E8M0", 1, REEL_DTYPE_COUNT},
};

static const st_dtype *st_dtype_find(const char *name)
{
    for (size_t i = 0; i < sizeof st_dtypes / sizeof st_dtypes[0]; i++)
        if (strcmp(st_dtypes[i].name, name) == 0)
            return &st_dtypes[i];
    return NULL;
}

static const char *st_dtype_of(reel_dtype dt)
{
    for (size_t i = 0; i < sizeof st_dtypes / sizeof st_dtypes[0]; i++)
        if (st_dtypes[i].dt == dt && dt != REEL_DTYPE_COUNT)
            return st_dtypes[i].name;
    return NULL;
}

typedef struct st_file {
    char *path;
    void *map;           /* NULL: not mapped (a borrowed buffer, or an empty file) */
    size_t map_len;
    const uint8_t *data; /* the data section */
    size_t data_len;
} st_file;

typedef struct st_entry {
    char *name;
    const st_dtype *dt;
    int ndim;
    int64_t dims[REEL_ST_MAX_DIMS];
    size_t begin, bytes; /* in the file's data section */
    int file;
} st_entry;

struct reel_safetensors {
    reel_ctx *ctx;
    reel_err *err;
    st_file *files;
    int nfiles;
    st_entry *e;
    int n, cap;
    char **meta; /* key, value, key, value ... of the first file */
    int nmeta;
};

static reel_err *err_of(reel_ctx *ctx) { return ctx ? &ctx->err : NULL; }

/* Puts "<head>: " before the message recorded, on the context or (none)
 * on the thread, which reel_err_prefix leaves alone. */
static reel_status prefix_err(reel_err *e, reel_status st, const char *head)
{
    char prev[REEL_ERRMSG_MAX];
    if (e)
        reel_err_copy(e, prev, sizeof prev);
    else
        reel_err_copy_thread(prev, sizeof prev);
    return reel_seterr(e, st, "%s: %s", head, prev);
}

/* ---- one file's header ---------------------------------------------------- */

static uint64_t le64(const uint8_t *b)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | b[i];
    return v;
}

static reel_status push_entry(reel_safetensors *ck, st_entry *en)
{
    if (ck->n == ck->cap) {
        int cap = ck->cap ? 2 * ck->cap : 64;
        st_entry *e = reel_hrealloc(ck->e, (size_t)cap * sizeof *e);
        if (!e)
            return reel_seterr(ck->err, REEL_E_OOM, "safetensors: out of host memory for the tensor table");
        ck->e = e;
        ck->cap = cap;
    }
    ck->e[ck->n++] = *en;
    return REEL_OK;
}

/* A non-negative integer of JSON that fits v. */
static bool json_u64(const json_t *j, uint64_t *v)
{
    if (!json_is_integer(j) || json_integer_value(j) < 0)
        return false;
    *v = (uint64_t)json_integer_value(j);
    return true;
}

/* One tensor's entry of file f; appended to ck on success. */
static reel_status parse_entry(reel_safetensors *ck, int f, const char *name, const json_t *v)
{
    const st_file *fi = &ck->files[f];
    const char *fp = fi->path;
    if (!json_is_object(v))
        return reel_seterr(ck->err, REEL_E_INVALID_ARG, "%s: tensor '%s': its entry is not a JSON object", fp, name);
    const json_t *jd = json_object_get(v, "dtype"), *js = json_object_get(v, "shape"),
                 *jo = json_object_get(v, "data_offsets");
    if (!json_is_string(jd))
        return reel_seterr(ck->err, REEL_E_INVALID_ARG, "%s: tensor '%s': no \"dtype\" string", fp, name);
    st_entry en = {.file = f};
    en.dt = st_dtype_find(json_string_value(jd));
    if (!en.dt)
        return reel_seterr(ck->err, REEL_E_INVALID_ARG, "%s: tensor '%s': unknown dtype \"%.32s\"", fp, name,
                           json_string_value(jd));
    if (!json_is_array(js))
        return reel_seterr(ck->err, REEL_E_INVALID_ARG, "%s: tensor '%s': no \"shape\" array", fp, name);
    if (json_array_size(js) > REEL_ST_MAX_DIMS)
        return reel_seterr(ck->err, REEL_E_INVALID_ARG, "%s: tensor '%s': %zu dims, reel reads at most %d", fp,
                           name, json_array_size(js), REEL_ST_MAX_DIMS);
    en.ndim = (int)json_array_size(js);
    uint64_t numel = 1;
    for (int i = 0; i < en.ndim; i++) {
        uint64_t d;
        if (!json_u64(json_array_get(js, (size_t)i), &d) || d > (uint64_t)INT64_MAX)
            return reel_seterr(ck->err, REEL_E_INVALID_ARG, "%s: tensor '%s': shape dim %d is not a non-negative "
                               "integer", fp, name, i);
        en.dims[i] = (int64_t)d;
        if (__builtin_mul_overflow(numel, d, &numel))
            return reel_seterr(ck->err, REEL_E_INVALID_ARG, "%s: tensor '%s': its element count overflows 64 bits",
                               fp, name);
    }
    uint64_t bytes, b, e;
    if (__builtin_mul_overflow(numel, (uint64_t)en.dt->size, &bytes))
        return reel_seterr(ck->err, REEL_E_INVALID_ARG, "%s: tensor '%s': its byte size overflows 64 bits", fp,
                           name);
    if (!json_is_array(jo) || json_array_size(jo) != 2 || !json_u64(json_array_get(jo, 0), &b) ||
        !json_u64(json_array_get(jo, 1), &e))
        return reel_seterr(ck->err, REEL_E_INVALID_ARG, "%s: tensor '%s': \"data_offsets\" is not two "
                           "non-negative integers", fp, name);
    if (e < b)
        return reel_seterr(ck->err, REEL_E_INVALID_ARG, "%s: tensor '%s': data_offsets [%llu, %llu] end before "
                           "they begin", fp, name, (unsigned long long)b, (unsigned long long)e);
    if (e > fi->data_len)
        return reel_seterr(ck->err, REEL_E_INVALID_ARG, "%s: tensor '%s': its data ends at byte %llu of the data "
                           "section, which holds %zu bytes (the file is truncated)", fp, name,
                           (unsigned long long)e, fi->data_len);
    if (e - b != bytes)
        return reel_seterr(ck->err, REEL_E_INVALID_ARG, "%s: tensor '%s': data_offsets [%llu, %llu] hold %llu "
                           "bytes, its dtype %s and shape need %llu", fp, name, (unsigned long long)b,
                           (unsigned long long)e, (unsigned long long)(e - b), en.dt->name,
                           (unsigned long long)bytes);
    en.begin = (size_t)b;
    en.bytes = (size_t)bytes;
    en.name = reel_hstrdup(name);
    if (!en.name)
        return reel_seterr(ck->err, REEL_E_OOM, "safetensors: out of host memory");
    reel_status st = push_entry(ck, &en);
    if (st != REEL_OK)
        reel_hfree(en.name);
    return st;
}

static reel_status parse_metadata(reel_safetensors *ck, int f, const json_t *m)
{
    const char *fp = ck->files[f].path;
    if (!json_is_object(m))
        return reel_seterr(ck->err, REEL_E_INVALID_ARG, "%s: \"__metadata__\" is not a JSON object", fp);
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)m, k, v) {
        if (!json_is_string(v))
            return reel_seterr(ck->err, REEL_E_INVALID_ARG, "%s: \"__metadata__\" value of '%s' is not a string",
                               fp, k);
    }
    if (f != 0 || ck->meta)
        return REEL_OK;
    size_t n = json_object_size(m);
    ck->meta = reel_hcalloc(2 * n + 1, sizeof *ck->meta);
    if (!ck->meta)
        return reel_seterr(ck->err, REEL_E_OOM, "safetensors: out of host memory");
    json_object_foreach((json_t *)m, k, v) {
        ck->meta[2 * ck->nmeta] = reel_hstrdup(k);
        ck->meta[2 * ck->nmeta + 1] = reel_hstrdup(json_string_value(v));
        ck->nmeta++;
        if (!ck->meta[2 * ck->nmeta - 2] || !ck->meta[2 * ck->nmeta - 1])
            return reel_seterr(ck->err, REEL_E_OOM, "safetensors: out of host memory");
    }
    return REEL_OK;
}

static int cmp_offset(const void *a, const void *b)
{
    const st_entry *x = *(const st_entry *const *)a, *y = *(const st_entry *const *)b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return (x->bytes > y->bytes) - (x->bytes < y->bytes); /* empty tensors first at a shared offset */
}

/* The tensors of file f (entries first .. ck->n-1) lie back to back and
 * cover its data section exactly, as the reference implementation wants. */
static reel_status check_coverage(reel_safetensors *ck, int f, int first)
{
    int n = ck->n - first;
    const st_file *fi = &ck->files[f];
    st_entry **by = reel_hcalloc(n > 0 ? (size_t)n : 1, sizeof *by);
    if (!by)
        return reel_seterr(ck->err, REEL_E_OOM, "safetensors: out of host memory");
    for (int i = 0; i < n; i++)
        by[i] = &ck->e[first + i];
    if (n > 1)
        qsort(by, (size_t)n, sizeof *by, cmp_offset);
    reel_status st = REEL_OK;
    size_t at = 0;
    const char *prev = NULL;
    for (int i = 0; i < n && st == REEL_OK; i++) {
        if (by[i]->begin != at)
            st = reel_seterr(ck->err, REEL_E_INVALID_ARG, "%s: tensor '%s': its data begins at byte %zu, %s "
                             "ends at byte %zu (tensors must be stored back to back, without overlap or gap)",
                             fi->path, by[i]->name, by[i]->begin, prev ? "the tensor before it" : "the data section "
                             "begins at 0 and", at);
        at = by[i]->begin + by[i]->bytes;
        prev = by[i]->name;
    }
    if (st == REEL_OK && at != fi->data_len)
        st = reel_seterr(ck->err, REEL_E_INVALID_ARG, "%s: the tensors end at byte %zu of the data section, which "
                         "holds %zu bytes (%s)", fi->path, at, fi->data_len,
                         n ? "bytes after the last tensor" : "no tensors");
    reel_hfree(by);
    return st;
}

/* Parses file f: bytes [0, size) hold the whole file. */
static reel_status parse_file(reel_safetensors *ck, int f, const uint8_t *bytes, size_t size)
{
    st_file *fi = &ck->files[f];
    if (size < 8)
        return reel_seterr(ck->err, REEL_E_INVALID_ARG, "%s: %zu bytes, shorter than the 8-byte header length "
                           "(not a safetensors file)", fi->path, size);
    uint64_t hn = le64(bytes);
    if (hn > size - 8)
        return reel_seterr(ck->err, REEL_E_INVALID_ARG, "%s: header length %llu runs past the end of the file "
                           "(%zu bytes): truncated, or not a safetensors file", fi->path, (unsigned long long)hn,
                           size);
    if (hn > ST_MAX_HEADER)
        return reel_seterr(ck->err, REEL_E_INVALID_ARG, "%s: header length %llu is over the %llu bytes reel reads",
                           fi->path, (unsigned long long)hn, (unsigned long long)ST_MAX_HEADER);
    if (hn < 2 || bytes[8] != '{')
        return reel_seterr(ck->err, REEL_E_INVALID_ARG, "%s: the header is not a JSON object (it must begin "
                           "with '{')", fi->path);
    fi->data = bytes + 8 + hn;
    fi->data_len = size - 8 - (size_t)hn;
    json_error_t je;
    json_t *root = json_loadb((const char *)bytes + 8, (size_t)hn, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return reel_seterr(ck->err, REEL_E_INVALID_ARG, "%s: header JSON, line %d column %d: %s", fi->path,
                           je.line, je.column, je.text);
    reel_status st = REEL_OK;
    if (!json_is_object(root))
        st = reel_seterr(ck->err, REEL_E_INVALID_ARG, "%s: the header is not a JSON object", fi->path);
    int first = ck->n;
    const char *k;
    json_t *v;
    if (st == REEL_OK) {
        json_object_foreach(root, k, v) {
            st = strcmp(k, "__metadata__") == 0 ? parse_metadata(ck, f, v) : parse_entry(ck, f, k, v);
            if (st != REEL_OK)
                break;
        }
    }
    json_decref(root);
    if (st == REEL_OK)
        st = check_coverage(ck, f, first);
    return st;
}

/* ---- files ---------------------------------------------------------------- */

static reel_status add_file(reel_safetensors *ck, const char *path, int *out)
{
    st_file *fs = reel_hrealloc(ck->files, (size_t)(ck->nfiles + 1) * sizeof *fs);
    if (!fs)
        return reel_seterr(ck->err, REEL_E_OOM, "safetensors: out of host memory");
    ck->files = fs;
    st_file *fi = &fs[ck->nfiles];
    memset(fi, 0, sizeof *fi);
    fi->path = reel_hstrdup(path);
    if (!fi->path)
        return reel_seterr(ck->err, REEL_E_OOM, "safetensors: out of host memory");
    *out = ck->nfiles++;
    return REEL_OK;
}

static reel_status map_file(reel_safetensors *ck, const char *path, int *out)
{
    int f = -1;
    REEL_TRY(add_file(ck, path, &f));
    st_file *fi = &ck->files[f];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return reel_seterr(ck->err, errno == ENOENT ? REEL_E_NOT_FOUND : REEL_E_BACKEND, "%s: cannot open: %s",
                           path, strerror(errno));
    struct stat sb;
    reel_status st = REEL_OK;
    if (fstat(fd, &sb) != 0)
        st = reel_seterr(ck->err, REEL_E_BACKEND, "%s: fstat: %s", path, strerror(errno));
    else if (!S_ISREG(sb.st_mode))
        st = reel_seterr(ck->err, REEL_E_INVALID_ARG, "%s: not a regular file", path);
    else if (sb.st_size >= 8) {
        void *m = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED)
            st = reel_seterr(ck->err, REEL_E_BACKEND, "%s: mmap of %lld bytes: %s", path, (long long)sb.st_size,
                             strerror(errno));
        else {
            fi->map = m;
            fi->map_len = (size_t)sb.st_size;
        }
    }
    close(fd);
    if (st == REEL_OK)
        st = parse_file(ck, f, fi->map ? fi->map : (const uint8_t *)"", fi->map ? fi->map_len : (size_t)sb.st_size);
    if (st == REEL_OK)
        *out = f;
    return st;
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp(((const st_entry *)a)->name, ((const st_entry *)b)->name);
}

/* Sorts the table by name and refuses a name held twice. */
static reel_status finish_table(reel_safetensors *ck)
{
    if (ck->n > 1)
        qsort(ck->e, (size_t)ck->n, sizeof *ck->e, cmp_name);
    for (int i = 1; i < ck->n; i++)
        if (strcmp(ck->e[i - 1].name, ck->e[i].name) == 0)
            return reel_seterr(ck->err, REEL_E_INVALID_ARG, "tensor '%s' is in both %s and %s", ck->e[i].name,
                               ck->files[ck->e[i - 1].file].path, ck->files[ck->e[i].file].path);
    return REEL_OK;
}

static const st_entry *lookup(const reel_safetensors *ck, const char *name)
{
    st_entry key = {.name = (char *)name};
    return ck->n ? bsearch(&key, ck->e, (size_t)ck->n, sizeof *ck->e, cmp_name) : NULL;
}

/* ---- the index ------------------------------------------------------------ */

static reel_status read_small(reel_safetensors *ck, const char *path, char **buf, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return reel_seterr(ck->err, errno == ENOENT ? REEL_E_NOT_FOUND : REEL_E_BACKEND, "%s: cannot open: %s",
                           path, strerror(errno));
    reel_status st = REEL_OK;
    size_t n = 0, cap = 0;
    char *b = NULL;
    for (;;) {
        if (n == cap) {
            if (cap >= ST_MAX_INDEX) {
                st = reel_seterr(ck->err, REEL_E_INVALID_ARG, "%s: over the %zu bytes reel reads of an index",
                                 path, ST_MAX_INDEX);
                break;
            }
            cap = cap ? 2 * cap : 16384;
            char *nb = reel_hrealloc(b, cap);
            if (!nb) {
                st = reel_seterr(ck->err, REEL_E_OOM, "%s: out of host memory", path);
                break;
            }
            b = nb;
        }
        size_t r = fread(b + n, 1, cap - n, f);
        if (r == 0) {
            if (ferror(f))
                st = reel_seterr(ck->err, REEL_E_BACKEND, "%s: read failed", path);
            break;
        }
        n += r;
    }
    fclose(f);
    if (st != REEL_OK) {
        reel_hfree(b);
        return st;
    }
    *buf = b;
    *len = n;
    return REEL_OK;
}

/* A shard's name in the index: a plain file name beside the index. */
static bool plain_name(const char *s)
{
    return *s && strcmp(s, ".") != 0 && strcmp(s, "..") != 0 && !strchr(s, '/');
}

static reel_status open_shards(reel_safetensors *ck, const char *ipath, const json_t *map, const char *dir)
{
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)map, k, v) {
        if (!json_is_string(v) || !plain_name(json_string_value(v)))
            return reel_seterr(ck->err, REEL_E_INVALID_ARG, "%s: weight_map entry of tensor '%s' is not a plain "
                               "file name beside the index", ipath, k);
        const char *shard = json_string_value(v);
        bool seen = false;
        size_t dl = strlen(dir), sl = strlen(shard);
        char *path = reel_halloc(dl + sl + 2);
        if (!path)
            return reel_seterr(ck->err, REEL_E_OOM, "safetensors: out of host memory");
        snprintf(path, dl + sl + 2, "%s/%s", dir, shard);
        for (int f = 0; f < ck->nfiles && !seen; f++)
            seen = strcmp(ck->files[f].path, path) == 0;
        int f;
        reel_status st = seen ? REEL_OK : map_file(ck, path, &f);
        if (st != REEL_OK && !seen) {
            char head[REEL_ERRMSG_MAX];
            snprintf(head, sizeof head, "%s: shard '%s' of tensor '%s'", ipath, shard, k);
            prefix_err(ck->err, st, head);
        }
        reel_hfree(path);
        REEL_TRY(st);
    }
    return REEL_OK;
}

/* The map and the shards agree: each mapped tensor is in its shard, and
 * each shard's tensor is mapped there. */
static reel_status check_map(reel_safetensors *ck, const char *ipath, const json_t *map, size_t dirlen)
{
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)map, k, v) {
        const st_entry *e = lookup(ck, k);
        const char *shard = json_string_value(v);
        if (!e)
            return reel_seterr(ck->err, REEL_E_NOT_FOUND, "%s: tensor '%s' is mapped to shard '%s', which does "
                               "not hold it", ipath, k, shard);
        const char *in = ck->files[e->file].path + dirlen + 1;
        if (strcmp(in, shard) != 0)
            return reel_seterr(ck->err, REEL_E_INVALID_ARG, "%s: tensor '%s' is mapped to shard '%s' but lies in "
                               "'%s'", ipath, k, shard, in);
    }
    for (int i = 0; i < ck->n; i++)
        if (!json_object_get(map, ck->e[i].name))
            return reel_seterr(ck->err, REEL_E_INVALID_ARG, "%s: shard '%s' holds tensor '%s', which the index "
                               "does not list", ipath, ck->files[ck->e[i].file].path + dirlen + 1, ck->e[i].name);
    return REEL_OK;
}

static reel_status open_index(reel_safetensors *ck, const char *ipath)
{
    char *buf = NULL;
    size_t len = 0;
    REEL_TRY(read_small(ck, ipath, &buf, &len));
    json_error_t je;
    json_t *root = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &je);
    reel_hfree(buf);
    if (!root)
        return reel_seterr(ck->err, REEL_E_INVALID_ARG, "%s: JSON, line %d column %d: %s", ipath, je.line,
                           je.column, je.text);
    reel_status st = REEL_OK;
    const json_t *map = json_is_object(root) ? json_object_get(root, "weight_map") : NULL;
    if (!json_is_object(map))
        st = reel_seterr(ck->err, REEL_E_INVALID_ARG, "%s: no \"weight_map\" object", ipath);
    const char *slash = strrchr(ipath, '/');
    size_t dl = slash ? (size_t)(slash - ipath) : 1;
    char *dir = reel_halloc(dl + 1);
    if (!dir && st == REEL_OK)
        st = reel_seterr(ck->err, REEL_E_OOM, "safetensors: out of host memory");
    if (dir) {
        memcpy(dir, slash ? ipath : ".", dl);
        dir[dl] = '\0';
    }
    if (st == REEL_OK)
        st = open_shards(ck, ipath, map, dir);
    if (st == REEL_OK)
        st = finish_table(ck);
    if (st == REEL_OK)
        st = check_map(ck, ipath, map, dl);
    reel_hfree(dir);
    json_decref(root);
    return st;
}

/* ---- public --------------------------------------------------------------- */

static reel_status new_ck(reel_ctx *ctx, reel_safetensors **out)
{
    reel_safetensors *ck = reel_hcalloc(1, sizeof *ck);
    if (!ck)
        return reel_seterr(err_of(ctx), REEL_E_OOM, "safetensors: out of host memory");
    ck->ctx = ctx;
    ck->err = err_of(ctx);
    *out = ck;
    return REEL_OK;
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

static bool exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}

reel_status reel_safetensors_open(reel_ctx *ctx, const char *path, reel_safetensors **out)
{
    if (out)
        *out = NULL;
    if (!path || !out)
        return reel_seterr(err_of(ctx), REEL_E_INVALID_ARG, "safetensors_open: NULL path or out");
    reel_safetensors *ck = NULL;
    REEL_TRY(new_ck(ctx, &ck));
    reel_status st = REEL_OK;
    struct stat sb;
    if (stat(path, &sb) != 0) {
        st = reel_seterr(ck->err, errno == ENOENT ? REEL_E_NOT_FOUND : REEL_E_BACKEND, "%s: %s", path,
                         strerror(errno));
    } else if (S_ISDIR(sb.st_mode)) {
        size_t n = strlen(path) + 40;
        char *p = reel_halloc(n);
        if (!p) {
            st = reel_seterr(ck->err, REEL_E_OOM, "safetensors: out of host memory");
        } else {
            snprintf(p, n, "%s/model.safetensors.index.json", path);
            if (exists(p)) {
                st = open_index(ck, p);
            } else {
                snprintf(p, n, "%s/model.safetensors", path);
                int f;
                if (exists(p)) {
                    st = map_file(ck, p, &f);
                    if (st == REEL_OK)
                        st = finish_table(ck);
                } else {
                    st = reel_seterr(ck->err, REEL_E_NOT_FOUND, "%s: holds neither model.safetensors.index.json "
                                     "nor model.safetensors", path);
                }
            }
            reel_hfree(p);
        }
    } else if (ends_with(path, ".json")) {
        st = open_index(ck, path);
    } else {
        int f;
        st = map_file(ck, path, &f);
        if (st == REEL_OK)
            st = finish_table(ck);
    }
    if (st != REEL_OK) {
        reel_safetensors_close(ck);
        return st;
    }
    *out = ck;
    return REEL_OK;
}

reel_status reel_safetensors_open_buffer(reel_ctx *ctx, const void *data, size_t size, reel_safetensors **out)
{
    if (out)
        *out = NULL;
    if (!out || (!data && size))
        return reel_seterr(err_of(ctx), REEL_E_INVALID_ARG, "safetensors_open_buffer: NULL data or out");
    reel_safetensors *ck = NULL;
    REEL_TRY(new_ck(ctx, &ck));
    int f = -1;
    reel_status st = add_file(ck, "(buffer)", &f);
    if (st == REEL_OK)
        st = parse_file(ck, f, data ? data : "", size);
    if (st == REEL_OK)
        st = finish_table(ck);
    if (st != REEL_OK) {
        reel_safetensors_close(ck);
        return st;
    }
    *out = ck;
    return REEL_OK;
}

void reel_safetensors_close(reel_safetensors *ck)
{
    if (!ck)
        return;
    for (int f = 0; f < ck->nfiles; f++) {
        if (ck->files[f].map)
            munmap(ck->files[f].map, ck->files[f].map_len);
        reel_hfree(ck->files[f].path);
    }
    for (int i = 0; i < ck->n; i++)
        reel_hfree(ck->e[i].name);
    if (ck->meta)
        for (int i = 0; i < 2 * ck->nmeta; i++)
            reel_hfree(ck->meta[i]);
    reel_hfree(ck->meta);
    reel_hfree(ck->e);
    reel_hfree(ck->files);
    reel_hfree(ck);
}

int reel_safetensors_count(const reel_safetensors *ck) { return ck ? ck->n : 0; }

/* Fills the caller's struct (REEL_ST_TENSOR_INIT) up to its size. */
static reel_status info_of(const reel_safetensors *ck, const st_entry *e, reel_st_tensor *out)
{
    reel_st_tensor r = REEL_ST_TENSOR_INIT;
    r.name = e->name;
    r.dtype_name = e->dt->name;
    r.dtype = e->dt->dt;
    r.ndim = e->ndim;
    memcpy(r.dims, e->dims, sizeof r.dims);
    r.data = ck->files[e->file].data + e->begin;
    r.bytes = e->bytes;
    r.file = ck->files[e->file].path;
    return reel_struct_fill(out, &r, &reel_abi_st_tensor, ck->err);
}

reel_status reel_safetensors_tensor(const reel_safetensors *ck, int i, reel_st_tensor *out)
{
    if (!ck || !out)
        return reel_seterr(ck ? ck->err : NULL, REEL_E_INVALID_ARG, "safetensors_tensor: NULL checkpoint or out");
    if (i < 0 || i >= ck->n)
        return reel_seterr(ck->err, REEL_E_NOT_FOUND, "safetensors_tensor: index %d, the checkpoint has %d "
                           "tensors", i, ck->n);
    return info_of(ck, &ck->e[i], out);
}

reel_status reel_safetensors_find(const reel_safetensors *ck, const char *name, reel_st_tensor *out)
{
    if (!ck || !name || !out)
        return reel_seterr(ck ? ck->err : NULL, REEL_E_INVALID_ARG, "safetensors_find: NULL checkpoint, name or "
                           "out");
    const st_entry *e = lookup(ck, name);
    if (!e)
        return reel_seterr(ck->err, REEL_E_NOT_FOUND, "the checkpoint has no tensor '%s'", name);
    return info_of(ck, e, out);
}

const char *reel_safetensors_metadata(const reel_safetensors *ck, const char *key)
{
    if (!ck || !key || !ck->meta)
        return NULL;
    for (int i = 0; i < ck->nmeta; i++)
        if (strcmp(ck->meta[2 * i], key) == 0)
            return ck->meta[2 * i + 1];
    return NULL;
}

static const char *fmt_dims(int ndim, const int64_t *dims, char *buf, size_t len)
{
    size_t at = (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < ndim && at < len; i++)
        at += (size_t)snprintf(buf + at, len - at, "%s%lld", i ? "," : "", (long long)dims[i]);
    if (at < len)
        snprintf(buf + at, len - at, "]");
    return buf;
}

/* Checks part i of nparts against parameter `param` of shape ps; *rows0
 * accumulates the parts' first dims. */
static reel_status check_part(const reel_plan *p, const char *param, const reel_shape *ps, const st_entry *e,
                              int nparts, int64_t *rows0)
{
    char a[96], b[96];
    if (e->dt->dt != ps->dtype)
        return reel_seterr(p->err, REEL_E_DTYPE, "tensor '%s' is %s, parameter '%s' is %s", e->name, e->dt->name,
                           param, reel_dtype_name(ps->dtype));
    bool ok = e->ndim == ps->ndim;
    for (int d = nparts > 1 ? 1 : 0; ok && d < ps->ndim; d++)
        ok = e->dims[d] == ps->dims[d];
    if (!ok || ps->ndim == 0)
        return reel_seterr(p->err, REEL_E_SHAPE, "tensor '%s' has shape %s, parameter '%s' is %s%s", e->name,
                           fmt_dims(e->ndim, e->dims, a, sizeof a), param, fmt_dims(ps->ndim, ps->dims, b, sizeof b),
                           nparts > 1 ? " (parts are stacked along dim 0: the other dims must match)" : "");
    *rows0 += e->dims[0];
    return REEL_OK;
}

reel_status reel_safetensors_write_param(const reel_safetensors *ck, reel_plan *p, const char *param, int nparts,
                                         const char *const *tensors)
{
    if (!p)
        return reel_seterr(NULL, REEL_E_INVALID_ARG, "safetensors_write_param: NULL plan");
    if (!ck || !param || nparts < 1 || nparts > REEL_ST_MAX_PARTS || !tensors)
        return reel_seterr(p->err, REEL_E_INVALID_ARG, "safetensors_write_param: NULL checkpoint, parameter or "
                           "tensors, or %d parts (1 to %d)", nparts, REEL_ST_MAX_PARTS);
    int t = reel_plan_find_tensor(p, param, REEL_T_PARAM);
    if (t < 0)
        return reel_seterr(p->err, REEL_E_NOT_FOUND, "safetensors_write_param: the plan has no parameter named "
                           "'%s'", param);
    const reel_shape *ps = &p->tensors[t].shape;
    int64_t rows0 = 0;
    /* Every part checked before the first is written (nothing written
     * unless all check); looked up again to write, so that an expert stack
     * of hundreds of parts needs no array of them. */
    for (int i = 0; i < nparts; i++) {
        if (!tensors[i])
            return reel_seterr(p->err, REEL_E_INVALID_ARG, "safetensors_write_param '%s': part %d is NULL", param,
                               i);
        const st_entry *e = lookup(ck, tensors[i]);
        if (!e)
            return reel_seterr(p->err, REEL_E_NOT_FOUND, "parameter '%s': the checkpoint has no tensor '%s'", param,
                               tensors[i]);
        REEL_TRY(check_part(p, param, ps, e, nparts, &rows0));
    }
    if (rows0 != ps->dims[0]) {
        char b[96];
        return reel_seterr(p->err, REEL_E_SHAPE, "parameter '%s' is %s: its %d parts stack to %lld rows along dim "
                           "0, not %lld", param, fmt_dims(ps->ndim, ps->dims, b, sizeof b), nparts,
                           (long long)rows0, (long long)ps->dims[0]);
    }
    size_t off = 0;
    for (int i = 0; i < nparts; i++) {
        const st_entry *e = lookup(ck, tensors[i]);
        reel_status st = reel_plan_write_param_part(p, t, off, ck->files[e->file].data + e->begin, e->bytes,
                                                    i == nparts - 1);
        if (st != REEL_OK)
            return reel_err_prefix(p->err, st, "parameter '%s' from tensor '%s'", param, e->name);
        off += e->bytes;
    }
    return REEL_OK;
}

/* ---- save ----------------------------------------------------------------- */

static reel_status save_header(reel_err *err, const reel_st_entry *t, int n, char **out, size_t *hlen,
                               size_t *total)
{
    json_t *root = json_object(), *meta = json_object();
    reel_status st = REEL_OK;
    if (!root || !meta || json_object_set_new(root, "__metadata__", meta) != 0) {
        json_decref(meta);
        st = reel_seterr(err, REEL_E_OOM, "safetensors_save: out of host memory");
        meta = NULL;
    }
    if (st == REEL_OK && json_object_set_new(meta, "format", json_string("pt")) != 0)
        st = reel_seterr(err, REEL_E_OOM, "safetensors_save: out of host memory");
    size_t at = 0;
    for (int i = 0; i < n && st == REEL_OK; i++) {
        const reel_st_entry *e = &t[i];
        const char *dn = e->name ? st_dtype_of(e->dtype) : NULL;
        if (!e->name || !*e->name || !dn || e->ndim < 0 || e->ndim > REEL_ST_MAX_DIMS || (e->ndim && !e->dims) ||
            strcmp(e->name, "__metadata__") == 0) {
            st = reel_seterr(err, REEL_E_INVALID_ARG, "safetensors_save: tensor %d ('%s'): no name, a dtype other "
                             "than f32, f16, bf16 and i32, or ndim outside 0..%d", i, e->name ? e->name : "(null)",
                             REEL_ST_MAX_DIMS);
            break;
        }
        if (json_object_get(root, e->name)) {
            st = reel_seterr(err, REEL_E_INVALID_ARG, "safetensors_save: tensor '%s' is given twice", e->name);
            break;
        }
        uint64_t numel = 1;
        json_t *shape = json_array(), *offs = json_array(), *obj = json_object();
        bool ok = shape && offs && obj;
        for (int d = 0; d < e->ndim && ok; d++) {
            ok = e->dims[d] >= 0 && !__builtin_mul_overflow(numel, (uint64_t)e->dims[d], &numel) &&
                 json_array_append_new(shape, json_integer(e->dims[d])) == 0;
        }
        uint64_t bytes = 0;
        ok = ok && !__builtin_mul_overflow(numel, (uint64_t)reel_dtype_size(e->dtype), &bytes) &&
             bytes <= SIZE_MAX - at && (bytes == 0 || e->data);
        if (!ok) {
            json_decref(shape);
            json_decref(offs);
            json_decref(obj);
            st = reel_seterr(err, REEL_E_INVALID_ARG, "safetensors_save: tensor '%s': a negative dim, a size that "
                             "overflows, or NULL data", e->name);
            break;
        }
        json_array_append_new(offs, json_integer((json_int_t)at));
        json_array_append_new(offs, json_integer((json_int_t)(at + bytes)));
        json_object_set_new(obj, "dtype", json_string(dn));
        json_object_set_new(obj, "shape", shape);
        json_object_set_new(obj, "data_offsets", offs);
        if (json_object_set_new(root, e->name, obj) != 0) {
            st = reel_seterr(err, REEL_E_INVALID_ARG, "safetensors_save: tensor '%s': not a valid UTF-8 name",
                             e->name);
            break;
        }
        at += (size_t)bytes;
    }
    char *s = st == REEL_OK ? json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(root);
    if (st == REEL_OK && !s)
        st = reel_seterr(err, REEL_E_OOM, "safetensors_save: out of host memory");
    if (st != REEL_OK) {
        free(s);
        return st;
    }
    /* Spaces pad the header to 8 bytes, so the data section is aligned. */
    size_t n0 = strlen(s), padded = (n0 + 7) / 8 * 8;
    char *h = reel_halloc(padded);
    if (!h) {
        free(s);
        return reel_seterr(err, REEL_E_OOM, "safetensors_save: out of host memory");
    }
    memcpy(h, s, n0);
    memset(h + n0, ' ', padded - n0);
    free(s);
    *out = h;
    *hlen = padded;
    *total = at;
    return REEL_OK;
}

/* The caller's entries, strided by t[0].size, each over the defaults. */
static reel_status load_entries(reel_err *err, const reel_st_entry *t, int n, reel_st_entry **out)
{
    *out = NULL;
    if (!n)
        return REEL_OK;
    REEL_TRY(reel_struct_check(t, &reel_abi_st_entry, err));
    reel_st_entry *v = reel_hcalloc((size_t)n, sizeof *v);
    if (!v)
        return reel_seterr(err, REEL_E_OOM, "safetensors_save: out of host memory");
    size_t stride = t->size;
    for (int i = 0; i < n; i++) {
        v[i] = (reel_st_entry)REEL_ST_ENTRY_INIT;
        memcpy(&v[i], (const char *)t + (size_t)i * stride, stride);
        if (v[i].magic != REEL_ST_ENTRY_MAGIC || v[i].size != stride) {
            reel_hfree(v);
            return reel_seterr(err, REEL_E_VERSION, "safetensors_save: tensor %d was not initialised with "
                               "REEL_ST_ENTRY_INIT like tensor 0", i);
        }
    }
    *out = v;
    return REEL_OK;
}

static reel_status save_entries(reel_err *err, const char *path, const reel_st_entry *t, int n);

reel_status reel_safetensors_save(reel_ctx *ctx, const char *path, const reel_st_entry *t, int n)
{
    reel_err *err = err_of(ctx);
    if (!path || (!t && n) || n < 0)
        return reel_seterr(err, REEL_E_INVALID_ARG, "safetensors_save: NULL path or tensors, or n < 0");
    reel_st_entry *v;
    REEL_TRY(load_entries(err, t, n, &v));
    reel_status st = save_entries(err, path, v, n);
    reel_hfree(v);
    return st;
}

static reel_status save_entries(reel_err *err, const char *path, const reel_st_entry *t, int n)
{
    char *h = NULL;
    size_t hlen = 0, total = 0;
    REEL_TRY(save_header(err, t, n, &h, &hlen, &total));
    size_t pl = strlen(path) + 16;
    char *tmp = reel_halloc(pl);
    if (!tmp) {
        reel_hfree(h);
        return reel_seterr(err, REEL_E_OOM, "safetensors_save: out of host memory");
    }
    snprintf(tmp, pl, "%s.partial", path);
    reel_status st = REEL_OK;
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        st = reel_seterr(err, REEL_E_BACKEND, "%s: cannot create: %s", tmp, strerror(errno));
    } else {
        uint8_t len8[8];
        for (int i = 0; i < 8; i++)
            len8[i] = (uint8_t)((uint64_t)hlen >> (8 * i));
        bool ok = fwrite(len8, 1, 8, f) == 8 && fwrite(h, 1, hlen, f) == hlen;
        for (int i = 0; i < n && ok; i++) {
            size_t b = 1;
            for (int d = 0; d < t[i].ndim; d++)
                b *= (size_t)t[i].dims[d];
            b *= reel_dtype_size(t[i].dtype);
            ok = b == 0 || fwrite(t[i].data, 1, b, f) == b;
        }
        if (fclose(f) != 0)
            ok = false;
        if (!ok)
            st = reel_seterr(err, REEL_E_BACKEND, "%s: write failed: %s", tmp, strerror(errno));
        else if (rename(tmp, path) != 0)
            st = reel_seterr(err, REEL_E_BACKEND, "%s: rename to %s: %s", tmp, path, strerror(errno));
        if (st != REEL_OK)
            unlink(tmp);
    }
    reel_hfree(tmp);
    reel_hfree(h);
    return st;
}
