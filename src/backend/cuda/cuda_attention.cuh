// What the two attention kernels share: their arguments and the arithmetic of the order rule
// written at the top of cuda_attention.cu, so that a split computed by either gives the same bits.
#pragma once

#include <cstdint>
#include <type_traits>

#include "backend/cuda/attention_plan.h"
#include "backend/cuda/cuda_util.cuh"

namespace tf::cuda::attn {

constexpr int kKs = kChunk + 4;  // K and V row stride, 4 mod 32: B fragments hit 32 banks
constexpr int kKs16 = kChunk + 8;  // bf16 K and V rows: 4 mod 32 words, 16-byte aligned

// The pool's values: f32 in f32 mode (kLo), bf16 bits in bf16 mode (stored rounded, as the
// products take them).
template <bool kLo>
using Kv = std::conditional_t<kLo, float, uint16_t>;

struct Args {
  const float* q;
  float* out;
  const void* k;  // layer base, [pages][page_size][kv_width] of Kv<lo>
  const void* v;
  const int32_t* row_pos;
  const int32_t* row_first;
  const int32_t* row_pages;  // offset of each row's page list in pages
  const int32_t* part_off;   // split-mode rows: partial slot of the row's first split
  const int32_t* grp;        // [groups + 1] first row of each group
  const int32_t* items;      // per block x: group, split (-1: every split, whole mode)
  const int32_t* pages;
  const int32_t* row_fresh;  // per row: the first position this call's rows of its sequence write
  float* part_ml;   // [slot][head] (m, l)
  float* part_acc;  // [slot][head][head_dim]
  int page_size, kv_width, n_heads, group, head_dim;
  int hd_pad;    // head_dim rounded up to 8 (f32 mode) or 16 (bf16 mode: k16 product steps)
  int q_stride;  // staged q row stride: 4 mod 32
  int hpb;       // heads per block (a divisor of group)
  int64_t ldq;
  float scale, softcap;
  int chunk;  // flash blocks of split-mode groups: consecutive splits a block walks
  bool lo;    // products in 3xTF32 (f32 inputs whole); false: inputs rounded to bf16, one product
  uint16_t* out_hi = nullptr;  // out's bf16 plane as well, in out's layout (null: none)
};

// The rule's exp: 2^(x log2 e) by one multiply and the special-function unit, far cheaper than
// expf; every form calls it, so a row's bits still never depend on the form or the batch.
__device__ __forceinline__ float attn_exp(float x) { return exp_sfu(x); }

// Output dims d and d + 1 of the row at orow (those past head_dim dropped), and their bf16 bits in
// the plane where the launch leaves one.
__device__ __forceinline__ void store_out2(const Args& a, float* orow, int d, float v0, float v1) {
  if (d < a.head_dim) orow[d] = v0;
  if (d + 1 < a.head_dim) orow[d + 1] = v1;
  if (!a.out_hi) return;
  uint16_t* hrow = a.out_hi + (orow - a.out);
  if (d + 1 < a.head_dim && (a.head_dim & 1) == 0)
    *reinterpret_cast<uint32_t*>(hrow + d) = pack2(bf16_bits(v0), bf16_bits(v1));
  else if (d < a.head_dim)
    hrow[d] = bf16_bits(v0);
}

// The fold of one split into the running state; the merge kernel runs the same operations.
__device__ __forceinline__ float fold(float acc, float a, float acc_s, float b) {
  return __fadd_rn(__fmul_rn(acc, a), __fmul_rn(acc_s, b));
}

// x as the products take it: rounded to bf16 (nearest even) when kLo is false
// (--matmul-input bf16), else whole.
template <bool kLo>
__device__ __forceinline__ float product_input(float x) {
  if constexpr (kLo) return x;
  return __bfloat162float(__float2bfloat16_rn(x));
}

// big is x cut to tf32 (top 10 mantissa bits kept), small the exact remainder x - big cut the
// same way: masks instead of cvt, which runs on a slower pipe. kLo false: x was staged through
// product_input (bf16, exact in tf32), so big is x and there is no small.
template <bool kLo>
__device__ __forceinline__ void split_tf32(float x, uint32_t& big, uint32_t& small) {
  if constexpr (kLo) {
    big = __float_as_uint(x) & 0xffffe000u;
    small = __float_as_uint(__fsub_rn(x, __uint_as_float(big))) & 0xffffe000u;
  } else {
    big = __float_as_uint(x);
    small = 0;
  }
}

// Not volatile: the compiler may interleave independent accumulators' chains.
__device__ __forceinline__ void mma_tf32(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// bf16 mode's product step: m16n8k16 on bf16 operands, f32 accumulate. Not volatile, as above.
__device__ __forceinline__ void mma_k16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats that hold bf16 values (staged through product_input, or widened from the pool) as
// one mma operand word, lo in the low half: their top halves, exactly.
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  return __byte_perm(__float_as_uint(lo), __float_as_uint(hi), 0x7632);
}

// Four 8x8 bf16 matrices from shared memory (lane 8i + r gives row r of matrix i); trans: each
// lane takes a column pair instead of a row pair (B fragments of row-major [k][n] tiles).
__device__ __forceinline__ void ldsm4(uint32_t (&r)[4], const uint16_t* p) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s));
}
__device__ __forceinline__ void ldsm4_t(uint32_t (&r)[4], const uint16_t* p) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s));
}

