#pragma once
// HF tokenizers pre-tokenizers (ByteLevel, Split, Digits, Metaspace, Whitespace,
// WhitespaceSplit, Sequence): cut normalized text into the words BPE merges within.
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tf {

struct Piece {
  std::string text;
  bool at_origin = false;  // starts at offset 0 of the original input (Metaspace "first")
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  virtual void split(std::vector<Piece>& pieces) const = 0;
};

// Null JSON gives nullptr; an unknown type throws naming tokenizer.json and the type.
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& j);

// GPT-2's reversible map from bytes to printable code points, and back.
const std::string& byte_to_unicode(unsigned char b);
// Returns -1 for a code point outside the map.
int unicode_to_byte(uint32_t cp);

extern const char* const kGpt2Pattern;
extern const char* const kLlama3Pattern;
extern const char* const kQwen2Pattern;

}  // namespace tf
