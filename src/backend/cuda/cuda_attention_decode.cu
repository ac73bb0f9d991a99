// Split-mode attention blocks of at most 16 (row, head) pairs, the decode rows, on eight warps a
// block: the order rule of cuda_attention.cu through the helpers of cuda_attention.cuh, so a split
// gives the bits of the flash kernel (cuda_attention_flash.cu) and the tile kernel.
#include <atomic>

#include "backend/cuda/cuda_attention_stage.cuh"
#include "backend/cuda/cuda_backend.h"

namespace tf::cuda::attn {

namespace {

// Split-mode blocks of at most 16 pairs: eight warps share the one m tile. Warp w computes the
// scores of key tile w and the products of dim tiles 2w and 2w + 1; warps 0 and 1 run the split
// softmax on the exchanged scores, so each accumulator keeps the flash kernel's order. Each
// K and V element is read by one warp; bf16 mode's tiles stay bf16 and feed k16 products (K as
// words, V by ldmatrix).
// f32 mode: the next split's K loads while this split's V does (two f32 tiles in flight). bf16
// mode (tiles of half the bytes): K and V of the next two splits load while this one computes, and
// a block may also take a whole group (item split -1): it folds its splits in order as the tile
// kernel's whole mode does and writes the output, with no partials and no merge.
constexpr int kDecPairs = 16, kDecWarps = 8, kDecThreads = 32 * kDecWarps;
constexpr int kNarrowThreads = 128;  // the four-warp form (flash_decode_narrow_kernel)

// f32 mode: q, two K tiles and a V tile, the scores in the K tile's rows, the slots. bf16 mode:
// q, two K and two V tiles, the scores, the slots.
template <bool kLo>
constexpr size_t dec_smem() {
  return static_cast<size_t>(kDecPairs) * kKs * sizeof(float) +
         (kLo ? 3 * static_cast<size_t>(kSplit) * kKs * sizeof(float)
              : 4 * static_cast<size_t>(kSplit) * kKs16 * sizeof(uint16_t) + 8 * static_cast<size_t>(kKs) * sizeof(float) +
                    4 * static_cast<size_t>(kDecPairs) * sizeof(float)) +
         2 * kSplit * sizeof(int64_t);
}

// The four-warp form: a ring of three bf16 tiles, the scores, the fold, two splits' pool rows.
constexpr size_t narrow_smem() {
  return 3 * static_cast<size_t>(kSplit) * kKs16 * sizeof(uint16_t) + 8 * static_cast<size_t>(kKs) * sizeof(float) +
         4 * static_cast<size_t>(kDecPairs) * sizeof(float) + 2 * kSplit * sizeof(int32_t);
}
static_assert(4 * (narrow_smem() + 1024) <= 228 * 1024, "four blocks of the four-warp form fit an SM");

// Whole mode: a pair's running max and sum, held by the quad of warp h that owns pair gq + 8h.
struct Run {
  float m = -INFINITY, l = 0.0f;
  bool started = false;
};

// What a decode block's threads know: its item, their lane, their two pairs' key ranges.
struct Dec {
  Item it;
  int warp, lane, gq, tq, hd, hdp;
  int pfirst[2], ppos[2];  // pairs gq and gq + 8
};

__device__ __forceinline__ Dec dec_of(const Args& a) {
  Dec d;
  d.it = item_of(a, a.items[2 * blockIdx.x], a.items[2 * blockIdx.x + 1]);
  d.warp = threadIdx.x / 32, d.lane = threadIdx.x % 32, d.gq = d.lane >> 2, d.tq = d.lane & 3;
  d.hd = a.head_dim, d.hdp = a.hd_pad;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int p = d.gq + 8 * h, row = d.it.r0 + (p < d.it.P ? p / a.hpb : 0);
    d.pfirst[h] = a.row_first[row];
    d.ppos[h] = p < d.it.P ? a.row_pos[row] : -1;
  }
  return d;
}

// A warp's C fragment of key tile kt to row kt of xs ([pair][8 keys]).
__device__ __forceinline__ void dec_put_scores(const Dec& d, const float (&sw)[4], float* xs, int xld, int kt) {
  float* xw = xs + kt * xld;
  *reinterpret_cast<float2*>(xw + 8 * d.gq + 2 * d.tq) = make_float2(sw[0], sw[1]);
  *reinterpret_cast<float2*>(xw + 8 * (d.gq + 8) + 2 * d.tq) = make_float2(sw[2], sw[3]);
}

// Warp w's scores of key tile w (K tile ks, row stride ld) to row w of xs ([pair][8 keys], row
// stride xld). In f32 mode xs is the K tile itself: row 8w is this warp's own, read by no other.
__device__ __forceinline__ void dec_scores(const Dec& d, const float* qs, const float* ks, int ld, float* xs, int xld) {
  float sw[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll 4
  for (int kk = 0; kk < d.hdp; kk += 8) {
    uint32_t ab[4], as[4], bb[2], bs[2];
    load_a<true>(qs + kk, kKs, d.lane, ab, as);
    const float* kr = ks + (8 * d.warp + d.gq) * ld + kk + d.tq;
    split_tf32<true>(kr[0], bb[0], bs[0]);
    split_tf32<true>(kr[4], bb[1], bs[1]);
    mma3<true>(sw, ab, as, bb, bs);
  }
  __syncwarp();
  dec_put_scores(d, sw, xs, xld, d.warp);
}

// bf16 mode: the same scores in k16 steps, q's A fragments qa from registers, K's B fragments
// read as words of the bf16 tile; warp w takes key tiles KT w .. KT w + KT - 1, one chain each.
template <int KT>
__device__ __forceinline__ void dec_scores16(const Dec& d, const uint32_t (&qa)[kChunk / 16][4], const uint16_t* ks,
                                             int ld, float* xs, int xld) {
  float sw[KT][4] = {};
  const uint16_t* kr = ks + (8 * KT * d.warp + d.gq) * ld + 2 * d.tq;
#pragma unroll
  for (int k = 0; k < kChunk / 16; ++k) {
    if (16 * k >= d.hdp) break;
#pragma unroll
    for (int t = 0; t < KT; ++t)
      mma_k16(sw[t], qa[k], *reinterpret_cast<const uint32_t*>(kr + 8 * t * ld + 16 * k),
              *reinterpret_cast<const uint32_t*>(kr + 8 * t * ld + 16 * k + 8));
  }
  __syncwarp();
#pragma unroll
  for (int t = 0; t < KT; ++t) dec_put_scores(d, sw[t], xs, xld, KT * d.warp + t);
}

// Split s's softmax: warp h turns pairs gq + 8h's scores in xs into weights in place, once for
// the block, and writes their (max, sum); on[h]: whether pair gq + 8h has keys in the split. In
// whole mode (st set) it folds them into run instead and leaves in st[4p..] how pair p's products
// fold: mode (0: no keys, 1: the first split, 2: fold), then the factors a and b.
template <bool kLo>
__device__ __forceinline__ void dec_softmax(const Args& a, const Dec& d, float* xs, int xld, int s, bool (&on)[2],
                                            float* st = nullptr, Run* run = nullptr) {
  const int base = s * kSplit;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int klo = max(d.pfirst[h], base) - base, khi = min(d.ppos[h], base + kSplit - 1) - base;
    on[h] = klo <= khi;
    if (d.warp != h) continue;
    float x[8][2];
#pragma unroll
    for (int n = 0; n < 8; ++n) {
      const float2 u = *reinterpret_cast<const float2*>(xs + n * xld + 8 * (d.gq + 8 * h) + 2 * d.tq);
      x[n][0] = u.x, x[n][1] = u.y;
    }
    float mx, lsum;
    split_softmax<kLo>(x, d.tq, klo, khi, a.scale, a.softcap, mx, lsum);
#pragma unroll
    for (int n = 0; n < 8; ++n)
      *reinterpret_cast<float2*>(xs + n * xld + 8 * (d.gq + 8 * h) + 2 * d.tq) = make_float2(x[n][0], x[n][1]);
    if (st != nullptr) {
      float mode = 0.0f, fa = 0.0f, fb = 0.0f;
      if (on[h] && !run->started) {
        run->m = mx, run->l = lsum, run->started = true, mode = 1.0f;
      } else if (on[h]) {
        const float mn = fmaxf(run->m, mx);
        fa = attn_exp(__fsub_rn(run->m, mn)), fb = attn_exp(__fsub_rn(mx, mn));
        run->l = fold(run->l, fa, lsum, fb), run->m = mn, mode = 2.0f;
      }
      if (d.tq == 0) *reinterpret_cast<float4*>(st + 4 * (d.gq + 8 * h)) = make_float4(mode, fa, fb, 0.0f);
    } else if (on[h] && d.tq == 0) {
      const int p = d.gq + 8 * h;
      const int64_t slot = part_slot(a, d.it.r0 + p / a.hpb, d.it.h0 + p % a.hpb, s);
      a.part_ml[2 * slot] = mx;
      a.part_ml[2 * slot + 1] = lsum;
    }
  }
}

// Dim tiles ND w .. ND w + ND - 1 of split s's products os into the pairs' partials.
template <int ND>
__device__ __forceinline__ void dec_put_pv(const Args& a, const Dec& d, const float (&os)[ND][4], int s,
                                           const bool (&on)[2]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    if (!on[h]) continue;
    const int p = d.gq + 8 * h;
    float* dst = a.part_acc + part_slot(a, d.it.r0 + p / a.hpb, d.it.h0 + p % a.hpb, s) * d.hd;
#pragma unroll
    for (int j = 0; j < ND; ++j) {
      const int dd = 8 * (ND * d.warp + j) + 2 * d.tq;
      if (dd < d.hd) dst[dd] = os[j][2 * h];
      if (dd + 1 < d.hd) dst[dd + 1] = os[j][2 * h + 1];
    }
  }
}

