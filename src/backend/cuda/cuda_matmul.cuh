#pragma once
// Matmul y = x * w^T (+ bias). BF16, F16 and Q8_0 weights run on bf16 tensor cores
// (mma.sync m16n8k16, f32 accumulate); F32 weights run an exact-f32 warp dot.
//
// Order rule: K is cut into S slices of ks (a multiple of 256) chosen from K and N alone
// (split_for), never from M. Within a slice each output element (r, n) is one chain over the
// k32 chunks that start inside the slice, in increasing k from +0. A chunk is two m16n8k16 steps
// in k order: step s takes k = 16 s .. 16 s + 15, so a step is 32 contiguous bytes of a bf16 row
// (as wgmma and TMA read them). Which slot of its step a k sits in does not change a step's bits
// (tests/gpu/probe_tensor_cores.cu checks it on the card); the mma.sync kernels put
// k = 16 s + step_k(t) + {0, 1} in slots 2 t + {0, 1} and + {2, 3} in slots 8 + 2 t + {0, 1}
// (t = 0..3), so a thread's 16-byte weight load of k 8 t .. 8 t + 7 holds half its operands of
// the chunk and swap_halves brings the other half from thread t ^ 2. BF16/F16: x is split as
// hi = bf16(x), lo = bf16(x - hi); a step is mma(hi, w) then mma(lo, w), and for F16 weights
// (split exactly as whi = bf16(w), wlo = w - whi) mma(hi, whi), mma(lo, whi), mma(hi, wlo). With
// --matmul-input bf16 there is no lo: a step is mma(hi, w), or mma(hi, whi), mma(hi, wlo). Q8_0:
// x rounded to bf16, int8 values exact; a chunk (one block of 32) sums from zero in its two
// steps, then acc = fma(scale, block_sum, acc). The slices' sums are added in slice order
// (p0 + p1, + p2, ...), then the bias. Few rows: one block per (32 or 64 columns, slice) and the
// last block of a tile to arrive adds the partials (or the tile's blocks, as one cluster, in
// shared memory); many rows: one block walks every slice of its tile and folds each slice's chain
// into the total as it ends. Rows past M are zero padding; padded k adds zeros.
// This header holds what the matmul's files share: the operand helpers, the K split, the slice
// partials, cp.async and the many-row tiles' x planes and launch.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_team.cuh"
#include "backend/cuda/cuda_util.cuh"
#include "backend/cuda/matmul_split.h"

