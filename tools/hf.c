/* The seeded demo model saved as a Hugging Face checkpoint (see hf.h). */
#include "hf.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int save_config(const model_config *m, const char *dir, char *err, size_t n)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    char *text = model_toy_config_json(m);
    FILE *f = text ? fopen(path, "w") : NULL;
    int rc = f && fputs(text, f) >= 0 ? 0 : -1;
    if (f && fclose(f) != 0)
        rc = -1;
    free(text);
    if (rc != 0)
        snprintf(err, n, "%s: cannot write", path);
    return rc;
}

int hf_save_seeded(reel_ctx *ctx, const model_config *m, const char *dir, char *err, size_t n)
{
    if (m->hf) {
        snprintf(err, n, "--save-model saves the seeded demo model, not a loaded checkpoint");
        return -1;
    }
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
        snprintf(err, n, "%s: cannot create the directory: %s", dir, strerror(errno));
        return -1;
    }
    reel_model *mm = NULL;
    reel_status st = model_open(ctx, m, &mm);
    if (st != REEL_OK) {
        snprintf(err, n, "the seeded model's config: %s: %s", reel_status_str(st), reel_ctx_last_error(ctx));
        return -1;
    }
    int nt = reel_model_tensor_count(mm), rc = 0;
    reel_st_entry *e = calloc((size_t)nt, sizeof *e);
    reel_model_tensor *t = calloc((size_t)nt, sizeof *t);
    void **bufs = calloc((size_t)nt, sizeof *bufs);
    if (!e || !t || !bufs) {
        snprintf(err, n, "out of host memory");
        rc = -1;
    }
    for (int i = 0; i < nt && rc == 0; i++) {
        t[i] = (reel_model_tensor)REEL_MODEL_TENSOR_INIT;
        st = reel_model_tensor_get(mm, i, &t[i]);
        size_t bytes = (size_t)(t[i].dims[0] * (t[i].ndim == 2 ? t[i].dims[1] : 1)) * reel_dtype_size(t[i].dtype);
        bufs[i] = st == REEL_OK ? malloc(bytes ? bytes : 1) : NULL;
        if (st == REEL_OK && !bufs[i])
            st = REEL_E_OOM;
        if (st == REEL_OK)
            st = model_seeded_tensor(m, &t[i], bufs[i], bytes);
        if (st != REEL_OK) {
            snprintf(err, n, "generating the seeded tensor %d: %s", i, reel_status_str(st));
            rc = -1;
        }
        e[i] = (reel_st_entry){REEL_ST_ENTRY_HEAD, t[i].name, t[i].dtype, t[i].ndim, t[i].dims, bufs[i]};
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (rc == 0 && reel_safetensors_save(ctx, path, e, nt) != REEL_OK) {
        snprintf(err, n, "%s", reel_ctx_last_error(ctx));
        rc = -1;
    }
    if (rc == 0)
        rc = save_config(m, dir, err, n);
    for (int i = 0; bufs && i < nt; i++)
        free(bufs[i]);
    free(bufs);
    free(t);
    free(e);
    reel_model_close(mm);
    return rc;
}
