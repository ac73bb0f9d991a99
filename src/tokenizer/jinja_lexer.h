#pragma once
// Splits template source into tokens with jinja2's whitespace control as transformers configures
// it: trim_blocks, lstrip_blocks, {%- -%} / {{- -}} / {#- -#} and the +%} / {%+ opt-outs.
#include <cstdint>
#include <string>
#include <vector>

namespace tf::jinja {

struct Token {
  enum class Type { Data, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, String, Int, Float, Op, Eof };
  Type type = Type::Eof;
  std::string text;  // data text, name, decoded string literal or operator
  int64_t ival = 0;
  double fval = 0.0;
  size_t pos = 0;  // offset in the normalized source, for error locations
};

// What jinja2 does before lexing: \r\n and \r become \n and one trailing newline is dropped.
std::string normalize_source(const std::string& source);

// Tokens of normalized source; {% raw %} bodies come out as Data and comments vanish.
std::vector<Token> tokenize(const std::string& source);

// "line L, column C" of an offset, 1-based, columns counted in bytes.
std::string source_location(const std::string& source, size_t pos);

// Throws tf::Error naming the position.
[[noreturn]] void fail_at(const std::string& source, size_t pos, const std::string& what);

}  // namespace tf::jinja
