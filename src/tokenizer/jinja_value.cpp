#include "tokenizer/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "base/error.h"
#include "tokenizer/jinja_text.h"

namespace tf::jinja {

namespace {
// Nested values deeper than this are refused so printing and comparing cannot overflow the stack.
constexpr int kMaxValueDepth = 256;

void check_depth(int depth) {
  TF_CHECK(depth <= kMaxValueDepth, "chat template: value nested deeper than ", kMaxValueDepth);
}
}  // namespace

Value Value::undefined(std::string hint) {
  Value v;
  v.s = std::move(hint);
  return v;
}
Value Value::none() {
  Value v;
  v.kind = Kind::None;
  return v;
}
Value Value::boolean(bool x) {
  Value v;
  v.kind = Kind::Bool;
  v.b = x;
  v.i = x ? 1 : 0;
  return v;
}
Value Value::integer(int64_t x) {
  Value v;
  v.kind = Kind::Int;
  v.i = x;
  return v;
}
Value Value::number(double x) {
  Value v;
  v.kind = Kind::Float;
  v.f = x;
  return v;
}
Value Value::string(std::string x) {
  Value v;
  v.kind = Kind::String;
  v.s = std::move(x);
  return v;
}
Value Value::make_list(ValueList items, bool tuple) {
  Value v;
  v.kind = Kind::List;
  v.tuple = tuple;
  v.list = std::make_shared<ValueList>(std::move(items));
  return v;
}
Value Value::make_dict() {
  Value v;
  v.kind = Kind::Dict;
  v.dict = std::make_shared<ValueDict>();
  return v;
}
Value Value::make_namespace() {
  Value v = make_dict();
  v.kind = Kind::Namespace;
  return v;
}
Value Value::callable(std::string name, NativeFn fn) {
  Value v;
  v.kind = Kind::Callable;
  v.fn = std::make_shared<Callable>(Callable{std::move(name), std::move(fn)});
  return v;
}

double Value::as_double() const { return kind == Kind::Float ? f : static_cast<double>(i); }
int64_t Value::as_int() const { return kind == Kind::Float ? static_cast<int64_t>(f) : i; }

bool Value::truthy() const {
  switch (kind) {
    case Kind::Undefined:
    case Kind::None: return false;
    case Kind::Bool: return b;
    case Kind::Int: return i != 0;
    case Kind::Float: return f != 0.0;
    case Kind::String: return !s.empty();
    case Kind::List: return !list->empty();
    case Kind::Dict: return !dict->items.empty();
    default: return true;
  }
}

std::string Value::type_name() const {
  switch (kind) {
    case Kind::Undefined: return "Undefined";
    case Kind::None: return "NoneType";
    case Kind::Bool: return "bool";
    case Kind::Int: return "int";
    case Kind::Float: return "float";
    case Kind::String: return "str";
    case Kind::List: return tuple ? "tuple" : "list";
    case Kind::Dict: return "dict";
    case Kind::Namespace: return "Namespace";
    case Kind::Callable: return "function";
  }
  return "object";
}

const Value* ValueDict::find(const Value& key) const {
  for (const auto& kv : items)
    if (equal(kv.first, key)) return &kv.second;
  return nullptr;
}
const Value* ValueDict::find(const std::string& key) const {
  for (const auto& kv : items)
    if (kv.first.kind == Value::Kind::String && kv.first.s == key) return &kv.second;
  return nullptr;
}
void ValueDict::set(const Value& key, Value v) {
  for (auto& kv : items)
    if (equal(kv.first, key)) {
      kv.second = std::move(v);
      return;
    }
  items.emplace_back(key, std::move(v));
}
bool ValueDict::erase(const Value& key) {
  for (auto it = items.begin(); it != items.end(); ++it)
    if (equal(it->first, key)) {
      items.erase(it);
      return true;
    }
  return false;
}

void fail_undefined(const Value& v) {
  fail("chat template: ", v.s.empty() ? std::string("value is undefined") : v.s);
}

namespace {
bool equal_at(const Value& a, const Value& b, int depth) {
  check_depth(depth);
  using K = Value::Kind;
  if (a.is_number() && b.is_number()) {
    if (a.kind == K::Float || b.kind == K::Float) return a.as_double() == b.as_double();
    return a.i == b.i;
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case K::Undefined:
    case K::None: return true;
    case K::String: return a.s == b.s;
    case K::List:
      if (a.tuple != b.tuple || a.list->size() != b.list->size()) return false;
      for (size_t k = 0; k < a.list->size(); ++k)
        if (!equal_at((*a.list)[k], (*b.list)[k], depth + 1)) return false;
      return true;
    case K::Dict: {
      if (a.dict->items.size() != b.dict->items.size()) return false;
      for (const auto& kv : a.dict->items) {
        const Value* other = b.dict->find(kv.first);
        if (!other || !equal_at(kv.second, *other, depth + 1)) return false;
      }
      return true;
    }
    case K::Namespace: return a.dict == b.dict;
    case K::Callable: return a.fn == b.fn;
    default: return false;
  }
}

bool less_at(const Value& a, const Value& b, int depth) {
  check_depth(depth);
  if (a.is_number() && b.is_number()) {
    if (a.kind == Value::Kind::Float || b.kind == Value::Kind::Float) return a.as_double() < b.as_double();
    return a.i < b.i;
  }
  if (a.is_string() && b.is_string()) return a.s < b.s;  // UTF-8 byte order is code point order
  if (a.is_list() && b.is_list() && a.tuple == b.tuple) {
    const auto &x = *a.list, &y = *b.list;
    for (size_t k = 0; k < x.size() && k < y.size(); ++k) {
      if (equal_at(x[k], y[k], depth + 1)) continue;
      return less_at(x[k], y[k], depth + 1);
    }
    return x.size() < y.size();
  }
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  fail("chat template: '<' not supported between instances of '", a.type_name(), "' and '",
       b.type_name(), "'");
}

void repr_into(std::string& out, const Value& v, int depth);

void str_into(std::string& out, const Value& v, int depth) {
  switch (v.kind) {
    case Value::Kind::Undefined: return;
    case Value::Kind::String: out += v.s; return;
    default: repr_into(out, v, depth);
  }
}

void repr_into(std::string& out, const Value& v, int depth) {
  check_depth(depth);
  using K = Value::Kind;
  switch (v.kind) {
    case K::Undefined: out += "Undefined"; return;  // how jinja2's Undefined prints inside a container
    case K::None: out += "None"; return;
    case K::Bool: out += v.b ? "True" : "False"; return;
    case K::Int: out += std::to_string(v.i); return;
    case K::Float: out += repr_float(v.f); return;
    case K::String: out += repr_string(v.s); return;
    case K::List: {
      out += v.tuple ? '(' : '[';
      for (size_t k = 0; k < v.list->size(); ++k) {
        if (k) out += ", ";
        repr_into(out, (*v.list)[k], depth + 1);
      }
      if (v.tuple && v.list->size() == 1) out += ',';
      out += v.tuple ? ')' : ']';
      return;
    }
    case K::Dict:
    case K::Namespace: {
      if (v.kind == K::Namespace) out += "<Namespace ";
      out += '{';
      bool first = true;
      for (const auto& kv : v.dict->items) {
        if (!first) out += ", ";
        first = false;
        repr_into(out, kv.first, depth + 1);
        out += ": ";
        repr_into(out, kv.second, depth + 1);
      }
      out += '}';
      if (v.kind == K::Namespace) out += '>';
      return;
    }
    case K::Callable: out += "<function " + v.fn->name + ">"; return;
  }
}
}  // namespace

bool equal(const Value& a, const Value& b) { return equal_at(a, b, 0); }
bool less(const Value& a, const Value& b) { return less_at(a, b, 0); }

std::string to_str(const Value& v) {
  std::string out;
  str_into(out, v, 0);
  return out;
}

std::string to_repr(const Value& v) {
  std::string out;
  repr_into(out, v, 0);
  return out;
}

std::string repr_float(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (d == 0.0) return std::signbit(d) ? "-0.0" : "0.0";
  // Shortest round-trip digits, laid out the way Python's float.__repr__ does.
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  bool neg = sci[0] == '-';
  if (neg) sci.erase(0, 1);
  size_t e = sci.find('e');
  int exp = std::stoi(sci.substr(e + 1));
  std::string digits;
  for (size_t k = 0; k < e; ++k)
    if (sci[k] != '.') digits += sci[k];
  std::string out = neg ? "-" : "";
  int n = static_cast<int>(digits.size());
  if (exp >= -5 && exp < 16) {
    if (exp < 0) {
      out += "0." + std::string(-exp - 1, '0') + digits;
    } else if (exp + 1 >= n) {
      out += digits + std::string(exp + 1 - n, '0') + ".0";
    } else {
      out += digits.substr(0, exp + 1) + "." + digits.substr(exp + 1);
    }
  } else {
    out += digits.substr(0, 1);
    if (n > 1) out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof(eb), "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    out += eb;
  }
  return out;
}

std::string repr_string(const std::string& s) {
  bool has_single = s.find('\'') != std::string::npos;
  bool has_double = s.find('"') != std::string::npos;
  char q = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, q);
  for (char32_t c : utf8_decode(s)) {
    if (c == '\\') out += "\\\\";
    else if (c == static_cast<char32_t>(q)) out += std::string("\\") + q;
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if ((c >= 0x20 && c < 0x7f) || (c > 0x7f && py_isprintable(c))) utf8_append(out, c);
    else {
      // Python escapes what it cannot print by the shortest of \xHH, \uHHHH and \UHHHHHHHH.
      char b[16];
      if (c <= 0xff) std::snprintf(b, sizeof(b), "\\x%02x", static_cast<unsigned>(c));
      else if (c <= 0xffff) std::snprintf(b, sizeof(b), "\\u%04x", static_cast<unsigned>(c));
      else std::snprintf(b, sizeof(b), "\\U%08x", static_cast<unsigned>(c));
      out += b;
    }
  }
  out += q;
  return out;
}

