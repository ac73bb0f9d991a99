// Row-wise ops of the CPU backend: each row reads only its own inputs in a fixed order.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_scalar.h"
#include "base/error.h"

namespace tf::cpu {

void CpuBackend::rmsnorm(const Tensor& x, const Weight& gw, float eps, bool add_one, Tensor y) {
  const CpuWeight& g = as_cpu(gw, "rmsnorm");
  check_tensor(x, "rmsnorm", "x");
  check_tensor(y, "rmsnorm", "y");
  TF_CHECK(x.rows == y.rows && x.cols == y.cols && g.rows == 1 && g.cols == x.cols && x.cols > 0,
           "rmsnorm: x [", x.rows, " x ", x.cols, "] with ", g.name, " [", g.rows, " x ", g.cols,
           "] into y [", y.rows, " x ", y.cols, "]");
  std::vector<float> w(static_cast<size_t>(g.cols));
  decode_row(g.rows_view(), 0, 0, g.cols, w.data());
  if (add_one)
    for (float& v : w) v = 1.0f + v;
  const int64_t n = x.cols;
  for_rows(x.rows, x.rows * n, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const float* xr = x.row(r);
      float* yr = y.row(r);
      const float inv = 1.0f / std::sqrt(sum_squares(xr, n) / static_cast<float>(n) + eps);
      for (int64_t i = 0; i < n; ++i) yr[i] = (xr[i] * inv) * w[static_cast<size_t>(i)];
    }
  });
}

void CpuBackend::rope(Tensor x, int n_heads, const int32_t* pos, const RopeParams& p) {
  check_tensor(x, "rope", "x");
  TF_CHECK(n_heads > 0 && p.head_dim > 0 && x.cols == static_cast<int64_t>(n_heads) * p.head_dim,
           "rope: x [", x.rows, " x ", x.cols, "] is not ", n_heads, " heads of ", p.head_dim);
  TF_CHECK(p.rot_dim >= 0 && p.rot_dim % 2 == 0 && p.rot_dim <= p.head_dim &&
               p.inv_freq.size() == static_cast<size_t>(p.rot_dim / 2),
           "rope: rot_dim ", p.rot_dim, " with ", p.inv_freq.size(), " frequencies for head_dim ",
           p.head_dim);
  TF_CHECK(x.rows == 0 || pos != nullptr, "rope: null positions");
  const int half = p.rot_dim / 2;
  if (half == 0) return;
  for_rows(x.rows, x.rows * x.cols * 8, [&](int64_t b, int64_t e) {
    std::vector<float> cs(static_cast<size_t>(half)), sn(static_cast<size_t>(half));
    for (int64_t r = b; r < e; ++r) {
      const float fp = static_cast<float>(pos[r]);
      for (int i = 0; i < half; ++i) {
        const float angle = fp * p.inv_freq[static_cast<size_t>(i)];
        cs[static_cast<size_t>(i)] = static_cast<float>(std::cos(static_cast<double>(angle))) * p.mscale;
        sn[static_cast<size_t>(i)] = static_cast<float>(std::sin(static_cast<double>(angle))) * p.mscale;
      }
      for (int h = 0; h < n_heads; ++h) {
        float* v = x.row(r) + static_cast<int64_t>(h) * p.head_dim;
        for (int i = 0; i < half; ++i) {
          const int a = p.neox ? i : 2 * i, bb = p.neox ? i + half : 2 * i + 1;
          const float x0 = v[a], x1 = v[bb], c = cs[static_cast<size_t>(i)],
                      s = sn[static_cast<size_t>(i)];
          v[a] = x0 * c - x1 * s;
          v[bb] = x1 * c + x0 * s;
        }
      }
    }
  });
}

void CpuBackend::act_mul(Act act, const Tensor& gate, const Tensor& up, Tensor out) {
  check_tensor(gate, "act_mul", "gate");
  check_tensor(up, "act_mul", "up");
  check_tensor(out, "act_mul", "out");
  TF_CHECK(gate.rows == up.rows && gate.cols == up.cols && out.rows == gate.rows &&
               out.cols == gate.cols,
           "act_mul: gate [", gate.rows, " x ", gate.cols, "], up [", up.rows, " x ", up.cols,
           "], out [", out.rows, " x ", out.cols, "]");
  const int64_t C = gate.cols;
  for_rows(gate.rows, gate.rows * C * 8, [&](int64_t b, int64_t e) {
    for (int64_t i = b * C; i < e * C; ++i) out.data[i] = act_value(act, gate.data[i]) * up.data[i];
  });
}

void CpuBackend::topk_softmax(const Tensor& logits, int k, bool norm, int32_t* idx_out,
                              float* w_out) {
  check_tensor(logits, "topk_softmax", "logits");
  TF_CHECK(k >= 1 && k <= logits.cols, "topk_softmax: k ", k, " for logits [", logits.rows, " x ",
           logits.cols, "]");
  TF_CHECK(logits.rows == 0 || (idx_out != nullptr && w_out != nullptr),
           "topk_softmax: null outputs");
  const int64_t n = logits.cols;
  std::vector<float> prob(static_cast<size_t>(n));
  std::vector<int32_t> order(static_cast<size_t>(n));
  for (int64_t r = 0; r < logits.rows; ++r) {
    const float* l = logits.row(r);
    float mx = l[0];
    for (int64_t i = 1; i < n; ++i) mx = std::max(mx, l[i]);
    float sum = 0.0f;
    for (int64_t i = 0; i < n; ++i) {
      prob[static_cast<size_t>(i)] = std::exp(l[i] - mx);
      sum += prob[static_cast<size_t>(i)];
    }
    for (int64_t i = 0; i < n; ++i) prob[static_cast<size_t>(i)] /= sum;
    for (int64_t i = 0; i < n; ++i) order[static_cast<size_t>(i)] = static_cast<int32_t>(i);
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
      // NaN ranks last so the comparison stays a strict weak order.
      const float pa = std::isnan(prob[static_cast<size_t>(a)]) ? -1.0f : prob[static_cast<size_t>(a)];
      const float pb = std::isnan(prob[static_cast<size_t>(b)]) ? -1.0f : prob[static_cast<size_t>(b)];
      return pa > pb || (pa == pb && a < b);
    });
    float ksum = 0.0f;
    for (int j = 0; j < k; ++j) ksum += prob[static_cast<size_t>(order[static_cast<size_t>(j)])];
    for (int j = 0; j < k; ++j) {
      const int32_t id = order[static_cast<size_t>(j)];
      idx_out[r * k + j] = id;
      w_out[r * k + j] = norm ? prob[static_cast<size_t>(id)] / ksum : prob[static_cast<size_t>(id)];
    }
  }
}

}  // namespace tf::cpu
