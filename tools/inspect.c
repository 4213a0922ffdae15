/* `reel inspect`: the demo model's plan as reel compiled it, without
 * serving: the schedule (op, stream, the kernel the registry chose and why),
 * per bucket the arena against its bounds and every activation's offset and
 * size, the plan's own memory, and two pictures: the DAG as Graphviz DOT
 * (--dot FILE) and the memory plan as SVG (--svg FILE). */
#include <inttypes.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "observe.h"

static const char *const stream_fill[REEL_MAX_STREAMS] = {"#cfe2ff", "#d1e7dd", "#fff3cd", "#f8d7da"};
static const char *const stream_edge[REEL_MAX_STREAMS] = {"#3d6fb6", "#2f7d57", "#b38600", "#b02a37"};

static int num_nodes(reel_plan *p, reel_plan_stats *st)
{
    *st = (reel_plan_stats)REEL_PLAN_STATS_INIT;
    return reel_plan_stats_get(p, st) == REEL_OK ? st->num_nodes : 0;
}

/* ---- text ----------------------------------------------------------------------- */

static void print_operands(const reel_node_info *ni, FILE *f)
{
    for (int k = 0, n = 0; k < ni->nin && k < REEL_NODE_MAX_IN; k++) {
        if (!ni->in[k]) continue;
        if (ni->in_node[k] >= 0) fprintf(f, "%s%s@%d", n++ ? ", " : "", ni->in[k], ni->in_node[k]);
        else fprintf(f, "%s%s (%s)", n++ ? ", " : "", ni->in[k], ni->in_kind[k]);
    }
}

