// Operators, item and attribute access, and global functions with Python semantics.
#include <cmath>
#include <optional>

#include "tokenizer/jinja_eval.h"
#include "tokenizer/jinja_text.h"

namespace tf::jinja {

const Value* find_arg(const ValueList& args, const KwArgs& kwargs, size_t index, const char* name) {
  if (index < args.size()) return &args[index];
  for (const auto& [k, v] : kwargs)
    if (k == name) return &v;
  return nullptr;
}

ValueList iterate(const Value& v) {
  switch (v.kind) {
    case Value::Kind::Undefined: return {};
    case Value::Kind::List: return *v.list;
    case Value::Kind::Dict: {
      ValueList keys;
      for (const auto& kv : v.dict->items) keys.push_back(kv.first);
      return keys;
    }
    case Value::Kind::String: {
      ValueList chars;
      for (char32_t c : utf8_decode(v.s)) {
        std::string s;
        utf8_append(s, c);
        chars.push_back(Value::string(std::move(s)));
      }
      return chars;
    }
    default: fail("chat template: '", v.type_name(), "' object is not iterable");
  }
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind) {
    case Value::Kind::Undefined: return false;
    case Value::Kind::String:
      if (!item.is_string()) fail("chat template: 'in <string>' requires string as left operand, not ", item.type_name());
      return container.s.find(item.s) != std::string::npos;
    case Value::Kind::List:
      for (const auto& x : *container.list)
        if (equal(x, item)) return true;
      return false;
    case Value::Kind::Dict: return container.dict->find(item) != nullptr;
    default: fail("chat template: argument of type '", container.type_name(), "' is not iterable");
  }
}

namespace {

void check_overflow(bool overflow) { TF_CHECK(!overflow, "chat template: integer overflow"); }

Value repeat(Evaluator& ev, const Value& seq, int64_t n) {
  if (n <= 0) return seq.is_string() ? Value::string("") : Value::make_list({}, seq.tuple);
  size_t unit = seq.is_string() ? seq.s.size() : seq.list->size() * sizeof(Value);
  TF_CHECK(unit == 0 || static_cast<uint64_t>(n) <= ev.limits().max_output / unit,
           "chat template: repetition result longer than ", ev.limits().max_output, " bytes");
  ev.charge(unit * static_cast<size_t>(n));
  if (seq.is_string()) {
    std::string out;
    for (int64_t k = 0; k < n; ++k) out += seq.s;
    return Value::string(std::move(out));
  }
  ValueList out;
  for (int64_t k = 0; k < n; ++k) out.insert(out.end(), seq.list->begin(), seq.list->end());
  return Value::make_list(std::move(out), seq.tuple);
}

double floor_mod(double a, double b) {
  double m = std::fmod(a, b);
  if (m != 0 && ((m < 0) != (b < 0))) m += b;
  return m;
}

}  // namespace

