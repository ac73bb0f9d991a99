#pragma once
// JSON from outside parsed with a nesting cap: nlohmann copies values recursively, so a deep
// enough value overflows the stack long after its parse succeeded.
#include <string>

#include <nlohmann/json.hpp>

namespace tf {

inline constexpr int kMaxJsonDepth = 256;

// text parsed as J; on_too_deep(), which must throw, runs once nesting passes kMaxJsonDepth.
template <class J, class F>
J parse_json_capped(const std::string& text, F on_too_deep) {
  const typename J::parser_callback_t cb = [&](int depth, typename J::parse_event_t, J&) {
    if (depth > kMaxJsonDepth) on_too_deep();
    return true;
  };
  return J::parse(text, cb);
}

}  // namespace tf