std::string json_quote(const std::string& s, bool ensure_ascii) {
  std::string out = "\"";
  auto escape = [&](unsigned cp) {
    char b[16];
    std::snprintf(b, sizeof(b), "\\u%04x", cp);
    out += b;
  };
  for (size_t k = 0; k < s.size(); ++k) {
    unsigned char c = static_cast<unsigned char>(s[k]);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          escape(c);
        } else if (c < 0x80 || !ensure_ascii) {
          out += static_cast<char>(c);
        } else {
          // ensure_ascii: one \uXXXX per UTF-16 unit, astral code points as surrogate pairs.
          size_t n = 1;
          while (k + n < s.size() && (static_cast<unsigned char>(s[k + n]) & 0xC0) == 0x80) ++n;
          for (char32_t cp : utf8_decode(s.substr(k, n))) {
            if (cp >= 0x10000) {
              cp -= 0x10000;
              escape(0xD800 + (cp >> 10));
              escape(0xDC00 + (cp & 0x3FF));
            } else {
              escape(cp);
            }
          }
          k += n - 1;
        }
    }
  }
  out += '"';
  return out;
}

namespace {
void json_into(std::string& out, const Value& v, const JsonOptions& opt, int level) {
  check_depth(level);
  using K = Value::Kind;
  auto newline = [&](int lvl) {
    if (opt.indent < 0) return;
    out += '\n';
    out.append(static_cast<size_t>(opt.indent) * lvl, ' ');
  };
  switch (v.kind) {
    case K::None: out += "null"; return;
    case K::Bool: out += v.b ? "true" : "false"; return;
    case K::Int: out += std::to_string(v.i); return;
    case K::Float:
      if (std::isnan(v.f)) out += "NaN";
      else if (std::isinf(v.f)) out += v.f > 0 ? "Infinity" : "-Infinity";
      else out += repr_float(v.f);
      return;
    case K::String: out += json_quote(v.s, opt.ensure_ascii); return;
    case K::List: {
      if (v.list->empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t k = 0; k < v.list->size(); ++k) {
        if (k) out += opt.item_sep;
        newline(level + 1);
        json_into(out, (*v.list)[k], opt, level + 1);
      }
      newline(level);
      out += ']';
      return;
    }
    case K::Dict: {
      if (v.dict->items.empty()) {
        out += "{}";
        return;
      }
      std::vector<const std::pair<Value, Value>*> items;
      for (const auto& kv : v.dict->items) items.push_back(&kv);
      if (opt.sort_keys)
        std::stable_sort(items.begin(), items.end(),
                         [](auto* x, auto* y) { return less(x->first, y->first); });
      out += '{';
      bool first = true;
      for (const auto* kv : items) {
        if (!first) out += opt.item_sep;
        first = false;
        newline(level + 1);
        const Value& key = kv->first;
        if (key.is_string()) out += json_quote(key.s, opt.ensure_ascii);
        else if (key.kind == K::Bool) out += key.b ? "\"true\"" : "\"false\"";
        else if (key.is_none()) out += "\"null\"";
        else if (key.is_number()) out += cat('"', to_repr(key), '"');
        else fail("chat template: tojson: keys must be str, int, float, bool or None, not ", key.type_name());
        out += opt.key_sep;
        json_into(out, kv->second, opt, level + 1);
      }
      newline(level);
      out += '}';
      return;
    }
    default:
      fail("chat template: tojson: Object of type ", v.type_name(), " is not JSON serializable");
  }
}
}  // namespace