void inspect_print_plan(reel_plan *p, FILE *f)
{
    reel_plan_stats st = REEL_PLAN_STATS_INIT;
    int nn = num_nodes(p, &st);
    reel_plan_memory m = REEL_PLAN_MEMORY_INIT;
    reel_plan_memory_get(p, &m);
    fprintf(f, "plan: %d nodes on %d stream(s), %d bucket(s):", nn, st.num_streams, st.num_buckets);
    for (int b = 0; b < st.num_buckets; b++) fprintf(f, " %d", st.buckets[b]);
    fprintf(f, " tokens; %llu graph(s) captured\n\n", (unsigned long long)st.graphs_captured);
    fputs("schedule (operands: name@producer, or their kind; kernel: the registry's choice)\n\n"
          "| # | op | output | stream | kernel | capturable | in place | pdl | operands | why this kernel |\n"
          "|---|---|---|---|---|---|---|---|---|---|\n",
          f);
    for (int i = 0; i < nn; i++) {
        reel_node_info ni = REEL_NODE_INFO_INIT;
        if (reel_plan_node_info(p, i, &ni) != REEL_OK) continue;
        fprintf(f, "| %d | %s | %s%s | %d | %s | %s | %s | %s | ", i, ni.op, ni.name, ni.is_output[0] ? " (output)" : "",
                ni.stream, ni.kernel, ni.capturable ? "yes" : "NO", ni.inplace_ok ? "may" : "no", ni.pdl ? "yes" : "no");
        print_operands(&ni, f);
        fprintf(f, " | %s |\n", ni.why);
    }
    /* What the fusion pass folded, and what one replay launches: kernels of
     * each bucket's graph over the transformer layers (attention ops). */
    int layers = 0, nf = 0;
    for (int i = 0; i < nn; i++) {
        reel_node_info ni = REEL_NODE_INFO_INIT;
        if (reel_plan_node_info(p, i, &ni) != REEL_OK) continue;
        layers += strcmp(ni.op, "paged_attention") == 0;
        if (ni.fused && ni.fused[0])
            fprintf(f, "%s node %d (%s): %s", nf++ ? "," : "\nfused:", i, ni.name, ni.fused);
    }
    fprintf(f, "%s\nkernels per replay (bucket: kernels in its graph", nf ? "\n" : "\nfused: none (no_fuse or nothing to fuse)\n");
    if (layers) fprintf(f, ", per layer over %d attention layers", layers);
    fputs("):", f);
    for (int b = 0; b < st.num_buckets; b++) {
        int k = 0;
        if (reel_plan_graph_kernels(p, b, &k) != REEL_OK) {
            fprintf(f, " %d: -", st.buckets[b]);
            continue;
        }
        if (layers) fprintf(f, " %d: %d (%.1f)", st.buckets[b], k, (double)k / layers);
        else fprintf(f, " %d: %d", st.buckets[b], k);
    }
    fputc('\n', f);
    fputs("\nmemory per bucket (bytes; device = arena + static region + graph)\n\n"
          "| bucket | tokens | arena | lower bound | node bound | arena / node bound | device |\n"
          "|---|---|---|---|---|---|---|\n",
          f);
    for (int b = 0; b < st.num_buckets; b++) {
        size_t nb = st.bucket_node_bound[b];
        fprintf(f, "| %d | %d | %zu | %zu | %zu | %.3f | %zu%s |\n", b, st.buckets[b], st.bucket_arena_bytes[b],
                st.bucket_lower_bound[b], nb, nb ? (double)st.bucket_arena_bytes[b] / (double)nb : 1.0,
                m.bucket_device_bytes[b], m.graph_bytes_known ? "" : " + graph (unknown)");
    }
    fprintf(f, "\nthe plan's memory: shared arena %zu, static region %zu, pinned staging %zu, params %zu, "
               "states %zu, graphs %s; device total besides params and states %zu\n",
            m.arena_bytes, m.static_bytes, m.pinned_bytes, m.param_bytes, m.state_bytes,
            m.graph_bytes_known ? "0 (known)" : "unknown", m.device_bytes);
    fputs("\narena placements (offset+bytes per bucket; first and last: schedule positions, last = nodes: "
          "an output)\n\n| tensor | stream | first | last |",
          f);
    for (int b = 0; b < st.num_buckets; b++) fprintf(f, " b%d (%d) |", b, st.buckets[b]);
    fputs("\n|---|---|---|---|", f);
    for (int b = 0; b < st.num_buckets; b++) fputs("---|", f);
    fputc('\n', f);
    reel_placement pl = REEL_PLACEMENT_INIT;
    for (int i = 0; reel_plan_placement(p, 0, i, &pl) == REEL_OK; i++) {
        fprintf(f, "| %s | %d | %d | %d |", pl.name, pl.stream, pl.first, pl.last);
        for (int b = 0; b < st.num_buckets; b++) {
            reel_placement q = REEL_PLACEMENT_INIT;
            if (reel_plan_placement(p, b, i, &q) == REEL_OK) fprintf(f, " %zu+%zu |", q.offset, q.bytes);
            else fputs(" |", f);
        }
        fputc('\n', f);
    }
}

/* ---- JSON --------------------------------------------------------------------------- */

