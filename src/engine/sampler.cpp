#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace tf {

void philox4x32(const uint32_t counter[4], const uint32_t key[2], uint32_t out[4]) {
  uint32_t c0 = counter[0], c1 = counter[1], c2 = counter[2], c3 = counter[3];
  uint32_t k0 = key[0], k1 = key[1];
  for (int round = 0; round < 10; ++round) {
    uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * c0;
    uint64_t p1 = static_cast<uint64_t>(0xCD9E8D57u) * c2;
    uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0;
    uint32_t n1 = static_cast<uint32_t>(p1);
    uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1;
    uint32_t n3 = static_cast<uint32_t>(p0);
    c0 = n0; c1 = n1; c2 = n2; c3 = n3;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  out[0] = c0; out[1] = c1; out[2] = c2; out[3] = c3;
}

double philox_uniform(uint64_t seed, uint64_t position, uint32_t stream) {
  uint32_t ctr[4] = {static_cast<uint32_t>(position), static_cast<uint32_t>(position >> 32), stream, 0};
  uint32_t key[2] = {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)};
  uint32_t out[4];
  philox4x32(ctr, key, out);
  uint64_t bits = (static_cast<uint64_t>(out[0]) << 21) ^ (out[1] >> 11);
  return static_cast<double>(bits & ((1ull << 53) - 1)) * (1.0 / 9007199254740992.0);
}

bool Sampler::plain_greedy(const SamplingParams& p) {
  return (p.temperature <= 0.0f || p.top_k == 1) && p.repetition_penalty == 1.0f && p.presence_penalty == 0.0f &&
         p.frequency_penalty == 0.0f;
}

