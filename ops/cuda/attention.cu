/* CUDA paged attention over a mixed prefill/decode batch, the host
 * reference's semantics (ops/host/attention.c). Two impls:
 *  - cuda.paged_attention (attention.cuh: the KV write, then tensor-core
 *    prefill for multi-token runs, split-KV decode for the other tokens and
 *    the combine of its chunks), for the dtypes and head dims its kernels
 *    are built for;
 *  - cuda.paged_attention.ref, for any head dim: one block per (token,
 *    head) walks the keys with an online softmax, each warp every 4th key,
 *    the warps merged at the end in a fixed order.
 * Both write every token's k/v into its cache slot first (slot -1: skipped;
 * a slot outside the cache: REEL_E_LIMIT in err_word, skipped), and both
 * take the layouts of ops/op.h: the KV write of DCP and CP
 * (attn_kv_layout.cu), DCP's local prefix (attn_last_key) and the lse
 * output, which costs a branch on a launch constant where none is asked. Metadata is
 * never trusted to stay in range: a padding token (sequence -1) gets zeros;
 * a sequence past max_seqs, a context past max_context, a position outside
 * [0, context), or a block index or cache block out of range sets
 * REEL_E_LIMIT and gives zeros: never a truncated context. */
#include "ops/cuda/attention.cuh"
#include "ops/cuda/impls.h"
#include "ops/cuda/rope.cuh"

