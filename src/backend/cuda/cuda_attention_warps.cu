// bf16 mode's decode form with a warp a split: the items of at most 16 (row, head) pairs that
// cuda_attention_decode.cu's eight-warp form takes, where each of a block's four warps computes a
// whole split on its own (the order rule of cuda_attention.cu, through cuda_attention.cuh's
// helpers) from K and V tiles of its own, staged by cp.async, with no block barrier inside a split.
// A whole group's splits then fold in split order through shared memory, four at a time.
#include <atomic>
#include <cstdlib>

#include "backend/cuda/cuda_attention_stage.cuh"
#include "backend/cuda/cuda_backend.h"

namespace tf::cuda::attn {

namespace {

constexpr int kWarpPairs = 16, kWarps = 4, kWarpThreads = 32 * kWarps;
constexpr int kLd = kKs16;  // staged K and V rows, bf16

// A split's products as the warp's C fragments leave them: [h, u][quarter][lane][4], element
// i = 4 quarter + e of lane (g, t) is pair g + 8h, dim 64u + 8 (i / 2) + 2t + i % 2.
constexpr int kPartFloats = 4 * 4 * 32 * 4;
static_assert(kPartFloats * 4 <= kSplit * kLd * 2, "a split's products fit in its V tile");

// q [16][kKs] f32; per warp a K and a V tile [kSplit][kLd] (the V tile then holds the split's
// products), its split's pool rows [kSplit] and (max, sum) [16][2]; the whole mode's running
// products, laid out as a split's.
constexpr size_t warps_smem() {
  return static_cast<size_t>(kWarpPairs) * kKs * sizeof(float) +
         kWarps * (2 * kSplit * kLd * sizeof(uint16_t) + kSplit * sizeof(int32_t) + 2 * kWarpPairs * sizeof(float)) +
         kPartFloats * sizeof(float);
}

// Whether pair p (its first key pf and position pp; -1 past P) has keys in split s, and where.
__device__ __forceinline__ bool split_range(int pf, int pp, int s, int& klo, int& khi) {
  const int base = s * kSplit;
  klo = max(pf, base) - base, khi = min(pp, base + kSplit - 1) - base;
  return klo <= khi;
}

// Pool rows (page times page size plus place) of keys s * kSplit.. of the item into the warp's
// sl (lanes j and j + 32; -1 outside lo..hi), then a warp barrier.
__device__ __forceinline__ void warp_slots(int32_t* sl, const Args& a, const Item& it, int s, int lane) {
  __syncwarp();
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int32_t pk = s * kSplit + lane + 32 * i;
    sl[lane + 32 * i] = pk >= it.lo && pk <= it.hi ? it.pt[pk / a.page_size] * a.page_size + pk % a.page_size : -1;
  }
  __syncwarp();
}

// The warp's copies of the rows in sl from pool (the item's kv head) into dst, 16 bytes each
// (masked keys and dims past head_dim as zeros), then a commit: lane L copies piece L % units of
// every (32 / units)-th key.
__device__ __forceinline__ void warp_stage(uint16_t* dst, const uint16_t* pool, const int32_t* sl, const Args& a,
                                           int64_t head_off, int lane) {
  const int units = a.hd_pad / 8, kstep = 32 / units, d0 = 8 * (lane % units);
  const int key0 = lane < kstep * units ? lane / units : kSplit;
  for (int key = key0; key < kSplit; key += kstep) {
    const int32_t r = sl[key];
    const bool ok = r >= 0 && d0 < a.head_dim;
    cp_async16(dst + key * kLd + d0, pool + (ok ? static_cast<int64_t>(r) * a.kv_width + head_off + d0 : 0), ok);
  }
  cp_async_commit();
}

// Split s's scores from the warp's K tile ks, as the rule orders them: key tile n's chain runs
// over the k16 steps in order, its B words by ldmatrix (two steps at once).
__device__ __forceinline__ void warp_scores(const uint32_t (&qa)[kChunk / 16][4], const uint16_t* ks, int hdp, int lane,
                                            float (&sw)[8][4]) {
#pragma unroll
  for (int n = 0; n < 8; ++n) sw[n][0] = sw[n][1] = sw[n][2] = sw[n][3] = 0.0f;
  const uint16_t* kr = ks + (lane & 7) * kLd + 8 * (lane >> 3);
#pragma unroll
  for (int k2 = 0; k2 < kChunk / 32; ++k2) {
    if (32 * k2 >= hdp) break;
    const bool two = 32 * k2 + 16 < hdp;
#pragma unroll
    for (int n = 0; n < 8; ++n) {
      uint32_t b[4];
      ldsm4(b, kr + 8 * n * kLd + 32 * k2);
      mma_k16(sw[n], qa[2 * k2], b[0], b[1]);
      if (two) mma_k16(sw[n], qa[2 * k2 + 1], b[2], b[3]);
    }
  }
}

// Split s's weights pw (split_softmax's packed pairs, h = 0, 1) times the warp's V tile vs for
// dim tiles 8u.. 8u + 7, by ldmatrix.trans, each tile's chain over the key steps in order.
__device__ __forceinline__ void warp_pv(const uint32_t (&pw)[2][8], const uint16_t* vs, int u, int lane,
                                        float (&os)[8][4]) {
#pragma unroll
  for (int e = 0; e < 8; ++e) os[e][0] = os[e][1] = os[e][2] = os[e][3] = 0.0f;
  const int mi = lane >> 3, mr = lane & 7;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const uint32_t pa[4] = {pw[0][2 * j], pw[1][2 * j], pw[0][2 * j + 1], pw[1][2 * j + 1]};
#pragma unroll
    for (int e = 0; e < 8; e += 2) {
      uint32_t vf[4];
      ldsm4_t(vf, vs + (16 * j + 8 * (mi & 1) + mr) * kLd + 8 * (8 * u + e) + 8 * (mi >> 1));
      mma_k16(os[e], pa, vf[0], vf[1]);
      mma_k16(os[e + 1], pa, vf[2], vf[3]);
    }
  }
}

