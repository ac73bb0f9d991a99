// --matmul-input bf16: a matmul takes x rounded to bf16, on every path of the backend under test
// (TF_TEST_DEVICE=cuda: the GPU's few-row, warpgroup and grouped kernels; default: the CPU).
#include <gtest/gtest.h>

#include <cstdlib>

#include "cpu_test_gates.h"

namespace tf::cputest {
namespace {

std::unique_ptr<Backend> device_backend() {
  const char* device = std::getenv("TF_TEST_DEVICE");
  return make_backend(device && *device ? device : "cpu", 2);
}

std::vector<float> rounded(std::vector<float> v) {
  for (float& f : v) f = bf16_to_f32(f32_to_bf16(f));
  return v;
}

// y = x w^T + b on be at mode mi, back on the host.
std::vector<float> run_matmul(Backend& be, MatmulInput mi, const std::vector<float>& xs, int64_t M,
                              int64_t K, const Weight& w, const Weight& b, int64_t N) {
  be.set_matmul_input(mi);
  Tensor x = upload(be, xs, M, K), y = poisoned(be, M, N);
  be.matmul(x, w, &b, y);
  auto out = host(be, y);
  be.free(x);
  be.free(y);
  return out;
}

TEST(MatmulInput, ParsesItsTwoNames) {
  EXPECT_EQ(parse_matmul_input("f32"), MatmulInput::F32);
  EXPECT_EQ(parse_matmul_input("bf16"), MatmulInput::BF16);
  EXPECT_STREQ(matmul_input_name(MatmulInput::BF16), "bf16");
  EXPECT_STREQ(matmul_input_name(MatmulInput::F32), "f32");
  try {
    parse_matmul_input("fp16");
    FAIL() << "fp16 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expected f32 or bf16"), std::string::npos) << e.what();
  }
}

// BF16 and F16 weights: bf16 input gives the bits of whole input already rounded, at every row
// count (few rows, decode-round tiles, prefill tiles), and differs from whole unrounded input.
// Q8_0 and F32 weights: the mode changes nothing.
TEST(MatmulInput, Bf16RoundsXBeforeTheMatmul) {
  auto be = device_backend();
  struct Case { DType t; int64_t K, N; };
  std::vector<Case> cases{{DType::BF16, 512, 300}, {DType::BF16, 4096, 200}, {DType::F16, 520, 136},
                          {DType::Q8_0, 256, 96},  {DType::F32, 130, 40}};
  // On a GPU, enough column tiles for the warpgroup kernels at 17..130 rows.
  if (be->device_memory_total() > 0) cases.push_back({DType::BF16, 1024, 8448});
  for (const Case& c : cases) {
    std::mt19937 rng(static_cast<uint32_t>(c.K + c.N));
    HostWeight hw = make_weight(c.t, c.N, c.K, rng);
    HostWeight hb = make_weight(DType::F32, 1, c.N, rng, true);
    auto w = be->load_weight(hw.view);
    auto b = be->load_weight(hb.view);
    for (int64_t M : {1, 5, 16, 17, 64, 130}) {
      const std::string what = std::string(dtype_name(c.t)) + " K=" + std::to_string(c.K) + " N=" +
                               std::to_string(c.N) + " M=" + std::to_string(M) + " on " + be->name();
      auto xs = random_floats(rng, static_cast<size_t>(M * c.K));
      const auto whole = run_matmul(*be, MatmulInput::F32, xs, M, c.K, *w, *b, c.N);
      const auto pre = run_matmul(*be, MatmulInput::F32, rounded(xs), M, c.K, *w, *b, c.N);
      const auto bf = run_matmul(*be, MatmulInput::BF16, xs, M, c.K, *w, *b, c.N);
      const bool rounds = c.t == DType::BF16 || c.t == DType::F16;
      const auto& want = rounds ? pre : whole;
      EXPECT_TRUE(same_bits(bf.data(), want.data(), M * c.N)) << what;
      if (rounds) {
        EXPECT_FALSE(same_bits(bf.data(), whole.data(), M * c.N)) << what << ": x was not rounded";
      }
    }
  }
  be->set_matmul_input(MatmulInput::F32);
}

// Several matmuls of one x in one call follow the mode as single matmuls do.
TEST(MatmulInput, MatmulManyFollowsIt) {
  auto be = device_backend();
  std::mt19937 rng(7);
  const int64_t K = 1024, N1 = 384, N2 = 128;
  HostWeight h1 = make_weight(DType::BF16, N1, K, rng), h2 = make_weight(DType::BF16, N2, K, rng);
  auto w1 = be->load_weight(h1.view), w2 = be->load_weight(h2.view);
  for (int64_t M : {3, 12, 40}) {
    auto xs = random_floats(rng, static_cast<size_t>(M * K));
    be->set_matmul_input(MatmulInput::BF16);
    Tensor x = upload(*be, xs, M, K), y1 = poisoned(*be, M, N1), y2 = poisoned(*be, M, N2);
    be->matmul_many(x, {{w1.get(), nullptr, y1}, {w2.get(), nullptr, y2}});
    const auto g1 = host(*be, y1), g2 = host(*be, y2);
    be->set_matmul_input(MatmulInput::F32);
    Tensor xr = upload(*be, rounded(xs), M, K), r1 = poisoned(*be, M, N1), r2 = poisoned(*be, M, N2);
    be->matmul(xr, *w1, nullptr, r1);
    be->matmul(xr, *w2, nullptr, r2);
    EXPECT_TRUE(same_bits(g1.data(), host(*be, r1).data(), M * N1)) << "M=" << M;
    EXPECT_TRUE(same_bits(g2.data(), host(*be, r2).data(), M * N2)) << "M=" << M;
    for (Tensor* t : {&x, &y1, &y2, &xr, &r1, &r2}) be->free(*t);
  }
}

}  // namespace
}  // namespace tf::cputest
