// Gates of the kernel contract: the gpu op against the cpu backend, NaN-poisoned outputs,
// and bit equality of every row across batch sizes, offsets and chunkings.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>

#include "contract.h"

namespace tf::contract {

using cputest::host;
using cputest::poisoned;
using cputest::same_bits;
using cputest::upload;

MatmulFn real_matmul() {
  return [](Backend& be, const Tensor& x, const Weight& w, const Weight* b, Tensor y) { be.matmul(x, w, b, y); };
}
RmsFn real_rmsnorm() {
  return [](Backend& be, const Tensor& x, const Weight& g, float eps, bool one, Tensor y) {
    be.rmsnorm(x, g, eps, one, y);
  };
}
RopeFn real_rope() {
  return [](Backend& be, Tensor x, int h, const int32_t* pos, const RopeParams& p) { be.rope(x, h, pos, p); };
}
ActFn real_act() {
  return [](Backend& be, Act a, const Tensor& g, const Tensor& u, Tensor o) { be.act_mul(a, g, u, o); };
}
StoreFn real_store() {
  return [](Backend& be, KvStorage& kv, int l, const Tensor& k, const Tensor& v, const RowLayout& r) {
    be.kv_store(kv, l, k, v, r);
  };
}
AttnFn real_attention() {
  return [](Backend& be, const Tensor& q, Tensor o, const KvStorage& kv, int l, const RowLayout& r,
            const AttnParams& p) { be.attention(q, o, kv, l, r, p); };
}
TopkFn real_topk() {
  return [](Backend& be, const Tensor& x, int k, bool norm, int32_t* i, float* w) {
    be.topk_softmax(x, k, norm, i, w);
  };
}
ScatterFn real_scatter() {
  return [](Backend& be, Tensor d, const Tensor& s, const int32_t* r, const float* w, int n) {
    be.scatter_add_scaled(d, s, r, w, n);
  };
}

// |got - ref| <= tol * mag + extra for every element; NaN anywhere fails.
std::string close(const std::vector<float>& got, const std::vector<float>& ref,
                  const std::vector<double>& mag, double tol, const std::string& what,
                  const std::vector<double>* extra) {
  for (size_t i = 0; i < ref.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - ref[i]);
    const double bound = tol * std::max(mag[i], 1e-30) + (extra ? (*extra)[i] : 0.0);
    if (!(err <= bound))
      return what + ": element " + std::to_string(i) + " got " + std::to_string(got[i]) +
             " want " + std::to_string(ref[i]) + " (err " + std::to_string(err) + ", bound " +
             std::to_string(bound) + ")";
  }
  return "";
}

std::string exact(const std::vector<float>& got, const std::vector<float>& ref, const std::string& what) {
  if (got.size() == ref.size() && same_bits(got.data(), ref.data(), static_cast<int64_t>(got.size())))
    return "";
  for (size_t i = 0; i < ref.size(); ++i)
    if (std::memcmp(&got[i], &ref[i], 4) != 0)
      return what + ": element " + std::to_string(i) + " got " + std::to_string(got[i]) +
             " want exactly " + std::to_string(ref[i]);
  return what + ": size differs";
}

namespace {

std::vector<double> abs_of(const std::vector<float>& v) {
  std::vector<double> m(v.size());
  for (size_t i = 0; i < v.size(); ++i) m[i] = std::fabs(v[i]);
  return m;
}

// Offset of a sub-batch of m rows inside M, moving with m so rows land at many positions.

std::vector<int64_t> all_m(int64_t M) {
  std::vector<int64_t> v;
  for (int64_t m = 1; m <= std::min<int64_t>(64, M); ++m) v.push_back(m);
  return v;
}

}  // namespace

int64_t offset_for(int64_t m, int64_t M) { return (m * 7) % (M - m + 1); }

