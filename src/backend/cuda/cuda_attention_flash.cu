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

// Pair h's split range, split-relative: keys klo..khi of split s are its (none when klo > khi).
__device__ __forceinline__ void pair_keys(const FlashPairs& f, int h, int s, int& klo, int& khi) {
  const int base = s * kSplit;
  klo = max(f.pfirst[h], base) - base, khi = min(f.ppos[h], base + kSplit - 1) - base;
}

// Pair h (row gq + 8h of the warp's m tile) joins split s's (max, sum): written as a partial
// (part; by the quad's first lane where ml), or taken as its first split's, or folded into f.
__device__ __forceinline__ void flash_join(const Args& a, const Item& it, FlashPairs& f, SplitJoin& j, int h,
                                           int warp, int gq, int tq, int s, bool part, float mx, float lsum,
                                           bool ml = true) {
  if (part) {
    const int p = 16 * warp + gq + 8 * h;
    if (ml && tq == 0) {
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

// Split s's softmax of the warp's scores sc (8 key tiles' C fragments), in place: the weights,
// and each pair's (max, sum) written as a partial (part) or folded into f; kSkip as split_softmax's;
// kPack: pa also gets the weights as the V products' A fragments, as pack_weights lays them out.
template <bool kLo, bool kSkip = false, bool kPack = false>
__device__ __forceinline__ SplitJoin flash_softmax(const Args& a, const Item& it, FlashPairs& f, float (&sc)[8][4],
                                                   int warp, int gq, int tq, int s, bool part,
                                                   uint32_t (*pa)[4] = nullptr) {
  SplitJoin j;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    int klo, khi;
    pair_keys(f, h, s, klo, khi);
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
    flash_join(a, it, f, j, h, warp, gq, tq, s, part, mx, lsum);
  }
  return j;
}

// Dim tiles d0..d0 + N - 1 of split s's products os into the partials (part) or the running sums
// o, tiles t0..t0 + N - 1 of them.
template <int N, int NO>
__device__ __forceinline__ void flash_take(const Args& a, const Item& it, const SplitJoin& j, float (&o)[NO][4],
                                           const float (&os)[N][4], int t0, int d0, int warp, int gq, int tq, int s,
                                           bool part) {
  if (part) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (j.mode[h] == 0) continue;
      const int p = 16 * warp + gq + 8 * h;
      float* dst = a.part_acc + part_slot(a, it.r0 + p / a.hpb, it.h0 + p % a.hpb, s) * a.head_dim;
#pragma unroll
      for (int t = 0; t < N; ++t) {
        const int d = 8 * (d0 + t) + 2 * tq;
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

// A whole-mode warp's output rows, dim tiles d0..d0 + NO - 1 of them: out = o / l + 0.
template <int NO>
__device__ __forceinline__ void flash_out(const Args& a, const Item& it, const FlashPairs& f, const float (&o)[NO][4],
                                          int d0, int warp, int gq, int tq) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int p = 16 * warp + gq + 8 * h;
    if (p >= it.P) continue;
    float* orow = a.out + static_cast<int64_t>(it.r0 + p / a.hpb) * a.ldq +
                  static_cast<int64_t>(it.h0 + p % a.hpb) * a.head_dim;
#pragma unroll
    for (int t = 0; t < NO; ++t) {
      const int d = 8 * (d0 + t) + 2 * tq;
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

// The wgmma flash kernels' K and V tiles: 64 keys of kChunk dims, in two 64-dim swizzled panels.
constexpr int kTile = kChunk * kSplit;        // elements of a K or V tile
constexpr int kPanel = kSplit * mm::kSwzRow;  // elements of 64 of its dims

// Stage b of a wgmma flash kernel's tiles ([2 stages][K, V][2 panels][kSplit][64], swizzled) gets
// the keys whose pool offsets are in slot b, by T threads: each copies 16-byte unit u of every
// (T / 16)-th key, of K and of V, then commits. Keys kstep apart share a swizzle phase, so one
// place and its multiples of a row serve every copy.
template <int T>
__device__ __forceinline__ void stage_wg(uint16_t* tiles, const int64_t* kslot, int b, const Args& a, int hd) {
  using mm::kSwzRow;
  constexpr int units = kChunk / 8, kstep = T / units;
  static_assert(kstep % 8 == 0, "keys a thread copies share the swizzle phase");
  const int u = static_cast<int>(threadIdx.x) % units, key0 = static_cast<int>(threadIdx.x) / units, d0 = 8 * u;
  const uint32_t kt = static_cast<uint32_t>(__cvta_generic_to_shared(tiles)) +
                      2 * (2 * b * kTile + u / 8 * kSplit * kSwzRow + mm::swz_at(key0, 8 * (u % 8)));
  const int64_t* sl = kslot + b * kSplit + key0;
  const auto* kpool = static_cast<const uint16_t*>(a.k);
  const auto* vpool = static_cast<const uint16_t*>(a.v);
#pragma unroll
  for (int i = 0; i < kSplit / kstep; ++i) {
    const int64_t off = sl[i * kstep];
    const bool ok = off >= 0 && d0 < hd;
    const uint32_t at = kt + 2 * i * kstep * kSwzRow;
    cp_async16_at(at, kpool + (ok ? off + d0 : 0), ok);
    cp_async16_at(at + 2 * kTile, vpool + (ok ? off + d0 : 0), ok);
  }
  cp_async_commit();
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
  auto stage = [&](int b) { stage_wg<kThreads>(tiles, kslot, b, a, hd); };
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
      flash_take<8>(a, it, jn, o, os, 8 * h, 8 * h, warp, gq, tq, s, part);
    }
    __syncthreads();
    if (s + 2 <= s1) stage(b);
  }
  if (!part) flash_out(a, it, f, o, 0, warp, gq, tq);
#else
  __trap();  // launched only where wgmma_ready() found the sm_90a code
#endif
}

// bf16 mode on sm_90a, two warpgroups a block over the same 64 pairs, so an SM holds twice the
// warps of flash_wg_kernel at half the registers: warpgroup w takes keys 32w.. of each split's
// scores (m64n32k16, q and K from swizzled tiles) and dims 64w.. of its V products (m64n64k16, the
// weights from registers). The split's max and the rule's running sum in key order pass through
// shared memory (warpgroup 0's sum over keys 0..31 is where warpgroup 1's starts), and so do the
// weights' A fragments; every float operation is flash_wg_kernel's, so the bits are the same.
constexpr int kWg2Threads = 256;
constexpr int kXch = 128;  // exchange slots: one a thread of a warpgroup
constexpr size_t kFlashWg2Smem = kFlashWgSmem + static_cast<size_t>(kChunk) * kFlashPairs * sizeof(uint16_t) +
                                 (2 * 8 + 2 * 2 + 2) * kXch * sizeof(uint32_t);  // q, then xp, xm and xs

// q's pairs as one swizzled K-major tile of kChunk dims (two 64-dim panels), rounded as load_q16
// rounds; pairs past P and dims past head_dim (a multiple of 8 here) are 0. By T threads.
template <int T>
__device__ __forceinline__ void stage_q16(uint16_t* qt, const Args& a, const Item& it) {
  using mm::kSwzRow;
  constexpr int units = kChunk / 8;
  for (int i = threadIdx.x; i < kFlashPairs * units; i += T) {
    const int p = i / units, u = i % units, d = 8 * u;
    uint32_t w[4] = {0u, 0u, 0u, 0u};
    if (p < it.P && d < a.head_dim) {
      const float* qr = a.q + static_cast<int64_t>(it.r0 + p / a.hpb) * a.ldq +
                        static_cast<int64_t>(it.h0 + p % a.hpb) * a.head_dim + d;
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float2 x = *reinterpret_cast<const float2*>(qr + 2 * e);
        w[e] = pack_bf16(product_input<false>(x.x), product_input<false>(x.y));
      }
    }
    *reinterpret_cast<uint4*>(qt + u / 8 * kFlashPairs * kSwzRow + mm::swz_at(p, 8 * (u % 8))) =
        make_uint4(w[0], w[1], w[2], w[3]);
  }
}

__global__ void __launch_bounds__(kWg2Threads, 2) flash_wg2_kernel(Args a) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  grid_wait();
  grid_launch_next();
  using mm::kSwzRow;
  static_assert(kFlashPairs == kSplit, "q's panels are the size of K's");
  extern __shared__ __align__(16) uint16_t smem_raw[];
  const uint32_t raw = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  uint16_t* tiles = smem_raw + (1024 - raw % 1024) % 1024 / 2;  // [2 stages][K, V][2 panels][kSplit][64]
  uint16_t* qt = tiles + 4 * kTile;                             // [2 panels][64 pairs][64]
  auto* xp = reinterpret_cast<uint32_t*>(qt + kTile);           // [warpgroup][8 words][kXch]
  auto* xm = reinterpret_cast<float*>(xp + 2 * 8 * kXch);       // [warpgroup][pair h][kXch]
  float* xs = xm + 2 * 2 * kXch;                                // [pair h][kXch]
  auto* kslot = reinterpret_cast<int64_t*>(xs + 2 * kXch);      // [2][kSplit]
  const int g = a.items[2 * blockIdx.x], c = a.items[2 * blockIdx.x + 1];
  const bool part = c >= 0;
  const Item it = item_of(a, g, c);
  const int s0 = it.s0, s1 = it.s1;
  const int wg = threadIdx.x / 128, t = threadIdx.x % 128, warp = t / 32, lane = t % 32;
  const int gq = lane >> 2, tq = lane & 3, hd = a.head_dim, steps = a.hd_pad / 16;
  auto stage = [&](int b) { stage_wg<kWg2Threads>(tiles, kslot, b, a, hd); };
  fill_slots<kWg2Threads>(kslot, a, it, s0);
  if (s0 < s1) fill_slots<kWg2Threads>(kslot + kSplit, a, it, s0 + 1);
  FlashPairs f = flash_pairs(a, it, warp, gq);
  stage_q16<kWg2Threads>(qt, a, it);
  float o[8][4];
#pragma unroll
  for (int j = 0; j < 8; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
  // One descriptor, built once: every tile's is it plus its offset in elements / 8.
  const uint64_t td = mm::swz_desc(tiles), qd = mm::desc_add(td, 4 * kTile);
  __syncthreads();
  stage(0);
  for (int s = s0; s <= s1; ++s) {
    const int b = (s - s0) & 1;
    cp_async_wait<0>();
    fence_proxy_async();  // cp.async and q's stores to wgmma
    __syncthreads();
    float sc[4][4];
    const uint64_t kd = mm::desc_add(td, 2 * b * kTile + 32 * wg * kSwzRow),
                   vd = mm::desc_add(td, 2 * b * kTile + kTile + wg * kPanel);
    auto scores = [&](auto full) {
      wgmma_ss32<false>(reinterpret_cast<float(&)[16]>(sc), qd, kd);
#pragma unroll
      for (int k = 1; k < kChunk / 16; ++k) {
        if (!decltype(full)::value && k >= steps) break;
        const int at = k / 4 * kPanel + 16 * (k % 4);
        wgmma_ss32(reinterpret_cast<float(&)[16]>(sc), mm::desc_add(qd, at), mm::desc_add(kd, at));
      }
    };
    wgmma_fence();
    if (steps == kChunk / 16) scores(std::true_type{});
    else scores(std::false_type{});
    wgmma_commit();
    // While the scores run: every warp is past split s - 1, so its stage takes split s + 1 and its
    // slots split s + 2.
    if (s < s1) stage(b ^ 1);
    if (s + 2 <= s1) fill_slots<kWg2Threads>(kslot + b * kSplit, a, it, s + 2);
    wgmma_wait<0>();
    // The split's max: this warpgroup's keys, then the other's.
    float x[2][4][2], mx[2];
    int klo[2], khi[2];
    bool whole[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      pair_keys(f, h, s, klo[h], khi[h]);
      whole[h] = klo[h] <= 0 && khi[h] >= kSplit - 1;
#pragma unroll
      for (int n = 0; n < 4; ++n) x[h][n][0] = sc[n][2 * h], x[h][n][1] = sc[n][2 * h + 1];
      mx[h] = split_max(x[h], 32 * wg, tq, klo[h], khi[h], a.scale, a.softcap, whole[h]);
      xm[(2 * wg + h) * kXch + t] = mx[h];
    }
    __syncthreads();
    // The weights; warpgroup 0's running sums out, and each warpgroup's A fragments (key steps
    // 2w, 2w + 1), read back whole so that no register picks between them.
    float pair[2][4];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      mx[h] = fmaxf(mx[h], xm[(2 * (wg ^ 1) + h) * kXch + t]);
      uint32_t pw[4];
      split_exp<false, true>(x[h], mx[h], whole[h], pair[h], pw);
#pragma unroll
      for (int n = 0; n < 4; ++n) xp[(8 * wg + 4 * (n / 2) + 2 * (n % 2) + h) * kXch + t] = pw[n];
      if (wg == 0) xs[h * kXch + t] = split_chain(pair[h]);
    }
    __syncthreads();
    uint32_t pa[4][4];
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) pa[j][e] = xp[(4 * j + e) * kXch + t];
    // Warpgroup 1 ends the sums (every lane, for the quad's shuffles), and writes the partials' (max, sum).
    float lsum[2] = {0.0f, 0.0f};
    if (wg == 1) {
#pragma unroll
      for (int h = 0; h < 2; ++h) lsum[h] = quad_sum(split_chain(pair[h], &xs[h * kXch + t]));
    }
    SplitJoin jn;
#pragma unroll
    for (int h = 0; h < 2; ++h)
      if (klo[h] <= khi[h]) flash_join(a, it, f, jn, h, warp, gq, tq, s, part, mx[h], lsum[h], wg == 1);
    float os[8][4];
    wgmma_fence();
    wgmma_rs64<1, false>(reinterpret_cast<float(&)[32]>(os), pa[0], vd);
#pragma unroll
    for (int j = 1; j < 4; ++j)
      wgmma_rs64<1>(reinterpret_cast<float(&)[32]>(os), pa[j], mm::desc_add(vd, 16 * j * kSwzRow));
    wgmma_commit();
    wgmma_wait<0>();
    flash_take<8>(a, it, jn, o, os, 0, 8 * wg, warp, gq, tq, s, part);
  }
  if (!part) {
    // Warpgroup 1 holds each pair's sum.
    if (wg == 1) xs[t] = f.l[0], xs[kXch + t] = f.l[1];
    __syncthreads();
    if (wg == 0) f.l[0] = xs[t], f.l[1] = xs[kXch + t];
    flash_out(a, it, f, o, 8 * wg, warp, gq, tq);
  }
#else
  __trap();  // launched only where wgmma_ready() found the sm_90a code
#endif
}

