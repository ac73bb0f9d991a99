#pragma once
// The warpgroup matmul kernel (more than 16 rows, BF16 weights, Hopper's wgmma) and its launch
// arguments. Included by cuda_matmul_wgmma.cu alone, which picks each launch's tile and form.
// x is split once into hi/lo planes (hi alone under --matmul-input bf16); both planes and the
// weights stream in k order (TMA boxes or 16-byte cp.async pieces), so each wgmma reads one step
// of the order rule (cuda_matmul.cuh) and the chains, hence the bits, are matmul's.
#include <cstdint>
#include <type_traits>

#include "backend/cuda/cuda_hopper.cuh"
#include "backend/cuda/cuda_matmul.cuh"

namespace tf::cuda::mm {
namespace {

// Up to kWgMulti matmuls of one x in one launch (matmul_many): output i's column tiles follow
// those of i - 1.
constexpr int kWgMulti = 4;
struct WgMulti {
  const uint16_t* w[kWgMulti];
  const float* bias[kWgMulti];
  float* y[kWgMulti];
  int64_t N[kWgMulti];
  unsigned tiles[kWgMulti];
  unsigned blocks[kWgMulti];  // tiles times the slices that run as blocks
  SplitArgs sp[kWgMulti];
  int n = 0;
  WgGroup g;
};

// TMA descriptors of a launch's operands (kTma): x's planes in boxes of the tile's rows, each
// output's weights in boxes of its columns, all 64 k wide with the 128-byte swizzle.
struct WgMaps {
  CUtensorMap xh, xl, w[kWgMulti];
};

// One block of WG x WN warpgroups computes a 64 WG x BN tile of y through ST stages of NA swizzle
// rows of k each, [x hi | x lo | w] (no x lo without kXLo), each plane NA tiles of kSwzRow
// positions one after the other; warpgroup (i, j) owns rows 64 i .. 64 i + 63
// and the j-th BN / WN columns. kGrid: blockIdx.z is the slice and partials meet in sp.part;
// otherwise the block walks every slice and folds each slice's chain into a running total as it
// ends.
// kMulti: the launch runs ma's matmuls of one x, each on its own split; blockIdx.x counts the
// blocks of all of them (output i's after i - 1's; within one, column tiles then slices), so no
// block is launched for a slice an output does not have.
// kFull: K is a multiple of the stage's k, so every stage holds whole steps of the chain and the
// mma issue has no branch (which would make the compiler fence the accumulators at the join).
// kYTot: the fold's running total lives in y, not in registers (with one slice it is never read).
// kFixed (with kFull): each copy's row test and shared-memory place are set up once (fixed_copies).
// kTma: one thread fills each stage by TMA boxes from maps (zeros past M, N or K), counted on the
// stage's mbarrier, instead of every thread's cp.async copies.
// kGroup: the launch runs ma.g's expert work items (WgGroup), each block folding its slices.
template <int WG, int WN, int BN, int ST, bool kGrid, bool kMulti = false, bool kXLo = true, int NA = 1,
          bool kFull = false, bool kYTot = false, bool kFixed = false, bool kTma = false, bool kGroup = false>
__global__ void __launch_bounds__(WG * WN * 128, 1)
    wg_matmul(const uint16_t* __restrict__ xh, const uint16_t* __restrict__ xl, int64_t M,
              int64_t K, int64_t Kp, const uint16_t* __restrict__ w,
              const float* __restrict__ bias, float* __restrict__ y, int64_t N, SplitArgs sp,
              WgMulti ma, const __grid_constant__ WgMaps maps) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  static_assert(!kGroup || (!kGrid && !kMulti && !kTma), "expert items fold their slices and copy by cp.async");
  grid_wait();
  grid_launch_next();
  unsigned bx = blockIdx.x, bz = blockIdx.z, tiles_x = gridDim.x;
  int oi = 0;
  int64_t m0 = static_cast<int64_t>(blockIdx.y) * (64 * WG);
  const int32_t* ymap = nullptr;
  if constexpr (kGroup) {
    const int item = static_cast<int>(blockIdx.y);
    if (item >= *ma.g.n_items) return;
    const int64_t start = ma.g.items[3 * item + 1];
    M = ma.g.items[3 * item + 2];
    w = static_cast<const uint16_t*>(ma.g.w[bz][ma.g.items[3 * item]].data);
    xh += start * Kp;
    if (kXLo) xl += start * Kp;
    if (bz) y = ma.g.y2;
    if (ma.g.ymap) ymap = ma.g.ymap + start;
    else y += start * N;
    m0 = 0;
  }
  // Row r's place in y (an item's pair where it has a row map).
  auto yrow = [&](int64_t r) { return y + (kGroup && ymap ? static_cast<int64_t>(ymap[r]) : r) * N; };
  if constexpr (kMulti) {
    int i = 0;
    while (i + 1 < ma.n && bx >= ma.blocks[i]) bx -= ma.blocks[i], ++i;
    oi = i;
    w = ma.w[i], bias = ma.bias[i], y = ma.y[i], N = ma.N[i], sp = ma.sp[i], tiles_x = ma.tiles[i];
    bz = bx / tiles_x, bx %= tiles_x;
  }
  constexpr int BK = NA * kSwzRow, BM = 64 * WG, NB = BN / WN, kThreads = WG * WN * 128;
  constexpr int XP = kXLo ? 2 : 1, kStage = (XP * BM + BN) * BK;
  static_assert(ST >= 3, "a stage is refilled two stages after its mma were issued");
  extern __shared__ __align__(16) uint16_t smem_raw[];
  // Swizzled tiles need 1024-byte alignment; the launch adds 1 KiB for it.
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  uint16_t* smem = smem_raw + (1024 - base % 1024) % 1024 / 2;
  const int tid = threadIdx.x, wg = tid / 128 / WN, wn = tid / 128 % WN, warp = tid % 128 / 32;
  const int lane = tid % 32;
  const int64_t n0 = static_cast<int64_t>(bx) * BN;
  const int64_t r0 = m0 + 64 * wg + 16 * warp + lane / 4, c0 = n0 + NB * wn + 2 * (lane % 4);
  int64_t kbeg, kend;
  slice_range<kGrid>(sp, K, kbeg, kend, bz);
  const int tiles = static_cast<int>((kend - kbeg + BK - 1) / BK);
  // Copies stage t: x planes and w by 16 bytes in k order; past M, N or K is zero-filled. A thread
  // always copies the same column of pieces, rows kXStep (kWStep) apart, so its addresses are set
  // up once and a warp's copies cover whole 128-byte row segments.
  constexpr int kXPer = BK / 8, kXStep = kThreads / kXPer;
  constexpr int kWPer = BK / 8, kWStep = kThreads / kWPer;
  static_assert(BM % kXStep == 0 && BN % kWStep == 0 && kXStep % 8 == 0 && kWStep % 8 == 0,
                "copy passes tile the rows and keep each thread's rows in one swizzle phase");
  const int xc = tid % kXPer, xr = tid / kXPer, wq = tid % kWPer, wr = tid / kWPer;
  const int64_t xstride = static_cast<int64_t>(kXStep) * Kp;
  const int64_t wstride = static_cast<int64_t>(kWStep) * K;
  const int64_t xoff = (m0 + xr) * Kp + 8 * xc, woff = (n0 + wr) * K + 8 * wq;
  const int wtile = wq / 8 * BN * kSwzRow, xtile = xc / 8 * BM * kSwzRow;
  // A thread's copies a stage: kXN of x (kXR rows of each plane), kWN of w.
  constexpr int kXN = XP * BM / kXStep, kXR = BM / kXStep, kWN = BN / kWStep;
  auto load = [&](int t) {
    uint16_t* s = smem + (t % ST) * kStage;
    const int64_t k0 = kbeg + static_cast<int64_t>(t) * BK;
    // K % 8 == 0: a piece is all inside K or all past it.
    const bool xin = k0 + 8 * xc < Kp, win = k0 + 8 * wq < K;
#pragma unroll
    for (int u = 0; u < kXN; ++u) {
      const bool lo = u >= kXR;
      const int r = xr + (u % kXR) * kXStep;
      const bool ok = xin && m0 + r < M;
      const int64_t off = xoff + (u % kXR) * xstride + k0;
      cp_async16(s + (lo ? BM * BK : 0) + xtile + swz_at(r, 8 * (xc % 8)), (lo ? xl : xh) + (ok ? off : 0), ok);
    }
    uint16_t* sw = s + XP * BM * BK;
#pragma unroll
    for (int u = 0; u < kWN; ++u) {
      const int n = wr + u * kWStep;
      const bool ok = win && n0 + n < N;
      cp_async16(sw + wtile + swz_at(n, 8 * (wq % 8)), w + (ok ? woff + u * wstride + k0 : 0), ok);
    }
  };
  // With kFull every piece lies inside K, so (kFixed) a copy's row test and shared-memory place
  // are set up once and a stage only moves the sources on by BK.
  static_assert(kXN <= 32 && kWN <= 32, "a copy's row test is one bit of a word");
  uint32_t xmask = 0, wmask = 0;
#pragma unroll
  for (int u = 0; u < kXN; ++u) xmask |= (m0 + xr + (u % kXR) * kXStep < M ? 1u : 0u) << u;
#pragma unroll
  for (int u = 0; u < kWN; ++u) wmask |= (n0 + wr + u * kWStep < N ? 1u : 0u) << u;
  const uint32_t sbase = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const uint32_t xs0 = sbase + 2 * (xtile + swz_at(xr, 8 * (xc % 8)));
  const uint32_t ws0 = sbase + 2 * (XP * BM * BK + wtile + swz_at(wr, 8 * (wq % 8)));
  auto load_full = [&](int t) {
    const uint32_t so = 2 * (t % ST) * kStage;
    const int64_t k0 = kbeg + static_cast<int64_t>(t) * BK;
#pragma unroll
    for (int u = 0; u < kXN; ++u) {
      const bool lo = u >= kXR, ok = xmask >> u & 1;
      const uint16_t* src = (lo ? xl : xh) + xoff + (u % kXR) * xstride + k0;
      cp_async16_at(xs0 + so + 2 * ((lo ? BM * BK : 0) + (u % kXR) * kXStep * kSwzRow), ok ? src : xh, ok);
    }
#pragma unroll
    for (int u = 0; u < kWN; ++u) {
      const bool ok = wmask >> u & 1;
      cp_async16_at(ws0 + so + 2 * u * kWStep * kSwzRow, ok ? w + woff + u * wstride + k0 : w, ok);
    }
  };
  __shared__ __align__(8) uint64_t full_bar[kTma ? ST : 1];
  const uint32_t bar0 = static_cast<uint32_t>(__cvta_generic_to_shared(full_bar));
  const CUtensorMap* wmap = &maps.w[oi];
  // kTma: thread 0 fills stage t with its x and w boxes, NA swizzle rows of each.
  auto issue = [&](int t) {
    const uint32_t bar = bar0 + 8 * (t % ST), so = sbase + 2 * (t % ST) * kStage;
    const int k0 = static_cast<int>(kbeg) + t * BK;
    mbar_expect(bar, 2 * kStage);
#pragma unroll
    for (int a = 0; a < NA; ++a) {
      tma_box(so + 2 * a * BM * kSwzRow, &maps.xh, k0 + a * kSwzRow, static_cast<int>(m0), bar);
      if (kXLo)
        tma_box(so + 2 * (BM * BK + a * BM * kSwzRow), &maps.xl, k0 + a * kSwzRow, static_cast<int>(m0), bar);
      tma_box(so + 2 * (XP * BM * BK + a * BN * kSwzRow), wmap, k0 + a * kSwzRow, static_cast<int>(n0), bar);
    }
  };
  if constexpr (kTma) {
    if (tid == 0) {
#pragma unroll
      for (int i = 0; i < ST; ++i) mbar_init(bar0 + 8 * i, 1);
      asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    if (tid == 0)
      for (int t = 0; t < ST - 2 && t < tiles; ++t) issue(t);
  } else {
#pragma unroll
    for (int t = 0; t < ST - 2; ++t) {
      if (t < tiles) {
        if constexpr (kFull && kFixed) load_full(t);
        else load(t);
      }
      cp_async_commit();
    }
  }
  // The fold's running total: in registers with two warpgroups or more, in y with one (whose acc
  // leaves no room for a second copy) or with kYTot.
  constexpr bool kRegTot = !kGrid && !kYTot && WG * WN >= 2;
  float acc[NB / 2], tot[kRegTot ? NB / 2 : 1];
#pragma unroll
  for (int i = 0; i < NB / 2; ++i) acc[i] = 0.0f;
  // Stages per slice (a slice of K alone may end inside a stage): the fold walks slice by slice, so
  // no code reads acc between a slice's mma.
  const int per_slice = kGrid ? tiles : static_cast<int>((sp.ks + BK - 1) / BK);
  bool have_tot = false;
  for (int t = 0; t < tiles;) {
    const int tend = t + per_slice - t % per_slice < tiles ? t + per_slice - t % per_slice : tiles;
    for (; t < tend; ++t) {
      if constexpr (kTma) {
        mbar_wait(bar0 + 8 * (t % ST), static_cast<unsigned>(t / ST) & 1u);
        // Every warpgroup has retired the mma of stage t - 2, which the next boxes refill.
        __syncthreads();
        if (tid == 0 && t + ST - 2 < tiles) issue(t + ST - 2);
      } else {
        cp_async_wait<ST - 3>();
        fence_proxy_async();  // cp.async data to wgmma
        // Stage t has landed, and every warpgroup has retired the mma of stage t - 2, which the
        // next copies refill.
        __syncthreads();
        if (t + ST - 2 < tiles) {
          if constexpr (kFull && kFixed) load_full(t + ST - 2);
          else load(t + ST - 2);
        }
        cp_async_commit();
      }
      const uint16_t* s = smem + (t % ST) * kStage;
      const uint16_t *ah = s + 64 * wg * kSwzRow, *al = ah + BM * BK;
      const uint16_t* bw = s + XP * BM * BK + NB * wn * kSwzRow;
      const int64_t k0 = kbeg + static_cast<int64_t>(t) * BK;
      wgmma_fence();
      // Step j takes positions 16 j .. 16 j + 15 (of tile j / 4); a chunk starting past the slice is
      // not in the chain, so a stage issues the steps of its chunks that start inside it.
      auto steps = [&](auto n) {
#pragma unroll
        for (int j = 0; j < decltype(n)::value; ++j) {
          const int xa = j / 4 * BM * kSwzRow + 16 * (j % 4);
          const uint64_t db = swz_desc(bw + j / 4 * BN * kSwzRow + 16 * (j % 4));
          wgmma_bf16<NB>(acc, swz_desc(ah + xa), db);
          if (kXLo) wgmma_bf16<NB>(acc, swz_desc(al + xa), db);
        }
      };
      const int64_t left = kend - k0;
      if (kFull || left > BK - 32) steps(std::integral_constant<int, BK / 16>{});
      else if (NA == 1 || left <= 32) steps(std::integral_constant<int, 2>{});
      else if (left <= 64) steps(std::integral_constant<int, 4>{});
      else steps(std::integral_constant<int, 6>{});
      wgmma_commit();
      wgmma_wait<1>();
    }
    wgmma_wait<0>();
    if (kGrid) break;
    // The slice ended: its chain joins the running total in slice order.
    const bool last = t >= tiles;
    if constexpr (kRegTot) {
#pragma unroll
      for (int i = 0; i < NB / 2; ++i) {
        tot[i] = have_tot ? __fadd_rn(tot[i], acc[i]) : acc[i];
        acc[i] = 0.0f;
      }
      if (last) {
        for_each_acc<1, NB / 8>(r0, c0, [&](int, int j, int e, int64_t r, int64_t c) {
          const float v = tot[4 * j + e];
          if (r < M && c < N) yrow(r)[c] = bias ? __fadd_rn(v, bias[c]) : v;
        });
      }
    } else {
      for_each_acc<1, NB / 8>(r0, c0, [&](int, int j, int e, int64_t r, int64_t c) {
        if (r < M && c < N) {
          float* yr = yrow(r);
          float v = have_tot ? __fadd_rn(yr[c], acc[4 * j + e]) : acc[4 * j + e];
          if (last && bias) v = __fadd_rn(v, bias[c]);
          yr[c] = v;
        }
        acc[4 * j + e] = 0.0f;
      });
    }
    have_tot = true;
  }
  if (!kGrid) return;
  const bool partial = sp.s > 1;
  float* out = partial ? sp.part + static_cast<int64_t>(bz) * M * N : y;
#pragma unroll
  for (int j = 0; j < NB / 8; ++j)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t r = r0 + 8 * h, c = c0 + 8 * j;
      if (r >= M || c >= N) continue;
      float v0 = acc[4 * j + 2 * h], v1 = acc[4 * j + 2 * h + 1];
      if (!partial && bias) {
        v0 = __fadd_rn(v0, bias[c]);
        if (c + 1 < N) v1 = __fadd_rn(v1, bias[c + 1]);
      }
      store_pair(out + r * N, c, N, v0, v1);
    }
  const int rv = static_cast<int>(M - m0 < BM ? M - m0 : BM);
  if (partial && arrive_last(sp.counters + blockIdx.y * tiles_x + bx, sp.s))
    reduce_slices(sp, M, N, m0, rv, n0, BN, bias, y);
#else
  __trap();  // launched only where wgmma_ready() found the sm_90a code
#endif
}

}  // namespace
}  // namespace tf::cuda::mm
