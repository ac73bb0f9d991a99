// Matmul y = x * w^T (+ bias). BF16, F16 and Q8_0 weights run on bf16 tensor cores
// (mma.sync m16n8k16, f32 accumulate); F32 weights run an exact-f32 warp dot.
//
// Order rule: K is cut into S slices of ks (a multiple of 256) chosen from K and N alone
// (split_for), never from M. Within a slice each output element (r, n) is one chain over the
// k32 chunks that start inside the slice, in increasing k from +0. A chunk is two m16n8k16 steps
// over a fixed interleave: step s takes k = 8 t + 4 s + {0, 1} into mma slots 2 t + {0, 1} and
// k = 8 t + 4 s + {2, 3} into slots 8 + 2 t + {0, 1} (t = 0..3), so one thread's operands of a
// chunk are 8 consecutive k (one 16-byte weight load). BF16/F16: x is split as hi = bf16(x),
// lo = bf16(x - hi); a step is mma(hi, w) then mma(lo, w), and for F16 weights (split exactly as
// whi = bf16(w), wlo = w - whi) mma(hi, whi), mma(lo, whi), mma(hi, wlo). Q8_0: x rounded to bf16,
// int8 values exact; a chunk (one block of 32) sums from zero in its two steps, then
// acc = fma(scale, block_sum, acc). The slices' sums are added in slice order (p0 + p1, + p2,
// ...), then the bias. Few rows: one block per (32 columns, slice) and the last block of a tile
// to arrive adds the partials; many rows: one block walks every slice of its tile and folds each
// slice's chain into the total as it ends. Rows past M are zero padding; padded k adds zeros.
#include <algorithm>
#include <cstdint>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_util.cuh"

namespace tf::cuda {

namespace {

enum WType { kBF16 = 0, kF16 = 1, kQ8 = 2 };

__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint16_t bf16_bits(float f) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(f));
}

__device__ __forceinline__ float bf16_float(uint16_t h) {
  return __bfloat162float(__ushort_as_bfloat16(h));
}

// Low part of x after its bf16 high part; zero when the high part is not finite (inf - inf).
__device__ __forceinline__ uint16_t lo_bits(float x, uint16_t hi) {
  const float h = bf16_float(hi);
  return isfinite(h) ? bf16_bits(__fsub_rn(x, h)) : static_cast<uint16_t>(0);
}

// Shared-memory bytes of one instantiation: A hi (+ lo), B (+ F16 lo), Q8 scales, and for a
// block that folds slices the running totals.
template <int BM, int BN, int BK, int WT, bool kGrid>
constexpr int smem_bytes() {
  return ((WT == kQ8 ? 1 : 2) * BM + (WT == kF16 ? 2 : 1) * BN) * (BK + 8) * 2 +
         BN * (BK / 32) * 4 + (kGrid ? 0 : BM * BN * 4);
}

constexpr int64_t kSliceUnit = 256;   // slice lengths are multiples of this (and of every BK)
constexpr int64_t kTargetBlocks = 4 * 132;  // few-row launches aim at 4 blocks per H200 SM
constexpr int kSkinnyWarps = 4, kSkinnyBN = 8 * kSkinnyWarps, kSkinnyUnroll = 8;
static_assert(kSliceUnit % (32 * kSkinnyUnroll) == 0, "a skinny step never crosses a slice");

struct SplitArgs {
  int64_t ks;  // slice length
  int s;       // slice count
  float* part;  // [s][M][N] partial sums (s > 1 and one block per slice)
  unsigned* counters;
};

// The K split, a function of K and N only, so a row's chains never depend on the batch.
SplitArgs split_for(int64_t K, int64_t N) {
  const int64_t tiles = (N + kSkinnyBN - 1) / kSkinnyBN;
  const int64_t want = std::min<int64_t>(64, (kTargetBlocks + tiles - 1) / tiles);
  int64_t ks = ((K + want - 1) / want + kSliceUnit - 1) / kSliceUnit * kSliceUnit;
  if (ks >= K) return {K, 1, nullptr, nullptr};
  return {ks, static_cast<int>((K + ks - 1) / ks), nullptr, nullptr};
}

// Up to kMaxMulti matmuls of one x in one launch: column tiles of output i follow those of i - 1.
constexpr int kMaxMulti = 4;
struct MultiOut {
  const void* w;
  const float* scales;
  const float* bias;
  float* y;
  int64_t N;
  int tiles;
  SplitArgs sp;
};
struct MultiArgs {
  MultiOut o[kMaxMulti];
  int n = 0;
};

__device__ __forceinline__ uint32_t pack2(uint16_t lo_half, uint16_t hi_half) {
  return static_cast<uint32_t>(lo_half) | (static_cast<uint32_t>(hi_half) << 16);
}

// After a block stored its partials: true in the block that arrived last at its tile, which
// then resets the counter for the next launch.
__device__ __forceinline__ bool arrive_last(unsigned* counter, int slices) {
  __shared__ unsigned ticket;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) ticket = atomicAdd(counter, 1u);
  __syncthreads();
  const bool last = ticket == static_cast<unsigned>(slices - 1);
  if (last) {
    __threadfence();
    if (threadIdx.x == 0) *counter = 0;
  }
  return last;
}

