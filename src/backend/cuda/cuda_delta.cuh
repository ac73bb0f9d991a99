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

// The rule's per-row terms, made alike by every form: g = -A softplus(a + dt_bias) with
// A = exp(A_log) (its decay is exp(g)), beta = sigmoid(b), and 1 / |x| from x's sum of squares.
__device__ __forceinline__ float delta_g(float A, float a, float dt_bias) { return -A * softplus_f(a + dt_bias); }
__device__ __forceinline__ float delta_beta(float b) { return 1.0f / (1.0f + expf(-b)); }
__device__ __forceinline__ float delta_inv_norm(float ss) { return 1.0f / sqrtf(ss + 1e-6f); }

// Whether the tiled form takes chunked sequences of this k_dim and chunk: 128 and 64, unless
// TF_CUDA_DELTA_TILED is 0.
bool delta_tiled_takes(int k_dim, int chunk);

// Runs the chunked sequences `jobs` (a.jobs their device copy) of an op over `rows` rows by the
// tiled form, in passes of whole sequences where they hold more chunks than the scratch.
void delta_tiled(CudaBackend& be, const DeltaArgs& a, const std::vector<SeqJob>& jobs, int64_t rows, int k_heads,
                 int v_heads);

}  // namespace tf::cuda
