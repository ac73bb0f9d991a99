// Planted faults for the kernel contract: each is a deliberately wrong variant of one op, and
// the gates must fail on it. They live only in this test binary.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_util.cuh"
#include "contract.h"

namespace tf::contract {

namespace {

using cuda::as_cuda;
using cuda::as_cuda_kv;

// Device copy of host data that frees itself.
template <typename T>
struct DevBuf {
  T* p = nullptr;
  explicit DevBuf(const std::vector<T>& v) {
    TF_CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(v.size(), 1) * sizeof(T)), "control buffer");
    TF_CUDA_CHECK(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), "control buffer");
  }
  ~DevBuf() { cudaFree(p); }
};

void sync(const char* what) {
  TF_CUDA_CHECK(cudaGetLastError(), what);
  TF_CUDA_CHECK(cudaDeviceSynchronize(), what);
}

// One thread per output over BF16 weights, x rounded to bf16 where round_x; reverse K order when
// M > 1 (fault 1) or drop the last k (fault 2).
__global__ void naive_matmul(const float* x, int64_t M, int64_t K, const uint16_t* w,
                             const float* bias, float* y, int64_t N, int fault, bool round_x) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= M * N) return;
  const int64_t r = i / N, n = i % N;
  float s = 0.0f;
  const int64_t kend = fault == 2 ? K - 1 : K;
  for (int64_t j = 0; j < kend; ++j) {
    const int64_t k = fault == 1 && M > 1 ? K - 1 - j : j;
    const float xv = round_x ? __bfloat162float(__float2bfloat16_rn(x[r * K + k])) : x[r * K + k];
    s = fmaf(xv, __bfloat162float(__ushort_as_bfloat16(w[n * K + k])), s);
  }
  y[i] = bias ? s + bias[n] : s;
}

// x as the backend's matmul input takes it, except fault 3 (rounded to bf16) and 4 (whole).
MatmulFn naive_matmul_fn(int fault) {
  return [fault](Backend& be, const Tensor& x, const Weight& wt, const Weight* b, Tensor y) {
    const auto& w = as_cuda(wt, "control matmul");
    TF_CHECK(w.dtype == DType::BF16, "control matmul takes BF16 weights");
    const bool round_x = fault == 3 || (fault != 4 && be.matmul_input() == MatmulInput::BF16);
    naive_matmul<<<cuda::grid_for(x.rows * y.cols, 128), 128>>>(
        x.data, x.rows, x.cols, static_cast<const uint16_t*>(w.data),
        b ? as_cuda(*b, "control").f32 : nullptr, y.data, y.cols, fault, round_x);
    sync("control matmul");
  };
}

// One thread per row; sums squares in reverse when the call has more than one row.
__global__ void naive_rmsnorm(const float* x, const float* g, float eps, bool add_one, int64_t n,
                              int64_t M, float* y) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= M) return;
  float s = 0.0f;
  for (int64_t j = 0; j < n; ++j) {
    const int64_t i = M > 1 ? n - 1 - j : j;
    s += x[r * n + i] * x[r * n + i];
  }
  const float inv = 1.0f / sqrtf(s / n + eps);
  for (int64_t i = 0; i < n; ++i) y[r * n + i] = x[r * n + i] * inv * (add_one ? 1.0f + g[i] : g[i]);
}

__global__ void gelu_erf(const float* g, const float* u, float* o, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) o[i] = 0.5f * g[i] * (1.0f + erff(g[i] * 0.70710678f)) * u[i];
}

// One thread per (row, head), two passes over the keys. Fault 1 drops the row's own key
// (when it has another); fault 2 walks keys backwards when the call has more than one row.
// E: the pool's values (f32, or bf16 bits in bf16 mode).
template <class E>
__global__ void naive_attention(const float* q, float* out, const E* kl, const E* vl,
                                const int32_t* pos, const int32_t* first, const int32_t* pages,
                                int m, int n_heads, int group, int hd, int page_size, int kvw,
                                float scale, float softcap, int fault) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= m * n_heads) return;
  const int r = t / n_heads, h = t % n_heads;
  const float* qr = q + static_cast<int64_t>(r) * n_heads * hd + h * hd;
  float* o = out + static_cast<int64_t>(r) * n_heads * hd + h * hd;
  int last = pos[r];
  if (fault == 1 && last > first[r]) --last;
  auto score = [&](int key) {
    const E* k = kl + (static_cast<int64_t>(pages[key / page_size]) * page_size + key % page_size) * kvw + (h / group) * hd;
    float s = 0.0f;
    for (int d = 0; d < hd; ++d) s = fmaf(qr[d], cuda::kv_get(k[d]), s);
    s *= scale;
    return softcap > 0.0f ? softcap * tanhf(s / softcap) : s;
  };
  float mx = -INFINITY;
  for (int key = first[r]; key <= last; ++key) mx = fmaxf(mx, score(key));
  float sum = 0.0f;
  for (int d = 0; d < hd; ++d) o[d] = 0.0f;
  const int cnt = last - first[r] + 1;
  for (int j = 0; j < cnt; ++j) {
    const int key = fault == 2 && m > 1 ? last - j : first[r] + j;
    const float p = expf(score(key) - mx);
    sum += p;
    const E* v = vl + (static_cast<int64_t>(pages[key / page_size]) * page_size + key % page_size) * kvw + (h / group) * hd;
    for (int d = 0; d < hd; ++d) o[d] = fmaf(p, cuda::kv_get(v[d]), o[d]);
  }
  for (int d = 0; d < hd; ++d) o[d] /= sum;
}

