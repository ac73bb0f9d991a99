// Recursive-descent parser following jinja2's grammar and operator precedence.
#include <set>

#include "base/error.h"
#include "tokenizer/jinja_ast.h"
#include "tokenizer/jinja_lexer.h"

namespace tf::jinja {

namespace {

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

  // Parses nodes until a block tag whose keyword is in `ends` (left unconsumed) or Eof.
  Body parse_body(const std::set<std::string>& ends) {
    DepthGuard g(*this);
    Body body;
    while (true) {
      const Token& t = cur();
      if (t.type == T::Eof) {
        if (!ends.empty()) fail_here("unexpected end of template, expected '" + *ends.begin() + "'");
        return body;
      }
      if (t.type == T::Data) {
        auto n = std::make_unique<Node>();
        n->kind = Node::Kind::Text;
        n->pos = t.pos;
        n->text = t.text;
        body.push_back(std::move(n));
        next();
      } else if (t.type == T::VarBegin) {
        auto n = std::make_unique<Node>();
        n->kind = Node::Kind::Output;
        n->pos = t.pos;
        next();
        n->expr = parse_tuple(true, false);
        if (cur().type != T::VarEnd) fail_here("expected end of print statement, got " + describe(cur()));
        next();
        body.push_back(std::move(n));
      } else if (t.type == T::BlockBegin) {
        const Token& kw = peek();
        if (kw.type == T::Name && ends.count(kw.text)) {
          next();
          return body;
        }
        next();
        body.push_back(parse_statement());
      } else {
        unexpected();
      }
    }
  }

  // After parse_body stopped on an end keyword: consume it and the block end.
  std::string take_end_keyword() {
    std::string kw = expect_name();
    return kw;
  }

  NodePtr parse_statement() {
    size_t pos = cur().pos;
    if (cur().type != T::Name) fail_here("tag name expected");
    std::string kw = cur().text;
    next();
    auto n = std::make_unique<Node>();
    n->pos = pos;
    if (kw == "if") {
      n->kind = Node::Kind::If;
      n->conds.push_back(parse_tuple(false, false));
      expect_block_end();
      while (true) {
        n->branches.push_back(parse_body({"elif", "else", "endif"}));
        std::string end = take_end_keyword();
        if (end == "elif") {
          n->conds.push_back(parse_tuple(false, false));
          expect_block_end();
        } else if (end == "else") {
          expect_block_end();
          n->branches.push_back(parse_body({"endif"}));
          take_end_keyword();
          expect_block_end();
          break;
        } else {
          expect_block_end();
          break;
        }
      }
    } else if (kw == "for") {
      n->kind = Node::Kind::For;
      do {
        n->targets.push_back(expect_name());
        if (!is_op(",")) break;
        next();
      } while (cur().type == T::Name && !is_name("in"));
      if (!is_name("in")) fail_here("expected 'in', got " + describe(cur()));
      next();
      n->expr = parse_tuple(false, true);
      if (is_name("if")) {
        next();
        n->cond = parse_expression();
      }
      if (is_name("recursive")) fail_here("recursive loops are not supported");
      expect_block_end();
      n->body = parse_body({"endfor", "else"});
      if (take_end_keyword() == "else") {
        expect_block_end();
        n->else_body = parse_body({"endfor"});
        take_end_keyword();
      }
      expect_block_end();
    } else if (kw == "set") {
      std::string first = expect_name();
      n->targets.push_back(first);
      if (is_op(".")) {
        next();
        n->targets.push_back(expect_name());
        n->attr_target = true;
      } else {
        while (is_op(",")) {
          next();
          if (cur().type != T::Name) break;
          n->targets.push_back(expect_name());
        }
      }
      if (is_op("=")) {
        next();
        n->kind = Node::Kind::Set;
        n->expr = parse_tuple(false, false);
        expect_block_end();
      } else {
        if (n->attr_target || n->targets.size() != 1) fail_here("expected '='");
        n->kind = Node::Kind::SetBlock;
        parse_filter_chain(n->filters);
        expect_block_end();
        n->body = parse_body({"endset"});
        take_end_keyword();
        expect_block_end();
      }
    } else if (kw == "macro") {
      n->kind = Node::Kind::Macro;
      n->text = expect_name();
      expect_op("(");
      while (!is_op(")")) {
        if (!n->params.empty()) expect_op(",");
        if (is_op(")")) break;
        std::string p = expect_name();
        ExprPtr def;
        if (is_op("=")) {
          next();
          def = parse_expression();
        }
        n->params.emplace_back(p, std::move(def));
      }
      next();
      expect_block_end();
      n->body = parse_body({"endmacro"});
      take_end_keyword();
      if (cur().type == T::Name) next();  // {% endmacro name %}
      expect_block_end();
    } else if (kw == "break" || kw == "continue") {
      n->kind = kw == "break" ? Node::Kind::Break : Node::Kind::Continue;
      expect_block_end();
    } else if (kw == "filter") {
      n->kind = Node::Kind::FilterBlock;
      parse_filter_chain(n->filters, false);
      expect_block_end();
      n->body = parse_body({"endfilter"});
      take_end_keyword();
      expect_block_end();
    } else if (kw == "generation") {
      // transformers' AssistantTracker tag: renders its body unchanged.
      n->kind = Node::Kind::Scope;
      expect_block_end();
      n->body = parse_body({"endgeneration"});
      take_end_keyword();
      expect_block_end();
    } else {
      fail_at(src_, pos, "encountered unknown tag '" + kw + "'");
    }
    return n;
  }