// Split s's products of the weights in xs and V tile vs for dim tiles 2w and 2w + 1 (past hd_pad
// they read zeros and are not written), into the pairs' partials.
__device__ __forceinline__ void dec_pv(const Args& a, const Dec& d, const float* xs, int xld, const float* vs, int ld,
                                       int s, const bool (&on)[2]) {
  float sc[8][4];
#pragma unroll
  for (int n = 0; n < 8; ++n) {
    const float* xr = xs + n * xld + 2 * d.tq;
    const float2 u = *reinterpret_cast<const float2*>(xr + 8 * d.gq);
    const float2 w = *reinterpret_cast<const float2*>(xr + 8 * (d.gq + 8));
    sc[n][0] = u.x, sc[n][1] = u.y, sc[n][2] = w.x, sc[n][3] = w.y;
  }
  if (16 * d.warp >= d.hdp) return;
  float os[2][4];
#pragma unroll
  for (int j = 0; j < 2; ++j) os[j][0] = os[j][1] = os[j][2] = os[j][3] = 0.0f;
#pragma unroll
  for (int n = 0; n < 8; ++n) {
    uint32_t ab[4], as[4];
    split_a<true>(sc[n][0], sc[n][2], sc[n][1], sc[n][3], ab, as);
    uint32_t bb[2][2], bs[2][2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const float* vr = vs + (8 * n + 2 * d.tq) * ld + 8 * (2 * d.warp + i) + d.gq;
      split_tf32<true>(vr[0], bb[i][0], bs[i][0]);
      split_tf32<true>(vr[ld], bb[i][1], bs[i][1]);
    }
    mma3_shared_a<true>(os, ab, as, bb, bs);
  }
  dec_put_pv(a, d, os, s, on);
}

