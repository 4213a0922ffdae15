/* Paged attention micro-benchmark: reel's cuda.paged_attention op (KV
 * write, prefill, split-KV decode, combine: what a step pays per layer)
 * on shapes of the issue, beside a copy-bandwidth probe (read + write) and
 * a read probe (one read-only stream over 1 GiB), in one run.
 * bench/torch_attention.py times PyTorch's scaled_dot_product_attention on
 * contiguous K/V of the same shapes.
 *
 * Each point allocates L layers' caches (L copies, together past the 50 MB
 * L2, so K/V come from HBM as in a real step), captures one launch per layer
 * in a CUDA graph and replays it; the time per layer is the median of the
 * replays over L. Inputs are seeded values, the same in every build; the
 * last column hashes the output (FNV-1a of its bytes), so an A/B run also
 * shows whether two builds compute the same bits. Output: a markdown table.
 *   bench_attention [reps [point | prefill | decode]]  (point: one row's
 *   index, from 0, for profiling; prefill, decode: those rows only)
 * A build with -DREEL_ATTN_DM_TRACE (`bench/gpu.sh ab` with the build
 * "tr:-DREEL_ATTN_DM_TRACE") also prints, before each row, the tensor-core
 * decode's phase trace of one replay (docs/attention.md). */
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <vector>

extern "C" {
#include "ops/cuda/cuda_ops.h"
#include "backend/backend.h"
#include "backend/ctx.h"
}
#include "backend/cuda/cuda.h"
#include "bench/read_probe.cuh"

typedef struct point {
    int h, hkv, dh, batch, qlen;
    int32_t ctx;
} point;

static double median(std::vector<double> v)
{
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

static const reel_op_impl *find_impl(const char *name)
{
    for (int k = 0; k < reel_cuda_nimpls; k++)
        if (strcmp(reel_cuda_impls[k]->name, name) == 0)
            return reel_cuda_impls[k];
    return NULL;
}

static double copy_probe(size_t bytes, int reps)
{
    void *a, *b;
    CK(cudaMalloc(&a, bytes));
    CK(cudaMalloc(&b, bytes));
    CK(cudaMemset(a, 1, bytes));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    std::vector<double> t;
    for (int r = 0; r < reps; r++) {
        CK(cudaEventRecord(e0));
        CK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice));
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        t.push_back(ms * 1e3);
    }
    CK(cudaFree(a));
    CK(cudaFree(b));
    return median(t);
}

/* The median over reps of one read of `bytes` (4 blocks of 512 threads an
 * SM), us. */
static double read_probe_us(size_t bytes, int reps)
{
    void *a;
    unsigned *sink;
    int dev = 0, sms = 0;
    CK(cudaGetDevice(&dev));
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    CK(cudaMalloc(&a, bytes));
    CK(cudaMalloc((void **)&sink, sizeof *sink));
    CK(cudaMemset(a, 1, bytes));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    std::vector<double> t;
    for (int r = 0; r <= reps; r++) {
        CK(cudaEventRecord(e0));
        read_probe<<<sms * 4, 512>>>((const uint4 *)a, bytes / 16, sink);
        CK(cudaGetLastError());
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        if (r > 0) /* the first is a warm-up */
            t.push_back(ms * 1e3);
    }
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    CK(cudaFree(a));
    CK(cudaFree(sink));
    return median(t);
}

#ifdef REEL_ATTN_DM_TRACE
extern "C" cudaError_t reel_cu_dm_trace_clear(void);
extern "C" cudaError_t reel_cu_dm_trace_read(unsigned long long *dst, int *nblocks, int *nphases);

/* A measurement build's phase trace of the tensor-core decode (the last
 * layer's launch of one replay): per phase, the median and the largest time
 * since a block's start over the blocks that stamped it, in ns. */
