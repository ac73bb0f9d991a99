// Trial kernel, kept apart from the engine: the decode matmul (up to 8 rows, BF16 weights) on
// Hopper's warpgroup mma with the roles swapped, the weights as the m64 side and x as the n8
// side. The engine's few-row kernel (mma.sync, weights as the n side) is bound by each warp's
// dependent mma chain; wgmma chains on one accumulator without stalling the warp. The tile keeps
// the order rule (cuda_matmul.cuh): the engine's K split, each k16 step holding the rule's k (x
// planes and weights in k order, as cuda_matmul_wgmma.cu copies them), hi then lo, and
// the slices' partials added in slice order; whether that gives the engine's bits rests on the
// probe's slot-order and roles results (probe_tensor_cores.cu). For each shape it prints how
// many outputs differ from the engine's matmul and both times, weights rotated past L2.
//   tf_trial_decode_wgmma [M,K,N ...]      (built for 90a beside tf_probe_tensor_cores)
// TRIAL_FORM=4 runs four stages at four blocks an SM instead of eight at two.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_factory.h"
#include "backend/cuda/cuda_matmul.cuh"

namespace tf::cuda::mm {
namespace {

constexpr int kBK = kSwzRow;  // positions of a stage row: two chunks of 32 k, 128 bytes
constexpr int kRows = 8;   // x rows: the wgmma n side
constexpr int kCols = 64;  // weight rows (output columns) a block takes: the wgmma m side
constexpr int kStage = (kCols + 2 * kRows) * kBK;  // [w 64][x hi 8][x lo 8] rows of kBK

__device__ __forceinline__ void wgmma_m64n8(float (&d)[4], uint64_t da, uint64_t db) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0,%1,%2,%3}, %4, %5, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "l"(da), "l"(db), "r"(1));
}

// One warpgroup: output columns n0 .. n0 + 63 of rows 0 .. M - 1 over slice blockIdx.y.
// xh/xl: x's planes ([M][Kp], split_x_kernel); K % 8 == 0.
// kST stages in the ring (kST - 2 in flight while one is read), kPerSM blocks an SM.
template <int kST, int kPerSM>
__global__ void __launch_bounds__(128, kPerSM)
    trial_kernel(const uint16_t* __restrict__ xh, const uint16_t* __restrict__ xl, int64_t M,
                 int64_t K, int64_t Kp, const uint16_t* __restrict__ w, float* __restrict__ y,
                 int64_t N, SplitArgs sp) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(16) uint16_t smem_raw[];
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  uint16_t* smem = smem_raw + (1024 - base % 1024) % 1024 / 2;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kCols;
  const int64_t kbeg = static_cast<int64_t>(blockIdx.y) * sp.ks;
  const int64_t kend = kbeg + sp.ks < K ? kbeg + sp.ks : K;
  const int tiles = static_cast<int>((kend - kbeg + kBK - 1) / kBK);
  // Weight pieces of 8 k in k order; a thread copies piece column wq of rows wr0 + 16 u.
  const int wq = tid % 8, wr0 = tid / 8;
  // x: one 16-byte piece a thread, plane tid / 64, row tid / 8 % 8, positions 8 (tid % 8) ..
  const int xp = tid / 64, xr = tid / 8 % 8, xc = tid % 8;
  auto load = [&](int t) {
    uint16_t* s = smem + (t % kST) * kStage;
    const int64_t k0 = kbeg + static_cast<int64_t>(t) * kBK;
    const bool win = k0 + 8 * wq < K;
#pragma unroll
    for (int u = 0; u < kCols / 16; ++u) {
      const int r = wr0 + 16 * u;
      const bool ok = win && n0 + r < N;
      cp_async16(s + swz_at(r, 8 * wq), w + (ok ? (n0 + r) * K + k0 + 8 * wq : 0), ok);
    }
    const bool xok = xr < M && k0 + 8 * xc < Kp;
    const uint16_t* plane = xp ? xl : xh;
    cp_async16(s + (kCols + xp * kRows) * kBK + swz_at(xr, 8 * xc), plane + (xok ? xr * Kp + k0 + 8 * xc : 0), xok);
  };
  grid_wait();
  grid_launch_next();
