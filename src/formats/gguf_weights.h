#pragma once
// A GGUF file seen as a Hugging Face model: tensors under HF names and a config.json made
// from its metadata.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "formats/gguf.h"
#include "formats/weight_source.h"

namespace tf {

// Maps a GGUF tensor name to its HF name; names it does not know are returned unchanged.
// 3-D expert tensors are not handled here (GgufWeights splits them per expert).
std::string gguf_to_hf_name(const std::string& gguf_name);

class GgufWeights : public WeightSource {
 public:
  explicit GgufWeights(std::shared_ptr<GgufFile> file);
  const TensorView* find(const std::string& name) const override;
  std::vector<std::string> names() const override;
  std::string describe() const override { return file_->path(); }

 private:
  std::shared_ptr<GgufFile> file_;  // owns the mapping every view points into
  std::map<std::string, TensorView> views_;
  std::vector<std::vector<uint8_t>> owned_;  // tensors the hybrid archs' inverse transforms rewrote
};

// config.json fields for llama, qwen2, qwen3, qwen3moe GGUF files and the hybrid archs of gguf_hybrid.h;
// others throw.
nlohmann::json gguf_hf_config(const GgufFile& file, const WeightSource& hf_weights);

}  // namespace tf
