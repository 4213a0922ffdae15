/* Kernel timeline of replayed CUDA graphs, through CUPTI's activity API.
 *
 * Loaded by the CUDA driver into any program (CUDA_INJECTION64_PATH=this
 * library: `bench/gpu.sh trace`), it records every kernel's start and end and
 * prints, at exit, one table per graph replayed at least REEL_TRACE_MIN
 * times (default 20): each kernel node in order of its median end, its grid,
 * median start and end from the replay's first kernel start, median
 * duration, and the median of what its end added to the previous node's
 * end: the node's share of the step's critical path when kernels overlap
 * (programmatic launches start a kernel before its producer ends).
 *
 * A measuring tool for the GPU machine, not part of libreel: Nsight
 * Systems does not run there, CUPTI (what PyTorch's profiler uses) does.
 * REEL_TRACE_OUT: output file (default stderr). */
#include <cupti.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    uint64_t start, end;
    uint32_t graph, node_lo, corr;
    uint64_t node;
    const char *name;
    int grid, block;
} rec;

static rec *g_recs;
static size_t g_n, g_cap;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_failed;

enum { BUF_BYTES = 8 << 20 };

static void CUPTIAPI buf_requested(uint8_t **buf, size_t *size, size_t *max_records)
{
    *buf = aligned_alloc(8, BUF_BYTES);
    *size = *buf ? BUF_BYTES : 0;
    *max_records = 0;
}

/* Kernel names are interned: CUPTI's strings are only promised for the
 * buffer's lifetime. */
static const char *intern(const char *s)
{
    static const char *seen[4096];
    static int nseen;
    if (!s)
        return "?";
    for (int i = 0; i < nseen; i++)
        if (strcmp(seen[i], s) == 0)
            return seen[i];
    char *d = strdup(s);
    if (!d)
        return "?";
    if (nseen < 4096)
        seen[nseen++] = d;
    return d;
}

static void CUPTIAPI buf_completed(CUcontext ctx, uint32_t stream, uint8_t *buf, size_t size, size_t valid)
{
    (void)ctx;
    (void)stream;
    (void)size;
    CUpti_Activity *r = NULL;
    pthread_mutex_lock(&g_mu);
    while (cuptiActivityGetNextRecord(buf, valid, &r) == CUPTI_SUCCESS) {
        if (r->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && r->kind != CUPTI_ACTIVITY_KIND_KERNEL)
            continue;
        const CUpti_ActivityKernel9 *k = (const CUpti_ActivityKernel9 *)r;
        if (g_n == g_cap) {
            size_t c = g_cap ? 2 * g_cap : 1 << 16;
            rec *p = realloc(g_recs, c * sizeof *p);
            if (!p) {
                g_failed = 1;
                break;
            }
            g_recs = p;
            g_cap = c;
        }
        g_recs[g_n++] = (rec){.start = k->start, .end = k->end, .graph = k->graphId, .node = k->graphNodeId,
                              .corr = k->correlationId, .name = intern(k->name),
                              .grid = k->gridX * k->gridY * k->gridZ, .block = k->blockX * k->blockY * k->blockZ};
    }
    pthread_mutex_unlock(&g_mu);
    free(buf);
}

static int by_launch(const void *a, const void *b)
{
    const rec *x = a, *y = b;
    if (x->graph != y->graph)
        return x->graph < y->graph ? -1 : 1;
    if (x->corr != y->corr)
        return x->corr < y->corr ? -1 : 1;
    return x->node < y->node ? -1 : x->node > y->node;
}

static int by_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static double median(uint64_t *v, size_t n)
{
    qsort(v, n, sizeof *v, by_u64);
    return n ? (double)v[n / 2] : 0.0;
}

typedef struct {
    double start, end, dur, add;
    size_t idx; /* a record of this node in the first launch */
} node_sum;

static int by_end(const void *a, const void *b)
{
    const node_sum *x = a, *y = b;
    return x->end < y->end ? -1 : x->end > y->end;
}

/* One graph's launches [lo, hi) of the sorted records: every launch with
 * the first launch's node count. */
