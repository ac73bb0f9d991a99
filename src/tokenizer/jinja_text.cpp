#include "tokenizer/jinja_text.h"

#include <stdexcept>

#include <utf8proc.h>

#include "tokenizer/utf8.h"

namespace tf::jinja {

std::vector<char32_t> utf8_decode(const std::string& s) {
  std::vector<char32_t> out;
  out.reserve(s.size());
  size_t k = 0;
  while (k < s.size()) {
    unsigned char c = s[k];
    int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || k + n > s.size()) {
      out.push_back(0xFFFD);  // invalid bytes cannot come from a JSON string; keep going regardless
      ++k;
      continue;
    }
    char32_t cp = n == 1 ? c : (c & (0x7F >> n));
    for (int j = 1; j < n; ++j) cp = (cp << 6) | (static_cast<unsigned char>(s[k + j]) & 0x3F);
    out.push_back(cp);
    k += n;
  }
  return out;
}

void utf8_append(std::string& out, char32_t cp) { utf8::append(out, static_cast<uint32_t>(cp)); }

std::string utf8_encode(const std::vector<char32_t>& cps) {
  std::string out;
  for (char32_t c : cps) utf8_append(out, c);
  return out;
}

size_t utf8_length(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s)
    if ((c & 0xC0) != 0x80) ++n;
  return n;
}

bool py_isspace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

bool py_isprintable(char32_t c) {
  if (c == ' ') return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
    case UTF8PROC_CATEGORY_ZS: return false;
    default: return true;
  }
}

std::string py_strip(const std::string& s, const std::string* chars, bool left, bool right) {
  auto cps = utf8_decode(s);
  std::vector<char32_t> set;
  if (chars) set = utf8_decode(*chars);
  auto strip_me = [&](char32_t c) {
    if (!chars) return py_isspace(c);
    for (char32_t x : set)
      if (x == c) return true;
    return false;
  };
  size_t b = 0, e = cps.size();
  if (left)
    while (b < e && strip_me(cps[b])) ++b;
  if (right)
    while (e > b && strip_me(cps[e - 1])) --e;
  return utf8_encode(std::vector<char32_t>(cps.begin() + b, cps.begin() + e));
}

std::string rstrip_ws(const std::string& s) { return py_strip(s, nullptr, false, true); }

std::vector<std::string> py_split(const std::string& s, const std::string* sep, int64_t maxsplit, bool from_right) {
  std::vector<std::string> out;
  if (sep) {
    if (sep->empty()) throw std::invalid_argument("empty separator");
    if (!from_right) {
      size_t pos = 0;
      while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
        size_t f = s.find(*sep, pos);
        if (f == std::string::npos) break;
        out.push_back(s.substr(pos, f - pos));
        pos = f + sep->size();
      }
      out.push_back(s.substr(pos));
    } else {
      size_t end = s.size();
      std::vector<std::string> rev;
      while (maxsplit < 0 || static_cast<int64_t>(rev.size()) < maxsplit) {
        if (end < sep->size()) break;
        size_t f = s.rfind(*sep, end - sep->size());
        if (f == std::string::npos) break;
        rev.push_back(s.substr(f + sep->size(), end - f - sep->size()));
        end = f;
      }
      rev.push_back(s.substr(0, end));
      out.assign(rev.rbegin(), rev.rend());
    }
    return out;
  }
  auto cps = utf8_decode(s);
  if (!from_right) {
    size_t k = 0, n = cps.size();
    while (true) {
      while (k < n && py_isspace(cps[k])) ++k;
      if (k >= n) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) >= maxsplit) {
        out.push_back(utf8_encode({cps.begin() + k, cps.end()}));  // the remainder keeps its trailing spaces
        break;
      }
      size_t b = k;
      while (k < n && !py_isspace(cps[k])) ++k;
      out.push_back(utf8_encode({cps.begin() + b, cps.begin() + k}));
    }
  } else {
    size_t k = cps.size();
    std::vector<std::string> rev;
    while (true) {
      while (k > 0 && py_isspace(cps[k - 1])) --k;
      if (k == 0) break;
      if (maxsplit >= 0 && static_cast<int64_t>(rev.size()) >= maxsplit) {
        rev.push_back(utf8_encode({cps.begin(), cps.begin() + k}));  // the remainder keeps its leading spaces
        break;
      }
      size_t e = k;
      while (k > 0 && !py_isspace(cps[k - 1])) --k;
      rev.push_back(utf8_encode({cps.begin() + k, cps.begin() + e}));
    }
    out.assign(rev.rbegin(), rev.rend());
  }
  return out;
}

