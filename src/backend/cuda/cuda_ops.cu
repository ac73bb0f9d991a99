// Row-wise ops of the CUDA backend: each row reads only its own inputs in a fixed order.
// Compiled with --fmad=false, so products and sums round separately as in the cpu backend.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_norm.cuh"
#include "backend/cuda/cuda_util.cuh"

namespace tf::cuda {

namespace {

constexpr int kRowThreads = 256;  // threads of one softmax row

__global__ void embed_kernel(int dt, const void* table, const float* scales, const int32_t* ids,
                             int64_t cols, float* out, int64_t total) {
  grid_wait();
  grid_launch_next();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= total) return;
  const int64_t r = i / cols, c = i % cols;
  out[i] = load_elem(dt, table, scales, static_cast<int64_t>(ids[r]) * cols + c);
}

constexpr int kNormThreads = 256;
constexpr int kNormCache = 4;  // float4 chunks per thread held in registers across the barrier

__device__ __forceinline__ float4 norm4(float4 x, float4 g, float inv, bool add_one) {
  return make_float4(norm_elem(x.x, g.x, inv, add_one), norm_elem(x.y, g.y, inv, add_one),
                     norm_elem(x.z, g.z, inv, add_one), norm_elem(x.w, g.w, inv, add_one));
}

__device__ __forceinline__ float4 add4(float4 a, float4 b) {
  return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
}

// The bf16 bits of four values at p (8-byte aligned), as split_x_kernel rounds them.
__device__ __forceinline__ void store_plane4(uint16_t* p, float4 v) {
  *reinterpret_cast<uint2*>(p) = make_uint2(pack2(bf16_bits(v.x), bf16_bits(v.y)), pack2(bf16_bits(v.z), bf16_bits(v.w)));
}

// Order (depends on n only): chunk i/4 to thread (i/4) % 256, which adds squares in increasing i;
// then warp_sum's butterfly, then warps 0..7 in order; float4 or scalar loads give the same bits.
// kAdd: each element of x first becomes x + a (as add computes it) and is stored back; the
// barrier before the normalization makes the stores visible to the threads that read them.
// hi (n a multiple of 32): y's bf16 plane [rows][n] as well, for the next matmul.
template <bool kAdd>
__global__ void __launch_bounds__(kNormThreads)
    rmsnorm_kernel(float* x, const float* a, const float* g, float eps, bool add_one, int64_t n,
                   float* y, uint16_t* hi) {
  grid_wait();
  grid_launch_next();
  __shared__ float warp_sums[kNormThreads / 32];
  float* xr = x + static_cast<int64_t>(blockIdx.x) * n;
  const float* ar = kAdd ? a + static_cast<int64_t>(blockIdx.x) * n : nullptr;
  float* yr = y + static_cast<int64_t>(blockIdx.x) * n;
  uint16_t* hr = hi ? hi + static_cast<int64_t>(blockIdx.x) * n : nullptr;
  const int t = threadIdx.x;
  const int64_t nc = n / 4;
  const bool vec = ((reinterpret_cast<uintptr_t>(xr) | reinterpret_cast<uintptr_t>(yr) |
                     reinterpret_cast<uintptr_t>(g) | reinterpret_cast<uintptr_t>(ar)) & 15u) == 0;
  auto* x4 = reinterpret_cast<float4*>(xr);
  const auto* a4 = reinterpret_cast<const float4*>(ar);
  const auto* g4 = reinterpret_cast<const float4*>(g);
  float4 xv[kNormCache], gv[kNormCache];
  float s = 0.0f;
  if (vec) {
    // The thread's first chunks of x and w load together before the reduction.
#pragma unroll
    for (int k = 0; k < kNormCache; ++k) {
      const int64_t c = t + static_cast<int64_t>(k) * kNormThreads;
      xv[k] = c < nc ? x4[c] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      gv[k] = c < nc ? g4[c] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (kAdd && c < nc) x4[c] = xv[k] = add4(xv[k], a4[c]);
    }
#pragma unroll
    for (int k = 0; k < kNormCache; ++k)
      if (t + static_cast<int64_t>(k) * kNormThreads < nc)
        s = add_squares4(s, xv[k].x, xv[k].y, xv[k].z, xv[k].w);
#pragma unroll 4
    for (int64_t c = t + static_cast<int64_t>(kNormCache) * kNormThreads; c < nc; c += kNormThreads) {
      float4 v = x4[c];
      if (kAdd) x4[c] = v = add4(v, a4[c]);
      s = add_squares4(s, v.x, v.y, v.z, v.w);
    }
  } else {
#pragma unroll 4
    for (int64_t c = t; c < nc; c += kNormThreads) {
      float* p = xr + 4 * c;
      if (kAdd)
        for (int e = 0; e < 4; ++e) p[e] = p[e] + ar[4 * c + e];
      s = add_squares4(s, p[0], p[1], p[2], p[3]);
    }
  }
  // The short last chunk comes after all of its owner's full chunks.
  if (t == nc % kNormThreads)
    for (int64_t i = 4 * nc; i < n; ++i) {
      if (kAdd) xr[i] = xr[i] + ar[i];
      s = __fadd_rn(s, __fmul_rn(xr[i], xr[i]));
    }
  s = warp_sum(s);
  if ((t & 31) == 0) warp_sums[t >> 5] = s;
  __syncthreads();
  float total = warp_sums[0];
#pragma unroll
  for (int w = 1; w < kNormThreads / 32; ++w) total = __fadd_rn(total, warp_sums[w]);
  const float inv = 1.0f / sqrtf(total / static_cast<float>(n) + eps);
  if (vec) {
    auto* y4 = reinterpret_cast<float4*>(yr);
#pragma unroll
    for (int k = 0; k < kNormCache; ++k) {
      const int64_t c = t + static_cast<int64_t>(k) * kNormThreads;
      if (c < nc) {
        const float4 v = norm4(xv[k], gv[k], inv, add_one);
        y4[c] = v;
        if (hr) store_plane4(hr + 4 * c, v);
      }
    }
    for (int64_t c = t + static_cast<int64_t>(kNormCache) * kNormThreads; c < nc; c += kNormThreads) {
      const float4 v = norm4(x4[c], g4[c], inv, add_one);
      y4[c] = v;
      if (hr) store_plane4(hr + 4 * c, v);
    }
    for (int64_t i = 4 * nc + t; i < n; i += kNormThreads) yr[i] = norm_elem(xr[i], g[i], inv, add_one);
  } else {
    for (int64_t i = t; i < n; i += kNormThreads) {
      const float v = norm_elem(xr[i], g[i], inv, add_one);
      yr[i] = v;
      if (hr) hr[i] = bf16_bits(v);
    }
  }
}

constexpr int kRopeThreads = 256;

// cos and sin of each row's pair angles (f32 angle, double cos/sin, as the cpu backend), times
// mscale: cs [rows][cos of the half pairs, then their sin]; one thread per (row, pair).
__global__ void rope_table_kernel(const int32_t* pos, const float* inv_freq, int half, float mscale,
                                  int64_t n, float* cs) {
  grid_wait();
  grid_launch_next();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int64_t r = i / half;
  const int j = static_cast<int>(i - r * half);
  const float angle = __fmul_rn(static_cast<float>(pos[r]), inv_freq[j]);
  cs[2 * r * half + j] = __fmul_rn(static_cast<float>(cos(static_cast<double>(angle))), mscale);
  cs[2 * r * half + half + j] =
      __fmul_rn(static_cast<float>(sin(static_cast<double>(angle))), mscale);
}

// Rotates pair j of row blockIdx.x (head j / half) by the row's table entry; no reduction.
__global__ void __launch_bounds__(kRopeThreads)
    rope_kernel(float* x, int64_t cols, int n_heads, int head_dim, int half, bool neox,
                const float* cs) {
  grid_wait();
  grid_launch_next();
  float* xr = x + static_cast<int64_t>(blockIdx.x) * cols;
  const float* cr = cs + 2 * static_cast<int64_t>(blockIdx.x) * half;
  const int total = n_heads * half, bstep = neox ? half : 1;
  for (int j = blockIdx.y * kRopeThreads + threadIdx.x; j < total; j += gridDim.y * kRopeThreads) {
    const int h = j / half, i = j - h * half, ia = h * head_dim + (neox ? i : 2 * i);
    const float v0 = xr[ia], v1 = xr[ia + bstep], c = cr[i], s = cr[half + i];
    xr[ia] = __fsub_rn(__fmul_rn(v0, c), __fmul_rn(v1, s));
    xr[ia + bstep] = __fadd_rn(__fmul_rn(v1, c), __fmul_rn(v0, s));
  }
}

__global__ void act_mul_kernel(int act, const float* gate, const float* up, float* out, int64_t n) {
  grid_wait();
  grid_launch_next();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = act_value(act, gate[i]) * up[i];
}

// The float4 forms do each element's arithmetic exactly as the scalar ones.
// hi: out's bf16 plane as well (rows a multiple of 32 long, so the plane is out's layout).
__global__ void act_mul4_kernel(int act, const float4* gate, const float4* up, float4* out,
                                int64_t n4, uint16_t* hi) {
  grid_wait();
  grid_launch_next();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n4) return;
  const float4 g = gate[i], u = up[i];
  const float4 v = make_float4(act_value(act, g.x) * u.x, act_value(act, g.y) * u.y,
                               act_value(act, g.z) * u.z, act_value(act, g.w) * u.w);
  out[i] = v;
  if (hi) store_plane4(hi + 4 * i, v);
}

