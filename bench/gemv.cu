/* Skinny matmuls (the decode regime): reel's weight-streaming kernel
 * (ops/cuda/gemv.cu, through its direct entry with the configuration the
 * cuda.matmul.gemv impl picks) against cuBLASLt as reel calls it (the
 * cuda.matmul.cublaslt impl: the heuristic's first algorithm, memoized),
 * bf16, M = 1, 2, 4, 8, 16 (and 32 for [N, K]), weights [N, K] (w_transposed, the checkpoint
 * layout) and [K, N], with a copy-bandwidth probe of the same bytes in the
 * same run.
 *
 * Every timing is a captured CUDA graph of L launches, each reading another
 * copy of the weights (at least 3 x 50 MB of copies in rotation, so weights
 * come from HBM and not from the 50 MB L2), replayed many times; the figure
 * is the median replay over L (so the gaps between graph nodes are counted,
 * as a replayed step pays them). "floor" is the weight bytes over the read
 * bandwidth of a 1 GiB read-once kernel (16-byte loads, no L1: the weights'
 * access); the probes are also timed on each shape's own bytes, and a
 * cudaMemcpy D2D of them (read + write) is reported beside.
 *
 *   bench_gemv [replays]        (default 30)
 * Also prints a sweep of the kernel's configurations (warps per block,
 * cluster split, unroll) at M = 1 and 16, against the one the impl picks.
 * With $OUT set, writes $OUT/gemv.csv. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <algorithm>
#include <vector>

#include "reel/reel.h"
#include "backend/cuda/cuda.h"
#include "backend/ctx.h"
extern "C" {
#include "ops/op.h"
}
#include "ops/cuda/gemv.h"
#include "ops/cuda/impls.h"
#include "bench/graph_timer.cuh"

static reel_ctx *g_ctx;
static int g_replays = 30;

/* Read + write bandwidth of a D2D copy of `bytes`, rotating over copies. */
static double copy_tbs(cudaStream_t s, void *const *src, int ncopies, void *dst, size_t bytes, double *us)
{
    int L = std::max(ncopies, 8);
    *us = time_graph(s, L, g_replays, [&](int i) { CK(cudaMemcpyAsync(dst, src[i % ncopies], bytes, cudaMemcpyDeviceToDevice, s)); });
    return 2.0 * (double)bytes / (*us * 1e-6) / 1e12;
}

static unsigned *g_sink;

/* Read bandwidth of `bytes`, rotating over copies; *us per read. */
static double read_tbs(cudaStream_t s, void *const *src, int ncopies, size_t bytes, int sms, double *us)
{
    return read_probe_tbs(s, src, ncopies, bytes, sms, g_replays, g_sink, us);
}

struct shape {
    int n, k;
    const char *what;
};

static const shape shapes[] = {
    {1024, 1024, "attn o / q (hidden 1024)"}, {3072, 1024, "fused qkv"},   {4096, 1024, "up (ffn 4096)"},
    {8192, 1024, "gate+up fused"},           {1024, 4096, "down (ffn 4096)"}, {4096, 4096, "hidden 4096"},
    {14336, 4096, "gate/up (Llama 8B)"},     {4096, 14336, "down (Llama 8B)"},
};
static const int mlist[] = {1, 2, 4, 8, 16, 32}; /* 32: [N, K] only */

struct rig {
    reel_backend *be;
    reel_stream *rs;
    cudaStream_t s;
    std::vector<void *> w;
    void *x, *y, *y2, *dst;
    size_t wbytes;
    int ncopies;
};

/* One matmul through an impl's launch(), as reel's executor issues it. */
struct node {
    reel_shape sh[3];
    reel_op_attrs at;
    reel_launch l;
};

