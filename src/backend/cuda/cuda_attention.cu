// Causal attention on the GPU over the paged KV cache (its writes: cuda_kv_store.cu).
//
// Order rule (per row and head; the row's keys are positions first..pos): keys are cut into
// splits of 64 on the absolute grid (split s holds positions 64s..64s+63); the row's splits are
// those holding any of its keys. Products run on tensor cores in tf32: x ~ big + small with
// big = x cut to tf32 (low 13 mantissa bits cleared) and small = (x - big) cut the same way; a
// k8 step of a product adds small*big, then big*small, then big*big to its f32 accumulator
// (mma m16n8k8). With --matmul-input bf16 each operand is instead rounded to bf16 and a step is
// one bf16 product of 16 (mma m16n8k16, f32 accumulate); K and V are stored rounded (a pool of
// bf16 values), q is rounded as it is staged, and the weights p_j below as they are made, so l_s
// sums what the V product takes. Within split s:
// score_j = that product over dims in steps of 8 (bf16: 16) in order (dims past head_dim are 0),
// times scale, then softcap; keys outside the row's range are masked; m_s = max of the unmasked
// scores; p_j = e(score_j - m_s), 0 where masked; l_s: lane t of a quad sums, for n = 0..7
// in order, (p_{8n+2t} + p_{8n+2t+1}), then the quad's xor butterfly (1, then 2) adds the four;
// acc_s[d] = the product of p and v over key steps n = 0..7 in order (keys 8n + 2t and
// 8n + 2t + 1 in A slots t and t + 4; bf16: steps j = 0..3 of keys 16j..16j + 15 in the k16 A
// fragment's order), from 0. Splits are folded in split order from the row's first:
// m' = max(m, m_s), a = e(m - m'), b = e(m_s - m'), l = l*a + l_s*b, acc = acc*a + acc_s*b;
// out = acc / l + 0; e(x) is ex2.approx.ftz of x * log2 e rounded to f32 (attn_exp). An element
// of an mma product depends only on its own row and column, and a masked key adds an exact zero
// (its weight is 0 and its value finite), so the bits depend only on the row's q, keys, values
// and range, never on the batch, grouping or pages. (A non-finite value in the pool breaks this:
// 0 * inf spreads NaN to the rows sharing its tile.) The fold runs
// inside one block (whole mode) or, split by split, in parallel blocks whose partials a merge
// kernel folds (split mode); both run the same operations. Blocks share each staged K/V tile
// among up to 64 (row, head) pairs: consecutive rows of one sequence and the heads of one GQA
// group. Whole-mode blocks of more than 16 pairs and head dims up to 128 run the flash kernel
// (cuda_attention_flash.cu), and so do split-mode blocks when there are many (those of at most
// 16 pairs on the decode kernels of cuda_attention_decode.cu, which in bf16 mode also take groups
// of at most 16 pairs over a few splits whole); the others run the tile kernel here.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "backend/cuda/cuda_attention.cuh"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_util.cuh"