namespace tf::cuda::mm {

enum WType { kBF16 = 0, kF16 = 1, kQ8 = 2 };

__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// First k (within its step) of the 4 consecutive k that thread t of a quad puts in its slots.
__host__ __device__ constexpr int step_k(int t) { return 8 * (t & 1) + 4 * (t >> 1); }

// Thread t of a quad loaded k 8 t .. 8 t + 7 of a chunk as w[0 .. N - 1] (N = 4 bf16 pairs or 2
// int8 quads); after the exchange with thread t ^ 2 the first half holds its step-0 operands
// (k step_k(t) .. + 3) and the second its step-1 operands (16 more). Every lane of the warp calls.
template <int N>
__device__ __forceinline__ void swap_halves(uint32_t (&w)[N], int t) {
  const bool up = t >= 2;
#pragma unroll
  for (int e = 0; e < N / 2; ++e) {
    const uint32_t got = __shfl_xor_sync(0xffffffffu, up ? w[e] : w[N / 2 + e], 2);
    if (up) w[e] = got;
    else w[N / 2 + e] = got;
  }
}

__device__ __forceinline__ float bf16_float(uint16_t h) {
  return __bfloat162float(__ushort_as_bfloat16(h));
}

// Low part of x after its bf16 high part; zero when the high part is not finite (inf - inf).
__device__ __forceinline__ uint16_t lo_bits(float x, uint16_t hi) {
  const float h = bf16_float(hi);
  return isfinite(h) ? bf16_bits(__fsub_rn(x, h)) : static_cast<uint16_t>(0);
}

constexpr int64_t kSliceUnit = 256;   // slice lengths are multiples of this (and of every BK)
constexpr int64_t kTargetBlocks = 4 * 132;  // few-row launches aim at 4 blocks per H200 SM
constexpr int kSkinnyWarps = 4, kSkinnyUnroll = 8;
static_assert(kSliceUnit % (32 * kSkinnyUnroll) == 0, "a skinny step never crosses a slice");
// The split counts column tiles of this width whatever the kernels' blocks, so the bits never
// follow a block shape.
constexpr int64_t kSplitCols = 32;
// Columns of a few-row block whose warps own tn tiles of 8.
__host__ __device__ constexpr int skinny_cols(int tn) { return 8 * kSkinnyWarps * tn; }

// Whether x enters BF16/F16 matmuls as hi + lo (MatmulInput::F32) or as hi alone (BF16).
inline bool x_lo(const CudaBackend& be) { return be.matmul_input() == MatmulInput::F32; }

// Calls f with std::bool_constant<x_lo(be)>.
template <class F>
void with_xlo(const CudaBackend& be, F f) {
  if (x_lo(be)) f(std::true_type{});
  else f(std::false_type{});
}

// with_xlo for weights of type WT, except Q8_0 (x never has a lo there): one instantiation.
template <int WT, class F>
void with_wt_xlo(const CudaBackend& be, F f) {
  if constexpr (WT == kQ8) f(std::true_type{});
  else with_xlo(be, f);
}

struct SplitArgs {
  int64_t ks;  // slice length
  int s;       // slice count
  float* part;  // [s][M][N] partial sums (s > 1 and one block per slice)
  unsigned* counters;
  bool fold = false;  // few rows: one block walks every slice, folding each sum in slice order
  bool cluster = false;  // few rows: a tile's slices are one cluster, summed in shared memory
};

// Whether decode matmuls, which read each weight once a step, mark those lines for L2 to evict
// first, so the small kernels' code and data between the matmuls stay in L2 (TF_CUDA_WEIGHT_L2=0:
// never, for side-by-side timing; a cache policy, so the same bits).
inline bool weights_evict_first() {
  static const bool on = !env_zero("TF_CUDA_WEIGHT_L2");
  return on;
}

// The L2 policy of a launch's weight loads: evict first, or the default.
__device__ __forceinline__ uint64_t weight_policy(bool first) {
  uint64_t p;
  if (first) asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
  else asm("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;" : "=l"(p));
  return p;
}

// The K split, a function of K and N only, so a row's chains never depend on the batch: the wave
// cost model of matmul_split.h; TF_CUDA_SPLIT=count takes about kTargetBlocks blocks a few-row
// launch instead (side-by-side timing; the bits follow the split).
inline SplitArgs split_for(int64_t K, int64_t N) {
  static const bool by_cost = [] {
    const char* e = std::getenv("TF_CUDA_SPLIT");
    return !(e && std::string(e) == "count");
  }();
  thread_local SliceMemo memo;
  const int64_t ks = memo.get(K, N, [&] {
    const int64_t tiles = (N + kSplitCols - 1) / kSplitCols;
    return by_cost ? slice_len_by_cost(K, tiles, kTargetBlocks, kSliceUnit)
                   : slice_len_by_count(K, tiles, kTargetBlocks, kSliceUnit);
  });
  if (ks >= K) return {K, 1, nullptr, nullptr, false};
  return {ks, static_cast<int>(slice_count(K, ks)), nullptr, nullptr, false};
}

// The k range [kbeg, kend) a tile kernel's block covers: slice z (blockIdx.z unless the kernel
// maps its blocks itself) with kGrid, else all of K.
template <bool kGrid>
__device__ __forceinline__ void slice_range(const SplitArgs& sp, int64_t K, int64_t& kbeg,
                                            int64_t& kend, unsigned z) {
  kbeg = kGrid ? static_cast<int64_t>(z) * sp.ks : 0;
  kend = kGrid && kbeg + sp.ks < K ? kbeg + sp.ks : K;
}
template <bool kGrid>
__device__ __forceinline__ void slice_range(const SplitArgs& sp, int64_t K, int64_t& kbeg,
                                            int64_t& kend) {
  slice_range<kGrid>(sp, K, kbeg, kend, blockIdx.z);
}

// Calls f(i, j, e, r, c) for element e of each m16n8 accumulator (i, j) of a warp tile whose
// lane's first element is at row r0, column c0 (mma layout: rows + {0, 8}, columns + {0, 1}).
template <int TM, int TN, class F>
__device__ __forceinline__ void for_each_acc(int64_t r0, int64_t c0, F f) {
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < TN; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) f(i, j, e, r0 + i * 16 + (e >= 2 ? 8 : 0), c0 + j * 8 + (e & 1));
}

