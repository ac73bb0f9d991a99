// Ops of the Mamba2 (Nemotron-H) layers on the CPU: the grouped sigmoid router, plain activations,
// the gated group RMSNorm and the causal depthwise conv with its carried state. The scan lives in
// cpu_ssm_scan.cpp.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_seq_state.h"
#include "backend/cpu/cpu_scalar.h"
#include "base/error.h"

namespace tf::cpu {

namespace {

std::vector<float> decode_all(const CpuWeight& w) {
  std::vector<float> out(static_cast<size_t>(w.rows * w.cols));
  for (int64_t r = 0; r < w.rows; ++r) decode_row(w.rows_view(), r, 0, w.cols, out.data() + r * w.cols);
  return out;
}

// NaN ranks below every number so comparisons stay a strict weak order.
float rank_key(float v) { return std::isnan(v) ? -INFINITY : v; }

}  // namespace

void CpuBackend::topk_sigmoid_grouped(const Tensor& logits, const Weight* bias, int n_group, int topk_group, int k,
                                      bool norm, float scale, int32_t* idx_out, float* w_out) {
  const char* op = "topk_sigmoid_grouped";
  check_tensor(logits, op, "logits");
  const int64_t E = logits.cols;
  TF_CHECK(n_group >= 1 && E % n_group == 0 && topk_group >= 1 && topk_group <= n_group, op, ": ", E,
           " experts in ", n_group, " groups, best ", topk_group, " groups");
  const int64_t gs = E / n_group;
  TF_CHECK(n_group == 1 || gs >= 2, op, ": groups of ", gs, " expert; a group scores its two best");
  TF_CHECK(k >= 1 && k <= topk_group * gs, op, ": k ", k, " exceeds the ", topk_group * gs,
           " experts of the chosen groups");
  TF_CHECK(std::isfinite(scale), op, ": scale ", scale);
  TF_CHECK(logits.rows == 0 || (idx_out != nullptr && w_out != nullptr), op, ": null outputs");
  std::vector<float> bv(static_cast<size_t>(E), 0.0f);
  if (bias) {
    const CpuWeight& b = as_cpu(*bias, op);
    TF_CHECK(b.rows == 1 && b.cols == E, op, ": bias ", b.name, " [", b.rows, " x ", b.cols, "] for ", E,
             " experts");
    decode_row(b.rows_view(), 0, 0, E, bv.data());
  }
  std::vector<float> score(static_cast<size_t>(E)), choice(static_cast<size_t>(E));
  std::vector<float> gscore(static_cast<size_t>(n_group));
  std::vector<int32_t> gorder(static_cast<size_t>(n_group)), order;
  std::vector<uint8_t> gsel(static_cast<size_t>(n_group));
  for (int64_t r = 0; r < logits.rows; ++r) {
    const float* l = logits.row(r);
    for (int64_t e = 0; e < E; ++e) {
      score[static_cast<size_t>(e)] = 1.0f / (1.0f + std::exp(-l[e]));
      choice[static_cast<size_t>(e)] = score[static_cast<size_t>(e)] + bv[static_cast<size_t>(e)];
    }
    std::fill(gsel.begin(), gsel.end(), uint8_t{1});
    if (n_group > 1) {
      for (int g = 0; g < n_group; ++g) {
        float b1 = -INFINITY, b2 = -INFINITY;
        for (int64_t e = g * gs; e < (g + 1) * gs; ++e) {
          const float v = rank_key(choice[static_cast<size_t>(e)]);
          if (v > b1) b2 = b1, b1 = v;
          else if (v > b2) b2 = v;
        }
        gscore[static_cast<size_t>(g)] = b1 + b2;
        gorder[static_cast<size_t>(g)] = g;
      }
      std::partial_sort(gorder.begin(), gorder.begin() + topk_group, gorder.end(), [&](int32_t a, int32_t b) {
        const float va = rank_key(gscore[static_cast<size_t>(a)]), vb = rank_key(gscore[static_cast<size_t>(b)]);
        return va > vb || (va == vb && a < b);
      });
      std::fill(gsel.begin(), gsel.end(), uint8_t{0});
      for (int j = 0; j < topk_group; ++j) gsel[static_cast<size_t>(gorder[static_cast<size_t>(j)])] = 1;
    }
    order.clear();
    for (int64_t e = 0; e < E; ++e)
      if (gsel[static_cast<size_t>(e / gs)]) order.push_back(static_cast<int32_t>(e));
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
      const float va = rank_key(choice[static_cast<size_t>(a)]), vb = rank_key(choice[static_cast<size_t>(b)]);
      return va > vb || (va == vb && a < b);
    });
    float sum = 0.0f;
    for (int j = 0; j < k; ++j) sum += score[static_cast<size_t>(order[static_cast<size_t>(j)])];
    const float denom = sum + 1e-20f;  // transformers adds 1e-20 before dividing
    for (int j = 0; j < k; ++j) {
      const int32_t id = order[static_cast<size_t>(j)];
      float w = score[static_cast<size_t>(id)];
      if (norm) w /= denom;
      idx_out[r * k + j] = id;
      w_out[r * k + j] = w * scale;
    }
  }
}

