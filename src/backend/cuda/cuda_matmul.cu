// Matmul y = x * w^T (+ bias) for many rows (tiles through shared memory) and F32 weights; the
// order rule every path keeps is in cuda_matmul.cuh.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "backend/cuda/cuda_matmul.cuh"

namespace tf::cuda {

namespace mm {

// hi/lo [M][Kp] bf16 planes of x (Kp = K rounded up to 32; zero past K), or hi alone when lo is
// null; one thread per 8 k, in k order. rows (set): plane row r is x row rows[r] / x_div. act >= 0:
// the values are act(x) * x2 (x2 set) or act(x), as act_mul and activate compute them.
__global__ void split_x_kernel(const float* __restrict__ x, int64_t M, int64_t K, int64_t Kp,
                               bool vec, uint16_t* __restrict__ hi, uint16_t* __restrict__ lo,
                               const int32_t* __restrict__ rows, int x_div, const float* __restrict__ x2,
                               int act) {
  grid_wait();
  grid_launch_next();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t groups = Kp / 8;
  if (i >= M * groups) return;
  const int64_t r = i / groups, k = (i % groups) * 8;
  const int64_t xr = rows ? rows[r] / x_div : r;
  float v[8], u[8];
  auto load = [&](const float* row, float (&d)[8]) {
    if (vec && k + 8 <= K) {
      const float4 p = *reinterpret_cast<const float4*>(row + k);
      const float4 q = *reinterpret_cast<const float4*>(row + k + 4);
      d[0] = p.x, d[1] = p.y, d[2] = p.z, d[3] = p.w, d[4] = q.x, d[5] = q.y, d[6] = q.z, d[7] = q.w;
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) d[e] = k + e < K ? row[k + e] : 0.0f;
    }
  };
  load(x + xr * K, v);
  if (act >= 0) {
    if (x2) load(x2 + xr * K, u);
#pragma unroll
    for (int e = 0; e < 8; ++e)
      v[e] = k + e >= K ? 0.0f : x2 ? act_value(act, v[e]) * u[e] : act_value(act, v[e]);
  }
  uint32_t h[4], l[4];
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const uint16_t h0 = bf16_bits(v[2 * e]), h1 = bf16_bits(v[2 * e + 1]);
    h[e] = pack2(h0, h1);
    l[e] = pack2(lo_bits(v[2 * e], h0), lo_bits(v[2 * e + 1], h1));
  }
  *reinterpret_cast<uint4*>(hi + r * Kp + k) = make_uint4(h[0], h[1], h[2], h[3]);
  if (lo) *reinterpret_cast<uint4*>(lo + r * Kp + k) = make_uint4(l[0], l[1], l[2], l[3]);
}

}  // namespace mm

uint16_t* CudaBackend::plane_for(const Tensor& y) {
  static const bool off = env_zero("TF_CUDA_PLANES");
  if (off || mm::x_lo(*this) || y.rows <= 8 || y.cols % 32 != 0 || reinterpret_cast<uintptr_t>(y.data) % 16 != 0)
    return nullptr;
  return static_cast<uint16_t*>(buffer(kSlotSplitX, static_cast<uint64_t>(y.rows * y.cols) * sizeof(uint16_t)));
}

void CudaBackend::plane_written(const Tensor& y, uint16_t* hi) {
  ready_plane = hi ? ReadyPlane{y.data, y.rows, y.cols, hi, launch_count()} : ReadyPlane{};
}

