#pragma once
// The greedy rule (base/argmax.h) on the device: its order, a warp's fold of it, and a call's
// argmax over many blocks (cuda_argmax.cu), for the sampling kernels (cuda_sample.cu).
#include <cstdint>

#include "backend/sampling.h"

namespace tf::cuda {

// (v, i) beats (bv, bi) when larger, or equal with a lower id; NaN never beats anything.
__device__ __forceinline__ bool argmax_beats(float v, int i, float bv, int bi) {
  return v > bv || (v == bv && i < bi);
}

// The best (value, id) by argmax_beats of a warp's pairs, in every lane.
__device__ __forceinline__ void warp_argmax(float& bv, int& bi) {
  for (int off = 16; off > 0; off >>= 1) {
    const float v = __shfl_xor_sync(0xffffffffu, bv, off);
    const int i = __shfl_xor_sync(0xffffffffu, bi, off);
    if (argmax_beats(v, i, bv, bi)) bv = v, bi = i;
  }
}

// Slices of a row of V logits that launch_greedy_argmax's blocks take: its scratch holds that many
// int2 a spec.
int64_t argmax_slices(int64_t V);

// Each of n_specs specs' greedy id of its logits row into ids (device memory), as one block a spec
// would give it: blocks over slices of each row, then a warp a spec folding the slices' (value, id).
void launch_greedy_argmax(const float* logits, int64_t V, const SampleSpec* specs, unsigned n_specs, int2* part,
                          int32_t* ids);

// Whether a call whose specs are all greedy and unpenalized takes launch_greedy_argmax
// (TF_CUDA_SAMPLE_SPLIT=0: one block a spec, for side-by-side timing; the same ids).
bool sample_split();

}  // namespace tf::cuda
