#pragma once
// The Q8_0 tile shared by the AVX2 and AVX-VNNI files; internal linkage so each file keeps
// its own instantiations compiled for its own instruction set.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "backend/cpu/cpu_kernels.h"

namespace tf::cpu {
namespace {

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

// One R x C tile over all blocks; each (row, col) runs the same ops whatever R and C are.
template <int R, int C, bool kVnni>
void tile(const MatmulBlock& bk, int64_t r, int64_t n) {
  const int64_t nb = bk.w.K / kQ8Block;
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[R][C];
  for (int i = 0; i < R; ++i)
    for (int c = 0; c < C; ++c) acc[i][c] = _mm256_setzero_ps();
  const uint8_t* wp[C];
  for (int c = 0; c < C; ++c) wp[c] = bk.w.data + static_cast<uint64_t>(n + c) * bk.w.row_bytes;
  const uint8_t* xp[R];
  for (int i = 0; i < R; ++i) xp[i] = bk.xq + (r + i) * bk.ldxq;
  for (int64_t b = 0; b < nb; ++b) {
    __m256i wq[C], aw[C];
    float dw[C];
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) {
      const uint8_t* blk = wp[c] + b * kQ8BlockBytes;
      uint16_t h;
      std::memcpy(&h, blk, 2);
      dw[c] = _cvtsh_ss(h);
      wq[c] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
      aw[c] = _mm256_sign_epi8(wq[c], wq[c]);
    }
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
      const uint8_t* xb = xp[i] + b * kQ8ActBlockBytes;
      float dx;
      std::memcpy(&dx, xb, 4);
      const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb + 4));
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) {
        // |w| * (x with w's sign) = w * x; pairs stay below 2 * 128 * 127, so no saturation.
        const __m256i sx = _mm256_sign_epi8(xv, wq[c]);
        __m256i l;
        if constexpr (kVnni)
          l = _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), aw[c], sx);
        else
          l = _mm256_madd_epi16(_mm256_maddubs_epi16(aw[c], sx), ones);
        const __m256 s = _mm256_cvtepi32_ps(l);
        acc[i][c] = _mm256_fmadd_ps(_mm256_set1_ps(dw[c] * dx), s, acc[i][c]);
      }
    }
  }
  for (int i = 0; i < R; ++i)
    for (int c = 0; c < C; ++c) {
      float s = hsum(acc[i][c]);
      if (bk.bias) s += bk.bias[n + c];
      bk.y[(r + i) * bk.ldy + n + c] = s;
    }
}

using TileFn = void (*)(const MatmulBlock&, int64_t, int64_t);
template <bool V>
constexpr TileFn kTiles[4][4] = {{tile<1, 1, V>, tile<1, 2, V>, tile<1, 3, V>, tile<1, 4, V>},
                                 {tile<2, 1, V>, tile<2, 2, V>, tile<2, 3, V>, tile<2, 4, V>},
                                 {tile<3, 1, V>, tile<3, 2, V>, tile<3, 3, V>, tile<3, 4, V>},
                                 {tile<4, 1, V>, tile<4, 2, V>, tile<4, 3, V>, tile<4, 4, V>}};

// Tiles in panels of columns: few rows stream the weights once; many rows reuse a panel.
template <bool V>
void q8_blocks(const MatmulBlock& b, int64_t r0, int64_t r1, int64_t n0, int64_t n1) {
  const int64_t cmax = r1 - r0 == 1 ? 4 : 2;
  const int64_t panel = std::max<int64_t>(cmax, (128 << 10) / static_cast<int64_t>(b.w.row_bytes) / cmax * cmax);
  for (int64_t p0 = n0; p0 < n1; p0 += panel) {
    const int64_t p1 = std::min(n1, p0 + panel);
    for (int64_t r = r0; r < r1; r += 4) {
      const int R = static_cast<int>(std::min<int64_t>(4, r1 - r));
      for (int64_t n = p0; n < p1; n += cmax)
        kTiles<V>[R - 1][std::min<int64_t>(cmax, p1 - n) - 1](b, r, n);
    }
  }
}

}  // namespace
}  // namespace tf::cpu
