// moe_experts on the GPU against the same layer run op by op: on the cpu backend within the
// tolerance, on the GPU bit for bit, and each row's bits the same whatever rows share the call.
#include "contract_moe.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <memory>
#include <random>

#include "../unit/cpu_test_gates.h"
#include "backend/cuda/cuda_backend.h"

namespace tf::contract {

namespace {

using cputest::host;
using cputest::make_weight;
using cputest::poisoned;
using cputest::random_floats;
using cputest::same_bits;
using cputest::upload;

struct MoeSpec {
  DType dt = DType::BF16;
  int64_t H = 64, I = 48, E = 16;
  int k = 4;
  bool gated = true;
  Act act = Act::SiLU;
  bool norm = true;
  bool sigmoid = false;
  int n_group = 1, topk_group = 1;
  float scale = 1.0f;
  bool bias = false;
};

// The layer's weights loaded into one backend.
struct MoeWeights {
  std::deque<cputest::HostWeight> bytes;  // the cpu backend's weights point into these
  std::vector<std::unique_ptr<Weight>> own;
  MoeExperts ex;
  std::unique_ptr<Weight> bias;
};

MoeWeights load(Backend& be, const MoeSpec& s, uint32_t seed) {
  std::mt19937 rng(seed);
  MoeWeights w;
  w.ex.act = s.act;
  auto keep = [&](cputest::HostWeight hw) { return be.load_weight(w.bytes.emplace_back(std::move(hw)).view); };
  for (int64_t e = 0; e < s.E; ++e) {
    auto up = keep(make_weight(s.dt, s.I, s.H, rng));
    auto down = keep(make_weight(s.dt, s.H, s.I, rng));
    if (s.gated) {
      auto gate = keep(make_weight(s.dt, s.I, s.H, rng));
      w.ex.gate.push_back(gate.get());
      w.own.push_back(std::move(gate));
    }
    w.ex.up.push_back(up.get());
    w.ex.down.push_back(down.get());
    w.own.push_back(std::move(up));
    w.own.push_back(std::move(down));
  }
  if (s.bias) w.bias = keep(make_weight(DType::F32, 1, s.E, rng, true, -0.2f, 0.2f));
  return w;
}

MoeRoute route_of(const MoeSpec& s, const MoeWeights& w) {
  MoeRoute r;
  r.k = s.k, r.norm = s.norm, r.sigmoid = s.sigmoid, r.bias = w.bias.get();
  r.n_group = s.n_group, r.topk_group = s.topk_group, r.scale = s.scale;
  return r;
}

// The layer op by op, as the model runs it without the fused path. rank_order and drop_last are
// planted faults: contributions added in rank order, or the last choice left out.
std::vector<float> by_ops(Backend& be, const MoeSpec& s, const MoeWeights& w, const std::vector<float>& xs,
                          const std::vector<float>& ls, int64_t m, bool rank_order = false,
                          bool drop_last = false) {
  const int k = s.k;
  std::vector<int32_t> idx(static_cast<size_t>(m * k));
  std::vector<float> wt(idx.size());
  Tensor x = upload(be, xs, m, s.H), lg = upload(be, ls, m, s.E);
  const MoeRoute r = route_of(s, w);
  if (s.sigmoid) be.topk_sigmoid_grouped(lg, r.bias, r.n_group, r.topk_group, k, r.norm, r.scale, idx.data(), wt.data());
  else be.topk_softmax(lg, k, r.norm, idx.data(), wt.data());
  std::vector<std::vector<int32_t>> tok(static_cast<size_t>(s.E));
  std::vector<std::vector<float>> tw(static_cast<size_t>(s.E));
  std::vector<std::pair<int32_t, float>> ranked;  // (row, weight) in rank order, rank_order only
  for (int64_t row = 0; row < m; ++row)
    for (int j = 0; j < (drop_last ? k - 1 : k); ++j) {
      const int32_t e = idx[static_cast<size_t>(row * k + j)];
      tok[static_cast<size_t>(e)].push_back(static_cast<int32_t>(row));
      tw[static_cast<size_t>(e)].push_back(wt[static_cast<size_t>(row * k + j)]);
    }
  Tensor acc = upload(be, std::vector<float>(static_cast<size_t>(m * s.H), 0.0f), m, s.H);
  Tensor xin = be.alloc(m, s.H), xo = be.alloc(m, s.H), g = be.alloc(m, s.I), u = be.alloc(m, s.I),
         a = be.alloc(m, s.I);
  auto run_expert = [&](int64_t e, const std::vector<int32_t>& t, const std::vector<float>& tws) {
    const int n = static_cast<int>(t.size());
    Tensor xi{xin.data, n, s.H}, o{xo.data, n, s.H}, gg{g.data, n, s.I}, uu{u.data, n, s.I}, aa{a.data, n, s.I};
    be.gather_rows(x, t.data(), n, xi);
    be.matmul(xi, *w.ex.up[static_cast<size_t>(e)], nullptr, uu);
    if (s.gated) {
      be.matmul(xi, *w.ex.gate[static_cast<size_t>(e)], nullptr, gg);
      be.act_mul(s.act, gg, uu, aa);
    } else {
      be.activate(s.act, uu, aa);
    }
    be.matmul(aa, *w.ex.down[static_cast<size_t>(e)], nullptr, o);
    be.scatter_add_scaled(acc, o, t.data(), tws.data(), n);
  };
  if (rank_order) {
    for (int j = 0; j < k; ++j)
      for (int64_t row = 0; row < m; ++row) {
        const int32_t e = idx[static_cast<size_t>(row * k + j)];
        run_expert(e, {static_cast<int32_t>(row)}, {wt[static_cast<size_t>(row * k + j)]});
      }
  } else {
    for (int64_t e = 0; e < s.E; ++e)
      if (!tok[static_cast<size_t>(e)].empty()) run_expert(e, tok[static_cast<size_t>(e)], tw[static_cast<size_t>(e)]);
  }
  auto out = host(be, acc);
  for (Tensor* t : {&x, &lg, &acc, &xin, &xo, &g, &u, &a}) be.free(*t);
  return out;
}

using MoeFn = std::function<std::vector<float>(Backend&, const MoeSpec&, const MoeWeights&,
                                               const std::vector<float>&, const std::vector<float>&, int64_t)>;

std::vector<float> fused(Backend& be, const MoeSpec& s, const MoeWeights& w, const std::vector<float>& xs,
                         const std::vector<float>& ls, int64_t m) {
  Tensor x = upload(be, xs, m, s.H), lg = upload(be, ls, m, s.E), out = poisoned(be, m, s.H);
  TF_CHECK(be.moe_experts(x, lg, route_of(s, w), w.ex, out, {}), "moe_experts: the backend took the op-by-op path");
  auto v = host(be, out);
  for (Tensor* t : {&x, &lg, &out}) be.free(*t);
  return v;
}

std::string tag_of(const MoeSpec& s) {
  return std::string("moe ") + (s.dt == DType::BF16 ? "BF16" : s.dt == DType::F16 ? "F16" : "Q8_0") +
         " H=" + std::to_string(s.H) + " I=" + std::to_string(s.I) + " E=" + std::to_string(s.E) +
         " k=" + std::to_string(s.k) + (s.sigmoid ? " sigmoid" : " softmax");
}

std::string moe_gate(const MoeFn& f, Backend& gpu, Backend& cpu, const MoeSpec& s, int64_t M, uint32_t seed) {
  std::mt19937 rng(seed);
  const auto xs = random_floats(rng, static_cast<size_t>(M * s.H));
  // Spread logits so the top k are clear of rounding, as a trained router's mostly are.
  const auto ls = random_floats(rng, static_cast<size_t>(M * s.E), -4.f, 4.f);
  const std::string tag = tag_of(s);
  MoeWeights wc = load(cpu, s, seed + 1), wg = load(gpu, s, seed + 1);
  const auto ref = by_ops(cpu, s, wc, xs, ls, M);
  const auto ops = by_ops(gpu, s, wg, xs, ls, M);
  const auto got = f(gpu, s, wg, xs, ls, M);
  double mag = 0;
  for (float v : ref) mag = std::max(mag, static_cast<double>(std::fabs(v)));
  // Q8_0 rounds x to bf16 on the GPU where the cpu backend quantizes it, through three matmuls
  // here; its exact check is the bits of the op-by-op GPU run below, whose matmuls the matmul
  // gate holds to the cpu backend. The others split x exactly, except with --matmul-input bf16:
  // an activation an f32 ulp apart between the devices can round to the next bf16 before down,
  // so there the bf16 bound (1e-2) holds, and the bit checks below stay exact.
  const double tol = s.dt == DType::Q8_0 ? 5e-2 : gpu.matmul_input() == MatmulInput::BF16 ? 1e-2 : 1e-4;
  for (size_t i = 0; i < ref.size(); ++i)
    if (!(std::fabs(static_cast<double>(got[i]) - ref[i]) <= tol * std::max(mag, 1e-30)))
      return tag + ": element " + std::to_string(i) + " got " + std::to_string(got[i]) + " want " +
             std::to_string(ref[i]) + " (cpu, op by op)";
  if (!same_bits(got.data(), ops.data(), M * s.H))
    return tag + ": not bit-identical to the same layer run op by op on the GPU";
  // A row's bits must not depend on which rows share the call.
  for (int64_t m : {int64_t{1}, int64_t{2}, int64_t{5}, int64_t{8}, int64_t{9}, int64_t{17}, M / 2}) {
    const int64_t off = (m * 7) % (M - m + 1);
    const std::vector<float> xp(xs.begin() + off * s.H, xs.begin() + (off + m) * s.H);
    const std::vector<float> lp(ls.begin() + off * s.E, ls.begin() + (off + m) * s.E);
    const auto part = f(gpu, s, wg, xp, lp, m);
    if (!same_bits(part.data(), got.data() + off * s.H, m * s.H))
      return tag + ": rows differ when computed in a batch of " + std::to_string(m);
  }
  return "";
}

// The fold of a shared expert's output (times its sigmoid gate) into the routed sum.
using FoldFn = std::function<void(Backend&, const Tensor& x, const Tensor& lg, const MoeRoute& r,
                                  const MoeExperts& ex, Tensor y, const Tensor* gate)>;

void fold_fused(Backend& be, const Tensor& x, const Tensor& lg, const MoeRoute& r, const MoeExperts& ex, Tensor y,
                const Tensor* gate) {
  TF_CHECK(be.moe_experts(x, lg, r, ex, y, {&y, gate}), "moe_experts: the backend did not fold the shared expert");
}

// The ops the fold stands for: the routed sum alone, then mul_sigmoid_rows and add.
void fold_by_ops(Backend& be, const Tensor& x, const Tensor& lg, const MoeRoute& r, const MoeExperts& ex, Tensor y,
                 const Tensor* gate, bool add_first) {
  Tensor acc = be.alloc(y.rows, y.cols);
  TF_CHECK(be.moe_experts(x, lg, r, ex, acc, {}), "moe_experts: the backend took the op-by-op path");
  if (add_first) be.add(y, acc);
  if (gate) be.mul_sigmoid_rows(y, *gate);
  if (!add_first) be.add(y, acc);
  be.free(acc);
}

// Bit-equal to the routed sum followed by mul_sigmoid_rows and add on the GPU, near the cpu
// backend's ops, and each row the same in any batch.
std::string fold_gate(const FoldFn& f, Backend& gpu, Backend& cpu, const MoeSpec& s, int64_t M, bool gated,
                      uint32_t seed) {
  std::mt19937 rng(seed);
  const auto xs = random_floats(rng, static_cast<size_t>(M * s.H));
  const auto ls = random_floats(rng, static_cast<size_t>(M * s.E), -4.f, 4.f);
  const auto ys = random_floats(rng, static_cast<size_t>(M * s.H));
  const auto gs = random_floats(rng, static_cast<size_t>(M), -3.f, 3.f);
  const std::string tag = tag_of(s) + (gated ? " shared fold, gated" : " shared fold");
  MoeWeights wc = load(cpu, s, seed + 1), wg = load(gpu, s, seed + 1);
  auto run = [&](Backend& be, const MoeWeights& w, int64_t off, int64_t m, bool ops) {
    Tensor x = upload(be, std::vector<float>(xs.begin() + off * s.H, xs.begin() + (off + m) * s.H), m, s.H);
    Tensor lg = upload(be, std::vector<float>(ls.begin() + off * s.E, ls.begin() + (off + m) * s.E), m, s.E);
    Tensor y = upload(be, std::vector<float>(ys.begin() + off * s.H, ys.begin() + (off + m) * s.H), m, s.H);
    Tensor g = upload(be, std::vector<float>(gs.begin() + off, gs.begin() + off + m), m, 1);
    if (ops) fold_by_ops(be, x, lg, route_of(s, w), w.ex, y, gated ? &g : nullptr, false);
    else f(be, x, lg, route_of(s, w), w.ex, y, gated ? &g : nullptr);
    auto v = host(be, y);
    for (Tensor* t : {&x, &lg, &y, &g}) be.free(*t);
    return v;
  };
  // The cpu backend has no fused layer: its routed sum comes from the ops (by_ops), folded by its ops.
  std::vector<float> ref;
  {
    const auto routed = by_ops(cpu, s, wc, xs, ls, M);
    Tensor y = upload(cpu, ys, M, s.H), acc = upload(cpu, routed, M, s.H), g = upload(cpu, gs, M, 1);
    if (gated) cpu.mul_sigmoid_rows(y, g);
    cpu.add(y, acc);
    ref = host(cpu, y);
    for (Tensor* t : {&y, &acc, &g}) cpu.free(*t);
  }
  const auto ops = run(gpu, wg, 0, M, true);
  const auto got = run(gpu, wg, 0, M, false);
  double mag = 0;
  for (float v : ref) mag = std::max(mag, static_cast<double>(std::fabs(v)));
  for (size_t i = 0; i < ref.size(); ++i)
    if (!(std::fabs(static_cast<double>(got[i]) - ref[i]) <= 1e-4 * std::max(mag, 1e-30)))
      return tag + ": element " + std::to_string(i) + " got " + std::to_string(got[i]) + " want " +
             std::to_string(ref[i]) + " (cpu, op by op)";
  if (!same_bits(got.data(), ops.data(), M * s.H))
    return tag + ": not bit-identical to the routed sum, mul_sigmoid_rows and add on the GPU";
  for (int64_t m : {int64_t{1}, int64_t{5}, int64_t{17}}) {
    const int64_t off = (m * 7) % (M - m + 1);
    const auto part = run(gpu, wg, off, m, false);
    if (!same_bits(part.data(), got.data() + off * s.H, m * s.H))
      return tag + ": rows differ when computed in a batch of " + std::to_string(m);
  }
  return "";
}

MoeSpec spec(DType dt, int64_t H, int64_t I, int64_t E, int k, bool gated, Act act) {
  MoeSpec s;
  s.dt = dt, s.H = H, s.I = I, s.E = E, s.k = k, s.gated = gated, s.act = act;
  return s;
}

MoeSpec sigmoid_spec() {
  MoeSpec s = spec(DType::BF16, 96, 40, 32, 6, false, Act::Relu2);
  s.sigmoid = true, s.n_group = 4, s.topk_group = 2, s.scale = 2.5f, s.bias = true;
  return s;
}

using ManyFn = std::function<void(Backend&, const Tensor&, const std::vector<Backend::MatmulOut>&)>;

// matmul_many: every output bit-identical to its own matmul on the GPU (itself gated against the
// cpu backend) for M = 1..M (or for the row counts ms), across the one-launch and the one-by-one
// paths; then with new values in x's memory, a lone matmul and matmul_many on it see them.
std::string many_gate(const ManyFn& f, Backend& gpu, DType dt, int64_t K, const std::vector<int64_t>& Ns,
                      uint32_t seed, int64_t M = 20, std::vector<int64_t> ms = {}) {
  if (ms.empty())
    for (int64_t m = 1; m <= M; ++m) ms.push_back(m);
  std::mt19937 rng(seed);
  std::deque<cputest::HostWeight> keep;
  std::vector<std::unique_ptr<Weight>> ws, bs;
  for (int64_t N : Ns) {
    ws.push_back(gpu.load_weight(keep.emplace_back(make_weight(dt, N, K, rng)).view));
    bs.push_back(gpu.load_weight(keep.emplace_back(make_weight(DType::F32, 1, N, rng, true)).view));
  }
  Tensor x = upload(gpu, random_floats(rng, static_cast<size_t>(M * K)), M, K);
  std::string e;
  for (const int64_t m : ms) {
    if (!e.empty()) break;
    std::vector<Backend::MatmulOut> outs;
    std::vector<Tensor> one;
    for (size_t i = 0; i < Ns.size(); ++i) {
      const Weight* b = i % 2 == 0 ? bs[i].get() : nullptr;
      outs.push_back({ws[i].get(), b, poisoned(gpu, m, Ns[i])});
      one.push_back(poisoned(gpu, m, Ns[i]));
      gpu.matmul(x.slice_rows(0, m), *ws[i], b, one.back());
    }
    f(gpu, x.slice_rows(0, m), outs);
    for (size_t i = 0; i < Ns.size() && e.empty(); ++i)
      if (!same_bits(host(gpu, outs[i].y).data(), host(gpu, one[i]).data(), m * Ns[i]))
        e = "matmul_many: output " + std::to_string(i) + " differs from its own matmul at m=" + std::to_string(m);
    for (size_t i = 0; i < Ns.size(); ++i) gpu.free(outs[i].y), gpu.free(one[i]);
  }
  // New values in x's own memory: nothing the last calls kept of x may serve the next.
  if (e.empty()) {
    const int64_t m = ms.back();
    Tensor x2 = upload(gpu, random_floats(rng, static_cast<size_t>(M * K)), M, K);
    gpu.copy(x2, x);
    // A lone matmul on x first, right after f's last call on it, then f again.
    Tensor lone = poisoned(gpu, m, Ns[0]);
    gpu.matmul(x.slice_rows(0, m), *ws[0], nullptr, lone);
    std::vector<Backend::MatmulOut> outs;
    std::vector<Tensor> one;
    for (size_t i = 0; i < Ns.size(); ++i) {
      outs.push_back({ws[i].get(), nullptr, poisoned(gpu, m, Ns[i])});
      one.push_back(poisoned(gpu, m, Ns[i]));
      gpu.matmul(x2.slice_rows(0, m), *ws[i], nullptr, one.back());
    }
    f(gpu, x.slice_rows(0, m), outs);
    if (!same_bits(host(gpu, lone).data(), host(gpu, one[0]).data(), m * Ns[0]))
      e = "matmul after matmul_many: kept the old x at m=" + std::to_string(m);
    for (size_t i = 0; i < Ns.size() && e.empty(); ++i)
      if (!same_bits(host(gpu, outs[i].y).data(), host(gpu, one[i]).data(), m * Ns[i]))
        e = "matmul_many: output " + std::to_string(i) + " kept the old x at m=" + std::to_string(m);
    for (size_t i = 0; i < Ns.size(); ++i) gpu.free(outs[i].y), gpu.free(one[i]);
    gpu.free(lone);
    gpu.free(x2);
  }
  gpu.free(x);
  return e;
}

using RowGateFn = std::function<void(Backend&, Tensor, const Tensor&)>;

// mul_sigmoid_rows against the cpu backend (its host form), rows bit-equal across batches.
std::string row_gate_gate(const RowGateFn& f, Backend& gpu, Backend& cpu, uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t M = 70, C = 131;
  const auto ys = random_floats(rng, static_cast<size_t>(M * C), -3.f, 3.f);
  const auto gs = random_floats(rng, static_cast<size_t>(M), -6.f, 6.f);
  Tensor yc = upload(cpu, ys, M, C), gc = upload(cpu, gs, M, 1);
  cpu.mul_sigmoid_rows(yc, gc);
  const auto ref = host(cpu, yc);
  cpu.free(yc), cpu.free(gc);
  Tensor y = upload(gpu, ys, M, C), g = upload(gpu, gs, M, 1);
  f(gpu, y, g);
  const auto got = host(gpu, y);
  std::string e;
  for (size_t i = 0; i < ref.size() && e.empty(); ++i)
    if (!(std::fabs(static_cast<double>(got[i]) - ref[i]) <= 1e-5 * std::max(1e-30, static_cast<double>(std::fabs(ref[i])))))
      e = "mul_sigmoid_rows: element " + std::to_string(i) + " got " + std::to_string(got[i]) + " want " +
          std::to_string(ref[i]);
  for (int64_t m : {int64_t{1}, int64_t{3}, int64_t{33}}) {
    if (!e.empty()) break;
    const int64_t off = (m * 7) % (M - m + 1);
    Tensor yp = upload(gpu, std::vector<float>(ys.begin() + off * C, ys.begin() + (off + m) * C), m, C);
    f(gpu, yp, g.slice_rows(off, m));
    if (!same_bits(host(gpu, yp).data(), got.data() + off * C, m * C))
      e = "mul_sigmoid_rows: rows differ when computed in a batch of " + std::to_string(m);
    gpu.free(yp);
  }
  gpu.free(y), gpu.free(g);
  return e;
}

}  // namespace

std::vector<MoeCase> moe_kernel_cases() {
  std::vector<MoeCase> v;
  auto add = [&](MoeSpec s, int64_t M, uint32_t seed) {
    v.push_back({tag_of(s) + " M=" + std::to_string(M),
                 [=](Backend& g, Backend& c) { return moe_gate(fused, g, c, s, M, seed); }});
  };
  add(spec(DType::BF16, 64, 48, 16, 4, true, Act::SiLU), 40, 91);
  // Many rows on few experts: work items of 16 rows, several per expert, split-K slices.
  add(spec(DType::BF16, 1024, 520, 8, 2, true, Act::SiLU), 70, 92);
  add(spec(DType::F16, 72, 1003, 12, 3, true, Act::GeluTanh), 33, 93);
  add(spec(DType::Q8_0, 256, 96, 20, 5, true, Act::SiLU), 50, 94);
  add(sigmoid_spec(), 45, 95);
  // Nemotron-H's routing: one group, 128 experts (the warp's shortcut past group choice).
  MoeSpec one_group = sigmoid_spec();
  one_group.E = 128, one_group.n_group = 1, one_group.topk_group = 1;
  add(one_group, 37, 102);
  // Slices of two and more weight steps in the grouped matmul.
  add(spec(DType::BF16, 2048, 4224, 4, 2, true, Act::SiLU), 24, 101);
  // Nemotron-3-Nano's expert shapes: at 24 rows the launches run their two-step slices as blocks
  // of their own, at one row they fold them.
  MoeSpec nemo = spec(DType::BF16, 2688, 1856, 16, 6, false, Act::Relu2);
  nemo.sigmoid = true, nemo.scale = 2.5f, nemo.bias = true;
  add(nemo, 24, 111);
  // More experts than the routing block has threads: a thread's softmax sum holds several.
  add(spec(DType::BF16, 64, 32, 600, 4, true, Act::SiLU), 21, 104);
  // Qwen3-30B-A3B's routing: 128 experts, 8 picks, a lone row ranked by the whole block.
  add(spec(DType::BF16, 256, 96, 128, 8, true, Act::SiLU), 24, 112);
  // Qwen3-Next's routing: 512 experts, 10 picks; a lone row ranks among the warps' best.
  add(spec(DType::BF16, 64, 32, 512, 10, true, Act::SiLU), 20, 116);
  // Sigmoid routing over one group of 384 experts, a lone row likewise.
  MoeSpec wide_sig = sigmoid_spec();
  wide_sig.E = 384, wide_sig.n_group = 1, wide_sig.topk_group = 1;
  add(wide_sig, 19, 117);
  // A prefill's routing: pairs over several of the listing block's tiles, experts in many warps.
  add(spec(DType::BF16, 64, 48, 128, 8, true, Act::SiLU), 300, 113);
  // A prefill chunk's experts: 150 pairs an expert (and 75 at M / 2) take the warpgroup tiles, the
  // small batches the few-row items, a pair's bits the same in each; down's K of 520 ends inside a
  // stage.
  add(spec(DType::BF16, 1024, 520, 8, 2, true, Act::SiLU), 600, 114);
  // Nemotron-H's kind (no gate, squared ReLU, sigmoid routing) on the warpgroup tiles.
  MoeSpec nemo_wg = spec(DType::BF16, 512, 384, 16, 6, false, Act::Relu2);
  nemo_wg.sigmoid = true, nemo_wg.scale = 2.5f, nemo_wg.bias = true;
  add(nemo_wg, 400, 115);
  MoeSpec nonorm = spec(DType::BF16, 64, 64, 130, 8, true, Act::SiLU);
  nonorm.norm = false;
  add(nonorm, 20, 96);
  const ManyFn many = [](Backend& be, const Tensor& x, const std::vector<Backend::MatmulOut>& o) { be.matmul_many(x, o); };
  // Up to 64 rows: past 16 the outputs share a launch of the warpgroup tiles.
  v.push_back({"matmul_many BF16 K=4096 N=4096,1024,1024 (q, k, v)", [=](Backend& g, Backend&) {
                 return many_gate(many, g, DType::BF16, 4096, {4096, 1024, 1024}, 98, 64);
               }});
  // A prefill chunk's q, k and v: past 64 rows k and v alone are too narrow for the warpgroup
  // tiles, so the three share one launch of 128-row tiles that fold their slices.
  v.push_back({"matmul_many BF16 K=4096 N=4096,1024,1024 (q, k, v), prefill rows", [=](Backend& g, Backend&) {
                 return many_gate(many, g, DType::BF16, 4096, {4096, 1024, 1024}, 107, 520,
                                  {17, 64, 65, 127, 128, 129, 300, 512, 520});
               }});
  // Past 1,024 rows k and v each fill a launch, so each output runs its own matmul on one split of x.
  v.push_back({"matmul_many BF16 K=4096 N=4096,1024,1024 (q, k, v), prefill rows one by one", [=](Backend& g, Backend&) {
                 return many_gate(many, g, DType::BF16, 4096, {4096, 1024, 1024}, 109, 1100, {1025, 1100});
               }});
  // Together past one wave of one-tile blocks (two column tiles a warp), each alone not.
  v.push_back({"matmul_many BF16 K=2048 N=7000,7000 (gate, up)", [=](Backend& g, Backend&) {
                 return many_gate(many, g, DType::BF16, 2048, {7000, 7000}, 103, 64);
               }});
  // An MoE layer's router with its shared expert's gate, up and one-row gate.
  v.push_back({"matmul_many BF16 K=2048 N=512,512,512,1 (router, shared expert)", [=](Backend& g, Backend&) {
                 return many_gate(many, g, DType::BF16, 2048, {512, 512, 512, 1}, 105, 64);
               }});
  v.push_back({"matmul_many F16 K=1003 N=200,72", [=](Backend& g, Backend&) {
                 return many_gate(many, g, DType::F16, 1003, {200, 72}, 99);
               }});
  v.push_back({"matmul_many Q8_0 K=1344 N=96,40,33,300", [=](Backend& g, Backend&) {
                 return many_gate(many, g, DType::Q8_0, 1344, {96, 40, 33, 300}, 100);
               }});
  v.push_back({"mul_sigmoid_rows", [](Backend& g, Backend& c) {
                 return row_gate_gate([](Backend& be, Tensor y, const Tensor& gt) { be.mul_sigmoid_rows(y, gt); }, g, c, 97);
               }});
  // A shared expert's output folded into the routed sum: gated (Qwen3-Next) and plain (Nemotron-H).
  v.push_back({"moe shared fold, gated, M=40", [](Backend& g, Backend& c) {
                 return fold_gate(fold_fused, g, c, spec(DType::BF16, 96, 64, 24, 4, true, Act::SiLU), 40, true, 106);
               }});
  v.push_back({"moe shared fold, sigmoid routing, M=24", [](Backend& g, Backend& c) {
                 return fold_gate(fold_fused, g, c, sigmoid_spec(), 24, false, 107);
               }});
  return v;
}

std::vector<MoeCase> moe_control_cases() {
  std::vector<MoeCase> v;
  const MoeSpec s = spec(DType::BF16, 64, 48, 16, 4, true, Act::SiLU);
  v.push_back({"moe adding experts in rank order", [=](Backend& g, Backend& c) {
                 return moe_gate([](Backend& be, const MoeSpec& sp, const MoeWeights& w, const std::vector<float>& x,
                                    const std::vector<float>& l, int64_t m) { return by_ops(be, sp, w, x, l, m, true); },
                                 g, c, s, 40, 91);
               }});
  v.push_back({"moe leaving out the last choice", [=](Backend& g, Backend& c) {
                 return moe_gate([](Backend& be, const MoeSpec& sp, const MoeWeights& w, const std::vector<float>& x,
                                    const std::vector<float>& l, int64_t m) { return by_ops(be, sp, w, x, l, m, false, true); },
                                 g, c, s, 40, 91);
               }});
  v.push_back({"matmul_many leaving out the biases", [](Backend& g, Backend&) {
                 return many_gate([](Backend& be, const Tensor& x, const std::vector<Backend::MatmulOut>& o) {
                   auto nb = o;
                   for (auto& e : nb) e.bias = nullptr;
                   be.matmul_many(x, nb);
                 }, g, DType::BF16, 4096, {4096, 1024, 1024}, 98);
               }});
  // A split of x kept past the call, as a cache that outlived its matmul_many would be.
  v.push_back({"matmul_many keeping x's planes past its call", [](Backend& g, Backend&) {
                 return many_gate([](Backend& be, const Tensor& x, const std::vector<Backend::MatmulOut>& o) {
                   be.matmul_many(x, o);
                   auto& cb = dynamic_cast<cuda::CudaBackend&>(be);
                   cb.split_once = {x.data, x.rows, x.cols, (x.cols + 31) / 32 * 32, nullptr};
                   be.matmul(x, *o[0].w, o[0].bias, o[0].y);
                 }, g, DType::BF16, 4096, {4096, 1024, 1024}, 109, 1100, {1025, 1100});
               }});
  v.push_back({"moe shared fold adding the routed sum before the gate", [](Backend& g, Backend& c) {
                 return fold_gate([](Backend& be, const Tensor& x, const Tensor& lg, const MoeRoute& r,
                                     const MoeExperts& ex, Tensor y, const Tensor* gate) {
                   fold_by_ops(be, x, lg, r, ex, y, gate, true);
                 }, g, c, spec(DType::BF16, 96, 64, 24, 4, true, Act::SiLU), 40, true, 106);
               }});
  v.push_back({"mul_sigmoid_rows with the gate's sign flipped", [](Backend& g, Backend& c) {
                 return row_gate_gate([](Backend& be, Tensor y, const Tensor& gt) {
                   be.scale(gt, -1.0f);
                   be.mul_sigmoid_rows(y, gt);
                   be.scale(gt, -1.0f);
                 }, g, c, 97);
               }});
  return v;
}

}  // namespace tf::contract

