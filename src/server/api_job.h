#pragma once
// One API request in flight: its choices (one engine request each), their text with stop
// sequences applied, and the JSON it streams or returns. Events arrive on the engine thread.
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "server/api_request.h"
#include "server/http_responder.h"
#include "server/metrics.h"
#include "tokenizer/tokenizer.h"

namespace tf {

struct ChoiceState {
  int index = 0;
  int prompt_index = 0;
  uint64_t engine_id = 0;
  std::vector<int32_t> tokens;
  std::string text;     // final text so far (stop sequences applied)
  std::string pending;  // decoded but held back: it could begin a stop sequence
  std::unique_ptr<StreamDecoder> decoder;
  bool done = false;
  std::string finish_reason;
  bool role_sent = false;
  int cached = 0;  // prompt tokens the engine adopted from the prompt cache
  nlohmann::ordered_json logprobs = nlohmann::ordered_json::array();  // per-token entries
  std::vector<std::optional<float>> echo_logprobs;  // prompt tokens' logprobs (echo)
  std::chrono::steady_clock::time_point last_token;
};

// A token's stream chunk without logprobs, the JSON written directly rather than built as a
// tree (the engine thread writes one a token); equal byte for byte to the tree's dump.
// head: chunk_head(); delta may hold any bytes (invalid UTF-8 becomes U+FFFD); token < 0: none.
std::string chunk_head(const std::string& id, const std::string& object, int64_t created, const std::string& model);
std::string token_chunk_json(const std::string& head, bool chat, int index, const std::string& delta, int32_t token);

class ApiJob : public std::enable_shared_from_this<ApiJob> {
 public:
  ApiJob(CompletionSpec spec, std::shared_ptr<HttpResponder> responder, const Tokenizer& tok,
         Metrics& metrics, std::string model_name);

  CompletionSpec spec;
  std::vector<std::vector<int32_t>> prompt_ids;  // one per prompt
  std::vector<std::string> echo_texts;           // what echo prepends, one per prompt
  std::vector<std::unique_ptr<ChoiceState>> choices;

  // Engine thread: a token or a finish for choice c.
  void on_event(ChoiceState& c, const TokenEvent& ev, Engine& engine);
  // Engine thread (echo with logprobs): logits of prompt row pos.
  void on_logits(ChoiceState& c, int pos, const float* logits, int32_t vocab);
  // Call once every choice is in place, before any engine event can arrive.
  void arm() { remaining_ = static_cast<int>(choices.size()); }
  // Starts the SSE stream (chat: the role chunk of every choice; completions with echo: the prompt).
  void start_stream();
  // The client left or the server is shutting down.
  void cancel(Engine& engine);
  // Fails the whole job with an error response (before any stream started) or stream end.
  void fail(const ApiError& err);

 private:
  // Adds decoded text, holding back what may begin a stop sequence; true when one matched.
  bool append_text(ChoiceState& c, const std::string& piece);
  void finish_choice(ChoiceState& c, const std::string& reason);
  void emit_chunk(ChoiceState& c, const std::string& delta, const nlohmann::ordered_json& lp, int32_t token);
  void complete();
  nlohmann::ordered_json usage() const;
  nlohmann::ordered_json choice_json(const ChoiceState& c) const;
  std::string dump(const nlohmann::ordered_json& j) const;

  std::shared_ptr<HttpResponder> responder_;
  const Tokenizer& tok_;
  Metrics& metrics_;
  std::string model_name_, id_;
  std::string chunk_head_;  // the stream chunks' fields before "index" (token_chunk_json)
  int64_t created_ = 0;
  size_t max_stop_ = 0;
  int remaining_ = 0;
  bool cancelled_ = false;
  bool first_token_seen_ = false;
  std::chrono::steady_clock::time_point start_;
  std::mutex mu_;
};

}  // namespace tf
