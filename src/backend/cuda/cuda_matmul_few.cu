// Matmul for few rows (M <= 16): the launches of the kernel in cuda_matmul_few.cuh for one weight
// (matmul), several of one x (matmul_many) or an MoE layer's experts (matmul_grouped), and the
// form each takes. The order rule is in cuda_matmul.cuh; every path here gives matmul's bits.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <type_traits>
#include <vector>

#include "backend/cuda/cuda_matmul.cuh"
#include "backend/cuda/cuda_matmul_few.cuh"

namespace tf::cuda {

namespace mm {
namespace {

// Whether launches of up to 8 rows preload each next step's x (TF_CUDA_SKINNY_PREX=0: never, for
// side-by-side timing; same arithmetic and order, so the same bits).
bool skinny_prex() {
  static const bool on = !env_zero("TF_CUDA_SKINNY_PREX");
  return on;
}

// A launch's weight flags (kWVec, kWFirst); a few-row launch reads each weight byte once.
int weight_flags(bool vec) { return (vec ? kWVec : 0) | (weights_evict_first() ? kWFirst : 0); }

// Whether MoE expert launches of up to 8 rows an item split x once over a block's k range when it
// fits: their blocks walk few steps (TF_CUDA_SKINNY_WHOLE=0: never, for side-by-side timing; the
// same operand words, so the same bits). Plain few-row launches keep the per-step split, which
// timed faster at long k.
bool skinny_whole() {
  static const bool on = !env_zero("TF_CUDA_SKINNY_WHOLE");
  return on;
}

// The whole-range x's bytes for an expert launch of items of up to `rows` rows whose blocks walk
// k_span values, or 0 when that launch splits x step by step.
size_t whole_x_smem(int64_t rows, int64_t k_span, bool lo) {
  if (rows > 8 || !skinny_whole()) return 0;
  const size_t b = whole_x_bytes(rows, k_span, lo);
  return b <= kWholeXMaxBytes ? b : 0;
}

// Whether a grouped launch of `folded` (tile, item) blocks runs its slices as blocks of their
// own: where its one-tile blocks would pass a wave (blocks1; its warps then own two tiles), its
// slices hold two or more steps, and the slice blocks number at most 24 waves. There slice
// blocks timed faster; at one wave, with one-step slices, or past 24 waves folding did.
// TF_CUDA_MOE_SLICES=0: never; =n: up to n slice blocks instead (side-by-side timing). The same
// chains and fold order, so the same bits.
bool moe_slice_blocks(int64_t blocks1, int64_t folded, const SplitArgs& sp, int64_t K) {
  static const int64_t cap = [] {
    const char* e = std::getenv("TF_CUDA_MOE_SLICES");
    return e ? std::atoll(e) : 24 * kTargetBlocks;
  }();
  return slice_blocks_take(blocks1, folded, K, sp.ks, kTargetBlocks, 32 * kSkinnyUnroll, cap);
}

// The k values a block of split sp walks.
int64_t block_span(const SplitArgs& sp, int64_t K) { return sp.fold || sp.s == 1 ? K : sp.ks; }

// Calls f with std::bool_constant<kPreX>: true when `fits` (up to 8 rows an item), skinny_prex()
// and the weights are not F16, whose kernels spill with the preload (and were never timed with it).
template <int WT, class F>
void with_prex(bool fits, F f) {
  if constexpr (WT == kF16) f(std::false_type{});
  else if (fits && skinny_prex()) f(std::true_type{});
  else f(std::false_type{});
}

// The cluster size of a plain few-row launch whose tiles run `slices` slice blocks: the slices,
// where the device has clusters and they number 2..TF_CUDA_SKINNY_CLUSTER (default 8, the
// portable size; 0: never, for side-by-side timing), and the tile's blocks then sum its partials
// in shared memory; else 1, and the last block of a tile to arrive sums them from global memory.
// Either way each sum runs in slice order, so the bits are the same.
unsigned skinny_cluster(int slices) {
  static const int cap = [] {
    const char* e = std::getenv("TF_CUDA_SKINNY_CLUSTER");
    return e ? std::min(std::atoi(e), 16) : 8;
  }();
  return slices > 1 && slices <= cap && cluster_on() ? static_cast<unsigned>(slices) : 1u;
}

// The cluster size a few-row launch of kern over grid (one cluster a tile, its slices along y)
// runs with: skinny_cluster's where its `live` blocks (a kMulti launch's outputs of fewer slices
// leave the rest at once) fit the clusters the card holds at once, else 1: past that some tiles'
// clusters wait for a second wave, which costs more than the partials' pass saves. The card's
// count is asked once per kernel and size.
template <class K>
unsigned fit_cluster(K* kern, dim3 grid, int64_t live) {
  const unsigned c = skinny_cluster(static_cast<int>(grid.y));
  if (c <= 1) return 1;
  struct Fit {
    const void* f;
    unsigned c;
    int n;
  };
  thread_local std::vector<Fit> fits;
  const void* f = reinterpret_cast<const void*>(kern);
  int n = -1;
  for (const Fit& x : fits)
    if (x.f == f && x.c == c) n = x.n;
  if (n < 0) {
    if (c > 8) (void)cudaFuncSetAttribute(kern, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
    cudaLaunchAttribute at = {};
    at.id = cudaLaunchAttributeClusterDimension;
    at.val.clusterDim = {1, c, 1};
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(1, c);
    cfg.blockDim = dim3(kSkinnyWarps * 32);
    cfg.attrs = &at;
    cfg.numAttrs = 1;
    // Code built for an older arch (JIT on this card) has no cluster sum: __CUDA_ARCH__ < 900 there.
    cudaFuncAttributes fa = {};
    if (cudaFuncGetAttributes(&fa, kern) != cudaSuccess || fa.ptxVersion < 90 ||
        cudaOccupancyMaxActiveClusters(&n, kern, &cfg) != cudaSuccess) {
      (void)cudaGetLastError();
      n = 0;
    }
    fits.push_back({f, c, n});
  }
  return live <= static_cast<int64_t>(n) * c ? c : 1u;
}

// Column tiles of 8 a warp of the few-row kernel owns: two once one-tile blocks would pass one
// wave (blocks1 of them), so a warp's two chains overlap; TF_CUDA_SKINNY_TN=1|2 forces it
// (side-by-side timing). The chains, and so the bits, are the same.
int skinny_tn(int64_t blocks1) {
  static const int forced = [] {
    const char* e = std::getenv("TF_CUDA_SKINNY_TN");
    const int v = e ? std::atoi(e) : 0;
    return v == 1 || v == 2 ? v : 0;
  }();
  return forced ? forced : blocks1 > kTargetBlocks ? 2 : 1;
}

// Calls f with std::integral_constant<int, TN> for tn (1 or 2).
template <class F>
void with_tn_of(int tn, F f) {
  if (tn == 2) f(std::integral_constant<int, 2>{});
  else f(std::integral_constant<int, 1>{});
}

// Calls f with std::integral_constant<int, TN> for skinny_tn(blocks1).
template <class F>
void with_tn(int64_t blocks1, F f) {
  with_tn_of(skinny_tn(blocks1), f);
}

// Whether a plain few-row launch whose one-tile blocks miss the card's clusters takes two column
// tiles a warp, where half as many blocks fit them: only for slices of at most four of those
// blocks' steps, short enough that skipping the partials' pass outweighs half the warps in flight.
// TF_CUDA_SKINNY_WIDE=0: never, for side-by-side timing. The chains, so the bits, are the same.
bool skinny_wide(int64_t ks) {
  static const bool on = !env_zero("TF_CUDA_SKINNY_WIDE");
  return on && ks <= 4 * 32 * (kSkinnyUnroll / 2);
}

// Whether a launch of 9..16 rows of BF16 or F16 weights in bf16 mode reads x as split_x's bf16
// words, preloaded a step ahead (kWords), instead of splitting f32 rows each step (Q8_0 launches
// always take f32 rows); the operand words are the same. TF_CUDA_SKINNY_WORDS=0: never (timing).
template <int WT>
bool skinny_words(const CudaBackend& be, int64_t rows) {
  static const bool on = !env_zero("TF_CUDA_SKINNY_WORDS");
  return on && WT != kQ8 && rows > 8 && !x_lo(be);
}

template <int WT>
void launch_skinny(CudaBackend& be, const Tensor& x, const CudaWeight& w, const float* bias,
                   Tensor y, SplitArgs sp) {
  const bool words = skinny_words<WT>(be, x.rows);
  const float* xp = words ? reinterpret_cast<const float*>(split_x(be, x, (x.cols + 31) / 32 * 32)) : x.data;
  const bool vec_x = x.cols % 4 == 0 && reinterpret_cast<uintptr_t>(x.data) % 16 == 0;
  const bool vec_w = WT == kQ8 || w.cols % 8 == 0;
  auto grid_of = [&](int tn) {
    return dim3(static_cast<unsigned>((y.cols + skinny_cols(tn) - 1) / skinny_cols(tn)), static_cast<unsigned>(sp.s));
  };
  with_prex<WT>(x.rows <= 8, [&](auto prex) {
    with_wt_xlo<WT>(be, [&](auto xlo) {
      constexpr bool P = decltype(prex)::value, L = decltype(xlo)::value;
      auto kern_of = [&](auto tn) {
        constexpr int TN = decltype(tn)::value;
        if constexpr (!L) {
          if (words) return skinny_matmul<WT, true, false, false, TN, false, L, false, true>;
        }
        return x.rows > 8 ? skinny_matmul<WT, true, false, false, TN, false, L>
                          : skinny_matmul<WT, false, false, false, TN, P, L>;
      };
      // The cluster size of the launch with tn column tiles a warp, every block live.
      auto fit = [&](int tn) {
        const dim3 g = grid_of(tn);
        const int64_t live = int64_t{g.x} * g.y;
        return tn == 2 ? fit_cluster(kern_of(std::integral_constant<int, 2>{}), g, live)
                       : fit_cluster(kern_of(std::integral_constant<int, 1>{}), g, live);
      };
      int tn = skinny_tn(int64_t{grid_of(1).x} * sp.s);
      unsigned cluster = fit(tn);
      if (tn == 1 && cluster == 1 && skinny_wide(sp.ks)) {
        const unsigned c2 = fit(2);
        if (c2 > 1) tn = 2, cluster = c2;
      }
      sp.cluster = cluster > 1;
      const dim3 grid = grid_of(tn);
      if (sp.s > 1 && !sp.cluster) {
        sp.part = be.matmul_partials(static_cast<uint64_t>(sp.s) * x.rows * y.cols);
        sp.counters = be.matmul_counters(grid.x);
      }
      with_tn_of(tn, [&](auto t) {
        launch_kernel_cluster(cluster, kern_of(t), grid, kSkinnyWarps * 32, 0, xp, x.rows, x.cols, w.data,
                              w.scales, bias, y.data, y.cols, vec_x, weight_flags(vec_w), sp, GroupedRows{}, MultiArgs{});
      });
    });
  });
}

template <int WT>
void launch_multi(CudaBackend& be, const Tensor& x, const std::vector<const CudaWeight*>& ws,
                  const std::vector<const float*>& biases, const std::vector<Tensor>& ys) {
  SplitArgs sps[kMaxMulti];
  int64_t blocks1 = 0;
  for (size_t i = 0; i < ys.size(); ++i) {
    sps[i] = split_for(x.cols, ys[i].cols);
    blocks1 += (ys[i].cols + skinny_cols(1) - 1) / skinny_cols(1) * sps[i].s;
  }
  with_tn(blocks1, [&](auto tn) {
    constexpr int TN = decltype(tn)::value, BN = skinny_cols(TN);
    MultiArgs ma{};  // unused outputs zero, so a graphed round's arguments compare equal
    ma.n = static_cast<int>(ws.size());
    int tiles = 0, slices = 1;
    int64_t live = 0;  // blocks that run a slice
    bool vec_w = true;
    for (int i = 0; i < ma.n; ++i) {
      MultiOut& o = ma.o[i];
      o.w = ws[i]->data, o.scales = ws[i]->scales, o.bias = biases[i], o.y = ys[i].data;
      o.N = ys[i].cols;
      o.tiles = static_cast<int>((o.N + BN - 1) / BN);
      o.sp = sps[i];
      tiles += o.tiles;
      live += static_cast<int64_t>(o.tiles) * o.sp.s;
      slices = std::max(slices, o.sp.s);
      vec_w = vec_w && (WT == kQ8 || ws[i]->cols % 8 == 0);
    }
    const bool vec_x = x.cols % 4 == 0 && reinterpret_cast<uintptr_t>(x.data) % 16 == 0;
    const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(slices));
    const bool words = skinny_words<WT>(be, x.rows);
    const float* xp = words ? reinterpret_cast<const float*>(split_x(be, x, (x.cols + 31) / 32 * 32)) : x.data;
    with_prex<WT>(x.rows <= 8, [&](auto prex) {
      with_wt_xlo<WT>(be, [&](auto xlo) {
        constexpr bool P = decltype(prex)::value, L = decltype(xlo)::value;
        auto kern = x.rows > 8 ? skinny_matmul<WT, true, false, true, TN, false, L>
                               : skinny_matmul<WT, false, false, true, TN, P, L>;
        if constexpr (!L) {
          if (words) kern = skinny_matmul<WT, true, false, true, TN, false, L, false, true>;
        }
        // In clusters of every slice block of a tile: an output of fewer slices leaves its extra blocks.
        const unsigned cluster = fit_cluster(kern, grid, live);
        if (cluster > 1) {
          for (int i = 0; i < ma.n; ++i) ma.o[i].sp.cluster = true;
        } else {
          carve_partials(be, x.rows, ma.n,
                         [&](int i) { return SplitOut{&ma.o[i].sp, ma.o[i].N, ma.o[i].tiles}; });
        }
        launch_kernel_cluster(cluster, kern, grid, kSkinnyWarps * 32, 0, xp, x.rows, x.cols, nullptr, nullptr,
                              nullptr, nullptr, 0, vec_x, weight_flags(vec_w), SplitArgs{}, GroupedRows{}, ma);
      });
    });
  });
}

template <int WT>
void launch_grouped(CudaBackend& be, const float* x, int64_t K, const GroupedRows& gr, float* y,
                    int64_t N, bool vec_w) {
  const int tables = gr.w2 ? 2 : 1;
  const int64_t blocks1 = (N + skinny_cols(1) - 1) / skinny_cols(1) * tables * gr.max_items;
  with_tn(blocks1, [&](auto tn) {
    constexpr int TN = decltype(tn)::value, BN = skinny_cols(TN);
    SplitArgs sp = split_for(K, N);
    const int64_t tiles = (N + BN - 1) / BN;
    // Enough (tile, item) blocks to fill the card: each walks its slices and folds them itself,
    // with no partials or second pass (TF_CUDA_FOLD=0: never, for side-by-side timing), unless
    // moe_slice_blocks says otherwise.
    const int64_t folded = tiles * tables * gr.max_items;
    sp.fold = sp.s > 1 && !fold_off() && folded >= kTargetBlocks / 2 &&
              !moe_slice_blocks(blocks1, folded, sp, K);
    const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(sp.fold ? 1 : sp.s),
                    static_cast<unsigned>(tables * gr.max_items));
    if (sp.s > 1 && !sp.fold) {
      sp.part = be.matmul_partials(static_cast<uint64_t>(tables * sp.s) * gr.pairs * N);
      sp.counters = be.matmul_counters(static_cast<uint64_t>(grid.x) * grid.z);
    }
    const bool vec_x = K % 4 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0;
    const size_t whole = whole_x_smem(gr.rows_max, block_span(sp, K), WT != kQ8 && x_lo(be));
    // Items of at most 8 rows take the 8-row tile, as a plain matmul of that many rows does.
    // The one-tile grouped form spills at its register cap with the preload, so it goes without.
    with_prex<WT>(gr.rows_max <= 8 && TN == 2, [&](auto prex) {
      with_wt_xlo<WT>(be, [&](auto xlo) {
        constexpr bool P = decltype(prex)::value, L = decltype(xlo)::value;
        auto kern = whole ? skinny_matmul<WT, false, true, false, TN, false, L, true>
                    : gr.rows_max > 8 ? skinny_matmul<WT, true, true, false, TN, false, L>
                                      : skinny_matmul<WT, false, true, false, TN, P && TN == 2, L>;
        launch_kernel(kern, grid, kSkinnyWarps * 32, whole, x, gr.pairs, K, nullptr, nullptr, nullptr, y,
                      N, vec_x, weight_flags(vec_w), sp, gr, MultiArgs{});
      });
    });
  });
}

}  // namespace

void launch_few_rows(CudaBackend& be, const Tensor& x, const CudaWeight& w, const float* bias,
                     Tensor y, const SplitArgs& sp) {
  switch (w.dtype) {
    case DType::BF16: launch_skinny<kBF16>(be, x, w, bias, y, sp); break;
    case DType::F16: launch_skinny<kF16>(be, x, w, bias, y, sp); break;
    default: launch_skinny<kQ8>(be, x, w, bias, y, sp); break;
  }
}

}  // namespace mm

