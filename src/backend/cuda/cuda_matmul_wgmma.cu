// Matmul for more than 16 rows with BF16 weights on Hopper's warpgroup mma (wgmma), which gives
// mma.sync's bits for the same k16 step whatever the slots' order (tests/gpu/probe_tensor_cores.cu
// checks it on the card). x is split once into hi/lo planes (hi alone under --matmul-input bf16);
// both planes and the weights stream in k order (TMA boxes for the tiles of more than 64 rows,
// 16-byte cp.async pieces for tile c), so each wgmma reads one step of the order rule
// (cuda_matmul.cuh) and the chains, hence the bits, are matmul's.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/cuda/cuda_matmul.cuh"
#include "backend/cuda/cuda_hopper.cuh"
#include "backend/cuda/wg_tile_rule.h"

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
template <int WG, int WN, int BN, int ST, bool kGrid, bool kMulti = false, bool kXLo = true, int NA = 1,
          bool kFull = false, bool kYTot = false, bool kFixed = false, bool kTma = false>
__global__ void __launch_bounds__(WG * WN * 128, 1)
    wg_matmul(const uint16_t* __restrict__ xh, const uint16_t* __restrict__ xl, int64_t M,
              int64_t K, int64_t Kp, const uint16_t* __restrict__ w,
              const float* __restrict__ bias, float* __restrict__ y, int64_t N, SplitArgs sp,
              WgMulti ma, const __grid_constant__ WgMaps maps) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  grid_wait();
  grid_launch_next();
  unsigned bx = blockIdx.x, bz = blockIdx.z, tiles_x = gridDim.x;
  int oi = 0;
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
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * BM;
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
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // cp.async data to wgmma
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
      asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
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
      asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
      asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
    }
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
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
          if (r < M && c < N) y[r * N + c] = bias ? __fadd_rn(v, bias[c]) : v;
        });
      }
    } else {
      for_each_acc<1, NB / 8>(r0, c0, [&](int, int j, int e, int64_t r, int64_t c) {
        if (r < M && c < N) {
          float v = have_tot ? __fadd_rn(y[r * N + c], acc[4 * j + e]) : acc[4 * j + e];
          if (last && bias) v = __fadd_rn(v, bias[c]);
          y[r * N + c] = v;
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

// 1 in *out when this build holds the sm_90a code for the device it runs on.
__global__ void wgmma_probe(int* out) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  *out = 1;
#else
  *out = 0;
#endif
}

bool wgmma_ready() {
  static const bool ready = [] {
    // TF_CUDA_WGMMA=0: the mma.sync kernels, for side-by-side timing.
    const char* e = std::getenv("TF_CUDA_WGMMA");
    if (e && std::string(e) == "0") return false;
    int* d = nullptr;
    int h = 0;
    if (cudaMalloc(&d, sizeof(int)) != cudaSuccess) return false;
    wgmma_probe<<<1, 1, 0, stream()>>>(d);
    const bool ok = cudaMemcpy(&h, d, sizeof(int), cudaMemcpyDeviceToHost) == cudaSuccess;
    cudaFree(d);
    cudaGetLastError();  // a device without the code leaves a launch error behind
    return ok && h == 1;
  }();
  return ready;
}

// The tiles a..d listed by variable `name` (its default where unset) as bits, tile 'a' + i at bit i;
// other characters are ignored, so "none" lists none.
unsigned tile_bits(const char* name, const char* fallback) {
  const char* e = std::getenv(name);
  unsigned bits = 0;
  for (const char* c = e ? e : fallback; *c; ++c)
    if (*c >= 'a' && *c <= 'd') bits |= 1u << (*c - 'a');
  return bits;
}

// Whether tile `letter` (a..d) sets its copies' places up once where its stages are full: the
// 256-row tile, whose address work per copy competes with its running total for 128 registers
// (TF_CUDA_WG_FIXED lists the tiles that do, for side-by-side timing).
bool fixed_copies(char letter) {
  static const unsigned tiles = tile_bits("TF_CUDA_WG_FIXED", "d");
  return tiles >> (letter - 'a') & 1u;
}

// The letter of the tile of WG x WN warpgroups (kTileRows and kTileCols below).
constexpr char tile_letter(int WG, int WN) { return WG == 4 ? 'd' : WG == 2 ? 'a' : WN == 2 ? 'c' : 'b'; }

// Calls f with std::bool_constant<on>, or with false_type alone unless kForms.
template <bool kForms, class F>
void with_flag(bool on, F f) {
  if constexpr (kForms) {
    if (on) f(std::true_type{});
    else f(std::false_type{});
  } else {
    f(std::false_type{});
  }
}

// Calls f with std::bool_constant<K % (a stage's k) == 0>, wg_matmul's kFull (TF_CUDA_WG_FULL=0:
// never, for side-by-side timing).
template <int NA, class F>
void with_full(int64_t K, F f) {
  static const bool off = [] {
    const char* e = std::getenv("TF_CUDA_WG_FULL");
    return e && std::string(e) == "0";
  }();
  with_flag<true>(!off && K % (NA * kSwzRow) == 0, f);
}

// Whether tile `letter` fills its stages by TMA: the tiles of more than 64 rows, whose blocks walk
// many stages; tile c's short decode blocks keep every thread's cp.async copies, which timed as
// fast. TF_CUDA_WG_TMA lists the tiles that do ("none": no tile), for side-by-side timing; the same
// values land in the same places.
bool wg_tma(char letter) {
  static const unsigned tiles = tma_ready() ? tile_bits("TF_CUDA_WG_TMA", "abd") : 0u;
  return tiles >> (letter - 'a') & 1u;
}

static_assert(kSwzRow == 64, "a TMA box (box_map) is one swizzle row of 64 k");

// x's plane descriptors for tiles of bm rows (the lo plane follows hi, M * Kp further on).
void x_maps(WgMaps& maps, const uint16_t* hi, bool lo, int64_t M, int64_t Kp, int bm) {
  maps.xh = box_map(hi, Kp, M, Kp, bm);
  if (lo) maps.xl = box_map(hi + M * Kp, Kp, M, Kp, bm);
}

// Calls f with kFull's std::bool_constant (with_full), kFixed's (fixed_copies(letter) where the
// stages are full and copied by cp.async) and kTma's (wg_tma(letter)).
template <int NA, class F>
void with_full_fixed(int64_t K, char letter, F f) {
  with_full<NA>(K, [&](auto full) {
    constexpr bool kFull = decltype(full)::value;
    with_flag<true>(wg_tma(letter), [&](auto tma) {
      if constexpr (decltype(tma)::value)
        f(std::bool_constant<kFull>{}, std::false_type{}, tma);
      else
        with_flag<kFull>(fixed_copies(letter), [&](auto fixed) { f(std::bool_constant<kFull>{}, fixed, tma); });
    });
  });
}

// Shared-memory bytes of a tile's stages, with 1 KiB for aligning them to 1024 bytes.
constexpr int wg_smem(int WG, int BN, int ST, bool xlo = true, int NA = 1) {
  return ST * ((xlo ? 2 : 1) * 64 * WG + BN) * kSwzRow * NA * 2 + 1024;
}

template <int WG, int WN, int BN, int ST, bool kGrid, bool kXLo, int NA = 1>
void launch(const uint16_t* xh, const uint16_t* xl, int64_t Kp, const Tensor& x,
            const CudaWeight& w, const float* bias, Tensor y, SplitArgs sp, CudaBackend& be) {
  constexpr int kSmem = wg_smem(WG, BN, ST, kXLo, NA);
  // Only the 256-row tile spills a running total in registers: with one slice it keeps none
  // (TF_CUDA_WG_YTOT=1: the total in y at every split, for side-by-side timing).
  constexpr bool kYTotForm = WG == 4 && !kGrid;
  static const bool ytot = [] {
    const char* e = std::getenv("TF_CUDA_WG_YTOT");
    return e && std::string(e) == "1";
  }();
  with_full_fixed<NA>(x.cols, tile_letter(WG, WN), [&](auto full, auto fixed, auto tma) {
    with_flag<kYTotForm>(sp.s == 1 || ytot, [&](auto yt) {
      static bool raised = false;  // one attribute call per instantiation
      auto kern = wg_matmul<WG, WN, BN, ST, kGrid, false, kXLo, NA, decltype(full)::value, decltype(yt)::value,
                            decltype(fixed)::value, decltype(tma)::value>;
      const dim3 grid = tile_grid<kGrid>(be, kern, raised, kSmem, 64 * WG, BN, x, y, sp);
      WgMaps maps{};
      if constexpr (decltype(tma)::value) {
        x_maps(maps, xh, kXLo, x.rows, Kp, 64 * WG);
        maps.w[0] = box_map(w.data, x.cols, y.cols, x.cols, BN);
      }
      launch_kernel_whole(kern, grid, WG * WN * 128, kSmem, xh, xl, x.rows, x.cols, Kp,
                          static_cast<const uint16_t*>(w.data), bias, y.data, y.cols, sp, WgMulti{}, maps);
    });
  });
}

// The tiles (rows x columns, warpgroups, stages); all compute the same chains. a: 128 x 128, two
// warpgroups of 64 rows. b: 64 x 128, one warpgroup. c: 64 x 128, two warpgroups of 64 columns,
// for 17..64 rows. d (without x lo): 256 x 128, four warpgroups of 64 rows, half the operand
// bytes a product of a. Without x lo a stage is smaller, so a and b keep more of them in flight.
constexpr int kTiles = 4;
constexpr int kTileRows[kTiles] = {128, 64, 64, 256}, kTileCols[kTiles] = {128, 128, 128, 128};

// Whether M x N takes tile d rather than a (wg_tile_rule.h; TF_CUDA_WG_WIDE=0|1: never or always,
// for side-by-side timing).
bool wide_tile(int64_t M, int64_t N) {
  static const int forced = [] {
    const char* e = std::getenv("TF_CUDA_WG_WIDE");
    return e && (e[0] == '0' || e[0] == '1') && e[1] == 0 ? e[0] - '0' : -1;
  }();
  if (forced >= 0) return forced == 1;
  return wide_tile_pays(M, N, kTargetBlocks / 4);
}

// Calls f with std::integral_constant<int, ST> and <int, NA>, tile c's stages and swizzle rows of
// k a stage: one block an SM, so more weight bytes are in flight than with two blocks of four
// one-row stages; without x lo four stages of two rows, so each weight row is read in 256-byte
// runs; with it six of one row (TF_CUDA_WG_C=4|6: four or six one-row stages, side-by-side timing).
template <bool kXLo, class F>
void with_c_stages(F f) {
  using std::integral_constant;
  static const int forced = [] {
    const char* e = std::getenv("TF_CUDA_WG_C");
    return e && std::string(e) == "4" ? 4 : e && std::string(e) == "6" ? 6 : 0;
  }();
  if (forced == 4) f(integral_constant<int, 4>{}, integral_constant<int, 1>{});
  else if (forced == 6 || kXLo) f(integral_constant<int, 6>{}, integral_constant<int, 1>{});
  else f(integral_constant<int, 4>{}, integral_constant<int, 2>{});
}

template <bool kGrid, bool kXLo>
void launch_tile(int cfg, const uint16_t* hi, const uint16_t* lo, int64_t Kp, const Tensor& x,
                 const CudaWeight& w, const float* bias, Tensor y, const SplitArgs& sp,
                 CudaBackend& be) {
  switch (cfg) {
    case 0: launch<2, 1, 128, kXLo ? 4 : 6, kGrid, kXLo>(hi, lo, Kp, x, w, bias, y, sp, be); break;
    case 1: launch<1, 1, 128, kXLo ? 6 : 8, kGrid, kXLo>(hi, lo, Kp, x, w, bias, y, sp, be); break;
    case 3:
      // With x lo a stage of 256 rows leaves room for two stages only: tile a instead.
      if constexpr (kXLo) launch<2, 1, 128, 4, kGrid, kXLo>(hi, lo, Kp, x, w, bias, y, sp, be);
      else launch<4, 1, 128, 4, kGrid, kXLo>(hi, lo, Kp, x, w, bias, y, sp, be);
      break;
    default:
      with_c_stages<kXLo>([&](auto st, auto na) {
        launch<1, 2, 128, decltype(st)::value, kGrid, kXLo, decltype(na)::value>(hi, lo, Kp, x, w, bias, y, sp, be);
      });
      break;
  }
}

// A tile letter a.. from variable `name` as 0.., "0" as -2, unset or anything else as -1.
int tile_env(const char* name) {
  const char* e = std::getenv(name);
  if (!e || e[0] == 0 || e[1] != 0) return -1;
  if (e[0] == '0') return -2;
  return e[0] >= 'a' && e[0] < 'a' + kTiles ? e[0] - 'a' : -1;
}

}  // namespace

bool launch_bf16_wgmma(CudaBackend& be, const Tensor& x, const CudaWeight& w, const float* bias,
                       Tensor y, const SplitArgs& sp) {
  if (w.dtype != DType::BF16 || x.cols % 8 != 0 || x.rows <= 16 || !wgmma_ready()) return false;
  // TF_CUDA_WG_TILE=a..d forces a tile for every shape it takes; TF_CUDA_WG_FEW=a..d picks the
  // tile for 17..64 rows and =0 leaves those rows to the mma.sync tiles (side-by-side timing).
  static const int forced = tile_env("TF_CUDA_WG_TILE");
  static const int few = [] {
    const int v = tile_env("TF_CUDA_WG_FEW");
    return v == -1 ? 2 : v;
  }();
  const int64_t M = x.rows, Kp = (x.cols + 31) / 32 * 32;
  const int cfg = forced >= 0 ? forced : M <= 64 ? few : !x_lo(be) && wide_tile(M, y.cols) ? 3 : 0;
  if (cfg < 0) return false;
  const int64_t tiles = ((M + kTileRows[cfg] - 1) / kTileRows[cfg]) *
                        ((y.cols + kTileCols[cfg] - 1) / kTileCols[cfg]);
  // The mma.sync tiles are faster where these tiles (with their slices, at 64 rows or fewer)
  // would leave half the SMs idle.
  const int64_t blocks = M <= 64 ? tiles * sp.s : tiles;
  if (forced < 0 && blocks < kTargetBlocks / 8) return false;
  const uint16_t* hi = split_x(be, x, Kp);
  const uint16_t* lo = x_lo(be) ? hi + M * Kp : nullptr;
  // Tiles enough for this kernel are enough to fold: partials cost more than the idle SMs.
  const bool fold = fold_slices(tiles, sp, M, y.cols, kTargetBlocks / 8);
  with_xlo(be, [&](auto xlo) {
    constexpr bool L = decltype(xlo)::value;
    if (fold) launch_tile<false, L>(cfg, hi, lo, Kp, x, w, bias, y, sp, be);
    else launch_tile<true, L>(cfg, hi, lo, Kp, x, w, bias, y, sp, be);
  });
  return true;
}

bool wgmma_many_takes(const Tensor& x, const std::vector<const CudaWeight*>& ws) {
  // Tile c at 17..64 rows, where q/k/v or gate/up of a decode round share one launch; tile a
  // past 64 rows (a prefill chunk), folding slices, where some output alone has fewer tiles than
  // launch_bf16_wgmma takes and together they have enough (k and v beside q).
  static const bool forced = tile_env("TF_CUDA_WG_TILE") >= 0 || tile_env("TF_CUDA_WG_FEW") != -1;
  if (forced || x.rows <= 16 || x.cols % 8 != 0 || ws.size() > static_cast<size_t>(kWgMulti) || !wgmma_ready())
    return false;
  for (const CudaWeight* w : ws)
    if (w->dtype != DType::BF16) return false;
  if (x.rows <= 64) return true;
  const int64_t row_tiles = (x.rows + kTileRows[0] - 1) / kTileRows[0];
  int64_t all = 0;
  bool short_one = false;
  for (const CudaWeight* w : ws) {
    const int64_t t = row_tiles * ((w->rows + kTileCols[0] - 1) / kTileCols[0]);
    all += t;
    short_one = short_one || t < kTargetBlocks / 8;
  }
  return short_one && all >= kTargetBlocks / 8;
}

namespace {

// One launch of the matmuls in ma: WG x WN warpgroups of BN columns; kGrid: slices as blocks
// (partials carved from scratch), else each block folds its output's slices in place.
template <int WG, int WN, int BN, int ST, bool kGrid, bool kXLo, int NA = 1>
void launch_multi_tile(CudaBackend& be, const uint16_t* hi, int64_t Kp, const Tensor& x, WgMulti& ma) {
  const int64_t M = x.rows;
  if (kGrid) carve_partials(be, M, ma.n, [&](int i) { return SplitOut{&ma.sp[i], ma.N[i], ma.tiles[i]}; });
  unsigned blocks = 0;
  for (int i = 0; i < ma.n; ++i) {
    ma.blocks[i] = ma.tiles[i] * (kGrid ? static_cast<unsigned>(ma.sp[i].s) : 1u);
    blocks += ma.blocks[i];
  }
  constexpr int kSmem = wg_smem(WG, BN, ST, kXLo, NA);
  with_full_fixed<NA>(x.cols, tile_letter(WG, WN), [&](auto full, auto fixed, auto tma) {
    static bool raised = false;  // one attribute call per instantiation
    auto kern = wg_matmul<WG, WN, BN, ST, kGrid, true, kXLo, NA, decltype(full)::value, false, decltype(fixed)::value,
                          decltype(tma)::value>;
    if (!raised) {
      TF_CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem),
                    "matmul: shared memory limit");
      raised = true;
    }
    const dim3 grid(blocks, static_cast<unsigned>((M + 64 * WG - 1) / (64 * WG)));
    WgMaps maps{};
    if constexpr (decltype(tma)::value) {
      x_maps(maps, hi, kXLo, M, Kp, 64 * WG);
      for (int i = 0; i < ma.n; ++i) maps.w[i] = box_map(ma.w[i], x.cols, ma.N[i], x.cols, BN);
    }
    launch_kernel_whole(kern, grid, WG * WN * 128, kSmem, hi, kXLo ? hi + M * Kp : nullptr, M, x.cols, Kp, nullptr,
                        nullptr, nullptr, int64_t{0}, SplitArgs{}, ma, maps);
  });
}

}  // namespace

