#include "backend/sampling.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <functional>
#include <limits>
#include <vector>

#include "base/argmax.h"

namespace tf {

namespace {

// Canonical sum of the e_i >= th of chunk c (see sampling.h).
double chunk_sum(const std::vector<float>& e, int c, float th) {
  double lane[32] = {};
  const int64_t n = static_cast<int64_t>(e.size());
  for (int j = 0; j < kSampleChunk / 32; ++j)
    for (int l = 0; l < 32; ++l) {
      const int64_t i = static_cast<int64_t>(c) * kSampleChunk + j * 32 + l;
      if (i < n && e[static_cast<size_t>(i)] >= th) lane[l] += static_cast<double>(e[static_cast<size_t>(i)]);
    }
  for (int off = 16; off > 0; off >>= 1) {
    double next[32];
    for (int l = 0; l < 32; ++l) next[l] = lane[l] + lane[l ^ off];
    std::copy(next, next + 32, lane);
  }
  return lane[0];
}

// Chunk sums of the e_i >= th into cs, and their pairwise tree.
double canonical_sum(const std::vector<float>& e, float th, std::vector<double>& cs) {
  const int n = static_cast<int>((e.size() + kSampleChunk - 1) / kSampleChunk);
  cs.resize(static_cast<size_t>(n));
  for (int c = 0; c < n; ++c) cs[static_cast<size_t>(c)] = chunk_sum(e, c, th);
  int p = 1;
  while (p < n) p *= 2;
  std::vector<double> t(static_cast<size_t>(p), 0.0);
  std::copy(cs.begin(), cs.end(), t.begin());
  for (int stride = 1; stride < p; stride *= 2)
    for (int i = 0; i + stride < p; i += 2 * stride) t[static_cast<size_t>(i)] += t[static_cast<size_t>(i + stride)];
  return t[0];
}

uint32_t bits_of(float v) {
  uint32_t b;
  std::memcpy(&b, &v, 4);
  return b;
}

}  // namespace

uint32_t nucleus_bits(const std::vector<float>& e, double target, bool bracket) {
  std::vector<double> cs;
  if (bracket) {
    // Sums of the weights by the top bits of their patterns (any order) point at the threshold's
    // neighbourhood; the canonical sum then confirms that it lies among the weights there.
    constexpr int kShift = 16;
    constexpr uint32_t kTop = 0x3f800000u >> kShift;
    std::vector<double> hist(kTop + 1, 0.0);
    for (float v : e)
      if (v > 0.0f) hist[bits_of(v) >> kShift] += static_cast<double>(v);
    double cum = 0.0;
    uint32_t b = kTop;
    for (;; --b) {
      cum += hist[b];
      if (cum >= target || b == 0) break;
    }
    const uint32_t lo_b = b > 0 ? b - 1 : 0, hi_b = std::min(kTop, b + 1);
    std::vector<uint32_t> cand;
    uint32_t above = UINT32_MAX;  // the smallest weight above the candidates' buckets
    for (float v : e) {
      if (!(v > 0.0f)) continue;
      const uint32_t k = bits_of(v), kb = k >> kShift;
      if (kb >= lo_b && kb <= hi_b) cand.push_back(k);
      else if (kb > hi_b) above = std::min(above, k);
    }
    std::sort(cand.begin(), cand.end());
    cand.erase(std::unique(cand.begin(), cand.end()), cand.end());
    if (!cand.empty() && canonical_sum(e, float_of_bits(cand.front()), cs) >= target &&
        (above == UINT32_MAX || canonical_sum(e, float_of_bits(above), cs) < target)) {
      size_t lo = 0, hi = cand.size() - 1;
      while (lo < hi) {
        const size_t mid = lo + (hi - lo + 1) / 2;
        if (canonical_sum(e, float_of_bits(cand[mid]), cs) >= target) lo = mid;
        else hi = mid - 1;
      }
      return cand[lo];
    }
  }
  uint32_t lo = 0, hi = 0x3f800000u;  // weights lie in [0, 1]
  while (lo < hi) {
    const uint32_t mid = lo + (hi - lo + 1) / 2;
    if (canonical_sum(e, float_of_bits(mid), cs) >= target) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

int32_t sample_row(const float* logits, int32_t vocab, const SampleSpec& s, const PenaltyToken* pen) {
  const float* w = logits;
  std::vector<float> penalized_row;
  if (s.pen_count > 0) {
    penalized_row.assign(logits, logits + vocab);
    for (int32_t j = 0; j < s.pen_count; ++j) {
      float& x = penalized_row[static_cast<size_t>(pen[j].id)];
      x = penalized(x, s, pen[j].generated);
    }
    w = penalized_row.data();
  }
  if (!(s.temperature > 0.0f) || s.top_k == 1 || vocab <= 1) return argmax(w, vocab);
  float m = -std::numeric_limits<float>::infinity();
  for (int32_t i = 0; i < vocab; ++i) m = w[i] > m ? w[i] : m;
  if (!std::isfinite(m)) return argmax(w, vocab);
  const float inv_t = 1.0f / s.temperature;
  uint32_t tk = 0;
  if (s.top_k > 0 && s.top_k < vocab) {
    std::vector<uint32_t> keys;
    keys.reserve(static_cast<size_t>(vocab));
    for (int32_t i = 0; i < vocab; ++i)
      if (w[i] == w[i]) keys.push_back(sample_key(w[i]));
    if (keys.size() >= static_cast<size_t>(s.top_k)) {
      std::nth_element(keys.begin(), keys.begin() + (s.top_k - 1), keys.end(), std::greater<uint32_t>());
      tk = keys[static_cast<size_t>(s.top_k - 1)];
    }
  }
  std::vector<float> e(static_cast<size_t>(vocab));
  for (int32_t i = 0; i < vocab; ++i) e[static_cast<size_t>(i)] = sample_weight(w[i], m, inv_t, tk);
  std::vector<double> cs;
  float th = 0.0f;
  if (s.top_p < 1.0f) {
    th = float_of_bits(nucleus_bits(e, static_cast<double>(s.top_p) * canonical_sum(e, 0.0f, cs), true));
  }
  th = s.min_p > th ? s.min_p : th;
  const double total = canonical_sum(e, th, cs);
  if (!(total > 0.0)) return argmax(w, vocab);
  const double u = philox_uniform(s.seed, s.position) * total;
  auto counts = [&](int32_t i) { return e[static_cast<size_t>(i)] >= th && e[static_cast<size_t>(i)] > 0.0f; };
  double cum = 0.0;
  int32_t last_chunk = -1;
  for (size_t c = 0; c < cs.size(); ++c) {
    if (!(cs[c] > 0.0)) continue;
    last_chunk = static_cast<int32_t>(c);
    if (u < cum + cs[c]) {
      // The chosen chunk: its weights one by one from the sum of the chunks before it.
      const int32_t begin = last_chunk * kSampleChunk, end = std::min(vocab, begin + kSampleChunk);
      int32_t in_chunk = -1;
      for (int32_t i = begin; i < end; ++i) {
        if (!counts(i)) continue;
        in_chunk = i;
        cum += static_cast<double>(e[static_cast<size_t>(i)]);
        if (u < cum) return i;
      }
      return in_chunk;
    }
    cum += cs[c];
  }
  // Only rounding leaves u unreached: the last weight that counted.
  for (int32_t i = std::min(vocab, (last_chunk + 1) * kSampleChunk) - 1; last_chunk >= 0 && i >= 0; --i)
    if (counts(i)) return i;
  return argmax(w, vocab);
}

}  // namespace tf
