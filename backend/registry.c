/* The backends' table (registry.h). The host backend runs everywhere; CUDA
 * comes first so that REEL_BACKEND_AUTO takes it where a device is visible. */
#include "backend/registry.h"

#include <stdio.h>

#include "backend/comm.h"

static bool host_available(void) { return true; }

static reel_status host_create(reel_err *err, int device, reel_backend **out)
{
    (void)device;   /* one host */
    return reel_host_backend_create(err, out);
}

static reel_status host_comm_id(reel_err *err, unsigned char *payload)
{
    (void)err;
    reel_host_comm_token(payload);
    return REEL_OK;
}

static const reel_backend_entry backends[] = {
    { REEL_BACKEND_CUDA, "cuda", reel_cuda_available, reel_cuda_backend_create, true,
      REEL_COMM_ID_NCCL, "NCCL", reel_nccl_unique_id, reel_nccl_comm_create, reel_nccl_comm_group },
    { REEL_BACKEND_HOST, "host", host_available, host_create, false,
      REEL_COMM_ID_HOST, "host", host_comm_id, reel_host_comm_join, reel_host_comm_group },
};

int reel_backend_count(void) { return (int)(sizeof backends / sizeof backends[0]); }

const reel_backend_entry *reel_backend_at(int i)
{
    return i >= 0 && i < reel_backend_count() ? &backends[i] : NULL;
}

const reel_backend_entry *reel_backend_of(reel_backend_kind k)
{
    for (int i = 0; i < reel_backend_count(); i++)
        if (backends[i].kind == k)
            return &backends[i];
    return NULL;
}

const reel_backend_entry *reel_backend_of_comm_id(unsigned char comm_id)
{
    for (int i = 0; i < reel_backend_count(); i++)
        if (backends[i].comm_id == comm_id)
            return &backends[i];
    return NULL;
}

void reel_backend_names(char *buf, size_t len)
{
    size_t n = (size_t)snprintf(buf, len, "auto");
    for (int i = reel_backend_count() - 1; i >= 0 && n < len; i--)
        n += (size_t)snprintf(buf + n, len - n, ", %s", backends[i].name);
}
