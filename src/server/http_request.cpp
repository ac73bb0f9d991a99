#include "server/http_request.h"

#include <nlohmann/json.hpp>

namespace tf {

bool iequals_ascii(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x = static_cast<char>(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = static_cast<char>(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}

std::string HttpRequest::header(const std::string& name) const {
  for (const auto& [k, v] : headers)
    if (iequals_ascii(k, name)) return v;
  return {};
}

bool HttpRequest::has_header(const std::string& name) const {
  for (const auto& kv : headers)
    if (iequals_ascii(kv.first, name)) return true;
  return false;
}

std::string openai_error_body(const std::string& message, const std::string& type) {
  nlohmann::json j = {{"error",
                       {{"message", message}, {"type", type}, {"param", nullptr}, {"code", nullptr}}}};
  // Replace keeps a body valid JSON even when a message carries bytes that are not UTF-8.
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace tf