namespace tf::cuda {

namespace {

using namespace attn;
using AttnArgs = attn::Args;

constexpr int kPs = kSplit + 8;  // score row stride, 8 mod 32: float2 reads hit 32 banks a half-warp
constexpr int kThreads = 256;    // 8 warps
constexpr int kMaxHeadDim = 512;
constexpr uint64_t kMaxPartialBytes = 256ull << 20;

// Query row stride in shared memory for dims rounded to hd_pad: 4 mod 32.
constexpr int q_stride_for(int hd_pad) { return (hd_pad + 31) / 32 * 32 + 4; }

// Stages dims [dim0, dim0 + cw) of a split's keys, whose pool offsets fill_slots put in slot,
// into dst (rows of stride floats); masked keys (slot -1) and dims past head_dim stage as 0, so
// masked products are exact zeros whatever the pool holds there. bf16 mode's pool holds the
// values rounded as the products take them; they widen here. A thread takes four dims of every
// few keys, so the loop has no division.
template <bool kLo>
__device__ __forceinline__ void stage_split(float* dst, int stride, const void* pool, const int64_t* slot, int hd,
                                            int dim0, int cw, bool vec) {
  using E = Kv<kLo>;
  const E* src = static_cast<const E*>(pool);
  const int c4 = cw / 4, kstep = kThreads / c4, d = 4 * (static_cast<int>(threadIdx.x) % c4);
  const int key0 = static_cast<int>(threadIdx.x) < kstep * c4 ? static_cast<int>(threadIdx.x) / c4 : kSplit;
  const int left = hd - dim0 - d;
  for (int key = key0; key < kSplit; key += kstep) {
    const int64_t off = slot[key];
    float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (off >= 0) {
      const E* row = src + off + dim0 + d;
      if (vec && left >= 4) {
        if constexpr (kLo) {
          x = *reinterpret_cast<const float4*>(row);
        } else {
          const uint2 u = *reinterpret_cast<const uint2*>(row);
          const float2 lo = kv_get2(u.x), hi = kv_get2(u.y);
          x = make_float4(lo.x, lo.y, hi.x, hi.y);
        }
      } else {
        x.x = left > 0 ? kv_get(row[0]) : 0.0f;
        x.y = left > 1 ? kv_get(row[1]) : 0.0f;
        x.z = left > 2 ? kv_get(row[2]) : 0.0f;
        x.w = left > 3 ? kv_get(row[3]) : 0.0f;
      }
    }
    *reinterpret_cast<float4*>(dst + key * stride + d) = x;
  }
}

// One block: a group of consecutive rows of one sequence x hpb heads of one kv head (16 * MT
// pairs at most), over one split (items[1] >= 0: writes partials) or every split of the group
// folded in order (items[1] < 0). Scores: warp w owns keys 8w..8w+7 of every m tile. PV: warp
// w owns m tile w % MT and the dim tiles (w + 8j) / MT.
template <int NC, int MT, bool kLo>
__global__ void __launch_bounds__(kThreads, 2) attention_kernel(AttnArgs a) {
  grid_wait();
  grid_launch_next();
  extern __shared__ float4 sh4[];
  constexpr int kPairs = 16 * MT, kJ = (MT * NC * kChunk / 8 + 7) / 8;
  const int hd = a.head_dim, hdp = a.hd_pad, qst = a.q_stride;
  float* qs = reinterpret_cast<float*>(sh4);  // [kPairs][qst]
  float* kvs = qs + kPairs * qst;             // [kSplit][kKs]: K, then V
  float* ps = kvs + kSplit * kKs;             // [kPairs][kPs]: scores, then weights
  float* st = ps + kPairs * kPs;              // [kPairs][6]: a, b, l, mode, m, started
  int* rng = reinterpret_cast<int*>(st + 6 * kPairs);  // [kPairs][2]: first, pos (-1: padding)
  int64_t* kslot = reinterpret_cast<int64_t*>(rng + 2 * kPairs);  // [kSplit]: the split's pool offsets
  const int g = a.items[2 * blockIdx.x], split = a.items[2 * blockIdx.x + 1];
  const int r0 = a.grp[g], nrows = a.grp[g + 1] - r0, hblocks = a.group / a.hpb;
  const int kvh = blockIdx.y / hblocks, h0 = kvh * a.group + (blockIdx.y % hblocks) * a.hpb;
  const int P = nrows * a.hpb, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int gq = lane >> 2, tq = lane & 3;
  const int32_t lo = a.row_first[r0], hi = a.row_pos[r0 + nrows - 1];
  const int s_begin = split < 0 ? lo / kSplit : split, s_end = split < 0 ? hi / kSplit + 1 : split + 1;
  const int32_t* pt = a.pages + a.row_pages[r0];
  const int64_t head_off = static_cast<int64_t>(kvh) * hd;
  const bool vec = hd % 4 == 0;
  stage_q<kThreads, kLo>(qs, qst, a, r0, h0, P, kPairs);
  for (int p = threadIdx.x; p < kPairs; p += kThreads) {
    const int row = r0 + (p < P ? p / a.hpb : 0);
    rng[2 * p] = a.row_first[row];
    rng[2 * p + 1] = p < P ? a.row_pos[row] : -1;
    st[6 * p + 5] = 0.0f;
  }
  const int pv_mt = warp % MT, ntiles = hdp / 8;
  float acc[kJ][4];
#pragma unroll
  for (int j = 0; j < kJ; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
  for (int s = s_begin; s < s_end; ++s) {
    const int base = s * kSplit;
    fill_slots<kThreads>(kslot, a, pt, lo, hi, head_off, s);  // the last split's V staging passed a barrier
    float sc[MT][4];
#pragma unroll
    for (int t = 0; t < MT; ++t) sc[t][0] = sc[t][1] = sc[t][2] = sc[t][3] = 0.0f;
#pragma unroll
    for (int c = 0; c < NC; ++c) {
      const int d0 = c * kChunk, cw = min(kChunk, hdp - d0);
      if (cw <= 0) break;
      __syncthreads();
      stage_split<kLo>(kvs, kKs, a.k, kslot, hd, d0, cw, vec);
      __syncthreads();
      if constexpr (kLo) {
        for (int kk = 0; kk < cw; kk += 8) {
          uint32_t bb[2], bs[2];
          const float* kr = kvs + (8 * warp + gq) * kKs + kk + tq;
          split_tf32<kLo>(kr[0], bb[0], bs[0]);
          split_tf32<kLo>(kr[4], bb[1], bs[1]);
          uint32_t ab[MT][4], as[MT][4];
#pragma unroll
          for (int t = 0; t < MT; ++t) load_a<kLo>(qs + 16 * t * qst + d0 + kk, qst, lane, ab[t], as[t]);
          mma3_shared_b<kLo, MT>(sc, ab, as, bb, bs);
        }
      } else {
        for (int kk = 0; kk < cw; kk += 16) {
          const float* kr = kvs + (8 * warp + gq) * kKs + kk + 2 * tq;
          const float2 k0 = *reinterpret_cast<const float2*>(kr), k1 = *reinterpret_cast<const float2*>(kr + 8);
          const uint32_t b0 = pack_bf16(k0.x, k0.y), b1 = pack_bf16(k1.x, k1.y);
#pragma unroll
          for (int t = 0; t < MT; ++t) {
            uint32_t qa[4];
            load_a16(qs + 16 * t * qst + d0 + kk, qst, lane, qa);
            mma_k16(sc[t], qa, b0, b1);
          }
        }
      }
    }
#pragma unroll
    for (int t = 0; t < MT; ++t) {
      float* pr = ps + (16 * t + gq) * kPs + 8 * warp + 2 * tq;
      pr[0] = sc[t][0], pr[1] = sc[t][1], pr[8 * kPs] = sc[t][2], pr[8 * kPs + 1] = sc[t][3];
    }
    __syncthreads();
    // Split softmax: a quad of lanes per pair, eight pairs a warp; masked and padding weights 0.
    for (int p0 = 8 * warp; p0 < kPairs; p0 += 64) {
      const int p = p0 + lane / 4;
      const int klo = max(rng[2 * p], base) - base, khi = min(rng[2 * p + 1], base + kSplit - 1) - base;
      const bool on = klo <= khi;
      float* pr = ps + p * kPs + 2 * tq;
      float x[8][2];
#pragma unroll
      for (int n = 0; n < 8; ++n) {
        const float2 v = *reinterpret_cast<const float2*>(pr + 8 * n);
        x[n][0] = v.x, x[n][1] = v.y;
      }
      float mx, lsum;
      split_softmax<kLo>(x, tq, klo, khi, a.scale, a.softcap, mx, lsum);
#pragma unroll
      for (int n = 0; n < 8; ++n) *reinterpret_cast<float2*>(pr + 8 * n) = make_float2(x[n][0], x[n][1]);
      if (tq != 0) continue;
      float* sp = st + 6 * p;
      sp[3] = on ? (split < 0 && sp[5] != 0.0f ? 2.0f : 1.0f) : 0.0f;
      if (!on) continue;
      if (split >= 0) {
        const int64_t slot = part_slot(a, r0 + p / a.hpb, h0 + p % a.hpb, s);
        a.part_ml[2 * slot] = mx;
        a.part_ml[2 * slot + 1] = lsum;
      } else if (sp[5] == 0.0f) {
        sp[4] = mx, sp[2] = lsum, sp[5] = 1.0f;
      } else {
        const float mn = fmaxf(sp[4], mx);
        sp[0] = attn_exp(__fsub_rn(sp[4], mn));
        sp[1] = attn_exp(__fsub_rn(mx, mn));
        sp[2] = fold(sp[2], sp[0], lsum, sp[1]);
        sp[4] = mn;
      }
    }
    // acc_s = P V over the split's keys in steps of 8, per dim chunk; then fold or write.
    float as_[kJ][4];
#pragma unroll
    for (int j = 0; j < kJ; ++j) as_[j][0] = as_[j][1] = as_[j][2] = as_[j][3] = 0.0f;
#pragma unroll
    for (int c = 0; c < NC; ++c) {
      const int d0 = c * kChunk, cw = min(kChunk, hdp - d0);
      if (cw <= 0) break;
      __syncthreads();
      stage_split<kLo>(kvs, kKs, a.v, kslot, hd, d0, cw, vec);
      __syncthreads();
#pragma unroll
      for (int kk = 0; kk < kSplit; kk += kLo ? 8 : 16) {
        // f32: A slots t and t + 4 take keys kk + 2t and kk + 2t + 1, as the flash kernel's
        // registers; bf16: the k16 A fragment of keys kk..kk + 15.
        uint32_t ab[4], as[4];
        if constexpr (kLo) {
          const float* pa = ps + (16 * pv_mt + gq) * kPs + kk + 2 * tq;
          const float2 w0 = *reinterpret_cast<const float2*>(pa);
          const float2 w1 = *reinterpret_cast<const float2*>(pa + 8 * kPs);
          split_a<kLo>(w0.x, w1.x, w0.y, w1.y, ab, as);
        } else {
          load_a16(ps + 16 * pv_mt * kPs + kk, kPs, lane, ab);
        }
#pragma unroll
        for (int j = 0; j < kJ; ++j) {
          const int nt = (warp + 8 * j) / MT, dn = 8 * nt - d0;
          if (nt >= ntiles || dn < 0 || dn >= cw) continue;
          const float* vr = kvs + (kk + 2 * tq) * kKs + dn + gq;
          if constexpr (kLo) {
            uint32_t bb[2], bs[2];
            split_tf32<kLo>(vr[0], bb[0], bs[0]);
            split_tf32<kLo>(vr[kKs], bb[1], bs[1]);
            mma3<kLo>(as_[j], ab, as, bb, bs);
          } else {
            mma_k16(as_[j], ab, pack_bf16(vr[0], vr[kKs]), pack_bf16(vr[8 * kKs], vr[9 * kKs]));
          }
        }
      }
    }
#pragma unroll
    for (int j = 0; j < kJ; ++j) {
      const int nt = (warp + 8 * j) / MT;
      if (nt >= ntiles) continue;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int p = 16 * pv_mt + gq + 8 * h;
        const float* sp = st + 6 * p;
        const float mode = sp[3];
        if (mode == 0.0f) continue;
        if (split >= 0) {
          float* dst = a.part_acc + part_slot(a, r0 + p / a.hpb, h0 + p % a.hpb, s) * hd;
          const int d = 8 * nt + 2 * tq;
          if (d < hd) dst[d] = as_[j][2 * h];
          if (d + 1 < hd) dst[d + 1] = as_[j][2 * h + 1];
        } else if (mode == 1.0f) {
          acc[j][2 * h] = as_[j][2 * h], acc[j][2 * h + 1] = as_[j][2 * h + 1];
        } else {
          acc[j][2 * h] = fold(acc[j][2 * h], sp[0], as_[j][2 * h], sp[1]);
          acc[j][2 * h + 1] = fold(acc[j][2 * h + 1], sp[0], as_[j][2 * h + 1], sp[1]);
        }
      }
    }
  }
  if (split >= 0) return;
#pragma unroll
  for (int j = 0; j < kJ; ++j) {
    const int nt = (warp + 8 * j) / MT;
    if (nt >= ntiles) continue;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int p = 16 * pv_mt + gq + 8 * h;
      if (p >= P) continue;
      const float lp = st[6 * p + 2];
      float* orow = a.out + static_cast<int64_t>(r0 + p / a.hpb) * a.ldq +
                    static_cast<int64_t>(h0 + p % a.hpb) * hd;
      const int d = 8 * nt + 2 * tq;
      store_out2(a, orow, d, __fadd_rn(__fdiv_rn(acc[j][2 * h], lp), 0.0f),
                 __fadd_rn(__fdiv_rn(acc[j][2 * h + 1], lp), 0.0f));
    }
  }
}

// Folds a split-mode row's partials in split order, as the whole-mode block does.
__global__ void attention_merge_kernel(AttnArgs a, const int32_t* brows) {
  grid_wait();
  grid_launch_next();
  const int r = brows[blockIdx.y], h = blockIdx.x, hd = a.head_dim;
  const int splits = a.row_pos[r] / kSplit - a.row_first[r] / kSplit + 1;
  const int64_t slot0 = static_cast<int64_t>(a.part_off[r]) * a.n_heads + h;
  float* orow = a.out + static_cast<int64_t>(r) * a.ldq + static_cast<int64_t>(h) * hd;
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float m = a.part_ml[2 * slot0], l = a.part_ml[2 * slot0 + 1], acc = a.part_acc[slot0 * hd + d];
    for (int s = 1; s < splits; ++s) {
      const int64_t slot = slot0 + static_cast<int64_t>(s) * a.n_heads;
      const float ms = a.part_ml[2 * slot], ls = a.part_ml[2 * slot + 1];
      const float mn = fmaxf(m, ms);
      const float fa = attn_exp(__fsub_rn(m, mn)), fb = attn_exp(__fsub_rn(ms, mn));
      l = fold(l, fa, ls, fb);
      acc = fold(acc, fa, a.part_acc[slot * hd + d], fb);
      m = mn;
    }
    const float v = __fadd_rn(__fdiv_rn(acc, l), 0.0f);
    orow[d] = v;
    if (a.out_hi) a.out_hi[orow - a.out + d] = bf16_bits(v);
  }
}

