#pragma once
// The memory planner: at startup, what is left for the prompt cache once the weights, the
// fixed buffers and every lane's first prompt at the full context window are counted.
#include <cstdint>
#include <string>

namespace tf {

struct MemoryPlanInput {
  uint64_t limit = 0;           // bytes the process may use
  uint64_t footprint = 0;       // measured after weights and fixed buffers, all touched
  uint64_t per_lane_bytes = 0;  // what one lane adds on its first prompt at the full window
  int lanes = 1;
  uint64_t page_bytes = 1;      // one KV page, every layer, K and V
  int64_t requested_cache_bytes = -1;  // --prompt-cache-gib; -1 when not given
  bool over_cap = false;               // --prompt-cache-over-cap
  uint64_t host_cache_bytes = 0;       // host tier: on the CPU it shares the limit (a GPU plans it apart)
};

struct MemoryPlan {
  uint64_t limit = 0, footprint = 0, per_lane_bytes = 0, lanes_bytes = 0;
  uint64_t budget_bytes = 0;  // what remains for the prompt cache
  uint64_t cache_bytes = 0;   // what the device tier of the cache gets
  int cache_pages = 0;
  std::string note;           // a line for the startup log
};

// Throws tf::Error naming the numbers when the lanes alone do not fit the limit, or when an
// explicit cache size passes the budget without over_cap.
MemoryPlan plan_memory(const MemoryPlanInput& in);

// What a server computing on a GPU adds to host memory as it runs, against a share of the RAM.
struct HostPlanInput {
  uint64_t limit = 0;              // host bytes the process may use
  uint64_t footprint = 0;          // anonymous memory at startup (mapped weight files are not counted)
  uint64_t host_cache_bytes = 0;   // --host-cache-gib
  uint64_t state_cache_bytes = 0;  // kept recurrent states of cached prompts
  uint64_t request_bytes = 0;      // request bodies being received and queued
  uint64_t per_lane_bytes = 0;     // a lane's request state at the full window
  int lanes = 1;
};

// Throws tf::Error naming the numbers when they pass the limit; else the line for the startup log.
std::string plan_host_memory(const HostPlanInput& in);

// What a server computing on a GPU may plan for: its share of the device's memory, but no more
// than it uses now plus what the device has free less a margin, so memory another program (or the
// driver) holds is never planned for. free_now 0: not known, the share alone.
struct DeviceLimit {
  uint64_t bytes = 0;
  bool by_free = false;  // free memory, not the share, set it
};
DeviceLimit device_plan_limit(double share, uint64_t total, uint64_t in_use, uint64_t free_now);

std::string format_bytes(uint64_t bytes);

}  // namespace tf
