#pragma once
// The arithmetic of one row's rmsnorm, shared by rmsnorm_kernel and the fused attention prep: the
// squares of a float4 chunk added in order, and each element's scaling.
#include <cuda_runtime.h>

namespace tf::cuda {

__device__ __forceinline__ float add_squares4(float s, float a, float b, float c, float d) {
  s = __fadd_rn(s, __fmul_rn(a, a));
  s = __fadd_rn(s, __fmul_rn(b, b));
  s = __fadd_rn(s, __fmul_rn(c, c));
  return __fadd_rn(s, __fmul_rn(d, d));
}

__device__ __forceinline__ float norm_elem(float x, float g, float inv, bool add_one) {
  return __fmul_rn(__fmul_rn(x, inv), add_one ? __fadd_rn(1.0f, g) : g);
}

}  // namespace tf::cuda
