#pragma once
// Walks a parsed template with jinja2's scoping: each for-iteration and macro call gets a frame,
// if-blocks share their parent's frame, and {% set %} writes the innermost frame.
#include <ctime>
#include <memory>
#include <string>
#include <unordered_map>

#include "base/error.h"
#include "tokenizer/jinja_ast.h"

namespace tf::jinja {

// Bounds on hostile templates (BAD_INPUTS 24): each one ends rendering with tf::Error.
struct Limits {
  size_t max_output = 4u << 20;        // bytes of any one string, the output included
  int64_t max_steps = 200000;          // loop iterations plus macro calls
  size_t max_work_bytes = 256u << 20;  // bytes built by string and list operations
  int max_call_depth = 64;             // nested macro calls
  int64_t max_range = 100000;          // jinja2's sandbox MAX_RANGE
};

struct Frame {
  std::unordered_map<std::string, Value> vars;
  std::shared_ptr<Frame> parent;
};
using FramePtr = std::shared_ptr<Frame>;

// Thrown for raise_exception(msg): what() is exactly the template's message.
class TemplateRaised : public Error {
 public:
  explicit TemplateRaised(const std::string& msg) : Error(msg) {}
};

class Evaluator {
 public:
  Evaluator(const Program& prog, const Limits& limits, std::time_t now, bool utc);

  std::string render(const Value& context);

  // Used by filters, tests and methods.
  Value call(const Value& callee, ValueList& args, KwArgs& kwargs);
  Value filter(const std::string& name, const Value& subject, ValueList& args, KwArgs& kwargs);
  bool test(const std::string& name, const Value& subject, ValueList& args, KwArgs& kwargs);
  void charge(size_t bytes);  // work budget for strings and lists being built
  void step();                // one loop iteration or macro call
  std::string strftime_now(const std::string& fmt) const;
  const Limits& limits() const { return limits_; }

 private:
  enum class Flow { Normal, Break, Continue };
  const Program& prog_;
  Limits limits_;
  std::time_t now_;
  bool utc_;
  int64_t steps_ = 0;
  size_t work_ = 0;
  int call_depth_ = 0;
  FramePtr root_;
  std::unordered_map<std::string, Value> globals_;

  Flow exec(const Body& body, std::string& out, const FramePtr& frame);
  Flow exec_node(const Node& n, std::string& out, const FramePtr& frame);
  Flow exec_for(const Node& n, std::string& out, const FramePtr& frame);
  void exec_set(const Node& n, const FramePtr& frame);
  Value make_macro(const Node& n, const FramePtr& frame);
  // Binds a macro's (or a call block caller's) parameters, varargs, kwargs and caller into f.
  void bind_params(const Node& n, const std::string& what, const FramePtr& f, ValueList& args, KwArgs& kwargs);
  Value run_body(const Node& n, const FramePtr& f);
  Value exec_call_block(const Node& n, const FramePtr& frame);
  Value eval(const Expr& e, const FramePtr& frame);
  Value eval_call(const Expr& e, const FramePtr& frame);
  Value lookup(const std::string& name, const FramePtr& frame) const;
  void append(std::string& out, const std::string& text);
  [[noreturn]] void fail_pos(size_t pos, const std::string& what) const;
  void install_globals();
};

// Python semantics for the operators of the expression language.
Value binary_op(Evaluator& ev, const std::string& op, const Value& a, const Value& b);
bool contains(const Value& container, const Value& item);
Value get_attr(Evaluator& ev, const Value& obj, const std::string& name);
Value get_item(Evaluator& ev, const Value& obj, const Value& key);
Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step);
// Items of a value being iterated: list items, dict keys, string characters.
ValueList iterate(const Value& v);

// Python's fmt % args (jinja2's format filter): args is a tuple of values, or a mapping for %(key)s.
std::string percent_format(Evaluator& ev, const std::string& fmt, const Value& args);
// Python's fmt.format(*args, **kwargs); depth bounds nested fields inside format specs.
std::string str_format(Evaluator& ev, const std::string& fmt, const ValueList& args, const KwArgs& kwargs,
                       int depth = 0);
// A bound method of a str value ('abc'.strip); undefined when Python's str has no such method.
Value string_method(const Value& obj, const std::string& name);

// Keyword/positional argument lookup for natives: index-th positional or the named keyword.
const Value* find_arg(const ValueList& args, const KwArgs& kwargs, size_t index, const char* name);

}  // namespace tf::jinja
