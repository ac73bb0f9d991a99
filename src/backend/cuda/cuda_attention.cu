// Paged KV writes and causal attention on the GPU.
//
// Order rule: one block of 4 warps per (row, head). The row's keys [first, pos] are cut into
// tiles of 32 keys counted from first; warp w takes tiles w, w + 4, w + 8, ... in order and
// keeps an online softmax (running max, sum, V accumulator). Lane j scores key j of a tile
// (dot over head_dim in order by fma, then scale, then softcap). The four warp partials are
// merged in warp order. The partition depends only on the key count, so a row's bits do not
// depend on the batch, on how keys were stored, or on page placement.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_util.cuh"

namespace tf::cuda {

namespace {

constexpr int kAttnWarps = 4;
constexpr int kMaxDimsPerLane = 16;  // head_dim up to 512

__global__ void kv_store_kernel(float* k_layer, float* v_layer, const float* k, const float* v,
                                const int64_t* dst_row, int64_t width, int64_t total) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= total) return;
  const int64_t r = i / width, c = i % width;
  k_layer[dst_row[r] * width + c] = k[i];
  v_layer[dst_row[r] * width + c] = v[i];
}

struct AttnArgs {
  const float* q;
  float* out;
  const float* k;  // layer base, [pages][page_size][kv_width]
  const float* v;
  const int32_t* row_pos;
  const int32_t* row_first;
  const int32_t* row_pages;  // offset of each row's page list in pages
  const int32_t* pages;
  int page_size, kv_width, n_heads, group, head_dim;
  int64_t ldq;
  float scale, softcap;
};

__device__ __forceinline__ int64_t key_offset(const AttnArgs& a, const int32_t* pt, int32_t key) {
  const int32_t page = pt[key / a.page_size];
  return (static_cast<int64_t>(page) * a.page_size + key % a.page_size) * a.kv_width;
}

__global__ void __launch_bounds__(kAttnWarps * 32) attention_kernel(AttnArgs a) {
  extern __shared__ float sh[];  // q [head_dim], then per warp: acc [head_dim], m, l
  const int r = blockIdx.y, h = blockIdx.x;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, hd = a.head_dim;
  float* qs = sh;
  float* accs = sh + hd;
  float* ml = accs + kAttnWarps * hd;
  const float* qrow = a.q + static_cast<int64_t>(r) * a.ldq + static_cast<int64_t>(h) * hd;
  for (int d = threadIdx.x; d < hd; d += blockDim.x) qs[d] = qrow[d];
  __syncthreads();
  const int32_t pos = a.row_pos[r], first = a.row_first[r];
  const int32_t* pt = a.pages + a.row_pages[r];
  const int64_t head_off = static_cast<int64_t>(h / a.group) * hd;
  const int n = pos - first + 1, tiles = (n + 31) / 32;
  float m = -INFINITY, l = 0.0f, acc[kMaxDimsPerLane];
#pragma unroll
  for (int i = 0; i < kMaxDimsPerLane; ++i) acc[i] = 0.0f;
  for (int t = warp; t < tiles; t += kAttnWarps) {
    const int base = first + t * 32, valid = min(32, pos - base + 1);
    float s = -INFINITY;
    if (lane < valid) {
      const float* kr = a.k + key_offset(a, pt, base + lane) + head_off;
      float dot = 0.0f;
      for (int d = 0; d < hd; ++d) dot = __fmaf_rn(qs[d], kr[d], dot);
      s = __fmul_rn(dot, a.scale);
      if (a.softcap > 0.0f) s = __fmul_rn(a.softcap, tanhf(__fdiv_rn(s, a.softcap)));
    }
    const float m_new = fmaxf(m, warp_max(s));
    const float alpha = m == -INFINITY ? 0.0f : expf(__fsub_rn(m, m_new));
    const float p = lane < valid ? expf(__fsub_rn(s, m_new)) : 0.0f;
    l = __fadd_rn(__fmul_rn(l, alpha), warp_sum(p));
#pragma unroll
    for (int i = 0; i < kMaxDimsPerLane; ++i) acc[i] = __fmul_rn(acc[i], alpha);
    for (int j = 0; j < valid; ++j) {
      const float pj = __shfl_sync(0xffffffffu, p, j);
      const float* vr = a.v + key_offset(a, pt, base + j) + head_off;
#pragma unroll
      for (int i = 0; i < kMaxDimsPerLane; ++i) {
        const int d = lane + 32 * i;
        if (d < hd) acc[i] = __fmaf_rn(pj, vr[d], acc[i]);
      }
    }
    m = m_new;
  }
#pragma unroll
  for (int i = 0; i < kMaxDimsPerLane; ++i) {
    const int d = lane + 32 * i;
    if (d < hd) accs[warp * hd + d] = acc[i];
  }
  if (lane == 0) ml[2 * warp] = m, ml[2 * warp + 1] = l;
  __syncthreads();
  float mx = -INFINITY;
  for (int w = 0; w < kAttnWarps; ++w) mx = fmaxf(mx, ml[2 * w]);
  float L = 0.0f, e[kAttnWarps];
  for (int w = 0; w < kAttnWarps; ++w) {
    e[w] = ml[2 * w] == -INFINITY ? 0.0f : expf(__fsub_rn(ml[2 * w], mx));
    L = __fmaf_rn(ml[2 * w + 1], e[w], L);
  }
  float* orow = a.out + static_cast<int64_t>(r) * a.ldq + static_cast<int64_t>(h) * hd;
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float o = 0.0f;
    for (int w = 0; w < kAttnWarps; ++w) o = __fmaf_rn(accs[w * hd + d], e[w], o);
    orow[d] = __fdiv_rn(o, L);
  }
}