namespace {

using namespace mm;

// Shared-memory bytes of one instantiation: A hi (+ lo), B (+ F16 lo), Q8 scales, and for a
// block that folds slices the running totals.
template <int BM, int BN, int BK, int WT, bool kGrid, bool kXLo>
constexpr int smem_bytes() {
  return ((WT != kQ8 && kXLo ? 2 : 1) * BM + (WT == kF16 ? 2 : 1) * BN) * (BK + 8) * 2 +
         BN * (BK / 32) * 4 + (kGrid ? 0 : BM * BN * 4);
}

// One block computes a BM x BN tile of y, walking K in tiles of BK (a multiple of 32 dividing
// kSliceUnit). kGrid: blockIdx.z is the slice and partials meet in sp.part; otherwise the
// block walks every slice and folds each slice's chain into its total. kXLo: x enters as hi + lo.
template <int BM, int BN, int BK, int WM, int WN, int WT, bool kGrid, bool kXLo>
__global__ void __launch_bounds__(WM * WN * 32)
    mma_matmul(const float* __restrict__ x, int64_t M, int64_t K, const void* __restrict__ w,
               const float* __restrict__ wscale, const float* __restrict__ bias,
               float* __restrict__ y, int64_t N, bool vec_x, bool vec_w, SplitArgs sp) {
  grid_wait();
  grid_launch_next();
  constexpr int kThreads = WM * WN * 32, LDS = BK + 8;
  constexpr int TM = BM / WM / 16, TN = BN / WN / 8;
  constexpr bool kSplitX = WT != kQ8 && kXLo, kSplitW = WT == kF16;
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
  zero_acc(acc);
  bool have_tot = false;
  int64_t kbeg, kend;
  slice_range<kGrid>(sp, K, kbeg, kend);

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
      if (WT == kQ8) zero_acc(part);
#pragma unroll
      for (int st = 0; st < 2; ++st) {
        const int kk = kb + 16 * st + step_k(t4);  // this thread's first k of the step
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
              if (kSplitX) mma_bf16(acc[i][j], al[i], b0, b1);
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
  for_each_acc<TM, TN>(m0 + wm * TM * 16 + g, n0 + wn * TN * 8 + t4 * 2,
                       [&](int i, int j, int e, int64_t r, int64_t c) {
    if (r >= M || c >= N) return;
    const float v = kGrid ? acc[i][j][e] : Ts[((i * TN + j) * 4 + e) * kThreads + tid];
    if (partial) sp.part[(static_cast<int64_t>(blockIdx.z) * M + r) * N + c] = v;
    else y[r * N + c] = bias ? __fadd_rn(v, bias[c]) : v;
  });
  if (partial && arrive_last(sp.counters + blockIdx.y * gridDim.x + blockIdx.x, sp.s))
    reduce_slices(sp, M, N, m0, rv, n0, BN, bias, y);
}

// F32 weights: one warp per output, lane j takes k = j (mod 32) in increasing k by fma, then
// the fixed xor butterfly, then the bias.
__global__ void f32_matmul(const float* __restrict__ x, int64_t M, int64_t K,
                           const float* __restrict__ w, const float* __restrict__ bias,
                           float* __restrict__ y, int64_t N) {
  grid_wait();
  grid_launch_next();
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

template <int BM, int BN, int BK, int WM, int WN, int WT, bool kGrid, bool kXLo>
void launch_mma(CudaBackend& be, const Tensor& x, const CudaWeight& w, const float* bias, Tensor y,
                SplitArgs sp) {
  constexpr int kSmem = smem_bytes<BM, BN, BK, WT, kGrid, kXLo>();
  auto kern = mma_matmul<BM, BN, BK, WM, WN, WT, kGrid, kXLo>;
  static bool raised = false;  // one attribute call per instantiation
  const dim3 grid = tile_grid<kGrid>(be, kern, raised, kSmem, BM, BN, x, y, sp);
  const bool vec_x = x.cols % 4 == 0 && reinterpret_cast<uintptr_t>(x.data) % 16 == 0;
  const bool vec_w = WT == kQ8 || w.cols % 8 == 0;
  launch_kernel_whole(kern, grid, WM * WN * 32, kSmem, x.data, x.rows, x.cols, w.data, w.scales,
                      bias, y.data, y.cols, vec_x, vec_w, sp);
}


template <int WT, bool kXLo>
void launch_mma_rows(CudaBackend& be, const Tensor& x, const CudaWeight& w, const float* bias,
                     Tensor y, const SplitArgs& sp) {
  if (x.rows <= 64) launch_mma<64, 64, 64, 2, 2, WT, true, kXLo>(be, x, w, bias, y, sp);
  else launch_mma<128, 128, 32, 2, 4, WT, false, kXLo>(be, x, w, bias, y, sp);
}

template <int WT>
void launch_by_rows(CudaBackend& be, const Tensor& x, const CudaWeight& w, const float* bias,
                    Tensor y) {
  // Every path runs the same slices and chains; the row count only picks who runs them.
  const SplitArgs sp = x.rows > 16 ? many_rows_split(x.cols, y.cols) : split_for(x.cols, y.cols);
  if (x.rows <= 16) launch_few_rows(be, x, w, bias, y, sp);
  else if (launch_bf16_wgmma(be, x, w, bias, y, sp)) return;
  else if (launch_bf16_pipe(be, x, w, bias, y, sp)) return;
  else with_wt_xlo<WT>(be, [&](auto xlo) {
    launch_mma_rows<WT, decltype(xlo)::value>(be, x, w, bias, y, sp);
  });
}


}  // namespace

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
      launch_kernel(f32_matmul, grid, warps * 32, 0, x.data, x.rows, x.cols,
                    static_cast<const float*>(w.data), b, y.data, y.cols);
    }
  }
  check_launch("matmul");
}