// bf16 mode's A fragment (16 x 16, row major) from f32 rows at src (stride ld) holding bf16
// values: rows g, g + 8 at columns 2t, 2t + 1, then 2t + 8, 2t + 9.
__device__ __forceinline__ void load_a16(const float* src, int ld, int lane, uint32_t (&a)[4]) {
  const float* p = src + (lane >> 2) * ld + 2 * (lane & 3);
  const float2 x0 = *reinterpret_cast<const float2*>(p), x1 = *reinterpret_cast<const float2*>(p + 8 * ld);
  const float2 x2 = *reinterpret_cast<const float2*>(p + 8), x3 = *reinterpret_cast<const float2*>(p + 8 * ld + 8);
  a[0] = pack_bf16(x0.x, x0.y), a[1] = pack_bf16(x1.x, x1.y);
  a[2] = pack_bf16(x2.x, x2.y), a[3] = pack_bf16(x3.x, x3.y);
}

template <class T>
struct BigSmall {
  const T& big;
  const T& small;
};
using AFrag = uint32_t[4];
using BFrag = uint32_t[2];

// One k8 step of the rule's product for N accumulators: small*big, big*small, then big*big,
// issued term by term so that no mma waits on the one before (kLo false: big*big alone). a(i)
// and b(i) give accumulator i's operands as BigSmall pairs of fragments.
template <bool kLo, int N, class FA, class FB>
__device__ __forceinline__ void mma3_each(float (&d)[N][4], FA a, FB b) {
  if constexpr (kLo) {
#pragma unroll
    for (int i = 0; i < N; ++i) mma_tf32(d[i], a(i).small, b(i).big);
#pragma unroll
    for (int i = 0; i < N; ++i) mma_tf32(d[i], a(i).big, b(i).small);
  }
#pragma unroll
  for (int i = 0; i < N; ++i) mma_tf32(d[i], a(i).big, b(i).big);
}

// The step for one accumulator.
template <bool kLo>
__device__ __forceinline__ void mma3(float (&d)[4], const AFrag& ab, const AFrag& as, const BFrag& bb,
                                     const BFrag& bs) {
  mma3_each<kLo, 1>(reinterpret_cast<float(&)[1][4]>(d), [&](int) { return BigSmall<AFrag>{ab, as}; },
                    [&](int) { return BigSmall<BFrag>{bb, bs}; });
}