static void node_init(node &nd, rig &r, int m, int n, int k, bool wt, void *y)
{
    memset(&nd, 0, sizeof nd);
    for (int i = 0; i < 3; i++)
        nd.sh[i].dtype = REEL_BF16, nd.sh[i].ndim = 2;
    nd.sh[0].tokens = nd.sh[2].tokens = true;
    nd.sh[0].dims[0] = m, nd.sh[0].dims[1] = k;
    nd.sh[1].dims[0] = wt ? n : k, nd.sh[1].dims[1] = wt ? k : n;
    nd.sh[2].dims[0] = m, nd.sh[2].dims[1] = n;
    nd.at.matmul.w_transposed = wt;
    nd.l.op = REEL_OP_MATMUL;
    nd.l.attrs = &nd.at;
    nd.l.in_shape = nd.sh;
    nd.l.out_shape = &nd.sh[2];
    nd.l.in[0] = r.x, nd.l.in[1] = r.w[0], nd.l.out[0] = y;
    nd.l.rows = m;
    nd.l.stream = r.rs;
}

/* The kernel through its direct entry, with the configuration the impl
 * picks (the impl itself hands most of these shapes to cuBLASLt). */
static reel_status kernel_launch(reel_backend *be, const reel_launch *l)
{
    bool wt = l->attrs->matmul.w_transposed;
    int k = (int)l->in_shape[0].dims[1], n = (int)(wt ? l->in_shape[1].dims[0] : l->in_shape[1].dims[1]);
    cudaError_t e = reel_cuda_gemv_run(REEL_BF16, wt, l->in[0], l->in[1], l->out[0], (int)l->rows, n, k,
                                       reel_cuda_gemv_pick(n, k, wt, be->caps.sm_count),
                                       reel_cuda_stream_handle(l->stream), l->pdl);
    return e == cudaSuccess ? REEL_OK : REEL_E_BACKEND;
}

static double time_impl(rig &r, const reel_op_impl *impl, node &nd, bool pdl)
{
    nd.l.pdl = false;
    RK(impl->launch(r.be, &nd.l)); /* warm-up: cuBLASLt's heuristic is memoized here */
    CK(cudaStreamSynchronize(r.s));
    int L = std::max(r.ncopies, 20);
    return time_graph(r.s, L, g_replays, [&](int i) {
        nd.l.in[1] = r.w[i % r.ncopies];
        nd.l.pdl = pdl && i > 0;
        RK(impl->launch(r.be, &nd.l));
    });
}

/* Largest |a - b| over largest |b| of two bf16 outputs. */
static double rel_diff(const void *da, const void *db, size_t n)
{
    std::vector<uint16_t> a(n), b(n);
    CK(cudaMemcpy(a.data(), da, n * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(b.data(), db, n * 2, cudaMemcpyDeviceToHost));
    double md = 0, mb = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t ua = (uint32_t)a[i] << 16, ub = (uint32_t)b[i] << 16;
        float fa, fb;
        memcpy(&fa, &ua, 4), memcpy(&fb, &ub, 4);
        if (!(fabs(fa - fb) <= md))
            md = isnan(fa - fb) ? INFINITY : fabs(fa - fb);
        mb = std::max(mb, (double)fabs(fb));
    }
    return md / (mb > 0 ? mb : 1);
}

