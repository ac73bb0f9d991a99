#pragma once
// How the flash and decode attention kernels (cuda_attention_flash.cu, cuda_attention_flash_wg.cu,
// cuda_attention_decode.cu) find a block's keys, stage its K and V tiles by cp.async, and are
// launched.
#include <atomic>
#include <cstdint>

#include "backend/cuda/cuda_attention.cuh"

namespace tf::cuda::attn {

// A block's item: group g's rows times hpb heads of kv head blockIdx.y / (group / hpb), over
// splits s0..s1 (c < 0: every split of the group; c >= 0: splits c * chunk.., at most chunk).
struct Item {
  int r0, P, h0, s0, s1;
  int32_t lo, hi;  // the group's first key and last position
  const int32_t* pt;
  int64_t head_off;
};

__device__ __forceinline__ Item item_of(const Args& a, int g, int c) {
  Item it;
  it.r0 = a.grp[g];
  const int nrows = a.grp[g + 1] - it.r0, hblocks = a.group / a.hpb, kvh = blockIdx.y / hblocks;
  it.h0 = kvh * a.group + (blockIdx.y % hblocks) * a.hpb;
  it.P = nrows * a.hpb;
  it.lo = a.row_first[it.r0], it.hi = a.row_pos[it.r0 + nrows - 1];
  it.s0 = it.lo / kSplit + (c >= 0 ? c * a.chunk : 0);
  it.s1 = c >= 0 ? min(it.hi / kSplit, it.s0 + a.chunk - 1) : it.hi / kSplit;
  it.pt = a.pages + a.row_pages[it.r0];
  it.head_off = static_cast<int64_t>(kvh) * a.head_dim;
  return it;
}

// Pool offsets of split s's keys into slot (-1: outside lo..hi), by T threads.
template <int T>
__device__ __forceinline__ void fill_slots(int64_t* slot, const Args& a, const Item& it, int s) {
  fill_slots<T>(slot, a, it.pt, it.lo, it.hi, it.head_off, s);
}

// Walks the copies that stage keys jlo..jhi - 1 of a split, rows [key][0..hd_pad) of stride ld,
// from the pool offsets in slot: copy(to, at, ok, wide) gets a copy's place in the tile, its pool
// offset and whether it reads (else zeros: masked keys, dims past head_dim); a copy is `per`
// values, 16 bytes (wide), or 8 for bf16 rows of a head dim not a multiple of 8 (not 16-byte
// aligned). A thread copies one column of every (T / units)-th key, so the loop has no division.
// offset_of(key): the key's pool offset, -1 when masked.
template <int T, class E, class O, class F>
__device__ __forceinline__ void stage_keys_by(int ld, O offset_of, int hd, int hdp, int jlo, int jhi, F copy) {
  constexpr bool kWide = sizeof(E) == 4;
  const int per = kWide || hd % 8 != 0 ? 4 : 8, units = hdp / per;
  const int kstep = T / units, d0 = per * (static_cast<int>(threadIdx.x) % units);
  const int key0 = static_cast<int>(threadIdx.x) < kstep * units ? static_cast<int>(threadIdx.x) / units : kSplit;
  for (int key = key0 + (jlo > key0 ? (jlo - key0 + kstep - 1) / kstep * kstep : 0); key < jhi; key += kstep) {
    const int64_t off = offset_of(key);
    const bool ok = off >= 0 && d0 < hd;
    copy(key * ld + d0, ok ? off + d0 : int64_t{0}, ok, kWide || per == 8);
  }
}
template <int T, class E, class F>
__device__ __forceinline__ void stage_keys(int ld, const int64_t* slot, int hd, int hdp, int jlo, int jhi, F copy) {
  stage_keys_by<T, E>(ld, [slot](int key) { return slot[key]; }, hd, hdp, jlo, jhi, copy);
}

// One copy of stage_keys by cp.async, with no commit.
template <class E>
__device__ __forceinline__ void stage_copy(E* dst, const E* src, bool ok, bool wide) {
  if (wide) cp_async16(dst, src, ok);
  else cp_async8(dst, src, ok);
}

// Stages every row of a split into dst by cp.async (stage_keys), with no commit.
template <int T, class E>
__device__ __forceinline__ void stage_rows(E* dst, int ld, const E* src, const int64_t* slot, int hd, int hdp) {
  stage_keys<T, E>(ld, slot, hd, hdp, 0, kSplit,
                   [&](int to, int64_t at, bool ok, bool wide) { stage_copy(dst + to, src + at, ok, wide); });
}

// K and V rows of keys jlo..jhi - 1 at once: one slot load and one address a pair of copies.
template <int T, class E>
__device__ __forceinline__ void stage_rows_kv(E* kdst, E* vdst, int ld, const E* ksrc, const E* vsrc, const int64_t* slot,
                                              int hd, int hdp, int jlo, int jhi) {
  stage_keys<T, E>(ld, slot, hd, hdp, jlo, jhi, [&](int to, int64_t at, bool ok, bool wide) {
    stage_copy(kdst + to, ksrc + at, ok, wide);
    stage_copy(vdst + to, vsrc + at, ok, wide);
  });
}

// Every row of the split, then the commit.
template <int T, class E>
__device__ __forceinline__ void stage_tile(E* dst, int ld, const E* src, const int64_t* slot, int hd, int hdp) {
  stage_rows<T>(dst, ld, src, slot, hd, hdp);
  cp_async_commit();
}

// V columns past hd_pad are never staged, but dim tiles past it may read them: zeros, by T threads.
template <int T, class E>
__device__ __forceinline__ void zero_v_tail(E* vs, int ld, int hdp) {
  for (int e = threadIdx.x; e < kSplit * (kChunk - hdp); e += T)
    vs[(e / (kChunk - hdp)) * ld + hdp + e % (kChunk - hdp)] = E(0);
}

// Launches kernel over n_items x yblocks blocks of `threads`, raising its shared-memory limit to
// smem on its first launch (ready: the kernel's own flag); it overlaps the kernel before only
// when asked.
inline void launch_attention_kernel(void (*kernel)(Args), std::atomic<bool>& ready, int threads, size_t smem,
                                    const Args& a, unsigned n_items, unsigned yblocks, bool overlap = false) {
  if (!ready.load()) {
    TF_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)),
                  "attention: shared memory of ", smem, " bytes");
    ready.store(true);
  }
  launch_on_stream(overlap, 1, kernel, dim3(n_items, yblocks), threads, smem, a);
}

}  // namespace tf::cuda::attn
