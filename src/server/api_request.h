#pragma once
// Parsing and validation of /v1/completions and /v1/chat/completions bodies. Every bad
// field becomes an ApiError with the OpenAI status, type and the offending parameter.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/json_capped.h"
#include "engine/sampler.h"

namespace tf {

class ApiError : public Error {
 public:
  ApiError(int status, const std::string& message, std::string param = {},
           std::string type = "invalid_request_error", std::string code = {})
      : Error(message), status(status), param(std::move(param)), type(std::move(type)), code(std::move(code)) {}
  int status;
  std::string param, type, code;
  std::string body() const;
};

struct ApiLimits {
  int32_t vocab_size = 0;
  int context = 0;
  int max_n = 16;
  int max_prompts = 64;
  int max_stop = 16;
  int max_logprobs = 20;
};

// A prompt as given: text to tokenize, or token ids used exactly.
struct PromptInput {
  bool is_text = true;
  std::string text;
  std::vector<int32_t> ids;
};

struct CompletionSpec {
  bool chat = false;
  std::string model;
  std::vector<PromptInput> prompts;  // completions; chat fills messages instead
  nlohmann::ordered_json messages;   // chat
  nlohmann::ordered_json template_kwargs;  // chat: tools, chat_template_kwargs, ...
  bool add_generation_prompt = true;
  int n = 1;
  int max_tokens = -1;  // -1: not given
  SamplingParams sampling;
  bool seed_given = false;
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  bool stream = false;
  bool include_usage = false;
  bool echo = false;
  int logprobs = -1;  // -1 off; else number of top alternatives (0: the chosen token only)
  bool return_token_ids = false;
  bool skip_special_tokens = true;
  std::string cache_salt;
};

// A request body as a JSON object; ApiError 400 when it is not valid JSON, nests past
// kMaxJsonDepth or is not an object.
nlohmann::ordered_json parse_request_json(const std::string& body);

// Throws ApiError for malformed JSON, wrong types, and values out of range.
CompletionSpec parse_completion_request(const std::string& body, bool chat, const ApiLimits& limits);

}  // namespace tf