// Sums the slices' partials of rows [m0, m0 + rows) x columns [n0, n0 + cols) in slice order.
// Partials are [s][P][N] with P = M, or with rowmap the row p of row r is rowmap[r] (of P).
__device__ __forceinline__ void reduce_slices(const SplitArgs& sp, int64_t M, int64_t N,
                                              int64_t m0, int rows, int64_t n0, int cols,
                                              const float* __restrict__ bias, float* __restrict__ y,
                                              const int32_t* rowmap = nullptr, int64_t P = 0) {
  if (!rowmap) P = M;
  for (int i = threadIdx.x; i < rows * cols; i += blockDim.x) {
    const int64_t r = m0 + i / cols, c = n0 + i % cols;
    if (r >= M || c >= N) continue;
    const int64_t pr = rowmap ? rowmap[r] : r;
    float t = __ldcg(sp.part + pr * N + c);
    for (int s = 1; s < sp.s; ++s) t = __fadd_rn(t, __ldcg(sp.part + (s * P + pr) * N + c));
    y[pr * N + c] = bias ? __fadd_rn(t, bias[c]) : t;
  }
}

// One block computes a BM x BN tile of y, walking K in tiles of BK (a multiple of 32 dividing
// kSliceUnit). kGrid: blockIdx.z is the slice and partials meet in sp.part; otherwise the
// block walks every slice and folds each slice's chain into its total.
template <int BM, int BN, int BK, int WM, int WN, int WT, bool kGrid>
__global__ void __launch_bounds__(WM * WN * 32)
    mma_matmul(const float* __restrict__ x, int64_t M, int64_t K, const void* __restrict__ w,
               const float* __restrict__ wscale, const float* __restrict__ bias,
               float* __restrict__ y, int64_t N, bool vec_x, bool vec_w, SplitArgs sp) {
  constexpr int kThreads = WM * WN * 32, LDS = BK + 8;
  constexpr int TM = BM / WM / 16, TN = BN / WN / 8;
  constexpr bool kSplitX = WT != kQ8, kSplitW = WT == kF16;
  static_assert(kSliceUnit % BK == 0 && BK % 32 == 0, "a tile never crosses a slice");
  extern __shared__ __align__(16) uint16_t smem[];
  uint16_t* As = smem;                                  // [BM][LDS] bf16 bits of x (hi)
  uint16_t* Al = As + BM * LDS;                         // [BM][LDS] lo bits (split only)
  uint16_t* Bs = Al + (kSplitX ? BM * LDS : 0);         // [BN][LDS] bf16 bits of w (hi)
  uint16_t* Bl = Bs + BN * LDS;                         // [BN][LDS] F16 lo bits
  float* Ds = reinterpret_cast<float*>(Bl + (kSplitW ? BN * LDS : 0));  // [BN][BK / 32] Q8 scales
  float* Ts = Ds + BN * (BK / 32);  // folded totals, [element][thread] (not kGrid)
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, t4 = lane % 4;
  const int wm = warp / WN, wn = warp % WN;
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * BM, n0 = static_cast<int64_t>(blockIdx.x) * BN;
  float acc[TM][TN][4];
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < TN; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;
  bool have_tot = false;
  int64_t kbeg = 0, kend = K;
  if (kGrid) {
    kbeg = static_cast<int64_t>(blockIdx.z) * sp.ks;
    kend = kbeg + sp.ks < K ? kbeg + sp.ks : K;
  }

  // Rows past M stay zero for the whole K loop, so only the rows < M are loaded per tile.
  const int rv = static_cast<int>(M - m0 < BM ? M - m0 : BM);
  for (int i = tid; i < (kSplitX ? 2 : 1) * BM * LDS; i += kThreads) As[i] = 0;
  for (int64_t k0 = kbeg; k0 < kend; k0 += BK) {
    // A tile: f32 rows of x as bf16 hi (and lo when split); k past K is zero.
    if (vec_x) {
      for (int i = tid; i < rv * BK / 4; i += kThreads) {
        const int r = i / (BK / 4), c = (i % (BK / 4)) * 4;
        const int64_t gr = m0 + r, gk = k0 + c;
        float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
        if (gr < M && gk < K) v = *reinterpret_cast<const float4*>(x + gr * K + gk);
        uint16_t* d = As + r * LDS + c;
        d[0] = bf16_bits(v.x), d[1] = bf16_bits(v.y), d[2] = bf16_bits(v.z), d[3] = bf16_bits(v.w);
        if (kSplitX) {
          uint16_t* l = Al + r * LDS + c;
          l[0] = lo_bits(v.x, d[0]), l[1] = lo_bits(v.y, d[1]);
          l[2] = lo_bits(v.z, d[2]), l[3] = lo_bits(v.w, d[3]);
        }
      }
    } else {
      for (int i = tid; i < rv * BK; i += kThreads) {
        const int r = i / BK, c = i % BK;
        const int64_t gr = m0 + r, gk = k0 + c;
        const float v = gr < M && gk < K ? x[gr * K + gk] : 0.0f;
        const uint16_t h = bf16_bits(v);
        As[r * LDS + c] = h;
        if (kSplitX) Al[r * LDS + c] = lo_bits(v, h);
      }
    }
    // B tile: weight rows n0.. as bf16 bits.
    if (WT == kQ8) {
      // All loads of the tile are issued before any is converted, to keep many in flight.
      constexpr int NV = BN * BK / 16 / kThreads;
      static_assert(NV * kThreads * 16 == BN * BK, "tile must split evenly over threads");
      const int8_t* wq = static_cast<const int8_t*>(w);
      int4 regs[NV];
#pragma unroll
      for (int u = 0; u < NV; ++u) {
        const int i = tid + u * kThreads;
        const int r = i / (BK / 16), c = (i % (BK / 16)) * 16;
        const int64_t gn = n0 + r, gk = k0 + c;
        regs[u] = make_int4(0, 0, 0, 0);
        if (gn < N && gk < K) regs[u] = *reinterpret_cast<const int4*>(wq + gn * K + gk);
      }
#pragma unroll
      for (int u = 0; u < NV; ++u) {
        const int i = tid + u * kThreads;
        const int r = i / (BK / 16), c = (i % (BK / 16)) * 16;
        uint16_t* d = Bs + r * LDS + c;
        const int words[4] = {regs[u].x, regs[u].y, regs[u].z, regs[u].w};
#pragma unroll
        for (int e = 0; e < 16; ++e)
          d[e] = bf16_bits(static_cast<float>(static_cast<int8_t>(words[e / 4] >> (8 * (e % 4)))));
      }
      for (int i = tid; i < BN * (BK / 32); i += kThreads) {
        const int r = i / (BK / 32), b = i % (BK / 32);
        const int64_t gn = n0 + r, gk = k0 + b * 32;
        Ds[i] = gn < N && gk < K ? wscale[gn * (K / 32) + gk / 32] : 0.0f;
      }
    } else {
      const uint16_t* w16 = static_cast<const uint16_t*>(w);
      if (vec_w) {
        constexpr int NV = BN * BK / 8 / kThreads;
        static_assert(NV * kThreads * 8 == BN * BK, "tile must split evenly over threads");
        uint4 regs[NV];
#pragma unroll
        for (int u = 0; u < NV; ++u) {
          const int i = tid + u * kThreads;
          const int r = i / (BK / 8), c = (i % (BK / 8)) * 8;
          const int64_t gn = n0 + r, gk = k0 + c;
          regs[u] = make_uint4(0, 0, 0, 0);
          if (gn < N && gk < K) regs[u] = *reinterpret_cast<const uint4*>(w16 + gn * K + gk);
        }
#pragma unroll
        for (int u = 0; u < NV; ++u) {
          const int i = tid + u * kThreads;
          const int r = i / (BK / 8), c = (i % (BK / 8)) * 8;
          uint4 v = regs[u];
          if (WT == kF16) {
            uint4 vl;
            uint32_t* q = &v.x;
            uint32_t* ql = &vl.x;
            const uint32_t in[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const float f0 = __half2float(__ushort_as_half(static_cast<uint16_t>(in[e] & 0xffffu)));
              const float f1 = __half2float(__ushort_as_half(static_cast<uint16_t>(in[e] >> 16)));
              const uint16_t h0 = bf16_bits(f0), h1 = bf16_bits(f1);
              q[e] = static_cast<uint32_t>(h0) | (static_cast<uint32_t>(h1) << 16);
              ql[e] = static_cast<uint32_t>(lo_bits(f0, h0)) |
                      (static_cast<uint32_t>(lo_bits(f1, h1)) << 16);
            }
            *reinterpret_cast<uint4*>(Bl + r * LDS + c) = vl;
          }
          *reinterpret_cast<uint4*>(Bs + r * LDS + c) = v;
        }
      } else {
        for (int i = tid; i < BN * BK; i += kThreads) {
          const int r = i / BK, c = i % BK;
          const int64_t gn = n0 + r, gk = k0 + c;
          uint16_t h = gn < N && gk < K ? w16[gn * K + gk] : 0;
          if (WT == kF16) {
            const float f = __half2float(__ushort_as_half(h));
            h = bf16_bits(f);
            Bl[r * LDS + c] = lo_bits(f, h);
          }
          Bs[r * LDS + c] = h;
        }
      }
    }
    __syncthreads();
#pragma unroll 1
    for (int kb = 0; kb < BK; kb += 32) {
      if (k0 + kb >= kend) break;  // a chunk starting past the slice is not in the chain
      float part[TM][TN][4];
      if (WT == kQ8) {
#pragma unroll
        for (int i = 0; i < TM; ++i)
#pragma unroll
          for (int j = 0; j < TN; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) part[i][j][e] = 0.0f;
      }
#pragma unroll
      for (int st = 0; st < 2; ++st) {
        const int kk = kb + 8 * t4 + 4 * st;  // this thread's k of the step (the interleave)
        uint32_t a[TM][4], al[TM][4];
#pragma unroll
        for (int i = 0; i < TM; ++i) {
          const int o = (wm * TM * 16 + i * 16 + g) * LDS + kk;
          const uint16_t* p = As + o;
          a[i][0] = *reinterpret_cast<const uint32_t*>(p);
          a[i][1] = *reinterpret_cast<const uint32_t*>(p + 8 * LDS);
          a[i][2] = *reinterpret_cast<const uint32_t*>(p + 2);
          a[i][3] = *reinterpret_cast<const uint32_t*>(p + 8 * LDS + 2);
          if (kSplitX) {
            const uint16_t* q = Al + o;
            al[i][0] = *reinterpret_cast<const uint32_t*>(q);
            al[i][1] = *reinterpret_cast<const uint32_t*>(q + 8 * LDS);
            al[i][2] = *reinterpret_cast<const uint32_t*>(q + 2);
            al[i][3] = *reinterpret_cast<const uint32_t*>(q + 8 * LDS + 2);
          }
        }
#pragma unroll
        for (int j = 0; j < TN; ++j) {
          const int o = (wn * TN * 8 + j * 8 + g) * LDS + kk;
          const uint16_t* p = Bs + o;
          const uint32_t b0 = *reinterpret_cast<const uint32_t*>(p);
          const uint32_t b1 = *reinterpret_cast<const uint32_t*>(p + 2);
          uint32_t c0 = 0, c1 = 0;
          if (kSplitW) {
            c0 = *reinterpret_cast<const uint32_t*>(Bl + o);
            c1 = *reinterpret_cast<const uint32_t*>(Bl + o + 2);
          }
          // Per element the step is hi*w, then lo*w, then (F16) hi*wlo, in this order.
#pragma unroll
          for (int i = 0; i < TM; ++i) {
            if (WT == kQ8) {
              mma_bf16(part[i][j], a[i], b0, b1);
            } else {
              mma_bf16(acc[i][j], a[i], b0, b1);
              mma_bf16(acc[i][j], al[i], b0, b1);
              if (kSplitW) mma_bf16(acc[i][j], a[i], c0, c1);
            }
          }
        }
      }
      if (WT == kQ8) {
#pragma unroll
        for (int j = 0; j < TN; ++j) {
          const int c = wn * TN * 8 + j * 8 + t4 * 2;
          const float s0 = Ds[c * (BK / 32) + kb / 32], s1 = Ds[(c + 1) * (BK / 32) + kb / 32];
#pragma unroll
          for (int i = 0; i < TM; ++i) {
            acc[i][j][0] = __fmaf_rn(s0, part[i][j][0], acc[i][j][0]);
            acc[i][j][1] = __fmaf_rn(s1, part[i][j][1], acc[i][j][1]);
            acc[i][j][2] = __fmaf_rn(s0, part[i][j][2], acc[i][j][2]);
            acc[i][j][3] = __fmaf_rn(s1, part[i][j][3], acc[i][j][3]);
          }
        }
      }
    }
    __syncthreads();
    if (!kGrid && (k0 + BK >= K || (k0 + BK) % sp.ks == 0)) {
      // The slice ends here: its chain joins the total in slice order.
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            float& t = Ts[((i * TN + j) * 4 + e) * kThreads + tid];  // this thread's own slot
            t = have_tot ? __fadd_rn(t, acc[i][j][e]) : acc[i][j][e];
            acc[i][j][e] = 0.0f;
          }
      have_tot = true;
    }
  }
  const bool partial = kGrid && sp.s > 1;
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < TN; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t r = m0 + wm * TM * 16 + i * 16 + g + (e >= 2 ? 8 : 0);
        const int64_t c = n0 + wn * TN * 8 + j * 8 + t4 * 2 + (e & 1);
        if (r >= M || c >= N) continue;
        const float v = kGrid ? acc[i][j][e] : Ts[((i * TN + j) * 4 + e) * kThreads + tid];
        if (partial) sp.part[(static_cast<int64_t>(blockIdx.z) * M + r) * N + c] = v;
        else y[r * N + c] = bias ? __fadd_rn(v, bias[c]) : v;
      }
  if (partial && arrive_last(sp.counters + blockIdx.y * gridDim.x + blockIdx.x, sp.s))
    reduce_slices(sp, M, N, m0, rv, n0, BN, bias, y);
}

