/* cuBLAS and cuBLASLt, loaded when the first CUDA context needs them.
 *
 * Linking libcublasLt costs every process that loads reel about 0.5 s and
 * 200 MB before main (its static initialisers), a CUDA context or not: `reel
 * --version` and host-backend runs paid it. So reel does not link them: these
 * definitions of the functions reel calls (the headers' own prototypes) load
 * both libraries with dlopen on the first call (pthread_once) and forward.
 * The version script keeps them out of libreel.so's exports. Without the
 * libraries every call returns CUBLAS_STATUS_NOT_INITIALIZED and
 * cublasGetStatusString says what could not be loaded. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "backend/cuda/cuda.h"

#define REEL_XSTR(x) REEL_STR(x)
#define REEL_STR(x) #x
#ifndef REEL_CUDA_LIBDIR
#define REEL_CUDA_LIBDIR "/usr/local/cuda/lib64"
#endif

/* X(return type, library, name, parameters, arguments) */
#define REEL_BLAS_FUNCTIONS(X)                                                                                      \
    X(cublasStatus_t, blas, cublasCreate_v2, (cublasHandle_t * h), (h))                                           \
    X(cublasStatus_t, blas, cublasDestroy_v2, (cublasHandle_t h), (h))                                            \
    X(cublasStatus_t, blas, cublasSetStream_v2, (cublasHandle_t h, cudaStream_t s), (h, s))                       \
    X(cublasStatus_t, blas, cublasSetWorkspace_v2, (cublasHandle_t h, void *w, size_t n), (h, w, n))              \
    X(cublasStatus_t, blas, cublasSgemm_v2,                                                                       \
      (cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const float *alpha,     \
       const float *A, int lda, const float *B, int ldb, const float *beta, float *C, int ldc),                   \
      (h, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc))                                                  \
    X(cublasStatus_t, blas, cublasGemmEx,                                                                         \
      (cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const void *alpha,      \
       const void *A, cudaDataType At, int lda, const void *B, cudaDataType Bt, int ldb, const void *beta,        \
       void *C, cudaDataType Ct, int ldc, cublasComputeType_t ct, cublasGemmAlgo_t algo),                         \
      (h, ta, tb, m, n, k, alpha, A, At, lda, B, Bt, ldb, beta, C, Ct, ldc, ct, algo))                            \
    X(cublasStatus_t, blas, cublasGemmStridedBatchedEx,                                                           \
      (cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const void *alpha,      \
       const void *A, cudaDataType At, int lda, long long int sa, const void *B, cudaDataType Bt, int ldb,        \
       long long int sb, const void *beta, void *C, cudaDataType Ct, int ldc, long long int sc, int batch,        \
       cublasComputeType_t ct, cublasGemmAlgo_t algo),                                                            \
      (h, ta, tb, m, n, k, alpha, A, At, lda, sa, B, Bt, ldb, sb, beta, C, Ct, ldc, sc, batch, ct, algo))         \
    X(cublasStatus_t, lt, cublasLtCreate, (cublasLtHandle_t * h), (h))                                            \
    X(cublasStatus_t, lt, cublasLtDestroy, (cublasLtHandle_t h), (h))                                             \
    X(cublasStatus_t, lt, cublasLtMatmul,                                                                         \
      (cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void *alpha, const void *A, cublasLtMatrixLayout_t Ad,   \
       const void *B, cublasLtMatrixLayout_t Bd, const void *beta, const void *C, cublasLtMatrixLayout_t Cd,     \
       void *D, cublasLtMatrixLayout_t Dd, const cublasLtMatmulAlgo_t *algo, void *ws, size_t wsb,               \
       cudaStream_t s),                                                                                           \
      (h, d, alpha, A, Ad, B, Bd, beta, C, Cd, D, Dd, algo, ws, wsb, s))                                          \
    X(cublasStatus_t, lt, cublasLtMatmulAlgoGetHeuristic,                                                        \
      (cublasLtHandle_t h, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t A, cublasLtMatrixLayout_t B,          \
       cublasLtMatrixLayout_t C, cublasLtMatrixLayout_t D, cublasLtMatmulPreference_t p, int n,                 \
       cublasLtMatmulHeuristicResult_t r[], int *got),                                                           \
      (h, d, A, B, C, D, p, n, r, got))                                                                          \
    X(cublasStatus_t, lt, cublasLtMatmulDescInit_internal,                                                       \
      (cublasLtMatmulDesc_t d, size_t size, cublasComputeType_t ct, cudaDataType_t st), (d, size, ct, st))       \
    X(cublasStatus_t, lt, cublasLtMatmulDescSetAttribute,                                                        \
      (cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, const void *buf, size_t n), (d, a, buf, n))     \
    X(cublasStatus_t, lt, cublasLtMatmulPreferenceInit_internal, (cublasLtMatmulPreference_t p, size_t size),   \
      (p, size))                                                                                                 \
    X(cublasStatus_t, lt, cublasLtMatmulPreferenceSetAttribute,                                                  \
      (cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t a, const void *buf, size_t n),         \
      (p, a, buf, n))                                                                                            \
    /* the descriptor constructors bench/ uses */                                                               \
    X(cublasStatus_t, lt, cublasLtMatmulDescCreate,                                                              \
      (cublasLtMatmulDesc_t * d, cublasComputeType_t ct, cudaDataType_t st), (d, ct, st))                        \
    X(cublasStatus_t, lt, cublasLtMatmulDescDestroy, (cublasLtMatmulDesc_t d), (d))                              \
    X(cublasStatus_t, lt, cublasLtMatmulPreferenceCreate, (cublasLtMatmulPreference_t * p), (p))                 \
    X(cublasStatus_t, lt, cublasLtMatmulPreferenceDestroy, (cublasLtMatmulPreference_t p), (p))                  \
    X(cublasStatus_t, lt, cublasLtMatrixLayoutCreate,                                                            \
      (cublasLtMatrixLayout_t * l, cudaDataType t, uint64_t rows, uint64_t cols, int64_t ld),                    \
      (l, t, rows, cols, ld))                                                                                    \
    X(cublasStatus_t, lt, cublasLtMatrixLayoutDestroy, (cublasLtMatrixLayout_t l), (l))                          \
    X(cublasStatus_t, lt, cublasLtMatrixLayoutInit_internal,                                                     \
      (cublasLtMatrixLayout_t l, size_t size, cudaDataType t, uint64_t rows, uint64_t cols, int64_t ld),         \
      (l, size, t, rows, cols, ld))

