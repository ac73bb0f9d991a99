// Expressions in jinja2's precedence: conditionals, or/and/not, comparisons, arithmetic, unary operators,
// filters and tests, postfix access and calls.
#include "tokenizer/jinja_parser.h"

namespace tf::jinja::parse {

ExprPtr Parser::parse_tuple(bool allow_empty_parens, bool no_condexpr) {
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

ExprPtr Parser::parse_expression() {
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

ExprPtr Parser::binary(Expr::Kind k, const std::string& op, ExprPtr l, ExprPtr r, size_t pos) {
  auto e = make(k, pos);
  e->name = op;
  e->args.push_back(std::move(l));
  e->args.push_back(std::move(r));
  return e;
}

template <class Operand>
ExprPtr Parser::left_assoc(Expr::Kind k, std::initializer_list<const char*> ops, bool words, Operand operand) {
  const size_t pos = cur().pos;
  ExprPtr l = operand();
  while (true) {
    const char* hit = nullptr;
    for (const char* o : ops)
      if (words ? is_name(o) : is_op(o)) hit = o;
    if (!hit) return l;
    next();
    l = binary(k, hit, std::move(l), operand(), pos);
  }
}

ExprPtr Parser::parse_or() {
  return left_assoc(Expr::Kind::Or, {"or"}, true, [&] { return parse_and(); });
}

ExprPtr Parser::parse_and() {
  return left_assoc(Expr::Kind::And, {"and"}, true, [&] { return parse_not(); });
}

ExprPtr Parser::parse_not() {
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

ExprPtr Parser::parse_compare() {
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

ExprPtr Parser::parse_math1() {
  return left_assoc(Expr::Kind::Binary, {"+", "-"}, false, [&] { return parse_concat(); });
}

ExprPtr Parser::parse_concat() {
  return left_assoc(Expr::Kind::Binary, {"~"}, false, [&] { return parse_math2(); });
}

ExprPtr Parser::parse_math2() {
  return left_assoc(Expr::Kind::Binary, {"*", "/", "//", "%"}, false, [&] { return parse_pow(); });
}

ExprPtr Parser::parse_pow() {
  return left_assoc(Expr::Kind::Binary, {"**"}, false, [&] { return parse_unary(true); });
}

ExprPtr Parser::parse_unary(bool with_filter) {
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

ExprPtr Parser::parse_primary() {
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
    comma_items("]", [&] { e->args.push_back(parse_expression()); });
    return e;
  }
  if (is_op("{")) {
    next();
    auto e = make(Expr::Kind::Dict, pos);
    comma_items("}", [&] {
      e->args.push_back(parse_expression());
      expect_op(":");
      e->args.push_back(parse_expression());
    });
    return e;
  }
  unexpected();
}

ExprPtr Parser::parse_postfix(ExprPtr node) {
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

ExprPtr Parser::parse_subscript(ExprPtr subject, size_t pos) {
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
void Parser::parse_args(Expr& e) {
  expect_op("(");
  comma_items(")", [&] {
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
  });
}

ExprPtr Parser::parse_call(ExprPtr callee) {
  auto e = make(Expr::Kind::Call, cur().pos);
  e->args.push_back(std::move(callee));
  parse_args(*e);
  return e;
}

ExprPtr Parser::parse_filter(ExprPtr subject) {
  auto e = make(Expr::Kind::Filter, cur().pos);
  e->name = dotted_name();
  e->args.push_back(std::move(subject));
  if (is_op("(")) parse_args(*e);
  return e;
}

ExprPtr Parser::parse_filter_expr(ExprPtr node) {
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
      e->name = dotted_name();
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

}  // namespace tf::jinja::parse