void launch_bf16_wgmma_many(CudaBackend& be, const Tensor& x,
                            const std::vector<const CudaWeight*>& ws,
                            const std::vector<const float*>& biases,
                            const std::vector<Tensor>& ys) {
  constexpr int BN = 128;
  const int64_t M = x.rows, K = x.cols, Kp = (K + 31) / 32 * 32;
  WgMulti ma{};  // unused outputs zero, so a graphed round's arguments compare equal
  ma.n = static_cast<int>(ws.size());
  for (int i = 0; i < ma.n; ++i) {
    ma.w[i] = static_cast<const uint16_t*>(ws[i]->data);
    ma.bias[i] = biases[i], ma.y[i] = ys[i].data, ma.N[i] = ys[i].cols;
    ma.tiles[i] = static_cast<unsigned>((ma.N[i] + BN - 1) / BN);
    ma.sp[i] = many_rows_split(K, ma.N[i]);
  }
  const uint16_t* hi = split_x(be, x, Kp);
  with_xlo(be, [&](auto xlo) {
    constexpr bool L = decltype(xlo)::value;
    if (M <= 64) {
      with_c_stages<L>([&](auto st, auto na) {
        launch_multi_tile<1, 2, BN, decltype(st)::value, true, L, decltype(na)::value>(be, hi, Kp, x, ma);
      });
    } else {
      launch_multi_tile<2, 1, BN, L ? 4 : 6, false, L>(be, hi, Kp, x, ma);
    }
  });
}

}  // namespace tf::cuda::mm
