/* Host reference kernel: paged attention over a mixed prefill/decode batch.
 * Phase 1 writes every token's k/v into its cache slot; phase 2 lets each
 * token attend causally over its sequence's positions 0 .. its own, read
 * through the block table. With a layout across ranks (ops/op.h): DCP
 * writes only the tokens this rank owns, at the slot its block table gives
 * their local index, and attends the local prefix (an empty one gives
 * zeros and lse -inf); CP writes every rank's gathered rows through
 * kv_slots. The lse output, where asked for, is max + log(sum) of the
 * scaled scores. Step metadata is never trusted to stay in range:
 * a slot outside the cache, or a sequence, position, context or block past
 * the limits the metadata was sized to, sets REEL_E_LIMIT in err_word; the
 * write is skipped, and the token's output is zeros (never a truncated
 * context). Softmax is two-pass in float32 (max, then exp-sum and weighted
 * values), keys in ascending order, so results are deterministic.
 * With the fused rope (attrs.attn.rope_rot_dim > 0) every token's q and k
 * are first rotated into out[2] and out[3] by the rope op's own formula
 * (reel_hk_rope_head); the rotated k goes into the cache and q is read from
 * out[2]: the results are those of rope ops feeding the attention. */
#include <math.h>
#include <string.h>

#include "ops/host/host_ops.h"
#include "ops/host/kern.h"
#include "ops/host/paged.h"

/* Output dims accumulated at once; longer heads take several passes. */
enum { REEL_HK_ATTN_DC = 128 };

typedef struct reel_hk_attn {
    const reel_launch *l;
    const reel_meta_view *m;
    const void *q;  /* in[0], or the rotated q (out[2]) with the fused rope */
    const void *k;  /* in[1], or the rotated k (out[3]) with the fused rope */
    reel_hk_paged pg;
    reel_dtype qd, kd, vd, kcd, vcd, od;
    int64_t h, hkv, dh, bs, nblocks, kvrow;
    float scale;
    int64_t rope_half; /* rope_rot_dim / 2; 0: no rope */
    double rope_theta;
    reel_dcp_view dcp;
    int32_t cp;   /* CP ranks whose rows are written (0: the step's slot mapping) */
    float *lse;   /* [rows, h] or NULL */
} reel_hk_attn;

static reel_hk_attn reel_hk_attn_of(const reel_launch *l)
{
    const reel_attn_params *p = &l->attrs->attn.p;
    reel_hk_attn a = {
        .l = l, .m = l->meta,
        .qd = l->in_shape[0].dtype, .kd = l->in_shape[1].dtype, .vd = l->in_shape[2].dtype,
        .kcd = l->in_shape[3].dtype, .vcd = l->in_shape[4].dtype, .od = l->out_shape[0].dtype,
        .h = p->num_heads, .hkv = p->num_kv_heads, .dh = p->head_dim, .bs = p->block_size,
        .nblocks = reel_shape_lead(&l->in_shape[3], l->rows),
        .dcp = reel_attn_dcp(&l->attrs->attn.lay), .cp = l->attrs->attn.lay.cp,
        .lse = l->attrs->attn.lay.lse ? l->out[2] : NULL,
    };
    a.kvrow = a.hkv * a.dh;
    a.pg = (reel_hk_paged){ a.m, a.bs, a.nblocks, a.dcp };
    a.q = l->in[0];
    a.k = l->in[1];
    a.rope_half = l->attrs->attn.rope_rot_dim / 2;
    a.rope_theta = l->attrs->attn.rope_theta;
    if (a.rope_half > 0) {
        a.q = l->out[2];
        a.k = l->out[3];
    }
    a.scale = p->scale != 0.0f ? p->scale : 1.0f / sqrtf((float)a.dh);
    return a;
}

static void reel_hk_copy(void *dst, reel_dtype dd, int64_t dat, const void *src, reel_dtype sd, int64_t sat,
                         int64_t n)
{
    if (dd == sd) {
        size_t es = reel_storage_size(dd);
        memcpy((char *)dst + (size_t)dat * es, (const char *)src + (size_t)sat * es, (size_t)n * es);
        return;
    }
    for (int64_t i = 0; i < n; i++)
        reel_store(dst, dd, dat + i, reel_load(src, sd, sat + i));
}

/* Copies row `row` of k and v (rows of kvrow elements) into cache slot
 * `slot`, or reports a slot outside the cache. */
static void reel_hk_attn_put(const reel_hk_attn *a, int64_t slot, int64_t row)
{
    const reel_launch *l = a->l;
    if (slot < 0 || slot >= a->nblocks * a->bs) {
        reel_hk_report(a->m, REEL_E_LIMIT);
        return;
    }
    reel_hk_copy(l->in[3], a->kcd, slot * a->kvrow, a->k, a->kd, row * a->kvrow, a->kvrow);
    reel_hk_copy(l->in[4], a->vcd, slot * a->kvrow, l->in[2], a->vd, row * a->kvrow, a->kvrow);
}

