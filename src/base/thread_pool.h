#pragma once
// Fixed worker pool; work is split into static ranges so results never depend on timing. The
// ranges are claimed by whichever thread comes first (the caller included), so a worker that the
// OS has not scheduled never holds up the caller: it finds nothing left to do.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tf {

class ThreadPool {
 public:
  // Busy-wait kSpins polls before sleeping: back-to-back ops of one token reach the workers while
  // they still spin, so a wake-up costs no system call. A pool used once a round passes 0.
  static constexpr int kSpins = 1 << 15;
  explicit ThreadPool(int n_threads, int spins = kSpins);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Calls fn(part, begin, end) over [0, n) split into min(size(), n) contiguous ranges; each
  // range is computed once, by any thread.
  void parallel_for(int64_t n, const std::function<void(int, int64_t, int64_t)>& fn);

  // Calls fn(task) for each task in [0, n_tasks), tasks handed out in order.
  void run_tasks(int64_t n_tasks, const std::function<void(int64_t)>& fn);

 private:
  void worker();
  // Claims the next unclaimed part of generation g (and says how many parts it has); -1 when
  // none is left or g has passed.
  int claim(uint64_t g, int* parts);
  // Runs parts of generation g until none is left.
  void run_parts(uint64_t g);

  int n_threads_;
  int spins_;
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable cv_start_, cv_done_;
  std::atomic<const std::function<void(int)>*> job_{nullptr};
  std::atomic<uint64_t> generation_{0};
  // Generation (high 32 bits), parts (16) and next unclaimed part (low 16) of the current job.
  std::atomic<uint64_t> claim_{0};
  std::atomic<int> done_{0};  // parts finished in the current generation
  std::atomic<bool> stop_{false};
};

int default_thread_count();

}  // namespace tf