void inspect_plan_json(json_w *w, reel_plan *p)
{
    reel_plan_stats st = REEL_PLAN_STATS_INIT;
    int nn = num_nodes(p, &st);
    reel_plan_memory m = REEL_PLAN_MEMORY_INIT;
    reel_plan_memory_get(p, &m);
    json_i64(w, "num_nodes", nn);
    json_i64(w, "num_streams", st.num_streams);
    json_u64(w, "graphs_captured", st.graphs_captured);
    json_arr(w, "nodes");
    for (int i = 0; i < nn; i++) {
        reel_node_info ni = REEL_NODE_INFO_INIT;
        if (reel_plan_node_info(p, i, &ni) != REEL_OK) continue;
        json_obj(w, NULL);
        json_i64(w, "index", i);
        json_str(w, "op", ni.op);
        json_str(w, "name", ni.name);
        json_i64(w, "stream", ni.stream);
        json_str(w, "kernel", ni.kernel);
        json_i64(w, "priority", ni.priority);
        json_bool(w, "capturable", ni.capturable);
        json_bool(w, "inplace_ok", ni.inplace_ok);
        json_bool(w, "pdl", ni.pdl);
        json_str(w, "why", ni.why);
        json_arr(w, "inputs");
        for (int k = 0; k < ni.nin && k < REEL_NODE_MAX_IN; k++) {
            if (!ni.in[k]) continue;
            json_obj(w, NULL);
            json_str(w, "name", ni.in[k]);
            json_str(w, "kind", ni.in_kind[k]);
            json_i64(w, "producer", ni.in_node[k]);
            json_end_obj(w);
        }
        json_end_arr(w);
        json_arr(w, "outputs");
        for (int k = 0; k < ni.nout && k < REEL_NODE_MAX_OUT; k++) {
            json_obj(w, NULL);
            json_str(w, "name", ni.out[k]);
            json_bool(w, "graph_output", ni.is_output[k]);
            json_str(w, "output_name", ni.output_name[k]);
            json_end_obj(w);
        }
        json_end_arr(w);
        json_end_obj(w);
    }
    json_end_arr(w);
    json_obj(w, "memory");
    json_u64(w, "arena_bytes", m.arena_bytes);
    json_u64(w, "static_bytes", m.static_bytes);
    json_u64(w, "pinned_bytes", m.pinned_bytes);
    json_u64(w, "param_bytes", m.param_bytes);
    json_u64(w, "state_bytes", m.state_bytes);
    if (m.graph_bytes_known) json_u64(w, "graph_bytes", m.graph_bytes);
    else json_null(w, "graph_bytes");
    json_u64(w, "device_bytes", m.device_bytes);
    json_end_obj(w);
    json_arr(w, "buckets");
    for (int b = 0; b < st.num_buckets; b++) {
        json_obj(w, NULL);
        json_i64(w, "tokens", st.buckets[b]);
        json_u64(w, "arena_bytes", st.bucket_arena_bytes[b]);
        json_u64(w, "lower_bound", st.bucket_lower_bound[b]);
        json_u64(w, "node_bound", st.bucket_node_bound[b]);
        json_u64(w, "device_bytes", m.bucket_device_bytes[b]);
        json_arr(w, "placements");
        reel_placement pl = REEL_PLACEMENT_INIT;
        for (int i = 0; reel_plan_placement(p, b, i, &pl) == REEL_OK; i++) {
            json_obj(w, NULL);
            json_str(w, "name", pl.name);
            json_i64(w, "stream", pl.stream);
            json_i64(w, "first", pl.first);
            json_i64(w, "last", pl.last);
            json_u64(w, "offset", pl.offset);
            json_u64(w, "bytes", pl.bytes);
            json_end_obj(w);
        }
        json_end_arr(w);
        json_end_obj(w);
    }
    json_end_arr(w);
}

/* ---- DOT ------------------------------------------------------------------------------ */

