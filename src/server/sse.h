#pragma once
// Server-Sent Events framing for streamed completions.
#include <string>

namespace tf {

// "data: <line>\n" for each line of data (split on \n, \r\n or \r), then a blank line.
std::string sse_event(const std::string& data);

// The same with an "event: <name>" line first; name must not hold line breaks.
std::string sse_event(const std::string& event, const std::string& data);

// A comment line clients ignore; keeps proxies from timing out an idle stream.
std::string sse_comment(const std::string& text);

// The terminal event of an OpenAI stream.
std::string sse_done();

}  // namespace tf
