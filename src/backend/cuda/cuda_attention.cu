// Paged KV writes and causal attention on the GPU.
//
// Order rule (per row and head; n = pos - first + 1 keys): the keys are cut into splits of 64
// counted from first. Within split s: score_j = dot(q, k_j) by fma over d = 0.. in order, times
// scale, then softcap; m_s = max of the split's scores; p_j = expf(score_j - m_s);
// l_s = butterfly warp_sum over lanes L of (p_L + p_{L+32}); acc_s[d] = fma over j in key order
// of p_j * v_j[d], from 0. Splits are folded in split order from split 0:
// m' = max(m, m_s), a = expf(m - m'), b = expf(m_s - m'), l = l*a + l_s*b, acc = acc*a + acc_s*b;
// out = acc / l. The fold runs inside one block (whole mode) or, split by split, in parallel
// blocks whose partials a merge kernel folds (split mode); both run the same operations, so the
// bits depend only on the row's q, keys, values and n, never on the batch, grouping or pages.
// Blocks share each staged K/V tile among up to 32 (row, head) pairs: consecutive rows of one
// sequence and the heads of one GQA group.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_util.cuh"

namespace tf::cuda {

namespace {

constexpr int kSplit = 64;          // keys per split, counted from the row's first key
constexpr int kChunk = 128;         // head dims staged per pass
constexpr int kKst = kChunk + 4;    // staged row stride: an odd count of float4, no bank conflicts
constexpr int kThreads = 256;       // 8 warps; warp w owns pairs w, w + 8, ...
constexpr int kMaxSpread = 31;      // most a group's first keys may differ (sliding window)
constexpr int kMaxStage = kSplit + kMaxSpread + 1;  // staged keys per split, at most
constexpr int kMaxHeadDim = 512;
constexpr uint64_t kMaxPartialBytes = 256ull << 20;

__global__ void kv_store_kernel(float* k_layer, float* v_layer, const float* k, const float* v,
                                const int64_t* dst_row, int64_t width, int64_t total) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= total) return;
  const int64_t r = i / width, c = i % width;
  k_layer[dst_row[r] * width + c] = k[i];
  v_layer[dst_row[r] * width + c] = v[i];
}

struct AttnArgs {
  const float* q;
  float* out;
  const float* k;  // layer base, [pages][page_size][kv_width]
  const float* v;
  const int32_t* row_pos;
  const int32_t* row_first;
  const int32_t* row_pages;  // offset of each row's page list in pages
  const int32_t* part_off;   // split-mode rows: first partial slot
  const int32_t* grp;        // [groups + 1] first row of each group
  const int32_t* items;      // per block x: group, split (-1: every split, whole mode)
  const int32_t* pages;
  float* part_ml;   // [slot][head] (m, l)
  float* part_acc;  // [slot][head][head_dim]
  int page_size, kv_width, n_heads, group, head_dim, hd_pad;
  int hpb;    // heads per block (a divisor of group)
  int stage;  // staged keys per split: a multiple of 32 >= kSplit + the largest group spread
  int64_t ldq;
  float scale, softcap;
};

__device__ __forceinline__ void fma4(float p, const float4& v, float4& acc) {
  acc.x = __fmaf_rn(p, v.x, acc.x);
  acc.y = __fmaf_rn(p, v.y, acc.y);
  acc.z = __fmaf_rn(p, v.z, acc.z);
  acc.w = __fmaf_rn(p, v.w, acc.w);
}

// The fold of one split into the running state; the merge kernel runs the same operations.
__device__ __forceinline__ float fold(float acc, float a, float acc_s, float b) {
  return __fadd_rn(__fmul_rn(acc, a), __fmul_rn(acc_s, b));
}