  // "| f(args) | g" for {% set x | f %} and {% filter f %}; the first bar is optional for filter.
  void parse_filter_chain(std::vector<ExprPtr>& out, bool need_bar = true) {
    bool first = true;
    while (is_op("|") || (first && !need_bar && cur().type == T::Name)) {
      if (is_op("|")) next();
      first = false;
      out.push_back(parse_filter(nullptr));
    }
  }

  ExprPtr parse_tuple(bool allow_empty_parens, bool no_condexpr) {
    size_t pos = cur().pos;
    std::vector<ExprPtr> items;
    bool saw_comma = false;
    while (true) {
      if (!items.empty()) {
        if (!is_op(",")) break;
        next();
        saw_comma = true;
      }
      if (cur().type == T::BlockEnd || cur().type == T::VarEnd || is_op(")") || is_name("if") ||
          is_name("recursive") || (is_op("=") && !items.empty()))
        break;
      items.push_back(no_condexpr ? parse_or() : parse_expression());
    }
    if (items.empty() && !allow_empty_parens) unexpected();
    if (items.size() == 1 && !saw_comma) return std::move(items[0]);
    auto e = make(Expr::Kind::Tuple, pos);
    e->args = std::move(items);
    return e;
  }

  ExprPtr parse_expression() {
    DepthGuard g(*this);
    size_t pos = cur().pos;
    ExprPtr e = parse_or();
    while (is_name("if")) {
      next();
      auto c = make(Expr::Kind::Cond, pos);
      ExprPtr test = parse_or();
      ExprPtr other;
      if (is_name("else")) {
        next();
        other = parse_expression();
      }
      c->args.push_back(std::move(e));
      c->args.push_back(std::move(test));
      c->args.push_back(std::move(other));
      e = std::move(c);
    }
    return e;
  }

  ExprPtr binary(Expr::Kind k, const std::string& op, ExprPtr l, ExprPtr r, size_t pos) {
    auto e = make(k, pos);
    e->name = op;
    e->args.push_back(std::move(l));
    e->args.push_back(std::move(r));
    return e;
  }