int32_t Sampler::sample(const float* logits, int32_t vocab, const SamplingParams& p,
                        const std::vector<int32_t>& history, size_t n_prompt, uint64_t position) {
  const float* w = logits;
  if (p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) {
    work_.assign(logits, logits + vocab);
    w = work_.data();
    counts_.assign(static_cast<size_t>(vocab), 0);
    for (size_t i = n_prompt; i < history.size(); ++i)
      if (history[i] >= 0 && history[i] < vocab) counts_[static_cast<size_t>(history[i])]++;
    if (p.repetition_penalty != 1.0f) {
      std::vector<char> seen(static_cast<size_t>(vocab), 0);
      for (int32_t t : history) {
        if (t < 0 || t >= vocab || seen[static_cast<size_t>(t)]) continue;
        seen[static_cast<size_t>(t)] = 1;
        float& l = work_[static_cast<size_t>(t)];
        l = l > 0 ? l / p.repetition_penalty : l * p.repetition_penalty;
      }
    }
    for (int32_t t = 0; t < vocab; ++t) {
      uint32_t c = counts_[static_cast<size_t>(t)];
      if (c) work_[static_cast<size_t>(t)] -= p.frequency_penalty * static_cast<float>(c) + p.presence_penalty;
    }
  }
  if (p.temperature <= 0.0f || p.top_k == 1) return argmax(w, vocab);

  // Candidates: the top_k by logit (descending, ties by id), or the whole vocabulary in id order.
  auto by_logit = [&](int32_t a, int32_t b) {
    float la = w[a], lb = w[b];
    return la > lb || (la == lb && a < b);
  };
  ids_.resize(static_cast<size_t>(vocab));
  std::iota(ids_.begin(), ids_.end(), 0);
  size_t n = ids_.size();
  const bool top_k = p.top_k > 0 && static_cast<size_t>(p.top_k) < n;
  if (top_k) {
    std::nth_element(ids_.begin(), ids_.begin() + p.top_k, ids_.end(), by_logit);
    n = static_cast<size_t>(p.top_k);
    ids_.resize(n);
    std::sort(ids_.begin(), ids_.end(), by_logit);
  }
  const double max_logit = static_cast<double>(w[top_k ? ids_[0] : argmax(w, vocab)]);
  probs_.resize(n);
  double sum = 0;
  const double inv_t = 1.0 / static_cast<double>(p.temperature);
  for (size_t i = 0; i < n; ++i) {
    double l = static_cast<double>(w[ids_[i]]);
    probs_[i] = std::isinf(l) && l < 0 ? 0.0 : std::exp((l - max_logit) * inv_t);
    sum += probs_[i];
  }
  if (!(sum > 0)) return argmax(w, vocab);
  const double pmax = 1.0 / sum;  // the largest logit's exp is 1
  for (size_t i = 0; i < n; ++i) probs_[i] /= sum;
  if (p.top_p < 1.0f && !top_k) {
    // Nucleus: sort only as long a prefix by logit as the cumulative probability needs.
    const double target = static_cast<double>(p.top_p);
    size_t sorted_end = 0, keep = 0;
    double cum = 0;
    for (size_t m = std::min<size_t>(64, n);; m = std::min(n, 4 * m)) {
      const auto first = ids_.begin() + static_cast<std::ptrdiff_t>(sorted_end), mid = ids_.begin() + static_cast<std::ptrdiff_t>(m);
      if (m < n) std::nth_element(first, mid, ids_.end(), by_logit);
      std::sort(first, mid, by_logit);
      sorted_end = m;
      while (keep < m && (keep == 0 || cum < target)) cum += probs_[static_cast<size_t>(ids_[keep++])];
      if (cum >= target || m == n) break;
    }
    sorted_probs_.resize(keep);
    for (size_t i = 0; i < keep; ++i) sorted_probs_[i] = probs_[static_cast<size_t>(ids_[i])];
    probs_.swap(sorted_probs_);
    n = keep;
  } else if (p.top_p < 1.0f) {
    double cum = 0;
    size_t keep = n;
    for (size_t i = 0; i < n; ++i) {
      cum += probs_[i];
      if (cum >= static_cast<double>(p.top_p)) {
        keep = i + 1;
        break;
      }
    }
    n = keep;
  }
  if (p.min_p > 0.0f) {
    double floor = static_cast<double>(p.min_p) * pmax;
    for (size_t i = 0; i < n; ++i)
      if (probs_[i] < floor) probs_[i] = 0;
  }
  double total = 0;
  for (size_t i = 0; i < n; ++i) total += probs_[i];
  double u = philox_uniform(p.seed, position) * total;
  double cum = 0;
  size_t last = 0;
  for (size_t i = 0; i < n; ++i) {
    if (probs_[i] <= 0) continue;
    last = i;
    cum += probs_[i];
    if (u < cum) return ids_[i];
  }
  return ids_[last];
}

float Sampler::logprob_of(const float* logits, int32_t vocab, int32_t id) {
  double m = -std::numeric_limits<double>::infinity();
  for (int32_t i = 0; i < vocab; ++i) m = std::max(m, static_cast<double>(logits[i]));
  double s = 0;
  for (int32_t i = 0; i < vocab; ++i) s += std::exp(static_cast<double>(logits[i]) - m);
  return static_cast<float>(static_cast<double>(logits[id]) - m - std::log(s));
}

std::vector<TokenLogprob> Sampler::top_logprobs(const float* logits, int32_t vocab, int n) {
  double m = -std::numeric_limits<double>::infinity();
  for (int32_t i = 0; i < vocab; ++i) m = std::max(m, static_cast<double>(logits[i]));
  double s = 0;
  for (int32_t i = 0; i < vocab; ++i) s += std::exp(static_cast<double>(logits[i]) - m);
  double lse = m + std::log(s);
  n = std::clamp(n, 0, vocab);
  std::vector<int32_t> ids(static_cast<size_t>(vocab));
  std::iota(ids.begin(), ids.end(), 0);
  std::partial_sort(ids.begin(), ids.begin() + n, ids.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  std::vector<TokenLogprob> out;
  for (int i = 0; i < n; ++i)
    out.push_back({ids[static_cast<size_t>(i)], static_cast<float>(static_cast<double>(logits[ids[static_cast<size_t>(i)]]) - lse)});
  return out;
}

}  // namespace tf
