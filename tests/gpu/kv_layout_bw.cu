// Bandwidth of reading a paged KV pool as decode attention does, in two page layouts: token-major
// ([page][token][kv head][dim], the pool's) and head-major ([page][kv head][token][dim]). One block
// per (row, kv head) reads the row's keys through its page list, in order or shuffled pages.
// Build and run on the card (no project code needed):
//   nvcc -O3 -arch=sm_90a -o kv_layout_bw tests/gpu/kv_layout_bw.cu && ./kv_layout_bw
#include <cstdio>
#include <cstdint>
#include <vector>
#include <algorithm>
#include <random>
#include <cuda_runtime.h>

__global__ void readk(const uint4* __restrict__ pool, const int* __restrict__ pages, int npp, int ps, int heads,
                      int hd16, bool headmajor, int keys, unsigned long long* out) {
  const int row = blockIdx.x, h = blockIdx.y;
  const int* pt = pages + row * npp;
  uint4 acc = make_uint4(0, 0, 0, 0);
  // each key row = hd16 uint4 (256 B for hd 128 bf16); threads stride over (key, piece)
  const int total = keys * hd16;
  for (int i = threadIdx.x; i < total; i += blockDim.x * 4) {
    uint4 v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const int j = i + u * blockDim.x;
      if (j < total) {
        const int key = j / hd16, piece = j % hd16, page = pt[key / ps], off = key % ps;
        const int64_t row_at = headmajor ? ((int64_t)page * heads + h) * ps + off : ((int64_t)page * ps + off) * heads + h;
        v[u] = __ldcs(pool + row_at * hd16 + piece);
      } else v[u] = make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < 4; ++u) acc.x ^= v[u].x, acc.y ^= v[u].y, acc.z ^= v[u].z, acc.w ^= v[u].w;
  }
  if ((acc.x ^ acc.y ^ acc.z ^ acc.w) == 0x12345678u) atomicAdd(out, 1ull);
}

int main() {
  const int rows = 64, heads = 8, hd16 = 16, ps = 16, keys = 577;
  const int npp = (keys + ps - 1) / ps;
  const int pool_pages = 24000;  // ~ 24000*16*8*256 B = 786 MB per K pool
  const size_t pool_bytes = (size_t)pool_pages * ps * heads * hd16 * 16;
  uint4* pool; cudaMalloc(&pool, pool_bytes); cudaMemset(pool, 1, pool_bytes);
  std::vector<int> pg(pool_pages); for (int i = 0; i < pool_pages; ++i) pg[i] = i;
  std::mt19937 rng(1);
  unsigned long long* out; cudaMalloc(&out, 8);
  for (int shuffled = 0; shuffled < 2; ++shuffled) {
    if (shuffled) std::shuffle(pg.begin(), pg.end(), rng);
    std::vector<int> pages(rows * npp);
    for (int i = 0; i < rows * npp; ++i) pages[i] = pg[i * 7 % pool_pages];
    int* dp; cudaMalloc(&dp, pages.size() * 4); cudaMemcpy(dp, pages.data(), pages.size() * 4, cudaMemcpyHostToDevice);
    for (int hm = 0; hm < 2; ++hm)
      for (int threads : {128, 256, 512}) {
        cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
        for (int w = 0; w < 3; ++w) readk<<<dim3(rows, heads), threads>>>(pool, dp, npp, ps, heads, hd16, hm, keys, out);
        cudaEventRecord(a);
        const int reps = 20;
        for (int w = 0; w < reps; ++w) readk<<<dim3(rows, heads), threads>>>(pool, dp, npp, ps, heads, hd16, hm, keys, out);
        cudaEventRecord(b); cudaEventSynchronize(b);
        float ms; cudaEventElapsedTime(&ms, a, b);
        const double bytes = (double)rows * heads * keys * hd16 * 16;
        printf("%s pages, %s, %d threads: %.2f us a launch, %.0f GB/s\n", shuffled ? "shuffled" : "in-order",
               hm ? "head-major" : "token-major", threads, 1e3 * ms / reps, bytes / (1e-3 * ms / reps) / 1e9);
      }
    cudaFree(dp);
  }
  // plain copy rate for reference
  void* c; cudaMalloc(&c, 1 << 30); cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
  cudaMemcpy(c, pool, 1 << 29, cudaMemcpyDeviceToDevice);
  cudaEventRecord(a); for (int i = 0; i < 10; ++i) cudaMemcpy(c, pool, 1 << 29, cudaMemcpyDeviceToDevice); cudaEventRecord(b);
  cudaEventSynchronize(b); float ms; cudaEventElapsedTime(&ms, a, b);
  printf("copy: %.0f GB/s (read+write)\n", 2.0 * 10 * (1 << 29) / (1e-3 * ms) / 1e9);
  printf("err: %s\n", cudaGetErrorString(cudaGetLastError()));
}