#pragma unroll
  for (int t = 0; t < kST - 2; ++t) {
    if (t < tiles) load(t);
    cp_async_commit();
  }
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int t = 0; t < tiles; ++t) {
    cp_async_wait<kST - 3>();
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    // Stage t has landed and the mma of stage t - 2, which the next copies refill, retired.
    __syncthreads();
    if (t + kST - 2 < tiles) load(t + kST - 2);
    cp_async_commit();
    const uint16_t* s = smem + (t % kST) * kStage;
    const uint16_t *sw = s, *sh = s + kCols * kBK, *sl = sh + kRows * kBK;
    const int64_t k0 = kbeg + static_cast<int64_t>(t) * kBK;
    const int steps = k0 + 32 < kend ? kBK / 16 : 2;  // a chunk starting past the slice is not in the chain
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
    for (int j = 0; j < kBK / 16; ++j) {
      if (j >= steps) break;
      const uint64_t da = swz_desc(sw + 16 * j);
      wgmma_m64n8(acc, da, swz_desc(sh + 16 * j));
      wgmma_m64n8(acc, da, swz_desc(sl + 16 * j));
    }
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
  }
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
  // Accumulator element e: weight row (output column) 16 warp + lane / 4 (+ 8 for e >= 2), x row
  // 2 (lane % 4) + e % 2.
  const bool partial = sp.s > 1;
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const int64_t c = n0 + 16 * warp + lane / 4 + (e >= 2 ? 8 : 0), r = 2 * (lane % 4) + e % 2;
    if (r >= M || c >= N) continue;
    if (partial) sp.part[(static_cast<int64_t>(blockIdx.y) * M + r) * N + c] = acc[e];
    else y[r * N + c] = acc[e];
  }
  if (partial && arrive_last(sp.counters + blockIdx.x, sp.s))
    reduce_slices(sp, M, N, 0, static_cast<int>(M), n0, kCols, nullptr, y);
#else
  __trap();
#endif
}

struct Shape {
  int64_t M, K, N;
};

// Milliseconds a call of fn over `iters` runs, after two warm-ups.
template <class F>
float time_ms(F fn, int iters) {
  fn(0), fn(1);
  cudaEvent_t a, b;
  cudaEventCreate(&a), cudaEventCreate(&b);
  cudaEventRecord(a, stream());
  for (int i = 0; i < iters; ++i) fn(i);
  cudaEventRecord(b, stream());
  cudaEventSynchronize(b);
  float ms = 0;
  cudaEventElapsedTime(&ms, a, b);
  cudaEventDestroy(a), cudaEventDestroy(b);
  return ms / static_cast<float>(iters);
}

