#include "base/dtype.h"

#include <cmath>

#include "base/error.h"

namespace tf {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "F32";
    case DType::F16: return "F16";
    case DType::BF16: return "BF16";
    case DType::Q8_0: return "Q8_0";
    case DType::I8: return "I8";
    case DType::I16: return "I16";
    case DType::I32: return "I32";
    case DType::I64: return "I64";
    case DType::F64: return "F64";
    case DType::U8: return "U8";
    case DType::BOOL: return "BOOL";
  }
  return "?";
}

uint64_t dtype_row_bytes(DType t, uint64_t n) {
  switch (t) {
    case DType::F32: case DType::I32: return n * 4;
    case DType::F16: case DType::BF16: case DType::I16: return n * 2;
    case DType::I8: case DType::U8: case DType::BOOL: return n;
    case DType::I64: case DType::F64: return n * 8;
    case DType::Q8_0: return n % kQ8Block ? 0 : n / kQ8Block * kQ8BlockBytes;
  }
  return 0;
}

float f16_to_f32(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  uint32_t u;
  if (exp == 0) {
    if (mant == 0) {
      u = sign;
    } else {  // subnormal: renormalize
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400) == 0);
      mant &= 0x3ff;
      u = sign | static_cast<uint32_t>(127 - 15 - e) << 23 | mant << 13;
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000u | mant << 13;
  } else {
    u = sign | (exp + 112) << 23 | mant << 13;
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t f32_to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint32_t sign = (u >> 16) & 0x8000u;
  int32_t exp = static_cast<int32_t>((u >> 23) & 0xff) - 127 + 15;
  uint32_t mant = u & 0x7fffffu;
  if (((u >> 23) & 0xff) == 0xff) return static_cast<uint16_t>(sign | 0x7c00u | (mant ? 0x200u : 0u));
  if (exp >= 31) return static_cast<uint16_t>(sign | 0x7c00u);
  if (exp <= 0) {
    if (exp < -10) return static_cast<uint16_t>(sign);
    mant |= 0x800000u;
    uint32_t shift = static_cast<uint32_t>(14 - exp);
    uint32_t half = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1);
    uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = sign | static_cast<uint32_t>(exp) << 10 | mant >> 13;
  uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1))) ++half;
  return static_cast<uint16_t>(half);
}

float tensor_element(const TensorView& t, int64_t i) {
  switch (t.dtype) {
    case DType::F32: {
      float f;
      std::memcpy(&f, t.data + i * 4, 4);
      return f;
    }
    case DType::F16: {
      uint16_t h;
      std::memcpy(&h, t.data + i * 2, 2);
      return f16_to_f32(h);
    }
    case DType::BF16: {
      uint16_t h;
      std::memcpy(&h, t.data + i * 2, 2);
      return bf16_to_f32(h);
    }
    case DType::Q8_0: {
      const uint8_t* blk = t.data + (i / kQ8Block) * kQ8BlockBytes;
      uint16_t h;
      std::memcpy(&h, blk, 2);
      return f16_to_f32(h) * static_cast<float>(static_cast<int8_t>(blk[2 + i % kQ8Block]));
    }
    default:
      fail("tensor ", t.name, ": dtype ", dtype_name(t.dtype), " is not a float type");
  }
}

}  // namespace tf
