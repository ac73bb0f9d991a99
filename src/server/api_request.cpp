#include "server/api_request.h"

#include <cmath>

#include "server/http_request.h"

namespace tf {

using ojson = nlohmann::ordered_json;

std::string ApiError::body() const {
  ojson err = {{"message", what()}, {"type", type}, {"param", param.empty() ? ojson(nullptr) : ojson(param)},
               {"code", code.empty() ? ojson(nullptr) : ojson(code)}};
  return ojson{{"error", err}}.dump(-1, ' ', false, ojson::error_handler_t::replace);
}

namespace {

[[noreturn]] void bad(const std::string& param, const std::string& msg) { throw ApiError(400, msg, param); }

double get_number(const ojson& j, const char* key, double lo, double hi) {
  const ojson& v = j.at(key);
  if (!v.is_number()) bad(key, cat("'", key, "' must be a number"));
  double d = v.get<double>();
  if (!std::isfinite(d) || d < lo || d > hi) bad(key, cat("'", key, "' must be between ", lo, " and ", hi, ", got ", v.dump()));
  return d;
}

int64_t get_int(const ojson& j, const char* key, int64_t lo, int64_t hi) {
  const ojson& v = j.at(key);
  if (v.is_number_float()) {
    double d = v.get<double>();
    if (!std::isfinite(d) || std::floor(d) != d) bad(key, cat("'", key, "' must be an integer"));
    // Cast only inside [-2^63, 2^63), where an int64 holds d; a bound like INT64_MAX rounds up
    // to 2^63 as a double, so the range is checked on the integer.
    if (d < -9223372036854775808.0 || d >= 9223372036854775808.0 || static_cast<int64_t>(d) < lo ||
        static_cast<int64_t>(d) > hi)
      bad(key, cat("'", key, "' must be between ", lo, " and ", hi, ", got ", v.dump()));
    return static_cast<int64_t>(d);
  }
  if (!v.is_number_integer()) bad(key, cat("'", key, "' must be an integer"));
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(hi))
    bad(key, cat("'", key, "' must be between ", lo, " and ", hi, ", got ", v.dump()));
  int64_t x = v.get<int64_t>();
  if (x < lo || x > hi) bad(key, cat("'", key, "' must be between ", lo, " and ", hi, ", got ", x));
  return x;
}

bool get_bool(const ojson& j, const char* key) {
  const ojson& v = j.at(key);
  if (!v.is_boolean()) bad(key, cat("'", key, "' must be a boolean"));
  return v.get<bool>();
}

bool present(const ojson& j, const char* key) { return j.contains(key) && !j.at(key).is_null(); }

std::vector<int32_t> token_ids(const ojson& arr, const char* param, const ApiLimits& lim) {
  std::vector<int32_t> ids;
  ids.reserve(arr.size());
  for (const auto& t : arr) {
    if (!t.is_number_integer()) bad(param, cat("'", param, "' token ids must be integers"));
    int64_t v = t.is_number_unsigned() && t.get<uint64_t>() > INT32_MAX ? INT64_MAX : t.get<int64_t>();
    if (v < 0 || v >= lim.vocab_size)
      bad(param, cat("token id ", t.dump(), " in '", param, "' is outside the vocabulary (0..", lim.vocab_size - 1, ")"));
    ids.push_back(static_cast<int32_t>(v));
  }
  return ids;
}

void parse_prompt(const ojson& p, CompletionSpec& s, const ApiLimits& lim) {
  auto too_many = [&] {
    if (static_cast<int>(s.prompts.size()) > lim.max_prompts) bad("prompt", cat("at most ", lim.max_prompts, " prompts per request"));
  };
  if (p.is_string()) {
    s.prompts.push_back({true, p.get<std::string>(), {}});
  } else if (p.is_array() && !p.empty() && p.front().is_number()) {
    s.prompts.push_back({false, {}, token_ids(p, "prompt", lim)});
  } else if (p.is_array() && !p.empty()) {
    for (const auto& item : p) {
      if (item.is_string()) s.prompts.push_back({true, item.get<std::string>(), {}});
      else if (item.is_array() && !item.empty()) s.prompts.push_back({false, {}, token_ids(item, "prompt", lim)});
      else bad("prompt", "'prompt' must be a string, a list of strings, a list of token ids or a list of such lists");
      too_many();
    }
  } else {
    bad("prompt", "'prompt' must be a non-empty string, a list of strings, a list of token ids or a list of such lists");
  }
}

void parse_messages(const ojson& m, CompletionSpec& s) {
  if (!m.is_array() || m.empty()) bad("messages", "'messages' must be a non-empty list");
  for (const auto& msg : m) {
    if (!msg.is_object()) bad("messages", "each message must be an object");
    if (!msg.contains("role") || !msg["role"].is_string()) bad("messages", "each message needs a string 'role'");
    if (msg.contains("content")) {
      const auto& c = msg["content"];
      if (!(c.is_string() || c.is_null() || c.is_array())) bad("messages", "message 'content' must be a string or a list of parts");
      if (c.is_array())
        for (const auto& part : c)
          if (!part.is_object() || (part.contains("type") && part["type"] != "text"))
            bad("messages", "only text content parts are supported");
    }
  }
  s.messages = m;
}

}  // namespace

