#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
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

Sampler::RowNorm Sampler::row_norm(const float* logits, int32_t vocab) {
  RowNorm r;
  r.max = -std::numeric_limits<double>::infinity();
  for (int32_t i = 0; i < vocab; ++i) r.max = std::max(r.max, static_cast<double>(logits[i]));
  for (int32_t i = 0; i < vocab; ++i) r.sum += std::exp(static_cast<double>(logits[i]) - r.max);
  return r;
}

float Sampler::logprob_of(const float* logits, int32_t vocab, int32_t id) {
  return logprob_of(logits, row_norm(logits, vocab), id);
}

float Sampler::logprob_of(const float* logits, const RowNorm& r, int32_t id) {
  return static_cast<float>(static_cast<double>(logits[id]) - r.max - std::log(r.sum));
}

std::vector<TokenLogprob> Sampler::top_logprobs(const float* logits, int32_t vocab, const RowNorm& r, int n) {
  const double lse = r.max + std::log(r.sum);
  n = std::clamp(n, 0, vocab);
  // One pass keeping the n best in order: a later index loses every tie (lower ids win), so only a
  // strictly larger logit enters. NaN never does.
  std::vector<int32_t> best;
  best.reserve(static_cast<size_t>(n));
  for (int32_t i = 0; i < vocab && n > 0; ++i) {
    const float v = logits[i];
    if (std::isnan(v) || (static_cast<int>(best.size()) == n && !(v > logits[best.back()]))) continue;
    if (static_cast<int>(best.size()) == n) best.pop_back();
    auto at = std::upper_bound(best.begin(), best.end(), i, [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
    best.insert(at, i);
  }
  // Where NaNs leave fewer than n, the rest come in index order.
  for (int32_t i = 0; static_cast<int>(best.size()) < n && i < vocab; ++i)
    if (std::find(best.begin(), best.end(), i) == best.end()) best.push_back(i);
  std::vector<TokenLogprob> out;
  out.reserve(best.size());
  for (int32_t id : best) out.push_back({id, static_cast<float>(static_cast<double>(logits[id]) - lse)});
  return out;
}

}  // namespace tf