// Whole mode: split products os folded into the running acc as st says, for each pair.
template <int ND>
__device__ __forceinline__ void dec_fold_pv(const Dec& d, const float (&os)[ND][4], const float* st, float (&acc)[ND][4]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float4 f = *reinterpret_cast<const float4*>(st + 4 * (d.gq + 8 * h));
#pragma unroll
    for (int j = 0; j < ND; ++j)
#pragma unroll
      for (int e = 2 * h; e < 2 * h + 2; ++e)
        acc[j][e] = f.x == 1.0f ? os[j][e] : f.x == 2.0f ? fold(acc[j][e], f.y, os[j][e], f.z) : acc[j][e];
  }
}

// bf16 mode: the same products in k16 steps (keys 16j..16j + 15), the weights' A fragments packed
// from xs, V's B fragments by ldmatrix from the bf16 tile (hd_pad is a multiple of 16); warp w
// takes dim tiles ND w .. ND w + ND - 1. Whole mode (st set): folded into acc.
template <int ND>
__device__ __forceinline__ void dec_pv16(const Args& a, const Dec& d, const float* xs, int xld, const uint16_t* vs,
                                         int ld, int s, const bool (&on)[2], const float* st, float (&acc)[ND][4]) {
  uint32_t pa[4][4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const float* xr = xs + (2 * j + i) * xld + 2 * d.tq;
      const float2 u = *reinterpret_cast<const float2*>(xr + 8 * d.gq);
      const float2 w = *reinterpret_cast<const float2*>(xr + 8 * (d.gq + 8));
      pa[j][2 * i] = pack_bf16(u.x, u.y), pa[j][2 * i + 1] = pack_bf16(w.x, w.y);
    }
  }
  if (8 * ND * d.warp >= d.hdp) return;
  float os[ND][4];