Value binary_op(Evaluator& ev, const std::string& op, const Value& a, const Value& b) {
  if (op == "~") {
    std::string s = to_str(a) + to_str(b);
    TF_CHECK(s.size() <= ev.limits().max_output, "chat template: string longer than ", ev.limits().max_output, " bytes");
    ev.charge(s.size());
    return Value::string(std::move(s));
  }
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  const bool nums = a.is_number() && b.is_number();
  const bool ints = a.is_int() && b.is_int();
  auto unsupported = [&]() {
    fail("chat template: unsupported operand type(s) for ", op, ": '", a.type_name(), "' and '", b.type_name(), "'");
  };
  if (op == "+") {
    if (ints) {
      int64_t r;
      check_overflow(__builtin_add_overflow(a.i, b.i, &r));
      return Value::integer(r);
    }
    if (nums) return Value::number(a.as_double() + b.as_double());
    if (a.is_string() && b.is_string()) {
      TF_CHECK(a.s.size() + b.s.size() <= ev.limits().max_output, "chat template: string longer than ",
               ev.limits().max_output, " bytes");
      ev.charge(a.s.size() + b.s.size());
      return Value::string(a.s + b.s);
    }
    if (a.is_list() && b.is_list() && a.tuple == b.tuple) {
      ev.charge((a.list->size() + b.list->size()) * sizeof(Value));
      ValueList out = *a.list;
      out.insert(out.end(), b.list->begin(), b.list->end());
      return Value::make_list(std::move(out), a.tuple);
    }
    unsupported();
  }
  if (op == "-") {
    if (ints) {
      int64_t r;
      check_overflow(__builtin_sub_overflow(a.i, b.i, &r));
      return Value::integer(r);
    }
    if (nums) return Value::number(a.as_double() - b.as_double());
    unsupported();
  }
  if (op == "*") {
    if (ints) {
      int64_t r;
      check_overflow(__builtin_mul_overflow(a.i, b.i, &r));
      return Value::integer(r);
    }
    if (nums) return Value::number(a.as_double() * b.as_double());
    if ((a.is_string() || a.is_list()) && b.is_int()) return repeat(ev, a, b.i);
    if ((b.is_string() || b.is_list()) && a.is_int()) return repeat(ev, b, a.i);
    unsupported();
  }
  if (!nums) unsupported();
  if (op == "/") {
    TF_CHECK(b.as_double() != 0.0, "chat template: division by zero");
    return Value::number(a.as_double() / b.as_double());
  }
  if (op == "//" || op == "%") {
    if (ints) {
      TF_CHECK(b.i != 0, "chat template: integer division or modulo by zero");
      TF_CHECK(!(a.i == INT64_MIN && b.i == -1), "chat template: integer overflow");
      int64_t q = a.i / b.i, m = a.i % b.i;
      if (m != 0 && ((m < 0) != (b.i < 0))) {
        q -= 1;
        m += b.i;
      }
      return Value::integer(op == "//" ? q : m);
    }
    double x = a.as_double(), y = b.as_double();
    TF_CHECK(y != 0.0, "chat template: float division by zero");
    if (op == "%") return Value::number(floor_mod(x, y));
    return Value::number(std::floor((x - floor_mod(x, y)) / y));
  }
  if (op == "**") {
    if (ints && b.i >= 0) {
      int64_t r = 1, base = a.i, e = b.i;
      while (e > 0) {
        if (e & 1) check_overflow(__builtin_mul_overflow(r, base, &r));
        e >>= 1;
        if (e > 0) check_overflow(__builtin_mul_overflow(base, base, &base));
      }
      return Value::integer(r);
    }
    if (a.as_double() == 0.0 && b.as_double() < 0) fail("chat template: 0.0 cannot be raised to a negative power");
    TF_CHECK(a.as_double() >= 0 || std::floor(b.as_double()) == b.as_double(),
             "chat template: a negative number to a fractional power is complex, which templates do not support");
    return Value::number(std::pow(a.as_double(), b.as_double()));
  }
  unsupported();
  return Value::undefined();  // not reached: unsupported() throws
}

namespace {

Value method(std::string name, NativeFn fn) { return Value::callable(std::move(name), std::move(fn)); }

Value dict_method(const Value& obj, const std::string& name) {
  auto d = obj.dict;
  if (name == "get") {
    return method(name, [d](Evaluator&, ValueList& args, KwArgs& kw) {
      TF_CHECK(!args.empty(), "chat template: get expected at least 1 argument");
      const Value* v = d->find(args[0]);
      if (v) return *v;
      const Value* def = find_arg(args, kw, 1, "default");
      return def ? *def : Value::none();
    });
  }
  if (name == "items" || name == "keys" || name == "values") {
    return method(name, [d, name](Evaluator&, ValueList&, KwArgs&) {
      ValueList out;
      for (const auto& kv : d->items) {
        if (name == "items") out.push_back(Value::make_list({kv.first, kv.second}, true));
        else out.push_back(name == "keys" ? kv.first : kv.second);
      }
      return Value::make_list(std::move(out));
    });
  }
  if (name == "copy") return method(name, [d](Evaluator&, ValueList&, KwArgs&) {
      Value c = Value::make_dict();
      *c.dict = *d;
      return c;
    });
  return Value::undefined();
}

Value list_method(const Value& obj, const std::string& name) {
  auto l = obj.list;
  if (name == "index" || name == "count") {
    return method(name, [l, name](Evaluator&, ValueList& args, KwArgs&) {
      TF_CHECK(!args.empty(), "chat template: ", name, "() takes one argument");
      int64_t n = 0;
      for (size_t k = 0; k < l->size(); ++k) {
        if (!equal((*l)[k], args[0])) continue;
        if (name == "index") return Value::integer(static_cast<int64_t>(k));
        ++n;
      }
      TF_CHECK(name == "count", "chat template: ", to_repr(args[0]), " is not in list");
      return Value::integer(n);
    });
  }
  return Value::undefined();
}

// Methods the immutable sandbox refuses, so templates calling them fail exactly as in transformers.
bool is_mutating(const Value& obj, const std::string& name) {
  static const char* kList[] = {"append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse"};
  static const char* kDict[] = {"update", "pop", "popitem", "setdefault", "clear"};
  if (obj.is_list() && !obj.tuple)
    for (const char* n : kList)
      if (name == n) return true;
  if (obj.is_dict())
    for (const char* n : kDict)
      if (name == n) return true;
  return false;
}

}  // namespace