// Up to 8 consecutive k of one row from k on, as f32 (zero past K).
__device__ __forceinline__ void load_x8(float (&v)[8], const float* __restrict__ row, bool live,
                                        int64_t K, int64_t k, bool vec) {
  if (live && vec && k + 8 <= K) {
    const float4 p = *reinterpret_cast<const float4*>(row + k);
    const float4 q = *reinterpret_cast<const float4*>(row + k + 4);
    v[0] = p.x, v[1] = p.y, v[2] = p.z, v[3] = p.w, v[4] = q.x, v[5] = q.y, v[6] = q.z, v[7] = q.w;
  } else {
#pragma unroll
    for (int e = 0; e < 8; ++e) v[e] = live && k + e < K ? row[k + e] : 0.0f;
  }
}

// The operand words of 8 f32 values: hi = bf16 pairs, lo = the remainders' bf16 pairs.
template <bool kLo>
__device__ __forceinline__ void split8(const float (&v)[8], uint32_t (&hi)[4], uint32_t (&lo)[4]) {
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const uint16_t h0 = bf16_bits(v[2 * e]), h1 = bf16_bits(v[2 * e + 1]);
    hi[e] = pack2(h0, h1);
    lo[e] = kLo ? pack2(lo_bits(v[2 * e], h0), lo_bits(v[2 * e + 1], h1)) : 0u;
  }
}

