// The Mamba2 (SSD) scan on the GPU: the step form (decode, verify) and the chunked form (prefill).
//
// Order rule: a block works on one sequence (and one head, one tile of channels); rows are
// walked in order, every sum has one fixed order, and chunks of the chunked form are counted
// from the sequence's first row of the call. Nothing depends on the other sequences, the row
// count of the round or the tile a channel falls in.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_state.cuh"
#include "backend/cuda/cuda_util.cuh"

namespace tf::cuda {

namespace {

constexpr int kMaxStateLanes = 8;  // ssm state_size up to 256 in the step form
constexpr int kSsmThreads = 256;
constexpr int kSsmStepWarps = 4;

// HF softplus (threshold 20), then clamp; comparisons keep NaN.
__device__ __forceinline__ float ssm_dt(float raw, float bias, float lo, float hi) {
  const float v = raw + bias;
  float d = v > 20.0f ? v : log1pf(expf(v));
  if (d < lo) d = lo;
  if (hi > 0.0f && d > hi) d = hi;
  return d;
}

struct SsmArgs {
  const float *x, *B, *C, *dt;
  int64_t ldx, ldb, ldc, ldd;
  const float *A_log, *D, *dt_bias;
  float* pool;
  float* keep_pool;
  const SeqJob* jobs;
  const int64_t* keep;
  float* y;
  int64_t ldy;
  int P, N, hpg, chunk, pt;
  float dt_min, dt_max;
};

// Step form: warp per channel p of the head, blocks along z taking kSsmStepWarps channels each;
// lane holds h[p][n] for n = lane (mod 32); per row h = a h + (dt x) B, y = (lane sums of h C in
// n order, then the xor butterfly) + D x.
__global__ void __launch_bounds__(kSsmStepWarps * 32) ssm_step_kernel(SsmArgs a) {
  grid_wait();
  grid_launch_next();
  const SeqJob j = a.jobs[blockIdx.x];
  const int h = blockIdx.y, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int N = a.N, P = a.P, g = h / a.hpg;
  const float A = -expf(a.A_log[h]), Dh = a.D[h], bias = a.dt_bias[h];
  for (int p = static_cast<int>(blockIdx.z) * kSsmStepWarps + warp; p < P;
       p += kSsmStepWarps * static_cast<int>(gridDim.z)) {
    const int64_t so = (static_cast<int64_t>(h) * P + p) * N;
    float hr[kMaxStateLanes];
#pragma unroll
    for (int i = 0; i < kMaxStateLanes; ++i) {
      const int n = lane + 32 * i;
      hr[i] = n < N ? a.pool[j.src + so + n] : 0.0f;
    }
    for (int t = 0; t < j.n; ++t) {
      const int64_t r = j.row0 + t;
      const float d = ssm_dt(a.dt[r * a.ldd + h], bias, 0.0f, 0.0f);  // the step form does not clamp
      const float da = expf(A * d);
      const float xv = a.x[r * a.ldx + static_cast<int64_t>(h) * P + p];
      const float dx = d * xv;
      const float* Br = a.B + r * a.ldb + static_cast<int64_t>(g) * N;
      const float* Cr = a.C + r * a.ldc + static_cast<int64_t>(g) * N;
      float part = 0.0f;
#pragma unroll
      for (int i = 0; i < kMaxStateLanes; ++i) {
        const int n = lane + 32 * i;
        if (n < N) {
          hr[i] = da * hr[i] + dx * Br[n];
          part = __fmaf_rn(hr[i], Cr[n], part);
        }
      }
      part = warp_sum(part);
      if (lane == 0) a.y[r * a.ldy + static_cast<int64_t>(h) * P + p] = part + Dh * xv;
      if (t + 1 < j.n && j.nkeep > 0) {
        float* kp = a.keep_pool + a.keep[j.keep0 + t] + so;
#pragma unroll
        for (int i = 0; i < kMaxStateLanes; ++i)
          if (lane + 32 * i < N) kp[lane + 32 * i] = hr[i];
      }
    }
#pragma unroll
    for (int i = 0; i < kMaxStateLanes; ++i)
      if (lane + 32 * i < N) a.pool[j.dst + so + lane + 32 * i] = hr[i];
  }
}

// Chunked (SSD) form, block per (sequence, head, tile of pt channels). Per chunk of L rows:
// cum = prefix sum of A dt (one thread, in order); y_t = exp(cum_t) C_t.h0 + sum_{s<=t}
// exp(cum_t - cum_s) dt_s (C_t.B_s) x_s + D x_t; h = exp(cum_L) h0 + sum_s exp(cum_L - cum_s) dt_s x_s B_s.
__global__ void __launch_bounds__(kSsmThreads) ssm_chunk_kernel(SsmArgs a) {
  grid_wait();
  grid_launch_next();
  extern __shared__ float sm[];
  const SeqJob j = a.jobs[blockIdx.x];
  const int h = blockIdx.y, p0 = blockIdx.z * a.pt, np = min(a.pt, a.P - p0);
  const int N = a.N, P = a.P, L = a.chunk, g = h / a.hpg, tid = threadIdx.x;
  const int warp = tid / 32, lane = tid % 32, nwarps = kSsmThreads / 32;
  float* sh = sm;              // [pt x N] state tile
  float* sdt = sh + a.pt * N;  // [L]
  float* scum = sdt + L;       // [L]
  float* sw = scum + L;        // [L]
  float* sc = sw + L;          // [N]
  const int64_t so = (static_cast<int64_t>(h) * P + p0) * N;
  const int64_t xh = static_cast<int64_t>(h) * P, gN = static_cast<int64_t>(g) * N;
  const float A = -expf(a.A_log[h]), Dh = a.D[h], bias = a.dt_bias[h];
  for (int e = tid; e < np * N; e += kSsmThreads) sh[e] = a.pool[j.src + so + e];
  __syncthreads();
  for (int c0 = 0; c0 < j.n; c0 += L) {
    const int len = min(L, j.n - c0);
    const int64_t base = j.row0 + c0;
    for (int t = tid; t < len; t += kSsmThreads) {
      const float d = ssm_dt(a.dt[(base + t) * a.ldd + h], bias, a.dt_min, a.dt_max);
      sdt[t] = d;
      scum[t] = A * d;
    }
    __syncthreads();
    if (tid == 0)
      for (int t = 1; t < len; ++t) scum[t] = scum[t - 1] + scum[t];
    __syncthreads();
    for (int t = 0; t < len; ++t) {
      const int64_t rt = base + t;
      for (int n = tid; n < N; n += kSsmThreads) sc[n] = a.C[rt * a.ldc + gN + n];
      __syncthreads();
      for (int s = tid; s <= t; s += kSsmThreads) {
        const float* Bs = a.B + (base + s) * a.ldb + gN;
        float dot = 0.0f;
        for (int n = 0; n < N; ++n) dot = __fmaf_rn(sc[n], Bs[n], dot);
        sw[s] = (expf(scum[t] - scum[s]) * sdt[s]) * dot;
      }
      __syncthreads();
      const float et = expf(scum[t]);
      for (int pl = warp; pl < np; pl += nwarps) {
        const int64_t col = xh + p0 + pl;
        float inter = 0.0f, intra = 0.0f;
        for (int n = lane; n < N; n += 32) inter = __fmaf_rn(sc[n], sh[pl * N + n], inter);
        for (int s = lane; s <= t; s += 32) intra = __fmaf_rn(sw[s], a.x[(base + s) * a.ldx + col], intra);
        inter = warp_sum(inter);
        intra = warp_sum(intra);
        if (lane == 0) a.y[rt * a.ldy + col] = (et * inter + intra) + Dh * a.x[rt * a.ldx + col];
      }
      __syncthreads();
    }
    const float cl = scum[len - 1], el = expf(cl);
    for (int s = tid; s < len; s += kSsmThreads) sw[s] = expf(cl - scum[s]) * sdt[s];
    __syncthreads();
    for (int e = tid; e < np * N; e += kSsmThreads) {
      const int pl = e / N, n = e % N;
      const int64_t col = xh + p0 + pl;
      float acc = 0.0f;
      for (int s = 0; s < len; ++s)
        acc = __fmaf_rn(sw[s] * a.x[(base + s) * a.ldx + col], a.B[(base + s) * a.ldb + gN + n], acc);
      sh[e] = el * sh[e] + acc;
    }
    __syncthreads();
  }
  for (int e = tid; e < np * N; e += kSsmThreads) a.pool[j.dst + so + e] = sh[e];
}

// The chunked form on matrices (TF_CUDA_SSD=0: ssm_chunk_kernel instead, side-by-side timing).
// Per chunk of L rows of a sequence (counted from its first row of the call) and head:
//   G = C B^T (one group's, ssd_cb_kernel), W[t][s] = G[t][s] (exp(cum_t - cum_s) dt_s) for s <= t,
//   y_t = exp(cum_t) (C_t . h0) + sum_s W[t][s] x_s + D x_t,
//   h = exp(cum_last) h0 + sum_s (x_s (exp(cum_last - cum_s) dt_s)) B_s,
// every sum in a fixed order of its own, so a row's bits depend on its sequence alone.
constexpr int kSsdTile = 64;     // G's tiles and the rows of W a pass holds
constexpr int kSsdPt = 16;       // channels a scan block takes
constexpr int kSsdThreads = 256;
constexpr int kSsdMaxChunk = 512;

struct SsdChunks {
  const int32_t* list;  // per chunk: job, first row within the job
  float* G;             // [group][row of the call][L]: row t of a chunk holds G[t][0 .. L)
  int64_t rows;         // rows of the call, so the scratch is bounded by the round's rows
};

// G's 64 x 64 tile (blockIdx.z over the lower triangle's tiles) of one chunk and group: 16 x 16
// threads each sum 4 x 4 dot products over n in order.
__global__ void __launch_bounds__(kSsdThreads) ssd_cb_kernel(SsmArgs a, SsdChunks ch) {
  grid_wait();
  grid_launch_next();
  __shared__ float cs[16][kSsdTile + 4], bs[16][kSsdTile + 4];
  int ti = 0, z = static_cast<int>(blockIdx.z);
  while (z > ti) z -= ti + 1, ++ti;
  const int si = z;
  const SeqJob j = a.jobs[ch.list[2 * blockIdx.x]];
  const int c0 = ch.list[2 * blockIdx.x + 1], len = min(a.chunk, j.n - c0), g = blockIdx.y;
  const int t0 = ti * kSsdTile, s0 = si * kSsdTile;
  if (t0 >= len) return;
  const int N = a.N, tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int64_t rb = j.row0 + c0, gN = static_cast<int64_t>(g) * N;
  float acc[4][4] = {};
  for (int n0 = 0; n0 < N; n0 += 16) {
    for (int e = threadIdx.x; e < 16 * kSsdTile; e += kSsdThreads) {
      const int r = e / 16, k = e % 16, n = n0 + k;
      cs[k][r] = t0 + r < len && n < N ? a.C[(rb + t0 + r) * a.ldc + gN + n] : 0.0f;
      bs[k][r] = s0 + r < len && n < N ? a.B[(rb + s0 + r) * a.ldb + gN + n] : 0.0f;
    }
    __syncthreads();
#pragma unroll 4
    for (int k = 0; k < 16; ++k) {
      const float4 cv = *reinterpret_cast<const float4*>(&cs[k][4 * ty]);
      const float4 bv = *reinterpret_cast<const float4*>(&bs[k][4 * tx]);
      const float c4[4] = {cv.x, cv.y, cv.z, cv.w}, b4[4] = {bv.x, bv.y, bv.z, bv.w};
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int q = 0; q < 4; ++q) acc[i][q] = __fmaf_rn(c4[i], b4[q], acc[i][q]);
    }
    __syncthreads();
  }
  const int L = a.chunk;
  float* G = ch.G + (g * ch.rows + rb + t0 + 4 * ty) * L + s0 + 4 * tx;
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int q = 0; q < 4; ++q)
      if (t0 + 4 * ty + i < len && s0 + 4 * tx + q < len) G[static_cast<int64_t>(i) * L + q] = acc[i][q];
}

