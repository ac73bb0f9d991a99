// Whole-mode attention for head dims up to 128: a block of four warps holds up to 64 (row, head)
// pairs, each warp 16 of them with their scores, weights and running sums in registers, while
// the block streams each split's K and V tiles through shared memory by cp.async (the next tile
// loads during this one's products; bf16 mode's tiles stay bf16 and reach the k16 products by
// ldmatrix, or on sm_90a as one warpgroup's wgmma from swizzled tiles). The arithmetic is the
// order rule of cuda_attention.cu, run through the same helpers (cuda_attention.cuh) as the tile
// kernel, so the bits are the same. Split-mode blocks of at most 16 pairs (decode rows) run the
// decode kernels of cuda_attention_decode.cu.
#include <atomic>
#include <type_traits>

#include "backend/cuda/cuda_attention_stage.cuh"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_hopper.cuh"
#include "backend/cuda/cuda_matmul.cuh"

namespace tf::cuda::attn {

namespace {

constexpr int kWarps = kFlashPairs / 16, kThreads = 32 * kWarps, kPairs = kFlashPairs;
// f32 mode: q, K and V tiles; bf16 mode: two stages of bf16 K and V tiles (q's fragments load
// from memory into registers). Both: two splits' slots.
template <bool kLo>
constexpr size_t flash_smem() {
  return (kLo ? static_cast<size_t>(kPairs + 2 * kSplit) * kKs * sizeof(float)
              : 4 * static_cast<size_t>(kSplit) * kKs16 * sizeof(uint16_t)) +
         2 * kSplit * sizeof(int64_t);
}

// What a flash warp keeps of its two pairs (rows gq and gq + 8 of its m tile) across splits.
struct FlashPairs {
  int pfirst[2], ppos[2];
  float m[2], l[2];
  bool started[2];
};

__device__ __forceinline__ FlashPairs flash_pairs(const Args& a, const Item& it, int warp, int gq) {
  FlashPairs f;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int p = 16 * warp + gq + 8 * h, row = it.r0 + (p < it.P ? p / a.hpb : 0);
    f.pfirst[h] = a.row_first[row];
    f.ppos[h] = p < it.P ? a.row_pos[row] : -1;
    f.m[h] = f.l[h] = 0.0f;
    f.started[h] = false;
  }
  return f;
}

// How a split's products join a pair's state: mode 0 (no keys in the split), 1 (taken as they
// are: the first split, or a partial), 2 (folded by fa, fb).
struct SplitJoin {
  int mode[2] = {0, 0};
  float fa[2] = {0.0f, 0.0f}, fb[2] = {0.0f, 0.0f};
};

// Split s's softmax of the warp's scores sc (8 key tiles' C fragments), in place: the weights,
// and each pair's (max, sum) written as a partial (part) or folded into f; kSkip as split_softmax's;
// kPack: pa also gets the weights as the V products' A fragments, as pack_weights lays them out.
template <bool kLo, bool kSkip = false, bool kPack = false>
__device__ __forceinline__ SplitJoin flash_softmax(const Args& a, const Item& it, FlashPairs& f, float (&sc)[8][4],
                                                   int warp, int gq, int tq, int s, bool part,
                                                   uint32_t (*pa)[4] = nullptr) {
  SplitJoin j;
  const int base = s * kSplit;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int klo = max(f.pfirst[h], base) - base, khi = min(f.ppos[h], base + kSplit - 1) - base;
    float x[8][2];
#pragma unroll
    for (int n = 0; n < 8; ++n) x[n][0] = sc[n][2 * h], x[n][1] = sc[n][2 * h + 1];
    float mx, lsum;
    uint32_t pw[8];
    split_softmax<kLo, kSkip, kPack>(x, tq, klo, khi, a.scale, a.softcap, mx, lsum, pw);
#pragma unroll
    for (int n = 0; n < 8; ++n) sc[n][2 * h] = x[n][0], sc[n][2 * h + 1] = x[n][1];
    if (kPack) {
#pragma unroll
      for (int n = 0; n < 8; ++n) pa[n / 2][2 * (n % 2) + h] = pw[n];
    }
    if (klo > khi) continue;
    if (part) {
      const int p = 16 * warp + gq + 8 * h;
      if (tq == 0) {
        const int64_t slot = part_slot(a, it.r0 + p / a.hpb, it.h0 + p % a.hpb, s);
        a.part_ml[2 * slot] = mx;
        a.part_ml[2 * slot + 1] = lsum;
      }
      j.mode[h] = 1;
    } else if (!f.started[h]) {
      f.m[h] = mx, f.l[h] = lsum, f.started[h] = true, j.mode[h] = 1;
    } else {
      const float mn = fmaxf(f.m[h], mx);
      j.fa[h] = attn_exp(__fsub_rn(f.m[h], mn));
      j.fb[h] = attn_exp(__fsub_rn(mx, mn));
      f.l[h] = fold(f.l[h], j.fa[h], lsum, j.fb[h]);
      f.m[h] = mn, j.mode[h] = 2;
    }
  }
  return j;
}

