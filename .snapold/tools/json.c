/* The tools' JSON writer (json.h). */
#include "json.h"

#include <inttypes.h>
#include <math.h>

void json_init(json_w *w, FILE *f, bool pretty)
{
    w->f = f;
    w->depth = 0;
    w->first[0] = true;
    w->pretty = pretty;
}

void json_quote(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if (*c == '"' || *c == '\\') fprintf(f, "\\%c", *c);
        else if (*c == '\n') fputs("\\n", f);
        else if (*c == '\t') fputs("\\t", f);
        else if (*c < 0x20) fprintf(f, "\\u%04x", *c);
        else fputc(*c, f);
    }
    fputc('"', f);
}

/* The separator, indentation and key before a value. */
static void lead(json_w *w, const char *key)
{
    if (w->depth > 0) {
        if (!w->first[w->depth]) fputc(',', w->f);
        if (w->pretty) fprintf(w->f, "\n%*s", 2 * w->depth, "");
    }
    w->first[w->depth] = false;
    if (key) {
        json_quote(w->f, key);
        fputs(w->pretty ? ": " : ":", w->f);
    }
}

static void open_(json_w *w, const char *key, char c)
{
    lead(w, key);
    fputc(c, w->f);
    if (w->depth + 1 < JSON_MAX_DEPTH) w->depth++;
    w->first[w->depth] = true;
}

static void close_(json_w *w, char c)
{
    bool empty = w->first[w->depth];
    if (w->depth > 0) w->depth--;
    if (w->pretty && !empty) fprintf(w->f, "\n%*s", 2 * w->depth, "");
    fputc(c, w->f);
    if (w->depth == 0 && w->pretty) fputc('\n', w->f);
}

void json_obj(json_w *w, const char *key) { open_(w, key, '{'); }
void json_end_obj(json_w *w) { close_(w, '}'); }
void json_arr(json_w *w, const char *key) { open_(w, key, '['); }
void json_end_arr(json_w *w) { close_(w, ']'); }

void json_str(json_w *w, const char *key, const char *v)
{
    lead(w, key);
    if (v) json_quote(w->f, v);
    else fputs("null", w->f);
}

void json_u64(json_w *w, const char *key, uint64_t v)
{
    lead(w, key);
    fprintf(w->f, "%" PRIu64, v);
}

void json_i64(json_w *w, const char *key, int64_t v)
{
    lead(w, key);
    fprintf(w->f, "%" PRId64, v);
}

void json_num(json_w *w, const char *key, double v)
{
    lead(w, key);
    if (isfinite(v)) fprintf(w->f, "%.17g", v);
    else fputs("null", w->f);
}

void json_bool(json_w *w, const char *key, bool v)
{
    lead(w, key);
    fputs(v ? "true" : "false", w->f);
}

void json_null(json_w *w, const char *key)
{
    lead(w, key);
    fputs("null", w->f);
}