__global__ void __launch_bounds__(kWarpThreads, 1) flash_decode_warps_kernel(Args a) {
  extern __shared__ float4 sh4[];
  float* qs = reinterpret_cast<float*>(sh4);                                     // [16][kKs]
  auto* tiles = reinterpret_cast<uint16_t*>(qs + kWarpPairs * kKs);              // [warp][K, V][kSplit][kLd]
  auto* rows = reinterpret_cast<int32_t*>(tiles + kWarps * 2 * kSplit * kLd);    // [warp][kSplit]
  float* mls = reinterpret_cast<float*>(rows + kWarps * kSplit);                 // [warp][16][2]
  auto* run = reinterpret_cast<float4*>(mls + kWarps * 2 * kWarpPairs);          // [kPartFloats / 4]
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane >> 2, t = lane & 3;
  const Item it = item_of(a, a.items[2 * blockIdx.x], a.items[2 * blockIdx.x + 1]);
  const bool whole = a.items[2 * blockIdx.x + 1] < 0;
  const int hd = a.head_dim, hdp = a.hd_pad;
  // The key range of pairs g and g + 8 (as the split's lanes hold them).
  int pf[2], pp[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int p = g + 8 * h, row = it.r0 + (p < it.P ? p / a.hpb : 0);
    pf[h] = a.row_first[row], pp[h] = p < it.P ? a.row_pos[row] : -1;
  }
  uint16_t* ks = tiles + warp * 2 * kSplit * kLd;
  uint16_t* vs = ks + kSplit * kLd;
  int32_t* sl = rows + warp * kSplit;
  float* wml = mls + warp * 2 * kWarpPairs;
  const auto* kpool = static_cast<const uint16_t*>(a.k);
  const auto* vpool = static_cast<const uint16_t*>(a.v);
  grid_wait();
  grid_launch_next();
  // Each warp's first split loads while q is staged.
  if (it.s0 + warp <= it.s1) {
    warp_slots(sl, a, it, it.s0 + warp, lane);
    warp_stage(ks, kpool, sl, a, it.head_off, lane);
    warp_stage(vs, vpool, sl, a, it.head_off, lane);
  }
  stage_q<kWarpThreads, false>(qs, kKs, a, it.r0, it.h0, it.P, kWarpPairs);
  __syncthreads();
  uint32_t qa[kChunk / 16][4];
#pragma unroll
  for (int k = 0; k < kChunk / 16; ++k)
    if (16 * k < hdp) load_a16(qs + 16 * k, kKs, lane, qa[k]);
  // Whole mode: warp f folds pair g + 8 (f / 2)'s dims of u = f % 2 over the splits in order, with
  // the eight-warp form's operations; its running products wait in run between rounds.
  const int fh = warp / 2, fu = warp % 2, fp = g + 8 * fh;
  float4* racc = run + warp * 4 * 32 + lane;
  float m = -INFINITY, l = 0.0f;
  bool started = false;
  for (int base = it.s0; base <= it.s1; base += kWarps) {
    const int s = base + warp, next = s + kWarps;
    if (s <= it.s1) {
      // Pending: this split's K, then V.
      cp_async_wait<1>();
      __syncwarp();
      float sw[8][4];
      warp_scores(qa, ks, hdp, lane, sw);
      __syncwarp();
      // The K tile is free: the warp's next split's keys load during this split's work.
      if (next <= it.s1) {
        warp_slots(sl, a, it, next, lane);
        warp_stage(ks, kpool, sl, a, it.head_off, lane);
      }
      uint32_t pw[2][8];
      bool on[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        int klo, khi;
        on[h] = split_range(pf[h], pp[h], s, klo, khi);
        float x[8][2];
#pragma unroll
        for (int n = 0; n < 8; ++n) x[n][0] = sw[n][2 * h], x[n][1] = sw[n][2 * h + 1];
        float mx, lsum;
        split_softmax<false, true, true>(x, t, klo, khi, a.scale, a.softcap, mx, lsum, pw[h]);
        if (on[h] && t == 0) {
          if (whole) {
            *reinterpret_cast<float2*>(wml + 2 * (g + 8 * h)) = make_float2(mx, lsum);
          } else {
            const int p = g + 8 * h;
            const int64_t slot = part_slot(a, it.r0 + p / a.hpb, it.h0 + p % a.hpb, s);
            a.part_ml[2 * slot] = mx, a.part_ml[2 * slot + 1] = lsum;
          }
        }
      }
      if (next <= it.s1) cp_async_wait<1>();
      else cp_async_wait<0>();
      __syncwarp();
      float os[2][8][4];
#pragma unroll
      for (int u = 0; u < 2; ++u)
        if (64 * u < hdp) warp_pv(pw, vs, u, lane, os[u]);
      __syncwarp();
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        if (64 * u >= hdp) break;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          if (!on[h]) continue;
          if (whole) {
            // Into the V tile, which the products no longer read.
            float4* dst = reinterpret_cast<float4*>(vs) + (2 * h + u) * 4 * 32 + lane;
#pragma unroll
            for (int q = 0; q < 4; ++q)
              dst[32 * q] = make_float4(os[u][2 * q][2 * h], os[u][2 * q][2 * h + 1], os[u][2 * q + 1][2 * h],
                                        os[u][2 * q + 1][2 * h + 1]);
          } else {
            const int p = g + 8 * h;
            float* dst = a.part_acc + part_slot(a, it.r0 + p / a.hpb, it.h0 + p % a.hpb, s) * hd;
#pragma unroll
            for (int e = 0; e < 8; ++e) {
              const int dd = 64 * u + 8 * e + 2 * t;
              if (dd < hd) dst[dd] = os[u][e][2 * h];
              if (dd + 1 < hd) dst[dd + 1] = os[u][e][2 * h + 1];
            }
          }
        }
      }
    }
    if (whole) {
      __syncthreads();
      float acc[16];
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const float4 v = started ? racc[32 * q] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        acc[4 * q] = v.x, acc[4 * q + 1] = v.y, acc[4 * q + 2] = v.z, acc[4 * q + 3] = v.w;
      }
      for (int w = 0; w < kWarps && base + w <= it.s1; ++w) {
        int klo, khi;
        if (!split_range(pf[fh], pp[fh], base + w, klo, khi)) continue;
        const float2 ms = *reinterpret_cast<const float2*>(mls + w * 2 * kWarpPairs + 2 * fp);
        const float4* src = reinterpret_cast<const float4*>(tiles + (w * 2 + 1) * kSplit * kLd) + warp * 4 * 32 + lane;
        float fa = 0.0f, fb = 0.0f;
        if (started) {
          const float mn = fmaxf(m, ms.x);
          fa = attn_exp(__fsub_rn(m, mn)), fb = attn_exp(__fsub_rn(ms.x, mn));
          l = fold(l, fa, ms.y, fb), m = mn;
        } else {
          m = ms.x, l = ms.y;
        }
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const float4 v = src[32 * q];
          const float vv[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[4 * q + e] = started ? fold(acc[4 * q + e], fa, vv[e], fb) : vv[e];
        }
        started = true;
      }
