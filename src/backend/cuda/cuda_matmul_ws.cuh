#pragma once
// The warp-specialized warpgroup matmul (tile e): prefill-sized products under --matmul-input bf16
// with K a multiple of 64. One producer thread fills the stages by TMA; two consumer warpgroups each
// take 64 rows by 256 columns with m64n256k16 wgmma and hand a stage back on its empty mbarrier as
// soon as their mma have read it, so no barrier of the whole block stands between stages. Each
// wgmma reads one k16 step of the order rule (cuda_matmul.cuh) in k order, so the chains, hence
// the bits, are matmul's. Included by cuda_matmul_wgmma.cu alone.
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

constexpr int ws_smem() { return kWsStages * (kWsRows + kWsCols) * kSwzRow * 2 + 1024; }

// y (M x N, f32) = x (M x K, bf16 plane xh, rows Kp apart) times w (N x K, bf16), K % 64 == 0. A
// block computes a 128 x 256 tile; slices of sp.ks end each chain, folded into y in slice order
// (y holds the running total), then the bias. maps: x in boxes of 128 rows, w of 256.
__global__ void __launch_bounds__(kWsThreads, 1)
    ws_matmul(int64_t M, int64_t K, const float* __restrict__ bias, float* __restrict__ y, int64_t N,
              SplitArgs sp, const __grid_constant__ CUtensorMap xmap, const __grid_constant__ CUtensorMap wmap) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  grid_wait();
  grid_launch_next();
  constexpr int kX = kWsRows * kSwzRow, kStage = (kWsRows + kWsCols) * kSwzRow;
  extern __shared__ __align__(16) uint16_t smem_raw[];
  // Swizzled tiles need 1024-byte alignment; the launch adds 1 KiB for it.
  const uint32_t raw = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  uint16_t* smem = smem_raw + (1024 - raw % 1024) % 1024 / 2;
  const uint32_t sbase = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  __shared__ __align__(8) uint64_t bars[2 * kWsStages];  // full, then empty
  const uint32_t full0 = static_cast<uint32_t>(__cvta_generic_to_shared(bars)), empty0 = full0 + 8 * kWsStages;
  const int tid = threadIdx.x;
  // Block b: groups of kWsGroup column tiles, each walked row tile by row tile.
  const int64_t rows_t = (M + kWsRows - 1) / kWsRows, cols_t = (N + kWsCols - 1) / kWsCols;
  const int64_t b = blockIdx.x, per_group = kWsGroup * rows_t, g = b / per_group, in = b % per_group;
  const int64_t width = cols_t - g * kWsGroup < kWsGroup ? cols_t - g * kWsGroup : kWsGroup;
  const int64_t m0 = in / width * kWsRows, n0 = (g * kWsGroup + in % width) * kWsCols;
  const int tiles = static_cast<int>(K / kSwzRow), per_slice = static_cast<int>(sp.ks / kSwzRow);
  if (tid == 0) {
    for (int i = 0; i < kWsStages; ++i) {
      mbar_init(full0 + 8 * i, 1);
      mbar_init(empty0 + 8 * i, 8);  // each consumer warp's lane 0
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  if (tid >= 256) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
    // The producer: stage t % kWsStages once the consumers handed back its use t - kWsStages.
    if (tid == 256) {
      for (int t = 0; t < tiles; ++t) {
        const int s = t % kWsStages;
        if (t >= kWsStages) mbar_wait(empty0 + 8 * s, static_cast<unsigned>(t / kWsStages - 1) & 1u);
        const uint32_t so = sbase + 2 * s * kStage, bar = full0 + 8 * s;
        mbar_expect(bar, 2 * kStage);
        tma_box(so, &xmap, t * kSwzRow, static_cast<int>(m0), bar);
        tma_box(so + 2 * kX, &wmap, t * kSwzRow, static_cast<int>(n0), bar);
      }
    }
    return;
  }
  asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
  const int wg = tid / 128, warp = tid % 128 / 32, lane = tid % 32;
  const int64_t r0 = m0 + 64 * wg + 16 * warp + lane / 4, c0 = n0 + 2 * (lane % 4);
  float acc[kWsCols / 2];
#pragma unroll
  for (int i = 0; i < kWsCols / 2; ++i) acc[i] = 0.0f;
  // Slice by slice: no code reads acc between a slice's mma, so they are issued without fences.
  for (int t0 = 0; t0 < tiles; t0 += per_slice) {
    const int tend = t0 + per_slice < tiles ? t0 + per_slice : tiles;
    for (int t = t0; t < tend; ++t) {
      const int s = t % kWsStages;
      mbar_wait(full0 + 8 * s, static_cast<unsigned>(t / kWsStages) & 1u);
      const uint16_t* st = smem + s * kStage;
      const uint16_t *a = st + 64 * wg * kSwzRow, *bw = st + kX;
      asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
      for (int j = 0; j < kSwzRow / 16; ++j) wgmma_bf16<kWsCols>(acc, swz_desc(a + 16 * j), swz_desc(bw + 16 * j));
      asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
      // The mma of stage t - 1 are done: hand it back.
      asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
      if (t > t0 && lane == 0) mbar_arrive(empty0 + 8 * ((t - 1) % kWsStages));
    }
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    if (lane == 0) mbar_arrive(empty0 + 8 * ((tend - 1) % kWsStages));
    // The slice ended: its chain joins the running total in y, in slice order, then the bias.
    const bool first = t0 == 0, last = tend == tiles;
#pragma unroll
    for (int j = 0; j < kWsCols / 8; ++j)
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
