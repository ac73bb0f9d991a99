#include "base/thread_pool.h"

#include <algorithm>
#include <atomic>

namespace tf {

int default_thread_count() {
  unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

namespace {

// Busy-wait this many polls before sleeping: back-to-back ops of one token reach the workers
// while they still spin, so a wake-up costs no system call.
constexpr int kSpins = 1 << 15;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::max(1, n_threads)) {
  for (int i = 1; i < n_threads_; ++i) threads_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_start_.notify_all();
  for (auto& t : threads_) t.join();
}

void ThreadPool::worker(int index) {
  uint64_t seen = 0;
  for (;;) {
    for (int i = 0; i < kSpins && generation_.load(std::memory_order_acquire) == seen && !stop_.load(); ++i) cpu_relax();
    if (generation_.load(std::memory_order_acquire) == seen) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_start_.wait(lock, [&] { return stop_.load() || generation_.load() != seen; });
    }
    if (stop_.load()) return;
    seen = generation_.load(std::memory_order_acquire);
    (*job_.load(std::memory_order_acquire))(index);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard<std::mutex> lock(mu_);
      cv_done_.notify_all();
    }
  }
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int, int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  int parts = static_cast<int>(std::min<int64_t>(n_threads_, n));
  auto body = [&](int t) {
    if (t >= parts) return;
    int64_t begin = n * t / parts, end = n * (t + 1) / parts;
    if (begin < end) fn(t, begin, end);
  };
  if (parts == 1) {
    body(0);
    return;
  }
  std::function<void(int)> job = body;
  job_.store(&job, std::memory_order_release);
  pending_.store(n_threads_ - 1, std::memory_order_release);
  {
    std::lock_guard<std::mutex> lock(mu_);
    generation_.fetch_add(1, std::memory_order_acq_rel);
  }
  cv_start_.notify_all();
  body(0);
  for (int i = 0; i < kSpins && pending_.load(std::memory_order_acquire) != 0; ++i) cpu_relax();
  if (pending_.load(std::memory_order_acquire) != 0) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_done_.wait(lock, [&] { return pending_.load() == 0; });
  }
}

void ThreadPool::run_tasks(int64_t n_tasks, const std::function<void(int64_t)>& fn) {
  std::atomic<int64_t> next{0};
  parallel_for(n_threads_, [&](int, int64_t, int64_t) {
    for (int64_t t; (t = next.fetch_add(1)) < n_tasks;) fn(t);
  });
}

}  // namespace tf
