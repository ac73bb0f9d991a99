#pragma once
// Sampling's passes over a row by a team of blocks (cuda_team.cuh): the argmax, the max and count,
// top_k's key by counts, the weights and their canonical sums (sampling.h), each combined over
// the team in rank order. Included by cuda_sample.cu alone, which runs the rule with them.
#include <climits>
#include <cstdint>

#include "backend/cuda/cuda_argmax.cuh"
#include "backend/cuda/cuda_team.cuh"
#include "backend/cuda/cuda_util.cuh"
#include "backend/sampling.h"

namespace tf::cuda {
namespace {

constexpr int kSampleThreads = 512, kSampleWarps = kSampleThreads / 32;
constexpr int kUnroll = 4;             // logits (or chunks) a thread loads before it uses any
constexpr int kNucleusBuckets = 1024;  // the top_p bracket: three levels of 10 bits over [0, 1.0]'s 30
constexpr int kKeyBuckets = 4096;      // top_k's widest level: 12 bits
constexpr int kTeamSpan = kUnroll * kSampleThreads;  // ids a block takes a round

// A spec's draw: its team (cuda_team.cuh; a cluster along y whose rank is blockIdx.y, or one
// block) and the block's scratch in (dynamic) shared memory. Passes split their ids over the team;
// a reduction's shares go through each block's shared memory, and every block combines them in
// rank order, so all get the same bits and take the same branches.
struct Draw : Team {
  double* cs;            // every chunk sum of the last canonical sum [kSampleMaxChunks]
  double* tree;          // its pairwise tree [kSampleMaxChunks]
  double* hist;          // this block's share of the bracket's sums [kNucleusBuckets]
  double* hist_all;      // the team's [kNucleusBuckets]
  unsigned* counts;      // this block's share of top_k's counts [kKeyBuckets]
  unsigned* counts_all;  // the team's [kKeyBuckets]
  unsigned* part;        // block_walk_counts' partial sums [kSampleThreads]
};
constexpr size_t kDrawSmem = sizeof(double) * (2 * kSampleMaxChunks + 2 * kNucleusBuckets) +
                             sizeof(unsigned) * (2 * kKeyBuckets + kSampleThreads);

// Calls f(i0) once a round of the block's share of a pass over n ids, the rounds the same for a
// whole warp: block rank takes rounds rank, rank + size, ... of kTeamSpan ids, and the thread ids
// i0 + u * kSampleThreads (u < kUnroll) of each, checking each against n itself.
template <class F>
__device__ __forceinline__ void for_rounds(const Team& t, int64_t n, F f) {
  const int64_t w0 = static_cast<int64_t>(t.rank) * kTeamSpan + threadIdx.x - threadIdx.x % 32;
  for (int64_t r = w0; r < n; r += static_cast<int64_t>(t.size) * kTeamSpan) f(r + threadIdx.x % 32);
}

// The values of one round of for_rounds at i0: ids i0 + u * kSampleThreads, pad past n.
__device__ __forceinline__ void load_round(float (&v)[kUnroll], const float* row, int64_t n, int64_t i0, float pad) {
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) v[u] = i0 + u * kSampleThreads < n ? row[i0 + u * kSampleThreads] : pad;
}

// base/argmax.h's rule over one row, by the whole team; every thread gets the id. The rule is a
// total order, so the order the team visits ids in does not change the winner.
__device__ int block_argmax(const Team& t, const float* row, int64_t cols) {
  __shared__ float sv[kSampleWarps];
  __shared__ int si[kSampleWarps];
  __shared__ int2 tb;  // the block's best: value bits, id
  float bv = -INFINITY;
  int bi = INT_MAX;
  for_rounds(t, cols, [&](int64_t i0) {
    float v[kUnroll];
    load_round(v, row, cols, i0, NAN);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int i = static_cast<int>(i0 + u * kSampleThreads);
      if (i < cols && argmax_beats(v[u], i, bv, bi)) bv = v[u], bi = i;
    }
  });
  warp_argmax(bv, bi);
  if (threadIdx.x % 32 == 0) sv[threadIdx.x / 32] = bv, si[threadIdx.x / 32] = bi;
  __syncthreads();
  bv = sv[0], bi = si[0];
  for (int w = 1; w < kSampleWarps; ++w)
    if (argmax_beats(sv[w], si[w], bv, bi)) bv = sv[w], bi = si[w];
  team_open(t);
  if (threadIdx.x == 0) tb = make_int2(__float_as_int(bv), bi);
  team_publish(t);
  const int2 best = team_fold(t, &tb, make_int2(__float_as_int(-INFINITY), INT_MAX), [](int2 a, int2 b) {
    return argmax_beats(__int_as_float(b.x), b.y, __int_as_float(a.x), a.y) ? b : a;
  });
  bi = best.y;
  team_close(t);
  return isnan(row[0]) || bi == INT_MAX ? 0 : bi;
}

