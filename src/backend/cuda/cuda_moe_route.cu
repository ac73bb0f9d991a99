// MoE routing on the device: each row's experts and weights, and the pairs listed by expert in
// work items for the grouped expert matmuls (cuda_moe.cu), with no host round trip.
//
// Order rule: the router's probabilities (softmax) or scores (sigmoid) are computed per row as
// topk_softmax / topk_sigmoid_grouped compute them, and each row's choices are made by one warp
// (or, for a lone row with no group choice, by the block counting ranks) with the same ranking
// (a total order, so neither form can change a choice) and the same sums in the same order.
#include <climits>
#include <cmath>
#include <cstdlib>

#include "backend/cuda/cuda_moe.cuh"
#include "backend/cuda/cuda_util.cuh"

namespace tf::cuda {

namespace {

constexpr int kRouteThreads = 256;
constexpr int kRouteOneBlockRows = 64;  // rows one routing block takes (8 a warp); more use a grid
constexpr int kRankAll = 256;           // experts up to which a lone row's rank counts all pairs

constexpr int kPerLane = kMaxExperts / 32;

// One row's router scores into p (shared, the warp's own) by one warp: the sigmoid, or
// softmax_row<kRouteThreads>'s bits. The block's max is a max in any order; its thread t summed
// e[t], e[t + 256], ... and its tree added sh[t + s] into sh[t] for s = 128 .. 1, which the warp
// plays with 8 sums a lane (t = lane + 32 j) and then shuffles. Lane l keeps experts l, l + 32, ...
// in registers, loaded together.
__device__ void route_scores(const float* l, int n, bool sigmoid, float* p) {
  const int lane = threadIdx.x % 32;
  float e[kPerLane];
#pragma unroll
  for (int t = 0; t < kPerLane; ++t) {
    if (32 * t >= n) break;  // the same for every lane
    e[t] = lane + 32 * t < n ? l[lane + 32 * t] : -INFINITY;
  }
  if (sigmoid) {
#pragma unroll
    for (int t = 0; t < kPerLane; ++t) {
      if (32 * t >= n) break;
      if (lane + 32 * t < n) p[lane + 32 * t] = sigmoid_f(e[t]);
    }
    __syncwarp();
    return;
  }
  float mx = -INFINITY;
#pragma unroll
  for (int t = 0; t < kPerLane; ++t) {
    if (32 * t >= n) break;
    mx = fmaxf(mx, e[t]);
  }
  mx = warp_max(mx);
#pragma unroll
  for (int t = 0; t < kPerLane; ++t) {
    if (32 * t >= n) break;
    e[t] = expf(e[t] - mx);
  }
  float v[kRouteThreads / 32];
#pragma unroll
  for (int j = 0; j < kRouteThreads / 32; ++j) {
    float s = 0.0f;
#pragma unroll
    for (int t = j; t < kPerLane; t += kRouteThreads / 32) {
      if (32 * t >= n) break;
      if (lane + 32 * t < n) s = s + e[t];
    }
    v[j] = s;
  }
#pragma unroll
  for (int h = kRouteThreads / 64; h > 0; h >>= 1)
#pragma unroll
    for (int j = 0; j < h; ++j) v[j] = __fadd_rn(v[j], v[j + h]);
  for (int off = 16; off > 0; off >>= 1) {
    const float o = __shfl_down_sync(0xffffffffu, v[0], off);
    if (lane < off) v[0] = __fadd_rn(v[0], o);
  }
  const float total = __shfl_sync(0xffffffffu, v[0], 0);
#pragma unroll
  for (int t = 0; t < kPerLane; ++t) {
    if (32 * t >= n) break;
    if (lane + 32 * t < n) p[lane + 32 * t] = e[t] / total;
  }
  __syncwarp();
}

// route_scores' softmax bits for one row by the whole block (thread t sums experts t, t + 256, ...
// and the halving tree adds the threads' sums), in rolled loops: a lone row's routing runs once a
// layer, so it spreads the row over all threads and keeps its code short.
__device__ void block_softmax(const float* l, int n, float* p) {
  __shared__ float red[kRouteThreads];
  const int t = static_cast<int>(threadIdx.x);
  float mx = -INFINITY;
#pragma unroll 1
  for (int i = t; i < n; i += kRouteThreads) {
    p[i] = l[i];
    mx = fmaxf(mx, p[i]);
  }
  mx = block_max<kRouteThreads>(mx, red);
  float s = 0.0f;
#pragma unroll 1
  for (int i = t; i < n; i += kRouteThreads) {
    p[i] = expf(p[i] - mx);
    s = s + p[i];
  }
  const float total = block_sum<kRouteThreads>(s, red);
#pragma unroll 1
  for (int i = t; i < n; i += kRouteThreads) p[i] = p[i] / total;
  __syncthreads();
}

// a ranks before b: larger first, ties to the lower index (values already mapped for NaN).
__device__ __forceinline__ bool ranks_before(float va, int a, float vb, int b) {
  return va > vb || (va == vb && a < b);
}

__device__ __forceinline__ float nan_low(float v) { return isnan(v) ? -INFINITY : v; }

__device__ __forceinline__ bool ranks_before_nan(float va, int a, float vb, int b) {
  return ranks_before(nan_low(va), a, nan_low(vb), b);
}

// The warp's best (value, index) by ranks_before; every lane gets the same pair. Lanes with no
// candidate pass index -1.
__device__ __forceinline__ void warp_best(float& v, int& i) {
  for (int off = 16; off > 0; off >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, v, off);
    const int oi = __shfl_xor_sync(0xffffffffu, i, off);
    if (oi >= 0 && (i < 0 || ranks_before(ov, oi, v, i))) v = ov, i = oi;
  }
}

// The k best of experts 0..n-1 by one warp: lane l holds value(i) of i = l, l + 32, ... in
// registers; k rounds of the warp's best allowed, not yet taken expert by ranks_before. Lane j < k
// returns round j's expert (the others -1).
template <class Value, class Allowed>
__device__ int warp_pick(int n, int k, Value value, Allowed allowed) {
  const int lane = threadIdx.x % 32;
  float v[kPerLane];
  uint32_t live = 0;  // bit t: expert lane + 32 t is allowed and not yet taken
#pragma unroll
  for (int t = 0; t < kPerLane; ++t) {
    if (32 * t >= n) break;  // the same for every lane
    const int i = lane + 32 * t;
    const bool ok = i < n && allowed(i);
    v[t] = ok ? value(i) : 0.0f;
    live |= ok ? 1u << t : 0u;
  }
  int mine = -1;
  for (int j = 0; j < k; ++j) {
    float bv = 0.0f;
    int bi = -1;
#pragma unroll
    for (int t = 0; t < kPerLane; ++t) {
      if (32 * t >= n) break;
      const int i = lane + 32 * t;
      if (((live >> t) & 1u) && (bi < 0 || ranks_before(v[t], i, bv, bi))) bv = v[t], bi = i;
    }
    warp_best(bv, bi);
    if (bi % 32 == lane) live &= ~(1u << (bi / 32));
    if (lane == j) mine = bi;
  }
  return mine;
}

// A row's k most probable experts (p: its probabilities) by one warp, ranked, into idx[0..k) and
// w[0..k); the chosen probabilities are summed in rank order for the weights. Lane j < k returns
// the expert of rank j (the others -1).
__device__ int route_softmax_row(const float* p, int n, int k, bool norm, int32_t* idx, float* w) {
  const int lane = threadIdx.x % 32;
  const int e =
      warp_pick(n, k, [&](int i) { return isnan(p[i]) ? -1.0f : p[i]; }, [](int) { return true; });
  const float pe = lane < k ? p[e] : 0.0f;
  float ksum = 0.0f;
  for (int j = 0; j < k; ++j) ksum = ksum + __shfl_sync(0xffffffffu, pe, j);
  if (lane < k) {
    idx[lane] = e;
    w[lane] = norm ? pe / ksum : pe;
  }
  return e;
}

// A row's grouped sigmoid top-k (s: its scores), as topk_sigmoid_grouped, by one warp: lane l scores group l
// (n_group <= 32) and holds experts l, l + 32, ...; every choice is the warp's best by the same
// total order the serial form uses, and every lane sums the chosen scores in rank order. Every
// lane stays to the end of the row, so the next row's shuffles start together. Returns as
// route_softmax_row.
__device__ int route_sigmoid_row(const float* s, const float* bias, int n, int n_group, int topk_group,
                                  int k, bool norm, float scale, int32_t* idx, float* w) {
  const int lane = threadIdx.x % 32;
  auto biased = [&](int i) { return bias ? s[i] + bias[i] : s[i]; };
  const int gsize = n / n_group;
  uint32_t gmask = 0;  // chosen groups (n_group <= 32)
  if (topk_group >= n_group) {
    gmask = n_group == 32 ? 0xffffffffu : (1u << n_group) - 1u;
  } else {
    // This lane's group value: the sum of its group's best two biased scores.
    float gv = 0.0f;
    if (lane < n_group) {
      int b1 = -1, b2 = -1;
      for (int i = lane * gsize; i < (lane + 1) * gsize; ++i) {
        if (b1 < 0 || ranks_before_nan(biased(i), i, biased(b1), b1)) b2 = b1, b1 = i;
        else if (b2 < 0 || ranks_before_nan(biased(i), i, biased(b2), b2)) b2 = i;
      }
      gv = nan_low(b2 < 0 ? biased(b1) : biased(b1) + biased(b2));
    }
    for (int t = 0; t < topk_group; ++t) {
      float bv = gv;
      int bg = lane < n_group && !((gmask >> lane) & 1u) ? lane : -1;
      warp_best(bv, bg);
      gmask |= 1u << bg;
    }
  }
  const int e = warp_pick(n, k, [&](int i) { return nan_low(biased(i)); },
                         [&](int i) { return ((gmask >> (i / gsize)) & 1u) != 0; });
  const float se = lane < k ? s[e] : 0.0f;
  float sum = 0.0f;
  for (int j = 0; j < k; ++j) sum = sum + __shfl_sync(0xffffffffu, se, j);
  if (lane < k) {
    idx[lane] = e;
    w[lane] = (norm ? se / (sum + 1e-20f) : se) * scale;
  }
  return e;
}

// The k best of experts 0..n-1 (values v, NaN already mapped) by the whole block, into picked[0..k)
// in rank order: each warp's k best of its run of experts by warp rounds, then each candidate
// counts the candidates that rank before it. Every expert that ranks before one of the k best is
// itself a candidate, so the counts are the ranks the all-pairs count gives.
__device__ void rank_by_warps(const float* v, int n, int k, int32_t* picked) {
  constexpr int kWarps = kRouteThreads / 32, kSlots = kMaxExperts / kWarps / 32;
  __shared__ float cv[kWarps * kMaxK];
  __shared__ int32_t ci[kWarps * kMaxK];
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int per = (n + kWarps - 1) / kWarps, lo = warp * per, hi = min(n, lo + per);
  float x[kSlots];
  uint32_t live = 0;  // bit t: expert lo + lane + 32 t is in the run and not yet taken
#pragma unroll
  for (int t = 0; t < kSlots; ++t) {
    const int i = lo + lane + 32 * t;
    x[t] = i < hi ? v[i] : 0.0f;
    live |= i < hi ? 1u << t : 0u;
  }
  for (int j = 0; j < k; ++j) {
    float bv = 0.0f;
    int bi = -1;
#pragma unroll
    for (int t = 0; t < kSlots; ++t) {
      const int i = lo + lane + 32 * t;
      if (((live >> t) & 1u) && (bi < 0 || ranks_before(x[t], i, bv, bi))) bv = x[t], bi = i;
    }
    warp_best(bv, bi);
    if (bi >= 0 && (bi - lo) % 32 == lane) live &= ~(1u << ((bi - lo) / 32));
    if (lane == 0) cv[warp * k + j] = bv, ci[warp * k + j] = bi;
  }
  __syncthreads();
  const int nc = kWarps * k;
  for (int c = static_cast<int>(threadIdx.x); c < nc; c += static_cast<int>(blockDim.x)) {
    const int i = ci[c];
    if (i < 0) continue;
    const float vi = cv[c];
    int before = 0;
#pragma unroll 8
    for (int d = 0; d < nc; ++d) before += ci[d] >= 0 && ranks_before(cv[d], ci[d], vi, i);
    if (before < k) picked[before] = i;
  }
}

// Exclusive prefix sums of a[0..n) in place by the whole block (each thread a run of them, then
// the runs' totals scanned); returns the total. Integers, so any order gives the same sums.
__device__ int block_scan(int32_t* a, int n) {
  __shared__ int32_t run[kRouteThreads];
  const int per = (n + kRouteThreads - 1) / kRouteThreads, b = threadIdx.x * per;
  const int e = min(n, b + per);
  int sum = 0;
  for (int i = b; i < e; ++i) sum += a[i];
  run[threadIdx.x] = sum;
  __syncthreads();
  for (int off = 1; off < kRouteThreads; off <<= 1) {
    const int add = threadIdx.x >= off ? run[threadIdx.x - off] : 0;
    __syncthreads();
    run[threadIdx.x] += add;
    __syncthreads();
  }
  int at = threadIdx.x ? run[threadIdx.x - 1] : 0;
  const int total = run[kRouteThreads - 1];
  for (int i = b; i < e; ++i) {
    const int c = a[i];
    a[i] = at;
    at += c;
  }
  __syncthreads();
  return total;
}

// Pairs (row * k + rank) listed by expert, rows ascending within an expert, and the work items of
// at most rpi pairs each, items in expert order; run by one whole block of kRouteThreads.
__device__ void moe_lists(const int32_t* idx, int pairs, int E, int rpi, int32_t* order, int32_t* items,
                          int32_t* n_items) {
  // cnt and first, once the items are written, hold the tiles' per-warp counts (wcnt).
  __shared__ int32_t off[kMaxExperts], cnt_first[2 * kMaxExperts];
  int32_t* cnt = cnt_first;
  int32_t* first = cnt_first + kMaxExperts;
  for (int e = threadIdx.x; e < E; e += blockDim.x) cnt[e] = 0;
  __syncthreads();
  for (int p = threadIdx.x; p < pairs; p += blockDim.x) atomicAdd(&cnt[idx[p]], 1);
  __syncthreads();
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    off[e] = cnt[e];
    first[e] = (cnt[e] + rpi - 1) / rpi;
  }
  __syncthreads();
  block_scan(off, E);
  const int total = block_scan(first, E);
  for (int e = threadIdx.x; e < E; e += blockDim.x)
    for (int s = 0, it = first[e]; s < cnt[e]; s += rpi, ++it) {
      items[3 * it] = e;
      items[3 * it + 1] = off[e] + s;
      items[3 * it + 2] = min(rpi, cnt[e] - s);
    }
  // Pairs in tiles of the block, in order: a pair's place is its expert's next free one plus the
  // pairs of that expert before it in the tile (earlier warps' counts, then the lanes below it).
  static_assert(kRouteThreads / 32 * kMaxExperts <= 2 * kMaxExperts * 4, "a tile's counts fit cnt and first");
  __syncthreads();
  auto* wcnt = reinterpret_cast<uint8_t(*)[kMaxExperts]>(cnt_first);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int i = threadIdx.x; i < 2 * kMaxExperts; i += blockDim.x) cnt_first[i] = 0;
  __syncthreads();
  for (int base = 0; base < pairs; base += blockDim.x) {
    const int p = base + static_cast<int>(threadIdx.x);
    const int e = p < pairs ? idx[p] : -1;
    const unsigned same = __match_any_sync(0xffffffffu, e);
    const bool leader = e >= 0 && (same & ((1u << lane) - 1)) == 0;
    if (leader) wcnt[warp][e] = static_cast<uint8_t>(__popc(same));
    __syncthreads();
    if (e >= 0) {
      int at = off[e] + __popc(same & ((1u << lane) - 1));
      for (int w = 0; w < warp; ++w) at += wcnt[w][e];
      order[at] = p;
    }
    __syncthreads();
    if (leader) {
      atomicAdd(&off[e], __popc(same));
      wcnt[warp][e] = 0;
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) *n_items = total;
}