/* A DOT string: quoted, with quotes and backslashes escaped. */
static void dot_q(FILE *f, const char *prefix, const char *s)
{
    fputc('"', f);
    fputs(prefix, f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') fputc('\\', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

int inspect_write_dot(reel_plan *p, FILE *f)
{
    reel_plan_stats st = REEL_PLAN_STATS_INIT;
    int nn = num_nodes(p, &st);
    int uncapturable = 0;
    fputs("digraph reel_plan {\n  rankdir=TB; newrank=true; nodesep=0.25; ranksep=0.3;\n"
          "  node [shape=box, style=\"rounded,filled\", fontname=\"Helvetica\", fontsize=10];\n"
          "  edge [fontname=\"Helvetica\", fontsize=8, color=\"#555555\"];\n",
          f);
    for (int i = 0; i < nn; i++) {
        reel_node_info ni = REEL_NODE_INFO_INIT;
        if (reel_plan_node_info(p, i, &ni) != REEL_OK) return -1;
        int s = ni.stream >= 0 && ni.stream < REEL_MAX_STREAMS ? ni.stream : 0;
        fprintf(f, "  n%d [label=\"#%d %s\\n", i, i, ni.op);
        for (const char *c = ni.name; *c; c++) fprintf(f, "%s%c", *c == '"' || *c == '\\' ? "\\" : "", *c);
        fprintf(f, "\\n%s%s\", fillcolor=\"%s\", color=\"%s\"", ni.kernel,
                ni.capturable ? "" : "\\nNOT CAPTURABLE: steps run eagerly", stream_fill[s], stream_edge[s]);
        if (!ni.capturable) {
            fputs(", penwidth=3, style=\"rounded,filled,dashed\"", f);
            uncapturable++;
        }
        fputs("];\n", f);
        for (int k = 0; k < ni.nin && k < REEL_NODE_MAX_IN; k++) {
            if (!ni.in[k]) continue;
            if (ni.in_node[k] >= 0) {
                reel_node_info pi = REEL_NODE_INFO_INIT;
                bool cross = reel_plan_node_info(p, ni.in_node[k], &pi) == REEL_OK && pi.stream != ni.stream;
                fprintf(f, "  n%d -> n%d%s;\n", ni.in_node[k], i,
                        cross ? " [style=bold, color=\"#b02a37\", label=\"event\"]" : "");
                continue;
            }
            bool param = strcmp(ni.in_kind[k], "param") == 0;
            fputs("  ", f);
            dot_q(f, "x:", ni.in[k]);
            fputs(" [label=", f);
            dot_q(f, "", ni.in[k]);
            fprintf(f, ", shape=%s, style=filled, fillcolor=\"%s\", fontsize=%d];\n  ", param ? "note" : "ellipse",
                    param ? "#eeeeee" : strcmp(ni.in_kind[k], "state") == 0 ? "#e2d9f3" : "#ffffff", param ? 8 : 10);
            dot_q(f, "x:", ni.in[k]);
            fprintf(f, " -> n%d%s;\n", i, param ? " [color=\"#aaaaaa\"]" : "");
        }
        for (int k = 0; k < ni.nout && k < REEL_NODE_MAX_OUT; k++) {
            if (!ni.is_output[k]) continue;
            fputs("  ", f);
            dot_q(f, "out:", ni.out[k]);
            fputs(" [label=", f);
            dot_q(f, "output ", ni.output_name[k] ? ni.output_name[k] : ni.out[k]);
            fprintf(f, ", shape=doubleoctagon, style=filled, fillcolor=\"#ffffff\"];\n  n%d -> ", i);
            dot_q(f, "out:", ni.out[k]);
            fputs(";\n", f);
        }
    }
    fputs("  subgraph cluster_legend {\n    label=\"streams\"; fontname=\"Helvetica\"; fontsize=10; color=\"#bbbbbb\";\n", f);
    for (int s = 0; s < st.num_streams && s < REEL_MAX_STREAMS; s++)
        fprintf(f, "    legend%d [label=\"stream %d\", fillcolor=\"%s\", color=\"%s\"];\n", s, s, stream_fill[s],
                stream_edge[s]);
    fputs("    legend_ev [label=\"red bold edge: cross-stream event\", shape=plaintext, style=\"\"];\n", f);
    fputs("  }\n", f);
    fprintf(f, "  label=\"reel plan: %d nodes, %d stream(s), %llu of %d bucket(s) captured%s\"; labelloc=t; "
               "fontname=\"Helvetica\";\n}\n",
            nn, st.num_streams, (unsigned long long)st.graphs_captured, st.num_buckets,
            uncapturable ? "; dashed red: not capturable (the plan runs eagerly)" : "");
    return ferror(f) ? -1 : 0;
}

/* ---- SVG ------------------------------------------------------------------------------ */

#define SVG_W 960
#define SVG_PANEL_H 200
#define SVG_ML 90 /* left margin: the offset axis */
#define SVG_MR 20
#define SVG_MT 34 /* per panel: its title */
#define SVG_MB 26

static void svg_text_esc(FILE *f, const char *s)
{
    for (; *s; s++) {
        if (*s == '<') fputs("&lt;", f);
        else if (*s == '>') fputs("&gt;", f);
        else if (*s == '&') fputs("&amp;", f);
        else fputc(*s, f);
    }
}

static void svg_hline(FILE *f, double y, double x0, double x1, const char *color, const char *dash,
                      const char *label)
{
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"1.5\"%s%s%s/>\n",
            x0, y, x1, y, color, dash ? " stroke-dasharray=\"" : "", dash ? dash : "", dash ? "\"" : "");
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"9\" fill=\"%s\" text-anchor=\"end\">%s</text>\n", x1 - 2,
            y - 2, color, label);
}

