#pragma once
// Shared gates for CPU kernel tests: reference (float64) and invariance checks that return
// their failures, so the same gate can be shown to catch a planted fault.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "base/dtype.h"
#include "base/error.h"

namespace tf::cputest {

// Kernel tables this machine runs (portable always, avx2 and avx512 where the CPU has them).
inline std::vector<const cpu::CpuKernels*> kernel_tables() {
  std::vector<const cpu::CpuKernels*> v{&cpu::portable_kernels()};
  if (cpu::avx2_kernels()) v.push_back(cpu::avx2_kernels());
  if (cpu::avx512_kernels()) v.push_back(cpu::avx512_kernels());
  return v;
}

inline std::vector<float> random_floats(std::mt19937& rng, size_t n, float lo = -1.f, float hi = 1.f) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// A stored weight: encoded bytes plus the view a loader would hand the backend.
struct HostWeight {
  std::vector<uint8_t> bytes;
  TensorView view;
  double at(int64_t r, int64_t c) const { return tensor_element(view, r * view.shape.back() + c); }
};

inline HostWeight make_weight(DType t, int64_t rows, int64_t cols, std::mt19937& rng,
                              bool one_dim = false, float lo = -1.f, float hi = 1.f) {
  HostWeight w;
  auto f = random_floats(rng, static_cast<size_t>(rows * cols), lo, hi);
  const uint64_t rb = dtype_row_bytes(t, static_cast<uint64_t>(cols));
  w.bytes.resize(static_cast<size_t>(rb * rows));
  for (int64_t r = 0; r < rows; ++r) {
    uint8_t* p = w.bytes.data() + r * rb;
    const float* src = f.data() + r * cols;
    if (t == DType::F32) {
      std::memcpy(p, src, static_cast<size_t>(cols) * 4);
    } else if (t == DType::BF16 || t == DType::F16) {
      for (int64_t c = 0; c < cols; ++c) {
        uint16_t h = t == DType::BF16 ? f32_to_bf16(src[c]) : f32_to_f16(src[c]);
        std::memcpy(p + c * 2, &h, 2);
      }
    } else if (t == DType::Q8_0) {
      for (int64_t b = 0; b < cols / kQ8Block; ++b) {
        float amax = 0;
        for (int i = 0; i < kQ8Block; ++i) amax = std::max(amax, std::fabs(src[b * kQ8Block + i]));
        const float d = amax / 127.f;
        const uint16_t h = f32_to_f16(d);
        uint8_t* blk = p + b * kQ8BlockBytes;
        std::memcpy(blk, &h, 2);
        for (int i = 0; i < kQ8Block; ++i) {
          const float q = d > 0 ? std::round(src[b * kQ8Block + i] / d) : 0.f;
          blk[2 + i] = static_cast<uint8_t>(static_cast<int8_t>(std::max(-127.f, std::min(127.f, q))));
        }
      }
    }
  }
  w.view.name = "test.weight";
  w.view.dtype = t;
  w.view.shape = one_dim ? std::vector<int64_t>{cols} : std::vector<int64_t>{rows, cols};
  w.view.data = w.bytes.data();
  w.view.nbytes = w.bytes.size();
  return w;
}

// A host copy of a backend tensor with NaN poison, so unwritten outputs show.
inline Tensor poisoned(Backend& be, int64_t rows, int64_t cols) {
  Tensor t = be.alloc(rows, cols);
  std::vector<float> nan(static_cast<size_t>(rows * cols), std::nanf(""));
  be.from_host(nan.data(), t);
  return t;
}

inline std::vector<float> host(Backend& be, const Tensor& t) {
  std::vector<float> v(static_cast<size_t>(t.rows * t.cols));
  be.to_host(t, v.data());
  return v;
}

inline Tensor upload(Backend& be, const std::vector<float>& v, int64_t rows, int64_t cols) {
  Tensor t = be.alloc(rows, cols);
  be.from_host(v.data(), t);
  return t;
}

// Relative error of got vs ref, scaled by the magnitude that bounds rounding (sum of |terms|).
inline std::string check_close(const std::vector<float>& got, const std::vector<double>& ref,
                               const std::vector<double>& mag, double tol, const std::string& what) {
  for (size_t i = 0; i < ref.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - ref[i]);
    if (!(err <= tol * std::max(mag[i], 1e-30)))
      return what + ": element " + std::to_string(i) + " got " + std::to_string(got[i]) +
             " want " + std::to_string(ref[i]) + " (err " + std::to_string(err) + ")";
  }
  return "";
}

