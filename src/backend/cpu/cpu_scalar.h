#pragma once
// Scalar formulas shared by the CPU ops, so every op that activates or normalizes does it alike.
#include <cmath>
#include <cstdint>

#include "backend/backend.h"

namespace tf::cpu {

inline float act_value(Act act, float g) {
  switch (act) {
    case Act::SiLU: return g / (1.0f + std::exp(-g));
    case Act::GeluTanh: {
      const float c = 0.7978845608028654f;  // sqrt(2 / pi)
      return 0.5f * g * (1.0f + std::tanh(c * (g + 0.044715f * g * g * g)));
    }
    case Act::Relu2: {
      const float r = g > 0.0f ? g : 0.0f;
      return r * r;
    }
  }
  return 0.0f;
}

// Sum of squares in one fixed reduction tree (8 strided partials, then pairs), for every norm.
inline float sum_squares(const float* x, int64_t n) {
  float a[8] = {};
  const int64_t n8 = n & ~int64_t{7};
  for (int64_t k = 0; k < n8; k += 8)
    for (int j = 0; j < 8; ++j) a[j] += x[k + j] * x[k + j];
  float s = ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
  for (int64_t k = n8; k < n; ++k) s += x[k] * x[k];
  return s;
}

}  // namespace tf::cpu