// Runs one shape: the engine's matmul and the trial on the same weights and x; prints the
// differing outputs and both times. Returns the differing count.
int64_t run(Backend& gpu, const Shape& sh, std::mt19937& rng) {
  const int64_t M = sh.M, K = sh.K, N = sh.N, Kp = (K + 31) / 32 * 32;
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<uint16_t> wh(static_cast<size_t>(N * K));
  for (auto& v : wh) v = f32_to_bf16(nd(rng) * 0.05f);
  std::vector<float> xs(static_cast<size_t>(M * K));
  for (auto& v : xs) v = nd(rng) * std::ldexp(1.0f, static_cast<int>(rng() % 9) - 4);
  // Enough copies of the weight that a rotation passes the 50 MB L2.
  const uint64_t bytes = static_cast<uint64_t>(N * K) * 2;
  const int copies = static_cast<int>(std::min<uint64_t>(8, (uint64_t{192} << 20) / bytes + 1));
  TensorView view{"w", DType::BF16, {N, K}, reinterpret_cast<const uint8_t*>(wh.data()), bytes};
  std::vector<std::unique_ptr<Weight>> ws;
  for (int i = 0; i < copies; ++i) ws.push_back(gpu.load_weight(view));
  Tensor x = gpu.alloc(M, K), y = gpu.alloc(M, N), yt = gpu.alloc(M, N);
  gpu.from_host(xs.data(), x);
  gpu.matmul(x, *ws[0], nullptr, y);
  const SplitArgs split = split_for(K, N);
  const unsigned tiles = static_cast<unsigned>((N + kCols - 1) / kCols);
  uint16_t* planes = nullptr;
  float* part = nullptr;
  unsigned* counters = nullptr;
  TF_CUDA_CHECK(cudaMalloc(&planes, static_cast<size_t>(2 * M * Kp) * 2), "trial planes");
  TF_CUDA_CHECK(cudaMalloc(&part, static_cast<size_t>(split.s * M * N) * 4 + 4), "trial partials");
  TF_CUDA_CHECK(cudaMalloc(&counters, tiles * sizeof(unsigned)), "trial counters");
  TF_CUDA_CHECK(cudaMemset(counters, 0, tiles * sizeof(unsigned)), "trial counters");
  static const bool four = [] {
    const char* e = std::getenv("TRIAL_FORM");
    return e && std::string(e) == "4";
  }();
  auto kern = four ? trial_kernel<4, 4> : trial_kernel<8, 2>;
  const size_t smem = static_cast<size_t>(four ? 4 : 8) * kStage * 2 + 1024;
  TF_CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(smem)),
                "trial smem");
  const bool vec = K % 4 == 0 && reinterpret_cast<uintptr_t>(x.data) % 16 == 0;
  auto trial = [&](int i) {
    const auto* w = static_cast<const uint16_t*>(as_cuda(*ws[static_cast<size_t>(i % copies)], "trial").data);
    launch_kernel(split_x_kernel, grid_for(M * (Kp / 8), 256), 256, 0, x.data, M, K, Kp, vec,
                  planes, planes + M * Kp, nullptr, 1, nullptr, -1);
    SplitArgs sp = split;
    sp.part = part, sp.counters = counters;
    launch_kernel(kern, dim3(tiles, static_cast<unsigned>(sp.s)), 128, smem, planes,
                  planes + M * Kp, M, K, Kp, w, yt.data, N, sp);
  };
  trial(0);
  TF_CUDA_CHECK(cudaDeviceSynchronize(), "trial run");
  std::vector<float> a(static_cast<size_t>(M * N)), b(a.size());
  gpu.to_host(y, a.data());
  gpu.to_host(yt, b.data());
  int64_t differ = 0;
  for (size_t i = 0; i < a.size(); ++i) differ += std::memcmp(&a[i], &b[i], 4) != 0;
  const int iters = 40;
  const float t_engine = time_ms([&](int i) { gpu.matmul(x, *ws[static_cast<size_t>(i % copies)], nullptr, y); }, iters);
  const float t_trial = time_ms(trial, iters);
  std::printf("TRIAL M=%lld K=%lld N=%lld slices %d: %lld of %lld outputs differ; engine %.1f us "
              "(%.0f GB/s), trial %.1f us (%.0f GB/s)\n",
              static_cast<long long>(M), static_cast<long long>(K), static_cast<long long>(N), split.s,
              static_cast<long long>(differ), static_cast<long long>(M * N), 1e3 * t_engine,
              static_cast<double>(bytes) / t_engine / 1e6, 1e3 * t_trial,
              static_cast<double>(bytes) / t_trial / 1e6);
  cudaFree(planes), cudaFree(part), cudaFree(counters);
  gpu.free(x), gpu.free(y), gpu.free(yt);
  return differ;
}

}  // namespace
}  // namespace tf::cuda::mm

int main(int argc, char** argv) {
  using namespace tf::cuda::mm;
  try {
    auto gpu = tf::make_cuda_backend(0);
    std::mt19937 rng(20261130);
    // Llama-3.1-8B's decode matmuls (o, q+k+v, gate or up, down, lm_head), eight rows, and odd
    // sizes: N past a 64-column tile, K ending inside a chunk and inside a stage.
    std::vector<Shape> shapes = {{1, 4096, 4096},  {1, 4096, 6144},  {1, 4096, 14336}, {1, 14336, 4096},
                                 {1, 4096, 128256}, {8, 4096, 14336}, {5, 4096, 4096},  {3, 2312, 1000},
                                 {1, 1048, 520},   {7, 776, 77}};
    // Or the shapes given as M,K,N arguments.
    if (argc > 1) shapes.clear();
    for (int i = 1; i < argc; ++i) {
      long long m = 0, k = 0, n = 0;
      if (std::sscanf(argv[i], "%lld,%lld,%lld", &m, &k, &n) != 3 || m < 1 || m > 8 || k < 8 ||
          k % 8 != 0 || n < 1) {
        std::printf("ERROR: shape %s is not M,K,N with M 1..8 and K a multiple of 8\n", argv[i]);
        return 2;
      }
      shapes.push_back({m, k, n});
    }
    int64_t differ = 0;
    for (const Shape& s : shapes) differ += run(*gpu, s, rng);
    std::printf("TRIAL SUMMARY: %s\n", differ == 0 ? "bits equal to the engine's on every shape"
                                                   : "bits differ from the engine's");
    return differ == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::printf("ERROR: %s\n", e.what());
    return 1;
  }
}
