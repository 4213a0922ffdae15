/* Replay overhead: a chain of N small kernels (add 1.0 to 4096 floats),
 * N = 10, 100, 1000, run as
 *   raw eager      cudaLaunchKernel loop on one stream
 *   raw graph      the same launches hand-captured into a CUDA graph
 *   raw pdl graph  captured with programmatic dependent launch (each kernel
 *                  waits on its producer's grid first, triggers its
 *                  successor last)
 *   the same three with reel's own add kernel (the cuda.add impl launched
 *                  by hand): "the raw graph of the same kernels" that the
 *                  targets compare reel against
 *   reel replay    the chain declared through reel (add of a ones row),
 *                  one bucket, replayed by reel_step
 *   reel pdl       the same plan compiled with pdl
 *   reel eager     the same plan compiled without graphs (every op
 *                  dispatched by the executor)
 * in one program run, then diagnostics: variants of the add kernel, reel's
 * silu_and_mul in place vs out of place, and the host cost of reel's
 * cuBLASLt matmul launch and of its parts. Each variant is one function returning its timings;
 * every variant's result is checked (x + N, exactly).
 *
 * Times are medians over repeats. "gpu" times come from CUDA events around
 * the work on the stream (launch-bound work included, host sync excluded);
 * "wall" times are host clock from the first call to the end of the sync,
 * which is what a serving loop pays (reel_step includes its 16 KiB input
 * upload and output download; the raw wall rows do the same copies so the
 * comparison is like for like). */
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <algorithm>
#include <vector>

#include "reel/reel.h"
#include "backend/cuda/cuda.h" /* reel's kernels by hand (the diagnostic rows) */
#include "backend/ctx.h"
extern "C" {
#include "ops/op.h"
}
#include "bench/bench_cuda.cuh"
#include "bench/graph_timer.cuh"

enum { ELEMS = 4096, THREADS = 256 };

static reel_ctx *g_ctx;

__global__ void add1(float *x, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        x[i] += 1.0f;
}

__global__ void add1_pdl(float *x, int n)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    cudaGridDependencySynchronize();
#endif
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        x[i] += 1.0f;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    cudaTriggerProgrammaticLaunchCompletion();
#endif
}

/* add1_pdl with the trigger first: the dependent grid may launch while this
 * one works (its own wait still covers our stores). */
__global__ void add1_pdl_early(float *x, int n)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    cudaGridDependencySynchronize();
    cudaTriggerProgrammaticLaunchCompletion();
#endif
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        x[i] += 1.0f;
}

/* Diagnostic kernels: what separates reel's add from add1 in a graph. */
__global__ void add1_gdc(float *x, int n) /* add1 with the PDL instructions, launched without PDL */
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    cudaGridDependencySynchronize();
#endif
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        x[i] += 1.0f;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    cudaTriggerProgrammaticLaunchCompletion();
#endif
}

__global__ void addb(const float *x, const float *b, float *out, int n) /* two inputs, one float a thread */
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        out[i] = x[i] + b[i];
}

__global__ void addb_vec(const float4 *x, const float4 *b, float4 *out, long long n4) /* reel's shape */
{
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += stride) {
        float4 u = x[i], v = b[i];
        out[i] = make_float4(u.x + v.x, u.y + v.y, u.z + v.z, u.w + v.w);
    }
}

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

/* One variant's timings for a chain of n kernels (-1: not measured). */
struct timing {
    double gpu_us = -1, wall_us = -1;  /* per step (the whole chain) */
    double setup_ms = -1;              /* capture + instantiate, or compile */
    double launch_host_us = -1;        /* host cost of submitting one step */
    bool ok = false;                   /* result equals x + n exactly */
};

struct rig {
    cudaStream_t s;
    float *d, *h_in, *h_out; /* device buffer, pinned input and output */
    float *ones;             /* device: the second input of the two-input kernels */
    cudaEvent_t e0, e1;
};

