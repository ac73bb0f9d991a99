#include "tokenizer/pre_tokenizer.h"

#include <algorithm>
#include <array>
#include <functional>

#include "base/error.h"
#include "tokenizer/regex.h"
#include "tokenizer/utf8.h"

namespace tf {

const char* const kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
const char* const kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

namespace {

struct ByteMap {
  std::array<std::string, 256> to_char;
  std::array<int, 512> to_byte;
  ByteMap() {
    to_byte.fill(-1);
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
      const uint32_t cp = printable ? static_cast<uint32_t>(b) : static_cast<uint32_t>(256 + n++);
      utf8::append(to_char[b], cp);
      to_byte[cp] = b;
    }
  }
};

const ByteMap& byte_map() {
  static const ByteMap m;
  return m;
}

}  // namespace

const std::string& byte_to_unicode(unsigned char b) { return byte_map().to_char[b]; }
int unicode_to_byte(uint32_t cp) { return cp < 512 ? byte_map().to_byte[cp] : -1; }

namespace {

using nlohmann::json;
enum class Behavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

struct Span {
  size_t b, e;
  bool is_match;
};

// Whole-string cover of matches and gaps, as HF's Pattern::find_matches gives it.
std::vector<Span> cover(const std::string& s, const std::vector<std::pair<size_t, size_t>>& m) {
  std::vector<Span> out;
  if (s.empty()) return {{0, 0, false}};
  size_t prev = 0;
  for (auto [b, e] : m) {
    if (prev != b) out.push_back({prev, b, false});
    out.push_back({b, e, true});
    prev = e;
  }
  if (prev != s.size()) out.push_back({prev, s.size(), false});
  return out;
}

// HF's NormalizedString::split for one behavior; empty results are dropped.
std::vector<std::pair<size_t, size_t>> apply_behavior(std::vector<Span> m, Behavior beh, bool invert) {
  if (invert)
    for (auto& x : m) x.is_match = !x.is_match;
  std::vector<std::pair<size_t, size_t>> r;
  switch (beh) {
    case Behavior::Isolated:
      for (auto& x : m) r.emplace_back(x.b, x.e);
      break;
    case Behavior::Removed:
      for (auto& x : m)
        if (!x.is_match) r.emplace_back(x.b, x.e);
      break;
    case Behavior::Contiguous: {
      bool prev = false;
      for (auto& x : m) {
        if (x.is_match == prev && !r.empty()) r.back().second = x.e;
        else r.emplace_back(x.b, x.e);
        prev = x.is_match;
      }
      break;
    }
    case Behavior::MergedWithPrevious: {
      bool prev = false;
      for (auto& x : m) {
        if (x.is_match && !prev && !r.empty()) r.back().second = x.e;
        else r.emplace_back(x.b, x.e);
        prev = x.is_match;
      }
      break;
    }
    case Behavior::MergedWithNext: {
      bool prev = false;
      for (size_t k = m.size(); k-- > 0;) {
        const auto& x = m[k];
        if (x.is_match && !prev && !r.empty()) r.back().first = x.b;
        else r.emplace_back(x.b, x.e);
        prev = x.is_match;
      }
      std::reverse(r.begin(), r.end());
      break;
    }
  }
  std::vector<std::pair<size_t, size_t>> out;
  for (auto& p : r)
    if (p.second > p.first) out.push_back(p);
  return out;
}

using Finder = std::function<std::vector<std::pair<size_t, size_t>>(const std::string&)>;

void split_all(std::vector<Piece>& pieces, const Finder& find, Behavior beh, bool invert) {
  std::vector<Piece> out;
  out.reserve(pieces.size());
  for (auto& p : pieces) {
    for (auto [b, e] : apply_behavior(cover(p.text, find(p.text)), beh, invert))
      out.push_back({p.text.substr(b, e - b), p.at_origin && b == 0});
  }
  pieces = std::move(out);
}

Behavior parse_behavior(const json& j) {
  const std::string s = j.is_string() ? j.get<std::string>() : "";
  if (s == "Removed") return Behavior::Removed;
  if (s == "Isolated") return Behavior::Isolated;
  if (s == "MergedWithPrevious") return Behavior::MergedWithPrevious;
  if (s == "MergedWithNext") return Behavior::MergedWithNext;
  if (s == "Contiguous") return Behavior::Contiguous;
  fail("tokenizer.json: Split behavior '", s, "' is not supported");
}

Finder literal_finder(const std::string& lit) {
  return [lit](const std::string& s) {
    std::vector<std::pair<size_t, size_t>> m;
    if (lit.empty()) return m;
    for (size_t p = s.find(lit); p != std::string::npos; p = s.find(lit, p + lit.size()))
      m.emplace_back(p, p + lit.size());
    return m;
  };
}

Finder regex_finder(const std::string& pattern) {
  auto re = std::make_shared<Regex>(pattern);
  return [re](const std::string& s) { return re->find_all(s); };
}

class ByteLevelPre : public PreTokenizer {
 public:
  ByteLevelPre(bool prefix, bool use_regex) : prefix_(prefix) {
    if (use_regex) re_ = regex_finder(kGpt2Pattern);
  }
  void split(std::vector<Piece>& pieces) const override {
    if (prefix_)
      for (auto& p : pieces)
        if (p.text.empty() || p.text[0] != ' ') p.text.insert(0, " ");
    if (re_) split_all(pieces, re_, Behavior::Isolated, false);
    for (auto& p : pieces) {
      std::string m;
      m.reserve(p.text.size() * 2);
      for (unsigned char c : p.text) m += byte_to_unicode(c);
      p.text = std::move(m);
    }
  }