static void reel_hk_attn_write_kv(const reel_hk_attn *a)
{
    const reel_launch *l = a->l;
    for (int64_t t = 0; t < l->rows; t++) {
        if (a->cp >= 1) { /* every rank's row t, through kv_slots */
            const int32_t *slots = l->in[5];
            for (int64_t q = 0; q < a->cp; q++)
                if (slots[t * a->cp + q] != -1)
                    reel_hk_attn_put(a, slots[t * a->cp + q], t * a->cp + q);
            continue;
        }
        int64_t slot = a->m->slot_mapping[t];
        if (slot == -1)
            continue;
        if (a->dcp.n > 1 && (slot = reel_hk_paged_dcp_slot(&a->pg, t)) < 0)
            continue;
        reel_hk_attn_put(a, slot, t);
    }
}

/* Element offset of key position j of sequence s, kv head g, in the cache. */
static int64_t reel_hk_attn_key(const reel_hk_attn *a, int32_t s, int64_t j, int64_t g)
{
    return reel_hk_paged_slot(&a->pg, s, j) * a->kvrow + g * a->dh;
}

static float reel_hk_attn_score(const reel_hk_attn *a, int64_t qat, int64_t kat)
{
    float acc = 0.0f;
    for (int64_t d = 0; d < a->dh; d++)
        acc += reel_load(a->q, a->qd, qat + d) * reel_load(a->l->in[3], a->kcd, kat + d);
    return acc * a->scale;
}

/* One (token, head): out[oat .. oat+dh) = softmax(q k^T * scale) v over
 * keys 0 .. last; returns the lse (-inf, and zeros, with no key). */
static float reel_hk_attn_head(const reel_hk_attn *a, int32_t s, int32_t last, int64_t qat, int64_t g, int64_t oat)
{
    if (last < 0) {
        reel_hk_zero(a->l->out[0], a->od, oat, a->dh);
        return -INFINITY;
    }
    float mx = -INFINITY, lse = -INFINITY;
    for (int64_t j = 0; j <= last; j++) {
        float sc = reel_hk_attn_score(a, qat, reel_hk_attn_key(a, s, j, g));
        if (sc > mx)
            mx = sc;
    }
    for (int64_t d0 = 0; d0 < a->dh; d0 += REEL_HK_ATTN_DC) {
        int64_t nd = a->dh - d0 < REEL_HK_ATTN_DC ? a->dh - d0 : REEL_HK_ATTN_DC;
        float acc[REEL_HK_ATTN_DC] = {0};
        float sum = 0.0f;
        for (int64_t j = 0; j <= last; j++) {
            int64_t kat = reel_hk_attn_key(a, s, j, g);
            float e = expf(reel_hk_attn_score(a, qat, kat) - mx);
            sum += e;
            for (int64_t d = 0; d < nd; d++)
                acc[d] += e * reel_load(a->l->in[4], a->vcd, kat + d0 + d);
        }
        for (int64_t d = 0; d < nd; d++)
            reel_store(a->l->out[0], a->od, oat + d0 + d, acc[d] / sum);
        lse = mx + logf(sum);
    }
    return lse;
}

void reel_host_paged_attention(const void *args)
{
    const reel_launch *l = args;
    reel_hk_attn a = reel_hk_attn_of(l);
    int64_t qrow = a.h * a.dh;
    if (!a.m) { /* no metadata: nothing can be attended; keep the output defined */
        reel_hk_zero(l->out[0], a.od, 0, l->rows * qrow);
        for (int64_t i = 0; a.lse && i < l->rows * a.h; i++)
            a.lse[i] = -INFINITY;
        return;
    }
    if (a.rope_half > 0) {
        const int32_t *pos = l->in[5];
        for (int64_t t = 0; t < l->rows; t++) {
            for (int64_t hh = 0; hh < a.h; hh++)
                reel_hk_rope_head(l->in[0], a.qd, t * qrow + hh * a.dh, l->out[2], a.qd, t * qrow + hh * a.dh, a.dh,
                                  a.rope_half, a.rope_theta, pos[t]);
            for (int64_t g = 0; g < a.hkv; g++)
                reel_hk_rope_head(l->in[1], a.kd, t * a.kvrow + g * a.dh, l->out[3], a.kd, t * a.kvrow + g * a.dh,
                                  a.dh, a.rope_half, a.rope_theta, pos[t]);
        }
    }
    reel_hk_attn_write_kv(&a);
    int64_t group = a.hkv > 0 ? a.h / a.hkv : 1;
    for (int64_t t = 0; t < l->rows; t++) {
        int32_t s, last;
        bool ok = reel_hk_paged_check(&a.pg, t, &s, &last);
        for (int64_t hh = 0; hh < a.h; hh++) {
            int64_t at = t * qrow + hh * a.dh;
            float lse = ok ? reel_hk_attn_head(&a, s, last, at, hh / group, at) : -INFINITY;
            if (!ok)
                reel_hk_zero(l->out[0], a.od, at, a.dh);
            if (a.lse)
                a.lse[t * a.h + hh] = lse;
        }
    }
}