// Checks that row r's positions [first, pos] have valid pages in its sequence.
void check_row(const RowLayout& rows, int r, int first, const KvStorage& kv, const char* op) {
  const int32_t s = rows.seq[static_cast<size_t>(r)], pos = rows.pos[static_cast<size_t>(r)];
  TF_CHECK(s >= 0 && static_cast<size_t>(s) < rows.seq_pages.size(), op, ": row ", r, " has seq ",
           s, " but the layout has ", rows.seq_pages.size(), " sequences");
  TF_CHECK(pos >= 0, op, ": row ", r, " has position ", pos);
  const auto& pages = rows.seq_pages[static_cast<size_t>(s)];
  const int64_t last = pos / kv.page_size;
  TF_CHECK(last < static_cast<int64_t>(pages.size()), op, ": row ", r, " at position ", pos,
           " needs page ", last, " of seq ", s, " which has ", pages.size(), " pages");
  for (int64_t i = std::max(0, first) / kv.page_size; i <= last; ++i) {
    const int32_t id = pages[static_cast<size_t>(i)];
    TF_CHECK(id >= 0 && id < kv.pages, op, ": seq ", s, " page ", i, " has id ", id, " outside ",
             kv.pages, " pages");
  }
}

void check_layout(const RowLayout& rows, int64_t m, const char* op) {
  TF_CHECK(static_cast<int64_t>(rows.pos.size()) == m && static_cast<int64_t>(rows.seq.size()) == m,
           op, ": layout has ", rows.pos.size(), " positions and ", rows.seq.size(),
           " seq ids for ", m, " rows");
}

}  // namespace

void CudaBackend::kv_store(KvStorage& kvs, int layer, const Tensor& k, const Tensor& v,
                           const RowLayout& rows) {
  const CudaKv& kv = as_cuda_kv(kvs, "kv_store");
  check_tensor(k, "kv_store", "k");
  check_tensor(v, "kv_store", "v");
  const int64_t width = static_cast<int64_t>(kv.kv_heads) * kv.head_dim;
  TF_CHECK(k.cols == width && v.cols == width && k.rows == v.rows, "kv_store: k [", k.rows, " x ",
           k.cols, "] and v [", v.rows, " x ", v.cols, "] for ", kv.kv_heads, " heads of ",
           kv.head_dim);
  TF_CHECK(layer >= 0 && layer < kv.layers, "kv_store: layer ", layer, " of ", kv.layers);
  check_layout(rows, k.rows, "kv_store");
  for (int r = 0; r < k.rows; ++r) check_row(rows, r, rows.pos[static_cast<size_t>(r)], kv, "kv_store");
  if (k.rows == 0) return;
  std::vector<int64_t> dst(static_cast<size_t>(k.rows));
  for (int r = 0; r < k.rows; ++r) {
    const int32_t pos = rows.pos[static_cast<size_t>(r)];
    const int32_t page = rows.seq_pages[static_cast<size_t>(rows.seq[static_cast<size_t>(r)])]
                                       [static_cast<size_t>(pos / kv.page_size)];
    dst[static_cast<size_t>(r)] = static_cast<int64_t>(page) * kv.page_size + pos % kv.page_size;
  }
  auto* d_dst = static_cast<const int64_t*>(meta(dst.data(), dst.size() * 8));
  const int64_t total = k.rows * width;
  kv_store_kernel<<<grid_for(total, 256), 256>>>(kv.k_layer(layer), kv.v_layer(layer), k.data,
                                                 v.data, d_dst, width, total);
  check_launch("kv_store");
}

