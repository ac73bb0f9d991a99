// Gates of the hybrid models' row ops: sigmoid router, activate, mul_sigmoid, gated rmsnorm and
// copy, each against the cpu backend with NaN-poisoned outputs and rows bit-equal across batches.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "contract_recurrent.h"

namespace tf::contract {

using cputest::host;
using cputest::poisoned;
using cputest::same_bits;
using cputest::upload;

SigTopkFn real_sigmoid_topk() {
  return [](Backend& be, const Tensor& x, const Weight* b, int ng, int tg, int k, bool norm, float sc,
            int32_t* i, float* w) { be.topk_sigmoid_grouped(x, b, ng, tg, k, norm, sc, i, w); };
}
ActivateFn real_activate() {
  return [](Backend& be, Act a, const Tensor& x, Tensor o) { be.activate(a, x, o); };
}
MulSigFn real_mul_sigmoid() {
  return [](Backend& be, Tensor y, Cols g) { be.mul_sigmoid(y, g); };
}
GatedNormFn real_gated_rmsnorm() {
  return [](Backend& be, const Tensor& x, Cols z, const Weight& g, int group, float eps, bool nf, Tensor y) {
    be.gated_rmsnorm(x, z, g, group, eps, nf, y);
  };
}
CopyFn real_copy() {
  return [](Backend& be, const Tensor& s, Tensor d) { be.copy(s, d); };
}

namespace {

constexpr int64_t kRows = 70;

std::string within(const std::vector<float>& got, const std::vector<float>& ref, const std::vector<double>& mag,
                   double tol, const std::string& what) {
  for (size_t i = 0; i < ref.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - ref[i]);
    if (!(err <= tol * std::max(mag[i], 1e-30)))
      return what + ": element " + std::to_string(i) + " got " + std::to_string(got[i]) + " want " +
             std::to_string(ref[i]) + " (err " + std::to_string(err) + ")";
  }
  return "";
}

std::vector<double> abs_of(const std::vector<float>& v) {
  std::vector<double> m(v.size());
  for (size_t i = 0; i < v.size(); ++i) m[i] = std::fabs(v[i]);
  return m;
}

}  // namespace

std::string sigmoid_topk_gate(const SigTopkFn& f, Backend& gpu, Backend& cpu, int64_t n, int n_group,
                              int topk_group, int k, bool with_bias, bool norm, float scale, uint32_t seed) {
  std::mt19937 rng(seed);
  auto ls = cputest::random_floats(rng, static_cast<size_t>(kRows * n), -3.f, 3.f);
  // Every third row holds a tie between two experts (ties rank the lower index first).
  for (int64_t r = 0; r < kRows; r += 3) ls[static_cast<size_t>(r * n + 1)] = ls[static_cast<size_t>(r * n + 4)] = 4.f;
  HostWeight hb = make_weight(DType::F32, 1, n, rng, true, -0.2f, 0.2f);
  if (with_bias) std::memset(hb.bytes.data() + 4, 0, 4), std::memcpy(hb.bytes.data() + 16, hb.bytes.data() + 4, 4);
  const std::string tag = "topk_sigmoid_grouped n=" + std::to_string(n) + " groups=" + std::to_string(n_group) +
                          "/" + std::to_string(topk_group) + " k=" + std::to_string(k);
  std::vector<int32_t> ci(static_cast<size_t>(kRows * k), -1), gi(ci.size(), -1);
  std::vector<float> cw(ci.size(), std::nanf("")), gw(ci.size(), std::nanf(""));
  {
    auto b = cpu.load_weight(hb.view);
    Tensor lc = upload(cpu, ls, kRows, n);
    cpu.topk_sigmoid_grouped(lc, with_bias ? b.get() : nullptr, n_group, topk_group, k, norm, scale,
                             ci.data(), cw.data());
    cpu.free(lc);
  }
  auto b = gpu.load_weight(hb.view);
  Tensor lg = upload(gpu, ls, kRows, n);
  f(gpu, lg, with_bias ? b.get() : nullptr, n_group, topk_group, k, norm, scale, gi.data(), gw.data());
  std::string e = ci == gi ? within(gw, cw, abs_of(cw), 1e-4, tag) : tag + ": expert indices differ from the cpu backend";
  for (int64_t m = 1; m <= 64 && e.empty(); m += 3) {
    const int64_t off = offset_for(m, kRows);
    std::vector<int32_t> pi(static_cast<size_t>(m * k));
    std::vector<float> pw(pi.size());
    f(gpu, lg.slice_rows(off, m), with_bias ? b.get() : nullptr, n_group, topk_group, k, norm, scale, pi.data(),
      pw.data());
    if (!std::equal(pi.begin(), pi.end(), gi.begin() + off * k) || !same_bits(pw.data(), gw.data() + off * k, m * k))
      e = tag + ": rows differ when computed in a batch of " + std::to_string(m);
  }
  gpu.free(lg);
  return e;
}

