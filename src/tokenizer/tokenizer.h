#pragma once
// Text <-> token ids. Byte-level BPE (tokenizer.json) and sentencepiece-style BPE with byte
// fallback (GGUF tokenizer.ggml.* or tokenizer.json Metaspace models) behind one interface.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tf {

struct ModelFiles;

// The most bytes one encode call takes: the merge loops index a text's symbols with int.
constexpr size_t kMaxEncodeBytes = size_t{1} << 30;

// Fails unless text fits one encode call.
void check_encode_size(const std::string& text);

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // add_special: add BOS (and whatever the model's post-processor adds) as the model asks.
  // Special/added tokens written in the text are matched as tokens when parse_special.
  virtual std::vector<int32_t> encode(const std::string& text, bool add_special,
                                      bool parse_special = true) const = 0;
  // Bytes of one token as it appears in decoded text (may be a partial UTF-8 sequence).
  virtual std::string token_bytes(int32_t id) const = 0;
  // The token's vocabulary string (as stored), for display and /tokenize.
  virtual std::string token_piece(int32_t id) const = 0;
  // Whole-sequence decode (sentencepiece drops the leading space of the first token).
  virtual std::string decode(const std::vector<int32_t>& ids, bool skip_special) const;
  virtual int32_t vocab_size() const = 0;
  virtual bool is_special(int32_t id) const = 0;
  // Returns -1 when absent.
  virtual int32_t token_id(const std::string& piece) const = 0;
  // True when decoding drops the leading space of a sequence's first token (sentencepiece).
  virtual bool drops_first_space() const { return false; }

  int32_t bos_id = -1;
  int32_t eos_id = -1;
  int32_t pad_id = -1;
  std::vector<int32_t> eos_ids;  // every id that ends generation (eos + generation_config)
  bool add_bos = false;
  bool add_eos = false;
  std::string chat_template;     // Jinja source, empty when the model has none
  std::string bos_token, eos_token;
};

// Empty when every id of tok is a row of a model_vocab-row embedding; otherwise a warning that
// says how many are not (a prompt that holds one is refused when it is submitted).
std::string vocab_fit_warning(const Tokenizer& tok, int32_t model_vocab);

// Builds the tokenizer a model's files describe; errors name the file and the field.
std::unique_ptr<Tokenizer> load_tokenizer(const ModelFiles& files);

// The tokenizer sources of a model folder or .gguf file without its weights (what
// `tensorfold tokenize` needs): config.json and the weights may be absent.
ModelFiles open_tokenizer_files(const std::string& path);

// Streams decoded text: bytes of a token that ends inside a UTF-8 sequence are held back
// until the sequence completes.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tok, bool skip_special = true)
      : tok_(tok), skip_special_(skip_special) {}
  // Text that became complete with this token (possibly empty).
  std::string push(int32_t id);
  // Whatever is still held (invalid or cut sequences come out as U+FFFD).
  std::string flush();

 private:
  const Tokenizer& tok_;
  bool skip_special_;
  bool first_ = true;
  std::string pending_;
};

}  // namespace tf
