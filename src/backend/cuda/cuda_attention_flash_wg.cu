// bf16-mode flash attention on sm_90a: the flash kernel's products as warpgroup mma (wgmma) from
// swizzled tiles, one warpgroup a block or two sharing a block's pairs; every float operation is
// flash_bf16_kernel's (cuda_attention_flash.cu), so the bits are the same.
#include <atomic>
#include <type_traits>

#include "backend/cuda/cuda_attention_flash.cuh"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_hopper.cuh"
#include "backend/cuda/cuda_matmul.cuh"

namespace tf::cuda::attn {

namespace {

// The wgmma flash kernels' K and V tiles: 64 keys of kChunk dims, in two 64-dim swizzled panels
// (unused where a pass has no sm_90a kernel bodies).
[[maybe_unused]] constexpr int kTile = kChunk * kSplit;        // elements of a K or V tile
[[maybe_unused]] constexpr int kPanel = kSplit * mm::kSwzRow;  // elements of 64 of its dims

// Stage b of a wgmma flash kernel's tiles ([2 stages][K, V][D / 64 panels][kSplit][64], swizzled)
// gets the keys whose pool offsets are in slot b, by T threads: each copies 16-byte unit u of every
// (T / units)-th key, of K and of V, then commits. Keys kstep apart share a swizzle phase, so one
// place and its multiples of a row serve every copy.
template <int T, int D = kChunk>
__device__ __forceinline__ void stage_wg(uint16_t* tiles, const int64_t* kslot, int b, const Args& a, int hd) {
  using mm::kSwzRow;
  constexpr int units = D / 8, kstep = T / units, tile = D * kSplit;
  static_assert(kstep % 8 == 0, "keys a thread copies share the swizzle phase");
  const int u = static_cast<int>(threadIdx.x) % units, key0 = static_cast<int>(threadIdx.x) / units, d0 = 8 * u;
  const uint32_t kt = static_cast<uint32_t>(__cvta_generic_to_shared(tiles)) +
                      2 * (2 * b * tile + u / 8 * kSplit * kSwzRow + mm::swz_at(key0, 8 * (u % 8)));
  const int64_t* sl = kslot + b * kSplit + key0;
  const auto* kpool = static_cast<const uint16_t*>(a.k);
  const auto* vpool = static_cast<const uint16_t*>(a.v);
#pragma unroll
  for (int i = 0; i < kSplit / kstep; ++i) {
    const int64_t off = sl[i * kstep];
    const bool ok = off >= 0 && d0 < hd;
    const uint32_t at = kt + 2 * i * kstep * kSwzRow;
    cp_async16_at(at, kpool + (ok ? off + d0 : 0), ok);
    cp_async16_at(at + 2 * tile, vpool + (ok ? off + d0 : 0), ok);
  }
  cp_async_commit();
}

// The one-warpgroup form's split scores: q's A fragments qa from registers times the K tile kt,
// steps k16 steps (the first writes them), committed as one group with no wait.
__device__ __forceinline__ void wg_issue_scores(float (&sc)[8][4], const uint32_t (&qa)[kChunk / 16][4],
                                                const uint16_t* kt, int steps) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  auto scores = [&](auto whole_dims) {
    wgmma_rs64<0, false>(reinterpret_cast<float(&)[32]>(sc), qa[0], mm::swz_desc(kt));
#pragma unroll
    for (int k = 1; k < kChunk / 16; ++k) {
      if (!decltype(whole_dims)::value && k >= steps) break;
      wgmma_rs64<0>(reinterpret_cast<float(&)[32]>(sc), qa[k], mm::swz_desc(kt + k / 4 * kPanel + 16 * (k % 4)));
    }
  };
  // A full head dim runs its steps with no test between the products.
  wgmma_fence();
  if (steps == kChunk / 16) scores(std::true_type{});
  else scores(std::false_type{});
  wgmma_commit();
#endif
}

// Shared memory of a wgmma flash form's two stages of D-dim K and V tiles, their slots and the
// tiles' 1024-byte alignment.
template <int D>
constexpr size_t wg_tiles_smem() {
  return 4 * static_cast<size_t>(D) * kSplit * sizeof(uint16_t) + 2 * kSplit * sizeof(int64_t) + 1024;
}

// Its V products for dims 64h..64h + 63: the weights' A fragments pa times the V tile vt read
// N-major (key step j of panel h starts 16 j rows into it), committed as one group.
__device__ __forceinline__ void wg_issue_pv(float (&os)[8][4], const uint32_t (&pa)[4][4], const uint16_t* vt, int h) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  wgmma_fence();
  wgmma_rs64<1, false>(reinterpret_cast<float(&)[32]>(os), pa[0], mm::swz_desc(vt + h * kPanel));
#pragma unroll
  for (int j = 1; j < 4; ++j)
    wgmma_rs64<1>(reinterpret_cast<float(&)[32]>(os), pa[j], mm::swz_desc(vt + h * kPanel + 16 * j * mm::kSwzRow));
  wgmma_commit();
#endif
}

