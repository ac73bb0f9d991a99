// Qwen3-MoE family: Qwen3 attention; sparse layers route each token to its top-k experts
// (softmax router, optional renormalized top-k) plus a sigmoid-gated shared expert where present
// (Qwen2-MoE, which has no q/k norm).
#include <algorithm>

#include "models/transformer.h"

namespace tf {

std::unique_ptr<Model> build_qwen3_moe(const ModelFiles& files, const HfConfig& cfg, Backend& backend) {
  // transformers: a layer is sparse unless listed in mlp_only_layers, every decoder_sparse_step.
  auto sparse = [cfg](int64_t layer) {
    const auto& only = cfg.mlp_only_layers;
    if (std::find(only.begin(), only.end(), layer) != only.end()) return false;
    return (layer + 1) % std::max<int64_t>(1, cfg.decoder_sparse_step) == 0;
  };
  return build_decoder(files, cfg, backend, {"qwen3_moe", cfg.model_type != "qwen2_moe", sparse});
}

}  // namespace tf
