/* Happens-before closure as one bitset row per node. Edges only go forward in
 * the schedule, so one pass in schedule order closes the relation: a node's
 * row is the union of its predecessors' rows plus the predecessors. */
#include "memory/hb.h"

#include <string.h>

#include "core/csr.h"
#include "core/halloc.h"

/* Streams are small integers (REEL_MAX_STREAMS in the public API); a larger
 * bound keeps the planner usable for synthetic problems and tests. */
#define REEL_HB_MAX_STREAM 4096

static void reel_hb_or(uint64_t *dst, const uint64_t *src, int words, int bit)
{
    for (int w = 0; w < words; w++)
        dst[w] |= src[w];
    dst[bit >> 6] |= (uint64_t)1 << (bit & 63);
}

static reel_status reel_hb_check_edges(int n, int ne, const int *from, const int *to)
{
    if (ne < 0 || (ne > 0 && (!from || !to)))
        return REEL_E_INVALID_ARG;
    for (int e = 0; e < ne; e++)
        if (from[e] < 0 || to[e] >= n || from[e] >= to[e])
            return REEL_E_INVALID_ARG;
    return REEL_OK;
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
    int maxs = 0;
    for (int v = 0; v < n; v++) {
        if (stream[v] < 0 || stream[v] >= REEL_HB_MAX_STREAM)
            return REEL_E_INVALID_ARG;
        if (stream[v] > maxs)
            maxs = stream[v];
    }
    int *start = reel_hcalloc((size_t)n + 2, sizeof *start);
    int *src = reel_hcalloc((size_t)(ne1 + ne2) + 1, sizeof *src);
    int *last = reel_halloc(((size_t)maxs + 1) * sizeof *last);
    hb->n = n;
    hb->words = (n + 63) / 64;
    hb->rows = reel_hcalloc((size_t)n * (size_t)hb->words + 1, sizeof *hb->rows);
    if (!start || !src || !last || !hb->rows) {
        st = REEL_E_OOM;
        goto fail;
    }
    /* Predecessors of each node, CSR. */
    reel_csr_count(start, to1, ne1);
    reel_csr_count(start, to2, ne2);
    reel_csr_offsets(start, n);
    reel_csr_place(start, to1, from1, ne1, src);
    reel_csr_place(start, to2, from2, ne2, src);
    reel_csr_restore(start, n);
    for (int s = 0; s <= maxs; s++)
        last[s] = -1;
    for (int v = 0; v < n; v++) {
        uint64_t *row = hb->rows + (size_t)v * (size_t)hb->words;
        int prev = last[stream[v]];
        if (prev >= 0)
            reel_hb_or(row, reel_hb_row(hb, prev), hb->words, prev);
        for (int k = start[v]; k < start[v + 1]; k++)
            reel_hb_or(row, reel_hb_row(hb, src[k]), hb->words, src[k]);
        last[stream[v]] = v;
    }
    reel_hfree(start);
    reel_hfree(src);
    reel_hfree(last);
    return REEL_OK;
fail:
    reel_hfree(start);
    reel_hfree(src);
    reel_hfree(last);
    reel_hb_free(hb);
    return st;
}

void reel_hb_free(reel_hb *hb)
{
    if (!hb)
        return;
    reel_hfree(hb->rows);
    hb->rows = NULL;
    hb->n = hb->words = 0;
}