// Dim tiles t0..t0 + N - 1 of split s's products os into the partials (part) or the running sums o.
template <int N>
__device__ __forceinline__ void flash_take(const Args& a, const Item& it, const SplitJoin& j, float (&o)[16][4],
                                           const float (&os)[N][4], int t0, int warp, int gq, int tq, int s,
                                           bool part) {
  if (part) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (j.mode[h] == 0) continue;
      const int p = 16 * warp + gq + 8 * h;
      float* dst = a.part_acc + part_slot(a, it.r0 + p / a.hpb, it.h0 + p % a.hpb, s) * a.head_dim;
#pragma unroll
      for (int t = 0; t < N; ++t) {
        const int d = 8 * (t0 + t) + 2 * tq;
        if (d < a.head_dim) dst[d] = os[t][2 * h];
        if (d + 1 < a.head_dim) dst[d + 1] = os[t][2 * h + 1];
      }
    }
    return;
  }
  // One test a pair, not one an element.
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    if (j.mode[h] == 1) {
#pragma unroll
      for (int t = 0; t < N; ++t) o[t0 + t][2 * h] = os[t][2 * h], o[t0 + t][2 * h + 1] = os[t][2 * h + 1];
    } else if (j.mode[h] == 2) {
#pragma unroll
      for (int t = 0; t < N; ++t)
#pragma unroll
        for (int e = 2 * h; e < 2 * h + 2; ++e) o[t0 + t][e] = fold(o[t0 + t][e], j.fa[h], os[t][e], j.fb[h]);
    }
  }
}

// A whole-mode warp's output rows: out = o / l + 0.
__device__ __forceinline__ void flash_out(const Args& a, const Item& it, const FlashPairs& f, const float (&o)[16][4],
                                          int warp, int gq, int tq) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int p = 16 * warp + gq + 8 * h;
    if (p >= it.P) continue;
    float* orow = a.out + static_cast<int64_t>(it.r0 + p / a.hpb) * a.ldq +
                  static_cast<int64_t>(it.h0 + p % a.hpb) * a.head_dim;
#pragma unroll
    for (int t = 0; t < 16; ++t) {
      const int d = 8 * t + 2 * tq;
      if (d < a.head_dim) orow[d] = __fadd_rn(__fdiv_rn(o[t][2 * h], f.l[h]), 0.0f);
      if (d + 1 < a.head_dim) orow[d + 1] = __fadd_rn(__fdiv_rn(o[t][2 * h + 1], f.l[h]), 0.0f);
    }
  }
}

// This lane's q values as bf16 A fragments: pairs gq and gq + 8 of the warp's m tile, dims 2tq,
// 2tq + 1 (+8) of each k16 step; pairs past P and dims past head_dim (a multiple of 4 here) are 0.
__device__ __forceinline__ void load_q16(const Args& a, const Item& it, int warp, int gq, int tq,
                                         uint32_t (&qa)[kChunk / 16][4]) {
  const int hd = a.head_dim;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int p = 16 * warp + gq + 8 * h;
    const float* qr = a.q + static_cast<int64_t>(it.r0 + (p < it.P ? p / a.hpb : 0)) * a.ldq +
                      static_cast<int64_t>(it.h0 + (p < it.P ? p % a.hpb : 0)) * hd;
#pragma unroll
    for (int k = 0; k < kChunk / 16; ++k)
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        const int d = 16 * k + 8 * u + 2 * tq;
        float2 x = make_float2(0.0f, 0.0f);
        if (p < it.P && d < hd) x = *reinterpret_cast<const float2*>(qr + d);
        qa[k][2 * u + h] = pack_bf16(product_input<false>(x.x), product_input<false>(x.y));
      }
  }
}

