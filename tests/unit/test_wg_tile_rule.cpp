#include <gtest/gtest.h>

#include "backend/cuda/wg_tile_rule.h"

namespace tf::cuda::mm {

namespace {
constexpr int64_t kSms = 132;

int64_t waves(int64_t tiles) { return (tiles + kSms - 1) / kSms; }
}  // namespace

// Llama-3.1-8B's prefill shapes: at 4,096 rows every matmul takes the 256-row tile; at a 512-row
// chunk gate and up (112 column tiles) do, while o and down (32 column tiles) stay on the 128-row
// tile, whose 128 blocks fill one wave where the 256-row tile's 64 would leave half the SMs idle.
TEST(WgTileRule, LlamaShapes) {
  for (const int64_t N : {1024, 4096, 14336}) EXPECT_TRUE(wide_tile_pays(4096, N, kSms)) << N;
  EXPECT_TRUE(wide_tile_pays(512, 14336, kSms));
  EXPECT_FALSE(wide_tile_pays(512, 4096, kSms));
  EXPECT_FALSE(wide_tile_pays(512, 1024, kSms));
  // A server round: a 512-token chunk and 64 decode rows.
  EXPECT_TRUE(wide_tile_pays(576, 14336, kSms));
  EXPECT_TRUE(wide_tile_pays(576, 4096, kSms));
}

// Over many shapes: the 256-row tile is taken only where it needs fewer waves, and never where one
// 128-row block a column covers M.
TEST(WgTileRule, TakenOnlyWhereItsWavesAreFewer) {
  int taken = 0;
  for (int64_t M = 65; M <= 20000; M = M * 9 / 8 + 7) {
    for (int64_t N = 8; N <= 160000; N = N * 3 / 2 + 8) {
      const int64_t cols = (N + 127) / 128;
      const int64_t wa = waves((M + 127) / 128 * cols), wd = waves((M + 255) / 256 * cols);
      if (!wide_tile_pays(M, N, kSms)) continue;
      ++taken;
      ASSERT_LT(wd, wa) << M << "x" << N;
      ASSERT_GT(M, 128) << N;
    }
  }
  EXPECT_GT(taken, 100);
}

}  // namespace tf::cuda::mm
