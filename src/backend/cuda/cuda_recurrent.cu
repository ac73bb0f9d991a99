// Recurrent-state ops on the GPU: the sequences' jobs and the depthwise causal conv (the
// Mamba2 scan is in cuda_ssm.cu).
//
// Order rule: a thread works on one sequence and channel; each output is one fixed chain over
// its window. Nothing depends on the other sequences, the row count of the round or the segment
// a row falls in.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_state.cuh"
#include "backend/cuda/cuda_util.cuh"

namespace tf::cuda {

SeqJobs plan_seqs(const RowLayout& rows, const StateRefs& st, int64_t off, int64_t floats,
                  int64_t m, const char* op, bool has_forms) {
  TF_CHECK(static_cast<int64_t>(rows.pos.size()) == m && static_cast<int64_t>(rows.seq.size()) == m,
           op, ": layout has ", rows.pos.size(), " positions and ", rows.seq.size(), " seq ids for ",
           m, " rows");
  SeqJobs jobs;
  if (m == 0) return jobs;
  const size_t nseq = st.src.size();
  TF_CHECK(st.pool != nullptr && nseq > 0, op, ": no recurrent state for ", m, " rows");
  TF_CHECK(st.dst.size() == nseq && st.step.size() == nseq && (st.keep.empty() || st.keep.size() == nseq),
           op, ": state refs have ", nseq, " src, ", st.dst.size(), " dst, ", st.step.size(), " step and ",
           st.keep.size(), " keep entries");
  TF_CHECK(off >= 0 && floats >= 0 && st.slot_floats > 0 && off <= st.slot_floats - floats, op,
           ": layer state of ", floats, " floats at offset ", off, " does not fit a slot of ",
           st.slot_floats);
  TF_CHECK(m <= 0x7fffffff, op, ": ", m, " rows");
  std::vector<int32_t> first(nseq, -1), count(nseq, 0);
  for (int64_t r = 0; r < m; ++r) {
    const int32_t s = rows.seq[static_cast<size_t>(r)];
    TF_CHECK(s >= 0 && static_cast<size_t>(s) < nseq, op, ": row ", r, " has seq ", s, " of ", nseq);
    auto& f = first[static_cast<size_t>(s)];
    auto& c = count[static_cast<size_t>(s)];
    if (f < 0) {
      f = static_cast<int32_t>(r);
    } else {
      TF_CHECK(r == f + c, op, ": rows of seq ", s, " are not contiguous (row ", r, ")");
      TF_CHECK(rows.pos[static_cast<size_t>(r)] == rows.pos[static_cast<size_t>(r - 1)] + 1, op,
               ": row ", r, " of seq ", s, " at position ", rows.pos[static_cast<size_t>(r)],
               " does not follow position ", rows.pos[static_cast<size_t>(r - 1)]);
    }
    ++c;
  }
  std::set<int32_t> srcs, dsts;
  for (size_t s = 0; s < nseq; ++s)
    if (count[s] > 0) srcs.insert(st.src[s]);
  for (size_t s = 0; s < nseq; ++s) {
    if (count[s] == 0) continue;
    const int32_t src = st.src[s], dst = st.dst[s];
    TF_CHECK(src >= 0 && dst >= 0 && src != dst, op, ": seq ", s, " reads slot ", src,
             " and writes slot ", dst);
    TF_CHECK(dsts.insert(dst).second && srcs.count(dst) == 0, op, ": seq ", s, " writes slot ", dst,
             " that another sequence of the round reads or writes");
    TF_CHECK(st.step[s] <= 1, op, ": seq ", s, " has step ", static_cast<int>(st.step[s]));
    SeqJob j;
    j.src = static_cast<int64_t>(src) * st.slot_floats + off;
    j.dst = static_cast<int64_t>(dst) * st.slot_floats + off;
    j.row0 = first[s];
    j.n = count[s];
    if (!st.keep.empty() && !st.keep[s].empty()) {
      const auto& kp = st.keep[s];
      TF_CHECK(!has_forms || st.step[s] == 1, op, ": seq ", s,
               " asks for kept states in the chunked form (keep needs step)");
      TF_CHECK(static_cast<int64_t>(kp.size()) == count[s] - 1, op, ": seq ", s, " has ", kp.size(),
               " keep slots for ", count[s], " rows");
      TF_CHECK(st.keep_pool != nullptr, op, ": seq ", s, " has keep slots but no keep pool");
      j.keep0 = static_cast<int32_t>(jobs.keep.size());
      j.nkeep = static_cast<int32_t>(kp.size());
      for (int32_t k : kp) {
        TF_CHECK(k >= 0, op, ": seq ", s, " keep slot ", k);
        jobs.keep.push_back(static_cast<int64_t>(k) * st.slot_floats + off);
      }
    }
    (has_forms && st.step[s] == 1 ? jobs.step : jobs.chunked).push_back(j);
  }
  return jobs;
}

DevJobs upload_jobs(CudaBackend& be, const SeqJobs& j) {
  const uint64_t js = sizeof(SeqJob);
  const uint64_t n_step = j.step.size(), n_chunk = j.chunked.size(), n_keep = j.keep.size();
  const uint64_t keep_at = (n_step + n_chunk) * js;
  // One upload through the pinned metadata ring, ordered on the stream: a synchronous copy here
  // would wait for every kernel queued before it, once per recurrent op.
  thread_local std::vector<uint8_t> host;
  host.resize(keep_at + n_keep * 8);
  if (n_step) std::memcpy(host.data(), j.step.data(), n_step * js);
  if (n_chunk) std::memcpy(host.data() + n_step * js, j.chunked.data(), n_chunk * js);
  if (n_keep) std::memcpy(host.data() + keep_at, j.keep.data(), n_keep * 8);
  const auto* s = static_cast<const uint8_t*>(be.meta(host.data(), host.size()));
  DevJobs d;
  d.step = reinterpret_cast<const SeqJob*>(s);
  d.chunked = reinterpret_cast<const SeqJob*>(s + n_step * js);
  d.keep = reinterpret_cast<const int64_t*>(s + keep_at);
  return d;
}

int max_smem_optin() {
  int dev = 0, v = 0;
  TF_CUDA_CHECK(cudaGetDevice(&dev), "shared memory limit");
  TF_CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev),
                "shared memory limit");
  return v;
}

