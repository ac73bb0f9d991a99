#pragma once
// Round planning as a plain function of the running lanes and the budgets, so it can be
// tested without a model. Prefill chunks end on a fixed grid (or the prompt end) and are
// never cut by load: a chunk either fits a round whole or waits for the next.
#include <cstdint>
#include <vector>

namespace tf {

struct LaneStatus {
  int lane = 0;
  int computed = 0;    // positions already in the KV cache
  int prompt_len = 0;
  int length = 0;      // tokens known (prompt + generated)
  std::vector<int> marks;  // extra cut points (prompt-cache marks), any order
};

struct PlanItem {
  int lane = 0;
  int begin = 0;  // first position computed this round
  int end = 0;    // one past the last
  bool decode = false;
};

struct RoundPlan {
  std::vector<PlanItem> items;
  int rows() const;
};

// End of the prefill chunk that starts at `begin`: the first of the next multiple of `grid`,
// the first mark past `begin` (marks in any order) and the prompt end.
int chunk_end(int begin, int prompt_len, int grid, const std::vector<int>& marks = {});

// Decode rows for every lane whose prompt is done; then whole prefill chunks in lane order
// while they fit max_rows (the first chunk always fits when no rows are planned yet).
RoundPlan plan_round(const std::vector<LaneStatus>& lanes, int max_rows, int grid);

}  // namespace tf
