/* CUDA and cuBLAS results turned into reel statuses with the library's own
 * message, the backend's small memo, and the device every call is made on.
 * The CUDA backend's files call down into this one and it calls none of
 * them: cuda_backend.c (the table) -> cuda_stream.c, cuda_graph.c -> here. */
#include <string.h>

#include "backend/cuda/cuda_impl.h"

/* Only the file's last component: build trees pass long relative paths. */
static const char *base_name(const char *file)
{
    const char *slash = strrchr(file, '/');
    return slash ? slash + 1 : file;
}

reel_status reel_cuda_status(reel_err *err, cudaError_t e, const char *file, int line, const char *call)
{
    if (e == cudaSuccess)
        return REEL_OK;
    /* The failing call left e as the runtime's last error; a later launch
     * check (cudaGetLastError) must not find it again. Sticky errors stay. */
    (void)cudaGetLastError();
    reel_status st = e == cudaErrorMemoryAllocation ? REEL_E_OOM : REEL_E_BACKEND;
    return reel_seterr(err, st, "%s:%d: %s: %s: %s", base_name(file), line, call, cudaGetErrorName(e),
                       cudaGetErrorString(e));
}

reel_status reel_cublas_status(reel_err *err, cublasStatus_t e, const char *file, int line, const char *call)
{
    if (e == CUBLAS_STATUS_SUCCESS)
        return REEL_OK;
    reel_status st = e == CUBLAS_STATUS_ALLOC_FAILED ? REEL_E_OOM : REEL_E_BACKEND;
    return reel_seterr(err, st, "%s:%d: %s: %s: %s", base_name(file), line, call, cublasGetStatusName(e),
                       cublasGetStatusString(e));
}

bool reel_cuda_memo_get(reel_backend *be, const void *key, size_t klen, void *val, size_t vlen)
{
    reel_cuda *c = reel_cuda_of(be);
    bool found = false;
    pthread_mutex_lock(&c->lock);
    for (int i = 0; i < c->memo_used && !found; i++) {
        reel_cuda_memo_entry *m = &c->memo[i];
        if (m->klen == klen && m->vlen == vlen && memcmp(m->key, key, klen) == 0) {
            memcpy(val, m->val, vlen);
            found = true;
        }
    }
    pthread_mutex_unlock(&c->lock);
    return found;
}

void reel_cuda_memo_put(reel_backend *be, const void *key, size_t klen, const void *val, size_t vlen)
{
    reel_cuda *c = reel_cuda_of(be);
    if (klen > REEL_CUDA_MEMO_KEY_MAX || vlen > REEL_CUDA_MEMO_VAL_MAX)
        return;
    pthread_mutex_lock(&c->lock);
    if (c->memo_used < REEL_CUDA_MEMO_SLOTS) {
        reel_cuda_memo_entry *m = &c->memo[c->memo_used++];
        m->klen = klen;
        m->vlen = vlen;
        memcpy(m->key, key, klen);
        memcpy(m->val, val, vlen);
    }
    pthread_mutex_unlock(&c->lock);
}

/* Every CUDA call of a backend is made on its device (a context may be
 * used from a thread whose current device is another). */
reel_status reel_cuda_use_device(reel_backend *be)
{
    return REEL_CK(be, cudaSetDevice(reel_cuda_of(be)->device));
}