namespace reel_cu {

enum { ATTN_WARPS = 4, ATTN_THREADS = ATTN_WARPS * 32 };

/* One block per token; 16-byte copies when the rows allow them. */
template <typename T>
__global__ void attn_write_kv_kernel(const T *k, const T *v, T *kc, T *vc, reel_meta_view m, int64_t nslots,
                                     int64_t kvrow, bool vec, uint32_t *cnt, int32_t ny)
{
    int64_t t = blockIdx.x;
    attn_write_begin(cnt, ny, t);
    int64_t slot = m.slot_mapping[t];
    if (slot == -1)
        return;
    if (slot < 0 || slot >= nslots) {
        if (threadIdx.x == 0)
            report(&m, REEL_E_LIMIT);
        return;
    }
    if (vec) {
        typedef pack<T> P;
        const P *ks = (const P *)(k + t * kvrow), *vs = (const P *)(v + t * kvrow);
        P *kd = (P *)(kc + slot * kvrow), *vd = (P *)(vc + slot * kvrow);
        for (int64_t i = threadIdx.x; i < kvrow / P::n; i += blockDim.x) {
            kd[i] = ks[i];
            vd[i] = vs[i];
        }
        return;
    }
    for (int64_t i = threadIdx.x; i < kvrow; i += blockDim.x) {
        kc[slot * kvrow + i] = k[t * kvrow + i];
        vc[slot * kvrow + i] = v[t * kvrow + i];
    }
}

/* The KV write of the fused rope (attrs.attn.rope_rot_dim > 0): one block
 * per token rotates the token's q into qr and its k into kr (every token,
 * whatever its slot: they are the rope ops' results), with the rope op's
 * formula (rope.cuh) at the token's entry of the rope's positions tensor,
 * and puts the rotated k and the v into the token's cache slot. Built for
 * latency, one token being the common decode step:
 * - the angles depend on the position and the pair only: their cosines and
 *   sines are computed once per token (rcs, 2 half floats of shared
 *   memory), a thread each, the frequency (a double pow, no input of the
 *   step) before the programmatic wait; 32 heads x 32 pairs each computing
 *   theirs took 17 us a token on an H200;
 * - each thread loads its (up to) 4 items before it computes any, and
 *   stores a rotated k to kr and to the cache at once, so nothing is read
 *   back (one round of loads, not one per item: 8 us a token before). */
enum { ROPE_KV_ITEMS = 4 };

/* The token's cosines (rcs[j], j < half) and sines (rcs[half + j]) at
 * position p; thread j0's frequency f0 is already computed. */
__device__ __forceinline__ void rope_kv_angles(float *rcs, int32_t j0, int32_t half, double theta, double f0,
                                               int32_t p)
{
    for (int32_t j = j0; j < 2 * half; j += (int32_t)blockDim.x) {
        double ang = (double)p * (j == j0 ? f0 : rope_freq(j < half ? j : j - half, half, theta));
        rcs[j] = j < half ? (float)cos(ang) : (float)sin(ang);
    }
}

template <typename T>
__global__ void attn_write_kv_rope_kernel(const T *__restrict__ q, const T *__restrict__ k, const T *__restrict__ v,
                                          T *__restrict__ qr, T *__restrict__ kr, T *__restrict__ kc,
                                          T *__restrict__ vc, const int32_t *pos, reel_meta_view m, int64_t nslots,
                                          attn_geom g, int32_t half, double theta, uint32_t *cnt, int32_t ny, bool pdl)
{
    extern __shared__ float rcs[]; /* [2 half]: cosines, then sines */
    int64_t t = blockIdx.x;
    const int32_t j0 = threadIdx.x;
    const double f0 = j0 < 2 * half ? rope_freq(j0 < half ? j0 : j0 - half, half, theta) : 0.0;
    /* Thread j < half: the cosine of pair j, j < 2 half: the sine of pair
     * j - half (rope_cs's values). Where the positions are the step's
     * metadata (uploaded before the step's first kernel) they and the
     * slot are read, and the angles computed, before the wait: the double
     * cosines and sines then overlap the producer's tail. */
    const bool early = pos == m.positions;
    const int32_t per = (int32_t)g.dh - half;
    const int64_t slot = m.slot_mapping[t];
    if (early)
        rope_kv_angles(rcs, j0, half, theta, f0, pos[t]);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (pdl)
        cudaGridDependencySynchronize();
#endif
    attn_write_begin(cnt, ny, t);
    const bool put = slot >= 0 && slot < nslots;
    if (!put && slot != -1 && threadIdx.x == 0)
        report(&m, REEL_E_LIMIT);
    if (!early)
        rope_kv_angles(rcs, j0, half, theta, f0, pos[t]);
    if (put)
        for (int64_t i = threadIdx.x; i < g.kvrow; i += blockDim.x)
            vc[slot * g.kvrow + i] = v[t * g.kvrow + i];
    __syncthreads();
    /* Items: the q heads' per = dh - half items each, then the k heads'. */
    const int32_t nq = (int32_t)g.h * per, n = nq + (int32_t)g.hkv * per;
    for (int32_t i0 = threadIdx.x; i0 < n; i0 += ROPE_KV_ITEMS * blockDim.x) {
        float x1[ROPE_KV_ITEMS] = {}, x2[ROPE_KV_ITEMS] = {};
        T raw[ROPE_KV_ITEMS] = {};
#pragma unroll
        for (int u = 0; u < ROPE_KV_ITEMS; u++) {
            int32_t i = i0 + u * (int32_t)blockDim.x, iq = i < nq ? i : i - nq, w = iq % per;
            const T *x = i < nq ? q + t * g.qrow + (iq / per) * g.dh : k + t * g.kvrow + (iq / per) * g.dh;
            if (i < n && w < half) {
                x1[u] = to_f(x[w]);
                x2[u] = to_f(x[half + w]);
            } else if (i < n) {
                raw[u] = x[half + w]; /* pass-through dim 2 half + (w - half) */
            }
        }
#pragma unroll
        for (int u = 0; u < ROPE_KV_ITEMS; u++) {
            int32_t i = i0 + u * (int32_t)blockDim.x, iq = i < nq ? i : i - nq, w = iq % per;
            if (i >= n)
                continue;
            const bool isk = i >= nq;
            int64_t at = (iq / per) * g.dh;
            T *o = isk ? kr + t * g.kvrow + at : qr + t * g.qrow + at;
            T *c = isk && put ? kc + slot * g.kvrow + at : nullptr;
            if (w < half) {
                const float cs = rcs[w], sn = rcs[half + w];
                T r1 = from_f<T>(__fsub_rn(__fmul_rn(x1[u], cs), __fmul_rn(x2[u], sn)));
                T r2 = from_f<T>(__fadd_rn(__fmul_rn(x2[u], cs), __fmul_rn(x1[u], sn)));
                o[w] = r1;
                o[half + w] = r2;
                if (c) {
                    c[w] = r1;
                    c[half + w] = r2;
                }
            } else {
                o[half + w] = raw[u];
                if (c)
                    c[half + w] = raw[u];
            }
        }
    }
}

/* The host's guard for token t, evaluated by the whole block: false means
 * zeros (reported unless the token is padding). *last: the last key it
 * attends (attn_last_key: -1 for an empty DCP shard, zeros unreported). */
__device__ bool attn_check(const reel_meta_view &m, const attn_geom &g, int64_t t, int32_t *seq, int32_t *last)
{
    int32_t s = m.token_seq[t];
    int32_t p = m.positions[t];
    *seq = s;
    *last = -1;
    if (s == -1)
        return false;
    bool ok = s >= 0 && s < m.max_seqs;
    if (ok) {
        int32_t ctx = m.context_lens[s];
        ok = ctx <= m.max_context && p >= 0 && p < ctx;
        p = ok ? attn_last_key(g, p) : -1;
        ok = ok && p / g.bs < m.max_blocks;
        *last = p;
    }
    int64_t nb = ok && p >= 0 ? p / g.bs + 1 : 0; /* none for an empty shard */
    int bad = 0;
    for (int64_t b = threadIdx.x; b < nb; b += blockDim.x) {
        int32_t blk = m.block_tables[(int64_t)s * m.max_blocks + b];
        bad |= blk < 0 || blk >= g.nblocks;
    }
    ok = !__syncthreads_or(bad) && ok;
    if (!ok && threadIdx.x == 0)
        report(&m, REEL_E_LIMIT);
    return ok && p >= 0;
}

template <typename T>
__global__ void attn_kernel(const T *q, const T *kc, const T *vc, T *out, reel_meta_view m, attn_geom g)
{
    extern __shared__ float sm[];
    float *qs = sm;                  /* [dh] */
    float *acc = sm + g.dh;          /* [ATTN_WARPS][dh] */
    __shared__ float wm[ATTN_WARPS], wl[ATTN_WARPS];
    int64_t t = blockIdx.x, h = blockIdx.y;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    T *orow = out + t * g.qrow + h * g.dh;
    int32_t s, p;
    if (!attn_check(m, g, t, &s, &p)) {
        for (int64_t d = threadIdx.x; d < g.dh; d += blockDim.x)
            orow[d] = from_f<T>(0.0f);
        attn_put_lse(g, t, h, 1, -INFINITY);
        return;
    }
    for (int64_t d = threadIdx.x; d < g.dh; d += blockDim.x) {
        qs[d] = to_f(q[t * g.qrow + h * g.dh + d]);
        for (int w = 0; w < ATTN_WARPS; w++)
            acc[w * g.dh + d] = 0.0f;
    }
    __syncthreads();
    const int32_t *bt = m.block_tables + (int64_t)s * m.max_blocks;
    int64_t koff = (h / g.group) * g.dh;
    float *aw = acc + warp * g.dh;
    float mx = -INFINITY, sum = 0.0f;
    for (int64_t j = warp; j <= p; j += ATTN_WARPS) {
        int64_t kat = ((int64_t)bt[j / g.bs] * g.bs + j % g.bs) * g.kvrow + koff;
        float dot = 0.0f;
        for (int64_t d = lane; d < g.dh; d += 32)
            dot += qs[d] * to_f(kc[kat + d]);
        float sc = warp_sum(dot) * g.scale;
        float mnew = fmaxf(mx, sc);
        float corr = mnew == mx ? 1.0f : expf(mx - mnew);
        float e = expf(sc - mnew);
        sum = sum * corr + e;
        for (int64_t d = lane; d < g.dh; d += 32)
            aw[d] = aw[d] * corr + e * to_f(vc[kat + d]);
        mx = mnew;
    }
    if (lane == 0) {
        wm[warp] = mx;
        wl[warp] = sum;
    }
    __syncthreads();
    float M = wm[0];
    for (int w = 1; w < ATTN_WARPS; w++)
        M = fmaxf(M, wm[w]);
    float L = 0.0f, f[ATTN_WARPS];
    for (int w = 0; w < ATTN_WARPS; w++) {
        f[w] = wm[w] == -INFINITY ? 0.0f : expf(wm[w] - M); /* a warp without keys weighs 0 */
        L += wl[w] * f[w];
    }
    for (int64_t d = threadIdx.x; d < g.dh; d += blockDim.x) {
        float o = 0.0f;
        for (int w = 0; w < ATTN_WARPS; w++)
            o += acc[w * g.dh + d] * f[w];
        orow[d] = from_f<T>(o / L);
    }
    attn_put_lse(g, t, h, 1, M + logf(L)); /* scores in natural units here */
}

attn_geom attn_geom_of(const reel_launch *l)
{
    const reel_attn_params *p = &l->attrs->attn.p;
    attn_geom g;
    g.h = p->num_heads;
    g.hkv = p->num_kv_heads;
    g.dh = p->head_dim;
    g.bs = p->block_size;
    g.nblocks = lead(&l->in_shape[3], l->rows);
    g.kvrow = g.hkv * g.dh;
    g.qrow = g.h * g.dh;
    g.group = g.hkv > 0 ? g.h / g.hkv : 1;
    g.scale = p->scale != 0.0f ? p->scale : 1.0f / sqrtf((float)g.dh);
    g.bs_shift = -1;
    for (int32_t k = 0; k < 31; k++)
        if ((int64_t)1 << k == g.bs)
            g.bs_shift = k;
    g.dcp = reel_attn_dcp(&l->attrs->attn.lay);
    g.lse = l->attrs->attn.lay.lse ? (float *)l->out[2] : nullptr;
    g.min_chunk = 0;
    g.whole_keys = 0;
    return g;
}

template <typename T>
static void write_kv(const reel_launch *l, cudaStream_t st, const attn_geom &g, uint32_t *cnt = nullptr,
                     int32_t ny = 0, bool pdl = false)
{
    if (attn_kv_layout(l)) { /* DCP or CP: attn_kv_layout.cu */
        attn_write_kv_layout(l, st, g, cnt, ny);
        return;
    }
    if (l->attrs->attn.rope_rot_dim > 0) {
        /* A thread per cosine or sine up to 1024 (2 half <= head_dim). */
        int32_t half = l->attrs->attn.rope_rot_dim / 2;
        int threads = row_threads(2 * half, 1024);
        launch(attn_write_kv_rope_kernel<T>, dim3((unsigned)l->rows), dim3((unsigned)(threads < 256 ? 256 : threads)),
               2 * (size_t)half * sizeof(float), st, pdl, (const T *)l->in[0], (const T *)l->in[1],
               (const T *)l->in[2], (T *)l->out[2], (T *)l->out[3], (T *)l->in[3], (T *)l->in[4],
               (const int32_t *)l->in[5], *l->meta, g.nblocks * g.bs, g, half, (double)l->attrs->attn.rope_theta, cnt,
               ny);
        return;
    }
    bool vec = g.kvrow % pack<T>::n == 0 && aligned16(l->in[1]) && aligned16(l->in[2]) && aligned16(l->in[3]) &&
               aligned16(l->in[4]);
    int threads = row_threads(vec ? g.kvrow / pack<T>::n : g.kvrow, 256);
    attn_write_kv_kernel<T><<<(unsigned)l->rows, threads, 0, st>>>((const T *)l->in[1], (const T *)l->in[2],
                                                                   (T *)l->in[3], (T *)l->in[4], *l->meta,
                                                                   g.nblocks * g.bs, g.kvrow, vec, cnt, ny);
}

/* Whether the launch takes the one-kernel decode (attn_fw, docs/attention.md):
 * the tensor-core decode's dtypes and head dims, at most
 * REEL_ATTN_ONE_KERNEL_ROWS tokens (their slots fit the kernel's mask)
 * whose blocks fit one wave unsplit (beyond it every later block repeats
 * the KV write's latency after its wait, which the separate write kernel
 * pays once: batch 48 and 64 measured slower, docs/benchmarks.md), no
 * layout across ranks, and the plan's counters for this stream. A function
 * of the launch configuration and the device alone, so replay and eager
 * take the same path. */
#ifndef REEL_ATTN_ONE_KERNEL /* 0: always the two-kernel path (bench/gpu.sh ab's A/B build) */
#define REEL_ATTN_ONE_KERNEL 1
#endif
#ifndef REEL_ATTN_ONE_KERNEL_MAX /* fewer: the two-kernel path above that many tokens (A/B builds) */
#define REEL_ATTN_ONE_KERNEL_MAX REEL_ATTN_ONE_KERNEL_ROWS
#endif
static_assert(REEL_ATTN_ONE_KERNEL_MAX <= REEL_ATTN_ONE_KERNEL_ROWS, "the kernel's arrays hold ONE_KERNEL_ROWS");

static bool one_kernel_size(const reel_backend *be, const attn_geom &g, reel_dtype dt, int64_t rows)
{
    return REEL_ATTN_ONE_KERNEL && attn_decode_mma_supports(dt, g.dh) && rows <= REEL_ATTN_ONE_KERNEL_MAX &&
           attn_decode_one_wave(be, g, dt, rows);
}

static attn_fw attn_one_kernel(const reel_backend *be, const reel_launch *l, const attn_geom &g, int32_t ny)
{
    attn_fw fw = {};
    const reel_meta_view *m = l->meta;
    if (!one_kernel_size(be, g, l->in_shape[0].dtype, l->rows) ||
        attn_kv_layout(l) || reel_attn_has_layout(&l->attrs->attn.lay) || !m->attn_cnt ||
        l->rows * ny > m->attn_cnt_words || l->attrs->attn.cnt_slot < 0)
        return fw;
    fw.on = true;
    fw.k = l->in[1];
    fw.v = l->in[2];
    fw.kc = l->in[3];
    fw.vc = l->in[4];
    fw.nslots = g.nblocks * g.bs;
    if (l->attrs->attn.rope_rot_dim > 0) {
        fw.half = l->attrs->attn.rope_rot_dim / 2;
        fw.theta = (double)l->attrs->attn.rope_theta;
        fw.pos = (const int32_t *)l->in[5];
        fw.qr = l->out[2];
        fw.kr = l->out[3];
    }
    return fw;
}

} /* namespace reel_cu */