// Pairs a block holds for head dims of NC staged chunks: the staged q stays near 33 KB.
constexpr int pairs_per_block(int nc) { return nc == 1 ? 64 : nc == 2 ? 32 : 16; }
static_assert(pairs_per_block(1) == kFlashPairs, "groups sized for the tile kernel must fit the flash kernel");

size_t attention_smem(int mt, int hd_pad) {
  const size_t pairs = 16 * static_cast<size_t>(mt);
  return (pairs * q_stride_for(hd_pad) + static_cast<size_t>(kSplit) * kKs + pairs * kPs + pairs * 8) *
             sizeof(float) +
         kSplit * sizeof(int64_t);
}

// TF_CUDA_FLASH=0 sends every group to the tile kernel, TF_CUDA_FLASH_SPLIT=0 only the
// split-mode ones, for timing; TF_CUDA_FLASH_SPLIT=n sends split-mode groups to the flash kernel
// always, n splits a block, for the contract.
bool flash_on() {
  static const bool on = !env_zero("TF_CUDA_FLASH");
  return on;
}
int flash_split_mode() {
  static const int mode = [] {
    const char* e = std::getenv("TF_CUDA_FLASH_SPLIT");
    const int n = e ? std::atoi(e) : -1;
    return e && std::string(e) == "0" ? 0 : n >= 1 && n <= 64 ? n : -1;
  }();
  return mode;
}