__global__ void add_kernel(float* y, const float* x, int64_t n) {
  grid_wait();
  grid_launch_next();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = y[i] + x[i];
}

__global__ void add4_kernel(float4* y, const float4* x, int64_t n4) {
  grid_wait();
  grid_launch_next();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n4) return;
  const float4 a = y[i], b = x[i];
  y[i] = make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
}

__global__ void scale_kernel(float* x, float s, int64_t n) {
  grid_wait();
  grid_launch_next();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] = x[i] * s;
}

__global__ void scale4_kernel(float4* x, float s, int64_t n4) {
  grid_wait();
  grid_launch_next();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n4) return;
  const float4 a = x[i];
  x[i] = make_float4(a.x * s, a.y * s, a.z * s, a.w * s);
}

// Whether n floats at each pointer can be read as float4: n % 4 == 0 and 16-byte aligned.
bool vec4(int64_t n, std::initializer_list<const void*> ptrs) {
  if (n % 4 != 0) return false;
  for (const void* p : ptrs)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  return true;
}

// Softmax of one row (softmax_row).
__global__ void softmax_kernel(const float* logits, int64_t n, float* prob) {
  grid_wait();
  grid_launch_next();
  __shared__ float sh[kRowThreads];
  softmax_row<kRowThreads>(logits + static_cast<int64_t>(blockIdx.x) * n, n,
                           prob + static_cast<int64_t>(blockIdx.x) * n, sh);
}

