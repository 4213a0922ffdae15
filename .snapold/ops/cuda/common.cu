/* Helpers shared by the CUDA kernels (host side). */
#include <stdio.h>

#include "ops/cuda/common.cuh"

namespace reel_cu {

reel_status name_err(reel_backend *be, reel_status st, const char *what)
{
    if (st == REEL_OK)
        return st;
    return reel_err_prefix(be->err, st, "%s", what);
}

reel_status launched(reel_backend *be, const char *impl, cudaError_t e, const char *file, int line)
{
    if (e == cudaSuccess)
        e = cudaGetLastError();
    return name_err(be, reel_cuda_check_(be->err, e, file, line, "kernel launch"), impl);
}

bool same_float_dtype(const reel_shape *in, int nin, const reel_shape *out, int nout)
{
    reel_dtype dt = in[0].dtype;
    if (dt != REEL_F32 && dt != REEL_F16 && dt != REEL_BF16)
        return false;
    for (int i = 0; i < nin; i++)
        if (in[i].dtype != dt)
            return false;
    for (int i = 0; i < nout; i++)
        if (out[i].dtype != dt)
            return false;
    return true;
}

} /* namespace reel_cu */
