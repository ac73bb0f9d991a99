#pragma once
// Python str operations over UTF-8: strings index, slice, strip and case-map by code point.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace tf::jinja {

std::vector<char32_t> utf8_decode(const std::string& s);
std::string utf8_encode(const std::vector<char32_t>& cps);
void utf8_append(std::string& out, char32_t cp);
size_t utf8_length(const std::string& s);

bool py_isspace(char32_t c);
// str.isprintable() of one character: what repr() leaves unescaped.
bool py_isprintable(char32_t c);
// str.strip/lstrip/rstrip: chars empty means whitespace.
std::string py_strip(const std::string& s, const std::string* chars, bool left, bool right);
std::string rstrip_ws(const std::string& s);
// str.split / str.rsplit; sep null means runs of whitespace.
std::vector<std::string> py_split(const std::string& s, const std::string* sep, int64_t maxsplit, bool from_right);
std::string py_replace(const std::string& s, const std::string& from, const std::string& to, int64_t count);
std::string py_upper(const std::string& s);
std::string py_lower(const std::string& s);
std::string py_title(const std::string& s);       // str.title()
std::string py_capitalize(const std::string& s);  // str.capitalize()
std::string py_casefold(const std::string& s);    // str.casefold()
std::string py_swapcase(const std::string& s);    // str.swapcase()
std::string jinja_title(const std::string& s);    // the |title filter, which differs from str.title()
int64_t py_count(const std::string& s, const std::string& sub);
// str.find in code points, -1 when absent.
int64_t py_find(const std::string& s, const std::string& sub);

// Decodes Python string-literal escapes as jinja2 does (unicode-escape); on_error throws.
std::string unescape_python(const std::string& raw, const std::function<void(const std::string&)>& on_error);

}  // namespace tf::jinja
