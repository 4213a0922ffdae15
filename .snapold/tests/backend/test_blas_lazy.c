/* cuBLAS and cuBLASLt load with the first call that needs them, not with the
 * process (backend/cuda/blas_lazy.c): a CUDA build's host-only runs and `reel
 * --version` do not pay their initialisation. Needs no GPU. */
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "backend/cuda/cuda.h"
#include "reel/reel.h"

#define XSTR(x) STR(x)
#define STR(x) #x

static int loaded(const char *soname)
{
    void *h = dlopen(soname, RTLD_NOW | RTLD_NOLOAD);
    if (h) dlclose(h);
    return h != NULL;
}

Test(blas_lazy, cublas_loads_with_its_first_call_not_before)
{
    const char *lt = "libcublasLt.so." XSTR(CUBLAS_VER_MAJOR), *blas = "libcublas.so." XSTR(CUBLAS_VER_MAJOR);
    /* a host context, a graph: nothing of CUDA's libraries */
    reel_ctx_opts o = REEL_CTX_OPTS_INIT;
    o.backend = REEL_BACKEND_HOST;
    reel_ctx *ctx;
    cr_assert_eq(reel_ctx_create(&o, &ctx), REEL_OK);
    reel_ctx_destroy(ctx);
    cr_expect(!loaded(lt) && !loaded(blas), "cuBLAS was loaded before any CUDA context");
    const char *s = cublasGetStatusString(CUBLAS_STATUS_SUCCESS);
    cr_expect(strstr(s, "not loadable") == NULL && strstr(s, "has no") == NULL, "%s", s);
    cr_expect(loaded(lt) && loaded(blas), "the first call did not load cuBLAS");
    cr_expect_str_eq(cublasGetStatusName(CUBLAS_STATUS_INVALID_VALUE), "CUBLAS_STATUS_INVALID_VALUE");
}