static void launch_chain(const rig &r, int n, bool pdl, bool early = false)
{
    dim3 grid((ELEMS + THREADS - 1) / THREADS);
    for (int k = 0; k < n; k++) {
        if (!pdl) {
            add1<<<grid, THREADS, 0, r.s>>>(r.d, ELEMS);
            continue;
        }
        cudaLaunchConfig_t cfg = {};
        cudaLaunchAttribute attr[1];
        attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr[0].val.programmaticStreamSerializationAllowed = 1;
        cfg.gridDim = grid;
        cfg.blockDim = THREADS;
        cfg.stream = r.s;
        cfg.attrs = attr;
        cfg.numAttrs = 1;
        CK(cudaLaunchKernelEx(&cfg, early ? add1_pdl_early : add1_pdl, r.d, (int)ELEMS));
    }
    CK(cudaGetLastError());
}

static bool check(const float *out, const float *in, int n)
{
    for (int i = 0; i < ELEMS; i++)
        if (out[i] != in[i] + (float)n)
            return false;
    return true;
}

/* Upload, run, download: the verification step and the "wall" step. */
template <typename F> static double io_step(const rig &r, F run)
{
    double t0 = now_us();
    CK(cudaMemcpyAsync(r.d, r.h_in, ELEMS * sizeof(float), cudaMemcpyHostToDevice, r.s));
    run();
    CK(cudaMemcpyAsync(r.h_out, r.d, ELEMS * sizeof(float), cudaMemcpyDeviceToHost, r.s));
    CK(cudaStreamSynchronize(r.s));
    return now_us() - t0;
}

template <typename F> static double gpu_step(const rig &r, F run)
{
    CK(cudaEventRecord(r.e0, r.s));
    run();
    CK(cudaEventRecord(r.e1, r.s));
    CK(cudaEventSynchronize(r.e1));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, r.e0, r.e1));
    return ms * 1e3;
}

template <typename L> static timing run_eager_of(const rig &r, int n, int reps, L run)
{
    timing t;
    std::vector<double> gpu, wall, host;
    for (int i = 0; i < 3; i++)
        io_step(r, run);
    t.ok = check(r.h_out, r.h_in, n);
    for (int i = 0; i < reps; i++) {
        gpu.push_back(gpu_step(r, run));
        wall.push_back(io_step(r, [&] {
            double t0 = now_us();
            run();
            host.push_back(now_us() - t0);
        }));
    }
    t.gpu_us = median(gpu), t.wall_us = median(wall), t.launch_host_us = median(host);
    return t;
}

template <typename L> static timing run_graph_of(const rig &r, int n, int reps, L chain)
{
    timing t;
    cudaGraph_t g;
    cudaGraphExec_t x;
    double t0 = now_us();
    CK(cudaStreamBeginCapture(r.s, cudaStreamCaptureModeThreadLocal));
    chain();
    CK(cudaStreamEndCapture(r.s, &g));
    CK(cudaGraphInstantiate(&x, g, 0));
    t.setup_ms = (now_us() - t0) * 1e-3;
    std::vector<double> gpu, wall, host;
    auto run = [&] { CK(cudaGraphLaunch(x, r.s)); };
    for (int i = 0; i < 3; i++)
        io_step(r, run);
    t.ok = check(r.h_out, r.h_in, n);
    for (int i = 0; i < reps; i++) {
        gpu.push_back(gpu_step(r, run));
        wall.push_back(io_step(r, [&] {
            double h0 = now_us();
            run();
            host.push_back(now_us() - h0);
        }));
    }
    t.gpu_us = median(gpu), t.wall_us = median(wall), t.launch_host_us = median(host);
    CK(cudaGraphExecDestroy(x));
    CK(cudaGraphDestroy(g));
    return t;
}

static timing run_raw_eager(const rig &r, int n, int reps)
{
    return run_eager_of(r, n, reps, [&] { launch_chain(r, n, false); });
}

static timing run_raw_graph(const rig &r, int n, int reps, bool pdl, bool early = false)
{
    return run_graph_of(r, n, reps, [&] { launch_chain(r, n, pdl, early); });
}

/* Diagnostic rows: variants of the kernel, each chain hand-captured. */
static timing run_diag(const rig &r, int n, int reps, int which)
{
    dim3 grid16((ELEMS + THREADS - 1) / THREADS), grid4((ELEMS / 4 + THREADS - 1) / THREADS);
    return run_graph_of(r, n, reps, [&] {
        for (int k = 0; k < n; k++) {
            if (which == 0)
                add1_gdc<<<grid16, THREADS, 0, r.s>>>(r.d, ELEMS);
            else if (which == 1)
                addb<<<grid16, THREADS, 0, r.s>>>(r.d, r.ones, r.d, ELEMS);
            else
                addb_vec<<<grid4, THREADS, 0, r.s>>>((const float4 *)r.d, (const float4 *)r.ones, (float4 *)r.d,
                                                     ELEMS / 4);
        }
        CK(cudaGetLastError());
    });
}