// Few rows (M <= 16): each warp owns 8 columns of a slice and loads its weight operands straight
// from memory, 8 consecutive k per lane (16 bytes for BF16/F16), the next step's loads in flight
// while a step computes. A step is kSkinnyUnroll chunks; the block first splits the step's x into
// operand words in shared memory once for all its warps (rows past M as zeros).
// kHigh: rows 8..15 exist (M > 8). Grid: (column tiles of 32, slices).
// kGroup: blockIdx.z is a work item of gr (one expert's rows, at most 16): its weight comes from
// gr.w, its row r reads x row order[start + r] / x_div and writes y row order[start + r].
// kMulti: the launch runs ma's matmuls; blockIdx.x counts the column tiles of all of them.
template <int WT, bool kHigh, bool kGroup, bool kMulti = false>
__global__ void __launch_bounds__(kSkinnyWarps * 32)
    skinny_matmul(const float* __restrict__ x, int64_t M, int64_t K, const void* __restrict__ w,
                  const float* __restrict__ wscale, const float* __restrict__ bias,
                  float* __restrict__ y, int64_t N, bool vec_x, bool vec_w, SplitArgs sp,
                  GroupedRows gr, MultiArgs ma) {
  constexpr int U = kSkinnyUnroll, R = kHigh ? 16 : 8, G = 32 * U / 8;  // k8 groups per step
  constexpr bool kLo = WT != kQ8;
  // Operand words of one step: [row][group][hi 0..3, lo 0..3].
  __shared__ __align__(16) uint32_t xs[R][G][8];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t4 = lane % 4;
  const int32_t* rowmap = nullptr;
  int64_t P = M;  // rows of y and of each slice's partials
  unsigned tile = blockIdx.x, bx = blockIdx.x;
  if (kMulti) {
    int i = 0;
    while (i + 1 < ma.n && bx >= static_cast<unsigned>(ma.o[i].tiles)) bx -= ma.o[i].tiles, ++i;
    const MultiOut& o = ma.o[i];
    if (static_cast<int>(blockIdx.y) >= o.sp.s) return;
    w = o.w, wscale = o.scales, bias = o.bias, y = o.y, N = o.N, sp = o.sp;
    tile = bx;
  }
  if (kGroup) {
    int item = static_cast<int>(blockIdx.z);
    const bool second = gr.w2 && item >= gr.max_items;
    if (second) item -= gr.max_items;
    if (item >= *gr.n_items) return;
    const int32_t e = gr.items[3 * item];
    rowmap = gr.order + gr.items[3 * item + 1];
    M = gr.items[3 * item + 2];
    P = gr.pairs;
    const ExpertPtr* table = second ? gr.w2 : gr.w;
    w = table[e].data;
    wscale = table[e].scales;
    if (second) {
      y = gr.y2;
      sp.part += static_cast<int64_t>(sp.s) * P * N;  // the second weight's own partials
    }
    tile += blockIdx.z * gridDim.x;
  }
  const int64_t n0 = static_cast<int64_t>(bx) * kSkinnyBN, nw = n0 + warp * 8;
  const int64_t kbeg = static_cast<int64_t>(blockIdx.y) * sp.ks;
  const int64_t kend = kbeg + sp.ks < K ? kbeg + sp.ks : K;
  const int64_t wr = nw + g;  // the weight row this lane loads
  const bool wlive = wr < N;
  const int64_t c0 = nw + 2 * t4;  // this lane's output columns c0, c0 + 1
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  uint32_t wb[U][4];
  float sc[U][2];
  // Issues the weight (and Q8 scale) loads of the step at kc.
  auto load_w = [&](int64_t kc) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t k = kc + 32 * u + 8 * t4;
      const bool in = wlive && kc + 32 * u < kend;
      if (WT == kQ8) {
        uint2 q = make_uint2(0u, 0u);
        if (in) q = *reinterpret_cast<const uint2*>(static_cast<const int8_t*>(w) + wr * K + k);
        wb[u][0] = q.x, wb[u][1] = q.y, wb[u][2] = 0u, wb[u][3] = 0u;
        const int64_t blk = (kc + 32 * u) / 32;
        const bool sin = kc + 32 * u < kend;
        sc[u][0] = sin && c0 < N ? wscale[c0 * (K / 32) + blk] : 0.0f;
        sc[u][1] = sin && c0 + 1 < N ? wscale[(c0 + 1) * (K / 32) + blk] : 0.0f;
      } else {
        const uint16_t* w16 = static_cast<const uint16_t*>(w) + wr * K;
        if (in && vec_w && k + 8 <= K) {
          const uint4 v = *reinterpret_cast<const uint4*>(w16 + k);
          wb[u][0] = v.x, wb[u][1] = v.y, wb[u][2] = v.z, wb[u][3] = v.w;
        } else {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const uint16_t h0 = in && k + 2 * e < K ? w16[k + 2 * e] : 0;
            const uint16_t h1 = in && k + 2 * e + 1 < K ? w16[k + 2 * e + 1] : 0;
            wb[u][e] = pack2(h0, h1);
          }
        }
        sc[u][0] = sc[u][1] = 0.0f;
      }
    }
  };
  if (kbeg < kend) load_w(kbeg);
  for (int64_t kc = kbeg; kc < kend; kc += 32 * U) {
    // The step's x as operand words, each (row, k8 group) split by one thread.
    for (int i = threadIdx.x; i < R * G; i += kSkinnyWarps * 32) {
      const int r = i / G, q = i % G;
      uint32_t hi[4] = {0u, 0u, 0u, 0u}, lo[4] = {0u, 0u, 0u, 0u};
      if (r < M) {
        const int64_t xr = kGroup ? rowmap[r] / gr.x_div : r;
        float v[8];
        load_x8(v, x + xr * K, true, K, kc + 8 * q, vec_x);
        if (kGroup && gr.act >= 0) {
          float u8[8];
          if (gr.x2) load_x8(u8, gr.x2 + xr * K, true, K, kc + 8 * q, vec_x);
#pragma unroll
          for (int e = 0; e < 8; ++e) v[e] = gr.x2 ? act_value(gr.act, v[e]) * u8[e] : act_value(gr.act, v[e]);
        }
        split8<kLo>(v, hi, lo);
      }
      *reinterpret_cast<uint4*>(&xs[r][q][0]) = make_uint4(hi[0], hi[1], hi[2], hi[3]);
      *reinterpret_cast<uint4*>(&xs[r][q][4]) = make_uint4(lo[0], lo[1], lo[2], lo[3]);
    }
    __syncthreads();
    uint32_t cw[U][4];
    float cs[U][2];
#pragma unroll
    for (int u = 0; u < U; ++u) {
#pragma unroll
      for (int e = 0; e < 4; ++e) cw[u][e] = wb[u][e];
      cs[u][0] = sc[u][0], cs[u][1] = sc[u][1];
    }
    if (kc + 32 * U < kend) load_w(kc + 32 * U);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (kc + 32 * u >= kend) break;  // a chunk starting past the slice is not in the chain
      const int q = 4 * u + t4;
      const uint4 h4 = *reinterpret_cast<const uint4*>(&xs[g][q][0]);
      const uint32_t ah[4] = {h4.x, h4.y, h4.z, h4.w};
      uint32_t al[4] = {0u, 0u, 0u, 0u}, bh[4] = {0u, 0u, 0u, 0u}, bl[4] = {0u, 0u, 0u, 0u};
      if (kLo) {
        const uint4 l4 = *reinterpret_cast<const uint4*>(&xs[g][q][4]);
        al[0] = l4.x, al[1] = l4.y, al[2] = l4.z, al[3] = l4.w;
      }
      if (kHigh) {
        const uint4 hb = *reinterpret_cast<const uint4*>(&xs[(g + 8) % R][q][0]);
        bh[0] = hb.x, bh[1] = hb.y, bh[2] = hb.z, bh[3] = hb.w;
        if (kLo) {
          const uint4 lb = *reinterpret_cast<const uint4*>(&xs[(g + 8) % R][q][4]);
          bl[0] = lb.x, bl[1] = lb.y, bl[2] = lb.z, bl[3] = lb.w;
        }
      }
      // Weight words as bf16 pairs (F16: hi in wh, exact remainder in wl).
      uint32_t wh[4], wl[4];
      if (WT == kQ8) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const uint32_t word = cw[u][e / 2];
          const int sh = 16 * (e % 2);
          const float f0 = static_cast<float>(static_cast<int8_t>(word >> sh));
          const float f1 = static_cast<float>(static_cast<int8_t>(word >> (sh + 8)));
          wh[e] = pack2(bf16_bits(f0), bf16_bits(f1));
          wl[e] = 0u;
        }
      } else if (WT == kF16) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float f0 = __half2float(__ushort_as_half(static_cast<uint16_t>(cw[u][e] & 0xffffu)));
          const float f1 = __half2float(__ushort_as_half(static_cast<uint16_t>(cw[u][e] >> 16)));
          const uint16_t h0 = bf16_bits(f0), h1 = bf16_bits(f1);
          wh[e] = pack2(h0, h1);
          wl[e] = pack2(lo_bits(f0, h0), lo_bits(f1, h1));
        }
      } else {
#pragma unroll
        for (int e = 0; e < 4; ++e) wh[e] = cw[u][e], wl[e] = 0u;
      }
      float part[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
      for (int st = 0; st < 2; ++st) {
        const uint32_t a[4] = {ah[2 * st], bh[2 * st], ah[2 * st + 1], bh[2 * st + 1]};
        const uint32_t b0 = wh[2 * st], b1 = wh[2 * st + 1];
        if (WT == kQ8) {
          mma_bf16(part, a, b0, b1);
        } else {
          const uint32_t l[4] = {al[2 * st], bl[2 * st], al[2 * st + 1], bl[2 * st + 1]};
          mma_bf16(acc, a, b0, b1);
          mma_bf16(acc, l, b0, b1);
          if (WT == kF16) mma_bf16(acc, a, wl[2 * st], wl[2 * st + 1]);
        }
      }
      if (WT == kQ8) {
        acc[0] = __fmaf_rn(cs[u][0], part[0], acc[0]);
        acc[1] = __fmaf_rn(cs[u][1], part[1], acc[1]);
        acc[2] = __fmaf_rn(cs[u][0], part[2], acc[2]);
        acc[3] = __fmaf_rn(cs[u][1], part[3], acc[3]);
      }
    }
    __syncthreads();  // the next step's split overwrites xs
  }
  const bool partial = sp.s > 1;
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const int64_t r = g + (e >= 2 ? 8 : 0), c = c0 + (e & 1);
    if (r >= M || c >= N) continue;
    const int64_t pr = kGroup ? rowmap[r] : r;
    if (partial) sp.part[(static_cast<int64_t>(blockIdx.y) * P + pr) * N + c] = acc[e];
    else y[pr * N + c] = bias ? __fadd_rn(acc[e], bias[c]) : acc[e];
  }
  if (partial && arrive_last(sp.counters + tile, sp.s))
    reduce_slices(sp, M, N, 0, static_cast<int>(M), n0, kSkinnyBN, bias, y, rowmap, P);
}

