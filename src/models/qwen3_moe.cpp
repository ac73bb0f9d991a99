// Qwen3-MoE family: Qwen3 attention; sparse layers route each token to its top-k experts
// (softmax router, optional renormalized top-k) plus a gated shared expert where present.
#include <algorithm>

#include "base/error.h"
#include "formats/model_files.h"
#include "models/rope.h"
#include "models/transformer.h"

namespace tf {

namespace {

// transformers: a layer is sparse unless listed in mlp_only_layers, every decoder_sparse_step.
bool is_sparse(const HfConfig& cfg, int64_t layer) {
  const auto& only = cfg.mlp_only_layers;
  if (std::find(only.begin(), only.end(), layer) != only.end()) return false;
  int64_t step = std::max<int64_t>(1, cfg.decoder_sparse_step);
  return (layer + 1) % step == 0;
}

}  // namespace

std::unique_ptr<Model> build_qwen3_moe(const ModelFiles& files, const HfConfig& cfg, Backend& backend) {
  auto m = std::make_unique<TransformerModel>(cfg, backend, "qwen3_moe");
  WeightLoader L(*files.weights, backend);
  m->load_embeddings(L);
  const bool qk_norm = cfg.model_type != "qwen2_moe";
  for (int64_t i = 0; i < cfg.num_hidden_layers; ++i) {
    const std::string p = cat("model.layers.", i, ".");
    DecoderLayer layer;
    layer.input_norm = L.vector(p + "input_layernorm.weight", cfg.hidden_size);
    layer.post_attn_norm = L.vector(p + "post_attention_layernorm.weight", cfg.hidden_size);
    layer.attn = load_attention(L, p + "self_attn.", cfg, qk_norm);
    if (is_sparse(cfg, i))
      layer.moe = std::make_unique<MoeBlock>(load_moe(L, p + "mlp.", cfg));
    else
      layer.mlp = std::make_unique<MlpBlock>(load_mlp(L, p + "mlp.", cfg.hidden_size, cfg.intermediate_size, false));
    m->layers.push_back(std::move(layer));
  }
  m->rope = make_rope_params(cfg, cfg.raw.value("tf_rope_interleaved", false));
  m->set_weight_bytes(L.bytes());
  return m;
}

}  // namespace tf
