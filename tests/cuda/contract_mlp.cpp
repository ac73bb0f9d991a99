// Gates of the fused MLP ops (matmul_act_mul, mlp_gated): against the cpu backend's ops, bit-equal
// to the gpu's own ops where the fused path runs, and across row batches.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>

#include "contract.h"

namespace tf::contract {

using cputest::host;
using cputest::poisoned;
using cputest::same_bits;
using cputest::upload;

GluFn real_glu() {
  return [](Backend& be, Act a, const Tensor& x, const Weight& g, const Weight& u, Tensor o) {
    return be.matmul_act_mul(a, x, g, u, o);
  };
}
MlpFn real_mlp() {
  return [](Backend& be, Act a, const Tensor& x, const Weight& g, const Weight& u, const Weight& d, Tensor s,
            Tensor o) { return be.mlp_gated(a, x, g, u, d, s, o); };
}

namespace {

// What both gates check once the fused op ran (fused: it took the shape) and its ops ran on the gpu:
// close to the cpu, bit-equal to those ops where fused, and every row of the batches of ms bit-equal
// to the whole call's. rows(off, m, y) computes rows [off, off + m) into y, fused where it takes them.
std::string fused_checks(bool fused, const std::vector<float>& got, const std::vector<float>& unfused,
                         const std::vector<float>& ref, const std::vector<double>& mag, double tol,
                         const std::string& tag, const std::string& ops, Backend& gpu, int64_t M, int64_t N,
                         const std::vector<int64_t>& ms, const std::function<void(int64_t, int64_t, Tensor)>& rows) {
  const std::vector<float>& full = fused ? got : unfused;
  std::printf("  measured %s: %s\n", tag.c_str(), fused ? "fused" : ("left to " + ops).c_str());
  std::string e = close(full, ref, mag, tol, tag);
  if (e.empty() && fused) e = exact(full, unfused, tag + " against " + ops);
  for (size_t i = 0; e.empty() && i < ms.size(); ++i) {
    const int64_t m = ms[i], off = offset_for(m, M);
    Tensor ym = poisoned(gpu, m, N);
    rows(off, m, ym);
    auto part = host(gpu, ym);
    gpu.free(ym);
    for (int64_t r = 0; r < m && e.empty(); ++r)
      if (!same_bits(part.data() + r * N, full.data() + (off + r) * N, N))
        e = tag + ": row " + std::to_string(off + r) + " differs when computed in a batch of " + std::to_string(m);
  }
  return e;
}

}  // namespace

std::string matmul_act_mul_gate(const GluFn& f, Backend& gpu, Backend& cpu, Act act, int64_t K, int64_t N,
                                int64_t M, const std::vector<int64_t>& ms, uint32_t seed) {
  std::mt19937 rng(seed);
  HostWeight hg = make_weight(DType::BF16, N, K, rng), hu = make_weight(DType::BF16, N, K, rng);
  auto xs = random_floats(rng, static_cast<size_t>(M * K));
  const std::string tag = "matmul_act_mul " + std::to_string(static_cast<int>(act)) + " K=" + std::to_string(K) +
                          " N=" + std::to_string(N) + " M=" + std::to_string(M);
  std::vector<float> ref, cg, cu;
  {
    auto g = cpu.load_weight(hg.view);
    auto u = cpu.load_weight(hu.view);
    Tensor x = upload(cpu, xs, M, K), yg = poisoned(cpu, M, N), yu = poisoned(cpu, M, N), o = poisoned(cpu, M, N);
    cpu.matmul(x, *g, nullptr, yg);
    cpu.matmul(x, *u, nullptr, yu);
    cpu.act_mul(act, yg, yu, o);
    ref = host(cpu, o), cg = host(cpu, yg), cu = host(cpu, yu);
    cpu.free(x), cpu.free(yg), cpu.free(yu), cpu.free(o);
  }
  // Bound: matmul's (tol * sum |x w|) carried through act(g) * u, act's slope at most 1.2 (SiLU,
  // GELU) or 2|g| plus the error (squared ReLU), and act's own rounding as act_gate bounds it.
  const double tol = 1e-4;
  std::vector<double> mag(ref.size());
  for (int64_t r = 0; r < M; ++r)
    for (int64_t n = 0; n < N; ++n) {
      double sg = 0.0, su = 0.0;
      for (int64_t k = 0; k < K; ++k) {
        const double xv = std::fabs(static_cast<double>(xs[static_cast<size_t>(r * K + k)]));
        sg += xv * std::fabs(static_cast<double>(hg.at(n, k)));
        su += xv * std::fabs(static_cast<double>(hu.at(n, k)));
      }
      const size_t i = static_cast<size_t>(r * N + n);
      const double g = cg[i], u = cu[i];
      const double ag = act == Act::SiLU     ? g / (1.0 + std::exp(-g))
                        : act == Act::Relu2 ? (g > 0.0 ? g * g : 0.0)
                                            : 0.5 * g * (1.0 + std::tanh(0.7978845608028654 * (g + 0.044715 * g * g * g)));
      const double slope = act == Act::Relu2 ? 2.0 * (std::fabs(g) + tol * sg) : 1.2;
      mag[i] = slope * sg * (std::fabs(u) + tol * su) + std::fabs(ag) * su + std::fabs(static_cast<double>(ref[i])) +
               std::fabs(g * u);
    }
  auto g = gpu.load_weight(hg.view);
  auto u = gpu.load_weight(hu.view);
  Tensor x = upload(gpu, xs, M, K), y = poisoned(gpu, M, N);
  const bool fused = f(gpu, act, x, *g, *u, y);
  // The ops it stands for, on the gpu: the same bits are the contract.
  auto ops = [&](const Tensor& xm, Tensor ym) {
    Tensor gm = poisoned(gpu, xm.rows, N), um = poisoned(gpu, xm.rows, N);
    gpu.matmul_many(xm, {{g.get(), nullptr, gm}, {u.get(), nullptr, um}});
    gpu.act_mul(act, gm, um, ym);
    gpu.free(gm), gpu.free(um);
  };
  Tensor y2 = poisoned(gpu, M, N);
  ops(x, y2);
  const std::string e = fused_checks(fused, host(gpu, y), host(gpu, y2), ref, mag, tol, tag, "matmul_many and act_mul",
                                     gpu, M, N, ms, [&](int64_t off, int64_t m, Tensor ym) {
                                       if (!f(gpu, act, x.slice_rows(off, m), *g, *u, ym)) ops(x.slice_rows(off, m), ym);
                                     });
  gpu.free(x), gpu.free(y), gpu.free(y2);
  return e;
}

std::string mlp_gated_gate(const MlpFn& f, Backend& gpu, Backend& cpu, Act act, int64_t H, int64_t I, int64_t M,
                           const std::vector<int64_t>& ms, uint32_t seed) {
  std::mt19937 rng(seed);
  HostWeight hg = make_weight(DType::BF16, I, H, rng), hu = make_weight(DType::BF16, I, H, rng);
  HostWeight hd = make_weight(DType::BF16, H, I, rng);
  auto xs = random_floats(rng, static_cast<size_t>(M * H));
  const std::string tag = "mlp_gated " + std::to_string(static_cast<int>(act)) + " H=" + std::to_string(H) +
                          " I=" + std::to_string(I) + " M=" + std::to_string(M);
  std::vector<float> ref, ca;
  {
    auto g = cpu.load_weight(hg.view);
    auto u = cpu.load_weight(hu.view);
    auto d = cpu.load_weight(hd.view);
    Tensor x = upload(cpu, xs, M, H), yg = poisoned(cpu, M, I), yu = poisoned(cpu, M, I), a = poisoned(cpu, M, I);
    Tensor o = poisoned(cpu, M, H);
    cpu.matmul(x, *g, nullptr, yg);
    cpu.matmul(x, *u, nullptr, yu);
    cpu.act_mul(act, yg, yu, a);
    cpu.matmul(a, *d, nullptr, o);
    ref = host(cpu, o), ca = host(cpu, a);
    cpu.free(x), cpu.free(yg), cpu.free(yu), cpu.free(a), cpu.free(o);
  }
  // A loose bound, the exact check being the gpu's own ops: matmul's tol * sum |a d|, plus each
  // activation off by a bf16 step of itself (a rounding of a nearby value), times |d|.
  const double tol = 1e-4;
  std::vector<double> mag(ref.size());
  for (int64_t r = 0; r < M; ++r)
    for (int64_t n = 0; n < H; ++n) {
      double s = 0.0;
      for (int64_t i = 0; i < I; ++i)
        s += std::fabs(static_cast<double>(ca[static_cast<size_t>(r * I + i)]) * hd.at(n, i));
      mag[static_cast<size_t>(r * H + n)] = s * (1.0 + std::ldexp(1.0, -7) / tol);
    }
  auto g = gpu.load_weight(hg.view);
  auto u = gpu.load_weight(hu.view);
  auto d = gpu.load_weight(hd.view);
  Tensor x = upload(gpu, xs, M, H), y = poisoned(gpu, M, H), a = poisoned(gpu, M, I);
  const bool fused = f(gpu, act, x, *g, *u, *d, a, y);
  auto ops = [&](const Tensor& xm, Tensor ym) {
    Tensor gm = poisoned(gpu, xm.rows, I), um = poisoned(gpu, xm.rows, I), am = poisoned(gpu, xm.rows, I);
    gpu.matmul_many(xm, {{g.get(), nullptr, gm}, {u.get(), nullptr, um}});
    gpu.act_mul(act, gm, um, am);
    gpu.matmul(am, *d, nullptr, ym);
    gpu.free(gm), gpu.free(um), gpu.free(am);
  };
  Tensor y2 = poisoned(gpu, M, H);
  ops(x, y2);
  const std::string e = fused_checks(fused, host(gpu, y), host(gpu, y2), ref, mag, tol, tag,
                                     "matmul_many, act_mul and matmul", gpu, M, H, ms,
                                     [&](int64_t off, int64_t m, Tensor ym) {
                                       Tensor am = poisoned(gpu, m, I);
                                       if (!f(gpu, act, x.slice_rows(off, m), *g, *u, *d, am, ym))
                                         ops(x.slice_rows(off, m), ym);
                                       gpu.free(am);
                                     });
  gpu.free(x), gpu.free(y), gpu.free(a), gpu.free(y2);
  return e;
}

}  // namespace tf::contract