// wgmma operand tiles in shared memory are K-major rows of kSwzRow positions (128 bytes), 16-byte
// chunk c of row r kept at chunk c ^ (r % 8): the 128-byte swizzle, read without bank conflicts.
constexpr int kSwzRow = 64;

// Element offset of (row r, position p) in a tile.
__device__ __forceinline__ int swz_at(int r, int p) {
  return r * kSwzRow + (((p / 8) ^ (r % 8)) * 8) + p % 8;
}

// Descriptor of a swizzled K-major operand whose k16 step starts at p (8-row groups 1024 bytes
// apart; the leading offset is unused in this mode).
__device__ __forceinline__ uint64_t swz_desc(const uint16_t* p) {
  const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(p));
  constexpr uint64_t lbo = 16, sbo = 1024;
  return static_cast<uint64_t>((a & 0x3FFFF) >> 4) | ((lbo >> 4) << 16) | ((sbo >> 4) << 32) |
         (uint64_t{1} << 62);
}

// The descriptor of p + elems for d = swz_desc(p): its address field counts 16 bytes and, for
// shared memory below 256 KB, never carries, so an offset of a multiple of 8 elements adds alone.
__device__ __forceinline__ uint64_t desc_add(uint64_t d, int elems) { return d + static_cast<uint64_t>(elems / 8); }

// Zeroes the m16n8 accumulators of a warp tile.
template <int TM, int TN>
__device__ __forceinline__ void zero_acc(float (&acc)[TM][TN][4]) {
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < TN; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;
}

// After a block stored its partials: true in the block that arrived last at its tile, which
// then resets the counter for the next launch. One thread releases after the barrier (a fence is
// cumulative over the stores the barrier ordered before it, as in cooperative groups' grid sync),
// so the other warps need not wait for their stores to land; acq_rel is all the handoff needs.
__device__ __forceinline__ bool arrive_last(unsigned* counter, int slices) {
  __shared__ unsigned ticket;
  __syncthreads();
  if (threadIdx.x == 0) {
    asm volatile("fence.acq_rel.gpu;\n" ::: "memory");
    ticket = atomicAdd(counter, 1u);
    if (ticket == static_cast<unsigned>(slices - 1)) {
      asm volatile("fence.acq_rel.gpu;\n" ::: "memory");
      *counter = 0;
    }
  }
  __syncthreads();
  return ticket == static_cast<unsigned>(slices - 1);
}

// Stores a row's values at columns c, c + 1 (c even; the second only below N): one 8-byte store
// where N is even and row 8-byte aligned.
__device__ __forceinline__ void store_pair(float* row, int64_t c, int64_t N, float v0, float v1) {
  if (c + 1 < N && N % 2 == 0 && reinterpret_cast<uintptr_t>(row) % 8 == 0) {
    *reinterpret_cast<float2*>(row + c) = make_float2(v0, v1);
  } else {
    if (c < N) row[c] = v0;
    if (c + 1 < N) row[c + 1] = v1;
  }
}

