#pragma once
// Values of the Jinja subset: Python semantics for truthiness, equality, str() and repr().
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace tf::jinja {

struct Value;
class Evaluator;

using ValueList = std::vector<Value>;
using KwArgs = std::vector<std::pair<std::string, Value>>;
using NativeFn = std::function<Value(Evaluator&, ValueList& args, KwArgs& kwargs)>;

struct ValueDict;
struct Callable {
  std::string name;
  NativeFn fn;
};

struct Value {
  enum class Kind { Undefined, None, Bool, Int, Float, String, List, Dict, Namespace, Callable };
  Kind kind = Kind::Undefined;
  bool tuple = false;  // a list that came from a tuple literal prints with ()
  bool b = false;
  int64_t i = 0;
  double f = 0.0;
  std::string s;  // String payload; for Undefined the error text a strict use reports
  std::shared_ptr<ValueList> list;
  std::shared_ptr<ValueDict> dict;  // Dict and Namespace
  std::shared_ptr<Callable> fn;

  static Value undefined(std::string hint = {});
  static Value none();
  static Value boolean(bool v);
  static Value integer(int64_t v);
  static Value number(double v);
  static Value string(std::string v);
  static Value make_list(ValueList items = {}, bool tuple = false);
  static Value make_dict();
  static Value make_namespace();
  static Value callable(std::string name, NativeFn fn);

  bool is_undefined() const { return kind == Kind::Undefined; }
  bool is_none() const { return kind == Kind::None; }
  bool is_string() const { return kind == Kind::String; }
  bool is_list() const { return kind == Kind::List; }
  bool is_dict() const { return kind == Kind::Dict; }
  bool is_int() const { return kind == Kind::Int || kind == Kind::Bool; }
  bool is_number() const { return is_int() || kind == Kind::Float; }
  bool is_mapping() const { return kind == Kind::Dict || kind == Kind::Namespace; }
  double as_double() const;
  int64_t as_int() const;

  bool truthy() const;
  std::string type_name() const;  // Python's name, for error messages
};

struct ValueDict {
  std::vector<std::pair<Value, Value>> items;
  const Value* find(const Value& key) const;
  const Value* find(const std::string& key) const;
  void set(const Value& key, Value v);
  bool erase(const Value& key);
};

// Raises a strict-undefined error for a value that cannot be used as it is.
[[noreturn]] void fail_undefined(const Value& v);

bool equal(const Value& a, const Value& b);
// Python ordering (<); throws for unorderable pairs.
bool less(const Value& a, const Value& b);
// Python str(): what {{ x }} prints.
std::string to_str(const Value& v);
// Python repr(): how items print inside lists and dicts.
std::string to_repr(const Value& v);
std::string repr_float(double d);
std::string repr_string(const std::string& s);

struct JsonOptions {
  int indent = -1;  // -1: single line
  std::string item_sep, key_sep;
  bool sort_keys = false;
  bool ensure_ascii = false;  // transformers' tojson default; true escapes every non-ASCII character
};
// json.dumps(...) as transformers' tojson filter calls it.
std::string to_json(const Value& v, const JsonOptions& opt);
std::string json_quote(const std::string& s, bool ensure_ascii = false);

// Converts the render context; depth and size are bounded so hostile input cannot overflow the stack.
// nlohmann::ordered_json keeps the key order Python's json.loads keeps; nlohmann::json sorts keys.
template <typename Json>
Value from_json(const Json& j, int depth = 0);

}  // namespace tf::jinja
