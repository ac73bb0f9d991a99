// Filters and tests of jinja2's default environment, with transformers' tojson.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "tokenizer/jinja_eval.h"
#include "tokenizer/jinja_text.h"

namespace tf::jinja {

namespace {

Value arg_or(const ValueList& args, const KwArgs& kw, size_t i, const char* name, Value def) {
  const Value* v = find_arg(args, kw, i, name);
  return v ? *v : def;
}

// jinja2's attribute paths: "a.b.0" walks items, integers index lists.
Value attribute_path(Evaluator& ev, const Value& obj, const std::string& path) {
  Value cur = obj;
  size_t start = 0;
  while (start <= path.size()) {
    size_t dot = path.find('.', start);
    std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (cur.is_undefined()) return cur;
    cur = get_item(ev, cur, numeric ? Value::integer(std::stoll(part)) : Value::string(part));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return cur;
}

Value sort_key(const Value& v, bool case_sensitive) {
  return (!case_sensitive && v.is_string()) ? Value::string(py_lower(v.s)) : v;
}

ValueList sorted(Evaluator& ev, ValueList items, bool reverse, bool case_sensitive, const Value* attribute) {
  static const std::string comma = ",";
  std::vector<std::pair<Value, Value>> keyed;
  for (auto& item : items) {
    Value key = item;
    if (attribute && attribute->is_int()) {
      key = sort_key(get_item(ev, item, *attribute), case_sensitive);
    } else if (attribute && attribute->is_string() && attribute->s.find(',') != std::string::npos) {
      // "a,b": jinja2 sorts by the list of those attributes.
      ValueList parts;
      for (const auto& path : py_split(attribute->s, &comma, -1, false))
        parts.push_back(sort_key(attribute_path(ev, item, path), case_sensitive));
      key = Value::make_list(std::move(parts));
    } else {
      key = sort_key(attribute && attribute->is_string() ? attribute_path(ev, item, attribute->s) : item, case_sensitive);
    }
    keyed.emplace_back(std::move(key), std::move(item));
  }
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
    return reverse ? less(b.first, a.first) : less(a.first, b.first);
  });
  ValueList out;
  for (auto& kv : keyed) out.push_back(std::move(kv.second));
  return out;
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

// select/reject/selectattr/rejectattr: args after the attribute are a test name and its arguments.
Value select_items(Evaluator& ev, const Value& seq, ValueList& args, KwArgs& kw, bool by_attr, bool keep) {
  size_t first = by_attr ? 1 : 0;
  TF_CHECK(!by_attr || (!args.empty() && args[0].is_string()), "chat template: selectattr needs an attribute name");
  std::string test_name;
  ValueList test_args;
  if (args.size() > first) {
    TF_CHECK(args[first].is_string(), "chat template: test name must be a string");
    test_name = args[first].s;
    test_args.assign(args.begin() + static_cast<long>(first) + 1, args.end());
  }
  ValueList out;
  for (const auto& item : iterate(seq)) {
    Value subject = by_attr ? attribute_path(ev, item, args[0].s) : item;
    KwArgs none;
    ValueList targs = test_args;
    bool ok = test_name.empty() ? subject.truthy() : ev.test(test_name, subject, targs, none);
    if (ok == keep) out.push_back(item);
  }
  return Value::make_list(std::move(out));
}

// jinja2's truncate: strings within length + leeway stay; otherwise cut at a word unless killwords.
Value truncate_text(const std::string& s, ValueList& args, KwArgs& kw) {
  Value length = arg_or(args, kw, 0, "length", Value::integer(255));
  bool killwords = arg_or(args, kw, 1, "killwords", Value::boolean(false)).truthy();
  Value end = arg_or(args, kw, 2, "end", Value::string("..."));
  Value leeway = arg_or(args, kw, 3, "leeway", Value::integer(5));
  TF_CHECK(length.is_int() && leeway.is_int() && leeway.i >= 0 && end.is_string(), "chat template: bad truncate arguments");
  auto cps = utf8_decode(s);
  const int64_t end_len = static_cast<int64_t>(utf8_length(end.s));
  TF_CHECK(length.i >= end_len, "chat template: expected length >= ", end_len, ", got ", length.i);
  if (static_cast<int64_t>(cps.size()) <= length.i + leeway.i) return Value::string(s);
  std::string head = utf8_encode({cps.begin(), cps.begin() + (length.i - end_len)});
  if (!killwords) {
    size_t sp = head.rfind(' ');
    if (sp != std::string::npos) head.resize(sp);
  }
  return Value::string(head + end.s);
}

// Markup.striptags: drop comments and tags, collapse whitespace, decode the common entities.
std::string strip_tags(const std::string& s) {
  std::string text;
  for (size_t k = 0; k < s.size();) {
    if (s.compare(k, 4, "<!--") == 0) {
      size_t e = s.find("-->", k + 4);
      if (e != std::string::npos) {
        k = e + 3;
        continue;
      }
    }
    if (s[k] == '<') {
      size_t e = s.find('>', k + 1);
      if (e != std::string::npos) {
        k = e + 1;
        continue;
      }
    }
    text += s[k++];
  }
  std::string joined;
  for (const auto& w : py_split(text, nullptr, -1, false)) joined += (joined.empty() ? "" : " ") + w;
  static const std::pair<const char*, const char*> kEntities[] = {
      {"&amp;", "&"}, {"&lt;", "<"}, {"&gt;", ">"}, {"&quot;", "\""}, {"&#39;", "'"}, {"&#34;", "\""}, {"&nbsp;", "\u00a0"}};
  std::string out;
  for (size_t k = 0; k < joined.size();) {
    bool hit = false;
    for (const auto& [from, to] : kEntities) {
      size_t n = std::char_traits<char>::length(from);
      if (joined.compare(k, n, from) == 0) {
        out += to;
        k += n;
        hit = true;
        break;
      }
    }
    if (!hit) out += joined[k++];
  }
  return out;
}

// urllib.parse.quote(s, safe="/") over the UTF-8 bytes.
std::string url_quote(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
        c == '-' || c == '~' || c == '/') {
      out += static_cast<char>(c);
    } else {
      char b[4];
      std::snprintf(b, sizeof(b), "%%%02X", c);
      out += b;
    }
  }
  return out;
}

