#include "models/rope.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"

namespace tf {

namespace {

// YaRN: the dimension index where a given number of rotations fits the original context.
double yarn_dim(double rotations, int dim, double base, double max_pos) {
  return (dim * std::log(max_pos / (rotations * 2 * M_PI))) / (2 * std::log(base));
}

}  // namespace

RopeParams make_rope_params(const HfConfig& cfg, bool interleaved) {
  const RopeScaling& rs = cfg.rope;
  RopeParams p;
  p.head_dim = static_cast<int>(cfg.head_dim);
  p.rot_dim = static_cast<int>(static_cast<double>(cfg.head_dim) * rs.partial_rotary_factor);
  p.rot_dim -= p.rot_dim % 2;
  TF_CHECK(p.rot_dim > 0 && p.rot_dim <= p.head_dim, "rope: rotary dimension ", p.rot_dim,
           " does not fit head_dim ", p.head_dim);
  p.neox = !interleaved;
  const int half = p.rot_dim / 2;
  p.inv_freq.resize(static_cast<size_t>(half));
  // transformers: 1 / base ** (arange(0, dim, 2).float() / dim), in float32
  for (int i = 0; i < half; ++i) {
    float expo = static_cast<float>(2 * i) / static_cast<float>(p.rot_dim);
    p.inv_freq[static_cast<size_t>(i)] = static_cast<float>(1.0 / std::pow(rs.theta, static_cast<double>(expo)));
  }
  const std::string& t = rs.type;
  if (t == "default" || t.empty() || t == "dynamic") {
    // dynamic NTK only changes frequencies past the original window; we serve within it.
  } else if (t == "linear") {
    for (auto& f : p.inv_freq) f = static_cast<float>(f / rs.factor);
  } else if (t == "llama3") {
    double old_ctx = static_cast<double>(rs.original_max_position_embeddings);
    TF_CHECK(old_ctx > 0, "rope_scaling llama3: original_max_position_embeddings missing");
    double low_wl = old_ctx / rs.low_freq_factor, high_wl = old_ctx / rs.high_freq_factor;
    for (auto& f : p.inv_freq) {
      double wl = 2 * M_PI / f;
      if (wl > low_wl) {
        f = static_cast<float>(f / rs.factor);
      } else if (wl >= high_wl) {
        double smooth = (old_ctx / wl - rs.low_freq_factor) / (rs.high_freq_factor - rs.low_freq_factor);
        f = static_cast<float>((1 - smooth) * f / rs.factor + smooth * f);
      }
    }
  } else if (t == "yarn") {
    double old_ctx = static_cast<double>(rs.original_max_position_embeddings > 0
                                             ? rs.original_max_position_embeddings
                                             : cfg.max_position_embeddings);
    double lo = std::floor(yarn_dim(rs.beta_fast, p.rot_dim, rs.theta, old_ctx));
    double hi = std::ceil(yarn_dim(rs.beta_slow, p.rot_dim, rs.theta, old_ctx));
    lo = std::max(lo, 0.0);
    hi = std::min(hi, static_cast<double>(p.rot_dim - 1));
    if (lo == hi) hi += 0.001;
    for (int i = 0; i < half; ++i) {
      double ramp = std::clamp((i - lo) / (hi - lo), 0.0, 1.0);
      double extrap = 1.0 - ramp;
      double f = p.inv_freq[static_cast<size_t>(i)];
      p.inv_freq[static_cast<size_t>(i)] = static_cast<float>(f / rs.factor * (1 - extrap) + f * extrap);
    }
    p.mscale = static_cast<float>(rs.attention_factor > 0 ? rs.attention_factor
                                                          : (rs.factor <= 1 ? 1.0 : 0.1 * std::log(rs.factor) + 1.0));
  } else {
    fail("rope_scaling type '", t, "' is not supported (default, linear, llama3, yarn, dynamic)");
  }
  return p;
}

}  // namespace tf