// Largest non-NaN value of the row (order-free) and how many logits are not NaN, by the whole team.
__device__ float block_max_count(const Team& t, const float* row, int64_t cols, int64_t& valid) {
  __shared__ float sm[kSampleWarps];
  __shared__ long long sc[kSampleWarps];
  __shared__ float tm;
  __shared__ long long tc;
  float m = -INFINITY;
  long long n = 0;
  for_rounds(t, cols, [&](int64_t i0) {
    float v[kUnroll];
    load_round(v, row, cols, i0, NAN);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) m = v[u] > m ? v[u] : m, n += v[u] == v[u];
  });
  for (int off = 16; off > 0; off >>= 1) {
    const float v = __shfl_xor_sync(0xffffffffu, m, off);
    m = v > m ? v : m;
    n += __shfl_xor_sync(0xffffffffu, n, off);
  }
  if (threadIdx.x % 32 == 0) sm[threadIdx.x / 32] = m, sc[threadIdx.x / 32] = n;
  __syncthreads();
  m = sm[0], n = 0;
  for (int w = 0; w < kSampleWarps; ++w) m = sm[w] > m ? sm[w] : m, n += sc[w];
  team_open(t);
  if (threadIdx.x == 0) tm = m, tc = n;
  team_publish(t);
  m = team_fold(t, &tm, -INFINITY, [](float a, float b) { return b > a ? b : a; });
  n = team_fold(t, &tc, 0LL, [](long long a, long long b) { return a + b; });
  team_close(t);
  valid = n;
  return m;
}

// Logits that are not NaN and whose key is at least k, by the whole team.
__device__ int64_t block_count_keys(const Team& t, const float* row, int64_t cols, uint32_t k) {
  __shared__ long long sc[kSampleWarps];
  __shared__ long long tc;
  long long n = 0;
  for_rounds(t, cols, [&](int64_t i0) {
    float v[kUnroll];
    load_round(v, row, cols, i0, NAN);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) n += v[u] == v[u] && sample_key(v[u]) >= k;
  });
  for (int off = 16; off > 0; off >>= 1) n += __shfl_xor_sync(0xffffffffu, n, off);
  if (threadIdx.x % 32 == 0) sc[threadIdx.x / 32] = n;
  __syncthreads();
  n = 0;
  for (int w = 0; w < kSampleWarps; ++w) n += sc[w];
  team_open(t);
  if (threadIdx.x == 0) tc = n;
  team_publish(t);
  n = team_fold(t, &tc, 0LL, [](long long a, long long b) { return a + b; });
  team_close(t);
  return n;
}

// Counts one for each lane into its counter b of the block's shared counts, with one add of 32
// where the warp's lanes all hold one counter (a flat row would queue every lane on one address);
// b == kNone counts nothing. Every lane of the warp calls.
constexpr unsigned kNone = 0xffffffffu;
__device__ __forceinline__ void count_add(unsigned* hist, unsigned b) {
  const unsigned b0 = __shfl_sync(0xffffffffu, b, 0);
  if (__all_sync(0xffffffffu, b == b0)) {
    if (b0 != kNone && threadIdx.x % 32 == 0) atomicAdd(&hist[b0], 32u);
  } else if (b != kNone) {
    atomicAdd(&hist[b], 1u);
  }
}

