// Row-wise ops of the CUDA backend: each row reads only its own inputs in a fixed order.
// Compiled with --fmad=false, so products and sums round separately as in the cpu backend.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_util.cuh"

namespace tf::cuda {

namespace {

constexpr int kRowThreads = 256;

__global__ void embed_kernel(int dt, const void* table, const float* scales, const int32_t* ids,
                             int64_t cols, float* out, int64_t total) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= total) return;
  const int64_t r = i / cols, c = i % cols;
  out[i] = load_elem(dt, table, scales, static_cast<int64_t>(ids[r]) * cols + c);
}

// Thread t sums x[i]^2 for i = t (mod 256) in increasing i, then the fixed halving tree.
__global__ void rmsnorm_kernel(const float* x, const float* g, float eps, bool add_one,
                               int64_t n, float* y) {
  __shared__ float sh[kRowThreads];
  const float* xr = x + static_cast<int64_t>(blockIdx.x) * n;
  float* yr = y + static_cast<int64_t>(blockIdx.x) * n;
  float s = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += kRowThreads) s = __fadd_rn(s, __fmul_rn(xr[i], xr[i]));
  s = block_sum<kRowThreads>(s, sh);
  const float inv = 1.0f / sqrtf(s / static_cast<float>(n) + eps);
  for (int64_t i = threadIdx.x; i < n; i += kRowThreads) {
    const float w = add_one ? 1.0f + g[i] : g[i];
    yr[i] = (xr[i] * inv) * w;
  }
}

// One thread per (row, pair): cos and sin of the f32 angle in double, as the cpu backend.
__global__ void rope_kernel(float* x, int64_t rows, int64_t cols, int n_heads, int head_dim,
                            int half, bool neox, const int32_t* pos, const float* inv_freq,
                            float mscale) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= rows * half) return;
  const int64_t r = t / half;
  const int i = static_cast<int>(t % half);
  const float angle = static_cast<float>(pos[r]) * inv_freq[i];
  const float c = static_cast<float>(cos(static_cast<double>(angle))) * mscale;
  const float s = static_cast<float>(sin(static_cast<double>(angle))) * mscale;
  const int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
  for (int h = 0; h < n_heads; ++h) {
    float* v = x + r * cols + static_cast<int64_t>(h) * head_dim;
    const float x0 = v[a], x1 = v[b];
    v[a] = x0 * c - x1 * s;
    v[b] = x1 * c + x0 * s;
  }
}

__device__ float act_value(int act, float g) {
  if (act == 0) return g / (1.0f + expf(-g));
  if (act == 1) {
    const float c = 0.7978845608028654f;  // sqrt(2 / pi)
    return 0.5f * g * (1.0f + tanhf(c * (g + 0.044715f * g * g * g)));
  }
  const float r = g > 0.0f ? g : 0.0f;
  return r * r;
}

__global__ void act_mul_kernel(int act, const float* gate, const float* up, float* out, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = act_value(act, gate[i]) * up[i];
}

__global__ void add_kernel(float* y, const float* x, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = y[i] + x[i];
}

__global__ void scale_kernel(float* x, float s, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] = x[i] * s;
}

// Softmax of one row: max by the fixed tree, exp, sum by the fixed tree, divide.
__global__ void softmax_kernel(const float* logits, int64_t n, float* prob) {
  __shared__ float sh[kRowThreads];
  const float* l = logits + static_cast<int64_t>(blockIdx.x) * n;
  float* p = prob + static_cast<int64_t>(blockIdx.x) * n;
  float mx = -INFINITY;
  for (int64_t i = threadIdx.x; i < n; i += kRowThreads) mx = fmaxf(mx, l[i]);
  mx = block_max<kRowThreads>(mx, sh);
  float s = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += kRowThreads) {
    const float e = expf(l[i] - mx);
    p[i] = e;
    s = s + e;
  }
  s = block_sum<kRowThreads>(s, sh);
  for (int64_t i = threadIdx.x; i < n; i += kRowThreads) p[i] = p[i] / s;
}

__global__ void gather_kernel(const float* src, const int32_t* rows, int64_t cols, float* dst,
                              int64_t total) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= total) return;
  const int64_t r = i / cols, c = i % cols;
  dst[i] = src[static_cast<int64_t>(rows[r]) * cols + c];
}

// One thread per column applies the n updates in i order, so repeated rows sum in order.
__global__ void scatter_kernel(float* dst, const float* src, const int32_t* rows, const float* w,
                               int n, int64_t cols) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  for (int i = 0; i < n; ++i) {
    float* d = dst + static_cast<int64_t>(rows[i]) * cols + c;
    *d = *d + w[i] * src[static_cast<int64_t>(i) * cols + c];
  }
}

}  // namespace

