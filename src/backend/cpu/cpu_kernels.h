#pragma once
// The inner loops of the CPU backend, one table per instruction set (portable, AVX2).
//
// Order rule shared by every table: a dot product over K keeps 8 lane accumulators, lane j
// taking k = j (mod 8) for k < K rounded down to 8 in increasing k, then one fixed
// horizontal sum, then the remaining k added one by one. Nothing depends on how many rows
// or columns a call holds, so every output element has one fixed sequence of float ops.
//
// Q8_0 weights: each activation row is quantized per block of 32 (scale = max|x| / 127 as
// f32, int8 = x / scale rounded to nearest even). Block b of a dot gives 8 exact int32 lane
// sums (lane j: elements 4j..4j+3), and lane j of the float accumulator takes
// (w_scale_b * x_scale_b) * float(lane sum) for b in increasing order, then the same
// horizontal sum, then the bias.
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

// Activation rows quantized for Q8_0 weights: per 32 values an f32 scale then 32 int8.
constexpr int kQ8ActBlockBytes = 36;

// y[r][n] = dot(x[r], w[n]) (+ bias[n]) for rows [r0, r1) and columns [n0, n1).
struct MatmulBlock {
  const float* x = nullptr;
  int64_t ldx = 0;
  // Q8_0 weights only: x quantized by quantize_q8, one row every ldxq bytes.
  const uint8_t* xq = nullptr;
  int64_t ldxq = 0;
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
  // Quantizes one row of K (a multiple of 32) floats into K / 32 activation blocks.
  void (*quantize_q8)(const float* x, int64_t K, uint8_t* out);
};

const CpuKernels& portable_kernels();
// Null when the binary or the CPU lacks AVX2 + FMA + F16C.
const CpuKernels* avx2_kernels();
// Null when the binary or the CPU lacks AVX2 or AVX-512 F/BW/VL/DQ/VNNI. Its dot products
// keep 16 lane accumulators (k = j mod 16) instead of 8, and its Q8_0 dots take two blocks
// per vector (lanes 0-7 even blocks, 8-15 odd), so its bits differ from the other tables.
const CpuKernels* avx512_kernels();
// The fastest table this CPU runs.
const CpuKernels& best_kernels();

// Rows at or above which a block converts its weight panel to f32 once and reuses it.
constexpr int64_t kPackMinRows = 8;

// Q8_0 matmul on quantized activations (b.xq); the same integer block sums in both tables.
void matmul_q8_portable(const MatmulBlock& b, int64_t r0, int64_t r1, int64_t n0, int64_t n1);
void matmul_q8_avx2(const MatmulBlock& b, int64_t r0, int64_t r1, int64_t n0, int64_t n1);
// The AVX-VNNI variant of matmul_q8_avx2: the same bits; only for CPUs with AVX-VNNI.
void matmul_q8_vnni(const MatmulBlock& b, int64_t r0, int64_t r1, int64_t n0, int64_t n1);
// matmul_q8_avx2 without AVX-VNNI, whatever the CPU has (so tests can compare the two).
void matmul_q8_avx512(const MatmulBlock& b, int64_t r0, int64_t r1, int64_t n0, int64_t n1);
void matmul_q8_avx2_plain(const MatmulBlock& b, int64_t r0, int64_t r1, int64_t n0, int64_t n1);
void quantize_q8_portable(const float* x, int64_t K, uint8_t* out);
void quantize_q8_avx2(const float* x, int64_t K, uint8_t* out);

// Decodes n elements of a stored row (any float dtype) starting at element k0 into f32.
void decode_row(const WeightRows& w, int64_t row, int64_t k0, int64_t n, float* out);

}  // namespace tf::cpu
