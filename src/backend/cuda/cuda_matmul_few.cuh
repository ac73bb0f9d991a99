#pragma once
// The few-row matmul kernel (M <= 16) and what its launches share: weights streamed straight
// into mma registers, for one weight, several of one x or an MoE layer's experts. Included by
// cuda_matmul_few.cu alone, which picks each launch's form; the order rule is in cuda_matmul.cuh.
#include <cstdint>

#include "backend/cuda/cuda_matmul.cuh"

namespace tf::cuda::mm {
namespace {

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

// First k of the x values split into operand words for k8 group q of the step at kc: the thread
// that reads group q % 4 of a chunk takes k step_k(q % 4) .. + 3 of each of the chunk's steps.
__device__ __forceinline__ int64_t x_group_k(int64_t kc, int q) { return kc + 32 * (q / 4) + step_k(q % 4); }

// k .. k + 3 and k + 16 .. k + 19 of one row (one thread's x of a chunk's two steps), as f32
// (zero past K).
__device__ __forceinline__ void load_x8(float (&v)[8], const float* __restrict__ row, bool live,
                                        int64_t K, int64_t k, bool vec) {
  if (live && vec && k + 20 <= K) {
    const float4 p = *reinterpret_cast<const float4*>(row + k);
    const float4 q = *reinterpret_cast<const float4*>(row + k + 16);
    v[0] = p.x, v[1] = p.y, v[2] = p.z, v[3] = p.w, v[4] = q.x, v[5] = q.y, v[6] = q.z, v[7] = q.w;
  } else {
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const int64_t ke = k + e % 4 + 16 * (e / 4);
      v[e] = live && ke < K ? row[ke] : 0.0f;
    }
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

// Groups of 8 k the whole-range x holds for k_span values: every group of each k32 chunk that
// starts inside the span, so a chunk crossing K reads the zeros load_x8 gives past it.
__host__ __device__ constexpr int whole_x_groups(int64_t k_span) {
  return static_cast<int>((k_span + 31) / 32 * 4);
}

// Row stride, in 16-byte groups, of the whole-range x for k_span values: at least its groups and
// 4 mod 8, so the two rows a quarter warp reads fill all 32 banks.
__host__ __device__ constexpr int whole_x_stride(int64_t k_span) {
  return static_cast<int>((k_span + 63) / 64 * 8 + 4);
}
static_assert(whole_x_stride(1) >= whole_x_groups(1) && whole_x_stride(33) >= whole_x_groups(33) &&
                  whole_x_stride(100) >= whole_x_groups(100) && whole_x_stride(4096) >= whole_x_groups(4096),
              "a row of the whole-range x holds its groups");

// Dynamic shared memory of the whole-range x: rows x stride groups, a lo plane too with kLo.
constexpr size_t whole_x_bytes(int64_t rows, int64_t k_span, bool lo) {
  return static_cast<size_t>(rows) * whole_x_stride(k_span) * 16 * (lo ? 2 : 1);
}
constexpr size_t kWholeXMaxBytes = 32 << 10;  // four blocks an SM keep room for it

// Bits of a launch's weight flags: kWVec, whole 16-byte weight loads; kWFirst, weight lines that
// L2 evicts first (weights_evict_first).
constexpr int kWVec = 1, kWFirst = 2;

// 16 and 8 read-only bytes under L2 policy pol.
__device__ __forceinline__ uint4 ld_weight16(const void* a, uint64_t pol) {
  uint4 v;
  asm("ld.global.nc.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(a), "l"(pol));
  return v;
}
__device__ __forceinline__ uint2 ld_weight8(const void* a, uint64_t pol) {
  uint2 v;
  asm("ld.global.nc.L2::cache_hint.v2.u32 {%0, %1}, [%2], %3;" : "=r"(v.x), "=r"(v.y) : "l"(a), "l"(pol));
  return v;
}

// Few rows (M <= 16): each warp owns TN tiles of 8 columns of a slice and loads its weight
// operands straight from memory, 8 consecutive k per lane and tile (16 bytes for BF16/F16, half
// of them traded with lane ^ 2 by swap_halves), the next step's loads in flight while a step
// computes; the TN tiles' chains are independent, so their mma overlap. A step is
// kSkinnyUnroll / TN chunks; the block first splits the step's x into operand words in shared
// memory once for all its warps (rows past M as zeros).
// kHigh: rows 8..15 exist (M > 8). Grid: (column tiles of skinny_cols(TN), slices), or with
// sp.fold (column tiles, 1) and each block folds its tile's slice sums in slice order, as the
// last block would.
// kGroup: blockIdx.z is a work item of gr (one expert's rows, at most 16): its weight comes from
// gr.w, its row r reads x row order[start + r] / x_div and writes y row order[start + r].
// kMulti: the launch runs ma's matmuls; blockIdx.x counts the column tiles of all of them.
// kXLo: x enters BF16/F16 weights as hi + lo (--matmul-input f32), else as hi alone.
// kWhole (up to 8 rows an MoE item): the block splits x over its whole k range into dynamic
// shared memory once (whole_x_bytes), so the k loop has no barrier and no x load; the same
// operand words. With gr.items_early a grouped block reads its item and issues its first weight
// loads before the wait.
// sp.cluster (plain and kMulti launches): the slice blocks of a tile are one cluster along y, and
// they sum the tile's partials in shared memory (cluster_slices) instead of the last to arrive.
// kWords (9..16 rows in bf16 mode, plain and kMulti launches): x holds split_x's hi plane, bf16
// words [M][Kp], not f32 rows; the next step's words are loaded before this step computes, as
// kPreX does with f32 rows, in half their registers. The same operand words, so the same bits.
// Blocks are held to four an SM (128 registers), except the grouped 16-row one-tile form, which
// would spill at that cap.
template <int WT, bool kHigh, bool kGroup, bool kMulti = false, int TN = 1, bool kPreX = false,
          bool kXLo = true, bool kWhole = false, bool kWords = false>
__global__ void __launch_bounds__(kSkinnyWarps * 32, kGroup && kHigh && TN == 1 ? 1 : 4)
    skinny_matmul(const float* __restrict__ x, int64_t M, int64_t K, const void* __restrict__ w,
                  const float* __restrict__ wscale, const float* __restrict__ bias,
                  float* __restrict__ y, int64_t N, bool vec_x, int wflags, SplitArgs sp,
                  GroupedRows gr, MultiArgs ma) {
  constexpr int U = kSkinnyUnroll / TN, R = kHigh ? 16 : 8, G = 32 * U / 8;  // k8 groups per step
  constexpr int BN = skinny_cols(TN);
  constexpr bool kLo = WT != kQ8 && kXLo;
  static_assert(!kWhole || (kGroup && !kHigh && !kPreX), "the whole-range x is for MoE items of up to 8 rows");
  static_assert(!kWords || (!kGroup && !kPreX && !kXLo), "words of x: plain launches in bf16 mode");
  // Operand words of one step: [row][group][hi 0..3, lo 0..3].
  __shared__ __align__(16) uint32_t xs[kWhole ? 1 : R][kWhole ? 1 : G][8];
  // kWhole: operand words of the block's k range, uint4s [row][group]: the hi plane, then lo.
  extern __shared__ uint4 xw[];
  // An MoE item's rows come from the routing kernel; a plain matmul's weights are ready, so its
  // first weight loads go out before the wait on the kernel before it, as an MoE launch's do when
  // its items were ready before that kernel (read from L2, past any stale L1 line).
  const bool early = kGroup && gr.items_early;
  if (kGroup && !early) grid_wait();
  grid_launch_next();
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
    if (item >= (early ? __ldcg(gr.n_items) : *gr.n_items)) return;
    const int32_t e = early ? __ldcg(gr.items + 3 * item) : gr.items[3 * item];
    rowmap = gr.order + (early ? __ldcg(gr.items + 3 * item + 1) : gr.items[3 * item + 1]);
    M = early ? __ldcg(gr.items + 3 * item + 2) : gr.items[3 * item + 2];
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
  const int64_t n0 = static_cast<int64_t>(bx) * BN, nw = n0 + warp * 8 * TN;
  const int64_t kbeg = sp.fold ? 0 : static_cast<int64_t>(blockIdx.y) * sp.ks;
  const int64_t kend = sp.fold ? K : kbeg + sp.ks < K ? kbeg + sp.ks : K;
  // Tile j: this lane loads weight row nw + 8 j + g and owns output columns c0 + 8 j, + 1.
  const int64_t c0 = nw + 2 * t4;
  float acc[TN][4], tot[TN][4];
#pragma unroll
  for (int j = 0; j < TN; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[j][e] = 0.0f;
  bool have_tot = false;
  uint32_t wb[U][TN][4];
  float sc[U][TN][2];
  const bool vec_w = (wflags & kWVec) != 0;
  const uint64_t wpol = weight_policy((wflags & kWFirst) != 0);
  // Issues the weight (and Q8 scale) loads of the step at kc.
  auto load_w = [&](int64_t kc) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
#pragma unroll
      for (int j = 0; j < TN; ++j) {
        const int64_t k = kc + 32 * u + 8 * t4, wr = nw + 8 * j + g, cj = c0 + 8 * j;
        const bool in = wr < N && kc + 32 * u < kend;
        if (WT == kQ8) {
          uint2 q = make_uint2(0u, 0u);
          if (in) q = ld_weight8(static_cast<const int8_t*>(w) + wr * K + k, wpol);
          wb[u][j][0] = q.x, wb[u][j][1] = q.y, wb[u][j][2] = 0u, wb[u][j][3] = 0u;
          const int64_t blk = (kc + 32 * u) / 32;
          const bool sin = kc + 32 * u < kend;
          sc[u][j][0] = sin && cj < N ? wscale[cj * (K / 32) + blk] : 0.0f;
          sc[u][j][1] = sin && cj + 1 < N ? wscale[(cj + 1) * (K / 32) + blk] : 0.0f;
        } else {
          const uint16_t* w16 = static_cast<const uint16_t*>(w) + wr * K;
          if (in && vec_w && k + 8 <= K) {
            const uint4 v = ld_weight16(w16 + k, wpol);
            wb[u][j][0] = v.x, wb[u][j][1] = v.y, wb[u][j][2] = v.z, wb[u][j][3] = v.w;
          } else {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const uint16_t h0 = in && k + 2 * e < K ? w16[k + 2 * e] : 0;
              const uint16_t h1 = in && k + 2 * e + 1 < K ? w16[k + 2 * e + 1] : 0;
              wb[u][j][e] = pack2(h0, h1);
            }
          }
          sc[u][j][0] = sc[u][j][1] = 0.0f;
        }
      }
    }
  };
  if (kbeg < kend) load_w(kbeg);
  if (early) grid_wait();
  const int wq = kWhole ? whole_x_stride(kend - kbeg) : 0, lo_plane = static_cast<int>(M) * wq;
  if constexpr (kWhole) {
    const int nq = whole_x_groups(kend - kbeg);
    for (int i = threadIdx.x; i < M * nq; i += kSkinnyWarps * 32) {
      const int r = i / nq, q = i % nq;
      const int64_t xr = rowmap[r] / gr.x_div, k = x_group_k(kbeg, q);
      float v[8];
      load_x8(v, x + xr * K, true, K, k, vec_x);
      if (gr.act >= 0) {
        float u8[8];
        if (gr.x2) load_x8(u8, gr.x2 + xr * K, true, K, k, vec_x);
#pragma unroll
        for (int e = 0; e < 8; ++e) v[e] = gr.x2 ? act_value(gr.act, v[e]) * u8[e] : act_value(gr.act, v[e]);
      }
      uint32_t hi[4], lo[4];
      split8<kLo>(v, hi, lo);
      xw[r * wq + q] = make_uint4(hi[0], hi[1], hi[2], hi[3]);
      if (kLo) xw[lo_plane + r * wq + q] = make_uint4(lo[0], lo[1], lo[2], lo[3]);
    }
    __syncthreads();
  }
  // A thread splits the same (row, k8 group) items every step: rows past M are zeroed here once,
  // and a live row's x offset (an MoE item's from its row map) is looked up once.
  constexpr int kItems = (R * G + kSkinnyWarps * 32 - 1) / (kSkinnyWarps * 32);
  int xrow[kItems];
#pragma unroll
  for (int j = 0; j < kItems; ++j) {
    const int i = threadIdx.x + j * kSkinnyWarps * 32, r = i / G, q = i % G;
    xrow[j] = -1;
    if (kWhole || i >= R * G) continue;
    if (r >= M) {
      *reinterpret_cast<uint4*>(&xs[r][q][0]) = make_uint4(0u, 0u, 0u, 0u);
      *reinterpret_cast<uint4*>(&xs[r][q][4]) = make_uint4(0u, 0u, 0u, 0u);
    } else {
      xrow[j] = kGroup ? rowmap[r] / gr.x_div : r;
    }
  }
  if (!kGroup) grid_wait();
  // kPreX (up to 8 rows): the next step's x (and an MoE item's second input) is loaded into
  // registers before this step computes, so the split never waits on a load.
  static_assert(!kPreX || !kHigh, "x is preloaded for up to 8 rows only");
  constexpr bool kPre2 = kPreX && kGroup;
  float xv[kPreX ? kItems : 1][8], xv2[kPre2 ? kItems : 1][8];
  auto load_xv = [&](int64_t kc) {
#pragma unroll
    for (int j = 0; j < kItems; ++j) {
      if (xrow[j] < 0) continue;
      const int64_t k = x_group_k(kc, static_cast<int>((threadIdx.x + j * kSkinnyWarps * 32) % G));
      load_x8(xv[kPreX ? j : 0], x + xrow[j] * K, true, K, k, vec_x);
      if (kPre2 && gr.act >= 0 && gr.x2) load_x8(xv2[kPre2 ? j : 0], gr.x2 + xrow[j] * K, true, K, k, vec_x);
    }
  };
  if (kPreX && kbeg < kend) load_xv(kbeg);
  // kWords: a group's words are k .. k + 3 and k + 16 .. k + 19 of the plane (load_x8's k), zeros
  // past it.
  const int64_t Kp = (K + 31) / 32 * 32;
  uint4 xq[kWords ? kItems : 1];
  auto load_xq = [&](int64_t kc) {
    const auto* xw = reinterpret_cast<const uint16_t*>(x);
#pragma unroll
    for (int j = 0; j < kItems; ++j) {
      if (xrow[j] < 0) continue;
      const int64_t k = x_group_k(kc, static_cast<int>((threadIdx.x + j * kSkinnyWarps * 32) % G));
      uint2 a = make_uint2(0u, 0u), b = a;
      if (k < Kp) {
        a = *reinterpret_cast<const uint2*>(xw + xrow[j] * Kp + k);
        b = *reinterpret_cast<const uint2*>(xw + xrow[j] * Kp + k + 16);
      }
      xq[kWords ? j : 0] = make_uint4(a.x, a.y, b.x, b.y);
    }
  };
  if (kWords && kbeg < kend) load_xq(kbeg);
  for (int64_t kc = kbeg; kc < kend; kc += 32 * U) {
    // The step's x as operand words, each live (row, k8 group) split by one thread.
#pragma unroll
    for (int j = 0; j < kItems; ++j) {
      if (xrow[j] < 0) continue;
      const int i = threadIdx.x + j * kSkinnyWarps * 32, r = i / G, q = i % G;
      if constexpr (kWords) {
        *reinterpret_cast<uint4*>(&xs[r][q][0]) = xq[j];
        continue;
      }
      uint32_t hi[4], lo[4];
      float v[8];
      if (kPreX) {
#pragma unroll
        for (int e = 0; e < 8; ++e) v[e] = xv[kPreX ? j : 0][e];
      } else {
        load_x8(v, x + xrow[j] * K, true, K, x_group_k(kc, q), vec_x);
      }
      if (kGroup && gr.act >= 0) {
        float u8[8];
        if (kPre2) {
#pragma unroll
          for (int e = 0; e < 8; ++e) u8[e] = xv2[kPre2 ? j : 0][e];
        } else if (gr.x2) {
          load_x8(u8, gr.x2 + xrow[j] * K, true, K, x_group_k(kc, q), vec_x);
        }
#pragma unroll
        for (int e = 0; e < 8; ++e) v[e] = gr.x2 ? act_value(gr.act, v[e]) * u8[e] : act_value(gr.act, v[e]);
      }
      split8<kLo>(v, hi, lo);
      *reinterpret_cast<uint4*>(&xs[r][q][0]) = make_uint4(hi[0], hi[1], hi[2], hi[3]);
      if (kLo) *reinterpret_cast<uint4*>(&xs[r][q][4]) = make_uint4(lo[0], lo[1], lo[2], lo[3]);
    }
    if (kPreX && kc + 32 * U < kend) load_xv(kc + 32 * U);
    if (kWords && kc + 32 * U < kend) load_xq(kc + 32 * U);
    if (!kWhole) __syncthreads();
    uint32_t cw[U][TN][4];
    float cs[U][TN][2];
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int j = 0; j < TN; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) cw[u][j][e] = wb[u][j][e];
        cs[u][j][0] = sc[u][j][0], cs[u][j][1] = sc[u][j][1];
      }
    if (kc + 32 * U < kend) load_w(kc + 32 * U);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (kc + 32 * u >= kend) break;  // a chunk starting past the slice is not in the chain
      const int q = 4 * u + t4;
      uint4 h4 = make_uint4(0u, 0u, 0u, 0u), l4 = h4;
      if (kWhole) {
        // Rows past M are the zero words the per-step form stores for them.
        if (g < M) {
          const int at = g * wq + static_cast<int>((kc - kbeg) / 8) + q;
          h4 = xw[at];
          if (kLo) l4 = xw[lo_plane + at];
        }
      } else {
        h4 = *reinterpret_cast<const uint4*>(&xs[g][q][0]);
        if (kLo) l4 = *reinterpret_cast<const uint4*>(&xs[g][q][4]);
      }
      const uint32_t ah[4] = {h4.x, h4.y, h4.z, h4.w};
      uint32_t al[4] = {0u, 0u, 0u, 0u}, bh[4] = {0u, 0u, 0u, 0u}, bl[4] = {0u, 0u, 0u, 0u};
      if (kLo) al[0] = l4.x, al[1] = l4.y, al[2] = l4.z, al[3] = l4.w;
      if (kHigh) {
        const uint4 hb = *reinterpret_cast<const uint4*>(&xs[(g + 8) % R][q][0]);
        bh[0] = hb.x, bh[1] = hb.y, bh[2] = hb.z, bh[3] = hb.w;
        if (kLo) {
          const uint4 lb = *reinterpret_cast<const uint4*>(&xs[(g + 8) % R][q][4]);
          bl[0] = lb.x, bl[1] = lb.y, bl[2] = lb.z, bl[3] = lb.w;
        }
      }
#pragma unroll
      for (int j = 0; j < TN; ++j) {
        // Each step's weight words: Q8's two int8 quads, else the four 16-bit pairs.
        if (WT == kQ8) {
          uint32_t q2[2] = {cw[u][j][0], cw[u][j][1]};
          swap_halves(q2, t4);
          cw[u][j][0] = q2[0], cw[u][j][1] = q2[1];
        } else {
          swap_halves(cw[u][j], t4);
        }
        // Weight words as bf16 pairs (F16: hi in wh, exact remainder in wl).
        uint32_t wh[4], wl[4];
        if (WT == kQ8) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const uint32_t word = cw[u][j][e / 2];
            const int sh = 16 * (e % 2);
            const float f0 = static_cast<float>(static_cast<int8_t>(word >> sh));
            const float f1 = static_cast<float>(static_cast<int8_t>(word >> (sh + 8)));
            wh[e] = pack2(bf16_bits(f0), bf16_bits(f1));
            wl[e] = 0u;
          }
        } else if (WT == kF16) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const float f0 = __half2float(__ushort_as_half(static_cast<uint16_t>(cw[u][j][e] & 0xffffu)));
            const float f1 = __half2float(__ushort_as_half(static_cast<uint16_t>(cw[u][j][e] >> 16)));
            const uint16_t h0 = bf16_bits(f0), h1 = bf16_bits(f1);
            wh[e] = pack2(h0, h1);
            wl[e] = pack2(lo_bits(f0, h0), lo_bits(f1, h1));
          }
        } else {
#pragma unroll
          for (int e = 0; e < 4; ++e) wh[e] = cw[u][j][e], wl[e] = 0u;
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
            mma_bf16(acc[j], a, b0, b1);
            if (kLo) mma_bf16(acc[j], l, b0, b1);
            if (WT == kF16) mma_bf16(acc[j], a, wl[2 * st], wl[2 * st + 1]);
          }
        }
        if (WT == kQ8) {
          acc[j][0] = __fmaf_rn(cs[u][j][0], part[0], acc[j][0]);
          acc[j][1] = __fmaf_rn(cs[u][j][1], part[1], acc[j][1]);
          acc[j][2] = __fmaf_rn(cs[u][j][0], part[2], acc[j][2]);
          acc[j][3] = __fmaf_rn(cs[u][j][1], part[3], acc[j][3]);
        }
      }
    }
    if (!kWhole) __syncthreads();  // the next step's split overwrites xs
    const int64_t k1 = kc + 32 * U;  // a step never crosses a slice: ks is a multiple of it
    if (sp.fold && (k1 >= K || k1 % sp.ks == 0)) {
#pragma unroll
      for (int j = 0; j < TN; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          tot[j][e] = have_tot ? __fadd_rn(tot[j][e], acc[j][e]) : acc[j][e];
          acc[j][e] = 0.0f;
        }
      have_tot = true;
    }
  }
  if (sp.fold) {
#pragma unroll
    for (int j = 0; j < TN; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[j][e] = have_tot ? tot[j][e] : 0.0f;
  }
  const bool partial = !sp.fold && sp.s > 1;
  if constexpr (!kGroup && !kWhole) {
    if (partial && sp.cluster) {
      // The last step's barrier freed xs: it holds the block's partials as [row][BN].
      static_assert(sizeof(xs) >= sizeof(float) * R * BN, "xs holds a tile's partials");
      float* red = reinterpret_cast<float*>(&xs[0][0][0]);
#pragma unroll
      for (int j = 0; j < TN; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int r = g + (e >= 2 ? 8 : 0);
          if (r < M) red[r * BN + warp * 8 * TN + 8 * j + 2 * t4 + (e & 1)] = acc[j][e];
        }
      cluster_slices<BN>(red, sp.s, M, N, n0, bias, y);
      return;
    }
  }
#pragma unroll
  for (int j = 0; j < TN; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int64_t r = g + (e >= 2 ? 8 : 0), c = c0 + 8 * j + (e & 1);
      if (r >= M || c >= N) continue;
      const int64_t pr = kGroup ? rowmap[r] : r;
      if (partial) sp.part[(static_cast<int64_t>(blockIdx.y) * P + pr) * N + c] = acc[j][e];
      else y[pr * N + c] = bias ? __fadd_rn(acc[j][e], bias[c]) : acc[j][e];
    }
  if (partial && arrive_last(sp.counters + tile, sp.s))
    reduce_slices<false>(sp, M, N, 0, static_cast<int>(M), n0, BN, bias, y, rowmap, P);
}

}  // namespace
}  // namespace tf::cuda::mm
