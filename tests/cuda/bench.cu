// Timings for the report: device copy bandwidth, a 4096^3 bf16 matmul, batch-1 matmuls, attention.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "backend/cuda/cuda_util.cuh"
#include "contract.h"
#include "contract_moe.h"

namespace tf::contract {

namespace {

// Mean milliseconds of fn over iters runs after two warm-ups.
template <typename F>
float time_ms(F fn, int iters) {
  // TF_BENCH_ITERS=N: N runs each (1 under a profiler that replays every kernel).
  if (const char* e = std::getenv("TF_BENCH_ITERS")) iters = std::max(1, std::atoi(e));
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

// m rows over L stored keys: decode (m sequences of L keys, one row each at the end) or prefill
// (one sequence, rows at positions 0..m-1), with heads over kvh kv heads of hd dims.
void bench_attention(Backend& gpu, int m, int L, bool decode, int iters, int heads = 32, int kvh = 8, int hd = 128) {
  AttnParams p;
  p.n_heads = heads, p.n_kv_heads = kvh, p.head_dim = hd, p.scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const int ps = 16, per_seq = L / ps, seqs = decode ? m : 1;
  auto kv = gpu.alloc_kv(1, per_seq * seqs, ps, kvh, hd);
  RowLayout lay;
  lay.seq_pages.resize(static_cast<size_t>(seqs));
  for (int s = 0; s < seqs; ++s)
    for (int i = 0; i < per_seq; ++i) lay.seq_pages[static_cast<size_t>(s)].push_back(s * per_seq + i);
  for (int r = 0; r < m; ++r) lay.pos.push_back(decode ? L - 1 : r), lay.seq.push_back(decode ? r : 0);
  Tensor q = gpu.alloc(m, heads * hd), o = gpu.alloc(m, heads * hd);
  std::mt19937 rng(6);
  auto qs = random_floats(rng, static_cast<size_t>(m) * heads * hd);
  gpu.from_host(qs.data(), q);
  const float ms = time_ms([&] { gpu.attention(q, o, *kv, 0, lay, p); }, iters);
  const double keys = decode ? static_cast<double>(m) * L : 0.5 * m * (m + 1.0);
  std::printf("BENCH attention %s %d rows, %d keys, %d/%d heads of %d: %.3f ms, %.0f GB/s of KV, %.1f TFLOP/s\n",
              decode ? "decode" : "prefill", m, L, heads, kvh, hd, ms, (decode ? keys : L) * 2.0 * kvh * hd * 4 / ms / 1e6,
              keys * heads * hd * 4 / ms / 1e9);
  gpu.free(q);
  gpu.free(o);
}

// One matmul timing: its weight type, rows, K, N and timed runs.
struct MatmulShape {
  DType dt;
  int64_t M, K, N;
  int iters;
};

// One thread a block adds 1 to its block's counter once the kernel before has ended: a link of a
// dependent chain with nothing else to do.
__global__ void chain_kernel(float* v) {
  cuda::grid_wait();
  cuda::grid_launch_next();
  if (threadIdx.x == 0) v[blockIdx.x] += 1.0f;
}

}  // namespace

void run_bench_launch(Backend&) {
  constexpr int kChain = 256;
  int sms = 0;
  TF_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "bench launch");
  float* v = nullptr;
  TF_CUDA_CHECK(cudaMalloc(&v, static_cast<size_t>(sms) * sizeof(float)), "bench launch");
  TF_CUDA_CHECK(cudaMemset(v, 0, static_cast<size_t>(sms) * sizeof(float)), "bench launch");
  for (const unsigned blocks : {1u, static_cast<unsigned>(sms)}) {
    auto chain = [&](bool overlap) {
      for (int i = 0; i < kChain; ++i) cuda::launch_on_stream(overlap, 1, chain_kernel, blocks, 128, 0, v);
    };
    float us[4];  // overlapped, whole; then the same two replayed from a graph
    for (int form = 0; form < 4; ++form) {
      const bool overlap = form % 2 == 0;
      if (form < 2) {
        us[form] = 1e3f * time_ms([&] { chain(overlap); }, 5) / kChain;
        continue;
      }
      cudaGraph_t graph = nullptr;
      cudaGraphExec_t exec = nullptr;
      TF_CUDA_CHECK(cudaStreamBeginCapture(cuda::stream(), cudaStreamCaptureModeThreadLocal), "bench launch");
      chain(overlap);
      TF_CUDA_CHECK(cudaStreamEndCapture(cuda::stream(), &graph), "bench launch");
      TF_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0), "bench launch");
      us[form] = 1e3f * time_ms([&] { cudaGraphLaunch(exec, cuda::stream()); }, 5) / kChain;
      cudaGraphExecDestroy(exec);
      cudaGraphDestroy(graph);
    }
    std::printf("BENCH launch chain of %d kernels of %u block%s: %.2f us a kernel overlapped (PDL), %.2f "
                "whole; from a graph %.2f overlapped, %.2f whole\n",
                kChain, blocks, blocks == 1 ? "" : "s", us[0], us[1], us[2], us[3]);
  }
  cudaFree(v);
}

