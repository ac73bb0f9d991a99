#pragma once
// The gated delta rule on the GPU: the arguments its forms share, and the tiled form's entry.
#include <cmath>
#include <cstdint>
#include <vector>

#include "backend/cuda/cuda_state.cuh"

namespace tf::cuda {

class CudaBackend;

struct DeltaArgs {
  const float *q, *k, *v, *a, *b;
  int64_t ldq, ldk, ldv, lda, ldb;
  const float *A_log, *dt_bias;
  float* pool;
  float* keep_pool;
  const SeqJob* jobs;
  const int64_t* keep;
  float* y;
  int64_t ldy;
  int hv_per_k, Kd, Vd, chunk, vt;
  float scale;
};

__device__ __forceinline__ float softplus_f(float v) { return v > 20.0f ? v : log1pf(expf(v)); }

// Whether the tiled form takes chunked sequences of this k_dim and chunk: 128 and 64, unless
// TF_CUDA_DELTA_TILED is 0.
bool delta_tiled_takes(int k_dim, int chunk);

// Runs the chunked sequences `jobs` (a.jobs their device copy) of an op over `rows` rows by the
// tiled form, in passes of whole sequences where they hold more chunks than the scratch.
void delta_tiled(CudaBackend& be, const DeltaArgs& a, const std::vector<SeqJob>& jobs, int64_t rows, int k_heads,
                 int v_heads);

}  // namespace tf::cuda