int main(int argc, char **argv)
{
    if (argc > 1)
        g_replays = std::max(5, atoi(argv[1]));
    reel_ctx_opts co = REEL_CTX_OPTS_INIT;
    co.backend = REEL_BACKEND_CUDA;
    RK(reel_ctx_create(&co, &g_ctx));
    rig r;
    r.be = g_ctx->be;
    RK(r.be->vt->stream_create(r.be, &r.rs));
    r.s = reel_cuda_stream_handle(r.rs);
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    time_t now = time(NULL);
    char date[64];
    strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", gmtime(&now));
    printf("# bench_gemv: %s, %d SMs, L2 %d MB, %s, %d replays a timing\n\n", prop.name, prop.multiProcessorCount,
           prop.l2CacheSize >> 20, date, g_replays);
    reel_op_impl kernel;
    memset(&kernel, 0, sizeof kernel);
    kernel.name = "gemv kernel";
    kernel.launch = kernel_launch;
    const reel_op_impl *gv = &kernel, *lt = &reel_cu_matmul_lt_impl;

    /* Ceiling: a 1 GiB copy, counting bytes read plus written. */
    size_t big = (size_t)1 << 30;
    void *bsrc[2], *bdst;
    CK(cudaMalloc(&bsrc[0], big));
    CK(cudaMalloc(&bsrc[1], big));
    CK(cudaMalloc(&bdst, big));
    CK(cudaMemset(bsrc[0], 1, big));
    CK(cudaMemset(bsrc[1], 2, big));
    CK(cudaMalloc(&g_sink, sizeof(unsigned)));
    int sms = prop.multiProcessorCount;
    double big_us, copy_bw = copy_tbs(r.s, bsrc, 2, bdst, big, &big_us);
    double read_us, read_bw = read_tbs(r.s, bsrc, 2, big, sms, &read_us);
    printf("copy bandwidth (1 GiB cudaMemcpy D2D in a graph, read + write): %.2f TB/s\n", copy_bw);
    printf("read bandwidth (1 GiB, a 16-byte-load kernel, %d x 512 threads): %.2f TB/s\n\n", sms * 4, read_bw);
    CK(cudaFree(bsrc[0]));
    CK(cudaFree(bsrc[1]));
    CK(cudaFree(bdst));

    FILE *csv = NULL;
    const char *out = getenv("OUT");
    if (out) {
        char path[512];
        snprintf(path, sizeof path, "%s/gemv.csv", out);
        csv = fopen(path, "w");
        if (csv)
            fprintf(csv, "layout,n,k,m,mb,floor_us,read_us,copy_us,gemv_us,gemv_pdl_us,cublaslt_us,gemv_tbs,cublaslt_tbs,"
                         "rel_diff,warps,splits,unroll\n");
    }
    printf("floor: weight bytes / the 1 GiB read bandwidth; read and copy us: the probes on these bytes\n\n");
    printf("| weights | layout | MB | floor us | read us | copy us | M | gemv us | gemv pdl us | cuBLASLt us |"
           " gemv TB/s | cuBLASLt TB/s | gemv / read bw | cuBLASLt / gemv | cfg w/s/u |\n");
    printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
    std::vector<char> sweep_log;
    for (const shape &sh : shapes)
        for (int wt = 1; wt >= 0; wt--) {
            r.wbytes = (size_t)sh.n * sh.k * 2;
            r.ncopies = (int)std::max<size_t>(2, (size_t)(150u << 20) / r.wbytes + 1);
            r.w.assign(r.ncopies, nullptr);
            for (int i = 0; i < r.ncopies; i++) {
                CK(cudaMalloc(&r.w[i], r.wbytes));
                fill_bf16<<<1024, 256, 0, r.s>>>((uint16_t *)r.w[i], r.wbytes / 2, 77u + (uint32_t)i);
            }
            CK(cudaMalloc(&r.x, (size_t)REEL_GEMV_MAX_M * sh.k * 2));
            fill_bf16<<<64, 256, 0, r.s>>>((uint16_t *)r.x, (size_t)REEL_GEMV_MAX_M * sh.k, 5u);
            CK(cudaMalloc(&r.y, (size_t)REEL_GEMV_MAX_M * sh.n * 2));
            CK(cudaMalloc(&r.y2, (size_t)REEL_GEMV_MAX_M * sh.n * 2));
            CK(cudaMalloc(&r.dst, r.wbytes));
            CK(cudaStreamSynchronize(r.s));
            double copy_us, rd_us;
            copy_tbs(r.s, r.w.data(), r.ncopies, r.dst, r.wbytes, &copy_us);
            read_tbs(r.s, r.w.data(), r.ncopies, r.wbytes, sms, &rd_us);
            double floor_us = (double)r.wbytes / (read_bw * 1e12) * 1e6;
            reel_gemv_cfg pick = reel_cuda_gemv_pick(sh.n, sh.k, wt, r.be->caps.sm_count);
            for (int m : mlist) {
                if (m > (wt ? REEL_GEMV_MAX_M : REEL_GEMV_MAX_M_KN))
                    continue;
                node a, b;
                node_init(a, r, m, sh.n, sh.k, wt, r.y);
                node_init(b, r, m, sh.n, sh.k, wt, r.y2);
                double tg = time_impl(r, gv, a, false), tp = time_impl(r, gv, a, r.be->caps.pdl);
                double tl = time_impl(r, lt, b, false);
                /* Same weights for both before comparing. */
                a.l.in[1] = b.l.in[1] = r.w[0];
                a.l.pdl = b.l.pdl = false;
                RK(gv->launch(r.be, &a.l));
                RK(lt->launch(r.be, &b.l));
                CK(cudaStreamSynchronize(r.s));
                double rd = rel_diff(r.y, r.y2, (size_t)m * sh.n);
                double best = std::min(tg, tp);
                double gtb = r.wbytes / (best * 1e-6) / 1e12, ltb = r.wbytes / (tl * 1e-6) / 1e12;
                printf("| %dx%d %s | %s | %.1f | %.2f | %.2f | %.2f | %d | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f |"
                       " %d/%d/%d |%s\n",
                       sh.n, sh.k, sh.what, wt ? "[N,K]" : "[K,N]", r.wbytes / 1048576.0, floor_us, rd_us, copy_us, m,
                       tg, tp, tl, gtb, ltb, gtb / read_bw, tl / best, pick.warps, pick.splits, pick.unroll,
                       rd > 2e-2 ? " MISMATCH" : "");
                if (csv)
                    fprintf(csv, "%s,%d,%d,%d,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.4f,%.4f,%.3g,%d,%d,%d\n",
                            wt ? "NK" : "KN", sh.n, sh.k, m, r.wbytes / 1048576.0, floor_us, rd_us, copy_us, tg, tp,
                            tl, gtb, ltb, rd, pick.warps, pick.splits, pick.unroll);
                if (rd > 2e-2)
                    fprintf(stderr, "MISMATCH %dx%d %s M=%d: rel diff %.3g\n", sh.n, sh.k, wt ? "NK" : "KN", m, rd);
                /* The sweep: every configuration, through the direct entry. */
                if (m != 1 && m != 16)
                    continue;
                double bt = 1e30;
                reel_gemv_cfg bc = pick;
                int wmax = wt ? 16 : 8;
                for (int u = 2; u <= 4; u++)
                    for (int sp = 1; sp <= 8; sp *= 2)
                        for (int w = 1; w <= wmax; w *= 2) {
                            reel_gemv_cfg c = {w, sp, u};
                            /* A cluster the device cannot place fails here, not in a capture. */
                            if (reel_cuda_gemv_run(REEL_BF16, wt, r.x, r.w[0], r.y, m, sh.n, sh.k, c, r.s, false) !=
                                    cudaSuccess ||
                                cudaStreamSynchronize(r.s) != cudaSuccess) {
                                (void)cudaGetLastError();
                                continue;
                            }
                            int L = std::max(r.ncopies, 20);
                            double t = time_graph(r.s, L, g_replays, [&](int i) {
                                CK(reel_cuda_gemv_run(REEL_BF16, wt, r.x, r.w[i % r.ncopies], r.y, m, sh.n, sh.k, c,
                                                      r.s, r.be->caps.pdl && i > 0));
                            });
                            if (t < bt)
                                bt = t, bc = c;
                        }
                char line[256];
                int len = snprintf(line, sizeof line,
                                   "| %dx%d | %s | %d | %d/%d/%d | %.2f | %d/%d/%d | %.2f | %.2f |\n", sh.n, sh.k,
                                   wt ? "[N,K]" : "[K,N]", m, pick.warps, pick.splits, pick.unroll, std::min(tg, tp),
                                   bc.warps, bc.splits, bc.unroll, bt, r.wbytes / (bt * 1e-6) / 1e12);
                sweep_log.insert(sweep_log.end(), line, line + len);
            }
            for (void *p : r.w)
                CK(cudaFree(p));
            CK(cudaFree(r.x));
            CK(cudaFree(r.y));
            CK(cudaFree(r.y2));
            CK(cudaFree(r.dst));
        }
    printf("\nconfiguration sweep (pdl graph; w/s/u = warps per block / cluster split / pipeline stages):\n\n");
    printf("| weights | layout | M | picked | picked us | best | best us | best TB/s |\n");
    printf("| --- | --- | --- | --- | --- | --- | --- | --- |\n");
    sweep_log.push_back(0);
    fputs(sweep_log.data(), stdout);
    if (csv)
        fclose(csv);
    r.be->vt->stream_destroy(r.be, r.rs);
    reel_ctx_destroy(g_ctx);
    return 0;
}
