#pragma once
// Fixed worker pool; work is split into static ranges so results never depend on timing.
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
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Calls fn(thread_index, begin, end) over [0, n) split into size() contiguous ranges.
  void parallel_for(int64_t n, const std::function<void(int, int64_t, int64_t)>& fn);

  // Calls fn(task) for each task in [0, n_tasks), tasks handed out in order.
  void run_tasks(int64_t n_tasks, const std::function<void(int64_t)>& fn);

 private:
  void worker(int index);

  int n_threads_;
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable cv_start_, cv_done_;
  std::atomic<const std::function<void(int)>*> job_{nullptr};
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
};

int default_thread_count();

}  // namespace tf
