#pragma once
// llama.cpp GGUF files of the hybrid families (nemotron_h, nemotron_h_moe, qwen3next, qwen35, qwen35moe) seen as the
// Hugging Face checkpoint they were converted from: names mapped back and the converter's
// transforms undone, so the models load them exactly as the HF folder.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "formats/gguf.h"

namespace tf {

bool gguf_is_hybrid(const std::string& arch);

// Calls add for every HF-named tensor; tensors whose values or row order change are stored in owned.
void gguf_hybrid_views(const GgufFile& f, std::vector<std::vector<uint8_t>>& owned,
                       const std::function<void(TensorView)>& add);

// config.json fields of a hybrid file; w is the HF-named view of the same file.
nlohmann::json gguf_hybrid_config(const GgufFile& f, const WeightSource& w);

// A_log whose -exp equals the stored A = -exp(A_log) (the bf16 value when one fits, as checkpoints store it).
float gguf_a_log_from_a(float a);

}  // namespace tf
