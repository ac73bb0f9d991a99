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

void round_bf16(const float* x, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = round_to_bf16(x[i]);
}

// --matmul-input bf16: the GPU's rule (cuda_attention.cu) with q, k, v and the weights rounded to
// bf16 where its products take them: per split of 64 keys on the absolute position grid, the
// split's max and exp-sum of rounded weights, its PV sum, folded into the running state in order.
// One row and one kv head: each split's K and V rows are rounded once for the group's heads.
// load(i, v, dst) puts position i's K (v false) or V row of the kv head, rounded, in dst; q and
// out point at the group's first head (heads hd apart).
struct Bf16Scratch {
  std::vector<float> k, v, q, score, acc, acc_s, m, l;
};

template <class Load>
void attend_bf16(const CpuKernels& kern, const float* q, int group, int hd, int first, int pos,
                 const AttnParams& p, const Load& load, Bf16Scratch& sc, float* out) {
  constexpr int kSplit = 64;
  const size_t d = static_cast<size_t>(hd), g = static_cast<size_t>(group);
  sc.k.resize(kSplit * d), sc.v.resize(kSplit * d), sc.score.resize(kSplit);
  sc.q.resize(g * d), sc.acc.assign(g * d, 0.0f), sc.acc_s.resize(d), sc.m.assign(g, 0.0f), sc.l.assign(g, 0.0f);
  round_bf16(q, sc.q.data(), group * hd);
  for (int s = first / kSplit; s <= pos / kSplit; ++s) {
    const int lo = std::max(first, s * kSplit), hi = std::min(pos, s * kSplit + kSplit - 1), n = hi - lo + 1;
    for (int i = 0; i < n; ++i) {
      load(lo + i, false, sc.k.data() + static_cast<size_t>(i) * d);
      load(lo + i, true, sc.v.data() + static_cast<size_t>(i) * d);
    }
    for (size_t h = 0; h < g; ++h) {
      float mx = -INFINITY;
      for (int i = 0; i < n; ++i) {
        float y = kern.dot(sc.q.data() + h * d, sc.k.data() + static_cast<size_t>(i) * d, hd) * p.scale;
        if (p.softcap > 0.0f) y = p.softcap * std::tanh(y / p.softcap);
        sc.score[static_cast<size_t>(i)] = y;
        mx = std::max(mx, y);
      }
      float ls = 0.0f;
      std::fill(sc.acc_s.begin(), sc.acc_s.end(), 0.0f);
      for (int i = 0; i < n; ++i) {
        const float w = round_to_bf16(std::exp(sc.score[static_cast<size_t>(i)] - mx));
        ls += w;
        kern.axpy(sc.acc_s.data(), sc.v.data() + static_cast<size_t>(i) * d, w, hd);
      }
      float* acc = sc.acc.data() + h * d;
      if (s == first / kSplit) {
        sc.m[h] = mx, sc.l[h] = ls;
        std::copy(sc.acc_s.begin(), sc.acc_s.end(), acc);
        continue;
      }
      const float mn = std::max(sc.m[h], mx), a = std::exp(sc.m[h] - mn), b = std::exp(mx - mn);
      sc.l[h] = sc.l[h] * a + ls * b;
      for (size_t j = 0; j < d; ++j) acc[j] = acc[j] * a + sc.acc_s[j] * b;
      sc.m[h] = mn;
    }
  }
  for (size_t h = 0; h < g; ++h)
    for (size_t j = 0; j < d; ++j) out[h * d + j] = sc.acc[h * d + j] / sc.l[h];
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
    kv.write_row(layer, page, slot, false, k.row(r));
    kv.write_row(layer, page, slot, true, v.row(r));
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
  if (matmul_input() == MatmulInput::BF16) {
    // A task is one row and one kv head, so each split's K and V are rounded once for its group.
    const int64_t kv_tasks = q.rows * p.n_kv_heads;
    for_rows(kv_tasks, work * 4, [&](int64_t b, int64_t e) {
      Bf16Scratch sc;
      for (int64_t t = b; t < e; ++t) {
        const int r = static_cast<int>(t / p.n_kv_heads), kvh = static_cast<int>(t % p.n_kv_heads);
        const int32_t pos = rows.pos[static_cast<size_t>(r)];
        const auto& pages = rows.seq_pages[static_cast<size_t>(rows.seq[static_cast<size_t>(r)])];
        const int64_t kv_off = static_cast<int64_t>(kvh) * hd, q_off = kv_off * group;
        // bf16 storage holds the values rounded already; f32 storage (made in f32 mode) rounds here.
        auto load = [&](int i, bool v, float* dst) {
          kv.read_row(layer, pages[static_cast<size_t>(i / kv.page_size)], i % kv.page_size, v, kv_off, hd, dst);
          if (!kv.bf16()) round_bf16(dst, dst, hd);
        };
        attend_bf16(kern, q.row(r) + q_off, group, hd, first_pos(pos), pos, p, load, sc, out.row(r) + q_off);
      }
    });
    return;
  }
  TF_CHECK(!kv.bf16(), "attention: the KV cache holds bf16 values (made with --matmul-input bf16) but the "
                       "backend is in f32 mode");
  for_rows(tasks, work * 4, [&](int64_t b, int64_t e) {
    std::vector<float> score, acc(static_cast<size_t>(hd));
    for (int64_t t = b; t < e; ++t) {
      const int r = static_cast<int>(t / p.n_heads), h = static_cast<int>(t % p.n_heads);
      const int32_t pos = rows.pos[static_cast<size_t>(r)];
      const int32_t first = first_pos(pos);
      const auto& pages = rows.seq_pages[static_cast<size_t>(rows.seq[static_cast<size_t>(r)])];
      const int64_t kv_off = static_cast<int64_t>(h / group) * hd;
      const float* qv = q.row(r) + static_cast<int64_t>(h) * hd;
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
