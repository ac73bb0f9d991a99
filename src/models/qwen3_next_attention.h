#pragma once
// Gated full attention of Qwen3-Next and Qwen3.5: q_proj gives each head [q | gate], zero-centred
// per-head q/k RMSNorm, partial rotary, output times sigmoid(gate), then o_proj.
#include <string>

#include "models/gated_deltanet.h"

namespace tf {

struct GatedAttentionBlock {
  WeightPtr q, gate;  // views over q_proj's rows regrouped as [all q | all gate]
  WeightPtr k, v, o, q_norm, k_norm;
  float eps = 1e-6f;
  AttnParams params;
  int kv_layer = 0;  // ordinal among the model's attention layers (its KvStorage layer)
};

// The source rows of q_proj for [q | gate]: head h's q rows are [2 h hd, 2 h hd + hd).
std::vector<int64_t> q_gate_row_order(int heads, int head_dim);

GatedAttentionBlock load_gated_attention(WeightLoader& L, RowAssembler& R, const std::string& prefix,
                                         const HfConfig& cfg, int kv_layer);

struct GatedAttentionScratch {
  Tensor q, gate, k, v, att;
};

void gated_attention_forward(Backend& b, const GatedAttentionBlock& a, const RopeParams& rope, Tensor in, Tensor out,
                             GatedAttentionScratch& s, KvStorage& kv, const RowLayout& rows);

}  // namespace tf
