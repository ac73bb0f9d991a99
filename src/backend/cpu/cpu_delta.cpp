// Gated DeltaNet ops of the CPU backend: the gated delta rule in its chunked (prefill) and step
// (decode, verify) forms, and the sigmoid gate. Work is split by (sequence, v-head) only, so a
// sequence's outputs and state never depend on the other sequences or the thread count.
#include <algorithm>
#include <cmath>
#include <set>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "base/error.h"

namespace tf::cpu {

namespace {

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// torch.nn.functional.softplus with beta 1 and threshold 20.
float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

// out = x / sqrt(sum(x^2) + 1e-6) * scale, summed in index order (FLA's l2norm).
void l2norm(const float* x, int n, float scale, float* out) {
  float s = 0.0f;
  for (int i = 0; i < n; ++i) s += x[i] * x[i];
  const float inv = 1.0f / std::sqrt(s + 1e-6f);
  for (int i = 0; i < n; ++i) out[i] = x[i] * inv * scale;
}

// One sequence's rows [r0, r0 + n) seen by one v-head.
struct HeadJob {
  const Cols *q = nullptr, *k = nullptr, *v = nullptr, *a = nullptr, *b = nullptr;
  int h = 0, kh = 0, dk = 0, dv = 0;
  float A = 0.0f, dt_bias = 0.0f;
  int64_t r0 = 0, n = 0;
  Tensor y;
};

// Per-row inputs of one head: normalized q (scaled) and k, v, decay log g and beta.
struct RowInputs {
  std::vector<float> q, k, v, g, beta;
  void load(const HeadJob& j, int64_t r, int64_t t) {
    const float qs = 1.0f / std::sqrt(static_cast<float>(j.dk));
    l2norm(j.q->at(r) + static_cast<int64_t>(j.kh) * j.dk, j.dk, qs, &q[static_cast<size_t>(t * j.dk)]);
    l2norm(j.k->at(r) + static_cast<int64_t>(j.kh) * j.dk, j.dk, 1.0f, &k[static_cast<size_t>(t * j.dk)]);
    std::copy_n(j.v->at(r) + static_cast<int64_t>(j.h) * j.dv, j.dv, &v[static_cast<size_t>(t * j.dv)]);
    g[static_cast<size_t>(t)] = -j.A * softplus(j.a->at(r)[j.h] + j.dt_bias);
    beta[static_cast<size_t>(t)] = sigmoid(j.b->at(r)[j.h]);
  }
  void resize(int64_t rows, int dk, int dv) {
    q.resize(static_cast<size_t>(rows * dk));
    k.resize(static_cast<size_t>(rows * dk));
    v.resize(static_cast<size_t>(rows * dv));
    g.resize(static_cast<size_t>(rows));
    beta.resize(static_cast<size_t>(rows));
  }
};

// Recurrent form, row by row; S is [dk x dv]. keep(i, S) gets the state after row i (all but the last).
template <typename Keep>
void delta_step(const HeadJob& j, float* S, Keep keep) {
  const int dk = j.dk, dv = j.dv;
  RowInputs in;
  in.resize(1, dk, dv);
  std::vector<float> kv(static_cast<size_t>(dv));
  for (int64_t t = 0; t < j.n; ++t) {
    const int64_t r = j.r0 + t;
    in.load(j, r, 0);
    const float decay = std::exp(in.g[0]), beta = in.beta[0];
    for (int i = 0; i < dk * dv; ++i) S[i] *= decay;
    std::fill(kv.begin(), kv.end(), 0.0f);
    for (int i = 0; i < dk; ++i)
      for (int c = 0; c < dv; ++c) kv[static_cast<size_t>(c)] += S[i * dv + c] * in.k[static_cast<size_t>(i)];
    for (int c = 0; c < dv; ++c) kv[static_cast<size_t>(c)] = (in.v[static_cast<size_t>(c)] - kv[static_cast<size_t>(c)]) * beta;
    for (int i = 0; i < dk; ++i)
      for (int c = 0; c < dv; ++c) S[i * dv + c] += in.k[static_cast<size_t>(i)] * kv[static_cast<size_t>(c)];
    float* yr = j.y.row(r) + static_cast<int64_t>(j.h) * dv;
    std::fill(yr, yr + dv, 0.0f);
    for (int i = 0; i < dk; ++i)
      for (int c = 0; c < dv; ++c) yr[c] += S[i * dv + c] * in.q[static_cast<size_t>(i)];
    if (t + 1 < j.n) keep(t, S);
  }
}

// Chunked form: chunks of `chunk` rows counted from the job's first row (transformers'
// torch_chunk_gated_delta_rule; a short last chunk equals its zero-padded one).
void delta_chunked(const HeadJob& j, int chunk, float* S) {
  const int dk = j.dk, dv = j.dv;
  RowInputs in;
  in.resize(chunk, dk, dv);
  const size_t C = static_cast<size_t>(chunk);
  std::vector<float> cum(C), A(C * C), U(C * static_cast<size_t>(dv)), W(C * static_cast<size_t>(dk));
  std::vector<float> out(static_cast<size_t>(dv));
  for (int64_t c0 = 0; c0 < j.n; c0 += chunk) {
    const int L = static_cast<int>(std::min<int64_t>(chunk, j.n - c0));
    float acc = 0.0f;
    for (int t = 0; t < L; ++t) {
      in.load(j, j.r0 + c0 + t, t);
      acc += in.g[static_cast<size_t>(t)];
      cum[static_cast<size_t>(t)] = acc;
    }
    const float* K = in.k.data();
    const float* Q = in.q.data();
    // A[t][s] = beta_t (k_t . k_s) exp(cum_t - cum_s), s < t: the strictly lower UT system.
    for (int t = 0; t < L; ++t)
      for (int s = 0; s < t; ++s) {
        float d = 0.0f;
        for (int i = 0; i < dk; ++i) d += K[t * dk + i] * K[s * dk + i];
        A[static_cast<size_t>(t) * C + static_cast<size_t>(s)] =
            in.beta[static_cast<size_t>(t)] * d * std::exp(cum[static_cast<size_t>(t)] - cum[static_cast<size_t>(s)]);
      }
    // Forward substitution of (I + A) U = beta v and (I + A) W = beta k exp(cum).
    for (int t = 0; t < L; ++t) {
      float* u = &U[static_cast<size_t>(t * dv)];
      float* w = &W[static_cast<size_t>(t * dk)];
      const float bt = in.beta[static_cast<size_t>(t)];
      const float ed = bt * std::exp(cum[static_cast<size_t>(t)]);
      for (int c = 0; c < dv; ++c) u[c] = in.v[static_cast<size_t>(t * dv + c)] * bt;
      for (int i = 0; i < dk; ++i) w[i] = K[t * dk + i] * ed;
      for (int s = 0; s < t; ++s) {
        const float a = A[static_cast<size_t>(t) * C + static_cast<size_t>(s)];
        for (int c = 0; c < dv; ++c) u[c] -= a * U[static_cast<size_t>(s * dv + c)];
        for (int i = 0; i < dk; ++i) w[i] -= a * W[static_cast<size_t>(s * dk + i)];
      }
    }
    // v_new = U - W S (overwrites U).
    for (int t = 0; t < L; ++t) {
      float* u = &U[static_cast<size_t>(t * dv)];
      const float* w = &W[static_cast<size_t>(t * dk)];
      for (int i = 0; i < dk; ++i)
        for (int c = 0; c < dv; ++c) u[c] -= w[i] * S[i * dv + c];
    }
    // out_t = exp(cum_t) q_t S + sum_{s <= t} (q_t . k_s) exp(cum_t - cum_s) v_new_s.
    for (int t = 0; t < L; ++t) {
      std::fill(out.begin(), out.end(), 0.0f);
      const float et = std::exp(cum[static_cast<size_t>(t)]);
      for (int i = 0; i < dk; ++i) {
        const float qi = Q[t * dk + i] * et;
        for (int c = 0; c < dv; ++c) out[static_cast<size_t>(c)] += qi * S[i * dv + c];
      }
      for (int s = 0; s <= t; ++s) {
        float d = 0.0f;
        for (int i = 0; i < dk; ++i) d += Q[t * dk + i] * K[s * dk + i];
        d *= std::exp(cum[static_cast<size_t>(t)] - cum[static_cast<size_t>(s)]);
        for (int c = 0; c < dv; ++c) out[static_cast<size_t>(c)] += d * U[static_cast<size_t>(s * dv + c)];
      }
      std::copy(out.begin(), out.end(), j.y.row(j.r0 + c0 + t) + static_cast<int64_t>(j.h) * dv);
    }
    // S = exp(cum_last) S + sum_s exp(cum_last - cum_s) k_s v_new_s^T.
    const float last = cum[static_cast<size_t>(L - 1)];
    const float el = std::exp(last);
    for (int i = 0; i < dk * dv; ++i) S[i] *= el;
    for (int s = 0; s < L; ++s) {
      const float e = std::exp(last - cum[static_cast<size_t>(s)]);
      for (int i = 0; i < dk; ++i) {
        const float ki = K[s * dk + i] * e;
        for (int c = 0; c < dv; ++c) S[i * dv + c] += ki * U[static_cast<size_t>(s * dv + c)];
      }
    }
  }
}

void check_cols(const Cols& x, int64_t width, int64_t rows, const char* op, const char* what) {
  check_tensor(x.t, op, what);
  TF_CHECK(x.t.rows == rows && x.col >= 0 && width >= 0 && x.col + width <= x.t.cols, op, ": ", what,
           " columns [", x.col, ", ", x.col + width, ") of [", x.t.rows, " x ", x.t.cols, "] for ", rows, " rows");
}

}  // namespace

void CpuBackend::mul_sigmoid(Tensor y, Cols gate) {
  check_tensor(y, "mul_sigmoid", "y");
  check_cols(gate, y.cols, y.rows, "mul_sigmoid", "gate");
  for_rows(y.rows, y.rows * y.cols * 8, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      float* yr = y.row(r);
      const float* g = gate.at(r);
      for (int64_t c = 0; c < y.cols; ++c) yr[c] *= sigmoid(g[c]);
    }
  });
}