std::string py_replace(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
  std::string out;
  if (from.empty()) {
    // Python inserts the replacement between every code point and at both ends.
    auto cps = utf8_decode(s);
    int64_t done = 0;
    for (size_t k = 0; k <= cps.size(); ++k) {
      if (count < 0 || done < count) {
        out += to;
        ++done;
      }
      if (k < cps.size()) utf8_append(out, cps[k]);
    }
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    size_t f = s.find(from, pos);
    if (f == std::string::npos) break;
    out.append(s, pos, f - pos);
    out += to;
    pos = f + from.size();
    ++done;
  }
  out.append(s, pos, std::string::npos);
  return out;
}

namespace {
bool is_cased_letter(char32_t c) {
  auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT;
}
char32_t up(char32_t c) { return static_cast<char32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(c))); }
char32_t low(char32_t c) { return static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))); }
}  // namespace

namespace {
// Python's unconditional SpecialCasing: characters whose upper or title case is more than one character.
struct FullCase {
  char32_t c;
  const char* upper;
  const char* title;
};
constexpr FullCase kFullCase[] = {
    {0x00DF, "SS", "Ss"},  {0x0149, "\u02BCN", "\u02BCN"}, {0x01F0, "J\u030C", "J\u030C"},
    {0x0587, "\u0535\u0552", "\u0535\u0582"}, {0x1E96, "H\u0331", "H\u0331"}, {0x1E97, "T\u0308", "T\u0308"},
    {0x1E98, "W\u030A", "W\u030A"}, {0x1E99, "Y\u030A", "Y\u030A"}, {0x1E9A, "A\u02BE", "A\u02BE"},
    {0xFB00, "FF", "Ff"},  {0xFB01, "FI", "Fi"}, {0xFB02, "FL", "Fl"}, {0xFB03, "FFI", "Ffi"},
    {0xFB04, "FFL", "Ffl"}, {0xFB05, "ST", "St"}, {0xFB06, "ST", "St"},
};

const FullCase* full_case(char32_t c) {
  for (const auto& f : kFullCase)
    if (f.c == c) return &f;
  return nullptr;
}

void append_upper(std::string& out, char32_t c, bool title) {
  if (const FullCase* f = full_case(c)) {
    out += title ? f->title : f->upper;
    return;
  }
  utf8_append(out, title ? static_cast<char32_t>(utf8proc_totitle(static_cast<utf8proc_int32_t>(c))) : up(c));
}

void append_lower(std::string& out, char32_t c) {
  if (c == 0x0130) {
    out += "i\u0307";  // İ lowers to i + combining dot above
    return;
  }
  utf8_append(out, low(c));
}
}  // namespace

std::string py_upper(const std::string& s) {
  std::string out;
  for (char32_t c : utf8_decode(s)) append_upper(out, c, false);
  return out;
}

std::string py_lower(const std::string& s) {
  std::string out;
  for (char32_t c : utf8_decode(s)) append_lower(out, c);
  return out;
}

std::string py_casefold(const std::string& s) {
  std::string out;
  for (char32_t c : utf8_decode(s)) {
    if (c == 0x00DF) out += "ss";
    else if (const FullCase* f = full_case(c)) out += py_lower(f->upper);
    else append_lower(out, c);
  }
  return out;
}