// Page `page` of kv through the host tier (Backend::kv_page_to_host) as floats: f32 values as they
// are, bf16 ones widened (exactly).
inline std::vector<float> kv_page_values(Backend& be, const KvStorage& kv, int page) {
  std::vector<uint8_t> b(Backend::kv_page_bytes(kv), 0xff);
  be.kv_page_to_host(kv, page, b.data());
  std::vector<float> f(b.size() / static_cast<size_t>(kv.value_bytes));
  for (size_t i = 0; i < f.size(); ++i) {
    if (kv.value_bytes == 4) {
      std::memcpy(&f[i], b.data() + 4 * i, 4);
    } else {
      uint16_t h;
      std::memcpy(&h, b.data() + 2 * i, 2);
      f[i] = bf16_to_f32(h);
    }
  }
  return f;
}

inline bool same_bits(const float* a, const float* b, int64_t n) {
  return std::memcmp(a, b, static_cast<size_t>(n) * sizeof(float)) == 0;
}

// The activation rule of Q8_0 matmuls: per 32 values, d = max|x| / 127 (f32), q = x / d
// rounded to nearest even; returns the dequantized row (q * d) and each value's d.
inline void quantize_like_kernel(const float* x, int64_t K, std::vector<double>& deq,
                                 std::vector<double>& step) {
  deq.assign(static_cast<size_t>(K), 0.0);
  step.assign(static_cast<size_t>(K), 0.0);
  for (int64_t b = 0; b < K / kQ8Block; ++b) {
    float amax = 0.f;
    for (int i = 0; i < kQ8Block; ++i) amax = std::max(amax, std::fabs(x[b * kQ8Block + i]));
    const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int i = 0; i < kQ8Block; ++i) {
      const size_t k = static_cast<size_t>(b * kQ8Block + i);
      deq[k] = static_cast<double>(std::nearbyint(x[k] * id)) * d;
      step[k] = d;
    }
  }
}

// ---- matmul gate ----
using MatmulFn = std::function<void(Backend&, const Tensor&, const Weight&, const Weight*, Tensor)>;

inline MatmulFn real_matmul() {
  return [](Backend& be, const Tensor& x, const Weight& w, const Weight* b, Tensor y) {
    be.matmul(x, w, b, y);
  };
}

