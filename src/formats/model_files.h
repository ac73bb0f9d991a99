#pragma once
// What a model path holds: an HF-style config, its weights, and its tokenizer sources.
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "formats/gguf.h"
#include "formats/weight_source.h"

namespace tf {

struct ModelFiles {
  std::string path;
  nlohmann::json config;             // config.json, or one made from GGUF metadata
  nlohmann::json generation_config;  // generation_config.json, or an empty object
  nlohmann::json tokenizer_json;     // tokenizer.json, or null
  nlohmann::json tokenizer_config;   // tokenizer_config.json, or an empty object
  std::shared_ptr<WeightSource> weights;  // tensor names as Hugging Face writes them
  std::shared_ptr<GgufFile> gguf;         // set for GGUF files (tokenizer metadata)
};

// Opens a Hugging Face folder or a .gguf file. Errors name the file and the field.
ModelFiles open_model(const std::string& path);

// Reads a JSON file with a size bound; errors name the file.
nlohmann::json read_json_file(const std::string& path, uint64_t max_bytes = 64ull << 20);

}  // namespace tf
