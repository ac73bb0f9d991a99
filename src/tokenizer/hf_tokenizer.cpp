#include "tokenizer/hf_tokenizer.h"

#include <algorithm>

#include <utf8proc.h>

#include "base/error.h"
#include "tokenizer/utf8.h"

namespace tf {

namespace {

using nlohmann::json;

// Ids beyond this are refused so a hostile file cannot make us allocate without bound.
constexpr int64_t kMaxTokenId = 1 << 24;

bool is_word_char(uint32_t cp) {
  if (cp == '_') return true;
  const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  return (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO) ||
         (cat >= UTF8PROC_CATEGORY_ND && cat <= UTF8PROC_CATEGORY_NO);
}

bool is_space_byte(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

uint32_t cp_before(const std::string& s, size_t pos) {
  size_t b = pos - 1;
  while (b > 0 && (static_cast<unsigned char>(s[b]) & 0xC0) == 0x80) --b;
  size_t n = 0;
  return utf8::decode(s, b, &n);
}

std::string opt_string(const json& j, const char* key, const std::string& source) {
  if (!j.contains(key) || j[key].is_null()) return "";
  TF_CHECK(j[key].is_string(), source, ": model.", key, " is not a string");
  return j[key].get<std::string>();
}

}  // namespace

HfTokenizer::HfTokenizer(const json& tj, const std::string& source) {
  TF_CHECK(tj.is_object(), source, ": not a JSON object");
  TF_CHECK(tj.contains("model") && tj["model"].is_object(), source, ": field 'model' is missing");
  parse_model(tj["model"], source);
  if (tj.contains("normalizer")) normalizer_ = make_normalizer(tj["normalizer"]);
  if (tj.contains("pre_tokenizer")) pre_ = make_pre_tokenizer(tj["pre_tokenizer"]);
  decoder_ = std::make_unique<HfDecoder>(tj.contains("decoder") ? tj["decoder"] : json());
  if (tj.contains("added_tokens") && !tj["added_tokens"].is_null()) parse_added(tj["added_tokens"], source);
  if (tj.contains("post_processor") && !tj["post_processor"].is_null()) parse_post(tj["post_processor"], source);
}

void HfTokenizer::parse_model(const json& m, const std::string& source) {
  const std::string type = m.value("type", std::string("BPE"));
  TF_CHECK(type == "BPE", source, ": model.type '", type, "' is not supported (only BPE)");
  TF_CHECK(m.contains("vocab") && m["vocab"].is_object(), source, ": model.vocab is missing or not an object");
  std::unordered_map<std::string, int32_t> vocab;
  vocab.reserve(m["vocab"].size());
  for (const auto& [piece, v] : m["vocab"].items()) {
    TF_CHECK(v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() < kMaxTokenId, source,
             ": model.vocab['", piece, "'] has a bad id ", v.dump());
    const auto id = static_cast<int32_t>(v.get<int64_t>());
    vocab.emplace(piece, id);
    if (static_cast<size_t>(id) >= pieces_.size()) pieces_.resize(id + 1);
    pieces_[id] = piece;
  }
  std::vector<std::pair<std::string, std::string>> merges;
  if (m.contains("merges") && m["merges"].is_array()) {
    merges.reserve(m["merges"].size());
    for (const auto& e : m["merges"]) {
      if (e.is_string()) {
        const std::string s = e.get<std::string>();
        const size_t sp = s.find(' ', 1);
        TF_CHECK(sp != std::string::npos, source, ": model.merges entry '", s, "' is not 'a b'");
        merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
      } else {
        TF_CHECK(e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string(), source,
                 ": model.merges entry ", e.dump(), " is not a pair of strings");
        merges.emplace_back(e[0].get<std::string>(), e[1].get<std::string>());
      }
    }
  }
  BpeOptions opt;
  opt.ignore_merges = m.value("ignore_merges", false);
  opt.byte_fallback = m.value("byte_fallback", false);
  opt.fuse_unk = m.value("fuse_unk", false);
  opt.unk_token = opt_string(m, "unk_token", source);
  opt.continuing_subword_prefix = opt_string(m, "continuing_subword_prefix", source);
  opt.end_of_word_suffix = opt_string(m, "end_of_word_suffix", source);
  model_ = std::make_unique<BpeModel>(std::move(vocab), merges, opt);
}

void HfTokenizer::parse_added(const json& a, const std::string& source) {
  TF_CHECK(a.is_array(), source, ": added_tokens is not an array");
  for (const auto& t : a) {
    TF_CHECK(t.is_object() && t.contains("id") && t["id"].is_number_integer() && t.contains("content") &&
                 t["content"].is_string(),
             source, ": added_tokens entry ", t.dump().substr(0, 200), " needs an integer id and a content");
    const int64_t id = t["id"].get<int64_t>();
    TF_CHECK(id >= 0 && id < kMaxTokenId, source, ": added_tokens id ", id, " is out of range");
    Added x;
    x.id = static_cast<int32_t>(id);
    x.content = t["content"].get<std::string>();
    x.special = t.value("special", false);
    x.lstrip = t.value("lstrip", false);
    x.rstrip = t.value("rstrip", false);
    x.single_word = t.value("single_word", false);
    x.normalized = t.value("normalized", !x.special);
    if (static_cast<size_t>(id) >= pieces_.size()) pieces_.resize(id + 1);
    pieces_[id] = x.content;
    if (special_.size() < pieces_.size()) special_.resize(pieces_.size(), 0);
    special_[id] = x.special;
    added_ids_[x.content] = x.id;
    // HF matches normalized added tokens by their normalized form.
    if (x.normalized && normalizer_) normalizer_->apply(x.content);
    if (!x.content.empty()) added_.push_back(std::move(x));
  }
  // Longest first, so the first candidate that matches at a position is the longest one.
  std::stable_sort(added_.begin(), added_.end(),
                   [](const Added& l, const Added& r) { return l.content.size() > r.content.size(); });
  special_.resize(pieces_.size(), 0);
  by_first_.assign(256, {});
  for (size_t k = 0; k < added_.size(); ++k)
    by_first_[static_cast<unsigned char>(added_[k].content[0])].push_back(k);
}

void HfTokenizer::parse_post(const json& p, const std::string& source) {
  TF_CHECK(p.is_object() && p.contains("type") && p["type"].is_string(), source,
           ": post_processor needs a string 'type'");
  const std::string type = p["type"].get<std::string>();
  if (type == "ByteLevel") return;
  if (type == "Sequence") {
    TF_CHECK(p.contains("processors") && p["processors"].is_array(), source,
             ": post_processor Sequence needs 'processors'");
    for (const auto& q : p["processors"]) parse_post(q, source);
    return;
  }
  std::vector<int32_t> pre, post;
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    auto id_of = [&](const char* key) {
      TF_CHECK(p.contains(key) && p[key].is_array() && p[key].size() == 2 && p[key][1].is_number_integer(),
               source, ": post_processor.", key, " is not [token, id]");
      return p[key][1].get<int32_t>();
    };
    pre.push_back(id_of("cls"));
    post.push_back(id_of("sep"));
  } else if (type == "TemplateProcessing") {
    TF_CHECK(p.contains("single") && p["single"].is_array(), source, ": post_processor.single is missing");
    const json specials = p.value("special_tokens", json::object());
    bool seen_seq = false;
    for (const auto& item : p["single"]) {
      if (item.contains("Sequence")) {
        seen_seq = true;
        continue;
      }
      TF_CHECK(item.contains("SpecialToken") && item["SpecialToken"].contains("id"), source,
               ": post_processor.single item ", item.dump(), " is not a Sequence or SpecialToken");
      const std::string name = item["SpecialToken"]["id"].get<std::string>();
      TF_CHECK(specials.contains(name) && specials[name].contains("ids") && specials[name]["ids"].is_array(),
               source, ": post_processor.special_tokens has no ids for '", name, "'");
      for (const auto& id : specials[name]["ids"]) {
        TF_CHECK(id.is_number_integer(), source, ": post_processor.special_tokens['", name, "'] id is not an integer");
        (seen_seq ? post : pre).push_back(id.get<int32_t>());
      }
    }
  } else {
    fail(source, ": post_processor type '", type, "' is not supported");
  }
  // A later processor wraps the output of an earlier one.
  prefix_ids.insert(prefix_ids.begin(), pre.begin(), pre.end());
  suffix_ids.insert(suffix_ids.end(), post.begin(), post.end());
}

void HfTokenizer::split_added(std::vector<Item>& items, bool normalized, bool parse_special) const {
  bool any = false;
  for (const auto& a : added_) any = any || (a.normalized == normalized && (parse_special || !a.special));
  if (!any) return;
  std::vector<Item> out;
  for (auto& it : items) {
    if (it.id >= 0) {
      out.push_back(std::move(it));
      continue;
    }
    const std::string& s = it.text;
    size_t seg = 0;  // start of the text not yet emitted
    for (size_t i = 0; i < s.size();) {
      const Added* hit = nullptr;
      for (size_t k : by_first_[static_cast<unsigned char>(s[i])]) {
        const Added& a = added_[k];
        if (a.normalized != normalized || (a.special && !parse_special)) continue;
        if (s.compare(i, a.content.size(), a.content) != 0) continue;
        if (a.single_word) {
          size_t n = 0;
          const size_t e = i + a.content.size();
          if (i > 0 && is_word_char(cp_before(s, i))) continue;
          if (e < s.size() && is_word_char(utf8::decode(s, e, &n))) continue;
        }
        hit = &a;
        break;
      }
      if (!hit) {
        const size_t n = utf8::valid_len(s, i);
        i += n ? n : 1;
        continue;
      }
      size_t b = i, e = i + hit->content.size();
      if (hit->lstrip)
        while (b > seg && is_space_byte(s[b - 1])) --b;
      if (hit->rstrip)
        while (e < s.size() && is_space_byte(s[e])) ++e;
      if (b > seg) out.push_back({-1, s.substr(seg, b - seg), it.at_origin && seg == 0});
      out.push_back({hit->id, {}, false});
      seg = i = e;
    }
    if (seg < s.size()) out.push_back({-1, s.substr(seg), it.at_origin && seg == 0});
  }
  items = std::move(out);
}

std::vector<int32_t> HfTokenizer::encode(const std::string& text, bool add_special, bool parse_special) const {
  check_encode_size(text);
  std::vector<int32_t> ids;
  if (add_special) ids = prefix_ids;
  std::vector<Item> items;
  if (!text.empty()) items.push_back({-1, utf8::sanitize(text), true});
  split_added(items, false, parse_special);
  if (normalizer_) {
    for (auto& it : items)
      if (it.id < 0) normalizer_->apply(it.text);
  }
  split_added(items, true, parse_special);
  std::vector<Piece> pieces;
  for (auto& it : items) {
    if (it.id >= 0) {
      ids.push_back(it.id);
      continue;
    }
    if (it.text.empty()) continue;
    pieces.clear();
    pieces.push_back({std::move(it.text), it.at_origin});
    if (pre_) pre_->split(pieces);
    for (const auto& p : pieces) model_->encode_word(p.text, ids);
  }
  if (add_special) ids.insert(ids.end(), suffix_ids.begin(), suffix_ids.end());
  return ids;
}

std::string HfTokenizer::token_piece(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return "";
  return pieces_[id];
}

std::string HfTokenizer::token_bytes(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return "";
  return decoder_->token_bytes(pieces_[id]);
}

bool HfTokenizer::is_special(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < special_.size() && special_[id];
}

int32_t HfTokenizer::token_id(const std::string& piece) const {
  auto it = added_ids_.find(piece);
  if (it != added_ids_.end()) return it->second;
  return model_->id(piece);
}

std::string HfTokenizer::decode(const std::vector<int32_t>& ids, bool skip_special) const {
  std::vector<std::string> toks;
  toks.reserve(ids.size());
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size() || pieces_[id].empty()) continue;  // HF skips unknown ids
    if (skip_special && is_special(id)) continue;
    toks.push_back(pieces_[id]);
  }
  return decoder_->decode(std::move(toks));
}

}  // namespace tf