// Shared memory of ssd_scan_kernel: h [pt][N + 4], x and x u [L][pt], W [64][L + 1], cum and dt [L].
constexpr size_t ssd_smem(int L, int N) {
  return (static_cast<size_t>(kSsdPt) * (N + 4) + 2 * static_cast<size_t>(L) * kSsdPt +
          static_cast<size_t>(kSsdTile) * (L + 1) + 2 * static_cast<size_t>(L)) * 4;
}

// The scan of one sequence, head and kSsdPt channels over its chunks in order; h stays on chip.
// Threads: 32 row pairs x 8 channel pairs for y, channel pairs x column quads for h.
__global__ void __launch_bounds__(kSsdThreads) ssd_scan_kernel(SsmArgs a, SsdChunks ch, bool vec) {
  grid_wait();
  grid_launch_next();
  extern __shared__ __align__(16) float sm[];
  const int L = a.chunk, N = a.N, P = a.P, HS = N + 4;
  const SeqJob j = a.jobs[blockIdx.x];
  const int h = blockIdx.y, p0 = blockIdx.z * kSsdPt, np = min(kSsdPt, P - p0), g = h / a.hpg;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  float* hs = sm;                       // [kSsdPt][HS]
  float* xs = hs + kSsdPt * HS;         // [L][kSsdPt]
  float* xu = xs + L * kSsdPt;          // [L][kSsdPt]
  float* ws = xu + L * kSsdPt;          // [kSsdTile][L + 1]
  float* cum = ws + kSsdTile * (L + 1);  // [L]
  float* dtv = cum + L;                 // [L]
  const int64_t so = (static_cast<int64_t>(h) * P + p0) * N, xc = static_cast<int64_t>(h) * P + p0;
  const int64_t gN = static_cast<int64_t>(g) * N;
  const float A = -expf(a.A_log[h]), Dh = a.D[h], bias = a.dt_bias[h];
  for (int e = tid; e < kSsdPt * HS; e += kSsdThreads) {
    const int pl = e / HS, n = e % HS;
    hs[e] = pl < np && n < N ? a.pool[j.src + so + static_cast<int64_t>(pl) * N + n] : 0.0f;
  }
  const int tp = tid / 8, pp = tid % 8;  // y: rows 2 tp, 2 tp + 1 of a pass; channels 2 pp, 2 pp + 1
  for (int c0 = 0; c0 < j.n; c0 += L) {
    const int len = min(L, j.n - c0);
    const int64_t rb = j.row0 + c0;
    if (warp == 0) {
      // dt and the running sum of A dt: 32 rows at a time, a fixed shuffle tree, then the carry.
      float carry = 0.0f;
      for (int t0 = 0; t0 < L; t0 += 32) {
        const int t = t0 + lane;
        const float d = t < len ? ssm_dt(a.dt[(rb + t) * a.ldd + h], bias, a.dt_min, a.dt_max) : 0.0f;
        float v = A * d;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
          const float u = __shfl_up_sync(0xffffffffu, v, o);
          if (lane >= o) v = v + u;
        }
        v = carry + v;
        if (t < L) cum[t] = v, dtv[t] = d;
        carry = __shfl_sync(0xffffffffu, v, 31);
      }
    }
    for (int e = tid; e < L * kSsdPt; e += kSsdThreads) {
      const int t = e / kSsdPt, pl = e % kSsdPt;
      xs[e] = t < len && pl < np ? a.x[(rb + t) * a.ldx + xc + pl] : 0.0f;
    }
    __syncthreads();
    const float cl = cum[len - 1], el = expf(cl);
    for (int e = tid; e < L * kSsdPt; e += kSsdThreads) {
      const int t = e / kSsdPt;
      xu[e] = xs[e] * (expf(cl - cum[t]) * dtv[t]);
    }
    const float* Gc = ch.G + (g * ch.rows + rb) * L;
    for (int r0 = 0; r0 < len; r0 += kSsdTile) {
      const int send = min(len, r0 + kSsdTile);  // columns s of W this pass needs
#pragma unroll 4
      for (int e = tid; e < kSsdTile * send; e += kSsdThreads) {
        const int tl = e / send, s = e % send, t = r0 + tl;
        ws[tl * (L + 1) + s] = s <= t && t < len ? Gc[static_cast<int64_t>(t) * L + s] * (expf(cum[t] - cum[s]) * dtv[s])
                                                 : 0.0f;
      }
      __syncthreads();
      const int ta = r0 + 2 * tp;
      if (ta < len) {
        const int tb = min(ta + 1, len - 1);
        const float* ca = a.C + (rb + ta) * a.ldc + gN;
        const float* cb = a.C + (rb + tb) * a.ldc + gN;
        const float* ha = hs + (2 * pp) * HS;
        const float* hb = ha + HS;
        float o00 = 0.0f, o01 = 0.0f, o10 = 0.0f, o11 = 0.0f;  // C . h0 of rows a, b and channels 0, 1
        if (vec) {
#pragma unroll 4
          for (int n = 0; n < N; n += 4) {
            const float4 u = *reinterpret_cast<const float4*>(ca + n), v = *reinterpret_cast<const float4*>(cb + n);
            const float4 x0 = *reinterpret_cast<const float4*>(ha + n), x1 = *reinterpret_cast<const float4*>(hb + n);
            o00 = __fmaf_rn(u.x, x0.x, o00), o01 = __fmaf_rn(u.x, x1.x, o01);
            o10 = __fmaf_rn(v.x, x0.x, o10), o11 = __fmaf_rn(v.x, x1.x, o11);
            o00 = __fmaf_rn(u.y, x0.y, o00), o01 = __fmaf_rn(u.y, x1.y, o01);
            o10 = __fmaf_rn(v.y, x0.y, o10), o11 = __fmaf_rn(v.y, x1.y, o11);
            o00 = __fmaf_rn(u.z, x0.z, o00), o01 = __fmaf_rn(u.z, x1.z, o01);
            o10 = __fmaf_rn(v.z, x0.z, o10), o11 = __fmaf_rn(v.z, x1.z, o11);
            o00 = __fmaf_rn(u.w, x0.w, o00), o01 = __fmaf_rn(u.w, x1.w, o01);
            o10 = __fmaf_rn(v.w, x0.w, o10), o11 = __fmaf_rn(v.w, x1.w, o11);
          }
        } else {
          for (int n = 0; n < N; ++n) {
            const float u = ca[n], v = cb[n], x0 = ha[n], x1 = hb[n];
            o00 = __fmaf_rn(u, x0, o00), o01 = __fmaf_rn(u, x1, o01);
            o10 = __fmaf_rn(v, x0, o10), o11 = __fmaf_rn(v, x1, o11);
          }
        }
        float d00 = 0.0f, d01 = 0.0f, d10 = 0.0f, d11 = 0.0f;  // sum_s W[t][s] x_s
        const float* wa = ws + (ta - r0) * (L + 1);
        const float* wb = wa + (L + 1);
        for (int s = 0; s <= tb; ++s) {
          const float2 xv = *reinterpret_cast<const float2*>(xs + s * kSsdPt + 2 * pp);
          const float w0 = wa[s], w1 = wb[s];
          d00 = __fmaf_rn(w0, xv.x, d00), d01 = __fmaf_rn(w0, xv.y, d01);
          d10 = __fmaf_rn(w1, xv.x, d10), d11 = __fmaf_rn(w1, xv.y, d11);
        }
        const float ea = expf(cum[ta]), eb = expf(cum[tb]);
        const int pa = 2 * pp;
        float* ya = a.y + (rb + ta) * a.ldy + xc;
        float* yb = a.y + (rb + tb) * a.ldy + xc;
        if (pa < np) ya[pa] = (ea * o00 + d00) + Dh * xs[ta * kSsdPt + pa];
        if (pa + 1 < np) ya[pa + 1] = (ea * o01 + d01) + Dh * xs[ta * kSsdPt + pa + 1];
        if (tb > ta) {
          if (pa < np) yb[pa] = (eb * o10 + d10) + Dh * xs[tb * kSsdPt + pa];
          if (pa + 1 < np) yb[pa + 1] = (eb * o11 + d11) + Dh * xs[tb * kSsdPt + pa + 1];
        }
      }
      __syncthreads();  // W is rewritten by the next pass, h by the update below
    }
    // h = exp(cum_last) h + sum_s x u_s B_s: items of two channels x four columns.
    const int quads = (N + 3) / 4;
    for (int it = tid; it < kSsdPt / 2 * quads; it += kSsdThreads) {
      const int pl = 2 * (it / quads), n = 4 * (it % quads);
      float acc0[4] = {}, acc1[4] = {};
#pragma unroll 4
      for (int s = 0; s < len; ++s) {
        const float* bsr = a.B + (rb + s) * a.ldb + gN + n;
        float b4[4];
        if (vec) {
          const float4 v = *reinterpret_cast<const float4*>(bsr);
          b4[0] = v.x, b4[1] = v.y, b4[2] = v.z, b4[3] = v.w;
        } else {
#pragma unroll
          for (int q = 0; q < 4; ++q) b4[q] = n + q < N ? bsr[q] : 0.0f;
        }
        const float2 u = *reinterpret_cast<const float2*>(xu + s * kSsdPt + pl);
#pragma unroll
        for (int q = 0; q < 4; ++q) acc0[q] = __fmaf_rn(u.x, b4[q], acc0[q]), acc1[q] = __fmaf_rn(u.y, b4[q], acc1[q]);
      }
#pragma unroll
      for (int q = 0; q < 4; ++q)
        if (n + q < N) {
          hs[pl * HS + n + q] = el * hs[pl * HS + n + q] + acc0[q];
          hs[(pl + 1) * HS + n + q] = el * hs[(pl + 1) * HS + n + q] + acc1[q];
        }
    }
    __syncthreads();
  }
  for (int e = tid; e < np * N; e += kSsdThreads) a.pool[j.dst + so + e] = hs[(e / N) * HS + e % N];
}