static struct {
#define REEL_BLAS_PTR(ret, lib, name, params, args) ret(*name) params;
    REEL_BLAS_FUNCTIONS(REEL_BLAS_PTR)
    const char *(*status_name)(cublasStatus_t);
    const char *(*status_string)(cublasStatus_t);
    int ok;
    char why[512];
} fns; /* filled once (pthread_once), read-only after */

static pthread_once_t fns_once = PTHREAD_ONCE_INIT;

static void *open_one(const char *base)
{
    char path[512];
    void *h = dlopen(base, RTLD_NOW | RTLD_LOCAL);
    if (h) return h;
    snprintf(path, sizeof path, "%s/%s", REEL_CUDA_LIBDIR, base);
    if ((h = dlopen(path, RTLD_NOW | RTLD_LOCAL))) return h;
    snprintf(fns.why, sizeof fns.why, "cuBLAS is not loadable: %s", dlerror());
    return NULL;
}

static void load(void)
{
    /* cuBLASLt first: libcublas needs it and then finds it loaded by soname */
    void *lt = open_one("libcublasLt.so." REEL_XSTR(CUBLAS_VER_MAJOR));
    void *blas = lt ? open_one("libcublas.so." REEL_XSTR(CUBLAS_VER_MAJOR)) : NULL;
    if (!blas) return;
    void *sym;
#define REEL_BLAS_SYM(ret, lib, name, params, args)                                                                \
    if (!(sym = dlsym(lib, #name))) {                                                                              \
        snprintf(fns.why, sizeof fns.why, "cuBLAS has no %s", #name);                                              \
        return;                                                                                                    \
    }                                                                                                              \
    memcpy(&fns.name, &sym, sizeof sym); /* object to function pointer, as POSIX allows */
    REEL_BLAS_FUNCTIONS(REEL_BLAS_SYM)
    if ((sym = dlsym(blas, "cublasGetStatusName"))) memcpy(&fns.status_name, &sym, sizeof sym);
    if ((sym = dlsym(blas, "cublasGetStatusString"))) memcpy(&fns.status_string, &sym, sizeof sym);
    fns.ok = 1;
}

static int loaded(void)
{
    pthread_once(&fns_once, load);
    return fns.ok;
}

#define REEL_BLAS_DEF(ret, lib, name, params, args)                                                                \
    ret name params { return loaded() ? fns.name args : CUBLAS_STATUS_NOT_INITIALIZED; }
REEL_BLAS_FUNCTIONS(REEL_BLAS_DEF)

const char *cublasGetStatusName(cublasStatus_t s)
{
    return loaded() && fns.status_name ? fns.status_name(s) : "CUBLAS_STATUS_NOT_INITIALIZED";
}

const char *cublasGetStatusString(cublasStatus_t s)
{
    if (loaded()) return fns.status_string ? fns.status_string(s) : "cuBLAS error";
    return fns.why[0] ? fns.why : "cuBLAS could not be loaded";
}
