// Methods of str values as Python defines them ('a,b'.split(','), ' x '.strip(), '{}'.format(1), ...).
#include <utf8proc.h>

#include "tokenizer/jinja_eval.h"
#include "tokenizer/jinja_text.h"

namespace tf::jinja {

namespace {

Value method(std::string name, NativeFn fn) { return Value::callable(std::move(name), std::move(fn)); }

const std::string& str_arg(const ValueList& args, const KwArgs& kw, size_t i, const char* name, const char* method) {
  const Value* v = find_arg(args, kw, i, name);
  TF_CHECK(v && v->is_string(), "chat template: ", method, "() argument ", name, " must be str");
  return v->s;
}

int64_t int_arg(const ValueList& args, const KwArgs& kw, size_t i, const char* name, int64_t def) {
  const Value* v = find_arg(args, kw, i, name);
  if (!v || v->is_none()) return def;
  TF_CHECK(v->is_int(), "chat template: argument ", name, " must be an integer");
  return v->i;
}

bool in_category(char32_t c, std::initializer_list<utf8proc_category_t> cats) {
  auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  for (auto x : cats)
    if (cat == x) return true;
  return false;
}
bool is_alpha(char32_t c) {
  return in_category(c, {UTF8PROC_CATEGORY_LU, UTF8PROC_CATEGORY_LL, UTF8PROC_CATEGORY_LT, UTF8PROC_CATEGORY_LM,
                         UTF8PROC_CATEGORY_LO});
}
bool is_decimal(char32_t c) { return in_category(c, {UTF8PROC_CATEGORY_ND}); }
bool is_numeric(char32_t c) {
  return in_category(c, {UTF8PROC_CATEGORY_ND, UTF8PROC_CATEGORY_NL, UTF8PROC_CATEGORY_NO});
}

// str.isX(): every character passes and there is at least one.
Value char_class(const std::string& s, bool (*pred)(char32_t)) {
  auto cps = utf8_decode(s);
  if (cps.empty()) return Value::boolean(false);
  for (char32_t c : cps)
    if (!pred(c)) return Value::boolean(false);
  return Value::boolean(true);
}

// str.ljust / rjust / center / zfill: width counts code points; the result is bounded like any string.
Value justify(Evaluator& ev, const std::string& s, const std::string& how, ValueList& args, KwArgs& kw) {
  int64_t width = int_arg(args, kw, 0, "width", 0);
  TF_CHECK(width <= static_cast<int64_t>(ev.limits().max_output), "chat template: ", how, "() width too big");
  std::string fill = " ";
  if (how != "zfill") {
    const Value* f = find_arg(args, kw, 1, "fillchar");
    if (f) {
      TF_CHECK(f->is_string() && utf8_length(f->s) == 1, "chat template: The fill character must be exactly one character long");
      fill = f->s;
    }
  }
  size_t len = utf8_length(s);
  if (width <= static_cast<int64_t>(len)) return Value::string(s);
  size_t n = static_cast<size_t>(width) - len;
  auto rep = [&](size_t count) {
    std::string out;
    for (size_t k = 0; k < count; ++k) out += fill;
    return out;
  };
  std::string out;
  if (how == "ljust") out = s + rep(n);
  else if (how == "rjust") out = rep(n) + s;
  else if (how == "zfill") {
    size_t sign = !s.empty() && (s[0] == '+' || s[0] == '-') ? 1 : 0;
    out = s.substr(0, sign) + std::string(n, '0') + s.substr(sign);
  } else {
    // CPython's centering puts the odd space on the left only when both width and margin are odd.
    size_t left = n / 2 + (n & static_cast<size_t>(width) & 1);
    out = rep(left) + s + rep(n - left);
  }
  ev.charge(out.size());
  return Value::string(std::move(out));
}

std::vector<std::string> split_lines(const std::string& s, bool keepends) {
  std::vector<std::string> out;
  auto cps = utf8_decode(s);
  std::vector<char32_t> cur;
  for (size_t k = 0; k < cps.size(); ++k) {
    char32_t c = cps[k];
    bool brk = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E || c == 0x85 ||
               c == 0x2028 || c == 0x2029;
    if (!brk) {
      cur.push_back(c);
      continue;
    }
    if (keepends) cur.push_back(c);
    if (c == '\r' && k + 1 < cps.size() && cps[k + 1] == '\n') {
      if (keepends) cur.push_back('\n');
      ++k;
    }
    out.push_back(utf8_encode(cur));
    cur.clear();
  }
  if (!cur.empty()) out.push_back(utf8_encode(cur));
  return out;
}

bool is_title(const std::string& s) {
  bool cased_seen = false, prev_cased = false;
  for (char32_t c : utf8_decode(s)) {
    bool upper = in_category(c, {UTF8PROC_CATEGORY_LU, UTF8PROC_CATEGORY_LT});
    bool lower = in_category(c, {UTF8PROC_CATEGORY_LL});
    if (upper) {
      if (prev_cased) return false;
      prev_cased = cased_seen = true;
    } else if (lower) {
      if (!prev_cased) return false;
      prev_cased = cased_seen = true;
    } else {
      prev_cased = false;
    }
  }
  return cased_seen;
}

}  // namespace

Value string_method(const Value& obj, const std::string& name) {
  const std::string s = obj.s;
  auto strip_fn = [s, name](bool l, bool r) {
    return method(name, [s, l, r](Evaluator&, ValueList& args, KwArgs& kw) {
      const Value* c = find_arg(args, kw, 0, "chars");
      if (c && !c->is_none() && !c->is_string()) fail("chat template: strip arg must be None or str");
      return Value::string(py_strip(s, c && c->is_string() ? &c->s : nullptr, l, r));
    });
  };
  if (name == "strip") return strip_fn(true, true);
  if (name == "lstrip") return strip_fn(true, false);
  if (name == "rstrip") return strip_fn(false, true);
  if (name == "startswith" || name == "endswith") {
    bool start = name == "startswith";
    return method(name, [s, start](Evaluator&, ValueList& args, KwArgs& kw) {
      const Value* p = find_arg(args, kw, 0, "prefix");
      TF_CHECK(p, "chat template: startswith/endswith takes one argument");
      ValueList options = p->is_list() ? *p->list : ValueList{*p};
      for (const auto& o : options) {
        TF_CHECK(o.is_string(), "chat template: startswith/endswith first arg must be str or a tuple of str");
        if (o.s.size() <= s.size() && (start ? s.compare(0, o.s.size(), o.s) == 0
                                             : s.compare(s.size() - o.s.size(), o.s.size(), o.s) == 0))
          return Value::boolean(true);
      }
      return Value::boolean(false);
    });
  }
  if (name == "split" || name == "rsplit") {
    bool right = name == "rsplit";
    return method(name, [s, right](Evaluator& ev, ValueList& args, KwArgs& kw) {
      const Value* sep = find_arg(args, kw, 0, "sep");
      int64_t maxsplit = int_arg(args, kw, 1, "maxsplit", -1);
      if (sep && !sep->is_none() && !sep->is_string()) fail("chat template: split separator must be str or None");
      if (sep && sep->is_string() && sep->s.empty()) fail("chat template: empty separator");
      ev.charge(s.size());
      ValueList out;
      for (auto& part : py_split(s, sep && sep->is_string() ? &sep->s : nullptr, maxsplit, right))
        out.push_back(Value::string(std::move(part)));
      return Value::make_list(std::move(out));
    });
  }
  if (name == "splitlines") {
    return method(name, [s](Evaluator& ev, ValueList& args, KwArgs& kw) {
      const Value* keep = find_arg(args, kw, 0, "keepends");
      ev.charge(s.size());
      ValueList out;
      for (auto& line : split_lines(s, keep && keep->truthy())) out.push_back(Value::string(std::move(line)));
      return Value::make_list(std::move(out));
    });
  }
  if (name == "partition" || name == "rpartition") {
    bool right = name == "rpartition";
    return method(name, [s, right](Evaluator&, ValueList& args, KwArgs& kw) {
      const std::string& sep = str_arg(args, kw, 0, "sep", "partition");
      TF_CHECK(!sep.empty(), "chat template: empty separator");
      size_t at = right ? s.rfind(sep) : s.find(sep);
      if (at == std::string::npos)
        return Value::make_list(right ? ValueList{Value::string(""), Value::string(""), Value::string(s)}
                                      : ValueList{Value::string(s), Value::string(""), Value::string("")},
                                true);
      return Value::make_list({Value::string(s.substr(0, at)), Value::string(sep), Value::string(s.substr(at + sep.size()))},
                              true);
    });
  }
  if (name == "replace") {
    return method(name, [s](Evaluator& ev, ValueList& args, KwArgs& kw) {
      const std::string& from = str_arg(args, kw, 0, "old", "replace");
      const std::string& to = str_arg(args, kw, 1, "new", "replace");
      int64_t count = int_arg(args, kw, 2, "count", -1);
      uint64_t hits = static_cast<uint64_t>(py_count(s, from));
      TF_CHECK(to.size() <= from.size() || s.size() + hits * (to.size() - from.size()) <= ev.limits().max_output,
               "chat template: replace result longer than ", ev.limits().max_output, " bytes");
      std::string r = py_replace(s, from, to, count);
      ev.charge(r.size());
      return Value::string(std::move(r));
    });
  }
  if (name == "removeprefix" || name == "removesuffix") {
    bool prefix = name == "removeprefix";
    return method(name, [s, prefix](Evaluator&, ValueList& args, KwArgs& kw) {
      const std::string& a = str_arg(args, kw, 0, prefix ? "prefix" : "suffix", prefix ? "removeprefix" : "removesuffix");
      if (a.size() <= s.size() && (prefix ? s.compare(0, a.size(), a) == 0 : s.compare(s.size() - a.size(), a.size(), a) == 0))
        return Value::string(prefix ? s.substr(a.size()) : s.substr(0, s.size() - a.size()));
      return Value::string(s);
    });
  }
  if (name == "ljust" || name == "rjust" || name == "center" || name == "zfill") {
    return method(name, [s, name](Evaluator& ev, ValueList& args, KwArgs& kw) { return justify(ev, s, name, args, kw); });
  }
  if (name == "format") {
    return method(name, [s](Evaluator& ev, ValueList& args, KwArgs& kw) { return Value::string(str_format(ev, s, args, kw)); });
  }
  auto simple = [&](std::string (*fn)(const std::string&)) {
    return method(name, [s, fn](Evaluator&, ValueList&, KwArgs&) { return Value::string(fn(s)); });
  };
  if (name == "upper") return simple(py_upper);
  if (name == "lower") return simple(py_lower);
  if (name == "title") return simple(py_title);
  if (name == "capitalize") return simple(py_capitalize);
  if (name == "casefold") return simple(py_casefold);
  if (name == "swapcase") return simple(py_swapcase);
  if (name == "find" || name == "rfind" || name == "count" || name == "index" || name == "rindex") {
    return method(name, [s, name](Evaluator&, ValueList& args, KwArgs& kw) {
      const std::string& sub = str_arg(args, kw, 0, "sub", name.c_str());
      if (name == "count") return Value::integer(py_count(s, sub));
      bool right = name[0] == 'r';
      size_t at = right ? s.rfind(sub) : s.find(sub);
      TF_CHECK(name.find("find") != std::string::npos || at != std::string::npos, "chat template: substring not found");
      return Value::integer(at == std::string::npos ? -1 : static_cast<int64_t>(utf8_length(s.substr(0, at))));
    });
  }
  if (name == "join") {
    return method(name, [s](Evaluator& ev, ValueList& args, KwArgs& kw) {
      const Value* seq = find_arg(args, kw, 0, "iterable");
      TF_CHECK(seq, "chat template: join() takes exactly one argument");
      std::string out;
      bool first = true;
      for (const auto& item : iterate(*seq)) {
        TF_CHECK(item.is_string(), "chat template: sequence item: expected str instance, ", item.type_name(), " found");
        if (!first) out += s;
        first = false;
        out += item.s;
        TF_CHECK(out.size() <= ev.limits().max_output, "chat template: join result too long");
      }
      ev.charge(out.size());
      return Value::string(std::move(out));
    });
  }
  auto predicate = [&](bool (*pred)(char32_t)) {
    return method(name, [s, pred](Evaluator&, ValueList&, KwArgs&) { return char_class(s, pred); });
  };
  if (name == "isdigit" || name == "isdecimal") return predicate(is_decimal);
  if (name == "isnumeric") return predicate(is_numeric);
  if (name == "isalpha") return predicate(is_alpha);
  if (name == "isalnum") return predicate([](char32_t c) { return is_alpha(c) || is_numeric(c); });
  if (name == "isspace") return predicate(py_isspace);
  if (name == "isprintable") {
    return method(name, [s](Evaluator&, ValueList&, KwArgs&) {
      for (char32_t c : utf8_decode(s))
        if (!py_isprintable(c)) return Value::boolean(false);
      return Value::boolean(true);
    });
  }
  if (name == "islower" || name == "isupper" || name == "istitle") {
    return method(name, [s, name](Evaluator&, ValueList&, KwArgs&) {
      if (name == "istitle") return Value::boolean(is_title(s));
      bool cased = false;
      for (char32_t c : utf8_decode(s)) cased = cased || in_category(c, {UTF8PROC_CATEGORY_LU, UTF8PROC_CATEGORY_LL, UTF8PROC_CATEGORY_LT});
      if (!cased) return Value::boolean(false);
      return Value::boolean(name == "islower" ? py_lower(s) == s : py_upper(s) == s);
    });
  }
  return Value::undefined(cat("'str object' has no attribute '", name, "'"));
}

}  // namespace tf::jinja