// moe_lists for at most 32 pairs by one warp: lane p holds pair p's expert; its place in order
// counts the pairs before it by (expert, pair), and an expert's first pair writes its items.
__device__ void warp_lists(const int32_t* idx, int pairs, int rpi, int32_t* order, int32_t* items, int32_t* n_items) {
  const int lane = threadIdx.x % 32;
  const int e = lane < pairs ? idx[lane] : INT_MAX;
  int below = 0, same = 0, same_before = 0;
  for (int q = 0; q < pairs; ++q) {
    const int eq = __shfl_sync(0xffffffffu, e, q);
    below += eq < e;
    same += eq == e;
    same_before += eq == e && q < lane;
  }
  const bool first = lane < pairs && same_before == 0;
  const int mine = first ? (same + rpi - 1) / rpi : 0;
  int item = 0, total = 0;
  for (int q = 0; q < pairs; ++q) {
    const int eq = __shfl_sync(0xffffffffu, e, q), cq = __shfl_sync(0xffffffffu, mine, q);
    item += eq < e ? cq : 0;
    total += cq;
  }
  if (lane < pairs) order[below + same_before] = lane;
  if (first)
    for (int s = 0; s < same; s += rpi, ++item) {
      items[3 * item] = e;
      items[3 * item + 1] = below + s;
      items[3 * item + 2] = min(rpi, same - s);
    }
  if (lane == 0) *n_items = total;
}