__global__ void gather_kernel(const float* src, const int32_t* rows, int64_t cols, float* dst,
                              int64_t total) {
  grid_wait();
  grid_launch_next();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= total) return;
  const int64_t r = i / cols, c = i % cols;
  dst[i] = src[static_cast<int64_t>(rows[r]) * cols + c];
}

// One thread per column applies the n updates in i order, so repeated rows sum in order.
__global__ void scatter_kernel(float* dst, const float* src, const int32_t* rows, const float* w,
                               int n, int64_t cols) {
  grid_wait();
  grid_launch_next();
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  for (int i = 0; i < n; ++i) {
    float* d = dst + static_cast<int64_t>(rows[i]) * cols + c;
    *d = *d + w[i] * src[static_cast<int64_t>(i) * cols + c];
  }
}

}  // namespace

void CudaBackend::embed(const Weight& table, const int32_t* ids, int n, Tensor out) {
  const ProfScope prof(*this, "embed", nullptr, n);
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
  launch_kernel(embed_kernel, grid_for(total, 256), 256, 0, dt_code(t.dtype), t.data, t.scales,
                d_ids, t.cols, out.data, total);
  check_launch("embed");
}

void CudaBackend::rmsnorm(const Tensor& x, const Weight& gw, float eps, bool add_one, Tensor y) {
  const ProfScope prof(*this, "rmsnorm", nullptr, x.rows);
  const CudaWeight& g = as_cuda(gw, "rmsnorm");
  check_tensor(x, "rmsnorm", "x");
  check_tensor(y, "rmsnorm", "y");
  TF_CHECK(x.rows == y.rows && x.cols == y.cols && g.rows == 1 && g.cols == x.cols && x.cols > 0,
           "rmsnorm: x [", x.rows, " x ", x.cols, "] with ", g.name, " [", g.rows, " x ", g.cols,
           "] into y [", y.rows, " x ", y.cols, "]");
  if (x.rows == 0) return;
  TF_CHECK(x.rows <= 0x7fffffff, "rmsnorm: ", x.rows, " rows");
  uint16_t* hi = plane_for(y);
  launch_kernel(rmsnorm_kernel<false>, static_cast<unsigned>(x.rows), kNormThreads, 0, x.data,
                nullptr, g.f32, eps, add_one, x.cols, y.data, hi);
  plane_written(y, hi);
  check_launch("rmsnorm");
}

