// CPU ops against float64 references, shape checks, weights and memory accounting.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "cpu_test_gates.h"

namespace tf::cputest {
namespace {

std::vector<double> ones(size_t n) { return std::vector<double>(n, 1.0); }

TEST(CpuKernels, RmsnormMatchesReference) {
  std::mt19937 rng(21);
  for (auto* k : kernel_tables())
    for (DType t : {DType::F32, DType::BF16, DType::F16, DType::Q8_0})
      for (int64_t n : {32, 64, 4096})
        for (bool add_one : {false, true}) {
          auto be = cpu::make_cpu_backend_with(2, *k);
          HostWeight g = make_weight(t, 1, n, rng, true);
          auto w = be->load_weight(g.view);
          const int64_t m = 3;
          auto xs = random_floats(rng, static_cast<size_t>(m * n), -4.f, 4.f);
          Tensor x = upload(*be, xs, m, n), y = poisoned(*be, m, n);
          be->rmsnorm(x, *w, 1e-5f, add_one, y);
          std::vector<double> ref(xs.size()), mag(xs.size());
          for (int64_t r = 0; r < m; ++r) {
            double ss = 0;
            for (int64_t i = 0; i < n; ++i) ss += double(xs[r * n + i]) * xs[r * n + i];
            const double inv = 1.0 / std::sqrt(ss / n + 1e-5);
            for (int64_t i = 0; i < n; ++i) {
              ref[r * n + i] = xs[r * n + i] * inv * (g.at(0, i) + (add_one ? 1.0 : 0.0));
              mag[r * n + i] = std::fabs(ref[r * n + i]);
            }
          }
          EXPECT_EQ(check_close(host(*be, y), ref, mag, 1e-5, "rmsnorm"), "") << k->name;
        }
}

TEST(CpuKernels, RopeMatchesReferenceBothLayouts) {
  std::mt19937 rng(22);
  for (bool neox : {true, false})
    for (int rot : {16, 10}) {
      auto be = make_cpu_backend(2);
      RopeParams p;
      p.head_dim = 16;
      p.rot_dim = rot;
      p.neox = neox;
      p.mscale = 1.25f;
      for (int i = 0; i < rot / 2; ++i) p.inv_freq.push_back(std::pow(10000.f, -2.f * i / rot));
      const int heads = 3, m = 5;
      auto xs = random_floats(rng, m * heads * 16);
      std::vector<int32_t> pos{0, 1, 7, 300, 32767};
      Tensor x = upload(*be, xs, m, heads * 16);
      be->rope(x, heads, pos.data(), p);
      std::vector<double> ref(xs.begin(), xs.end());
      for (int r = 0; r < m; ++r)
        for (int h = 0; h < heads; ++h)
          for (int i = 0; i < rot / 2; ++i) {
            const int a = neox ? i : 2 * i, b = neox ? i + rot / 2 : 2 * i + 1;
            const double ang = static_cast<float>(pos[r]) * p.inv_freq[i];
            const double c = std::cos(ang) * p.mscale, s = std::sin(ang) * p.mscale;
            const double x0 = xs[r * 48 + h * 16 + a], x1 = xs[r * 48 + h * 16 + b];
            ref[r * 48 + h * 16 + a] = x0 * c - x1 * s;
            ref[r * 48 + h * 16 + b] = x1 * c + x0 * s;
          }
      EXPECT_EQ(check_close(host(*be, x), ref, ones(ref.size()), 1e-6, "rope"), "");
    }
}

TEST(CpuKernels, ActMulAddScaleMatchReference) {
  std::mt19937 rng(23);
  auto be = make_cpu_backend(2);
  const int m = 3, n = 17;
  auto gs = random_floats(rng, m * n, -6.f, 6.f), us = random_floats(rng, m * n);
  Tensor g = upload(*be, gs, m, n), u = upload(*be, us, m, n);
  for (Act a : {Act::SiLU, Act::GeluTanh, Act::Relu2}) {
    Tensor out = poisoned(*be, m, n);
    be->act_mul(a, g, u, out);
    std::vector<double> ref(gs.size()), mag(gs.size());
    for (size_t i = 0; i < gs.size(); ++i) {
      const double x = gs[i];
      const double act = a == Act::SiLU ? x / (1 + std::exp(-x))
                         : a == Act::GeluTanh
                             ? 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)))
                             : (x > 0 ? x * x : 0);
      ref[i] = act * us[i];
      mag[i] = std::fabs(ref[i]) + std::fabs(x * us[i]) * 1e-2;  // 1 + tanh cancels for x << 0
    }
    EXPECT_EQ(check_close(host(*be, out), ref, mag, 1e-5, "act"), "") << int(a);
  }
  be->add(g, u);
  be->scale(g, 0.5f);
  std::vector<double> ref(gs.size());
  for (size_t i = 0; i < gs.size(); ++i) ref[i] = (double(gs[i]) + us[i]) * 0.5;
  EXPECT_EQ(check_close(host(*be, g), ref, ones(ref.size()), 1e-6, "add/scale"), "");
}

