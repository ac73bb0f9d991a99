// Portable Q8_0 kernels: activation quantization and int8 x int8 block dots.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "backend/cpu/cpu_kernels.h"

namespace tf::cpu {

void quantize_q8_portable(const float* x, int64_t K, uint8_t* out) {
  for (int64_t b = 0; b < K / kQ8Block; ++b, x += kQ8Block, out += kQ8ActBlockBytes) {
    float amax = 0.0f;
    bool finite = true;
    for (int i = 0; i < kQ8Block; ++i) {
      finite = finite && std::isfinite(x[i]);
      amax = std::max(amax, std::fabs(x[i]));
    }
    // A non-finite input makes the block's scale NaN, so every dot it enters is NaN.
    const float d = finite ? amax / 127.0f : std::numeric_limits<float>::quiet_NaN();
    const float id = finite && d != 0.0f ? 1.0f / d : 0.0f;
    std::memcpy(out, &d, 4);
    for (int i = 0; i < kQ8Block; ++i)
      out[4 + i] = finite ? static_cast<uint8_t>(static_cast<int8_t>(std::nearbyint(x[i] * id))) : 0;
  }
}

namespace {

inline float hsum8(const float* a) {
  return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
}

// One R x C tile of outputs over all blocks; each (row, col) runs the same ops whatever R, C.
template <int R, int C>
void tile(const MatmulBlock& bk, int64_t r, int64_t n) {
  const int64_t nb = bk.w.K / kQ8Block;
  float acc[R][C][8] = {};
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* wb[C];
    float dw[C];
    for (int c = 0; c < C; ++c) {
      wb[c] = bk.w.data + static_cast<uint64_t>(n + c) * bk.w.row_bytes + b * kQ8BlockBytes;
      uint16_t h;
      std::memcpy(&h, wb[c], 2);
      dw[c] = f16_to_f32(h);
    }
    for (int i = 0; i < R; ++i) {
      const uint8_t* xb = bk.xq + (r + i) * bk.ldxq + b * kQ8ActBlockBytes;
      float dx;
      std::memcpy(&dx, xb, 4);
      for (int c = 0; c < C; ++c) {
        const float d = dw[c] * dx;
        for (int j = 0; j < 8; ++j) {
          int32_t s = 0;
          for (int t = 4 * j; t < 4 * j + 4; ++t)
            s += static_cast<int32_t>(static_cast<int8_t>(wb[c][2 + t])) *
                 static_cast<int32_t>(static_cast<int8_t>(xb[4 + t]));
          acc[i][c][j] += d * static_cast<float>(s);
        }
      }
    }
  }
  for (int i = 0; i < R; ++i)
    for (int c = 0; c < C; ++c) {
      float s = hsum8(acc[i][c]);
      if (bk.bias) s += bk.bias[n + c];
      bk.y[(r + i) * bk.ldy + n + c] = s;
    }
}

using TileFn = void (*)(const MatmulBlock&, int64_t, int64_t);
constexpr TileFn kTiles[4][4] = {{tile<1, 1>, tile<1, 2>, tile<1, 3>, tile<1, 4>},
                                 {tile<2, 1>, tile<2, 2>, tile<2, 3>, tile<2, 4>},
                                 {tile<3, 1>, tile<3, 2>, tile<3, 3>, tile<3, 4>},
                                 {tile<4, 1>, tile<4, 2>, tile<4, 3>, tile<4, 4>}};

}  // namespace

void matmul_q8_portable(const MatmulBlock& b, int64_t r0, int64_t r1, int64_t n0, int64_t n1) {
  for (int64_t n = n0; n < n1; n += 4) {
    const int C = static_cast<int>(std::min<int64_t>(4, n1 - n));
    for (int64_t r = r0; r < r1; r += 4)
      kTiles[std::min<int64_t>(4, r1 - r) - 1][C - 1](b, r, n);
  }
}

}  // namespace tf::cpu
