/* The KV write of paged attention's layouts across ranks (ops/op.h), kept
 * apart from the plain write of attention.cu:
 *  - DCP: one block per token; a token is written only by the rank that
 *    owns its position, at the slot its local index has in this rank's
 *    block table (the slot mapping's -1 still skips); a local block out of
 *    range is REEL_E_LIMIT, skipped, like the plain write's bad slot;
 *  - CP: one block per (token, rank): row t, chunk q of the gathered k and
 *    v goes to kv_slots[t][q] (-1: none; outside the cache: REEL_E_LIMIT).
 * Both start like the plain write (attn_write_begin: the programmatic
 * launch of the decode, the in-block combine's counters). 16-byte copies
 * when the rows and pointers allow them. */
#include "ops/cuda/attention.cuh"

namespace reel_cu {

template <typename T>
__device__ __forceinline__ void kv_copy_row(T *kd, T *vd, const T *ks, const T *vs, int64_t n, bool vec)
{
    if (vec) {
        typedef pack<T> P;
        for (int64_t i = threadIdx.x; i < n / P::n; i += blockDim.x) {
            ((P *)kd)[i] = ((const P *)ks)[i];
            ((P *)vd)[i] = ((const P *)vs)[i];
        }
        return;
    }
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        kd[i] = ks[i];
        vd[i] = vs[i];
    }
}

template <typename T>
__global__ void attn_write_kv_dcp_kernel(const T *k, const T *v, T *kc, T *vc, reel_meta_view m, attn_geom g, bool vec,
                                         uint32_t *cnt, int32_t ny)
{
    const int64_t t = blockIdx.x;
    attn_write_begin(cnt, ny, t);
    if (m.slot_mapping[t] == -1)
        return;
    const int32_t s = m.token_seq[t], p = m.positions[t];
    /* padding, another rank's token, or metadata the attend phase refuses */
    if (s < 0 || s >= m.max_seqs || p < 0 || reel_dcp_owner(g.dcp, p) != g.dcp.r)
        return;
    const int32_t li = reel_dcp_local_index(g.dcp, p), b = li / (int32_t)g.bs;
    const int32_t blk = b < m.max_blocks ? m.block_tables[(int64_t)s * m.max_blocks + b] : -1;
    if (blk < 0 || blk >= g.nblocks) {
        if (threadIdx.x == 0)
            report(&m, REEL_E_LIMIT);
        return;
    }
    const int64_t slot = (int64_t)blk * g.bs + li % (int32_t)g.bs;
    kv_copy_row(kc + slot * g.kvrow, vc + slot * g.kvrow, k + t * g.kvrow, v + t * g.kvrow, g.kvrow, vec);
}

template <typename T>
__global__ void attn_write_kv_cp_kernel(const T *k, const T *v, T *kc, T *vc, const int32_t *slots, reel_meta_view m,
                                        attn_geom g, int cp, bool vec, uint32_t *cnt, int32_t ny)
{
    const int64_t row = blockIdx.x; /* token t, rank q: row t * cp + q of the gathered k, v */
    attn_write_begin(row % cp == 0 ? cnt : nullptr, ny, row / cp);
    const int64_t slot = slots[row];
    if (slot == -1)
        return;
    if (slot < 0 || slot >= g.nblocks * g.bs) {
        if (threadIdx.x == 0)
            report(&m, REEL_E_LIMIT);
        return;
    }
    kv_copy_row(kc + slot * g.kvrow, vc + slot * g.kvrow, k + row * g.kvrow, v + row * g.kvrow, g.kvrow, vec);
}

bool attn_kv_layout(const reel_launch *l)
{
    const reel_attn_layout *lay = &l->attrs->attn.lay;
    return lay->dcp > 1 || lay->cp >= 1;
}

template <typename T>
static void write_kv_layout(const reel_launch *l, cudaStream_t st, const attn_geom &g, uint32_t *cnt, int32_t ny)
{
    const reel_attn_layout *lay = &l->attrs->attn.lay;
    bool vec = g.kvrow % pack<T>::n == 0 && aligned16(l->in[1]) && aligned16(l->in[2]) && aligned16(l->in[3]) &&
               aligned16(l->in[4]);
    int threads = row_threads(vec ? g.kvrow / pack<T>::n : g.kvrow, 256);
    const T *k = (const T *)l->in[1], *v = (const T *)l->in[2];
    T *kc = (T *)l->in[3], *vc = (T *)l->in[4];
    if (lay->cp >= 1)
        attn_write_kv_cp_kernel<T><<<(unsigned)(l->rows * lay->cp), threads, 0, st>>>(
            k, v, kc, vc, (const int32_t *)l->in[5], *l->meta, g, lay->cp, vec, cnt, ny);
    else
        attn_write_kv_dcp_kernel<T><<<(unsigned)l->rows, threads, 0, st>>>(k, v, kc, vc, *l->meta, g, vec, cnt, ny);
}

/* A launch error stays for the op's REEL_CU_LAUNCHED to report. */
void attn_write_kv_layout(const reel_launch *l, cudaStream_t st, const attn_geom &g, uint32_t *cnt, int32_t ny)
{
    REEL_CU_DISPATCH(l->in_shape[0].dtype, write_kv_layout<T>(l, st, g, cnt, ny));
}

} /* namespace reel_cu */