static void svg_panel(reel_plan *p, const reel_plan_stats *st, int b, double top, FILE *f)
{
    int cols = st->num_nodes + 1; /* schedule positions, then the outputs' read-back */
    double pw = SVG_W - SVG_ML - SVG_MR, ph = SVG_PANEL_H;
    double y0 = top + SVG_MT, ybot = y0 + ph;
    size_t ymax = st->bucket_arena_bytes[b];
    if (st->bucket_lower_bound[b] > ymax) ymax = st->bucket_lower_bound[b];
    if (st->bucket_node_bound[b] > ymax) ymax = st->bucket_node_bound[b];
    if (ymax == 0) ymax = 1;
    double sx = pw / cols, sy = ph / (double)ymax;
    fprintf(f, "<text x=\"%d\" y=\"%.1f\" font-size=\"12\" font-weight=\"bold\">bucket %d: %d token(s), arena %zu "
               "bytes, lower bound %zu, node bound %zu</text>\n",
            SVG_ML, top + 18, b, st->buckets[b], st->bucket_arena_bytes[b], st->bucket_lower_bound[b],
            st->bucket_node_bound[b]);
    fprintf(f, "<rect x=\"%d\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#fafafa\" stroke=\"#999\"/>\n", SVG_ML,
            y0, pw, ph);
    reel_placement pl = REEL_PLACEMENT_INIT;
    for (int i = 0; reel_plan_placement(p, b, i, &pl) == REEL_OK; i++) {
        int s = pl.stream >= 0 && pl.stream < REEL_MAX_STREAMS ? pl.stream : 0;
        double x = SVG_ML + pl.first * sx, w = (pl.last - pl.first + 1) * sx;
        double h = (double)pl.bytes * sy, y = ybot - (double)(pl.offset + pl.bytes) * sy;
        fprintf(f, "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"%s\" stroke=\"%s\" "
                   "stroke-width=\"0.6\"><title>",
                x, y, w, h < 0.5 ? 0.5 : h, stream_fill[s], stream_edge[s]);
        svg_text_esc(f, pl.name);
        fprintf(f, ": stream %d, nodes %d..%d, offset %zu, %zu bytes</title></rect>\n", pl.stream, pl.first, pl.last,
                pl.offset, pl.bytes);
    }
    svg_hline(f, ybot - (double)st->bucket_arena_bytes[b] * sy, SVG_ML, SVG_ML + pw, "#222", NULL, "arena");
    svg_hline(f, ybot - (double)st->bucket_node_bound[b] * sy, SVG_ML, SVG_ML + pw * 0.80, "#d97706", "6,3",
              "node bound");
    svg_hline(f, ybot - (double)st->bucket_lower_bound[b] * sy, SVG_ML, SVG_ML + pw * 0.60, "#c00", "3,3",
              "lower bound");
    fprintf(f, "<text x=\"%d\" y=\"%.1f\" font-size=\"9\" text-anchor=\"end\">%zu</text>\n", SVG_ML - 4, y0 + 8, ymax);
    fprintf(f, "<text x=\"%d\" y=\"%.1f\" font-size=\"9\" text-anchor=\"end\">0</text>\n", SVG_ML - 4, ybot);
    fprintf(f, "<text x=\"%d\" y=\"%.1f\" font-size=\"9\" text-anchor=\"end\" transform=\"rotate(-90 %d %.1f)\">"
               "arena offset (bytes)</text>\n",
            SVG_ML - 40, y0 + ph / 2, SVG_ML - 40, y0 + ph / 2);
    for (int c = 0; c < cols; c += cols > 40 ? 10 : 5)
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"9\" text-anchor=\"middle\">%d</text>\n",
                SVG_ML + (c + 0.5) * sx, ybot + 11, c);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"9\" text-anchor=\"middle\">schedule position (node; %d: "
               "outputs read back)</text>\n",
            SVG_ML + pw / 2, ybot + 22, st->num_nodes);
}

