#pragma once
// Helpers shared by the CUDA backend's kernels and its tests.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <tuple>
#include <type_traits>
#include <utility>

#include "base/dtype.h"
#include "base/error.h"

#define TF_CUDA_CHECK(expr, ...)                                                        \
  do {                                                                                  \
    cudaError_t tf_err_ = (expr);                                                       \
    if (tf_err_ != cudaSuccess)                                                         \
      ::tf::fail(__VA_ARGS__, ": ", #expr, " failed: ", cudaGetErrorString(tf_err_));   \
  } while (0)

namespace tf::cuda {

// Whether the environment variable reads exactly "0": how a timing switch turns a form off.
inline bool env_zero(const char* name) {
  const char* e = std::getenv(name);
  return e && e[0] == '0' && e[1] == 0;
}

// A form's switch: 0 or 1 where the environment variable reads exactly "0" or "1" (never, or
// wherever it can), else -1 (the form's own rule).
inline int env_switch(const char* name) {
  const char* e = std::getenv(name);
  return e && (e[0] == '0' || e[0] == '1') && e[1] == 0 ? e[0] - '0' : -1;
}

// The stream every kernel and async copy of the backend goes on, made on first use: one in-order
// stream, but not the legacy default one, so that a round can be captured as a graph. It blocks
// with the legacy stream, so synchronous copies still see every earlier kernel.
cudaStream_t stream();

// Programmatic dependent launch (sm_90): a kernel started by launch_kernel() may begin while the
// kernel before it still runs, hiding the launch gap; it calls grid_wait() before it touches memory
// that an earlier kernel writes or reads. On by default where the device has it; TF_CUDA_PDL=0
// turns it off (side-by-side timing).
bool pdl_on();

// Whether the device launches thread block clusters (sm_90).
bool cluster_on();

__device__ __forceinline__ void grid_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Lets the next kernel on the stream start once every block of this one has called it.
__device__ __forceinline__ void grid_launch_next() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// TF_CUDA_POISON_SHARED=1 (tests): before each launch outside a graphed round, every SM's shared
// memory is filled with all-ones words (NaN as f32 and as bf16), so a kernel that reads shared
// memory it never wrote fails its checks instead of passing on what the last kernel left there.
bool poison_shared_on();
void poison_shared();

// A graphed round's record of its launches (cuda_graph.cu), set while one is recorded or replayed.
struct LaunchLog;
extern thread_local LaunchLog* tl_launch_log;
// Records a launch in log; true when it must still be issued (the round is being captured), false
// when it only had to be recorded (the round replays a graph).
bool log_launch(LaunchLog& log, const void* kernel, const cudaLaunchConfig_t& cfg, void* const* args,
                const size_t* sizes, int n);
// After an issued launch of a captured round: notes the graph node it made, or that it made none.
void log_captured(LaunchLog& log);
void log_lost(LaunchLog& log);

// Struct arguments are logged with their padding bytes as they are: a difference there only patches
// a node with the same values (GCC 12's __builtin_clear_padding clobbers members of some nested arrays).
template <class... P, size_t... I>
void launch_logged(LaunchLog& log, void (*kernel)(P...), const cudaLaunchConfig_t& cfg,
                   std::tuple<P...>& vals, std::index_sequence<I...>) {
  void* ptrs[sizeof...(P) + 1] = {static_cast<void*>(&std::get<I>(vals))...};
  const size_t sizes[sizeof...(P) + 1] = {sizeof(P)...};
  if (!log_launch(log, reinterpret_cast<const void*>(kernel), cfg, ptrs, sizes, static_cast<int>(sizeof...(P))))
    return;
  if (cudaLaunchKernelExC(&cfg, reinterpret_cast<const void*>(kernel), ptrs) == cudaSuccess) log_captured(log);
  else log_lost(log);
}

// Launches issued or recorded through launch_on_stream by any thread (they share the one stream),
// so a caller can tell whether a launch it noted is still the last one on the stream.
inline std::atomic<uint64_t> g_launches{0};
inline uint64_t launch_count() { return g_launches.load(std::memory_order_relaxed); }
// A write to device memory outside a launch (a copy, an upload, a memset) counts as one, so that a
// launch_count() noted before it no longer matches.
inline void note_write() { g_launches.fetch_add(1, std::memory_order_relaxed); }

// Launches kernel on the backend's stream, overlapping the kernel before it when `overlap` and
// pdl_on(); errors surface through check_launch like a <<<>>> launch's.
// cluster_y > 1: blocks form clusters of that many along y (sm_90).
template <class... P, class... A>
void launch_on_stream(bool overlap, unsigned cluster_y, void (*kernel)(P...), dim3 grid, dim3 block, size_t smem,
                      A&&... args) {
  g_launches.fetch_add(1, std::memory_order_relaxed);
  cudaLaunchAttribute attr[2] = {};
  unsigned n = 0;
  if (overlap && pdl_on()) {
    attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n++].val.programmaticStreamSerializationAllowed = 1;
  }
  if (cluster_y > 1) {
    attr[n].id = cudaLaunchAttributeClusterDimension;
    attr[n++].val.clusterDim = {1, cluster_y, 1};
  }
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream();
  cfg.attrs = attr;
  cfg.numAttrs = n;
  if (!tl_launch_log && poison_shared_on()) poison_shared();
  if (tl_launch_log) {
    std::tuple<P...> vals{static_cast<P>(args)...};
    launch_logged(*tl_launch_log, kernel, cfg, vals, std::index_sequence_for<P...>{});
    return;
  }
  (void)cudaLaunchKernelEx(&cfg, kernel, static_cast<P>(args)...);
}

// A launch that may overlap the kernel before it.
template <class... P, class... A>
void launch_kernel(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, A&&... args) {
  launch_on_stream(true, 1, kernel, grid, block, smem, std::forward<A>(args)...);
}

// launch_kernel with the blocks in clusters of cluster_y along y (cluster_on() must hold).
template <class... P, class... A>
void launch_kernel_cluster(unsigned cluster_y, void (*kernel)(P...), dim3 grid, dim3 block, size_t smem,
                           A&&... args) {
  launch_on_stream(true, cluster_y, kernel, grid, block, smem, std::forward<A>(args)...);
}

// A launch that starts once the kernel before it has ended, for tile kernels of about a wave:
// blocks placed while that kernel's blocks drain would crowd the SMs freed first.
template <class... P, class... A>
void launch_kernel_whole(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, A&&... args) {
  launch_on_stream(false, 1, kernel, grid, block, smem, std::forward<A>(args)...);
}

// Blocks of a 1-D launch covering n items, at least 1.
inline unsigned grid_for(int64_t n, int threads) {
  const int64_t b = (n + threads - 1) / threads;
  return static_cast<unsigned>(b > 0 ? b : 1);
}

// Sum of a warp's values by a fixed xor butterfly; every lane gets the same bits.
__device__ __forceinline__ float warp_sum(float v) {
  for (int off = 16; off > 0; off >>= 1) v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
  for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}

// Sum over a block of T threads (power of two) by a fixed halving tree in shared memory.
template <int T>
__device__ __forceinline__ float block_sum(float v, float* sh) {
  sh[threadIdx.x] = v;
  __syncthreads();
  for (int s = T / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) sh[threadIdx.x] = __fadd_rn(sh[threadIdx.x], sh[threadIdx.x + s]);
    __syncthreads();
  }
  const float r = sh[0];
  __syncthreads();
  return r;
}