// Stages dims [dim0, dim0 + cw) of keys [base, base + count) of the kv head at column head_off
// into dst (rows of kKst floats); dims past head_dim read as 0.
__device__ __forceinline__ void stage_rows(float* dst, const float* src, const int32_t* pt,
                                           const AttnArgs& a, int base, int count, int64_t head_off,
                                           int dim0, int cw, bool vec) {
  const int c4 = cw / 4;
  for (int e = threadIdx.x; e < count * c4; e += kThreads) {
    const int key = e / c4, d = 4 * (e % c4);
    const int32_t pk = base + key;
    const int64_t slot = static_cast<int64_t>(pt[pk / a.page_size]) * a.page_size + pk % a.page_size;
    const float* row = src + slot * a.kv_width + head_off + dim0 + d;
    float4 x;
    if (vec) {
      x = *reinterpret_cast<const float4*>(row);
    } else {
      const int left = a.head_dim - dim0 - d;
      x.x = left > 0 ? row[0] : 0.0f;
      x.y = left > 1 ? row[1] : 0.0f;
      x.z = left > 2 ? row[2] : 0.0f;
      x.w = left > 3 ? row[3] : 0.0f;
    }
    *reinterpret_cast<float4*>(dst + key * kKst + d) = x;
  }
}

// One block: a group of consecutive rows of one sequence x hpb heads of one kv head, over one
// split (items[1] >= 0: writes partials) or every split folded in order (items[1] < 0).
template <int NC, int PT>
__global__ void __launch_bounds__(kThreads, 2) attention_kernel(AttnArgs a) {
  extern __shared__ float4 sh4[];
  constexpr int kPairs = 8 * PT, kKK = kMaxStage / 32;
  const int hdp = a.hd_pad, ks = a.stage, hd = a.head_dim;
  float* qs = reinterpret_cast<float*>(sh4);  // [kPairs][hdp]
  float* kvs = qs + kPairs * hdp;             // [ks][kKst]
  float* ps = kvs + ks * kKst;                // [kPairs][ks]: scores, then weights
  const int g = a.items[2 * blockIdx.x], split = a.items[2 * blockIdx.x + 1];
  const int r0 = a.grp[g], nrows = a.grp[g + 1] - r0, hblocks = a.group / a.hpb;
  const int kvh = blockIdx.y / hblocks, h0 = kvh * a.group + (blockIdx.y % hblocks) * a.hpb;
  const int P = nrows * a.hpb, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int32_t first0 = a.row_first[r0], pos_max = a.row_pos[r0 + nrows - 1];
  const int32_t first_last = a.row_first[r0 + nrows - 1];
  const int n_last = pos_max - first_last + 1;
  const int s_begin = split < 0 ? 0 : split;
  const int s_end = split < 0 ? (n_last + kSplit - 1) / kSplit : split + 1;
  const int32_t* pt = a.pages + a.row_pages[r0];
  const int64_t head_off = static_cast<int64_t>(kvh) * hd;
  const bool vec = hd % 4 == 0, aligned = first_last == first0;
  for (int e = threadIdx.x; e < P * hdp; e += kThreads) {
    const int p = e / hdp, d = e % hdp;
    const int64_t row = r0 + p / a.hpb, h = h0 + p % a.hpb;
    qs[e] = d < hd ? a.q[row * a.ldq + h * hd + d] : 0.0f;
  }
  int prow[PT], pn[PT], pdelta[PT], phead[PT];
  bool pon[PT];
  float m[PT], l[PT], fa[PT], fb[PT];
  float4 acc[PT][NC];
#pragma unroll
  for (int i = 0; i < PT; ++i) {
    const int p = warp + 8 * i;
    pon[i] = p < P;
    prow[i] = r0 + (pon[i] ? p / a.hpb : 0);
    phead[i] = h0 + p % a.hpb;
    pn[i] = a.row_pos[prow[i]] - a.row_first[prow[i]] + 1;
    pdelta[i] = a.row_first[prow[i]] - first0;
    m[i] = l[i] = fa[i] = fb[i] = 0.0f;
#pragma unroll
    for (int c = 0; c < NC; ++c) acc[i][c] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
  for (int s = s_begin; s < s_end; ++s) {
    const int base = first0 + s * kSplit, nstage = min(ks, pos_max - base + 1);
    bool on[PT];
    int kval[PT];
#pragma unroll
    for (int i = 0; i < PT; ++i) {
      on[i] = pon[i] && s * kSplit < pn[i];
      kval[i] = min(kSplit, pn[i] - s * kSplit);
    }
    // Scores of every staged key for each pair: fma over d in order.
    float sc[PT][kKK];
#pragma unroll
    for (int i = 0; i < PT; ++i)
#pragma unroll
      for (int kk = 0; kk < kKK; ++kk) sc[i][kk] = 0.0f;
#pragma unroll
    for (int c = 0; c < NC; ++c) {
      const int cw = min(kChunk, hdp - c * kChunk);
      __syncthreads();
      stage_rows(kvs, a.k, pt, a, base, nstage, head_off, c * kChunk, cw, vec);
      __syncthreads();
      for (int d = 0; d < cw; d += 4) {
        float4 kv[kKK];
#pragma unroll
        for (int kk = 0; kk < kKK; ++kk)
          kv[kk] = 32 * kk < ks ? *reinterpret_cast<const float4*>(kvs + (lane + 32 * kk) * kKst + d)
                                : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
        for (int i = 0; i < PT; ++i) {
          if (!on[i]) continue;
          const float4 qv =
              *reinterpret_cast<const float4*>(qs + (warp + 8 * i) * hdp + c * kChunk + d);
#pragma unroll
          for (int kk = 0; kk < kKK; ++kk) {
            sc[i][kk] = __fmaf_rn(qv.x, kv[kk].x, sc[i][kk]);
            sc[i][kk] = __fmaf_rn(qv.y, kv[kk].y, sc[i][kk]);
            sc[i][kk] = __fmaf_rn(qv.z, kv[kk].z, sc[i][kk]);
            sc[i][kk] = __fmaf_rn(qv.w, kv[kk].w, sc[i][kk]);
          }
        }
      }
    }
#pragma unroll
    for (int i = 0; i < PT; ++i) {
      if (!on[i]) continue;
#pragma unroll
      for (int kk = 0; kk < kKK; ++kk) {
        const int idx = lane + 32 * kk;
        if (idx >= nstage) continue;
        float x = __fmul_rn(sc[i][kk], a.scale);
        if (a.softcap > 0.0f) x = __fmul_rn(a.softcap, tanhf(__fdiv_rn(x, a.softcap)));
        ps[(warp + 8 * i) * ks + idx] = x;
      }
    }
    __syncwarp();
    // Split softmax per pair over its own keys j = 0..kval-1 (staged at pdelta + j).
#pragma unroll
    for (int i = 0; i < PT; ++i) {
      if (!on[i]) continue;
      float* pr = ps + (warp + 8 * i) * ks + pdelta[i];
      const bool v0 = lane < kval[i], v1 = lane + 32 < kval[i];
      const float s0 = v0 ? pr[lane] : -INFINITY, s1 = v1 ? pr[lane + 32] : -INFINITY;
      const float mx = warp_max(fmaxf(s0, s1));
      const float p0 = v0 ? expf(__fsub_rn(s0, mx)) : 0.0f;
      const float p1 = v1 ? expf(__fsub_rn(s1, mx)) : 0.0f;
      const float lsum = warp_sum(__fadd_rn(p0, p1));
      if (v0) pr[lane] = p0;
      if (v1) pr[lane + 32] = p1;
      if (split >= 0) {
        if (lane == 0) {
          const int64_t slot = (static_cast<int64_t>(a.part_off[prow[i]]) + s) * a.n_heads + phead[i];
          a.part_ml[2 * slot] = mx;
          a.part_ml[2 * slot + 1] = lsum;
        }
      } else if (s == 0) {
        m[i] = mx, l[i] = lsum;
      } else {
        const float mn = fmaxf(m[i], mx);
        fa[i] = expf(__fsub_rn(m[i], mn));
        fb[i] = expf(__fsub_rn(mx, mn));
        l[i] = fold(l[i], fa[i], lsum, fb[i]);
        m[i] = mn;
      }
    }
    __syncwarp();
    // acc_s[d] = fma over the pair's keys in order; then fold or write the partial.
#pragma unroll
    for (int c = 0; c < NC; ++c) {
      const int cw = min(kChunk, hdp - c * kChunk), d = 4 * lane;
      __syncthreads();
      stage_rows(kvs, a.v, pt, a, base, nstage, head_off, c * kChunk, cw, vec);
      __syncthreads();
      float4 as[PT];
#pragma unroll
      for (int i = 0; i < PT; ++i) as[i] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (d < cw) {
        if (aligned) {
          int jmax = 0;
#pragma unroll
          for (int i = 0; i < PT; ++i)
            if (on[i]) jmax = max(jmax, kval[i]);
          for (int j = 0; j < jmax; ++j) {
            const float4 vv = *reinterpret_cast<const float4*>(kvs + j * kKst + d);
#pragma unroll
            for (int i = 0; i < PT; ++i)
              if (on[i] && j < kval[i]) fma4(ps[(warp + 8 * i) * ks + j], vv, as[i]);
          }
        } else {
#pragma unroll
          for (int i = 0; i < PT; ++i) {
            if (!on[i]) continue;
            const float* pr = ps + (warp + 8 * i) * ks + pdelta[i];
            for (int j = 0; j < kval[i]; ++j)
              fma4(pr[j], *reinterpret_cast<const float4*>(kvs + (pdelta[i] + j) * kKst + d), as[i]);
          }
        }
#pragma unroll
        for (int i = 0; i < PT; ++i) {
          if (!on[i]) continue;
          if (split >= 0) {
            const int64_t slot = (static_cast<int64_t>(a.part_off[prow[i]]) + s) * a.n_heads + phead[i];
            float* dst = a.part_acc + slot * hd + c * kChunk + d;
            const float e4[4] = {as[i].x, as[i].y, as[i].z, as[i].w};
#pragma unroll
            for (int e = 0; e < 4; ++e)
              if (c * kChunk + d + e < hd) dst[e] = e4[e];
          } else if (s == 0) {
            acc[i][c] = as[i];
          } else {
            acc[i][c].x = fold(acc[i][c].x, fa[i], as[i].x, fb[i]);
            acc[i][c].y = fold(acc[i][c].y, fa[i], as[i].y, fb[i]);
            acc[i][c].z = fold(acc[i][c].z, fa[i], as[i].z, fb[i]);
            acc[i][c].w = fold(acc[i][c].w, fa[i], as[i].w, fb[i]);
          }
        }
      }
    }
  }
  if (split >= 0) return;
#pragma unroll
  for (int i = 0; i < PT; ++i) {
    if (!pon[i]) continue;
    float* orow = a.out + static_cast<int64_t>(prow[i]) * a.ldq + static_cast<int64_t>(phead[i]) * hd;
#pragma unroll
    for (int c = 0; c < NC; ++c) {
      const int d = c * kChunk + 4 * lane;
      const float e4[4] = {acc[i][c].x, acc[i][c].y, acc[i][c].z, acc[i][c].w};
#pragma unroll
      for (int e = 0; e < 4; ++e)
        if (d + e < hd) orow[d + e] = __fdiv_rn(e4[e], l[i]);
    }
  }
}

// Folds a split-mode row's partials in split order, as the whole-mode block does.
__global__ void attention_merge_kernel(AttnArgs a, const int32_t* brows) {
  const int r = brows[blockIdx.y], h = blockIdx.x, hd = a.head_dim;
  const int n = a.row_pos[r] - a.row_first[r] + 1, splits = (n + kSplit - 1) / kSplit;
  const int64_t slot0 = static_cast<int64_t>(a.part_off[r]) * a.n_heads + h;
  float* orow = a.out + static_cast<int64_t>(r) * a.ldq + static_cast<int64_t>(h) * hd;
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float m = a.part_ml[2 * slot0], l = a.part_ml[2 * slot0 + 1], acc = a.part_acc[slot0 * hd + d];
    for (int s = 1; s < splits; ++s) {
      const int64_t slot = slot0 + static_cast<int64_t>(s) * a.n_heads;
      const float ms = a.part_ml[2 * slot], ls = a.part_ml[2 * slot + 1];
      const float mn = fmaxf(m, ms);
      const float fa = expf(__fsub_rn(m, mn)), fb = expf(__fsub_rn(ms, mn));
      l = fold(l, fa, ls, fb);
      acc = fold(acc, fa, a.part_acc[slot * hd + d], fb);
      m = mn;
    }
    orow[d] = __fdiv_rn(acc, l);
  }
}

