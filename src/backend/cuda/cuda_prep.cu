// attention_prep on the device: a row's q/k per-head norms, rope on q and k and the KV store in
// one kernel, with the arithmetic of rmsnorm_kernel, rope_kernel and kv_store (cuda_ops.cu,
// cuda_attention.cu).
#include <cstdint>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_norm.cuh"
#include "backend/cuda/cuda_util.cuh"

namespace tf::cuda {

namespace {

constexpr int kPrepWarps = 4;
constexpr int kPrepMaxHeadDim = 512;

struct PrepArgs {
  float* q;
  float* k;
  const float* v;
  const float* qg;  // per-head norm weights; null: no norm
  const float* kg;
  const float* cs;  // rope table of the rows; null: no rotation
  void* k_pool;  // f32, or bf16 bits (bf16: values rounded to nearest even)
  void* v_pool;
  const int64_t* slot;  // each row's pool slot
  float eps;
  int n_heads, kv_heads, head_dim, half;
  bool add_one, neox, bf16;
  bool vec;  // head_dim % 4 == 0 and every row 16-byte aligned: rows move by float4s
};

// Value i of pool row `row` (f32 or bf16 bits) becomes x.
__device__ __forceinline__ void pool_put(void* row, bool bf16, int i, float x) {
  if (bf16) kv_put(static_cast<uint16_t*>(row) + i, x);
  else kv_put(static_cast<float*>(row) + i, x);
}

// Values i..i+3 of pool row `row` become x (i a multiple of 4, the row 16-byte aligned), rounded
// as pool_put rounds each.
__device__ __forceinline__ void pool_put4(void* row, bool bf16, int i, float4 x) {
  if (!bf16) {
    *reinterpret_cast<float4*>(static_cast<float*>(row) + i) = x;
    return;
  }
  const auto b = [](float v) { return static_cast<uint32_t>(__bfloat16_as_ushort(__float2bfloat16_rn(v))); };
  *reinterpret_cast<uint2*>(static_cast<uint16_t*>(row) + i) = make_uint2(b(x.x) | b(x.y) << 16, b(x.z) | b(x.w) << 16);
}

// A warp per head of a row: q heads, then k heads, then v heads (copied to the pool). A q or k
// head is staged in shared memory and gets rmsnorm_kernel's arithmetic for one row of head_dim
// (virtual thread t sums chunk t, the tail goes to thread nc, the 8 warps' sums add in order),
// then rope_kernel's rotation; k is also written to its pool slot. kPer: values a lane holds at
// most (head_dim <= 32 * kPer); with a.vec every row moves by float4s.
template <int kPer>
__global__ void __launch_bounds__(kPrepWarps * 32) attention_prep_kernel(PrepArgs a) {
  __shared__ __align__(16) float buf[kPrepWarps][32 * kPer];
  grid_wait();
  grid_launch_next();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, hd = a.head_dim;
  const int task = static_cast<int>(blockIdx.y) * kPrepWarps + warp;
  const int64_t r = blockIdx.x, kw = static_cast<int64_t>(a.kv_heads) * hd;
  if (task >= a.n_heads + 2 * a.kv_heads) return;
  if (task >= a.n_heads + a.kv_heads) {
    const int64_t h = task - a.n_heads - a.kv_heads;
    const float* src = a.v + r * kw + h * hd;
    const int64_t at = a.slot[r] * kw + h * hd;
    void* dst = a.bf16 ? static_cast<void*>(static_cast<uint16_t*>(a.v_pool) + at) : static_cast<float*>(a.v_pool) + at;
    if (a.vec) {
#pragma unroll
      for (int j = 0; j < kPer / 4; ++j)
        if (4 * (lane + 32 * j) < hd)
          pool_put4(dst, a.bf16, 4 * (lane + 32 * j), *reinterpret_cast<const float4*>(src + 4 * (lane + 32 * j)));
    } else {
      for (int i = lane; i < hd; i += 32) pool_put(dst, a.bf16, i, src[i]);
    }
    return;
  }
  const bool is_q = task < a.n_heads;
  const int64_t h = is_q ? task : task - a.n_heads;
  float* x = is_q ? a.q + r * a.n_heads * hd + h * hd : a.k + r * kw + h * hd;
  const float* g = is_q ? a.qg : a.kg;
  float* s = buf[warp];
  // The pool slot, the norm weights and the rotation's cos/sin load with x, not each after the
  // step before.
  const int64_t at = is_q ? 0 : a.slot[r] * kw + h * hd;
  float gv[kPer], cv[kPer / 2], sv[kPer / 2];
  const float* cr = a.cs ? a.cs + 2 * r * a.half : nullptr;
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int i = lane + 32 * j;
    gv[j] = g && i < hd ? g[i] : 0.0f;
    if (j < kPer / 2) {
      cv[j] = cr && i < a.half ? cr[i] : 0.0f;
      sv[j] = cr && i < a.half ? cr[a.half + i] : 0.0f;
    }
  }
  if (a.vec) {
#pragma unroll
    for (int j = 0; j < kPer / 4; ++j) {
      const int i = 4 * (lane + 32 * j);
      if (i < hd) *reinterpret_cast<float4*>(s + i) = *reinterpret_cast<const float4*>(x + i);
    }
  } else {
#pragma unroll
    for (int j = 0; j < kPer; ++j)
      if (lane + 32 * j < hd) s[lane + 32 * j] = x[lane + 32 * j];
  }
  __syncwarp();
  if (g) {
    const int nc = hd / 4;
    float total = 0.0f;
    for (int w = 0; 32 * w <= nc; ++w) {
      const int t = 32 * w + lane;
      float sq = 0.0f;
      if (t < nc) sq = add_squares4(sq, s[4 * t], s[4 * t + 1], s[4 * t + 2], s[4 * t + 3]);
      if (t == nc)
        for (int i = 4 * nc; i < hd; ++i) sq = __fadd_rn(sq, __fmul_rn(s[i], s[i]));
      const float ws = warp_sum(sq);
      total = w == 0 ? ws : __fadd_rn(total, ws);
    }
    const float inv = 1.0f / sqrtf(total / static_cast<float>(hd) + a.eps);
    __syncwarp();
#pragma unroll
    for (int j = 0; j < kPer; ++j)
      if (lane + 32 * j < hd) s[lane + 32 * j] = norm_elem(s[lane + 32 * j], gv[j], inv, a.add_one);
    __syncwarp();
  }
  if (cr) {
    const int bstep = a.neox ? a.half : 1;
#pragma unroll
    for (int j = 0; j < kPer / 2; ++j) {
      const int i = lane + 32 * j;
      if (i >= a.half) break;
      const int ia = a.neox ? i : 2 * i;
      const float v0 = s[ia], v1 = s[ia + bstep], c = cv[j], sn = sv[j];
      s[ia] = __fsub_rn(__fmul_rn(v0, c), __fmul_rn(v1, sn));
      s[ia + bstep] = __fadd_rn(__fmul_rn(v1, c), __fmul_rn(v0, sn));
    }
    __syncwarp();
  }
  void* pool = is_q ? nullptr
               : a.bf16 ? static_cast<void*>(static_cast<uint16_t*>(a.k_pool) + at)
                        : static_cast<float*>(a.k_pool) + at;
  if (a.vec) {
#pragma unroll
    for (int j = 0; j < kPer / 4; ++j) {
      const int i = 4 * (lane + 32 * j);
      if (i >= hd) break;
      const float4 v = *reinterpret_cast<const float4*>(s + i);
      *reinterpret_cast<float4*>(x + i) = v;
      if (pool) pool_put4(pool, a.bf16, i, v);
    }
    return;
  }
  for (int i = lane; i < hd; i += 32) {
    x[i] = s[i];
    if (pool) pool_put(pool, a.bf16, i, s[i]);
  }
}

// TF_CUDA_FUSE_PREP=0 runs rmsnorm, rope and kv_store one by one, for timing.
bool fuse_prep() {
  static const bool on = !env_zero("TF_CUDA_FUSE_PREP");
  return on;
}

}  // namespace

