/* Host reference kernels of multi-head latent attention (ops/op.h):
 * head_matmul, the per-head matmul over one weight, and mla_attention, the
 * absorbed form over a paged latent cache. mla_attention writes every
 * token's [c | k_pe] into its cache slot first, then each (token, head)
 * attends causally over its sequence's rows 0 .. its position through the
 * block table (DCP: this rank's rows of the prefix, as paged attention's):
 * score = scale * (q_lat_h . row[0, L) + rope_h . row[L, L + R)), softmax
 * two-pass in float32 (max, then exp-sum and weighted rows), keys in
 * ascending order, value row[0, L). Sparse (a sixth input, slots [T, k]):
 * a token attends exactly the physical slots listed (-1: none; none at all
 * gives zeros and lse -inf), in list order. Step metadata out of range sets
 * REEL_E_LIMIT, skips the write and gives the token zeros (paged.h). */
#include <math.h>
#include <string.h>

#include "ops/host/host_ops.h"
#include "ops/host/kern.h"
#include "ops/host/paged.h"

void reel_host_head_matmul(const void *args)
{
    const reel_launch *l = args;
    const reel_shape *xs = &l->in_shape[0], *ws = &l->in_shape[1];
    reel_dtype xd = xs->dtype, wd = ws->dtype, od = l->out_shape[0].dtype;
    int64_t h = l->attrs->hmm.heads, off = l->attrs->hmm.row_off, rows = l->attrs->hmm.rows;
    int64_t xoff = l->attrs->hmm.x_off;
    bool tr = l->attrs->hmm.transposed;
    int64_t X = xs->dims[1], S = ws->dims[0] / h, C = ws->dims[1];
    int64_t K = tr ? rows : C, N = tr ? C : rows, xrow = X / h;
    for (int64_t t = 0; t < l->rows; t++) {
        for (int64_t hh = 0; hh < h; hh++) {
            int64_t xat = t * X + hh * xrow + xoff, wat = (hh * S + off) * C, oat = t * h * N + hh * N;
            for (int64_t n = 0; n < N; n++) {
                float acc = 0.0f;
                for (int64_t k = 0; k < K; k++)
                    acc += reel_load(l->in[0], xd, xat + k) * reel_load(l->in[1], wd, wat + (tr ? k * C + n : n * C + k));
                reel_store(l->out[0], od, oat + n, acc);
            }
        }
    }
}

typedef struct reel_hk_mla {
    const reel_launch *l;
    reel_hk_paged pg;
    reel_dtype dt;          /* every float operand's (the schema's rule) */
    int64_t h, L, R, row, dq;
    float scale;
    float *lse;             /* [rows, h] or NULL */
    const int32_t *slots;   /* sparse: [rows, nslots] physical slots (-1: none), else NULL */
    int64_t nslots;
} reel_hk_mla;

static float reel_hk_mla_score(const reel_hk_mla *a, int64_t t, int64_t hh, int64_t kat)
{
    const reel_launch *l = a->l;
    float acc = 0.0f;
    for (int64_t d = 0; d < a->L; d++)
        acc += reel_load(l->in[0], a->dt, t * a->h * a->L + hh * a->L + d) * reel_load(l->in[4], a->dt, kat + d);
    for (int64_t d = 0; d < a->R; d++)
        acc += reel_load(l->in[1], a->dt, t * a->h * a->dq + hh * a->dq + a->dq - a->R + d) *
               reel_load(l->in[4], a->dt, kat + a->L + d);
    return acc * a->scale;
}

/* The key slot j of a token: its sequence's position j through the block
 * table, or (sparse) the j-th of its listed slots. */
static int64_t reel_hk_mla_key(const reel_hk_mla *a, int64_t t, int32_t s, int64_t j)
{
    if (a->slots)
        return a->slots[t * a->nslots + j];
    return reel_hk_paged_slot(&a->pg, s, j);
}

/* Output dims accumulated at once; a longer latent takes several passes. */
enum { REEL_HK_MLA_DC = 128 };