// Checks that row r's positions [first, pos] have valid pages in its sequence.
void check_row(const RowLayout& rows, int r, int first, const KvStorage& kv, const char* op) {
  const int32_t s = rows.seq[static_cast<size_t>(r)], pos = rows.pos[static_cast<size_t>(r)];
  TF_CHECK(s >= 0 && static_cast<size_t>(s) < rows.seq_pages.size(), op, ": row ", r, " has seq ",
           s, " but the layout has ", rows.seq_pages.size(), " sequences");
  TF_CHECK(pos >= 0, op, ": row ", r, " has position ", pos);
  const auto& pages = rows.seq_pages[static_cast<size_t>(s)];
  const int64_t last = pos / kv.page_size;
  TF_CHECK(last < static_cast<int64_t>(pages.size()), op, ": row ", r, " at position ", pos,
           " needs page ", last, " of seq ", s, " which has ", pages.size(), " pages");
  for (int64_t i = std::max(0, first) / kv.page_size; i <= last; ++i) {
    const int32_t id = pages[static_cast<size_t>(i)];
    TF_CHECK(id >= 0 && id < kv.pages, op, ": seq ", s, " page ", i, " has id ", id, " outside ",
             kv.pages, " pages");
  }
}

void check_layout(const RowLayout& rows, int64_t m, const char* op) {
  TF_CHECK(static_cast<int64_t>(rows.pos.size()) == m && static_cast<int64_t>(rows.seq.size()) == m,
           op, ": layout has ", rows.pos.size(), " positions and ", rows.seq.size(),
           " seq ids for ", m, " rows");
}


