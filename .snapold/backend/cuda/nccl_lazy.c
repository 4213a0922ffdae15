/* NCCL, loaded at its first call, as cuBLAS is (blas_lazy.c): libnccl is
 * large, and a process that never creates an NCCL communicator (`reel
 * --version`, host-backend runs, a single GPU) should not map and relocate
 * it. These definitions of the functions reel calls (nccl.h's own
 * prototypes) load libnccl with dlopen on the first call (pthread_once) and
 * forward; the version script keeps them out of libreel.so's exports.
 * Without the library every call returns ncclSystemError and
 * ncclGetErrorString / ncclGetLastError say what could not be loaded. */
#include <dlfcn.h>
#include <nccl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define REEL_XSTR(x) REEL_STR(x)
#define REEL_STR(x) #x
#ifndef REEL_CUDA_LIBDIR
#define REEL_CUDA_LIBDIR "/usr/local/cuda/lib64"
#endif

/* X(name, parameters, arguments): every one returns ncclResult_t. */
#define REEL_NCCL_FUNCTIONS(X)                                                                                   \
    X(ncclGetUniqueId, (ncclUniqueId * id), (id))                                                                \
    X(ncclCommInitRankConfig, (ncclComm_t * comm, int nranks, ncclUniqueId id, int rank, ncclConfig_t *config), \
      (comm, nranks, id, rank, config))                                                                         \
    X(ncclCommInitRank, (ncclComm_t * comm, int nranks, ncclUniqueId id, int rank), (comm, nranks, id, rank))    \
    X(ncclCommFinalize, (ncclComm_t comm), (comm))                                                               \
    X(ncclCommDestroy, (ncclComm_t comm), (comm))                                                                \
    X(ncclCommAbort, (ncclComm_t comm), (comm))                                                                  \
    X(ncclCommGetAsyncError, (ncclComm_t comm, ncclResult_t * err), (comm, err))                                 \
    X(ncclAllReduce,                                                                                             \
      (const void *s, void *r, size_t n, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c, cudaStream_t st),      \
      (s, r, n, t, op, c, st))                                                                                   \
    X(ncclReduceScatter,                                                                                         \
      (const void *s, void *r, size_t n, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c, cudaStream_t st),      \
      (s, r, n, t, op, c, st))                                                                                   \
    X(ncclAllGather, (const void *s, void *r, size_t n, ncclDataType_t t, ncclComm_t c, cudaStream_t st),       \
      (s, r, n, t, c, st))                                                                                       \
    X(ncclSend, (const void *s, size_t n, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t st),           \
      (s, n, t, peer, c, st))                                                                                    \
    X(ncclRecv, (void *r, size_t n, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t st),                 \
      (r, n, t, peer, c, st))                                                                                    \
    X(ncclGroupStart, (void), ())                                                                                \
    X(ncclGroupEnd, (void), ())

static struct {
#define REEL_NCCL_PTR(name, params, args) ncclResult_t(*name) params;
    REEL_NCCL_FUNCTIONS(REEL_NCCL_PTR)
    const char *(*error_string)(ncclResult_t);
    const char *(*last_error)(ncclComm_t);
    int ok;
    char why[512];
} fns; /* filled once (pthread_once), read-only after */

static pthread_once_t fns_once = PTHREAD_ONCE_INIT;

static void load(void)
{
    const char *base = "libnccl.so." REEL_XSTR(NCCL_MAJOR);
    char path[512];
    void *h = dlopen(base, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(path, sizeof path, "%s/%s", REEL_CUDA_LIBDIR, base);
        h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    }
    if (!h) {
        snprintf(fns.why, sizeof fns.why, "NCCL is not loadable: %s", dlerror());
        return;
    }
    void *sym;
#define REEL_NCCL_SYM(name, params, args)                                                                        \
    if (!(sym = dlsym(h, #name))) {                                                                              \
        snprintf(fns.why, sizeof fns.why, "NCCL has no %s", #name);                                              \
        return;                                                                                                  \
    }                                                                                                            \
    memcpy(&fns.name, &sym, sizeof sym); /* object to function pointer, as POSIX allows */
    REEL_NCCL_FUNCTIONS(REEL_NCCL_SYM)
    if ((sym = dlsym(h, "ncclGetErrorString")))
        memcpy(&fns.error_string, &sym, sizeof sym);
    if ((sym = dlsym(h, "ncclGetLastError")))
        memcpy(&fns.last_error, &sym, sizeof sym);
    fns.ok = 1;
}

static int loaded(void)
{
    pthread_once(&fns_once, load);
    return fns.ok;
}

#define REEL_NCCL_DEF(name, params, args)                                                                        \
    ncclResult_t name params { return loaded() ? fns.name args : ncclSystemError; }
REEL_NCCL_FUNCTIONS(REEL_NCCL_DEF)

const char *ncclGetErrorString(ncclResult_t r)
{
    if (loaded())
        return fns.error_string ? fns.error_string(r) : "NCCL error";
    return fns.why[0] ? fns.why : "NCCL could not be loaded";
}

const char *ncclGetLastError(ncclComm_t comm)
{
    if (loaded())
        return fns.last_error ? fns.last_error(comm) : "";
    return fns.why;
}