// F32 weights: one warp per output, lane j takes k = j (mod 32) in increasing k by fma, then
// the fixed xor butterfly, then the bias.
__global__ void f32_matmul(const float* __restrict__ x, int64_t M, int64_t K,
                           const float* __restrict__ w, const float* __restrict__ bias,
                           float* __restrict__ y, int64_t N) {
  const int lane = threadIdx.x % 32;
  const int64_t n = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int64_t r = blockIdx.y;
  if (n >= N) return;
  const float* xr = x + r * K;
  const float* wn = w + n * K;
  float s = 0.0f;
  for (int64_t k = lane; k < K; k += 32) s = __fmaf_rn(xr[k], wn[k], s);
  s = warp_sum(s);
  if (lane == 0) y[r * N + n] = bias ? __fadd_rn(s, bias[n]) : s;
}

template <int BM, int BN, int BK, int WM, int WN, int WT, bool kGrid>
void launch_mma(CudaBackend& be, const Tensor& x, const CudaWeight& w, const float* bias, Tensor y,
                SplitArgs sp) {
  constexpr int kSmem = smem_bytes<BM, BN, BK, WT, kGrid>();
  auto kern = mma_matmul<BM, BN, BK, WM, WN, WT, kGrid>;
  static bool raised = false;  // one attribute call per instantiation
  if (!raised) {
    TF_CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem),
                  "matmul: shared memory limit");
    raised = true;
  }
  const bool vec_x = x.cols % 4 == 0 && reinterpret_cast<uintptr_t>(x.data) % 16 == 0;
  const bool vec_w = WT == kQ8 || w.cols % 8 == 0;
  const dim3 grid(static_cast<unsigned>((y.cols + BN - 1) / BN),
                  static_cast<unsigned>((x.rows + BM - 1) / BM),
                  static_cast<unsigned>(kGrid ? sp.s : 1));
  if (kGrid && sp.s > 1) {
    sp.part = be.matmul_partials(static_cast<uint64_t>(sp.s) * x.rows * y.cols);
    sp.counters = be.matmul_counters(static_cast<uint64_t>(grid.x) * grid.y);
  }
  kern<<<grid, WM * WN * 32, kSmem>>>(x.data, x.rows, x.cols, w.data, w.scales, bias, y.data,
                                      y.cols, vec_x, vec_w, sp);
}