Value get_attr(Evaluator& ev, const Value& obj, const std::string& name) {
  if (obj.is_undefined()) fail_undefined(obj);
  TF_CHECK(!is_mutating(obj, name), "chat template: access to attribute '", name, "' of '", obj.type_name(),
           "' object is unsafe.");
  switch (obj.kind) {
    case Value::Kind::String: return string_method(obj, name);
    case Value::Kind::Dict: {
      Value m = dict_method(obj, name);
      if (!m.is_undefined()) return m;
      const Value* v = obj.dict->find(name);
      return v ? *v : Value::undefined("'dict object' has no attribute '" + name + "'");
    }
    case Value::Kind::Namespace: {
      const Value* v = obj.dict->find(name);
      return v ? *v : Value::undefined("'Namespace object' has no attribute '" + name + "'");
    }
    case Value::Kind::List: {
      Value m = list_method(obj, name);
      if (!m.is_undefined()) return m;
      break;
    }
    default: break;
  }
  return Value::undefined(cat("'", to_repr(obj).substr(0, 40), "' has no attribute '", name, "'"));
}

Value get_item(Evaluator& ev, const Value& obj, const Value& key) {
  if (obj.is_undefined()) fail_undefined(obj);
  switch (obj.kind) {
    case Value::Kind::Dict: {
      const Value* v = obj.dict->find(key);
      if (v) return *v;
      break;
    }
    case Value::Kind::Namespace: {
      const Value* v = obj.dict->find(key);
      if (v) return *v;
      break;
    }
    case Value::Kind::List:
    case Value::Kind::String: {
      if (!key.is_int()) break;
      int64_t n = obj.is_list() ? static_cast<int64_t>(obj.list->size()) : static_cast<int64_t>(utf8_length(obj.s));
      int64_t k = key.i < 0 ? key.i + n : key.i;
      if (k < 0 || k >= n) return Value::undefined("'" + obj.type_name() + " object' has no attribute " + to_str(key));
      if (obj.is_list()) return (*obj.list)[static_cast<size_t>(k)];
      auto cps = utf8_decode(obj.s);
      std::string c;
      utf8_append(c, cps[static_cast<size_t>(k)]);
      return Value::string(std::move(c));
    }
    default: break;
  }
  if (key.is_string()) {
    Value a = get_attr(ev, obj, key.s);
    if (!a.is_undefined()) return a;
  }
  return Value::undefined(cat("'", obj.type_name(), " object' has no attribute ", to_repr(key)));
}

Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step) {
  if (!obj.is_list() && !obj.is_string()) fail("chat template: '", obj.type_name(), "' object is not subscriptable");
  auto idx = [](const Value& v, const char* what) -> std::optional<int64_t> {
    if (v.is_none()) return std::nullopt;
    TF_CHECK(v.is_int(), "chat template: slice ", what, " must be an integer or None");
    return v.i;
  };
  std::vector<char32_t> cps;
  if (obj.is_string()) cps = utf8_decode(obj.s);
  const int64_t n = obj.is_list() ? static_cast<int64_t>(obj.list->size()) : static_cast<int64_t>(cps.size());
  int64_t st = idx(step, "step").value_or(1);
  TF_CHECK(st != 0, "chat template: slice step cannot be zero");
  auto adjust = [&](std::optional<int64_t> v, int64_t def) {
    if (!v) return def;
    int64_t x = *v;
    if (x < 0) x = std::max<int64_t>(x + n, st < 0 ? -1 : 0);
    else if (x >= n) x = st < 0 ? n - 1 : n;
    return x;
  };
  int64_t b = adjust(idx(start, "start"), st < 0 ? n - 1 : 0);
  int64_t e = adjust(idx(stop, "stop"), st < 0 ? -1 : n);
  ValueList items;
  std::vector<char32_t> chars;
  for (int64_t k = b; st > 0 ? k < e : k > e; k += st) {
    if (obj.is_list()) items.push_back((*obj.list)[static_cast<size_t>(k)]);
    else chars.push_back(cps[static_cast<size_t>(k)]);
  }
  if (obj.is_string()) return Value::string(utf8_encode(chars));
  return Value::make_list(std::move(items), obj.tuple);
}

