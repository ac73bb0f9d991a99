// Gate of attention_prep: q/k norms, rope and the KV store in one op, against the cpu backend,
// bit-equal to the GPU's ops one by one and across calls of several row counts.
#include <algorithm>
#include <cmath>
#include <random>
#include <type_traits>

#include "contract.h"

namespace tf::contract {

using cputest::host;
using cputest::same_bits;
using cputest::upload;

PrepFn real_prep() {
  return [](Backend& be, Tensor q, Tensor k, const Tensor& v, const QkNorm& n, const RopeParams& r,
            const AttnParams& p, KvStorage& kv, int l, const RowLayout& rows) {
    be.attention_prep(q, k, v, n, r, p, kv, l, rows);
  };
}

std::string attention_prep_gate(const PrepFn& f, Backend& gpu, Backend& cpu, const AttnParams& p, int rot_dim,
                                bool neox, bool norms, DType norm_dt, bool add_one, uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t M = 70, qw = static_cast<int64_t>(p.n_heads) * p.head_dim,
                kvw = static_cast<int64_t>(p.n_kv_heads) * p.head_dim;
  const int layers = 2, layer = 1, ps = 16, seqs = 3;
  auto qs = random_floats(rng, static_cast<size_t>(M * qw), -2.f, 2.f);
  auto ks = random_floats(rng, static_cast<size_t>(M * kvw), -2.f, 2.f);
  auto vs = random_floats(rng, static_cast<size_t>(M * kvw), -2.f, 2.f);
  HostWeight qn = make_weight(norms ? norm_dt : DType::F32, 1, p.head_dim, rng, true, -2.f, 2.f);
  HostWeight kn = make_weight(norms ? norm_dt : DType::F32, 1, p.head_dim, rng, true, -2.f, 2.f);
  RopeParams rope;
  rope.head_dim = p.head_dim, rope.rot_dim = rot_dim, rope.neox = neox, rope.mscale = 1.25f;
  for (int i = 0; i < rot_dim / 2; ++i)
    rope.inv_freq.push_back(static_cast<float>(std::pow(10000.0, -2.0 * i / std::max(rot_dim, 1))));
  // Rows take turns among three sequences that start at different depths; pages scrambled.
  RowLayout lay;
  std::vector<int32_t> next{0, 37, 301};
  int pages = 0;
  lay.seq_pages.resize(seqs);
  for (int64_t r = 0; r < M; ++r) {
    const int sq = static_cast<int>(r % seqs);
    lay.seq.push_back(sq), lay.pos.push_back(next[static_cast<size_t>(sq)]++);
  }
  for (int sq = 0; sq < seqs; ++sq)
    for (int i = 0; i * ps <= next[static_cast<size_t>(sq)]; ++i) lay.seq_pages[static_cast<size_t>(sq)].push_back(pages++);
  std::vector<int32_t> perm(static_cast<size_t>(pages));
  for (int i = 0; i < pages; ++i) perm[static_cast<size_t>(i)] = (i * 7 + 3) % pages;
  for (auto& sp : lay.seq_pages)
    for (auto& pg : sp) pg = perm[static_cast<size_t>(pg)];
  const std::string tag = "attention_prep heads=" + std::to_string(p.n_heads) + "/" + std::to_string(p.n_kv_heads) +
                          " hd=" + std::to_string(p.head_dim) + " rot=" + std::to_string(rot_dim);
  // Rows in calls of `chunk` rows; returns q, k and every page of the pool, which starts zeroed.
  auto run = [&](Backend& be, const PrepFn& fn, int64_t chunk) {
    auto qg = be.load_weight(qn.view), kg = be.load_weight(kn.view);
    const QkNorm norm{norms ? qg.get() : nullptr, norms ? kg.get() : nullptr, 1e-6f, add_one};
    auto kv = be.alloc_kv(layers, pages, ps, p.n_kv_heads, p.head_dim);
    const std::vector<uint8_t> zero(Backend::kv_page_bytes(*kv), 0);
    for (int pg = 0; pg < pages; ++pg) be.kv_page_from_host(*kv, pg, zero.data());
    Tensor q = upload(be, qs, M, qw), k = upload(be, ks, M, kvw), v = upload(be, vs, M, kvw);
    for (int64_t b = 0; b < M; b += chunk) {
      const int64_t n = std::min(chunk, M - b);
      RowLayout part;
      part.seq_pages = lay.seq_pages;
      part.pos.assign(lay.pos.begin() + b, lay.pos.begin() + b + n);
      part.seq.assign(lay.seq.begin() + b, lay.seq.begin() + b + n);
      fn(be, q.slice_rows(b, n), k.slice_rows(b, n), v.slice_rows(b, n), norm, rope, p, *kv, layer, part);
    }
    std::vector<float> out = host(be, q), kout = host(be, k);
    out.insert(out.end(), kout.begin(), kout.end());
    for (int pg = 0; pg < pages; ++pg) {
      const std::vector<float> page = cputest::kv_page_values(be, *kv, pg);
      out.insert(out.end(), page.begin(), page.end());
    }
    be.free(q), be.free(k), be.free(v);
    return out;
  };
  const auto ref = run(cpu, real_prep(), M);
  // Normalized and rotated values carry rounding relative to their head's largest value.
  std::vector<double> mag(ref.size(), 0.0);
  for (size_t h = 0; h < ref.size(); h += static_cast<size_t>(p.head_dim)) {
    double m = 0;
    for (size_t i = h; i < h + static_cast<size_t>(p.head_dim); ++i) m = std::max(m, std::fabs(static_cast<double>(ref[i])));
    for (size_t i = h; i < h + static_cast<size_t>(p.head_dim); ++i) mag[i] = m;
  }
  const auto full = run(gpu, f, M);
  // q and k, then the pool: in bf16 mode it holds them rounded to bf16, and a value within f32
  // noise of a bf16 midpoint may round either way on the two devices.
  const auto qk = static_cast<std::ptrdiff_t>(M * (qw + kvw));
  const auto part = [&](const auto& v, bool pool) {
    return pool ? std::vector<typename std::decay_t<decltype(v)>::value_type>(v.begin() + qk, v.end())
                : std::vector<typename std::decay_t<decltype(v)>::value_type>(v.begin(), v.begin() + qk);
  };
  std::string e = close(part(full, false), part(ref, false), part(mag, false), 1e-4, tag);
  if (e.empty())
    e = close(part(full, true), part(ref, true), part(mag, true),
              gpu.matmul_input() == MatmulInput::BF16 ? 1e-2 : 1e-4, tag + " (pool)");
  if (e.empty()) {
    const PrepFn ops = [](Backend& be, Tensor q, Tensor k, const Tensor& v, const QkNorm& n, const RopeParams& r,
                          const AttnParams& ap, KvStorage& kv, int l, const RowLayout& rows) {
      be.Backend::attention_prep(q, k, v, n, r, ap, kv, l, rows);
    };
    e = exact(full, run(gpu, ops, M), tag + ": against rmsnorm, rope and kv_store one by one");
  }
  for (int64_t chunk : {int64_t{1}, int64_t{7}, int64_t{33}, int64_t{64}}) {
    if (!e.empty()) break;
    if (!same_bits(run(gpu, f, chunk).data(), full.data(), static_cast<int64_t>(full.size())))
      e = tag + ": differs when the rows come in calls of " + std::to_string(chunk);
  }
  return e;
}

}  // namespace tf::contract