extern "C" bool reel_cu_attn_one_kernel_size(const reel_backend *be, reel_dtype dt, int64_t rows, int64_t h,
                                             int64_t hkv, int64_t dh)
{
    reel_cu::attn_geom g = {};
    g.h = h;
    g.hkv = hkv;
    g.dh = dh;
    g.group = hkv > 0 ? h / hkv : 0;
    return hkv > 0 && reel_cu::one_kernel_size(be, g, dt, rows);
}

extern "C" int64_t reel_cu_attn_persist_grid(const reel_backend *be, reel_dtype dt, int64_t rows, int64_t h,
                                             int64_t hkv, int64_t dh, int32_t max_context)
{
    if (hkv <= 0 || rows <= 0 || max_context < 1)
        return 0;
    reel_cu::attn_geom g = {};
    g.h = h;
    g.hkv = hkv;
    g.dh = dh;
    g.group = h / hkv;
    const int nchunks = reel_cu::attn_decode_chunks(be, &g, dt, rows, max_context);
    return reel_cu::attn_decode_persist_grid(be, g, dt, rows, nchunks, max_context);
}

namespace reel_cu {

template <typename T> static void attn_ref_run(const reel_launch *l, cudaStream_t st, const attn_geom &g)
{
    write_kv<T>(l, st, g);
    size_t smem = (size_t)(1 + ATTN_WARPS) * (size_t)g.dh * sizeof(float);
    dim3 grid((unsigned)l->rows, (unsigned)g.h);
    attn_kernel<T><<<grid, ATTN_THREADS, smem, st>>>((const T *)attn_q(l), (const T *)l->in[3], (const T *)l->in[4],
                                                     (T *)l->out[0], *l->meta, g);
}

/* No metadata: nothing can be attended; keep the output defined. */
static reel_status attn_no_meta(reel_backend *be, const reel_launch *l, const attn_geom &g, cudaStream_t st,
                                const char *impl)
{
    size_t bytes = (size_t)(l->rows * g.qrow) * reel_dtype_size(l->out_shape[0].dtype);
    return name_err(be, REEL_CUDA_CHECK(be->err, cudaMemsetAsync(l->out[0], 0, bytes, st)), impl);
}

static reel_status attn_ref_launch(reel_backend *be, const reel_launch *l)
{
    attn_geom g = attn_geom_of(l);
    if (l->rows <= 0)
        return REEL_OK;
    cudaStream_t st = reel_cuda_stream_handle(l->stream);
    if (!l->meta)
        return attn_no_meta(be, l, g, st, "cuda.paged_attention.ref");
    REEL_CU_DISPATCH(l->in_shape[0].dtype, attn_ref_run<T>(l, st, g));
    return REEL_CU_LAUNCHED(be, "cuda.paged_attention.ref");
}

/* The fast kernels read whole rows 16 bytes at a time: the planner aligns
 * its tensors, and a caller's bound cache is checked here, so an unaligned
 * one takes the reference kernel instead of faulting. */
static bool attn_fast_aligned(const reel_launch *l)
{
    for (int i = 0; i < 5; i++)
        if (!aligned16(l->in[i]))
            return false;
    return aligned16(l->out[0]) && aligned16(l->out[1]) &&
           (l->attrs->attn.rope_rot_dim <= 0 || (aligned16(l->out[2]) && aligned16(l->out[3])));
}

static reel_status attn_launch(reel_backend *be, const reel_launch *l)
{
    attn_geom g = attn_geom_of(l);
    if (l->rows <= 0)
        return REEL_OK;
    if (!attn_fast_aligned(l))
        return attn_ref_launch(be, l);
    cudaStream_t st = reel_cuda_stream_handle(l->stream);
    if (!l->meta)
        return attn_no_meta(be, l, g, st, "cuda.paged_attention");
    reel_dtype dt = l->in_shape[0].dtype;
    const int nchunks = attn_decode_chunks(be, &g, dt, l->rows, l->meta->max_context);
    /* Small batches: the decode merges its own chunks and overlaps its
     * metadata reads with the kernel before it (docs/attention.md). */
    const bool inblock = attn_decode_inblock(g, dt, l->rows, nchunks);
    const int64_t G = attn_decode_mma_group();
    const int32_t ny = (int32_t)(g.hkv * ((g.group + G - 1) / G));
    const bool prefill = l->rows > 1 && attn_prefill_supports(dt, g.dh);
    cudaError_t e = cudaSuccess;
    attn_fw fw = attn_one_kernel(be, l, g, ny);
    if (fw.on) {
        /* One kernel: the decode writes the cache itself (the first kernel
         * of the op, so it waits for the op's producer where the plan
         * launches the op programmatically) and takes every token, those
         * of multi-token runs too: a block supplies each slot of the step
         * its chunk reads, so a run's token sees the run's earlier keys.
         * No prefill kernel follows (docs/attention.md); the combine does
         * past 8 chunks. */
        uint32_t *cnt = l->meta->attn_cnt + (int64_t)l->attrs->attn.cnt_slot * l->meta->attn_cnt_words;
        e = attn_decode_launch(l, st, g, nchunks, false, inblock, l->pdl, fw, cnt, be->caps.pdl, 0);
        return REEL_CU_LAUNCHED_E(be, "cuda.paged_attention", e);
    }
    const bool pdl = be->caps.pdl && l->rows <= 16;
    /* The first kernel, the KV write, waits for the kernel before it where
     * the plan launches the op programmatically (only the rope-fused write
     * starts early; the others launch in stream order). The prefill comes
     * last, a programmatic dependent of the decode (or its combine) where
     * the device has that: its blocks classify the rows from the metadata
     * before their wait, so a step without runs pays only the hand-off
     * after the decode, not a launch and the metadata reads before it
     * (4.4 us a layer at 32 tokens, docs/benchmarks.md). Decode and
     * prefill write disjoint rows; the prefill's wait follows the decode's
     * completion, which followed the KV write's. */
    /* Past one wave, the persistent decode; its chunks merge in the combine. */
    const int64_t ps_grid = attn_decode_persist_grid(be, g, dt, l->rows, nchunks, l->meta->max_context);
    const bool ib = inblock && ps_grid == 0;
    uint32_t *cnt = ib ? attn_ws_counters((float *)l->out[1], g) : nullptr;
    REEL_CU_DISPATCH(dt, write_kv<T>(l, st, g, cnt, ny, l->pdl));
    e = attn_decode_launch(l, st, g, nchunks, prefill, ib, pdl, fw, cnt, be->caps.pdl, ps_grid);
    if (e == cudaSuccess && prefill)
        e = attn_prefill_launch(l, st, g, be->caps.pdl, be->caps.sm_count > 0 ? be->caps.sm_count : 132);
    return REEL_CU_LAUNCHED_E(be, "cuda.paged_attention", e);
}

/* The layouts both impls are built for (ops/op.h): DCP, CP and the lse
 * output, one at a time (DCP with CP is no validated layout, so no kernel
 * runs it). */
static bool use_attn_layout(REEL_CU_USE_ARGS)
{
    const reel_attn_layout *lay = &a->attn.lay;
    if (lay->dcp >= 1 && lay->cp >= 1)
        return false;
    if (lay->cp >= 1 && (nin < 6 || in[5].dtype != REEL_I32 || in[5].ndim != 2 || in[5].dims[1] != lay->cp))
        return false;
    return !lay->lse || (out[2].dtype == REEL_F32 && out[2].ndim == 2 && out[2].dims[1] == a->attn.p.num_heads);
}

static bool use_attn_common(REEL_CU_USE_ARGS)
{
    const reel_attn_params *p = &a->attn.p;
    bool rope_ok = a->attn.rope_rot_dim <= 0 ||
                   (nin >= 6 && in[5].dtype == REEL_I32 && out[2].dtype == in[0].dtype && out[3].dtype == in[0].dtype);
    return nin >= 5 && rope_ok && same_float_dtype(in, 5, out, 1) && p->num_heads > 0 && p->num_kv_heads > 0 &&
           p->head_dim > 0 && p->block_size > 0 && p->num_heads % p->num_kv_heads == 0 &&
           in[0].dims[0] <= 0x7fffffffLL && use_attn_layout(in, nin, out, a, caps);
}

static bool use_attn_ref(REEL_CU_USE_ARGS)
{
    const reel_attn_params *p = &a->attn.p;
    return use_attn_common(in, nin, out, a, caps) && p->head_dim <= REEL_CUDA_ATTN_MAX_HEAD_DIM &&
           p->num_heads <= 65535;
}

/* The split-KV grid is tokens x chunks x kv heads x head groups of 8 (at
 * most max(rows, SLOTS) x num_heads blocks, one dimension) and its partials
 * go to out[1], which must have the schema's shape. */
static bool use_attn(REEL_CU_USE_ARGS)
{
    const reel_attn_params *p = &a->attn.p;
    if (!use_attn_common(in, nin, out, a, caps) || !attn_decode_supports(in[0].dtype, p->head_dim))
        return false;
    int64_t slot = (int64_t)p->num_heads * p->head_dim + p->num_heads;
    return out[1].ndim == 2 && out[1].dtype == REEL_F32 && !out[1].tokens && out[1].dims[0] == REEL_ATTN_SPLIT_SLOTS &&
           out[1].dims[1] == slot && (in[0].dims[0] > REEL_ATTN_SPLIT_SLOTS ? in[0].dims[0] : REEL_ATTN_SPLIT_SLOTS) * p->num_heads <= 0x7fffffffLL;
}

} /* namespace reel_cu */

/* Programmatic launch by grid size: the KV write's, one block a token
 * (runtime/schedule.c). */
static int64_t attn_grid(const reel_launch *l, const reel_device_caps *caps)
{
    (void)caps;
    return l->rows;
}

static reel_op_impl attn_impl(void)
{
    reel_op_impl i = reel_cu::make_impl("cuda.paged_attention", REEL_OP_PAGED_ATTENTION, 20, true, false,
                                        reel_cu::use_attn, reel_cu::attn_launch);
    i.grid_blocks = attn_grid;
    return i;
}
extern "C" const reel_op_impl reel_cu_paged_attention_impl = attn_impl();
REEL_CU_IMPL(reel_cu_paged_attention_ref_impl, "cuda.paged_attention.ref", REEL_OP_PAGED_ATTENTION, 10, false,
             false, reel_cu::use_attn_ref, reel_cu::attn_ref_launch);
