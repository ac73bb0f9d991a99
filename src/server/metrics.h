#pragma once
// Prometheus counters, gauges and histograms for /metrics.
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace tf {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double v);
  // Appends the _bucket, _sum and _count lines of this histogram.
  void render(const std::string& name, const std::string& help, std::string& out) const;

 private:
  std::vector<double> bounds_;
  mutable std::mutex mu_;
  std::vector<uint64_t> counts_;  // one per bound, plus +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

struct Metrics {
  Metrics();
  void count_request(const std::string& endpoint, int status);
  std::string render(const EngineStats& st) const;

  std::atomic<uint64_t> prompt_tokens{0}, generation_tokens{0};
  Histogram ttft;  // seconds from request to first token
  Histogram itl;   // seconds between a stream's tokens

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;
};

}  // namespace tf
