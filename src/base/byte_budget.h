#pragma once
// Bytes held at once by many threads, capped: take() reserves n or refuses (taking nothing), give()
// returns them. A refused take never counts, so it cannot make another fail.
#include <atomic>
#include <cstdint>

namespace tf {

class ByteBudget {
 public:
  explicit ByteBudget(uint64_t cap) : cap_(cap) {}
  bool take(uint64_t n) {
    uint64_t held = held_.load();
    do {
      if (n > cap_ || held > cap_ - n) return false;
    } while (!held_.compare_exchange_weak(held, held + n));
    return true;
  }
  void give(uint64_t n) { held_ -= n; }
  uint64_t held() const { return held_.load(); }
  uint64_t cap() const { return cap_; }

 private:
  const uint64_t cap_;
  std::atomic<uint64_t> held_{0};
};

}  // namespace tf
