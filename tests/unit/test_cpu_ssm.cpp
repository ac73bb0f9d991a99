// Mamba2 ops of the CPU backend against plain sequential float64 references: causal conv with its
// carried state, the chunked and step scans, per-row kept states, the grouped sigmoid router and
// the gated group RMSNorm; chunked-form invariance to round company, item splits and threads.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "base/error.h"

namespace tf {
namespace {

using Vec = std::vector<float>;

// A backend plus host storage for the F32 weights it uses in place.
struct Bench {
  std::unique_ptr<Backend> b;
  std::vector<std::unique_ptr<Vec>> store;
  explicit Bench(int threads) : b(make_cpu_backend(threads)) {}
  std::unique_ptr<Weight> weight(const Vec& v, int64_t rows, int64_t cols) {
    store.push_back(std::make_unique<Vec>(v));
    TensorView tv;
    tv.name = "test_weight";
    tv.dtype = DType::F32;
    tv.shape = rows == 1 ? std::vector<int64_t>{cols} : std::vector<int64_t>{rows, cols};
    tv.data = reinterpret_cast<const uint8_t*>(store.back()->data());
    tv.nbytes = static_cast<uint64_t>(rows * cols) * sizeof(float);
    return b->load_weight(tv);
  }
  Tensor tensor(const Vec& v, int64_t rows, int64_t cols) {
    Tensor t = b->alloc(rows, cols);
    b->from_host(v.data(), t);
    return t;
  }
  Vec host(const Tensor& t) {
    Vec v(static_cast<size_t>(t.rows * t.cols));
    b->to_host(t, v.data());
    return v;
  }
};

Vec rnd(std::mt19937& g, size_t n, float lo, float hi) {
  std::uniform_real_distribution<float> d(lo, hi);
  Vec v(n);
  for (auto& x : v) x = d(g);
  return v;
}

// Rows of sequences of the given lengths, one after another, at positions from start[s].
RowLayout layout(const std::vector<int>& lens, const std::vector<int>& start) {
  RowLayout l;
  l.seq_pages.resize(lens.size());
  for (size_t s = 0; s < lens.size(); ++s)
    for (int i = 0; i < lens[s]; ++i) {
      l.pos.push_back(start[s] + i);
      l.seq.push_back(static_cast<int32_t>(s));
    }
  return l;
}

StateRefs refs(Tensor pool, std::vector<int32_t> src, std::vector<int32_t> dst, std::vector<uint8_t> step) {
  StateRefs st;
  st.pool = pool.data;
  st.slot_floats = pool.cols;
  st.src = std::move(src);
  st.dst = std::move(dst);
  st.step = std::move(step);
  return st;
}

double rel_err(const Vec& a, const std::vector<double>& r) {
  double e = 0;
  for (size_t i = 0; i < a.size(); ++i) e = std::max(e, std::fabs(a[i] - r[i]) / (1.0 + std::fabs(r[i])));
  return e;
}

// ---- causal conv ----

constexpr int kC = 10, kK = 4;

std::vector<double> conv_ref(const Vec& x, int T, const Vec& w, const Vec& bias) {
  std::vector<double> out(static_cast<size_t>(T * kC));
  for (int t = 0; t < T; ++t)
    for (int c = 0; c < kC; ++c) {
      double acc = bias[c];
      for (int k = 0; k < kK; ++k) {
        const int src = t - (kK - 1) + k;
        if (src >= 0) acc += static_cast<double>(w[c * kK + k]) * x[static_cast<size_t>(src * kC + c)];
      }
      out[static_cast<size_t>(t * kC + c)] = acc / (1.0 + std::exp(-acc));
    }
  return out;
}

TEST(CpuSsm, ConvMatchesReferenceAndCarriesStateAcrossItems) {
  std::mt19937 g(1);
  const int T = 23;
  Bench be(2);
  const Vec xv = rnd(g, T * kC, -1, 1), wv = rnd(g, kC * kK, -1, 1), bv = rnd(g, kC, -0.2f, 0.2f);
  auto w = be.weight(wv, kC, kK);
  auto bias = be.weight(bv, 1, kC);
  const int64_t sf = (kK - 1) * kC + 3;  // the layer's part sits at offset 3
  Tensor pool = be.b->alloc(8, sf);
  // One item.
  Tensor x = be.tensor(xv, T, kC), out = be.b->alloc(T, kC);
  be.b->conv1d_causal(x, *w, bias.get(), true, layout({T}, {0}), refs(pool, {0}, {1}, {0}), 3, out);
  const Vec whole = be.host(out);
  EXPECT_LT(rel_err(whole, conv_ref(xv, T, wv, bv)), 1e-6);
  // Items [0, 8), [8, 16), [16, 23) with the state carried slot to slot; in place (x is out).
  Vec parts;
  int32_t slot = 2;
  for (int b0 = 0, item = 0; b0 < T; b0 += 8, ++item) {
    const int n = std::min(8, T - b0);
    Tensor xi = be.tensor(Vec(xv.begin() + b0 * kC, xv.begin() + (b0 + n) * kC), n, kC);
    const int32_t src = item == 0 ? 0 : slot, dst = slot + 1;
    be.b->conv1d_causal(xi, *w, bias.get(), true, layout({n}, {b0}), refs(pool, {src}, {dst}, {0}), 3, xi);
    const Vec o = be.host(xi);
    parts.insert(parts.end(), o.begin(), o.end());
    slot = dst;
  }
  EXPECT_EQ(parts, whole);
  const Vec pv = be.host(pool);
  for (int64_t i = 3; i < sf; ++i) EXPECT_EQ(pv[static_cast<size_t>(1 * sf + i)], pv[static_cast<size_t>(slot * sf + i)]);
  // The state holds the last K - 1 inputs.
  for (int j = 0; j < kK - 1; ++j)
    for (int c = 0; c < kC; ++c)
      EXPECT_EQ(pv[static_cast<size_t>(sf + 3 + j * kC + c)], xv[static_cast<size_t>((T - kK + 1 + j) * kC + c)]);
  EXPECT_EQ(pv[static_cast<size_t>(sf)], 0.0f);  // floats before the offset untouched
}

// ---- scan ----

struct ScanCase {
  SsmParams p;
  Vec A_log, D, dt_bias;
  int64_t HP, GN, W;  // x | B | C packed in rows of W columns
};

ScanCase scan_case(std::mt19937& g) {
  ScanCase c;
  c.p.heads = 4, c.p.head_dim = 8, c.p.groups = 2, c.p.state_size = 16, c.p.chunk = 16;
  c.p.dt_min = 0.001f;
  c.A_log = rnd(g, 4, -0.7f, 1.4f);
  c.D = rnd(g, 4, 0.5f, 1.5f);
  c.dt_bias = rnd(g, 4, -1.0f, 0.5f);
  c.HP = 32, c.GN = 32, c.W = c.HP + 2 * c.GN;
  return c;
}

// Sequential float64 recurrence from state h0 [heads x P x N]; returns y and advances h0.
std::vector<double> scan_ref(const ScanCase& c, const Vec& xbc, const Vec& dtr, int T, std::vector<double>& h) {
  const int H = c.p.heads, P = c.p.head_dim, N = c.p.state_size, per = H / c.p.groups;
  std::vector<double> y(static_cast<size_t>(T * c.HP));
  for (int t = 0; t < T; ++t)
    for (int hh = 0; hh < H; ++hh) {
      const int gi = hh / per;
      double v = static_cast<double>(dtr[static_cast<size_t>(t * H + hh)]) + c.dt_bias[hh];
      double dt = v > 20 ? v : std::log1p(std::exp(v));
      dt = std::max(dt, static_cast<double>(c.p.dt_min));
      const double dA = std::exp(-std::exp(static_cast<double>(c.A_log[hh])) * dt);
      const float* row = xbc.data() + t * c.W;
      for (int p = 0; p < P; ++p) {
        const double x = row[hh * P + p];
        double acc = 0;
        for (int n = 0; n < N; ++n) {
          double& s = h[static_cast<size_t>((hh * P + p) * N + n)];
          s = s * dA + dt * row[c.HP + gi * N + n] * x;
          acc += s * row[c.HP + c.GN + gi * N + n];
        }
        y[static_cast<size_t>(t * c.HP + hh * P + p)] = acc + c.D[hh] * x;
      }
    }
  return y;
}

struct ScanRun {
  Vec y, pool;
};

// Runs one ssm_scan over sequences packed in xbc/dt rows with the given slots.
ScanRun run_scan(Bench& be, const ScanCase& c, const Vec& A_log, const Vec& xbc, const Vec& dtr,
                 const std::vector<int>& lens, const std::vector<int>& start, const Vec& pool_init, int64_t sf,
                 std::vector<int32_t> src, std::vector<int32_t> dst, std::vector<uint8_t> step, int64_t off,
                 std::vector<std::vector<int32_t>> keep = {}) {
  int m = 0;
  for (int l : lens) m += l;
  auto al = be.weight(A_log, 1, 4), d = be.weight(c.D, 1, 4), db = be.weight(c.dt_bias, 1, 4);
  Tensor x = be.tensor(xbc, m, c.W), dt = be.tensor(dtr, m, c.p.heads), y = be.b->alloc(m, c.HP);
  Tensor pool = be.tensor(pool_init, static_cast<int64_t>(pool_init.size()) / sf, sf);
  StateRefs st = refs(pool, std::move(src), std::move(dst), std::move(step));
  if (!keep.empty()) {
    st.keep = std::move(keep);
    st.keep_pool = pool.data;
  }
  be.b->ssm_scan(Cols{x, 0}, Cols{x, c.HP}, Cols{x, c.HP + c.GN}, Cols{dt, 0}, *al, *d, *db, c.p, layout(lens, start),
                 st, off, y);
  ScanRun r{be.host(y), be.host(pool)};
  be.b->free(x), be.b->free(dt), be.b->free(y), be.b->free(pool);
  return r;
}

constexpr int64_t kStateF = 4 * 8 * 16;

Vec slot_of(const Vec& pool, int64_t sf, int slot, int64_t off) {
  return Vec(pool.begin() + slot * sf + off, pool.begin() + slot * sf + off + kStateF);
}

TEST(CpuSsm, ScanChunkedAndStepMatchSequentialReference) {
  std::mt19937 g(2);
  const ScanCase c = scan_case(g);
  const int T = 45;  // three chunks of 16, the last partial
  const Vec xbc = rnd(g, T * c.W, -1, 1), dtr = rnd(g, T * 4, -2, 1), h0 = rnd(g, kStateF, -0.5f, 0.5f);
  const int64_t sf = kStateF + 5;
  Vec pool(3 * sf, 0.0f);
  std::copy(h0.begin(), h0.end(), pool.begin() + 5);
  std::vector<double> href(h0.begin(), h0.end());
  const std::vector<double> yref = scan_ref(c, xbc, dtr, T, href);
  for (uint8_t step : {uint8_t{0}, uint8_t{1}}) {
    Bench be(2);
    ScanRun r = run_scan(be, c, c.A_log, xbc, dtr, {T}, {0}, pool, sf, {0}, {2}, {step}, 5);
    EXPECT_LT(rel_err(r.y, yref), 1e-4) << "step " << int(step);
    EXPECT_LT(rel_err(slot_of(r.pool, sf, 2, 5), href), 1e-4) << "step " << int(step);
    EXPECT_EQ(slot_of(r.pool, sf, 0, 5), h0) << "src slot must stay intact";
  }
  // Planted fault: a slightly wrong decay must fail the same tolerance.
  Bench be(1);
  Vec bad = c.A_log;
  bad[1] += 0.05f;
  ScanRun r = run_scan(be, c, bad, xbc, dtr, {T}, {0}, pool, sf, {0}, {2}, {0}, 5);
  EXPECT_GT(rel_err(r.y, yref), 1e-4);
}

TEST(CpuSsm, ChunkedScanIsInvariantToCompanyItemSplitsAndThreads) {
  std::mt19937 g(3);
  const ScanCase c = scan_case(g);
  const int TA = 37, TB = 20, TC = 5;
  const Vec xa = rnd(g, TA * c.W, -1, 1), da = rnd(g, TA * 4, -2, 1);
  const Vec xb = rnd(g, TB * c.W, -1, 1), db = rnd(g, TB * 4, -2, 1);
  const Vec xc = rnd(g, TC * c.W, -1, 1), dc = rnd(g, TC * 4, -2, 1);
  const int64_t sf = kStateF;
  Vec pool = rnd(g, 8 * sf, -0.5f, 0.5f);
  Bench one(1), two(2);
  const ScanRun alone = run_scan(one, c, c.A_log, xa, da, {TA}, {0}, pool, sf, {0}, {1}, {0}, 0);
  // A between B (decode-style step rows) and C, from the same src slot content.
  Vec xall = xb, dall = db;
  xall.insert(xall.end(), xa.begin(), xa.end());
  xall.insert(xall.end(), xc.begin(), xc.end());
  dall.insert(dall.end(), da.begin(), da.end());
  dall.insert(dall.end(), dc.begin(), dc.end());
  for (Bench* be : {&one, &two}) {
    const ScanRun mixed = run_scan(*be, c, c.A_log, xall, dall, {TB, TA, TC}, {40, 0, 9}, pool, sf, {3, 0, 4},
                                   {5, 1, 6}, {1, 0, 0}, 0);
    EXPECT_EQ(Vec(mixed.y.begin() + TB * c.HP, mixed.y.begin() + (TB + TA) * c.HP), alone.y) << be->b->threads();
    EXPECT_EQ(slot_of(mixed.pool, sf, 1, 0), slot_of(alone.pool, sf, 1, 0)) << be->b->threads();
  }
  // Resumed at the mark 16 (a multiple of the chunk): the same arithmetic as one item.
  const ScanRun first = run_scan(two, c, c.A_log, Vec(xa.begin(), xa.begin() + 16 * c.W),
                                 Vec(da.begin(), da.begin() + 16 * 4), {16}, {0}, pool, sf, {0}, {2}, {0}, 0);
  const ScanRun rest = run_scan(two, c, c.A_log, Vec(xa.begin() + 16 * c.W, xa.end()), Vec(da.begin() + 16 * 4, da.end()),
                                {TA - 16}, {16}, first.pool, sf, {2}, {1}, {0}, 0);
  Vec ys = Vec(first.y.begin(), first.y.end());
  ys.insert(ys.end(), rest.y.begin(), rest.y.end());
  EXPECT_EQ(ys, alone.y);
  EXPECT_EQ(slot_of(rest.pool, sf, 1, 0), slot_of(alone.pool, sf, 1, 0));
}

TEST(CpuSsm, KeptStatesEqualSingleSteps) {
  std::mt19937 g(4);
  const ScanCase c = scan_case(g);
  const int T = 5;
  const Vec xbc = rnd(g, T * c.W, -1, 1), dtr = rnd(g, T * 4, -2, 1);
  const int64_t sf = kStateF;
  Vec pool = rnd(g, 12 * sf, -0.5f, 0.5f);
  Bench be(2);
  const ScanRun all = run_scan(be, c, c.A_log, xbc, dtr, {T}, {10}, pool, sf, {0}, {1}, {1}, 0, {{2, 3, 4, 5}});
  Vec cur = pool, ys;
  int32_t src = 0;
  for (int t = 0; t < T; ++t) {
    const int32_t dst = 6 + t % 2;
    const ScanRun r = run_scan(be, c, c.A_log, Vec(xbc.begin() + t * c.W, xbc.begin() + (t + 1) * c.W),
                               Vec(dtr.begin() + t * 4, dtr.begin() + (t + 1) * 4), {1}, {10 + t}, cur, sf, {src},
                               {dst}, {1}, 0);
    ys.insert(ys.end(), r.y.begin(), r.y.end());
    if (t + 1 < T) EXPECT_EQ(slot_of(all.pool, sf, 2 + t, 0), slot_of(r.pool, sf, dst, 0)) << "row " << t;
    else EXPECT_EQ(slot_of(all.pool, sf, 1, 0), slot_of(r.pool, sf, dst, 0));
    cur = r.pool;
    src = dst;
  }
  EXPECT_EQ(all.y, ys);
}

TEST(CpuSsm, ConvKeepsPerRowStates) {
  std::mt19937 g(5);
  Bench be(1);
  const int T = 3;
  const Vec xv = rnd(g, T * kC, -1, 1), wv = rnd(g, kC * kK, -1, 1);
  auto w = be.weight(wv, kC, kK);
  const int64_t sf = (kK - 1) * kC;
  Tensor pool = be.tensor(rnd(g, 6 * sf, -1, 1), 6, sf);
  const Vec init = be.host(pool);
  Tensor x = be.tensor(xv, T, kC), out = be.b->alloc(T, kC);
  StateRefs st = refs(pool, {0}, {1}, {1});
  st.keep = {{2, 3}};
  st.keep_pool = pool.data;
  be.b->conv1d_causal(x, *w, nullptr, false, layout({T}, {7}), st, 0, out);
  const Vec pv = be.host(pool);
  // After row i the window is the old state's last K - 1 - (i + 1) rows then inputs 0..i.
  for (int i = 0; i < T; ++i) {
    const int slot = i + 1 < T ? 2 + i : 1;
    for (int j = 0; j < kK - 1; ++j) {
      const int age = j - (kK - 1) + i + 1;  // input index; negative reaches into the old state
      for (int cc = 0; cc < kC; ++cc) {
        const float want = age >= 0 ? xv[static_cast<size_t>(age * kC + cc)]
                                    : init[static_cast<size_t>((kK - 1 + age) * kC + cc)];
        EXPECT_EQ(pv[static_cast<size_t>(slot * sf + j * kC + cc)], want) << i << " " << j;
      }
    }
  }
}

TEST(CpuSsm, BadStateRefsThrow) {
  std::mt19937 g(6);
  const ScanCase c = scan_case(g);
  const Vec xbc = rnd(g, 6 * c.W, -1, 1), dtr = rnd(g, 6 * 4, -2, 1);
  const int64_t sf = kStateF;
  const Vec pool(6 * sf, 0.0f);
  Bench be(1);
  auto run = [&](std::vector<int> lens, std::vector<int> start, std::vector<int32_t> src, std::vector<int32_t> dst,
                 int64_t off, RowLayout* custom = nullptr) {
    int m = 0;
    for (int l : lens) m += l;
    auto al = be.weight(c.A_log, 1, 4), d = be.weight(c.D, 1, 4), db = be.weight(c.dt_bias, 1, 4);
    Tensor x = be.tensor(Vec(xbc.begin(), xbc.begin() + m * c.W), m, c.W);
    Tensor dt = be.tensor(Vec(dtr.begin(), dtr.begin() + m * 4), m, 4), y = be.b->alloc(m, c.HP);
    Tensor p = be.tensor(pool, 6, sf);
    std::vector<uint8_t> step(src.size(), 0);
    be.b->ssm_scan(Cols{x, 0}, Cols{x, c.HP}, Cols{x, c.HP + c.GN}, Cols{dt, 0}, *al, *d, *db, c.p,
                   custom ? *custom : layout(lens, start), refs(p, src, dst, step), off, y);
  };
  EXPECT_NO_THROW(run({3, 3}, {0, 0}, {0, 1}, {2, 3}, 0));
  EXPECT_THROW(run({3, 3}, {0, 0}, {0, 1}, {2, 2}, 0), Error);   // two writers of one slot
  EXPECT_THROW(run({3, 3}, {0, 0}, {0, 1}, {1, 3}, 0), Error);   // writes a slot another reads
  EXPECT_THROW(run({6}, {0}, {0}, {0}, 0), Error);               // src == dst
  EXPECT_THROW(run({6}, {0}, {-1}, {1}, 0), Error);              // negative slot
  EXPECT_THROW(run({6}, {0}, {0}, {1}, 1), Error);               // state past the slot end
  EXPECT_THROW(run({3, 3}, {0, 0}, {0}, {1}, 0), Error);         // refs for fewer sequences
  RowLayout gap = layout({3, 3}, {0, 0});
  std::swap(gap.seq[2], gap.seq[3]);                             // rows not contiguous
  EXPECT_THROW(run({3, 3}, {0, 0}, {0, 1}, {2, 3}, 0, &gap), Error);
  RowLayout order = layout({6}, {0});
  order.pos[4] = 9;                                              // positions not consecutive
  EXPECT_THROW(run({6}, {0}, {0}, {1}, 0, &order), Error);
}

// ---- router ----

TEST(CpuSsm, GroupedSigmoidRouterHandWorked) {
  Bench be(1);
  // All scores 0.5; bias picks: choice = .625 .5 | .75 .375 | .5 .5 | .75 .625. Group scores
  // 1.125, 1.125, 1.0, 1.375: group 3 then group 0 (tie with group 1: lower index). Expert 2
  // (.75) is outside them. Top 3: 6, then 0 and 7 tie at .625 (lower index first).
  auto bias = be.weight({0.125f, 0.0f, 0.25f, -0.125f, 0.0f, 0.0f, 0.25f, 0.125f}, 1, 8);
  Tensor lg = be.tensor(Vec(8, 0.0f), 1, 8);
  int32_t idx[3];
  float w[3];
  be.b->topk_sigmoid_grouped(lg, bias.get(), 4, 2, 3, true, 2.5f, idx, w);
  EXPECT_EQ(std::vector<int32_t>(idx, idx + 3), (std::vector<int32_t>{6, 0, 7}));
  for (float v : w) EXPECT_NEAR(v, 2.5 / 3.0, 1e-6);
  // Not renormalized: the unbiased score times the scale.
  be.b->topk_sigmoid_grouped(lg, bias.get(), 4, 2, 3, false, 2.5f, idx, w);
  for (float v : w) EXPECT_FLOAT_EQ(v, 1.25f);
  // One group, no bias: plain top-2 of the sigmoid, ranked.
  Tensor lg2 = be.tensor({2, -1, 0, 0, 1, 3, -2, 0.5f}, 1, 8);
  int32_t i2[2];
  float w2[2];
  be.b->topk_sigmoid_grouped(lg2, nullptr, 1, 1, 2, false, 1.0f, i2, w2);
  EXPECT_EQ(i2[0], 5);
  EXPECT_EQ(i2[1], 0);
  EXPECT_NEAR(w2[0], 1 / (1 + std::exp(-3.0)), 1e-6);
  EXPECT_NEAR(w2[1], 1 / (1 + std::exp(-2.0)), 1e-6);
  // k larger than the chosen groups hold is an error, not a pick of masked experts.
  EXPECT_THROW(be.b->topk_sigmoid_grouped(lg, bias.get(), 4, 2, 5, true, 1.0f, idx, w), Error);
}

// ---- gated norm ----

TEST(CpuSsm, GatedRmsNormBothOrders) {
  std::mt19937 g(7);
  Bench be(1);
  const int R = 3, n = 12, grp = 4;
  const float eps = 1e-5f;
  const Vec xv = rnd(g, R * n, -2, 2), zv = rnd(g, R * (n + 2), -3, 3), gv = rnd(g, n, 0.5f, 1.5f);
  auto gw = be.weight(gv, 1, n);
  Tensor x = be.tensor(xv, R, n), z = be.tensor(zv, R, n + 2), y = be.b->alloc(R, n);
  for (bool norm_first : {false, true}) {
    be.b->gated_rmsnorm(x, Cols{z, 2}, *gw, grp, eps, norm_first, y);
    const Vec yv = be.host(y);
    std::vector<double> ref(static_cast<size_t>(R * n));
    for (int r = 0; r < R; ++r)
      for (int g0 = 0; g0 < n; g0 += grp) {
        auto silu = [&](int i) { double zz = zv[static_cast<size_t>(r * (n + 2) + 2 + i)]; return zz / (1 + std::exp(-zz)); };
        double ss = 0;
        for (int i = g0; i < g0 + grp; ++i) {
          const double v = norm_first ? xv[static_cast<size_t>(r * n + i)] : xv[static_cast<size_t>(r * n + i)] * silu(i);
          ss += v * v;
        }
        const double inv = 1 / std::sqrt(ss / grp + eps);
        for (int i = g0; i < g0 + grp; ++i) {
          const double xi = xv[static_cast<size_t>(r * n + i)];
          ref[static_cast<size_t>(r * n + i)] = norm_first ? xi * inv * gv[i] * silu(i) : xi * silu(i) * inv * gv[i];
        }
      }
    EXPECT_LT(rel_err(yv, ref), 1e-5) << "norm_first " << norm_first;
  }
  EXPECT_THROW(be.b->gated_rmsnorm(x, Cols{z, 2}, *gw, 5, eps, false, y), Error);  // group must divide
  EXPECT_THROW(be.b->gated_rmsnorm(x, Cols{z, 3}, *gw, grp, eps, false, y), Error);  // z columns past the end
}

TEST(CpuSsm, ActivateRelu2AndSilu) {
  Bench be(1);
  Tensor x = be.tensor({-2, -0.5f, 0, 0.5f, 3}, 1, 5), y = be.b->alloc(1, 5);
  be.b->activate(Act::Relu2, x, y);
  EXPECT_EQ(be.host(y), (Vec{0, 0, 0, 0.25f, 9}));
  be.b->activate(Act::SiLU, x, y);
  EXPECT_NEAR(be.host(y)[4], 3 / (1 + std::exp(-3.0)), 1e-6);
}

}  // namespace
}  // namespace tf