int inspect_write_svg(reel_plan *p, FILE *f)
{
    reel_plan_stats st = REEL_PLAN_STATS_INIT;
    if (reel_plan_stats_get(p, &st) != REEL_OK) return -1;
    int panel = SVG_MT + SVG_PANEL_H + SVG_MB;
    int h = 40 + st.num_buckets * panel;
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
               "font-family=\"Helvetica, Arial, sans-serif\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
            SVG_W, h, SVG_W, h);
    fprintf(f, "<text x=\"%d\" y=\"22\" font-size=\"14\" font-weight=\"bold\">reel memory plan: activations as boxes "
               "(schedule position x arena offset), a panel per bucket</text>\n",
            SVG_ML);
    for (int s = 0; s < st.num_streams && s < REEL_MAX_STREAMS; s++)
        fprintf(f, "<rect x=\"%d\" y=\"28\" width=\"10\" height=\"8\" fill=\"%s\" stroke=\"%s\"/><text x=\"%d\" "
                   "y=\"36\" font-size=\"9\">stream %d</text>\n",
                SVG_ML + s * 70, stream_fill[s], stream_edge[s], SVG_ML + s * 70 + 14, s);
    for (int b = 0; b < st.num_buckets; b++) svg_panel(p, &st, b, 40 + (double)b * panel, f);
    fputs("</svg>\n", f);
    return ferror(f) ? -1 : 0;
}

/* ---- the command ---------------------------------------------------------------------- */

typedef struct inspect_args {
    const char *dot, *svg;
    bool json, verbose;
    double t0;                  /* when the context was created (--verbose) */
    int failed;                 /* a file could not be written */
    volatile sig_atomic_t stop; /* set once the plan is seen: no step runs */
    reel_backend_kind backend;  /* the context's, once created */
} inspect_args;

static void inspect_log(void *user, reel_log_level level, const char *msg)
{
    obs_print_log(((inspect_args *)user)->t0, level, msg);
}

static void on_ctx(void *arg, reel_ctx *ctx)
{
    inspect_args *a = arg;
    a->backend = reel_ctx_backend(ctx);
    a->t0 = obs_mono_s();
    if (a->verbose) reel_set_log_hook(ctx, inspect_log, a, REEL_LOG_INFO);
}

static int write_file(const char *path, int (*fn)(reel_plan *, FILE *), reel_plan *p)
{
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    int rc = fn(p, f);
    if (fclose(f) != 0) rc = -1;
    return rc;
}