// The highest bucket of counts[0, n) (n = 16 * kSampleThreads at most, a multiple of 512) where the
// counts from it up reach k; *rest gets k less the counts above it. The whole block calls; part
// (kSampleThreads words) holds each thread's partial sums.
__device__ int block_walk_counts(const unsigned* counts, int n, long long k, unsigned* part, long long* rest) {
  __shared__ int s_at;
  __shared__ long long s_rest;
  const int per = n / kSampleThreads, t = threadIdx.x;
  unsigned own = 0;
  for (int i = 0; i < per; ++i) own += counts[t * per + i];
  part[t] = own;
  __syncthreads();
  if (t < 32) {
    // Lane l sums threads 16 l .. 16 l + 15; the lanes above the one that reaches k hold less than k.
    constexpr int kPerLane = kSampleThreads / 32;
    long long lane_sum = 0;
    for (int i = 0; i < kPerLane; ++i) lane_sum += part[t * kPerLane + i];
    long long suf = lane_sum;
    for (int off = 1; off < 32; off <<= 1) {
      const long long o = __shfl_down_sync(0xffffffffu, suf, off);
      if (t + off < 32) suf += o;
    }
    const unsigned reach = __ballot_sync(0xffffffffu, suf >= k);
    const int top = reach ? 31 - __clz(reach) : 0;
    if (t == top) {
      long long cum = suf - lane_sum;
      int at = top * kPerLane * per;
      for (int th = kPerLane - 1; th >= 0; --th) {
        const int tt = top * kPerLane + th;
        if (cum + part[tt] >= k || th == 0) {
          for (int i = per - 1; i >= 0; --i) {
            const unsigned h = counts[tt * per + i];
            if (cum + h >= k || i == 0) {
              at = tt * per + i;
              break;
            }
            cum += h;
          }
          break;
        }
        cum += part[tt];
      }
      s_at = at, s_rest = k - cum;
    }
  }
  __syncthreads();
  const int at = s_at;
  *rest = s_rest;
  __syncthreads();
  return at;
}

// The k-th largest key of the row's non-NaN logits (1 <= k <= their count): the largest t that at
// least k keys reach, exactly. Three passes, each counting the keys under the bits found so far by
// their next 12, 12 and 8 (the first 12 spread a row's few exponents over many counters).
__device__ uint32_t block_kth_key(const Draw& t, const float* row, int64_t cols, int64_t k) {
  constexpr int kWidth[3] = {12, 12, 8};
  uint32_t prefix = 0, mask = 0;
  int shift = 32;
  for (int level = 0; level < 3; ++level) {
    shift -= kWidth[level];
    const int n = 1 << kWidth[level], nb = n < kSampleThreads ? kSampleThreads : n;
    team_open(t);
    for (int b = threadIdx.x; b < nb; b += kSampleThreads) t.counts[b] = 0;
    __syncthreads();
    for_rounds(t, cols, [&](int64_t i0) {
      float v[kUnroll];
      load_round(v, row, cols, i0, NAN);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const uint32_t key = v[u] == v[u] ? sample_key(v[u]) : 0u;  // NaN (and ids past the row) key 0: below every key
        const bool in = key != 0u && (key & mask) == prefix;
        count_add(t.counts, in ? (key >> shift) & static_cast<uint32_t>(n - 1) : kNone);
      }
    });
    team_publish(t);
    for (int b = threadIdx.x; b < nb; b += kSampleThreads) {
      t.counts_all[b] = team_fold(t, t.counts + b, 0u, [](unsigned a, unsigned c) { return a + c; });
    }
    team_close(t);
    __syncthreads();
    long long rest = 0;
    const int at = block_walk_counts(t.counts_all, nb, k, t.part, &rest);
    prefix |= static_cast<uint32_t>(at) << shift;
    mask |= static_cast<uint32_t>(n - 1) << shift;
    k = rest;
  }
  return prefix;
}

// A row's weights, computed once into e (global scratch: every later pass reads them back from L2
// instead of recomputing them; a team's blocks read each other's).
struct RowRule {
  const float* w;
  float* e;
  int64_t V;
  float m, inv_t;
  uint32_t tk;
  __device__ float weight(int64_t i) const { return e[i]; }
};

