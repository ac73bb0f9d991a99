// Batch and thread invariance of CPU kernels, and planted faults the same gates must catch.
#include <gtest/gtest.h>

#include "cpu_test_gates.h"

namespace tf::cputest {
namespace {

struct Backends {
  std::vector<std::unique_ptr<Backend>> own;
  std::vector<Backend*> ptrs;
  Backends(const cpu::CpuKernels& k, std::vector<int> threads) {
    for (int t : threads) {
      own.push_back(cpu::make_cpu_backend_with(t, k));
      ptrs.push_back(own.back().get());
    }
  }
};

std::vector<int64_t> every_m(int64_t hi) {
  std::vector<int64_t> v;
  for (int64_t m = 1; m <= hi; ++m) v.push_back(m);
  return v;
}

TEST(CpuInvariance, MatmulEveryBatchSizeBf16) {
  for (auto* k : kernel_tables()) {
    Backends b(*k, {1, 2, 3});
    EXPECT_EQ(matmul_gate(real_matmul(), b.ptrs, DType::BF16, 67, 37, 70, every_m(64), true, 1), "")
        << k->name;
  }
}

TEST(CpuInvariance, MatmulAllDtypesAndShapes) {
  const std::vector<int64_t> ms{1, 2, 3, 4, 5, 7, 8, 9, 13, 31, 64, 65};
  struct Case { DType t; int64_t K, N; };
  const Case cases[] = {{DType::F32, 8, 1},   {DType::F32, 33, 3},   {DType::F16, 100, 17},
                        {DType::BF16, 256, 100}, {DType::Q8_0, 64, 17}, {DType::Q8_0, 96, 100},
                        {DType::F16, 7, 3},   {DType::BF16, 1, 5}};
  for (auto* k : kernel_tables()) {
    Backends b(*k, {1, 2, 3});
    for (const Case& c : cases)
      EXPECT_EQ(matmul_gate(real_matmul(), b.ptrs, c.t, c.K, c.N, 66, ms, c.N % 2 == 1, 2), "")
          << k->name << " " << dtype_name(c.t);
  }
}

TEST(CpuInvariance, MatmulLargeSplitsAcrossThreads) {
  for (auto* k : kernel_tables()) {
    Backends b(*k, {1, 2, 3});
    EXPECT_EQ(matmul_gate(real_matmul(), b.ptrs, DType::BF16, 520, 300, 130, {1, 3, 8, 64, 129}, false, 3), "")
        << k->name;
  }
}

// A matmul that reduces K in another order when m > 1 is within tolerance but not invariant.
TEST(CpuInvariance, PlantedMatmulOrderFaultIsCaught) {
  MatmulFn bad = [](Backend& be, const Tensor& x, const Weight& w, const Weight* bias, Tensor y) {
    be.matmul(x, w, bias, y);
    if (x.rows == 1) return;
    const auto& cw = cpu::as_cpu(w, "bad");
    std::vector<float> wr(static_cast<size_t>(w.cols));
    for (int64_t n = 0; n < w.rows; ++n) {
      cpu::decode_row(cw.rows_view(), n, 0, w.cols, wr.data());
      for (int64_t r = 0; r < x.rows; ++r) {
        float s = 0;
        for (int64_t k = w.cols - 1; k >= 0; --k) s += x.row(r)[k] * wr[static_cast<size_t>(k)];
        y.row(r)[n] = s;
      }
    }
  };
  Backends b(cpu::best_kernels(), {1});
  const std::string e = matmul_gate(bad, b.ptrs, DType::F32, 200, 9, 20, {1, 2, 5}, false, 4);
  EXPECT_NE(e.find("differs"), std::string::npos) << e;
}

TEST(CpuInvariance, MatmulQ8LargeSplitsAcrossThreads) {
  for (auto* k : kernel_tables()) {
    Backends b(*k, {1, 2, 3});
    EXPECT_EQ(matmul_gate(real_matmul(), b.ptrs, DType::Q8_0, 512, 300, 130, {1, 2, 4, 9, 64, 129}, true, 16), "")
        << k->name;
  }
}

// A Q8_0 matmul that sums its blocks in reverse when m > 1 is within tolerance but not invariant.
TEST(CpuInvariance, PlantedQ8BlockOrderFaultIsCaught) {
  MatmulFn bad = [](Backend& be, const Tensor& x, const Weight& w, const Weight* bias, Tensor y) {
    be.matmul(x, w, bias, y);
    if (x.rows == 1) return;
    const auto& cw = cpu::as_cpu(w, "bad");
    std::vector<double> xd, step;
    for (int64_t r = 0; r < x.rows; ++r) {
      quantize_like_kernel(x.row(r), x.cols, xd, step);
      for (int64_t n = 0; n < w.rows; ++n) {
        const uint8_t* wr = cw.data + n * cw.row_bytes;
        float s = 0;
        for (int64_t bk = x.cols / kQ8Block - 1; bk >= 0; --bk) {
          uint16_t h;
          std::memcpy(&h, wr + bk * kQ8BlockBytes, 2);
          const float dx = static_cast<float>(step[static_cast<size_t>(bk * kQ8Block)]);
          int32_t isum = 0;
          for (int i = 0; i < kQ8Block; ++i)
            isum += static_cast<int8_t>(wr[bk * kQ8BlockBytes + 2 + i]) *
                    static_cast<int32_t>(std::lround(xd[static_cast<size_t>(bk * kQ8Block + i)] / dx));
          s += f16_to_f32(h) * dx * static_cast<float>(isum);
        }
        y.row(r)[n] = s;
      }
    }
  };
  Backends b(cpu::best_kernels(), {1});
  const std::string e = matmul_gate(bad, b.ptrs, DType::Q8_0, 256, 9, 20, {1, 2, 5}, false, 17);
  EXPECT_NE(e.find("differs"), std::string::npos) << e;
}

// A Q8_0 matmul on unquantized activations for m > 1 passes the loose bound, not the reference.
TEST(CpuInvariance, PlantedQ8SkippedQuantizationIsCaught) {
  MatmulFn bad = [](Backend& be, const Tensor& x, const Weight& w, const Weight* bias, Tensor y) {
    be.matmul(x, w, bias, y);
    const auto& cw = cpu::as_cpu(w, "bad");
    std::vector<float> wr(static_cast<size_t>(w.cols));
    for (int64_t n = 0; n < w.rows; ++n) {
      cpu::decode_row(cw.rows_view(), n, 0, w.cols, wr.data());
      for (int64_t r = 0; r < x.rows; ++r) {
        double s = 0;
        for (int64_t k = 0; k < w.cols; ++k) s += double(x.row(r)[k]) * wr[static_cast<size_t>(k)];
        y.row(r)[n] = static_cast<float>(s);
      }
    }
  };
  Backends b(cpu::best_kernels(), {1});
  const std::string e = matmul_gate(bad, b.ptrs, DType::Q8_0, 256, 9, 20, {1, 2}, false, 18);
  EXPECT_NE(e.find("want"), std::string::npos) << e;
  EXPECT_EQ(e.find("quantization bound"), std::string::npos) << e;
}

// A matmul that drops the last k is invariant but fails the reference.
TEST(CpuInvariance, PlantedMatmulDroppedTermIsCaught) {
  MatmulFn bad = [](Backend& be, const Tensor& x, const Weight& w, const Weight* bias, Tensor y) {
    Tensor xs = be.alloc(x.rows, x.cols);
    std::vector<float> h(static_cast<size_t>(x.rows * x.cols));
    be.to_host(x, h.data());
    for (int64_t r = 0; r < x.rows; ++r) h[static_cast<size_t>(r * x.cols + x.cols - 1)] = 0;
    be.from_host(h.data(), xs);
    be.matmul(xs, w, bias, y);
    be.free(xs);
  };
  Backends b(cpu::best_kernels(), {1});
  const std::string e = matmul_gate(bad, b.ptrs, DType::BF16, 40, 5, 6, {1, 2}, false, 5);
  EXPECT_NE(e.find("want"), std::string::npos) << e;
}

AttnParams attn(int heads, int kv_heads, int hd, int window, float softcap) {
  AttnParams p;
  p.n_heads = heads;
  p.n_kv_heads = kv_heads;
  p.head_dim = hd;
  p.scale = 1.0f / std::sqrt(static_cast<float>(hd));
  p.sliding_window = window;
  p.softcap = softcap;
  return p;
}

TEST(CpuInvariance, AttentionStoresQueriesThreads) {
  for (auto* k : kernel_tables()) {
    Backends b(*k, {1, 2, 3});
    EXPECT_EQ(attention_gate(real_attention(), b.ptrs, 37, attn(4, 2, 16, 0, 0), 4, 6), "") << k->name;
    EXPECT_EQ(attention_gate(real_attention(), b.ptrs, 23, attn(6, 1, 13, 0, 0), 8, 7), "") << k->name;
    EXPECT_EQ(attention_gate(real_attention(), b.ptrs, 41, attn(4, 4, 8, 9, 0), 4, 8), "") << k->name;
    EXPECT_EQ(attention_gate(real_attention(), b.ptrs, 30, attn(2, 1, 32, 0, 5.0f), 16, 9), "") << k->name;
  }
}

TEST(CpuInvariance, PlantedAttentionSkippedKeyIsCaught) {
  AttnFn bad = [](Backend& be, const Tensor& q, Tensor out, const KvStorage& kv, int layer,
                  const RowLayout& rows, const AttnParams& p) {
    RowLayout r = rows;
    for (auto& pos : r.pos) pos = std::max(0, pos - 1);  // the row's own key is skipped
    be.attention(q, out, kv, layer, r, p);
  };
  Backends b(cpu::best_kernels(), {1});
  const std::string e = attention_gate(bad, b.ptrs, 12, attn(2, 1, 8, 0, 0), 4, 10);
  EXPECT_NE(e.find("want"), std::string::npos) << e;
}

// Row-wise ops: each row of a batch equals the same row computed alone, at every thread count.
using RowOp = std::function<void(Backend&, const Tensor& in, Tensor out, const int32_t* pos)>;

std::string rowwise_gate(const RowOp& op, const std::vector<Backend*>& bes, int64_t M, int64_t C,
                         uint32_t seed) {
  std::mt19937 rng(seed);
  auto xs = random_floats(rng, static_cast<size_t>(M * C), -3.f, 3.f);
  std::vector<int32_t> pos(static_cast<size_t>(M));
  for (auto& p : pos) p = static_cast<int32_t>(rng() % 5000);
  std::vector<float> first;
  for (Backend* be : bes) {
    Tensor x = upload(*be, xs, M, C), y = poisoned(*be, M, C);
    op(*be, x, y, pos.data());
    auto full = host(*be, y);
    for (float v : full)
      if (std::isnan(v)) return be->name() + ": output left unwritten";
    if (first.empty()) first = full;
    if (!same_bits(first.data(), full.data(), M * C)) return "row op differs between thread counts";
    for (int64_t m : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{17}, M - 1}) {
      const int64_t off = (m * 5) % (M - m + 1);
      Tensor ym = poisoned(*be, m, C);
      op(*be, x.slice_rows(off, m), ym, pos.data() + off);
      auto part = host(*be, ym);
      be->free(ym);
      if (!same_bits(part.data(), full.data() + off * C, m * C))
        return be->name() + ": rows differ in a batch of " + std::to_string(m);
    }
    be->free(x);
    be->free(y);
  }
  return "";
}

TEST(CpuInvariance, RowOpsRmsnormRopeAct) {
  std::mt19937 rng(11);
  HostWeight g = make_weight(DType::BF16, 1, 4100, rng, true);
  RopeParams rp;
  rp.head_dim = 64;
  rp.rot_dim = 48;
  for (int i = 0; i < 24; ++i) rp.inv_freq.push_back(std::pow(10000.f, -2.f * i / 48.f));
  for (auto* k : kernel_tables()) {
    Backends b(*k, {1, 2, 3});
    std::vector<std::unique_ptr<Weight>> gw;
    for (Backend* be : b.ptrs) gw.push_back(be->load_weight(g.view));
    auto gate_of = [&](Backend& be) -> const Weight& {
      for (size_t i = 0; i < b.ptrs.size(); ++i)
        if (b.ptrs[i] == &be) return *gw[i];
      throw Error("no weight");
    };
    EXPECT_EQ(rowwise_gate([&](Backend& be, const Tensor& x, Tensor y, const int32_t*) {
                be.rmsnorm(x, gate_of(be), 1e-6f, true, y);
              }, b.ptrs, 64, 4100, 12), "");
    EXPECT_EQ(rowwise_gate([&](Backend& be, const Tensor& x, Tensor y, const int32_t* pos) {
                std::vector<float> h(static_cast<size_t>(x.rows * x.cols));
                be.to_host(x, h.data());
                be.from_host(h.data(), y);
                be.rope(y, 64, pos, rp);
              }, b.ptrs, 64, 64 * 64, 13), "");
    for (Act a : {Act::SiLU, Act::GeluTanh, Act::Relu2})
      EXPECT_EQ(rowwise_gate([&](Backend& be, const Tensor& x, Tensor y, const int32_t*) {
                  be.act_mul(a, x, x, y);
                }, b.ptrs, 64, 3000, 14), "");
  }
}

// A norm whose reduction order changes with the batch size must fail the row-wise gate.
TEST(CpuInvariance, PlantedRmsnormFaultIsCaught) {
  RowOp bad = [](Backend& be, const Tensor& x, Tensor y, const int32_t*) {
    std::vector<float> h(static_cast<size_t>(x.rows * x.cols));
    be.to_host(x, h.data());
    for (int64_t r = 0; r < x.rows; ++r) {
      float ss = 0;
      for (int64_t i = 0; i < x.cols; ++i) {
        const int64_t j = x.rows == 1 ? i : x.cols - 1 - i;
        ss += h[static_cast<size_t>(r * x.cols + j)] * h[static_cast<size_t>(r * x.cols + j)];
      }
      const float inv = 1.0f / std::sqrt(ss / x.cols + 1e-6f);
      for (int64_t i = 0; i < x.cols; ++i) h[static_cast<size_t>(r * x.cols + i)] *= inv;
    }
    be.from_host(h.data(), y);
  };
  Backends b(cpu::best_kernels(), {1});
  EXPECT_NE(rowwise_gate(bad, b.ptrs, 64, 4100, 15), "");
}

}  // namespace
}  // namespace tf::cputest