// Both tables quantize activations to the same bytes: the documented rule, ties to even.
TEST(CpuKernels, QuantizeQ8FollowsRuleInBothTables) {
  std::mt19937 rng(27);
  const int64_t K = 256;
  auto xs = random_floats(rng, K, -3.f, 3.f);
  for (int i = 0; i < 32; ++i) xs[static_cast<size_t>(32 + i)] = 0.f;              // zero block
  for (int i = 0; i < 32; ++i) xs[static_cast<size_t>(64 + i)] = (i - 16) * 0.5f;  // ties
  xs[64] = 127.f;
  xs[100] = std::nanf("");
  xs[140] = -INFINITY;
  std::vector<std::vector<uint8_t>> outs;
  for (auto* k : kernel_tables()) {
    std::vector<uint8_t> q(static_cast<size_t>(K / 32 * cpu::kQ8ActBlockBytes), 0xAB);
    k->quantize_q8(xs.data(), K, q.data());
    outs.push_back(q);
  }
  for (size_t t = 1; t < outs.size(); ++t) EXPECT_EQ(outs[t], outs[0]);
  const auto& q = outs[0];
  auto scale = [&](int b) {
    float d;
    std::memcpy(&d, q.data() + b * cpu::kQ8ActBlockBytes, 4);
    return d;
  };
  auto val = [&](int b, int i) { return static_cast<int8_t>(q[static_cast<size_t>(b * cpu::kQ8ActBlockBytes + 4 + i)]); };
  EXPECT_EQ(scale(1), 0.f);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(val(1, i), 0);
  EXPECT_EQ(scale(2), 1.f);
  EXPECT_EQ(val(2, 0), 127);
  EXPECT_EQ(val(2, 1), -8);  // -7.5 -> -8
  EXPECT_EQ(val(2, 2), -7);  // -7 stays
  EXPECT_EQ(val(2, 3), -6);  // -6.5 -> -6
  EXPECT_EQ(val(2, 17), 0);  // 0.5 -> 0
  EXPECT_EQ(val(2, 19), 2);  // 1.5 -> 2
  EXPECT_TRUE(std::isnan(scale(3)));
  EXPECT_TRUE(std::isnan(scale(4)));
  std::vector<double> deq, step;
  quantize_like_kernel(xs.data(), K, deq, step);
  for (int b : {0, 5, 6, 7})
    for (int i = 0; i < 32; ++i) {
      EXPECT_EQ(scale(b), static_cast<float>(step[static_cast<size_t>(b * 32)]));
      EXPECT_EQ(val(b, i) * static_cast<double>(scale(b)), deq[static_cast<size_t>(b * 32 + i)]);
    }
}

// A non-finite activation makes its Q8_0 outputs NaN rather than silently finite.
TEST(CpuKernels, Q8MatmulPropagatesNonFinite) {
  std::mt19937 rng(28);
  for (auto* k : kernel_tables()) {
    auto be = cpu::make_cpu_backend_with(1, *k);
    HostWeight hw = make_weight(DType::Q8_0, 3, 64, rng);
    auto w = be->load_weight(hw.view);
    auto xs = random_floats(rng, 2 * 64);
    xs[70] = INFINITY;
    Tensor x = upload(*be, xs, 2, 64), y = poisoned(*be, 2, 3);
    be->matmul(x, *w, nullptr, y);
    auto h = host(*be, y);
    for (int n = 0; n < 3; ++n) {
      EXPECT_TRUE(std::isfinite(h[static_cast<size_t>(n)])) << k->name;
      EXPECT_TRUE(std::isnan(h[static_cast<size_t>(3 + n)])) << k->name;
    }
  }
}

