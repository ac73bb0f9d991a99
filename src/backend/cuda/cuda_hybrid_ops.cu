// Row ops of the hybrid models (Mamba2, Gated DeltaNet, sigmoid routers) and state copies:
// each output reads only its own row's inputs in a fixed order.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_state.cuh"
#include "backend/cuda/cuda_util.cuh"

namespace tf::cuda {

namespace {

constexpr int kNormThreads = 128;

__global__ void activate_kernel(int act, const float* x, float* out, int64_t n) {
  grid_wait();
  grid_launch_next();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = act_value(act, x[i]);
}

__global__ void sigmoid_kernel(const float* x, float* out, int64_t n) {
  grid_wait();
  grid_launch_next();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = sigmoid_f(x[i]);
}

// hi: y's bf16 plane as well, in y's layout (cols a multiple of 32).
__global__ void mul_sigmoid_kernel(float* y, int64_t cols, const float* g, int64_t ldg, int64_t n, uint16_t* hi) {
  grid_wait();
  grid_launch_next();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int64_t r = i / cols, c = i % cols;
  const float v = y[i] * sigmoid_f(g[r * ldg + c]);
  y[i] = v;
  if (hi) hi[i] = bf16_bits(v);
}

__global__ void mul_sigmoid_rows_kernel(float* y, int64_t cols, const float* g, int64_t n) {
  grid_wait();
  grid_launch_next();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = y[i] * sigmoid_f(g[i / cols]);
}

constexpr int kGatedCache = 4;  // columns a thread holds across the barrier: a group of up to 512

// Block per (row, group): thread t sums squares of columns t (mod 128) in order, then the fixed
// halving tree. norm_first: x / rms(x) * g * silu(z); else u = x silu(z), u / rms(u) * g.
// kCache: the thread's first kGatedCache columns load at once (g before the wait, as a weight) and
// stay in registers across the barrier, where each column's loads were a chain; the same
// arithmetic, so the same bits. hi: y's bf16 plane as well, in y's layout (cols a multiple of 32).
template <bool kCache>
__global__ void __launch_bounds__(kNormThreads)
    gated_rmsnorm_kernel(const float* x, int64_t cols, const float* z, int64_t ldz, const float* g,
                         int group, float eps, bool norm_first, float* y, uint16_t* hi) {
  constexpr int kHeld = kCache ? kGatedCache : 0;
  __shared__ float sh[kNormThreads];
  const int64_t r = blockIdx.x, c0 = static_cast<int64_t>(blockIdx.y) * group;
  const int t = threadIdx.x;
  float gv[kGatedCache], xv[kGatedCache], sv[kGatedCache];
#pragma unroll
  for (int k = 0; k < kHeld; ++k) gv[k] = t + k * kNormThreads < group ? g[c0 + t + k * kNormThreads] : 0.0f;
  grid_wait();
  grid_launch_next();
  const float* xr = x + r * cols + c0;
  const float* zr = z + r * ldz + c0;
  float* yr = y + r * cols + c0;
  uint16_t* hr = hi ? hi + r * cols + c0 : nullptr;
#pragma unroll
  for (int k = 0; k < kHeld; ++k) {
    const int i = t + k * kNormThreads;
    xv[k] = i < group ? xr[i] : 0.0f;
    sv[k] = i < group ? act_value(0, zr[i]) : 0.0f;
  }
  float s = 0.0f;
#pragma unroll
  for (int k = 0; k < kHeld; ++k) {
    if (t + k * kNormThreads >= group) break;
    const float u = norm_first ? xv[k] : xv[k] * sv[k];
    s = __fadd_rn(s, __fmul_rn(u, u));
  }
  for (int i = t + kHeld * kNormThreads; i < group; i += kNormThreads) {
    const float u = norm_first ? xr[i] : xr[i] * act_value(0, zr[i]);
    s = __fadd_rn(s, __fmul_rn(u, u));
  }
  s = block_sum<kNormThreads>(s, sh);
  const float inv = 1.0f / sqrtf(s / static_cast<float>(group) + eps);
#pragma unroll
  for (int k = 0; k < kHeld; ++k) {
    const int i = t + k * kNormThreads;
    if (i >= group) continue;
    const float v = norm_first ? ((xv[k] * inv) * gv[k]) * sv[k] : ((xv[k] * sv[k]) * inv) * gv[k];
    yr[i] = v;
    if (hr) hr[i] = bf16_bits(v);
  }
  for (int i = t + kHeld * kNormThreads; i < group; i += kNormThreads) {
    const float sz = act_value(0, zr[i]);
    const float v = norm_first ? ((xr[i] * inv) * g[c0 + i]) * sz : ((xr[i] * sz) * inv) * g[c0 + i];
    yr[i] = v;
    if (hr) hr[i] = bf16_bits(v);
  }
}

// Whether gated_rmsnorm holds a thread's first columns in registers: where a group gives a thread
// two or more columns; at one (Qwen3-Next's heads of 128) the loops timed faster. TF_CUDA_GATED_CACHE=0:
// never, =1: always (side-by-side timing; the same bits).
bool gated_cache(int group) {
  static const int mode = [] {
    const char* e = std::getenv("TF_CUDA_GATED_CACHE");
    return e ? std::atoi(e) : -1;
  }();
  return mode == 0 ? false : mode == 1 ? true : group > kNormThreads;
}

// Ranks a before b: larger value first, NaN as lowest, ties to the lower index.
bool ranks_before(const float* v, int32_t a, int32_t b) {
  const float va = std::isnan(v[a]) ? -INFINITY : v[a];
  const float vb = std::isnan(v[b]) ? -INFINITY : v[b];
  return va > vb || (va == vb && a < b);
}

}  // namespace

void CudaBackend::activate(Act act, const Tensor& x, Tensor out) {
  const ProfScope prof(*this, "activate", nullptr, x.rows);
  check_tensor(x, "activate", "x");
  check_tensor(out, "activate", "out");
  TF_CHECK(x.rows == out.rows && x.cols == out.cols, "activate: x [", x.rows, " x ", x.cols,
           "] into out [", out.rows, " x ", out.cols, "]");
  const int64_t n = x.rows * x.cols;
  if (n == 0) return;
  const int a = act_code(act);
  launch_kernel(activate_kernel, grid_for(n, 256), 256, 0, a, x.data, out.data, n);
  check_launch("activate");
}

void CudaBackend::mul_sigmoid(Tensor y, Cols gate) {
  const ProfScope prof(*this, "mul_sigmoid", nullptr, y.rows);
  check_tensor(y, "mul_sigmoid", "y");
  check_cols(gate, y.rows, y.cols, "mul_sigmoid", "gate");
  const int64_t n = y.rows * y.cols;
  if (n == 0) return;
  uint16_t* hi = plane_for(y);
  launch_kernel(mul_sigmoid_kernel, grid_for(n, 256), 256, 0, y.data, y.cols, gate.at(0),
                gate.t.cols, n, hi);
  plane_written(y, hi);
  check_launch("mul_sigmoid");
}

void CudaBackend::mul_sigmoid_rows(Tensor y, const Tensor& g) {
  const ProfScope prof(*this, "mul_sigmoid_rows", nullptr, y.rows);
  check_tensor(y, "mul_sigmoid_rows", "y");
  check_tensor(g, "mul_sigmoid_rows", "g");
  TF_CHECK(g.rows == y.rows && g.cols == 1, "mul_sigmoid_rows: g [", g.rows, " x ", g.cols,
           "] for y [", y.rows, " x ", y.cols, "]");
  const int64_t n = y.rows * y.cols;
  if (n == 0) return;
  launch_kernel(mul_sigmoid_rows_kernel, grid_for(n, 256), 256, 0, y.data, y.cols, g.data, n);
  check_launch("mul_sigmoid_rows");
}

void CudaBackend::gated_rmsnorm(const Tensor& x, Cols z, const Weight& gw, int group, float eps,
                                bool norm_first, Tensor y) {
  const ProfScope prof(*this, "gated_rmsnorm", nullptr, x.rows);
  check_tensor(x, "gated_rmsnorm", "x");
  check_tensor(y, "gated_rmsnorm", "y");
  TF_CHECK(group > 0 && x.cols % group == 0 && y.rows == x.rows && y.cols == x.cols,
           "gated_rmsnorm: x [", x.rows, " x ", x.cols, "] in groups of ", group, " into y [", y.rows,
           " x ", y.cols, "]");
  check_cols(z, x.rows, x.cols, "gated_rmsnorm", "z");
  const float* g = vec_f32(&gw, x.cols, "gated_rmsnorm", "g");
  if (x.rows == 0 || x.cols == 0) return;
  const int64_t groups = x.cols / group;
  TF_CHECK(x.rows <= 0x7fffffff && groups <= 65535, "gated_rmsnorm: ", x.rows, " rows of ", groups,
           " groups");
  uint16_t* hi = plane_for(y);
  launch_kernel(gated_cache(group) ? gated_rmsnorm_kernel<true> : gated_rmsnorm_kernel<false>,
                dim3(static_cast<unsigned>(x.rows), static_cast<unsigned>(groups)), kNormThreads, 0,
                x.data, x.cols, z.at(0), z.t.cols, g, group, eps, norm_first, y.data, hi);
  plane_written(y, hi);
  check_launch("gated_rmsnorm");
}

void CudaBackend::copy(const Tensor& src, Tensor dst) {
  graph_refuse();
  const ProfScope prof(*this, "copy", nullptr, src.rows);
  check_copy(src, dst);
  const uint64_t bytes = static_cast<uint64_t>(src.rows * src.cols) * sizeof(float);
  if (bytes == 0 || src.data == dst.data) return;
  const auto* s = reinterpret_cast<const uint8_t*>(src.data);
  const auto* d = reinterpret_cast<const uint8_t*>(dst.data);
  TF_CHECK(s + bytes <= d || d + bytes <= s, "copy: src and dst overlap in part");
  note_write();
  TF_CUDA_CHECK(cudaMemcpy(dst.data, src.data, bytes, cudaMemcpyDeviceToDevice), "copy [", src.rows,
                " x ", src.cols, "]");
}

void CudaBackend::topk_sigmoid_grouped(const Tensor& logits, const Weight* bias, int n_group,
                                       int topk_group, int k, bool norm, float scale,
                                       int32_t* idx_out, float* w_out) {
  graph_refuse();
  const ProfScope prof(*this, "topk_sigmoid_grouped", nullptr, logits.rows);
  const char* op = "topk_sigmoid_grouped";
  check_tensor(logits, op, "logits");
  const int64_t n = logits.cols;
  TF_CHECK(n_group >= 1 && n % n_group == 0 && topk_group >= 1 && topk_group <= n_group && k >= 1 &&
               k <= static_cast<int64_t>(topk_group) * (n / n_group),
           op, ": ", n, " experts in ", n_group, " groups, best ", topk_group, " groups, k ", k);
  TF_CHECK(logits.rows == 0 || (idx_out != nullptr && w_out != nullptr), op, ": null outputs");
  const float* d_bias = vec_f32(bias, n, op, "bias");
  if (logits.rows == 0) return;
  const uint64_t total = static_cast<uint64_t>(logits.rows * n);
  auto* d_s = reinterpret_cast<float*>(scratch(total * 4));
  launch_kernel(sigmoid_kernel, grid_for(static_cast<int64_t>(total), 256), 256, 0, logits.data,
                d_s, static_cast<int64_t>(total));
  check_launch(op);
  std::vector<float> sc(total), hb;
  {
    const WaitScope wait(*this);
    TF_CUDA_CHECK(cudaMemcpy(sc.data(), d_s, total * 4, cudaMemcpyDeviceToHost), op);
    if (d_bias) {
      hb.resize(static_cast<size_t>(n));
      TF_CUDA_CHECK(cudaMemcpy(hb.data(), d_bias, static_cast<size_t>(n) * 4, cudaMemcpyDeviceToHost), op);
    }
  }
  // The selection runs on the host on the device scores, as the cpu backend ranks them.
  const int64_t gsize = n / n_group;
  std::vector<float> biased(static_cast<size_t>(n)), gscore(static_cast<size_t>(n_group));
  std::vector<int32_t> gorder(static_cast<size_t>(n_group)), cand;
  for (int64_t r = 0; r < logits.rows; ++r) {
    const float* s = sc.data() + r * n;
    for (int64_t i = 0; i < n; ++i) biased[static_cast<size_t>(i)] = d_bias ? s[i] + hb[static_cast<size_t>(i)] : s[i];
    for (int gi = 0; gi < n_group; ++gi) {
      int32_t b1 = -1, b2 = -1;
      for (int64_t i = gi * gsize; i < (gi + 1) * gsize; ++i) {
        const int32_t e = static_cast<int32_t>(i);
        if (b1 < 0 || ranks_before(biased.data(), e, b1)) b2 = b1, b1 = e;
        else if (b2 < 0 || ranks_before(biased.data(), e, b2)) b2 = e;
      }
      const float v1 = biased[static_cast<size_t>(b1)];
      gscore[static_cast<size_t>(gi)] = b2 < 0 ? v1 : v1 + biased[static_cast<size_t>(b2)];
      gorder[static_cast<size_t>(gi)] = gi;
    }
    std::partial_sort(gorder.begin(), gorder.begin() + topk_group, gorder.end(),
                      [&](int32_t a, int32_t b) { return ranks_before(gscore.data(), a, b); });
    cand.clear();
    for (int gi = 0; gi < topk_group; ++gi)
      for (int64_t i = 0; i < gsize; ++i)
        cand.push_back(static_cast<int32_t>(gorder[static_cast<size_t>(gi)] * gsize + i));
    std::partial_sort(cand.begin(), cand.begin() + k, cand.end(),
                      [&](int32_t a, int32_t b) { return ranks_before(biased.data(), a, b); });
    float sum = 0.0f;
    for (int j = 0; j < k; ++j) sum += s[cand[static_cast<size_t>(j)]];
    for (int j = 0; j < k; ++j) {
      const int32_t id = cand[static_cast<size_t>(j)];
      idx_out[r * k + j] = id;
      w_out[r * k + j] = (norm ? s[id] / (sum + 1e-20f) : s[id]) * scale;
    }
  }
}

}  // namespace tf::cuda
