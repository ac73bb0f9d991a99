// Timings for the report: device copy bandwidth, a 4096^3 bf16 matmul, batch-1 matmuls.
#include <cuda_runtime.h>

#include <cstdio>
#include <random>
#include <vector>

#include "backend/cuda/cuda_util.cuh"
#include "contract.h"

namespace tf::contract {

namespace {

// Mean milliseconds of fn over iters runs after two warm-ups.
template <typename F>
float time_ms(F fn, int iters) {
  fn();
  fn();
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  cudaEventRecord(a);
  for (int i = 0; i < iters; ++i) fn();
  cudaEventRecord(b);
  cudaEventSynchronize(b);
  float ms = 0;
  cudaEventElapsedTime(&ms, a, b);
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  TF_CUDA_CHECK(cudaGetLastError(), "bench");
  return ms / iters;
}

void bench_matmul(Backend& gpu, DType dt, int64_t M, int64_t K, int64_t N, int iters) {
  std::mt19937 rng(5);
  HostWeight hw = make_weight(dt, N, K, rng);
  auto w = gpu.load_weight(hw.view);
  Tensor x = gpu.alloc(M, K), y = gpu.alloc(M, N);
  auto xs = random_floats(rng, static_cast<size_t>(M * K));
  gpu.from_host(xs.data(), x);
  const float ms = time_ms([&] { gpu.matmul(x, *w, nullptr, y); }, iters);
  const double flops = 2.0 * M * K * N, bytes = static_cast<double>(hw.view.nbytes) + 4.0 * (M * K + M * N);
  std::printf("BENCH matmul %s M=%lld K=%lld N=%lld: %.3f ms, %.1f TFLOP/s, %.0f GB/s\n",
              dtype_name(dt), static_cast<long long>(M), static_cast<long long>(K),
              static_cast<long long>(N), ms, flops / ms / 1e9, bytes / ms / 1e6);
  gpu.free(x);
  gpu.free(y);
}

}  // namespace

void run_bench(Backend& gpu) {
  {
    const size_t bytes = size_t{2} << 30;
    void *a = nullptr, *b = nullptr;
    TF_CUDA_CHECK(cudaMalloc(&a, bytes), "bench copy");
    TF_CUDA_CHECK(cudaMalloc(&b, bytes), "bench copy");
    cudaMemset(a, 1, bytes);
    const float ms = time_ms([&] { cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice); }, 10);
    std::printf("BENCH copy d2d %zu MiB: %.3f ms, %.0f GB/s (read + write)\n", bytes >> 20, ms,
                2.0 * bytes / ms / 1e6);
    cudaFree(a);
    cudaFree(b);
  }
  bench_matmul(gpu, DType::BF16, 4096, 4096, 4096, 10);
  bench_matmul(gpu, DType::BF16, 512, 4096, 4096, 10);
  bench_matmul(gpu, DType::BF16, 1, 4096, 4096, 50);
  bench_matmul(gpu, DType::BF16, 1, 4096, 28672, 20);
  bench_matmul(gpu, DType::BF16, 8, 4096, 28672, 20);
  bench_matmul(gpu, DType::Q8_0, 1, 4096, 28672, 20);
  bench_matmul(gpu, DType::BF16, 1, 14336, 4096, 20);
  // Attention of one decode row over 4096 keys, 32 heads over 8 kv heads of 128.
  {
    AttnParams p;
    p.n_heads = 32, p.n_kv_heads = 8, p.head_dim = 128, p.scale = 0.088f;
    const int L = 4096, ps = 16;
    auto kv = gpu.alloc_kv(1, L / ps, ps, 8, 128);
    RowLayout lay;
    lay.seq_pages.resize(1);
    for (int i = 0; i < L / ps; ++i) lay.seq_pages[0].push_back(i);
    lay.pos.push_back(L - 1), lay.seq.push_back(0);
    Tensor q = gpu.alloc(1, 32 * 128), o = gpu.alloc(1, 32 * 128);
    const float ms = time_ms([&] { gpu.attention(q, o, *kv, 0, lay, p); }, 20);
    std::printf("BENCH attention decode 1 row, 4096 keys, 32/8 heads of 128: %.3f ms, %.0f GB/s of KV\n",
                ms, 2.0 * L * 8 * 128 * 4 / ms / 1e6);
    gpu.free(q);
    gpu.free(o);
  }
}

}  // namespace tf::contract
