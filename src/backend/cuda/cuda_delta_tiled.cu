// The gated delta rule's chunked form on register tiles, for k_dim 128 and chunks of 64 rows.
//
// What does not depend on the state is made first for every chunk at once (prep, a block per
// chunk and k head): q and k normalized, then per v head exp(g), exp(g_last - g), beta, A's
// substitution T = (I - A)^-1 and P, as the one-kernel chunked form defines them. A block per
// (sequence, v head, 32 v columns) then walks its chunks: R = beta (v - exp(g) K S); N = T R;
// y = exp(g) Q S + P N; S = exp(g_last) S + K^T diag(exp(g_last - g)) N.
//
// Order rule: each sum is the one-kernel form's chain (k or rows ascending, the same operands),
// so a chunk's results depend only on its sequence's rows and state, never on the round.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cuda/chunk_passes.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_delta.cuh"
#include "backend/cuda/cuda_util.cuh"

namespace tf::cuda {

namespace {

constexpr int kL = 64;            // chunk rows
constexpr int kKd = 128;          // k_dim
constexpr int kKS = kKd + 4;      // shared row stride of q and k: float4 rows four banks apart
constexpr int kVT = 32;           // v columns a scan block
constexpr int kThreads = 256;
// Per (chunk, v head): exp(g), exp(g_last - g), beta and exp(g_last) (rows of kL), then M [kL x kL]
// holding T - I strictly below the diagonal and P^T on and above it.
constexpr int kHead = 4 * kL;
constexpr int kItemV = kHead + kL * kL;
// Per (chunk, k head): q normalized and scaled, then k normalized, [kL x kKd] each.
constexpr int kItemK = 2 * kL * kKd;
constexpr size_t kPrepSmem = (2 * kL * kKS + 2 * kL * kL + 2 * kL) * sizeof(float);
constexpr int kBuf = 2 * kL * kKS + kItemV;  // one chunk's q, k and prep rows in shared memory
constexpr size_t kScanSmem = (2 * kBuf + kKd * kVT + 2 * kL * kVT) * sizeof(float);

struct TiledArgs {
  const int32_t* items;  // per chunk: job, first row within the job
  const int32_t* first;  // per job: its first chunk
  float* hv;             // kItemV floats per (chunk, v head)
  float* hk;             // kItemK floats per (chunk, k head)
  int k_heads;
};

__device__ __forceinline__ float4 ld4(const float* p) { return *reinterpret_cast<const float4*>(p); }
__device__ __forceinline__ float2 ld2(const float* p) { return *reinterpret_cast<const float2*>(p); }
__device__ __forceinline__ float at4(const float4& v, int e) { return e == 0 ? v.x : e == 1 ? v.y : e == 2 ? v.z : v.w; }

// A block per (chunk, k head): q and k normalized, and their products k.k and q.k, once; then for
// each v head of the k head its rows' g and beta, A, its substitution and P.
__global__ void __launch_bounds__(kThreads) delta_tiled_prep_kernel(DeltaArgs a, TiledArgs w) {
  grid_wait();
  grid_launch_next();
  extern __shared__ float4 prep_sm4[];
  float* sQ = reinterpret_cast<float*>(prep_sm4);  // [kL x kKS]
  float* sK = sQ + kL * kKS;                        // [kL x kKS]
  float* sA = sK + kL * kKS;                        // [kL x kL]
  float* sT = sA + kL * kL;                         // [kL x kL]
  float* sg = sT + kL * kL;                         // [kL]
  float* sb = sg + kL;                              // [kL]
  const int it = blockIdx.x, kh = blockIdx.y, tid = threadIdx.x, v_heads = gridDim.y * a.hv_per_k;
  const int warp = tid / 32, lane = tid % 32;
  const SeqJob j = a.jobs[w.items[2 * it]];
  const int c0 = w.items[2 * it + 1], len = min(kL, j.n - c0);
  const int64_t base = j.row0 + c0;
  // A warp's rows t = warp + 8 n: every load issued before the first sum waits on one.
  constexpr int kRows = kL / (kThreads / 32);
  float qv[kRows][kKd / 32], kv[kRows][kKd / 32];
#pragma unroll
  for (int n = 0; n < kRows; ++n) {
    const int t = warp + (kThreads / 32) * n;
    const int64_t r = base + min(t, len - 1);
    const float* qr = a.q + r * a.ldq + static_cast<int64_t>(kh) * kKd;
    const float* kr = a.k + r * a.ldk + static_cast<int64_t>(kh) * kKd;
#pragma unroll
    for (int u = 0; u < kKd / 32; ++u) qv[n][u] = qr[lane + 32 * u], kv[n][u] = kr[lane + 32 * u];
  }
#pragma unroll
  for (int n = 0; n < kRows; ++n) {
    const int t = warp + (kThreads / 32) * n;
    if (t < len) {
      float ssq = 0.0f, ssk = 0.0f;
#pragma unroll
      for (int u = 0; u < kKd / 32; ++u) {
        ssq = __fmaf_rn(qv[n][u], qv[n][u], ssq);
        ssk = __fmaf_rn(kv[n][u], kv[n][u], ssk);
      }
      const float iq = delta_inv_norm(warp_sum(ssq)), ik = delta_inv_norm(warp_sum(ssk));
#pragma unroll
      for (int u = 0; u < kKd / 32; ++u) {
        sQ[t * kKS + lane + 32 * u] = (qv[n][u] * iq) * a.scale;
        sK[t * kKS + lane + 32 * u] = kv[n][u] * ik;
      }
    } else {
#pragma unroll
      for (int u = 0; u < kKd / 32; ++u) sQ[t * kKS + lane + 32 * u] = sK[t * kKS + lane + 32 * u] = 0.0f;
    }
  }
  __syncthreads();
  // k.k and q.k on 4 x 4 tiles: rows ti + 16u, columns tm + 16v, so a quarter warp's float4 loads
  // fall on eight rows four banks apart. Only tiles v <= u: the others hold columns past their rows,
  // which A and P never take.
  const int ti = tid / 16, tm = tid % 16;
  float kk[4][4] = {}, qk[4][4] = {};
  for (int x = 0; x < kKd; x += 4) {
    float4 ki[4], qi[4], km[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      ki[u] = ld4(sK + (ti + 16 * u) * kKS + x);
      qi[u] = ld4(sQ + (ti + 16 * u) * kKS + x);
      km[u] = ld4(sK + (tm + 16 * u) * kKS + x);
    }
#pragma unroll
    for (int e = 0; e < 4; ++e)
#pragma unroll
      for (int u = 0; u < 4; ++u)
#pragma unroll
        for (int v = 0; v <= u; ++v) {
          kk[u][v] = __fmaf_rn(at4(ki[u], e), at4(km[v], e), kk[u][v]);
          qk[u][v] = __fmaf_rn(at4(qi[u], e), at4(km[v], e), qk[u][v]);
        }
  }
  {
    float* hk = w.hk + (static_cast<int64_t>(it) * w.k_heads + kh) * kItemK;
    for (int e = tid; e < 2 * kL * kKd / 4; e += kThreads) {
      const int r = e / (kKd / 4), x = (e % (kKd / 4)) * 4;
      *reinterpret_cast<float4*>(hk + r * kKd + x) = ld4(sQ + r * kKS + x);
    }
  }
  for (int hj = 0; hj < a.hv_per_k; ++hj) {
    const int h = kh * a.hv_per_k + hj;
    if (tid < kL) {
      const int t = tid;
      if (t < len) {
        const int64_t r = base + t;
        sg[t] = delta_g(expf(a.A_log[h]), a.a[r * a.lda + h], a.dt_bias[h]);
        sb[t] = delta_beta(a.b[r * a.ldb + h]);
      } else {
        sg[t] = sb[t] = 0.0f;
      }
    }
    __syncthreads();
    if (tid == 0)
      for (int t = 1; t < len; ++t) sg[t] = sg[t - 1] + sg[t];
    __syncthreads();
    float* hv = w.hv + (static_cast<int64_t>(it) * v_heads + h) * kItemV;
    float* M = hv + kHead;
#pragma unroll
    for (int u = 0; u < 4; ++u)
#pragma unroll
      for (int v = 0; v < 4; ++v) {
        const int i = ti + 16 * u, m = tm + 16 * v;
        // Rows past the chunk's end have g 0 against a cumulated g: their decay could overflow.
        const float dec = m <= i && i < len ? expf(sg[i] - sg[m]) : 0.0f;
        sA[i * kL + m] = m < i ? -(sb[i] * kk[u][v]) * dec : 0.0f;
        if (m <= i) M[m * kL + i] = qk[u][v] * dec;
      }
    __syncthreads();
    // Forward substitution, a thread per column: column c needs only its own earlier rows.
    if (tid < kL) {
      const int c = tid;
      for (int i = c + 1; i < len; ++i) {
        float acc = 0.0f;
        for (int m = c + 1; m < i; ++m) acc = __fmaf_rn(sA[i * kL + m], sT[m * kL + c], acc);
        sT[i * kL + c] = sA[i * kL + c] + acc;
      }
    }
    __syncthreads();
    for (int e = tid; e < kL * kL; e += kThreads) {
      const int i = e / kL, m = e % kL;
      if (m < i) M[e] = i < len ? sT[e] : 0.0f;
    }
    if (tid < kL) {
      const int t = tid;
      const float gl = sg[len - 1];
      hv[t] = t < len ? expf(sg[t]) : 0.0f;
      hv[kL + t] = t < len ? expf(gl - sg[t]) : 0.0f;
      hv[2 * kL + t] = sb[t];
      hv[3 * kL + t] = t == 0 ? expf(gl) : 0.0f;
    }
    __syncthreads();  // the next v head rewrites sg, sb, sA and sT
  }
}

__global__ void __launch_bounds__(kThreads, 1) delta_tiled_scan_kernel(DeltaArgs a, TiledArgs w) {
  grid_wait();
  grid_launch_next();
  extern __shared__ float4 scan_sm4[];
  float* bufs = reinterpret_cast<float*>(scan_sm4);  // two of: q, k [kL x kKS] each, prep rows
  float* sS = bufs + 2 * kBuf;                         // [kKd x kVT]
  float* sR = sS + kKd * kVT;                          // [kL x kVT]
  float* sN = sR + kL * kVT;                           // [kL x kVT]
  const SeqJob j = a.jobs[blockIdx.x];
  const int h = blockIdx.y, kh = h / a.hv_per_k, tid = threadIdx.x, Vd = a.Vd;
  const int v0 = blockIdx.z * kVT, nv = min(kVT, Vd - v0);
  const int64_t so = static_cast<int64_t>(h) * kKd * Vd + v0;
  const int64_t vcol = static_cast<int64_t>(h) * Vd + v0;
  const int first = w.first[blockIdx.x], nch = (j.n + kL - 1) / kL;
  const int vh = gridDim.y;
  // The state tile in registers: rows 4 tx .. 4 tx + 3, columns 4 tq .. 4 tq + 3.
  const int tx = tid / 8, tq = tid % 8;
  float s[4][4];
#pragma unroll
  for (int u = 0; u < 4; ++u)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int c = 4 * tq + e;
      s[u][e] = c < nv ? a.pool[j.src + so + static_cast<int64_t>(4 * tx + u) * Vd + c] : 0.0f;
      sS[(4 * tx + u) * kVT + c] = s[u][e];
    }
  auto load = [&](int ci, float* dst) {
    const int64_t item = first + ci;
    const float* gk = w.hk + (item * w.k_heads + kh) * kItemK;
    for (int e = tid; e < 2 * kL * kKd / 4; e += kThreads) {
      const int r = e / (kKd / 4), x = (e % (kKd / 4)) * 4;
      cp_async16(dst + r * kKS + x, gk + r * kKd + x, true);
    }
    const float* gh = w.hv + (item * vh + h) * kItemV;
    float* dh = dst + 2 * kL * kKS;
    for (int e = tid; e < kItemV / 4; e += kThreads) cp_async16(dh + 4 * e, gh + 4 * e, true);
    cp_async_commit();
  };
  load(0, bufs);
  // Rows 4 ti .. 4 ti + 3 and columns 2 tc, 2 tc + 1 of a chunk's L x 32 products.
  const int ti = tid / 16, tc = tid % 16;
  for (int ci = 0; ci < nch; ++ci) {
    float* Q = bufs + (ci & 1) * kBuf;
    const float* K = Q + kL * kKS;
    const float* H = K + kL * kKS;
    const float* M = H + kHead;
    cp_async_wait<0>();
    __syncthreads();
    if (ci + 1 < nch) load(ci + 1, bufs + ((ci + 1) & 1) * kBuf);
    const int len = min(kL, j.n - ci * kL);
    const int64_t row0 = j.row0 + static_cast<int64_t>(ci) * kL;
    float vv[4][2];
#pragma unroll
    for (int u = 0; u < 4; ++u)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int i = 4 * ti + u, c = 2 * tc + e;
        vv[u][e] = i < len && c < nv ? a.v[(row0 + i) * a.ldv + vcol + c] : 0.0f;
      }
    float qs[4][2] = {}, ks[4][2] = {};
    // The loops below are unrolled so that each step's shared loads go out before the FMAs wait.
#pragma unroll 4
    for (int x = 0; x < kKd; x += 4) {
      float4 q4[4], k4[4];
      float2 s2[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        q4[u] = ld4(Q + (4 * ti + u) * kKS + x);
        k4[u] = ld4(K + (4 * ti + u) * kKS + x);
        s2[u] = ld2(sS + (x + u) * kVT + 2 * tc);
      }
#pragma unroll
      for (int e = 0; e < 4; ++e)
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          ks[u][0] = __fmaf_rn(at4(k4[u], e), s2[e].x, ks[u][0]);
          ks[u][1] = __fmaf_rn(at4(k4[u], e), s2[e].y, ks[u][1]);
          qs[u][0] = __fmaf_rn(at4(q4[u], e), s2[e].x, qs[u][0]);
          qs[u][1] = __fmaf_rn(at4(q4[u], e), s2[e].y, qs[u][1]);
        }
    }
    float r[4][2];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const int i = 4 * ti + u;
#pragma unroll
      for (int e = 0; e < 2; ++e) r[u][e] = H[2 * kL + i] * (vv[u][e] - H[i] * ks[u][e]);
      *reinterpret_cast<float2*>(sR + i * kVT + 2 * tc) = make_float2(r[u][0], r[u][1]);
    }
    __syncthreads();
    // N = R + (T - I) R, each row's sum over m < i ascending.
    {
      float acc[4][2] = {};
#pragma unroll 4
      for (int m = 0; m < 4 * ti + 4; m += 4) {
        float4 t4[4];
        float2 r2[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          t4[u] = ld4(M + (4 * ti + u) * kL + m);
          r2[u] = ld2(sR + (m + u) * kVT + 2 * tc);
        }
#pragma unroll
        for (int e = 0; e < 4; ++e)
#pragma unroll
          for (int u = 0; u < 4; ++u)
            if (m + e < 4 * ti + u) {
              acc[u][0] = __fmaf_rn(at4(t4[u], e), r2[e].x, acc[u][0]);
              acc[u][1] = __fmaf_rn(at4(t4[u], e), r2[e].y, acc[u][1]);
            }
      }
#pragma unroll
      for (int u = 0; u < 4; ++u)
        *reinterpret_cast<float2*>(sN + (4 * ti + u) * kVT + 2 * tc) =
            make_float2(r[u][0] + acc[u][0], r[u][1] + acc[u][1]);
    }
    __syncthreads();
    // y = exp(g) Q S + P N, each row's sum over m <= i ascending; P[i][m] is M[m][i].
    {
      float acc[4][2] = {};
#pragma unroll 8
      for (int m = 0; m < 4 * ti + 4; ++m) {
        const float4 p4 = ld4(M + m * kL + 4 * ti);
        const float2 n2 = ld2(sN + m * kVT + 2 * tc);
#pragma unroll
        for (int u = 0; u < 4; ++u)
          if (m <= 4 * ti + u) {
            acc[u][0] = __fmaf_rn(at4(p4, u), n2.x, acc[u][0]);
            acc[u][1] = __fmaf_rn(at4(p4, u), n2.y, acc[u][1]);
          }
      }
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int i = 4 * ti + u;
        if (i >= len) continue;
#pragma unroll
        for (int e = 0; e < 2; ++e)
          if (2 * tc + e < nv) a.y[(row0 + i) * a.ldy + vcol + 2 * tc + e] = H[i] * qs[u][e] + acc[u][e];
      }
    }
    // S = exp(g_last) S + sum_m (k_m exp(g_last - g_m)) N_m, m ascending; phase 1's reads of sS
    // are behind the barriers above.
    {
      float acc[4][4] = {};
#pragma unroll 8
      for (int m = 0; m < len; ++m) {
        const float4 k4 = ld4(K + m * kKS + 4 * tx);
        const float sc = H[kL + m];
        const float4 n4 = ld4(sN + m * kVT + 4 * tq);
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          const float kx = at4(k4, u) * sc;
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[u][e] = __fmaf_rn(kx, at4(n4, e), acc[u][e]);
        }
      }
      const float el = H[3 * kL];
