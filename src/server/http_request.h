#pragma once
// Plain request types shared by the HTTP layer and the routes; no Beast in sight.
#include <string>
#include <utility>
#include <vector>

namespace tf {

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

struct HttpRequest {
  std::string method;  // as sent, e.g. "POST"
  std::string path;    // target before '?', not percent-decoded
  std::string query;   // target after '?', empty when absent
  HttpHeaders headers;
  std::string body;
  std::string remote;  // peer "address:port"

  // First header with this name (case-insensitive), or "" when absent.
  std::string header(const std::string& name) const;
  bool has_header(const std::string& name) const;
};

// ASCII case-insensitive equality, as header names need.
bool iequals_ascii(const std::string& a, const std::string& b);

// OpenAI-style error body: {"error": {"message", "type", "param": null, "code": null}}.
std::string openai_error_body(const std::string& message,
                              const std::string& type = "invalid_request_error");

}  // namespace tf