// TF_CUDA_FLASH_DECODE=0 keeps split-mode blocks of few pairs on the one-warp flash kernel, and
// its threshold, for timing.
bool flash_decode_on() {
  static const bool on = !env_zero("TF_CUDA_FLASH_DECODE");
  return on;
}

// Splits a decode-form group may walk whole in bf16 mode; TF_CUDA_ATTN_WHOLE=n sets it (0: never),
// for timing.
int attn_whole_splits() {
  static const int n = [] {
    const char* e = std::getenv("TF_CUDA_ATTN_WHOLE");
    return e ? std::max(0, std::atoi(e)) : 4;
  }();
  return n;
}

// TF_CUDA_ATTN_FOLD=0 keeps split mode's partials for decode groups one block walks whole, for timing.
bool attn_fold_on() {
  static const bool on = !env_zero("TF_CUDA_ATTN_FOLD");
  return on;
}

// TF_CUDA_ATTN_EARLY=0 starts the decode form only once the KV store before it has ended, for timing.
bool attn_early_on() {
  static const bool on = !env_zero("TF_CUDA_ATTN_EARLY");
  return on;
}

// TF_CUDA_ATTN_NARROW=0 keeps bf16 mode's decode launches on the eight-warp form, =1 puts every one
// on the four-warp form (decode_narrow), for timing and the contract.
int attn_narrow_mode() {
  static const int mode = [] {
    const char* e = std::getenv("TF_CUDA_ATTN_NARROW");
    return e ? (std::atoi(e) > 0 ? 1 : 0) : -1;
  }();
  return mode;
}