// bf16 mode on sm_90a for head dims a multiple of 8: the four warps are one warpgroup, and each
// split's products are wgmma m64n64k16, A (q, then the weights) from registers as
// flash_bf16_kernel holds them, B (K, then V read N-major) from 128-byte-swizzled tiles. A wgmma
// element is the k16 step of mma.m16n8k16 in the same fragment layout, so the steps, weights and
// folds, and the bits, are flash_bf16_kernel's. Two blocks an SM, so no register spills. Every
// head dim stages 128 dims (zeros past head_dim): a 64-dim form failed the contract on blocks of
// more than one split, so it is not built.
constexpr size_t kFlashWgSmem = wg_tiles_smem<kChunk>();

__global__ void __launch_bounds__(kThreads, 2) flash_wg_kernel(Args a) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  grid_wait();
  grid_launch_next();
  using mm::kSwzRow;
  extern __shared__ __align__(16) uint16_t smem_raw[];
  // Swizzled tiles need 1024-byte alignment; the launch adds 1 KiB for it.
  const uint32_t raw = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  uint16_t* tiles = smem_raw + (1024 - raw % 1024) % 1024 / 2;  // [2 stages][K, V][2 panels][kSplit][64]
  auto* kslot = reinterpret_cast<int64_t*>(tiles + 4 * kTile);   // [2][kSplit]
  const int g = a.items[2 * blockIdx.x], c = a.items[2 * blockIdx.x + 1];
  const bool part = c >= 0;
  const Item it = item_of(a, g, c);
  const int s0 = it.s0, s1 = it.s1;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int gq = lane >> 2, tq = lane & 3, hd = a.head_dim, steps = a.hd_pad / 16;
  auto stage = [&](int b) { stage_wg<kThreads>(tiles, kslot, b, a, hd); };
  FlashPairs f;
  uint32_t qa[kChunk / 16][4];
  float o[16][4];
  start_bf16(a, it, kslot, warp, gq, tq, f, qa, o);
  __syncthreads();
  stage(0);
  if (s0 < s1) stage(1);
  for (int s = s0; s <= s1; ++s) {
    const int b = (s - s0) & 1;
    const uint16_t* kt = tiles + 2 * b * kTile;
    const uint16_t* vt = kt + kTile;
    if (s < s1) cp_async_wait<1>();
    else cp_async_wait<0>();
    fence_proxy_async();  // cp.async data to wgmma
    __syncthreads();
    if (s + 2 <= s1) fill_slots<kThreads>(kslot + b * kSplit, a, it, s + 2);
    // Every warp takes part in the warpgroup's products; a warp past P holds only masked pairs.
    float sc[8][4];
    wg_issue_scores(sc, qa, kt, steps);
    wgmma_wait<0>();
    uint32_t pa[4][4];
    const SplitJoin jn = flash_softmax<false, true, true>(a, it, f, sc, warp, gq, tq, s, part, pa);
#pragma unroll
    for (int h = 0; h < kChunk / 64; ++h) {
      float os[8][4];
      wg_issue_pv(os, pa, vt, h);
      wgmma_wait<0>();
      flash_take<8>(a, it, jn, o, os, 8 * h, 8 * h, warp, gq, tq, s, part);
    }
    __syncthreads();
    if (s + 2 <= s1) stage(b);
  }
  if (!part) flash_out(a, it, f, o, 0, warp, gq, tq);
#else
  __trap();  // launched only where wgmma_ready() found the sm_90a code
#endif
}