std::string activate_gate(const ActivateFn& f, Backend& gpu, Backend& cpu, Act act, uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t C = 333;
  auto xs = cputest::random_floats(rng, static_cast<size_t>(kRows * C), -6.f, 6.f);
  const std::string tag = "activate " + std::to_string(static_cast<int>(act));
  std::vector<float> ref;
  {
    Tensor x = upload(cpu, xs, kRows, C), o = poisoned(cpu, kRows, C);
    cpu.activate(act, x, o);
    ref = host(cpu, o);
    cpu.free(x), cpu.free(o);
  }
  // GeluTanh cancels in 1 + tanh for negative inputs: its bound is relative to |x|.
  std::vector<double> mag = abs_of(ref);
  if (act == Act::GeluTanh)
    for (size_t i = 0; i < mag.size(); ++i) mag[i] += std::fabs(xs[i]);
  Tensor x = upload(gpu, xs, kRows, C), o = poisoned(gpu, kRows, C);
  f(gpu, act, x, o);
  auto full = host(gpu, o);
  std::string e = within(full, ref, mag, 1e-4, tag);
  for (int64_t m = 1; m <= 64 && e.empty(); m += 7) {
    const int64_t off = offset_for(m, kRows);
    Tensor om = poisoned(gpu, m, C);
    f(gpu, act, x.slice_rows(off, m), om);
    auto part = host(gpu, om);
    gpu.free(om);
    if (!same_bits(part.data(), full.data() + off * C, m * C))
      e = tag + ": rows differ when computed in a batch of " + std::to_string(m);
  }
  gpu.free(x), gpu.free(o);
  return e;
}

std::string mul_sigmoid_gate(const MulSigFn& f, Backend& gpu, Backend& cpu, int64_t C, uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t G = C + 7, gc = 4;  // the gate is columns [4, 4 + C) of a fused row
  auto ys = cputest::random_floats(rng, static_cast<size_t>(kRows * C), -2.f, 2.f);
  auto gs = cputest::random_floats(rng, static_cast<size_t>(kRows * G), -6.f, 6.f);
  const std::string tag = "mul_sigmoid C=" + std::to_string(C);
  std::vector<float> ref;
  {
    Tensor y = upload(cpu, ys, kRows, C), g = upload(cpu, gs, kRows, G);
    cpu.mul_sigmoid(y, Cols{g, gc});
    ref = host(cpu, y);
    cpu.free(y), cpu.free(g);
  }
  Tensor g = upload(gpu, gs, kRows, G), y = upload(gpu, ys, kRows, C);
  f(gpu, y, Cols{g, gc});
  auto full = host(gpu, y);
  gpu.free(y);
  std::string e = within(full, ref, abs_of(ref), 1e-4, tag);
  for (int64_t m = 1; m <= 64 && e.empty(); m += 7) {
    const int64_t off = offset_for(m, kRows);
    std::vector<float> part_in(ys.begin() + off * C, ys.begin() + (off + m) * C);
    Tensor ym = upload(gpu, part_in, m, C);
    f(gpu, ym, Cols{g.slice_rows(off, m), gc});
    auto part = host(gpu, ym);
    gpu.free(ym);
    if (!same_bits(part.data(), full.data() + off * C, m * C))
      e = tag + ": rows differ when computed in a batch of " + std::to_string(m);
  }
  gpu.free(g);
  return e;
}

