// Matmul for more than 16 rows with BF16 weights: x is split once into bf16 hi and lo planes (hi
// alone under --matmul-input bf16), then tiles of those planes and of w stream into shared memory
// by cp.async through a ring of stages, so loads of later k tiles are in flight while a tile
// computes. The mma operands, their
// slots and the chains are the order rule's (cuda_matmul.cuh), so the bits are matmul's.
#include <algorithm>
#include <cstdint>

#include "backend/cuda/cuda_matmul.cuh"

namespace tf::cuda::mm {

namespace {

// The 16-byte chunk of row `row` where chunk c of a BK-wide tile row is kept: the 32-byte pieces
// of four consecutive rows land on distinct banks, so a half warp's 8-byte reads of one piece in
// each of four rows are conflict-free (rows of 128 bytes: piece p ^ (row % 4); of 64 bytes, two to
// a bank line: p ^ (row / 2 % 2)).
template <int BK>
__device__ __forceinline__ int chunk_at(int row, int c) {
  return BK == 32 ? c ^ ((row >> 1 & 1) << 1) : c ^ ((row & 3) << 1);
}

// One block computes a BM x BN tile of y through ST stages of [x hi | x lo | w] tiles of BK k
// (one or two chunks of the order rule; no x lo without kXLo). kGrid: blockIdx.z is the slice and
// partials meet in sp.part; otherwise the block walks every slice and folds each slice's chain
// into y as it ends.
template <int BM, int BN, int BK, int WM, int WN, int ST, int kMinBlocks, bool kGrid, bool kXLo>
__global__ void __launch_bounds__(WM * WN * 32, kMinBlocks)
    pipe_matmul(const uint16_t* __restrict__ xh, const uint16_t* __restrict__ xl, int64_t M,
                int64_t K, int64_t Kp, const uint16_t* __restrict__ w,
                const float* __restrict__ bias, float* __restrict__ y, int64_t N, SplitArgs sp) {
  grid_wait();
  grid_launch_next();
  constexpr int kThreads = WM * WN * 32, TM = BM / WM / 16, TN = BN / WN / 8;
  constexpr int XP = kXLo ? 2 : 1, kRows = XP * BM + BN, kStage = kRows * BK;
  constexpr int kCpr = BK / 8;  // 16-byte chunks a row
  static_assert(BK == 32 || BK == 64, "one or two chunks a tile");
  static_assert(kSliceUnit % BK == 0, "a tile never crosses a slice");
  static_assert(kRows * kCpr % kThreads == 0, "a stage's 16-byte copies split evenly over threads");
  extern __shared__ __align__(16) uint16_t smem[];
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t4 = lane % 4;
  const int wm = warp / WN, wn = warp % WN;
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * BM, n0 = static_cast<int64_t>(blockIdx.x) * BN;
  const int64_t r0 = m0 + wm * TM * 16 + g, c0 = n0 + wn * TN * 8 + t4 * 2;  // this lane's first
  int64_t kbeg, kend;
  slice_range<kGrid>(sp, K, kbeg, kend);
  const int tiles = static_cast<int>((kend - kbeg + BK - 1) / BK);
  // Issues the copies of tile t into its stage; rows past M or N and k past K are zero-filled.
  auto load = [&](int t) {
    uint16_t* s = smem + (t % ST) * kStage;
    const int64_t k0 = kbeg + static_cast<int64_t>(t) * BK;
#pragma unroll
    for (int u = 0; u < kRows * kCpr / kThreads; ++u) {
      const int i = tid + u * kThreads, row = i / kCpr, c = i % kCpr;
      const uint16_t* src;
      bool ok;
      if (row < XP * BM) {
        const int64_t gr = m0 + row % BM;
        ok = gr < M && k0 + 8 * c < Kp;
        src = (row < BM ? xh : xl) + (ok ? gr * Kp + k0 + 8 * c : 0);
      } else {
        const int64_t gn = n0 + (row - XP * BM), gk = k0 + 8 * c;
        ok = gn < N && gk < K;  // K % 8 == 0: a copy is all inside K or all past it
        src = w + (ok ? gn * K + gk : 0);
      }
      cp_async16(s + row * BK + 8 * chunk_at<BK>(row, c), src, ok);
    }
  };
#pragma unroll
  for (int t = 0; t < ST - 1; ++t) {
    if (t < tiles) load(t);
    cp_async_commit();
  }
  float acc[TM][TN][4];
  zero_acc(acc);
  bool have_tot = false;
  for (int t = 0; t < tiles; ++t) {
    cp_async_wait<ST - 2>();
    __syncthreads();  // tile t has landed and every warp is done with the stage refilled next
    if (t + ST - 1 < tiles) load(t + ST - 1);
    cp_async_commit();
    const uint16_t* s = smem + (t % ST) * kStage;
    const uint16_t *Ah = s, *Al = s + BM * BK, *Bs = s + XP * BM * BK;
    const int64_t k0 = kbeg + static_cast<int64_t>(t) * BK;
#pragma unroll
    for (int cb = 0; cb < BK / 32; ++cb) {
      if (k0 + 32 * cb >= kend) break;  // a chunk starting past the slice is not in the chain
#pragma unroll
      for (int st = 0; st < 2; ++st) {
        // This thread's 4 k of step st: chunk c, half h (8 bytes), in every operand row.
        const int c = cb * 4 + 2 * st + (t4 & 1), h = 4 * (t4 >> 1);
        uint2 b[TN];
#pragma unroll
        for (int j = 0; j < TN; ++j) {
          const int rb = wn * TN * 8 + j * 8 + g;
          b[j] = *reinterpret_cast<const uint2*>(Bs + rb * BK + 8 * chunk_at<BK>(rb, c) + h);
        }
#pragma unroll
        for (int i = 0; i < TM; ++i) {
          const int r = wm * TM * 16 + i * 16 + g;
          const int o0 = r * BK + 8 * chunk_at<BK>(r, c) + h;
          const int o1 = (r + 8) * BK + 8 * chunk_at<BK>(r + 8, c) + h;
          const uint2 h0 = *reinterpret_cast<const uint2*>(Ah + o0);
          const uint2 h1 = *reinterpret_cast<const uint2*>(Ah + o1);
          const uint2 l0 = kXLo ? *reinterpret_cast<const uint2*>(Al + o0) : uint2{};
          const uint2 l1 = kXLo ? *reinterpret_cast<const uint2*>(Al + o1) : uint2{};
          const uint32_t a[4] = {h0.x, h1.x, h0.y, h1.y};
          const uint32_t al[4] = {l0.x, l1.x, l0.y, l1.y};
#pragma unroll
          for (int j = 0; j < TN; ++j) {
            mma_bf16(acc[i][j], a, b[j].x, b[j].y);
            if (kXLo) mma_bf16(acc[i][j], al, b[j].x, b[j].y);
          }
        }
      }
    }
    const int64_t k1 = k0 + BK;
    if (!kGrid && (k1 >= K || k1 % sp.ks == 0)) {
      // The slice ends here: its chain joins the running total (kept in y) in slice order.
      const bool last = k1 >= K;
      for_each_acc<TM, TN>(r0, c0, [&](int i, int j, int e, int64_t r, int64_t c) {
        if (r < M && c < N) {
          float v = have_tot ? __fadd_rn(y[r * N + c], acc[i][j][e]) : acc[i][j][e];
          if (last && bias) v = __fadd_rn(v, bias[c]);
          y[r * N + c] = v;
        }
        acc[i][j][e] = 0.0f;
      });
      have_tot = true;
    }
  }
  if (!kGrid) return;
  const bool partial = sp.s > 1;
  for_each_acc<TM, TN>(r0, c0, [&](int i, int j, int e, int64_t r, int64_t c) {
    if (r >= M || c >= N) return;
    if (partial) sp.part[(static_cast<int64_t>(blockIdx.z) * M + r) * N + c] = acc[i][j][e];
    else y[r * N + c] = bias ? __fadd_rn(acc[i][j][e], bias[c]) : acc[i][j][e];
  });
  const int rv = static_cast<int>(M - m0 < BM ? M - m0 : BM);
  if (partial && arrive_last(sp.counters + blockIdx.y * gridDim.x + blockIdx.x, sp.s))
    reduce_slices(sp, M, N, m0, rv, n0, BN, bias, y);
}

template <int BM, int BN, int BK, int WM, int WN, int ST, int kMinBlocks, bool kGrid, bool kXLo>
void launch(CudaBackend& be, const uint16_t* xh, const uint16_t* xl, int64_t Kp, const Tensor& x,
            const CudaWeight& w, const float* bias, Tensor y, SplitArgs sp) {
  static bool raised = false;  // one attribute call per instantiation
  launch_planes<kGrid>(be, pipe_matmul<BM, BN, BK, WM, WN, ST, kMinBlocks, kGrid, kXLo>, raised,
                       ST * ((kXLo ? 2 : 1) * BM + BN) * BK * 2, WM * WN * 32, BM, BN, xh, xl, Kp, x, w, bias,
                       y, sp);
}

}  // namespace

bool launch_bf16_pipe(CudaBackend& be, const Tensor& x, const CudaWeight& w, const float* bias,
                      Tensor y, const SplitArgs& sp) {
  // TF_CUDA_PIPE=0 leaves these shapes to the single-stage tiles, for side-by-side timing.
  static const bool off = env_zero("TF_CUDA_PIPE");
  if (off || w.dtype != DType::BF16 || x.cols % 8 != 0 || x.rows <= 16) return false;
  const int64_t M = x.rows, Kp = (x.cols + 31) / 32 * 32;
  const uint16_t* hi = split_x(be, x, Kp);
  const uint16_t* lo = x_lo(be) ? hi + M * Kp : nullptr;
  const int64_t tiles = ((M + 63) / 64) * ((y.cols + 127) / 128);
  const bool fold = fold_slices(tiles, sp, M, y.cols);
  // Tiles 64 columns wide where 128-column tiles and their slices (more than one) leave SMs idle
  // (TF_CUDA_PIPE64=0 keeps 128); the chains are the same.
  static const bool narrow_off = env_zero("TF_CUDA_PIPE64");
  const bool narrow = !narrow_off && !fold && sp.s > 1 && tiles * sp.s < kTargetBlocks / 4;
  with_xlo(be, [&](auto xlo) {
    constexpr bool L = decltype(xlo)::value;
    if (narrow)
      launch<64, 64, 64, 2, 4, 3, 2, true, L>(be, hi, lo, Kp, x, w, bias, y, sp);
    else if (!fold)
      launch<64, 128, 64, 2, 4, 3, 2, true, L>(be, hi, lo, Kp, x, w, bias, y, sp);
    else
      launch<64, 128, 64, 2, 4, 3, 2, false, L>(be, hi, lo, Kp, x, w, bias, y, sp);
  });
  return true;
}

}  // namespace tf::cuda::mm