// bf16 mode on sm_90a, two warpgroups a block over the same 64 pairs, so an SM holds twice the
// warps of flash_wg_kernel at half the registers: warpgroup w takes keys 32w.. of each split's
// scores (m64n32k16, q and K from swizzled tiles) and dims D/2 w.. of its V products (m64n64k16 a
// panel, the weights from registers). The split's max and the rule's running sum in key order pass
// through shared memory (warpgroup 0's sum over keys 0..31 is where warpgroup 1's starts), and so
// do the weights' A fragments; every float operation is flash_wg_kernel's, so the bits are the
// same. D: dims staged, 128, or 256 for head dims past 128 (the tile kernel's two chunks of
// k16 steps in the same order, so its bits), one block an SM for its shared memory.
constexpr int kWg2Threads = 256;
constexpr int kXch = 128;  // exchange slots: one a thread of a warpgroup
template <int D>
constexpr size_t wg2_smem() {
  return wg_tiles_smem<D>() + static_cast<size_t>(D) * kFlashPairs * sizeof(uint16_t) +
         (2 * 8 + 2 * 2 + 2) * kXch * sizeof(uint32_t);  // q, then xp, xm and xs
}

// q's pairs as one swizzled K-major tile of D dims (D / 64 panels), rounded as load_q16 rounds;
// pairs past P and dims past head_dim (a multiple of 8 here) are 0. By T threads.
template <int T, int D>
__device__ __forceinline__ void stage_q16(uint16_t* qt, const Args& a, const Item& it) {
  using mm::kSwzRow;
  constexpr int units = D / 8;
  for (int i = threadIdx.x; i < kFlashPairs * units; i += T) {
    const int p = i / units, u = i % units, d = 8 * u;
    uint32_t w[4] = {0u, 0u, 0u, 0u};
    if (p < it.P && d < a.head_dim) {
      const float* qr = a.q + static_cast<int64_t>(it.r0 + p / a.hpb) * a.ldq +
                        static_cast<int64_t>(it.h0 + p % a.hpb) * a.head_dim + d;
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float2 x = *reinterpret_cast<const float2*>(qr + 2 * e);
        w[e] = pack_bf16(product_input<false>(x.x), product_input<false>(x.y));
      }
    }
    *reinterpret_cast<uint4*>(qt + u / 8 * kFlashPairs * kSwzRow + mm::swz_at(p, 8 * (u % 8))) =
        make_uint4(w[0], w[1], w[2], w[3]);
  }
}

template <int D>
__global__ void __launch_bounds__(kWg2Threads, D == kChunk ? 2 : 1) flash_wg2_kernel(Args a) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  grid_wait();
  grid_launch_next();
  using mm::kSwzRow;
  static_assert(kFlashPairs == kSplit, "q's panels are the size of K's");
  static_assert(D == kChunk || D == 2 * kChunk, "one or two chunks of dims");
  constexpr int tile = D * kSplit, own = D / 128;  // elements of a K, V or q tile; V panels a warpgroup takes
  extern __shared__ __align__(16) uint16_t smem_raw[];
  const uint32_t raw = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  uint16_t* tiles = smem_raw + (1024 - raw % 1024) % 1024 / 2;  // [2 stages][K, V][D / 64 panels][kSplit][64]
  uint16_t* qt = tiles + 4 * tile;                              // [D / 64 panels][64 pairs][64]
  auto* xp = reinterpret_cast<uint32_t*>(qt + tile);            // [warpgroup][8 words][kXch]
  auto* xm = reinterpret_cast<float*>(xp + 2 * 8 * kXch);       // [warpgroup][pair h][kXch]
  float* xs = xm + 2 * 2 * kXch;                                // [pair h][kXch]
  auto* kslot = reinterpret_cast<int64_t*>(xs + 2 * kXch);      // [2][kSplit]
  const int g = a.items[2 * blockIdx.x], c = a.items[2 * blockIdx.x + 1];
  const bool part = c >= 0;
  const Item it = item_of(a, g, c);
  const int s0 = it.s0, s1 = it.s1;
  const int wg = threadIdx.x / 128, t = threadIdx.x % 128, warp = t / 32, lane = t % 32;
  const int gq = lane >> 2, tq = lane & 3, hd = a.head_dim, steps = a.hd_pad / 16;
  auto stage = [&](int b) { stage_wg<kWg2Threads, D>(tiles, kslot, b, a, hd); };
  fill_slots<kWg2Threads>(kslot, a, it, s0);
  if (s0 < s1) fill_slots<kWg2Threads>(kslot + kSplit, a, it, s0 + 1);
  FlashPairs f = flash_pairs(a, it, warp, gq);
  stage_q16<kWg2Threads, D>(qt, a, it);
  float o[D / 16][4];
