/* Internal to ops/cuda: the phases of an attention tile on mma.sync m16n8k16
 * that the tensor-core decode (attn_decode_mma.cu) and the mma.sync prefill
 * (attn_prefill.cu) share: Q's A fragments, S = Q K^T and O += P V from K
 * and V rows staged in shared memory. One copy of each, so the two kernels'
 * arithmetic is the same instructions in the same order.
 *
 * Fragments are the mma.sync ones: a warp's rows gi = lane / 4 and gi + 8,
 * its columns ti * 2 and ti * 2 + 1 (ti = lane % 4) of each 8-wide n-tile.
 * Arrays are passed by reference with their sizes in the type, and every
 * loop over them is unrolled, so they stay in registers. */
#ifndef REEL_OPS_CUDA_ATTN_TILE_CUH
#define REEL_OPS_CUDA_ATTN_TILE_CUH

#include "ops/cuda/mma.cuh"

namespace reel_cu {

/* Q of rows gi (q0) and gi + 8 (q1) as the A fragments of the KSTEPS
 * k-steps of S = Q K^T, zeros for a row not taken (in0, in1): read once,
 * reused by every key tile. */
template <typename T, int KSTEPS>
__device__ __forceinline__ void attn_q_frags(uint32_t (&qf)[KSTEPS][4], const T *q0, const T *q1, bool in0, bool in1,
                                             int ti)
{
#pragma unroll
    for (int kk = 0; kk < KSTEPS; kk++) {
        int d = kk * 16 + ti * 2;
        qf[kk][0] = in0 ? *(const uint32_t *)(q0 + d) : 0u;
        qf[kk][1] = in1 ? *(const uint32_t *)(q1 + d) : 0u;
        qf[kk][2] = in0 ? *(const uint32_t *)(q0 + d + 8) : 0u;
        qf[kk][3] = in1 ? *(const uint32_t *)(q1 + d + 8) : 0u;
    }
}

/* Zeroed C fragments: an accumulator (O, or S before its k-steps) starts empty. */
template <int N> __device__ __forceinline__ void attn_zero_frags(float (&c)[N][4])
{
#pragma unroll
    for (int n = 0; n < N; n++)
        c[n][0] = c[n][1] = c[n][2] = c[n][3] = 0.0f;
}

/* S = Q K^T for the 8 NT keys key0 .. of the K rows at ks (LD elements a
 * row): the scores phase, one ldmatrix.x4 feeding two n-tiles. */
template <typename T, int KSTEPS, int NT, int LD>
__device__ __forceinline__ void attn_qk(float (&sc)[NT][4], const uint32_t (&qf)[KSTEPS][4], const T *ks, int key0,
                                        int lane)
{
    static_assert(NT % 2 == 0, "n-tiles in pairs");
    attn_zero_frags(sc);
#pragma unroll
    for (int kk = 0; kk < KSTEPS; kk++) {
#pragma unroll
        for (int n = 0; n < NT; n += 2) {
            uint32_t b[4];
            int key = key0 + n * 8 + (lane >> 4) * 8 + (lane & 7);
            int dim = kk * 16 + ((lane >> 3) & 1) * 8;
            ldsm_x4(b, &ks[key * LD + dim]);
            mma_op<T>::run(sc[n], qf[kk], b);
            mma_op<T>::run(sc[n + 1], qf[kk], b + 2);
        }
    }
}

/* O += P V for the 8 NT keys key0 .. of the V rows at vs (LD elements a
 * row), P taken straight from the score registers (two n-tiles of P are
 * the A fragment of a 16-key k-step): the P V phase of both kernels. */
template <typename T, int NT, int DT, int LD>
__device__ __forceinline__ void attn_pv(float (&o)[DT][4], const float (&p)[NT][4], const T *vs, int key0, int lane)
{
    static_assert(NT % 2 == 0 && DT % 2 == 0, "k-steps of 16 keys, n-tiles in pairs");
#pragma unroll
    for (int kk = 0; kk < NT / 2; kk++) {
        uint32_t a[4];
        c_to_a<T>(p[2 * kk], p[2 * kk + 1], a);
#pragma unroll
        for (int n = 0; n < DT; n += 2) {
            uint32_t b[4];
            int key = key0 + kk * 16 + ((lane >> 3) & 1) * 8 + (lane & 7);
            int dim = (n + (lane >> 4)) * 8;
            ldsm_x4_t(b, &vs[key * LD + dim]);
            mma_op<T>::run(o[n], a, b);
            mma_op<T>::run(o[n + 1], a, b + 2);
        }
    }
}

} /* namespace reel_cu */

#endif
