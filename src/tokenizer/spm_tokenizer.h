#pragma once
// Sentencepiece-style BPE (GGUF tokenizer.ggml.model "llama"): pieces merge by highest
// score, leftmost on ties; characters outside the vocabulary fall back to <0xHH> tokens.
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace tf {

enum class SpmType : int32_t { Normal = 1, Unknown = 2, Control = 3, UserDefined = 4, Unused = 5, Byte = 6 };

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

class SpmTokenizer : public Tokenizer {
 public:
  // `types` may be empty (all normal); `source` names the file in errors. A byte-typed
  // token not spelled exactly <0xHH> is refused.
  SpmTokenizer(std::vector<std::string> tokens, std::vector<float> scores, std::vector<int32_t> types,
               bool add_space_prefix, const std::string& source);

  std::vector<int32_t> encode(const std::string& text, bool add_special,
                              bool parse_special = true) const override;
  std::string token_bytes(int32_t id) const override;
  std::string token_piece(int32_t id) const override;
  int32_t vocab_size() const override { return static_cast<int32_t>(tokens_.size()); }
  bool is_special(int32_t id) const override;
  int32_t token_id(const std::string& piece) const override;
  bool drops_first_space() const override { return add_space_prefix_; }

  int32_t unk_id = -1;

 private:
  void encode_text(const std::string& text, std::vector<int32_t>& out) const;
  void emit(std::string_view piece, std::vector<int32_t>& out) const;
  SpmType type(int32_t id) const { return types_[id]; }

  std::vector<std::string> tokens_;
  std::vector<float> scores_;
  std::vector<SpmType> types_;
  bool add_space_prefix_;
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> mergeable_, all_;
  int32_t byte_ids_[256];
  std::vector<int32_t> matchable_;  // control and user-defined ids, longest text first
  std::vector<std::vector<int32_t>> by_first_;  // matchable_ by first byte
};

}  // namespace tf