// What both bf16 flash kernels do before their first stages: the first two splits' slots, the
// warp's pairs, q's A fragments and zeroed running sums.
__device__ __forceinline__ void start_bf16(const Args& a, const Item& it, int64_t* kslot, int warp, int gq, int tq,
                                           FlashPairs& f, uint32_t (&qa)[kChunk / 16][4], float (&o)[16][4]) {
  fill_slots<kThreads>(kslot, a, it, it.s0);
  if (it.s0 < it.s1) fill_slots<kThreads>(kslot + kSplit, a, it, it.s0 + 1);
  f = flash_pairs(a, it, warp, gq);
  load_q16(a, it, warp, gq, tq, qa);
#pragma unroll
  for (int j = 0; j < 16; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
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
        flash_take<8>(a, it, jn, o, os, 8 * half, warp, gq, tq, s, part);
      }
    }
    __syncthreads();
  }
  if (busy && !part) flash_out(a, it, f, o, warp, gq, tq);
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
        flash_take<4>(a, it, jn, o, os, t0, warp, gq, tq, s, part);
      }
    }
    __syncthreads();
    if (s + 2 <= s1) stage(b);
  }
  if (busy && !part) flash_out(a, it, f, o, warp, gq, tq);
}

// bf16 mode on sm_90a for head dims a multiple of 8: the four warps are one warpgroup, and each
// split's products are wgmma m64n64k16, A (q, then the weights) from registers as
// flash_bf16_kernel holds them, B (K, then V read N-major) from 128-byte-swizzled tiles. A wgmma
// element is the k16 step of mma.m16n8k16 in the same fragment layout, so the steps, weights and
// folds, and the bits, are flash_bf16_kernel's. Two blocks an SM, so no register spills. Every
// head dim stages 128 dims (zeros past head_dim): a 64-dim form failed the contract on blocks of
// more than one split, so it is not built.
constexpr size_t kFlashWgSmem =
    4 * static_cast<size_t>(kChunk) * kSplit * sizeof(uint16_t) + 2 * kSplit * sizeof(int64_t) + 1024;