template <int T>
__device__ __forceinline__ float block_max(float v, float* sh) {
  sh[threadIdx.x] = v;
  __syncthreads();
  for (int s = T / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) sh[threadIdx.x] = fmaxf(sh[threadIdx.x], sh[threadIdx.x + s]);
    __syncthreads();
  }
  const float r = sh[0];
  __syncthreads();
  return r;
}

// 2^(x log2 e) by one multiply and the special-function unit: a few instructions where expf
// takes a dozen, the same bits in every kernel that calls it.
__device__ __forceinline__ float exp_sfu(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(__fmul_rn(x, 1.44269504088896341f)));
  return y;
}

// 1 / x on the special-function unit; 0 where x is past 2^126 (flushed), as SiLU wants.
__device__ __forceinline__ float rcp_sfu(float x) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// The activations of act_mul and activate: 0 SiLU, 1 GELU (tanh), 2 squared ReLU, 3 SiLU by
// expf and IEEE division (TF_CUDA_SILU=exact). SiLU is g * rcp(1 + exp(-g)) on the
// special-function unit, since the prefill glu epilogue idles the tensor cores while it runs.
__device__ __forceinline__ float act_value(int act, float g) {
  if (act == 0) return __fmul_rn(g, rcp_sfu(__fadd_rn(1.0f, exp_sfu(-g))));
  if (act == 3) return g / (1.0f + expf(-g));
  if (act == 1) {
    const float c = 0.7978845608028654f;  // sqrt(2 / pi)
    return 0.5f * g * (1.0f + tanhf(c * (g + 0.044715f * g * g * g)));
  }
  const float r = g > 0.0f ? g : 0.0f;
  return r * r;
}