void CudaBackend::add_rmsnorm(Tensor x, const Tensor& a, const Weight& gw, float eps, bool add_one,
                              Tensor y) {
  const ProfScope prof(*this, "add_rmsnorm", nullptr, x.rows);
  const CudaWeight& g = as_cuda(gw, "add_rmsnorm");
  check_tensor(x, "add_rmsnorm", "x");
  check_tensor(a, "add_rmsnorm", "a");
  check_tensor(y, "add_rmsnorm", "y");
  TF_CHECK(a.rows == x.rows && a.cols == x.cols && x.rows == y.rows && x.cols == y.cols &&
               g.rows == 1 && g.cols == x.cols && x.cols > 0,
           "add_rmsnorm: x [", x.rows, " x ", x.cols, "] += a [", a.rows, " x ", a.cols, "] with ",
           g.name, " [", g.rows, " x ", g.cols, "] into y [", y.rows, " x ", y.cols, "]");
  TF_CHECK(y.data != x.data && y.data != a.data, "add_rmsnorm: y must not alias x or a");
  if (x.rows == 0) return;
  TF_CHECK(x.rows <= 0x7fffffff, "add_rmsnorm: ", x.rows, " rows");
  uint16_t* hi = plane_for(y);
  launch_kernel(rmsnorm_kernel<true>, static_cast<unsigned>(x.rows), kNormThreads, 0, x.data,
                a.data, g.f32, eps, add_one, x.cols, y.data, hi);
  plane_written(y, hi);
  check_launch("add_rmsnorm");
}

void CudaBackend::rope(Tensor x, int n_heads, const int32_t* pos, const RopeParams& p) {
  const ProfScope prof(*this, "rope", nullptr, x.rows);
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
  // Rows index the grid and a row's pairs an int.
  TF_CHECK(x.rows <= 0x7fffffff && x.cols <= (int64_t{1} << 30), "rope: x [", x.rows, " x ", x.cols,
           "] with rot_dim ", p.rot_dim, " exceeds the kernel's limits");
  const float* cs = rope_cs(pos, x.rows, p);
  const int total = n_heads * half;
  const dim3 grid(
      static_cast<unsigned>(x.rows),
      static_cast<unsigned>(std::min<int64_t>((total + kRopeThreads - 1) / kRopeThreads, 65535)));
  launch_kernel(rope_kernel, grid, kRopeThreads, 0, x.data, x.cols, n_heads, p.head_dim, half,
                p.neox, cs);
  check_launch("rope");
}

