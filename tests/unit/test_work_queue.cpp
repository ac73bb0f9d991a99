// WorkQueue: tasks run off the caller's thread, the backlog is bounded, stop() finishes it.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <stdexcept>
#include <thread>

#include "base/error.h"
#include "base/work_queue.h"

namespace tf {
namespace {

TEST(WorkQueue, RunsTasksOnItsOwnThreads) {
  WorkQueue q(2, 8);
  std::promise<std::thread::id> where;
  ASSERT_TRUE(q.post([&] { where.set_value(std::this_thread::get_id()); }));
  EXPECT_NE(where.get_future().get(), std::this_thread::get_id());
}

TEST(WorkQueue, RefusesPastItsBacklogAndAfterStop) {
  WorkQueue q(1, 2);
  std::promise<void> release;
  std::shared_future<void> gate = release.get_future().share();
  std::promise<void> started;
  ASSERT_TRUE(q.post([&] {
    started.set_value();
    gate.wait();
  }));
  started.get_future().wait();  // the one worker is busy: what follows waits in the backlog
  std::atomic<int> ran{0};
  EXPECT_TRUE(q.post([&] { ++ran; }));
  EXPECT_TRUE(q.post([&] { ++ran; }));
  EXPECT_FALSE(q.post([&] { ++ran; })) << "a third waiting task passed a backlog of 2";
  EXPECT_EQ(q.waiting(), 2u);
  release.set_value();
  q.stop();  // runs the backlog before it returns
  EXPECT_EQ(ran.load(), 2);
  EXPECT_FALSE(q.post([&] { ++ran; }));
  q.stop();
}

TEST(WorkQueue, ATaskThatThrowsLeavesTheWorkerRunning) {
  WorkQueue q(1, 4);
  ASSERT_TRUE(q.post([] { throw std::runtime_error("planted"); }));
  std::promise<int> after;
  ASSERT_TRUE(q.post([&] { after.set_value(7); }));
  auto f = after.get_future();
  ASSERT_EQ(f.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_EQ(f.get(), 7);
}

TEST(WorkQueue, RejectsAnEmptyShape) {
  EXPECT_THROW(WorkQueue(0, 4), Error);
  EXPECT_THROW(WorkQueue(1, 0), Error);
}

}  // namespace
}  // namespace tf
