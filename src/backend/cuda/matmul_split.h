#pragma once
// How the CUDA matmul cuts K into slices (the order rule's split, cuda_matmul.cuh): a function of
// K and the column tiles alone, plain C++ so the CPU tests can check it.
#include <algorithm>
#include <cstdint>

namespace tf::cuda::mm {

// How many slices of length ks cover K.
inline int64_t slice_count(int64_t K, int64_t ks) { return (K + ks - 1) / ks; }

// The length of `want` slices of K, rounded up to a multiple of `unit`; K itself for one slice.
inline int64_t slice_len(int64_t K, int64_t want, int64_t unit) {
  return std::min(K, ((K + want - 1) / want + unit - 1) / unit * unit);
}

// The slice length for K over `tiles` column tiles when a launch fills `target` blocks at once.
inline int64_t slice_len_by_count(int64_t K, int64_t tiles, int64_t target, int64_t unit) {
  return slice_len(K, std::min<int64_t>(64, (target + tiles - 1) / tiles), unit);
}

// The slice length that minimizes a few-row launch's time in a simple model: the blocks run in
// waves of `target`, and a block takes its slice plus one `unit` of start-up. Ties go to fewer
// slices. Splits past 64 slices are not considered.
inline int64_t slice_len_by_cost(int64_t K, int64_t tiles, int64_t target, int64_t unit) {
  int64_t best = K, best_cost = -1;
  for (int64_t want = 1; want <= 64; ++want) {
    const int64_t ks = slice_len(K, want, unit);
    const int64_t cost = (tiles * slice_count(K, ks) + target - 1) / target * (ks + unit);
    if (best_cost < 0 || cost < best_cost || (cost == best_cost && ks > best)) best = ks, best_cost = cost;
  }
  return best;
}

// Whether a grouped (MoE) launch runs its slices of length ks as blocks of their own instead of
// folding them in one block: its one-tile blocks (blocks1) pass a wave of `target`, a slice holds
// two or more steps of `step` k and is shorter than K, and its `folded` (tile, item) blocks times
// the slice count stay within `cap` blocks.
inline bool slice_blocks_take(int64_t blocks1, int64_t folded, int64_t K, int64_t ks, int64_t target,
                              int64_t step, int64_t cap) {
  return cap > 0 && blocks1 > target && ks < K && ks >= 2 * step && folded * slice_count(K, ks) <= cap;
}

// The last few slice lengths by (K, N), so a launch finds its split without rerunning the cost
// model: a model asks for a handful of shapes every token. One per thread (no locking).
class SliceMemo {
 public:
  // The slice length of (K, N): remembered, or compute() remembered in the oldest entry's place.
  template <class F>
  int64_t get(int64_t K, int64_t N, F compute) {
    for (const Entry& e : entries_)
      if (e.K == K && e.N == N) return e.ks;
    const int64_t ks = compute();
    entries_[next_] = {K, N, ks};
    next_ = (next_ + 1) % kEntries;
    return ks;
  }

 private:
  static constexpr int kEntries = 16;
  struct Entry {
    int64_t K = -1, N = -1, ks = 0;
  };
  Entry entries_[kEntries];
  int next_ = 0;
};

}  // namespace tf::cuda::mm
