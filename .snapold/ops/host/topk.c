/* Host reference kernel: top-k over rows of f32 scores with row lengths and
 * an optional page table. Candidates are j < min(length, N) whose score is
 * not NaN (-inf is a candidate). A bounded min-heap of indices, kept in the
 * output row itself (no scratch), ordered by (score, lower index wins), then
 * sorted best first: deterministic, O(N log k). Slots past the candidates
 * get -1. The page transform maps i to page_table[i / page_size] *
 * page_size + i % page_size; -1 stays -1, an unmapped (negative) page gives
 * -1, and a page index >= P or a result past INT32_MAX is a limit breach
 * (-1, REEL_E_LIMIT). */
#include <math.h>

#include "ops/host/host_ops.h"
#include "ops/host/kern.h"

/* True when candidate a ranks below b (b would be kept over a). */
static inline bool reel_hk_topk_worse(const float *sc, int32_t a, int32_t b)
{
    return sc[a] < sc[b] || (sc[a] == sc[b] && a > b);
}

/* Restores the min-heap (worst candidate at the root) below position i. */
static void reel_hk_topk_sift(const float *sc, int32_t *hp, int64_t n, int64_t i)
{
    for (;;) {
        int64_t c = 2 * i + 1;
        if (c >= n)
            return;
        if (c + 1 < n && reel_hk_topk_worse(sc, hp[c + 1], hp[c]))
            c++;
        if (!reel_hk_topk_worse(sc, hp[c], hp[i]))
            return;
        int32_t tmp = hp[c];
        hp[c] = hp[i];
        hp[i] = tmp;
        i = c;
    }
}

/* Selects up to k candidates of one row into o, best first; returns how many. */
static int64_t reel_hk_topk_row(const float *sc, int64_t len, int64_t k, int32_t *o)
{
    int64_t n = 0;
    for (int64_t j = 0; j < len; j++) {
        if (isnan(sc[j]))
            continue;
        if (n < k) {
            o[n++] = (int32_t)j;
            for (int64_t i = n - 1; i > 0; i = (i - 1) / 2) { /* sift up */
                int64_t up = (i - 1) / 2;
                if (!reel_hk_topk_worse(sc, o[i], o[up]))
                    break;
                int32_t tmp = o[i];
                o[i] = o[up];
                o[up] = tmp;
            }
        } else if (k > 0 && reel_hk_topk_worse(sc, o[0], (int32_t)j)) {
            o[0] = (int32_t)j;
            reel_hk_topk_sift(sc, o, n, 0);
        }
    }
    for (int64_t end = n - 1; end > 0; end--) { /* the worst goes last */
        int32_t tmp = o[0];
        o[0] = o[end];
        o[end] = tmp;
        reel_hk_topk_sift(sc, o, end, 0);
    }
    return n;
}

static int32_t reel_hk_topk_page(const reel_launch *l, const int32_t *pt, int64_t npages, int32_t i)
{
    int64_t ps = l->attrs->topk.page_size;
    if (i < 0)
        return -1;
    if (ps <= 0)
        return i;
    int64_t page = i / ps;
    if (page >= npages) {
        reel_hk_report(l->meta, REEL_E_LIMIT);
        return -1;
    }
    if (pt[page] < 0)
        return -1;
    /* In 64 bits: a page of 2^25 with page size 64 is past INT32_MAX, and
     * wrapping it would hand back a wrong index with REEL_OK. */
    int64_t r = (int64_t)pt[page] * ps + i % ps;
    if (r > INT32_MAX) {
        reel_hk_report(l->meta, REEL_E_LIMIT);
        return -1;
    }
    return (int32_t)r;
}

void reel_host_topk(const void *args)
{
    const reel_launch *l = args;
    const reel_shape *ss = &l->in_shape[0];
    int64_t nrows = reel_shape_lead(ss, l->rows), ncols = reel_shape_inner(ss);
    int64_t k = l->attrs->topk.k;
    const float *scores = l->in[0];
    const int32_t *lengths = l->in[1], *pt = l->in[2];
    bool paged = l->attrs->topk.has_page_table && pt;
    int64_t npages = paged ? reel_shape_inner(&l->in_shape[2]) : 0;
    int32_t *out = l->out[0];
    for (int64_t t = 0; t < nrows; t++) {
        int64_t len = lengths[t] < 0 ? 0 : (lengths[t] > ncols ? ncols : lengths[t]);
        int32_t *o = out + t * k;
        int64_t n = reel_hk_topk_row(scores + t * ncols, len, k, o);
        for (int64_t i = n; i < k; i++)
            o[i] = -1;
        for (int64_t i = 0; paged && i < n; i++)
            o[i] = reel_hk_topk_page(l, pt + t * npages, npages, o[i]);
    }
}
