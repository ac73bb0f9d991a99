#include "tokenizer/hf_decoder.h"

#include "base/error.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/utf8.h"

namespace tf {

namespace {

std::string replace_all(const std::string& s, const std::string& from, const std::string& to) {
  if (from.empty()) return s;
  std::string out;
  size_t prev = 0;
  for (size_t p = s.find(from); p != std::string::npos; p = s.find(from, p + from.size())) {
    out.append(s, prev, p - prev);
    out += to;
    prev = p + from.size();
  }
  out.append(s, prev);
  return out;
}

// HF's ByteLevel decoder maps a token's chars to bytes, or keeps the token as is when one
// char lies outside the byte map.
std::string byte_level_bytes(const std::string& t) {
  std::string out;
  for (size_t i = 0; i < t.size();) {
    size_t n = 0;
    const int b = unicode_to_byte(utf8::decode(t, i, &n));
    if (b < 0) return t;
    out += static_cast<char>(b);
    i += n;
  }
  return out;
}

}  // namespace

HfDecoder::HfDecoder(const nlohmann::json& j) {
  if (j.is_null()) {
    none_ = true;
    return;
  }
  parse(j);
}

void HfDecoder::parse(const nlohmann::json& j) {
  TF_CHECK(j.is_object() && j.contains("type") && j["type"].is_string(),
           "tokenizer.json: decoder needs a string 'type'");
  const std::string type = j["type"].get<std::string>();
  Step s{};
  if (type == "Sequence") {
    TF_CHECK(j.contains("decoders") && j["decoders"].is_array(),
             "tokenizer.json: Sequence decoder needs a 'decoders' array");
    for (const auto& d : j["decoders"]) parse(d);
    return;
  } else if (type == "ByteLevel") {
    s.kind = Step::ByteLevel;
  } else if (type == "Metaspace") {
    s.kind = Step::Metaspace;
    s.a = j.contains("replacement") && j["replacement"].is_string() ? j["replacement"].get<std::string>()
                                                                     : "\xE2\x96\x81";
    std::string scheme = "always";
    if (j.contains("prepend_scheme") && j["prepend_scheme"].is_string()) scheme = j["prepend_scheme"].get<std::string>();
    else if (j.contains("add_prefix_space") && j["add_prefix_space"].is_boolean())
      scheme = j["add_prefix_space"].get<bool>() ? "always" : "never";
    s.first_strips = scheme != "never";
    drops_first_space_ = drops_first_space_ || s.first_strips;
  } else if (type == "Replace") {
    s.kind = Step::Replace;
    const auto& p = j.contains("pattern") ? j["pattern"] : nlohmann::json();
    TF_CHECK(p.is_object() && p.contains("String") && p["String"].is_string(),
             "tokenizer.json: Replace decoder supports only a String pattern");
    s.a = p["String"].get<std::string>();
    TF_CHECK(j.contains("content") && j["content"].is_string(), "tokenizer.json: Replace decoder needs 'content'");
    s.b = j["content"].get<std::string>();
  } else if (type == "ByteFallback") {
    s.kind = Step::ByteFallback;
  } else if (type == "Fuse") {
    s.kind = Step::Fuse;
  } else if (type == "Strip") {
    s.kind = Step::Strip;
    s.a = j.value("content", std::string(" "));
    s.start = j.value("start", 0);
    s.stop = j.value("stop", 0);
    TF_CHECK(s.start >= 0 && s.stop >= 0 && utf8::is_valid(s.a),
             "tokenizer.json: Strip decoder has a bad content/start/stop");
    if (s.a == " " && s.start > 0) drops_first_space_ = true;
  } else {
    fail("tokenizer.json: decoder type '", type, "' is not supported");
  }
  steps_.push_back(s);
}

std::string HfDecoder::decode(std::vector<std::string> toks) const {
  if (none_) {
    std::string out;
    for (size_t k = 0; k < toks.size(); ++k) out += (k ? " " : "") + toks[k];
    return out;
  }
  for (const auto& s : steps_) {
    std::vector<std::string> next;
    switch (s.kind) {
      case Step::ByteLevel: {
        std::string bytes;
        for (const auto& t : toks) bytes += byte_level_bytes(t);
        next.push_back(utf8::sanitize(bytes));
        break;
      }
      case Step::Metaspace:
        for (size_t k = 0; k < toks.size(); ++k)
          next.push_back(replace_all(toks[k], s.a, (k == 0 && s.first_strips) ? "" : " "));
        break;
      case Step::Replace:
        for (const auto& t : toks) next.push_back(replace_all(t, s.a, s.b));
        break;
      case Step::ByteFallback: {
        std::string pending;
        size_t count = 0;
        auto flush = [&] {
          if (!count) return;
          if (utf8::is_valid(pending)) next.push_back(pending);
          else for (size_t k = 0; k < count; ++k) next.push_back("\xEF\xBF\xBD");
          pending.clear();
          count = 0;
        };
        for (const auto& t : toks) {
          const int b = utf8::parse_byte_token(t);
          if (b >= 0) {
            pending += static_cast<char>(b);
            ++count;
          } else {
            flush();
            next.push_back(t);
          }
        }
        flush();
        break;
      }
      case Step::Fuse: {
        std::string all;
        for (const auto& t : toks) all += t;
        next.push_back(std::move(all));
        break;
      }
      case Step::Strip:
        for (const auto& t : toks) {
          size_t b = 0, e = t.size();
          for (int k = 0; k < s.start && t.compare(b, s.a.size(), s.a) == 0 && b < e; ++k) b += s.a.size();
          for (int k = 0; k < s.stop && e >= b + s.a.size() && t.compare(e - s.a.size(), s.a.size(), s.a) == 0; ++k)
            e -= s.a.size();
          next.push_back(t.substr(b, e - b));
        }
        break;
    }
    toks = std::move(next);
  }
  std::string out;
  for (const auto& t : toks) out += t;
  return out;
}

std::string HfDecoder::token_bytes(const std::string& token) const {
  if (none_) return token;
  std::string t = token;
  for (const auto& s : steps_) {
    switch (s.kind) {
      case Step::ByteLevel: t = byte_level_bytes(t); break;
      case Step::Metaspace: t = replace_all(t, s.a, " "); break;
      case Step::Replace: t = replace_all(t, s.a, s.b); break;
      case Step::ByteFallback: {
        const int b = utf8::parse_byte_token(t);
        if (b >= 0) t = std::string(1, static_cast<char>(b));
        break;
      }
      case Step::Fuse:
      case Step::Strip: break;  // sequence-level steps; drops_first_space covers Strip
    }
  }
  return t;
}

}  // namespace tf