static void report_graph(FILE *f, size_t lo, size_t hi, size_t min_launches)
{
    size_t nodes = 0;
    while (lo + nodes < hi && g_recs[lo + nodes].corr == g_recs[lo].corr)
        nodes++;
    size_t launches = 0, cap = (hi - lo) / nodes + 1;
    size_t *first = malloc(cap * sizeof *first);
    uint64_t *tmp = malloc(cap * sizeof *tmp);
    node_sum *ns = calloc(nodes, sizeof *ns);
    if (!first || !tmp || !ns)
        goto out;
    for (size_t i = lo; i < hi;) {
        size_t j = i;
        while (j < hi && g_recs[j].corr == g_recs[i].corr)
            j++;
        if (j - i == nodes)
            first[launches++] = i;
        i = j;
    }
    if (launches < min_launches)
        goto out;
    uint64_t *steps = malloc(launches * sizeof *steps);
    if (!steps)
        goto out;
    for (size_t l = 0; l < launches; l++) {
        uint64_t s0 = UINT64_MAX, e1 = 0;
        for (size_t n = 0; n < nodes; n++) {
            const rec *r = &g_recs[first[l] + n];
            s0 = r->start < s0 ? r->start : s0;
            e1 = r->end > e1 ? r->end : e1;
        }
        steps[l] = e1 - s0;
    }
    /* Per node: medians of start, end and duration from the launch's first
     * kernel start; then, in order of end, what each end adds. */
    for (size_t n = 0; n < nodes; n++) {
        for (int what = 0; what < 3; what++) {
            for (size_t l = 0; l < launches; l++) {
                uint64_t s0 = UINT64_MAX;
                for (size_t m = 0; m < nodes; m++)
                    s0 = g_recs[first[l] + m].start < s0 ? g_recs[first[l] + m].start : s0;
                const rec *r = &g_recs[first[l] + n];
                tmp[l] = what == 0 ? r->start - s0 : what == 1 ? r->end - s0 : r->end - r->start;
            }
            double v = median(tmp, launches) / 1000.0;
            if (what == 0)
                ns[n].start = v;
            else if (what == 1)
                ns[n].end = v;
            else
                ns[n].dur = v;
        }
        ns[n].idx = first[0] + n;
    }
    qsort(ns, nodes, sizeof *ns, by_end);
    fprintf(f, "\n## graph %u: %zu kernel nodes, %zu launches, median step %.2f us (first start to last end)\n\n",
            g_recs[lo].graph, nodes, launches, median(steps, launches) / 1000.0);
    fprintf(f, "| # | kernel | grid x block | start us | end us | duration us | adds us |\n");
    fprintf(f, "| --- | --- | --- | --- | --- | --- | --- |\n");
    double prev = 0.0;
    for (size_t n = 0; n < nodes; n++) {
        const rec *r = &g_recs[ns[n].idx];
        char name[72];
        snprintf(name, sizeof name, "%s", r->name);
        char *p = strchr(name, '(');
        if (p)
            *p = 0;
        double add = ns[n].end - prev;
        fprintf(f, "| %zu | %s | %d x %d | %.2f | %.2f | %.2f | %.2f |\n", n, name, r->grid, r->block, ns[n].start,
                ns[n].end, ns[n].dur, add > 0 ? add : 0.0);
        if (ns[n].end > prev)
            prev = ns[n].end;
    }
    free(steps);
out:
    free(first);
    free(tmp);
    free(ns);
}

static void at_exit(void)
{
    cuptiActivityFlushAll(1);
    const char *path = getenv("REEL_TRACE_OUT");
    FILE *f = path ? fopen(path, "w") : stderr;
    if (!f)
        f = stderr;
    const char *m = getenv("REEL_TRACE_MIN");
    size_t min_launches = m ? (size_t)strtoul(m, NULL, 10) : 20;
    pthread_mutex_lock(&g_mu);
    fprintf(f, "# kernel trace: %zu kernel records%s\n", g_n, g_failed ? " (out of memory: some dropped)" : "");
    /* Graph kernels only (graphId != 0), grouped by graph and launch. */
    size_t k = 0;
    for (size_t i = 0; i < g_n; i++)
        if (g_recs[i].graph != 0)
            g_recs[k++] = g_recs[i];
    qsort(g_recs, k, sizeof *g_recs, by_launch);
    for (size_t i = 0; i < k;) {
        size_t j = i;
        while (j < k && g_recs[j].graph == g_recs[i].graph)
            j++;
        report_graph(f, i, j, min_launches);
        i = j;
    }
    pthread_mutex_unlock(&g_mu);
    if (f != stderr)
        fclose(f);
}

/* A context's destruction flushes its records first: the CUDA runtime may
 * tear down before this library's exit handler runs. */
static void CUPTIAPI on_resource(void *ud, CUpti_CallbackDomain dom, CUpti_CallbackId id, const void *data)
{
    (void)ud;
    (void)data;
    if (dom == CUPTI_CB_DOMAIN_RESOURCE && id == CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING)
        cuptiActivityFlushAll(1);
}

int InitializeInjection(void);

int InitializeInjection(void)
{
    if (cuptiActivityRegisterCallbacks(buf_requested, buf_completed) != CUPTI_SUCCESS ||
        cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) {
        fprintf(stderr, "kernel_trace: CUPTI activity tracing could not start\n");
        return 0;
    }
    CUpti_SubscriberHandle sub;
    if (cuptiSubscribe(&sub, on_resource, NULL) == CUPTI_SUCCESS)
        cuptiEnableCallback(1, sub, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING);
    atexit(at_exit);
    return 1;
}
