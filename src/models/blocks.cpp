#include "models/blocks.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"

namespace tf {

WeightPtr WeightLoader::load(const TensorView& view, int64_t rows, int64_t cols) {
  TensorView v = view;
  v.shape = {rows, cols};
  auto w = backend_.load_weight(v);
  bytes_ += v.nbytes;
  return w;
}

WeightPtr WeightLoader::matrix(const std::string& name, int64_t rows, int64_t cols) {
  const TensorView& t = src_.get(name);
  TF_CHECK(t.shape.size() == 2 && t.shape[0] == rows && t.shape[1] == cols, src_.describe(),
           ": tensor ", name, " has shape [", t.shape.size() > 0 ? t.shape[0] : -1, ", ",
           t.shape.size() > 1 ? t.shape[1] : -1, "] (", t.shape.size(), "-D), config expects [", rows,
           ", ", cols, "]");
  return load(t, rows, cols);
}

WeightPtr WeightLoader::vector(const std::string& name, int64_t n) {
  const TensorView& t = src_.get(name);
  TF_CHECK(t.numel() == n && t.shape.size() == 1, src_.describe(), ": tensor ", name, " has ",
           t.numel(), " elements in ", t.shape.size(), " dims, config expects a vector of ", n);
  return load(t, 1, n);
}

WeightPtr WeightLoader::optional_vector(const std::string& name, int64_t n) {
  return has(name) ? vector(name, n) : nullptr;
}

WeightPtr WeightLoader::row_slice(const std::string& name, int64_t total_rows, int64_t row0, int64_t rows,
                                   int64_t cols) {
  const TensorView& t = src_.get(name);
  TF_CHECK(t.shape.size() == 2 && t.shape[0] == total_rows && t.shape[1] == cols, src_.describe(), ": tensor ",
           name, " does not have shape [", total_rows, ", ", cols, "]");
  TF_CHECK(row0 >= 0 && rows > 0 && row0 + rows <= total_rows, src_.describe(), ": rows [", row0, ", ",
           row0 + rows, ") of tensor ", name);
  const uint64_t row_bytes = dtype_row_bytes(t.dtype, static_cast<uint64_t>(cols));
  TensorView v = t;
  v.name = cat(name, "[", row0, ":", row0 + rows, "]");
  v.data = t.data + static_cast<uint64_t>(row0) * row_bytes;
  v.nbytes = static_cast<uint64_t>(rows) * row_bytes;
  return load(v, rows, cols);
}

WeightPtr WeightLoader::squeezed(const std::string& name, int64_t rows, int64_t cols) {
  const TensorView& t = src_.get(name);
  bool ok = t.shape.size() >= 2 && t.shape.front() == rows && t.shape.back() == cols;
  for (size_t i = 1; ok && i + 1 < t.shape.size(); ++i) ok = t.shape[i] == 1;
  TF_CHECK(ok, src_.describe(), ": tensor ", name, " (", t.shape.size(), "-D, ", t.numel(),
           " elements) is not [", rows, " x 1 x ", cols, "] as the config expects");
  return load(t, rows, cols);
}

WeightPtr WeightLoader::expert_slice(const std::string& name, int64_t experts, int64_t e,
                                     int64_t total_rows, int64_t row0, int64_t rows, int64_t cols) {
  const TensorView& t = src_.get(name);
  TF_CHECK(t.shape.size() == 3 && t.shape[0] == experts && t.shape[1] == total_rows && t.shape[2] == cols,
           src_.describe(), ": tensor ", name, " does not have shape [", experts, ", ", total_rows, ", ",
           cols, "]");
  uint64_t row_bytes = dtype_row_bytes(t.dtype, static_cast<uint64_t>(cols));
  TensorView v = t;
  v.name = cat(name, "[", e, "]");
  v.data = t.data + (static_cast<uint64_t>(e * total_rows + row0)) * row_bytes;
  v.nbytes = static_cast<uint64_t>(rows) * row_bytes;
  return load(v, rows, cols);
}

AttnParams attention_params(int64_t n_heads, int64_t n_kv_heads, int64_t head_dim) {
  AttnParams p;
  p.n_heads = static_cast<int>(n_heads);
  p.n_kv_heads = static_cast<int>(n_kv_heads);
  p.head_dim = static_cast<int>(head_dim);
  p.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
  return p;
}

AttentionBlock load_attention(WeightLoader& L, const std::string& p, const HfConfig& cfg, bool qk_norm) {
  AttentionBlock a;
  const int64_t H = cfg.hidden_size, nh = cfg.num_attention_heads, nkv = cfg.num_key_value_heads,
                hd = cfg.head_dim;
  a.q = L.matrix(p + "q_proj.weight", nh * hd, H);
  a.k = L.matrix(p + "k_proj.weight", nkv * hd, H);
  a.v = L.matrix(p + "v_proj.weight", nkv * hd, H);
  a.o = L.matrix(p + "o_proj.weight", H, nh * hd);
  a.q_bias = L.optional_vector(p + "q_proj.bias", nh * hd);
  a.k_bias = L.optional_vector(p + "k_proj.bias", nkv * hd);
  a.v_bias = L.optional_vector(p + "v_proj.bias", nkv * hd);
  a.o_bias = L.optional_vector(p + "o_proj.bias", H);
  if (qk_norm) {
    a.q_norm = L.vector(p + "q_norm.weight", hd);
    a.k_norm = L.vector(p + "k_norm.weight", hd);
  }
  a.norm_eps = static_cast<float>(cfg.rms_norm_eps);
  a.params = attention_params(nh, nkv, hd);
  return a;
}

MlpBlock load_mlp(WeightLoader& L, const std::string& p, int64_t hidden, int64_t inter, bool bias) {
  MlpBlock m;
  m.gate = L.matrix(p + "gate_proj.weight", inter, hidden);
  m.up = L.matrix(p + "up_proj.weight", inter, hidden);
  m.down = L.matrix(p + "down_proj.weight", hidden, inter);
  TF_CHECK(!bias, "mlp bias is not supported");
  m.inter = inter;
  return m;
}

MoeBlock load_moe(WeightLoader& L, const std::string& p, const HfConfig& cfg) {
  MoeBlock m;
  const int64_t H = cfg.hidden_size, E = cfg.num_experts, I = cfg.moe_intermediate_size;
  TF_CHECK(E > 0 && cfg.num_experts_per_tok > 0 && cfg.num_experts_per_tok <= E && I > 0,
           "moe config: num_experts ", E, ", num_experts_per_tok ", cfg.num_experts_per_tok,
           ", moe_intermediate_size ", I, " are not usable");
  m.router = L.matrix(p + "gate.weight", E, H);
  m.top_k = static_cast<int>(cfg.num_experts_per_tok);
  m.norm_topk = cfg.norm_topk_prob;
  m.inter = I;
  const bool stacked = L.has(p + "experts.gate_up_proj");
  for (int64_t e = 0; e < E; ++e) {
    if (stacked) {
      MlpBlock x;
      x.gate = L.expert_slice(p + "experts.gate_up_proj", E, e, 2 * I, 0, I, H);
      x.up = L.expert_slice(p + "experts.gate_up_proj", E, e, 2 * I, I, I, H);
      x.down = L.expert_slice(p + "experts.down_proj", E, e, H, 0, H, I);
      x.inter = I;
      m.experts.push_back(std::move(x));
    } else {
      m.experts.push_back(load_mlp(L, cat(p, "experts.", e, "."), H, I, false));
    }
  }
  if (cfg.shared_expert_intermediate_size > 0) {
    m.shared = std::make_unique<MlpBlock>(
        load_mlp(L, p + "shared_expert.", H, cfg.shared_expert_intermediate_size, false));
    if (L.has(p + "shared_expert_gate.weight")) m.shared_gate = L.matrix(p + "shared_expert_gate.weight", 1, H);
  }
  index_experts(m);
  return m;
}

void attention_forward(Backend& b, const AttentionBlock& a, const RopeParams& rope, Tensor in,
                       Tensor out, Scratch& s, KvStorage& kv, int layer, const RowLayout& rows) {
  const int64_t m = in.rows;
  const auto& P = a.params;
  Tensor q = s.q.slice_rows(0, m), k = s.k.slice_rows(0, m), v = s.v.slice_rows(0, m);
  b.matmul_many(in, {{a.q.get(), a.q_bias.get(), q}, {a.k.get(), a.k_bias.get(), k}, {a.v.get(), a.v_bias.get(), v}});
  b.attention_prep(q, k, v, QkNorm{a.q_norm.get(), a.k_norm.get(), a.norm_eps, false}, rope, P, kv, layer, rows);
  Tensor att = s.att.slice_rows(0, m);
  b.attention(q, att, kv, layer, rows, P);
  b.matmul(att, *a.o, a.o_bias.get(), out);
}

void mlp_forward(Backend& b, const MlpBlock& m, Tensor in, Tensor out, Tensor gate, Tensor up, Tensor act) {
  const int64_t rows = in.rows;
  Tensor g{gate.data, rows, m.inter}, u{up.data, rows, m.inter}, a{act.data, rows, m.inter};
  if (m.gate) {
    if (b.mlp_gated(m.act, in, *m.gate, *m.up, *m.down, a, out)) return;
    b.matmul_many(in, {{m.gate.get(), nullptr, g}, {m.up.get(), nullptr, u}});
    b.act_mul(m.act, g, u, a);
  } else {
    b.matmul(in, *m.up, nullptr, u);
    b.activate(m.act, u, a);
  }
  b.matmul(a, *m.down, nullptr, out);
}

void index_experts(MoeBlock& m) {
  m.routed = MoeExperts{};
  for (const MlpBlock& e : m.experts) {
    if (e.gate) m.routed.gate.push_back(e.gate.get());
    m.routed.up.push_back(e.up.get());
    m.routed.down.push_back(e.down.get());
    m.routed.act = e.act;
  }
}

// The routed experts op by op: routing to the host, then each expert's rows gathered, run and
// added back in expert order.
void moe_routed_by_ops(Backend& b, const MoeBlock& m, Tensor in, const Tensor& router, Tensor acc, Scratch& s) {
  const int64_t rows = in.rows;
  const int E = static_cast<int>(m.experts.size()), k = m.top_k;
  s.topk_idx.resize(static_cast<size_t>(rows * k));
  s.topk_w.resize(static_cast<size_t>(rows * k));
  if (m.sigmoid)
    b.topk_sigmoid_grouped(router, m.router_bias.get(), m.n_group, m.topk_group, k, m.norm_topk, m.routed_scale,
                           s.topk_idx.data(), s.topk_w.data());
  else
    b.topk_softmax(router, k, m.norm_topk, s.topk_idx.data(), s.topk_w.data());
  // Token lists per expert; each token's contributions are then added in expert order.
  std::vector<std::vector<int32_t>> tok(static_cast<size_t>(E));
  std::vector<std::vector<float>> wt(static_cast<size_t>(E));
  for (int64_t r = 0; r < rows; ++r)
    for (int j = 0; j < k; ++j) {
      int32_t e = s.topk_idx[static_cast<size_t>(r * k + j)];
      TF_CHECK(e >= 0 && e < E, "moe: router chose expert ", e, " of ", E);
      tok[static_cast<size_t>(e)].push_back(static_cast<int32_t>(r));
      wt[static_cast<size_t>(e)].push_back(s.topk_w[static_cast<size_t>(r * k + j)]);
    }
  std::vector<float> zeros(static_cast<size_t>(rows * in.cols), 0.0f);
  b.from_host(zeros.data(), acc);
  for (int e = 0; e < E; ++e) {
    const auto& t = tok[static_cast<size_t>(e)];
    if (t.empty()) continue;
    const int n = static_cast<int>(t.size());
    Tensor xin{s.moe_in.data, n, in.cols}, xo{s.moe_out.data, n, in.cols};
    b.gather_rows(in, t.data(), n, xin);
    mlp_forward(b, m.experts[static_cast<size_t>(e)], xin, xo, s.moe_gate, s.moe_up, s.moe_act);
    b.scatter_add_scaled(acc, xo, t.data(), wt[static_cast<size_t>(e)].data(), n);
  }
}

void moe_forward(Backend& b, const MoeBlock& m, Tensor in, Tensor out, Scratch& s) {
  const int64_t rows = in.rows;
  const int E = static_cast<int>(m.experts.size());
  Tensor router{s.router.data, rows, E};
  // The router and the shared expert's input projections read the same x: one call.
  std::vector<Backend::MatmulOut> first{{m.router.get(), nullptr, router}};
  Tensor sg, su, sgate;
  if (m.shared) {
    const MlpBlock& sh = *m.shared;
    sg = Tensor{s.gate.data, rows, sh.inter}, su = Tensor{s.up.data, rows, sh.inter};
    if (sh.gate) first.push_back({sh.gate.get(), nullptr, sg});
    first.push_back({sh.up.get(), nullptr, su});
    if (m.shared_gate) {
      sgate = Tensor{s.shared_gate.data, rows, 1};
      first.push_back({m.shared_gate.get(), nullptr, sgate});
    }
  }
  b.matmul_many(in, first);
  MoeRoute route;
  route.k = m.top_k;
  route.norm = m.norm_topk;
  route.sigmoid = m.sigmoid;
  route.bias = m.router_bias.get();
  route.n_group = m.n_group;
  route.topk_group = m.topk_group;
  route.scale = m.routed_scale;
  if (!m.shared) {
    // Without a shared expert the routed sum is the output itself.
    if (!b.moe_experts(in, router, route, m.routed, out, {})) moe_routed_by_ops(b, m, in, router, out, s);
    return;
  }
  const MlpBlock& sh = *m.shared;
  Tensor a{s.act.data, rows, sh.inter};
  if (sh.gate) b.act_mul(sh.act, sg, su, a);
  else b.activate(sh.act, su, a);
  b.matmul(a, *sh.down, nullptr, out);
  // The backend may add the routed sum to the shared expert's output as it makes it.
  if (b.moe_experts(in, router, route, m.routed, out, {&out, m.shared_gate ? &sgate : nullptr})) return;
  Tensor acc{s.moe_acc.data, rows, in.cols};
  if (!b.moe_experts(in, router, route, m.routed, acc, {})) moe_routed_by_ops(b, m, in, router, acc, s);
  if (m.shared_gate) b.mul_sigmoid_rows(out, sgate);
  b.add(out, acc);
}

void check_round(const RoundInput& in, int max_rows, int32_t vocab) {
  const int m = static_cast<int>(in.tokens.size());
  TF_CHECK(m > 0 && m == in.layout.rows(), "forward: ", m, " tokens but ", in.layout.rows(), " row positions");
  TF_CHECK(m <= max_rows, "forward: round of ", m, " rows exceeds the reserved ", max_rows);
  for (int32_t t : in.tokens) TF_CHECK(t >= 0 && t < vocab, "forward: token id ", t, " outside the vocabulary of ", vocab);
  for (int32_t r : in.logit_rows) TF_CHECK(r >= 0 && r < m, "forward: logit row ", r, " outside the round of ", m);
}

namespace {

// Final norm and head over n rows of in.logit_rows from done on, into s.logits.
void head_logits(Backend& b, const Tensor& x, const RoundInput& in, const LmHead& lm, Scratch& s, size_t done, int n) {
  Tensor fr{s.final_rows.data, n, x.cols}, lg{s.logits.data, n, lm.vocab};
  b.gather_rows(x, in.logit_rows.data() + done, n, fr);
  b.rmsnorm(fr, lm.norm, lm.eps, lm.add_one, fr);
  b.matmul(fr, lm.head, nullptr, lg);
}

// The head's passes over in.logit_rows (the first one already run when head_done), the draws, and
// the logits the host asked for.
void final_logits(Backend& b, const Tensor& x, const RoundInput& in, const LmHead& lm, Scratch& s,
                  std::vector<float>& logits, std::vector<int32_t>& sampled, bool head_done) {
  const int32_t vocab = lm.vocab;
  const size_t n_logits = in.logit_rows.size();
  TF_CHECK(in.logit_full.empty() || in.logit_full.size() == n_logits, "forward: ", in.logit_full.size(),
           " logit_full flags for ", n_logits, " logit rows");
  for (size_t j = 0; j < in.samples.size(); ++j)
    TF_CHECK(in.samples[j].row >= 0 && static_cast<size_t>(in.samples[j].row) < n_logits &&
                 (j == 0 || in.samples[j].row >= in.samples[j - 1].row),
             "forward: sample ", j, " names logit row ", in.samples[j].row, " of ", n_logits, " (rows in order)");
  logits.resize(n_logits * static_cast<size_t>(vocab));
  sampled.resize(in.samples.size());
  auto full = [&](size_t i) { return in.logit_full.empty() || in.logit_full[i] != 0; };
  std::vector<SampleSpec> specs;
  size_t next_spec = 0;
  for (size_t done = 0; done < n_logits;) {
    const int n = static_cast<int>(std::min<size_t>(n_logits - done, static_cast<size_t>(s.max_logit_rows)));
    Tensor lg{s.logits.data, n, vocab};
    if (!(head_done && done == 0)) head_logits(b, x, in, lm, s, done, n);
    // The draws of these rows, on the backend; only rows the host reads travel, in runs.
    specs.clear();
    const size_t first_spec = next_spec;
    while (next_spec < in.samples.size() && static_cast<size_t>(in.samples[next_spec].row) < done + static_cast<size_t>(n)) {
      specs.push_back(in.samples[next_spec++]);
      specs.back().row -= static_cast<int32_t>(done);
    }
    if (!specs.empty()) b.sample_rows(lg, specs, in.penalties, sampled.data() + first_spec);
    for (int r = 0; r < n;) {
      if (!full(done + static_cast<size_t>(r))) {
        ++r;
        continue;
      }
      int e = r + 1;
      while (e < n && full(done + static_cast<size_t>(e))) ++e;
      b.to_host(lg.slice_rows(r, e - r), logits.data() + (done + static_cast<size_t>(r)) * static_cast<size_t>(vocab));
      r = e;
    }
    done += static_cast<size_t>(n);
  }
}

}  // namespace

void model_round(Backend& b, const RoundInput& in, const Tensor& x, const LmHead& lm, Scratch& s,
                 const std::function<void()>& body, std::vector<float>& logits, std::vector<int32_t>& sampled) {
  // A head of one pass runs with the round's launches, so a replayed round holds it too.
  const bool head = !in.logit_rows.empty() && in.logit_rows.size() <= static_cast<size_t>(s.max_logit_rows);
  graph_round(b, in, [&] {
    body();
    if (head) head_logits(b, x, in, lm, s, 0, static_cast<int>(in.logit_rows.size()));
  });
  final_logits(b, x, in, lm, s, logits, sampled, head);
}

void graph_round(Backend& b, int rows, uint64_t key, const std::function<void()>& body) {
  if (!b.graph_begin(rows, key)) {
    body();
    return;
  }
  // Nothing ran on the device unless graph_end says so; any failure before that (a GraphRefused,
  // or an error the direct run will raise again) runs the round directly.
  bool ran = false;
  try {
    body();
    ran = b.graph_end();
  } catch (...) {
    b.graph_abort();
  }
  if (!ran) body();
}

void graph_round(Backend& b, const RoundInput& in, const std::function<void()>& body) {
  const size_t m = in.tokens.size();
  if (m == 0 || in.logit_rows.size() != m) {
    body();
    return;
  }
  graph_round(b, static_cast<int>(m), m, body);
}

void alloc_moe_scratch(Backend& b, Scratch& s, int64_t rows, int64_t hidden, int64_t experts, int64_t inter,
                       bool gated, bool shared_gate) {
  s.router = b.alloc(rows, experts);
  s.moe_in = b.alloc(rows, hidden);
  s.moe_out = b.alloc(rows, hidden);
  s.moe_acc = b.alloc(rows, hidden);
  if (gated) s.moe_gate = b.alloc(rows, inter);
  s.moe_up = b.alloc(rows, inter);
  s.moe_act = b.alloc(rows, inter);
  if (shared_gate) s.shared_gate = b.alloc(rows, 1);
}

}  // namespace tf