static void trace_point(cudaGraphExec_t exec, cudaStream_t st)
{
    CK(reel_cu_dm_trace_clear());
    CK(cudaGraphLaunch(exec, st));
    CK(cudaStreamSynchronize(st));
    static unsigned long long tr[2048 * 16];
    int nb, np;
    CK(reel_cu_dm_trace_read(tr, &nb, &np));
    std::vector<double> ratio, starts;
    std::vector<unsigned long long> t0s; /* ns stamps: subtracted as integers, past a double's 53 bits */
    unsigned long long g0 = ~0ull, g1 = 0;
    int n = 0;
    for (int b = 0; b < nb; b++) {
        const unsigned long long *r = tr + (size_t)b * np;
        if (!r[0] || !r[13] || !r[14] || !r[15])
            continue;
        n++;
        ratio.push_back((double)(r[15] - r[14]) / (double)(r[13] - r[0]));
        t0s.push_back(r[14]);
        g0 = std::min(g0, r[14]);
        g1 = std::max(g1, r[15]);
    }
    if (!n) {
        printf("trace: no block stamped\n");
        return;
    }
    const double nspc = median(ratio);
    for (unsigned long long t : t0s)
        starts.push_back((double)(t - g0));
    printf("trace: %d blocks, kernel span %.2f us, block start median %.2f max %.2f us, %.3f ns/cycle\n", n,
           (g1 - g0) * 1e-3, median(starts) * 1e-3, *std::max_element(starts.begin(), starts.end()) * 1e-3, nspc);
    printf("trace: phase (median / max us since the block's start):");
    for (int i = 1; i <= 13; i++) {
        std::vector<double> d;
        for (int b = 0; b < nb; b++) {
            const unsigned long long *r = tr + (size_t)b * np;
            if (r[0] && r[13] && r[i])
                d.push_back((double)(r[i] - r[0]) * nspc * 1e-3);
        }
        if (!d.empty())
            printf(" %d: %.2f / %.2f (%zu)", i, median(d), *std::max_element(d.begin(), d.end()), d.size());
    }
    printf("\n");
}
#endif

/* One point: returns us per layer; *kv_bytes the K/V bytes a layer reads. */
/* Seeded values in [-0.25, 0.25), the same in every build: the output hash
 * then tells whether two builds compute the same bits. */
__global__ void fill_bf16_kernel(uint16_t *p, int64_t n, uint32_t seed)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        uint32_t x = (uint32_t)i * 2654435761u ^ seed * 2246822519u;
        x ^= x >> 15;
        x *= 2246822519u;
        x ^= x >> 13;
        float f = ((float)(x & 1023) - 512.0f) / 2048.0f;
        uint32_t b;
        memcpy(&b, &f, 4);
        p[i] = (uint16_t)(b >> 16);
    }
}

static void fill_bf16(void *p, int64_t n, uint32_t seed)
{
    fill_bf16_kernel<<<1024, 256>>>((uint16_t *)p, n, seed);
    CK(cudaGetLastError());
}

/* FNV-1a over the bytes of a device buffer. */
static uint64_t device_fnv(const void *dev, size_t bytes)
{
    std::vector<unsigned char> h(bytes);
    CK(cudaMemcpy(h.data(), dev, bytes, cudaMemcpyDeviceToHost));
    uint64_t x = 1469598103934665603ull;
    for (unsigned char c : h)
        x = (x ^ c) * 1099511628211ull;
    return x;
}

