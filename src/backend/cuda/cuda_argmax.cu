// Greedy sampling over many blocks: each spec's row in slices of kArgmaxSpan ids, a block each, then
// one warp a spec folds the slices. The rule is a total order, so the id is one block's.
#include <climits>
#include <cmath>

#include "backend/cuda/cuda_argmax.cuh"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_util.cuh"

namespace tf::cuda {

namespace {

constexpr int kArgmaxThreads = 256;
constexpr int kArgmaxUnroll = 4;                            // ids a thread loads before it uses any
constexpr int kArgmaxSpan = kArgmaxThreads * kArgmaxUnroll;  // ids a slice block takes

// Block (x, y): the best (value, id) of ids x * kArgmaxSpan .. of spec y's row, into part.
__global__ void __launch_bounds__(kArgmaxThreads)
    argmax_slices_kernel(const float* __restrict__ logits, int64_t V, const SampleSpec* __restrict__ specs,
                         int2* part) {
  grid_wait();
  grid_launch_next();
  __shared__ float sv[kArgmaxThreads / 32];
  __shared__ int si[kArgmaxThreads / 32];
  const float* row = logits + static_cast<int64_t>(specs[blockIdx.y].row) * V;
  const int64_t i0 = static_cast<int64_t>(blockIdx.x) * kArgmaxSpan + threadIdx.x;
  float v[kArgmaxUnroll];
#pragma unroll
  for (int u = 0; u < kArgmaxUnroll; ++u) v[u] = i0 + u * kArgmaxThreads < V ? row[i0 + u * kArgmaxThreads] : NAN;
  float bv = -INFINITY;
  int bi = INT_MAX;
#pragma unroll
  for (int u = 0; u < kArgmaxUnroll; ++u) {
    const int i = static_cast<int>(i0 + u * kArgmaxThreads);
    if (i0 + u * kArgmaxThreads < V && argmax_beats(v[u], i, bv, bi)) bv = v[u], bi = i;
  }
  warp_argmax(bv, bi);
  if (threadIdx.x % 32 == 0) sv[threadIdx.x / 32] = bv, si[threadIdx.x / 32] = bi;
  __syncthreads();
  if (threadIdx.x != 0) return;
  for (int w = 1; w < kArgmaxThreads / 32; ++w)
    if (argmax_beats(sv[w], si[w], bv, bi)) bv = sv[w], bi = si[w];
  part[static_cast<int64_t>(blockIdx.y) * gridDim.x + blockIdx.x] = make_int2(__float_as_int(bv), bi);
}

// One warp a greedy spec: the best of its slices' pairs, and the rule's answer for the row (a
// first logit NaN gives 0).
__global__ void __launch_bounds__(32)
    argmax_fold_kernel(const float* __restrict__ logits, int64_t V, const SampleSpec* __restrict__ specs,
                       const int2* __restrict__ part, int slices, int32_t* ids) {
  grid_wait();
  grid_launch_next();
  float bv = -INFINITY;
  int bi = INT_MAX;
  for (int g = threadIdx.x; g < slices; g += 32) {
    const int2 p = part[static_cast<int64_t>(blockIdx.x) * slices + g];
    if (argmax_beats(__int_as_float(p.x), p.y, bv, bi)) bv = __int_as_float(p.x), bi = p.y;
  }
  warp_argmax(bv, bi);
  if (threadIdx.x != 0) return;
  const float* row = logits + static_cast<int64_t>(specs[blockIdx.x].row) * V;
  ids[blockIdx.x] = isnan(row[0]) || bi == INT_MAX ? 0 : bi;
}

}  // namespace

int64_t argmax_slices(int64_t V) { return (V + kArgmaxSpan - 1) / kArgmaxSpan; }

void launch_greedy_argmax(const float* logits, int64_t V, const SampleSpec* specs, unsigned n_specs, int2* part,
                          int32_t* ids) {
  const int64_t slices = argmax_slices(V);
  launch_kernel(argmax_slices_kernel, dim3(static_cast<unsigned>(slices), n_specs), kArgmaxThreads, 0, logits, V,
                specs, part);
  launch_kernel(argmax_fold_kernel, n_specs, 32, 0, logits, V, specs, static_cast<const int2*>(part),
                static_cast<int>(slices), ids);
}

bool sample_split() {
  static const bool on = !env_zero("TF_CUDA_SAMPLE_SPLIT");
  return on;
}

}  // namespace tf::cuda
