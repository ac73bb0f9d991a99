// Gated DeltaNet on the GPU: the step (recurrent) form, on register columns for the real models'
// k_dim of 128, and the chunked (WY) form in one kernel (cuda_delta_tiled.cu holds the chunked
// form on register tiles, for the real models' shapes).
//
// Order rule: the state's v columns evolve independently, so a block takes one sequence, one v
// head and one tile of v columns; every sum runs in one fixed order that depends only on the
// shapes, and chunks are counted from the sequence's first row of the call.
#include <algorithm>
#include <cmath>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_delta.cuh"
#include "backend/cuda/cuda_state.cuh"
#include "backend/cuda/cuda_util.cuh"

namespace tf::cuda {

namespace {

constexpr int kStepThreads = 128;
constexpr int kStepBatch = 16;  // state loads a step thread sends before using them
constexpr int kChunkThreads = 256;

// Column c's state rows i0 .. i0 + kStepBatch - 1 (zero past Kd), every load sent before any use.
__device__ __forceinline__ void load_state(float (&sv)[kStepBatch], const float* S, int i0, int Kd, int Vd,
                                           int c) {
#pragma unroll
  for (int u = 0; u < kStepBatch; ++u) sv[u] = i0 + u < Kd ? S[static_cast<int64_t>(i0 + u) * Vd + c] : 0.0f;
}

// Step form: per row, warp 0 makes the 1/|q|, 1/|k|, exp(g) and beta; thread per v column:
// S = exp(g) S; kv = S^T k; S += k beta (v - kv); y = S^T q, sums over k in order.
__global__ void __launch_bounds__(kStepThreads) delta_step_kernel(DeltaArgs a) {
  grid_wait();
  grid_launch_next();
  extern __shared__ float sm[];
  float* sq = sm;
  float* sk = sm + a.Kd;
  float* sc = sk + a.Kd;  // inv |q|, inv |k|, exp(g), beta
  const SeqJob j = a.jobs[blockIdx.x];
  const int h = blockIdx.y, kh = h / a.hv_per_k, tid = threadIdx.x, Kd = a.Kd, Vd = a.Vd;
  const int64_t so = static_cast<int64_t>(h) * Kd * Vd;
  const float A = expf(a.A_log[h]), bias = a.dt_bias[h];
  for (int t = 0; t < j.n; ++t) {
    const int64_t r = j.row0 + t;
    const float* qr = a.q + r * a.ldq + static_cast<int64_t>(kh) * Kd;
    const float* kr = a.k + r * a.ldk + static_cast<int64_t>(kh) * Kd;
    if (tid < 32) {
      float ssq = 0.0f, ssk = 0.0f;
      for (int i = tid; i < Kd; i += 32) {
        ssq = __fmaf_rn(qr[i], qr[i], ssq);
        ssk = __fmaf_rn(kr[i], kr[i], ssk);
      }
      ssq = warp_sum(ssq);
      ssk = warp_sum(ssk);
      if (tid == 0) {
        sc[0] = delta_inv_norm(ssq);
        sc[1] = delta_inv_norm(ssk);
        sc[2] = expf(delta_g(A, a.a[r * a.lda + h], bias));
        sc[3] = delta_beta(a.b[r * a.ldb + h]);
      }
    }
    __syncthreads();
    for (int i = tid; i < Kd; i += kStepThreads) {
      sq[i] = (qr[i] * sc[0]) * a.scale;
      sk[i] = kr[i] * sc[1];
    }
    __syncthreads();
    const float eg = sc[2], beta = sc[3];
    const float* S_in = a.pool + (t == 0 ? j.src : j.dst) + so;
    float* S = a.pool + j.dst + so;
    for (int c = tid; c < Vd; c += kStepThreads) {
      // S_in may be S, so the compiler would keep each load behind the store before it: a batch
      // of loads goes out first (each element is read once, then written once).
      float kv = 0.0f, sv[kStepBatch];
      for (int i0 = 0; i0 < Kd; i0 += kStepBatch) {
        load_state(sv, S_in, i0, Kd, Vd, c);
#pragma unroll
        for (int u = 0; u < kStepBatch; ++u) {
          if (i0 + u >= Kd) break;
          const float s = sv[u] * eg;
          S[static_cast<int64_t>(i0 + u) * Vd + c] = s;
          kv = __fmaf_rn(s, sk[i0 + u], kv);
        }
      }
      const float delta = (a.v[r * a.ldv + static_cast<int64_t>(h) * Vd + c] - kv) * beta;
      float o = 0.0f;
      for (int i0 = 0; i0 < Kd; i0 += kStepBatch) {
        load_state(sv, S, i0, Kd, Vd, c);
#pragma unroll
        for (int u = 0; u < kStepBatch; ++u) {
          if (i0 + u >= Kd) break;
          const float s = __fmaf_rn(sk[i0 + u], delta, sv[u]);
          S[static_cast<int64_t>(i0 + u) * Vd + c] = s;
          o = __fmaf_rn(s, sq[i0 + u], o);
        }
      }
      a.y[r * a.ldy + static_cast<int64_t>(h) * Vd + c] = o;
      if (t + 1 < j.n && j.nkeep > 0) {
        float* kp = a.keep_pool + a.keep[j.keep0 + t] + so;
        for (int i = 0; i < Kd; ++i) kp[static_cast<int64_t>(i) * Vd + c] = S[static_cast<int64_t>(i) * Vd + c];
      }
    }
    __syncthreads();
  }
}

// Four floats of shared memory read anew: the second pass reads sk again rather than keep the
// first pass's 128 values in registers, which would spill.
__device__ __forceinline__ float4 lds4_again(const float* p) {
  float4 v;
  asm volatile("ld.volatile.shared.v4.f32 {%0, %1, %2, %3}, [%4];\n"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "r"(static_cast<uint32_t>(__cvta_generic_to_shared(p))));
  return v;
}

constexpr int kRegKd = 128;   // the k_dim the register step form takes (the real models')
constexpr int kRegCols = 32;  // v columns a register step block: one warp, a column a lane

// Step form with a column's state in its lane's registers: a warp per (sequence, v head, 32 v
// columns) loads each column once, runs every row's two passes on it, and stores it once. Each
// lane makes the row's 1/|q|, 1/|k| (the butterfly gives every lane the same sums), exp(g) and beta
// as delta_step_kernel does, and every chain is its chain, so the bits are the same. k_dim is a
// constant so that the passes have no branch and their shared loads run ahead of the chains.
__global__ void __launch_bounds__(kRegCols) delta_step_reg_kernel(DeltaArgs a) {
  grid_wait();
  grid_launch_next();
  __shared__ __align__(16) float sq[kRegKd];
  __shared__ __align__(16) float sk[kRegKd];
  const SeqJob j = a.jobs[blockIdx.x];
  if (j.n == 0) return;
  const int h = blockIdx.y, kh = h / a.hv_per_k, lane = threadIdx.x, Vd = a.Vd;
  const int c = blockIdx.z * kRegCols + lane;
  const bool col = c < Vd;
  const int64_t so = static_cast<int64_t>(h) * kRegKd * Vd + (col ? c : 0);
  // The column comes in through shared memory by cp.async: every load in flight at once, with no
  // register held for its value or address until the row's passes need it.
  __shared__ float stage[kRegKd * kRegCols];
  {
    const float* S_in = a.pool + j.src + so;
    const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(stage + lane));
#pragma unroll 8
    for (int i = 0; i < kRegKd; ++i, S_in += Vd) cp_async4_at(dst + 4 * i * kRegCols, S_in, col);
    cp_async_commit();
  }
  const float A = expf(a.A_log[h]), bias = a.dt_bias[h];
  float s[kRegKd];
  for (int t = 0; t < j.n; ++t) {
    const int64_t r = j.row0 + t;
    const float* qr = a.q + r * a.ldq + static_cast<int64_t>(kh) * kRegKd;
    const float* kr = a.k + r * a.ldk + static_cast<int64_t>(kh) * kRegKd;
    float qv[kRegKd / 32], kv4[kRegKd / 32];
#pragma unroll
    for (int u = 0; u < kRegKd / 32; ++u) qv[u] = qr[lane + 32 * u], kv4[u] = kr[lane + 32 * u];
    float ssq = 0.0f, ssk = 0.0f;
#pragma unroll
    for (int u = 0; u < kRegKd / 32; ++u) {
      ssq = __fmaf_rn(qv[u], qv[u], ssq);
      ssk = __fmaf_rn(kv4[u], kv4[u], ssk);
    }
    const float iq = delta_inv_norm(warp_sum(ssq)), ik = delta_inv_norm(warp_sum(ssk));
    const float eg = expf(delta_g(A, a.a[r * a.lda + h], bias)), beta = delta_beta(a.b[r * a.ldb + h]);
    const float v = col ? a.v[r * a.ldv + static_cast<int64_t>(h) * Vd + c] : 0.0f;
    __syncwarp();  // the row before has read sq and sk
#pragma unroll
    for (int u = 0; u < kRegKd / 32; ++u) {
      sq[lane + 32 * u] = (qv[u] * iq) * a.scale;
      sk[lane + 32 * u] = kv4[u] * ik;
    }
    if (t == 0) {
      cp_async_wait<0>();
#pragma unroll
      for (int i = 0; i < kRegKd; ++i) s[i] = stage[i * kRegCols + lane];
    }
    __syncwarp();
    float kv = 0.0f;
#pragma unroll
    for (int i = 0; i < kRegKd; i += 4) {
      const float4 k4 = *reinterpret_cast<const float4*>(sk + i);
      s[i] = s[i] * eg, kv = __fmaf_rn(s[i], k4.x, kv);
      s[i + 1] = s[i + 1] * eg, kv = __fmaf_rn(s[i + 1], k4.y, kv);
      s[i + 2] = s[i + 2] * eg, kv = __fmaf_rn(s[i + 2], k4.z, kv);
      s[i + 3] = s[i + 3] * eg, kv = __fmaf_rn(s[i + 3], k4.w, kv);
    }
    const float delta = (v - kv) * beta;
    float o = 0.0f;
#pragma unroll
    for (int i = 0; i < kRegKd; i += 4) {
      const float4 k4 = lds4_again(sk + i), q4 = *reinterpret_cast<const float4*>(sq + i);
      s[i] = __fmaf_rn(k4.x, delta, s[i]), o = __fmaf_rn(s[i], q4.x, o);
      s[i + 1] = __fmaf_rn(k4.y, delta, s[i + 1]), o = __fmaf_rn(s[i + 1], q4.y, o);
      s[i + 2] = __fmaf_rn(k4.z, delta, s[i + 2]), o = __fmaf_rn(s[i + 2], q4.z, o);
      s[i + 3] = __fmaf_rn(k4.w, delta, s[i + 3]), o = __fmaf_rn(s[i + 3], q4.w, o);
    }
    if (!col) continue;
    a.y[r * a.ldy + static_cast<int64_t>(h) * Vd + c] = o;
    if (t + 1 < j.n && j.nkeep > 0) {
      float* kp = a.keep_pool + a.keep[j.keep0 + t] + so;
#pragma unroll
      for (int i = 0; i < kRegKd; ++i, kp += Vd) *kp = s[i];
    }
  }
  if (!col) return;
  float* S = a.pool + j.dst + so;
#pragma unroll
  for (int i = 0; i < kRegKd; ++i, S += Vd) *S = s[i];
}

// Whether the step form runs on register columns (k_dim kRegKd, unless TF_CUDA_DELTA_REG is 0:
// the shared-memory form, for side-by-side timing; the same bits).
bool delta_step_reg(int k_dim) {
  static const bool on = !env_zero("TF_CUDA_DELTA_REG");
  return on && k_dim == kRegKd;
}

// Chunked form, block per (sequence, v head, tile of vt columns). Per chunk of L rows with
// g cumulated in order from the chunk's first row:
//   A[i][m] = -beta_i (k_i.k_m) exp(g_i - g_m) for m < i, made (I + A) = T by forward
//   substitution in row order; R = beta (v - exp(g) K S); V' = T R;
//   y_i = exp(g_i) q_i.S + sum_{m<=i} (q_i.k_m) exp(g_i - g_m) V'_m;
//   S = exp(g_L) S + sum_m k_m exp(g_L - g_m) V'_m.
__global__ void __launch_bounds__(kChunkThreads) delta_chunk_kernel(DeltaArgs a) {
  grid_wait();
  grid_launch_next();
  extern __shared__ float sm[];
  const int L = a.chunk, Kd = a.Kd, Vd = a.Vd, VT = a.vt, tid = threadIdx.x;
  const int KS = Kd + 1;  // row stride of q and k: rows m of one column x fall in different banks
  const int warp = tid / 32, lane = tid % 32, nwarps = kChunkThreads / 32;
  float* sK = sm;              // [L x KS]
  float* sQ = sK + L * KS;     // [L x KS]
  float* sS = sQ + L * KS;     // [Kd x VT]
  float* sA = sS + Kd * VT;    // [L x L]
  float* sP = sA + L * L;      // [L x L]
  float* sR = sP + L * L;      // [L x VT]
  float* sN = sR + L * VT;     // [L x VT]
  float* sQS = sN + L * VT;    // [L x VT]
  float* sg = sQS + L * VT;    // [L]
  float* sb = sg + L;          // [L]
  float* stmp = sb + L;        // [L]
  const SeqJob j = a.jobs[blockIdx.x];
  const int h = blockIdx.y, kh = h / a.hv_per_k, v0 = blockIdx.z * VT, nv = min(VT, Vd - v0);
  const int64_t so = static_cast<int64_t>(h) * Kd * Vd + v0;
  const int64_t vcol = static_cast<int64_t>(h) * Vd + v0;
  const float Ah = expf(a.A_log[h]), bias = a.dt_bias[h];
  for (int e = tid; e < Kd * VT; e += kChunkThreads) {
    const int i = e / VT, c = e % VT;
    sS[e] = c < nv ? a.pool[j.src + so + static_cast<int64_t>(i) * Vd + c] : 0.0f;
  }
  for (int c0 = 0; c0 < j.n; c0 += L) {
    const int len = min(L, j.n - c0);
    const int64_t base = j.row0 + c0;
    for (int t = warp; t < len; t += nwarps) {
      const int64_t r = base + t;
      const float* qr = a.q + r * a.ldq + static_cast<int64_t>(kh) * Kd;
      const float* kr = a.k + r * a.ldk + static_cast<int64_t>(kh) * Kd;
      float ssq = 0.0f, ssk = 0.0f;
      for (int i = lane; i < Kd; i += 32) {
        ssq = __fmaf_rn(qr[i], qr[i], ssq);
        ssk = __fmaf_rn(kr[i], kr[i], ssk);
      }
      const float iq = delta_inv_norm(warp_sum(ssq)), ik = delta_inv_norm(warp_sum(ssk));
      for (int i = lane; i < Kd; i += 32) {
        sQ[t * KS + i] = (qr[i] * iq) * a.scale;
        sK[t * KS + i] = kr[i] * ik;
      }
      if (lane == 0) {
        sg[t] = delta_g(Ah, a.a[r * a.lda + h], bias);
        sb[t] = delta_beta(a.b[r * a.ldb + h]);
      }
    }
    __syncthreads();
    if (tid == 0)
      for (int t = 1; t < len; ++t) sg[t] = sg[t - 1] + sg[t];
    __syncthreads();
    for (int e = tid; e < len * len; e += kChunkThreads) {
      const int i = e / len, m = e % len;
      float kk = 0.0f, qk = 0.0f;
      if (m <= i)
        for (int x = 0; x < Kd; ++x) {
          kk = __fmaf_rn(sK[i * KS + x], sK[m * KS + x], kk);
          qk = __fmaf_rn(sQ[i * KS + x], sK[m * KS + x], qk);
        }
      const float dec = m <= i ? expf(sg[i] - sg[m]) : 0.0f;
      sA[i * L + m] = m < i ? -(sb[i] * kk) * dec : 0.0f;
      sP[i * L + m] = m <= i ? qk * dec : 0.0f;
    }
    __syncthreads();
    for (int i = 2; i < len; ++i) {
      for (int m = tid; m < i; m += kChunkThreads) stmp[m] = sA[i * L + m];
      __syncthreads();
      for (int c = tid; c < i; c += kChunkThreads) {
        float acc = 0.0f;
        for (int m = c + 1; m < i; ++m) acc = __fmaf_rn(stmp[m], sA[m * L + c], acc);
        sA[i * L + c] = stmp[c] + acc;
      }
      __syncthreads();
    }
    for (int e = tid; e < len * VT; e += kChunkThreads) {
      const int i = e / VT, c = e % VT;
      float ks = 0.0f, qs = 0.0f;
      for (int x = 0; x < Kd; ++x) {
        ks = __fmaf_rn(sK[i * KS + x], sS[x * VT + c], ks);
        qs = __fmaf_rn(sQ[i * KS + x], sS[x * VT + c], qs);
      }
      const float vv = c < nv ? a.v[(base + i) * a.ldv + vcol + c] : 0.0f;
      sR[e] = sb[i] * (vv - expf(sg[i]) * ks);
      sQS[e] = qs;
    }
    __syncthreads();
    for (int e = tid; e < len * VT; e += kChunkThreads) {
      const int i = e / VT, c = e % VT;
      float acc = 0.0f;
      for (int m = 0; m < i; ++m) acc = __fmaf_rn(sA[i * L + m], sR[m * VT + c], acc);
      sN[e] = sR[e] + acc;
    }
    __syncthreads();
    const float gl = sg[len - 1];
    for (int m = tid; m < len; m += kChunkThreads) stmp[m] = expf(gl - sg[m]);
    for (int e = tid; e < len * VT; e += kChunkThreads) {
      const int i = e / VT, c = e % VT;
      if (c >= nv) continue;
      float acc = 0.0f;
      for (int m = 0; m <= i; ++m) acc = __fmaf_rn(sP[i * L + m], sN[m * VT + c], acc);
      a.y[(base + i) * a.ldy + vcol + c] = expf(sg[i]) * sQS[e] + acc;
    }
    __syncthreads();
    const float el = expf(gl);
    for (int e = tid; e < Kd * VT; e += kChunkThreads) {
      const int x = e / VT, c = e % VT;
      float acc = 0.0f;
      for (int m = 0; m < len; ++m) acc = __fmaf_rn(sK[m * KS + x] * stmp[m], sN[m * VT + c], acc);
      sS[e] = el * sS[e] + acc;
    }
    __syncthreads();
  }
  for (int e = tid; e < Kd * VT; e += kChunkThreads) {
    const int i = e / VT, c = e % VT;
    if (c < nv) a.pool[j.dst + so + static_cast<int64_t>(i) * Vd + c] = sS[e];
  }
}

size_t chunk_smem(int L, int Kd, int vt) {
  return (2 * static_cast<size_t>(L) * (Kd + 1) + static_cast<size_t>(Kd) * vt + 2 * static_cast<size_t>(L) * L +
          3 * static_cast<size_t>(L) * vt + 3 * static_cast<size_t>(L)) * 4;
}

}  // namespace

