/* Happens-before as forward clocks. Edges only go forward in the schedule, so
 * one pass in reverse schedule order closes the relation: a node's clock is
 * the minimum, per stream, over its direct successors (the next node of its
 * stream and its edges' targets) of the successor itself and its clock. */
#include "memory/hb.h"

#include <string.h>

#include "core/csr.h"
#include "core/halloc.h"

/* Streams are small integers (REEL_MAX_STREAMS in the public API); a larger
 * bound keeps the planner usable for synthetic problems and tests. */
#define REEL_HB_MAX_STREAM 4096

static reel_status reel_hb_check_edges(int n, int ne, const int *from, const int *to)
{
    if (ne < 0 || (ne > 0 && (!from || !to)))
        return REEL_E_INVALID_ARG;
    for (int e = 0; e < ne; e++)
        if (from[e] < 0 || to[e] >= n || from[e] >= to[e])
            return REEL_E_INVALID_ARG;
    return REEL_OK;
}

/* Renumbers the streams in order of first use; the count, or -1 when a
 * stream is out of range. */
static int reel_hb_streams(int n, const int *stream, int *sid)
{
    static const int none = -1;
    int map[REEL_HB_MAX_STREAM], ns = 0;
    for (int s = 0; s < REEL_HB_MAX_STREAM; s++)
        map[s] = none;
    for (int v = 0; v < n; v++) {
        if (stream[v] < 0 || stream[v] >= REEL_HB_MAX_STREAM)
            return -1;
        if (map[stream[v]] == none)
            map[stream[v]] = ns++;
        sid[v] = map[stream[v]];
    }
    return ns;
}

/* Folds successor w into u's clock. */
static void reel_hb_fold(reel_hb *hb, int u, int w)
{
    int S = hb->nstreams;
    int *cu = hb->fut + (size_t)u * (size_t)S;
    const int *cw = hb->fut + (size_t)w * (size_t)S;
    for (int t = 0; t < S; t++)
        if (cw[t] < cu[t])
            cu[t] = cw[t];
    if (w < cu[hb->sid[w]])
        cu[hb->sid[w]] = w;
}

reel_status reel_hb_build(reel_hb *hb, int n, const int *stream,
                          int ne1, const int *from1, const int *to1,
                          int ne2, const int *from2, const int *to2)
{
    memset(hb, 0, sizeof *hb);
    if (n < 0 || (n > 0 && !stream))
        return REEL_E_INVALID_ARG;
    reel_status st = reel_hb_check_edges(n, ne1, from1, to1);
    if (st == REEL_OK)
        st = reel_hb_check_edges(n, ne2, from2, to2);
    if (st != REEL_OK)
        return st;
    int *start = reel_hcalloc((size_t)n + 2, sizeof *start);
    int *dst = reel_hcalloc((size_t)ne1 + (size_t)ne2 + 1, sizeof *dst);
    int *next = reel_halloc(((size_t)n + 1) * sizeof *next);
    int *last = reel_halloc(((size_t)n + 1) * sizeof *last);
    hb->n = n;
    hb->sid = reel_hcalloc((size_t)n + 1, sizeof *hb->sid);
    if (!start || !dst || !next || !last || !hb->sid) {
        st = REEL_E_OOM;
        goto fail;
    }
    hb->nstreams = reel_hb_streams(n, stream, hb->sid);
    if (hb->nstreams < 0) {
        st = REEL_E_INVALID_ARG;
        goto fail;
    }
    size_t cells = (size_t)n * (size_t)hb->nstreams;
    hb->fut = reel_halloc((cells + 1) * sizeof *hb->fut);
    if (!hb->fut) {
        st = REEL_E_OOM;
        goto fail;
    }
    for (size_t c = 0; c < cells; c++)
        hb->fut[c] = n;
    /* Successors of each node, CSR, and the next node of its stream. */
    reel_csr_count(start, from1, ne1);
    reel_csr_count(start, from2, ne2);
    reel_csr_offsets(start, n);
    reel_csr_place(start, from1, to1, ne1, dst);
    reel_csr_place(start, from2, to2, ne2, dst);
    reel_csr_restore(start, n);
    for (int t = 0; t < hb->nstreams; t++)
        last[t] = -1;
    for (int v = n - 1; v >= 0; v--) {
        next[v] = last[hb->sid[v]];
        last[hb->sid[v]] = v;
    }
    for (int u = n - 1; u >= 0; u--) {
        if (next[u] >= 0)
            reel_hb_fold(hb, u, next[u]);
        for (int k = start[u]; k < start[u + 1]; k++)
            reel_hb_fold(hb, u, dst[k]);
    }
    reel_hfree(start);
    reel_hfree(dst);
    reel_hfree(next);
    reel_hfree(last);
    return REEL_OK;
fail:
    reel_hfree(start);
    reel_hfree(dst);
    reel_hfree(next);
    reel_hfree(last);
    reel_hb_free(hb);
    return st;
}

void reel_hb_free(reel_hb *hb)
{
    if (!hb)
        return;
    reel_hfree(hb->sid);
    reel_hfree(hb->fut);
    hb->sid = hb->fut = NULL;
    hb->n = hb->nstreams = 0;
}
