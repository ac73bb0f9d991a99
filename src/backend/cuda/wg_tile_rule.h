#pragma once
// Which warpgroup tile runs a many-row matmul under --matmul-input bf16: plain C++ so the CPU tests
// can check it.
#include <cstdint>

namespace tf::cuda::mm {

// Whether the 256 x 128 tile (d) takes M x N rather than the 128 x 128 one (a) on `sms` SMs: its
// waves of one block an SM take less time, a block of d doing twice a's work and counted at 1.25x
// a's rate.
inline bool wide_tile_pays(int64_t M, int64_t N, int64_t sms) {
  const int64_t cols = (N + 127) / 128;
  const int64_t wa = ((M + 127) / 128 * cols + sms - 1) / sms;
  const int64_t wd = ((M + 255) / 256 * cols + sms - 1) / sms;
  return 8 * wd < 5 * wa;
}

}  // namespace tf::cuda::mm