ojson parse_request_json(const std::string& body) {
  ojson j;
  try {
    j = parse_json_capped<ojson>(body, [] {
      throw ApiError(400, cat("request body nests deeper than ", kMaxJsonDepth, " levels"));
    });
  } catch (const ApiError&) {
    throw;
  } catch (const std::exception& e) {
    throw ApiError(400, cat("request body is not valid JSON: ", e.what()));
  }
  if (!j.is_object()) throw ApiError(400, "request body must be a JSON object");
  return j;
}

CompletionSpec parse_completion_request(const std::string& body, bool chat, const ApiLimits& lim) {
  ojson j = parse_request_json(body);
  CompletionSpec s;
  s.chat = chat;
  if (present(j, "model")) {
    if (!j["model"].is_string()) bad("model", "'model' must be a string");
    s.model = j["model"].get<std::string>();
  }
  if (chat) {
    if (!j.contains("messages")) bad("messages", "'messages' is required");
    parse_messages(j["messages"], s);
    if (present(j, "add_generation_prompt")) s.add_generation_prompt = get_bool(j, "add_generation_prompt");
    if (present(j, "tools")) s.template_kwargs["tools"] = j["tools"];
    if (present(j, "chat_template_kwargs")) {
      if (!j["chat_template_kwargs"].is_object()) bad("chat_template_kwargs", "'chat_template_kwargs' must be an object");
      for (const auto& [k, v] : j["chat_template_kwargs"].items()) s.template_kwargs[k] = v;
    }
    if (present(j, "echo")) s.echo = get_bool(j, "echo");
  } else {
    if (!j.contains("prompt")) bad("prompt", "'prompt' is required");
    parse_prompt(j["prompt"], s, lim);
    if (present(j, "echo")) s.echo = get_bool(j, "echo");
  }
  if (present(j, "n")) s.n = static_cast<int>(get_int(j, "n", 1, lim.max_n));
  const char* mt = chat && present(j, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  if (present(j, mt)) s.max_tokens = static_cast<int>(get_int(j, mt, chat ? 1 : 0, lim.context));
  if (present(j, "temperature")) s.sampling.temperature = static_cast<float>(get_number(j, "temperature", 0, 2));
  if (present(j, "top_p")) {
    s.sampling.top_p = static_cast<float>(get_number(j, "top_p", 0, 1));
    if (s.sampling.top_p <= 0) bad("top_p", "'top_p' must be greater than 0");
  }
  if (present(j, "top_k")) {
    int64_t k = get_int(j, "top_k", -1, lim.vocab_size);
    s.sampling.top_k = k < 0 ? 0 : static_cast<int>(k);
  }
  if (present(j, "min_p")) s.sampling.min_p = static_cast<float>(get_number(j, "min_p", 0, 1));
  if (present(j, "presence_penalty")) s.sampling.presence_penalty = static_cast<float>(get_number(j, "presence_penalty", -2, 2));
  if (present(j, "frequency_penalty")) s.sampling.frequency_penalty = static_cast<float>(get_number(j, "frequency_penalty", -2, 2));
  if (present(j, "repetition_penalty")) {
    s.sampling.repetition_penalty = static_cast<float>(get_number(j, "repetition_penalty", 0, 10));
    if (s.sampling.repetition_penalty <= 0) bad("repetition_penalty", "'repetition_penalty' must be greater than 0");
  }
  if (present(j, "seed")) {
    s.sampling.seed = static_cast<uint64_t>(get_int(j, "seed", INT64_MIN, INT64_MAX));
    s.seed_given = true;
  }
  if (present(j, "stop")) {
    const auto& st = j["stop"];
    if (st.is_string()) {
      s.stop.push_back(st.get<std::string>());
    } else if (st.is_array()) {
      for (const auto& x : st) {
        if (!x.is_string()) bad("stop", "'stop' must be a string or a list of strings");
        s.stop.push_back(x.get<std::string>());
      }
    } else {
      bad("stop", "'stop' must be a string or a list of strings");
    }
    if (static_cast<int>(s.stop.size()) > lim.max_stop) bad("stop", cat("at most ", lim.max_stop, " stop sequences"));
    for (const auto& x : s.stop)
      if (x.empty() || x.size() > 1024) bad("stop", "stop sequences must be 1 to 1024 bytes long");
  }
  if (present(j, "stop_token_ids")) {
    if (!j["stop_token_ids"].is_array()) bad("stop_token_ids", "'stop_token_ids' must be a list of token ids");
    s.stop_token_ids = token_ids(j["stop_token_ids"], "stop_token_ids", lim);
  }
  if (present(j, "ignore_eos")) s.ignore_eos = get_bool(j, "ignore_eos");
  if (present(j, "stream")) s.stream = get_bool(j, "stream");
  if (present(j, "stream_options")) {
    const auto& so = j["stream_options"];
    if (!so.is_object()) bad("stream_options", "'stream_options' must be an object");
    if (!s.stream) bad("stream_options", "'stream_options' is only allowed when 'stream' is true");
    if (present(so, "include_usage")) s.include_usage = get_bool(so, "include_usage");
  }
  if (chat) {
    bool want = present(j, "logprobs") && get_bool(j, "logprobs");
    if (present(j, "top_logprobs")) {
      int64_t k = get_int(j, "top_logprobs", 0, lim.max_logprobs);
      if (!want) bad("top_logprobs", "'top_logprobs' needs 'logprobs': true");
      s.logprobs = static_cast<int>(k);
    } else if (want) {
      s.logprobs = 0;
    }
  } else if (present(j, "logprobs")) {
    s.logprobs = static_cast<int>(get_int(j, "logprobs", 0, lim.max_logprobs));
  }
  if (present(j, "return_token_ids")) s.return_token_ids = get_bool(j, "return_token_ids");
  if (present(j, "skip_special_tokens")) s.skip_special_tokens = get_bool(j, "skip_special_tokens");
  if (present(j, "cache_salt")) {
    if (!j["cache_salt"].is_string() || j["cache_salt"].get<std::string>().size() > 256)
      bad("cache_salt", "'cache_salt' must be a string of at most 256 bytes");
    s.cache_salt = j["cache_salt"].get<std::string>();
  }
  if (present(j, "draft") && !(j["draft"].is_boolean() || j["draft"].is_object() || j["draft"].is_number_integer()))
    bad("draft", "'draft' must be a boolean, an integer or an object");
  // Structured output is refused, not ignored: a client asking for JSON must not get free text.
  if (present(j, "response_format")) {
    const ojson& f = j["response_format"];
    if (!f.is_object() || !f.contains("type") || !f["type"].is_string())
      bad("response_format", "'response_format' must be an object with a string 'type'");
    if (f["type"] != "text")
      bad("response_format", cat("response_format type '", f["type"].get<std::string>(),
                                 "' is not supported (structured output is not implemented)"));
  }
  for (const char* key : {"grammar", "json_schema", "guided_json", "guided_regex", "guided_choice", "guided_grammar"})
    if (present(j, key)) bad(key, cat("'", key, "' is not supported (structured output is not implemented)"));
  return s;
}

}  // namespace tf