#pragma unroll
  for (int j = 0; j < ND; ++j) os[j][0] = os[j][1] = os[j][2] = os[j][3] = 0.0f;
  const int mi = d.lane >> 3, mr = d.lane & 7;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
#pragma unroll
    for (int i = 0; i < ND; i += 2) {
      uint32_t vf[4];
      ldsm4_t(vf, vs + (16 * j + 8 * (mi & 1) + mr) * ld + 8 * (ND * d.warp + i) + 8 * (mi >> 1));
      mma_k16(os[i], pa[j], vf[0], vf[1]);
      mma_k16(os[i + 1], pa[j], vf[2], vf[3]);
    }
  }
  if (st != nullptr) dec_fold_pv(d, os, st, acc);
  else dec_put_pv(a, d, os, s, on);
}

// Thread j's key of split s + 2 (j < kSplit; fill), whether the item sees it (in), and its page id,
// loaded before the split's scores so that the load's latency hides behind them.
struct NextKey {
  bool fill, in;
  int32_t pk, page;
};
__device__ __forceinline__ NextKey next_key(const Args& a, const Dec& d, int s, int s1) {
  NextKey k;
  const int j = threadIdx.x;
  k.pk = (s + 2) * kSplit + j;
  k.fill = s + 2 <= s1 && j < kSplit;
  k.in = k.fill && k.pk >= d.it.lo && k.pk <= d.it.hi;
  k.page = k.in ? d.it.pt[k.pk / a.page_size] : 0;
  return k;
}

