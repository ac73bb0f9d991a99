#include "engine/scheduler.h"

#include <algorithm>

namespace tf {

int RoundPlan::rows() const {
  int n = 0;
  for (const auto& it : items) n += it.end - it.begin;
  return n;
}

int chunk_end(int begin, int prompt_len, int grid, const std::vector<int>& marks) {
  int end = std::min((begin / grid + 1) * grid, prompt_len);
  for (int m : marks)
    if (m > begin && m < end) end = m;
  return end;
}

RoundPlan plan_round(const std::vector<LaneStatus>& lanes, int max_rows, int grid) {
  RoundPlan plan;
  int rows = 0;
  for (const auto& l : lanes) {
    if (l.computed >= l.prompt_len && l.computed < l.length) {
      plan.items.push_back({l.lane, l.computed, l.computed + 1, true});
      ++rows;
    }
  }
  for (const auto& l : lanes) {
    if (l.computed >= l.prompt_len) continue;
    int end = chunk_end(l.computed, l.prompt_len, grid, l.marks);
    int n = end - l.computed;
    if (rows > 0 && rows + n > max_rows) continue;
    plan.items.push_back({l.lane, l.computed, end, false});
    rows += n;
  }
  return plan;
}

}  // namespace tf
