#include "base/thread_pool.h"

#include <algorithm>
#include <atomic>

namespace tf {

int default_thread_count() {
  unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

namespace {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace

ThreadPool::ThreadPool(int n_threads, int spins) : n_threads_(std::clamp(n_threads, 1, 0xffff)), spins_(spins) {
  for (int i = 1; i < n_threads_; ++i) threads_.emplace_back([this] { worker(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_start_.notify_all();
  for (auto& t : threads_) t.join();
}

int ThreadPool::claim(uint64_t g, int* parts) {
  uint64_t v = claim_.load(std::memory_order_acquire);
  for (;;) {
    const uint64_t n = (v >> 16) & 0xffff, next = v & 0xffff;
    if ((v >> 32) != (g & 0xffffffffu) || next >= n) return -1;
    if (claim_.compare_exchange_weak(v, v + 1, std::memory_order_acq_rel, std::memory_order_acquire)) {
      *parts = static_cast<int>(n);
      return static_cast<int>(next);
    }
  }
}

void ThreadPool::run_parts(uint64_t g) {
  int parts = 0;
  for (int part; (part = claim(g, &parts)) >= 0;) {
    // The job outlives every claimed part: the caller waits until all of them are done.
    (*job_.load(std::memory_order_acquire))(part);
    if (done_.fetch_add(1, std::memory_order_acq_rel) + 1 == parts) {
      std::lock_guard<std::mutex> lock(mu_);
      cv_done_.notify_all();
    }
  }
}

void ThreadPool::worker() {
  uint64_t seen = 0;
  for (;;) {
    for (int i = 0; i < spins_ && generation_.load(std::memory_order_acquire) == seen && !stop_.load(); ++i) cpu_relax();
    if (generation_.load(std::memory_order_acquire) == seen) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_start_.wait(lock, [&] { return stop_.load() || generation_.load() != seen; });
    }
    if (stop_.load()) return;
    seen = generation_.load(std::memory_order_acquire);
    run_parts(seen);
  }
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int, int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  const int parts = static_cast<int>(std::min<int64_t>(n_threads_, n));
  auto body = [&](int t) {
    const int64_t begin = n * t / parts, end = n * (t + 1) / parts;
    if (begin < end) fn(t, begin, end);
  };
  if (parts == 1) {
    body(0);
    return;
  }
  std::function<void(int)> job = body;
  job_.store(&job, std::memory_order_release);
  done_.store(0, std::memory_order_release);
  const uint64_t g = generation_.load(std::memory_order_relaxed) + 1;
  // The caller owns part 0; the others go to whichever thread claims them first.
  claim_.store(((g & 0xffffffffu) << 32) | (static_cast<uint64_t>(parts) << 16) | 1, std::memory_order_release);
  {
    std::lock_guard<std::mutex> lock(mu_);
    generation_.store(g, std::memory_order_release);
  }
  cv_start_.notify_all();
  body(0);
  done_.fetch_add(1, std::memory_order_acq_rel);
  run_parts(g);
  for (int i = 0; i < spins_ && done_.load(std::memory_order_acquire) != parts; ++i) cpu_relax();
  if (done_.load(std::memory_order_acquire) != parts) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_done_.wait(lock, [&] { return done_.load() == parts; });
  }
}

void ThreadPool::run_tasks(int64_t n_tasks, const std::function<void(int64_t)>& fn) {
  std::atomic<int64_t> next{0};
  parallel_for(n_threads_, [&](int, int64_t, int64_t) {
    for (int64_t t; (t = next.fetch_add(1)) < n_tasks;) fn(t);
  });
}

}  // namespace tf