#pragma unroll
  for (int j = 0; j < D / 16; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
  // One descriptor, built once: every tile's is it plus its offset in elements / 8.
  const uint64_t td = mm::swz_desc(tiles), qd = mm::desc_add(td, 4 * tile);
  __syncthreads();
  stage(0);
  for (int s = s0; s <= s1; ++s) {
    const int b = (s - s0) & 1;
    cp_async_wait<0>();
    fence_proxy_async();  // cp.async and q's stores to wgmma
    __syncthreads();
    float sc[4][4];
    const uint64_t kd = mm::desc_add(td, 2 * b * tile + 32 * wg * kSwzRow),
                   vd = mm::desc_add(td, 2 * b * tile + tile + own * wg * kPanel);
    auto scores = [&](auto full) {
      wgmma_ss32<false>(reinterpret_cast<float(&)[16]>(sc), qd, kd);
#pragma unroll
      for (int k = 1; k < D / 16; ++k) {
        if (!decltype(full)::value && k >= steps) break;
        const int at = k / 4 * kPanel + 16 * (k % 4);
        wgmma_ss32(reinterpret_cast<float(&)[16]>(sc), mm::desc_add(qd, at), mm::desc_add(kd, at));
      }
    };
    wgmma_fence();
    if (steps == D / 16) scores(std::true_type{});
    else scores(std::false_type{});
    wgmma_commit();
    // While the scores run: every warp is past split s - 1, so its stage takes split s + 1 and its
    // slots split s + 2.
    if (s < s1) stage(b ^ 1);
    if (s + 2 <= s1) fill_slots<kWg2Threads>(kslot + b * kSplit, a, it, s + 2);
    wgmma_wait<0>();
    // The split's max: this warpgroup's keys, then the other's.
    float x[2][4][2], mx[2];
    int klo[2], khi[2];
    bool whole[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      pair_keys(f, h, s, klo[h], khi[h]);
      whole[h] = whole_split(klo[h], khi[h]);
#pragma unroll
      for (int n = 0; n < 4; ++n) x[h][n][0] = sc[n][2 * h], x[h][n][1] = sc[n][2 * h + 1];
      mx[h] = split_max(x[h], 32 * wg, tq, klo[h], khi[h], a.scale, a.softcap, whole[h]);
      xm[(2 * wg + h) * kXch + t] = mx[h];
    }
    __syncthreads();
    // The weights; warpgroup 0's running sums out, and each warpgroup's A fragments (key steps
    // 2w, 2w + 1), read back whole so that no register picks between them.
    float pair[2][4];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      mx[h] = fmaxf(mx[h], xm[(2 * (wg ^ 1) + h) * kXch + t]);
      uint32_t pw[4];
      split_exp<false, true>(x[h], mx[h], whole[h], pair[h], pw);
#pragma unroll
      for (int n = 0; n < 4; ++n) xp[(8 * wg + 4 * (n / 2) + 2 * (n % 2) + h) * kXch + t] = pw[n];
      if (wg == 0) xs[h * kXch + t] = split_chain(pair[h]);
    }
    __syncthreads();
    uint32_t pa[4][4];
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) pa[j][e] = xp[(4 * j + e) * kXch + t];
    // Warpgroup 1 ends the sums (every lane, for the quad's shuffles), and writes the partials' (max, sum).
    float lsum[2] = {0.0f, 0.0f};
    if (wg == 1) {
#pragma unroll
      for (int h = 0; h < 2; ++h) lsum[h] = quad_sum(split_chain(pair[h], &xs[h * kXch + t]));
    }
    SplitJoin jn;
#pragma unroll
    for (int h = 0; h < 2; ++h)
      if (klo[h] <= khi[h]) flash_join(a, it, f, jn, h, warp, gq, tq, s, part, mx[h], lsum[h], wg == 1);
    float os[own][8][4];
    wgmma_fence();
#pragma unroll
    for (int h = 0; h < own; ++h) {
      wgmma_rs64<1, false>(reinterpret_cast<float(&)[32]>(os[h]), pa[0], mm::desc_add(vd, h * kPanel));
#pragma unroll
      for (int j = 1; j < 4; ++j)
        wgmma_rs64<1>(reinterpret_cast<float(&)[32]>(os[h]), pa[j], mm::desc_add(vd, h * kPanel + 16 * j * kSwzRow));
    }
    wgmma_commit();
    wgmma_wait<0>();
