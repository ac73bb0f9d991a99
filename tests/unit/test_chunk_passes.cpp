#include <gtest/gtest.h>

#include "backend/cuda/chunk_passes.h"

namespace tf::cuda {
namespace {

TEST(ChunkPasses, CapacityBoundsEveryRoundOfThoseRows) {
  EXPECT_EQ(chunk_capacity(4096, 64), 65);
  EXPECT_EQ(chunk_capacity(1, 64), 2);
  EXPECT_EQ(chunk_capacity(65, 64), 3);
  // One sequence of r rows never needs more than the capacity of r rows.
  for (int64_t r = 1; r < 1000; ++r) EXPECT_LE((r + 63) / 64, chunk_capacity(r, 64));
}

TEST(ChunkPasses, OnePassWhenTheChunksFit) {
  // 300 + 65 + 63 + 129 rows: 5 + 2 + 1 + 3 = 11 chunks.
  EXPECT_EQ(chunk_passes({300, 65, 63, 129}, 64, 11), (std::vector<size_t>{0, 4}));
  EXPECT_EQ(chunk_passes({}, 64, 3), (std::vector<size_t>{0, 0}));
}

TEST(ChunkPasses, WholeSequencesInOrderWithinTheCapacity) {
  EXPECT_EQ(chunk_passes({300, 65, 63, 129}, 64, 10), (std::vector<size_t>{0, 3, 4}));
  EXPECT_EQ(chunk_passes({300, 65, 63, 129}, 64, 5), (std::vector<size_t>{0, 1, 3, 4}));
  // 64 one-row sequences against the capacity of their 64 rows (2 chunks).
  const std::vector<int64_t> ones(64, 1);
  const auto at = chunk_passes(ones, 64, chunk_capacity(64, 64));
  ASSERT_EQ(at.size(), 33u);
  for (size_t p = 0; p + 1 < at.size(); ++p) EXPECT_EQ(at[p + 1] - at[p], 2u);
}

TEST(ChunkPasses, ASequenceOverTheCapacityGetsAPassOfItsOwn) {
  EXPECT_EQ(chunk_passes({10, 500, 10}, 64, 3), (std::vector<size_t>{0, 1, 2, 3}));
}

}  // namespace
}  // namespace tf::cuda
