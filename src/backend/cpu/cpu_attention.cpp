// Paged KV writes and causal attention: each (row, head) walks its keys in position order.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "base/dtype.h"
#include "base/error.h"

namespace tf::cpu {

namespace {

const CpuKv& as_cpu_kv(const KvStorage& kv, const char* op) {
  auto* c = dynamic_cast<const CpuKv*>(&kv);
  TF_CHECK(c != nullptr, op, ": KV storage was not made by the cpu backend");
  return *c;
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

float round_bf16(float x) { return bf16_to_f32(f32_to_bf16(x)); }

// --matmul-input bf16: the GPU's rule (cuda_attention.cu) with q, k, v and the weights rounded to
// bf16 where its products take them: per split of 64 keys on the absolute position grid, the
// split's max and exp-sum of rounded weights, its PV sum, folded into the running state in order.
// key(i) and value(i) point at position i's K and V rows of this head.
template <class KeyAt, class ValueAt>
void attend_bf16(const float* q, int hd, int first, int pos, const AttnParams& p, const KeyAt& key,
                 const ValueAt& value, std::vector<float>& qr, std::vector<float>& score,
                 std::vector<float>& acc, std::vector<float>& acc_s, float* out) {
  constexpr int kSplit = 64;
  qr.resize(static_cast<size_t>(hd));
  score.resize(kSplit);
  acc_s.resize(static_cast<size_t>(hd));
  for (int d = 0; d < hd; ++d) qr[static_cast<size_t>(d)] = round_bf16(q[d]);
  float m = 0.0f, l = 0.0f;
  bool started = false;
  for (int s = first / kSplit; s <= pos / kSplit; ++s) {
    const int lo = std::max(first, s * kSplit), hi = std::min(pos, s * kSplit + kSplit - 1);
    float mx = -INFINITY;
    for (int i = lo; i <= hi; ++i) {
      const float* k = key(i);
      float dot = 0.0f;
      for (int d = 0; d < hd; ++d) dot += qr[static_cast<size_t>(d)] * round_bf16(k[d]);
      float y = dot * p.scale;
      if (p.softcap > 0.0f) y = p.softcap * std::tanh(y / p.softcap);
      score[static_cast<size_t>(i - lo)] = y;
      mx = std::max(mx, y);
    }
    float ls = 0.0f;
    std::fill(acc_s.begin(), acc_s.end(), 0.0f);
    for (int i = lo; i <= hi; ++i) {
      const float w = round_bf16(std::exp(score[static_cast<size_t>(i - lo)] - mx));
      ls += w;
      const float* v = value(i);
      for (int d = 0; d < hd; ++d) acc_s[static_cast<size_t>(d)] += w * round_bf16(v[d]);
    }
    if (!started) {
      m = mx, l = ls, started = true;
      acc = acc_s;
      continue;
    }
    const float mn = std::max(m, mx), a = std::exp(m - mn), b = std::exp(mx - mn);
    l = l * a + ls * b;
    for (int d = 0; d < hd; ++d) acc[static_cast<size_t>(d)] = acc[static_cast<size_t>(d)] * a + acc_s[static_cast<size_t>(d)] * b;
    m = mn;
  }
  for (int d = 0; d < hd; ++d) out[d] = acc[static_cast<size_t>(d)] / l;
}

}  // namespace

void CpuBackend::kv_store(KvStorage& kvs, int layer, const Tensor& k, const Tensor& v,
                          const RowLayout& rows) {
  const CpuKv& kv = as_cpu_kv(kvs, "kv_store");
  check_tensor(k, "kv_store", "k");
  check_tensor(v, "kv_store", "v");
  const int64_t width = static_cast<int64_t>(kv.kv_heads) * kv.head_dim;
  TF_CHECK(k.cols == width && v.cols == width && k.rows == v.rows, "kv_store: k [", k.rows, " x ",
           k.cols, "] and v [", v.rows, " x ", v.cols, "] for ", kv.kv_heads, " heads of ",
           kv.head_dim);
  TF_CHECK(layer >= 0 && layer < kv.layers, "kv_store: layer ", layer, " of ", kv.layers);
  check_layout(rows, k.rows, "kv_store");
  for (int r = 0; r < k.rows; ++r) check_row(rows, r, rows.pos[static_cast<size_t>(r)], kv, "kv_store");
  for (int r = 0; r < k.rows; ++r) {
    const int32_t pos = rows.pos[static_cast<size_t>(r)];
    const int32_t page =
        rows.seq_pages[static_cast<size_t>(rows.seq[static_cast<size_t>(r)])]
                      [static_cast<size_t>(pos / kv.page_size)];
    const int slot = pos % kv.page_size;
    std::memcpy(kv.k_at(layer, page, slot), k.row(r), static_cast<size_t>(width) * sizeof(float));
    std::memcpy(kv.v_at(layer, page, slot), v.row(r), static_cast<size_t>(width) * sizeof(float));
  }
}

void CpuBackend::attention(const Tensor& q, Tensor out, const KvStorage& kvs, int layer,
                           const RowLayout& rows, const AttnParams& p) {
  const CpuKv& kv = as_cpu_kv(kvs, "attention");
  check_tensor(q, "attention", "q");
  check_tensor(out, "attention", "out");
  TF_CHECK(p.n_heads > 0 && p.n_kv_heads > 0 && p.n_heads % p.n_kv_heads == 0 &&
               p.n_kv_heads == kv.kv_heads && p.head_dim == kv.head_dim,
           "attention: ", p.n_heads, " heads over ", p.n_kv_heads, " kv heads of ", p.head_dim,
           " with storage of ", kv.kv_heads, " kv heads of ", kv.head_dim);
  const int64_t width = static_cast<int64_t>(p.n_heads) * p.head_dim;
  TF_CHECK(q.cols == width && out.rows == q.rows && out.cols == width, "attention: q [", q.rows,
           " x ", q.cols, "] and out [", out.rows, " x ", out.cols, "] for ", p.n_heads,
           " heads of ", p.head_dim);
  TF_CHECK(layer >= 0 && layer < kv.layers, "attention: layer ", layer, " of ", kv.layers);
  TF_CHECK(p.sliding_window >= 0 && p.softcap >= 0.0f && std::isfinite(p.scale),
           "attention: sliding_window ", p.sliding_window, ", softcap ", p.softcap, ", scale ",
           p.scale);
  check_layout(rows, q.rows, "attention");
  auto first_pos = [&](int32_t pos) {
    return p.sliding_window > 0 ? std::max(0, pos - p.sliding_window + 1) : 0;
  };
  for (int r = 0; r < q.rows; ++r)
    check_row(rows, r, first_pos(rows.pos[static_cast<size_t>(r)]), kv, "attention");

  const int hd = p.head_dim, group = p.n_heads / p.n_kv_heads;
  const int64_t tasks = q.rows * p.n_heads;
  int64_t work = 0;
  for (int r = 0; r < q.rows; ++r) work += (rows.pos[static_cast<size_t>(r)] + 1) * width;
  const CpuKernels& kern = kernels_;
  const bool bf16 = matmul_input() == MatmulInput::BF16;
  for_rows(tasks, work * 4, [&](int64_t b, int64_t e) {
    std::vector<float> score, acc(static_cast<size_t>(hd)), qr, acc_s;
    for (int64_t t = b; t < e; ++t) {
      const int r = static_cast<int>(t / p.n_heads), h = static_cast<int>(t % p.n_heads);
      const int32_t pos = rows.pos[static_cast<size_t>(r)];
      const int32_t first = first_pos(pos);
      const auto& pages = rows.seq_pages[static_cast<size_t>(rows.seq[static_cast<size_t>(r)])];
      const int64_t kv_off = static_cast<int64_t>(h / group) * hd;
      const float* qv = q.row(r) + static_cast<int64_t>(h) * hd;
      if (bf16) {
        auto at = [&](int i, bool v) {
          const int32_t page = pages[static_cast<size_t>(i / kv.page_size)];
          return (v ? kv.v_at(layer, page, i % kv.page_size) : kv.k_at(layer, page, i % kv.page_size)) + kv_off;
        };
        attend_bf16(qv, hd, first, pos, p, [&](int i) { return at(i, false); }, [&](int i) { return at(i, true); },
                    qr, score, acc, acc_s, out.row(r) + static_cast<int64_t>(h) * hd);
        continue;
      }
      const int n = pos - first + 1;
      score.resize(static_cast<size_t>(n));
      for (int i = 0; i < n; ++i) {
        const int32_t ps = first + i;
        const int32_t page = pages[static_cast<size_t>(ps / kv.page_size)];
        float s = kern.dot(qv, kv.k_at(layer, page, ps % kv.page_size) + kv_off, hd) * p.scale;
        if (p.softcap > 0.0f) s = p.softcap * std::tanh(s / p.softcap);
        score[static_cast<size_t>(i)] = s;
      }
      float mx = score[0];
      for (int i = 1; i < n; ++i) mx = std::max(mx, score[static_cast<size_t>(i)]);
      float sum = 0.0f;
      for (int i = 0; i < n; ++i) {
        score[static_cast<size_t>(i)] = std::exp(score[static_cast<size_t>(i)] - mx);
        sum += score[static_cast<size_t>(i)];
      }
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int i = 0; i < n; ++i) {
        const int32_t ps = first + i;
        const int32_t page = pages[static_cast<size_t>(ps / kv.page_size)];
        kern.axpy(acc.data(), kv.v_at(layer, page, ps % kv.page_size) + kv_off,
                  score[static_cast<size_t>(i)], hd);
      }
      float* o = out.row(r) + static_cast<int64_t>(h) * hd;
      for (int d = 0; d < hd; ++d) o[d] = acc[static_cast<size_t>(d)] / sum;
    }
  });
}

}  // namespace tf::cpu