Value min_max(Evaluator& ev, const Value& seq, ValueList& args, KwArgs& kw, bool want_max) {
  bool cs = arg_or(args, kw, 0, "case_sensitive", Value::boolean(false)).truthy();
  const Value* attr = find_arg(args, kw, 1, "attribute");
  ValueList items = iterate(seq);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  auto key = [&](size_t k) { return sort_key(attr ? attribute_path(ev, items[k], to_str(*attr)) : items[k], cs); };
  for (size_t k = 1; k < items.size(); ++k)
    if (want_max ? less(key(best), key(k)) : less(key(k), key(best))) best = k;
  return items[best];
}

}  // namespace

Value Evaluator::filter(const std::string& name, const Value& v, ValueList& args, KwArgs& kw) {
  if (name == "default" || name == "d") {
    Value def = arg_or(args, kw, 0, "default_value", Value::string(""));
    bool boolean = arg_or(args, kw, 1, "boolean", Value::boolean(false)).truthy();
    return (v.is_undefined() || (boolean && !v.truthy())) ? def : v;
  }
  if (name == "length" || name == "count") {
    switch (v.kind) {
      case Value::Kind::Undefined: return Value::integer(0);
      case Value::Kind::String: return Value::integer(static_cast<int64_t>(utf8_length(v.s)));
      case Value::Kind::List: return Value::integer(static_cast<int64_t>(v.list->size()));
      case Value::Kind::Dict: return Value::integer(static_cast<int64_t>(v.dict->items.size()));
      default: fail("chat template: object of type '", v.type_name(), "' has no len()");
    }
  }
  if (name == "safe") return v;
  if (name == "string") return v.is_string() ? v : Value::string(to_str(v));
  if (name == "tojson") {
    JsonOptions opt;
    Value indent = arg_or(args, kw, 1, "indent", Value::none());
    if (indent.is_int()) opt.indent = static_cast<int>(std::clamp<int64_t>(indent.i, 0, 64));
    else TF_CHECK(indent.is_none(), "chat template: tojson indent must be an integer");
    opt.ensure_ascii = arg_or(args, kw, 0, "ensure_ascii", Value::boolean(false)).truthy();
    Value seps = arg_or(args, kw, 2, "separators", Value::none());
    opt.item_sep = opt.indent >= 0 ? "," : ", ";
    opt.key_sep = ": ";
    if (seps.is_list()) {
      TF_CHECK(seps.list->size() == 2 && (*seps.list)[0].is_string() && (*seps.list)[1].is_string(),
               "chat template: tojson separators must be two strings");
      opt.item_sep = (*seps.list)[0].s;
      opt.key_sep = (*seps.list)[1].s;
    }
    opt.sort_keys = arg_or(args, kw, 3, "sort_keys", Value::boolean(false)).truthy();
    if (v.is_undefined()) fail("chat template: tojson: Object of type Undefined is not JSON serializable");
    std::string s = to_json(v, opt);
    charge(s.size());
    return Value::string(std::move(s));
  }
  if (name == "list") {
    if (v.is_list()) return Value::make_list(*v.list);
    return Value::make_list(iterate(v));
  }
  if (name == "first" || name == "last") {
    ValueList items = iterate(v);
    if (items.empty()) return Value::undefined("No first item, sequence was empty.");
    return name == "first" ? items.front() : items.back();
  }
  if (name == "items") {
    if (v.is_undefined()) return Value::make_list();
    TF_CHECK(v.is_mapping(), "chat template: Can only get item pairs from a mapping.");
    ValueList out;
    for (const auto& kv : v.dict->items) out.push_back(Value::make_list({kv.first, kv.second}, true));
    return Value::make_list(std::move(out));
  }
  if (name == "dictsort") {
    TF_CHECK(v.is_dict(), "chat template: dictsort expects a dict");
    bool cs = arg_or(args, kw, 0, "case_sensitive", Value::boolean(false)).truthy();
    Value by = arg_or(args, kw, 1, "by", Value::string("key"));
    bool rev = arg_or(args, kw, 2, "reverse", Value::boolean(false)).truthy();
    size_t pos = by.is_string() && by.s == "value" ? 1 : 0;
    ValueList pairs;
    for (const auto& kv : v.dict->items) pairs.push_back(Value::make_list({kv.first, kv.second}, true));
    Value index = Value::integer(static_cast<int64_t>(pos));
    return Value::make_list(sorted(*this, pairs, rev, cs, &index));
  }
  if (name == "sort") {
    bool rev = arg_or(args, kw, 0, "reverse", Value::boolean(false)).truthy();
    bool cs = arg_or(args, kw, 1, "case_sensitive", Value::boolean(false)).truthy();
    const Value* attr = find_arg(args, kw, 2, "attribute");
    return Value::make_list(sorted(*this, iterate(v), rev, cs, attr && !attr->is_none() ? attr : nullptr));
  }
  if (name == "unique") {
    bool cs = arg_or(args, kw, 0, "case_sensitive", Value::boolean(false)).truthy();
    const Value* attr = find_arg(args, kw, 1, "attribute");
    ValueList out, seen;
    for (const auto& item : iterate(v)) {
      Value key = sort_key(attr ? attribute_path(*this, item, to_str(*attr)) : item, cs);
      if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return equal(s, key); })) continue;
      seen.push_back(key);
      out.push_back(item);
    }
    return Value::make_list(std::move(out));
  }
  if (name == "reverse") {
    if (v.is_string()) {
      auto cps = utf8_decode(v.s);
      std::reverse(cps.begin(), cps.end());
      return Value::string(utf8_encode(cps));
    }
    ValueList items = iterate(v);
    std::reverse(items.begin(), items.end());
    return Value::make_list(std::move(items));
  }
  if (name == "join") {
    Value sep = arg_or(args, kw, 0, "d", Value::string(""));
    const Value* attr = find_arg(args, kw, 1, "attribute");
    std::string out;
    bool first = true;
    for (const auto& item : iterate(v)) {
      if (!first) out += to_str(sep);
      first = false;
      out += to_str(attr ? attribute_path(*this, item, to_str(*attr)) : item);
      TF_CHECK(out.size() <= limits_.max_output, "chat template: join result too long");
    }
    charge(out.size());
    return Value::string(std::move(out));
  }
  if (name == "map") {
    ValueList out;
    const Value* attr = find_arg({}, kw, 0, "attribute");
    if (attr) {
      const Value* def = find_arg({}, kw, 0, "default");
      for (const auto& item : iterate(v)) {
        Value x = attribute_path(*this, item, to_str(*attr));
        out.push_back(x.is_undefined() && def ? *def : x);
      }
      return Value::make_list(std::move(out));
    }
    TF_CHECK(!args.empty() && args[0].is_string(), "chat template: map needs a filter name or attribute=");
    std::string fname = args[0].s;
    ValueList rest(args.begin() + 1, args.end());
    for (const auto& item : iterate(v)) {
      ValueList a = rest;
      KwArgs k = kw;
      out.push_back(filter(fname, item, a, k));
    }
    return Value::make_list(std::move(out));
  }
  if (name == "select") return select_items(*this, v, args, kw, false, true);
  if (name == "reject") return select_items(*this, v, args, kw, false, false);
  if (name == "selectattr") return select_items(*this, v, args, kw, true, true);
  if (name == "rejectattr") return select_items(*this, v, args, kw, true, false);
  if (name == "attr") {
    TF_CHECK(!args.empty() && args[0].is_string(), "chat template: attr needs a name");
    // Python getattr: a dict's keys are items, not attributes, so only its methods are found.
    if (v.is_dict()) {
      Value m = get_attr(*this, v, args[0].s);
      return m.kind == Value::Kind::Callable ? m : Value::undefined(cat("'dict object' has no attribute '", args[0].s, "'"));
    }
    return get_attr(*this, v, args[0].s);
  }
  if (name == "sum") {
    const Value* attr = find_arg(args, kw, 0, "attribute");
    Value total = arg_or(args, kw, 1, "start", Value::integer(0));
    for (const auto& item : iterate(v))
      total = binary_op(*this, "+", total, attr ? attribute_path(*this, item, to_str(*attr)) : item);
    return total;
  }
  if (name == "min") return min_max(*this, v, args, kw, false);
  if (name == "max") return min_max(*this, v, args, kw, true);
  if (name == "batch") {
    Value n = arg_or(args, kw, 0, "linecount", Value::integer(1));
    TF_CHECK(n.is_int() && n.i > 0, "chat template: batch size must be a positive integer");
    const Value* fill = find_arg(args, kw, 1, "fill_with");
    ValueList out, cur;
    for (const auto& item : iterate(v)) {
      cur.push_back(item);
      if (static_cast<int64_t>(cur.size()) == n.i) {
        out.push_back(Value::make_list(std::move(cur)));
        cur.clear();
      }
    }
    if (!cur.empty()) {
      if (fill && !fill->is_none())
        while (static_cast<int64_t>(cur.size()) < n.i) cur.push_back(*fill);
      out.push_back(Value::make_list(std::move(cur)));
    }
    return Value::make_list(std::move(out));
  }
  if (name == "abs") {
    TF_CHECK(v.is_number(), "chat template: bad operand type for abs(): '", v.type_name(), "'");
    if (v.kind == Value::Kind::Float) return Value::number(std::fabs(v.f));
    TF_CHECK(v.i != INT64_MIN, "chat template: integer overflow");
    return Value::integer(v.i < 0 ? -v.i : v.i);
  }
  if (name == "int") {
    Value def = arg_or(args, kw, 0, "default", Value::integer(0));
    if (v.is_int()) return Value::integer(v.i);
    if (v.kind == Value::Kind::Float) {
      if (!std::isfinite(v.f) || std::fabs(v.f) >= 9.2e18) return def;
      return Value::integer(static_cast<int64_t>(v.f));
    }
    if (v.is_string()) {
      std::string s = py_strip(v.s, nullptr, true, true);
      char* end = nullptr;
      errno = 0;
      long long x = std::strtoll(s.c_str(), &end, 10);
      if (!s.empty() && end && *end == '\0' && errno == 0) return Value::integer(x);
      double d = std::strtod(s.c_str(), &end);
      if (!s.empty() && end && *end == '\0' && std::isfinite(d) && std::fabs(d) < 9.2e18)
        return Value::integer(static_cast<int64_t>(d));
    }
    return def;
  }
  if (name == "float") {
    Value def = arg_or(args, kw, 0, "default", Value::number(0.0));
    if (v.is_number()) return Value::number(v.as_double());
    if (v.is_string()) {
      std::string s = py_strip(v.s, nullptr, true, true);
      char* end = nullptr;
      double d = std::strtod(s.c_str(), &end);
      if (!s.empty() && end && *end == '\0') return Value::number(d);
    }
    return def;
  }
  if (name == "round") {
    Value prec = arg_or(args, kw, 0, "precision", Value::integer(0));
    Value method = arg_or(args, kw, 1, "method", Value::string("common"));
    TF_CHECK(v.is_number(), "chat template: round needs a number");
    TF_CHECK(prec.is_int(), "chat template: round precision must be an integer");
    TF_CHECK(method.is_string() && (method.s == "common" || method.s == "ceil" || method.s == "floor"),
             "chat template: method must be common, ceil or floor");
    const int64_t p = std::clamp<int64_t>(prec.i, -400, 400);
    if (method.s != "common") {
      double scale = std::pow(10.0, static_cast<double>(p));
      double x = v.as_double() * scale;
      return Value::number((method.s == "ceil" ? std::ceil(x) : std::floor(x)) / scale);
    }
    // Python's round(): ints stay ints; floats round half to even on their exact decimal value.
    if (v.is_int() && p >= 0) return Value::integer(v.i);
    if (v.is_int()) {
      if (p < -18) return Value::integer(0);
      int64_t unit = 1;
      for (int64_t k = 0; k < -p; ++k) unit *= 10;
      int64_t q = v.i / unit, r = v.i % unit;
      if (r < 0) {
        r += unit;
        --q;
      }
      if (2 * r > unit || (2 * r == unit && (q & 1))) ++q;
      return Value::integer(q * unit);
    }
    double x = v.f;
    if (!std::isfinite(x) || p > 330) return Value::number(x);
    if (p < 0) {
      double unit = std::pow(10.0, static_cast<double>(-p));
      return Value::number(std::nearbyint(x / unit) * unit);
    }
    std::vector<char> buf(static_cast<size_t>(p) + 400);
    std::snprintf(buf.data(), buf.size(), "%.*f", static_cast<int>(p), x);
    return Value::number(std::strtod(buf.data(), nullptr));
  }
  if (name == "format") {
    TF_CHECK(args.empty() || kw.empty(), "chat template: can't handle positional and keyword arguments at the same time");
    Value packed = Value::make_list(args, true);
    if (!kw.empty()) {
      packed = Value::make_dict();
      for (const auto& [k, x] : kw) packed.dict->set(Value::string(k), x);
    }
    return Value::string(percent_format(*this, to_str(v), packed));
  }
  if (name == "slice") {
    Value n = arg_or(args, kw, 0, "slices", Value::none());
    TF_CHECK(n.is_int() && n.i > 0 && n.i <= 100000, "chat template: slice count must be a positive integer");
    const Value* fill = find_arg(args, kw, 1, "fill_with");
    ValueList items = iterate(v), out;
    size_t count = static_cast<size_t>(n.i), per = items.size() / count, extra = items.size() % count, offset = 0;
    for (size_t k = 0; k < count; ++k) {
      size_t start = offset + k * per;
      if (k < extra) ++offset;
      size_t end = offset + (k + 1) * per;
      ValueList part(items.begin() + static_cast<long>(start), items.begin() + static_cast<long>(end));
      if (fill && !fill->is_none() && k >= extra) part.push_back(*fill);
      out.push_back(Value::make_list(std::move(part)));
    }
    return Value::make_list(std::move(out));
  }
  if (name == "pprint") return Value::string(to_repr(v));
  std::string s = to_str(v);
  if (name == "trim") {
    const Value* chars = find_arg(args, kw, 0, "chars");
    return Value::string(py_strip(s, chars && chars->is_string() ? &chars->s : nullptr, true, true));
  }
  if (name == "upper") return Value::string(py_upper(s));
  if (name == "lower") return Value::string(py_lower(s));
  if (name == "title") return Value::string(jinja_title(s));
  if (name == "capitalize") return Value::string(py_capitalize(s));
  if (name == "escape" || name == "e") return Value::string(html_escape(s));
  if (name == "wordcount") return Value::integer(static_cast<int64_t>(py_split(s, nullptr, -1, false).size()));
  if (name == "center") {
    ValueList a{arg_or(args, kw, 0, "width", Value::integer(80))};
    KwArgs none;
    Value fn = string_method(Value::string(s), "center");
    return call(fn, a, none);
  }
  if (name == "truncate") return truncate_text(s, args, kw);
  if (name == "striptags") return Value::string(strip_tags(s));
  if (name == "urlencode") {
    TF_CHECK(v.is_string() || v.is_number() || v.is_none() || v.is_undefined(),
             "chat template: urlencode of mappings and lists is not supported");
    return Value::string(url_quote(s));
  }
  if (name == "replace") {
    TF_CHECK(args.size() >= 2, "chat template: replace needs old and new");
    std::string from = to_str(args[0]), to = to_str(args[1]);
    Value count = arg_or(args, kw, 2, "count", Value::none());
    uint64_t hits = static_cast<uint64_t>(py_count(s, from));
    TF_CHECK(to.size() <= from.size() || s.size() + hits * (to.size() - from.size()) <= limits_.max_output,
             "chat template: replace result too long");
    std::string r = py_replace(s, from, to, count.is_int() ? count.i : -1);
    charge(r.size());
    return Value::string(std::move(r));
  }
  if (name == "indent") {
    Value width = arg_or(args, kw, 0, "width", Value::integer(4));
    bool first = arg_or(args, kw, 1, "first", Value::boolean(false)).truthy();
    bool blank = arg_or(args, kw, 2, "blank", Value::boolean(false)).truthy();
    std::string pad = width.is_string() ? width.s : std::string(static_cast<size_t>(std::clamp<int64_t>(width.as_int(), 0, 256)), ' ');
    // jinja2: append a newline, splitlines, indent every non-first line (blank ones only with blank=).
    std::vector<std::string> lines;
    std::string text = s + "\n", out;
    for (size_t start = 0; start < text.size();) {
      size_t nl = text.find('\n', start);
      lines.push_back(text.substr(start, nl - start));
      start = nl + 1;
    }
    for (size_t k = 0; k < lines.size(); ++k) {
      if (k) out += "\n";
      if (k > 0 && (blank || !lines[k].empty())) out += pad;
      out += lines[k];
      TF_CHECK(out.size() <= limits_.max_output, "chat template: indent result too long");
    }
    if (first) out = pad + out;
    return Value::string(std::move(out));
  }
  fail("chat template: No filter named '", name, "'.");
}