AttnFn naive_attention_fn(int fault) {
  return [fault](Backend&, const Tensor& q, Tensor out, const KvStorage& kvs, int layer,
                 const RowLayout& rows, const AttnParams& p) {
    const auto& kv = as_cuda_kv(kvs, "control attention");
    TF_CHECK(rows.seq_pages.size() == 1, "control attention takes one sequence");
    const int m = static_cast<int>(q.rows);
    std::vector<int32_t> first(static_cast<size_t>(m));
    for (int r = 0; r < m; ++r)
      first[static_cast<size_t>(r)] =
          p.sliding_window > 0 ? std::max(0, rows.pos[static_cast<size_t>(r)] - p.sliding_window + 1) : 0;
    DevBuf<int32_t> dpos(rows.pos), dfirst(first), dpages(rows.seq_pages[0]);
    const auto grid = cuda::grid_for(static_cast<int64_t>(m) * p.n_heads, 64);
    const int group = p.n_heads / p.n_kv_heads, kvw = kv.kv_heads * kv.head_dim;
    if (kv.bf16())
      naive_attention<<<grid, 64>>>(q.data, out.data, static_cast<const uint16_t*>(kv.k_layer(layer)),
                                    static_cast<const uint16_t*>(kv.v_layer(layer)), dpos.p, dfirst.p, dpages.p, m,
                                    p.n_heads, group, p.head_dim, kv.page_size, kvw, p.scale, p.softcap, fault);
    else
      naive_attention<<<grid, 64>>>(q.data, out.data, static_cast<const float*>(kv.k_layer(layer)),
                                    static_cast<const float*>(kv.v_layer(layer)), dpos.p, dfirst.p, dpages.p, m,
                                    p.n_heads, group, p.head_dim, kv.page_size, kvw, p.scale, p.softcap, fault);
    sync("control attention");
  };
}

}  // namespace

MatmulFn control_matmul_korder_by_m() { return naive_matmul_fn(1); }
MatmulFn control_matmul_drop_last_k() { return naive_matmul_fn(2); }
MatmulFn control_matmul_x_bf16() { return naive_matmul_fn(3); }
MatmulFn control_matmul_x_whole() { return naive_matmul_fn(4); }

RmsFn control_rmsnorm_order_by_m() {
  return [](Backend&, const Tensor& x, const Weight& gw, float eps, bool add_one, Tensor y) {
    naive_rmsnorm<<<cuda::grid_for(x.rows, 64), 64>>>(x.data, as_cuda(gw, "control").f32, eps,
                                                       add_one, x.cols, x.rows, y.data);
    sync("control rmsnorm");
  };
}

// Per-head norms that add the squares in reverse, then rope and kv_store.
PrepFn control_prep_norm_reversed() {
  return [](Backend& be, Tensor q, Tensor k, const Tensor& v, const QkNorm& n, const RopeParams& r,
            const AttnParams& p, KvStorage& kv, int l, const RowLayout& rows) {
    for (auto [x, w] : {std::pair{q, n.q}, std::pair{k, n.k}}) {
      if (!w) continue;
      const Tensor h = x.reshape(p.head_dim);
      naive_rmsnorm<<<cuda::grid_for(h.rows, 64), 64>>>(h.data, as_cuda(*w, "control").f32, n.eps, n.add_one,
                                                         h.cols, h.rows, h.data);
      sync("control attention_prep");
    }
    if (r.rot_dim > 0) be.rope(q, p.n_heads, rows.pos.data(), r), be.rope(k, p.n_kv_heads, rows.pos.data(), r);
    be.kv_store(kv, l, k, v, rows);
  };
}

// k goes to the pool before it is rotated.
PrepFn control_prep_store_before_rope() {
  return [](Backend& be, Tensor q, Tensor k, const Tensor& v, const QkNorm& n, const RopeParams& r,
            const AttnParams& p, KvStorage& kv, int l, const RowLayout& rows) {
    be.Backend::attention_prep(q, k, v, n, RopeParams{}, p, kv, l, rows);
    if (r.rot_dim > 0) be.rope(q, p.n_heads, rows.pos.data(), r), be.rope(k, p.n_kv_heads, rows.pos.data(), r);
  };
}

