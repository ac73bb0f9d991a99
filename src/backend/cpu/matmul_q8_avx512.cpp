// AVX-512 VNNI Q8_0 tile: two blocks per zmm (lanes 0-7 even blocks, 8-15 odd), vpdpbusd.
// GCC 12 builds some AVX-512 intrinsics on _mm512_undefined_* and warns about them falsely.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "backend/cpu/cpu_kernels.h"

namespace tf::cpu {
namespace {

inline float hsum16(__m512 v) {
  const __m512 sw = _mm512_shuffle_f32x4(v, v, 0x4E);
  const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_castps512_ps256(sw));
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

// The 32 quants of block b (lower half) and of block b + 1 (upper half, zero when absent).
inline __m512i load_pair(const uint8_t* blk0, uint64_t stride, bool two) {
  const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk0));
  const __m256i hi =
      two ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk0 + stride)) : _mm256_setzero_si256();
  return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

// One R x C tile over all blocks; each (row, col) runs the same ops whatever R and C are.
template <int R, int C>
void tile(const MatmulBlock& bk, int64_t r, int64_t n) {
  const int64_t nb = bk.w.K / kQ8Block;
  const __m512i bias128 = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512 acc[R][C];
  for (int i = 0; i < R; ++i)
    for (int c = 0; c < C; ++c) acc[i][c] = _mm512_setzero_ps();
  const uint8_t* wp[C];
  for (int c = 0; c < C; ++c) wp[c] = bk.w.data + static_cast<uint64_t>(n + c) * bk.w.row_bytes;
  const uint8_t* xp[R];
  for (int i = 0; i < R; ++i) xp[i] = bk.xq + (r + i) * bk.ldxq;
  for (int64_t b = 0; b < nb; b += 2) {
    const bool two = b + 1 < nb;
    // An odd last block leaves the upper lanes untouched, so they add nothing for it.
    const __mmask16 lanes = two ? __mmask16{0xFFFF} : __mmask16{0x00FF};
    __m512i wu[C];
    __m512 dw[C];
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) {
      const uint8_t* blk = wp[c] + b * kQ8BlockBytes;
      uint16_t h0, h1 = 0;
      std::memcpy(&h0, blk, 2);
      if (two) std::memcpy(&h1, blk + kQ8BlockBytes, 2);
      const __m256 d0 = _mm256_set1_ps(_cvtsh_ss(h0)), d1 = _mm256_set1_ps(_cvtsh_ss(h1));
      dw[c] = _mm512_insertf32x8(_mm512_castps256_ps512(d0), d1, 1);
      // w + 128 as unsigned bytes; the x-dependent 128 * sum(x) is taken off per row.
      wu[c] = _mm512_xor_si512(load_pair(blk + 2, kQ8BlockBytes, two), bias128);
    }
#pragma GCC unroll 6
    for (int i = 0; i < R; ++i) {
      const uint8_t* xb = xp[i] + b * kQ8ActBlockBytes;
      float dx0, dx1 = 0.f;
      std::memcpy(&dx0, xb, 4);
      if (two) std::memcpy(&dx1, xb + kQ8ActBlockBytes, 4);
      const __m512 dx = _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_set1_ps(dx0)),
                                           _mm256_set1_ps(dx1), 1);
      const __m512i xv = load_pair(xb + 4, kQ8ActBlockBytes, two);
      // -128 * (sum of each 4 x bytes), exact in int32; start value of every dot of this row.
      const __m512i corr = _mm512_sub_epi32(_mm512_setzero_si512(),
                                            _mm512_dpbusd_epi32(_mm512_setzero_si512(), bias128, xv));
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) {
        const __m512i l = _mm512_dpbusd_epi32(corr, wu[c], xv);
        const __m512 s = _mm512_cvtepi32_ps(l);
        acc[i][c] = _mm512_mask3_fmadd_ps(_mm512_mul_ps(dw[c], dx), s, acc[i][c], lanes);
      }
    }
  }
  for (int i = 0; i < R; ++i)
    for (int c = 0; c < C; ++c) {
      float s = hsum16(acc[i][c]);
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

// Tiles in panels of columns: few rows stream the weights once; many rows reuse a panel.
void matmul_q8_avx512(const MatmulBlock& b, int64_t r0, int64_t r1, int64_t n0, int64_t n1) {
  const int64_t cmax = 4;
  const int64_t panel =
      std::max<int64_t>(cmax, (256 << 10) / static_cast<int64_t>(b.w.row_bytes) / cmax * cmax);
  for (int64_t p0 = n0; p0 < n1; p0 += panel) {
    const int64_t p1 = std::min(n1, p0 + panel);
    for (int64_t r = r0; r < r1; r += 4) {
      const int R = static_cast<int>(std::min<int64_t>(4, r1 - r));
      for (int64_t n = p0; n < p1; n += cmax)
        kTiles[R - 1][std::min<int64_t>(cmax, p1 - n) - 1](b, r, n);
    }
  }
}

}  // namespace tf::cpu
