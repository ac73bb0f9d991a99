#pragma once
// HF tokenizers decoders (ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip,
// Sequence): the chain that turns token strings back into text.
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tf {

class HfDecoder {
 public:
  // Null JSON gives a decoder that joins tokens with spaces, as HF does without one.
  explicit HfDecoder(const nlohmann::json& j);
  // Whole-sequence decode of token strings, exactly as HF's decoder.decode.
  std::string decode(std::vector<std::string> tokens) const;
  // Raw bytes one token contributes in the middle of a text (may be partial UTF-8).
  std::string token_bytes(const std::string& token) const;
  // True when a sequence's first token loses its leading space (Metaspace, Strip(" ", 1)).
  bool drops_first_space() const { return drops_first_space_; }

 private:
  struct Step {
    enum Kind { ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip } kind;
    std::string a, b;  // Metaspace: replacement; Replace: pattern, content; Strip: content
    bool first_strips = false;
    int start = 0, stop = 0;
  };
  void parse(const nlohmann::json& j);
  std::vector<Step> steps_;
  bool none_ = false;
  bool drops_first_space_ = false;
};

}  // namespace tf
