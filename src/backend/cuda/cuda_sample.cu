// Sampling on the device: one block a spec runs sampling.h's rule step for step, so the ids equal
// the cpu's sample_row and never depend on the other rows.
#include <climits>
#include <cstdint>
#include <cstring>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_util.cuh"
#include "backend/sampling.h"

namespace tf::cuda {

namespace {

constexpr int kSampleThreads = 512, kSampleWarps = kSampleThreads / 32;

// (v, i) beats (bv, bi) when larger, or equal with a lower id; NaN never beats anything.
__device__ __forceinline__ bool argmax_beats(float v, int i, float bv, int bi) {
  return v > bv || (v == bv && i < bi);
}

// base/argmax.h's rule over one row, by the whole block; every thread gets the id.
__device__ int block_argmax(const float* row, int64_t cols) {
  __shared__ float sv[kSampleWarps];
  __shared__ int si[kSampleWarps];
  float bv = -INFINITY;
  int bi = INT_MAX;
  for (int64_t c = threadIdx.x; c < cols; c += kSampleThreads)
    if (argmax_beats(row[c], static_cast<int>(c), bv, bi)) bv = row[c], bi = static_cast<int>(c);
  for (int off = 16; off > 0; off >>= 1) {
    const float v = __shfl_xor_sync(0xffffffffu, bv, off);
    const int i = __shfl_xor_sync(0xffffffffu, bi, off);
    if (argmax_beats(v, i, bv, bi)) bv = v, bi = i;
  }
  if (threadIdx.x % 32 == 0) sv[threadIdx.x / 32] = bv, si[threadIdx.x / 32] = bi;
  __syncthreads();
  bv = sv[0], bi = si[0];
  for (int w = 1; w < kSampleWarps; ++w)
    if (argmax_beats(sv[w], si[w], bv, bi)) bv = sv[w], bi = si[w];
  __syncthreads();
  return isnan(row[0]) || bi == INT_MAX ? 0 : bi;
}

// Largest non-NaN value of the row (order-free), by the whole block.
__device__ float block_max(const float* row, int64_t cols) {
  __shared__ float sm[kSampleWarps];
  float m = -INFINITY;
  for (int64_t c = threadIdx.x; c < cols; c += kSampleThreads) m = row[c] > m ? row[c] : m;
  for (int off = 16; off > 0; off >>= 1) {
    const float v = __shfl_xor_sync(0xffffffffu, m, off);
    m = v > m ? v : m;
  }
  if (threadIdx.x % 32 == 0) sm[threadIdx.x / 32] = m;
  __syncthreads();
  m = sm[0];
  for (int w = 1; w < kSampleWarps; ++w) m = sm[w] > m ? sm[w] : m;
  __syncthreads();
  return m;
}

// Logits that are not NaN and whose key is at least t, by the whole block.
__device__ int64_t block_count_keys(const float* row, int64_t cols, uint32_t t) {
  __shared__ long long sc[kSampleWarps];
  long long n = 0;
  for (int64_t c = threadIdx.x; c < cols; c += kSampleThreads) n += row[c] == row[c] && sample_key(row[c]) >= t;
  for (int off = 16; off > 0; off >>= 1) n += __shfl_xor_sync(0xffffffffu, n, off);
  if (threadIdx.x % 32 == 0) sc[threadIdx.x / 32] = n;
  __syncthreads();
  n = 0;
  for (int w = 0; w < kSampleWarps; ++w) n += sc[w];
  __syncthreads();
  return n;
}

// A row's weights, computed once into e (global scratch: every pass of the threshold search reads
// them back from L2 instead of recomputing them).
struct RowRule {
  const float* w;
  float* e;
  int64_t V;
  float m, inv_t;
  uint32_t tk;
  __device__ void fill() const {
    for (int64_t i = threadIdx.x; i < V; i += kSampleThreads) e[i] = sample_weight(w[i], m, inv_t, tk);
    __syncthreads();
  }
  __device__ float weight(int64_t i) const { return e[i]; }
};

// The canonical sum of the weights >= th (sampling.h): chunk sums left in cs, the total returned.
__device__ double canonical_sum(const RowRule& r, float th, double* cs, double* tree) {
  const int n = static_cast<int>((r.V + kSampleChunk - 1) / kSampleChunk);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int c = warp; c < n; c += kSampleWarps) {
    double acc = 0.0;
#pragma unroll
    for (int j = 0; j < kSampleChunk / 32; ++j) {
      const int64_t i = static_cast<int64_t>(c) * kSampleChunk + j * 32 + lane;
      if (i < r.V) {
        const float v = r.weight(i);
        if (v >= th) acc += static_cast<double>(v);
      }
    }
    for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
    if (lane == 0) cs[c] = acc;
  }
  int p = 1;
  while (p < n) p *= 2;
  __syncthreads();
  for (int i = threadIdx.x; i < p; i += kSampleThreads) tree[i] = i < n ? cs[i] : 0.0;
  __syncthreads();
  for (int stride = 1; stride < p; stride *= 2) {
    for (int i = threadIdx.x * 2 * stride; i + stride < p; i += kSampleThreads * 2 * stride) tree[i] += tree[i + stride];
    __syncthreads();
  }
  const double total = tree[0];
  __syncthreads();
  return total;
}

__global__ void __launch_bounds__(kSampleThreads)
    sample_kernel(const float* __restrict__ logits, int64_t V, const SampleSpec* __restrict__ specs,
                  const PenaltyToken* __restrict__ pens, float* scratch, float* penalized_rows, int32_t* ids) {
  grid_wait();
  grid_launch_next();
  __shared__ double cs[kSampleMaxChunks], tree[kSampleMaxChunks];
  const SampleSpec s = specs[blockIdx.x];
  const float* w = logits + static_cast<int64_t>(s.row) * V;
  if (s.pen_count > 0) {
    // The row with its history's tokens penalized, in scratch (ids are distinct: no two threads
    // write one logit).
    float* p = penalized_rows + static_cast<int64_t>(blockIdx.x) * V;
    for (int64_t i = threadIdx.x; i < V; i += kSampleThreads) p[i] = w[i];
    __syncthreads();
    for (int k = threadIdx.x; k < s.pen_count; k += kSampleThreads) {
      const PenaltyToken t = pens[s.pen_begin + k];
      p[t.id] = penalized(p[t.id], s, t.generated);
    }
    __syncthreads();
    w = p;
  }
  if (!(s.temperature > 0.0f) || s.top_k == 1 || V <= 1) {
    const int id = block_argmax(w, V);
    if (threadIdx.x == 0) ids[blockIdx.x] = id;
    return;
  }
  const float m = block_max(w, V);
  if (!isfinite(m)) {
    const int id = block_argmax(w, V);
    if (threadIdx.x == 0) ids[blockIdx.x] = id;
    return;
  }
  RowRule r{w, scratch + static_cast<int64_t>(blockIdx.x) * V, V, m, 1.0f / s.temperature, 0u};
  if (s.top_k > 0 && s.top_k < V && block_count_keys(w, V, 0u) >= s.top_k) {
    // The k-th largest key: the largest t that at least k keys reach.
    uint32_t lo = 0, hi = 0xffffffffu;
    while (lo < hi) {
      const uint32_t mid = lo + (hi - lo) / 2 + (hi - lo) % 2;
      if (block_count_keys(w, V, mid) >= s.top_k) lo = mid;
      else hi = mid - 1;
    }
    r.tk = lo;
  }
  r.fill();
  float th = 0.0f;
  if (s.top_p < 1.0f) {
    const double target = static_cast<double>(s.top_p) * canonical_sum(r, 0.0f, cs, tree);
    uint32_t lo = 0, hi = 0x3f800000u;
    while (lo < hi) {
      const uint32_t mid = lo + (hi - lo + 1) / 2;
      if (canonical_sum(r, float_of_bits(mid), cs, tree) >= target) lo = mid;
      else hi = mid - 1;
    }
    th = float_of_bits(lo);
  }
  th = s.min_p > th ? s.min_p : th;
  const double total = canonical_sum(r, th, cs, tree);
  if (!(total > 0.0)) {
    const int id = block_argmax(w, V);
    if (threadIdx.x == 0) ids[blockIdx.x] = id;
    return;
  }
  if (threadIdx.x != 0) return;
  // The walk is short (chunk sums, then one chunk): one thread, in sampling.h's order.
  const double u = philox_uniform(s.seed, s.position) * total;
  const int n = static_cast<int>((V + kSampleChunk - 1) / kSampleChunk);
  double cum = 0.0;
  int last = -1;
  for (int c = 0; c < n; ++c) {
    if (!(cs[c] > 0.0)) continue;
    const int begin = c * kSampleChunk, end = static_cast<int>(min(V, static_cast<int64_t>(begin + kSampleChunk)));
    if (u < cum + cs[c]) {
      int in_chunk = -1;
      for (int i = begin; i < end; ++i) {
        const float v = r.weight(i);
        if (!(v >= th && v > 0.0f)) continue;
        in_chunk = i;
        cum += static_cast<double>(v);
        if (u < cum) {
          ids[blockIdx.x] = i;
          return;
        }
      }
      ids[blockIdx.x] = in_chunk;
      return;
    }
    cum += cs[c];
    for (int i = end - 1; i >= begin; --i) {
      const float v = r.weight(i);
      if (v >= th && v > 0.0f) {
        last = i;
        break;
      }
    }
  }
  // Only rounding leaves u unreached: the last weight that counted (never -1: total > 0).
  ids[blockIdx.x] = last;
}

}  // namespace