// One pass shape of reduce_slices: kV consecutive columns an element (a float4 where kV == 4),
// kE elements a thread a pass, up to kU slices loaded before they are added in order.
template <int kV, int kE, int kU>
__device__ __forceinline__ void reduce_slices_by(const SplitArgs& sp, int64_t M, int64_t N, int64_t P,
                                                 int64_t m0, int rows, int64_t n0, int cols,
                                                 const float* __restrict__ bias, float* __restrict__ y,
                                                 const int32_t* rowmap) {
  using V = std::conditional_t<kV == 4, float4, float>;
  const auto load = [](const float* p) {
    if constexpr (kV == 4) return __ldcg(reinterpret_cast<const float4*>(p));
    else return __ldcg(p);
  };
  const auto add = [](V& t, const V& v) {
    if constexpr (kV == 4) {
      t.x = __fadd_rn(t.x, v.x), t.y = __fadd_rn(t.y, v.y), t.z = __fadd_rn(t.z, v.z), t.w = __fadd_rn(t.w, v.w);
    } else {
      t = __fadd_rn(t, v);
    }
  };
  const int cv = cols / kV, n = rows * cv, step = static_cast<int>(blockDim.x);
  for (int i0 = threadIdx.x; i0 < n; i0 += kE * step) {
    int64_t at[kE];  // element e's offset in a slice's partials, -1 where it is not one
    V t[kE];
#pragma unroll
    for (int e = 0; e < kE; ++e) {
      const int i = i0 + e * step;
      const int64_t r = m0 + i / cv, c = n0 + static_cast<int64_t>(i % cv) * kV;
      at[e] = -1;
      if (i < n && r < M && c < N) at[e] = (rowmap ? rowmap[r] : r) * N + c;
      t[e] = at[e] >= 0 ? load(sp.part + at[e]) : V{};
    }
    for (int s = 1; s < sp.s; s += kU) {
      V v[kE][kU];
#pragma unroll
      for (int e = 0; e < kE; ++e)
#pragma unroll
        for (int u = 0; u < kU; ++u)
          v[e][u] = at[e] >= 0 && s + u < sp.s ? load(sp.part + (s + u) * P * N + at[e]) : V{};
#pragma unroll
      for (int e = 0; e < kE; ++e)
#pragma unroll
        for (int u = 0; u < kU; ++u)
          if (s + u < sp.s) add(t[e], v[e][u]);
    }
#pragma unroll
    for (int e = 0; e < kE; ++e) {
      if (at[e] < 0) continue;
      const int64_t c = at[e] % N;
      if constexpr (kV == 4) {
        if (bias) t[e].x = __fadd_rn(t[e].x, bias[c]), t[e].y = __fadd_rn(t[e].y, bias[c + 1]),
                  t[e].z = __fadd_rn(t[e].z, bias[c + 2]), t[e].w = __fadd_rn(t[e].w, bias[c + 3]);
        *reinterpret_cast<float4*>(y + at[e]) = t[e];
      } else {
        y[at[e]] = bias ? __fadd_rn(t[e], bias[c]) : t[e];
      }
    }
  }
}

// Sums the slices' partials of rows [m0, m0 + rows) x columns [n0, n0 + cols) in slice order.
// Partials are [s][P][N] with P = M, or with rowmap the row p of row r is rowmap[r] (of P).
// With kVec, where columns come in aligned fours, a thread adds float4s (four a pass with their
// slices loaded at once, or one a pass with up to 16 where slices are many); else single floats,
// four a pass with eight slices. Either way each element's adds run in slice order, so the bits
// are the same. The few-row kernels pass kVec false: their tiles hold a row or a few.
template <bool kVec = true>
__device__ __forceinline__ void reduce_slices(const SplitArgs& sp, int64_t M, int64_t N,
                                              int64_t m0, int rows, int64_t n0, int cols,
                                              const float* __restrict__ bias, float* __restrict__ y,
                                              const int32_t* rowmap = nullptr, int64_t P = 0) {
  if (!rowmap) P = M;
  const bool vec = kVec && N % 4 == 0 && n0 % 4 == 0 && cols % 4 == 0 &&
                   (reinterpret_cast<uintptr_t>(sp.part) | reinterpret_cast<uintptr_t>(y)) % 16 == 0;
  if (vec && sp.s <= 5) reduce_slices_by<4, 4, 4>(sp, M, N, P, m0, rows, n0, cols, bias, y, rowmap);
  else if (vec) reduce_slices_by<4, 1, 16>(sp, M, N, P, m0, rows, n0, cols, bias, y, rowmap);
  else reduce_slices_by<1, 4, 8>(sp, M, N, P, m0, rows, n0, cols, bias, y, rowmap);
}

