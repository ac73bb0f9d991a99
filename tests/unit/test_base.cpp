#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <random>
#include <thread>
#include <vector>

#include "base/byte_budget.h"
#include "base/dtype.h"
#include "base/thread_pool.h"

namespace tf {

TEST(DType, F16RoundTripsEveryHalf) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    float f = f16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    EXPECT_EQ(f32_to_f16(f), h) << h;
  }
}

TEST(DType, Bf16RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(3.140625f)), 3.140625f);
  // 1 + 2^-8 lies halfway between two bf16 values; ties go to the even mantissa.
  EXPECT_EQ(f32_to_bf16(1.00390625f), 0x3f80);
}

TEST(ByteBudget, TakesUpToItsCapAndARefusalTakesNothing) {
  ByteBudget b(100);
  EXPECT_TRUE(b.take(60));
  EXPECT_FALSE(b.take(41));
  EXPECT_EQ(b.held(), 60u);
  EXPECT_TRUE(b.take(40));  // exactly the cap
  EXPECT_FALSE(b.take(1));
  EXPECT_FALSE(b.take(UINT64_MAX));
  b.give(100);
  EXPECT_EQ(b.held(), 0u);
  EXPECT_FALSE(b.take(101));
}

TEST(ByteBudget, ThreadsTakingAndGivingNeverPassTheCap) {
  ByteBudget b(1000);
  std::atomic<uint64_t> most{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < 8; ++t)
    ts.emplace_back([&, t] {
      for (int i = 0; i < 20000; ++i) {
        const uint64_t n = 100 + 37 * static_cast<uint64_t>((t + i) % 9);
        if (!b.take(n)) continue;
        uint64_t seen = b.held(), prev = most.load();
        while (seen > prev && !most.compare_exchange_weak(prev, seen)) {
        }
        b.give(n);
      }
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(b.held(), 0u);
  EXPECT_LE(most.load(), 1000u);
  EXPECT_GT(most.load(), 0u);
}

TEST(ThreadPool, CoversEveryIndexOnce) {
  ThreadPool pool(4);
  std::vector<int> hits(1001, 0);
  pool.parallel_for(1001, [&](int, int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) hits[i]++;
  });
  for (int h : hits) EXPECT_EQ(h, 1);
}

// Parts are claimed by whichever thread is free; each still runs once with its fixed range.
TEST(ThreadPool, EachPartOnceWhateverTheTiming) {
  ThreadPool pool(3);
  std::mt19937 rng(5);
  for (int round = 0; round < 300; ++round) {
    const int64_t n = 1 + static_cast<int64_t>(rng() % 50);
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
    std::vector<std::atomic<int>> part_seen(3);
    const int delay = static_cast<int>(rng() % 4);
    pool.parallel_for(n, [&](int part, int64_t b, int64_t e) {
      part_seen[static_cast<size_t>(part)]++;
      const int parts = static_cast<int>(std::min<int64_t>(3, n));
      EXPECT_EQ(b, n * part / parts);
      EXPECT_EQ(e, n * (part + 1) / parts);
      if (part == delay) std::this_thread::sleep_for(std::chrono::microseconds(200));
      for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
    });
    for (auto& h : hits) ASSERT_EQ(h.load(), 1) << "round " << round;
    for (auto& p : part_seen) ASSERT_LE(p.load(), 1) << "a part ran twice in round " << round;
  }
  std::atomic<int64_t> sum{0};
  pool.run_tasks(1000, [&](int64_t t) { sum += t; });
  EXPECT_EQ(sum.load(), 999 * 1000 / 2);
}

}  // namespace tf
