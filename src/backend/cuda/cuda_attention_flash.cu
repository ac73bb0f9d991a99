// Whole-mode attention for head dims up to 128 (cuda_attention_flash.cuh): a block of four warps
// holds up to 64 (row, head) pairs while the block streams each split's K and V tiles through
// shared memory by cp.async (the next tile loads during this one's products; bf16 mode's tiles
// stay bf16 and reach the k16 products by ldmatrix, or on sm_90a by wgmma in
// cuda_attention_flash_wg.cu). The arithmetic is the order rule of cuda_attention.cu, run through
// the same helpers (cuda_attention.cuh) as the tile kernel, so the bits are the same. Split-mode
// blocks of at most 16 pairs (decode rows) run the decode kernels of cuda_attention_decode.cu.
#include <atomic>

#include "backend/cuda/cuda_attention_flash.cuh"
#include "backend/cuda/cuda_backend.h"

namespace tf::cuda::attn {

namespace {

// f32 mode: q, K and V tiles; bf16 mode: two stages of bf16 K and V tiles (q's fragments load
// from memory into registers). Both: two splits' slots.
template <bool kLo>
constexpr size_t flash_smem() {
  return (kLo ? static_cast<size_t>(kPairs + 2 * kSplit) * kKs * sizeof(float)
              : 4 * static_cast<size_t>(kSplit) * kKs16 * sizeof(uint16_t)) +
         2 * kSplit * sizeof(int64_t);
}

// The split's weights (the scores' C fragments, rounded to bf16) as the V product's A fragments:
// key step j takes key tiles 2j and 2j + 1 as they lie.
__device__ __forceinline__ void pack_weights(const float (&sc)[8][4], uint32_t (&pa)[4][4]) {
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    pa[j][0] = pack_bf16(sc[2 * j][0], sc[2 * j][1]);
    pa[j][1] = pack_bf16(sc[2 * j][2], sc[2 * j][3]);
    pa[j][2] = pack_bf16(sc[2 * j + 1][0], sc[2 * j + 1][1]);
    pa[j][3] = pack_bf16(sc[2 * j + 1][2], sc[2 * j + 1][3]);
  }
}
// f32 mode: K and V tiles of f32 stream through their own buffers, the next K tile loading while
// this split's V products run; products in 3xTF32.
__global__ void __launch_bounds__(kThreads, 2) flash_kernel(Args a) {
  grid_wait();
  grid_launch_next();
  extern __shared__ float4 sh4[];
  float* qs = reinterpret_cast<float*>(sh4);  // [kPairs][kKs]
  float* ks = qs + kPairs * kKs;              // [kSplit][kKs]
  float* vs = ks + kSplit * kKs;              // [kSplit][kKs]
  auto* kslot = reinterpret_cast<int64_t*>(vs + kSplit * kKs);
  // c < 0: the whole group, folded; c >= 0: its splits c * chunk.. (at most chunk), a partial each.
  const int g = a.items[2 * blockIdx.x], c = a.items[2 * blockIdx.x + 1];
  const bool part = c >= 0;
  const Item it = item_of(a, g, c);
  const int s0 = it.s0, s1 = it.s1;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int gq = lane >> 2, tq = lane & 3, hd = a.head_dim, hdp = a.hd_pad;
  const auto* kpool = static_cast<const float*>(a.k);
  const auto* vpool = static_cast<const float*>(a.v);
  fill_slots<kThreads>(kslot, a, it, s0);
  stage_q<kThreads, true>(qs, kKs, a, it.r0, it.h0, it.P, kPairs);
  zero_v_tail<kThreads>(vs, kKs, hdp);
  FlashPairs f = flash_pairs(a, it, warp, gq);
  const bool busy = 16 * warp < it.P;
  float o[16][4];
#pragma unroll
  for (int j = 0; j < 16; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
  __syncthreads();
  stage_tile<kThreads>(ks, kKs, kpool, kslot, hd, hdp);
  for (int s = s0; s <= s1; ++s) {
    const int buf = (s - s0) & 1;
    stage_tile<kThreads>(vs, kKs, vpool, kslot + buf * kSplit, hd, hdp);
    if (s < s1) fill_slots<kThreads>(kslot + (buf ^ 1) * kSplit, a, it, s + 1);
    cp_async_wait<1>();
    __syncthreads();
    float sc[8][4];
    SplitJoin jn;
    if (busy) {
#pragma unroll
      for (int n = 0; n < 8; ++n) sc[n][0] = sc[n][1] = sc[n][2] = sc[n][3] = 0.0f;
#pragma unroll 1
      for (int kk = 0; kk < hdp; kk += 8) {
        uint32_t ab[4], as[4];
        load_a<true>(qs + 16 * warp * kKs + kk, kKs, lane, ab, as);
#pragma unroll
        for (int n4 = 0; n4 < 8; n4 += 4) {
          uint32_t bb[4][2], bs[4][2];
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const float* kr = ks + (8 * (n4 + i) + gq) * kKs + kk + tq;
            split_tf32<true>(kr[0], bb[i][0], bs[i][0]);
            split_tf32<true>(kr[4], bb[i][1], bs[i][1]);
          }
          mma3_shared_a<true>(*reinterpret_cast<float(*)[4][4]>(&sc[n4]), ab, as, bb, bs);
        }
      }
      jn = flash_softmax<true>(a, it, f, sc, warp, gq, tq, s, part);
    }
    __syncthreads();
    if (s < s1) stage_tile<kThreads>(ks, kKs, kpool, kslot + (buf ^ 1) * kSplit, hd, hdp);
    if (s < s1) cp_async_wait<1>();
    else cp_async_wait<0>();
    __syncthreads();
    if (busy) {
      // acc_s per half of the dim tiles; A slots t and t + 4 take keys 8n + 2t and 8n + 2t + 1.
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        float os[8][4];
#pragma unroll
        for (int j = 0; j < 8; ++j) os[j][0] = os[j][1] = os[j][2] = os[j][3] = 0.0f;
#pragma unroll
        for (int n = 0; n < 8; ++n) {
          uint32_t ab[4], as[4];
          split_a<true>(sc[n][0], sc[n][2], sc[n][1], sc[n][3], ab, as);
#pragma unroll
          for (int j4 = 0; j4 < 8; j4 += 4) {
            if (8 * (8 * half + j4) >= hdp) break;
            uint32_t bb[4][2], bs[4][2];
#pragma unroll
            for (int i = 0; i < 4; ++i) {
              const float* vr = vs + (8 * n + 2 * tq) * kKs + 8 * (8 * half + j4 + i) + gq;
              split_tf32<true>(vr[0], bb[i][0], bs[i][0]);
              split_tf32<true>(vr[kKs], bb[i][1], bs[i][1]);
            }
            mma3_shared_a<true>(*reinterpret_cast<float(*)[4][4]>(&os[j4]), ab, as, bb, bs);
          }
        }
        flash_take<8>(a, it, jn, o, os, 8 * half, 8 * half, warp, gq, tq, s, part);
      }
    }
    __syncthreads();
  }
  if (busy && !part) flash_out(a, it, f, o, 0, warp, gq, tq);
}