void Evaluator::install_globals() {
  globals_["range"] = Value::callable("range", [](Evaluator& ev, ValueList& args, KwArgs&) {
    TF_CHECK(!args.empty() && args.size() <= 3, "chat template: range expected 1 to 3 arguments");
    for (const auto& a : args) TF_CHECK(a.is_int(), "chat template: range() arguments must be integers");
    int64_t start = args.size() == 1 ? 0 : args[0].i, stop = args.size() == 1 ? args[0].i : args[1].i;
    int64_t step = args.size() == 3 ? args[2].i : 1;
    TF_CHECK(step != 0, "chat template: range() arg 3 must not be zero");
    long double count = step > 0 ? std::ceil((static_cast<long double>(stop) - start) / step)
                                 : std::ceil((static_cast<long double>(start) - stop) / -step);
    TF_CHECK(count <= ev.limits().max_range, "chat template: Range too big. The sandbox blocks ranges larger than MAX_RANGE (",
             ev.limits().max_range, ").");
    ValueList out;
    for (int64_t k = start; step > 0 ? k < stop : k > stop; k += step) out.push_back(Value::integer(k));
    return Value::make_list(std::move(out));
  });
  globals_["namespace"] = Value::callable("namespace", [](Evaluator&, ValueList& args, KwArgs& kw) {
    Value ns = Value::make_namespace();
    for (const auto& a : args) {
      TF_CHECK(a.is_dict(), "chat template: namespace() positional argument must be a dict");
      for (const auto& kv : a.dict->items) ns.dict->set(kv.first, kv.second);
    }
    for (const auto& [k, v] : kw) ns.dict->set(Value::string(k), v);
    return ns;
  });
  globals_["joiner"] = Value::callable("joiner", [](Evaluator&, ValueList& args, KwArgs& kw) {
    const Value* sep = find_arg(args, kw, 0, "sep");
    std::string text = sep ? to_str(*sep) : ", ";
    auto used = std::make_shared<bool>(false);
    return Value::callable("joiner", [text, used](Evaluator&, ValueList&, KwArgs&) {
      bool first = !*used;
      *used = true;
      return Value::string(first ? "" : text);
    });
  });
  globals_["cycler"] = Value::callable("cycler", [](Evaluator&, ValueList& args, KwArgs&) {
    TF_CHECK(!args.empty(), "chat template: at least one item has to be provided");
    // A namespace holding next(), reset() and current; the methods reach it weakly so it can be freed.
    Value c = Value::make_namespace();
    auto items = std::make_shared<ValueList>(args);
    auto pos = std::make_shared<size_t>(0);
    std::weak_ptr<ValueDict> self = c.dict;
    c.dict->set(Value::string("current"), (*items)[0]);
    c.dict->set(Value::string("next"), Value::callable("next", [items, pos, self](Evaluator&, ValueList&, KwArgs&) {
      Value out = (*items)[*pos];
      *pos = (*pos + 1) % items->size();
      if (auto d = self.lock()) d->set(Value::string("current"), (*items)[*pos]);
      return out;
    }));
    c.dict->set(Value::string("reset"), Value::callable("reset", [items, pos, self](Evaluator&, ValueList&, KwArgs&) {
      *pos = 0;
      if (auto d = self.lock()) d->set(Value::string("current"), (*items)[0]);
      return Value::none();
    }));
    return c;
  });
  globals_["lipsum"] = Value::callable("lipsum", [](Evaluator&, ValueList&, KwArgs&) -> Value {
    fail("chat template: lipsum() makes random text, which a chat template cannot reproduce");
  });
  globals_["dict"] = Value::callable("dict", [](Evaluator&, ValueList& args, KwArgs& kw) {
    Value d = Value::make_dict();
    for (const auto& a : args) {
      TF_CHECK(a.is_dict(), "chat template: dict() positional argument must be a dict");
      for (const auto& kv : a.dict->items) d.dict->set(kv.first, kv.second);
    }
    for (const auto& [k, v] : kw) d.dict->set(Value::string(k), v);
    return d;
  });
  globals_["raise_exception"] = Value::callable("raise_exception", [](Evaluator&, ValueList& args, KwArgs&) -> Value {
    throw TemplateRaised(args.empty() ? std::string() : to_str(args[0]));
  });
  globals_["strftime_now"] = Value::callable("strftime_now", [](Evaluator& ev, ValueList& args, KwArgs&) {
    TF_CHECK(args.size() == 1 && args[0].is_string(), "chat template: strftime_now(format) takes one string");
    return Value::string(ev.strftime_now(args[0].s));
  });
}

}  // namespace tf::jinja