// The AVX-VNNI and plain AVX2 Q8_0 tiles give the same bits (both sum the lanes exactly).
TEST(CpuKernels, Q8VnniMatchesPlainAvx2) {
  if (!cpu::avx2_kernels() || !__builtin_cpu_supports("avxvnni")) GTEST_SKIP() << "no AVX-VNNI";
  std::mt19937 rng(29);
  const int64_t K = 320, N = 23, M = 9;
  HostWeight hw = make_weight(DType::Q8_0, N, K, rng);
  hw.bytes[2] = 0x80;  // a -128 weight, the largest |w| the sign trick must handle
  auto xs = random_floats(rng, static_cast<size_t>(M * K));
  const int64_t ldxq = K / 32 * cpu::kQ8ActBlockBytes;
  std::vector<uint8_t> xq(static_cast<size_t>(M * ldxq));
  for (int64_t r = 0; r < M; ++r) cpu::avx2_kernels()->quantize_q8(xs.data() + r * K, K, xq.data() + r * ldxq);
  std::vector<float> a(static_cast<size_t>(M * N), 1.f), b(a.size(), 2.f);
  cpu::MatmulBlock blk{xs.data(), K, xq.data(), ldxq,
                       cpu::WeightRows{hw.bytes.data(), DType::Q8_0, K, dtype_row_bytes(DType::Q8_0, K)},
                       nullptr, a.data(), N};
  cpu::matmul_q8_vnni(blk, 0, M, 0, N);
  blk.y = b.data();
  cpu::matmul_q8_avx2_plain(blk, 0, M, 0, N);
  EXPECT_TRUE(same_bits(a.data(), b.data(), M * N));
}

// The AVX-512 Q8_0 tile on -128 weights and an odd block count: exact against float64, and
// the same bits row by row (streamed) as in one 12-row call (unpacked panels).
TEST(CpuKernels, Q8Avx512Minus128OddBlocks) {
  const cpu::CpuKernels* k = cpu::avx512_kernels();
  if (!k) GTEST_SKIP() << "no AVX-512 VNNI";
  std::mt19937 rng(30);
  const int64_t K = 7 * 32, N = 10, M = 12;
  HostWeight hw = make_weight(DType::Q8_0, N, K, rng);
  for (size_t i = 2; i < hw.bytes.size(); i += 5)
    if ((i % kQ8BlockBytes) >= 2) hw.bytes[i] = 0x80;
  auto xs = random_floats(rng, static_cast<size_t>(M * K));
  const int64_t ldxq = K / 32 * cpu::kQ8ActBlockBytes;
  std::vector<uint8_t> xq(static_cast<size_t>(M * ldxq));
  for (int64_t r = 0; r < M; ++r) k->quantize_q8(xs.data() + r * K, K, xq.data() + r * ldxq);
  std::vector<float> all(static_cast<size_t>(M * N)), one(all.size());
  cpu::MatmulBlock blk{xs.data(), K, xq.data(), ldxq,
                       cpu::WeightRows{hw.bytes.data(), DType::Q8_0, K, dtype_row_bytes(DType::Q8_0, K)},
                       nullptr, all.data(), N};
  k->matmul(blk, 0, M, 0, N);
  blk.y = one.data();
  for (int64_t r = 0; r < M; ++r) k->matmul(blk, r, r + 1, 0, N);
  EXPECT_TRUE(same_bits(all.data(), one.data(), M * N));
  std::vector<double> xd, step;
  for (int64_t r = 0; r < M; ++r) {
    quantize_like_kernel(xs.data() + r * K, K, xd, step);
    for (int64_t n = 0; n < N; ++n) {
      double ref = 0, mag = 0;
      for (int64_t i = 0; i < K; ++i) {
        ref += xd[static_cast<size_t>(i)] * hw.at(n, i);
        mag += std::fabs(xd[static_cast<size_t>(i)] * hw.at(n, i));
      }
      EXPECT_NEAR(all[static_cast<size_t>(r * N + n)], ref, 1e-5 * mag) << r << " " << n;
    }
  }
}