// Whole mode's end: warps 0 and 1 leave each pair's sum in st, then a warp's dim tiles ND w ..
// ND w + ND - 1 of acc over it go to the output.
template <int ND>
__device__ __forceinline__ void dec_write_out(const Args& a, const Dec& d, const Run& run, float* st,
                                              const float (&acc)[ND][4]) {
  if (d.warp < 2 && d.tq == 0) st[4 * (d.gq + 8 * d.warp) + 3] = run.l;
  __syncthreads();
  if (8 * ND * d.warp >= d.hdp) return;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int p = d.gq + 8 * h;
    if (p >= d.it.P) continue;
    const float lp = st[4 * p + 3];
    float* orow = a.out + static_cast<int64_t>(d.it.r0 + p / a.hpb) * a.ldq + static_cast<int64_t>(d.it.h0 + p % a.hpb) * d.hd;
#pragma unroll
    for (int jt = 0; jt < ND; ++jt) {
      const int dd = 8 * (ND * d.warp + jt) + 2 * d.tq;
      store_out2(a, orow, dd, __fadd_rn(__fdiv_rn(acc[jt][2 * h], lp), 0.0f),
                 __fadd_rn(__fdiv_rn(acc[jt][2 * h + 1], lp), 0.0f));
    }
  }
}

// bf16 mode's q fragments for pairs gq and gq + 8, read from global memory: the words stage_q and
// load_a16 give (q rounded to bf16; zeros past head_dim and past the item's pairs).
__device__ __forceinline__ void dec_q16(const Args& a, const Dec& d, uint32_t (&qa)[kChunk / 16][4]) {
  const float* src[2];
  bool ok[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int p = d.gq + 8 * h;
    ok[h] = p < d.it.P;
    src[h] = a.q + (ok[h] ? static_cast<int64_t>(d.it.r0 + p / a.hpb) * a.ldq +
                                static_cast<int64_t>(d.it.h0 + p % a.hpb) * d.hd
                          : 0);
  }
  auto val = [&](int h, int c) { return ok[h] && c < d.hd ? product_input<false>(src[h][c]) : 0.0f; };
#pragma unroll
  for (int k = 0; k < kChunk / 16; ++k) {
    if (16 * k >= d.hdp) break;
    const int c = 16 * k + 2 * d.tq;
    qa[k][0] = pack_bf16(val(0, c), val(0, c + 1)), qa[k][1] = pack_bf16(val(1, c), val(1, c + 1));
    qa[k][2] = pack_bf16(val(0, c + 8), val(0, c + 9)), qa[k][3] = pack_bf16(val(1, c + 8), val(1, c + 9));
  }
}

__global__ void __launch_bounds__(kDecThreads, 2) flash_decode_kernel(Args a) {
  grid_wait();
  grid_launch_next();
  extern __shared__ float4 sh4[];
  float* qs = reinterpret_cast<float*>(sh4);  // [kDecPairs][kKs]
  float* kb = qs + kDecPairs * kKs;           // [2][kSplit][kKs]
  float* vs = kb + 2 * kSplit * kKs;          // [kSplit][kKs]
  auto* kslot = reinterpret_cast<int64_t*>(vs + kSplit * kKs);  // [2][kSplit], -1: masked
  const Dec d = dec_of(a);
  const int s0 = d.it.s0, s1 = d.it.s1;
  const auto* kpool = static_cast<const float*>(a.k);
  const auto* vpool = static_cast<const float*>(a.v);
  auto stage = [&](float* dst, const float* src, int buf) {
    stage_tile<kDecThreads>(dst, kKs, src, kslot + buf * kSplit, d.hd, d.hdp);
  };
  fill_slots<kDecThreads>(kslot, a, d.it, s0);
  stage_q<kDecThreads, true>(qs, kKs, a, d.it.r0, d.it.h0, d.it.P, kDecPairs);
  zero_v_tail<kDecThreads>(vs, kKs, d.hdp);
  __syncthreads();
  stage(kb, kpool, 0);
  for (int s = s0; s <= s1; ++s) {
    const int b = (s - s0) & 1;
    float* ks = kb + b * kSplit * kKs;
    stage(vs, vpool, b);
    if (s < s1) {
      fill_slots<kDecThreads>(kslot + (b ^ 1) * kSplit, a, d.it, s + 1);
      __syncthreads();
      stage(kb + (b ^ 1) * kSplit * kKs, kpool, b ^ 1);
      cp_async_wait<2>();
    } else {
      cp_async_wait<1>();
    }
    __syncthreads();
    dec_scores(d, qs, ks, kKs, ks, 8 * kKs);
    __syncthreads();
    bool on[2];
    dec_softmax<true>(a, d, ks, 8 * kKs, s, on);
    if (s < s1) cp_async_wait<1>();
    else cp_async_wait<0>();
    __syncthreads();
    dec_pv(a, d, ks, 8 * kKs, vs, kKs, s, on);
    __syncthreads();
  }
}

