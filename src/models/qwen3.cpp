// Qwen3 family: the Llama layout plus a per-head RMSNorm on queries and keys before RoPE.
#include "models/transformer.h"

namespace tf {

std::unique_ptr<Model> build_qwen3(const ModelFiles& files, const HfConfig& cfg, Backend& backend) {
  return build_decoder(files, cfg, backend, {"qwen3", /*qk_norm=*/true, nullptr});
}

}  // namespace tf