// A 1-row weight of n entries, as f32 on the device.
const float* vec_f32(const Weight* w, int64_t n, const char* op, const char* what) {
  if (w == nullptr) return nullptr;
  const CudaWeight& cw = as_cuda(*w, op);
  TF_CHECK(cw.rows == 1 && cw.cols == n && cw.f32 != nullptr, op, ": ", what, " ", cw.name, " is [",
           cw.rows, " x ", cw.cols, "]; expected [1 x ", n, "]");
  return cw.f32;
}

void check_cols(const Cols& c, int64_t m, int64_t width, const char* op, const char* what) {
  check_tensor(c.t, op, what);
  TF_CHECK(c.t.rows == m && c.col >= 0 && width >= 0 && c.col + width <= c.t.cols, op, ": ", what,
           " columns [", c.col, ", ", c.col + width, ") of [", c.t.rows, " x ", c.t.cols, "] for ",
           m, " rows");
}

namespace {

constexpr int kMaxConvK = 8;
constexpr int kConvThreads = 128;
constexpr int kConvSegRows = 64;  // rows a conv thread walks: a prefill chunk spreads over the SMs

__device__ __forceinline__ float silu_f(float v) { return v / (1.0f + expf(-v)); }

struct ConvArgs {
  const float* x;
  float* out;
  int dt;
  const void* w;
  const float* wscales;
  const float* bias;
  float* pool;
  float* keep_pool;
  const SeqJob* jobs;
  const int64_t* keep;
  int64_t C;
  int K;
  bool silu;
  // In place (x is out): the K - 1 inputs before each later segment, saved by conv_halo_kernel
  // before any output lands, at (halo_base[job] + segment - 1) * (K - 1) * C.
  const float* halo;
  const int32_t* halo_base;
};

// Saves the K - 1 inputs before each segment but a sequence's first, for an in-place conv.
__global__ void conv_halo_kernel(ConvArgs a, float* halo) {
  grid_wait();
  grid_launch_next();
  const SeqJob j = a.jobs[blockIdx.x];
  const int64_t c = static_cast<int64_t>(blockIdx.y) * kConvThreads + threadIdx.x;
  const int z = static_cast<int>(blockIdx.z) + 1, t0 = z * kConvSegRows, H = a.K - 1;
  if (c >= a.C || t0 >= j.n) return;
  float* dst = halo + static_cast<int64_t>(a.halo_base[blockIdx.x] + z - 1) * H * a.C;
  for (int i = 0; i < H; ++i) dst[i * a.C + c] = a.x[(j.row0 + t0 - H + i) * a.C + c];
}

// One thread per (sequence, channel, segment of kConvSegRows rows): the K - 1 inputs before each
// row live in registers, a segment's first from the rows before it or the state. Each output is
// the same chain of products however the rows are cut.
__global__ void conv_kernel(ConvArgs a) {
  grid_wait();
  grid_launch_next();
  const SeqJob j = a.jobs[blockIdx.x];
  const int64_t c = static_cast<int64_t>(blockIdx.y) * kConvThreads + threadIdx.x;
  const int t0 = static_cast<int>(blockIdx.z) * kConvSegRows;
  if (c >= a.C || t0 >= j.n) return;
  const int t1 = min(j.n, t0 + kConvSegRows);
  const int H = a.K - 1;
  float hist[kMaxConvK], w[kMaxConvK];
#pragma unroll
  for (int i = 0; i < kMaxConvK; ++i) {
    const int q = t0 - H + i;  // the row hist[i] holds, relative to the sequence's first
    const float* hl = a.halo && blockIdx.z > 0
                          ? a.halo + static_cast<int64_t>(a.halo_base[blockIdx.x] + blockIdx.z - 1) * H * a.C
                          : nullptr;
    hist[i] = i >= H ? 0.0f
              : q < 0 ? a.pool[j.src + (q + H) * a.C + c]
              : hl    ? hl[i * a.C + c]
                      : a.x[(j.row0 + q) * a.C + c];
    w[i] = i < a.K ? load_elem(a.dt, a.w, a.wscales, c * a.K + i) : 0.0f;
  }
  const float b = a.bias ? a.bias[c] : 0.0f;
  for (int t = t0; t < t1; ++t) {
    const int64_t r = j.row0 + t;
    const float xv = a.x[r * a.C + c];
    float acc = 0.0f;
#pragma unroll
    for (int i = 0; i < kMaxConvK; ++i)
      if (i < H) acc = __fmaf_rn(w[i], hist[i], acc);
    acc = __fmaf_rn(w[H], xv, acc);
    if (a.bias) acc = acc + b;
    a.out[r * a.C + c] = a.silu ? silu_f(acc) : acc;
#pragma unroll
    for (int i = 0; i + 1 < kMaxConvK; ++i)
      if (i + 1 < H) hist[i] = hist[i + 1];
    if (H > 0) {
#pragma unroll
      for (int i = 0; i < kMaxConvK; ++i)
        if (i == H - 1) hist[i] = xv;
    }
    if (t + 1 < j.n && j.nkeep > 0) {
      float* kp = a.keep_pool + a.keep[j.keep0 + t];
#pragma unroll
      for (int i = 0; i < kMaxConvK; ++i)
        if (i < H) kp[i * a.C + c] = hist[i];
    }
  }
  if (t1 < j.n) return;  // the last segment writes the state
#pragma unroll
  for (int i = 0; i < kMaxConvK; ++i)
    if (i < H) a.pool[j.dst + i * a.C + c] = hist[i];
}

}  // namespace

