#pragma once
// Tokenizer described by a Hugging Face tokenizer.json: added tokens, normalizer,
// pre-tokenizer, BPE model, post-processor and decoder, as HF tokenizers runs them.
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/bpe_model.h"
#include "tokenizer/hf_decoder.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace tf {

class HfTokenizer : public Tokenizer {
 public:
  // `source` names the file in errors.
  HfTokenizer(const nlohmann::json& tokenizer_json, const std::string& source);

  std::vector<int32_t> encode(const std::string& text, bool add_special,
                              bool parse_special = true) const override;
  std::string token_bytes(int32_t id) const override;
  std::string token_piece(int32_t id) const override;
  std::string decode(const std::vector<int32_t>& ids, bool skip_special) const override;
  int32_t vocab_size() const override { return static_cast<int32_t>(pieces_.size()); }
  bool is_special(int32_t id) const override;
  int32_t token_id(const std::string& piece) const override;
  bool drops_first_space() const override { return decoder_->drops_first_space(); }

  // What add_special puts around the text (the post-processor's single-sequence template).
  std::vector<int32_t> prefix_ids, suffix_ids;

 private:
  struct Added {
    int32_t id;
    std::string content;  // as matched: normalized when `normalized`
    bool special, lstrip, rstrip, single_word, normalized;
  };
  struct Item {
    int32_t id;  // -1 for text
    std::string text;
    bool at_origin;
  };
  void parse_model(const nlohmann::json& m, const std::string& source);
  void parse_added(const nlohmann::json& a, const std::string& source);
  void parse_post(const nlohmann::json& p, const std::string& source);
  // Cuts text items at added tokens of one kind (normalized or not).
  void split_added(std::vector<Item>& items, bool normalized, bool parse_special) const;

  std::unique_ptr<BpeModel> model_;
  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_;
  std::unique_ptr<HfDecoder> decoder_;
  std::vector<Added> added_;
  std::vector<std::vector<size_t>> by_first_;  // added_ indices by first byte, longest first
  std::unordered_map<std::string, int32_t> added_ids_;
  std::vector<std::string> pieces_;
  std::vector<uint8_t> special_;
};

}  // namespace tf
