#include "server/metrics.h"

#include <cstdio>

#include "base/error.h"

namespace tf {

namespace {

std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

}  // namespace

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double v) {
  std::lock_guard<std::mutex> lock(mu_);
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  counts_[i]++;
  sum_ += v;
  count_++;
}

void Histogram::render(const std::string& name, const std::string& help, std::string& out) const {
  std::lock_guard<std::mutex> lock(mu_);
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " histogram\n";
  uint64_t cum = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cum += counts_[i];
    out += name + "_bucket{le=\"" + num(bounds_[i]) + "\"} " + std::to_string(cum) + "\n";
  }
  cum += counts_.back();
  out += name + "_bucket{le=\"+Inf\"} " + std::to_string(cum) + "\n";
  out += name + "_sum " + num(sum_) + "\n" + name + "_count " + std::to_string(count_) + "\n";
}

Metrics::Metrics()
    : ttft({0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}),
      itl({0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}) {}

void Metrics::count_request(const std::string& endpoint, int status) {
  std::lock_guard<std::mutex> lock(mu_);
  requests_[{endpoint, status}]++;
}

std::string Metrics::render(const EngineStats& st) const {
  const int queue_depth = st.queued, lanes_busy = st.lanes_busy, lanes_total = st.lanes;
  std::string out;
  out += "# HELP tensorfold_requests_total HTTP requests by endpoint and status.\n";
  out += "# TYPE tensorfold_requests_total counter\n";
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [key, n] : requests_)
      out += "tensorfold_requests_total{endpoint=\"" + key.first + "\",status=\"" + std::to_string(key.second) +
             "\"} " + std::to_string(n) + "\n";
  }
  out += "# HELP tensorfold_prompt_tokens_total Prompt tokens processed.\n# TYPE tensorfold_prompt_tokens_total counter\n";
  out += "tensorfold_prompt_tokens_total " + std::to_string(prompt_tokens.load()) + "\n";
  out += "# HELP tensorfold_generation_tokens_total Tokens generated.\n# TYPE tensorfold_generation_tokens_total counter\n";
  out += "tensorfold_generation_tokens_total " + std::to_string(generation_tokens.load()) + "\n";
  ttft.render("tensorfold_time_to_first_token_seconds", "Time from request to first generated token.", out);
  itl.render("tensorfold_inter_token_latency_seconds", "Time between consecutive tokens of a stream.", out);
  out += "# HELP tensorfold_queue_depth Requests waiting for a lane.\n# TYPE tensorfold_queue_depth gauge\n";
  out += "tensorfold_queue_depth " + std::to_string(queue_depth) + "\n";
  out += "# HELP tensorfold_lanes_busy Lanes running a request.\n# TYPE tensorfold_lanes_busy gauge\n";
  out += "tensorfold_lanes_busy " + std::to_string(lanes_busy) + "\n";
  out += "# HELP tensorfold_lanes_total Lanes configured.\n# TYPE tensorfold_lanes_total gauge\n";
  out += "tensorfold_lanes_total " + std::to_string(lanes_total) + "\n";
  auto counter = [&](const char* name, const char* help, const std::string& value) {
    out += cat("# HELP ", name, " ", help, "\n# TYPE ", name, " counter\n", name, " ", value, "\n");
  };
  counter("tensorfold_rounds_total", "Rounds the engine ran.", std::to_string(st.rounds));
  counter("tensorfold_round_seconds_total", "Engine-thread seconds in rounds.", cat(st.round_seconds));
  counter("tensorfold_round_forward_seconds_total",
          "Of those, the model forward: device work and the wait for its draws.", cat(st.forward_seconds));
  counter("tensorfold_round_emit_seconds_total",
          "Of those, handing drawn tokens to their requests and streams.", cat(st.emit_seconds));
  counter("tensorfold_round_prepare_seconds_total",
          "Of those, before the forward: admission, the round's plan and its input.", cat(st.prepare_seconds));
  counter("tensorfold_round_forward_wait_seconds_total",
          "Of the forward, the host blocked on the device (0 on the cpu).", cat(st.forward_wait_seconds));
  counter("tensorfold_decode_rounds_total", "Rounds whose rows all decode (no prefill chunk).",
          std::to_string(st.decode_rounds));
  counter("tensorfold_decode_round_seconds_total", "Engine-thread seconds in those rounds.",
          cat(st.decode_round_seconds));
  counter("tensorfold_decode_round_forward_seconds_total", "Of those, the model forward.",
          cat(st.decode_forward_seconds));
  counter("tensorfold_decode_round_prepare_seconds_total", "Of those, before the forward.",
          cat(st.decode_prepare_seconds));
  counter("tensorfold_decode_round_forward_wait_seconds_total", "Of their forward, the host blocked on the device.",
          cat(st.decode_forward_wait_seconds));
  return out;
}

}  // namespace tf
