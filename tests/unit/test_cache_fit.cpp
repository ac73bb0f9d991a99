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

// A GPU server's host memory: the host tier, kept states, request bodies and lanes against RAM.
TEST(CacheFit, HostMemoryOfAGpuServerCountsItsParts) {
  HostPlanInput in;
  in.limit = 1000 * MiB;
  in.footprint = 100 * MiB;
  in.host_cache_bytes = 400 * MiB;
  in.state_cache_bytes = 50 * MiB;
  in.request_bytes = 100 * MiB;
  in.per_lane_bytes = 10 * MiB;
  in.lanes = 4;
  const std::string note = plan_host_memory(in);
  EXPECT_NE(note.find("host memory 690.0 MiB"), std::string::npos) << note;
  in.lanes = 36;  // 1010 MiB
  try {
    plan_host_memory(in);
    FAIL() << "1010 MiB passed a limit of 1000";
  } catch (const Error& e) {
    const std::string w = e.what();
    EXPECT_NE(w.find("--host-cache-gib"), std::string::npos) << w;
    EXPECT_NE(w.find("host cache 400.0 MiB"), std::string::npos) << w;
    EXPECT_NE(w.find("host limit of 1000.0 MiB"), std::string::npos) << w;
  }
  in.lanes = 35;  // exactly the limit
  EXPECT_NO_THROW(plan_host_memory(in));
}

// A GPU's limit: the share of its memory, unless what is free says less (another program holds
// memory); a free count of 0 means not known.
TEST(CacheFit, DeviceLimitIsTheShareOrWhatIsFree) {
  constexpr uint64_t GiB = 1ull << 30;
  // Plenty free: the share (90 of 100 GiB).
  DeviceLimit d = device_plan_limit(0.9, 100 * GiB, 60 * GiB, 39 * GiB);
  EXPECT_EQ(d.bytes, 90 * GiB);
  EXPECT_FALSE(d.by_free);
  // 30 GiB held elsewhere: in use + free - the margin (1% of the device).
  d = device_plan_limit(0.9, 100 * GiB, 60 * GiB, 10 * GiB);
  EXPECT_EQ(d.bytes, 70 * GiB - GiB);
  EXPECT_TRUE(d.by_free);
  // Less free than the margin: only what is in use, so the planner refuses any lane.
  d = device_plan_limit(0.9, 100 * GiB, 60 * GiB, GiB / 2);
  EXPECT_EQ(d.bytes, 60 * GiB);
  EXPECT_TRUE(d.by_free);
  // The margin is at least 256 MiB on a small device.
  d = device_plan_limit(1.0, 8 * GiB, 2 * GiB, 3 * GiB);
  EXPECT_EQ(d.bytes, 5 * GiB - 256 * MiB);
  // Free memory not known: the share alone.
  d = device_plan_limit(0.5, 100 * GiB, 60 * GiB, 0);
  EXPECT_EQ(d.bytes, 50 * GiB);
  EXPECT_FALSE(d.by_free);
}

}  // namespace tf