// bf16 mode: a ring of two stages of bf16 K and V tiles, read by ldmatrix into k16 products (no
// widening); split s + 2 loads into split s's stage once its products are done. q's A fragments
// load from memory into registers, rounded as stage_q rounds; the scores' C fragments are the V
// product's A fragments as they lie. 70 KB of shared memory and at most 168 registers a thread
// let three blocks share an SM.
__global__ void __launch_bounds__(kThreads, 3) flash_bf16_kernel(Args a) {
  grid_wait();
  grid_launch_next();
  constexpr int ld = kKs16;
  extern __shared__ float4 sh4[];
  auto* kb = reinterpret_cast<uint16_t*>(sh4);                     // [2][kSplit][ld]
  uint16_t* vb = kb + 2 * kSplit * ld;                             // [2][kSplit][ld]
  auto* kslot = reinterpret_cast<int64_t*>(vb + 2 * kSplit * ld);  // [2][kSplit]
  const int g = a.items[2 * blockIdx.x], c = a.items[2 * blockIdx.x + 1];
  const bool part = c >= 0;
  const Item it = item_of(a, g, c);
  const int s0 = it.s0, s1 = it.s1;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int gq = lane >> 2, tq = lane & 3, hd = a.head_dim, hdp = a.hd_pad, steps = hdp / 16;
  const auto* kpool = static_cast<const uint16_t*>(a.k);
  const auto* vpool = static_cast<const uint16_t*>(a.v);
  auto stage = [&](int b) {
    stage_tile<kThreads>(kb + b * kSplit * ld, ld, kpool, kslot + b * kSplit, hd, hdp);
    stage_tile<kThreads>(vb + b * kSplit * ld, ld, vpool, kslot + b * kSplit, hd, hdp);
  };
  FlashPairs f;
  uint32_t qa[kChunk / 16][4];
  float o[16][4];
  start_bf16(a, it, kslot, warp, gq, tq, f, qa, o);
  const bool busy = 16 * warp < it.P;
  __syncthreads();
  stage(0);
  if (s0 < s1) stage(1);
  // ldmatrix rows: lane 8i + r addresses row r of matrix i.
  const int mi = lane >> 3, mr = lane & 7;
  for (int s = s0; s <= s1; ++s) {
    const int b = (s - s0) & 1;
    const uint16_t* kt = kb + b * kSplit * ld;
    const uint16_t* vt = vb + b * kSplit * ld;
    if (s < s1) cp_async_wait<2>();
    else cp_async_wait<0>();
    __syncthreads();
    if (s + 2 <= s1) fill_slots<kThreads>(kslot + b * kSplit, a, it, s + 2);
    if (busy) {
      float sc[8][4];
#pragma unroll
      for (int n = 0; n < 8; ++n) sc[n][0] = sc[n][1] = sc[n][2] = sc[n][3] = 0.0f;
      // Key tiles n, n + 1 at once: matrices (keys 8n.., dims k..), (8n.., k + 8..), (8n + 8.., k..), (8n + 8.., k + 8..).
#pragma unroll
      for (int k = 0; k < kChunk / 16; ++k) {
        if (k >= steps) break;
#pragma unroll
        for (int n = 0; n < 8; n += 2) {
          uint32_t kf[4];
          ldsm4(kf, kt + (8 * n + 8 * (mi >> 1) + mr) * ld + 16 * k + 8 * (mi & 1));
          mma_k16(sc[n], qa[k], kf[0], kf[1]);
          mma_k16(sc[n + 1], qa[k], kf[2], kf[3]);
        }
      }
      const SplitJoin jn = flash_softmax<false>(a, it, f, sc, warp, gq, tq, s, part);
      uint32_t pa[4][4];
      pack_weights(sc, pa);
      // Four dim tiles at a time; tiles t, t + 1 by one ldmatrix: matrices (keys 16j.., dims 8t..),
      // (16j + 8.., 8t..), (16j.., 8t + 8..), (16j + 8.., 8t + 8..).
#pragma unroll
      for (int t0 = 0; t0 < 16; t0 += 4) {
        if (8 * t0 >= hdp) break;
        float os[4][4];
#pragma unroll
        for (int t = 0; t < 4; ++t) os[t][0] = os[t][1] = os[t][2] = os[t][3] = 0.0f;
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
          for (int t = 0; t < 4; t += 2) {
            if (8 * (t0 + t) >= hdp) break;
            uint32_t vf[4];
            ldsm4_t(vf, vt + (16 * j + 8 * (mi & 1) + mr) * ld + 8 * (t0 + t) + 8 * (mi >> 1));
            mma_k16(os[t], pa[j], vf[0], vf[1]);
            mma_k16(os[t + 1], pa[j], vf[2], vf[3]);
          }
        flash_take<4>(a, it, jn, o, os, t0, t0, warp, gq, tq, s, part);
      }
    }
    __syncthreads();
    if (s + 2 <= s1) stage(b);
  }
  if (busy && !part) flash_out(a, it, f, o, 0, warp, gq, tq);
}

}  // namespace

void launch_flash(const Args& a, unsigned n_items, unsigned yblocks) {
  static std::atomic<bool> ready_f32{false}, ready_bf16{false};
  if (a.lo) launch_attention_kernel(flash_kernel, ready_f32, kThreads, flash_smem<true>(), a, n_items, yblocks);
  else if (!launch_flash_wg(a, n_items, yblocks))
    launch_attention_kernel(flash_bf16_kernel, ready_bf16, kThreads, flash_smem<false>(), a, n_items, yblocks);
}

}  // namespace tf::cuda::attn