// A few-row block's share of its tile's sum when the tile's s slice blocks are one cluster along y
// (sp.cluster; rank = slice): each block has put its partials in part ([rows][BN], shared
// memory), and block q adds elements q, q + s, ... of them over the cluster in slice order, as
// reduce_slices does, then the bias. Every live block of the cluster calls it.
template <int BN>
__device__ __forceinline__ void cluster_slices(const float* part, int s, int64_t M, int64_t N, int64_t n0,
                                               const float* __restrict__ bias, float* __restrict__ y) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr int kU = 8;  // slices loaded before they are added
  cluster_arrive(), cluster_wait();
  const uint32_t at0 = static_cast<uint32_t>(__cvta_generic_to_shared(part));
  const int n = static_cast<int>(M) * BN;
  for (int i = static_cast<int>(blockIdx.y * blockDim.x + threadIdx.x); i < n; i += s * static_cast<int>(blockDim.x)) {
    const int64_t c = n0 + i % BN;
    float t = 0.0f;
    for (int q0 = 0; q0 < s; q0 += kU) {
      float v[kU];
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        if (q0 + u >= s) break;
        uint32_t at;
        asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(at) : "r"(at0 + 4u * i), "r"(q0 + u));
        asm volatile("ld.shared::cluster.f32 %0, [%1];\n" : "=f"(v[u]) : "r"(at) : "memory");
      }
#pragma unroll
      for (int u = 0; u < kU; ++u)
        if (q0 + u < s) t = q0 + u == 0 ? v[0] : __fadd_rn(t, v[u]);
    }
    if (c < N) y[(i / BN) * N + c] = bias ? __fadd_rn(t, bias[c]) : t;
  }
  // No block leaves while another may still read its partials.
  cluster_arrive(), cluster_wait();
#else
  __trap();  // launched in clusters only where cluster_on()
#endif
}

// hi/lo [M][Kp] bf16 planes of x (Kp = K rounded up to 32; zero past K), or hi alone when lo is
// null; one thread per 8 k. rows (set): plane row r is x row rows[r] / x_div; act >= 0: the values
// are act(x) * x2 or act(x) (defined in cuda_matmul.cu).
__global__ void split_x_kernel(const float* __restrict__ x, int64_t M, int64_t K, int64_t Kp,
                               bool vec, uint16_t* __restrict__ hi, uint16_t* __restrict__ lo,
                               const int32_t* __restrict__ rows, int x_div, const float* __restrict__ x2,
                               int act);

// Splits x into the hi/lo planes of the many-row tiles, in the launch's scratch slot; returns hi
// (lo follows it, M * Kp further on, where x_lo(be)).
inline uint16_t* split_x(CudaBackend& be, const Tensor& x, int64_t Kp) {
  const int64_t M = x.rows, K = x.cols;
  CudaBackend::SplitOnce& once = be.split_once;
  const bool keep = once.x == x.data && once.rows == M && once.cols == K && once.kp == Kp;
  if (keep && once.hi) return once.hi;
  const CudaBackend::ReadyPlane& rp = be.ready_plane;
  if (rp.hi && rp.x == x.data && rp.rows == M && rp.cols == K && K == Kp && rp.at == launch_count() && !x_lo(be)) {
    if (keep) once.hi = rp.hi;
    return rp.hi;
  }
  const int planes = x_lo(be) ? 2 : 1;
  auto* hi = static_cast<uint16_t*>(
      be.buffer(kSlotSplitX, static_cast<uint64_t>(planes * M * Kp) * sizeof(uint16_t)));
  const bool vec = reinterpret_cast<uintptr_t>(x.data) % 16 == 0 && K % 4 == 0;
  launch_kernel(split_x_kernel, grid_for(M * (Kp / 8), 256), 256, 0, x.data, M, K, Kp,
                vec, hi, planes == 2 ? hi + M * Kp : nullptr, nullptr, 1, nullptr, -1);
  // The slot now holds this x's planes alone.
  once.hi = keep ? hi : nullptr;
  return hi;
}

