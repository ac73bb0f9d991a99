// AVX-512 (F, BW, VL, DQ) + FMA + F16C kernels; compiled with those flags, chosen at run time.
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

// Fixed horizontal sum of 16 lanes: halves, then quarters, then the 4-lane tree of AVX2.
inline float hsum16(__m512 v) {
  const __m512 sw = _mm512_shuffle_f32x4(v, v, 0x4E);
  const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_castps512_ps256(sw));
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

// Weight sources: 16 consecutive elements of column n at k as f32, or one element.
struct SrcF32 {
  const uint8_t* base;
  uint64_t rb;
  const float* p(int64_t n) const { return reinterpret_cast<const float*>(base + n * rb); }
  __m512 load(int64_t n, int64_t k) const { return _mm512_loadu_ps(p(n) + k); }
  float at(int64_t n, int64_t k) const {
    float f;
    std::memcpy(&f, p(n) + k, 4);
    return f;
  }
};

struct SrcBf16 {
  const uint8_t* base;
  uint64_t rb;
  const uint8_t* p(int64_t n) const { return base + n * rb; }
  __m512 load(int64_t n, int64_t k) const {
    __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p(n) + k * 2));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  float at(int64_t n, int64_t k) const {
    uint16_t h;
    std::memcpy(&h, p(n) + k * 2, 2);
    return bf16_to_f32(h);
  }
};

struct SrcF16 {
  const uint8_t* base;
  uint64_t rb;
  const uint8_t* p(int64_t n) const { return base + n * rb; }
  __m512 load(int64_t n, int64_t k) const {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p(n) + k * 2)));
  }
  float at(int64_t n, int64_t k) const {
    uint16_t h;
    std::memcpy(&h, p(n) + k * 2, 2);
    return f16_to_f32(h);
  }
};

// One R x C tile of outputs: every (row, col) runs the same ops whatever R and C are.
template <int R, int C, class Src>
void tile(const float* x, int64_t ldx, const Src& w, int64_t wn, int64_t K, const float* bias,
          float* y, int64_t ldy) {
  __m512 acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
  const int64_t K16 = K & ~int64_t{15};
  for (int64_t k = 0; k < K16; k += 16) {
    __m512 wv[C];
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) wv[c] = w.load(wn + c, k);
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
      __m512 xv = _mm512_loadu_ps(x + r * ldx + k);
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) acc[r][c] = _mm512_fmadd_ps(xv, wv[c], acc[r][c]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) {
      float s = hsum16(acc[r][c]);
      for (int64_t k = K16; k < K; ++k) s += x[r * ldx + k] * w.at(wn + c, k);
      if (bias) s += bias[c];
      y[r * ldy + c] = s;
    }
}

template <class Src>
using TileFn = void (*)(const float*, int64_t, const Src&, int64_t, int64_t, const float*, float*,
                        int64_t);

constexpr int kMaxR = 6;
constexpr int kMaxC = 4;

template <class Src>
constexpr TileFn<Src> kTiles[kMaxR][kMaxC] = {
    {tile<1, 1, Src>, tile<1, 2, Src>, tile<1, 3, Src>, tile<1, 4, Src>},
    {tile<2, 1, Src>, tile<2, 2, Src>, tile<2, 3, Src>, tile<2, 4, Src>},
    {tile<3, 1, Src>, tile<3, 2, Src>, tile<3, 3, Src>, tile<3, 4, Src>},
    {tile<4, 1, Src>, tile<4, 2, Src>, tile<4, 3, Src>, tile<4, 4, Src>},
    {tile<5, 1, Src>, tile<5, 2, Src>, tile<5, 3, Src>, tile<5, 4, Src>},
    {tile<6, 1, Src>, tile<6, 2, Src>, tile<6, 3, Src>, tile<6, 4, Src>}};

// Few rows: stream each weight column once straight from its stored form.
template <class Src>
void direct(const MatmulBlock& b, const Src& w, int64_t r0, int64_t r1, int64_t n0, int64_t n1) {
  const int64_t cmax = r1 - r0 <= 2 ? 4 : 3;
  for (int64_t n = n0; n < n1; n += cmax) {
    const int C = static_cast<int>(std::min(cmax, n1 - n));
    for (int64_t r = r0; r < r1; r += 4) {
      const int R = static_cast<int>(std::min<int64_t>(4, r1 - r));
      kTiles<Src>[R - 1][C - 1](b.x + r * b.ldx, b.ldx, w, n, b.w.K, b.bias ? b.bias + n : nullptr,
                                b.y + r * b.ldy + n, b.ldy);
    }
  }
}