template <int WT>
void launch_skinny(CudaBackend& be, const Tensor& x, const CudaWeight& w, const float* bias,
                   Tensor y, SplitArgs sp) {
  const bool vec_x = x.cols % 4 == 0 && reinterpret_cast<uintptr_t>(x.data) % 16 == 0;
  const bool vec_w = WT == kQ8 || w.cols % 8 == 0;
  const dim3 grid(static_cast<unsigned>((y.cols + kSkinnyBN - 1) / kSkinnyBN),
                  static_cast<unsigned>(sp.s));
  if (sp.s > 1) {
    sp.part = be.matmul_partials(static_cast<uint64_t>(sp.s) * x.rows * y.cols);
    sp.counters = be.matmul_counters(grid.x);
  }
  auto kern = x.rows > 8 ? skinny_matmul<WT, true, false> : skinny_matmul<WT, false, false>;
  kern<<<grid, kSkinnyWarps * 32>>>(x.data, x.rows, x.cols, w.data, w.scales, bias, y.data,
                                    y.cols, vec_x, vec_w, sp, GroupedRows{}, MultiArgs{});
}

template <int WT>
void launch_multi(CudaBackend& be, const Tensor& x, const std::vector<const CudaWeight*>& ws,
                  const std::vector<const float*>& biases, const std::vector<Tensor>& ys) {
  MultiArgs ma;
  ma.n = static_cast<int>(ws.size());
  uint64_t part_n = 0, count_n = 0;
  int tiles = 0, slices = 1;
  bool vec_w = true;
  for (int i = 0; i < ma.n; ++i) {
    MultiOut& o = ma.o[i];
    o.w = ws[i]->data, o.scales = ws[i]->scales, o.bias = biases[i], o.y = ys[i].data;
    o.N = ys[i].cols;
    o.tiles = static_cast<int>((o.N + kSkinnyBN - 1) / kSkinnyBN);
    o.sp = split_for(x.cols, o.N);
    tiles += o.tiles;
    slices = std::max(slices, o.sp.s);
    if (o.sp.s > 1) part_n += static_cast<uint64_t>(o.sp.s) * x.rows * o.N, count_n += o.tiles;
    vec_w = vec_w && (WT == kQ8 || ws[i]->cols % 8 == 0);
  }
  float* part = part_n ? be.matmul_partials(part_n) : nullptr;
  unsigned* counters = count_n ? be.matmul_counters(count_n) : nullptr;
  for (int i = 0; i < ma.n; ++i) {
    MultiOut& o = ma.o[i];
    if (o.sp.s == 1) continue;
    o.sp.part = part, o.sp.counters = counters;
    part += static_cast<uint64_t>(o.sp.s) * x.rows * o.N;
    counters += o.tiles;
  }
  const bool vec_x = x.cols % 4 == 0 && reinterpret_cast<uintptr_t>(x.data) % 16 == 0;
  const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(slices));
  auto kern = x.rows > 8 ? skinny_matmul<WT, true, false, true> : skinny_matmul<WT, false, false, true>;
  kern<<<grid, kSkinnyWarps * 32>>>(x.data, x.rows, x.cols, nullptr, nullptr, nullptr, nullptr, 0,
                                    vec_x, vec_w, SplitArgs{}, GroupedRows{}, ma);
}

