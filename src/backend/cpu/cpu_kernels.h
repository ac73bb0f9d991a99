#pragma once
// The inner loops of the CPU backend, one table per instruction set (portable, AVX2).
//
// Order rule shared by every table: a dot product over K keeps 8 lane accumulators, lane j
// taking k = j (mod 8) for k < K rounded down to 8 in increasing k, then one fixed
// horizontal sum, then the remaining k added one by one. Nothing depends on how many rows
// or columns a call holds, so every output element has one fixed sequence of float ops.
#include <cstdint>

#include "base/dtype.h"

namespace tf::cpu {

// A weight matrix in its stored form: rows of row_bytes bytes, K elements each.
struct WeightRows {
  const uint8_t* data = nullptr;
  DType dtype = DType::F32;
  int64_t K = 0;
  uint64_t row_bytes = 0;
};

// y[r][n] = dot(x[r], w[n]) (+ bias[n]) for rows [r0, r1) and columns [n0, n1).
struct MatmulBlock {
  const float* x = nullptr;
  int64_t ldx = 0;
  WeightRows w;
  const float* bias = nullptr;  // f32, indexed by n; null for none
  float* y = nullptr;
  int64_t ldy = 0;
};

struct CpuKernels {
  const char* name;
  // Computes the block; may convert weights into a thread-local panel when many rows share it.
  void (*matmul)(const MatmulBlock& b, int64_t r0, int64_t r1, int64_t n0, int64_t n1);
  // dot(a, b) over n elements in the order rule above.
  float (*dot)(const float* a, const float* b, int64_t n);
  // y[i] += s * x[i] elementwise (no reduction).
  void (*axpy)(float* y, const float* x, float s, int64_t n);
};

const CpuKernels& portable_kernels();
// Null when the binary or the CPU lacks AVX2 + FMA + F16C.
const CpuKernels* avx2_kernels();
// The fastest table this CPU runs.
const CpuKernels& best_kernels();

// Rows at or above which a block converts its weight panel to f32 once and reuses it.
constexpr int64_t kPackMinRows = 8;

// Decodes n elements of a stored row (any float dtype) starting at element k0 into f32.
void decode_row(const WeightRows& w, int64_t row, int64_t k0, int64_t n, float* out);

}  // namespace tf::cpu