// Reference within tol (relative to sum |x w|), and every row bit-identical for each m in
// ms taken at shifting offsets inside the full batch, and across the given backends.
inline std::string matmul_gate(const MatmulFn& f, const std::vector<Backend*>& bes, DType dt,
                               int64_t K, int64_t N, int64_t M, const std::vector<int64_t>& ms,
                               bool with_bias, uint32_t seed) {
  std::mt19937 rng(seed);
  HostWeight hw = make_weight(dt, N, K, rng);
  HostWeight hb = make_weight(DType::F32, 1, N, rng, true);
  auto xs = random_floats(rng, static_cast<size_t>(M * K));
  // Q8_0 reference takes x as the kernel quantizes it; exact_ref keeps x and allows for the
  // quantization: |error| <= sum_k |w_k| * d_k / 2 on top of the rounding tolerance.
  const bool q8 = dt == DType::Q8_0;
  std::vector<double> ref(static_cast<size_t>(M * N)), mag(ref.size()), exact_ref(ref.size()),
      qbound(ref.size()), xd, step;
  for (int64_t r = 0; r < M; ++r) {
    if (q8) quantize_like_kernel(xs.data() + r * K, K, xd, step);
    for (int64_t n = 0; n < N; ++n) {
      double s = with_bias ? hb.at(0, n) : 0, a = std::fabs(s), e = s, qb = 0;
      for (int64_t k = 0; k < K; ++k) {
        const double xv = static_cast<double>(xs[static_cast<size_t>(r * K + k)]);
        const double t = (q8 ? xd[static_cast<size_t>(k)] : xv) * hw.at(n, k);
        s += t;
        a += std::fabs(t);
        e += xv * hw.at(n, k);
        if (q8) qb += std::fabs(hw.at(n, k)) * step[static_cast<size_t>(k)] * 0.5;
      }
      ref[static_cast<size_t>(r * N + n)] = s;
      mag[static_cast<size_t>(r * N + n)] = a;
      exact_ref[static_cast<size_t>(r * N + n)] = e;
      qbound[static_cast<size_t>(r * N + n)] = qb;
    }
  }
  std::vector<float> first;
  const std::string tag = std::string(dtype_name(dt)) + " K=" + std::to_string(K) + " N=" + std::to_string(N);
  for (Backend* be : bes) {
    auto w = be->load_weight(hw.view);
    auto b = be->load_weight(hb.view);
    Tensor x = upload(*be, xs, M, K);
    Tensor y = poisoned(*be, M, N);
    f(*be, x, *w, with_bias ? b.get() : nullptr, y);
    auto full = host(*be, y);
    std::string e = check_close(full, ref, mag, 1e-6 * std::sqrt(static_cast<double>(K)) + 1e-6,
                                be->name() + " " + tag + " M=" + std::to_string(M));
    if (!e.empty()) return e;
    if (q8)
      for (size_t i = 0; i < full.size(); ++i)
        if (!(std::fabs(full[i] - exact_ref[i]) <= qbound[i] * (1 + 1e-5) + 1e-5 * mag[i]))
          return be->name() + " " + tag + ": element " + std::to_string(i) + " got " +
                 std::to_string(full[i]) + " want " + std::to_string(exact_ref[i]) +
                 " beyond the activation quantization bound " + std::to_string(qbound[i]);
    if (first.empty()) first = full;
    if (!same_bits(first.data(), full.data(), M * N))
      return tag + ": result differs between thread counts (" + std::to_string(be->threads()) + ")";
    for (int64_t m : ms) {
      const int64_t off = (m * 7) % (M - m + 1);
      Tensor ym = poisoned(*be, m, N);
      f(*be, x.slice_rows(off, m), *w, with_bias ? b.get() : nullptr, ym);
      auto part = host(*be, ym);
      be->free(ym);
      for (int64_t r = 0; r < m; ++r)
        if (!same_bits(part.data() + r * N, full.data() + (off + r) * N, N))
          return be->name() + " " + tag + ": row " + std::to_string(off + r) + " differs when computed in a batch of " +
                 std::to_string(m);
    }
    be->free(x);
    be->free(y);
  }
  return "";
}

// ---- attention gate ----
using AttnFn = std::function<void(Backend&, const Tensor&, Tensor, const KvStorage&, int,
                                  const RowLayout&, const AttnParams&)>;

inline AttnFn real_attention() {
  return [](Backend& be, const Tensor& q, Tensor out, const KvStorage& kv, int layer,
            const RowLayout& rows, const AttnParams& p) { be.attention(q, out, kv, layer, rows, p); };
}

