// The Mamba2 selective scan on the CPU: the chunked SSD form (prefill) and the step form (decode,
// verify), one task per (sequence, head), each task's arithmetic fixed by that sequence alone.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_seq_state.h"
#include "base/error.h"

namespace tf::cpu {

namespace {

// torch.nn.functional.softplus (beta 1, threshold 20).
float softplus(float v) { return v > 20.0f ? v : std::log1p(std::exp(v)); }

struct ScanArgs {
  Cols x, B, C, dt_raw;
  std::vector<float> A, D, dt_bias;  // A = -exp(A_log)
  SsmParams p;
  Tensor y;
};

// Mamba2's reference clamps dt in the chunked form only; its step form does not.
float step_dt(const ScanArgs& a, int64_t r, int h, bool clamp) {
  float dt = softplus(a.dt_raw.at(r)[h] + a.dt_bias[static_cast<size_t>(h)]);
  if (!clamp) return dt;
  dt = std::max(dt, a.p.dt_min);
  if (a.p.dt_max > 0.0f) dt = std::min(dt, a.p.dt_max);
  return dt;
}

// Recurrent form, row by row: h = exp(dt A) h + (dt B) x^T; y = h C + D x.
void scan_steps(const ScanArgs& a, int h, const SeqSpan& sp, float* hs, const std::vector<float*>& keep) {
  const int P = a.p.head_dim, N = a.p.state_size, g = h / (a.p.heads / a.p.groups);
  const float A = a.A[static_cast<size_t>(h)], D = a.D[static_cast<size_t>(h)];
  for (int64_t i = 0; i < sp.n; ++i) {
    const int64_t r = sp.begin + i;
    const float dt = step_dt(a, r, h, false);
    const float dA = std::exp(dt * A);
    const float* x = a.x.at(r) + static_cast<int64_t>(h) * P;
    const float* B = a.B.at(r) + static_cast<int64_t>(g) * N;
    const float* C = a.C.at(r) + static_cast<int64_t>(g) * N;
    float* y = a.y.row(r) + static_cast<int64_t>(h) * P;
    for (int p = 0; p < P; ++p) {
      float* hp = hs + static_cast<int64_t>(p) * N;
      const float xp = x[p];
      float acc = 0.0f;
      for (int n = 0; n < N; ++n) {
        hp[n] = hp[n] * dA + (dt * B[n]) * xp;
        acc += hp[n] * C[n];
      }
      y[p] = acc + xp * D;
    }
    if (i + 1 < sp.n && !keep.empty()) std::copy(hs, hs + static_cast<int64_t>(P) * N, keep[static_cast<size_t>(i)]);
  }
}

// Chunked (SSD) form over chunks of p.chunk rows counted from the span's first row, as
// transformers' torch_forward computes it: within a chunk y_t = sum_{s<=t} (C_t.B_s)
// exp(sum_{s<i<=t} a_i) dt_s x_s + exp(cum_t) C_t h0; the state carries chunk to chunk.
void scan_chunks(const ScanArgs& a, int h, const SeqSpan& sp, float* hs, std::vector<float>& buf) {
  const int P = a.p.head_dim, N = a.p.state_size, L = a.p.chunk, g = h / (a.p.heads / a.p.groups);
  const float A = a.A[static_cast<size_t>(h)], D = a.D[static_cast<size_t>(h)];
  buf.resize(static_cast<size_t>(4 * L + 2 * L * P + L * L));
  float* dt = buf.data();
  float* la = dt + L;        // a_t = A dt_t
  float* cum = la + L;       // cumulative a within the chunk
  float* seg = cum + L;      // running segment sums of one column
  float* xdt = seg + L;      // [L x P] x_t dt_t
  float* yc = xdt + L * P;   // [L x P] chunk output
  float* cb = yc + L * P;    // [L x L] C_t . B_s
  for (int64_t c0 = 0; c0 < sp.n; c0 += L) {
    const int l = static_cast<int>(std::min<int64_t>(L, sp.n - c0));
    const int64_t r0 = sp.begin + c0;
    for (int t = 0; t < l; ++t) {
      dt[t] = step_dt(a, r0 + t, h, true);
      la[t] = A * dt[t];
      cum[t] = t == 0 ? la[t] : cum[t - 1] + la[t];
      const float* x = a.x.at(r0 + t) + static_cast<int64_t>(h) * P;
      for (int p = 0; p < P; ++p) xdt[t * P + p] = x[p] * dt[t];
    }
    for (int t = 0; t < l; ++t) {
      const float* Ct = a.C.at(r0 + t) + static_cast<int64_t>(g) * N;
      for (int s = 0; s <= t; ++s) {
        const float* Bs = a.B.at(r0 + s) + static_cast<int64_t>(g) * N;
        float d = 0.0f;
        for (int n = 0; n < N; ++n) d += Ct[n] * Bs[n];
        cb[t * L + s] = d;
      }
    }
    // Off-diagonal part: the state entering the chunk, read out by C and decayed to row t.
    for (int t = 0; t < l; ++t) {
      const float* Ct = a.C.at(r0 + t) + static_cast<int64_t>(g) * N;
      const float e = std::exp(cum[t]);
      for (int p = 0; p < P; ++p) {
        const float* hp = hs + static_cast<int64_t>(p) * N;
        float d = 0.0f;
        for (int n = 0; n < N; ++n) d += Ct[n] * hp[n];
        yc[t * P + p] = d * e;
      }
    }
    // Diagonal part, one source row s at a time with its segment sums built in row order.
    for (int s = 0; s < l; ++s) {
      seg[s] = 0.0f;
      for (int t = s + 1; t < l; ++t) seg[t] = seg[t - 1] + la[t];
      for (int t = s; t < l; ++t) {
        const float wts = cb[t * L + s] * std::exp(seg[t]);
        const float* xs = xdt + s * P;
        float* yt = yc + t * P;
        for (int p = 0; p < P; ++p) yt[p] += wts * xs[p];
      }
    }
    for (int t = 0; t < l; ++t) {
      const float* x = a.x.at(r0 + t) + static_cast<int64_t>(h) * P;
      float* y = a.y.row(r0 + t) + static_cast<int64_t>(h) * P;
      for (int p = 0; p < P; ++p) y[p] = yc[t * P + p] + D * x[p];
    }
    // State at the chunk's end: the entering state decayed plus each row's B x dt decayed to the end.
    const float last = cum[l - 1], e_all = std::exp(last);
    for (int p = 0; p < P; ++p) {
      float* hp = hs + static_cast<int64_t>(p) * N;
      for (int n = 0; n < N; ++n) hp[n] *= e_all;
    }
    for (int s = 0; s < l; ++s) {
      const float* Bs = a.B.at(r0 + s) + static_cast<int64_t>(g) * N;
      const float e = std::exp(last - cum[s]);
      for (int p = 0; p < P; ++p) {
        const float xe = xdt[s * P + p] * e;
        float* hp = hs + static_cast<int64_t>(p) * N;
        for (int n = 0; n < N; ++n) hp[n] += Bs[n] * xe;
      }
    }
  }
}

void check_cols(const Cols& c, int64_t m, int64_t width, const char* op, const char* what) {
  check_tensor(c.t, op, what);
  TF_CHECK(c.t.rows == m && c.col >= 0 && width <= c.t.cols && c.col <= c.t.cols - width, op, ": ", what,
           " columns [", c.col, ", ", c.col + width, ") of [", c.t.rows, " x ", c.t.cols, "] for ", m, " rows");
}

std::vector<float> vec_of(const Weight& wt, int64_t n, const char* op) {
  const CpuWeight& w = as_cpu(wt, op);
  TF_CHECK(w.rows == 1 && w.cols == n, op, ": ", w.name, " [", w.rows, " x ", w.cols, "] is not a vector of ", n);
  std::vector<float> v(static_cast<size_t>(n));
  decode_row(w.rows_view(), 0, 0, n, v.data());
  return v;
}

}  // namespace

void CpuBackend::ssm_scan(Cols x, Cols B, Cols C, Cols dt_raw, const Weight& A_log, const Weight& D,
                          const Weight& dt_bias, const SsmParams& p, const RowLayout& rows, const StateRefs& st,
                          int64_t off, Tensor y) {
  const char* op = "ssm_scan";
  TF_CHECK(p.heads > 0 && p.head_dim > 0 && p.groups > 0 && p.state_size > 0 && p.heads % p.groups == 0 &&
               p.chunk > 0 && p.chunk <= 4096 && p.head_dim <= (1 << 16) && p.state_size <= (1 << 16),
           op, ": heads ", p.heads, " x ", p.head_dim, ", groups ", p.groups, " of state ", p.state_size, ", chunk ",
           p.chunk);
  TF_CHECK(std::isfinite(p.dt_min) && std::isfinite(p.dt_max) && p.dt_min >= 0 && p.dt_max >= 0 &&
               (p.dt_max == 0 || p.dt_max >= p.dt_min),
           op, ": dt limits [", p.dt_min, ", ", p.dt_max, "]");
  check_tensor(y, op, "y");
  const int64_t m = y.rows, HP = static_cast<int64_t>(p.heads) * p.head_dim,
                GN = static_cast<int64_t>(p.groups) * p.state_size;
  TF_CHECK(y.cols == HP, op, ": y [", m, " x ", y.cols, "] for ", HP, " channels");
  check_cols(x, m, HP, op, "x");
  check_cols(B, m, GN, op, "B");
  check_cols(C, m, GN, op, "C");
  check_cols(dt_raw, m, p.heads, op, "dt");
  ScanArgs a{x, B, C, dt_raw, vec_of(A_log, p.heads, op), vec_of(D, p.heads, op), vec_of(dt_bias, p.heads, op), p, y};
  for (float& v : a.A) v = -std::exp(v);
  if (m == 0) return;
  const int64_t hsz = static_cast<int64_t>(p.head_dim) * p.state_size;
  const std::vector<SeqSpan> spans = seq_spans(rows, st, off, p.heads * hsz, m, op);
  const int64_t tasks = static_cast<int64_t>(spans.size()) * p.heads;
  // One task per (sequence, head): a split of tasks over threads never changes a task's arithmetic.
  for_rows(tasks, m * HP * p.state_size * 4, [&](int64_t t0, int64_t t1) {
    std::vector<float> hs(static_cast<size_t>(hsz)), buf;
    std::vector<float*> keep;
    for (int64_t task = t0; task < t1; ++task) {
      const size_t s = static_cast<size_t>(task / p.heads);
      const int h = static_cast<int>(task % p.heads);
      const int64_t hoff = off + h * hsz;
      const float* src = slot_at(st.pool, st.slot_floats, st.src[s], hoff);
      std::copy(src, src + hsz, hs.begin());
      if (st.step[s]) {
        keep.clear();
        if (!st.keep.empty())
          for (int32_t k : st.keep[s]) keep.push_back(slot_at(st.keep_pool, st.slot_floats, k, hoff));
        scan_steps(a, h, spans[s], hs.data(), keep);
      } else {
        scan_chunks(a, h, spans[s], hs.data(), buf);
      }
      std::copy(hs.begin(), hs.end(), slot_at(st.pool, st.slot_floats, st.dst[s], hoff));
    }
  });
}

}  // namespace tf::cpu