void CpuBackend::activate(Act act, const Tensor& x, Tensor out) {
  check_tensor(x, "activate", "x");
  check_tensor(out, "activate", "out");
  TF_CHECK(x.rows == out.rows && x.cols == out.cols, "activate: x [", x.rows, " x ", x.cols, "] into out [",
           out.rows, " x ", out.cols, "]");
  const int64_t C = x.cols;
  for_rows(x.rows, x.rows * C * 8, [&](int64_t b, int64_t e) {
    for (int64_t i = b * C; i < e * C; ++i) out.data[i] = act_value(act, x.data[i]);
  });
}

void CpuBackend::gated_rmsnorm(const Tensor& x, Cols z, const Weight& gw, int group, float eps, bool norm_first,
                               Tensor y) {
  const char* op = "gated_rmsnorm";
  const CpuWeight& g = as_cpu(gw, op);
  check_tensor(x, op, "x");
  check_tensor(y, op, "y");
  check_tensor(z.t, op, "z");
  const int64_t n = x.cols;
  TF_CHECK(y.rows == x.rows && y.cols == n && z.t.rows == x.rows && z.col >= 0 && z.col + n <= z.t.cols, op,
           ": x [", x.rows, " x ", n, "], z columns [", z.col, ", ", z.col + n, ") of [", z.t.rows, " x ",
           z.t.cols, "], y [", y.rows, " x ", y.cols, "]");
  TF_CHECK(g.rows == 1 && g.cols == n, op, ": weight ", g.name, " [", g.rows, " x ", g.cols, "] for ", n,
           " columns");
  TF_CHECK(group > 0 && n % group == 0, op, ": group ", group, " does not divide ", n, " columns");
  TF_CHECK(std::isfinite(eps) && eps > 0, op, ": eps ", eps);
  std::vector<float> w(static_cast<size_t>(n));
  decode_row(g.rows_view(), 0, 0, n, w.data());
  for_rows(x.rows, x.rows * n * 4, [&](int64_t b, int64_t e) {
    std::vector<float> v(static_cast<size_t>(n));
    for (int64_t r = b; r < e; ++r) {
      const float* xr = x.row(r);
      const float* zr = z.at(r);
      float* yr = y.row(r);
      for (int64_t i = 0; i < n; ++i) {
        const float s = zr[i] / (1.0f + std::exp(-zr[i]));
        v[static_cast<size_t>(i)] = norm_first ? s : xr[i] * s;
      }
      for (int64_t g0 = 0; g0 < n; g0 += group) {
        const float* src = norm_first ? xr + g0 : v.data() + g0;
        const float inv = 1.0f / std::sqrt(sum_squares(src, group) / static_cast<float>(group) + eps);
        for (int64_t i = g0; i < g0 + group; ++i) {
          const size_t u = static_cast<size_t>(i);
          // transformers: weight * (x * rsqrt) then * silu(z) (norm first), or weight * (x silu(z) * rsqrt).
          yr[i] = norm_first ? (w[u] * (xr[i] * inv)) * v[u] : w[u] * (v[u] * inv);
        }
      }
    }
  });
}

