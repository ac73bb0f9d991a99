// Gates of the recurrent ops (conv1d_causal, ssm_scan, gated_delta). Each runs a round of several
// sequences (chunked and step forms, kept states) on poisoned outputs and slots, checks it
// against the cpu backend and a float64 sequential reference, then checks bit equality of every
// sequence's outputs and states when run alone and when its rows are split into items at marks.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>

#include "contract_recurrent.h"

namespace tf::contract {

using cputest::host;
using cputest::poisoned;
using cputest::upload;

ConvFn real_conv() {
  return [](Backend& be, const Tensor& x, const Weight& w, const Weight* b, bool silu, const RowLayout& r,
            const StateRefs& st, int64_t off, Tensor out) { be.conv1d_causal(x, w, b, silu, r, st, off, out); };
}
SsmFn real_ssm() {
  return [](Backend& be, Cols x, Cols B, Cols C, Cols dt, const Weight& al, const Weight& D, const Weight& db,
            const SsmParams& p, const RowLayout& r, const StateRefs& st, int64_t off, Tensor y) {
    be.ssm_scan(x, B, C, dt, al, D, db, p, r, st, off, y);
  };
}
DeltaFn real_delta() {
  return [](Backend& be, Cols q, Cols k, Cols v, Cols a, Cols b, const Weight& al, const Weight& db,
            const DeltaParams& p, const RowLayout& r, const StateRefs& st, int64_t off, Tensor y) {
    be.gated_delta(q, k, v, a, b, al, db, p, r, st, off, y);
  };
}

namespace {

constexpr int64_t kOff = 3, kPad = 2;  // the layer's part starts at kOff of a slot, kPad floats follow

// One op bound to its weights on one backend: fused inputs [n x W] to outputs [n x Wy].
using RecCall = std::function<void(Backend&, const Tensor&, Tensor, const RowLayout&, const StateRefs&, int64_t)>;
using Binder = std::function<RecCall(Backend&)>;

struct Item {
  int seq, begin, end;
};

// Per sequence: outputs, final state and (with keep) the state after each row but the last.
struct Outcome {
  std::vector<std::vector<float>> y, state;
  std::vector<std::vector<std::vector<float>>> after;
  std::string err;
};

// Float64 reference of one sequence: outputs, states after each row, and their magnitudes.
struct Ref64 {
  std::vector<double> y, ymag;
  std::vector<std::vector<double>> after, smag;
};

struct Problem {
  int64_t W = 0, Wy = 0, F = 0;
  std::vector<SeqSpec> seqs;
  std::vector<std::vector<float>> in, init;
};

Outcome run_rounds(Backend& be, const RecCall& call, const Problem& pr, const std::vector<std::vector<Item>>& rounds) {
  const int S = static_cast<int>(pr.seqs.size());
  const int64_t sf = kOff + pr.F + kPad;
  int items = 0, keeps = 0;
  for (const auto& r : rounds)
    for (const auto& it : r) ++items, keeps += pr.seqs[static_cast<size_t>(it.seq)].keep ? it.end - it.begin - 1 : 0;
  Tensor pool = poisoned(be, S + items, sf), kpool = poisoned(be, std::max(keeps, 1), sf);
  for (int s = 0; s < S && pr.F > 0; ++s) be.from_host(pr.init[static_cast<size_t>(s)].data(), Tensor{pool.row(s) + kOff, 1, pr.F});
  Outcome o;
  o.y.resize(static_cast<size_t>(S));
  o.state.resize(static_cast<size_t>(S));
  o.after.resize(static_cast<size_t>(S));
  for (int s = 0; s < S; ++s) {
    o.y[static_cast<size_t>(s)].assign(static_cast<size_t>(pr.seqs[static_cast<size_t>(s)].len * pr.Wy), std::nanf(""));
    o.after[static_cast<size_t>(s)].resize(static_cast<size_t>(std::max(0, pr.seqs[static_cast<size_t>(s)].len - 1)));
  }
  std::vector<int> cur(static_cast<size_t>(S));
  for (int s = 0; s < S; ++s) cur[static_cast<size_t>(s)] = s;
  int next_slot = S, next_keep = 0;
  struct Where { int seq, row, slot; bool keep; };
  std::vector<Where> states;  // which slot holds the state after a row
  for (const auto& round : rounds) {
    int R = 0;
    for (const auto& it : round) R += it.end - it.begin;
    std::vector<float> in(static_cast<size_t>(R * pr.W));
    RowLayout lay;
    lay.seq_pages.resize(round.size());
    StateRefs st;
    st.pool = pool.data, st.slot_floats = sf, st.keep_pool = kpool.data;
    std::vector<std::pair<int, int>> out_rows;  // (seq, row) of each round row
    for (size_t i = 0; i < round.size(); ++i) {
      const Item& it = round[i];
      const SeqSpec& sp = pr.seqs[static_cast<size_t>(it.seq)];
      for (int r = it.begin; r < it.end; ++r) {
        std::memcpy(in.data() + out_rows.size() * pr.W, pr.in[static_cast<size_t>(it.seq)].data() + r * pr.W,
                    static_cast<size_t>(pr.W) * 4);
        out_rows.push_back({it.seq, r});
        lay.pos.push_back(r), lay.seq.push_back(static_cast<int32_t>(i));
      }
      st.src.push_back(cur[static_cast<size_t>(it.seq)]);
      st.dst.push_back(next_slot);
      st.step.push_back(sp.step ? 1 : 0);
      std::vector<int32_t> kp;
      if (sp.keep)
        for (int r = it.begin; r + 1 < it.end; ++r) {
          kp.push_back(next_keep);
          states.push_back({it.seq, r, next_keep++, true});
        }
      st.keep.push_back(kp);
      states.push_back({it.seq, it.end - 1, next_slot, false});
      cur[static_cast<size_t>(it.seq)] = next_slot++;
    }
    Tensor x = upload(be, in, R, pr.W), y = poisoned(be, R, pr.Wy);
    call(be, x, y, lay, st, kOff);
    auto yh = host(be, y);
    be.free(x), be.free(y);
    for (size_t i = 0; i < out_rows.size(); ++i)
      std::memcpy(o.y[static_cast<size_t>(out_rows[i].first)].data() + out_rows[i].second * pr.Wy,
                  yh.data() + i * pr.Wy, static_cast<size_t>(pr.Wy) * 4);
  }
  auto ph = host(be, pool), kh = host(be, kpool);
  be.free(pool), be.free(kpool);
  auto part = [&](const std::vector<float>& h, int slot) {
    return std::vector<float>(h.begin() + slot * sf + kOff, h.begin() + slot * sf + kOff + pr.F);
  };
  for (int s = 0; s < S && o.err.empty(); ++s)
    if (std::memcmp(part(ph, s).data(), pr.init[static_cast<size_t>(s)].data(), static_cast<size_t>(pr.F) * 4) != 0)
      o.err = "the source slot of seq " + std::to_string(s) + " changed";
  for (int slot = 0; slot < S + items && o.err.empty(); ++slot)
    for (int64_t i = 0; i < sf; ++i)
      if ((i < kOff || i >= kOff + pr.F) && !std::isnan(ph[static_cast<size_t>(slot * sf + i)]))
        o.err = "slot " + std::to_string(slot) + " was written outside the layer's part at " + std::to_string(i);
  for (const auto& w : states) {
    auto v = part(w.keep ? kh : ph, w.slot);
    auto& sp = pr.seqs[static_cast<size_t>(w.seq)];
    if (w.row == sp.len - 1) o.state[static_cast<size_t>(w.seq)] = v;
    else if (sp.keep) o.after[static_cast<size_t>(w.seq)][static_cast<size_t>(w.row)] = v;
  }
  return o;
}

// |got - ref| <= tol * mag element by element; returns the worst ratio through worst.
std::string near(const std::vector<float>& got, const std::vector<double>& ref, const std::vector<double>& mag,
                 double tol, const std::string& what, double& worst) {
  if (got.size() != ref.size()) return what + ": " + std::to_string(got.size()) + " values, want " + std::to_string(ref.size());
  for (size_t i = 0; i < ref.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - ref[i]), m = std::max(mag[i], 1e-30);
    if (!(err <= tol * m))
      return what + ": element " + std::to_string(i) + " got " + std::to_string(got[i]) + " want " +
             std::to_string(ref[i]) + " (err " + std::to_string(err) + ", bound " + std::to_string(tol * m) + ")";
    worst = std::max(worst, err / m);
  }
  return "";
}

std::vector<double> to_d(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }

std::string same(const std::vector<float>& a, const std::vector<float>& b, const std::string& what) {
  if (a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0) return "";
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    if (std::memcmp(&a[i], &b[i], 4) != 0)
      return what + ": element " + std::to_string(i) + " is " + std::to_string(a[i]) + " vs " + std::to_string(b[i]);
  return what + ": sizes differ";
}

// Compares an outcome with the float64 reference (or another backend's outcome) within tol.
std::string check_near(const Outcome& o, const std::vector<Ref64>& ref, const Outcome* other, const Problem& pr,
                       const std::string& tag, double& wy, double& ws) {
  if (!o.err.empty()) return tag + ": " + o.err;
  for (size_t s = 0; s < pr.seqs.size(); ++s) {
    const Ref64& r = ref[s];
    const std::string ts = tag + " seq " + std::to_string(s);
    std::string e = near(o.y[s], other ? to_d(other->y[s]) : r.y, r.ymag, 1e-4, ts + " y", wy);
    if (e.empty()) e = near(o.state[s], other ? to_d(other->state[s]) : r.after.back(), r.smag.back(), 1e-4, ts + " state", ws);
    for (size_t t = 0; e.empty() && pr.seqs[s].keep && t + 1 < r.after.size(); ++t)
      e = near(o.after[s][t], other ? to_d(other->after[s][t]) : r.after[t], r.smag[t], 1e-4,
               ts + " kept state after row " + std::to_string(t), ws);
    if (!e.empty()) return e;
  }
  return "";
}

std::string check_same(const Outcome& a, const Outcome& b, const Problem& pr, const std::string& tag) {
  if (!b.err.empty()) return tag + ": " + b.err;
  for (size_t s = 0; s < pr.seqs.size(); ++s) {
    const std::string ts = tag + " seq " + std::to_string(s);
    std::string e = same(a.y[s], b.y[s], ts + " y");
    if (e.empty()) e = same(a.state[s], b.state[s], ts + " state");
    for (size_t t = 0; e.empty() && pr.seqs[s].keep && t < a.after[s].size(); ++t)
      e = same(a.after[s][t], b.after[s][t], ts + " kept state after row " + std::to_string(t));
    if (!e.empty()) return e;
  }
  return "";
}

// The common flow; mark: chunk length whose multiples split chunked sequences (0: anywhere).
std::string run_gate(const Binder& gpu_bind, const Binder& cpu_bind, Backend& gpu, Backend& cpu, const Problem& pr,
                     const std::vector<Ref64>& ref, int mark, const std::string& tag) {
  const int S = static_cast<int>(pr.seqs.size());
  std::vector<Item> whole;
  for (int s = 0; s < S; ++s) whole.push_back({s, 0, pr.seqs[static_cast<size_t>(s)].len});
  const std::vector<std::vector<Item>> one_round{whole};
  const Outcome c = run_rounds(cpu, cpu_bind(cpu), pr, one_round);
  const RecCall g = gpu_bind(gpu);
  const Outcome o = run_rounds(gpu, g, pr, one_round);
  double wy = 0, ws = 0, cy = 0, cs = 0, dy = 0, ds = 0;
  std::string e = check_near(o, ref, nullptr, pr, tag + " vs float64", wy, ws);
  // The cpu backend's own agreement is reported but does not stop the gpu checks below.
  const std::string ecpu = check_near(c, ref, nullptr, pr, tag + " (cpu backend) vs float64", cy, cs);
  if (e.empty() && ecpu.empty()) e = check_near(o, ref, &c, pr, tag + " vs cpu backend", dy, ds);
  std::printf("  measured %s: max err/mag gpu vs float64 y %.3g state %.3g; cpu vs float64 y %.3g state %.3g; "
              "gpu vs cpu y %.3g state %.3g (tol 1e-4)\n",
              tag.c_str(), wy, ws, cy, cs, dy, ds);
  if (!ecpu.empty()) std::printf("  reference problem: %s\n", ecpu.c_str());
  for (int s = 0; s < S && e.empty(); ++s) {
    const Outcome a = run_rounds(gpu, g, pr, std::vector<std::vector<Item>>{std::vector<Item>{whole[static_cast<size_t>(s)]}});
    if (!a.err.empty()) return tag + " alone: " + a.err;
    const size_t u = static_cast<size_t>(s);
    const std::string ts = tag + " seq " + std::to_string(s) + " alone vs in the round";
    e = same(o.y[u], a.y[u], ts + " y");
    if (e.empty()) e = same(o.state[u], a.state[u], ts + " state");
    for (size_t r = 0; e.empty() && pr.seqs[u].keep && r < o.after[u].size(); ++r)
      e = same(o.after[u][r], a.after[u][r], ts + " kept state after row " + std::to_string(r));
  }
  if (!e.empty()) return e;
  // Split items: chunked sequences at multiples of mark, step sequences (and all when mark is 0)
  // in items of 2, 1, 3, 2, 1, 3... rows; round k holds item k of each sequence, last first.
  std::vector<std::vector<Item>> per(static_cast<size_t>(S));
  for (int s = 0; s < S; ++s) {
    const SeqSpec& sp = pr.seqs[static_cast<size_t>(s)];
    const int sizes[3] = {2, 1, 3};
    for (int b = 0, k = 0; b < sp.len; ++k) {
      const int n = !sp.step && mark > 0 ? mark : sizes[k % 3];
      per[static_cast<size_t>(s)].push_back({s, b, std::min(sp.len, b + n)});
      b = std::min(sp.len, b + n);
    }
  }
  std::vector<std::vector<Item>> rounds;
  for (size_t k = 0;; ++k) {
    std::vector<Item> round;
    for (int s = S - 1; s >= 0; --s)
      if (k < per[static_cast<size_t>(s)].size()) round.push_back(per[static_cast<size_t>(s)][k]);
    if (round.empty()) break;
    rounds.push_back(round);
  }
  const Outcome sp = run_rounds(gpu, g, pr, rounds);
  e = check_same(o, sp, pr, tag + " split at marks (state carried) vs one item");
  return e.empty() ? ecpu : e;
}

std::vector<float> rnd(std::mt19937& rng, size_t n, float lo, float hi) { return cputest::random_floats(rng, n, lo, hi); }

double softplus_d(double v) { return v > 20.0 ? v : std::log1p(std::exp(v)); }

}  // namespace

