// Matmul for more than 16 rows with BF16 weights on Hopper's warpgroup mma (wgmma), which gives
// mma.sync's bits for the same k16 step whatever the slots' order (tests/gpu/probe_tensor_cores.cu
// checks it on the card): the launches of the kernel in cuda_matmul_wgmma.cuh, each tile's form
// (TMA boxes for the tiles of more than 64 rows, 16-byte cp.async pieces for tile c) and the
// tile each shape takes.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/cuda/cuda_matmul.cuh"
#include "backend/cuda/cuda_hopper.cuh"
#include "backend/cuda/cuda_matmul_wgmma.cuh"
#include "backend/cuda/cuda_matmul_ws.cuh"
#include "backend/cuda/wg_tile_rule.h"

namespace tf::cuda::mm {

namespace {

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
  static const bool off = env_zero("TF_CUDA_WG_FULL");
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
// e: 128 x 256, one x plane only (cuda_matmul_ws.cuh); its own launch, launch_ws.
constexpr int kTileE = kTiles;

// Whether M x N takes tile d rather than a (wg_tile_rule.h; TF_CUDA_WG_WIDE=0|1: never or always,
// for side-by-side timing).
bool wide_tile(int64_t M, int64_t N) {
  static const int forced = env_switch("TF_CUDA_WG_WIDE");
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

// Whether tile e (cuda_matmul_ws.cuh) takes a folding launch of M x N in `slices` slices: one slice
// (its running total goes through y, whose reads at each slice's end cost more than the other
// tiles' totals in registers) and 128 x 256 blocks enough for a quarter of the target
// (TF_CUDA_WG_WS=0|1: never, or wherever it can, for side-by-side timing).
bool ws_takes(int64_t M, int64_t N, int slices) {
  static const int forced = env_switch("TF_CUDA_WG_WS");
  if (forced >= 0) return forced == 1;
  const int64_t blocks = (M + kWsRows - 1) / kWsRows * ((N + kWsCols - 1) / kWsCols);
  return slices == 1 && blocks >= kTargetBlocks / 4;
}

// How many of a thread's running totals tile e's 256-column blocks hold in registers, the rest in
// shared memory, when they take a folding launch of M x N in `slices` slices, or 0 where they do not:
// more than one slice, whole column tiles with 8-byte aligned pairs (their only stores), and waves no
// longer than the 128-column form's, whose blocks take half the time and are twice as many (one block
// an SM either way). TF_CUDA_WG_WST=0: never; =64: 64 in registers and three stages instead of 96 and
// four, for side-by-side timing.
int ws_tot_regs(int64_t M, int64_t N, int slices, const float* y, const float* bias) {
  static const int forced = [] {
    const char* e = std::getenv("TF_CUDA_WG_WST");
    return !e ? -1 : std::string(e) == "0" ? 0 : std::string(e) == "64" ? 64 : -1;
  }();
  constexpr int64_t sms = kTargetBlocks / 4;
  const int64_t blocks = (M + kWsRows - 1) / kWsRows * (N / kWsCols);
  const bool pairs = N % kWsCols == 0 && reinterpret_cast<uintptr_t>(y) % 8 == 0 &&
                     reinterpret_cast<uintptr_t>(bias) % 8 == 0;
  if (forced == 0 || slices == 1 || !pairs || 2 * ((blocks + sms - 1) / sms) > (2 * blocks + sms - 1) / sms) return 0;
  return forced > 0 ? forced : 96;
}

// Whether tile e's 128-column form, whose running total stays in registers, takes a folding launch
// of M x N in `slices` slices: more than one slice, and its blocks enough for a quarter of the
// target (TF_CUDA_WG_WSH=0: never, for side-by-side timing).
bool ws_half_takes(int64_t M, int64_t N, int slices) {
  static const bool off = env_zero("TF_CUDA_WG_WSH");
  const int64_t blocks = (M + kWsRows - 1) / kWsRows * ((N + kWsCols / 2 - 1) / (kWsCols / 2));
  return !off && slices > 1 && blocks >= kTargetBlocks / 4;
}

// Tile e: one x plane, the weights (gate and up with kGlu), y folded over the slices of sp; with
// kTotRegs the fold's total stays on chip, that many of a thread's in registers.
template <bool kGlu, int kCols = kWsCols, int kTotRegs = (kCols < kWsCols ? kCols / 2 : 0)>
void launch_ws(const uint16_t* hi, int64_t Kp, const Tensor& x, const CudaWeight& w, const CudaWeight* up,
               int act, const float* bias, Tensor y, const SplitArgs& sp, uint16_t* yh = nullptr) {
  static bool raised = false;
  if (!raised) {
    TF_CUDA_CHECK(cudaFuncSetAttribute(ws_matmul<kGlu, kCols, kTotRegs>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       ws_smem(kCols, kTotRegs)),
                  "matmul: shared memory limit");
    raised = true;
  }
  constexpr int kBn = kGlu ? ws_out_cols<kGlu>() : kCols;
  const int64_t M = x.rows, N = y.cols;
  const unsigned blocks = static_cast<unsigned>((M + kWsRows - 1) / kWsRows * ((N + kBn - 1) / kBn));
  const CUtensorMap xm = box_map(hi, Kp, M, Kp, kWsRows), wm = box_map(w.data, x.cols, N, x.cols, kBn);
  const CUtensorMap um = kGlu ? box_map(up->data, x.cols, N, x.cols, kBn) : wm;
  launch_kernel_whole(ws_matmul<kGlu, kCols, kTotRegs>, dim3(blocks), dim3(kWsThreads), ws_smem(kCols, kTotRegs),
                      M, x.cols, bias, y.data, N, sp, xm, wm, um, act, yh);
}

// A tile letter a.. from variable `name` as 0.., "0" as -2, unset or anything else as -1.
int tile_env(const char* name) {
  const char* e = std::getenv(name);
  if (!e || e[0] == 0 || e[1] != 0) return -1;
  if (e[0] == '0') return -2;
  return e[0] >= 'a' && e[0] <= 'a' + kTileE ? e[0] - 'a' : -1;
}

}  // namespace

bool launch_bf16_wgmma(CudaBackend& be, const Tensor& x, const CudaWeight& w, const float* bias,
                       Tensor y, const SplitArgs& sp, const uint16_t* ready) {
  if (w.dtype != DType::BF16 || x.cols % 8 != 0 || x.rows <= 16 || !wgmma_ready()) return false;
  // TF_CUDA_WG_TILE=a..e forces a tile for every shape it takes; TF_CUDA_WG_FEW=a..e picks the
  // tile for 17..64 rows and =0 leaves those rows to the mma.sync tiles (side-by-side timing).
  static const int forced = tile_env("TF_CUDA_WG_TILE");
  static const int few = [] {
    const int v = tile_env("TF_CUDA_WG_FEW");
    return v == -1 ? 2 : v;
  }();
  const int64_t M = x.rows, Kp = (x.cols + 31) / 32 * 32;
  const bool ws_ok = !x_lo(be) && x.cols % kSwzRow == 0 && tma_ready();
  if (ws_ok && (forced == kTileE || (forced < 0 && M <= 64 && few == kTileE))) {
    launch_ws<false>(ready ? ready : split_x(be, x, Kp), Kp, x, w, nullptr, 0, bias, y, sp);
    return true;
  }
  // Where tile e cannot take the launch, the tile the defaults pick.
  const int pin = forced == kTileE ? -1 : forced, few_pin = few == kTileE ? 2 : few;
  const int cfg = pin >= 0 ? pin : M <= 64 ? few_pin : !x_lo(be) && wide_tile(M, y.cols) ? 3 : 0;
  if (cfg < 0) return false;
  const int64_t tiles = ((M + kTileRows[cfg] - 1) / kTileRows[cfg]) *
                        ((y.cols + kTileCols[cfg] - 1) / kTileCols[cfg]);
  // The mma.sync tiles are faster where these tiles (with their slices, at 64 rows or fewer)
  // would leave half the SMs idle.
  const int64_t blocks = M <= 64 ? tiles * sp.s : tiles;
  if (pin < 0 && blocks < kTargetBlocks / 8 && !ready) return false;
  const uint16_t* hi = ready ? ready : split_x(be, x, Kp);
  const uint16_t* lo = x_lo(be) ? hi + M * Kp : nullptr;
  // Tiles enough for this kernel are enough to fold: partials cost more than the idle SMs.
  const bool fold = fold_slices(tiles, sp, M, y.cols, kTargetBlocks / 8);
  if (fold && ws_ok && M > 64 && pin < 0 && ws_takes(M, y.cols, sp.s)) {
    launch_ws<false>(hi, Kp, x, w, nullptr, 0, bias, y, sp);
    return true;
  }
  if (const int regs = fold && ws_ok && M > 64 && pin < 0 ? ws_tot_regs(M, y.cols, sp.s, y.data, bias) : 0) {
    if (regs == 64) launch_ws<false, kWsCols, 64>(hi, Kp, x, w, nullptr, 0, bias, y, sp);
    else launch_ws<false, kWsCols, 96>(hi, Kp, x, w, nullptr, 0, bias, y, sp);
    return true;
  }
  if (fold && ws_ok && M > 64 && pin < 0 && ws_half_takes(M, y.cols, sp.s)) {
    launch_ws<false, kWsCols / 2>(hi, Kp, x, w, nullptr, 0, bias, y, sp);
    return true;
  }
  with_xlo(be, [&](auto xlo) {
    constexpr bool L = decltype(xlo)::value;
    if (fold) launch_tile<false, L>(cfg, hi, lo, Kp, x, w, bias, y, sp, be);
    else launch_tile<true, L>(cfg, hi, lo, Kp, x, w, bias, y, sp, be);
  });
  return true;
}

bool glu_takes(const CudaBackend& be, const Tensor& x, const CudaWeight& gate, const CudaWeight& up, int64_t N) {
  // TF_CUDA_GLU=0 leaves gate, up and act_mul to three launches (side-by-side timing); a forced
  // tile does too, so its forms stay whole.
  static const bool off = [] {
    const char* e = std::getenv("TF_CUDA_GLU");
    return (e && std::string(e) == "0") || tile_env("TF_CUDA_WG_TILE") != -1;
  }();
  const int64_t M = x.rows;
  if (off || x_lo(be) || gate.dtype != DType::BF16 || up.dtype != DType::BF16 || M <= 64 ||
      x.cols % kSwzRow != 0 || !wgmma_ready() || !tma_ready())
    return false;
  // One slice only: a block holds gate's and up's whole chains at once.
  const int64_t blocks = (M + kWsRows - 1) / kWsRows * ((N + kWsCols / 2 - 1) / (kWsCols / 2));
  return many_rows_split(x.cols, N).s == 1 && blocks >= kTargetBlocks / 4;
}

void launch_bf16_glu(CudaBackend& be, const Tensor& x, const CudaWeight& gate, const CudaWeight& up, int act,
                     Tensor y, uint16_t* yh) {
  const int64_t Kp = (x.cols + 31) / 32 * 32;
  launch_ws<true>(split_x(be, x, Kp), Kp, x, gate, &up, act, nullptr, y, many_rows_split(x.cols, y.cols), yh);
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

// One launch of an MoE layer's expert items (WgGroup) on tile a's stages, 128 x 128 blocks that
// walk their slices.
template <bool kXLo>
void launch_group_tile(const uint16_t* hi, int64_t P, int64_t K, int64_t Kp, const WgGroup& g, int tables,
                       int max_items, float* y, int64_t N, const SplitArgs& sp) {
  constexpr int WG = kWgGroupRows / 64, BN = 128, ST = kXLo ? 4 : 6;
  constexpr int kSmem = wg_smem(WG, BN, ST, kXLo);
  with_full<1>(K, [&](auto full) {
    static bool raised = false;  // one attribute call per instantiation
    auto kern = wg_matmul<WG, 1, BN, ST, false, false, kXLo, 1, decltype(full)::value, false, false, false, true>;
    if (!raised) {
      TF_CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem),
                    "matmul: shared memory limit");
      raised = true;
    }
    WgMulti ma{};
    ma.g = g;
    const dim3 grid(static_cast<unsigned>((N + BN - 1) / BN), static_cast<unsigned>(max_items),
                    static_cast<unsigned>(tables));
    launch_kernel_whole(kern, grid, WG * 128, kSmem, hi, kXLo ? hi + P * Kp : nullptr, int64_t{0}, K, Kp, nullptr,
                        nullptr, y, N, sp, ma, WgMaps{});
  });
}

}  // namespace

void launch_bf16_wgmma_grouped(CudaBackend& be, const uint16_t* hi, int64_t P, int64_t K, const WgGroup& g,
                               int tables, int max_items, float* y, int64_t N) {
  TF_CHECK(tables >= 1 && tables <= 2 && max_items >= 1 && max_items <= 65535,
           "matmul_grouped: ", max_items, " items of ", tables, " weight tables");
  const int64_t Kp = (K + 31) / 32 * 32;
  // The grouped few-row kernel's split: a pair's bits do not follow which kernel took its item.
  const SplitArgs sp = split_for(K, N);
  with_xlo(be, [&](auto xlo) {
    launch_group_tile<decltype(xlo)::value>(hi, P, K, Kp, g, tables, max_items, y, N, sp);
  });
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
