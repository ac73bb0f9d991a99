// Picks the tokenizer a model's files describe and applies its configs' special tokens.
#include <algorithm>

#include "base/error.h"
#include "formats/model_files.h"
#include "tokenizer/hf_tokenizer.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/spm_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace tf {

namespace {

using nlohmann::json;

constexpr size_t kMaxVocab = 1 << 24;

// A special token in tokenizer_config.json is a string or an AddedToken object.
std::string token_text(const json& cfg, const char* key, const std::string& file) {
  if (!cfg.is_object() || !cfg.contains(key) || cfg[key].is_null()) return "";
  const json& v = cfg[key];
  if (v.is_string()) return v.get<std::string>();
  TF_CHECK(v.is_object() && v.contains("content") && v["content"].is_string(), file, ": field '", key,
           "' is neither a string nor an object with a string 'content'");
  return v["content"].get<std::string>();
}

std::vector<int32_t> int_list(const json& v, const std::string& file, const char* key) {
  std::vector<int32_t> out;
  auto one = [&](const json& x) {
    TF_CHECK(x.is_number_integer() && x.get<int64_t>() >= 0 && x.get<int64_t>() < static_cast<int64_t>(kMaxVocab),
             file, ": field '", key, "' has a bad token id ", x.dump());
    out.push_back(static_cast<int32_t>(x.get<int64_t>()));
  };
  if (v.is_array()) for (const auto& x : v) one(x);
  else if (!v.is_null()) one(v);
  return out;
}

void add_eos(Tokenizer& t, int32_t id) {
  if (id >= 0 && std::find(t.eos_ids.begin(), t.eos_ids.end(), id) == t.eos_ids.end()) t.eos_ids.push_back(id);
}

int32_t gguf_id(const GgufFile& g, const std::string& key, size_t n) {
  const int64_t v = g.get_int(key, -1);
  TF_CHECK(v >= -1 && v < static_cast<int64_t>(n), g.path(), ": ", key, " = ", v, " is outside the vocabulary of ", n);
  return static_cast<int32_t>(v);
}

// A GGUF "gpt2" vocabulary as the tokenizer.json HF would write for it.
json gguf_bpe_json(const GgufFile& g, const std::vector<std::string>& tokens, const std::vector<int64_t>& types) {
  const std::string pre = g.get_string("tokenizer.ggml.pre", "default");
  json vocab = json::object(), added = json::array();
  for (size_t i = 0; i < tokens.size(); ++i) {
    const int64_t t = types.empty() ? 1 : types[i];
    if (t == 3 || t == 4)
      added.push_back({{"id", i}, {"content", tokens[i]}, {"special", t == 3}, {"normalized", false},
                       {"lstrip", false}, {"rstrip", false}, {"single_word", false}});
    else
      vocab[tokens[i]] = i;
  }
  json pre_tok, normalizer;
  bool ignore_merges = false;
  if (pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3" || pre == "smaug-bpe") {
    pre_tok = {{"type", "Sequence"}, {"pretokenizers", json::array({
        {{"type", "Split"}, {"pattern", {{"Regex", kLlama3Pattern}}}, {"behavior", "Isolated"}, {"invert", false}},
        {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}})}};
    ignore_merges = true;
  } else if (pre == "qwen2") {
    pre_tok = {{"type", "Sequence"}, {"pretokenizers", json::array({
        {{"type", "Split"}, {"pattern", {{"Regex", kQwen2Pattern}}}, {"behavior", "Isolated"}, {"invert", false}},
        {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}})}};
    normalizer = {{"type", "NFC"}};
  } else {
    pre_tok = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  }
  return {{"model", {{"type", "BPE"}, {"vocab", std::move(vocab)}, {"merges", g.get_strings("tokenizer.ggml.merges")},
                     {"ignore_merges", ignore_merges}}},
          {"normalizer", normalizer}, {"pre_tokenizer", pre_tok}, {"decoder", {{"type", "ByteLevel"}}},
          {"added_tokens", added}, {"post_processor", nullptr}};
}

std::unique_ptr<Tokenizer> load_gguf(const GgufFile& g) {
  const std::string& file = g.path();
  const std::string model = g.get_string("tokenizer.ggml.model", "");
  TF_CHECK(!model.empty(), file, ": tokenizer.ggml.model is missing");
  auto tokens = g.get_strings("tokenizer.ggml.tokens");
  TF_CHECK(!tokens.empty() && tokens.size() <= kMaxVocab, file, ": tokenizer.ggml.tokens has ", tokens.size(),
           " entries");
  const auto types = g.get_ints("tokenizer.ggml.token_type");
  TF_CHECK(types.empty() || types.size() == tokens.size(), file, ": tokenizer.ggml.token_type has ", types.size(),
           " entries for ", tokens.size(), " tokens");
  const size_t n = tokens.size();
  std::unique_ptr<Tokenizer> tok;
  bool add_bos_default = false;
  if (model == "llama") {
    const auto scores64 = g.get_floats("tokenizer.ggml.scores");
    std::vector<float> scores(scores64.begin(), scores64.end());
    std::vector<int32_t> types32;
    for (int64_t t : types) types32.push_back(static_cast<int32_t>(std::clamp<int64_t>(t, -1, 100)));
    auto spm = std::make_unique<SpmTokenizer>(std::move(tokens), std::move(scores), std::move(types32),
                                              g.get_bool("tokenizer.ggml.add_space_prefix", true), file);
    const int32_t unk = gguf_id(g, "tokenizer.ggml.unknown_token_id", n);
    if (unk >= 0) spm->unk_id = unk;
    tok = std::move(spm);
    add_bos_default = true;
  } else if (model == "gpt2") {
    tok = std::make_unique<HfTokenizer>(gguf_bpe_json(g, tokens, types), file);
  } else {
    fail(file, ": tokenizer.ggml.model '", model, "' is not supported (llama, gpt2)");
  }
  tok->bos_id = gguf_id(g, "tokenizer.ggml.bos_token_id", n);
  tok->eos_id = gguf_id(g, "tokenizer.ggml.eos_token_id", n);
  tok->pad_id = gguf_id(g, "tokenizer.ggml.padding_token_id", n);
  tok->add_bos = g.get_bool("tokenizer.ggml.add_bos_token", add_bos_default) && tok->bos_id >= 0;
  tok->add_eos = g.get_bool("tokenizer.ggml.add_eos_token", false) && tok->eos_id >= 0;
  add_eos(*tok, tok->eos_id);
  add_eos(*tok, gguf_id(g, "tokenizer.ggml.eot_token_id", n));
  add_eos(*tok, gguf_id(g, "tokenizer.ggml.eom_token_id", n));
  if (auto* hf = dynamic_cast<HfTokenizer*>(tok.get())) {
    if (tok->add_bos) hf->prefix_ids = {tok->bos_id};
    if (tok->add_eos) hf->suffix_ids = {tok->eos_id};
  }
  tok->chat_template = g.get_string("tokenizer.chat_template", "");
  return tok;
}

// tokenizer_config.json's add_bos_token / add_eos_token override the post-processor, as
// transformers' Llama-family fast tokenizers do.
void apply_flag(HfTokenizer& hf, const json& cfg, const char* key, int32_t id, bool prefix, const std::string& file) {
  if (!cfg.is_object() || !cfg.contains(key) || cfg[key].is_null() || id < 0) return;
  TF_CHECK(cfg[key].is_boolean(), file, ": field '", key, "' is not a boolean");
  auto& v = prefix ? hf.prefix_ids : hf.suffix_ids;
  const bool has = std::find(v.begin(), v.end(), id) != v.end();
  if (cfg[key].get<bool>() && !has) v.insert(prefix ? v.begin() : v.end(), id);
  if (!cfg[key].get<bool>() && has) v.erase(std::remove(v.begin(), v.end(), id), v.end());
}

void apply_hf_configs(HfTokenizer& tok, const ModelFiles& f) {
  const std::string file = f.path + "/tokenizer_config.json";
  const json& cfg = f.tokenizer_config;
  auto resolve = [&](const char* key, std::string* text) {
    *text = token_text(cfg, key, file);
    if (text->empty()) return -1;
    const int32_t id = tok.token_id(*text);
    TF_CHECK(id >= 0, file, ": field '", key, "' names '", *text, "', which is not in the vocabulary");
    return id;
  };
  std::string pad;
  tok.bos_id = resolve("bos_token", &tok.bos_token);
  tok.eos_id = resolve("eos_token", &tok.eos_token);
  tok.pad_id = resolve("pad_token", &pad);
  if (tok.bos_id < 0 && !tok.prefix_ids.empty()) tok.bos_id = tok.prefix_ids.front();
  apply_flag(tok, cfg, "add_bos_token", tok.bos_id, true, file);
  apply_flag(tok, cfg, "add_eos_token", tok.eos_id, false, file);
  tok.add_bos = tok.bos_id >= 0 && std::find(tok.prefix_ids.begin(), tok.prefix_ids.end(), tok.bos_id) != tok.prefix_ids.end();
  tok.add_eos = tok.eos_id >= 0 && std::find(tok.suffix_ids.begin(), tok.suffix_ids.end(), tok.eos_id) != tok.suffix_ids.end();
  add_eos(tok, tok.eos_id);
  if (cfg.is_object() && cfg.contains("chat_template") && !cfg["chat_template"].is_null()) {
    const json& ct = cfg["chat_template"];
    if (ct.is_string()) {
      tok.chat_template = ct.get<std::string>();
    } else {
      TF_CHECK(ct.is_array(), file, ": field 'chat_template' is neither a string nor a list");
      for (const auto& e : ct) {
        TF_CHECK(e.is_object() && e.contains("template") && e["template"].is_string(), file,
                 ": field 'chat_template' has an entry without a string 'template'");
        if (e.value("name", std::string()) == "default" || tok.chat_template.empty())
          tok.chat_template = e["template"].get<std::string>();
      }
    }
  }
}

// A value of the wrong JSON type deep in a file surfaces as a nlohmann exception: it becomes a
// tf::Error naming the file.
template <class F>
auto naming_file(const std::string& file, F f) -> decltype(f()) {
  try {
    return f();
  } catch (const nlohmann::json::exception& e) {
    fail(file, ": a field has the wrong type or value: ", e.what());
  }
}

}  // namespace