std::string matmul_gate(const MatmulFn& f, Backend& gpu, Backend& cpu, DType dt, int64_t K,
                        int64_t N, int64_t M, const std::vector<int64_t>& ms, bool with_bias,
                        uint32_t seed) {
  std::mt19937 rng(seed);
  HostWeight hw = make_weight(dt, N, K, rng);
  HostWeight hb = make_weight(DType::F32, 1, N, rng, true);
  auto xs = random_floats(rng, static_cast<size_t>(M * K));
  const std::string tag = std::string("matmul ") + dtype_name(dt) + " K=" + std::to_string(K) +
                          " N=" + std::to_string(N) + " M=" + std::to_string(M);
  // Reference: the cpu backend. Bound: tol * sum |x w|, plus for Q8_0 the cpu's activation
  // quantization (sum |w| * d / 2), since the gpu multiplies bf16 x by the exact int8 values.
  std::vector<float> ref;
  {
    auto w = cpu.load_weight(hw.view);
    auto b = cpu.load_weight(hb.view);
    Tensor x = upload(cpu, xs, M, K), y = poisoned(cpu, M, N);
    cpu.matmul(x, *w, with_bias ? b.get() : nullptr, y);
    ref = host(cpu, y);
    cpu.free(x);
    cpu.free(y);
  }
  std::vector<double> mag(ref.size()), qb(ref.size(), 0.0), deq, step;
  std::vector<double> wd(static_cast<size_t>(N * K));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k) wd[static_cast<size_t>(n * K + k)] = hw.at(n, k);
  for (int64_t r = 0; r < M; ++r) {
    if (dt == DType::Q8_0) cputest::quantize_like_kernel(xs.data() + r * K, K, deq, step);
    for (int64_t n = 0; n < N; ++n) {
      double a = with_bias ? std::fabs(hb.at(0, n)) : 0.0, q = 0.0;
      for (int64_t k = 0; k < K; ++k) {
        const double wv = wd[static_cast<size_t>(n * K + k)];
        a += std::fabs(xs[static_cast<size_t>(r * K + k)] * wv);
        if (dt == DType::Q8_0) q += std::fabs(wv) * step[static_cast<size_t>(k)] * 0.5;
      }
      mag[static_cast<size_t>(r * N + n)] = a;
      qb[static_cast<size_t>(r * N + n)] = q * (1 + 1e-5);
    }
  }
  auto w = gpu.load_weight(hw.view);
  auto b = gpu.load_weight(hb.view);
  Tensor x = upload(gpu, xs, M, K), y = poisoned(gpu, M, N);
  f(gpu, x, *w, with_bias ? b.get() : nullptr, y);
  auto full = host(gpu, y);
  // Split-x tensor cores keep ~16 bits of x (and all of an F16 w): 2^-15 plus f32 order noise.
  const double tol = dt == DType::Q8_0 ? 1e-2 : 1e-4;
  double worst = 0.0;
  for (size_t i = 0; i < ref.size(); ++i)
    worst = std::max(worst, (std::fabs(static_cast<double>(full[i]) - ref[i]) - qb[i]) /
                                std::max(mag[i], 1e-30));
  std::printf("  measured %s: max (err - qbound) / sum|xw| = %.3g (tol %.0e)\n", tag.c_str(), worst, tol);
  std::string e = close(full, ref, mag, tol, tag, &qb);
  for (size_t i = 0; e.empty() && i < ms.size(); ++i) {
    const int64_t m = ms[i], off = offset_for(m, M);
    Tensor ym = poisoned(gpu, m, N);
    f(gpu, x.slice_rows(off, m), *w, with_bias ? b.get() : nullptr, ym);
    auto part = host(gpu, ym);
    gpu.free(ym);
    for (int64_t r = 0; r < m && e.empty(); ++r)
      if (!same_bits(part.data() + r * N, full.data() + (off + r) * N, N))
        e = tag + ": row " + std::to_string(off + r) + " differs when computed in a batch of " +
            std::to_string(m);
  }
  gpu.free(x);
  gpu.free(y);
  return e;
}

std::string matmul_gate_all(const MatmulFn& f, Backend& gpu, Backend& cpu, DType dt, int64_t K,
                            int64_t N, int64_t M, bool bias, uint32_t seed) {
  return matmul_gate(f, gpu, cpu, dt, K, N, M, all_m(M), bias, seed);
}