void CudaBackend::conv1d_causal(const Tensor& x, const Weight& wt, const Weight* bias, bool silu,
                                const RowLayout& rows, const StateRefs& st, int64_t off, Tensor out) {
  const ProfScope prof(*this, "conv1d_causal", nullptr, x.rows);
  const CudaWeight& w = as_cuda(wt, "conv1d_causal");
  check_tensor(x, "conv1d_causal", "x");
  check_tensor(out, "conv1d_causal", "out");
  const int64_t C = x.cols;
  TF_CHECK(w.rows == C && w.cols >= 1 && w.cols <= kMaxConvK && out.rows == x.rows && out.cols == C,
           "conv1d_causal: x [", x.rows, " x ", C, "], weight ", w.name, " [", w.rows, " x ", w.cols,
           "], out [", out.rows, " x ", out.cols, "]; kernel width must be 1..", kMaxConvK);
  const int K = static_cast<int>(w.cols);
  const float* b = vec_f32(bias, C, "conv1d_causal", "bias");
  const SeqJobs jobs = plan_seqs(rows, st, off, (K - 1) * C, x.rows, "conv1d_causal", false);
  if (jobs.chunked.empty() || C == 0) return;
  const DevJobs d = upload_jobs(*this, jobs);
  ConvArgs a{x.data, out.data, dt_code(w.dtype), w.data, w.scales, b, st.pool, st.keep_pool,
             d.chunked, d.keep, C, K, silu, nullptr, nullptr};
  TF_CHECK(grid_for(C, kConvThreads) <= 65535u, "conv1d_causal: ", C, " channels");
  const auto nj = static_cast<unsigned>(jobs.chunked.size());
  int32_t longest = 0, later = 0;
  std::vector<int32_t> base(nj);
  for (unsigned i = 0; i < nj; ++i) {
    const int32_t n = jobs.chunked[i].n;
    longest = std::max(longest, n);
    base[i] = later;
    later += std::max(0, (n + kConvSegRows - 1) / kConvSegRows - 1);
  }
  const auto segs = static_cast<unsigned>((longest + kConvSegRows - 1) / kConvSegRows);
  const dim3 grid(nj, grid_for(C, kConvThreads), segs);
  // Later segments of an in-place conv read their first inputs from a copy made before any output.
  const bool overlap = x.data < out.data + out.rows * C && out.data < x.data + x.rows * C;
  if (overlap && later > 0 && K > 1) {
    // Sized by the round's rows, which bound the later segments, so the warm-up's round sizes it.
    const auto bound = static_cast<uint64_t>((x.rows + kConvSegRows - 1) / kConvSegRows);
    auto* halo = static_cast<float*>(buffer(kSlotConvHalo, bound * (K - 1) * C * 4));
    a.halo_base = static_cast<const int32_t*>(meta(base.data(), base.size() * 4));
    launch_kernel(conv_halo_kernel, dim3(nj, grid.y, segs - 1), kConvThreads, 0, a, halo);
    a.halo = halo;
  }
  launch_kernel(conv_kernel, grid, kConvThreads, 0, a);
  check_launch("conv1d_causal");
}

}  // namespace tf::cuda