/* reel's own add kernel (the cuda.add impl, in place on the chain's buffer),
 * launched by hand: "the same kernels" that reel's plan runs, without the
 * executor, eagerly or hand-captured (with PDL: every launch but the first). */
struct reel_kernel {
    reel_backend *be;
    reel_stream *rs;
    const reel_op_impl *impl;
    reel_shape sh[3];
    reel_op_attrs at;
    reel_launch l;
    rig r;
};

static void reel_kernel_init(reel_kernel &k, const rig &r0)
{
    memset(&k, 0, sizeof k);
    k.be = g_ctx->be;
    RK(k.be->vt->stream_create(k.be, &k.rs));
    k.r = r0;
    k.r.s = reel_cuda_stream_handle(k.rs);
    for (int i = 0; i < 3; i++)
        k.sh[i].dtype = REEL_F32;
    k.sh[0].ndim = k.sh[2].ndim = 2, k.sh[1].ndim = 1;
    k.sh[0].tokens = k.sh[2].tokens = true;
    k.sh[0].dims[0] = k.sh[2].dims[0] = 1, k.sh[0].dims[1] = k.sh[2].dims[1] = ELEMS, k.sh[1].dims[0] = ELEMS;
    k.impl = reel_registry_select(REEL_BACKEND_CUDA, REEL_OP_ADD, k.sh, 2, &k.sh[2], &k.at, &k.be->caps);
    if (!k.impl) {
        fprintf(stderr, "no cuda add impl\n");
        exit(1);
    }
    k.l.op = REEL_OP_ADD;
    k.l.attrs = &k.at;
    k.l.in_shape = k.sh;
    k.l.out_shape = &k.sh[2];
    k.l.in[0] = r0.d, k.l.in[1] = r0.ones, k.l.out[0] = r0.d;
    k.l.rows = 1;
    k.l.stream = k.rs;
}

static void reel_kernel_chain(reel_kernel &k, int n, bool pdl)
{
    for (int i = 0; i < n; i++) {
        k.l.pdl = pdl && i > 0;
        RK(k.impl->launch(k.be, &k.l));
    }
}

static timing run_reel_kernel(reel_kernel &k, int n, int reps, bool graph, bool pdl)
{
    auto chain = [&] { reel_kernel_chain(k, n, pdl); };
    return graph ? run_graph_of(k.r, n, reps, chain) : run_eager_of(k.r, n, reps, chain);
}

/* The chain through reel: x [T, 4096] f32 input, n adds of a ones row. */
static timing run_reel(const rig &r, int n, int reps, bool pdl, bool no_capture)
{
    timing t;
    std::vector<float> ones(ELEMS, 1.0f);
    reel_graph *g;
    RK(reel_graph_create(g_ctx, &g));
    int64_t xd[2] = {REEL_DIM_TOKENS, ELEMS}, bd[1] = {ELEMS};
    reel_tensor x = reel_input(g, "x", REEL_F32, 2, xd);
    reel_tensor b = reel_param(g, "ones", REEL_F32, 1, bd);
    RK(reel_param_bind(g, b, ones.data()));
    for (int k = 0; k < n; k++)
        x = reel_add(g, x, b);
    RK(reel_output(g, "y", x));
    reel_compile_opts o = REEL_COMPILE_OPTS_INIT;
    o.num_buckets = 1;
    o.buckets[0] = 1;
    o.pdl = pdl;
    o.no_capture = no_capture;
    reel_plan *p;
    double t0 = now_us();
    RK(reel_compile(g, &o, &p));
    t.setup_ms = (now_us() - t0) * 1e-3;
    reel_graph_destroy(g);
    reel_step_info s = REEL_STEP_INFO_INIT;
    s.num_tokens = 1;
    std::vector<double> wall;
    const void *out = NULL;
    int64_t rows = 0;
    for (int i = 0; i < 3 + reps; i++) {
        double w0 = now_us();
        RK(reel_plan_set_input(p, "x", r.h_in, 1));
        RK(reel_step(p, &s));
        RK(reel_plan_output(p, "y", &out, &rows));
        if (i >= 3)
            wall.push_back(now_us() - w0);
    }
    t.ok = rows == 1 && check((const float *)out, r.h_in, n);
    t.wall_us = median(wall);
    reel_plan_stats st = REEL_PLAN_STATS_INIT;
    RK(reel_plan_stats_get(p, &st));
    if (!no_capture && st.replays == 0)
        t.ok = false; /* a reel replay row must have replayed */
    reel_plan_destroy(p);
    return t;
}