std::string rmsnorm_gate(const RmsFn& f, Backend& gpu, Backend& cpu, DType gdt, int64_t n,
                         bool add_one, uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t M = 70;
  HostWeight hg = make_weight(gdt, 1, n, rng, true, -2.f, 2.f);
  auto xs = random_floats(rng, static_cast<size_t>(M * n), -3.f, 3.f);
  const std::string tag = "rmsnorm n=" + std::to_string(n);
  std::vector<float> ref;
  {
    auto g = cpu.load_weight(hg.view);
    Tensor x = upload(cpu, xs, M, n), y = poisoned(cpu, M, n);
    cpu.rmsnorm(x, *g, 1e-5f, add_one, y);
    ref = host(cpu, y);
    cpu.free(x);
    cpu.free(y);
  }
  auto g = gpu.load_weight(hg.view);
  Tensor x = upload(gpu, xs, M, n), y = poisoned(gpu, M, n);
  f(gpu, x, *g, 1e-5f, add_one, y);
  auto full = host(gpu, y);
  std::string e = close(full, ref, abs_of(ref), 1e-4, tag);
  for (int64_t m = 1; m <= 64 && e.empty(); ++m) {
    const int64_t off = offset_for(m, M);
    Tensor ym = poisoned(gpu, m, n);
    f(gpu, x.slice_rows(off, m), *g, 1e-5f, add_one, ym);
    auto part = host(gpu, ym);
    gpu.free(ym);
    if (!same_bits(part.data(), full.data() + off * n, m * n))
      e = tag + ": rows differ when computed in a batch of " + std::to_string(m);
  }
  gpu.free(x);
  gpu.free(y);
  return e;
}

std::string add_rmsnorm_gate(Backend& gpu, Backend& cpu, int64_t n, bool add_one, uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t M = 70;
  HostWeight hg = make_weight(DType::F32, 1, n, rng, true, -2.f, 2.f);
  auto xs = random_floats(rng, static_cast<size_t>(M * n), -3.f, 3.f);
  auto as = random_floats(rng, static_cast<size_t>(M * n), -3.f, 3.f);
  const std::string tag = "add_rmsnorm n=" + std::to_string(n);
  std::vector<float> ref;
  {
    auto g = cpu.load_weight(hg.view);
    Tensor x = upload(cpu, xs, M, n), a = upload(cpu, as, M, n), y = poisoned(cpu, M, n);
    cpu.add_rmsnorm(x, a, *g, 1e-5f, add_one, y);
    ref = host(cpu, y);
    cpu.free(x), cpu.free(a), cpu.free(y);
  }
  auto g = gpu.load_weight(hg.view);
  Tensor a = upload(gpu, as, M, n);
  // The fused op against the GPU's own add then rmsnorm: the same bits in x and in y.
  Tensor x1 = upload(gpu, xs, M, n), y1 = poisoned(gpu, M, n);
  gpu.add_rmsnorm(x1, a, *g, 1e-5f, add_one, y1);
  Tensor x2 = upload(gpu, xs, M, n), y2 = poisoned(gpu, M, n);
  gpu.add(x2, a);
  gpu.rmsnorm(x2, *g, 1e-5f, add_one, y2);
  const auto fx = host(gpu, x1), fy = host(gpu, y1);
  std::string e = close(fy, ref, abs_of(ref), 1e-4, tag);
  if (e.empty() && !same_bits(fx.data(), host(gpu, x2).data(), M * n)) e = tag + ": x differs from add";
  if (e.empty() && !same_bits(fy.data(), host(gpu, y2).data(), M * n))
    e = tag + ": y differs from add then rmsnorm";
  for (int64_t m : {int64_t{1}, int64_t{7}, int64_t{33}, int64_t{64}}) {
    if (!e.empty()) break;
    const int64_t off = offset_for(m, M);
    Tensor xm = upload(gpu, std::vector<float>(xs.begin() + off * n, xs.begin() + (off + m) * n), m, n);
    Tensor ym = poisoned(gpu, m, n);
    gpu.add_rmsnorm(xm, a.slice_rows(off, m), *g, 1e-5f, add_one, ym);
    if (!same_bits(host(gpu, ym).data(), fy.data() + off * n, m * n))
      e = tag + ": rows differ when computed in a batch of " + std::to_string(m);
    gpu.free(xm), gpu.free(ym);
  }
  gpu.free(a), gpu.free(x1), gpu.free(y1), gpu.free(x2), gpu.free(y2);
  return e;
}

