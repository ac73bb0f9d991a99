#pragma once
// Teams of blocks that share a job: a thread block cluster along y whose rank is blockIdx.y, or
// one block alone. They exchange a reduction's shares through shared memory, which every block
// reads in rank order, so all get the same bits.
#include <cstdint>

namespace tf::cuda {

constexpr int kTeamMax = 16;  // blocks a team may have (the largest, non-portable, cluster size)

struct Team {
  unsigned rank, size;
};

// An exchange is team_open, the block's writes of its shares, team_publish, reads of every
// block's shares, team_close; every thread of the team calls each. Between exchanges one cluster
// barrier arrival stays outstanding: a block waits on it (team_open) before it writes a share, so
// it never overwrites one still being read. A team starts with team_close, so its first exchange
// waits on every block having started, and ends with team_open, so no block leaves while another
// may still read its shared memory. Alone, a block syncs its threads instead.
__device__ __forceinline__ void cluster_arrive() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
#else
  __trap();  // teams launch as clusters only where cluster_on()
#endif
}
__device__ __forceinline__ void cluster_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
#else
  __trap();
#endif
}
__device__ __forceinline__ void team_open(const Team& t) {
  if (t.size > 1) cluster_wait();
  else __syncthreads();
}
__device__ __forceinline__ void team_publish(const Team& t) {
  if (t.size > 1) cluster_arrive(), cluster_wait();
  else __syncthreads();
}
__device__ __forceinline__ void team_close(const Team& t) {
  if (t.size > 1) cluster_arrive();
}

// p's place in the shared memory of the team's block r.
template <class T>
__device__ __forceinline__ T* team_at(const Team& t, T* p, unsigned r) {
  if (t.size == 1) return p;
  uint64_t q = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm("mapa.u64 %0, %1, %2;\n" : "=l"(q) : "l"(reinterpret_cast<uint64_t>(p)), "r"(r));
#endif
  return reinterpret_cast<T*>(q);
}

// acc folded with every block's copy of *p by op, in rank order; the loads of each eight blocks
// issue before any is used.
template <class T, class F>
__device__ __forceinline__ T team_fold(const Team& t, const T* p, T acc, F op) {
  constexpr unsigned kAhead = 8;
  for (unsigned q0 = 0; q0 < t.size; q0 += kAhead) {
    T v[kAhead];
#pragma unroll
    for (unsigned u = 0; u < kAhead; ++u)
      if (q0 + u < t.size) v[u] = *team_at(t, p, q0 + u);
#pragma unroll
    for (unsigned u = 0; u < kAhead; ++u)
      if (q0 + u < t.size) acc = op(acc, v[u]);
  }
  return acc;
}

}  // namespace tf::cuda