__device__ __forceinline__ float sigmoid_f(float g) { return 1.0f / (1.0f + expf(-g)); }

// Softmax of one row by a block of T threads: max by the fixed tree, exp, sum by the fixed
// tree, divide. sh holds T floats.
template <int T>
__device__ __forceinline__ void softmax_row(const float* l, int64_t n, float* p, float* sh) {
  float mx = -INFINITY;
  for (int64_t i = threadIdx.x; i < n; i += T) mx = fmaxf(mx, l[i]);
  mx = block_max<T>(mx, sh);
  float s = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += T) {
    const float e = expf(l[i] - mx);
    p[i] = e;
    s = s + e;
  }
  s = block_sum<T>(s, sh);
  for (int64_t i = threadIdx.x; i < n; i += T) p[i] = p[i] / s;
}

// Element i of a stored row as f32 (Q8_0 as repacked: int8 values and per-block scales).
__device__ __forceinline__ float load_elem(int dt, const void* data, const float* scales,
                                           int64_t i) {
  switch (dt) {
    case 0: return static_cast<const float*>(data)[i];
    case 1: return __half2float(static_cast<const __half*>(data)[i]);
    case 2: return __bfloat162float(static_cast<const __nv_bfloat16*>(data)[i]);
    default:
      return __fmul_rn(scales[i / 32], static_cast<float>(static_cast<const int8_t*>(data)[i]));
  }
}

}  // namespace tf::cuda

namespace tf::cuda {

// The dtype code load_elem takes: 0 F32, 1 F16, 2 BF16, 3 Q8_0 (repacked).
inline int dt_code(DType t) {
  return t == DType::F32 ? 0 : t == DType::F16 ? 1 : t == DType::BF16 ? 2 : 3;
}

// f rounded to bf16 (nearest even), as bits: every bf16 value the backend stores is this rounding.
__device__ __forceinline__ uint16_t bf16_bits(float f) { return __bfloat16_as_ushort(__float2bfloat16_rn(f)); }

__device__ __forceinline__ uint32_t pack2(uint16_t lo_half, uint16_t hi_half) {
  return static_cast<uint32_t>(lo_half) | (static_cast<uint32_t>(hi_half) << 16);
}

// A K/V pool value: f32, or bf16 bits in pools made in bf16 mode (rounded to nearest even).
__device__ __forceinline__ void kv_put(float* p, float x) { *p = x; }
__device__ __forceinline__ void kv_put(uint16_t* p, float x) { *p = bf16_bits(x); }
__device__ __forceinline__ float kv_get(float x) { return x; }
__device__ __forceinline__ float kv_get(uint16_t h) { return __uint_as_float(static_cast<uint32_t>(h) << 16); }
// The two bf16 values packed in w, the lower half first, widened.
__device__ __forceinline__ float2 kv_get2(uint32_t w) {
  return make_float2(__uint_as_float(w << 16), __uint_as_float(w & 0xffff0000u));
}

// 16 bytes by cp.async to a shared-memory address in the shared window, past L1; zero-filled
// when !valid.
__device__ __forceinline__ void cp_async16_at(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0));
}

// 8 bytes the same way (through L1: cg takes only 16).
__device__ __forceinline__ void cp_async8_at(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 8 : 0));
}

// 4 bytes the same way.
__device__ __forceinline__ void cp_async4_at(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 4 : 0));
}

__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
  cp_async16_at(static_cast<uint32_t>(__cvta_generic_to_shared(dst)), src, valid);
}

__device__ __forceinline__ void cp_async8(void* dst, const void* src, bool valid) {
  cp_async8_at(static_cast<uint32_t>(__cvta_generic_to_shared(dst)), src, valid);
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

}  // namespace tf::cuda