std::string rope_gate(const RopeFn& f, Backend& gpu, Backend& cpu, int n_heads, int head_dim,
                      int rot_dim, bool neox, float mscale, uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t M = 70, C = static_cast<int64_t>(n_heads) * head_dim;
  RopeParams p;
  p.head_dim = head_dim, p.rot_dim = rot_dim, p.neox = neox, p.mscale = mscale;
  for (int i = 0; i < rot_dim / 2; ++i)
    p.inv_freq.push_back(static_cast<float>(std::pow(10000.0, -2.0 * i / rot_dim)));
  auto xs = random_floats(rng, static_cast<size_t>(M * C), -2.f, 2.f);
  std::vector<int32_t> pos(static_cast<size_t>(M));
  std::uniform_int_distribution<int32_t> pd(0, 131072);
  for (auto& v : pos) v = pd(rng);
  const std::string tag = "rope heads=" + std::to_string(n_heads) + " hd=" + std::to_string(head_dim);
  Tensor xc = upload(cpu, xs, M, C);
  cpu.rope(xc, n_heads, pos.data(), p);
  auto ref = host(cpu, xc);
  cpu.free(xc);
  // Bound: rounding of x0 c - x1 s is relative to |x0| + |x1| (times mscale).
  std::vector<double> mag = abs_of(xs);
  const int half = rot_dim / 2;
  for (int64_t r = 0; r < M; ++r)
    for (int h = 0; h < n_heads; ++h)
      for (int i = 0; i < half; ++i) {
        const int64_t base = r * C + static_cast<int64_t>(h) * head_dim;
        const int64_t a = base + (neox ? i : 2 * i), b = base + (neox ? i + half : 2 * i + 1);
        const double m = mscale * (std::fabs(xs[static_cast<size_t>(a)]) + std::fabs(xs[static_cast<size_t>(b)]));
        mag[static_cast<size_t>(a)] = mag[static_cast<size_t>(b)] = m;
      }
  Tensor x = poisoned(gpu, M, C);
  gpu.from_host(xs.data(), x);
  f(gpu, x, n_heads, pos.data(), p);
  auto full = host(gpu, x);
  gpu.free(x);
  std::string e = close(full, ref, mag, 1e-4, tag);
  for (int64_t m = 1; m <= 64 && e.empty(); ++m) {
    const int64_t off = offset_for(m, M);
    std::vector<float> part_in(xs.begin() + off * C, xs.begin() + (off + m) * C);
    Tensor xm = upload(gpu, part_in, m, C);
    f(gpu, xm, n_heads, pos.data() + off, p);
    auto part = host(gpu, xm);
    gpu.free(xm);
    if (!same_bits(part.data(), full.data() + off * C, m * C))
      e = tag + ": rows differ when computed in a batch of " + std::to_string(m);
  }
  return e;
}

std::string act_gate(const ActFn& f, Backend& gpu, Backend& cpu, Act act, uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t M = 70, C = 333;
  auto gs = random_floats(rng, static_cast<size_t>(M * C), -6.f, 6.f);
  auto us = random_floats(rng, static_cast<size_t>(M * C), -2.f, 2.f);
  const std::string tag = "act_mul " + std::to_string(static_cast<int>(act));
  std::vector<float> ref;
  {
    Tensor g = upload(cpu, gs, M, C), u = upload(cpu, us, M, C), o = poisoned(cpu, M, C);
    cpu.act_mul(act, g, u, o);
    ref = host(cpu, o);
    cpu.free(g), cpu.free(u), cpu.free(o);
  }
  // GeluTanh cancels in 1 + tanh for negative inputs: its bound is relative to |g * up|.
  std::vector<double> mag = abs_of(ref);
  if (act == Act::GeluTanh)
    for (size_t i = 0; i < mag.size(); ++i) mag[i] += std::fabs(static_cast<double>(gs[i]) * us[i]);
  Tensor g = upload(gpu, gs, M, C), u = upload(gpu, us, M, C), o = poisoned(gpu, M, C);
  f(gpu, act, g, u, o);
  auto full = host(gpu, o);
  std::string e = close(full, ref, mag, 1e-4, tag);
  for (int64_t m = 1; m <= 64 && e.empty(); m += 7) {
    const int64_t off = offset_for(m, M);
    Tensor om = poisoned(gpu, m, C);
    f(gpu, act, g.slice_rows(off, m), u.slice_rows(off, m), om);
    auto part = host(gpu, om);
    gpu.free(om);
    if (!same_bits(part.data(), full.data() + off * C, m * C))
      e = tag + ": rows differ when computed in a batch of " + std::to_string(m);
  }
  gpu.free(g), gpu.free(u), gpu.free(o);
  return e;
}