void CudaBackend::embed(const Weight& table, const int32_t* ids, int n, Tensor out) {
  const CudaWeight& t = as_cuda(table, "embed");
  check_tensor(out, "embed", "out");
  TF_CHECK(n >= 0 && out.rows == n && out.cols == t.cols, "embed: ", t.name, " [", t.rows, " x ",
           t.cols, "] with ", n, " ids into out [", out.rows, " x ", out.cols, "]");
  TF_CHECK(n == 0 || ids != nullptr, "embed: null ids");
  for (int i = 0; i < n; ++i)
    TF_CHECK(ids[i] >= 0 && ids[i] < t.rows, "embed: id ", ids[i], " at ", i,
             " is outside table ", t.name, " of ", t.rows, " rows");
  if (n == 0) return;
  auto* d_ids = static_cast<const int32_t*>(meta(ids, static_cast<uint64_t>(n) * 4));
  const int64_t total = n * t.cols;
  embed_kernel<<<grid_for(total, 256), 256>>>(dt_code(t.dtype), t.data, t.scales, d_ids, t.cols,
                                              out.data, total);
  check_launch("embed");
}

void CudaBackend::rmsnorm(const Tensor& x, const Weight& gw, float eps, bool add_one, Tensor y) {
  const CudaWeight& g = as_cuda(gw, "rmsnorm");
  check_tensor(x, "rmsnorm", "x");
  check_tensor(y, "rmsnorm", "y");
  TF_CHECK(x.rows == y.rows && x.cols == y.cols && g.rows == 1 && g.cols == x.cols && x.cols > 0,
           "rmsnorm: x [", x.rows, " x ", x.cols, "] with ", g.name, " [", g.rows, " x ", g.cols,
           "] into y [", y.rows, " x ", y.cols, "]");
  if (x.rows == 0) return;
  TF_CHECK(x.rows <= 0x7fffffff, "rmsnorm: ", x.rows, " rows");
  rmsnorm_kernel<<<static_cast<unsigned>(x.rows), kRowThreads>>>(x.data, g.f32, eps, add_one,
                                                                 x.cols, y.data);
  check_launch("rmsnorm");
}

void CudaBackend::rope(Tensor x, int n_heads, const int32_t* pos, const RopeParams& p) {
  check_tensor(x, "rope", "x");
  TF_CHECK(n_heads > 0 && p.head_dim > 0 && x.cols == static_cast<int64_t>(n_heads) * p.head_dim,
           "rope: x [", x.rows, " x ", x.cols, "] is not ", n_heads, " heads of ", p.head_dim);
  TF_CHECK(p.rot_dim >= 0 && p.rot_dim % 2 == 0 && p.rot_dim <= p.head_dim &&
               p.inv_freq.size() == static_cast<size_t>(p.rot_dim / 2),
           "rope: rot_dim ", p.rot_dim, " with ", p.inv_freq.size(), " frequencies for head_dim ",
           p.head_dim);
  TF_CHECK(x.rows == 0 || pos != nullptr, "rope: null positions");
  const int half = p.rot_dim / 2;
  if (half == 0 || x.rows == 0) return;
  const uint64_t pos_bytes = static_cast<uint64_t>(x.rows) * 4, off = (pos_bytes + 15) / 16 * 16;
  // Positions and frequencies go up as one blob, so q and k of every layer reuse one upload.
  std::vector<uint8_t> blob(off + static_cast<uint64_t>(half) * 4, 0);
  std::memcpy(blob.data(), pos, pos_bytes);
  std::memcpy(blob.data() + off, p.inv_freq.data(), static_cast<uint64_t>(half) * 4);
  auto* s = static_cast<const uint8_t*>(meta(blob.data(), blob.size()));
  const int64_t total = x.rows * half;
  rope_kernel<<<grid_for(total, 128), 128>>>(x.data, x.rows, x.cols, n_heads, p.head_dim, half,
                                             p.neox, reinterpret_cast<const int32_t*>(s),
                                             reinterpret_cast<const float*>(s + off), p.mscale);
  check_launch("rope");
}

void CudaBackend::act_mul(Act act, const Tensor& gate, const Tensor& up, Tensor out) {
  check_tensor(gate, "act_mul", "gate");
  check_tensor(up, "act_mul", "up");
  check_tensor(out, "act_mul", "out");
  TF_CHECK(gate.rows == up.rows && gate.cols == up.cols && out.rows == gate.rows &&
               out.cols == gate.cols,
           "act_mul: gate [", gate.rows, " x ", gate.cols, "], up [", up.rows, " x ", up.cols,
           "], out [", out.rows, " x ", out.cols, "]");
  const int64_t n = gate.rows * gate.cols;
  if (n == 0) return;
  const int a = act == Act::SiLU ? 0 : act == Act::GeluTanh ? 1 : 2;
  act_mul_kernel<<<grid_for(n, 256), 256>>>(a, gate.data, up.data, out.data, n);
  check_launch("act_mul");
}

