#include "tokenizer/jinja_lexer.h"

#include <cstring>

#include "base/error.h"
#include "tokenizer/jinja_text.h"

namespace tf::jinja {

std::string normalize_source(const std::string& source) {
  std::string out;
  out.reserve(source.size());
  for (size_t k = 0; k < source.size(); ++k) {
    if (source[k] == '\r') {
      out += '\n';
      if (k + 1 < source.size() && source[k + 1] == '\n') ++k;
    } else {
      out += source[k];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

std::string source_location(const std::string& source, size_t pos) {
  size_t line = 1, col = 1;
  for (size_t k = 0; k < pos && k < source.size(); ++k) {
    if (source[k] == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
  return cat("line ", line, ", column ", col);
}

void fail_at(const std::string& source, size_t pos, const std::string& what) {
  fail("chat template: ", source_location(source, pos), ": ", what);
}

namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool is_name_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || static_cast<unsigned char>(c) >= 0x80;
}
bool is_digit(char c) { return c >= '0' && c <= '9'; }

class Lexer {
 public:
  explicit Lexer(const std::string& src) : src_(src) {}

  std::vector<Token> run() {
    size_t pos = 0;
    bool line_starting = true;
    while (pos < src_.size()) {
      size_t start = find_tag(pos);
      std::string text = src_.substr(pos, start - pos);
      if (start == src_.size()) {
        emit_data(text, pos);
        break;
      }
      char kind = src_[start + 1];  // '{', '%' or '#'
      char mod = start + 2 < src_.size() ? src_[start + 2] : '\0';
      strip_before(text, kind, mod, line_starting);
      emit_data(text, pos);
      size_t body = start + 2 + ((mod == '-' || mod == '+') ? 1 : 0);
      if (kind == '#') {
        pos = end_comment(start, body);
      } else if (kind == '%' && is_raw(body)) {
        pos = lex_raw(start, body);
      } else {
        pos = lex_tag(start, body, kind);
      }
      line_starting = pos > 0 && src_[pos - 1] == '\n';
    }
    Token eof;
    eof.type = Token::Type::Eof;
    eof.pos = src_.size();
    out_.push_back(eof);
    return std::move(out_);
  }

 private:
  const std::string& src_;
  std::vector<Token> out_;

  size_t find_tag(size_t pos) const {
    for (size_t k = pos; k + 1 < src_.size(); ++k)
      if (src_[k] == '{' && (src_[k + 1] == '{' || src_[k + 1] == '%' || src_[k + 1] == '#')) return k;
    return src_.size();
  }

  // '-' strips all whitespace before the tag; lstrip_blocks strips indentation before {% and {#.
  static void strip_before(std::string& text, char kind, char mod, bool line_starting) {
    if (mod == '-') {
      text = rstrip_ws(text);
    } else if (mod != '+' && kind != '{') {
      size_t nl = text.rfind('\n');
      size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
      if (l_pos > 0 || line_starting) {
        bool blank = true;
        for (size_t k = l_pos; k < text.size(); ++k)
          if (!is_space(text[k])) blank = false;
        if (blank) text.resize(l_pos);
      }
    }
  }

  void emit_data(const std::string& text, size_t pos) {
    if (text.empty()) return;
    Token t;
    t.type = Token::Type::Data;
    t.text = text;
    t.pos = pos;
    out_.push_back(std::move(t));
  }

  // Position after a block or comment end: '-' eats following whitespace, plain ends eat one newline.
  size_t after_end(size_t end_pos, char mod, bool trim) const {
    if (mod == '-') {
      while (end_pos < src_.size() && is_space(src_[end_pos])) ++end_pos;
    } else if (mod != '+' && trim && end_pos < src_.size() && src_[end_pos] == '\n') {
      ++end_pos;
    }
    return end_pos;
  }

  size_t end_comment(size_t start, size_t body) const {
    size_t e = src_.find("#}", body);
    if (e == std::string::npos) fail_at(src_, start, "missing end of comment tag");
    char mod = (e > body && (src_[e - 1] == '-' || src_[e - 1] == '+')) ? src_[e - 1] : '\0';
    return after_end(e + 2, mod, true);
  }

  // Matches "\s*raw\s*[-]?%}" at body.
  bool is_raw(size_t body) const {
    size_t k = body;
    while (k < src_.size() && is_space(src_[k])) ++k;
    if (src_.compare(k, 3, "raw") != 0) return false;
    k += 3;
    if (k < src_.size() && (is_name_start(src_[k]) || is_digit(src_[k]))) return false;
    while (k < src_.size() && is_space(src_[k])) ++k;
    if (k < src_.size() && src_[k] == '-') ++k;
    return src_.compare(k, 2, "%}") == 0;
  }

  size_t lex_raw(size_t start, size_t body) {
    size_t k = src_.find("%}", body);
    size_t content = k + 2;
    if (src_[k - 1] == '-')
      while (content < src_.size() && is_space(src_[content])) ++content;
    // Find "{%[-+]?\s*endraw\s*[-+]?%}".
    for (size_t s = src_.find("{%", content); s != std::string::npos; s = src_.find("{%", s + 2)) {
      size_t q = s + 2;
      char mod = (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) ? src_[q] : '\0';
      if (mod) ++q;
      while (q < src_.size() && is_space(src_[q])) ++q;
      if (src_.compare(q, 6, "endraw") != 0) continue;
      q += 6;
      while (q < src_.size() && is_space(src_[q])) ++q;
      char emod = '\0';
      if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) emod = src_[q++];
      if (src_.compare(q, 2, "%}") != 0) continue;
      std::string text = src_.substr(content, s - content);
      bool line_starting = content > 0 && src_[content - 1] == '\n';
      strip_before(text, '%', mod, line_starting);
      emit_data(text, content);
      return after_end(q + 2, emod, true);
    }
    fail_at(src_, start, "missing endraw for raw block");
  }

  size_t lex_tag(size_t start, size_t body, char kind) {
    Token open;
    open.type = kind == '{' ? Token::Type::VarBegin : Token::Type::BlockBegin;
    open.pos = start;
    out_.push_back(open);
    const char close = kind == '{' ? '}' : '%';
    int balance = 0;
    size_t k = body;
    while (true) {
      while (k < src_.size() && is_space(src_[k])) ++k;
      if (k >= src_.size()) fail_at(src_, start, kind == '{' ? "unexpected end of template, expected '}}'" : "unexpected end of template, expected '%}'");
      if (balance == 0) {
        char mod = '\0';
        size_t e = k;
        if ((src_[e] == '-' || src_[e] == '+') && e + 2 < src_.size() + 1 && src_.compare(e + 1, 2, std::string(1, close) + "}") == 0) mod = src_[e++];
        if (src_.compare(e, 2, std::string(1, close) + "}") == 0) {
          if (mod == '+' && kind == '{') fail_at(src_, k, "unexpected '+'");
          Token end;
          end.type = kind == '{' ? Token::Type::VarEnd : Token::Type::BlockEnd;
          end.pos = k;
          out_.push_back(end);
          return after_end(e + 2, mod, kind == '%');
        }
      }
      k = lex_one(k, balance);
    }
  }

  size_t lex_one(size_t k, int& balance) {
    Token t;
    t.pos = k;
    char c = src_[k];
    if (is_name_start(c)) {
      size_t e = k;
      while (e < src_.size() && (is_name_start(src_[e]) || is_digit(src_[e]))) ++e;
      t.type = Token::Type::Name;
      t.text = src_.substr(k, e - k);
      out_.push_back(std::move(t));
      return e;
    }
    if (is_digit(c)) return lex_number(k);
    if (c == '\'' || c == '"') return lex_string(k);
    static const char* kOps[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "/", "*", "%", "~",
                                 "[", "]", "(", ")", "{", "}", "<", ">", "=", ".", ":", "|", ",", ";"};
    for (const char* op : kOps) {
      size_t n = std::strlen(op);
      if (src_.compare(k, n, op) == 0) {
        if (n == 1 && (c == '(' || c == '[' || c == '{')) ++balance;
        if (n == 1 && (c == ')' || c == ']' || c == '}')) {
          if (balance == 0) fail_at(src_, k, cat("unexpected '", c, "'"));
          --balance;
        }
        t.type = Token::Type::Op;
        t.text = op;
        out_.push_back(std::move(t));
        return k + n;
      }
    }
    fail_at(src_, k, cat("unexpected char '", c, "'"));
  }

  size_t lex_number(size_t k) {
    auto digits = [&](size_t p) {
      while (p < src_.size() && (is_digit(src_[p]) || (src_[p] == '_' && p + 1 < src_.size() && is_digit(src_[p + 1])))) ++p;
      return p;
    };
    size_t e = digits(k);
    bool is_float = false;
    bool after_dot = k > 0 && src_[k - 1] == '.';
    if (!after_dot && e + 1 < src_.size() && src_[e] == '.' && is_digit(src_[e + 1])) {
      is_float = true;
      e = digits(e + 1);
    }
    if (!after_dot && e < src_.size() && (src_[e] == 'e' || src_[e] == 'E')) {
      size_t p = e + 1;
      if (p < src_.size() && (src_[p] == '+' || src_[p] == '-')) ++p;
      if (p < src_.size() && is_digit(src_[p])) {
        is_float = true;
        e = digits(p);
      }
    }
    std::string text;
    for (size_t p = k; p < e; ++p)
      if (src_[p] != '_') text += src_[p];
    Token t;
    t.pos = k;
    t.text = text;
    if (is_float) {
      t.type = Token::Type::Float;
      t.fval = std::strtod(text.c_str(), nullptr);
    } else {
      t.type = Token::Type::Int;
      errno = 0;
      unsigned long long v = std::strtoull(text.c_str(), nullptr, 10);
      if (errno != 0 || v > static_cast<unsigned long long>(INT64_MAX))
        fail_at(src_, k, "integer literal out of range");
      t.ival = static_cast<int64_t>(v);
    }
    out_.push_back(std::move(t));
    return e;
  }

  size_t lex_string(size_t k) {
    char q = src_[k];
    std::string raw;
    size_t p = k + 1;
    while (true) {
      if (p >= src_.size()) fail_at(src_, k, "unexpected end of string");
      char c = src_[p];
      if (c == q) break;
      if (c == '\\' && p + 1 < src_.size()) {
        raw += c;
        raw += src_[p + 1];
        p += 2;
        continue;
      }
      raw += c;
      ++p;
    }
    Token t;
    t.type = Token::Type::String;
    t.pos = k;
    t.text = unescape_python(raw, [&](const std::string& why) { fail_at(src_, k, why); });
    out_.push_back(std::move(t));
    return p + 1;
  }
};

}  // namespace

std::vector<Token> tokenize(const std::string& source) { return Lexer(source).run(); }

}  // namespace tf::jinja
