#pragma once
// What the flash attention kernels share (cuda_attention_flash.cu, and the sm_90a wgmma forms in
// cuda_attention_flash_wg.cu): a block of four warps holds up to 64 (row, head) pairs, each warp 16
// of them with their running state in registers; the order rule's split softmax, its fold into
// that state, and the output, through the helpers of cuda_attention.cuh.
#include <cstdint>

#include "backend/cuda/cuda_attention_stage.cuh"

namespace tf::cuda::attn {

constexpr int kWarps = kFlashPairs / 16, kThreads = 32 * kWarps, kPairs = kFlashPairs;

// What a flash warp keeps of its two pairs (rows gq and gq + 8 of its m tile) across splits.
struct FlashPairs {
  int pfirst[2], ppos[2];
  float m[2], l[2];
  bool started[2];
};

__device__ __forceinline__ FlashPairs flash_pairs(const Args& a, const Item& it, int warp, int gq) {
  FlashPairs f;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int p = 16 * warp + gq + 8 * h, row = it.r0 + (p < it.P ? p / a.hpb : 0);
    f.pfirst[h] = a.row_first[row];
    f.ppos[h] = p < it.P ? a.row_pos[row] : -1;
    f.m[h] = f.l[h] = 0.0f;
    f.started[h] = false;
  }
  return f;
}

// How a split's products join a pair's state: mode 0 (no keys in the split), 1 (taken as they
// are: the first split, or a partial), 2 (folded by fa, fb).
struct SplitJoin {
  int mode[2] = {0, 0};
  float fa[2] = {0.0f, 0.0f}, fb[2] = {0.0f, 0.0f};
};

// Pair h's split range, split-relative: keys klo..khi of split s are its (none when klo > khi).
__device__ __forceinline__ void pair_keys(const FlashPairs& f, int h, int s, int& klo, int& khi) {
  const int base = s * kSplit;
  klo = max(f.pfirst[h], base) - base, khi = min(f.ppos[h], base + kSplit - 1) - base;
}

// Pair h (row gq + 8h of the warp's m tile) joins split s's (max, sum): written as a partial
// (part; by the quad's first lane where ml), or taken as its first split's, or folded into f.
__device__ __forceinline__ void flash_join(const Args& a, const Item& it, FlashPairs& f, SplitJoin& j, int h,
                                           int warp, int gq, int tq, int s, bool part, float mx, float lsum,
                                           bool ml = true) {
  if (part) {
    const int p = 16 * warp + gq + 8 * h;
    if (ml && tq == 0) {
      const int64_t slot = part_slot(a, it.r0 + p / a.hpb, it.h0 + p % a.hpb, s);
      a.part_ml[2 * slot] = mx;
      a.part_ml[2 * slot + 1] = lsum;
    }
    j.mode[h] = 1;
  } else if (!f.started[h]) {
    f.m[h] = mx, f.l[h] = lsum, f.started[h] = true, j.mode[h] = 1;
  } else {
    const float mn = fmaxf(f.m[h], mx);
    j.fa[h] = attn_exp(__fsub_rn(f.m[h], mn));
    j.fb[h] = attn_exp(__fsub_rn(mx, mn));
    f.l[h] = fold(f.l[h], j.fa[h], lsum, j.fb[h]);
    f.m[h] = mn, j.mode[h] = 2;
  }
}

// Split s's softmax of the warp's scores sc (8 key tiles' C fragments), in place: the weights,
// and each pair's (max, sum) written as a partial (part) or folded into f; kSkip as split_softmax's;
// kPack: pa also gets the weights as the V products' A fragments, as pack_weights lays them out.
template <bool kLo, bool kSkip = false, bool kPack = false>
__device__ __forceinline__ SplitJoin flash_softmax(const Args& a, const Item& it, FlashPairs& f, float (&sc)[8][4],
                                                   int warp, int gq, int tq, int s, bool part,
                                                   uint32_t (*pa)[4] = nullptr) {
  SplitJoin j;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    int klo, khi;
    pair_keys(f, h, s, klo, khi);
    float x[8][2];
#pragma unroll
    for (int n = 0; n < 8; ++n) x[n][0] = sc[n][2 * h], x[n][1] = sc[n][2 * h + 1];
    float mx, lsum;
    uint32_t pw[8];
    split_softmax<kLo, kSkip, kPack>(x, tq, klo, khi, a.scale, a.softcap, mx, lsum, pw);
#pragma unroll
    for (int n = 0; n < 8; ++n) sc[n][2 * h] = x[n][0], sc[n][2 * h + 1] = x[n][1];
    if (kPack) {
#pragma unroll
      for (int n = 0; n < 8; ++n) pa[n / 2][2 * (n % 2) + h] = pw[n];
    }
    if (klo > khi) continue;
    flash_join(a, it, f, j, h, warp, gq, tq, s, part, mx, lsum);
  }
  return j;
}