std::string to_json(const Value& v, const JsonOptions& opt) {
  std::string out;
  json_into(out, v, opt, 0);
  return out;
}

template <typename Json>
Value from_json(const Json& j, int depth) {
  check_depth(depth);
  switch (j.type()) {
    case Json::value_t::null: return Value::none();
    case Json::value_t::boolean: return Value::boolean(j.template get<bool>());
    case Json::value_t::number_integer: return Value::integer(j.template get<int64_t>());
    case Json::value_t::number_unsigned: {
      uint64_t u = j.template get<uint64_t>();
      TF_CHECK(u <= static_cast<uint64_t>(INT64_MAX), "chat template: integer ", u, " out of range");
      return Value::integer(static_cast<int64_t>(u));
    }
    case Json::value_t::number_float: return Value::number(j.template get<double>());
    case Json::value_t::string: return Value::string(j.template get<std::string>());
    case nlohmann::json::value_t::array: {
      ValueList items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(from_json(e, depth + 1));
      return Value::make_list(std::move(items));
    }
    case Json::value_t::object: {
      Value d = Value::make_dict();
      for (auto it = j.begin(); it != j.end(); ++it)
        d.dict->items.emplace_back(Value::string(it.key()), from_json(it.value(), depth + 1));
      return d;
    }
    default: fail("chat template: unsupported JSON value in context");
  }
}

template Value from_json<nlohmann::json>(const nlohmann::json&, int);
template Value from_json<nlohmann::ordered_json>(const nlohmann::ordered_json&, int);

}  // namespace tf::jinja
