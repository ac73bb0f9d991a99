// Portable kernels: plain C++ the compiler may vectorize; used where AVX2 is absent.
#include <algorithm>
#include <cstring>
#include <vector>

#include "backend/cpu/cpu_kernels.h"
#include "base/error.h"

namespace tf::cpu {

void decode_row(const WeightRows& w, int64_t row, int64_t k0, int64_t n, float* out) {
  const uint8_t* p = w.data + static_cast<uint64_t>(row) * w.row_bytes;
  switch (w.dtype) {
    case DType::F32:
      std::memcpy(out, p + k0 * 4, static_cast<size_t>(n) * 4);
      return;
    case DType::BF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, p + (k0 + i) * 2, 2);
        out[i] = bf16_to_f32(h);
      }
      return;
    case DType::F16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, p + (k0 + i) * 2, 2);
        out[i] = f16_to_f32(h);
      }
      return;
    case DType::Q8_0:
      for (int64_t i = 0; i < n; ++i) {
        int64_t k = k0 + i;
        const uint8_t* blk = p + (k / kQ8Block) * kQ8BlockBytes;
        uint16_t h;
        std::memcpy(&h, blk, 2);
        out[i] = f16_to_f32(h) * static_cast<float>(static_cast<int8_t>(blk[2 + k % kQ8Block]));
      }
      return;
    default:
      fail("decode_row: dtype ", dtype_name(w.dtype), " is not a float type");
  }
}

namespace {

inline float hsum8(const float* a) {
  return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
}

// One R x C register tile; the same arithmetic per (row, col) whatever R and C are.
template <int R, int C>
void tile(const float* x, int64_t ldx, const float* w, int64_t ldw, int64_t K, const float* bias,
          float* y, int64_t ldy) {
  float acc[R][C][8] = {};
  const int64_t K8 = K & ~int64_t{7};
  for (int64_t k = 0; k < K8; k += 8)
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c)
        for (int j = 0; j < 8; ++j) acc[r][c][j] += x[r * ldx + k + j] * w[c * ldw + k + j];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) {
      float s = hsum8(acc[r][c]);
      for (int64_t k = K8; k < K; ++k) s += x[r * ldx + k] * w[c * ldw + k];
      if (bias) s += bias[c];
      y[r * ldy + c] = s;
    }
}

using TileFn = void (*)(const float*, int64_t, const float*, int64_t, int64_t, const float*, float*,
                        int64_t);
constexpr TileFn kTiles[4][4] = {{tile<1, 1>, tile<1, 2>, tile<1, 3>, tile<1, 4>},
                                 {tile<2, 1>, tile<2, 2>, tile<2, 3>, tile<2, 4>},
                                 {tile<3, 1>, tile<3, 2>, tile<3, 3>, tile<3, 4>},
                                 {tile<4, 1>, tile<4, 2>, tile<4, 3>, tile<4, 4>}};

void matmul_portable(const MatmulBlock& b, int64_t r0, int64_t r1, int64_t n0, int64_t n1) {
  if (b.w.dtype == DType::Q8_0) return matmul_q8_portable(b, r0, r1, n0, n1);
  const int64_t K = b.w.K;
  const int64_t panel = std::max<int64_t>(4, std::min<int64_t>(64, (64 << 10) / std::max<int64_t>(1, K * 4)));
  thread_local std::vector<float> buf;
  for (int64_t p0 = n0; p0 < n1; p0 += panel) {
    const int64_t pn = std::min(panel, n1 - p0);
    buf.resize(static_cast<size_t>(pn * K));
    for (int64_t c = 0; c < pn; ++c) decode_row(b.w, p0 + c, 0, K, buf.data() + c * K);
    for (int64_t r = r0; r < r1; r += 4) {
      const int R = static_cast<int>(std::min<int64_t>(4, r1 - r));
      for (int64_t c = 0; c < pn; c += 4) {
        const int C = static_cast<int>(std::min<int64_t>(4, pn - c));
        kTiles[R - 1][C - 1](b.x + r * b.ldx, b.ldx, buf.data() + c * K, K, K,
                             b.bias ? b.bias + p0 + c : nullptr, b.y + r * b.ldy + p0 + c, b.ldy);
      }
    }
  }
}

float dot_portable(const float* a, const float* b, int64_t n) {
  float acc[8] = {};
  const int64_t n8 = n & ~int64_t{7};
  for (int64_t k = 0; k < n8; k += 8)
    for (int j = 0; j < 8; ++j) acc[j] += a[k + j] * b[k + j];
  float s = hsum8(acc);
  for (int64_t k = n8; k < n; ++k) s += a[k] * b[k];
  return s;
}

void axpy_portable(float* y, const float* x, float s, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += s * x[i];
}

}  // namespace

const CpuKernels& portable_kernels() {
  static const CpuKernels k{"portable", matmul_portable, dot_portable, axpy_portable,
                                  quantize_q8_portable};
  return k;
}

#ifndef TF_X86
const CpuKernels* avx2_kernels() { return nullptr; }
const CpuKernels* avx512_kernels() { return nullptr; }
#endif

const CpuKernels& best_kernels() {
  if (const CpuKernels* k = avx512_kernels()) return *k;
  const CpuKernels* k = avx2_kernels();
  return k ? *k : portable_kernels();
}

}  // namespace tf::cpu