// bf16 mode's schedule: a ring of two (K, V) stages a split each, one commit group a stage. Split
// s + 2's slots are found while split s's scores run (their page ids load meanwhile) and its tiles
// load once split s's products are done, so a split's loads have a whole split's work to land.
// Before the wait on the kernel before it, a block finds its first two splits' slots and loads
// their keys older than the call's first row of the sequence (row_fresh): a launch that overlaps
// is one whose kernel before it wrote only the call's keys (attention_prep, kv_store) after
// waiting on everything earlier. The call's own keys load after the wait, as a second group.
__global__ void __launch_bounds__(kDecThreads, 2) flash_decode_bf16_kernel(Args a) {
  constexpr int ld = kKs16;
  extern __shared__ float4 sh4[];
  float* qs = reinterpret_cast<float*>(sh4);                  // [kDecPairs][kKs]
  auto* kb = reinterpret_cast<uint16_t*>(qs + kDecPairs * kKs);  // [2][kSplit][ld]
  uint16_t* vb = kb + 2 * kSplit * ld;                          // [2][kSplit][ld]
  auto* xs = reinterpret_cast<float*>(vb + 2 * kSplit * ld);    // [8][kKs]: scores, then weights
  float* st = xs + 8 * kKs;                                     // [kDecPairs][4]: whole mode's fold
  auto* kslot = reinterpret_cast<int64_t*>(st + 4 * kDecPairs);  // [2][kSplit], -1: masked
  const Dec d = dec_of(a);
  const bool whole = a.items[2 * blockIdx.x + 1] < 0;
  const int s0 = d.it.s0, s1 = d.it.s1;
  const auto* kpool = static_cast<const uint16_t*>(a.k);
  const auto* vpool = static_cast<const uint16_t*>(a.v);
  // Rows [jlo, jhi) of split s's K and V into stage b.
  auto stage = [&](int b, int jlo, int jhi) {
    const int64_t* sl = kslot + b * kSplit;
    stage_rows_kv<kDecThreads>(kb + b * kSplit * ld, vb + b * kSplit * ld, ld, kpool, vpool, sl, d.hd, d.hdp, jlo, jhi);
    cp_async_commit();
  };
  const int32_t fresh = a.row_fresh[d.it.r0];
  const int old0 = min(max(fresh - s0 * kSplit, 0), kSplit), old1 = min(max(fresh - (s0 + 1) * kSplit, 0), kSplit);
  fill_slots<kDecThreads>(kslot, a, d.it, s0);
  if (s0 < s1) fill_slots<kDecThreads>(kslot + kSplit, a, d.it, s0 + 1);
  __syncthreads();
  stage(0, 0, old0);
  if (s0 < s1) stage(1, 0, old1);
  grid_wait();
  grid_launch_next();
  stage_q<kDecThreads, false>(qs, kKs, a, d.it.r0, d.it.h0, d.it.P, kDecPairs);
  stage(0, old0, kSplit);
  if (s0 < s1) stage(1, old1, kSplit);
  __syncthreads();
  uint32_t qa[kChunk / 16][4];
#pragma unroll
  for (int k = 0; k < kChunk / 16; ++k)
    if (16 * k < d.hdp) load_a16(qs + 16 * k, kKs, d.lane, qa[k]);
  Run run;
  float acc[2][4] = {};
  float* wst = whole ? st : nullptr;
  for (int s = s0; s <= s1; ++s) {
    const int b = (s - s0) & 1;
    // Pending past split s's stage: split s + 1's (the call's keys, or the whole stage) or none.
    if (s < s1) cp_async_wait<1>();
    else cp_async_wait<0>();
    __syncthreads();
    // Split s + 2's slots into this stage's (read when split s's tiles were staged): the page
    // id loads now, the slot is written after the scores.
    const NextKey nk = next_key(a, d, s, s1);
    dec_scores16<1>(d, qa, kb + b * kSplit * ld, ld, xs, kKs);
    if (nk.fill)
      kslot[b * kSplit + threadIdx.x] =
          nk.in ? pool_row(a, nk.page, nk.pk) * a.kv_width + d.it.head_off : -1;
    __syncthreads();
    bool on[2];
    dec_softmax<false>(a, d, xs, kKs, s, on, wst, &run);
    __syncthreads();
    dec_pv16(a, d, xs, kKs, vb + b * kSplit * ld, ld, s, on, wst, acc);
    __syncthreads();
    if (s + 2 <= s1) stage(b, 0, kSplit);
  }
  if (whole) dec_write_out(a, d, run, st, acc);
}