/* One (token, head) over keys 0 .. last; returns the lse. */
static float reel_hk_mla_head(const reel_hk_mla *a, int64_t t, int64_t hh, int32_t s, int32_t last)
{
    const reel_launch *l = a->l;
    int64_t oat = t * a->h * a->L + hh * a->L;
    if (last < 0) {
        reel_hk_zero(l->out[0], a->dt, oat, a->L);
        return -INFINITY;
    }
    float mx = -INFINITY, lse = -INFINITY;
    int64_t nkeys = 0;
    for (int64_t j = 0; j <= last; j++) {
        int64_t slot = reel_hk_mla_key(a, t, s, j);
        if (slot < 0)
            continue; /* sparse: a padded choice */
        float sc = reel_hk_mla_score(a, t, hh, slot * a->row);
        nkeys++;
        if (sc > mx)
            mx = sc;
    }
    if (nkeys == 0) {
        reel_hk_zero(l->out[0], a->dt, oat, a->L);
        return -INFINITY;
    }
    for (int64_t d0 = 0; d0 < a->L; d0 += REEL_HK_MLA_DC) {
        int64_t nd = a->L - d0 < REEL_HK_MLA_DC ? a->L - d0 : REEL_HK_MLA_DC;
        float acc[REEL_HK_MLA_DC] = { 0 }, sum = 0.0f;
        for (int64_t j = 0; j <= last; j++) {
            int64_t slot = reel_hk_mla_key(a, t, s, j);
            if (slot < 0)
                continue;
            int64_t kat = slot * a->row;
            float e = expf(reel_hk_mla_score(a, t, hh, kat) - mx);
            sum += e;
            for (int64_t d = 0; d < nd; d++)
                acc[d] += e * reel_load(l->in[4], a->dt, kat + d0 + d);
        }
        for (int64_t d = 0; d < nd; d++)
            reel_store(l->out[0], a->dt, oat + d0 + d, acc[d] / sum);
        lse = mx + logf(sum);
    }
    return lse;
}

/* Sparse: token t's sequence and every listed slot (-1: none) inside the
 * cache; *last the last list index. False: zeros (reported unless it is
 * padding). */
static bool reel_hk_mla_sparse_check(const reel_hk_mla *a, int64_t t, int32_t *seq, int32_t *last)
{
    const reel_meta_view *m = a->pg.m;
    int32_t s = m->token_seq[t];
    *seq = s;
    *last = (int32_t)a->nslots - 1;
    if (s == -1)
        return false;
    bool ok = s >= 0 && s < m->max_seqs;
    for (int64_t j = 0; ok && j < a->nslots; j++) {
        int32_t slot = a->slots[t * a->nslots + j];
        ok = slot >= -1 && slot < a->pg.nblocks * a->pg.bs;
    }
    if (!ok)
        reel_hk_report(m, REEL_E_LIMIT);
    return ok;
}

static void reel_hk_mla_write(const reel_hk_mla *a)
{
    const reel_launch *l = a->l;
    for (int64_t t = 0; t < l->rows; t++) {
        int64_t slot = a->pg.m->slot_mapping[t];
        if (slot == -1)
            continue;
        if (a->pg.dcp.n > 1 && (slot = reel_hk_paged_dcp_slot(&a->pg, t)) < 0)
            continue;
        if (slot < 0 || slot >= a->pg.nblocks * a->pg.bs) {
            reel_hk_report(a->pg.m, REEL_E_LIMIT);
            continue;
        }
        size_t es = reel_storage_size(a->dt);
        memcpy((char *)l->in[4] + (size_t)(slot * a->row) * es, (const char *)l->in[2] + (size_t)(t * a->L) * es,
               (size_t)a->L * es);
        memcpy((char *)l->in[4] + (size_t)(slot * a->row + a->L) * es, (const char *)l->in[3] + (size_t)(t * a->R) * es,
               (size_t)a->R * es);
    }
}

void reel_host_mla_attention(const void *args)
{
    const reel_launch *l = args;
    reel_hk_mla a = {
        .l = l, .dt = l->in_shape[0].dtype,
        .h = l->attrs->mla.num_heads, .L = l->attrs->mla.latent_dim, .R = l->attrs->mla.rope_dim,
        .scale = l->attrs->mla.scale, .lse = l->attrs->mla.lay.lse ? l->out[2] : NULL,
    };
    a.row = a.L + a.R;
    if (l->in[5]) {
        a.slots = l->in[5];
        a.nslots = l->in_shape[5].dims[1];
    }
    a.dq = l->in_shape[1].dims[1] / a.h;
    reel_attn_layout lay = l->attrs->mla.lay;
    a.pg = (reel_hk_paged){ l->meta, l->attrs->mla.block_size, reel_shape_lead(&l->in_shape[4], l->rows), reel_attn_dcp(&lay) };
    if (!a.pg.m) { /* no metadata: nothing can be attended; keep the output defined */
        reel_hk_zero(l->out[0], a.dt, 0, l->rows * a.h * a.L);
        for (int64_t i = 0; a.lse && i < l->rows * a.h; i++)
            a.lse[i] = -INFINITY;
        return;
    }
    reel_hk_mla_write(&a);
    for (int64_t t = 0; t < l->rows; t++) {
        int32_t s, last;
        bool ok = a.slots ? reel_hk_mla_sparse_check(&a, t, &s, &last) : reel_hk_paged_check(&a.pg, t, &s, &last);
        for (int64_t hh = 0; hh < a.h; hh++) {
            float lse = -INFINITY;
            if (ok)
                lse = reel_hk_mla_head(&a, t, hh, s, last);
            else
                reel_hk_zero(l->out[0], a.dt, t * a.h * a.L + hh * a.L, a.L);
            if (a.lse)
                a.lse[t * a.h + hh] = lse;
        }
    }
}