// The step for N accumulators sharing A.
template <bool kLo, int N>
__device__ __forceinline__ void mma3_shared_a(float (&d)[N][4], const AFrag& ab, const AFrag& as,
                                              const BFrag (&bb)[N], const BFrag (&bs)[N]) {
  mma3_each<kLo, N>(d, [&](int) { return BigSmall<AFrag>{ab, as}; },
                    [&](int i) { return BigSmall<BFrag>{bb[i], bs[i]}; });
}

// The step for N accumulators sharing B.
template <bool kLo, int N>
__device__ __forceinline__ void mma3_shared_b(float (&d)[N][4], const AFrag (&ab)[N],
                                              const AFrag (&as)[N], const BFrag& bb, const BFrag& bs) {
  mma3_each<kLo, N>(d, [&](int i) { return BigSmall<AFrag>{ab[i], as[i]}; },
                    [&](int) { return BigSmall<BFrag>{bb, bs}; });
}

// Splits the four A values of a fragment (rows g, g + 8 at slots t, t + 4) into big and small.
template <bool kLo>
__device__ __forceinline__ void split_a(float x0, float x1, float x2, float x3, uint32_t (&ab)[4],
                                        uint32_t (&as)[4]) {
  split_tf32<kLo>(x0, ab[0], as[0]);
  split_tf32<kLo>(x1, ab[1], as[1]);
  split_tf32<kLo>(x2, ab[2], as[2]);
  split_tf32<kLo>(x3, ab[3], as[3]);
}

// A fragment (16 x 8, row major) at src with row stride ld, split into big and small.
template <bool kLo>
__device__ __forceinline__ void load_a(const float* src, int ld, int lane, uint32_t (&ab)[4],
                                       uint32_t (&as)[4]) {
  const float* p = src + (lane >> 2) * ld + (lane & 3);
  split_tf32<kLo>(p[0], ab[0], as[0]);
  split_tf32<kLo>(p[8 * ld], ab[1], as[1]);
  split_tf32<kLo>(p[4], ab[2], as[2]);
  split_tf32<kLo>(p[8 * ld + 4], ab[3], as[3]);
}

// Stages a block's q rows into qs (row stride ld, a multiple of 4): pair p is row r0 + p / hpb,
// head h0 + p % hpb; dims past head_dim and pairs past P stage as 0. T: the block's threads, at
// least hd_pad / 4. A thread takes four dims of every few pairs, so only the pair needs a division.
template <int T, bool kLo>
__device__ __forceinline__ void stage_q(float* qs, int ld, const Args& a, int r0, int h0, int P, int pairs) {
  const int hd = a.head_dim, units = a.hd_pad / 4, pstep = T / units, d = 4 * (threadIdx.x % units);
  const int p0 = static_cast<int>(threadIdx.x) < pstep * units ? static_cast<int>(threadIdx.x) / units : pairs;
  for (int p = p0; p < pairs; p += pstep) {
    float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (p < P && d < hd) {
      const float* src =
          a.q + static_cast<int64_t>(r0 + p / a.hpb) * a.ldq + static_cast<int64_t>(h0 + p % a.hpb) * hd + d;
      if (d + 4 <= hd && (reinterpret_cast<uintptr_t>(src) & 15u) == 0) {
        x = *reinterpret_cast<const float4*>(src);
      } else {
        x.x = src[0];
        x.y = d + 1 < hd ? src[1] : 0.0f;
        x.z = d + 2 < hd ? src[2] : 0.0f;
        x.w = d + 3 < hd ? src[3] : 0.0f;
      }
    }
    *reinterpret_cast<float4*>(qs + p * ld + d) =
        make_float4(product_input<kLo>(x.x), product_input<kLo>(x.y), product_input<kLo>(x.z), product_input<kLo>(x.w));
  }
}

// Key pk's row of the pool, on page `page`: page x page_size + its place in the page.
__device__ __forceinline__ int64_t pool_row(const Args& a, int32_t page, int32_t pk) {
  return static_cast<int64_t>(page) * a.page_size + pk % a.page_size;
}