using namespace mm;

void CudaBackend::matmul_grouped(const float* x, int64_t K, const GroupedRows& gr, DType dt,
                                 int64_t N, float* y) {
  TF_CHECK(gr.max_items >= 1 && gr.max_items * (gr.w2 ? 2 : 1) <= 65535 && gr.x_div >= 1 &&
               gr.pairs >= 1 && gr.rows_max >= 1 && gr.rows_max <= 16,
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
  // Like weights run in one launch at up to 16 rows, and past that on the warpgroup tiles where
  // they take them; anything else as one matmul each.
  bool one = x.rows >= 1 && !outs.empty() && outs.size() <= static_cast<size_t>(kMaxMulti);
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
  if (one && x.rows > 16) one = wgmma_many_takes(x, ws);
  if (!one) {
    // Each output's warpgroup launch reads the same planes of x: split it once, unless an output
    // overwrites x.
    bool keep = true;
    for (const MatmulOut& o : outs) keep = keep && o.y.data != x.data;
    // Disarmed on every way out, a throw included: a later x at the same address is another x.
    struct Disarm {
      SplitOnce& once;
      ~Disarm() { once = {}; }
    } disarm{split_once};
    if (keep) split_once = {x.data, x.rows, x.cols, (x.cols + 31) / 32 * 32, nullptr};
    for (const MatmulOut& o : outs) matmul(x, *o.w, o.bias, o.y);
    return;
  }
  const ProfScope prof(*this, "matmul_many", &outs[0].w->name, x.rows);
  check_tensor(x, "matmul", "x");
  for (const Tensor& y : ys) check_tensor(y, "matmul", "y");
  if (x.rows > 16) {
    launch_bf16_wgmma_many(*this, x, ws, biases, ys);
  } else {
    switch (ws[0]->dtype) {
      case DType::BF16: launch_multi<kBF16>(*this, x, ws, biases, ys); break;
      case DType::F16: launch_multi<kF16>(*this, x, ws, biases, ys); break;
      default: launch_multi<kQ8>(*this, x, ws, biases, ys); break;
    }
  }
  check_launch("matmul");
}

}  // namespace tf::cuda