// Whether the chunked form runs on matrices (ssd_scan_kernel): chunks up to kSsdMaxChunk rows,
// unless TF_CUDA_SSD=0. A function of the model's shape alone, so never of the round.
bool ssd_takes(const SsmParams& p) {
  static const bool off = env_zero("TF_CUDA_SSD");
  return !off && p.chunk <= kSsdMaxChunk && ssd_smem(kSsdMaxChunk, 32 * kMaxStateLanes) <= static_cast<size_t>(max_smem_optin());
}

}  // namespace

void CudaBackend::ssm_scan(Cols x, Cols B, Cols C, Cols dt_raw, const Weight& A_log, const Weight& D,
                           const Weight& dt_bias, const SsmParams& p, const RowLayout& rows,
                           const StateRefs& st, int64_t off, Tensor y) {
  const ProfScope prof(*this, "ssm_scan", nullptr, y.rows);
  const char* op = "ssm_scan";
  TF_CHECK(p.heads > 0 && p.head_dim > 0 && p.groups > 0 && p.heads % p.groups == 0 &&
               p.state_size > 0 && p.state_size <= 32 * kMaxStateLanes && p.chunk > 0 &&
               p.chunk <= 4096 && p.heads <= 65535,
           op, ": heads ", p.heads, ", head_dim ", p.head_dim, ", groups ", p.groups, ", state_size ",
           p.state_size, " (at most ", 32 * kMaxStateLanes, "), chunk ", p.chunk);
  check_tensor(y, op, "y");
  const int64_t m = y.rows, width = static_cast<int64_t>(p.heads) * p.head_dim;
  const int64_t bc = static_cast<int64_t>(p.groups) * p.state_size;
  TF_CHECK(y.cols == width, op, ": y [", y.rows, " x ", y.cols, "] for ", p.heads, " heads of ",
           p.head_dim);
  check_cols(x, m, width, op, "x");
  check_cols(B, m, bc, op, "B");
  check_cols(C, m, bc, op, "C");
  check_cols(dt_raw, m, p.heads, op, "dt_raw");
  const float* al = vec_f32(&A_log, p.heads, op, "A_log");
  const float* dd = vec_f32(&D, p.heads, op, "D");
  const float* db = vec_f32(&dt_bias, p.heads, op, "dt_bias");
  const SeqJobs jobs = plan_seqs(rows, st, off, width * p.state_size, m, op, true);
  if (m == 0) return;
  const DevJobs d = upload_jobs(*this, jobs);
  const int pt = std::max(1, std::min(p.head_dim, std::min(32, 8192 / p.state_size)));
  SsmArgs a{x.at(0), B.at(0), C.at(0), dt_raw.at(0), x.t.cols, B.t.cols, C.t.cols, dt_raw.t.cols,
            al, dd, db, st.pool, st.keep_pool, d.step, d.keep, y.data, y.cols, p.head_dim,
            p.state_size, p.heads / p.groups, p.chunk, pt, p.dt_min, p.dt_max};
  if (!jobs.step.empty()) {
    // A block per few channels: one warp walking a head's channels waits out each state load.
    const auto tiles = static_cast<unsigned>(std::min((p.head_dim + kSsmStepWarps - 1) / kSsmStepWarps, 65535));
    launch_kernel(ssm_step_kernel,
                  dim3(static_cast<unsigned>(jobs.step.size()), static_cast<unsigned>(p.heads), tiles),
                  kSsmStepWarps * 32, 0, a);
    check_launch(op);
  }
  if (!jobs.chunked.empty() && ssd_takes(p)) {
    a.jobs = d.chunked;
    const int L = p.chunk;
    std::vector<int32_t> list;  // per chunk: job, first row within the job
    for (size_t i = 0; i < jobs.chunked.size(); ++i)
      for (int32_t c0 = 0; c0 < jobs.chunked[i].n; c0 += L) list.push_back(static_cast<int32_t>(i)), list.push_back(c0);
    const auto nch = static_cast<unsigned>(list.size() / 2);
    SsdChunks ch{static_cast<const int32_t*>(meta(list.data(), list.size() * 4)), nullptr, m};
    ch.G = static_cast<float*>(buffer(kSlotSsm, static_cast<uint64_t>(p.groups) * m * L * 4));
    const unsigned T = static_cast<unsigned>((L + kSsdTile - 1) / kSsdTile);
    launch_kernel(ssd_cb_kernel, dim3(nch, static_cast<unsigned>(p.groups), T * (T + 1) / 2), kSsdThreads, 0, a, ch);
    const size_t smem = ssd_smem(L, p.state_size);
    static bool raised = false;
    if (!raised) {
      TF_CUDA_CHECK(cudaFuncSetAttribute(ssd_scan_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(ssd_smem(kSsdMaxChunk, 32 * kMaxStateLanes))),
                    op);
      raised = true;
    }
    // float4 loads of B, C and h where their rows and columns allow.
    const bool vec = p.state_size % 4 == 0 && B.t.cols % 4 == 0 && C.t.cols % 4 == 0 && B.col % 4 == 0 &&
                     C.col % 4 == 0 && reinterpret_cast<uintptr_t>(B.t.data) % 16 == 0 &&
                     reinterpret_cast<uintptr_t>(C.t.data) % 16 == 0;
    launch_kernel(ssd_scan_kernel,
                  dim3(static_cast<unsigned>(jobs.chunked.size()), static_cast<unsigned>(p.heads),
                       static_cast<unsigned>((p.head_dim + kSsdPt - 1) / kSsdPt)),
                  kSsdThreads, smem, a, ch, vec);
    check_launch(op);
  } else if (!jobs.chunked.empty()) {
    a.jobs = d.chunked;
    const size_t smem = (static_cast<size_t>(pt) * p.state_size + 3 * static_cast<size_t>(p.chunk) +
                         p.state_size) * 4;
    TF_CHECK(smem <= static_cast<size_t>(max_smem_optin()), op, ": chunk ", p.chunk,
             " needs ", smem, " bytes of shared memory");
    TF_CUDA_CHECK(cudaFuncSetAttribute(ssm_chunk_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(smem)), op);
    const unsigned tiles = static_cast<unsigned>((p.head_dim + pt - 1) / pt);
    launch_kernel(
        ssm_chunk_kernel,
        dim3(static_cast<unsigned>(jobs.chunked.size()), static_cast<unsigned>(p.heads), tiles),
        kSsmThreads, smem, a);
    check_launch(op);
  }
}

}  // namespace tf::cuda