void run_bench_moe(Backend& gpu) {
  bench_moe(gpu, [](const std::function<void()>& fn, int iters) { return time_ms(fn, iters); });
}

void run_bench_few(Backend& gpu) {
  // Llama-3.1-8B's decode matmuls at one row (o, gate+up, down, q+k+v, lm_head) and eight, then
  // Qwen3-30B-A3B's o, q and k at one row, then Qwen3-Next's in_proj_qkvz and lm_head
  // (its out_proj is Qwen3-30B-A3B's o).
  static const MatmulShape kFew[] = {
      {DType::BF16, 1, 4096, 4096, 50},  {DType::BF16, 1, 4096, 28672, 20}, {DType::BF16, 8, 4096, 28672, 20},
      {DType::Q8_0, 1, 4096, 28672, 20}, {DType::BF16, 1, 14336, 4096, 20}, {DType::BF16, 1, 4096, 6144, 50},
      {DType::BF16, 1, 4096, 128256, 10}, {DType::BF16, 1, 4096, 2048, 50},  {DType::BF16, 1, 2048, 4096, 50},
      {DType::BF16, 1, 2048, 512, 50},   {DType::BF16, 1, 2048, 12288, 50}, {DType::BF16, 1, 2048, 151936, 10}};
  for (const MatmulShape& s : kFew) bench_matmul(gpu, s.dt, s.M, s.K, s.N, s.iters);
  run_bench_moe(gpu);
}

void run_bench_attention(Backend& gpu) {
  // 32 heads over 8 kv heads of 128, KV in pages of 16: decode rows at the end of 4096 keys, and
  // causal prefill of 512 and 4096 rows from position 0.
  bench_attention(gpu, 1, 4096, true, 50);
  bench_attention(gpu, 32, 4096, true, 20);
  bench_attention(gpu, 512, 512, false, 20);
  bench_attention(gpu, 4096, 4096, false, 5);
  // Head dims of 256: Qwen3-Next's 16/2 and a wider kv group's 8/4, prefill of 4096 rows, and decode
  // (a lone row after 80 keys too, the batch-1 call at short context).
  bench_attention(gpu, 4096, 4096, false, 5, 16, 2, 256);
  bench_attention(gpu, 4096, 4096, false, 5, 8, 4, 256);
  bench_attention(gpu, 32, 4096, true, 20, 16, 2, 256);
  bench_attention(gpu, 1, 80, true, 200, 16, 2, 256);
}

