#include "tokenizer/normalizer.h"

#include <cstdlib>
#include <vector>

#include <utf8proc.h>

#include "base/error.h"
#include "tokenizer/regex.h"
#include "tokenizer/utf8.h"

namespace tf {

std::string unicode_normalize(const std::string& s, const std::string& form) {
  int opts = UTF8PROC_STABLE;
  if (form == "NFC") opts |= UTF8PROC_COMPOSE;
  else if (form == "NFD") opts |= UTF8PROC_DECOMPOSE;
  else if (form == "NFKC") opts |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
  else if (form == "NFKD") opts |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
  else fail("tokenizer.json: unknown normal form '", form, "'");
  utf8proc_uint8_t* out = nullptr;
  const auto n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                              static_cast<utf8proc_ssize_t>(s.size()), &out,
                              static_cast<utf8proc_option_t>(opts));
  if (n < 0) {
    std::free(out);
    fail("tokenizer normalizer ", form, ": ", utf8proc_errmsg(n));
  }
  std::string r(reinterpret_cast<char*>(out), static_cast<size_t>(n));
  std::free(out);
  return r;
}

namespace {

using nlohmann::json;

std::string str_field(const json& j, const char* key, const std::string& fallback = "") {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  TF_CHECK(j[key].is_string(), "tokenizer.json: normalizer field '", key, "' is not a string");
  return j[key].get<std::string>();
}

class UnicodeForm : public Normalizer {
 public:
  explicit UnicodeForm(std::string f) : form_(std::move(f)) {}
  void apply(std::string& s) const override { s = unicode_normalize(s, form_); }

 private:
  std::string form_;
};

class Lowercase : public Normalizer {
 public:
  void apply(std::string& s) const override {
    std::string out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size();) {
      size_t n = 0;
      const uint32_t cp = utf8::decode(s, i, &n);
      i += n;
      // Rust's char::to_lowercase maps U+0130 to two code points; utf8proc's simple map does not.
      if (cp == 0x130) {
        out += "i\xCC\x87";
        continue;
      }
      utf8::append(out, static_cast<uint32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp))));
    }
    s = std::move(out);
  }
};

class Prepend : public Normalizer {
 public:
  explicit Prepend(std::string p) : p_(std::move(p)) {}
  void apply(std::string& s) const override {
    if (!s.empty()) s = p_ + s;
  }

 private:
  std::string p_;
};

class Replace : public Normalizer {
 public:
  Replace(const json& pattern, std::string content) : content_(std::move(content)) {
    TF_CHECK(pattern.is_object(), "tokenizer.json: Replace pattern is not an object");
    if (pattern.contains("String")) {
      literal_ = pattern["String"].get<std::string>();
      is_literal_ = true;
    } else if (pattern.contains("Regex")) {
      re_ = std::make_unique<Regex>(pattern["Regex"].get<std::string>());
    } else {
      fail("tokenizer.json: Replace pattern needs String or Regex");
    }
  }
  void apply(std::string& s) const override {
    std::vector<std::pair<size_t, size_t>> m;
    if (is_literal_) {
      if (literal_.empty()) return;
      for (size_t p = s.find(literal_); p != std::string::npos; p = s.find(literal_, p + literal_.size()))
        m.emplace_back(p, p + literal_.size());
    } else {
      m = re_->find_all(s);
    }
    if (m.empty()) return;
    std::string out;
    size_t prev = 0;
    for (auto [b, e] : m) {
      out.append(s, prev, b - prev);
      out += content_;
      prev = e;
    }
    out.append(s, prev);
    s = std::move(out);
  }

 private:
  std::string content_, literal_;
  bool is_literal_ = false;
  std::unique_ptr<Regex> re_;
};

bool is_white_space(uint32_t cp) {
  // Unicode White_Space, which is what Rust's char::is_whitespace tests.
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

class Strip : public Normalizer {
 public:
  Strip(bool l, bool r) : left_(l), right_(r) {}
  void apply(std::string& s) const override {
    size_t b = 0, e = s.size();
    if (left_) {
      while (b < e) {
        size_t n = 0;
        if (!is_white_space(utf8::decode(s, b, &n))) break;
        b += n;
      }
    }
    if (right_) {
      while (e > b) {
        size_t start = e - 1;
        while (start > b && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
        size_t n = 0;
        if (!is_white_space(utf8::decode(s, start, &n))) break;
        e = start;
      }
    }
    s = s.substr(b, e - b);
  }

 private:
  bool left_, right_;
};

class StripAccents : public Normalizer {
 public:
  void apply(std::string& s) const override {
    std::string out;
    for (size_t i = 0; i < s.size();) {
      size_t n = 0;
      const uint32_t cp = utf8::decode(s, i, &n);
      if (utf8proc_category(static_cast<utf8proc_int32_t>(cp)) != UTF8PROC_CATEGORY_MN)
        out.append(s, i, n);
      i += n;
    }
    s = std::move(out);
  }
};

class Sequence : public Normalizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<Normalizer>> v) : v_(std::move(v)) {}
  void apply(std::string& s) const override {
    for (const auto& n : v_) n->apply(s);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> v_;
};

}  // namespace

std::unique_ptr<Normalizer> make_normalizer(const json& j) {
  if (j.is_null()) return nullptr;
  TF_CHECK(j.is_object() && j.contains("type") && j["type"].is_string(),
           "tokenizer.json: normalizer needs a string 'type'");
  const std::string type = j["type"].get<std::string>();
  if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD")
    return std::make_unique<UnicodeForm>(type);
  if (type == "Lowercase") return std::make_unique<Lowercase>();
  if (type == "Prepend") return std::make_unique<Prepend>(str_field(j, "prepend"));
  if (type == "Replace") {
    TF_CHECK(j.contains("pattern"), "tokenizer.json: Replace normalizer has no 'pattern'");
    return std::make_unique<Replace>(j["pattern"], str_field(j, "content"));
  }
  if (type == "Strip")
    return std::make_unique<Strip>(j.value("strip_left", true), j.value("strip_right", true));
  if (type == "StripAccents") return std::make_unique<StripAccents>();
  if (type == "Sequence") {
    TF_CHECK(j.contains("normalizers") && j["normalizers"].is_array(),
             "tokenizer.json: Sequence normalizer needs a 'normalizers' array");
    std::vector<std::unique_ptr<Normalizer>> v;
    for (const auto& e : j["normalizers"])
      if (auto n = make_normalizer(e)) v.push_back(std::move(n));
    return std::make_unique<Sequence>(std::move(v));
  }
  fail("tokenizer.json: normalizer type '", type, "' is not supported");
}

}  // namespace tf
