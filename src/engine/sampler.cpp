#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <unordered_map>

namespace tf {

SampleSpec Sampler::spec(const SamplingParams& p, int32_t row, uint64_t position, const std::vector<int32_t>& history,
                         size_t n_prompt, int32_t vocab, PenaltyHistory& hist, std::vector<PenaltyToken>& pens) {
  SampleSpec s;
  s.row = row;
  s.temperature = p.temperature;
  s.top_k = p.top_k;
  s.top_p = p.top_p;
  s.min_p = p.min_p;
  s.repetition = p.repetition_penalty;
  s.presence = p.presence_penalty;
  s.frequency = p.frequency_penalty;
  s.seed = p.seed;
  s.position = position;
  if (s.repetition != 1.0f || s.presence != 0.0f || s.frequency != 0.0f) {
    // Repetition acts on the prompt's tokens too; presence and frequency on generated ones only.
    hist.update(history, n_prompt, vocab, s.repetition != 1.0f);
    s.pen_begin = static_cast<int32_t>(pens.size());
    s.pen_count = static_cast<int32_t>(hist.tokens().size());
    pens.insert(pens.end(), hist.tokens().begin(), hist.tokens().end());
  }
  return s;
}

void PenaltyHistory::reset() {
  tokens_.clear();
  at_.clear();
  counted_ = 0;
}

void PenaltyHistory::update(const std::vector<int32_t>& history, size_t n_prompt, int32_t vocab, bool with_prompt) {
  if (n_prompt != n_prompt_ || with_prompt != with_prompt_ || history.size() < counted_) {
    reset();
    n_prompt_ = n_prompt, with_prompt_ = with_prompt;
  }
  for (size_t i = counted_; i < history.size(); ++i) {
    const int32_t t = history[i];
    if (t < 0 || t >= vocab || (!with_prompt && i < n_prompt)) continue;
    auto [it, fresh] = at_.try_emplace(t, tokens_.size());
    if (fresh) tokens_.push_back(PenaltyToken{t, 0});
    if (i >= n_prompt) ++tokens_[it->second].generated;
  }
  counted_ = history.size();
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
