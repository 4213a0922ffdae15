/* CUDA top-k over rows of f32 scores with row lengths and an optional page
 * table: the host reference's semantics (ops/host/topk.c) and its exact
 * output. Candidates are j < min(length, N) whose score is not NaN (-inf is
 * one). The selection is the host's: best first by (score, lower index on
 * ties), then -1 past the candidates; the page transform maps i to
 * page_table[i / page_size] * page_size + i % page_size, -1 stays -1, an
 * unmapped (negative) page gives -1, and a page index >= P or a result past
 * INT32_MAX is a limit breach (-1, REEL_E_LIMIT).
 *
 * One block per row: a radix select over order-preserving 32-bit keys finds
 * the k-th best key in four 8-bit passes (histograms in shared memory), an
 * ordered compaction (block scans, no atomics) keeps everything above it and
 * the lowest-index ties at it, and a bitonic sort in shared memory orders
 * the k winners. Deterministic, so replay equals eager bit for bit. */
#include "ops/cuda/common.cuh"
#include "ops/cuda/impls.h"

namespace reel_cu {

enum { TOPK_THREADS = 512 };

/* Larger key = larger score; -0 and +0 are one score, as on the host. */
__device__ __forceinline__ uint32_t topk_key(float f)
{
    uint32_t u = __float_as_uint(f == 0.0f ? 0.0f : f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/* (key, index) in one word that sorts best first when sorted descending:
 * a lower index wins a tie. 0 is below every candidate (NaN has no key). */
__device__ __forceinline__ unsigned long long topk_pack(uint32_t key, int64_t j)
{
    return ((unsigned long long)key << 32) | (unsigned long long)(0xffffffffu - (uint32_t)j);
}

__device__ __forceinline__ int32_t topk_index(unsigned long long w)
{
    return (int32_t)(0xffffffffu - (uint32_t)(w & 0xffffffffull));
}

/* Exclusive block-wide prefix sum of v; *total gets the sum. */
__device__ int block_scan(int v, int *total)
{
    __shared__ int wsum[32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    int x = v;
    for (int o = 1; o < 32; o <<= 1) {
        int y = __shfl_up_sync(0xffffffffu, x, o);
        if (lane >= o)
            x += y;
    }
    __syncthreads(); /* wsum may still be read by a previous call */
    if (lane == 31)
        wsum[warp] = x;
    __syncthreads();
    if (warp == 0) {
        int w = lane < nw ? wsum[lane] : 0;
        for (int o = 1; o < 32; o <<= 1) {
            int y = __shfl_up_sync(0xffffffffu, w, o);
            if (lane >= o)
                w += y;
        }
        wsum[lane] = w;
    }
    __syncthreads();
    *total = wsum[nw - 1];
    return (warp > 0 ? wsum[warp - 1] : 0) + x - v;
}

__device__ __forceinline__ bool topk_cand(const float *row, int64_t j, int64_t len, uint32_t *key)
{
    if (j >= len)
        return false;
    float v = row[j];
    if (isnan(v))
        return false;
    *key = topk_key(v);
    return true;
}

/* Radix select: the key of the k-th best candidate and how many candidates
 * holding exactly that key are taken (the rest of the k are above it). */
__device__ void topk_threshold(const float *row, int64_t len, int64_t k, uint32_t *thr, int64_t *need_eq)
{
    __shared__ int hist[256];
    __shared__ uint32_t s_prefix;
    __shared__ long long s_remaining;
    uint32_t prefix = 0, mask = 0;
    int64_t remaining = k;
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int i = threadIdx.x; i < 256; i += blockDim.x)
            hist[i] = 0;
        __syncthreads();
        for (int64_t j = threadIdx.x; j < len; j += blockDim.x) {
            uint32_t key;
            if (topk_cand(row, j, len, &key) && (key & mask) == prefix)
                atomicAdd(&hist[(key >> shift) & 0xffu], 1);
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            int64_t cum = 0;
            for (int d = 255; d >= 0; d--) {
                if (cum + hist[d] >= remaining) {
                    s_prefix = prefix | ((uint32_t)d << shift);
                    s_remaining = remaining - cum;
                    break;
                }
                cum += hist[d];
            }
        }
        __syncthreads();
        prefix = s_prefix;
        remaining = s_remaining;
        mask |= 0xffu << shift;
        __syncthreads(); /* s_prefix is rewritten by the next pass */
    }
    *thr = prefix;
    *need_eq = remaining;
}

__device__ int32_t topk_page(int32_t i, const int32_t *pt, int64_t npages, int64_t ps, int32_t *err_word)
{
    if (i < 0)
        return -1;
    if (ps <= 0)
        return i;
    int64_t page = i / ps;
    if (page >= npages) {
        if (err_word)
            atomicCAS((int *)err_word, 0, (int)REEL_E_LIMIT);
        return -1;
    }
    if (pt[page] < 0)
        return -1;
    /* In 64 bits, refused past INT32_MAX (never wrapped), as on the host. */
    int64_t r = (int64_t)pt[page] * ps + i % ps;
    if (r > INT32_MAX) {
        if (err_word)
            atomicCAS((int *)err_word, 0, (int)REEL_E_LIMIT);
        return -1;
    }
    return (int32_t)r;
}

typedef struct topk_args {
    const float *scores;
    const int32_t *lengths, *pt; /* pt NULL: no page transform */
    int32_t *out, *err_word;
    int64_t ncols, k, npages, ps;
    int p2; /* power of two >= k: the sort's width */
} topk_args;

__global__ void topk_kernel(topk_args a)
{
    extern __shared__ unsigned long long sel[]; /* [p2] */
    int64_t t = blockIdx.x;
    const float *row = a.scores + t * a.ncols;
    int64_t len = a.lengths[t] < 0 ? 0 : (a.lengths[t] > a.ncols ? a.ncols : a.lengths[t]);
    int c = 0, cnt = 0;
    for (int64_t j = threadIdx.x; j < len; j += blockDim.x)
        c += !isnan(row[j]);
    (void)block_scan(c, &cnt);
    bool all = cnt <= a.k; /* every candidate is selected */
    uint32_t thr = 0;
    int64_t need_eq = 0;
    if (!all)
        topk_threshold(row, len, a.k, &thr, &need_eq);
    int64_t n_gt = all ? cnt : a.k - need_eq, kk = all ? cnt : a.k;
    int64_t base_gt = 0, base_eq = 0;
    for (int64_t j0 = 0; j0 < len; j0 += blockDim.x) {
        int64_t j = j0 + threadIdx.x;
        uint32_t key = 0;
        bool cand = topk_cand(row, j, len, &key);
        int fg = cand && (all || key > thr), fe = cand && !all && key == thr;
        int tot;
        int ex = block_scan(fg | (fe << 16), &tot); /* two counts of at most blockDim each */
        if (fg)
            sel[base_gt + (ex & 0xffff)] = topk_pack(key, j);
        if (fe && base_eq + (ex >> 16) < need_eq)
            sel[n_gt + base_eq + (ex >> 16)] = topk_pack(key, j);
        base_gt += tot & 0xffff;
        base_eq += tot >> 16;
    }
    for (int64_t i = kk + threadIdx.x; i < a.p2; i += blockDim.x)
        sel[i] = 0;
    __syncthreads();
    for (int size = 2; size <= a.p2; size <<= 1) {
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            for (int i = threadIdx.x; i < a.p2; i += blockDim.x) {
                int partner = i ^ stride;
                if (partner <= i)
                    continue;
                unsigned long long x = sel[i], y = sel[partner];
                bool desc = (i & size) == 0;
                if (desc ? x < y : x > y) {
                    sel[i] = y;
                    sel[partner] = x;
                }
            }
            __syncthreads();
        }
    }
    int32_t *o = a.out + t * a.k;
    const int32_t *ptr = a.pt ? a.pt + t * a.npages : NULL;
    for (int64_t i = threadIdx.x; i < a.k; i += blockDim.x) {
        int32_t idx = i < kk ? topk_index(sel[i]) : -1;
        o[i] = ptr ? topk_page(idx, ptr, a.npages, a.ps, a.err_word) : idx;
    }
}

static reel_status topk_launch(reel_backend *be, const reel_launch *l)
{
    const reel_shape *ss = &l->in_shape[0];
    int64_t nrows = lead(ss, l->rows);
    if (nrows <= 0)
        return REEL_OK;
    topk_args a;
    a.scores = (const float *)l->in[0];
    a.lengths = (const int32_t *)l->in[1];
    bool paged = l->attrs->topk.has_page_table && l->in[2];
    a.pt = paged ? (const int32_t *)l->in[2] : NULL;
    a.out = (int32_t *)l->out[0];
    a.err_word = l->meta ? l->meta->err_word : NULL;
    a.ncols = row_numel(ss);
    a.k = l->attrs->topk.k;
    a.npages = paged ? row_numel(&l->in_shape[2]) : 0;
    a.ps = l->attrs->topk.page_size;
    a.p2 = 1;
    while (a.p2 < a.k)
        a.p2 *= 2;
    if (a.k <= 0)
        return REEL_OK;
    size_t smem = (size_t)a.p2 * sizeof(unsigned long long);
    topk_kernel<<<(unsigned)nrows, TOPK_THREADS, smem, reel_cuda_stream_handle(l->stream)>>>(a);
    return REEL_CU_LAUNCHED(be, "cuda.topk");
}

static bool use_topk(REEL_CU_USE_ARGS)
{
    bool paged = a->topk.has_page_table;
    if (nin < 2 || in[0].dtype != REEL_F32 || in[1].dtype != REEL_I32 || out[0].dtype != REEL_I32)
        return false;
    if (a->topk.k <= 0 || a->topk.k > REEL_CUDA_TOPK_MAX_K || in[0].dims[0] > 0x7fffffffLL ||
        in[0].dims[1] > 0x7fffffffLL)
        return false;
    return !paged || (nin >= 3 && in[2].dtype == REEL_I32 && a->topk.page_size > 0);
}

} /* namespace reel_cu */

REEL_CU_IMPL(reel_cu_topk_impl, "cuda.topk", REEL_OP_TOPK, 10, false, false,
             reel_cu::use_topk, reel_cu::topk_launch);
