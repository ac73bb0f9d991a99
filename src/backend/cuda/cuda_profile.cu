// Per-op GPU time: a pair of events around each op, summed per op kind once they have completed.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_profile.cuh"
#include "backend/cuda/cuda_util.cuh"

namespace tf::cuda {

namespace {

// Layer numbers folded so every layer's weight shares one line ("layers.#.mlp.up_proj").
std::string fold_digits(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (std::isdigit(static_cast<unsigned char>(s[i]))) {
      out += '#';
      while (i + 1 < s.size() && std::isdigit(static_cast<unsigned char>(s[i + 1]))) ++i;
    } else {
      out += s[i];
    }
  }
  return out;
}

}  // namespace

CudaBackend::ProfScope::ProfScope(CudaBackend& be, const char* op, const std::string* name,
                                  int64_t rows)
    : prof_(be.prof_.get()) {
  if (!prof_) return;
  std::string k = op;
  if (name) k.append(1, ' ').append(fold_digits(*name));
  k += " m=" + std::to_string(rows);
  key_ = prof_->key(k);
  t0_ = std::chrono::steady_clock::now();
  a_ = prof_->event();
  TF_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(a_), stream()), "profile: record");
}

CudaBackend::ProfScope::~ProfScope() {
  if (!prof_) return;
  cudaEvent_t b = prof_->event();
  cudaEventRecord(b, stream());
  prof_->pending.push_back({key_, static_cast<cudaEvent_t>(a_), b});
  prof_->host_ms[static_cast<size_t>(key_)] +=
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0_).count();
  if (prof_->pending.size() >= 4096) prof_->drain();
}

void CudaBackend::set_profiling(bool on) {
  if (on && !prof_) prof_ = std::make_unique<OpProfile>();
  if (!on) prof_.reset();
}

std::string CudaBackend::profile_take() {
  if (!prof_) return {};
  prof_->drain();
  OpProfile& p = *prof_;
  std::vector<size_t> order(p.keys.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return p.ms[a] > p.ms[b]; });
  double total = 0;
  int64_t n = 0;
  for (size_t i = 0; i < p.ms.size(); ++i) total += p.ms[i], n += p.calls[i];
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line, "  GPU op time %.3f ms over %lld ops\n", total,
                static_cast<long long>(n));
  out += line;
  std::snprintf(line, sizeof line, "  %10s %6s %8s %10s %10s  %s\n", "ms", "%", "calls", "us/call", "host us", "op");
  out += line;
  for (size_t i : order) {
    if (p.calls[i] == 0) continue;
    std::snprintf(line, sizeof line, "  %10.3f %6.2f %8lld %10.2f %10.2f  %s\n", p.ms[i],
                  total > 0 ? 100.0 * p.ms[i] / total : 0.0, static_cast<long long>(p.calls[i]),
                  1000.0 * p.ms[i] / static_cast<double>(p.calls[i]),
                  1000.0 * p.host_ms[i] / static_cast<double>(p.calls[i]), p.keys[i].c_str());
    out += line;
  }
  std::fill(p.ms.begin(), p.ms.end(), 0.0);
  std::fill(p.host_ms.begin(), p.host_ms.end(), 0.0);
  std::fill(p.calls.begin(), p.calls.end(), 0);
  return out;
}

}  // namespace tf::cuda
