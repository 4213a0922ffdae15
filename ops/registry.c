/* The op registry: read-only tables of implementations per backend, filled
 * at build time. Selection is the highest-priority impl whose can_use accepts
 * the node; the reference kernel is last in every chain. */
#include "backend/registry.h"
#include "ops/op.h"
#include "reel_config.h"

extern const reel_op_impl *const reel_host_impls[];
extern const int reel_host_nimpls;
#if REEL_HAVE_CUDA
extern const reel_op_impl *const reel_cuda_impls[];
extern const int reel_cuda_nimpls;
#endif

/* The kernels of each backend of backend/registry.h's table: one row a
 * backend (tests/ops checks that every backend of that table has one). */
static const struct {
    reel_backend_kind kind;
    const reel_op_impl *const *impls;
    const int *count;
} kernels[] = {
    { REEL_BACKEND_HOST, reel_host_impls, &reel_host_nimpls },
#if REEL_HAVE_CUDA
    { REEL_BACKEND_CUDA, reel_cuda_impls, &reel_cuda_nimpls },
#endif
};

const reel_op_impl *const *reel_registry_all(reel_backend_kind b, int *count)
{
    *count = 0;
    if (!reel_backend_of(b))   /* kernels only for a backend of the table */
        return NULL;
    for (size_t i = 0; i < sizeof kernels / sizeof kernels[0]; i++)
        if (kernels[i].kind == b) {
            *count = *kernels[i].count;
            return kernels[i].impls;
        }
    *count = 0;
    return NULL;
}

const reel_op_impl *reel_registry_select(reel_backend_kind b, reel_op_kind k, const reel_shape *in, int nin,
                                         const reel_shape *out, const reel_op_attrs *a,
                                         const reel_device_caps *caps)
{
    int n = 0;
    const reel_op_impl *const *all = reel_registry_all(b, &n);
    const reel_op_impl *best = NULL;
    for (int i = 0; i < n; i++) {
        const reel_op_impl *impl = all[i];
        if (impl->op != k || (best && impl->priority <= best->priority))
            continue;
        if (!impl->can_use || impl->can_use(in, nin, out, a, caps))
            best = impl;
    }
    return best;
}
