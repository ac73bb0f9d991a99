#include <gtest/gtest.h>

#include <algorithm>

#include "backend/cuda/matmul_split.h"

namespace tf::cuda::mm {

namespace {
constexpr int64_t kTarget = 4 * 132, kUnit = 256;

// The model slice_len_by_cost minimizes: waves of kTarget blocks, each its slice plus a unit.
int64_t cost(int64_t K, int64_t tiles, int64_t ks) {
  return (tiles * slice_count(K, ks) + kTarget - 1) / kTarget * (ks + kUnit);
}
}  // namespace

// Llama-3.1-8B's few-row matmuls (32 columns a tile): the default split as the kernels have used
// it, and the cost model's choice.
TEST(MatmulSplit, LlamaShapes) {
  struct Case {
    int64_t K, N, by_count, by_cost;
  };
  const Case cases[] = {
      {4096, 4096, 1024, 1024},     // q, o: 4 slices either way
      {4096, 1024, 256, 256},       // k, v: 16 slices
      {14336, 4096, 3072, 3584},    // down: 5 slices (640 blocks, two waves) against 4
      {4096, 14336, 2048, 4096},    // gate, up: 2 slices against 1
      {4096, 128256, 4096, 4096},   // lm head: one slice
  };
  for (const Case& c : cases) {
    const int64_t tiles = (c.N + 31) / 32;
    EXPECT_EQ(slice_len_by_count(c.K, tiles, kTarget, kUnit), c.by_count) << c.K << "x" << c.N;
    EXPECT_EQ(slice_len_by_cost(c.K, tiles, kTarget, kUnit), c.by_cost) << c.K << "x" << c.N;
  }
}

// Over many shapes: a slice is K itself or a multiple of the unit below K, there are at most 64,
// and the cost model never picks a split its own model rates worse than the default.
TEST(MatmulSplit, SlicesAreWholeUnitsAndTheCostModelNeverLoses) {
  for (int64_t K = 8; K <= 40000; K = K * 5 / 4 + 8) {
    for (int64_t tiles = 1; tiles <= 6000; tiles = tiles * 3 / 2 + 1) {
      for (const int64_t ks : {slice_len_by_count(K, tiles, kTarget, kUnit),
                               slice_len_by_cost(K, tiles, kTarget, kUnit)}) {
        ASSERT_TRUE(ks == K || (ks < K && ks % kUnit == 0)) << K << " " << tiles << " " << ks;
        ASSERT_LE(slice_count(K, ks), 64) << K << " " << tiles;
      }
      ASSERT_LE(cost(K, tiles, slice_len_by_cost(K, tiles, kTarget, kUnit)),
                cost(K, tiles, slice_len_by_count(K, tiles, kTarget, kUnit)))
          << K << " " << tiles;
    }
  }
}

// The memo gives what the computation gives, computes each shape once while it fits, and
// computes again, correctly, after an entry was replaced.
TEST(MatmulSplit, MemoAnswersAsTheComputation) {
  SliceMemo memo;
  int calls = 0;
  auto exact = [](int64_t K, int64_t N) { return slice_len_by_cost(K, (N + 31) / 32, kTarget, kUnit); };
  auto ask = [&](int64_t K, int64_t N) {
    return memo.get(K, N, [&] {
      ++calls;
      return exact(K, N);
    });
  };
  const int64_t shapes[][2] = {{4096, 4096}, {4096, 1024}, {14336, 4096}, {4096, 14336}, {4096, 128256}};
  for (int round = 0; round < 3; ++round)
    for (const auto& s : shapes) EXPECT_EQ(ask(s[0], s[1]), exact(s[0], s[1]));
  EXPECT_EQ(calls, 5);
  // K and N swapped is another shape.
  EXPECT_EQ(ask(1024, 4096), exact(1024, 4096));
  EXPECT_EQ(calls, 6);
  // Forty more shapes push every entry out; the first shapes are then computed again.
  for (int64_t i = 0; i < 40; ++i) EXPECT_EQ(ask(256 * (i + 1), 96 + 32 * i), exact(256 * (i + 1), 96 + 32 * i));
  EXPECT_EQ(calls, 46);
  for (const auto& s : shapes) EXPECT_EQ(ask(s[0], s[1]), exact(s[0], s[1]));
  EXPECT_EQ(calls, 51);
}

namespace {
// Whether an MoE expert launch of m rows folds its slices, as the CUDA grouped launch decides:
// work items as moe_experts sizes them, one-tile blocks of 32 columns (two tiles a warp past a
// wave), the default cap of 24 waves of slice blocks.
bool grouped_folds(int64_t K, int64_t N, int tables, int64_t E, int64_t k, int64_t m) {
  const int64_t P = m * k, max_items = P / 16 + std::min(E, P);
  const int64_t blocks1 = (N + 31) / 32 * tables * max_items;
  const int64_t cols = blocks1 > kTarget ? 64 : 32;
  const int64_t folded = (N + cols - 1) / cols * tables * max_items;
  const int64_t ks = slice_len_by_cost(K, (N + 31) / 32, kTarget, kUnit);
  return slice_count(K, ks) > 1 && folded >= kTarget / 2 &&
         !slice_blocks_take(blocks1, folded, K, ks, kTarget, 256, 24 * kTarget);
}
}  // namespace

// The slice-block rule at the shapes it was timed on: Nemotron-3-Nano's experts (two-step
// slices) run slice blocks at 2-8 rows and fold at one row and at 16 or more; Qwen3-30B-A3B's
// (one-step slices) fold at every row count.
TEST(MatmulSplit, MoeSliceBlocksWhereTheyTimedFaster) {
  for (const int64_t m : {1, 2, 4, 8, 16, 32, 64, 128}) {
    const bool slices_as_blocks = m >= 2 && m <= 8;
    EXPECT_EQ(grouped_folds(2688, 1856, 1, 128, 6, m), !slices_as_blocks) << "Nemotron up, m=" << m;
    EXPECT_EQ(grouped_folds(1856, 2688, 1, 128, 6, m), !slices_as_blocks) << "Nemotron down, m=" << m;
    EXPECT_TRUE(grouped_folds(2048, 768, 2, 128, 8, m)) << "Qwen3 gate + up, m=" << m;
    EXPECT_TRUE(grouped_folds(768, 2048, 1, 128, 8, m)) << "Qwen3 down, m=" << m;
  }
  // A slice of one step, one wave of blocks, or a zero cap never takes slice blocks.
  EXPECT_FALSE(slice_blocks_take(1000, 600, 2048, 256, kTarget, 256, 1 << 30));
  EXPECT_FALSE(slice_blocks_take(kTarget, 300, 2688, 512, kTarget, 256, 1 << 30));
  EXPECT_FALSE(slice_blocks_take(1000, 600, 2688, 512, kTarget, 256, 0));
  EXPECT_TRUE(slice_blocks_take(1000, 600, 2688, 512, kTarget, 256, 1 << 30));
}

}  // namespace tf::cuda::mm