// The split of a matmul of more than 16 rows: split_for's, or with TF_CUDA_FREE_ORDER=1 one chain
// over all of K, as an engine free to pick its reduction by batch size would (timing the cost of
// invariance).
inline SplitArgs many_rows_split(int64_t K, int64_t N) {
  static const bool free = [] {
    const char* e = std::getenv("TF_CUDA_FREE_ORDER");
    return e && std::string(e) == "1";
  }();
  return free ? SplitArgs{K, 1, nullptr, nullptr, false} : split_for(K, N);
}

// The column count and tiles of output i of a multi-output launch, and its split to carve for.
struct SplitOut {
  SplitArgs* sp;
  int64_t N, tiles;
};

// Gives every output f(i) (i < n) split into more than one slice its [s][M][N] partials and its
// tiles' counters, carved from the backend's scratch in output order.
template <class F>
void carve_partials(CudaBackend& be, int64_t M, int n, F f) {
  uint64_t part_n = 0, count_n = 0;
  for (int i = 0; i < n; ++i) {
    const SplitOut o = f(i);
    if (o.sp->s == 1) continue;
    part_n += static_cast<uint64_t>(o.sp->s) * M * o.N;
    count_n += o.tiles;
  }
  float* part = part_n ? be.matmul_partials(part_n) : nullptr;
  unsigned* counters = count_n ? be.matmul_counters(count_n) : nullptr;
  for (int i = 0; i < n; ++i) {
    const SplitOut o = f(i);
    if (o.sp->s == 1) continue;
    o.sp->part = part, o.sp->counters = counters;
    part += static_cast<uint64_t>(o.sp->s) * M * o.N;
    counters += o.tiles;
  }
}

// TF_CUDA_FOLD=0: slices never fold (below 64 MiB of partials), for side-by-side timing.
inline bool fold_off() {
  static const bool off = env_zero("TF_CUDA_FOLD");
  return off;
}

// Whether many-row tiles fold their slices in place (no partials, no second pass): from
// min_tiles tiles (by default one block an SM), or once the partials would pass 64 MiB; fewer
// tiles run slices as blocks of their own, for occupancy. The chains are the same either way.
inline bool fold_slices(int64_t tiles, const SplitArgs& sp, int64_t M, int64_t N,
                        int64_t min_tiles = kTargetBlocks / 4) {
  constexpr uint64_t kMaxPartials = uint64_t{64} << 20;
  return (!fold_off() && tiles >= min_tiles) ||
         static_cast<uint64_t>(sp.s) * M * N * sizeof(float) > kMaxPartials;
}

// The grid of a many-row tile kernel: a block per (bn columns, bm rows), and with kGrid one per
// slice as well, whose partials it sets up in sp. Sets the kernel's shared memory limit first
// unless raised says it was.
template <bool kGrid, class Kern>
dim3 tile_grid(CudaBackend& be, Kern kern, bool& raised, int smem, int bm, int bn, const Tensor& x,
               const Tensor& y, SplitArgs& sp) {
  if (!raised) {
    TF_CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem),
                  "matmul: shared memory limit");
    raised = true;
  }
  const dim3 grid(static_cast<unsigned>((y.cols + bn - 1) / bn),
                  static_cast<unsigned>((x.rows + bm - 1) / bm),
                  static_cast<unsigned>(kGrid ? sp.s : 1));
  if (kGrid && sp.s > 1) {
    sp.part = be.matmul_partials(static_cast<uint64_t>(sp.s) * x.rows * y.cols);
    sp.counters = be.matmul_counters(static_cast<uint64_t>(grid.x) * grid.y);
  }
  return grid;
}

// Launches a many-row tile kernel on x's hi/lo planes (tile_grid's grid).
template <bool kGrid, class Kern>
void launch_planes(CudaBackend& be, Kern kern, bool& raised, int smem, int threads, int bm, int bn,
                   const uint16_t* xh, const uint16_t* xl, int64_t Kp, const Tensor& x,
                   const CudaWeight& w, const float* bias, Tensor y, SplitArgs sp) {
  const dim3 grid = tile_grid<kGrid>(be, kern, raised, smem, bm, bn, x, y, sp);
  launch_kernel_whole(kern, grid, threads, smem, xh, xl, x.rows, x.cols, Kp,
                      static_cast<const uint16_t*>(w.data), bias, y.data, y.cols, sp);
}