void CpuBackend::conv1d_causal(const Tensor& x, const Weight& wt, const Weight* bias, bool silu,
                               const RowLayout& rows, const StateRefs& st, int64_t off, Tensor out) {
  const char* op = "conv1d_causal";
  const CpuWeight& w = as_cpu(wt, op);
  check_tensor(x, op, "x");
  check_tensor(out, op, "out");
  const int64_t C = x.cols, K = w.cols, m = x.rows;
  TF_CHECK(w.rows == C && K >= 1 && out.rows == m && out.cols == C, op, ": x [", m, " x ", C, "] with ", w.name,
           " [", w.rows, " x ", K, "] into out [", out.rows, " x ", out.cols, "]");
  std::vector<float> wv = decode_all(w), bv(static_cast<size_t>(C), 0.0f);
  if (bias) {
    const CpuWeight& b = as_cpu(*bias, op);
    TF_CHECK(b.rows == 1 && b.cols == C, op, ": bias ", b.name, " [", b.rows, " x ", b.cols, "] for ", C,
             " channels");
    decode_row(b.rows_view(), 0, 0, C, bv.data());
  }
  if (m == 0) return;
  const int64_t S = K - 1;  // state rows: the last K - 1 inputs, oldest first
  const std::vector<SeqSpan> spans = seq_spans(rows, st, off, std::max<int64_t>(S * C, 1), m, op);
  // Channels are independent, so any split of them gives the same bits; x may be out itself.
  for_rows(C, m * C * K, [&](int64_t c0, int64_t c1) {
    std::vector<float> win(static_cast<size_t>(std::max<int64_t>(S, 1)));
    for (size_t s = 0; s < spans.size(); ++s) {
      const float* src = slot_at(st.pool, st.slot_floats, st.src[s], off);
      float* dst = slot_at(st.pool, st.slot_floats, st.dst[s], off);
      const std::vector<int32_t>* keep = st.keep.empty() || st.keep[s].empty() ? nullptr : &st.keep[s];
      for (int64_t c = c0; c < c1; ++c) {
        const float* wc = wv.data() + c * K;
        for (int64_t j = 0; j < S; ++j) win[static_cast<size_t>(j)] = src[j * C + c];
        for (int64_t r = spans[s].begin; r < spans[s].begin + spans[s].n; ++r) {
          const float xin = x.row(r)[c];
          float acc = bv[static_cast<size_t>(c)];
          for (int64_t j = 0; j < S; ++j) acc += wc[j] * win[static_cast<size_t>(j)];
          acc += wc[S] * xin;
          for (int64_t j = 0; j + 1 < S; ++j) win[static_cast<size_t>(j)] = win[static_cast<size_t>(j + 1)];
          if (S > 0) win[static_cast<size_t>(S - 1)] = xin;
          out.row(r)[c] = silu ? acc / (1.0f + std::exp(-acc)) : acc;
          const int64_t i = r - spans[s].begin;
          if (keep && i + 1 < spans[s].n) {
            float* kp = slot_at(st.keep_pool, st.slot_floats, (*keep)[static_cast<size_t>(i)], off);
            for (int64_t j = 0; j < S; ++j) kp[j * C + c] = win[static_cast<size_t>(j)];
          }
        }
        for (int64_t j = 0; j < S; ++j) dst[j * C + c] = win[static_cast<size_t>(j)];
      }
    }
  });
}

}  // namespace tf::cpu
