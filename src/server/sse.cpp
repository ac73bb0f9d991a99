#include "server/sse.h"

#include "base/error.h"

namespace tf {

namespace {

// Emits "<field>: <line>\n" per line so a newline inside data cannot end the event early.
void append_lines(std::string& out, const char* field, const std::string& text) {
  size_t start = 0;
  for (;;) {
    size_t end = text.find_first_of("\r\n", start);
    out += field;
    out += ": ";
    out.append(text, start, end == std::string::npos ? std::string::npos : end - start);
    out += '\n';
    if (end == std::string::npos) break;
    start = end + 1;
    if (text[end] == '\r' && start < text.size() && text[start] == '\n') ++start;
  }
}

}  // namespace

std::string sse_event(const std::string& data) {
  std::string out;
  out.reserve(data.size() + 8);
  append_lines(out, "data", data);
  out += '\n';
  return out;
}

std::string sse_event(const std::string& event, const std::string& data) {
  TF_CHECK(event.find_first_of("\r\n") == std::string::npos,
           "sse_event: event name holds a line break: '", event, "'");
  std::string out = "event: " + event + "\n";
  append_lines(out, "data", data);
  out += '\n';
  return out;
}

std::string sse_comment(const std::string& text) {
  std::string out;
  append_lines(out, "", text);
  out += '\n';
  return out;
}

std::string sse_done() { return "data: [DONE]\n\n"; }

}  // namespace tf
