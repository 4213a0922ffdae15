/* A small JSON writer for the tools' machine-readable output (--json,
 * traces). Keys are written as given (the tools pass plain identifiers);
 * string values are escaped; non-finite numbers become null. */
#ifndef REEL_TOOLS_JSON_H
#define REEL_TOOLS_JSON_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define JSON_MAX_DEPTH 16

typedef struct json_w {
    FILE *f;
    int depth;
    bool first[JSON_MAX_DEPTH];
    bool pretty;
} json_w;

void json_init(json_w *w, FILE *f, bool pretty);
/* key is NULL inside arrays and for the top-level value. */
void json_obj(json_w *w, const char *key);
void json_end_obj(json_w *w);
void json_arr(json_w *w, const char *key);
void json_end_arr(json_w *w);
void json_str(json_w *w, const char *key, const char *v); /* NULL: null */
void json_u64(json_w *w, const char *key, uint64_t v);
void json_i64(json_w *w, const char *key, int64_t v);
void json_num(json_w *w, const char *key, double v);
void json_bool(json_w *w, const char *key, bool v);
void json_null(json_w *w, const char *key);
/* Writes s as a JSON string (quotes included). */
void json_quote(FILE *f, const char *s);

#endif