std::string gated_rmsnorm_gate(const GatedNormFn& f, Backend& gpu, Backend& cpu, DType gdt, int64_t C,
                               int group, bool norm_first, uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t Z = C + 5, zc = 3;
  HostWeight hg = make_weight(gdt, 1, C, rng, true, -2.f, 2.f);
  auto xs = cputest::random_floats(rng, static_cast<size_t>(kRows * C), -3.f, 3.f);
  auto zs = cputest::random_floats(rng, static_cast<size_t>(kRows * Z), -4.f, 4.f);
  const std::string tag = std::string("gated_rmsnorm C=") + std::to_string(C) + " group=" + std::to_string(group) +
                          (norm_first ? " norm_first" : " gate_first");
  std::vector<float> ref;
  {
    auto g = cpu.load_weight(hg.view);
    Tensor x = upload(cpu, xs, kRows, C), z = upload(cpu, zs, kRows, Z), y = poisoned(cpu, kRows, C);
    cpu.gated_rmsnorm(x, Cols{z, zc}, *g, group, 1e-5f, norm_first, y);
    ref = host(cpu, y);
    cpu.free(x), cpu.free(z), cpu.free(y);
  }
  auto g = gpu.load_weight(hg.view);
  Tensor x = upload(gpu, xs, kRows, C), z = upload(gpu, zs, kRows, Z), y = poisoned(gpu, kRows, C);
  f(gpu, x, Cols{z, zc}, *g, group, 1e-5f, norm_first, y);
  auto full = host(gpu, y);
  std::string e = within(full, ref, abs_of(ref), 1e-4, tag);
  for (int64_t m = 1; m <= 64 && e.empty(); m += 5) {
    const int64_t off = offset_for(m, kRows);
    Tensor ym = poisoned(gpu, m, C);
    f(gpu, x.slice_rows(off, m), Cols{z.slice_rows(off, m), zc}, *g, group, 1e-5f, norm_first, ym);
    auto part = host(gpu, ym);
    gpu.free(ym);
    if (!same_bits(part.data(), full.data() + off * C, m * C))
      e = tag + ": rows differ when computed in a batch of " + std::to_string(m);
  }
  gpu.free(x), gpu.free(z), gpu.free(y);
  return e;
}

std::string copy_gate(const CopyFn& f, Backend& gpu, Backend& cpu, uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t R = 9, C = 37;
  auto src = cputest::random_floats(rng, static_cast<size_t>(R * C));
  std::vector<std::vector<float>> outs;
  for (Backend* be : {&cpu, &gpu}) {
    Tensor s = upload(*be, src, R, C), d = poisoned(*be, R, C);
    if (be == &cpu) be->copy(s.slice_rows(1, 4), d.slice_rows(5, 4));
    else f(*be, s.slice_rows(1, 4), d.slice_rows(5, 4));
    if (be == &cpu) be->copy(s.slice_rows(0, 1), d.slice_rows(0, 1));
    else f(*be, s.slice_rows(0, 1), d.slice_rows(0, 1));
    outs.push_back(host(*be, d));
    be->free(s), be->free(d);
  }
  // Rows 1..4 of the result stay NaN on both: the comparison is of bits.
  if (std::memcmp(outs[0].data(), outs[1].data(), outs[0].size() * 4) != 0) {
    for (size_t i = 0; i < outs[0].size(); ++i)
      if (std::memcmp(&outs[0][i], &outs[1][i], 4) != 0)
        return "copy (exact): element " + std::to_string(i) + " got " + std::to_string(outs[1][i]) +
               " want " + std::to_string(outs[0][i]);
  }
  return "";
}

}  // namespace tf::contract
