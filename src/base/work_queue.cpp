#include "base/work_queue.h"

#include <exception>

#include "base/error.h"
#include "base/log.h"

namespace tf {

WorkQueue::WorkQueue(int threads, size_t capacity) : capacity_(capacity) {
  TF_CHECK(threads >= 1 && capacity >= 1, "work queue: ", threads, " threads and room for ", capacity,
           " tasks; both must be at least 1");
  threads_.reserve(static_cast<size_t>(threads));
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { worker(); });
}

WorkQueue::~WorkQueue() { stop(); }

bool WorkQueue::post(std::function<void()> f) {
  bool wake;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ || tasks_.size() >= capacity_) return false;
    tasks_.push_back(std::move(f));
    wake = idle_ > 0;  // a busy worker takes the next task itself, without a wake-up call
  }
  if (wake) cv_.notify_one();
  return true;
}

void WorkQueue::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  std::lock_guard<std::mutex> joining(join_mu_);  // two stop() calls never join one thread twice
  for (auto& t : threads_)
    if (t.joinable() && t.get_id() != std::this_thread::get_id()) t.join();
}

size_t WorkQueue::waiting() const {
  std::lock_guard<std::mutex> lock(mu_);
  return tasks_.size();
}

void WorkQueue::worker() {
  for (;;) {
    std::function<void()> f;
    {
      std::unique_lock<std::mutex> lock(mu_);
      ++idle_;
      cv_.wait(lock, [&] { return stopping_ || !tasks_.empty(); });
      --idle_;
      if (tasks_.empty()) return;  // stopping, and the backlog is done
      f = std::move(tasks_.front());
      tasks_.pop_front();
    }
    try {
      f();
    } catch (const std::exception& e) {
      log_error("work queue: a task failed: ", e.what());
    } catch (...) {
      log_error("work queue: a task failed");
    }
  }
}

}  // namespace tf
