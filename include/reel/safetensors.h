/*
 * reel: safetensors checkpoints (the format Hugging Face writes).
 *
 *     reel_safetensors *ck;
 *     reel_safetensors_open(ctx, "llama-dir", &ck);   // a directory, an index or one file
 *     reel_st_tensor t;
 *     reel_safetensors_find(ck, "model.norm.weight", &t);   // name, dtype, shape, mapped bytes
 *     const char *qkv[] = {"...q_proj.weight", "...k_proj.weight", "...v_proj.weight"};
 *     reel_safetensors_write_param(ck, plan, "l0.qkv", 3, qkv);   // checked against the param
 *     reel_safetensors_close(ck);
 *
 * A safetensors file is an 8-byte little-endian header length N, N bytes of
 * JSON ({"name": {"dtype", "shape", "data_offsets": [begin, end]}, ...,
 * "__metadata__": {string: string}}), then the data: offsets count from the
 * first byte after the header, and the tensors are stored back to back,
 * covering the data exactly. A sharded checkpoint has an index,
 * model.safetensors.index.json, whose "weight_map" names each tensor's file
 * (a plain file name beside the index).
 *
 * Opening checks the whole header of every file before anything is read:
 * JSON syntax and duplicate keys, known dtypes, shapes, offsets inside the
 * file (a truncated file is named with the first tensor past its end),
 * tensors back to back without overlap or gap, names unique across shards,
 * and the index's map against the shards. Data is mapped read-only (mmap):
 * no copy on the host; a parameter written from it is copied once, into the
 * plan. Every error names the file and the tensor at fault.
 *
 * Errors go to ctx (reel_ctx_last_error(ctx); ctx may be NULL: this thread's
 * last error); write_param's go to the plan's context. A checkpoint is
 * read-only after open and may be read from several threads.
 */
#ifndef REEL_SAFETENSORS_H
#define REEL_SAFETENSORS_H

#include "reel/reel.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct reel_safetensors reel_safetensors;

/* Dims of a tensor that open accepts (reel's own tensors have up to
 * REEL_MAX_DIMS). */
#define REEL_ST_MAX_DIMS 8

#define REEL_ST_TENSOR_MAGIC REEL_MAGIC('r', 's', 't', 't')
typedef struct reel_st_tensor {
    size_t size;                /* sizeof(reel_st_tensor) of the caller's header */
    int version;                /* REEL_VERSION_NUMBER of the caller's header */
    uint32_t magic;             /* REEL_ST_TENSOR_MAGIC */
    const char *name;        /* owned by the checkpoint */
    const char *dtype_name;  /* as the file spells it: "BF16", "F32", "I64", ... (static) */
    reel_dtype dtype;        /* REEL_DTYPE_COUNT: a dtype reel has no storage for (I64, F8_E4M3, ...) */
    int ndim;                /* 0: a scalar */
    int64_t dims[REEL_ST_MAX_DIMS];
    const void *data;        /* mapped read-only; valid until the checkpoint is closed */
    size_t bytes;
    const char *file;        /* path of the file holding it (owned; "(buffer)" for open_buffer) */
} reel_st_tensor;
#define REEL_ST_TENSOR_HEAD REEL_STRUCT_HEAD(reel_st_tensor, REEL_ST_TENSOR_MAGIC)
#define REEL_ST_TENSOR_INIT REEL_STRUCT_INIT(reel_st_tensor, REEL_ST_TENSOR_MAGIC)

/* Opens path: a directory (its model.safetensors.index.json, else its
 * model.safetensors), an index file (*.json) or one .safetensors file.
 * On failure *out is NULL: REEL_E_NOT_FOUND (no such file, or a directory
 * with neither), REEL_E_INVALID_ARG (a malformed file: the message names the
 * file, the tensor and what is wrong), REEL_E_BACKEND (a system call failed),
 * REEL_E_OOM. */
reel_status reel_safetensors_open(reel_ctx *ctx, const char *path, reel_safetensors **out);
/* The same checks over one file's bytes in memory (borrowed: they must
 * stay valid and unchanged until close). */
reel_status reel_safetensors_open_buffer(reel_ctx *ctx, const void *data, size_t size, reel_safetensors **out);
/* Unmaps the files. NULL is accepted. */
void reel_safetensors_close(reel_safetensors *ck);

/* Tensors of all files, sorted by name (0 for NULL). */
int reel_safetensors_count(const reel_safetensors *ck);
/* The i-th tensor in name order; REEL_E_NOT_FOUND out of range. */
reel_status reel_safetensors_tensor(const reel_safetensors *ck, int i, reel_st_tensor *out);
/* The tensor called name; REEL_E_NOT_FOUND (the message names it) if none. */
reel_status reel_safetensors_find(const reel_safetensors *ck, const char *name, reel_st_tensor *out);
/* A "__metadata__" value of the (first) file; NULL if absent. Owned by the
 * checkpoint. */
const char *reel_safetensors_metadata(const reel_safetensors *ck, const char *key);

/* Writes plan parameter `param` from the checkpoint: with one tensor, its
 * dtype and shape must be the parameter's; with several, they are stacked
 * along dim 0 in the order given (q, k and v into one fused projection; a
 * gate and an up projection into one; the experts of a mixture-of-experts
 * layer into one), so each must have the parameter's dtype and trailing
 * dims, and their first dims must add up to its first. 1 to
 * REEL_ST_MAX_PARTS parts. Each part is copied from the mapping straight
 * into the parameter.
 * REEL_E_NOT_FOUND names a missing tensor or parameter; REEL_E_DTYPE and
 * REEL_E_SHAPE name the tensor, the parameter and both dtypes or shapes.
 * Nothing is written unless every part checks. */
#define REEL_ST_MAX_PARTS 4096
reel_status reel_safetensors_write_param(const reel_safetensors *ck, reel_plan *p, const char *param, int nparts,
                                         const char *const *tensors);

/* One tensor to save. */
#define REEL_ST_ENTRY_MAGIC REEL_MAGIC('r', 's', 't', 'e')
typedef struct reel_st_entry {
    size_t size;                /* sizeof(reel_st_entry) of the caller's header */
    int version;                /* REEL_VERSION_NUMBER of the caller's header */
    uint32_t magic;             /* REEL_ST_ENTRY_MAGIC */
    const char *name;
    reel_dtype dtype;        /* f32, f16, bf16 or i32 */
    int ndim;                /* 0 .. REEL_ST_MAX_DIMS */
    const int64_t *dims;
    const void *data;        /* numel * dtype size bytes */
} reel_st_entry;
#define REEL_ST_ENTRY_HEAD REEL_STRUCT_HEAD(reel_st_entry, REEL_ST_ENTRY_MAGIC)
#define REEL_ST_ENTRY_INIT REEL_STRUCT_INIT(reel_st_entry, REEL_ST_ENTRY_MAGIC)

/* Writes a safetensors file of n tensors, in the order given, with the
 * metadata {"format": "pt"} that transformers expects. Names must be
 * unique and non-empty. The file is written beside path and renamed into
 * place, so a failed save leaves no partial file. */
reel_status reel_safetensors_save(reel_ctx *ctx, const char *path, const reel_st_entry *t, int n);

#ifdef __cplusplus
}
#endif

#endif /* REEL_SAFETENSORS_H */
