// Whole-sequence decode and the size check shared by the tokenizers, and the streaming decoder.
#include "base/error.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace tf {

void check_encode_size(const std::string& text) {
  TF_CHECK(text.size() <= kMaxEncodeBytes, "tokenize: a text of ", text.size(), " bytes is more than the ",
           kMaxEncodeBytes >> 20, " MiB one text may hold");
}

std::string vocab_fit_warning(const Tokenizer& tok, int32_t model_vocab) {
  const int32_t n = tok.vocab_size();
  if (n <= model_vocab) return {};
  std::string first;
  for (int32_t id = model_vocab; id < n && first.empty(); ++id) first = tok.token_piece(id);
  return cat("the tokenizer has ", n, " tokens but the model's embedding has ", model_vocab, " rows: the ",
             n - model_vocab, " ids from ", model_vocab, " on (the first '", first,
             "') have no embedding, and a prompt that holds one is refused");
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special) const {
  std::string bytes;
  bool first = true;
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size()) continue;
    if (skip_special && is_special(id)) continue;
    std::string t = token_bytes(id);
    if (first && drops_first_space() && !t.empty() && t[0] == ' ') t.erase(0, 1);
    first = false;
    bytes += t;
  }
  return utf8::sanitize(bytes);
}

std::string StreamDecoder::push(int32_t id) {
  if (id < 0 || id >= tok_.vocab_size()) return "";
  if (skip_special_ && tok_.is_special(id)) return "";
  std::string t = tok_.token_bytes(id);
  if (first_ && tok_.drops_first_space() && !t.empty() && t[0] == ' ') t.erase(0, 1);
  first_ = false;
  pending_ += t;
  const size_t keep = utf8::incomplete_tail(pending_);
  std::string out = utf8::sanitize(std::string_view(pending_).substr(0, pending_.size() - keep));
  pending_.erase(0, pending_.size() - keep);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out = utf8::sanitize(pending_);
  pending_.clear();
  return out;
}

}  // namespace tf
