/* Replay overhead: a chain of N small kernels (add 1.0 to 4096 floats),
 * N = 10, 100, 1000, run as
 *   raw eager      cudaLaunchKernel loop on one stream
 *   raw graph      the same launches hand-captured into a CUDA graph
 *   raw pdl graph  captured with programmatic dependent launch (each kernel
 *                  waits on its producer's grid first, triggers its
 *                  successor last)
 *   reel replay    the chain declared through reel (add of a ones row),
 *                  one bucket, replayed by reel_step
 *   reel pdl       the same plan compiled with pdl
 *   reel eager     the same plan compiled without graphs (every op
 *                  dispatched by the executor)
 * in one program run. Each variant is one function returning its timings;
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

#define CK(call)                                                                                          \
    do {                                                                                                  \
        cudaError_t e_ = (call);                                                                          \
        if (e_ != cudaSuccess) {                                                                          \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_));        \
            exit(1);                                                                                      \
        }                                                                                                 \
    } while (0)

#define RK(call)                                                                                          \
    do {                                                                                                  \
        reel_status s_ = (call);                                                                          \
        if (s_ != REEL_OK) {                                                                              \
            fprintf(stderr, "%s:%d: %s: %s: %s\n", __FILE__, __LINE__, #call, reel_status_str(s_),        \
                    reel_ctx_last_error(g_ctx));                                                          \
            exit(1);                                                                                      \
        }                                                                                                 \
    } while (0)

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

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

static double median(std::vector<double> v)
{
    std::sort(v.begin(), v.end());
    size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
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
    cudaEvent_t e0, e1;
};

static void launch_chain(const rig &r, int n, bool pdl)
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
        CK(cudaLaunchKernelEx(&cfg, add1_pdl, r.d, (int)ELEMS));
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

static timing run_raw_eager(const rig &r, int n, int reps)
{
    timing t;
    std::vector<double> gpu, wall, host;
    auto run = [&] { launch_chain(r, n, false); };
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

static timing run_raw_graph(const rig &r, int n, int reps, bool pdl)
{
    timing t;
    cudaGraph_t g;
    cudaGraphExec_t x;
    double t0 = now_us();
    CK(cudaStreamBeginCapture(r.s, cudaStreamCaptureModeThreadLocal));
    launch_chain(r, n, pdl);
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
    reel_step_info s = {};
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
    reel_plan_stats st;
    RK(reel_plan_stats_get(p, &st));
    if (!no_capture && st.replays == 0)
        t.ok = false; /* a reel replay row must have replayed */
    reel_plan_destroy(p);
    return t;
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
    printf("| %5d | %-15s | %9s | %9s | %10.3f | %10.2f | %9s | %9s | %s |\n", n, name, gpu, ratio_gpu,
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
    const int ns[3] = {10, 100, 1000};
    for (int i = 0; i < 3; i++) {
        int n = ns[i];
        timing eager = run_raw_eager(r, n, reps), graph = run_raw_graph(r, n, reps, false);
        timing pdl = run_raw_graph(r, n, reps, true);
        timing reel = run_reel(r, n, reps, false, false), reel_pdl = run_reel(r, n, reps, true, false);
        timing reel_eager = run_reel(r, n, reps, false, true);
        print_row("raw eager", n, eager, graph, graph);
        print_row("raw graph", n, graph, graph, graph);
        print_row("raw pdl graph", n, pdl, graph, graph);
        print_row("reel replay", n, reel, graph, graph);
        print_row("reel pdl replay", n, reel_pdl, graph, graph);
        print_row("reel eager", n, reel_eager, graph, graph);
        printf("| %5d | reel eager / raw eager (wall) | | | | %.2f | | | |\n", n, reel_eager.wall_us / eager.wall_us);
    }
    reel_ctx_destroy(g_ctx);
    return 0;
}