// Pool offsets (the kv head's column included) of keys s * kSplit.. into slot, -1 outside lo..hi
// (keys of the sequence whose page list is pt), by T threads: one division a key, not an element.
template <int T>
__device__ __forceinline__ void fill_slots(int64_t* slot, const Args& a, const int32_t* pt, int32_t lo, int32_t hi,
                                           int64_t head_off, int s) {
  for (int j = threadIdx.x; j < kSplit; j += T) {
    const int32_t pk = s * kSplit + j;
    slot[j] = pk >= lo && pk <= hi ? pool_row(a, pt[pk / a.page_size], pk) * a.kv_width + head_off : -1;
  }
}

// Whether a pair's keys klo..khi (split-relative) cover its whole split: every split but a row's
// first and last.
__device__ __forceinline__ bool whole_split(int klo, int khi) { return klo <= 0 && khi >= kSplit - 1; }

// The first half of the split softmax over NT of a split's key tiles, the first at key0: the
// scores scaled (and softcapped), keys outside [klo, khi] (split-relative) masked to -inf unless
// whole, and the max over the quad's keys (-inf when none is in range). Max is exact, so its
// order, and so how the tiles are shared out, never changes the bits.
template <int NT>
__device__ __forceinline__ float split_max(float (&x)[NT][2], int key0, int t, int klo, int khi, float scale,
                                           float softcap, bool whole) {
  // Every key takes the same operations and the mask picks after, so no key's path branches.
  if (softcap > 0.0f) {
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
      for (int e = 0; e < 2; ++e) x[n][e] = __fmul_rn(softcap, tanhf(__fdiv_rn(__fmul_rn(x[n][e], scale), softcap)));
  } else {
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
      for (int e = 0; e < 2; ++e) x[n][e] = __fmul_rn(x[n][e], scale);
  }
  float mx = -INFINITY;
  if (whole) {
#pragma unroll
    for (int n = 0; n < NT; ++n) mx = fmaxf(mx, fmaxf(x[n][0], x[n][1]));
  } else {
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int key = key0 + 8 * n + 2 * t + e;
        x[n][e] = key >= klo && key <= khi ? x[n][e] : -INFINITY;
        mx = fmaxf(mx, x[n][e]);
      }
  }
  mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
  return fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
}

// The second half, given the split's max mx: x becomes the weights (0 where masked; rounded to
// bf16 as the PV product takes them unless kLo) and pair[n] the sum of tile n's two. kPack: pw[n]
// also gets x[n][0], x[n][1] as one bf16 pair word (low half first), and a whole split whose max
// is finite rounds and packs each pair in one conversion, with no -inf test: there exp(-inf - mx)
// is the 0 the test would give.
template <bool kLo, bool kPack, int NT>
__device__ __forceinline__ void split_exp(float (&x)[NT][2], float mx, bool whole, float (&pair)[NT], uint32_t* pw) {
  if (kPack && !kLo && whole && mx != -INFINITY) {
#pragma unroll
    for (int n = 0; n < NT; ++n) {
      const __nv_bfloat162 w2 = __floats2bfloat162_rn(attn_exp(__fsub_rn(x[n][0], mx)), attn_exp(__fsub_rn(x[n][1], mx)));
      const uint32_t w = *reinterpret_cast<const uint32_t*>(&w2);
      pw[n] = w;
      x[n][0] = __uint_as_float(w << 16), x[n][1] = __uint_as_float(w & 0xffff0000u);
      pair[n] = __fadd_rn(x[n][0], x[n][1]);
    }
  } else {
#pragma unroll
    for (int n = 0; n < NT; ++n) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float p = product_input<kLo>(attn_exp(__fsub_rn(x[n][e], mx)));
        x[n][e] = x[n][e] == -INFINITY ? 0.0f : p;
      }
      if (kPack) pw[n] = pack_bf16(x[n][0], x[n][1]);
      pair[n] = __fadd_rn(x[n][0], x[n][1]);
    }
  }
}