RopeFn control_rope_row_as_pos() {
  return [](Backend& be, Tensor x, int n_heads, const int32_t*, const RopeParams& p) {
    std::vector<int32_t> idx(static_cast<size_t>(x.rows));
    for (size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<int32_t>(i);
    be.rope(x, n_heads, idx.data(), p);
  };
}

ActFn control_act_gelu_erf() {
  return [](Backend& be, Act act, const Tensor& g, const Tensor& u, Tensor o) {
    if (act != Act::GeluTanh) return be.act_mul(act, g, u, o);
    gelu_erf<<<cuda::grid_for(g.rows * g.cols, 256), 256>>>(g.data, u.data, o.data, g.rows * g.cols);
    sync("control act");
  };
}

// The fused launch where it runs, else its ops, with gate's and up's roles swapped.
GluFn control_glu_swapped() {
  return [](Backend& be, Act act, const Tensor& x, const Weight& g, const Weight& u, Tensor o) {
    if (be.matmul_act_mul(act, x, u, g, o)) return true;
    Tensor tg = be.alloc(o.rows, o.cols), tu = be.alloc(o.rows, o.cols);
    be.matmul_many(x, {{&u, nullptr, tg}, {&g, nullptr, tu}});
    be.act_mul(act, tg, tu, o);
    be.free(tg), be.free(tu);
    return true;
  };
}

// The MLP with down fed act's f32 products whole, not the bf16 plane the rule rounds them to; the
// gpu's own ops in f32 mode, where that is the rule, with gate and up swapped instead.
MlpFn control_mlp_down_unrounded() {
  return [](Backend& be, Act act, const Tensor& x, const Weight& g, const Weight& u, const Weight& d, Tensor a,
            Tensor o) {
    const bool bf16 = be.matmul_input() == MatmulInput::BF16;
    Tensor tg = be.alloc(a.rows, a.cols), tu = be.alloc(a.rows, a.cols);
    be.matmul_many(x, {{bf16 ? &g : &u, nullptr, tg}, {bf16 ? &u : &g, nullptr, tu}});
    be.act_mul(act, tg, tu, a);
    if (bf16) be.set_matmul_input(MatmulInput::F32);
    be.matmul(a, d, nullptr, o);
    if (bf16) be.set_matmul_input(MatmulInput::BF16);
    be.free(tg), be.free(tu);
    return true;
  };
}

StoreFn control_store_ignores_pages() {
  return [](Backend& be, KvStorage& kv, int layer, const Tensor& k, const Tensor& v, const RowLayout& rows) {
    RowLayout lay = rows;
    for (auto& pages : lay.seq_pages)
      for (size_t i = 0; i < pages.size(); ++i) pages[i] = static_cast<int32_t>(i);
    be.kv_store(kv, layer, k, v, lay);
  };
}

AttnFn control_attention_drop_last_key() { return naive_attention_fn(1); }
AttnFn control_attention_order_by_rows() { return naive_attention_fn(2); }

AttnFn control_attention_one_sequence() {
  return [](Backend& be, const Tensor& q, Tensor out, const KvStorage& kv, int layer,
            const RowLayout& rows, const AttnParams& p) {
    RowLayout lay = rows;
    std::fill(lay.seq.begin(), lay.seq.end(), 0);
    be.attention(q, out, kv, layer, lay, p);
  };
}

TopkFn control_topk_ties_high() {
  return [](Backend& be, const Tensor& x, int k, bool norm, int32_t* idx, float* w) {
    be.topk_softmax(x, k, norm, idx, w);
    for (int64_t r = 0; r < x.rows; ++r)
      for (int j = 0; j + 1 < k; ++j)
        if (w[r * k + j] == w[r * k + j + 1]) std::swap(idx[r * k + j], idx[r * k + j + 1]);
  };
}

SampleFn control_sample_keyed_by_index() {
  return [](Backend& be, const Tensor& x, const std::vector<SampleSpec>& specs, const std::vector<PenaltyToken>& p,
            int32_t* ids) {
    std::vector<SampleSpec> s = specs;
    for (size_t j = 0; j < s.size(); ++j) s[j].position = j;
    be.sample_rows(x, s, p, ids);
  };
}

SampleFn control_sample_without_penalties() {
  return [](Backend& be, const Tensor& x, const std::vector<SampleSpec>& specs, const std::vector<PenaltyToken>& p,
            int32_t* ids) {
    std::vector<SampleSpec> s = specs;
    for (SampleSpec& one : s) one.pen_count = 0;
    be.sample_rows(x, s, p, ids);
  };
}

ScatterFn control_scatter_reversed() {
  return [](Backend& be, Tensor d, const Tensor& s, const int32_t* rows, const float* w, int n) {
    for (int i = n - 1; i >= 0; --i) be.scatter_add_scaled(d, s.slice_rows(i, 1), rows + i, w + i, 1);
  };
}

}  // namespace tf::contract
