#pragma once
// The template parser, shared by its statement half (jinja_parser.cpp) and expression half (jinja_parse_expr.cpp).
#include <algorithm>
#include <initializer_list>
#include <set>
#include <string>
#include <vector>

#include "base/error.h"
#include "tokenizer/jinja_ast.h"
#include "tokenizer/jinja_lexer.h"

namespace tf::jinja::parse {

// Nesting beyond this is refused so hostile templates cannot overflow the parser's stack.
constexpr int kMaxParseDepth = 200;

using T = Token::Type;

class Parser {
 public:
  Parser(const std::string& src, std::vector<Token> toks) : src_(src), toks_(std::move(toks)) {}

  Body parse_all() {
    Body body = parse_body({});
    if (cur().type != T::Eof) fail_here("unexpected end tag");
    return body;
  }

 private:
  const std::string& src_;
  std::vector<Token> toks_;
  size_t at_ = 0;
  int depth_ = 0;

  struct DepthGuard {
    Parser& p;
    explicit DepthGuard(Parser& parser) : p(parser) {
      if (++p.depth_ > kMaxParseDepth) p.fail_here("template nested too deeply");
    }
    ~DepthGuard() { --p.depth_; }
  };

  const Token& cur() const { return toks_[at_]; }
  const Token& peek(size_t n = 1) const { return toks_[std::min(at_ + n, toks_.size() - 1)]; }
  void next() {
    if (at_ + 1 < toks_.size()) ++at_;
  }
  [[noreturn]] void fail_here(const std::string& what) const { fail_at(src_, cur().pos, what); }

  static std::string describe(const Token& t) {
    switch (t.type) {
      case T::Eof: return "end of template";
      case T::BlockEnd: return "end of statement block";
      case T::VarEnd: return "end of print statement";
      case T::Name:
      case T::Op: return "'" + t.text + "'";
      case T::String: return "string";
      default: return "token";
    }
  }
  [[noreturn]] void unexpected() const { fail_here("unexpected " + describe(cur())); }

  bool is_op(const char* op) const { return cur().type == T::Op && cur().text == op; }
  bool is_name(const char* name) const { return cur().type == T::Name && cur().text == name; }
  void expect_op(const char* op) {
    if (!is_op(op)) fail_here(cat("expected '", op, "', got ", describe(cur())));
    next();
  }
  // name(.name)*: a filter's or test's name.
  std::string dotted_name() {
    std::string n = expect_name();
    while (is_op(".")) {
      next();
      n += '.';
      n += expect_name();
    }
    return n;
  }
  // Items up to the closing op, comma-separated with an optional trailing comma; consumes the closer.
  template <class Item>
  void comma_items(const char* close, Item item) {
    for (bool first = true; !is_op(close); first = false) {
      if (!first) expect_op(",");
      if (is_op(close)) break;
      item();
    }
    next();
  }
  std::string expect_name() {
    if (cur().type != T::Name) fail_here("expected a name, got " + describe(cur()));
    std::string n = cur().text;
    next();
    return n;
  }
  void expect_block_end() {
    if (cur().type != T::BlockEnd) fail_here("expected end of statement block, got " + describe(cur()));
    next();
  }

  ExprPtr make(Expr::Kind k, size_t pos) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->pos = pos;
    return e;
  }

  // Statements (jinja_parser.cpp).
  // Parses nodes until a block tag whose keyword is in `ends` (left unconsumed) or Eof.
  Body parse_body(const std::set<std::string>& ends);
  // After parse_body stopped on an end keyword: consume the keyword (the caller takes the block end).
  std::string take_end_keyword();
  // A body up to {% end %}, end tag consumed.
  Body closed_body(const std::string& end);
  NodePtr parse_statement();
  // "(a, b=default, ...)" of a macro or a call block's caller.
  void parse_params(Node& n);
  // Names an expression or body reads, as jinja2 checks a macro body for varargs, kwargs and caller.
  static void names_in(const Expr& e, std::set<std::string>& out);
  static void names_in(const Body& body, std::set<std::string>& out);
  // "| f(args) | g" for {% set x | f %} and {% filter f %}; the first bar is optional for filter.
  void parse_filter_chain(std::vector<ExprPtr>& out, bool need_bar = true);

  // Expressions (jinja_parse_expr.cpp).
  ExprPtr parse_tuple(bool allow_empty_parens, bool no_condexpr);
  ExprPtr parse_expression();
  ExprPtr binary(Expr::Kind k, const std::string& op, ExprPtr l, ExprPtr r, size_t pos);
  // One left-associative level: operand (op operand)*, op one of ops (keywords when words).
  template <class Operand>
  ExprPtr left_assoc(Expr::Kind k, std::initializer_list<const char*> ops, bool words, Operand operand);
  ExprPtr parse_or();
  ExprPtr parse_and();
  ExprPtr parse_not();
  ExprPtr parse_compare();
  ExprPtr parse_math1();
  ExprPtr parse_concat();
  ExprPtr parse_math2();
  ExprPtr parse_pow();
  ExprPtr parse_unary(bool with_filter);
  ExprPtr parse_primary();
  ExprPtr parse_postfix(ExprPtr node);
  ExprPtr parse_subscript(ExprPtr subject, size_t pos);
  // Arguments inside (...) into e->args (positional, after whatever is there) and e->kwargs.
  void parse_args(Expr& e);
  ExprPtr parse_call(ExprPtr callee);
  ExprPtr parse_filter(ExprPtr subject);
  ExprPtr parse_filter_expr(ExprPtr node);
};

}  // namespace tf::jinja::parse