std::string add_scale_gate(Backend& gpu, Backend& cpu, uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t M = 37, C = 129;
  auto ys = random_floats(rng, static_cast<size_t>(M * C)), xs = random_floats(rng, static_cast<size_t>(M * C));
  std::vector<std::vector<float>> outs;
  for (Backend* be : {&cpu, &gpu}) {
    Tensor y = upload(*be, ys, M, C), x = upload(*be, xs, M, C);
    be->add(y, x);
    be->scale(y.slice_rows(3, 20), 0.7f);
    outs.push_back(host(*be, y));
    be->free(y), be->free(x);
  }
  return exact(outs[1], outs[0], "add/scale (exact)");
}

std::string embed_gate(Backend& gpu, Backend& cpu, uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t V = 53, C = 96;
  std::vector<int32_t> ids{0, 52, 7, 7, 13, 52, 1, 30, 29};
  for (DType dt : {DType::F32, DType::F16, DType::BF16, DType::Q8_0}) {
    HostWeight hw = make_weight(dt, V, C, rng);
    std::vector<std::vector<float>> outs;
    for (Backend* be : {&cpu, &gpu}) {
      auto w = be->load_weight(hw.view);
      Tensor o = poisoned(*be, static_cast<int64_t>(ids.size()), C);
      be->embed(*w, ids.data(), static_cast<int>(ids.size()), o);
      outs.push_back(host(*be, o));
      be->free(o);
    }
    std::string e = exact(outs[1], outs[0], std::string("embed ") + dtype_name(dt) + " (exact)");
    if (!e.empty()) return e;
  }
  return "";
}

std::string gather_scatter_gate(const ScatterFn& f, Backend& gpu, Backend& cpu, uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t R = 11, C = 77;
  const std::vector<int32_t> rows{3, 0, 3, 10, 3, 7, 0, 3, 5};
  const int n = static_cast<int>(rows.size());
  auto src = random_floats(rng, static_cast<size_t>(R * C)), upd = random_floats(rng, static_cast<size_t>(n * C));
  auto dst = random_floats(rng, static_cast<size_t>(R * C)), w = random_floats(rng, static_cast<size_t>(n), 0.1f, 1.f);
  std::vector<std::vector<float>> g, s;
  for (Backend* be : {&cpu, &gpu}) {
    Tensor ts = upload(*be, src, R, C), tg = poisoned(*be, n, C);
    be->gather_rows(ts, rows.data(), n, tg);
    g.push_back(host(*be, tg));
    Tensor td = upload(*be, dst, R, C), tu = upload(*be, upd, n, C);
    if (be == &cpu) be->scatter_add_scaled(td, tu, rows.data(), w.data(), n);
    else f(*be, td, tu, rows.data(), w.data(), n);
    s.push_back(host(*be, td));
    be->free(ts), be->free(tg), be->free(td), be->free(tu);
  }
  std::string e = exact(g[1], g[0], "gather_rows (exact)");
  return e.empty() ? exact(s[1], s[0], "scatter_add_scaled (exact, repeated rows in order)") : e;
}