TEST(CpuKernels, EmbedEveryDtype) {
  std::mt19937 rng(24);
  auto be = make_cpu_backend(2);
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::Q8_0}) {
    HostWeight tab = make_weight(t, 10, 64, rng);
    auto w = be->load_weight(tab.view);
    std::vector<int32_t> ids{3, 0, 9, 3};
    Tensor out = poisoned(*be, 4, 64);
    be->embed(*w, ids.data(), 4, out);
    auto h = host(*be, out);
    for (int i = 0; i < 4; ++i)
      for (int c = 0; c < 64; ++c) ASSERT_EQ(h[i * 64 + c], float(tab.at(ids[i], c))) << dtype_name(t);
    std::vector<int32_t> bad{10};
    EXPECT_THROW(be->embed(*w, bad.data(), 1, out.slice_rows(0, 1)), Error);
  }
}

TEST(CpuKernels, TopkSoftmaxRanksTiesAndNorm) {
  auto be = make_cpu_backend(1);
  std::vector<float> l{1.f, 3.f, 3.f, -2.f, 0.5f, 2.f};
  Tensor t = upload(*be, l, 1, 6);
  for (bool norm : {false, true}) {
    int32_t idx[3];
    float w[3];
    be->topk_softmax(t, 3, norm, idx, w);
    EXPECT_EQ(idx[0], 1);
    EXPECT_EQ(idx[1], 2);
    EXPECT_EQ(idx[2], 5);
    double sum = 0;
    for (float v : l) sum += std::exp(double(v) - 3.0);
    const double ksum = (2 + std::exp(-1.0)) / sum;
    for (int j = 0; j < 3; ++j) {
      double want = std::exp(double(l[idx[j]]) - 3.0) / sum;
      if (norm) want /= ksum;
      EXPECT_NEAR(w[j], want, 1e-6);
    }
  }
  int32_t i1;
  float w1;
  EXPECT_THROW(be->topk_softmax(t, 7, true, &i1, &w1), Error);
  EXPECT_THROW(be->topk_softmax(t, 0, true, &i1, &w1), Error);
}

TEST(CpuKernels, GatherAndScatterInOrder) {
  auto be = make_cpu_backend(2);
  std::vector<float> src{1, 2, 3, 4, 5, 6};  // 3 x 2
  Tensor s = upload(*be, src, 3, 2);
  Tensor d = poisoned(*be, 4, 2);
  std::vector<int32_t> rows{2, 0, 2, 1};
  be->gather_rows(s, rows.data(), 4, d);
  EXPECT_EQ(host(*be, d), (std::vector<float>{5, 6, 1, 2, 5, 6, 3, 4}));
  Tensor acc = be->alloc(3, 2);
  std::vector<float> w{1.f, 0.5f, 2.f, -1.f};
  be->scatter_add_scaled(acc, d, rows.data(), w.data(), 4);
  EXPECT_EQ(host(*be, acc), (std::vector<float>{0.5f, 1.f, -3.f, -4.f, 15.f, 18.f}));
  std::vector<int32_t> bad{3};
  EXPECT_THROW(be->gather_rows(s, bad.data(), 1, d.slice_rows(0, 1)), Error);
  EXPECT_THROW(be->scatter_add_scaled(acc, d.slice_rows(0, 1), bad.data(), w.data(), 1), Error);
}

TEST(CpuKernels, KvStoreWritesPageSlots) {
  auto be = make_cpu_backend(1);
  auto kv = be->alloc_kv(2, 4, 3, 2, 4);
  EXPECT_EQ(kv->bytes(), 2ull * 2 * 4 * 3 * 2 * 4 * 4);
  RowLayout lay;
  lay.seq_pages = {{2, 0}, {3}};
  lay.pos = {4, 1};
  lay.seq = {0, 1};
  std::vector<float> ks(16), vs(16);
  std::iota(ks.begin(), ks.end(), 1.f);
  std::iota(vs.begin(), vs.end(), 100.f);
  Tensor k = upload(*be, ks, 2, 8), v = upload(*be, vs, 2, 8);
  be->kv_store(*kv, 1, k, v, lay);
  auto& c = dynamic_cast<cpu::CpuKv&>(*kv);
  EXPECT_TRUE(same_bits(c.k_at(1, 0, 1), ks.data(), 8));      // pos 4 -> page idx 1 (id 0), slot 1
  EXPECT_TRUE(same_bits(c.v_at(1, 3, 1), vs.data() + 8, 8));  // seq 1 pos 1 -> page 3, slot 1
  lay.pos = {6, 1};  // needs a third page seq 0 lacks
  EXPECT_THROW(be->kv_store(*kv, 1, k, v, lay), Error);
  lay.pos = {4, 1};
  EXPECT_THROW(be->kv_store(*kv, 2, k, v, lay), Error);
  lay.seq_pages[1] = {4};
  EXPECT_THROW(be->kv_store(*kv, 1, k, v, lay), Error);
}