#pragma unroll
      for (int q = 0; q < 4; ++q) racc[32 * q] = make_float4(acc[4 * q], acc[4 * q + 1], acc[4 * q + 2], acc[4 * q + 3]);
      __syncthreads();
    }
    // The V tile is free again: the next split's values load.
    if (next <= it.s1) warp_stage(vs, vpool, sl, a, it.head_off, lane);
  }
  if (!whole || fp >= it.P) return;
  float* orow = a.out + static_cast<int64_t>(it.r0 + fp / a.hpb) * a.ldq + static_cast<int64_t>(it.h0 + fp % a.hpb) * hd;
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const float4 v = racc[32 * q];
    const float vv[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int i = 4 * q + e, dd = 64 * fu + 8 * (i / 2) + 2 * t + i % 2;
      if (dd < hd) orow[dd] = __fadd_rn(__fdiv_rn(vv[e], l), 0.0f);
    }
  }
}

}  // namespace

bool warps_decode_takes(const Args& a) {
  static const bool on = [] {
    const char* e = std::getenv("TF_CUDA_ATTN_WARPS");
    return e && e[0] == '1' && e[1] == 0;
  }();
  return on && !a.lo && a.head_dim % 8 == 0;
}

void launch_flash_decode_warps(const Args& a, unsigned n_items, unsigned yblocks, bool overlap) {
  static std::atomic<bool> ready{false};
  launch_attention_kernel(flash_decode_warps_kernel, ready, kWarpThreads, warps_smem(), a, n_items, yblocks, overlap);
}

}  // namespace tf::cuda::attn
