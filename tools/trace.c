/* A trace of a serving run in the Trace Event Format (the JSON that
 * chrome://tracing and ui.perfetto.dev open): complete events ("ph":"X",
 * ts and dur in microseconds from the start of the run) on one process,
 * one track per kind of work:
 *   tid 0   the serving loop: compile (build, compile, capture, weights),
 *           then each step, named replay or eager with its reason;
 *   tid 1   the library's log events (captures per bucket, graph updates and
 *           re-instantiations, eager steps), as zero-length events;
 *   tid 10+s  stream s: every kernel with its start and end, from the op
 *           spans of reel_plan_take_op_spans (host backend: every step; CUDA:
 *           the eager steps' ops, timed with CUDA events).
 * Events are written sorted by track and start, so ts never decreases on a
 * track. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "observe.h"

#define TRACE_NAME 96
#define TRACE_ARGS 320
#define TRACE_MAX_EVENTS ((size_t)1 << 21)
#define TID_LOOP 0
#define TID_LOG 1
#define TID_STREAM0 10

typedef struct tev {
    int tid;
    double ts, dur;           /* microseconds from the origin */
    char name[TRACE_NAME];
    char args[TRACE_ARGS];    /* the members of the args object, JSON */
} tev;

typedef struct trace_node { char label[TRACE_NAME]; char kernel[64]; } trace_node;

struct trace {
    double origin_us;
    tev *ev;
    size_t n, cap;
    bool dropped;
    trace_node *nodes;
    int nnodes, nstreams;
    bool op_spans;            /* the backend records op spans */
    reel_backend_kind backend;
    reel_op_span *spans;
    int spans_cap;
};

static double mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

/* s escaped for a JSON string into dst (always terminated). */
static void esc(char *dst, size_t len, const char *s)
{
    size_t k = 0;
    for (; *s && k + 7 < len; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') { dst[k++] = '\\'; dst[k++] = (char)c; }
        else if (c < 0x20) k += (size_t)snprintf(dst + k, len - k, "\\u%04x", c);
        else dst[k++] = (char)c;
    }
    dst[k] = '\0';
}

struct trace *trace_create(void)
{
    struct trace *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->origin_us = mono_us();
    t->spans_cap = 4096;
    t->spans = malloc((size_t)t->spans_cap * sizeof *t->spans);
    if (!t->spans) {
        free(t);
        return NULL;
    }
    t->spans[0] = (reel_op_span)REEL_OP_SPAN_INIT;   /* its size strides the buffer */
    return t;
}

void trace_destroy(struct trace *t)
{
    if (!t) return;
    free(t->ev);
    free(t->nodes);
    free(t->spans);
    free(t);
}

static tev *push(struct trace *t, int tid, double start_us, double end_us, const char *name)
{
    if (t->n == t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 4096;
        tev *v = t->n < TRACE_MAX_EVENTS ? realloc(t->ev, cap * sizeof *v) : NULL;
        if (!v) {
            t->dropped = true;
            return NULL;
        }
        t->ev = v;
        t->cap = cap;
    }
    tev *e = &t->ev[t->n++];
    e->tid = tid;
    e->ts = start_us - t->origin_us;
    if (e->ts < 0) e->ts = 0;
    e->dur = end_us > start_us ? end_us - start_us : 0;
    esc(e->name, sizeof e->name, name);
    e->args[0] = '\0';
    return e;
}

static const char *level_name(reel_log_level l)
{
    static const char *names[] = {"debug", "info", "warn", "error"};
    return l >= REEL_LOG_DEBUG && l <= REEL_LOG_ERROR ? names[l] : "?";
}

void trace_log_hook(void *user, reel_log_level level, const char *msg)
{
    struct trace *t = user;
    char name[TRACE_NAME], m[TRACE_ARGS - 40];
    double now = mono_us();
    /* The event's name: the message up to its first ':' ("capture", "step 3"). */
    snprintf(name, sizeof name, "%s", msg);
    char *colon = strchr(name, ':');
    if (colon) *colon = '\0';
    tev *e = push(t, TID_LOG, now, now, name);
    if (!e) return;
    esc(m, sizeof m, msg);
    snprintf(e->args, sizeof e->args, "\"level\":\"%s\",\"msg\":\"%s\"", level_name(level), m);
}

void trace_compile(struct trace *t, double start_s, double end_s)
{
    push(t, TID_LOOP, start_s * 1e6, end_s * 1e6, "compile (build, compile, capture, weights)");
}

void trace_plan(struct trace *t, reel_plan *p)
{
    reel_plan_stats st = REEL_PLAN_STATS_INIT;
    if (reel_plan_stats_get(p, &st) != REEL_OK) return;
    t->nstreams = st.num_streams;
    t->nodes = calloc((size_t)st.num_nodes, sizeof *t->nodes);
    if (!t->nodes) return;
    t->nnodes = st.num_nodes;
    for (int i = 0; i < st.num_nodes; i++) {
        reel_node_info ni = REEL_NODE_INFO_INIT;
        if (reel_plan_node_info(p, i, &ni) != REEL_OK) continue;
        snprintf(t->nodes[i].label, sizeof t->nodes[i].label, "%s %s", ni.op, ni.name);
        snprintf(t->nodes[i].kernel, sizeof t->nodes[i].kernel, "%s", ni.kernel);
    }
    t->op_spans = reel_plan_trace_ops(p, 1) == REEL_OK;
}

