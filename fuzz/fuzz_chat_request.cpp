// libFuzzer target: any /v1/chat/completions or /v1/completions body must parse and render
// through real model templates, or throw tf::Error (ApiError), never crash.
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "server/api_request.h"
#include "tokenizer/chat_template.h"

namespace {

// A few templates of the families users serve, read from the test fixtures beside this file.
const std::vector<std::unique_ptr<tf::ChatTemplate>>& templates() {
  static const auto all = [] {
    std::vector<std::unique_ptr<tf::ChatTemplate>> v;
    const auto dir = std::filesystem::path(__FILE__).parent_path().parent_path() / "tests" / "fixtures" /
                     "chat_templates" / "src";
    for (const char* name : {"qwen3", "nemotron3_nano", "llama3_3", "gemma3", "mistral_small_3_2", "gpt_oss"}) {
      std::ifstream in(dir / (std::string(name) + ".jinja"), std::ios::binary);
      if (!in) continue;
      std::ostringstream s;
      s << in.rdbuf();
      v.push_back(std::make_unique<tf::ChatTemplate>(s.str()));
    }
    return v;
  }();
  return all;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool chat = (data[0] & 1) != 0;
  const std::string body(reinterpret_cast<const char*>(data) + 1, size - 1);
  tf::ApiLimits lim;
  lim.vocab_size = 1000;
  lim.context = 4096;
  try {
    tf::CompletionSpec s = tf::parse_completion_request(body, chat, lim);
    if (!chat) return 0;
    nlohmann::ordered_json ctx = s.template_kwargs;
    ctx["messages"] = s.messages;
    ctx["add_generation_prompt"] = s.add_generation_prompt;
    ctx["bos_token"] = "<s>";
    ctx["eos_token"] = "</s>";
    for (const auto& t : templates()) {
      try {
        (void)t->render(ctx);
      } catch (const tf::Error&) {
      }
    }
  } catch (const tf::Error&) {
  }
  return 0;
}
