/* Capability probe kernels: compiled with nvcc, called from the C backend. */
#include "backend/cuda/cuda.h"

/* Never launched: only its occupancy with a cluster dimension is asked. */
__global__ void reel_cluster_probe_kernel(int *p)
{
    if (p)
        p[threadIdx.x] = 0;
}

extern "C" cudaError_t reel_cuda_probe_clusters(int cc_major, int *out)
{
    *out = 0;
    if (cc_major < 9)
        return cudaSuccess; /* thread block clusters start with compute capability 9.0 */
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute attr = {};
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = 2;
    attr.val.clusterDim.y = 1;
    attr.val.clusterDim.z = 1;
    cfg.gridDim = dim3(2, 1, 1);
    cfg.blockDim = dim3(128, 1, 1);
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    return cudaOccupancyMaxActiveClusters(out, reel_cluster_probe_kernel, &cfg);
}
