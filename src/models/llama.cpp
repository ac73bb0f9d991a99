// Llama family: GQA attention with RoPE (default, linear, llama3 or yarn scaling), SwiGLU MLP,
// tied or untied embeddings. Also serves Mistral and Qwen2 checkpoints, which share the layout.
#include "base/error.h"
#include "formats/model_files.h"
#include "models/rope.h"
#include "models/transformer.h"

namespace tf {

std::unique_ptr<Model> build_llama(const ModelFiles& files, const HfConfig& cfg, Backend& backend) {
  auto m = std::make_unique<TransformerModel>(cfg, backend, "llama");
  WeightLoader L(*files.weights, backend);
  m->load_embeddings(L);
  for (int64_t i = 0; i < cfg.num_hidden_layers; ++i) {
    const std::string p = cat("model.layers.", i, ".");
    DecoderLayer layer;
    layer.input_norm = L.vector(p + "input_layernorm.weight", cfg.hidden_size);
    layer.post_attn_norm = L.vector(p + "post_attention_layernorm.weight", cfg.hidden_size);
    layer.attn = load_attention(L, p + "self_attn.", cfg, /*qk_norm=*/false);
    layer.mlp = std::make_unique<MlpBlock>(load_mlp(L, p + "mlp.", cfg.hidden_size, cfg.intermediate_size, cfg.mlp_bias));
    m->layers.push_back(std::move(layer));
  }
  m->rope = make_rope_params(cfg, cfg.raw.value("tf_rope_interleaved", false));
  m->set_weight_bytes(L.bytes());
  return m;
}

}  // namespace tf