// Routes rows a warp each: one block walks every row and then lists the pairs by expert (lists
// set), or a grid spreads the rows over blocks and moe_lists_kernel lists them after.
// A row's scores come from its logits in the warp's shared row (n floats a warp).
// With rank (one row, no group choice): the block scores a softmax row (block_softmax), ranks every
// expert at once, a thread counting the experts that rank before its own, where warp_pick's k
// rounds of the warp's best are one long chain; with rank_warps (many experts) the count runs over
// each warp's k best instead. The same values and total order give the same picks in the same
// order; warp 0 then weighs them as route_softmax_row / route_sigmoid_row do.
template <bool kSigmoid>
__global__ void moe_route_kernel(const float* logits, const float* bias, int rows, int n, int n_group,
                                 int topk_group, int k, bool norm, float scale, int32_t* idx,
                                 float* w, int32_t* order, int rpi, int32_t* items, int32_t* n_items,
                                 bool lists, bool rank, bool rank_warps, bool block_scored) {
  extern __shared__ float scores[];
  __shared__ int32_t few_idx[32];  // the pairs' experts when they number at most 32, for warp_lists
  __shared__ int32_t picked[kMaxK];
  grid_wait();
  grid_launch_next();
  const int warps = static_cast<int>(blockDim.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const bool few = lists && rows * k <= 32;
  float* p = scores + static_cast<int64_t>(threadIdx.x / 32) * n;
  if (rank) {
    float* v = scores + n;  // warp 1's row holds the values ranked
    if (!kSigmoid && block_scored) {
      block_softmax(logits, n, scores);
    } else {
      if (threadIdx.x < 32) route_scores(logits, n, kSigmoid, scores);
      __syncthreads();
    }
    for (int i = threadIdx.x; i < n; i += blockDim.x)
      v[i] = kSigmoid ? nan_low(bias ? scores[i] + bias[i] : scores[i]) : isnan(scores[i]) ? -1.0f : scores[i];
    __syncthreads();
    if (rank_warps) {
      rank_by_warps(v, n, k, picked);
    } else {
      for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const float vi = v[i];
        int before = 0;
#pragma unroll 8
        for (int j = 0; j < n; ++j) before += ranks_before(v[j], j, vi, i);
        if (before < k) picked[before] = i;
      }
    }
    __syncthreads();
    if (threadIdx.x < 32) {
      const int e = lane < k ? picked[lane] : -1;
      const float pe = lane < k ? scores[e] : 0.0f;
      float sum = 0.0f;
      for (int j = 0; j < k; ++j) sum = sum + __shfl_sync(0xffffffffu, pe, j);
      if (lane < k) {
        idx[lane] = e;
        w[lane] = kSigmoid ? (norm ? pe / (sum + 1e-20f) : pe) * scale : norm ? pe / sum : pe;
        if (few) few_idx[lane] = e;
      }
    }
  }
  for (int r = rank ? rows : static_cast<int>(blockIdx.x) * warps + static_cast<int>(threadIdx.x) / 32; r < rows;
       r += static_cast<int>(gridDim.x) * warps) {
    route_scores(logits + static_cast<int64_t>(r) * n, n, kSigmoid, p);
    int32_t* ir = idx + static_cast<int64_t>(r) * k;
    float* wr = w + static_cast<int64_t>(r) * k;
    const int e = kSigmoid ? route_sigmoid_row(p, bias, n, n_group, topk_group, k, norm, scale, ir, wr)
                           : route_softmax_row(p, n, k, norm, ir, wr);
    if (few && lane < k) few_idx[r * k + lane] = e;
    __syncwarp();  // the row's scores are read before the next row's overwrite them
  }
  if (!lists) return;
  __syncthreads();  // the block's writes of idx are seen by all its threads after this
  if (few) {
    if (threadIdx.x < 32) warp_lists(few_idx, rows * k, rpi, order, items, n_items);
  } else {
    moe_lists(idx, rows * k, n, rpi, order, items, n_items);
  }
}