void CudaBackend::add(Tensor y, const Tensor& x) {
  check_tensor(y, "add", "y");
  check_tensor(x, "add", "x");
  TF_CHECK(y.rows == x.rows && y.cols == x.cols, "add: y [", y.rows, " x ", y.cols, "] += x [",
           x.rows, " x ", x.cols, "]");
  const int64_t n = y.rows * y.cols;
  if (n == 0) return;
  add_kernel<<<grid_for(n, 256), 256>>>(y.data, x.data, n);
  check_launch("add");
}

void CudaBackend::scale(Tensor x, float s) {
  check_tensor(x, "scale", "x");
  const int64_t n = x.rows * x.cols;
  if (n == 0) return;
  scale_kernel<<<grid_for(n, 256), 256>>>(x.data, s, n);
  check_launch("scale");
}

void CudaBackend::topk_softmax(const Tensor& logits, int k, bool norm, int32_t* idx_out,
                               float* w_out) {
  check_tensor(logits, "topk_softmax", "logits");
  TF_CHECK(k >= 1 && k <= logits.cols, "topk_softmax: k ", k, " for logits [", logits.rows, " x ",
           logits.cols, "]");
  TF_CHECK(logits.rows == 0 || (idx_out != nullptr && w_out != nullptr),
           "topk_softmax: null outputs");
  if (logits.rows == 0) return;
  const int64_t n = logits.cols;
  const uint64_t total = static_cast<uint64_t>(logits.rows * n);
  auto* d_prob = reinterpret_cast<float*>(scratch(total * 4));
  softmax_kernel<<<static_cast<unsigned>(logits.rows), kRowThreads>>>(logits.data, n, d_prob);
  check_launch("topk_softmax");
  std::vector<float> prob(total);
  TF_CUDA_CHECK(cudaMemcpy(prob.data(), d_prob, total * 4, cudaMemcpyDeviceToHost), "topk_softmax");
  // The selection runs on the host, as the cpu backend does it, on the device probabilities.
  std::vector<int32_t> order(static_cast<size_t>(n));
  for (int64_t r = 0; r < logits.rows; ++r) {
    const float* pr = prob.data() + r * n;
    for (int64_t i = 0; i < n; ++i) order[static_cast<size_t>(i)] = static_cast<int32_t>(i);
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
      const float pa = std::isnan(pr[a]) ? -1.0f : pr[a];
      const float pb = std::isnan(pr[b]) ? -1.0f : pr[b];
      return pa > pb || (pa == pb && a < b);
    });
    float ksum = 0.0f;
    for (int j = 0; j < k; ++j) ksum += pr[order[static_cast<size_t>(j)]];
    for (int j = 0; j < k; ++j) {
      const int32_t id = order[static_cast<size_t>(j)];
      idx_out[r * k + j] = id;
      w_out[r * k + j] = norm ? pr[id] / ksum : pr[id];
    }
  }
}

void CudaBackend::gather_rows(const Tensor& src, const int32_t* rows, int n, Tensor dst) {
  check_gather(src, rows, n, dst);
  const int64_t total = n * src.cols;
  if (total == 0) return;
  auto* d_rows = static_cast<const int32_t*>(meta(rows, static_cast<uint64_t>(n) * 4));
  gather_kernel<<<grid_for(total, 256), 256>>>(src.data, d_rows, src.cols, dst.data, total);
  check_launch("gather_rows");
}

void CudaBackend::scatter_add_scaled(Tensor dst, const Tensor& src, const int32_t* rows,
                                     const float* w, int n) {
  check_scatter(dst, src, rows, w, n);
  if (n == 0 || dst.cols == 0) return;
  const uint64_t off = (static_cast<uint64_t>(n) * 4 + 15) / 16 * 16;
  std::vector<uint8_t> blob(off + static_cast<uint64_t>(n) * 4, 0);
  std::memcpy(blob.data(), rows, static_cast<uint64_t>(n) * 4);
  std::memcpy(blob.data() + off, w, static_cast<uint64_t>(n) * 4);
  auto* s = static_cast<const uint8_t*>(meta(blob.data(), blob.size()));
  scatter_kernel<<<grid_for(dst.cols, 128), 128>>>(dst.data, src.data,
                                                   reinterpret_cast<const int32_t*>(s),
                                                   reinterpret_cast<const float*>(s + off), n,
                                                   dst.cols);
  check_launch("scatter_add_scaled");
}

}  // namespace tf::cuda