#pragma unroll
    for (int h = 0; h < own; ++h) flash_take<8>(a, it, jn, o, os[h], 8 * h, 8 * (own * wg + h), warp, gq, tq, s, part);
  }
  if (!part) {
    // Warpgroup 1 holds each pair's sum.
    if (wg == 1) xs[t] = f.l[0], xs[kXch + t] = f.l[1];
    __syncthreads();
    if (wg == 0) f.l[0] = xs[t], f.l[1] = xs[kXch + t];
    flash_out(a, it, f, o, D / 16 * wg, warp, gq, tq);
  }
#else
  __trap();  // launched only where wgmma_ready() found the sm_90a code
#endif
}

// bf16 mode on sm_90a, warp-specialized: a block of three warpgroups takes two whole-mode items of
// one sequence whose keys are contiguous (the host pairs them). Warpgroup 0 stages each split's K
// and V once for both by cp.async into a ring of stages, handed over on mbarriers; warpgroups 1
// and 2 each run flash_wg_kernel's split for their own item's 64 pairs, with no staging and no
// block barrier, so the bits are flash_wg_kernel's.
constexpr int kWsThreads = 384, kWsStages = 3;
constexpr size_t kFlashWsSmem = static_cast<size_t>(kWsStages) * 2 * kTile * sizeof(uint16_t) +
                                static_cast<size_t>(kWsStages) * kSplit * sizeof(int64_t) +
                                2 * kWsStages * sizeof(uint64_t) + 1024;

__global__ void __launch_bounds__(kWsThreads, 1) flash_ws_kernel(Args a) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  grid_wait();
  grid_launch_next();
  extern __shared__ __align__(16) uint16_t smem_raw[];
  const uint32_t raw = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  uint16_t* tiles = smem_raw + (1024 - raw % 1024) % 1024 / 2;  // [stage][K, V][2 panels][kSplit][64]
  auto* kslot = reinterpret_cast<int64_t*>(tiles + 2 * kWsStages * kTile);  // [stage][kSplit]
  const uint32_t bars = static_cast<uint32_t>(__cvta_generic_to_shared(kslot + kWsStages * kSplit));
  const auto full = [bars](int b) { return bars + 8u * static_cast<uint32_t>(b); };
  const auto empty = [bars](int b) { return bars + 8u * static_cast<uint32_t>(kWsStages + b); };
  const int ga = a.items[2 * blockIdx.x], gb = a.items[2 * blockIdx.x + 1];
  const Item ia = item_of(a, ga, -1), ib = gb >= 0 ? item_of(a, gb, -1) : ia;
  const int S0 = min(ia.s0, ib.s0), S1 = max(ia.s1, ib.s1);
  const int wg = threadIdx.x / 128, t = threadIdx.x % 128;
  if (threadIdx.x == 0) {
    for (int b = 0; b < kWsStages; ++b) mbar_init(full(b), 128), mbar_init(empty(b), 256);
  }
  __syncthreads();
  if (wg == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
    // The union of both items' keys: each is in one of their ranges, so written.
    const int32_t lo = min(ia.lo, ib.lo), hi = max(ia.hi, ib.hi);
    for (int s = S0; s <= S1; ++s) {
      const int i = s - S0, b = i % kWsStages;
      if (i >= kWsStages) mbar_wait(empty(b), (i / kWsStages - 1) & 1);
      fill_slots<128>(kslot + b * kSplit, a, ia.pt, lo, hi, ia.head_off, s);
      asm volatile("bar.sync 1, 128;\n" ::: "memory");
      stage_wg<128>(tiles, kslot, b, a, a.head_dim);
      if (i >= 1) {
        cp_async_wait<1>();
        fence_proxy_async();  // cp.async data to wgmma
        mbar_arrive(full((i - 1) % kWsStages));
      }
    }
    cp_async_wait<0>();
    fence_proxy_async();
    mbar_arrive(full((S1 - S0) % kWsStages));
    return;
  }
  asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
  const int g = wg == 1 ? ga : gb;
  const Item it = wg == 1 ? ia : ib;
  const int warp = t / 32, lane = t % 32, gq = lane >> 2, tq = lane & 3, steps = a.hd_pad / 16;
  // Without an item (g < 0) it stands in for ia's, whose rows it reads and never writes.
  FlashPairs f = flash_pairs(a, it, warp, gq);
  float o[16][4];