/* One node of reel's own kernels, launched by hand on k's stream. */
struct node {
    const reel_op_impl *impl;
    reel_shape sh[3];
    reel_op_attrs at;
    reel_launch l;
};

static void node_init(node &nd, reel_kernel &k, reel_op_kind op, int nin)
{
    nd.impl = reel_registry_select(REEL_BACKEND_CUDA, op, nd.sh, nin, &nd.sh[nin], &nd.at, &k.be->caps);
    if (!nd.impl) {
        fprintf(stderr, "no cuda impl for op %d\n", (int)op);
        exit(1);
    }
    nd.l.op = op;
    nd.l.attrs = &nd.at;
    nd.l.in_shape = nd.sh;
    nd.l.out_shape = &nd.sh[nin];
    nd.l.stream = k.rs;
}

static reel_shape shape2(reel_dtype dt, bool tokens, int64_t d0, int64_t d1)
{
    reel_shape s;
    memset(&s, 0, sizeof s);
    s.dtype = dt, s.ndim = 2, s.tokens = tokens, s.dims[0] = d0, s.dims[1] = d1;
    return s;
}

/* silu_and_mul, bf16 [T, 2F] -> [T, F]: out of place vs in place (the
 * output over the input, which inplace_ok lets the planner do), per launch
 * in a graph of 20; the in-place result checked bitwise against the other. */
static void diag_silu(reel_kernel &k, int reps)
{
    const int64_t f = 14336, ts[4] = {1, 16, 256, 2048};
    printf("\ndiagnostic: reel's silu_and_mul, bf16 [T, 2*%lld] -> [T, %lld], per launch in a graph of 20\n\n",
           (long long)f, (long long)f);
    printf("| T | out of place gpu us | in place gpu us | in place x out of place | in place bits |\n");
    printf("| --- | --- | --- | --- | --- |\n");
    for (int i = 0; i < 4; i++) {
        int64_t t = ts[i], nin = t * 2 * f;
        std::vector<uint16_t> h(nin), ref(t * f), got(t * f);
        uint64_t r = 12345 + t;
        for (int64_t j = 0; j < nin; j++) {
            r = r * 6364136223846793005ULL + 1442695040888963407ULL;
            float v = (float)((r >> 40) % 12000) / 1000.0f - 6.0f;
            uint32_t b;
            memcpy(&b, &v, 4);
            h[j] = (uint16_t)((b + 0x7fff + ((b >> 16) & 1)) >> 16);
        }
        void *x, *y;
        CK(cudaMalloc(&x, nin * 2));
        CK(cudaMalloc(&y, t * f * 2));
        node nd;
        memset(&nd, 0, sizeof nd);
        nd.sh[0] = shape2(REEL_BF16, true, t, 2 * f), nd.sh[1] = shape2(REEL_BF16, true, t, f);
        node_init(nd, k, REEL_OP_SILU_AND_MUL, 1);
        nd.l.rows = t;
        nd.l.in[0] = x;
        cudaStream_t st = k.r.s; /* reel's stream: non-blocking, so every copy goes on it */
        auto upload = [&] {
            CK(cudaMemcpyAsync(x, h.data(), nin * 2, cudaMemcpyHostToDevice, st));
            CK(cudaStreamSynchronize(st));
        };
        auto download = [&](std::vector<uint16_t> &dst, const void *src) {
            CK(cudaMemcpyAsync(dst.data(), src, t * f * 2, cudaMemcpyDeviceToHost, st));
            CK(cudaStreamSynchronize(st));
        };
        upload();
        nd.l.out[0] = y;
        RK(nd.impl->launch(k.be, &nd.l));
        download(ref, y);
        nd.l.out[0] = x;
        RK(nd.impl->launch(k.be, &nd.l));
        download(got, x);
        bool same = memcmp(ref.data(), got.data(), t * f * 2) == 0;
        double us[2];
        for (int inplace = 0; inplace < 2; inplace++) {
            upload();
            nd.l.out[0] = inplace ? x : y;
            us[inplace] = time_graph(k.r.s, 20, reps, [&](int) { RK(nd.impl->launch(k.be, &nd.l)); });
        }
        printf("| %lld | %.3f | %.3f | %.2f | %s |\n", (long long)t, us[0], us[1], us[1] / us[0],
               same ? "equal" : "DIFFERENT");
        CK(cudaFree(x));
        CK(cudaFree(y));
    }
}