TEST(CpuKernels, BadShapesThrow) {
  std::mt19937 rng(25);
  auto be = make_cpu_backend(2);
  HostWeight hw = make_weight(DType::BF16, 5, 8, rng);
  auto w = be->load_weight(hw.view);
  Tensor x = be->alloc(2, 8), y = be->alloc(2, 5), bad = be->alloc(2, 4);
  EXPECT_NO_THROW(be->matmul(x, *w, nullptr, y));
  EXPECT_THROW(be->matmul(bad, *w, nullptr, y), Error);
  EXPECT_THROW(be->matmul(x, *w, nullptr, bad), Error);
  EXPECT_THROW(be->matmul(x, *w, w.get(), y), Error);  // bias of the wrong shape
  EXPECT_THROW(be->rmsnorm(x, *w, 1e-6f, false, x), Error);
  EXPECT_THROW(be->act_mul(Act::SiLU, x, y, x), Error);
  EXPECT_THROW(be->add(x, y), Error);
  RopeParams p;
  p.head_dim = 4;
  p.rot_dim = 4;
  p.inv_freq = {1.f};
  int32_t pos[2] = {0, 1};
  EXPECT_THROW(be->rope(x, 2, pos, p), Error);
  auto kv = be->alloc_kv(1, 2, 4, 1, 4);
  RowLayout lay;
  lay.seq_pages = {{0, 1}};
  lay.pos = {0, 1};
  lay.seq = {0, 0};
  AttnParams ap;
  ap.n_heads = 2;
  ap.n_kv_heads = 1;
  ap.head_dim = 4;
  ap.scale = 0.5f;
  EXPECT_NO_THROW(be->attention(x, x, *kv, 0, lay, ap));
  ap.n_kv_heads = 2;
  EXPECT_THROW(be->attention(x, x, *kv, 0, lay, ap), Error);
  ap.n_kv_heads = 1;
  lay.pos = {0, 8};
  EXPECT_THROW(be->attention(x, x, *kv, 0, lay, ap), Error);
  lay.pos = {0};
  EXPECT_THROW(be->attention(x, x, *kv, 0, lay, ap), Error);
  EXPECT_THROW(be->alloc(-1, 4), Error);
  EXPECT_THROW(be->alloc_kv(1, 0, 4, 1, 4), Error);
}

TEST(CpuKernels, LoadWeightChecksAndMemoryAccounting) {
  std::mt19937 rng(26);
  auto be = make_cpu_backend(1);
  HostWeight hw = make_weight(DType::F32, 4, 8, rng);
  TensorView v = hw.view;
  v.dtype = DType::I32;
  try {
    be->load_weight(v);
    FAIL() << "I32 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("test.weight"), std::string::npos);
  }
  v = hw.view;
  v.nbytes -= 4;
  EXPECT_THROW(be->load_weight(v), Error);
  v = hw.view;
  v.shape = {2, 2, 8};
  EXPECT_THROW(be->load_weight(v), Error);
  HostWeight q = make_weight(DType::Q8_0, 2, 64, rng);
  q.view.shape = {4, 32};
  EXPECT_NO_THROW(be->load_weight(q.view));
  q.view.shape = {8, 16};  // not a whole number of blocks per row
  EXPECT_THROW(be->load_weight(q.view), Error);
  auto w = be->load_weight(hw.view);
  EXPECT_EQ(static_cast<const void*>(cpu::as_cpu(*w, "t").data), hw.bytes.data());  // no copy

  EXPECT_EQ(be->device_bytes_in_use(), 0u);
  Tensor t = be->alloc(3, 5);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data) % 64, 0u);
  for (float f : host(*be, t)) EXPECT_EQ(f, 0.f);
  EXPECT_EQ(be->device_bytes_in_use(), 60u);
  {
    auto kv = be->alloc_kv(1, 2, 4, 1, 4);
    EXPECT_EQ(be->device_bytes_in_use(), 60u + kv->bytes());
  }
  Tensor slice = t.slice_rows(1, 1);
  EXPECT_THROW(be->free(slice), Error);
  be->free(t);
  EXPECT_EQ(t.data, nullptr);
  EXPECT_EQ(be->device_bytes_in_use(), 0u);
}

}  // namespace
}  // namespace tf::cputest