std::string topk_gate(const TopkFn& f, Backend& gpu, Backend& cpu, int64_t n, int k, bool norm,
                      uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t M = 70;
  auto ls = random_floats(rng, static_cast<size_t>(M * n), -3.f, 3.f);
  // Every third row holds a tie inside its top k (ties rank the lower index first).
  for (int64_t r = 0; r < M; r += 3) ls[static_cast<size_t>(r * n + 1)] = ls[static_cast<size_t>(r * n + 4)] = 5.f;
  const std::string tag = "topk_softmax n=" + std::to_string(n) + " k=" + std::to_string(k);
  std::vector<int32_t> ci(static_cast<size_t>(M * k)), gi(ci.size());
  std::vector<float> cw(ci.size()), gw(ci.size());
  Tensor lc = upload(cpu, ls, M, n);
  cpu.topk_softmax(lc, k, norm, ci.data(), cw.data());
  cpu.free(lc);
  Tensor lg = upload(gpu, ls, M, n);
  f(gpu, lg, k, norm, gi.data(), gw.data());
  if (ci != gi) {
    gpu.free(lg);
    return tag + ": expert indices differ from the cpu backend";
  }
  std::string e = close(gw, cw, abs_of(cw), 1e-4, tag);
  for (int64_t m = 1; m <= 64 && e.empty(); m += 3) {
    const int64_t off = offset_for(m, M);
    std::vector<int32_t> pi(static_cast<size_t>(m * k));
    std::vector<float> pw(pi.size());
    f(gpu, lg.slice_rows(off, m), k, norm, pi.data(), pw.data());
    if (!std::equal(pi.begin(), pi.end(), gi.begin() + off * k) ||
        !same_bits(pw.data(), gw.data() + off * k, m * k))
      e = tag + ": rows differ when computed in a batch of " + std::to_string(m);
  }
  gpu.free(lg);
  return e;
}

std::string kv_page_gate(Backend& gpu, Backend& cpu, uint32_t seed) {
  std::mt19937 rng(seed);
  const int layers = 3, pages = 4, ps = 8, kvh = 2, hd = 24, kvw = kvh * hd, L = 20;
  auto ks = random_floats(rng, static_cast<size_t>(L * kvw)), vs = random_floats(rng, static_cast<size_t>(L * kvw));
  RowLayout lay;
  lay.seq_pages = {{2, 0, 3}};
  for (int r = 0; r < L; ++r) lay.pos.push_back(r), lay.seq.push_back(0);
  std::vector<std::vector<float>> pages_out, moved;
  for (Backend* be : {&cpu, &gpu}) {
    auto kv = be->alloc_kv(layers, pages, ps, kvh, hd);
    Tensor k = upload(*be, ks, L, kvw), v = upload(*be, vs, L, kvw);
    for (int l = 0; l < layers; ++l) be->kv_store(*kv, l, k, v, lay);
    pages_out.push_back(cputest::kv_page_values(*be, *kv, 0));
    std::vector<uint8_t> page(Backend::kv_page_bytes(*kv));
    be->kv_page_to_host(*kv, 0, page.data());
    be->kv_page_from_host(*kv, 1, page.data());
    moved.push_back(cputest::kv_page_values(*be, *kv, 1));
    be->free(k), be->free(v);
  }
  std::string e = exact(pages_out[1], pages_out[0], "kv_page_to_host (exact)");
  return e.empty() ? exact(moved[1], moved[0], "kv_page_from_host round trip (exact)") : e;
}

// bf16 mode rounds each attention weight to bf16; one near a midpoint may round the other way on
// the two devices, moving the output by up to 2^-8 of that weight times |v - out| <= 2 max |v|, so
// the bound is the bf16 tolerance there (the bits across chunkings are still gated exactly).
namespace {
double attention_tol(const Backend& gpu) { return gpu.matmul_input() == MatmulInput::BF16 ? 1e-2 : 1e-4; }
}  // namespace

