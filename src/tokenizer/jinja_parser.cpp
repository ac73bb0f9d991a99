// Recursive-descent parser following jinja2's grammar: bodies, statements and the parse entry point.
#include "tokenizer/jinja_parser.h"

namespace tf::jinja {

namespace parse {

Body Parser::parse_body(const std::set<std::string>& ends) {
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

std::string Parser::take_end_keyword() { return expect_name(); }

Body Parser::closed_body(const std::string& end) {
  Body b = parse_body({end});
  take_end_keyword();
  expect_block_end();
  return b;
}

NodePtr Parser::parse_statement() {
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
        n->branches.push_back(closed_body("endif"));
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
      n->body = closed_body("endset");
    }
  } else if (kw == "macro") {
    n->kind = Node::Kind::Macro;
    n->text = expect_name();
    parse_params(*n);
    expect_block_end();
    n->body = parse_body({"endmacro"});
    take_end_keyword();
    if (cur().type == T::Name) next();  // {% endmacro name %}
    expect_block_end();
    std::set<std::string> names;
    names_in(n->body, names);
    n->uses_varargs = names.count("varargs") > 0;
    n->uses_kwargs = names.count("kwargs") > 0;
    n->uses_caller = names.count("caller") > 0;
  } else if (kw == "call") {
    // {% call(args) macro(...) %}body{% endcall %}: the body becomes the macro's caller().
    n->kind = Node::Kind::CallBlock;
    if (is_op("(")) parse_params(*n);
    n->expr = parse_expression();
    if (n->expr->kind != Expr::Kind::Call) fail_at(src_, n->expr->pos, "expected call");
    expect_block_end();
    n->body = closed_body("endcall");
  } else if (kw == "break" || kw == "continue") {
    n->kind = kw == "break" ? Node::Kind::Break : Node::Kind::Continue;
    expect_block_end();
  } else if (kw == "filter") {
    n->kind = Node::Kind::FilterBlock;
    parse_filter_chain(n->filters, false);
    expect_block_end();
    n->body = closed_body("endfilter");
  } else if (kw == "generation") {
    // transformers' AssistantTracker tag: renders its body unchanged.
    n->kind = Node::Kind::Scope;
    expect_block_end();
    n->body = closed_body("endgeneration");
  } else {
    fail_at(src_, pos, "encountered unknown tag '" + kw + "'");
  }
  return n;
}

// "(a, b=default, ...)" of a macro or a call block's caller.
void Parser::parse_params(Node& n) {
  expect_op("(");
  comma_items(")", [&] {
    std::string p = expect_name();
    ExprPtr def;
    if (is_op("=")) {
      next();
      def = parse_expression();
    }
    n.params.emplace_back(p, std::move(def));
  });
}

// Names an expression or body reads, as jinja2 checks a macro body for varargs, kwargs and caller.
void Parser::names_in(const Expr& e, std::set<std::string>& out) {
  if (e.kind == Expr::Kind::Name) out.insert(e.name);
  for (const auto& a : e.args)
    if (a) names_in(*a, out);
  for (const auto& kv : e.kwargs) names_in(*kv.second, out);
}

void Parser::names_in(const Body& body, std::set<std::string>& out) {
  for (const auto& n : body) {
    for (const ExprPtr* e : {&n->expr, &n->cond})
      if (*e) names_in(**e, out);
    for (const auto& c : n->conds) names_in(*c, out);
    for (const auto& f : n->filters) names_in(*f, out);
    for (const auto& p : n->params)
      if (p.second) names_in(*p.second, out);
    for (const auto& b : n->branches) names_in(b, out);
    names_in(n->body, out);
    names_in(n->else_body, out);
  }
}

// "| f(args) | g" for {% set x | f %} and {% filter f %}; the first bar is optional for filter.
void Parser::parse_filter_chain(std::vector<ExprPtr>& out, bool need_bar) {
  bool first = true;
  while (is_op("|") || (first && !need_bar && cur().type == T::Name)) {
    if (is_op("|")) next();
    first = false;
    out.push_back(parse_filter(nullptr));
  }
}

}  // namespace parse

std::shared_ptr<Program> parse_template(const std::string& source) {
  auto prog = std::make_shared<Program>();
  prog->source = normalize_source(source);
  parse::Parser p(prog->source, tokenize(prog->source));
  prog->body = p.parse_all();
  return prog;
}

}  // namespace tf::jinja
