#pragma once
// The sampling rule of every backend (the cpu reference is sample_row; cuda runs the same steps).
//
// A row w of logits and a spec (penalties, temperature T, top_k, top_p, min_p, seed, position):
// - Penalties change the logits of the history's tokens: w / r (w > 0) or w * r for repetition r,
//   then w - (frequency * times generated + presence) for a token generated at least once.
// - T <= 0 or top_k == 1: argmax(w) (base/argmax.h). So is any row whose largest logit is not finite.
// - e_i = exp((w_i - max w) * (1 / T)) in float (sample_exp); NaN logits weigh 0.
// - top_k (0 < k < V): logits below the k-th largest weigh 0 (ties with it stay).
// - top_p < 1: with S(t) the canonical sum of the e_i >= t, the threshold is the largest t with
//   S(t) >= top_p * S(0); weights below max(t, min_p) weigh 0 (min_p alone when top_p is 1).
// - The draw: u = philox_uniform(seed, position) * S(threshold); ids are walked in order, chunk sums
//   first, then the chosen chunk's weights one by one; the first id where the running sum passes u.
// Canonical sum: ids in chunks of 256; lane l of a chunk adds ids l, l + 32, ... in double, the 32
// lanes meet in an xor butterfly (16, 8, 4, 2, 1), and chunk sums in a pairwise tree over a power of
// two, so a block of threads computes it exactly as this loop does.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "base/philox.h"

namespace tf {

struct SampleSpec {
  int32_t row = 0;     // logits row
  int32_t top_k = 0;   // 0: off
  float temperature = 0.0f;
  float top_p = 1.0f;
  float min_p = 0.0f;
  float repetition = 1.0f, presence = 0.0f, frequency = 0.0f;
  int32_t pen_begin = 0, pen_count = 0;  // this spec's tokens in the call's PenaltyToken list
  uint64_t seed = 0;
  uint64_t position = 0;
};

// A distinct token of a sequence's history (prompt and output) and how often it was generated.
struct PenaltyToken {
  int32_t id = 0;
  int32_t generated = 0;
};

// Penalized logit of a history token (repetition first, then frequency and presence).
TF_HD inline float penalized(float w, const SampleSpec& s, int32_t generated) {
  if (s.repetition != 1.0f) w = w > 0 ? w / s.repetition : w * s.repetition;
  if (generated > 0) w -= s.frequency * static_cast<float>(generated) + s.presence;
  return w;
}

constexpr int kSampleChunk = 256;       // ids of one canonical chunk: 32 lanes x 8
constexpr int kSampleMaxChunks = 2048;  // rows of up to 524,288 logits sample on the device

// Order-preserving key of a float that is not NaN (every such key is above 0).
TF_HD inline uint32_t sample_key(float w) {
  uint32_t b;
  std::memcpy(&b, &w, 4);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

TF_HD inline float float_of_bits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

// exp(x) for x <= 0 from + - * and floor alone, so host and device round every step alike (libm's
// expf and CUDA's differ in the last bit, which moves a draw that falls on a boundary). Within a few
// ulp of exp; exactly 1 at 0; 0 below -104 and for NaN.
TF_HD inline float sample_exp(float x) {
  if (!(x >= -104.0f)) return 0.0f;
  const float n = ::floorf(x * 1.44269504f + 0.5f);
  const float r = (x - n * 0.693145751953125f) - n * 1.42860677e-06f;
  const float p =
      1.0f + r * (1.0f + r * (0.5f + r * (0.16666667f + r * (0.041666668f + r * (0.008333334f + r * 0.0013888889f)))));
  // 2^n in two normal factors, so a result below the normal range rounds once, at the end.
  const int k = static_cast<int>(n), a = k / 2, b = k - a;
  return p * float_of_bits(static_cast<uint32_t>(127 + a) << 23) * float_of_bits(static_cast<uint32_t>(127 + b) << 23);
}

// The weight of logit wi: max m, 1 / T inv_t, k-th key tk (0: no top_k).
TF_HD inline float sample_weight(float wi, float m, float inv_t, uint32_t tk) {
  if (wi != wi || (tk != 0 && sample_key(wi) < tk)) return 0.0f;
  return sample_exp((wi - m) * inv_t);
}

// The top_p threshold's bit pattern for weights e: the largest t with S(t) >= target. bracket: first
// narrow it down by a histogram (the same answer in fewer passes); else search all 30 bits.
uint32_t nucleus_bits(const std::vector<float>& e, double target, bool bracket);

// The id the rule draws from one row of vocab logits; pen holds s.pen_count history tokens (the
// spec's own, each id once, all inside the vocabulary).
int32_t sample_row(const float* logits, int32_t vocab, const SampleSpec& s, const PenaltyToken* pen = nullptr);

}  // namespace tf