#pragma unroll
      for (int u = 0; u < 4; ++u)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          s[u][e] = el * s[u][e] + acc[u][e];
          sS[(4 * tx + u) * kVT + 4 * tq + e] = s[u][e];
        }
    }
  }
#pragma unroll
  for (int u = 0; u < 4; ++u)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int c = 4 * tq + e;
      if (c < nv) a.pool[j.dst + so + static_cast<int64_t>(4 * tx + u) * Vd + c] = s[u][e];
    }
}

}  // namespace

bool delta_tiled_takes(int k_dim, int chunk) {
  return k_dim == kKd && chunk == kL && env_switch("TF_CUDA_DELTA_TILED") != 0;
}

void delta_tiled(CudaBackend& be, const DeltaArgs& a, const std::vector<SeqJob>& jobs, int64_t rows, int k_heads,
                 int v_heads) {
  const char* op = "gated_delta";
  const uint64_t per = static_cast<uint64_t>(v_heads) * kItemV + static_cast<uint64_t>(k_heads) * kItemK;
  const int64_t cap = chunk_capacity(rows, kL);
  auto* buf = static_cast<float*>(be.buffer(kSlotDelta, static_cast<uint64_t>(cap) * per * sizeof(float)));
  static bool raised = false;
  if (!raised) {
    TF_CUDA_CHECK(cudaFuncSetAttribute(delta_tiled_prep_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(kPrepSmem)), op);
    TF_CUDA_CHECK(cudaFuncSetAttribute(delta_tiled_scan_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(kScanSmem)), op);
    raised = true;
  }
  std::vector<int64_t> n;
  for (const SeqJob& j : jobs) n.push_back(j.n);
  const std::vector<size_t> at = chunk_passes(n, kL, cap);
  for (size_t p = 0; p + 1 < at.size(); ++p) {
    const size_t j0 = at[p], j1 = at[p + 1];
    // Per chunk: job (within the pass), first row within the job; then per job its first chunk.
    std::vector<int32_t> meta;
    for (size_t i = j0; i < j1; ++i)
      for (int32_t c0 = 0; c0 < jobs[i].n; c0 += kL) meta.push_back(static_cast<int32_t>(i - j0)), meta.push_back(c0);
    const size_t nch = meta.size() / 2;
    for (size_t i = j0, first = 0; i < j1; ++i) {
      meta.push_back(static_cast<int32_t>(first));
      first += static_cast<size_t>((jobs[i].n + kL - 1) / kL);
    }
    const auto* d = static_cast<const int32_t*>(be.meta(meta.data(), meta.size() * 4));
    const uint64_t fv = nch * static_cast<uint64_t>(v_heads) * kItemV;
    const TiledArgs w{d, d + 2 * nch, buf, buf + fv, k_heads};
    DeltaArgs ap = a;
    ap.jobs = a.jobs + j0;
    // A pass's prep waits (grid_wait) for the pass before it to finish reading the scratch.
    launch_kernel(delta_tiled_prep_kernel, dim3(static_cast<unsigned>(nch), static_cast<unsigned>(k_heads)),
                  kThreads, kPrepSmem, ap, w);
    check_launch(op);
    launch_kernel(delta_tiled_scan_kernel,
                  dim3(static_cast<unsigned>(j1 - j0), static_cast<unsigned>(v_heads),
                       static_cast<unsigned>((a.Vd + kVT - 1) / kVT)),
                  kThreads, kScanSmem, ap, w);
    check_launch(op);
  }
}

}  // namespace tf::cuda
