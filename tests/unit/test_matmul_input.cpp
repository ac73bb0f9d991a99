// --matmul-input bf16: a matmul takes x rounded to bf16, on every path of the backend under test
// (TF_TEST_DEVICE=cuda: the GPU's few-row, warpgroup and grouped kernels; default: the CPU).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <functional>
#include <optional>

#include "cpu_test_gates.h"

namespace tf::cputest {
namespace {

std::unique_ptr<Backend> device_backend() {
  const char* device = std::getenv("TF_TEST_DEVICE");
  return make_backend(device && *device ? device : "cpu", 2);
}

std::vector<float> rounded(std::vector<float> v) {
  for (float& f : v) f = round_to_bf16(f);
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

// In bf16 mode a norm, act_mul or mul_sigmoid may leave its output's bf16 plane for the next
// matmul: that matmul gives the bits it gives on the same values uploaded fresh, and never a plane
// that a later write to the tensor (an upload, a kernel, another norm's plane) has made stale.
TEST(MatmulInput, PlanesLeftByTheWriterGiveTheBitsOfAFreshTensor) {
  auto be = device_backend();
  std::mt19937 rng(11);
  const int64_t K = 1024, N = 384;
  HostWeight hw = make_weight(DType::BF16, N, K, rng), hg = make_weight(DType::F32, 1, K, rng, true);
  auto w = be->load_weight(hw.view), g = be->load_weight(hg.view);
  be->set_matmul_input(MatmulInput::BF16);
  for (int64_t M : {5, 12, 40, 130}) {
    Tensor x = upload(*be, random_floats(rng, static_cast<size_t>(M * K)), M, K);
    Tensor a = upload(*be, random_floats(rng, static_cast<size_t>(M * K)), M, K);
    Tensor u = upload(*be, random_floats(rng, static_cast<size_t>(M * K)), M, K);
    Tensor h = poisoned(*be, M, K), h2 = poisoned(*be, M, K);
    const auto later = random_floats(rng, static_cast<size_t>(M * K));
    // write() writes t; then the matmuls of t (two in one matmul_many call) give the bits of t's
    // values uploaded fresh. Their outputs are made first: an upload is a write too.
    auto run = [&](const Tensor& t, const std::string& what, const std::function<void()>& write) {
      Tensor y1 = poisoned(*be, M, N), y2 = poisoned(*be, M, N), yf = poisoned(*be, M, N);
      write();
      be->matmul_many(t, {{w.get(), nullptr, y1}, {w.get(), nullptr, y2}});
      Tensor fresh = upload(*be, host(*be, t), M, K);
      be->matmul(fresh, *w, nullptr, yf);
      const auto want = host(*be, yf);
      const std::string m = "M=" + std::to_string(M) + " " + what + " on " + be->name();
      EXPECT_TRUE(same_bits(host(*be, y1).data(), want.data(), M * N)) << m;
      EXPECT_TRUE(same_bits(host(*be, y2).data(), want.data(), M * N)) << m << " (second output)";
      for (Tensor* v : {&y1, &y2, &yf, &fresh}) be->free(*v);
    };
    run(h, "after rmsnorm", [&] { be->rmsnorm(x, *g, 1e-5f, false, h); });
    run(h, "after add_rmsnorm", [&] { be->add_rmsnorm(x, a, *g, 1e-5f, true, h); });
    run(h, "after act_mul", [&] { be->act_mul(Act::SiLU, x, u, h); });
    run(h, "after gated_rmsnorm", [&] { be->gated_rmsnorm(x, Cols{u, 0}, *g, 256, 1e-5f, false, h); });
    run(h, "after mul_sigmoid", [&] {
      be->copy(x, h);
      be->mul_sigmoid(h, Cols{u, 0});
    });
    run(h, "after an upload over the norm's output", [&] {
      be->rmsnorm(x, *g, 1e-5f, false, h);
      be->from_host(later.data(), h);
    });
    run(h, "after an add over the norm's output", [&] {
      be->rmsnorm(x, *g, 1e-5f, false, h);
      be->add(h, a);
    });
    run(h, "after another norm's plane", [&] {
      be->rmsnorm(x, *g, 1e-5f, false, h);
      be->rmsnorm(a, *g, 1e-5f, false, h2);
    });
    run(h2, "the other norm's output, after a copy over it", [&] {
      be->rmsnorm(a, *g, 1e-5f, false, h2);
      be->copy(h, h2);
    });
    for (Tensor* v : {&x, &a, &u, &h, &h2}) be->free(*v);
  }
  be->set_matmul_input(MatmulInput::F32);
}

// Attention in bf16 mode: the order rule's splits of 64 keys with q, k, v and the weights rounded
// to bf16, here in double beside an independent walk; rows 0..L-1 of one sequence.
std::vector<double> attention_bf16_reference(const std::vector<float>& q, const std::vector<float>& k,
                                             const std::vector<float>& v, int L, const AttnParams& p) {
  const int hd = p.head_dim, qw = p.n_heads * hd, kvw = p.n_kv_heads * hd, group = p.n_heads / p.n_kv_heads;
  auto r = [](float x) { return static_cast<double>(round_to_bf16(x)); };
  std::vector<double> out(static_cast<size_t>(L) * qw);
  for (int row = 0; row < L; ++row)
    for (int h = 0; h < p.n_heads; ++h) {
      const size_t qo = static_cast<size_t>(row) * qw + static_cast<size_t>(h) * hd;
      const size_t ko = static_cast<size_t>(h / group) * hd;
      double m = 0, l = 0;
      std::vector<double> acc(static_cast<size_t>(hd), 0.0);
      for (int s = 0; s <= row / 64; ++s) {
        const int lo = 64 * s, hi = std::min(row, 64 * s + 63);
        std::vector<double> sc;
        double mx = -INFINITY;
        for (int i = lo; i <= hi; ++i) {
          double dot = 0;
          for (int d = 0; d < hd; ++d) dot += r(q[qo + d]) * r(k[static_cast<size_t>(i) * kvw + ko + d]);
          sc.push_back(dot * p.scale);
          mx = std::max(mx, sc.back());
        }
        double ls = 0;
        std::vector<double> as(static_cast<size_t>(hd), 0.0);
        for (int i = lo; i <= hi; ++i) {
          const double w = r(static_cast<float>(std::exp(sc[static_cast<size_t>(i - lo)] - mx)));
          ls += w;
          for (int d = 0; d < hd; ++d) as[static_cast<size_t>(d)] += w * r(v[static_cast<size_t>(i) * kvw + ko + d]);
        }
        const double mn = s == 0 ? mx : std::max(m, mx), a = s == 0 ? 0 : std::exp(m - mn), b = std::exp(mx - mn);
        l = l * a + ls * b;
        for (int d = 0; d < hd; ++d) acc[static_cast<size_t>(d)] = acc[static_cast<size_t>(d)] * a + as[static_cast<size_t>(d)] * b;
        m = mn;
      }
      for (int d = 0; d < hd; ++d) out[qo + static_cast<size_t>(d)] = acc[static_cast<size_t>(d)] / l;
    }
  return out;
}

// The backend's attention over rows [b, b + n) of one sequence whose K/V hold rows 0..L-1; the
// K/V storage is made in mode kv_mi (default: mi).
std::vector<float> run_attention(Backend& be, MatmulInput mi, const std::vector<float>& q, const std::vector<float>& k,
                                 const std::vector<float>& v, int L, int b, int n, const AttnParams& p,
                                 std::optional<MatmulInput> kv_mi = std::nullopt, uint64_t* kv_bytes = nullptr) {
  be.set_matmul_input(kv_mi.value_or(mi));
  const int page = 16, qw = p.n_heads * p.head_dim, kvw = p.n_kv_heads * p.head_dim;
  auto kv = be.alloc_kv(1, (L + page - 1) / page, page, p.n_kv_heads, p.head_dim);
  if (kv_bytes) *kv_bytes = kv->bytes();
  be.set_matmul_input(mi);
  RowLayout all;
  all.seq_pages.resize(1);
  for (int i = 0; i < (L + page - 1) / page; ++i) all.seq_pages[0].push_back(i);
  for (int i = 0; i < L; ++i) all.pos.push_back(i), all.seq.push_back(0);
  Tensor kt = upload(be, k, L, kvw), vt = upload(be, v, L, kvw);
  be.kv_store(*kv, 0, kt, vt, all);
  RowLayout part;
  part.seq_pages = all.seq_pages;
  for (int i = b; i < b + n; ++i) part.pos.push_back(i), part.seq.push_back(0);
  std::vector<float> qp(q.begin() + static_cast<int64_t>(b) * qw, q.begin() + static_cast<int64_t>(b + n) * qw);
  Tensor qt = upload(be, qp, n, qw), out = poisoned(be, n, qw);
  be.attention(qt, out, *kv, 0, part, p);
  auto res = host(be, out);
  for (Tensor* t : {&kt, &vt, &qt, &out}) be.free(*t);
  be.set_matmul_input(MatmulInput::F32);
  return res;
}

// bf16 mode rounds attention's product inputs too: close to the rule's double-precision walk (a
// weight near a bf16 midpoint may round the other way: 2^-8 of it), further from it in f32 mode,
// and a row's bits the same alone as among the prompt's rows.
TEST(MatmulInput, AttentionFollowsIt) {
  auto be = device_backend();
  struct Case { int L, heads, kv_heads, hd; };
  for (const Case& c : {Case{150, 4, 2, 64}, Case{200, 8, 2, 128}, Case{70, 2, 1, 36}}) {
    std::mt19937 rng(static_cast<uint32_t>(c.L * 31 + c.hd));
    AttnParams p;
    p.n_heads = c.heads, p.n_kv_heads = c.kv_heads, p.head_dim = c.hd;
    p.scale = 1.0f / std::sqrt(static_cast<float>(c.hd));
    const int qw = c.heads * c.hd, kvw = c.kv_heads * c.hd;
    auto q = random_floats(rng, static_cast<size_t>(c.L) * qw, -2.f, 2.f);
    auto k = random_floats(rng, static_cast<size_t>(c.L) * kvw, -2.f, 2.f);
    auto v = random_floats(rng, static_cast<size_t>(c.L) * kvw);
    const auto want = attention_bf16_reference(q, k, v, c.L, p);
    const auto bf = run_attention(*be, MatmulInput::BF16, q, k, v, c.L, 0, c.L, p);
    const auto whole = run_attention(*be, MatmulInput::F32, q, k, v, c.L, 0, c.L, p);
    double err_bf = 0, err_whole = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      err_bf = std::max(err_bf, std::fabs(bf[i] - want[i]));
      err_whole = std::max(err_whole, std::fabs(whole[i] - want[i]));
    }
    const std::string what = "L=" + std::to_string(c.L) + " hd=" + std::to_string(c.hd) + " on " + be->name();
    EXPECT_LT(err_bf, 1e-3) << what;
    EXPECT_GT(err_whole, 3 * err_bf) << what << ": bf16 mode is no nearer the bf16 rule than f32 mode";
    const auto last = run_attention(*be, MatmulInput::BF16, q, k, v, c.L, c.L - 1, 1, p);
    EXPECT_TRUE(same_bits(last.data(), bf.data() + static_cast<int64_t>(c.L - 1) * qw, qw)) << what;
  }
}

// In bf16 mode the CPU stores K and V as bf16: half the bytes, and attention gives the bits it
// gives over f32 storage rounded where it is read.
TEST(MatmulInput, CpuKvCacheInBf16ModeHoldsWhatAttentionReads) {
  auto be = make_backend("cpu", 2);
  std::mt19937 rng(5);
  AttnParams p;
  p.n_heads = 4, p.n_kv_heads = 2, p.head_dim = 64, p.scale = 0.125f;
  const int L = 150, qw = p.n_heads * p.head_dim, kvw = p.n_kv_heads * p.head_dim;
  auto q = random_floats(rng, static_cast<size_t>(L) * qw, -2.f, 2.f);
  auto k = random_floats(rng, static_cast<size_t>(L) * kvw, -2.f, 2.f);
  auto v = random_floats(rng, static_cast<size_t>(L) * kvw);
  uint64_t half = 0, whole = 0;
  const auto in_bf16 = run_attention(*be, MatmulInput::BF16, q, k, v, L, 0, L, p, std::nullopt, &half);
  const auto over_f32 = run_attention(*be, MatmulInput::BF16, q, k, v, L, 0, L, p, MatmulInput::F32, &whole);
  EXPECT_EQ(2 * half, whole);
  EXPECT_TRUE(same_bits(in_bf16.data(), over_f32.data(), static_cast<int64_t>(L) * qw));
}

// A cache made in bf16 mode holds bf16 values; read in f32 mode it is refused, not misread.
TEST(MatmulInput, KvCacheMadeInBf16ModeRefusesF32Mode) {
  auto be = device_backend();
  be->set_matmul_input(MatmulInput::BF16);
  EXPECT_EQ(be->kv_value_bytes(), 2);
  be->set_matmul_input(MatmulInput::F32);
  EXPECT_EQ(be->kv_value_bytes(), 4);
  std::mt19937 rng(6);
  AttnParams p;
  p.n_heads = 2, p.n_kv_heads = 1, p.head_dim = 64, p.scale = 0.125f;
  const int L = 20;
  auto q = random_floats(rng, static_cast<size_t>(L) * 128), kv = random_floats(rng, static_cast<size_t>(L) * 64);
  try {
    run_attention(*be, MatmulInput::F32, q, kv, kv, L, 0, L, p, MatmulInput::BF16);
    FAIL() << "f32 mode read a KV cache that holds bf16 values on " << be->name();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("holds bf16 values"), std::string::npos) << e.what();
  }
  be->set_matmul_input(MatmulInput::F32);
}

// bf16 mode's pages through the host tier: half the bytes of f32 mode's, each value the bf16 of
// the one stored, and the same bits after a page goes to the host and back and is copied.
TEST(MatmulInput, Bf16KvPagesKeepTheirBitsThroughTheHost) {
  auto be = device_backend();
  const int page = 16, heads = 2, hd = 64, w = heads * hd;
  std::mt19937 rng(9);
  auto k = random_floats(rng, static_cast<size_t>(page) * w), v = random_floats(rng, static_cast<size_t>(page) * w);
  be->set_matmul_input(MatmulInput::F32);
  const uint64_t f32_page = Backend::kv_page_bytes(*be->alloc_kv(2, 3, page, heads, hd));
  be->set_matmul_input(MatmulInput::BF16);
  auto kv = be->alloc_kv(2, 3, page, heads, hd);
  EXPECT_EQ(2 * Backend::kv_page_bytes(*kv), f32_page);
  RowLayout lay;
  lay.seq_pages = {{1}};
  for (int i = 0; i < page; ++i) lay.pos.push_back(i), lay.seq.push_back(0);
  Tensor kt = upload(*be, k, page, w), vt = upload(*be, v, page, w);
  for (int l = 0; l < 2; ++l) be->kv_store(*kv, l, kt, vt, lay);
  const auto stored = kv_page_values(*be, *kv, 1);
  // Per layer the page's K rows, then its V rows.
  for (int l = 0; l < 2; ++l)
    for (int i = 0; i < page * w; ++i) {
      const size_t at = static_cast<size_t>(l) * 2 * page * w + static_cast<size_t>(i);
      ASSERT_EQ(stored[at], round_to_bf16(k[static_cast<size_t>(i)])) << "layer " << l << " K value " << i;
      ASSERT_EQ(stored[at + static_cast<size_t>(page) * w], round_to_bf16(v[static_cast<size_t>(i)]))
          << "layer " << l << " V value " << i;
    }
  std::vector<uint8_t> bytes(Backend::kv_page_bytes(*kv));
  be->kv_page_to_host(*kv, 1, bytes.data());
  be->kv_page_from_host(*kv, 2, bytes.data());
  be->kv_page_copy(*kv, 2, 0);
  EXPECT_TRUE(same_bits(kv_page_values(*be, *kv, 0).data(), stored.data(), static_cast<int64_t>(stored.size())));
  be->free(kt), be->free(vt);
  be->set_matmul_input(MatmulInput::F32);
}

}  // namespace
}  // namespace tf::cputest