// Sampling rows of Qwen3's 151,936 logits, 1 and 64 at once: greedy and each filter, on random
// logits in [-3, 3] and on flat rows (every weight 1, as random-weight models give).
void run_bench_sample(Backend& gpu) {
  std::mt19937 rng(9);
  const int64_t V = 151936, rows = 64;
  Tensor lg = gpu.alloc(rows, V);
  std::vector<int32_t> ids(rows);
  struct Kind {
    const char* name;
    float t, p;
    int k;
  };
  const Kind kinds[] = {{"greedy", 0.0f, 1.0f, 0}, {"T 0.7 top_p 0.95", 0.7f, 0.95f, 0},
                        {"T 0.7 top_k 40", 0.7f, 1.0f, 40}, {"T 0.7 top_k 40 top_p 0.95", 0.7f, 0.95f, 40},
                        {"T 1.0", 1.0f, 1.0f, 0}};
  for (bool flat : {false, true}) {
    auto xs = flat ? std::vector<float>(static_cast<size_t>(rows * V), 0.0f)
                   : random_floats(rng, static_cast<size_t>(rows * V), -3.f, 3.f);
    gpu.from_host(xs.data(), lg);
    for (const Kind& k : kinds)
      for (int64_t m : {int64_t{1}, rows}) {
        std::vector<SampleSpec> specs(static_cast<size_t>(m));
        for (int64_t r = 0; r < m; ++r) {
          SampleSpec& s = specs[static_cast<size_t>(r)];
          s.row = static_cast<int32_t>(r), s.temperature = k.t, s.top_p = k.p, s.top_k = k.k;
          s.position = static_cast<uint64_t>(r);
        }
        const float ms = time_ms([&] { gpu.sample_rows(lg, specs, {}, ids.data()); }, 5);
        std::printf("BENCH sample_rows %lld x %lld %s logits, %s: %.3f ms\n", static_cast<long long>(m),
                    static_cast<long long>(V), flat ? "flat" : "random", k.name, ms);
      }
  }
  gpu.free(lg);
}

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
  // Prefill and wide decode rounds at Llama-3.1-8B's shapes.
  static const MatmulShape kMany[] = {
      {DType::BF16, 4096, 4096, 4096, 10}, {DType::BF16, 4096, 4096, 14336, 5}, {DType::BF16, 4096, 14336, 4096, 5},
      {DType::BF16, 4096, 4096, 1024, 10}, {DType::BF16, 512, 4096, 4096, 10}, {DType::BF16, 512, 4096, 14336, 10},
      {DType::BF16, 512, 14336, 4096, 10}, {DType::BF16, 512, 4096, 1024, 10}, {DType::BF16, 64, 4096, 14336, 20},
      {DType::BF16, 64, 14336, 4096, 20},  {DType::BF16, 32, 4096, 14336, 20}, {DType::BF16, 64, 4096, 4096, 20},
      {DType::BF16, 64, 4096, 1024, 20}};
  for (const MatmulShape& s : kMany) bench_matmul(gpu, s.dt, s.M, s.K, s.N, s.iters);
  run_bench_few(gpu);
  run_bench_attention(gpu);
  run_bench_sample(gpu);
  // Row ops at decode and prefill sizes (Llama-3.1-8B widths).
  {
    std::mt19937 rng(7);
    HostWeight hg = make_weight(DType::F32, 1, 4096, rng, true);
    auto g = gpu.load_weight(hg.view);
    RopeParams rp;
    rp.head_dim = 128, rp.rot_dim = 128, rp.neox = true;
    for (int i = 0; i < 64; ++i) rp.inv_freq.push_back(static_cast<float>(std::pow(500000.0, -i / 64.0)));
    for (int64_t m : {1, 512}) {
      Tensor x = gpu.alloc(m, 4096), y = gpu.alloc(m, 4096), k = gpu.alloc(m, 1024);
      auto xs = random_floats(rng, static_cast<size_t>(m * 4096));
      gpu.from_host(xs.data(), x);
      std::vector<int32_t> pos(static_cast<size_t>(m));
      for (size_t i = 0; i < pos.size(); ++i) pos[i] = static_cast<int32_t>(1000 + i);
      const float rms = time_ms([&] { gpu.rmsnorm(x, *g, 1e-5f, false, y); }, 200);
      const float rq = time_ms([&] { gpu.rope(x, 32, pos.data(), rp); }, 200);
      const float rk = time_ms([&] { gpu.rope(k, 8, pos.data(), rp); }, 200);
      std::printf("BENCH rows m=%lld: rmsnorm 4096 %.2f us, rope 32x128 %.2f us, rope 8x128 %.2f us\n",
                  static_cast<long long>(m), rms * 1e3, rq * 1e3, rk * 1e3);
      gpu.free(x);
      gpu.free(y);
      gpu.free(k);
    }
  }
}

}  // namespace tf::contract