static double run_point(reel_ctx *ctx, const reel_op_impl *impl, const point &pt, int reps, double *kv_bytes,
                        uint64_t *out_hash)
{
    reel_backend *be = ctx->be;
    const int bs = 16;
    int64_t rows = (int64_t)pt.batch * pt.qlen;
    int32_t nb_seq = (pt.ctx + bs - 1) / bs;
    int64_t nblocks = (int64_t)pt.batch * nb_seq;
    int64_t kvrow = (int64_t)pt.hkv * pt.dh, qrow = (int64_t)pt.h * pt.dh;
    size_t cache_bytes = (size_t)(nblocks * bs * kvrow) * 2;
    *kv_bytes = 2.0 * (double)pt.batch * pt.ctx * (double)kvrow * 2;
    int layers = (int)std::max<double>(2.0, std::min<double>(64.0, ceil(256e6 / (2.0 * cache_bytes))));

    /* Metadata: sequence b's blocks are a shuffled range; its qlen tokens end at ctx. */
    std::vector<int32_t> pos(rows), slot(rows), tseq(rows), lens(pt.batch), bt((size_t)pt.batch * (nb_seq + 1));
    std::vector<int32_t> perm(nblocks);
    for (int64_t i = 0; i < nblocks; i++)
        perm[i] = (int32_t)i;
    srand(7);
    for (int64_t i = nblocks - 1; i > 0; i--)
        std::swap(perm[i], perm[rand() % (i + 1)]);
    for (int b = 0; b < pt.batch; b++) {
        lens[b] = pt.ctx;
        for (int j = 0; j <= nb_seq; j++)
            bt[(size_t)b * (nb_seq + 1) + j] = j < nb_seq ? perm[(int64_t)b * nb_seq + j] : -1;
        for (int i = 0; i < pt.qlen; i++) {
            int64_t t = (int64_t)b * pt.qlen + i;
            int32_t p = pt.ctx - pt.qlen + i;
            pos[t] = p;
            tseq[t] = b;
            slot[t] = bt[(size_t)b * (nb_seq + 1) + p / bs] * bs + p % bs;
        }
    }
    int32_t *d[5], *err;
    const std::vector<int32_t> *src[5] = {&pos, &slot, &tseq, &lens, &bt};
    for (int i = 0; i < 5; i++) {
        CK(cudaMalloc(&d[i], src[i]->size() * 4));
        CK(cudaMemcpy(d[i], src[i]->data(), src[i]->size() * 4, cudaMemcpyHostToDevice));
    }
    CK(cudaMalloc(&err, 4));
    CK(cudaMemset(err, 0, 4));
    uint32_t *cnt; /* the one-kernel decode's counters, as a plan's static region has them */
    CK(cudaMalloc(&cnt, 4 * REEL_ATTN_CNT_MAX_WORDS));
    CK(cudaMemset(cnt, 0, 4 * REEL_ATTN_CNT_MAX_WORDS));
    reel_meta_view mv = {d[0], d[1], d[2], d[3], d[4], pt.batch, nb_seq + 1, pt.ctx, err, cnt, REEL_ATTN_CNT_MAX_WORDS};

    void *q, *k, *v, *out, *ws;
    CK(cudaMalloc(&q, (size_t)(rows * qrow) * 2));
    CK(cudaMalloc(&k, (size_t)(rows * kvrow) * 2));
    CK(cudaMalloc(&v, (size_t)(rows * kvrow) * 2));
    CK(cudaMalloc(&out, (size_t)(rows * qrow) * 2));
    CK(cudaMalloc(&ws, (size_t)REEL_ATTN_SPLIT_SLOTS * (size_t)(qrow + pt.h) * 4));
    fill_bf16(q, rows * qrow, 1);
    fill_bf16(k, rows * kvrow, 2);
    fill_bf16(v, rows * kvrow, 3);
    std::vector<void *> kc(layers), vc(layers);
    for (int L = 0; L < layers; L++) {
        CK(cudaMalloc(&kc[L], cache_bytes));
        CK(cudaMalloc(&vc[L], cache_bytes));
        fill_bf16(kc[L], (int64_t)(cache_bytes / 2), 100 + 2 * (uint32_t)L);
        fill_bf16(vc[L], (int64_t)(cache_bytes / 2), 101 + 2 * (uint32_t)L);
    }

    reel_shape in[5], os[2];
    memset(in, 0, sizeof in);
    memset(os, 0, sizeof os);
    in[0] = reel_shape{REEL_BF16, 2, {rows, qrow, 0, 0}, true};
    in[1] = reel_shape{REEL_BF16, 2, {rows, kvrow, 0, 0}, true};
    in[2] = in[1];
    in[3] = reel_shape{REEL_BF16, 4, {nblocks, bs, pt.hkv, pt.dh}, false};
    in[4] = in[3];
    os[0] = in[0];
    os[1] = reel_shape{REEL_F32, 2, {REEL_ATTN_SPLIT_SLOTS, qrow + pt.h, 0, 0}, false};
    reel_op_attrs attrs;
    memset(&attrs, 0, sizeof attrs);
    attrs.attn.p = REEL_ATTN_PARAMS_INIT;
    attrs.attn.p.num_heads = pt.h;
    attrs.attn.p.num_kv_heads = pt.hkv;
    attrs.attn.p.head_dim = pt.dh;
    attrs.attn.p.block_size = bs;
    attrs.attn.p.scale = 1.0f / sqrtf((float)pt.dh);
    if (!impl->can_use(in, 5, os, &attrs, &be->caps)) {
        fprintf(stderr, "%s refuses the point\n", impl->name);
        exit(1);
    }
    reel_stream *rs;
    if (be->vt->stream_create(be, &rs) != REEL_OK) {
        fprintf(stderr, "stream: %s\n", reel_ctx_last_error(ctx));
        exit(1);
    }
    cudaStream_t st = reel_cuda_stream_handle(rs);
    reel_launch l;
    memset(&l, 0, sizeof l);
    l.op = REEL_OP_PAGED_ATTENTION;
    l.attrs = &attrs;
    l.in_shape = in;
    l.out_shape = os;
    l.rows = rows;
    l.meta = &mv;
    l.stream = rs;
    l.in[0] = q;
    l.in[1] = k;
    l.in[2] = v;
    l.out[0] = out;
    l.out[1] = ws;
    auto issue = [&](void) {
        for (int L = 0; L < layers; L++) {
            l.in[3] = kc[L];
            l.in[4] = vc[L];
            if (impl->launch(be, &l) != REEL_OK) {
                fprintf(stderr, "launch: %s\n", reel_ctx_last_error(ctx));
                exit(1);
            }
        }
    };
    issue(); /* warm-up, outside capture */
    CK(cudaStreamSynchronize(st));
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    issue();
    CK(cudaStreamEndCapture(st, &graph));
    CK(cudaGraphInstantiate(&exec, graph, 0));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    std::vector<double> t;
    for (int r = 0; r < reps + 3; r++) {
        CK(cudaEventRecord(e0, st));
        CK(cudaGraphLaunch(exec, st));
        CK(cudaEventRecord(e1, st));
        CK(cudaEventSynchronize(e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        if (r >= 3)
            t.push_back(ms * 1e3 / layers);
    }
#ifdef REEL_ATTN_DM_TRACE
    trace_point(exec, st);
#endif
    int32_t herr;
    CK(cudaMemcpy(&herr, err, 4, cudaMemcpyDeviceToHost));
    if (herr != 0) {
        fprintf(stderr, "error word %d\n", herr);
        exit(1);
    }
    *out_hash = device_fnv(out, (size_t)(rows * qrow) * 2);
    CK(cudaGraphExecDestroy(exec));
    CK(cudaGraphDestroy(graph));
    be->vt->stream_destroy(be, rs);
    for (int L = 0; L < layers; L++) {
        CK(cudaFree(kc[L]));
        CK(cudaFree(vc[L]));
    }
    void *bufs[] = {q, k, v, out, ws, err, cnt, d[0], d[1], d[2], d[3], d[4]};
    for (void *b : bufs)
        CK(cudaFree(b));
    return median(t);
}

int main(int argc, char **argv)
{
    int reps = argc > 1 ? atoi(argv[1]) : 20;
    /* The second argument picks points: a row number (one point, for
     * profiling), or "prefill" or "decode" (those rows only, for A/B runs). */
    const char *pick = argc > 2 ? argv[2] : "";
    /* The third, a comma list of decode contexts in place of 128, 2048,
     * 8192 (the chunking's A/B runs). */
    std::vector<int> ctxs = {128, 2048, 8192};
    if (argc > 3) {
        ctxs.clear();
        for (const char *c = argv[3]; *c;) {
            ctxs.push_back(atoi(c));
            c = strchr(c, ',');
            c = c ? c + 1 : "";
        }
    }
    int only = pick[0] >= '0' && pick[0] <= '9' ? atoi(pick) : -1;
    int kind = strcmp(pick, "prefill") == 0 ? 2 : strcmp(pick, "decode") == 0 ? 1 : 0;
    reel_ctx *ctx;
    reel_ctx_opts o = REEL_CTX_OPTS_INIT;
    o.backend = REEL_BACKEND_CUDA;
    if (reel_ctx_create(&o, &ctx) != REEL_OK) {
        fprintf(stderr, "no CUDA context\n");
        return 1;
    }
    const reel_op_impl *impl = find_impl("cuda.paged_attention");
    double copy_us = copy_probe((size_t)512 << 20, 20);
    double copy_tbs = 2.0 * (512 << 20) / (copy_us * 1e-6) / 1e12;
    double read_us = read_probe_us((size_t)1 << 30, 20);
    double read_tbs = (double)((size_t)1 << 30) / (read_us * 1e-6) / 1e12;
    printf("copy probe: 512 MiB D2D in %.1f us = %.2f TB/s (read + write)\n", copy_us, copy_tbs);
    printf("read probe: 1 GiB read once in %.1f us = %.2f TB/s\n\n", read_us, read_tbs);
    printf("| kind | dh | H/Hkv | batch | q tokens | context | reel us/layer | K/V MB | TB/s | of copy BW "
           "| of read BW | out fnv |\n");
    printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
    std::vector<point> pts;
    int dhs[2] = {64, 128}, hs[2] = {16, 32};
    for (int di = 0; di < 2; di++)
        for (int gq = 1; gq <= 8; gq += 7) {
            int h = hs[di], hkv = h / gq;
            for (int b : {1, 8, 64})
                for (int c : ctxs)
                    pts.push_back(point{h, hkv, dhs[di], b, 1, c});
            for (int qn : {512, 2048})
                for (int c : {2048, 8192})
                    pts.push_back(point{h, hkv, dhs[di], 1, qn, c});
        }
    for (size_t i = 0; i < pts.size(); i++) {
        const point &pt = pts[i];
        if ((only >= 0 && (size_t)only != i) || (kind == 2 && pt.qlen == 1) || (kind == 1 && pt.qlen > 1))
            continue;
        double kvb;
        uint64_t hash;
        double us = run_point(ctx, impl, pt, reps, &kvb, &hash);
        double tbs = kvb / (us * 1e-6) / 1e12;
        printf("| %s | %d | %d/%d | %d | %d | %d | %.2f | %.1f | %.2f | %.0f%% | %.0f%% | %016llx |\n",
               pt.qlen > 1 ? "prefill" : "decode", pt.dh, pt.h, pt.hkv, pt.batch, pt.qlen * pt.batch, pt.ctx, us,
               kvb / 1e6, tbs, 100.0 * tbs / copy_tbs, 100.0 * tbs / read_tbs, (unsigned long long)hash);
        fflush(stdout);
    }
    reel_ctx_destroy(ctx);
    return 0;
}
