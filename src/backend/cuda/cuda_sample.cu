// Sampling on the device: a team of blocks a spec (a thread block cluster, or one block) runs
// sampling.h's rule step for step, so the ids equal the cpu's sample_row and never depend on the
// other rows or on how many blocks a team has.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cuda/cuda_argmax.cuh"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_sample_passes.cuh"
#include "backend/cuda/cuda_team.cuh"
#include "backend/cuda/cuda_util.cuh"
#include "backend/sampling.h"

namespace tf::cuda {

namespace {

constexpr uint32_t kOne = 0x3f800000u;  // 1.0f: weights lie in [0, 1]

// The canonical test of the top_p search: S(th) >= target.
__device__ bool nucleus_holds(const Draw& t, const RowRule& r, uint32_t th, double target) {
  return canonical_sum<false>(t, r, float_of_bits(th)) >= target;
}

// The bracket's walk down one level of kNucleusBuckets approximate sums: the highest bucket where
// `above` (the sum over higher levels' buckets above this one's range) plus the buckets from it up
// reach target. Sets b and above and returns true; false when no bucket reaches it (then the
// sums disagree with the target near a boundary, and the search runs bit by bit). Warp 0 calls.
__device__ bool bracket_walk(const double* hist, double target, double& above, int& b) {
  const int lane = threadIdx.x % 32;
  constexpr int kPer = kNucleusBuckets / 32;
  double own = 0.0;
  for (int i = 0; i < kPer; ++i) own += hist[lane * kPer + i];
  double suf = own;
  for (int off = 1; off < 32; off <<= 1) {
    const double o = __shfl_down_sync(0xffffffffu, suf, off);
    if (lane + off < 32) suf += o;
  }
  const unsigned reach = __ballot_sync(0xffffffffu, above + suf >= target);
  if (reach == 0u) return false;
  const int top = 31 - __clz(reach);
  int found = -1;
  double next_above = 0.0;
  if (lane == top) {
    double cum = above + (suf - own);
    for (int i = kPer - 1; i >= 0; --i) {
      const double h = hist[lane * kPer + i];
      if (cum + h >= target) {
        found = lane * kPer + i, next_above = cum;
        break;
      }
      cum += h;
    }
  }
  found = __shfl_sync(0xffffffffu, found, top);
  next_above = __shfl_sync(0xffffffffu, next_above, top);
  if (found < 0) return false;
  b = found, above = next_above;
  return true;
}

// Sums of the positive weights whose bits lie in [lo, lo + (kNucleusBuckets << shift)) by bucket
// (bits - lo) >> shift, into t.hist_all: one level of the bracket below the first.
__device__ void bracket_level(const Draw& t, const RowRule& r, uint32_t lo, int shift) {
  team_open(t);
  for (int b = threadIdx.x; b < kNucleusBuckets; b += kSampleThreads) t.hist[b] = 0.0;
  __syncthreads();
  const uint64_t span = static_cast<uint64_t>(kNucleusBuckets) << shift;
  for_rounds(t, r.V, [&](int64_t i0) {
    float v[kUnroll];
    load_round(v, r.e, r.V, i0, 0.0f);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const uint32_t bits = __float_as_uint(v[u]);
      const bool in = v[u] > 0.0f && bits >= lo && static_cast<uint64_t>(bits - lo) < span;
      hist_add(t.hist, in ? (bits - lo) >> shift : kNone, v[u]);
    }
  });
  team_publish(t);
  gather_hist(t);
  team_close(t);
  __syncthreads();
}

// The top_p threshold's bits (sampling.h): the largest t with S(t) >= target. With bracket, three
// levels of approximate sums by bits (the first already in t.hist_all) point at one t, which the
// canonical sums confirm: S(t) reaches target and S(t + 1) does not, so by S's monotony t is the
// answer; t.cs then holds S(t)'s chunks and *st its total. Else, or when that fails, the bit-by-bit
// search; *st is then unset (negative).
__device__ uint32_t nucleus_bits(const Draw& t, const RowRule& r, double target, bool bracket, double* st) {
  __shared__ int s_b;
  __shared__ double s_above;
  __shared__ bool s_ok;
  *st = -1.0;
  if (bracket) {
    uint32_t lo = 0;
    bool ok = true;
    double above = 0.0;
    for (int shift = 20; shift >= 0 && ok; shift -= 10) {
      if (shift < 20) bracket_level(t, r, lo, shift);
      if (threadIdx.x < 32) {
        int b = 0;
        const bool got = bracket_walk(t.hist_all, target, above, b);
        if (threadIdx.x == 0) s_ok = got, s_b = b, s_above = above;
      }
      __syncthreads();
      ok = s_ok, above = s_above;
      lo += static_cast<uint32_t>(s_b) << shift;
      __syncthreads();
    }
    if (ok && lo <= kOne && (lo == kOne || !nucleus_holds(t, r, lo + 1, target))) {
      const double total = canonical_sum<false>(t, r, float_of_bits(lo));
      if (total >= target) {
        *st = total;
        return lo;
      }
    }
  }
  uint32_t lo = 0, hi = kOne;
  while (lo < hi) {
    const uint32_t mid = lo + (hi - lo + 1) / 2;
    if (nucleus_holds(t, r, mid, target)) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

// A spec's draw up to its walk, by the whole team: the id where the rule needs no walk (>= 0), or
// -1 with the walk's threshold and total set (t.cs then holds S(th)'s chunk sums).
__device__ int draw_prepare(const Draw& t, const SampleSpec& s, const float* w, float* e, int64_t V, bool bracket,
                            float& th, double& total) {
  if (!(s.temperature > 0.0f) || s.top_k == 1 || V <= 1) return block_argmax(t, w, V);
  int64_t valid = 0;
  const float m = block_max_count(t, w, V, valid);
  if (!isfinite(m)) return block_argmax(t, w, V);
  RowRule r{w, e, V, m, 1.0f / s.temperature, 0u};
  if (s.top_k > 0 && s.top_k < V && valid >= s.top_k) {
    if (bracket) {
      r.tk = block_kth_key(t, w, V, s.top_k);
    } else {
      // The k-th largest key: the largest t that at least k keys reach.
      uint32_t lo = 0, hi = 0xffffffffu;
      while (lo < hi) {
        const uint32_t mid = lo + (hi - lo) / 2 + (hi - lo) % 2;
        if (block_count_keys(t, w, V, mid) >= s.top_k) lo = mid;
        else hi = mid - 1;
      }
      r.tk = lo;
    }
  }
  const bool nucleus = s.top_p < 1.0f;
  // The weights, their sum at 0 (and the bracket's first level).
  total = canonical_sum<true>(t, r, 0.0f, nucleus && bracket);
  th = 0.0f;
  if (nucleus) {
    double st = -1.0;
    th = float_of_bits(nucleus_bits(t, r, static_cast<double>(s.top_p) * total, bracket, &st));
    total = st;  // t.cs holds S(th)'s chunks where the bracket held
  }
  if (s.min_p > th || total < 0.0) {
    th = s.min_p > th ? s.min_p : th;
    total = canonical_sum<false>(t, r, th);
  }
  return total > 0.0 ? -1 : block_argmax(t, w, V);
}

// Grid (specs, team size): block (x, y) is rank y of spec x's team, launched as one cluster along
// y where the team has more than one block.
__global__ void __launch_bounds__(kSampleThreads)
    sample_kernel(const float* __restrict__ logits, int64_t V, const SampleSpec* __restrict__ specs,
                  const PenaltyToken* __restrict__ pens, float* scratch, float* penalized_rows, int32_t* ids,
                  bool bracket) {
  grid_wait();
  grid_launch_next();
  extern __shared__ double team_smem[];
  Draw t;
  t.rank = blockIdx.y, t.size = gridDim.y;
  t.cs = team_smem, t.tree = t.cs + kSampleMaxChunks, t.hist = t.tree + kSampleMaxChunks;
  t.hist_all = t.hist + kNucleusBuckets;
  t.counts = reinterpret_cast<unsigned*>(t.hist_all + kNucleusBuckets);
  t.counts_all = t.counts + kKeyBuckets, t.part = t.counts_all + kKeyBuckets;
  team_close(t);  // the first exchange's team_open waits on every block of the team having started
  const SampleSpec s = specs[blockIdx.x];
  const float* w = logits + static_cast<int64_t>(s.row) * V;
  if (s.pen_count > 0) {
    // The row with its history's tokens penalized, in scratch (ids are distinct: no two threads
    // write one logit).
    float* p = penalized_rows + static_cast<int64_t>(blockIdx.x) * V;
    const int64_t first = static_cast<int64_t>(t.rank) * kSampleThreads + threadIdx.x;
    const int64_t stride = static_cast<int64_t>(t.size) * kSampleThreads;
    team_open(t);
    for (int64_t i = first; i < V; i += stride) p[i] = w[i];
    team_publish(t);
    for (int64_t k = first; k < s.pen_count; k += stride) {
      const PenaltyToken pt = pens[s.pen_begin + k];
      p[pt.id] = penalized(p[pt.id], s, pt.generated);
    }
    team_publish(t);
    team_close(t);
    w = p;
  }
  float th = 0.0f;
  double total = 0.0;
  const int id = draw_prepare(t, s, w, scratch + static_cast<int64_t>(blockIdx.x) * V, V, bracket, th, total);
  team_open(t);  // no block leaves while another may still read its shared memory
  if (t.rank != 0) return;
  if (id >= 0) {
    if (threadIdx.x == 0) ids[blockIdx.x] = id;
    return;
  }
  if (threadIdx.x >= 32) return;
  const float* e = scratch + static_cast<int64_t>(blockIdx.x) * V;
  // The walk, in sampling.h's order: every lane of warp 0 adds the chunk sums alike (they come
  // from shared memory, eight loads ahead) up to the chunk u falls in, or the last that counts;
  // the warp stages that chunk's weights, and lane 0 walks them.
  const int lane = threadIdx.x;
  const double u = philox_uniform(s.seed, s.position) * total;
  const int n = static_cast<int>((V + kSampleChunk - 1) / kSampleChunk);
  double cum = 0.0;
  int chosen = -1, last = -1;
  for (int c0 = 0; c0 < n && chosen < 0; c0 += 8) {
    double cv[8];
#pragma unroll
    for (int q = 0; q < 8; ++q) cv[q] = c0 + q < n ? t.cs[c0 + q] : 0.0;
#pragma unroll
    for (int q = 0; q < 8; ++q) {
      if (chosen >= 0 || !(cv[q] > 0.0)) continue;
      last = c0 + q;
      if (u < cum + cv[q]) chosen = c0 + q;
      else cum += cv[q];
    }
  }
  // Only rounding leaves u unreached: then the last weight that counted (never absent: total > 0).
  const int c = chosen >= 0 ? chosen : last;
  float* staged = reinterpret_cast<float*>(t.hist_all);
  const int begin = c * kSampleChunk, end = static_cast<int>(min(V, static_cast<int64_t>(begin + kSampleChunk)));
  for (int i = begin + lane; i < end; i += 32) staged[i - begin] = e[i];
  __syncwarp();
  if (lane != 0) return;
  if (chosen >= 0) {
    int in_chunk = -1;
    for (int i = begin; i < end; ++i) {
      const float v = staged[i - begin];
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
  for (int i = end - 1; i >= begin; --i) {
    const float v = staged[i - begin];
    if (v >= th && v > 0.0f) {
      ids[blockIdx.x] = i;
      return;
    }
  }
  ids[blockIdx.x] = -1;
}

// Whether sampling brackets its thresholds (TF_CUDA_SAMPLE_SEARCH=full: the rule's bit-by-bit
// searches alone, for side-by-side timing; the same ids).
bool sample_bracket() {
  static const bool on = [] {
    const char* e = std::getenv("TF_CUDA_SAMPLE_SEARCH");
    return !(e && std::string(e) == "full");
  }();
  return on;
}

// Lets sample_kernel have its kDrawSmem bytes of shared memory, once.
void sample_kernel_smem() {
  static const bool set = [] {
    TF_CUDA_CHECK(cudaFuncSetAttribute(sample_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(kDrawSmem)),
                  "sample_rows");
    return true;
  }();
  (void)set;
}

// Blocks a spec's team gets in a call of n specs over rows of V logits on a card of sms SMs: the
// largest power of two up to 16 whose teams all fit the card at once and leave each block at least
// two rounds of a pass, where the device has clusters; TF_CUDA_SAMPLE_TEAM=n: n blocks always
// (1..16; 1 is one block a spec, for side-by-side timing). The team's size never changes an id.
unsigned sample_team(size_t n, int64_t V, int sms) {
  static const int forced = [] {
    const char* e = std::getenv("TF_CUDA_SAMPLE_TEAM");
    const int v = e ? std::atoi(e) : 0;
    return v < 0 ? 0 : v > kTeamMax ? kTeamMax : v;
  }();
  // Clusters of each size the card holds at once (0: none), asked once.
  static const std::vector<int> fits = [] {
    std::vector<int> f(kTeamMax + 1, 0);
    sample_kernel_smem();
    cudaFuncAttributes fa = {};
    if (!cluster_on() || cudaFuncGetAttributes(&fa, sample_kernel) != cudaSuccess || fa.ptxVersion < 90) {
      (void)cudaGetLastError();
      return f;
    }
    (void)cudaFuncSetAttribute(sample_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
    for (int c = 2; c <= kTeamMax; ++c) {
      cudaLaunchAttribute at = {};
      at.id = cudaLaunchAttributeClusterDimension;
      at.val.clusterDim = {1, static_cast<unsigned>(c), 1};
      cudaLaunchConfig_t cfg = {};
      cfg.gridDim = dim3(1, c);
      cfg.blockDim = dim3(kSampleThreads);
      cfg.dynamicSmemBytes = kDrawSmem;
      cfg.attrs = &at;
      cfg.numAttrs = 1;
      if (cudaOccupancyMaxActiveClusters(&f[c], sample_kernel, &cfg) != cudaSuccess) {
        (void)cudaGetLastError();
        f[c] = 0;
      }
    }
    return f;
  }();
  if (forced) return forced > 1 && fits[forced] > 0 ? static_cast<unsigned>(forced) : 1u;
  unsigned best = 1;
  for (unsigned c = 2; c <= kTeamMax; c *= 2)
    if (fits[c] > 0 && n <= static_cast<size_t>(fits[c]) && static_cast<int64_t>(n * c) <= sms &&
        V >= static_cast<int64_t>(2 * c) * kTeamSpan)
      best = c;
  return best;
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
  size_t weighted = 0;  // specs that draw (not greedy): the only ones whose weights are kept
  for (const SampleSpec& s : specs) {
    penalized = penalized || s.pen_count > 0;
    weighted += s.temperature > 0.0f && s.top_k != 1 ? 1 : 0;
  }
  auto* d_ids = static_cast<int32_t*>(buffer(kSlotSample, specs.size() * sizeof(int32_t)));
  if ((weighted == 0 || logits.cols <= 1) && !penalized && sample_split()) {
    auto* part = static_cast<int2*>(buffer(kSlotSampleWeights, specs.size() * argmax_slices(logits.cols) * sizeof(int2)));
    launch_greedy_argmax(logits.data, logits.cols, d_specs, static_cast<unsigned>(specs.size()), part, d_ids);
  } else {
    auto* rows = penalized ? static_cast<float*>(buffer(kSlotSamplePenalized, specs.size() * logits.cols * sizeof(float)))
                           : nullptr;
    auto* scratch = weighted ? static_cast<float*>(buffer(kSlotSampleWeights, specs.size() * logits.cols * sizeof(float)))
                             : nullptr;
    int sms = 0;
    TF_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device_),
                  "sample_rows: multiprocessor count");
    const unsigned team = sample_team(specs.size(), logits.cols, sms);
    const dim3 grid(static_cast<unsigned>(specs.size()), team);
    if (team > 1)
      launch_kernel_cluster(team, sample_kernel, grid, kSampleThreads, kDrawSmem, logits.data, logits.cols, d_specs,
                            d_pens, scratch, rows, d_ids, sample_bracket());
    else
      launch_kernel(sample_kernel, grid, kSampleThreads, kDrawSmem, logits.data, logits.cols, d_specs, d_pens, scratch,
                    rows, d_ids, sample_bracket());
  }
  check_launch("sample_rows");
  const WaitScope wait(*this);
  TF_CUDA_CHECK(cudaMemcpy(ids, d_ids, specs.size() * sizeof(int32_t), cudaMemcpyDeviceToHost), "sample_rows");
}

}  // namespace tf::cuda