__global__ void moe_lists_kernel(const int32_t* idx, int pairs, int n, int rpi, int32_t* order,
                                 int32_t* items, int32_t* n_items) {
  grid_wait();
  grid_launch_next();
  moe_lists(idx, pairs, n, rpi, order, items, n_items);
}

// Whether a one-row round's routing ranks its experts with the whole block (TF_CUDA_ROUTE_RANK=0:
// never, one warp's k rounds instead, for side-by-side timing; the same picks, so the same bits).
bool route_rank() {
  static const bool on = !env_zero("TF_CUDA_ROUTE_RANK");
  return on;
}

// Whether a ranked softmax row is scored by the whole block (block_softmax) or by warp 0's unrolled
// route_scores (TF_CUDA_ROUTE_BLOCK=0, for side-by-side timing; the same bits either way). Sigmoid
// rows keep warp 0's form (the kernel's kSigmoid), which timed faster on Nemotron-3-Nano.
bool route_block() {
  static const bool on = !env_zero("TF_CUDA_ROUTE_BLOCK");
  return on;
}

// Whether a ranked row of n experts counts ranks among the warps' k best (rank_by_warps): past
// kRankAll experts, where the all-pairs count grows as n squared (TF_CUDA_ROUTE_WARPS=0: never,
// =1: always; the same picks either way).
bool route_rank_warps(int n) {
  static const int mode = [] {
    const char* e = std::getenv("TF_CUDA_ROUTE_WARPS");
    return e ? std::atoi(e) : -1;
  }();
  return mode < 0 ? n > kRankAll : mode > 0;
}

}  // namespace

