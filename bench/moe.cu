/* The mixture-of-experts kernels (ops/cuda/moe.cu) at decode shapes, each
 * launched through its impl as reel's executor issues it, timed as the
 * median us per launch in a captured graph of L launches, beside the bytes
 * it must move (its floor, ops/cuda/moe.cu's header) and the bandwidth that
 * reaches; then the five as one chain (route, align, gate_up, down,
 * combine), with and without programmatic dependent launch.
 *
 *   Qwen3-30B-A3B  E 128, K 8, H 2048, F 768 (softmax, renormalized)
 *   Mixtral 8x7B   E 8,   K 2, H 4096, F 14336 (softmax, renormalized)
 *   DeepSeek-V3    E 256, K 8, H 7168, F 2048 (sigmoid, a choice bias, 8
 *                  groups, 4 kept, scaled 2.5; bf16 here, not fp8)
 * at batch 1, 8, 64 and 256, bf16, one layer's experts in device memory
 * (DeepSeek's: 22.5 GB). The launches rotate over NSETS routings of their
 * own (different logits), so consecutive launches read different experts'
 * weights, as consecutive layers do; the bytes are each set's own, averaged.
 * A = the distinct experts of a step; a floor counts each input read once
 * and each output written once, its time that over the measured read
 * bandwidth (bench/read_probe.cuh). The first token's ids are checked
 * against ops/moe.h's reel_moe_route_row on the host (bit for bit).
 * Usage: bench_moe [replays] [model: qwen3 | mixtral | deepseek] */
#include <cuda_runtime.h>
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
#include "ops/cuda/impls.h"
#include "ops/moe.h"
#include "bench/bench_cuda.cuh"
#include "bench/graph_timer.cuh"

static reel_ctx *g_ctx;
static unsigned *g_sink;

enum { NSETS = 4 };

/* bf16 values uniform in [-amp, amp): a hash of the index. */
__global__ void fill_bf16(uint16_t *p, size_t n, uint32_t salt, float amp)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ salt ^ (uint32_t)(i >> 32) * 40503u;
        h ^= h >> 15, h *= 2246822519u, h ^= h >> 13;
        float f = ((float)(h & 0xffffff) / 8388608.0f - 1.0f) * amp;
        uint32_t b;
        memcpy(&b, &f, 4);
        p[i] = (uint16_t)((b + 0x7fff + ((b >> 16) & 1)) >> 16);
    }
}

static void fill(void *p, size_t n, uint32_t salt, float amp, cudaStream_t s)
{
    fill_bf16<<<1024, 256, 0, s>>>((uint16_t *)p, n, salt, amp);
    CK(cudaGetLastError());
}

struct model {
    const char *name;
    int E, K, H, F, scoring, n_group, topk_group;
    bool renorm, bias;
    float scaling;
};

static const model models[] = {
    { "qwen3-30b-a3b", 128, 8, 2048, 768, REEL_MOE_SOFTMAX, 0, 0, true, false, 1.0f },
    { "mixtral-8x7b", 8, 2, 4096, 14336, REEL_MOE_SOFTMAX, 0, 0, true, false, 1.0f },
    { "deepseek-v3", 256, 8, 7168, 2048, REEL_MOE_SIGMOID, 8, 4, true, true, 2.5f },
};

static reel_shape shp(reel_dtype dt, bool tokens, int ndim, int64_t d0, int64_t d1 = 0, int64_t d2 = 0)
{
    reel_shape s;
    memset(&s, 0, sizeof s);
    s.dtype = dt, s.tokens = tokens, s.ndim = ndim;
    s.dims[0] = d0, s.dims[1] = d1, s.dims[2] = d2;
    return s;
}

/* One routing's buffers and the five launches over them. */
struct set {
    void *logits, *ids, *wts, *order, *where, *offs, *x, *act, *ys, *out;
    int active; /* A: distinct experts */
};

struct node {
    reel_op_attrs at;
    reel_shape in[4], out[3];
    reel_launch l;
};

