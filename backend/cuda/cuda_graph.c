/* CUDA backend: stream capture into CUDA graphs, their launch, update and
 * destruction. Capture is thread-local: only calls from the capturing thread
 * that would be unsafe during capture invalidate it, so other threads of
 * the process (another plan, another context) keep working. */
#include <string.h>

#include "core/halloc.h"
#include "backend/cuda/cuda_impl.h"

reel_status reel_cuda_capture_begin(reel_backend *be, reel_stream *origin)
{
    REEL_TRY(reel_cuda_use_device(be));
    return REEL_CK(be, cudaStreamBeginCapture(origin->s, cudaStreamCaptureModeThreadLocal));
}

/* A loop: a graph of one conditional WHILE node (CUDA 12.4 and later),
 * whose condition is 1 at every launch (cudaGraphCondAssignDefault); the
 * capture fills its body (cudaStreamBeginCaptureToGraph). A runtime or
 * driver without conditional nodes gives REEL_E_UNSUPPORTED. */
reel_status reel_cuda_loop_capture_begin(reel_backend *be, reel_stream *origin, uint64_t *cond)
{
    REEL_TRY(reel_cuda_use_device(be));
    int drv = 0;
    (void)REEL_CK_QUIET(cudaDriverGetVersion(&drv));
    if (CUDART_VERSION < 12040 || drv < 12040)
        return reel_seterr(be->err, REEL_E_UNSUPPORTED,
                           "cuda loop capture: conditional WHILE nodes need CUDA 12.4 (runtime %d, driver %d)",
                           CUDART_VERSION, drv);
    cudaGraph_t top = NULL;
    REEL_TRY(REEL_CK(be, cudaGraphCreate(&top, 0)));
    cudaGraphConditionalHandle h = 0;
    reel_status st = REEL_CK(be, cudaGraphConditionalHandleCreate(&h, top, 1, cudaGraphCondAssignDefault));
    struct cudaGraphNodeParams np;
    memset(&np, 0, sizeof np);
    np.type = cudaGraphNodeTypeConditional;
    np.conditional.handle = h;
    np.conditional.type = cudaGraphCondTypeWhile;
    np.conditional.size = 1;
    cudaGraphNode_t node = NULL;
    if (st == REEL_OK)
        st = REEL_CK(be, cudaGraphAddNode(&node, top, NULL, NULL, 0, &np));
    if (st == REEL_OK)
        st = REEL_CK(be, cudaStreamBeginCaptureToGraph(origin->s, np.conditional.phGraph_out[0], NULL, NULL, 0,
                                                       cudaStreamCaptureModeThreadLocal));
    if (st != REEL_OK) {
        (void)REEL_CK_QUIET(cudaGraphDestroy(top));
        return st;
    }
    origin->loop_top = top;
    *cond = (uint64_t)h;
    return REEL_OK;
}

/* Ends the capture on origin; a failure means the capture was invalidated
 * (by a forbidden call or a failed launch inside it). A loop capture gives
 * its loop graph (the body captured belongs to it). */
static reel_status end_capture(reel_backend *be, reel_stream *origin, cudaGraph_t *graph)
{
    *graph = NULL;
    cudaGraph_t top = origin->loop_top;
    origin->loop_top = NULL;
    reel_status st = REEL_CK(be, cudaStreamEndCapture(origin->s, graph));
    if (top) {
        *graph = st == REEL_OK ? top : NULL;
        if (st != REEL_OK)
            (void)REEL_CK_QUIET(cudaGraphDestroy(top));
        return st;
    }
    if (st == REEL_OK)
        return REEL_OK;
    if (*graph)
        (void)REEL_CK_QUIET(cudaGraphDestroy(*graph));
    *graph = NULL;
    return st;
}

reel_status reel_cuda_capture_end(reel_backend *be, reel_stream *origin, reel_exec_graph **out)
{
    reel_status st;
    *out = NULL;
    reel_exec_graph *g = reel_hcalloc(1, sizeof *g);
    if (!g) {
        reel_cuda_capture_abort(be, origin);
        return reel_seterr(be->err, REEL_E_OOM, "cuda capture: out of host memory");
    }
    if ((st = end_capture(be, origin, &g->graph)) != REEL_OK)
        goto fail;
    if ((st = REEL_CK(be, cudaGraphInstantiate(&g->exec, g->graph, 0))) != REEL_OK)
        goto fail;
    *out = g;
    return REEL_OK;
fail:
    reel_cuda_graph_destroy(be, g);
    return st;
}