static void take_spans(struct trace *t, reel_plan *p, uint64_t step)
{
    int n = 0;
    do {
        if (reel_plan_take_op_spans(p, t->spans, t->spans_cap, &n) != REEL_OK && n == 0) return;
        for (int k = 0; k < n; k++) {
            const reel_op_span *s = &t->spans[k];
            bool known = s->node >= 0 && s->node < t->nnodes;
            tev *e = push(t, TID_STREAM0 + s->stream, s->start_us, s->end_us,
                          known ? t->nodes[s->node].label : "op");
            if (!e) return;
            snprintf(e->args, sizeof e->args, "\"node\":%d,\"kernel\":\"%s\",\"step\":%" PRIu64, s->node,
                     known ? t->nodes[s->node].kernel : "", step);
        }
    } while (n == t->spans_cap);
}

void trace_step(struct trace *t, reel_plan *p, const demo_step_rec *s)
{
    char name[TRACE_NAME];
    bool replay = s->fallback == REEL_FALLBACK_NONE;
    snprintf(name, sizeof name, "step %" PRIu64 ": %s%s%s", s->index, replay ? "replay" : "eager (",
             replay ? "" : reel_fallback_str(s->fallback), replay ? "" : ")");
    tev *e = push(t, TID_LOOP, s->start_s * 1e6, s->end_s * 1e6, name);
    if (e)
        snprintf(e->args, sizeof e->args,
                 "\"step\":%" PRIu64 ",\"tokens\":%d,\"seqs\":%d,\"longest_context\":%d,\"path\":\"%s\","
                 "\"reason\":\"%s\"",
                 s->index, s->num_tokens, s->num_seqs, s->longest_context, replay ? "replay" : "eager",
                 replay ? "" : reel_fallback_str(s->fallback));
    if (t->op_spans) take_spans(t, p, s->index);
}

static int by_track(const void *a, const void *b)
{
    const tev *x = a, *y = b;
    if (x->tid != y->tid) return x->tid < y->tid ? -1 : 1;
    if (x->ts != y->ts) return x->ts < y->ts ? -1 : 1;
    return (x->dur < y->dur) - (x->dur > y->dur); /* an enclosing event first */
}

static void thread_name(FILE *f, int tid, const char *name, bool *first)
{
    fprintf(f, "%s\n{\"ph\":\"M\",\"pid\":1,\"tid\":%d,\"name\":\"thread_name\",\"args\":{\"name\":\"%s\"}}",
            *first ? "" : ",", tid, name);
    *first = false;
}

int trace_write(struct trace *t, FILE *f, const demo_result *r)
{
    if (t->n > 1)
        qsort(t->ev, t->n, sizeof *t->ev, by_track);
    const char *be = reel_backend_name(r->backend);
    fprintf(f, "{\"displayTimeUnit\":\"ms\",\n\"otherData\":{\"tool\":\"reel demo\",\"backend\":\"%s\","
               "\"op_spans\":\"%s\",\"dropped_events\":%s},\n\"traceEvents\":[",
            be ? be : "?",
            !t->op_spans ? "none: this backend records no op spans; steps are host times around reel_step"
            : r->backend == REEL_BACKEND_HOST ? "per kernel, on its stream's worker thread (host backend)"
                                              : "eager steps' ops, by device timers around each launch; "
                                                "replays are one graph launch, not timed per op",
            t->dropped ? "true" : "false");
    bool first = true;
    fprintf(f, "\n{\"ph\":\"M\",\"pid\":1,\"tid\":0,\"name\":\"process_name\",\"args\":{\"name\":\"reel (%s)\"}}",
            be ? be : "?");
    first = false;
    thread_name(f, TID_LOOP, "serving loop", &first);
    thread_name(f, TID_LOG, "library events", &first);
    for (int s = 0; t->op_spans && s < t->nstreams; s++) {
        char nm[32];
        snprintf(nm, sizeof nm, "stream %d", s);
        thread_name(f, TID_STREAM0 + s, nm, &first);
    }
    for (size_t i = 0; i < t->n; i++) {
        const tev *e = &t->ev[i];
        fprintf(f, ",\n{\"ph\":\"X\",\"pid\":1,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,\"name\":\"%s\",\"cat\":\"%s\","
                   "\"args\":{%s}}",
                e->tid, e->ts, e->dur, e->name,
                e->tid == TID_LOOP ? "step" : e->tid == TID_LOG ? "log" : "op", e->args);
    }
    fputs("\n]}\n", f);
    return ferror(f) ? -1 : 0;
}