std::string attention_gate(const AttnFn& f, const StoreFn& st, Backend& gpu, Backend& cpu, int L,
                           const AttnParams& p, int page_size, uint32_t seed) {
  std::mt19937 rng(seed);
  const int kvw = p.n_kv_heads * p.head_dim, qw = p.n_heads * p.head_dim, layers = 2;
  const int npages = (L + page_size - 1) / page_size;
  auto ks = random_floats(rng, static_cast<size_t>(L * kvw), -2.f, 2.f);
  auto vs = random_floats(rng, static_cast<size_t>(L * kvw));
  auto qs = random_floats(rng, static_cast<size_t>(L * qw), -2.f, 2.f);
  const std::string tag = "attention L=" + std::to_string(L) + " heads=" + std::to_string(p.n_heads) +
                          "/" + std::to_string(p.n_kv_heads) + " hd=" + std::to_string(p.head_dim);
  // Variant 0: one store, pages in order; 1: chunks of 5, scrambled pages; 2: one row at a time
  // (stores and queries); 3: like 0 but queries in chunks of 37 rows. The cpu backend runs variant 0 as the reference.
  auto run = [&](Backend& be, int variant, const StoreFn& store, const AttnFn& attn) {
    auto kv = be.alloc_kv(layers, npages + 3, page_size, p.n_kv_heads, p.head_dim);
    RowLayout lay;
    lay.seq_pages.resize(1);
    for (int i = 0; i < npages; ++i) lay.seq_pages[0].push_back(variant == 1 ? (npages + 2 - i) : i);
    const int chunk = variant == 0 || variant == 3 ? L : variant == 1 ? 5 : 1;
    for (int b = 0; b < L; b += chunk) {
      const int n = std::min(chunk, L - b);
      RowLayout part = lay;
      for (int r = b; r < b + n; ++r) part.pos.push_back(r), part.seq.push_back(0);
      std::vector<float> kp(ks.begin() + b * kvw, ks.begin() + (b + n) * kvw);
      std::vector<float> vp(vs.begin() + b * kvw, vs.begin() + (b + n) * kvw);
      Tensor kt = upload(be, kp, n, kvw), vt = upload(be, vp, n, kvw);
      store(be, *kv, 1, kt, vt, part);
      be.free(kt), be.free(vt);
    }
    Tensor q = upload(be, qs, L, qw), out = poisoned(be, L, qw);
    const int qchunk = variant == 2 ? 1 : variant == 3 ? 37 : L;
    for (int b = 0; b < L; b += qchunk) {
      const int n = std::min(qchunk, L - b);
      RowLayout part = lay;
      for (int r = b; r < b + n; ++r) part.pos.push_back(r), part.seq.push_back(0);
      attn(be, q.slice_rows(b, n), out.slice_rows(b, n), *kv, 1, part, p);
    }
    auto res = host(be, out);
    be.free(q), be.free(out);
    return res;
  };
  const auto ref = run(cpu, 0, real_store(), real_attention());
  // Outputs are convex mixes of V rows, so the bound is relative to max |v|.
  double vmax = 0;
  for (float v : vs) vmax = std::max(vmax, static_cast<double>(std::fabs(v)));
  const std::vector<double> mag(ref.size(), vmax);
  std::vector<float> outs[4];
  for (int v = 0; v < 4; ++v) outs[v] = run(gpu, v, st, f);
  std::string e = close(outs[0], ref, mag, attention_tol(gpu), tag);
  for (int v = 1; v < 4 && e.empty(); ++v)
    if (!same_bits(outs[0].data(), outs[v].data(), static_cast<int64_t>(L) * qw))
      e = tag + ": differs for storage/query variant " + std::to_string(v);
  return e;
}

