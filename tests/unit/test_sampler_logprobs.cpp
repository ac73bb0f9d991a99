// The host's log-softmax values: the n most likely in order (ties: lower id), NaN kept out, and
// each value the row's log-softmax.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "engine/sampler.h"

namespace tf {
namespace {

// The n best ids by a full sort: logit descending, then id ascending.
std::vector<int32_t> sorted_best(const std::vector<float>& l, int n) {
  std::vector<int32_t> ids(l.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); });
  ids.resize(static_cast<size_t>(std::min<int64_t>(n, static_cast<int64_t>(l.size()))));
  return ids;
}

std::vector<int32_t> ids_of(const std::vector<TokenLogprob>& t) {
  std::vector<int32_t> ids;
  for (const auto& x : t) ids.push_back(x.id);
  return ids;
}

TEST(SamplerLogprobs, TopNMatchesAFullSortWithTiesToTheLowerId) {
  std::mt19937 rng(7);
  for (int vocab : {1, 5, 37, 1000}) {
    // Few distinct values, so ties are everywhere.
    std::vector<float> l(static_cast<size_t>(vocab));
    for (auto& v : l) v = static_cast<float>(static_cast<int>(rng() % 9)) - 4.0f;
    const auto norm = Sampler::row_norm(l.data(), vocab);
    for (int n : {0, 1, 3, 20, vocab, vocab + 3}) {
      const auto top = Sampler::top_logprobs(l.data(), vocab, norm, n);
      EXPECT_EQ(ids_of(top), sorted_best(l, n)) << "vocab " << vocab << " n " << n;
    }
  }
}

TEST(SamplerLogprobs, ValuesAreTheRowsLogSoftmax) {
  std::mt19937 rng(11);
  std::normal_distribution<float> d(0.0f, 6.0f);
  std::vector<float> l(4099);
  for (auto& v : l) v = d(rng);
  l[17] = -std::numeric_limits<float>::infinity();
  const int32_t V = static_cast<int32_t>(l.size());
  const auto norm = Sampler::row_norm(l.data(), V);
  double sum = 0;
  for (int32_t i = 0; i < V; ++i) sum += std::exp(static_cast<double>(Sampler::logprob_of(l.data(), norm, i)));
  EXPECT_NEAR(sum, 1.0, 1e-4);
  EXPECT_EQ(Sampler::logprob_of(l.data(), norm, 17), -std::numeric_limits<float>::infinity());
  // The bits of the formulas the server has always returned: max and exp-sum in double, in index
  // order; the token's value is l - max - log(sum), the top values l - (max + log(sum)).
  double m = -std::numeric_limits<double>::infinity(), s = 0;
  for (float v : l) m = std::max(m, static_cast<double>(v));
  for (float v : l) s += std::exp(static_cast<double>(v) - m);
  for (int32_t id : {0, 5, 4098}) {
    EXPECT_EQ(Sampler::logprob_of(l.data(), norm, id), static_cast<float>(static_cast<double>(l[id]) - m - std::log(s)));
    EXPECT_EQ(Sampler::logprob_of(l.data(), V, id), static_cast<float>(static_cast<double>(l[id]) - m - std::log(s)));
  }
  const auto top = Sampler::top_logprobs(l.data(), V, norm, 5);
  ASSERT_EQ(top.size(), 5u);
  EXPECT_EQ(ids_of(top), sorted_best(l, 5));
  for (const auto& t : top) EXPECT_EQ(t.logprob, static_cast<float>(static_cast<double>(l[t.id]) - (m + std::log(s))));
}

TEST(SamplerLogprobs, NanNeverDisplacesANumber) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> l = {nan, nan, 1.0f, 3.0f, nan, 2.0f};
  const auto norm = Sampler::row_norm(l.data(), 6);
  EXPECT_EQ(ids_of(Sampler::top_logprobs(l.data(), 6, norm, 3)), (std::vector<int32_t>{3, 5, 2}));
  // Fewer numbers than asked: the rest in index order.
  EXPECT_EQ(ids_of(Sampler::top_logprobs(l.data(), 6, norm, 5)), (std::vector<int32_t>{3, 5, 2, 0, 1}));
}

}  // namespace
}  // namespace tf