// Pairs per warp for head dims of NC staged chunks: the running state stays within 16 floats.
constexpr int pairs_per_warp(int nc) { return nc == 1 ? 4 : nc == 2 ? 2 : 1; }

size_t attention_smem(int nc, int hd_pad, int stage) {
  const int pairs = 8 * pairs_per_warp(nc);
  return (static_cast<size_t>(pairs) * hd_pad + static_cast<size_t>(stage) * kKst +
          static_cast<size_t>(pairs) * stage) * sizeof(float);
}

template <int NC>
void launch_attention(const AttnArgs& a, unsigned items, unsigned yblocks, size_t smem) {
  constexpr int kPt = pairs_per_warp(NC);
  static std::atomic<bool> ready{false};
  if (!ready.load()) {
    const size_t most = attention_smem(NC, NC * kChunk, kMaxStage);
    TF_CUDA_CHECK(cudaFuncSetAttribute(attention_kernel<NC, kPt>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(most)),
                  "attention: shared memory of ", most, " bytes");
    ready.store(true);
  }
  attention_kernel<NC, kPt><<<dim3(items, yblocks), kThreads, smem>>>(a);
}
}  // namespace

void CudaBackend::kv_store(KvStorage& kvs, int layer, const Tensor& k, const Tensor& v,
                           const RowLayout& rows) {
  const ProfScope prof(*this, "kv_store", nullptr, k.rows);
  const CudaKv& kv = as_cuda_kv(kvs, "kv_store");
  check_tensor(k, "kv_store", "k");
  check_tensor(v, "kv_store", "v");
  const int64_t width = static_cast<int64_t>(kv.kv_heads) * kv.head_dim;
  TF_CHECK(k.cols == width && v.cols == width && k.rows == v.rows, "kv_store: k [", k.rows, " x ",
           k.cols, "] and v [", v.rows, " x ", v.cols, "] for ", kv.kv_heads, " heads of ",
           kv.head_dim);
  TF_CHECK(layer >= 0 && layer < kv.layers, "kv_store: layer ", layer, " of ", kv.layers);
  check_layout(rows, k.rows, "kv_store");
  for (int r = 0; r < k.rows; ++r) check_row(rows, r, rows.pos[static_cast<size_t>(r)], kv, "kv_store");
  if (k.rows == 0) return;
  std::vector<int64_t> dst(static_cast<size_t>(k.rows));
  for (int r = 0; r < k.rows; ++r) {
    const int32_t pos = rows.pos[static_cast<size_t>(r)];
    const int32_t page = rows.seq_pages[static_cast<size_t>(rows.seq[static_cast<size_t>(r)])]
                                       [static_cast<size_t>(pos / kv.page_size)];
    dst[static_cast<size_t>(r)] = static_cast<int64_t>(page) * kv.page_size + pos % kv.page_size;
  }
  auto* d_dst = static_cast<const int64_t*>(meta(dst.data(), dst.size() * 8));
  const int64_t total = k.rows * width;
  kv_store_kernel<<<grid_for(total, 256), 256>>>(kv.k_layer(layer), kv.v_layer(layer), k.data,
                                                 v.data, d_dst, width, total);
  check_launch("kv_store");
}