#pragma unroll
  for (int j = 0; j < 16; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
  uint32_t qa[kChunk / 16][4];
  load_q16(a, it, warp, gq, tq, qa);
  const int lo = g >= 0 ? it.s0 : S1 + 1, hi = g >= 0 ? it.s1 : S1;
  const auto stage_of = [S0](int s) { return (s - S0) % kWsStages; };
  const auto wait_full = [&](int s) { mbar_wait(full(stage_of(s)), ((s - S0) / kWsStages) & 1); };
  float sc[8][4];
  const auto issue_scores = [&](int s) { wg_issue_scores(sc, qa, tiles + 2 * stage_of(s) * kTile, steps); };
  for (int s = S0; s <= S1; ++s) {
    // A split this warpgroup does not take is still waited for and handed back, so phases agree.
    if (s < lo || s > hi) {
      wait_full(s);
      mbar_arrive(empty(stage_of(s)));
      continue;
    }
    wait_full(s);
    issue_scores(s);
    wgmma_wait<0>();
    const uint16_t* vt = tiles + 2 * stage_of(s) * kTile + kTile;
    uint32_t pa[4][4];
    const SplitJoin jn = flash_softmax<false, true, true>(a, it, f, sc, warp, gq, tq, s, false, pa);
#pragma unroll
    for (int h = 0; h < kChunk / 64; ++h) {
      float os[8][4];
      wg_issue_pv(os, pa, vt, h);
      wgmma_wait<0>();
      flash_take<8>(a, it, jn, o, os, 8 * h, 8 * h, warp, gq, tq, s, false);
    }
    mbar_arrive(empty(stage_of(s)));
  }
  if (g >= 0) flash_out(a, it, f, o, 0, warp, gq, tq);
#else
  __trap();  // launched only where wgmma_ready() found the sm_90a code
#endif
}

// TF_CUDA_FLASH_WG=0 keeps bf16 mode on flash_bf16_kernel, for timing and the contract's forms.
bool flash_wg_on() {
  static const bool on = !env_zero("TF_CUDA_FLASH_WG") && wgmma_ready();
  return on;
}

// TF_CUDA_FLASH_WG2=0 keeps the wgmma form on one warpgroup a block (flash_wg_kernel), for timing.
bool flash_wg2_on() {
  static const bool on = !env_zero("TF_CUDA_FLASH_WG2");
  return on;
}

}  // namespace

// TF_CUDA_FLASH_WS: 0 never takes the warp-specialized form, 1 takes it wherever it can (the
// contract's forced form); unset, flash_ws_worth's rule.
int flash_ws_mode() {
  static const int mode = env_switch("TF_CUDA_FLASH_WS");
  return mode;
}

bool flash_ws_takes(int head_dim) { return head_dim % 8 == 0 && flash_ws_mode() != 0 && flash_wg_on(); }

void launch_flash_ws(const Args& a, unsigned n_blocks, unsigned yblocks) {
  static std::atomic<bool> ready{false};
  launch_attention_kernel(flash_ws_kernel, ready, kWsThreads, kFlashWsSmem, a, n_blocks, yblocks);
}

// TF_CUDA_FLASH_WIDE=0 keeps head dims past kChunk on the tile kernel, for timing and the contract.
bool flash_wide_takes(int head_dim) {
  static const bool on = !env_zero("TF_CUDA_FLASH_WIDE");
  return on && head_dim % 8 == 0 && head_dim > kChunk && head_dim <= 2 * kChunk && flash_wg_on();
}

void launch_flash_wide(const Args& a, unsigned n_items, unsigned yblocks) {
  static std::atomic<bool> ready{false};
  launch_attention_kernel(flash_wg2_kernel<2 * kChunk>, ready, kWg2Threads, wg2_smem<2 * kChunk>(), a, n_items, yblocks);
}

bool launch_flash_wg(const Args& a, unsigned n_items, unsigned yblocks) {
  static std::atomic<bool> ready_wg{false}, ready_wg2{false};
  if (a.head_dim % 8 != 0 || !flash_wg_on()) return false;
  if (flash_wg2_on())
    launch_attention_kernel(flash_wg2_kernel<kChunk>, ready_wg2, kWg2Threads, wg2_smem<kChunk>(), a, n_items, yblocks);
  else launch_attention_kernel(flash_wg_kernel, ready_wg, kThreads, kFlashWgSmem, a, n_items, yblocks);
  return true;
}

}  // namespace tf::cuda::attn