// More than 16 rows of BF16 weights with K % 8 == 0 on the split sp, x split once and tiles
// streamed by cp.async (cuda_matmul_pipe.cu); false when the shape is not one it takes.
bool launch_bf16_pipe(CudaBackend& be, const Tensor& x, const CudaWeight& w, const float* bias,
                      Tensor y, const SplitArgs& sp);

// The same on Hopper's warpgroup mma (cuda_matmul_wgmma.cu); false where the device or the shape
// is not one it takes. ready: x's bf16 plane as split_x makes it (bf16 mode, rows Kp apart), made
// already; the launch then reads only x's shape, and takes any shape of more than 64 rows.
bool launch_bf16_wgmma(CudaBackend& be, const Tensor& x, const CudaWeight& w, const float* bias,
                       Tensor y, const SplitArgs& sp, const uint16_t* ready = nullptr);

// Whether launch_bf16_glu takes x times gate and up into N columns: bf16 mode, more than 64 rows,
// one slice over K, and blocks enough (cuda_matmul_wgmma.cu).
bool glu_takes(const CudaBackend& be, const Tensor& x, const CudaWeight& gate, const CudaWeight& up, int64_t N);

// y = act(x gate^T) * (x up^T) in one launch, each element as matmul then act_mul compute it; act
// is act_value's code. With yh set (y.cols even) y is not written: yh gets the bf16 plane split_x
// would make of it, rows y.cols apart.
void launch_bf16_glu(CudaBackend& be, const Tensor& x, const CudaWeight& gate, const CudaWeight& up, int act,
                     Tensor y, uint16_t* yh = nullptr);

// Whether launch_bf16_wgmma_many takes these BF16 matmuls of one x: 17..64 rows on a device with
// the warpgroup tiles, and more where one of them alone would be too narrow for those tiles,
// unless a forced tile rules it out.
bool wgmma_many_takes(const Tensor& x, const std::vector<const CudaWeight*>& ws);

// Those matmuls in one launch on the warpgroup tiles, each on its own split.
void launch_bf16_wgmma_many(CudaBackend& be, const Tensor& x,
                            const std::vector<const CudaWeight*>& ws,
                            const std::vector<const float*>& biases, const std::vector<Tensor>& ys);

// An MoE layer's experts in one launch (kGroup): blockIdx.y is work item i of items (expert,
// first list place, rows: items[3 i..]; items past *n_items do nothing) and blockIdx.z the weight
// table, w[z] into y (z == 0) or y2. The item's rows are list places start.. of x's planes, and
// its y rows list places start.. too, or pairs ymap[start + r] where ymap is set.
struct WgGroup {
  const int32_t* items = nullptr;
  const int32_t* n_items = nullptr;
  const ExpertPtr* w[2] = {};
  float* y2 = nullptr;
  const int32_t* ymap = nullptr;
};

// Rows of an expert work item on the warpgroup tiles (tile a's 128 x 128 blocks).
constexpr int kWgGroupRows = 128;

// The expert items of g (at most kWgGroupRows rows each) on the warpgroup tiles, x's planes [P][Kp]
// as split_x makes them (list places in order), into y and g.y2 [.][N]; each pair gets the bits the
// grouped few-row kernel gives it (cuda_matmul_wgmma.cu). BF16 weights, K % 8 == 0, wgmma_ready().
void launch_bf16_wgmma_grouped(CudaBackend& be, const uint16_t* hi, int64_t P, int64_t K, const WgGroup& g,
                               int tables, int max_items, float* y, int64_t N);

// Few-row (M <= 16) matmul on the split sp (cuda_matmul_few.cu).
void launch_few_rows(CudaBackend& be, const Tensor& x, const CudaWeight& w, const float* bias,
                     Tensor y, const SplitArgs& sp);

}  // namespace tf::cuda::mm
