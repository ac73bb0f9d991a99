#include "engine/cache_fit.h"

#include <algorithm>
#include <cstdio>

#include "base/error.h"

namespace tf {

std::string format_bytes(uint64_t b) {
  char buf[32];
  if (b >= (1ull << 30)) std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(b) / (1ull << 30));
  else std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(b) / (1ull << 20));
  return buf;
}

MemoryPlan plan_memory(const MemoryPlanInput& in) {
  MemoryPlan p;
  p.limit = in.limit;
  p.footprint = in.footprint;
  p.per_lane_bytes = in.per_lane_bytes;
  p.lanes_bytes = in.per_lane_bytes * static_cast<uint64_t>(in.lanes);
  const uint64_t fixed = in.footprint + p.lanes_bytes + in.host_cache_bytes;
  TF_CHECK(fixed <= in.limit, "memory: the limit of ", format_bytes(in.limit), " does not hold the footprint of ",
           format_bytes(in.footprint), " plus ", in.lanes, " lanes x ", format_bytes(in.per_lane_bytes),
           " at the full context window", in.host_cache_bytes ? cat(" plus the host cache of ", format_bytes(in.host_cache_bytes)) : "",
           "; use fewer lanes (--parallel) or a shorter --context");
  p.budget_bytes = in.limit - fixed;
  if (in.requested_cache_bytes >= 0) {
    const uint64_t want = static_cast<uint64_t>(in.requested_cache_bytes);
    TF_CHECK(want <= p.budget_bytes || in.over_cap, "memory: --prompt-cache-gib asks for ", format_bytes(want),
             " but the cap is ", format_bytes(p.budget_bytes), " (limit ", format_bytes(in.limit), " - footprint ",
             format_bytes(in.footprint), " - ", in.lanes, " lanes x ", format_bytes(in.per_lane_bytes),
             in.host_cache_bytes ? cat(" - host cache ", format_bytes(in.host_cache_bytes)) : "",
             "); pass --prompt-cache-over-cap to use it anyway");
    p.cache_bytes = want;
  } else {
    p.cache_bytes = p.budget_bytes;
  }
  p.cache_pages = static_cast<int>(std::min<uint64_t>(p.cache_bytes / std::max<uint64_t>(1, in.page_bytes), 1u << 24));
  if (p.cache_pages == 0)
    p.note = cat("no prompt cache: ", in.requested_cache_bytes == 0 ? "--prompt-cache-gib is 0" : "nothing is left once every lane has its full window",
                 " (limit ", format_bytes(in.limit), ", footprint ", format_bytes(in.footprint), ", lanes ",
                 format_bytes(p.lanes_bytes), ")");
  else
    p.note = cat("prompt cache ", format_bytes(static_cast<uint64_t>(p.cache_pages) * in.page_bytes), " (", p.cache_pages,
                 " pages) of a ", format_bytes(p.budget_bytes), " budget: limit ", format_bytes(in.limit), " - footprint ",
                 format_bytes(in.footprint), " - ", in.lanes, " lanes x ", format_bytes(in.per_lane_bytes));
  return p;
}

DeviceLimit device_plan_limit(double share, uint64_t total, uint64_t in_use, uint64_t free_now) {
  DeviceLimit d;
  d.bytes = static_cast<uint64_t>(share * static_cast<double>(total));
  if (free_now == 0) return d;
  // Room for what the driver makes on the way (graphs, spill memory of kernels not yet launched).
  const uint64_t margin = std::max<uint64_t>(256ull << 20, total / 100);
  const uint64_t by_free = in_use + (free_now > margin ? free_now - margin : 0);
  if (by_free < d.bytes) d.bytes = by_free, d.by_free = true;
  return d;
}

std::string plan_host_memory(const HostPlanInput& in) {
  const uint64_t lanes = in.per_lane_bytes * static_cast<uint64_t>(in.lanes);
  const uint64_t need = in.footprint + in.host_cache_bytes + in.state_cache_bytes + in.request_bytes + lanes;
  const std::string parts = cat("footprint ", format_bytes(in.footprint), " + host cache ", format_bytes(in.host_cache_bytes),
                                " + kept recurrent states ", format_bytes(in.state_cache_bytes), " + request bodies ",
                                format_bytes(in.request_bytes), " + ", in.lanes, " lanes x ", format_bytes(in.per_lane_bytes));
  TF_CHECK(need <= in.limit, "memory: host memory of ", format_bytes(need), " (", parts, ") passes the host limit of ",
           format_bytes(in.limit), "; use a smaller --host-cache-gib, fewer lanes (--parallel) or a shorter --context");
  return cat("host memory ", format_bytes(need), " of ", format_bytes(in.limit), " at most: ", parts);
}

}  // namespace tf
