#pragma once
// Parsed template: expression and statement trees the evaluator walks.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja_value.h"

namespace tf::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    Const, Name, List, Tuple, Dict, Attr, Item, Slice, Call, Filter, Test,
    Neg, Pos, Not, Binary, Compare, And, Or, Cond
  };
  Kind kind = Kind::Const;
  size_t pos = 0;
  Value value;       // Const
  std::string name;  // Name, Attr, Filter, Test, Binary operator
  // Operands. Attr/Item/Filter/Test: args[0] is the subject; Call: args[0] is the callee;
  // Slice: subject, start, stop, step (null when left out); Dict: key, value pairs in turn;
  // Cond: then, condition, else (null when left out).
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;  // Compare: one operator between each pair of operands
  bool negated = false;          // Test written as "is not"
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

struct Node {
  enum class Kind { Text, Output, If, For, Set, SetBlock, Macro, CallBlock, Break, Continue, FilterBlock, Scope };
  Kind kind = Kind::Text;
  size_t pos = 0;
  std::string text;                // Text; Macro name
  ExprPtr expr;                    // Output, Set value, For iterable, CallBlock call
  std::vector<ExprPtr> conds;      // If: one condition per branch
  std::vector<Body> branches;      // If: bodies, an extra last one is the else
  std::vector<std::string> targets;  // For and Set names; Set ns.attr: {ns, attr} with attr_target
  bool attr_target = false;
  ExprPtr cond;                    // For: inline if filter
  Body body, else_body;
  std::vector<std::pair<std::string, ExprPtr>> params;  // Macro and CallBlock caller parameters with defaults
  // Macro: the body reads varargs / kwargs / caller, so extra arguments and a call block's caller are accepted.
  bool uses_varargs = false, uses_kwargs = false, uses_caller = false;
  std::vector<ExprPtr> filters;    // SetBlock / FilterBlock: Filter nodes whose subject is empty
};

struct Program {
  std::string source;  // normalized, for error locations
  Body body;
};

// Parses normalized source; syntax errors throw tf::Error with line and column.
std::shared_ptr<Program> parse_template(const std::string& source);

}  // namespace tf::jinja