// Several sequences (lengths lens) with interleaved pages in one pool. Reference: the cpu backend
// over every row in one call. The gpu must match it and give the same bits when the rows come
// interleaved across sequences, one at a time, or as each sequence's prefix followed by one
// decode-like call holding the last row of every sequence.
std::string attention_multi_gate(const AttnFn& f, Backend& gpu, Backend& cpu, const std::vector<int>& lens,
                                 const AttnParams& p, int page_size, uint32_t seed) {
  std::mt19937 rng(seed);
  const int kvw = p.n_kv_heads * p.head_dim, qw = p.n_heads * p.head_dim, ns = static_cast<int>(lens.size());
  RowLayout all;
  all.seq_pages.resize(static_cast<size_t>(ns));
  int pages = 0, total = 0, most = 0;
  for (int l : lens) pages += (l + page_size - 1) / page_size, total += l, most = std::max(most, l);
  std::vector<int32_t> ids(static_cast<size_t>(pages));
  for (int i = 0; i < pages; ++i) ids[static_cast<size_t>(i)] = i;
  std::shuffle(ids.begin(), ids.end(), rng);
  int next = 0;
  for (int s = 0; s < ns; ++s) {
    for (int i = 0; i < (lens[static_cast<size_t>(s)] + page_size - 1) / page_size; ++i)
      all.seq_pages[static_cast<size_t>(s)].push_back(ids[static_cast<size_t>(next++)]);
    for (int r = 0; r < lens[static_cast<size_t>(s)]; ++r) all.pos.push_back(r), all.seq.push_back(s);
  }
  auto ks = random_floats(rng, static_cast<size_t>(total) * kvw, -2.f, 2.f);
  auto vs = random_floats(rng, static_cast<size_t>(total) * kvw);
  auto qs = random_floats(rng, static_cast<size_t>(total) * qw, -2.f, 2.f);
  const std::string tag = "attention " + std::to_string(ns) + " sequences up to " + std::to_string(most) +
                          " heads=" + std::to_string(p.n_heads) + "/" + std::to_string(p.n_kv_heads) +
                          " hd=" + std::to_string(p.head_dim);
  // Calls are lists of row indices into `all`; results land at those rows.
  auto run = [&](Backend& be, const AttnFn& attn, const std::vector<std::vector<int>>& calls) {
    auto kv = be.alloc_kv(1, pages, page_size, p.n_kv_heads, p.head_dim);
    Tensor kt = upload(be, ks, total, kvw), vt = upload(be, vs, total, kvw);
    be.kv_store(*kv, 0, kt, vt, all);
    be.free(kt), be.free(vt);
    std::vector<float> res(static_cast<size_t>(total) * qw);
    for (const auto& call : calls) {
      const int n = static_cast<int>(call.size());
      RowLayout lay;
      lay.seq_pages = all.seq_pages;
      std::vector<float> qp;
      for (int r : call) {
        lay.pos.push_back(all.pos[static_cast<size_t>(r)]), lay.seq.push_back(all.seq[static_cast<size_t>(r)]);
        qp.insert(qp.end(), qs.begin() + static_cast<int64_t>(r) * qw, qs.begin() + static_cast<int64_t>(r + 1) * qw);
      }
      Tensor q = upload(be, qp, n, qw), out = poisoned(be, n, qw);
      attn(be, q, out, *kv, 0, lay, p);
      auto o = host(be, out);
      for (int i = 0; i < n; ++i)
        std::copy(o.begin() + static_cast<int64_t>(i) * qw, o.begin() + static_cast<int64_t>(i + 1) * qw,
                  res.begin() + static_cast<int64_t>(call[static_cast<size_t>(i)]) * qw);
      be.free(q), be.free(out);
    }
    return res;
  };
  std::vector<int> every(static_cast<size_t>(total)), interleaved, lasts, start;
  for (int r = 0; r < total; ++r) every[static_cast<size_t>(r)] = r;
  for (int s = 0, at = 0; s < ns; at += lens[static_cast<size_t>(s)], ++s) start.push_back(at);
  for (int i = 0; i < most; ++i)
    for (int s = 0; s < ns; ++s)
      if (i < lens[static_cast<size_t>(s)]) interleaved.push_back(start[static_cast<size_t>(s)] + i);
  std::vector<std::vector<int>> prefixes, singles;
  for (int s = 0; s < ns; ++s) {
    const int b = start[static_cast<size_t>(s)], l = lens[static_cast<size_t>(s)];
    lasts.push_back(b + l - 1);
    if (l > 1) prefixes.emplace_back(every.begin() + b, every.begin() + b + l - 1);
  }
  prefixes.push_back(lasts);
  for (int r = 0; r < total; ++r) singles.push_back({r});
  const auto ref = run(cpu, real_attention(), {every});
  double vmax = 0;
  for (float v : vs) vmax = std::max(vmax, static_cast<double>(std::fabs(v)));
  const std::vector<double> mag(ref.size(), vmax);
  const auto base = run(gpu, f, {every});
  std::string e = close(base, ref, mag, attention_tol(gpu), tag);
  const std::vector<std::vector<int>> variants[3] = {{interleaved}, prefixes, singles};
  for (int v = 0; v < 3 && e.empty(); ++v) {
    const auto got = run(gpu, f, variants[v]);
    if (!same_bits(base.data(), got.data(), static_cast<int64_t>(total) * qw))
      e = tag + ": differs for call variant " + std::to_string(v);
  }
  return e;
}

}  // namespace tf::contract
