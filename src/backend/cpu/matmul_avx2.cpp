// AVX2 + FMA + F16C kernels; compiled with those flags, chosen at run time.
#include <cpuid.h>
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "backend/cpu/cpu_kernels.h"

namespace tf::cpu {
namespace {

// Fixed horizontal sum: ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)).
inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

// Weight sources: 8 consecutive elements of column n at k as f32, or one element.
struct SrcF32 {
  const uint8_t* base;
  uint64_t rb;
  const float* p(int64_t n) const { return reinterpret_cast<const float*>(base + n * rb); }
  __m256 load(int64_t n, int64_t k) const { return _mm256_loadu_ps(p(n) + k); }
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
  __m256 load(int64_t n, int64_t k) const {
    __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p(n) + k * 2));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
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
  __m256 load(int64_t n, int64_t k) const {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p(n) + k * 2)));
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
  __m256 acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
  const int64_t K8 = K & ~int64_t{7};
  for (int64_t k = 0; k < K8; k += 8) {
    __m256 wv[C];
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) wv[c] = w.load(wn + c, k);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      __m256 xv = _mm256_loadu_ps(x + r * ldx + k);
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) acc[r][c] = _mm256_fmadd_ps(xv, wv[c], acc[r][c]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) {
      float s = hsum(acc[r][c]);
      for (int64_t k = K8; k < K; ++k) s += x[r * ldx + k] * w.at(wn + c, k);
      if (bias) s += bias[c];
      y[r * ldy + c] = s;
    }
}

template <class Src>
using TileFn = void (*)(const float*, int64_t, const Src&, int64_t, int64_t, const float*, float*,
                        int64_t);

template <class Src>
constexpr TileFn<Src> kTiles[4][4] = {
    {tile<1, 1, Src>, tile<1, 2, Src>, tile<1, 3, Src>, tile<1, 4, Src>},
    {tile<2, 1, Src>, tile<2, 2, Src>, tile<2, 3, Src>, tile<2, 4, Src>},
    {tile<3, 1, Src>, tile<3, 2, Src>, tile<3, 3, Src>, tile<3, 4, Src>},
    {tile<4, 1, Src>, tile<4, 2, Src>, tile<4, 3, Src>, tile<4, 4, Src>}};

// Few rows: stream each weight column once straight from its stored form.
template <class Src>
void direct(const MatmulBlock& b, const Src& w, int64_t r0, int64_t r1, int64_t n0, int64_t n1) {
  const int64_t rows = r1 - r0;
  const int64_t cmax = rows == 1 ? 4 : 3;
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
  int64_t panel = (192 << 10) / (Kp * 4) / 3 * 3;
  panel = std::clamp<int64_t>(panel, 3, 48);
  thread_local std::vector<float> buf;
  const int64_t K8 = K & ~int64_t{7};
  for (int64_t p0 = n0; p0 < n1; p0 += panel) {
    const int64_t pn = std::min(panel, n1 - p0);
    buf.resize(static_cast<size_t>(pn * Kp));
    for (int64_t c = 0; c < pn; ++c) {
      float* dst = buf.data() + c * Kp;
      for (int64_t k = 0; k < K8; k += 8) _mm256_storeu_ps(dst + k, w.load(p0 + c, k));
      for (int64_t k = K8; k < K; ++k) dst[k] = w.at(p0 + c, k);
    }
    const SrcF32 pw{reinterpret_cast<const uint8_t*>(buf.data()), static_cast<uint64_t>(Kp * 4)};
    for (int64_t r = r0; r < r1; r += 4) {
      const int R = static_cast<int>(std::min<int64_t>(4, r1 - r));
      for (int64_t c = 0; c < pn; c += 3) {
        const int C = static_cast<int>(std::min<int64_t>(3, pn - c));
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

void matmul_avx2(const MatmulBlock& b, int64_t r0, int64_t r1, int64_t n0, int64_t n1) {
  switch (b.w.dtype) {
    case DType::F32: return run(b, SrcF32{b.w.data, b.w.row_bytes}, r0, r1, n0, n1);
    case DType::BF16: return run(b, SrcBf16{b.w.data, b.w.row_bytes}, r0, r1, n0, n1);
    case DType::F16: return run(b, SrcF16{b.w.data, b.w.row_bytes}, r0, r1, n0, n1);
    case DType::Q8_0: return matmul_q8_avx2(b, r0, r1, n0, n1);
    default: return;  // the backend rejects other dtypes when the weight is loaded
  }
}

float dot_avx2(const float* a, const float* b, int64_t n) {
  __m256 acc = _mm256_setzero_ps();
  const int64_t n8 = n & ~int64_t{7};
  for (int64_t k = 0; k < n8; k += 8)
    acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + k), _mm256_loadu_ps(b + k), acc);
  float s = hsum(acc);
  for (int64_t k = n8; k < n; ++k) s += a[k] * b[k];
  return s;
}

void axpy_avx2(float* y, const float* x, float s, int64_t n) {
  const __m256 sv = _mm256_set1_ps(s);
  const int64_t n8 = n & ~int64_t{7};
  for (int64_t i = 0; i < n8; i += 8)
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(sv, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (int64_t i = n8; i < n; ++i) y[i] += s * x[i];
}

// F16C from CPUID leaf 1 (clang's __builtin_cpu_supports does not know "f16c").
bool cpu_has_f16c() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0;
}

}  // namespace

const CpuKernels* avx2_kernels() {
  static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c();
  static const CpuKernels k{"avx2", matmul_avx2, dot_avx2, axpy_avx2, quantize_q8_avx2};
  return ok ? &k : nullptr;
}

}  // namespace tf::cpu