// One sequence of L positions at layer 1: reference at every row, then bit equality across
// chunked stores, one-row stores, scrambled pages, one-call vs per-row queries, and backends.
inline std::string attention_gate(const AttnFn& f, const std::vector<Backend*>& bes, int L,
                                  const AttnParams& p, int page_size, uint32_t seed) {
  std::mt19937 rng(seed);
  const int kvw = p.n_kv_heads * p.head_dim, qw = p.n_heads * p.head_dim, layers = 2;
  const int npages = (L + page_size - 1) / page_size;
  auto ks = random_floats(rng, static_cast<size_t>(L * kvw), -2.f, 2.f);
  auto vs = random_floats(rng, static_cast<size_t>(L * kvw));
  auto qs = random_floats(rng, static_cast<size_t>(L * qw), -2.f, 2.f);
  // float64 reference
  std::vector<double> ref(static_cast<size_t>(L * qw)), mag(ref.size());
  const int group = p.n_heads / p.n_kv_heads;
  for (int r = 0; r < L; ++r)
    for (int h = 0; h < p.n_heads; ++h) {
      const int first = p.sliding_window > 0 ? std::max(0, r - p.sliding_window + 1) : 0;
      std::vector<double> s;
      double mx = -1e300;
      for (int t = first; t <= r; ++t) {
        double d = 0;
        for (int i = 0; i < p.head_dim; ++i)
          d += static_cast<double>(qs[r * qw + h * p.head_dim + i]) * ks[t * kvw + (h / group) * p.head_dim + i];
        d *= p.scale;
        if (p.softcap > 0) d = p.softcap * std::tanh(d / p.softcap);
        s.push_back(d);
        mx = std::max(mx, d);
      }
      double sum = 0;
      for (auto& v : s) sum += (v = std::exp(v - mx));
      for (int i = 0; i < p.head_dim; ++i) {
        double o = 0, a = 0;
        for (int t = first; t <= r; ++t) {
          const double term = s[static_cast<size_t>(t - first)] / sum * vs[t * kvw + (h / group) * p.head_dim + i];
          o += term;
          a += std::fabs(term);
        }
        ref[static_cast<size_t>(r * qw + h * p.head_dim + i)] = o;
        mag[static_cast<size_t>(r * qw + h * p.head_dim + i)] = a + 1e-3;
      }
    }
  std::vector<float> first_out;
  for (Backend* be : bes) {
    // Three storages: one call with pages in order; chunks of 5 with scrambled pages; one row at a time.
    std::vector<std::vector<float>> outs;
    for (int variant = 0; variant < 3; ++variant) {
      auto kv = be->alloc_kv(layers, npages + 3, page_size, p.n_kv_heads, p.head_dim);
      RowLayout lay;
      lay.seq_pages.resize(1);
      for (int i = 0; i < npages; ++i) lay.seq_pages[0].push_back(variant == 1 ? (npages + 2 - i) : i);
      const int chunk = variant == 0 ? L : variant == 1 ? 5 : 1;
      for (int b = 0; b < L; b += chunk) {
        const int n = std::min(chunk, L - b);
        RowLayout part = lay;
        for (int r = b; r < b + n; ++r) part.pos.push_back(r), part.seq.push_back(0);
        std::vector<float> kpart(ks.begin() + b * kvw, ks.begin() + (b + n) * kvw);
        std::vector<float> vpart(vs.begin() + b * kvw, vs.begin() + (b + n) * kvw);
        Tensor kt = upload(*be, kpart, n, kvw), vt = upload(*be, vpart, n, kvw);
        be->kv_store(*kv, 1, kt, vt, part);
        be->free(kt);
        be->free(vt);
      }
      // Queries: all rows in one call, or one row per call for the last variant.
      Tensor q = upload(*be, qs, L, qw);
      Tensor out = poisoned(*be, L, qw);
      const int qchunk = variant == 2 ? 1 : L;
      for (int b = 0; b < L; b += qchunk) {
        const int n = std::min(qchunk, L - b);
        RowLayout part = lay;
        for (int r = b; r < b + n; ++r) part.pos.push_back(r), part.seq.push_back(0);
        f(*be, q.slice_rows(b, n), out.slice_rows(b, n), *kv, 1, part, p);
      }
      outs.push_back(host(*be, out));
      be->free(q);
      be->free(out);
    }
    std::string e = check_close(outs[0], ref, mag, 2e-5, be->name() + " attention L=" + std::to_string(L));
    if (!e.empty()) return e;
    for (int v = 1; v < 3; ++v)
      if (!same_bits(outs[0].data(), outs[static_cast<size_t>(v)].data(), L * qw))
        return be->name() + ": attention differs for storage/query variant " + std::to_string(v);
    if (first_out.empty()) first_out = outs[0];
    if (!same_bits(first_out.data(), outs[0].data(), L * qw))
      return "attention differs between thread counts";
  }
  return "";
}

}  // namespace tf::cputest