/* The parts of a cuBLASLt launch's host work, per call (median of 200). */
template <typename F> static double host_us(F fn)
{
    std::vector<double> v;
    for (int i = 0; i < 200; i++) {
        double t0 = now_us();
        fn();
        v.push_back(now_us() - t0);
    }
    return median(v);
}

#define LK(call)                                                                                          \
    do {                                                                                                  \
        cublasStatus_t s_ = (call);                                                                       \
        if (s_ != CUBLAS_STATUS_SUCCESS && s_ != CUBLAS_STATUS_NOT_SUPPORTED) {                           \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cublasGetStatusName(s_));       \
            exit(1);                                                                                      \
        }                                                                                                 \
    } while (0)

/* Descriptors for Y^T = W^T X^T as reel builds them (w [K, N], x [M, K]). */
static void lt_create(uint64_t m, uint64_t kd, uint64_t n, cublasLtMatmulDesc_t *op, cublasLtMatrixLayout_t *a,
                      cublasLtMatrixLayout_t *b, cublasLtMatrixLayout_t *c)
{
    cublasOperation_t ta = CUBLAS_OP_N;
    LK(cublasLtMatmulDescCreate(op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    LK(cublasLtMatmulDescSetAttribute(*op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    LK(cublasLtMatrixLayoutCreate(a, CUDA_R_16BF, n, kd, (int64_t)n));
    LK(cublasLtMatrixLayoutCreate(b, CUDA_R_16BF, kd, m, (int64_t)kd));
    LK(cublasLtMatrixLayoutCreate(c, CUDA_R_16BF, n, m, (int64_t)n));
}

static void diag_matmul_host(reel_kernel &k)
{
    const int64_t kd = 4096, n = 4096, ms[2] = {1, 64};
    cublasLtHandle_t lt = reel_cuda_lt_handle(k.be);
    printf("\ndiagnostic: host cost of reel's cuBLASLt matmul, bf16 x [M, %lld] w [%lld, %lld], us per call "
           "(median of 200)\n\n", (long long)kd, (long long)kd, (long long)n);
    printf("| M | reel launch (memo hit) | descriptors: Init in caller memory | descriptors: Create + Destroy | "
           "preference + heuristic query |\n");
    printf("| --- | --- | --- | --- | --- |\n");
    void *x, *w, *y;
    CK(cudaMalloc(&x, 64 * kd * 2));
    CK(cudaMalloc(&w, kd * n * 2));
    CK(cudaMalloc(&y, 64 * n * 2));
    CK(cudaMemset(x, 0, 64 * kd * 2));
    CK(cudaMemset(w, 0, kd * n * 2));
    CK(cudaDeviceSynchronize());
    for (int i = 0; i < 2; i++) {
        int64_t m = ms[i];
        node nd;
        memset(&nd, 0, sizeof nd);
        nd.sh[0] = shape2(REEL_BF16, true, m, kd), nd.sh[1] = shape2(REEL_BF16, false, kd, n);
        nd.sh[2] = shape2(REEL_BF16, true, m, n);
        node_init(nd, k, REEL_OP_MATMUL, 2);
        nd.l.rows = m;
        nd.l.in[0] = x, nd.l.in[1] = w, nd.l.out[0] = y;
        RK(nd.impl->launch(k.be, &nd.l)); /* warm-up: the heuristic's answer goes to the memo */
        CK(cudaStreamSynchronize(k.r.s));
        int calls = 0;
        double launch = host_us([&] {
            RK(nd.impl->launch(k.be, &nd.l));
            if (++calls % 20 == 0)
                CK(cudaStreamSynchronize(k.r.s)); /* keep the queue short */
        });
        CK(cudaStreamSynchronize(k.r.s));
        double init = host_us([&] {
            cublasLtMatmulDescOpaque_t op;
            cublasLtMatrixLayoutOpaque_t a, b, c;
            cublasOperation_t ta = CUBLAS_OP_N;
            LK(cublasLtMatmulDescInit(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
            LK(cublasLtMatmulDescSetAttribute(&op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
            LK(cublasLtMatrixLayoutInit(&a, CUDA_R_16BF, n, kd, n));
            LK(cublasLtMatrixLayoutInit(&b, CUDA_R_16BF, kd, m, kd));
            LK(cublasLtMatrixLayoutInit(&c, CUDA_R_16BF, n, m, n));
        });
        double create = host_us([&] {
            cublasLtMatmulDesc_t op;
            cublasLtMatrixLayout_t a, b, c;
            lt_create(m, kd, n, &op, &a, &b, &c);
            LK(cublasLtMatrixLayoutDestroy(c));
            LK(cublasLtMatrixLayoutDestroy(b));
            LK(cublasLtMatrixLayoutDestroy(a));
            LK(cublasLtMatmulDescDestroy(op));
        });
        cublasLtMatmulDesc_t op;
        cublasLtMatrixLayout_t a, b, c;
        lt_create(m, kd, n, &op, &a, &b, &c);
        double heur = host_us([&] {
            cublasLtMatmulPreference_t pref;
            uint64_t wsb = 32u << 20;
            uint32_t al = 16;
            LK(cublasLtMatmulPreferenceCreate(&pref));
            LK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof wsb));
            LK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al, sizeof al));
            LK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al, sizeof al));
            LK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al, sizeof al));
            LK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al, sizeof al));
            cublasLtMatmulHeuristicResult_t res;
            int nres = 0;
            LK(cublasLtMatmulAlgoGetHeuristic(lt, op, a, b, c, c, pref, 1, &res, &nres));
            LK(cublasLtMatmulPreferenceDestroy(pref));
        });
        LK(cublasLtMatrixLayoutDestroy(c));
        LK(cublasLtMatrixLayoutDestroy(b));
        LK(cublasLtMatrixLayoutDestroy(a));
        LK(cublasLtMatmulDescDestroy(op));
        printf("| %lld | %.2f | %.3f | %.3f | %.2f |\n", (long long)m, launch, init, create, heur);
    }
    CK(cudaFree(x));
    CK(cudaFree(w));
    CK(cudaFree(y));
}

