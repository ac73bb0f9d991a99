// Gated DeltaNet ops of the CPU backend: chunked and step forms against a float64 sequential
// reference, invariance to the round's other sequences and the thread count, keep[] states, the
// sigmoid gate, bad inputs, and the Qwen3-Next weight row orders against transformers.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "base/error.h"
#include "models/gated_deltanet.h"
#include "models/qwen3_next_attention.h"

namespace tf {
namespace {

struct F32Weight {
  std::vector<float> data;
  TensorView view() const {
    TensorView v;
    v.name = "w";
    v.dtype = DType::F32;
    v.shape = {1, static_cast<int64_t>(data.size())};
    v.data = reinterpret_cast<const uint8_t*>(data.data());
    v.nbytes = data.size() * sizeof(float);
    return v;
  }
};

// One round's inputs in a single wide host matrix: [pad | q | k | v | a | b] per row.
struct DeltaCase {
  DeltaParams p;
  std::vector<int> seq_rows;        // rows of each sequence, in round order
  std::vector<float> in;            // [m x width]
  int64_t width = 0, qc = 0, kc = 0, vc = 0, ac = 0, bc = 0;
  F32Weight A_log, dt_bias;
  std::vector<std::vector<float>> init;  // initial state per sequence
  int64_t m() const {
    int64_t n = 0;
    for (int r : seq_rows) n += r;
    return n;
  }
  int64_t state() const { return int64_t{p.v_heads} * p.k_dim * p.v_dim; }
};

DeltaCase make_case(uint32_t seed, std::vector<int> seq_rows, int chunk = 5) {
  DeltaCase c;
  c.p = DeltaParams{2, 4, 8, 12, chunk};
  c.seq_rows = std::move(seq_rows);
  const int64_t kd = int64_t{c.p.k_heads} * c.p.k_dim, vd = int64_t{c.p.v_heads} * c.p.v_dim;
  c.qc = 3, c.kc = c.qc + kd, c.vc = c.kc + kd, c.ac = c.vc + vd, c.bc = c.ac + c.p.v_heads;
  c.width = c.bc + c.p.v_heads;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  c.in.resize(static_cast<size_t>(c.m() * c.width));
  for (auto& x : c.in) x = u(rng);
  for (int h = 0; h < c.p.v_heads; ++h) {
    c.A_log.data.push_back(std::log(0.2f + 0.8f * (u(rng) + 1.f) / 2.f));
    c.dt_bias.data.push_back(0.3f * u(rng));
  }
  for (size_t s = 0; s < c.seq_rows.size(); ++s) {
    std::vector<float> st(static_cast<size_t>(c.state()));
    for (auto& x : st) x = 0.5f * u(rng);
    c.init.push_back(st);
  }
  return c;
}

// Plain sequential gated delta rule in float64, per sequence from its initial state; kmap maps
// a v-head to the k-head it reads (transformers: h / (v_heads / k_heads)).
void reference(const DeltaCase& c, std::vector<double>& y, std::vector<std::vector<double>>& states,
               int (*kmap)(int, int, int)) {
  const auto& p = c.p;
  const int dk = p.k_dim, dv = p.v_dim;
  y.assign(static_cast<size_t>(c.m() * p.v_heads * dv), 0.0);
  states.clear();
  int64_t r0 = 0;
  for (size_t s = 0; s < c.seq_rows.size(); ++s) {
    std::vector<double> S(c.init[s].begin(), c.init[s].end());
    for (int64_t r = r0; r < r0 + c.seq_rows[s]; ++r) {
      const float* row = &c.in[static_cast<size_t>(r * c.width)];
      for (int h = 0; h < p.v_heads; ++h) {
        const int kh = kmap(h, p.k_heads, p.v_heads);
        std::vector<double> q(static_cast<size_t>(dk)), k(static_cast<size_t>(dk));
        double qs = 0, ks = 0;
        for (int i = 0; i < dk; ++i) {
          q[static_cast<size_t>(i)] = row[c.qc + kh * dk + i];
          k[static_cast<size_t>(i)] = row[c.kc + kh * dk + i];
          qs += q[static_cast<size_t>(i)] * q[static_cast<size_t>(i)];
          ks += k[static_cast<size_t>(i)] * k[static_cast<size_t>(i)];
        }
        for (int i = 0; i < dk; ++i) {
          q[static_cast<size_t>(i)] /= std::sqrt(qs + 1e-6) * std::sqrt(static_cast<double>(dk));
          k[static_cast<size_t>(i)] /= std::sqrt(ks + 1e-6);
        }
        const double a = row[c.ac + h] + c.dt_bias.data[static_cast<size_t>(h)];
        const double g = -std::exp(static_cast<double>(c.A_log.data[static_cast<size_t>(h)])) *
                         (a > 20 ? a : std::log1p(std::exp(a)));
        const double beta = 1.0 / (1.0 + std::exp(-static_cast<double>(row[c.bc + h])));
        double* Sh = &S[static_cast<size_t>(h) * dk * dv];
        for (int i = 0; i < dk * dv; ++i) Sh[i] *= std::exp(g);
        for (int j = 0; j < dv; ++j) {
          double kv = 0;
          for (int i = 0; i < dk; ++i) kv += Sh[i * dv + j] * k[static_cast<size_t>(i)];
          const double delta = (row[c.vc + h * dv + j] - kv) * beta;
          for (int i = 0; i < dk; ++i) Sh[i * dv + j] += k[static_cast<size_t>(i)] * delta;
        }
        for (int j = 0; j < dv; ++j) {
          double o = 0;
          for (int i = 0; i < dk; ++i) o += Sh[i * dv + j] * q[static_cast<size_t>(i)];
          y[static_cast<size_t>((r * p.v_heads + h) * dv + j)] = o;
        }
      }
    }
    states.push_back(S);
    r0 += c.seq_rows[s];
  }
}

int interleave_map(int h, int kh, int vh) { return h / (vh / kh); }
int modulo_map(int h, int kh, int) { return h % kh; }

struct DeltaRun {
  std::vector<float> y;
  std::vector<std::vector<float>> states;  // dst state per sequence
  std::vector<std::vector<float>> kept;    // keep slots of sequence 0, in order
};

// Runs the op with slot layout: sequence s reads slot 2s + 1 and writes slot 2s + 2 (slot 0 unused),
// the layer's state at an offset of 7 floats into each slot.
DeltaRun run(const DeltaCase& c, int threads, uint8_t step, bool keep0 = false) {
  auto be = make_cpu_backend(threads);
  const int64_t m = c.m(), off = 7, slot = c.state() + 11;
  const int n_seq = static_cast<int>(c.seq_rows.size());
  Tensor in = be->alloc(m, c.width), y = be->alloc(m, int64_t{c.p.v_heads} * c.p.v_dim);
  be->from_host(c.in.data(), in);
  Tensor pool = be->alloc(2 * n_seq + 1, slot);
  Tensor keep_pool = be->alloc(std::max(1, c.seq_rows[0]), slot);
  StateRefs st;
  st.pool = pool.data;
  st.slot_floats = slot;
  st.keep_pool = keep_pool.data;
  RowLayout rows;
  for (int s = 0; s < n_seq; ++s) {
    st.src.push_back(2 * s + 1);
    st.dst.push_back(2 * s + 2);
    st.step.push_back(step);
    std::copy(c.init[static_cast<size_t>(s)].begin(), c.init[static_cast<size_t>(s)].end(),
              pool.row(2 * s + 1) + off);
    rows.seq_pages.push_back({});
    for (int i = 0; i < c.seq_rows[static_cast<size_t>(s)]; ++i) {
      rows.pos.push_back(100 + i);
      rows.seq.push_back(s);
    }
  }
  if (keep0) {
    st.keep.resize(static_cast<size_t>(n_seq));
    for (int i = 0; i + 1 < c.seq_rows[0]; ++i) st.keep[0].push_back(i);
  }
  auto A = be->load_weight(c.A_log.view());
  auto D = be->load_weight(c.dt_bias.view());
  be->gated_delta(Cols{in, c.qc}, Cols{in, c.kc}, Cols{in, c.vc}, Cols{in, c.ac}, Cols{in, c.bc}, *A, *D, c.p, rows,
                  st, off, y);
  DeltaRun out;
  out.y.resize(static_cast<size_t>(y.rows * y.cols));
  be->to_host(y, out.y.data());
  for (int s = 0; s < n_seq; ++s) out.states.emplace_back(pool.row(2 * s + 2) + off, pool.row(2 * s + 2) + off + c.state());
  if (keep0)
    for (int i = 0; i + 1 < c.seq_rows[0]; ++i)
      out.kept.emplace_back(keep_pool.row(i) + off, keep_pool.row(i) + off + c.state());
  return out;
}

// Largest |ours - ref| / (1 + |ref|) over outputs and states.
double max_err(const DeltaRun& r, const std::vector<double>& y, const std::vector<std::vector<double>>& st) {
  double e = 0;
  for (size_t i = 0; i < y.size(); ++i) e = std::max(e, std::fabs(r.y[i] - y[i]) / (1 + std::fabs(y[i])));
  for (size_t s = 0; s < st.size(); ++s)
    for (size_t i = 0; i < st[s].size(); ++i)
      e = std::max(e, std::fabs(r.states[s][i] - st[s][i]) / (1 + std::fabs(st[s][i])));
  return e;
}

TEST(CpuDelta, ChunkedAndStepFormsMatchFloat64Reference) {
  for (int chunk : {1, 4, 5, 64}) {
    DeltaCase c = make_case(11 + static_cast<uint32_t>(chunk), {13, 7, 1}, chunk);
    std::vector<double> y;
    std::vector<std::vector<double>> st;
    reference(c, y, st, interleave_map);
    EXPECT_LT(max_err(run(c, 1, 0), y, st), 1e-4) << "chunked, chunk " << chunk;
    EXPECT_LT(max_err(run(c, 2, 1), y, st), 1e-4) << "step";
  }
}

TEST(CpuDelta, PlantedHeadMappingFaultIsCaught) {
  // The same gate against a reference that maps v-heads to k-heads modulo (tile, not interleave).
  DeltaCase c = make_case(5, {9, 4});
  std::vector<double> y;
  std::vector<std::vector<double>> st;
  reference(c, y, st, modulo_map);
  EXPECT_GT(max_err(run(c, 1, 0), y, st), 1e-2);
  EXPECT_GT(max_err(run(c, 1, 1), y, st), 1e-2);
}

TEST(CpuDelta, ChunkedSequenceIsBitIdenticalAloneOrWithOthers) {
  DeltaCase both = make_case(21, {6, 17, 3});
  DeltaCase alone = both;
  // Alone: only the 17-row sequence, with its rows and initial state.
  alone.seq_rows = {17};
  alone.in.assign(both.in.begin() + 6 * both.width, both.in.begin() + 23 * both.width);
  alone.init = {both.init[1]};
  for (uint8_t step : {uint8_t{0}, uint8_t{1}}) {
    const DeltaRun a = run(alone, 1, step);
    for (int threads : {1, 2}) {
      const DeltaRun b = run(both, threads, step);
      const size_t w = static_cast<size_t>(both.p.v_heads * both.p.v_dim);
      ASSERT_EQ(std::memcmp(a.y.data(), b.y.data() + 6 * w, 17 * w * sizeof(float)), 0)
          << "threads " << threads << " step " << int{step};
      ASSERT_EQ(a.states[0], b.states[1]) << "threads " << threads << " step " << int{step};
    }
  }
}

TEST(CpuDelta, KeptStatesEqualSingleStepStates) {
  DeltaCase c = make_case(31, {5, 2});
  const DeltaRun whole = run(c, 2, 1, /*keep0=*/true);
  ASSERT_EQ(whole.kept.size(), 4u);
  // Row by row: each one-row round continues from the state the previous one wrote.
  DeltaCase one = c;
  one.seq_rows = {1};
  for (int i = 0; i < 5; ++i) {
    one.in.assign(c.in.begin() + i * c.width, c.in.begin() + (i + 1) * c.width);
    const DeltaRun r = run(one, 1, 1);
    if (i < 4) EXPECT_EQ(r.states[0], whole.kept[static_cast<size_t>(i)]) << "row " << i;
    else EXPECT_EQ(r.states[0], whole.states[0]);
    const size_t w = static_cast<size_t>(c.p.v_heads * c.p.v_dim);
    EXPECT_EQ(std::memcmp(r.y.data(), whole.y.data() + static_cast<size_t>(i) * w, w * sizeof(float)), 0);
    one.init = {r.states[0]};
  }
}

TEST(CpuDelta, BadInputsThrow) {
  DeltaCase c = make_case(41, {3, 2});
  auto be = make_cpu_backend(1);
  const int64_t slot = c.state() + 4;
  Tensor in = be->alloc(c.m(), c.width), y = be->alloc(c.m(), int64_t{c.p.v_heads} * c.p.v_dim);
  Tensor pool = be->alloc(4, slot);
  auto A = be->load_weight(c.A_log.view());
  auto D = be->load_weight(c.dt_bias.view());
  auto base = [&]() {
    StateRefs st;
    st.pool = pool.data;
    st.slot_floats = slot;
    st.src = {0, 1};
    st.dst = {2, 3};
    st.step = {0, 0};
    return st;
  };
  RowLayout rows;
  rows.pos = {0, 1, 2, 0, 1};
  rows.seq = {0, 0, 0, 1, 1};
  rows.seq_pages.resize(2);
  auto call = [&](const StateRefs& st, const RowLayout& r, int64_t off, DeltaParams p) {
    be->gated_delta(Cols{in, c.qc}, Cols{in, c.kc}, Cols{in, c.vc}, Cols{in, c.ac}, Cols{in, c.bc}, *A, *D, p, r, st,
                    off, y);
  };
  EXPECT_NO_THROW(call(base(), rows, 0, c.p));
  EXPECT_THROW(call(base(), rows, 5, c.p), Error);  // state past the slot
  StateRefs clash = base();
  clash.dst = {2, 2};
  EXPECT_THROW(call(clash, rows, 0, c.p), Error);
  StateRefs reads_written = base();
  reads_written.dst = {1, 3};
  EXPECT_THROW(call(reads_written, rows, 0, c.p), Error);
  StateRefs keep = base();
  keep.keep = {{0}, {}};  // keep needs the step form and rows - 1 slots
  EXPECT_THROW(call(keep, rows, 0, c.p), Error);
  RowLayout split = rows;
  split.seq = {0, 1, 0, 1, 1};
  EXPECT_THROW(call(base(), split, 0, c.p), Error);
  RowLayout bad_seq = rows;
  bad_seq.seq[4] = 2;
  EXPECT_THROW(call(base(), bad_seq, 0, c.p), Error);
  DeltaParams p = c.p;
  p.v_heads = 3;  // not a multiple of k_heads
  EXPECT_THROW(call(base(), rows, 0, p), Error);
  EXPECT_THROW(be->gated_delta(Cols{in, c.width - 2}, Cols{in, c.kc}, Cols{in, c.vc}, Cols{in, c.ac},
                               Cols{in, c.bc}, *A, *D, c.p, rows, base(), 0, y),
               Error);  // q columns past the row
}

TEST(CpuDelta, MulSigmoidMatchesReference) {
  auto be = make_cpu_backend(2);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-8.f, 8.f);
  const int64_t m = 70, n = 33, wide = 50;
  std::vector<float> yv(static_cast<size_t>(m * n)), gv(static_cast<size_t>(m * wide));
  for (auto& x : yv) x = u(rng);
  for (auto& x : gv) x = u(rng);
  Tensor y = be->alloc(m, n), g = be->alloc(m, wide);
  be->from_host(yv.data(), y);
  be->from_host(gv.data(), g);
  be->mul_sigmoid(y, Cols{g, 9});
  std::vector<float> out(yv.size());
  be->to_host(y, out.data());
  for (int64_t r = 0; r < m; ++r)
    for (int64_t i = 0; i < n; ++i) {
      const double ref = yv[static_cast<size_t>(r * n + i)] / (1.0 + std::exp(-double{gv[static_cast<size_t>(r * wide + 9 + i)]}));
      ASSERT_NEAR(out[static_cast<size_t>(r * n + i)], ref, 1e-6 * (1 + std::fabs(ref))) << r << " " << i;
    }
  EXPECT_THROW(be->mul_sigmoid(y, Cols{g, 20}), Error);  // 33 columns from 20 pass the 50 of g
}

// Orders transformers produces (fix_query_key_value_ordering and the q_proj chunk of
// Qwen3NextAttention, run on arange inputs) for 2 k-heads, 4 v-heads, k_dim 2, v_dim 3, and
// 2 attention heads of dim 3.
TEST(CpuDelta, WeightRowOrdersMatchTransformers) {
  const std::vector<int64_t> qkvz = {0,  1,  16, 17, 2,  3,  18, 19, 4,  5,  6,  7,  8,  9,  20, 21,
                                     22, 23, 24, 25, 10, 11, 12, 13, 14, 15, 26, 27, 28, 29, 30, 31};
  EXPECT_EQ(qkvz_row_order(2, 4, 2, 3), qkvz);
  EXPECT_EQ(ba_row_order(2, 4), (std::vector<int64_t>{0, 1, 4, 5, 2, 3, 6, 7}));
  EXPECT_EQ(q_gate_row_order(2, 3), (std::vector<int64_t>{0, 1, 2, 6, 7, 8, 3, 4, 5, 9, 10, 11}));
}

}  // namespace
}  // namespace tf
