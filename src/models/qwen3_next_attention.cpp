#include "models/qwen3_next_attention.h"

#include <cmath>

#include "base/error.h"

namespace tf {

std::vector<int64_t> q_gate_row_order(int heads, int hd) {
  std::vector<int64_t> rows;
  for (int64_t part = 0; part < 2; ++part)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < hd; ++i) rows.push_back(2 * h * hd + part * hd + i);
  return rows;
}

GatedAttentionBlock load_gated_attention(WeightLoader& L, RowAssembler& R, const std::string& p, const HfConfig& cfg,
                                         int kv_layer) {
  GatedAttentionBlock a;
  const int64_t H = cfg.hidden_size, nh = cfg.num_attention_heads, nkv = cfg.num_key_value_heads,
                hd = cfg.head_dim;
  TF_CHECK(!cfg.attention_bias, p, ": attention_bias is not supported for this family");
  const std::string qn = p + "q_proj.weight";
  R.check_shape(qn, {2 * nh * hd, H});
  std::vector<RowAssembler::Piece> pieces;
  for (int64_t r : q_gate_row_order(static_cast<int>(nh), static_cast<int>(hd))) {
    if (!pieces.empty() && pieces.back().row0 + pieces.back().rows == r) ++pieces.back().rows;
    else pieces.push_back({qn, r, 1});
  }
  auto qg = R.stack(qn, pieces, H, {nh * hd, nh * hd});
  a.q = std::move(qg[0]);
  a.gate = std::move(qg[1]);
  a.k = L.matrix(p + "k_proj.weight", nkv * hd, H);
  a.v = L.matrix(p + "v_proj.weight", nkv * hd, H);
  a.o = L.matrix(p + "o_proj.weight", H, nh * hd);
  a.q_norm = L.vector(p + "q_norm.weight", hd);
  a.k_norm = L.vector(p + "k_norm.weight", hd);
  a.eps = static_cast<float>(cfg.rms_norm_eps);
  a.params = attention_params(nh, nkv, hd);
  a.kv_layer = kv_layer;
  return a;
}

void gated_attention_forward(Backend& b, const GatedAttentionBlock& a, const RopeParams& rope, Tensor in, Tensor out,
                             GatedAttentionScratch& s, KvStorage& kv, const RowLayout& rows) {
  const int64_t m = in.rows;
  const auto& P = a.params;
  Tensor q = s.q.slice_rows(0, m), gate = s.gate.slice_rows(0, m), k = s.k.slice_rows(0, m),
         v = s.v.slice_rows(0, m), att = s.att.slice_rows(0, m);
  b.matmul_many(in, {{a.q.get(), nullptr, q}, {a.gate.get(), nullptr, gate}, {a.k.get(), nullptr, k}, {a.v.get(), nullptr, v}});
  // Zero-centred norms: transformers multiplies by (1 + weight).
  b.attention_prep(q, k, v, QkNorm{a.q_norm.get(), a.k_norm.get(), a.eps, true}, rope, P, kv, a.kv_layer, rows);
  b.attention(q, att, kv, a.kv_layer, rows, P);
  b.mul_sigmoid(att, Cols{gate, 0});
  b.matmul(att, *a.o, nullptr, out);
}

}  // namespace tf