// Dim tiles d0..d0 + N - 1 of split s's products os into the partials (part) or the running sums
// o, tiles t0..t0 + N - 1 of them.
template <int N, int NO>
__device__ __forceinline__ void flash_take(const Args& a, const Item& it, const SplitJoin& j, float (&o)[NO][4],
                                           const float (&os)[N][4], int t0, int d0, int warp, int gq, int tq, int s,
                                           bool part) {
  if (part) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (j.mode[h] == 0) continue;
      const int p = 16 * warp + gq + 8 * h;
      float* dst = a.part_acc + part_slot(a, it.r0 + p / a.hpb, it.h0 + p % a.hpb, s) * a.head_dim;
#pragma unroll
      for (int t = 0; t < N; ++t) {
        const int d = 8 * (d0 + t) + 2 * tq;
        if (d < a.head_dim) dst[d] = os[t][2 * h];
        if (d + 1 < a.head_dim) dst[d + 1] = os[t][2 * h + 1];
      }
    }
    return;
  }
  // One test a pair, not one an element.
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    if (j.mode[h] == 1) {
#pragma unroll
      for (int t = 0; t < N; ++t) o[t0 + t][2 * h] = os[t][2 * h], o[t0 + t][2 * h + 1] = os[t][2 * h + 1];
    } else if (j.mode[h] == 2) {
#pragma unroll
      for (int t = 0; t < N; ++t)
#pragma unroll
        for (int e = 2 * h; e < 2 * h + 2; ++e) o[t0 + t][e] = fold(o[t0 + t][e], j.fa[h], os[t][e], j.fb[h]);
    }
  }
}

// A whole-mode warp's output rows, dim tiles d0..d0 + NO - 1 of them: out = o / l + 0.
template <int NO>
__device__ __forceinline__ void flash_out(const Args& a, const Item& it, const FlashPairs& f, const float (&o)[NO][4],
                                          int d0, int warp, int gq, int tq) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int p = 16 * warp + gq + 8 * h;
    if (p >= it.P) continue;
    float* orow = a.out + static_cast<int64_t>(it.r0 + p / a.hpb) * a.ldq +
                  static_cast<int64_t>(it.h0 + p % a.hpb) * a.head_dim;
#pragma unroll
    for (int t = 0; t < NO; ++t) {
      const int d = 8 * (d0 + t) + 2 * tq;
      store_out2(a, orow, d, __fadd_rn(__fdiv_rn(o[t][2 * h], f.l[h]), 0.0f),
                 __fadd_rn(__fdiv_rn(o[t][2 * h + 1], f.l[h]), 0.0f));
    }
  }
}

// This lane's q values as bf16 A fragments: pairs gq and gq + 8 of the warp's m tile, dims 2tq,
// 2tq + 1 (+8) of each k16 step; pairs past P and dims past head_dim (a multiple of 4 here) are 0.
__device__ __forceinline__ void load_q16(const Args& a, const Item& it, int warp, int gq, int tq,
                                         uint32_t (&qa)[kChunk / 16][4]) {
  const int hd = a.head_dim;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int p = 16 * warp + gq + 8 * h;
    const float* qr = a.q + static_cast<int64_t>(it.r0 + (p < it.P ? p / a.hpb : 0)) * a.ldq +
                      static_cast<int64_t>(it.h0 + (p < it.P ? p % a.hpb : 0)) * hd;
#pragma unroll
    for (int k = 0; k < kChunk / 16; ++k)
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        const int d = 16 * k + 8 * u + 2 * tq;
        float2 x = make_float2(0.0f, 0.0f);
        if (p < it.P && d < hd) x = *reinterpret_cast<const float2*>(qr + d);
        qa[k][2 * u + h] = pack_bf16(product_input<false>(x.x), product_input<false>(x.y));
      }
  }
}

// What both bf16 flash kernels do before their first stages: the first two splits' slots, the
// warp's pairs, q's A fragments and zeroed running sums.
__device__ __forceinline__ void start_bf16(const Args& a, const Item& it, int64_t* kslot, int warp, int gq, int tq,
                                           FlashPairs& f, uint32_t (&qa)[kChunk / 16][4], float (&o)[16][4]) {
  fill_slots<kThreads>(kslot, a, it, it.s0);
  if (it.s0 < it.s1) fill_slots<kThreads>(kslot + kSplit, a, it, it.s0 + 1);
  f = flash_pairs(a, it, warp, gq);
  load_q16(a, it, warp, gq, tq, qa);
#pragma unroll
  for (int j = 0; j < 16; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
}

// The wgmma forms (cuda_attention_flash_wg.cu): launches bf16-mode blocks on sm_90a where they
// run (head dims a multiple of 8, TF_CUDA_FLASH_WG not 0) and says whether it did.
bool launch_flash_wg(const Args& a, unsigned n_items, unsigned yblocks);

}  // namespace tf::cuda::attn