bool Evaluator::test(const std::string& name, const Value& v, ValueList& args, KwArgs& kw) {
  using K = Value::Kind;
  auto arg = [&]() -> const Value& {
    const Value* a = find_arg(args, kw, 0, "value");
    TF_CHECK(a, "chat template: test '", name, "' needs an argument");
    return *a;
  };
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "number") return v.is_number();
  if (name == "integer") return v.kind == K::Int;
  if (name == "float") return v.kind == K::Float;
  if (name == "boolean") return v.kind == K::Bool;
  if (name == "true") return v.kind == K::Bool && v.b;
  if (name == "false") return v.kind == K::Bool && !v.b;
  if (name == "mapping") return v.is_dict();
  if (name == "iterable") return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
  if (name == "sequence") return v.is_string() || v.is_list() || v.is_dict();
  if (name == "callable") return v.kind == K::Callable;
  if (name == "odd" || name == "even") {
    TF_CHECK(v.is_int(), "chat template: test '", name, "' needs an integer");
    bool odd = (v.i % 2) != 0;
    return name == "odd" ? odd : !odd;
  }
  if (name == "divisibleby") {
    const Value& n = arg();
    TF_CHECK(v.is_int() && n.is_int() && n.i != 0, "chat template: divisibleby needs nonzero integers");
    return v.i % n.i == 0;
  }
  if (name == "equalto" || name == "eq" || name == "==" || name == "sameas") return equal(v, arg());
  if (name == "ne" || name == "!=") return !equal(v, arg());
  if (name == "lt" || name == "lessthan" || name == "<") return less(v, arg());
  if (name == "gt" || name == "greaterthan" || name == ">") return less(arg(), v);
  if (name == "le" || name == "<=") return less(v, arg()) || equal(v, arg());
  if (name == "ge" || name == ">=") return less(arg(), v) || equal(v, arg());
  if (name == "in") return contains(arg(), v);
  if (name == "lower") return v.is_string() && py_lower(v.s) == v.s;
  if (name == "upper") return v.is_string() && py_upper(v.s) == v.s;
  if (name == "escaped") return false;
  fail("chat template: No test named '", name, "'.");
}

}  // namespace tf::jinja
