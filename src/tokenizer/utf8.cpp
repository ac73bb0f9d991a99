#include "tokenizer/utf8.h"

namespace tf::utf8 {

size_t lead_len(unsigned char c) {
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return 2;
  if (c >= 0xE0 && c <= 0xEF) return 3;
  if (c >= 0xF0 && c <= 0xF4) return 4;
  return 1;
}

namespace {

// Count of leading bytes at pos that form a valid prefix of some sequence (1..4), and
// whether that prefix is already a complete sequence.
size_t valid_prefix(std::string_view s, size_t pos, bool* complete) {
  const auto c = static_cast<unsigned char>(s[pos]);
  *complete = false;
  if (c < 0x80) {
    *complete = true;
    return 1;
  }
  size_t need = 0;
  unsigned char lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) {
    need = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    need = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    need = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  size_t n = 1;
  for (; n < need && pos + n < s.size(); ++n) {
    const auto b = static_cast<unsigned char>(s[pos + n]);
    const unsigned char l = n == 1 ? lo : 0x80, h = n == 1 ? hi : 0xBF;
    if (b < l || b > h) return n;
  }
  *complete = n == need;
  return n;
}

}  // namespace

size_t valid_len(std::string_view s, size_t pos) {
  if (pos >= s.size()) return 0;
  bool complete = false;
  const size_t n = valid_prefix(s, pos, &complete);
  return complete ? n : 0;
}

bool is_valid(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const size_t n = valid_len(s, i);
    if (!n) return false;
    i += n;
  }
  return true;
}

std::string sanitize(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    bool complete = false;
    const size_t n = valid_prefix(s, i, &complete);
    if (complete) {
      out.append(s.substr(i, n));
      i += n;
    } else {
      out.append("\xEF\xBF\xBD");
      i += n ? n : 1;
    }
  }
  return out;
}

size_t incomplete_tail(std::string_view s) {
  // A sequence is at most 4 bytes, so only the last 3 bytes can start an unfinished one.
  const size_t lim = s.size() < 3 ? s.size() : 3;
  for (size_t k = 1; k <= lim; ++k) {
    const size_t pos = s.size() - k;
    const auto c = static_cast<unsigned char>(s[pos]);
    if ((c & 0xC0) == 0x80) continue;
    bool complete = false;
    const size_t n = valid_prefix(s, pos, &complete);
    return (!complete && n == k && lead_len(c) > k) ? k : 0;
  }
  return 0;
}

uint32_t decode(std::string_view s, size_t pos, size_t* len) {
  const auto c = static_cast<unsigned char>(s[pos]);
  const size_t n = valid_len(s, pos);
  if (n == 0) {
    *len = 1;
    return 0xFFFD;
  }
  *len = n;
  if (n == 1) return c;
  uint32_t cp = c & (0x7F >> n);
  for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[pos + k]) & 0x3F);
  return cp;
}

void append(std::string& out, uint32_t cp) {
  if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) cp = 0xFFFD;
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

int parse_byte_token(std::string_view t) {
  if (t.size() != 6 || t.substr(0, 3) != "<0x" || t[5] != '>') return -1;
  int v = 0;
  for (size_t k = 3; k < 5; ++k) {
    const char c = t[k];
    int d = -1;
    if (c >= '0' && c <= '9') d = c - '0';
    else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
    if (d < 0) return -1;
    v = v * 16 + d;
  }
  return v;
}

}  // namespace tf::utf8