std::unique_ptr<Tokenizer> load_tokenizer(const ModelFiles& f) {
  std::unique_ptr<Tokenizer> tok;
  if (!f.tokenizer_json.is_null()) {
    const std::string file = f.path + "/tokenizer.json";
    auto hf = naming_file(file, [&] { return std::make_unique<HfTokenizer>(f.tokenizer_json, file); });
    naming_file(f.path + "/tokenizer_config.json", [&] { apply_hf_configs(*hf, f); });
    tok = std::move(hf);
  } else if (f.gguf) {
    tok = load_gguf(*f.gguf);
  } else {
    fail(f.path, ": no tokenizer.json and no GGUF tokenizer metadata");
  }
  if (tok->bos_id >= 0 && tok->bos_token.empty()) tok->bos_token = tok->token_piece(tok->bos_id);
  if (tok->eos_id >= 0 && tok->eos_token.empty()) tok->eos_token = tok->token_piece(tok->eos_id);
  const json& gen = f.generation_config;
  if (gen.is_object() && gen.contains("eos_token_id"))
    for (int32_t id : int_list(gen["eos_token_id"], f.path + "/generation_config.json", "eos_token_id")) {
      TF_CHECK(id < tok->vocab_size(), f.path, "/generation_config.json: field 'eos_token_id' = ", id,
               " is outside the vocabulary of ", tok->vocab_size());
      add_eos(*tok, id);
    }
  return tok;
}

}  // namespace tf