const float* CudaBackend::rope_cs(const int32_t* pos, int64_t rows, const RopeParams& p) {
  const int half = p.rot_dim / 2;
  const uint64_t pos_bytes = static_cast<uint64_t>(rows) * 4, off = (pos_bytes + 15) / 16 * 16;
  // Positions, frequencies and mscale make one blob; the table of its cos/sin is computed once
  // and kept while the blob stays the same (q and k of every layer of a round).
  std::vector<uint8_t> blob(off + static_cast<uint64_t>(half) * 4 + 4, 0);
  std::memcpy(blob.data(), pos, pos_bytes);
  std::memcpy(blob.data() + off, p.inv_freq.data(), static_cast<uint64_t>(half) * 4);
  std::memcpy(blob.data() + off + static_cast<uint64_t>(half) * 4, &p.mscale, 4);
  const int64_t pairs = rows * half;
  auto* cs =
      static_cast<float*>(buffer(kSlotRope, static_cast<uint64_t>(pairs) * 2 * sizeof(float)));
  if (cs != rope_table_ || blob != rope_blob_) {
    rope_blob_.clear();
    auto* s = static_cast<const uint8_t*>(meta(blob.data(), blob.size()));
    launch_kernel(rope_table_kernel, grid_for(pairs, 256), 256, 0,
                  reinterpret_cast<const int32_t*>(s), reinterpret_cast<const float*>(s + off),
                  half, p.mscale, pairs, cs);
    check_launch("rope");
    rope_blob_ = std::move(blob);
    rope_table_ = cs;
  }
  return cs;
}

void CudaBackend::act_mul(Act act, const Tensor& gate, const Tensor& up, Tensor out) {
  const ProfScope prof(*this, "act_mul", nullptr, gate.rows);
  check_tensor(gate, "act_mul", "gate");
  check_tensor(up, "act_mul", "up");
  check_tensor(out, "act_mul", "out");
  TF_CHECK(gate.rows == up.rows && gate.cols == up.cols && out.rows == gate.rows &&
               out.cols == gate.cols,
           "act_mul: gate [", gate.rows, " x ", gate.cols, "], up [", up.rows, " x ", up.cols,
           "], out [", out.rows, " x ", out.cols, "]");
  const int64_t n = gate.rows * gate.cols;
  if (n == 0) return;
  const int a = act_code(act);
  uint16_t* hi = nullptr;
  if (vec4(n, {gate.data, up.data, out.data})) {
    hi = plane_for(out);
    launch_kernel(act_mul4_kernel, grid_for(n / 4, 256), 256, 0, a,
                  reinterpret_cast<const float4*>(gate.data),
                  reinterpret_cast<const float4*>(up.data), reinterpret_cast<float4*>(out.data),
                  n / 4, hi);
  } else {
    launch_kernel(act_mul_kernel, grid_for(n, 256), 256, 0, a, gate.data, up.data, out.data, n);
  }
  plane_written(out, hi);
  check_launch("act_mul");
}

void CudaBackend::add(Tensor y, const Tensor& x) {
  const ProfScope prof(*this, "add", nullptr, y.rows);
  check_tensor(y, "add", "y");
  check_tensor(x, "add", "x");
  TF_CHECK(y.rows == x.rows && y.cols == x.cols, "add: y [", y.rows, " x ", y.cols, "] += x [",
           x.rows, " x ", x.cols, "]");
  const int64_t n = y.rows * y.cols;
  if (n == 0) return;
  if (vec4(n, {y.data, x.data}))
    launch_kernel(add4_kernel, grid_for(n / 4, 256), 256, 0, reinterpret_cast<float4*>(y.data),
                  reinterpret_cast<const float4*>(x.data), n / 4);
  else
    launch_kernel(add_kernel, grid_for(n, 256), 256, 0, y.data, x.data, n);
  check_launch("add");
}