void reel_cuda_capture_abort(reel_backend *be, reel_stream *origin)
{
    enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    cudaGraph_t top = origin->loop_top;
    origin->loop_top = NULL;
    (void)REEL_CK_QUIET(cudaStreamIsCapturing(origin->s, &cs));
    if (cs != cudaStreamCaptureStatusNone) {
        cudaGraph_t graph = NULL;
        /* Fails when the capture was invalidated: expected here. */
        (void)REEL_CK_QUIET(cudaStreamEndCapture(origin->s, &graph));
        if (graph && !top) /* a loop's body belongs to its loop graph */
            (void)REEL_CK_QUIET(cudaGraphDestroy(graph));
    }
    if (top)
        (void)REEL_CK_QUIET(cudaGraphDestroy(top));
    /* The invalidation left an error as the runtime's last error; clear it
     * so the stream's next eager launch check does not report it again. */
    (void)cudaGetLastError();
}

/* True while a capture is open on s, active or already invalidated (both
 * must be ended). */
bool reel_cuda_capturing(reel_backend *be, reel_stream *s)
{
    enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    if (REEL_CK(be, cudaStreamIsCapturing(s->s, &cs)) != REEL_OK)
        return false;
    return cs != cudaStreamCaptureStatusNone;
}

reel_status reel_cuda_graph_launch(reel_backend *be, reel_exec_graph *g, reel_stream *s)
{
    REEL_TRY(reel_cuda_use_device(be));
    return REEL_CK(be, cudaGraphLaunch(g->exec, s->s));
}

reel_status reel_cuda_graph_kernels(reel_backend *be, reel_exec_graph *g, int *kernels)
{
    size_t n = 0;
    REEL_TRY(REEL_CUDA_CHECK(be->err, cudaGraphGetNodes(g->graph, NULL, &n)));
    cudaGraphNode_t *nodes = reel_hcalloc(n + 1, sizeof *nodes);
    if (!nodes)
        return reel_seterr(be->err, REEL_E_OOM, "graph_kernels: out of host memory");
    reel_status st = REEL_CUDA_CHECK(be->err, cudaGraphGetNodes(g->graph, nodes, &n));
    int k = 0;
    for (size_t i = 0; i < n && st == REEL_OK; i++) {
        enum cudaGraphNodeType t;
        st = REEL_CUDA_CHECK(be->err, cudaGraphNodeGetType(nodes[i], &t));
        k += st == REEL_OK && t == cudaGraphNodeTypeKernel;
    }
    reel_hfree(nodes);
    *kernels = k;
    return st;
}

void reel_cuda_graph_destroy(reel_backend *be, reel_exec_graph *g)
{
    if (!g)
        return;
    (void)be;
    if (g->exec)
        (void)REEL_CK_QUIET(cudaGraphExecDestroy(g->exec));
    if (g->graph)
        (void)REEL_CK_QUIET(cudaGraphDestroy(g->graph));
    reel_hfree(g);
}

/* Updates exec's parameters from fresh (same topology). A refused update is
 * no error: the caller re-instantiates (keeps fresh instead). */
reel_status reel_cuda_graph_update(reel_backend *be, reel_exec_graph *exec, reel_exec_graph *fresh,
                                   bool *updated)
{
    cudaGraphExecUpdateResultInfo info;
    *updated = false;
    cudaError_t e = cudaGraphExecUpdate(exec->exec, fresh->graph, &info);
    if (e == cudaErrorGraphExecUpdateFailure) {
        (void)cudaGetLastError();
        return REEL_OK;
    }
    REEL_TRY(reel_cuda_status(be->err, e, __FILE__, __LINE__, "cudaGraphExecUpdate"));
    *updated = info.result == cudaGraphExecUpdateSuccess;
    return REEL_OK;
}