std::string conv_gate(const ConvFn& f, Backend& gpu, Backend& cpu, int64_t C, int K, DType wdt, bool with_bias,
                      bool silu, const std::vector<SeqSpec>& seqs, uint32_t seed, bool in_place) {
  std::mt19937 rng(seed);
  Problem pr;
  pr.W = C, pr.Wy = C, pr.F = (K - 1) * C, pr.seqs = seqs;
  auto hw = std::make_shared<HostWeight>(make_weight(wdt, C, K, rng));
  auto hb = std::make_shared<HostWeight>(make_weight(DType::F32, 1, C, rng, true, -0.5f, 0.5f));
  for (const auto& sp : seqs) pr.in.push_back(rnd(rng, static_cast<size_t>(sp.len * C), -1.f, 1.f));
  for (size_t s = 0; s < seqs.size(); ++s) pr.init.push_back(rnd(rng, static_cast<size_t>(pr.F), -1.f, 1.f));
  std::vector<Ref64> ref;
  for (size_t s = 0; s < seqs.size(); ++s) {
    Ref64 r;
    std::vector<double> hist(pr.init[s].begin(), pr.init[s].end());
    for (int t = 0; t < seqs[s].len; ++t) {
      const float* x = pr.in[s].data() + t * C;
      for (int64_t c = 0; c < C; ++c) {
        double acc = with_bias ? hb->at(0, c) : 0.0, mag = with_bias ? std::fabs(hb->at(0, c)) : 0.0;
        for (int i = 0; i < K; ++i) {
          const double v = i < K - 1 ? hist[static_cast<size_t>(i * C + c)] : x[c];
          acc += hw->at(c, i) * v;
          mag += std::fabs(hw->at(c, i) * v);
        }
        r.y.push_back(silu ? acc / (1.0 + std::exp(-acc)) : acc);
        r.ymag.push_back(1.1 * mag);  // silu's slope stays below 1.1
      }
      for (int i = 0; i + 1 < K - 1; ++i)
        for (int64_t c = 0; c < C; ++c) hist[static_cast<size_t>(i * C + c)] = hist[static_cast<size_t>((i + 1) * C + c)];
      for (int64_t c = 0; c < C && K > 1; ++c) hist[static_cast<size_t>((K - 2) * C + c)] = x[c];
      r.after.push_back(hist);
      std::vector<double> m(hist.size());
      for (size_t i = 0; i < m.size(); ++i) m[i] = std::fabs(hist[i]);
      r.smag.push_back(m);
    }
    ref.push_back(r);
  }
  auto bind = [&, hw, hb](const ConvFn& fn) {
    return Binder([=](Backend& be) {
      std::shared_ptr<Weight> w(be.load_weight(hw->view)), b(be.load_weight(hb->view));
      return RecCall([=](Backend& b2, const Tensor& x, Tensor y, const RowLayout& r, const StateRefs& st, int64_t off) {
        if (in_place) b2.copy(x, y);
        fn(b2, in_place ? y : x, *w, with_bias ? b.get() : nullptr, silu, r, st, off, y);
      });
    });
  };
  const std::string tag = std::string("conv1d_causal C=") + std::to_string(C) + " K=" + std::to_string(K) + " " +
                          dtype_name(wdt) + (in_place ? " in place" : "");
  return run_gate(bind(f), bind(real_conv()), gpu, cpu, pr, ref, 0, tag);
}

