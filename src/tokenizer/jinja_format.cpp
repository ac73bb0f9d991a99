// Python string formatting over template values: str % args (jinja2's format filter) and str.format().
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "tokenizer/jinja_eval.h"
#include "tokenizer/jinja_text.h"

namespace tf::jinja {

namespace {

// One format specification: [[fill]align][sign][#][0][width][,|_][.precision][type].
struct Spec {
  std::string fill = " ";  // one code point
  char align = 0;          // '<', '>', '^', '=' or 0 for the type's default
  char sign = 0;           // '+', '-', ' ' or 0
  bool alt = false, zero = false;
  int64_t width = -1, precision = -1;
  char group = 0;  // ',' or '_'
  char type = 0;
};

bool is_digit(char c) { return c >= '0' && c <= '9'; }

int64_t parse_count(const std::string& s, size_t& k, int64_t limit) {
  int64_t n = 0;
  while (k < s.size() && is_digit(s[k])) {
    n = n * 10 + (s[k++] - '0');
    TF_CHECK(n <= limit, "chat template: format width or precision too big");
  }
  return n;
}

Spec parse_spec(const std::string& s, int64_t limit) {
  Spec sp;
  size_t k = 0;
  auto is_align = [](char c) { return c == '<' || c == '>' || c == '^' || c == '='; };
  size_t first_len = s.empty() ? 0 : utf8_encode({utf8_decode(s).front()}).size();
  if (first_len && first_len < s.size() && is_align(s[first_len])) {
    sp.fill = s.substr(0, first_len);
    sp.align = s[first_len];
    k = first_len + 1;
  } else if (!s.empty() && is_align(s[0])) {
    sp.align = s[0];
    k = 1;
  }
  if (k < s.size() && (s[k] == '+' || s[k] == '-' || s[k] == ' ')) sp.sign = s[k++];
  if (k < s.size() && s[k] == '#') {
    sp.alt = true;
    ++k;
  }
  if (k < s.size() && s[k] == '0') {
    sp.zero = true;
    ++k;
  }
  if (k < s.size() && is_digit(s[k])) sp.width = parse_count(s, k, limit);
  if (k < s.size() && (s[k] == ',' || s[k] == '_')) sp.group = s[k++];
  if (k < s.size() && s[k] == '.') {
    ++k;
    TF_CHECK(k < s.size() && is_digit(s[k]), "chat template: Format specifier missing precision");
    sp.precision = parse_count(s, k, limit);
  }
  if (k + 1 == s.size()) sp.type = s[k++];
  TF_CHECK(k == s.size(), "chat template: Invalid format specifier '", s, "'");
  return sp;
}

// Pads body to the spec's width; '=' puts the fill after the first sign_len bytes (sign and prefix).
std::string pad(const std::string& body, const Spec& sp, char default_align, size_t sign_len) {
  size_t len = utf8_length(body);
  if (sp.width < 0 || static_cast<size_t>(sp.width) <= len) return body;
  size_t n = static_cast<size_t>(sp.width) - len;
  char align = sp.align ? sp.align : default_align;
  auto fill = [&](size_t count) {
    std::string f;
    for (size_t j = 0; j < count; ++j) f += sp.fill;
    return f;
  };
  switch (align) {
    case '<': return body + fill(n);
    case '^': return fill(n / 2) + body + fill(n - n / 2);
    case '=': return body.substr(0, sign_len) + fill(n) + body.substr(sign_len);
    default: return fill(n) + body;
  }
}

// Inserts sep every `every` digits from the right of the leading run of digits in s.
std::string group_digits(const std::string& s, char sep, size_t every) {
  size_t end = 0;
  while (end < s.size() && is_digit(s[end])) ++end;
  std::string out;
  for (size_t k = 0; k < end; ++k) {
    if (k && (end - k) % every == 0) out += sep;
    out += s[k];
  }
  return out + s.substr(end);
}

std::string sign_of(bool negative, char sign) {
  if (negative) return "-";
  if (sign == '+') return "+";
  if (sign == ' ') return " ";
  return "";
}

std::string format_int(int64_t v, Spec sp) {
  TF_CHECK(sp.precision < 0, "chat template: Precision not allowed in integer format specifier");
  if (sp.zero && !sp.align) {
    sp.fill = "0";
    sp.align = '=';
  }
  char type = sp.type ? sp.type : 'd';
  if (type == 'c') {
    TF_CHECK(v >= 0 && v <= 0x10FFFF, "chat template: %c arg not in range(0x110000)");
    std::string c;
    utf8_append(c, static_cast<char32_t>(v));
    return pad(c, sp, '<', 0);
  }
  uint64_t mag = v < 0 ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
  int base = type == 'x' || type == 'X' ? 16 : type == 'o' ? 8 : type == 'b' ? 2 : 10;
  TF_CHECK(type == 'd' || type == 'n' || base != 10, "chat template: Unknown format code '", type,
           "' for object of type 'int'");
  std::string digits;
  do {
    int d = static_cast<int>(mag % base);
    digits.insert(digits.begin(), static_cast<char>(d < 10 ? '0' + d : (type == 'X' ? 'A' : 'a') + d - 10));
    mag /= base;
  } while (mag);
  if (sp.group) digits = group_digits(digits, sp.group, base == 10 ? 3 : 4);
  std::string prefix = sign_of(v < 0, sp.sign);
  if (sp.alt && base != 10) prefix += std::string("0") + (type == 'X' ? 'X' : type);
  return pad(prefix + digits, sp, '>', prefix.size());
}

std::string format_float(double v, Spec sp) {
  if (sp.zero && !sp.align) {
    sp.fill = "0";
    sp.align = '=';
  }
  char type = sp.type;
  TF_CHECK(type == 0 || type == 'e' || type == 'E' || type == 'f' || type == 'F' || type == 'g' || type == 'G' ||
               type == 'n' || type == '%',
           "chat template: Unknown format code '", type, "' for object of type 'float'");
  bool negative = std::signbit(v);
  double a = std::fabs(v);
  std::string body;
  if (!std::isfinite(a)) {
    body = std::isnan(a) ? "nan" : "inf";
    if (type == 'E' || type == 'F' || type == 'G') body = py_upper(body);
    if (type == '%') body += '%';
  } else if (type == 0 && sp.precision < 0) {
    body = repr_float(a);
  } else {
    char conv = type == 0 || type == 'n' ? 'g' : type == '%' ? 'f' : type;
    int prec = static_cast<int>(sp.precision < 0 ? 6 : sp.precision);
    if (type == '%') a *= 100;
    std::string fmt = std::string("%") + (sp.alt ? "#" : "") + ".*" + conv;
    std::vector<char> buf(static_cast<size_t>(prec) + 400);
    std::snprintf(buf.data(), buf.size(), fmt.c_str(), prec, a);
    body = buf.data();
    if (type == 0) {
      // No type with a precision: 'g' that switches to exponents one digit earlier and keeps a ".0".
      int p = std::max(prec, 1), exp10 = 0;
      if (a != 0) {
        std::snprintf(buf.data(), buf.size(), "%.*e", p - 1, a);
        exp10 = std::atoi(std::strchr(buf.data(), 'e') + 1);
      }
      if (exp10 < -4 || exp10 >= p - 1) {
        std::snprintf(buf.data(), buf.size(), "%.*e", p - 1, a);
        std::string m = buf.data(), e = m.substr(m.find('e'));
        m = m.substr(0, m.find('e'));
        if (m.find('.') != std::string::npos) {
          while (m.back() == '0') m.pop_back();
          if (m.back() == '.') m.pop_back();
        }
        body = m + e;
      } else if (body.find('.') == std::string::npos) {
        body += ".0";
      }
    }
    if (type == '%') body += '%';
  }
  if (sp.group) body = group_digits(body, sp.group, 3);
  std::string sign = sign_of(negative, sp.sign);
  return pad(sign + body, sp, '>', sign.size());
}

// Python's format(value, spec).
std::string format_value(const Value& v, const Spec& sp, bool spec_empty) {
  switch (v.kind) {
    case Value::Kind::String: {
      TF_CHECK(sp.type == 0 || sp.type == 's', "chat template: Unknown format code '", sp.type,
               "' for object of type 'str'");
      TF_CHECK(!sp.sign, "chat template: Sign not allowed in string format specifier");
      TF_CHECK(sp.align != '=', "chat template: '=' alignment not allowed in string format specifier");
      std::string s = v.s;
      if (sp.precision >= 0) {
        auto cps = utf8_decode(s);
        if (cps.size() > static_cast<size_t>(sp.precision)) cps.resize(static_cast<size_t>(sp.precision));
        s = utf8_encode(cps);
      }
      Spec p = sp;
      if (p.zero && !p.align) p.fill = "0";
      return pad(s, p, '<', 0);
    }
    case Value::Kind::Bool:
      if (spec_empty) return to_str(v);
      [[fallthrough]];
    case Value::Kind::Int: {
      char t = sp.type;
      if (t == 'e' || t == 'E' || t == 'f' || t == 'F' || t == 'g' || t == 'G' || t == '%')
        return format_float(static_cast<double>(v.i), sp);
      return format_int(v.i, sp);
    }
    case Value::Kind::Float: return format_float(v.f, sp);
    default:
      TF_CHECK(spec_empty, "chat template: unsupported format string passed to ", v.type_name(), ".__format__");
      return to_str(v);
  }
}

}  // namespace

std::string percent_format(Evaluator& ev, const std::string& fmt, const Value& args) {
  const bool mapping = args.is_mapping() && fmt.find("%(") != std::string::npos;
  ValueList positional = mapping ? ValueList{} : args.is_list() && args.tuple ? *args.list : ValueList{args};
  const int64_t limit = static_cast<int64_t>(ev.limits().max_output);
  size_t next = 0;
  std::string out;
  for (size_t k = 0; k < fmt.size(); ++k) {
    if (fmt[k] != '%') {
      out += fmt[k];
      continue;
    }
    TF_CHECK(++k < fmt.size(), "chat template: incomplete format");
    Value arg;
    bool have_arg = false;
    if (fmt[k] == '(') {
      size_t close = fmt.find(')', k);
      TF_CHECK(mapping && close != std::string::npos, "chat template: format requires a mapping");
      const Value* found = args.dict->find(fmt.substr(k + 1, close - k - 1));
      TF_CHECK(found, "chat template: KeyError: '", fmt.substr(k + 1, close - k - 1), "'");
      arg = *found;
      have_arg = true;
      k = close + 1;
    }
    Spec sp;
    bool left = false;
    for (; k < fmt.size(); ++k) {
      char c = fmt[k];
      if (c == '-') left = true;
      else if (c == '0') sp.zero = true;
      else if (c == '+' || (c == ' ' && sp.sign != '+')) sp.sign = c;
      else if (c == '#') sp.alt = true;
      else break;
    }
    if (k < fmt.size() && is_digit(fmt[k])) sp.width = parse_count(fmt, k, limit);
    int64_t precision = -1;
    if (k < fmt.size() && fmt[k] == '.') {
      ++k;
      precision = parse_count(fmt, k, limit);
    }
    TF_CHECK(k < fmt.size(), "chat template: incomplete format");
    const char conv = fmt[k];
    if (conv == '%') {
      out += '%';
      continue;
    }
    if (!have_arg) {
      TF_CHECK(!mapping && next < positional.size(), "chat template: not enough arguments for format string");
      arg = positional[next++];
    }
    sp.align = left ? '<' : '>';
    if (sp.zero && !left && conv != 's' && conv != 'r' && conv != 'a' && conv != 'c') {
      sp.fill = "0";
      sp.align = '=';
    }
    sp.zero = false;
    std::string piece;
    if (conv == 's' || conv == 'r' || conv == 'a') {
      std::string s = conv == 's' ? to_str(arg) : to_repr(arg);
      Spec p = sp;
      p.precision = precision;
      piece = format_value(Value::string(s), p, false);
    } else if (conv == 'd' || conv == 'i' || conv == 'u') {
      TF_CHECK(arg.is_number(), "chat template: %", conv, " format: a real number is required, not ", arg.type_name());
      TF_CHECK(arg.kind != Value::Kind::Float || std::isfinite(arg.f), "chat template: cannot convert float to integer");
      int64_t i = arg.kind == Value::Kind::Float ? static_cast<int64_t>(arg.f) : arg.i;
      sp.type = 'd';
      piece = format_int(i, sp);
      if (precision > 0) {
        // C-style minimum digit count: zeros go between the sign and the digits.
        std::string digits = std::to_string(i < 0 ? 0 - static_cast<uint64_t>(i) : static_cast<uint64_t>(i));
        if (static_cast<int64_t>(digits.size()) < precision) {
          std::string body = sign_of(i < 0, sp.sign) + std::string(static_cast<size_t>(precision) - digits.size(), '0') + digits;
          piece = pad(body, sp, '>', 0);
        }
      }
    } else if (conv == 'x' || conv == 'X' || conv == 'o') {
      TF_CHECK(arg.is_int(), "chat template: %", conv, " format: an integer is required, not ", arg.type_name());
      sp.type = conv;
      piece = format_int(arg.i, sp);
    } else if (conv == 'e' || conv == 'E' || conv == 'f' || conv == 'F' || conv == 'g' || conv == 'G') {
      TF_CHECK(arg.is_number(), "chat template: must be real number, not ", arg.type_name());
      sp.type = conv;
      sp.precision = precision < 0 ? 6 : precision;
      piece = format_float(arg.as_double(), sp);
    } else if (conv == 'c') {
      TF_CHECK(arg.is_int() || (arg.is_string() && utf8_length(arg.s) == 1), "chat template: %c requires int or char");
      sp.type = 'c';
      piece = arg.is_string() ? pad(arg.s, sp, '>', 0) : format_int(arg.i, sp);
    } else {
      fail("chat template: unsupported format character '", conv, "'");
    }
    out += piece;
    TF_CHECK(out.size() <= ev.limits().max_output, "chat template: format result too long");
  }
  TF_CHECK(mapping || next == positional.size() || args.is_mapping(),
           "chat template: not all arguments converted during string formatting");
  ev.charge(out.size());
  return out;
}

std::string str_format(Evaluator& ev, const std::string& fmt, const ValueList& args, const KwArgs& kwargs, int depth) {
  TF_CHECK(depth < 2, "chat template: Max string recursion exceeded");
  const int64_t limit = static_cast<int64_t>(ev.limits().max_output);
  std::string out;
  int auto_index = 0;  // -1 once a field was numbered by hand
  for (size_t k = 0; k < fmt.size(); ++k) {
    char c = fmt[k];
    if (c == '}') {
      TF_CHECK(k + 1 < fmt.size() && fmt[k + 1] == '}', "chat template: Single '}' encountered in format string");
      out += '}';
      ++k;
      continue;
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (k + 1 < fmt.size() && fmt[k + 1] == '{') {
      out += '{';
      ++k;
      continue;
    }
    // The field runs to the matching '}', counting nested fields of the spec.
    size_t end = k + 1;
    for (int nest = 1; end < fmt.size(); ++end) {
      if (fmt[end] == '{') ++nest;
      else if (fmt[end] == '}' && --nest == 0) break;
    }
    TF_CHECK(end < fmt.size(), "chat template: expected '}' before end of string");
    std::string field = fmt.substr(k + 1, end - k - 1);
    k = end;
    std::string spec, conv;
    size_t colon = field.find(':'), bang = field.find('!');
    if (colon != std::string::npos) {
      spec = field.substr(colon + 1);
      field = field.substr(0, colon);
    }
    if (bang != std::string::npos && bang < field.size()) {
      conv = field.substr(bang + 1);
      field = field.substr(0, bang);
    }
    size_t name_end = 0;
    while (name_end < field.size() && field[name_end] != '.' && field[name_end] != '[') ++name_end;
    std::string name = field.substr(0, name_end);
    Value v;
    if (name.empty() || std::all_of(name.begin(), name.end(), is_digit)) {
      int64_t index;
      if (name.empty()) {
        TF_CHECK(auto_index >= 0, "chat template: cannot switch from manual field specification to automatic field numbering");
        index = auto_index++;
      } else {
        TF_CHECK(auto_index <= 0, "chat template: cannot switch from automatic field numbering to manual field specification");
        auto_index = -1;
        size_t p = 0;
        index = parse_count(name, p, 1 << 20);
      }
      TF_CHECK(index < static_cast<int64_t>(args.size()), "chat template: Replacement index ", index,
               " out of range for positional args tuple");
      v = args[static_cast<size_t>(index)];
    } else {
      const Value* found = find_arg({}, kwargs, 0, name.c_str());
      TF_CHECK(found, "chat template: KeyError: '", name, "'");
      v = *found;
    }
    for (size_t p = name_end; p < field.size();) {
      if (field[p] == '.') {
        size_t q = p + 1;
        while (q < field.size() && field[q] != '.' && field[q] != '[') ++q;
        v = get_attr(ev, v, field.substr(p + 1, q - p - 1));
        p = q;
      } else {
        size_t q = field.find(']', p);
        TF_CHECK(q != std::string::npos, "chat template: Missing ']' in format string");
        std::string key = field.substr(p + 1, q - p - 1);
        bool numeric = !key.empty() && std::all_of(key.begin(), key.end(), is_digit);
        size_t z = 0;
        v = get_item(ev, v, numeric ? Value::integer(parse_count(key, z, INT64_MAX / 10)) : Value::string(key));
        p = q + 1;
      }
      if (v.is_undefined()) fail_undefined(v);
    }
    if (conv == "r" || conv == "a") v = Value::string(to_repr(v));
    else if (conv == "s") v = Value::string(to_str(v));
    else TF_CHECK(conv.empty(), "chat template: Unknown conversion specifier ", conv);
    if (spec.find('{') != std::string::npos) spec = str_format(ev, spec, args, kwargs, depth + 1);
    out += format_value(v, parse_spec(spec, limit), spec.empty());
    TF_CHECK(out.size() <= ev.limits().max_output, "chat template: format result too long");
  }
  ev.charge(out.size());
  return out;
}

}  // namespace tf::jinja
