#include <gtest/gtest.h>

#include "base/error.h"
#include "engine/cache_fit.h"

namespace tf {

namespace {
constexpr uint64_t MiB = 1ull << 20;
}

TEST(CacheFit, GivesWhatRemainsToTheCache) {
  MemoryPlanInput in;
  in.limit = 1000 * MiB;
  in.footprint = 200 * MiB;
  in.per_lane_bytes = 100 * MiB;
  in.lanes = 4;
  in.page_bytes = MiB;
  MemoryPlan p = plan_memory(in);
  EXPECT_EQ(p.budget_bytes, 400 * MiB);
  EXPECT_EQ(p.cache_pages, 400);
  EXPECT_NE(p.note.find("prompt cache"), std::string::npos);
}

TEST(CacheFit, NothingLeftMeansNoCacheAndSaysSo) {
  MemoryPlanInput in;
  in.limit = 600 * MiB;
  in.footprint = 200 * MiB;
  in.per_lane_bytes = 100 * MiB;
  in.lanes = 4;
  MemoryPlan p = plan_memory(in);
  EXPECT_EQ(p.cache_pages, 0);
  EXPECT_NE(p.note.find("no prompt cache"), std::string::npos) << p.note;
}

TEST(CacheFit, LanesThatDoNotFitStopStartup) {
  MemoryPlanInput in;
  in.limit = 500 * MiB;
  in.footprint = 200 * MiB;
  in.per_lane_bytes = 100 * MiB;
  in.lanes = 4;
  try {
    plan_memory(in);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--parallel"), std::string::npos) << e.what();
  }
}

TEST(CacheFit, ExplicitCacheAboveTheCapNamesTheNumbers) {
  MemoryPlanInput in;
  in.limit = 1000 * MiB;
  in.footprint = 200 * MiB;
  in.per_lane_bytes = 100 * MiB;
  in.lanes = 4;
  in.page_bytes = MiB;
  in.requested_cache_bytes = 500 * MiB;
  try {
    plan_memory(in);
    FAIL();
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("cap is 400.0 MiB"), std::string::npos) << msg;
    EXPECT_NE(msg.find("limit 1000.0 MiB"), std::string::npos) << msg;
    EXPECT_NE(msg.find("--prompt-cache-over-cap"), std::string::npos) << msg;
  }
  in.over_cap = true;
  EXPECT_EQ(plan_memory(in).cache_pages, 500);
  in.over_cap = false;
  in.requested_cache_bytes = 300 * MiB;
  EXPECT_EQ(plan_memory(in).cache_pages, 300);
}

}  // namespace tf
