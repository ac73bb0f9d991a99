// The sampling gate of the kernel contract: the gpu's ids against the cpu's, spec for spec.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include "contract.h"

namespace tf::contract {

using cputest::random_floats;
using cputest::upload;

SampleFn real_sample() {
  return [](Backend& be, const Tensor& x, const std::vector<SampleSpec>& s, const std::vector<PenaltyToken>& p,
            int32_t* ids) { be.sample_rows(x, s, p, ids); };
}
std::string sample_gate(const SampleFn& f, Backend& gpu, Backend& cpu, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t M = 54;
  auto ls = random_floats(rng, static_cast<size_t>(M * n), -3.f, 3.f);
  auto at = [&](int64_t r, int64_t c) -> float& { return ls[static_cast<size_t>(r * n + c)]; };
  const float inf = std::numeric_limits<float>::infinity(), nan = std::nanf("");
  std::uniform_int_distribution<int64_t> col(0, n - 1);
  for (int64_t r = 0; r < M; ++r) {
    switch (r % 9) {
      case 0: at(r, col(rng)) = at(r, col(rng)) = at(r, col(rng)) = 9.f; break;  // a tie, lowest id wins
      case 1: at(r, 0) = nan; break;                                                // NaN first
      case 2: at(r, col(rng)) = nan, at(r, col(rng)) = 8.f; break;                  // NaN skipped
      case 3: std::fill_n(ls.begin() + r * n, n, -inf); break;                      // nothing finite
      case 4: std::fill_n(ls.begin() + r * n, n, -1.f), at(r, col(rng)) = 0.f, at(r, col(rng)) = -0.f; break;
      case 5: at(r, n - 1) = inf, at(r, col(rng)) = inf; break;
      case 7: std::fill_n(ls.begin() + r * n, n, 0.25f); break;  // flat: every weight 1, one bucket
      case 8:  // a few far ahead over levels of ties, as a trained model's rows look
        for (int64_t c = 0; c < n; ++c) at(r, c) = std::round(at(r, c) * 2.0f) / 2.0f;
        for (int k = 0; k < 4; ++k) at(r, col(rng)) = 10.0f + static_cast<float>(k % 2);
        break;
      default: break;
    }
  }
  // Every row drawn greedily and with each filter, several at once, at spread positions and seeds.
  // The last two kinds carry penalties over up to 60 distinct history tokens.
  std::vector<SampleSpec> specs;
  std::vector<PenaltyToken> pens;
  const float temps[] = {0.0f, 0.7f, 1.3f, 1.0f, 0.8f, 1.0f, 0.0f, 0.9f};
  const int top_ks[] = {0, 0, 40, 0, 50, 1, 0, 0};
  const float top_ps[] = {1.0f, 0.9f, 1.0f, 1.0f, 0.8f, 1.0f, 1.0f, 0.95f};
  const float min_ps[] = {0.0f, 0.0f, 0.0f, 0.05f, 0.01f, 0.0f, 0.0f, 0.0f};
  for (int64_t r = 0; r < M; ++r)
    for (int v = 0; v < 8; ++v) {
      SampleSpec s;
      s.row = static_cast<int32_t>(r);
      s.temperature = temps[v], s.top_k = top_ks[v], s.top_p = top_ps[v], s.min_p = min_ps[v];
      s.seed = rng(), s.position = rng() % 100000;
      if (v >= 6) {
        s.repetition = 1.3f, s.frequency = 0.7f, s.presence = 0.4f;
        s.pen_begin = static_cast<int32_t>(pens.size());
        std::vector<int32_t> ids(static_cast<size_t>(n));
        std::iota(ids.begin(), ids.end(), 0);
        std::shuffle(ids.begin(), ids.end(), rng);
        for (int64_t k = 0; k < std::min<int64_t>(n, 60); ++k)
          pens.push_back(PenaltyToken{ids[static_cast<size_t>(k)], static_cast<int32_t>(rng() % 4)});
        s.pen_count = static_cast<int32_t>(pens.size()) - s.pen_begin;
      }
      specs.push_back(s);
    }
  const std::string tag = "sample_rows n=" + std::to_string(n);
  std::vector<int32_t> ci(specs.size()), gi(specs.size());
  Tensor lc = upload(cpu, ls, M, n);
  cpu.sample_rows(lc, specs, pens, ci.data());
  cpu.free(lc);
  Tensor lg = upload(gpu, ls, M, n);
  f(gpu, lg, specs, pens, gi.data());
  std::string e;
  for (size_t j = 0; j < specs.size() && e.empty(); ++j)
    if (ci[j] != gi[j])
      e = tag + ": spec " + std::to_string(j) + " (row " + std::to_string(specs[j].row) + ", T " +
          std::to_string(specs[j].temperature) + ") gives id " + std::to_string(gi[j]) + ", the cpu " + std::to_string(ci[j]);
  // Fewer specs over fewer rows in a call: the same ids.
  for (int64_t m = 1; m <= 40 && e.empty(); m += 3) {
    const int64_t off = offset_for(m, M);
    std::vector<SampleSpec> part;
    std::vector<size_t> from;
    for (size_t j = 0; j < specs.size(); ++j)
      if (specs[j].row >= off && specs[j].row < off + m && (j + static_cast<size_t>(m)) % 3 != 0) {
        part.push_back(specs[j]);
        part.back().row -= static_cast<int32_t>(off);
        from.push_back(j);
      }
    std::vector<int32_t> pi(part.size());
    f(gpu, lg.slice_rows(off, m), part, pens, pi.data());
    for (size_t j = 0; j < part.size() && e.empty(); ++j)
      if (pi[j] != gi[from[j]]) e = tag + ": spec " + std::to_string(from[j]) + " differs in a call of " + std::to_string(part.size());
  }
  // The greedy specs alone in one call (the argmax over many blocks takes it): the cpu's ids.
  std::vector<SampleSpec> greedy;
  std::vector<size_t> from;
  for (size_t j = 0; j < specs.size(); ++j)
    if ((!(specs[j].temperature > 0.0f) || specs[j].top_k == 1) && specs[j].pen_count == 0)
      greedy.push_back(specs[j]), from.push_back(j);
  std::vector<int32_t> gg(greedy.size());
  if (e.empty()) f(gpu, lg, greedy, pens, gg.data());
  for (size_t j = 0; j < greedy.size() && e.empty(); ++j)
    if (gg[j] != ci[from[j]]) e = tag + ": greedy spec " + std::to_string(from[j]) + " differs in a greedy call";
  // Each spec of the first nine rows (every kind) in a call of its own: a lone greedy spec takes
  // the argmax over many blocks, a lone drawing spec the widest team of blocks.
  for (size_t j = 0; j < specs.size() && e.empty(); ++j) {
    if (specs[j].row >= 9) continue;
    int32_t one = -1;
    f(gpu, lg, {specs[j]}, pens, &one);
    if (one != ci[j]) e = tag + ": spec " + std::to_string(j) + " differs alone";
  }
  gpu.free(lg);
  return e;
}

}  // namespace tf::contract