// The rule's running sum of a lane's pair sums in key order, from `from` (the running sum of the
// tiles before it, when another warp holds them).
template <int NT>
__device__ __forceinline__ float split_chain(const float (&pair)[NT], const float* from = nullptr) {
  float sum = from ? __fadd_rn(*from, pair[0]) : pair[0];
#pragma unroll
  for (int n = 1; n < NT; ++n) sum = __fadd_rn(sum, pair[n]);
  return sum;
}

// A lane's whole running sum, then the quad's: the split's exp-sum.
__device__ __forceinline__ float quad_sum(float sum) {
  sum = __fadd_rn(sum, __shfl_xor_sync(0xffffffffu, sum, 1));
  return __fadd_rn(sum, __shfl_xor_sync(0xffffffffu, sum, 2));
}

// The split softmax of one (row, head) whose 64 scores sit four lanes to a quad: lane t holds
// keys 8n + 2t + e as x[n][e]. Keys outside [klo, khi] (split-relative) are masked. Returns the
// split's max (-inf when no key is in range) and exp-sum; x becomes the weights (0 where masked).
// kLo false: each weight is rounded to bf16 as the PV product takes it, and the sum adds those.
// kSkip: a split with every key in range skips the mask, for the same bits (the wgmma flash
// kernels' choice; the other kernels were not timed with it). kPack as split_exp's.
template <bool kLo, bool kSkip = false, bool kPack = false>
__device__ __forceinline__ void split_softmax(float (&x)[8][2], int t, int klo, int khi, float scale,
                                              float softcap, float& mx, float& lsum, uint32_t* pw = nullptr) {
  const bool whole = kSkip && whole_split(klo, khi);
  mx = split_max(x, 0, t, klo, khi, scale, softcap, whole);
  float pair[8];
  split_exp<kLo, kPack>(x, mx, whole, pair, pw);
  lsum = quad_sum(split_chain(pair));
}

// Partial slot of (row, head) for absolute split s.
__device__ __forceinline__ int64_t part_slot(const Args& a, int row, int head, int s) {
  return (static_cast<int64_t>(a.part_off[row]) + s - a.row_first[row] / kSplit) * a.n_heads + head;
}

// Whole-mode blocks of up to 64 pairs with head_dim a multiple of 4, at most kChunk: each warp
// keeps its 16 pairs' state in registers (cuda_attention_flash.cu, its wgmma forms in
// cuda_attention_flash_wg.cu).
constexpr bool flash_takes(int head_dim) { return head_dim % 4 == 0 && head_dim <= kChunk; }
void launch_flash(const Args& a, unsigned n_items, unsigned yblocks);

// The warp-specialized wgmma form (bf16 mode on sm_90a, head dims a multiple of 8, where
// flash_ws_worth says so under flash_ws_mode): a block takes items (g, g2) of items[2b],
// items[2b + 1], two whole groups of one sequence with contiguous keys, g2 -1 for none
// (pair_flash_items makes the list).
int flash_ws_mode();
bool flash_ws_takes(int head_dim);
void launch_flash_ws(const Args& a, unsigned n_blocks, unsigned yblocks);
// bf16 mode on sm_90a, head dims past kChunk up to twice it (a multiple of 8): the two-warpgroup
// wgmma form staging 256 dims takes whole groups of more than 16 pairs (cuda_attention_flash_wg.cu).
bool flash_wide_takes(int head_dim);
void launch_flash_wide(const Args& a, unsigned n_items, unsigned yblocks);
// Items of at most 16 pairs (decode_first puts them first; cuda_attention_decode.cu): split-mode
// ones, and in bf16 mode whole groups too. overlap: the kernel before wrote only this call's keys;
// narrow: bf16 mode's four-warp form (decode_narrow).
void launch_flash_decode(const Args& a, unsigned n_items, unsigned yblocks, bool overlap, bool narrow);

}  // namespace tf::cuda::attn
