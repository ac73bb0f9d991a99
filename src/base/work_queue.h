#pragma once
// A few threads that run posted tasks in order, with a bounded backlog: work that must not hold
// an io thread (templating and tokenizing a long prompt), without letting a flood queue unbounded.
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tf {

class WorkQueue {
 public:
  WorkQueue(int threads, size_t capacity);
  ~WorkQueue();  // stop()
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  // Queues f; false when capacity tasks are already waiting or stop() has begun. An exception
  // escaping f is logged and the worker goes on.
  bool post(std::function<void()> f);
  // Refuses new tasks, runs the ones queued, joins the threads; safe to call more than once.
  void stop();
  // Tasks queued and not yet taken by a worker.
  size_t waiting() const;

 private:
  void worker();

  mutable std::mutex mu_;
  std::mutex join_mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  std::vector<std::thread> threads_;
  const size_t capacity_;
  bool stopping_ = false;
  int idle_ = 0;  // workers waiting for a task
};

}  // namespace tf
