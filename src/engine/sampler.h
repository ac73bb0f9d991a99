#pragma once
// Sampling settings and their translation into backend/sampling.h's rule, which draws every token.
// Each position's draw comes from a counter-based RNG keyed by (seed, position), so batching,
// chunking and drafting never shift a request's stream.
#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "backend/sampling.h"

namespace tf {

struct SamplingParams {
  float temperature = 1.0f;  // 0: greedy
  int top_k = 0;             // 0: off
  float top_p = 1.0f;
  float min_p = 0.0f;
  float repetition_penalty = 1.0f;  // HF style, over prompt and output
  float presence_penalty = 0.0f;    // OpenAI style, over output
  float frequency_penalty = 0.0f;
  uint64_t seed = 0;
};

struct TokenLogprob {
  int32_t id = 0;
  float logprob = 0;
};

// The distinct tokens of one growing sequence with how often each was generated, kept up to date
// as tokens are appended, so a round counts only the new ones instead of the whole history.
class PenaltyHistory {
 public:
  // Counts history past what was counted (prompt tokens too when with_prompt); history must extend
  // the one counted before (reset() for another sequence).
  void update(const std::vector<int32_t>& history, size_t n_prompt, int32_t vocab, bool with_prompt);
  void reset();
  const std::vector<PenaltyToken>& tokens() const { return tokens_; }

 private:
  std::vector<PenaltyToken> tokens_;
  std::unordered_map<int32_t, size_t> at_;  // id -> its entry in tokens_
  size_t counted_ = 0;                      // history positions counted so far
  size_t n_prompt_ = 0;
  bool with_prompt_ = false;
};

class Sampler {
 public:
  // The backend's spec of a draw from logits row `row` for the token at `position`. history:
  // prompt then generated tokens, n_prompt of them the prompt; with penalties, hist (which follows
  // this sequence) counts it and the spec's tokens are appended to pens.
  static SampleSpec spec(const SamplingParams& p, int32_t row, uint64_t position, const std::vector<int32_t>& history,
                         size_t n_prompt, int32_t vocab, PenaltyHistory& hist, std::vector<PenaltyToken>& pens);

  // A row's max logit and sum of exp(logit - max), both in double and in index order: what every
  // log-softmax value of the row needs, made once.
  struct RowNorm {
    double max = 0, sum = 0;
  };
  static RowNorm row_norm(const float* logits, int32_t vocab);

  // log-softmax of the raw logits: the chosen token's and the n most likely (ties: lower id).
  static float logprob_of(const float* logits, int32_t vocab, int32_t id);
  static float logprob_of(const float* logits, const RowNorm& r, int32_t id);
  static std::vector<TokenLogprob> top_logprobs(const float* logits, int32_t vocab, const RowNorm& r, int n);

};

}  // namespace tf
