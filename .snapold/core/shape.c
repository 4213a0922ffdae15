/* Dtypes and shapes (core/shape.h). */
#include "core/shape.h"

#include <stdio.h>

size_t reel_dtype_size(reel_dtype t)
{
    switch (t) {
    case REEL_F32: return 4;
    case REEL_F16: return 2;
    case REEL_BF16: return 2;
    case REEL_I32: return 4;
    default: return 0;
    }
}

const char *reel_dtype_name(reel_dtype t)
{
    switch (t) {
    case REEL_F32: return "f32";
    case REEL_F16: return "f16";
    case REEL_BF16: return "bf16";
    case REEL_I32: return "i32";
    default: return "unknown";
    }
}

int64_t reel_shape_numel(const reel_shape *s, int64_t rows)
{
    if (!s || s->ndim <= 0)
        return 0;
    int64_t n = 1;
    for (int i = 0; i < s->ndim; i++)
        n *= (i == 0 && s->tokens) ? rows : s->dims[i];
    return n;
}

size_t reel_shape_bytes(const reel_shape *s, int64_t rows)
{
    int64_t n = reel_shape_numel(s, rows);
    return n > 0 ? (size_t)n * reel_dtype_size(s->dtype) : 0;
}

int64_t reel_shape_row_numel(const reel_shape *s)
{
    if (!s || s->ndim <= 0)
        return 0;
    int64_t n = 1;
    for (int i = s->tokens ? 1 : 0; i < s->ndim; i++)
        n *= s->dims[i];
    return n;
}

const char *reel_shape_format(const reel_shape *s, char *buf, size_t len)
{
    if (!buf || len == 0)
        return buf;
    size_t at = 0;
    int n = snprintf(buf, len, "[");
    at = n > 0 ? (size_t)n : 0;
    for (int i = 0; s && i < s->ndim && at < len; i++) {
        const char *sep = i ? "," : "";
        if (i == 0 && s->tokens)
            n = snprintf(buf + at, len - at, "%sT", sep);
        else
            n = snprintf(buf + at, len - at, "%s%lld", sep, (long long)s->dims[i]);
        at += n > 0 ? (size_t)n : 0;
    }
    if (at < len)
        snprintf(buf + at, len - at, "]");
    return buf;
}