static void print_row(const char *name, int n, const timing &t, const timing &base_wall, const timing &base_gpu)
{
    char gpu[32] = "-", ratio_gpu[32] = "-", setup[32] = "-", host[32] = "-";
    if (t.gpu_us >= 0) {
        snprintf(gpu, sizeof gpu, "%.3f", t.gpu_us / n);
        snprintf(ratio_gpu, sizeof ratio_gpu, "%.2f", t.gpu_us / base_gpu.gpu_us);
    }
    if (t.setup_ms >= 0)
        snprintf(setup, sizeof setup, "%.2f", t.setup_ms);
    if (t.launch_host_us >= 0)
        snprintf(host, sizeof host, "%.1f", t.launch_host_us);
    printf("| %5d | %-26s | %9s | %9s | %10.3f | %10.2f | %9s | %9s | %s |\n", n, name, gpu, ratio_gpu,
           t.wall_us / n, t.wall_us / base_wall.wall_us, setup, host, t.ok ? "ok" : "WRONG");
}

int main(int argc, char **argv)
{
    int reps = argc > 1 ? atoi(argv[1]) : 30;
    rig r;
    CK(cudaSetDevice(0));
    CK(cudaStreamCreateWithFlags(&r.s, cudaStreamNonBlocking));
    CK(cudaMalloc(&r.d, ELEMS * sizeof(float)));
    CK(cudaMallocHost(&r.h_in, ELEMS * sizeof(float)));
    CK(cudaMallocHost(&r.h_out, ELEMS * sizeof(float)));
    CK(cudaMalloc(&r.ones, ELEMS * sizeof(float)));
    {
        std::vector<float> one(ELEMS, 1.0f);
        CK(cudaMemcpy(r.ones, one.data(), ELEMS * sizeof(float), cudaMemcpyHostToDevice));
    }
    CK(cudaEventCreate(&r.e0));
    CK(cudaEventCreate(&r.e1));
    for (int i = 0; i < ELEMS; i++)
        r.h_in[i] = (float)(i % 97) * 0.25f;
    reel_ctx_opts co = REEL_CTX_OPTS_INIT;
    co.backend = REEL_BACKEND_CUDA;
    if (reel_ctx_create(&co, &g_ctx) != REEL_OK) {
        fprintf(stderr, "reel: no CUDA context\n");
        return 1;
    }
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("chain of N kernels, each adding 1.0 to %d floats (%d blocks of %d); %s; median of %d\n", ELEMS,
           (ELEMS + THREADS - 1) / THREADS, THREADS, prop.name, reps);
    printf("gpu: events around the chain on the stream; wall: host clock for upload + chain + download + sync\n");
    printf("setup: capture + instantiate (raw) or reel_compile; host: submitting one step\n\n");
    printf("| N | variant | gpu us/node | gpu x graph | wall us/node | wall x graph | setup ms | host us | result |\n");
    printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
    reel_kernel rk;
    reel_kernel_init(rk, r);
    const int ns[3] = {10, 100, 1000};
    for (int i = 0; i < 3; i++) {
        int n = ns[i];
        timing eager = run_raw_eager(r, n, reps), graph = run_raw_graph(r, n, reps, false);
        timing pdl = run_raw_graph(r, n, reps, true);
        timing k_eager = run_reel_kernel(rk, n, reps, false, false);
        timing k_graph = run_reel_kernel(rk, n, reps, true, false);
        timing k_pdl = run_reel_kernel(rk, n, reps, true, true);
        timing reel = run_reel(r, n, reps, false, false), reel_pdl = run_reel(r, n, reps, true, false);
        timing reel_eager = run_reel(r, n, reps, false, true);
        print_row("raw eager", n, eager, graph, graph);
        print_row("raw graph", n, graph, graph, graph);
        print_row("raw pdl graph", n, pdl, graph, graph);
        print_row("raw eager, reel kernel", n, k_eager, graph, graph);
        print_row("raw graph, reel kernel", n, k_graph, graph, graph);
        print_row("raw pdl graph, reel kernel", n, k_pdl, graph, graph);
        print_row("reel replay", n, reel, graph, graph);
        print_row("reel pdl replay", n, reel_pdl, graph, graph);
        print_row("reel eager", n, reel_eager, graph, graph);
        printf("| %5d | targets (wall): reel replay / raw graph of reel's kernel %.2f; reel pdl / that graph %.2f; "
               "reel eager / raw eager of reel's kernel %.2f | | | | | | | |\n",
               n, reel.wall_us / k_graph.wall_us, reel_pdl.wall_us / k_graph.wall_us,
               reel_eager.wall_us / k_eager.wall_us);
    }
    /* Which part of the kernel costs what, per node in a hand-captured graph. */
    printf("\ndiagnostic: variants of the add kernel, each chain hand-captured\n\n");
    printf("| N | variant | gpu us/node | gpu x graph | wall us/node | wall x graph | setup ms | host us | result |\n");
    printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
    {
        const int n = 1000;
        timing graph = run_raw_graph(r, n, reps, false);
        print_row("raw graph add1", n, graph, graph, graph);
        print_row("add1 + gdc insns", n, run_diag(r, n, reps, 0), graph, graph);
        print_row("x+b scalar x16", n, run_diag(r, n, reps, 1), graph, graph);
        print_row("x+b float4 x4", n, run_diag(r, n, reps, 2), graph, graph);
        print_row("reel add kernel", n, run_reel_kernel(rk, n, reps, true, false), graph, graph);
        print_row("pdl add1, trigger last", n, run_raw_graph(r, n, reps, true), graph, graph);
        print_row("pdl add1, trigger first", n, run_raw_graph(r, n, reps, true, true), graph, graph);
        print_row("pdl reel add kernel", n, run_reel_kernel(rk, n, reps, true, true), graph, graph);
    }
    diag_silu(rk, reps);
    diag_matmul_host(rk);
    rk.be->vt->stream_destroy(rk.be, rk.rs);
    reel_ctx_destroy(g_ctx);
    return 0;
}