__global__ void __launch_bounds__(kThreads, 2) flash_wg_kernel(Args a) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  grid_wait();
  grid_launch_next();
  using mm::kSwzRow;
  constexpr int kTile = kChunk * kSplit;  // elements of a K or V tile
  constexpr int kPanel = kSplit * kSwzRow;  // elements of 64 of its dims
  extern __shared__ __align__(16) uint16_t smem_raw[];
  // Swizzled tiles need 1024-byte alignment; the launch adds 1 KiB for it.
  const uint32_t raw = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  uint16_t* tiles = smem_raw + (1024 - raw % 1024) % 1024 / 2;  // [2 stages][K, V][2 panels][kSplit][64]
  auto* kslot = reinterpret_cast<int64_t*>(tiles + 4 * kTile);   // [2][kSplit]
  const int g = a.items[2 * blockIdx.x], c = a.items[2 * blockIdx.x + 1];
  const bool part = c >= 0;
  const Item it = item_of(a, g, c);
  const int s0 = it.s0, s1 = it.s1;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int gq = lane >> 2, tq = lane & 3, hd = a.head_dim, steps = a.hd_pad / 16;
  const auto* kpool = static_cast<const uint16_t*>(a.k);
  const auto* vpool = static_cast<const uint16_t*>(a.v);
  // A thread copies 16-byte unit u of every kstep-th key from key0 < kstep, of K and of V.
  constexpr int units = kChunk / 8, kstep = kThreads / units;
  const int u = static_cast<int>(threadIdx.x) % units, key0 = static_cast<int>(threadIdx.x) / units, d0 = 8 * u;
  auto stage = [&](int b) {
    uint16_t* kt = tiles + 2 * b * kTile + u / 8 * kPanel;
    const int64_t* sl = kslot + b * kSplit;
#pragma unroll
    for (int i = 0; i < kSplit / kstep; ++i) {
      const int key = key0 + i * kstep;
      const int64_t off = sl[key];
      const bool ok = off >= 0 && d0 < hd;
      const int at = mm::swz_at(key, 8 * (u % 8));
      cp_async16(kt + at, kpool + (ok ? off + d0 : 0), ok);
      cp_async16(kt + kTile + at, vpool + (ok ? off + d0 : 0), ok);
    }
    cp_async_commit();
  };
  FlashPairs f;
  uint32_t qa[kChunk / 16][4];
  float o[16][4];
  start_bf16(a, it, kslot, warp, gq, tq, f, qa, o);
  __syncthreads();
  stage(0);
  if (s0 < s1) stage(1);
  for (int s = s0; s <= s1; ++s) {
    const int b = (s - s0) & 1;
    const uint16_t* kt = tiles + 2 * b * kTile;
    const uint16_t* vt = kt + kTile;
    if (s < s1) cp_async_wait<1>();
    else cp_async_wait<0>();
    fence_proxy_async();  // cp.async data to wgmma
    __syncthreads();
    if (s + 2 <= s1) fill_slots<kThreads>(kslot + b * kSplit, a, it, s + 2);
    // Every warp takes part in the warpgroup's products; a warp past P holds only masked pairs.
    // The first step writes the scores, so no zeroed accumulator is set up; a full head dim runs
    // its steps with no test between the products.
    float sc[8][4];
    auto scores = [&](auto full) {
      wgmma_rs64<0, false>(reinterpret_cast<float(&)[32]>(sc), qa[0], mm::swz_desc(kt));
#pragma unroll
      for (int k = 1; k < kChunk / 16; ++k) {
        if (!decltype(full)::value && k >= steps) break;
        wgmma_rs64<0>(reinterpret_cast<float(&)[32]>(sc), qa[k], mm::swz_desc(kt + k / 4 * kPanel + 16 * (k % 4)));
      }
    };
    wgmma_fence();
    if (steps == kChunk / 16) scores(std::true_type{});
    else scores(std::false_type{});
    wgmma_commit();
    wgmma_wait<0>();
    uint32_t pa[4][4];
    const SplitJoin jn = flash_softmax<false, true, true>(a, it, f, sc, warp, gq, tq, s, part, pa);
    // 64 dims at a time: key step j of panel h starts 16 j rows into it.
#pragma unroll
    for (int h = 0; h < kChunk / 64; ++h) {
      float os[8][4];
      wgmma_fence();
      wgmma_rs64<1, false>(reinterpret_cast<float(&)[32]>(os), pa[0], mm::swz_desc(vt + h * kPanel));
#pragma unroll
      for (int j = 1; j < 4; ++j)
        wgmma_rs64<1>(reinterpret_cast<float(&)[32]>(os), pa[j], mm::swz_desc(vt + h * kPanel + 16 * j * kSwzRow));
      wgmma_commit();
      wgmma_wait<0>();
      flash_take<8>(a, it, jn, o, os, 8 * h, warp, gq, tq, s, part);
    }
    __syncthreads();
    if (s + 2 <= s1) stage(b);
  }
  if (!part) flash_out(a, it, f, o, warp, gq, tq);
#else
  __trap();  // launched only where wgmma_ready() found the sm_90a code
#endif
}

// TF_CUDA_FLASH_WG=0 keeps bf16 mode on flash_bf16_kernel, for timing and the contract's forms.
bool flash_wg_on() {
  static const bool on = !env_zero("TF_CUDA_FLASH_WG") && wgmma_ready();
  return on;
}

}  // namespace

void launch_flash(const Args& a, unsigned n_items, unsigned yblocks) {
  static std::atomic<bool> ready_f32{false}, ready_bf16{false}, ready_wg{false};
  if (a.lo) launch_attention_kernel(flash_kernel, ready_f32, kThreads, flash_smem<true>(), a, n_items, yblocks);
  else if (a.head_dim % 8 == 0 && flash_wg_on())
    launch_attention_kernel(flash_wg_kernel, ready_wg, kThreads, kFlashWgSmem, a, n_items, yblocks);
  else launch_attention_kernel(flash_bf16_kernel, ready_bf16, kThreads, flash_smem<false>(), a, n_items, yblocks);
}

}  // namespace tf::cuda::attn
