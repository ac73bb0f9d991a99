#include "base/argmax.h"

#include <cmath>

namespace tf {

int32_t argmax(const float* logits, int32_t vocab) {
  if (vocab <= 0 || std::isnan(logits[0])) return 0;
  // Independent partial maxima let the compiler vectorize; max of values does not depend on order.
  constexpr int kLanes = 16;
  float part[kLanes];
  for (float& p : part) p = logits[0];
  int32_t i = 0;
  for (; i + kLanes <= vocab; i += kLanes)
    for (int j = 0; j < kLanes; ++j) part[j] = logits[i + j] > part[j] ? logits[i + j] : part[j];
  float best = part[0];
  for (int j = 1; j < kLanes; ++j) best = part[j] > best ? part[j] : best;
  for (; i < vocab; ++i) best = logits[i] > best ? logits[i] : best;
  for (int32_t k = 0; k < vocab; ++k)
    if (logits[k] == best) return k;
  return 0;
}

}  // namespace tf