void CudaBackend::attention(const Tensor& q, Tensor out, const KvStorage& kvs, int layer,
                            const RowLayout& rows, const AttnParams& p) {
  const CudaKv& kv = as_cuda_kv(kvs, "attention");
  check_tensor(q, "attention", "q");
  check_tensor(out, "attention", "out");
  TF_CHECK(p.n_heads > 0 && p.n_kv_heads > 0 && p.n_heads % p.n_kv_heads == 0 &&
               p.n_kv_heads == kv.kv_heads && p.head_dim == kv.head_dim,
           "attention: ", p.n_heads, " heads over ", p.n_kv_heads, " kv heads of ", p.head_dim,
           " with storage of ", kv.kv_heads, " kv heads of ", kv.head_dim);
  TF_CHECK(p.head_dim <= 32 * kMaxDimsPerLane, "attention: head_dim ", p.head_dim,
           " is above the cuda backend's limit of ", 32 * kMaxDimsPerLane);
  const int64_t width = static_cast<int64_t>(p.n_heads) * p.head_dim;
  TF_CHECK(q.cols == width && out.rows == q.rows && out.cols == width, "attention: q [", q.rows,
           " x ", q.cols, "] and out [", out.rows, " x ", out.cols, "] for ", p.n_heads,
           " heads of ", p.head_dim);
  TF_CHECK(layer >= 0 && layer < kv.layers, "attention: layer ", layer, " of ", kv.layers);
  TF_CHECK(p.sliding_window >= 0 && p.softcap >= 0.0f && std::isfinite(p.scale),
           "attention: sliding_window ", p.sliding_window, ", softcap ", p.softcap, ", scale ",
           p.scale);
  check_layout(rows, q.rows, "attention");
  const int m = static_cast<int>(q.rows);
  if (m == 0) return;
  TF_CHECK(q.rows <= 65535, "attention: ", q.rows, " rows is more than one call takes");
  // Metadata: pos, first and page-list offset per row, then the page lists of used sequences.
  std::vector<int32_t> meta(static_cast<size_t>(3 * m));
  std::vector<int32_t> seq_off(rows.seq_pages.size(), -1);
  for (int r = 0; r < m; ++r) {
    const int32_t pos = rows.pos[static_cast<size_t>(r)];
    const int32_t first = p.sliding_window > 0 ? std::max(0, pos - p.sliding_window + 1) : 0;
    check_row(rows, r, first, kv, "attention");
    const int32_t s = rows.seq[static_cast<size_t>(r)];
    if (seq_off[static_cast<size_t>(s)] < 0) {
      seq_off[static_cast<size_t>(s)] = static_cast<int32_t>(meta.size()) - 3 * m;
      const auto& pg = rows.seq_pages[static_cast<size_t>(s)];
      meta.insert(meta.end(), pg.begin(), pg.end());
    }
    meta[static_cast<size_t>(r)] = pos;
    meta[static_cast<size_t>(m + r)] = first;
    meta[static_cast<size_t>(2 * m + r)] = seq_off[static_cast<size_t>(s)];
  }
  auto* d_meta = static_cast<const int32_t*>(this->meta(meta.data(), meta.size() * 4));
  AttnArgs a{q.data, out.data, kv.k_layer(layer), kv.v_layer(layer), d_meta, d_meta + m,
             d_meta + 2 * m, d_meta + 3 * m, kv.page_size, kv.kv_heads * kv.head_dim, p.n_heads,
             p.n_heads / p.n_kv_heads, p.head_dim, width, p.scale, p.softcap};
  const size_t smem = (static_cast<size_t>(p.head_dim) * (1 + kAttnWarps) + 2 * kAttnWarps) * 4;
  attention_kernel<<<dim3(static_cast<unsigned>(p.n_heads), static_cast<unsigned>(m)),
                     kAttnWarps * 32, smem>>>(a);
  check_launch("attention");
}

}  // namespace tf::cuda
