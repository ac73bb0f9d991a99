// AVX-512 VNNI Q8_0 tile: two blocks per zmm (lanes 0-7 even blocks, 8-15 odd), vpdpbusd.
// GCC 12 builds some AVX-512 intrinsics on _mm512_undefined_* and warns about them falsely.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

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

inline __m512 pair_scale(float d0, float d1) {
  return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_set1_ps(d0)), _mm256_set1_ps(d1), 1);
}

// A function, not a namespace-scope constant: a constant's initializer runs at program start, on
// CPUs without AVX-512 too.
inline __m512i bias128() { return _mm512_set1_epi8(static_cast<char>(0x80)); }

// Weight pair p of column c from its stored blocks: w + 128 as unsigned bytes, and scales.
struct RawW {
  const MatmulBlock* bk;
  int64_t nb;
  void get(int64_t c, int64_t p, __m512i& wu, __m512& dw) const {
    const uint8_t* blk = bk->w.data + static_cast<uint64_t>(c) * bk->w.row_bytes + 2 * p * kQ8BlockBytes;
    const bool two = 2 * p + 1 < nb;
    uint16_t h0, h1 = 0;
    std::memcpy(&h0, blk, 2);
    if (two) std::memcpy(&h1, blk + kQ8BlockBytes, 2);
    dw = pair_scale(_cvtsh_ss(h0), _cvtsh_ss(h1));
    wu = _mm512_xor_si512(load_pair(blk + 2, kQ8BlockBytes, two), bias128());
  }
};

// Activation pair p of row r: quants, scales, and -128 * (sum of each 4 quants), exact.
struct RawX {
  const MatmulBlock* bk;
  int64_t nb;
  void get(int64_t r, int64_t p, __m512i& xv, __m512& dx, __m512i& corr) const {
    const uint8_t* xb = bk->xq + r * bk->ldxq + 2 * p * kQ8ActBlockBytes;
    const bool two = 2 * p + 1 < nb;
    float d0, d1 = 0.f;
    std::memcpy(&d0, xb, 4);
    if (two) std::memcpy(&d1, xb + kQ8ActBlockBytes, 4);
    dx = pair_scale(d0, d1);
    xv = load_pair(xb + 4, kQ8ActBlockBytes, two);
    corr = _mm512_sub_epi32(_mm512_setzero_si512(),
                            _mm512_dpbusd_epi32(_mm512_setzero_si512(), bias128(), xv));
  }
};

// One stored vector; a struct so std::vector keeps its 64-byte alignment.
struct alignas(64) Vec {
  float f[16];
  __m512 get() const { return _mm512_load_ps(f); }
  void set(__m512 v) { _mm512_store_ps(f, v); }
};

// The same vectors as RawW / RawX, computed once into a buffer and reused by many tiles.
struct PackedW {
  const Vec* v;  // per column: npairs x (wu, dw)
  int64_t n0, npairs;
  void get(int64_t c, int64_t p, __m512i& wu, __m512& dw) const {
    const Vec* q = v + ((c - n0) * npairs + p) * 2;
    wu = _mm512_castps_si512(q[0].get());
    dw = q[1].get();
  }
};

struct PackedX {
  const Vec* v;  // per row: npairs x (xv, dx, corr)
  int64_t r0, npairs;
  void get(int64_t r, int64_t p, __m512i& xv, __m512& dx, __m512i& corr) const {
    const Vec* q = v + ((r - r0) * npairs + p) * 3;
    xv = _mm512_castps_si512(q[0].get());
    dx = q[1].get();
    corr = _mm512_castps_si512(q[2].get());
  }
};

// One R x C tile over all blocks; each (row, col) runs the same ops whatever R and C are.
template <int R, int C, class WS, class XS>
void tile(const MatmulBlock& bk, const WS& ws, const XS& xs, int64_t r, int64_t n) {
  const int64_t nb = bk.w.K / kQ8Block;
  __m512 acc[R][C];
  for (int i = 0; i < R; ++i)
    for (int c = 0; c < C; ++c) acc[i][c] = _mm512_setzero_ps();
  for (int64_t p = 0; 2 * p < nb; ++p) {
    // An odd last block leaves the upper lanes untouched, so they add nothing for it.
    const __mmask16 lanes = 2 * p + 1 < nb ? __mmask16{0xFFFF} : __mmask16{0x00FF};
    __m512i wu[C];
    __m512 dw[C];
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) ws.get(n + c, p, wu[c], dw[c]);
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
      __m512i xv, corr;
      __m512 dx;
      xs.get(r + i, p, xv, dx, corr);
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) {
        const __m512 s = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(corr, wu[c], xv));
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