// bf16 mode's decode form on four warps a block, for launches of more blocks than two an SM of
// the eight-warp form hold: a block needs a third of the shared memory (a ring of three K or V
// tiles, q read into registers from global memory), so four fit an SM. Warp w takes key tiles
// 2w, 2w + 1 and dim tiles 4w..4w + 3 with the same chains, so the bits are the eight-warp
// form's. Tile t of the sequence K(s0), V(s0), K(s0 + 1), ... sits in ring slot t % 3: split
// s + 1's V loads once split s's scores free K(s)'s slot, split s + 2's K once split s's
// products free V(s)'s, so each tile has about a split's work to land.
__global__ void __launch_bounds__(kNarrowThreads, 4) flash_decode_narrow_kernel(Args a) {
  constexpr int ld = kKs16;
  extern __shared__ float4 sh4[];
  auto* ring = reinterpret_cast<uint16_t*>(sh4);                 // [3][kSplit][ld]
  auto* xs = reinterpret_cast<float*>(ring + 3 * kSplit * ld);   // [8][kKs]: scores, then weights
  float* st = xs + 8 * kKs;                                      // [kDecPairs][4]: whole mode's fold
  auto* kslot = reinterpret_cast<int32_t*>(st + 4 * kDecPairs);  // [2][kSplit] pool rows, -1: masked
  const Dec d = dec_of(a);
  const bool whole = a.items[2 * blockIdx.x + 1] < 0;
  const int s0 = d.it.s0, s1 = d.it.s1;
  const auto* kpool = static_cast<const uint16_t*>(a.k);
  const auto* vpool = static_cast<const uint16_t*>(a.v);
  auto tile = [&](int t) { return ring + (t % 3) * kSplit * ld; };
  // Rows [jlo, jhi) of split s0 + i's K (v false) or V into its slot, with no commit.
  auto stage = [&](int i, bool v, int jlo, int jhi) {
    const int32_t* sl = kslot + (i & 1) * kSplit;
    uint16_t* dst = tile(2 * i + (v ? 1 : 0));
    const uint16_t* src = v ? vpool : kpool;
    stage_keys_by<kNarrowThreads, uint16_t>(
        ld, [&](int key) { return sl[key] < 0 ? int64_t{-1} : sl[key] * static_cast<int64_t>(a.kv_width) + d.it.head_off; },
        d.hd, d.hdp, jlo, jhi, [&](int to, int64_t at, bool ok, bool wide) { stage_copy(dst + to, src + at, ok, wide); });
  };
  auto rows_of = [&](int32_t* sl, int s) {
    for (int j = threadIdx.x; j < kSplit; j += kNarrowThreads) {
      const int32_t pk = s * kSplit + j;
      sl[j] = pk >= d.it.lo && pk <= d.it.hi ? static_cast<int32_t>(pool_row(a, d.it.pt[pk / a.page_size], pk)) : -1;
    }
  };
  const int32_t fresh = a.row_fresh[d.it.r0];
  const int old0 = min(max(fresh - s0 * kSplit, 0), kSplit), old1 = min(max(fresh - (s0 + 1) * kSplit, 0), kSplit);
  rows_of(kslot, s0);
  if (s0 < s1) rows_of(kslot + kSplit, s0 + 1);
  for (int t = 0; t < 3; ++t) zero_v_tail<kNarrowThreads>(tile(t), ld, d.hdp);
  __syncthreads();
  stage(0, false, 0, old0);
  stage(0, true, 0, old0);
  if (s0 < s1) stage(1, false, 0, old1);
  cp_async_commit();
  grid_wait();
  grid_launch_next();
  stage(0, false, old0, kSplit);
  stage(0, true, old0, kSplit);
  if (s0 < s1) stage(1, false, old1, kSplit);
  cp_async_commit();
  uint32_t qa[kChunk / 16][4];
  dec_q16(a, d, qa);
  Run run;
  float acc[4][4] = {};
  float* wst = whole ? st : nullptr;
  for (int s = s0; s <= s1; ++s) {
    const int i = s - s0;
    // Pending past K(s): V(s) and K(s + 1), each a group (the first split waits for all).
    if (i == 0) cp_async_wait<0>();
    else cp_async_wait<2>();
    __syncthreads();
    // Split s + 2's rows into split s's slots (its tiles are staged): the page id loads now.
    const NextKey nk = next_key(a, d, s, s1);
    dec_scores16<2>(d, qa, tile(2 * i), ld, xs, kKs);
    if (nk.fill) kslot[(i & 1) * kSplit + threadIdx.x] = nk.in ? static_cast<int32_t>(pool_row(a, nk.page, nk.pk)) : -1;
    __syncthreads();
    if (s + 1 <= s1) stage(i + 1, true, 0, kSplit);
    cp_async_commit();
    bool on[2];
    dec_softmax<false>(a, d, xs, kKs, s, on, wst, &run);
    // Pending past V(s): K(s + 1) and V(s + 1).
    cp_async_wait<2>();
    __syncthreads();
    dec_pv16(a, d, xs, kKs, tile(2 * i + 1), ld, s, on, wst, acc);
    __syncthreads();
    if (s + 2 <= s1) stage(i + 2, false, 0, kSplit);
    cp_async_commit();
  }
  if (whole) dec_write_out(a, d, run, st, acc);
}

}  // namespace

void launch_flash_decode(const Args& a, unsigned n_items, unsigned yblocks, bool overlap, bool narrow) {
  static std::atomic<bool> ready_f32{false}, ready_bf16{false}, ready_narrow{false};
  if (a.lo) {
    launch_attention_kernel(flash_decode_kernel, ready_f32, kDecThreads, dec_smem<true>(), a, n_items, yblocks);
  } else if (narrow) {
    if (!ready_narrow.load())
      TF_CUDA_CHECK(cudaFuncSetAttribute(flash_decode_narrow_kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                         static_cast<int>(cudaSharedmemCarveoutMaxShared)),
                    "attention: shared memory carveout");
    launch_attention_kernel(flash_decode_narrow_kernel, ready_narrow, kNarrowThreads, narrow_smem(), a, n_items,
                            yblocks, overlap);
  } else {
    launch_attention_kernel(flash_decode_bf16_kernel, ready_bf16, kDecThreads, dec_smem<false>(), a, n_items, yblocks,
                            overlap);
  }
}

}  // namespace tf::cuda::attn