// TF_CUDA_ATTN_HPB=n holds a block to at most n heads of a kv group (more blocks, fewer pairs
// each), for timing; the bits never depend on it.
int attn_hpb_cap() {
  static const int cap = [] {
    const char* e = std::getenv("TF_CUDA_ATTN_HPB");
    return e ? std::max(0, std::atoi(e)) : 0;
  }();
  return cap;
}

template <int NC, int MT, bool kLo>
void launch_attention_as(const AttnArgs& a, unsigned items, unsigned yblocks, size_t smem, int sms) {
  static std::atomic<bool> ready{false};
  if (!ready.load()) {
    const size_t most = attention_smem(MT, NC * kChunk);
    TF_CUDA_CHECK(cudaFuncSetAttribute(attention_kernel<NC, MT, kLo>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(most)),
                  "attention: shared memory of ", most, " bytes");
    ready.store(true);
  }
  // Up to a block an SM may overlap the kernel before it; more start on an idle device.
  const bool overlap = static_cast<int64_t>(items) * yblocks <= sms;
  launch_on_stream(overlap, 1, attention_kernel<NC, MT, kLo>, dim3(items, yblocks), kThreads, smem, a);
}

template <int NC, int MT>
void launch_attention(const AttnArgs& a, unsigned items, unsigned yblocks, size_t smem, int sms) {
  if (a.lo) launch_attention_as<NC, MT, true>(a, items, yblocks, smem, sms);
  else launch_attention_as<NC, MT, false>(a, items, yblocks, smem, sms);
}
}  // namespace

