#pragma once
// HF tokenizers normalizers (NFC/NFKC/NFD/NFKD, Lowercase, Prepend, Replace, Strip,
// StripAccents, Sequence) applied to valid UTF-8 text.
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

namespace tf {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void apply(std::string& s) const = 0;
};

// Null JSON gives nullptr; an unknown type throws naming tokenizer.json and the type.
std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& j);

// Applies a Unicode normal form by name ("NFC", "NFD", "NFKC", "NFKD").
std::string unicode_normalize(const std::string& s, const std::string& form);

}  // namespace tf
