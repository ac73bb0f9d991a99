#pragma once
// Greedy choice over a row of logits, shared by the sampling rule and every backend.
#include <cstdint>

namespace tf {

// The largest logit, ties to the lowest id; NaNs are skipped, and a row whose first logit is NaN
// gives 0 (what a left-to-right "strictly greater" scan gives).
int32_t argmax(const float* logits, int32_t vocab);

}  // namespace tf
