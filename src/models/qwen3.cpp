// Qwen3 family: Llama layout plus a per-head RMSNorm on queries and keys before RoPE.
#include "base/error.h"
#include "formats/model_files.h"
#include "models/rope.h"
#include "models/transformer.h"

namespace tf {

std::unique_ptr<Model> build_qwen3(const ModelFiles& files, const HfConfig& cfg, Backend& backend) {
  auto m = std::make_unique<TransformerModel>(cfg, backend, "qwen3");
  WeightLoader L(*files.weights, backend);
  m->load_embeddings(L);
  for (int64_t i = 0; i < cfg.num_hidden_layers; ++i) {
    const std::string p = cat("model.layers.", i, ".");
    DecoderLayer layer;
    layer.input_norm = L.vector(p + "input_layernorm.weight", cfg.hidden_size);
    layer.post_attn_norm = L.vector(p + "post_attention_layernorm.weight", cfg.hidden_size);
    layer.attn = load_attention(L, p + "self_attn.", cfg, /*qk_norm=*/true);
    layer.mlp = std::make_unique<MlpBlock>(load_mlp(L, p + "mlp.", cfg.hidden_size, cfg.intermediate_size, false));
    m->layers.push_back(std::move(layer));
  }
  m->rope = make_rope_params(cfg, cfg.raw.value("tf_rope_interleaved", false));
  m->set_weight_bytes(L.bytes());
  return m;
}

}  // namespace tf
