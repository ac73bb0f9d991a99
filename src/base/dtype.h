#pragma once
// Element types of stored tensors and the conversions every backend shares.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace tf {

enum class DType : uint8_t { F32, F16, BF16, Q8_0, I8, I16, I32, I64, F64, U8, BOOL };

const char* dtype_name(DType t);

// Q8_0: blocks of 32 weights, an f16 scale then 32 int8 values (34 bytes), as GGUF stores it.
constexpr int kQ8Block = 32;
constexpr int kQ8BlockBytes = 34;

// Bytes for a row of n elements, or 0 when n does not fit the type's block size.
uint64_t dtype_row_bytes(DType t, uint64_t n);

inline float bf16_to_f32(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
  return static_cast<uint16_t>(u >> 16);
}

// x as a bf16 tensor-core product takes it (round to nearest even), back in f32.
inline float round_to_bf16(float x) { return bf16_to_f32(f32_to_bf16(x)); }

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

// A view of a stored tensor: row-major, shape outermost first (as safetensors and PyTorch).
struct TensorView {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;
  uint64_t nbytes = 0;

  int64_t numel() const {
    int64_t n = 1;
    for (auto d : shape) n *= d;
    return n;
  }
  int64_t dim(int i) const { return shape.at(static_cast<size_t>(i)); }
};

// Reads element i of a float-like tensor (F32/F16/BF16/Q8_0) as f32.
float tensor_element(const TensorView& t, int64_t i);

}  // namespace tf
