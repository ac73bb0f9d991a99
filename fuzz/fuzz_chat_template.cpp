// libFuzzer target: any template text, rendered over a conversation with tools, must render or
// throw tf::Error (limits included), never crash or run away.
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "tokenizer/chat_template.h"

namespace {

const nlohmann::ordered_json& context() {
  static const nlohmann::ordered_json c = nlohmann::ordered_json::parse(R"({
    "messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": [{"type": "text", "text": "Weather in Köln? 😀"}, {"type": "image"}]},
      {"role": "assistant", "content": "", "reasoning_content": "Look it up.",
       "tool_calls": [{"id": "c1", "type": "function",
                       "function": {"name": "get_weather", "arguments": {"city": "Köln", "days": 2}}}]},
      {"role": "tool", "tool_call_id": "c1", "name": "get_weather", "content": "{\"t\": 21.5}"},
      {"role": "assistant", "content": "<think>\nok\n</think>\n\nSunny, 21.5 °C."},
      {"role": "user", "content": "Thanks {{ not a tag }} {% neither %}"}
    ],
    "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather",
               "parameters": {"type": "object", "properties": {"city": {"type": "string"},
               "days": {"type": "integer"}}, "required": ["city"]}}}],
    "add_generation_prompt": true, "enable_thinking": false,
    "bos_token": "<s>", "eos_token": "</s>", "__now__": 1721988000
  })");
  return c;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string source(reinterpret_cast<const char*>(data), size);
  try {
    tf::ChatTemplate t(source);
    (void)t.render(context());
  } catch (const tf::Error&) {
  }
  return 0;
}