static void on_plan(void *arg, reel_plan *p)
{
    inspect_args *a = arg;
    a->stop = 1;
    if (a->dot && write_file(a->dot, inspect_write_dot, p) != 0) {
        fprintf(stderr, "reel inspect: cannot write '%s'\n", a->dot);
        a->failed = 1;
    }
    if (a->svg && write_file(a->svg, inspect_write_svg, p) != 0) {
        fprintf(stderr, "reel inspect: cannot write '%s'\n", a->svg);
        a->failed = 1;
    }
    if (a->json) {
        json_w w;
        json_init(&w, stdout, true);
        json_obj(&w, NULL);
        json_str(&w, "command", "inspect");
        json_i64(&w, "reel_version", reel_version());
        json_str(&w, "backend", reel_backend_name(a->backend));
        inspect_plan_json(&w, p);
        json_end_obj(&w);
    } else {
        inspect_print_plan(p, stdout);
    }
}

void inspect_usage(FILE *f)
{
    fputs("usage: reel inspect [--dot FILE] [--svg FILE] [--json] [demo options]\n\n"
          "Compiles the demo model as `reel demo` would (same options) and shows the plan\n"
          "without serving: the schedule (op, stream, the kernel chosen and why), per bucket\n"
          "the arena against its bounds and each activation's offset and size, and the\n"
          "plan's own memory (arena, static region, pinned staging, graphs).\n"
          "  --dot FILE   the DAG as Graphviz DOT (streams as colours, non-capturable ops\n"
          "               dashed red, cross-stream events bold): dot -Tsvg FILE\n"
          "  --svg FILE   the memory plan as SVG: activations as boxes on a schedule x\n"
          "               arena-offset plane, one panel per bucket, the bounds as lines\n"
          "  --json       the plan as one JSON object instead of the tables\n"
          "  -v, --verbose  the library's log on stderr: compile phases, each bucket's memory\n"
          "               plan, the warm-up and each capture, with times\n"
          "Exit status: 0 done, 1 the library failed or a file could not be written, 2 usage.\n\n",
          f);
    demo_usage(f);
}

int cmd_inspect(int argc, char **argv)
{
    inspect_args a = {0};
    char **rest = calloc((size_t)argc + 1, sizeof *rest);
    if (!rest) return DEMO_EXIT_FAILED;
    int nr = 0;
    for (int i = 0; i < argc; i++) {
        const char **slot = strcmp(argv[i], "--dot") == 0 ? &a.dot : strcmp(argv[i], "--svg") == 0 ? &a.svg : NULL;
        if (slot) {
            if (i + 1 >= argc || !*argv[i + 1]) {
                fprintf(stderr, "reel inspect: option '%s' needs a file name\n", argv[i]);
                free(rest);
                return DEMO_EXIT_USAGE;
            }
            *slot = argv[++i];
        } else if (strncmp(argv[i], "--dot=", 6) == 0) {
            a.dot = argv[i] + 6;
        } else if (strncmp(argv[i], "--svg=", 6) == 0) {
            a.svg = argv[i] + 6;
        } else if (strcmp(argv[i], "--json") == 0) {
            a.json = true;
        } else if (strcmp(argv[i], "--verbose") == 0 || strcmp(argv[i], "-v") == 0) {
            a.verbose = true;
        } else {
            rest[nr++] = argv[i];
        }
    }
    demo_opts d;
    demo_opts_default(&d);
    int rc = demo_parse_args(nr, rest, &d, stderr);
    free(rest);
    if (rc == 1) {
        inspect_usage(stdout);
        return DEMO_EXIT_OK;
    }
    if (rc != 0 || demo_check_config(&d, "inspect", stderr) != 0) return DEMO_EXIT_USAGE;
    demo_observer ob = {on_ctx, on_plan, NULL, &a};
    d.observer = &ob;
    d.stop = &a.stop;
    d.quiet = true;
    demo_result *r = malloc(sizeof *r);
    if (!r) return DEMO_EXIT_FAILED;
    reel_status st = demo_run(&d, r, NULL);
    if (st != REEL_OK) fprintf(stderr, "reel inspect: %s\n", r->error);
    free(r);
    return st != REEL_OK || a.failed ? DEMO_EXIT_FAILED : DEMO_EXIT_OK;
}