std::string ssm_gate(const SsmFn& f, Backend& gpu, Backend& cpu, const SsmParams& p, const std::vector<SeqSpec>& seqs,
                     uint32_t seed, bool aligned) {
  std::mt19937 rng(seed);
  const int64_t H = p.heads, P = p.head_dim, G = p.groups, N = p.state_size, HP = H * P, GN = G * N;
  // Fused row: 2 pad (4 aligned), x [HP], B [GN], C [GN], dt [H], 3 pad (to a multiple of 4 aligned).
  const int64_t cx = aligned ? 4 : 2, cb = cx + HP, cc = cb + GN, cd = cc + GN;
  Problem pr;
  pr.W = aligned ? (cd + H + 3 + 3) / 4 * 4 : cd + H + 3, pr.Wy = HP, pr.F = HP * N, pr.seqs = seqs;
  auto al = std::make_shared<HostWeight>(make_weight(DType::F32, 1, H, rng, true, -1.f, 1.5f));
  auto dd = std::make_shared<HostWeight>(make_weight(DType::F32, 1, H, rng, true, -1.f, 1.f));
  auto db = std::make_shared<HostWeight>(make_weight(DType::F32, 1, H, rng, true, -1.f, 1.f));
  for (const auto& sp : seqs) {
    auto v = rnd(rng, static_cast<size_t>(sp.len * pr.W), -1.f, 1.f);
    for (int t = 0; t < sp.len; ++t)
      for (int64_t h = 0; h < H; ++h) v[static_cast<size_t>(t * pr.W + cd + h)] = std::uniform_real_distribution<float>(-3.f, 1.f)(rng);
    pr.in.push_back(v);
  }
  for (size_t s = 0; s < seqs.size(); ++s) pr.init.push_back(rnd(rng, static_cast<size_t>(pr.F), -1.f, 1.f));
  std::vector<Ref64> ref;
  for (size_t s = 0; s < seqs.size(); ++s) {
    Ref64 r;
    std::vector<double> h(pr.init[s].begin(), pr.init[s].end()), hm(h.size());
    for (size_t i = 0; i < h.size(); ++i) hm[i] = std::fabs(h[i]);
    for (int t = 0; t < seqs[s].len; ++t) {
      const float* row = pr.in[s].data() + t * pr.W;
      for (int64_t hd = 0; hd < H; ++hd) {
        double dt = softplus_d(static_cast<double>(row[cd + hd]) + db->at(0, hd));
        if (!seqs[s].step) {  // the step form does not clamp
          dt = std::max(dt, static_cast<double>(p.dt_min));
          if (p.dt_max > 0) dt = std::min(dt, static_cast<double>(p.dt_max));
        }
        const double a = std::exp(-std::exp(al->at(0, hd)) * dt);
        const int64_t g = hd / (H / G);
        for (int64_t pp = 0; pp < P; ++pp) {
          const double x = row[cx + hd * P + pp];
          double y = 0, ym = 0;
          for (int64_t n = 0; n < N; ++n) {
            const size_t i = static_cast<size_t>((hd * P + pp) * N + n);
            const double bx = dt * x * row[cb + g * N + n];
            h[i] = a * h[i] + bx;
            hm[i] = a * hm[i] + std::fabs(bx);
            y += h[i] * row[cc + g * N + n];
            ym += hm[i] * std::fabs(row[cc + g * N + n]);
          }
          r.y.push_back(y + dd->at(0, hd) * x);
          r.ymag.push_back(ym + std::fabs(dd->at(0, hd) * x));
        }
      }
      r.after.push_back(h);
      r.smag.push_back(hm);
    }
    ref.push_back(r);
  }
  auto bind = [&, al, dd, db](const SsmFn& fn) {
    return Binder([=](Backend& be) {
      std::shared_ptr<Weight> wa(be.load_weight(al->view)), wd(be.load_weight(dd->view)), wb(be.load_weight(db->view));
      return RecCall([=](Backend& b2, const Tensor& x, Tensor y, const RowLayout& r, const StateRefs& st, int64_t off) {
        fn(b2, Cols{x, cx}, Cols{x, cb}, Cols{x, cc}, Cols{x, cd}, *wa, *wd, *wb, p, r, st, off, y);
      });
    });
  };
  const std::string tag = "ssm_scan heads=" + std::to_string(H) + " hd=" + std::to_string(P) + " groups=" +
                          std::to_string(G) + " N=" + std::to_string(N) + " chunk=" + std::to_string(p.chunk) +
                          (aligned ? " aligned" : "");
  return run_gate(bind(f), bind(real_ssm()), gpu, cpu, pr, ref, p.chunk, tag);
}