std::string py_swapcase(const std::string& s) {
  std::string out;
  for (char32_t c : utf8_decode(s)) {
    if (low(c) != c || c == 0x0130) append_lower(out, c);
    else append_upper(out, c, false);
  }
  return out;
}

std::string py_title(const std::string& s) {
  std::string out;
  bool prev_cased = false;
  for (char32_t c : utf8_decode(s)) {
    bool cased = is_cased_letter(c);
    if (!cased) utf8_append(out, c);
    else if (prev_cased) append_lower(out, c);
    else append_upper(out, c, true);
    prev_cased = cased;
  }
  return out;
}

std::string py_capitalize(const std::string& s) {
  std::string out;
  bool first = true;
  for (char32_t c : utf8_decode(s)) {
    if (first) append_upper(out, c, true);
    else append_lower(out, c);
    first = false;
  }
  return out;
}

std::string jinja_title(const std::string& s) {
  // jinja2 splits on runs of [-\s({[<] and upper-cases the first character of each piece.
  auto is_sep = [](char32_t c) { return c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || py_isspace(c); };
  std::string out;
  bool start = true;
  for (char32_t c : utf8_decode(s)) {
    if (is_sep(c)) {
      utf8_append(out, c);
      start = true;
      continue;
    }
    if (start) append_upper(out, c, false);
    else append_lower(out, c);
    start = false;
  }
  return out;
}

int64_t py_count(const std::string& s, const std::string& sub) {
  if (sub.empty()) return static_cast<int64_t>(utf8_length(s)) + 1;
  int64_t n = 0;
  for (size_t pos = s.find(sub); pos != std::string::npos; pos = s.find(sub, pos + sub.size())) ++n;
  return n;
}

int64_t py_find(const std::string& s, const std::string& sub) {
  size_t f = s.find(sub);
  if (f == std::string::npos) return -1;
  return static_cast<int64_t>(utf8_length(s.substr(0, f)));
}

std::string unescape_python(const std::string& raw, const std::function<void(const std::string&)>& on_error) {
  std::string out;
  auto hex = [&](size_t& k, int n) -> char32_t {
    char32_t v = 0;
    for (int j = 0; j < n; ++j) {
      if (k >= raw.size() || !isxdigit(static_cast<unsigned char>(raw[k]))) on_error("truncated \\x, \\u or \\U escape");
      char c = raw[k++];
      v = v * 16 + static_cast<char32_t>(isdigit(static_cast<unsigned char>(c)) ? c - '0' : (tolower(c) - 'a' + 10));
    }
    return v;
  };
  for (size_t k = 0; k < raw.size();) {
    char c = raw[k];
    if (c != '\\' || k + 1 >= raw.size()) {
      out += c;
      ++k;
      continue;
    }
    char e = raw[k + 1];
    k += 2;
    switch (e) {
      case '\n': break;
      case '\\': out += '\\'; break;
      case '\'': out += '\''; break;
      case '"': out += '"'; break;
      case 'a': out += '\a'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      case 't': out += '\t'; break;
      case 'v': out += '\v'; break;
      case 'N': on_error("\\N{name} escapes are not supported"); break;  // refusing beats printing them raw
      case 'x': utf8_append(out, hex(k, 2)); break;
      case 'u': utf8_append(out, hex(k, 4)); break;
      case 'U': {
        char32_t v = hex(k, 8);
        if (v > 0x10FFFF) on_error("illegal Unicode character in \\U escape");
        utf8_append(out, v);
        break;
      }
      default:
        if (e >= '0' && e <= '7') {
          char32_t v = static_cast<char32_t>(e - '0');
          for (int j = 0; j < 2 && k < raw.size() && raw[k] >= '0' && raw[k] <= '7'; ++j)
            v = v * 8 + static_cast<char32_t>(raw[k++] - '0');
          utf8_append(out, v);
        } else {
          out += '\\';  // unknown escapes stay as written, as in Python
          out += e;
        }
    }
  }
  return out;
}

}  // namespace tf::jinja