template <int WT>
void launch_grouped(CudaBackend& be, const float* x, int64_t K, const GroupedRows& gr, float* y,
                    int64_t N, bool vec_w) {
  const SplitArgs base = split_for(K, N);
  SplitArgs sp = base;
  const int tables = gr.w2 ? 2 : 1;
  const dim3 grid(static_cast<unsigned>((N + kSkinnyBN - 1) / kSkinnyBN), static_cast<unsigned>(sp.s),
                  static_cast<unsigned>(tables * gr.max_items));
  if (sp.s > 1) {
    sp.part = be.matmul_partials(static_cast<uint64_t>(tables * sp.s) * gr.pairs * N);
    sp.counters = be.matmul_counters(static_cast<uint64_t>(grid.x) * grid.z);
  }
  const bool vec_x = K % 4 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0;
  skinny_matmul<WT, true, true><<<grid, kSkinnyWarps * 32>>>(x, gr.pairs, K, nullptr, nullptr, nullptr,
                                                             y, N, vec_x, vec_w, sp, gr, MultiArgs{});
}

template <int WT>
void launch_by_rows(CudaBackend& be, const Tensor& x, const CudaWeight& w, const float* bias,
                    Tensor y) {
  // Every path runs the same slices and chains; the row count only picks who runs them.
  const SplitArgs sp = split_for(x.cols, y.cols);
  if (x.rows <= 16) launch_skinny<WT>(be, x, w, bias, y, sp);
  else if (x.rows <= 64) launch_mma<64, 64, 64, 2, 2, WT, true>(be, x, w, bias, y, sp);
  else launch_mma<128, 128, 32, 2, 4, WT, false>(be, x, w, bias, y, sp);
}

}  // namespace