template <class WS, class XS>
using TileFn = void (*)(const MatmulBlock&, const WS&, const XS&, int64_t, int64_t);
template <class W, class X>
constexpr TileFn<W, X> kTiles[4][4] = {
    {tile<1, 1, W, X>, tile<1, 2, W, X>, tile<1, 3, W, X>, tile<1, 4, W, X>},
    {tile<2, 1, W, X>, tile<2, 2, W, X>, tile<2, 3, W, X>, tile<2, 4, W, X>},
    {tile<3, 1, W, X>, tile<3, 2, W, X>, tile<3, 3, W, X>, tile<3, 4, W, X>},
    {tile<4, 1, W, X>, tile<4, 2, W, X>, tile<4, 3, W, X>, tile<4, 4, W, X>}};

// Many rows: unpack a panel of weight columns and each row tile's activations once.
void packed(const MatmulBlock& b, int64_t r0, int64_t r1, int64_t n0, int64_t n1) {
  const int64_t nb = b.w.K / kQ8Block, npairs = (nb + 1) / 2;
  const RawW rw{&b, nb};
  const RawX rx{&b, nb};
  const int64_t panel = std::max<int64_t>(4, (256 << 10) / (npairs * 128) / 4 * 4);
  thread_local std::vector<Vec> wbuf, xbuf;
  xbuf.resize(static_cast<size_t>(4 * npairs * 3));
  for (int64_t p0 = n0; p0 < n1; p0 += panel) {
    const int64_t p1 = std::min(n1, p0 + panel);
    wbuf.resize(static_cast<size_t>((p1 - p0) * npairs * 2));
    for (int64_t c = p0; c < p1; ++c)
      for (int64_t p = 0; p < npairs; ++p) {
        __m512i wu;
        __m512 dw;
        rw.get(c, p, wu, dw);
        Vec* q = wbuf.data() + ((c - p0) * npairs + p) * 2;
        q[0].set(_mm512_castsi512_ps(wu));
        q[1].set(dw);
      }
    const PackedW pw{wbuf.data(), p0, npairs};
    for (int64_t r = r0; r < r1; r += 4) {
      const int R = static_cast<int>(std::min<int64_t>(4, r1 - r));
      for (int64_t i = r; i < r + R; ++i)
        for (int64_t p = 0; p < npairs; ++p) {
          __m512i xv, corr;
          __m512 dx;
          rx.get(i, p, xv, dx, corr);
          Vec* q = xbuf.data() + ((i - r) * npairs + p) * 3;
          q[0].set(_mm512_castsi512_ps(xv));
          q[1].set(dx);
          q[2].set(_mm512_castsi512_ps(corr));
        }
      const PackedX px{xbuf.data(), r, npairs};
      for (int64_t n = p0; n < p1; n += 4)
        kTiles<PackedW, PackedX>[R - 1][std::min<int64_t>(4, p1 - n) - 1](b, pw, px, r, n);
    }
  }
}

}  // namespace

// Few rows stream the weights once from their stored form; many rows reuse unpacked panels.
void matmul_q8_avx512(const MatmulBlock& b, int64_t r0, int64_t r1, int64_t n0, int64_t n1) {
  if (r1 - r0 >= kPackMinRows) return packed(b, r0, r1, n0, n1);
  const int64_t nb = b.w.K / kQ8Block;
  const RawW rw{&b, nb};
  const RawX rx{&b, nb};
  for (int64_t n = n0; n < n1; n += 4) {
    const int C = static_cast<int>(std::min<int64_t>(4, n1 - n));
    for (int64_t r = r0; r < r1; r += 4)
      kTiles<RawW, RawX>[std::min<int64_t>(4, r1 - r) - 1][C - 1](b, rw, rx, r, n);
  }
}

}  // namespace tf::cpu