// Decode attention's split partials grow with the keys a round reads, up to kMaxPartialBytes (and
// a megabyte of row sums); scratch may double past what it held, so twice that.
uint64_t CudaBackend::round_growth_bound() const { return 2 * (kMaxPartialBytes + (1ull << 20)); }

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
  check_kv_mode(kv, "attention");
  TF_CHECK(p.sliding_window >= 0 && p.softcap >= 0.0f && std::isfinite(p.scale),
           "attention: sliding_window ", p.sliding_window, ", softcap ", p.softcap, ", scale ",
           p.scale);
  check_layout(rows, q.rows, "attention");
  const int m = static_cast<int>(q.rows);
  if (m == 0) return;
  TF_CHECK(q.rows <= 65535, "attention: ", q.rows, " rows is more than one call takes");
  // bf16 mode's products step 16 dims at a time.
  const int hd = p.head_dim, pad = matmul_input() == MatmulInput::BF16 ? 16 : 8;
  const int hd_pad = (hd + pad - 1) / pad * pad, nc = (hd_pad + kChunk - 1) / kChunk;
  // Rows per sequence: pos, first, page-list offset; the page lists of used sequences.
  std::vector<int32_t> pos(static_cast<size_t>(m)), first(pos.size()), pgoff(pos.size()), fresh(pos.size());
  std::vector<int32_t> seq_off(rows.seq_pages.size(), -1), seq_fresh(rows.seq_pages.size(), INT32_MAX), pages;
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
    seq_fresh[s] = std::min(seq_fresh[s], pos[i]);
  }
  for (int r = 0; r < m; ++r)
    fresh[static_cast<size_t>(r)] = seq_fresh[static_cast<size_t>(rows.seq[static_cast<size_t>(r)])];
  int sms = 0;
  TF_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device_),
                "attention: multiprocessor count");
  const bool bf16 = matmul_input() == MatmulInput::BF16;
  const int group = p.n_heads / p.n_kv_heads;
  // The most heads of a kv group, up to `pairs` and TF_CUDA_ATTN_HPB, that divide it.
  const auto hpb_for = [&](int pairs) {
    const int most = attn_hpb_cap() > 0 ? std::min(attn_hpb_cap(), pairs) : pairs;
    int h = 1;
    for (int d = 1; d <= std::min(group, most); ++d)
      if (group % d == 0) h = d;
    return h;
  };
  // Head dims past kChunk go to the wide flash form, in groups of its 64 pairs, wherever it runs.
  const bool wide = bf16 && flash_on() && flash_wide_takes(hd);
  const int pairs = wide ? kFlashPairs : pairs_per_block(nc), hpb = hpb_for(pairs), rmax = pairs / hpb;
  const int yblocks = p.n_heads / hpb;
  const uint64_t slot_bytes = static_cast<uint64_t>(p.n_heads) * (hd + 2) * sizeof(float);
  // The wide form takes only whole groups: split-mode and decode rows stay on the tile kernel.
  Plan pl = plan_attention({pos.data(), first.data(), rows.seq.data(), m, rmax, hpb, yblocks, sms,
                            wide || (flash_takes(hd) && flash_on()), wide ? 0 : flash_split_mode(), slot_bytes,
                            kMaxPartialBytes, !wide && flash_decode_on(), bf16,
                            bf16 && !wide ? attn_whole_splits() : 0, attn_fold_on()});
  const unsigned n_dec = !wide && flash_decode_on() ? decode_first(pl, hpb) : 0;
  // bf16 mode's warp-specialized form takes the whole groups two a block where they pair.
  const unsigned n_ws =
      bf16 && !wide && flash_ws_takes(hd) &&
              flash_ws_worth(pl, n_dec, pos.data(), first.data(), yblocks, sms, flash_ws_mode())
          ? pair_flash_items(pl, n_dec, pos.data(), rows.seq.data())
          : 0;
  const std::vector<int32_t>&grp = pl.grp, &items = pl.items, &part_off = pl.part_off, &brows = pl.brows;
  const int64_t slots = pl.slots;
  // One metadata upload: pos, first, page offsets, partial offsets, groups, items, split rows,
  // pages, fresh positions.
  std::vector<int32_t> meta;
  meta.reserve(5 * pos.size() + grp.size() + items.size() + brows.size() + pages.size());
  size_t at[9];
  int part = 0;
  const std::vector<int32_t>* parts[] = {&pos, &first, &pgoff, &part_off, &grp, &items, &brows, &pages, &fresh};
  for (const std::vector<int32_t>* v : parts) {
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
             d_meta + at[7], d_meta + at[8], part_ml, part_acc, kv.page_size, kv.kv_heads * kv.head_dim,
             p.n_heads, group, hd, hd_pad, q_stride_for(hd_pad), hpb, width, p.scale, p.softcap,
             pl.chunk, matmul_input() == MatmulInput::F32, plane_for(out)};
  // The flash kernel's groups come first in items, then the tile kernel's.
  const unsigned n_flash = pl.n_flash, n_items = static_cast<unsigned>(items.size() / 2) - n_flash;
  const auto yb = static_cast<unsigned>(yblocks);
  const int mt = pl.most_rows * hpb <= 16 ? 1 : pl.most_rows * hpb <= 32 ? 2 : 4;
  if (n_dec > 0) {
    // The decode form's first loads may go out while the KV store before it runs (its keys after).
    launch_flash_decode(a, n_dec, yb, attn_early_on() && launch_count() == kv_written_at_,
                        decode_narrow(static_cast<int64_t>(n_dec) * yb, sms, attn_narrow_mode(),
                                      static_cast<int64_t>(kv.pages) * kv.page_size));
    check_launch("attention");
    a.items += 2 * n_dec;
  }
  if (n_ws > 0) {
    launch_flash_ws(a, n_ws, yb);
    check_launch("attention");
    a.items += 2 * (n_flash - n_dec);
  } else if (n_flash > n_dec) {
    if (wide) launch_flash_wide(a, n_flash - n_dec, yb);
    else launch_flash(a, n_flash - n_dec, yb);
    check_launch("attention");
    a.items += 2 * (n_flash - n_dec);
  }
  if (n_items > 0) {
    const size_t smem = attention_smem(mt, hd_pad);
    if (nc == 1 && mt == 1) launch_attention<1, 1>(a, n_items, yb, smem, sms);
    else if (nc == 1 && mt == 2) launch_attention<1, 2>(a, n_items, yb, smem, sms);
    else if (nc == 1) launch_attention<1, 4>(a, n_items, yb, smem, sms);
    else if (nc == 2 && mt == 1) launch_attention<2, 1>(a, n_items, yb, smem, sms);
    else if (nc == 2) launch_attention<2, 2>(a, n_items, yb, smem, sms);
    else if (nc == 3) launch_attention<3, 1>(a, n_items, yb, smem, sms);
    else launch_attention<4, 1>(a, n_items, yb, smem, sms);
  }
  check_launch("attention");
  if (!brows.empty()) {
    launch_kernel(attention_merge_kernel,
                  dim3(static_cast<unsigned>(p.n_heads), static_cast<unsigned>(brows.size())), 128,
                  0, a, d_meta + at[6]);
    check_launch("attention merge");
  }
  plane_written(out, a.out_hi);
}

}  // namespace tf::cuda
