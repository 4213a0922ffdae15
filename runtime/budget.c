/* The plan's memory budget: every byte compile is about to allocate, known
 * from the layouts before any of it is, against what the backend can give
 * now. A plan that cannot fit is refused with REEL_E_OOM and its largest
 * parts named, instead of allocating until the device (or, on the host
 * backend, the kernel's OOM killer) stops it. */
#include <stdio.h>
#include <string.h>

#include "core/abi.h"
#include "core/halloc.h"
#include "runtime/plan.h"

typedef struct part {
    const char *what;
    size_t bytes;
} part;

/* "23.84 GB", "512.0 MB", "4096 bytes". */
static const char *human(size_t b, char *buf, size_t len)
{
    if (b >= (size_t)1 << 30)
        snprintf(buf, len, "%.2f GB", (double)b / 1e9);
    else if (b >= (size_t)1 << 20)
        snprintf(buf, len, "%.1f MB", (double)b / 1e6);
    else
        snprintf(buf, len, "%zu bytes", b);
    return buf;
}

static size_t output_bytes(const reel_plan *p, int64_t rows)
{
    size_t off = REEL_PLAN_ALIGN;
    for (int o = 0; o < p->noutputs; o++)
        off = reel_align_up(off + reel_shape_bytes(&p->tensors[p->outputs[o].tensor].shape, rows), REEL_PLAN_ALIGN);
    return off;
}

/* Appends "what size, " for each part, largest first. */
static void list_parts(part *v, int n, char *buf, size_t len)
{
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            if (v[j].bytes > v[i].bytes) {
                part t = v[i];
                v[i] = v[j];
                v[j] = t;
            }
    size_t w = 0;
    char h[32];
    for (int i = 0; i < n && w < len; i++)
        if (v[i].bytes)
            w += (size_t)snprintf(buf + w, len - w, "%s%s %s", w ? ", " : "", v[i].what, human(v[i].bytes, h, sizeof h));
}

/* Parameters and states, and the largest of them. */
static void tensor_bytes(const reel_plan *p, size_t *params, size_t *states, size_t *largest, const char **name,
                         bool *is_state)
{
    *params = *states = *largest = 0;
    *name = "";
    *is_state = false;
    for (int t = 1; t < p->ntensors; t++) {
        const reel_tinfo *ti = &p->tensors[t];
        if (ti->kind != REEL_T_PARAM && ti->kind != REEL_T_STATE)
            continue;
        size_t b = reel_shape_bytes(&ti->shape, 0);
        *(ti->kind == REEL_T_PARAM ? params : states) += b;
        if (b > *largest) {
            *largest = b;
            *name = ti->name;
            *is_state = ti->kind == REEL_T_STATE;
        }
    }
}

reel_status reel_plan_estimate(const reel_plan *p, reel_plan_memory *out)
{
    size_t params, states, largest;
    const char *name;
    bool is_state;
    tensor_bytes(p, &params, &states, &largest, &name, &is_state);
    reel_plan_memory m = REEL_PLAN_MEMORY_INIT;
    m.num_buckets = p->nbuckets;
    m.arena_bytes = p->arena_bytes;
    m.static_bytes = p->stat_bytes;
    m.pinned_bytes = p->stat_bytes + output_bytes(p, p->buckets[p->nbuckets - 1]);
    m.param_bytes = params;
    m.state_bytes = states;
    for (int b = 0; b < p->nbuckets; b++) {
        m.bucket_arena_bytes[b] = p->bucket[b].arena_bytes;
        m.bucket_device_bytes[b] = p->bucket[b].arena_bytes + p->stat_bytes;
    }
    m.stream_ws_bytes = p->ws_plan_bytes;
    m.device_bytes = m.arena_bytes + m.static_bytes + m.stream_ws_bytes;
    return reel_struct_fill(out, &m, &reel_abi_plan_memory, p->err);
}

reel_status reel_plan_budget(reel_plan *p)
{
    size_t params, states, largest;
    const char *largest_name;
    bool largest_state;
    tensor_bytes(p, &params, &states, &largest, &largest_name, &largest_state);
    int32_t top = p->buckets[p->nbuckets - 1];
    size_t pinned = p->stat_bytes + output_bytes(p, top);
    bool host = p->be->kind == REEL_BACKEND_HOST;   /* its device memory is the host's: pinned counts there */
    part v[6] = {
        { "parameters", params }, { "states", states }, { "the activation arena", p->arena_bytes },
        { "the step region", p->stat_bytes }, { "stream workspaces", p->ws_plan_bytes },
        { "pinned staging", host ? pinned : 0 },
    };
    size_t need = 0;
    for (int i = 0; i < 6; i++)
        need += v[i].bytes;
    char a[32], b[32], c[32], d[32], parts[512];
    list_parts(v, 6, parts, sizeof parts);
    const reel_backend_vt *vt = p->be->vt;
    size_t avail = 0, total = 0;
    const char *bound = "; ";
    bool known = vt->mem_info && vt->mem_info(p->be, &avail, &total, &bound) == REEL_OK;
    /* "RLIMIT_DATA; physical memory" -> what bounds avail, what total is */
    char by[64];
    const char *semi = strchr(bound, ';');
    size_t bl = semi ? (size_t)(semi - bound) : strlen(bound);
    snprintf(by, sizeof by, "%.*s", (int)(bl < sizeof by ? bl : sizeof by - 1), bound);
    const char *of = semi ? semi + 2 : "";
    reel_log(p->ctx, REEL_LOG_INFO, "compile: memory before allocating: %s in all (%s); available %s of %s",
             human(need, a, sizeof a), parts, known ? human(avail, b, sizeof b) : "unknown",
             known ? human(total, c, sizeof c) : "unknown");
    if (known && need > avail) {
        char tensor[160] = "";
        if (largest)
            snprintf(tensor, sizeof tensor, "; the largest tensor is %s '%s' (%s)", largest_state ? "state" : "parameter",
                     largest_name, human(largest, d, sizeof d));
        return reel_seterr(p->err, REEL_E_OOM,
                           "compile: the plan needs %s of %s memory (%zu bytes), %s is available (%s) of %s %s: %s%s",
                           human(need, a, sizeof a), host ? "host" : "device", need, human(avail, b, sizeof b), by,
                           human(total, c, sizeof c), of, parts, tensor);
    }
    if (!host) {   /* the pinned staging is the host's */
        size_t havail, htotal;
        reel_hmem_info(&havail, &htotal, NULL);
        if (pinned > havail)
            return reel_seterr(p->err, REEL_E_OOM,
                               "compile: the plan needs %s of pinned host memory (the step region's staging and "
                               "the outputs of %d tokens), %s is available",
                               human(pinned, a, sizeof a), top, human(havail, b, sizeof b));
    }
    return REEL_OK;
}