std::string delta_gate(const DeltaFn& f, Backend& gpu, Backend& cpu, const DeltaParams& p,
                       const std::vector<SeqSpec>& seqs, uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t Hk = p.k_heads, Hv = p.v_heads, Kd = p.k_dim, Vd = p.v_dim, KW = Hk * Kd, VW = Hv * Vd;
  // Fused row: 1 pad, q [KW], k [KW], v [VW], a [Hv], b [Hv], 2 pad.
  const int64_t cq = 1, ck = cq + KW, cv = ck + KW, ca = cv + VW, cb = ca + Hv;
  Problem pr;
  pr.W = cb + Hv + 2, pr.Wy = VW, pr.F = Hv * Kd * Vd, pr.seqs = seqs;
  auto al = std::make_shared<HostWeight>(make_weight(DType::F32, 1, Hv, rng, true, -2.f, 1.f));
  auto db = std::make_shared<HostWeight>(make_weight(DType::F32, 1, Hv, rng, true, -1.f, 1.f));
  for (const auto& sp : seqs) {
    auto v = rnd(rng, static_cast<size_t>(sp.len * pr.W), -1.f, 1.f);
    for (int t = 0; t < sp.len; ++t)
      for (int64_t h = 0; h < 2 * Hv; ++h) v[static_cast<size_t>(t * pr.W + ca + h)] *= 2.5f;
    pr.in.push_back(v);
  }
  for (size_t s = 0; s < seqs.size(); ++s) pr.init.push_back(rnd(rng, static_cast<size_t>(pr.F), -0.5f, 0.5f));
  std::vector<Ref64> ref;
  const int64_t rep = Hv / Hk;
  for (size_t s = 0; s < seqs.size(); ++s) {
    Ref64 r;
    std::vector<double> S(pr.init[s].begin(), pr.init[s].end()), q(static_cast<size_t>(Kd)), k(q.size());
    for (int t = 0; t < seqs[s].len; ++t) {
      const float* row = pr.in[s].data() + t * pr.W;
      std::vector<double> smag(S.size());
      for (int64_t h = 0; h < Hv; ++h) {
        const int64_t kh = h / rep;
        double nq = 0, nk = 0;
        for (int64_t i = 0; i < Kd; ++i) {
          nq += static_cast<double>(row[cq + kh * Kd + i]) * row[cq + kh * Kd + i];
          nk += static_cast<double>(row[ck + kh * Kd + i]) * row[ck + kh * Kd + i];
        }
        for (int64_t i = 0; i < Kd; ++i) {
          q[static_cast<size_t>(i)] = row[cq + kh * Kd + i] / std::sqrt(nq + 1e-6) / std::sqrt(static_cast<double>(Kd));
          k[static_cast<size_t>(i)] = row[ck + kh * Kd + i] / std::sqrt(nk + 1e-6);
        }
        const double g = -std::exp(al->at(0, h)) * softplus_d(static_cast<double>(row[ca + h]) + db->at(0, h));
        const double beta = 1.0 / (1.0 + std::exp(-static_cast<double>(row[cb + h])));
        double* Sh = S.data() + h * Kd * Vd;
        for (int64_t i = 0; i < Kd * Vd; ++i) Sh[i] *= std::exp(g);
        double smax = 0, ymax = 0;
        std::vector<double> yh(static_cast<size_t>(Vd));
        for (int64_t c = 0; c < Vd; ++c) {
          double kv = 0;
          for (int64_t i = 0; i < Kd; ++i) kv += Sh[i * Vd + c] * k[static_cast<size_t>(i)];
          const double delta = (row[cv + h * Vd + c] - kv) * beta;
          double y = 0, ym = 0;
          for (int64_t i = 0; i < Kd; ++i) {
            Sh[i * Vd + c] += k[static_cast<size_t>(i)] * delta;
            y += Sh[i * Vd + c] * q[static_cast<size_t>(i)];
            ym += std::fabs(Sh[i * Vd + c] * q[static_cast<size_t>(i)]);
            smax = std::max(smax, std::fabs(Sh[i * Vd + c]));
          }
          yh[static_cast<size_t>(c)] = y;
          ymax = std::max(ymax, ym);
        }
        // Normwise per (row, head): the chunked form's error spreads across a head's columns.
        for (int64_t c = 0; c < Vd; ++c) r.y.push_back(yh[static_cast<size_t>(c)]), r.ymag.push_back(ymax);
        for (int64_t i = 0; i < Kd * Vd; ++i) smag[static_cast<size_t>(h * Kd * Vd + i)] = smax;
      }
      r.after.push_back(S);
      r.smag.push_back(smag);
    }
    ref.push_back(r);
  }
  auto bind = [&, al, db](const DeltaFn& fn) {
    return Binder([=](Backend& be) {
      std::shared_ptr<Weight> wa(be.load_weight(al->view)), wb(be.load_weight(db->view));
      return RecCall([=](Backend& b2, const Tensor& x, Tensor y, const RowLayout& r, const StateRefs& st, int64_t off) {
        fn(b2, Cols{x, cq}, Cols{x, ck}, Cols{x, cv}, Cols{x, ca}, Cols{x, cb}, *wa, *wb, p, r, st, off, y);
      });
    });
  };
  const std::string tag = "gated_delta heads=" + std::to_string(Hk) + "/" + std::to_string(Hv) + " k_dim=" +
                          std::to_string(Kd) + " v_dim=" + std::to_string(Vd) + " chunk=" + std::to_string(p.chunk);
  return run_gate(bind(f), bind(real_delta()), gpu, cpu, pr, ref, p.chunk, tag);
}

}  // namespace tf::contract