int main(int argc, char **argv)
{
    int replays = argc > 1 ? std::max(5, atoi(argv[1])) : 15;
    const char *only = argc > 2 ? argv[2] : NULL;
    reel_ctx_opts co = REEL_CTX_OPTS_INIT;
    co.backend = REEL_BACKEND_CUDA;
    RK(reel_ctx_create(&co, &g_ctx));
    reel_backend *be = g_ctx->be;
    reel_stream *rs;
    RK(be->vt->stream_create(be, &rs));
    cudaStream_t s = reel_cuda_stream_handle(rs);
    CK(cudaMalloc(&g_sink, sizeof(unsigned)));
    bench_device dev;
    bench_device_probe(s, replays, g_sink, &dev);
    printf("# bench_moe: %s, %d SMs, L2 %d MB, %s, %d replays a timing, bf16, %d routings rotated\n\n",
           dev.prop.name, dev.sms, dev.prop.l2CacheSize >> 20, dev.date, replays, NSETS);
    printf("read bandwidth (1 GiB, a 16-byte-load kernel): %.2f TB/s; floor us = bytes / that\n\n", dev.read_tbs);
    printf("| model | batch | A | op | MB | floor us | us | TB/s | of floor |\n");
    printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
    static const int batches[] = { 1, 8, 64, 256 };
    static const char *const names[5] = { "moe_route", "moe_align", "moe_gate_up", "moe_down", "moe_combine" };
    static const char *const impls[5] = { "cuda.moe_route", "cuda.moe_align", "cuda.moe_gate_up", "cuda.moe_down",
                                          "cuda.moe_combine" };
    const reel_op_impl *impl[5];
    for (int k = 0; k < 5; k++) {
        impl[k] = NULL;
        for (int i = 0; i < reel_cuda_nimpls; i++)
            if (strcmp(reel_cuda_impls[i]->name, impls[k]) == 0)
                impl[k] = reel_cuda_impls[i];
        if (!impl[k]) {
            fprintf(stderr, "no impl %s\n", impls[k]);
            return 1;
        }
    }
    int failed = 0;
    for (const model &m : models) {
        if (only && !strstr(m.name, only))
            continue;
        const size_t wgu_n = (size_t)m.E * 2 * m.F * m.H, wdn_n = (size_t)m.E * m.H * m.F;
        void *wgu, *wdn, *bias = NULL;
        CK(cudaMalloc(&wgu, wgu_n * 2));
        CK(cudaMalloc(&wdn, wdn_n * 2));
        fill(wgu, wgu_n, 7u, 0.03f, s);
        fill(wdn, wdn_n, 9u, 0.03f, s);
        std::vector<float> hbias((size_t)m.E);
        if (m.bias) {
            for (int e = 0; e < m.E; e++)
                hbias[(size_t)e] = 0.01f * (float)((e * 37) % 21 - 10);
            CK(cudaMalloc(&bias, (size_t)m.E * 4));
            CK(cudaMemcpy(bias, hbias.data(), (size_t)m.E * 4, cudaMemcpyHostToDevice));
        }
        for (int T : batches) {
            const int64_t N = (int64_t)T * m.K;
            set st[NSETS];
            for (int q = 0; q < NSETS; q++) {
                set &b = st[q];
                CK(cudaMalloc(&b.logits, (size_t)T * m.E * 2));
                CK(cudaMalloc(&b.ids, (size_t)N * 4));
                CK(cudaMalloc(&b.wts, (size_t)N * 4));
                CK(cudaMalloc(&b.order, (size_t)N * 4));
                CK(cudaMalloc(&b.where, (size_t)N * 4));
                CK(cudaMalloc(&b.offs, (size_t)(m.E + 1) * 4));
                CK(cudaMalloc(&b.x, (size_t)T * m.H * 2));
                CK(cudaMalloc(&b.act, (size_t)N * m.F * 2));
                CK(cudaMalloc(&b.ys, (size_t)N * m.H * 2));
                CK(cudaMalloc(&b.out, (size_t)T * m.H * 2));
                fill(b.logits, (size_t)T * m.E, 100u + (uint32_t)q * 13u + (uint32_t)T, 4.0f, s);
                fill(b.x, (size_t)T * m.H, 200u + (uint32_t)q, 1.0f, s);
            }
            /* The five nodes; a launch's pointers are the set's. */
            node nd[5];
            memset(nd, 0, sizeof nd);
            for (int k = 0; k < 5; k++) {
                nd[k].at.moe.num_experts = m.E;
                nd[k].at.moe.top_k = m.K;
                nd[k].at.moe.routed_scaling = 1.0f;
            }
            nd[0].at.moe.scoring = m.scoring;
            nd[0].at.moe.n_group = m.n_group;
            nd[0].at.moe.topk_group = m.topk_group;
            nd[0].at.moe.renormalize = m.renorm;
            nd[0].at.moe.routed_scaling = m.scaling;
            nd[0].in[0] = shp(REEL_BF16, true, 2, T, m.E);
            if (m.bias)
                nd[0].in[1] = shp(REEL_F32, false, 1, m.E);
            nd[0].out[0] = shp(REEL_I32, true, 2, T, m.K);
            nd[0].out[1] = shp(REEL_F32, true, 2, T, m.K);
            nd[1].in[0] = shp(REEL_I32, true, 2, T, m.K);
            nd[1].out[0] = nd[1].out[1] = shp(REEL_I32, true, 2, T, m.K);
            nd[1].out[2] = shp(REEL_I32, false, 1, m.E + 1);
            nd[2].in[0] = shp(REEL_BF16, true, 2, T, m.H);
            nd[2].in[1] = shp(REEL_I32, true, 2, T, m.K);
            nd[2].in[2] = shp(REEL_I32, false, 1, m.E + 1);
            nd[2].in[3] = shp(REEL_BF16, false, 2, (int64_t)m.E * 2 * m.F, m.H);
            nd[2].out[0] = shp(REEL_BF16, true, 3, T, m.K, m.F);
            nd[3].in[0] = shp(REEL_BF16, true, 3, T, m.K, m.F);
            nd[3].in[1] = shp(REEL_I32, false, 1, m.E + 1);
            nd[3].in[2] = shp(REEL_BF16, false, 2, (int64_t)m.E * m.H, m.F);
            nd[3].out[0] = shp(REEL_BF16, true, 3, T, m.K, m.H);
            nd[4].in[0] = shp(REEL_BF16, true, 3, T, m.K, m.H);
            nd[4].in[1] = shp(REEL_I32, true, 2, T, m.K);
            nd[4].in[2] = shp(REEL_F32, true, 2, T, m.K);
            nd[4].out[0] = shp(REEL_BF16, true, 2, T, m.H);
            static const reel_op_kind kinds[5] = { REEL_OP_MOE_ROUTE, REEL_OP_MOE_ALIGN, REEL_OP_MOE_GATE_UP,
                                                   REEL_OP_MOE_DOWN, REEL_OP_MOE_COMBINE };
            for (int k = 0; k < 5; k++) {
                reel_launch &l = nd[k].l;
                l.op = kinds[k];
                l.attrs = &nd[k].at;
                l.in_shape = nd[k].in;
                l.out_shape = nd[k].out;
                l.rows = T;
                l.stream = rs;
                if (!impl[k]->can_use(nd[k].in, 4, nd[k].out, &nd[k].at, &be->caps)) {
                    fprintf(stderr, "%s refuses %s at batch %d\n", impls[k], m.name, T);
                    return 1;
                }
            }
            auto bind = [&](int k, const set &b) {
                reel_launch &l = nd[k].l;
                memset(l.in, 0, sizeof l.in);
                memset(l.out, 0, sizeof l.out);
                switch (k) {
                case 0: l.in[0] = b.logits, l.in[1] = bias, l.out[0] = b.ids, l.out[1] = b.wts; break;
                case 1: l.in[0] = b.ids, l.out[0] = b.order, l.out[1] = b.where, l.out[2] = b.offs; break;
                case 2: l.in[0] = b.x, l.in[1] = b.order, l.in[2] = b.offs, l.in[3] = wgu, l.out[0] = b.act; break;
                case 3: l.in[0] = b.act, l.in[1] = b.offs, l.in[2] = wdn, l.out[0] = b.ys; break;
                default: l.in[0] = b.ys, l.in[1] = b.where, l.in[2] = b.wts, l.out[0] = b.out; break;
                }
            };
            auto run = [&](int k, const set &b, bool pdl) {
                bind(k, b);
                nd[k].l.pdl = pdl && be->caps.pdl;
                nd[k].l.in_param = k == 2 ? 1u << 3 : k == 3 ? 1u << 2 : k == 0 && m.bias ? 1u << 1 : 0;
                RK(impl[k]->launch(be, &nd[k].l));
            };
            /* Each set's routing, once, for A and the check. */
            double mb[5] = { 0 };
            int a_sum = 0;
            for (int q = 0; q < NSETS; q++) {
                for (int k = 0; k < 5; k++)
                    run(k, st[q], false);
                CK(cudaStreamSynchronize(s));
                std::vector<int32_t> ids((size_t)N);
                CK(cudaMemcpy(ids.data(), st[q].ids, (size_t)N * 4, cudaMemcpyDeviceToHost));
                std::vector<char> used((size_t)m.E, 0);
                int a = 0;
                for (int32_t id : ids)
                    if (id >= 0 && id < m.E && !used[(size_t)id])
                        used[(size_t)id] = 1, a++;
                st[q].active = a;
                a_sum += a;
                if (q == 0) { /* token 0 against the host's rules */
                    std::vector<uint16_t> lg((size_t)m.E);
                    CK(cudaMemcpy(lg.data(), st[q].logits, (size_t)m.E * 2, cudaMemcpyDeviceToHost));
                    std::vector<float> row((size_t)m.E), scratch((size_t)REEL_MOE_SCRATCH(m.E)), w((size_t)m.K);
                    std::vector<int32_t> hid((size_t)m.K);
                    for (int e = 0; e < m.E; e++) {
                        uint32_t u = (uint32_t)lg[(size_t)e] << 16;
                        memcpy(&row[(size_t)e], &u, 4);
                    }
                    reel_moe_route_row(row.data(), m.bias ? hbias.data() : NULL, m.E, m.K, m.scoring, m.n_group,
                                       m.topk_group, m.renorm, m.scaling, scratch.data(), hid.data(), w.data());
                    if (memcmp(hid.data(), ids.data(), (size_t)m.K * 4) != 0) {
                        fprintf(stderr, "MISMATCH %s batch %d: token 0's experts differ from the host's\n", m.name,
                                T);
                        failed = 1;
                    }
                }
                const double E1 = m.E + 1, s2 = 2.0;
                mb[0] += (double)T * m.E * s2 + (m.bias ? m.E * 4.0 : 0.0) + N * 8.0;
                mb[1] += N * 4.0 + N * 8.0 + E1 * 4.0;
                mb[2] += (double)a * 2 * m.F * m.H * s2 + (double)T * m.H * s2 + (double)N * m.F * s2 + N * 4.0 +
                         E1 * 4.0;
                mb[3] += (double)a * m.H * m.F * s2 + (double)N * m.F * s2 + (double)N * m.H * s2 + E1 * 4.0;
                mb[4] += (double)N * m.H * s2 + N * 8.0 + (double)T * m.H * s2;
            }
            const int L = 2 * NSETS;
            double total_us = 0.0, total_mb = 0.0;
            for (int k = 0; k < 5; k++) {
                mb[k] /= NSETS;
                const double us = time_graph(s, L, replays, [&](int i) { run(k, st[i % NSETS], false); });
                const double floor_us = mb[k] / (dev.read_tbs * 1e12) * 1e6;
                total_us += us;
                total_mb += mb[k];
                printf("| %s | %d | %.1f | %s | %.3f | %.2f | %.2f | %.2f | %.2f |\n", m.name, T,
                       (double)a_sum / NSETS, names[k], mb[k] / 1e6, floor_us, us, mb[k] / (us * 1e-6) / 1e12,
                       floor_us / us);
                fflush(stdout);
            }
            for (int pdl = 0; pdl < 2; pdl++) {
                const double us = time_graph(s, NSETS, replays, [&](int i) {
                    for (int k = 0; k < 5; k++)
                        run(k, st[i % NSETS], pdl && k > 0);
                });
                const double floor_us = total_mb / (dev.read_tbs * 1e12) * 1e6;
                printf("| %s | %d | %.1f | chain%s (sum of the five alone: %.2f us) | %.3f | %.2f | %.2f | %.2f | "
                       "%.2f |\n",
                       m.name, T, (double)a_sum / NSETS, pdl ? " pdl" : "", total_us, total_mb / 1e6, floor_us, us,
                       total_mb / (us * 1e-6) / 1e12, floor_us / us);
                fflush(stdout);
            }
            for (int q = 0; q < NSETS; q++) {
                set &b = st[q];
                for (void *p : { b.logits, b.ids, b.wts, b.order, b.where, b.offs, b.x, b.act, b.ys, b.out })
                    CK(cudaFree(p));
            }
        }
        CK(cudaFree(wgu));
        CK(cudaFree(wdn));
        if (bias)
            CK(cudaFree(bias));
    }
    be->vt->stream_destroy(be, rs);
    reel_ctx_destroy(g_ctx);
    return failed;
}