void CudaBackend::gated_delta(Cols q, Cols k, Cols v, Cols a, Cols b, const Weight& A_log,
                              const Weight& dt_bias, const DeltaParams& p, const RowLayout& rows,
                              const StateRefs& st, int64_t off, Tensor y) {
  const ProfScope prof(*this, "gated_delta", nullptr, y.rows);
  const char* op = "gated_delta";
  TF_CHECK(p.k_heads > 0 && p.v_heads > 0 && p.v_heads % p.k_heads == 0 && p.k_dim > 0 &&
               p.v_dim > 0 && p.chunk > 0 && p.chunk <= 256 && p.v_heads <= 65535 && p.k_dim <= 4096,
           op, ": k_heads ", p.k_heads, ", v_heads ", p.v_heads, ", k_dim ", p.k_dim, ", v_dim ",
           p.v_dim, ", chunk ", p.chunk, " (at most 256)");
  check_tensor(y, op, "y");
  const int64_t m = y.rows, kw = static_cast<int64_t>(p.k_heads) * p.k_dim;
  const int64_t vw = static_cast<int64_t>(p.v_heads) * p.v_dim;
  TF_CHECK(y.cols == vw, op, ": y [", y.rows, " x ", y.cols, "] for ", p.v_heads, " heads of ", p.v_dim);
  check_cols(q, m, kw, op, "q");
  check_cols(k, m, kw, op, "k");
  check_cols(v, m, vw, op, "v");
  check_cols(a, m, p.v_heads, op, "a");
  check_cols(b, m, p.v_heads, op, "b");
  const float* al = vec_f32(&A_log, p.v_heads, op, "A_log");
  const float* db = vec_f32(&dt_bias, p.v_heads, op, "dt_bias");
  const SeqJobs jobs = plan_seqs(rows, st, off, vw * p.k_dim, m, op, true);
  if (m == 0) return;
  const int smax = max_smem_optin();
  int vt = std::min(32, p.v_dim);
  while (vt > 1 && chunk_smem(p.chunk, p.k_dim, vt) > static_cast<size_t>(smax)) vt /= 2;
  const size_t csmem = chunk_smem(p.chunk, p.k_dim, vt);
  TF_CHECK(jobs.chunked.empty() || csmem <= static_cast<size_t>(smax), op, ": chunk ", p.chunk,
           " with k_dim ", p.k_dim, " needs ", csmem, " bytes of shared memory; the device has ", smax);
  const DevJobs d = upload_jobs(*this, jobs);
  DeltaArgs args{q.at(0), k.at(0), v.at(0), a.at(0), b.at(0), q.t.cols, k.t.cols, v.t.cols,
                 a.t.cols, b.t.cols, al, db, st.pool, st.keep_pool, d.step, d.keep, y.data, y.cols,
                 p.v_heads / p.k_heads, p.k_dim, p.v_dim, p.chunk, vt,
                 static_cast<float>(1.0 / std::sqrt(static_cast<double>(p.k_dim)))};
  if (!jobs.step.empty() && delta_step_reg(p.k_dim)) {
    launch_kernel(delta_step_reg_kernel,
                  dim3(static_cast<unsigned>(jobs.step.size()), static_cast<unsigned>(p.v_heads),
                       static_cast<unsigned>((p.v_dim + kRegCols - 1) / kRegCols)),
                  kRegCols, 0, args);
    check_launch(op);
  } else if (!jobs.step.empty()) {
    const size_t smem = (2 * static_cast<size_t>(p.k_dim) + 4) * 4;
    TF_CUDA_CHECK(cudaFuncSetAttribute(delta_step_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(smem)), op);
    launch_kernel(delta_step_kernel,
                  dim3(static_cast<unsigned>(jobs.step.size()), static_cast<unsigned>(p.v_heads)),
                  kStepThreads, smem, args);
    check_launch(op);
  }
  if (!jobs.chunked.empty() && delta_tiled_takes(p.k_dim, p.chunk)) {
    args.jobs = d.chunked;
    delta_tiled(*this, args, jobs.chunked, m, p.k_heads, p.v_heads);
  } else if (!jobs.chunked.empty()) {
    args.jobs = d.chunked;
    TF_CUDA_CHECK(cudaFuncSetAttribute(delta_chunk_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(csmem)), op);
    const unsigned tiles = static_cast<unsigned>((p.v_dim + vt - 1) / vt);
    launch_kernel(
        delta_chunk_kernel,
        dim3(static_cast<unsigned>(jobs.chunked.size()), static_cast<unsigned>(p.v_heads), tiles),
        kChunkThreads, csmem, args);
    check_launch(op);
  }
}

}  // namespace tf::cuda
