// Llama family: GQA attention with RoPE (default, linear, llama3 or yarn scaling), SwiGLU MLP,
// tied or untied embeddings, optional q/k/v biases. Also serves Mistral and Qwen2 checkpoints,
// which share the layout.
#include "models/transformer.h"

namespace tf {

std::unique_ptr<Model> build_llama(const ModelFiles& files, const HfConfig& cfg, Backend& backend) {
  return build_decoder(files, cfg, backend, {"llama", /*qk_norm=*/false, nullptr});
}

}  // namespace tf