  ExprPtr parse_or() {
    size_t pos = cur().pos;
    ExprPtr l = parse_and();
    while (is_name("or")) {
      next();
      l = binary(Expr::Kind::Or, "or", std::move(l), parse_and(), pos);
    }
    return l;
  }
  ExprPtr parse_and() {
    size_t pos = cur().pos;
    ExprPtr l = parse_not();
    while (is_name("and")) {
      next();
      l = binary(Expr::Kind::And, "and", std::move(l), parse_not(), pos);
    }
    return l;
  }
  ExprPtr parse_not() {
    DepthGuard g(*this);
    if (is_name("not")) {
      size_t pos = cur().pos;
      next();
      auto e = make(Expr::Kind::Not, pos);
      e->args.push_back(parse_not());
      return e;
    }
    return parse_compare();
  }
  ExprPtr parse_compare() {
    size_t pos = cur().pos;
    ExprPtr first = parse_math1();
    ExprPtr cmp;
    while (true) {
      std::string op;
      if (cur().type == T::Op && (cur().text == "==" || cur().text == "!=" || cur().text == "<" ||
                                  cur().text == "<=" || cur().text == ">" || cur().text == ">=")) {
        op = cur().text;
        next();
      } else if (is_name("in")) {
        op = "in";
        next();
      } else if (is_name("not") && peek().type == T::Name && peek().text == "in") {
        op = "notin";
        next();
        next();
      } else {
        break;
      }
      if (!cmp) {
        cmp = make(Expr::Kind::Compare, pos);
        cmp->args.push_back(std::move(first));
      }
      cmp->ops.push_back(op);
      cmp->args.push_back(parse_math1());
    }
    return cmp ? std::move(cmp) : std::move(first);
  }
  ExprPtr parse_math1() {
    size_t pos = cur().pos;
    ExprPtr l = parse_concat();
    while (is_op("+") || is_op("-")) {
      std::string op = cur().text;
      next();
      l = binary(Expr::Kind::Binary, op, std::move(l), parse_concat(), pos);
    }
    return l;
  }
  ExprPtr parse_concat() {
    size_t pos = cur().pos;
    ExprPtr l = parse_math2();
    while (is_op("~")) {
      next();
      l = binary(Expr::Kind::Binary, "~", std::move(l), parse_math2(), pos);
    }
    return l;
  }
  ExprPtr parse_math2() {
    size_t pos = cur().pos;
    ExprPtr l = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      std::string op = cur().text;
      next();
      l = binary(Expr::Kind::Binary, op, std::move(l), parse_pow(), pos);
    }
    return l;
  }
  ExprPtr parse_pow() {
    size_t pos = cur().pos;
    ExprPtr l = parse_unary(true);
    while (is_op("**")) {
      next();
      l = binary(Expr::Kind::Binary, "**", std::move(l), parse_unary(true), pos);
    }
    return l;
  }
  ExprPtr parse_unary(bool with_filter) {
    DepthGuard g(*this);
    size_t pos = cur().pos;
    ExprPtr node;
    if (is_op("-") || is_op("+")) {
      auto e = make(is_op("-") ? Expr::Kind::Neg : Expr::Kind::Pos, pos);
      next();
      e->args.push_back(parse_unary(false));
      node = std::move(e);
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  ExprPtr parse_primary() {
    const Token& t = cur();
    size_t pos = t.pos;
    if (t.type == T::Name) {
      auto e = make(Expr::Kind::Const, pos);
      if (t.text == "true" || t.text == "True") e->value = Value::boolean(true);
      else if (t.text == "false" || t.text == "False") e->value = Value::boolean(false);
      else if (t.text == "none" || t.text == "None") e->value = Value::none();
      else {
        e->kind = Expr::Kind::Name;
        e->name = t.text;
      }
      next();
      return e;
    }
    if (t.type == T::String) {
      std::string s;
      while (cur().type == T::String) {
        s += cur().text;
        next();
      }
      auto e = make(Expr::Kind::Const, pos);
      e->value = Value::string(std::move(s));
      return e;
    }
    if (t.type == T::Int || t.type == T::Float) {
      auto e = make(Expr::Kind::Const, pos);
      e->value = t.type == T::Int ? Value::integer(t.ival) : Value::number(t.fval);
      next();
      return e;
    }
    if (is_op("(")) {
      next();
      ExprPtr e = parse_tuple(true, false);
      expect_op(")");
      return e;
    }
    if (is_op("[")) {
      next();
      auto e = make(Expr::Kind::List, pos);
      while (!is_op("]")) {
        if (!e->args.empty()) expect_op(",");
        if (is_op("]")) break;
        e->args.push_back(parse_expression());
      }
      next();
      return e;
    }
    if (is_op("{")) {
      next();
      auto e = make(Expr::Kind::Dict, pos);
      while (!is_op("}")) {
        if (!e->args.empty()) expect_op(",");
        if (is_op("}")) break;
        e->args.push_back(parse_expression());
        expect_op(":");
        e->args.push_back(parse_expression());
      }
      next();
      return e;
    }
    unexpected();
  }

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      size_t pos = cur().pos;
      if (is_op(".")) {
        next();
        if (cur().type == T::Name) {
          auto e = make(Expr::Kind::Attr, pos);
          e->name = cur().text;
          e->args.push_back(std::move(node));
          node = std::move(e);
        } else if (cur().type == T::Int) {
          auto e = make(Expr::Kind::Item, pos);
          e->args.push_back(std::move(node));
          auto k = make(Expr::Kind::Const, pos);
          k->value = Value::integer(cur().ival);
          e->args.push_back(std::move(k));
          node = std::move(e);
        } else {
          fail_here("expected name or number after '.'");
        }
        next();
      } else if (is_op("[")) {
        next();
        node = parse_subscript(std::move(node), pos);
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr subject, size_t pos) {
    ExprPtr parts[3];
    int idx = 0;
    bool is_slice = false;
    while (!is_op("]")) {
      if (is_op(":")) {
        is_slice = true;
        if (++idx > 2) fail_here("too many ':' in slice");
        next();
        continue;
      }
      if (parts[idx]) unexpected();
      parts[idx] = parse_expression();
    }
    next();
    if (!is_slice) {
      if (!parts[0]) fail_here("expected an index");
      auto e = make(Expr::Kind::Item, pos);
      e->args.push_back(std::move(subject));
      e->args.push_back(std::move(parts[0]));
      return e;
    }
    auto e = make(Expr::Kind::Slice, pos);
    e->args.push_back(std::move(subject));
    for (auto& p : parts) e->args.push_back(std::move(p));
    return e;
  }

  // Arguments inside (...) into e->args (positional, after whatever is there) and e->kwargs.
  void parse_args(Expr& e) {
    expect_op("(");
    bool first = true;
    while (!is_op(")")) {
      if (!first) expect_op(",");
      first = false;
      if (is_op(")")) break;
      if (is_op("*") || is_op("**")) fail_here("*args and **kwargs calls are not supported");
      if (cur().type == T::Name && peek().type == T::Op && peek().text == "=") {
        std::string k = cur().text;
        next();
        next();
        e.kwargs.emplace_back(k, parse_expression());
      } else {
        if (!e.kwargs.empty()) fail_here("positional argument follows keyword argument");
        e.args.push_back(parse_expression());
      }
    }
    next();
  }

  ExprPtr parse_call(ExprPtr callee) {
    auto e = make(Expr::Kind::Call, cur().pos);
    e->args.push_back(std::move(callee));
    parse_args(*e);
    return e;
  }

  ExprPtr parse_filter(ExprPtr subject) {
    auto e = make(Expr::Kind::Filter, cur().pos);
    e->name = expect_name();
    while (is_op(".")) {
      next();
      e->name += "." + expect_name();
    }
    e->args.push_back(std::move(subject));
    if (is_op("(")) parse_args(*e);
    return e;
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    while (true) {
      if (is_op("|")) {
        next();
        node = parse_filter(std::move(node));
      } else if (is_name("is")) {
        size_t pos = cur().pos;
        next();
        auto e = make(Expr::Kind::Test, pos);
        if (is_name("not")) {
          e->negated = true;
          next();
        }
        e->name = expect_name();
        while (is_op(".")) {
          next();
          e->name += "." + expect_name();
        }
        e->args.push_back(std::move(node));
        if (is_op("(")) {
          parse_args(*e);
        } else if ((cur().type == T::Name || cur().type == T::String || cur().type == T::Int ||
                    cur().type == T::Float || is_op("[") || is_op("{")) &&
                   !is_name("else") && !is_name("or") && !is_name("and")) {
          if (is_name("is")) fail_here("You cannot chain multiple tests with is");
          e->args.push_back(parse_postfix(parse_primary()));
        }
        node = std::move(e);
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }
};

}  // namespace

std::shared_ptr<Program> parse_template(const std::string& source) {
  auto prog = std::make_shared<Program>();
  prog->source = normalize_source(source);
  Parser p(prog->source, tokenize(prog->source));
  prog->body = p.parse_all();
  return prog;
}

}  // namespace tf::jinja