void CudaBackend::attention(const Tensor& q, Tensor out, const KvStorage& kvs, int layer,
                            const RowLayout& rows, const AttnParams& p) {
  const ProfScope prof(*this, "attention", nullptr, q.rows);
  const CudaKv& kv = as_cuda_kv(kvs, "attention");
  check_tensor(q, "attention", "q");
  check_tensor(out, "attention", "out");
  TF_CHECK(p.n_heads > 0 && p.n_kv_heads > 0 && p.n_heads % p.n_kv_heads == 0 &&
               p.n_kv_heads == kv.kv_heads && p.head_dim == kv.head_dim,
           "attention: ", p.n_heads, " heads over ", p.n_kv_heads, " kv heads of ", p.head_dim,
           " with storage of ", kv.kv_heads, " kv heads of ", kv.head_dim);
  TF_CHECK(p.head_dim <= kMaxHeadDim && p.n_heads <= 65535, "attention: head_dim ", p.head_dim,
           " and ", p.n_heads, " heads; the cuda backend takes head_dim up to ", kMaxHeadDim,
           " and up to 65535 heads");
  const int64_t width = static_cast<int64_t>(p.n_heads) * p.head_dim;
  TF_CHECK(q.cols == width && out.rows == q.rows && out.cols == width, "attention: q [", q.rows,
           " x ", q.cols, "] and out [", out.rows, " x ", out.cols, "] for ", p.n_heads,
           " heads of ", p.head_dim);
  TF_CHECK(layer >= 0 && layer < kv.layers, "attention: layer ", layer, " of ", kv.layers);
  TF_CHECK(p.sliding_window >= 0 && p.softcap >= 0.0f && std::isfinite(p.scale),
           "attention: sliding_window ", p.sliding_window, ", softcap ", p.softcap, ", scale ",
           p.scale);
  check_layout(rows, q.rows, "attention");
  const int m = static_cast<int>(q.rows);
  if (m == 0) return;
  TF_CHECK(q.rows <= 65535, "attention: ", q.rows, " rows is more than one call takes");
  const int hd = p.head_dim, hd_pad = (hd + 3) / 4 * 4, nc = (hd_pad + kChunk - 1) / kChunk;
  const int group = p.n_heads / p.n_kv_heads, pairs = 8 * pairs_per_warp(nc);
  int hpb = 1;
  for (int d = 1; d <= std::min(group, pairs); ++d)
    if (group % d == 0) hpb = d;
  const int rmax = pairs / hpb;
  // Rows per sequence: pos, first, page-list offset; the page lists of used sequences.
  std::vector<int32_t> pos(static_cast<size_t>(m)), first(pos.size()), pgoff(pos.size());
  std::vector<int32_t> seq_off(rows.seq_pages.size(), -1), pages;
  for (int r = 0; r < m; ++r) {
    const size_t i = static_cast<size_t>(r);
    pos[i] = rows.pos[i];
    first[i] = p.sliding_window > 0 ? std::max(0, pos[i] - p.sliding_window + 1) : 0;
    check_row(rows, r, first[i], kv, "attention");
    const size_t s = static_cast<size_t>(rows.seq[i]);
    if (seq_off[s] < 0) {
      seq_off[s] = static_cast<int32_t>(pages.size());
      pages.insert(pages.end(), rows.seq_pages[s].begin(), rows.seq_pages[s].end());
    }
    pgoff[i] = seq_off[s];
  }
  // Groups: runs of consecutive positions of one sequence whose first keys differ by little.
  std::vector<int32_t> grp{0};
  int spread = 0;
  for (int r = 1; r < m; ++r) {
    const size_t i = static_cast<size_t>(r);
    const int32_t g0 = grp.back();
    const bool joins = rows.seq[i] == rows.seq[i - 1] && pos[i] == pos[i - 1] + 1 &&
                       r - g0 < rmax && first[i] - first[static_cast<size_t>(g0)] <= kMaxSpread;
    if (joins) spread = std::max(spread, first[i] - first[static_cast<size_t>(g0)]);
    else grp.push_back(r);
  }
  grp.push_back(m);
  const int ng = static_cast<int>(grp.size()) - 1;
  const int stage = (kSplit + spread + 31) / 32 * 32;
  // Split mode (one block per split, then a merge) for groups of few rows or when whole-mode
  // blocks would not fill the device; the bits are the same in either mode.
  int sms = 0;
  TF_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device_),
                "attention: multiprocessor count");
  const int yblocks = p.n_heads / hpb;
  const bool few = static_cast<int64_t>(ng) * yblocks < 2 * static_cast<int64_t>(sms);
  const uint64_t slot_bytes = static_cast<uint64_t>(p.n_heads) * (hd + 2) * sizeof(float);
  std::vector<int32_t> part_off(static_cast<size_t>(m), 0), items, brows, split_items;
  int64_t slots = 0;
  for (int g = ng - 1; g >= 0; --g) {
    const int r0 = grp[static_cast<size_t>(g)], r1 = grp[static_cast<size_t>(g) + 1];
    const int n_last = pos[static_cast<size_t>(r1 - 1)] - first[static_cast<size_t>(r1 - 1)] + 1;
    const int splits = (n_last + kSplit - 1) / kSplit;
    int64_t need = 0;
    for (int r = r0; r < r1; ++r)
      need += (pos[static_cast<size_t>(r)] - first[static_cast<size_t>(r)] + kSplit) / kSplit;
    const bool split_mode = splits > 1 && (few || (r1 - r0) * 4 <= rmax) &&
                            static_cast<uint64_t>(slots + need) * slot_bytes <= kMaxPartialBytes;
    if (!split_mode) {
      items.insert(items.end(), {g, -1});
      continue;
    }
    for (int r = r0; r < r1; ++r) {
      part_off[static_cast<size_t>(r)] = static_cast<int32_t>(slots);
      slots += (pos[static_cast<size_t>(r)] - first[static_cast<size_t>(r)] + kSplit) / kSplit;
      brows.push_back(r);
    }
    for (int s = 0; s < splits; ++s) split_items.insert(split_items.end(), {g, s});
  }
  items.insert(items.end(), split_items.begin(), split_items.end());
  // One metadata upload: pos, first, page offsets, partial offsets, groups, items, split rows, pages.
  std::vector<int32_t> meta;
  meta.reserve(4 * pos.size() + grp.size() + items.size() + brows.size() + pages.size());
  size_t at[8];
  int part = 0;
  for (const std::vector<int32_t>* v : {&pos, &first, &pgoff, &part_off, &grp, &items, &brows, &pages}) {
    at[part++] = meta.size();
    meta.insert(meta.end(), v->begin(), v->end());
  }
  auto* d_meta = static_cast<const int32_t*>(this->meta(meta.data(), meta.size() * 4));
  float* part_ml = nullptr;
  float* part_acc = nullptr;
  if (slots > 0) {
    const uint64_t ml_floats = (static_cast<uint64_t>(slots) * p.n_heads * 2 + 3) / 4 * 4;
    auto* s = reinterpret_cast<float*>(
        scratch((ml_floats + static_cast<uint64_t>(slots) * p.n_heads * hd) * sizeof(float)));
    part_ml = s, part_acc = s + ml_floats;
  }
  AttnArgs a{q.data, out.data, kv.k_layer(layer), kv.v_layer(layer), d_meta + at[0],
             d_meta + at[1], d_meta + at[2], d_meta + at[3], d_meta + at[4], d_meta + at[5],
             d_meta + at[7], part_ml, part_acc, kv.page_size, kv.kv_heads * kv.head_dim,
             p.n_heads, group, hd, hd_pad, hpb, stage, width, p.scale, p.softcap};
  const unsigned n_items = static_cast<unsigned>(items.size() / 2);
  const size_t smem = attention_smem(nc, hd_pad, stage);
  switch (nc) {
    case 1: launch_attention<1>(a, n_items, static_cast<unsigned>(yblocks), smem); break;
    case 2: launch_attention<2>(a, n_items, static_cast<unsigned>(yblocks), smem); break;
    case 3: launch_attention<3>(a, n_items, static_cast<unsigned>(yblocks), smem); break;
    default: launch_attention<4>(a, n_items, static_cast<unsigned>(yblocks), smem); break;
  }
  check_launch("attention");
  if (!brows.empty()) {
    attention_merge_kernel<<<dim3(static_cast<unsigned>(p.n_heads),
                                  static_cast<unsigned>(brows.size())), 128>>>(a, d_meta + at[6]);
    check_launch("attention merge");
  }
}

}  // namespace tf::cuda
