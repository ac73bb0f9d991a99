#pragma once
// The warp-specialized warpgroup matmul (tile e): prefill-sized products under --matmul-input bf16
// with K a multiple of 64. One producer thread fills the stages by TMA; two consumer warpgroups each
// take 64 rows by 256 (or 128) columns with m64nNk16 wgmma and hand a stage back on its empty
// mbarrier as soon as their mma have read it, so no barrier of the whole block stands between
// stages. Each wgmma reads one k16 step of the order rule (cuda_matmul.cuh) in k order, so the
// chains, hence the bits, are matmul's. Included by cuda_matmul_wgmma.cu alone.
#include <cstdint>

#include "backend/cuda/cuda_hopper.cuh"
#include "backend/cuda/cuda_matmul.cuh"

namespace tf::cuda::mm {
namespace {

constexpr int kWsRows = 128, kWsCols = 256, kWsStages = 4;
// Two consumer warpgroups, then the producer's: with its registers given to the consumers (setmaxnreg),
// which hold 128 accumulators each.
constexpr int kWsThreads = 3 * 128;
// Column tiles a group of blocks walks before the next group: a wave's x rows and weight columns
// stay in L2 together.
constexpr int kWsGroup = 8;
// How many 8-column groups of running totals a consumer thread loads at once when it folds a slice.
constexpr int kWsFoldChunk = 8;

// Bytes of shared memory the running totals take when a block holds them on chip with `regs` of a
// consumer thread's kCols / 2 in registers: the rest, over the 256 consumer threads.
__host__ __device__ constexpr int ws_tot_bytes(int cols, int regs) {
  return regs > 0 ? 4 * (cols / 2 - regs) * 256 : 0;
}

// Stages of a block kCols wide: four of 256 columns, six of the 128-column form's, two thirds the
// size; fewer where the totals' shared memory leaves no room for them within a block's 227 KiB.
__host__ __device__ constexpr int ws_stages(int cols, int regs = 0) {
  int st = cols == kWsCols ? kWsStages : 6;
  while (st * (kWsRows + cols) * kSwzRow * 2 + ws_tot_bytes(cols, regs) + 1024 > 227 * 1024) --st;
  return st;
}

constexpr int ws_smem(int cols = kWsCols, int regs = 0) {
  return ws_stages(cols, regs) * (kWsRows + cols) * kSwzRow * 2 + ws_tot_bytes(cols, regs) + 1024;
}

// The columns of y a block writes: kGlu's 256 products are 128 of gate and the same 128 of up.
template <bool kGlu>
__host__ __device__ constexpr int ws_out_cols() { return kGlu ? kWsCols / 2 : kWsCols; }

// y (M x N, f32) = x (M x K, bf16 plane xh, rows Kp apart) times w (N x K, bf16), K % 64 == 0. A
// block computes a 128 x kCols tile; slices of sp.ks end each chain, folded in slice order into a
// running total, then the bias. With kTotRegs the total stays on chip and y is written once: that many
// of a thread's in registers (all of them at 128 columns), the rest in shared memory (at 256 columns,
// whose 128 accumulators leave no room for all). Without (0) it lives in y.
// maps: x in boxes of 128 rows, w of kCols.
// kGlu: y = act(x gate^T) * (x up^T) as act_mul computes it, gate in wmap and up in umap (boxes of
// 128 rows each, one slice, no bias); act is act_value's code. With yh set (N even) it goes there
// instead, as the bf16 plane split_x would make of y (rows N apart).
template <bool kGlu, int kCols = kWsCols, int kTotRegs = (kCols < kWsCols ? kCols / 2 : 0)>
__global__ void __launch_bounds__(kWsThreads, 1)
    ws_matmul(int64_t M, int64_t K, const float* __restrict__ bias, float* __restrict__ y, int64_t N,
              SplitArgs sp, const __grid_constant__ CUtensorMap xmap, const __grid_constant__ CUtensorMap wmap,
              const __grid_constant__ CUtensorMap umap, int act, uint16_t* __restrict__ yh) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  static_assert(kCols == kWsCols || (!kGlu && kCols == kWsCols / 2), "256 columns, or 128 without the glu");
  constexpr bool kTot = kTotRegs > 0;
  static_assert(!kGlu || !kTot, "the glu has one slice");
  static_assert(kCols == kWsCols || kTotRegs == kCols / 2, "128 columns keep their total in registers");
  static_assert(kTotRegs <= kCols / 2 && (kCols / 2 - kTotRegs) % 2 == 0, "the totals' split");
  constexpr int kSt = ws_stages(kCols, kTotRegs);
  // 96 totals beside 128 accumulators need the consumers' registers up to 240; the producer keeps 24.
  constexpr bool kWide = kTotRegs > kCols / 4 && kCols == kWsCols;
  grid_wait();
  grid_launch_next();
  constexpr int kX = kWsRows * kSwzRow, kStage = (kWsRows + kCols) * kSwzRow;
  extern __shared__ __align__(16) uint16_t smem_raw[];
  // Swizzled tiles need 1024-byte alignment; the launch adds 1 KiB for it.
  const uint32_t raw = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  uint16_t* smem = smem_raw + (1024 - raw % 1024) % 1024 / 2;
  const uint32_t sbase = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  __shared__ __align__(8) uint64_t bars[2 * kSt];  // full, then empty
  const uint32_t full0 = static_cast<uint32_t>(__cvta_generic_to_shared(bars)), empty0 = full0 + 8 * kSt;
  const int tid = threadIdx.x;
  // Block b: groups of kWsGroup column tiles, each walked row tile by row tile.
  constexpr int kBn = kGlu ? ws_out_cols<kGlu>() : kCols;
  const int64_t rows_t = (M + kWsRows - 1) / kWsRows, cols_t = (N + kBn - 1) / kBn;
  const int64_t b = blockIdx.x, per_group = kWsGroup * rows_t, g = b / per_group, in = b % per_group;
  const int64_t width = cols_t - g * kWsGroup < kWsGroup ? cols_t - g * kWsGroup : kWsGroup;
  const int64_t m0 = in / width * kWsRows, n0 = (g * kWsGroup + in % width) * kBn;
  const int tiles = static_cast<int>(K / kSwzRow), per_slice = static_cast<int>(sp.ks / kSwzRow);
  // Whole blocks with 8-byte aligned pairs fold and store by pairs; the edges pair by pair, checked.
  const bool cols_in = n0 + kCols <= N && N % 2 == 0 && reinterpret_cast<uintptr_t>(y) % 8 == 0 &&
                       reinterpret_cast<uintptr_t>(bias) % 8 == 0;
  const bool inside = cols_in && m0 + kWsRows <= M;
  // A 256-column block with its totals on chip stores by pairs alone: the registers of the checked
  // edge path's stores would not fit beside its totals, so its launches keep every column tile whole.
  constexpr bool kPairsOnly = kTot && kCols == kWsCols;
  if (kPairsOnly && !cols_in) __trap();
  if (tid == 0) {
    for (int i = 0; i < kSt; ++i) {
      mbar_init(full0 + 8 * i, 1);
      mbar_init(empty0 + 8 * i, 8);  // each consumer warp's lane 0
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  if (tid >= 256) {
    if constexpr (kWide) asm volatile("setmaxnreg.dec.sync.aligned.u32 24;\n");
    else asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
    // The producer: stage t % kSt once the consumers handed back its use t - kSt.
    if (tid == 256) {
      for (int t = 0; t < tiles; ++t) {
        const int s = t % kSt;
        if (t >= kSt) mbar_wait(empty0 + 8 * s, static_cast<unsigned>(t / kSt - 1) & 1u);
        const uint32_t so = sbase + 2 * s * kStage, bar = full0 + 8 * s;
        mbar_expect(bar, 2 * kStage);
        tma_box(so, &xmap, t * kSwzRow, static_cast<int>(m0), bar);
        tma_box(so + 2 * kX, &wmap, t * kSwzRow, static_cast<int>(n0), bar);
        if constexpr (kGlu) tma_box(so + 2 * (kX + kBn * kSwzRow), &umap, t * kSwzRow, static_cast<int>(n0), bar);
      }
    }
    return;
  }
  if constexpr (kWide) asm volatile("setmaxnreg.inc.sync.aligned.u32 240;\n");
  else asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
  const int wg = tid / 128, warp = tid % 128 / 32, lane = tid % 32;
  const int64_t r0 = m0 + 64 * wg + 16 * warp + lane / 4, c0 = n0 + 2 * (lane % 4);
  constexpr int kRegTot = kTot ? kTotRegs : 1;
  float acc[kCols / 2], tot[kRegTot];
  // This thread's totals past the registers': element i at stot[256 * i], so a warp's are adjacent.
  [[maybe_unused]] float* const stot = reinterpret_cast<float*>(smem + kSt * kStage) + tid;
#pragma unroll
  for (int i = 0; i < kCols / 2; ++i) acc[i] = 0.0f;
  // -0 is the add's identity, bits included, so the first fold adds too: a select there let the
  // compiler move the accumulators between registers, which serialized the mma.
#pragma unroll
  for (int i = 0; i < kRegTot; ++i) tot[i] = -0.0f;
  // Slice by slice: no code reads acc between a slice's mma, so they are issued without fences.
  for (int t0 = 0; t0 < tiles; t0 += per_slice) {
    const int tend = t0 + per_slice < tiles ? t0 + per_slice : tiles;
    for (int t = t0; t < tend; ++t) {
      const int s = t % kSt;
      mbar_wait(full0 + 8 * s, static_cast<unsigned>(t / kSt) & 1u);
      const uint16_t* st = smem + s * kStage;
      const uint16_t *a = st + 64 * wg * kSwzRow, *bw = st + kX;
      wgmma_fence();
#pragma unroll
      for (int j = 0; j < kSwzRow / 16; ++j) wgmma_bf16<kCols>(acc, swz_desc(a + 16 * j), swz_desc(bw + 16 * j));
      wgmma_commit();
      // The mma of stage t - 1 are done: hand it back.
      wgmma_wait<1>();
      if (t > t0 && lane == 0) mbar_arrive(empty0 + 8 * ((t - 1) % kSt));
    }
    wgmma_wait<0>();
    if (lane == 0) mbar_arrive(empty0 + 8 * ((tend - 1) % kSt));
    // The slice ended: its chain joins the running total, in slice order, then the bias.
    const bool first = t0 == 0, last = tend == tiles;
    if constexpr (kTot) {
      if (!last) {
#pragma unroll
        for (int i = 0; i < kRegTot; ++i) {
          tot[i] = __fadd_rn(tot[i], acc[i]);
          acc[i] = 0.0f;
        }
#pragma unroll
        for (int i = kRegTot; i < kCols / 2; ++i) {
          float& s = stot[256 * (i - kRegTot)];
          s = first ? acc[i] : __fadd_rn(s, acc[i]);
          acc[i] = 0.0f;
        }
        continue;
      }
      // The last slice: the whole total into acc, which the stores read.
#pragma unroll
      for (int i = 0; i < kCols / 2; ++i)
        if (!first) acc[i] = __fadd_rn(i < kRegTot ? tot[i] : stot[256 * (i - kRegTot)], acc[i]);
#pragma unroll
      for (int j = 0; j < kCols / 8; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int64_t r = r0 + 8 * h, c = c0 + 8 * j;
          float v0 = acc[4 * j + 2 * h], v1 = acc[4 * j + 2 * h + 1];
          if (kPairsOnly || inside) {
            if (r >= M) continue;
            if (bias) {
              const float2 b2 = *reinterpret_cast<const float2*>(bias + c);
              v0 = __fadd_rn(v0, b2.x), v1 = __fadd_rn(v1, b2.y);
            }
            *reinterpret_cast<float2*>(y + r * N + c) = make_float2(v0, v1);
            continue;
          }
          if (r >= M || c >= N) continue;
          if (bias) {
            v0 = __fadd_rn(v0, bias[c]);
            if (c + 1 < N) v1 = __fadd_rn(v1, bias[c + 1]);
          }
          store_pair(y + r * N, c, N, v0, v1);
        }
      continue;
    }
    if constexpr (kGlu) {
      // Columns j < 16 of the accumulators are gate's, j + 16 up's at the same output column.
#pragma unroll
      for (int j = 0; j < kWsCols / 16; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int64_t r = r0 + 8 * h, c = c0 + 8 * j;
          const float* gv = acc + 4 * j + 2 * h;
          const float* uv = acc + 4 * (j + kWsCols / 16) + 2 * h;
          if (r >= M || c >= N) continue;
          const float v0 = act_value(act, gv[0]) * uv[0], v1 = act_value(act, gv[1]) * uv[1];
          if (yh) *reinterpret_cast<uint32_t*>(yh + r * N + c) = pack2(bf16_bits(v0), bf16_bits(v1));
          else store_pair(y + r * N, c, N, v0, v1);
        }
      continue;
    }
    if (inside) {
      if (!first) {
        // The totals of a chunk of columns are loaded together, so their reads wait on L2 once a
        // chunk; the empty asm keeps the chunks' loads apart, within the registers.
#pragma unroll
        for (int j0 = 0; j0 < kCols / 8; j0 += kWsFoldChunk) {
          float2 prev[kWsFoldChunk][2];
#pragma unroll
          for (int j = 0; j < kWsFoldChunk; ++j)
#pragma unroll
            for (int h = 0; h < 2; ++h)
              prev[j][h] = *reinterpret_cast<const float2*>(y + (r0 + 8 * h) * N + c0 + 8 * (j0 + j));
#pragma unroll
          for (int j = 0; j < kWsFoldChunk; ++j)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              float* a2 = acc + 4 * (j0 + j) + 2 * h;
              a2[0] = __fadd_rn(prev[j][h].x, a2[0]), a2[1] = __fadd_rn(prev[j][h].y, a2[1]);
            }
          asm volatile("" ::: "memory");
        }
      }
      if (last && bias) {
#pragma unroll
        for (int j = 0; j < kCols / 8; ++j)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const float2 b2 = *reinterpret_cast<const float2*>(bias + c0 + 8 * j);
            acc[4 * j + 2 * h] = __fadd_rn(acc[4 * j + 2 * h], b2.x);
            acc[4 * j + 2 * h + 1] = __fadd_rn(acc[4 * j + 2 * h + 1], b2.y);
          }
      }
#pragma unroll
      for (int j = 0; j < kCols / 8; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          *reinterpret_cast<float2*>(y + (r0 + 8 * h) * N + c0 + 8 * j) =
              make_float2(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
#pragma unroll
      for (int i = 0; i < kCols / 2; ++i) acc[i] = 0.0f;
      continue;
    }
#pragma unroll
    for (int j = 0; j < kCols / 8; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int64_t r = r0 + 8 * h, c = c0 + 8 * j;
        float v0 = acc[4 * j + 2 * h], v1 = acc[4 * j + 2 * h + 1];
        acc[4 * j + 2 * h] = 0.0f, acc[4 * j + 2 * h + 1] = 0.0f;
        if (r >= M || c >= N) continue;
        float* row = y + r * N;
        if (!first) {
          v0 = __fadd_rn(row[c], v0);
          if (c + 1 < N) v1 = __fadd_rn(row[c + 1], v1);
        }
        if (last && bias) {
          v0 = __fadd_rn(v0, bias[c]);
          if (c + 1 < N) v1 = __fadd_rn(v1, bias[c + 1]);
        }
        store_pair(row, c, N, v0, v1);
      }
  }
#else
  __trap();  // launched only where wgmma_ready() found the sm_90a code
#endif
}

}  // namespace
}  // namespace tf::cuda::mm