void CudaBackend::sample_rows(const Tensor& logits, const std::vector<SampleSpec>& specs,
                              const std::vector<PenaltyToken>& pens, int32_t* ids) {
  graph_refuse();
  const ProfScope prof(*this, "sample_rows", nullptr, static_cast<int64_t>(specs.size()));
  check_tensor(logits, "sample_rows", "logits");
  if (specs.empty()) return;
  // Rows longer than the block's chunk table, or more specs than a grid row, draw on the host.
  if (logits.cols > static_cast<int64_t>(kSampleMaxChunks) * kSampleChunk || specs.size() > 65535) {
    Backend::sample_rows(logits, specs, pens, ids);
    return;
  }
  check_samples(logits, specs, pens);
  // Specs and penalty tokens in one upload: a second could recycle the first one's ring space.
  const uint64_t spec_bytes = specs.size() * sizeof(SampleSpec), off = (spec_bytes + 15) / 16 * 16;
  std::vector<uint8_t> blob(off + pens.size() * sizeof(PenaltyToken));
  std::memcpy(blob.data(), specs.data(), spec_bytes);
  if (!pens.empty()) std::memcpy(blob.data() + off, pens.data(), pens.size() * sizeof(PenaltyToken));
  const auto* d_blob = static_cast<const uint8_t*>(meta(blob.data(), blob.size()));
  const auto* d_specs = reinterpret_cast<const SampleSpec*>(d_blob);
  const auto* d_pens = reinterpret_cast<const PenaltyToken*>(d_blob + off);
  bool penalized = false;
  for (const SampleSpec& s : specs) penalized = penalized || s.pen_count > 0;
  auto* rows = penalized ? static_cast<float*>(buffer(kSlotSamplePenalized, specs.size() * logits.cols * sizeof(float)))
                         : nullptr;
  auto* d_ids = static_cast<int32_t*>(buffer(kSlotSample, specs.size() * sizeof(int32_t)));
  // Weights of sampled (not greedy) specs only.
  size_t weighted = 0;
  for (const SampleSpec& s : specs) weighted += s.temperature > 0.0f && s.top_k != 1 ? 1 : 0;
  auto* scratch = weighted ? static_cast<float*>(buffer(kSlotSampleWeights, specs.size() * logits.cols * sizeof(float)))
                           : nullptr;
  launch_kernel(sample_kernel, static_cast<unsigned>(specs.size()), kSampleThreads, 0, logits.data,
                logits.cols, d_specs, d_pens, scratch, rows, d_ids);
  check_launch("sample_rows");
  const WaitScope wait(*this);
  TF_CUDA_CHECK(cudaMemcpy(ids, d_ids, specs.size() * sizeof(int32_t), cudaMemcpyDeviceToHost), "sample_rows");
}

}  // namespace tf::cuda