void CudaBackend::matmul_grouped(const float* x, int64_t K, const GroupedRows& gr, DType dt,
                                 int64_t N, float* y) {
  TF_CHECK(gr.max_items >= 1 && gr.max_items * (gr.w2 ? 2 : 1) <= 65535 && gr.x_div >= 1 && gr.pairs >= 1,
           "matmul_grouped: ", gr.max_items, " work items over ", gr.pairs, " rows");
  const bool vec_w = dt == DType::Q8_0 || K % 8 == 0;
  switch (dt) {
    case DType::BF16: launch_grouped<kBF16>(*this, x, K, gr, y, N, vec_w); break;
    case DType::F16: launch_grouped<kF16>(*this, x, K, gr, y, N, vec_w); break;
    case DType::Q8_0: launch_grouped<kQ8>(*this, x, K, gr, y, N, vec_w); break;
    default: fail("matmul_grouped: weights of this dtype take the op-by-op path");
  }
  check_launch("matmul_grouped");
}

void CudaBackend::matmul_many(const Tensor& x, const std::vector<MatmulOut>& outs) {
  // Few rows and like weights run in one launch; anything else as one matmul each.
  bool one = x.rows >= 1 && x.rows <= 16 && !outs.empty() &&
             outs.size() <= static_cast<size_t>(kMaxMulti);
  std::vector<const CudaWeight*> ws;
  std::vector<const float*> biases;
  std::vector<Tensor> ys;
  for (const MatmulOut& o : outs) {
    if (!one) break;
    const CudaWeight& w = as_cuda(*o.w, "matmul");
    one = w.dtype == outs[0].w->dtype && (w.dtype == DType::BF16 || w.dtype == DType::F16 ||
                                          w.dtype == DType::Q8_0) &&
          w.cols == x.cols && o.y.rows == x.rows && o.y.cols == w.rows && w.rows > 0;
    const float* b = nullptr;
    if (o.bias) {
      const CudaWeight& bw = as_cuda(*o.bias, "matmul");
      one = one && bw.rows == 1 && bw.cols == w.rows;
      b = bw.f32;
    }
    ws.push_back(&w), biases.push_back(b), ys.push_back(o.y);
  }
  if (!one) {
    for (const MatmulOut& o : outs) matmul(x, *o.w, o.bias, o.y);
    return;
  }
  const ProfScope prof(*this, "matmul_many", &outs[0].w->name, x.rows);
  check_tensor(x, "matmul", "x");
  for (const Tensor& y : ys) check_tensor(y, "matmul", "y");
  switch (ws[0]->dtype) {
    case DType::BF16: launch_multi<kBF16>(*this, x, ws, biases, ys); break;
    case DType::F16: launch_multi<kF16>(*this, x, ws, biases, ys); break;
    default: launch_multi<kQ8>(*this, x, ws, biases, ys); break;
  }
  check_launch("matmul");
}

void CudaBackend::matmul(const Tensor& x, const Weight& wt, const Weight* bias, Tensor y) {
  const ProfScope prof(*this, "matmul", &wt.name, x.rows);
  const CudaWeight& w = as_cuda(wt, "matmul");
  check_tensor(x, "matmul", "x");
  check_tensor(y, "matmul", "y");
  TF_CHECK(x.cols == w.cols && y.rows == x.rows && y.cols == w.rows, "matmul: x [", x.rows, " x ",
           x.cols, "] times ", w.name, " [", w.rows, " x ", w.cols, "]^T into y [", y.rows, " x ",
           y.cols, "]");
  const float* b = nullptr;
  if (bias) {
    const CudaWeight& bw = as_cuda(*bias, "matmul");
    TF_CHECK(bw.rows == 1 && bw.cols == w.rows, "matmul: bias ", bw.name, " [", bw.rows, " x ",
             bw.cols, "] does not match ", w.name, " with ", w.rows, " outputs");
    b = bw.f32;
  }
  if (x.rows == 0 || w.rows == 0) return;
  TF_CHECK(x.rows <= 65535L * 16, "matmul: ", x.rows, " rows is more than one call takes");
  switch (w.dtype) {
    case DType::BF16: launch_by_rows<kBF16>(*this, x, w, b, y); break;
    case DType::F16: launch_by_rows<kF16>(*this, x, w, b, y); break;
    case DType::Q8_0: launch_by_rows<kQ8>(*this, x, w, b, y); break;
    default: {
      const int warps = 8;
      const dim3 grid(grid_for(w.rows, warps), static_cast<unsigned>(x.rows));
      TF_CHECK(x.rows <= 65535, "matmul: ", x.rows, " rows is more than one f32 call takes");
      f32_matmul<<<grid, warps * 32>>>(x.data, x.rows, x.cols, static_cast<const float*>(w.data),
                                       b, y.data, y.cols);
    }
  }
  check_launch("matmul");
}

}  // namespace tf::cuda