namespace tf::contract {

void bench_moe(Backend& gpu, const std::function<float(const std::function<void()>&, int)>& time_ms) {
  struct Shape {
    const char* name;
    MoeSpec s;
  };
  MoeSpec qwen = spec(DType::BF16, 2048, 768, 128, 8, true, Act::SiLU);
  MoeSpec nemo = spec(DType::BF16, 2688, 1856, 128, 6, false, Act::Relu2);
  nemo.sigmoid = true, nemo.scale = 2.5f, nemo.bias = true;
  for (const Shape& sh : {Shape{"Qwen3-30B-A3B", qwen}, Shape{"Nemotron-3-Nano", nemo}}) {
    const MoeSpec& s = sh.s;
    const MoeWeights w = load(gpu, s, 3);
    const MoeRoute r = route_of(s, w);
    for (int64_t m : {1, 8, 64}) {
      std::mt19937 rng(static_cast<uint32_t>(m));
      Tensor x = upload(gpu, random_floats(rng, static_cast<size_t>(m * s.H)), m, s.H);
      Tensor lg = upload(gpu, random_floats(rng, static_cast<size_t>(m * s.E), -3.f, 3.f), m, s.E);
      Tensor out = gpu.alloc(m, s.H);
      std::vector<int32_t> idx(static_cast<size_t>(m * s.k));
      std::vector<float> wt(idx.size());
      if (s.sigmoid) gpu.topk_sigmoid_grouped(lg, r.bias, r.n_group, r.topk_group, s.k, r.norm, r.scale, idx.data(), wt.data());
      else gpu.topk_softmax(lg, s.k, r.norm, idx.data(), wt.data());
      std::sort(idx.begin(), idx.end());
      const auto experts = std::unique(idx.begin(), idx.end()) - idx.begin();
      const double bytes = static_cast<double>(experts) * (s.gated ? 3 : 2) * s.H * s.I * 2;
      const float ms = time_ms([&] { gpu.moe_experts(x, lg, r, w.ex, out, {}); }, 50);
      std::printf("BENCH moe_experts %s m=%lld (%lld experts): %.3f ms, %.0f GB/s of expert weights\n",
                  sh.name, static_cast<long long>(m), static_cast<long long>(experts), ms, bytes / ms / 1e6);
      for (Tensor* t : {&x, &lg, &out}) gpu.free(*t);
    }
  }
}

}  // namespace tf::contract