void CudaBackend::scale(Tensor x, float s) {
  const ProfScope prof(*this, "scale", nullptr, x.rows);
  check_tensor(x, "scale", "x");
  const int64_t n = x.rows * x.cols;
  if (n == 0) return;
  if (vec4(n, {x.data}))
    launch_kernel(scale4_kernel, grid_for(n / 4, 256), 256, 0, reinterpret_cast<float4*>(x.data), s,
                  n / 4);
  else
    launch_kernel(scale_kernel, grid_for(n, 256), 256, 0, x.data, s, n);
  check_launch("scale");
}

void CudaBackend::topk_softmax(const Tensor& logits, int k, bool norm, int32_t* idx_out,
                               float* w_out) {
  graph_refuse();
  const ProfScope prof(*this, "topk_softmax", nullptr, logits.rows);
  check_tensor(logits, "topk_softmax", "logits");
  TF_CHECK(k >= 1 && k <= logits.cols, "topk_softmax: k ", k, " for logits [", logits.rows, " x ",
           logits.cols, "]");
  TF_CHECK(logits.rows == 0 || (idx_out != nullptr && w_out != nullptr),
           "topk_softmax: null outputs");
  if (logits.rows == 0) return;
  const int64_t n = logits.cols;
  const uint64_t total = static_cast<uint64_t>(logits.rows * n);
  auto* d_prob = reinterpret_cast<float*>(scratch(total * 4));
  launch_kernel(softmax_kernel, static_cast<unsigned>(logits.rows), kRowThreads, 0, logits.data, n,
                d_prob);
  check_launch("topk_softmax");
  std::vector<float> prob(total);
  {
    const WaitScope wait(*this);
    TF_CUDA_CHECK(cudaMemcpy(prob.data(), d_prob, total * 4, cudaMemcpyDeviceToHost), "topk_softmax");
  }
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
  const ProfScope prof(*this, "gather_rows", nullptr, n);
  check_gather(src, rows, n, dst);
  const int64_t total = n * src.cols;
  if (total == 0) return;
  auto* d_rows = static_cast<const int32_t*>(meta(rows, static_cast<uint64_t>(n) * 4));
  launch_kernel(gather_kernel, grid_for(total, 256), 256, 0, src.data, d_rows, src.cols, dst.data,
                total);
  check_launch("gather_rows");
}

void CudaBackend::scatter_add_scaled(Tensor dst, const Tensor& src, const int32_t* rows,
                                     const float* w, int n) {
  const ProfScope prof(*this, "scatter_add_scaled", nullptr, n);
  check_scatter(dst, src, rows, w, n);
  if (n == 0 || dst.cols == 0) return;
  const uint64_t off = (static_cast<uint64_t>(n) * 4 + 15) / 16 * 16;
  std::vector<uint8_t> blob(off + static_cast<uint64_t>(n) * 4, 0);
  std::memcpy(blob.data(), rows, static_cast<uint64_t>(n) * 4);
  std::memcpy(blob.data() + off, w, static_cast<uint64_t>(n) * 4);
  auto* s = static_cast<const uint8_t*>(meta(blob.data(), blob.size()));
  launch_kernel(scatter_kernel, grid_for(dst.cols, 128), 128, 0, dst.data, src.data,
                reinterpret_cast<const int32_t*>(s), reinterpret_cast<const float*>(s + off), n,
                dst.cols);
  check_launch("scatter_add_scaled");
}

}  // namespace tf::cuda