bool CudaBackend::matmul_act_mul(Act act, const Tensor& x, const Weight& gt, const Weight& ut, Tensor out) {
  const CudaWeight& g = as_cuda(gt, "matmul");
  const CudaWeight& u = as_cuda(ut, "matmul");
  TF_CHECK(x.cols == g.cols && x.cols == u.cols && g.rows == u.rows && out.rows == x.rows && out.cols == g.rows,
           "matmul_act_mul: x [", x.rows, " x ", x.cols, "] times ", g.name, " [", g.rows, " x ", g.cols, "] and ",
           u.name, " [", u.rows, " x ", u.cols, "] into [", out.rows, " x ", out.cols, "]");
  if (x.rows == 0 || g.rows == 0) return true;
  if (!glu_takes(*this, x, g, u, out.cols)) return false;
  const ProfScope prof(*this, "matmul_act_mul", &gt.name, x.rows);
  check_tensor(x, "matmul", "x");
  check_tensor(out, "matmul", "y");
  launch_bf16_glu(*this, x, g, u, act_code(act), out);
  check_launch("matmul_act_mul");
  return true;
}

bool CudaBackend::mlp_gated(Act act, const Tensor& x, const Weight& gt, const Weight& ut, const Weight& dt,
                            Tensor a, Tensor out) {
  const CudaWeight& g = as_cuda(gt, "matmul");
  const CudaWeight& u = as_cuda(ut, "matmul");
  const CudaWeight& d = as_cuda(dt, "matmul");
  // Down reads act's bf16 plane as the gated launch leaves it in act_scratch (half its bytes), with
  // no split of its own, where the plane's rows need no padding.
  const bool plane = d.dtype == DType::BF16 && d.cols == g.rows && g.rows % kSwzRow == 0 && a.rows == x.rows &&
                     a.cols == g.rows && out.rows == x.rows && out.cols == d.rows && g.rows == u.rows &&
                     x.cols == g.cols && x.cols == u.cols && glu_takes(*this, x, g, u, g.rows);
  if (!plane) return Backend::mlp_gated(act, x, gt, ut, dt, a, out);
  check_tensor(x, "matmul", "x");
  check_tensor(a, "matmul", "act");
  check_tensor(out, "matmul", "y");
  auto* hi = reinterpret_cast<uint16_t*>(a.data);
  {
    const ProfScope prof(*this, "matmul_act_mul", &gt.name, x.rows);
    launch_bf16_glu(*this, x, g, u, act_code(act), a, hi);
    check_launch("matmul_act_mul");
  }
  const ProfScope prof(*this, "matmul", &dt.name, x.rows);
  const Tensor ax{a.data, x.rows, g.rows};
  TF_CHECK(launch_bf16_wgmma(*this, ax, d, nullptr, out, many_rows_split(g.rows, d.rows), hi),
           "mlp_gated: ", dt.name, " found no launch for its bf16 plane");
  check_launch("matmul");
  return true;
}

}  // namespace tf::cuda