void CpuBackend::gated_delta(Cols q, Cols k, Cols v, Cols a, Cols b, const Weight& A_log_w, const Weight& dt_bias_w,
                             const DeltaParams& p, const RowLayout& rows, const StateRefs& st, int64_t off, Tensor y) {
  const char* op = "gated_delta";
  TF_CHECK(p.k_heads > 0 && p.v_heads > 0 && p.k_dim > 0 && p.v_dim > 0 && p.chunk > 0 &&
               p.v_heads % p.k_heads == 0 && p.k_dim <= 4096 && p.v_dim <= 4096 && p.chunk <= 4096,
           op, ": bad sizes k_heads ", p.k_heads, " v_heads ", p.v_heads, " k_dim ", p.k_dim, " v_dim ", p.v_dim,
           " chunk ", p.chunk);
  const int64_t m = rows.rows();
  check_tensor(y, op, "y");
  TF_CHECK(y.rows == m && y.cols == static_cast<int64_t>(p.v_heads) * p.v_dim, op, ": y [", y.rows, " x ", y.cols,
           "] for ", m, " rows of ", p.v_heads, " x ", p.v_dim);
  check_cols(q, static_cast<int64_t>(p.k_heads) * p.k_dim, m, op, "q");
  check_cols(k, static_cast<int64_t>(p.k_heads) * p.k_dim, m, op, "k");
  check_cols(v, static_cast<int64_t>(p.v_heads) * p.v_dim, m, op, "v");
  check_cols(a, p.v_heads, m, op, "a");
  check_cols(b, p.v_heads, m, op, "b");
  const CpuWeight& Aw = as_cpu(A_log_w, op);
  const CpuWeight& Dw = as_cpu(dt_bias_w, op);
  TF_CHECK(Aw.rows == 1 && Aw.cols == p.v_heads && Dw.rows == 1 && Dw.cols == p.v_heads, op, ": ", Aw.name, " [",
           Aw.rows, " x ", Aw.cols, "] and ", Dw.name, " [", Dw.rows, " x ", Dw.cols, "] need ", p.v_heads,
           " entries");
  const int64_t head_floats = static_cast<int64_t>(p.k_dim) * p.v_dim;
  const int64_t state = head_floats * p.v_heads;
  const size_t n_seq = st.src.size();
  TF_CHECK(st.pool != nullptr && n_seq > 0 && st.dst.size() == n_seq && st.step.size() == n_seq &&
               (st.keep.empty() || st.keep.size() == n_seq),
           op, ": state refs need src, dst and step per sequence (", st.src.size(), ", ", st.dst.size(), ", ",
           st.step.size(), ", keep ", st.keep.size(), ")");
  TF_CHECK(off >= 0 && st.slot_floats > 0 && off + state <= st.slot_floats, op, ": state at ", off, " of ", state,
           " floats does not fit slots of ", st.slot_floats);
  // Each sequence's rows: contiguous, in position order.
  std::vector<int64_t> first(n_seq, -1), count(n_seq, 0);
  TF_CHECK(rows.seq.size() == static_cast<size_t>(m), op, ": ", rows.seq.size(), " sequence ids for ", m, " rows");
  for (int64_t r = 0; r < m; ++r) {
    const int32_t s = rows.seq[static_cast<size_t>(r)];
    TF_CHECK(s >= 0 && static_cast<size_t>(s) < n_seq, op, ": row ", r, " has sequence ", s, " of ", n_seq);
    const size_t si = static_cast<size_t>(s);
    if (first[si] < 0) first[si] = r;
    TF_CHECK(first[si] + count[si] == r, op, ": rows of sequence ", s, " are not contiguous (row ", r, ")");
    if (count[si] > 0)
      TF_CHECK(rows.pos[static_cast<size_t>(r)] == rows.pos[static_cast<size_t>(r - 1)] + 1, op,
               ": sequence ", s, " positions are not consecutive at row ", r);
    ++count[si];
  }
  std::set<int32_t> dsts;
  for (size_t s = 0; s < n_seq; ++s) {
    TF_CHECK(st.src[s] >= 0 && st.dst[s] >= 0 && st.step[s] <= 1, op, ": sequence ", s, " has src ", st.src[s],
             " dst ", st.dst[s], " step ", int{st.step[s]});
    TF_CHECK(dsts.insert(st.dst[s]).second, op, ": two sequences write state slot ", st.dst[s]);
    TF_CHECK(st.slots == 0 || (st.src[s] < st.slots && st.dst[s] < st.slots), op, ": sequence ", s,
             " uses a slot past the pool's ", st.slots);
    const bool has_keep = !st.keep.empty() && !st.keep[s].empty();
    if (has_keep) {
      TF_CHECK(st.step[s] == 1 && st.keep_pool != nullptr &&
                   static_cast<int64_t>(st.keep[s].size()) == count[s] - 1,
               op, ": sequence ", s, " keeps ", st.keep[s].size(), " states for ", count[s],
               " rows (needs the step form, a keep pool and rows - 1 slots)");
      for (int32_t slot : st.keep[s])
        TF_CHECK(slot >= 0 && (st.keep_slots == 0 || slot < st.keep_slots), op, ": keep slot ", slot, " of sequence ", s);
    }
  }
  for (size_t s = 0; s < n_seq; ++s)
    for (size_t o = 0; o < n_seq; ++o)
      TF_CHECK(o == s || st.src[o] != st.dst[s], op, ": sequence ", s, " writes slot ", st.dst[s],
               " that sequence ", o, " reads");
  std::vector<float> A_log(static_cast<size_t>(p.v_heads)), dt_bias(static_cast<size_t>(p.v_heads));
  decode_row(Aw.rows_view(), 0, 0, p.v_heads, A_log.data());
  decode_row(Dw.rows_view(), 0, 0, p.v_heads, dt_bias.data());
  const int rep = p.v_heads / p.k_heads;
  const int64_t tasks = static_cast<int64_t>(n_seq) * p.v_heads;
  for_rows(tasks, m * head_floats * p.v_heads * 4, [&](int64_t tb, int64_t te) {
    std::vector<float> S(static_cast<size_t>(head_floats));
    for (int64_t task = tb; task < te; ++task) {
      const size_t s = static_cast<size_t>(task / p.v_heads);
      if (count[s] == 0) continue;
      HeadJob j;
      j.q = &q, j.k = &k, j.v = &v, j.a = &a, j.b = &b;
      j.h = static_cast<int>(task % p.v_heads);
      j.kh = j.h / rep;  // repeat_interleave: v-head h reads k-head h / rep
      j.dk = p.k_dim;
      j.dv = p.v_dim;
      j.A = std::exp(A_log[static_cast<size_t>(j.h)]);
      j.dt_bias = dt_bias[static_cast<size_t>(j.h)];
      j.r0 = first[s];
      j.n = count[s];
      j.y = y;
      const int64_t hoff = off + j.h * head_floats;
      const float* src = st.pool + st.src[s] * st.slot_floats + hoff;
      std::copy(src, src + head_floats, S.begin());
      if (st.step[s]) {
        const bool has_keep = !st.keep.empty() && !st.keep[s].empty();
        delta_step(j, S.data(), [&](int64_t i, const float* cur) {
          if (!has_keep) return;
          float* dst = st.keep_pool + st.keep[s][static_cast<size_t>(i)] * st.slot_floats + hoff;
          std::copy(cur, cur + head_floats, dst);
        });
      } else {
        delta_chunked(j, p.chunk, S.data());
      }
      std::copy(S.begin(), S.end(), st.pool + st.dst[s] * st.slot_floats + hoff);
    }
  });
}

}  // namespace tf::cpu