 private:
  bool prefix_;
  Finder re_;
};

class SplitPre : public PreTokenizer {
 public:
  SplitPre(Finder f, Behavior b, bool inv) : f_(std::move(f)), b_(b), inv_(inv) {}
  void split(std::vector<Piece>& pieces) const override { split_all(pieces, f_, b_, inv_); }

 private:
  Finder f_;
  Behavior b_;
  bool inv_;
};

class MetaspacePre : public PreTokenizer {
 public:
  MetaspacePre(std::string rep, std::string scheme, bool split)
      : rep_(std::move(rep)), scheme_(std::move(scheme)), split_(split) {}
  void split(std::vector<Piece>& pieces) const override {
    for (auto& p : pieces) {
      std::string t;
      for (char c : p.text) {
        if (c == ' ') t += rep_;
        else t += c;
      }
      const bool starts = t.compare(0, rep_.size(), rep_) == 0;
      if (!starts && (scheme_ == "always" || (scheme_ == "first" && p.at_origin))) t.insert(0, rep_);
      p.text = std::move(t);
    }
    if (split_) split_all(pieces, literal_finder(rep_), Behavior::MergedWithNext, false);
  }

 private:
  std::string rep_, scheme_;
  bool split_;
};

class SequencePre : public PreTokenizer {
 public:
  explicit SequencePre(std::vector<std::unique_ptr<PreTokenizer>> v) : v_(std::move(v)) {}
  void split(std::vector<Piece>& pieces) const override {
    for (const auto& p : v_) p->split(pieces);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> v_;
};

}  // namespace

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const json& j) {
  if (j.is_null()) return nullptr;
  TF_CHECK(j.is_object() && j.contains("type") && j["type"].is_string(),
           "tokenizer.json: pre_tokenizer needs a string 'type'");
  const std::string type = j["type"].get<std::string>();
  if (type == "ByteLevel")
    return std::make_unique<ByteLevelPre>(j.value("add_prefix_space", true), j.value("use_regex", true));
  if (type == "Split") {
    TF_CHECK(j.contains("pattern") && j["pattern"].is_object(),
             "tokenizer.json: Split pre_tokenizer needs a 'pattern' object");
    const auto& pat = j["pattern"];
    Finder f;
    if (pat.contains("String") && pat["String"].is_string()) f = literal_finder(pat["String"].get<std::string>());
    else if (pat.contains("Regex") && pat["Regex"].is_string()) f = regex_finder(pat["Regex"].get<std::string>());
    else fail("tokenizer.json: Split pattern needs a String or Regex");
    return std::make_unique<SplitPre>(std::move(f), parse_behavior(j.value("behavior", json("Isolated"))),
                                      j.value("invert", false));
  }
  if (type == "Digits") {
    const bool individual = j.value("individual_digits", false);
    return std::make_unique<SplitPre>(regex_finder("\\p{N}"),
                                      individual ? Behavior::Isolated : Behavior::Contiguous, false);
  }
  if (type == "Metaspace") {
    std::string rep = j.contains("replacement") && j["replacement"].is_string()
                          ? j["replacement"].get<std::string>() : "\xE2\x96\x81";
    std::string scheme = "always";
    if (j.contains("prepend_scheme") && j["prepend_scheme"].is_string()) scheme = j["prepend_scheme"].get<std::string>();
    else if (j.contains("add_prefix_space") && j["add_prefix_space"].is_boolean())
      scheme = j["add_prefix_space"].get<bool>() ? "always" : "never";
    TF_CHECK(scheme == "always" || scheme == "first" || scheme == "never",
             "tokenizer.json: Metaspace prepend_scheme '", scheme, "' is not supported");
    TF_CHECK(utf8::is_valid(rep) && !rep.empty(), "tokenizer.json: Metaspace replacement is not one character");
    return std::make_unique<MetaspacePre>(rep, scheme, j.value("split", true));
  }
  if (type == "WhitespaceSplit")
    return std::make_unique<SplitPre>(regex_finder("\\s+"), Behavior::Removed, false);
  if (type == "Whitespace")
    return std::make_unique<SplitPre>(regex_finder("\\w+|[^\\w\\s]+"), Behavior::Removed, true);
  if (type == "Sequence") {
    TF_CHECK(j.contains("pretokenizers") && j["pretokenizers"].is_array(),
             "tokenizer.json: Sequence pre_tokenizer needs a 'pretokenizers' array");
    std::vector<std::unique_ptr<PreTokenizer>> v;
    for (const auto& e : j["pretokenizers"])
      if (auto p = make_pre_tokenizer(e)) v.push_back(std::move(p));
    return std::make_unique<SequencePre>(std::move(v));
  }
  fail("tokenizer.json: pre_tokenizer type '", type, "' is not supported");
}

}  // namespace tf