// Many rows: convert a panel of columns to f32 once, then reuse it for every row tile.
template <class Src>
void packed(const MatmulBlock& b, const Src& w, int64_t r0, int64_t r1, int64_t n0, int64_t n1) {
  const int64_t K = b.w.K;
  const int64_t Kp = (K + 15) & ~int64_t{15};
  int64_t panel = (256 << 10) / (Kp * 4) / kMaxC * kMaxC;
  panel = std::clamp<int64_t>(panel, kMaxC, 64);
  thread_local std::vector<float> buf;
  const int64_t K16 = K & ~int64_t{15};
  for (int64_t p0 = n0; p0 < n1; p0 += panel) {
    const int64_t pn = std::min(panel, n1 - p0);
    buf.resize(static_cast<size_t>(pn * Kp));
    for (int64_t c = 0; c < pn; ++c) {
      float* dst = buf.data() + c * Kp;
      for (int64_t k = 0; k < K16; k += 16) _mm512_storeu_ps(dst + k, w.load(p0 + c, k));
      for (int64_t k = K16; k < K; ++k) dst[k] = w.at(p0 + c, k);
    }
    const SrcF32 pw{reinterpret_cast<const uint8_t*>(buf.data()), static_cast<uint64_t>(Kp * 4)};
    for (int64_t r = r0; r < r1; r += kMaxR) {
      const int R = static_cast<int>(std::min<int64_t>(kMaxR, r1 - r));
      for (int64_t c = 0; c < pn; c += kMaxC) {
        const int C = static_cast<int>(std::min<int64_t>(kMaxC, pn - c));
        kTiles<SrcF32>[R - 1][C - 1](b.x + r * b.ldx, b.ldx, pw, c, K,
                                     b.bias ? b.bias + p0 + c : nullptr, b.y + r * b.ldy + p0 + c,
                                     b.ldy);
      }
    }
  }
}

template <class Src>
void run(const MatmulBlock& b, const Src& w, int64_t r0, int64_t r1, int64_t n0, int64_t n1) {
  if (r1 - r0 >= kPackMinRows)
    packed(b, w, r0, r1, n0, n1);
  else
    direct(b, w, r0, r1, n0, n1);
}

void matmul_avx512(const MatmulBlock& b, int64_t r0, int64_t r1, int64_t n0, int64_t n1) {
  switch (b.w.dtype) {
    case DType::F32: return run(b, SrcF32{b.w.data, b.w.row_bytes}, r0, r1, n0, n1);
    case DType::BF16: return run(b, SrcBf16{b.w.data, b.w.row_bytes}, r0, r1, n0, n1);
    case DType::F16: return run(b, SrcF16{b.w.data, b.w.row_bytes}, r0, r1, n0, n1);
    case DType::Q8_0: return matmul_q8_avx512(b, r0, r1, n0, n1);
    default: return;  // the backend rejects other dtypes when the weight is loaded
  }
}

float dot_avx512(const float* a, const float* b, int64_t n) {
  __m512 acc = _mm512_setzero_ps();
  const int64_t n16 = n & ~int64_t{15};
  for (int64_t k = 0; k < n16; k += 16)
    acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + k), _mm512_loadu_ps(b + k), acc);
  float s = hsum16(acc);
  for (int64_t k = n16; k < n; ++k) s += a[k] * b[k];
  return s;
}

void axpy_avx512(float* y, const float* x, float s, int64_t n) {
  const __m512 sv = _mm512_set1_ps(s);
  const int64_t n16 = n & ~int64_t{15};
  for (int64_t i = 0; i < n16; i += 16)
    _mm512_storeu_ps(y + i, _mm512_fmadd_ps(sv, _mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i)));
  for (int64_t i = n16; i < n; ++i) y[i] += s * x[i];
}

}  // namespace

const CpuKernels* avx512_kernels() {
  static const bool ok = avx2_kernels() != nullptr && __builtin_cpu_supports("avx512f") &&
                         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
                         __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vnni");
  // Activations quantize to the same bytes as AVX2, so that routine is shared.
  static const CpuKernels k{"avx512", matmul_avx512, dot_avx512, axpy_avx512, quantize_q8_avx2};
  return ok ? &k : nullptr;
}

}  // namespace tf::cpu