// TF_CUDA_FLASH_WG=0 keeps bf16 mode on flash_bf16_kernel, for timing and the contract's forms.
bool flash_wg_on() {
  static const bool on = !env_zero("TF_CUDA_FLASH_WG") && wgmma_ready();
  return on;
}

// TF_CUDA_FLASH_WG2=0 keeps the wgmma form on one warpgroup a block (flash_wg_kernel), for timing.
bool flash_wg2_on() {
  static const bool on = !env_zero("TF_CUDA_FLASH_WG2");
  return on;
}

}  // namespace

void launch_flash(const Args& a, unsigned n_items, unsigned yblocks) {
  static std::atomic<bool> ready_f32{false}, ready_bf16{false}, ready_wg{false}, ready_wg2{false};
  if (a.lo) launch_attention_kernel(flash_kernel, ready_f32, kThreads, flash_smem<true>(), a, n_items, yblocks);
  else if (a.head_dim % 8 == 0 && flash_wg_on() && flash_wg2_on())
    launch_attention_kernel(flash_wg2_kernel, ready_wg2, kWg2Threads, kFlashWg2Smem, a, n_items, yblocks);
  else if (a.head_dim % 8 == 0 && flash_wg_on())
    launch_attention_kernel(flash_wg_kernel, ready_wg, kThreads, kFlashWgSmem, a, n_items, yblocks);
  else launch_attention_kernel(flash_bf16_kernel, ready_bf16, kThreads, flash_smem<false>(), a, n_items, yblocks);
}

}  // namespace tf::cuda::attn
