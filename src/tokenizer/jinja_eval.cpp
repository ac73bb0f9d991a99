#include "tokenizer/jinja_eval.h"

#include "tokenizer/jinja_lexer.h"

namespace tf::jinja {

Evaluator::Evaluator(const Program& prog, const Limits& limits, std::time_t now, bool utc)
    : prog_(prog), limits_(limits), now_(now), utc_(utc) {
  install_globals();
}

void Evaluator::fail_pos(size_t pos, const std::string& what) const { fail_at(prog_.source, pos, what); }

void Evaluator::charge(size_t bytes) {
  work_ += bytes;
  TF_CHECK(work_ <= limits_.max_work_bytes, "chat template: rendering built more than ",
           limits_.max_work_bytes, " bytes of strings and lists");
}

void Evaluator::step() {
  TF_CHECK(++steps_ <= limits_.max_steps, "chat template: more than ", limits_.max_steps,
           " loop iterations and macro calls");
}

void Evaluator::append(std::string& out, const std::string& text) {
  TF_CHECK(out.size() + text.size() <= limits_.max_output, "chat template: output longer than ",
           limits_.max_output, " bytes");
  charge(text.size());
  out += text;
}

std::string Evaluator::strftime_now(const std::string& fmt) const {
  std::tm tm{};
  if (utc_) gmtime_r(&now_, &tm);
  else localtime_r(&now_, &tm);
  TF_CHECK(fmt.size() < 256, "chat template: strftime_now format too long");
  char buf[1024];
  size_t n = std::strftime(buf, sizeof(buf), fmt.c_str(), &tm);
  return std::string(buf, n);
}

std::string Evaluator::render(const Value& context) {
  root_ = std::make_shared<Frame>();
  if (context.is_dict())
    for (const auto& kv : context.dict->items)
      if (kv.first.is_string()) root_->vars[kv.first.s] = kv.second;
  std::string out;
  exec(prog_.body, out, root_);
  return out;
}

Value Evaluator::lookup(const std::string& name, const FramePtr& frame) const {
  for (const Frame* f = frame.get(); f; f = f->parent.get()) {
    auto it = f->vars.find(name);
    if (it != f->vars.end()) return it->second;
  }
  auto g = globals_.find(name);
  if (g != globals_.end()) return g->second;
  return Value::undefined("'" + name + "' is undefined");
}

Evaluator::Flow Evaluator::exec(const Body& body, std::string& out, const FramePtr& frame) {
  for (const auto& n : body) {
    Flow f = exec_node(*n, out, frame);
    if (f != Flow::Normal) return f;
  }
  return Flow::Normal;
}

Evaluator::Flow Evaluator::exec_node(const Node& n, std::string& out, const FramePtr& frame) {
  switch (n.kind) {
    case Node::Kind::Text: append(out, n.text); return Flow::Normal;
    case Node::Kind::Output: {
      Value v = eval(*n.expr, frame);
      append(out, to_str(v));
      return Flow::Normal;
    }
    case Node::Kind::If:
      for (size_t k = 0; k < n.branches.size(); ++k) {
        if (k < n.conds.size() && !eval(*n.conds[k], frame).truthy()) continue;
        return exec(n.branches[k], out, frame);
      }
      return Flow::Normal;
    case Node::Kind::For: return exec_for(n, out, frame);
    case Node::Kind::Set: exec_set(n, frame); return Flow::Normal;
    case Node::Kind::SetBlock: {
      std::string text;
      exec(n.body, text, frame);
      Value v = Value::string(std::move(text));
      for (const auto& f : n.filters) {
        ValueList args;
        for (size_t k = 1; k < f->args.size(); ++k) args.push_back(eval(*f->args[k], frame));
        KwArgs kw;
        for (const auto& [name, e] : f->kwargs) kw.emplace_back(name, eval(*e, frame));
        v = filter(f->name, v, args, kw);
      }
      frame->vars[n.targets[0]] = v;
      return Flow::Normal;
    }
    case Node::Kind::FilterBlock: {
      std::string text;
      Flow fl = exec(n.body, text, frame);
      Value v = Value::string(std::move(text));
      for (const auto& f : n.filters) {
        ValueList args;
        for (size_t k = 1; k < f->args.size(); ++k) args.push_back(eval(*f->args[k], frame));
        KwArgs kw;
        for (const auto& [name, e] : f->kwargs) kw.emplace_back(name, eval(*e, frame));
        v = filter(f->name, v, args, kw);
      }
      append(out, to_str(v));
      return fl;
    }
    case Node::Kind::Macro: frame->vars[n.text] = make_macro(n, frame); return Flow::Normal;
    case Node::Kind::CallBlock: append(out, to_str(exec_call_block(n, frame))); return Flow::Normal;
    case Node::Kind::Break: return Flow::Break;
    case Node::Kind::Continue: return Flow::Continue;
    case Node::Kind::Scope: return exec(n.body, out, frame);
  }
  return Flow::Normal;
}

Evaluator::Flow Evaluator::exec_for(const Node& n, std::string& out, const FramePtr& frame) {
  Value seq = eval(*n.expr, frame);
  if (seq.is_none() || seq.kind == Value::Kind::Bool || seq.is_number() || seq.kind == Value::Kind::Callable ||
      seq.kind == Value::Kind::Namespace)
    fail_pos(n.expr->pos, cat("'", seq.type_name(), "' object is not iterable"));
  ValueList items = iterate(seq);
  auto bind = [&](const FramePtr& f, const Value& item) {
    if (n.targets.size() == 1) {
      f->vars[n.targets[0]] = item;
      return;
    }
    ValueList parts = item.is_list() ? *item.list : item.is_string() ? iterate(item) : ValueList{};
    if (!item.is_list() && !item.is_string()) fail_pos(n.pos, "cannot unpack non-iterable " + item.type_name() + " object");
    if (parts.size() != n.targets.size())
      fail_pos(n.pos, cat("not enough or too many values to unpack (expected ", n.targets.size(), ", got ", parts.size(), ")"));
    for (size_t k = 0; k < parts.size(); ++k) f->vars[n.targets[k]] = parts[k];
  };
  if (n.cond) {
    ValueList kept;
    for (const auto& item : items) {
      step();
      auto f = std::make_shared<Frame>();
      f->parent = frame;
      bind(f, item);
      if (eval(*n.cond, f).truthy()) kept.push_back(item);
    }
    items = std::move(kept);
  }
  // jinja2 runs the else block unless some iteration reached the end of the body (break and continue skip it).
  bool completed = false;
  const int64_t len = static_cast<int64_t>(items.size());
  for (int64_t k = 0; k < len; ++k) {
    step();
    auto f = std::make_shared<Frame>();
    f->parent = frame;
    bind(f, items[k]);
    Value loop = Value::make_dict();
    auto& d = *loop.dict;
    d.items.emplace_back(Value::string("index"), Value::integer(k + 1));
    d.items.emplace_back(Value::string("index0"), Value::integer(k));
    d.items.emplace_back(Value::string("revindex"), Value::integer(len - k));
    d.items.emplace_back(Value::string("revindex0"), Value::integer(len - k - 1));
    d.items.emplace_back(Value::string("first"), Value::boolean(k == 0));
    d.items.emplace_back(Value::string("last"), Value::boolean(k == len - 1));
    d.items.emplace_back(Value::string("length"), Value::integer(len));
    d.items.emplace_back(Value::string("depth"), Value::integer(1));
    d.items.emplace_back(Value::string("depth0"), Value::integer(0));
    d.items.emplace_back(Value::string("previtem"), k > 0 ? items[k - 1] : Value::undefined("there is no previous item"));
    d.items.emplace_back(Value::string("nextitem"), k + 1 < len ? items[k + 1] : Value::undefined("there is no next item"));
    d.items.emplace_back(Value::string("cycle"), Value::callable("cycle", [k](Evaluator&, ValueList& args, KwArgs&) {
            TF_CHECK(!args.empty(), "chat template: no items for cycling given");
            return args[static_cast<size_t>(k) % args.size()];
          }));
    f->vars["loop"] = loop;
    Flow fl = exec(n.body, out, f);
    if (fl == Flow::Break) break;
    completed = completed || fl == Flow::Normal;
  }
  if (!completed && !n.else_body.empty()) {
    auto f = std::make_shared<Frame>();
    f->parent = frame;
    exec(n.else_body, out, f);
  }
  return Flow::Normal;
}

void Evaluator::exec_set(const Node& n, const FramePtr& frame) {
  Value v = eval(*n.expr, frame);
  if (n.attr_target) {
    Value ns = lookup(n.targets[0], frame);
    if (ns.kind != Value::Kind::Namespace) fail_pos(n.pos, "can't assign attribute on non-namespace object");
    ns.dict->set(Value::string(n.targets[1]), v);
    return;
  }
  if (n.targets.size() == 1) {
    frame->vars[n.targets[0]] = v;
    return;
  }
  ValueList parts = v.is_list() ? *v.list : v.is_string() ? iterate(v) : ValueList{};
  if (parts.size() != n.targets.size()) fail_pos(n.pos, "wrong number of values to unpack");
  for (size_t k = 0; k < parts.size(); ++k) frame->vars[n.targets[k]] = parts[k];
}

Value Evaluator::make_macro(const Node& n, const FramePtr& frame) {
  // A weak link to the defining frame avoids a frame -> macro -> frame cycle that would leak.
  std::weak_ptr<Frame> weak = frame;
  const Node* node = &n;
  return Value::callable(n.text, [this, node, weak](Evaluator&, ValueList& args, KwArgs& kwargs) {
    auto f = std::make_shared<Frame>();
    f->parent = weak.lock();
    if (!f->parent) f->parent = root_;
    bind_params(*node, "macro '" + node->text + "'", f, args, kwargs);
    return run_body(*node, f);
  });
}

void Evaluator::bind_params(const Node& n, const std::string& what, const FramePtr& f, ValueList& args,
                            KwArgs& kwargs) {
  const size_t np = n.params.size();
  if (args.size() > np && !n.uses_varargs)
    fail_pos(n.pos, cat(what, " takes not more than ", np, " argument(s)"));
  Value extra_kw = Value::make_dict();
  Value caller = Value::undefined("No caller defined");
  for (const auto& [k, v] : kwargs) {
    bool known = false;
    for (const auto& p : n.params) known = known || p.first == k;
    if (known) continue;
    if (k == "caller" && n.uses_caller) caller = v;
    else if (n.uses_kwargs) extra_kw.dict->set(Value::string(k), v);
    else fail_pos(n.pos, cat(what, " takes no keyword argument '", k, "'"));
  }
  for (size_t k = 0; k < np; ++k) {
    const auto& [pname, def] = n.params[k];
    const Value* kw = nullptr;
    for (const auto& [name, v] : kwargs)
      if (name == pname) kw = &v;
    if (k < args.size()) {
      if (kw) fail_pos(n.pos, cat(what, " got multiple values for argument '", pname, "'"));
      f->vars[pname] = args[k];
    } else if (kw) {
      f->vars[pname] = *kw;
    } else if (def) {
      f->vars[pname] = eval(*def, f);
    } else {
      f->vars[pname] = Value::undefined("'" + pname + "' is undefined");
    }
  }
  if (n.uses_varargs)
    f->vars["varargs"] = Value::make_list(args.size() > np ? ValueList(args.begin() + static_cast<long>(np), args.end())
                                                           : ValueList{}, true);
  if (n.uses_kwargs) f->vars["kwargs"] = extra_kw;
  if (n.uses_caller) f->vars["caller"] = caller;
}

Value Evaluator::run_body(const Node& n, const FramePtr& f) {
  step();
  TF_CHECK(call_depth_ < limits_.max_call_depth, "chat template: macro '", n.text, "' nested deeper than ",
           limits_.max_call_depth, " calls");
  ++call_depth_;
  std::string text;
  try {
    exec(n.body, text, f);
  } catch (...) {
    --call_depth_;
    throw;
  }
  --call_depth_;
  return Value::string(std::move(text));
}

Value Evaluator::exec_call_block(const Node& n, const FramePtr& frame) {
  std::weak_ptr<Frame> weak = frame;
  const Node* node = &n;
  Value caller = Value::callable("caller", [this, node, weak](Evaluator&, ValueList& args, KwArgs& kwargs) {
    auto f = std::make_shared<Frame>();
    f->parent = weak.lock();
    if (!f->parent) f->parent = root_;
    bind_params(*node, "caller", f, args, kwargs);
    return run_body(*node, f);
  });
  const Expr& call_expr = *n.expr;
  Value callee = eval(*call_expr.args[0], frame);
  ValueList args;
  for (size_t k = 1; k < call_expr.args.size(); ++k) args.push_back(eval(*call_expr.args[k], frame));
  KwArgs kw;
  for (const auto& [name, x] : call_expr.kwargs) kw.emplace_back(name, eval(*x, frame));
  kw.emplace_back("caller", caller);
  if (callee.is_undefined()) fail_pos(call_expr.pos, callee.s.empty() ? "value is undefined" : callee.s);
  return call(callee, args, kw);
}

Value Evaluator::call(const Value& callee, ValueList& args, KwArgs& kwargs) {
  if (callee.is_undefined()) fail_undefined(callee);
  TF_CHECK(callee.kind == Value::Kind::Callable, "chat template: '", callee.type_name(), "' object is not callable");
  return callee.fn->fn(*this, args, kwargs);
}

Value Evaluator::eval_call(const Expr& e, const FramePtr& frame) {
  Value callee = eval(*e.args[0], frame);
  ValueList args;
  for (size_t k = 1; k < e.args.size(); ++k) args.push_back(eval(*e.args[k], frame));
  KwArgs kw;
  for (const auto& [name, x] : e.kwargs) kw.emplace_back(name, eval(*x, frame));
  if (callee.is_undefined()) fail_pos(e.pos, callee.s.empty() ? "value is undefined" : callee.s);
  if (callee.kind != Value::Kind::Callable) fail_pos(e.pos, "'" + callee.type_name() + "' object is not callable");
  return call(callee, args, kw);
}

Value Evaluator::eval(const Expr& e, const FramePtr& frame) {
  using K = Expr::Kind;
  switch (e.kind) {
    case K::Const: return e.value;
    case K::Name: return lookup(e.name, frame);
    case K::List:
    case K::Tuple: {
      ValueList items;
      for (const auto& a : e.args) items.push_back(eval(*a, frame));
      return Value::make_list(std::move(items), e.kind == K::Tuple);
    }
    case K::Dict: {
      Value d = Value::make_dict();
      for (size_t k = 0; k + 1 < e.args.size(); k += 2) {
        Value key = eval(*e.args[k], frame);
        if ((key.is_list() && !key.tuple) || key.is_dict()) fail_pos(e.args[k]->pos, "unhashable type: '" + key.type_name() + "'");
        d.dict->set(key, eval(*e.args[k + 1], frame));
      }
      return d;
    }
    case K::Attr: {
      Value obj = eval(*e.args[0], frame);
      if (obj.is_undefined()) fail_pos(e.pos, obj.s.empty() ? "value is undefined" : obj.s);
      return get_attr(*this, obj, e.name);
    }
    case K::Item: {
      Value obj = eval(*e.args[0], frame);
      if (obj.is_undefined()) fail_pos(e.pos, obj.s.empty() ? "value is undefined" : obj.s);
      return get_item(*this, obj, eval(*e.args[1], frame));
    }
    case K::Slice: {
      Value obj = eval(*e.args[0], frame);
      if (obj.is_undefined()) fail_pos(e.pos, obj.s.empty() ? "value is undefined" : obj.s);
      Value parts[3];
      for (int k = 0; k < 3; ++k) parts[k] = e.args[k + 1] ? eval(*e.args[k + 1], frame) : Value::none();
      return slice(obj, parts[0], parts[1], parts[2]);
    }
    case K::Call: return eval_call(e, frame);
    case K::Filter:
    case K::Test: {
      Value subject = eval(*e.args[0], frame);
      ValueList args;
      for (size_t k = 1; k < e.args.size(); ++k) args.push_back(eval(*e.args[k], frame));
      KwArgs kw;
      for (const auto& [name, x] : e.kwargs) kw.emplace_back(name, eval(*x, frame));
      try {
        if (e.kind == K::Filter) return filter(e.name, subject, args, kw);
        return Value::boolean(test(e.name, subject, args, kw) != e.negated);
      } catch (const TemplateRaised&) {
        throw;
      } catch (const Error& err) {
        std::string what = err.what();
        if (what.rfind("chat template: line ", 0) == 0) throw;
        fail_pos(e.pos, what.substr(what.rfind("chat template: ", 0) == 0 ? 15 : 0));
      }
    }
    case K::Neg:
    case K::Pos: {
      Value v = eval(*e.args[0], frame);
      if (v.is_undefined()) fail_pos(e.pos, v.s);
      if (!v.is_number()) fail_pos(e.pos, "bad operand type for unary " + std::string(e.kind == K::Neg ? "-" : "+") + ": '" + v.type_name() + "'");
      if (e.kind == K::Pos) return v.kind == Value::Kind::Bool ? Value::integer(v.i) : v;
      if (v.kind == Value::Kind::Float) return Value::number(-v.f);
      if (v.i == INT64_MIN) fail_pos(e.pos, "integer overflow");
      return Value::integer(-v.i);
    }
    case K::Not: return Value::boolean(!eval(*e.args[0], frame).truthy());
    case K::And: {
      Value l = eval(*e.args[0], frame);
      return l.truthy() ? eval(*e.args[1], frame) : l;
    }
    case K::Or: {
      Value l = eval(*e.args[0], frame);
      return l.truthy() ? l : eval(*e.args[1], frame);
    }
    case K::Cond: {
      if (eval(*e.args[1], frame).truthy()) return eval(*e.args[0], frame);
      if (e.args[2]) return eval(*e.args[2], frame);
      return Value::undefined("the inline if-expression evaluated to false and no else section was defined");
    }
    case K::Binary: {
      Value a = eval(*e.args[0], frame);
      Value b = eval(*e.args[1], frame);
      try {
        return binary_op(*this, e.name, a, b);
      } catch (const Error& err) {
        std::string what = err.what();
        if (what.rfind("chat template: line ", 0) == 0) throw;
        fail_pos(e.pos, what.substr(what.rfind("chat template: ", 0) == 0 ? 15 : 0));
      }
    }
    case K::Compare: {
      Value left = eval(*e.args[0], frame);
      for (size_t k = 0; k < e.ops.size(); ++k) {
        Value right = eval(*e.args[k + 1], frame);
        const std::string& op = e.ops[k];
        bool r;
        try {
          if (op == "==") r = equal(left, right);
          else if (op == "!=") r = !equal(left, right);
          else if (op == "<") r = less(left, right);
          else if (op == ">") r = less(right, left);
          else if (op == "<=") r = less(left, right) || equal(left, right);
          else if (op == ">=") r = less(right, left) || equal(left, right);
          else if (op == "in") r = contains(right, left);
          else r = !contains(right, left);
        } catch (const Error& err) {
          std::string what = err.what();
          fail_pos(e.pos, what.substr(what.rfind("chat template: ", 0) == 0 ? 15 : 0));
        }
        if (!r) return Value::boolean(false);
        left = std::move(right);
      }
      return Value::boolean(true);
    }
  }
  return Value::undefined();
}

}  // namespace tf::jinja