// Adds v to bucket b of a histogram of approximate sums: once for the whole warp where its lanes
// all hold one bucket; b == kNone adds nothing. Every lane of the warp calls.
__device__ __forceinline__ void hist_add(double* hist, unsigned b, float v) {
  const unsigned b0 = __shfl_sync(0xffffffffu, b, 0);
  if (__all_sync(0xffffffffu, b == b0)) {
    if (b0 == kNone) return;
    double t = v;
    for (int off = 16; off > 0; off >>= 1) t += __shfl_xor_sync(0xffffffffu, t, off);
    if (threadIdx.x % 32 == 0) atomicAdd(&hist[b0], t);
  } else if (b != kNone) {
    atomicAdd(&hist[b], static_cast<double>(v));
  }
}

// The team's bracket sums: every block's share, bucket by bucket in rank order, into hist_all.
// Called between team_publish and team_close.
__device__ void gather_hist(const Draw& t) {
  for (int b = threadIdx.x; b < kNucleusBuckets; b += kSampleThreads) {
    t.hist_all[b] = team_fold(t, t.hist + b, 0.0, [](double a, double c) { return a + c; });
  }
}

// The pairwise tree over the n chunk sums in cs (sampling.h), in tree's space; cs is kept.
__device__ double tree_total(const double* cs, double* tree, int n) {
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

// The canonical sum of the weights >= th (sampling.h): every block gets all chunk sums in t.cs and
// the total. The team's warps take chunks in turn (warp w of block q: chunks (q * kSampleWarps + w)
// + j * size * kSampleWarps), kUnroll of them at once; each chunk's adds keep the rule's order, and
// its sum goes to every block. With fill, the weights are first computed from the logits and stored
// (their sum is then the one at th 0), and with bracket each positive weight also adds to bucket
// bits >> 20 (the bracket's first level), gathered into t.hist_all.
template <bool kFill>
__device__ double canonical_sum(const Draw& t, const RowRule& r, float th, bool bracket = false) {
  const int n = static_cast<int>((r.V + kSampleChunk - 1) / kSampleChunk);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int gw = static_cast<int>(t.rank) * kSampleWarps + warp, tw = static_cast<int>(t.size) * kSampleWarps;
  constexpr int J = kSampleChunk / 32;
  team_open(t);
  if (kFill && bracket) {
    for (int b = threadIdx.x; b < kNucleusBuckets; b += kSampleThreads) t.hist[b] = 0.0;
    __syncthreads();
  }
  for (int c0 = gw; c0 < n; c0 += kUnroll * tw) {
    float v[kUnroll][J];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
#pragma unroll
      for (int j = 0; j < J; ++j) {
        const int64_t i = static_cast<int64_t>(c0 + u * tw) * kSampleChunk + j * 32 + lane;
        v[u][j] = 0.0f;
        if (i < r.V) v[u][j] = kFill ? sample_weight(r.w[i], r.m, r.inv_t, r.tk) : r.weight(i);
      }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int c = c0 + u * tw;
      if (c >= n) break;  // warp-uniform
      double acc = 0.0;
#pragma unroll
      for (int j = 0; j < J; ++j) {
        const int64_t i = static_cast<int64_t>(c) * kSampleChunk + j * 32 + lane;
        const bool live = i < r.V;
        if (kFill && live) r.e[i] = v[u][j];
        if (live && v[u][j] >= th) acc += static_cast<double>(v[u][j]);
        if (kFill && bracket) {
          const uint32_t b = __float_as_uint(v[u][j]) >> 20;  // ids past the row hold 0
          hist_add(t.hist, v[u][j] > 0.0f && b < kNucleusBuckets ? b : kNone, v[u][j]);
        }
      }
      for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
      if (lane < t.size) team_at(t, t.cs, lane)[c] = acc;
    }
  }
  team_publish(t);
  if (kFill && bracket) gather_hist(t);
  const double total = tree_total(t.cs, t.tree, n);
  team_close(t);
  return total;
}

}  // namespace
}  // namespace tf::cuda