void moe_route(const float* logits, const float* bias, int m, int E, const MoeRoute& route, int rpi,
               const RouteLists& out) {
  const int64_t P = static_cast<int64_t>(m) * route.k;
  // A decode round routes in one block, lists included; more rows spread over blocks first.
  const bool one_block = m <= kRouteOneBlockRows;
  const unsigned route_blocks =
      one_block ? 1u : static_cast<unsigned>((m + kRouteThreads / 32 - 1) / (kRouteThreads / 32));
  const size_t smem = static_cast<size_t>(kRouteThreads / 32) * static_cast<size_t>(E) * 4;
  const bool rank_one = m == 1 && route_rank();
  if (route.sigmoid) {
    launch_kernel(moe_route_kernel<true>, route_blocks, kRouteThreads, smem, logits, bias, m, E, route.n_group,
                  route.topk_group, route.k, route.norm, route.scale, out.idx, out.w, out.order, rpi, out.items,
                  out.n_items, one_block, rank_one && route.topk_group >= route.n_group, route_rank_warps(E),
                  route_block());
  } else {
    launch_kernel(moe_route_kernel<false>, route_blocks, kRouteThreads, smem, logits, nullptr, m, E, 1, 1,
                  route.k, route.norm, 1.0f, out.idx, out.w, out.order, rpi, out.items, out.n_items, one_block,
                  rank_one, route_rank_warps(E), route_block());
  }
  if (!one_block)
    launch_kernel(moe_lists_kernel, 1, kRouteThreads, 0, out.idx, static_cast<int>(P), E, rpi, out.order,
                  out.items, out.n_items);
}

}  // namespace tf::cuda
