#pragma once
// Token selection from logits. Each position's draw comes from a counter-based RNG keyed by
// (seed, position), so batching, chunking and drafting never shift a request's stream.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "base/argmax.h"

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

// Philox4x32-10 (Salmon et al. 2011): 4 x 32 bits from a 128-bit counter and 64-bit key.
void philox4x32(const uint32_t counter[4], const uint32_t key[2], uint32_t out[4]);
// Uniform double in [0, 1) for (seed, position, stream).
double philox_uniform(uint64_t seed, uint64_t position, uint32_t stream = 0);

struct TokenLogprob {
  int32_t id = 0;
  float logprob = 0;
};

class Sampler {
 public:
  // history: prompt then generated tokens; n_prompt of them are the prompt. position: the
  // index the chosen token will take in the sequence.
  int32_t sample(const float* logits, int32_t vocab, const SamplingParams& p,
                 const std::vector<int32_t>& history, size_t n_prompt, uint64_t position);

  // True when sample() is argmax of the raw logits: greedy without penalties.
  static bool plain_greedy(const SamplingParams& p);

  // log-softmax of the raw logits: the chosen token's and the n most likely.
  static float logprob_of(const float* logits, int32_t vocab, int32_t id);
  static std::vector<TokenLogprob> top_logprobs(const float* logits, int32_t vocab, int n);

 private:
  std::vector<float> work_;
  std::vector<int32_t> ids_;
  std::vector<uint32_t> counts_;
  std::vector<double> probs_, sorted_probs_;
};

}  // namespace tf
