#include <algorithm>

#include "base/error.h"
#include "formats/model_files.h"
#include "models/model.h"

namespace tf {

std::unique_ptr<Model> build_llama(const ModelFiles&, const HfConfig&, Backend&);
std::unique_ptr<Model> build_qwen3(const ModelFiles&, const HfConfig&, Backend&);
std::unique_ptr<Model> build_qwen3_moe(const ModelFiles&, const HfConfig&, Backend&);
std::unique_ptr<Model> build_nemotron_h(const ModelFiles&, const HfConfig&, Backend&);
std::unique_ptr<Model> build_qwen3_next(const ModelFiles&, const HfConfig&, Backend&);

const std::vector<ModelFamily>& model_registry() {
  static const std::vector<ModelFamily> families = {
      {"llama", {"LlamaForCausalLM", "llama", "MistralForCausalLM", "mistral", "Qwen2ForCausalLM", "qwen2"}, build_llama},
      {"qwen3", {"Qwen3ForCausalLM", "qwen3"}, build_qwen3},
      {"qwen3_moe", {"Qwen3MoeForCausalLM", "qwen3_moe", "Qwen2MoeForCausalLM", "qwen2_moe"}, build_qwen3_moe},
      {"nemotron_h", {"NemotronHForCausalLM", "nemotron_h"}, build_nemotron_h},
      {"qwen3_next",
       {"Qwen3NextForCausalLM", "qwen3_next", "Qwen3_5ForCausalLM", "qwen3_5_text", "Qwen3_5MoeForCausalLM",
        "qwen3_5_moe_text", "Qwen3_5ForConditionalGeneration", "qwen3_5", "Qwen3_5MoeForConditionalGeneration",
        "qwen3_5_moe"},
       build_qwen3_next},
  };
  return families;
}

std::unique_ptr<Model> load_model(const ModelFiles& files, Backend& backend) {
  HfConfig cfg = parse_hf_config(files.config, files.path + "/config.json");
  for (const auto& fam : model_registry()) {
    const auto& a = fam.archs;
    if (std::find(a.begin(), a.end(), cfg.architecture) != a.end() ||
        (cfg.architecture.empty() && std::find(a.begin(), a.end(), cfg.model_type) != a.end()))
      return fam.build(files, cfg, backend);
  }
  std::string supported;
  for (const auto& fam : model_registry())
    for (const auto& name : fam.archs)
      if (name.find("For") != std::string::npos) supported += (supported.empty() ? "" : ", ") + name;
  fail(files.path, ": architecture '", cfg.architecture.empty() ? cfg.model_type : cfg.architecture,
       "' is not supported; supported: ", supported);
}

}  // namespace tf