void CudaBackend::attention_prep(Tensor q, Tensor k, const Tensor& v, const QkNorm& norm,
                                 const RopeParams& rope, const AttnParams& p, KvStorage& kvs,
                                 int layer, const RowLayout& rows) {
  const int hd = p.head_dim, half = rope.rot_dim > 0 ? rope.rot_dim / 2 : 0;
  const auto norm_fits = [&](const Weight* w) { return !w || (w->rows == 1 && w->cols == hd); };
  const bool rope_fits = half == 0 || (rope.head_dim == hd && rope.rot_dim % 2 == 0 && rope.rot_dim <= hd &&
                                       rope.inv_freq.size() == static_cast<size_t>(half));
  // Shapes the fused kernel does not take go op by op, whose checks name what is wrong.
  if (!fuse_prep() || hd <= 0 || hd > kPrepMaxHeadDim || p.n_heads <= 0 || p.n_kv_heads <= 0 ||
      q.cols != static_cast<int64_t>(p.n_heads) * hd || q.rows != k.rows || q.rows > 0x7fffffff ||
      p.n_heads + 2 * p.n_kv_heads > 65535 * kPrepWarps || !norm_fits(norm.q) || !norm_fits(norm.k) ||
      !rope_fits || (q.rows > 0 && rows.pos.size() < static_cast<size_t>(q.rows))) {
    Backend::attention_prep(q, k, v, norm, rope, p, kvs, layer, rows);
    return;
  }
  const ProfScope prof(*this, "attention_prep", nullptr, q.rows);
  check_tensor(q, "attention_prep", "q");
  const CudaKv& kv = as_cuda_kv(kvs, "attention_prep");
  TF_CHECK(kv.head_dim == hd && kv.kv_heads == p.n_kv_heads, "attention_prep: ", p.n_kv_heads, " kv heads of ",
           hd, " for a pool of ", kv.kv_heads, " of ", kv.head_dim);
  const int64_t* slot = kv_slots(kv, layer, k, v, rows, "attention_prep");
  if (q.rows == 0) return;
  PrepArgs a{};
  a.q = q.data, a.k = k.data, a.v = v.data;
  a.qg = norm.q ? as_cuda(*norm.q, "attention_prep").f32 : nullptr;
  a.kg = norm.k ? as_cuda(*norm.k, "attention_prep").f32 : nullptr;
  a.cs = half > 0 ? rope_cs(rows.pos.data(), q.rows, rope) : nullptr;
  a.k_pool = kv.k_layer(layer), a.v_pool = kv.v_layer(layer), a.slot = slot, a.bf16 = kv.bf16();
  a.eps = norm.eps, a.add_one = norm.add_one, a.neox = rope.neox;
  a.n_heads = p.n_heads, a.kv_heads = p.n_kv_heads, a.head_dim = hd, a.half = half;
  const auto al16 = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; };
  a.vec = hd % 4 == 0 && al16(a.q) && al16(a.k) && al16(a.v) && al16(a.k_pool) && al16(a.v_pool);
  const int tasks = p.n_heads + 2 * p.n_kv_heads;
  const dim3 grid(static_cast<unsigned>(q.rows), static_cast<unsigned>((tasks + kPrepWarps - 1) / kPrepWarps));
  // The fewest values a lane holds: the unrolled loops test no more than the head has.
  const auto kernel = hd <= 128 ? attention_prep_kernel<4> : hd <= 256 ? attention_prep_kernel<8> : attention_prep_kernel<16>;
  launch_kernel(kernel, grid, kPrepWarps * 32, 0, a);
  check_launch("attention_prep");
  kv_written_at_ = launch_count();
}

}  // namespace tf::cuda
